//! Health of an applied object, by kstatus rules (what `kubectl rollout status`, Flux's health
//! checks and Argo CD's health assessment agree on): a pure function of the live object.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How an object is doing after it was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// As wanted: rolled out, available, established, bound, complete.
    Healthy,
    /// Still getting there (rolling out, not yet available); the message says what is missing.
    Progressing(String),
    /// It will not get there by itself (a failed Job, a rollout past its deadline).
    Failed(String),
}

impl Health {
    /// Whether the object is where it should be (no reason to wait or to report).
    pub fn is_healthy(&self) -> bool {
        matches!(self, Health::Healthy)
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Health::Healthy => f.write_str("Healthy"),
            Health::Progressing(m) => write!(f, "Progressing: {m}"),
            Health::Failed(m) => write!(f, "Failed: {m}"),
        }
    }
}

/// [`Value::pointer`] without its allocations (it unescapes every token into a new `String`):
/// this walks `path` in place, and only a path with a `~` escape goes through `pointer`. Health
/// and the listing read a few fixed paths of every object, so this is on the hot path.
pub(crate) fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(v);
    }
    if path.contains('~') {
        return v.pointer(path);
    }
    path.strip_prefix('/')?.split('/').try_fold(v, |v, token| match v {
        Value::Object(map) => map.get(token),
        Value::Array(items) => {
            // As `pointer`: decimal digits only, no leading zero.
            let index = (token == "0" || (!token.starts_with('0') && !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit())))
                .then(|| token.parse::<usize>().ok())
                .flatten()?;
            items.get(index)
        }
        _ => None,
    })
}

fn int(v: &Value, path: &str) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    at(obj, "/status/conditions")?.as_array()?.iter().find(|c| c["type"] == type_)
}

fn condition_is(obj: &Value, type_: &str, status: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == status)
}

fn reason_of(c: Option<&Value>) -> String {
    c.map(|c| {
        let reason = c["reason"].as_str().unwrap_or_default();
        let message = c["message"].as_str().unwrap_or_default();
        match (reason.is_empty(), message.is_empty()) {
            (false, false) => format!("{reason}: {message}"),
            (false, true) => reason.to_owned(),
            _ => message.to_owned(),
        }
    })
    .unwrap_or_default()
}

/// The health of `obj` (apiVersion, kind, metadata and status as the API server returns them).
pub fn assess(obj: &Value) -> Health {
    use Health::{Failed, Healthy, Progressing};
    if at(obj, "/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        return Progressing("being deleted".into());
    }
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = obj["kind"].as_str().unwrap_or_default();
    let generation = int(obj, "/metadata/generation");
    let observed = int(obj, "/status/observedGeneration");
    if let (Some(g), Some(o)) = (generation, observed)
        && o < g
    {
        return Progressing(format!("the controller has not observed generation {g} yet (observed {o})"));
    }
    match (group, kind) {
        ("apps", "Deployment") => {
            if condition(obj, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
                return Failed(reason_of(condition(obj, "Progressing")));
            }
            if observed.is_none() && generation.is_some() {
                return Progressing("the Deployment controller has not reported status yet".into());
            }
            let want = int(obj, "/spec/replicas").unwrap_or(1);
            let updated = int(obj, "/status/updatedReplicas").unwrap_or(0);
            let available = int(obj, "/status/availableReplicas").unwrap_or(0);
            let total = int(obj, "/status/replicas").unwrap_or(0);
            if updated < want {
                Progressing(format!("{updated} of {want} replicas updated"))
            } else if total > updated {
                Progressing(format!("{} old replicas pending termination", total - updated))
            } else if available < want {
                Progressing(format!("{available} of {want} replicas available"))
            } else {
                Healthy
            }
        }
        ("apps", "StatefulSet") => {
            if observed.is_none() && generation.is_some() {
                return Progressing("the StatefulSet controller has not reported status yet".into());
            }
            let want = int(obj, "/spec/replicas").unwrap_or(1);
            let ready = int(obj, "/status/readyReplicas").unwrap_or(0);
            let updated = int(obj, "/status/updatedReplicas").unwrap_or(0);
            let rolling = at(obj, "/spec/updateStrategy/type").and_then(Value::as_str).unwrap_or("RollingUpdate") == "RollingUpdate";
            let revisions_differ = at(obj, "/status/currentRevision") != at(obj, "/status/updateRevision");
            if ready < want {
                Progressing(format!("{ready} of {want} replicas ready"))
            } else if rolling && (updated < want || revisions_differ) {
                Progressing(format!("{updated} of {want} replicas updated"))
            } else {
                Healthy
            }
        }
        ("apps", "DaemonSet") => {
            if observed.is_none() && generation.is_some() {
                return Progressing("the DaemonSet controller has not reported status yet".into());
            }
            let desired = int(obj, "/status/desiredNumberScheduled").unwrap_or(0);
            let updated = int(obj, "/status/updatedNumberScheduled").unwrap_or(0);
            let available = int(obj, "/status/numberAvailable").unwrap_or(0);
            if updated < desired {
                Progressing(format!("{updated} of {desired} pods updated"))
            } else if available < desired {
                Progressing(format!("{available} of {desired} pods available"))
            } else {
                Healthy
            }
        }
        ("apps", "ReplicaSet") => {
            let want = int(obj, "/spec/replicas").unwrap_or(1);
            let available = int(obj, "/status/availableReplicas").unwrap_or(0);
            if available < want { Progressing(format!("{available} of {want} replicas available")) } else { Healthy }
        }
        ("batch", "Job") => {
            if condition_is(obj, "Failed", "True") {
                Failed(reason_of(condition(obj, "Failed")))
            } else if condition_is(obj, "Complete", "True") {
                Healthy
            } else {
                Progressing("not complete yet".into())
            }
        }
        ("", "Pod") => match at(obj, "/status/phase").and_then(Value::as_str) {
            Some("Succeeded") => Healthy,
            Some("Running") if condition_is(obj, "Ready", "True") => Healthy,
            Some("Failed") => Failed(at(obj, "/status/message").and_then(Value::as_str).unwrap_or("pod failed").to_owned()),
            other => Progressing(format!("phase {}", other.unwrap_or("Pending"))),
        },
        ("", "PersistentVolumeClaim") => match at(obj, "/status/phase").and_then(Value::as_str) {
            Some("Bound") => Healthy,
            Some("Lost") => Failed("claim lost its volume".into()),
            other => Progressing(format!("phase {}", other.unwrap_or("Pending"))),
        },
        ("", "Service") => {
            let lb = at(obj, "/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
            let ingress = at(obj, "/status/loadBalancer/ingress").and_then(Value::as_array).is_some_and(|i| !i.is_empty());
            if lb && !ingress { Progressing("waiting for a load balancer address".into()) } else { Healthy }
        }
        ("", "Namespace") => match at(obj, "/status/phase").and_then(Value::as_str) {
            Some("Terminating") => Progressing("terminating".into()),
            _ => Healthy,
        },
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            if condition_is(obj, "Established", "True") {
                Healthy
            } else if condition_is(obj, "NamesAccepted", "False") {
                Failed(reason_of(condition(obj, "NamesAccepted")))
            } else {
                Progressing("not established yet".into())
            }
        }
        ("apiregistration.k8s.io", "APIService") => {
            if condition_is(obj, "Available", "True") {
                Healthy
            } else {
                Progressing(match reason_of(condition(obj, "Available")) {
                    r if r.is_empty() => "not available yet".into(),
                    r => format!("not available: {r}"),
                })
            }
        }
        _ => custom(obj),
    }
}

