//! `stacksync adopt cso` on the real servers: a management cluster where the SovereignCloudStack
//! cluster-stack-operator (CSO) is imitated exactly — its ClusterClass and addons rendered by the
//! real helm, labelled as CSO labels them (objects and pod templates), applied by the real
//! `kubectl apply --server-side --force-conflicts --field-manager=kubectl`; its CRDs and its
//! `ClusterStack` / `ClusterStackRelease` / `ClusterAddon` objects as it writes them, status
//! included; a Deployment, an ExtensionConfig and a validating webhook standing in for its
//! manager — moves to stacksync with no pod restarted and nothing deleted, and the next release
//! is stacksync's: held by its `BeforeClusterUpgrade`, pruning what the release dropped.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::capi::{CapiTenant, K1, K2, STEP, V1, V2, applied, hook_calls, ready, v2_ungated};
use common::{stderr, stdout};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const CSO_LABEL: &str = "clusterstack.x-k8s.io/instance";

/// A pod template annotation the chart generates at render time (as a checksum of a generated
/// Secret is), and an env var the next release drops.
fn metrics_server(text: String, env: &[&str]) -> String {
    let text = text.replace(
        "    metadata:\n      labels:\n        app: metrics-server\n",
        "    metadata:\n      annotations:\n        checksum/token: {{ randAlphaNum 16 | sha256sum | quote }}\n      labels:\n        app: metrics-server\n",
    );
    let vars: String = env.iter().map(|e| format!("            - name: {e}\n              value: \"1\"\n")).collect();
    format!("{text}          env:\n{vars}")
}

/// A Secret the chart generates at render time, and a ConfigMap the next release drops.
const GENERATED_SECRET: &str = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: {{ .Values.addonNamespace }}\nstringData:\n  token: {{ randAlphaNum 24 | quote }}\n";
/// The CNI as a DaemonSet (its ControllerRevisions would tell a restart).
const CNI_AGENT: &str = "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: cni-agent\n  namespace: {{ .Values.addonNamespace }}\nspec:\n  selector:\n    matchLabels:\n      app: cni-agent\n  template:\n    metadata:\n      labels:\n        app: cni-agent\n    spec:\n      containers:\n        - name: agent\n          image: registry.k8s.io/pause:3.10\n";
const LEGACY: &str =
    "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: legacy\n  namespace: {{ .Values.addonNamespace }}\ndata:\n  a: \"1\"\n";

fn v1_with_more(path: &str, text: String) -> String {
    if path.ends_with("metrics-server/templates/deployment.yaml") {
        return metrics_server(text, &["KEEP", "DROPPED"]);
    }
    if path.ends_with("cni/templates/cni.yaml") {
        return format!("{text}{GENERATED_SECRET}{CNI_AGENT}{LEGACY}");
    }
    text
}

/// V2 without the gate, without `DROPPED` and `legacy`.
fn v2_with_less(path: &str, text: String) -> String {
    let text = v2_ungated(path, text);
    if path.ends_with("metrics-server/templates/deployment.yaml") {
        return metrics_server(text, &["KEEP"]);
    }
    if path.ends_with("cni/templates/cni.yaml") {
        return format!("{text}{GENERATED_SECRET}{CNI_AGENT}");
    }
    text
}

