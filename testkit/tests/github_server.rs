//! The GitHub-compatible release server, as a client sees it: the `testkit github` binary serving
//! a directory, GitHub's list/asset formats, and the redirect to another host name.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: &str, path: &str, accept: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nUser-Agent: test\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut resp = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut resp)).await.expect("in time").expect("read");
    let (head, body) = resp.split_once("\r\n\r\n").expect("http");
    (head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), head.to_lowercase(), body.to_owned())
}

#[tokio::test]
async fn binary_serves_a_release_directory_with_digests_and_redirects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = dir.path().join("releases/acme/stacks/v1.0.0");
    std::fs::create_dir_all(&tag).expect("mkdir");
    std::fs::write(tag.join("metadata.yaml"), "versions: {}\n").expect("asset");
    let pre = dir.path().join("releases/acme/stacks/v1.1.0-rc.1");
    std::fs::create_dir_all(&pre).expect("mkdir");
    std::fs::write(pre.join("release.yaml"), "prerelease: true\ndigests: false\n").expect("meta");
    std::fs::write(pre.join("a.txt"), "a").expect("asset");
    let addr_file = dir.path().join("addr");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_testkit"))
        .args(["github", "--releases", &dir.path().join("releases").to_string_lossy(), "--addr-out", &addr_file.to_string_lossy()])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // The file exists (created, empty) a moment before its content is written: wait for it.
    let url = loop {
        let text = std::fs::read_to_string(&addr_file).unwrap_or_default();
        if !text.trim().is_empty() {
            break text;
        }
        assert!(tokio::time::Instant::now() < deadline, "no address written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_owned();

    let (code, head, body) = get(&addr, "/repos/acme/stacks/releases?per_page=1&page=1", "application/vnd.github+json").await;
    assert_eq!(code, 200);
    assert!(head.contains("etag: \"") && head.contains("x-ratelimit-remaining:") && head.contains("rel=\"next\""), "{head}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(list[0]["tag_name"], "v1.1.0-rc.1", "newest first");
    assert_eq!(list[0]["prerelease"], true);
    assert!(list[0]["assets"][0].get("digest").is_none(), "digests: false hides them");

    let (_, _, body) = get(&addr, "/repos/acme/stacks/releases/tags/v1.0.0", "application/vnd.github+json").await;
    let release: serde_json::Value = serde_json::from_str(&body).expect("json");
    let asset = &release["assets"][0];
    let digest = asset["digest"].as_str().expect("digest");
    assert_eq!(digest, format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"versions: {}\n"))));
    let asset_path = asset["url"].as_str().expect("url").trim_start_matches(&format!("http://{addr}")).to_owned();
    let (code, head, _) = get(&addr, &asset_path, "application/octet-stream").await;
    assert_eq!(code, 302);
    assert!(head.contains("location: http://localhost:"), "redirects to another host name: {head}");

    let (_, _, stats) = get(&addr, "/_testkit/stats", "application/json").await;
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("json");
    assert_eq!(stats["byKind"]["asset"], 1);
    child.kill().await.expect("kill");
}
