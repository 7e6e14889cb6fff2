//! The pure part of a Cluster's sync, which `cluster.rs` acts on. What is read of a Cluster
//! API `Cluster` (the subscription that covers it, whether it is paused, its topology class,
//! whether its control plane is ready); what a Cluster that is held gets; before the apply,
//! whether the apply-started status is written and what becomes of the upgrade stages; after it,
//! what the applier's result means for the Cluster's status and what is worth saying. Plain
//! functions of their inputs, `now` passed in; table-tested.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::fail::Fail;
use super::stages::rendered_digest;
use super::upgrade::{self, Step};
use crate::config::{Config, Subscription};
use crate::controller::{Mismatch, PreparedRelease};
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::model::verification::AssetRecord;
use crate::release::Release;
use crate::status::crd::{ClusterSyncStatus, UpgradeStatus};
use crate::status::desired::{Applied, Outcome, Verdict, desired, verdict};
use crate::status::{ClusterStatus, Reason};
use applier::ssa::{Stage, SyncResult};
use applier::{ChangeSet, ObjectRef};

type Now = chrono::DateTime<chrono::Utc>;

/// Cluster API's pause annotation (set by `clusterctl move`, among others).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// The subscription that covers a Cluster, and the cluster as that subscription sees it (its
/// values). A Cluster listed by name belongs to the first subscription listing it; otherwise to
/// the first whose `clusterSelector` matches. A cluster follows one stack: later matches are
/// ignored (they would fight over its ClusterSync). Pure.
pub fn subscription_for<'a>(
    config: &'a Config,
    key: &ClusterKey,
    labels: &BTreeMap<String, String>,
    class: Option<&str>,
) -> Option<(&'a Subscription, ClusterConfig)> {
    let listed = config
        .subscriptions
        .iter()
        .find_map(|s| s.clusters.iter().find(|c| c.name == key.name && c.namespace == key.namespace).map(|c| (s, c.clone())));
    if listed.is_some() {
        return listed;
    }
    config.subscriptions.iter().find_map(|s| {
        let sel = s.selector.as_ref()?;
        let labels_match = sel.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        let class_match = !sel.match_stack_class || s.families().zip(class).is_some_and(|(families, class)| families.covers_class(class));
        (labels_match && class_match).then(|| {
            let config = ClusterConfig {
                name: key.name.clone(),
                namespace: key.namespace.clone(),
                values: s.values.clone(),
                objects: Default::default(),
            };
            (s, config)
        })
    })
}

/// Whether Cluster API asks everyone to keep their hands off this Cluster.
pub fn is_paused(cluster: &DynamicObject) -> bool {
    cluster.data.pointer("/spec/paused") == Some(&json!(true))
        || cluster.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// `spec.topology.class` of a Cluster (v1beta1 and v1beta2 alike; v1beta2 may also say
/// `spec.topology.classRef.name`).
pub fn topology_class(cluster: &Value) -> Option<String> {
    let t = cluster.pointer("/spec/topology")?;
    t.get("class").and_then(Value::as_str).or_else(|| t.pointer("/classRef/name").and_then(Value::as_str)).map(str::to_owned)
}

/// v1beta1: `status.controlPlaneReady`; v1beta2: `status.initialization.controlPlaneInitialized`
/// or a true `ControlPlaneInitialized` / `ControlPlaneReady` condition.
pub(in crate::targets::kubernetes) fn control_plane_ready(cluster: &Value) -> bool {
    let status = &cluster["status"];
    if status["controlPlaneReady"] == json!(true) || status["initialization"]["controlPlaneInitialized"] == json!(true) {
        return true;
    }
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| matches!(c["type"].as_str(), Some("ControlPlaneInitialized" | "ControlPlaneReady")) && c["status"] == "True")
    })
}

/// What a sync ends with when it did not fail: `Ready` with its reason and message, the
/// `ClusterSync` status to write, what was applied, and when to look again. The `run --once`
/// report of the Cluster is built from it only when a pass asks ([`Done::status`]): the daemon
/// reads the verdict and writes the `ClusterSync`, and a report of every object per reconcile of
/// every Cluster would be built for nobody.
#[derive(Debug)]
pub(in crate::targets::kubernetes) struct Done {
    pub verdict: Verdict,
    /// What the report says of the Cluster's releases.
    pub report: Report,
    pub changes: ChangeSet,
    pub crd: ClusterSyncStatus,
    /// Look again after this (an upgrade stage waiting), whatever the reason.
    pub requeue: Option<Duration>,
}

/// What the `run --once` report says of a Cluster's releases ([`Done::status`]).
#[derive(Debug)]
pub(in crate::targets::kubernetes) enum Report {
    /// The release was applied: its objects are the change set's.
    Applied { release: Release, assets: Vec<AssetRecord> },
    /// Nothing was applied this round: the release it was for (if any), and what of the previous
    /// status is kept.
    NotApplied { wanted: Option<Release>, keep: Keep },
}

