//! The per-Cluster reconcile path, in the order a reader follows one Cluster: `run.rs` wires it
//! on kube-runtime's `Controller` (the watch handler `reconcile_fn`, `error_policy`, the
//! housekeeping; `run --once` and the rollout coordinator too); `cluster.rs` is one Cluster's
//! reconcile (the doer: the subscription, the release chosen and prepared, the apply, the
//! status); `decide.rs` its pure half (what is read of a `Cluster`, and the decisions before and
//! after the apply); `stages.rs` the release rendered into stages; `workload.rs` the workload
//! client from the kubeconfig Secret; `status.rs` the `ClusterSync` writes; `fail.rs` a failed
//! step, typed until the status is written; `upgrade.rs` addon stages with their waits;
//! `generated.rs` the values a chart generates at render time.
//!
//! Nothing here imports the one-shot commands (`../commands/`): they call into this path.

pub(super) mod cluster;
pub mod decide;
pub(super) mod fail;
pub(super) mod generated;
pub mod run;
pub(super) mod stages;
pub(super) mod status;
pub(super) mod upgrade;
pub mod workload;
