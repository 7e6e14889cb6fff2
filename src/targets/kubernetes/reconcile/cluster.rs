//! One Cluster's reconcile: match its subscription (pure), choose its release (the one its
//! ClusterClass names, or the newest allowed), render, apply to the workload cluster, write its
//! `ClusterSync`. Idempotent: a second reconcile with nothing changed makes reads and dry-runs
//! only. Cancellation-safe in the applier's sense: a dropped reconcile leaves the ClusterSync
//! saying `Reconciling` (written before the first object changes), and the next one completes.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use tracing::{Instrument, debug, info, info_span, warn};

use super::super::context::Kube;
use super::super::error::Error;
use super::super::error::kube_error;
use super::decide::{self, Done, control_plane_ready, is_paused, subscription_for, topology_class};
use super::fail::Fail;
use super::stages::{self, Rendered};
use super::status::{Owner, write_cluster_sync};
use crate::config::{Config, Format, KubernetesTarget, Subscription};
use crate::controller::{ClusterReport, PreparedRelease};
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::model::sync::MutexExt;
use crate::release::{self, Release, short};
use crate::status::Reason;
use crate::status::crd::{ClusterSync, ClusterSyncStatus, RECONCILE_REQUESTED_AT};
use crate::status::desired::{Outcome, Verdict, desired};
use applier::ssa::{AdoptionPolicy, Applier, ApplyOptions, Inventory};

/// How soon a Cluster whose objects are still rolling out is looked at again.
pub(in crate::targets::kubernetes) const HEALTH_RECHECK: Duration = Duration::from_secs(5);

/// What a reconcile did, and when to look at the Cluster again or the error that decides it
/// (transient: retried with backoff). The daemon reads the verdict; `run --once` asks for the
/// Cluster's report ([`Reconciled::report`]).
pub(in crate::targets::kubernetes) struct Reconciled {
    pub subscription: String,
    pub cluster: ClusterConfig,
    pub done: Done,
    /// The status the reconcile read (what the report keeps of it).
    prev: ClusterSyncStatus,
    /// The config the reconcile read, and which of its subscriptions covers the Cluster.
    config: Arc<Config>,
    sub: usize,
    pub outcome: Result<Action, Error>,
    /// What the ClusterSync's `Stalled` condition says (the metrics' `stalled` result).
    pub stalled: bool,
}

impl Reconciled {
    /// The tag the metrics label the reconcile with.
    pub(in crate::targets::kubernetes) fn release_tag(&self) -> &str {
        self.done.release_tag(&self.prev)
    }

    /// The Cluster's `run --once` report.
    pub(in crate::targets::kubernetes) fn report(self) -> ClusterReport {
        // The index was taken from this config, which nothing changes.
        let status = self.done.status(&self.config.subscriptions[self.sub], &self.cluster, &self.prev);
        ClusterReport { subscription: self.subscription, cluster: self.cluster, status, changes: self.done.changes }
    }
}

/// Reconciles one Cluster (`key`: its namespace and name, [`key_of`]). `Ok(None)`: no subscription covers it (or its source was never
/// polled yet: the first poll's publication brings it back).
///
/// # Errors
/// The ClusterSync could not be read, or the apply-started status could not be written (nothing
/// else is done then). Every other failure is written to the ClusterSync and returned in
/// [`Reconciled::outcome`]; a final status write that fails is returned there too (with the
/// report of what was done), and the controller retries until it lands.
pub(in crate::targets::kubernetes) async fn reconcile(
    kube: &Kube,
    key: ClusterKey,
    obj: &DynamicObject,
) -> Result<Option<Reconciled>, Error> {
    let config = kube.ctx.config();
    let labels = obj.metadata.labels.clone().unwrap_or_default();
    let class = topology_class(&obj.data);
    let Some((sub, c)) = subscription_for(&config, &key, &labels, class.as_deref()) else { return Ok(None) };
    if !kube.ctx.polled(&sub.source) {
        return Ok(None);
    }
    let span = info_span!("cluster", cluster = %key, subscription = %sub.name);
    let at = config.subscriptions.iter().position(|s| std::ptr::eq(s, sub)).unwrap_or_default();
    reconcile_in(kube, obj, key, (&config, at), c, class).instrument(span).await
}

