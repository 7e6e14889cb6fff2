//! `stacksync preview`: a release that is not published, rendered for every Cluster its
//! subscription would give it to and judged against the live objects — with reads and
//! dry-runs only. A management cluster and workload clusters are testkit API servers on
//! loopback; the published releases come from a Git repository, the previewed one from a local
//! directory, a `.tgz` of it, or a tag of the source.

mod common;

use std::path::{Path, PathBuf};

use common::fleet::{Env, NS, fixture_files};
use common::{assert_exit, run_once, stdout};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// A ConfigMap the published release has and the previewed one drops.
const LEGACY: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: legacy\n  namespace: {{ .Release.Namespace }}\ndata:\n  a: b\n";
const ADDON: &str = "docker-ferrol-1-27-cluster-addon-v1";

/// v2's fixture files with `legacy.yaml` in its addon chart: what the fleet runs.
fn published_v2() -> Vec<(String, String)> {
    let mut files = fixture_files("docker-ferrol-1-27-v2");
    files.push((format!("{ADDON}/templates/legacy.yaml"), LEGACY.to_owned()));
    files
}

/// The next release, as `csctl` would write it: v2 as `v3`, its cni ConfigMap with one more key,
/// metrics-server on another image (its pod template changes), `legacy.yaml` gone.
fn next_release(dir: &Path) {
    for (rel, text) in fixture_files("docker-ferrol-1-27-v2") {
        let rel = rel.replace("cluster-class-v2", "cluster-class-v3");
        let text = match rel.as_str() {
            "metadata.yaml" => text.replace("clusterStack: v2", "clusterStack: v3"),
            r if r.ends_with("Chart.yaml") && r.contains("cluster-class") => text.replace("version: v2", "version: v3"),
            r if r.ends_with("templates/cni.yaml") => format!("{text}  mtu: \"1450\"\n"),
            r if r.ends_with("templates/metrics-server.yaml") => text.replace("metrics-server:v0.7.2", "metrics-server:v0.7.3"),
            _ => text,
        };
        let path = dir.join(&rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, text).expect("file");
    }
}

/// Two reachable workload clusters (alpha, beta) and one whose API server is down (gamma), all
/// on v2 and synced; the config file.
async fn fleet() -> (Env, PathBuf, tokio::net::TcpSocket) {
    fleet_with(None).await
}

/// [`fleet`] with the subscription's `rollout` (or none).
async fn fleet_with(rollout: Option<Value>) -> (Env, PathBuf, tokio::net::TcpSocket) {
    let env = Env::new(2).await;
    let files = published_v2();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    env.repo.release("docker-ferrol-1-27-v2", &refs);
    for (i, name) in ["alpha", "beta", "gamma"].iter().enumerate() {
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": {"stack": "ferrol"}},
            "spec": {
                "topology": {"class": "docker-ferrol-1-27-v2", "version": "v1.27.3"},
                "controlPlaneEndpoint": {"host": format!("{name}.example.test"), "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": [format!("10.{}.0.0/16", i + 1)]}},
            },
        });
        env.clusters().patch(name, &PatchParams::apply("capi"), &Patch::Apply(cluster)).await.expect("cluster");
        env.set_ready(name, true).await;
        if i < 2 {
            env.add_kubeconfig(name, i).await;
        }
    }
    // gamma's API server: a port bound (no other test gets it) but not listening.
    let reserved = tokio::net::TcpSocket::new_v4().expect("socket");
    reserved.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let port = reserved.local_addr().expect("addr").port();
    let dead = std::fs::read_to_string(env.workloads[0].kubeconfig())
        .expect("kubeconfig")
        .replace(env.workloads[0].url(), &format!("http://127.0.0.1:{port}"));
    env.put_kubeconfig("gamma", dead.into_bytes()).await;
    let config = env
        .stack_config(|s| match rollout {
            Some(r) => s.match_stack_class().set("rollout", r),
            None => s.match_stack_class(),
        })
        .write();
    assert_exit(&run_once(&config).await, 1); // gamma is unreachable
    for name in ["alpha", "beta"] {
        assert_eq!(env.applied_tag(name).await, "docker-ferrol-1-27-v2");
    }
    (env, config, reserved)
}

fn reset(env: &Env) {
    env.mgmt.reset_stats();
    for w in &env.workloads {
        w.reset_stats();
    }
}

