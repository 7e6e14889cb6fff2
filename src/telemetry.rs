//! What the process tells its operator besides logs: the Prometheus series every stage records
//! into, and the readiness facts `/readyz` answers from. A leaf like [`crate::model`]: every
//! stage may record here, and it imports nothing of the crate.
//!
//! One registry per process (a `static`): the metrics outlive the controller, which is rebuilt on
//! some reloads, and counters must not restart from zero then. Labels are bounded by the config
//! (subscription, source) or by enums (result, reason, action, event): never an error message,
//! an object name or a cluster name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::ClusterKey;
use crate::model::sync::MutexExt;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub subscription: String,
    /// `ready`, `not_ready` or `error`.
    pub result: &'static str,
    /// The status reason (`Synced`, `ApplyFailed`, ...), a closed set.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubscriptionLabels {
    pub subscription: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub subscription: String,
    /// `created`, `configured`, `unchanged`, `pruned`, `skipped`, `failed`.
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PollLabels {
    pub source: String,
    /// `success`, `error` or `timeout`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterReadyLabels {
    pub subscription: String,
    /// `true` or `false`.
    pub ready: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseReadyLabels {
    pub subscription: String,
    /// The tag of the release the Cluster's sync is for (the wanted one, else the applied one):
    /// bounded by the releases the subscription offers.
    pub release: String,
    /// `true` or `false`.
    pub ready: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotReadyLabels {
    pub subscription: String,
    /// The Ready condition's reason (`NotSynced`, `UpgradeFailed`, ...), a closed set.
    pub reason: &'static str,
    /// `true` when the ClusterSync is Stalled (it will not pass by itself), else `false`.
    pub stalled: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PauseLabels {
    pub subscription: String,
    /// `PauseRequested`, `WaveTimeout`, `ClusterFailed`, `ClassChanged` or `Other`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The Lease's name: `stacksync`, `stacksync-<shard>` or `stacksync-rollout` (the rollout
    /// coordinator's, with `--shard`).
    pub lease: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `github` or `generic`.
    pub hook: &'static str,
    /// The GitHub event (`push`, `release`, `ping`, `other`); `push` for the generic hook.
    pub event: &'static str,
    /// `triggered`, `no_match`, `ignored`, `replayed`, `unauthorized`, `too_large`, `bad_request`,
    /// `unavailable`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuntimeHookLabels {
    /// `Discovery`, `BeforeClusterUpgrade` or `AfterControlPlaneInitialized`.
    pub hook: &'static str,
    /// `proceed`, `retry`, `failure` or `bad_request`.
    pub answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepoLabels {
    /// A GitHub source's `owner/name`.
    pub repo: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why (`Requested`, `CertificateDue`).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success`, `error` or `timeout`.
    pub result: &'static str,
}

/// Every series the process exports (the table in docs/operations.md).
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<SubscriptionLabels, Histogram>,
    pub objects: Family<ObjectLabels, Counter>,
    pub polls: Family<PollLabels, Counter>,
    pub poll_duration: Family<SourceLabels, Histogram>,
    pub last_successful_poll: Family<SourceLabels, Gauge<f64, AtomicU64>>,
    pub clusters: Family<ClusterReadyLabels, Gauge>,
    pub webhooks: Family<WebhookLabels, Counter>,
    pub runtime_hooks: Family<RuntimeHookLabels, Counter>,
    pub leader: Gauge,
    pub github_quota: Family<RepoLabels, Gauge>,
    pub github_limit: Family<RepoLabels, Gauge>,
    pub lease_held: Family<LeaseLabels, Gauge>,
    pub helm_runs: Family<ResultLabels, Counter>,
    pub generated_rotations: Family<ReasonLabels, Counter>,
    pub helm_duration: Histogram,
    /// Rollouts by subscription: the running wave, Clusters done, and 1 while paused.
    pub rollout_wave: Family<SubscriptionLabels, Gauge>,
    pub rollout_done: Family<SubscriptionLabels, Gauge>,
    pub rollout_paused: Family<SubscriptionLabels, Gauge>,
    /// 1 for the reason a paused rollout waits for (absent while it is not paused).
    pub rollout_pause_reason: Family<PauseLabels, Gauge>,
    /// 1 while a running rollout waits for a maintenance window.
    pub rollout_waiting_for_window: Family<SubscriptionLabels, Gauge>,
    /// Clusters the rollout gave up on (failed or late; left alone or moved back).
    pub rollout_failed: Family<SubscriptionLabels, Gauge>,
    pub clusters_by_release: Family<ReleaseReadyLabels, Gauge>,
    pub clusters_not_ready: Family<NotReadyLabels, Gauge>,
    /// State by Cluster, from which the `clusters*` gauges are computed: a
    /// Cluster that moves between subscriptions or releases, or goes away, is counted once.
    cluster_state: Mutex<BTreeMap<ClusterKey, ClusterState>>,
    /// Rollouts are driven under the rollout coordinator's own Lease (`--shard`): a standby
    /// for its shard keeps exporting the rollouts it drives.
    rollouts_apart: AtomicBool,
}

/// What the `clusters*` gauges count of one Cluster: its last reconcile's result.
#[derive(Debug)]
struct ClusterState {
    subscription: String,
    release: String,
    ready: bool,
    reason: &'static str,
    stalled: bool,
    /// The series this state's reconciles are counted in (handles on the families' series,
    /// which are never removed): found once per change of state, not built per reconcile.
    reconciles: Counter,
    duration: Histogram,
    objects: Vec<(&'static str, Counter)>,
}

/// The reasons a rollout pauses for; anything else is counted as `Other`.
const PAUSE_REASONS: [&str; 5] = ["PauseRequested", "WaveTimeout", "ClusterFailed", "ClassChanged", "RollbackImpossible"];

fn bool_label(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

fn seconds_buckets() -> Histogram {
    // 10 ms .. ~82 s: a no-op reconcile is milliseconds, a helm render of a big stack a minute.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("stacksync");
        let m = Metrics {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(seconds_buckets as fn() -> Histogram),
            objects: Family::default(),
            polls: Family::default(),
            poll_duration: Family::new_with_constructor(seconds_buckets as fn() -> Histogram),
            last_successful_poll: Family::default(),
            clusters: Family::default(),
            webhooks: Family::default(),
            runtime_hooks: Family::default(),
            leader: Gauge::default(),
            github_quota: Family::default(),
            github_limit: Family::default(),
            lease_held: Family::default(),
            helm_runs: Family::default(),
            generated_rotations: Family::default(),
            helm_duration: seconds_buckets(),
            rollout_wave: Family::default(),
            rollout_done: Family::default(),
            rollout_paused: Family::default(),
            rollout_pause_reason: Family::default(),
            rollout_waiting_for_window: Family::default(),
            rollout_failed: Family::default(),
            clusters_by_release: Family::default(),
            clusters_not_ready: Family::default(),
            cluster_state: Mutex::new(BTreeMap::new()),
            rollouts_apart: AtomicBool::new(false),
            registry: Registry::default(),
        };
        registry.register("reconciles", "Cluster reconciles by subscription, result and reason", m.reconciles.clone());
        registry.register("reconcile_duration_seconds", "How long one Cluster's reconcile took", m.reconcile_duration.clone());
        registry.register("objects", "Objects handled by the applier, by subscription and action", m.objects.clone());
        registry.register("source_polls", "Source polls by source and result", m.polls.clone());
        registry.register("source_poll_duration_seconds", "How long one source poll took", m.poll_duration.clone());
        registry.register(
            "source_last_success_timestamp_seconds",
            "Unix time of the source's last successful poll",
            m.last_successful_poll.clone(),
        );
        registry.register("clusters", "Subscribed Clusters by subscription and Ready state", m.clusters.clone());
        registry.register("webhook_deliveries", "Push webhook deliveries by hook, event and result", m.webhooks.clone());
        registry.register("runtime_hook_calls", "Cluster API runtime hook calls by hook and answer", m.runtime_hooks.clone());
        registry.register("leader", "1 while this process holds the lease (or needs none), else 0", m.leader.clone());
        registry.register(
            "github_rate_limit_remaining",
            "GitHub API requests left in the current window (X-RateLimit-Remaining), by repository",
            m.github_quota.clone(),
        );
        registry.register(
            "github_rate_limit",
            "GitHub API requests allowed per window (X-RateLimit-Limit), by repository",
            m.github_limit.clone(),
        );
        registry.register("lease_held", "1 while this process holds the Lease, 0 while it is a standby for it", m.lease_held.clone());
        registry.register("helm_runs", "helm template runs by result", m.helm_runs.clone());
        registry.register(
            "generated_rotations",
            "Rotations of a Cluster's generated values (certificates, keys, passwords), by reason",
            m.generated_rotations.clone(),
        );
        registry.register("helm_duration_seconds", "How long one helm template run took", m.helm_duration.clone());
        registry.register("rollout_wave", "The wave a subscription's rollout runs (1-based)", m.rollout_wave.clone());
        registry.register("rollout_clusters_done", "Clusters a subscription's rollout has moved and seen healthy", m.rollout_done.clone());
        registry.register("rollout_paused", "1 while a subscription's rollout is paused", m.rollout_paused.clone());
        registry.register(
            "rollout_pause_reason",
            "1 for the reason a subscription's paused rollout waits for",
            m.rollout_pause_reason.clone(),
        );
        registry.register(
            "rollout_waiting_for_window",
            "1 while a subscription's running rollout waits for a maintenance window",
            m.rollout_waiting_for_window.clone(),
        );
        registry.register(
            "rollout_failed_clusters",
            "Clusters a subscription's rollout gave up on (failed or late; left alone or moved back)",
            m.rollout_failed.clone(),
        );
        registry.register(
            "clusters_by_release",
            "Subscribed Clusters by subscription, release and Ready state",
            m.clusters_by_release.clone(),
        );
        registry.register(
            "clusters_not_ready",
            "Subscribed Clusters not Ready, by subscription, reason and whether they are Stalled",
            m.clusters_not_ready.clone(),
        );
        // Failures exported at 0 from the start: an alert on `increase()` sees the first one (a
        // series born at 1 has no increase).
        for result in ["success", "error", "timeout"] {
            m.helm_runs.get_or_create(&ResultLabels { result }).inc_by(0);
        }
        for reason in ["Requested", "CertificateDue"] {
            m.generated_rotations.get_or_create(&ReasonLabels { reason }).inc_by(0);
        }
        for (hook, event) in [("github", "other"), ("generic", "push")] {
            m.webhooks.get_or_create(&WebhookLabels { hook, event, result: "unauthorized" }).inc_by(0);
        }
        Metrics { registry, ..m }
    }

    /// The Prometheus text exposition (OpenMetrics 1.0 text, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Records a finished reconcile of `cluster` for `release` (a tag, empty when none is known)
    /// and what the applier did (`objects`: an action's name and how many objects it took). A
    /// Cluster whose state did not change (every steady-state reconcile) copies nothing and
    /// builds no label set: its series are kept with its state.
    pub fn reconciled(
        &self,
        cluster: &ClusterKey,
        subscription: &str,
        release: &str,
        outcome: Outcome,
        elapsed: Duration,
        objects: &[(&'static str, u64)],
    ) {
        let (result, reason) = match outcome {
            Outcome::Ready => ("ready", "Synced"),
            Outcome::NotReady(reason) | Outcome::Stalled(reason) => ("not_ready", reason),
            Outcome::Error(reason) => ("error", reason),
        };
        let reconciles =
            || self.reconciles.get_or_create(&ReconcileLabels { subscription: subscription.to_owned(), result, reason }).clone();
        let duration = || self.reconcile_duration.get_or_create(&SubscriptionLabels { subscription: subscription.to_owned() }).clone();
        let object = |action| self.objects.get_or_create(&ObjectLabels { subscription: subscription.to_owned(), action }).clone();
        if matches!(outcome, Outcome::Error(_)) {
            reconciles().inc();
            duration().observe(elapsed.as_secs_f64());
            for &(action, n) in objects.iter().filter(|(_, n)| *n > 0) {
                object(action).inc_by(n);
            }
            return;
        }
        let (ready, stalled) = (matches!(outcome, Outcome::Ready), matches!(outcome, Outcome::Stalled(_)));
        let mut state = self.cluster_state.locked();
        let same = state.get(cluster).is_some_and(|cs| {
            cs.subscription == subscription && cs.release == release && cs.ready == ready && cs.reason == reason && cs.stalled == stalled
        });
        if !same {
            let cs = ClusterState {
                subscription: subscription.to_owned(),
                release: release.to_owned(),
                ready,
                reason,
                stalled,
                reconciles: reconciles(),
                duration: duration(),
                objects: Vec::new(),
            };
            state.insert(cluster.clone(), cs);
            self.recount(&state);
        }
        let Some(cs) = state.get_mut(cluster) else { return };
        cs.reconciles.inc();
        cs.duration.observe(elapsed.as_secs_f64());
        for &(action, n) in objects.iter().filter(|(_, n)| *n > 0) {
            match cs.objects.iter().find(|(a, _)| *a == action) {
                Some((_, counter)) => {
                    counter.inc_by(n);
                }
                None => {
                    let counter = object(action);
                    counter.inc_by(n);
                    cs.objects.push((action, counter));
                }
            }
        }
    }

    /// A Cluster is gone (or no longer subscribed): it leaves the `clusters` gauge.
    pub fn forget_cluster(&self, cluster: &ClusterKey) {
        let mut state = self.cluster_state.locked();
        if state.remove(cluster).is_some() {
            self.recount(&state);
        }
    }

    /// This process no longer acts on the fleet (a standby): it stops exporting the fleet's
    /// state, so that summing a gauge over the replicas counts each Cluster and rollout once,
    /// not once more for every former leader. Rollouts driven under their own Lease
    /// ([`Metrics::set_rollouts_apart`]) stay: [`Metrics::forget_rollouts`] forgets them.
    pub fn forget_fleet(&self) {
        let mut state = self.cluster_state.locked();
        state.clear();
        self.recount(&state);
        if !self.rollouts_apart.load(Ordering::SeqCst) {
            self.forget_rollouts();
        }
    }

    /// Rollouts are driven under the rollout coordinator's Lease, not the shard's (`--shard`).
    pub fn set_rollouts_apart(&self) {
        self.rollouts_apart.store(true, Ordering::SeqCst);
    }

    /// This process drives no rollout (it lost the rollout coordinator's Lease): it stops
    /// exporting their state, which the new coordinator exports.
    pub fn forget_rollouts(&self) {
        self.rollout_wave.clear();
        self.rollout_done.clear();
        self.rollout_paused.clear();
        self.rollout_pause_reason.clear();
        self.rollout_waiting_for_window.clear();
        self.rollout_failed.clear();
    }

    fn recount(&self, state: &BTreeMap<ClusterKey, ClusterState>) {
        let mut counts: BTreeMap<(&str, bool), i64> = BTreeMap::new();
        let mut by_release: BTreeMap<(&str, &str, bool), i64> = BTreeMap::new();
        let mut not_ready: BTreeMap<(&str, &'static str, bool), i64> = BTreeMap::new();
        for c in state.values() {
            *counts.entry((c.subscription.as_str(), c.ready)).or_default() += 1;
            *by_release.entry((c.subscription.as_str(), c.release.as_str(), c.ready)).or_default() += 1;
            if !c.ready {
                *not_ready.entry((c.subscription.as_str(), c.reason, c.stalled)).or_default() += 1;
            }
        }
        // Both Ready states of a subscription (and of a release) are exported, so
        // `clusters{ready="false"}` reads 0 (rather than vanishing) when its last failing Cluster
        // recovers. Reasons nobody has are not exported: there are many.
        self.clusters.clear();
        self.clusters_by_release.clear();
        self.clusters_not_ready.clear();
        let subs: BTreeSet<&str> = state.values().map(|c| c.subscription.as_str()).collect();
        let releases: BTreeSet<(&str, &str)> = state.values().map(|c| (c.subscription.as_str(), c.release.as_str())).collect();
        for ready in [true, false] {
            for &sub in &subs {
                let n = counts.get(&(sub, ready)).copied().unwrap_or(0);
                let labels = ClusterReadyLabels { subscription: sub.to_owned(), ready: bool_label(ready) };
                self.clusters.get_or_create(&labels).set(n);
            }
            for &(sub, release) in &releases {
                let n = by_release.get(&(sub, release, ready)).copied().unwrap_or(0);
                let labels = ReleaseReadyLabels { subscription: sub.to_owned(), release: release.to_owned(), ready: bool_label(ready) };
                self.clusters_by_release.get_or_create(&labels).set(n);
            }
        }
        for ((sub, reason, stalled), n) in not_ready {
            let labels = NotReadyLabels { subscription: sub.to_owned(), reason, stalled: bool_label(stalled) };
            self.clusters_not_ready.get_or_create(&labels).set(n);
        }
    }

    /// Records a rollout's state: its wave, Clusters done, and whether (and why) it is paused.
    pub fn rollout(&self, subscription: &str, wave: u32, done: u32, paused: Option<&str>, waiting_for_window: bool, failed: u32) {
        let labels = SubscriptionLabels { subscription: subscription.to_owned() };
        self.rollout_waiting_for_window.get_or_create(&labels).set(i64::from(waiting_for_window));
        self.rollout_failed.get_or_create(&labels).set(i64::from(failed));
        self.rollout_wave.get_or_create(&labels).set(i64::from(wave));
        self.rollout_done.get_or_create(&labels).set(i64::from(done));
        self.rollout_paused.get_or_create(&labels).set(i64::from(paused.is_some()));
        let current = paused.map(|r| PAUSE_REASONS.into_iter().find(|k| *k == r).unwrap_or("Other"));
        for reason in PAUSE_REASONS.into_iter().chain(["Other"]) {
            let labels = PauseLabels { subscription: subscription.to_owned(), reason };
            if current == Some(reason) {
                self.rollout_pause_reason.get_or_create(&labels).set(1);
            } else {
                self.rollout_pause_reason.remove(&labels);
            }
        }
    }

    /// Records whether this process holds `lease` (leader election only).
    pub fn lease_held(&self, lease: &str, held: bool) {
        self.lease_held.get_or_create(&LeaseLabels { lease: lease.to_owned() }).set(i64::from(held));
    }

    /// Records one source poll; a success also sets the last-success timestamp.
    pub fn polled(&self, source: &str, result: &'static str, elapsed: Duration) {
        self.polls.get_or_create(&PollLabels { source: source.to_owned(), result }).inc();
        self.poll_duration.get_or_create(&SourceLabels { source: source.to_owned() }).observe(elapsed.as_secs_f64());
        if result == "success" {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            self.last_successful_poll.get_or_create(&SourceLabels { source: source.to_owned() }).set(now.as_secs_f64());
        }
        readiness().source_polled(source);
    }

    /// Records the GitHub API quota left (and the window's limit, when the response said it),
    /// as the last response of `repo`'s source said.
    pub fn github_quota(&self, repo: &str, remaining: u64, limit: Option<u64>) {
        let labels = RepoLabels { repo: repo.to_owned() };
        self.github_quota.get_or_create(&labels).set(i64::try_from(remaining).unwrap_or(i64::MAX));
        if let Some(limit) = limit {
            self.github_limit.get_or_create(&labels).set(i64::try_from(limit).unwrap_or(i64::MAX));
        }
    }

    /// Records one helm run.
    pub fn helm_ran(&self, result: &'static str, elapsed: Duration) {
        self.helm_runs.get_or_create(&ResultLabels { result }).inc();
        self.helm_duration.observe(elapsed.as_secs_f64());
    }

    /// Records one rotation of a Cluster's generated values.
    pub fn generated_rotated(&self, reason: &'static str) {
        self.generated_rotations.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Records one webhook delivery.
    pub fn webhook(&self, hook: &'static str, event: &'static str, result: &'static str) {
        self.webhooks.get_or_create(&WebhookLabels { hook, event, result }).inc();
    }

    /// Records one Cluster API runtime hook call and what it was answered.
    pub fn runtime_hook(&self, hook: &'static str, answer: &'static str) {
        self.runtime_hooks.get_or_create(&RuntimeHookLabels { hook, answer }).inc();
    }
}

/// How a reconcile ended, for [`Metrics::reconciled`].
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    Ready,
    /// Written, not ready, with the status reason; it may pass by itself (Reconciling).
    NotReady(&'static str),
    /// Written, not ready, and Stalled: it will not pass without a change.
    Stalled(&'static str),
    /// The reconcile failed (retried), with the status reason or error kind.
    Error(&'static str),
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// What `/readyz` answers from: ready once the Cluster cache is complete and every source has
/// been polled once (successfully or not: a failing source is served from the cache), and only
/// while this process may write (it holds the lease, or needs none).
#[derive(Default)]
pub struct Readiness {
    synced: AtomicBool,
    standby: AtomicBool,
    polled: Mutex<BTreeSet<String>>,
}

impl Readiness {
    /// The Cluster cache is complete (`true`), or was dropped with its controller (`false`).
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::SeqCst);
    }

    /// This process waits for the lease (`true`) or holds it / needs none (`false`).
    pub fn set_standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::SeqCst);
        metrics().leader.set(i64::from(!standby));
        if standby {
            metrics().forget_fleet();
        }
    }

    pub fn is_standby(&self) -> bool {
        self.standby.load(Ordering::SeqCst)
    }

    fn source_polled(&self, source: &str) {
        self.polled.locked().insert(source.to_owned());
    }

    /// `Ok` when ready, else why not (the body of a 503).
    ///
    /// # Errors
    /// The first unmet condition, in words.
    pub fn check<'a>(&self, sources: impl IntoIterator<Item = &'a str>) -> Result<(), NotReady> {
        if self.is_standby() {
            return Err(NotReady::Standby);
        }
        let polled = self.polled.locked();
        let pending: Vec<String> = sources.into_iter().filter(|s| !polled.contains(*s)).map(str::to_owned).collect();
        if !pending.is_empty() {
            return Err(NotReady::NotPolled(pending));
        }
        if !self.synced.load(Ordering::SeqCst) {
            return Err(NotReady::FirstPass);
        }
        Ok(())
    }
}

/// Why the process is not ready (the body of `/readyz`'s 503).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("standby: another replica holds the lease")]
    Standby,
    #[error("sources not polled yet: {}", .0.join(", "))]
    NotPolled(Vec<String>),
    #[error("the first reconcile pass has not finished")]
    FirstPass,
}

/// The process's readiness facts.
pub fn readiness() -> &'static Readiness {
    static READINESS: OnceLock<Readiness> = OnceLock::new();
    READINESS.get_or_init(Readiness::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_every_documented_series() {
        let m = Metrics::new();
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::Ready, Duration::from_millis(20), &[("created", 3)]);
        m.reconciled(&ClusterKey::new("ns", "b"), "sub", "v2", Outcome::NotReady("ApplyFailed"), Duration::from_millis(20), &[]);
        m.polls.get_or_create(&PollLabels { source: "src".into(), result: "success" }).inc();
        m.webhook("github", "push", "triggered");
        m.runtime_hook("BeforeClusterUpgrade", "retry");
        m.github_quota("o/r", 4999, Some(5000));
        m.rollout("sub", 2, 3, Some("WaveTimeout"), false, 0);
        m.lease_held("stacksync", true);
        m.helm_ran("success", Duration::from_millis(300));
        let text = m.encode();
        for series in [
            "stacksync_reconciles_total{subscription=\"sub\",result=\"ready\",reason=\"Synced\"} 1",
            "stacksync_reconcile_duration_seconds_bucket{le=\"0.02\",subscription=\"sub\"} 2",
            "stacksync_objects_total{subscription=\"sub\",action=\"created\"} 3",
            "stacksync_source_polls_total{source=\"src\",result=\"success\"} 1",
            "stacksync_clusters{subscription=\"sub\",ready=\"true\"} 1",
            "stacksync_clusters{subscription=\"sub\",ready=\"false\"} 1",
            "stacksync_webhook_deliveries_total{hook=\"github\",event=\"push\",result=\"triggered\"} 1",
            "stacksync_runtime_hook_calls_total{hook=\"BeforeClusterUpgrade\",answer=\"retry\"} 1",
            "# TYPE stacksync_leader gauge",
            "stacksync_github_rate_limit_remaining{repo=\"o/r\"} 4999",
            "stacksync_github_rate_limit{repo=\"o/r\"} 5000",
            "stacksync_lease_held{lease=\"stacksync\"} 1",
            "stacksync_clusters_by_release{subscription=\"sub\",release=\"v2\",ready=\"false\"} 1",
            "stacksync_clusters_by_release{subscription=\"sub\",release=\"v1\",ready=\"false\"} 0",
            "stacksync_clusters_not_ready{subscription=\"sub\",reason=\"ApplyFailed\",stalled=\"false\"} 1",
            "stacksync_rollout_wave{subscription=\"sub\"} 2",
            "stacksync_rollout_clusters_done{subscription=\"sub\"} 3",
            "stacksync_rollout_paused{subscription=\"sub\"} 1",
            "stacksync_rollout_pause_reason{subscription=\"sub\",reason=\"WaveTimeout\"} 1",
            "stacksync_helm_runs_total{result=\"error\"} 0",
            "stacksync_webhook_deliveries_total{hook=\"generic\",event=\"push\",result=\"unauthorized\"} 0",
            "stacksync_helm_runs_total{result=\"success\"} 1",
            "stacksync_helm_duration_seconds_count 1",
            "# EOF",
        ] {
            assert!(text.contains(series), "missing {series} in\n{text}");
        }
    }

    #[test]
    fn a_steady_cluster_counts_into_the_series_kept_with_its_state() {
        let m = Metrics::new();
        let a = ClusterKey::new("ns", "a");
        m.reconciled(&a, "sub", "v1", Outcome::Ready, Duration::ZERO, &[("created", 2), ("unchanged", 0)]);
        m.reconciled(&a, "sub", "v1", Outcome::Ready, Duration::ZERO, &[("unchanged", 2)]);
        m.reconciled(&a, "sub", "v1", Outcome::Ready, Duration::ZERO, &[("unchanged", 2), ("configured", 1)]);
        // Another state: its own series; the counts so far stay.
        m.reconciled(&a, "sub", "v1", Outcome::NotReady("NotSynced"), Duration::ZERO, &[("failed", 1)]);
        m.reconciled(&a, "sub", "v1", Outcome::Error("TransientError"), Duration::ZERO, &[]);
        let text = m.encode();
        for series in [
            "stacksync_reconciles_total{subscription=\"sub\",result=\"ready\",reason=\"Synced\"} 3",
            "stacksync_reconciles_total{subscription=\"sub\",result=\"not_ready\",reason=\"NotSynced\"} 1",
            "stacksync_reconciles_total{subscription=\"sub\",result=\"error\",reason=\"TransientError\"} 1",
            "stacksync_reconcile_duration_seconds_count{subscription=\"sub\"} 5",
            "stacksync_objects_total{subscription=\"sub\",action=\"created\"} 2",
            "stacksync_objects_total{subscription=\"sub\",action=\"unchanged\"} 4",
            "stacksync_objects_total{subscription=\"sub\",action=\"configured\"} 1",
            "stacksync_objects_total{subscription=\"sub\",action=\"failed\"} 1",
            "stacksync_clusters{subscription=\"sub\",ready=\"false\"} 1",
        ] {
            assert!(text.contains(series), "missing {series} in\n{text}");
        }
    }

    #[test]
    fn clusters_gauge_counts_each_cluster_once_and_goes_to_zero() {
        let m = Metrics::new();
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::NotReady("ApplyFailed"), Duration::ZERO, &[]);
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::Ready, Duration::ZERO, &[]);
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::Error("Transient"), Duration::ZERO, &[]);
        let text = m.encode();
        assert!(text.contains("stacksync_clusters{subscription=\"sub\",ready=\"true\"} 1"), "{text}");
        assert!(text.contains("stacksync_clusters{subscription=\"sub\",ready=\"false\"} 0"), "{text}");
        assert!(!text.contains("stacksync_clusters_not_ready{"), "a Ready Cluster is not counted by reason: {text}");
        m.forget_cluster(&ClusterKey::new("ns", "a"));
        assert!(!m.encode().contains("stacksync_clusters{"), "a forgotten Cluster leaves no series");
    }

    #[test]
    fn a_cluster_moving_between_releases_and_reasons_is_counted_once() {
        let m = Metrics::new();
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::Ready, Duration::ZERO, &[]);
        m.reconciled(&ClusterKey::new("ns", "b"), "sub", "v1", Outcome::Ready, Duration::ZERO, &[]);
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v2", Outcome::NotReady("Progressing"), Duration::ZERO, &[]);
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v2", Outcome::Stalled("UpgradeFailed"), Duration::ZERO, &[]);
        let text = m.encode();
        for series in [
            "stacksync_clusters_by_release{subscription=\"sub\",release=\"v1\",ready=\"true\"} 1",
            "stacksync_clusters_by_release{subscription=\"sub\",release=\"v2\",ready=\"false\"} 1",
            "stacksync_clusters_by_release{subscription=\"sub\",release=\"v2\",ready=\"true\"} 0",
            "stacksync_clusters_not_ready{subscription=\"sub\",reason=\"UpgradeFailed\",stalled=\"true\"} 1",
        ] {
            assert!(text.contains(series), "missing {series} in\n{text}");
        }
        assert!(!text.contains("stacksync_clusters_not_ready{subscription=\"sub\",reason=\"Progressing\""), "it left Progressing: {text}");
    }

    #[test]
    fn a_rollout_exports_only_the_reason_it_is_paused_for() {
        let m = Metrics::new();
        m.rollout("sub", 2, 1, Some("WaveTimeout"), false, 0);
        m.rollout("sub", 2, 1, Some("SomethingNew"), false, 0);
        let text = m.encode();
        assert!(text.contains("stacksync_rollout_pause_reason{subscription=\"sub\",reason=\"Other\"} 1"), "{text}");
        assert!(!text.contains("reason=\"WaveTimeout\""), "{text}");
        m.rollout("sub", 3, 4, None, false, 0);
        let text = m.encode();
        assert!(!text.contains("stacksync_rollout_pause_reason{"), "{text}");
        assert!(text.contains("stacksync_rollout_paused{subscription=\"sub\"} 0"), "{text}");
    }

    #[test]
    fn a_standby_exports_no_fleet_state() {
        let m = Metrics::new();
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::NotReady("NotSynced"), Duration::ZERO, &[]);
        m.rollout("sub", 1, 0, Some("PauseRequested"), false, 0);
        m.lease_held("stacksync", false);
        m.forget_fleet();
        let text = m.encode();
        for gone in ["stacksync_clusters{", "stacksync_clusters_by_release{", "stacksync_clusters_not_ready{", "stacksync_rollout_"] {
            assert!(!text.lines().any(|l| l.starts_with(gone)), "{gone} still exported:\n{text}");
        }
        assert!(text.contains("stacksync_lease_held{lease=\"stacksync\"} 0"), "{text}");
        assert!(text.contains("stacksync_reconciles_total{"), "counters stay: {text}");
    }

    #[test]
    fn a_standby_for_its_shard_still_exports_the_rollouts_it_coordinates() {
        let m = Metrics::new();
        m.set_rollouts_apart();
        m.reconciled(&ClusterKey::new("ns", "a"), "sub", "v1", Outcome::NotReady("NotSynced"), Duration::ZERO, &[]);
        m.rollout("sub", 1, 0, None, false, 0);
        m.forget_fleet();
        let text = m.encode();
        assert!(!text.lines().any(|l| l.starts_with("stacksync_clusters{")), "{text}");
        assert!(text.contains("stacksync_rollout_wave{subscription=\"sub\"} 1"), "{text}");
        m.forget_rollouts();
        assert!(!m.encode().lines().any(|l| l.starts_with("stacksync_rollout_")), "lost the rollout Lease");
    }

    #[test]
    fn readiness_waits_for_sources_sync_and_lease() {
        let r = Readiness::default();
        assert!(r.check(["git"]).unwrap_err().to_string().contains("git"));
        r.source_polled("git");
        assert!(r.check(["git"]).unwrap_err().to_string().contains("first reconcile"));
        r.set_synced(true);
        assert_eq!(r.check(["git"]), Ok(()));
        r.standby.store(true, Ordering::SeqCst);
        assert!(r.check(["git"]).unwrap_err().to_string().contains("standby"));
    }
}
