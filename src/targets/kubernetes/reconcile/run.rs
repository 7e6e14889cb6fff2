//! Wiring of the per-Cluster reconcile: [`run`] drives it with kube-runtime's `Controller`
//! (watches, queue, debounce, bounded concurrency, backoff); [`pass`] runs it once for every
//! Cluster (`run --once`). Both use the same `reconcile`.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use super::super::Error;
use super::super::context::Kube;
use super::super::error::kube_error;
use super::cluster::{self, Reconciled, forget, key_of, retry_after};
use super::decide::topology_class;
use crate::config::Format;
use crate::controller::{ClusterReport, Context, PassReport};
use crate::model::ClusterKey;
use crate::status::crd::{ClusterSync, RECONCILE_REQUESTED_AT};
use crate::status::{ClusterStatus, Reason};
use crate::telemetry::{Outcome, metrics};

/// The label Cluster API puts on a Cluster's Secrets.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// How long a queued reconcile waits for more triggers of the same Cluster.
const DEBOUNCE: Duration = Duration::from_millis(300);

async fn reconcile_fn(obj: Arc<DynamicObject>, kube: Arc<Kube>) -> Result<Action, Error> {
    let Some(key) = key_of(&obj) else { return Ok(Action::await_change()) };
    // A server refused this Cluster's last try and said when to ask again: nothing is sent
    // before then, whatever woke it (its requeue honours the wait; a watch event, a publication
    // or a resync would not).
    if let Some(wait) = kube.attempts.held(&key) {
        debug!(cluster = %key, retry_in = ?wait, "held: its server said when to ask again");
        return Ok(Action::requeue(wait));
    }
    let started = std::time::Instant::now();
    let result = cluster::reconcile(&kube, key.clone(), &obj).await;
    reconciled(&key, result.as_ref(), started.elapsed());
    match result? {
        None => Ok(Action::await_change()),
        Some(r) => {
            if r.outcome.is_ok() {
                kube.attempts.succeeded(&key);
                kube.warnings.cleared(&(key.clone(), "reconcile"));
            }
            r.outcome
        }
    }
}

/// What a Cluster's reconcile tells the metrics (`crate::telemetry`): its result and reason,
/// how long it took, and what the applier did per object. Labels are the subscription, the
/// status reason and the object action: bounded, never a Cluster or object name.
///
/// Records one reconcile of `key`. Nothing is recorded for a Cluster no subscription covers.
fn reconciled(key: &ClusterKey, result: Result<&Option<Reconciled>, &Error>, elapsed: Duration) {
    let m = metrics();
    let r = match result {
        Ok(Some(r)) => r,
        Ok(None) => {
            m.forget_cluster(key);
            return;
        }
        // The ClusterSync could not be read or written: no subscription at hand for a label.
        Err(e) => {
            m.reconciled(key, "", "", Outcome::Error(e.reason()), elapsed, &[]);
            return;
        }
    };
    let sub = r.subscription.as_str();
    let status = &r.done.verdict;
    // A failed sync is written to the ClusterSync like any other state: not ready, with its
    // reason; `error` is kept for reconciles that could not write at all.
    let outcome = if status.ready {
        Outcome::Ready
    } else if r.stalled {
        Outcome::Stalled(status.reason.as_str())
    } else {
        Outcome::NotReady(status.reason.as_str())
    };
    let objects = [
        (applier::Action::Created, "created"),
        (applier::Action::Configured, "configured"),
        (applier::Action::Unchanged, "unchanged"),
        (applier::Action::Pruned, "pruned"),
        (applier::Action::Failed, "failed"),
        (applier::Action::Skipped(applier::SkipReason::Held), "skipped"),
    ]
    .map(|(action, name)| (name, r.done.changes.count(action) as u64));
    m.reconciled(key, sub, r.release_tag(), outcome, elapsed, &objects);
}

