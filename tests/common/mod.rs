//! The harness of the end-to-end tests: one way to write the daemon's config
//! ([`config::Config`]), to run it ([`daemon::Daemon`], [`stacksync`] for the CLI) and to wait
//! for it ([`daemon::eventually`]), and the servers it runs against: testkit's API servers
//! ([`fleet::Env`]), the real control plane ([`real::Tenant`]), the real Cluster API
//! ([`capi::CapiTenant`]). docs/testing.md says which test uses which.
#![allow(dead_code, unused_imports, reason = "each test binary uses a different subset")]

pub mod capi;
pub mod certs;
pub mod config;
pub mod daemon;
pub mod fleet;
pub mod real;

pub use config::{Config, Sub};
pub use daemon::{Daemon, eventually};

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kube::api::{ApiResource, GroupVersionKind};

/// Upper bound for one CLI invocation; a hang fails the test instead of CI.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the stacksync binary to completion (bounded by [`CLI_TIMEOUT`]).
pub async fn stacksync(args: &[&str]) -> Output {
    cli(args, &[]).await
}

/// [`stacksync`] with extra environment (`RUST_LOG` and `NO_COLOR` are set first: `env` wins).
pub async fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"));
    cmd.args(args).env("RUST_LOG", "info").env("NO_COLOR", "1").kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(CLI_TIMEOUT, cmd.output()).await.expect("stacksync finished in time").expect("run stacksync")
}

/// `check-config FILE`.
pub async fn check_config(config: &Path) -> Output {
    stacksync(&["check-config", &config.to_string_lossy()]).await
}

/// `run --once --config FILE`.
pub async fn run_once(config: &Path) -> Output {
    stacksync(&["run", "--once", "--config", &config.to_string_lossy()]).await
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code, showing both streams on failure.
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
}

/// A manifest for a ConfigMap whose data holds `${cluster.name}` and `${region}`.
pub fn configmap(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: kube-system\ndata:\n  cluster: ${{cluster.name}}\n  region: ${{region}}\n  extra: \"{extra}\"\n"
    )
}

/// Reads a status file as YAML.
/// The tag a directory target's status file says was applied; empty before there is one.
pub fn applied_tag(out: &Path, ns: &str, cluster: &str) -> String {
    let Ok(text) = std::fs::read_to_string(out.join("status").join(ns).join(format!("{cluster}.yaml"))) else { return String::new() };
    let status: serde_json::Value = serde_saphyr::from_str(&text).unwrap_or_default();
    status["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
}

pub fn status(out: &Path, ns: &str, cluster: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("status").join(ns).join(format!("{cluster}.yaml"))).expect("status file");
    serde_saphyr::from_str(&text).expect("status is YAML")
}

/// Every file under `dir` with its inode and modification time, to prove nothing was rewritten.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path(), meta.ino(), meta.modified().expect("mtime")));
            }
        }
    }
    out.sort();
    out
}

/// A `.tar.gz` of `(path, content)` files, as a release asset.
pub fn targz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, path, content.as_bytes()).expect("append");
    }
    builder.into_inner().expect("tar").finish().expect("gzip")
}

/// A `.tar.gz` written header by header, so hostile names (`../x`) can be built: the tar
/// crate's safe builder refuses them.
pub fn raw_targz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.extend_from_slice(header.as_bytes());
        tar.extend_from_slice(content.as_bytes());
        tar.resize(tar.len().div_ceil(512) * 512, 0);
    }
    tar.resize(tar.len() + 1024, 0);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).expect("gzip");
    gz.finish().expect("gzip")
}

/// Subscription `stack` of source `source` for the one Cluster team-a/alpha (values
/// `region: eu-1`), as the directory target's tests list it.
pub fn alpha(source: &str) -> Sub {
    Sub::new("stack", source).cluster("team-a", "alpha", &[("region", "eu-1")])
}

/// The directory target's usual config: Git source `stacks` at `url`, [`alpha`] taking every
/// version (`"*"`), written under `dir/out`.
pub fn git_config(dir: &Path, url: &str) -> Config {
    Config::new(dir).git("stacks", url).sub(alpha("stacks").version("*")).directory()
}

/// The same with GitHub source `gh` of `repo` (API at `api_url`) and its semver releases.
pub fn github_config(dir: &Path, repo: &str, api_url: &str) -> Config {
    Config::new(dir).github("gh", repo, api_url).sub(alpha("gh")).directory()
}

/// A server on a free loopback port that accepts connections and never answers (a hanging
/// Git server, GitHub API, registry): its `127.0.0.1:<port>` and the task to abort at the end.
pub async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (addr, task)
}

/// The names in `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// How many temporary files of unfinished downloads the blob cache under `dir/cache` holds.
pub fn blob_tmp_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("cache/blobs/sha256"))
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".tmp")).count())
        .unwrap_or(0)
}

/// Replaces the file the way editors do (and Secret volumes change): a temporary file renamed
/// over it.
pub fn save_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("yaml.swp");
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

