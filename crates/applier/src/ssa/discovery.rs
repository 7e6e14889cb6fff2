//! Which resource serves a kind, and whether it is namespaced: asked of the API server at most
//! once per group-version per sync, and asked again after CRDs were applied. A kind found served
//! is remembered for the cluster's later syncs ([`Discovery`]), so an unchanged resync asks
//! nothing; a kind found missing is always asked again.
//!
//! Built-in kinds that every supported Kubernetes version serves at the same version (GA since
//! 1.23 or earlier: `v1` ConfigMap, `apps/v1` Deployment, … — [`builtin`]) are not asked at all:
//! their resource and scope are the API's own. Should the server answer an object's request
//! with 404 (an API group switched off), that `apiVersion` is asked of the server from then on,
//! so a kind that is not served still gets discovery's clear `no matches for kind` error.

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use kube::Client;
use kube::api::ApiResource;
use kube::core::GroupVersion;
use kube::discovery::{ApiGroup, Scope, group, pinned_group};
use kube::error::DiscoveryError;

use super::error::timeout_message;
use super::object::Backoff;

use crate::sync::MutexExt;

/// A resolved kind.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Shared: every object of the kind holds it.
    pub resource: Arc<ApiResource>,
    pub namespaced: bool,
}

/// Why a kind could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The server does not serve the kind at that version (kubectl's wording).
    NoMatch(String),
    /// Discovery itself failed (the server's message): worth retrying later.
    Failed(String),
}

type Found = Result<Vec<Resolved>, Unresolved>;

/// How long a kind one sync found served is trusted by the cluster's later syncs without asking
/// the server again (longer than the default resync, so an unchanged resync asks nothing). Only
/// positive answers are kept: a kind not found is asked again on every sync (a CRD may have been
/// installed since), and an apply answered 404 forgets its `apiVersion` at once
/// ([`Discovery::forget`]), so a removed API costs at most one failed request per object.
const REMEMBERED_FOR: Duration = Duration::from_secs(30 * 60);

/// Kinds resolved by earlier syncs of one cluster, by `(apiVersion, kind)`: shared by every
/// [`super::Applier`] of that cluster (a cheap handle; keep one per workload client). Holds only
/// the kinds asked for, a few per cluster.
#[derive(Clone, Default)]
pub struct Discovery(Arc<Mutex<Remembered>>);

#[derive(Default)]
struct Remembered {
    /// By `apiVersion`, then kind: when it was found, and what serves it.
    kinds: HashMap<String, HashMap<String, (Instant, Resolved)>>,
    /// `apiVersion`s of built-in kinds whose requests were answered 404: asked of the server.
    doubted: HashSet<String>,
}

impl Discovery {
    fn get(&self, api_version: &str, kind: &str) -> Option<Resolved> {
        let map = self.0.locked();
        let (at, resolved) = map.kinds.get(api_version)?.get(kind)?;
        (at.elapsed() < REMEMBERED_FOR).then(|| resolved.clone())
    }

    /// A built-in kind ([`builtin`]), unless its `apiVersion` was answered 404 here.
    fn builtin(&self, api_version: &str, kind: &str) -> Option<Resolved> {
        let resolved = builtin(api_version, kind)?;
        let doubted = self.0.locked().doubted.contains(api_version);
        (!doubted).then_some(resolved)
    }

    fn put(&self, api_version: &str, resolved: &Resolved) {
        let mut map = self.0.locked();
        let map = &mut map.kinds;
        // Keys are allocated once per cluster, not once per object.
        if !map.contains_key(api_version) {
            map.insert(api_version.to_owned(), HashMap::new());
        }
        let Some(kinds) = map.get_mut(api_version) else { return };
        let found = (Instant::now(), resolved.clone());
        match kinds.get_mut(&resolved.resource.kind) {
            Some(slot) => *slot = found,
            None => {
                kinds.insert(resolved.resource.kind.clone(), found);
            }
        }
    }

    /// Forgets every kind of `api_version` (its requests answered 404: the API may be gone).
    pub fn forget(&self, api_version: &str) {
        let mut map = self.0.locked();
        map.kinds.remove(api_version);
        if builtin_version(api_version) && !map.doubted.contains(api_version) {
            map.doubted.insert(api_version.to_owned());
        }
    }

