//! GitHub release assets end to end, against testkit's GitHub-compatible release server: assets
//! are verified before use, cached so nothing is fetched twice, and the token stays home.

mod common;

use std::path::Path;

use common::{Config, assert_exit, blob_tmp_files, cli, configmap, github_config, run_once, stacksync, status, stderr, stdout, targz};
use serde_json::json;
use testkit::github::{Fault, GithubServer, Route};

const REPO: &str = "acme/stacks";

fn manifests(extra: &str) -> Vec<(String, Vec<u8>)> {
    vec![("manifests.tar.gz".to_owned(), targz(&[("cfg.yaml", &configmap("cfg", extra))]))]
}

/// The config of these tests: GitHub source `gh` of [`REPO`] on `server`, Cluster team-a/alpha.
fn gh_config(dir: &Path, server: &GithubServer) -> Config {
    github_config(dir, REPO, &server.api_url())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_is_verified_cached_and_never_fetched_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let config = gh_config(dir.path(), &server).write();

    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    let table = stdout(&o);
    assert!(table.contains("v1.0.0") && table.contains("fetched") && table.contains("yes (1 assets)"), "{table}");
    assert!(table.contains("manifests.tar.gz  sha256:") && table.contains("published digest"), "{table}");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: one") && cm.contains("cluster: alpha"), "{cm}");

    // A restart: the listing is a 304 and no asset is requested again.
    let assets_before = server.count("/repos/acme/stacks/releases/assets/") + server.count("/storage/");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(server.count("/repos/acme/stacks/releases/assets/") + server.count("/storage/"), assets_before);
    let last_list = server.seen().into_iter().rev().find(|s| s.path.contains("/releases?")).expect("a listing");
    assert_eq!(last_list.status, 304, "the unchanged listing costs no quota");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_asset_is_rejected_and_the_previous_release_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let config = gh_config(dir.path(), &server).write();
    assert_exit(&run_once(&config).await, 0);

    server.add_release(REPO, "v1.1.0", &manifests("two"), false, false);
    server.fail_next(Route::Storage, Fault::WrongBytes);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("digest mismatch: expected sha256:") && out.contains(", got sha256:"), "{out}");
    assert!(out.contains("v1.1.0") && out.contains("manifests.tar.gz"), "{out}");
    let st = status(&dir.path().join("out"), "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["tag"], "v1.0.0");
    assert_eq!(st["reason"], "ReleaseRefused", "a digest mismatch needs a change: {st}");
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: one"), "the tampered release was applied: {cm}");
    assert_eq!(blob_tmp_files(dir.path()), 0, "a temp file of the rejected download is left");

    // The next poll downloads cleanly and moves on.
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(status(&dir.path().join("out"), "team-a", "alpha")["appliedRelease"]["tag"], "v1.1.0");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_without_any_digest_is_refused_unless_checksums_or_a_pin_vouch_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    let id = server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    server.hide_digests(id);
    let config = gh_config(dir.path(), &server).write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("asset manifests.tar.gz of release v1.0.0 has no digest"), "{}", stdout(&o));
    assert_eq!(server.count("/storage/"), 0, "nothing unverifiable is downloaded");

    // A pin in the config vouches for it.
    let digest = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&manifests("one")[0].1)));
    let config = gh_config(dir.path(), &server).source_set("gh", "digests", json!({"v1.0.0/manifests.tar.gz": digest})).write();
    assert_exit(&run_once(&config).await, 0);

    // A checksums asset vouches for a later release.
    let mut assets = manifests("two");
    let sum = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&assets[0].1));
    assets.push(("SHA256SUMS".to_owned(), format!("{sum}  manifests.tar.gz\n").into_bytes()));
    let id = server.add_release(REPO, "v1.1.0", &assets, false, false);
    server.hide_digests(id);
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("manifests.tar.gz  sha256:") && stdout(&o).contains("checksums file"), "{}", stdout(&o));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_paginates_past_100_releases_with_etags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    for minor in 0..150 {
        server.add_release(REPO, &format!("v1.{minor}.0"), &manifests(&minor.to_string()), false, false);
    }
    let config = gh_config(dir.path(), &server).write();
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("v1.149.0"), "{}", stdout(&o));
    let pages: Vec<String> = server.seen().into_iter().filter(|s| s.path.contains("/releases?")).map(|s| s.path).collect();
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert!(pages[0].ends_with("per_page=100&page=1") && pages[1].ends_with("per_page=100&page=2"), "{pages:?}");

    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    let statuses: Vec<u16> = server.seen().into_iter().filter(|s| s.path.contains("/releases?")).map(|s| s.status).collect();
    assert_eq!(statuses, [200, 200, 304, 304]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_is_waited_out_not_hammered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    server.fail_next(Route::List, Fault::RateLimited { reset_in_secs: 1 });
    server.fail_next(Route::AssetApi, Fault::RetryAfter { secs: 1 });
    let config = gh_config(dir.path(), &server).write();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("GitHub rate limit reached; waiting for the reset"), "{}", stderr(&o));
    let listings = server.seen().into_iter().filter(|s| s.path.contains("/releases?")).count();
    assert_eq!(listings, 2, "one refused listing, one retry after the reset");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_never_reaches_the_storage_host_or_the_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "ghp_TESTKITsecret0123456789\n").expect("token");
    let config = gh_config(dir.path(), &server).source_set("gh", "token", json!({"file": token_file})).write();
    let o = cli(&["run", "--once", "--config", &config.to_string_lossy()], &[("RUST_LOG", "trace")]).await;
    assert_exit(&o, 0);
    assert!(!stderr(&o).contains("ghp_TESTKIT") && !stdout(&o).contains("ghp_TESTKIT"), "the token was logged");
    let seen = server.seen();
    let api: Vec<_> = seen.iter().filter(|s| s.host.starts_with("127.0.0.1")).collect();
    let storage: Vec<_> = seen.iter().filter(|s| s.host.starts_with("localhost")).collect();
    assert!(!api.is_empty() && !storage.is_empty(), "{seen:?}");
    assert!(api.iter().all(|s| s.authorization.as_deref() == Some("Bearer ghp_TESTKITsecret0123456789")), "{api:?}");
    assert!(storage.iter().all(|s| s.authorization.is_none()), "the token reached the storage host: {storage:?}");
    server.stop().await;
}

