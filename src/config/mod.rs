//! The auto-subscribe config file: the first stage of the pipeline. Parsed into a position-aware
//! tree, validated into [`Config`] (every error with file, line, column and field path), diffed
//! against the running config on reload, and watched for edits.

mod clusterstack;
mod diff;
mod sources;
mod target;
mod validate;
pub mod watch;
mod webhooks;
pub mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use diff::diff;
pub use sources::{parse_size, tag_matches};

use crate::model::schedule::Schedule;
use crate::model::version::Constraint;

/// The only `apiVersion` this build reads.
pub const API_VERSION: &str = "stacksync.io/v1alpha1";
pub const KIND: &str = "Config";

/// A validated config. Relative paths in the file are resolved against the file's directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub file: PathBuf,
    pub cache: CacheConfig,
    pub sources: Vec<SourceConfig>,
    pub subscriptions: Vec<Subscription>,
    pub target: Target,
    /// The helm binary for cluster-stack releases.
    pub helm: HelmConfig,
    /// How cluster-stack values templates run (`templates:`).
    pub templates: TemplatesConfig,
    /// Where the push webhooks' secrets are (`webhooks:`).
    pub webhooks: WebhooksConfig,
}

/// `templates:`: how values templates (`cluster-addon-values.yaml`, `overwrite.yaml`) run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TemplatesConfig {
    /// A missing key or nil printed (Go's `<no value>` / `<nil>`) fails the render instead of
    /// being written, with a warning, as the operator writes it.
    pub strict: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    pub dir: PathBuf,
    /// Cached releases kept per subscription beyond the one in use (garbage collection).
    pub keep_releases: usize,
}

pub const DEFAULT_KEEP_RELEASES: usize = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    pub name: String,
    pub kind: SourceKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SourceKind {
    Git(GitSourceConfig),
    Github(GithubSourceConfig),
    Oci(OciSourceConfig),
}

/// An OCI registry repository whose tags are releases (`sources[].oci`).
#[derive(Debug, Clone, PartialEq)]
pub struct OciSourceConfig {
    /// `host[:port]/path`.
    pub repository: crate::model::source::Repository,
    /// Plain HTTP to a registry that is not on loopback.
    pub insecure: bool,
    /// A PEM bundle added to the trust roots of this source (a private CA); read at each poll.
    /// With it, a loopback registry is reached over https too.
    pub ca_file: Option<std::path::PathBuf>,
    pub auth: Option<crate::model::source::OciAuth>,
    /// Deadline of one registry API call; a layer download gets ten times it.
    pub timeout: std::time::Duration,
    /// Only tags matching this (`*` wildcards) are releases.
    pub tag_pattern: Option<String>,
    /// Tags asked for per `tags/list` page (`?n=`).
    pub page_size: u32,
    pub max_asset_bytes: u64,
    pub max_release_bytes: u64,
    /// Cap on what one archive layer may unpack to (decompression bombs).
    pub max_unpacked_bytes: u64,
    pub allow_moved_tags: bool,
    /// `verify.cosign.publicKey`: only artifacts with a cosign signature by one of these keys
    /// are releases.
    pub signatures: verify::TrustFiles,
}

