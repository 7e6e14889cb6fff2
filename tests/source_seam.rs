//! The source seam, shown from outside the crate: a source kind written in this file — releases
//! as directories of a local folder, one per tag, each named by a digest of its content — goes
//! through the same poll, moved-tag policy, selection, download lock and verified cache as Git,
//! GitHub and OCI, with nothing else of stacksync changed. A kind that ships is exactly this
//! `impl` in a folder under `src/source/`, plus its arm in `config::SourceKind` (with its parser)
//! and its line in `source::of` (docs/architecture.md, "Adding a source").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use stacksync::cache::{Cache, Index, SourceState};
use stacksync::model::version::Constraint;
use stacksync::release::{self, Release};
use stacksync::source::{self, At, BoxFuture, Materialised, Polled, ReleaseError, RemoteRefs, Source};
use verify::{Trust, TrustFiles};

/// The tests of this binary, one at a time: cache cleanup and downloads exclude each other
/// process-wide, so one test's download would be another's "download in progress".
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Releases as `<root>/<tag>/…`: the "commit" of a tag is the SHA-256 of its files.
struct Folder {
    root: PathBuf,
    trust: TrustFiles,
}

impl Source for Folder {
    fn location(&self) -> String {
        format!("folder://{}", self.root.display())
    }

    fn allow_moved_tags(&self) -> bool {
        false
    }

    fn trust_files(&self) -> &TrustFiles {
        &self.trust
    }

    fn poll<'a>(&'a self, _at: At<'a>, _previous: &'a SourceState, _trust: Option<&'a Trust>) -> BoxFuture<'a, source::Result<Polled>> {
        Box::pin(async move {
            let mut tags = BTreeMap::new();
            for entry in std::fs::read_dir(&self.root).expect("read the folder") {
                let path = entry.expect("entry").path();
                let tag = path.file_name().and_then(|n| n.to_str()).expect("a tag").to_owned();
                tags.insert(tag, digest(&path));
            }
            Ok(Polled { refs: RemoteRefs { tags, heads: BTreeMap::new() }, ..Polled::default() })
        })
    }

    fn materialise<'a>(
        &'a self,
        at: At<'a>,
        _state: &'a SourceState,
        mut index: Index,
        rel: &'a Release,
    ) -> BoxFuture<'a, (Index, Result<Materialised, ReleaseError>)> {
        Box::pin(async move {
            let from = self.root.join(&rel.tag);
            let result = at.cache.release(&mut index, &rel.source, at.key, &rel.tag, &rel.commit, |tmp| copy(&from, tmp));
            let result = result.map(|(tree, fetched)| Materialised { tree, fetched, assets: Vec::new(), signed_by: None });
            (index, result.map_err(ReleaseError::Cache))
        })
    }
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read a release")
        .map(|e| {
            let path = e.expect("entry").path();
            (path.file_name().and_then(|n| n.to_str()).expect("name").to_owned(), std::fs::read(&path).expect("read"))
        })
        .collect();
    out.sort();
    out
}

fn digest(dir: &Path) -> String {
    let mut h = Sha256::new();
    for (name, bytes) in files(dir) {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(&bytes);
    }
    hex::encode(h.finalize())
}

fn copy(from: &Path, to: &Path) -> std::io::Result<u64> {
    let all = files(from);
    for (name, bytes) in &all {
        std::fs::write(to.join(name), bytes)?;
    }
    Ok(all.len() as u64)
}

fn release(root: &Path, tag: &str, body: &str) {
    std::fs::create_dir_all(root.join(tag)).expect("mkdir");
    std::fs::write(root.join(tag).join("cm.yaml"), body).expect("write");
}