/// What a report of a round that applied nothing keeps of the previous status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::targets::kubernetes) enum Keep {
    Nothing,
    /// Synced n/m (the upgrade stages ran, the release did not change yet).
    Counts,
    /// The applied release and synced n/m: still what the cluster runs.
    Applied,
}

impl Done {
    /// Nothing applied, for `reason`.
    fn not_applied(wanted: Option<&Release>, keep: Keep, reason: Reason, message: String, crd: ClusterSyncStatus) -> Done {
        Done {
            verdict: Verdict { ready: false, reason, message },
            report: Report::NotApplied { wanted: wanted.cloned(), keep },
            changes: ChangeSet::default(),
            crd,
            requeue: None,
        }
    }

    /// The tag the metrics label the reconcile with: the release it was for, else the one in place.
    pub(in crate::targets::kubernetes) fn release_tag<'a>(&'a self, prev: &'a ClusterSyncStatus) -> &'a str {
        match &self.report {
            Report::Applied { release, .. } | Report::NotApplied { wanted: Some(release), .. } => &release.tag,
            Report::NotApplied { wanted: None, keep: Keep::Applied } => prev.applied_release.as_ref().map_or("", |r| r.tag.as_str()),
            Report::NotApplied { wanted: None, .. } => "",
        }
    }

    /// The Cluster's `run --once` report (`prev`: the status the reconcile read).
    pub(in crate::targets::kubernetes) fn status(&self, sub: &Subscription, c: &ClusterConfig, prev: &ClusterSyncStatus) -> ClusterStatus {
        let before = || {
            prev.applied_release.as_ref().map(|r| crate::status::ReleaseRef {
                tag: r.tag.clone(),
                version: r.version.clone(),
                commit: r.commit.clone(),
                assets: Vec::new(),
            })
        };
        let mut status = match &self.report {
            Report::Applied { release, assets } => {
                ClusterStatus::applied(sub, c, release, &self.changes, before()).with_assets(&release.tag, &release.commit, assets)
            }
            Report::NotApplied { wanted, keep } => {
                let mut status = ClusterStatus::failed(sub, c, wanted.as_ref(), None, self.verdict.reason, String::new());
                if *keep == Keep::Applied {
                    status.applied_release = before();
                }
                if *keep != Keep::Nothing {
                    status.synced = prev.synced as usize;
                    status.total = prev.total as usize;
                }
                status
            }
        };
        status.decided(self.verdict.clone());
        status
    }
}

/// A Cluster that is held (paused, its subscription suspended): nothing is written to it; its
/// status says why.
pub(in crate::targets::kubernetes) fn held(prev: &ClusterSyncStatus, reason: Reason, message: String, now: Now) -> Done {
    let crd = desired(prev, &Outcome::Held { reason, message: message.clone() }, now);
    Done::not_applied(None, Keep::Nothing, reason, message, crd)
}

/// A step failed before anything was applied: the applied release and synced n/m stay what the
/// previous status says (nothing was applied this round, so that is still what the cluster runs).
pub(in crate::targets::kubernetes) fn failed_step(crd: ClusterSyncStatus, reason: Reason, message: String) -> Done {
    Done::not_applied(None, Keep::Applied, reason, message, crd)
}

/// The release in use no longer verifies ([`Mismatch`]): nothing is applied, the applied
/// release and its objects stay as they are, Ready is False with the reason.
pub(in crate::targets::kubernetes) fn unverified_held(rel: &Release, prev: &ClusterSyncStatus, m: &Mismatch, now: Now) -> Done {
    let outcome = Outcome::Failed { wanted: Some(rel), reason: m.reason, message: m.message.clone(), transient: false, cause: None };
    let crd = desired(prev, &outcome, now);
    Done::not_applied(Some(rel), Keep::Applied, m.reason, m.message.clone(), crd)
}

/// An upgrade stage waits or failed: the applied release and its objects stay as they are, the
/// status says which stage and why.
pub(in crate::targets::kubernetes) fn upgrade_held(rel: &Release, prev: &ClusterSyncStatus, step: Step, now: Now) -> Done {
    let (upgrade, message, requeue, failed) = match step {
        Step::Wait { upgrade, message, after } => (upgrade, message, Some(after), false),
        Step::Failed { upgrade, message } => (upgrade, message, None, true),
        Step::Done(upgrade) => (upgrade, String::new(), None, false),
        Step::NotNeeded => (prev.upgrade.clone().unwrap_or_default(), String::new(), None, false),
    };
    let crd = desired(prev, &Outcome::Upgrade { release: rel, upgrade, message: message.clone(), failed }, now);
    let reason = if failed { Reason::UpgradeFailed } else { Reason::Progressing };
    Done { requeue, ..Done::not_applied(Some(rel), Keep::Counts, reason, message, crd) }
}