/// `helm template` as CSO runs it.
fn helm_template(args: &[&str]) -> String {
    let out = std::process::Command::new(common::helm_path()).arg("template").args(args).output().expect("helm");
    assert!(out.status.success(), "helm template {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// CSO's labels on every document and on the pod templates of its workloads, as JSON documents.
fn cso_labelled(yaml: &str) -> String {
    let mut out = String::new();
    for doc in yaml.split("\n---") {
        let Ok(mut v) = serde_saphyr::from_str::<Value>(doc) else { continue };
        if !v.is_object() {
            continue;
        }
        v["metadata"]["labels"][CSO_LABEL] = json!("owned");
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        if ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"].contains(&kind.as_str()) {
            v["spec"]["template"]["metadata"]["labels"][CSO_LABEL] = json!("owned");
        }
        out.push_str(&format!("---\n{v}\n"));
    }
    out
}

/// The real `kubectl apply --server-side --force-conflicts --field-manager=kubectl`, as CSO applies.
fn cso_apply(kubeconfig: &Path, namespace: &str, docs: &str) {
    use std::io::Write;
    let kubectl = common::tool("kubectl").expect("kubectl (scripts/install-tools.sh)");
    let mut child = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "--server-side", "--force-conflicts", "--field-manager=kubectl", "-n", namespace, "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    child.stdin.take().expect("stdin").write_all(docs.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("kubectl");
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
}

async fn apply(client: &kube::Client, namespace: Option<&str>, res: kube::api::ApiResource, body: Value) {
    let name = body["metadata"]["name"].as_str().expect("name").to_owned();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &res),
        None => Api::all_with(client.clone(), &res),
    };
    let obj: DynamicObject = serde_json::from_value(body.clone()).expect("object");
    api.patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(&obj)).await.unwrap_or_else(|e| panic!("apply {name}: {e}"));
    if let Some(status) = body.get("status") {
        let patch = json!({"status": status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_or_else(|e| panic!("status of {name}: {e}"));
    }
}

/// DELETE requests the workload API server answered since it started (`apiserver_request_total`).
async fn deletes(client: &kube::Client) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("request");
    let text = client.request_text(request).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("verb=\"DELETE\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"].as_array().into_iter().flatten().filter_map(|m| m["manager"].as_str().map(str::to_owned)).collect()
}

fn cso_res(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk("clusterstack.x-k8s.io", "v1alpha1", kind), plural)
}

fn res(group: &str, version: &str, kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(group, version, kind), plural)
}

fn record(group: &str, version: &str, kind: &str, ns: &str, name: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind, "namespace": ns, "name": name, "status": "synced"})
}

/// CSO installed, as it runs: its CRDs, a ClusterStack and its release with the ClusterClass it
/// applied, its manager, its ExtensionConfig and its validating webhook (named `cso_name`: other
/// tests share the servers). The release's files are written under `release`.
async fn install_cso(t: &CapiTenant, release: &Path, cso_name: &str) {
    let (mgmt_kubeconfig, _) = t.kubeconfigs();
    let mgmt = t.client();
    std::fs::create_dir_all(release).expect("dir");
    for (path, text) in common::fleet::fixture_files(V1) {
        let file = release.join(&path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("dir");
        std::fs::write(&file, v1_with_more(&path, text)).expect("write");
    }
    let class_chart = release.join("testkit-ferrol-1-35-cluster-class-v1");
    let class = helm_template(&["testkit-ferrol-1-35", &class_chart.to_string_lossy(), "--namespace", &t.ns]);
    cso_apply(&mgmt_kubeconfig, &t.ns, &cso_labelled(&class));
    let crds = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/cso/crds.yaml")).expect("CRDs");
    cso_apply(&mgmt_kubeconfig, &t.ns, &crds);
    let served = async || {
        let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), &t.ns, &cso_res("ClusterAddon", "clusteraddons"));
        api.list(&ListParams::default()).await.is_ok()
    };
    common::daemon::eventually("CSO's CRDs served", STEP, served, String::new).await;
    apply(&mgmt, Some(&t.ns), cso_res("ClusterStack", "clusterstacks"), json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterStack",
        "metadata": {"name": "testkit-ferrol-1-35", "namespace": t.ns},
        "spec": {"provider": "testkit", "name": "ferrol", "kubernetesVersion": "1.35", "channel": "stable", "versions": ["v1"], "autoSubscribe": false, "noProvider": true},
        "status": {"latestRelease": "testkit-ferrol-1-35-v1 | v1.35.0", "usableVersions": "v1"},
    }))
    .await;
    apply(&mgmt, Some(&t.ns), cso_res("ClusterStackRelease", "clusterstackreleases"), json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterStackRelease",
        "metadata": {"name": V1, "namespace": t.ns, "finalizers": ["clusterstackrelease.clusterstack.x-k8s.io"]},
        "spec": {},
        "status": {"ready": true, "kubernetesVersion": K1, "resources": [record("cluster.x-k8s.io", "v1beta2", "ClusterClass", &t.ns, V1)]},
    }))
    .await;
    let deployments: Api<Deployment> = Api::namespaced(mgmt.clone(), &t.ns);
    let manager = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cso-controller-manager", "namespace": t.ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"control-plane": "cso"}},
                 "template": {"metadata": {"labels": {"control-plane": "cso"}}, "spec": {"containers": [{"name": "manager", "image": "cso:test"}]}}}});
    deployments.create(&PostParams::default(), &serde_json::from_value(manager).expect("Deployment")).await.expect("CSO's Deployment");
    apply(&mgmt, None, res("runtime.cluster.x-k8s.io", "v1beta2", "ExtensionConfig", "extensionconfigs"), json!({
        "apiVersion": "runtime.cluster.x-k8s.io/v1beta2", "kind": "ExtensionConfig", "metadata": {"name": cso_name},
        "spec": {"clientConfig": {"url": "https://127.0.0.1:1/"}, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}}},
    }))
    .await;
    apply(&mgmt, None, res("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": cso_name},
        "webhooks": [{"name": "validation.clusterstack.clusterstack.x-k8s.io", "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}},
            "rules": [{"apiGroups": ["clusterstack.x-k8s.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"], "resources": ["clusterstacks"]}]}],
    }))
    .await;
}

