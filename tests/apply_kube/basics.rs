//! The applier's everyday behaviour: create, no-op, prune, conflicts, drift, policies, stages.

use super::*;

#[tokio::test]
async fn first_sync_creates_everything_in_order_and_a_second_makes_no_writes() {
    let server = ApiServer::start().await.unwrap();
    let role = object(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}));
    let deploy = object(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}}));
    let in_team =
        object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team"}, "data": {"a": "1"}}));
    let ns = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let stages = [apply(vec![deploy, role, cm("plain", json!({"x": "1"})), in_team, ns])];
    let applier = applier(&server, options());

    let first = sync(&applier, &stages, &Inventory::default()).await;
    let order: Vec<(String, Action)> = actions(&first).into_iter().map(|(o, a, _)| (o, a)).collect();
    assert_eq!(
        order,
        [
            ("Namespace/team".to_string(), Action::Created),
            ("ConfigMap/default/plain".to_string(), Action::Created),
            ("ConfigMap/team/settings".to_string(), Action::Created),
            ("ClusterRole/reader".to_string(), Action::Created),
            ("Deployment/team/web".to_string(), Action::Created),
        ]
    );
    assert!(first.changes.entries.iter().all(|e| e.action.is_synced() && e.message.is_empty()));
    assert_eq!(first.inventory.len(), 5);
    assert_eq!((first.prune_paused.clone(), first.drifted.len()), (None, 0));

    let live = configmaps(&server, "team").get("settings").await.unwrap();
    assert_eq!(live.metadata.labels.unwrap()[OWNER_LABEL], OWNER);
    let managers: Vec<String> = live.metadata.managed_fields.unwrap().into_iter().filter_map(|m| m.manager).collect();
    assert_eq!(managers, [FIELD_MANAGER]);
    let rv = live.metadata.resource_version;

    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert!(second.changes.entries.iter().all(|e| e.action == Action::Unchanged), "{:?}", actions(&second));
    let stats = server.stats();
    assert_eq!((stats.total_writes(), stats.total_changes()), (0, 0), "{stats:?}");
    assert_eq!(Stats::count(&stats.requests, "patch", "configmaps"), 0, "decided by one list per kind");
    assert_eq!(configmaps(&server, "team").get("settings").await.unwrap().metadata.resource_version, rv);
    assert_eq!(second.inventory, first.inventory);
    server.stop().await;
}

#[tokio::test]
async fn dropped_objects_are_pruned_in_reverse_order_and_foreign_ones_are_not() {
    let server = ApiServer::start().await.unwrap();
    let applier = applier(&server, options());
    let ns = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}));
    let in_ns = object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inner", "namespace": "gone"}}));
    let all = [apply(vec![cm("keep", json!({})), cm("taken", json!({})), ns, in_ns])];
    let first = sync(&applier, &all, &Inventory::default()).await;
    assert_eq!(first.changes.count(Action::Created), 4);
    // Someone else claims one object: it is no longer ours to delete.
    server
        .load_yaml(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: taken\n  namespace: default\n  labels:\n    {OWNER_LABEL}: other\n"
        ))
        .unwrap();

    let second = sync(&applier, &[apply(vec![cm("keep", json!({}))])], &first.inventory).await;
    assert_eq!(
        actions(&second),
        [
            ("ConfigMap/default/keep".to_string(), Action::Unchanged, String::new()),
            ("ConfigMap/gone/inner".to_string(), Action::Pruned, String::new()),
            ("ConfigMap/default/taken".to_string(), Action::Skipped(SkipReason::NotOurs), format!("not ours: {OWNER_LABEL} is \"other\"")),
            ("Namespace/gone".to_string(), Action::Pruned, String::new()),
        ],
        "reverse apply order: the namespace's contents before the namespace"
    );
    assert!(data(&server, "taken").await.is_some());
    assert_eq!(second.inventory.entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["keep"]);
    server.stop().await;
}

