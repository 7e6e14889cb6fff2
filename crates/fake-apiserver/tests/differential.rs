//! testkit's API server against the real kube-apiserver 1.35 (`testkit::kube::shared`): the
//! same requests — server-side apply sequences, defaulting, validation errors, a terminating
//! namespace, status subresources, Events through both APIs, lists and deletion — sent to both,
//! and the answers compared after removing what differs between any two servers (uids,
//! resourceVersions, timestamps, generated names). Every difference found is a bug in testkit's
//! server: a controller tested on it could tell.
//!
//! Needs the real control plane (scripts/build-realkube.sh); skips loudly without it, and fails
//! under CI.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::time::Duration;

use fake_apiserver::ApiServer;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

/// The two servers, each with a client and its own copy of the test's namespace.
struct Peers {
    testkit: kube::Client,
    real: kube::Client,
    ns: String,
    _server: ApiServer,
}

/// One answer, as a controller sees it: status code and JSON body.
#[derive(Debug)]
struct Answer {
    code: u16,
    body: Value,
}

impl Peers {
    async fn new(test: &str) -> Option<Peers> {
        let shared = testkit::kube::shared().await?;
        let real = shared.client().await.unwrap();
        let server = ApiServer::start().await.unwrap();
        let testkit = server.client().unwrap();
        let ns = format!("diff-{test}-{}", std::process::id() % 100_000);
        let peers = Peers { testkit, real, ns, _server: server };
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": peers.ns}});
        let [a, b] = peers.both("POST", "/api/v1/namespaces", "application/json", &namespace).await;
        assert_eq!((a.code, b.code), (201, 201), "{a:?} {b:?}");
        Some(peers)
    }

    /// Sends one request to both servers: `[testkit, real]`.
    async fn both(&self, method: &str, path: &str, content_type: &str, body: &Value) -> [Answer; 2] {
        let path = path.replace("{ns}", &self.ns);
        let body = serde_json::from_str::<Value>(&body.to_string().replace("{ns}", &self.ns)).unwrap();
        [send(&self.testkit, method, &path, content_type, &body).await, send(&self.real, method, &path, content_type, &body).await]
    }

    /// Sends one request to both and asserts the normalised answers are equal.
    async fn same(&self, what: &str, method: &str, path: &str, content_type: &str, body: &Value) -> Answer {
        let [ours, real] = self.both(method, path, content_type, body).await;
        let (o, r) = (normalise(&ours.body), normalise(&real.body));
        let differences = diff("", &o, &r);
        assert!(
            ours.code == real.code && differences.is_empty(),
            "{what}: testkit answered {} and the real server {}; differences (path: testkit | real):\n{}\ntestkit: {o:#}\nreal: {r:#}",
            ours.code,
            real.code,
            differences.join("\n")
        );
        real
    }

    async fn cleanup(self) {
        let _ = send(&self.real, "DELETE", &format!("/api/v1/namespaces/{}", self.ns), "application/json", &Value::Null).await;
    }
}

async fn send(client: &kube::Client, method: &str, path: &str, content_type: &str, body: &Value) -> Answer {
    let payload = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(payload)
        .unwrap();
    let response =
        tokio::time::timeout(Duration::from_secs(30), client.send(request.map(kube::client::Body::from))).await.unwrap().unwrap();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer { code, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
}

/// Field managers of the real control plane's own controllers.
const CONTROLLERS: [&str; 2] = ["kube-controller-manager", "kube-scheduler"];

/// Removes what legitimately differs between two servers (identity, versions, times, generated
/// names and addresses) and keeps everything a controller reads.
fn normalise(v: &Value) -> Value {
    let mut v = v.clone();
    strip(&mut v);
    v
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in ["uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "time", "lastTransitionTime", "lastUpdateTime"]
            {
                if map.get(key).is_some_and(|x| x.is_string()) {
                    map.insert(key.into(), json!("<varies>"));
                }
            }
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                // A list's continue token and remaining count are server-private.
                meta.remove("continue");
                meta.remove("remainingItemCount");
                // What the real controllers write (testkit runs none): their managedFields
                // entries and the Deployment controller's revision annotation.
                if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
                    entries.retain(|e| !CONTROLLERS.contains(&e["manager"].as_str().unwrap_or_default()));
                }
                if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
                    annotations.remove("deployment.kubernetes.io/revision");
                    if annotations.is_empty() {
                        meta.remove("annotations");
                    }
                }
            }
            // A workload's status is the controllers' (compared on its own where it matters).
            if map.get("kind").is_some_and(|k| k == "Deployment") && map.contains_key("status") {
                map.insert("status".into(), json!("<controllers>"));
            }
            for (_, child) in map.iter_mut() {
                strip(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Paths where `a` and `b` differ, one line each.
fn diff(path: &str, a: &Value, b: &Value) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            // An explicit `null` is not an absent key: a real server omits empty fields.
            let absent = json!("<absent>");
            keys.into_iter().flat_map(|k| diff(&format!("{path}/{k}"), x.get(k).unwrap_or(&absent), y.get(k).unwrap_or(&absent))).collect()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().flat_map(|(i, (p, q))| diff(&format!("{path}/{i}"), p, q)).collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![format!("{path}: {a} | {b}")],
    }
}

fn deployment(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "{ns}", "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    })
}

