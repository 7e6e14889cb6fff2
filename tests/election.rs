//! Leader election and sharding with the real binary: of two replicas only the leader writes,
//! the standby's `/readyz` is 503, killing the leader hands over within the lease duration, and
//! SIGTERM releases the Lease; two shards split twenty Clusters with none reconciled by both,
//! and one of them holds the rollout coordinator's Lease; a sharded fleet's StackRelease counts
//! every Cluster once, each shard in its own part, and a stopped shard's part goes stale.

mod common;

use std::time::Duration;

use common::Daemon;
use common::fleet::{Env, NS, cm};
use common::res;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

async fn holder(env: &Env, name: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(env.mgmt.client().expect("client"), "default");
    api.get_opt(name).await.expect("get lease")?.spec?.holder_identity.filter(|h| !h.is_empty())
}

const RECONCILED: &str = "stacksync_reconciles_total{subscription=\"ferrol\",result=\"ready\",reason=\"Synced\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_a_killed_leader_is_replaced_and_sigterm_releases_the_lease() {
    let env = Env::served().await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    env.add_synced_cluster("alpha", 0).await;
    let config = env.webhooks_config().write();
    // 8 s, not less: a leader that cannot confirm its hold for most of it steps down, and a
    // busy 2-core machine can stall a process for a couple of seconds.
    let args = ["--leader-elect", "--lease-duration", "8s"];
    let mut a = Daemon::start_with(&config, env.dir.path().join("a.log"), &args).await;
    a.eventually("a leads and syncs", Duration::from_secs(20), async || env.applied("alpha").await == "v1.0.0").await;
    let a_identity = format!("_{}", a.pid());
    assert!(holder(&env, "stacksync").await.is_some_and(|h| h.ends_with(&a_identity)));
    a.eventually("a ready", Duration::from_secs(30), async || a.get("/readyz").await.0 == 200).await;

    let b = Daemon::start_with(&config, env.dir.path().join("b.log"), &args).await;
    b.eventually("b polled its source (warm cache)", Duration::from_secs(10), async || {
        b.metric("stacksync_source_polls_total{source=\"stacks\",result=\"success\"}").await >= 1.0
    })
    .await;
    let (status, text) = b.get("/readyz").await;
    assert_eq!((status, text.trim()), (503, "standby: another replica holds the lease"));
    assert_eq!(b.metric("stacksync_leader").await, 0.0);
    assert_eq!(b.metric(RECONCILED).await, 0.0, "the standby reconciled");

    // The leader dies without releasing: the standby takes over once the lease expires.
    a.kill().await;
    let took = b.eventually("b took over", Duration::from_secs(30), async || b.get("/readyz").await.0 == 200).await;
    eprintln!("handover after {took:?} (lease 8s)");
    b.eventually("b reconciles", Duration::from_secs(30), async || b.metric(RECONCILED).await >= 1.0).await;
    assert!(holder(&env, "stacksync").await.is_some_and(|h| h.ends_with(&format!("_{}", b.pid()))));

    b.stop().await;
    assert_eq!(holder(&env, "stacksync").await, None, "the lease was not released on SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_split_twenty_clusters_with_none_reconciled_by_both() {
    let env = Env::served().await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    for i in 0..20 {
        let shard = if i % 2 == 0 { "even" } else { "odd" };
        let name = format!("c{i}");
        env.add_labelled_cluster(&name, "docker-ferrol-1-27-v1", true, &[("stacksync.io/shard", shard)]).await;
        env.add_kubeconfig(&name, 0).await;
    }
    let config = env.webhooks_config().write();
    let even = Daemon::start_with(&config, env.dir.path().join("even.log"), &["--leader-elect", "--shard", "even"]).await;
    let odd = Daemon::start_with(&config, env.dir.path().join("odd.log"), &["--leader-elect", "--shard", "odd"]).await;
    even.eventually("every Cluster synced", Duration::from_secs(30), async || {
        for i in 0..20 {
            if env.applied(&format!("c{i}")).await != "v1.0.0" {
                return false;
            }
        }
        true
    })
    .await;
    // Each process counts the Clusters it reconciled: ten each, so none was reconciled by both.
    // (A reconcile's metrics are recorded once it returns, a moment after what it applied.)
    let ready = "stacksync_clusters{subscription=\"ferrol\",ready=\"true\"}";
    even.eventually("ten Clusters each", Duration::from_secs(30), async || {
        (even.metric(ready).await, odd.metric(ready).await) == (10.0, 10.0) || even.metric(ready).await + odd.metric(ready).await > 20.0
    })
    .await;
    assert_eq!((even.metric(ready).await, odd.metric(ready).await), (10.0, 10.0));
    assert!(holder(&env, "stacksync-even").await.is_some() && holder(&env, "stacksync-odd").await.is_some());
    // Housekeeping of one shard removed nothing of the other's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..20 {
        assert_eq!(env.applied(&format!("c{i}")).await, "v1.0.0", "c{i}");
    }
    // One rollout coordinator for both shards, released on SIGTERM like a shard's Lease.
    let held = "stacksync_lease_held{lease=\"stacksync-rollout\"}";
    even.eventually("one of the shards coordinates rollouts", Duration::from_secs(30), async || {
        holder(&env, "stacksync-rollout").await.is_some() && even.metric(held).await + odd.metric(held).await == 1.0
    })
    .await;
    even.stop().await;
    odd.stop().await;
    assert_eq!(holder(&env, "stacksync-rollout").await, None, "the rollout Lease was not released on SIGTERM");
}