#[tokio::test]
async fn one_broken_object_fails_alone_with_the_servers_message() {
    let server = ApiServer::start().await.unwrap();
    server.faults().add(FaultRule::new().verb("patch").path("/configmaps/b").status(500).times(1));
    let widget = object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}));
    let stages = [apply(vec![cm("a", json!({})), cm("b", json!({})), widget, cm("c", json!({}))])];
    let applier = applier(&server, options());

    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(action_of(&first, "ConfigMap/default/a"), (Action::Created, String::new()));
    assert_eq!(action_of(&first, "ConfigMap/default/b"), (Action::Failed, "testkit: injected fault (500 InternalError)".into()));
    assert_eq!(action_of(&first, "ConfigMap/default/c"), (Action::Created, String::new()));
    assert_eq!(action_of(&first, "Widget/w"), (Action::Failed, "no matches for kind \"Widget\" in version \"example.com/v1\"".into()));
    assert_eq!(first.inventory.len(), 4, "failed objects stay in the inventory, so they are never pruned");

    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(action_of(&second, "ConfigMap/default/b"), (Action::Created, String::new()));
    assert_eq!(second.changes.count(Action::Pruned), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_failed_discovery_fails_only_the_objects_of_that_api_version() {
    let server = ApiServer::start().await.unwrap();
    // ControllerRevision: a kind discovered (not one of the built-in kinds known without asking,
    // as Deployment of the same apps/v1 is).
    server.faults().add(FaultRule::new().verb("get").path("/apis/apps/v1").status(500).times(1));
    let revision = object(
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "r", "namespace": "default"}, "revision": 1}),
    );
    let stages = [apply(vec![cm("a", json!({})), revision])];
    let applier = applier(&server, options());
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(action_of(&first, "ConfigMap/default/a").0, Action::Created);
    assert_eq!(
        action_of(&first, "ControllerRevision/default/r"),
        (Action::Failed, "discovering apps/v1: testkit: injected fault (500 InternalError)".into())
    );
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(action_of(&second, "ControllerRevision/default/r"), (Action::Created, String::new()), "discovery is asked again next sync");
    server.stop().await;
}

#[tokio::test]
async fn a_conflicting_manager_fails_the_object_until_force_by_annotation_or_option() {
    let server = ApiServer::start().await.unwrap();
    let api = configmaps(&server, "default");
    for name in ["c", "d"] {
        let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "theirs", "b": "theirs"}});
        api.patch(name, &PatchParams::apply("alpha"), &Patch::Apply(theirs)).await.unwrap();
    }
    let ours = |name: &str| cm(name, json!({"a": "ours", "b": "theirs"}));

    let result = sync(&applier(&server, options()), &[apply(vec![ours("c")])], &Inventory::default()).await;
    let (action, message) = action_of(&result, "ConfigMap/default/c");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with("conflict with \"alpha\": .data.a (another field manager owns"), "{message}");
    assert!(message.contains(FORCE_ANNOTATION), "{message}");
    assert_eq!(data(&server, "c").await.unwrap()["a"], "theirs");

    let forced = annotated(ours("c"), FORCE_ANNOTATION, "true");
    let result = sync(&applier(&server, options()), &[apply(vec![forced, ours("d")])], &Inventory::default()).await;
    assert_eq!(action_of(&result, "ConfigMap/default/c"), (Action::Configured, String::new()));
    assert_eq!(action_of(&result, "ConfigMap/default/d").0, Action::Failed, "the annotation forces only its object");
    assert_eq!(data(&server, "c").await.unwrap()["a"], "ours");

    let result = sync(&applier(&server, ApplyOptions { force: true, ..options() }), &[apply(vec![ours("d")])], &Inventory::default()).await;
    assert_eq!(action_of(&result, "ConfigMap/default/d"), (Action::Configured, String::new()));
    assert_eq!(data(&server, "d").await.unwrap()["a"], "ours");
    server.stop().await;
}

