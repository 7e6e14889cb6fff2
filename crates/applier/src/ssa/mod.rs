//! The Kubernetes target of the apply stage: server-side apply of rendered objects under one field
//! manager, stage by stage in a fixed order, writing only on drift, then pruning what the release
//! dropped. Semantics for users: docs/apply.md.

mod adopt;
mod answer;
#[cfg(test)]
mod arbitrary;
mod desired;
mod diff;
mod discovery;
mod error;
mod generated;
mod inventory;
mod listing;
mod manager;
mod object;
mod preview;
pub mod unified;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use adopt::{Adopted, Adoption, Generated, Verdict, leaves};
pub use diff::describe as describe_paths;
pub use discovery::Discovery;
pub use error::Error;
pub use generated::{
    Recorded as GeneratedFields, Validity, differing as generated_fields, parse as parse_generated, without as without_generated,
};
pub use inventory::{Inventory, InventoryEntry, ParseEntryError};
pub use manager::{AdoptionPolicy, Manager};
pub use preview::{Planned, PlannedChange, Preview};

use discovery::{DiscoveryCache, Unresolved};
use inventory::{Key, PruneLimits, PrunePlan};
use listing::{Listings, Scopes};
use object::{Deletion, Outcome, Policy, Target};

use crate::Object;
use crate::health::Health;
use crate::names;
use crate::{Action, ChangeSet, Entry, ObjectRef, SkipReason, order};

pub use crate::{DriftMode, StageAction};

/// One stage of a sync (a cluster-addon stage, or the ClusterClass objects); stages run in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stage {
    /// Its name, for messages and the change set's entries.
    pub name: String,
    /// Whether its objects are applied or deleted.
    pub action: StageAction,
    /// The stage's objects, in any order (the applier sorts them).
    pub objects: Vec<Object>,
}

/// How an [`Applier`] applies: whose objects they are, what it may take back, prune and wait for.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Who applies: the field manager, and the prefix of the owner label and the annotations.
    pub manager: Manager,
    /// Who the applied objects belong to (e.g. `<subscription>.<namespace>.<cluster>`); any
    /// string, made label-safe by [`owner_label_value`].
    pub owner: String,
    /// Namespace of namespaced objects whose manifest names none.
    pub default_namespace: String,
    /// Take ownership of conflicting fields for every object.
    pub force: bool,
    /// Whether a live object that differs from an unchanged manifest is corrected or only reported.
    pub drift: DriftMode,
    /// Whether objects of the previous inventory this sync did not apply are deleted.
    pub prune: bool,
    /// More deletions than this in one pass pause pruning.
    pub prune_limit: usize,
    /// Prune even when no Apply stage has any object.
    pub allow_empty_prune: bool,
    /// Objects of one rank applied at once.
    pub concurrency: usize,
    /// How long a CRD may take to become Established.
    pub crd_wait: Duration,
    /// How long a deleted object may take to go away before it is re-created.
    pub delete_wait: Duration,
    /// How long one API request may take, the client's own retries of 429/503/504 included;
    /// then the object is Failed and the next sync tries again.
    pub request_timeout: Duration,
    /// Which other field managers' changes to our fields are taken back.
    pub adoption: AdoptionPolicy,
    /// The sync's first request doubles as the check that the cluster answers at all: it gets
    /// this deadline, and when it gets no answer (refused, timed out, broken off) nothing more is
    /// sent — every object not done yet fails as unreachable, nothing is pruned, and
    /// [`SyncResult::unreachable`] says why. `None`: no such check.
    pub reach_within: Option<Duration>,
    /// Fields the charts generate at render time, whose live values every apply keeps
    /// (`ClusterSync.status.generated`: found by rendering twice, or recorded by
    /// [`Applier::adopt`]; `generated.rs`).
    pub generated: generated::Recorded,
    /// Rotate them: this sync applies the rendered values where it would keep the live ones
    /// (the fields stay recorded, left out of the digest, their certificates' renewal reported).
    pub rotate_generated: bool,
    /// The render holds stand-ins where its charts generate (a probe: no key made; how stacksync
    /// renders a Cluster whose ClusterSync records what is generated, after a restart on an
    /// empty cache). Every generated field must then get its live value: an object with a
    /// generated field that has none (absent, created, re-created, rotated) is not applied, it
    /// fails as transient and is listed in [`SyncResult::stand_ins_refused`], for the caller to
    /// render for real.
    pub generated_stand_ins: bool,
}

pub use crate::HAND_MANAGERS;