/// GitHub release assets.
#[derive(Debug, Clone, PartialEq)]
pub struct GithubSourceConfig {
    /// `owner/name`.
    pub repo: String,
    /// `https://api.github.com`, or a GitHub Enterprise Server API URL.
    pub api_url: String,
    pub token: Option<crate::model::source::TokenSource>,
    /// Only tags matching this (`*` wildcards) are releases.
    pub tag_pattern: Option<String>,
    pub verify: crate::model::source::Verify,
    /// Pinned digests by `<tag>/<asset name>`.
    pub digests: BTreeMap<String, crate::model::Sha256Digest>,
    pub max_asset_bytes: u64,
    pub max_release_bytes: u64,
    /// Cap on what one archive asset may unpack to (decompression bombs).
    pub max_unpacked_bytes: u64,
    pub allow_moved_tags: bool,
    /// `verify.cosign.publicKey` / `verify.ssh.allowedSigners`: every asset needs a `<asset>.sig`
    /// by one of these keys.
    pub signatures: verify::TrustFiles,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GitSourceConfig {
    /// `file://`, `git://`, `http://`, `https://`, `ssh://` or `user@host:path`.
    pub url: String,
    /// Accept a tag that now points at another commit instead of refusing it.
    pub allow_moved_tags: bool,
    /// Tags pinned to a commit: the tag is refused when it points anywhere else.
    pub pins: BTreeMap<String, String>,
    /// Credentials of a private repository (`ssh://` and `user@host:path` need `ssh`).
    pub auth: Option<crate::model::source::GitAuth>,
    /// `verify.ssh.allowedSigners` / `verify.openpgp.keyring`: only annotated tags signed by one
    /// of these keys are releases.
    pub signatures: verify::TrustFiles,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub name: String,
    pub source: String,
    /// For cluster-stack tags: `<provider>-<name>-<k8s major>-<k8s minor>`. Without it, plain
    /// semver tags are the releases.
    pub stack: Option<String>,
    /// `kubernetes`: with it, `stack` is a line (`<provider>-<name>`) and every family of the
    /// line whose Kubernetes minor is in this range is followed (`">=1.30, <1.33"`).
    pub kubernetes: Option<KubernetesRange>,
    pub version: String,
    pub constraint: Constraint,
    pub schedule: Schedule,
    pub auto_upgrade: bool,
    /// Whether GitHub releases marked as pre-releases are candidates.
    pub prereleases: bool,
    /// The directory of manifests (or the cluster-stack release root) inside the release tree.
    pub path: String,
    /// How the release is laid out and rendered.
    pub format: Format,
    pub clusters: Vec<ClusterConfig>,
    /// The subscription's own `values`: what clusters found by `selector` get (listed clusters
    /// have them merged under their own already).
    pub values: BTreeMap<String, String>,
    /// Kubernetes target: clusters chosen by labels and/or topology class, besides `clusters`.
    pub selector: Option<ClusterSelector>,
    /// Take ownership of fields another field manager owns (server-side apply `force`).
    pub force: bool,
    /// `suspend: true`: nothing of this subscription is written (status says `Suspended`).
    pub suspend: bool,
    /// Cluster stacks: how many of the newest releases the constraint allows are offered (their
    /// ClusterClasses exist); releases a Cluster still uses are offered on top.
    pub available_releases: usize,
    /// How long applied objects may take to become healthy before the Cluster is `Unhealthy`;
    /// `None` (`healthTimeout: 0s`): health is not checked.
    pub health_timeout: Option<std::time::Duration>,
    /// Cluster stacks: how long one `waitForPreCondition` / `waitForPostCondition` of an
    /// addon stage may wait before the upgrade (or install) is reported as failed.
    pub stage_timeout: std::time::Duration,
    /// Cluster stacks: `rollout:` — stacksync moves the subscription's Clusters to the newest
    /// offered release in waves. `None`: Clusters stay on the class they name.
    pub rollout: Option<RolloutConfig>,
    /// `adoptedLabels`: labels added to every object rendered for this subscription and to the
    /// pod templates of its workloads (`render::labels`), so that objects another tool applied
    /// with its labels (the SCS cluster-stack-operator's) are taken over without a pod restart.
    pub adopted_labels: BTreeMap<String, String>,
}

/// `webhooks:`: which push webhooks the admin listener accepts. A hook that is not configured
/// answers 404.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhooksConfig {
    /// `webhooks.github.secretFile`: the secret GitHub signs deliveries with
    /// (`X-Hub-Signature-256`).
    pub github_secret_file: Option<std::path::PathBuf>,
    /// `webhooks.generic.tokenFile`: the bearer token of `POST /hooks/generic/<source>`.
    pub generic_token_file: Option<std::path::PathBuf>,
}

/// A subscription's `rollout:`: how its Clusters are moved to a newer release.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutConfig {
    /// In order; the last one reaches every Cluster (`percent: 100`).
    pub waves: Vec<Wave>,
    /// Clusters with all these labels go into the first (canary) wave.
    pub canary_labels: BTreeMap<String, String>,
    /// How long a wave's Clusters get to be upgraded and healthy before the rollout pauses.
    pub wave_timeout: std::time::Duration,
    /// How often a running rollout looks at its Clusters (besides when releases change).
    pub check_interval: std::time::Duration,
    /// `maxFailures`: how many Clusters of a wave may fail (or be late) and the wave still go
    /// on; over it, the rollout pauses. Default 0: the first failure pauses.
    pub max_failures: Budget,
    /// `onFailure`: what becomes of a failed Cluster.
    pub on_failure: OnFailure,
    /// `notReady`: what becomes of a Cluster that is not Ready on its current release when its
    /// move is due (it is never moved).
    pub not_ready: NotReady,
    /// `windows`: a wave starts and a Cluster is moved only inside one of its windows (none:
    /// at any time).
    pub windows: Vec<crate::model::window::Window>,
}