#[tokio::test]
async fn the_prune_limit_and_an_empty_render_pause_pruning() {
    let server = ApiServer::start().await.unwrap();
    let three = [apply(vec![cm("a", json!({})), cm("b", json!({})), cm("c", json!({}))])];
    let first = sync(&applier(&server, options()), &three, &Inventory::default()).await;

    let empty = sync(&applier(&server, options()), &[apply(vec![])], &first.inventory).await;
    assert!(empty.prune_paused.as_deref().unwrap().contains("render is empty"), "{:?}", empty.prune_paused);
    assert!(empty.changes.entries.is_empty());
    assert_eq!(empty.inventory, first.inventory, "paused candidates stay in the inventory");

    let limited = ApplyOptions { prune_limit: 1, ..options() };
    let one = [apply(vec![cm("a", json!({}))])];
    server.reset_stats();
    let paused = sync(&applier(&server, limited), &one, &empty.inventory).await;
    assert_eq!(paused.prune_paused.as_deref(), Some("pruning paused: 2 objects to delete exceed the prune limit of 1"));
    assert_eq!(server.stats().total_writes(), 0);
    assert_eq!(paused.inventory.len(), 3);

    let pruned = sync(&applier(&server, options()), &one, &paused.inventory).await;
    assert_eq!((pruned.prune_paused.clone(), pruned.changes.count(Action::Pruned)), (None, 2));
    let allowed = ApplyOptions { allow_empty_prune: true, ..options() };
    let emptied = sync(&applier(&server, allowed), &[], &pruned.inventory).await;
    assert_eq!(actions(&emptied), [("ConfigMap/default/a".to_string(), Action::Pruned, String::new())]);
    assert!(emptied.inventory.is_empty() && data(&server, "a").await.is_none());
    server.stop().await;
}

#[tokio::test]
async fn drift_is_corrected_in_correct_mode_and_only_reported_in_warn_mode() {
    let server = ApiServer::start().await.unwrap();
    let stages = [apply(vec![cm("c", json!({"a": "1", "b": "2"}))])];
    let correct = applier(&server, options());
    let warn = applier(&server, ApplyOptions { drift: DriftMode::Warn, ..options() });
    let first = sync(&correct, &stages, &Inventory::default()).await;

    edit(&server, "c", json!({"data": {"b": null}})).await;
    server.reset_stats();
    let warned = sync(&warn, &stages, &first.inventory).await;
    assert_eq!(action_of(&warned, "ConfigMap/default/c"), (Action::Skipped(SkipReason::Drifted), "drifted: .data.b".into()));
    assert_eq!(
        warned.drifted.iter().map(|(o, p)| (o.to_string(), p.clone())).collect::<Vec<_>>(),
        [("ConfigMap/default/c".to_string(), vec![".data.b".to_string()])]
    );
    assert_eq!(server.stats().total_writes(), 0);
    assert_eq!(data(&server, "c").await.unwrap(), json!({"a": "1"}));

    let corrected = sync(&correct, &stages, &warned.inventory).await;
    assert_eq!(action_of(&corrected, "ConfigMap/default/c"), (Action::Configured, "corrected drift: .data.b".into()));
    assert_eq!(corrected.drifted.len(), 1);
    assert_eq!(data(&server, "c").await.unwrap(), json!({"a": "1", "b": "2"}));

    // A value changed by hand (`kubectl edit`) is taken back, as Flux does.
    edit(&server, "c", json!({"data": {"a": "edited"}})).await;
    let warned = sync(&warn, &stages, &corrected.inventory).await;
    assert_eq!(action_of(&warned, "ConfigMap/default/c"), (Action::Skipped(SkipReason::Drifted), "drifted: .data.a".into()));
    let taken = sync(&correct, &stages, &corrected.inventory).await;
    assert_eq!(
        action_of(&taken, "ConfigMap/default/c"),
        (Action::Configured, "corrected drift: .data.a, taken back from \"kubectl-edit\"".into())
    );
    assert_eq!(data(&server, "c").await.unwrap(), json!({"a": "1", "b": "2"}));

    // When that manager is not one to take back from, its value is its own: a conflict to force.
    let correct = applier(&server, ApplyOptions { adoption: AdoptionPolicy { take_back_from: Vec::new() }, ..options() });
    edit(&server, "c", json!({"data": {"a": "edited"}})).await;
    let refused = sync(&correct, &stages, &taken.inventory).await;
    let (action, message) = action_of(&refused, "ConfigMap/default/c");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with("conflict with \"kubectl-edit\" using v1: .data.a"), "{message}");
    let forced = sync(
        &applier(&server, ApplyOptions { force: true, adoption: AdoptionPolicy { take_back_from: Vec::new() }, ..options() }),
        &stages,
        &refused.inventory,
    )
    .await;
    assert_eq!(action_of(&forced, "ConfigMap/default/c"), (Action::Configured, "corrected drift: .data.a".into()));

    // In warn mode a changed manifest is a release change, not drift: it is applied.
    let changed = [apply(vec![cm("c", json!({"a": "3", "b": "2"}))])];
    let upgraded = sync(&warn, &changed, &forced.inventory).await;
    assert_eq!(action_of(&upgraded, "ConfigMap/default/c"), (Action::Configured, String::new()));
    assert_eq!(data(&server, "c").await.unwrap()["a"], "3");
    server.stop().await;
}