async fn reconcile_in(
    kube: &Kube,
    obj: &DynamicObject,
    key: ClusterKey,
    (config, at): (&Arc<Config>, usize),
    c: ClusterConfig,
    class: Option<String>,
) -> Result<Option<Reconciled>, Error> {
    let sub = &config.subscriptions[at];
    let k = kube.target();

    let syncs: Api<ClusterSync> = Api::namespaced(kube.mgmt.clone(), &key.namespace);
    let previous = syncs.get_opt(&key.name).await.map_err(|source| Error::ReadStatus { cluster: key.clone(), source })?;
    let prev_status = previous.as_ref().and_then(|p| p.status.clone()).unwrap_or_default();
    let requested = previous
        .as_ref()
        .and_then(|p| p.metadata.annotations.as_ref())
        .and_then(|a| a.get(RECONCILE_REQUESTED_AT))
        .cloned()
        .or_else(|| prev_status.last_handled_reconcile_at.clone());
    let api_version = format!("{}/{}", kube.clusters.group, kube.clusters.version);
    let rotate_requested =
        previous.as_ref().and_then(|p| p.metadata.annotations.as_ref()).and_then(|a| a.get(super::generated::ROTATE_REQUESTED_AT)).cloned();
    let owner = Owner {
        api_version: &api_version,
        uid: obj.metadata.uid.as_deref(),
        exists: previous.is_some(),
        written: Default::default(),
        rotate_requested,
    };

    // Only a cluster stack's values templates read the Cluster's live objects (`.Cluster`,
    // `.ControlPlane`, `.InfraCluster`): a manifests release is rendered from its variables, so
    // its reconcile reads neither reference (two management GETs per Cluster and reconcile).
    let c = match sub.format {
        Format::ClusterStack => kube.with_live_objects(obj, c).await,
        Format::Manifests => c,
    };

    let newest = kube.ctx.offered(sub).await.first().map(|r| r.tag.clone());
    let selected_by = if follows_class(sub, class.as_deref()) { "class" } else { "subscription" };
    let stamp = |mut s: ClusterSyncStatus| {
        s.class.clone_from(&class);
        s.selected_by = Some(selected_by.to_owned());
        s.newest_available.clone_from(&newest);
        s.last_handled_reconcile_at.clone_from(&requested);
        s
    };
    let outcome = sync(kube, &key, sub, &c, obj, class.as_deref(), &prev_status, &owner).await;
    if let Err(Fail::Unrecorded { tag, source }) = outcome {
        // The management cluster refused the apply-started status: the ClusterSync still says
        // what is true (nothing was applied). An Event says why, the metrics count the error,
        // and the controller retries with backoff.
        let uid = previous.as_ref().and_then(|p| p.metadata.uid.clone());
        kube.events.cluster_sync(
            &key.namespace,
            &key.name,
            uid,
            vec![super::super::events::progress_unrecorded(&tag, &kube_error(&source))],
        );
        return Err(Error::WriteProgress { cluster: key, tag, source });
    }
    let (mut done, action, failure) = match outcome {
        Ok(done) => {
            let action = match done.verdict.reason {
                _ if done.requeue.is_some() => Action::requeue(done.requeue.unwrap_or(HEALTH_RECHECK)),
                _ if done.verdict.ready => Action::requeue(k.resync),
                // Nothing changes until the Cluster (its watch) or the config (a reload
                // reconciles every Cluster) does: looked at again at the resync only.
                Reason::Paused | Reason::Suspended => Action::requeue(k.resync),
                // Rolling out: look again soon, without counting it as a failure.
                Reason::Progressing => Action::requeue(HEALTH_RECHECK),
                _ => Action::requeue(k.not_ready_retry.min(k.resync)),
            };
            let quiet = matches!(
                done.verdict.reason,
                Reason::Paused
                    | Reason::Suspended
                    | Reason::Progressing
                    | Reason::Unhealthy
                    | Reason::TagRefused
                    | Reason::PinMismatch
                    | Reason::SignatureInvalid
            );
            let failure = (!done.verdict.ready && !quiet)
                .then(|| Fail::NotReady { reason: done.verdict.reason, message: done.verdict.message.clone() });
            (done, action, failure)
        }
        Err(fail) => {
            // The one place a failed step becomes the status's reason and message.
            let (reason, message, transient) = (fail.reason(), fail.to_string(), fail.is_transient());
            let outcome = Outcome::Failed { wanted: fail.wanted(), reason, message: message.clone(), transient, cause: fail.cause() };
            let crd = desired(&prev_status, &outcome, chrono::Utc::now());
            // What needs a change is looked at again at the resync (the watches bring it back
            // sooner: a Cluster edit, its Secret, a new release, a new config); the rest soon.
            let action = if transient { Action::requeue(k.not_ready_retry) } else { Action::requeue(k.resync) };
            (decide::failed_step(crd, reason, message), action, Some(fail))
        }
    };
    done.crd = stamp(std::mem::take(&mut done.crd));
    let next = &done.crd;
    let stalled = next.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == "True");
    let changes = &done.changes;
    let events = super::super::events::for_cluster_sync(&prev_status, next, changes.writes(), || changes.summary());
    // Retried a few times here; past that the reconcile fails and the controller retries it
    // with backoff until the status lands (the apply-started status says the truth meanwhile).
    // The ClusterSync as this reconcile last wrote it, if it did: not created a second time.
    let latest = owner.written.locked().take();
    let latest = latest.as_ref().or(previous.as_ref());
    let written = super::status::retried(|| write_cluster_sync(&syncs, sub, &c, &owner, latest, next.clone(), k.resync / 2)).await;
    let reconciled = |done, outcome| Reconciled {
        subscription: sub.name.clone(),
        cluster: c,
        done,
        prev: prev_status,
        config: config.clone(),
        sub: at,
        outcome,
        stalled,
    };
    let uid = match written {
        Ok(uid) => uid,
        Err(source) => {
            // What was done is reported (`run --once` counts it), but not as ready: the record
            // is not written. The apply-started status written before says the truth meanwhile.
            let error = Error::WriteStatus { cluster: key, source };
            done.verdict = Verdict { ready: false, reason: Reason::TransientError, message: format!("{error}; retried with backoff") };
            return Ok(Some(reconciled(done, Err(error))));
        }
    };
    kube.events.cluster_sync(&key.namespace, &key.name, uid, events);
    let outcome = match failure {
        Some(f) if f.is_transient() => {
            let (reason, message) = (f.reason(), f.to_string());
            Err(Error::Sync { cluster: key, reason, message, transient: true, source: f.into_source() })
        }
        _ => Ok(action),
    };
    Ok(Some(reconciled(done, outcome)))
}

