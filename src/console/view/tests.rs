use super::*;
use crate::status::crd::{
    ClusterSyncSpec, ClusterSyncStatus, ReleaseRefStatus, RolloutStatus, StackReleaseSpec, StackReleaseStatus, WaveStatus,
};
use serde_json::json;

fn cond(type_: &str, status: &str, reason: &str) -> Condition {
    Condition { type_: type_.into(), status: status.into(), reason: reason.into(), ..Condition::default() }
}

fn sync(ns: &str, name: &str, conditions: Vec<Condition>) -> ClusterSync {
    let mut cs = ClusterSync::new(name, ClusterSyncSpec { cluster: name.into(), subscription: "ferrol".into() });
    cs.metadata.namespace = Some(ns.into());
    cs.status = Some(ClusterSyncStatus {
        conditions,
        synced: 4,
        total: 5,
        message: "Deployment/kube-system/ccm: 0/1 replicas available".into(),
        applied_release: Some(ReleaseRefStatus { tag: "v3".into(), ..Default::default() }),
        ..Default::default()
    });
    cs
}

fn cluster(ns: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let mut c = DynamicObject::new(name, &ar).within(ns);
    c.data = json!({ "spec": spec });
    c
}

#[test]
fn a_clusters_state_follows_its_conditions() {
    let t = |t: &str| cond(t, "True", "x");
    let cases: Vec<(&str, Option<Vec<Condition>>, bool, State)> = vec![
        ("no ClusterSync", None, false, State::Unmanaged),
        ("ready", Some(vec![cond("Ready", "True", "Synced")]), false, State::Ready),
        ("the Cluster paused wins", Some(vec![cond("Ready", "True", "Synced")]), true, State::Paused),
        ("Paused condition", Some(vec![cond("Ready", "True", "Synced"), t("Paused")]), false, State::Paused),
        ("suspended", Some(vec![cond("Ready", "False", "NotSynced"), t("Suspended")]), false, State::Suspended),
        ("unreachable", Some(vec![cond("Ready", "False", "ClusterUnreachable"), t("Reconciling")]), false, State::Unreachable),
        ("kubeconfig missing", Some(vec![cond("Ready", "False", "KubeconfigMissing")]), false, State::Unreachable),
        ("stalled", Some(vec![cond("Ready", "False", "RenderFailed"), t("Stalled")]), false, State::Failed),
        ("reconciling", Some(vec![cond("Ready", "False", "Progressing"), t("Reconciling")]), false, State::Progressing),
        ("progressing without Reconciling", Some(vec![cond("Ready", "False", "Progressing")]), false, State::Progressing),
        ("no condition yet", Some(vec![]), false, State::Progressing),
        ("not ready, not reconciling", Some(vec![cond("Ready", "False", "UpgradeFailed")]), false, State::Failed),
    ];
    for (what, conditions, paused, want) in cases {
        let cs = conditions.map(|c| sync("team-a", "alpha", c));
        let c = cluster("team-a", "alpha", if paused { json!({"paused": true}) } else { json!({}) });
        assert_eq!(state_of(Some(&c), cs.as_ref()), want, "{what}");
    }
}

#[test]
fn minors_are_read_from_versions() {
    assert_eq!(minor("v1.27.3").as_deref(), Some("1.27"));
    assert_eq!(minor("1.35.0").as_deref(), Some("1.35"));
    assert_eq!(minor("latest"), None);
    assert_eq!(minor(""), None);
}

#[test]
fn queries_read_back_what_they_write() {
    let q = Query::parse("q=web%20eu&state=failed&ns=team-a&release=v3&sort=lastsync&desc=1&page=3&per=50&bogus=1");
    assert_eq!(q.text, "web eu");
    assert_eq!(q.state, Some(State::Failed));
    assert_eq!((q.sort, q.descending, q.page, q.per_page), (Sort::LastSync, true, 3, 50));
    assert_eq!(Query::parse(&q.to_query(|_| {})), q);
    assert_eq!(Query::parse("page=0&per=999999"), Query { page: 1, per_page: MAX_PER_PAGE, ..Query::default() });
    assert_eq!(Query::default().to_query(|_| {}), "");
}

fn fleet(n: usize) -> Snapshot {
    let mut s = Snapshot::default();
    for i in 0..n {
        let name = format!("c{i:04}");
        s.clusters.push(Arc::new(cluster("team-a", &name, json!({"topology": {"class": "v3", "version": "v1.27.3"}}))));
        let ready = if i % 10 == 0 { cond("Ready", "False", "UpgradeFailed") } else { cond("Ready", "True", "Synced") };
        s.syncs.push(Arc::new(sync("team-a", &name, vec![ready])));
    }
    // A ClusterSync whose Cluster is gone still shows.
    s.syncs.push(Arc::new(sync("team-b", "orphan", vec![cond("Ready", "True", "Synced")])));
    let mut rel = StackRelease::new("ferrol.v4", StackReleaseSpec { subscription: "ferrol".into(), source: "s".into(), tag: "v4".into() });
    rel.status = Some(StackReleaseStatus {
        rollout: Some(RolloutStatus {
            phase: "Progressing".into(),
            plan: vec![
                WaveStatus { clusters: vec!["team-a/c0001".into()], ..Default::default() },
                WaveStatus { clusters: vec!["team-a/c0002".into()], ..Default::default() },
            ],
            ..Default::default()
        }),
        ..Default::default()
    });
    s.releases.push(Arc::new(rel));
    s
}

#[test]
fn a_page_counts_the_whole_fleet_and_returns_only_its_rows() {
    let s = fleet(250);
    let p = page(rows(&s), &Query::default());
    assert_eq!(p.counts.total, 251);
    assert_eq!(p.counts.by_state.get(&State::Failed), Some(&25));
    assert_eq!(p.counts.by_state.get(&State::Ready), Some(&226));
    assert_eq!(p.counts.by_minor.get("1.27"), Some(&250));
    assert_eq!(p.counts.by_minor.get("unknown"), Some(&1));
    assert_eq!(p.matching, 251);
    assert_eq!(p.rows.len(), PER_PAGE);
    assert_eq!((p.rows[0].state, p.rows[0].name), (State::Failed, "c0000"), "failures first by default");
    assert_eq!(p.rows[0].problem, "Deployment/kube-system/ccm: 0/1 replicas available");

    let last = page(rows(&s), &Query { page: 3, ..Query::default() });
    assert_eq!(last.rows.len(), 51);
    let beyond = page(rows(&s), &Query { page: 99, ..Query::default() });
    assert!(beyond.rows.is_empty());

    let failed = page(rows(&s), &Query::parse("state=Failed&sort=name&desc=1&per=5"));
    assert_eq!(failed.matching, 25);
    assert_eq!(failed.rows.iter().map(|r| r.name).collect::<Vec<_>>(), ["c0240", "c0230", "c0220", "c0210", "c0200"]);

    let text = page(rows(&s), &Query::parse("q=C0001"));
    assert_eq!(text.rows.iter().map(|r| r.name).collect::<Vec<_>>(), ["c0001"]);
    let wave = text.rows[0].wave.as_ref().expect("in the rollout");
    assert_eq!((wave.release, wave.wave, wave.waves), ("ferrol.v4", 1, 2));
    let orphan = page(rows(&s), &Query::parse("ns=team-b"));
    assert_eq!(orphan.rows.iter().map(|r| r.name).collect::<Vec<_>>(), ["orphan"]);
}
