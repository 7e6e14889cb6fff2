//! The no-op resync in O(kinds): an unchanged sync decides from one LIST per kind, and every
//! change someone else made (an edit, a deletion, a relabel) still takes the full path.

use kube::api::PostParams;

use super::*;

/// A Namespace and 39 ConfigMaps in it: the shape of one Cluster of the fleet benchmark.
fn fleet_cluster() -> Vec<Object> {
    let mut objects = vec![object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}))];
    objects.extend((0..39).map(|i| {
        object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:02}"), "namespace": "team", "labels": {"app": "fleet"}}, "data": {"i": i.to_string()}}))
    }));
    objects
}

fn reads_and_writes(stats: &Stats) -> (u64, u64, u64, u64) {
    let sum = |verb: &str| stats.requests.get(verb).map_or(0, |m| m.values().sum());
    (sum("get"), sum("patch") + sum("update") + sum("create") + sum("delete"), stats.total_writes(), stats.total_changes())
}

#[tokio::test]
async fn an_unchanged_resync_makes_one_list_per_kind_and_no_get_or_patch() {
    let server = ApiServer::start().await.unwrap();
    let stages = [apply(fleet_cluster())];
    let applier = applier(&server, options());
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert!(first.changes.entries.iter().all(|e| e.action == Action::Created), "{:?}", actions(&first));
    assert!(first.inventory.entries.iter().all(|e| e.fields.len() == 12), "{:?}", first.inventory.to_lines());
    // Cold: one apply PATCH per object, no read or dry-run first.
    let stats = server.stats();
    assert_eq!(reads_and_writes(&stats).0, 0, "no GET: {stats:?}");
    assert_eq!(Stats::count(&stats.requests, "patch", "configmaps"), 39, "{stats:?}");
    assert_eq!(Stats::count(&stats.requests, "patch", "namespaces"), 1, "{stats:?}");
    assert_eq!(stats.requests.get("discovery"), None, "Namespace and ConfigMap are built in: no discovery: {stats:?}");

    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert!(second.changes.entries.iter().all(|e| e.action == Action::Unchanged), "{:?}", actions(&second));
    assert_eq!(second.inventory, first.inventory);
    assert!(second.unhealthy.is_empty(), "{:?}", second.unhealthy);
    let stats = server.stats();
    assert_eq!(reads_and_writes(&stats), (0, 0, 0, 0), "{stats:?}");
    assert_eq!(Stats::count(&stats.requests, "list", "namespaces"), 1, "{stats:?}");
    assert_eq!(Stats::count(&stats.requests, "list", "configmaps"), 1, "{stats:?}");
    assert_eq!(stats.requests.values().flat_map(|r| r.values()).sum::<u64>(), 2, "nothing else, discovery included: {stats:?}");

    // An inventory written before the hash existed (six fields) takes the full path once, and
    // records the hash for the next sync.
    let old =
        Inventory::from_lines(&first.inventory.to_lines().iter().map(|l| l.rsplit_once('|').unwrap().0.to_string()).collect::<Vec<_>>());
    server.reset_stats();
    let upgraded = sync(&applier, &stages, &old).await;
    assert!(upgraded.changes.entries.iter().all(|e| e.action == Action::Unchanged));
    assert_eq!(Stats::count(&server.stats().requests, "patch", "configmaps"), 39, "a dry-run each");
    assert_eq!(upgraded.inventory, first.inventory);
    server.stop().await;
}

#[tokio::test]
async fn an_object_new_to_the_inventory_is_applied_at_once_and_an_existing_one_is_not_taken_for_created() {
    let server = ApiServer::start().await.unwrap();
    let team = configmaps(&server, "default");
    // Someone else's object with a field we also set (another value), and one we set alike.
    let theirs = |name: &str, value: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"k": value}});
    let pp = PatchParams::apply("other-controller");
    team.patch("conflicting", &pp, &Patch::Apply(theirs("conflicting", "theirs"))).await.unwrap();
    team.patch("alike", &pp, &Patch::Apply(theirs("alike", "same"))).await.unwrap();
    let ours = |name: &str, value: &str| object(theirs(name, value));
    let stages = [apply(vec![ours("conflicting", "ours"), ours("alike", "same"), ours("fresh", "new")])];
    let applier = applier(&server, options());
    server.reset_stats();
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(action_of(&first, "ConfigMap/default/fresh"), (Action::Created, String::new()));
    assert_eq!(action_of(&first, "ConfigMap/default/alike"), (Action::Configured, String::new()));
    let (action, message) = action_of(&first, "ConfigMap/default/conflicting");
    assert_eq!(action, Action::Failed);
    assert!(message.contains("other-controller"), "{message}");
    let stats = server.stats();
    assert_eq!((reads_and_writes(&stats).0, Stats::count(&stats.requests, "patch", "configmaps")), (0, 3), "{stats:?}");
    assert_eq!(team.get("conflicting").await.unwrap().data.unwrap()["k"], "theirs", "nothing of theirs overwritten");
    server.stop().await;
}

