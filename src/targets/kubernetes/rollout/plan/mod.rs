//! The rollout's decisions, pure: the waves cut from the config and the fleet, whether each
//! Cluster of a running wave is done, waiting or failed, when a wave times out, and what a
//! round does next (start, wait, supersede, move a wave, pause, resume, complete, stop). No
//! I/O and no clock: the driver reads the fleet, passes `now`, and acts on what comes back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde_json::Value;

use crate::config::{Budget, NotReady, OnFailure, Wave};
use crate::model::window::Verdict;
use crate::status::crd::{ClusterSyncStatus, FailedCluster, ROLLOUT_PAUSE, ROLLOUT_RESUME, RolloutStatus, StackRelease};

mod failures;
mod judge;
mod paths;
mod round;
mod start;

pub use judge::{Health, Target, judge, to_judge};
pub use paths::{is_older, next_stop, nothing_can_move, older, paths};
pub use round::advance;
pub use start::{in_flight, not_applied, others, start, waiting};

/// The target's ClusterClass is not applied (failed, or not yet): nothing is moved until it is.
pub const WAITING: &str = "Waiting";
/// `rollout:` was removed from the subscription (or the subscription from the config): nothing
/// further is moved. Configuring `rollout:` again starts a new rollout.
pub const STOPPED: &str = "Stopped";
pub const PROGRESSING: &str = "Progressing";
pub const PAUSED: &str = "Paused";
pub const COMPLETE: &str = "Complete";
/// A newer release started its own rollout while this one was running.
pub const SUPERSEDED: &str = "Superseded";
/// A wave not started yet (its Clusters not edited).
pub const PENDING: &str = "Pending";
/// A wave whose Clusters are all done.
pub const DONE: &str = "Done";
/// A running rollout waiting for a maintenance window (its `reason`).
pub const OUTSIDE_WINDOW: &str = "OutsideWindow";

/// What became of a failed Cluster (`FailedCluster.outcome`).
pub const LEFT_ALONE: &str = "LeftAlone";
/// The reason of a Cluster not moved because it was not Ready on its current release when its
/// move was due (`rollout.notReady`).
pub const NOT_READY_BEFORE_MOVE: &str = "NotReadyBeforeMove";
pub const ROLLING_BACK: &str = "RollingBack";
pub const ROLLED_BACK: &str = "RolledBack";
pub const ROLLBACK_IMPOSSIBLE: &str = "RollbackImpossible";

/// Cuts the rollout's Clusters (`namespace/name`, with whether each is a canary) into waves:
/// canaries first, then everything else, each in `namespace/name` order; every canary is in the
/// first wave. `clusters: N` adds N, `percent: P` brings the total to P % (rounded up); waves
/// that would add nobody are left out.
pub fn plan(waves: &[Wave], clusters: &[(String, bool)]) -> Vec<Vec<String>> {
    let mut order: Vec<&(String, bool)> = clusters.iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let total = order.len();
    let canaries = order.iter().filter(|c| c.1).count();
    let mut out = Vec::new();
    let mut so_far = 0usize;
    for (i, w) in waves.iter().enumerate() {
        let want = match *w {
            Wave::Clusters(n) => so_far.saturating_add(n as usize),
            Wave::Percent(p) => (total * p as usize).div_ceil(100),
        };
        let want = if i == 0 { want.max(canaries) } else { want };
        // The last wave takes whoever is left, whatever it says.
        let want = if i + 1 == waves.len() { total } else { want.min(total) };
        if want > so_far {
            out.push(order[so_far..want].iter().map(|c| c.0.clone()).collect());
            so_far = want;
        }
    }
    out
}

/// A Cluster the rollout may move, as read this round.
#[derive(Debug, Clone)]
pub struct Member {
    pub obj: DynamicObject,
    /// It matches the rollout's `canarySelector`.
    pub canary: bool,
}

