//! Signed releases end to end, with the real signers, offline: Git tags signed by the real `git`
//! with `ssh-keygen` (`gpg.format=ssh`) and with Debian's `gpg` (ed25519 and RSA keys), served by
//! `git daemon`; OCI artifacts signed by the real `cosign` (scripts/build-cosign.sh) in Debian's
//! `docker-registry`; GitHub release assets signed with `cosign sign-blob` and `ssh-keygen -Y
//! sign`, served by testkit's release server. Only what a trusted key signed is applied; every
//! refusal names the tag, the signer found and the trusted keys; a key rotated in and out while
//! the daemon runs counts from the next poll.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::fleet::Env;
use common::{Config, Daemon, assert_exit, configmap, run_once, status, stderr, targz};
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use testkit::git::{GitDaemon, ReleaseRepo};

/// How long the daemon may take to follow a rotated key.
const WITHIN: Duration = Duration::from_secs(60);

/// Runs a command to success, returning stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A new ed25519 SSH key pair; returns the private key's path (`.pub` beside it).
fn ssh_key(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&key));
    key
}

fn ssh_pub(key: &Path) -> String {
    std::fs::read_to_string(key.with_extension("pub")).expect("public key").trim().to_owned()
}

/// `ssh:SHA256:…` of a key, as `ssh-keygen -l` prints it.
fn ssh_fingerprint(key: &Path) -> String {
    let out = run(Command::new("ssh-keygen").arg("-lf").arg(key.with_extension("pub")));
    format!("ssh:{}", out.split_whitespace().nth(1).expect("fingerprint"))
}

/// Writes an allowed_signers file atomically (a rename, as a Secret volume updates).
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// A release commit with an annotated tag, signed per `sign` (`-c` options), pushed.
fn tag_release(repo: &ReleaseRepo, tag: &str, extra: &str, sign: Option<&[String]>) {
    tag_manifest(repo, tag, &configmap("cfg", extra), sign);
}

/// As [`tag_release`], with the manifest given.
fn tag_manifest(repo: &ReleaseRepo, tag: &str, manifest: &str, sign: Option<&[String]>) {
    repo.write("manifests/cfg.yaml", manifest);
    repo.commit(&format!("release {tag}"));
    let mut args: Vec<&str> = Vec::new();
    match sign {
        Some(opts) => {
            args.extend(opts.iter().map(String::as_str));
            args.extend(["tag", "-s", "-m", tag, tag]);
        }
        None => args.extend(["tag", "-a", "-m", tag, tag]),
    }
    repo.git(&args).expect("git tag");
    repo.git(&["push", "-q", "origin", tag]).expect("push tag");
}

fn ssh_signing(key: &Path) -> Vec<String> {
    vec!["-c".into(), "gpg.format=ssh".into(), "-c".into(), format!("user.signingkey={}", key.display())]
}

/// Git source `stacks` at `url` verified by `verify`, polled every `interval`, to the
/// directory target.
fn git_config(dir: &Path, url: &str, verify: Value, interval: &str) -> PathBuf {
    common::git_config(dir, url).source_set("stacks", "verify", verify).edit_sub("stack", |s| s.interval(interval)).write()
}

