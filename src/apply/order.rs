//! The order objects are applied in: a table ranked by API group *and* kind, built once.
//! Definitions and namespaces first, then what workloads need, then workloads, then custom
//! resources, and admission webhooks last (so they cannot block the objects before them).

use std::cmp::Ordering;

use crate::render::Object;

/// `(group, kind)` in apply order. Kinds not listed come after all of these, before webhooks.
const RANKED: &[(&str, &str)] = &[
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("", "Namespace"),
    ("", "ResourceQuota"),
    ("", "LimitRange"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("policy", "PodDisruptionBudget"),
    ("", "ServiceAccount"),
    ("", "Secret"),
    ("", "ConfigMap"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("", "Service"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("apiregistration.k8s.io", "APIService"),
    // Class-like Cluster API kinds before the templates and clusters that reference them.
    ("cluster.x-k8s.io", "ClusterClass"),
];

const LAST: &[(&str, &str)] = &[
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
];

fn rank(o: &Object) -> usize {
    let key = (o.group(), o.kind.as_str());
    if let Some(i) = RANKED.iter().position(|&k| k == key) {
        return i;
    }
    match LAST.iter().position(|&k| k == key) {
        Some(i) => RANKED.len() + 1 + i,
        None => RANKED.len(),
    }
}

/// Total order: rank, then group, kind, namespace, name. Independent of file order.
pub fn compare(a: &Object, b: &Object) -> Ordering {
    rank(a)
        .cmp(&rank(b))
        .then_with(|| a.group().cmp(b.group()))
        .then_with(|| a.kind.cmp(&b.kind))
        .then_with(|| a.namespace.cmp(&b.namespace))
        .then_with(|| a.name.cmp(&b.name))
}

pub fn sort(objects: &mut [Object]) {
    objects.sort_by(compare);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(api_version: &str, kind: &str, name: &str) -> Object {
        Object {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
            file: String::new(),
            line: 1,
            body: serde_json::Value::Null,
        }
    }

    #[test]
    fn definitions_first_webhooks_last_groups_matter() {
        let mut objs = vec![
            obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "w"),
            obj("example.com/v1", "Widget", "x"),
            obj("apps/v1", "Deployment", "d"),
            obj("v1", "ConfigMap", "b"),
            obj("v1", "ConfigMap", "a"),
            obj("example.com/v1", "Deployment", "not-apps"),
            obj("v1", "Namespace", "ns"),
            obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com"),
        ];
        sort(&mut objs);
        let order: Vec<&str> = objs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(order, ["widgets.example.com", "ns", "a", "b", "d", "not-apps", "x", "w"]);
    }
}
