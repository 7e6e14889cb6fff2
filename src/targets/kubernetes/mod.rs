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
//! The state a reconcile keeps between Clusters is `Kube` (`context.rs`), each of its caches a
//! small type in a file of its own. `client.rs` builds the management cluster's clients,
//! `settings.rs` reads the target's settings, `decide.rs` reads a `Cluster` and decides (pure),
//! `error.rs` is what a reconcile can fail at.
//!
//! This file only declares the modules and re-exports what the rest of the crate uses.

mod attempts;
mod class_results;
mod classes;
mod client;
pub mod commands;
mod context;
mod error;
mod events;
pub mod hook;
mod ledger;
mod manifests;
mod parts;
pub mod reconcile;
mod recorded;
mod references;
mod rollout;
mod rollup;
mod settings;
mod stackrelease;

pub use client::{cluster_resource, management_client, management_watch_client};
pub use commands::diff::{ClusterDiff, diff};
pub use commands::render::render;
pub(crate) use error::kube_error;
pub use error::{ClientError, Error};
pub use reconcile::decide::{PAUSED_ANNOTATION, is_paused, subscription_for, topology_class};
pub use reconcile::run::{SHARD_LABEL, coordinate, pass, request_reconcile, request_rotation, run};
pub use reconcile::workload::{REACHABLE_TIMEOUT, Workload};
pub use rollout::{Health, PlanReport, judge, plan, plan_report as rollout_plan, request as request_rollout};
