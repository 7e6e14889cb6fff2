//! The controller wires the stages for one pass: poll each needed source once, select and cache
//! each subscription's release, render it per cluster, apply to the target and record status.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

pub mod clusterstack;
mod context;
pub mod dirdiff;
pub mod directory;
pub mod error;
mod fetch;
pub mod kubernetes;
pub mod pipeline;
pub mod poller;

pub use context::{Context, RENDERS_DIR};
pub use error::{Error, PrepareError};
pub use fetch::{concerned, normalise_url};

use tracing::{Instrument, error, info, info_span, warn};

use crate::apply::{ChangeSet, DirectoryTarget};
use crate::cache;
use crate::config::{Config, Format, Subscription, Target};
use crate::model::cluster::ClusterConfig;
use crate::release::{Release, short};
use crate::render::Manifests;
use crate::status::{ClusterStatus, Reason};

pub use crate::source::POLL_TIMEOUT;

/// A subscription's release, fetched and cached, ready to render.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub subscription: String,
    pub source: String,
    pub outcome: Result<PreparedRelease, std::sync::Arc<PrepareError>>,
}

#[derive(Debug, Clone)]
pub struct PreparedRelease {
    pub release: Release,
    pub tree: PathBuf,
    /// True when this pass wrote the tree into the cache; false when it was already there.
    pub fetched: bool,
    pub note: Option<String>,
    /// GitHub sources: each asset's digest and how it was verified. Empty for Git, whose
    /// objects are content-addressed and checked by gix.
    pub assets: Vec<crate::model::verification::AssetRecord>,
    /// Set when the release, accepted earlier, no longer verifies against the source or the
    /// config (its tag moved, a pin no longer matches): it is not applied again, what is in
    /// place stays, and the status says why ([`fetch::mismatch`]).
    pub unverified: Option<Mismatch>,
    /// Sources with `verify`: who signed the release (`ssh:SHA256:…`, `openpgp:…`, `cosign:…`).
    pub signed_by: Option<String>,
}

/// Why a release in use no longer verifies: the status reason and a message naming the tag,
/// the pin and both digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub reason: Reason,
    pub message: String,
}

/// What happened to one cluster in a pass.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    pub subscription: String,
    pub cluster: ClusterConfig,
    pub status: ClusterStatus,
    pub changes: ChangeSet,
}

#[derive(Debug, Clone, Default)]
pub struct PassReport {
    pub prepared: Vec<Prepared>,
    pub clusters: Vec<ClusterReport>,
    /// Sources that could not be polled this pass (their cached tags were used).
    pub source_errors: BTreeMap<String, String>,
    /// Failures not tied to one cluster (e.g. the management cluster is unreachable), and
    /// those of clusters in `unreported`.
    pub failures: Vec<String>,
    /// Clusters whose sync failed before it had anything to report (their status could not
    /// be read or written): counted among the clusters, never ready.
    pub unreported: Vec<String>,
    /// Objects created, configured and pruned by Clusters whose reports were trimmed to what is
    /// wrong (`run --once` of the Kubernetes target keeps no per-object entry of a synced
    /// object: at 5,000 Clusters they would be most of its memory).
    pub trimmed_writes: [usize; 3],
}

impl PassReport {
    /// True when every cluster of every subscription is ready.
    pub fn all_synced(&self) -> bool {
        self.failures.is_empty() && self.clusters.iter().all(|c| c.status.ready)
    }

    /// What `run --once` says at the end: the clusters ready of all the pass handled, the
    /// objects synced, and what was written — counted from what was done, so a pass that
    /// applied objects never reads `0/0`.
    pub fn summary(&self) -> String {
        let total = self.clusters.len() + self.unreported.len();
        let ready = self.clusters.iter().filter(|c| c.status.ready).count();
        let objects: usize = self.clusters.iter().map(|c| c.status.total).sum();
        let synced: usize = self.clusters.iter().map(|c| c.status.synced).sum();
        let count = |a: crate::apply::Action| self.clusters.iter().map(|c| c.changes.count(a)).sum::<usize>();
        let [c, f, p] = self.trimmed_writes;
        let (created, configured, pruned) = (
            count(crate::apply::Action::Created) + c,
            count(crate::apply::Action::Configured) + f,
            count(crate::apply::Action::Pruned) + p,
        );
        format!(
            "{ready}/{total} clusters ready, {synced}/{objects} objects synced; written this run: {created} created, {configured} configured, {pruned} pruned"
        )
    }

