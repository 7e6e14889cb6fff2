//! The controller's errors: why a release could not be prepared (`PrepareError`), why a
//! cluster stack could not be rendered (`RenderError`) and why the work directory could not be
//! made. `is_transient` decides retry-with-backoff versus Stalled;
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

/// Why a cluster stack could not be rendered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RenderError {
    /// The process's work directory could not be created: nothing can be rendered.
    #[error("{0}")]
    WorkDir(#[from] WorkDirError),
    /// helm is missing or unusable.
    #[error("{0}")]
    Helm(#[source] crate::render::helm::Error),
    /// The release's layout (metadata, charts, archives) is invalid.
    #[error("{0}")]
    Release(#[source] crate::render::Errors),
    /// Reading the release's layout did not finish (the blocking task panicked or was
    /// cancelled at shutdown).
    #[error("load task failed: {0}")]
    Task(#[source] std::sync::Arc<tokio::task::JoinError>),
    /// A values template, helm or an object failed; every problem of every stage.
    #[error("{0}")]
    Render(#[source] crate::render::Errors),
    /// One object rendered by two stages: each would apply its own version on every pass and
    /// the cluster would never settle.
    #[error("{object} is rendered by stages `{first}` and `{second}`; an object belongs to one stage")]
    TwoStages { object: String, first: String, second: String },
}

impl RenderError {
    /// The condition reason a Cluster gets.
    pub fn reason(&self) -> crate::status::Reason {
        match self {
            RenderError::WorkDir(_) => crate::status::Reason::WorkDirUnavailable,
            _ => crate::status::Reason::RenderFailed,
        }
    }

    /// Whether it may pass by itself (a work directory may become writable, a task cut at
    /// shutdown, helm out of time on a busy machine); a broken release or a missing helm needs
    /// a change.
    pub fn is_transient(&self) -> bool {
        match self {
            RenderError::WorkDir(_) | RenderError::Task(_) => true,
            RenderError::Helm(e) => e.is_transient(),
            RenderError::Release(e) | RenderError::Render(e) => e.is_transient(),
            RenderError::TwoStages { .. } => false,
        }
    }

    /// A short stable name of what failed (metric labels, logs).
    pub fn kind(&self) -> &'static str {
        match self {
            RenderError::WorkDir(_) => "WorkDir",
            RenderError::Helm(_) => "Helm",
            RenderError::Release(_) => "Release",
            RenderError::Task(_) => "Task",
            RenderError::Render(_) => "Render",
            RenderError::TwoStages { .. } => "TwoStages",
        }
    }

    /// As the directory target reports render problems: one [`crate::render::Errors`].
    pub fn into_errors(self, file: &str) -> crate::render::Errors {
        match self {
            RenderError::Render(e) => e,
            other => crate::render::Errors(vec![crate::render::Error::Release { file: file.to_owned(), message: other.to_string() }]),
        }
    }
}
