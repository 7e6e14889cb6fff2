//! How a rollout starts (pure): waiting for the target's ClusterClass, superseding or held by
//! the subscription's other rollouts, the moves already under way, the plan of waves.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::super::super::reconcile::decide::topology_class;
use crate::config::Wave;
use crate::status::crd::{ClusterPath, ROLLOUT_RESUME, RolloutStatus, StackRelease, WaveStatus};
use crate::status::desired::shorten;

use super::{
    COMPLETE, Member, PAUSED, PENDING, PROGRESSING, Requests, STOPPED, SUPERSEDED, WAITING, annotation, asked, plan, summarise, timestamp,
};

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