impl ApplyOptions {
    /// The options of an applier writing as `manager`, every other option its default: no
    /// owner, namespace `default`, drift corrected, pruning on (50 at most), 8 objects at once,
    /// 30 s for a CRD and a request, 60 s for a deletion, hand edits taken back.
    pub fn new(manager: Manager) -> ApplyOptions {
        ApplyOptions {
            manager,
            owner: String::new(),
            default_namespace: "default".into(),
            force: false,
            drift: DriftMode::Correct,
            prune: true,
            prune_limit: 50,
            allow_empty_prune: false,
            concurrency: 8,
            crd_wait: Duration::from_secs(30),
            delete_wait: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            adoption: AdoptionPolicy::default(),
            reach_within: None,
            generated: generated::Recorded::new(),
            rotate_generated: false,
            generated_stand_ins: false,
        }
    }
}

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncResult {
    /// One entry per object of the stages (in apply order, stage by stage), then one per pruned
    /// or not-pruned object.
    pub changes: ChangeSet,
    /// Pass it as `previous` to the next sync: every object of the Apply stages (failed ones
    /// too, so a failure never leads to a prune), plus prune candidates that were kept (pruning
    /// paused or disabled, deletion failed). A Failed object keeps the digest it was last
    /// applied with, so the next sync still tells its release change from drift.
    pub inventory: Inventory,
    /// Objects whose live state differed from an unchanged manifest, with the field paths:
    /// corrected in [`DriftMode::Correct`], only reported in [`DriftMode::Warn`].
    pub drifted: Vec<(ObjectRef, Vec<String>)>,
    /// Set when pruning was paused (prune limit, empty render): why, and nothing was deleted.
    pub prune_paused: Option<String>,
    /// Applied objects that are not healthy yet (or failed), by kstatus rules, in apply order.
    pub unhealthy: Vec<(ObjectRef, Health)>,
    /// Objects that failed for a reason that may pass by itself (timeout, 5xx, 429,
    /// connection): a sync failing only on these is retried, not stalled.
    pub transient: Vec<ObjectRef>,
    /// With [`ApplyOptions::reach_within`]: the cluster did not answer the first request, and
    /// why. Nothing else was sent.
    pub unreachable: Option<String>,
    /// The generated fields of the objects of the Apply stages (their live values kept), one
    /// `group|kind|namespace|name|pointer` line each, the namespace as the object lives: what
    /// `ClusterSync.status.generated` records.
    pub generated: Vec<String>,
    /// The soonest renewal among the generated certificates this sync saw live or sent.
    pub renewal: Option<generated::Validity>,
    /// With [`ApplyOptions::generated_stand_ins`]: objects not applied because a generated field
    /// had no live value to keep (render them for real).
    pub stand_ins_refused: Vec<ObjectRef>,
}

/// Applies stages of objects to one cluster. Cheap to clone the client into; one per
/// (cluster, owner).
pub struct Applier {
    client: Client,
    options: ApplyOptions,
    owner_value: String,
    /// Kinds resolved by earlier syncs of the same cluster ([`Applier::with_discovery`]).
    discovery: Discovery,
    /// Whether the cluster answers ([`ApplyOptions::reach_within`]), shared with discovery.
    reach: Arc<Reach>,
}

/// The first request of a sync as the check that the cluster answers at all
/// ([`ApplyOptions::reach_within`]): discovery, a listing or an object's request, whichever
/// goes first.
pub(super) struct Reach {
    within: Option<Duration>,
    /// A request got an answer from the server (any status).
    answered: std::sync::atomic::AtomicBool,
    /// The first request got none: why.
    down: std::sync::OnceLock<String>,
}

impl Reach {
    fn new(within: Option<Duration>) -> Reach {
        Reach { within, answered: std::sync::atomic::AtomicBool::new(false), down: std::sync::OnceLock::new() }
    }

    pub(super) fn down(&self) -> Option<&String> {
        self.down.get()
    }

    /// Sends `request` — not at all once the cluster was found not to answer; with the check's
    /// deadline while no request was answered yet.
    pub(super) async fn send<T>(&self, request: impl Future<Output = kube::Result<T>>) -> kube::Result<T> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(why) = self.down.get() {
            return Err(kube::Error::Service(why.clone().into()));
        }
        let Some(within) = self.within.filter(|_| !self.answered.load(Relaxed)) else {
            let answer = request.await;
            // A server that answered and then stops taking connections (killed, restarting)
            // fails every request left the same way: one message for the cluster, not one per
            // object, and nothing more sent this sync.
            if let Err(e) = &answer
                && refused_connection(e)
            {
                let _ = self.down.set(format!("the workload cluster's API server stopped answering: {}", with_causes(e)));
            }
            return answer;
        };
        match tokio::time::timeout(within, request).await {
            Ok(Err(e @ (kube::Error::HyperError(_) | kube::Error::Service(_)))) => {
                let _ = self.down.set(format!("the workload cluster's API server does not answer: {}", with_causes(&e)));
                Err(e)
            }
            // Every request would be refused the same way: one message for the Cluster, not
            // one per object.
            Ok(Err(kube::Error::Api(s))) if s.code == 401 => {
                let _ = self.down.set(format!(
                    "the workload cluster refused the credentials of its kubeconfig Secret ({} 401): its client certificate or token is invalid or expired",
                    s.message
                ));
                Err(kube::Error::Api(s))
            }
            Ok(answer) => {
                self.answered.store(true, Relaxed);
                answer
            }
            Err(_) => {
                let why = format!("the workload cluster's API server did not answer within {}s", within.as_secs());
                let _ = self.down.set(why.clone());
                Err(kube::Error::Service(why.into()))
            }
        }
    }
}

