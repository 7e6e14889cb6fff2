//! The controller: the core both targets share — the long-lived [`Context`] (config, cache,
//! helm, work directory), one poller per source, the one release selection + prepare path, the
//! cluster-stack render, and what a pass reports. The targets (`crate::targets`) build on it.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod context;
pub mod error;
pub(crate) mod fetch;
pub mod output;
pub mod pipeline;
pub mod poller;
pub mod preview;

pub use context::{Context, RENDERS_DIR};
pub use error::PrepareError;
pub use fetch::{concerned, normalise_url};

use crate::model::cluster::ClusterConfig;
use crate::release::Release;
use crate::status::{ClusterStatus, Reason};
use applier::ChangeSet;

pub use crate::source::POLL_TIMEOUT;

/// A subscription's release, fetched and cached, ready to render.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub subscription: String,
    pub source: String,
    pub outcome: Result<PreparedRelease, std::sync::Arc<PrepareError>>,
}

#[derive(Debug, Clone)]
pub struct PreparedRelease {
    pub release: Release,
    pub tree: PathBuf,
    /// True when this pass wrote the tree into the cache; false when it was already there.
    pub fetched: bool,
    pub note: Option<String>,
    /// GitHub sources: each asset's digest and how it was verified. Empty for Git, whose
    /// objects are content-addressed and checked by gix.
    pub assets: Vec<crate::model::verification::AssetRecord>,
    /// Set when the release, accepted earlier, no longer verifies against the source or the
    /// config (its tag moved, a pin no longer matches): it is not applied again, what is in
    /// place stays, and the status says why ([`fetch::mismatch`]).
    pub unverified: Option<Mismatch>,
    /// Sources with `verify`: who signed the release (`ssh:SHA256:…`, `openpgp:…`, `cosign:…`).
    pub signed_by: Option<String>,
    /// Whether its source accepts a tag that moved (`allowMovedTags`): what a target checks
    /// against the release it recorded as applied ([`fetch::moved_since_applied`]).
    pub moved_tags_accepted: bool,
}

/// Why a release in use no longer verifies: the status reason and a message naming the tag,
/// the pin and both digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub reason: Reason,
    pub message: String,
}

/// What happened to one cluster in a pass.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    pub subscription: String,
    pub cluster: ClusterConfig,
    pub status: ClusterStatus,
    pub changes: ChangeSet,
}

#[derive(Debug, Clone, Default)]
pub struct PassReport {
    pub prepared: Vec<Prepared>,
    pub clusters: Vec<ClusterReport>,
    /// Sources that could not be polled this pass (their cached tags were used).
    pub source_errors: BTreeMap<String, String>,
    /// Failures not tied to one cluster (e.g. the management cluster is unreachable), and
    /// those of clusters in `unreported`.
    pub failures: Vec<String>,
    /// Clusters whose sync failed before it had anything to report (their status could not
    /// be read or written): counted among the clusters, never ready.
    pub unreported: Vec<String>,
    /// Objects created, configured and pruned by Clusters whose reports were trimmed to what is
    /// wrong (`run --once` of the Kubernetes target keeps no per-object entry of a synced
    /// object: at 5,000 Clusters they would be most of its memory).
    pub trimmed_writes: [usize; 3],
}

impl PassReport {
    /// True when every cluster of every subscription is ready.
    pub fn all_synced(&self) -> bool {
        self.failures.is_empty() && self.clusters.iter().all(|c| c.status.ready)
    }

    /// What `run --once` says at the end: the clusters ready of all the pass handled, the
    /// objects synced, and what was written — counted from what was done, so a pass that
    /// applied objects never reads `0/0`.
    pub fn summary(&self) -> String {
        let total = self.clusters.len() + self.unreported.len();
        let ready = self.clusters.iter().filter(|c| c.status.ready).count();
        let objects: usize = self.clusters.iter().map(|c| c.status.total).sum();
        let synced: usize = self.clusters.iter().map(|c| c.status.synced).sum();
        let count = |a: applier::Action| self.clusters.iter().map(|c| c.changes.count(a)).sum::<usize>();
        let [c, f, p] = self.trimmed_writes;
        let (created, configured, pruned) =
            (count(applier::Action::Created) + c, count(applier::Action::Configured) + f, count(applier::Action::Pruned) + p);
        format!(
            "{ready}/{total} clusters ready, {synced}/{objects} objects synced; written this run: {created} created, {configured} configured, {pruned} pruned"
        )
    }

    /// One line per cluster that is not ready, naming what is wrong.
    pub fn not_synced(&self) -> Vec<String> {
        let mut out: Vec<String> = self.failures.clone();
        for c in self.clusters.iter().filter(|c| !c.status.ready) {
            out.push(format!(
                "{}/{} ({}): {}: {}",
                c.cluster.namespace,
                c.cluster.name,
                c.subscription,
                c.status.reason.as_str(),
                c.status.message
            ));
            for o in c.status.objects.iter().filter(|o| !o.synced) {
                out.push(format!("  {}: {}", o.object(), o.message));
            }
        }
        out
    }
}
