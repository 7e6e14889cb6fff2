//! SIGKILL in the middle of a download, then a restart: nothing half-written is used or reported
//! synced, and the restart converges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{Daemon, assert_exit, configmap, eventually, github_config, run_once, stderr, targz};

/// A GitHub-like server for one release whose asset download trickles while `slow` is set.
async fn server(asset: Vec<u8>, slow: Arc<AtomicBool>, downloading: Arc<AtomicBool>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let digest = stacksync::model::Sha256Digest::of(&asset).to_string();
    let list = serde_json::json!([{"id": 1, "tag_name": "v1.0.0", "assets": [{
        "id": 2, "name": "manifests.tar.gz", "size": asset.len(), "digest": digest,
        "url": format!("http://{addr}/repos/acme/stacks/releases/assets/2")}]}])
    .to_string();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut s, _)) = listener.accept().await {
            let (asset, list, slow, downloading) = (asset.clone(), list.clone(), slow.clone(), downloading.clone());
            conns.spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).await.is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let body: &[u8] = if head.contains("/releases/assets/") { &asset } else { list.as_bytes() };
                let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = s.write_all(reply.as_bytes()).await;
                if head.contains("/releases/assets/") && slow.load(Ordering::SeqCst) {
                    downloading.store(true, Ordering::SeqCst);
                    for b in body {
                        if s.write_all(&[*b]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                } else {
                    let _ = s.write_all(body).await;
                }
            });
        }
    });
    (format!("http://{addr}/"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_download_left_a_release_half_there() {
    let dir = tempfile::tempdir().unwrap();
    let asset = targz(&[("cfg.yaml", &configmap("cfg", "one"))]);
    let (slow, downloading) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let (api, task) = server(asset, slow.clone(), downloading.clone()).await;
    let config = github_config(dir.path(), "acme/stacks", &api).write();

    let mut pass = Daemon::launch(&config, dir.path().join("once.log")).once().start().await;
    let log = || std::fs::read_to_string(dir.path().join("once.log")).unwrap_or_default();
    eventually("the download began", Duration::from_secs(60), async || downloading.load(Ordering::SeqCst), log).await;
    // A few bytes in (one every 50 ms), not all of them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = pass.kill().await; // SIGKILL
    assert!(!status.success());
    // Nothing was reported or applied, and no blob exists under a digest name.
    assert!(!dir.path().join("out/status/team-a/alpha.yaml").exists(), "a killed pass reported status");
    assert!(!dir.path().join("out/team-a/alpha").exists());
    let blobs: Vec<String> = std::fs::read_dir(dir.path().join("cache/blobs/sha256"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(blobs.iter().all(|b| b.starts_with('.')), "a partial blob was stored: {blobs:?}");

    // The restart converges: verified download, applied, synced.
    slow.store(false, Ordering::SeqCst);
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).unwrap();
    assert!(cm.contains("extra: one"), "{}", stderr(&o));
    task.abort();
}
