//! The status resources of the Kubernetes target, as Rust types: `ClusterSync` (one per cluster,
//! next to its Cluster) and `StackRelease` (one per subscription × release). Their CRDs are
//! generated from these types (`stacksync crds`, committed in `deploy/crds/`).
//!
//! Size: a `ClusterSync` must stay far below the API server's object limit (~1.5 MiB) with
//! 5,000 objects. It keeps every object only as one compact inventory string
//! (`group|kind|namespace|name|version`, ~60 bytes: ~300 KB at 5,000 objects), and full entries
//! only for objects that are not synced, capped at [`MAX_ENTRIES`] (the rest counted in
//! `entriesTruncated`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Full per-object entries kept in a `ClusterSync` status.
pub const MAX_ENTRIES: usize = 200;

/// Sync state of one workload cluster for one subscription.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "stacksync.io",
    version = "v1alpha1",
    kind = "ClusterSync",
    namespaced,
    status = "ClusterSyncStatus",
    shortname = "csync",
    category = "stacksync",
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".status.class"}"#,
    printcolumn = r#"{"name":"Selected By","type":"string","jsonPath":".status.selectedBy"}"#,
    printcolumn = r#"{"name":"Subscription","type":"string","priority":1,"jsonPath":".spec.subscription"}"#,
    printcolumn = r#"{"name":"Wanted","type":"string","priority":1,"jsonPath":".status.wantedRelease.tag"}"#,
    printcolumn = r#"{"name":"Newest","type":"string","priority":1,"jsonPath":".status.newestAvailable"}"#,
    printcolumn = r#"{"name":"Applied","type":"string","jsonPath":".status.appliedRelease.tag"}"#,
    printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.objects"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message"}"#,
    printcolumn = r#"{"name":"Last Sync","type":"date","jsonPath":".status.lastSyncTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSyncSpec {
    /// The Cluster API `Cluster` this record is about (same namespace).
    pub cluster: String,
    /// The subscription that owns the cluster.
    pub subscription: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSyncStatus {
    /// The Cluster's `spec.topology.class` (cluster stacks: it names the release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// What chose the release: `class` (a cluster-stack subscription: the Cluster's class names
    /// it) or `subscription` (the subscription's version constraint: the class is not followed,
    /// so `class` and `appliedRelease` may differ by design).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_by: Option<String>,
    /// The newest release the subscription offers (cluster stacks: moving to it is a class
    /// change of the Cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_available: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted_release: Option<ReleaseRefStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_release: Option<ReleaseRefStatus>,
    /// Objects synced and objects known.
    pub synced: u32,
    pub total: u32,
    /// `synced/total`, for the `SYNCED` column.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub objects: String,
    /// The first problem, shortened (the `Ready` condition's message while it is not `True`),
    /// for the `MESSAGE` column; the whole story is in `conditions` and `entries`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// `Ready`, `Reconciling`, `Stalled`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// sha256 of the rendered set last applied.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rendered_digest: String,
    /// What rendered the charts of the release last applied: helm's version and how
    /// (`helm v4.3.2, library renderer` or `helm v4.1.4, helm binary`); empty for a release of
    /// plain manifests.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rendered_by: String,
    /// Objects that are not synced (all of them up to [`MAX_ENTRIES`]).
    #[serde(default)]
    pub entries: Vec<ObjectEntry>,
    /// Not-synced objects beyond [`MAX_ENTRIES`], counted but not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub entries_truncated: u32,
    /// Every object applied, `group|kind|namespace|name|version|digest|fields`: what the next
    /// release prunes against, the manifest digest applied and a hash of the fields stacksync owns.
    #[serde(default)]
    pub inventory: Vec<String>,
    /// Fields the charts generate at render time (certificates, keys, passwords, checksums of
    /// them), `group|kind|namespace|name|pointer` (pointers only, never a value): every sync
    /// keeps their live values. Found by rendering each chart twice (or recorded by
    /// `stacksync adopt`); remove a line to have the field rendered anew (docs/clusterstacks.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generated: Vec<String>,
    /// The certificates among the generated fields: when the soonest is renewed, and the last
    /// rotation of the generated values (`stacksync rotate`, or a certificate due).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_rotation: Option<GeneratedRotation>,
    /// Set by `stacksync adopt` (what the Cluster was adopted from, and when) until the first
    /// sync applies its release: meanwhile its upgrades are held, even while its subscription
    /// is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When a reconcile of this Cluster last finished (RFC 3339): the daemon is alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<String>,
    /// The last `stacksync.io/reconcile-requested-at` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// Cluster stacks: the stages run one by one for the last release change
    /// (`BeforeClusterUpgrade`) or first install with waits (`AfterControlPlaneInitialized`):
    /// where they are (a restart resumes here) or that they are done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
}