/// Whether a request failed because no connection to the server could be made (refused,
/// unreachable, timed out while connecting): not an answer, and not one request's bad luck on a
/// pooled connection.
fn refused_connection(e: &kube::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(hyper_util::client::legacy::Error::is_connect) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The I/O deadline of the clients' requests (`target.kubernetes.requestTimeout`), in
/// milliseconds; 0 until [`set_request_timeout`]. Process-wide: a request cut by its deadline
/// fails with a bare `TimedOut` that does not carry it, and every client is built from the one
/// setting.
static REQUEST_TIMEOUT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Records the request timeout the clients are built with, so [`with_causes`] says its value.
pub fn set_request_timeout(timeout: Duration) {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    REQUEST_TIMEOUT_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// What a request cut by its I/O deadline says of that deadline: its value and the setting.
fn deadline_said() -> String {
    match REQUEST_TIMEOUT_MS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => "no answer within the request timeout, `target.kubernetes.requestTimeout`".to_owned(),
        ms if ms % 1000 == 0 => format!("no answer within {}s, `target.kubernetes.requestTimeout`", ms / 1000),
        ms => format!("no answer within {ms}ms, `target.kubernetes.requestTimeout`"),
    }
}

/// An error with its causes ("error sending request" alone says nothing). A request cut by
/// its I/O deadline says which deadline that was (a bare "connection error: timed out" does
/// not say how long, or where to change it).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut timed_out = false;
    let mut cause = Some(e);
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        timed_out |= c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
        cause = c.source();
    }
    if timed_out {
        text.push_str(&format!(" ({})", deadline_said()));
    }
    text
}

/// Accumulates one sync.
struct Run {
    cache: DiscoveryCache,
    result: SyncResult,
    /// Inventory keys already recorded (`InventoryEntry` with an empty version and digest).
    recorded: HashSet<InventoryEntry>,
    /// Objects of delete stages: never prune candidates.
    deleted: Vec<InventoryEntry>,
    /// Our objects per kind, listed once per sync (`listing.rs`).
    listings: Listings,
}

impl Run {
    fn record(&mut self, entry: InventoryEntry) {
        if self.recorded.insert(key_only(&entry)) {
            self.result.inventory.entries.push(entry);
        }
    }

    /// Records prune candidates that stay, in the order `previous` had them.
    fn keep(&mut self, previous: &Inventory, candidates: &[&InventoryEntry]) {
        let keep: HashSet<Key<'_>> = candidates.iter().map(|e| e.key()).collect();
        for e in previous.entries.iter().filter(|e| keep.contains(&e.key())) {
            self.record(e.clone());
        }
    }

    fn push(&mut self, outcome: Outcome) {
        if let Some(r) = outcome.renewal
            && self.result.renewal.is_none_or(|s| r.renew_at() < s.renew_at())
        {
            self.result.renewal = Some(r);
        }
        if let Some(h) = outcome.health.filter(|h| !h.is_healthy()) {
            self.result.unhealthy.push((outcome.entry.object.clone(), h));
        }
        if outcome.stand_ins_refused {
            self.result.stand_ins_refused.push(outcome.entry.object.clone());
        }
        if outcome.transient {
            self.result.transient.push(outcome.entry.object.clone());
        }
        if let Some(paths) = outcome.drifted {
            self.result.drifted.push((outcome.entry.object.clone(), paths));
        }
        self.result.changes.entries.push(outcome.entry);
    }
}

impl Applier {
    /// An applier over one cluster's `client`; nothing is sent until a sync.
    pub fn new(client: Client, options: ApplyOptions) -> Applier {
        let owner_value = owner_label_value(&options.owner);
        Applier { client, owner_value, discovery: Discovery::default(), reach: Arc::new(Reach::new(options.reach_within)), options }
    }

    /// Shares what discovery found with every other applier given the same handle: pass the
    /// cluster's one [`Discovery`] (kept beside its client), and an unchanged resync makes no
    /// discovery request. Without it, each applier asks on its own.
    #[must_use]
    pub fn with_discovery(self, discovery: Discovery) -> Applier {
        Applier { discovery, ..self }
    }

    fn discovery_cache(&self) -> DiscoveryCache {
        DiscoveryCache::new(self.client.clone(), self.discovery.clone(), self.options.request_timeout, self.options.crd_wait)
            .with_reach(self.reach.clone())
    }

    /// The options it was built with.
    pub fn options(&self) -> &ApplyOptions {
        &self.options
    }