fn error_policy(obj: Arc<DynamicObject>, error: &Error, kube: Arc<Kube>) -> Action {
    let Some(key) = key_of(&obj) else { return Action::await_change() };
    let after = retry_after(&kube, &key, error);
    if super::workload::is_throttled(error)
        && let Some(wait) = kube.throttled(&key)
    {
        kube.attempts.hold(&key, wait);
    }
    // The same failure again (every retry, every resync): said once an hour at its level, at
    // DEBUG in between; a new one at once. Same is the same reason and cause: a full or
    // read-only cache volume names a temp file new on every try. A server that throttles is
    // said once for the server (`workload.rs`, `Throttle`), not per Cluster.
    let cause = format!("{}: {}", error.reason(), crate::model::repeats::cause(error));
    let loud = !super::workload::is_throttled(error) && kube.warnings.worth(&(key.clone(), "reconcile"), &cause);
    match (error.is_transient(), loud) {
        (true, true) => warn!(cluster = %key, reason = error.reason(), retry_in = ?after, "{error}"),
        (false, true) => {
            error!(cluster = %key, reason = error.reason(), "{error}; retried when something changes (or at the next resync)");
        }
        (_, false) => debug!(cluster = %key, reason = error.reason(), retry_in = ?after, "{error} (unchanged since the last warning)"),
    }
    Action::requeue(after)
}

/// The label that assigns a Cluster to a shard (`--shard`).
pub const SHARD_LABEL: &str = "stacksync.io/shard";