/// When a Cluster's generated values are rotated, and when they last were.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratedRotation {
    /// When the generated certificate soonest due is renewed (RFC 3339): two thirds into its
    /// lifetime. The sync after that moment renders and applies every generated value anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<String>,
    /// When that certificate expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the generated values were last rotated (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotated: Option<String>,
    /// Why: `Requested` (`stacksync rotate`) or `CertificateDue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
    /// The last `stacksync.io/rotate-generated-at` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_request: Option<String>,
}

/// Progress of one release change's upgrade stages.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// The hook whose stages run (`BeforeClusterUpgrade`, `AfterControlPlaneInitialized`).
    pub hook: String,
    /// The release tag the Cluster had (its `appliedRelease`; empty for a first install).
    pub from: String,
    /// The release tag it moves to.
    pub to: String,
    /// The stage running (0-based); equal to `stages` when all are done.
    pub stage_index: u32,
    pub stages: u32,
    /// The stage's name (empty when done).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stage: String,
    /// `PreCondition`, `Apply`, `PostCondition` or `Done`.
    pub phase: String,
    /// What the stage waits for: the objects and the expression, and why it is not met yet.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waiting_for: String,
    /// When this phase began (RFC 3339): `stageTimeout` counts from here.
    pub since: String,
    /// Set when the stage failed or timed out: why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure: String,
}

