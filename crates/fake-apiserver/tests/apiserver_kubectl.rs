//! The real kubectl 1.35 against testkit's API server: what a real API server answers, kubectl
//! must accept. kubectl comes from scripts/install-tools.sh; without it these tests fail.
//!
//! The tests taking a [`TestCluster`] run against a real cluster instead when
//! `STACKSYNC_E2E_KUBECONFIG` names its kubeconfig (each in a fresh namespace, cleaned up);
//! assertions only the loopback server can answer (its counters) are skipped there.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::time::Duration;

use fake_apiserver::cluster::{LABEL, TestCluster};
use fake_apiserver::kubectl::{Kubectl, Output};
use fake_apiserver::{ApiServer, Options, Stats, capi_crds_dir};
use tokio::io::{AsyncBufReadExt, BufReader};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn cluster() -> TestCluster {
    TestCluster::start().await.unwrap_or_else(|e| panic!("{e}"))
}

async fn ok(kubectl: &Kubectl, args: &[&str], stdin: Option<&str>) -> Output {
    let out = kubectl.run(args, stdin).await.expect("kubectl runs");
    assert!(out.success, "kubectl {} failed:\nstdout: {}\nstderr: {}", args.join(" "), out.stdout, out.stderr);
    out
}

/// Waits until discovery lists the `widgets` of `group`: a real API server marks a CRD
/// Established a moment before its discovery document has the resource, and kubectl refreshes
/// its discovery only once on a miss.
async fn widgets_discovered(kubectl: &Kubectl, group: &str) {
    let listed = async {
        loop {
            let out = kubectl.run(&["api-resources", &format!("--api-group={group}"), "-o", "name"], None).await.expect("kubectl runs");
            if out.success && out.stdout.lines().any(|l| l == format!("widgets.{group}")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(TIMEOUT, listed).await.expect("the widgets resource in discovery");
}

async fn resource_version(kubectl: &Kubectl, object: &str) -> String {
    ok(kubectl, &["get", object, "-o", "jsonpath={.metadata.resourceVersion}"], None).await.stdout
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {app: web}
data:
  a: "1"
  b: "2"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
"#;

#[tokio::test]
async fn apply_server_side_creates_then_reapplies_unchanged_then_changes() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    let out = ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(MANIFEST)).await;
    assert!(out.stdout.contains("configmap/settings serverside-applied"), "{}", out.stdout);
    assert!(out.stdout.contains("deployment.apps/web serverside-applied"), "{}", out.stdout);
    let before = resource_version(kubectl, "cm/settings").await;
    if let Some(server) = cluster.local() {
        let created = server.stats();
        assert_eq!(Stats::count(&created.changes, "patch", "configmaps"), 1);
        assert_eq!(Stats::count(&created.changes, "patch", "deployments.apps"), 1);
        server.reset_stats();
    }

    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(MANIFEST)).await;
    assert_eq!(resource_version(kubectl, "cm/settings").await, before, "an identical re-apply changes nothing");
    if let Some(server) = cluster.local() {
        let unchanged = server.stats();
        assert_eq!(unchanged.total_writes(), 2, "kubectl re-sends both objects");
        assert_eq!(unchanged.total_changes(), 0, "{unchanged:?}");
    }

    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(&MANIFEST.replace("nginx:1.27", "nginx:1.28"))).await;
    let image =
        ok(kubectl, &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.metadata.generation}"], None)
            .await;
    assert_eq!(image.stdout, "nginx:1.28 2");
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn a_second_field_manager_conflicts_until_it_forces() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(MANIFEST)).await;
    let other = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: changed\n";

    let conflict = kubectl.run(&["apply", "--server-side", "--field-manager=beta", "-f", "-"], Some(other)).await.unwrap();
    assert!(!conflict.success);
    assert!(conflict.stderr.contains(r#"error: Apply failed with 1 conflict: conflict with "kubectl": .data.a"#), "{}", conflict.stderr);

    ok(kubectl, &["apply", "--server-side", "--field-manager=beta", "--force-conflicts", "-f", "-"], Some(other)).await;
    let out = ok(kubectl, &["get", "cm", "settings", "-o", "json", "--show-managed-fields"], None).await;
    let cm: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(cm["data"], serde_json::json!({"a": "changed", "b": "2"}));
    let managers = cm["metadata"]["managedFields"].as_array().unwrap();
    let owner = |name: &str| managers.iter().find(|m| m["manager"] == name).map(|m| m["fieldsV1"]["f:data"].clone());
    assert_eq!(owner("beta"), Some(serde_json::json!({"f:a": {}})));
    assert_eq!(owner("kubectl"), Some(serde_json::json!({"f:b": {}})), "the forced field left kubectl's set");
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn a_field_dropped_by_its_only_manager_disappears() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(MANIFEST)).await;
    let without_b = MANIFEST.replace("  b: \"2\"\n", "");
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(&without_b)).await;
    let data = ok(kubectl, &["get", "cm", "settings", "-o", "jsonpath={.data}"], None).await;
    assert_eq!(data.stdout, r#"{"a":"1"}"#);
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn dry_run_server_stores_nothing() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    if let Some(server) = cluster.local() {
        server.reset_stats();
    }
    let out = ok(kubectl, &["apply", "--server-side", "--dry-run=server", "-f", "-"], Some(MANIFEST)).await;
    assert!(out.stdout.contains("configmap/settings serverside-applied (server dry run)"), "{}", out.stdout);
    let get = kubectl.run(&["get", "cm", "settings"], None).await.unwrap();
    assert!(!get.success);
    assert!(get.stderr.contains(r#"configmaps "settings" not found"#), "{}", get.stderr);
    if let Some(server) = cluster.local() {
        assert_eq!(server.stats().total_writes(), 0);
    }
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn get_yaml_round_trips_through_replace() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(MANIFEST)).await;
    let yaml = ok(kubectl, &["get", "cm", "settings", "-o", "yaml"], None).await.stdout;
    assert!(yaml.contains("resourceVersion:") && yaml.contains("uid:") && yaml.contains("creationTimestamp:"), "{yaml}");
    ok(kubectl, &["replace", "-f", "-"], Some(&yaml)).await;
    let again = ok(kubectl, &["get", "cm", "settings", "-o", "yaml"], None).await.stdout;
    assert_eq!(again, yaml, "replacing an object with itself changes nothing, not even its resourceVersion");
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn get_watch_sees_an_update() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(MANIFEST)).await;
    let mut watch = kubectl.spawn(&["get", "cm", "settings", "--watch", "--output-watch-events"]).unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(TIMEOUT, lines.next_line()).await.unwrap().unwrap().unwrap();
    assert!(first.starts_with("EVENT"), "header first: {first}");
    let added = tokio::time::timeout(TIMEOUT, lines.next_line()).await.unwrap().unwrap().unwrap();
    assert!(added.starts_with("ADDED") && added.contains("settings"), "{added}");

    ok(kubectl, &["patch", "cm", "settings", "--type=merge", "-p", r#"{"data":{"c":"3"}}"#], None).await;
    let modified = tokio::time::timeout(TIMEOUT, lines.next_line()).await.unwrap().unwrap().unwrap();
    let columns: Vec<&str> = modified.split_whitespace().collect();
    assert_eq!(columns[..3], ["MODIFIED", "settings", "3"], "{modified}");
    watch.kill().await.unwrap();
    cluster.finish().await.unwrap();
}

/// A CRD of its own per test (group named after the test's namespace), so a real cluster's
/// CRDs are never touched.
fn widget_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}}
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    additionalPrinterColumns:
    - {{name: Color, type: string, jsonPath: .spec.color}}
    - {{name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}}
    - {{name: Age, type: date, jsonPath: .metadata.creationTimestamp}}
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#
    )
}

