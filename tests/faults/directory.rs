//! The directory target under faults: a source that never finishes (a GitHub storage host
//! trickling one byte every two seconds) must hold up only the subscription that downloads from
//! it — the other keeps syncing on its interval, a config edit is applied at once, SIGTERM does
//! not wait for it; a status file that cannot be written stops the apply it would describe.

use std::path::Path;
use std::time::{Duration, Instant};

use testkit::git::ReleaseRepo;
use testkit::github::GithubServer;

use crate::common::{Config, Daemon, Sub, assert_exit, configmap, git_config, helm_path, run_once, save_by_rename, stdout, targz};

const REPO: &str = "acme/stacks";

/// Two sources and a subscription on each: `fast` (Git, polled every `fast_interval`) for
/// team-a/alpha with `region`, `slow` (GitHub, polled every 2 s) for team-b/beta.
fn config(dir: &Path, git_url: &str, api_url: &str, region: &str, fast_interval: &str) -> Config {
    Config::new(dir)
        .git("stacks", git_url)
        .github("gh", REPO, api_url)
        .sub(Sub::new("fast", "stacks").version("*").interval(fast_interval).cluster("team-a", "alpha", &[("region", region)]))
        .sub(Sub::new("slow", "gh").version("*").interval("2s").cluster("team-b", "beta", &[("region", "eu-1")]))
        .directory()
        .at(&dir.join("conf/stacksync.yaml"))
}

