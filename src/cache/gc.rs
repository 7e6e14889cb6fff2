//! Garbage collection of the cache: release trees no subscription uses or keeps, and blobs no
//! remaining tree references. Never removes a release in use.

use std::collections::BTreeSet;
use std::path::Path;

use tracing::{info, warn};

use super::blobs::Blobs;
use super::{Cache, Index};
use crate::model::Sha256Digest;

/// What a collection removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    pub releases: Vec<String>,
    pub blobs: usize,
}

/// Removes every cached release whose id is not in `keep`, then every blob no kept release tree
/// references (`references` names the blobs a tree uses; what a tree records is its source's
/// business). Errors removing single entries are logged and skipped: a failed collection never
/// fails a pass.
pub fn collect(cache: &Cache, index: &mut Index, keep: &BTreeSet<String>, references: impl Fn(&Path) -> Vec<Sha256Digest>) -> Collected {
    let mut out = Collected::default();
    let doomed: Vec<String> = index.releases.keys().filter(|id| !keep.contains(*id)).cloned().collect();
    for id in doomed {
        let Some(entry) = index.releases.get(&id) else { continue };
        let dir = cache.root().join(&entry.path);
        let _ = std::fs::remove_file(Cache::manifest_path(&dir));
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                warn!(release = %id, error = %e, "cannot remove cached release");
                continue;
            }
        }
        index.releases.remove(&id);
        out.releases.push(id);
    }
    if let Ok(blobs) = Blobs::open(cache.root()) {
        let referenced: BTreeSet<Sha256Digest> = index.releases.values().flat_map(|e| references(&cache.root().join(&e.path))).collect();
        for digest in blobs.list() {
            if !referenced.contains(&digest) && blobs.remove(&digest).is_ok() {
                out.blobs += 1;
            }
        }
    }
    if !out.releases.is_empty() || out.blobs > 0 {
        info!(releases = out.releases.len(), blobs = out.blobs, "garbage-collected the cache");
    }
    out
}