    /// One line per cluster that is not ready, naming what is wrong.
    pub fn not_synced(&self) -> Vec<String> {
        let mut out: Vec<String> = self.failures.clone();
        for c in self.clusters.iter().filter(|c| !c.status.ready) {
            out.push(format!(
                "{}/{} ({}): {:?}: {}",
                c.cluster.namespace, c.cluster.name, c.subscription, c.status.reason, c.status.message
            ));
            for o in c.status.objects.iter().filter(|o| !o.synced) {
                out.push(format!("  {}: {}", o.object(), o.message));
            }
        }
        out
    }
}

/// Runs the stages for `subs` (all subscriptions when `None`) of a directory target, or fetches
/// for any target. With `apply` false, stops after fetching and caching (`stacksync fetch`). The
/// Kubernetes target's pass is [`kubernetes::pass`].
///
/// Never fails as a whole for one bad source, release or cluster: those are reported per
/// subscription and cluster. What was applied before stays in place.
///
/// # Errors
/// Only when the cache itself cannot be opened or its index read or written.
pub async fn pass(config: &Config, subs: Option<&[String]>, apply: bool) -> cache::Result<PassReport> {
    pass_scoped(config, subs, apply).await
}

/// [`pass`] for the given subscriptions.
///
/// # Errors
/// As [`pass`].
pub async fn pass_scoped(config: &Config, subs: Option<&[String]>, apply: bool) -> cache::Result<PassReport> {
    let ctx = Context::new(config.clone())?;
    let selected: Vec<&Subscription> = config.subscriptions.iter().filter(|s| subs.is_none_or(|names| names.contains(&s.name))).collect();
    let mut report = PassReport::default();
    let mut staged: Vec<(&Subscription, Prepared)> = Vec::new();

    let needed: BTreeSet<&str> = selected.iter().map(|s| s.source.as_str()).collect();
    for name in needed {
        if let Err(e) = ctx.poll(name).await {
            warn!(source = name, error = %e, "source poll failed; using the releases cached from the last successful poll");
            report.source_errors.insert(name.to_owned(), e.to_string());
        }
    }

    for sub in selected {
        let span = info_span!("subscription", subscription = %sub.name, source = %sub.source);
        let prepared = ctx.prepare_subscription(sub).instrument(span.clone()).await;
        if apply && matches!(config.target, Target::Kubernetes(_)) {
            // The Kubernetes target reconciles per Cluster: `kubernetes::pass`.
        } else if apply && sub.format == Format::ClusterStack && prepared.outcome.is_ok() {
            // Rendered together after the loop: ClusterClass directories are per namespace.
            staged.push((sub, prepared.clone()));
        } else if apply && let Target::Directory(dir) = &config.target {
            let target = DirectoryTarget::new(dir);
            let reports = span.in_scope(|| sync_subscription(&target, sub, &prepared, report.source_errors.get(&sub.source), true));
            adopt(&ctx, &[(sub, prepared.clone())], &reports).await;
            report.clusters.extend(reports);
        }
        report.prepared.push(prepared);
    }
    // Only a directory target stages here: Kubernetes subscriptions went to `kube_staged`.
    if !staged.is_empty()
        && let Target::Directory(dir) = &config.target
    {
        let reports = clusterstack::sync_with(&ctx, &DirectoryTarget::new(dir), &staged, true).await;
        adopt(&ctx, &staged, &reports).await;
        report.clusters.extend(reports);
    }
    ctx.collect_garbage(&BTreeSet::new()).await;
    ctx.save_index().await?;
    Ok(report)
}