/// Everything between reading the previous status and writing the new one.
#[allow(clippy::too_many_arguments)]
async fn sync(
    kube: &Kube,
    key: &ClusterKey,
    sub: &Subscription,
    c: &ClusterConfig,
    obj: &DynamicObject,
    class: Option<&str>,
    prev: &ClusterSyncStatus,
    owner: &Owner<'_>,
) -> Result<Done, Fail> {
    let hold = |reason: Reason, message: String| decide::held(prev, reason, message, chrono::Utc::now());
    if is_paused(obj) {
        info!("Cluster is paused; nothing is written to it");
        return Ok(hold(Reason::Paused, "the Cluster is paused (spec.paused or cluster.x-k8s.io/paused); nothing is written".into()));
    }
    if sub.suspend {
        return Ok(hold(Reason::Suspended, format!("subscription {} is suspended (suspend: true); nothing is written", sub.name)));
    }
    if !control_plane_ready(&obj.data) {
        if sub.format == Format::ClusterStack {
            // Cluster API makes a topology Cluster's control plane from its ClusterClass: the
            // namespace's ClusterClasses go in before that control plane can ever be ready.
            let mut releases = kube.ctx.offered(sub).await.to_vec();
            let chosen = choose(kube, sub, class).await.ok();
            if let Some(rel) = &chosen
                && !releases.iter().any(|r| r.tag == rel.tag)
            {
                releases.push(rel.clone());
            }
            super::super::classes::ensure(kube, sub, &c.namespace, &releases).await;
            // A ClusterClass the management cluster refused (a webhook, a schema) is why this
            // control plane is not coming: the ClusterSync says so, naming the object, not
            // "not ready yet" (retried with backoff: a fixed webhook or release brings it).
            if let Some(rel) = &chosen
                && let Some(problem) = kube.classes.problem(&sub.name, &rel.tag, &c.namespace)
            {
                warn!(tag = %rel.tag, "the ClusterClass of the Cluster's release is not applied: {problem}");
                return Err(Fail::NotReady {
                    reason: Reason::NotSynced,
                    message: format!(
                        "the ClusterClass of release {} is not applied in namespace {}, so Cluster API cannot make this Cluster's control plane: {problem}",
                        rel.tag, c.namespace
                    ),
                });
            }
        }
        info!("control plane is not ready yet");
        return Err(Fail::ControlPlaneNotReady);
    }

    let rel = choose(kube, sub, class).await?;
    let mut prepared = kube.ctx.prepare(&rel).await.map_err(|source| Fail::Prepare { release: Box::new(rel.clone()), source })?;
    if prepared.unverified.is_none() {
        // The ClusterSync remembers what this Cluster runs when the cache does not; for a tag the
        // Cluster does not run yet, the release's StackRelease remembers it for the fleet.
        prepared.unverified = match prev.applied_release.as_ref().filter(|a| a.tag == rel.tag) {
            Some(a) => crate::controller::fetch::moved_since_applied(
                &rel.source,
                prepared.moved_tags_accepted,
                Some((a.tag.as_str(), a.commit.as_str())),
                &rel,
            ),
            None => kube.ledger.moved(&kube.mgmt, &sub.name, &rel, prepared.moved_tags_accepted).await.map_err(|e| Fail::NotReady {
                reason: Reason::TransientError,
                message: format!("cannot read what tag {} was recorded at (its StackRelease): {}", rel.tag, kube_error(&e)),
            })?,
        };
    }
    let rspan = info_span!("release", tag = %rel.tag, commit = %short(&rel.commit));
    apply_release(kube, key, sub, c, rel, prepared, prev, owner).instrument(rspan).await
}

