//! The Kubernetes target as a controller: every Cluster API `Cluster` a subscription covers is
//! reconciled on its own — when it changes, when its kubeconfig Secret changes, when its
//! `ClusterSync` asks for it, when what the sources offer changes, and every `resync`. A
//! reconcile gives the Cluster the release its ClusterClass names (cluster stacks) or the
//! subscription's newest allowed release, applies it to the workload cluster through its
//! `<cluster>-kubeconfig` Secret with server-side apply, and records a `ClusterSync`.
//!
//! `classes.rs` keeps each offered release's ClusterClass in every namespace with a subscribed
//! Cluster, and prunes those no longer offered nor used; `reconcile.rs` is the per-Cluster work;
//! `run.rs` wires it on `kube::runtime::Controller` (the daemon) or runs it once per Cluster
//! (`run --once`); `status.rs` builds and writes `ClusterSync` / `StackRelease`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

mod classes;
mod diff;
mod error;
mod events;
pub mod hook;
mod reconcile;
mod render;
mod rollout;
mod rollup;
mod run;
mod status;
mod telemetry;
mod upgrade;
pub mod workload;

pub use diff::{ClusterDiff, diff};
pub use error::Error;
pub use render::render;
pub use rollout::{Health, judge, plan, request as request_rollout};
pub use run::{SHARD_LABEL, pass, request_reconcile, run};

use crate::apply::ssa::{self, Stage};
use crate::config::{Config, KubernetesTarget, Subscription, Target};
use crate::controller::{Context, PreparedRelease};
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::status::Reason;

/// The last warning of one kind about a Cluster: a digest of its text, and when it was said.
type Warned = (u64, std::time::Instant);

