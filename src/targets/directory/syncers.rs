//! The directory target as the daemon runs it: one syncer per subscription beside the source
//! pollers, over the long-lived [`Context`] — the Kubernetes target's shape. A syncer renders its
//! subscription's release into the directory on its schedule, when a poll changed what some
//! source offers, and when triggered (a reload that changed it). Downloads happen in the syncer
//! of the subscription that needs them, so a slow or hanging source holds up only its own
//! subscriptions; the config watcher waits for none of them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span};

use super::clusterstack;
use super::sync::sync_subscription;
use super::writer::DirectoryTarget;
use crate::config::{Config, Format, Subscription, Target};
use crate::controller::{ClusterReport, Context, PrepareError, Prepared};
use crate::model::sync::MutexExt;

/// What the syncers of one directory share.
#[derive(Default)]
struct Shared {
    /// The release each cluster-stack subscription last prepared: a namespace's
    /// `cluster-class/` directory holds the ClusterClass objects of every subscription with
    /// clusters there, so each write needs them all.
    prepared: Mutex<BTreeMap<String, Prepared>>,
    /// One writer at a time in the output directory. Held only while rendering and writing
    /// (local work), never across a download.
    write: tokio::sync::Mutex<()>,
}

/// The running syncers, by subscription name.
#[derive(Default)]
pub struct Syncers {
    tasks: BTreeMap<String, (Arc<Notify>, JoinHandle<()>)>,
    shared: Arc<Shared>,
}

impl Syncers {
    /// Starts a syncer for every subscription of the config in force and stops those of
    /// subscriptions that are gone. Call again after a reload.
    pub fn sync(&mut self, ctx: &Arc<Context>) {
        let config = ctx.config();
        let wanted: BTreeSet<String> = config.subscriptions.iter().map(|s| s.name.clone()).collect();
        self.tasks.retain(|name, (_, task)| {
            let keep = wanted.contains(name) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        self.shared.prepared.locked().retain(|name, _| wanted.contains(name));
        for name in wanted {
            if !self.tasks.contains_key(&name) {
                self.start(ctx, name);
            }
        }
    }

    /// Starts `name`'s syncer afresh: a sync in progress (a download of the old config's
    /// release) is abandoned — everything it writes is atomic — and the new one begins now.
    pub fn restart(&mut self, ctx: &Arc<Context>, name: &str) {
        if let Some((_, task)) = self.tasks.remove(name) {
            task.abort();
        }
        if ctx.config().subscription(name).is_some() {
            self.start(ctx, name.to_owned());
        }
    }

    /// Syncs `name` now (its syncer wakes; a sync in progress finishes first).
    pub fn trigger(&self, name: &str) {
        if let Some((notify, _)) = self.tasks.get(name) {
            notify.notify_one();
        }
    }

    /// Stops every syncer and waits until each has ended.
    pub async fn stop(&mut self) {
        for (_, (_, task)) in std::mem::take(&mut self.tasks) {
            task.abort();
            let _ = task.await;
        }
    }

    fn start(&mut self, ctx: &Arc<Context>, name: String) {
        let notify = Arc::new(Notify::new());
        let task = tokio::spawn(sync_loop(ctx.clone(), name.clone(), notify.clone(), self.shared.clone()));
        self.tasks.insert(name, (notify, task));
    }
}

impl Drop for Syncers {
    fn drop(&mut self) {
        for (_, (_, task)) in std::mem::take(&mut self.tasks) {
            task.abort();
        }
    }
}

async fn sync_loop(ctx: Arc<Context>, name: String, trigger: Arc<Notify>, shared: Arc<Shared>) {
    let mut published = ctx.published();
    loop {
        let config = ctx.config();
        let Some(sub) = config.subscription(&name).cloned() else { return };
        // Until its source's first poll, a subscription waits (that poll publishes).
        if ctx.polled(&sub.source) {
            let span = info_span!("subscription", subscription = %sub.name, source = %sub.source);
            let reports = sync(&ctx, &config, &sub, &shared).instrument(span).await;
            let mine: Vec<&ClusterReport> = reports.iter().filter(|r| r.subscription == sub.name).collect();
            let ready = mine.iter().filter(|r| r.status.ready).count();
            let written: usize = mine.iter().map(|r| r.changes.writes()).sum();
            info!(subscription = %sub.name, clusters = mine.len(), ready, written, "subscription synced");
            crate::telemetry::readiness().set_synced(true);
        }
        let wait = sub.schedule.delay_after(Utc::now());
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            changed = published.changed() => if changed.is_err() { return },
            () = trigger.notified() => {}
        }
    }
}

/// Syncs one subscription into the directory: selects its release from what its source last
/// advertised, materialises it (the only network work, outside any lock), then renders and
/// writes each cluster. Returns the report of every cluster written (for a cluster stack, also
/// those of subscriptions sharing a namespace's `cluster-class/`, written again with it).
async fn sync(ctx: &Arc<Context>, config: &Config, sub: &Subscription, shared: &Shared) -> Vec<ClusterReport> {
    let Target::Directory(dir) = &config.target else { return Vec::new() };
    let target = DirectoryTarget::new(dir);
    let prepared = ctx.prepare_subscription(sub).await;
    let poll_error = ctx.poll_error(&sub.source);
    if sub.format == Format::ClusterStack && prepared.outcome.is_ok() {
        shared.prepared.locked().insert(sub.name.clone(), prepared.clone());
        let staged = peers(config, sub, &shared.prepared.locked());
        let _writing = shared.write.lock().await;
        let reports = clusterstack::sync_with(ctx, &target, &staged, true).await;
        for (s, p) in &staged {
            adopt(ctx, s, p, &reports).await;
        }
        return reports;
    }
    let _writing = shared.write.lock().await;
    let reports = sync_subscription(&target, sub, &prepared, poll_error.as_ref(), true);
    adopt(ctx, sub, &prepared, &reports).await;
    reports
}

/// `sub` and every other cluster-stack subscription with clusters in one of its namespaces,
/// each with the release it last prepared. One not prepared yet (its first download still
/// running) is staged as unavailable: its namespaces' `cluster-class/` directories are left as
/// they are rather than written without its objects.
fn peers<'a>(config: &'a Config, sub: &'a Subscription, prepared: &BTreeMap<String, Prepared>) -> Vec<(&'a Subscription, Prepared)> {
    let namespaces: BTreeSet<&str> = sub.clusters.iter().map(|c| c.namespace.as_str()).collect();
    config
        .subscriptions
        .iter()
        .filter(|s| s.format == Format::ClusterStack)
        .filter(|s| s.name == sub.name || s.clusters.iter().any(|c| namespaces.contains(c.namespace.as_str())))
        .map(|s| {
            let p = prepared.get(&s.name).cloned().unwrap_or_else(|| Prepared {
                subscription: s.name.clone(),
                source: s.source.clone(),
                outcome: Err(Arc::new(PrepareError::NotPrepared(s.name.clone()))),
            });
            (s, p)
        })
        .collect()
}

/// Records `sub`'s release as the one in use when it was put in place on every cluster, and collects
/// cache garbage when that changed what is in use.
async fn adopt(ctx: &Context, sub: &Subscription, prepared: &Prepared, reports: &[ClusterReport]) {
    let Ok(p) = &prepared.outcome else { return };
    if super::sync::put_in_place(&sub.name, &p.release, reports) && ctx.adopt(sub, &p.release).await {
        ctx.collect_garbage(&BTreeSet::new()).await;
    }
}
