//! stacksync with the real Cluster API (v1.14 core manager, `ClusterTopology` and `RuntimeSDK`
//! on, its webhooks on loopback) on a real control plane, built by `scripts/build-cluster-api.sh`
//! and started by `testkit::capi` (docs/testing.md). Nothing of Cluster API is played by the
//! tests: its webhooks validate and default the ClusterClass stacksync renders from a release,
//! its topology controller creates each Cluster's control plane and infrastructure from it, it
//! discovers our extension through an `ExtensionConfig` and calls our hooks, and it holds an
//! upgrade until `BeforeClusterUpgrade` says go. The infrastructure and control-plane providers
//! are testkit's minimal ones (machines that boot at once); the workload clusters are a second
//! real control plane, where the addons become healthy through the real controllers and kwok.

mod common;

use std::time::{Duration, Instant};

use common::capi::{
    CapiTenant, K1, K2, STEP, V1, V2, applied, condition, hook_calls, open_gate, rollout_phase, rollout_status, v2_gated_by, v2_ungated,
    wait_up,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_accepts_our_class_syncs_its_clusters_and_holds_an_upgrade_until_the_stages_are_done() {
    let Some(t) = CapiTenant::new("upgrade").await else { return };
    let gate = format!("gate-{}", t.ns);
    t.publish(V1, |_, text| text);
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2).set("stageTimeout", "10m")).write(), &[]).await;

    // A Cluster naming the class: Cluster API accepts it before the class exists (with a
    // warning), and stacksync puts the ClusterClasses of the subscription's releases into every
    // namespace with a subscribed Cluster.
    let started = Instant::now();
    t.add_cluster("c1", V1, K1, json!({})).await;
    // The ClusterClass stacksync rendered from the release, through Cluster API's webhooks and
    // reconciled by its ClusterClass controller (templates resolved, variables in status).
    t.eventually(&daemon, "the ClusterClass accepted and reconciled by Cluster API", STEP, async || {
        t.cluster_classes().await.iter().any(|cc| cc["metadata"]["name"] == V1 && t.capi_condition(cc, "VariablesReady").0 == "True")
    })
    .await;
    // Our extension, discovered by Cluster API through the ExtensionConfig.
    t.eventually(&daemon, "the extension discovered", STEP, async || {
        let handlers = t.extension().await["status"]["handlers"].clone();
        handlers.as_array().is_some_and(|h| h.iter().any(|h| h["requestHook"]["hook"] == "BeforeClusterUpgrade"))
    })
    .await;

    // The Cluster's control plane and infrastructure are the topology controller's, with the
    // class's variable patched in; its addons are synced for real.
    wait_up(&t, &daemon, "c1", V1, K1).await;
    let up = started.elapsed();
    let cp = t.control_plane("c1").await.expect("control plane");
    assert_eq!(cp["spec"]["imageRepository"], "registry.k8s.io", "the ClusterClass's patch: {cp}");
    assert_eq!(cp["spec"]["version"], K1);
    // (Cluster API may still say False a moment, e.g. while it catches up with the class.)
    t.eventually(&daemon, "the Cluster's TopologyReconciled True", STEP, async || {
        t.capi_condition(&t.cluster("c1").await, "TopologyReconciled").0 == "True"
    })
    .await;
    let ns = t.addon_namespace("c1");
    let deployments: Api<Deployment> = Api::namespaced(t.workload(), &ns);
    let ms = deployments.get("metrics-server").await.expect("metrics-server in the workload cluster");
    assert!(ms.status.and_then(|s| s.available_replicas).unwrap_or(0) >= 1, "metrics-server Available");
    let cms: Api<ConfigMap> = Api::namespaced(t.workload(), &ns);
    let cni = cms.get("cni-config").await.expect("cni-config");
    assert_eq!(cni.data.unwrap_or_default().get("cluster-name").map(String::as_str), Some("c1"));
    // AfterControlPlaneInitialized: called by Cluster API once the control plane came up.
    let key = format!("{}/c1", t.ns);
    t.eventually(&daemon, "AfterControlPlaneInitialized called", STEP, async || {
        hook_calls(&daemon, "AfterControlPlaneInitialized", &key) >= 1
    })
    .await;

    // The next release, and the upgrade the SCS way: class and version together.
    t.publish(V2, v2_gated_by(&gate));
    t.class_reconciled(&daemon, V2).await;
    let requested = Instant::now();
    t.move_cluster("c1", V2, K2).await;

    // Cluster API asks; stacksync answers retry while the first stage's post-condition waits;
    // the control plane stays where it is.
    t.eventually(&daemon, "the upgrade held by BeforeClusterUpgrade", STEP, async || {
        hook_calls(&daemon, "BeforeClusterUpgrade", &key) >= 2
            && t.cluster_sync("c1").await["status"]["upgrade"]["waitingFor"].as_str().is_some_and(|w| w.contains(&gate))
    })
    .await;
    // Cluster API says so on the Cluster, quoting our answer: `ClusterUpgrading`, "Following
    // hooks are blocking upgrade: BeforeClusterUpgrade: Cluster …: BeforeClusterUpgrade stage 1/2
    // `cni` PostCondition (… → …): ConfigMap/kube-system/<gate> does not exist".
    t.eventually(&daemon, "the Cluster's TopologyReconciled names the blocking hook", STEP, async || {
        let (status, reason, message) = t.capi_condition(&t.cluster("c1").await, "TopologyReconciled");
        let (want_reason, want_message) = t.served.hook_blocking("BeforeClusterUpgrade");
        status == "False" && reason == want_reason && message.contains(&want_message) && message.contains(&gate)
    })
    .await;
    let cp = t.control_plane("c1").await.expect("control plane");
    assert_eq!(cp["spec"]["version"], K1, "Cluster API must not move the control plane while the hook says retry: {cp}");

    // The platform team's go: the stages finish, the hook says success, Cluster API upgrades.
    open_gate(&t, &gate).await;
    let mut released = Duration::ZERO;
    t.eventually(&daemon, "the control plane upgraded", STEP, async || {
        let moved = t.control_plane("c1").await.is_some_and(|cp| cp["spec"]["version"] == K2);
        if moved && released.is_zero() {
            released = requested.elapsed();
        }
        moved
    })
    .await;
    wait_up(&t, &daemon, "c1", V2, K2).await;
    let ms = deployments.get("metrics-server").await.expect("metrics-server");
    let image = ms.spec.template.spec.map(|s| s.containers[0].image.clone().unwrap_or_default()).unwrap_or_default();
    assert!(image.ends_with(":v0.8.0"), "V2's addons: {image}");
    let calls = hook_calls(&daemon, "BeforeClusterUpgrade", &key);
    eprintln!(
        "RESULT: Cluster c1 up on {V1} in {:.1}s; upgrade to {V2} held {:.1}s by BeforeClusterUpgrade ({calls} calls) until 2 stages were done; control plane now {K2}",
        up.as_secs_f64(),
        released.as_secs_f64()
    );
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_past_its_timeout_fails_the_hook_keeps_the_upgrade_held_and_shows_on_the_cluster_and_the_cluster_sync() {
    let Some(t) = CapiTenant::new("failure").await else { return };
    let gate = format!("gate-{}", t.ns);
    t.publish(V1, |_, text| text);
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2).set("stageTimeout", "3s")).write(), &[]).await;
    t.add_cluster("c1", V1, K1, json!({})).await;
    wait_up(&t, &daemon, "c1", V1, K1).await;
    t.publish(V2, v2_gated_by(&gate));
    t.class_reconciled(&daemon, V2).await;
    t.move_cluster("c1", V2, K2).await;

    // The stage waits past stageTimeout: UpgradeFailed on the ClusterSync, a Failure answer to
    // Cluster API, which keeps the control plane where it is and says so on the Cluster.
    // The ClusterSync turns UpgradeFailed first; Cluster API hears of it when it next calls the
    // hook (up to RETRY_AFTER_SECONDS later), so each is waited for, not read once: the retry
    // answers before it already name the gate.
    let key = format!("{}/c1", t.ns);
    t.eventually(&daemon, "UpgradeFailed on the ClusterSync", STEP, async || {
        condition(&t.cluster_sync("c1").await, "Ready").1 == "UpgradeFailed"
    })
    .await;
    t.eventually(&daemon, "the hook answering failure", STEP, async || {
        daemon.log().lines().any(|l| l.contains("runtime hook") && l.contains(&key) && l.contains("answer=failure"))
    })
    .await;
    // Cluster API v1.11 on quotes our answer's message; v1.10 only says the hook failed (the
    // message is in its log).
    t.eventually(&daemon, "the Cluster's TopologyReconciled showing the failure", STEP, async || {
        let (_, reason, message) = t.capi_condition(&t.cluster("c1").await, "TopologyReconciled");
        let shown = if t.served.quotes_hook_failures() {
            message.contains("stageTimeout")
        } else {
            message.contains("BeforeClusterUpgrade") && message.contains("got failure response")
        };
        shown && !reason.is_empty()
    })
    .await;
    let cp = t.control_plane("c1").await.expect("control plane");
    assert_eq!(cp["spec"]["version"], K1, "held: {cp}");
    let cs = t.cluster_sync("c1").await;
    assert!(condition(&cs, "Ready").2.contains(&gate), "the ClusterSync names what the stage waits for: {cs}");

    // Once the condition holds, the same upgrade goes on.
    open_gate(&t, &gate).await;
    wait_up(&t, &daemon, "c1", V2, K2).await;
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_rollout_moves_six_clusters_through_the_real_topology_controller() {
    let Some(t) = CapiTenant::new("rollout").await else { return };
    t.publish(V1, |_, text| text);
    let rollout = json!({
        "waves": [{"clusters": 1}, {"percent": 50}, {"percent": 100}],
        "canarySelector": {"matchLabels": {"canary": "true"}}, "waveTimeout": "2m", "checkInterval": "500ms",
    });
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2).set("rollout", rollout)).write(), &[]).await;
    let names = ["c1", "c2", "c3", "c4", "c5", "c6"];
    for name in names {
        t.add_cluster(name, V1, K1, json!({})).await;
    }
    t.clusters()
        .patch("c4", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"canary": "true"}}})))
        .await
        .expect("label the canary");
    for name in names {
        wait_up(&t, &daemon, name, V1, K1).await;
    }

    let started = Instant::now();
    t.publish(V2, v2_ungated);
    for name in names {
        wait_up(&t, &daemon, name, V2, K2).await;
    }
    let took = started.elapsed();
    t.eventually(&daemon, "the rollout Complete", STEP, async || rollout_phase(&t, V2).await == "Complete").await;
    // The canary went first, alone.
    let moved = |name: &str| {
        let log = daemon.log();
        log.lines().position(|l| l.contains("rollout: Cluster moved") && l.contains(&format!("/{name}"))).expect("moved")
    };
    assert!(names.iter().filter(|n| **n != "c4").all(|n| moved("c4") < moved(n)), "the canary first:\n{}", daemon.log());
    eprintln!(
        "RESULT: rollout of {V2} over 6 Clusters in 3 waves, carried out by Cluster API's topology controller: {:.1}s",
        took.as_secs_f64()
    );
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_stops_at_a_cluster_whose_control_plane_does_not_become_available() {
    let Some(t) = CapiTenant::new("stops").await else { return };
    t.publish(V1, |_, text| text);
    // `onFailure: rollback`: but c1's Kubernetes version moved (K1 to K2), which Cluster API
    // does not let anyone take back.
    let rollout =
        json!({"waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "20s", "checkInterval": "500ms", "onFailure": "rollback"});
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2).set("rollout", rollout)).write(), &[]).await;
    // c1 goes first (name order); its control plane never comes up at K2.
    t.add_cluster("c1", V1, K1, json!({testkit::capi::UNAVAILABLE_AT: K2})).await;
    t.add_cluster("c2", V1, K1, json!({})).await;
    wait_up(&t, &daemon, "c1", V1, K1).await;
    wait_up(&t, &daemon, "c2", V1, K1).await;
    t.publish(V2, v2_ungated);
    let mut last = String::new();
    t.eventually(&daemon, "the rollout paused at c1", STEP, async || {
        let now = rollout_status(&t, V2).await.to_string();
        if now != last {
            eprintln!("rollout: {now}");
            last = now;
        }
        rollout_phase(&t, V2).await == "Paused"
    })
    .await;
    let r = rollout_status(&t, V2).await;
    assert_eq!(r["reason"], "RollbackImpossible", "{r}");
    assert_eq!(r["failed"][0]["outcome"], "RollbackImpossible", "{r}");
    let detail = r["failed"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(&format!("from {K1} to {K2}")) && detail.contains("refuses to decrease"), "{r}");
    let cluster = t.cluster("c1").await;
    assert_eq!(cluster["spec"]["topology"]["version"], K2, "c1 was moved");
    assert_eq!(CapiTenant::class_of(&cluster), V2, "c1 was not moved back: {cluster}");
    assert_ne!(t.capi_condition(&cluster, "Available").0, "True", "Cluster API says c1 is not available: {cluster}");
    let c2 = t.cluster("c2").await;
    assert_eq!(CapiTenant::class_of(&c2), V1, "the second wave never started: {c2}");
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cluster_is_moved_back_through_the_real_webhooks_and_the_rollout_goes_on() {
    let Some(t) = CapiTenant::new("rollback").await else { return };
    t.publish(V1, |_, text| text);
    let rollout = json!({
        "waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "60s", "checkInterval": "500ms",
        "maxFailures": 1, "onFailure": "rollback",
    });
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2).set("rollout", rollout)).write(), &[]).await;
    let names = ["c1", "c2", "c3"];
    for name in names {
        t.add_cluster(name, V1, K1, json!({})).await;
    }
    for name in names {
        wait_up(&t, &daemon, name, V1, K1).await;
    }
    // V2 at V1's Kubernetes version (a release of addons and templates), whose CNI values cannot
    // be rendered for c2: c2 fails in wave 2 and goes back to V1 — a class change Cluster API's
    // webhooks judge (the two classes compatible) and its topology controller carries out.
    t.publish(V2, |path, text| {
        let text = v2_ungated(path, text);
        if path == "metadata.yaml" {
            text.replace(K2, K1)
        } else if path.ends_with("cni/overwrite.yaml") {
            text.replace(
                "values: |\n",
                "values: |\n  {{ if eq .Cluster.metadata.name \"c2\" }}{{ fail \"c2 cannot take this release\" }}{{ end }}\n",
            )
        } else {
            text
        }
    });
    let started = Instant::now();
    let mut last = String::new();
    t.eventually(&daemon, "the rollout Complete", STEP, async || {
        let now = rollout_status(&t, V2).await;
        let text = now.to_string();
        if text != last {
            eprintln!("rollout: {text}");
            last = text;
        }
        now["phase"] == "Complete"
    })
    .await;
    let r = rollout_status(&t, V2).await;
    assert_eq!(r["summary"], "2/3 (1 failed)", "{r}");
    let f = &r["failed"][0];
    assert_eq!((f["cluster"].as_str(), f["outcome"].as_str()), (Some(format!("{}/c2", t.ns)).as_deref(), Some("RolledBack")), "{r}");
    assert!(f["message"].as_str().is_some_and(|m| m.contains("c2 cannot take this release")), "{r}");
    // c2 runs V1 again, by Cluster API's word and by its ClusterSync; the others run V2.
    wait_up(&t, &daemon, "c2", V1, K1).await;
    for name in ["c1", "c3"] {
        wait_up(&t, &daemon, name, V2, K1).await;
    }
    let c2 = t.cluster("c2").await;
    assert_eq!(CapiTenant::class_of(&c2), V1, "{c2}");
    eprintln!(
        "RESULT: a three-Cluster rollout with one Cluster moved back, on the real Cluster API: {:.1}s",
        started.elapsed().as_secs_f64()
    );
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_rollout_moves_a_cluster_two_kubernetes_minors_one_at_a_time_through_the_real_cluster_api() {
    let Some(t) = CapiTenant::new("minors").await else { return };
    let (f33, f34, f36) = ("testkit-ferrol-1-33-v1", "testkit-ferrol-1-34-v1", "testkit-ferrol-1-36-v1");
    let (k33, k34) = ("v1.33.5", "v1.34.3");
    t.publish_family(f33, V1, k33, |_, text| text);
    t.publish_family(f34, V1, k34, |_, text| text);
    t.publish(V1, |_, text| text);
    t.publish(V2, v2_ungated);
    // A family outside the subscription's Kubernetes range: offered by the source, never applied.
    t.publish_family(f36, V1, "v1.36.0", |_, text| text);
    let line = |s: common::Sub| s.stack("testkit-ferrol").set("kubernetes", ">=1.33, <1.36").set("availableReleases", 2);
    let config = t.config(line);
    let path = config.write();
    let daemon = t.start(&path, &[]).await;
    t.add_cluster("c1", f33, k33, json!({})).await;
    t.add_cluster("c2", V1, K1, json!({})).await;
    wait_up(&t, &daemon, "c1", f33, k33).await;
    wait_up(&t, &daemon, "c2", V1, K1).await;
    let mut classes: Vec<String> =
        t.cluster_classes().await.iter().filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned)).collect();
    classes.sort();
    assert_eq!(classes, [f33, f34, V1, V2], "every family in range, none outside it");

    // `rollout:` configured (a reload): c1 (1.33) steps to 1.34's newest, then to V2 (1.35);
    // c2 (1.35) moves to V2 in one step.
    let rollout = json!({"waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "2m", "checkInterval": "500ms"});
    let with_rollout = t.config(|s| line(s).set("rollout", rollout)).text();
    // Before anything moves, `stacksync rollout plan` shows each Cluster's path.
    let plan_config = path.with_file_name("plan.yaml");
    std::fs::write(&plan_config, &with_rollout).expect("plan config");
    let o = common::cli(&["rollout", "plan", "--config", &plan_config.to_string_lossy(), &t.ns], &[]).await;
    let printed = String::from_utf8_lossy(&o.stdout);
    eprintln!("{printed}");
    assert!(o.status.success(), "{printed}{}", String::from_utf8_lossy(&o.stderr));
    assert!(printed.contains("not started: this is what it would do now"), "{printed}");
    let c1_path = format!("{}/c1: {f33}@{k33} -> {f34}@{k34} -> {V2}@{K2}", t.ns);
    assert!(printed.contains(&c1_path), "{printed}");
    assert!(printed.contains(&format!("{}/c2: {V1}@{K1} -> {V2}@{K2}", t.ns)), "{printed}");
    assert_eq!(CapiTenant::class_of(&t.cluster("c1").await), f33, "the plan moved nothing");
    let started = Instant::now();
    common::save_by_rename(&path, &with_rollout);
    t.eventually(&daemon, "the rollout Complete", STEP, async || rollout_phase(&t, V2).await == "Complete").await;
    let took = started.elapsed();
    let r = rollout_status(&t, V2).await;
    assert_eq!(r["plan"][0]["paths"], json!([{"cluster": format!("{}/c1", t.ns), "steps": [f34, V2]}]), "{r}");
    assert_eq!(r["summary"], "2/2", "{r}");
    wait_up(&t, &daemon, "c1", V2, K2).await;
    wait_up(&t, &daemon, "c2", V2, K2).await;
    // c1 went through 1.34, held by BeforeClusterUpgrade at each step: never two minors at once.
    let log = daemon.log();
    let moves: Vec<&str> = log.lines().filter(|l| l.contains(&format!("rollout: Cluster moved cluster={}/c1", t.ns))).collect();
    assert_eq!(moves.len(), 2, "{moves:#?}");
    assert!(moves[0].contains(f34) && moves[0].contains(k34) && moves[1].contains(V2) && moves[1].contains(K2), "{moves:#?}");
    assert!(hook_calls(&daemon, "BeforeClusterUpgrade", &format!("{}/c1", t.ns)) >= 2, "Cluster API asked before each step:\n{log}");
    let c2_moved = log.find(&format!("rollout: Cluster moved cluster={}/c2", t.ns)).expect("c2 moved");
    assert!(log.find(moves[1]).is_some_and(|i| i < c2_moved), "wave 2 started only once c1 was at the target");
    assert!(t.cluster_classes().await.iter().all(|c| c["metadata"]["name"] != f36), "the family outside the range was applied");
    eprintln!(
        "RESULT: a Cluster two Kubernetes minors behind stepped 1.33 -> 1.34 -> 1.35 and another moved within 1.35, on the real Cluster API: {:.1}s",
        took.as_secs_f64()
    );
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_is_left_alone_by_cluster_api_and_by_stacksync() {
    let Some(t) = CapiTenant::new("paused").await else { return };
    t.publish(V1, |_, text| text);
    let daemon = t.start(&t.config(|s| s.set("availableReleases", 2)).write(), &[]).await;
    t.add_cluster("c1", V1, K1, json!({})).await;
    wait_up(&t, &daemon, "c1", V1, K1).await;
    t.publish(V2, v2_ungated);
    t.class_reconciled(&daemon, V2).await;

    t.patch_cluster("c1", json!({"spec": {"paused": true}})).await;
    t.eventually(&daemon, "the ClusterSync says Paused", STEP, async || condition(&t.cluster_sync("c1").await, "Paused").0 == "True").await;
    let paused_reconciles = || daemon.log().matches("Cluster is paused").count();
    let before = paused_reconciles();
    t.move_cluster("c1", V2, K2).await;
    // Cluster API has seen the change and says the Cluster is paused (its Paused condition at
    // the new generation); stacksync has seen it too (one more reconcile that wrote nothing).
    let generation = t.cluster("c1").await["metadata"]["generation"].as_i64().expect("generation");
    t.eventually(&daemon, "both saw the paused Cluster's new class", STEP, async || {
        let cluster = t.cluster("c1").await;
        let paused = t
            .served
            .v1beta2_conditions(&cluster)
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Paused"))
            .is_some_and(|c| c["status"] == "True" && c["observedGeneration"].as_i64() >= Some(generation));
        paused && paused_reconciles() > before
    })
    .await;
    let cp = t.control_plane("c1").await.expect("control plane");
    assert_eq!(cp["spec"]["version"], K1, "Cluster API left the paused Cluster's control plane alone: {cp}");
    let cs = t.cluster_sync("c1").await;
    assert_eq!((applied(&cs), condition(&cs, "Paused").0.as_str()), (V1, "True"), "stacksync left the paused Cluster alone: {cs}");
    assert_eq!(hook_calls(&daemon, "BeforeClusterUpgrade", &format!("{}/c1", t.ns)), 0, "no upgrade asked for a paused Cluster");

    t.patch_cluster("c1", json!({"spec": {"paused": false}})).await;
    wait_up(&t, &daemon, "c1", V2, K2).await;
    daemon.stop().await;
    t.delete().await;
}

/// `examples/cluster-api/run.sh` as a user runs it (from a copy, so the checkout stays clean):
/// Cluster API on two real control planes, a Cluster up and synced, the upgrade held by the hook
/// until the gate opens, everything stopped; its last line reports the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_api_example_holds_an_upgrade_and_reports_it() {
    if !testkit::capi::available() {
        assert!(std::env::var_os("CI").is_none(), "Cluster API is not built (scripts/build-cluster-api.sh)");
        eprintln!("SKIPPED: Cluster API is not built (scripts/build-cluster-api.sh)");
        return;
    }
    let Some(out) = common::run_example("cluster-api", &[], &[("GATE_AFTER", "3")], Duration::from_secs(600)).await else { return };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("upgrade to testkit-ferrol-1-35-v2 held ")
            && last.contains(" by BeforeClusterUpgrade (")
            && last.ends_with("until 2 stages were done; control plane now v1.35.4"),
        "{stdout}"
    );
    assert!(stdout.contains("Following hooks are blocking upgrade: BeforeClusterUpgrade"), "{stdout}");
    eprintln!("RESULT (example): {last}");
}