    /// Applies `stages` in order, then prunes what `previous` holds and this sync did not apply.
    ///
    /// Per stage: CRDs (waited for until Established) and Namespaces first, then the other
    /// kinds rank by rank (`apply::order`), up to `concurrency` objects of a rank at once;
    /// objects of a Delete stage are deleted in reverse order. Never fails as a whole: every
    /// object gets its entry, a failed one never stops the others, and the returned inventory
    /// is safe to pass to the next sync whatever happened.
    ///
    /// Idempotent: a second sync of the same stages makes no writes; objects whose manifest and
    /// whose fields of ours did not change since the previous sync cost one LIST per kind in all
    /// (`listing.rs`), the others a read and a dry-run each.
    /// Cancellation: dropping the future may leave some objects applied and others not; the
    /// next sync with the same `previous` completes the work (nothing is pruned that it would
    /// not have pruned).
    pub async fn sync(&self, stages: &[Stage], previous: &Inventory) -> SyncResult {
        let mut run = Run {
            cache: self.discovery_cache(),
            result: SyncResult::default(),
            recorded: HashSet::new(),
            deleted: Vec::new(),
            listings: Listings::default(),
        };
        let digests = digests(previous);
        let mut scopes: Scopes<'_> = HashMap::new();
        for e in &previous.entries {
            let ns = e.namespace.as_deref();
            scopes.entry((e.group.as_str(), e.kind.as_str())).and_modify(|s| *s = s.filter(|s| Some(*s) == ns)).or_insert(ns);
        }
        for stage in stages {
            match stage.action {
                StageAction::Apply => self.apply_stage(stage, &digests, &scopes, &mut run).await,
                StageAction::Delete => self.delete_stage(stage, &digests, &mut run).await,
            }
        }
        let rendered_any = stages.iter().any(|s| s.action == StageAction::Apply && !s.objects.is_empty());
        match self.reach.down() {
            // Nobody answers: what the previous sync had stays recorded, nothing is pruned.
            Some(why) => {
                let all: Vec<&InventoryEntry> = previous.entries.iter().collect();
                run.keep(previous, &all);
                run.result.unreachable = Some(why.clone());
            }
            None => self.prune(previous, rendered_any, &mut run).await,
        }
        tracing::debug!(summary = %run.result.changes.summary(), "sync done");
        run.result
    }

    async fn apply_stage(&self, stage: &Stage, previous: &Digests<'_>, scopes: &Scopes<'_>, run: &mut Run) {
        // `order::compare`'s order, each object's rank looked up once (not in every comparison).
        let mut ranked: Vec<(usize, &Object)> = stage.objects.iter().map(|o| (order::rank(o), o)).collect();
        ranked.sort_by(|(ra, a), (rb, b)| {
            ra.cmp(rb).then_with(|| {
                (a.group(), &a.kind, a.namespace.as_deref(), &a.name).cmp(&(b.group(), &b.kind, b.namespace.as_deref(), &b.name))
            })
        });
        let objects: Vec<&Object> = ranked.iter().map(|(_, o)| *o).collect();
        let ranks: Vec<usize> = ranked.iter().map(|(r, _)| *r).collect();
        let mut at = 0;
        for same in ranks.chunk_by(|a, b| a == b) {
            let rank = &objects[at..at + same.len()];
            at += same.len();
            let (mut entries, mut slots) = (Vec::with_capacity(rank.len()), Vec::with_capacity(rank.len()));
            for o in rank {
                let (entry, slot) = self.prepare(o, stage, previous, &mut run.cache).await;
                entries.push(entry);
                slots.push(slot);
            }
            let targets: Vec<&Target<'_>> = slots.iter().filter_map(|s| s.as_ref().ok()).collect();
            self.list_kinds(&targets, scopes, &mut run.listings).await;
            let listings = &run.listings;
            let down = self.reach.down();
            let outcomes: Vec<Outcome> = futures_util::stream::iter(
                slots
                    .iter()
                    .map(|slot| {
                        // Boxed futures from a plain closure (not an async closure): the sync future stays
                        // provably `Send`, so callers may spawn it (kube-runtime's Controller does).
                        async move {
                            match slot {
                                // The cluster did not answer the first request: nothing is sent.
                                Ok(t) if let Some(why) = down => {
                                    Outcome { transient: true, ..Outcome::new(&t.entry, Action::Failed, why.clone()) }
                                }
                                Ok(t) => match self.decided_by_listing(t, listings) {
                                    Some(outcome) => outcome,
                                    None => {
                                        let outcome = self.apply_one(t, self.absent_from_listing(t, listings)).await;
                                        self.establish(t, outcome).await
                                    }
                                },
                                Err(not) => Outcome::new(&not.entry, not.entry.action, not.entry.message.clone()),
                            }
                        }
                        .boxed()
                    })
                    .collect::<Vec<BoxFuture<'_, _>>>(),
            )
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await;
            for t in slots.iter().filter_map(|s| s.as_ref().ok()) {
                run.result.generated.extend(t.generated.iter().map(|p| generated::line(&t.inventory, p)));
            }
            for (o, outcome) in rank.iter().zip(&outcomes) {
                if is_crd(o.group(), &o.kind) && outcome.entry.action.is_synced() {
                    let kind = crate::health::at(&o.body, "/spec/names/kind").and_then(Value::as_str).unwrap_or_default();
                    served_versions(&o.body).for_each(|v| run.cache.expect(v, kind.to_string()));
                }
                if is_crd(o.group(), &o.kind) && matches!(outcome.entry.action, Action::Created | Action::Configured) {
                    // Written: what its group serves may have changed for later syncs too.
                    let group = crate::health::at(&o.body, "/spec/group").and_then(Value::as_str).unwrap_or_default();
                    self.discovery.forget_group(group);
                }
            }
            for (mut entry, outcome) in entries.into_iter().zip(outcomes) {
                if outcome.entry.action == Action::Failed {
                    // Not applied: keep the digest that was, so the next sync still sees a
                    // release change as one (and not as drift).
                    // Nor did it change the object: the fields recorded for it still hold.
                    let (digest, fields) = previous.get(&entry.key()).copied().unwrap_or_default();
                    (entry.digest, entry.fields) = (digest.to_string(), fields.to_string());
                } else {
                    // Only an object now as our apply made it may be decided by a listing next time.
                    entry.fields = outcome.fields.clone().unwrap_or_default();
                }
                run.record(entry);
                run.push(outcome);
            }
            if rank.iter().any(|o| is_crd(o.group(), &o.kind)) {
                run.cache.refresh();
            }
        }
    }

