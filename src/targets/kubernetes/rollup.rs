//! The release roll-up: each `StackRelease` says how the Clusters running it are doing
//! (`status.clusters`) and whether all of them are synced and healthy (the `Ready` condition
//! `kubectl wait --for=condition=Ready stackrelease/…` waits for). Computed from the
//! ClusterSyncs, written with its own field manager so the release record (digests, phase,
//! class entries) and the roll-up never overwrite each other.

use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{debug, warn};

use super::Kube;
use super::error::kube_error;
use super::stackrelease::release_name;
use super::status::now;
use crate::status::crd::{ClusterSync, StackRelease};
use crate::status::desired::{rollup, tally};

/// Field manager of the roll-up's fields (`conditions`, `clusters`).
const ROLLUP_MANAGER: &str = "stacksync-rollup";

/// How long ClusterSync changes are gathered before the roll-up is recomputed.
const SETTLE: Duration = Duration::from_secs(1);

/// Recomputes the roll-up whenever a ClusterSync changes (at most once per [`SETTLE`]), until
/// `stop` says so.
pub(super) async fn run(kube: &Kube, mut stop: tokio::sync::watch::Receiver<bool>) {
    let syncs: Api<ClusterSync> = Api::all(kube.watch.clone());
    let mut changes = watcher(syncs, watcher::Config::default()).default_backoff().boxed();
    loop {
        tokio::select! {
            event = changes.next() => if event.is_none() { return },
            _ = stop.changed() => return,
        }
        // Gather the burst a reconcile wave makes, then write once.
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => break,
                event = changes.next() => if event.is_none() { return },
                _ = stop.changed() => return,
            }
        }
        once(kube).await;
    }
}

/// Lists ClusterSyncs and StackReleases and writes each release's roll-up that changed.
pub(super) async fn once(kube: &Kube) {
    let syncs: Api<ClusterSync> = Api::all(kube.mgmt.clone());
    let releases: Api<StackRelease> = Api::all(kube.mgmt.clone());
    let all = ListParams::default();
    let (syncs, releases) = match tokio::try_join!(syncs.list(&all), releases.list(&all)) {
        Ok((s, r)) => (s.items, r.items),
        // A server that throttles is said once by its client (`workload.rs`, `Throttle`).
        Err(e) if super::workload::is_throttled(&e) => {
            debug!(error = %kube_error(&e), "cannot list ClusterSyncs and StackReleases for the release roll-up");
            return;
        }
        Err(e) => {
            warn!(error = %kube_error(&e), "cannot list ClusterSyncs and StackReleases for the release roll-up");
            return;
        }
    };
    let tallies = tally(&syncs, release_name);
    let at = now();
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    for rel in releases {
        let Some(name) = rel.metadata.name.clone() else { continue };
        let status = rel.status.clone().unwrap_or_default();
        let tally = tallies.get(&name).cloned().unwrap_or_default();
        let conditions = rollup(&status.conditions, &status.phase, &status.refusal, &status.entries, &tally, &at);
        if status.clusters.as_ref() == Some(&tally.counts) && status.conditions == conditions {
            continue;
        }
        let body = json!({
            "apiVersion": "stacksync.io/v1alpha1",
            "kind": "StackRelease",
            "metadata": {"name": name},
            "status": {"clusters": tally.counts, "conditions": conditions},
        });
        match api.patch_status(&name, &PatchParams::apply(ROLLUP_MANAGER).force(), &Patch::Apply(body)).await {
            Ok(_) => debug!(release = %name, clusters = %tally.counts.summary, "release roll-up written"),
            Err(e) => warn!(release = %name, error = %kube_error(&e), "cannot write the release roll-up"),
        }
    }
}
