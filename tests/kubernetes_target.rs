//! The Kubernetes target end to end: a management cluster and two workload clusters, each a
//! testkit API server on loopback; Cluster API `Cluster` objects and `<cluster>-kubeconfig`
//! Secrets in the management cluster; releases from a Git repository.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::fleet::{Env, NS, Servers, fixture_files};
use common::{Sub, assert_exit, condition, res, run_once, stderr, stdout};
use fake_apiserver::Stats;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// What the ClusterSync of `name` says (it must exist).
async fn cluster_sync(env: &Env, name: &str) -> Value {
    env.cluster_sync(name).await.unwrap_or_else(|| panic!("no ClusterSync {name}"))
}

/// The `addon-config` ConfigMap of workload cluster `i`.
async fn configmap(env: &Env, i: usize) -> Option<ConfigMap> {
    env.configmap(i, "addon-config").await
}

const CM: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-config\n  namespace: kube-system\ndata:\n  cluster: ${cluster.name}\n";
const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ccm\n  namespace: kube-system\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: ccm}\n  template:\n    metadata:\n      labels: {app: ccm}\n    spec:\n      containers:\n        - name: ccm\n          image: registry.example/ccm:1.0\n";
const WIDGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n";
const NAMESPACE: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: addons\n";

fn writes(s: &Stats) -> u64 {
    s.total_writes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_pass_syncs_everything_and_a_second_pass_writes_nothing() {
    let env = Env::new(2).await;
    env.repo.release("v1.0.0", &[("manifests/ns.yaml", NAMESPACE), ("manifests/cm.yaml", CM), ("manifests/deploy.yaml", DEPLOY)]);
    for (i, name) in ["alpha", "beta"].iter().enumerate() {
        env.add_cluster(name, "docker-ferrol-1-27-v1", true).await;
        env.add_kubeconfig(name, i).await;
    }
    let config = env.config().write();
    env.mgmt.reset_stats();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    // A first sync writes each ClusterSync twice: created (owned by its Cluster) and the result
    // (a first install has no release its status could wrongly claim while the apply runs, so
    // no apply-started status); it is read once and never asked for in vain. With its one
    // `Applied` Event, a new Cluster costs the management cluster three writes.
    let mgmt = env.mgmt.stats();
    assert_eq!(Stats::count(&mgmt.requests, "patch", "clustersyncs.stacksync.io"), 2, "{mgmt:?}");
    assert_eq!(Stats::count(&mgmt.requests, "patch", "clustersyncs.stacksync.io/status"), 2, "{mgmt:?}");
    assert_eq!(Stats::count(&mgmt.requests, "get", "clustersyncs.stacksync.io"), 2, "{mgmt:?}");
    // At INFO, one line per Cluster and pass says what was done (per-object lines are DEBUG).
    let log = stderr(&o);
    for name in ["alpha", "beta"] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&format!("cluster={NS}/{name} ")) && l.contains("synced: ")).collect();
        assert_eq!(lines.len(), 1, "{log}");
        assert!(lines[0].contains("synced: 3 created") && lines[0].contains("tag=v1.0.0") && lines[0].contains("duration_ms="), "{log}");
    }
    assert!(!log.lines().any(|l| l.contains(": applied object=")), "an object line at INFO:\n{log}");
    for (i, name) in ["alpha", "beta"].iter().enumerate() {
        let cm = configmap(&env, i).await.expect("configmap applied");
        assert_eq!(cm.data.unwrap_or_default()["cluster"], *name);
        assert_eq!(
            cm.metadata.labels.unwrap_or_default().get("stacksync.io/owner").map(String::as_str),
            Some(format!("ferrol.{NS}.{name}").as_str())
        );
        let cs = cluster_sync(&env, name).await;
        assert_eq!(condition(&cs, "Ready")["status"], "True", "{cs}");
        assert_eq!((cs["status"]["synced"].as_u64(), cs["status"]["total"].as_u64()), (Some(3), Some(3)), "{cs}");
        assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0");
        assert_eq!(cs["status"]["inventory"].as_array().map(Vec::len), Some(3));
    }

    for w in &env.workloads {
        w.reset_stats();
    }
    env.mgmt.reset_stats();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    for w in &env.workloads {
        assert_eq!(writes(&w.stats()), 0, "a no-op pass wrote to a workload cluster: {:?}", w.stats().writes);
        // One LIST per kind (Namespace, ConfigMap, Deployment), nothing else: no discovery
        // (built-in kinds are known without asking) and no separate reachability probe
        // (`GET /version`), the first request is the check.
        let requests = w.stats().requests;
        assert_eq!(requests.get("list").map(|r| r.values().sum::<u64>()), Some(3), "{requests:?}");
        assert!(requests.keys().all(|verb| verb == "list"), "{requests:?}");
        assert!(!requests.get("discovery").is_some_and(|d| d.contains_key("version")), "a GET /version: {requests:?}");
    }
    assert_eq!(writes(&env.mgmt.stats()), 0, "a no-op pass rewrote status: {:?}", env.mgmt.stats().writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_cluster_and_missing_kubeconfig_are_skipped_then_synced() {
    let env = Env::new(2).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", false).await;
    env.add_kubeconfig("alpha", 0).await;
    env.add_cluster("beta", "docker-ferrol-1-27-v1", true).await;
    let config = env.config().write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let alpha = cluster_sync(&env, "alpha").await;
    assert_eq!(
        (condition(&alpha, "Ready")["status"].as_str(), condition(&alpha, "Ready")["reason"].as_str()),
        (Some("False"), Some("ControlPlaneNotReady")),
        "{alpha}"
    );
    assert_eq!(condition(&alpha, "Reconciling")["status"], "True");
    let beta = cluster_sync(&env, "beta").await;
    assert_eq!(condition(&beta, "Ready")["reason"], "KubeconfigMissing", "{beta}");
    assert!(stdout(&o).contains("Secret team-a/beta-kubeconfig does not exist yet"), "{}", stdout(&o));

    env.set_ready("alpha", true).await;
    env.add_kubeconfig("beta", 1).await;
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(configmap(&env, 0).await.is_some() && configmap(&env, 1).await.is_some());
}

/// Regression: after the cache was removed (every restart of the shipped Deployment, whose
/// cache is an emptyDir), a force-moved tag was taken for a new release and applied, Ready. The
/// ClusterSync remembers the commit that was applied; the moved tag stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_stays_refused_after_the_cache_is_gone() {
    let env = one_cluster(&[("manifests/cm.yaml", CM)]).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    let applied = cluster_sync(&env, "alpha").await["status"]["appliedRelease"]["commit"].clone();

    env.repo.write("manifests/cm.yaml", &CM.replace("cluster: ${cluster.name}", "cluster: sneaky"));
    env.repo.commit("rewrite the release");
    env.repo.move_tag("v1.0.0");
    for _ in 0..2 {
        std::fs::remove_dir_all(env.dir.path().join("cache")).expect("remove the cache");
        let o = run_once(&config).await;
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("is what was applied; refused"), "{}", stderr(&o));
        let cs = cluster_sync(&env, "alpha").await;
        assert_eq!(cs["status"]["appliedRelease"]["commit"], applied, "{cs}");
        assert_eq!(condition(&cs, "Ready")["status"], "False", "{cs}");
        assert_eq!(condition(&cs, "Ready")["reason"], "TagRefused", "{cs}");
        let cm = configmap(&env, 0).await.expect("the addon");
        assert_eq!(cm.data.unwrap_or_default()["cluster"], "alpha", "the moved tag's content was applied");
    }
}

