//! The management cluster as the one-shot commands reach it: Cluster API's `Cluster`s, the
//! Cluster's live objects, a workload client from its kubeconfig Secret, the release a reconcile
//! would choose and its render, apply options and ClusterClass previews. A narrow interface over
//! the controller's `Kube`: the commands read, render and dry-run through it, and never see what
//! a running controller keeps between reconciles (attempts, warnings, StackReleases recorded,
//! Events). `adopt` alone writes, with the management client it gets here.

use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};

use super::super::context::Kube;
use super::super::error::Error;
use super::super::reconcile::cluster::{apply_options, choose};
use super::super::reconcile::fail::Fail;
use super::super::reconcile::stages::{Rendered, StagesError, render};
use super::super::reconcile::workload::{Workload, WorkloadError};
use crate::config::Subscription;
use crate::controller::{Context, PreparedRelease};
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::release::Release;
use applier::ssa::ApplyOptions;

/// The management cluster, connected, with the Kubernetes target's code a command reuses.
pub(super) struct Management(Arc<Kube>);

impl Management {
    /// Connects to the management cluster and discovers Cluster API's `Cluster`, as the
    /// controller does ([`Kube::connect`]).
    ///
    /// # Errors
    /// As [`Kube::connect`].
    pub(super) async fn connect(ctx: Arc<Context>) -> Result<Management, Error> {
        Ok(Management(Kube::connect(ctx).await?))
    }

    /// The long-lived context: the config, the cache, helm.
    pub(super) fn ctx(&self) -> &Arc<Context> {
        &self.0.ctx
    }

    /// The management cluster's client.
    pub(super) fn client(&self) -> &kube::Client {
        &self.0.mgmt
    }

    /// `cluster.x-k8s.io` `Cluster` at the version the management cluster serves.
    pub(super) fn clusters(&self) -> &ApiResource {
        &self.0.clusters
    }

    /// The Cluster `only` names (none when it does not exist), or every Cluster.
    ///
    /// # Errors
    /// The Clusters cannot be read (`ListClusters`).
    pub(super) async fn clusters_of(&self, only: Option<&ClusterKey>) -> Result<Vec<DynamicObject>, Error> {
        self.0.clusters_of(only).await
    }

    /// `c` with the live objects cluster-stack values templates read.
    pub(super) async fn with_live_objects(&self, obj: &DynamicObject, c: ClusterConfig) -> ClusterConfig {
        self.0.with_live_objects(obj, c).await
    }

    /// A client of `key`'s workload cluster, from its kubeconfig Secret.
    ///
    /// # Errors
    /// As the reconcile's: the Secret is missing or unreadable, or holds no usable kubeconfig.
    pub(super) async fn workload(&self, key: &ClusterKey, c: &ClusterConfig) -> Result<Workload, WorkloadError> {
        self.0.workloads.get(&self.0.mgmt, key, c, self.0.target().request_timeout).await
    }

    /// The release a reconcile would give a Cluster of `sub` whose class is `class`.
    ///
    /// # Errors
    /// As the reconcile's: no release matches, or the class names none the source offers.
    pub(super) async fn choose(&self, sub: &Subscription, class: Option<&str>) -> Result<Release, Fail> {
        choose(&self.0, sub, class).await
    }

    /// A Cluster's stages as a reconcile renders them (`fresh`: without the render memo), what
    /// the charts generate rendered for real (no status consulted: never stand-ins).
    ///
    /// # Errors
    /// As the reconcile's render.
    pub(super) async fn render(
        &self,
        sub: &Subscription,
        prepared: &PreparedRelease,
        c: &ClusterConfig,
        fresh: bool,
    ) -> Result<Rendered, StagesError> {
        let key = crate::model::ClusterKey::new(&c.namespace, &c.name);
        render(&self.0, &key, sub, prepared, c, &Default::default(), fresh).await
    }

    /// The options a reconcile applies a Cluster's objects with.
    pub(super) fn apply_options(&self, sub: &Subscription, c: &ClusterConfig) -> ApplyOptions {
        apply_options(&self.0.target(), sub, c)
    }

    /// What applying a release's ClusterClass in `namespace` would change.
    ///
    /// # Errors
    /// The release cannot be prepared or its ClusterClass chart rendered.
    pub(super) async fn class_preview(&self, sub: &Subscription, namespace: &str, rel: &Release) -> anyhow::Result<applier::ssa::Preview> {
        super::super::classes::preview(&self.0, sub, namespace, rel).await
    }

    /// [`Management::class_preview`] of a release already prepared.
    ///
    /// # Errors
    /// Its ClusterClass chart cannot be rendered.
    pub(super) async fn class_preview_prepared(
        &self,
        sub: &Subscription,
        namespace: &str,
        prepared: &PreparedRelease,
    ) -> anyhow::Result<applier::ssa::Preview> {
        super::super::classes::preview_prepared(&self.0, sub, namespace, prepared).await
    }
}