/// Annotation on a `ClusterSync` asking for a reconcile now (any new value; `stacksync
/// reconcile` writes the time). Echoed in `status.lastHandledReconcileAt` once handled.
pub const RECONCILE_REQUESTED_AT: &str = "stacksync.io/reconcile-requested-at";

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseRefStatus {
    pub tag: String,
    pub version: String,
    /// Git commit, or the revision of a GitHub release's asset set.
    pub commit: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectEntry {
    pub group: String,
    pub version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub synced: bool,
    /// Created, Configured, Unchanged, Pruned, Skipped or Failed.
    pub action: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
    /// Not healthy yet (`Progressing: …`) or failed (`Failed: …`), by kstatus rules; empty when
    /// healthy (or not checked).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health: String,
}

/// A status condition (the shape of `metav1.Condition`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    /// RFC 3339; changes only when `status` changes.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One release a subscription has seen, with its verification and the result of applying its
/// ClusterClass objects to the management cluster. Cluster-scoped.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "stacksync.io",
    version = "v1alpha1",
    kind = "StackRelease",
    status = "StackReleaseStatus",
    shortname = "srel",
    category = "stacksync",
    printcolumn = r#"{"name":"Subscription","type":"string","jsonPath":".spec.subscription"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source"}"#,
    printcolumn = r#"{"name":"Tag","type":"string","jsonPath":".spec.tag"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"VerifiedBy","type":"string","jsonPath":".status.verifiedBy"}"#,
    printcolumn = r#"{"name":"Clusters","type":"string","jsonPath":".status.clusters.summary"}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".status.rollout.summary"}"#,
    printcolumn = r#"{"name":"RolloutPhase","type":"string","jsonPath":".status.rollout.phase"}"#,
    printcolumn = r#"{"name":"Wave","type":"string","priority":1,"jsonPath":".status.rollout.waveSummary"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StackReleaseSpec {
    pub subscription: String,
    pub source: String,
    pub tag: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackReleaseStatus {
    pub version: String,
    /// Git commit, or the revision of a GitHub release's asset set.
    pub commit: String,
    /// GitHub assets with their digests.
    #[serde(default)]
    pub assets: Vec<AssetDigest>,
    /// Every asset's digest was checked (Git: objects are content-addressed).
    pub verified: bool,
    /// How: `git`, or the asset verifications present (`published`, `checksums` — an unsigned
    /// checksums file of the same release —, `pinned`, `unverified`), joined with `+`; then the
    /// signer when the source verifies signatures (`git+ssh:SHA256:…`).
    #[serde(default)]
    pub verified_by: String,
    /// Sources with `verify`: who signed the release — `ssh:SHA256:<base64>`,
    /// `openpgp:<FINGERPRINT>` or `cosign:SHA256:<base64>` (also at the end of `verifiedBy`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signed_by: String,
    /// Phase `Refused`: why the release's signature was refused — the tag, the signer found (or
    /// `unsigned`) and the trusted keys' fingerprints.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refusal: String,
    pub cached: bool,
    /// `Available` (seen, not selected), `Selected`, `Applied`, `Failed`, `Refused` (its
    /// signature does not verify: never applied).
    pub phase: String,
    /// `Ready` (the release's objects are applied and every Cluster running it is synced and
    /// healthy) and `Reconciling`, written from the ClusterSyncs (see `clusters`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The Clusters running this release (their applied release, else the one being applied),
    /// by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterCounts>,
    /// Objects of the ClusterClass apply that are not synced.
    #[serde(default)]
    pub entries: Vec<ObjectEntry>,
    pub synced: u32,
    pub total: u32,
    /// Each shard's own part (the unsharded controller is one part, [`UNSHARDED`]), written by
    /// that shard alone with its own field manager ([`shard_manager`]): what its ClusterClass
    /// apply gave, its Clusters, and when it last said it is alive. `phase`, `entries`,
    /// `synced` and `total` above are the roll-up of every part; `clusters` and `conditions`
    /// count the whole fleet, a stale part's Clusters never as ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub shards: Vec<ShardStatus>,
    /// The ClusterClass objects applied for this release, `group|kind|namespace|name|version`:
    /// what is deleted when the release is no longer offered and no Cluster uses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub class_inventory: Vec<String>,
    /// The rollout that moves the subscription's Clusters to this release (`rollout:` in the
    /// config), written with its own field manager: where it is, and why it paused. A restart
    /// resumes from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// The name of the unsharded controller's part in `status.shards` (not a label value: no
/// shard can be named so).
pub const UNSHARDED: &str = "(unsharded)";

/// The field manager of a shard's part: `stacksync-shard-<name>`, `stacksync-shard` for the
/// unsharded controller.
pub fn shard_manager(shard: &str) -> String {
    if shard == UNSHARDED { "stacksync-shard".to_owned() } else { format!("stacksync-shard-{shard}") }
}

/// One shard's part of a `StackRelease`: written by that shard only, all of it at once.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// The shard (`--shard`), or `(unsharded)`.
    pub name: String,
    /// What this shard's ClusterClass apply gave: `Selected`, `Applied` or `Failed` (empty: it
    /// applied none yet).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Objects of this shard's ClusterClass apply that are not synced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<ObjectEntry>,
    #[serde(default)]
    pub synced: u32,
    #[serde(default)]
    pub total: u32,
    /// This shard's Clusters running the release, by state.
    #[serde(default)]
    pub clusters: ClusterCounts,
    /// When this shard last wrote its part (RFC 3339): at least every half `resync`.
    pub heartbeat_time: String,
    /// When this part goes stale unless written again (RFC 3339): its Clusters are then no
    /// longer counted as ready.
    pub stale_after: String,
}

/// A rollout to one release, wave by wave.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// `Waiting` (the release's ClusterClass is not applied), `Progressing`, `Paused`,
    /// `Complete`, `Superseded` (by a newer release's rollout) or `Stopped` (`rollout:` removed).
    pub phase: String,
    /// The wave running (1-based; the last one when complete).
    pub wave: u32,
    pub waves: u32,
    /// `wave/waves`, for the `WAVE` column (`-o wide`).
    pub wave_summary: String,
    /// Clusters moved, upgraded and healthy, of all the rollout moves.
    pub done: u32,
    pub total: u32,
    /// `done/total`, for the `ROLLOUT` column.
    pub summary: String,
    /// Why it is paused: `ClusterFailed`, `WaveTimeout`, `ClassChanged`, `PauseRequested`;
    /// waiting: `ClassNotApplied`; stopped: `RolloutRemoved` (empty while it runs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Names the Cluster and what is wrong with it, or who asked for the pause; why it waits or
    /// stopped.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the rollout began (RFC 3339).
    pub started: String,
    /// When the running wave began (RFC 3339): `waveTimeout` counts from here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub wave_started: String,
    /// Every wave, with its Clusters (`namespace/name`), fixed when the rollout began.
    pub plan: Vec<WaveStatus>,
    /// The last `stacksync.io/rollout-resume` and `stacksync.io/rollout-pause` annotation
    /// values acted on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handled_resume: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handled_pause: String,
    /// Clusters that failed (or were late past `waveTimeout`) and what became of them, in the
    /// order they failed: within `maxFailures` their wave goes on without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedCluster>,
    /// While the rollout waits for a maintenance window (`reason: OutsideWindow`): when the
    /// next one of its waiting Clusters opens (RFC 3339; empty: none of their windows opens
    /// again).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_window: String,
}

