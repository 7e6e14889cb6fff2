//! A hostile config written while the daemon runs: the reload is refused and logged, the daemon
//! keeps running on its last good config.

use std::path::Path;
use std::time::Duration;

use testkit::git::ReleaseRepo;

use crate::common::{Sub, config_text, configmap};

async fn wait_for(what: &str, log: &Path, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_bomb_written_while_running_killed_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let repo = ReleaseRepo::create(dir.path(), "stacks").unwrap();
    repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    let conf_dir = dir.path().join("conf");
    std::fs::create_dir(&conf_dir).unwrap();
    let config = conf_dir.join("stacksync.yaml");
    let subs = [Sub { name: "stack", stack: None, version: "*", clusters: &[("team-a", "alpha", &[])] }];
    let good = config_text(dir.path(), &repo.file_url(), false, &subs);
    std::fs::write(&config, &good).unwrap();
    let log = dir.path().join("stacksync.log");
    // Under a memory cap, so a regression fails this test rather than the machine.
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v 2097152; exec \"{}\" run --admin-addr 127.0.0.1:0 --config \"$0\"", env!("CARGO_BIN_EXE_stacksync")))
        .arg(&config)
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let status = dir.path().join("out/status/team-a/alpha.yaml");
    wait_for("the first pass", &log, || status.exists()).await;

    let mut bomb = String::from("x-bomb:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!("  a{i}: &a{i} [{}]\n", vec![format!("*a{p}"); 10].join(", ")));
    }
    let tmp = conf_dir.join("stacksync.yaml.swp");
    std::fs::write(&tmp, format!("{bomb}{good}")).unwrap();
    std::fs::rename(&tmp, &config).unwrap();
    wait_for("the refused reload", &log, || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("config reload rejected"))).await;
    assert!(std::fs::read_to_string(&log).unwrap().contains("expands to more than"));
    assert!(child.try_wait().unwrap().is_none(), "the daemon died:\n{}", std::fs::read_to_string(&log).unwrap());
    child.start_kill().unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap();
}