    /// A CRD is only in place once Established: until then its kinds are not served.
    async fn establish(&self, t: &Target<'_>, outcome: Outcome) -> Outcome {
        if !is_crd(t.object.group(), &t.object.kind) || !outcome.entry.action.is_synced() {
            return outcome;
        }
        match self.await_established(t).await {
            Ok(()) => outcome,
            Err(e) => Outcome::new(&outcome.entry, Action::Failed, e.message(&self.options.manager)),
        }
    }

    async fn delete_stage(&self, stage: &Stage, previous: &Digests<'_>, run: &mut Run) {
        let mut objects: Vec<&Object> = stage.objects.iter().collect();
        objects.sort_by(|a, b| order::compare(b, a));
        for rank in objects.chunk_by(|a, b| order::rank(a) == order::rank(b)) {
            let mut slots = Vec::with_capacity(rank.len());
            for o in rank {
                let (entry, slot) = self.prepare(o, stage, previous, &mut run.cache).await;
                run.deleted.push(entry);
                slots.push(slot);
            }
            let outcomes: Vec<Outcome> = futures_util::stream::iter(
                slots
                    .iter()
                    .map(|slot| {
                        async move {
                            match slot {
                                Ok(t) => match self.delete_owned(&t.api(&self.client), &t.object.name, &t.entry.object).await {
                                    Ok(Deletion::Absent) => Outcome::new(&t.entry, Action::Unchanged, "absent"),
                                    Ok(Deletion::NotOurs(label)) => Outcome::new(
                                        &t.entry,
                                        Action::Skipped(SkipReason::NotOurs),
                                        not_ours(self.options.manager.owner_label(), label.as_deref()),
                                    ),
                                    Ok(Deletion::Deleted) => Outcome::new(&t.entry, Action::Pruned, "deleted by a delete stage"),
                                    Err(e) => Outcome::new(&t.entry, Action::Failed, e.message(&self.options.manager)),
                                },
                                // A kind the server does not serve has no objects left to delete.
                                Err(not) if not.kind_not_served => Outcome::new(&not.entry, Action::Unchanged, "absent"),
                                Err(not) => Outcome::new(&not.entry, not.entry.action, not.entry.message.clone()),
                            }
                        }
                        .boxed()
                    })
                    .collect::<Vec<BoxFuture<'_, _>>>(),
            )
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await;
            outcomes.into_iter().for_each(|o| run.push(o));
        }
    }

