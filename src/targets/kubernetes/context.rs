//! [`Kube`], the Kubernetes half of the long-lived context (`controller::Context` is the
//! other): the management client, Cluster API's `Cluster` resource as discovered once, and what
//! is kept between reconciles. Every reconcile, the rollout driver, the roll-up and the one-shot
//! commands (through their narrow `commands::Management`) share one per process.
//!
//! Each thing kept is a small type of its own, in its own file: `workload.rs` (workload clients,
//! and `Throttle`, what a server said about waiting), `references.rs` (the objects a Cluster
//! references), `manifests.rs` (manifest releases read once), `class_results.rs` (ClusterClasses
//! applied), `recorded.rs` (`StackRelease`s recorded), `ledger.rs` (the commit each tag was
//! recorded at), `parts.rs` (this shard's part of each `StackRelease`), `attempts.rs` (backoff
//! counts), `events.rs` (the Event recorder), `rollout/versions.rs` (a release's Kubernetes
//! version), and the warnings said once (`model::repeats`). None of them imports `Kube`: the
//! work that uses them takes `&Kube` and lives beside the reconcile.

use std::sync::Arc;

use kube::api::ApiResource;

use super::attempts::Attempts;
use super::class_results::Classes;
use super::client::{cluster_resource, management_watch_client, throttled_management_client};
use super::error::Error;
use super::events::Events;
use super::ledger::Ledger;
use super::manifests::KeptManifests;
use super::parts::Parts;
use super::reconcile::workload::{Throttle, Workloads};
use super::recorded::Recorded;
use super::references::References;
use super::rollout::KubernetesVersions;
use super::settings::{Settings, target};
use crate::controller::Context;
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::model::repeats::Repeats;
use applier::ssa;

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
    pub(super) workloads: Workloads,
    /// The last warning of each kind (`"objects"`, `"client"`, `"reconcile"`, a rollout's move)
    /// said about a Cluster: a failure that repeats every resync is said at WARN when it changes
    /// and once an hour, at DEBUG otherwise.
    pub(super) warnings: Repeats<(ClusterKey, &'static str)>,
    /// Failed reconciles in a row, by Cluster.
    pub(super) attempts: Attempts,
    pub(super) classes: Classes,
    /// Manifest releases whose StackRelease this process has recorded.
    pub(super) recorded: Recorded,
    /// What each release tag was recorded at: moved tags stay refused when the cache is gone.
    pub(super) ledger: Ledger,
    /// This process's part of each StackRelease (`status.shards[]`), as last written.
    pub(super) parts: Parts,
    /// Manifest releases read and parsed once, not once per Cluster.
    pub(super) manifests: KeptManifests,
    /// Kubernetes Events on ClusterSyncs and StackReleases.
    pub(super) events: Events,
    /// Rollouts: the Kubernetes version of a release, read once per process.
    pub(super) kubernetes_versions: KubernetesVersions,
    /// The objects a Cluster references (control plane, infrastructure cluster).
    pub(super) references: References,
    /// When the management API server said to ask again (429/503 `Retry-After`).
    pub(super) throttle: Throttle,
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
        let (mgmt, throttle) = throttled_management_client(&k).await.map_err(Error::ManagementClient)?;
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
            events: Events::new(mgmt.clone()),
            kubernetes_versions: Default::default(),
            references: Default::default(),
            throttle,
            mgmt,
        }))
    }

    /// The Kubernetes target's settings in the config in force (not a copy: each reconcile
    /// reads them a few dozen times).
    pub(super) fn target(&self) -> Settings {
        Settings(self.ctx.config())
    }

    /// The Cluster `only` names (none when it does not exist), or every Cluster
    /// (`diff`, `preview`).
    pub(super) async fn clusters_of(&self, only: Option<&ClusterKey>) -> Result<Vec<kube::api::DynamicObject>, Error> {
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
    /// ([`References::with_live_objects`]).
    pub(super) async fn with_live_objects(&self, obj: &kube::api::DynamicObject, c: ClusterConfig) -> ClusterConfig {
        self.references.with_live_objects(&self.mgmt, obj, c).await
    }

    /// How long the API servers a Cluster's reconcile talks to (the management cluster's, its
    /// workload cluster's) said to wait still, if they did: the least its next retry waits.
    pub(super) fn throttled(&self, key: &ClusterKey) -> Option<std::time::Duration> {
        self.throttle.remaining().max(self.workloads.throttled(key))
    }

    /// Forgets what is kept for a Cluster that is gone.
    pub(super) fn forget(&self, key: &ClusterKey) {
        self.warnings.forget_where(|(k, _)| k == key);
        self.workloads.forget(key);
        self.attempts.succeeded(key);
    }
}