    /// Forgets every kind of an API group (a CRD of it was just written: the versions it serves
    /// may have changed).
    pub fn forget_group(&self, group: &str) {
        let of_group = |v: &str| v.rsplit_once('/').map_or("", |(g, _)| g) == group;
        self.0.locked().kinds.retain(|v, _| !of_group(v));
    }
}

/// Discovery results of one sync, per `apiVersion` (and per group, for objects recorded at a
/// version that is no longer served), over the cluster's [`Discovery`].
pub struct DiscoveryCache {
    client: Client,
    shared: Discovery,
    /// Bound of each discovery request (`ApplyOptions::request_timeout`).
    timeout: Duration,
    versions: HashMap<String, Found>,
    groups: HashMap<String, Found>,
    /// Kinds per `apiVersion` of CRDs that are Established, and how long discovery may take to
    /// serve them: the API server updates discovery asynchronously after Established.
    expected: HashMap<String, Vec<String>>,
    settle: Duration,
    /// Whether the cluster answers at all (the applier's first-request check).
    reach: Option<Arc<super::Reach>>,
}

impl DiscoveryCache {
    pub fn new(client: Client, shared: Discovery, timeout: Duration, settle: Duration) -> DiscoveryCache {
        DiscoveryCache {
            client,
            shared,
            timeout,
            versions: HashMap::new(),
            groups: HashMap::new(),
            expected: HashMap::new(),
            settle,
            reach: None,
        }
    }

    /// Discovery requests go through the applier's check that the cluster answers.
    pub(super) fn with_reach(self, reach: Arc<super::Reach>) -> DiscoveryCache {
        DiscoveryCache { reach: Some(reach), ..self }
    }

    /// Says that `kind` in `api_version` is served by a CRD that is Established: the next
    /// [`DiscoveryCache::resolve`] of that `apiVersion` waits (up to `settle`) for discovery to
    /// catch up instead of reporting `no matches for kind`.
    pub fn expect(&mut self, api_version: String, kind: String) {
        self.versions.remove(&api_version);
        self.expected.entry(api_version).or_default().push(kind);
    }

    /// Forgets everything (after CRDs were applied, new kinds may be served).
    pub fn refresh(&mut self) {
        self.versions.clear();
        self.groups.clear();
    }

    /// The resource serving `kind` in `api_version`.
    ///
    /// # Errors
    /// [`Unresolved::NoMatch`] when the server does not serve it, [`Unresolved::Failed`] when
    /// discovery failed.
    pub async fn resolve(&mut self, api_version: &str, kind: &str) -> Result<Resolved, Unresolved> {
        self.resolve_with(api_version, kind, true).await
    }

    async fn resolve_with(&mut self, api_version: &str, kind: &str, remembered: bool) -> Result<Resolved, Unresolved> {
        // A kind an earlier sync found served; not for an `apiVersion` this sync asked already
        // (after a CRD was applied, it is asked again) or expects a new CRD to serve.
        // Likewise a built-in kind: no request at all.
        if remembered
            && !self.versions.contains_key(api_version)
            && !self.expected.contains_key(api_version)
            && let Some(resolved) = self.shared.get(api_version, kind).or_else(|| self.shared.builtin(api_version, kind))
        {
            return Ok(resolved);
        }
        if !self.versions.contains_key(api_version) {
            let mut found = self.query(api_version).await;
            let expected = self.expected.remove(api_version).unwrap_or_default();
            let lagging = |found: &Found| match found {
                Ok(served) => expected.iter().any(|k| !served.iter().any(|r| r.resource.kind == *k)),
                Err(Unresolved::NoMatch(_)) => !expected.is_empty(),
                Err(Unresolved::Failed(_)) => false,
            };
            let mut backoff = Backoff::until(self.settle);
            while lagging(&found) && backoff.wait().await {
                found = self.query(api_version).await;
            }
            self.versions.insert(api_version.to_string(), found);
        }
        let picked = pick(self.versions.get(api_version), kind, api_version);
        if let Ok(resolved) = &picked {
            self.shared.put(api_version, resolved);
        }
        picked
    }

