//! The Git source end to end: Debian's `git daemon` on 127.0.0.1 serves a release repository,
//! tags are pushed, moved and deleted between polls, and stacksync follows (or refuses) them.

mod common;

use common::{Config, Sub, assert_exit, configmap, git_config, run_once, stacksync, status, stderr, stdout};
use testkit::git::{GitDaemon, ReleaseRepo};

const STACK: &str = "docker-ferrol-1-27";

struct Env {
    dir: tempfile::TempDir,
    repo: ReleaseRepo,
    daemon: GitDaemon,
}

impl Env {
    async fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let served = dir.path().join("served");
        std::fs::create_dir(&served).expect("mkdir");
        let repo = ReleaseRepo::create(&served, "stacks").expect("create repo");
        let daemon = GitDaemon::start(&served).await.expect("git daemon");
        Env { dir, repo, daemon }
    }

    fn config(&self, allow_moved_tags: bool) -> std::path::PathBuf {
        git_config(self.dir.path(), &self.daemon.url("stacks.git"))
            .source_set("stacks", "allowMovedTags", allow_moved_tags)
            .edit_sub("stack", |s| s.stack(STACK))
            .write()
    }

    fn out(&self) -> std::path::PathBuf {
        self.dir.path().join("out")
    }

    fn applied_tag(&self) -> String {
        status(&self.out(), "team-a", "alpha")["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
    }

    fn configmap_text(&self) -> String {
        std::fs::read_to_string(self.out().join("team-a/alpha/01-configmap-addons.yaml")).expect("manifest")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_pushed_between_polls_are_followed_incrementally() {
    let env = Env::new().await;
    env.repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    let config = env.config(false);

    let o = stacksync(&["--log-format", "json", "run", "--once", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert_eq!(env.applied_tag(), format!("{STACK}-v1"));
    assert!(env.configmap_text().contains("cluster: alpha"));
    // Every log line about the release names source, tag and commit.
    let synced_line = stderr(&o).lines().find(|l| l.contains("synced: ")).map(str::to_owned).expect("a synced line");
    let line: serde_json::Value = serde_json::from_str(&synced_line).expect("JSON log line");
    let release = line["spans"].as_array().and_then(|s| s.iter().find(|s| s["name"] == "release")).expect("release span");
    assert_eq!(release["tag"], format!("{STACK}-v1"));
    assert_eq!(release["source"], "stacks");
    assert!(release["commit"].as_str().is_some_and(|c| c.len() == 12));

    // The mirror is fetched into, never re-cloned: a marker in it survives the next poll.
    let mirror = std::fs::read_dir(env.dir.path().join("cache/git")).expect("git dir").flatten().next().expect("mirror").path();
    std::fs::write(mirror.join("stacksync-test-marker"), "x").expect("marker");

    env.repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "two"))]);
    let before = env.daemon.connections();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(env.daemon.connections() - before, 1, "one connection per poll");
    assert_eq!(env.applied_tag(), format!("{STACK}-v2"));
    assert!(env.configmap_text().contains("extra: two"));
    assert!(mirror.join("stacksync-test-marker").exists(), "mirror was re-created");
    assert!(stderr(&o).contains("new tag"), "{}", stderr(&o));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_tag_is_refused_unless_allowed() {
    let env = Env::new().await;
    let tag = format!("{STACK}-v1");
    let original = env.repo.release(&tag, &[("manifests/addons.yaml", &configmap("addons", "original"))]);
    let config = env.config(false);
    assert_exit(&run_once(&config).await, 0);

    env.repo.write("manifests/addons.yaml", &configmap("addons", "sneaky"));
    env.repo.commit("rewrite the release");
    env.repo.move_tag(&tag);
    let o = run_once(&config).await;
    // Refused, and said: the verified commit stays applied, the cluster is not Ready.
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("tag moved to another commit; refused"), "{}", stderr(&o));
    assert!(env.configmap_text().contains("original"), "the refused commit was applied");
    let st = status(&env.out(), "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["commit"], original);
    assert_eq!(st["reason"], "TagRefused", "{st:?}");
    assert!(st["message"].as_str().is_some_and(|m| m.contains("allowMovedTags")), "{st:?}");

    let config = env.config(true);
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("tag moved; accepted"), "{}", stderr(&o));
    assert!(env.configmap_text().contains("sneaky"));
    env.daemon.stop().await;
}