/// Applies a prepared release to the Cluster: the doer of [`decide`]'s decisions (render, the
/// ClusterClasses, the workload client, the apply-started status, the upgrade stages, the
/// apply), and what is said about it.
#[allow(clippy::too_many_arguments)]
async fn apply_release(
    kube: &Kube,
    key: &ClusterKey,
    sub: &Subscription,
    c: &ClusterConfig,
    rel: Release,
    prepared: PreparedRelease,
    prev: &ClusterSyncStatus,
    owner: &Owner<'_>,
) -> Result<Done, Fail> {
    let started = std::time::Instant::now();
    let k = &kube.target();
    let label = format!("{}/{}", c.namespace, c.name);
    if let Some(m) = &prepared.unverified {
        // Accepted earlier, refused now (a moved tag, a pin that no longer matches): a person
        // must decide. Nothing is applied, nothing rolled back; the status says why.
        warn!(cluster = %label, reason = m.reason.as_str(), "{}", m.message);
        return Ok(decide::unverified_held(&rel, prev, m, chrono::Utc::now()));
    }
    // A rotation of what the charts generate renders anew and keeps nothing (`generated.rs`).
    let rotation = super::generated::rotation(prev, owner.rotate_requested.as_deref(), chrono::Utc::now());
    let Rendered { stages, warnings, generated, stand_ins } = stages::render(kube, key, sub, &prepared, c, prev, rotation.is_some())
        .await
        .map_err(|source| Fail::Stages { release: Box::new(rel.clone()), source })?;
    for w in &warnings {
        warn!(cluster = %label, "values template: {w}");
    }
    if sub.format == Format::ClusterStack {
        let mut releases = kube.ctx.offered(sub).await.to_vec();
        if !releases.iter().any(|r| r.tag == rel.tag) {
            releases.push(rel.clone());
        }
        super::super::classes::ensure(kube, sub, &c.namespace, &releases).await;
    }
    let super::workload::Workload { client, discovery } = match kube.workloads.get(&kube.mgmt, key, c, k.request_timeout).await {
        Ok(workload) => workload,
        Err(e) => {
            let message = e.to_string();
            if !super::workload::is_throttled(&e) && kube.warnings.worth(&(key.clone(), "client"), &message) {
                warn!("{message}");
            } else {
                debug!("{message} (unchanged since the last warning)");
            }
            return Err(Fail::Workload(e));
        }
    };
    let recorded = super::generated::recorded(&prev.generated, &generated);
    let mut before = decide::before(sub, prev, &rel, &stages, &recorded, chrono::Utc::now());
    if sub.format == crate::config::Format::ClusterStack
        && let Ok(helm) = kube.ctx.helm().await
    {
        before.rendered_by = format!("helm {}, {}", helm.version(), helm.kind());
    }
    if let Some(st) = before.progress.clone() {
        let syncs: Api<ClusterSync> = Api::namespaced(kube.mgmt.clone(), &c.namespace);
        // Retried a few times; when it cannot be written, nothing is applied this round: the
        // status must never claim the old release while the new one goes in.
        if let Err(e) = super::status::retried(|| super::status::write_progress(&syncs, sub, c, owner, st.clone())).await {
            if super::workload::is_throttled(&e) {
                // Said once for the whole server (`workload.rs`, `Throttle`), not once per Cluster and retry.
                debug!(error = %kube_error(&e), "cannot record that the apply of {} started (throttled); nothing is applied this round", rel.tag);
            } else {
                warn!(error = %kube_error(&e), "cannot record that the apply of {} started; nothing is applied this round", rel.tag);
            }
            return Err(Fail::Unrecorded { tag: rel.tag.clone(), source: e });
        }
    }
    let mut options = apply_options(k, sub, c);
    options.generated = recorded;
    options.rotate_generated = rotation.is_some();
    let upgraded = match &before.upgrade {
        // A release change runs the new release's upgrade stages first, a first install its
        // stages with waits one by one (`upgrade.rs`).
        decide::Upgrade::Advance => match super::upgrade::advance(kube, sub, c, &prepared, &client, options.clone(), prev).await {
            super::upgrade::Step::Done(u) => Some(u),
            super::upgrade::Step::NotNeeded => prev.upgrade.clone(),
            step => {
                let held = decide::upgrade_held(&rel, prev, step, chrono::Utc::now());
                info!("{}", held.verdict.message);
                return Ok(held);
            }
        },
        decide::Upgrade::Keep(u) => u.clone(),
    };
    // A stand-in render (`stages.rs`) is applied only where every generated field is live.
    options.generated_stand_ins = stand_ins;
    let applier = Applier::new(client, options).with_discovery(discovery);
    let mut result = applier.sync(&stages, &Inventory::from_lines(&prev.inventory)).await;
    if !result.stand_ins_refused.is_empty() {
        // Not all synced: the next sync renders for real (`stages.rs`).
        info!(
            cluster = %label,
            objects = result.stand_ins_refused.len(),
            "generated values recorded for this Cluster are not live (an object deleted?): its addons are rendered for real and applied at the next sync"
        );
    }
    let (generated, renewal) = (std::mem::take(&mut result.generated), result.renewal);
    let mut after = decide::after(sub, &prepared, prev, result, &warnings, before, upgraded, chrono::Utc::now())?;
    let done = &mut after.done;
    let complete = done.crd.total > 0 && done.crd.synced == done.crd.total;
    super::generated::record(&mut done.crd, prev, generated, renewal, rotation.as_ref(), complete, chrono::Utc::now());
    if let Some(r) = rotation.as_ref().filter(|_| complete) {
        info!(cluster = %label, reason = r.reason(), "rotated the values the charts generate");
        crate::telemetry::metrics().generated_rotated(r.reason());
    }
    if after.inventory_lost {
        warn!(
            cluster = %label,
            owner = %applier::ssa::owner_label_value(&owner_id(sub, c)),
            "the ClusterSync had no inventory but this release's objects were already in place: the inventory was lost; objects an earlier release dropped are not pruned (find them by the label stacksync.io/owner)"
        );
    }
    say(kube, key, &label, &after);
    let Done { verdict: st, crd, .. } = &after.done;
    // The one line per Cluster and pass at INFO (per-object lines are DEBUG): the release is
    // in the span, the counts by action and the time here.
    info!(ready = st.ready, duration_ms = started.elapsed().as_millis() as u64, "synced: {}", after.done.changes.summary());
    if sub.format == Format::Manifests {
        kube.ctx.adopt(sub, &rel).await;
        if kube.recorded.first(&sub.name, &rel) {
            let signed = (&prepared.assets[..], prepared.signed_by.as_deref());
            super::super::stackrelease::record_release(kube, sub, &rel, signed, true, None).await;
        }
    }
    if crd.entries_truncated > 0 {
        // A cap that changes what a user sees: said where the operator looks.
        warn!(
            cluster = %label,
            cap = crate::status::crd::MAX_ENTRIES,
            more = crd.entries_truncated,
            "the ClusterSync lists the first {} objects that are not synced; {} more are only counted (status.entriesTruncated)",
            crate::status::crd::MAX_ENTRIES,
            crd.entries_truncated
        );
    }
    Ok(after.done)
}