/// The holder of Lease `name` in the tenant's namespace.
async fn lease_holder(t: &CapiTenant, name: &str) -> Option<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(t.client(), &t.ns);
    api.get_opt(name).await.ok()??.spec?.holder_identity.filter(|h| !h.is_empty())
}

fn holds(holder: Option<String>, daemon: &common::Daemon) -> bool {
    holder.is_some_and(|h| h.ends_with(&format!("_{}", daemon.pid())))
}

/// `rollout: Cluster moved` lines for Cluster `name` in `log`.
fn moves(log: &str, name: &str) -> usize {
    log.lines().filter(|l| l.contains("rollout: Cluster moved") && l.contains(&format!("/{name} "))).count()
}

/// Issue 39 item 5: with `--shard`, one rollout coordinator — elected on the Lease
/// `stacksync-rollout` among every shard's replicas — moves the Clusters of every shard, and
/// each shard upgrades its own. Shard `a` runs two replicas, shard `b` one, which also answers
/// Cluster API's hooks for every Cluster, `a`'s included; the coordinator is a replica of shard
/// `z`, which has no Cluster: it applies no ClusterClass and waits for the ones the other shards
/// apply. In wave 1 the coordinator and `a`'s leader are SIGKILLed together: the survivors take
/// both Leases and finish the rollout from its status. Each Cluster is moved once, and wave 2
/// starts only after wave 1 is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rollout_coordinator_moves_the_clusters_of_two_shards_and_a_survivor_finishes_it() {
    let Some(t) = CapiTenant::new("sharded").await else { return };
    t.publish(V1, |_, text| text);
    let rollout = json!({"waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "2m", "checkInterval": "500ms"});
    let config = t.config(|s| s.set("availableReleases", 2).set("rollout", rollout)).write();
    let args = |shard: &'static str| ["--shard", shard, "--leader-elect", "--lease-duration", "8s", "--lease-namespace", t.ns.as_str()];
    let started = Instant::now();
    let mut z = t.launch(&config, "z.log").args(&args("z")).start().await;
    t.eventually(&z, "z coordinates", STEP, async || holds(lease_holder(&t, "stacksync-rollout").await, &z)).await;
    // b answers the hooks of every Cluster (the ExtensionConfig points at it): the answer is
    // read from the Cluster's ClusterSync, whichever shard writes it.
    let b = t.start(&config, &args("b")).await;
    let mut a = t.launch(&config, "a.log").args(&args("a")).start().await;
    t.eventually(&a, "a leads shard a", STEP, async || holds(lease_holder(&t, "stacksync-a").await, &a)).await;
    let a2 = t.launch(&config, "a2.log").args(&args("a")).start().await;
    let rollout_held = "stacksync_lease_held{lease=\"stacksync-rollout\"}";
    assert_eq!((z.metric(rollout_held).await, b.metric(rollout_held).await), (1.0, 0.0));
    assert!(z.log_has("rollout coordinator: this process holds the lease"), "{}", z.log());

    let shards = [("c1", "a"), ("c2", "a"), ("c3", "b"), ("c4", "b")];
    for (name, shard) in shards {
        t.add_labelled_cluster(name, V1, K1, json!({}), json!({"stacksync.io/shard": shard})).await;
    }
    for (name, _) in shards {
        wait_up(&t, &b, name, V1, K1).await;
    }

    t.publish(V2, v2_ungated);
    let rolling = Instant::now();
    // Wave 2 must not start before wave 1 is done: whenever a LIST shows a Cluster of wave 2
    // moved, the control plane of wave 1's Cluster (read after it; it only goes forward) is at K2.
    let check = async || {
        let plan = rollout_status(&t, V2).await["plan"].clone();
        let Some([first, second]) = plan.as_array().map(Vec::as_slice) else { return };
        let name = |c: &serde_json::Value| c.as_str().and_then(|c| c.rsplit('/').next()).unwrap_or_default().to_owned();
        let (Some(w1), Some(w2)) = (first["clusters"].as_array(), second["clusters"].as_array()) else { return };
        let Ok(list) = t.clusters().list(&Default::default()).await else { return };
        let moved = |n: &str| list.items.iter().any(|c| c.metadata.name.as_deref() == Some(n) && CapiTenant::class_of(&c.data) == V2);
        if w2.iter().any(|c| moved(&name(c))) {
            for c in w1 {
                let cp = t.control_plane(&name(c)).await.unwrap_or_default();
                assert_eq!(cp["status"]["version"], K2, "wave 2 started before {} of wave 1 was done", name(c));
            }
        }
    };
    t.eventually(&z, "wave 1 moved by the coordinator", STEP, async || {
        check().await;
        shards.iter().any(|(n, _)| moves(&z.log(), n) == 1)
    })
    .await;
    // z waited for the ClusterClass the shards with Clusters applied: it applied none itself.
    assert!(!z.log_has("ClusterClass applied"), "{}", z.log());
    let logs_before = [z.log(), a.log()];
    tokio::join!(z.kill(), a.kill());
    let killed = Instant::now();
    let took = t
        .eventually(&b, "a survivor coordinates", STEP, async || {
            check().await;
            let holder = lease_holder(&t, "stacksync-rollout").await;
            holds(holder.clone(), &b) || holds(holder, &a2)
        })
        .await;
    t.eventually(&b, "the rollout Complete", STEP, async || {
        check().await;
        rollout_phase(&t, V2).await == "Complete"
    })
    .await;
    for (name, _) in shards {
        wait_up(&t, &b, name, V2, K2).await;
    }
    let took_all = rolling.elapsed();

    // Every Cluster of both shards moved exactly once, by whichever process coordinated.
    let logs = [&logs_before[0], &logs_before[1], &a2.log(), &b.log()];
    for (name, _) in shards {
        let total: usize = logs.iter().map(|l| moves(l, name)).sum();
        assert_eq!(total, 1, "{name} moved {total} times:\nz:\n{}\na2:\n{}\nb:\n{}", logs[0], a2.log(), b.log());
    }
    // b answered Cluster API's hooks for shard a's Clusters too (from their ClusterSyncs).
    for name in ["c1", "c2"] {
        let key = format!("{}/{name}", t.ns);
        assert!(hook_calls(&b, "BeforeClusterUpgrade", &key) >= 1, "b answered no BeforeClusterUpgrade for {key}:\n{}", b.log());
    }
    let (coordinator, survivor) = if holds(lease_holder(&t, "stacksync-rollout").await, &b) { (&b, "b") } else { (&a2, "a2") };
    assert!(coordinator.log_has("rollout coordinator: this process holds the lease"), "{}", coordinator.log());
    assert_eq!(coordinator.metric(rollout_held).await, 1.0);
    // Each shard's leader upgraded its own two Clusters, and none of the other's.
    assert!(holds(lease_holder(&t, "stacksync-a").await, &a2) && holds(lease_holder(&t, "stacksync-b").await, &b));
    let on_v2 = format!("stacksync_clusters_by_release{{subscription=\"{}\",release=\"{V2}\",ready=\"true\"}}", t.ns);
    t.eventually(&b, "each shard's leader counts its own two Clusters on V2", STEP, async || {
        (a2.metric(&on_v2).await, b.metric(&on_v2).await) == (2.0, 2.0)
    })
    .await;
    eprintln!(
        "RESULT: one rollout over 2 shards (4 Clusters, 2 waves) coordinated by a shard without Clusters; the coordinator and \
         shard a's leader SIGKILLed in wave 1, {survivor} took the rollout Lease {:.1}s later, rollout Complete {:.1}s after \
         the kill ({:.1}s after the release; {:.1}s in all); every Cluster moved once",
        took.as_secs_f64(),
        killed.elapsed().as_secs_f64(),
        took_all.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
    b.stop().await;
    a2.stop().await;
    t.delete().await;
}