/// A Cluster of CSO's: up on V1 through Cluster API, its addons applied stage by stage with the
/// values CSO templates for it, one object left from an older release, and its ClusterAddon.
async fn cso_cluster(t: &CapiTenant, release: &Path, name: &str) {
    let (_, workload_kubeconfig) = t.kubeconfigs();
    t.add_cluster(name, V1, K1, json!({})).await;
    let up = async || t.control_plane(name).await.is_some_and(|cp| common::capi::condition(&cp, "Available").0 == "True");
    common::daemon::eventually(&format!("{name}'s control plane Available"), STEP, up, || t.manager_log()).await;
    let addon_ns = t.addon_namespace(name);
    let values = t.dir.path().join(format!("values-{name}.yaml"));
    std::fs::write(&values, format!("clusterName: {name}\naddonNamespace: {addon_ns}\npodCidr: \"10.1.0.0/16\"\n")).expect("values");
    for stage in ["cni", "metrics-server"] {
        let chart = release.join("testkit-ferrol-1-35-cluster-addon-v1").join(stage);
        let text = helm_template(&[
            "--include-crds",
            "cluster-addon",
            &chart.to_string_lossy(),
            "--namespace",
            "kube-system",
            "-f",
            &values.to_string_lossy(),
        ]);
        cso_apply(&workload_kubeconfig, &addon_ns, &cso_labelled(&text));
    }
    let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cso-old", "namespace": addon_ns, "labels": {CSO_LABEL: "owned"}}, "data": {"x": "1"}});
    cso_apply(&workload_kubeconfig, &addon_ns, &old.to_string());
    let cluster = t.cluster(name).await;
    let resources = vec![
        record("", "v1", "Namespace", "", &addon_ns),
        record("", "v1", "ConfigMap", &addon_ns, "cni-config"),
        record("", "v1", "Secret", &addon_ns, "token"),
        record("", "v1", "ConfigMap", &addon_ns, "legacy"),
        record("apps", "v1", "Deployment", &addon_ns, "metrics-server"),
        record("apps", "v1", "DaemonSet", &addon_ns, "cni-agent"),
        record("", "v1", "ConfigMap", &addon_ns, "cso-old"),
    ];
    let cluster_ref = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": name, "namespace": t.ns, "uid": cluster["metadata"]["uid"]});
    apply(&t.client(), Some(&t.ns), cso_res("ClusterAddon", "clusteraddons"), json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterAddon",
        "metadata": {"name": format!("cluster-addon-{name}"), "namespace": t.ns, "finalizers": ["clusteraddon.clusterstack.x-k8s.io"],
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": name, "uid": cluster["metadata"]["uid"]}]},
        "spec": {"clusterStack": V1, "version": "v1", "hook": "", "clusterRef": cluster_ref},
        "status": {"ready": true, "resources": resources, "stages": []},
    }))
    .await;
}

