//! The cache volume, for real: the daemon under test runs in a mount namespace of its own with a
//! small tmpfs at its cache directory (and, for the status-file case, at the directory target's
//! output), a volume that really fills (`ENOSPC`) and really goes read-only (`EROFS`). The test
//! fills and frees it through `/proc/<pid>/root` and remounts it with `nsenter`. Each case states
//! its promise and checks it while the fault lasts and after: nothing half-written is used, the
//! last good release stays applied and its status says so, one clear error per cause (not one
//! per retry), and the next pass after the volume is back converges with no restart. A cache
//! wiped under the running daemon is fetched and verified again.
//!
//! Mount namespaces and tmpfs mounts need root (as the rest of the suite runs); elsewhere these
//! tests say SKIPPED, and fail under CI.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Config, Daemon, Sub, configmap, github_config, targz};
use serde_json::Value;
use sha2::Digest;
use testkit::github::{Fault, GithubServer, Route};

const REPO: &str = "acme/stacks";
/// How many passes the daemon retries while the fault lasts (a pass a second).
const RETRIES: usize = 5;
/// Bound of every wait for a pass.
const PASS: Duration = Duration::from_secs(30);

/// Whether a mount namespace with a tmpfs can be made here; says SKIPPED (and fails under CI)
/// when not.
fn volumes_available() -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "mount", "-t", "tmpfs", "-o", "size=64k", "probe"])
        .arg(dir.path())
        .output();
    let why = match probe {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
        Err(e) => format!("unshare: {e}"),
    };
    assert!(std::env::var_os("CI").is_none(), "no mount namespace with a tmpfs here (run as root): {why}");
    eprintln!("SKIPPED: no mount namespace with a tmpfs here (these tests run as root): {why}");
    false
}

/// A tmpfs only the daemon sees, mounted at `dir` (as the daemon names it).
struct Volume {
    pid: u32,
    dir: PathBuf,
}

impl Volume {
    fn of(daemon: &Daemon, dir: &Path) -> Volume {
        Volume { pid: daemon.pid(), dir: dir.to_path_buf() }
    }

    /// `rel` on the volume, as this process reaches it.
    fn path(&self, rel: &str) -> PathBuf {
        let inside = self.dir.strip_prefix("/").expect("an absolute path").join(rel);
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(inside)
    }

