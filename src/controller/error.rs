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
    /// The release could not be put into the cache (fetched, verified, unpacked).
    #[error("{0}")]
    Source(#[from] crate::source::ReleaseError),
}

impl PrepareError {
    /// Whether trying again soon may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        match self {
            PrepareError::UnknownSource(_)
            | PrepareError::Select(_)
            | PrepareError::SignatureRetries(_)
            | PrepareError::Unverified { .. } => false,
            PrepareError::NotPrepared(_) => true,
            PrepareError::Source(e) => e.is_transient(),
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
        matches!(self, PrepareError::SignatureRetries(_))
            || matches!(self, PrepareError::Source(e) if e.is_signature())
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
            PrepareError::Source(e) => e.reason(),
        }
    }
}