const APPLY: &str = "application/apply-patch+yaml";
const JSON: &str = "application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_of_a_deployment_answers_the_same_defaulted_object() {
    let Some(p) = Peers::new("ssa").await else { return };
    let path = "/apis/apps/v1/namespaces/{ns}/deployments/web?fieldManager=stacksync";
    p.same("SSA create", "PATCH", path, APPLY, &deployment("web", "registry.example/web:1.0")).await;
    p.same("GET", "GET", "/apis/apps/v1/namespaces/{ns}/deployments/web", JSON, &Value::Null).await;
    // A value-only change: the same managedFields, and on both the entry's time is refreshed.
    let before = p.both("GET", "/apis/apps/v1/namespaces/{ns}/deployments/web", JSON, &Value::Null).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after = p.same("SSA value change", "PATCH", path, APPLY, &deployment("web", "registry.example/web:1.1")).await;
    let time = |v: &Value| v["metadata"]["managedFields"][0]["time"].as_str().map(str::to_owned);
    assert_ne!(time(&before[1].body), time(&after.body), "the real server refreshes the time");
    let [ours, _] = p.both("GET", "/apis/apps/v1/namespaces/{ns}/deployments/web", JSON, &Value::Null).await;
    assert_ne!(time(&before[0].body), time(&ours.body), "testkit refreshes managedFields' time on a value-only change");
    // A second manager takes a field: a conflict, the same on both.
    let theirs =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "{ns}"}, "spec": {"replicas": 2}});
    p.same("conflict", "PATCH", "/apis/apps/v1/namespaces/{ns}/deployments/web?fieldManager=hpa", APPLY, &theirs).await;
    p.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresource_apply_of_deployment_conditions_is_accepted() {
    let Some(p) = Peers::new("status").await else { return };
    p.same(
        "create",
        "PATCH",
        "/apis/apps/v1/namespaces/{ns}/deployments/web?fieldManager=stacksync",
        APPLY,
        &deployment("web", "registry.example/web:1.0"),
    )
    .await;
    let status = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "{ns}"},
        "status": {"observedGeneration": 1, "replicas": 1, "availableReplicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "ok",
                "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    });
    let [ours, real] =
        p.both("PATCH", "/apis/apps/v1/namespaces/{ns}/deployments/web/status?fieldManager=e2e&force=true", APPLY, &status).await;
    assert_eq!(real.code, 200, "{real:?}");
    assert_eq!(ours.code, real.code, "testkit: {:#}", ours.body);
    p.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_errors_carry_the_same_reason_causes_and_message() {
    let Some(p) = Peers::new("invalid").await else { return };
    // A Deployment without a selector: FieldValueRequired on spec.selector (and what follows).
    let mut d = deployment("noselector", "registry.example/web:1.0");
    d["spec"].as_object_mut().unwrap().remove("selector");
    p.same("missing selector", "POST", "/apis/apps/v1/namespaces/{ns}/deployments", JSON, &d).await;
    // An invalid name.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name", "namespace": "{ns}"}});
    p.same("invalid name", "POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &cm).await;
    // A container without an image.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noimage", "namespace": "{ns}"}, "spec": {"containers": [{"name": "c"}]}});
    p.same("container without image", "POST", "/api/v1/namespaces/{ns}/pods", JSON, &pod).await;
    p.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_namespace_refuses_new_content_with_namespace_terminating() {
    let Some(p) = Peers::new("term").await else { return };
    // A ConfigMap with a finalizer keeps the namespace Terminating on the real server.
    let held = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "namespace": "{ns}", "finalizers": ["example.com/hold"]}});
    p.same("create held", "POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &held).await;
    let [a, b] = p.both("DELETE", "/api/v1/namespaces/{ns}", JSON, &Value::Null).await;
    assert_eq!((a.code, b.code), (200, 200));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": "{ns}"}});
    p.same("create in a terminating namespace", "POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &cm).await;
    let release = json!({"metadata": {"finalizers": null}});
    p.both("PATCH", "/api/v1/namespaces/{ns}/configmaps/held", "application/merge-patch+json", &release).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_through_events_k8s_io_are_listed_as_core_events() {
    let Some(p) = Peers::new("events").await else { return };
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "alpha.1", "namespace": "{ns}"},
        "eventTime": "2026-11-25T10:00:00.000000Z",
        "reportingController": "stacksync.io/stacksync", "reportingInstance": "stacksync-0",
        "action": "Sync", "reason": "Synced", "note": "synced v1.0.0", "type": "Normal",
        "regarding": {"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "namespace": "{ns}", "name": "alpha"},
    });
    p.same("create event", "POST", "/apis/events.k8s.io/v1/namespaces/{ns}/events", JSON, &event).await;
    // `kubectl get events` reads core v1: the same Event, in the core shape.
    p.same("core v1 view", "GET", "/api/v1/namespaces/{ns}/events/alpha.1", JSON, &Value::Null).await;
    let [ours, real] = p.both("GET", "/api/v1/namespaces/{ns}/events", JSON, &Value::Null).await;
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .map(|i| i.iter().filter_map(|e| e["metadata"]["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    assert_eq!(names(&ours.body), names(&real.body));
    p.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_by_label_and_field_selectors_answer_the_same_items() {
    let Some(p) = Peers::new("lists").await else { return };
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "{ns}", "labels": {"tier": tier}}, "data": {"k": name}});
        p.same("create", "POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &cm).await;
    }
    p.same("label selector", "GET", "/api/v1/namespaces/{ns}/configmaps?labelSelector=tier%3Dweb", JSON, &Value::Null).await;
    p.same("set selector", "GET", "/api/v1/namespaces/{ns}/configmaps?labelSelector=tier+in+%28db%29", JSON, &Value::Null).await;
    p.same("field selector", "GET", "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Db", JSON, &Value::Null).await;
    p.same("not found", "GET", "/api/v1/namespaces/{ns}/configmaps/nope", JSON, &Value::Null).await;
    p.same("delete", "DELETE", "/api/v1/namespaces/{ns}/configmaps/a", JSON, &Value::Null).await;
    p.same("delete again", "DELETE", "/api/v1/namespaces/{ns}/configmaps/a", JSON, &Value::Null).await;
    p.cleanup().await;
}
