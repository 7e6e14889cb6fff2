//! Turning a GitHub release into a cached release tree: decide every asset's digest, download
//! what the blob store lacks (verified while streaming), then lay the tree out from blobs —
//! each asset as a file, each tar/tar.gz asset also safely unpacked beside it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tracing::info;

use super::verify::{self, VerifiedBy, Verify};
use super::{Client, GhRelease};
use crate::cache::blobs::{Blobs, Sha256Digest};
use crate::cache::unpack;

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
            max_asset_bytes: 256 * 1024 * 1024,
            max_release_bytes: 1024 * 1024 * 1024,
            unpack: unpack::Limits::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssetRecord {
    pub name: String,
    pub digest: Sha256DigestText,
    pub verified_by: VerifiedBy,
    pub size: u64,
}

/// The blobs a materialised release tree was built from (its asset manifest): what garbage
/// collection must keep. Empty for a tree without one (a Git release).
pub fn referenced_blobs(tree: &std::path::Path) -> Vec<crate::cache::blobs::Sha256Digest> {
    std::fs::read(tree.join(MANIFEST))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Vec<AssetRecord>>(&bytes).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|r| crate::cache::blobs::Sha256Digest::parse(&r.digest))
        .collect()
}

/// A digest as text in records (`sha256:<hex>`).
pub type Sha256DigestText = String;

/// Downloads (or finds in the blob store) every asset of `release`, each verified.
///
/// # Errors
/// A message naming the release and asset: no digest under `verify: required`, a digest
/// mismatch (the temp file is deleted, nothing is stored), a size limit, or a download failure.
pub async fn download_all(client: &Client, blobs: &Blobs, release: &GhRelease, opts: &Options) -> Result<Vec<AssetRecord>, String> {
    let total: u64 = release.assets.iter().map(|a| a.size).sum();
    if total > opts.max_release_bytes {
        return Err(format!("release {} has {total} bytes of assets, more than the limit of {}", release.tag, opts.max_release_bytes));
    }
    // Checksum assets first: they tell the digests of the others.
    let mut checksums = BTreeMap::new();
    for asset in release.assets.iter().filter(|a| verify::is_checksums_asset(&a.name)) {
        let pinned = opts.pins.get(&format!("{}/{}", release.tag, asset.name));
        let published = asset.digest.as_deref().and_then(Sha256Digest::parse);
        let limit = opts.max_asset_bytes.min(opts.max_release_bytes);
        let digest = fetch(client, blobs, release, asset, published.as_ref().or(pinned), limit).await?;
        let text = std::fs::read_to_string(blobs.path(&digest)).map_err(|e| format!("reading {}: {e}", asset.name))?;
        let single = asset.name.strip_suffix(".sha256");
        checksums.extend(verify::parse_checksums(&text, single));
    }
    // The sizes the API declares are only a first filter: every download is capped by what is
    // left of the release budget, counting the bytes really received.
    let mut records = Vec::new();
    let mut received: u64 = 0;
    for asset in &release.assets {
        let expected = verify::expected(&release.tag, asset, &checksums, &opts.pins, opts.verify)?;
        let left = opts.max_release_bytes.saturating_sub(received);
        let limit = opts.max_asset_bytes.min(left);
        let digest = fetch(client, blobs, release, asset, expected.digest.as_ref(), limit).await.map_err(|e| {
            if limit < opts.max_asset_bytes {
                format!("{e} (maxReleaseSize {} counts the bytes received)", opts.max_release_bytes)
            } else {
                e
            }
        })?;
        let size = std::fs::metadata(blobs.path(&digest)).map_err(|e| format!("reading blob of {}: {e}", asset.name))?.len();
        received = received.saturating_add(size);
        if received > opts.max_release_bytes {
            return Err(format!(
                "release {} has more than {} bytes of assets (maxReleaseSize), counting the bytes received (asset {} declared {} bytes, has {size})",
                release.tag, opts.max_release_bytes, asset.name, asset.size
            ));
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
) -> Result<Sha256Digest, String> {
    if let Some(d) = expected {
        match blobs.verify(d) {
            Ok(true) => return Ok(d.clone()),
            Ok(false) => {}
            Err(e) => return Err(format!("reading cached blob {d}: {e}")),
        }
    }
    let digest = client.download(&release.tag, asset, blobs, expected, limit).await.map_err(|e| e.to_string())?;
    info!(tag = %release.tag, asset = %asset.name, digest = %digest, verified = expected.is_some(), "downloaded asset");
    Ok(digest)
}

/// Lays out the tree in `dest` from blobs: assets as files, archives also unpacked into
/// `<name without extension>/`, plus [`MANIFEST`]. Blocking.
///
/// # Errors
/// A blob is missing, a file cannot be written, or an archive is unsafe (the message names the
/// asset and the entry).
pub fn fill(blobs: &Blobs, records: &[AssetRecord], dest: &Path, limits: unpack::Limits) -> Result<u64, String> {
    // `manifests.tar` and `manifests.tar.gz` would unpack into one `manifests/`, mixing two
    // archives' files (and an asset named `manifests` would be clobbered): refuse, naming both.
    let mut claimed: BTreeMap<&str, &str> = records.iter().map(|r| (r.name.as_str(), r.name.as_str())).collect();
    for r in records.iter().filter(|r| unpack::is_archive(&r.name)) {
        if let Some(other) = claimed.insert(unpack::stem(&r.name), &r.name) {
            return Err(format!(
                "assets {other} and {} both need the path {}/ in the release tree; a release may hold only one of them",
                r.name,
                unpack::stem(&r.name)
            ));
        }
    }
    let mut files = 0;
    for r in records {
        if r.name.contains(['/', '\\']) || r.name.starts_with('.') {
            return Err(format!("asset name {:?} is not a plain file name", r.name));
        }
        let digest = Sha256Digest::parse(&r.digest).ok_or_else(|| format!("bad digest {} for {}", r.digest, r.name))?;
        let target = dest.join(&r.name);
        // A hard link makes the tree file and the blob one inode: corruption of either is seen
        // when the blob is verified. Copy where links are not possible.
        let blob = blobs.path(&digest);
        if std::fs::hard_link(&blob, &target).is_err() {
            std::fs::copy(&blob, &target).map_err(|e| format!("copying {}: {e}", r.name))?;
        }
        files += 1;
        if unpack::is_archive(&r.name) {
            let dir = dest.join(unpack::stem(&r.name));
            std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            files += unpack::unpack(&target, &dir, limits).map_err(|e| format!("asset {}: {e}", r.name))?;
        }
    }
    let manifest = serde_json::to_vec_pretty(records).map_err(|e| e.to_string())?;
    std::fs::write(dest.join(MANIFEST), manifest).map_err(|e| format!("writing {MANIFEST}: {e}"))?;
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
            let err = fill(&blobs, &[record(pair[0]), record(pair[1])], &dest, unpack::Limits::default()).unwrap_err();
            assert!(err.contains(pair[0]) && err.contains(pair[1]) && err.contains("only one"), "{err}");
        }
    }
}