fn applied(dir: &Path) -> String {
    status(&dir.join("out"), "team-a", "alpha")["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_tags_signed_by_a_trusted_ssh_key_are_releases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).expect("mkdir");
    let (release, stranger, expired) = (ssh_key(&keys, "release"), ssh_key(&keys, "stranger"), ssh_key(&keys, "expired"));
    let served = dir.path().join("served");
    std::fs::create_dir(&served).expect("mkdir");
    let repo = ReleaseRepo::create(&served, "stacks").expect("repo");
    let daemon = GitDaemon::start(&served).await.expect("git daemon");
    let sign = |k: &Path| ssh_signing(k);

    tag_release(&repo, "v1.0.0", "one", Some(&sign(&release)));
    // Newer, but unsigned (annotated), lightweight, by an untrusted key, by an expired key.
    tag_release(&repo, "v1.1.0", "unsigned", None);
    repo.write("manifests/cfg.yaml", &configmap("cfg", "lightweight"));
    repo.commit("lightweight");
    repo.git(&["tag", "v1.2.0"]).expect("tag");
    repo.git(&["push", "-q", "origin", "v1.2.0"]).expect("push");
    tag_release(&repo, "v1.3.0", "stranger", Some(&sign(&stranger)));
    tag_release(&repo, "v1.4.0", "expired", Some(&sign(&expired)));

    let signers = keys.join("allowed_signers");
    std::fs::write(
        &signers,
        format!(
            "# release keys\nrelease@acme namespaces=\"git\" {}\nold@acme valid-before=\"20250101\" {}\n",
            ssh_pub(&release),
            ssh_pub(&expired)
        ),
    )
    .expect("signers");
    let verify = json!({"ssh": {"allowedSigners": {"file": signers}}});
    let config = git_config(dir.path(), &daemon.url("stacks.git"), verify, "1h");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied(dir.path()), "v1.0.0", "{}", stderr(&o));
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: one"), "{cm}");
    let log = stderr(&o);
    let trusted = ssh_fingerprint(&release);
    let refusal =
        |tag: &str| log.lines().find(|l| l.contains(&format!("tag {tag} of source stacks is refused"))).unwrap_or_default().to_owned();
    assert!(
        refusal("v1.1.0").contains("unsigned: annotated tag v1.1.0 carries no signature") && refusal("v1.1.0").contains("signer: unsigned"),
        "{log}"
    );
    assert!(refusal("v1.1.0").contains(&format!("trusted keys: {trusted}, {}", ssh_fingerprint(&expired))), "{log}");
    assert!(refusal("v1.2.0").contains("lightweight tag"), "{log}");
    assert!(refusal("v1.3.0").contains(&format!("signed by {}, which is not a trusted key", ssh_fingerprint(&stranger))), "{log}");
    assert!(refusal("v1.4.0").contains("expired at 2025-01-01T00:00:00Z (valid-before)"), "{log}");
    assert!(log.contains(&format!("signer={trusted}")) && log.contains("release signature verified"), "{log}");

    // A restart logs each refusal once more at most (a fresh process), never once per poll: two
    // polls in one process are the daemon test's business; here the cached state is reused.
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(!stderr(&o).contains("tag v1.1.0 of source stacks is refused"), "a refusal is logged once per tag\n{}", stderr(&o));

    // A tampered tag object: v1.0.0's signed object with another name and target is refused.
    let object = repo.git(&["cat-file", "tag", "v1.0.0"]).expect("cat-file");
    let head = repo.git(&["rev-parse", "v1.1.0^{commit}"]).expect("rev-parse").trim().to_owned();
    let first = object.lines().next().expect("object line").to_owned();
    let forged = object.replacen(&first, &format!("object {head}"), 1).replacen("tag v1.0.0", "tag v1.5.0", 1);
    let forged_path = dir.path().join("forged");
    std::fs::write(&forged_path, forged).expect("forged");
    let id = repo.git(&["hash-object", "-t", "tag", "-w", &forged_path.to_string_lossy()]).expect("hash-object").trim().to_owned();
    repo.git(&["update-ref", "refs/tags/v1.5.0", &id]).expect("update-ref");
    repo.git(&["push", "-q", "origin", "v1.5.0"]).expect("push forged");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let log = stderr(&o);
    assert!(log.contains(&format!("tag v1.5.0 of source stacks is refused: signature by {trusted} does not verify")), "{log}");
    assert_eq!(applied(dir.path()), "v1.0.0");

    // check-config names the file, line and field of a key that cannot be used.
    std::fs::write(&signers, format!("release@acme {}\nbroken@acme ssh-ed25519 AAAA\n", ssh_pub(&release))).expect("signers");
    let o = common::stacksync(&["check-config", &config.to_string_lossy()]).await;
    let text = format!("{}{}", common::stdout(&o), stderr(&o));
    assert_ne!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("sources[0].git.verify.ssh.allowedSigners") && text.contains("allowed_signers:2: not an OpenSSH public key"),
        "{text}"
    );
    daemon.stop().await;
}