    /// Resolves an object's kind and namespace and builds what the requests send. Returns its
    /// inventory entry either way, and the entry to report when there is nothing to send.
    async fn prepare<'a>(
        &self,
        o: &'a Object,
        stage: &Stage,
        previous: &Digests<'_>,
        cache: &mut DiscoveryCache,
    ) -> (InventoryEntry, Result<Target<'a>, NotPrepared>) {
        let mut entry = Entry::for_object(o, Action::Failed, String::new());
        if entry.stage.is_none() && !stage.name.is_empty() {
            entry.stage = Some(stage.name.clone());
        }
        let version = o.api_version.rsplit_once('/').map_or(o.api_version.as_str(), |(_, v)| v);
        let mut inventory = InventoryEntry {
            group: o.group().to_string(),
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
            version: version.to_string(),
            digest: String::new(),
            fields: String::new(),
        };
        // Before anything is sent: kube builds request URLs from these as they are.
        if let Err(message) = names::check(&o.kind, o.namespace.as_deref(), &o.name) {
            return (inventory, Err(NotPrepared::new(Entry { message: format!("{message}; nothing was sent"), ..entry })));
        }
        let annotation = |key: &str| crate::health::at(&o.body, "/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str);
        let manager = &self.options.manager;
        let policy = match annotation(manager.policy_annotation()).unwrap_or("apply") {
            "apply" => Ok(Policy::Apply),
            "apply-once" => Ok(Policy::ApplyOnce),
            "ignore" => Ok(Policy::Ignore),
            other => Err(format!("unknown {} \"{other}\" (apply, apply-once or ignore)", manager.policy_annotation())),
        };
        let ignored = |entry: Entry| {
            NotPrepared::new(Entry {
                action: Action::Skipped(SkipReason::Ignored),
                message: crate::changeset::SKIPPED_IGNORE.into(),
                ..entry
            })
        };
        let resolved = match stage.action {
            StageAction::Apply => cache.resolve(&o.api_version, &o.kind).await,
            // What is to be deleted may still be served at another version only.
            StageAction::Delete => cache.resolve_any_version(&o.api_version, &o.kind).await,
        };
        if resolved.is_err() {
            // Without discovery nobody knows whether the kind is namespaced: keep the identity
            // the previous sync recorded. Another key would make the recorded one a prune
            // candidate, and a transient discovery error would delete the live object.
            let default = o.namespace.clone().or_else(|| Some(self.options.default_namespace.clone()));
            let recorded = [default, None].into_iter().find(|ns| previous.contains_key(&(o.group(), &o.kind, ns.as_deref(), &o.name)));
            if let Some(namespace) = recorded {
                entry.object.namespace = namespace.clone();
                inventory.namespace = namespace;
            }
        }
        let resolved = match resolved {
            Ok(r) => r,
            Err(_) if policy == Ok(Policy::Ignore) => return (inventory, Err(ignored(entry))),
            Err(Unresolved::NoMatch(message)) => {
                return (inventory, Err(NotPrepared { entry: Entry { message, ..entry }, kind_not_served: true }));
            }
            Err(Unresolved::Failed(message)) => return (inventory, Err(NotPrepared::new(Entry { message, ..entry }))),
        };
        let namespace = resolved.namespaced.then(|| o.namespace.clone().unwrap_or_else(|| self.options.default_namespace.clone()));
        entry.object.namespace = namespace.clone();
        inventory.namespace = namespace.clone();
        let policy = match policy {
            Ok(Policy::Ignore) => return (inventory, Err(ignored(entry))),
            Ok(policy) => policy,
            Err(message) => return (inventory, Err(NotPrepared::new(Entry { message, ..entry }))),
        };
        let desired = desired::Desired {
            body: &o.body,
            namespace: namespace.as_deref(),
            label: self.options.manager.owner_label(),
            owner: &self.owner_value,
        };
        let body = serde_json::to_vec(&desired).unwrap_or_default();
        let generated = generated::of(&self.options.generated, &inventory, &self.options.default_namespace).to_vec();
        // A generated value is not part of what the manifest asks for: a render with new random
        // values (a restart, another replica) is the same manifest.
        inventory.digest = if generated.is_empty() {
            digest(&body)
        } else {
            let without = desired::Desired { body: &generated::without(&o.body, &generated), ..desired };
            digest(&serde_json::to_vec(&without).unwrap_or_default())
        };
        let previous_digest = previous.get(&inventory.key()).map(|(d, _)| (*d).to_string());
        let previous_fields = previous.get(&inventory.key()).map(|(_, f)| (*f).to_string());
        let target = Target {
            object: o,
            entry,
            resource: resolved.resource,
            body,
            force: self.options.force || annotation(manager.force_annotation()) == Some("true"),
            recreate: annotation(manager.recreate_annotation()) == Some("true"),
            inventory: inventory.clone(),
            policy,
            previous_digest,
            previous_fields,
            generated,
        };
        (inventory, Ok(target))
    }

    /// The manifest as sent: the namespace it lives in (none for cluster-scoped kinds) and our
    /// owner label.
    fn desired_body(&self, body: &Value, namespace: Option<&str>) -> Value {
        let mut body = body.clone();
        if !body.is_object() {
            return body;
        }
        let meta = body.as_object_mut().map(|b| b.entry("metadata").or_insert_with(|| Value::Object(Default::default())));
        if let Some(Value::Object(meta)) = meta {
            match namespace {
                Some(ns) => {
                    meta.insert("namespace".into(), Value::String(ns.into()));
                }
                None => {
                    meta.remove("namespace");
                }
            }
            let labels = meta.entry("labels").or_insert_with(|| Value::Object(Default::default()));
            if !labels.is_object() {
                *labels = Value::Object(Default::default());
            }
            if let Value::Object(labels) = labels {
                labels.insert(self.options.manager.owner_label().into(), Value::String(self.owner_value.clone()));
            }
        }
        body
    }

    async fn prune(&self, previous: &Inventory, rendered_any: bool, run: &mut Run) {
        let limits = PruneLimits {
            enabled: self.options.prune,
            limit: self.options.prune_limit,
            allow_empty: self.options.allow_empty_prune,
            rendered_any,
        };
        let excluded: Vec<_> = run.deleted.iter().map(InventoryEntry::key).collect();
        let candidates = match inventory::plan(previous, &run.result.inventory, &excluded, limits) {
            PrunePlan::Nothing => return,
            PrunePlan::Disabled(keep) => return run.keep(previous, &keep),
            PrunePlan::Paused { candidates, reason } => {
                tracing::warn!(candidates = candidates.len(), %reason, "pruning paused");
                run.result.prune_paused = Some(reason);
                return run.keep(previous, &candidates);
            }
            PrunePlan::Delete(candidates) => candidates,
        };
        let mut keep = Vec::new();
        for rank in candidates.chunk_by(|a, b| order::rank_of(&a.group, &a.kind) == order::rank_of(&b.group, &b.kind)) {
            let mut slots = Vec::with_capacity(rank.len());
            for e in rank {
                slots.push((*e, run.cache.resolve_any_version(&e.api_version(), &e.kind).await));
            }
            let outcomes: Vec<(&InventoryEntry, Option<Entry>, bool)> = futures_util::stream::iter(
                slots
                    .iter()
                    .map(|(e, resolved)| {
                        async move {
                            let (entry, keep) = self.prune_one(e, resolved).await;
                            (*e, entry, keep)
                        }
                        .boxed()
                    })
                    .collect::<Vec<BoxFuture<'_, _>>>(),
            )
            .buffered(self.options.concurrency.max(1))
            .collect()
            .await;
            for (e, entry, kept) in outcomes {
                if kept {
                    keep.push(e);
                }
                run.result.changes.entries.extend(entry);
            }
        }
        run.keep(previous, &keep);
    }

    /// Deletes one object the release dropped. Returns its entry (none when it is already gone)
    /// and whether the inventory must keep it (to try again next time).
    async fn prune_one(&self, e: &InventoryEntry, resolved: &Result<discovery::Resolved, Unresolved>) -> (Option<Entry>, bool) {
        let entry =
            |action, message: String| Entry { object: e.object_ref(), action, message, file: String::new(), chart: None, stage: None };
        // An inventory is data read back from the cluster: its names are checked like manifests'.
        if let Err(message) = names::check(&e.kind, e.namespace.as_deref(), &e.name) {
            return (Some(entry(Action::Failed, format!("{message}; not pruned"))), false);
        }
        let resource = match resolved {
            Ok(r) => &r.resource,
            // No version of its group serves the kind any more, so neither is the object.
            Err(Unresolved::NoMatch(_)) => return (None, false),
            Err(Unresolved::Failed(m)) => return (Some(entry(Action::Failed, m.clone())), true),
        };
        let api: Api<DynamicObject> = match &e.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &**resource),
            None => Api::all_with(self.client.clone(), &**resource),
        };
        match self.delete_owned(&api, &e.name, &e.object_ref()).await {
            Ok(Deletion::Absent) => (None, false),
            Ok(Deletion::NotOurs(label)) => {
                (Some(entry(Action::Skipped(SkipReason::NotOurs), not_ours(self.options.manager.owner_label(), label.as_deref()))), false)
            }
            Ok(Deletion::Deleted) => (Some(entry(Action::Pruned, String::new())), false),
            Err(err) => (Some(entry(Action::Failed, err.message(&self.options.manager))), true),
        }
    }
}

