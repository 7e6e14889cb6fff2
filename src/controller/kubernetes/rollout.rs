//! Fleet rollouts: a cluster-stack subscription with `rollout:` moves its Clusters to the
//! newest release it offers, wave by wave, by editing each Cluster's `spec.topology.class`
//! (and `spec.topology.version` when the release's Kubernetes version differs). The per-Cluster
//! reconciler then runs the release's upgrade stages and applies its addons, and Cluster API
//! upgrades the control plane; a wave is done when each of its Clusters is there and healthy.
//!
//! The state lives in the target release's `StackRelease` (`status.rollout`, its own field
//! manager), so a restart resumes where it stopped. [`plan`] and [`judge`] are pure; [`run`]
//! looks at every rollout when releases change and every `checkInterval`.
//!
//! The Cluster is written with a JSON merge patch carrying its `resourceVersion`, not with
//! server-side apply: users and GitOps tools own `spec.topology` (they created the Cluster),
//! and an SSA field manager of ours would become a co-owner that their next apply conflicts
//! with (or silently takes over with `force`). The merge patch changes the values once, fails
//! if someone wrote the Cluster in between (re-read at the next check), and leaves ownership
//! where it was. A Cluster whose class is changed back during its wave pauses the rollout
//! (`ClassChanged`) instead of fighting over it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::status::{now, release_name, shorten};
use super::{Kube, kube_error, subscription_for, topology_class};
use crate::config::{RolloutConfig, Subscription, Wave};
use crate::model::ClusterKey;
use crate::release::Release;
use crate::release::version::Version;
use crate::status::crd::{ClusterSync, ClusterSyncStatus, ROLLOUT_PAUSE, ROLLOUT_RESUME, RolloutStatus, StackRelease, WaveStatus};

/// Field manager of `status.rollout`, and of the Cluster edits.
pub const ROLLOUT_MANAGER: &str = "stacksync-rollout";

/// The target's ClusterClass is not applied (failed, or not yet): nothing is moved until it is.
const WAITING: &str = "Waiting";
/// `rollout:` was removed from the subscription (or the subscription from the config): nothing
/// further is moved. Configuring `rollout:` again starts a new rollout.
const STOPPED: &str = "Stopped";
const PROGRESSING: &str = "Progressing";
const PAUSED: &str = "Paused";
const COMPLETE: &str = "Complete";
/// A newer release started its own rollout while this one was running.
const SUPERSEDED: &str = "Superseded";
const PENDING: &str = "Pending";
const DONE: &str = "Done";

/// ClusterSync reasons that will not pass by themselves: the Cluster failed.
const FAILED_REASONS: [&str; 4] = ["UpgradeFailed", "RenderFailed", "ReleaseNotAvailable", "Unhealthy"];