/// No write reached any server since [`reset`]; the workload clusters `asked` were asked
/// dry-runs.
fn assert_no_writes(env: &Env, asked: &[usize]) {
    let mgmt = env.mgmt.stats();
    assert_eq!(mgmt.total_writes(), 0, "the preview wrote to the management cluster: {:?}", mgmt.writes);
    for (i, w) in env.workloads.iter().enumerate() {
        let s = w.stats();
        assert_eq!(s.total_writes(), 0, "the preview wrote to a workload cluster: {:?}", s.writes);
        let dry_runs = fake_apiserver::Stats::count(&s.requests, "patch", "deployments.apps");
        assert_eq!(dry_runs > 0, asked.contains(&i), "workload cluster {i}: {:?}", s.requests);
    }
}

/// What one Cluster's changes are, as (change, object, fields, restarts).
fn changes(cluster: &Value) -> Vec<(String, String, Vec<String>, bool)> {
    let mut out: Vec<(String, String, Vec<String>, bool)> = cluster["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            let fields =
                c["fields"].as_array().map(|f| f.iter().map(|x| x.as_str().expect("field").to_owned()).collect()).unwrap_or_default();
            (
                c["change"].as_str().expect("change").to_owned(),
                c["object"].as_str().expect("object").to_owned(),
                fields,
                c["restarts"] == true,
            )
        })
        .collect();
    out.sort();
    out
}

