//! OCI registry sources end to end, against Debian's real `docker-registry` on loopback (started
//! by the test, artifacts pushed through the distribution API as `csctl publish` lays them out):
//! a cluster-stack release rendered and applied to the directory target, tag paging and
//! constraints, a corrupted layer refused with the last good release kept, restarts that fetch
//! nothing again, the registry's basic and token authentication, and the daemon: a generic push
//! webhook triggers a poll, a config edit pointing the source elsewhere is picked up live.

mod common;

use std::path::{Path, PathBuf};

use common::fleet::{Env, TOKEN, cm};
use common::{Config, Daemon, Sub, assert_exit, blob_tmp_files, configmap, helm_path, run_once, status, stderr, stdout, targz};
use serde_json::{Value, json};
use testkit::registry::{Auth, DOCKER_REGISTRY, IDENTITY_TOKEN, PASSWORD, PagingFront, Registry, TokenServer, USER};

const STACK: &str = "docker-ferrol-1-27";
const SCS_ARTIFACT: &str = "application/vnd.scs.cluster-stacks.v1";

/// The registry is a Debian package scripts/test.sh installs; a bare `cargo test` elsewhere skips.
fn have_registry() -> bool {
    let found = Path::new(DOCKER_REGISTRY).exists();
    assert!(found || std::env::var_os("CI").is_none(), "{DOCKER_REGISTRY} is not installed; under CI scripts/test.sh must install it");
    if !found {
        eprintln!("SKIP: {DOCKER_REGISTRY} is not installed (scripts/test.sh installs docker-registry)");
    }
    found
}

/// A config with one OCI source `registry` (`oci` its settings) and `sub`, the real helm.
fn oci_config(dir: &Path, mut oci: Value, sub: Sub) -> PathBuf {
    // The test registries speak plain HTTP unless a test says otherwise (TLS, `caFile`).
    if oci.get("caFile").is_none() && oci.get("insecure").is_none() {
        oci["insecure"] = true.into();
    }
    Config::new(dir).helm(&helm_path()).helm_set("parallelism", 2).source("registry", "oci", oci).sub(sub).directory().write()
}

/// The subscription of the plain-manifest tests: Cluster team-a/alpha.
fn alpha() -> Sub {
    common::alpha("registry")
}

fn applied_tag(dir: &Path) -> String {
    status(&dir.join("out"), "team-a", "alpha")["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
}

/// A plain-manifests release: one `manifests.tar.gz` layer.
fn manifests(extra: &str) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    vec![("manifests.tar.gz", "application/vnd.oci.image.layer.v1.tar+gzip", targz(&[("cfg.yaml", &configmap("cfg", extra))]))]
}

