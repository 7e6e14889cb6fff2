//! The controller's errors: what a reconcile or a pass could not do, named after the operation,
//! with the Cluster it concerns. `is_transient` decides retry-with-backoff versus Stalled;
//! `reason` is the stable string for conditions and metric labels.

use crate::controller::kubernetes::kube_error;
use crate::model::ClusterKey;
use crate::status::Reason;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The management cluster's client could not be built (kubeconfig, in-cluster config).
    #[error("management cluster: {0}")]
    ManagementClient(#[source] crate::controller::kubernetes::ClientError),
    /// Asking the management cluster what it serves failed (not "Cluster API is missing").
    #[error("management cluster: discovering cluster.x-k8s.io: {}", kube_error(.0))]
    Discovery(#[source] kube::Error),
    #[error(
        "the management cluster serves no cluster.x-k8s.io Cluster (v1beta2 or v1beta1): is Cluster API installed? (kubectl get crd clusters.cluster.x-k8s.io)"
    )]
    ClusterApiMissing,
    #[error("management cluster: listing Clusters: {}", kube_error(.0))]
    ListClusters(#[source] kube::Error),
    /// The ClusterSync holds the inventory pruning works from; without it nothing is applied.
    #[error("cannot read ClusterSync {cluster} (its inventory decides what to prune): {}", kube_error(.source))]
    ReadStatus {
        cluster: ClusterKey,
        #[source]
        source: kube::Error,
    },
    #[error("cannot write ClusterSync {cluster}: {} (are the CRDs installed? kubectl apply -f deploy/crds/)", kube_error(.source))]
    WriteStatus {
        cluster: ClusterKey,
        #[source]
        source: kube::Error,
    },
    /// The apply-started status could not be written: nothing was applied (the status must
    /// never claim the old release while the new one goes in).
    #[error("cannot record on ClusterSync {cluster} that the apply of {tag} started: {}{}; nothing was applied", kube_error(.source), crd_hint(.source))]
    WriteProgress {
        cluster: ClusterKey,
        tag: String,
        #[source]
        source: kube::Error,
    },
    /// The Cluster could not be brought to its release; the reason and message are in its
    /// ClusterSync.
    #[error("{cluster}: {reason:?}: {message}")]
    Sync {
        cluster: ClusterKey,
        reason: Reason,
        message: String,
        transient: bool,
        /// The stage's own error, when one failed (a release that could not be prepared, a
        /// render); `message` already says it, this keeps the chain.
        #[source]
        source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
    },
}

/// A 404 on a ClusterSync write means its CRD is missing: say how to install it.
fn crd_hint(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if s.code == 404 => " (are the CRDs installed? kubectl apply -f deploy/crds/)",
        _ => "",
    }
}

impl Error {
    /// Whether trying again soon may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::ManagementClient(_) | Error::ClusterApiMissing => false,
            Error::Discovery(_)
            | Error::ListClusters(_)
            | Error::ReadStatus { .. }
            | Error::WriteStatus { .. }
            | Error::WriteProgress { .. } => true,
            Error::Sync { transient, .. } => *transient,
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ManagementClient(_) => "ManagementClient",
            Error::Discovery(_) => "Discovery",
            Error::ClusterApiMissing => "ClusterApiMissing",
            Error::ListClusters(_) => "ListClusters",
            Error::ReadStatus { .. } => "ReadStatus",
            Error::WriteStatus { .. } => "WriteStatus",
            Error::WriteProgress { .. } => "WriteProgress",
            Error::Sync { reason, .. } => reason.as_str(),
        }
    }
}

/// The process's work directory could not be made at start-up: nothing that needs it (helm,
/// cluster-stack layouts) can run until the process is restarted with a writable `TMPDIR`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot create a work directory under {}: {source}", dir.display())]
pub struct WorkDirError {
    pub dir: std::path::PathBuf,
    #[source]
    pub source: std::sync::Arc<std::io::Error>,
}