/// Regression: a Cluster with no `ClusterSync` yet (added after the cache was lost) took the
/// moved tag's content, because only the Clusters that ran the tag remembered its commit. The
/// release's `StackRelease` remembers it for the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_after_the_cache_is_gone_does_not_take_a_moved_tag() {
    let env = Env::new(2).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    let applied = cluster_sync(&env, "alpha").await["status"]["appliedRelease"]["commit"].clone();

    env.repo.write("manifests/cm.yaml", &CM.replace("cluster: ${cluster.name}", "cluster: sneaky"));
    env.repo.commit("rewrite the release");
    env.repo.move_tag("v1.0.0");
    std::fs::remove_dir_all(env.dir.path().join("cache")).expect("remove the cache");
    env.add_cluster("beta", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("beta", 1).await;
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let beta = cluster_sync(&env, "beta").await;
    assert_eq!(condition(&beta, "Ready")["reason"], "TagRefused", "{beta}");
    let message = condition(&beta, "Ready")["message"].as_str().unwrap_or_default().to_owned();
    let short: String = applied.as_str().unwrap_or_default().chars().take(7).collect();
    assert!(message.contains("v1.0.0") && message.contains(&short), "names the tag and the recorded commit: {message}");
    assert!(configmap(&env, 1).await.is_none(), "the moved tag's content was applied to the new Cluster");
    let alpha = cluster_sync(&env, "alpha").await;
    assert_eq!(alpha["status"]["appliedRelease"]["commit"], applied, "{alpha}");
    assert_eq!(configmap(&env, 0).await.expect("the addon").data.unwrap_or_default()["cluster"], "alpha");
}