/// Records the release of every subscription in `staged` that was put in place on each of its
/// clusters ([`put_in_place`]): it is the one in use (kept by garbage collection, and the one
/// `autoUpgrade: false` stays on).
async fn adopt(ctx: &Context, staged: &[(&Subscription, Prepared)], reports: &[ClusterReport]) {
    for (sub, prepared) in staged {
        if let Ok(p) = &prepared.outcome
            && put_in_place(&sub.name, &p.release, reports)
        {
            ctx.adopt(sub, &p.release).await;
        }
    }
}

/// Whether `rel` is the release in place on every cluster of subscription `sub` that `reports`
/// cover (not one that could not be rendered, could not be recorded, or no longer verifies).
fn put_in_place(sub: &str, rel: &Release, reports: &[ClusterReport]) -> bool {
    reports
        .iter()
        .filter(|r| r.subscription == sub)
        .all(|r| r.status.applied_release.as_ref().is_some_and(|a| a.tag == rel.tag && a.commit == rel.commit))
}

/// Renders and applies a prepared release to each cluster of `sub`, writing status.
fn sync_subscription(
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
    if let Some(m) = &release.unverified {
        return hold_unverified(target, sub, rel, m, write_status);
    }
    let manifests = Manifests::load(&release.tree, &sub.path);
    sub.clusters
        .iter()
        .map(|c| {
            let rendered = manifests.as_ref().map_err(Clone::clone).and_then(|m| m.render(rel, c));
            match rendered {
                Ok(objects) => {
                    if write_status && let Err(report) = record_progress(target, sub, c, rel, objects.len()) {
                        return *report;
                    }
                    let changes = target.sync(c, objects);
                    let status = ClusterStatus::applied(sub, c, rel, &changes).with_assets(&rel.tag, &rel.commit, &release.assets);
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

/// The release in use no longer verifies ([`Mismatch`]): nothing is written but each cluster's
/// status, which says why; what is in place stays.
fn hold_unverified(target: &DirectoryTarget, sub: &Subscription, rel: &Release, m: &Mismatch, write_status: bool) -> Vec<ClusterReport> {
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
fn record_progress(
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
    error!(cluster = %who, error = %e, "cannot record that the apply of {} started; nothing is written to the cluster this round", rel.tag);
    let message = format!("cannot write the status file {} ({e}); nothing of {} was applied", target.status_path(c).display(), rel.tag);
    let status = ClusterStatus::failed(sub, c, Some(rel), previous, Reason::NotSynced, message);
    Err(Box::new(ClusterReport { subscription: sub.name.clone(), cluster: c.clone(), status, changes: ChangeSet::default() }))
}

fn finish(
    target: &DirectoryTarget,
    sub: &Subscription,
    cluster: &ClusterConfig,
    status: ClusterStatus,
    changes: ChangeSet,
    write_status: bool,
) -> ClusterReport {
    if write_status && let Err(e) = target.write_status(cluster, &status) {
        error!(cluster = %format!("{}/{}", cluster.namespace, cluster.name), error = %e, "cannot write status");
    }
    ClusterReport { subscription: sub.name.clone(), cluster: cluster.clone(), status, changes }
}

/// Renders every subscription's release into `out` without status files (`stacksync render`).
///
/// # Errors
/// As [`pass`].
pub async fn render_to(config: &Config, out: &std::path::Path) -> cache::Result<PassReport> {
    let mut report = pass(config, None, false).await?;
    let target = DirectoryTarget::new(out);
    let mut staged = Vec::new();
    for (sub, prepared) in config.subscriptions.iter().zip(report.prepared.clone()) {
        if sub.format == Format::ClusterStack && prepared.outcome.is_ok() {
            staged.push((sub, prepared));
            continue;
        }
        report.clusters.extend(sync_subscription(&target, sub, &prepared, report.source_errors.get(&sub.source), false));
    }
    if !staged.is_empty() {
        // Manifests alone need no helm: do not look for it (nor complain that it is missing).
        report.clusters.extend(clusterstack::sync(config, &target, &staged, false).await);
    }
    Ok(report)
}