/// Any other kind: kstatus's generic rules on conditions; healthy when it exists otherwise.
fn custom(obj: &Value) -> Health {
    if condition_is(obj, "Stalled", "True") {
        return Health::Failed(reason_of(condition(obj, "Stalled")));
    }
    if condition_is(obj, "Reconciling", "True") {
        return Health::Progressing(reason_of(condition(obj, "Reconciling")));
    }
    match condition(obj, "Ready") {
        Some(c) if c["status"] == "True" => Health::Healthy,
        Some(c) => Health::Progressing(match reason_of(Some(c)) {
            r if r.is_empty() => "not ready".into(),
            r => format!("not ready: {r}"),
        }),
        None => Health::Healthy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_reads_as_pointer_does() {
        let v = serde_json::json!({"a": {"b": [1, {"c": "x"}], "d/e": 2, "f~g": 3, "": 4}});
        for path in [
            "",
            "/",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/01",
            "/a/b/2",
            "/a/b/+1",
            "/a/b/",
            "/a/d~1e",
            "/a/f~0g",
            "/a/x",
            "a",
            "/a/b/1/c/z",
        ] {
            assert_eq!(at(&v, path), v.pointer(path), "{path}");
        }
    }
    use serde_json::json;

    fn deployment(status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": status})
    }

    #[test]
    fn workloads_follow_kstatus() {
        let table = [
            (deployment(json!({})), false),
            (deployment(json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2, "replicas": 2})), false),
            (deployment(json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 1, "replicas": 2})), false),
            (deployment(json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2, "replicas": 3})), false),
            (deployment(json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2, "replicas": 2})), true),
            (json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}), true),
            (json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}}), false),
            (json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Bound"}}), true),
            (json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer"}}), false),
            (json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "ClusterIP"}}), true),
            (json!({"apiVersion": "v1", "kind": "ConfigMap"}), true),
            (json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}), false),
            (
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
                true,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                false,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                true,
            ),
            (json!({"apiVersion": "example.com/v1", "kind": "Widget"}), true),
            (json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}), false),
        ];
        for (obj, healthy) in table {
            assert_eq!(assess(&obj).is_healthy(), healthy, "{obj} -> {}", assess(&obj));
        }
    }

    #[test]
    fn failures_are_told_apart_from_progress() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}});
        assert_eq!(assess(&job), Health::Failed("BackoffLimitExceeded".into()));
        let stuck = deployment(
            json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "took too long"}]}),
        );
        assert_eq!(assess(&stuck), Health::Failed("ProgressDeadlineExceeded: took too long".into()));
        let rolling = deployment(json!({"observedGeneration": 2, "updatedReplicas": 1, "availableReplicas": 2, "replicas": 3}));
        assert_eq!(assess(&rolling), Health::Progressing("1 of 2 replicas updated".into()));
    }
}
