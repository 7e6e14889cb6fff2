//! Table tests of the sync's pure decisions.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::*;
use crate::config::Config;
use crate::model::{Object, StageAction};
use crate::status::crd::ReleaseRefStatus;
use applier::{Action, Entry};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").expect("time").with_timezone(&Utc)
}

/// A manifests subscription (`clusterstack: false`) or a cluster stack's.
fn sub(clusterstack: bool) -> Subscription {
    let (stack, format) = if clusterstack { ("    stack: docker-ferrol-1-27\n", "clusterstack") } else { ("", "manifests") };
    let text = format!(
        "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: /tmp/cache\nsources:\n  - name: s\n    git:\n      url: https://example.test/s.git\nsubscriptions:\n  - name: sub\n    source: s\n{stack}    format: {format}\n    interval: 1h\n    clusterSelector:\n      matchLabels: {{a: b}}\ntarget:\n  kubernetes: {{}}\n"
    );
    Config::parse(std::path::Path::new("stacksync.yaml"), &text).expect("config").subscriptions.remove(0)
}

fn cluster() -> ClusterConfig {
    ClusterConfig { name: "c".into(), namespace: "ns".into(), values: Default::default(), objects: Default::default() }
}

fn rel(tag: &str) -> Release {
    Release {
        source: "s".into(),
        tag: tag.into(),
        commit: "c".repeat(40),
        version: crate::model::version::Version::from_tag(tag).expect("version"),
    }
}

fn prepared(tag: &str) -> PreparedRelease {
    PreparedRelease {
        release: rel(tag),
        tree: "/tree".into(),
        fetched: false,
        note: None,
        assets: Vec::new(),
        unverified: None,
        signed_by: None,
        moved_tags_accepted: false,
    }
}

fn object(name: &str) -> Object {
    Object {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: name.into(),
        file: "m.yaml".into(),
        line: 1,
        body: json!({"metadata": {"name": name}}),
        chart: None,
        stage: None,
    }
}

fn stages() -> Vec<Stage> {
    vec![Stage { name: "manifests".into(), action: StageAction::Apply, objects: vec![object("a"), object("b")] }]
}

/// A previous status: the release applied (if any), its rendered digest and upgrade phase.
fn prev(applied: Option<&str>, digest: &str, upgrade_phase: Option<&str>) -> ClusterSyncStatus {
    ClusterSyncStatus {
        applied_release: applied.map(|tag| ReleaseRefStatus { tag: tag.into(), ..Default::default() }),
        rendered_digest: digest.into(),
        upgrade: upgrade_phase.map(|phase| UpgradeStatus { phase: phase.into(), ..Default::default() }),
        ..Default::default()
    }
}

#[test]
fn before_the_apply_progress_is_recorded_on_a_new_render_and_upgrades_run_on_a_release_change() {
    let digest = rendered_digest(stages().iter().flat_map(|s| &s.objects), &Default::default());
    let done = Some(UpgradeStatus { phase: upgrade::DONE.into(), ..Default::default() });
    // (cluster stack, previous status, release) -> (apply-started status written, upgrade)
    let table = [
        (false, prev(Some("v1.0.0"), &digest, None), "v1.0.0", false, Upgrade::Keep(None)),
        (false, prev(Some("v1.0.0"), "sha256:old", None), "v1.1.0", true, Upgrade::Keep(None)),
        // A first install: nothing to claim wrongly, its status is written when the apply ends.
        (false, prev(None, "", None), "v1.0.0", false, Upgrade::Keep(None)),
        (true, prev(Some("docker-ferrol-1-27-v1"), &digest, Some(upgrade::DONE)), "docker-ferrol-1-27-v1", false, Upgrade::Keep(done)),
        // Stages left half-way (the class moved back) are abandoned.
        (true, prev(Some("docker-ferrol-1-27-v1"), &digest, Some("Applying")), "docker-ferrol-1-27-v1", false, Upgrade::Keep(None)),
        (true, prev(Some("docker-ferrol-1-27-v1"), "sha256:old", None), "docker-ferrol-1-27-v2", true, Upgrade::Advance),
        (true, prev(None, "", None), "docker-ferrol-1-27-v1", true, Upgrade::Advance),
    ];
    for (i, (clusterstack, prev, tag, progress, upgrade)) in table.into_iter().enumerate() {
        let b = before(&sub(clusterstack), &prev, &rel(tag), &stages(), &Default::default(), now());
        assert_eq!(b.digest, digest, "row {i}");
        assert_eq!(b.progress.is_some(), progress, "row {i}: apply-started status");
        assert_eq!(b.upgrade, upgrade, "row {i}");
        if let Some(p) = b.progress {
            assert_eq!(p.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.as_str()), Some("Progressing"), "row {i}");
        }
    }
}