/// Says what drifted and which objects are not synced: at WARN when it changed, and once an
/// hour while it stays the same (at DEBUG on the resyncs in between): a failure every resync is
/// not a new line at the same level every ten minutes, forever.
fn say(kube: &Kube, key: &ClusterKey, label: &str, after: &decide::After) {
    let unsynced = || after.done.changes.entries.iter().filter(|e| !e.is_synced());
    // A server that throttles is said once for the server (`workload.rs`, `Throttle`): what failed meanwhile
    // at DEBUG, not a warning per Cluster and retry.
    let throttled = kube.throttled(key).is_some();
    if after.said.is_empty() {
        kube.warnings.cleared(&(key.clone(), "objects"));
    } else if !throttled && kube.warnings.worth(&(key.clone(), "objects"), &after.said) {
        for (object, fields) in &after.drifted {
            warn!(cluster = %label, object = %object, fields = %fields.join(", "), "drifted (driftMode: warn; not corrected)");
        }
        for e in unsynced() {
            warn!(cluster = %label, object = %e.object, "{}: {}", e.action, e.message);
        }
    } else {
        for (object, fields) in &after.drifted {
            debug!(cluster = %label, object = %object, fields = %fields.join(", "), "drifted (driftMode: warn; not corrected; unchanged since the last warning)");
        }
        for e in unsynced() {
            debug!(cluster = %label, object = %e.object, "{}: {} (unchanged since the last warning)", e.action, e.message);
        }
    }
}

