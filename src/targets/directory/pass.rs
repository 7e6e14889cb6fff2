//! The directory target's pass (`run --once`, `stacksync fetch`, `stacksync render`): poll each
//! needed source once, select and cache each subscription's release, render it per cluster,
//! write it to the directory and record status.

use std::collections::BTreeSet;

use tracing::{Instrument, info_span, warn};

use super::clusterstack;
use super::sync::{put_in_place, sync_subscription};
use super::writer::DirectoryTarget;
use crate::cache;
use crate::config::{Config, Format, Subscription, Target};
use crate::controller::{ClusterReport, Context, PassReport, Prepared};

/// Runs the stages for `subs` (all subscriptions when `None`) of a directory target, or fetches
/// for any target. With `apply` false, stops after fetching and caching (`stacksync fetch`). The
/// Kubernetes target's pass is [`crate::targets::kubernetes::pass`].
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

    let progress = crate::model::progress::reporter();
    progress.add("subscriptions prepared", selected.len() as u64);
    for sub in selected {
        let _done = progress.tick();
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