fn entry(name: &str, action: Action, message: &str) -> Entry {
    Entry::for_object(&object(name), action, message.into())
}

fn result(entries: Vec<Entry>) -> SyncResult {
    SyncResult { changes: ChangeSet { entries }, ..Default::default() }
}

#[test]
fn after_the_apply_the_result_decides_the_status_and_what_is_said() {
    let applied = prev(Some("v1.0.0"), "sha256:old", None);
    let with_inventory = ClusterSyncStatus { inventory: vec!["|ConfigMap|ns|a|v1".into()], ..applied.clone() };
    let drifted =
        SyncResult { drifted: vec![((&object("a")).into(), vec!["data.k".into()])], ..result(vec![entry("a", Action::Unchanged, "")]) };
    // (previous status, result) -> (ready, reason, inventory lost, what is said)
    let table = [
        (
            with_inventory.clone(),
            result(vec![entry("a", Action::Created, ""), entry("b", Action::Configured, "")]),
            true,
            Reason::Synced,
            false,
            "",
        ),
        (applied.clone(), result(vec![entry("a", Action::Unchanged, "")]), true, Reason::Synced, true, ""),
        (
            with_inventory.clone(),
            result(vec![entry("a", Action::Created, ""), entry("b", Action::Failed, "forbidden")]),
            false,
            Reason::NotSynced,
            false,
            "ConfigMap/ns/b Failed: forbidden\n",
        ),
        (with_inventory, drifted, true, Reason::Synced, false, "ConfigMap/ns/a drifted [\"data.k\"]\n"),
    ];
    for (i, (prev, result, ready, reason, lost, said)) in table.into_iter().enumerate() {
        let b = before(&sub(false), &prev, &rel("v1.1.0"), &stages(), &Default::default(), now());
        let digest = b.digest.clone();
        let a = after(&sub(false), &prepared("v1.1.0"), &prev, result, &[], b, None, now()).expect("applied");
        assert_eq!((a.done.verdict.ready, a.done.verdict.reason), (ready, reason), "row {i}: {}", a.done.verdict.message);
        // The `run --once` report, built only when asked, says the same and names the release.
        let report = a.done.status(&sub(false), &cluster(), &prev);
        assert_eq!((report.ready, report.reason, &report.message), (ready, reason, &a.done.verdict.message), "row {i}");
        // The release is applied when every object is synced; before, the one in place stays.
        let applied = if reason == Reason::NotSynced { "v1.0.0" } else { "v1.1.0" };
        assert_eq!(report.applied_release.as_ref().map(|r| r.tag.as_str()), Some(applied), "row {i}");
        assert_eq!(a.done.crd.applied_release.as_ref().map(|r| r.tag.as_str()), Some(applied), "row {i}");
        assert_eq!(report.objects.len(), a.done.changes.entries.iter().filter(|e| e.is_release_object()).count(), "row {i}");
        assert_eq!(a.done.release_tag(&prev), "v1.1.0", "row {i}");
        assert_eq!(a.inventory_lost, lost, "row {i}");
        assert_eq!(a.said, said, "row {i}");
        assert_eq!(a.done.crd.rendered_digest, digest, "row {i}: the digest is recorded");
        assert_eq!(a.done.requeue, None, "row {i}");
    }
}