/// A private GnuPG home with a `gpg` wrapper for `gpg.program` (so parallel tests never share
/// `GNUPGHOME`), and its agent stopped at the end.
struct Gpg {
    home: PathBuf,
    program: PathBuf,
}

impl Gpg {
    fn new(dir: &Path) -> Gpg {
        use std::os::unix::fs::PermissionsExt;
        let home = dir.join("gnupg");
        std::fs::create_dir(&home).expect("mkdir");
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let program = dir.join("gpg-wrapper");
        common::write_script(&program, &format!("#!/bin/sh\nexec gpg --homedir '{}' --batch \"$@\"\n", home.display()));
        Gpg { home, program }
    }

    fn gpg(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.env_remove("GNUPGHOME");
        c
    }

    /// A signing key without passphrase; returns its fingerprint.
    fn key(&self, uid: &str, algo: &str) -> String {
        run(self.gpg().args(["--passphrase", "", "--quick-gen-key", uid, algo, "sign", "never"]));
        let listing = run(self.gpg().args(["--with-colons", "--list-keys", uid]));
        listing.lines().find_map(|l| l.strip_prefix("fpr:")).map(|l| l.trim_matches(':').to_owned()).expect("fingerprint")
    }

    fn export(&self, fpr: &str) -> String {
        run(self.gpg().args(["--armor", "--export", fpr]))
    }