    /// Fills the volume with a filler file, leaving `free` bytes (a multiple of the page size).
    fn fill(&self, free: u64) {
        use std::io::Write;
        let path = self.path("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0xa5u8; 64 * 1024];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        let len = f.metadata().expect("filler size").len();
        f.set_len(len.saturating_sub(free)).expect("leave room");
    }

    fn free(&self) {
        std::fs::remove_file(self.path("filler")).expect("remove the filler");
    }

    /// Remounts the volume read-only (`true`) or read-write.
    fn read_only(&self, ro: bool) {
        let opt = if ro { "remount,ro" } else { "remount,rw" };
        let o = std::process::Command::new("nsenter")
            .args(["-t", &self.pid.to_string(), "-m", "mount", "-o", opt])
            .arg(&self.dir)
            .output()
            .expect("nsenter");
        assert!(o.status.success(), "mount -o {opt}: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// Files of unfinished writes (`.tmp-…`, `.<name>.tmp-…`) anywhere on the volume, and what
    /// `tmp/` holds.
    fn leftovers(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![self.path("")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if name.contains(".tmp-") || d.ends_with("tmp") {
                    found.push(e.path());
                } else if is_dir {
                    stack.push(e.path());
                }
            }
        }
        found
    }
}

/// Status file of team-a/alpha under `out`.
fn status(out: &Path) -> Value {
    common::status(out, "team-a", "alpha")
}

fn applied_tag(out: &Path) -> String {
    std::fs::read_to_string(out.join("status/team-a/alpha.yaml"))
        .ok()
        .and_then(|t| serde_saphyr::from_str::<Value>(&t).ok())
        .and_then(|s| s["appliedRelease"]["tag"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn manifest(out: &Path) -> String {
    std::fs::read_to_string(out.join("team-a/alpha/01-configmap-cfg.yaml")).unwrap_or_default()
}

/// Lines of the log at WARN or ERROR that contain `needle`, from line `from` on.
fn loud_lines(log: &str, from: usize, needle: &str) -> Vec<String> {
    log.lines().skip(from).filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(needle)).map(str::to_owned).collect()
}

/// How many passes of subscription `stack` the log shows.
fn passes(log: &str) -> usize {
    log.lines().filter(|l| l.contains("subscription synced")).count()
}

/// `n` bytes of text that gzip cannot shrink much (hex of a hash chain): an asset that is large
/// on the wire.
fn incompressible(n: usize) -> String {
    let mut out = String::with_capacity(n);
    let mut h = sha2::Sha256::digest(b"stacksync");
    while out.len() < n {
        out.push_str(&hex::encode(h));
        h = sha2::Sha256::digest(h);
    }
    out.truncate(n);
    out
}

/// An asset of cfg.yaml (`extra`) and a padding file of `padding` bytes (never rendered).
fn asset(extra: &str, padding: String) -> Vec<(String, Vec<u8>)> {
    vec![("manifests.tar.gz".to_owned(), targz(&[("cfg.yaml", &configmap("cfg", extra)), ("padding.txt", &padding)]))]
}

/// The GitHub source's config, a pass a second.
fn gh_config(dir: &Path, server: &GithubServer) -> Config {
    github_config(dir, REPO, &server.api_url()).edit_sub("stack", |s| s.interval("1s"))
}

/// Waits for `RETRIES` more passes than `since`.
async fn retried(daemon: &Daemon, since: usize) {
    daemon.eventually("the daemon retried", PASS, async || passes(&daemon.log()) >= since + RETRIES).await;
}

/// (a) A GitHub asset larger than what is left on the cache volume: the download hits ENOSPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_that_fills_the_cache_volume_is_dropped_and_resumed_when_space_returns() {
    if !volumes_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &asset("one", String::new()), false, false);
    let config = gh_config(dir.path(), &server).write();
    let cache = dir.path().join("cache");
    let out = dir.path().join("out");
    let daemon = Daemon::launch(&config, dir.path().join("daemon.log")).tmpfs(&cache, 4096).start().await;
    daemon.eventually("v1.0.0 applied", PASS, async || applied_tag(&out) == "v1.0.0").await;
    let volume = Volume::of(&daemon, &cache);

    volume.fill(64 * 1024);
    let downloads = server.count("/storage/");
    let from = daemon.log().lines().count();
    server.add_release(REPO, "v1.1.0", &asset("two", incompressible(1024 * 1024)), false, false);
    daemon.logged("No space left on device", PASS).await;
    retried(&daemon, passes(&daemon.log())).await;

    let log = daemon.log();
    let loud = loud_lines(&log, from, "No space left on device");
    let retries = passes(&log.lines().skip(from).collect::<Vec<_>>().join("\n"));
    eprintln!("{} WARN/ERROR lines about the full volume over {retries} passes:\n{}", loud.len(), loud.join("\n"));
    assert!(server.count("/storage/") > downloads, "the download was not tried");
    assert_eq!(applied_tag(&out), "v1.0.0", "{log}");
    assert!(manifest(&out).contains("extra: one"));
    let st = status(&out);
    assert_eq!((st["ready"].as_bool(), st["reason"].as_str()), (Some(false), Some("ReleaseUnavailable")), "{st}");
    let message = st["message"].as_str().unwrap_or_default();
    assert!(message.contains("release v1.1.0") && message.contains("No space left on device"), "{st}");
    assert!(message.contains(&*cache.join("blobs").to_string_lossy()), "the path is not named: {st}");
    assert_eq!(volume.leftovers(), Vec::<PathBuf>::new(), "half-written files on the volume");
    assert_eq!(loud.len(), 1, "one error per cause, not per retry:\n{}", loud.join("\n"));

    volume.free();
    let freed = Instant::now();
    daemon.eventually("v1.1.0 applied once space returned", PASS, async || applied_tag(&out) == "v1.1.0").await;
    eprintln!("v1.1.0 applied {:?} after the filler was removed", freed.elapsed());
    assert!(manifest(&out).contains("extra: two"));
    assert_eq!(status(&out)["ready"], true);
    daemon.stop().await;
    server.stop().await;
}

/// (b) An asset small on the wire that unpacks to more than the cache volume has left: the
/// unpack hits ENOSPC. The verified blob is kept, so the retries and the recovery download
/// nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpack_that_fills_the_cache_volume_leaves_no_half_tree_and_resumes_when_space_returns() {
    if !volumes_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &asset("one", String::new()), false, false);
    let config = gh_config(dir.path(), &server).write();
    let cache = dir.path().join("cache");
    let out = dir.path().join("out");
    let daemon = Daemon::launch(&config, dir.path().join("daemon.log")).tmpfs(&cache, 4096).start().await;
    daemon.eventually("v1.0.0 applied", PASS, async || applied_tag(&out) == "v1.0.0").await;
    let volume = Volume::of(&daemon, &cache);

