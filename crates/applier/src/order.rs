//! The order objects are applied in: a table ranked by API group *and* kind, built once.
//! Definitions and namespaces first, then what workloads need, then workloads, then custom
//! resources, and admission webhooks last (so they cannot block the objects before them).

use std::cmp::Ordering;

use crate::Object;

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

/// The rank of an object's `(group, kind)`: objects of equal rank do not depend on each other and
/// may be applied concurrently; a lower rank goes first.
pub fn rank(o: &Object) -> usize {
    rank_of(o.group(), &o.kind)
}

/// As [`rank`], for a `(group, kind)` pair (inventory entries, object references).
pub fn rank_of(group: &str, kind: &str) -> usize {
    let key = (group, kind);
    if let Some(i) = RANKED.iter().position(|&k| k == key) {
        return i;
    }
    match LAST.iter().position(|&k| k == key) {
        Some(i) => RANKED.len() + 1 + i,
        None => RANKED.len(),
    }
}

/// Ranks that must be in place before anything else is even resolved: CRDs (which make kinds
/// exist) and Namespaces (which namespaced objects live in).
pub fn is_definition(group: &str, kind: &str) -> bool {
    rank_of(group, kind) < 2
}

/// The identity an order is taken over: `(group, kind, namespace, name)`.
pub type Key<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

/// Total order over keys: rank, then group, kind, namespace, name.
pub fn compare_keys(a: Key<'_>, b: Key<'_>) -> Ordering {
    rank_of(a.0, a.1).cmp(&rank_of(b.0, b.1)).then_with(|| a.cmp(&b))
}

/// Total order: rank, then group, kind, namespace, name. Independent of file order.
pub fn compare(a: &Object, b: &Object) -> Ordering {
    compare_keys((a.group(), &a.kind, a.namespace.as_deref(), &a.name), (b.group(), &b.kind, b.namespace.as_deref(), &b.name))
}

/// Sorts `objects` into apply order ([`compare`]).
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
            chart: None,
            stage: None,
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

    #[test]
    fn keys_order_as_objects_do_and_definitions_are_crds_and_namespaces() {
        let crd = ("apiextensions.k8s.io", "CustomResourceDefinition", None, "w");
        let cm = ("", "ConfigMap", Some("default"), "a");
        let hook = ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", None, "a");
        assert_eq!(compare_keys(crd, cm), Ordering::Less);
        assert_eq!(compare_keys(hook, cm), Ordering::Greater);
        assert_eq!(compare_keys(cm, ("", "ConfigMap", Some("default"), "b")), Ordering::Less);
        let table = [
            ("apiextensions.k8s.io", "CustomResourceDefinition", true),
            ("", "Namespace", true),
            ("", "ConfigMap", false),
            ("example.com", "Namespace", false),
            ("cluster.x-k8s.io", "ClusterClass", false),
        ];
        for (group, kind, want) in table {
            assert_eq!(is_definition(group, kind), want, "{group}/{kind}");
        }
    }
}