/// The previous inventory's manifest digests and hashes of our fields, by object.
type Digests<'a> = HashMap<Key<'a>, (&'a str, &'a str)>;

fn digests(previous: &Inventory) -> Digests<'_> {
    previous.entries.iter().map(|e| (e.key(), (e.digest.as_str(), e.fields.as_str()))).collect()
}

/// An object with nothing to send: its entry says why (Failed, or Skipped for `ignore`).
struct NotPrepared {
    entry: Entry,
    /// The server does not serve its kind (so, for a delete, it is already gone).
    kind_not_served: bool,
}

impl NotPrepared {
    fn new(entry: Entry) -> NotPrepared {
        NotPrepared { entry, kind_not_served: false }
    }
}

fn is_crd(group: &str, kind: &str) -> bool {
    (group, kind) == ("apiextensions.k8s.io", "CustomResourceDefinition")
}

/// The `apiVersion`s a CRD manifest serves (`group/name` of each served version).
fn served_versions(crd: &Value) -> impl Iterator<Item = String> + '_ {
    let group = crate::health::at(crd, "/spec/group").and_then(Value::as_str).unwrap_or_default();
    let versions = crate::health::at(crd, "/spec/versions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(move |v| v["name"].as_str().map(|name| format!("{group}/{name}")))
}

fn not_ours(owner_label: &str, label: Option<&str>) -> String {
    match label {
        Some(v) => format!("not ours: {owner_label} is \"{v}\""),
        None => format!("not ours: no {owner_label} label"),
    }
}

fn key_only(e: &InventoryEntry) -> InventoryEntry {
    InventoryEntry { version: String::new(), digest: String::new(), fields: String::new(), ..e.clone() }
}

/// 16 hex digits of the sha256 of the manifest as sent.
fn digest(body: &[u8]) -> String {
    hex::encode(&Sha256::digest(body)[..8])
}

