//! Tests of the driver's pure pieces: the windows' verdicts of a round, where each Cluster is
//! moved next, the plan report's text.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde_json::json;

use super::*;
use crate::status::crd::ClusterPath;

fn member(key: &str, class: &str, labels: &[(&str, &str)]) -> (String, Member) {
    let (ns, name) = key.split_once('/').expect("ns/name");
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {"topology": {"class": class, "version": "v1.27.3"}}}))
    .expect("cluster");
    (key.to_owned(), Member { obj, canary: false })
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc)
}

#[test]
fn a_round_decides_each_clusters_window_once_and_an_unread_cluster_waits_only_under_windows() {
    let members: BTreeMap<String, Member> =
        [member("ns/eu", "v3", &[("region", "eu")]), member("ns/us", "v3", &[("region", "us")]), member("ns/bare", "v3", &[])].into();
    // Weekdays 22:00 UTC for two hours, for the `region: eu` Clusters only.
    let eu =
        window::Window::new("0 22 * * 1-5", Duration::from_secs(7200), "UTC", [("region".into(), "eu".into())].into()).expect("window");
    let inside = at("2026-01-13T22:30:00Z");
    let outside = at("2026-01-13T12:00:00Z");
    // (windows, now, cluster, verdict)
    let cases: [(&[window::Window], DateTime<Utc>, &str, Verdict); 7] = [
        (&[], inside, "ns/eu", Verdict::Always),
        (&[], inside, "ns/unread", Verdict::Always),
        (std::slice::from_ref(&eu), inside, "ns/eu", Verdict::Open(at("2026-01-14T00:00:00Z"))),
        (std::slice::from_ref(&eu), outside, "ns/eu", Verdict::Closed(Some(at("2026-01-13T22:00:00Z")))),
        (std::slice::from_ref(&eu), inside, "ns/us", Verdict::Closed(None)),
        (std::slice::from_ref(&eu), inside, "ns/bare", Verdict::Closed(None)),
        (std::slice::from_ref(&eu), inside, "ns/unread", Verdict::Closed(None)),
    ];
    for (windows, now, key, want) in cases {
        assert_eq!(Windows::of(windows, &members, now).verdict(key), want, "{key} at {now} under {} windows", windows.len());
    }
}

#[test]
fn a_cluster_moves_to_the_next_class_on_its_path_or_straight_to_the_target() {
    let members: BTreeMap<String, Member> =
        [member("ns/a", "v1-26", &[]), member("ns/b", "v1-27", &[]), member("ns/c", "v1-28", &[]), member("ns/d", "v1-28", &[])].into();
    let paths = ["ns/a", "ns/b", "ns/c"].map(|c| ClusterPath { cluster: c.into(), steps: vec!["v1-27".into(), "v1-28".into()] });
    let st = RolloutStatus { plan: vec![WaveStatus { paths: paths.into(), ..WaveStatus::default() }], ..RolloutStatus::default() };
    let stops = stops(&st, &["ns/a", "ns/b", "ns/c", "ns/d", "ns/gone"], &members, "v1-29");
    let want: BTreeMap<String, String> =
        [("ns/a", "v1-27"), ("ns/b", "v1-28"), ("ns/c", "v1-29"), ("ns/d", "v1-29")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    assert_eq!(stops, want, "a Cluster not read this round has no stop");
}

fn report(waves: Vec<PlannedWave>, left_out: Vec<FailedCluster>) -> PlanReport {
    PlanReport {
        subscription: "scs".into(),
        offered: vec!["scs-1-31-v1".into(), "scs-1-29-v2".into()],
        target: Some("scs-1-31-v1".into()),
        phase: String::new(),
        message: String::new(),
        waves,
        left_out,
        summary: String::new(),
    }
}

fn no_path(cluster: &str) -> FailedCluster {
    FailedCluster {
        cluster: cluster.into(),
        wave: 0,
        reason: "NoPath".into(),
        message: "on scs-1-29-v2: no release of Kubernetes 1.30 is offered: a Cluster moves one minor at a time".into(),
        outcome: plan::LEFT_ALONE.into(),
        detail: String::new(),
    }
}

#[test]
fn the_plan_says_nothing_can_move_when_only_clusters_without_a_path_are_left() {
    let text = report(Vec::new(), vec![no_path("ns/old")]).text();
    assert!(text.contains("nothing can move to scs-1-31-v1: 1 Cluster not on it has no path to it (ns/old: on scs-1-29-v2"), "{text}");
    assert!(!text.contains("nothing to move"), "{text}");
    assert!(text.contains("left out:\n  ns/old: on scs-1-29-v2"), "{text}");

    let text = report(Vec::new(), Vec::new()).text();
    assert!(text.contains("every Cluster runs it: nothing to move"), "{text}");

    let moving = PlannedWave {
        phase: plan::PENDING.into(),
        clusters: vec![PlannedCluster {
            cluster: "ns/a".into(),
            canary: false,
            now: "scs-1-30-v1@v1.30.2".into(),
            steps: vec!["scs-1-31-v1@v1.31.1".into()],
            window: String::new(),
        }],
    };
    let text = report(vec![moving], vec![no_path("ns/old")]).text();
    assert!(text.contains("not started: this is what it would do now (would move 1 Clusters in 1 waves)"), "{text}");
}

#[test]
fn the_plan_says_each_clusters_windows_now() {
    let cases = [
        (None, ""),
        (Some(Verdict::Always), ""),
        (Some(Verdict::Open(at("2026-01-14T00:00:00Z"))), "open until 2026-01-14T00:00:00Z"),
        (Some(Verdict::Closed(Some(at("2026-01-13T22:00:00Z")))), "closed: the next opens at 2026-01-13T22:00:00Z"),
        (Some(Verdict::Closed(None)), "closed: none of its windows opens again"),
    ];
    for (verdict, want) in cases {
        assert_eq!(window_said(verdict.clone()), want, "{verdict:?}");
    }
}

#[test]
fn the_planned_waves_show_each_cluster_now_and_through_its_steps() {
    let members: BTreeMap<String, Member> = [member("ns/a", "v1-27", &[]), member("ns/b", "v1-28", &[])].into();
    let wave = WaveStatus {
        clusters: vec!["ns/a".into(), "ns/b".into(), "ns/gone".into()],
        phase: plan::PENDING.into(),
        paths: vec![ClusterPath { cluster: "ns/a".into(), steps: vec!["v1-28".into(), "v1-29".into()] }],
        ..WaveStatus::default()
    };
    let st = RolloutStatus { plan: vec![wave], ..RolloutStatus::default() };
    let versions: BTreeMap<String, Option<String>> = [("v1-28".to_owned(), Some("v1.28.9".to_owned())), ("v1-29".to_owned(), None)].into();
    let waves = planned_waves(&st, &members, &versions, &window::at(&[], at("2026-01-13T12:00:00Z")), "v1-29");
    let shown: Vec<(&str, &str, Vec<&str>, &str)> = waves[0]
        .clusters
        .iter()
        .map(|c| (c.cluster.as_str(), c.now.as_str(), c.steps.iter().map(String::as_str).collect(), c.window.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("ns/a", "v1-27@v1.27.3", vec!["v1-28@v1.28.9", "v1-29@?"], ""),
            ("ns/b", "v1-28@v1.27.3", vec!["v1-29@?"], ""),
            ("ns/gone", "@?", vec!["v1-29@?"], ""),
        ]
    );
    assert_eq!(waves[0].phase, plan::PENDING);
}
