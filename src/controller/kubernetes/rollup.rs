//! The release roll-up: each `StackRelease` says how the Clusters running it are doing
//! (`status.clusters`) and whether all of them are synced and healthy (the `Ready` condition
//! `kubectl wait --for=condition=Ready stackrelease/…` waits for). Computed from the
//! ClusterSyncs, written with its own field manager so the release record (digests, phase,
//! class entries) and the roll-up never overwrite each other.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{debug, warn};

use super::status::{MESSAGE_COLUMN, now, release_name, shorten};
use super::{Kube, kube_error};
use crate::status::crd::{ClusterCounts, ClusterSync, Condition, StackRelease};

/// Field manager of the roll-up's fields (`conditions`, `clusters`).
const ROLLUP_MANAGER: &str = "stacksync-rollup";

/// How long ClusterSync changes are gathered before the roll-up is recomputed.
const SETTLE: Duration = Duration::from_secs(1);

/// What one release's Clusters look like.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Tally {
    counts: ClusterCounts,
    /// The first Cluster that is not ready, and why (`ns/name: message`).
    first_problem: Option<String>,
}

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
        Err(e) => {
            warn!(error = %kube_error(&e), "cannot list ClusterSyncs and StackReleases for the release roll-up");
            return;
        }
    };
    let tallies = tally(&syncs);
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
    for rel in releases {
        let Some(name) = rel.metadata.name.clone() else { continue };
        let status = rel.status.clone().unwrap_or_default();
        let tally = tallies.get(&name).cloned().unwrap_or_default();
        let conditions = if status.phase == "Refused" {
            refused(&status.conditions, &status.refusal)
        } else {
            conditions(&status.conditions, &status.phase, &status.entries, &tally)
        };
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

/// Clusters by release (`StackRelease` name): a Cluster counts for its applied release, or
/// for the one being applied when none is yet.
fn tally(syncs: &[ClusterSync]) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    for cs in syncs {
        let Some(st) = &cs.status else { continue };
        let Some(tag) = st.applied_release.as_ref().or(st.wanted_release.as_ref()).map(|r| r.tag.as_str()) else { continue };
        let t = out.entry(release_name(&cs.spec.subscription, tag)).or_default();
        let is_true = |type_: &str| st.conditions.iter().any(|c| c.type_ == type_ && c.status == "True");
        t.counts.total += 1;
        if is_true("Ready") {
            t.counts.ready += 1;
            continue;
        }
        if is_true("Reconciling") {
            t.counts.progressing += 1;
        } else {
            t.counts.not_ready += 1;
        }
        if t.first_problem.is_none() {
            let ns = cs.metadata.namespace.as_deref().unwrap_or_default();
            let why = st.conditions.iter().find(|c| c.type_ == "Ready").map_or("no status yet", |c| c.message.as_str());
            t.first_problem = Some(format!("{ns}/{}: {}", cs.spec.cluster, shorten(why, MESSAGE_COLUMN)));
        }
    }
    for t in out.values_mut() {
        t.counts.summary = format!("{}/{}", t.counts.ready, t.counts.total);
    }
    out
}

/// `Ready` and `Reconciling` of a release: not ready while its ClusterClass failed or any of
/// its Clusters is not ready; reconciling while any is being applied.
fn conditions(previous: &[Condition], phase: &str, entries: &[crate::status::crd::ObjectEntry], tally: &Tally) -> Vec<Condition> {
    let c = &tally.counts;
    let (ready, reason, message) = if phase == "Failed" {
        let first = entries.first().map_or_else(String::new, |e| format!(": {}/{}: {}", e.kind, e.name, e.message));
        (false, "ClassFailed", format!("the release's ClusterClass objects are not synced{first}"))
    } else if c.ready < c.total {
        let problem = tally.first_problem.as_deref().unwrap_or_default();
        let reason = if c.not_ready == 0 { "Progressing" } else { "ClustersNotReady" };
        (false, reason, format!("{} of {} Clusters not ready; first: {problem}", c.total - c.ready, c.total))
    } else if c.total == 0 {
        (true, "Ready", "no Cluster runs this release".to_owned())
    } else {
        (true, "Ready", format!("{} of {} Clusters synced and healthy", c.ready, c.total))
    };
    let reconciling = c.progressing > 0;
    let busy = if reconciling { format!("{} Clusters being applied or waiting for health", c.progressing) } else { String::new() };
    vec![
        make(previous, "Ready", ready, reason, &message),
        make(previous, "Reconciling", reconciling, if reconciling { "Progressing" } else { "Idle" }, &busy),
    ]
}