/// The last warning of each kind said about each Cluster (see [`Kube::worth_warning`]).
#[derive(Default)]
struct Repeats(Mutex<HashMap<(ClusterKey, &'static str), Warned>>);

impl Repeats {
    /// Whether `text` is worth WARN at `now`: it differs from the last one of its kind, or that
    /// one was said [`REPEAT_WARNING`] before or longer. Recorded when it is.
    fn worth(&self, key: &ClusterKey, what: &'static str, text: &str, now: std::time::Instant) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let digest = h.finish();
        let mut warned = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match warned.get(&(key.clone(), what)) {
            Some((d, at)) if *d == digest && now.duration_since(*at) < REPEAT_WARNING => false,
            _ => {
                warned.insert((key.clone(), what), (digest, now));
                true
            }
        }
    }
}

/// How often a failure that repeats unchanged is said at WARN again (DEBUG in between).
pub const REPEAT_WARNING: std::time::Duration = std::time::Duration::from_secs(3600);
/// The field manager of every write, objects and status alike.
pub const MANAGER: &str = ssa::FIELD_MANAGER;
/// Cluster API's pause annotation (set by `clusterctl move`, among others).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// The label Cluster API puts on a Cluster's Secrets.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// A workload cluster's client and the kinds its syncs found served.
#[derive(Clone)]
pub struct Workload {
    pub client: kube::Client,
    pub discovery: ssa::Discovery,
}

/// Manifest releases kept read and parsed ([`Kube::manifests`]): the releases in use at once.
const KEPT_MANIFESTS: usize = 8;

/// The Kubernetes half of the long-lived context: the management client, Cluster API's
/// `Cluster` resource as discovered once, workload clients, retry counts.
pub struct Kube {
    pub ctx: Arc<Context>,
    pub mgmt: kube::Client,
    /// The management cluster for watches (no per-request deadline: a watch is long and may be
    /// quiet).
    pub watch: kube::Client,
    /// `cluster.x-k8s.io` `Cluster` at the newest version the management cluster serves.
    pub clusters: ApiResource,
    /// Kinds the management cluster serves, as found by the ClusterClass applies.
    pub mgmt_discovery: ssa::Discovery,
    /// Workload clients by Cluster, with the kubeconfig Secret's resourceVersion they came from:
    /// bounded in number and age (`workload.rs`).
    clients: workload::Clients,
    /// The TLS configurations of workload clients, one per distinct trust and identity.
    tls: workload::TlsConfigs,
    /// What each Cluster keeps between reconciles (served kinds, whether it answered).
    states: Mutex<HashMap<ClusterKey, workload::ClusterState>>,
    /// The last warning of each kind said about a Cluster (a digest of its text) and when: a
    /// failure that repeats every resync is said at WARN when it changes and once an hour, at
    /// DEBUG otherwise.
    warned: Repeats,
    /// Failed reconciles in a row, by Cluster: the backoff's attempt number.
    attempts: Mutex<HashMap<ClusterKey, u32>>,
    classes: classes::Classes,
    /// Manifest releases (`subscription`, `tag`, `commit`) whose StackRelease this process has
    /// recorded: once per release, not a read per reconcile.
    recorded: Mutex<std::collections::HashSet<(String, String, String)>>,
    /// Manifest releases read from the cache by (tree, directory), the most recent first: a
    /// release's files are read and parsed once (`render::Manifests`), not once per Cluster.
    manifests: Mutex<std::collections::VecDeque<(std::path::PathBuf, String, Arc<crate::render::Manifests>)>>,
    /// Kubernetes Events on ClusterSyncs and StackReleases.
    events: events::Events,
    /// Rollouts: the Kubernetes version of a release (`tag@commit`), read once per process.
    kubernetes_versions: Mutex<HashMap<String, Option<String>>>,
    /// The API resources of Cluster references (control plane, infrastructure cluster).
    references: References,
}

impl Kube {
    /// Connects to the management cluster and discovers Cluster API's `Cluster` (v1beta2, else
    /// v1beta1).
    ///
    /// # Errors
    /// The client cannot be built, the server does not answer (`Discovery`, transient), or it
    /// serves no `Cluster` (`ClusterApiMissing`).
    pub async fn connect(ctx: Arc<Context>) -> Result<Arc<Kube>, Error> {
        let config = ctx.config();
        let k = target(&config);
        let mgmt = management_client(&k).await.map_err(Error::ManagementClient)?;
        let watch = management_watch_client(&k).await.map_err(Error::ManagementClient)?;
        let clusters = cluster_resource(&mgmt).await?;
        tracing::info!(version = %clusters.version, "Cluster API found");
        Ok(Arc::new(Kube {
            ctx,
            watch,
            clusters,
            mgmt_discovery: ssa::Discovery::default(),
            clients: workload::Clients::default(),
            tls: workload::TlsConfigs::default(),
            states: Mutex::new(HashMap::new()),
            warned: Repeats::default(),
            attempts: Mutex::new(HashMap::new()),
            classes: classes::Classes::default(),
            recorded: Mutex::new(std::collections::HashSet::new()),
            manifests: Mutex::new(std::collections::VecDeque::new()),
            events: events::Events::new(mgmt.clone()),
            kubernetes_versions: Mutex::new(HashMap::new()),
            references: References::default(),
            mgmt,
        }))
    }

    /// The manifests of a release's `dir`, read from its cache tree once (the tree was verified
    /// by the prepare that returned it); a tree this prepare wrote is read afresh.
    async fn manifests(&self, prepared: &PreparedRelease, dir: &str) -> Result<Arc<crate::render::Manifests>, crate::render::Errors> {
        let same = |(tree, d, _): &(std::path::PathBuf, String, _)| *tree == prepared.tree && d == dir;
        {
            let mut kept = self.manifests.lock().unwrap_or_else(PoisonError::into_inner);
            if prepared.fetched {
                kept.retain(|e| !same(e));
            } else if let Some(at) = kept.iter().position(same) {
                let entry = kept.remove(at).expect("found");
                let m = entry.2.clone();
                kept.push_front(entry);
                return Ok(m);
            }
        }
        let (tree, path) = (prepared.tree.clone(), dir.to_owned());
        let loaded = tokio::task::spawn_blocking(move || crate::render::Manifests::load(&tree, &path)).await.unwrap_or_else(|e| {
            let source = crate::render::ReadError::io(std::io::Error::other(format!("the load task failed: {e}")));
            Err(crate::render::Errors(vec![crate::render::Error::ReadFile { file: dir.to_owned(), source }]))
        })?;
        let m = Arc::new(loaded);
        let mut kept = self.manifests.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|e| !same(e));
        kept.push_front((prepared.tree.clone(), dir.to_owned(), m.clone()));
        kept.truncate(KEPT_MANIFESTS);
        Ok(m)
    }

    fn target(&self) -> KubernetesTarget {
        target(&self.ctx.config())
    }

    /// One more failure of `key`'s reconcile: its attempt number.
    fn failed(&self, key: &ClusterKey) -> u32 {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let n = attempts.entry(key.clone()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    fn succeeded(&self, key: &ClusterKey) {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }

    /// A client of the workload cluster for this reconcile (its connections close with it),
    /// built from its `<cluster>-kubeconfig` Secret (key `value`), whose parsed form is reused,
    /// with what discovery found, while the Secret's resourceVersion stays the same.
    async fn workload(&self, c: &ClusterConfig) -> Result<Workload, (Reason, String)> {
        let key = ClusterKey::new(&c.namespace, &c.name);
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(self.mgmt.clone(), &c.namespace);
        let name = format!("{}-kubeconfig", c.name);
        let secret = match secrets.get_opt(&name).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err((Reason::KubeconfigMissing, format!("Secret {}/{name} does not exist yet", c.namespace))),
            Err(e) => return Err((Reason::ClusterUnreachable, format!("reading Secret {}/{name}: {}", c.namespace, kube_error(&e)))),
        };
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let state = self.states.lock().unwrap_or_else(PoisonError::into_inner).entry(key.clone()).or_default().clone();
        let client = match self.clients.get(&key, &version) {
            Some(client) => client,
            None => {
                let recipe = workload_client(&c.namespace, &name, &secret, self.target().request_timeout, &self.tls).await?;
                // Built once already by `Recipe::new`: a failure here is as unlikely as it is
                // described (never with the error's text, which may quote the kubeconfig).
                let client = recipe
                    .client()
                    .map_err(|_| (Reason::ClusterUnreachable, format!("Secret {}/{name}: its kubeconfig gave no client", c.namespace)))?;
                self.clients.put(key, version, recipe);
                client
            }
        };
        Ok(Workload { client, discovery: state.discovery })
    }

    /// Whether a warning of kind `what` about `key` is worth WARN: its text differs from the
    /// last one of that kind, or that one was said [`REPEAT_WARNING`] ago or more (then it is
    /// the one recorded).
    pub(super) fn worth_warning(&self, key: &ClusterKey, what: &'static str, text: &str) -> bool {
        self.warned.worth(key, what, text, std::time::Instant::now())
    }

    /// A Cluster's failure of kind `what` is over: the next one is said at WARN.
    pub(super) fn cleared(&self, key: &ClusterKey, what: &'static str) {
        self.warned.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&(key.clone(), what));
    }

    /// Forgets what is kept for a Cluster that is gone.
    fn forget(&self, key: &ClusterKey) {
        self.warned.0.lock().unwrap_or_else(PoisonError::into_inner).retain(|(k, _), _| k != key);
        self.clients.remove(key);
        self.states.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
        self.succeeded(key);
    }
}

/// The Kubernetes target of a config (defaults for a directory target).
fn target(config: &Config) -> KubernetesTarget {
    match &config.target {
        Target::Kubernetes(k) => k.clone(),
        Target::Directory(_) => KubernetesTarget::default(),
    }
}

/// A kube error for a message: the API server's own message for an API error, otherwise the
/// error with its cause (a bare "error sending request" says nothing).
pub(crate) fn kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => crate::apply::ssa::with_causes(other),
    }
}