/// A fixture release as `csctl publish` pushes it: metadata.yaml, the ClusterClass chart as a
/// `helm package`, the addon as a tgz, and clusteraddon.yaml or cluster-addon-values.yaml.
fn csctl_files(release: &str, work: &Path) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/clusterstack").join(release);
    let version = release.rsplit('-').next().expect("version");
    let class = format!("{STACK}-cluster-class-{version}");
    let out = std::process::Command::new(helm_path())
        .arg("package")
        .arg(fixture.join(&class))
        .arg("-d")
        .arg(work)
        .output()
        .expect("helm package");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let mut files = vec![
        ("metadata.yaml", "application/vnd.scs.metadata.layer.v1+yaml", std::fs::read(fixture.join("metadata.yaml")).expect("metadata")),
        (
            leak(format!("{class}.tgz")),
            "application/vnd.scs.cluster-class.v1.tar+gzip",
            std::fs::read(work.join(format!("{class}.tgz"))).expect("class package"),
        ),
    ];
    for entry in std::fs::read_dir(&fixture).expect("fixture").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains("-cluster-addon-") {
            let tgz = work.join(format!("{name}.tgz"));
            let file = std::fs::File::create(&tgz).expect("create tgz");
            let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::default()));
            builder.append_dir_all(".", entry.path()).expect("append");
            builder.into_inner().expect("tar").finish().expect("gzip");
            files.push((
                leak(format!("{name}.tgz")),
                "application/vnd.scs.cluster-addon.layer.v1.tar+gzip",
                std::fs::read(&tgz).expect("tgz"),
            ));
        } else if name == "clusteraddon.yaml" {
            files.push((
                "clusteraddon.yaml",
                "application/vnd.scs.cluster-addon.config.layer.v1+yaml",
                std::fs::read(entry.path()).expect("read"),
            ));
        } else if name == "cluster-addon-values.yaml" {
            files.push(("cluster-addon-values.yaml", "application/yaml", std::fs::read(entry.path()).expect("read")));
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csctl_cluster_stack_is_applied_and_a_restart_fetches_nothing_again() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::None).await.expect("registry");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    registry.push_artifact("scs/docker-ferrol", &format!("{STACK}-v2"), SCS_ARTIFACT, &csctl_files(&format!("{STACK}-v2"), &work)).await;
    let oci = json!({"repository": registry.repository("scs/docker-ferrol")});
    let config = oci_config(
        dir.path(),
        oci,
        Sub::new("stack", "registry")
            .clusterstack(STACK)
            .version(">=v2")
            .stack_cluster("team-a", "alpha", "alpha.example.test", "10.1.0.0/16")
            .stack_cluster("team-b", "delta", "delta.example.test", "10.4.0.0/16"),
    );
    let out = dir.path().join("out");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("synced: 2/2 clusters ready"), "{}", stdout(&o));
    let classes = std::fs::read_dir(out.join("team-b/cluster-class")).expect("class dir").count();
    assert_eq!(classes, 5, "the ClusterClass chart rendered per namespace");
    let cni = std::fs::read_to_string(out.join("team-a/alpha/02-configmap-cni-config.yaml")).expect("addon");
    assert!(cni.contains("cluster-name: alpha") && cni.contains("pod-cidr: 10.1.0.0/16"), "{cni}");
    let st = status(&out, "team-a", "alpha");
    assert_eq!(st["appliedRelease"]["tag"], format!("{STACK}-v2"));

    // The multi-stage v3 (clusteraddon.yaml) replaces it.
    registry.push_artifact("scs/docker-ferrol", &format!("{STACK}-v3"), SCS_ARTIFACT, &csctl_files(&format!("{STACK}-v3"), &work)).await;
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(out.join("team-a/alpha/cni/01-configmap-cni-config.yaml").is_file(), "stage directories of v3");
    assert_eq!(applied_tag(dir.path()), format!("{STACK}-v3"));

    // A restart: the tags are listed and resolved again, but no manifest body and no blob is
    // fetched (the cached trees verify against their digests).
    let (blobs, manifests) = (registry.requests("GET", "/blobs/sha256:"), registry.requests("GET", "/manifests/sha256:"));
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(
        (registry.requests("GET", "/blobs/sha256:"), registry.requests("GET", "/manifests/sha256:")),
        (blobs, manifests),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("downloaded layer"), "{}", stderr(&o));

    // `render` from the cache, with the registry gone.
    registry.stop().await;
    let preview = dir.path().join("preview");
    let o = common::stacksync(&["render", "--config", &config.to_string_lossy(), "--out", &preview.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert!(preview.join("team-b/delta/metrics-server").is_dir(), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_are_paged_with_links_and_the_constraint_picks_among_them() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::None).await.expect("registry");
    for minor in 0..7 {
        registry
            .push_artifact("acme/stacks", &format!("v1.{minor}.0"), "application/vnd.acme.manifests.v1", &manifests(&minor.to_string()))
            .await;
    }
    // Not release tags: never resolved.
    registry.push_artifact("acme/stacks", "latest", "application/vnd.acme.manifests.v1", &manifests("latest")).await;
    registry.push_artifact("acme/stacks", "sha-0123abc", "application/vnd.acme.manifests.v1", &manifests("sha")).await;
    // Debian's registry 2.8 ignores `n` on tags/list: testkit's front pages it as the spec says.
    let front = PagingFront::start(&registry).await.expect("paging front");
    let oci = json!({"repository": front.repository("acme/stacks"), "pageSize": 2});
    let config = oci_config(dir.path(), oci, alpha().version("<1.5.0"));

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.4.0");
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: \"4\"") || cm.contains("extra: '4'") || cm.contains("extra: 4"), "{cm}");
    // 9 tags by 2: five pages, each after the first reached through `Link`.
    assert_eq!(registry.requests("GET", "/tags/list"), 5, "five pages, each reached through the previous page's Link");
    assert_eq!(
        registry.requests("HEAD", "/manifests/latest") + registry.requests("GET", "/manifests/latest"),
        0,
        "a tag without a version is not resolved"
    );
    let fetch = common::stacksync(&["fetch", "--config", &config.to_string_lossy()]).await;
    assert_exit(&fetch, 0);
    assert!(stdout(&fetch).contains("manifests.tar.gz  sha256:") && stdout(&fetch).contains("registry digest"), "{}", stdout(&fetch));
    front.stop().await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_layer_is_refused_and_the_last_good_release_stays() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::None).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    // HTTPS by default, loopback included: a plain-HTTP registry without `insecure` is an error
    // that says so, never a silent downgrade.
    let https = oci_config(dir.path(), json!({"repository": registry.repository("acme/stacks"), "insecure": false}), alpha());
    let o = run_once(&https).await;
    eprintln!("plain registry over https: {}", stderr(&o).lines().find(|l| l.contains("source registry")).unwrap_or_default());
    assert!(stderr(&o).contains("set `insecure: true`"), "{}", stderr(&o));
    let config = oci_config(dir.path(), json!({"repository": registry.repository("acme/stacks")}), alpha());
    assert_exit(&run_once(&config).await, 0);

    let layer = manifests("two");
    registry.push_artifact("acme/stacks", "v1.1.0", "application/vnd.acme.manifests.v1", &layer).await;
    let good = std::fs::read(registry.blob_file(&testkit::registry::digest(&layer[0].2))).expect("blob");
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(registry.blob_file(&testkit::registry::digest(&layer[0].2)), &bad).expect("corrupt");
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("release v1.1.0: layer manifests.tar.gz: digest mismatch: expected sha256:"), "{out}");
    let st = status(&dir.path().join("out"), "team-a", "alpha");
    assert_eq!((st["appliedRelease"]["tag"].as_str(), st["reason"].as_str()), (Some("v1.0.0"), Some("ReleaseRefused")), "{st}");
    let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
    assert!(cm.contains("extra: one"), "the corrupted release was applied: {cm}");
    assert_eq!(blob_tmp_files(dir.path()), 0, "a temp file of the refused layer is left");

    // Repaired upstream: the next run takes it.
    std::fs::write(registry.blob_file(&testkit::registry::digest(&layer[0].2)), &good).expect("repair");
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(applied_tag(dir.path()), "v1.1.0");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_reads_the_password_each_poll_and_never_shows_it() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::Htpasswd).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    let repo = registry.repository("acme/stacks");

    // Anonymous: the registry's challenge is answered with a clear error.
    let config = oci_config(dir.path(), json!({"repository": repo}), alpha());
    let o = run_once(&config).await;
    assert!(stderr(&o).contains("source registry: 127.0.0.1:") && stderr(&o).contains("the registry needs credentials"), "{}", stderr(&o));

    let password = dir.path().join("password");
    std::fs::write(&password, "wrong-pony-battery\n").expect("password");
    let oci = json!({"repository": repo, "auth": {"username": USER, "password": {"file": password}}});
    let config = oci_config(dir.path(), oci, alpha());
    let o = run_once(&config).await;
    let err = stderr(&o);
    assert!(err.contains("the registry refused the credentials"), "{err}");
    assert!(!err.contains("wrong-pony-battery") && !stdout(&o).contains("wrong-pony-battery"), "the password was shown: {err}");

    // The corrected password is read at the next poll.
    std::fs::write(&password, PASSWORD).expect("password");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.0.0");
    let status_text = std::fs::read_to_string(dir.path().join("out/status/team-a/alpha.yaml")).expect("status");
    assert!(!status_text.contains(PASSWORD) && !stderr(&o).contains(PASSWORD));
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_fetches_a_bearer_token_once_anonymous_or_with_credentials() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = TokenServer::start(&dir.path().join("tokens"), true).await.expect("token server");
    let registry = Registry::start(&dir.path().join("registry"), Auth::Token(&tokens)).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    let repo = registry.repository("acme/stacks");

    // Anonymous pull: the challenge's realm issues a pull token; one token serves the poll
    // and the pull (cached until it expires).
    let before = tokens.issued();
    let config = oci_config(dir.path(), json!({"repository": repo}), alpha());
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.0.0");
    assert_eq!(tokens.issued() - before, 1, "one token for the whole run");

    // With credentials: a wrong password is refused by the token service, clearly.
    let password = dir.path().join("password");
    std::fs::write(&password, "wrong-pony-battery").expect("password");
    let oci = json!({"repository": repo, "auth": {"username": USER, "password": {"file": password}}});
    registry.push_artifact("acme/stacks", "v1.1.0", "application/vnd.acme.manifests.v1", &manifests("two")).await;
    let config = oci_config(dir.path(), oci, alpha());
    // The poll fails; the release in use stays.
    let o = run_once(&config).await;
    assert!(stderr(&o).contains("the registry refused the credentials"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("wrong-pony-battery"));
    assert_eq!(applied_tag(dir.path()), "v1.0.0");

    std::fs::write(&password, PASSWORD).expect("password");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.1.0");
    registry.stop().await;
    tokens.stop().await;
}

