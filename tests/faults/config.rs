//! A hostile config file: alias bombs, huge or endless files, durations that overflow,
//! duplicate values and YAML tags. `check-config` refuses each with file, line and field, in
//! bounded time and memory.

use std::path::Path;
use std::time::{Duration, Instant};

const HEAD: &str = "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: ./cache\nsources:\n  - name: s\n    git:\n      url: file:///srv/stacks.git\n";

fn subscription(extra: &str) -> String {
    format!(
        "{HEAD}subscriptions:\n  - name: sub\n    source: s\n    version: \"*\"\n{extra}    clusters:\n      - name: alpha\ntarget:\n  directory: ./out\n"
    )
}

/// Runs `check-config` under a memory cap (so a regression fails this test, not the machine)
/// and a time bound.
fn check_config(file: &Path) -> (Option<i32>, String) {
    let started = Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v 1048576; exec \"{}\" check-config \"$0\"", env!("CARGO_BIN_EXE_stacksync")))
        .arg(file)
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "check-config took {:?}", started.elapsed());
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn write(dir: &Path, text: &str) -> std::path::PathBuf {
    let file = dir.join("stacksync.yaml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn alias_bomb_config_aborted_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let mut bomb = String::from("x-bomb:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!("  a{i}: &a{i} [{}]\n", vec![format!("*a{p}"); 10].join(", ")));
    }
    assert!(bomb.len() < 3000);
    let (code, out) = check_config(&write(dir.path(), &format!("{bomb}{}", subscription(""))));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("stacksync.yaml:") && out.contains("expands to more than"), "{out}");
}

#[test]
fn config_path_to_dev_zero_read_until_allocation_failed() {
    let (code, out) = check_config(Path::new("/dev/zero"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("/dev/zero") && out.contains("not a regular file"), "{out}");
}

#[test]
fn huge_config_file_was_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = subscription("");
    text.push_str("# padding\n".repeat(300_000).as_str());
    let (code, out) = check_config(&write(dir.path(), &text));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("larger than 1048576 bytes"), "{out}");
}

#[test]
fn huge_durations_passed_check_config() {
    let dir = tempfile::tempdir().unwrap();
    for interval in ["18446744073709551615s", "99999999999999999h", "18446744073709551615s18446744073709551615s"] {
        let (code, out) = check_config(&write(dir.path(), &subscription(&format!("    interval: {interval}\n"))));
        assert_eq!(code, Some(2), "{interval}: {out}");
        assert!(out.contains("subscriptions[0].interval") && out.contains("longer than the maximum"), "{out}");
    }
    let text = subscription("").replace("  directory: ./out\n", "  kubernetes:\n    notReadyRetry: 99999999999999999h\n");
    let (code, out) = check_config(&write(dir.path(), &text));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("notReadyRetry") && out.contains("longer than the maximum"), "{out}");
}

#[test]
fn duplicate_value_keys_were_accepted_silently() {
    let dir = tempfile::tempdir().unwrap();
    let text = subscription("    values:\n      region: eu-1\n      net:\n        cidr: a\n        cidr: b\n      region: eu-2\n");
    let (code, out) = check_config(&write(dir.path(), &text));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("subscriptions[0].values.net.cidr: duplicate value `cidr`"), "{out}");
    assert!(out.contains("subscriptions[0].values.region: duplicate value `region` (first set at line"), "{out}");
}

#[test]
fn unknown_yaml_tags_were_accepted_silently() {
    let dir = tempfile::tempdir().unwrap();
    for value in ["!!binary aGVsbG8=", "!foo eu-1"] {
        let (code, out) = check_config(&write(dir.path(), &subscription(&format!("    values:\n      region: {value}\n"))));
        assert_eq!(code, Some(2), "{value}: {out}");
        assert!(out.contains("YAML tag") && out.contains("stacksync.yaml:"), "{out}");
    }
}