#[tokio::test]
async fn a_release_change_that_failed_is_retried_and_not_taken_for_drift_in_warn_mode() {
    let server = ApiServer::start().await.unwrap();
    let warn = applier(&server, ApplyOptions { drift: DriftMode::Warn, ..options() });
    let first = sync(&warn, &[apply(vec![cm("c", json!({"a": "1"}))])], &Inventory::default()).await;
    server.faults().add(FaultRule::new().verb("patch").path("/configmaps/c").status(500).times(1));
    let upgrade = [apply(vec![cm("c", json!({"a": "2"}))])];
    let failed = sync(&warn, &upgrade, &first.inventory).await;
    assert_eq!(action_of(&failed, "ConfigMap/default/c").0, Action::Failed);
    assert_eq!(failed.inventory, first.inventory, "the inventory still holds what was applied");
    let retried = sync(&warn, &upgrade, &failed.inventory).await;
    assert_eq!(action_of(&retried, "ConfigMap/default/c"), (Action::Configured, String::new()));
    assert_eq!(data(&server, "c").await.unwrap()["a"], "2");
    server.stop().await;
}

#[tokio::test]
async fn a_crd_and_its_custom_resource_in_one_stage() {
    let server = ApiServer::start().await.unwrap();
    let crd = widgets_crd();
    let widget = object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}}));
    let stages = [apply(vec![widget, crd])];
    let applier = applier(&server, options());

    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(
        actions(&first),
        [
            ("CustomResourceDefinition/widgets.example.com".to_string(), Action::Created, String::new()),
            ("Widget/default/w".to_string(), Action::Created, String::new()),
        ]
    );
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets");
    let live = Api::<DynamicObject>::namespaced_with(server.client().unwrap(), "default", &ar).get("w").await.unwrap();
    assert_eq!(live.data["spec"]["size"], 3);

    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(second.changes.count(Action::Unchanged), 2);
    assert_eq!(server.stats().total_writes(), 0);
    server.stop().await;
}

