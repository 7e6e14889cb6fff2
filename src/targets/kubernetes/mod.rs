//! The Kubernetes target as a controller: every Cluster API `Cluster` a subscription covers is
//! reconciled on its own — when it changes, when its kubeconfig Secret changes, when its
//! `ClusterSync` asks for it, when what the sources offer changes, and every `resync`. A
//! reconcile gives the Cluster the release its ClusterClass names (cluster stacks) or the
//! subscription's newest allowed release, applies it to the workload cluster through its
//! `<cluster>-kubeconfig` Secret with server-side apply, and records a `ClusterSync`.
//!
//! Three parts. `reconcile/` is the per-Cluster path: `run.rs` wires it on
//! `kube::runtime::Controller` (the daemon) or runs it once per Cluster (`run --once`),
//! `cluster.rs` is one Cluster's reconcile, `decide.rs` its pure half, `status.rs` the
//! `ClusterSync` writes. `commands/` holds the one-shot commands (`diff`, `render`, `preview`,
//! `adopt`), which reach the clusters through a narrow interface and which the reconcile never
//! imports. Beside them: the state kept between reconciles, `Kube` (`context.rs`), each of its
//! caches a small type in a file of its own; `classes.rs` (each offered release's ClusterClass in
//! every namespace with a subscribed Cluster, pruned when no longer offered nor used),
//! `stackrelease.rs` and `rollup.rs` (`StackRelease`s), `rollout/` (fleet rollouts), `hook.rs`
//! (the runtime hook's answers); `client.rs` the management cluster's clients, `settings.rs` the
//! target's settings, `error.rs` what a reconcile can fail at.
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
