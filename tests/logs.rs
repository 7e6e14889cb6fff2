//! Logs an operator can read: with `--log-format json` every stderr line is one JSON object,
//! start-up errors included (a bad argument, an invalid config, a taken admin port); `--version`
//! names the commit and the build date.

use std::process::{Command, Output};

fn stacksync(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stacksync")).args(args).env("NO_COLOR", "1").output().expect("run stacksync")
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.trim().is_empty(), "nothing on stderr");
    err.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

#[test]
fn start_up_errors_are_json_lines_with_log_format_json() {
    let bad_arg = stacksync(&["--log-format", "json", "run", "--bogus"]);
    assert_eq!(bad_arg.status.code(), Some(2));
    assert!(json_lines(&bad_arg)[0]["message"].as_str().is_some_and(|m| m.contains("--bogus")));

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("stacksync.yaml");
    std::fs::write(&config, "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: c}\ntarget: {directory: out}\nbogus: 1\n")
        .expect("write");
    let invalid = stacksync(&["--log-format=json", "run", "--config", &config.to_string_lossy()]);
    assert_eq!(invalid.status.code(), Some(2));
    let lines = json_lines(&invalid);
    assert_eq!((lines[0]["line"].as_u64(), lines[0]["field"].as_str()), (Some(5), Some("bogus")), "{lines:?}");

    // A port that is taken: the listener is bound before anything starts.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    std::fs::write(&config, "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: c}\ntarget: {directory: out}\n").expect("write");
    let busy = stacksync(&["--log-format", "json", "run", "--admin-addr", &addr, "--config", &config.to_string_lossy()]);
    assert_eq!(busy.status.code(), Some(1));
    assert!(json_lines(&busy).iter().any(|l| l["message"].as_str().is_some_and(|m| m.contains(&addr))));
}

#[test]
fn version_names_the_commit_and_build_date() {
    let o = stacksync(&["--version"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with(&format!("stacksync {} (commit ", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains(", built 20") || text.contains(", built unknown"), "{text}");
}