/// What must not move in a Cluster's workload cluster: metrics-server's and the CNI agent's
/// generation and pod template, the ReplicaSets and ControllerRevisions, the generated Secret.
#[derive(Debug, PartialEq)]
struct Still {
    generation: Option<i64>,
    template: Value,
    replica_sets: usize,
    agent_generation: Option<i64>,
    agent_template: Value,
    revisions: usize,
    token: Option<String>,
}

async fn still(t: &CapiTenant, name: &str) -> Still {
    let ns = t.addon_namespace(name);
    let d = Api::<Deployment>::namespaced(t.workload(), &ns).get("metrics-server").await.expect("metrics-server");
    let sets = Api::<ReplicaSet>::namespaced(t.workload(), &ns).list(&ListParams::default()).await.expect("ReplicaSets").items.len();
    let secret = Api::<Secret>::namespaced(t.workload(), &ns).get("token").await.expect("token");
    let token = secret.data.and_then(|d| d.get("token").map(|v| String::from_utf8_lossy(&v.0).into_owned()));
    let agent = Api::<DaemonSet>::namespaced(t.workload(), &ns).get("cni-agent").await.expect("cni-agent");
    let revisions = Api::<ControllerRevision>::namespaced(t.workload(), &ns)
        .list(&ListParams::default())
        .await
        .expect("ControllerRevisions")
        .items
        .len();
    Still {
        generation: d.metadata.generation,
        template: serde_json::to_value(&d.spec.template).expect("json"),
        replica_sets: sets,
        agent_generation: agent.metadata.generation,
        agent_template: serde_json::to_value(&agent.spec.template).expect("json"),
        revisions,
        token,
    }
}

