//! Server-side apply of rendered Kubernetes objects, as a GitOps controller needs it: stage by
//! stage, each object applied by a field manager of its own, what a release dropped pruned by an
//! inventory, drift taken back (or only reported), health read per object, and a [`ChangeSet`]
//! that says what happened to every object.
//!
//! - [`ssa::Applier`]: the applier (`Applier::sync`, `Applier::preview`, adopting generated
//!   objects), over one workload cluster's `kube::Client`, built with [`ssa::ApplyOptions::new`]
//!   from its user's [`ssa::Manager`] (the field manager it applies as and the prefix of its
//!   owner label and annotations, fluxcd/pkg's `ssa.Owner`) and [`ssa::AdoptionPolicy`] (which
//!   other managers' changes it takes back: by default kubectl's, [`HAND_MANAGERS`]).
//! - [`Object`]: a rendered object and where it came from (file, line, chart, stage).
//! - [`order`]: the order objects go in (CRDs and namespaces first) and come out.
//! - [`health`]: whether a live object is ready, by kind.
//! - [`changeset`]: what the applier did or would do, per object.
//! - [`names`]: object identities checked as the API server would, before a URL is built from
//!   them.
//! - [`sync`]: taking a lock whether or not a holder panicked.
//!
//! The crate knows nothing of releases, sources or Clusters, and names no product: stacksync's
//! Kubernetes target renders a release for a Cluster and hands the objects here, with its own
//! field manager and label prefix (README.md).

#![warn(missing_docs)]

pub mod changeset;
pub mod health;
pub mod names;
pub mod object;
pub mod order;
pub mod ssa;
pub mod sync;

pub use changeset::{Action, ChangeSet, Entry, ObjectRef, SkipReason};
pub use object::Object;

/// What a resync does when a live object differs from a manifest that did not change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DriftMode {
    /// Apply the manifest again (the default).
    #[default]
    Correct,
    /// Report drifted objects and fields; change nothing.
    Warn,
}

/// What a stage does with its objects: a cluster-addon stage of `clusteraddon.yaml`, or the
/// single stage of plain manifests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StageAction {
    /// Apply the stage's objects (server-side apply).
    #[default]
    Apply,
    /// Delete the stage's objects (only those carrying our owner label).
    Delete,
}

/// The managers `kubectl` writes with (and the API server's name for fields set before the first
/// server-side apply): what a person changing an object by hand shows up as.
pub const HAND_MANAGERS: &[&str] = &[
    "kubectl",
    "kubectl-edit",
    "kubectl-patch",
    "kubectl-client-side-apply",
    "kubectl-create",
    "kubectl-replace",
    "kubectl-set",
    "kubectl-scale",
    "kubectl-label",
    "kubectl-annotate",
    "before-first-apply",
];
