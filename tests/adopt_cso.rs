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
use common::{stdout, stderr};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const CSO_LABEL: &str = "clusterstack.x-k8s.io/instance";

/// V1 with an env var the next release drops, and a ConfigMap it drops.
fn v1_with_more(path: &str, text: String) -> String {
    if path.ends_with("metrics-server/templates/deployment.yaml") {
        return format!("{text}          env:\n            - name: KEEP\n              value: \"1\"\n            - name: DROPPED\n              value: \"1\"\n");
    }
    if path.ends_with("cni/templates/cni.yaml") {
        return format!(
            "{text}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: legacy\n  namespace: {{{{ .Values.addonNamespace }}}}\ndata:\n  a: \"1\"\n"
        );
    }
    text
}

/// V2 without the gate, keeping only `KEEP`.
fn v2_with_less(path: &str, text: String) -> String {
    let text = v2_ungated(path, text);
    if path.ends_with("metrics-server/templates/deployment.yaml") {
        return format!("{text}          env:\n            - name: KEEP\n              value: \"1\"\n");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_the_scs_operator_is_adopted_with_no_restart_and_its_next_release_is_stacksyncs() {
    let Some(t) = CapiTenant::new("adoptcso").await else { return };
    let (mgmt_kubeconfig, workload_kubeconfig) = t.kubeconfigs();
    let (mgmt, workload) = (t.client(), t.workload());
    t.publish(V1, v1_with_more);
    let release = t.dir.path().join("v1");
    std::fs::create_dir_all(&release).expect("dir");
    for (path, text) in common::fleet::fixture_files(V1) {
        let file = release.join(&path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("dir");
        std::fs::write(&file, v1_with_more(&path, text)).expect("write");
    }

    // CSO, imitated: its ClusterClass in the management cluster…
    let class_chart = release.join("testkit-ferrol-1-35-cluster-class-v1");
    let class = helm_template(&["testkit-ferrol-1-35", &class_chart.to_string_lossy(), "--namespace", &t.ns]);
    cso_apply(&mgmt_kubeconfig, &t.ns, &cso_labelled(&class));
    // …a Cluster on it, brought up by Cluster API…
    t.add_cluster("c1", V1, K1, json!({})).await;
    let cp_up = async || t.control_plane("c1").await.is_some_and(|cp| common::capi::condition(&cp, "Available").0 == "True");
    common::daemon::eventually("c1's control plane Available", STEP, cp_up, || t.manager_log()).await;
    // …its addons in the workload cluster, stage by stage (the values CSO templates for c1)…
    let addon_ns = t.addon_namespace("c1");
    let values = t.dir.path().join("values.yaml");
    std::fs::write(&values, format!("clusterName: c1\naddonNamespace: {addon_ns}\npodCidr: \"10.1.0.0/16\"\n")).expect("values");
    for stage in ["cni", "metrics-server"] {
        let chart = release.join("testkit-ferrol-1-35-cluster-addon-v1").join(stage);
        let text = helm_template(&["--include-crds", "cluster-addon", &chart.to_string_lossy(), "--namespace", "kube-system", "-f", &values.to_string_lossy()]);
        cso_apply(&workload_kubeconfig, &addon_ns, &cso_labelled(&text));
    }
    // …and one it applied for an older release, which this one no longer has.
    let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cso-old", "namespace": addon_ns, "labels": {CSO_LABEL: "owned"}}, "data": {"x": "1"}});
    cso_apply(&workload_kubeconfig, &addon_ns, &old.to_string());

    // CSO's own objects, as it writes them.
    let crds = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/cso/crds.yaml")).expect("CRDs");
    cso_apply(&mgmt_kubeconfig, &t.ns, &crds);
    let res = |kind: &str, plural: &str| {
        kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk("clusterstack.x-k8s.io", "v1alpha1", kind), plural)
    };
    common::daemon::eventually("CSO's CRDs served", STEP, async || {
        let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), &t.ns, &res("ClusterAddon", "clusteraddons"));
        api.list(&ListParams::default()).await.is_ok()
    }, || String::new()).await;
    let cluster = t.cluster("c1").await;
    let record = |group: &str, version: &str, kind: &str, ns: &str, name: &str| {
        json!({"group": group, "version": version, "kind": kind, "namespace": ns, "name": name, "status": "synced"})
    };
    apply(&mgmt, Some(&t.ns), res("ClusterStack", "clusterstacks"), json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterStack",
        "metadata": {"name": "testkit-ferrol-1-35", "namespace": t.ns},
        "spec": {"provider": "testkit", "name": "ferrol", "kubernetesVersion": "1.35", "channel": "stable", "versions": ["v1"], "autoSubscribe": false, "noProvider": true},
        "status": {"latestRelease": "testkit-ferrol-1-35-v1 | v1.35.0", "usableVersions": "v1"},
    })).await;
    apply(&mgmt, Some(&t.ns), res("ClusterStackRelease", "clusterstackreleases"), json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterStackRelease",
        "metadata": {"name": V1, "namespace": t.ns, "finalizers": ["clusterstackrelease.clusterstack.x-k8s.io"]},
        "spec": {},
        "status": {"ready": true, "kubernetesVersion": K1, "resources": [record("cluster.x-k8s.io", "v1beta2", "ClusterClass", &t.ns, V1)]},
    })).await;
    let resources = vec![
        record("", "v1", "ConfigMap", &addon_ns, "cni-config"),
        record("", "v1", "ConfigMap", &addon_ns, "legacy"),
        record("apps", "v1", "Deployment", &addon_ns, "metrics-server"),
        record("", "v1", "ConfigMap", &addon_ns, "cso-old"),
    ];
    let addon = json!({
        "apiVersion": "clusterstack.x-k8s.io/v1alpha1", "kind": "ClusterAddon",
        "metadata": {"name": "cluster-addon-c1", "namespace": t.ns, "finalizers": ["clusteraddon.clusterstack.x-k8s.io"],
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": cluster["metadata"]["uid"]}]},
        "spec": {"clusterStack": V1, "version": "v1", "hook": "", "clusterRef": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "namespace": t.ns, "uid": cluster["metadata"]["uid"]}},
        "status": {"ready": true, "resources": resources, "stages": []},
    });
    apply(&mgmt, Some(&t.ns), res("ClusterAddon", "clusteraddons"), addon.clone()).await;
    // CSO's manager, hook and webhook (named for this test: other tests share the servers).
    let cso_name = format!("cso-{}", t.ns);
    let deployments: Api<Deployment> = Api::namespaced(mgmt.clone(), &t.ns);
    let manager = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cso-controller-manager", "namespace": t.ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"control-plane": "cso"}},
                 "template": {"metadata": {"labels": {"control-plane": "cso"}}, "spec": {"containers": [{"name": "manager", "image": "cso:test"}]}}}});
    deployments.create(&PostParams::default(), &serde_json::from_value(manager).expect("Deployment")).await.expect("CSO's Deployment");
    apply(&mgmt, None, kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk("runtime.cluster.x-k8s.io", "v1beta2", "ExtensionConfig"), "extensionconfigs"), json!({
        "apiVersion": "runtime.cluster.x-k8s.io/v1beta2", "kind": "ExtensionConfig", "metadata": {"name": cso_name},
        "spec": {"clientConfig": {"url": "https://127.0.0.1:1/"}, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}}},
    })).await;
    apply(&mgmt, None, kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"), "validatingwebhookconfigurations"), json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": cso_name},
        "webhooks": [{"name": "validation.clusterstack.clusterstack.x-k8s.io", "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}},
            "rules": [{"apiGroups": ["clusterstack.x-k8s.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"], "resources": ["clusterstacks"]}]}],
    })).await;

    // What must not move.
    let workload_deployments: Api<Deployment> = Api::namespaced(workload.clone(), &addon_ns);
    let before = workload_deployments.get("metrics-server").await.expect("metrics-server");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(workload.clone(), &addon_ns);
    let sets_before = replica_sets.list(&ListParams::default()).await.expect("ReplicaSets").items.len();
    let cp_generation = t.control_plane("c1").await.expect("control plane")["metadata"]["generation"].clone();

    // stacksync deployed with its subscription suspended (writes nothing; CSO holds upgrades) and
    // CSO's label adopted; its hooks discovered by Cluster API.
    let config = |suspend: bool| {
        t.config(|s| s.set("suspend", suspend).set("adoptedLabels", json!({CSO_LABEL: "owned"})).set("availableReleases", 2).set("stageTimeout", "10m"))
    };
    let file = config(true).write();
    let daemon = t.start(&file, &[]).await;
    let cso_args = |extra: &[&str]| {
        let mut a: Vec<String> = vec!["adopt".into(), "cso".into(), "--config".into(), file.to_string_lossy().into_owned()];
        a.extend(["--cso-deployment".into(), format!("{}/cso-controller-manager", t.ns)]);
        a.extend(["--cso-extension-config".into(), cso_name.clone(), "--cso-webhook".into(), cso_name.clone()]);
        a.extend(["--cluster".into(), format!("{}/c1", t.ns)]);
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    let run = async |extra: &[&str]| {
        let args = cso_args(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        common::stacksync(&refs).await
    };

    // A Cluster with an upgrade in flight is refused, naming it.
    let addons: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), &t.ns, &res("ClusterAddon", "clusteraddons"));
    addons.patch("cluster-addon-c1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"hook": "BeforeClusterUpgrade"}}))).await.expect("hook");
    let refused = run(&["--dry-run"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}{}", stdout(&refused), stderr(&refused));
    assert!(stdout(&refused).contains("runs the BeforeClusterUpgrade hook: an upgrade is in flight"), "{}", stdout(&refused));
    addons.patch("cluster-addon-c1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"hook": ""}}))).await.expect("hook");

    // The report.
    let report = run(&["--dry-run"]).await;
    let text = stdout(&report);
    println!("{text}");
    assert_eq!(report.status.code(), Some(0), "{text}{}", stderr(&report));
    assert!(text.contains(&format!("identical  Deployment/{addon_ns}/metrics-server")), "{text}");
    assert!(!text.contains("restarts "), "{text}");
    assert!(text.contains(&format!("leftover   ConfigMap/{addon_ns}/cso-old")), "{text}");
    assert!(text.contains("hand-over  scale CSO's Deployment"), "{text}");
    assert!(text.contains(&format!("hand-over  delete CSO's ExtensionConfig {cso_name}")), "{text}");
    assert!(text.contains(&format!("ClusterClasses of {V1} in namespace {}", t.ns)), "{text}");
    let ms = serde_json::to_value(workload_deployments.get("metrics-server").await.expect("ms")).expect("json");
    assert!(managers(&ms).contains(&"kubectl".to_owned()), "the dry run changed nothing: {:?}", managers(&ms));

    // The adoption.
    let deletes_before = deletes(&workload).await;
    let adopted = run(&["--prune-leftovers"]).await;
    let text = stdout(&adopted);
    println!("{text}");
    assert_eq!(adopted.status.code(), Some(0), "{text}{}", stderr(&adopted));
    assert_eq!(deletes(&workload).await, deletes_before, "no DELETE in the workload cluster during adoption");
    let after = workload_deployments.get("metrics-server").await.expect("metrics-server");
    assert_eq!(after.metadata.generation, before.metadata.generation, "the Deployment's generation");
    assert_eq!(after.spec.template, before.spec.template, "the pod template");
    assert_eq!(replica_sets.list(&ListParams::default()).await.expect("ReplicaSets").items.len(), sets_before, "no new ReplicaSet");
    for name in ["metrics-server"] {
        let d = serde_json::to_value(workload_deployments.get(name).await.expect("get")).expect("json");
        assert!(!managers(&d).contains(&"kubectl".to_owned()), "{name}: {:?}", managers(&d));
    }
    let cms: Api<ConfigMap> = Api::namespaced(workload.clone(), &addon_ns);
    for name in ["cni-config", "legacy"] {
        let cm = serde_json::to_value(cms.get(name).await.expect("get")).expect("json");
        assert!(!managers(&cm).contains(&"kubectl".to_owned()), "{name}: {:?}", managers(&cm));
    }
    let classes = t.cluster_classes().await;
    let cc = classes.iter().find(|c| c["metadata"]["name"] == V1).expect("the ClusterClass");
    assert!(!managers(cc).contains(&"kubectl".to_owned()), "ClusterClass: {:?}", managers(cc));
    assert_eq!(t.control_plane("c1").await.expect("control plane")["metadata"]["generation"], cp_generation, "the control plane's generation");
    assert!(deployments.get("cso-controller-manager").await.expect("CSO").spec.replicas == Some(0), "CSO scaled to 0");
    assert_eq!(applied(&t.cluster_sync("c1").await), V1, "the ClusterSync seeded with CSO's release");

    // stacksync takes over: the subscription unsuspended, the Cluster synced with nothing moved,
    // the leftover pruned (it was opted in).
    config(false).write();
    t.eventually(&daemon, "c1 Ready on V1 under stacksync", STEP, async || {
        let cs = t.cluster_sync("c1").await;
        applied(&cs) == V1 && ready(&cs)
    })
    .await;
    t.eventually(&daemon, "the leftover pruned", STEP, async || cms.get_opt("cso-old").await.is_ok_and(|c| c.is_none())).await;
    let synced = workload_deployments.get("metrics-server").await.expect("metrics-server");
    assert_eq!(synced.metadata.generation, before.metadata.generation, "the first sync changed the Deployment's generation");
    assert_ne!(t.cluster_sync("c1").await["status"]["upgrade"]["hook"], "AfterControlPlaneInitialized", "no install stages for an adopted Cluster");

    // The next release is stacksync's: held by its BeforeClusterUpgrade, and what it drops goes.
    t.publish(V2, v2_with_less);
    t.class_reconciled(&daemon, V2).await;
    t.patch_cluster("c1", json!({"spec": {"topology": {"classRef": {"name": V2}, "version": K2}}})).await;
    let key = format!("{}/c1", t.ns);
    t.eventually(&daemon, "the upgrade asked of stacksync's BeforeClusterUpgrade", STEP, async || hook_calls(&daemon, "BeforeClusterUpgrade", &key) >= 1).await;
    t.eventually(&daemon, "c1 on V2", STEP, async || {
        let cs = t.cluster_sync("c1").await;
        applied(&cs) == V2 && ready(&cs)
    })
    .await;
    let ms = workload_deployments.get("metrics-server").await.expect("metrics-server");
    let env: Vec<String> =
        ms.spec.template.spec.map(|p| p.containers[0].env.clone().unwrap_or_default().into_iter().map(|e| e.name).collect()).unwrap_or_default();
    assert_eq!(env, ["KEEP"], "the env var V2 dropped is gone");
    assert!(cms.get_opt("legacy").await.expect("get").is_none(), "the ConfigMap V2 dropped is pruned");

    // The clean-up: CSO's finalizers, objects and CRDs… (the CRDs are shared: only this test's
    // objects are looked at).
    let cleaned = run(&["--cleanup"]).await;
    assert_eq!(cleaned.status.code(), Some(0), "{}{}", stdout(&cleaned), stderr(&cleaned));
    assert!(stdout(&cleaned).contains(&format!("removed CSO's finalizer from ClusterAddon {}/cluster-addon-c1", t.ns)), "{}", stdout(&cleaned));
    daemon.stop().await;
    t.delete().await;
}