/// Regression: a new release that failed to render left `wantedRelease` at the release in
/// place, so nothing named the release that failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_fails_to_render_is_named_as_the_wanted_release() {
    let env = one_cluster(&[("manifests/cm.yaml", CM)]).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    env.repo.release("v1.1.0", &[("manifests/cm.yaml", "apiVersion: v1\nkind: [ConfigMap\n")]);
    assert_exit(&run_once(&config).await, 1);
    let cs = cluster_sync(&env, "alpha").await;
    assert_eq!(condition(&cs, "Ready")["reason"], "RenderFailed", "{cs}");
    assert_eq!(cs["status"]["wantedRelease"]["tag"], "v1.1.0", "{cs}");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0", "{cs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_object_is_pruned_and_a_broken_object_is_reported_alone() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM), ("manifests/deploy.yaml", DEPLOY)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);

    env.repo.remove("manifests/deploy.yaml");
    let broken = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: kube-system\n";
    env.repo.release("v1.1.0", &[("manifests/broken.yaml", broken)]);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    assert!(deployments.get_opt("ccm").await.expect("get").is_none(), "the dropped Deployment was not pruned");
    assert!(configmap(&env, 0).await.is_some(), "the good object is applied");
    let cs = cluster_sync(&env, "alpha").await;
    let entries = cs["status"]["entries"].as_array().cloned().unwrap_or_default();
    let widget = entries.iter().find(|e| e["kind"] == "Widget").expect("a Widget entry");
    assert_eq!(widget["synced"], false);
    assert!(widget["message"].as_str().is_some_and(|m| !m.is_empty()), "{widget}");
    assert_eq!(condition(&cs, "Ready")["status"], "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_the_printer_columns_and_waits_for_ready() {
    let Some(kubectl) = common::tool("kubectl") else {
        panic!("kubectl not found: run scripts/install-tools.sh (scripts/test.sh does)");
    };
    let env = Env::new(2).await;
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: kube-system\n";
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM), ("manifests/widget.yaml", widget)]);
    // Only alpha's API server knows Widgets: beta's sync fails on that object.
    env.workloads[0].load_yaml(WIDGET_CRD).expect("Widget CRD");
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    env.add_cluster("beta", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("beta", 1).await;
    run_once(&env.config().write()).await;
    let run = |args: Vec<String>| {
        let kubectl = kubectl.clone();
        let home = env.dir.path().to_path_buf();
        let kubeconfig = env.mgmt.kubeconfig();
        async move {
            let out = tokio::time::timeout(
                Duration::from_secs(60),
                tokio::process::Command::new(kubectl).arg("--kubeconfig").arg(kubeconfig).args(args).env("HOME", home).output(),
            )
            .await
            .expect("kubectl in time")
            .expect("kubectl");
            (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    let args = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();

    let (ok, text, err) = run(args("get clustersyncs -A")).await;
    assert!(ok, "{err}");
    let header: Vec<&str> = text.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "CLASS", "SELECTED", "BY", "APPLIED", "SYNCED", "READY", "REASON", "MESSAGE", "LAST", "SYNC", "AGE"],
        "{text}"
    );
    let row = |name: &str| text.lines().find(|l| l.split_whitespace().nth(1) == Some(name)).unwrap_or_default().to_owned();
    let alpha: Vec<String> = row("alpha").split_whitespace().map(str::to_owned).collect();
    // A Ready Cluster has no MESSAGE: the column is blank.
    // A plain-manifests subscription picks the release itself: the class is shown, not followed.
    assert_eq!(&alpha[..8], [NS, "alpha", "docker-ferrol-1-27-v1", "subscription", "v1.0.0", "2/2", "True", "Synced"], "{text}");
    let beta = row("beta");
    assert!(beta.contains("1/2") && beta.contains("False") && beta.contains("NotSynced"), "{text}");
    assert!(beta.contains("Widget"), "the MESSAGE column names what failed: {text}");

    let (ok, text, err) = run(args("get clustersyncs -A -o wide")).await;
    assert!(ok, "{err}");
    assert!(text.lines().next().is_some_and(|h| h.contains("SUBSCRIPTION") && h.contains("WANTED") && h.contains("NEWEST")), "{text}");

    let (ok, _, err) = run(args(&format!("wait --for=condition=Ready clustersync/alpha -n {NS} --timeout=20s"))).await;
    assert!(ok, "kubectl wait on a Ready ClusterSync: {err}");

    // One of the release's two Clusters is not synced: the release is not Ready, and says why.
    let (ok, text, err) = run(args("get stackreleases")).await;
    assert!(ok, "{err}");
    let header: Vec<&str> = text.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SUBSCRIPTION", "SOURCE", "TAG", "PHASE", "VERIFIEDBY", "CLUSTERS", "ROLLOUT", "ROLLOUTPHASE", "READY", "AGE"],
        "{text}"
    );
    let release: Vec<&str> = text.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(&release[..8], ["ferrol.v1.0.0", "ferrol", "stacks", "v1.0.0", "Applied", "git", "1/2", "False"], "{text}");
    let (ok, _, _) = run(args("wait --for=condition=Ready stackrelease/ferrol.v1.0.0 --timeout=1s")).await;
    assert!(!ok, "a release with a failing Cluster is not Ready");

    // Without beta, every Cluster of the release is Ready, and so is the release.
    let (ok, _, err) = run(args(&format!("delete cluster beta -n {NS} --wait=false"))).await;
    assert!(ok, "{err}");
    run_once(&env.config().write()).await;
    let (ok, _, err) = run(args("wait --for=condition=Ready stackrelease/ferrol.v1.0.0 --timeout=20s")).await;
    assert!(ok, "kubectl wait on a Ready StackRelease: {err}");
}

