//! What a request addresses (a resource in one version, a namespace, a name, a subresource),
//! what a write answers, and an object as served in the requested version: what the handlers
//! (objects, deletion, lists, watch) share.

use serde_json::{Value, json};

use super::fieldset::Scope;
use super::registry::ResourceType;
use super::status::ApiError;
use super::store::Key;

/// What a request addresses.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: ResourceType,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Target {
    pub fn scope(&self) -> Scope {
        match (self.subresource.as_deref(), self.rt.has_status(&self.version)) {
            (Some("status"), _) => Scope::Status,
            (_, true) => Scope::Main,
            _ => Scope::All,
        }
    }

    pub fn key(&self, name: &str) -> Key {
        Key {
            group: self.rt.group.clone(),
            plural: self.rt.plural.clone(),
            namespace: if self.rt.namespaced { self.namespace.clone().unwrap_or_default() } else { String::new() },
            name: name.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    pub fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.rt.group, &self.rt.plural, name)
    }
}

/// The result of a write.
#[derive(Debug)]
pub struct Written {
    pub code: u16,
    pub body: Value,
    /// Whether the store changed (false for no-ops and dry runs).
    pub changed: bool,
}

/// The object as served in the requested version (conversion is `None`: only apiVersion changes).
pub fn present(obj: &Value, t: &Target) -> Value {
    let mut obj = obj.clone();
    obj["apiVersion"] = Value::String(t.rt.api_version(&t.version));
    obj["kind"] = Value::String(t.rt.kind.clone());
    obj
}

/// Fields the real server always answers for some kinds although nobody set them (Go struct
/// fields without an `omitempty` effect), which are not in any manager's field set.
pub fn answer_shape(obj: &mut Value, t: &Target) {
    let (source, first, last) = match (t.rt.group.as_str(), t.rt.kind.as_str()) {
        ("events.k8s.io", "Event") => ("deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"),
        ("", "Event") => ("source", "firstTimestamp", "lastTimestamp"),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            if t.version == "v2"
                && let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
            {
                status.entry("currentMetrics").or_insert(Value::Null);
            }
            return;
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            for e in obj["endpoints"].as_array_mut().into_iter().flatten() {
                if let Some(e) = e.as_object_mut() {
                    e.entry("conditions").or_insert_with(|| json!({}));
                }
            }
            if let Some(map) = obj.as_object_mut() {
                map.entry("ports").or_insert(Value::Null);
            }
            return;
        }
        _ => return,
    };
    if let Some(map) = obj.as_object_mut() {
        map.entry(source).or_insert_with(|| json!({}));
        map.entry(first).or_insert(Value::Null);
        map.entry(last).or_insert(Value::Null);
    }
}

/// An item of a list as served: a built-in kind's items carry no apiVersion/kind on the real
/// server (Go's typed lists), a custom resource's (unstructured) do.
pub fn list_item(item: &mut Value, t: &Target) {
    if t.rt.custom {
        return;
    }
    answer_shape(item, t);
    if let Some(map) = item.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
}
