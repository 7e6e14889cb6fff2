//! Faults of the real components during upgrades, on a real Cluster API of the test's own
//! (`testkit::capi::ClusterApi`: a management control plane running the Cluster API manager and
//! a workload control plane; killing the shared one would break the other tests): a workload API
//! server killed while Cluster API asks whether an upgrade may go on, the Cluster API manager
//! killed while `BeforeClusterUpgrade` holds an upgrade, the management API server and the
//! stacksync leader killed in the middle of a wave rollout. Each case states its promise and
//! checks it while the fault lasts and after.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::Daemon;
use common::capi::{
    CapiTenant, K1, K2, STEP, V1, V2, condition, open_gate, rollout_phase, rollout_status, v2_gated_by, v2_ungated, wait_up,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use serde_json::json;
use testkit::capi::ClusterApi;

/// A Cluster API of this test's own; `None` when it is not built and this is not CI.
async fn cluster_api() -> Option<ClusterApi> {
    if !testkit::capi::available() {
        let message = "the real control plane and Cluster API are not built (scripts/build-realkube.sh, scripts/build-cluster-api.sh)";
        assert!(std::env::var_os("CI").is_none(), "{message}");
        eprintln!("SKIPPED: {message}");
        return None;
    }
    let crds = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    Some(ClusterApi::start(testkit::capi::Options { preload: vec![crds], workload_nodes: 1 }).await.expect("Cluster API"))
}

/// The hook's answers for `cluster` (`proceed`, `retry`, `failure`), in order, from the daemon's
/// log (one INFO line per call).
fn answers(daemon: &Daemon, hook: &str, cluster: &str) -> Vec<String> {
    daemon
        .log()
        .lines()
        .filter(|l| l.contains("runtime hook") && l.contains(&format!("hook={hook}")) && l.contains(&format!("cluster={cluster}")))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("answer=")).map(str::to_owned))
        .collect()
}

/// Promise: while a Cluster's upgrade stages cannot run, `BeforeClusterUpgrade` answers retry,
/// never go (item 3); a Cluster API manager that crashes while it holds an upgrade finds it still
/// held when it is back, and no stage is run twice or skipped (item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_upgrade_survives_its_workload_server_and_the_cluster_api_manager_going_down() {
    let Some(mut capi) = cluster_api().await else { return };
    let t = CapiTenant::on(capi.view(), "held").await;
    let gate = format!("gate-{}", t.ns);
    t.publish(V1, |_, text| text);
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2).set("stageTimeout", "10m")).write(), &[]).await;
    t.add_cluster("c1", V1, K1, json!({})).await;
    wait_up(&t, &daemon, "c1", V1, K1).await;
    t.publish(V2, v2_gated_by(&gate));
    t.class_reconciled(&daemon, V2).await;
    let key = format!("{}/c1", t.ns);

    // The workload cluster's API server gone, then the upgrade asked for: the stages cannot
    // run, and Cluster API hears "not yet" every time it asks.
    capi.workload_mut().kill("kube-apiserver");
    let down = Instant::now();
    t.move_cluster("c1", V2, K2).await;
    t.eventually(&daemon, "Cluster API asking twice while the workload server is down", STEP, async || {
        answers(&daemon, "BeforeClusterUpgrade", &key).len() >= 2
    })
    .await;
    let during = answers(&daemon, "BeforeClusterUpgrade", &key);
    assert!(during.iter().all(|a| a == "retry"), "only retry while the stages cannot run: {during:?}\n{}", daemon.log());
    let cs = t.cluster_sync("c1").await;
    let (_, reason, message) = condition(&cs, "Ready");
    eprintln!("ClusterSync while the workload server is down ({:.0?}): {reason}: {message}", down.elapsed());
    assert_ne!(cs["status"]["appliedRelease"]["tag"], V2, "{cs}");
    assert_eq!(t.control_plane("c1").await.expect("control plane")["spec"]["version"], K1, "held while down");

    // Back: the first stage runs and waits for the gate; still held.
    capi.workload_mut().restart("kube-apiserver").await.expect("workload API server back");
    t.eventually(&daemon, "the first stage waiting for the gate", STEP, async || {
        let cs = t.cluster_sync("c1").await;
        cs["status"]["upgrade"]["stage"] == "cni" && cs["status"]["upgrade"]["waitingFor"].as_str().is_some_and(|w| w.contains(&gate))
    })
    .await;

    // The Cluster API manager crashes while the upgrade is held, and comes back.
    let asked = answers(&daemon, "BeforeClusterUpgrade", &key).len();
    capi.kill_manager();
    tokio::time::sleep(Duration::from_secs(5)).await;
    capi.restart_manager().await.expect("Cluster API manager back");
    t.eventually(&daemon, "the restarted manager asking again", STEP, async || {
        answers(&daemon, "BeforeClusterUpgrade", &key).len() >= asked + 2
    })
    .await;
    let cs = t.cluster_sync("c1").await;
    assert_eq!(cs["status"]["upgrade"]["stage"], "cni", "the stage the upgrade was at: {cs}");
    assert_eq!(t.control_plane("c1").await.expect("control plane")["spec"]["version"], K1, "still held after the restart");
    let after = answers(&daemon, "BeforeClusterUpgrade", &key);
    assert!(after.iter().all(|a| a == "retry"), "no go before the gate opens: {after:?}");

    // The gate opens: the upgrade completes, each stage done once.
    open_gate(&t, &gate).await;
    wait_up(&t, &daemon, "c1", V2, K2).await;
    assert_eq!(answers(&daemon, "BeforeClusterUpgrade", &key).last().map(String::as_str), Some("proceed"));
    for stage in ["cni", "metrics-server"] {
        let done = daemon.log().lines().filter(|l| l.contains("upgrade stage done") && l.contains(&format!("stage={stage}"))).count();
        assert_eq!(done, 1, "stage {stage} done once:\n{}", daemon.log());
    }
    eprintln!(
        "RESULT: upgrade held through a 5 s Cluster API manager outage; hook answers: {} retry, then proceed",
        answers(&daemon, "BeforeClusterUpgrade", &key).iter().filter(|a| *a == "retry").count()
    );
    daemon.stop().await;
    t.delete().await;
    capi.stop();
}

