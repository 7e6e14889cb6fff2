//! A hostile config written while the daemon runs: the reload is refused and logged, the daemon
//! keeps running on its last good config.

use std::time::Duration;

use testkit::git::ReleaseRepo;

use crate::common::{Config, Daemon, Sub, configmap, save_by_rename};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_bomb_written_while_running_killed_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let repo = ReleaseRepo::create(dir.path(), "stacks").unwrap();
    repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "x"))]);
    let conf_dir = dir.path().join("conf");
    std::fs::create_dir(&conf_dir).unwrap();
    let config = Config::new(dir.path())
        .git("stacks", &repo.file_url())
        .sub(Sub::new("stack", "stacks").version("*").cluster("team-a", "alpha", &[]))
        .directory()
        .at(&conf_dir.join("stacksync.yaml"));
    let good = config.text();
    let config = config.write();
    // Under a memory cap, so a regression fails this test rather than the machine.
    let mut daemon = Daemon::launch(&config, dir.path().join("stacksync.log")).memory_cap_kib(2_097_152).start().await;
    let status = dir.path().join("out/status/team-a/alpha.yaml");
    daemon.eventually("the first pass", Duration::from_secs(60), async || status.exists()).await;

    let mut bomb = String::from("x-bomb:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!("  a{i}: &a{i} [{}]\n", vec![format!("*a{p}"); 10].join(", ")));
    }
    save_by_rename(&config, &format!("{bomb}{good}"));
    daemon.logged("config reload rejected", Duration::from_secs(60)).await;
    assert!(daemon.log_has("expands to more than"), "{}", daemon.log());
    assert!(daemon.is_running(), "the daemon died:\n{}", daemon.log());
    daemon.kill().await;
}
