//! Status: what is true about each cluster after a sync, as a document operators read
//! (`<out>/status/<namespace>/<cluster>.yaml` for the directory target). Built by a pure function
//! from the change set; the target writes it only when it changed.

pub mod crd;
pub mod desired;
pub mod shards;

use serde::{Deserialize, Serialize};

use crate::config::Subscription;
use crate::model::cluster::ClusterConfig;
use crate::release::Release;
use applier::changeset::{ChangeSet, ObjectRef};

pub const API_VERSION: &str = "stacksync.io/v1alpha1";
pub const KIND: &str = "ClusterSyncStatus";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub api_version: String,
    pub kind: String,
    pub cluster: ClusterRef,
    pub subscription: String,
    pub source: String,
    /// The release the subscription selected at the last pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted_release: Option<ReleaseRef>,
    /// The release whose objects are in place; differs from `wantedRelease` while a new release
    /// cannot be rendered or applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_release: Option<ReleaseRef>,
    /// True only when the wanted release is applied and every object is synced.
    pub ready: bool,
    pub reason: Reason,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub synced: usize,
    pub total: usize,
    #[serde(default)]
    pub objects: Vec<ObjectStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRef {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRef {
    pub tag: String,
    pub version: String,
    /// The commit (Git) or the asset-set revision (GitHub).
    pub commit: String,
    /// GitHub releases: every asset with its digest and how it was verified.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assets: Vec<AssetStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssetStatus {
    pub name: String,
    pub digest: String,
    pub verified_by: crate::model::verification::VerifiedBy,
}

impl From<&Release> for ReleaseRef {
    fn from(r: &Release) -> Self {
        ReleaseRef { tag: r.tag.clone(), version: r.version.to_string(), commit: r.commit.clone(), assets: Vec::new() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Every object of the wanted release is in place.
    Synced,
    /// Some objects failed to apply; see their messages.
    NotSynced,
    /// The wanted release could not be rendered for this cluster; the applied release stays.
    RenderFailed,
    /// The release could not be fetched for a reason that may pass by itself (the source did
    /// not answer, the cache volume failed); retried with backoff, whatever was applied stays.
    ReleaseUnavailable,
    /// Kubernetes target: the Cluster object does not exist (yet).
    ClusterNotFound,
    /// Kubernetes target: the cluster's control plane is not ready yet; retried shortly.
    ControlPlaneNotReady,
    /// Kubernetes target: the `<cluster>-kubeconfig` Secret does not exist yet; retried shortly.
    KubeconfigMissing,
    /// Kubernetes target: the workload cluster could not be reached.
    ClusterUnreachable,
    /// More objects would be pruned than `pruneLimit` allows: pruning paused, nothing deleted.
    PrunePaused,
    /// Kubernetes target: the Cluster's ClusterClass names a release the subscription does not
    /// offer (unknown tag, another stack), or no release matches the subscription's
    /// constraint; what the Cluster has stays (Stalled until a source or the config changes).
    ReleaseNotAvailable,
    /// The Cluster is paused (`spec.paused`, or the `cluster.x-k8s.io/paused` annotation):
    /// nothing is written to it.
    Paused,
    /// The subscription is suspended (`suspend: true`): nothing is written.
    Suspended,
    /// The process's work directory could not be created: nothing can be rendered.
    WorkDirUnavailable,
    /// Every object is applied; some are not healthy yet (rolling out), within `healthTimeout`.
    Progressing,
    /// Some objects did not become healthy within `healthTimeout`, or failed (a Job, a rollout
    /// past its deadline).
    Unhealthy,
    /// Cluster stacks: an upgrade stage (`BeforeClusterUpgrade`) timed out waiting for its
    /// condition or could not be applied; the new release's addons are not applied.
    UpgradeFailed,
    /// Some objects failed, each for a reason that may pass by itself (a timeout, 5xx, 429, a
    /// connection cut): retried with backoff, not stalled.
    TransientError,
    /// The tag of the release in use moved to another commit (or no longer matches its pin) and
    /// the source refused it: the verified commit stays applied until someone decides.
    TagRefused,
    /// The release in use no longer satisfies a pin of the config (`git.pins`,
    /// `github.digests`): it is not applied again and what is in place stays until a release
    /// that verifies is available.
    PinMismatch,
    /// A release's signature does not verify against the source's `verify` keys (unsigned, an
    /// untrusted key, tampered, a key rotated out): it is never applied; a release in use stays.
    SignatureInvalid,
    /// The release cannot be used as it is published: a digest or size that does not match,
    /// an unsafe archive, assets changed since they were accepted, a release its source no
    /// longer lists. It is not retried until its input changes (a new poll, a new release, the
    /// config, the resync): Stalled, with the error's own reason on the `Stalled` condition.
    ReleaseRefused,
}

impl Reason {
    /// The stable name of the reason, as conditions and metrics carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Synced => "Synced",
            Reason::NotSynced => "NotSynced",
            Reason::RenderFailed => "RenderFailed",
            Reason::ReleaseUnavailable => "ReleaseUnavailable",
            Reason::ClusterNotFound => "ClusterNotFound",
            Reason::ControlPlaneNotReady => "ControlPlaneNotReady",
            Reason::KubeconfigMissing => "KubeconfigMissing",
            Reason::ClusterUnreachable => "ClusterUnreachable",
            Reason::PrunePaused => "PrunePaused",
            Reason::ReleaseNotAvailable => "ReleaseNotAvailable",
            Reason::Paused => "Paused",
            Reason::Suspended => "Suspended",
            Reason::WorkDirUnavailable => "WorkDirUnavailable",
            Reason::Progressing => "Progressing",
            Reason::Unhealthy => "Unhealthy",
            Reason::UpgradeFailed => "UpgradeFailed",
            Reason::TransientError => "TransientError",
            Reason::TagRefused => "TagRefused",
            Reason::PinMismatch => "PinMismatch",
            Reason::SignatureInvalid => "SignatureInvalid",
            Reason::ReleaseRefused => "ReleaseRefused",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub synced: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Release-relative file the object was rendered from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The chart of a cluster-stack object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// The addon stage (or `cluster-class`) of a cluster-stack object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
}

impl ObjectStatus {
    pub fn object(&self) -> ObjectRef {
        ObjectRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl ClusterStatus {
    fn new(sub: &Subscription, cluster: &ClusterConfig) -> ClusterStatus {
        ClusterStatus {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            cluster: ClusterRef { namespace: cluster.namespace.clone(), name: cluster.name.clone() },
            subscription: sub.name.clone(),
            source: sub.source.clone(),
            wanted_release: None,
            applied_release: None,
            ready: false,
            reason: Reason::ReleaseUnavailable,
            message: String::new(),
            synced: 0,
            total: 0,
            objects: Vec::new(),
        }
    }

    /// Status after applying `release`: ready only when every object is synced, and `release`
    /// recorded as applied only then — otherwise `previous` (the release in place before) stays.
    pub fn applied(
        sub: &Subscription,
        cluster: &ClusterConfig,
        release: &Release,
        changes: &ChangeSet,
        previous: Option<ReleaseRef>,
    ) -> ClusterStatus {
        let objects: Vec<ObjectStatus> = changes
            .entries
            .iter()
            .filter(|e| e.is_release_object())
            .map(|e| ObjectStatus {
                api_version: e.object.api_version.clone(),
                kind: e.object.kind.clone(),
                namespace: e.object.namespace.clone(),
                name: e.object.name.clone(),
                synced: e.is_synced(),
                message: e.message.clone(),
                source: e.file.clone(),
                chart: e.chart.clone(),
                stage: e.stage.clone(),
            })
            .collect();
        // A failed prune is listed too (not synced): the cluster holds an object it should not.
        let synced = objects.iter().filter(|o| o.synced).count();
        let total = objects.len();
        let all = synced == total;
        // The first problem, named: what `kubectl get` shows in its MESSAGE column.
        let message = match objects.iter().find(|o| !o.synced) {
            None => String::new(),
            Some(first) => {
                let more = total - synced - 1;
                let tail = if more > 0 { format!(" (and {more} more of {total} objects not synced)") } else { String::new() };
                format!("{}: {}{tail}", first.object(), first.message)
            }
        };
        ClusterStatus {
            wanted_release: Some(release.into()),
            applied_release: if all { Some(release.into()) } else { previous },
            ready: all,
            reason: if all { Reason::Synced } else { Reason::NotSynced },
            message,
            synced,
            total,
            objects,
            ..ClusterStatus::new(sub, cluster)
        }
    }

    /// Status when the wanted release (if any) could not be put in place: the previous status's
    /// applied release and objects stay as they were; only readiness and the reason change.
    pub fn failed(
        sub: &Subscription,
        cluster: &ClusterConfig,
        wanted: Option<&Release>,
        previous: Option<ClusterStatus>,
        reason: Reason,
        message: String,
    ) -> ClusterStatus {
        let base = ClusterStatus::new(sub, cluster);
        let (applied_release, objects) = match previous {
            Some(p) if p.subscription == sub.name => (p.applied_release, p.objects),
            _ => (None, Vec::new()),
        };
        let synced = objects.iter().filter(|o| o.synced).count();
        ClusterStatus {
            wanted_release: wanted.map(Into::into),
            applied_release,
            ready: false,
            reason,
            message,
            synced,
            total: objects.len(),
            objects,
            ..base
        }
    }

    /// Takes `Ready`, its reason and message as [`desired::verdict`] decided them.
    pub fn decided(&mut self, v: desired::Verdict) {
        self.ready = v.ready;
        self.reason = v.reason;
        self.message = v.message;
    }

    /// Records the digests of a GitHub release's assets on the wanted and applied release when
    /// they are that release.
    pub fn with_assets(mut self, tag: &str, commit: &str, assets: &[crate::model::verification::AssetRecord]) -> ClusterStatus {
        let list: Vec<AssetStatus> =
            assets.iter().map(|a| AssetStatus { name: a.name.clone(), digest: a.digest.clone(), verified_by: a.verified_by }).collect();
        for r in [self.wanted_release.as_mut(), self.applied_release.as_mut()].into_iter().flatten() {
            if r.tag == tag && r.commit == commit {
                r.assets = list.clone();
            }
        }
        self
    }
}