/// The daemon with the Kubernetes target: a new tag arrives through the generic webhook within
/// seconds (the poll interval is an hour), and an edited `repository` is polled after reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_polls_on_the_generic_webhook_and_follows_a_reloaded_repository() {
    use std::time::Duration;
    if !have_registry() {
        return;
    }
    let env = Env::served().await;
    let registry = Registry::start(&env.dir.path().join("registry"), Auth::None).await.expect("registry");
    let release = |v: &str| vec![("manifests.tar.gz", "application/vnd.oci.image.layer.v1.tar+gzip", targz(&[("cm.yaml", &cm(v))]))];
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &release("1.0.0")).await;
    registry.push_artifact("acme/other", "v2.0.0", "application/vnd.acme.manifests.v1", &release("2.0.0")).await;
    env.add_synced_cluster("alpha", 0).await;
    // Source `stacks` becomes the registry's repository `name` (the file rewritten in place).
    let with_repo = |name: &str| {
        let oci = serde_json::json!({"insecure": true, "repository": registry.repository(name)});
        env.webhooks_config().source("stacks", "oci", oci).write()
    };
    let config = with_repo("acme/stacks");
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon.eventually("v1.0.0 applied", Duration::from_secs(30), async || env.applied("alpha").await == "v1.0.0").await;

    registry.push_artifact("acme/stacks", "v1.1.0", "application/vnd.acme.manifests.v1", &release("1.1.0")).await;
    let (status, text) = daemon.post("/hooks/generic/stacks", &[("authorization", format!("Bearer {TOKEN}"))], Vec::new()).await;
    assert_eq!(status, 202, "{text}");
    daemon.eventually("v1.1.0 applied after the hook", Duration::from_secs(30), async || env.applied("alpha").await == "v1.1.0").await;

    with_repo("acme/other");
    daemon.eventually("v2.0.0 applied after the reload", Duration::from_secs(30), async || env.applied("alpha").await == "v2.0.0").await;
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop().await;
    registry.stop().await;
}