/// The owner as a label value: itself when it is one (at most 63 characters of `[A-Za-z0-9._-]`,
/// alphanumeric at both ends), otherwise a readable prefix and a hash of the whole.
pub fn owner_label_value(owner: &str) -> String {
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let alnum_ends = owner.starts_with(|c: char| c.is_ascii_alphanumeric()) && owner.ends_with(|c: char| c.is_ascii_alphanumeric());
    if owner.len() <= 63 && owner.chars().all(valid_char) && (owner.is_empty() || alnum_ends) {
        return owner.to_string();
    }
    let hash = hex::encode(&Sha256::digest(owner.as_bytes())[..6]);
    let prefix: String = owner.chars().map(|c| if valid_char(c) { c } else { '-' }).take(50).collect();
    let prefix = prefix.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if prefix.is_empty() { hash } else { format!("{prefix}-{hash}") }
}

/// The neutral manager of the crate's own tests.
#[cfg(test)]
pub(crate) fn test_manager() -> Manager {
    Manager::new(TEST_FIELD_MANAGER, "apply.example.com")
}

/// The field manager of [`test_manager`].
#[cfg(test)]
pub(crate) const TEST_FIELD_MANAGER: &str = "example-applier";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn arbitrary_manifests_are_written_as_their_edited_copies_are() {
        let applier = Applier::new(
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().expect("url"))).expect("client"),
            ApplyOptions { owner: "stack.team-a.alpha".into(), ..ApplyOptions::new(test_manager()) },
        );
        let mut g = arbitrary::Gen::new(7);
        for i in 0..3000 {
            let body = g.object();
            let namespace = [Some("team"), None, Some("")][i % 3];
            let copied = serde_json::to_vec(&applier.desired_body(&body, namespace)).expect("json");
            let desired =
                desired::Desired { body: &body, namespace, label: applier.options.manager.owner_label(), owner: &applier.owner_value };
            assert_eq!(serde_json::to_vec(&desired).expect("json"), copied, "{body} in {namespace:?}");
        }
    }

    #[tokio::test]
    async fn the_manifest_as_sent_is_written_without_a_copy_byte_for_byte() {
        use serde_json::json;
        let applier = Applier::new(
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().expect("url"))).expect("client"),
            ApplyOptions { owner: "stack.team-a.alpha".into(), ..ApplyOptions::new(test_manager()) },
        );
        let bodies = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "elsewhere",
                "labels": {"app": "x", "apply.example.com/owner": "someone", "zz": "1"}, "annotations": {"a": "b"}, "uid": "u"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {"a": "1", "t": "2"}, "name": "a", "ownerReferences": []}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": "odd", "name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": null, "name": "a"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "dropped"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            json!({"apiVersion": "v1", "aaa": 1, "zzz": {"nested": [1, "two"]}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "odd"}),
            json!(["not", "an", "object"]),
            json!(null),
        ];
        for body in &bodies {
            for namespace in [Some("team"), None] {
                let copied = serde_json::to_vec(&applier.desired_body(body, namespace)).expect("json");
                let desired =
                    desired::Desired { body, namespace, label: applier.options.manager.owner_label(), owner: &applier.owner_value };
                assert_eq!(serde_json::to_vec(&desired).expect("json"), copied, "{body} in {namespace:?}");
            }
        }
    }

    #[test]
    fn owner_label_values_are_label_safe() {
        assert_eq!(owner_label_value("stack.team-a.alpha"), "stack.team-a.alpha");
        for owner in ["sub/team-a/alpha", &"x".repeat(80), "-a-", "ünïcode", "/"] {
            let v = owner_label_value(owner);
            assert!(v.len() <= 63 && v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)), "{owner} -> {v}");
            assert!(v.starts_with(|c: char| c.is_ascii_alphanumeric()) && v.ends_with(|c: char| c.is_ascii_alphanumeric()), "{v}");
            assert_eq!(v, owner_label_value(owner), "stable");
        }
        assert_ne!(owner_label_value(&"x".repeat(80)), owner_label_value(&"x".repeat(81)));
        assert!(owner_label_value("sub/team-a/alpha").starts_with("sub-team-a-alpha-"));
    }
}

#[cfg(test)]
mod cause_tests {
    /// Regression: a workload request cut by its read timeout said only "connection error:
    /// timed out"; then it named the setting but not its value.
    #[test]
    fn a_timed_out_request_names_its_deadline() {
        #[derive(Debug, thiserror::Error)]
        #[error("connection error")]
        struct Connection(#[source] std::io::Error);
        let timed_out = Connection(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"));
        // The only test of this process-wide setting: each row sets it before reading it.
        let table = [
            (30_000, "connection error: timed out (no answer within 30s, `target.kubernetes.requestTimeout`)"),
            (1_500, "connection error: timed out (no answer within 1500ms, `target.kubernetes.requestTimeout`)"),
        ];
        for (ms, want) in table {
            super::set_request_timeout(std::time::Duration::from_millis(ms));
            assert_eq!(super::with_causes(&timed_out), want);
        }
        let refused = Connection(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"));
        assert_eq!(super::with_causes(&refused), "connection error: connection refused");
    }
}
