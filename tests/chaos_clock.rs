//! The wall clock jumps under the real binary (issue 42, item 6): libfaketime (Debian's
//! `faketime`, preloaded) moves the process's CLOCK_REALTIME forward an hour and back ten
//! minutes while it runs, and leaves CLOCK_MONOTONIC alone — as an NTP step or a resumed VM
//! does. Covered: source polls on an interval and on a cron `schedule:` (at most one poll per
//! jump, never a burst, never a pause), a failing source's backoff (neither reset nor stretched),
//! leader election between two replicas (no second leader when either clock jumps, no lease
//! stuck an hour when the leader wrote it from a clock an hour ahead), and a rollout wave under
//! `waveTimeout` (not timed out by a jump, still timed out on time), and an upgrade stage held by
//! the real Cluster API under `stageTimeout` (not failed by a jump, goes on when its condition
//! holds).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::capi::{CapiTenant, K1, K2, V1, V2, condition};
use common::fleet::{Env, NS, cm, publish_v3_on};
use common::{Config, Daemon, Sub};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use testkit::git::{GitDaemon, ReleaseRepo};

/// Debian's libfaketime (package `faketime`, installed by scripts/test.sh).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// One process's wall clock: an offset from the real one, read by libfaketime from a file at
/// every clock read (`FAKETIME_NO_CACHE`), so the test moves it while the process runs.
struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    fn new(dir: &Path, name: &str) -> FakeClock {
        assert!(Path::new(LIBFAKETIME).exists(), "{LIBFAKETIME} is missing: install Debian's faketime (scripts/test.sh does)");
        let clock = FakeClock { file: dir.join(format!("{name}.faketime")) };
        clock.set(0);
        clock
    }

    /// The process's wall clock is now `offset` seconds off the real one. Written by rename:
    /// the process never reads half a file.
    fn set(&self, offset: i64) {
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("{offset:+}\n")).expect("write faketime file");
        std::fs::rename(&tmp, &self.file).expect("rename faketime file");
    }

    /// `launch` with its wall clock under this file; its monotonic clock is left real.
    fn on(&self, launch: common::daemon::Launch) -> common::daemon::Launch {
        launch
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file.to_string_lossy())
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    }
}

fn real_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs_f64()
}

fn polls(source: &str, result: &str) -> String {
    format!("stacksync_source_polls_total{{source=\"{source}\",result=\"{result}\"}}")
}

/// How many times each source is polled over `window`: (interval, cron, failing).
async fn polls_over(d: &Daemon, window: Duration) -> (f64, f64, f64) {
    let count = async || {
        (d.metric(&polls("every2s", "success")).await, d.metric(&polls("cron2s", "success")).await, d.metric(&polls("gone", "error")).await)
    };
    let before = count().await;
    tokio::time::sleep(window).await;
    let after = count().await;
    (after.0 - before.0, after.1 - before.1, after.2 - before.2)
}

