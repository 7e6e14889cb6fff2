//! Manifest releases kept read and parsed: a release's files are read and parsed once
//! (`render::Manifests`), not once per Cluster; the releases in use at once are kept.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::controller::PreparedRelease;
use crate::model::sync::MutexExt;
use crate::render::Manifests;

/// Manifest releases read and parsed at once: the releases in use.
const KEPT_MANIFESTS: usize = 8;

/// Manifest releases read from the cache by (tree, directory), the most recent first.
#[derive(Default)]
pub(super) struct KeptManifests(Mutex<VecDeque<(PathBuf, String, Arc<Manifests>)>>);

impl KeptManifests {
    /// The manifests of a release's `dir`, read from its cache tree once (the tree was verified
    /// by the prepare that returned it); a tree this prepare wrote is read afresh.
    ///
    /// # Errors
    /// The release's files cannot be read or parsed.
    pub(super) async fn get(&self, prepared: &PreparedRelease, dir: &str) -> Result<Arc<Manifests>, crate::render::Errors> {
        let same = |(tree, d, _): &(PathBuf, String, _)| *tree == prepared.tree && d == dir;
        {
            let mut kept = self.0.locked();
            if prepared.fetched {
                kept.retain(|e| !same(e));
            } else if let Some(at) = kept.iter().position(same) {
                let entry = kept.remove(at).expect("found");
                let m = entry.2.clone();
                kept.push_front(entry);
                return Ok(m);
            }
        }
        let (tree, path) = (prepared.tree.clone(), dir.to_owned());
        let loaded = tokio::task::spawn_blocking(move || Manifests::load(&tree, &path)).await.unwrap_or_else(|e| {
            let source = crate::render::ReadError::io(std::io::Error::other(format!("the load task failed: {e}")));
            Err(crate::render::Errors(vec![crate::render::Error::ReadFile { file: dir.to_owned(), source }]))
        })?;
        let m = Arc::new(loaded);
        let mut kept = self.0.locked();
        kept.retain(|e| !same(e));
        kept.push_front((prepared.tree.clone(), dir.to_owned(), m.clone()));
        kept.truncate(KEPT_MANIFESTS);
        Ok(m)
    }
}
