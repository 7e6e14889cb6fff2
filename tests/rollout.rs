//! Fleet rollouts (`rollout:`) with the real binary as a daemon against testkit API servers.
//! Cluster API's part is played by a task of the test: once a Cluster's class names the new
//! release, it reports the control plane at the Cluster's `spec.topology.version` and the
//! Cluster available — except for the Clusters the test keeps broken.

mod common;

use common::fleet::{Env, NS, publish_v3_on};
use common::{Daemon, Sub, cli, save_by_rename};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const V3: &str = "docker-ferrol-1-27-v3";
const V4: &str = "docker-ferrol-1-27-v4";

/// A cluster-stack config polling every second, with `rollout` (or none).
fn config(env: &Env, rollout: Option<Value>) -> PathBuf {
    std::fs::write(env.dir.path().join("stacksync.yaml"), config_text(env, rollout)).expect("config");
    env.dir.path().join("stacksync.yaml")
}

fn config_text(env: &Env, rollout: Option<Value>) -> String {
    let sub = |s: Sub| match rollout {
        Some(r) => s.set("rollout", r),
        None => s,
    };
    env.stack_config(|s| sub(s.interval("1s").set("availableReleases", 2))).text()
}

/// Two waves, one Cluster and then the rest, checked every `check`.
fn two_waves(check: &str) -> Option<Value> {
    Some(json!({"waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "1h", "checkInterval": check}))
}

fn kcps(env: &Env) -> Api<DynamicObject> {
    let res = common::res("controlplane.cluster.x-k8s.io", "v1beta1", "KubeadmControlPlane");
    Api::namespaced_with(env.mgmt(), NS, &res)
}

/// `n` Clusters `c00`.. on v3, each with a KubeadmControlPlane at v1.27.3, its own workload
/// cluster, and Cluster API's conditions saying it is available.
async fn fleet(env: &Env, n: usize) {
    for i in 0..n {
        let name = format!("c{i:02}");
        env.add_cluster(&name, V3, true).await;
        let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": {"name": name, "namespace": NS}, "spec": {"version": "v1.27.3"}});
        kcps(env).patch(&name, &PatchParams::apply("capi"), &Patch::Apply(kcp)).await.expect("kcp");
        env.patch_cluster(
            &name,
            json!({"spec": {"controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": name}}}),
        )
        .await;
        report(env, &name, "v1.27.3").await;
        env.add_kubeconfig(&name, i).await;
    }
}

/// Cluster API's part for one Cluster: the control plane runs `version`, the Cluster is
/// available (v1beta1 `Ready` and `ControlPlaneReady`, and v1beta2 `Available`).
async fn report(env: &Env, name: &str, version: &str) {
    let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "metadata": {"name": name}, "status": {"version": version}});
    kcps(env).patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(kcp)).await.expect("kcp status");
    let t = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": "2026-11-23T00:00:00Z"});
    let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name},
        "status": {"controlPlaneReady": true, "conditions": [t("Ready"), t("ControlPlaneReady"), t("Available")]}});
    env.clusters().patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
}

/// Plays Cluster API until `stop`: a Cluster whose class moved on from v3 (and is not `broken`)
/// gets its control plane upgraded to its `spec.topology.version`, once per class.
fn play_cluster_api(
    env: &Arc<Env>,
    broken: Arc<Mutex<BTreeSet<String>>>,
) -> (tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let env = env.clone();
    let task = tokio::spawn(async move {
        let mut upgraded = BTreeSet::new();
        loop {
            for c in env.clusters().list(&Default::default()).await.expect("clusters").items {
                let name = c.metadata.name.clone().unwrap_or_default();
                let version = c.data["spec"]["topology"]["version"].as_str().unwrap_or_default().to_owned();
                let skip = broken.lock().expect("lock").contains(&name);
                let class = c.data["spec"]["topology"]["class"].as_str().unwrap_or_default().to_owned();
                if class != V3 && !skip && upgraded.insert((name.clone(), class)) {
                    report(&env, &name, &version).await;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stopped.changed() => return,
            }
        }
    });
    (stop, task)
}

async fn classes(env: &Env) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env
        .clusters()
        .list(&Default::default())
        .await
        .expect("clusters")
        .items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c.data["spec"]["topology"]["class"].as_str().unwrap_or_default().to_owned()))
        .collect();
    out.sort();
    out
}

