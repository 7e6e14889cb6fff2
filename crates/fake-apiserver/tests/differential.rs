//! testkit's API server against the real kube-apiserver 1.35 (`testkit::kube::shared`): the
//! same requests — server-side apply sequences, defaulting, validation errors, a terminating
//! namespace, status subresources, Events through both APIs, lists and deletion — sent to both
//! through the shared harness (`peers::run`, as the fidelity cases), and the answers compared
//! after removing what differs between any two servers (uids, resourceVersions, timestamps,
//! generated names). Every difference found is a bug in testkit's server: a controller tested on
//! it could tell.
//!
//! Needs the real control plane (scripts/build-realkube.sh); without it each test runs against
//! testkit only and says `SKIPPED` for the real side (under CI it fails instead).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

#[macro_use]
mod peers;

use std::time::Duration;

use peers::Side;
use serde_json::{Value, json};

cases!(
    server_side_apply_of_a_deployment_answers_the_same_defaulted_object,
    status_subresource_apply_of_deployment_conditions_is_accepted,
    validation_errors_carry_the_same_reason_causes_and_message,
    a_terminating_namespace_refuses_new_content_with_namespace_terminating,
    events_written_through_events_k8s_io_are_listed_as_core_events,
    lists_by_label_and_field_selectors_answer_the_same_items,
);

mod cases {
    use super::*;

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

    pub(super) async fn server_side_apply_of_a_deployment_answers_the_same_defaulted_object(s: &Side) {
        let path = "/apis/apps/v1/namespaces/{ns}/deployments/web?fieldManager=stacksync";
        assert_eq!(s.send("PATCH", path, APPLY, &deployment("web", "registry.example/web:1.0")).await.code, 201);
        let before = s.get("/apis/apps/v1/namespaces/{ns}/deployments/web").await;
        // A value-only change: the same managedFields, and the entry's time is refreshed.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let after = s.send("PATCH", path, APPLY, &deployment("web", "registry.example/web:1.1")).await;
        assert_eq!(after.code, 200, "{}", after.body);
        let time = |v: &Value| v["metadata"]["managedFields"][0]["time"].as_str().map(str::to_owned);
        assert_ne!(time(&before), time(&after.body), "{}: a value-only change refreshes managedFields' time", s.name);
        // A second manager takes a field: a conflict.
        let theirs = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "{ns}"}, "spec": {"replicas": 2}});
        let conflict = s.send("PATCH", "/apis/apps/v1/namespaces/{ns}/deployments/web?fieldManager=hpa", APPLY, &theirs).await;
        assert_eq!(conflict.code, 409, "{}", conflict.body);
    }

    pub(super) async fn status_subresource_apply_of_deployment_conditions_is_accepted(s: &Side) {
        let path = "/apis/apps/v1/namespaces/{ns}/deployments/web?fieldManager=stacksync";
        assert_eq!(s.send("PATCH", path, APPLY, &deployment("web", "registry.example/web:1.0")).await.code, 201);
        let status = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "{ns}"},
            "status": {"observedGeneration": 1, "replicas": 1, "availableReplicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
                "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "ok",
                    "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        });
        let answer =
            s.send("PATCH", "/apis/apps/v1/namespaces/{ns}/deployments/web/status?fieldManager=e2e&force=true", APPLY, &status).await;
        assert_eq!(answer.code, 200, "{}", answer.body);
    }

    pub(super) async fn validation_errors_carry_the_same_reason_causes_and_message(s: &Side) {
        // A Deployment without a selector: FieldValueRequired on spec.selector (and what follows).
        let mut d = deployment("noselector", "registry.example/web:1.0");
        d["spec"].as_object_mut().unwrap().remove("selector");
        assert_eq!(s.send("POST", "/apis/apps/v1/namespaces/{ns}/deployments", JSON, &d).await.code, 422);
        // An invalid name.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name", "namespace": "{ns}"}});
        assert_eq!(s.send("POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &cm).await.code, 422);
        // A container without an image.
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noimage", "namespace": "{ns}"}, "spec": {"containers": [{"name": "c"}]}});
        assert_eq!(s.send("POST", "/api/v1/namespaces/{ns}/pods", JSON, &pod).await.code, 422);
    }

    pub(super) async fn a_terminating_namespace_refuses_new_content_with_namespace_terminating(s: &Side) {
        // A ConfigMap with a finalizer keeps the namespace Terminating on the real server.
        let held = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "namespace": "{ns}", "finalizers": ["example.com/hold"]}});
        assert_eq!(s.send("POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &held).await.code, 201);
        assert_eq!(s.send("DELETE", "/api/v1/namespaces/{ns}", JSON, &Value::Null).await.code, 200);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": "{ns}"}});
        let refused = s.send("POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &cm).await;
        assert_eq!((refused.code, refused.body["details"]["causes"][0]["reason"].clone()), (403, json!("NamespaceTerminating")));
        // The namespace controller deletes the content (the real one shortly after the DELETE).
        s.eventually("/api/v1/namespaces/{ns}/configmaps/held", |a| a.body["metadata"]["deletionTimestamp"].is_string()).await;
        let release = json!({"metadata": {"finalizers": null}});
        s.send("PATCH", "/api/v1/namespaces/{ns}/configmaps/held", "application/merge-patch+json", &release).await;
    }

    pub(super) async fn events_written_through_events_k8s_io_are_listed_as_core_events(s: &Side) {
        let event = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "alpha.1", "namespace": "{ns}"},
            "eventTime": "2026-11-25T10:00:00.000000Z",
            "reportingController": "stacksync.io/stacksync", "reportingInstance": "stacksync-0",
            "action": "Sync", "reason": "Synced", "note": "synced v1.0.0", "type": "Normal",
            "regarding": {"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "namespace": "{ns}", "name": "alpha"},
        });
        assert_eq!(s.send("POST", "/apis/events.k8s.io/v1/namespaces/{ns}/events", JSON, &event).await.code, 201);
        // `kubectl get events` reads core v1: the same Event, in the core shape.
        s.get("/api/v1/namespaces/{ns}/events/alpha.1").await;
        let listed = s.get("/api/v1/namespaces/{ns}/events").await;
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{listed}");
    }

    pub(super) async fn lists_by_label_and_field_selectors_answer_the_same_items(s: &Side) {
        for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "{ns}", "labels": {"tier": tier}}, "data": {"k": name}});
            assert_eq!(s.send("POST", "/api/v1/namespaces/{ns}/configmaps", JSON, &cm).await.code, 201);
        }
        let names = |v: &Value| -> Vec<String> {
            v["items"].as_array().into_iter().flatten().filter_map(|e| e["metadata"]["name"].as_str().map(str::to_owned)).collect()
        };
        assert_eq!(names(&s.get("/api/v1/namespaces/{ns}/configmaps?labelSelector=tier%3Dweb").await), ["a", "c"]);
        assert_eq!(names(&s.get("/api/v1/namespaces/{ns}/configmaps?labelSelector=tier+in+%28db%29").await), ["b"]);
        assert_eq!(names(&s.get("/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Db").await), ["b"]);
        assert_eq!(s.send("GET", "/api/v1/namespaces/{ns}/configmaps/nope", JSON, &Value::Null).await.code, 404);
        assert_eq!(s.send("DELETE", "/api/v1/namespaces/{ns}/configmaps/a", JSON, &Value::Null).await.code, 200);
        assert_eq!(s.send("DELETE", "/api/v1/namespaces/{ns}/configmaps/a", JSON, &Value::Null).await.code, 404);
    }
}