    fn signing(&self, fpr: &str) -> Vec<String> {
        vec!["-c".into(), format!("gpg.program={}", self.program.display()), "-c".into(), format!("user.signingkey={fpr}")]
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf").arg("--homedir").arg(&self.home).args(["--kill", "gpg-agent"]).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_signed_by_gpg_with_ed25519_and_rsa_keys_verify_and_a_tampered_one_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gpg = Gpg::new(dir.path());
    let ed = gpg.key("Release <release@acme.example>", "ed25519");
    let rsa = gpg.key("Release RSA <rsa@acme.example>", "rsa3072");
    let stranger = gpg.key("Stranger <stranger@example.invalid>", "ed25519");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    tag_release(&repo, "v1.0.0", "ed25519", Some(&gpg.signing(&ed)));
    tag_release(&repo, "v1.1.0", "rsa", Some(&gpg.signing(&rsa)));
    let keyring = dir.path().join("release-keys.asc");
    std::fs::write(&keyring, format!("{}{}", gpg.export(&ed), gpg.export(&rsa))).expect("keyring");
    let verify = json!({"openpgp": {"keyring": {"file": keyring}}});
    let config = git_config(dir.path(), &repo.file_url(), verify, "1h");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied(dir.path()), "v1.1.0", "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("signer=openpgp:{rsa}")), "{}", stderr(&o));

    // Newer: by a key not in the keyring, and v1.1.0's signature over a changed message.
    tag_release(&repo, "v1.2.0", "stranger", Some(&gpg.signing(&stranger)));
    let object = repo.git(&["cat-file", "tag", "v1.1.0"]).expect("cat-file");
    let head = repo.git(&["rev-parse", "v1.2.0^{commit}"]).expect("rev-parse").trim().to_owned();
    let first = object.lines().next().expect("object line").to_owned();
    let forged = object.replacen(&first, &format!("object {head}"), 1).replacen("tag v1.1.0", "tag v1.3.0", 1);
    let forged_path = dir.path().join("forged");
    std::fs::write(&forged_path, forged).expect("forged");
    let id = repo.git(&["hash-object", "-t", "tag", "-w", &forged_path.to_string_lossy()]).expect("hash-object").trim().to_owned();
    repo.git(&["update-ref", "refs/tags/v1.3.0", &id]).expect("update-ref");
    repo.git(&["push", "-q", "origin", "v1.3.0"]).expect("push forged");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let log = stderr(&o);
    assert_eq!(applied(dir.path()), "v1.1.0", "{log}");
    assert!(log.contains("tag v1.2.0 of source stacks is refused: signed by openpgp:"), "{log}");
    assert!(log.contains(&format!("tag v1.3.0 of source stacks is refused: signature by openpgp:{rsa} does not verify")), "{log}");
    assert!(log.contains(&format!("trusted keys: openpgp:{ed}, openpgp:{rsa}")), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotated_in_and_out_while_the_daemon_runs_counts_from_the_next_poll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).expect("mkdir");
    let (old, new) = (ssh_key(&keys, "old"), ssh_key(&keys, "new"));
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    tag_release(&repo, "v1.0.0", "old", Some(&ssh_signing(&old)));
    tag_release(&repo, "v2.0.0", "new", Some(&ssh_signing(&new)));
    let signers = keys.join("allowed_signers");
    write_atomically(&signers, &format!("release@acme {}\n", ssh_pub(&old)));
    let verify = json!({"ssh": {"allowedSigners": {"file": signers}}});
    let config = git_config(dir.path(), &repo.file_url(), verify, "1s");

    let daemon = Daemon::start(&config, dir.path().join("stacksync.log")).await;
    let out = dir.path().join("out");
    let applied_now = || {
        std::fs::read_to_string(out.join("status/team-a/alpha.yaml"))
            .ok()
            .and_then(|t| serde_saphyr::from_str::<serde_json::Value>(&t).ok())
            .map(|v| {
                (v["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned(), v["reason"].as_str().unwrap_or_default().to_owned())
            })
            .unwrap_or_default()
    };
    daemon.eventually("v1.0.0 applied", WITHIN, async || applied_now().0 == "v1.0.0").await;

    // Rotated in: the new key signs v2.0.0, applied at the next poll.
    write_atomically(&signers, &format!("release@acme {}\nrelease@acme {}\n", ssh_pub(&old), ssh_pub(&new)));
    daemon.eventually("v2.0.0 applied", WITHIN, async || applied_now().0 == "v2.0.0").await;

    // Rotated out: v2.0.0 no longer verifies. It is never applied again, and it stays in place
    // (never a silent downgrade); the status says why.
    write_atomically(&signers, &format!("release@acme {}\n", ssh_pub(&old)));
    daemon.eventually("the refusal in the status", WITHIN, async || applied_now().1 == "SignatureInvalid").await;
    let st = status(&out, "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["tag"], "v2.0.0", "{st:?}");
    let text = serde_json::to_string(&st).expect("json");
    assert!(text.contains(&format!("tag v2.0.0 of source stacks is refused: signed by {}", ssh_fingerprint(&new))), "{text}");
    // Logged when the verdict changes (refused at start, refused again after the rotation out),
    // not at every poll: three more polls add nothing.
    let polls = daemon.log().matches("polled source").count();
    daemon.eventually("three more polls", WITHIN, async || daemon.log().matches("polled source").count() >= polls + 3).await;
    let logged = daemon.log();
    assert_eq!(logged.matches("reason=\"untrusted_key\"").count(), 2, "a refusal is logged once per change\n{logged}");

    daemon.stop().await;
}

// ---- OCI artifacts signed by cosign ---------------------------------------------------------

/// The real cosign, as scripts/build-cosign.sh installs it; a bare `cargo test` without it skips
/// (under CI it must be there).
fn cosign() -> Option<PathBuf> {
    let found = common::tool("cosign");
    assert!(found.is_some() || std::env::var_os("CI").is_none(), "cosign is not installed; scripts/test.sh runs scripts/build-cosign.sh");
    if found.is_none() {
        eprintln!("SKIP: cosign is not installed (scripts/build-cosign.sh)");
    }
    found
}

/// `cosign …` with an empty key password, its state under `home` (never the user's).
fn cosign_cmd(cosign: &Path, home: &Path) -> Command {
    let mut c = Command::new(cosign);
    c.env("COSIGN_PASSWORD", "").env("HOME", home).env("TUF_ROOT", home.join("tuf")).env("SIGSTORE_NO_CACHE", "1").current_dir(home);
    c
}

fn cosign_keys(cosign: &Path, home: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(home).expect("mkdir");
    run(cosign_cmd(cosign, home).arg("generate-key-pair"));
    (home.join("cosign.key"), home.join("cosign.pub"))
}

fn cosign_fingerprint(public: &Path) -> String {
    use base64::Engine;
    let pem = std::fs::read_to_string(public).expect("pub");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(body).expect("base64");
    format!("cosign:SHA256:{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2_digest(&der)))
}

fn sha2_digest(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oci_artifacts_need_a_cosign_signature_by_a_trusted_key_for_the_digest_pulled() {
    use testkit::registry::{Auth, DOCKER_REGISTRY, Registry};
    if !Path::new(DOCKER_REGISTRY).exists() {
        assert!(std::env::var_os("CI").is_none(), "{DOCKER_REGISTRY} is not installed");
        eprintln!("SKIP: {DOCKER_REGISTRY} is not installed");
        return;
    }
    let Some(cosign) = cosign() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::None).await.expect("registry");
    let (key, public) = cosign_keys(&cosign, &dir.path().join("trusted"));
    let (other_key, _) = cosign_keys(&cosign, &dir.path().join("other"));
    let files = |extra: &str| {
        vec![("manifests.tar.gz", "application/vnd.oci.image.layer.v1.tar+gzip", targz(&[("cfg.yaml", &configmap("cfg", extra))]))]
    };
    let kind = "application/vnd.acme.manifests.v1";
    let sign = |key: &Path, digest: &str| {
        let reference = format!("{}@{digest}", registry.repository("acme/stacks"));
        run(cosign_cmd(&cosign, &dir.path().join("trusted"))
            .args(["sign", "--yes", "--tlog-upload=false", "--allow-insecure-registry", "--allow-http-registry", "--key"])
            .arg(key)
            .arg(&reference));
    };
    let v1 = registry.push_artifact("acme/stacks", "v1.0.0", kind, &files("one")).await;
    sign(&key, &v1);
    let v2 = registry.push_artifact("acme/stacks", "v1.1.0", kind, &files("two")).await;
    sign(&key, &v2);
    // Newer: unsigned, signed by another key, and one carrying v1.0.0's signature (a valid
    // signature, for another manifest).
    registry.push_artifact("acme/stacks", "v1.2.0", kind, &files("unsigned")).await;
    let v3 = registry.push_artifact("acme/stacks", "v1.3.0", kind, &files("other")).await;
    sign(&other_key, &v3);
    let v4 = registry.push_artifact("acme/stacks", "v1.4.0", kind, &files("copied")).await;
    let hex = |d: &str| d.trim_start_matches("sha256:").to_owned();
    let client = reqwest::Client::new();
    let base = format!("http://{}/v2/acme/stacks/manifests", registry.host());
    let sig_manifest = client
        .get(format!("{base}/sha256-{}.sig", hex(&v1)))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .expect("get sig")
        .bytes()
        .await
        .expect("body");
    registry.put_manifest("acme/stacks", &format!("sha256-{}.sig", hex(&v4)), &sig_manifest).await;

    let oci =
        json!({"repository": registry.repository("acme/stacks"), "insecure": true, "verify": {"cosign": {"publicKey": {"file": public}}}});
    let config = Config::new(dir.path()).source("registry", "oci", oci).sub(common::alpha("registry")).directory().write();

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let log = stderr(&o);
    assert_eq!(applied(dir.path()), "v1.1.0", "{log}");
    let fp = cosign_fingerprint(&public);
    assert!(log.contains(&format!("signer={fp}")), "{log}");
    let refusal =
        |tag: &str| log.lines().find(|l| l.contains(&format!("tag {tag} of source registry is refused"))).unwrap_or_default().to_owned();
    assert!(
        refusal("v1.2.0")
            .contains(&format!("no cosign signature (tag sha256-{}.sig does not exist)", hex(&registry_digest(&registry, "v1.2.0").await))),
        "{log}"
    );
    assert!(
        refusal("v1.3.0").contains("verifies against no trusted key") && refusal("v1.3.0").contains(&format!("trusted keys: {fp}")),
        "{log}"
    );
    assert!(refusal("v1.4.0").contains(&format!("signed by {fp}, but for manifest {v1}, not manifest {v4}")), "{log}");
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: two"), "{cm}");
    registry.stop().await;
}

async fn registry_digest(registry: &testkit::registry::Registry, tag: &str) -> String {
    let resp = reqwest::Client::new()
        .head(format!("http://{}/v2/acme/stacks/manifests/{tag}", registry.host()))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .expect("head");
    resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

// ---- GitHub release assets -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_assets_signed_with_cosign_sign_blob_or_ssh_keygen_and_a_tampered_one_refused() {
    use testkit::github::GithubServer;
    let Some(cosign) = cosign() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, public) = cosign_keys(&cosign, &dir.path().join("cosign"));
    let ssh = ssh_key(dir.path(), "release");
    let server = GithubServer::start().await.expect("server");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let asset = |extra: &str| targz(&[("cfg.yaml", &configmap("cfg", extra))]);
    let cosign_sig = |bytes: &[u8]| {
        let f = work.join("asset");
        std::fs::write(&f, bytes).expect("asset");
        run(cosign_cmd(&cosign, &dir.path().join("cosign"))
            .args(["sign-blob", "--yes", "--tlog-upload=false", "--key"])
            .arg(&key)
            .arg("--output-signature")
            .arg(work.join("asset.sig"))
            .arg(&f));
        std::fs::read(work.join("asset.sig")).expect("sig")
    };
    let ssh_sig = |bytes: &[u8]| {
        let f = work.join("asset");
        std::fs::write(&f, bytes).expect("asset");
        let _ = std::fs::remove_file(work.join("asset.sig"));
        run(Command::new("ssh-keygen").args(["-Y", "sign", "-n", "file", "-f"]).arg(&ssh).arg(&f));
        std::fs::read(work.join("asset.sig")).expect("sig")
    };
    let release = |tag: &str, bytes: Vec<u8>, sig: Option<Vec<u8>>| {
        let mut assets = vec![("manifests.tar.gz".to_owned(), bytes)];
        if let Some(s) = sig {
            assets.push(("manifests.tar.gz.sig".to_owned(), s));
        }
        server.add_release("acme/stacks", tag, &assets, false, false);
    };
    let one = asset("one");
    release("v1.0.0", one.clone(), Some(cosign_sig(&one)));
    let two = asset("two");
    release("v1.1.0", two.clone(), Some(ssh_sig(&two)));
    // Newer: no .sig at all, and a signature of other bytes.
    release("v1.2.0", asset("unsigned"), None);
    release("v1.3.0", asset("tampered"), Some(cosign_sig(&asset("what was signed"))));

    let signers = dir.path().join("allowed_signers");
    std::fs::write(&signers, format!("release@acme namespaces=\"file\" {}\n", ssh_pub(&ssh))).expect("signers");
    let verify = json!({"cosign": {"publicKey": {"file": public}}, "ssh": {"allowedSigners": {"file": signers}}});
    let config = common::github_config(dir.path(), "acme/stacks", &server.api_url()).source_set("gh", "verify", verify).write();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let log = stderr(&o);
    assert_eq!(applied(dir.path()), "v1.1.0", "{log}");
    assert!(
        log.contains("tag v1.2.0 of source gh is refused: unsigned: asset manifests.tar.gz has no manifests.tar.gz.sig beside it"),
        "{log}"
    );
    assert!(log.contains("tag v1.3.0 of source gh is refused: signed by cosign:unknown key"), "{log}");
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: two"), "{cm}");

    // `fetch` shows who signed the release in use.
    let o = common::stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert!(common::stdout(&o).contains(&ssh_fingerprint(&ssh)), "{}", common::stdout(&o));

    // The SSH key rotated out: the cached v1.1.0 is checked again at the poll, from the blob
    // store. It stays in place (never a silent downgrade to v1.0.0) and is held, saying why.
    let other = ssh_key(dir.path(), "other");
    std::fs::write(&signers, format!("other@acme namespaces=\"file\" {}\n", ssh_pub(&other))).expect("signers");
    let o = run_once(&config).await;
    let st = status(&dir.path().join("out"), "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["tag"], "v1.1.0", "{}", stderr(&o));
    assert_eq!(st["reason"], "SignatureInvalid", "{st:?}");
    assert!(
        st["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("tag v1.1.0 of source gh is refused: signed by {}", ssh_fingerprint(&ssh)))),
        "{st:?}"
    );
    server.stop().await;
}

// ---- The Kubernetes target: what a refusal looks like ------------------------------------------

/// A management cluster (testkit's API server with the Cluster API and stacksync CRDs) with one
/// ready Cluster `team-a/alpha` labelled `stack: ferrol` (`topology` as given) whose kubeconfig
/// Secret points at a workload server.
/// `config` with its Git source `stacks` verified by the `allowed_signers` file.
fn verified(config: Config, signers: &Path) -> PathBuf {
    config.source_set("stacks", "verify", json!({"ssh": {"allowedSigners": {"file": signers}}})).write()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_releases_record_the_signer_and_a_refused_release_is_ready_false_signature_invalid() {
    let env = Env::new(1).await;
    env.add_synced_cluster("alpha", 0).await;
    let (dir, repo, client) = (&env.dir, &env.repo, env.mgmt());
    let key = ssh_key(dir.path(), "release");
    let cm = |extra: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-config\n  namespace: kube-system\ndata:\n  extra: {extra}\n")
    };
    tag_manifest(repo, "v1.0.0", &cm("one"), Some(&ssh_signing(&key)));
    tag_manifest(repo, "v1.1.0", &cm("unsigned"), None);
    let signers = dir.path().join("allowed_signers");
    std::fs::write(&signers, format!("release@acme {}\n", ssh_pub(&key))).expect("signers");
    let config = verified(env.config(), &signers);
    let o = run_once(&config).await;
    assert_exit(&o, 0);

    let releases: Api<DynamicObject> = Api::all_with(client.clone(), &common::res("stacksync.io", "v1alpha1", "StackRelease"));
    let fp = ssh_fingerprint(&key);
    let applied = releases.get("ferrol.v1.0.0").await.expect("StackRelease v1.0.0").data;
    assert_eq!(applied["status"]["phase"], "Applied", "{applied}");
    assert_eq!(applied["status"]["verifiedBy"], format!("git+{fp}"), "{applied}");
    assert_eq!(applied["status"]["signedBy"], fp.as_str(), "{applied}");
    let refused = releases.get("ferrol.v1.1.0").await.expect("StackRelease v1.1.0").data;
    assert_eq!(refused["status"]["phase"], "Refused", "{refused}");
    assert_eq!(refused["status"]["verifiedBy"], "refused", "{refused}");
    let ready =
        refused["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned().unwrap_or_default();
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("SignatureInvalid")), "{refused}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("tag v1.1.0 of source stacks is refused: unsigned")
            && message.contains("signer: unsigned")
            && message.contains(&format!("trusted keys: {fp}")),
        "{message}"
    );
    let syncs: Api<DynamicObject> = Api::namespaced_with(client, "team-a", &common::res("stacksync.io", "v1alpha1", "ClusterSync"));
    let cs = syncs.get("alpha").await.expect("ClusterSync").data;
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0", "{cs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_class_names_a_refused_release_is_signature_invalid() {
    let env = Env::new(1).await;
    env.add_cluster("alpha", "docker-ferrol-1-27-v2", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let (dir, repo, client) = (&env.dir, &env.repo, env.mgmt());
    let key = ssh_key(dir.path(), "release");
    tag_manifest(repo, "docker-ferrol-1-27-v2", "# nothing\n", None);
    let signers = dir.path().join("allowed_signers");
    std::fs::write(&signers, format!("release@acme {}\n", ssh_pub(&key))).expect("signers");
    let config = verified(env.stack_config(|s| s), &signers);
    let o = run_once(&config).await;
    let syncs: Api<DynamicObject> = Api::namespaced_with(client, "team-a", &common::res("stacksync.io", "v1alpha1", "ClusterSync"));
    let cs = syncs.get("alpha").await.unwrap_or_else(|e| panic!("ClusterSync: {e}\n{}", stderr(&o))).data;
    let ready = cs["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned().unwrap_or_default();
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("SignatureInvalid")), "{cs}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("tag docker-ferrol-1-27-v2 of source stacks is refused: unsigned") && message.contains("signer: unsigned"),
        "{message}"
    );
}
