//! Turning a GitHub release into a cached release tree: decide every asset's digest, download
//! what the blob store lacks (verified while streaming), then lay the tree out from blobs —
//! each asset as a file, each tar/tar.gz asset also safely unpacked beside it.

use std::collections::BTreeMap;
use std::path::Path;

use tracing::info;

use super::verify;
use super::{Client, GhRelease};
use crate::cache::blobs::Blobs;
use crate::cache::unpack;
use crate::model::Sha256Digest;
use crate::model::source::Verify;

/// The record of a tree's assets, written into the tree so a cached tree can be re-verified.
pub const MANIFEST: &str = ".stacksync-assets.json";

/// Limits and policy for one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub verify: Verify,
    /// `<tag>/<asset>` -> digest.
    pub pins: BTreeMap<String, Sha256Digest>,
    pub max_asset_bytes: u64,
    pub max_release_bytes: u64,
    pub unpack: unpack::Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            verify: Verify::Required,
            pins: BTreeMap::new(),
            max_asset_bytes: crate::model::source::DEFAULT_MAX_ASSET_BYTES,
            max_release_bytes: crate::model::source::DEFAULT_MAX_RELEASE_BYTES,
            unpack: unpack::Limits::default(),
        }
    }
}

use crate::model::verification::AssetRecord;

/// Why a GitHub release's assets could not be downloaded and verified.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("release {tag} has {total} bytes of assets, more than the limit of {limit}")]
    Declared { tag: String, total: u64, limit: u64 },
    #[error(
        "release {tag} has more than {limit} bytes of assets (maxReleaseSize), counting the bytes received (asset {asset} declared {declared} bytes, has {size})"
    )]
    Received { tag: String, limit: u64, asset: String, declared: u64, size: u64 },
    /// No digest to check the asset against, or sources of digests that disagree.
    #[error("{0}")]
    Unverifiable(String),
    #[error("{what}: {source}")]
    Read {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Github(#[source] super::Error),
    /// An asset cut short by what is left of the release's budget.
    #[error("{source} (maxReleaseSize {limit} counts the bytes received)")]
    Budget {
        limit: u64,
        #[source]
        source: Box<DownloadError>,
    },
}

impl DownloadError {
    /// Whether downloading again soon may succeed: the network, the API or the disk may come
    /// back; sizes and digests are the release's and stay what they are.
    pub fn is_transient(&self) -> bool {
        match self {
            DownloadError::Declared { .. } | DownloadError::Received { .. } | DownloadError::Unverifiable(_) => false,
            DownloadError::Read { .. } => true,
            DownloadError::Github(e) => e.is_transient(),
            DownloadError::Budget { source, .. } => source.is_transient(),
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            DownloadError::Declared { .. } | DownloadError::Received { .. } => "ReleaseTooLarge",
            DownloadError::Unverifiable(_) => "NoVerifiableDigest",
            DownloadError::Read { .. } => "BlobRead",
            DownloadError::Github(e) => e.reason(),
            DownloadError::Budget { source, .. } => source.reason(),
        }
    }
}

/// Why a release tree could not be laid out from its blobs.
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    #[error("assets {first} and {second} both need the path {stem}/ in the release tree; a release may hold only one of them")]
    Collision { first: String, second: String, stem: String },
    #[error("asset name {0:?} is not a plain file name")]
    BadName(String),
    #[error("bad digest {digest} for {asset}")]
    BadDigest { digest: String, asset: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("asset {asset}: {source}")]
    Unpack {
        asset: String,
        #[source]
        source: unpack::UnpackError,
    },
}

/// The disk may come back; an unsafe or unreadable archive, a bad name or a collision are the
/// release's.
impl crate::cache::Fill for FillError {
    fn is_transient(&self) -> bool {
        match self {
            FillError::Io { .. } => true,
            FillError::Unpack { source, .. } => source.is_transient(),
            FillError::Collision { .. } | FillError::BadName(_) | FillError::BadDigest { .. } => false,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            FillError::Collision { .. } | FillError::BadName(_) | FillError::BadDigest { .. } => "BadAssets",
            FillError::Io { .. } => "TreeWrite",
            FillError::Unpack { source, .. } if source.is_transient() => "TreeWrite",
            FillError::Unpack { .. } => "UnsafeArchive",
        }
    }
}

