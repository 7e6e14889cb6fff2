//! A Cluster's release change (its class moved from release A to release B): B's
//! `BeforeClusterUpgrade` stages of `clusteraddon.yaml` run, in order, before B's addons are
//! applied — and before A's objects that B no longer renders are pruned (the normal apply that
//! follows does that from the inventory).
//!
//! Each stage: wait for `waitForPreCondition`, then `apply` (render the stage chart with its
//! `overwrite.yaml`, server-side apply, nothing pruned) or `delete` (delete what the stage chart
//! renders), then wait for `waitForPostCondition`. A wait reads the named objects from the
//! workload cluster and evaluates the CEL expression (`render::cel`); it is not a loop: each
//! reconcile goes as far as it can and asks to be requeued after a delay that grows with the
//! time waited (2 s up to 30 s). Where it is (stage, phase, since when) lives in the
//! `ClusterSync`'s `status.upgrade`, so a restart resumes at the same stage. A wait longer than
//! the subscription's `stageTimeout` is `UpgradeFailed`, naming the stage and what it waits for;
//! the reconcile keeps polling with the controller's backoff, and goes on when the condition
//! holds.
//!
//! A new Cluster (no applied release) gets its `AfterControlPlaneInitialized` stages the same
//! way — one by one, with their waits — when any of them has a wait; without waits the apply
//! installs them all at once, as before.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DynamicObject, GroupVersionKind};
use tracing::info;

use super::super::context::Kube;
use crate::config::{Format, Subscription};
use crate::controller::PreparedRelease;
use crate::controller::pipeline::RenderError;
use crate::model::StageAction;
use crate::model::cluster::ClusterConfig;
use crate::render::cel::{self, Verdict, WaitFor};
use crate::render::clusterstack::{INSTALL_HOOK, StageRef};
use crate::status::crd::{ClusterSyncStatus, UpgradeStatus};
use applier::ssa::{Applier, ApplyOptions, Inventory, Stage};

/// The hook whose stages run when a Cluster's release changes.
pub const HOOK: &str = "BeforeClusterUpgrade";

const PRE: &str = "PreCondition";
const APPLY: &str = "Apply";
const POST: &str = "PostCondition";
pub(in crate::targets::kubernetes) const DONE: &str = "Done";

/// Shortest and longest delay between two looks at a wait.
const POLL_MIN: Duration = Duration::from_secs(2);
const POLL_MAX: Duration = Duration::from_secs(30);
/// How long reading one object of a wait may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a reconcile left the upgrade.
#[derive(Debug)]
pub(in crate::targets::kubernetes) enum Step {
    /// Nothing to run stage by stage (a new Cluster whose install stages have no waits): the
    /// apply installs every stage as before.
    NotNeeded,
    /// Every stage is done: apply the release as usual, and record this.
    Done(UpgradeStatus),
    /// A stage waits (or its apply is retried): record this and look again after the delay.
    Wait { upgrade: UpgradeStatus, message: String, after: Duration },
    /// A stage waited longer than `stageTimeout`, or cannot be rendered.
    Failed { upgrade: UpgradeStatus, message: String },
}

/// Whether stages run one by one before the apply: a cluster stack moving to another release
/// (`BeforeClusterUpgrade`), or getting its first one (`AfterControlPlaneInitialized`, when a
/// stage has a wait). Not when the release stays.
pub(in crate::targets::kubernetes) fn needed(sub: &Subscription, prev: &ClusterSyncStatus, to: &str) -> bool {
    sub.format == Format::ClusterStack && prev.applied_release.as_ref().is_none_or(|a| a.tag != to)
}

