//! The rollout's decisions, pure: the waves cut from the config and the fleet, whether each
//! Cluster of a running wave is done, waiting or failed, when a wave times out, and what a
//! round does next (start, wait, supersede, move a wave, pause, resume, complete, stop). No
//! I/O and no clock: the driver reads the fleet, passes `now`, and acts on what comes back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde_json::Value;

use super::super::decide::topology_class;
use crate::config::{Budget, NotReady, OnFailure, Wave};
use crate::model::version::Families;
use crate::model::version::Version;
use crate::model::window::Verdict;
use crate::status::crd::{
    ClusterPath, ClusterSyncStatus, FailedCluster, MovedFrom, ROLLOUT_PAUSE, ROLLOUT_RESUME, RolloutStatus, StackRelease, WaveStatus,
};
use crate::status::desired::shorten;

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

/// ClusterSync reasons that will not pass by themselves: the Cluster failed.
const FAILED_REASONS: [&str; 4] = ["UpgradeFailed", "RenderFailed", "ReleaseNotAvailable", "Unhealthy"];

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

/// Where one Cluster of a running wave is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Done,
    /// Not there yet, and why.
    Waiting(String),
    /// It will not get there by itself: the reason (`ClusterFailed`, `ClassChanged`) and why.
    Failed(&'static str, String),
}

/// What a rollout needs to know about the target release.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub class: &'a str,
    /// The Kubernetes version the control plane must report.
    pub version: Option<&'a str>,
    /// The management cluster serves Cluster API v1beta2 (else v1beta1): which conditions say
    /// "available" (list items need not carry their `apiVersion`).
    pub v1beta2: bool,
}

/// Whether a moved Cluster is done: its class names the target, its ClusterSync applied the
/// target (its upgrade stages done first) and is Ready, its control plane reports the version,
/// and Cluster API says it is available (v1beta2 `Available`; v1beta1 `Ready` and
/// `ControlPlaneReady`). `cluster` is the Cluster object, or its `data` (spec and status).
pub fn judge(cluster: &Value, control_plane: Option<&Value>, sync: Option<&ClusterSyncStatus>, target: &Target<'_>) -> Health {
    let class = topology_class(cluster).unwrap_or_default();
    if class != target.class {
        return Health::Failed("ClassChanged", format!("its class was changed to `{class}` by someone else during its wave"));
    }
    let Some(sync) = sync else { return Health::Waiting("no ClusterSync yet".into()) };
    let ready = sync.conditions.iter().find(|c| c.type_ == "Ready");
    if let Some(r) = ready.filter(|r| r.status == "False" && FAILED_REASONS.contains(&r.reason.as_str())) {
        return Health::Failed("ClusterFailed", format!("{}: {}", r.reason, shorten(&r.message, 300)));
    }
    if let Some(u) = sync.upgrade.as_ref().filter(|u| u.to == target.class && u.phase != super::super::upgrade::DONE) {
        let wait = if u.waiting_for.is_empty() { String::new() } else { format!(": {}", u.waiting_for) };
        return Health::Waiting(format!("upgrade stage {}/{} `{}` {}{wait}", u.stage_index + 1, u.stages, u.stage, u.phase));
    }
    if sync.applied_release.as_ref().is_none_or(|a| a.tag != target.class) {
        return Health::Waiting(format!("addons of {} not applied yet", target.class));
    }
    if let Some(r) = ready.filter(|r| r.status != "True") {
        return Health::Waiting(format!("ClusterSync not Ready ({}): {}", r.reason, shorten(&r.message, 200)));
    } else if ready.is_none() {
        return Health::Waiting("ClusterSync has no Ready condition yet".into());
    }
    if let Some(want) = target.version {
        let have = control_plane.and_then(|cp| cp.pointer("/status/version")).and_then(Value::as_str);
        match (control_plane, have) {
            (None, _) => return Health::Waiting("its control plane object (spec.controlPlaneRef) cannot be read".into()),
            (Some(_), Some(v)) if v == want => {}
            (Some(_), v) => return Health::Waiting(format!("control plane reports {}, not {want} yet", v.unwrap_or("no version"))),
        }
    }
    // The control plane's own word first: the Cluster's `Available` is Cluster API's summary of
    // it, written a moment later, so right after the control plane moved it may still say what
    // the old version was (seen on the real Cluster API: a control plane at the new version and
    // not available, its Cluster still `Available` from before).
    if let Some(why) = control_plane.and_then(control_plane_unavailable) {
        return Health::Waiting(why);
    }
    if !available(cluster, target.v1beta2) {
        return Health::Waiting("Cluster API does not report it available yet".into());
    }
    Health::Done
}

