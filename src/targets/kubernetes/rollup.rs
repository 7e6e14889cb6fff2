//! The release roll-up: each `StackRelease` says how the Clusters running it are doing
//! (`status.clusters`) and whether all of them are synced and healthy (the `Ready` condition
//! `kubectl wait --for=condition=Ready stackrelease/…` waits for). Computed from the
//! ClusterSyncs and the shards' parts, written with its own field manager so the release record
//! (digests, phase, class entries) and the roll-up never overwrite each other; this process's
//! own part (its Clusters' counts, its heartbeat) is written beside it.
//!
//! The daemon counts from watches (a reflector store of ClusterSyncs and one of StackReleases):
//! the API server is listed when a watch starts or must start over, not per roll-up.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, stream};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{debug, warn};

use super::context::Kube;
use super::error::kube_error;
use super::ledger::release_name;
use super::reconcile::status::now;
use crate::status::crd::{ClusterSync, StackRelease};
use crate::status::desired::{rollup, tally};
use crate::status::shards::without_stale;

/// Field manager of the roll-up's fields (`conditions`, `clusters`).
const ROLLUP_MANAGER: &str = "stacksync-rollup";

/// How long ClusterSync changes are gathered before the roll-up is recomputed.
const SETTLE: Duration = Duration::from_secs(1);

/// Which watch spoke, and whether it has listed everything.
enum Seen {
    Syncs { listed: bool },
    Releases { listed: bool },
}

/// Whether each store has listed everything once.
#[derive(Default)]
struct Listed {
    syncs: bool,
    releases: bool,
}

impl Listed {
    fn note(&mut self, seen: Seen) {
        match seen {
            Seen::Syncs { listed } => self.syncs |= listed,
            Seen::Releases { listed } => self.releases |= listed,
        }
    }
}

