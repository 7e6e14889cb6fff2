//! A damaged cache: release trees edited, emptied or deleted on the volume, a damaged Git mirror,
//! a cache directory that cannot be written.

use std::path::PathBuf;

use crate::common::{assert_exit, configmap, git_config, run_once, stderr};
use testkit::git::{GitDaemon, ReleaseRepo};

const STACK: &str = "docker-ferrol-1-27";

struct Env {
    dir: tempfile::TempDir,
    repo: ReleaseRepo,
    daemon: GitDaemon,
    config: PathBuf,
}

impl Env {
    /// A Git source with one release of two ConfigMaps, synced once into a directory target.
    async fn synced() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let served = dir.path().join("served");
        std::fs::create_dir(&served).unwrap();
        let repo = ReleaseRepo::create(&served, "stacks").unwrap();
        repo.release(
            &format!("{STACK}-v1"),
            &[("manifests/addons.yaml", &configmap("addons", "one")), ("manifests/extra.yaml", &configmap("extra", "two"))],
        );
        let daemon = GitDaemon::start(&served).await.unwrap();
        let config = git_config(dir.path(), &daemon.url("stacks.git")).edit_sub("stack", |s| s.stack(STACK)).write();
        let env = Env { dir, repo, daemon, config };
        assert_exit(&run_once(&env.config).await, 0);
        env
    }

    fn tree(&self) -> PathBuf {
        let releases = self.dir.path().join("cache/releases");
        let key = std::fs::read_dir(&releases).unwrap().flatten().next().unwrap().path();
        std::fs::read_dir(&key).unwrap().flatten().map(|e| e.path()).find(|p| p.is_dir()).unwrap()
    }

    fn mirror(&self) -> PathBuf {
        std::fs::read_dir(self.dir.path().join("cache/git")).unwrap().flatten().next().unwrap().path()
    }

    fn applied(&self, name: &str) -> Option<String> {
        let suffix = format!("-configmap-{name}.yaml");
        let dir = std::fs::read_dir(self.dir.path().join("out/team-a/alpha")).ok()?;
        let file = dir.flatten().find(|e| e.file_name().to_string_lossy().ends_with(&suffix))?;
        std::fs::read_to_string(file.path()).ok()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_release_tree_was_applied() {
    let env = Env::synced().await;
    std::fs::write(env.tree().join("manifests/addons.yaml"), configmap("addons", "tampered")).unwrap();
    let o = run_once(&env.config).await;
    assert_exit(&o, 0);
    assert!(env.applied("addons").unwrap().contains("extra: one"), "tampered content was applied");
    assert!(stderr(&o).contains("manifests/addons.yaml was modified"), "{}", stderr(&o));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_deleted_from_release_tree_was_pruned() {
    let env = Env::synced().await;
    std::fs::remove_file(env.tree().join("manifests/extra.yaml")).unwrap();
    let o = run_once(&env.config).await;
    assert_exit(&o, 0);
    assert!(env.applied("extra").is_some(), "an object of the deleted file was pruned: {}", stderr(&o));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emptied_release_tree_never_healed() {
    let env = Env::synced().await;
    let tree = env.tree();
    std::fs::remove_dir_all(&tree).unwrap();
    std::fs::create_dir(&tree).unwrap();
    let o = run_once(&env.config).await;
    assert_exit(&o, 0);
    assert!(env.applied("addons").is_some() && env.applied("extra").is_some(), "{}", stderr(&o));
    assert!(env.tree().join("manifests/addons.yaml").is_file(), "the tree was not materialised again");
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_git_mirror_failed_every_poll() {
    let env = Env::synced().await;
    let mirror = env.mirror();
    // Every object of the mirror gone (a disk that lost files), and the release tree with them,
    // so the next pass needs the mirror; a new release makes the poll fetch.
    std::fs::remove_dir_all(mirror.join("objects")).unwrap();
    std::fs::create_dir_all(mirror.join("objects/pack")).unwrap();
    std::fs::remove_dir_all(env.tree()).unwrap();
    env.repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "three"))]);
    let o = run_once(&env.config).await;
    assert_exit(&o, 0);
    assert!(env.applied("addons").unwrap().contains("extra: three"), "{}", stderr(&o));
    assert!(stderr(&o).contains("mirror"), "{}", stderr(&o));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_git_mirror_config_failed_every_poll() {
    let env = Env::synced().await;
    std::fs::write(env.mirror().join("config"), "[core\n\u{0}garbage").unwrap();
    std::fs::write(env.mirror().join("HEAD"), "").unwrap();
    env.repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "three"))]);
    let o = run_once(&env.config).await;
    assert_exit(&o, 0);
    assert!(env.applied("addons").unwrap().contains("extra: three"), "{}", stderr(&o));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_disk_full_lost_the_applied_release() {
    // A cache that cannot be written (a read-only releases directory stands in for a full disk):
    // the new release fails with a clear error naming the path; what was applied stays.
    let env = Env::synced().await;
    env.repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "three"))]);
    // root ignores permission bits, so a file where the work directory should be stands in.
    let tmp = env.dir.path().join("cache/tmp");
    std::fs::remove_dir_all(&tmp).unwrap();
    std::fs::write(&tmp, "not a directory").unwrap();
    let o = run_once(&env.config).await;
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("cache/tmp"), "the error does not name the path: {}", stderr(&o));
    std::fs::remove_file(&tmp).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    assert!(env.applied("addons").unwrap().contains("extra: one"), "the applied release was lost");
    let o = run_once(&env.config).await;
    assert_exit(&o, 0);
    assert!(env.applied("addons").unwrap().contains("extra: three"), "{}", stderr(&o));
    env.daemon.stop().await;
}
