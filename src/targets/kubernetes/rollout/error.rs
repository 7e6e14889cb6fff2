//! The rollout driver's errors: what it could not read or write on the management cluster, and
//! a pause or resume asked of a subscription with no rollout to act on.

use super::super::error::ClientError;
use super::super::error::kube_error;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The management cluster's client could not be built (`stacksync rollout`).
    #[error("{0}")]
    ManagementClient(#[source] ClientError),
    #[error("listing StackReleases: {}", kube_error(.0))]
    ListReleases(#[source] kube::Error),
    #[error("listing Clusters: {}", kube_error(.0))]
    ListClusters(#[source] kube::Error),
    #[error("listing ClusterSyncs: {}", kube_error(.0))]
    ListClusterSyncs(#[source] kube::Error),
    /// A Cluster's class (and version) could not be edited: written by someone else since it
    /// was read (409), or refused.
    #[error("cannot edit Cluster {cluster}: {}", kube_error(.source))]
    MoveCluster {
        /// `namespace/name`.
        cluster: String,
        #[source]
        source: kube::Error,
    },
    /// A failed Cluster to move back was not read in this round (the next tries again).
    #[error("the Cluster could not be read this round")]
    NotRead {
        /// `namespace/name`.
        cluster: String,
    },
    #[error("writing the rollout status of StackRelease {release}: {}", kube_error(.source))]
    WriteStatus {
        release: String,
        #[source]
        source: kube::Error,
    },
    /// `stacksync rollout pause|resume` for a subscription whose rollouts are all in another
    /// phase (or that has none).
    #[error("subscription `{subscription}` has no {} rollout (see `kubectl get stackreleases`)", if *.resume { "paused" } else { "running" })]
    NoRollout { subscription: String, resume: bool },
    /// `stacksync rollout plan`: the management cluster could not be reached or Cluster API not
    /// found there.
    #[error("{0}")]
    Connect(#[source] Box<crate::targets::kubernetes::Error>),
    #[error("annotating StackRelease {release}: {}", kube_error(.source))]
    Annotate {
        release: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether trying again soon may succeed without anyone changing anything: the API server
    /// did not answer, was overloaded (429, 5xx), or the Cluster was written in between (409,
    /// re-read at the next check). A refusal (403, 404, 422), a client that cannot be built, or
    /// no rollout to pause or resume are not.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::ManagementClient(_) | Error::NoRollout { .. } => false,
            Error::NotRead { .. } => true,
            Error::Connect(e) => e.is_transient(),
            Error::ListReleases(e) | Error::ListClusters(e) | Error::ListClusterSyncs(e) => transient(e),
            Error::MoveCluster { source, .. } => matches!(source, kube::Error::Api(s) if s.code == 409) || transient(source),
            Error::WriteStatus { source, .. } | Error::Annotate { source, .. } => transient(source),
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ManagementClient(_) => "ManagementClient",
            Error::ListReleases(_) => "ListStackReleases",
            Error::ListClusters(_) => "ListClusters",
            Error::ListClusterSyncs(_) => "ListClusterSyncs",
            Error::MoveCluster { .. } => "MoveCluster",
            Error::NotRead { .. } => "ClusterNotRead",
            Error::WriteStatus { .. } => "WriteRolloutStatus",
            Error::NoRollout { .. } => "NoRollout",
            Error::Annotate { .. } => "AnnotateStackRelease",
            Error::Connect(e) => e.reason(),
        }
    }
}

/// No answer (transport, timeout), or an answer that says "later": 408, 429, 5xx.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 408 || s.code == 429 || s.code >= 500,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        let mut s = kube::core::Status::failure("m", "r");
        s.code = code;
        kube::Error::Api(s.boxed())
    }

    #[test]
    fn overload_and_conflicts_are_transient_refusals_are_not() {
        let list = |code| Error::ListClusters(api(code));
        assert!(list(429).is_transient() && list(503).is_transient());
        assert!(!list(403).is_transient() && !list(404).is_transient());
        let moved = |code| Error::MoveCluster { cluster: "ns/c".into(), source: api(code) };
        assert!(moved(409).is_transient(), "written in between: re-read at the next check");
        assert!(!moved(422).is_transient());
        assert!(!Error::NoRollout { subscription: "s".into(), resume: true }.is_transient());
        assert_eq!(moved(409).reason(), "MoveCluster");
    }

    #[test]
    fn messages_name_the_object_and_keep_the_server_words() {
        assert_eq!(Error::ListReleases(api(503)).to_string(), "listing StackReleases: m (503)");
        assert_eq!(
            Error::WriteStatus { release: "ferrol.v4".into(), source: api(404) }.to_string(),
            "writing the rollout status of StackRelease ferrol.v4: m (404)"
        );
        assert_eq!(
            Error::NoRollout { subscription: "ferrol".into(), resume: true }.to_string(),
            "subscription `ferrol` has no paused rollout (see `kubectl get stackreleases`)"
        );
        let e = Error::MoveCluster { cluster: "ns/c".into(), source: api(409) };
        assert!(std::error::Error::source(&e).is_some(), "the kube error is the source");
    }
}
