//! Table tests of the rollout's decisions over fleets of Clusters.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde_json::json;

use super::failures::{NoRollback, late_message, rollback_to, wave_pause};
use super::judge::{WaveHealth, judge_wave};
use super::paths::path;
use super::round::{Then, resume, timed_out, wave_done};
use super::start::Others;
use super::*;
use crate::config::Wave;
use crate::status::crd::{
    ClusterPath, Condition, MovedFrom, ReleaseRefStatus, RolloutStatus, StackRelease, StackReleaseSpec, StackReleaseStatus, UpgradeStatus,
    WaveStatus,
};

const V3: &str = "docker-ferrol-1-27-v3";
const V4: &str = "docker-ferrol-1-27-v4";
const TIMEOUT: Duration = Duration::from_secs(30);

/// How long ago a time was by the wall clock at `at(secs)` (unreadable or ahead: zero).
fn wall(secs: i64) -> impl Fn(&str) -> Duration {
    move |stamp| DateTime::parse_from_rfc3339(stamp).ok().and_then(|t| (at(secs) - t.with_timezone(&Utc)).to_std().ok()).unwrap_or_default()
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time")
}

fn keys(n: usize) -> Vec<(String, bool)> {
    (0..n).map(|i| (format!("ns/c{i:02}"), false)).collect()
}

fn cond(t: &str, s: &str, reason: &str) -> Condition {
    Condition { type_: t.into(), status: s.into(), reason: reason.into(), message: "m".into(), ..Default::default() }
}

/// A v1beta1 Cluster `ns/name` on `class`, available or not.
fn cluster(key: &str, class: &str, available: bool) -> DynamicObject {
    let (ns, name) = key.split_once('/').expect("ns/name");
    let ready = if available { "True" } else { "False" };
    serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"topology": {"class": class, "version": "v1.27.3"}},
        "status": {"conditions": [{"type": "Ready", "status": ready}, {"type": "ControlPlaneReady", "status": "True"}]}}))
    .expect("cluster")
}

/// A ClusterSync that applied `tag` and is Ready (or not Ready for `reason`).
fn sync(tag: &str, not_ready: Option<&str>) -> ClusterSyncStatus {
    let ready = match not_ready {
        None => cond("Ready", "True", "Synced"),
        Some(reason) => cond("Ready", "False", reason),
    };
    ClusterSyncStatus {
        applied_release: Some(ReleaseRefStatus { tag: tag.into(), ..Default::default() }),
        conditions: vec![ready],
        ..Default::default()
    }
}

/// A fleet where each Cluster is in one of these states:
/// `old` on v3, not moved yet; `unhealthy` on v3, its ClusterSync not Ready (`Unhealthy`);
/// `applying` on v3, its apply under way (`Progressing`);
/// `unsynced` on v3 without a ClusterSync; `done` moved to v4, synced, available; `late` moved, synced,
/// not available yet; `failed` moved, its ClusterSync `UpgradeFailed`; `changed` moved and put
/// back on v3 by someone; `gone` deleted (not in the fleet at all).
fn fleet(states: &[(&str, &str)]) -> Fleet {
    let mut f = Fleet::default();
    for (key, state) in states {
        let (class, available, sync_) = match *state {
            "old" => (V3, true, Some(sync(V3, None))),
            "unhealthy" => (V3, true, Some(sync(V3, Some("Unhealthy")))),
            "applying" => (V3, true, Some(sync(V3, Some("Progressing")))),
            "unsynced" => (V3, true, None),
            "done" => (V4, true, Some(sync(V4, None))),
            "late" => (V4, false, Some(sync(V4, None))),
            "failed" => (V4, true, Some(sync(V4, Some("UpgradeFailed")))),
            "changed" => (V3, true, Some(sync(V4, None))),
            "gone" => continue,
            other => panic!("unknown state {other}"),
        };
        let key = (*key).to_owned();
        f.members.insert(key.clone(), Member { obj: cluster(&key, class, available), canary: false });
        if let Some(s) = sync_ {
            f.syncs.insert(key, s);
        }
    }
    f
}

/// A rollout over `waves` at wave `wave` (1-based): the waves before it done, the later ones
/// pending; `current` the running wave's phase; the wave started at `at(0)`.
fn rollout(waves: &[&[&str]], wave: u32, current: &str, phase: &str) -> RolloutStatus {
    let plan = waves
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let p = match (i + 1).cmp(&(wave as usize)) {
                std::cmp::Ordering::Less => DONE,
                std::cmp::Ordering::Equal => current,
                std::cmp::Ordering::Greater => PENDING,
            };
            WaveStatus { clusters: w.iter().map(|c| (*c).to_owned()).collect(), phase: p.into(), ..WaveStatus::default() }
        })
        .collect::<Vec<_>>();
    let mut st = RolloutStatus {
        phase: phase.into(),
        wave,
        waves: waves.len() as u32,
        total: waves.iter().map(|w| w.len() as u32).sum(),
        started: timestamp(at(-100)),
        wave_started: timestamp(at(0)),
        plan,
        handled_resume: "t1".into(),
        handled_pause: "t1".into(),
        ..RolloutStatus::default()
    };
    summarise(&mut st);
    st
}

fn show(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Step::Resumed { wave, waves } => format!("resumed {wave}/{waves}"),
            Step::WaveStarted { wave, waves, clusters } => format!("started {wave}/{waves} {}", clusters.join(",")),
            Step::WaveDone { wave, waves, clusters, failed: 0 } => format!("done {wave}/{waves} ({clusters})"),
            Step::WaveDone { wave, waves, clusters, failed } => format!("done {wave}/{waves} ({clusters}, {failed} failed)"),
            Step::Complete { failed: 0 } => "complete".into(),
            Step::Complete { failed } => format!("complete ({failed} failed)"),
            Step::Moved { wave, waves, clusters } => format!("moved {wave}/{waves} {}", clusters.join(",")),
            Step::OutsideWindow { wave, waves, next, .. } => format!("outside window {wave}/{waves} next {next}"),
            Step::ClusterFailed { wave, failed } => format!("failed {wave} {} {} {}", failed.cluster, failed.reason, failed.outcome),
            Step::RollBack { cluster, to } => format!("roll back {cluster} to {to}"),
            Step::Stepped { wave, waves, clusters } => format!("next step {wave}/{waves} {}", clusters.join(",")),
            Step::Paused { wave, waves, reason, message } => format!("paused {wave}/{waves} {reason}: {message}"),
        })
        .collect()
}

const THREE: [&[&str]; 3] = [&["ns/c00"], &["ns/c01", "ns/c02"], &["ns/c03", "ns/c04", "ns/c05"]];

#[test]
fn waves_are_cut_in_name_order_with_canaries_first() {
    let w = [Wave::Clusters(1), Wave::Percent(25), Wave::Percent(100)];
    let p = plan(&w, &keys(10));
    assert_eq!(p.iter().map(Vec::len).collect::<Vec<_>>(), [1, 2, 7]);
    assert_eq!(p[0], ["ns/c00"]);
    assert_eq!(p[1], ["ns/c01", "ns/c02"]);
    let mut k = keys(10);
    k[7].1 = true;
    k[8].1 = true;
    let p = plan(&w, &k);
    assert_eq!(p[0], ["ns/c07", "ns/c08"], "every canary is in the first wave");
    assert_eq!(p[1], ["ns/c00"]);
    assert_eq!(p.iter().map(Vec::len).sum::<usize>(), 10);
    // Waves that add nobody are left out; the last takes the rest.
    assert_eq!(plan(&[Wave::Percent(10), Wave::Percent(10), Wave::Percent(100)], &keys(3)).len(), 2);
    assert_eq!(plan(&w, &keys(1)), [["ns/c00"]]);
    assert!(plan(&w, &[]).is_empty());
}

#[test]
fn a_timeout_names_the_first_late_cluster_and_the_others() {
    let w: Vec<(String, String)> = (0..8).map(|i| (format!("ns/c{i}"), format!("why {i}"))).collect();
    assert_eq!(late_message(&w[..1], Duration::from_secs(30)), "ns/c0 not done within waveTimeout 30s: why 0");
    assert_eq!(
        late_message(&w, Duration::from_secs(60)),
        "ns/c0 not done within waveTimeout 1m: why 0 (also late: ns/c1, ns/c2, ns/c3, ns/c4, ns/c5 and 2 more)"
    );
}

