//! The Kubernetes target's errors: what a reconcile or a pass could not do, named after the
//! operation, with the Cluster it concerns. `is_transient` decides retry-with-backoff versus
//! Stalled; `reason` is the stable string for conditions and metric labels. Why the management
//! cluster's client could not be made ([`ClientError`]), and how a kube error reads in a message
//! ([`kube_error`]).

use crate::model::ClusterKey;
use crate::status::Reason;

/// A kube error for a message: the API server's own message for an API error, otherwise the
/// error with its cause (a bare "error sending request" says nothing).
pub(crate) fn kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => applier::ssa::with_causes(other),
    }
}

/// Why the management cluster's client could not be made. Never transient by itself: the
/// kubeconfig (or the in-cluster environment) must change.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {}: {source}", path.display())]
    ReadKubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no in-cluster config and no usable $KUBECONFIG: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the client: {0}")]
    Build(#[source] kube::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The management cluster's client could not be built (kubeconfig, in-cluster config).
    #[error("management cluster: {0}")]
    ManagementClient(#[source] ClientError),
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
    #[error("cannot write ClusterSync {cluster}: {}{}", kube_error(.source), crd_hint(.source))]
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
    #[error("{cluster}: {}: {message}", reason.as_str())]
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
    /// `stacksync preview` cannot go on (the Cluster asked for is not covered, the release
    /// cannot be read).
    #[error("{0}")]
    Preview(String),
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
            Error::ManagementClient(_) | Error::ClusterApiMissing | Error::Preview(_) => false,
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
            Error::Preview(_) => "Preview",
        }
    }
}
