//! What the applier reads of an object the API server sends back (an apply's answer, a listed
//! item): where it lives, whether it is being deleted, the hash of our manager's fields, whether
//! a CRD is Established, and its health. Nothing else of the object is looked at.
//!
//! Read straight from the answer's bytes into the few fields that decide these ([`Narrow`]):
//! the rest — a ConfigMap's data, a pod template, a CRD's schema, other managers' fields — is
//! skipped by the parser without being built. Building every answer as a whole
//! [`serde_json::Value`] and dropping it again was most of a cold sync's client CPU. Any answer
//! the narrow shape does not take (a field of an unexpected type, a key twice) is read whole
//! instead, and [`Seen::from_value`] decides the same things from that: the narrow reading is
//! only ever faster, never different (tested below on every kind health knows).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::diff;
use crate::health::{self, Health};

/// What one object as the server shows it tells the applier.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Seen {
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    /// It has a `deletionTimestamp` (finalizers pending).
    pub deleting: bool,
    /// Hash of our manager's apply FieldsV1 ([`diff::fields_hash`]); `None` when we own nothing.
    pub fields: Option<String>,
    pub health: Health,
    /// For a CRD: its `Established` condition is `True`.
    pub established: bool,
}

impl Seen {
    /// Reads an answer's bytes: narrowly, or whole when the narrow shape does not fit.
    ///
    /// # Errors
    /// The bytes are not a JSON document.
    pub fn from_slice(bytes: &[u8], field_manager: &str) -> serde_json::Result<Seen> {
        match serde_json::from_slice::<Narrow<'_>>(bytes) {
            Ok(narrow) => Ok(narrow.seen(field_manager)),
            Err(_) => serde_json::from_slice::<Value>(bytes).map(|v| Seen::from_value(&v, field_manager)),
        }
    }

    /// The same, from an object already read whole.
    pub fn from_value(object: &Value, field_manager: &str) -> Seen {
        let meta = &object["metadata"];
        Seen {
            namespace: meta["namespace"].as_str().filter(|n| !n.is_empty()).map(str::to_owned),
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            deleting: being_deleted(object),
            fields: diff::our_fields(object, field_manager).map(diff::fields_hash),
            health: health::assess(object),
            established: established(health::at(object, "/status/conditions")),
        }
    }
}

/// A LIST answer of objects of `api_version`/`kind`: its items, and the token of the next page
/// (`None`: the last one). `Ok(None)` when the answer has no `items` list.
///
/// A real API server's list items carry no `apiVersion` and `kind` (only the list does; kubectl
/// fills them in): health is decided by kind, so items are read as of the kind listed. Without
/// that, every listed Deployment would be judged as an unknown kind — healthy.
///
/// # Errors
/// The bytes are not a JSON document.
pub(super) fn page(
    bytes: &[u8],
    api_version: &str,
    kind: &str,
    field_manager: &str,
) -> serde_json::Result<Option<(Vec<Seen>, Option<String>)>> {
    let next = |token: Option<String>| token.filter(|t| !t.is_empty());
    if let Ok(page) = serde_json::from_slice::<NarrowPage<'_>>(bytes) {
        let token = page.metadata.and_then(|m| m.continue_token);
        let of_kind = |mut item: Narrow<'_>| {
            item.api_version.get_or_insert_with(|| Value::from(api_version));
            item.kind.get_or_insert_with(|| Value::from(kind));
            item.seen(field_manager)
        };
        return Ok(page.items.map(|items| (items.into_iter().map(of_kind).collect(), next(token))));
    }
    let page: Value = serde_json::from_slice(bytes)?;
    let Some(items) = page.get("items").and_then(Value::as_array) else { return Ok(None) };
    let token = health::at(&page, "/metadata/continue").and_then(Value::as_str).map(str::to_owned);
    let of_kind = |item: &Value| {
        let mut item = item.clone();
        if let Some(map) = item.as_object_mut() {
            map.entry("apiVersion").or_insert_with(|| Value::from(api_version));
            map.entry("kind").or_insert_with(|| Value::from(kind));
        }
        Seen::from_value(&item, field_manager)
    };
    Ok(Some((items.iter().map(of_kind).collect(), next(token))))
}