/// Why the control plane object says it is not available: its `Available` condition (v1beta2
/// contract; optional for providers) is not `True`, or was written for an older generation.
fn control_plane_unavailable(cp: &Value) -> Option<String> {
    let c = cp.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Available")?;
    let stale = matches!((c["observedGeneration"].as_i64(), cp.pointer("/metadata/generation").and_then(Value::as_i64)), (Some(o), Some(g)) if o < g);
    if c["status"] == "True" && !stale {
        return None;
    }
    let detail = [c["reason"].as_str().unwrap_or_default(), c["message"].as_str().unwrap_or_default()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(": ");
    Some(if stale {
        "its control plane has not reported on its new spec yet".to_owned()
    } else {
        format!("its control plane is not available ({})", shorten(&detail, 200))
    })
}

/// v1beta2: `Available` true; v1beta1: `Ready` and `ControlPlaneReady` true (or, from Cluster
/// API 1.9 on, the v1beta2 `Available` condition it also reports under `status.v1beta2`).
fn available(cluster: &Value, v1beta2: bool) -> bool {
    let is_true = |conds: &Value, t: &str| conds.as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"));
    let status = &cluster["status"];
    if v1beta2 {
        return is_true(&status["conditions"], "Available");
    }
    (is_true(&status["conditions"], "Ready") && is_true(&status["conditions"], "ControlPlaneReady"))
        || is_true(&status["v1beta2"]["conditions"], "Available")
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

/// The Clusters a rollout to `target_tag` moves: the members whose class is an older release of
/// a family the subscription follows (of the same stack, or of its line at an older Kubernetes
/// minor), with whether each is a canary. `None` when the tag is not a version.
pub fn older(members: &BTreeMap<String, Member>, target_tag: &str, families: Families<'_>) -> Option<Vec<(String, bool)>> {
    let to = Version::from_tag(target_tag)?;
    Some(members.iter().filter(|(_, m)| on_older(&m.obj.data, &to, families)).map(|(k, m)| (k.clone(), m.canary)).collect())
}

/// Whether `cluster`'s class names an older release than `target_tag` of a family the
/// subscription follows: a Cluster the rollout is to move.
pub fn is_older(cluster: &Value, target_tag: &str, families: Families<'_>) -> bool {
    Version::from_tag(target_tag).is_some_and(|to| on_older(cluster, &to, families))
}

fn on_older(cluster: &Value, to: &Version, families: Families<'_>) -> bool {
    topology_class(cluster)
        .and_then(|c| Version::from_tag(&c))
        .filter(|v| families.covers_version(v))
        .and_then(|v| v.order(to))
        .is_some_and(|o| o == std::cmp::Ordering::Less)
}

/// Why a Cluster has no path to the target: no release of a Kubernetes minor between theirs is
/// offered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no release of Kubernetes {major}.{minor} is offered: a Cluster moves one minor at a time")]
pub struct NoPath {
    pub major: u64,
    pub minor: u64,
}

/// The classes a Cluster on `from` passes through to `target`, in order, the last `target`:
/// Cluster API moves a control plane one Kubernetes minor at a time, so each minor between
/// theirs is a step, on the newest release `offered` (tags, newest first) of that minor. One
/// step when they share a minor.
///
/// # Errors
/// [`NoPath`]: a minor between theirs has no release offered.
pub fn path(from: &str, target: &str, offered: &[String]) -> Result<Vec<String>, NoPath> {
    let minor = |tag: &str| -> Option<(u64, u64)> {
        Version::from_tag(tag).and_then(|v| v.family().and_then(crate::model::version::family_parts).map(|(_, k)| k))
    };
    let (Some((major, from_minor)), Some((target_major, target_minor))) = (minor(from), minor(target)) else {
        return Ok(vec![target.to_owned()]);
    };
    if major != target_major || from_minor >= target_minor {
        return Ok(vec![target.to_owned()]);
    }
    let mut steps = Vec::new();
    for m in from_minor + 1..target_minor {
        // `offered` is newest first: the first of the minor is its newest.
        match offered.iter().find(|t| minor(t) == Some((major, m))) {
            Some(t) => steps.push(t.clone()),
            None => return Err(NoPath { major, minor: m }),
        }
    }
    steps.push(target.to_owned());
    Ok(steps)
}

/// Where Cluster `key`, now on class `current`, goes next: the class after `current` on its
/// path, or the first when it is not on its path yet; `target` for a Cluster without a path.
pub fn next_stop(st: &RolloutStatus, key: &str, current: &str, target: &str) -> String {
    let Some(p) = path_of(st.plan.iter(), key) else { return target.to_owned() };
    match p.steps.iter().position(|s| s == current) {
        Some(i) => p.steps.get(i + 1).cloned().unwrap_or_else(|| target.to_owned()),
        None => p.steps.first().cloned().unwrap_or_else(|| target.to_owned()),
    }
}

/// The paths of the rollout's Clusters (`older`, read as `members`) to `target`, and those that
/// have none (a minor between theirs and the target's offers no release), as failures of no
/// wave (reason `NoPath`, left as they are).
pub fn paths(
    members: &BTreeMap<String, Member>,
    older: &[(String, bool)],
    target: &str,
    offered: &[String],
) -> (BTreeMap<String, Vec<String>>, Vec<FailedCluster>) {
    let (mut paths, mut none) = (BTreeMap::new(), Vec::new());
    for (key, _) in older {
        let class = members.get(key).and_then(|m| topology_class(&m.obj.data)).unwrap_or_default();
        match path(&class, target, offered) {
            Ok(p) => {
                paths.insert(key.clone(), p);
            }
            Err(why) => none.push(FailedCluster {
                cluster: key.clone(),
                wave: 0,
                reason: "NoPath".into(),
                message: format!("on {class}: {why}"),
                outcome: LEFT_ALONE.into(),
                detail: String::new(),
            }),
        }
    }
    (paths, none)
}

/// Why a rollout to `target` moves nobody although Clusters are not on it: `moving` Clusters
/// have a path and every one `left_out` has none (`NoPath`). `None` when some Cluster moves, or
/// none is left out for want of a path (then every Cluster runs the target already).
pub fn nothing_can_move(moving: usize, left_out: &[FailedCluster], target: &str) -> Option<String> {
    let no_path: Vec<&FailedCluster> = left_out.iter().filter(|f| f.reason == "NoPath").collect();
    let first = no_path.first()?;
    if moving > 0 {
        return None;
    }
    let (n, verb) = if no_path.len() == 1 { ("1 Cluster".to_owned(), "has") } else { (format!("{} Clusters", no_path.len()), "have") };
    Some(format!("nothing can move to {target}: {n} not on it {verb} no path to it ({}: {})", first.cluster, first.message))
}

fn path_of<'w>(mut waves: impl Iterator<Item = &'w WaveStatus>, key: &str) -> Option<&'w ClusterPath> {
    waves.find_map(|w| w.paths.iter().find(|p| p.cluster == key))
}

