//! Content-addressed blobs: `<cache>/blobs/sha256/<hex>`. A blob is written to a temp file in
//! the same directory while it is hashed, fsync'd, and renamed to its digest only when the digest
//! is the one expected — so a blob's name is always the hash of its bytes, unless the disk
//! changed it afterwards, which [`Blobs::verify`] detects.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::model::Sha256Digest;

/// Hashes a file in 64 KiB reads (never the whole file in memory).
///
/// # Errors
/// The file cannot be opened or read.
pub fn hash_file(path: &Path) -> std::io::Result<Sha256Digest> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(Sha256Digest::finished(hasher))
}

/// An incremental writer of one blob.
pub struct BlobWriter {
    tmp: PathBuf,
    /// `None` only after `finish`.
    file: Option<std::fs::File>,
    hasher: Sha256,
    written: u64,
    limit: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("digest mismatch: expected {expected}, got {actual}")]
    Mismatch { expected: Sha256Digest, actual: Sha256Digest },
}

impl BlobError {
    /// Only the disk may come back by itself; a size or a digest that does not match is the
    /// content's, and downloading it again gives the same bytes.
    pub fn is_transient(&self) -> bool {
        matches!(self, BlobError::Io { .. })
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            BlobError::Io { .. } => "BlobWrite",
            BlobError::TooLarge { .. } => "TooLarge",
            BlobError::Mismatch { .. } => "DigestMismatch",
        }
    }
}

impl BlobWriter {
    /// Appends bytes. Fails (and the blob is abandoned) past the size limit.
    ///
    /// # Errors
    /// Over the limit, or the write failed (disk full, ...).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), BlobError> {
        self.written += chunk.len() as u64;
        if self.written > self.limit {
            return Err(BlobError::TooLarge { limit: self.limit });
        }
        self.hasher.update(chunk);
        match self.file.as_mut() {
            Some(f) => f.write_all(chunk).map_err(|source| BlobError::Io { path: self.tmp.clone(), source }),
            None => Ok(()),
        }
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Verifies against `expected` (when given), fsyncs and renames into place. On any error
    /// the temp file is gone and nothing is visible.
    ///
    /// # Errors
    /// Digest mismatch or I/O error.
    pub fn finish(mut self, blobs: &Blobs, expected: Option<&Sha256Digest>) -> Result<Sha256Digest, BlobError> {
        let tmp = self.tmp.clone();
        let file = self.file.take();
        let actual = Sha256Digest::finished(std::mem::take(&mut self.hasher));
        let result = (|| {
            if let Some(expected) = expected
                && *expected != actual
            {
                return Err(BlobError::Mismatch { expected: expected.clone(), actual: actual.clone() });
            }
            if let Some(file) = file {
                file.sync_all().map_err(|source| BlobError::Io { path: tmp.clone(), source })?;
            }
            let path = blobs.path(&actual);
            std::fs::rename(&tmp, &path).map_err(|source| BlobError::Io { path, source })
        })();
        // On error, Drop removes the temp file.
        result.map(|()| actual)
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        // Finished writers renamed the file away; abandoned ones leave nothing behind.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// The blob store under a cache root.
#[derive(Debug, Clone)]
pub struct Blobs {
    dir: PathBuf,
}

impl Blobs {
    /// # Errors
    /// The directory cannot be created.
    pub fn open(cache_root: &Path) -> std::io::Result<Blobs> {
        let dir = cache_root.join("blobs").join("sha256");
        std::fs::create_dir_all(&dir)?;
        // Temp files of interrupted downloads (of processes that are gone).
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp-") && super::is_abandoned(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(Blobs { dir })
    }

    pub fn path(&self, digest: &Sha256Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    pub fn contains(&self, digest: &Sha256Digest) -> bool {
        self.path(digest).is_file()
    }

    /// Starts a new blob of at most `limit` bytes.
    ///
    /// # Errors
    /// The temp file cannot be created.
    pub fn writer(&self, limit: u64) -> Result<BlobWriter, BlobError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(".tmp-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        let file = std::fs::File::create(&tmp).map_err(|source| BlobError::Io { path: tmp.clone(), source })?;
        Ok(BlobWriter { tmp, file: Some(file), hasher: Sha256::new(), written: 0, limit })
    }

    /// Re-hashes a blob. `Ok(false)` (and the blob is evicted) when its bytes no longer match its
    /// name: bit rot or tampering. Missing blobs are `Ok(false)`.
    ///
    /// # Errors
    /// The blob exists but cannot be read.
    pub fn verify(&self, digest: &Sha256Digest) -> std::io::Result<bool> {
        let path = self.path(digest);
        let actual = match hash_file(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let ok = actual == *digest;
        if !ok {
            std::fs::remove_file(&path)?;
        }
        Ok(ok)
    }

    /// Every blob present, for garbage collection.
    pub fn list(&self) -> Vec<Sha256Digest> {
        std::fs::read_dir(&self.dir)
            .map(|entries| entries.flatten().filter_map(|e| Sha256Digest::parse(&e.file_name().to_string_lossy())).collect())
            .unwrap_or_default()
    }

    pub fn remove(&self, digest: &Sha256Digest) -> std::io::Result<()> {
        std::fs::remove_file(self.path(digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_is_named_by_its_digest_and_mismatch_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let mut w = blobs.writer(100).unwrap();
        w.write(b"hello").unwrap();
        let d = w.finish(&blobs, Some(&Sha256Digest::of(b"hello"))).unwrap();
        assert_eq!(std::fs::read(blobs.path(&d)).unwrap(), b"hello");

        let mut w = blobs.writer(100).unwrap();
        w.write(b"evil").unwrap();
        let err = w.finish(&blobs, Some(&Sha256Digest::of(b"good"))).unwrap_err();
        assert!(matches!(err, BlobError::Mismatch { .. }));
        assert_eq!(std::fs::read_dir(dir.path().join("blobs/sha256")).unwrap().count(), 1);
    }

    #[test]
    fn size_limit_and_corruption_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let mut w = blobs.writer(4).unwrap();
        assert!(matches!(w.write(b"12345"), Err(BlobError::TooLarge { limit: 4 })));
        drop(w);
        let mut w = blobs.writer(100).unwrap();
        w.write(b"data").unwrap();
        let d = w.finish(&blobs, None).unwrap();
        assert!(blobs.verify(&d).unwrap());
        std::fs::write(blobs.path(&d), b"rot!").unwrap();
        assert!(!blobs.verify(&d).unwrap());
        assert!(!blobs.contains(&d), "a corrupt blob is evicted");
        assert_eq!(blobs.list(), Vec::new());
    }

    #[test]
    fn digests_parse() {
        let hex = "a".repeat(64);
        assert_eq!(Sha256Digest::parse(&format!("sha256:{hex}")).unwrap().hex(), hex);
        assert!(Sha256Digest::parse("sha256:abc").is_none());
        assert!(Sha256Digest::parse(&"g".repeat(64)).is_none());
    }
}
