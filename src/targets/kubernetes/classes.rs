//! ClusterClasses in the management cluster. Every release a cluster-stack subscription offers
//! has its ClusterClass (and templates) in every namespace with a subscribed Cluster, rendered
//! once per (release, namespace) and re-applied every `resync`; a release's ClusterClass is
//! pruned only when the subscription no longer offers it and no Cluster's class names it. What
//! was applied per release is recorded in its `StackRelease` (`status.classInventory`), which is
//! what pruning works from.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DeleteParams};
use tracing::{error, info, warn};

use super::class_results::ClassResult;
use super::context::Kube;
use super::error::kube_error;
use super::ledger::release_name;
use super::stackrelease::record_release;
use crate::config::{Format, Subscription};
use crate::model::StageAction;
use crate::release::Release;
use crate::status::crd::StackRelease;
use applier::ssa::{Applier, ApplyOptions, Inventory, Stage};

/// Makes sure each of `releases` has its ClusterClass in `namespace`. Failures are logged
/// and recorded in the release's StackRelease; they do not stop the Cluster's addons.
pub(super) async fn ensure(kube: &Kube, sub: &Subscription, namespace: &str, releases: &[Release]) {
    let resync = kube.target().resync;
    for rel in releases {
        let key = (sub.name.clone(), rel.tag.clone(), namespace.to_owned());
        let lock = kube.classes.lock(&key);
        let _guard = lock.lock().await;
        if kube.classes.fresh(&key, resync) {
            continue;
        }
        let (result, (assets, signed_by)) = apply(kube, sub, namespace, rel).await;
        let refused = result.refused;
        kube.classes.applied(key, result);
        if refused {
            // The StackRelease keeps the commit it recorded: what the tag pointed to.
            continue;
        }
        let record = kube.classes.record_lock(&sub.name, &rel.tag);
        let _recording = record.lock().await;
        let merged = kube.classes.merged(&sub.name, &rel.tag);
        record_release(kube, sub, rel, (&assets, signed_by.as_deref()), !merged.failed(), Some(&merged)).await;
    }
}

/// Deletes the ClusterClasses (and StackReleases) of releases a subscription no longer
/// offers and no Cluster's class names. `referenced`: every `spec.topology.class` in use.
pub(super) async fn prune(kube: &Kube, referenced: &BTreeSet<String>) {
    let config = kube.ctx.config();
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let all = match api.list(&Default::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            warn!(error = %kube_error(&e), "cannot list StackReleases; ClusterClasses are pruned later");
            return;
        }
    };
    for sub in config.subscriptions.iter().filter(|s| s.format == Format::ClusterStack && !s.suspend) {
        let offered: BTreeSet<String> = kube.ctx.offered(sub).await.iter().map(|r| r.tag.clone()).collect();
        for sr in all.iter().filter(|sr| sr.spec.subscription == sub.name) {
            let tag = &sr.spec.tag;
            if offered.contains(tag) || referenced.contains(tag) {
                continue;
            }
            let lines = sr.status.as_ref().map(|s| s.class_inventory.clone()).unwrap_or_default();
            if prune_release(kube, sub, tag, &lines).await {
                let name = release_name(&sub.name, tag);
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {
                        info!(subscription = %sub.name, tag, "release no longer offered nor used: its ClusterClasses and StackRelease are removed")
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => warn!(release = %name, error = %kube_error(&e), "cannot delete StackRelease"),
                }
                kube.classes.forget(&sub.name, tag);
            }
        }
    }
}