/// Connects to the management cluster.
///
/// # Errors
/// The kubeconfig cannot be read or the client cannot be built.
pub async fn management_client(k: &KubernetesTarget) -> Result<kube::Client, ClientError> {
    let mut config = management_config(k).await?;
    // Every request has a deadline: a frozen API server fails a reconcile, it never hangs it.
    config.read_timeout = Some(k.request_timeout);
    config.write_timeout = Some(k.request_timeout);
    config.connect_timeout = Some(k.request_timeout.min(std::time::Duration::from_secs(10)));
    // kube's default retry waits out 429/503 for minutes (15 attempts, up to 1000 s apart):
    // a failed request fails the reconcile at once, and the controller retries it with its own
    // jittered backoff, per Cluster, without holding a worker.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(ClientError::Build)
}

/// A client for the management cluster's watches: a watch is a long request (the server ends
/// it after about five minutes) that may be silent for a while, so it keeps kube's own timeouts.
///
/// # Errors
/// As [`management_client`].
pub async fn management_watch_client(k: &KubernetesTarget) -> Result<kube::Client, ClientError> {
    let config = management_config(k).await?;
    kube::Client::try_from(config).map_err(ClientError::Build)
}

/// Why the management cluster's client could not be made. Never transient by itself: the
/// kubeconfig (or the in-cluster environment) must change.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {}: {source}", path.display())]
    ReadKubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no in-cluster config and no usable $KUBECONFIG: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the client: {0}")]
    Build(#[source] kube::Error),
}

async fn management_config(k: &KubernetesTarget) -> Result<kube::Config, ClientError> {
    Ok(match &k.kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig { path: path.clone(), source })?;
            let opts = kube::config::KubeConfigOptions { context: k.context.clone(), ..Default::default() };
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|source| ClientError::Kubeconfig { path: path.clone(), source })?
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer)?,
    })
}