/// Why a subscription's release could not be prepared: selected, fetched, verified and put in
/// the cache. `is_transient` splits what backs off (a source or the cache volume that may come
/// back) from what waits for its input to change — a new poll, a new release, the config — and
/// makes the Cluster `Stalled` meanwhile.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("unknown source `{0}`")]
    UnknownSource(String),
    /// No release fits the subscription.
    #[error("{0}")]
    Select(#[source] crate::release::Error),
    #[error("{0} releases in a row were refused for their signatures; see the log")]
    SignatureRetries(usize),
    /// The directory target's syncer has not prepared this subscription's release yet.
    #[error("subscription {0} has no release prepared yet")]
    NotPrepared(String),
    /// The release in use no longer verifies (a moved tag, a pin, a refused signature): held.
    #[error("{message}")]
    Unverified { reason: crate::status::Reason, message: String },
    /// A GitHub release the last listing does not have, and not cached either.
    #[error("release {tag} is not in the last listing of {repo} and not in the cache")]
    NotListed { tag: String, repo: String },
    /// A GitHub release whose assets changed since its tag was accepted.
    #[error("release {tag}: assets changed since they were accepted (moved tag); refusing")]
    AssetsMoved { tag: String },
    /// A GitHub release's asset signatures do not verify against the source's keys.
    #[error("{0}")]
    Signature(String),
    /// The source's trusted key files cannot be read or parsed.
    #[error("{0}")]
    TrustFiles(#[source] verify::KeyFileError),
    /// Writing the release tree into the cache (Git releases: reading it from the mirror).
    #[error("{0}")]
    Cache(#[source] crate::cache::Error),
    /// Downloading and verifying a GitHub release's assets.
    #[error("{0}")]
    Download(#[source] crate::source::github::materialise::DownloadError),
    #[error("{0}")]
    Github(#[source] crate::source::github::Error),
    #[error("{0}")]
    Oci(#[source] crate::source::oci::Error),
    #[error("cannot open blob store: {0}")]
    Blobs(#[source] std::io::Error),
    #[error("materialise task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

impl PrepareError {
    /// Whether trying again soon may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        match self {
            PrepareError::UnknownSource(_)
            | PrepareError::Select(_)
            | PrepareError::SignatureRetries(_)
            | PrepareError::Unverified { .. }
            | PrepareError::NotListed { .. }
            | PrepareError::AssetsMoved { .. }
            | PrepareError::Signature(_)
            | PrepareError::TrustFiles(_) => false,
            PrepareError::NotPrepared(_) | PrepareError::Blobs(_) | PrepareError::Task(_) => true,
            PrepareError::Cache(e) => e.is_transient(),
            PrepareError::Download(e) => e.is_transient(),
            PrepareError::Github(e) => e.is_transient(),
            PrepareError::Oci(e) => e.is_transient(),
        }
    }

    /// The reason a cluster's status gets: `ReleaseUnavailable` for what may pass by itself
    /// (Reconciling), `SignatureInvalid` or `ReleaseRefused` for what needs a change (Stalled).
    pub fn status_reason(&self) -> crate::status::Reason {
        use crate::status::Reason;
        if self.is_transient() {
            Reason::ReleaseUnavailable
        } else if self.is_signature() {
            Reason::SignatureInvalid
        } else if let PrepareError::Unverified { reason, .. } = self {
            *reason
        } else if matches!(self, PrepareError::Select(_)) {
            Reason::ReleaseNotAvailable
        } else {
            Reason::ReleaseRefused
        }
    }

    /// Whether it is a signature refused (the Cluster's reason is then `SignatureInvalid`).
    pub fn is_signature(&self) -> bool {
        matches!(self, PrepareError::Signature(_) | PrepareError::SignatureRetries(_))
            || matches!(self, PrepareError::Unverified { reason: crate::status::Reason::SignatureInvalid, .. })
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            PrepareError::UnknownSource(_) => "UnknownSource",
            PrepareError::Select(e) => e.reason(),
            PrepareError::SignatureRetries(_) => "SignaturesRefused",
            PrepareError::NotPrepared(_) => "NotPrepared",
            PrepareError::Unverified { reason, .. } => reason.as_str(),
            PrepareError::NotListed { .. } => "ReleaseNotListed",
            PrepareError::AssetsMoved { .. } => "AssetsMoved",
            PrepareError::Signature(_) => "SignatureInvalid",
            PrepareError::TrustFiles(_) => "TrustFiles",
            PrepareError::Cache(e) => e.reason(),
            PrepareError::Download(e) => e.reason(),
            PrepareError::Github(e) => e.reason(),
            PrepareError::Oci(e) => e.reason(),
            PrepareError::Blobs(_) => "BlobStore",
            PrepareError::Task(_) => "Task",
        }
    }
}