#[tokio::test]
async fn a_source_kind_written_outside_the_crate_is_polled_selected_and_cached_like_the_shipped_ones() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("releases");
    release(&root, "v1.0.0", "kind: ConfigMap\nmetadata: {name: a}\n");
    release(&root, "v1.1.0", "kind: ConfigMap\nmetadata: {name: b}\n");
    let cache = Cache::open(&dir.path().join("cache")).expect("cache");
    let folder = Folder { root: root.clone(), trust: TrustFiles::default() };
    let key = source::key("folder", &folder);
    let at = At { name: "folder", key: &key, cache: &cache };

    let first = source::poll(&folder, at, &SourceState::default()).await.expect("poll");
    assert_eq!(first.tags.keys().collect::<Vec<_>>(), ["v1.0.0", "v1.1.0"]);
    assert_eq!(first.url, folder.location());

    let constraint = Constraint::parse(">=1.0.0").expect("constraint");
    let wanted = stacksync::model::Wanted {
        source: "folder",
        stack: None,
        kubernetes: None,
        version: ">=1.0.0",
        constraint: &constraint,
        auto_upgrade: true,
    };
    let selection = release::select(&wanted, &first.tags, None).expect("a release");
    assert_eq!(selection.release.tag, "v1.1.0");

    let (index, cached) = source::materialise(&folder, at, &first, Index::default(), &selection.release).await;
    let cached = cached.expect("materialised");
    assert!(cached.fetched);
    assert!(std::fs::read_to_string(cached.tree.join("cm.yaml")).expect("cached file").contains("name: b"));
    assert_eq!(index.releases.len(), 1);
    let (_, again) = source::materialise(&folder, at, &first, index, &selection.release).await;
    assert!(!again.expect("from the cache").fetched, "a cached release is not fetched again");

    // The moved-tag policy is the seam's, not the kind's: v1.0.0's content changes, it is refused.
    release(&root, "v1.0.0", "kind: ConfigMap\nmetadata: {name: changed}\n");
    let second = source::poll(&folder, at, &first).await.expect("poll");
    assert_eq!(second.tags["v1.0.0"], first.tags["v1.0.0"], "the moved tag stays at what was accepted");
    assert_eq!(second.refused["v1.0.0"], digest(&root.join("v1.0.0")));
}

/// Regression: cache cleanup deleted the blobs of a download in progress (referenced by no tree
/// yet), and the download failed with "No such file or directory". Cleanup is skipped while any
/// release is being materialised, and a materialisation waits for a cleanup under way.
#[tokio::test]
async fn cache_cleanup_never_runs_beside_a_download_in_progress() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("releases");
    release(&root, "v1.0.0", "kind: ConfigMap\nmetadata: {name: a}\n");
    let cache = Cache::open(&dir.path().join("cache")).expect("cache");
    let (entered, release_it) = (std::sync::Arc::new(tokio::sync::Notify::new()), std::sync::Arc::new(tokio::sync::Notify::new()));
    let slow = Slow { inner: Folder { root, trust: TrustFiles::default() }, entered: entered.clone(), release: release_it.clone() };
    let key = source::key("slow", &slow);
    let state = source::poll(&slow, At { name: "slow", key: &key, cache: &cache }, &SourceState::default()).await.expect("poll");
    let rel = Release {
        source: "slow".into(),
        tag: "v1.0.0".into(),
        commit: state.tags["v1.0.0"].clone(),
        version: stacksync::model::version::Version::from_tag("v1.0.0").expect("version"),
    };

    let cleaning = source::cleaning().expect("nothing is being materialised");
    let download = {
        let (cache, key, state, rel) = (cache.clone(), key.clone(), state.clone(), rel.clone());
        tokio::spawn(async move {
            let at = At { name: "slow", key: &key, cache: &cache };
            source::materialise(&slow, at, &state, Index::default(), &rel).await.1.map(|m| m.fetched)
        })
    };
    tokio::task::yield_now().await;
    assert!(!download.is_finished(), "a materialisation waits for the cleanup under way");
    drop(cleaning);
    entered.notified().await;
    assert!(source::cleaning().is_none(), "no cleanup while a download is in progress");
    release_it.notify_one();
    let fetched = tokio::time::timeout(std::time::Duration::from_secs(30), download).await.expect("bounded").expect("task");
    assert!(fetched.expect("materialised"), "the release was fetched");
    assert!(source::cleaning().is_some(), "cleanup runs once the download is done");
}

/// [`Folder`], whose materialisation says it started and then waits to be let go.
struct Slow {
    inner: Folder,
    entered: std::sync::Arc<tokio::sync::Notify>,
    release: std::sync::Arc<tokio::sync::Notify>,
}

impl Source for Slow {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn allow_moved_tags(&self) -> bool {
        false
    }

    fn trust_files(&self) -> &TrustFiles {
        self.inner.trust_files()
    }

    fn poll<'a>(&'a self, at: At<'a>, previous: &'a SourceState, trust: Option<&'a Trust>) -> BoxFuture<'a, source::Result<Polled>> {
        self.inner.poll(at, previous, trust)
    }

    fn materialise<'a>(
        &'a self,
        at: At<'a>,
        state: &'a SourceState,
        index: Index,
        rel: &'a Release,
    ) -> BoxFuture<'a, (Index, Result<Materialised, ReleaseError>)> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            self.inner.materialise(at, state, index, rel).await
        })
    }
}