/// Whether the object has a `deletionTimestamp` (finalizers pending).
pub(super) fn being_deleted(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some_and(|t| !t.is_null())
}

fn established(conditions: Option<&Value>) -> bool {
    conditions.and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

/// The fields of an object that [`Seen`] is made of, as borrowed from the answer where they are
/// strings. `spec` keeps only what [`health::assess`] reads of it.
#[derive(Deserialize)]
struct Narrow<'a> {
    #[serde(rename = "apiVersion")]
    api_version: Option<Value>,
    kind: Option<Value>,
    #[serde(borrow)]
    metadata: Option<NarrowMeta<'a>>,
    spec: Option<NarrowSpec>,
    status: Option<Value>,
}

#[derive(Deserialize)]
struct NarrowMeta<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    namespace: Option<Cow<'a, str>>,
    generation: Option<Value>,
    #[serde(rename = "deletionTimestamp")]
    deletion_timestamp: Option<Value>,
    #[serde(rename = "managedFields", borrow)]
    managed_fields: Option<Vec<NarrowEntry<'a>>>,
}

/// One `managedFields` entry. `subresource` and `fieldsV1` keep an explicit `null` apart from
/// an absent key, as [`diff::our_fields`] does.
#[derive(Deserialize)]
struct NarrowEntry<'a> {
    #[serde(borrow)]
    manager: Option<Cow<'a, str>>,
    #[serde(borrow)]
    operation: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    subresource: Option<Value>,
    #[serde(rename = "fieldsV1", default, deserialize_with = "present")]
    fields_v1: Option<Value>,
}

/// The parts of `spec` that [`health::assess`] reads.
#[derive(Deserialize)]
struct NarrowSpec {
    replicas: Option<Value>,
    #[serde(rename = "updateStrategy")]
    update_strategy: Option<Value>,
    #[serde(rename = "type")]
    type_: Option<Value>,
}

#[derive(Deserialize)]
struct NarrowPage<'a> {
    #[serde(borrow)]
    items: Option<Vec<Narrow<'a>>>,
    metadata: Option<NarrowListMeta>,
}