#[test]
fn a_wave_times_out_only_past_its_timeout() {
    let started = timestamp(at(0));
    assert!(!timed_out(&started, TIMEOUT, &wall(30)), "at the timeout, not past it");
    assert!(timed_out(&started, TIMEOUT, &wall(31)));
    assert!(!timed_out(&started, TIMEOUT, &wall(-5)), "a clock behind the start is no time elapsed");
    assert!(!timed_out("", TIMEOUT, &wall(3600)), "no start recorded: never");
    assert!(!timed_out("garbage", TIMEOUT, &wall(3600)), "unreadable: just started");
}

fn release(phase: &str, rollout: &str, annotations: &[(&str, &str)], handled: &str) -> StackRelease {
    let mut r = StackRelease::new("ferrol.v4", StackReleaseSpec { subscription: "ferrol".into(), source: "s".into(), tag: "v4".into() });
    r.metadata.annotations = Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
    r.status = Some(StackReleaseStatus {
        phase: phase.into(),
        rollout: (!rollout.is_empty()).then(|| RolloutStatus {
            phase: rollout.into(),
            handled_resume: handled.into(),
            handled_pause: handled.into(),
            ..RolloutStatus::default()
        }),
        ..Default::default()
    });
    r
}

#[test]
fn only_an_unhandled_request_or_an_applied_class_wakes_the_driver() {
    let rel = release;
    assert!(wants_a_look(&rel("Applied", PAUSED, &[(ROLLOUT_RESUME, "t2")], "t1")));
    assert!(!wants_a_look(&rel("Applied", PAUSED, &[(ROLLOUT_RESUME, "t1")], "t1")), "handled already");
    assert!(!wants_a_look(&rel("Applied", PAUSED, &[], "")), "nothing asked");
    assert!(wants_a_look(&rel("Applied", PROGRESSING, &[(ROLLOUT_PAUSE, "t2")], "t1")));
    assert!(!wants_a_look(&rel("Applied", PROGRESSING, &[(ROLLOUT_RESUME, "t2")], "t1")), "resuming a running rollout");
    assert!(!wants_a_look(&rel("Applied", COMPLETE, &[(ROLLOUT_RESUME, "t2"), (ROLLOUT_PAUSE, "t2")], "t1")));
    assert!(wants_a_look(&rel("Applied", WAITING, &[], "")), "its ClusterClass is applied now");
    assert!(!wants_a_look(&rel("Failed", WAITING, &[], "")));
    assert!(!wants_a_look(&rel("Applied", "", &[(ROLLOUT_RESUME, "t2")], "")), "no rollout");
}

#[test]
fn a_cluster_is_done_when_upgraded_healthy_and_available() {
    let t = Target { class: "s-v4", version: Some("v1.28.1"), v1beta2: false };
    let cluster = |class: &str, avail: bool| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "spec": {"topology": {"class": class}}, "status": {"conditions": [
            {"type": "Ready", "status": if avail { "True" } else { "False" }}, {"type": "ControlPlaneReady", "status": "True"}]}})
    };
    let cp = |v: &str| json!({"status": {"version": v}});
    let mut sync = ClusterSyncStatus {
        applied_release: Some(ReleaseRefStatus { tag: "s-v4".into(), ..Default::default() }),
        conditions: vec![cond("Ready", "True", "Synced")],
        ..Default::default()
    };
    assert_eq!(judge(&cluster("s-v4", true), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Done);
    assert!(matches!(judge(&cluster("s-v4", false), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Waiting(w) if w.contains("available")));
    assert!(matches!(judge(&cluster("s-v4", true), Some(&cp("v1.27.3")), Some(&sync), &t), Health::Waiting(w) if w.contains("v1.27.3")));
    assert!(matches!(judge(&cluster("s-v3", true), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Failed("ClassChanged", _)));
    let v1beta2 = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "spec": {"topology": {"classRef": {"name": "s-v4"}}}, "status": {"conditions": [{"type": "Available", "status": "True"}]}});
    let t2 = Target { v1beta2: true, ..t };
    assert_eq!(judge(&v1beta2, Some(&cp("v1.28.1")), Some(&sync), &t2), Health::Done);
    // The control plane's own Available condition wins over the Cluster's (a moment older).
    let down = json!({"metadata": {"generation": 3}, "status": {"version": "v1.28.1", "conditions": [
        {"type": "Available", "status": "False", "reason": "Unhealthy", "message": "etcd down", "observedGeneration": 3}]}});
    assert!(
        matches!(judge(&v1beta2, Some(&down), Some(&sync), &t2), Health::Waiting(w) if w == "its control plane is not available (Unhealthy: etcd down)")
    );
    let stale = json!({"metadata": {"generation": 4}, "status": {"version": "v1.28.1", "conditions": [
        {"type": "Available", "status": "True", "observedGeneration": 3}]}});
    assert!(matches!(judge(&v1beta2, Some(&stale), Some(&sync), &t2), Health::Waiting(w) if w.contains("not reported")));
    let up = json!({"metadata": {"generation": 4}, "status": {"version": "v1.28.1", "conditions": [
        {"type": "Available", "status": "True", "observedGeneration": 4}]}});
    assert_eq!(judge(&v1beta2, Some(&up), Some(&sync), &t2), Health::Done);
    assert!(matches!(judge(&cluster("s-v4", true), Some(&cp("v1.28.1")), Some(&sync), &t2), Health::Waiting(_)));
    let t = Target { v1beta2: false, ..t2 };
    sync.upgrade =
        Some(UpgradeStatus { to: "s-v4".into(), phase: "PostCondition".into(), stage: "cni".into(), stages: 2, ..Default::default() });
    assert!(matches!(judge(&cluster("s-v4", true), Some(&cp("v1.28.1")), Some(&sync), &t), Health::Waiting(w) if w.contains("`cni`")));
    sync.conditions = vec![cond("Ready", "False", "UpgradeFailed")];
    assert!(
        matches!(judge(&cluster("s-v4", true), None, Some(&sync), &t), Health::Failed("ClusterFailed", w) if w.starts_with("UpgradeFailed"))
    );
    assert!(matches!(judge(&cluster("s-v4", true), None, None, &t), Health::Waiting(_)));
}