#[tokio::test]
async fn crd_apply_wait_established_then_custom_resource_with_printer_columns() {
    let mut cluster = cluster().await;
    let group = format!("{}.stacksync.test", cluster.namespace());
    cluster.delete_on_finish(&format!("crd/widgets.{group}"));
    let kubectl = cluster.kubectl();
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(&widget_crd(&group))).await;
    let crd = format!("crd/widgets.{group}");
    let waited = ok(kubectl, &["wait", "--for=condition=Established", &crd, "--timeout=20s"], None).await;
    assert!(waited.stdout.contains("condition met"), "{}", waited.stdout);
    widgets_discovered(kubectl, &group).await;

    let widget = format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: blue\n");
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(&widget)).await;
    let table = ok(kubectl, &["get", &format!("widgets.{group}")], None).await.stdout;
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "COLOR", "READY", "AGE"], "{table}");
    // No Ready condition yet: the server sends a null cell, which kubectl prints blank.
    assert_eq!((rows[1].len(), rows[1][0], rows[1][1]), (3, "w1", "blue"), "{table}");

    // The other served version reads the same object.
    let old = ok(kubectl, &["get", &format!("widgets.v1alpha1.{group}"), "w1", "-o", "jsonpath={.apiVersion} {.spec.color}"], None).await;
    assert_eq!(old.stdout, format!("{group}/v1alpha1 blue"));
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn delete_waits_for_finalizers_to_be_removed() {
    let cluster = cluster().await;
    let kubectl = cluster.kubectl();
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n";
    ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(held)).await;
    let delete = kubectl.spawn(&["delete", "cm", "held", "--timeout=90s"]).unwrap();

    let pending = async {
        loop {
            let out = kubectl.run(&["get", "cm", "held", "-o", "jsonpath={.metadata.deletionTimestamp}"], None).await.unwrap();
            if !out.stdout.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(TIMEOUT, pending).await.expect("deletionTimestamp gets set");
    ok(kubectl, &["patch", "cm", "held", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#], None).await;

    let out = tokio::time::timeout(Duration::from_secs(90), delete.wait_with_output()).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#"configmap "held" deleted"#));
    let gone = kubectl.run(&["get", "cm", "held"], None).await.unwrap();
    assert!(gone.stderr.contains(r#"configmaps "held" not found"#), "{}", gone.stderr);
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_objects() {
    let mut cluster = cluster().await;
    let team = format!("{}-team", cluster.namespace());
    cluster.delete_on_finish(&format!("namespace/{team}"));
    let kubectl = cluster.kubectl();
    ok(
        kubectl,
        &["create", "-f", "-"],
        Some(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {team}\n  labels: {{{LABEL}: \"true\"}}\n")),
    )
    .await;
    ok(kubectl, &["apply", "--server-side", "-n", &team, "-f", "-"], Some(MANIFEST)).await;
    let out = ok(kubectl, &["delete", "namespace", &team, "--timeout=120s"], None).await;
    assert!(out.stdout.contains(&format!(r#"namespace "{team}" deleted"#)), "{}", out.stdout);
    let left = ok(kubectl, &["get", "cm,deploy", "-n", &team, "-o", "name"], None).await;
    assert_eq!(left.stdout, "");
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn cluster_api_crds_from_testdata_serve_clusters_with_their_printer_columns() {
    let server = ApiServer::start_with(Options { preload: vec![capi_crds_dir()], ..Options::default() }).await.unwrap();
    let kubectl = Kubectl::for_server(&server).unwrap_or_else(|e| panic!("{e}"));
    let resources = ok(&kubectl, &["api-resources", "--api-group=cluster.x-k8s.io", "-o", "name"], None).await;
    assert_eq!(resources.stdout, "clusterclasses.cluster.x-k8s.io\nclusters.cluster.x-k8s.io\nmachinedeployments.cluster.x-k8s.io\n");

    let cluster = "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: alpha\nspec:\n  topology:\n    classRef: {name: stack-1-33}\n    version: v1.33.1\n";
    ok(&kubectl, &["apply", "--server-side", "-f", "-"], Some(cluster)).await;
    let table = ok(&kubectl, &["get", "clusters"], None).await.stdout;
    let mut rows = table.lines().map(|l| l.split_whitespace().collect::<Vec<_>>());
    assert_eq!(rows.next().unwrap(), ["NAME", "CLUSTERCLASS", "AVAILABLE", "PHASE", "AGE", "VERSION"]);
    let row = rows.next().unwrap();
    assert_eq!((row[0], row[1], row[row.len() - 1]), ("alpha", "stack-1-33", "v1.33.1"), "{table}");
    let v1beta1 = ok(&kubectl, &["get", "clusters.v1beta1.cluster.x-k8s.io", "alpha", "-o", "jsonpath={.apiVersion}"], None).await;
    assert_eq!(v1beta1.stdout, "cluster.x-k8s.io/v1beta1");
    server.stop().await;
}

#[tokio::test]
async fn create_generators_send_protobuf_that_the_server_decodes() {
    let mut cluster = cluster().await;
    let extra = format!("{}-gen", cluster.namespace());
    cluster.delete_on_finish(&format!("namespace/{extra}"));
    let kubectl = cluster.kubectl();
    ok(kubectl, &["create", "namespace", &extra], None).await;
    ok(kubectl, &["label", "namespace", &extra, &format!("{LABEL}=true")], None).await;
    ok(kubectl, &["create", "configmap", "generated", "--from-literal=greeting=hello"], None).await;
    ok(kubectl, &["create", "secret", "generic", "token", "--from-literal=value=s3cret"], None).await;
    let phase = ok(kubectl, &["get", "namespace", &extra, "-o", "jsonpath={.status.phase}"], None).await;
    assert_eq!(phase.stdout, "Active");
    let data = ok(kubectl, &["get", "configmap", "generated", "-o", "jsonpath={.data.greeting}"], None).await;
    assert_eq!(data.stdout, "hello");
    let secret = ok(kubectl, &["get", "secret", "token", "-o", "jsonpath={.type} {.data.value}"], None).await;
    assert_eq!(secret.stdout, "Opaque czNjcmV0");
    cluster.finish().await.unwrap();
}

#[tokio::test]
async fn a_custom_resource_next_to_its_crd_has_no_kind_until_the_crd_is_served() {
    let mut cluster = cluster().await;
    let group = format!("{}.stacksync.test", cluster.namespace());
    cluster.delete_on_finish(&format!("crd/widgets.{group}"));
    let kubectl = cluster.kubectl();
    let both = format!("{}---\napiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: red\n", widget_crd(&group));

    // kubectl maps every document before the CRD exists, as against a real server.
    let first = kubectl.run(&["apply", "--server-side", "-f", "-"], Some(&both)).await.unwrap();
    assert!(!first.success);
    assert!(
        first.stdout.contains(&format!("customresourcedefinition.apiextensions.k8s.io/widgets.{group} serverside-applied")),
        "{}",
        first.stdout
    );
    assert!(first.stderr.contains(&format!(r#"no matches for kind "Widget" in version "{group}/v1""#)), "{}", first.stderr);

    ok(kubectl, &["wait", "--for=condition=Established", &format!("crd/widgets.{group}"), "--timeout=20s"], None).await;
    widgets_discovered(kubectl, &group).await;
    let second = ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(&both)).await;
    assert!(second.stdout.contains(&format!("widget.{group}/w1 serverside-applied")), "{}", second.stdout);
    cluster.finish().await.unwrap();
}

/// The repository's deploy/ kustomize base (Namespace, ServiceAccount, CRDs, RBAC with a Role for
/// Leases, ConfigMap, Deployment, Service) as an operator would roll it out: `kubectl apply -k`
/// with a server dry run, the apply, then a clean server-side diff — which needs every kind
/// served and the server's defaults on both sides of the diff.
#[tokio::test]
async fn the_deploy_manifests_dry_run_apply_and_diff_cleanly() {
    let server = ApiServer::start().await.unwrap();
    let kubectl = Kubectl::for_server(&server).unwrap_or_else(|e| panic!("{e}"));
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let deploy = deploy.to_string_lossy();
    // A server dry run creates nothing: the namespace must exist for the objects in it.
    ok(&kubectl, &["create", "namespace", "stacksync-system"], None).await;
    let dry = ok(&kubectl, &["apply", "--server-side", "--dry-run=server", "-k", &deploy], None).await;
    for line in [
        "deployment.apps/stacksync serverside-applied (server dry run)",
        "role.rbac.authorization.k8s.io/stacksync-leader-election serverside-applied (server dry run)",
        "customresourcedefinition.apiextensions.k8s.io/clustersyncs.stacksync.io serverside-applied (server dry run)",
        "service/stacksync serverside-applied (server dry run)",
    ] {
        assert!(dry.stdout.contains(line), "{line} missing:\n{}", dry.stdout);
    }
    ok(&kubectl, &["apply", "--server-side", "-k", &deploy], None).await;
    let diff = kubectl.run(&["diff", "--server-side", "-k", &deploy], None).await.unwrap();
    assert!(diff.success && diff.stdout.is_empty(), "a second look finds no drift:\n{}\n{}", diff.stdout, diff.stderr);
    server.stop().await;
}