/// Runs the upgrade stages from `prev`'s applied release to `prepared`'s, from where `prev`
/// says they are, as far as they go now.
pub(in crate::targets::kubernetes) async fn advance(
    kube: &Kube,
    sub: &Subscription,
    c: &ClusterConfig,
    prepared: &PreparedRelease,
    client: &kube::Client,
    options: ApplyOptions,
    prev: &ClusterSyncStatus,
) -> Step {
    let to = prepared.release.tag.clone();
    let from = prev.applied_release.as_ref().map(|r| r.tag.as_str()).unwrap_or_default();
    let hook = if from.is_empty() { INSTALL_HOOK } else { HOOK };
    let mut up = match &prev.upgrade {
        Some(u) if u.hook == hook && u.from == from && u.to == to => u.clone(),
        _ => UpgradeStatus {
            hook: hook.into(),
            from: from.to_owned(),
            to: to.clone(),
            phase: PRE.into(),
            since: super::status::now(),
            ..UpgradeStatus::default()
        },
    };
    if up.phase == DONE {
        return Step::Done(up);
    }
    let layout = match kube.ctx.layout(sub, prepared).await {
        Ok(l) => l,
        Err(e) => return failed(up, format!("reading release {to}: {e}")),
    };
    let stages: Vec<StageRef> = layout.hook_stages(hook).to_vec();
    if hook == INSTALL_HOOK && stages.iter().all(|s| s.pre.is_none() && s.post.is_none()) {
        return Step::NotNeeded;
    }
    up.stages = stages.len() as u32;
    loop {
        let Some(stage) = stages.get(up.stage_index as usize) else {
            up.phase = DONE.into();
            up.stage.clear();
            up.waiting_for.clear();
            up.failure.clear();
            up.since = super::status::now();
            info!(hook, from = %up.from, to = %up.to, "stages done");
            return Step::Done(up);
        };
        up.stage.clone_from(&stage.name);
        match up.phase.as_str() {
            PRE | POST => {
                let wait = if up.phase == PRE { &stage.pre } else { &stage.post };
                if let Some(w) = wait
                    && let Some(why) = not_met(client, w).await
                {
                    return waiting(up, sub.stage_timeout, why);
                }
                if up.phase == PRE {
                    next_phase(&mut up, APPLY);
                } else {
                    up.stage_index += 1;
                    next_phase(&mut up, PRE);
                }
            }
            _ => {
                if let Err(why) = run_stage(kube, c, &layout, stage, client, options.clone()).await {
                    return waiting(up, sub.stage_timeout, why.to_string());
                }
                info!(stage = %stage.name, action = ?stage.action, "upgrade stage done");
                next_phase(&mut up, POST);
            }
        }
    }
}

fn next_phase(up: &mut UpgradeStatus, phase: &str) {
    phase.clone_into(&mut up.phase);
    up.waiting_for.clear();
    up.failure.clear();
    up.since = super::status::now();
}

/// Still waiting: `Wait` within `timeout` of the phase's start, `Failed` after it.
fn waiting(mut up: UpgradeStatus, timeout: Duration, why: String) -> Step {
    let waited = since(&up.since);
    // The stage first: the MESSAGE column shows only the beginning.
    let kind = if up.hook == HOOK { "upgrade" } else { "install" };
    let what = format!("{kind} stage {}/{} `{}` {}", up.stage_index + 1, up.stages, up.stage, up.phase);
    up.waiting_for.clone_from(&why);
    if waited >= timeout {
        let message = format!(
            "{what} not done within stageTimeout {} ({} → {}): {why}",
            crate::model::schedule::format_duration(timeout),
            up.from,
            up.to
        );
        return failed(up, message);
    }
    up.failure.clear();
    let message = format!("{what}: waiting since {} ({} → {}): {why}", up.since, up.from, up.to);
    let after = (waited / 2).clamp(POLL_MIN, POLL_MAX).min(timeout.saturating_sub(waited) + Duration::from_secs(1));
    Step::Wait { upgrade: up, message, after }
}

fn failed(mut up: UpgradeStatus, message: String) -> Step {
    up.failure.clone_from(&message);
    Step::Failed { upgrade: up, message }
}

/// How long the phase has waited: on the monotonic clock while this process lives, so a step
/// of the wall clock neither times a stage out early nor holds it past `stageTimeout`.
fn since(rfc3339: &str) -> Duration {
    crate::schedule::clock::elapsed_since(rfc3339)
}

