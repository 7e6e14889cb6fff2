//! One subscription of the directory target: its release rendered per cluster, written to the
//! cluster's directory, and each cluster's status file (the apply-started status first).

use std::path::PathBuf;

use tracing::{debug, error, info, info_span, warn};

use super::writer::DirectoryTarget;
use crate::config::Subscription;
use crate::controller::fetch::moved_since_applied;
use crate::controller::{ClusterReport, Mismatch, Prepared, PreparedRelease};
use crate::model::cluster::ClusterConfig;
use crate::model::repeats::{self, Repeats};
use crate::release::{Release, short};
use crate::render::Manifests;
use crate::status::{ClusterStatus, Reason};
use applier::ChangeSet;

/// Whether `rel` is the release in place on every cluster of subscription `sub` that `reports`
/// cover (not one that could not be rendered, could not be recorded, or no longer verifies).
pub(super) fn put_in_place(sub: &str, rel: &Release, reports: &[ClusterReport]) -> bool {
    reports
        .iter()
        .filter(|r| r.subscription == sub)
        .all(|r| r.status.applied_release.as_ref().is_some_and(|a| a.tag == rel.tag && a.commit == rel.commit))
}

/// Renders and applies a prepared release to each cluster of `sub`, writing status.
pub(super) fn sync_subscription(
    target: &DirectoryTarget,
    sub: &Subscription,
    prepared: &Prepared,
    source_error: Option<&String>,
    write_status: bool,
) -> Vec<ClusterReport> {
    let release = match &prepared.outcome {
        Ok(p) => p,
        Err(error) => {
            let msg = match source_error {
                Some(e) => format!("{error} (source poll failed: {e})"),
                None => error.to_string(),
            };
            let reason = error.status_reason();
            return sub
                .clusters
                .iter()
                .map(|c| {
                    let status = ClusterStatus::failed(sub, c, None, target.read_status(c), reason, msg.clone());
                    finish(target, sub, c, status, ChangeSet::default(), write_status)
                })
                .collect();
        }
    };
    let rel = &release.release;
    let span = info_span!("release", source = %rel.source, tag = %rel.tag, commit = %short(&rel.commit));
    let _guard = span.enter();
    if let Some(m) = unverified(target, sub, release) {
        return hold_unverified(target, sub, rel, &m, write_status);
    }
    let manifests = Manifests::load(&release.tree, &sub.path);
    sub.clusters
        .iter()
        .map(|c| {
            let rendered = manifests.as_ref().map_err(Clone::clone).and_then(|m| m.render(rel, c)).map(|mut objects| {
                crate::render::labels::add(&mut objects, &sub.adopted_labels);
                objects
            });
            match rendered {
                Ok(objects) => {
                    if write_status && let Err(report) = record_progress(target, sub, c, rel, objects.len()) {
                        return *report;
                    }
                    let changes = target.sync(c, objects);
                    let before = target.read_status(c).and_then(|s| s.applied_release);
                    let status = ClusterStatus::applied(sub, c, rel, &changes, before).with_assets(&rel.tag, &rel.commit, &release.assets);
                    info!(cluster = %format!("{}/{}", c.namespace, c.name), ready = status.ready, "synced: {}", changes.summary());
                    for e in changes.entries.iter().filter(|e| !e.is_synced()) {
                        warn!(cluster = %format!("{}/{}", c.namespace, c.name), object = %e.object, "{}: {}", e.action, e.message);
                    }
                    finish(target, sub, c, status, changes, write_status)
                }
                Err(errs) => {
                    error!(cluster = %format!("{}/{}", c.namespace, c.name), "render failed; the applied release stays: {errs}");
                    let status = ClusterStatus::failed(sub, c, Some(rel), target.read_status(c), Reason::RenderFailed, errs.to_string());
                    finish(target, sub, c, status, ChangeSet::default(), write_status)
                }
            }
        })
        .collect()
}