#[test]
fn a_wave_is_judged_over_the_fleet_in_wave_order() {
    let t = Target { class: V4, version: None, v1beta2: false };
    let wave = WaveStatus { clusters: ["ns/a", "ns/b", "ns/c"].map(str::to_owned).into(), ..WaveStatus::default() };
    // (what, the fleet, how the wave is)
    type Judged<'a> = (&'a str, &'a [(&'a str, &'a str)], WaveHealth);
    let health = |done: u32, late: &[(&str, &str)], failed: &[(&str, &str)], changed: Option<(&str, String)>| WaveHealth {
        done,
        late: late.iter().map(|(k, w)| ((*k).to_owned(), (*w).to_owned())).collect(),
        failed: failed.iter().map(|(k, w)| ((*k).to_owned(), (*w).to_owned())).collect(),
        changed: changed.map(|(k, w)| (k.to_owned(), w)),
        stepped: Vec::new(),
    };
    let unavailable = "Cluster API does not report it available yet";
    let cases: &[Judged<'_>] = &[
        ("all done", &[("ns/a", "done"), ("ns/b", "done"), ("ns/c", "done")], health(3, &[], &[], None)),
        ("a deleted Cluster has nothing left to move", &[("ns/a", "done"), ("ns/b", "gone"), ("ns/c", "gone")], health(3, &[], &[], None)),
        (
            "late ones are named, in order",
            &[("ns/a", "late"), ("ns/b", "done"), ("ns/c", "late")],
            health(1, &[("ns/a", unavailable), ("ns/c", unavailable)], &[], None),
        ),
        (
            "failed ones and one changed by someone else, each named",
            &[("ns/a", "done"), ("ns/b", "failed"), ("ns/c", "changed")],
            health(
                1,
                &[],
                &[("ns/b", "UpgradeFailed: m")],
                Some(("ns/c", format!("its class was changed to `{V3}` by someone else during its wave"))),
            ),
        ),
    ];
    for (name, states, want) in cases {
        assert_eq!(&judge_wave(&wave, &fleet(states), &t, &BTreeSet::new()), want, "{name}");
    }
    // One given up on before is not judged again: its class is the old one if it was moved back.
    let given_up = BTreeSet::from(["ns/c"]);
    assert_eq!(
        judge_wave(&wave, &fleet(&[("ns/a", "done"), ("ns/b", "done"), ("ns/c", "changed")]), &t, &given_up),
        health(2, &[], &[], None)
    );
    // A Cluster whose edit failed still has its old class: it waits for the edit, it did not
    // change hands; nor did one awaiting its window.
    let unmoved = WaveStatus { unmoved: vec!["ns/b".into()], awaiting_window: vec!["ns/c".into()], ..wave.clone() };
    assert_eq!(
        judge_wave(&unmoved, &fleet(&[("ns/a", "done"), ("ns/b", "changed"), ("ns/c", "old")]), &t, &BTreeSet::new()),
        WaveHealth {
            done: 1,
            late: vec![
                ("ns/b".into(), format!("not moved to {V4} yet: its edit failed and is tried again at every check")),
                ("ns/c".into(), "not moved yet: none of its maintenance windows is open".into()),
            ],
            ..WaveHealth::default()
        }
    );
    // With a Kubernetes version to reach, the control plane the driver read has the word.
    let t = Target { version: Some("v1.28.1"), ..t };
    let mut f = fleet(&[("ns/a", "done"), ("ns/b", "done"), ("ns/c", "done")]);
    f.control_planes.insert("ns/a".into(), json!({"status": {"version": "v1.28.1"}}));
    f.control_planes.insert("ns/b".into(), json!({"status": {"version": "v1.27.3"}}));
    let WaveHealth { done: 1, late, .. } = judge_wave(&wave, &f, &t, &BTreeSet::new()) else { panic!("waiting") };
    assert_eq!(
        late,
        [
            ("ns/b".to_owned(), "control plane reports v1.27.3, not v1.28.1 yet".to_owned()),
            ("ns/c".to_owned(), "its control plane object (spec.controlPlaneRef) cannot be read".to_owned())
        ]
    );
}

/// One round of [`advance`]: the rollout before, the fleet, the requests, when; what it did
/// and the rollout after.
struct Case {
    name: &'static str,
    before: RolloutStatus,
    fleet: &'static [(&'static str, &'static str)],
    requests: (&'static str, &'static str),
    now: i64,
    steps: &'static [&'static str],
    /// phase, wave, reason, done
    after: (&'static str, u32, &'static str, u32),
}