/// The blobs a materialised release tree was built from (its asset manifest): what garbage
/// collection must keep. Empty for a tree without one (a Git release).
pub fn referenced_blobs(tree: &std::path::Path) -> Vec<crate::model::Sha256Digest> {
    std::fs::read(tree.join(MANIFEST))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Vec<AssetRecord>>(&bytes).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|r| crate::model::Sha256Digest::parse(&r.digest))
        .collect()
}

/// Downloads (or finds in the blob store) every asset of `release`, each verified.
///
/// # Errors
/// A message naming the release and asset: no digest under `verify: required`, a digest
/// mismatch (the temp file is deleted, nothing is stored), a size limit, or a download failure.
pub async fn download_all(client: &Client, blobs: &Blobs, release: &GhRelease, opts: &Options) -> Result<Vec<AssetRecord>, DownloadError> {
    let total: u64 = release.assets.iter().map(|a| a.size).sum();
    if total > opts.max_release_bytes {
        return Err(DownloadError::Declared { tag: release.tag.clone(), total, limit: opts.max_release_bytes });
    }
    // Checksum assets first: they tell the digests of the others.
    let mut checksums = BTreeMap::new();
    for asset in release.assets.iter().filter(|a| verify::is_checksums_asset(&a.name)) {
        let pinned = opts.pins.get(&format!("{}/{}", release.tag, asset.name));
        let published = asset.digest.as_deref().and_then(Sha256Digest::parse);
        let limit = opts.max_asset_bytes.min(opts.max_release_bytes);
        let digest = fetch(client, blobs, release, asset, published.as_ref().or(pinned), limit).await?;
        let text = std::fs::read_to_string(blobs.path(&digest))
            .map_err(|source| DownloadError::Read { what: format!("reading {}", asset.name), source })?;
        let single = asset.name.strip_suffix(".sha256");
        checksums.extend(verify::parse_checksums(&text, single));
    }
    // The sizes the API declares are only a first filter: every download is capped by what is
    // left of the release budget, counting the bytes really received.
    let mut records = Vec::new();
    let mut received: u64 = 0;
    for asset in &release.assets {
        let expected = verify::expected(&release.tag, asset, &checksums, &opts.pins, opts.verify)
            .map_err(|e| DownloadError::Unverifiable(e.to_string()))?;
        let left = opts.max_release_bytes.saturating_sub(received);
        let limit = opts.max_asset_bytes.min(left);
        let digest = fetch(client, blobs, release, asset, expected.digest.as_ref(), limit).await.map_err(|e| {
            if limit < opts.max_asset_bytes { DownloadError::Budget { limit: opts.max_release_bytes, source: Box::new(e) } } else { e }
        })?;
        let size = std::fs::metadata(blobs.path(&digest))
            .map_err(|source| DownloadError::Read { what: format!("reading blob of {}", asset.name), source })?
            .len();
        received = received.saturating_add(size);
        if received > opts.max_release_bytes {
            return Err(DownloadError::Received {
                tag: release.tag.clone(),
                limit: opts.max_release_bytes,
                asset: asset.name.clone(),
                declared: asset.size,
                size,
            });
        }
        records.push(AssetRecord { name: asset.name.clone(), digest: digest.to_string(), verified_by: expected.by, size });
    }
    Ok(records)
}

async fn fetch(
    client: &Client,
    blobs: &Blobs,
    release: &GhRelease,
    asset: &super::GhAsset,
    expected: Option<&Sha256Digest>,
    limit: u64,
) -> Result<Sha256Digest, DownloadError> {
    if let Some(d) = expected {
        match blobs.verify(d) {
            Ok(true) => return Ok(d.clone()),
            Ok(false) => {}
            Err(source) => return Err(DownloadError::Read { what: format!("reading cached blob {d}"), source }),
        }
    }
    let digest = client.download(&release.tag, asset, blobs, expected, limit).await.map_err(DownloadError::Github)?;
    info!(tag = %release.tag, asset = %asset.name, digest = %digest, verified = expected.is_some(), "downloaded asset");
    Ok(digest)
}