/// One ready cluster `alpha` on workload 0 and the release `v1.0.0` with `files`.
async fn one_cluster(files: &[(&str, &str)]) -> Env {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", files);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_manager_is_reported_until_the_subscription_forces() {
    let env = one_cluster(&[("manifests/cm.yaml", CM)]).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    // Another controller takes the field with a different value.
    let api: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-config"}, "data": {"cluster": "hijacked"}});
    api.patch("addon-config", &PatchParams::apply("other-controller").force(), &Patch::Apply(theirs)).await.expect("hijack");
    env.repo.release("v1.1.0", &[("manifests/cm.yaml", &CM.replace("cluster: ${cluster.name}", "cluster: ${cluster.name}-v2"))]);

    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let cs = cluster_sync(&env, "alpha").await;
    let entry = &cs["status"]["entries"][0];
    assert_eq!((entry["kind"].as_str(), entry["synced"].as_bool()), (Some("ConfigMap"), Some(false)), "{cs}");
    assert!(entry["message"].as_str().is_some_and(|m| m.contains("other-controller") && m.contains(".data.cluster")), "{entry}");
    assert_eq!(condition(&cs, "Stalled")["status"], "True");

    let forced = env.config_with(Env::ferrol().set("force", true)).write();
    assert_exit(&run_once(&forced).await, 0);
    assert_eq!(configmap(&env, 0).await.expect("cm").data.unwrap_or_default()["cluster"], "alpha-v2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prune_limit_pauses_pruning_instead_of_wiping_a_cluster() {
    let files: Vec<(String, String)> =
        (0..5).map(|i| (format!("manifests/cm{i}.yaml"), CM.replace("name: addon-config", &format!("name: cm-{i}")))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let env = one_cluster(&refs).await;
    let config = env.config().kubernetes_set("pruneLimit", 2).write();
    assert_exit(&run_once(&config).await, 0);

    for i in 0..4 {
        env.repo.remove(&format!("manifests/cm{i}.yaml"));
    }
    env.repo.release("v1.1.0", &[]);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let api: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    for i in 0..5 {
        assert!(api.get_opt(&format!("cm-{i}")).await.expect("get").is_some(), "cm-{i} was pruned past the limit");
    }
    let cs = cluster_sync(&env, "alpha").await;
    assert_eq!(condition(&cs, "Ready")["reason"], "PrunePaused", "{cs}");
    assert!(stdout(&o).contains("PrunePaused"), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_corrected_and_only_reported_in_warn_mode() {
    let env = one_cluster(&[("manifests/cm.yaml", &CM.replace("\ndata:\n", "\ndata:\n  mode: fast\n"))]).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    let api: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    // Someone removes a field stacksync owns: drift.
    let mut cm = api.get("addon-config").await.expect("get");
    cm.data.as_mut().expect("data").remove("mode");
    cm.metadata.managed_fields = None;
    api.replace("addon-config", &Default::default(), &cm).await.expect("replace");

    let warn = env.config().kubernetes_set("driftMode", "warn").write();
    let o = run_once(&warn).await;
    assert_exit(&o, 1);
    assert!(common::stderr(&o).contains("drifted"), "{}", common::stderr(&o));
    assert!(!api.get("addon-config").await.expect("get").data.unwrap_or_default().contains_key("mode"), "warn mode corrected drift");

    // The same file again, back in the default mode: the drift is corrected.
    let config = env.config().write();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(api.get("addon-config").await.expect("get").data.unwrap_or_default()["mode"], "fast");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_objects_sync_and_fit_in_the_status() {
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:05}\n  namespace: kube-system\ndata:\n  i: \"{i}\"\n"
        ));
    }
    let env = one_cluster(&[("manifests/many.yaml", &text)]).await;
    let started = std::time::Instant::now();
    let o = run_once(&env.config().write()).await;
    assert_exit(&o, 0);
    let cs = cluster_sync(&env, "alpha").await;
    assert_eq!((cs["status"]["synced"].as_u64(), cs["status"]["total"].as_u64()), (Some(5000), Some(5000)));
    let size = serde_json::to_vec(&cs).expect("json").len();
    assert!(size < 1024 * 1024, "ClusterSync is {size} bytes");
    eprintln!("5,000 objects: first pass {:?}, ClusterSync {size} bytes", started.elapsed());
}

/// The testdata cluster stack released, one topology Cluster per name (with its control plane
/// object, 3 replicas) each on its own workload server, and a config using the real helm.
async fn cluster_stack_env(names: &[&str]) -> (Env, PathBuf) {
    let env = Env::new(names.len()).await;
    let files = fixture_files("docker-ferrol-1-27-v2");
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    env.repo.release("docker-ferrol-1-27-v2", &refs);
    for (i, name) in names.iter().enumerate() {
        // `.ControlPlane` comes from the live object.
        let kcp = json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": {"name": format!("{name}-cp"), "namespace": NS}, "spec": {"replicas": 3},
        });
        env.mgmt.load_yaml(&kcp.to_string()).expect("kcp");
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": {"stack": "ferrol"}},
            "spec": {
                "topology": {"class": "docker-ferrol-1-27-v2", "version": "v1.27.3"},
                "controlPlaneEndpoint": {"host": format!("{name}.example.test"), "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": [format!("10.{}.0.0/16", i + 1)]}},
                "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
            },
        });
        env.clusters().patch(name, &PatchParams::apply("capi"), &Patch::Apply(cluster)).await.expect("cluster");
        env.set_ready(name, true).await;
        env.add_kubeconfig(name, i).await;
    }
    let config = env.stack_config(Sub::match_stack_class).write();
    (env, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_stack_classes_go_to_the_management_cluster_and_addons_to_workloads() {
    let (env, config) = cluster_stack_env(&["alpha"]).await;
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let classes: Api<DynamicObject> = Api::namespaced_with(env.mgmt(), NS, &res("cluster.x-k8s.io", "v1beta1", "ClusterClass"));
    assert!(classes.get_opt("docker-ferrol-1-27-v2").await.expect("get").is_some(), "the ClusterClass is in the management cluster");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    let ms = deployments.get("metrics-server").await.expect("addon applied to the workload cluster");
    assert_eq!(ms.metadata.labels.unwrap_or_default()["domain"], "alpha.example.test");
    assert_eq!(ms.spec.replicas, Some(3), "replicas come from the live KubeadmControlPlane");
    let srel: Api<DynamicObject> = Api::all_with(env.mgmt(), &res("stacksync.io", "v1alpha1", "StackRelease"));
    let release = srel.get("ferrol.docker-ferrol-1-27-v2").await.expect("StackRelease");
    assert_eq!(release.data["status"]["phase"], "Applied", "{:?}", release.data);
    assert!(release.data["status"]["total"].as_u64().is_some_and(|n| n >= 5), "{:?}", release.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_class_whose_objects_are_refused_is_failed_not_applied() {
    let (env, config) = cluster_stack_env(&["alpha"]).await;
    // The management cluster refuses the ClusterClass itself (as missing RBAC would); its
    // templates are written. The release is not in place, so it must not read `Applied`.
    env.mgmt.faults().add(fake_apiserver::FaultRule::new().verb("patch").path("/clusterclasses/").status(403));
    let _ = run_once(&config).await;
    let srel: Api<DynamicObject> = Api::all_with(env.mgmt(), &res("stacksync.io", "v1alpha1", "StackRelease"));
    let release = srel.get("ferrol.docker-ferrol-1-27-v2").await.expect("StackRelease");
    let status = &release.data["status"];
    assert_eq!(status["phase"], "Failed", "{status}");
    let total = status["total"].as_u64().expect("total");
    assert!(status["synced"].as_u64().is_some_and(|n| n < total), "{status}");
    assert!(status["entries"].to_string().contains("ClusterClass"), "the refused object is named: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_cluster_without_cluster_api_is_never_reported_synced() {
    let env = Env::start(Servers { workloads: 0, cluster_api: false, ..Servers::default() }).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    let config = env.config().write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("serves no cluster.x-k8s.io Cluster"), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_once_and_ignore_policies_count_as_synced() {
    let once = CM.replace("name: addon-config", "name: seed\n  annotations: {stacksync.io/policy: apply-once}");
    let ignored = CM.replace("name: addon-config", "name: hands-off\n  annotations: {stacksync.io/policy: ignore}");
    let env = one_cluster(&[("manifests/cm.yaml", CM), ("manifests/once.yaml", &once), ("manifests/ignored.yaml", &ignored)]).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    // The second pass skips the apply-once object (it exists): still every object synced.
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let cs = cluster_sync(&env, "alpha").await;
    assert_eq!(condition(&cs, "Ready")["status"], "True", "{cs}");
    let api: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    assert!(api.get_opt("hands-off").await.expect("get").is_none(), "an ignored object was applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_status_crds_fail_the_pass_with_a_hint() {
    // A management cluster with Cluster API but without stacksync's CRDs.
    let env = Env::start(Servers { status_crds: false, ..Servers::default() }).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "alpha", "namespace": NS, "labels": {"stack": "ferrol"}}, "spec": {}});
    env.mgmt.load_yaml(&cluster.to_string()).expect("cluster");
    let config = env.config().write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("are the CRDs installed? kubectl apply -f deploy/crds/"), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_clusters_get_the_subscription_values() {
    let env = one_cluster(&[("manifests/cm.yaml", &CM.replace("\ndata:\n", "\ndata:\n  region: ${region}\n"))]).await;
    let config = env.config_with(Env::ferrol().set("values", json!({"region": "eu-north"}))).write();
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(configmap(&env, 0).await.expect("cm").data.unwrap_or_default()["region"], "eu-north");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_inventory_skips_the_cluster_instead_of_forgetting_what_to_prune() {
    let env = one_cluster(&[("manifests/cm.yaml", CM), ("manifests/deploy.yaml", DEPLOY)]).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    env.repo.remove("manifests/deploy.yaml");
    env.repo.release("v1.1.0", &[]);

    env.mgmt.faults().add(fake_apiserver::FaultRule::new().verb("get").path("/clustersyncs/alpha").status(500));
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("cannot read ClusterSync team-a/alpha"), "{}", stdout(&o));
    env.mgmt.faults().clear();

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    assert!(deployments.get_opt("ccm").await.expect("get").is_none(), "the dropped Deployment was forgotten instead of pruned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_cluster_that_is_down_is_skipped_quickly() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    // A kubeconfig pointing at a port nobody listens on: bound (so no other test's server gets
    // it) but not listening (so a connection is refused), for as long as the test runs.
    let reserved = tokio::net::TcpSocket::new_v4().expect("socket");
    reserved.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let port = reserved.local_addr().expect("addr").port();
    let dead = std::fs::read_to_string(env.workloads[0].kubeconfig())
        .expect("kubeconfig")
        .replace(env.workloads[0].url(), &format!("http://127.0.0.1:{port}"));
    env.put_kubeconfig("alpha", dead.into_bytes()).await;

    let started = std::time::Instant::now();
    let o = run_once(&env.config().write()).await;
    assert_exit(&o, 1);
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    let cs = cluster_sync(&env, "alpha").await;
    assert_eq!(condition(&cs, "Ready")["reason"], "ClusterUnreachable", "{cs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_shows_drift_and_an_upgrade_and_changes_nothing() {
    let env = one_cluster(&[("manifests/cm.yaml", CM), ("manifests/ns.yaml", NAMESPACE)]).await;
    env.add_cluster("nokube", "docker-ferrol-1-27-v1", true).await;
    let config = env.config().write();
    let cfg = config.to_string_lossy().into_owned();
    assert_exit(&run_once(&config).await, 1); // nokube has no kubeconfig

    // In sync: nothing to show.
    let out = common::stacksync(&["diff", "--config", &cfg, "--cluster", &format!("{NS}/alpha")]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains(&format!("{NS}/alpha (release v1.0.0): no changes")), "{}", stdout(&out));

    // A hand edit: the diff shows the field going back.
    let cms: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    let patch = json!({"data": {"cluster": "patched"}});
    cms.patch("addon-config", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    let out = common::stacksync(&["diff", "--config", &cfg, "--cluster", &format!("{NS}/alpha")]).await;
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("update ConfigMap/kube-system/addon-config"), "{text}");
    assert!(text.contains("-  cluster: patched\n+  cluster: alpha\n"), "{text}");
    assert!(text.contains("--- live/ConfigMap/kube-system/addon-config"), "{text}");
    assert_eq!(
        configmap(&env, 0).await.and_then(|c| c.data).and_then(|d| d.get("cluster").cloned()).as_deref(),
        Some("patched"),
        "diff wrote"
    );

    // A new release: a changed object, a new one and a dropped one.
    let cm2 = CM.replace("cluster: ${cluster.name}", "cluster: ${cluster.name}\n  tier: gold");
    let extra = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: kube-system\ndata: {a: b}\n";
    env.repo.remove("manifests/ns.yaml");
    env.repo.release("v2.0.0", &[("manifests/cm.yaml", cm2.as_str()), ("manifests/extra.yaml", extra)]);
    let out = common::stacksync(&["diff", "--config", &cfg, "--cluster", &format!("{NS}/alpha")]).await;
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("(release v1.0.0 -> v2.0.0): 3 changes"), "{text}");
    assert!(text.contains("+  tier: gold"), "{text}");
    assert!(text.contains("create ConfigMap/kube-system/extra"), "{text}");
    assert!(text.contains("prune Namespace/addons"), "{text}");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.workloads[0].client().expect("client"));
    assert!(namespaces.get_opt("addons").await.expect("get").is_some(), "diff pruned");

    // Every Cluster: one cannot be looked at (no kubeconfig): exit 2, the others still shown.
    let out = common::stacksync(&["diff", "--config", &cfg]).await;
    assert_exit(&out, 2);
    let text = stdout(&out);
    assert!(text.contains(&format!("{NS}/nokube")) && text.contains("ERROR"), "{text}");
    assert!(text.contains("create ConfigMap/kube-system/extra"), "{text}");
}

/// Renders are memoised by what decides them: an unchanged resync runs helm zero times, and a
/// changed values input (a Cluster's control plane replicas) re-renders only that Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_resync_runs_helm_zero_times_and_a_values_change_only_its_cluster() {
    let (env, config) = cluster_stack_env(&["alpha", "beta"]).await;
    let ctx = stacksync::controller::Context::new(stacksync::config::Config::load(&config).expect("config")).expect("context");
    let pass = async || {
        let report = stacksync::targets::kubernetes::pass(ctx.clone(), 4).await;
        assert!(report.clusters.iter().all(|c| c.status.ready) && report.clusters.len() == 2, "{:?}", report.failures);
    };
    pass().await;
    let helm = ctx.helm().await.expect("helm");
    let cold = helm.runs();
    assert_eq!(cold, 3, "one ClusterClass render for the namespace, one addon render per Cluster");
    pass().await;
    assert_eq!(helm.runs(), cold, "an unchanged resync runs helm zero times");

    let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
        "metadata": {"name": "beta-cp", "namespace": NS}, "spec": {"replicas": 5}});
    env.mgmt.load_yaml(&kcp.to_string()).expect("kcp");
    pass().await;
    assert_eq!(helm.runs(), cold + 1, "only beta's addons are rendered again");
    let replicas = async |i: usize| {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(env.workloads[i].client().expect("client"), "kube-system");
        api.get("metrics-server").await.expect("metrics-server").spec.replicas
    };
    assert_eq!((replicas(0).await, replicas(1).await), (Some(3), Some(5)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_runs_helm_zero_times_for_what_it_rendered_before() {
    let (env, config) = cluster_stack_env(&["alpha", "beta"]).await;
    let pass = async |ctx: &std::sync::Arc<stacksync::controller::Context>| {
        let report = stacksync::targets::kubernetes::pass(ctx.clone(), 4).await;
        assert!(report.clusters.iter().all(|c| c.status.ready) && report.clusters.len() == 2, "{:?}", report.failures);
        ctx.helm().await.expect("helm").runs()
    };
    let load = || stacksync::controller::Context::new(stacksync::config::Config::load(&config).expect("config")).expect("context");
    assert_eq!(pass(&load()).await, 3, "one ClusterClass render for the namespace, one addon render per Cluster");
    // A new process: its own work directory and an empty memory memo, the same cache volume.
    assert_eq!(pass(&load()).await, 0, "the renders on the cache volume answer");

    // A values change renders that Cluster again, and only it.
    let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
        "metadata": {"name": "beta-cp", "namespace": NS}, "spec": {"replicas": 5}});
    env.mgmt.load_yaml(&kcp.to_string()).expect("kcp");
    assert_eq!(pass(&load()).await, 1, "only beta's addons are rendered again");

    // A damaged render on disk is a miss, rendered again (and healed).
    let cache = env.dir.path().join("cache").join(stacksync::controller::RENDERS_DIR);
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&cache)
        .expect("renders kept")
        .flatten()
        .flat_map(|g| std::fs::read_dir(g.path()).expect("group").flatten().map(|f| f.path()))
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    for f in &files {
        std::fs::write(f, "# sha256:00\nkind: Broken\n").expect("damage");
    }
    assert_eq!(pass(&load()).await, 3, "damaged renders are rendered again");
    assert_eq!(pass(&load()).await, 0);
}
