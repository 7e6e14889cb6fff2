//! Why a Cluster's sync ended before its objects were in place, typed until its `ClusterSync`
//! is written: the reconcile turns a [`Fail`] into the status's reason, message and
//! `Stalled`/`Reconciling` there, and into the controller's [`super::super::Error::Sync`] (with the
//! stage's error as its source) when it is retried.

use std::sync::Arc;

use super::super::error::kube_error;
use super::stages::StagesError;
use super::workload::WorkloadError;
use crate::controller::PrepareError;
use crate::status::Reason;

#[derive(Debug, thiserror::Error)]
pub(in crate::targets::kubernetes) enum Fail {
    #[error("control plane is not ready yet")]
    ControlPlaneNotReady,
    /// The Cluster's class names a release whose signature was refused.
    #[error("{message}; what the Cluster has stays")]
    ClassRefused { message: String },
    /// The Cluster's class names no release the source offers or the cache holds.
    #[error("{0}; what the Cluster has stays")]
    ClassUnknown(#[source] crate::release::ClassError),
    /// No release fits the subscription: nothing matches until a source offers another tag or
    /// the config another constraint (both bring the Cluster back).
    #[error("{0}")]
    Select(#[source] crate::release::Error),
    /// The release could not be prepared: transient (the source or the cache volume may come
    /// back) is `ReleaseUnavailable`; anything else needs a change. `release` is the one wanted.
    #[error("{source}")]
    Prepare {
        release: Box<crate::release::Release>,
        #[source]
        source: Arc<PrepareError>,
    },
    /// The release's stages could not be rendered for the Cluster; `release` is the one wanted.
    #[error("{source}")]
    Stages {
        release: Box<crate::release::Release>,
        #[source]
        source: StagesError,
    },
    #[error("{0}")]
    Workload(#[source] WorkloadError),
    /// The workload cluster did not answer the sync's first request: nothing was sent.
    #[error("{0}")]
    Unreachable(String),
    /// The sync ran, and the Cluster is not ready for a reason that is no failure of a step
    /// (objects failed to apply, not healthy yet): retried soon.
    #[error("{message}")]
    NotReady { reason: Reason, message: String },
    /// The apply-started status could not be written (for this release tag): nothing was
    /// applied, and no other status is written this round.
    #[error("cannot record that the apply of {tag} started: {}", kube_error(.source))]
    Unrecorded {
        tag: String,
        #[source]
        source: kube::Error,
    },
}

impl Fail {
    /// The reason the Cluster's status gets.
    pub(in crate::targets::kubernetes) fn reason(&self) -> Reason {
        match self {
            Fail::ControlPlaneNotReady => Reason::ControlPlaneNotReady,
            Fail::ClassRefused { .. } => Reason::SignatureInvalid,
            Fail::ClassUnknown(_) | Fail::Select(_) => Reason::ReleaseNotAvailable,
            Fail::Prepare { source: e, .. } => e.status_reason(),
            Fail::Stages { source: e, .. } => e.reason(),
            Fail::Workload(e) => e.reason(),
            Fail::Unreachable(_) => Reason::ClusterUnreachable,
            Fail::NotReady { reason, .. } => *reason,
            Fail::Unrecorded { .. } => Reason::TransientError,
        }
    }

    /// Whether to retry soon (Reconciling) rather than wait for a change (Stalled).
    pub(in crate::targets::kubernetes) fn is_transient(&self) -> bool {
        match self {
            Fail::ClassRefused { .. } | Fail::ClassUnknown(_) | Fail::Select(_) => false,
            Fail::Prepare { source: e, .. } => e.is_transient(),
            Fail::Stages { source: e, .. } => e.is_transient(),
            Fail::ControlPlaneNotReady | Fail::Workload(_) | Fail::Unreachable(_) | Fail::NotReady { .. } | Fail::Unrecorded { .. } => true,
        }
    }

    /// The release the Cluster wants, when the failed step knew it (a render failure): the
    /// status names it as `wantedRelease` beside the failure.
    pub(in crate::targets::kubernetes) fn wanted(&self) -> Option<&crate::release::Release> {
        match self {
            Fail::Stages { release, .. } | Fail::Prepare { release, .. } => Some(release),
            _ => None,
        }
    }

    /// The error's own stable reason, for the `Stalled` condition of a permanent failure.
    pub(in crate::targets::kubernetes) fn cause(&self) -> Option<&'static str> {
        match self {
            Fail::Select(e) => Some(e.reason()),
            Fail::Prepare { source: e, .. } => Some(e.reason()),
            Fail::Stages { source: e, .. } => e.kind(),
            _ => None,
        }
    }

    /// The stage's error itself, kept as the controller error's source.
    pub(in crate::targets::kubernetes) fn into_source(self) -> Option<Arc<dyn std::error::Error + Send + Sync>> {
        match self {
            Fail::Prepare { source: e, .. } => Some(e),
            Fail::Select(e) => Some(Arc::new(e)),
            Fail::ClassUnknown(e) => Some(Arc::new(e)),
            Fail::Stages { source: e, .. } => Some(Arc::new(e)),
            Fail::Workload(e) => Some(Arc::new(e)),
            Fail::Unrecorded { source, .. } => Some(Arc::new(source)),
            Fail::ControlPlaneNotReady | Fail::ClassRefused { .. } | Fail::Unreachable(_) | Fail::NotReady { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> crate::release::Release {
        crate::release::Release {
            source: "s".into(),
            tag: "v2.0.0".into(),
            commit: "c".repeat(40),
            version: crate::model::version::Version::from_tag("v2.0.0").expect("a version"),
        }
    }

    #[test]
    fn each_failure_has_its_reason_and_retry() {
        let not_ready = Fail::NotReady { reason: Reason::Unhealthy, message: "m".into() };
        let table = [
            (Fail::ControlPlaneNotReady, Reason::ControlPlaneNotReady, true, "control plane is not ready yet"),
            (
                Fail::ClassRefused { message: "v2 is unsigned".into() },
                Reason::SignatureInvalid,
                false,
                "v2 is unsigned; what the Cluster has stays",
            ),
            (Fail::Unreachable("no answer".into()), Reason::ClusterUnreachable, true, "no answer"),
            (not_ready, Reason::Unhealthy, true, "m"),
            (
                Fail::Workload(WorkloadError::SecretMissing { secret: "ns/c-kubeconfig".into() }),
                Reason::KubeconfigMissing,
                true,
                "Secret ns/c-kubeconfig does not exist yet",
            ),
            (
                Fail::Prepare { release: Box::new(v2()), source: Arc::new(PrepareError::UnknownSource("s".into())) },
                Reason::ReleaseRefused,
                false,
                "unknown source `s`",
            ),
        ];
        for (fail, reason, transient, message) in table {
            assert_eq!((fail.reason(), fail.is_transient(), fail.to_string()), (reason, transient, message.to_owned()), "{fail:?}");
        }
    }

    /// Regression: a release that could not be prepared (a full or read-only cache volume) left
    /// `wantedRelease` at the release applied before, while the message named the new one.
    #[test]
    fn a_release_not_prepared_is_the_one_wanted() {
        let fail = Fail::Prepare { release: Box::new(v2()), source: Arc::new(PrepareError::UnknownSource("s".into())) };
        assert_eq!(fail.wanted().map(|r| r.tag.as_str()), Some("v2.0.0"));
    }
}