/// Regression: once the cache was gone (the index deleted as the corrupt-index error advises, or
/// the whole cache directory, as every restart of the shipped Deployment's emptyDir does), a
/// force-moved tag was taken for a new release and its content applied. The status file
/// remembers what was applied; the moved tag stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_stays_refused_after_the_cache_is_gone() {
    let env = Env::new().await;
    let tag = format!("{STACK}-v1");
    let original = env.repo.release(&tag, &[("manifests/addons.yaml", &configmap("addons", "original"))]);
    let config = env.config(false);
    assert_exit(&run_once(&config).await, 0);

    env.repo.write("manifests/addons.yaml", &configmap("addons", "sneaky"));
    env.repo.commit("rewrite the release");
    env.repo.move_tag(&tag);
    let cache = env.dir.path().join("cache");
    for forget in [cache.join("index.json"), cache.clone()] {
        if forget.is_dir() {
            std::fs::remove_dir_all(&forget).expect("remove the cache");
        } else {
            std::fs::remove_file(&forget).expect("remove the index");
        }
        let o = run_once(&config).await;
        assert_exit(&o, 1);
        let log = stderr(&o);
        assert!(log.contains("is what was applied; refused"), "{log}");
        assert!(env.configmap_text().contains("original"), "the moved tag was applied after removing {}", forget.display());
        let st = status(&env.out(), "team-a", "alpha");
        assert_eq!(st["appliedRelease"]["commit"], original);
        assert_eq!(st["reason"], "TagRefused", "{st:?}");
        assert_eq!(st["ready"], false, "{st:?}");
    }

    // Accepting moved tags is still the way to take it.
    let o = run_once(&env.config(true)).await;
    assert_exit(&o, 0);
    assert!(env.configmap_text().contains("sneaky"));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_tag_is_logged_and_never_downgrades() {
    let env = Env::new().await;
    env.repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    env.repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "two"))]);
    let config = env.config(false);
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(env.applied_tag(), format!("{STACK}-v2"));

    env.repo.delete_tag(&format!("{STACK}-v2"));
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("tag was deleted upstream"), "{}", stderr(&o));
    assert!(stderr(&o).contains("staying on it rather than downgrading"), "{}", stderr(&o));
    assert_eq!(env.applied_tag(), format!("{STACK}-v2"));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_pushed_branch_is_detected_and_logged() {
    let env = Env::new().await;
    env.repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    env.repo.write("notes.txt", "work in progress");
    env.repo.commit("wip");
    let config = env.config(false);
    assert_exit(&run_once(&config).await, 0);

    env.repo.force_push_amend("rewritten history");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("branch was force-pushed"), "{}", stderr(&o));
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_fetches_nothing_for_cached_releases() {
    let env = Env::new().await;
    env.repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    let config = env.config(false);
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().nth(1).and_then(|l| l.split_whitespace().nth(5)), Some("fetched"), "{}", stdout(&o));

    // Same server: the release is reported as cached, not fetched again.
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().nth(1).and_then(|l| l.split_whitespace().nth(5)), Some("cached"), "{}", stdout(&o));

    // Server gone: a restart still applies the cached release, with zero requests possible.
    let connections = env.daemon.connections();
    env.daemon.stop().await;
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("source poll failed; using the releases cached"), "{}", stderr(&o));
    assert_eq!(status(&env.dir.path().join("out"), "team-a", "alpha")["ready"], true);
    assert_eq!(connections, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_select_over_scs_and_semver_tags() {
    let env = Env::new().await;
    for tag in
        ["docker-ferrol-1-27-v1", "docker-ferrol-1-27-v2", "docker-ferrol-1-27-v10", "docker-ferrol-1-28-v3", "v1.0.0", "v1.2.0", "v2.0.0"]
    {
        env.repo.release(tag, &[("manifests/addons.yaml", &configmap("addons", tag))]);
    }
    let sub =
        |name: &str, version: &str, cluster: &str| Sub::new(name, "stacks").version(version).cluster("a", cluster, &[("region", "r")]);
    let config = Config::new(env.dir.path())
        .git("stacks", &env.daemon.url("stacks.git"))
        .sub(sub("newest", "*", "c1").stack(STACK))
        .sub(sub("below-ten", ">=v2, <v10", "c2").stack(STACK))
        .sub(sub("other-k8s", "*", "c3").stack("docker-ferrol-1-28"))
        .sub(sub("semver-one", "^1", "c4"))
        .sub(sub("semver-any", "*", "c5"))
        .directory()
        .write();
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    let table = stdout(&o);
    let chosen: Vec<(String, String)> = table
        .lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].to_owned(), cols[2].to_owned())
        })
        .collect();
    let want = [
        ("newest", "docker-ferrol-1-27-v10"),
        ("below-ten", "docker-ferrol-1-27-v2"),
        ("other-k8s", "docker-ferrol-1-28-v3"),
        ("semver-one", "v1.2.0"),
        ("semver-any", "v2.0.0"),
    ];
    let want: Vec<(String, String)> = want.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect();
    assert_eq!(chosen, want, "{table}");
    env.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_pinned_to_a_commit_is_refused_when_it_moves() {
    let env = Env::new().await;
    let tag = format!("{STACK}-v1");
    let pinned = env.repo.release(&tag, &[("manifests/addons.yaml", &configmap("addons", "pinned"))]);
    let config = env.config(true);
    let pin = |commit: &str| {
        let text = std::fs::read_to_string(&config).expect("read");
        let text =
            text.replace("      allowMovedTags: true\n", &format!("      allowMovedTags: true\n      pins:\n        {tag}: {commit}\n"));
        std::fs::write(&config, text).expect("write");
    };
    pin(&pinned);
    assert_exit(&run_once(&config).await, 0);

    // Even with allowMovedTags, a pin wins: the moved tag is not a release any more.
    env.repo.write("manifests/addons.yaml", &configmap("addons", "moved"));
    env.repo.commit("moved");
    env.repo.move_tag(&tag);
    let o = run_once(&config).await;
    assert!(stderr(&o).contains("tag does not point at its pinned commit; refused"), "{}", stderr(&o));
    assert!(env.configmap_text().contains("pinned"), "the moved tag was applied");
    env.daemon.stop().await;
}