/// `cluster.x-k8s.io` `Cluster` at the newest version the management cluster serves. A server
/// that does not answer is a `Discovery` error, never "Cluster API is not installed".
async fn cluster_resource(mgmt: &kube::Client) -> Result<ApiResource, Error> {
    let groups = mgmt.list_api_groups().await.map_err(Error::Discovery)?;
    let Some(group) = groups.groups.iter().find(|g| g.name == "cluster.x-k8s.io") else { return Err(Error::ClusterApiMissing) };
    for version in ["v1beta2", "v1beta1"] {
        if !group.versions.iter().any(|v| v.version == version) {
            continue;
        }
        let resources = mgmt.list_api_group_resources(&format!("cluster.x-k8s.io/{version}")).await.map_err(Error::Discovery)?;
        if let Some(r) = resources.resources.iter().find(|r| r.kind == "Cluster" && !r.name.contains('/')) {
            return Ok(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster"), &r.name));
        }
    }
    Err(Error::ClusterApiMissing)
}

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
        let class_match =
            !sel.match_stack_class || s.stack.as_ref().zip(class).is_some_and(|(stack, class)| class.starts_with(&format!("{stack}-v")));
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

/// What a workload client is built from, read from a kubeconfig Secret. Messages name the Secret and what is
/// wrong, never its content: a YAML error would quote the line (a token, a key).
async fn workload_client(
    namespace: &str,
    name: &str,
    secret: &k8s_openapi::api::core::v1::Secret,
    timeout: std::time::Duration,
    tls: &workload::TlsConfigs,
) -> Result<workload::Recipe, (Reason, String)> {
    let unusable = |why: &str| (Reason::ClusterUnreachable, format!("Secret {namespace}/{name}: key `value` {why}"));
    let bytes = secret.data.as_ref().and_then(|d| d.get("value")).map(|b| b.0.clone()).unwrap_or_default();
    if bytes.is_empty() {
        return Err((Reason::KubeconfigMissing, format!("Secret {namespace}/{name} has no key `value`")));
    }
    let text = String::from_utf8(bytes).map_err(|_| unusable("is not UTF-8 text"))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|_| unusable("is not a valid kubeconfig (YAML with clusters, users, contexts)"))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|_| unusable("is a kubeconfig stacksync cannot use (no current context, or a cluster or user it does not name)"))?;
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config.connect_timeout = Some(timeout.min(std::time::Duration::from_secs(10)));
    workload::Recipe::new(config, tls).map_err(|_| unusable("is a kubeconfig whose TLS settings or server URL cannot be used"))
}

/// Refuses an object rendered by two stages: each stage would apply its own version on every
/// pass and the cluster would never settle.
fn unique_across_stages(stages: &[Stage]) -> Result<(), crate::controller::pipeline::RenderError> {
    let mut seen: BTreeMap<(String, String, Option<String>, String), &str> = BTreeMap::new();
    for stage in stages {
        for o in &stage.objects {
            let key = (o.group().to_owned(), o.kind.clone(), o.namespace.clone(), o.name.clone());
            if let Some(first) = seen.insert(key, &stage.name)
                && first != stage.name
            {
                return Err(crate::controller::pipeline::RenderError::TwoStages {
                    object: o.to_string(),
                    first: first.to_owned(),
                    second: stage.name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// `c` with the live objects cluster-stack values templates read (`.Cluster`, `.ControlPlane`,
/// `.InfraCluster`); objects written in the config win.
pub(super) async fn with_live_objects(kube: &Kube, obj: &DynamicObject, mut c: ClusterConfig) -> ClusterConfig {
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    if c.objects.cluster.is_none() {
        c.objects.cluster = serde_json::to_value(obj).ok();
    }
    if c.objects.control_plane.is_none() {
        c.objects.control_plane = referenced(kube, &ns, &obj.data["spec"]["controlPlaneRef"]).await;
    }
    if c.objects.infra_cluster.is_none() {
        c.objects.infra_cluster = referenced(kube, &ns, &obj.data["spec"]["infrastructureRef"]).await;
    }
    c
}

/// The object a Cluster's reference points at: v1beta1 refs carry `apiVersion`, v1beta2 refs
/// `apiGroup` (the served version is discovered). `None` when absent or unreadable.
pub(super) async fn referenced(kube: &Kube, ns: &str, r: &Value) -> Option<Value> {
    kube.references.get(&kube.mgmt, ns, r).await
}

/// Reads the objects a Cluster references, with the discovery of each reference's kind (the
/// API resource of an `apiVersion`/`kind` or `apiGroup`/`kind`) done once per process, not on
/// every read: a rollout looks at each Cluster of a running wave's control plane at every check,
/// and each reconcile reads both references. An entry is dropped when its object cannot be read
/// (a CRD version no longer served is discovered again).
#[derive(Default)]
struct References {
    resources: Mutex<HashMap<(String, String, String), ApiResource>>,
    /// Discovery requests made (for tests).
    discoveries: std::sync::atomic::AtomicU64,
}

impl References {
    async fn get(&self, mgmt: &kube::Client, ns: &str, r: &Value) -> Option<Value> {
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
        let cached = self.resources.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
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
                self.resources.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone(), res.clone());
                res
            }
        };
        let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), namespace, &res);
        let found = api.get_opt(name).await.ok().flatten().and_then(|o| serde_json::to_value(o).ok());
        if found.is_none() {
            self.resources.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        }
        found
    }
}

/// v1beta1: `status.controlPlaneReady`; v1beta2: `status.initialization.controlPlaneInitialized`
/// or a true `ControlPlaneInitialized` / `ControlPlaneReady` condition.
fn control_plane_ready(cluster: &Value) -> bool {
    let status = &cluster["status"];
    if status["controlPlaneReady"] == json!(true) || status["initialization"]["controlPlaneInitialized"] == json!(true) {
        return true;
    }
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| matches!(c["type"].as_str(), Some("ControlPlaneInitialized" | "ControlPlaneReady")) && c["status"] == "True")
    })
}