/// Cuts the rollout's Clusters (`namespace/name`, with whether each is a canary) into waves:
/// canaries first, then everything else, each in `namespace/name` order; every canary is in the
/// first wave. `clusters: N` adds N, `percent: P` brings the total to P % (rounded up); waves
/// that would add nobody are left out. Pure.
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
/// `ControlPlaneReady`). Pure.
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
    if let Some(u) = sync.upgrade.as_ref().filter(|u| u.to == target.class && u.phase != super::upgrade::DONE) {
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

/// Looks at every subscription's rollout when releases change and every `checkInterval` (the
/// shortest of all), until `stop` says so.
///
/// A pause or resume request (the annotations `stacksync rollout` sets) and a waiting rollout's
/// ClusterClass becoming applied are seen on a watch of StackReleases and looked at at once, not
/// at the next check. When the set of subscriptions with `rollout:` changes (and at start), the
/// rollouts of subscriptions no longer configured for one end `Stopped`.
pub(super) async fn run(kube: &Kube, mut stop: tokio::sync::watch::Receiver<bool>) {
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
            match stop_undriven(kube, &config, &driven, &driven_ever).await {
                Ok(()) => driven_before = Some(driven),
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
/// [`wants_a_look`]). Cancel-safe: dropping it loses no event still to come. Never returns if
/// the watch ends.
async fn woken<S>(events: &mut std::pin::Pin<&mut S>)
where
    S: futures_util::Stream<Item = Result<watcher::Event<StackRelease>, watcher::Error>>,
{
    use futures_util::StreamExt;
    while let Some(event) = events.next().await {
        if let Ok(watcher::Event::Apply(rel) | watcher::Event::InitApply(rel)) = event
            && wants_a_look(&rel)
        {
            debug!(release = ?rel.metadata.name, "rollout: a request or a ClusterClass to act on");
            return;
        }
    }
    std::future::pending().await
}

/// A paused rollout asked to resume, a running one asked to pause, or a waiting one whose
/// ClusterClass is now applied. Pure.
fn wants_a_look(rel: &StackRelease) -> bool {
    let Some(status) = rel.status.as_ref() else { return false };
    let Some(st) = status.rollout.as_ref() else { return false };
    let asked = |key: &str, handled: &str| {
        let a = annotation(rel, key);
        !a.is_empty() && a != handled
    };
    (st.phase == PAUSED && asked(ROLLOUT_RESUME, &st.handled_resume))
        || (st.phase == PROGRESSING && asked(ROLLOUT_PAUSE, &st.handled_pause))
        || (st.phase == WAITING && status.phase == "Applied")
}

/// Ends with `Stopped` every running, paused or waiting rollout of a subscription of ours not
/// in `driven` (its `rollout:` removed, or the subscription itself). Ours: in the config, or
/// driven by this process before (`driven_ever`). The Clusters already moved stay on the target
/// (their upgrade goes on); nobody else is moved.
async fn stop_undriven(
    kube: &Kube,
    config: &crate::config::Config,
    driven: &BTreeSet<String>,
    driven_ever: &BTreeSet<String>,
) -> Result<(), String> {
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let all = api.list(&ListParams::default()).await.map_err(|e| format!("listing StackReleases: {}", kube_error(&e)))?;
    for rel in &all.items {
        let Some(st) = rel.status.as_ref().and_then(|s| s.rollout.as_ref()) else { continue };
        let sub = &rel.spec.subscription;
        if driven.contains(sub) || ![PROGRESSING, PAUSED, WAITING].contains(&st.phase.as_str()) {
            continue;
        }
        if !config.subscriptions.iter().any(|s| &s.name == sub) && !driven_ever.contains(sub) {
            debug!(subscription = %sub, "rollout: not a subscription of this process; left alone");
            continue;
        }
        let why = if config.subscriptions.iter().any(|s| &s.name == sub) {
            format!("`rollout:` was removed from subscription `{sub}`")
        } else {
            format!("subscription `{sub}` was removed from the config")
        };
        let mut st = st.clone();
        let message =
            format!("{why}; nothing further is moved ({}/{} Clusters done, stopped in wave {}/{})", st.done, st.total, st.wave, st.waves);
        let name = rel.metadata.name.clone().unwrap_or_default();
        info!(subscription = %sub, release = %name, "rollout stopped: {message}");
        event(kube, rel, EventType::Normal, "RolloutStopped", message.clone());
        st.phase = STOPPED.into();
        st.reason = "RolloutRemoved".into();
        st.message = message;
        st.wave_started.clear();
        record_metrics(sub, &st);
        write(kube, &name, &st).await?;
    }
    Ok(())
}

/// A Cluster the rollout moves, as read this round.
struct Member {
    obj: DynamicObject,
    canary: bool,
}

/// One look at `sub`'s rollout: start one, go on with one, or nothing.
async fn tick(kube: &Kube, sub: &Subscription, cfg: &RolloutConfig) -> Result<(), String> {
    let Some(target) = kube.ctx.offered(sub).await.into_iter().next() else { return Ok(()) };
    let releases: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let name = release_name(&sub.name, &target.tag);
    let all = releases.list(&ListParams::default()).await.map_err(|e| format!("listing StackReleases: {}", kube_error(&e)))?;
    let Some(rel) = all.items.iter().find(|r| r.metadata.name.as_deref() == Some(name.as_str())).cloned() else {
        debug!(release = %name, "rollout: the target's StackRelease is not recorded yet");
        return Ok(());
    };
    let state = rel.status.as_ref().and_then(|s| s.rollout.clone());
    let phase = rel.status.as_ref().map(|s| s.phase.as_str()).unwrap_or_default();
    // A rollout to start: none yet, one waiting for its ClusterClass, or one stopped (`rollout:`
    // removed) and configured again. Only these and a running one need the fleet read.
    let to_start = state.as_ref().is_none_or(|st| st.phase == WAITING || st.phase == STOPPED);
    if !to_start && state.as_ref().is_none_or(|st| st.phase != PROGRESSING && st.phase != PAUSED) {
        return Ok(());
    }
    let members = members(kube, sub, cfg).await?;
    let mut st = match state {
        Some(st) if !to_start => st,
        state => {
            let Some(to) = Version::from_tag(&target.tag) else { return Ok(()) };
            let older: Vec<(String, bool)> = members
                .iter()
                .filter(|(_, m)| {
                    topology_class(&m.obj.data)
                        .and_then(|c| Version::from_tag(&c))
                        .and_then(|v| v.compare(&to))
                        .is_some_and(|o| o == std::cmp::Ordering::Less)
                })
                .map(|(k, m)| (k.clone(), m.canary))
                .collect();
            if older.is_empty() {
                return Ok(());
            }
            // The ClusterClass of the target must be in place before a Cluster names it.
            if phase != "Applied" {
                let message = format!("ClusterClass {} is not applied: {}", target.tag, not_applied(kube, sub, &rel));
                if state.as_ref().is_some_and(|st| st.phase == WAITING && st.message == message) {
                    return Ok(());
                }
                let total = older.len() as u32;
                if phase == "Failed" {
                    warn!(subscription = %sub.name, to = %target.tag, "rollout waiting: {message}");
                } else {
                    info!(subscription = %sub.name, to = %target.tag, "rollout waiting: {message}");
                }
                let type_ = if phase == "Failed" { EventType::Warning } else { EventType::Normal };
                event(kube, &rel, type_, "RolloutWaiting", format!("{total} Clusters to move: {message}"));
                let mut st = RolloutStatus {
                    phase: WAITING.into(),
                    total,
                    reason: "ClassNotApplied".into(),
                    message,
                    handled_resume: annotation(&rel, ROLLOUT_RESUME),
                    handled_pause: annotation(&rel, ROLLOUT_PAUSE),
                    ..RolloutStatus::default()
                };
                summarise(&mut st);
                return write(kube, &name, &st).await;
            }
            // One rollout per subscription: a paused one holds everything; a running one is
            // superseded by the newer release (its Clusters are in the new plan).
            for other in all.items.iter().filter(|r| r.spec.subscription == sub.name && r.metadata.name.as_deref() != Some(&name)) {
                let Some(o) = other.status.as_ref().and_then(|s| s.rollout.as_ref()) else { continue };
                let resumed = o.phase == PAUSED && {
                    let asked = annotation(other, ROLLOUT_RESUME);
                    !asked.is_empty() && asked != o.handled_resume
                };
                if o.phase == PAUSED && !resumed {
                    debug!(release = %name, paused = ?other.metadata.name, "rollout: another rollout of this subscription is paused");
                    return Ok(());
                }
                // Running (or waiting for its ClusterClass), or paused and now resumed: the
                // newer release's rollout goes on from here.
                if o.phase == PROGRESSING || o.phase == WAITING || resumed {
                    let mut o = o.clone();
                    o.phase = SUPERSEDED.into();
                    o.message = format!("superseded by the rollout to {}", target.tag);
                    write(kube, other.metadata.name.as_deref().unwrap_or_default(), &o).await?;
                }
            }
            let waves = plan(&cfg.waves, &older);
            let total = older.len() as u32;
            info!(subscription = %sub.name, to = %target.tag, clusters = total, waves = waves.len(), "rollout started");
            let st = RolloutStatus {
                phase: PROGRESSING.into(),
                wave: 1,
                waves: waves.len() as u32,
                total,
                started: now(),
                plan: waves.into_iter().map(|clusters| WaveStatus { clusters, phase: PENDING.into(), done: 0 }).collect(),
                handled_resume: annotation(&rel, ROLLOUT_RESUME),
                handled_pause: annotation(&rel, ROLLOUT_PAUSE),
                ..RolloutStatus::default()
            };
            event(
                kube,
                &rel,
                EventType::Normal,
                "RolloutStarted",
                format!("moving {total} Clusters to {} in {} waves", target.tag, st.waves),
            );
            st
        }
    };
    let before = st.clone();
    let syncs = cluster_syncs(kube, sub).await?;
    step(kube, sub, cfg, &target, &rel, &members, &syncs, &mut st).await;
    summarise(&mut st);
    record_metrics(&sub.name, &st);
    if st != before {
        write(kube, &name, &st).await?;
    }
    Ok(())
}

/// Moves the rollout on as far as it goes now.
#[allow(clippy::too_many_arguments)] // the round's inputs, read once by `tick`
async fn step(
    kube: &Kube,
    sub: &Subscription,
    cfg: &RolloutConfig,
    target: &Release,
    rel: &StackRelease,
    members: &BTreeMap<String, Member>,
    syncs: &BTreeMap<String, ClusterSyncStatus>,
    st: &mut RolloutStatus,
) {
    let resume = annotation(rel, ROLLOUT_RESUME);
    if st.phase == PAUSED {
        if resume.is_empty() || resume == st.handled_resume {
            return;
        }
        info!(subscription = %sub.name, to = %target.tag, wave = st.wave, "rollout resumed");
        event(kube, rel, EventType::Normal, "RolloutResumed", format!("resumed at wave {}/{}", st.wave, st.waves));
        st.phase = PROGRESSING.into();
        st.reason.clear();
        st.message.clear();
        st.handled_resume = resume;
        // A resume also cancels a pause asked for before it.
        st.handled_pause = annotation(rel, ROLLOUT_PAUSE);
        // The wave gets its whole waveTimeout again, and its Clusters their edit.
        if let Some(w) = st.plan.get_mut(st.wave.saturating_sub(1) as usize)
            && w.phase == PROGRESSING
        {
            w.phase = PENDING.into();
        }
    }
    loop {
        let index = st.wave.saturating_sub(1) as usize;
        let Some(wave) = st.plan.get(index).cloned() else {
            st.phase = COMPLETE.into();
            return;
        };
        if wave.phase == PENDING {
            let version = kubernetes_version(kube, sub, target).await;
            for key in &wave.clusters {
                if let Some(m) = members.get(key)
                    && let Err(e) = move_cluster(kube, &m.obj, &target.tag, version.as_deref()).await
                {
                    // Re-read and retried at the next check; the wave waits (and times out).
                    warn!(cluster = %key, to = %target.tag, "rollout: cannot edit the Cluster: {e}");
                }
            }
            st.plan[index].phase = PROGRESSING.into();
            st.wave_started = now();
            info!(subscription = %sub.name, to = %target.tag, wave = st.wave, clusters = ?wave.clusters, "rollout wave started");
            event(
                kube,
                rel,
                EventType::Normal,
                "RolloutWaveStarted",
                format!("wave {}/{}: {}", st.wave, st.waves, wave.clusters.join(", ")),
            );
            // Nothing is done the moment it is edited.
            return;
        }
        let version = kubernetes_version(kube, sub, target).await;
        let t = Target { class: &target.tag, version: version.as_deref(), v1beta2: kube.clusters.version == "v1beta2" };
        let mut done = 0u32;
        let mut waiting: Vec<(String, String)> = Vec::new();
        for key in &wave.clusters {
            let Some(m) = members.get(key) else {
                // Deleted (or no longer the subscription's): nothing left to move.
                done += 1;
                continue;
            };
            let cp =
                super::referenced(kube, m.obj.metadata.namespace.as_deref().unwrap_or_default(), &m.obj.data["spec"]["controlPlaneRef"])
                    .await;
            let cluster = serde_json::to_value(&m.obj).unwrap_or_default();
            match judge(&cluster, cp.as_ref(), syncs.get(key), &t) {
                Health::Done => done += 1,
                Health::Waiting(why) => waiting.push((key.clone(), why)),
                Health::Failed(reason, why) => {
                    st.plan[index].done = done;
                    pause(kube, sub, rel, st, reason, format!("{key}: {why}"));
                    return;
                }
            }
        }
        st.plan[index].done = done;
        if !waiting.is_empty() {
            let started = chrono::DateTime::parse_from_rfc3339(&st.wave_started).map(|t| t.with_timezone(&chrono::Utc)).ok();
            let elapsed = started.map(|s| (chrono::Utc::now() - s).to_std().unwrap_or_default()).unwrap_or_default();
            if elapsed > cfg.wave_timeout {
                pause(kube, sub, rel, st, "WaveTimeout", late_message(&waiting, cfg.wave_timeout));
            }
            return;
        }
        st.plan[index].phase = DONE.into();
        info!(subscription = %sub.name, to = %target.tag, wave = st.wave, "rollout wave done");
        event(
            kube,
            rel,
            EventType::Normal,
            "RolloutWaveDone",
            format!("wave {}/{} done: {} Clusters", st.wave, st.waves, wave.clusters.len()),
        );
        if index + 1 == st.plan.len() {
            st.phase = COMPLETE.into();
            st.wave_started.clear();
            info!(subscription = %sub.name, to = %target.tag, "rollout complete");
            event(kube, rel, EventType::Normal, "RolloutComplete", format!("every Cluster runs {}", target.tag));
            return;
        }
        st.wave += 1;
        let asked = annotation(rel, ROLLOUT_PAUSE);
        if !asked.is_empty() && asked != st.handled_pause {
            st.handled_pause = asked;
            pause(kube, sub, rel, st, "PauseRequested", format!("paused by request before wave {}/{}", st.wave, st.waves));
            return;
        }
    }
}

/// Names the first late Cluster and why, and the other late ones (at most five more).
fn late_message(waiting: &[(String, String)], timeout: Duration) -> String {
    let within = crate::schedule::format_duration(timeout);
    let Some((key, why)) = waiting.first() else { return String::new() };
    let mut out = format!("{key} not done within waveTimeout {within}: {why}");
    if waiting.len() > 1 {
        let others: Vec<&str> = waiting[1..].iter().take(5).map(|(k, _)| k.as_str()).collect();
        let more = if waiting.len() > 6 { format!(" and {} more", waiting.len() - 6) } else { String::new() };
        out.push_str(&format!(" (also late: {}{more})", others.join(", ")));
    }
    out
}

fn pause(kube: &Kube, sub: &Subscription, rel: &StackRelease, st: &mut RolloutStatus, reason: &str, message: String) {
    warn!(subscription = %sub.name, wave = st.wave, reason, "rollout paused: {message}");
    event(kube, rel, EventType::Warning, "RolloutPaused", format!("wave {}/{}: {reason}: {message}", st.wave, st.waves));
    st.phase = PAUSED.into();
    reason.clone_into(&mut st.reason);
    st.message = message;
}

/// The counts and the column strings.
fn summarise(st: &mut RolloutStatus) {
    st.done = st.plan.iter().map(|w| if w.phase == DONE { w.clusters.len() as u32 } else { w.done }).sum();
    st.summary = format!("{}/{}", st.done, st.total);
    st.wave_summary = format!("{}/{}", st.wave.min(st.waves), st.waves);
}

fn record_metrics(subscription: &str, st: &RolloutStatus) {
    let paused = (st.phase == PAUSED).then_some(st.reason.as_str());
    crate::telemetry::metrics().rollout(subscription, st.wave, st.done, paused);
}

/// Why a StackRelease's ClusterClass is not applied: the first error of its apply (as this
/// process saw it), else the first object that failed, else its phase.
fn not_applied(kube: &Kube, sub: &Subscription, rel: &StackRelease) -> String {
    let Some(status) = rel.status.as_ref() else { return "its StackRelease has no status yet".into() };
    if status.phase == "Failed" {
        if let Some(e) = kube.classes.merged(&sub.name, &rel.spec.tag).errors.first() {
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

fn annotation(rel: &StackRelease, key: &str) -> String {
    rel.metadata.annotations.as_ref().and_then(|a| a.get(key)).cloned().unwrap_or_default()
}

fn event(kube: &Kube, rel: &StackRelease, type_: EventType, reason: &str, note: String) {
    let name = rel.metadata.name.clone().unwrap_or_default();
    kube.events.stack_release(&name, rel.metadata.uid.clone(), vec![super::events::event(type_, reason, "Rollout", note)]);
}

/// The subscription's Clusters by `namespace/name`.
async fn members(kube: &Kube, sub: &Subscription, cfg: &RolloutConfig) -> Result<BTreeMap<String, Member>, String> {
    let api: Api<DynamicObject> = Api::all_with(kube.mgmt.clone(), &kube.clusters);
    let list = api.list(&ListParams::default()).await.map_err(|e| format!("listing Clusters: {}", kube_error(&e)))?;
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
async fn cluster_syncs(kube: &Kube, sub: &Subscription) -> Result<BTreeMap<String, ClusterSyncStatus>, String> {
    let api: Api<ClusterSync> = Api::all(kube.mgmt.clone());
    let lp = ListParams::default().labels(&format!("stacksync.io/subscription={}", sub.name));
    let list = api.list(&lp).await.map_err(|e| format!("listing ClusterSyncs: {}", kube_error(&e)))?;
    Ok(list
        .items
        .into_iter()
        .filter(|cs| cs.spec.subscription == sub.name)
        .filter_map(|cs| Some((format!("{}/{}", cs.metadata.namespace?, cs.spec.cluster), cs.status?)))
        .collect())
}

/// The Kubernetes version of the target release (`versions.kubernetes` of its metadata), read
/// once per process (a release's content never changes under its tag and commit).
async fn kubernetes_version(kube: &Kube, sub: &Subscription, target: &Release) -> Option<String> {
    let id = format!("{}@{}", target.tag, target.commit);
    if let Some(v) = kube.kubernetes_versions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&id) {
        return v.clone();
    }
    let v = read_kubernetes_version(kube, sub, target).await;
    if v.is_some() {
        kube.kubernetes_versions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, v.clone());
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
async fn move_cluster(kube: &Kube, obj: &DynamicObject, class: &str, version: Option<&str>) -> Result<(), String> {
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
        return Ok(());
    }
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let body = json!({"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"topology": changes}});
    let api: Api<DynamicObject> = Api::namespaced_with(kube.mgmt.clone(), &ns, &kube.clusters);
    let pp = PatchParams { field_manager: Some(ROLLOUT_MANAGER.into()), ..PatchParams::default() };
    api.patch(&name, &pp, &Patch::Merge(body)).await.map_err(|e| kube_error(&e))?;
    info!(cluster = %format!("{ns}/{name}"), class, version = version.unwrap_or_default(), "rollout: Cluster moved");
    Ok(())
}

async fn write(kube: &Kube, name: &str, st: &RolloutStatus) -> Result<(), String> {
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let body =
        json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "status": {"rollout": st}});
    api.patch_status(name, &PatchParams::apply(ROLLOUT_MANAGER).force(), &Patch::Apply(body))
        .await
        .map(|_| ())
        .map_err(|e| format!("writing the rollout status of StackRelease {name}: {}", kube_error(&e)))
}

/// `stacksync rollout pause|resume <subscription>`: sets the annotation on the StackRelease of
/// the subscription's running (or paused) rollout. Returns that StackRelease's name.
///
/// # Errors
/// The management cluster cannot be reached, or the subscription has no rollout to act on.
pub async fn request(ctx: std::sync::Arc<crate::controller::Context>, subscription: &str, resume: bool) -> Result<String, String> {
    let k = super::target(&ctx.config());
    let mgmt = super::management_client(&k).await?;
    let api: Api<StackRelease> = Api::all(mgmt);
    let list = api.list(&ListParams::default()).await.map_err(|e| format!("listing StackReleases: {}", kube_error(&e)))?;
    let wanted: &[&str] = if resume { &[PAUSED] } else { &[PROGRESSING] };
    let found = list.items.iter().find(|r| {
        r.spec.subscription == subscription
            && r.status.as_ref().and_then(|s| s.rollout.as_ref()).is_some_and(|ro| wanted.contains(&ro.phase.as_str()))
    });
    let Some(rel) = found else {
        let what = if resume { "paused" } else { "running" };
        return Err(format!("subscription `{subscription}` has no {what} rollout (see `kubectl get stackreleases`)"));
    };
    let name = rel.metadata.name.clone().unwrap_or_default();
    let key = if resume { ROLLOUT_RESUME } else { ROLLOUT_PAUSE };
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let body = json!({"metadata": {"annotations": {key: at}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|e| format!("annotating StackRelease {name}: {}", kube_error(&e)))?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::crd::{Condition, ReleaseRefStatus, UpgradeStatus};

    fn keys(n: usize) -> Vec<(String, bool)> {
        (0..n).map(|i| (format!("ns/c{i:02}"), false)).collect()
    }

    #[test]
    fn waves_are_cut_in_name_order_with_canaries_first() {
        let w = [Wave::Clusters(1), Wave::Percent(25), Wave::Percent(100)];
        let p = plan(&w, &keys(10));
        assert_eq!(p.iter().map(Vec::len).collect::<Vec<_>>(), [1, 2, 7]);
        assert_eq!(p[0], ["ns/c00"]);
        assert_eq!(p[1], ["ns/c01", "ns/c02"]);
        let mut k = keys(10);
        k[7].1 = true;
        k[8].1 = true;
        let p = plan(&w, &k);
        assert_eq!(p[0], ["ns/c07", "ns/c08"], "every canary is in the first wave");
        assert_eq!(p[1], ["ns/c00"]);
        assert_eq!(p.iter().map(Vec::len).sum::<usize>(), 10);
        // Waves that add nobody are left out; the last takes the rest.
        assert_eq!(plan(&[Wave::Percent(10), Wave::Percent(10), Wave::Percent(100)], &keys(3)).len(), 2);
        assert_eq!(plan(&w, &keys(1)), [["ns/c00"]]);
        assert!(plan(&w, &[]).is_empty());
    }

    #[test]
    fn a_timeout_names_the_first_late_cluster_and_the_others() {
        let w: Vec<(String, String)> = (0..8).map(|i| (format!("ns/c{i}"), format!("why {i}"))).collect();
        assert_eq!(late_message(&w[..1], Duration::from_secs(30)), "ns/c0 not done within waveTimeout 30s: why 0");
        assert_eq!(
            late_message(&w, Duration::from_secs(60)),
            "ns/c0 not done within waveTimeout 1m: why 0 (also late: ns/c1, ns/c2, ns/c3, ns/c4, ns/c5 and 2 more)"
        );
    }

    #[test]
    fn only_an_unhandled_request_or_an_applied_class_wakes_the_driver() {
        let rel = |phase: &str, rollout: &str, annotations: &[(&str, &str)], handled: &str| {
            let mut r = StackRelease::new(
                "ferrol.v4",
                crate::status::crd::StackReleaseSpec { subscription: "ferrol".into(), source: "s".into(), tag: "v4".into() },
            );
            r.metadata.annotations = Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
            r.status = Some(crate::status::crd::StackReleaseStatus {
                phase: phase.into(),
                rollout: (!rollout.is_empty()).then(|| RolloutStatus {
                    phase: rollout.into(),
                    handled_resume: handled.into(),
                    handled_pause: handled.into(),
                    ..RolloutStatus::default()
                }),
                ..Default::default()
            });
            r
        };
        assert!(wants_a_look(&rel("Applied", PAUSED, &[(ROLLOUT_RESUME, "t2")], "t1")));
        assert!(!wants_a_look(&rel("Applied", PAUSED, &[(ROLLOUT_RESUME, "t1")], "t1")), "handled already");
        assert!(!wants_a_look(&rel("Applied", PAUSED, &[], "")), "nothing asked");
        assert!(wants_a_look(&rel("Applied", PROGRESSING, &[(ROLLOUT_PAUSE, "t2")], "t1")));
        assert!(!wants_a_look(&rel("Applied", PROGRESSING, &[(ROLLOUT_RESUME, "t2")], "t1")), "resuming a running rollout");
        assert!(!wants_a_look(&rel("Applied", COMPLETE, &[(ROLLOUT_RESUME, "t2"), (ROLLOUT_PAUSE, "t2")], "t1")));
        assert!(wants_a_look(&rel("Applied", WAITING, &[], "")), "its ClusterClass is applied now");
        assert!(!wants_a_look(&rel("Failed", WAITING, &[], "")));
        assert!(!wants_a_look(&rel("Applied", "", &[(ROLLOUT_RESUME, "t2")], "")), "no rollout");
    }

    fn cond(t: &str, s: &str, reason: &str) -> Condition {
        Condition { type_: t.into(), status: s.into(), reason: reason.into(), message: "m".into(), ..Default::default() }
    }

    #[test]
    fn a_cluster_is_done_when_upgraded_healthy_and_available() {
        let t = Target { class: "s-v4", version: Some("v1.28.1"), v1beta2: false };
        let cluster = |class: &str, avail: bool| {
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "spec": {"topology": {"class": class}}, "status": {"conditions": [
                {"type": "Ready", "status": if avail { "True" } else { "False" }}, {"type": "ControlPlaneReady", "status": "True"}]}})
        };
        let cp = |v: &str| json!({"status": {"version": v}});
        let mut sync = ClusterSyncStatus {
            applied_release: Some(ReleaseRefStatus { tag: "s-v4".into(), ..Default::default() }),
            conditions: vec![cond("Ready", "True", "Synced")],
            ..Default::default()
        };
        assert_eq!(judge(&cluster("s-v4", true), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Done);
        assert!(
            matches!(judge(&cluster("s-v4", false), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Waiting(w) if w.contains("available"))
        );
        assert!(
            matches!(judge(&cluster("s-v4", true), Some(&cp("v1.27.3")), Some(&sync), &t), Health::Waiting(w) if w.contains("v1.27.3"))
        );
        assert!(matches!(judge(&cluster("s-v3", true), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Failed("ClassChanged", _)));
        let v1beta2 = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "spec": {"topology": {"classRef": {"name": "s-v4"}}}, "status": {"conditions": [{"type": "Available", "status": "True"}]}});
        let t2 = Target { v1beta2: true, ..t };
        assert_eq!(judge(&v1beta2, Some(&cp("v1.28.1")), Some(&sync), &t2), Health::Done);
        // The control plane's own Available condition wins over the Cluster's (a moment older).
        let down = json!({"metadata": {"generation": 3}, "status": {"version": "v1.28.1", "conditions": [
            {"type": "Available", "status": "False", "reason": "Unhealthy", "message": "etcd down", "observedGeneration": 3}]}});
        assert!(
            matches!(judge(&v1beta2, Some(&down), Some(&sync), &t2), Health::Waiting(w) if w == "its control plane is not available (Unhealthy: etcd down)")
        );
        let stale = json!({"metadata": {"generation": 4}, "status": {"version": "v1.28.1", "conditions": [
            {"type": "Available", "status": "True", "observedGeneration": 3}]}});
        assert!(matches!(judge(&v1beta2, Some(&stale), Some(&sync), &t2), Health::Waiting(w) if w.contains("not reported")));
        let up = json!({"metadata": {"generation": 4}, "status": {"version": "v1.28.1", "conditions": [
            {"type": "Available", "status": "True", "observedGeneration": 4}]}});
        assert_eq!(judge(&v1beta2, Some(&up), Some(&sync), &t2), Health::Done);
        assert!(matches!(judge(&cluster("s-v4", true), Some(&cp("v1.28.1")), Some(&sync), &t2), Health::Waiting(_)));
        let t = Target { v1beta2: false, ..t2 };
        sync.upgrade =
            Some(UpgradeStatus { to: "s-v4".into(), phase: "PostCondition".into(), stage: "cni".into(), stages: 2, ..Default::default() });
        assert!(matches!(judge(&cluster("s-v4", true), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Waiting(w) if w.contains("`cni`")));
        sync.conditions = vec![cond("Ready", "False", "UpgradeFailed")];
        assert!(
            matches!(judge(&cluster("s-v4", true), None, Some(&sync), &t), Health::Failed("ClusterFailed", w) if w.starts_with("UpgradeFailed"))
        );
        assert!(matches!(judge(&cluster("s-v4", true), None, None, &t), Health::Waiting(_)));
    }
}