/// Why a StackRelease's ClusterClass is not applied: the first error of its apply as this
/// process saw it (`first_error`), else the first object that failed, else its phase.
pub fn not_applied(rel: &StackRelease, first_error: Option<&str>) -> String {
    let Some(status) = rel.status.as_ref() else { return "its StackRelease has no status yet".into() };
    if status.phase == "Failed" {
        if let Some(e) = first_error {
            return shorten(e, 300);
        }
        return match status.entries.iter().find(|e| !e.synced && !e.message.is_empty()) {
            Some(e) => {
                let ns = if e.namespace.is_empty() { String::new() } else { format!("{}/", e.namespace) };
                format!("{} {ns}{}: {}", e.kind, e.name, shorten(&e.message, 300))
            }
            None => "its apply failed (see the StackRelease's Events)".into(),
        };
    }
    format!("not applied yet (StackRelease phase `{}`)", if status.phase.is_empty() { "none" } else { &status.phase })
}

/// The state of a rollout of `total` Clusters waiting for its ClusterClass (`message` says
/// why), or `None` when `previous` already says so (nothing to write, nothing to tell).
pub fn waiting(previous: Option<&RolloutStatus>, total: u32, message: String, requests: &Requests) -> Option<RolloutStatus> {
    if previous.is_some_and(|st| st.phase == WAITING && st.message == message) {
        return None;
    }
    let mut st = RolloutStatus {
        phase: WAITING.into(),
        total,
        reason: "ClassNotApplied".into(),
        message,
        handled_resume: requests.resume.clone(),
        handled_pause: requests.pause.clone(),
        ..RolloutStatus::default()
    };
    summarise(&mut st);
    Some(st)
}

/// What the subscription's other rollouts say about starting one to `target_tag`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Others {
    /// Rollouts to end `Superseded` (StackRelease name, its new state), in list order: running
    /// or waiting ones, and a paused one asked to resume (the newer rollout goes on from here).
    pub superseded: Vec<(String, RolloutStatus)>,
    /// A paused rollout (StackRelease name) that holds everything: nothing starts. The
    /// rollouts before it in list order are superseded all the same.
    pub held_by: Option<String>,
}

/// One rollout per subscription: a paused one holds everything; a running one is superseded by
/// the newer release (its Clusters are in the new plan). `releases` are all StackReleases;
/// those of `subscription` other than `target_release` count.
pub fn others(releases: &[StackRelease], subscription: &str, target_release: &str, target_tag: &str) -> Others {
    let mut out = Others::default();
    for other in releases.iter().filter(|r| r.spec.subscription == subscription && r.metadata.name.as_deref() != Some(target_release)) {
        let Some(o) = other.status.as_ref().and_then(|s| s.rollout.as_ref()) else { continue };
        let resumed = o.phase == PAUSED && asked(&annotation(other, ROLLOUT_RESUME), &o.handled_resume);
        let name = other.metadata.name.clone().unwrap_or_default();
        if o.phase == PAUSED && !resumed {
            out.held_by = Some(name);
            return out;
        }
        if o.phase == PROGRESSING || o.phase == WAITING || resumed {
            let mut o = o.clone();
            o.phase = SUPERSEDED.into();
            o.message = format!("superseded by the rollout to {target_tag}");
            out.superseded.push((name, o));
        }
    }
    out
}

/// The Clusters of `members` that another rollout of `subscription` (another release's than
/// `target_release`, superseded or being superseded: not complete, not stopped) moved and that
/// are still on the class it moved them to: a move under way, which the rollout superseding it
/// carries on ([`Fleet::in_flight`]).
pub fn in_flight(
    releases: &[StackRelease],
    subscription: &str,
    target_release: &str,
    members: &BTreeMap<String, Member>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for other in releases.iter().filter(|r| r.spec.subscription == subscription && r.metadata.name.as_deref() != Some(target_release)) {
        let Some(o) = other.status.as_ref().and_then(|s| s.rollout.as_ref()).filter(|o| o.phase != COMPLETE && o.phase != STOPPED) else {
            continue;
        };
        for moved in o.plan.iter().flat_map(|w| &w.moved_from) {
            let still_there = members.get(&moved.cluster).and_then(|m| topology_class(&m.obj.data)).is_some_and(|c| c == other.spec.tag);
            if still_there {
                out.insert(moved.cluster.clone());
            }
        }
    }
    out
}