/// Runs the controller until `shutdown` completes: in-flight reconciles finish first. With a
/// `shard`, only Clusters labelled `stacksync.io/shard=<shard>` are reconciled.
///
/// # Errors
/// Only what cannot be retried: the management client cannot be built from the config.
pub async fn run(
    ctx: Arc<Context>,
    concurrency: u16,
    shard: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    let mut shutdown = Box::pin(shutdown);
    let Some(kube) = connect(&ctx, &mut shutdown).await? else { return Ok(()) };
    // A rebuilt controller lists every Cluster again before it is ready.
    crate::telemetry::readiness().set_synced(false);
    let ar = kube.clusters.clone();
    let clusters: Api<DynamicObject> = Api::all_with(kube.watch.clone(), &ar);
    let writer = Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let (seen_tx, seen_rx) = mpsc::unbounded_channel::<Seen>();
    let selector = shard.as_ref().map(|s| format!("{SHARD_LABEL}={s}"));
    let watch_config = match &selector {
        Some(sel) => watcher::Config::default().labels(sel),
        None => watcher::Config::default(),
    };
    // Before the store takes a changed Cluster, its class is compared with the one stored: a
    // Cluster that left a class (a rollout, a person) may leave it unused, and housekeeping
    // prunes a class no longer offered once no Cluster names it.
    let (before, moved_tx, ar_m) = (reader.clone(), seen_tx.clone(), ar.clone());
    let stream = watcher(clusters, watch_config)
        .default_backoff()
        // The store keeps every Cluster for the process's life: not the managedFields nobody
        // here reads (about half of an object a server keeps field managers for).
        .modify(|c| c.metadata.managed_fields = None)
        .inspect(move |event| {
            if let Ok(watcher::Event::Apply(obj)) = event
                && let Some(old) = before.get(&ObjectRef::from_obj_with(obj, ar_m.clone()))
                && let Some(left) = topology_class(&old.data)
                && topology_class(&obj.data).as_deref() != Some(left.as_str())
            {
                let _ = moved_tx.send(Seen::ClassLeft);
            }
        })
        .reflect(writer)
        .inspect(move |event| {
            let seen = match event {
                Ok(watcher::Event::Delete(obj)) => key_of(obj).map(Seen::Gone),
                Ok(watcher::Event::InitDone) => {
                    crate::telemetry::readiness().set_synced(true);
                    Some(Seen::Listed)
                }
                _ => None,
            };
            if let Some(seen) = seen {
                let _ = seen_tx.send(seen);
            }
        })
        .touched_objects();

    let secrets: Api<PartialObjectMeta<Secret>> = Api::all(kube.watch.clone());
    let syncs: Api<ClusterSync> = Api::all(kube.watch.clone());
    let (ar_s, ar_c) = (ar.clone(), ar.clone());
    let published = stream::unfold(ctx.published(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let housekeeping = tokio::spawn(housekeeping(kube.clone(), reader.clone(), shard.is_some(), seen_rx, stop_rx.clone()));
    kube.parts.set_shard(shard.as_deref());
    let rollup = {
        let (kube, stop_rx, reader) = (kube.clone(), stop_rx.clone(), reader.clone());
        tokio::spawn(async move { super::super::rollup::run(&kube, reader, stop_rx).await })
    };
    // A rollout moves every Cluster of a subscription and keeps one state per release: one
    // driver for the fleet. A shard's controller is not it: the rollout coordinator is
    // ([`coordinate`], elected among every shard's replicas by the daemon).
    let rollouts = {
        let kube = kube.clone();
        let sharded = shard.is_some();
        tokio::spawn(async move {
            if !sharded {
                super::super::rollout::run(&kube, stop_rx).await;
            }
        })
    };

    info!(concurrency, "reconciling Clusters");
    Controller::for_stream_with(stream, reader, ar.clone())
        .with_config(ControllerConfig::default().concurrency(concurrency).debounce(DEBOUNCE))
        // Kubeconfig Secrets only trigger: their metadata is all that is read of the watch (the
        // reconcile reads its one Secret), so every Secret's data is not sent nor decoded.
        .watches_stream(watcher(secrets, watcher::Config::default()).default_backoff().touched_objects(), move |s| {
            secret_owner(&s.metadata).map(|key| cluster_ref(&key, &ar_s))
        })
        .watches(syncs, watcher::Config::default(), move |cs: ClusterSync| {
            let requested = cs.metadata.annotations.as_ref().and_then(|a| a.get(RECONCILE_REQUESTED_AT)).cloned();
            let handled = cs.status.as_ref().and_then(|s| s.last_handled_reconcile_at.clone());
            let key = ClusterKey::new(cs.metadata.namespace.clone().unwrap_or_default(), cs.spec.cluster.clone());
            (requested.is_some() && requested != handled).then(|| cluster_ref(&key, &ar_c))
        })
        .reconcile_all_on(published)
        .graceful_shutdown_on(shutdown)
        .run(reconcile_fn, error_policy, kube.clone())
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => debug!(cluster = %obj, "reconciled"),
                Err(e) => debug!(error = %e, "controller"),
            }
        })
        .await;
    let _ = stop_tx.send(true);
    let _ = housekeeping.await;
    let _ = rollup.await;
    let _ = rollouts.await;
    info!("controller stopped");
    Ok(())
}

/// Connects to the management cluster, retrying with backoff what can be retried. `Ok(None)`:
/// `shutdown` came first.
async fn connect(ctx: &Arc<Context>, shutdown: &mut std::pin::Pin<Box<impl Future<Output = ()>>>) -> Result<Option<Arc<Kube>>, Error> {
    let mut attempt = 0u32;
    loop {
        match Kube::connect(ctx.clone()).await {
            Ok(k) => return Ok(Some(k)),
            Err(e @ Error::ManagementClient(_)) => return Err(e),
            Err(e) => {
                attempt = attempt.saturating_add(1);
                let wait = crate::schedule::jittered(crate::schedule::backoff(attempt).max(Duration::from_secs(2)));
                error!(reason = e.reason(), retry_in = ?wait, "{e}");
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = shutdown.as_mut() => return Ok(None),
                }
            }
        }
    }
}

