//! The controller's errors: why a release could not be prepared (`PrepareError`) and why the
//! work directory could not be made. `is_transient` decides retry-with-backoff versus Stalled;
//! `reason` is the stable string for conditions and metric labels.

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
    TrustFiles(#[source] crate::verify::KeyFileError),
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