/// Recomputes the roll-up whenever a ClusterSync or a StackRelease changes (at most once per
/// [`SETTLE`]) and at every heartbeat of this process's parts (a stale part of another shard is
/// noticed then too), until `stop` says so. `clusters`: this process's Clusters (its shard's),
/// whose counts are its part.
pub(super) async fn run(kube: &Kube, clusters: Store<DynamicObject>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let (syncs, syncs_writer) = reflector::store::<ClusterSync>();
    let (releases, releases_writer) = reflector::store::<StackRelease>();
    // The stores keep what the roll-up reads, not the inventories (a ClusterSync's may list
    // thousands of objects) nor the rollout plans.
    let sync_events = watcher(Api::<ClusterSync>::all(kube.watch.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|cs| {
            cs.metadata.managed_fields = None;
            if let Some(st) = cs.status.as_mut() {
                st.inventory = Vec::new();
                st.entries = Vec::new();
                st.generated = Vec::new();
            }
        })
        .reflect(syncs_writer)
        .map(|e| Seen::Syncs { listed: matches!(e, Ok(watcher::Event::InitDone)) });
    let release_events = watcher(Api::<StackRelease>::all(kube.watch.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|r| {
            r.metadata.managed_fields = None;
            if let Some(st) = r.status.as_mut() {
                st.class_inventory = Vec::new();
                st.rollout = None;
            }
        })
        .reflect(releases_writer)
        .map(|e| Seen::Releases { listed: matches!(e, Ok(watcher::Event::InitDone)) });
    let mut events = stream::select(sync_events, release_events).boxed();
    let mut listed = Listed::default();
    loop {
        let period = super::parts::heartbeat(kube.target().resync);
        tokio::select! {
            event = events.next() => match event { Some(seen) => listed.note(seen), None => return },
            () = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        // Gather the burst a reconcile wave makes, then write once.
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => break,
                event = events.next() => match event { Some(seen) => listed.note(seen), None => return },
                _ = stop.changed() => return,
            }
        }
        // Never from a store that has not listed everything: it would count Clusters missing.
        if !(listed.syncs && listed.releases) {
            continue;
        }
        let ar = kube.clusters.clone();
        let mine = |cs: &ClusterSync| {
            let key = ObjectRef::new_with(&cs.spec.cluster, ar.clone()).within(cs.metadata.namespace.as_deref().unwrap_or_default());
            clusters.get(&key).is_some()
        };
        write(kube, &syncs.state(), &releases.state(), mine).await;
    }
}

/// Lists ClusterSyncs and StackReleases and writes each release's roll-up that changed (`run
/// --once`: every Cluster is this process's).
pub(super) async fn once(kube: &Kube) {
    let syncs: Api<ClusterSync> = Api::all(kube.mgmt.clone());
    let releases: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let all = ListParams::default();
    let (syncs, releases) = match tokio::try_join!(syncs.list(&all), releases.list(&all)) {
        Ok((s, r)) => (s.items, r.items),
        // A server that throttles is said once by its client (`workload.rs`, `Throttle`).
        Err(e) if super::reconcile::workload::is_throttled(&e) => {
            debug!(error = %kube_error(&e), "cannot list ClusterSyncs and StackReleases for the release roll-up");
            return;
        }
        Err(e) => {
            warn!(error = %kube_error(&e), "cannot list ClusterSyncs and StackReleases for the release roll-up");
            return;
        }
    };
    let syncs: Vec<Arc<ClusterSync>> = syncs.into_iter().map(Arc::new).collect();
    let releases: Vec<Arc<StackRelease>> = releases.into_iter().map(Arc::new).collect();
    write(kube, &syncs, &releases, |_| true).await;
}

/// Writes this process's part of each release (its Clusters, those `mine` says, by state) when
/// it changed or its heartbeat is due, and each release's roll-up when it changed: the fleet's
/// Clusters by state, a stale part's not counted as ready, and the `Ready` and `Reconciling`
/// conditions.
async fn write(kube: &Kube, syncs: &[Arc<ClusterSync>], releases: &[Arc<StackRelease>], mine: impl Fn(&ClusterSync) -> bool) {
    let tallies = tally(syncs.iter().map(|s| &**s), release_name);
    let own = tally(syncs.iter().map(|s| &**s).filter(|cs| mine(cs)), release_name);
    let period = super::parts::heartbeat(kube.target().resync);
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    for rel in releases {
        let Some(name) = rel.metadata.name.clone() else { continue };
        // A StackRelease not recorded yet has none of the required fields a part needs beside it.
        let Some(status) = rel.status.as_ref() else { continue };
        let stored = status.shards.iter().find(|p| p.name == kube.parts.name());
        let mut parts = status.shards.clone();
        let counts = own.get(&name).map(|t| t.counts.clone());
        if counts.is_some() || stored.is_some() {
            let mut written = kube.parts.lock().await;
            let mut part = kube.parts.base(&written, &name, Some(&**rel));
            part.clusters = counts.unwrap_or_default();
            match kube.parts.write(&kube.mgmt, &mut written, &name, stored, part, period).await {
                Ok(Some(done)) => parts = done.status.map(|s| s.shards).unwrap_or_default(),
                Ok(None) => {}
                Err(e) => {
                    warn!(release = %name, shard = kube.parts.name(), error = %kube_error(&e), "cannot write this shard's part of the release roll-up")
                }
            }
        }
        let at = now();
        let fleet = without_stale(tallies.get(&name).cloned().unwrap_or_default(), &parts, chrono::Utc::now());
        let conditions = rollup(&status.conditions, &status.phase, &status.refusal, &status.entries, &fleet, &at);
        if status.clusters.as_ref() == Some(&fleet.counts) && status.conditions == conditions {
            continue;
        }
        let body = json!({
            "apiVersion": "stacksync.io/v1alpha1",
            "kind": "StackRelease",
            "metadata": {"name": name},
            "status": {"clusters": fleet.counts, "conditions": conditions},
        });
        match api.patch_status(&name, &PatchParams::apply(ROLLUP_MANAGER).force(), &Patch::Apply(body)).await {
            Ok(_) => debug!(release = %name, clusters = %fleet.counts.summary, "release roll-up written"),
            Err(e) => warn!(release = %name, error = %kube_error(&e), "cannot write the release roll-up"),
        }
    }
}
