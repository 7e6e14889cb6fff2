//! The console's Fleet page: the server time of one page (the join of every Cluster with its
//! ClusterSync and rollout wave, the counts, the filter, the sort, the page's HTML) at 1,000 and
//! 10,000 Clusters, as the console answers it from its reflectors' stores. The stores are built
//! in memory (the same types the watches keep); no network. The bound: first paint
//! under 1 s of server time at 10,000 Clusters.
//! Run: `cargo bench --bench console` (results: docs/performance.md, "The console").

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use stacksync::console::pages::{Ctx, fleet};
use stacksync::console::view::{Query, Snapshot};
use stacksync::status::crd::{
    ClusterSync, ClusterSyncSpec, ClusterSyncStatus, Condition, ReleaseRefStatus, RolloutStatus, StackRelease, StackReleaseSpec,
    StackReleaseStatus, WaveStatus,
};

const RUNS: usize = 9;

fn median(mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let mut bytes = 0;
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            bytes = f();
            t.elapsed()
        })
        .collect();
    times.sort();
    (times[RUNS / 2], bytes)
}

fn fleet_of(n: usize) -> Snapshot {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"));
    let mut s = Snapshot::default();
    let mut wave = Vec::new();
    for i in 0..n {
        let (ns, name) = (format!("team-{:02}", i % 50), format!("cluster-{i:05}"));
        let mut c = DynamicObject::new(&name, &ar).within(&ns);
        c.data = json!({"spec": {"topology": {"class": "docker-ferrol-1-35-v1", "version": "v1.35.4"}}});
        s.clusters.push(Arc::new(c));
        let mut cs = ClusterSync::new(&name, ClusterSyncSpec { cluster: name.clone(), subscription: "ferrol".into() });
        cs.metadata.namespace = Some(ns.clone());
        let ok = i % 20 != 0;
        let ready = Condition {
            type_: "Ready".into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: if ok { "Synced" } else { "UpgradeFailed" }.into(),
            message: if ok { String::new() } else { "upgrade stage 2/3 `cni` PostCondition not done within stageTimeout 10m".into() },
            last_transition_time: "2026-11-23T09:00:00Z".into(),
            observed_generation: None,
        };
        cs.status = Some(ClusterSyncStatus {
            conditions: vec![ready],
            synced: 40,
            total: 40,
            applied_release: Some(ReleaseRefStatus { tag: "docker-ferrol-1-35-v1".into(), version: "v1".into(), commit: "abc".into() }),
            last_sync_time: Some("2026-11-23T09:00:00Z".into()),
            ..Default::default()
        });
        s.syncs.push(Arc::new(cs));
        wave.push(format!("{ns}/{name}"));
    }
    let mut r = StackRelease::new(
        "ferrol.docker-ferrol-1-35-v1",
        StackReleaseSpec { subscription: "ferrol".into(), source: "s".into(), tag: "v".into() },
    );
    let half = wave.split_off(n / 2);
    r.status = Some(StackReleaseStatus {
        rollout: Some(RolloutStatus {
            phase: "Progressing".into(),
            plan: vec![WaveStatus { clusters: wave, ..Default::default() }, WaveStatus { clusters: half, ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    });
    s.releases.push(Arc::new(r));
    s
}

fn main() {
    let ctx = Ctx { now: chrono::Utc::now(), config: None, config_path: None };
    println!(
        "| Clusters | first page (default) | filtered (state=Failed, q=cluster-0) | sorted by last sync, page 40 | HTML of the first page |"
    );
    println!("|---|---|---|---|---|");
    for n in [1_000, 10_000] {
        let s = fleet_of(n);
        let (first, bytes) = median(|| fleet::content(&s, &Query::default(), &ctx).len());
        let filtered = median(|| fleet::content(&s, &Query::parse("state=Failed&q=cluster-0"), &ctx).len()).0;
        let sorted = median(|| fleet::content(&s, &Query::parse("sort=lastsync&desc=1&page=40"), &ctx).len()).0;
        println!("| {n} | {first:.1?} | {filtered:.1?} | {sorted:.1?} | {} KiB |", bytes / 1024);
    }
}
