//! Network faults: frozen, trickling and truncating servers, a Git server down then back, a
//! GitHub rate limit then its reset, and API answers that lie about their sizes. Every network
//! operation has an overall deadline, and a timeout says so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stacksync::cache::blobs::Blobs;
use stacksync::model::source::Verify;
use stacksync::source::git;
use stacksync::source::github::materialise::{self, Options};
use stacksync::source::github::{Client, GhRelease, Limits};
use testkit::git::{GitDaemon, ReleaseRepo};
use testkit::github::{Fault, GithubServer, Route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{assert_exit, configmap, git_config, run_once, stderr};

const REPO: &str = "acme/stacks";

fn limits(request: u64, download: u64) -> Limits {
    Limits { request_deadline: Duration::from_secs(request), download_deadline: Duration::from_secs(download), ..Limits::default() }
}

/// A loopback server answering every connection with `behave` (after reading the request
/// head). Returns its address and the accept task, aborted by the caller.
async fn serve<F, Fut>(behave: F) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let behave = Arc::new(behave);
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let behave = behave.clone();
            conns.spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                behave(stream).await;
            });
        }
    });
    (addr, task)
}

fn asset_release(addr: std::net::SocketAddr, declared: u64) -> GhRelease {
    serde_json::from_value(serde_json::json!({
        "id": 1, "tag": "v1.0.0", "prerelease": false,
        "assets": [{"id": 2, "name": "a.yaml", "size": declared, "url": format!("http://{addr}/repos/{REPO}/releases/assets/2")}]
    }))
    .unwrap()
}

#[tokio::test]
async fn trickling_storage_host_kept_the_download_going() {
    let (addr, task) = serve(|mut s| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n").await;
        // One byte at a time, never silent long enough for a read timeout.
        for _ in 0..1_000_000 {
            if s.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let blobs = Blobs::open(cache.path()).unwrap();
    let client = Client::new(&format!("http://{addr}/"), REPO, None).unwrap().with_limits(limits(60, 2));
    let release = asset_release(addr, 1_000_000);
    let started = Instant::now();
    let opts = Options { verify: Verify::Optional, ..Options::default() };
    let err = materialise::download_all(&client, &blobs, &release, &opts).await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(10), "the download ran on for {:?}", started.elapsed());
    assert!(err.contains("timed out after 2s") && err.contains("a.yaml"), "{err}");
    assert!(blobs.list().is_empty());
    task.abort();
}

#[tokio::test]
async fn frozen_api_server_said_only_error_sending_request() {
    // Accepts, reads the request, answers nothing.
    let (addr, task) = serve(|s| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(s);
    })
    .await;
    let client = Client::new(&format!("http://{addr}/"), REPO, None).unwrap().with_limits(limits(1, 60));
    let started = Instant::now();
    let err = client.list(&mut BTreeMap::new()).await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(err.contains("timed out after 1s"), "{err}");
    task.abort();
}