/// What to do before the apply.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::targets::kubernetes) struct Before {
    /// The digest of the rendered objects (recorded with the result).
    pub digest: String,
    /// The apply-started status, written before anything else when the rendered objects are
    /// not those the status records: from the first write on, the status must not claim the
    /// old release is in place.
    pub progress: Option<ClusterSyncStatus>,
    pub upgrade: Upgrade,
    /// What rendered the release's charts (`status.renderedBy`), set by the reconcile for a
    /// cluster stack; empty for manifests.
    pub rendered_by: String,
}

/// What becomes of the release's upgrade stages.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::targets::kubernetes) enum Upgrade {
    /// A release change (or a first install with waits): run the stages one by one first
    /// (`upgrade::advance`).
    Advance,
    /// Nothing to run: the upgrade status to record (one finished earlier; stages left
    /// half-way, the class moved back, are abandoned and a later move starts afresh).
    Keep(Option<UpgradeStatus>),
}

/// What to do before applying `stages` of `rel`.
pub(in crate::targets::kubernetes) fn before(
    sub: &Subscription,
    prev: &ClusterSyncStatus,
    rel: &Release,
    stages: &[Stage],
    generated: &applier::ssa::GeneratedFields,
    now: Now,
) -> Before {
    let digest = rendered_digest(stages.iter().flat_map(|s| &s.objects), generated);
    let upgrade = if upgrade::needed(sub, prev, &rel.tag) {
        Upgrade::Advance
    } else {
        Upgrade::Keep(prev.upgrade.clone().filter(|u| u.phase == upgrade::DONE))
    };
    // A Cluster nothing was ever applied to has no release its status could wrongly claim while
    // this one goes in: unless stages run one by one first (they record where they are), its
    // first status is the one written when the apply ends (a new Cluster costs the management
    // cluster one write fewer: docs/performance.md).
    let first_install = prev.applied_release.is_none() && prev.inventory.is_empty() && upgrade != Upgrade::Advance;
    let progress = (!first_install && prev.rendered_digest != digest).then(|| {
        let objects: usize = stages.iter().map(|s| s.objects.len()).sum();
        desired(prev, &Outcome::Started { release: rel, objects }, now)
    });
    Before { digest, progress, upgrade, rendered_by: String::new() }
}

/// What the apply's result means.
#[derive(Debug)]
pub(in crate::targets::kubernetes) struct After {
    pub done: Done,
    /// Objects of this release were in place with our owner label, yet the status had no
    /// inventory: the ClusterSync was deleted (or lost). What this release has is adopted again;
    /// what an older release had and this one dropped is not known any more, so not pruned.
    pub inventory_lost: bool,
    /// What drifted (`driftMode: warn`) and which objects are not synced, one line each: said
    /// at WARN when it changed since it was last said.
    pub said: String,
    /// What drifted, with the fields, for the log.
    pub drifted: Vec<(ObjectRef, Vec<String>)>,
}

/// What the applier's `result` for `prepared` means for the Cluster.
///
/// # Errors
/// [`Fail::Unreachable`]: the workload cluster did not answer the first request (nothing else
/// was sent, what is applied stays).
#[allow(clippy::too_many_arguments)] // reason: the inputs of one decision, each used once
pub(in crate::targets::kubernetes) fn after(
    sub: &Subscription,
    prepared: &PreparedRelease,
    prev: &ClusterSyncStatus,
    result: SyncResult,
    warnings: &[String],
    before: Before,
    upgraded: Option<UpgradeStatus>,
    now: Now,
) -> Result<After, Fail> {
    if let Some(why) = result.unreachable {
        return Err(Fail::Unreachable(why));
    }
    let rel = &prepared.release;
    let inventory_lost =
        prev.inventory.is_empty() && result.changes.entries.iter().any(|e| e.action == applier::Action::Unchanged && e.is_release_object());
    let mut said = String::new();
    for (object, fields) in &result.drifted {
        said.push_str(&format!("{object} drifted {fields:?}\n"));
    }
    for e in result.changes.entries.iter().filter(|e| !e.is_synced()) {
        said.push_str(&format!("{} {}: {}\n", e.object, e.action, e.message));
    }
    let applied = Applied {
        release: rel,
        changes: &result.changes,
        prune_paused: result.prune_paused.as_deref(),
        transient: &result.transient,
        unhealthy: &result.unhealthy,
        health_timeout: sub.health_timeout,
        warnings,
        inventory: result.inventory.to_lines(),
        digest: before.digest,
        rendered_by: before.rendered_by,
        upgrade: upgraded,
    };
    let outcome = Outcome::Applied(applied);
    let crd = desired(prev, &outcome, now);
    let verdict = verdict(&outcome, prev, now);
    let report = Report::Applied { release: rel.clone(), assets: prepared.assets.clone() };
    let done = Done { verdict, report, changes: result.changes, crd, requeue: None };
    Ok(After { done, inventory_lost, said, drifted: result.drifted })
}

#[cfg(test)]
mod tests;