/// Every file under `dir` with its bytes (the cache before and after).
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_release_is_previewed_on_the_whole_fleet_with_zero_writes() {
    let (env, config, _reserved) = fleet().await;
    let cfg = config.to_string_lossy().into_owned();
    let release = env.dir.path().join("next-release");
    next_release(&release);
    let cache = env.dir.path().join("cache");
    let cache_before = files_under(&cache);
    reset(&env);

    let out = common::stacksync(&["preview", "--config", &cfg, "--release", &release.to_string_lossy(), "-o", "json", "--diff"]).await;
    assert_exit(&out, 2); // gamma cannot be judged
    assert_no_writes(&env, &[0, 1]);
    assert_eq!(files_under(&cache), cache_before, "the preview wrote to the cache");
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((p["apiVersion"].as_str(), p["kind"].as_str()), (Some("stacksync.io/v1alpha1"), Some("FleetPreview")));
    assert_eq!(p["subscription"], "ferrol");
    assert_eq!(p["release"]["tag"], "docker-ferrol-1-27-v3");
    assert_eq!((p["release"]["origin"].as_str(), p["release"]["kubernetes"].as_str()), (Some("local"), Some("v1.27.3")));
    assert!(p["release"]["revision"].as_str().is_some_and(|r| r.starts_with("sha256:")), "{p}");

    let want = vec![
        ("prune".to_owned(), "ConfigMap/kube-system/legacy".to_owned(), vec![], false),
        ("update".to_owned(), "ConfigMap/kube-system/cni-config".to_owned(), vec![".data.mtu".to_owned()], false),
        (
            "update".to_owned(),
            "Deployment/kube-system/metrics-server".to_owned(),
            vec![".spec.template.spec.containers[0].image".to_owned()],
            true,
        ),
    ];
    let mut want = want;
    want.sort();
    let clusters = p["clusters"].as_array().expect("clusters");
    let names: Vec<&str> = clusters.iter().map(|c| c["cluster"].as_str().expect("name")).collect();
    assert_eq!(names, [format!("{NS}/alpha"), format!("{NS}/beta"), format!("{NS}/gamma")]);
    for c in &clusters[..2] {
        assert_eq!(c["result"], "changes", "{c}");
        assert_eq!(c["applied"], "docker-ferrol-1-27-v2", "{c}");
        assert_eq!(changes(c), want, "{c}");
        assert_eq!(c["restarts"], json!(["Deployment/kube-system/metrics-server"]), "{c}");
        assert_eq!(c["kubernetes"], json!({"from": "v1.27.3", "to": "v1.27.3", "heldByBeforeClusterUpgrade": false}), "{c}");
        assert!(c.get("stages").is_none(), "v3 has no BeforeClusterUpgrade stages: {c}");
        let cm = c["changes"].as_array().expect("changes").iter().find(|o| o["object"] == "ConfigMap/kube-system/cni-config").expect("cm");
        assert!(cm["diff"].as_str().is_some_and(|d| d.contains("+  mtu: \"1450\"")), "{cm}");
    }
    assert_eq!(clusters[2]["result"], "unreachable", "{}", clusters[2]);
    assert!(clusters[2]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", clusters[2]);
    assert_eq!(clusters[2]["changes"], json!([]));
    assert_eq!(
        p["summary"],
        json!({"clusters": 3, "changed": 2, "unchanged": 0, "unjudged": 1, "unreachable": 1, "notReady": 0, "errors": 0,
               "create": 0, "update": 4, "prune": 2, "delete": 0, "restarts": 2, "kubernetesUpgrades": 0})
    );
    // The release's ClusterClass is new in the namespace: created in the management cluster.
    let management = p["management"].as_array().expect("management");
    assert_eq!(management.len(), 1, "{p}");
    assert_eq!(management[0]["namespace"], NS);
    assert!(
        management[0]["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .any(|c| c["change"] == "create" && c["object"] == format!("ClusterClass/{NS}/docker-ferrol-1-27-v3")),
        "{p}"
    );
    // Nothing was applied: the fleet still runs v2.
    for name in ["alpha", "beta"] {
        assert_eq!(env.applied_tag(name).await, "docker-ferrol-1-27-v2");
    }

    // The text and markdown forms say the same.
    let text = stdout(&common::stacksync(&["preview", "--config", &cfg, "--release", &release.to_string_lossy()]).await);
    if let Ok(dir) = std::env::var("PREVIEW_DOCS_OUT") {
        std::fs::write(format!("{dir}/text.txt"), &text).expect("docs");
        std::fs::write(format!("{dir}/out.json"), &out.stdout).expect("docs");
    }
    assert!(text.contains(&format!("{NS}/alpha (docker-ferrol-1-27-v2 -> docker-ferrol-1-27-v3): 3 changes, 1 restart")), "{text}");
    assert!(
        text.contains("  update Deployment/kube-system/metrics-server: .spec.template.spec.containers[0].image  [restarts pods]"),
        "{text}"
    );
    // gamma was never synced: nothing is applied there yet.
    assert!(text.contains(&format!("{NS}/gamma (none -> docker-ferrol-1-27-v3): UNREACHABLE: ")), "{text}");
    assert!(text.contains("fleet: 3 Clusters: 2 change, 0 unchanged, 1 cannot be judged (1 unreachable"), "{text}");
    let md = stdout(&common::stacksync(&["preview", "--config", &cfg, "--release", &release.to_string_lossy(), "-o", "markdown"]).await);
    if let Ok(dir) = std::env::var("PREVIEW_DOCS_OUT") {
        std::fs::write(format!("{dir}/out.md"), &md).expect("docs");
    }
    assert!(md.contains("- `Deployment/kube-system/metrics-server` on 2 Clusters (team-a/alpha, team-a/beta)"), "{md}");
    assert!(md.contains(&format!("| {NS}/gamma | - | UNREACHABLE |")), "{md}");
    assert!(md.contains("  - update `ConfigMap/kube-system/cni-config`: `.data.mtu` on 2 Clusters"), "{md}");
    assert_no_writes(&env, &[0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_an_archive_and_a_published_tag_are_previewed_too() {
    let (env, config, _reserved) = fleet().await;
    let cfg = config.to_string_lossy().into_owned();
    let release = env.dir.path().join("docker-ferrol-1-27-v3");
    next_release(&release);
    // A .tgz of the release directory, as a release pipeline would keep it.
    let archive = env.dir.path().join("release.tgz");
    let tar = std::process::Command::new("tar")
        .args(["czf", &archive.to_string_lossy(), "-C", &env.dir.path().to_string_lossy(), "docker-ferrol-1-27-v3"])
        .status()
        .expect("tar");
    assert!(tar.success());
    reset(&env);
    let out = common::stacksync(&[
        "preview",
        "--config",
        &cfg,
        "--release",
        &archive.to_string_lossy(),
        "--cluster",
        &format!("{NS}/alpha"),
        "-o",
        "json",
    ])
    .await;
    assert_exit(&out, 1); // changes, every Cluster judged
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(p["clusters"].as_array().map(Vec::len), Some(1), "{p}");
    assert_eq!(changes(&p["clusters"][0]).len(), 3, "{p}");
    assert_no_writes(&env, &[0]);

    // Published as a tag of the source that no Cluster's class names yet: fetched and verified
    // as usual, previewed the same.
    let mut files = Vec::new();
    for (rel, _) in fixture_files("docker-ferrol-1-27-v2") {
        let rel = rel.replace("cluster-class-v2", "cluster-class-v3");
        files.push((rel.clone(), std::fs::read_to_string(release.join(&rel)).expect("file")));
    }
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let _ = env.repo.git(&["rm", "-rq", "--ignore-unmatch", "."]);
    env.repo.release("docker-ferrol-1-27-v3", &refs);
    let out = common::stacksync(&[
        "preview",
        "--config",
        &cfg,
        "--release",
        "stacks:docker-ferrol-1-27-v3",
        "--cluster",
        &format!("{NS}/beta"),
        "-o",
        "json",
    ])
    .await;
    assert_exit(&out, 1);
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(p["release"]["origin"], "source", "{p}");
    assert_eq!(changes(&p["clusters"][0]).len(), 3, "{p}");

    // A Cluster whose control plane is not ready cannot be judged: nothing is applied there
    // until it is.
    env.set_ready("alpha", false).await;
    let out = common::stacksync(&[
        "preview",
        "--config",
        &cfg,
        "--release",
        &release.to_string_lossy(),
        "--cluster",
        &format!("{NS}/alpha"),
        "-o",
        "json",
    ])
    .await;
    assert_exit(&out, 2);
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(p["clusters"][0]["result"], "notReady", "{p}");
    assert_eq!(p["summary"]["notReady"], 1, "{p}");

    // Unknown things are named.
    let out = common::stacksync(&["preview", "--config", &cfg, "--release", "stacks:docker-ferrol-1-27-v9"]).await;
    assert_exit(&out, 2);
    assert!(common::stderr(&out).contains("source `stacks` does not advertise tag `docker-ferrol-1-27-v9`"), "{}", common::stderr(&out));
    let out = common::stacksync(&["preview", "--config", &cfg, "--release", "./nowhere"]).await;
    assert_exit(&out, 2);
    assert!(common::stderr(&out).contains("./nowhere: no such file or directory"), "{}", common::stderr(&out));
}

/// v3's multi-stage fixture as `v4` on Kubernetes v1.27.5, whose `BeforeClusterUpgrade` deletes
/// `legacy-dns`, applies `cni` and waits for a gate, then applies `metrics-server`.
fn upgrade_release(dir: &Path) {
    let stages = "  BeforeClusterUpgrade:\n    - name: legacy-dns\n      action: delete\n    - name: cni\n      action: apply\n      waitForPostCondition:\n        objects:\n          - {key: gate, apiVersion: v1, kind: ConfigMap, name: upgrade-gate, namespace: kube-system}\n        conditions: \"gate.data.go == 'yes'\"\n    - name: metrics-server\n      action: apply\n";
    for (rel, text) in fixture_files("docker-ferrol-1-27-v3") {
        let rel = rel.replace("cluster-class-v3", "cluster-class-v4");
        let text = match rel.as_str() {
            "metadata.yaml" => text.replace("clusterStack: v3", "clusterStack: v4").replace("v1.27.3", "v1.27.5"),
            "clusteraddon.yaml" => format!("{}{stages}", &text[..text.find("  BeforeClusterUpgrade:").expect("hook")]),
            r if r.ends_with("Chart.yaml") && r.contains("cluster-class") => text.replace("version: v3", "version: v4"),
            _ => text,
        };
        let path = dir.join(&rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, text).expect("file");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_stages_a_kubernetes_move_the_waves_and_a_read_only_management_identity() {
    let rollout = json!({"waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "1h"});
    let (env, config, _reserved) = fleet_with(Some(rollout)).await;
    let cfg = config.to_string_lossy().into_owned();
    let release = env.dir.path().join("v4");
    upgrade_release(&release);
    // The preview's identity may only read in the management cluster: its ClusterClass
    // dry-run is refused, and the ClusterClass is judged from the rendered fields instead.
    env.mgmt.faults().add(fake_apiserver::FaultRule::new().verb("patch").path("/clusterclasses/").status(403));
    reset(&env);
    let out = common::stacksync(&["preview", "--config", &cfg, "--release", &release.to_string_lossy(), "-o", "json"]).await;
    assert_exit(&out, 2);
    assert_no_writes(&env, &[0, 1]);
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(p["release"]["tag"], "docker-ferrol-1-27-v4");
    assert_eq!(p["waves"], json!([[format!("{NS}/alpha")], [format!("{NS}/beta"), format!("{NS}/gamma")]]), "{p}");
    let gate = "gate.data.go == 'yes' (reading gate = ConfigMap/kube-system/upgrade-gate)";
    let stages = json!([
        {"hook": "BeforeClusterUpgrade", "name": "legacy-dns", "action": "delete"},
        {"hook": "BeforeClusterUpgrade", "name": "cni", "action": "apply", "waitsAfter": gate},
        {"hook": "BeforeClusterUpgrade", "name": "metrics-server", "action": "apply"},
    ]);
    for (c, wave) in p["clusters"].as_array().expect("clusters")[..2].iter().zip([1, 2]) {
        assert_eq!(c["kubernetes"], json!({"from": "v1.27.3", "to": "v1.27.5", "heldByBeforeClusterUpgrade": true}), "{c}");
        assert_eq!(c["stages"], stages, "{c}");
        assert_eq!(c["wave"], wave, "{c}");
    }
    assert_eq!(p["summary"]["kubernetesUpgrades"], 3, "{p}");
    let class = p["management"][0]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["object"] == format!("ClusterClass/{NS}/docker-ferrol-1-27-v4"))
        .cloned()
        .expect("the ClusterClass");
    assert_eq!((class["change"].as_str(), class["clientSide"].as_bool()), (Some("create"), Some(true)), "{class}");

    let text = stdout(&common::stacksync(&["preview", "--config", &cfg, "--release", &release.to_string_lossy()]).await);
    assert!(text.contains("  Kubernetes v1.27.3 -> v1.27.5: held by BeforeClusterUpgrade until its stages are done"), "{text}");
    assert!(text.contains(&format!("  stage BeforeClusterUpgrade cni (apply), then waits for {gate}")), "{text}");
    assert!(text.contains(&format!("waves: 1: {NS}/alpha; 2: {NS}/beta, {NS}/gamma")), "{text}");
    assert!(text.contains(&format!("  create ClusterClass/{NS}/docker-ferrol-1-27-v4  [judged without a dry-run]")), "{text}");
}

/// The real oras, as scripts/build-oras.sh installs it; a bare `cargo test` without it skips
/// (under CI it must be there).
fn oras() -> Option<PathBuf> {
    let found = common::tool("oras");
    assert!(found.is_some() || std::env::var_os("CI").is_none(), "oras is not installed; scripts/test.sh runs scripts/build-oras.sh");
    if found.is_none() {
        eprintln!("SKIP: oras is not installed (scripts/build-oras.sh)");
    }
    found
}

/// A release directory as `csctl` publishes it: `metadata.yaml`, the ClusterClass chart as a
/// `helm package`, the addon chart as one too, `cluster-addon-values.yaml`. The file names.
fn package(release: &Path, out: &Path) -> Vec<String> {
    let mut names = vec!["metadata.yaml".to_owned(), "cluster-addon-values.yaml".to_owned()];
    for name in ["metadata.yaml", "cluster-addon-values.yaml"] {
        std::fs::copy(release.join(name), out.join(name)).expect("copy");
    }
    for chart in ["docker-ferrol-1-27-cluster-class-v3", ADDON] {
        let helm = std::process::Command::new(common::helm_path())
            .arg("package")
            .arg(release.join(chart))
            .arg("-d")
            .arg(out)
            .output()
            .expect("helm package");
        assert!(helm.status.success(), "{}", String::from_utf8_lossy(&helm.stderr));
    }
    names.push("docker-ferrol-1-27-cluster-class-v3.tgz".into());
    names.push(format!("{ADDON}.tgz"));
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_pushed_into_an_oci_layout_by_oras_is_previewed() {
    let Some(oras) = oras() else { return };
    let (env, config, _reserved) = fleet().await;
    let cfg = config.to_string_lossy().into_owned();
    let release = env.dir.path().join("next-release");
    next_release(&release);
    let files = env.dir.path().join("published");
    std::fs::create_dir_all(&files).expect("dir");
    let names = package(&release, &files);
    // `oras push` into an OCI image layout, one layer per file titled by its name, as a release
    // pipeline pushes a cluster stack.
    let layout = env.dir.path().join("layout");
    let push = std::process::Command::new(&oras)
        .current_dir(&files)
        .env("HOME", env.dir.path())
        .args([
            "push",
            "--oci-layout",
            &format!("{}:docker-ferrol-1-27-v3", layout.display()),
            "--artifact-type",
            "application/vnd.scs.clusterstack.v1",
        ])
        .args(&names)
        .output()
        .expect("oras push");
    assert!(push.status.success(), "oras push: {}", String::from_utf8_lossy(&push.stderr));
    reset(&env);
    let out = common::stacksync(&["preview", "--config", &cfg, "--release", &layout.to_string_lossy(), "-o", "json"]).await;
    assert_exit(&out, 2); // gamma cannot be judged
    assert_no_writes(&env, &[0, 1]);
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(p["release"]["tag"], "docker-ferrol-1-27-v3", "{p}");
    for c in &p["clusters"].as_array().expect("clusters")[..2] {
        assert_eq!(c["result"], "changes", "{c}");
        assert_eq!(c["restarts"], json!(["Deployment/kube-system/metrics-server"]), "{c}");
        assert_eq!(changes(c).len(), 3, "{c}");
    }
    // The same layout with a blob that no longer matches its digest is refused, naming it.
    let blobs = layout.join("blobs/sha256");
    let metadata = std::fs::read_dir(&blobs)
        .expect("blobs")
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read(p).is_ok_and(|b| b.starts_with(b"apiVersion: metadata.clusterstack")))
        .expect("metadata.yaml's blob");
    let tampered = std::fs::read_to_string(&metadata).expect("blob").replace("v1.27.3", "v1.27.4");
    std::fs::write(&metadata, tampered).expect("tamper");
    let out = common::stacksync(&["preview", "--config", &cfg, "--release", &layout.to_string_lossy()]).await;
    assert_exit(&out, 2);
    assert!(
        common::stderr(&out).contains("OCI layout: blob sha256:") && common::stderr(&out).contains("does not match its digest"),
        "{}",
        common::stderr(&out)
    );
}

/// Write requests in an audit log's lines from `from` on, made by stacksync: every verb that
/// changes something, without `dryRun`.
fn audited_writes(log: &Path, from: usize) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut writes, mut dry_runs) = (Vec::new(), 0);
    for line in text.lines().skip(from) {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        if event["stage"] != "ResponseComplete" || !event["userAgent"].as_str().is_some_and(|u| u.starts_with("stacksync")) {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or_default();
        if !matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection") {
            continue;
        }
        let uri = event["requestURI"].as_str().unwrap_or_default();
        if uri.contains("dryRun=All") {
            dry_runs += 1;
        } else {
            writes.push(format!("{verb} {uri}"));
        }
    }
    (writes, dry_runs)
}

fn lines_of(log: &Path) -> usize {
    std::fs::read_to_string(log).map(|t| t.lines().count()).unwrap_or_default()
}

/// The same preview on the real control plane (`testkit kube`): a real management cluster and
/// two real workload clusters, their audit logs the referee of "zero writes" — every request
/// stacksync made during the preview that changes something carried `dryRun=All`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_real_control_plane_the_preview_is_exact_and_writes_nothing() {
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    }
    use testkit::kube::{Kube, Options};
    let crds = vec![fake_apiserver::capi_crds_dir(), PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/crds")];
    let audited = |preload: Vec<PathBuf>| Options { preload, audit: true, ..Options::default() };
    let (mgmt, w0, w1) = tokio::join!(Kube::start(audited(crds)), Kube::start(audited(Vec::new())), Kube::start(audited(Vec::new())));
    let (mgmt, workloads) = (mgmt.expect("management"), [w0.expect("workload 0"), w1.expect("workload 1")]);
    let client = mgmt.client().await.expect("client");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
    namespaces.create(&Default::default(), &ns).await.expect("namespace");
    let clusters: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), NS, &common::res("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), NS);
    let reserved = tokio::net::TcpSocket::new_v4().expect("socket");
    reserved.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let dead_port = reserved.local_addr().expect("addr").port();
    for (i, name) in ["alpha", "beta", "gamma"].iter().enumerate() {
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": {"stack": "ferrol"}},
            "spec": {
                "topology": {"class": "docker-ferrol-1-27-v2", "version": "v1.27.3"},
                "controlPlaneEndpoint": {"host": format!("{name}.example.test"), "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": [format!("10.{}.0.0/16", i + 1)]}},
            },
        });
        clusters.patch(name, &PatchParams::apply("capi"), &Patch::Apply(cluster)).await.expect("cluster");
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": true}});
        clusters.patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
        let kubeconfig = match workloads.get(i) {
            Some(w) => std::fs::read_to_string(w.kubeconfig()).expect("kubeconfig"),
            None => std::fs::read_to_string(workloads[0].kubeconfig())
                .expect("kubeconfig")
                .replace(workloads[0].url(), &format!("https://127.0.0.1:{dead_port}")),
        };
        let mut secret = k8s_openapi::api::core::v1::Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.metadata.namespace = Some(NS.into());
        secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig.into_bytes()))].into());
        secrets.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    let files = published_v2();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    repo.release("docker-ferrol-1-27-v2", &refs);
    let config = common::config::Config::new(dir.path())
        .git("stacks", &repo.file_url())
        .sub(Env::ferrol().clusterstack(common::fleet::STACK).match_stack_class())
        .kubernetes(mgmt.kubeconfig())
        .helm(&common::helm_path())
        .write();
    assert_exit(&run_once(&config).await, 1); // gamma is unreachable
    let release = dir.path().join("next-release");
    next_release(&release);

    let logs: Vec<PathBuf> = std::iter::once(mgmt.audit_log()).chain(workloads.iter().map(Kube::audit_log)).collect();
    let from: Vec<usize> = logs.iter().map(|l| lines_of(l)).collect();
    let cfg = config.to_string_lossy().into_owned();
    let out = common::stacksync(&["preview", "--config", &cfg, "--release", &release.to_string_lossy(), "-o", "json"]).await;
    assert_exit(&out, 2); // gamma cannot be judged
    let p: Value = serde_json::from_slice(&out.stdout).expect("json");
    let mut want = vec![
        ("prune".to_owned(), "ConfigMap/kube-system/legacy".to_owned(), vec![], false),
        ("update".to_owned(), "ConfigMap/kube-system/cni-config".to_owned(), vec![".data.mtu".to_owned()], false),
        (
            "update".to_owned(),
            "Deployment/kube-system/metrics-server".to_owned(),
            vec![".spec.template.spec.containers[0].image".to_owned()],
            true,
        ),
    ];
    want.sort();
    let clusters = p["clusters"].as_array().expect("clusters");
    assert_eq!(clusters.len(), 3, "{p}");
    for c in &clusters[..2] {
        assert_eq!((c["result"].as_str(), c["applied"].as_str()), (Some("changes"), Some("docker-ferrol-1-27-v2")), "{c}");
        assert_eq!(changes(c), want, "{c}");
        assert_eq!(c["restarts"], json!(["Deployment/kube-system/metrics-server"]), "{c}");
    }
    assert_eq!(clusters[2]["result"], "unreachable", "{}", clusters[2]);
    assert_eq!(
        (
            p["summary"]["changed"].as_u64(),
            p["summary"]["unreachable"].as_u64(),
            p["summary"]["restarts"].as_u64(),
            p["summary"]["prune"].as_u64()
        ),
        (Some(2), Some(1), Some(2), Some(2)),
        "{p}"
    );
    // The audit logs: nothing stacksync sent during the preview changed anything; the workload
    // servers were asked dry-runs.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await; // the audit backend's last lines
    for (i, (log, from)) in logs.iter().zip(&from).enumerate() {
        let (writes, dry_runs) = audited_writes(log, *from);
        assert!(writes.is_empty(), "server {i} was written to by the preview: {writes:?}");
        if i > 0 {
            let agents: std::collections::BTreeSet<String> = std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .skip(*from)
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .map(|e| format!("{} {}", e["userAgent"].as_str().unwrap_or_default(), e["verb"].as_str().unwrap_or_default()))
                .collect();
            assert!(dry_runs > 0, "workload server {i}: no dry-run in its audit log: {agents:?}");
        }
    }
    drop(reserved);
    for w in workloads {
        w.stop();
    }
    mgmt.stop();
}
