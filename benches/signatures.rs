//! Signed releases against the peer that checks the same signatures: `git verify-tag`, which
//! runs `ssh-keygen -Y verify` (SSH) or `gpg --verify` (OpenPGP) once per tag. One poll of a
//! source with `verify` re-checks every accepted tag with the keys read again, so this is the
//! cost a poll adds. Printed as ratios (stacksync ÷ peer): below 1, stacksync is faster.
//! Run: `cargo bench --bench signatures` (needs git, ssh-keygen and gpg on PATH).
//!
//! | case | stacksync | peer |
//! |---|---|---|
//! | verify 100 SSH-signed tags (ed25519) | `TrustFiles::load` + `Trust::verify_git_tag` ×100 | `git verify-tag` of the 100 tags |
//! | verify 100 OpenPGP-signed tags (ed25519) | the same with a keyring | `git verify-tag` with gpg |
//!
//! Tag objects are read from the repository once, before timing (the daemon has them from its
//! fetch); the keys are read from their files in every run, as every poll does.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use verify::TrustFiles;

const RUNS: usize = 5;
const TAGS: usize = 100;

fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn git(repo: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(repo).env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null").args([
        "-c",
        "user.name=bench",
        "-c",
        "user.email=bench@example.invalid",
    ]);
    c
}

/// A repository with `TAGS` tags signed with `sign` (`-c` options); returns the tag names and
/// their raw tag objects.
fn signed_repo(repo: &Path, sign: &[String]) -> (Vec<String>, Vec<Vec<u8>>) {
    run(git(repo.parent().expect("parent")).args(["init", "-q", "-b", "main"]).arg(repo));
    let mut names = Vec::new();
    let mut objects = Vec::new();
    for i in 0..TAGS {
        std::fs::write(repo.join("release.yaml"), format!("version: {i}\n")).expect("write");
        run(git(repo).args(["add", "-A"]));
        run(git(repo).args(["commit", "-q", "-m", &format!("release {i}")]));
        let tag = format!("v1.{i}.0");
        run(git(repo).args(sign).args(["tag", "-s", "-m", &tag, &tag]));
        let object = Command::new("git").current_dir(repo).args(["cat-file", "tag", &tag]).output().expect("cat-file").stdout;
        names.push(tag);
        objects.push(object);
    }
    (names, objects)
}

fn report(cases: &mut Vec<serde_json::Value>, machine: &serde_json::Value, case: &str, ours: Duration, peer: Duration, peer_name: &str) {
    cases.push(common::case(case, ours.as_secs_f64(), Some((peer.as_secs_f64(), peer_name)), "s", machine, json!({"bench": "signatures"})));
    println!(
        "{case:<44} stacksync {:>8.1} ms   {peer_name:<26} {:>8.1} ms   ratio {:>5.3}",
        ours.as_secs_f64() * 1e3,
        peer.as_secs_f64() * 1e3,
        ours.as_secs_f64() / peer.as_secs_f64()
    );
}

fn ours(files: &TrustFiles, names: &[String], objects: &[Vec<u8>]) -> Duration {
    median(|| {
        let trust = files.load().expect("keys");
        for (tag, object) in names.iter().zip(objects) {
            trust.verify_git_tag(tag, object, verify::unix_now()).expect("verifies");
        }
    })
}

fn ssh(dir: &Path, cases: &mut Vec<serde_json::Value>, machine: &serde_json::Value) {
    let key = dir.join("release");
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "release", "-f"]).arg(&key));
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("pub");
    let signers = dir.join("allowed_signers");
    std::fs::write(&signers, format!("bench@example.invalid {public}")).expect("signers");
    let repo = dir.join("ssh-repo");
    let sign = ["-c".to_owned(), "gpg.format=ssh".to_owned(), "-c".to_owned(), format!("user.signingkey={}", key.display())];
    let (names, objects) = signed_repo(&repo, &sign);
    let files = TrustFiles { ssh_allowed_signers: Some(("allowedSigners".into(), signers.clone())), ..TrustFiles::default() };
    let ours = ours(&files, &names, &objects);
    let peer = median(|| {
        run(git(&repo)
            .args(["-c", "gpg.format=ssh", "-c", &format!("gpg.ssh.allowedSignersFile={}", signers.display()), "verify-tag"])
            .args(&names));
    });
    report(cases, machine, &format!("verify {TAGS} SSH-signed tags (ed25519)"), ours, peer, "git verify-tag (ssh-keygen)");
}

fn openpgp(dir: &Path, cases: &mut Vec<serde_json::Value>, machine: &serde_json::Value) {
    use std::os::unix::fs::PermissionsExt;
    let home = dir.join("gnupg");
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let program: PathBuf = dir.join("gpg-wrapper");
    std::fs::write(&program, format!("#!/bin/sh\nexec gpg --homedir '{}' --batch \"$@\"\n", home.display())).expect("wrapper");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    run(Command::new(&program).args(["--passphrase", "", "--quick-gen-key", "Bench <bench@example.invalid>", "ed25519", "sign", "never"]));
    let listing = run(Command::new(&program).args(["--with-colons", "--list-keys", "bench@example.invalid"]));
    let fpr = listing.lines().find_map(|l| l.strip_prefix("fpr:")).map(|l| l.trim_matches(':').to_owned()).expect("fingerprint");
    let keyring = dir.join("keys.asc");
    std::fs::write(&keyring, run(Command::new(&program).args(["--armor", "--export", &fpr]))).expect("keyring");
    let repo = dir.join("gpg-repo");
    let sign = ["-c".to_owned(), format!("gpg.program={}", program.display()), "-c".to_owned(), format!("user.signingkey={fpr}")];
    let (names, objects) = signed_repo(&repo, &sign);
    let files = TrustFiles { openpgp_keyring: Some(("keyring".into(), keyring)), ..TrustFiles::default() };
    let ours = ours(&files, &names, &objects);
    let peer = median(|| {
        run(git(&repo).args(["-c", &format!("gpg.program={}", program.display()), "verify-tag"]).args(&names));
    });
    report(cases, machine, &format!("verify {TAGS} OpenPGP-signed tags (ed25519)"), ours, peer, "git verify-tag (gpg)");
    let _ = Command::new("gpgconf").arg("--homedir").arg(&home).args(["--kill", "gpg-agent"]).status();
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let machine = common::machine(&[("git", Path::new("git")), ("ssh-keygen", Path::new("ssh-keygen")), ("gpg", Path::new("gpg"))]);
    println!("median of {RUNS} runs; ratio = stacksync / peer (below 1: stacksync is faster)");
    let mut cases = Vec::new();
    ssh(dir.path(), &mut cases, &machine);
    openpgp(dir.path(), &mut cases, &machine);
    let out = common::out_path();
    common::write(&out, &cases, false);
    println!("results appended to {}", out.display());
}