#[tokio::test]
async fn an_edit_a_deletion_and_a_relabel_are_found_by_the_next_resync() {
    let server = ApiServer::start().await.unwrap();
    let stages = [apply(fleet_cluster())];
    let applier = applier(&server, options());
    let first = sync(&applier, &stages, &Inventory::default()).await;
    let team = configmaps(&server, "team");

    // `kubectl edit`: a whole-object PUT by manager kubectl-edit changing a field of ours.
    let mut edited = team.get("cm-01").await.unwrap();
    edited.data.get_or_insert_default().insert("i".into(), "edited".into());
    team.replace("cm-01", &PostParams { field_manager: Some("kubectl-edit".into()), ..PostParams::default() }, &edited).await.unwrap();
    // Deleted by hand.
    team.delete("cm-02", &Default::default()).await.unwrap();
    // A label we set changed (`kubectl label --overwrite`), and our owner label changed.
    let label = |manager: &str| PatchParams { field_manager: Some(manager.into()), ..PatchParams::default() };
    team.patch("cm-03", &label("kubectl-label"), &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}}))).await.unwrap();
    team.patch("cm-04", &label("kubectl-label"), &Patch::Merge(json!({"metadata": {"labels": {OWNER_LABEL: "someone"}}}))).await.unwrap();

    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(
        action_of(&second, "ConfigMap/team/cm-01"),
        (Action::Configured, "corrected drift: .data.i, taken back from \"kubectl-edit\"".into())
    );
    assert_eq!(action_of(&second, "ConfigMap/team/cm-02"), (Action::Created, String::new()));
    assert_eq!(
        action_of(&second, "ConfigMap/team/cm-03"),
        (Action::Configured, "corrected drift: .metadata.labels.app, taken back from \"kubectl-label\"".into())
    );
    let (action, message) = action_of(&second, "ConfigMap/team/cm-04");
    assert_eq!(action, Action::Configured, "{message}");
    assert!(message.starts_with("corrected drift: .metadata.labels.stacksync.io/owner"), "{message}");
    let others = second.changes.entries.iter().filter(|e| !["cm-01", "cm-02", "cm-03", "cm-04"].contains(&e.object.name.as_str()));
    assert!(others.clone().all(|e| e.action == Action::Unchanged), "{:?}", actions(&second));
    assert_eq!(others.count(), 36);
    let stats = server.stats();
    assert_eq!(Stats::count(&stats.requests, "list", "configmaps"), 1, "{stats:?}");
    assert_eq!(Stats::count(&stats.requests, "get", "configmaps"), 4, "only the four touched objects are read: {stats:?}");
    for (name, want) in [("cm-01", "1"), ("cm-02", "2")] {
        assert_eq!(team.get(name).await.unwrap().data.unwrap()["i"], want);
    }
    for name in ["cm-03", "cm-04"] {
        let labels = team.get(name).await.unwrap().metadata.labels.unwrap();
        assert_eq!((labels["app"].as_str(), labels[OWNER_LABEL].as_str()), ("fleet", OWNER));
    }

    // Corrected: the resync after that is a no-op again, decided by the listing.
    server.reset_stats();
    let third = sync(&applier, &stages, &second.inventory).await;
    assert!(third.changes.entries.iter().all(|e| e.action == Action::Unchanged), "{:?}", actions(&third));
    assert_eq!(reads_and_writes(&server.stats()), (0, 0, 0, 0));
    server.stop().await;
}

#[tokio::test]
async fn warn_mode_reports_drift_on_every_resync_and_a_failed_list_takes_the_full_path() {
    let server = ApiServer::start().await.unwrap();
    let stages = [apply(vec![cm("c", json!({"a": "1"})), cm("d", json!({"a": "1"}))])];
    let first = sync(&applier(&server, options()), &stages, &Inventory::default()).await;
    let warn = applier(&server, ApplyOptions { drift: DriftMode::Warn, ..options() });
    edit(&server, "c", json!({"data": {"a": "edited"}})).await;
    let mut previous = first.inventory;
    for _ in 0..2 {
        let warned = sync(&warn, &stages, &previous).await;
        assert_eq!(action_of(&warned, "ConfigMap/default/c"), (Action::Skipped(SkipReason::Drifted), "drifted: .data.a".into()));
        assert_eq!(action_of(&warned, "ConfigMap/default/d"), (Action::Unchanged, String::new()));
        previous = warned.inventory;
    }

    server.faults().add(FaultRule::new().verb("list").status(500));
    server.reset_stats();
    let listed = sync(&applier(&server, options()), &stages, &previous).await;
    assert_eq!(action_of(&listed, "ConfigMap/default/c").0, Action::Configured);
    assert_eq!(action_of(&listed, "ConfigMap/default/d"), (Action::Unchanged, String::new()));
    assert_eq!(Stats::count(&server.stats().requests, "get", "configmaps"), 2, "each object read instead");
    server.stop().await;
}