#[tokio::test]
async fn huge_release_listing_was_read_whole_into_memory() {
    // A listing without a length, streamed on and on: refused at the page cap, not read whole.
    let (addr, task) = serve(|mut s| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n[").await;
        let chunk = format!("{},", serde_json::json!({"id": 1, "tag_name": "v1.0.0", "assets": []})).repeat(1000);
        for _ in 0..100_000 {
            if s.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await;
    let client =
        Client::new(&format!("http://{addr}/"), REPO, None).unwrap().with_limits(Limits { max_page_bytes: 1024 * 1024, ..limits(30, 60) });
    let err = client.list(&mut BTreeMap::new()).await.unwrap_err().to_string();
    assert!(err.contains("larger than the limit of 1048576 bytes"), "{err}");
    task.abort();
}

#[tokio::test]
async fn declared_asset_sizes_passed_max_release_size() {
    // Two 5 MB assets declared as 1 byte each, under a 6 MiB release limit.
    let server = GithubServer::start().await.unwrap();
    let big = vec![b'x'; 5_000_000];
    server.add_release(REPO, "v1.0.0", &[("a.bin".into(), big.clone()), ("b.bin".into(), big)], false, false);
    let client = Client::new(&server.api_url(), REPO, None).unwrap();
    let (mut releases, _) = client.list(&mut BTreeMap::new()).await.unwrap();
    let mut release = releases.remove(0);
    for a in &mut release.assets {
        a.size = 1;
    }
    let cache = tempfile::tempdir().unwrap();
    let blobs = Blobs::open(cache.path()).unwrap();
    let opts = Options { max_release_bytes: 6 * 1024 * 1024, ..Options::default() };
    let err = materialise::download_all(&client, &blobs, &release, &opts).await.unwrap_err().to_string();
    assert!(err.contains("maxReleaseSize") && err.contains("b.bin"), "{err}");
    assert_eq!(blobs.list().len(), 1, "the second asset was stored");
    server.stop().await;
}

#[tokio::test]
async fn truncated_download_was_stored() {
    use std::sync::atomic::AtomicUsize;
    let data = b"a: 1\n".repeat(1000);
    let cut = Arc::new(AtomicUsize::new(usize::MAX));
    let (addr, task) = {
        let (data, cut) = (data.clone(), cut.clone());
        serve(move |mut s| {
            let (data, cut) = (data.clone(), cut.clone());
            async move {
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", data.len());
                let _ = s.write_all(head.as_bytes()).await;
                // The first `cut` answers end half-way (the length promised the whole).
                let whole = cut.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err();
                let _ = s.write_all(if whole { &data[..] } else { &data[..data.len() / 2] }).await;
            }
        })
        .await
    };
    let client = Client::new(&format!("http://{addr}/"), REPO, None).unwrap();
    let release = asset_release(addr, data.len() as u64);
    let pin = stacksync::model::Sha256Digest::of(&data);
    let opts = Options { pins: [("v1.0.0/a.yaml".to_owned(), pin)].into(), ..Options::default() };
    let cache = tempfile::tempdir().unwrap();
    let blobs = Blobs::open(cache.path()).unwrap();
    // Every attempt is cut half-way: the download fails, and nothing is stored.
    cut.store(usize::MAX, Ordering::SeqCst);
    let err = materialise::download_all(&client, &blobs, &release, &opts).await.unwrap_err().to_string();
    assert!(err.contains("connection cut after"), "{err}");
    assert!(blobs.list().is_empty());
    // Cut once: the retry stores the whole verified asset.
    cut.store(1, Ordering::SeqCst);
    let records = materialise::download_all(&client, &blobs, &release, &opts).await.unwrap();
    assert_eq!(records[0].size, 5000);
    task.abort();
}

#[tokio::test]
async fn rate_limit_then_reset_failed_the_poll() {
    let server = GithubServer::start().await.unwrap();
    server.add_release(REPO, "v1.0.0", &[("a.yaml".into(), b"a: 1\n".to_vec())], false, false);
    server.fail_next(Route::List, Fault::RateLimited { reset_in_secs: 1 });
    let client = Client::new(&server.api_url(), REPO, None).unwrap();
    let started = Instant::now();
    let (releases, _) = client.list(&mut BTreeMap::new()).await.unwrap();
    assert_eq!(releases.len(), 1);
    assert!(started.elapsed() >= Duration::from_millis(900), "did not wait for the reset");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_fetch_from_a_frozen_server_ran_on() {
    let (addr, task) = serve(|s| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(s);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("git://{addr}/stacks.git");
    let mirror = dir.path().join("mirror.git");
    let started = Instant::now();
    let result =
        tokio::task::spawn_blocking(move || git::fetch_with_deadline("stacks", &url, &mirror, &BTreeMap::new(), Duration::from_secs(2)))
            .await
            .unwrap();
    // The call returned, so the blocking fetch really ended: nothing runs on.
    let err = result.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
    assert!(err.contains("timed out after 2s"), "{err}");
    task.abort();
}

/// A TCP proxy to a Git daemon that can be switched off (connections are closed at once) and on.
async fn switchable_proxy(target: std::net::SocketAddr, up: Arc<AtomicBool>) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut client, _)) = listener.accept().await {
            if !up.load(Ordering::SeqCst) {
                continue;
            }
            conns.spawn(async move {
                if let Ok(mut server) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_server_down_then_back_was_not_followed() {
    const STACK: &str = "docker-ferrol-1-27";
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    std::fs::create_dir(&served).unwrap();
    let repo = ReleaseRepo::create(&served, "stacks").unwrap();
    repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    let daemon = GitDaemon::start(&served).await.unwrap();
    let target: std::net::SocketAddr = daemon.url("").trim_start_matches("git://").trim_end_matches('/').parse().unwrap();
    let up = Arc::new(AtomicBool::new(true));
    let (proxy, task) = switchable_proxy(target, up.clone()).await;
    let config = git_config(dir.path(), &format!("git://{proxy}/stacks.git")).edit_sub("stack", |s| s.stack(STACK)).write();
    assert_exit(&run_once(&config).await, 0);

    up.store(false, Ordering::SeqCst);
    repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "two"))]);
    let o = run_once(&config).await;
    assert!(stderr(&o).contains("source poll failed"), "{}", stderr(&o));
    let applied = || std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-addons.yaml")).unwrap();
    assert!(applied().contains("extra: one"), "the release in use was lost while the server was down");
    // The failed poll did not damage the mirror (no re-clone needed once it is back).
    let mirror = std::fs::read_dir(dir.path().join("cache/git")).unwrap().flatten().next().unwrap().path();
    assert!(!mirror.join("stacksync-damaged").exists());

    up.store(true, Ordering::SeqCst);
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(applied().contains("extra: two"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("cloning the mirror again"), "{}", stderr(&o));
    task.abort();
    daemon.stop().await;
}

#[tokio::test]
async fn hanging_storage_host_said_timed_out_after_600s() {
    // Answers the headers, then nothing: each attempt is cut by the read timeout, long before
    // the download's overall deadline, and the error says which deadline fired.
    let (addr, task) = serve(|mut s| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n").await;
        tokio::time::sleep(Duration::from_secs(3600)).await;
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let blobs = Blobs::open(cache.path()).unwrap();
    let client = Client::new(&format!("http://{addr}/"), REPO, None)
        .unwrap()
        .with_limits(Limits { read_timeout: Duration::from_secs(1), ..limits(60, 30) });
    let opts = Options { verify: Verify::Optional, ..Options::default() };
    let started = Instant::now();
    let err = materialise::download_all(&client, &blobs, &asset_release(addr, 100), &opts).await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    assert!(err.contains("3 attempts failed") && err.contains("nothing received for 1s (read timeout)"), "{err}");
    assert!(!err.contains("30s"), "the overall deadline did not fire, yet the error names it: {err}");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_listing_stopped_at_1000_pages_said_at_info() {
    use std::sync::atomic::AtomicUsize;
    // Every page is empty and links to the next one, without end.
    let page = Arc::new(AtomicUsize::new(1));
    let own: Arc<std::sync::OnceLock<std::net::SocketAddr>> = Arc::default();
    let (addr, task) = {
        let (page, own) = (page.clone(), own.clone());
        serve(move |mut s| {
            let next = page.fetch_add(1, Ordering::SeqCst) + 1;
            let own = own.get().copied();
            async move {
                let Some(addr) = own else { return };
                let link = format!("<http://{addr}/repos/{REPO}/releases?per_page=100&page={next}>; rel=\"next\"");
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nlink: {link}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]"
                );
                let _ = s.write_all(head.as_bytes()).await;
            }
        })
        .await
    };
    own.set(addr).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = crate::common::github_config(dir.path(), REPO, &format!("http://{addr}/")).write();
    let o = crate::common::stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    let log = stderr(&o);
    let line = log.lines().find(|l| l.contains("release listing stopped")).unwrap_or_else(|| panic!("no line about the cap:\n{log}"));
    assert!(line.contains("WARN") && line.contains("1000 pages") && line.contains(REPO), "{line}");
    assert!(page.load(Ordering::SeqCst) > 1000);
    task.abort();
}