/// Waits until the daemon has polled with its wall clock `offset` seconds off ours: the
/// last-success timestamp it reports is taken from its wall clock.
async fn sees_offset(d: &Daemon, offset: f64) {
    d.eventually(&format!("the daemon's clock {offset:+}s off"), Duration::from_secs(20), async || {
        let stamp = d.metric("stacksync_source_last_success_timestamp_seconds{source=\"every2s\"}").await;
        (stamp - real_now() - offset).abs() < 30.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_jump_neither_bursts_nor_stops_polls_on_an_interval_a_cron_schedule_or_a_backoff() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = dir.path().join("served");
    std::fs::create_dir(&served).expect("mkdir");
    let repo = ReleaseRepo::create(&served, "stacks").expect("repo");
    repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    let git = GitDaemon::start(&served).await.expect("git daemon");
    let url = git.url("stacks.git");
    // Three sources of the same repository: every 2 s, a cron firing every 2 s (six fields,
    // seconds first), and one that always fails (nothing listens) retried with backoff inside
    // its hourly interval.
    let config = Config::new(dir.path())
        .git("every2s", &url)
        .git("cron2s", &url)
        .git("gone", "git://127.0.0.1:1/gone.git")
        .sub(Sub::new("a", "every2s").cluster("team-a", "a", &[]).version("*").interval("2s"))
        .sub(Sub::new("b", "cron2s").cluster("team-a", "b", &[]).version("*").schedule("*/2 * * * * *"))
        .sub(Sub::new("c", "gone").cluster("team-a", "c", &[]).version("*").interval("1h"))
        .directory()
        .write();
    let clock = FakeClock::new(dir.path(), "daemon");
    let d = clock.on(Daemon::launch(&config, dir.path().join("daemon.log"))).start().await;
    sees_offset(&d, 0.0).await;
    d.eventually("both sources polled twice", Duration::from_secs(20), async || {
        d.metric(&polls("every2s", "success")).await >= 2.0 && d.metric(&polls("cron2s", "success")).await >= 2.0
    })
    .await;
    let window = Duration::from_secs(10);
    let steady = polls_over(&d, window).await;
    eprintln!("10 s before any jump: {steady:?} polls (interval, cron, failing)");

    for (offset, what) in [(3600, "forward an hour"), (3000, "back ten minutes")] {
        clock.set(offset);
        sees_offset(&d, offset as f64).await;
        let after = polls_over(&d, window).await;
        eprintln!("10 s after the jump {what}: {after:?} polls (interval, cron, failing)");
        // Every 2 s is 5 in 10 s: one more for the jump at most, and never none.
        assert!((3.0..=7.0).contains(&after.0), "interval source after the jump {what}: {after:?}\n{}", common::daemon::tail(&d.log(), 30));
        assert!((3.0..=7.0).contains(&after.1), "cron source after the jump {what}: {after:?}\n{}", common::daemon::tail(&d.log(), 30));
        // The failing source's backoff (5 s and more, ±20%) is not reset into a burst.
        assert!(after.2 <= 3.0, "failing source after the jump {what}: {after:?}");
    }
    // And its retries go on: not postponed by the ten minutes the clock went back (its backoff
    // is capped at 30 s, +20% jitter).
    let tries = d.metric(&polls("gone", "error")).await;
    d.eventually("the failing source tried again", Duration::from_secs(40), async || d.metric(&polls("gone", "error")).await > tries).await;
    assert!(!d.log_has("panicked"), "{}", common::daemon::tail(&d.log(), 30));
    d.stop().await;
}

async fn holder(env: &Env) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(env.mgmt.client().expect("client"), "default");
    api.get_opt("stacksync").await.expect("get lease")?.spec?.holder_identity.filter(|h| !h.is_empty())
}

const RECONCILED: &str = "stacksync_reconciles_total{subscription=\"ferrol\",result=\"ready\",reason=\"Synced\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_jump_makes_no_second_leader_and_no_lease_stuck_for_an_hour() {
    let env = Env::served().await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    env.add_synced_cluster("alpha", 0).await;
    let config = env.config().write();
    let args = ["--leader-elect", "--lease-duration", "8s"];
    let (clock_a, clock_b) = (FakeClock::new(env.dir.path(), "a"), FakeClock::new(env.dir.path(), "b"));
    let mut a = clock_a.on(Daemon::launch(&config, env.dir.path().join("a.log")).args(&args)).start().await;
    a.eventually("a leads", Duration::from_secs(30), async || a.get("/readyz").await.0 == 200).await;
    let a_id = format!("_{}", a.pid());
    let b = clock_b.on(Daemon::launch(&config, env.dir.path().join("b.log")).args(&args)).start().await;
    b.eventually("b polled its source", Duration::from_secs(20), async || b.metric(&polls("stacks", "success")).await >= 1.0).await;

    // The standby's clock an hour ahead, the leader's ten minutes behind: a renewTime read
    // against the standby's clock looks 70 minutes old. For longer than the lease (8 s) the
    // leader keeps it and the standby writes nothing.
    clock_b.set(3600);
    clock_a.set(-600);
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(12) {
        assert!(holder(&env).await.is_some_and(|h| h.ends_with(&a_id)), "the lease changed hands\n{}", common::daemon::tail(&b.log(), 20));
        assert_eq!(b.get("/readyz").await.0, 503, "the standby says it leads\n{}", common::daemon::tail(&b.log(), 20));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(b.metric(RECONCILED).await, 0.0, "the standby reconciled");
    assert_eq!(a.get("/readyz").await.0, 200, "the leader stepped down\n{}", common::daemon::tail(&a.log(), 20));

    // Now the leader's clock an hour ahead of the standby's: it renews with a renewTime an hour
    // in the standby's future. Killed, it is replaced within the lease, not an hour later.
    clock_b.set(-600);
    clock_a.set(3600);
    let api: Api<Lease> = Api::namespaced(env.mgmt.client().expect("client"), "default");
    a.eventually("a renewed from its clock an hour ahead", Duration::from_secs(20), async || {
        let renew = api.get_opt("stacksync").await.ok().flatten().and_then(|l| l.spec?.renew_time);
        renew.is_some_and(|t| t.0.as_second() as f64 > real_now() + 3000.0)
    })
    .await;
    a.kill().await;
    let took = b.eventually("b took over", Duration::from_secs(30), async || b.get("/readyz").await.0 == 200).await;
    eprintln!("handover after {took:?} (lease 8s) with the dead leader's renewTime an hour ahead");
    assert!(took < Duration::from_secs(20), "handover took {took:?}");
    b.eventually("b reconciles", Duration::from_secs(30), async || b.metric(RECONCILED).await >= 1.0).await;
    assert!(holder(&env).await.is_some_and(|h| h.ends_with(&format!("_{}", b.pid()))));
    b.stop().await;
    assert_eq!(holder(&env).await, None, "the lease was not released on SIGTERM");
}

const V3: &str = "docker-ferrol-1-27-v3";
const V4: &str = "docker-ferrol-1-27-v4";

fn kcps(env: &Env) -> Api<DynamicObject> {
    Api::namespaced_with(env.mgmt(), NS, &common::res("controlplane.cluster.x-k8s.io", "v1beta1", "KubeadmControlPlane"))
}

/// Cluster API's part for one Cluster: its control plane runs `version`, the Cluster is
/// available (as tests/rollout.rs plays it).
async fn report(env: &Env, name: &str, version: &str) {
    let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "metadata": {"name": name}, "status": {"version": version}});
    kcps(env).patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(kcp)).await.expect("kcp status");
    let t = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": "2026-11-23T00:00:00Z"});
    let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name},
        "status": {"controlPlaneReady": true, "conditions": [t("Ready"), t("ControlPlaneReady"), t("Available")]}});
    env.clusters().patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
}