/// The StackRelease `name` as JSON (null until it exists).
async fn stack_release(env: &Env, name: &str) -> Value {
    let api: Api<DynamicObject> = Api::all_with(env.mgmt(), &res("stacksync.io", "v1alpha1", "StackRelease"));
    api.get_opt(name).await.expect("get StackRelease").map_or(Value::Null, |o| serde_json::to_value(o).expect("json"))
}

/// `(total, ready, notReady, stale)` of a Cluster count.
fn counts(c: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| c[k].as_u64().unwrap_or_default();
    (n("total"), n("ready"), n("notReady") + n("progressing"), n("stale"))
}

fn part<'a>(rel: &'a Value, shard: &str) -> &'a Value {
    rel["status"]["shards"].as_array().and_then(|p| p.iter().find(|p| p["name"] == shard)).unwrap_or(&Value::Null)
}

fn ready_condition(rel: &Value) -> (String, String, String) {
    let c = common::condition(rel, "Ready");
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (s("status"), s("reason"), s("message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_fleets_stack_release_counts_every_cluster_once_and_a_stopped_shards_part_goes_stale() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    // Sharded by namespace: shard a's Clusters in team-a, shard b's in team-b; in each, one
    // Cluster syncs and one fails (the workload server refuses its ConfigMap).
    env.add_namespace("team-b");
    env.workloads[0].faults().add(fake_apiserver::FaultRule::new().verb("patch").path("-failing").status(403));
    for (shard, ns) in [("a", NS), ("b", "team-b")] {
        let label = [("stacksync.io/shard", shard)];
        for name in [format!("{shard}-ok"), format!("{shard}-failing")] {
            env.add_cluster_in(ns, &name, "docker-ferrol-1-27-v1", true, &label).await;
            env.add_kubeconfig_in(ns, &name, 0).await;
        }
    }
    // resync 2s: each shard writes its part at least every second, stale after three.
    let config = env.config().kubernetes_set("resync", "2s").write();
    let a = Daemon::start_with(&config, env.dir.path().join("a.log"), &["--shard", "a"]).await;
    let b = Daemon::start_with(&config, env.dir.path().join("b.log"), &["--shard", "b"]).await;
    let name = "ferrol.v1.0.0";
    a.eventually("every Cluster counted once, each shard's in its part", Duration::from_secs(40), async || {
        let rel = stack_release(&env, name).await;
        counts(&rel["status"]["clusters"]) == (4, 2, 2, 0)
            && counts(&part(&rel, "a")["clusters"]) == (2, 1, 1, 0)
            && counts(&part(&rel, "b")["clusters"]) == (2, 1, 1, 0)
    })
    .await;
    let rel = stack_release(&env, name).await;
    assert_eq!(rel["status"]["clusters"]["summary"], "2/4", "{rel}");
    let (ready, reason, _) = ready_condition(&rel);
    assert_eq!(ready, "False", "{rel}");
    assert_ne!(reason, "ShardStale", "{rel}");
    // The roll-up of the parts: both applied the release.
    assert_eq!(
        (rel["status"]["phase"].as_str(), part(&rel, "a")["phase"].as_str(), part(&rel, "b")["phase"].as_str()),
        (Some("Applied"), Some("Applied"), Some("Applied")),
        "{rel}"
    );
    // Each part is its shard's alone.
    let managers: Vec<String> = rel["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|f| f["manager"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    assert!(managers.contains(&"stacksync-shard-a".to_owned()) && managers.contains(&"stacksync-shard-b".to_owned()), "{managers:?}");

    // Shard b stops: its part is not refreshed, goes stale, and its ready Cluster is no longer
    // counted as ready. Shard a's part stays fresh (its heartbeat moves on).
    let beat = part(&rel, "a")["heartbeatTime"].clone();
    b.stop().await;
    let took = a
        .eventually("shard b's part goes stale and the roll-up says so", Duration::from_secs(30), async || {
            ready_condition(&stack_release(&env, name).await).1 == "ShardStale"
        })
        .await;
    eprintln!("stale after {took:?} (heartbeat 1s, stale after 3s)");
    let rel = stack_release(&env, name).await;
    assert_eq!(counts(&rel["status"]["clusters"]), (4, 1, 3, 2), "{rel}");
    assert_eq!(rel["status"]["clusters"]["summary"], "1/4", "{rel}");
    let (ready, _, message) = ready_condition(&rel);
    assert_eq!(ready, "False");
    assert!(message.contains("stale shard part: b (its 2 Clusters; last heartbeat "), "{message}");
    let now = chrono::Utc::now();
    let stale_after = |p: &Value| chrono::DateTime::parse_from_rfc3339(p["staleAfter"].as_str().unwrap_or_default()).expect("staleAfter");
    assert!(stale_after(part(&rel, "b")) < now, "{rel}");
    assert!(stale_after(part(&rel, "a")) > now, "{rel}");
    assert_ne!(part(&rel, "a")["heartbeatTime"], beat, "shard a's heartbeat did not move on");
    a.stop().await;
}