/// A new rollout over `older` (see [`older`]) cut into `waves`, started at `now`: wave 1 is
/// pending (its Clusters are moved by the [`advance`] that follows). The requests already on
/// the StackRelease count as handled.
pub fn start(
    waves: &[Wave],
    older: &[(String, bool)],
    paths: &BTreeMap<String, Vec<String>>,
    requests: &Requests,
    now: DateTime<Utc>,
) -> RolloutStatus {
    let waves = plan(waves, older);
    let paths_of = |clusters: &[String]| -> Vec<ClusterPath> {
        clusters
            .iter()
            .filter_map(|c| paths.get(c).filter(|p| p.len() > 1).map(|p| ClusterPath { cluster: c.clone(), steps: p.clone() }))
            .collect()
    };
    RolloutStatus {
        phase: PROGRESSING.into(),
        wave: 1,
        waves: waves.len() as u32,
        total: older.len() as u32,
        started: timestamp(now),
        plan: waves
            .into_iter()
            .map(|clusters| WaveStatus { paths: paths_of(&clusters), clusters, phase: PENDING.into(), ..WaveStatus::default() })
            .collect(),
        handled_resume: requests.resume.clone(),
        handled_pause: requests.pause.clone(),
        ..RolloutStatus::default()
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

/// The Clusters whose control planes [`advance`] will look at for `st`: the running wave's,
/// when it has started (a paused rollout that resumes starts its wave again, and a pending wave
/// is moved, not judged). Empty otherwise.
pub fn to_judge(st: &RolloutStatus) -> &[String] {
    if st.phase != PROGRESSING {
        return &[];
    }
    match st.plan.get(st.wave.saturating_sub(1) as usize) {
        Some(w) if w.phase != PENDING => &w.clusters,
        _ => &[],
    }
}

/// How a wave's Clusters are, judged in wave order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaveHealth {
    /// Done (a Cluster deleted, or no longer the subscription's, counts: there is nothing left
    /// to move), and those given up on before (`RolloutStatus.failed`).
    pub done: u32,
    /// Not there yet (`namespace/name`, why).
    pub late: Vec<(String, String)>,
    /// Failed this round, newly (`namespace/name`, why).
    pub failed: Vec<(String, String)>,
    /// The first Cluster whose class someone else changed, and why: the rollout pauses.
    pub changed: Option<(String, String)>,
    /// Done at a class on their path before the target: ready for their next step.
    pub stepped: Vec<String>,
}

/// Judges the Clusters of a wave over what the round read of the fleet. A Cluster in
/// `wave.unmoved` is not judged: its edit is still to be made, so its class is not the target's
/// yet (that is no change by someone else); nor is one awaiting its window, nor one in
/// `given_up` (failed before: left alone or moved back).
pub fn judge_wave(wave: &WaveStatus, fleet: &Fleet, target: &Target<'_>, given_up: &BTreeSet<&str>) -> WaveHealth {
    let mut out = WaveHealth::default();
    for key in &wave.clusters {
        if given_up.contains(key.as_str()) {
            continue;
        }
        let Some(m) = fleet.members.get(key) else {
            out.done += 1;
            continue;
        };
        if wave.awaiting_window.contains(key) {
            let why = match before_move(fleet, key) {
                BeforeMove::Unknown => "not moved yet: its ClusterSync does not say yet whether it is Ready on the release it runs",
                _ => "not moved yet: none of its maintenance windows is open",
            };
            out.late.push((key.clone(), why.to_owned()));
            continue;
        }
        if wave.unmoved.contains(key) {
            out.late.push((key.clone(), format!("not moved to {} yet: its edit failed and is tried again at every check", target.class)));
            continue;
        }
        // On a path across Kubernetes minors, a Cluster is judged at the class it is on; done
        // there (not at the target), it is ready for its next step.
        let class = topology_class(&m.obj.data).unwrap_or_default();
        let stop = wave.paths.iter().find(|p| &p.cluster == key).filter(|p| p.steps.contains(&class) && class != target.class);
        let at = match stop {
            Some(_) => Target { class: &class, version: fleet.versions.get(&class).and_then(|v| v.as_deref()), v1beta2: target.v1beta2 },
            None => *target,
        };
        match judge(&m.obj.data, fleet.control_planes.get(key), fleet.syncs.get(key), &at) {
            Health::Done if stop.is_some() => out.stepped.push(key.clone()),
            Health::Done => out.done += 1,
            Health::Waiting(why) => out.late.push((key.clone(), why)),
            Health::Failed("ClassChanged", why) => {
                if out.changed.is_none() {
                    out.changed = Some((key.clone(), why));
                }
            }
            Health::Failed(_, why) => out.failed.push((key.clone(), why)),
        }
    }
    out
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

/// Why a failed Cluster cannot be moved back to where it was before the rollout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRollback {
    #[error("what it ran before the rollout is not recorded (it was moved by an older stacksync)")]
    NotRecorded,
    #[error(
        "the rollout moved its Kubernetes version from {} to {now}{}, and Cluster API refuses to decrease `spec.topology.version`",
        if from.is_empty() { "none" } else { from },
        control_plane.as_ref().map(|v| format!("; its control plane already runs {v}")).unwrap_or_default()
    )]
    VersionMoved { from: String, now: String, control_plane: Option<String> },
}

/// Whether `cluster` (as read, with its control plane if read) can be moved back to where it
/// was before the rollout (`from`): Cluster API refuses to decrease `spec.topology.version`,
/// so only a Cluster whose Kubernetes version the move did not change can. `Ok(class)`, or why
/// not.
pub fn rollback_to(cluster: &Value, control_plane: Option<&Value>, from: Option<&MovedFrom>) -> Result<String, NoRollback> {
    let Some(from) = from else { return Err(NoRollback::NotRecorded) };
    let now = cluster.pointer("/spec/topology/version").and_then(Value::as_str).unwrap_or_default();
    if now != from.version {
        let cp = control_plane.and_then(|cp| cp.pointer("/status/version")).and_then(Value::as_str);
        return Err(NoRollback::VersionMoved {
            from: from.version.clone(),
            now: now.to_owned(),
            control_plane: cp.filter(|v| *v != from.version).map(str::to_owned),
        });
    }
    Ok(from.class.clone())
}