/// The rollout coordinator of a sharded fleet: drives every subscription's rollout over the
/// whole fleet — whatever the shard of each Cluster — until `shutdown` completes (the round in
/// progress finishes first). The daemon runs it while this process holds the rollout Lease.
///
/// Nothing here reads a shard's Cluster cache: the driver lists Clusters, ClusterSyncs and
/// StackReleases from the API server and reads each control plane there, and each shard's
/// controller carries out the moves of its own Clusters (their upgrade stages and addons). The
/// state is the target StackRelease's `status.rollout`: a new coordinator resumes from it.
/// Cancellation-safe as the driver is: dropped between two requests, a Cluster moved but not yet
/// recorded is found on the target class by the next coordinator and not moved again.
pub async fn coordinate(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let mut shutdown = Box::pin(shutdown);
    let kube = match connect(&ctx, &mut shutdown).await {
        Ok(Some(k)) => k,
        Ok(None) => return,
        Err(e) => {
            error!(reason = e.reason(), "rollout coordinator: {e}; fix the config (it is reloaded when it changes)");
            shutdown.await;
            return;
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let driving = super::super::rollout::run(&kube, stop_rx);
    tokio::pin!(driving);
    tokio::select! {
        () = &mut driving => return,
        () = shutdown.as_mut() => {}
    }
    let _ = stop_tx.send(true);
    driving.await;
}

fn cluster_ref(key: &ClusterKey, ar: &kube::api::ApiResource) -> ObjectRef<DynamicObject> {
    ObjectRef::new_with(&key.name, ar.clone()).within(&key.namespace)
}

/// The Cluster a kubeconfig Secret belongs to: Cluster API's `cluster.x-k8s.io/cluster-name`
/// label, else the `<cluster>-kubeconfig` name.
fn secret_owner(s: &ObjectMeta) -> Option<ClusterKey> {
    let name = s.name.as_deref()?;
    let cluster = name.strip_suffix("-kubeconfig")?;
    let cluster = s.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)).map_or(cluster, String::as_str);
    Some(ClusterKey::new(s.namespace.clone()?, cluster))
}

/// What the Cluster watch told housekeeping.
enum Seen {
    /// A Cluster was deleted.
    Gone(ClusterKey),
    /// The watch (re)listed every Cluster: the cache is complete.
    Listed,
    /// A Cluster's `spec.topology.class` moved away from a class: that class may be unused now.
    ClassLeft,
}

/// What is not one Cluster's reconcile: removing the ClusterSync of deleted Clusters (and of
/// Clusters deleted while stacksync was down), pruning ClusterClasses no longer offered nor
/// used, garbage-collecting the cache. After each full list of Clusters, each publication and
/// every resync — never before the Cluster cache is complete (it would take every Cluster for
/// deleted).
///
/// A shard sees only its own Clusters, while ClusterSyncs and StackReleases are shared: a
/// sharded controller confirms a deletion with the API server (a Cluster relabelled to another
/// shard leaves this shard's watch, but is not gone), and lists every Cluster before sweeping
/// orphans and pruning ClusterClasses, so no shard removes what another shard's Cluster uses.
async fn housekeeping(
    kube: Arc<Kube>,
    reader: Store<DynamicObject>,
    sharded: bool,
    mut seen: mpsc::UnboundedReceiver<Seen>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut published = kube.ctx.published();
    let mut listed = false;
    loop {
        let resync = kube.target().resync;
        tokio::select! {
            event = seen.recv() => match event {
                Some(Seen::Gone(key)) => {
                    cluster_gone(&kube, sharded, &key).await;
                    continue;
                }
                Some(Seen::Listed) => listed = true,
                Some(Seen::ClassLeft) => {
                    // A rollout moves many Clusters at once: one housekeeping round for the
                    // moves queued so far (a Gone among them is handled as above).
                    while let Ok(next) = seen.try_recv() {
                        match next {
                            Seen::Gone(key) => cluster_gone(&kube, sharded, &key).await,
                            Seen::Listed => listed = true,
                            Seen::ClassLeft => {}
                        }
                    }
                }
                None => return,
            },
            r = published.changed() => if r.is_err() { return },
            () = tokio::time::sleep(resync) => {}
            _ = stop.changed() => return,
        }
        if !listed {
            continue;
        }
        let live: Vec<Arc<DynamicObject>> = if sharded {
            let api: Api<DynamicObject> = Api::all_with(kube.mgmt.clone(), &kube.clusters);
            match api.list(&ListParams::default()).await {
                Ok(l) => l.items.into_iter().map(Arc::new).collect(),
                Err(e) => {
                    warn!(error = %kube_error(&e), "cannot list every Cluster; housekeeping waits for the next round");
                    continue;
                }
            }
        } else {
            reader.state()
        };
        sweep_orphans(&kube, &live).await;
        let referenced: BTreeSet<String> = live.iter().filter_map(|c| topology_class(&c.data)).collect();
        super::super::classes::prune(&kube, &referenced).await;
        collect_garbage(&kube, &referenced).await;
        record_refusals(&kube).await;
    }
}

