//! Broken config files: every error names file, line, column and field path, and
//! `check-config` prints all of them.

use std::path::Path;

use stacksync::config::Config;

const BASE: &str = r#"apiVersion: stacksync.io/v1alpha1
kind: Config
cache:
  dir: /var/cache/stacksync
sources:
  - name: stacks
    git:
      url: git://127.0.0.1/stacks.git
subscriptions:
  - name: ferrol
    source: stacks
    stack: docker-ferrol-1-27
    version: ">=v2"
    interval: 5m
    clusters:
      - name: alpha
        namespace: team-a
target:
  directory: /srv/out
"#;

const FILE: &str = "/etc/stacksync/stacksync.yaml";

/// Applies `(old, new)` replacements to the base config; each `old` must occur.
fn edit(edits: &[(&str, &str)]) -> String {
    let mut text = BASE.to_owned();
    for (old, new) in edits {
        assert!(text.contains(old), "test bug: `{old}` not in config");
        text = text.replacen(old, new, 1);
    }
    text
}

fn errors(text: &str) -> Vec<String> {
    match Config::parse(Path::new(FILE), text) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn base_config_is_valid() {
    let config = Config::parse(Path::new(FILE), BASE).expect("base config is valid");
    assert_eq!(config.subscriptions[0].clusters[0].namespace, "team-a");
}

/// (what is broken, edits to the base config, expected error prefixes after the file name).
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [&'a str]);

#[test]
fn broken_configs_name_file_line_column_and_field() {
    let table: &[Case] = &[
        (
            "unknown top-level field",
            vec![("  directory: /srv/out\n", "  directory: /srv/out\nextra: 1\n")],
            &["20:1: extra: unknown field `extra`, expected one of: apiVersion, kind, cache, sources, subscriptions, target"],
        ),
        (
            "wrong apiVersion",
            vec![("stacksync.io/v1alpha1", "stacksync.io/v1")],
            &["1:13: apiVersion: expected `stacksync.io/v1alpha1`, found `stacksync.io/v1`"],
        ),
        ("missing cache", vec![("cache:\n  dir: /var/cache/stacksync\n", "")], &["1:1: cache: missing required field `cache`"]),
        (
            "unsupported URL scheme",
            vec![("git://127.0.0.1", "ftp://127.0.0.1")],
            &["8:12: sources[0].git.url: unsupported scheme `ftp`; expected file, git, http or https"],
        ),
        (
            "credentials in URL",
            vec![("git://127.0.0.1", "git://user:pw@127.0.0.1")],
            &["8:12: sources[0].git.url: credentials must not be written into the URL"],
        ),
        (
            "unknown source",
            vec![("source: stacks", "source: stackz")],
            &["11:13: subscriptions[0].source: unknown source `stackz`, defined sources: stacks"],
        ),
        (
            "duplicate field",
            vec![("    source: stacks\n", "    source: stacks\n    source: stacks\n")],
            &["12:5: subscriptions[0].source: duplicate field `source` (first set at line 11)"],
        ),
        (
            "stack is not a cluster-stack name",
            vec![("stack: docker-ferrol-1-27", "stack: ferrol")],
            &["12:12: subscriptions[0].stack: `ferrol` is not a cluster-stack name"],
        ),
        (
            "invalid constraint",
            vec![(r#"">=v2""#, r#"">= banana""#)],
            &["13:14: subscriptions[0].version: expected a semver range such as"],
        ),
        (
            "semver constraint on a cluster stack",
            vec![(r#"">=v2""#, r#""^1.2""#)],
            &["13:14: subscriptions[0].version: `^1.2` is a semver range, but `stack` selects cluster-stack tags"],
        ),
        ("bad cron", vec![("interval: 5m", r#"schedule: "61 * * * *""#)], &["14:15: subscriptions[0].schedule: invalid cron expression"]),
        (
            "cron with the wrong field count",
            vec![("interval: 5m", r#"schedule: "* * *""#)],
            &["14:15: subscriptions[0].schedule: expected a cron expression with 5 fields"],
        ),
        (
            "bad interval",
            vec![("interval: 5m", "interval: 5 minutes")],
            &["14:15: subscriptions[0].interval: expected a duration such as `30s`, `5m` or `1h30m`, found `5 minutes`"],
        ),
        (
            "schedule and interval",
            vec![("    interval: 5m\n", "    interval: 5m\n    schedule: \"* * * * *\"\n")],
            &["15:15: subscriptions[0].schedule: set either `schedule` or `interval`, not both"],
        ),
        (
            "non-boolean autoUpgrade",
            vec![("    interval: 5m\n", "    interval: 5m\n    autoUpgrade: yes\n")],
            &["15:18: subscriptions[0].autoUpgrade: expected `true` or `false`, found `yes`"],
        ),
        (
            "invalid cluster name",
            vec![("name: alpha", "name: Alpha_1")],
            &["16:15: subscriptions[0].clusters[0].name: `Alpha_1` is not a valid name"],
        ),
        (
            "unknown cluster field",
            vec![("namespace: team-a", "namespaces: team-a")],
            &["17:9: subscriptions[0].clusters[0].namespaces: unknown field `namespaces`, expected one of: name, namespace, values"],
        ),
        (
            "list in values",
            vec![("        namespace: team-a\n", "        namespace: team-a\n        values: {cidrs: [a, b]}\n")],
            &["18:25: subscriptions[0].clusters[0].values.cidrs: expected a scalar or a mapping, found a list"],
        ),
        (
            "reserved value name",
            vec![("        namespace: team-a\n", "        namespace: team-a\n        values: {cluster: x}\n")],
            &["18:18: subscriptions[0].clusters[0].values.cluster: `cluster` is reserved"],
        ),
        (
            "missing clusters",
            vec![("    clusters:\n      - name: alpha\n        namespace: team-a\n", "")],
            &["10:5: subscriptions[0].clusters: missing required field `clusters`"],
        ),
        (
            "cluster in two subscriptions",
            vec![(
                "        namespace: team-a\n",
                "        namespace: team-a\n  - name: other\n    source: stacks\n    clusters:\n      - name: alpha\n        namespace: team-a\n",
            )],
            &["21:9: subscriptions[1].clusters[0]: cluster `team-a/alpha` is already subscribed by `ferrol`"],
        ),
        (
            "reserved namespace",
            vec![("namespace: team-a", "namespace: status")],
            &["17:20: subscriptions[0].clusters[0].namespace: namespace `status` is reserved"],
        ),
        (
            "wrong type for sources",
            vec![("sources:\n  - name: stacks\n    git:\n      url: git://127.0.0.1/stacks.git\n", "sources: stacks\n")],
            &["5:10: sources: expected a list, found a scalar"],
        ),
        ("missing target kind", vec![("  directory: /srv/out\n", "  {}\n")], &[]),
    ];
    for (name, edits, want) in table {
        let got = errors(&edit(edits));
        if want.is_empty() {
            assert!(!got.is_empty(), "{name}: expected an error");
            continue;
        }
        assert_eq!(got.len(), want.len(), "{name}: got {got:#?}");
        for (g, w) in got.iter().zip(want.iter()) {
            let w = format!("{FILE}:{w}");
            assert!(g.starts_with(&w), "{name}:\n  got  {g}\n  want {w}…");
        }
    }
}

#[test]
fn every_error_is_reported_not_only_the_first() {
    let text = edit(&[("git://127.0.0.1", "ftp://127.0.0.1"), ("name: alpha", "name: Alpha_1"), ("interval: 5m", "interval: soon")]);
    let got = errors(&text);
    let lines: Vec<&str> = got.iter().map(|e| e.split(": ").next().unwrap_or_default()).collect();
    assert_eq!(lines, [format!("{FILE}:8:12"), format!("{FILE}:14:15"), format!("{FILE}:16:15")]);
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let got = errors(&edit(&[("  dir: /var/cache/stacksync", "  dir: [unclosed")]));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with(&format!("{FILE}:")), "{}", got[0]);
    assert!(got[0].contains("invalid YAML"), "{}", got[0]);
    let empty = errors("");
    assert!(empty[0].ends_with("the file is empty; expected a `kind: Config` document"), "{}", empty[0]);
}

#[test]
fn relative_paths_resolve_against_the_config_file() {
    let text = edit(&[("/var/cache/stacksync", "cache"), ("git://127.0.0.1/stacks.git", "./repo.git"), ("/srv/out", "out")]);
    let config = Config::parse(Path::new("/etc/stacksync/stacksync.yaml"), &text).expect("valid");
    assert_eq!(config.cache.dir, Path::new("/etc/stacksync/cache"));
    match &config.sources[0].kind {
        stacksync::config::SourceKind::Git(g) => assert_eq!(g.url, "file:///etc/stacksync/repo.git"),
        other => panic!("expected a git source, got {other:?}"),
    }
}

#[test]
fn check_config_prints_every_error_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, edit(&[("git://127.0.0.1", "ftp://127.0.0.1"), ("name: alpha", "name: Alpha_1")])).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stacksync")).arg("check-config").arg(&file).output().expect("run stacksync");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:8:12: sources[0].git.url:", file.display())), "{stderr}");
    assert!(stderr.contains(&format!("{}:16:15: subscriptions[0].clusters[0].name:", file.display())), "{stderr}");
    assert!(stderr.contains("2 error(s); config is invalid"), "{stderr}");

    std::fs::write(&file, BASE).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stacksync")).arg("check-config").arg(&file).output().expect("run stacksync");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn templates_strict_is_a_bool_and_defaults_to_false() {
    let config = Config::parse(Path::new(FILE), BASE).expect("valid");
    assert!(!config.templates.strict);
    let text = edit(&[("target:\n", "templates:\n  strict: true\ntarget:\n")]);
    assert!(Config::parse(Path::new(FILE), &text).expect("valid").templates.strict);
    let text = edit(&[("target:\n", "templates:\n  strict: yes\n  loud: 1\ntarget:\n")]);
    let errs = errors(&text);
    assert!(errs.iter().any(|e| e.contains("templates.strict: expected `true` or `false`")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("templates.loud: unknown field `loud`, expected one of: strict")), "{errs:?}");
}

#[test]
fn git_auth_is_checked_with_file_line_and_field() {
    let url = "      url: git://127.0.0.1/stacks.git\n";
    let ssh = "      url: ssh://git@127.0.0.1:2222/stacks.git\n      auth:\n        ssh:\n          privateKey: {file: key}\n          knownHosts: {file: known_hosts}\n";
    let config = Config::parse(Path::new(FILE), &edit(&[(url, ssh)])).expect("ssh source is valid");
    match &config.sources[0].kind {
        stacksync::config::SourceKind::Git(g) => assert_eq!(
            g.auth,
            Some(stacksync::model::source::GitAuth::Ssh {
                private_key: "/etc/stacksync/key".into(),
                known_hosts: "/etc/stacksync/known_hosts".into()
            })
        ),
        other => panic!("expected a git source, got {other:?}"),
    }
    let scp = ssh.replace("ssh://git@127.0.0.1:2222/stacks.git", "git@git.example.org:org/stacks.git");
    assert!(errors(&edit(&[(url, &scp)])).is_empty());
    let https = "      url: https://git.example.org/stacks.git\n      auth:\n        https:\n          username: deployer\n          password: {env: GIT_PASSWORD}\n";
    assert!(errors(&edit(&[(url, https)])).is_empty());

    let table: Vec<(&str, String, &[&str])> = vec![
        (
            "ssh URL without auth",
            "      url: ssh://git@127.0.0.1/stacks.git\n".to_owned(),
            &["8:12: sources[0].git.url: `ssh://git@127.0.0.1/stacks.git` is an SSH URL: set `auth.ssh`"],
        ),
        (
            "scp-like URL without auth",
            "      url: git@example.org:stacks.git\n".to_owned(),
            &["8:12: sources[0].git.url: `git@example.org:stacks.git` is an SSH URL"],
        ),
        (
            "ssh auth on an https URL",
            ssh.replace("ssh://git@127.0.0.1:2222", "https://127.0.0.1"),
            &["8:12: sources[0].git.url: `auth.ssh` needs an SSH URL"],
        ),
        (
            "password over plain http",
            https.replace("https://git.example.org", "http://git.example.org"),
            &["8:12: sources[0].git.url: credentials are sent only over https://"],
        ),
        (
            "two kinds of auth",
            format!("{https}        bearerToken: {{file: token}}\n"),
            &["10:9: sources[0].git.auth: set exactly one of `ssh`, `https` or `bearerToken`"],
        ),
        (
            "no known_hosts",
            ssh.replace("          knownHosts: {file: known_hosts}\n", ""),
            &["11:11: sources[0].git.auth.ssh.knownHosts: required"],
        ),
        (
            "password both file and env",
            https.replace("{env: GIT_PASSWORD}", "{env: P, file: p}"),
            &["12:21: sources[0].git.auth.https.password: set exactly one of `file`"],
        ),
        ("unknown auth field", format!("{https}        token: x\n"), &["13:9: sources[0].git.auth.token: unknown field `token`"]),
    ];
    for (name, new, want) in &table {
        let got = errors(&edit(&[(url, new)]));
        assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
        for (g, w) in got.iter().zip(want.iter()) {
            let w = format!("{FILE}:{w}");
            assert!(g.starts_with(&w), "{name}:\n  got  {g}\n  want {w}…");
        }
    }
}
