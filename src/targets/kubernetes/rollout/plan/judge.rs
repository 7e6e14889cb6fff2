//! How the rollout judges a Cluster (pure): done, waiting or failed at its target or a step on
//! its path, a running wave's Clusters in wave order, and what is known of a Cluster's health
//! before its move.

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::super::reconcile::decide::topology_class;
use crate::status::crd::{ClusterSyncStatus, RolloutStatus, WaveStatus};
use crate::status::desired::shorten;

use super::{Fleet, PENDING, PROGRESSING};

/// ClusterSync reasons that will not pass by themselves: the Cluster failed.
pub(super) const FAILED_REASONS: [&str; 4] = ["UpgradeFailed", "RenderFailed", "ReleaseNotAvailable", "Unhealthy"];

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
    if let Some(u) = sync.upgrade.as_ref().filter(|u| u.to == target.class && u.phase != super::super::super::reconcile::upgrade::DONE) {
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
pub(super) fn control_plane_unavailable(cp: &Value) -> Option<String> {
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
pub(super) fn available(cluster: &Value, v1beta2: bool) -> bool {
    let is_true = |conds: &Value, t: &str| conds.as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"));
    let status = &cluster["status"];
    if v1beta2 {
        return is_true(&status["conditions"], "Available");
    }
    (is_true(&status["conditions"], "Ready") && is_true(&status["conditions"], "ControlPlaneReady"))
        || is_true(&status["v1beta2"]["conditions"], "Available")
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