/// A Cluster deleted (or, sharded, perhaps only moved to another shard): its ClusterSync and
/// metrics go.
async fn cluster_gone(kube: &Kube, sharded: bool, key: &ClusterKey) {
    if sharded && !gone(kube, key).await {
        debug!(cluster = %key, "Cluster left this shard");
        return;
    }
    debug!(cluster = %key, "Cluster deleted");
    crate::telemetry::metrics().forget_cluster(key);
    forget(kube, key).await;
}

/// Every release a subscription would consider but whose signature was refused gets a
/// `StackRelease` saying so (phase `Refused`, `Ready=False` reason `SignatureInvalid`).
async fn record_refusals(kube: &Kube) {
    let config = kube.ctx.config();
    for sub in &config.subscriptions {
        for (tag, refusal) in kube.ctx.signature_refusals(sub).await {
            super::super::stackrelease::record_refused(&kube.mgmt, sub, &tag, &refusal).await;
        }
    }
}

/// Whether the Cluster `key` is gone from the API server (an error counts as not gone).
async fn gone(kube: &Kube, key: &ClusterKey) -> bool {
    let api: Api<DynamicObject> = Api::namespaced_with(kube.mgmt.clone(), &key.namespace, &kube.clusters);
    matches!(api.get_opt(&key.name).await, Ok(None))
}

/// Deletes ClusterSyncs whose Cluster no longer exists.
async fn sweep_orphans(kube: &Kube, live: &[Arc<DynamicObject>]) {
    let syncs: Api<ClusterSync> = Api::all(kube.mgmt.clone());
    let list = match syncs.list(&ListParams::default().labels("stacksync.io/subscription")).await {
        Ok(l) => l.items,
        Err(e) => {
            warn!(error = %kube_error(&e), "cannot list ClusterSyncs");
            return;
        }
    };
    let have: BTreeSet<ClusterKey> = live.iter().filter_map(|c| key_of(c)).collect();
    for cs in list {
        let key = ClusterKey::new(cs.metadata.namespace.clone().unwrap_or_default(), cs.spec.cluster.clone());
        if !have.contains(&key) {
            forget(kube, &key).await;
        }
    }
}

/// Keeps in the cache what a subscription offers and what a Cluster's class names.
async fn collect_garbage(kube: &Kube, referenced: &BTreeSet<String>) {
    let config = kube.ctx.config();
    let mut in_use = BTreeSet::new();
    for sub in config.subscriptions.iter().filter(|s| s.format == Format::ClusterStack) {
        let tags = kube.ctx.tags(sub).await;
        for rel in kube.ctx.offered(sub).await.iter() {
            in_use.extend(kube.ctx.release_id(rel));
        }
        for (tag, commit) in tags.known.iter().filter(|(t, _)| referenced.contains(*t)) {
            let Some(version) = crate::model::version::Version::from_tag(tag) else { continue };
            let rel = crate::release::Release { source: sub.source.clone(), tag: tag.clone(), commit: commit.clone(), version };
            in_use.extend(kube.ctx.release_id(&rel));
        }
    }
    kube.ctx.collect_garbage(&in_use).await;
}

