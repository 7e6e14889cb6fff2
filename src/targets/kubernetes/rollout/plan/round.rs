//! What one round of a running rollout does (pure): resumes a paused one asked to, starts a
//! pending wave, moves the Clusters whose window opened, judges the running wave and moves it
//! on, step by step, to its end (or a pause).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::super::super::reconcile::decide::topology_class;
use crate::config::NotReady;
use crate::model::window::Verdict;
use crate::status::crd::{FailedCluster, RolloutStatus};

use super::failures::{give_up, moved_from, wave_pause};
use super::judge::{BeforeMove, Target, before_move, judge_wave};
use super::paths::path_of;
use super::{
    COMPLETE, DONE, Fleet, LEFT_ALONE, NOT_READY_BEFORE_MOVE, OUTSIDE_WINDOW, PAUSED, PENDING, PROGRESSING, Policy, ROLLING_BACK, Requests,
    Step, asked, summarise, timestamp,
};

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

/// Whether a wave started at `wave_started` (RFC 3339; none recorded: never) is past its
/// `timeout`, `waited` saying how long ago a recorded time was (the driver measures it on the
/// monotonic clock, `schedule::clock`, so a step of the wall clock does not time a wave out).
pub fn timed_out(wave_started: &str, timeout: Duration, waited: &dyn Fn(&str) -> Duration) -> bool {
    !wave_started.is_empty() && waited(wave_started) > timeout
}

/// Whether this rollout already moved Cluster `key` (it records where from), a rollout it
/// superseded did ([`Fleet::in_flight`]), or its class is already the target's or a step of
/// its path: a wave started again (a resume) edits it to where it is, which is no move; a move
/// under way is carried on.
pub(super) fn moved_already(st: &RolloutStatus, fleet: &Fleet, key: &str, target: &str) -> bool {
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
pub(super) fn not_moved_unless_ready(
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
pub(super) fn by_window(clusters: &[String], policy: &Policy<'_>) -> (Vec<String>, Vec<String>, Option<DateTime<Utc>>) {
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
pub(super) fn outside_window(st: &mut RolloutStatus, next: Option<DateTime<Utc>>, waiting: usize, steps: &mut Vec<Step>) {
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

pub(super) fn inside_window(st: &mut RolloutStatus) {
    if st.reason == OUTSIDE_WINDOW {
        st.reason.clear();
        st.message.clear();
    }
    st.next_window.clear();
}

/// Notes whether Clusters of the wave (`closed` many) still wait for a window, the next
/// opening at `next`.
pub(super) fn windows_now(st: &mut RolloutStatus, closed: usize, next: Option<DateTime<Utc>>, steps: &mut Vec<Step>) {
    if closed == 0 {
        inside_window(st);
    } else {
        outside_window(st, next, closed, steps);
    }
}

/// What a round does after one decision: ends (the rollout waits for the next round, or is
/// paused or complete), or goes on with the next wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Then {
    Wait,
    NextWave,
}

/// Resumes a paused rollout, runs the running one's waves as far as they go this round.
pub(super) fn go_on(
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
pub(super) fn resume(st: &mut RolloutStatus, requests: &Requests, steps: &mut Vec<Step>) {
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
pub(super) fn wave_round(
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
pub(super) fn start_wave(
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
pub(super) fn move_awaiting(
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

/// Clusters of wave `index` done at a class before the target take their next step (one
/// Kubernetes minor on), inside their windows; the wave's clock starts again with them.
pub(super) fn step_on(
    st: &mut RolloutStatus,
    index: usize,
    stepped: &[String],
    policy: &Policy<'_>,
    now: DateTime<Utc>,
    steps: &mut Vec<Step>,
) {
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
pub(super) fn wave_done(
    st: &mut RolloutStatus,
    (index, size, failed): (usize, usize, usize),
    requests: &Requests,
    steps: &mut Vec<Step>,
) -> Then {
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

pub(super) fn pause(st: &mut RolloutStatus, reason: &'static str, message: String, steps: &mut Vec<Step>) {
    steps.push(Step::Paused { wave: st.wave, waves: st.waves, reason, message: message.clone() });
    st.phase = PAUSED.into();
    reason.clone_into(&mut st.reason);
    st.message = message;
}