/// A Kubernetes API resource by group, version and kind.
/// Writes an executable script without this process ever holding it open for writing. A child
/// that another test thread forks meanwhile inherits such a descriptor until its own exec, and
/// an exec of the script in that window fails with ETXTBSY ("Text file busy"), seen in a full
/// run. So the text goes to a staging file, and `install` (a child of its own) makes the script.
pub fn write_script(path: &Path, text: &str) {
    let name = path.file_name().expect("a file name").to_string_lossy();
    let staged = path.with_file_name(format!("{name}.staged"));
    std::fs::write(&staged, text).expect("staging the script");
    let out = std::process::Command::new("install").args(["-m", "0755"]).arg(&staged).arg(path).output().expect("run install");
    assert!(out.status.success(), "install {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(&staged).expect("remove the staging file");
}

pub fn res(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The condition `type_` of an object's `status.conditions` (`Null` when absent).
pub fn condition<'a>(obj: &'a serde_json::Value, type_: &str) -> &'a serde_json::Value {
    obj["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == type_)).unwrap_or(&serde_json::Value::Null)
}

/// A tool scripts/install-tools.sh installs (`kubectl`, `helm`, `cosign`): in
/// `$STACKSYNC_TOOLS_DIR/bin` or `~/.cache/stacksync-tools/bin`.
pub fn tool(name: &str) -> Option<PathBuf> {
    Some(fake_apiserver::kubectl::tools_bin_dir().join(name)).filter(|p| p.is_file())
}

/// The helm binary: `$STACKSYNC_HELM`, `helm` on PATH, or where scripts/install-tools.sh puts it.
pub fn helm_path() -> PathBuf {
    if let Some(p) = std::env::var_os("STACKSYNC_HELM").map(PathBuf::from).filter(|p| p.is_file()) {
        return p;
    }
    let on_path =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join("helm")).collect::<Vec<_>>()).unwrap_or_default();
    if let Some(p) = on_path.into_iter().find(|p| p.is_file()) {
        return p;
    }
    tool("helm").unwrap_or_else(|| {
        panic!("helm is not installed: run scripts/install-tools.sh (it puts helm in ~/.cache/stacksync-tools/bin), or set STACKSYNC_HELM")
    })
}

/// Runs `examples/<name>/run.sh` as a user runs it, from a copy (so the checkout stays clean)
/// under a root of links to what it reads (`scripts`, `testdata`, `deploy`, `renderer`, and the examples in
/// `also`), with the binaries under test (`STACKSYNC_BIN`, `TESTKIT_BIN`) and `env`. `None`
/// (after saying why) when `testkit` is not built, outside CI.
pub async fn run_example(name: &str, also: &[&str], env: &[(&str, &str)], within: Duration) -> Option<Output> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let stacksync = Path::new(env!("CARGO_BIN_EXE_stacksync"));
    let testkit_bin = stacksync.with_file_name("testkit");
    if !testkit_bin.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is not built (cargo test --workspace builds it)", testkit_bin.display());
        eprintln!("SKIPPED: {} is not built (cargo build -p testkit)", testkit_bin.display());
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    // `renderer`: scripts/install-tools.sh builds the library renderer from its sources.
    for part in ["scripts", "testdata", "deploy", "renderer"] {
        std::os::unix::fs::symlink(root.join(part), tmp.path().join(part)).expect("symlink");
    }
    std::fs::create_dir_all(tmp.path().join("examples")).expect("examples");
    for other in also {
        std::os::unix::fs::symlink(root.join("examples").join(other), tmp.path().join("examples").join(other)).expect("symlink");
    }
    let example = tmp.path().join("examples").join(name);
    let cp = std::process::Command::new("cp").arg("-R").arg(root.join("examples").join(name)).arg(&example).status().expect("cp");
    assert!(cp.success());
    let _ = std::fs::remove_dir_all(example.join(".work"));
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(example.join("run.sh")).env("STACKSYNC_BIN", stacksync).env("TESTKIT_BIN", &testkit_bin).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(within, cmd.output()).await.expect("the example in time").expect("bash runs");
    assert!(
        out.status.success(),
        "examples/{name}/run.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out)
}

/// The daemon says that `tag` of source `source` was deleted upstream once, at WARN, and what
/// it does about it (`staying on it`) once, at INFO — and neither again over the next three
/// polls of the source.
pub async fn assert_deletion_said_once(daemon: &Daemon, source: &str, tag: &str) {
    let within = std::time::Duration::from_secs(30);
    daemon.logged("tag was deleted upstream", within).await;
    let polls = format!("stacksync_source_polls_total{{source=\"{source}\",result=\"success\"}}");
    let seen = daemon.metric(&polls).await;
    daemon.eventually("three more polls", within, async || daemon.metric(&polls).await >= seen + 3.0).await;
    let log = daemon.log();
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect::<Vec<_>>();
    let deleted = lines("tag was deleted upstream");
    assert_eq!(deleted.len(), 1, "said once, not at every poll:\n{log}");
    assert!(deleted[0].contains(" WARN ") && deleted[0].contains(tag), "{}", deleted[0]);
    let staying = lines("is no longer advertised; staying on it");
    assert_eq!(staying.len(), 1, "said once, not at every poll:\n{log}");
    assert!(staying[0].contains(" INFO "), "{}", staying[0]);
}