/// `run --once` for the Kubernetes target: polls every source, then reconciles every Cluster a
/// subscription covers (up to `concurrency` at once), prunes ClusterClasses, collects garbage.
/// Nothing that could not be done is hidden: an unreachable management cluster, Clusters that
/// cannot be listed and ClusterSyncs that cannot be written are failures of the pass.
pub async fn pass(ctx: Arc<Context>, concurrency: usize) -> PassReport {
    let mut report = PassReport { source_errors: ctx.poll_all().await, ..PassReport::default() };
    let kube = match Kube::connect(ctx.clone()).await {
        Ok(k) => k,
        Err(e) => {
            error!(reason = e.reason(), "{e}");
            report.failures.push(e.to_string());
            return report;
        }
    };
    let api: Api<DynamicObject> = Api::all_with(kube.mgmt.clone(), &kube.clusters);
    let clusters = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            let e = Error::ListClusters(e);
            error!(reason = e.reason(), "{e}");
            report.failures.push(e.to_string());
            return report;
        }
    };
    let config = ctx.config();
    let present: BTreeSet<ClusterKey> = clusters.iter().filter_map(key_of).collect();
    for sub in &config.subscriptions {
        for c in sub.clusters.iter().filter(|c| !present.contains(&ClusterKey::new(&c.namespace, &c.name))) {
            let message = format!("Cluster {}/{} does not exist (yet)", c.namespace, c.name);
            warn!("{message}");
            let status = ClusterStatus::failed(sub, c, None, None, Reason::ClusterNotFound, message);
            report.clusters.push(ClusterReport { subscription: sub.name.clone(), cluster: c.clone(), status, changes: Default::default() });
        }
    }
    // Clusters whose objects are still rolling out are looked at again until they are healthy or
    // their healthTimeout has passed (then `Unhealthy`): `run --once` waits, as `kubectl rollout
    // status` and Flux's `wait` do.
    let referenced: BTreeSet<String> = clusters.iter().filter_map(|c| topology_class(&c.data)).collect();
    drop(present);
    // One copy of the fleet's Clusters, without the managedFields nothing here reads.
    let mut round: Vec<DynamicObject> = clusters;
    for c in &mut round {
        c.metadata.managed_fields = None;
    }
    let mut first = true;
    loop {
        // Owned Clusters (not borrowed): the pass's future stays provably `Send`, so `run --once`
        // runs it on a runtime worker. Each result is taken in (and trimmed) as it comes: at
        // 5,000 Clusters, every full report held until the last would be most of the memory.
        let mut results = stream::iter(std::mem::take(&mut round))
            .map(|obj| {
                let kube = kube.clone();
                async move {
                    let Some(key) = key_of(&obj) else { return (None, Ok(None)) };
                    (Some(key.clone()), cluster::reconcile(&kube, key, &obj).await)
                }
            })
            .buffer_unordered(concurrency.max(1));
        let mut progressing = Vec::new();
        while let Some((key, result)) = results.next().await {
            match result {
                Ok(Some(r)) => {
                    if r.done.verdict.reason == Reason::Progressing
                        && let Some(key) = &key
                    {
                        progressing.push(key.clone());
                    }
                    if !first {
                        // A Cluster looked at again (it was rolling out): its last report counts.
                        report.clusters.retain(|c| c.cluster.namespace != r.cluster.namespace || c.cluster.name != r.cluster.name);
                    }
                    report.clusters.push(trimmed(r.report(), &mut report.trimmed_writes));
                }
                Ok(None) => {}
                Err(e) => {
                    let key = key.map(|k| k.to_string()).unwrap_or_default();
                    error!(cluster = %key, reason = e.reason(), "{e}");
                    report.failures.push(e.to_string());
                    if !report.unreported.contains(&key) {
                        report.unreported.push(key);
                    }
                }
            }
        }
        drop(results);
        first = false;
        if progressing.is_empty() {
            break;
        }
        info!(clusters = progressing.len(), "waiting for applied objects to become healthy");
        tokio::time::sleep(cluster::HEALTH_RECHECK.min(Duration::from_secs(2))).await;
        round.clear();
        for key in progressing {
            let api: Api<DynamicObject> = Api::namespaced_with(kube.mgmt.clone(), &key.namespace, &kube.clusters);
            match api.get_opt(&key.name).await {
                Ok(Some(obj)) => round.push(obj),
                Ok(None) => {}
                Err(e) => report.failures.push(Error::ListClusters(e).to_string()),
            }
        }
    }
    super::super::classes::prune(&kube, &referenced).await;
    collect_garbage(&kube, &referenced).await;
    record_refusals(&kube).await;
    super::super::rollup::once(&kube).await;
    // The process exits after the pass: what was queued is published first.
    kube.events.flush(Duration::from_secs(10)).await;
    report
}