    volume.fill(256 * 1024);
    let downloads = server.count("/storage/");
    let from = daemon.log().lines().count();
    // 2 MiB of one letter: a few KiB gzipped.
    server.add_release(REPO, "v1.1.0", &asset("two", "a".repeat(2 * 1024 * 1024)), false, false);
    daemon.logged("No space left on device", PASS).await;
    retried(&daemon, passes(&daemon.log())).await;

    let log = daemon.log();
    let loud = loud_lines(&log, from, "No space left on device");
    eprintln!("{} WARN/ERROR lines about the full volume over {RETRIES} passes:\n{}", loud.len(), loud.join("\n"));
    assert_eq!(server.count("/storage/"), downloads + 1, "the verified blob was downloaded again");
    assert_eq!(applied_tag(&out), "v1.0.0", "{log}");
    assert!(manifest(&out).contains("extra: one"));
    let st = status(&out);
    assert_eq!((st["ready"].as_bool(), st["reason"].as_str()), (Some(false), Some("ReleaseUnavailable")), "{st}");
    let message = st["message"].as_str().unwrap_or_default();
    assert!(message.contains("release v1.1.0") && message.contains("No space left on device"), "{st}");
    assert!(message.contains(&*cache.join("tmp").to_string_lossy()), "the path is not named: {st}");
    assert_eq!(volume.leftovers(), Vec::<PathBuf>::new(), "half-written files on the volume");
    assert!(!has_tree(&volume.path(""), "v1.1.0"), "a tree of v1.1.0 is in the cache");
    assert_eq!(loud.len(), 1, "one error per cause, not per retry:\n{}", loud.join("\n"));

    volume.free();
    let freed = Instant::now();
    daemon.eventually("v1.1.0 applied once space returned", PASS, async || applied_tag(&out) == "v1.1.0").await;
    eprintln!("v1.1.0 applied {:?} after the filler was removed", freed.elapsed());
    assert!(manifest(&out).contains("extra: two"));
    assert_eq!(server.count("/storage/"), downloads + 1, "the verified blob was downloaded again");
    daemon.stop().await;
    server.stop().await;
}