#[tokio::test]
async fn apply_once_creates_then_leaves_alone_and_ignore_never_touches() {
    let server = ApiServer::start().await.unwrap();
    let once = annotated(cm("once", json!({"a": "1"})), POLICY_ANNOTATION, "apply-once");
    let ignored = annotated(cm("ignored", json!({"a": "1"})), POLICY_ANNOTATION, "ignore");
    let bad = annotated(cm("bad", json!({})), POLICY_ANNOTATION, "sometimes");
    let stages = [apply(vec![once, ignored, bad])];
    let applier = applier(&server, options());

    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(action_of(&first, "ConfigMap/default/once"), (Action::Created, String::new()));
    assert_eq!(action_of(&first, "ConfigMap/default/ignored"), (Action::Skipped(SkipReason::Ignored), "policy: ignore".into()));
    let (action, message) = action_of(&first, "ConfigMap/default/bad");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with("unknown stacksync.io/policy \"sometimes\""), "{message}");
    assert!(data(&server, "ignored").await.is_none());

    edit(&server, "once", json!({"data": {"a": "mine now"}})).await;
    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(action_of(&second, "ConfigMap/default/once"), (Action::Skipped(SkipReason::ApplyOnceExists), "apply-once: exists".into()));
    assert_eq!(server.stats().total_writes(), 0);
    assert_eq!(data(&server, "once").await.unwrap()["a"], "mine now");
    server.stop().await;
}

#[tokio::test]
async fn a_delete_stage_deletes_only_our_objects() {
    let server = ApiServer::start().await.unwrap();
    let applier = applier(&server, options());
    let first = sync(&applier, &[apply(vec![cm("x", json!({})), cm("y", json!({}))])], &Inventory::default()).await;
    server.load_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: foreign\n  namespace: default\n").unwrap();

    let delete = Stage {
        name: "cleanup".into(),
        action: StageAction::Delete,
        objects: vec![cm("x", json!({})), cm("foreign", json!({})), cm("never", json!({}))],
    };
    let second = sync(&applier, &[apply(vec![cm("y", json!({}))]), delete], &first.inventory).await;
    assert_eq!(
        actions(&second),
        [
            ("ConfigMap/default/y".to_string(), Action::Unchanged, String::new()),
            ("ConfigMap/default/x".to_string(), Action::Pruned, "deleted by a delete stage".into()),
            ("ConfigMap/default/never".to_string(), Action::Unchanged, "absent".into()),
            ("ConfigMap/default/foreign".to_string(), Action::Skipped(SkipReason::NotOurs), format!("not ours: no {OWNER_LABEL} label")),
        ],
        "delete stages run in reverse order; x is not pruned a second time"
    );
    assert!(data(&server, "x").await.is_none() && data(&server, "foreign").await.is_some());
    assert_eq!(second.changes.entries.iter().find(|e| e.object.name == "x").unwrap().stage.as_deref(), Some("cleanup"));
    assert_eq!(second.inventory.entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["y"]);
    server.stop().await;
}

#[tokio::test]
async fn namespaced_objects_get_the_default_namespace_and_cluster_scoped_ones_none() {
    let server = ApiServer::start().await.unwrap();
    let applier = applier(&server, ApplyOptions { default_namespace: "team".into(), ..options() });
    let ns = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let role = object(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "r", "namespace": "stray"}, "rules": []}));
    let result = sync(&applier, &[apply(vec![cm("settings", json!({})), role, ns])], &Inventory::default()).await;
    let names: Vec<String> = result.changes.entries.iter().map(|e| e.object.to_string()).collect();
    assert_eq!(names, ["Namespace/team", "ConfigMap/team/settings", "ClusterRole/r"]);
    assert!(result.changes.entries.iter().all(|e| e.action == Action::Created), "{:?}", actions(&result));
    assert!(configmaps(&server, "team").get_opt("settings").await.unwrap().is_some());
    let entries: Vec<String> = result.inventory.entries.iter().map(|e| e.to_string().rsplitn(3, '|').last().unwrap().to_string()).collect();
    assert_eq!(entries, ["|Namespace||team|v1", "|ConfigMap|team|settings|v1", "rbac.authorization.k8s.io|ClusterRole||r|v1"]);
    server.stop().await;
}
