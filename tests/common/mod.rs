//! Shared fixtures for the end-to-end tests: a config writer and a bounded CLI runner.
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod capi;
pub mod certs;
pub mod fleet;
pub mod real;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// Upper bound for one CLI invocation; a hang fails the test instead of CI.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// `(namespace, name, [(value name, value)])`
pub type Cluster<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// One subscription in a generated config.
pub struct Sub<'a> {
    pub name: &'a str,
    pub stack: Option<&'a str>,
    pub version: &'a str,
    pub clusters: &'a [Cluster<'a>],
}

impl Sub<'_> {
    pub fn simple(stack: Option<&'static str>) -> Sub<'static> {
        Sub { name: "stack", stack, version: "*", clusters: &[("team-a", "alpha", &[("region", "eu-1")])] }
    }
}

/// Renders a config with one git source, cache and output under `dir`.
pub fn config_text(dir: &Path, url: &str, allow_moved_tags: bool, subs: &[Sub<'_>]) -> String {
    let mut text = format!(
        "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: {}\nsources:\n  - name: stacks\n    git:\n      url: {url}\n      allowMovedTags: {allow_moved_tags}\nsubscriptions:\n",
        dir.join("cache").display()
    );
    for s in subs {
        text.push_str(&format!("  - name: {}\n    source: stacks\n    version: \"{}\"\n    interval: 1h\n", s.name, s.version));
        if let Some(stack) = s.stack {
            text.push_str(&format!("    stack: {stack}\n"));
        }
        text.push_str("    clusters:\n");
        for (ns, name, values) in s.clusters {
            text.push_str(&format!("      - name: {name}\n        namespace: {ns}\n"));
            if !values.is_empty() {
                text.push_str("        values:\n");
                for (k, v) in *values {
                    text.push_str(&format!("          {k}: \"{v}\"\n"));
                }
            }
        }
    }
    text.push_str(&format!("target:\n  directory: {}\n", dir.join("out").display()));
    text
}

pub fn write_config(dir: &Path, url: &str, allow_moved_tags: bool, subs: &[Sub<'_>]) -> PathBuf {
    let path = dir.join("stacksync.yaml");
    std::fs::write(&path, config_text(dir, url, allow_moved_tags, subs)).expect("write config");
    path
}

/// Runs the stacksync binary to completion (bounded by [`CLI_TIMEOUT`]).
pub async fn stacksync(args: &[&str]) -> Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(CLI_TIMEOUT, child).await.expect("stacksync finished in time").expect("run stacksync")
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

/// A config with one GitHub source (`github:` body given as YAML lines at 4-space indent) and one
/// subscription of semver releases for cluster team-a/alpha.
pub fn github_config(dir: &Path, github_lines: &str, sub_lines: &str) -> PathBuf {
    let text = format!(
        "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: {cache}\nsources:\n  - name: gh\n    github:\n{github_lines}subscriptions:\n  - name: stack\n    source: gh\n    interval: 1h\n{sub_lines}    clusters:\n      - name: alpha\n        namespace: team-a\n        values: {{region: eu-1}}\ntarget:\n  directory: {out}\n",
        cache = dir.join("cache").display(),
        out = dir.join("out").display(),
    );
    let path = dir.join("stacksync.yaml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// The helm binary: `$STACKSYNC_HELM`, `helm` on PATH, or where scripts/install-tools.sh puts it.
pub fn helm_path() -> PathBuf {
    if let Some(p) = std::env::var_os("STACKSYNC_HELM").map(PathBuf::from).filter(|p| p.is_file()) {
        return p;
    }
    let tools = std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/stacksync-tools")));
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("helm")).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(tools.map(|t| t.join("bin/helm")));
    for c in candidates {
        if c.is_file() {
            return c;
        }
    }
    panic!("helm is not installed: run scripts/install-tools.sh (it puts helm in ~/.cache/stacksync-tools/bin), or set STACKSYNC_HELM");
}

/// Runs `examples/<name>/run.sh` as a user runs it, from a copy (so the checkout stays clean)
/// under a root of links to what it reads (`scripts`, `testdata`, `deploy`, and the examples in
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
    for part in ["scripts", "testdata", "deploy"] {
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