/// Why `release` is not put in place, if it is not: it no longer verifies against its source,
/// or one of the subscription's clusters records its tag as applied at another commit (the tag
/// moved; the status files remember what the clusters run when the cache does not).
pub(super) fn unverified(target: &DirectoryTarget, sub: &Subscription, release: &PreparedRelease) -> Option<Mismatch> {
    if let Some(m) = &release.unverified {
        return Some(m.clone());
    }
    sub.clusters.iter().find_map(|c| {
        let applied = target.read_status(c)?.applied_release?;
        moved_since_applied(&release.release.source, release.moved_tags_accepted, Some((&applied.tag, &applied.commit)), &release.release)
    })
}

/// The release in use no longer verifies ([`Mismatch`]): nothing is written but each cluster's
/// status, which says why; what is in place stays.
pub(super) fn hold_unverified(
    target: &DirectoryTarget,
    sub: &Subscription,
    rel: &Release,
    m: &Mismatch,
    write_status: bool,
) -> Vec<ClusterReport> {
    error!(reason = m.reason.as_str(), "{}", m.message);
    sub.clusters
        .iter()
        .map(|c| {
            let status = ClusterStatus::failed(sub, c, Some(rel), target.read_status(c), m.reason, m.message.clone());
            finish(target, sub, c, status, ChangeSet::default(), write_status)
        })
        .collect()
}

/// Before the first file of a release the cluster does not have yet is written, its status
/// says so (`Progressing`, applying the release): a status that cannot be written stops the
/// cluster's apply this round, so it never claims the old release while the new one goes in.
/// `Err` holds the cluster's report (nothing applied).
pub(super) fn record_progress(
    target: &DirectoryTarget,
    sub: &Subscription,
    c: &ClusterConfig,
    rel: &Release,
    objects: usize,
) -> Result<(), Box<ClusterReport>> {
    let previous = target.read_status(c);
    let applied = previous.as_ref().and_then(|p| p.applied_release.as_ref());
    if applied.is_some_and(|a| a.tag == rel.tag && a.commit == rel.commit) {
        return Ok(());
    }
    let message = format!("applying {} ({objects} objects)", rel.tag);
    let progress = ClusterStatus::failed(sub, c, Some(rel), previous.clone(), Reason::Progressing, message);
    let Err(e) = target.write_status(c, &progress) else { return Ok(()) };
    let who = format!("{}/{}", c.namespace, c.name);
    if status_failures().worth(&target.status_path(c), &repeats::cause(&e)) {
        error!(cluster = %who, error = %e, "cannot record that the apply of {} started; nothing is written to the cluster this round", rel.tag);
    } else {
        debug!(cluster = %who, error = %e, "cannot record that the apply of {} started (unchanged since it was said)", rel.tag);
    }
    let message = format!("cannot write the status file {} ({e}); nothing of {} was applied", target.status_path(c).display(), rel.tag);
    let status = ClusterStatus::failed(sub, c, Some(rel), previous, Reason::NotSynced, message);
    Err(Box::new(ClusterReport { subscription: sub.name.clone(), cluster: c.clone(), status, changes: ChangeSet::default() }))
}

/// The last failure said for each status file: a volume that stays full or read-only fails
/// every pass's write, said once per cause.
fn status_failures() -> &'static Repeats<PathBuf> {
    static SAID: std::sync::OnceLock<Repeats<PathBuf>> = std::sync::OnceLock::new();
    SAID.get_or_init(Default::default)
}

pub(super) fn finish(
    target: &DirectoryTarget,
    sub: &Subscription,
    cluster: &ClusterConfig,
    status: ClusterStatus,
    changes: ChangeSet,
    write_status: bool,
) -> ClusterReport {
    if write_status {
        let who = format!("{}/{}", cluster.namespace, cluster.name);
        match target.write_status(cluster, &status) {
            Ok(_) => status_failures().cleared(&target.status_path(cluster)),
            Err(e) if status_failures().worth(&target.status_path(cluster), &repeats::cause(&e)) => {
                error!(cluster = %who, error = %e, "cannot write status");
            }
            Err(e) => debug!(cluster = %who, error = %e, "cannot write status (unchanged since it was said)"),
        }
    }
    ClusterReport { subscription: sub.name.clone(), cluster: cluster.clone(), status, changes }
}