#[test]
fn oci_source_config_errors_name_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    // (the oci settings, expected words)
    let table: Vec<(Value, &str)> = vec![
        (json!({"repository": "https://r.example/a"}), "sources[0].oci.repository: repository `https://r.example/a`: no scheme"),
        (json!({"repository": "r.example/a:v1"}), "no tag: releases are the repository's tags"),
        (json!({"repository": "r.example/a", "auth": {"username": "u"}}), "sources[0].oci.auth.password: required with `username`"),
        (json!({"repository": "r.example/a", "pageSize": 0}), "sources[0].oci.pageSize: expected a number from 1 to 1000"),
        (
            json!({"repository": "r.example/a", "insecure": true, "auth": {"bearerToken": {"env": "T"}}}),
            "sources[0].oci.insecure: credentials are sent only over https://",
        ),
        (json!({"repository": "r.example/a", "insecure": true, "caFile": "ca.pem"}), "sources[0].oci.caFile: `caFile` is for https"),
        (json!({"repository": "r.example/a", "timeout": "0s"}), "sources[0].oci.timeout: 0s is too short; use at least 1s"),
        (json!({"repository": "r.example/a", "timeout": "1h"}), "sources[0].oci.timeout: at most 120s"),
        (
            json!({"repository": "r.example/a", "auth": {"bearerToken": {"env": "T"}, "dockerConfig": {"file": "x"}}}),
            "set `username` and `password`, `bearerToken` or `dockerConfig` (only one)",
        ),
        (json!({"repo": "r.example/a"}), "sources[0].oci"),
    ];
    for (oci, want) in table {
        let config = oci_config(dir.path(), oci.clone(), alpha());
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
            .args(["check-config", &config.to_string_lossy()])
            .output()
            .expect("run");
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(!o.status.success() && text.contains(want), "{oci}: {text}");
        assert!(text.contains("stacksync.yaml:"), "the error names the file and line: {text}");
    }
}