/// What the pass keeps of a Cluster's report until it ends: what its summary counts and what
/// is wrong. The writes of synced objects are counted into `writes` (created, configured,
/// pruned) and their entries dropped, with the live objects the render read.
fn trimmed(mut r: ClusterReport, writes: &mut [usize; 3]) -> ClusterReport {
    use applier::Action;
    for e in r.changes.entries.iter().filter(|e| e.is_synced()) {
        match e.action {
            Action::Created => writes[0] += 1,
            Action::Configured => writes[1] += 1,
            Action::Pruned => writes[2] += 1,
            _ => {}
        }
    }
    r.changes.entries.retain(|e| !e.is_synced());
    r.changes.entries.shrink_to_fit();
    r.status.objects.retain(|o| !o.synced);
    r.status.objects.shrink_to_fit();
    r.cluster.objects = Default::default();
    r
}

/// `stacksync reconcile <namespace>/<cluster>`: asks the running controller to reconcile a
/// Cluster now, by setting `stacksync.io/reconcile-requested-at` on its ClusterSync.
///
/// # Errors
/// The management cluster cannot be reached or the ClusterSync does not exist.
pub async fn request_reconcile(ctx: Arc<Context>, key: &ClusterKey) -> Result<String, Error> {
    request(ctx, key, &[RECONCILE_REQUESTED_AT]).await
}

/// `stacksync rotate <namespace>/<cluster>`: asks the running controller to rotate the values
/// the Cluster's charts generate (certificates, keys, passwords) once, now: sets
/// `stacksync.io/rotate-generated-at` and `stacksync.io/reconcile-requested-at` on its ClusterSync.
///
/// # Errors
/// As [`request_reconcile`].
pub async fn request_rotation(ctx: Arc<Context>, key: &ClusterKey) -> Result<String, Error> {
    request(ctx, key, &[super::generated::ROTATE_REQUESTED_AT, RECONCILE_REQUESTED_AT]).await
}

/// Sets each of `annotations` on the Cluster's ClusterSync to now (RFC 3339), which it returns.
async fn request(ctx: Arc<Context>, key: &ClusterKey, annotations: &[&str]) -> Result<String, Error> {
    let k = super::super::settings::target(&ctx.config());
    let mgmt = super::super::client::management_client(&k).await.map_err(Error::ManagementClient)?;
    let syncs: Api<ClusterSync> = Api::namespaced(mgmt, &key.namespace);
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let values: serde_json::Map<String, serde_json::Value> = annotations.iter().map(|a| ((*a).to_owned(), json!(at))).collect();
    let body = json!({"metadata": {"annotations": values}});
    syncs
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|source| Error::ReadStatus { cluster: key.clone(), source })?;
    Ok(at)
}
