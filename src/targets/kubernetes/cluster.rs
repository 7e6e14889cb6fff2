//! What the Kubernetes target reads of a Cluster API `Cluster`, pure: the subscription that
//! covers it, whether it is paused, its topology class, whether its control plane is ready.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::config::{Config, Subscription};
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;

/// Cluster API's pause annotation (set by `clusterctl move`, among others).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// The subscription that covers a Cluster, and the cluster as that subscription sees it (its
/// values). A Cluster listed by name belongs to the first subscription listing it; otherwise to
/// the first whose `clusterSelector` matches. A cluster follows one stack: later matches are
/// ignored (they would fight over its ClusterSync). Pure.
pub fn subscription_for<'a>(
    config: &'a Config,
    key: &ClusterKey,
    labels: &BTreeMap<String, String>,
    class: Option<&str>,
) -> Option<(&'a Subscription, ClusterConfig)> {
    let listed = config
        .subscriptions
        .iter()
        .find_map(|s| s.clusters.iter().find(|c| c.name == key.name && c.namespace == key.namespace).map(|c| (s, c.clone())));
    if listed.is_some() {
        return listed;
    }
    config.subscriptions.iter().find_map(|s| {
        let sel = s.selector.as_ref()?;
        let labels_match = sel.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        let class_match = !sel.match_stack_class || s.families().zip(class).is_some_and(|(families, class)| families.covers_class(class));
        (labels_match && class_match).then(|| {
            let config = ClusterConfig {
                name: key.name.clone(),
                namespace: key.namespace.clone(),
                values: s.values.clone(),
                objects: Default::default(),
            };
            (s, config)
        })
    })
}

/// Whether Cluster API asks everyone to keep their hands off this Cluster.
pub fn is_paused(cluster: &DynamicObject) -> bool {
    cluster.data.pointer("/spec/paused") == Some(&json!(true))
        || cluster.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// `spec.topology.class` of a Cluster (v1beta1 and v1beta2 alike; v1beta2 may also say
/// `spec.topology.classRef.name`).
pub fn topology_class(cluster: &Value) -> Option<String> {
    let t = cluster.pointer("/spec/topology")?;
    t.get("class").and_then(Value::as_str).or_else(|| t.pointer("/classRef/name").and_then(Value::as_str)).map(str::to_owned)
}

/// v1beta1: `status.controlPlaneReady`; v1beta2: `status.initialization.controlPlaneInitialized`
/// or a true `ControlPlaneInitialized` / `ControlPlaneReady` condition.
pub(super) fn control_plane_ready(cluster: &Value) -> bool {
    let status = &cluster["status"];
    if status["controlPlaneReady"] == json!(true) || status["initialization"]["controlPlaneInitialized"] == json!(true) {
        return true;
    }
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| matches!(c["type"].as_str(), Some("ControlPlaneInitialized" | "ControlPlaneReady")) && c["status"] == "True")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_plane_readiness_in_v1beta1_and_v1beta2() {
        let table = [
            (json!({"status": {"controlPlaneReady": true}}), true),
            (json!({"status": {"controlPlaneReady": false}}), false),
            (json!({"status": {"initialization": {"controlPlaneInitialized": true}}}), true),
            (json!({"status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}}), true),
            (json!({"status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "False"}]}}), false),
            (json!({"spec": {}}), false),
        ];
        for (cluster, want) in table {
            assert_eq!(control_plane_ready(&cluster), want, "{cluster}");
        }
    }
}
