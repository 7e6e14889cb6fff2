//! The `testkit apiserver` subcommand: the fake API server (crate fake-apiserver) as its own
//! process, for people and scripts (benches/process.rs, examples/kubernetes/run.sh).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_binary_serves_until_killed_and_writes_its_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kc");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_testkit"))
        .args(["apiserver", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(TIMEOUT, tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut first)).await.unwrap().unwrap();
    assert!(first.starts_with("serving http://127.0.0.1:"), "{first}");

    let config = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    assert_eq!(client.apiserver_version().await.unwrap().minor, "35");
    child.kill().await.unwrap();
}