/// `rollout.maxFailures`: a count, or a percentage of the wave (rounded down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Budget {
    Clusters(u32),
    Percent(u32),
    /// No failure is allowed.
    #[default]
    None,
}

impl Budget {
    /// How many Clusters of a wave of `size` may fail.
    pub fn of(self, size: usize) -> usize {
        match self {
            Budget::None => 0,
            Budget::Clusters(n) => n as usize,
            Budget::Percent(p) => size * p as usize / 100,
        }
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::None => f.write_str("0"),
            Budget::Clusters(n) => write!(f, "{n}"),
            Budget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// `rollout.onFailure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// The failed Cluster is left as it is (for people to look at).
    #[default]
    Pause,
    /// The failed Cluster is moved back to the class it had, where Cluster API allows it (its
    /// Kubernetes version unchanged).
    Rollback,
}

/// `rollout.notReady`: a Cluster whose ClusterSync is not Ready on the release it runs when its
/// move is due is never moved (a move would hide why it is unhealthy, or make it worse); it is
/// reported (`NotReadyBeforeMove`) and, by default, counts against its wave's `maxFailures`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NotReady {
    /// Given up on as a failure of its wave (left as it is), within `maxFailures`.
    #[default]
    Fail,
    /// Left out of the rollout, reported, not counted against the wave's budget.
    Skip,
}

/// One wave of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wave {
    /// `clusters: N`: N more Clusters.
    Clusters(u32),
    /// `percent: P`: up to P % of the rollout's Clusters in all (rounded up).
    Percent(u32),
}

/// Default for `rollout.waveTimeout`.
pub const DEFAULT_WAVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Default for `rollout.checkInterval`.
pub const DEFAULT_ROLLOUT_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Default for a subscription's `healthTimeout`.
pub const DEFAULT_HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Default for a subscription's `stageTimeout` (the SCS operator's wait has none; 10 minutes
/// is longer than any addon rollout we saw).
pub const DEFAULT_STAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Default for a subscription's `availableReleases`.
pub const DEFAULT_AVAILABLE_RELEASES: usize = 3;

use crate::model::cluster::{CLUSTER_CLASS_DIR, ClusterConfig, ClusterObjects, STATUS_DIR};

/// The release format of a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// A directory of plain manifests with `${var}` substitution.
    #[default]
    Manifests,
    /// A SovereignCloudStack cluster-stack release: `metadata.yaml`, a ClusterClass chart and
    /// cluster-addon chart(s), rendered with helm.
    ClusterStack,
}

/// How charts are rendered (`helm.renderer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HelmRenderer {
    /// One long-lived `stacksync-renderer` built on helm's library (`render::renderer`).
    #[default]
    Library,
    /// A `helm template` process per render (the fallback for a chart the library renderer
    /// refuses).
    Process,
}

/// Where helm is and how it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct HelmConfig {
    /// How charts are rendered.
    pub renderer: HelmRenderer,
    /// The library renderer; `None`: `$STACKSYNC_RENDERER`, else beside the executable, the
    /// tools directory or `PATH`.
    pub renderer_path: Option<PathBuf>,
    /// The helm binary (`renderer: process`); `None`: `$STACKSYNC_HELM`, else `helm` on `PATH`.
    pub path: Option<PathBuf>,
    /// Renders run at once.
    pub parallelism: usize,
    /// Time limit of one render.
    pub timeout: std::time::Duration,
}

impl Default for HelmConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        HelmConfig {
            renderer: HelmRenderer::Library,
            renderer_path: None,
            path: None,
            parallelism: cpus.clamp(1, 8),
            timeout: std::time::Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Directory(PathBuf),
    Kubernetes(KubernetesTarget),
}

