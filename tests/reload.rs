//! Hot reload of the running daemon: a valid edit (saved by rename, as editors do) takes effect
//! without a restart; an invalid edit is logged with its errors and the last good config keeps
//! running; SIGTERM stops the daemon cleanly.

mod common;

use std::time::Duration;

use common::{Config, Daemon, Sub, configmap, save_by_rename};
use testkit::git::ReleaseRepo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_edit_applies_and_invalid_edit_keeps_last_good_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    let conf_dir = dir.path().join("conf");
    std::fs::create_dir(&conf_dir).expect("mkdir");
    let config = |clusters: &[(&str, &str, &str)]| {
        let sub = clusters
            .iter()
            .fold(Sub::new("stack", "stacks").version("*"), |s, (ns, name, region)| s.cluster(ns, name, &[("region", region)]));
        Config::new(dir.path()).git("stacks", &repo.file_url()).sub(sub).directory().at(&conf_dir.join("stacksync.yaml"))
    };
    let one = config(&[("team-a", "alpha", "eu-1")]);
    let path = one.write();

    let daemon = Daemon::start(&path, dir.path().join("stacksync.log")).await;
    let out = dir.path().join("out");
    let within = Duration::from_secs(60);
    daemon.eventually("the first pass", within, async || out.join("status/team-a/alpha.yaml").exists()).await;

    // A valid edit: a second cluster and a changed value.
    save_by_rename(&path, &config(&[("team-a", "alpha", "eu-2"), ("team-b", "beta", "us-1")]).text());
    daemon.eventually("the new cluster", within, async || out.join("status/team-b/beta.yaml").exists()).await;
    assert!(daemon.log_has("cluster team-b/beta added"), "{}", daemon.log());
    let alpha = std::fs::read_to_string(out.join("team-a/alpha/01-configmap-cfg.yaml")).expect("alpha manifest");
    assert!(alpha.contains("region: eu-2"), "{alpha}");

    // An invalid edit: rejected with file, line and field; the daemon keeps the last good config.
    save_by_rename(&path, "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: /tmp}\nsubscriptions: 3\n");
    daemon.logged("config reload rejected; keeping the last good config", within).await;
    assert!(daemon.log_has("field=subscriptions"), "{}", daemon.log());
    assert!(daemon.log_has("line=4"), "{}", daemon.log());

    // The daemon still runs the last good config and picks up the next valid edit.
    save_by_rename(&path, &one.text());
    daemon.logged("cluster team-b/beta removed", within).await;
    daemon
        .eventually("alpha back on eu-1", within, async || {
            std::fs::read_to_string(out.join("team-a/alpha/01-configmap-cfg.yaml")).is_ok_and(|t| t.contains("region: eu-1"))
        })
        .await;

    let log = daemon.log.clone();
    daemon.stop().await;
    assert!(std::fs::read_to_string(log).unwrap_or_default().contains("shutting down"));
}