/// How long a workload cluster gets to answer `GET /version` before its sync is skipped.
pub const REACHABLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// One cheap request before a preview (`stacksync diff`): a cluster that is down is skipped in
/// seconds. A sync makes none: its first request is the check (`ApplyOptions::reach_within`).
async fn reachable(client: &kube::Client) -> Result<(), Unreachable> {
    match tokio::time::timeout(REACHABLE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Unreachable::Failed(e)),
        Err(_) => Err(Unreachable::Timeout(REACHABLE_TIMEOUT.as_secs())),
    }
}

/// A workload cluster that did not answer the reachability check.
#[derive(Debug, thiserror::Error)]
enum Unreachable {
    #[error("the workload cluster's API server does not answer: {0}")]
    Failed(#[source] kube::Error),
    #[error("the workload cluster's API server did not answer within {0}s")]
    Timeout(u64),
}

/// The owner of the objects applied for one cluster and subscription (the applier makes it
/// label-safe).
fn owner_id(sub: &Subscription, c: &ClusterConfig) -> String {
    format!("{}.{}.{}", sub.name, c.namespace, c.name)
}

fn rendered_digest<'a>(objects: impl Iterator<Item = &'a crate::model::Object>) -> String {
    let mut h = Sha256::new();
    for o in objects {
        h.update(serde_json::to_vec(&o.body).unwrap_or_default());
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StageAction;

    #[tokio::test]
    async fn a_reference_kind_is_discovered_once_per_process() {
        use std::sync::atomic::Ordering::Relaxed;
        let server = testkit::apiserver::ApiServer::start().await.expect("testkit API server");
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

    #[test]
    fn a_repeated_failure_is_warned_on_change_and_once_an_hour() {
        let (r, a, b) = (Repeats::default(), ClusterKey::new("ns", "a"), ClusterKey::new("ns", "b"));
        let t0 = std::time::Instant::now();
        let at = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        assert!(r.worth(&a, "objects", "cm failed: 403", at(0)), "the first time");
        assert!(!r.worth(&a, "objects", "cm failed: 403", at(600)), "the same, ten minutes later");
        assert!(r.worth(&b, "objects", "cm failed: 403", at(600)), "another Cluster");
        assert!(r.worth(&a, "reconcile", "cm failed: 403", at(600)), "another kind of failure");
        assert!(r.worth(&a, "objects", "cm failed: 500", at(1200)), "a change");
        assert!(!r.worth(&a, "objects", "cm failed: 500", at(1800)));
        assert!(r.worth(&a, "objects", "cm failed: 500", at(1200 + 3600)), "an hour after it was last said");
    }

    #[test]
    fn an_object_in_two_stages_is_refused() {
        let object = |name: &str| crate::model::Object {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("kube-system".into()),
            name: name.into(),
            file: "f.yaml".into(),
            line: 1,
            body: json!({}),
            chart: None,
            stage: None,
        };
        let stage = |name: &str, objects: Vec<crate::model::Object>| Stage { name: name.into(), action: StageAction::Apply, objects };
        assert!(unique_across_stages(&[stage("cni", vec![object("a")]), stage("csi", vec![object("b")])]).is_ok());
        let err = unique_across_stages(&[stage("cni", vec![object("a")]), stage("csi", vec![object("a")])]).unwrap_err().to_string();
        assert!(err.contains("ConfigMap/kube-system/a is rendered by stages `cni` and `csi`"), "{err}");
    }

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