/// Applies (nothing pruned) or deletes what the stage chart renders. `Err` says why it must be
/// tried again.
async fn run_stage(
    kube: &Kube,
    c: &ClusterConfig,
    layout: &crate::render::clusterstack::Layout,
    stage: &StageRef,
    client: &kube::Client,
    options: ApplyOptions,
) -> Result<(), StageError> {
    let work = kube.ctx.work_dir().map_err(RenderError::from)?.join("upgrades").join(format!("{}-{}", c.namespace, c.name));
    let helm = kube.ctx.helm().await?;
    let rendered = layout.render_stage(&helm, c, &work, &stage.name).await;
    let _ = tokio::fs::remove_dir_all(&work).await;
    let objects = rendered.map_err(|source| StageError::Render { stage: stage.name.clone(), source })?;
    let applier = Applier::new(client.clone(), ApplyOptions { prune: false, ..options });
    let s = Stage { name: stage.name.clone(), action: stage.action, objects };
    let result = applier.sync(&[s], &Inventory::default()).await;
    // An object stacksync does not own is left alone by a delete stage (the applier's rule for
    // every delete): reported, not retried — it would never change.
    let not_ours = |e: &&applier::Entry| matches!(e.action, applier::Action::Skipped(applier::SkipReason::NotOurs));
    for e in result.changes.entries.iter().filter(not_ours) {
        tracing::warn!(stage = %stage.name, object = %e.object, "{}", e.message);
    }
    let failed: Vec<String> =
        result.changes.entries.iter().filter(|e| !e.is_synced() && !not_ours(e)).map(|e| format!("{}: {}", e.object, e.message)).collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => {
            let verb = if stage.action == StageAction::Delete { "deleting" } else { "applying" };
            let more = if failed.len() > 1 { format!(" (and {} more)", failed.len() - 1) } else { String::new() };
            Err(StageError::Objects { verb, stage: stage.name.clone(), first: first.clone(), more })
        }
    }
}

/// Why an upgrade stage must be tried again (it waits, up to `stageTimeout`).
#[derive(Debug, thiserror::Error)]
enum StageError {
    /// The work directory or helm is not usable.
    #[error(transparent)]
    Setup(#[from] RenderError),
    #[error("rendering stage `{stage}`: {source}")]
    Render {
        stage: String,
        #[source]
        source: crate::render::Errors,
    },
    /// Some of the stage's objects failed: the first, and how many more.
    #[error("{verb} stage `{stage}`: {first}{more}")]
    Objects { verb: &'static str, stage: String, first: String, more: String },
}

/// Reads a wait's objects from the workload cluster and evaluates its expression: `None` when
/// it holds, otherwise why not.
async fn not_met(client: &kube::Client, w: &WaitFor) -> Option<String> {
    let mut objects = BTreeMap::new();
    for o in &w.objects {
        let (group, version) = o.api_version.rsplit_once('/').unwrap_or(("", &o.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &o.kind);
        let read = async {
            let (res, _) = kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|e| format!("{}: {}", o.api_version, super::super::error::kube_error(&e)))?;
            let api: Api<DynamicObject> = if o.namespace.is_empty() {
                Api::all_with(client.clone(), &res)
            } else {
                Api::namespaced_with(client.clone(), &o.namespace, &res)
            };
            api.get_opt(&o.name).await.map_err(|e| format!("reading {o}: {}", super::super::error::kube_error(&e)))
        };
        match tokio::time::timeout(READ_TIMEOUT, read).await {
            Err(_) => return Some(format!("reading {o} took longer than {}s", READ_TIMEOUT.as_secs())),
            Ok(Err(e)) => return Some(e),
            Ok(Ok(None)) => return Some(format!("{o} does not exist")),
            Ok(Ok(Some(obj))) => {
                objects.insert(o.key.clone(), serde_json::to_value(obj).unwrap_or_default());
            }
        }
    }
    match cel::evaluate(&w.conditions, &objects) {
        Ok(Verdict::Met) => None,
        Ok(Verdict::NotYet(why)) => Some(why),
        Err(e) => Some(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(since: &str) -> UpgradeStatus {
        UpgradeStatus {
            hook: HOOK.into(),
            from: "a-v1".into(),
            to: "a-v2".into(),
            stages: 2,
            stage: "cni".into(),
            phase: POST.into(),
            since: since.into(),
            ..UpgradeStatus::default()
        }
    }

    #[test]
    fn a_wait_is_polled_with_growing_delays_and_fails_after_the_stage_timeout() {
        let just_now = super::super::status::now();
        let Step::Wait { after, message, .. } = waiting(up(&just_now), Duration::from_secs(600), "`x` is false".into()) else {
            panic!("not waiting")
        };
        assert_eq!(after, POLL_MIN);
        assert!(message.contains("upgrade stage 1/2 `cni` PostCondition") && message.contains("`x` is false"), "{message}");
        let earlier = (chrono::Utc::now() - chrono::Duration::seconds(100)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let Step::Wait { after, .. } = waiting(up(&earlier), Duration::from_secs(600), "no".into()) else { panic!("not waiting") };
        assert_eq!(after, POLL_MAX);
        let Step::Failed { message, upgrade } = waiting(up(&earlier), Duration::from_secs(60), "no".into()) else { panic!("not failed") };
        assert!(message.contains("not done within stageTimeout 1m"), "{message}");
        assert_eq!(upgrade.failure, message);
    }
}