/// What the test reads of the fleet at one moment: each Cluster's class and generation.
async fn clusters(t: &CapiTenant) -> Option<BTreeMap<String, (String, i64)>> {
    let list = t.clusters().list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .map(|c| {
                let v = serde_json::to_value(c).expect("json");
                let name = v["metadata"]["name"].as_str().unwrap_or_default().to_owned();
                let class = v["spec"]["topology"]["classRef"]["name"].as_str().unwrap_or_default().to_owned();
                (name, (class, v["metadata"]["generation"].as_i64().unwrap_or_default()))
            })
            .collect(),
    )
}

async fn lease_holder(t: &CapiTenant) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(t.client(), "default");
    api.get_opt("stacksync").await.ok()??.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Promise (items 1 and 4): a wave rollout goes on when the management API server is SIGKILLed
/// in the middle of a wave and when the stacksync leader is: it resumes from its status, no
/// Cluster is moved twice, no wave starts before the one before it, and the standby takes over
/// within the lease's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_rollout_survives_the_management_api_server_and_the_leader_killed_mid_wave() {
    let Some(mut capi) = cluster_api().await else { return };
    let t = CapiTenant::on(capi.view(), "rollout").await;
    t.publish(V1, |_, text| text);
    let rollout = json!({"waves": [{"clusters": 1}, {"clusters": 2}, {"percent": 100}], "waveTimeout": "3m", "checkInterval": "500ms"});
    let config = t.config(|s| s.set("availableReleases", 2).set("rollout", rollout)).write();
    let lease = ["--leader-elect", "--lease-duration", "8s"];
    let mut a = t.start(&config, &lease).await;
    t.eventually(&a, "a leads", STEP, async || lease_holder(&t).await.is_some_and(|h| h.ends_with(&format!("_{}", a.pid())))).await;
    // The standby answers Cluster API's hooks (every replica does); the leader is the one killed.
    let b = t.launch(&config, "b.log").args(&lease).start().await;
    t.extension_config(&b.hooks_url().await).await;
    let names = ["c1", "c2", "c3", "c4", "c5", "c6"];
    for name in names {
        t.add_cluster(name, V1, K1, json!({})).await;
    }
    for name in names {
        wait_up(&t, &a, name, V1, K1).await;
    }
    let before = clusters(&t).await.expect("Clusters");

    t.publish(V2, v2_ungated);
    t.eventually(&a, "the rollout planned", STEP, async || rollout_status(&t, V2).await["plan"].as_array().is_some_and(|p| p.len() == 3))
        .await;
    let plan: Vec<BTreeSet<String>> = rollout_status(&t, V2).await["plan"]
        .as_array()
        .expect("plan")
        .iter()
        .map(|w| {
            w["clusters"].as_array().expect("clusters").iter().filter_map(|c| c.as_str()?.rsplit('/').next().map(str::to_owned)).collect()
        })
        .collect();
    eprintln!("plan: {plan:?}");

    // Every Cluster moved must have every Cluster of the waves before it moved too (one LIST is
    // one moment of the fleet); checked on every sample through both faults.
    let check = async || {
        let Some(now) = clusters(&t).await else { return };
        let moved: BTreeSet<&str> = now.iter().filter(|(_, (class, _))| class == V2).map(|(n, _)| n.as_str()).collect();
        for (i, wave) in plan.iter().enumerate().skip(1) {
            if wave.iter().any(|c| moved.contains(c.as_str())) {
                let earlier: Vec<&String> = plan[..i].iter().flatten().filter(|c| !moved.contains(c.as_str())).collect();
                assert!(earlier.is_empty(), "wave {} started with {earlier:?} of earlier waves not moved: {now:?}", i + 1);
            }
        }
        for (name, (_, generation)) in &now {
            let (_, was) = &before[name];
            assert!(*generation <= was + 1, "Cluster {name} changed twice (generation {was} → {generation}): moved twice?");
        }
    };

    // Wave 2 under way: the management API server SIGKILLed, back 3 s later.
    t.eventually(&a, "wave 2 started", STEP, async || {
        check().await;
        rollout_status(&t, V2).await["wave"].as_u64().is_some_and(|w| w >= 2)
    })
    .await;
    capi.mgmt_mut().kill("kube-apiserver");
    tokio::time::sleep(Duration::from_secs(3)).await;
    capi.mgmt_mut().restart("kube-apiserver").await.expect("management API server back");

    // Wave 3 under way (or about to be): the leader SIGKILLed; the standby takes over.
    t.eventually(&a, "wave 3 started", STEP, async || {
        check().await;
        rollout_status(&t, V2).await["wave"].as_u64().is_some_and(|w| w >= 3)
    })
    .await;
    let a_log = a.log();
    a.kill().await;
    let killed = Instant::now();
    let b_id = format!("_{}", b.pid());
    let took_over = t.eventually(&b, "b leads", STEP, async || lease_holder(&t).await.is_some_and(|h| h.ends_with(&b_id))).await;
    assert!(took_over < Duration::from_secs(8 + 10), "the standby took over {took_over:?} after the leader was killed (lease 8 s)");

    t.eventually(&b, "the rollout Complete", STEP, async || {
        check().await;
        rollout_phase(&t, V2).await == "Complete"
    })
    .await;
    for name in names {
        wait_up(&t, &b, name, V2, K2).await;
    }
    let after = clusters(&t).await.expect("Clusters");
    for name in names {
        assert_eq!(after[name].1, before[name].1 + 1, "{name} moved exactly once: {before:?} → {after:?}");
    }
    let moves =
        |log: &str, name: &str| log.lines().filter(|l| l.contains("rollout: Cluster moved") && l.contains(&format!("/{name} "))).count();
    for name in names {
        let total = moves(&a_log, name) + moves(&b.log(), name);
        assert!(total <= 1, "{name} moved {total} times:\na:\n{a_log}\nb:\n{}", b.log());
    }
    eprintln!(
        "RESULT: rollout of 6 Clusters in 3 waves through a management API server SIGKILL (3 s) and a leader SIGKILL: \
         the standby led {:.1}s after the kill, the rollout Complete {:.1}s after it; every Cluster moved once",
        took_over.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    );
    b.stop().await;
    t.delete().await;
    capi.stop();
}