/// How a Cluster's objects are applied (the sync and `stacksync diff` alike).
pub(in crate::targets::kubernetes) fn apply_options(k: &KubernetesTarget, sub: &Subscription, c: &ClusterConfig) -> ApplyOptions {
    ApplyOptions {
        owner: owner_id(sub, c),
        force: sub.force,
        drift: k.drift_mode,
        prune_limit: k.prune_limit,
        allow_empty_prune: k.allow_empty_prune,
        default_namespace: if sub.format == Format::ClusterStack { "kube-system".into() } else { "default".into() },
        adoption: AdoptionPolicy { take_back_from: k.take_back_from.clone() },
        request_timeout: k.request_timeout,
        // No `GET /version` first: the sync's first request is the reachability check.
        reach_within: Some(super::workload::REACHABLE_TIMEOUT),
        ..ApplyOptions::new(crate::model::manager::manager())
    }
}

/// The owner of the objects applied for one cluster and subscription (the applier makes it
/// label-safe).
fn owner_id(sub: &Subscription, c: &ClusterConfig) -> String {
    format!("{}.{}.{}", sub.name, c.namespace, c.name)
}

/// True when the Cluster's class names its release (the first arm of [`choose`], which must agree).
fn follows_class(sub: &Subscription, class: Option<&str>) -> bool {
    matches!((sub.format, &sub.stack, class), (Format::ClusterStack, Some(_), Some(_)))
}

