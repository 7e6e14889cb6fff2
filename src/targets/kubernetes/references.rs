//! The objects a Cluster references (its control plane, its infrastructure cluster), read from
//! the management cluster with each reference's kind discovered once per process.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::model::cluster::ClusterConfig;
use crate::model::sync::MutexExt;

/// Reads the objects a Cluster references, with the discovery of each reference's kind (the
/// API resource of an `apiVersion`/`kind` or `apiGroup`/`kind`) done once per process, not on
/// every read: a rollout looks at each Cluster of a running wave's control plane at every check,
/// and each reconcile reads both references. An entry is dropped when its object cannot be read
/// (a CRD version no longer served is discovered again).
#[derive(Default)]
pub struct References {
    resources: Mutex<HashMap<(String, String, String), ApiResource>>,
    /// Discovery requests made (for tests).
    discoveries: std::sync::atomic::AtomicU64,
}

impl References {
    /// The object a Cluster's reference points at: v1beta1 refs carry `apiVersion`, v1beta2
    /// refs `apiGroup` (the served version is discovered). `None` when absent or unreadable.
    pub async fn get(&self, mgmt: &kube::Client, ns: &str, r: &Value) -> Option<Value> {
        let kind = r["kind"].as_str()?;
        let name = r["name"].as_str()?;
        let namespace = r["namespace"].as_str().unwrap_or(ns);
        // A reference is user input that becomes a URL path: only valid names are looked up.
        if let Err(e) = crate::model::names::check_name(name).and_then(|()| crate::model::names::check_namespace(namespace)) {
            tracing::warn!(kind, "ignoring a reference with an invalid name: {e}");
            return None;
        }
        let key = match (r["apiVersion"].as_str(), r["apiGroup"].as_str()) {
            (Some(api_version), _) => {
                let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
                (group.to_owned(), version.to_owned(), kind.to_owned())
            }
            (None, Some(group)) => (group.to_owned(), String::new(), kind.to_owned()),
            _ => return None,
        };
        let cached = self.resources.locked().get(&key).cloned();
        let res = match cached {
            Some(res) => res,
            None => {
                self.discoveries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (group, version, kind) = &key;
                let res = if version.is_empty() {
                    kube::discovery::group(mgmt, group).await.ok()?.recommended_kind(kind)?.0
                } else {
                    kube::discovery::pinned_kind(mgmt, &GroupVersionKind::gvk(group, version, kind)).await.ok()?.0
                };
                self.resources.locked().insert(key.clone(), res.clone());
                res
            }
        };
        let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), namespace, &res);
        let found = api.get_opt(name).await.ok().flatten().and_then(|o| serde_json::to_value(o).ok());
        if found.is_none() {
            self.resources.locked().remove(&key);
        }
        found
    }
}

impl References {
    /// `c` with the live objects cluster-stack values templates read (`.Cluster`,
    /// `.ControlPlane`, `.InfraCluster`); objects written in the config win.
    pub async fn with_live_objects(&self, mgmt: &kube::Client, obj: &DynamicObject, mut c: ClusterConfig) -> ClusterConfig {
        let ns = obj.metadata.namespace.clone().unwrap_or_default();
        if c.objects.cluster.is_none() {
            c.objects.cluster = serde_json::to_value(obj).ok();
        }
        if c.objects.control_plane.is_none() {
            c.objects.control_plane = self.get(mgmt, &ns, &obj.data["spec"]["controlPlaneRef"]).await;
        }
        if c.objects.infra_cluster.is_none() {
            c.objects.infra_cluster = self.get(mgmt, &ns, &obj.data["spec"]["infrastructureRef"]).await;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_reference_kind_is_discovered_once_per_process() {
        use std::sync::atomic::Ordering::Relaxed;
        let server = fake_apiserver::ApiServer::start().await.expect("testkit API server");
        let client = server.client().expect("client");
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm = serde_json::from_value(json!({"metadata": {"name": "cp"}, "data": {"k": "v"}})).expect("cm");
        cms.create(&Default::default(), &cm).await.expect("create");
        let refs = References::default();
        let r = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "cp"});
        for _ in 0..3 {
            let got = refs.get(&client, "default", &r).await.expect("read");
            assert_eq!(got["data"]["k"], "v");
        }
        assert_eq!(refs.discoveries.load(Relaxed), 1, "discovered once for three reads");
        // The apiGroup form (v1beta2 refs) is its own entry.
        let g = json!({"apiGroup": "apps", "kind": "Deployment", "name": "none"});
        assert!(refs.get(&client, "default", &g).await.is_none());
        assert_eq!(refs.discoveries.load(Relaxed), 2);
        // An object that cannot be read drops the entry: the next read discovers again.
        cms.delete("cp", &Default::default()).await.expect("delete");
        assert!(refs.get(&client, "default", &r).await.is_none());
        cms.create(&Default::default(), &cm).await.expect("create again");
        assert!(refs.get(&client, "default", &r).await.is_some());
        assert_eq!(refs.discoveries.load(Relaxed), 3);
        assert!(refs.get(&client, "default", &r).await.is_some());
        assert_eq!(refs.discoveries.load(Relaxed), 3);
        // Unknown kinds and invalid names are not looked up at all.
        assert!(refs.get(&client, "default", &json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "../x"})).await.is_none());
        assert_eq!(refs.discoveries.load(Relaxed), 3);
    }
}