/// (c) The directory target's output volume full when a new release's status is to be written:
/// the status file stays the last good one, byte for byte (written by temp file and rename),
/// nothing of the new release is written, and it goes in once space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_file_write_on_a_full_volume_keeps_the_last_good_status_whole() {
    if !volumes_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/cfg.yaml", &configmap("cfg", "one"))]);
    let config = common::git_config(dir.path(), &repo.file_url()).edit_sub("stack", |s| s.interval("1s")).write();
    let daemon = Daemon::launch(&config, dir.path().join("daemon.log")).tmpfs(&dir.path().join("out"), 1024).start().await;
    let volume = Volume::of(&daemon, &dir.path().join("out"));
    let out = volume.path("");
    daemon.eventually("v1.0.0 applied", PASS, async || applied_tag(&out) == "v1.0.0").await;
    let good = std::fs::read(out.join("status/team-a/alpha.yaml")).expect("status file");

    volume.fill(0);
    let from = daemon.log().lines().count();
    repo.release("v1.1.0", &[("manifests/cfg.yaml", &configmap("cfg", "two"))]);
    daemon.logged("No space left on device", PASS).await;
    retried(&daemon, passes(&daemon.log())).await;

    let log = daemon.log();
    let loud = loud_lines(&log, from, "No space left on device");
    eprintln!("{} WARN/ERROR lines about the full volume over {RETRIES} passes:\n{}", loud.len(), loud.join("\n"));
    assert_eq!(std::fs::read(out.join("status/team-a/alpha.yaml")).expect("status file"), good, "the status file changed");
    assert!(manifest(&out).contains("extra: one"), "{log}");
    assert_eq!(volume.leftovers(), Vec::<PathBuf>::new(), "half-written files on the volume");
    assert!(loud.iter().any(|l| l.contains("status/team-a/alpha.yaml")), "the path is not named:\n{}", loud.join("\n"));
    assert_eq!(loud.len(), 1, "one error per cause, not per retry:\n{}", loud.join("\n"));

    volume.free();
    let freed = Instant::now();
    daemon.eventually("v1.1.0 applied once space returned", PASS, async || applied_tag(&out) == "v1.1.0").await;
    eprintln!("v1.1.0 applied {:?} after the filler was removed", freed.elapsed());
    assert!(manifest(&out).contains("extra: two"));
    assert_eq!(status(&out)["ready"], true);
    daemon.stop().await;
}

/// (e) The cache wiped (its contents removed) under the running daemon: the release in use is
/// downloaded and verified again, and a download that does not verify is never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_wiped_under_the_running_daemon_is_fetched_and_verified_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = GithubServer::start().await.expect("server");
    server.add_release(REPO, "v1.0.0", &asset("one", String::new()), false, false);
    let config = gh_config(dir.path(), &server).write();
    let cache = dir.path().join("cache");
    let out = dir.path().join("out");
    let daemon = Daemon::start(&config, dir.path().join("daemon.log")).await;
    daemon.eventually("v1.0.0 applied", PASS, async || applied_tag(&out) == "v1.0.0").await;
    let written = common::snapshot(&out.join("team-a"));
    let wipe = || {
        for e in std::fs::read_dir(&cache).expect("cache").flatten() {
            let p = e.path();
            let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        }
    };

    // Wiped: fetched again and verified; nothing rewritten.
    let downloads = server.count("/storage/");
    wipe();
    daemon
        .eventually("the release fetched again", PASS, async || server.count("/storage/") > downloads && has_tree(&cache, "v1.0.0"))
        .await;
    assert_eq!(common::snapshot(&out.join("team-a")), written, "files were rewritten");

    // Wiped again, and the next download is not the release's bytes: refused, nothing applied.
    server.fail_next(Route::Storage, Fault::WrongBytes);
    let from = daemon.log().lines().count();
    wipe();
    daemon.logged("digest mismatch", PASS).await;
    retried(&daemon, passes(&daemon.log())).await;
    assert_eq!(common::snapshot(&out.join("team-a")), written, "files were rewritten");
    assert_eq!(applied_tag(&out), "v1.0.0");
    let loud = loud_lines(&daemon.log(), from, "digest mismatch");
    assert_eq!(loud.len(), 1, "one error per cause, not per retry:\n{}", loud.join("\n"));
    daemon.stop().await;
    server.stop().await;
}

