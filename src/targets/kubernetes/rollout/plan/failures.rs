//! What becomes of a failed Cluster and of its wave (pure): given up on (left alone or moved
//! back, when Cluster API allows), and whether the wave pauses over its failure budget.

use std::time::Duration;

use serde_json::Value;

use crate::config::OnFailure;
use crate::status::crd::{FailedCluster, MovedFrom, RolloutStatus};
use crate::status::desired::shorten;

use super::judge::WaveHealth;
use super::{Fleet, LEFT_ALONE, Policy, ROLLBACK_IMPOSSIBLE, ROLLING_BACK, Step};

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

/// What `cluster` was on before this rollout moved it.
pub(super) fn moved_from<'s>(st: &'s RolloutStatus, cluster: &str) -> Option<&'s MovedFrom> {
    st.plan.iter().flat_map(|w| &w.moved_from).find(|m| m.cluster == cluster)
}

/// Whether the running wave pauses after this round's failures (`failed_here`: every Cluster
/// of it given up on), and why: a Cluster that cannot be moved back (`RollbackImpossible`), or
/// more failures than `maxFailures` allows of its `size` Clusters, named after what tipped it
/// over — the late Clusters when it `timed_out`, else the first Cluster that failed this round,
/// else the first given up on in it.
pub(super) fn wave_pause(
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

/// Gives up on `cluster` of the running wave: recorded in `st.failed` with what becomes of it
/// (left alone; or, with `onFailure: rollback`, moved back, or not when Cluster API forbids).
pub(super) fn give_up(
    st: &mut RolloutStatus,
    fleet: &Fleet,
    policy: &Policy<'_>,
    cluster: &str,
    reason: &str,
    why: &str,
    steps: &mut Vec<Step>,
) {
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