    /// As [`DiscoveryCache::resolve`], but when `api_version` is not served, the same kind at any
    /// version its group serves (the preferred one first). For deleting objects recorded at an
    /// older version: a CRD that stopped serving `v1beta1` still serves the object as `v1`, and
    /// taking it for gone would leave it in the cluster for good. Asks the server, never what
    /// earlier syncs found: a deletion sent to a version no longer served answers 404, which
    /// would pass for "already gone" (deletions are rare; a resync deletes nothing).
    ///
    /// # Errors
    /// As [`DiscoveryCache::resolve`]; `NoMatch` only when no version of the group serves it.
    pub async fn resolve_any_version(&mut self, api_version: &str, kind: &str) -> Result<Resolved, Unresolved> {
        match self.resolve_with(api_version, kind, false).await {
            Err(Unresolved::NoMatch(_)) => {}
            other => return other,
        }
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if !self.groups.contains_key(group) {
            let found = self.query_group(group).await;
            self.groups.insert(group.to_string(), found);
        }
        pick(self.groups.get(group), kind, api_version)
    }

    async fn query(&self, api_version: &str) -> Found {
        let gv: GroupVersion = api_version.parse().map_err(|_| Unresolved::NoMatch(format!("invalid apiVersion \"{api_version}\"")))?;
        let what = format!("discovering {api_version}");
        let group = self.bounded(&what, pinned_group(&self.client, &gv)).await?;
        Ok(resources(&group, &gv.version))
    }

    async fn query_group(&self, name: &str) -> Found {
        let what = format!("discovering {}", if name.is_empty() { "the core group" } else { name });
        let group = self.bounded(&what, group(&self.client, name)).await?;
        let preferred = group.preferred_version_or_latest().to_string();
        let others: Vec<String> = group.versions().filter(|v| *v != preferred).map(str::to_string).collect();
        Ok(std::iter::once(&preferred).chain(&others).flat_map(|v| resources(&group, v)).collect())
    }

    async fn bounded(&self, what: &str, request: impl Future<Output = kube::Result<ApiGroup>>) -> Result<ApiGroup, Unresolved> {
        let request = async {
            match &self.reach {
                Some(reach) => reach.send(request).await,
                None => request.await,
            }
        };
        match tokio::time::timeout(self.timeout, request).await {
            Err(_) => Err(Unresolved::Failed(timeout_message(what, self.timeout))),
            Ok(Ok(group)) => Ok(group),
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => Err(Unresolved::NoMatch(String::new())),
            Ok(Err(kube::Error::Discovery(DiscoveryError::MissingApiGroup(_)))) => Err(Unresolved::NoMatch(String::new())),
            Ok(Err(kube::Error::Api(status))) => Err(Unresolved::Failed(format!("{what}: {}", status.message))),
            Ok(Err(e)) => Err(Unresolved::Failed(format!("{what}: {e}"))),
        }
    }
}

/// Built-in kinds by `(apiVersion, kind)`: GA in Kubernetes 1.23 or earlier and served at that
/// version by every release since, so their resource (plural) and scope are known without
/// asking. Kinds added or moved since (and every CRD) are discovered.
type Builtins = HashMap<(&'static str, &'static str), Resolved>;

fn builtins() -> &'static Builtins {
    static TABLE: OnceLock<Builtins> = OnceLock::new();
    TABLE.get_or_init(|| {
        use k8s_openapi::api::{
            admissionregistration, apps, autoscaling, batch, coordination, core, discovery, networking, node, policy, rbac, scheduling,
            storage,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
        let mut t = Builtins::new();
        macro_rules! kinds {
            ($($k:ty),* $(,)?) => { $( add::<$k>(&mut t); )* };
        }
        kinds!(
            core::v1::Namespace,
            core::v1::ConfigMap,
            core::v1::Secret,
            core::v1::Service,
            core::v1::ServiceAccount,
            core::v1::PersistentVolume,
            core::v1::PersistentVolumeClaim,
            core::v1::Pod,
            core::v1::LimitRange,
            core::v1::ResourceQuota,
            apps::v1::Deployment,
            apps::v1::StatefulSet,
            apps::v1::DaemonSet,
            apps::v1::ReplicaSet,
            batch::v1::Job,
            batch::v1::CronJob,
            rbac::v1::Role,
            rbac::v1::RoleBinding,
            rbac::v1::ClusterRole,
            rbac::v1::ClusterRoleBinding,
            networking::v1::Ingress,
            networking::v1::IngressClass,
            networking::v1::NetworkPolicy,
            policy::v1::PodDisruptionBudget,
            autoscaling::v2::HorizontalPodAutoscaler,
            discovery::v1::EndpointSlice,
            admissionregistration::v1::ValidatingWebhookConfiguration,
            admissionregistration::v1::MutatingWebhookConfiguration,
            apiextensions::v1::CustomResourceDefinition,
            storage::v1::StorageClass,
            storage::v1::CSIDriver,
            scheduling::v1::PriorityClass,
            coordination::v1::Lease,
            node::v1::RuntimeClass,
        );
        t
    })
}