async fn rollout(env: &Env) -> serde_json::Value {
    let api: Api<DynamicObject> = Api::all_with(env.mgmt(), &common::res("stacksync.io", "v1alpha1", "StackRelease"));
    match api.get_opt(&format!("ferrol.{V4}")).await.expect("get StackRelease") {
        Some(r) => r.data["status"]["rollout"].clone(),
        None => serde_json::Value::Null,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_is_not_timed_out_by_a_clock_jumping_forward_an_hour_and_still_times_out_on_time() {
    let env = Arc::new(Env::new(1).await);
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    // One Cluster on v3 whose control plane never reports the new version: its wave waits.
    env.add_cluster("c00", V3, true).await;
    let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
        "metadata": {"name": "c00", "namespace": NS}, "spec": {"version": "v1.27.3"}});
    kcps(&env).patch("c00", &PatchParams::apply("capi"), &Patch::Apply(kcp)).await.expect("kcp");
    env.patch_cluster(
        "c00",
        json!({"spec": {"controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": "c00"}}}),
    )
    .await;
    report(&env, "c00", "v1.27.3").await;
    env.add_kubeconfig("c00", 0).await;
    let timeout = 30;
    let waves = json!({"waves": [{"percent": 100}], "waveTimeout": format!("{timeout}s"), "checkInterval": "250ms"});
    let config = env.stack_config(|s| s.interval("1s").set("availableReleases", 2).set("rollout", waves)).write();
    let clock = FakeClock::new(env.dir.path(), "daemon");
    let d = clock.on(Daemon::launch(&config, env.dir.path().join("daemon.log"))).start().await;
    d.eventually("c00 on v3", Duration::from_secs(60), async || env.ready_reason("c00").await.is_some_and(|(s, _)| s == "True")).await;

    publish_v3_on(&env.repo, "v4", "v1.27.5", &[]);
    let started = Instant::now();
    d.eventually("the wave started", Duration::from_secs(30), async || rollout(&env).await["phase"] == "Progressing").await;
    clock.set(3600);
    // Well inside the 30 s: the jump has been seen (a wave check every 250 ms) and the wave
    // still runs.
    while started.elapsed() < Duration::from_secs(timeout - 8) {
        let r = rollout(&env).await;
        assert_eq!(r["phase"], "Progressing", "timed out {:?} after the wave started: {r}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    d.eventually("paused by waveTimeout", Duration::from_secs(40), async || rollout(&env).await["phase"] == "Paused").await;
    let at = started.elapsed();
    let r = rollout(&env).await;
    assert_eq!(r["reason"], "WaveTimeout", "{r}");
    eprintln!("WaveTimeout {at:?} after v4 was published (waveTimeout {timeout}s, the clock an hour ahead since the wave began)");
    // The wave began after `started`: paused no sooner than the timeout, and not much later.
    // `waveStarted` is recorded to the second (RFC 3339 without a fraction), so the wave may
    // count from up to a second before it began (found: 29.93 s in a full run).
    assert!(at >= Duration::from_secs(timeout - 1) && at < Duration::from_secs(timeout + 15), "{at:?}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_stage_held_by_the_real_cluster_api_is_not_failed_by_a_clock_jumping_forward_an_hour() {
    let Some(t) = CapiTenant::new("clockjump").await else { return };
    let step = Duration::from_secs(120);
    let gate = format!("gate-{}", t.ns);
    t.publish(V1, |_, text| text);
    let timeout = 40;
    let config = t.config(|s| s.set("availableReleases", 2).set("stageTimeout", format!("{timeout}s"))).write();
    let clock = FakeClock::new(t.dir.path(), "daemon");
    let daemon = t.start_launched(&config, |l| clock.on(l)).await;
    t.add_cluster("c1", V1, K1, json!({})).await;
    let up = async |class: &str, version: &str| {
        let cp = t.control_plane("c1").await.unwrap_or_default();
        let cs = t.cluster_sync("c1").await;
        cp["status"]["version"] == version
            && condition(&cp, "Available").0 == "True"
            && cs["status"]["appliedRelease"]["tag"] == class
            && condition(&cs, "Ready").0 == "True"
    };
    t.eventually(&daemon, "c1 up on V1", step, async || up(V1, K1).await).await;
    // V2's upgrade stage waits for a ConfigMap `gate` on the workload cluster (as
    // tests/cluster_api.rs makes a stage wait).
    t.publish(
        V2,
        |path, text| if path == "clusteraddon.yaml" { text.replace("name: upgrade-gate,", &format!("name: {gate},")) } else { text },
    );
    t.class_reconciled(&daemon, V2).await;
    t.move_cluster("c1", V2, K2).await;
    t.eventually(&daemon, "the stage waiting for its gate", step, async || {
        t.cluster_sync("c1").await["status"]["upgrade"]["waitingFor"].as_str().is_some_and(|w| w.contains(&gate))
    })
    .await;
    let waiting = Instant::now();
    clock.set(3600);
    // Until 10 s short of stageTimeout (each look at the stage is at most 30 s apart, so several
    // are made after the jump): waiting, not UpgradeFailed.
    while waiting.elapsed() < Duration::from_secs(timeout - 10) {
        let cs = t.cluster_sync("c1").await;
        let (_, reason, message) = condition(&cs, "Ready");
        assert_ne!(reason, "UpgradeFailed", "failed {:?} into a {timeout}s stageTimeout: {message}", waiting.elapsed());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cp = t.control_plane("c1").await.expect("control plane");
    assert_eq!(cp["spec"]["version"], K1, "held: {cp}");
    // The condition holds: the upgrade goes on.
    let api: Api<ConfigMap> = Api::namespaced(t.workload(), "kube-system");
    let body =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate, "namespace": "kube-system"}, "data": {"go": "yes"}});
    api.patch(&gate, &PatchParams::apply("platform-team"), &Patch::Apply(body)).await.expect("open the gate");
    t.eventually(&daemon, "c1 up on V2", step, async || up(V2, K2).await).await;
    daemon.stop().await;
    t.delete().await;
}