/// Whether the cache at `cache` holds a release tree of `tag` (its manifest alone does not count).
fn has_tree(cache: &Path, tag: &str) -> bool {
    std::fs::read_dir(cache.join("releases"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten().flatten())
        .any(|r| r.file_name().to_string_lossy().starts_with(&format!("{tag}@")) && r.path().is_dir())
}

/// (d) The Kubernetes target (testkit's API servers) with its cache volume remounted read-only
/// while a new GitHub release is published: the error names the read-only file system, the
/// ClusterSync keeps the last good release applied (the workload cluster's objects untouched)
/// and wants the new one, and after the remount read-write the next pass applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_cache_volume_keeps_the_cluster_on_its_release_and_recovers_on_remount() {
    use common::fleet::{Env, cm};
    if !volumes_available() {
        return;
    }
    let env = Env::new(1).await;
    let server = GithubServer::start().await.expect("server");
    let manifests = |version: &str| vec![("manifests.tar.gz".to_owned(), targz(&[("cm.yaml", &cm(version))]))];
    server.add_release(REPO, "v1.0.0", &manifests("one"), false, false);
    env.add_synced_cluster("alpha", 0).await;
    let config = Config::new(env.dir.path())
        .github("gh", REPO, &server.api_url())
        .sub(Sub::new("ferrol", "gh").health_timeout("0s").interval("1s").select("stack", "ferrol"))
        .kubernetes(env.mgmt.kubeconfig())
        .kubernetes_set("notReadyRetry", "1h")
        .write();
    let cache = env.dir.path().join("cache");
    let daemon = Daemon::launch(&config, env.dir.path().join("daemon.log")).tmpfs(&cache, 4096).start().await;
    daemon.eventually("v1.0.0 applied", PASS, async || env.applied("alpha").await == "v1.0.0").await;
    let volume = Volume::of(&daemon, &cache);

    volume.read_only(true);
    let from = daemon.log().lines().count();
    server.add_release(REPO, "v1.1.0", &manifests("two"), false, false);
    daemon
        .eventually("the ClusterSync says why", PASS, async || {
            env.cluster_sync("alpha")
                .await
                .is_some_and(|cs| common::condition(&cs, "Ready")["message"].as_str().is_some_and(|m| m.contains("Read-only file system")))
        })
        .await;
    // The controller backs off (1 s, 2 s, 4 s, …): the loud lines of the first try, then the
    // same after three retries and after two more.
    let repeats = |log: &str| log.lines().filter(|l| l.contains("Read-only file system") && l.contains("unchanged since")).count();
    daemon.eventually("three retries", Duration::from_secs(60), async || repeats(&daemon.log()) >= 3).await;
    let early = loud_lines(&daemon.log(), from, "Read-only file system").len();
    daemon.eventually("two more retries", Duration::from_secs(90), async || repeats(&daemon.log()) >= 5).await;

    let log = daemon.log();
    let loud = loud_lines(&log, from, "Read-only file system");
    eprintln!("{} WARN/ERROR lines about the read-only volume over {} retries:\n{}", loud.len(), repeats(&log) + 1, loud.join("\n"));
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0", "{cs}");
    assert_eq!(cs["status"]["wantedRelease"]["tag"], "v1.1.0", "the release wanted is not named: {cs}");
    let ready = common::condition(&cs, "Ready");
    assert_eq!(ready["status"], "False", "{cs}");
    assert!(ready["message"].as_str().is_some_and(|m| m.contains("Read-only file system")), "{cs}");
    let data = env.configmap(0, "addon-alpha").await.expect("applied").data.unwrap_or_default();
    assert_eq!(data["version"], "one");
    // One line per operation that met the volume (the index write, the download, the
    // Cluster's reconcile), none per retry.
    assert_eq!(loud.len(), early, "said again on a retry:\n{}", loud.join("\n"));
    assert!(loud.len() <= 3, "{}", loud.join("\n"));

    volume.read_only(false);
    let back = Instant::now();
    // At the Cluster's next retry: its backoff is capped at 30 s (±20 %).
    daemon.eventually("v1.1.0 applied after the remount", Duration::from_secs(45), async || env.applied("alpha").await == "v1.1.0").await;
    eprintln!("v1.1.0 applied {:?} after the remount read-write", back.elapsed());
    let data = env.configmap(0, "addon-alpha").await.expect("applied").data.unwrap_or_default();
    assert_eq!(data["version"], "two");
    daemon.stop().await;
    server.stop().await;
}
