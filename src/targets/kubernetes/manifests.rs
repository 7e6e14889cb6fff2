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

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(tree: &std::path::Path, fetched: bool) -> PreparedRelease {
        PreparedRelease {
            release: crate::release::Release {
                source: "s".into(),
                tag: "v1.0.0".into(),
                commit: "c".repeat(40),
                version: crate::model::version::Version::from_tag("v1.0.0").expect("version"),
            },
            tree: tree.to_path_buf(),
            fetched,
            note: None,
            assets: Vec::new(),
            unverified: None,
            signed_by: None,
            moved_tags_accepted: false,
        }
    }

    #[tokio::test]
    async fn a_release_is_read_once_and_again_when_its_prepare_wrote_it() {
        let tree = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(tree.path().join("manifests")).expect("mkdir");
        std::fs::write(tree.path().join("manifests/cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n").expect("write");
        let kept = KeptManifests::default();
        let first = kept.get(&prepared(tree.path(), false), "manifests").await.expect("read");
        let again = kept.get(&prepared(tree.path(), false), "manifests").await.expect("kept");
        assert!(Arc::ptr_eq(&first, &again), "read once");
        let fresh = kept.get(&prepared(tree.path(), true), "manifests").await.expect("read afresh");
        assert!(!Arc::ptr_eq(&first, &fresh), "a tree this prepare wrote is read afresh");
        assert!(kept.get(&prepared(tree.path(), false), "missing").await.is_err(), "no such directory");
    }
}