/// Regression: a storage host that redirected again (as CDNs chain them) failed the download
/// with only "answered 302 Found". Redirects are followed up to `MAX_REDIRECTS`, never with the
/// token; past that the error says so and where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_storage_redirects_is_followed_and_an_endless_one_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "ghp_TESTKITsecret0123456789\n").expect("token");
    let config = gh_config(dir.path(), &server).source_set("gh", "token", json!({"file": token_file})).write();
    server.storage_hops(3);
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(server.count("/hop/"), 3, "{:?}", server.seen());
    let storage: Vec<_> = server.seen().into_iter().filter(|s| s.host.starts_with("localhost")).collect();
    assert!(storage.iter().all(|s| s.authorization.is_none()), "the token went along a redirect: {storage:?}");

    server.storage_hops(50);
    server.add_release(REPO, "v1.1.0", &manifests("two"), false, false);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("more than 5 redirects (the last from localhost)"), "{out}");
    assert!(!out.contains("signature=testkit"), "a storage URL's query is shown: {out}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_traversal_and_decompression_bombs_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    let evil = common::raw_targz(&[("cfg.yaml", &configmap("cfg", "x")), ("../../escaped.yaml", "owned: true\n")]);
    server.add_release(REPO, "v1.0.0", &[("manifests.tar.gz".to_owned(), evil)], false, false);
    let config = gh_config(dir.path(), &server).write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("asset manifests.tar.gz: entry \"../../escaped.yaml\": absolute path or `..` escapes"), "{}", stdout(&o));
    assert!(!dir.path().join("cache/escaped.yaml").exists() && !dir.path().join("escaped.yaml").exists());

    let zeros = "\0".repeat(2 * 1024 * 1024);
    server.add_release(REPO, "v1.1.0", &[("manifests.tar.gz".to_owned(), targz(&[("zeros.yaml", &zeros)]))], false, false);
    let config = gh_config(dir.path(), &server).source_set("gh", "maxUnpackedSize", "1Mi").write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("entry \"zeros.yaml\": archive unpacks to more than 1048576 bytes"), "{}", stdout(&o));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_cached_blob_is_detected_and_refetched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let config = gh_config(dir.path(), &server).write();
    assert_exit(&run_once(&config).await, 0);
    let blob = std::fs::read_dir(dir.path().join("cache/blobs/sha256")).expect("blobs").flatten().next().expect("a blob").path();
    std::fs::write(&blob, b"bit rot").expect("corrupt");

    let downloads = server.count("/storage/");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("cached blob is missing or corrupt"), "{}", stderr(&o));
    assert_eq!(server.count("/storage/"), downloads + 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prereleases_only_when_allowed_and_drafts_never() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("stable"), false, false);
    server.add_release(REPO, "v1.1.0", &manifests("pre"), true, false);
    server.add_release(REPO, "v1.2.0", &manifests("draft"), false, true);
    let config = gh_config(dir.path(), &server).write();
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("v1.0.0"), "{}", stdout(&o));
    let config = gh_config(dir.path(), &server).edit_sub("stack", |s| s.set("prereleases", true)).write();
    let o = stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("v1.1.0") && !stdout(&o).contains("v1.2.0"), "{}", stdout(&o));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_passes_share_one_download() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let path = gh_config(dir.path(), &server).write();
    let config = stacksync::config::Config::load(&path).expect("config");
    let (a, b) =
        tokio::join!(stacksync::targets::directory::pass(&config, None, false), stacksync::targets::directory::pass(&config, None, false));
    for report in [a.expect("pass a"), b.expect("pass b")] {
        assert!(report.prepared.iter().all(|p| p.outcome.is_ok()), "{:?}", report.prepared);
    }
    assert_eq!(server.count("/storage/"), 1, "the asset was downloaded twice");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_downloads_and_server_errors_are_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    server.fail_next(Route::Storage, Fault::Truncate);
    server.fail_next(Route::AssetApi, Fault::Status(502));
    let config = gh_config(dir.path(), &server).write();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("download interrupted; retrying"), "{}", stderr(&o));
    assert_eq!(blob_tmp_files(dir.path()), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_keeps_the_release_in_use_and_the_newest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    let releases = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join("cache/releases"))
            .expect("releases")
            .flatten()
            .flat_map(|src| std::fs::read_dir(src.path()).expect("source dir").flatten())
            // Each tree has its digest manifest beside it.
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().split('@').next().unwrap_or_default().to_owned())
            .collect();
        v.sort();
        v
    };
    let config = gh_config(dir.path(), &server).write();
    std::fs::write(&config, std::fs::read_to_string(&config).expect("read").replace("  dir: ", "  keepReleases: 1\n  dir: "))
        .expect("write");
    for minor in 0..4 {
        server.add_release(REPO, &format!("v1.{minor}.0"), &manifests(&minor.to_string()), false, false);
        assert_exit(&run_once(&config).await, 0);
    }
    assert_eq!(releases(dir.path()), ["v1.3.0"]);
    let blobs = std::fs::read_dir(dir.path().join("cache/blobs/sha256")).expect("blobs").count();
    assert_eq!(blobs, 1, "blobs of collected releases remain");

    // Pinned below the newest with autoUpgrade off: the release in use is never collected.
    let pinned = gh_config(dir.path(), &server).edit_sub("stack", |s| s.version("<1.3.0").set("autoUpgrade", false)).write();
    std::fs::write(&pinned, std::fs::read_to_string(&pinned).expect("read").replace("  dir: ", "  keepReleases: 0\n  dir: "))
        .expect("write");
    assert_exit(&run_once(&pinned).await, 0);
    assert_eq!(releases(dir.path()), ["v1.2.0"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_cache_is_a_clear_error_and_the_applied_release_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    let config = gh_config(dir.path(), &server).write();
    assert_exit(&run_once(&config).await, 0);

    // The blob store becomes unusable (a file where its directory should be).
    std::fs::remove_dir_all(dir.path().join("cache/blobs")).expect("remove");
    std::fs::write(dir.path().join("cache/blobs"), "in the way").expect("block");
    server.add_release(REPO, "v1.1.0", &manifests("two"), false, false);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("cannot open blob store"), "{}", stdout(&o));
    let st = status(&dir.path().join("out"), "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["tag"], "v1.0.0");
    assert!(
        !dir.path()
            .join("cache/releases")
            .read_dir()
            .expect("releases")
            .flatten()
            .any(|s| { s.path().read_dir().expect("dir").flatten().any(|r| r.file_name().to_string_lossy().starts_with("v1.1.0")) })
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_deleted_upstream_stays_applied_from_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    server.add_release(REPO, "v1.1.0", &manifests("two"), false, false);
    let config = gh_config(dir.path(), &server).write();
    assert_exit(&run_once(&config).await, 0);

    server.remove_release("v1.1.0");
    let downloads = server.count("/storage/");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("tag v1.1.0 is no longer advertised; staying on it"), "{}", stderr(&o));
    assert_eq!(status(&dir.path().join("out"), "team-a", "alpha")["appliedRelease"]["tag"], "v1.1.0");
    assert_eq!(server.count("/storage/"), downloads, "nothing downloaded");
    server.stop().await;
}

/// Regression: a tag deleted upstream was said at INFO for a Git source but at WARN for a
/// GitHub one. Every source kind says it once at WARN, by the poll that sees it, and what the
/// selection makes of it ("staying on it") once at INFO — not at every poll after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_release_is_warned_once_not_at_every_poll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    server.add_release(REPO, "v1.1.0", &manifests("two"), false, false);
    let config = gh_config(dir.path(), &server).edit_sub("stack", |s| s.interval("1s")).write();
    let daemon = common::Daemon::start(&config, dir.path().join("daemon.log")).await;
    let out = dir.path().join("out");
    daemon
        .eventually("v1.1.0 applied", std::time::Duration::from_secs(30), async || common::applied_tag(&out, "team-a", "alpha") == "v1.1.0")
        .await;
    server.remove_release("v1.1.0");
    common::assert_deletion_said_once(&daemon, "gh", "v1.1.0").await;
    assert_eq!(status(&out, "team-a", "alpha")["appliedRelease"]["tag"], "v1.1.0");
    daemon.stop().await;
    server.stop().await;
}