#[derive(Deserialize)]
struct NarrowListMeta {
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// A key that is there, `null` included.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Narrow<'_> {
    fn seen(self, field_manager: &str) -> Seen {
        let meta = self.metadata;
        let ours = meta.as_ref().and_then(|m| m.managed_fields.as_deref()).and_then(|entries| {
            entries.iter().find(|e| {
                e.manager.as_deref() == Some(field_manager)
                    && e.operation.as_deref() == Some("Apply")
                    && e.subresource.as_ref().is_none_or(|s| s == "")
            })
        });
        let fields = ours.and_then(|e| e.fields_v1.as_ref()).map(diff::fields_hash);
        let (mut name, mut namespace, mut generation, mut deletion) = (String::new(), None, None, None);
        if let Some(m) = meta {
            name = m.name.map(Cow::into_owned).unwrap_or_default();
            namespace = m.namespace.filter(|n| !n.is_empty()).map(Cow::into_owned);
            generation = m.generation;
            deletion = m.deletion_timestamp;
        }
        let deleting = deletion.as_ref().is_some_and(|t| !t.is_null());
        let established = established(self.status.as_ref().and_then(|s| s.get("conditions")));
        // The object as far as health looks at it.
        let mut object = serde_json::Map::new();
        let put = |map: &mut serde_json::Map<String, Value>, key: &str, v: Option<Value>| {
            if let Some(v) = v {
                map.insert(key.to_owned(), v);
            }
        };
        put(&mut object, "apiVersion", self.api_version);
        put(&mut object, "kind", self.kind);
        let mut m = serde_json::Map::new();
        put(&mut m, "generation", generation);
        put(&mut m, "deletionTimestamp", deletion);
        object.insert("metadata".into(), Value::Object(m));
        if let Some(spec) = self.spec {
            let mut s = serde_json::Map::new();
            put(&mut s, "replicas", spec.replicas);
            put(&mut s, "updateStrategy", spec.update_strategy);
            put(&mut s, "type", spec.type_);
            object.insert("spec".into(), Value::Object(s));
        }
        put(&mut object, "status", self.status);
        Seen { namespace, name, deleting, fields, health: health::assess(&Value::Object(object)), established }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssa::TEST_FIELD_MANAGER;
    use serde_json::json;

    fn ours(fields: Value) -> Value {
        json!({"manager": TEST_FIELD_MANAGER, "operation": "Apply", "apiVersion": "v1", "time": "2026-11-23T10:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    /// Objects of every kind health knows, in states that decide differently, with the shapes
    /// of `managedFields` [`diff::our_fields`] tells apart.
    fn objects() -> Vec<Value> {
        let managed = |entries: Value| json!({"name": "x", "namespace": "ns", "managedFields": entries});
        let mut out = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": managed(json!([ours(json!({"f:data": {"f:a": {}}}))])),
                "data": {"a": "b", "big": "x".repeat(300)}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-wide", "namespace": ""}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": managed(json!([
                {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:a": {}}},
                {"manager": TEST_FIELD_MANAGER, "operation": "Update", "fieldsV1": {"f:b": {}}},
                {"manager": TEST_FIELD_MANAGER, "operation": "Apply", "subresource": "status", "fieldsV1": {"f:s": {}}},
                {"manager": TEST_FIELD_MANAGER, "operation": "Apply", "subresource": null, "fieldsV1": {"f:n": {}}},
                {"manager": TEST_FIELD_MANAGER, "operation": "Apply", "subresource": "", "fieldsV1": {"f:c": {}}},
            ]))}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": managed(json!([{"manager": TEST_FIELD_MANAGER, "operation": "Apply", "fieldsV1": null}]))}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": managed(json!([{"manager": TEST_FIELD_MANAGER, "operation": "Apply"}]))}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "deletionTimestamp": "2026-11-23T10:00:00Z", "finalizers": ["x"]}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "deletionTimestamp": null}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}, "status": {"phase": "Terminating"}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}, "status": {}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "LoadBalancer"},
                "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Failed", "message": "oom"}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "status": {"phase": "Bound"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}),
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.metrics"},
                "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "a.b", "generation": 1},
                "spec": {"group": "b", "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}}]},
                "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "a.b"},
                "status": {"conditions": [{"type": "NamesAccepted", "status": "False", "reason": "Taken"}]}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 3},
                "spec": {"replicas": "many"}, "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Broken", "message": "it is"}]}}),
        ];
        for (kind, status) in [
            ("Deployment", json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 2})),
            ("Deployment", json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]})),
            (
                "StatefulSet",
                json!({"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"}),
            ),
            ("DaemonSet", json!({"observedGeneration": 2, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2})),
            ("ReplicaSet", json!({"availableReplicas": 1})),
            ("Deployment", json!({})),
        ] {
            out.push(json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "a", "namespace": "ns", "generation": 2},
                "spec": {"replicas": 3, "updateStrategy": {"type": "OnDelete"}, "template": {"spec": {"containers": [{"name": "c"}]}}},
                "status": status}));
        }
        out
    }

    #[test]
    fn the_narrow_reading_decides_what_the_whole_one_does() {
        for object in objects() {
            let bytes = serde_json::to_vec(&object).expect("json");
            assert!(serde_json::from_slice::<Narrow<'_>>(&bytes).is_ok(), "narrow shape takes {object}");
            assert_eq!(
                Seen::from_slice(&bytes, TEST_FIELD_MANAGER).expect("reads"),
                Seen::from_value(&object, TEST_FIELD_MANAGER),
                "{object}"
            );
        }
        let list = json!({"kind": "List", "metadata": {"continue": "next"}, "items": objects()});
        let (items, token) =
            page(&serde_json::to_vec(&list).expect("json"), "v1", "ConfigMap", TEST_FIELD_MANAGER).expect("reads").expect("items");
        assert_eq!(items, objects().iter().map(|o| Seen::from_value(o, TEST_FIELD_MANAGER)).collect::<Vec<_>>());
        assert_eq!(token.as_deref(), Some("next"));
    }

    /// Found on the real kube-apiserver: list items carry no `apiVersion`/`kind`, and an
    /// unavailable Deployment listed by the no-op path was judged healthy (an unknown kind).
    #[test]
    fn a_listed_deployment_without_kind_is_judged_as_a_deployment() {
        let unavailable = json!({"metadata": {"name": "ccm", "namespace": "ns", "generation": 1}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1}});
        let list = json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {}, "items": [unavailable.clone()]});
        let (narrow, _) =
            page(&serde_json::to_vec(&list).expect("json"), "apps/v1", "Deployment", TEST_FIELD_MANAGER).expect("reads").expect("items");
        assert!(!narrow[0].health.is_healthy(), "{:?}", narrow[0].health);
        // The whole reading (an item the narrow shape does not take) decides the same.
        let mut odd = unavailable;
        odd["metadata"]["generation"] = json!("1");
        let list = json!({"items": [odd]});
        let (whole, _) =
            page(&serde_json::to_vec(&list).expect("json"), "apps/v1", "Deployment", TEST_FIELD_MANAGER).expect("reads").expect("items");
        assert!(!whole[0].health.is_healthy(), "{:?}", whole[0].health);
    }

    #[test]
    fn arbitrary_answers_are_read_narrowly_as_they_are_whole() {
        let mut g = super::super::arbitrary::Gen::new(11);
        let mut items = Vec::new();
        let (mut narrow, mut ours, mut deleting, mut unhealthy) = (0, 0, 0, 0);
        for _ in 0..3000 {
            let object = g.object();
            let bytes = serde_json::to_vec(&object).expect("json");
            let seen = Seen::from_slice(&bytes, TEST_FIELD_MANAGER).expect("reads");
            assert_eq!(seen, Seen::from_value(&object, TEST_FIELD_MANAGER), "{object}");
            narrow += usize::from(serde_json::from_slice::<Narrow<'_>>(&bytes).is_ok());
            ours += usize::from(seen.fields.is_some());
            deleting += usize::from(seen.deleting);
            unhealthy += usize::from(!seen.health.is_healthy());
            items.push(object);
        }
        // Both readings were exercised, and on every outcome.
        assert!(narrow > 1000 && narrow < 2990 && ours > 30 && deleting > 100 && unhealthy > 100, "{narrow} {ours} {deleting} {unhealthy}");
        let list = json!({"metadata": {"continue": "t"}, "items": items});
        let (seen, _) =
            page(&serde_json::to_vec(&list).expect("json"), "v1", "ConfigMap", TEST_FIELD_MANAGER).expect("reads").expect("items");
        assert_eq!(seen, items.iter().map(|o| Seen::from_value(o, TEST_FIELD_MANAGER)).collect::<Vec<_>>());
    }

    #[test]
    fn what_the_narrow_shape_does_not_take_is_read_whole() {
        for text in [
            r#"{"kind": "ConfigMap", "metadata": {"name": "a", "name": "b"}}"#,
            r#"{"kind": "ConfigMap", "metadata": {"name": 7, "managedFields": [{"manager": 1}]}}"#,
            r#"{"kind": "Widget", "metadata": "odd", "spec": "also odd"}"#,
            r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a", "generation": "2"}, "spec": [1]}"#,
        ] {
            let whole: Value = serde_json::from_str(text).expect("json");
            assert_eq!(
                Seen::from_slice(text.as_bytes(), TEST_FIELD_MANAGER).expect("reads"),
                Seen::from_value(&whole, TEST_FIELD_MANAGER),
                "{text}"
            );
        }
        assert!(Seen::from_slice(b"not json", TEST_FIELD_MANAGER).is_err());
        assert_eq!(page(br#"{"kind": "Status", "items": null}"#, "v1", "ConfigMap", TEST_FIELD_MANAGER).expect("json"), None);
        assert_eq!(page(br#"{"kind": "Status"}"#, "v1", "ConfigMap", TEST_FIELD_MANAGER).expect("json"), None);
        let (items, token) =
            page(br#"{"items": [], "metadata": {"continue": ""}}"#, "v1", "ConfigMap", TEST_FIELD_MANAGER).expect("json").expect("items");
        assert!(items.is_empty() && token.is_none());
    }
}
