//! Faults of the real components, injected into a real control plane of the test's own
//! (`testkit::kube`: etcd, kube-apiserver, controller-manager, scheduler, kwok): the management
//! API server SIGKILLed in the middle of a fleet's first sync, etcd gone for a minute. Each
//! case states its promise and checks it while the fault lasts and after: nothing is reported
//! synced or Ready that is not, the daemon stays up, and the fleet converges. The workload
//! clusters are the same real server (each Cluster's objects in the fleet's namespace).

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Daemon, Sub};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::kube::{Kube, Options};

const NS: &str = "fleet";

/// A real control plane of this test's own (killing the shared one would break the others);
/// `None` when it is not built and this is not CI.
async fn control_plane() -> Option<Kube> {
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return None;
    }
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    let kube =
        Kube::start(Options { preload: vec![fake_apiserver::capi_crds_dir(), crds], ..Options::default() }).await.expect("control plane");
    let client = kube.client().await.expect("client");
    let namespaces: Api<Namespace> = Api::all(client);
    let body: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
    namespaces.create(&PostParams::default(), &body).await.expect("namespace");
    Some(kube)
}

fn res(group: &str, version: &str, kind: &str) -> kube::api::ApiResource {
    common::res(group, version, kind)
}

/// `n` Clusters `c000…`, control planes ready, each with a kubeconfig Secret pointing at the
/// same real server.
async fn fleet(kube: &Kube, n: usize) {
    let client = kube.client().await.expect("client");
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let secrets: Api<Secret> = Api::namespaced(client, NS);
    let kubeconfig = std::fs::read(kube.kubeconfig()).expect("kubeconfig");
    futures_util::stream::iter(0..n)
        .map(|i| {
            let (clusters, secrets, kubeconfig) = (clusters.clone(), secrets.clone(), kubeconfig.clone());
            async move {
                let name = format!("c{i:03}");
                let body = json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                    "metadata": {"name": name, "namespace": NS, "labels": {"fleet": "chaos"}},
                    "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
                });
                clusters.patch(&name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
                let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": true}});
                clusters.patch_status(&name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
                let mut secret = Secret::default();
                secret.metadata.name = Some(format!("{name}-kubeconfig"));
                secret.metadata.namespace = Some(NS.into());
                secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
                secrets.create(&PostParams::default(), &secret).await.expect("secret");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

/// Three ConfigMaps per Cluster, in the fleet's namespace.
fn addons(mark: &str) -> String {
    ["a", "b", "c"]
        .iter()
        .map(|k| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{cluster.name}}-{k}\n  namespace: {NS}\ndata:\n  cluster: ${{cluster.name}}\n  mark: \"{mark}\"\n")
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The config: one Git source, one subscription selecting the fleet, the management cluster.
fn config(dir: &std::path::Path, repo: &testkit::git::ReleaseRepo, kube: &Kube, resync: &str) -> PathBuf {
    common::config::Config::new(dir)
        .git("stacks", &repo.file_url())
        .sub(Sub::new("chaos", "stacks").health_timeout("0s").interval("2s").select("fleet", "chaos"))
        .kubernetes(kube.kubeconfig())
        .kubernetes_set("resync", resync)
        .kubernetes_set("notReadyRetry", "2s")
        .write()
}

/// The ClusterSyncs that say Ready=True, with the release and inventory they claim and their
/// resourceVersion.
/// `sent` counts the LISTs sent: the API server counts a test's own beside the daemon's.
async fn ready_syncs(client: &kube::Client, sent: &AtomicUsize) -> Option<Vec<(String, String, usize, String)>> {
    sent.fetch_add(1, Ordering::Relaxed);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res("stacksync.io", "v1alpha1", "ClusterSync"));
    let list = api.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .iter()
            .filter(|o| common::condition(&serde_json::to_value(o).unwrap_or_default(), "Ready")["status"] == "True")
            .map(|o| {
                let s = &o.data["status"];
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    s["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned(),
                    s["inventory"].as_array().map(Vec::len).unwrap_or_default(),
                    o.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect(),
    )
}

/// The promise checked at one moment: every Cluster whose ClusterSync says Ready has every
/// object of the release it names in place, with that release's content. `None` while the
/// server does not answer. The ClusterSyncs are read before and after the objects, and only
/// those unchanged in between are judged: the apply-started status is written before the first
/// object changes, so an unchanged Ready ClusterSync means no apply ran while the objects were
/// read (two reads are not one snapshot).
async fn ready_means_in_place(client: &kube::Client, marks: &[(&str, &str)], sent: &AtomicUsize) -> Option<usize> {
    let before = ready_syncs(client, sent).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let live = cms.list(&ListParams::default()).await.ok()?;
    let after = ready_syncs(client, sent).await?;
    let count = after.len();
    let ready: Vec<_> = before.into_iter().filter(|b| after.contains(b)).collect();
    let by_name: std::collections::HashMap<String, &ConfigMap> =
        live.items.iter().map(|c| (c.metadata.name.clone().unwrap_or_default(), c)).collect();
    for (name, tag, inventory, _) in &ready {
        assert_eq!(*inventory, 3, "{name} Ready with an inventory of {inventory}");
        let mark = marks.iter().find(|(t, _)| t == tag).map(|(_, m)| *m).unwrap_or_else(|| panic!("{name} Ready on unknown release {tag}"));
        for k in ["a", "b", "c"] {
            let cm = by_name.get(&format!("{name}-{k}")).unwrap_or_else(|| panic!("{name} is Ready on {tag} but {name}-{k} is not there"));
            let data = cm.data.clone().unwrap_or_default();
            assert_eq!(data.get("mark").map(String::as_str), Some(mark), "{name} is Ready on {tag} but {name}-{k} says {data:?}");
        }
    }
    Some(count)
}

/// LIST requests the API server has answered for `resource` since it started
/// (`apiserver_request_total`).
async fn lists(client: &kube::Client, resource: &str) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("request");
    let text = client.request_text(request).await.unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{") && l.contains("verb=\"LIST\"") && l.contains(&format!("resource=\"{resource}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// Promise: the management API server SIGKILLed in the middle of a 200-Cluster first sync (and
/// back three seconds later on the same port and etcd) loses nothing and claims nothing: at no
/// moment is a Cluster Ready whose objects are not all in place with its release's content;
/// every Cluster converges; the watches resume with a relist each, not a storm; the daemon
/// never exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_server_killed_mid_sync_loses_nothing_and_claims_nothing() {
    let Some(mut kube) = control_plane().await else { return };
    const N: usize = 200;
    fleet(&kube, N).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/addons.yaml", &addons("one"))]);
    let config = config(dir.path(), &repo, &kube, "10m");
    let mut daemon = Daemon::start(&config, dir.path().join("daemon.log")).await;
    let client = kube.client().await.expect("client");
    let marks = [("v1.0.0", "one")];
    let sent = AtomicUsize::new(0);

    // Some of the fleet synced, most not: the API server dies.
    daemon
        .eventually("a first part of the fleet Ready", Duration::from_secs(120), async || {
            ready_means_in_place(&client, &marks, &sent).await.is_some_and(|n| n >= 20)
        })
        .await;
    let before = ready_means_in_place(&client, &marks, &sent).await.unwrap_or_default();
    kube.kill("kube-apiserver");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(daemon.is_running(), "the daemon exited while the API server was down:\n{}", common::daemon::tail(&daemon.log(), 30));
    kube.restart("kube-apiserver").await.expect("the API server comes back");
    let own_before = sent.load(Ordering::Relaxed);
    println!("{before}/{N} Clusters Ready when the API server was killed");
    let client = kube.client().await.expect("client");

    // While it converges, and once it has: Ready means in place.
    let started = Instant::now();
    loop {
        let ready = ready_means_in_place(&client, &marks, &sent).await;
        if ready == Some(N) {
            println!("{N}/{N} Ready {:.1} s after the restart", started.elapsed().as_secs_f64());
            break;
        }
        assert!(daemon.is_running(), "the daemon exited:\n{}", common::daemon::tail(&daemon.log(), 30));
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{ready:?}/{N} Ready 180 s after the restart ({before} before the kill):\n{}",
            common::daemon::tail(&daemon.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The watches came back with one relist each (Clusters, kubeconfig Secrets, ClusterSyncs):
    // not one per Cluster. The release roll-up lists ClusterSyncs too, at most once per second
    // while they change (rollup::SETTLE): bounded by the time the fleet took to converge, not by
    // its size (a loaded machine converges slower and lists more). This test's own LISTs of
    // ClusterSyncs (two per look, every half second; `sent`) are not the daemon's: they are taken off.
    let converging = started.elapsed().as_secs_f64().ceil();
    let own = (sent.load(Ordering::Relaxed) - own_before) as f64;
    for resource in ["clusters", "secrets", "clustersyncs"] {
        let n = lists(&client, resource).await - if resource == "clustersyncs" { own } else { 0.0 };
        let bound = if resource == "clustersyncs" { 10.0 + converging } else { 10.0 };
        println!("{n} LISTs of {resource} since the restart (bound {bound})");
        assert!(n <= bound, "{n} LISTs of {resource} since the restart (bound {bound}, {converging} s converging)");
    }
    // Nothing applied twice into a conflict: every Cluster's objects are stacksync's alone.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let live = cms.list(&ListParams::default()).await.expect("list");
    assert_eq!(live.items.iter().filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with('c'))).count(), N * 3);
    for cm in &live.items {
        let managers: Vec<String> = cm.metadata.managed_fields.clone().unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
        assert!(managers.iter().all(|m| m == "stacksync" || m == "kube-controller-manager"), "{:?}: {managers:?}", cm.metadata.name);
    }
    daemon.stop().await;
    kube.stop();
}

/// Promise: etcd gone for a minute (killed, then started again on its data) takes nothing down
/// for good: the daemon stays up through it, the Clusters it could not look at are not claimed
/// Ready on the new release, and once etcd is back everything converges within one resync;
/// a release published while etcd was gone is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_gone_for_a_minute_takes_nothing_down_and_everything_converges() {
    let Some(mut kube) = control_plane().await else { return };
    const N: usize = 10;
    fleet(&kube, N).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/addons.yaml", &addons("one"))]);
    let config = config(dir.path(), &repo, &kube, "20s");
    let mut daemon = Daemon::start(&config, dir.path().join("daemon.log")).await;
    let client = kube.client().await.expect("client");
    let marks = [("v1.0.0", "one"), ("v1.1.0", "two")];
    let sent = AtomicUsize::new(0);
    daemon
        .eventually("the fleet Ready on v1.0.0", Duration::from_secs(60), async || {
            ready_means_in_place(&client, &marks, &sent).await == Some(N)
        })
        .await;

    kube.kill("etcd");
    let lines_before = daemon.log().lines().count();
    // A release published while the store is gone.
    repo.release("v1.1.0", &[("manifests/addons.yaml", &addons("two"))]);
    let gone = Instant::now();
    while gone.elapsed() < Duration::from_secs(60) {
        assert!(daemon.is_running(), "the daemon exited while etcd was gone:\n{}", common::daemon::tail(&daemon.log(), 30));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // What a minute of outage costs in the log: the failures said, backed off, not a flood.
    let outage = daemon.log().lines().skip(lines_before).filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).count();
    println!("etcd gone 60 s: {outage} WARN/ERROR lines for {N} Clusters");
    assert!(outage <= 30 * N, "{outage} WARN/ERROR lines in 60 s for {N} Clusters:\n{}", common::daemon::tail(&daemon.log(), 40));
    kube.restart("etcd").await.expect("etcd comes back");
    let back = Instant::now();
    loop {
        let ready = ready_means_in_place(&client, &marks, &sent).await;
        let on_new = ready_syncs(&client, &sent).await.map(|r| r.iter().filter(|(_, tag, _, _)| tag == "v1.1.0").count());
        if on_new == Some(N) {
            println!("{N}/{N} on v1.1.0 {:.1} s after etcd came back", back.elapsed().as_secs_f64());
            break;
        }
        assert!(daemon.is_running(), "the daemon exited:\n{}", common::daemon::tail(&daemon.log(), 30));
        // Within one resync (20 s) and the backoff of what failed meanwhile.
        assert!(
            back.elapsed() < Duration::from_secs(90),
            "{on_new:?}/{N} on v1.1.0 ({ready:?} Ready) 90 s after etcd came back:\n{}",
            common::daemon::tail(&daemon.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (code, body) = daemon.get("/readyz").await;
    assert_eq!(code, 200, "{body}");
    daemon.stop().await;
    kube.stop();
}

/// Promise: a workload API server killed in the middle of an apply leaves a ClusterSync that
/// says so — not Ready, naming what failed and why — never a Ready claim over half a release;
/// once the server is back the next pass completes what is missing, and only then is the
/// Cluster Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_api_server_killed_mid_apply_is_said_and_the_next_pass_completes() {
    let Some(mgmt) = control_plane().await else { return };
    let mut workload = Kube::start(Options::default()).await.expect("workload control plane");
    const OBJECTS: usize = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    // One Cluster whose kubeconfig points at the workload control plane.
    let client = mgmt.client().await.expect("client");
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let body = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "alpha", "namespace": NS, "labels": {"fleet": "chaos"}},
        "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
    });
    clusters.patch("alpha", &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
    let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "alpha"}, "status": {"controlPlaneReady": true}});
    clusters.patch_status("alpha", &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
    let mut secret = Secret::default();
    secret.metadata.name = Some("alpha-kubeconfig".into());
    secret.metadata.namespace = Some(NS.into());
    secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(std::fs::read(workload.kubeconfig()).expect("kubeconfig")))].into());
    Api::<Secret>::namespaced(client.clone(), NS).create(&PostParams::default(), &secret).await.expect("secret");
    let w = workload.client().await.expect("workload client");
    let namespaces: Api<Namespace> = Api::all(w.clone());
    let body: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
    namespaces.create(&PostParams::default(), &body).await.expect("namespace");

    let many: Vec<String> = (0..OBJECTS)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\n  namespace: {NS}\ndata:\n  cluster: ${{cluster.name}}\n  payload: {}\n", "x".repeat(2000)))
        .collect();
    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/addons.yaml", &many.join("---\n"))]);
    let config = config(dir.path(), &repo, &mgmt, "10m");
    let mut daemon = Daemon::start(&config, dir.path().join("daemon.log")).await;
    let cms: Api<ConfigMap> = Api::namespaced(w.clone(), NS);
    let sync = async || {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res("stacksync.io", "v1alpha1", "ClusterSync"));
        api.get_opt("alpha").await.ok().flatten().map(|o| serde_json::to_value(o).unwrap_or_default())
    };
    // Part of the release is in: the workload API server dies.
    let started = Instant::now();
    loop {
        let n = cms.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or_default();
        // Twenty of ours, besides the controller-manager's `kube-root-ca.crt`.
        if n > 20 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{n} objects applied after 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    workload.kill("kube-apiserver");
    let lines_before = daemon.log().lines().count();
    // While it is down: never Ready; once the sync gives up on it, the ClusterSync says why.
    // Each retry first says again that the apply started (`applying v1.0.0 (300 objects)`), then
    // why it failed: what is kept is the last failure said, whenever the window ends.
    let down = Instant::now();
    let mut said = None;
    while down.elapsed() < Duration::from_secs(20) {
        if let Some(cs) = sync().await {
            let ready = common::condition(&cs, "Ready");
            assert_ne!(ready["status"], "True", "Ready while the workload server is down: {cs}");
            let message = ready["message"].as_str().unwrap_or_default();
            if ready["status"] == "False" && !message.starts_with("applying ") {
                said = Some(message.to_owned());
            }
        }
        assert!(daemon.is_running(), "the daemon exited:\n{}", common::daemon::tail(&daemon.log(), 30));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let said = said.unwrap_or_else(|| panic!("the ClusterSync never said the apply failed:\n{}", common::daemon::tail(&daemon.log(), 30)));
    let log = daemon.log();
    assert!(
        said.contains("stopped answering") || said.contains("does not answer"),
        "the ClusterSync says: {said}\n{}",
        common::daemon::tail(&log, 30)
    );
    assert!(said.contains("Connection refused"), "the cause is said: {said}");
    // One fault, a few lines: not one WARN per object left.
    let warned = log.lines().skip(lines_before).filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).count();
    println!("workload API server down 20 s: {warned} WARN/ERROR lines; the ClusterSync says: {said}");
    assert!(warned <= 10, "{warned} WARN/ERROR lines:\n{}", common::daemon::tail(&log, 40));
    workload.restart("kube-apiserver").await.expect("the workload API server comes back");
    daemon
        .eventually("alpha Ready with every object", Duration::from_secs(120), async || {
            let Some(cs) = sync().await else { return false };
            common::condition(&cs, "Ready")["status"] == "True" && cs["status"]["synced"].as_u64() == Some(OBJECTS as u64)
        })
        .await;
    // (`kube-root-ca.crt` is the controller-manager's, in every namespace.)
    let live = cms.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(live.iter().filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("cm-"))).count(), OBJECTS);
    daemon.stop().await;
    workload.stop();
    mgmt.stop();
}