/// Server-side apply to a Cluster API management cluster and its workload clusters.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesTarget {
    /// The management cluster's kubeconfig; `None`: in-cluster config, then `$KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub drift_mode: DriftMode,
    /// Most objects one pass may delete per cluster; more pauses pruning and reports.
    pub prune_limit: usize,
    /// Whether a release rendering no objects may prune everything.
    pub allow_empty_prune: bool,
    /// How soon a cluster skipped as not ready (control plane, kubeconfig Secret, unreachable)
    /// is tried again; only that cluster, whatever the subscription's schedule.
    pub not_ready_retry: std::time::Duration,
    /// How often every Cluster is reconciled even when nothing changed (drift is taken back).
    pub resync: std::time::Duration,
    /// Field managers whose changes to fields stacksync owns are taken back (people with kubectl).
    pub take_back_from: Vec<String>,
    /// How long one request to the management or a workload cluster may take (watches excepted).
    pub request_timeout: std::time::Duration,
}

impl Default for KubernetesTarget {
    fn default() -> Self {
        KubernetesTarget {
            kubeconfig: None,
            context: None,
            drift_mode: DriftMode::Correct,
            prune_limit: target::DEFAULT_PRUNE_LIMIT,
            allow_empty_prune: false,
            not_ready_retry: target::DEFAULT_NOT_READY_RETRY,
            resync: target::DEFAULT_RESYNC,
            take_back_from: crate::model::HAND_MANAGERS.iter().map(|m| (*m).to_owned()).collect(),
            request_timeout: target::DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

pub use crate::model::DriftMode;

/// Selects Cluster API `Cluster` objects in the management cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSelector {
    pub match_labels: BTreeMap<String, String>,
    /// Only clusters whose `spec.topology.class` is a ClusterClass of the subscription's stack
    /// (`<stack>-v…`).
    pub match_stack_class: bool,
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    /// Dotted field path such as `subscriptions[0].clusters[1].name`; empty for the document.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.col)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a config file, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Never: an invalid config stays invalid until the file changes (which is watched).
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        "InvalidConfig"
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A subscription's `kubernetes` range, as written and parsed.
#[derive(Debug, Clone)]
pub struct KubernetesRange {
    pub text: String,
    pub range: semver::VersionReq,
}

impl PartialEq for KubernetesRange {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Subscription {
    /// The cluster-stack families this subscription follows (`None`: plain semver tags).
    pub fn families(&self) -> Option<crate::model::version::Families<'_>> {
        self.stack.as_deref().map(|stack| crate::model::version::Families { stack, kubernetes: self.kubernetes.as_ref().map(|k| &k.range) })
    }

    /// What release selection needs of this subscription.
    pub fn wanted(&self) -> crate::model::Wanted<'_> {
        crate::model::Wanted {
            source: &self.source,
            stack: self.stack.as_deref(),
            kubernetes: self.kubernetes.as_ref().map(|k| &k.range),
            version: &self.version,
            constraint: &self.constraint,
            auto_upgrade: self.auto_upgrade,
        }
    }
}

/// Largest config file read: a real one is a few KiB; a bigger one is a mistake or an attack.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Reads a config file: a regular file (not `/dev/zero`, a fifo or a directory) of at most
/// [`MAX_CONFIG_BYTES`], counted as read, in UTF-8.
///
/// # Errors
/// What is wrong with the file.
pub fn read_bounded(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile);
    }
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes).map_err(ReadError::NotUtf8)
}

/// Why a config file cannot be read, before its YAML is looked at.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read config file: {0}")]
    Io(#[source] std::io::Error),
    #[error("cannot read config file: not a regular file")]
    NotAFile,
    #[error("config file is larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge,
    #[error("config file is not UTF-8 (byte {})", .0.utf8_error().valid_up_to())]
    NotUtf8(#[source] std::string::FromUtf8Error),
}

impl ReadError {
    /// An I/O error may pass (a ConfigMap being updated); the others need the file changed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ReadError::Io(_))
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ReadError::Io(_) | ReadError::NotAFile => "ConfigUnreadable",
            ReadError::TooLarge => "ConfigTooLarge",
            ReadError::NotUtf8(_) => "ConfigNotUtf8",
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    ///
    /// # Errors
    /// Every problem found, each naming the file, line, column and field; an unreadable file is
    /// one error at line 1.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = read_bounded(path).map_err(|e| {
            ConfigErrors(vec![ConfigError { file: path.to_owned(), line: 1, col: 1, field: String::new(), message: e.to_string() }])
        })?;
        Self::parse(path, &text)
    }

    /// Validates config text as if read from `path`.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigErrors> {
        validate::validate(path, text)
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    pub fn subscription(&self, name: &str) -> Option<&Subscription> {
        self.subscriptions.iter().find(|s| s.name == name)
    }
}