/// Lays out the tree in `dest` from blobs: assets as files, archives also unpacked into
/// `<name without extension>/`, plus [`MANIFEST`]. Blocking.
///
/// # Errors
/// A blob is missing, a file cannot be written, or an archive is unsafe (the message names the
/// asset and the entry).
pub fn fill(blobs: &Blobs, records: &[AssetRecord], dest: &Path, limits: unpack::Limits) -> Result<u64, FillError> {
    // `manifests.tar` and `manifests.tar.gz` would unpack into one `manifests/`, mixing two
    // archives' files (and an asset named `manifests` would be clobbered): refuse, naming both.
    let mut claimed: BTreeMap<&str, &str> = records.iter().map(|r| (r.name.as_str(), r.name.as_str())).collect();
    for r in records.iter().filter(|r| unpack::is_archive(&r.name)) {
        if let Some(other) = claimed.insert(unpack::stem(&r.name), &r.name) {
            return Err(FillError::Collision { first: other.to_owned(), second: r.name.clone(), stem: unpack::stem(&r.name).to_owned() });
        }
    }
    let mut files = 0;
    for r in records {
        if r.name.contains(['/', '\\']) || r.name.starts_with('.') {
            return Err(FillError::BadName(r.name.clone()));
        }
        let digest =
            Sha256Digest::parse(&r.digest).ok_or_else(|| FillError::BadDigest { digest: r.digest.clone(), asset: r.name.clone() })?;
        let target = dest.join(&r.name);
        // A hard link makes the tree file and the blob one inode: corruption of either is seen
        // when the blob is verified. Copy where links are not possible.
        let blob = blobs.path(&digest);
        if std::fs::hard_link(&blob, &target).is_err() {
            std::fs::copy(&blob, &target).map_err(|source| FillError::Io { what: format!("copying {}", r.name), source })?;
        }
        files += 1;
        if unpack::is_archive(&r.name) {
            let dir = dest.join(unpack::stem(&r.name));
            std::fs::create_dir_all(&dir).map_err(|source| FillError::Io { what: format!("creating {}", dir.display()), source })?;
            files += unpack::unpack(&target, &dir, limits).map_err(|source| FillError::Unpack { asset: r.name.clone(), source })?;
        }
    }
    let manifest =
        serde_json::to_vec_pretty(records).map_err(|e| FillError::Io { what: format!("writing {MANIFEST}"), source: e.into() })?;
    std::fs::write(dest.join(MANIFEST), manifest).map_err(|source| FillError::Io { what: format!("writing {MANIFEST}"), source })?;
    Ok(files)
}

/// Reads a cached tree's asset records and re-hashes their blobs and tree files. `None` when
/// the tree has no readable manifest or any blob or asset file is missing or corrupt (corrupt
/// blobs are evicted).
pub fn verify_cached(tree: &Path, blobs: &Blobs) -> Option<Vec<AssetRecord>> {
    let bytes = std::fs::read(tree.join(MANIFEST)).ok()?;
    let records: Vec<AssetRecord> = serde_json::from_slice(&bytes).ok()?;
    for r in &records {
        let digest = Sha256Digest::parse(&r.digest)?;
        let file = tree.join(&r.name);
        let file_ok = same_inode(&file, &blobs.path(&digest)) || crate::cache::blobs::hash_file(&file).is_ok_and(|d| d == digest);
        if !file_ok || !blobs.verify(&digest).ok()? {
            tracing::warn!(asset = %r.name, digest = %r.digest, "cached blob is missing or corrupt; fetching the release again");
            return None;
        }
    }
    Some(records)
}

/// Whether two paths are hard links of one file (then one hash checks both).
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::verification::VerifiedBy;

    #[test]
    fn tar_and_tar_gz_of_one_name_were_merged() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let record = |name: &str| AssetRecord {
            name: name.into(),
            digest: "sha256:".to_owned() + &"a".repeat(64),
            verified_by: VerifiedBy::Published,
            size: 1,
        };
        let dest = dir.path().join("tree");
        std::fs::create_dir(&dest).unwrap();
        for pair in [["manifests.tar", "manifests.tar.gz"], ["manifests.tgz", "manifests"], ["a.tar", "a.tgz"]] {
            let err = fill(&blobs, &[record(pair[0]), record(pair[1])], &dest, unpack::Limits::default()).unwrap_err().to_string();
            assert!(err.contains(pair[0]) && err.contains(pair[1]) && err.contains("only one"), "{err}");
        }
    }
}