/// What a round sees of the subscription's fleet.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// The subscription's Clusters by `namespace/name`.
    pub members: BTreeMap<String, Member>,
    /// Their ClusterSync statuses by `namespace/cluster`.
    pub syncs: BTreeMap<String, ClusterSyncStatus>,
    /// The control plane objects (`spec.controlPlaneRef`) of the Clusters [`to_judge`] named,
    /// those that could be read.
    pub control_planes: BTreeMap<String, Value>,
    /// The Kubernetes version of each intermediate class on the Clusters' paths (`None`: its
    /// release names none), read by the driver.
    pub versions: BTreeMap<String, Option<String>>,
    /// Clusters a rollout this one superseded moved and left where it put them
    /// ([`in_flight`]): their move is under way, carried on to the new target whatever their
    /// health (the newer release is what mends them), not refused as `NotReadyBeforeMove`.
    pub in_flight: BTreeSet<String>,
}

/// The pause and resume requests on a target's StackRelease: its annotations' values (empty
/// when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    pub resume: String,
    pub pause: String,
}

impl Requests {
    pub fn of(rel: &StackRelease) -> Requests {
        Requests { resume: annotation(rel, ROLLOUT_RESUME), pause: annotation(rel, ROLLOUT_PAUSE) }
    }
}

fn annotation(rel: &StackRelease, key: &str) -> String {
    rel.metadata.annotations.as_ref().and_then(|a| a.get(key)).cloned().unwrap_or_default()
}

/// A new value, not the one acted on last.
fn asked(value: &str, handled: &str) -> bool {
    !value.is_empty() && value != handled
}

/// A paused rollout asked to resume, a running one asked to pause, or a waiting one whose
/// ClusterClass is now applied: the driver looks at once, not at the next check.
pub fn wants_a_look(rel: &StackRelease) -> bool {
    let Some(status) = rel.status.as_ref() else { return false };
    let Some(st) = status.rollout.as_ref() else { return false };
    let req = Requests::of(rel);
    (st.phase == PAUSED && asked(&req.resume, &st.handled_resume))
        || (st.phase == PROGRESSING && asked(&req.pause, &st.handled_pause))
        || (st.phase == WAITING && status.phase == "Applied")
}

/// What a round does with the target release's rollout state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Nothing: the rollout is complete (nothing left to move back) or superseded.
    Skip,
    /// None yet, one waiting for its ClusterClass, or one stopped (`rollout:` removed) and
    /// configured again: see whether one starts.
    Start,
    /// Running or paused: go on ([`advance`]).
    GoOn,
}

/// Which [`Round`] the rollout state `state` (of the target's StackRelease) calls for. Only
/// `Start` and `GoOn` need the fleet read.
pub fn round(state: Option<&RolloutStatus>) -> Round {
    match state.map(|st| st.phase.as_str()) {
        None | Some(WAITING | STOPPED) => Round::Start,
        Some(PROGRESSING | PAUSED) => Round::GoOn,
        // A Cluster still to be moved back after the last wave.
        Some(COMPLETE) if state.is_some_and(|st| st.failed.iter().any(|f| f.outcome == ROLLING_BACK)) => Round::GoOn,
        Some(_) => Round::Skip,
    }
}

/// What a round did, in order: for the driver's log lines and Events (and, for
/// `WaveStarted`, its Cluster edits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A paused rollout goes on at `wave` (its wave starts again).
    Resumed { wave: u32, waves: u32 },
    /// `wave` starts: its `clusters` are to be moved to the target now.
    WaveStarted { wave: u32, waves: u32, clusters: Vec<String> },
    /// Clusters of the running `wave` whose maintenance window opened: to be moved now.
    Moved { wave: u32, waves: u32, clusters: Vec<String> },
    /// Clusters of the running `wave` upgraded, Ready and available at a class before the
    /// target: to be moved to the next class on their path ([`next_stop`]).
    Stepped { wave: u32, waves: u32, clusters: Vec<String> },
    /// The rollout waits for a maintenance window (`next` opens then; empty: never).
    OutsideWindow { wave: u32, waves: u32, next: String, message: String },
    /// A Cluster of `wave` failed or was late past `waveTimeout`: given up on, with what
    /// becomes of it.
    ClusterFailed { wave: u32, failed: FailedCluster },
    /// Move `cluster` back to class `to` (what it had before the rollout); the driver sets the
    /// failure's outcome `RolledBack` once the edit took.
    RollBack { cluster: String, to: String },
    /// Every Cluster of `wave` is done, but `failed` that were given up on.
    WaveDone { wave: u32, waves: u32, clusters: usize, failed: usize },
    /// The last wave is done; `failed` Clusters of the rollout were given up on.
    Complete { failed: usize },
    /// The rollout paused at `wave` for `reason` (`ClusterFailed`, `ClassChanged`,
    /// `WaveTimeout`, `RollbackImpossible`, `PauseRequested`).
    Paused { wave: u32, waves: u32, reason: &'static str, message: String },
}