/// Whether a wave started at `wave_started` (RFC 3339; none recorded: never) is past its
/// `timeout`, `waited` saying how long ago a recorded time was (the driver measures it on the
/// monotonic clock, `schedule::clock`, so a step of the wall clock does not time a wave out).
pub fn timed_out(wave_started: &str, timeout: Duration, waited: &dyn Fn(&str) -> Duration) -> bool {
    !wave_started.is_empty() && waited(wave_started) > timeout
}

/// Moves a running or paused rollout on as far as it goes at `now`, given the fleet the round
/// read (the control planes of [`to_judge`]'s Clusters among it): resumes a paused one asked
/// to, starts a pending wave inside its windows (the driver moves its Clusters), moves the
/// Clusters of a running wave whose window opened, judges a running one, gives up on failed
/// and late Clusters within `maxFailures` (moving them back with `onFailure: rollback`), pauses
/// past it, on a Cluster that cannot be moved back, on a Cluster whose class someone else
/// changed or on a pause request at a wave boundary, completes the last. Returns what happened,
/// in order. `st`'s counts are brought up to date ([`summarise`]). `now` stamps a wave that
/// starts; `waited` judges a running one ([`timed_out`]).
pub fn advance(
    st: &mut RolloutStatus,
    fleet: &Fleet,
    target: &Target<'_>,
    requests: &Requests,
    policy: &Policy<'_>,
    now: DateTime<Utc>,
    waited: &dyn Fn(&str) -> Duration,
) -> Vec<Step> {
    let mut steps = Vec::new();
    // Moving back what failed goes on whatever the rollout does (paused over the budget, or
    // complete, too).
    if [PROGRESSING, PAUSED, COMPLETE].contains(&st.phase.as_str()) {
        for f in st.failed.iter().filter(|f| f.outcome == ROLLING_BACK) {
            if let Some(to) = moved_from(st, &f.cluster).map(|m| m.class.clone()) {
                steps.push(Step::RollBack { cluster: f.cluster.clone(), to });
            }
        }
    }
    let past_timeout = |started: &str| timed_out(started, policy.wave_timeout, waited);
    go_on(st, fleet, target, requests, (policy, &past_timeout), now, &mut steps);
    summarise(st);
    steps
}

/// What `cluster` was on before this rollout moved it.
fn moved_from<'s>(st: &'s RolloutStatus, cluster: &str) -> Option<&'s MovedFrom> {
    st.plan.iter().flat_map(|w| &w.moved_from).find(|m| m.cluster == cluster)
}

/// What a rollout knows of a Cluster's health on the release it runs, before moving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeforeMove {
    /// Its ClusterSync says Ready (or it is no longer in the fleet: there is nothing to move).
    Ready,
    /// Its ClusterSync says it is not Ready, and why: it is not moved (`NotReadyBeforeMove`).
    NotReady(String),
    /// Not known yet: no ClusterSync (a Cluster not synced since this process started, or
    /// never), or none that says Ready or not. It waits, neither moved nor failed.
    Unknown,
}

/// What the rollout knows of Cluster `key`'s health before moving it ([`BeforeMove`]).
pub fn before_move(fleet: &Fleet, key: &str) -> BeforeMove {
    if !fleet.members.contains_key(key) {
        return BeforeMove::Ready;
    }
    let Some(sync) = fleet.syncs.get(key) else { return BeforeMove::Unknown };
    let on = sync.applied_release.as_ref().map_or_else(|| "the release it runs".to_owned(), |r| r.tag.clone());
    match sync.conditions.iter().find(|c| c.type_ == "Ready") {
        Some(c) if c.status == "True" => BeforeMove::Ready,
        // Its apply (or the wait for its health, within `healthTimeout`) is under way: not
        // judged yet, so it waits like a Cluster with no verdict (a rollout that starts while
        // a Cluster's first apply runs must not fail it).
        Some(c) if c.reason == "Progressing" => BeforeMove::Unknown,
        Some(c) if c.status == "False" => {
            let message = if c.message.is_empty() { String::new() } else { format!(": {}", shorten(&c.message, 300)) };
            let reason = if c.reason.is_empty() { "NotReady" } else { &c.reason };
            BeforeMove::NotReady(format!("not Ready on {on} before its move ({reason}{message})"))
        }
        _ => BeforeMove::Unknown,
    }
}

/// Whether this rollout already moved Cluster `key` (it records where from), a rollout it
/// superseded did ([`Fleet::in_flight`]), or its class is already the target's or a step of
/// its path: a wave started again (a resume) edits it to where it is, which is no move; a move
/// under way is carried on.
fn moved_already(st: &RolloutStatus, fleet: &Fleet, key: &str, target: &str) -> bool {
    if moved_from(st, key).is_some() || fleet.in_flight.contains(key) {
        return true;
    }
    let Some(class) = fleet.members.get(key).and_then(|m| topology_class(&m.obj.data)) else { return false };
    class == target || path_of(st.plan.iter(), key).is_some_and(|p| p.steps.contains(&class))
}