/// Renders a release's ClusterClass chart for `namespace` and applies it to the management
/// cluster (never pruning: other releases' classes stay).
async fn apply(kube: &Kube, sub: &Subscription, namespace: &str, rel: &Release) -> (ClassResult, Signed) {
    let mut out = ClassResult::default();
    let prepared = match kube.ctx.prepare(rel).await {
        Ok(p) => p,
        Err(e) => {
            out.errors.push(format!("{namespace}: {e}"));
            return (out, (Vec::new(), None));
        }
    };
    // A tag that moved since the fleet recorded it: its ClusterClass is not applied (the cache
    // may have forgotten the move; the StackRelease has not).
    let refusal = match &prepared.unverified {
        Some(m) => Some(m.message.clone()),
        None => match kube.ledger.moved(&kube.mgmt, &sub.name, rel, prepared.moved_tags_accepted).await {
            Ok(m) => m.map(|m| m.message),
            Err(e) => Some(format!("cannot read what tag {} was recorded at (its StackRelease): {}", rel.tag, kube_error(&e))),
        },
    };
    if let Some(message) = refusal {
        warn!(namespace, tag = %rel.tag, "ClusterClass not applied: {message}");
        out.errors.push(format!("{namespace}: {message}"));
        out.refused = true;
        return (out, (prepared.assets, prepared.signed_by));
    }
    let objects = match crate::controller::pipeline::cluster_class(&kube.ctx, sub, &prepared, namespace).await {
        Ok(o) => o,
        Err(e) => {
            error!(namespace, tag = %rel.tag, "ClusterClass render failed: {e}");
            out.errors.push(format!("{namespace}: {e}"));
            return (out, (prepared.assets, prepared.signed_by));
        }
    };
    let applier = Applier::new(kube.mgmt.clone(), class_options(sub, namespace)).with_discovery(kube.mgmt_discovery.clone());
    let stage = Stage { name: crate::render::clusterstack::CLUSTER_CLASS_STAGE.into(), action: StageAction::Apply, objects };
    let result = applier.sync(&[stage], &Inventory::default()).await;
    info!(namespace, tag = %rel.tag, "ClusterClass applied: {}", result.changes.summary());
    for e in result.changes.entries.iter().filter(|e| !e.is_synced()) {
        warn!(namespace, tag = %rel.tag, object = %e.object, "{}: {}", e.action, e.message);
    }
    out.changes = result.changes;
    out.inventory = result.inventory.to_lines();
    (out, (prepared.assets, prepared.signed_by))
}

/// A release's assets with their digests, and who signed it (sources with `verify`).
type Signed = (Vec<crate::model::verification::AssetRecord>, Option<String>);

/// What applying a release's ClusterClass in `namespace` would change (`stacksync diff`).
///
/// # Errors
/// The release cannot be prepared or its ClusterClass chart rendered.
pub(super) async fn preview(kube: &Kube, sub: &Subscription, namespace: &str, rel: &Release) -> anyhow::Result<applier::ssa::Preview> {
    let prepared = kube.ctx.prepare(rel).await?;
    preview_prepared(kube, sub, namespace, &prepared).await
}

/// [`preview`] of a release already prepared (`stacksync preview`'s, which may not be cached).
pub(super) async fn preview_prepared(
    kube: &Kube,
    sub: &Subscription,
    namespace: &str,
    prepared: &crate::controller::PreparedRelease,
) -> anyhow::Result<applier::ssa::Preview> {
    let objects = crate::controller::pipeline::cluster_class(&kube.ctx, sub, prepared, namespace).await?;
    let stage = Stage { name: crate::render::clusterstack::CLUSTER_CLASS_STAGE.into(), action: StageAction::Apply, objects };
    Ok(Applier::new(kube.mgmt.clone(), class_options(sub, namespace)).preview(&[stage], &Inventory::default()).await)
}

pub(super) fn class_options(sub: &Subscription, namespace: &str) -> ApplyOptions {
    ApplyOptions {
        owner: format!("{}.{namespace}.clusterclass", sub.name),
        default_namespace: namespace.to_owned(),
        force: sub.force,
        prune: false,
        ..ApplyOptions::new(crate::model::manager::manager())
    }
}

/// Deletes what a release's ClusterClass apply created, namespace by namespace (only objects
/// carrying our owner label). True when nothing is left to delete.
async fn prune_release(kube: &Kube, sub: &Subscription, tag: &str, lines: &[String]) -> bool {
    let mut by_namespace: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines {
        let ns = line.split('|').nth(2).unwrap_or_default().to_owned();
        by_namespace.entry(ns).or_default().push(line.clone());
    }
    let mut clean = true;
    for (ns, lines) in by_namespace {
        let options = ApplyOptions { prune: true, allow_empty_prune: true, prune_limit: usize::MAX, ..class_options(sub, &ns) };
        let result = Applier::new(kube.mgmt.clone(), options).sync(&[], &Inventory::from_lines(&lines)).await;
        for e in result.changes.entries.iter().filter(|e| !e.is_synced()) {
            warn!(tag, object = %e.object, "cannot prune ClusterClass object: {}", e.message);
            clean = false;
        }
    }
    clean
}