/// How many syncs of `subscription` the daemon logged.
fn syncs(log: &str, subscription: &str) -> usize {
    log.lines().filter(|l| l.contains("subscription synced") && l.contains(&format!("subscription={subscription} "))).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_download_starved_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let repo = ReleaseRepo::create(dir.path(), "stacks").unwrap();
    repo.release("v1.0.0", &[("manifests/cm.yaml", &configmap("fast", "one"))]);
    let server = GithubServer::start().await.unwrap();
    server.add_release(REPO, "v1.0.0", &[("manifests.tar.gz".into(), targz(&[("cm.yaml", &configmap("slow", "one"))]))], false, false);
    server.trickle_storage(Some(Duration::from_secs(2)));
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let path = config(dir.path(), &repo.file_url(), &server.api_url(), "eu-1", "2s").write();
    let fast = dir.path().join("out/team-a/alpha/01-configmap-fast.yaml");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();

    let daemon = Daemon::start(&path, dir.path().join("daemon.log")).await;
    daemon.eventually("the Git subscription's first sync", Duration::from_secs(30), async || read(&fast).contains("extra: one")).await;
    daemon.eventually("the trickled download began", Duration::from_secs(30), async || server.count("/storage/") > 0).await;

    // The download runs on (a few bytes in 10 minutes); the Git subscription syncs on its
    // interval meanwhile: three more syncs take about 6 s.
    let before = syncs(&daemon.log(), "fast");
    let took = daemon
        .eventually("three more syncs of the Git subscription", Duration::from_secs(30), async || {
            syncs(&daemon.log(), "fast") >= before + 3
        })
        .await;
    eprintln!("three syncs of `fast` beside the trickling download took {took:?}");
    repo.release("v1.1.0", &[("manifests/cm.yaml", &configmap("fast", "two"))]);
    daemon.eventually("a new Git release applied", Duration::from_secs(30), async || read(&fast).contains("extra: two")).await;

    // A config edit is applied at once (the watcher's debounce included): it also sets `fast`'s
    // interval to an hour, so only the reload can have applied it.
    let edit = config(dir.path(), &repo.file_url(), &server.api_url(), "eu-2", "1h").text();
    let edited = Instant::now();
    save_by_rename(&path, &edit);
    daemon.eventually("the config edit applied", Duration::from_secs(30), async || read(&fast).contains("region: eu-2")).await;
    let applied = edited.elapsed();
    eprintln!("config edit applied after {applied:?} beside the trickling download");

    // Still downloading: nothing of `slow` was written, and SIGTERM does not wait for it.
    assert!(!dir.path().join("out/team-b/beta/01-configmap-slow.yaml").exists());
    daemon.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_status_file_reported_the_old_release_while_the_new_one_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let repo = ReleaseRepo::create(dir.path(), "stacks").unwrap();
    repo.release("v1.0.0", &[("manifests/cm.yaml", &configmap("cm", "one"))]);
    let config = git_config(dir.path(), &repo.file_url()).write();
    assert_exit(&run_once(&config).await, 0);

    // The status directory becomes a file (tests run as root, which ignores permission bits).
    let statuses = dir.path().join("out/status/team-a");
    std::fs::remove_dir_all(&statuses).unwrap();
    std::fs::write(&statuses, "not a directory").unwrap();
    repo.release("v2.0.0", &[("manifests/cm.yaml", &configmap("cm", "two"))]);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("nothing of v2.0.0 was applied") && stdout(&o).contains("0/1 clusters ready"), "{}", stdout(&o));
    let applied = dir.path().join("out/team-a/alpha/01-configmap-cm.yaml");
    assert!(std::fs::read_to_string(&applied).unwrap().contains("extra: one"), "v2 was written without a status saying so");

    std::fs::remove_file(&statuses).unwrap();
    assert_exit(&run_once(&config).await, 0);
    assert!(std::fs::read_to_string(&applied).unwrap().contains("extra: two"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_stacks_sharing_a_namespace_are_synced_by_the_daemon_one_subscription_at_a_time() {
    // Two cluster-stack subscriptions with clusters in team-a, one on v2, one on v3: each syncs
    // on its own, and the namespace's cluster-class/ keeps the ClusterClass objects of both (a
    // sync of one never prunes the other's).
    let dir = tempfile::tempdir().unwrap();
    let repo = ReleaseRepo::create(dir.path(), "stacks").unwrap();
    crate::common::fleet::publish(&repo, "docker-ferrol-1-27-v2");
    crate::common::fleet::publish(&repo, "docker-ferrol-1-27-v3");
    let sub = |name: &str, version: &str, cluster: &str, host: &str| {
        Sub::new(name, "stacks").clusterstack("docker-ferrol-1-27").version(version).stack_cluster("team-a", cluster, host, "10.1.0.0/16")
    };
    let config = |alpha_host: &str| {
        Config::new(dir.path())
            .helm(&helm_path())
            .git("stacks", &repo.file_url())
            .sub(sub("one", "v2", "alpha", alpha_host))
            .sub(sub("two", "v3", "beta", "beta.example.test"))
            .directory()
            .at(&dir.path().join("conf/stacksync.yaml"))
    };
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let path = config("alpha.example.test").write();
    let out = dir.path().join("out");
    let files = |d: &str| std::fs::read_dir(out.join(d)).map(|r| r.count()).unwrap_or(0);
    let classes = || {
        let names: Vec<String> = std::fs::read_dir(out.join("team-a/cluster-class"))
            .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let has = |v: &str| names.iter().any(|n| n.ends_with(&format!("-clusterclass-docker-ferrol-1-27-{v}.yaml")));
        has("v2") && has("v3")
    };
    let ms = out.join("team-a/alpha/03-deployment-metrics-server.yaml");

    let daemon = Daemon::start(&path, dir.path().join("daemon.log")).await;
    daemon
        .eventually("both subscriptions synced", Duration::from_secs(60), async || {
            classes() && files("team-a/alpha") > 0 && files("team-a/beta") > 0
        })
        .await;
    // An edit of `one` re-syncs it alone; `two`'s objects in cluster-class/ stay.
    save_by_rename(&path, &config("alpha-2.example.test").text());
    daemon
        .eventually("the edit of `one` applied", Duration::from_secs(30), async || {
            std::fs::read_to_string(&ms).is_ok_and(|t| t.contains("alpha-2.example.test"))
        })
        .await;
    assert!(classes(), "a sync of `one` pruned the ClusterClass of `two`");
    assert!(files("team-a/beta") > 0);
    daemon.stop().await;
}