/// A Cluster a rollout gave up on, and what it did about it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedCluster {
    /// `namespace/name`.
    pub cluster: String,
    /// The wave it was in (1-based).
    pub wave: u32,
    /// `ClusterFailed` (its ClusterSync failed: `UpgradeFailed`, `Unhealthy`, ...) or
    /// `WaveTimeout` (not done within `waveTimeout`).
    pub reason: String,
    pub message: String,
    /// `LeftAlone` (`onFailure: pause`), `RollingBack` (being moved back), `RolledBack` (its
    /// class is the one it had before the rollout again) or `RollbackImpossible` (Cluster API
    /// does not allow it: the message says why).
    pub outcome: String,
    /// Why a rollback is impossible, or how the last try to roll back failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// What a Cluster was on before a rollout moved it: what a rollback moves it back to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MovedFrom {
    /// `namespace/name`.
    pub cluster: String,
    /// Its class before the edit.
    pub class: String,
    /// Its `spec.topology.version` before the edit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
}

/// One wave of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    /// `namespace/name` of each Cluster, in the order they are moved.
    pub clusters: Vec<String>,
    /// `Pending`, `Progressing` or `Done`.
    pub phase: String,
    /// Clusters of this wave that are done.
    #[serde(default)]
    pub done: u32,
    /// Clusters of this wave whose edit to the target class failed (a conflict, a refusal, a
    /// deadline): it is tried again at every check until it takes or the wave times out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmoved: Vec<String>,
    /// Clusters of this wave not moved yet because none of their maintenance windows is open
    /// (`rollout.windows`): each is moved when one opens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting_window: Vec<String>,
    /// The class and version each Cluster of this wave had before it was moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved_from: Vec<MovedFrom>,
    /// Clusters that reach the target through more than one class (a subscription following a
    /// line across Kubernetes minors: one minor at a time), with their path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<ClusterPath>,
}

/// The classes a Cluster passes through on its way to the rollout's target, in order (the last
/// is the target): the newest release of each Kubernetes minor after its own.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPath {
    /// `namespace/name`.
    pub cluster: String,
    pub steps: Vec<String>,
}

/// Annotation on a rollout's target `StackRelease` asking a paused rollout to go on (any new
/// value; `stacksync rollout resume` writes the time).
pub const ROLLOUT_RESUME: &str = "stacksync.io/rollout-resume";
/// Annotation on a rollout's target `StackRelease` asking it to stop at the next wave boundary
/// (any new value; `stacksync rollout pause` writes the time).
pub const ROLLOUT_PAUSE: &str = "stacksync.io/rollout-pause";

/// Clusters of a release by the state of their ClusterSync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCounts {
    pub total: u32,
    /// `Ready=True`: synced and healthy.
    pub ready: u32,
    /// Being applied or waiting for health (`Reconciling=True`).
    pub progressing: u32,
    /// Neither: not synced, unhealthy, stalled, paused or suspended; or of a shard whose part
    /// is stale.
    pub not_ready: u32,
    /// Of `notReady`: Clusters of shards whose part is stale (that stopped saying how they are).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stale: u32,
    /// `ready/total`, for the `CLUSTERS` column.
    pub summary: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssetDigest {
    pub name: String,
    pub digest: String,
    pub verified_by: String,
}

/// The CRDs as one multi-document YAML, as committed in `deploy/crds/`.
///
/// # Errors
/// Serialisation failure (not expected).
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    use kube::CustomResourceExt;
    let mut out = String::new();
    for crd in [ClusterSync::crd(), StackRelease::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crds_are_generated_from_the_types() {
        let want = crds_yaml().unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/crds/stacksync.io.yaml");
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(have == want, "deploy/crds/stacksync.io.yaml is stale: run `cargo run -- crds > deploy/crds/stacksync.io.yaml`");
    }

    #[test]
    fn five_thousand_objects_fit_in_one_cluster_sync() {
        let status = ClusterSyncStatus {
            synced: 4_800,
            total: 5_000,
            inventory: (0..5_000).map(|i| format!("apps|Deployment|kube-system|addon-component-number-{i:05}|v1")).collect(),
            entries: (0..MAX_ENTRIES)
                .map(|i| ObjectEntry {
                    group: "apps".into(),
                    version: "v1".into(),
                    kind: "Deployment".into(),
                    namespace: "kube-system".into(),
                    name: format!("addon-component-number-{i:05}"),
                    synced: false,
                    action: "Failed".into(),
                    message: "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas".into(),
                    last_transition_time: "2026-11-22T10:00:00Z".into(),
                    health: String::new(),
                })
                .collect(),
            entries_truncated: 0,
            ..Default::default()
        };
        let bytes = serde_json::to_vec(&status).unwrap().len();
        assert!(bytes < 512 * 1024, "{bytes} bytes");
    }
}
