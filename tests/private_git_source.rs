//! Private Git sources end to end: Debian's `sshd` (key + known_hosts) and `lighttpd` running
//! `git http-backend` behind basic auth, both on loopback and started by the test. A refused
//! host key or password fails the poll with a message naming the source, and the release in use
//! stays.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_exit, configmap, git_config, run_once, status, stderr};
use serde_json::{Value, json};
use testkit::git::ReleaseRepo;
use testkit::private_git::{HttpGitServer, LIGHTTPD, SSHD, SshServer};

const STACK: &str = "docker-ferrol-1-27";

/// The servers are Debian packages scripts/test.sh installs; a bare `cargo test` elsewhere skips.
fn have(program: &str) -> bool {
    let found = Path::new(program).exists();
    assert!(found || std::env::var_os("CI").is_none(), "{program} is not installed; under CI scripts/test.sh must install it");
    if !found {
        eprintln!("SKIP: {program} is not installed (scripts/test.sh installs it)");
    }
    found
}

fn write_config(dir: &Path, url: &str, auth: Value) -> PathBuf {
    git_config(dir, url).source_set("stacks", "auth", auth).edit_sub("stack", |s| s.stack(STACK)).write()
}

fn applied_tag(dir: &Path) -> String {
    status(&dir.join("out"), "team-a", "alpha")["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
}

fn mirror_config(dir: &Path) -> String {
    let mirrors = std::fs::read_dir(dir.join("cache/git")).expect("git dir");
    mirrors.flatten().filter(|e| e.path().is_dir()).map(|e| std::fs::read_to_string(e.path().join("config")).unwrap_or_default()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_source_needs_a_known_host_key_and_keeps_the_last_release() {
    if !have(SSHD) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let served = dir.path().join("served");
    std::fs::create_dir(&served).expect("mkdir");
    let repo = ReleaseRepo::create(&served, "stacks").expect("create repo");
    repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    let server = SshServer::start(&dir.path().join("ssh")).await.expect("sshd");
    let known_hosts = server.known_hosts(true).expect("known_hosts");
    let wrong_hosts = server.known_hosts(false).expect("known_hosts");
    // As Kubernetes mounts a Secret by default: readable by all, which ssh alone would refuse.
    let key = dir.path().join("id_ed25519");
    std::fs::copy(server.client_key(), &key).expect("copy key");
    let readable = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o644);
    std::fs::set_permissions(&key, readable).expect("chmod");
    let auth = |hosts: &Path| json!({"ssh": {"privateKey": {"file": key}, "knownHosts": {"file": hosts}}});
    let url = server.url(&repo.bare);

    let config = write_config(dir.path(), &url, auth(&known_hosts));
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v1"));

    // The server's host key is not the one configured: refused, the release in use stays.
    repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "two"))]);
    let config = write_config(dir.path(), &url, auth(&wrong_hosts));
    let o = run_once(&config).await;
    let err = stderr(&o);
    assert!(err.contains("source stacks") && err.contains("host key is not in `auth.ssh.knownHosts`"), "{err}");
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v1"));

    let config = write_config(dir.path(), &url, auth(&known_hosts));
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v2"));
    assert!(!mirror_config(dir.path()).contains("ssh"), "the mirror's config names the remote: {}", mirror_config(dir.path()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_basic_auth_reads_the_password_each_poll_and_never_shows_it() {
    if !have(LIGHTTPD) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let served = dir.path().join("served");
    std::fs::create_dir(&served).expect("mkdir");
    let repo = ReleaseRepo::create(&served, "stacks").expect("create repo");
    repo.release(&format!("{STACK}-v1"), &[("manifests/addons.yaml", &configmap("addons", "one"))]);
    let server = HttpGitServer::start(&dir.path().join("http"), &served, "deployer", "right-horse-battery").await.expect("lighttpd");
    let password = dir.path().join("password");
    std::fs::write(&password, "right-horse-battery\n").expect("password");
    let auth = json!({"https": {"username": "deployer", "password": {"file": password}}});
    let config = write_config(dir.path(), &server.url("stacks.git"), auth);

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v1"));

    // A wrong password: refused with a clear message, the release in use stays.
    repo.release(&format!("{STACK}-v2"), &[("manifests/addons.yaml", &configmap("addons", "two"))]);
    std::fs::write(&password, "wrong-pony-staple").expect("password");
    let o = run_once(&config).await;
    let err = stderr(&o);
    assert!(err.contains("source stacks") && err.contains("refused the credentials"), "{err}");
    assert!(!err.contains("wrong-pony-staple"), "the password was logged: {err}");
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v1"));

    // The rotated password is read at the next poll.
    std::fs::write(&password, "right-horse-battery").expect("password");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v2"));
    assert!(!stderr(&o).contains("right-horse-battery"));
    let status_text = std::fs::read_to_string(dir.path().join("out/status/team-a/alpha.yaml")).expect("status");
    assert!(!status_text.contains("right-horse-battery"));
    assert!(!mirror_config(dir.path()).contains("right-horse-battery") && !mirror_config(dir.path()).contains("deployer"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_https_server_is_cut_off_at_the_fetch_deadline() {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};
    // Accepts connections and never answers.
    let (addr, hold) = common::black_hole().await;
    let url = format!("http://{addr}/stacks.git");
    let dir = tempfile::tempdir().expect("tempdir");
    let mirror = dir.path().join("git/stacks");
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        stacksync::source::git::fetch_with_deadline("stacks", &url, &mirror, &BTreeMap::new(), Duration::from_secs(2))
    })
    .await
    .expect("join");
    let err = result.expect_err("a silent server fails the fetch").to_string();
    assert!(err.contains("source stacks") && err.contains("timed out after 2s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    hold.abort();
}