/// Regression: a tag deleted upstream after a pass that refused it for a moved commit was said
/// only at INFO ("no longer advertised; staying on it"): the refused tag was not in the saved
/// source state, so its deletion was never noticed. Warned as any deleted tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_tag_deleted_upstream_is_warned_as_deleted() {
    let env = Env::new().await;
    let tag = format!("{STACK}-v1");
    let pinned = env.repo.release(&tag, &[("manifests/addons.yaml", &configmap("addons", "pinned"))]);
    // Moved tags are accepted, so the pin is what refuses it (a tag the moved-tag policy
    // refuses stays accepted at its old commit, and its deletion was always noticed).
    let config = git_config(env.dir.path(), &env.daemon.url("stacks.git"))
        .source_set("stacks", "allowMovedTags", true)
        .source_set("stacks", "pins", serde_json::json!({ tag.as_str(): pinned }))
        .edit_sub("stack", |s| s.stack(STACK))
        .write();
    assert_exit(&run_once(&config).await, 0);
    env.repo.write("manifests/addons.yaml", &configmap("addons", "moved"));
    env.repo.commit("moved");
    env.repo.move_tag(&tag);
    let o = run_once(&config).await;
    assert!(stderr(&o).contains("tag does not point at its pinned commit; refused"), "{}", stderr(&o));

    env.repo.delete_tag(&tag);
    let o = run_once(&config).await;
    let deleted = stderr(&o).lines().find(|l| l.contains("tag was deleted upstream")).map(str::to_owned);
    let deleted = deleted.unwrap_or_else(|| panic!("no deletion said: {}", stderr(&o)));
    assert!(deleted.contains(" WARN ") && deleted.contains(&tag), "{deleted}");
    assert_eq!(env.applied_tag(), tag, "the Cluster stays on what it runs");
    env.daemon.stop().await;
}

/// Regression: a tag deleted upstream was said at INFO for a Git source but at WARN for a
/// GitHub one (`github_source::a_deleted_release_is_warned_once_not_at_every_poll`). Said once
/// at WARN by the poll that sees it, whatever the kind, and not again at every poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tag_is_warned_once_not_at_every_poll() {
    let env = Env::new().await;
    env.repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    env.repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "two"))]);
    let config = git_config(env.dir.path(), &env.daemon.url("stacks.git")).edit_sub("stack", |s| s.stack(STACK).interval("1s")).write();
    let daemon = common::Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("v2 applied", std::time::Duration::from_secs(30), async || {
            common::applied_tag(&env.out(), "team-a", "alpha") == format!("{STACK}-v2")
        })
        .await;
    env.repo.delete_tag(&format!("{STACK}-v2"));
    common::assert_deletion_said_once(&daemon, "stacks", &format!("{STACK}-v2")).await;
    assert_eq!(env.applied_tag(), format!("{STACK}-v2"));
    daemon.stop().await;
    env.daemon.stop().await;
}