async fn managers_of(client: &kube::Client, ns: &str, r: kube::api::ApiResource, name: &str) -> Vec<String> {
    let api: Api<DynamicObject> =
        if ns.is_empty() { Api::all_with(client.clone(), &r) } else { Api::namespaced_with(client.clone(), ns, &r) };
    managers(&serde_json::to_value(api.get(name).await.expect("get")).expect("json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_the_scs_operator_is_adopted_with_no_restart_and_its_next_release_is_stacksyncs() {
    let Some(t) = CapiTenant::new("adoptcso").await else { return };
    let (mgmt, workload) = (t.client(), t.workload());
    let cso_name = format!("cso-{}", t.ns);
    let release = t.dir.path().join("v1");
    t.publish(V1, v1_with_more);
    install_cso(&t, &release, &cso_name).await;
    cso_cluster(&t, &release, "c1").await;
    cso_cluster(&t, &release, "c2").await;
    // CSO's record of a Cluster deleted while CSO was down (its finalizer kept it).
    apply(&mgmt, Some(&t.ns), cso_res("ClusterAddon", "clusteraddons"), json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterAddon",
        "metadata": {"name": "cluster-addon-c3", "namespace": t.ns, "finalizers": ["clusteraddon.clusterstack.x-k8s.io"]},
        "spec": {"clusterStack": V1, "clusterRef": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c3", "namespace": t.ns}},
        "status": {"ready": true, "resources": []},
    }))
    .await;
    // The workload controllers done with what CSO applied (a ReplicaSet, a ControllerRevision):
    // from here on nothing may move.
    for c in ["c1", "c2"] {
        let settled = async || {
            let s = still(&t, c).await;
            s.replica_sets == 1 && s.revisions == 1
        };
        common::daemon::eventually(&format!("{c}'s workloads settled"), STEP, settled, String::new).await;
    }
    let before = [still(&t, "c1").await, still(&t, "c2").await];
    let cp_generation = t.control_plane("c2").await.expect("control plane")["metadata"]["generation"].clone();

    // stacksync deployed with its subscription suspended (it writes nothing; CSO still holds
    // upgrades) and CSO's label adopted; its hooks discovered by Cluster API.
    let config = |suspend: bool| {
        t.config(|s| {
            s.set("suspend", suspend)
                .set("adoptedLabels", json!({CSO_LABEL: "owned"}))
                .set("availableReleases", 2)
                .set("stageTimeout", "10m")
        })
    };
    let file = config(true).write();
    let daemon = t.start(&file, &[]).await;
    let run = async |extra: &[&str]| {
        let mut args: Vec<String> = ["adopt", "cso", "--config"].map(String::from).to_vec();
        args.push(file.to_string_lossy().into_owned());
        args.extend(["--cso-deployment".into(), format!("{}/cso-controller-manager", t.ns)]);
        args.extend(["--cso-extension-config".into(), cso_name.clone(), "--cso-webhook".into(), cso_name.clone()]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        common::stacksync(&refs).await
    };

    // A Cluster with an upgrade in flight is refused, naming it.
    let addons: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), &t.ns, &cso_res("ClusterAddon", "clusteraddons"));
    let hook = |h: &str| Patch::Merge(json!({"spec": {"hook": h}}));
    addons.patch("cluster-addon-c1", &PatchParams::default(), &hook("BeforeClusterUpgrade")).await.expect("hook");
    let refused = run(&["--dry-run"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}{}", stdout(&refused), stderr(&refused));
    let expected = format!("ClusterAddon {}/cluster-addon-c1 runs the BeforeClusterUpgrade hook: an upgrade is in flight", t.ns);
    assert!(stdout(&refused).contains(&expected), "{}", stdout(&refused));
    addons.patch("cluster-addon-c1", &PatchParams::default(), &hook("")).await.expect("hook");

    // Without CSO's label adopted, every pod template would lose it: refused, the restart named.
    let unadopted = t.config(|s| s.set("suspend", true).set("availableReleases", 2)).at(&t.dir.path().join("unadopted.yaml")).write();
    let mut args: Vec<String> = ["adopt", "cso", "--dry-run", "--config"].map(String::from).to_vec();
    args.push(unadopted.to_string_lossy().into_owned());
    args.extend(["--cso-deployment".into(), format!("{}/cso-controller-manager", t.ns), "--cso-extension-config".into(), cso_name.clone()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let restarts = common::stacksync(&refs).await;
    let text = stdout(&restarts);
    assert_eq!(restarts.status.code(), Some(1), "{text}{}", stderr(&restarts));
    let ns1 = t.addon_namespace("c1");
    let line = text.lines().find(|l| l.starts_with(&format!("  restarts   Deployment/{ns1}/metrics-server: "))).unwrap_or_default();
    assert!(line.contains(".spec.template.metadata.labels.clusterstack.x-k8s.io/instance (removed)"), "{text}");
    assert!(text.contains("has no adoptedLabels {clusterstack.x-k8s.io/instance: owned}"), "{text}");

    // The report: every object identical (the generated values kept), the leftovers, the
    // hand-over; nothing changed by it.
    let started = std::time::Instant::now();
    let report = run(&["--dry-run"]).await;
    let text = stdout(&report);
    println!("{text}the report took {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(report.status.code(), Some(0), "{text}{}", stderr(&report));
    for c in ["c1", "c2"] {
        let ns = t.addon_namespace(c);
        assert!(text.contains(&format!("identical  Deployment/{ns}/metrics-server (generated at render time, the live values kept: /spec/template/metadata/annotations/checksum~1token)")), "{text}");
        assert!(
            text.contains(&format!("identical  Secret/{ns}/token (generated at render time, the live values kept: /stringData/token)")),
            "{text}"
        );
        assert!(text.contains(&format!("leftover   ConfigMap/{ns}/cso-old")), "{text}");
    }
    assert!(!text.contains("restarts "), "{text}");
    assert!(text.contains(&format!("Cluster {}/c3 (ClusterAddon cluster-addon-c3, release {V1})\n  gone  ", t.ns)), "{text}");
    assert!(text.contains(&format!("hand-over  scale CSO's Deployment {}/cso-controller-manager to 0", t.ns)), "{text}");
    assert!(text.contains(&format!("hand-over  delete CSO's ExtensionConfig {cso_name}")), "{text}");
    assert!(text.contains(&format!("ClusterClasses of {V1} in namespace {}", t.ns)), "{text}");
    assert!(
        text.contains("2 Clusters and the ClusterClasses of 1 release(s): 15 objects identical, 0 with changes, 0 restarting pods"),
        "{text}"
    );
    // The same as JSON, for a pipeline to read.
    let json = run(&["--dry-run", "-o", "json"]).await;
    assert_eq!(json.status.code(), Some(0), "{}{}", stdout(&json), stderr(&json));
    let report: Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(report["adoptable"], true, "{report}");
    let c1 = report["clusters"].as_array().and_then(|c| c.iter().find(|c| c["cluster"] == format!("{}/c1", t.ns))).expect("c1");
    let objects = c1["adoption"]["objects"].as_array().expect("objects");
    assert_eq!(objects.len(), 6, "{c1}");
    assert!(objects.iter().all(|o| o["verdict"] == "identical" && o["held"] == true), "{c1}");
    assert_eq!(c1["leftovers"], json!([format!("ConfigMap/{}/cso-old", t.addon_namespace("c1"))]), "{c1}");

    let ms = managers_of(&workload, &t.addon_namespace("c1"), res("apps", "v1", "Deployment", "deployments"), "metrics-server").await;
    assert!(ms.contains(&"kubectl".to_owned()), "the dry run changed nothing: {ms:?}");

    // The adoption: no DELETE, nothing restarted, every object stacksync's alone.
    let deletes_before = deletes(&workload).await;
    let started = std::time::Instant::now();
    let adopted = run(&["--prune-leftovers"]).await;
    let text = stdout(&adopted);
    println!("{text}the adoption took {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(adopted.status.code(), Some(0), "{text}{}", stderr(&adopted));
    assert_eq!(deletes(&workload).await, deletes_before, "no DELETE in the workload cluster during adoption");
    assert_eq!([still(&t, "c1").await, still(&t, "c2").await], before, "nothing moved in the workload clusters");
    for c in ["c1", "c2"] {
        let ns = t.addon_namespace(c);
        for (r, name) in [
            (res("apps", "v1", "Deployment", "deployments"), "metrics-server"),
            (res("", "v1", "ConfigMap", "configmaps"), "cni-config"),
            (res("", "v1", "ConfigMap", "configmaps"), "legacy"),
            (res("", "v1", "Secret", "secrets"), "token"),
        ] {
            let m = managers_of(&workload, &ns, r, name).await;
            assert!(!m.contains(&"kubectl".to_owned()) && m.contains(&"stacksync".to_owned()), "{c} {name}: {m:?}");
        }
        let cs = t.cluster_sync(c).await;
        assert_eq!(applied(&cs), V1, "{c}'s ClusterSync seeded with CSO's release: {cs}");
        assert_eq!(cs["status"]["generated"].as_array().map(Vec::len), Some(2), "{c}'s generated fields recorded: {cs}");
    }
    let cc = managers_of(&mgmt, &t.ns, res("cluster.x-k8s.io", "v1beta2", "ClusterClass", "clusterclasses"), V1).await;
    assert!(!cc.contains(&"kubectl".to_owned()), "ClusterClass: {cc:?}");
    assert_eq!(
        t.control_plane("c2").await.expect("control plane")["metadata"]["generation"],
        cp_generation,
        "the control plane's generation"
    );
    let deployments: Api<Deployment> = Api::namespaced(mgmt.clone(), &t.ns);
    assert_eq!(deployments.get("cso-controller-manager").await.expect("CSO").spec.replicas, Some(0), "CSO scaled to 0");

    // Between the hand-over and the resume, an upgrade is held by stacksync (CSO no longer
    // holds it; the subscription is still suspended). The next release's ClusterClass is there
    // (CSO applied it while it ran).
    t.publish(V2, v2_with_less);
    let release2 = t.dir.path().join("v2");
    for (path, text) in common::fleet::fixture_files(V2) {
        let file = release2.join(&path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("dir");
        std::fs::write(&file, v2_with_less(&path, text)).expect("write");
    }
    let class_chart = release2.join("testkit-ferrol-1-35-cluster-class-v2");
    let class = helm_template(&["testkit-ferrol-1-35", &class_chart.to_string_lossy(), "--namespace", &t.ns]);
    cso_apply(&t.kubeconfigs().0, &t.ns, &cso_labelled(&class));
    t.class_reconciled(&daemon, V2).await;
    t.move_cluster("c1", V2, K2).await;
    let key = format!("{}/c1", t.ns);
    t.eventually(&daemon, "c1's upgrade held by stacksync while suspended", STEP, async || {
        hook_calls(&daemon, "BeforeClusterUpgrade", &key) >= 2
    })
    .await;
    assert_eq!(t.control_plane("c1").await.expect("control plane")["spec"]["version"], K1, "held");
    assert!(daemon.log().contains("was adopted by stacksync and subscription"), "{}", common::daemon::tail(&daemon.log(), 30));

    // Resumed: c2 synced with nothing moved and its leftover pruned; c1 upgraded by stacksync,
    // what V2 dropped gone, its generated values still the live ones.
    config(false).write();
    t.eventually(&daemon, "c2 Ready on V1 under stacksync", STEP, async || {
        let cs = t.cluster_sync("c2").await;
        applied(&cs) == V1 && ready(&cs)
    })
    .await;
    let cms2: Api<ConfigMap> = Api::namespaced(workload.clone(), &t.addon_namespace("c2"));
    t.eventually(&daemon, "c2's leftover pruned", STEP, async || cms2.get_opt("cso-old").await.is_ok_and(|c| c.is_none())).await;
    assert_eq!(still(&t, "c2").await, before[1], "the first sync moved nothing");
    assert_ne!(
        t.cluster_sync("c2").await["status"]["upgrade"]["hook"],
        "AfterControlPlaneInitialized",
        "no install stages for an adopted Cluster"
    );
    t.eventually(&daemon, "c1 on V2", STEP, async || {
        let cs = t.cluster_sync("c1").await;
        applied(&cs) == V2 && ready(&cs)
    })
    .await;
    let ns1 = t.addon_namespace("c1");
    let ms = Api::<Deployment>::namespaced(workload.clone(), &ns1).get("metrics-server").await.expect("metrics-server");
    let env: Vec<String> = ms
        .spec
        .template
        .spec
        .map(|p| p.containers[0].env.clone().unwrap_or_default().into_iter().map(|e| e.name).collect())
        .unwrap_or_default();
    assert_eq!(env, ["KEEP"], "the env var V2 dropped is gone");
    let cms1: Api<ConfigMap> = Api::namespaced(workload.clone(), &ns1);
    assert!(cms1.get_opt("legacy").await.expect("get").is_none(), "the ConfigMap V2 dropped is pruned");
    assert!(cms1.get_opt("cso-old").await.expect("get").is_none(), "the leftover is pruned");
    assert_eq!(still(&t, "c1").await.token, before[0].token, "the generated Secret kept through the upgrade");

    // The clean-up: CSO's finalizers, objects, CRDs and Deployment.
    let cleaned = run(&["--cleanup"]).await;
    let text = stdout(&cleaned);
    println!("{text}");
    assert_eq!(cleaned.status.code(), Some(0), "{text}{}", stderr(&cleaned));
    assert!(text.contains(&format!("removed CSO's finalizer from ClusterAddon {}/cluster-addon-c1", t.ns)), "{text}");
    assert!(text.contains(&format!("deleted ClusterAddon {}/cluster-addon-c3", t.ns)), "{text}");
    assert!(text.contains("deleted CustomResourceDefinition clusteraddons.clusterstack.x-k8s.io"), "{text}");
    // A CRD goes once the API server has finished with it: asynchronously.
    let gone = async || addons.list(&ListParams::default()).await.is_err();
    common::daemon::eventually("CSO's kinds no longer served", STEP, gone, String::new).await;
    daemon.stop().await;
    t.delete().await;
}
