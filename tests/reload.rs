//! Hot reload of the running daemon: a valid edit (saved by rename, as editors do) takes effect
//! without a restart; an invalid edit is logged with its errors and the last good config keeps
//! running; SIGTERM stops the daemon cleanly.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Sub, config_text, configmap};
use testkit::git::ReleaseRepo;

/// Replaces the file the way editors do: write a temp file, rename it over the original.
fn save_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("yaml.swp");
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

/// Polls `cond` every 50 ms for at most 60 s.
async fn wait_for(what: &str, log: &Path, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn log_has(log: &Path, needle: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|t| t.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_edit_applies_and_invalid_edit_keeps_last_good_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    let conf_dir = dir.path().join("conf");
    std::fs::create_dir(&conf_dir).expect("mkdir");
    let config: PathBuf = conf_dir.join("stacksync.yaml");
    let one = [Sub { name: "stack", stack: None, version: "*", clusters: &[("team-a", "alpha", &[("region", "eu-1")])] }];
    std::fs::write(&config, config_text(dir.path(), &repo.file_url(), false, &one)).expect("config");

    let log = dir.path().join("stacksync.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
        .args(["run", "--admin-addr", "127.0.0.1:0", "--config", &config.to_string_lossy()])
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn daemon");
    let out = dir.path().join("out");
    wait_for("the first pass", &log, || out.join("status/team-a/alpha.yaml").exists()).await;

    // A valid edit: a second cluster and a changed value.
    let two = [Sub {
        name: "stack",
        stack: None,
        version: "*",
        clusters: &[("team-a", "alpha", &[("region", "eu-2")]), ("team-b", "beta", &[("region", "us-1")])],
    }];
    save_by_rename(&config, &config_text(dir.path(), &repo.file_url(), false, &two));
    wait_for("the new cluster", &log, || out.join("status/team-b/beta.yaml").exists()).await;
    assert!(log_has(&log, "cluster team-b/beta added"), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    let alpha = std::fs::read_to_string(out.join("team-a/alpha/01-configmap-cfg.yaml")).expect("alpha manifest");
    assert!(alpha.contains("region: eu-2"), "{alpha}");

    // An invalid edit: rejected with file, line and field; the daemon keeps the last good config.
    save_by_rename(&config, "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: /tmp}\nsubscriptions: 3\n");
    wait_for("the rejection", &log, || log_has(&log, "config reload rejected; keeping the last good config")).await;
    assert!(log_has(&log, "field=subscriptions"), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    assert!(log_has(&log, "line=4"), "{}", std::fs::read_to_string(&log).unwrap_or_default());

    // The daemon still runs the last good config and picks up the next valid edit.
    save_by_rename(&config, &config_text(dir.path(), &repo.file_url(), false, &one));
    wait_for("the removal to be logged", &log, || log_has(&log, "cluster team-b/beta removed")).await;
    wait_for("alpha back on eu-1", &log, || {
        std::fs::read_to_string(out.join("team-a/alpha/01-configmap-cfg.yaml")).is_ok_and(|t| t.contains("region: eu-1"))
    })
    .await;

    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.expect("daemon stopped in time").expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(log_has(&log, "shutting down"));
}
