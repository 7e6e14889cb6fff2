//! Labels a subscription adds to every object it renders (`adoptedLabels`), on the object and on
//! the pod template of every kind whose pods are made from one. What another tool put on the
//! objects and their pods (the SCS cluster-stack-operator's `clusterstack.x-k8s.io/instance`)
//! stays when stacksync takes them over: a pod template that lost a label would replace every pod.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::model::Object;

/// Whether a kind's `spec.template` is a pod template that gets the labels: the kinds the SCS
/// cluster-stack-operator labels the pod templates of (Deployments, StatefulSets, DaemonSets and
/// ReplicaSets of `apps` and `extensions`, Jobs of `batch`), so that what it applied is met
/// exactly. A CronJob's job template is left alone, as it leaves it.
fn has_pod_template(api_version: &str, kind: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    matches!((group, kind), ("apps" | "extensions", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("batch", "Job"))
}

/// Sets `labels` on every object's `metadata.labels` and on its pod template's labels. A label
/// the manifest sets to another value is overwritten (the adopted value is what the live objects
/// carry). A manifest whose `metadata` (or pod template) is not a mapping is left as it is: the
/// server refuses it with its own message.
pub fn add(objects: &mut [Object], labels: &BTreeMap<String, String>) {
    if labels.is_empty() {
        return;
    }
    for o in objects {
        put(&mut o.body, &["metadata", "labels"], labels);
        if has_pod_template(&o.api_version, &o.kind) {
            put(&mut o.body, &["spec", "template", "metadata", "labels"], labels);
        }
    }
}

/// Inserts `labels` into the mapping at `path` of `body`, making the mappings on the way.
fn put(body: &mut Value, path: &[&str], labels: &BTreeMap<String, String>) {
    let mut at = body;
    for key in path {
        let Value::Object(map) = at else { return };
        at = map.entry(*key).or_insert_with(|| Value::Object(Map::new()));
        if at.is_null() {
            *at = Value::Object(Map::new());
        }
    }
    if let Value::Object(map) = at {
        for (k, v) in labels {
            map.insert(k.clone(), Value::String(v.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(api_version: &str, kind: &str, body: Value) -> Object {
        Object {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some("kube-system".into()),
            name: "x".into(),
            file: "f.yaml".into(),
            line: 1,
            body,
            chart: None,
            stage: None,
        }
    }

    #[test]
    fn objects_and_the_pod_templates_of_workloads_get_the_labels() {
        let labels = BTreeMap::from([("clusterstack.x-k8s.io/instance".to_owned(), "owned".to_owned())]);
        let mut objects = vec![
            object(
                "apps/v1",
                "Deployment",
                json!({"metadata": {"name": "x", "labels": {"app": "x"}}, "spec": {"template": {"metadata": {"labels": {"app": "x"}}}}}),
            ),
            object("apps/v1", "DaemonSet", json!({"metadata": {"name": "x"}, "spec": {"template": {"spec": {}}}})),
            object(
                "batch/v1",
                "CronJob",
                json!({"metadata": {"name": "x", "labels": null}, "spec": {"jobTemplate": {"spec": {"template": {}}}}}),
            ),
            object("v1", "ConfigMap", json!({"metadata": {"name": "x"}, "data": {"a": "1"}})),
            // Not a workload of apps/batch: its `spec.template` is not a pod template.
            object("example.com/v1", "Deployment", json!({"metadata": {"name": "x"}, "spec": {"template": {}}})),
            object("v1", "ConfigMap", json!({"metadata": "odd"})),
        ];
        add(&mut objects, &labels);
        let at = |i: usize, p: &str| objects[i].body.pointer(p).cloned();
        assert_eq!(at(0, "/metadata/labels"), Some(json!({"app": "x", "clusterstack.x-k8s.io/instance": "owned"})));
        assert_eq!(at(0, "/spec/template/metadata/labels"), Some(json!({"app": "x", "clusterstack.x-k8s.io/instance": "owned"})));
        assert_eq!(at(1, "/spec/template/metadata/labels/clusterstack.x-k8s.io~1instance"), Some(json!("owned")));
        assert_eq!(at(2, "/metadata/labels/clusterstack.x-k8s.io~1instance"), Some(json!("owned")));
        assert_eq!(at(2, "/spec/jobTemplate/spec/template"), Some(json!({})));
        assert_eq!(at(3, "/data"), Some(json!({"a": "1"})));
        assert_eq!(at(4, "/spec/template"), Some(json!({})));
        assert_eq!(at(5, "/metadata"), Some(json!("odd")));
    }

    #[test]
    fn no_labels_change_nothing() {
        let body = json!({"metadata": {"name": "x"}, "spec": {"template": {}}});
        let mut objects = vec![object("apps/v1", "Deployment", body.clone())];
        add(&mut objects, &BTreeMap::new());
        assert_eq!(objects[0].body, body);
    }
}