/// A registry serving TLS with a certificate from a private CA: refused (fail closed, clearly)
/// without `caFile`, pulled with it; an unreadable or empty bundle is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_registry_with_a_private_ca_needs_ca_file() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start_tls(&dir.path().join("registry"), Auth::None).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    let repo = registry.repository("acme/stacks");

    let config = oci_config(dir.path(), json!({"repository": repo, "insecure": false}), alpha());
    let o = run_once(&config).await;
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    eprintln!("without caFile: {}", err.lines().find(|l| l.contains("not trusted")).unwrap_or_default());
    assert!(err.contains(&format!("source registry: {repo}")) && err.contains("certificate is not trusted: set `caFile`"), "{err}");
    assert!(!dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml").exists(), "applied from an untrusted registry");

    let with_ca = |ca: &Path| oci_config(dir.path(), json!({"repository": repo, "caFile": ca}), alpha());
    let missing = dir.path().join("missing-ca.pem");
    let o = run_once(&with_ca(&missing)).await;
    assert!(stderr(&o).contains(&format!("caFile {}", missing.display())), "{}", stderr(&o));
    let empty = dir.path().join("empty-ca.pem");
    std::fs::write(&empty, "not a certificate\n").expect("write");
    let o = run_once(&with_ca(&empty)).await;
    assert!(stderr(&o).contains("holds no PEM certificate"), "{}", stderr(&o));

    let o = run_once(&with_ca(&registry.ca_file())).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.0.0");
    registry.stop().await;
}