/// Splits `open` (Clusters of wave `index`, due to move now) into those to move — Ready on
/// their current release ([`before_move`]) or already moved ([`moved_already`]) — and those
/// whose health is not known yet (no ClusterSync yet: they wait with the Clusters awaiting a
/// window, and are looked at again at every check). The others are never moved and are
/// reported as failed (`NotReadyBeforeMove`, left as they are): with `notReady: fail` as
/// failures of the wave, within its `maxFailures` (judged in the next round, as any failure);
/// with `notReady: skip` taken out of the wave and the rollout's total, outside its budget.
fn not_moved_unless_ready(
    st: &mut RolloutStatus,
    (index, target): (usize, &str),
    fleet: &Fleet,
    policy: &Policy<'_>,
    open: Vec<String>,
    steps: &mut Vec<Step>,
) -> (Vec<String>, Vec<String>) {
    let (mut ready, mut held) = (Vec::with_capacity(open.len()), Vec::new());
    for key in open {
        let check = if moved_already(st, fleet, &key, target) { BeforeMove::Ready } else { before_move(fleet, &key) };
        let why = match check {
            BeforeMove::Ready => {
                ready.push(key);
                continue;
            }
            BeforeMove::Unknown => {
                held.push(key);
                continue;
            }
            BeforeMove::NotReady(why) => why,
        };
        let wave = match policy.not_ready {
            NotReady::Fail => st.wave,
            NotReady::Skip => {
                st.plan[index].clusters.retain(|c| c != &key);
                st.total = st.total.saturating_sub(1);
                0
            }
        };
        let failed = FailedCluster {
            cluster: key,
            wave,
            reason: NOT_READY_BEFORE_MOVE.into(),
            message: why,
            outcome: LEFT_ALONE.into(),
            detail: String::new(),
        };
        steps.push(Step::ClusterFailed { wave: st.wave, failed: failed.clone() });
        st.failed.push(failed);
    }
    (ready, held)
}

/// Splits `clusters` into those inside one of their windows now and those not, with when the
/// earliest window of the latter opens (`None`: none opens again).
fn by_window(clusters: &[String], policy: &Policy<'_>) -> (Vec<String>, Vec<String>, Option<DateTime<Utc>>) {
    let (mut open, mut closed, mut next) = (Vec::new(), Vec::new(), None::<DateTime<Utc>>);
    for key in clusters {
        match (policy.window)(key) {
            Verdict::Closed(when) => {
                closed.push(key.clone());
                if let Some(when) = when {
                    next = Some(next.map_or(when, |n| n.min(when)));
                }
            }
            _ => open.push(key.clone()),
        }
    }
    (open, closed, next)
}

/// Notes that the rollout waits for a window (said once: a step only when it starts waiting).
fn outside_window(st: &mut RolloutStatus, next: Option<DateTime<Utc>>, waiting: usize, steps: &mut Vec<Step>) {
    let next = next.map(timestamp).unwrap_or_default();
    let when = if next.is_empty() { "none of their windows opens again".to_owned() } else { format!("the next opens at {next}") };
    let message = format!("waiting for a maintenance window for {waiting} Clusters of wave {}/{}: {when}", st.wave, st.waves);
    if st.reason != OUTSIDE_WINDOW || st.next_window != next {
        steps.push(Step::OutsideWindow { wave: st.wave, waves: st.waves, next: next.clone(), message: message.clone() });
    }
    OUTSIDE_WINDOW.clone_into(&mut st.reason);
    st.message = message;
    st.next_window = next;
}

fn inside_window(st: &mut RolloutStatus) {
    if st.reason == OUTSIDE_WINDOW {
        st.reason.clear();
        st.message.clear();
    }
    st.next_window.clear();
}

/// Notes whether Clusters of the wave (`closed` many) still wait for a window, the next
/// opening at `next`.
fn windows_now(st: &mut RolloutStatus, closed: usize, next: Option<DateTime<Utc>>, steps: &mut Vec<Step>) {
    if closed == 0 {
        inside_window(st);
    } else {
        outside_window(st, next, closed, steps);
    }
}

/// What a round does after one decision: ends (the rollout waits for the next round, or is
/// paused or complete), or goes on with the next wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Wait,
    NextWave,
}