/// A release refused for its signature: never Ready, nothing being applied.
fn refused(previous: &[Condition], why: &str) -> Vec<Condition> {
    vec![make(previous, "Ready", false, "SignatureInvalid", why), make(previous, "Reconciling", false, "Idle", "")]
}

/// A condition, keeping its transition time while its status is unchanged.
fn make(previous: &[Condition], type_: &str, on: bool, reason: &str, message: &str) -> Condition {
    let status = if on { "True" } else { "False" };
    let since = previous.iter().find(|p| p.type_ == type_ && p.status == status).map_or_else(now, |p| p.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::crd::{ClusterSyncSpec, ClusterSyncStatus, ReleaseRefStatus};

    fn sync(ns: &str, name: &str, tag: &str, ready: &str, reconciling: bool, message: &str) -> ClusterSync {
        let mut cs = ClusterSync::new(name, ClusterSyncSpec { cluster: name.into(), subscription: "ferrol".into() });
        cs.metadata.namespace = Some(ns.into());
        let cond = |t: &str, s: &str, m: &str| Condition {
            type_: t.into(),
            status: s.into(),
            reason: "R".into(),
            message: m.into(),
            last_transition_time: "2026-11-23T00:00:00Z".into(),
            observed_generation: None,
        };
        cs.status = Some(ClusterSyncStatus {
            applied_release: Some(ReleaseRefStatus { tag: tag.into(), ..Default::default() }),
            conditions: vec![cond("Ready", ready, message), cond("Reconciling", if reconciling { "True" } else { "False" }, "")],
            ..Default::default()
        });
        cs
    }

    #[test]
    fn clusters_count_for_the_release_they_run() {
        let syncs = [
            sync("a", "one", "v1", "True", false, "ok"),
            sync("a", "two", "v1", "False", true, "applying"),
            sync("b", "three", "v1", "False", false, "ConfigMap/x: no matches for kind"),
            sync("a", "four", "v2", "True", false, "ok"),
        ];
        let t = tally(&syncs);
        let v1 = &t[&release_name("ferrol", "v1")];
        assert_eq!((v1.counts.total, v1.counts.ready, v1.counts.progressing, v1.counts.not_ready), (3, 1, 1, 1));
        assert_eq!(v1.counts.summary, "1/3");
        assert_eq!(v1.first_problem.as_deref(), Some("a/two: applying"));
        let conds = conditions(&[], "Applied", &[], v1);
        assert_eq!((conds[0].status.as_str(), conds[0].reason.as_str()), ("False", "ClustersNotReady"));
        assert_eq!(conds[1].status, "True");
        let v2 = &t[&release_name("ferrol", "v2")];
        let conds = conditions(&[], "Applied", &[], v2);
        assert_eq!((conds[0].status.as_str(), conds[0].message.as_str()), ("True", "1 of 1 Clusters synced and healthy"));
    }

    #[test]
    fn a_failed_class_is_not_ready_and_an_unused_release_is() {
        let none = Tally::default();
        assert_eq!(conditions(&[], "Failed", &[], &none)[0].reason, "ClassFailed");
        let ok = conditions(&[], "Applied", &[], &none);
        assert_eq!((ok[0].status.as_str(), ok[0].message.as_str()), ("True", "no Cluster runs this release"));
    }

    #[test]
    fn the_transition_time_stays_while_the_status_does() {
        let mut prev = conditions(&[], "Applied", &[], &Tally::default());
        prev[0].last_transition_time = "2020-01-01T00:00:00Z".into();
        let again = conditions(&prev, "Applied", &[], &Tally::default());
        assert_eq!(again[0].last_transition_time, "2020-01-01T00:00:00Z");
    }
}
