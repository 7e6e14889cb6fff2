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
//!
//! The state a reconcile keeps between Clusters is [`Kube`]; each of its caches is a small type
//! of its own: `workload.rs` (workload clients), `references.rs` (the objects a Cluster
//! references), `manifests.rs` (manifest releases read once), `classes.rs` (ClusterClasses
//! applied), `stackrelease.rs` (`StackRelease`s recorded), the warnings said once (`model::repeats`),
//! `attempts.rs` (backoff counts), `workload.rs` also keeps what a server said about waiting
//! (`Throttle`). `client.rs` builds the management cluster's clients, `decide.rs` reads a
//! `Cluster` and decides (pure), `error.rs` is what a reconcile can fail at.

use std::sync::Arc;

use kube::api::{ApiResource, GroupVersionKind};

pub mod adopt;
mod attempts;
mod classes;
mod client;
mod decide;
mod diff;
mod error;
mod events;
mod fail;
pub mod generated;
pub mod hook;
mod manifests;
mod parts;
pub mod preview;
mod reconcile;
mod references;
mod render;
mod rollout;
mod rollup;
mod run;
mod stackrelease;
mod stages;
mod status;
mod upgrade;
pub mod workload;

pub use client::{management_client, management_watch_client};
pub use decide::{PAUSED_ANNOTATION, is_paused, subscription_for, topology_class};
pub use diff::{ClusterDiff, diff};
pub(crate) use error::kube_error;
pub use error::{ClientError, Error};
pub use render::render;
pub use rollout::{Health, PlanReport, judge, plan, plan_report as rollout_plan, request as request_rollout};
pub use run::{SHARD_LABEL, coordinate, pass, request_reconcile, request_rotation, run};
pub use workload::{REACHABLE_TIMEOUT, Workload};

use crate::config::{Config, KubernetesTarget, Target};
use crate::controller::Context;
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::model::repeats::Repeats;
use applier::ssa;

/// The field manager of every write, objects and status alike.
pub const MANAGER: &str = crate::model::manager::FIELD_MANAGER;
/// The label Cluster API puts on a Cluster's Secrets.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The Kubernetes half of the long-lived context: the management client, Cluster API's
/// `Cluster` resource as discovered once, and what is kept between reconciles, each concern its
/// own type.
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
    /// Workload clients by Cluster (bounded in number and age) and what each Cluster keeps
    /// between reconciles.
    workloads: workload::Workloads,
    /// The last warning of each kind (`"objects"`, `"client"`, `"reconcile"`, a rollout's move)
    /// said about a Cluster: a failure that repeats every resync is said at WARN when it changes
    /// and once an hour, at DEBUG otherwise.
    warnings: Repeats<(ClusterKey, &'static str)>,
    /// Failed reconciles in a row, by Cluster.
    attempts: attempts::Attempts,
    classes: classes::Classes,
    /// Manifest releases whose StackRelease this process has recorded.
    recorded: stackrelease::Recorded,
    /// What each release tag was recorded at: moved tags stay refused when the cache is gone.
    ledger: stackrelease::Ledger,
    /// This process's part of each StackRelease (`status.shards[]`), as last written.
    parts: parts::Parts,
    /// Manifest releases read and parsed once, not once per Cluster.
    manifests: manifests::KeptManifests,
    /// Kubernetes Events on ClusterSyncs and StackReleases.
    events: events::Events,
    /// Rollouts: the Kubernetes version of a release, read once per process.
    kubernetes_versions: rollout::KubernetesVersions,
    /// The objects a Cluster references (control plane, infrastructure cluster).
    references: references::References,
    /// When the management API server said to ask again (429/503 `Retry-After`).
    throttle: workload::Throttle,
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
        let (mgmt, throttle) = client::throttled_management_client(&k).await.map_err(Error::ManagementClient)?;
        let watch = management_watch_client(&k).await.map_err(Error::ManagementClient)?;
        let clusters = cluster_resource(&mgmt).await?;
        tracing::info!(version = %clusters.version, "Cluster API found");
        Ok(Arc::new(Kube {
            ctx,
            watch,
            clusters,
            mgmt_discovery: ssa::Discovery::default(),
            workloads: Default::default(),
            warnings: Default::default(),
            attempts: Default::default(),
            classes: Default::default(),
            recorded: Default::default(),
            ledger: Default::default(),
            parts: Default::default(),
            manifests: Default::default(),
            events: events::Events::new(mgmt.clone()),
            kubernetes_versions: Default::default(),
            references: Default::default(),
            throttle,
            mgmt,
        }))
    }

    /// The Kubernetes target's settings in the config in force (not a copy: each reconcile
    /// reads them a few dozen times).
    fn target(&self) -> Settings {
        Settings(self.ctx.config())
    }

    /// The Cluster `only` names (none when it does not exist), or every Cluster
    /// (`diff`, `preview`).
    async fn clusters_of(&self, only: Option<&ClusterKey>) -> Result<Vec<kube::api::DynamicObject>, Error> {
        use kube::api::{Api, DynamicObject};
        match only {
            Some(key) => {
                let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt.clone(), &key.namespace, &self.clusters);
                Ok(api.get_opt(&key.name).await.map_err(Error::ListClusters)?.into_iter().collect())
            }
            None => {
                let api: Api<DynamicObject> = Api::all_with(self.mgmt.clone(), &self.clusters);
                Ok(api.list(&Default::default()).await.map_err(Error::ListClusters)?.items)
            }
        }
    }

    /// `c` with the live objects cluster-stack values templates read
    /// ([`references::References::with_live_objects`]).
    async fn with_live_objects(&self, obj: &kube::api::DynamicObject, c: ClusterConfig) -> ClusterConfig {
        self.references.with_live_objects(&self.mgmt, obj, c).await
    }

    /// How long the API servers a Cluster's reconcile talks to (the management cluster's, its
    /// workload cluster's) said to wait still, if they did: the least its next retry waits.
    fn throttled(&self, key: &ClusterKey) -> Option<std::time::Duration> {
        self.throttle.remaining().max(self.workloads.throttled(key))
    }

    /// Forgets what is kept for a Cluster that is gone.
    fn forget(&self, key: &ClusterKey) {
        self.warnings.forget_where(|(k, _)| k == key);
        self.workloads.forget(key);
        self.attempts.succeeded(key);
    }
}

/// The Kubernetes target of a config (defaults for a directory target).
fn target(config: &Config) -> KubernetesTarget {
    settings(config).clone()
}

/// [`target`] by reference.
fn settings(config: &Config) -> &KubernetesTarget {
    static DEFAULTS: std::sync::OnceLock<KubernetesTarget> = std::sync::OnceLock::new();
    match &config.target {
        Target::Kubernetes(k) => k,
        Target::Directory(_) => DEFAULTS.get_or_init(KubernetesTarget::default),
    }
}

/// The Kubernetes target's settings of one config, read through it.
struct Settings(Arc<Config>);

impl std::ops::Deref for Settings {
    type Target = KubernetesTarget;

    fn deref(&self) -> &KubernetesTarget {
        settings(&self.0)
    }
}

/// `cluster.x-k8s.io` `Cluster` at the newest version the management cluster serves. A server
/// that does not answer is a `Discovery` error, never "Cluster API is not installed".
pub async fn cluster_resource(mgmt: &kube::Client) -> Result<ApiResource, Error> {
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