/// Resumes a paused rollout, runs the running one's waves as far as they go this round.
fn go_on(
    st: &mut RolloutStatus,
    fleet: &Fleet,
    target: &Target<'_>,
    requests: &Requests,
    (policy, past_timeout): (&Policy<'_>, &dyn Fn(&str) -> bool),
    now: DateTime<Utc>,
    steps: &mut Vec<Step>,
) {
    if st.phase == PAUSED && asked(&requests.resume, &st.handled_resume) {
        resume(st, requests, steps);
    }
    if st.phase != PROGRESSING {
        return;
    }
    while wave_round(st, fleet, target, requests, (policy, past_timeout), now, steps) == Then::NextWave {}
}

/// A paused rollout asked to resume goes on at its wave: the wave gets its whole waveTimeout
/// again, its Clusters their edit, and those it gave up on (left alone or moved back) another
/// try: a person looked at them.
fn resume(st: &mut RolloutStatus, requests: &Requests, steps: &mut Vec<Step>) {
    steps.push(Step::Resumed { wave: st.wave, waves: st.waves });
    st.phase = PROGRESSING.into();
    st.reason.clear();
    st.message.clear();
    st.handled_resume.clone_from(&requests.resume);
    // A resume also cancels a pause asked for before it.
    st.handled_pause.clone_from(&requests.pause);
    let wave = st.wave;
    st.failed.retain(|f| f.wave != wave);
    if let Some(w) = st.plan.get_mut(st.wave.saturating_sub(1) as usize)
        && w.phase == PROGRESSING
    {
        w.phase = PENDING.into();
        w.unmoved.clear();
        w.awaiting_window.clear();
    }
}

/// One wave of a running rollout this round: started when pending; else its Clusters whose
/// window opened moved, or it is judged — paused on a changed class or over its failure budget,
/// its Clusters done at a step before the target moved on, waiting for late ones, or done (and
/// the next wave's turn, but for the last one or a pause request).
fn wave_round(
    st: &mut RolloutStatus,
    fleet: &Fleet,
    target: &Target<'_>,
    requests: &Requests,
    (policy, past_timeout): (&Policy<'_>, &dyn Fn(&str) -> bool),
    now: DateTime<Utc>,
    steps: &mut Vec<Step>,
) -> Then {
    let index = st.wave.saturating_sub(1) as usize;
    let Some(wave) = st.plan.get(index) else {
        st.phase = COMPLETE.into();
        return Then::Wait;
    };
    if wave.phase == PENDING {
        start_wave(st, (index, target.class), fleet, policy, now, steps);
        // Nothing is done the moment it is edited.
        return Then::Wait;
    }
    // What is moved now is judged from the next round on (its class is the old one until the
    // driver's edit).
    if move_awaiting(st, (index, target.class), fleet, policy, now, steps) {
        return Then::Wait;
    }
    let wave = &st.plan[index];
    let size = wave.clusters.len();
    let given_up: BTreeSet<&str> = st.failed.iter().filter(|f| f.wave == st.wave).map(|f| f.cluster.as_str()).collect();
    let health = judge_wave(wave, fleet, target, &given_up);
    let awaiting = !wave.awaiting_window.is_empty();
    st.plan[index].done = health.done;
    if let Some((cluster, why)) = &health.changed {
        pause(st, "ClassChanged", format!("{cluster}: {why}"), steps);
        return Then::Wait;
    }
    for (cluster, why) in &health.failed {
        give_up(st, fleet, policy, cluster, "ClusterFailed", why, steps);
    }
    let timed_out = !health.late.is_empty() && !awaiting && past_timeout(&st.wave_started);
    if timed_out {
        for (cluster, why) in &health.late {
            let why = format!("not done within waveTimeout {}: {why}", crate::model::schedule::format_duration(policy.wave_timeout));
            give_up(st, fleet, policy, cluster, "WaveTimeout", &why, steps);
        }
    }
    let failed_here: Vec<&FailedCluster> = st.failed.iter().filter(|f| f.wave == st.wave).collect();
    if let Some((reason, message)) = wave_pause(&failed_here, &health, timed_out, size, policy) {
        pause(st, reason, message, steps);
        return Then::Wait;
    }
    let failed = failed_here.len();
    if !health.stepped.is_empty() {
        step_on(st, index, &health.stepped, policy, now, steps);
        return Then::Wait;
    }
    if !health.late.is_empty() && !timed_out {
        return Then::Wait;
    }
    wave_done(st, (index, size, failed), requests, steps)
}

/// Starts pending wave `index` inside its Clusters' windows: those inside one and Ready on
/// their release are to be moved now ([`not_moved_unless_ready`]), the others await their
/// window or a verdict; none inside a window: it waits.
fn start_wave(
    st: &mut RolloutStatus,
    (index, target): (usize, &str),
    fleet: &Fleet,
    policy: &Policy<'_>,
    now: DateTime<Utc>,
    steps: &mut Vec<Step>,
) {
    let (open, closed, next) = by_window(&st.plan[index].clusters, policy);
    if open.is_empty() && !closed.is_empty() {
        outside_window(st, next, closed.len(), steps);
        return;
    }
    windows_now(st, closed.len(), next, steps);
    let (open, held) = not_moved_unless_ready(st, (index, target), fleet, policy, open, steps);
    steps.push(Step::WaveStarted { wave: st.wave, waves: st.waves, clusters: open });
    st.plan[index].phase = PROGRESSING.into();
    st.plan[index].awaiting_window = closed.into_iter().chain(held).collect();
    st.wave_started = timestamp(now);
}

/// Moves the Clusters of running wave `index` whose window opened (and that are Ready on
/// their release); the wave's clock starts again with them (`waveTimeout` counts from the last
/// Cluster moved in). Whether any was moved.
fn move_awaiting(
    st: &mut RolloutStatus,
    (index, target): (usize, &str),
    fleet: &Fleet,
    policy: &Policy<'_>,
    now: DateTime<Utc>,
    steps: &mut Vec<Step>,
) -> bool {
    if st.plan[index].awaiting_window.is_empty() {
        return false;
    }
    let (open, closed, next) = by_window(&st.plan[index].awaiting_window, policy);
    let (open, held) = not_moved_unless_ready(st, (index, target), fleet, policy, open, steps);
    let moving = !open.is_empty();
    if moving {
        steps.push(Step::Moved { wave: st.wave, waves: st.waves, clusters: open });
        st.wave_started = timestamp(now);
    }
    windows_now(st, closed.len(), next, steps);
    st.plan[index].awaiting_window = closed.into_iter().chain(held).collect();
    moving
}

/// Whether the running wave pauses after this round's failures (`failed_here`: every Cluster
/// of it given up on), and why: a Cluster that cannot be moved back (`RollbackImpossible`), or
/// more failures than `maxFailures` allows of its `size` Clusters, named after what tipped it
/// over — the late Clusters when it `timed_out`, else the first Cluster that failed this round,
/// else the first given up on in it.
fn wave_pause(
    failed_here: &[&FailedCluster],
    health: &WaveHealth,
    timed_out: bool,
    size: usize,
    policy: &Policy<'_>,
) -> Option<(&'static str, String)> {
    if let Some(f) = failed_here.iter().find(|f| f.outcome == ROLLBACK_IMPOSSIBLE) {
        return Some((ROLLBACK_IMPOSSIBLE, format!("{}: {}; it cannot be moved back: {}", f.cluster, f.message, f.detail)));
    }
    let budget = policy.max_failures.of(size);
    if failed_here.len() <= budget {
        return None;
    }
    let (reason, message) = match (health.failed.first(), failed_here.first()) {
        _ if timed_out => ("WaveTimeout", late_message(&health.late, policy.wave_timeout)),
        (Some((cluster, why)), _) => ("ClusterFailed", format!("{cluster}: {why}")),
        (None, Some(f)) => ("ClusterFailed", format!("{}: {}", f.cluster, f.message)),
        (None, None) => ("ClusterFailed", String::new()),
    };
    let message = if budget == 0 {
        message
    } else {
        format!("{message} ({} of {size} Clusters of the wave failed; maxFailures {})", failed_here.len(), policy.max_failures)
    };
    Some((reason, message))
}

/// Clusters of wave `index` done at a class before the target take their next step (one
/// Kubernetes minor on), inside their windows; the wave's clock starts again with them.
fn step_on(st: &mut RolloutStatus, index: usize, stepped: &[String], policy: &Policy<'_>, now: DateTime<Utc>, steps: &mut Vec<Step>) {
    let (open, closed, next) = by_window(stepped, policy);
    if !closed.is_empty() {
        st.plan[index].awaiting_window.extend(closed.iter().cloned());
        outside_window(st, next, st.plan[index].awaiting_window.len(), steps);
    }
    if !open.is_empty() {
        steps.push(Step::Stepped { wave: st.wave, waves: st.waves, clusters: open });
        st.wave_started = timestamp(now);
    }
}

/// Wave `index` of `size` Clusters is done, `failed` of them given up on: the rollout completes
/// after the last wave, pauses before the next on a pause request, or goes on with it.
fn wave_done(st: &mut RolloutStatus, (index, size, failed): (usize, usize, usize), requests: &Requests, steps: &mut Vec<Step>) -> Then {
    st.plan[index].phase = DONE.into();
    steps.push(Step::WaveDone { wave: st.wave, waves: st.waves, clusters: size - failed, failed });
    if index + 1 == st.plan.len() {
        st.phase = COMPLETE.into();
        st.wave_started.clear();
        steps.push(Step::Complete { failed: st.failed.len() });
        return Then::Wait;
    }
    st.wave += 1;
    if asked(&requests.pause, &st.handled_pause) {
        st.handled_pause.clone_from(&requests.pause);
        let message = format!("paused by request before wave {}/{}", st.wave, st.waves);
        pause(st, "PauseRequested", message, steps);
        return Then::Wait;
    }
    Then::NextWave
}

/// Gives up on `cluster` of the running wave: recorded in `st.failed` with what becomes of it
/// (left alone; or, with `onFailure: rollback`, moved back, or not when Cluster API forbids).
fn give_up(st: &mut RolloutStatus, fleet: &Fleet, policy: &Policy<'_>, cluster: &str, reason: &str, why: &str, steps: &mut Vec<Step>) {
    let (outcome, detail, to) = match policy.on_failure {
        OnFailure::Pause => (LEFT_ALONE, String::new(), None),
        OnFailure::Rollback => {
            let member = fleet.members.get(cluster).map(|m| &m.obj.data);
            match member.map(|c| rollback_to(c, fleet.control_planes.get(cluster), moved_from(st, cluster))) {
                Some(Ok(class)) => (ROLLING_BACK, String::new(), Some(class)),
                Some(Err(why)) => (ROLLBACK_IMPOSSIBLE, why.to_string(), None),
                None => (LEFT_ALONE, "it is gone".to_owned(), None),
            }
        }
    };
    let failed = FailedCluster {
        cluster: cluster.to_owned(),
        wave: st.wave,
        reason: reason.to_owned(),
        message: shorten(why, 300),
        outcome: outcome.to_owned(),
        detail,
    };
    steps.push(Step::ClusterFailed { wave: st.wave, failed: failed.clone() });
    if let Some(to) = to {
        steps.push(Step::RollBack { cluster: cluster.to_owned(), to });
    }
    st.failed.push(failed);
}

fn pause(st: &mut RolloutStatus, reason: &'static str, message: String, steps: &mut Vec<Step>) {
    steps.push(Step::Paused { wave: st.wave, waves: st.waves, reason, message: message.clone() });
    st.phase = PAUSED.into();
    reason.clone_into(&mut st.reason);
    st.message = message;
}

/// Names the first late Cluster and why, and the other late ones (at most five more).
pub fn late_message(waiting: &[(String, String)], timeout: Duration) -> String {
    let within = crate::model::schedule::format_duration(timeout);
    let Some((key, why)) = waiting.first() else { return String::new() };
    let mut out = format!("{key} not done within waveTimeout {within}: {why}");
    if waiting.len() > 1 {
        let others: Vec<&str> = waiting[1..].iter().take(5).map(|(k, _)| k.as_str()).collect();
        let more = if waiting.len() > 6 { format!(" and {} more", waiting.len() - 6) } else { String::new() };
        out.push_str(&format!(" (also late: {}{more})", others.join(", ")));
    }
    out
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