#[test]
fn a_round_moves_the_rollout_on_as_far_as_it_goes() {
    let all_old: &[(&str, &str)] =
        &[("ns/c00", "old"), ("ns/c01", "old"), ("ns/c02", "old"), ("ns/c03", "old"), ("ns/c04", "old"), ("ns/c05", "old")];
    let started = rollout(&THREE, 1, PENDING, PROGRESSING);
    let mut paused_late = rollout(&THREE, 2, PROGRESSING, PAUSED);
    paused_late.reason = "WaveTimeout".into();
    paused_late.message = "ns/c02 not done".into();
    let mut paused_before_3 = rollout(&THREE, 3, PENDING, PAUSED);
    paused_before_3.reason = "PauseRequested".into();
    let cases = [
        Case {
            name: "a pending wave is started, its Clusters to be moved, not judged",
            before: started.clone(),
            fleet: all_old,
            requests: ("t1", "t1"),
            now: 5,
            steps: &["started 1/3 ns/c00"],
            after: (PROGRESSING, 1, "", 0),
        },
        Case {
            name: "a wave done starts the next in the same round",
            before: rollout(&THREE, 1, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c00", "done"), ("ns/c01", "old"), ("ns/c02", "old")],
            requests: ("t1", "t1"),
            now: 5,
            steps: &["done 1/3 (1)", "started 2/3 ns/c01,ns/c02"],
            after: (PROGRESSING, 2, "", 1),
        },
        Case {
            name: "a deleted Cluster does not hold its wave",
            before: rollout(&THREE, 2, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c00", "done"), ("ns/c01", "done"), ("ns/c02", "gone")],
            requests: ("t1", "t1"),
            now: 5,
            steps: &["done 2/3 (2)", "started 3/3 ns/c03,ns/c04,ns/c05"],
            after: (PROGRESSING, 3, "", 3),
        },
        Case {
            name: "the last wave done completes the rollout",
            before: rollout(&THREE, 3, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c03", "done"), ("ns/c04", "done"), ("ns/c05", "done")],
            requests: ("t1", "t1"),
            now: 5,
            steps: &["done 3/3 (3)", "complete"],
            after: (COMPLETE, 3, "", 6),
        },
        Case {
            name: "a late Cluster within waveTimeout waits, the done ones counted",
            before: rollout(&THREE, 2, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c01", "done"), ("ns/c02", "late")],
            requests: ("t1", "t1"),
            now: 30,
            steps: &[],
            after: (PROGRESSING, 2, "", 2),
        },
        Case {
            name: "a late Cluster past waveTimeout pauses the rollout, naming it",
            before: rollout(&THREE, 2, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c01", "late"), ("ns/c02", "late")],
            requests: ("t1", "t1"),
            now: 31,
            steps: &[
                "failed 2 ns/c01 WaveTimeout LeftAlone",
                "failed 2 ns/c02 WaveTimeout LeftAlone",
                "paused 2/3 WaveTimeout: ns/c01 not done within waveTimeout 30s: Cluster API does not report it available yet (also late: ns/c02)",
            ],
            after: (PAUSED, 2, "WaveTimeout", 1),
        },
        Case {
            name: "a failed Cluster pauses the rollout at once",
            before: rollout(&THREE, 2, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c01", "done"), ("ns/c02", "failed")],
            requests: ("t1", "t1"),
            now: 1,
            steps: &["failed 2 ns/c02 ClusterFailed LeftAlone", "paused 2/3 ClusterFailed: ns/c02: UpgradeFailed: m"],
            after: (PAUSED, 2, "ClusterFailed", 2),
        },
        Case {
            name: "a Cluster put back on its old class pauses the rollout",
            before: rollout(&THREE, 1, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c00", "changed")],
            requests: ("t1", "t1"),
            now: 1,
            steps: &["paused 1/3 ClassChanged: ns/c00: its class was changed to `docker-ferrol-1-27-v3` by someone else during its wave"],
            after: (PAUSED, 1, "ClassChanged", 0),
        },
        Case {
            name: "a pause request stops the rollout at the wave boundary",
            before: rollout(&THREE, 1, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c00", "done")],
            requests: ("t1", "t2"),
            now: 5,
            steps: &["done 1/3 (1)", "paused 2/3 PauseRequested: paused by request before wave 2/3"],
            after: (PAUSED, 2, "PauseRequested", 1),
        },
        Case {
            name: "a pause request waits for the running wave",
            before: rollout(&THREE, 1, PROGRESSING, PROGRESSING),
            fleet: &[("ns/c00", "late")],
            requests: ("t1", "t2"),
            now: 5,
            steps: &[],
            after: (PROGRESSING, 1, "", 0),
        },
        Case {
            name: "a paused rollout not asked to resume stays paused",
            before: paused_late.clone(),
            fleet: &[("ns/c01", "done"), ("ns/c02", "done")],
            requests: ("t1", "t1"),
            now: 500,
            steps: &[],
            after: (PAUSED, 2, "WaveTimeout", 1),
        },
        Case {
            name: "a resume starts the paused wave again, with a whole waveTimeout",
            before: paused_late,
            fleet: &[("ns/c01", "done"), ("ns/c02", "late")],
            requests: ("t3", "t1"),
            now: 500,
            steps: &["resumed 2/3", "started 2/3 ns/c01,ns/c02"],
            after: (PROGRESSING, 2, "", 1),
        },
        Case {
            name: "a resume after a pause request starts the next wave",
            before: paused_before_3,
            fleet: &[("ns/c03", "old"), ("ns/c04", "old"), ("ns/c05", "old")],
            requests: ("t3", "t2"),
            now: 500,
            steps: &["resumed 3/3", "started 3/3 ns/c03,ns/c04,ns/c05"],
            after: (PROGRESSING, 3, "", 3),
        },
    ];
    let t = Target { class: V4, version: None, v1beta2: false };
    for c in cases {
        let mut st = c.before.clone();
        let requests = Requests { resume: c.requests.0.into(), pause: c.requests.1.into() };
        let steps = advance(&mut st, &fleet(c.fleet), &t, &requests, &Policy::strict(TIMEOUT), at(c.now), &wall(c.now));
        assert_eq!(show(&steps), c.steps, "{}", c.name);
        assert_eq!((st.phase.as_str(), st.wave, st.reason.as_str(), st.done), c.after, "{}", c.name);
        let failed = if st.failed.is_empty() { String::new() } else { format!(" ({} failed)", st.failed.len()) };
        assert_eq!(st.summary, format!("{}/6{failed}", st.done), "{}", c.name);
        if steps.iter().any(|s| matches!(s, Step::WaveStarted { .. })) {
            assert_eq!(st.wave_started, timestamp(at(c.now)), "{}: the wave's clock starts now", c.name);
            assert_eq!(st.plan[st.wave as usize - 1].phase, PROGRESSING, "{}", c.name);
        }
        if st.phase == PAUSED || c.before.phase == PAUSED {
            assert_eq!(st.message.is_empty(), st.phase != PAUSED, "{}: a message while paused, none after", c.name);
        }
        if steps.first().is_some_and(|s| matches!(s, Step::Resumed { .. })) {
            assert_eq!((st.handled_resume.as_str(), st.handled_pause.as_str()), c.requests, "{}: both requests handled", c.name);
        }
        if steps.is_empty() && st.phase != PROGRESSING {
            assert_eq!(st, c.before, "{}: nothing changed", c.name);
        }
    }
}

#[test]
fn the_rounds_judge_only_a_started_wave() {
    assert!(to_judge(&rollout(&THREE, 1, PENDING, PROGRESSING)).is_empty(), "a pending wave is moved, not judged");
    assert_eq!(to_judge(&rollout(&THREE, 2, PROGRESSING, PROGRESSING)), ["ns/c01", "ns/c02"]);
    assert!(to_judge(&rollout(&THREE, 2, PROGRESSING, PAUSED)).is_empty(), "a resumed wave starts again");
    let mut done = rollout(&THREE, 3, DONE, COMPLETE);
    assert!(to_judge(&done).is_empty());
    done.phase = PROGRESSING.into();
    done.wave = 4;
    assert!(to_judge(&done).is_empty(), "past the last wave");
    assert_eq!(round(None), Round::Start);
    assert_eq!(round(Some(&rollout(&THREE, 1, PENDING, WAITING))), Round::Start);
    assert_eq!(round(Some(&rollout(&THREE, 1, PENDING, STOPPED))), Round::Start, "configured again");
    assert_eq!(round(Some(&rollout(&THREE, 1, PENDING, PAUSED))), Round::GoOn);
    assert_eq!(round(Some(&rollout(&THREE, 1, PENDING, COMPLETE))), Round::Skip);
    assert_eq!(round(Some(&rollout(&THREE, 1, PENDING, SUPERSEDED))), Round::Skip);
}

#[test]
fn a_rollout_starts_over_the_clusters_on_older_releases_canaries_first() {
    let mut f = fleet(&[("ns/a", "old"), ("ns/b", "done"), ("ns/c", "old"), ("ns/d", "old")]);
    f.members.insert("ns/e".into(), Member { obj: cluster("ns/e", "docker-ferrol-1-27-v5", true), canary: false });
    f.members.insert("ns/f".into(), Member { obj: cluster("ns/f", "docker-other-1-27-v1", true), canary: false });
    f.members.insert("ns/g".into(), Member { obj: cluster("ns/g", "hand-made", true), canary: false });
    f.members.get_mut("ns/d").expect("d").canary = true;
    let ferrol = crate::model::version::Families { stack: "docker-ferrol-1-27", kubernetes: None };
    let older = older(&f.members, V4, ferrol).expect("a version");
    assert_eq!(older, [("ns/a".to_owned(), false), ("ns/c".to_owned(), false), ("ns/d".to_owned(), true)], "v3 only");
    assert_eq!(super::older(&f.members, "latest", ferrol), None, "not a version: no rollout");
    let requests = Requests { resume: "r".into(), pause: "p".into() };
    let st = start(&[Wave::Clusters(1), Wave::Percent(100)], &older, &BTreeMap::new(), &requests, at(7));
    assert_eq!((st.phase.as_str(), st.wave, st.waves, st.total), (PROGRESSING, 1, 2, 3));
    assert_eq!(
        st.plan.iter().map(|w| (w.clusters.join(","), w.phase.as_str())).collect::<Vec<_>>(),
        [("ns/d".to_owned(), PENDING), ("ns/a,ns/c".to_owned(), PENDING)]
    );
    assert_eq!((st.started.as_str(), st.handled_resume.as_str(), st.handled_pause.as_str()), (timestamp(at(7)).as_str(), "r", "p"));
    assert!(st.wave_started.is_empty(), "no wave runs until the first round moves it");
}

#[test]
fn a_rollout_waits_for_its_class_telling_once_per_reason() {
    let none = Requests::default();
    let st = waiting(None, 4, "ClusterClass v4 is not applied: x".into(), &none).expect("new");
    assert_eq!(
        (st.phase.as_str(), st.reason.as_str(), st.summary.as_str(), st.wave_summary.as_str()),
        (WAITING, "ClassNotApplied", "0/4", "0/0")
    );
    assert_eq!(waiting(Some(&st), 4, "ClusterClass v4 is not applied: x".into(), &none), None, "said already");
    assert!(waiting(Some(&st), 4, "ClusterClass v4 is not applied: y".into(), &none).is_some(), "a new reason");
    let mut stopped_ = st.clone();
    stopped_.phase = STOPPED.into();
    assert!(waiting(Some(&stopped_), 4, st.message.clone(), &none).is_some());

    let mut rel = release("Failed", "", &[], "");
    assert_eq!(not_applied(&rel, Some("helm: bad chart\nline 2")), "helm: bad chart");
    rel.status.as_mut().expect("status").entries.push(crate::status::crd::ObjectEntry {
        kind: "ClusterClass".into(),
        namespace: "ns".into(),
        name: "v4".into(),
        synced: false,
        message: "refused".into(),
        ..Default::default()
    });
    assert_eq!(not_applied(&rel, None), "ClusterClass ns/v4: refused");
    assert_eq!(not_applied(&release("", "", &[], ""), None), "not applied yet (StackRelease phase `none`)");
    rel.status = None;
    assert_eq!(not_applied(&rel, None), "its StackRelease has no status yet");
}

#[test]
fn a_paused_rollout_holds_a_new_one_and_a_running_one_is_superseded() {
    let of = |name: &str, sub: &str, phase: &str, resume: &str| {
        let mut r = release("Applied", phase, &[(ROLLOUT_RESUME, resume)], "t1");
        r.metadata.name = Some(name.into());
        r.spec.subscription = sub.into();
        r
    };
    let superseded = |o: &Others| o.superseded.iter().map(|(n, st)| format!("{n} {} {}", st.phase, st.message)).collect::<Vec<_>>();
    let all = [of("ferrol.v2", "ferrol", COMPLETE, ""), of("ferrol.v3", "ferrol", PROGRESSING, ""), of("other.v3", "other", PAUSED, "")];
    let o = others(&all, "ferrol", "ferrol.v4", "v4");
    assert_eq!(superseded(&o), ["ferrol.v3 Superseded superseded by the rollout to v4"]);
    assert_eq!(o.held_by, None, "another subscription's pause holds nothing here");
    let all = [of("ferrol.v2", "ferrol", PAUSED, "t1"), of("ferrol.v4", "ferrol", PAUSED, "")];
    let o = others(&all, "ferrol", "ferrol.v4", "v4");
    assert_eq!((o.superseded.len(), o.held_by.as_deref()), (0, Some("ferrol.v2")), "paused, not asked to resume: holds");
    let all = [of("ferrol.v2", "ferrol", PAUSED, "t2"), of("ferrol.v3", "ferrol", WAITING, "")];
    let o = others(&all, "ferrol", "ferrol.v4", "v4");
    assert_eq!(o.superseded.len(), 2, "a resumed one goes on as the newer rollout, a waiting one too");
}

#[test]
fn removing_rollout_stops_only_our_rollouts() {
    let set = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<BTreeSet<String>>();
    let running = rollout(&THREE, 2, PROGRESSING, PROGRESSING);
    // (what, its phase, driven, configured, driven ever, what becomes of it)
    type Row<'a> = (&'a str, &'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str], Undriven);
    let cases: &[Row<'_>] = &[
        ("still driven", PROGRESSING, &["a"], &["a"], &["a"], Undriven::Keep),
        ("not running", COMPLETE, &[], &["a"], &["a"], Undriven::Keep),
        ("`rollout:` removed", PAUSED, &[], &["a"], &["a"], Undriven::Stop("`rollout:` was removed from subscription `a`".into())),
        ("subscription removed", WAITING, &[], &[], &["a"], Undriven::Stop("subscription `a` was removed from the config".into())),
        ("another process's", PROGRESSING, &[], &[], &[], Undriven::NotOurs),
    ];
    for (name, phase, driven, configured, ever, want) in cases {
        let st = RolloutStatus { phase: (*phase).into(), ..running.clone() };
        assert_eq!(&undriven("a", &st, &set(driven), &set(configured), &set(ever)), want, "{name}");
    }
    let st = stopped(&running, "`rollout:` was removed from subscription `a`");
    assert_eq!((st.phase.as_str(), st.reason.as_str(), st.wave_started.as_str()), (STOPPED, "RolloutRemoved", ""));
    assert_eq!(
        st.message,
        "`rollout:` was removed from subscription `a`; nothing further is moved (1/6 Clusters done, stopped in wave 2/3)"
    );
}

#[test]
fn requests_are_read_from_the_annotations() {
    let rel = release("Applied", PAUSED, &[(ROLLOUT_RESUME, "r"), (ROLLOUT_PAUSE, "p")], "");
    assert_eq!(Requests::of(&rel), Requests { resume: "r".into(), pause: "p".into() });
    assert_eq!(Requests::of(&release("Applied", PAUSED, &[], "")), Requests::default());
}

/// One round over the last wave of [`THREE`] (`ns/c03`..`ns/c05`, started at `at(0)`) under
/// `policy`, `moved_from` recorded for each of its Clusters at `v1.27.3` unless `older_version`.
fn last_wave(fleet_states: &[(&str, &str)], policy: &Policy<'_>, now: i64, older_version: Option<&str>) -> (Vec<String>, RolloutStatus) {
    let mut st = rollout(&THREE, 3, PROGRESSING, PROGRESSING);
    st.plan[2].moved_from = ["ns/c03", "ns/c04", "ns/c05"]
        .map(|c| MovedFrom { cluster: c.into(), class: V3.into(), version: older_version.unwrap_or("v1.27.3").into() })
        .into();
    let t = Target { class: V4, version: None, v1beta2: false };
    let steps =
        advance(&mut st, &fleet(fleet_states), &t, &Requests { resume: "t1".into(), pause: "t1".into() }, policy, at(now), &wall(now));
    (show(&steps), st)
}

#[test]
fn failures_within_max_failures_let_the_wave_go_on_and_over_it_pause() {
    let one = Policy { max_failures: Budget::Clusters(1), ..Policy::strict(TIMEOUT) };
    let (steps, st) = last_wave(&[("ns/c03", "done"), ("ns/c04", "failed"), ("ns/c05", "done")], &one, 5, None);
    assert_eq!(steps, ["failed 3 ns/c04 ClusterFailed LeftAlone", "done 3/3 (2, 1 failed)", "complete (1 failed)"]);
    assert_eq!((st.phase.as_str(), st.done, st.summary.as_str()), (COMPLETE, 5, "5/6 (1 failed)"));
    assert_eq!((st.failed[0].cluster.as_str(), st.failed[0].message.as_str()), ("ns/c04", "UpgradeFailed: m"));

    let (steps, st) = last_wave(&[("ns/c03", "failed"), ("ns/c04", "failed"), ("ns/c05", "done")], &one, 5, None);
    assert_eq!(
        steps.last().map(String::as_str),
        Some("paused 3/3 ClusterFailed: ns/c03: UpgradeFailed: m (2 of 3 Clusters of the wave failed; maxFailures 1)")
    );
    assert_eq!((st.phase.as_str(), st.reason.as_str(), st.failed.len()), (PAUSED, "ClusterFailed", 2));

    // 34 % of a wave of three is one Cluster (rounded down); 33 % is none.
    let pct = |p| Policy { max_failures: Budget::Percent(p), ..Policy::strict(TIMEOUT) };
    let some_failed = [("ns/c03", "done"), ("ns/c04", "failed"), ("ns/c05", "done")];
    assert_eq!(last_wave(&some_failed, &pct(34), 5, None).1.phase, COMPLETE);
    assert_eq!(last_wave(&some_failed, &pct(33), 5, None).1.phase, PAUSED);

    // A late Cluster past waveTimeout is a failure too: within the budget the wave is done.
    let (steps, st) = last_wave(&[("ns/c03", "done"), ("ns/c04", "late"), ("ns/c05", "done")], &one, 31, None);
    assert_eq!(steps, ["failed 3 ns/c04 WaveTimeout LeftAlone", "done 3/3 (2, 1 failed)", "complete (1 failed)"]);
    assert!(st.failed[0].message.starts_with("not done within waveTimeout 30s: Cluster API"), "{:?}", st.failed);
    // Within waveTimeout it is waited for, not given up on.
    let (steps, st) = last_wave(&[("ns/c03", "done"), ("ns/c04", "late"), ("ns/c05", "done")], &one, 29, None);
    assert!(steps.is_empty() && st.failed.is_empty() && st.phase == PROGRESSING, "{steps:?}");
}

#[test]
fn a_failed_cluster_is_moved_back_only_where_its_kubernetes_version_did_not_change() {
    let rollback = |n| Policy { max_failures: Budget::Clusters(n), on_failure: OnFailure::Rollback, ..Policy::strict(TIMEOUT) };
    let states = [("ns/c03", "done"), ("ns/c04", "failed"), ("ns/c05", "done")];
    let (steps, st) = last_wave(&states, &rollback(1), 5, None);
    assert_eq!(
        steps,
        [
            "failed 3 ns/c04 ClusterFailed RollingBack".to_owned(),
            format!("roll back ns/c04 to {V3}"),
            "done 3/3 (2, 1 failed)".to_owned(),
            "complete (1 failed)".to_owned()
        ]
    );
    // Over the budget it is moved back all the same, and the rollout pauses.
    let (steps, st_paused) = last_wave(&states, &rollback(0), 5, None);
    assert_eq!(steps[..2], ["failed 3 ns/c04 ClusterFailed RollingBack".to_owned(), format!("roll back ns/c04 to {V3}")]);
    assert_eq!((st_paused.phase.as_str(), st_paused.reason.as_str()), (PAUSED, "ClusterFailed"));
    // A move back not made yet (its edit failed) is tried again at the next round, paused or not.
    let t = Target { class: V4, version: None, v1beta2: false };
    for mut st in [st, st_paused] {
        let steps =
            advance(&mut st, &fleet(&states), &t, &Requests { resume: "t1".into(), pause: "t1".into() }, &rollback(1), at(9), &wall(9));
        assert_eq!(show(&steps).first(), Some(&format!("roll back ns/c04 to {V3}")));
        st.failed[0].outcome = ROLLED_BACK.into();
        let steps =
            advance(&mut st, &fleet(&states), &t, &Requests { resume: "t1".into(), pause: "t1".into() }, &rollback(1), at(9), &wall(9));
        assert!(show(&steps).iter().all(|s| !s.starts_with("roll back")), "once moved back, never again: {steps:?}");
    }

    // The rollout moved its Kubernetes version (v1.26.0 -> v1.27.3): Cluster API refuses to go back.
    let (steps, st) = last_wave(&states, &rollback(1), 5, Some("v1.26.0"));
    assert_eq!(steps[0], "failed 3 ns/c04 ClusterFailed RollbackImpossible");
    assert_eq!((st.phase.as_str(), st.reason.as_str()), (PAUSED, ROLLBACK_IMPOSSIBLE), "paused whatever the budget");
    assert_eq!(
        st.message,
        "ns/c04: UpgradeFailed: m; it cannot be moved back: the rollout moved its Kubernetes version from v1.26.0 to v1.27.3, and \
         Cluster API refuses to decrease `spec.topology.version`"
    );
    let cp = json!({"status": {"version": "v1.27.3"}});
    let from = MovedFrom { cluster: "ns/c04".into(), class: V3.into(), version: "v1.26.0".into() };
    let why = rollback_to(&cluster("ns/c04", V4, true).data, Some(&cp), Some(&from)).unwrap_err().to_string();
    assert!(
        why.ends_with("; its control plane already runs v1.27.3, and Cluster API refuses to decrease `spec.topology.version`"),
        "{why}"
    );
    assert_eq!(rollback_to(&cluster("ns/c04", V4, true).data, None, None), Err(NoRollback::NotRecorded));
}

#[test]
fn a_resume_gives_the_clusters_given_up_on_in_its_wave_another_try() {
    let states = [("ns/c03", "done"), ("ns/c04", "failed"), ("ns/c05", "done")];
    let (_, mut st) = last_wave(&states, &Policy::strict(TIMEOUT), 5, None);
    assert_eq!((st.phase.as_str(), st.failed.len()), (PAUSED, 1));
    let t = Target { class: V4, version: None, v1beta2: false };
    let steps = advance(
        &mut st,
        &fleet(&states),
        &t,
        &Requests { resume: "t2".into(), pause: "t1".into() },
        &Policy::strict(TIMEOUT),
        at(9),
        &wall(9),
    );
    assert_eq!(show(&steps), ["resumed 3/3", "started 3/3 ns/c03,ns/c04,ns/c05"]);
    assert!(st.failed.is_empty());
}

#[test]
fn waves_start_and_clusters_move_only_inside_their_windows() {
    let next = at(3600);
    let closed_for = |closed: &'static [&'static str]| {
        move |key: &str| if closed.contains(&key) { Verdict::Closed(Some(at(3600))) } else { Verdict::Open(at(7200)) }
    };
    let t = Target { class: V4, version: None, v1beta2: false };
    let requests = Requests { resume: "t1".into(), pause: "t1".into() };
    let old: &[(&str, &str)] = &[("ns/c01", "old"), ("ns/c02", "old")];

    // Every Cluster of the pending wave outside its windows: the wave waits, said once.
    let all_closed = closed_for(&["ns/c01", "ns/c02"]);
    let policy = Policy { window: &all_closed, ..Policy::strict(TIMEOUT) };
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    let steps = show(&advance(&mut st, &fleet(old), &t, &requests, &policy, at(5), &wall(5)));
    assert_eq!(steps, [format!("outside window 2/3 next {}", timestamp(next))]);
    assert_eq!((st.phase.as_str(), st.reason.as_str(), st.next_window.clone()), (PROGRESSING, OUTSIDE_WINDOW, timestamp(next)));
    assert_eq!(st.plan[1].phase, PENDING);
    assert!(advance(&mut st, &fleet(old), &t, &requests, &policy, at(6), &wall(6)).is_empty(), "said once");

    // One opens: the wave starts with it; the other waits inside the running wave.
    let one_closed = closed_for(&["ns/c02"]);
    let policy = Policy { window: &one_closed, ..Policy::strict(TIMEOUT) };
    let steps = show(&advance(&mut st, &fleet(old), &t, &requests, &policy, at(10), &wall(10)));
    assert_eq!(steps, ["started 2/3 ns/c01"]);
    assert_eq!(st.plan[1].awaiting_window, ["ns/c02"]);
    assert_eq!(st.reason, OUTSIDE_WINDOW, "still waiting for ns/c02's window");
    // It is not timed out while a Cluster of its wave waits for a window.
    let moved: &[(&str, &str)] = &[("ns/c01", "late"), ("ns/c02", "old")];
    assert!(advance(&mut st, &fleet(moved), &t, &requests, &policy, at(500), &wall(500)).is_empty());
    assert_eq!(st.phase, PROGRESSING);

    // Its window opens: it is moved, and the wave's clock starts again.
    let none_closed = closed_for(&[]);
    let policy = Policy { window: &none_closed, ..Policy::strict(TIMEOUT) };
    let steps = show(&advance(&mut st, &fleet(moved), &t, &requests, &policy, at(600), &wall(600)));
    assert_eq!(steps, ["moved 2/3 ns/c02"]);
    assert_eq!((st.wave_started.clone(), st.reason.as_str(), st.next_window.as_str()), (timestamp(at(600)), "", ""));
    assert!(st.plan[1].awaiting_window.is_empty());
}

/// A v1beta1 Cluster `ns/name` on `class` at Kubernetes `version`, available.
fn on(key: &str, class: &str, version: &str) -> DynamicObject {
    let mut c = cluster(key, class, true);
    c.data["spec"]["topology"]["version"] = json!(version);
    c
}

#[test]
fn a_cluster_minors_behind_steps_through_the_newest_release_of_each_minor() {
    let offered: Vec<String> =
        ["scs-a-1-33-v2", "scs-a-1-33-v1", "scs-a-1-32-v5", "scs-a-1-32-v4", "scs-a-1-31-v3"].map(str::to_owned).into();
    let target = "scs-a-1-33-v2";
    assert_eq!(
        path("scs-a-1-30-v7", target, &offered).unwrap(),
        ["scs-a-1-31-v3", "scs-a-1-32-v5", "scs-a-1-33-v2"],
        "three minors: three steps"
    );
    assert_eq!(path("scs-a-1-32-v4", target, &offered).unwrap(), ["scs-a-1-33-v2"]);
    assert_eq!(path("scs-a-1-33-v1", target, &offered).unwrap(), ["scs-a-1-33-v2"], "the same minor: one step");
    let gap: Vec<String> = ["scs-a-1-33-v2", "scs-a-1-31-v3"].map(str::to_owned).into();
    assert_eq!(
        path("scs-a-1-30-v7", target, &gap).unwrap_err().to_string(),
        "no release of Kubernetes 1.32 is offered: a Cluster moves one minor at a time"
    );

    // Which Clusters a line's rollout takes: those on an older release of a family it follows.
    let line = crate::model::version::Families {
        stack: "scs-a",
        kubernetes: Some(Box::leak(Box::new(semver::VersionReq::parse(">=1.30, <1.34").unwrap()))),
    };
    let mut members = BTreeMap::new();
    for (k, class) in [
        ("ns/a", "scs-a-1-30-v7"),
        ("ns/b", "scs-a-1-33-v2"),
        ("ns/c", "scs-a-1-29-v1"),
        ("ns/d", "scs-b-1-30-v1"),
        ("ns/e", "scs-a-1-32-v4"),
    ] {
        members.insert(k.to_owned(), Member { obj: cluster(k, class, true), canary: false });
    }
    let older = older(&members, target, line).unwrap();
    assert_eq!(
        older.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["ns/a", "ns/e"],
        "not the target's, not 1.29 (outside), not another line"
    );
    let (paths, none) = paths(&members, &older, target, &gap);
    assert_eq!(paths.keys().collect::<Vec<_>>(), ["ns/e"]);
    assert_eq!((none[0].cluster.as_str(), none[0].reason.as_str()), ("ns/a", "NoPath"));
    assert!(none[0].message.starts_with("on scs-a-1-30-v7: no release of Kubernetes 1.32"), "{:?}", none[0]);
    // One Cluster moves: the rollout is no "nothing can move".
    assert_eq!(nothing_can_move(paths.len(), &none, target), None);
    // Only Clusters without a path are not on the target: nothing can move, and why.
    let why = nothing_can_move(0, &none, target).expect("nothing can move");
    assert!(
        why.starts_with(&format!("nothing can move to {target}: 1 Cluster not on it has no path to it (ns/a: on scs-a-1-30-v7: ")),
        "{why}"
    );
    // Every Cluster runs the target: nothing is left out, there is nothing to move.
    assert_eq!(nothing_can_move(0, &[], target), None);
}

#[test]
fn a_wave_moves_each_cluster_one_minor_at_a_time_when_it_is_upgraded_and_available() {
    let (s31, s32, s33) = ("scs-a-1-31-v3", "scs-a-1-32-v5", "scs-a-1-33-v2");
    let paths = BTreeMap::from([
        ("ns/a".to_owned(), vec![s31.to_owned(), s32.to_owned(), s33.to_owned()]),
        ("ns/b".to_owned(), vec![s33.to_owned()]),
    ]);
    let requests = Requests { resume: "t1".into(), pause: "t1".into() };
    let mut st = start(&[Wave::Percent(100)], &[("ns/a".into(), false), ("ns/b".into(), false)], &paths, &requests, at(0));
    assert_eq!(
        st.plan[0].paths,
        [ClusterPath { cluster: "ns/a".into(), steps: vec![s31.into(), s32.into(), s33.into()] }],
        "only multi-step paths are written"
    );
    assert_eq!(next_stop(&st, "ns/a", "scs-a-1-30-v7", s33), s31);
    assert_eq!(next_stop(&st, "ns/a", s31, s33), s32);
    assert_eq!(next_stop(&st, "ns/b", "scs-a-1-32-v1", s33), s33);
    let t = Target { class: s33, version: Some("v1.33.1"), v1beta2: false };
    let policy = Policy::strict(TIMEOUT);
    let mut f = Fleet {
        versions: BTreeMap::from([(s31.to_owned(), Some("v1.31.4".to_owned())), (s32.to_owned(), Some("v1.32.2".to_owned()))]),
        ..Fleet::default()
    };
    let set = |f: &mut Fleet, key: &str, class: &str, version: &str, cp: &str| {
        f.members.insert(key.into(), Member { obj: on(key, class, version), canary: false });
        f.syncs.insert(key.into(), sync(class, None));
        f.control_planes.insert(key.into(), json!({"status": {"version": cp}}));
    };
    assert_eq!(show(&advance(&mut st, &f, &t, &requests, &policy, at(1), &wall(1))), ["started 1/1 ns/a,ns/b"]);
    // a on 1.31, its control plane still on 1.30: waiting; b done.
    set(&mut f, "ns/a", s31, "v1.31.4", "v1.30.9");
    set(&mut f, "ns/b", s33, "v1.33.1", "v1.33.1");
    assert!(advance(&mut st, &f, &t, &requests, &policy, at(2), &wall(2)).is_empty());
    // a's control plane on 1.31 and available: its next step, and the wave's clock starts again.
    set(&mut f, "ns/a", s31, "v1.31.4", "v1.31.4");
    assert_eq!(show(&advance(&mut st, &f, &t, &requests, &policy, at(20), &wall(20))), ["next step 1/1 ns/a"]);
    assert_eq!(st.wave_started, timestamp(at(20)));
    set(&mut f, "ns/a", s32, "v1.32.2", "v1.32.2");
    assert_eq!(
        show(&advance(&mut st, &f, &t, &requests, &policy, at(40), &wall(40))),
        ["next step 1/1 ns/a"],
        "no waveTimeout: each step has its own"
    );
    set(&mut f, "ns/a", s33, "v1.33.1", "v1.33.1");
    assert_eq!(show(&advance(&mut st, &f, &t, &requests, &policy, at(41), &wall(41))), ["done 1/1 (2)", "complete"]);
    // A Cluster put on a class off its path changed hands.
    let mut st = start(&[Wave::Percent(100)], &[("ns/a".into(), false)], &paths, &requests, at(0));
    advance(&mut st, &f, &t, &requests, &policy, at(1), &wall(1));
    set(&mut f, "ns/a", "scs-a-1-32-v1", "v1.32.0", "v1.32.0");
    let steps = show(&advance(&mut st, &f, &t, &requests, &policy, at(2), &wall(2)));
    assert!(steps[0].starts_with("paused 1/1 ClassChanged: ns/a"), "{steps:?}");
}

#[test]
fn a_cluster_not_ready_on_its_release_is_never_moved_and_counts_as_configured() {
    let t = Target { class: V4, version: None, v1beta2: false };
    let requests = Requests { resume: "t1".into(), pause: "t1".into() };
    let round = |st: &mut RolloutStatus, states: &[(&str, &str)], policy: &Policy<'_>| {
        show(&advance(st, &fleet(states), &t, &requests, policy, at(5), &wall(5)))
    };

    // notReady: fail (the default): not moved, a failure of its wave; over maxFailures 0 the
    // rollout pauses at the next check, naming it.
    let strict = Policy::strict(TIMEOUT);
    // A Cluster whose apply is under way is not judged yet: it waits, neither moved nor failed
    // (a rollout that started during a first apply failed it, seen in a full CI run).
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    let steps = round(&mut st, &[("ns/c01", "old"), ("ns/c02", "applying")], &strict);
    assert_eq!(steps, ["started 2/3 ns/c01"], "{steps:?}");
    assert!(st.failed.is_empty(), "{:?}", st.failed);
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    let steps = round(&mut st, &[("ns/c01", "old"), ("ns/c02", "unhealthy")], &strict);
    assert_eq!(steps, ["failed 2 ns/c02 NotReadyBeforeMove LeftAlone", "started 2/3 ns/c01"], "only the Ready Cluster moves");
    assert!(st.failed[0].message.starts_with(&format!("not Ready on {V3} before its move (Unhealthy")), "{:?}", st.failed[0]);
    let steps = round(&mut st, &[("ns/c01", "done"), ("ns/c02", "unhealthy")], &strict);
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert!(steps[0].starts_with("paused 2/3 ClusterFailed: ns/c02: not Ready on"), "{steps:?}");

    // Within maxFailures the wave goes on without it; it stays where it is.
    let one = Policy { max_failures: Budget::Clusters(1), ..Policy::strict(TIMEOUT) };
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    round(&mut st, &[("ns/c01", "old"), ("ns/c02", "unhealthy")], &one);
    let steps = round(&mut st, &[("ns/c01", "done"), ("ns/c02", "unhealthy")], &one);
    assert_eq!(steps[0], "done 2/3 (1, 1 failed)", "{steps:?}");

    // No ClusterSync yet (a daemon just started, a new Cluster): not known, so neither moved nor
    // failed; it waits (the wave's timeout with it) and moves once its ClusterSync says Ready.
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    let steps = round(&mut st, &[("ns/c01", "old"), ("ns/c02", "unsynced")], &strict);
    assert_eq!(steps, ["started 2/3 ns/c01"]);
    assert!(st.failed.is_empty() && st.plan[1].awaiting_window == ["ns/c02"], "{st:?}");
    let late = round(&mut st, &[("ns/c01", "done"), ("ns/c02", "unsynced")], &strict);
    assert!(late.is_empty() && st.phase == PROGRESSING, "waits: {late:?}");
    let steps = round(&mut st, &[("ns/c01", "done"), ("ns/c02", "old")], &strict);
    assert_eq!(steps, ["moved 2/3 ns/c02"]);

    // notReady: skip: reported, taken out of the wave and the total, not counted against the
    // budget (maxFailures 0 and the wave is done).
    let skip = Policy { not_ready: NotReady::Skip, ..Policy::strict(TIMEOUT) };
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    let steps = round(&mut st, &[("ns/c01", "old"), ("ns/c02", "unhealthy")], &skip);
    assert_eq!(steps, ["failed 2 ns/c02 NotReadyBeforeMove LeftAlone", "started 2/3 ns/c01"]);
    assert_eq!((st.total, st.plan[1].clusters.as_slice(), st.failed[0].wave), (5, &["ns/c01".to_owned()][..], 0));
    let steps = round(&mut st, &[("ns/c01", "done"), ("ns/c02", "unhealthy")], &skip);
    assert_eq!(steps[0], "done 2/3 (1)", "{steps:?}");

    // A Cluster whose window opens later is checked when it opens, not before.
    let closed_c02 = |key: &str| if key == "ns/c02" { Verdict::Closed(Some(at(60))) } else { Verdict::Always };
    let windowed = Policy { window: &closed_c02, ..Policy::strict(TIMEOUT) };
    let mut st = rollout(&THREE, 2, PENDING, PROGRESSING);
    let steps = round(&mut st, &[("ns/c01", "old"), ("ns/c02", "unhealthy")], &windowed);
    assert!(st.failed.is_empty() && steps.last().is_some_and(|s| s == "started 2/3 ns/c01"), "{steps:?}");
    let open = Policy { window: &|_| Verdict::Always, ..Policy::strict(TIMEOUT) };
    let steps = round(&mut st, &[("ns/c01", "late"), ("ns/c02", "unhealthy")], &open);
    assert!(steps.iter().any(|s| s == "failed 2 ns/c02 NotReadyBeforeMove LeftAlone"), "{steps:?}");
    assert!(!steps.iter().any(|s| s.starts_with("moved")), "{steps:?}");
}

fn given_up(cluster: &str, outcome: &str) -> FailedCluster {
    FailedCluster {
        cluster: cluster.into(),
        wave: 3,
        reason: "ClusterFailed".into(),
        message: "UpgradeFailed: m".into(),
        outcome: outcome.into(),
        detail: "d".into(),
    }
}

#[test]
fn a_wave_pauses_on_a_cluster_that_cannot_be_moved_back_or_over_its_budget() {
    struct Case {
        name: &'static str,
        given_up: &'static [(&'static str, &'static str)],
        failed_now: &'static [&'static str],
        late: &'static [&'static str],
        timed_out: bool,
        budget: Budget,
        want: Option<(&'static str, &'static str)>,
    }
    let cases = [
        Case { name: "nothing failed", given_up: &[], failed_now: &[], late: &[], timed_out: false, budget: Budget::None, want: None },
        Case {
            name: "within the budget",
            given_up: &[("ns/c03", LEFT_ALONE)],
            failed_now: &["ns/c03"],
            late: &[],
            timed_out: false,
            budget: Budget::Clusters(1),
            want: None,
        },
        Case {
            name: "a Cluster that cannot be moved back pauses whatever the budget",
            given_up: &[("ns/c03", LEFT_ALONE), ("ns/c04", ROLLBACK_IMPOSSIBLE)],
            failed_now: &["ns/c04"],
            late: &[],
            timed_out: false,
            budget: Budget::Clusters(5),
            want: Some((ROLLBACK_IMPOSSIBLE, "ns/c04: UpgradeFailed: m; it cannot be moved back: d")),
        },
        Case {
            name: "over no budget: the first Cluster that failed this round names it",
            given_up: &[("ns/c03", LEFT_ALONE), ("ns/c04", LEFT_ALONE)],
            failed_now: &["ns/c04"],
            late: &[],
            timed_out: false,
            budget: Budget::None,
            want: Some(("ClusterFailed", "ns/c04: why ns/c04")),
        },
        Case {
            name: "over a budget: the counts are said",
            given_up: &[("ns/c03", LEFT_ALONE), ("ns/c04", ROLLING_BACK)],
            failed_now: &["ns/c03", "ns/c04"],
            late: &[],
            timed_out: false,
            budget: Budget::Clusters(1),
            want: Some(("ClusterFailed", "ns/c03: why ns/c03 (2 of 3 Clusters of the wave failed; maxFailures 1)")),
        },
        Case {
            name: "none failed this round: the first given up on names it",
            given_up: &[("ns/c05", LEFT_ALONE)],
            failed_now: &[],
            late: &[],
            timed_out: false,
            budget: Budget::None,
            want: Some(("ClusterFailed", "ns/c05: UpgradeFailed: m")),
        },
        Case {
            name: "a timeout names the late Clusters",
            given_up: &[("ns/c04", LEFT_ALONE), ("ns/c05", LEFT_ALONE)],
            failed_now: &["ns/c04"],
            late: &["ns/c05"],
            timed_out: true,
            budget: Budget::Percent(34),
            want: Some((
                "WaveTimeout",
                "ns/c05 not done within waveTimeout 30s: late ns/c05 (2 of 3 Clusters of the wave failed; maxFailures 34%)",
            )),
        },
    ];
    for c in cases {
        let failed: Vec<FailedCluster> = c.given_up.iter().map(|(k, o)| given_up(k, o)).collect();
        let failed_here: Vec<&FailedCluster> = failed.iter().collect();
        let health = WaveHealth {
            failed: c.failed_now.iter().map(|k| ((*k).to_owned(), format!("why {k}"))).collect(),
            late: c.late.iter().map(|k| ((*k).to_owned(), format!("late {k}"))).collect(),
            ..WaveHealth::default()
        };
        let policy = Policy { max_failures: c.budget, ..Policy::strict(TIMEOUT) };
        let got = wave_pause(&failed_here, &health, c.timed_out, 3, &policy);
        assert_eq!(got.as_ref().map(|(r, m)| (*r, m.as_str())), c.want, "{}", c.name);
    }
}

#[test]
fn a_wave_done_completes_the_rollout_pauses_on_request_or_starts_the_next() {
    /// The state a wave's end leaves: what the round does next, the rollout's phase, wave and
    /// reason.
    type After = (Then, &'static str, u32, &'static str);
    // (wave, pause requested, steps, after)
    let cases: [(u32, bool, &[&str], After); 4] = [
        (1, false, &["done 1/3 (2, 1 failed)"], (Then::NextWave, PROGRESSING, 2, "")),
        (
            2,
            true,
            &["done 2/3 (2, 1 failed)", "paused 3/3 PauseRequested: paused by request before wave 3/3"],
            (Then::Wait, PAUSED, 3, "PauseRequested"),
        ),
        (3, false, &["done 3/3 (2, 1 failed)", "complete"], (Then::Wait, COMPLETE, 3, "")),
        (3, true, &["done 3/3 (2, 1 failed)", "complete"], (Then::Wait, COMPLETE, 3, "")),
    ];
    for (wave, pause, want, (then, phase, wave_after, reason)) in cases {
        let mut st = rollout(&THREE, wave, PROGRESSING, PROGRESSING);
        let requests = Requests { resume: "t1".into(), pause: if pause { "t2" } else { "t1" }.into() };
        let mut steps = Vec::new();
        let got = wave_done(&mut st, (wave as usize - 1, 3, 1), &requests, &mut steps);
        let case = format!("wave {wave}, pause requested {pause}");
        assert_eq!((got, show(&steps)), (then, want.iter().map(|s| (*s).to_owned()).collect()), "{case}");
        assert_eq!((st.phase.as_str(), st.wave, st.reason.as_str()), (phase, wave_after, reason), "{case}");
        assert_eq!(st.plan[wave as usize - 1].phase, DONE, "{case}");
        assert_eq!(st.handled_pause, if pause && wave < 3 { "t2" } else { "t1" }, "{case}: a request is handled once");
        assert_eq!(st.wave_started.is_empty(), phase == COMPLETE, "{case}: a complete rollout has no wave clock");
    }
}

#[test]
fn a_resume_starts_its_wave_again_and_forgets_the_clusters_given_up_on_in_it() {
    // (the paused wave's phase, the wave's phase after)
    for (before, after) in [(PROGRESSING, PENDING), (PENDING, PENDING), (DONE, DONE)] {
        let mut st = rollout(&THREE, 2, before, PAUSED);
        st.reason = "ClusterFailed".into();
        st.message = "m".into();
        st.failed =
            vec![FailedCluster { wave: 1, ..given_up("ns/c00", LEFT_ALONE) }, FailedCluster { wave: 2, ..given_up("ns/c01", LEFT_ALONE) }];
        st.plan[1].unmoved = vec!["ns/c02".into()];
        st.plan[1].awaiting_window = vec!["ns/c01".into()];
        let mut steps = Vec::new();
        resume(&mut st, &Requests { resume: "t3".into(), pause: "t2".into() }, &mut steps);
        assert_eq!(show(&steps), ["resumed 2/3"]);
        assert_eq!((st.phase.as_str(), st.reason.as_str(), st.message.as_str()), (PROGRESSING, "", ""));
        assert_eq!((st.handled_resume.as_str(), st.handled_pause.as_str()), ("t3", "t2"), "a resume cancels an earlier pause request");
        assert_eq!(st.failed.iter().map(|f| f.cluster.as_str()).collect::<Vec<_>>(), ["ns/c00"], "another try in its wave only");
        assert_eq!(st.plan[1].phase, after, "{before}");
        let cleared = before == PROGRESSING;
        assert_eq!((st.plan[1].unmoved.is_empty(), st.plan[1].awaiting_window.is_empty()), (cleared, cleared), "{before}");
    }
}