/// How a rollout treats failures and when it may move Clusters: from the subscription's
/// `rollout:` and, for windows, the wall clock the driver read.
pub struct Policy<'a> {
    pub wave_timeout: Duration,
    pub max_failures: Budget,
    pub on_failure: OnFailure,
    /// What becomes of a Cluster not Ready on its current release when its move is due.
    pub not_ready: NotReady,
    /// Whether the Cluster (`namespace/name`) is inside one of its maintenance windows now.
    pub window: &'a dyn Fn(&str) -> Verdict,
}

impl Policy<'_> {
    /// No windows, no failure allowed, a failed Cluster left alone: the rollout as before
    /// `maxFailures`, `onFailure` and `windows`.
    #[cfg(test)]
    pub fn strict(wave_timeout: Duration) -> Policy<'static> {
        Policy {
            wave_timeout,
            max_failures: Budget::None,
            on_failure: OnFailure::Pause,
            not_ready: NotReady::Fail,
            window: &|_| Verdict::Always,
        }
    }
}

/// The counts and the column strings.
pub fn summarise(st: &mut RolloutStatus) {
    let failed = |wave: usize| st.failed.iter().filter(|f| f.wave as usize == wave + 1).count() as u32;
    st.done = st
        .plan
        .iter()
        .enumerate()
        .map(|(i, w)| if w.phase == DONE { (w.clusters.len() as u32).saturating_sub(failed(i)) } else { w.done })
        .sum();
    st.summary = if st.failed.is_empty() {
        format!("{}/{}", st.done, st.total)
    } else {
        format!("{}/{} ({} failed)", st.done, st.total, st.failed.len())
    };
    st.wave_summary = format!("{}/{}", st.wave.min(st.waves), st.waves);
}

/// What becomes of a rollout of `subscription` when the set of subscriptions with `rollout:`
/// (`driven`) changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undriven {
    /// Driven, or not running, paused or waiting: nothing to do.
    Keep,
    /// Not a subscription of this process (not in its config, never driven by it): another
    /// stacksync's, perhaps, on a shared management cluster. Left alone.
    NotOurs,
    /// To end `Stopped`, and why.
    Stop(String),
}

/// Whether a running, paused or waiting rollout `st` of `subscription` ends `Stopped`: ours
/// (in the config, `configured`, or driven by this process before, `driven_ever`) and no longer
/// in `driven` (its `rollout:` removed, or the subscription itself).
pub fn undriven(
    subscription: &str,
    st: &RolloutStatus,
    driven: &BTreeSet<String>,
    configured: &BTreeSet<String>,
    driven_ever: &BTreeSet<String>,
) -> Undriven {
    if driven.contains(subscription) || ![PROGRESSING, PAUSED, WAITING].contains(&st.phase.as_str()) {
        return Undriven::Keep;
    }
    if configured.contains(subscription) {
        Undriven::Stop(format!("`rollout:` was removed from subscription `{subscription}`"))
    } else if driven_ever.contains(subscription) {
        Undriven::Stop(format!("subscription `{subscription}` was removed from the config"))
    } else {
        Undriven::NotOurs
    }
}

/// `st` ended `Stopped` because of `why`: the Clusters already moved stay on the target (their
/// upgrade goes on); nobody else is moved.
pub fn stopped(st: &RolloutStatus, why: &str) -> RolloutStatus {
    let mut st = st.clone();
    st.message =
        format!("{why}; nothing further is moved ({}/{} Clusters done, stopped in wave {}/{})", st.done, st.total, st.wave, st.waves);
    st.phase = STOPPED.into();
    st.reason = "RolloutRemoved".into();
    st.wave_started.clear();
    st
}

/// A time as the rollout status writes it (RFC 3339, whole seconds, `Z`).
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests;