fn add<K>(t: &mut Builtins)
where
    K: k8s_openapi::Resource + kube::Resource<DynamicType = ()>,
    <K as k8s_openapi::Resource>::Scope: 'static,
{
    let namespaced = TypeId::of::<<K as k8s_openapi::Resource>::Scope>() == TypeId::of::<k8s_openapi::NamespaceResourceScope>();
    let resource = Arc::new(ApiResource::erase::<K>(&()));
    t.insert((<K as k8s_openapi::Resource>::API_VERSION, <K as k8s_openapi::Resource>::KIND), Resolved { resource, namespaced });
}

/// The built-in kind `kind` of `api_version`, if it is one ([`builtins`]).
fn builtin(api_version: &str, kind: &str) -> Option<Resolved> {
    builtins().get(&(api_version, kind)).cloned()
}

/// Whether `api_version` has built-in kinds.
fn builtin_version(api_version: &str) -> bool {
    builtins().keys().any(|(v, _)| *v == api_version)
}

fn resources(group: &ApiGroup, version: &str) -> Vec<Resolved> {
    group
        .versioned_resources(version)
        .into_iter()
        .map(|(resource, caps)| Resolved { resource: Arc::new(resource), namespaced: caps.scope == Scope::Namespaced })
        .collect()
}

fn pick(found: Option<&Found>, kind: &str, api_version: &str) -> Result<Resolved, Unresolved> {
    let no_match = || Unresolved::NoMatch(format!("no matches for kind \"{kind}\" in version \"{api_version}\""));
    match found {
        Some(Ok(resources)) => resources.iter().find(|r| r.resource.kind == kind).cloned().ok_or_else(no_match),
        Some(Err(Unresolved::NoMatch(_))) | None => Err(no_match()),
        Some(Err(e)) => Err(e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_kinds_are_the_apis_own() {
        let cm = builtin("v1", "ConfigMap").expect("ConfigMap");
        assert_eq!((cm.resource.plural.as_str(), cm.resource.group.as_str(), cm.namespaced), ("configmaps", "", true));
        let ns = builtin("v1", "Namespace").expect("Namespace");
        assert_eq!((ns.resource.plural.as_str(), ns.namespaced), ("namespaces", false));
        let crd = builtin("apiextensions.k8s.io/v1", "CustomResourceDefinition").expect("CRD");
        assert_eq!((crd.resource.plural.as_str(), crd.namespaced), ("customresourcedefinitions", false));
        let deploy = builtin("apps/v1", "Deployment").expect("Deployment");
        assert_eq!((deploy.resource.api_version.as_str(), deploy.namespaced), ("apps/v1", true));
        // Not built in: an older version, a CRD's kind.
        assert!(builtin("policy/v1beta1", "PodDisruptionBudget").is_none());
        assert!(builtin("cluster.x-k8s.io/v1beta1", "Cluster").is_none());
    }

    #[test]
    fn a_builtin_version_answered_404_is_asked_of_the_server() {
        let d = Discovery::default();
        assert!(d.builtin("v1", "ConfigMap").is_some());
        d.forget("v1");
        assert!(d.builtin("v1", "ConfigMap").is_none(), "after a 404, v1 is discovered");
        assert!(d.builtin("apps/v1", "Deployment").is_some(), "other versions stay built in");
        d.forget("example.com/v1");
        assert!(d.0.locked().doubted.len() == 1, "only built-in versions are recorded");
    }
}
