//! The rollout driver: reads the fleet (Clusters, ClusterSyncs, the running wave's control
//! planes, StackReleases), asks [`super::plan`] what to do, and does it — edits Clusters'
//! classes, writes `status.rollout`, publishes Events and metrics — plus the pause and resume
//! command. The clock is read here and passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{debug, info, warn};

use super::super::context::Kube;
use super::super::ledger::release_name;
use super::super::reconcile::decide::{subscription_for, topology_class};
use super::error::Result;
use super::plan::{self, Fleet, Member, PAUSED, PROGRESSING, Policy, Requests, Round, Step, Target, Undriven};
use super::{Error, ROLLOUT_MANAGER};
use crate::config::{RolloutConfig, Subscription};
use crate::model::ClusterKey;
use crate::model::window::{self, Verdict};
use crate::release::Release;
use crate::status::crd::{
    ClusterSync, ClusterSyncStatus, FailedCluster, MovedFrom, ROLLOUT_PAUSE, ROLLOUT_RESUME, RolloutStatus, StackRelease, WaveStatus,
};

/// Looks at every subscription's rollout when releases change and every `checkInterval` (the
/// shortest of all), until `stop` says so.
///
/// A pause or resume request (the annotations `stacksync rollout` sets) and a waiting rollout's
/// ClusterClass becoming applied are seen on a watch of StackReleases and looked at at once, not
/// at the next check. When the set of subscriptions with `rollout:` changes (and at start), the
/// rollouts of subscriptions no longer configured for one end `Stopped`.
pub(in crate::targets::kubernetes) async fn run(kube: &Kube, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut published = kube.ctx.published();
    let releases: Api<StackRelease> = Api::all(kube.watch.clone());
    let mut wakes = std::pin::pin!(watcher::watcher(releases, watcher::Config::default()).default_backoff());
    let mut driven_before: Option<BTreeSet<String>> = None;
    // Every subscription this process drove a rollout for: one removed from the config since is
    // still ours to stop; one this process never knew may be another stacksync's (several may
    // share a management cluster), and is left alone.
    let mut driven_ever: BTreeSet<String> = BTreeSet::new();
    loop {
        let config = kube.ctx.config();
        let driven: BTreeSet<String> = config.subscriptions.iter().filter(|s| s.rollout.is_some()).map(|s| s.name.clone()).collect();
        driven_ever.extend(driven.iter().cloned());
        if driven_before.as_ref() != Some(&driven) {
            let configured: BTreeSet<String> = config.subscriptions.iter().map(|s| s.name.clone()).collect();
            match stop_undriven(kube, &driven, &configured, &driven_ever).await {
                Ok(()) => driven_before = Some(driven),
                // A server that throttles is said once by its client (`workload.rs`, `Throttle`).
                Err(e) if crate::targets::kubernetes::reconcile::workload::is_throttled(&e) => {
                    debug!(error = %e, "rollout: cannot look for rollouts to stop now; retried at the next check");
                }
                Err(e) => warn!(error = %e, "rollout: cannot look for rollouts to stop now; retried at the next check"),
            }
        }
        // Without a rollout, only configuration changes matter: looked at every 30 s.
        let mut interval: Option<Duration> = None;
        for sub in &config.subscriptions {
            let Some(r) = &sub.rollout else { continue };
            interval = Some(interval.map_or(r.check_interval, |i| i.min(r.check_interval)));
            if sub.suspend {
                continue;
            }
            if let Err(e) = tick(kube, sub, r).await {
                warn!(subscription = %sub.name, error = %e, "rollout: cannot look at the fleet now; retried at the next check");
            }
        }
        tokio::select! {
            r = published.changed() => if r.is_err() { return },
            () = tokio::time::sleep(interval.unwrap_or(Duration::from_secs(30))) => {}
            () = woken(&mut wakes) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Waits until the StackRelease watch shows something the driver acts on at once (see
/// [`plan::wants_a_look`]). Cancel-safe: dropping it loses no event still to come. Never
/// returns if the watch ends.
async fn woken<S>(events: &mut std::pin::Pin<&mut S>)
where
    S: futures_util::Stream<Item = std::result::Result<watcher::Event<StackRelease>, watcher::Error>>,
{
    use futures_util::StreamExt;
    while let Some(event) = events.next().await {
        if let Ok(watcher::Event::Apply(rel) | watcher::Event::InitApply(rel)) = event
            && plan::wants_a_look(&rel)
        {
            debug!(release = ?rel.metadata.name, "rollout: a request or a ClusterClass to act on");
            return;
        }
    }
    std::future::pending().await
}

/// Ends with `Stopped` every running, paused or waiting rollout of a subscription of ours not
/// in `driven` (see [`plan::undriven`]).
async fn stop_undriven(
    kube: &Kube,
    driven: &BTreeSet<String>,
    configured: &BTreeSet<String>,
    driven_ever: &BTreeSet<String>,
) -> Result<()> {
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let all = api.list(&ListParams::default()).await.map_err(Error::ListReleases)?;
    for rel in &all.items {
        let Some(st) = rel.status.as_ref().and_then(|s| s.rollout.as_ref()) else { continue };
        let sub = &rel.spec.subscription;
        let why = match plan::undriven(sub, st, driven, configured, driven_ever) {
            Undriven::Keep => continue,
            Undriven::NotOurs => {
                debug!(subscription = %sub, "rollout: not a subscription of this process; left alone");
                continue;
            }
            Undriven::Stop(why) => why,
        };
        let st = plan::stopped(st, &why);
        let name = rel.metadata.name.clone().unwrap_or_default();
        info!(subscription = %sub, release = %name, "rollout stopped: {}", st.message);
        event(kube, rel, EventType::Normal, "RolloutStopped", st.message.clone());
        record_metrics(sub, &st);
        write(kube, &name, &st).await?;
    }
    Ok(())
}

/// One look at `sub`'s rollout: start one, go on with one, or nothing.
async fn tick(kube: &Kube, sub: &Subscription, cfg: &RolloutConfig) -> Result<()> {
    let offered = kube.ctx.offered(sub).await;
    let (Some(target), Some(families)) = (offered.first(), sub.families()) else { return Ok(()) };
    let releases: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let name = release_name(&sub.name, &target.tag);
    let all = releases.list(&ListParams::default()).await.map_err(Error::ListReleases)?.items;
    let Some(rel) = all.iter().find(|r| r.metadata.name.as_deref() == Some(name.as_str())).cloned() else {
        debug!(release = %name, "rollout: the target's StackRelease is not recorded yet");
        return Ok(());
    };
    let state = rel.status.as_ref().and_then(|s| s.rollout.clone());
    let round = plan::round(state.as_ref());
    if round == Round::Skip {
        return Ok(());
    }
    let requests = Requests::of(&rel);
    let look = Look { kube, sub, cfg, offered: &offered, target, families, name, rel, all, requests };
    let fleet = Fleet { members: members(kube, sub, cfg).await?, ..Fleet::default() };
    let st = match (round, state) {
        (Round::GoOn, Some(st)) => st,
        (_, state) => match begin(&look, &fleet, state).await? {
            Some(st) => st,
            None => return Ok(()),
        },
    };
    go_on(&look, fleet, st).await
}

/// What one look at a subscription's rollout works with: the release it moves the fleet to
/// and that release's `StackRelease`, among all of them.
struct Look<'a> {
    kube: &'a Kube,
    sub: &'a Subscription,
    cfg: &'a RolloutConfig,
    /// The subscription's offered releases, newest first.
    offered: &'a [Release],
    /// The newest of them: the rollout's target.
    target: &'a Release,
    families: crate::model::version::Families<'a>,
    /// The target's `StackRelease` (`rel`), by name.
    name: String,
    rel: StackRelease,
    all: Vec<StackRelease>,
    requests: Requests,
}

/// A rollout to start, when Clusters run older releases (`state`: a waiting, complete or
/// stopped one before): it waits for the target's ClusterClass, supersedes older rollouts of
/// the subscription, is held by a paused one, or starts ([`start`]). `None`: nothing to go on
/// with this round.
async fn begin(look: &Look<'_>, fleet: &Fleet, state: Option<RolloutStatus>) -> Result<Option<RolloutStatus>> {
    let Some(older) = plan::older(&fleet.members, &look.target.tag, look.families) else { return Ok(None) };
    if older.is_empty() {
        return Ok(None);
    }
    // The ClusterClass of the target must be in place before a Cluster names it.
    let phase = look.rel.status.as_ref().map(|s| s.phase.as_str()).unwrap_or_default();
    if phase != "Applied" {
        wait_for_class(look, state.as_ref(), older.len() as u32, phase).await?;
        return Ok(None);
    }
    let others = plan::others(&look.all, &look.sub.name, &look.name, &look.target.tag);
    for (other, o) in &others.superseded {
        write(look.kube, other, o).await?;
    }
    if let Some(paused) = others.held_by {
        debug!(release = %look.name, paused, "rollout: another rollout of this subscription is paused");
        return Ok(None);
    }
    Ok(Some(start(look, fleet, older)))
}

/// The rollout waits for the target's ClusterClass, not applied (`phase`) yet: said (at WARN
/// when its apply failed) and written when that is news ([`plan::waiting`]).
async fn wait_for_class(look: &Look<'_>, state: Option<&RolloutStatus>, total: u32, phase: &str) -> Result<()> {
    let (kube, sub, target) = (look.kube, look.sub, look.target);
    let first_error = kube.classes.merged(&sub.name, &look.rel.spec.tag).errors.into_iter().next();
    let message = format!("ClusterClass {} is not applied: {}", target.tag, plan::not_applied(&look.rel, first_error.as_deref()));
    let Some(st) = plan::waiting(state, total, message, &look.requests) else { return Ok(()) };
    if phase == "Failed" {
        warn!(subscription = %sub.name, to = %target.tag, "rollout waiting: {}", st.message);
    } else {
        info!(subscription = %sub.name, to = %target.tag, "rollout waiting: {}", st.message);
    }
    let type_ = if phase == "Failed" { EventType::Warning } else { EventType::Normal };
    event(kube, &look.rel, type_, "RolloutWaiting", format!("{total} Clusters to move: {}", st.message));
    write(kube, &look.name, &st).await
}

/// Starts a rollout over the `older` Clusters, each on its path to the target (one Kubernetes
/// minor at a time); those with no path are left out, failed. Said in the log and an Event.
fn start(look: &Look<'_>, fleet: &Fleet, mut older: Vec<(String, bool)>) -> RolloutStatus {
    let (kube, sub, target, rel) = (look.kube, look.sub, look.target, &look.rel);
    let tags: Vec<String> = look.offered.iter().map(|r| r.tag.clone()).collect();
    let (paths, no_path) = plan::paths(&fleet.members, &older, &target.tag, &tags);
    older.retain(|(key, _)| paths.contains_key(key));
    let mut st = plan::start(&look.cfg.waves, &older, &paths, &look.requests, chrono::Utc::now());
    let steps = paths.values().map(Vec::len).max().unwrap_or(1);
    if let Some(why) = plan::nothing_can_move(paths.len(), &no_path, &target.tag) {
        // Not a rollout that starts: one that cannot, said as such (not "every Cluster runs
        // it").
        warn!(subscription = %sub.name, to = %target.tag, "rollout: {why}");
        event(kube, rel, EventType::Warning, "RolloutNothingCanMove", why.clone());
        st.message = why;
    } else {
        info!(subscription = %sub.name, to = %target.tag, clusters = st.total, waves = st.waves, steps, "rollout started");
        let note = format!("moving {} Clusters to {} in {} waves", st.total, target.tag, st.waves);
        event(kube, rel, EventType::Normal, "RolloutStarted", note);
    }
    for f in no_path {
        warn!(subscription = %sub.name, to = %target.tag, cluster = %f.cluster, "rollout: Cluster left out: {}", f.message);
        event(kube, rel, EventType::Warning, "RolloutClusterFailed", format!("{} left out: {}", f.cluster, f.message));
        st.failed.push(f);
    }
    plan::summarise(&mut st);
    st
}

/// Goes on with rollout `st`: reads the rest of the fleet, tries failed edits again, asks
/// [`plan::advance`] what to do and does it (edits, moves back, log lines, Events), then
/// records the metrics and writes the status when it changed.
async fn go_on(look: &Look<'_>, mut fleet: Fleet, mut st: RolloutStatus) -> Result<()> {
    let (kube, sub, cfg, target) = (look.kube, look.sub, look.cfg, look.target);
    let before = st.clone();
    fleet.syncs = cluster_syncs(kube, sub).await?;
    fleet.in_flight = plan::in_flight(&look.all, &sub.name, &look.name, &fleet.members);
    // Maintenance windows are times of day for people: the wall clock, read once per round.
    let now = chrono::Utc::now();
    let windows = Windows::of(&cfg.windows, &fleet.members, now);
    let in_window = |key: &str| windows.verdict(key);
    fleet.versions = versions(look, &st).await;
    let unmoved_keys = unmoved(&mut st).map(|w| w.unmoved.clone()).unwrap_or_default();
    let stops = stops(&st, &unmoved_keys, &fleet.members, &target.tag);
    if let Some(wave) = unmoved(&mut st) {
        retry_moves(kube, wave, &mut fleet, &stops, look.families, &in_window).await;
    }
    if !plan::to_judge(&st).is_empty() {
        fleet.control_planes = control_planes(kube, &fleet.members, plan::to_judge(&st)).await;
    }
    let steps = {
        let v = fleet.versions.get(&target.tag).cloned().flatten();
        let t = Target { class: &target.tag, version: v.as_deref(), v1beta2: kube.clusters.version == "v1beta2" };
        // How long a wave has run is measured on the monotonic clock while this process
        // lives (`schedule::clock`): a step of the wall clock does not time it out.
        let waited = |stamp: &str| crate::schedule::clock::elapsed_since(stamp);
        let policy = Policy {
            wave_timeout: cfg.wave_timeout,
            max_failures: cfg.max_failures,
            on_failure: cfg.on_failure,
            not_ready: cfg.not_ready,
            window: &in_window,
        };
        plan::advance(&mut st, &fleet, &t, &look.requests, &policy, now, &waited)
    };
    crate::schedule::clock::note(&st.wave_started);
    for step in steps {
        carry_out(look, &mut st, &mut fleet, &step).await;
        report(kube, sub, target, &look.rel, step);
    }
    record_metrics(&sub.name, &st);
    if st != before {
        write(kube, &look.name, &st).await?;
    }
    Ok(())
}

/// Whether each Cluster is inside one of its maintenance windows, decided once per round at
/// the wall clock's `now`.
struct Windows {
    verdicts: BTreeMap<String, Verdict>,
    /// A Cluster not read this round: any time without windows, else none of its windows is
    /// known to open.
    otherwise: Verdict,
}

impl Windows {
    fn of(windows: &[window::Window], members: &BTreeMap<String, Member>, now: chrono::DateTime<chrono::Utc>) -> Windows {
        let at = window::at(windows, now);
        let no_labels = BTreeMap::new();
        let verdicts =
            members.iter().map(|(key, m)| (key.clone(), at.verdict(m.obj.metadata.labels.as_ref().unwrap_or(&no_labels)))).collect();
        Windows { verdicts, otherwise: if windows.is_empty() { Verdict::Always } else { Verdict::Closed(None) } }
    }

    fn verdict(&self, key: &str) -> Verdict {
        self.verdicts.get(key).cloned().unwrap_or_else(|| self.otherwise.clone())
    }
}

/// The Kubernetes version of the target and of every class on a path (read once per release
/// and process); `None` for a class not offered or whose version cannot be read.
async fn versions(look: &Look<'_>, st: &RolloutStatus) -> BTreeMap<String, Option<String>> {
    let mut classes: BTreeSet<&str> = st.plan.iter().flat_map(|w| &w.paths).flat_map(|p| p.steps.iter().map(String::as_str)).collect();
    classes.insert(&look.target.tag);
    let mut out = BTreeMap::new();
    for class in classes {
        let v = match look.offered.iter().find(|r| r.tag == class) {
            Some(r) => kubernetes_version(look.kube, look.sub, r).await,
            None => None,
        };
        out.insert(class.to_owned(), v);
    }
    out
}

/// The class each of `keys` (Clusters of the fleet, `members`) is moved to next: its next
/// stop on its path to `target` ([`plan::next_stop`]).
fn stops<K: AsRef<str>>(st: &RolloutStatus, keys: &[K], members: &BTreeMap<String, Member>, target: &str) -> BTreeMap<String, String> {
    keys.iter()
        .filter_map(|key| {
            let key = key.as_ref();
            let m = members.get(key)?;
            Some((key.to_owned(), plan::next_stop(st, key, &topology_class(&m.obj.data).unwrap_or_default(), target)))
        })
        .collect()
}

/// Does what one step of a round asks of the cluster: edits the Clusters a wave moves to their
/// next stop (one that fails is tried again at every check; the wave waits for it, and times
/// out), moves a failed Cluster back and records whether that took.
async fn carry_out(look: &Look<'_>, st: &mut RolloutStatus, fleet: &mut Fleet, step: &Step) {
    let kube = look.kube;
    match step {
        Step::WaveStarted { wave, clusters, .. } | Step::Moved { wave, clusters, .. } | Step::Stepped { wave, clusters, .. } => {
            let stops = stops(st, clusters, &fleet.members, &look.target.tag);
            let Some(w) = st.plan.get_mut(wave.saturating_sub(1) as usize) else { return };
            for key in clusters {
                let (Some(m), Some(class)) = (fleet.members.get_mut(key), stops.get(key)) else { continue };
                let v = fleet.versions.get(class).cloned().flatten();
                // One that fails is tried again at every check on the Cluster as read then;
                // the wave waits for it (and times out).
                let from = moved_from(key, m);
                match try_move(kube, key, m, class, v.as_deref()).await {
                    Some(true) => remember(w, from),
                    Some(false) => {}
                    None => w.unmoved.push(key.clone()),
                }
            }
        }
        Step::RollBack { cluster, to } => {
            let outcome = roll_back(kube, cluster, fleet.members.get(cluster), to).await;
            if let Some(f) = st.failed.iter_mut().find(|f| &f.cluster == cluster && f.outcome == plan::ROLLING_BACK) {
                match outcome {
                    Ok(()) => {
                        plan::ROLLED_BACK.clone_into(&mut f.outcome);
                        f.detail.clear();
                    }
                    Err(e) => f.detail = crate::status::desired::shorten(&e.to_string(), 300),
                }
            }
        }
        _ => {}
    }
}

/// The running wave of `st` when some of its edits failed (`unmoved`).
fn unmoved(st: &mut RolloutStatus) -> Option<&mut WaveStatus> {
    if st.phase != plan::PROGRESSING {
        return None;
    }
    st.plan.get_mut(st.wave.saturating_sub(1) as usize).filter(|w| w.phase == plan::PROGRESSING && !w.unmoved.is_empty())
}

/// Tries again the edits of `wave` that failed, on the Clusters as this round read them: one
/// still on an older release of the stack is moved (and judged as the edit left it); one that
/// is not (someone moved it, or it is gone) leaves the list and is judged as it is.
async fn retry_moves(
    kube: &Kube,
    wave: &mut WaveStatus,
    fleet: &mut Fleet,
    stops: &BTreeMap<String, String>,
    families: crate::model::version::Families<'_>,
    in_window: &(dyn Fn(&str) -> Verdict + Sync),
) {
    let mut still = Vec::new();
    for key in std::mem::take(&mut wave.unmoved) {
        let Some(class) = stops.get(&key) else { continue };
        let version = fleet.versions.get(class).cloned().flatten();
        let Some(m) = fleet.members.get_mut(&key).filter(|m| plan::is_older(&m.obj.data, class, families)) else { continue };
        // Its window closed since its first try: it waits for the next, still unmoved.
        if !in_window(&key).is_open() {
            still.push(key);
            continue;
        }
        let from = moved_from(&key, m);
        match try_move(kube, &key, m, class, version.as_deref()).await {
            Some(true) => remember(wave, from),
            Some(false) => {}
            None => still.push(key),
        }
    }
    wave.unmoved = still;
}

/// What Cluster `key` runs now, as the rollout records it before moving it.
fn moved_from(key: &str, m: &Member) -> MovedFrom {
    MovedFrom {
        cluster: key.to_owned(),
        class: topology_class(&m.obj.data).unwrap_or_default(),
        version: m.obj.data["spec"]["topology"]["version"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Records what a Cluster of `wave` ran before it was moved (the first record stands: a
/// Cluster moved again after a resume keeps what it had before the rollout).
fn remember(wave: &mut WaveStatus, from: MovedFrom) {
    if !wave.moved_from.iter().any(|m| m.cluster == from.cluster) {
        wave.moved_from.push(from);
    }
}

/// Moves a failed Cluster back to `class`, the one it had before the rollout (its Kubernetes
/// version unchanged: `rollback_to` of the plan checked). The same merge patch as a move, with
/// the Cluster's `resourceVersion`; a failure is kept and tried again at the next check.
async fn roll_back(kube: &Kube, key: &str, member: Option<&Member>, class: &str) -> Result<()> {
    let Some(m) = member else { return Err(Error::NotRead { cluster: key.to_owned() }) };
    match move_cluster(kube, &m.obj, class, None).await {
        Ok(_) => {
            warn!(cluster = %key, to = class, "rollout: Cluster moved back to the class it had before the rollout");
            Ok(())
        }
        Err(e) => {
            warn!(cluster = %key, to = class, "rollout: cannot move the Cluster back yet: {e}; tried again at the next check");
            Err(e)
        }
    }
}

/// What the warnings of a Cluster's failed edits are kept under (the same failure again is
/// said at DEBUG, as the reconciles' are).
const MOVE: &str = "rollout-move";

/// Edits Cluster `key` (`namespace/name`, read as `m`) to `class`: `Some(true)` when the edit
/// took (`m` then holds the Cluster as edited, and a later failure is new again), `Some(false)`
/// when it was there already; `None` when it failed, said at WARN when the failure is new or
/// changed and at DEBUG when it repeats.
async fn try_move(kube: &Kube, key: &str, m: &mut Member, class: &str, version: Option<&str>) -> Option<bool> {
    let cluster = key.split_once('/').map(|(ns, name)| ClusterKey::new(ns, name));
    match move_cluster(kube, &m.obj, class, version).await {
        Ok(edited) => {
            let changed = edited.is_some();
            if let Some(edited) = edited {
                m.obj = edited;
            }
            if let Some(c) = &cluster {
                kube.warnings.cleared(&(c.clone(), MOVE));
            }
            Some(changed)
        }
        Err(e) => {
            let message = format!("rollout: {e}; tried again at the next check");
            if cluster.is_none_or(|c| kube.warnings.worth(&(c, MOVE), &message)) {
                warn!(cluster = %key, to = class, "{message}");
            } else {
                debug!(cluster = %key, to = class, "{message} (unchanged since the last warning)");
            }
            None
        }
    }
}

/// The log line and the Event of one step.
fn report(kube: &Kube, sub: &Subscription, target: &Release, rel: &StackRelease, step: Step) {
    let (type_, reason, note) = match step {
        Step::Resumed { wave, waves } => {
            info!(subscription = %sub.name, to = %target.tag, wave, "rollout resumed");
            (EventType::Normal, "RolloutResumed", format!("resumed at wave {wave}/{waves}"))
        }
        Step::WaveStarted { wave, waves, clusters } => {
            info!(subscription = %sub.name, to = %target.tag, wave, clusters = ?clusters, "rollout wave started");
            (EventType::Normal, "RolloutWaveStarted", format!("wave {wave}/{waves}: {}", clusters.join(", ")))
        }
        Step::Moved { wave, waves, clusters } => {
            info!(subscription = %sub.name, to = %target.tag, wave, clusters = ?clusters, "rollout: a maintenance window opened");
            (EventType::Normal, "RolloutWindowOpened", format!("wave {wave}/{waves}: moving {}", clusters.join(", ")))
        }
        Step::Stepped { wave, waves, clusters } => {
            info!(subscription = %sub.name, to = %target.tag, wave, clusters = ?clusters, "rollout: upgraded a Kubernetes minor; the next one");
            (
                EventType::Normal,
                "RolloutNextStep",
                format!("wave {wave}/{waves}: moving {} on to the next Kubernetes minor", clusters.join(", ")),
            )
        }
        Step::OutsideWindow { wave, message, next, .. } => {
            info!(subscription = %sub.name, to = %target.tag, wave, next_window = %next, "rollout waiting: {message}");
            (EventType::Normal, "RolloutOutsideWindow", message)
        }
        Step::ClusterFailed { wave, failed } => {
            let what = match failed.outcome.as_str() {
                plan::ROLLING_BACK => "moving it back to the class it had".to_owned(),
                plan::ROLLBACK_IMPOSSIBLE => format!("it cannot be moved back: {}", failed.detail),
                _ => "left as it is".to_owned(),
            };
            warn!(subscription = %sub.name, to = %target.tag, wave, cluster = %failed.cluster, reason = %failed.reason, "rollout: Cluster failed: {}; {what}", failed.message);
            let note = format!("{} ({}): {}; {what}", failed.cluster, failed.reason, failed.message);
            (EventType::Warning, "RolloutClusterFailed", note)
        }
        Step::RollBack { .. } => return,
        Step::WaveDone { wave, waves, clusters, failed } => {
            info!(subscription = %sub.name, to = %target.tag, wave, failed, "rollout wave done");
            let failed = if failed == 0 { String::new() } else { format!(", {failed} failed within maxFailures") };
            (EventType::Normal, "RolloutWaveDone", format!("wave {wave}/{waves} done: {clusters} Clusters{failed}"))
        }
        Step::Complete { failed } => {
            info!(subscription = %sub.name, to = %target.tag, failed, "rollout complete");
            let note = if failed == 0 {
                format!("every Cluster runs {}", target.tag)
            } else {
                format!("every Cluster runs {} but {failed} the rollout gave up on (status.rollout.failed)", target.tag)
            };
            (EventType::Normal, "RolloutComplete", note)
        }
        Step::Paused { wave, waves, reason, message } => {
            warn!(subscription = %sub.name, wave, reason, "rollout paused: {message}");
            (EventType::Warning, "RolloutPaused", format!("wave {wave}/{waves}: {reason}: {message}"))
        }
    };
    event(kube, rel, type_, reason, note);
}

fn record_metrics(subscription: &str, st: &RolloutStatus) {
    let paused = (st.phase == PAUSED).then_some(st.reason.as_str());
    let outside = st.phase == PROGRESSING && st.reason == plan::OUTSIDE_WINDOW;
    crate::telemetry::metrics().rollout(subscription, st.wave, st.done, paused, outside, st.failed.len() as u32);
}

fn event(kube: &Kube, rel: &StackRelease, type_: EventType, reason: &str, note: String) {
    let name = rel.metadata.name.clone().unwrap_or_default();
    kube.events.stack_release(&name, rel.metadata.uid.clone(), vec![super::super::events::event(type_, reason, "Rollout", note)]);
}

/// The subscription's Clusters by `namespace/name`.
async fn members(kube: &Kube, sub: &Subscription, cfg: &RolloutConfig) -> Result<BTreeMap<String, Member>> {
    let api: Api<DynamicObject> = Api::all_with(kube.mgmt.clone(), &kube.clusters);
    let list = api.list(&ListParams::default()).await.map_err(Error::ListClusters)?;
    let config = kube.ctx.config();
    let mut out = BTreeMap::new();
    for obj in list.items {
        let (Some(ns), Some(name)) = (obj.metadata.namespace.clone(), obj.metadata.name.clone()) else { continue };
        let labels = obj.metadata.labels.clone().unwrap_or_default();
        let class = topology_class(&obj.data);
        let key = ClusterKey::new(&ns, &name);
        if subscription_for(&config, &key, &labels, class.as_deref()).is_none_or(|(s, _)| s.name != sub.name) {
            continue;
        }
        let canary = !cfg.canary_labels.is_empty() && cfg.canary_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        out.insert(format!("{ns}/{name}"), Member { obj, canary });
    }
    Ok(out)
}

/// The subscription's ClusterSync statuses by `namespace/cluster`.
async fn cluster_syncs(kube: &Kube, sub: &Subscription) -> Result<BTreeMap<String, ClusterSyncStatus>> {
    let api: Api<ClusterSync> = Api::all(kube.mgmt.clone());
    let lp = ListParams::default().labels(&format!("stacksync.io/subscription={}", sub.name));
    let list = api.list(&lp).await.map_err(Error::ListClusterSyncs)?;
    Ok(list
        .items
        .into_iter()
        .filter(|cs| cs.spec.subscription == sub.name)
        .filter_map(|cs| Some((format!("{}/{}", cs.metadata.namespace?, cs.spec.cluster), cs.status?)))
        .collect())
}

/// The control plane objects (`spec.controlPlaneRef`) of `keys` among `members`, those that
/// can be read.
async fn control_planes(kube: &Kube, members: &BTreeMap<String, Member>, keys: &[String]) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for key in keys {
        let Some(m) = members.get(key) else { continue };
        let ns = m.obj.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(cp) = kube.references.get(&kube.mgmt, ns, &m.obj.data["spec"]["controlPlaneRef"]).await {
            out.insert(key.clone(), cp);
        }
    }
    out
}

/// The Kubernetes version of the target release (`versions.kubernetes` of its metadata), read
/// once per process (a release's content never changes under its tag and commit).
async fn kubernetes_version(kube: &Kube, sub: &Subscription, target: &Release) -> Option<String> {
    let id = format!("{}@{}", target.tag, target.commit);
    if let Some(v) = kube.kubernetes_versions.get(&id) {
        return v;
    }
    let v = read_kubernetes_version(kube, sub, target).await;
    if v.is_some() {
        kube.kubernetes_versions.insert(id, v.clone());
    }
    v
}

async fn read_kubernetes_version(kube: &Kube, sub: &Subscription, target: &Release) -> Option<String> {
    let prepared = match kube.ctx.prepare(target).await {
        Ok(p) => p,
        Err(e) => {
            warn!(tag = %target.tag, "rollout: cannot read the release's metadata: {e}");
            return None;
        }
    };
    match kube.ctx.layout(sub, &prepared).await {
        Ok(l) => Some(l.metadata.kubernetes.clone()).filter(|v| !v.is_empty()),
        Err(e) => {
            warn!(tag = %target.tag, "rollout: cannot read the release's metadata: {e}");
            None
        }
    }
}

/// Points a Cluster at the target class (and Kubernetes version), unless it already is. A merge
/// patch with the Cluster's `resourceVersion`: it fails rather than overwrite a write made since
/// the Cluster was read.
async fn move_cluster(kube: &Kube, obj: &DynamicObject, class: &str, version: Option<&str>) -> Result<Option<DynamicObject>> {
    let topology = &obj.data["spec"]["topology"];
    let mut changes = serde_json::Map::new();
    if topology_class(&obj.data).as_deref() != Some(class) {
        if topology.get("classRef").is_some() && topology.get("class").is_none() {
            changes.insert("classRef".into(), json!({"name": class}));
        } else {
            changes.insert("class".into(), json!(class));
        }
    }
    if let Some(v) = version
        && topology["version"].as_str() != Some(v)
    {
        changes.insert("version".into(), json!(v));
    }
    if changes.is_empty() {
        return Ok(None);
    }
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let body = json!({"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"topology": changes}});
    let api: Api<DynamicObject> = Api::namespaced_with(kube.mgmt.clone(), &ns, &kube.clusters);
    let pp = PatchParams { field_manager: Some(ROLLOUT_MANAGER.into()), ..PatchParams::default() };
    let moved = api
        .patch(&name, &pp, &Patch::Merge(body))
        .await
        .map_err(|source| Error::MoveCluster { cluster: format!("{ns}/{name}"), source })?;
    info!(cluster = %format!("{ns}/{name}"), class, version = version.unwrap_or("(unchanged)"), "rollout: Cluster moved");
    Ok(Some(moved))
}

async fn write(kube: &Kube, name: &str, st: &RolloutStatus) -> Result<()> {
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let body =
        json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "status": {"rollout": st}});
    api.patch_status(name, &PatchParams::apply(ROLLOUT_MANAGER).force(), &Patch::Apply(body))
        .await
        .map(|_| ())
        .map_err(|source| Error::WriteStatus { release: name.to_owned(), source })
}

/// `stacksync rollout pause|resume <subscription>`: sets the annotation on the StackRelease of
/// the subscription's running (or paused) rollout. Returns that StackRelease's name.
///
/// # Errors
/// The management cluster cannot be reached, or the subscription has no rollout to act on.
pub async fn request(ctx: std::sync::Arc<crate::controller::Context>, subscription: &str, resume: bool) -> Result<String> {
    let k = super::super::settings::target(&ctx.config());
    let mgmt = super::super::client::management_client(&k).await.map_err(Error::ManagementClient)?;
    let api: Api<StackRelease> = Api::all(mgmt);
    let list = api.list(&ListParams::default()).await.map_err(Error::ListReleases)?;
    let wanted = if resume { PAUSED } else { PROGRESSING };
    let found = list.items.iter().find(|r| {
        r.spec.subscription == subscription && r.status.as_ref().and_then(|s| s.rollout.as_ref()).is_some_and(|ro| ro.phase == wanted)
    });
    let Some(rel) = found else { return Err(Error::NoRollout { subscription: subscription.to_owned(), resume }) };
    let name = rel.metadata.name.clone().unwrap_or_default();
    let key = if resume { ROLLOUT_RESUME } else { ROLLOUT_PAUSE };
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let body = json!({"metadata": {"annotations": {key: at}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|source| Error::Annotate { release: name.clone(), source })?;
    Ok(name)
}

/// What `stacksync rollout plan` shows of a subscription's rollout: to which release, which
/// Clusters in which wave along which path, and which are left out — before anything moves (or,
/// for a rollout under way, as its status records it).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    pub subscription: String,
    /// The releases offered, newest first.
    pub offered: Vec<String>,
    /// The release a rollout moves to (the newest offered); `None` when nothing is offered.
    pub target: Option<String>,
    /// The phase of the rollout to `target` (empty: none has started).
    pub phase: String,
    /// Why it is paused or waiting, if it is.
    pub message: String,
    pub waves: Vec<PlannedWave>,
    /// Clusters the rollout does not move, and why.
    pub left_out: Vec<FailedCluster>,
    /// The plan in one line: `nothing to move` (every Cluster runs the target), `nothing can
    /// move: …` (the Clusters not on it have no path to it), `would move N Clusters in W waves`
    /// (not started), or the phase of the rollout under way.
    pub summary: String,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWave {
    /// `Pending`, `Progressing` or `Done` (`Pending` before a rollout starts).
    pub phase: String,
    pub clusters: Vec<PlannedCluster>,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedCluster {
    /// `namespace/name`.
    pub cluster: String,
    pub canary: bool,
    /// The class it is on now (`class@version`).
    pub now: String,
    /// The classes it moves through, each with its Kubernetes version (`class@version`), the
    /// last the target.
    pub steps: Vec<String>,
    /// Its maintenance windows now: `open until …`, `closed: next opens …`, or empty (none
    /// configured).
    pub window: String,
}

/// `stacksync rollout plan <subscription>`: polls the subscription's source, reads the fleet and
/// plans the rollout to the newest release offered as the driver would start it now (or shows
/// the one under way).
///
/// # Errors
/// The management cluster cannot be reached or read; the subscription has no `rollout:`.
pub async fn plan_report(ctx: std::sync::Arc<crate::controller::Context>, subscription: &str) -> Result<PlanReport> {
    let config = ctx.config();
    let sub = config
        .subscriptions
        .iter()
        .find(|s| s.name == subscription && s.rollout.is_some())
        .ok_or_else(|| Error::NoRollout { subscription: subscription.to_owned(), resume: false })?;
    let cfg = sub.rollout.as_ref().ok_or_else(|| Error::NoRollout { subscription: subscription.to_owned(), resume: false })?;
    if let Err(e) = ctx.poll(&sub.source).await {
        warn!(source = %sub.source, "cannot poll the source; planning with what the cache knows: {e}");
    }
    let offered = ctx.offered(sub).await;
    let mut report = PlanReport {
        subscription: subscription.to_owned(),
        offered: offered.iter().map(|r| r.tag.clone()).collect(),
        target: offered.first().map(|r| r.tag.clone()),
        phase: String::new(),
        message: String::new(),
        waves: Vec::new(),
        left_out: Vec::new(),
        summary: String::new(),
    };
    let (Some(target), Some(families)) = (offered.first().cloned(), sub.families()) else {
        report.summary = report.line();
        return Ok(report);
    };
    let kube = Kube::connect(ctx.clone()).await.map_err(|e| Error::Connect(Box::new(e)))?;
    let members = members(&kube, sub, cfg).await?;
    let releases: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let name = release_name(&sub.name, &target.tag);
    let recorded = releases.get_opt(&name).await.map_err(Error::ListReleases)?.and_then(|r| r.status.and_then(|s| s.rollout));
    let st = match recorded.filter(|st| ![plan::WAITING, plan::STOPPED].contains(&st.phase.as_str())) {
        Some(st) => {
            report.phase.clone_from(&st.phase);
            report.message.clone_from(&st.message);
            st
        }
        None => {
            let older = plan::older(&members, &target.tag, families).unwrap_or_default();
            let tags: Vec<String> = report.offered.clone();
            let (paths, no_path) = plan::paths(&members, &older, &target.tag, &tags);
            let older: Vec<(String, bool)> = older.into_iter().filter(|(k, _)| paths.contains_key(k)).collect();
            let mut st = plan::start(&cfg.waves, &older, &paths, &Requests::default(), chrono::Utc::now());
            st.failed = no_path;
            st
        }
    };
    // Each release offered is read for its Kubernetes version (fetched and verified when the
    // cache lacks it): the long part of a plan, shown on a terminal.
    let progress = crate::model::progress::reporter();
    progress.add("releases read", offered.len() as u64);
    let mut versions: BTreeMap<String, Option<String>> = BTreeMap::new();
    for r in offered.iter() {
        let _done = progress.tick();
        versions.insert(r.tag.clone(), kubernetes_version(&kube, sub, r).await);
    }
    let windows = window::at(&cfg.windows, chrono::Utc::now());
    report.waves = planned_waves(&st, &members, &versions, &windows, &target.tag);
    report.left_out = st.failed;
    report.summary = report.line();
    Ok(report)
}

/// The waves of `st` as the plan shows them: each Cluster (read as `members`) on its class now
/// and through the classes it moves (`class@version`, the versions from `versions`: `?` when not
/// known), with what its maintenance windows say now.
fn planned_waves(
    st: &RolloutStatus,
    members: &BTreeMap<String, Member>,
    versions: &BTreeMap<String, Option<String>>,
    windows: &window::At<'_>,
    target: &str,
) -> Vec<PlannedWave> {
    let at = |class: &str, version: Option<&str>| format!("{class}@{}", version.unwrap_or("?"));
    let no_labels = BTreeMap::new();
    let mut out = Vec::new();
    for w in &st.plan {
        let mut clusters = Vec::new();
        for key in &w.clusters {
            let m = members.get(key);
            let class = m.and_then(|m| topology_class(&m.obj.data)).unwrap_or_default();
            let version = m.and_then(|m| m.obj.data["spec"]["topology"]["version"].as_str()).map(str::to_owned);
            let steps = w.paths.iter().find(|p| &p.cluster == key).map_or_else(|| vec![target.to_owned()], |p| p.steps.clone());
            clusters.push(PlannedCluster {
                cluster: key.clone(),
                canary: m.is_some_and(|m| m.canary),
                now: at(&class, version.as_deref()),
                steps: steps.iter().map(|s| at(s, versions.get(s).cloned().flatten().as_deref())).collect(),
                window: window_said(m.map(|m| windows.verdict(m.obj.metadata.labels.as_ref().unwrap_or(&no_labels)))),
            });
        }
        out.push(PlannedWave { phase: w.phase.clone(), clusters });
    }
    out
}

/// What a Cluster's maintenance windows say now (`None`: the Cluster was not read), as the
/// plan shows it; empty without windows.
fn window_said(verdict: Option<Verdict>) -> String {
    match verdict {
        Some(Verdict::Open(until)) => format!("open until {}", plan::timestamp(until)),
        Some(Verdict::Closed(Some(next))) => format!("closed: the next opens at {}", plan::timestamp(next)),
        Some(Verdict::Closed(None)) => "closed: none of its windows opens again".to_owned(),
        _ => String::new(),
    }
}

impl PlanReport {
    /// The plan in one line ([`PlanReport::summary`]).
    fn line(&self) -> String {
        let Some(target) = &self.target else { return "no release is offered: nothing to roll out".to_owned() };
        let moving: usize = self.waves.iter().map(|w| w.clusters.len()).sum();
        match self.phase.as_str() {
            "" if moving == 0 => {
                plan::nothing_can_move(0, &self.left_out, target).unwrap_or_else(|| "every Cluster runs it: nothing to move".to_owned())
            }
            "" => format!("not started: this is what it would do now (would move {moving} Clusters in {} waves)", self.waves.len()),
            phase if self.message.is_empty() => format!("rollout {phase}"),
            phase => format!("rollout {phase}: {}", self.message),
        }
    }

    /// The report for people: the target, each wave's Clusters with their path, and who is left
    /// out.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let Some(target) = &self.target else {
            return format!("subscription {}: no release is offered; nothing to roll out\n", self.subscription);
        };
        let _ = writeln!(out, "subscription {}: rollout to {target} (offered: {})", self.subscription, self.offered.join(", "));
        let _ = writeln!(out, "{}", self.line());
        for (i, w) in self.waves.iter().enumerate() {
            let _ = writeln!(out, "wave {}/{} ({}):", i + 1, self.waves.len(), w.phase);
            for c in &w.clusters {
                let canary = if c.canary { " (canary)" } else { "" };
                let window = if c.window.is_empty() { String::new() } else { format!("  [window {}]", c.window) };
                let _ = writeln!(out, "  {}{canary}: {} -> {}{window}", c.cluster, c.now, c.steps.join(" -> "));
            }
        }
        if !self.left_out.is_empty() {
            out.push_str("left out:\n");
            for f in &self.left_out {
                let _ = writeln!(out, "  {}: {} ({})", f.cluster, f.message, f.outcome);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