/// `auth.dockerConfig`: the `.dockerconfigjson` of an image pull Secret, read at each poll, the
/// registry's entry picked by host; nothing of it is ever shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_config_credentials_are_picked_by_host_and_reread_each_poll() {
    use base64::Engine;
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::Htpasswd).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    let repo = registry.repository("acme/stacks");
    let file = dir.path().join(".dockerconfigjson");
    let oci = json!({"repository": repo, "auth": {"dockerConfig": {"file": file}}});
    let config = oci_config(dir.path(), oci, alpha());
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);

    // No entry for this registry.
    std::fs::write(&file, format!(r#"{{"auths":{{"other.example":{{"auth":"{}"}}}}}}"#, b64("x:y"))).expect("write");
    let o = run_once(&config).await;
    assert!(stderr(&o).contains(&format!("`auths` has no entry for `{}`", registry.host())), "{}", stderr(&o));

    // A wrong password (base64 `auth`): refused, naming the file, never showing it.
    let wrong = b64(&format!("{USER}:wrong-pony-battery"));
    std::fs::write(&file, format!(r#"{{"auths":{{"http://{}":{{"auth":"{wrong}"}}}}}}"#, registry.host())).expect("write");
    let o = run_once(&config).await;
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("the registry refused the credentials (`auth.dockerConfig`"), "{text}");
    assert!(!text.contains("wrong-pony-battery") && !text.contains(&wrong), "a secret was shown: {text}");

    // Rotated (as the kubelet updates a mounted Secret): `username`/`password` form.
    std::fs::write(&file, format!(r#"{{"auths":{{"{}":{{"username":"{USER}","password":"{PASSWORD}"}}}}}}"#, registry.host()))
        .expect("write");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.0.0");
    let status_text = std::fs::read_to_string(dir.path().join("out/status/team-a/alpha.yaml")).expect("status");
    assert!(!status_text.contains(PASSWORD) && !stderr(&o).contains(PASSWORD));
    registry.stop().await;
}

/// A Docker config `identitytoken` is an OAuth2 refresh token: exchanged at the registry's token
/// service (`POST`, `grant_type=refresh_token`) for a pull token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_config_identity_token_is_exchanged_at_the_token_service() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = TokenServer::start(&dir.path().join("tokens"), false).await.expect("token server");
    let registry = Registry::start(&dir.path().join("registry"), Auth::Token(&tokens)).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    let file = dir.path().join("config.json");
    let oci = json!({"repository": registry.repository("acme/stacks"), "auth": {"dockerConfig": {"file": file}}});
    let config = oci_config(dir.path(), oci, alpha());

    std::fs::write(&file, format!(r#"{{"auths":{{"{}":{{"identitytoken":"revoked-refresh-token"}}}}}}"#, registry.host())).expect("write");
    let o = run_once(&config).await;
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("the registry refused the token (`auth.dockerConfig`"), "{text}");
    assert!(!text.contains("revoked-refresh-token"), "the token was shown: {text}");

    std::fs::write(&file, format!(r#"{{"auths":{{"{}":{{"identitytoken":"{IDENTITY_TOKEN}"}}}}}}"#, registry.host())).expect("write");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(applied_tag(dir.path()), "v1.0.0");
    assert!(!stderr(&o).contains(IDENTITY_TOKEN));
    registry.stop().await;
    tokens.stop().await;
}

/// What [`SilentFront`] does with a new connection.
const FORWARD: u8 = 0;
/// Accept, read nothing, answer nothing.
const SILENT: u8 = 1;
/// Answer `200` headers at once, then the body one byte every 300 ms.
const TRICKLE: u8 = 2;

/// A TCP front for the registry that can go silent or trickle, as a hung registry or load
/// balancer does.
struct SilentFront {
    addr: std::net::SocketAddr,
    mode: std::sync::Arc<std::sync::atomic::AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

impl SilentFront {
    async fn start(upstream: String) -> SilentFront {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mode = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(FORWARD));
        let flag = mode.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mode = flag.load(std::sync::atomic::Ordering::SeqCst);
                let upstream = upstream.clone();
                conns.spawn(async move {
                    match mode {
                        SILENT => tokio::time::sleep(std::time::Duration::from_secs(120)).await,
                        TRICKLE => {
                            // Answer only once the request is in (an answer before it is not one).
                            let mut request = Vec::new();
                            let mut buf = [0u8; 4096];
                            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                                match tokio::io::AsyncReadExt::read(&mut inbound, &mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => request.extend_from_slice(&buf[..n]),
                                }
                            }
                            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n";
                            if inbound.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            for _ in 0..400 {
                                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                                if inbound.write_all(b" ").await.is_err() {
                                    return;
                                }
                            }
                        }
                        _ => {
                            if let Ok(mut out) = tokio::net::TcpStream::connect(upstream).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                            }
                        }
                    }
                });
            }
        });
        SilentFront { addr, mode, task }
    }
}

/// A registry that accepts the connection and never answers, or answers at a trickle: the poll
/// fails within the source's `timeout`, naming the source, and the last good release stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_or_trickling_registry_times_out_within_the_source_timeout_and_the_last_release_stays() {
    if !have_registry() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::start(&dir.path().join("registry"), Auth::None).await.expect("registry");
    registry.push_artifact("acme/stacks", "v1.0.0", "application/vnd.acme.manifests.v1", &manifests("one")).await;
    let front = SilentFront::start(registry.host()).await;
    let oci = json!({"repository": format!("{}/acme/stacks", front.addr), "timeout": "2s"});
    let config = oci_config(dir.path(), oci, alpha());
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(applied_tag(dir.path()), "v1.0.0");

    registry.push_artifact("acme/stacks", "v1.1.0", "application/vnd.acme.manifests.v1", &manifests("two")).await;
    for (mode, what) in [(SILENT, "silent"), (TRICKLE, "trickling")] {
        front.mode.store(mode, std::sync::atomic::Ordering::SeqCst);
        let started = std::time::Instant::now();
        let o = run_once(&config).await;
        let elapsed = started.elapsed();
        let err = stderr(&o);
        assert!(
            err.contains(&format!("source registry: {}/acme/stacks", front.addr)) && err.contains("timed out after 2s"),
            "{what}: {err}"
        );
        assert!(elapsed < std::time::Duration::from_secs(15), "{what}: the run took {elapsed:?} with a 2s timeout");
        eprintln!("{what} registry: run failed after {elapsed:?}: {}", err.lines().find(|l| l.contains("timed out")).unwrap_or_default());
        assert_eq!(applied_tag(dir.path()), "v1.0.0", "{what}: the last good release stays");
        let cm = std::fs::read_to_string(dir.path().join("out/team-a/alpha/01-configmap-cfg.yaml")).expect("manifest");
        assert!(cm.contains("extra: one"), "{cm}");
    }
    front.task.abort();
    registry.stop().await;
}