async fn on_v4(env: &Env) -> BTreeSet<String> {
    classes(env).await.into_iter().filter(|(_, c)| c == V4).map(|(n, _)| n).collect()
}

async fn rollout(env: &Env) -> Value {
    rollout_of(env, V4).await
}

async fn rollout_of(env: &Env, tag: &str) -> Value {
    let res = common::res("stacksync.io", "v1alpha1", "StackRelease");
    let api: Api<DynamicObject> = Api::all_with(env.mgmt(), &res);
    match api.get_opt(&format!("ferrol.{tag}")).await.expect("get StackRelease") {
        Some(o) => serde_json::to_value(o).expect("json")["status"]["rollout"].clone(),
        None => Value::Null,
    }
}

fn kubectl(env: &Env, args: &[&str]) -> String {
    let bin = fake_apiserver::kubectl::tools_bin_dir().join("kubectl");
    let out = std::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(env.mgmt.kubeconfig())
        .args(args)
        .output()
        .expect("run kubectl (scripts/install-tools.sh)");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn rollout_cli(config: &Path, action: &str) -> String {
    let o = cli(&["rollout", action, "--config", &config.to_string_lossy(), "ferrol"], &[]).await;
    assert!(o.status.success(), "rollout {action}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_wave_rollout_pauses_at_a_failing_cluster_survives_a_restart_and_resumes() {
    let env = Arc::new(Env::new(10).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    fleet(&env, 10).await;
    // c07 is the canary: it goes first, whatever its name.
    env.patch_cluster("c07", json!({"metadata": {"labels": {"canary": "yes"}}})).await;
    let waves = json!({
        "waves": [{"clusters": 1}, {"percent": 50}, {"percent": 100}],
        "canarySelector": {"matchLabels": {"canary": "yes"}}, "waveTimeout": "20s", "checkInterval": "250ms",
    });
    let config = config(&env, Some(waves));
    let broken = Arc::new(Mutex::new(BTreeSet::from(["c02".to_owned()])));
    let (stop, capi) = play_cluster_api(&env, broken.clone());
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("the fleet on v3", Duration::from_secs(60), async || {
            let mut ready = 0;
            for i in 0..10 {
                ready += usize::from(env.ready_reason(&format!("c{i:02}")).await.is_some_and(|(s, _)| s == "True"));
            }
            ready == 10
        })
        .await;
    assert!(rollout(&env).await.is_null());

    // v4 is published (Kubernetes v1.27.5): wave 1 is the canary.
    publish_v3_on(&env.repo, "v4", "v1.27.5", &[]);
    // (The Clusters are edited before the rollout's status is written.)
    daemon
        .eventually("wave 1 started", Duration::from_secs(30), async || {
            !on_v4(&env).await.is_empty() && rollout(&env).await["plan"][0]["phase"] == "Progressing"
        })
        .await;
    assert_eq!(on_v4(&env).await, BTreeSet::from(["c07".to_owned()]));
    let r = rollout(&env).await;
    assert_eq!(r["plan"][0]["clusters"], json!(["team-a/c07"]), "{r}");
    assert_eq!(r["plan"][1]["clusters"], json!(["team-a/c00", "team-a/c01", "team-a/c02", "team-a/c03"]), "{r}");
    let c07 = env.clusters().get("c07").await.expect("c07");
    assert_eq!(c07.data["spec"]["topology"]["version"], "v1.27.5", "the release's Kubernetes version");

    // Wave 2: c02's control plane never reports v1.27.5; paused past waveTimeout, naming it.
    let took = daemon.eventually("paused at c02", Duration::from_secs(60), async || rollout(&env).await["phase"] == "Paused").await;
    let r = rollout(&env).await;
    eprintln!("paused {took:?} after wave 1 started: {}", r["message"]);
    assert_eq!((r["reason"].as_str(), r["wave"].as_u64()), (Some("WaveTimeout"), Some(2)), "{r}");
    let message = r["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("team-a/c02 not done within waveTimeout 20s") && message.contains("v1.27.5"), "{r}");
    // c02 is given up on (left as it is, `onFailure: pause`): named in status, counted apart.
    assert_eq!(r["summary"], "4/10 (1 failed)", "{r}");
    assert_eq!((r["failed"][0]["cluster"].as_str(), r["failed"][0]["reason"].as_str()), (Some("team-a/c02"), Some("WaveTimeout")), "{r}");
    assert_eq!(r["failed"][0]["outcome"], "LeftAlone", "{r}");
    let wave3 = ["c04", "c05", "c06", "c08", "c09"];
    let moved = on_v4(&env).await;
    assert!(wave3.iter().all(|c| !moved.contains(*c)), "wave 3 touched: {moved:?}");
    let table = kubectl(&env, &["get", "stackreleases", "-o", "wide"]);
    eprintln!("{table}");
    let row = table.lines().find(|l| l.starts_with(&format!("ferrol.{V4}"))).expect("row");
    assert!(row.contains("4/10") && row.contains("2/3") && row.contains("Paused"), "{table}");
    daemon
        .eventually("a RolloutPaused event", Duration::from_secs(10), async || {
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.mgmt());
            let list = events.list(&Default::default()).await.expect("events").items;
            list.iter().any(|e| e.reason.as_deref() == Some("RolloutPaused") && e.note.as_deref().is_some_and(|n| n.contains("team-a/c02")))
        })
        .await;
    daemon.stop().await;

    // A restart keeps the pause: nothing further is touched. (It comes back with a waveTimeout
    // of an hour: what is shown from here on is the resume, not how fast five Clusters upgrade.)
    let waves = json!({
        "waves": [{"clusters": 1}, {"percent": 50}, {"percent": 100}],
        "canarySelector": {"matchLabels": {"canary": "yes"}}, "waveTimeout": "1h", "checkInterval": "250ms",
    });
    let config = self::config(&env, Some(waves));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon2.log")).await;
    daemon.eventually("the restarted daemon looks", Duration::from_secs(30), async || daemon.log().contains("Cluster API found")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rollout(&env).await["phase"], "Paused");
    assert_eq!(on_v4(&env).await, moved);

    // The operator fixes c02 and resumes: waves 2 and 3 finish.
    broken.lock().expect("lock").clear();
    let printed = rollout_cli(&config, "resume").await;
    assert!(printed.contains("resume requested"), "{printed}");
    let took = daemon.eventually("rollout complete", Duration::from_secs(90), async || rollout(&env).await["phase"] == "Complete").await;
    eprintln!("complete {took:?} after the resume");
    let r = rollout(&env).await;
    assert_eq!((r["summary"].as_str(), r["waveSummary"].as_str()), (Some("10/10"), Some("3/3")), "{r}");
    assert_eq!(on_v4(&env).await.len(), 10);
    for (name, _) in classes(&env).await {
        let applied = env.cluster_sync(&name).await.unwrap_or_default()["status"]["appliedRelease"]["tag"].clone();
        assert_eq!(applied, V4, "{name}");
    }
    daemon.stop().await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rollout_nothing_moves_and_a_pause_stops_at_the_wave_boundary() {
    let env = Arc::new(Env::new(3).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    publish_v3_on(&env.repo, "v4", "v1.27.5", &[]);
    fleet(&env, 3).await;
    let broken = Arc::new(Mutex::new(BTreeSet::from(["c00".to_owned()])));
    let (stop, capi) = play_cluster_api(&env, broken.clone());

    // No `rollout:`: v4 is offered (its ClusterClass is there), the Clusters stay on v3.
    let plain = config(&env, None);
    let daemon = Daemon::start(&plain, env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("the fleet synced on v3", Duration::from_secs(60), async || {
            let mut ready = 0;
            for i in 0..3 {
                ready += usize::from(env.ready_reason(&format!("c{i:02}")).await.is_some_and(|(s, _)| s == "True"));
            }
            ready == 3 && env.cluster_classes().await.contains(&V4.to_owned())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(on_v4(&env).await.is_empty(), "a Cluster was moved without `rollout:`");
    assert!(rollout(&env).await.is_null());
    daemon.stop().await;

    // With `rollout:`: wave 1 (c00) starts; a pause asked for during it stops before wave 2.
    let config = config(&env, two_waves("250ms"));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon2.log")).await;
    daemon.eventually("wave 1 started", Duration::from_secs(30), async || rollout(&env).await["phase"] == "Progressing").await;
    let printed = rollout_cli(&config, "pause").await;
    assert!(printed.contains("next wave boundary"), "{printed}");
    broken.lock().expect("lock").clear();
    daemon.eventually("paused at the boundary", Duration::from_secs(60), async || rollout(&env).await["phase"] == "Paused").await;
    let r = rollout(&env).await;
    assert_eq!((r["reason"].as_str(), r["wave"].as_u64(), r["summary"].as_str()), (Some("PauseRequested"), Some(2), Some("1/3")), "{r}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(on_v4(&env).await, BTreeSet::from(["c00".to_owned()]), "wave 2 started despite the pause");
    daemon.stop().await;

    // A resume is acted on at once, not at the next check: with `checkInterval: 1h` the daemon
    // sees the request on its StackRelease watch and starts wave 2.
    let config = self::config(&env, two_waves("1h"));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon3.log")).await;
    daemon.eventually("the restarted daemon looks", Duration::from_secs(30), async || daemon.log().contains("Cluster API found")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rollout(&env).await["phase"], "Paused");
    let asked = std::time::Instant::now();
    rollout_cli(&config, "resume").await;
    // Within seconds, where the next check would be an hour away (the Clusters are edited
    // before the rollout's status is written).
    daemon
        .eventually("the resume acted on", Duration::from_secs(30), async || {
            on_v4(&env).await.len() == 3 && ["Progressing", "Complete"].contains(&rollout(&env).await["phase"].as_str().unwrap_or_default())
        })
        .await;
    let took = asked.elapsed();
    eprintln!("resume acted on {took:?} after `stacksync rollout resume` (checkInterval 1h)");
    daemon.stop().await;

    // Resuming a rollout that is not paused is an error; this one finishes at its checks.
    let config = self::config(&env, two_waves("250ms"));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon4.log")).await;
    daemon.eventually("rollout complete", Duration::from_secs(60), async || rollout(&env).await["phase"] == "Complete").await;
    assert_eq!(on_v4(&env).await.len(), 3);
    let o = cli(&["rollout", "resume", "--config", &config.to_string_lossy(), "ferrol"], &[]).await;
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("has no paused rollout"), "{o:?}");
    daemon.stop().await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_release_supersedes_a_running_rollout() {
    let env = Arc::new(Env::new(2).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    // v4 moves the Kubernetes version too, so the broken c00 (its control plane never reports
    // v1.27.4) really holds v4's first wave until v5 arrives: with v3's version it would be done
    // at once and v4's rollout could complete before v5 is seen (a race, seen in a full run).
    publish_v3_on(&env.repo, "v4", "v1.27.4", &[]);
    fleet(&env, 2).await;
    let broken = Arc::new(Mutex::new(BTreeSet::from(["c00".to_owned()])));
    let (stop, capi) = play_cluster_api(&env, broken.clone());
    let config = config(&env, two_waves("250ms"));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon.eventually("the v4 rollout runs", Duration::from_secs(30), async || rollout(&env).await["phase"] == "Progressing").await;

    // v5 while c00 is still in v4's first wave: v5's rollout takes over both Clusters.
    publish_v3_on(&env.repo, "v5", "v1.27.5", &[]);
    let v5 = "docker-ferrol-1-27-v5";
    // (Progressing, not merely there: it may say Waiting while v5's StackRelease has no status
    // yet, and v4 is superseded once v5's rollout starts.)
    daemon.eventually("the v5 rollout runs", Duration::from_secs(30), async || rollout_of(&env, v5).await["phase"] == "Progressing").await;
    let r = rollout(&env).await;
    assert_eq!(r["phase"], "Superseded", "{r}");
    assert!(r["message"].as_str().is_some_and(|m| m.contains(v5)), "{r}");
    assert_eq!(rollout_of(&env, v5).await["total"], 2);
    broken.lock().expect("lock").clear();
    daemon.eventually("the v5 rollout complete", Duration::from_secs(60), async || rollout_of(&env, v5).await["phase"] == "Complete").await;
    let all: Vec<String> = classes(&env).await.into_iter().map(|(_, c)| c).collect();
    assert_eq!(all, [v5, v5]);
    daemon.stop().await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}

/// Replaces the config the way editors do (temp file, rename), for the daemon's hot reload.
async fn events_with(env: &Env, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.mgmt());
    let list = events.list(&Default::default()).await.expect("events").items;
    list.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).map(|e| e.note.unwrap_or_default()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_waits_for_a_failed_cluster_class_and_stops_when_rollout_is_removed() {
    let env = Arc::new(Env::new(2).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    // v4's ClusterClass chart does not render: its rollout waits, saying why.
    let broken_class = ("docker-ferrol-1-27-cluster-class-v4/templates/broken.yaml", "{{ fail \"the v4 class is broken on purpose\" }}\n");
    publish_v3_on(&env.repo, "v4", "v1.27.3", &[broken_class]);
    fleet(&env, 2).await;
    let broken = Arc::new(Mutex::new(BTreeSet::from(["c00".to_owned()])));
    let (stop, capi) = play_cluster_api(&env, broken.clone());
    let config = config(&env, two_waves("250ms"));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    // Waiting first while v4's StackRelease has no status yet, then saying why it failed.
    daemon
        .eventually("the v4 rollout waits for the broken class", Duration::from_secs(60), async || {
            let r = rollout(&env).await;
            r["phase"] == "Waiting" && r["message"].as_str().is_some_and(|m| m.contains("broken on purpose"))
        })
        .await;
    let r = rollout(&env).await;
    let message = r["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(&format!("ClusterClass {V4} is not applied: ")) && message.contains("broken on purpose"), "{r}");
    assert_eq!((r["reason"].as_str(), r["summary"].as_str()), (Some("ClassNotApplied"), Some("0/2")), "{r}");
    let table = kubectl(&env, &["get", "stackreleases"]);
    assert!(table.lines().any(|l| l.starts_with(&format!("ferrol.{V4}")) && l.contains("0/2")), "{table}");
    // Said once, not at every check (every 250 ms).
    daemon
        .eventually("a RolloutWaiting event", Duration::from_secs(10), async || {
            events_with(&env, "RolloutWaiting").await.iter().any(|n| n.contains("broken on purpose"))
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // (An earlier "no status yet" may have been said before v4's StackRelease recorded the failure.)
    let log = daemon.log();
    assert_eq!(log.lines().filter(|l| l.contains("rollout waiting") && l.contains("broken on purpose")).count(), 1, "{log}");
    assert_eq!(events_with(&env, "RolloutWaiting").await.iter().filter(|n| n.contains("broken on purpose")).count(), 1);
    assert!(on_v4(&env).await.is_empty(), "a Cluster was moved to a class that is not applied");

    // v5 is fine: its rollout supersedes the waiting one; wave 1 (c00) stays unfinished.
    publish_v3_on(&env.repo, "v5", "v1.27.3", &[]);
    let v5 = "docker-ferrol-1-27-v5";
    daemon.eventually("the v5 rollout runs", Duration::from_secs(60), async || rollout_of(&env, v5).await["phase"] == "Progressing").await;
    assert_eq!(rollout(&env).await["phase"], "Superseded");
    daemon.eventually("c00 moved", Duration::from_secs(30), async || classes(&env).await.iter().any(|(n, c)| n == "c00" && c == v5)).await;

    // `rollout:` removed (hot reload): the rollout ends, saying so; c01 is not moved.
    let with_rollout = std::fs::read_to_string(&config).expect("config");
    save_by_rename(&config, &self::config_text(&env, None));
    daemon.eventually("the v5 rollout stopped", Duration::from_secs(30), async || rollout_of(&env, v5).await["phase"] == "Stopped").await;
    let r = rollout_of(&env, v5).await;
    assert_eq!(r["reason"], "RolloutRemoved", "{r}");
    assert!(
        r["message"].as_str().is_some_and(|m| m.starts_with("`rollout:` was removed from subscription `ferrol`; nothing further is moved")),
        "{r}"
    );
    daemon
        .eventually("a RolloutStopped event", Duration::from_secs(10), async || !events_with(&env, "RolloutStopped").await.is_empty())
        .await;
    broken.lock().expect("lock").clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(classes(&env).await.iter().any(|(n, c)| n == "c01" && c == V3), "c01 was moved after the rollout stopped");
    assert_eq!(rollout_of(&env, v5).await["phase"], "Stopped");

    // `rollout:` back: a new rollout moves the Clusters still on older releases (c01).
    save_by_rename(&config, &with_rollout);
    daemon
        .eventually("the new v5 rollout complete", Duration::from_secs(60), async || rollout_of(&env, v5).await["phase"] == "Complete")
        .await;
    let r = rollout_of(&env, v5).await;
    assert_eq!((r["total"].as_u64(), r["summary"].as_str()), (Some(1), Some("1/1")), "{r}");
    let all: Vec<String> = classes(&env).await.into_iter().map(|(_, c)| c).collect();
    assert_eq!(all, [v5, v5]);
    daemon.stop().await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_edit_that_fails_is_tried_again_not_taken_for_a_change_by_someone_else() {
    let env = Arc::new(Env::new(2).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    fleet(&env, 2).await;
    // The rollout's edit of c00 meets a conflict twice (Cluster API wrote the Cluster in
    // between, as its status writes do all the time): c00 is still on v3 at the next check.
    let conflict = fake_apiserver::FaultRule::new().verb("patch").path(&format!("/namespaces/{NS}/clusters/c00")).status(409).times(2);
    env.mgmt.faults().add(conflict);
    let (stop, capi) = play_cluster_api(&env, Arc::default());
    let config = config(&env, two_waves("250ms"));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("the fleet synced on v3", Duration::from_secs(60), async || env.cluster_classes().await.contains(&V3.to_owned()))
        .await;
    publish_v3_on(&env.repo, "v4", "v1.27.4", &[]);
    daemon.eventually("the v4 rollout complete", Duration::from_secs(60), async || rollout(&env).await["phase"] == "Complete").await;
    assert_eq!(on_v4(&env).await.len(), 2);
    // The conflict said once at WARN (the same one again at DEBUG); the third edit took.
    let log = daemon.log();
    let warned = log.lines().filter(|l| l.contains(" WARN ") && l.contains("tried again at the next check")).count();
    assert_eq!(warned, 1, "{log}");
    assert!(!log.contains("rollout paused"), "{log}");
    daemon.stop().await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}

/// Waits until the ClusterSyncs of `c00`.. (`n` of them) applied `tag`.
async fn fleet_applied(env: &Env, daemon: &Daemon, n: usize, tag: &str) {
    daemon
        .eventually(&format!("the fleet on {tag}"), Duration::from_secs(60), async || {
            let mut applied = 0;
            for i in 0..n {
                applied += usize::from(env.applied_tag(&format!("c{i:02}")).await == tag);
            }
            applied == n
        })
        .await;
}

/// Cluster API's part for a Cluster a release breaks: `name` is reported unavailable from now on
/// — its control plane up and keeping its version, its machines not ready (`MachinesNotReady`),
/// so its ClusterSync stays Ready on the release it runs and a rollout may move it (one whose
/// control plane is down is never moved: `NotReadyBeforeMove`) — and available again once it
/// was moved and is back on v3 (going back mends it).
async fn broken_until_back(env: &Arc<Env>, name: &'static str) -> (tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let t = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": "2026-11-23T00:00:00Z"});
    let f = |ty: &str| json!({"type": ty, "status": "False", "reason": "MachinesNotReady", "lastTransitionTime": "2026-11-23T00:00:00Z"});
    let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name},
        "status": {"controlPlaneReady": true, "conditions": [f("Ready"), t("ControlPlaneReady"), f("Available")]}});
    env.clusters().patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let env = env.clone();
    let task = tokio::spawn(async move {
        let mut moved = false;
        loop {
            let c = env.clusters().get(name).await.expect("cluster");
            let on_v3 = c.data["spec"]["topology"]["class"] == V3;
            if !on_v3 {
                moved = true;
            } else if moved {
                report(&env, name, "v1.27.3").await;
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stopped.changed() => return,
            }
        }
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failing_within_max_failures_is_moved_back_and_the_rollout_goes_on() {
    let env = Arc::new(Env::new(4).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    fleet(&env, 4).await;
    // c02 (wave 2) never becomes available on v4; the others do.
    let broken = Arc::new(Mutex::new(BTreeSet::from(["c02".to_owned()])));
    let (stop, capi) = play_cluster_api(&env, broken.clone());
    let rollout_cfg = json!({
        "waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "5s", "checkInterval": "250ms",
        "maxFailures": 1, "onFailure": "rollback",
    });
    let config = config(&env, Some(rollout_cfg));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    fleet_applied(&env, &daemon, 4, V3).await;

    // v4 keeps the Kubernetes version (v1.27.3): a failed Cluster can go back to v3. c02 is
    // unavailable from here until it is back on v3.
    let (stop_failing, failing) = broken_until_back(&env, "c02").await;
    publish_v3_on(&env.repo, "v4", "v1.27.3", &[]);
    let took = daemon.eventually("rollout complete", Duration::from_secs(90), async || rollout(&env).await["phase"] == "Complete").await;
    let r = rollout(&env).await;
    eprintln!("complete {took:?} after v4 was published: {r}");
    assert_eq!(r["summary"], "3/4 (1 failed)", "{r}");
    let f = &r["failed"][0];
    assert_eq!(
        (f["cluster"].as_str(), f["wave"].as_u64(), f["reason"].as_str(), f["outcome"].as_str()),
        (Some("team-a/c02"), Some(2), Some("WaveTimeout"), Some("RolledBack")),
        "{r}"
    );
    assert!(f["message"].as_str().is_some_and(|m| m.contains("not done within waveTimeout 5s")), "{r}");
    let wave2 = &r["plan"][1];
    assert!(wave2["movedFrom"].as_array().is_some_and(|m| m.iter().any(|m| m["cluster"] == "team-a/c02" && m["class"] == V3)), "{r}");
    // c02 is back on v3, the ClusterClass and addons of v3 applied again; the others run v4.
    assert_eq!(
        classes(&env).await,
        [("c00", V4), ("c01", V4), ("c02", V3), ("c03", V4)].map(|(n, c)| (n.to_owned(), c.to_owned())).to_vec()
    );
    daemon.eventually("c02's addons back on v3", Duration::from_secs(30), async || env.applied_tag("c02").await == V3).await;
    for name in ["c00", "c01", "c03"] {
        daemon.eventually(&format!("{name} on v4"), Duration::from_secs(30), async || env.applied_tag(name).await == V4).await;
    }
    daemon
        .eventually("a RolloutClusterFailed Event naming c02", Duration::from_secs(10), async || {
            events_with(&env, "RolloutClusterFailed").await.iter().any(|n| n.contains("team-a/c02") && n.contains("moving it back"))
        })
        .await;
    assert_eq!(daemon.metric("stacksync_rollout_failed_clusters{subscription=\"ferrol\"}").await, 1.0);
    assert!(daemon.log_has("rollout: Cluster moved back to the class it had before the rollout"), "{}", daemon.log());
    let moves = daemon.log().lines().filter(|l| l.contains("rollout: Cluster moved cluster=team-a/c02")).count();
    assert_eq!(moves, 2, "moved once to v4 and once back:\n{}", daemon.log());

    daemon.stop().await;
    let _ = stop_failing.send(true);
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), failing).await.expect("failing task stopped").expect("task");
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_waits_for_its_maintenance_windows_canaries_first() {
    let env = Arc::new(Env::new(3).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    fleet(&env, 3).await;
    env.patch_cluster("c02", json!({"metadata": {"labels": {"canary": "yes"}}})).await;
    let broken = Arc::new(Mutex::new(BTreeSet::new()));
    let (stop, capi) = play_cluster_api(&env, broken);
    // A window of an hour in India (UTC+5:30, no daylight saving), starting 12 hours from now:
    // not open now.
    let ist = chrono::FixedOffset::east_opt(5 * 3600 + 1800).expect("offset");
    let local = chrono::Utc::now().with_timezone(&ist);
    let hour = (chrono::Timelike::hour(&local) + 12) % 24;
    let mut opens = local.date_naive().and_hms_opt(hour, 0, 0).expect("time").and_local_timezone(ist).single().expect("time");
    if opens <= local {
        opens += chrono::Duration::days(1);
    }
    let opens = opens.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let later = json!({"schedule": format!("0 {hour} * * *"), "duration": "1h", "timeZone": "Asia/Kolkata"});
    let always = |selector: Option<Value>| {
        let mut w = json!({"schedule": "* * * * *", "duration": "1h"});
        if let Some(s) = selector {
            w["clusterSelector"] = s;
        }
        w
    };
    let with_windows = |windows: Value| {
        json!({
            "waves": [{"clusters": 1}, {"percent": 100}], "canarySelector": {"matchLabels": {"canary": "yes"}},
            "waveTimeout": "1h", "checkInterval": "250ms", "windows": windows,
        })
    };
    let config = config(&env, Some(with_windows(json!([later]))));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    fleet_applied(&env, &daemon, 3, V3).await;

    publish_v3_on(&env.repo, "v4", "v1.27.5", &[]);
    daemon
        .eventually("the rollout waits for its window", Duration::from_secs(30), async || rollout(&env).await["reason"] == "OutsideWindow")
        .await;
    let r = rollout(&env).await;
    assert_eq!(r["nextWindow"], opens, "{r}");
    assert_eq!((r["phase"].as_str(), r["plan"][0]["phase"].as_str()), (Some("Progressing"), Some("Pending")), "{r}");
    assert!(r["message"].as_str().is_some_and(|m| m.contains("waiting for a maintenance window")), "{r}");
    assert_eq!(daemon.metric("stacksync_rollout_waiting_for_window{subscription=\"ferrol\"}").await, 1.0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(on_v4(&env).await.is_empty(), "a Cluster was moved outside its windows");
    let notes = events_with(&env, "RolloutOutsideWindow").await;
    assert_eq!(notes.len(), 1, "said once: {notes:?}");

    // The canaries get a window open now (a reload): wave 1 (the canary) goes, wave 2 waits.
    save_by_rename(
        &config,
        &config_text(&env, Some(with_windows(json!([later, always(Some(json!({"matchLabels": {"canary": "yes"}})))])))),
    );
    daemon.eventually("the canary moved", Duration::from_secs(30), async || on_v4(&env).await.contains("c02")).await;
    daemon
        .eventually("wave 2 waits for its window", Duration::from_secs(30), async || {
            let r = rollout(&env).await;
            r["wave"] == 2 && r["reason"] == "OutsideWindow"
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(on_v4(&env).await, BTreeSet::from(["c02".to_owned()]), "wave 2 moved outside its window");

    // Everyone's window opens: the rollout completes.
    save_by_rename(&config, &config_text(&env, Some(with_windows(json!([always(None)])))));
    daemon.eventually("rollout complete", Duration::from_secs(60), async || rollout(&env).await["phase"] == "Complete").await;
    let r = rollout(&env).await;
    assert_eq!((r["summary"].as_str(), r.get("nextWindow"), r.get("reason")), (Some("3/3"), None, None), "{r}");
    assert_eq!(daemon.metric("stacksync_rollout_waiting_for_window{subscription=\"ferrol\"}").await, 0.0);
    daemon.stop().await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), capi).await.expect("Cluster API task stopped").expect("task");
}