/// The release a Cluster runs: for a cluster stack with a topology class, the release the class
/// names (it must be offered or still cached); otherwise the subscription's newest allowed.
pub(in crate::targets::kubernetes) async fn choose(kube: &Kube, sub: &Subscription, class: Option<&str>) -> Result<Release, Fail> {
    match (sub.format, sub.families(), class) {
        (Format::ClusterStack, Some(families), Some(class)) => {
            let tags = kube.ctx.tags(sub).await;
            match release::for_class(&sub.source, class, families, &tags.known) {
                Ok(rel) => Ok(rel),
                // The class names a release whose signature was refused: say so, not "unknown".
                Err(_) if let Some(r) = kube.ctx.signature_refusals(sub).await.remove(class) => {
                    warn!("the Cluster's class names {class}: {}; what the Cluster has stays", r.message);
                    Err(Fail::ClassRefused { message: r.message })
                }
                Err(e) => {
                    warn!("{e}; what the Cluster has stays");
                    Err(Fail::ClassUnknown(e))
                }
            }
        }
        _ => match kube.ctx.select(sub).await {
            Ok(s) => Ok(s.release),
            // Nothing matches until a source offers another tag or the config another
            // constraint: both bring the Cluster back (Stalled meanwhile).
            Err(e) => Err(Fail::Select(e)),
        },
    }
}

/// When to retry a failed reconcile: jittered exponential backoff per Cluster for what may pass
/// by itself, the resync period for what needs a change (then Stalled); never before an API
/// server the reconcile talks to said it may be asked again (`Retry-After`, plus a little
/// jitter so the Clusters it held do not all come back at once).
pub(in crate::targets::kubernetes) fn retry_after(kube: &Kube, key: &ClusterKey, error: &Error) -> Duration {
    let attempt = kube.attempts.failed(key);
    let after = if error.is_transient() { crate::schedule::jittered(crate::schedule::backoff(attempt)) } else { kube.target().resync };
    match kube.throttled(key) {
        Some(wait) => after.max(wait + crate::schedule::jittered(wait / 4)),
        None => after,
    }
}

/// The ClusterSync of a Cluster that is gone, and what is kept for it, are removed. The
/// ownerReference does the same on a real API server; this covers servers without garbage
/// collection and Clusters deleted while stacksync was not running.
pub(in crate::targets::kubernetes) async fn forget(kube: &Kube, key: &ClusterKey) {
    kube.forget(key);
    let syncs: Api<ClusterSync> = Api::namespaced(kube.mgmt.clone(), &key.namespace);
    match syncs.delete(&key.name, &Default::default()).await {
        Ok(_) => info!(cluster = %key, "Cluster deleted; its ClusterSync is removed"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => warn!(cluster = %key, error = %kube_error(&e), "cannot remove the ClusterSync of a deleted Cluster"),
    }
}

/// Whether an object is a Cluster API Cluster this process may care about (has a name).
pub(in crate::targets::kubernetes) fn key_of(obj: &DynamicObject) -> Option<ClusterKey> {
    Some(ClusterKey::new(obj.metadata.namespace.clone()?, obj.metadata.name.clone()?))
}