#[test]
fn an_unreachable_cluster_fails_the_sync_and_is_retried() {
    let p = prev(Some("v1.0.0"), "", None);
    let b = before(&sub(false), &p, &rel("v1.1.0"), &stages(), &Default::default(), now());
    let unreachable = SyncResult { unreachable: Some("connection refused".into()), ..Default::default() };
    let fail = after(&sub(false), &prepared("v1.1.0"), &p, unreachable, &[], b, None, now()).expect_err("unreachable");
    assert_eq!((fail.reason(), fail.is_transient(), fail.to_string()), (Reason::ClusterUnreachable, true, "connection refused".to_owned()));
}

#[test]
fn held_clusters_keep_what_they_have_and_say_why() {
    let p = ClusterSyncStatus { synced: 3, total: 4, ..prev(Some("v1.0.0"), "sha256:old", None) };
    let (s, c, r) = (sub(true), cluster(), rel("docker-ferrol-1-27-v2"));
    let m = Mismatch { reason: Reason::TagRefused, message: "v2 moved".into() };
    let wait = Step::Wait { upgrade: UpgradeStatus::default(), message: "waiting for cni".into(), after: Duration::from_secs(5) };
    let failed = Step::Failed { upgrade: UpgradeStatus::default(), message: "cni timed out".into() };
    // A decision -> (reason, message, requeue, applied release kept, synced kept)
    let table = [
        (held(&p, Reason::Paused, "paused".into(), now()), Reason::Paused, "paused", None, None, 0, ""),
        (unverified_held(&r, &p, &m, now()), Reason::TagRefused, "v2 moved", None, Some("v1.0.0"), 3, "docker-ferrol-1-27-v2"),
        (
            upgrade_held(&r, &p, wait, now()),
            Reason::Progressing,
            "waiting for cni",
            Some(Duration::from_secs(5)),
            None,
            3,
            "docker-ferrol-1-27-v2",
        ),
        (upgrade_held(&r, &p, failed, now()), Reason::UpgradeFailed, "cni timed out", None, None, 3, "docker-ferrol-1-27-v2"),
        (
            failed_step(p.clone(), Reason::ClusterUnreachable, "refused".into()),
            Reason::ClusterUnreachable,
            "refused",
            None,
            Some("v1.0.0"),
            3,
            "v1.0.0",
        ),
    ];
    for (i, (done, reason, message, requeue, kept, synced, tag)) in table.into_iter().enumerate() {
        assert_eq!((done.verdict.ready, done.verdict.reason, done.verdict.message.as_str()), (false, reason, message), "row {i}");
        assert_eq!(done.requeue, requeue, "row {i}");
        assert_eq!(done.release_tag(&p), tag, "row {i}: the metrics' release");
        let status = done.status(&s, &c, &p);
        assert_eq!((status.ready, status.reason, status.message.as_str()), (false, reason, message), "row {i}");
        assert_eq!(status.applied_release.as_ref().map(|a| a.tag.as_str()), kept, "row {i}");
        assert_eq!(status.synced, synced, "row {i}");
        assert!(done.changes.entries.is_empty(), "row {i}: nothing applied");
    }
}

#[test]
fn control_plane_readiness_in_v1beta1_and_v1beta2() {
    let table = [
        (json!({"status": {"controlPlaneReady": true}}), true),
        (json!({"status": {"controlPlaneReady": false}}), false),
        (json!({"status": {"initialization": {"controlPlaneInitialized": true}}}), true),
        (json!({"status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}}), true),
        (json!({"status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "False"}]}}), false),
        (json!({"spec": {}}), false),
    ];
    for (cluster, want) in table {
        assert_eq!(control_plane_ready(&cluster), want, "{cluster}");
    }
}
