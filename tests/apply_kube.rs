//! The server-side applier against testkit's loopback API server: ordering, write-only-on-drift,
//! per-object failures, conflicts and force, pruning and its limits, drift modes, policies,
//! delete stages and namespace defaulting.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use stacksync::apply::ssa::{
    Applier, ApplyOptions, DriftMode, FIELD_MANAGER, FORCE_ANNOTATION, Inventory, OWNER_LABEL, POLICY_ANNOTATION, RECREATE_ANNOTATION,
    Stage, StageAction, SyncResult,
};
use stacksync::apply::{Action, Entry};
use stacksync::render::Object;
use testkit::apiserver::{ApiServer, FaultRule, Stats};

const TIMEOUT: Duration = Duration::from_secs(60);
const OWNER: &str = "stack.team-a.alpha";

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, f).await.expect("bounded by TIMEOUT")
}

fn object(body: Value) -> Object {
    let meta = &body["metadata"];
    Object {
        api_version: body["apiVersion"].as_str().unwrap().into(),
        kind: body["kind"].as_str().unwrap().into(),
        namespace: meta["namespace"].as_str().map(Into::into),
        name: meta["name"].as_str().unwrap().into(),
        file: "manifests/test.yaml".into(),
        line: 1,
        body,
        chart: None,
        stage: None,
    }
}

fn cm(name: &str, data: Value) -> Object {
    object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}))
}

fn annotated(mut o: Object, key: &str, value: &str) -> Object {
    o.body["metadata"]["annotations"] = json!({ key: value });
    o
}

fn apply(objects: Vec<Object>) -> Stage {
    Stage { name: "main".into(), action: StageAction::Apply, objects }
}

fn options() -> ApplyOptions {
    ApplyOptions { owner: OWNER.into(), ..ApplyOptions::default() }
}

/// An applier whose client does not retry, so injected errors reach it as they are.
fn applier(server: &ApiServer, options: ApplyOptions) -> Applier {
    let mut config = server.kube_config();
    config.default_retry = false;
    Applier::new(kube::Client::try_from(config).unwrap(), options)
}

async fn sync(applier: &Applier, stages: &[Stage], previous: &Inventory) -> SyncResult {
    bounded(applier.sync(stages, previous)).await
}

/// `(kind/namespace/name, action, message)` per entry, for compact assertions.
fn actions(result: &SyncResult) -> Vec<(String, Action, String)> {
    result.changes.entries.iter().map(|e: &Entry| (e.object.to_string(), e.action, e.message.clone())).collect()
}

fn action_of(result: &SyncResult, object: &str) -> (Action, String) {
    let e = result.changes.entries.iter().find(|e| e.object.to_string() == object).unwrap_or_else(|| panic!("no entry for {object}"));
    (e.action, e.message.clone())
}

fn configmaps(server: &ApiServer, ns: &str) -> Api<ConfigMap> {
    Api::namespaced(server.client().unwrap(), ns)
}

async fn data(server: &ApiServer, name: &str) -> Option<Value> {
    let live = configmaps(server, "default").get_opt(name).await.unwrap()?;
    Some(serde_json::to_value(live.data.unwrap_or_default()).unwrap())
}

/// A change by another client through an ordinary (non-apply) write, as `kubectl edit` makes.
async fn edit(server: &ApiServer, name: &str, merge: Value) {
    let pp = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    configmaps(server, "default").patch(name, &pp, &Patch::Merge(merge)).await.unwrap();
}

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
    assert_eq!(Stats::count(&stats.requests, "patch", "configmaps"), 2, "one dry-run per configmap");
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
            ("ConfigMap/default/taken".to_string(), Action::Skipped, format!("not ours: {OWNER_LABEL} is \"other\"")),
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
    server.faults().add(FaultRule::new().verb("get").path("/apis/rbac.authorization.k8s.io/v1").status(500).times(1));
    let role = object(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}, "rules": []}));
    let stages = [apply(vec![cm("a", json!({})), role])];
    let applier = applier(&server, options());
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(action_of(&first, "ConfigMap/default/a").0, Action::Created);
    assert_eq!(
        action_of(&first, "ClusterRole/r"),
        (Action::Failed, "discovering rbac.authorization.k8s.io/v1: testkit: injected fault (500 InternalError)".into())
    );
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(action_of(&second, "ClusterRole/r"), (Action::Created, String::new()), "discovery is asked again next sync");
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
    assert_eq!(action_of(&warned, "ConfigMap/default/c"), (Action::Skipped, "drifted: .data.b".into()));
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

    // A value another client changed is theirs now: correcting it is a conflict to force.
    edit(&server, "c", json!({"data": {"a": "edited"}})).await;
    let warned = sync(&warn, &stages, &corrected.inventory).await;
    assert_eq!(action_of(&warned, "ConfigMap/default/c"), (Action::Skipped, "drifted: .data.a".into()));
    let refused = sync(&correct, &stages, &corrected.inventory).await;
    let (action, message) = action_of(&refused, "ConfigMap/default/c");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with("conflict with \"kubectl-edit\" using v1: .data.a"), "{message}");
    let forced = sync(&applier(&server, ApplyOptions { force: true, ..options() }), &stages, &refused.inventory).await;
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
    assert_eq!(action_of(&first, "ConfigMap/default/ignored"), (Action::Skipped, "policy: ignore".into()));
    let (action, message) = action_of(&first, "ConfigMap/default/bad");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with("unknown stacksync.io/policy \"sometimes\""), "{message}");
    assert!(data(&server, "ignored").await.is_none());

    edit(&server, "once", json!({"data": {"a": "mine now"}})).await;
    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(action_of(&second, "ConfigMap/default/once"), (Action::Skipped, "apply-once: exists".into()));
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
            ("ConfigMap/default/foreign".to_string(), Action::Skipped, format!("not ours: no {OWNER_LABEL} label")),
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
    let entries: Vec<String> = result.inventory.entries.iter().map(|e| e.to_string().rsplit_once('|').unwrap().0.to_string()).collect();
    assert_eq!(entries, ["|Namespace||team|v1", "|ConfigMap|team|settings|v1", "rbac.authorization.k8s.io|ClusterRole||r|v1"]);
    server.stop().await;
}

/// A client in front of testkit for what its server does not model or count. testkit does not
/// validate, so it never refuses an immutable field: while `immutable` is armed, PATCHes of that
/// path get the 422 a real server gives for an immutable ConfigMap, until the object is deleted.
/// `hide_status` strips `status` from answers for that path (a CRD that never reports
/// Established). `lagging_discovery` answers 404 to the next GETs of a discovery path, as a real
/// server does while its discovery has not caught up with a CRD that is already Established.
/// It also records the most requests it ever had in flight.
#[derive(Clone, Default)]
struct Proxy {
    inner: Option<kube::Client>,
    immutable: Option<(&'static str, Arc<AtomicBool>)>,
    hide_status: Option<&'static str>,
    lagging_discovery: Option<(&'static str, Arc<AtomicUsize>)>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

const IMMUTABLE_MESSAGE: &str = "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set";

impl Proxy {
    fn new(server: &ApiServer) -> Proxy {
        let mut config = server.kube_config();
        config.default_retry = false;
        Proxy { inner: Some(kube::Client::try_from(config).unwrap()), ..Proxy::default() }
    }

    fn applier(&self, options: ApplyOptions) -> Applier {
        Applier::new(kube::Client::new(self.clone(), "default"), options)
    }
}

impl tower_service::Service<http::Request<kube::client::Body>> for Proxy {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let path = req.uri().path().to_string();
        if let Some((frozen, armed)) = &self.immutable
            && path == *frozen
        {
            if req.method() == http::Method::PATCH && armed.load(Ordering::SeqCst) {
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": IMMUTABLE_MESSAGE,
                    "reason": "Invalid", "code": 422, "details": {"name": "frozen", "kind": "ConfigMap",
                    "causes": [{"reason": "FieldValueForbidden", "message": "Forbidden: field is immutable when `immutable` is set", "field": "data"}]}});
                let response = http::Response::builder()
                    .status(422)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap();
                return Box::pin(async move { Ok(response) });
            }
            if req.method() == http::Method::DELETE {
                armed.store(false, Ordering::SeqCst);
            }
        }
        if let Some((lagging, times)) = &self.lagging_discovery
            && path == *lagging
            && times.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404});
            let response = http::Response::builder()
                .status(404)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(serde_json::to_vec(&status).unwrap()))
                .unwrap();
            return Box::pin(async move { Ok(response) });
        }
        let hide = self.hide_status.is_some_and(|p| p == path);
        let (inner, in_flight, max) = (self.inner.clone().unwrap(), self.in_flight.clone(), self.max_in_flight.clone());
        Box::pin(async move {
            max.fetch_max(in_flight.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            let response = inner.send(req).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let response = response?;
            if !hide {
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let mut object: Value = serde_json::from_slice(&body.collect_bytes().await?).unwrap();
            object.as_object_mut().unwrap().remove("status");
            Ok(http::Response::from_parts(parts, kube::client::Body::from(serde_json::to_vec(&object).unwrap())))
        })
    }
}

fn widgets_crd() -> Object {
    object(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
}

#[tokio::test]
async fn a_crd_that_never_becomes_established_fails_after_crd_wait() {
    let server = ApiServer::start().await.unwrap();
    let proxy =
        Proxy { hide_status: Some("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"), ..Proxy::new(&server) };
    let applier = proxy.applier(ApplyOptions { crd_wait: Duration::from_millis(300), ..options() });
    let started = tokio::time::Instant::now();
    let result = sync(&applier, &[apply(vec![widgets_crd(), cm("after", json!({}))])], &Inventory::default()).await;
    assert_eq!(
        action_of(&result, "CustomResourceDefinition/widgets.example.com"),
        (Action::Failed, "CustomResourceDefinition/widgets.example.com is not Established after 300ms".into())
    );
    assert_eq!(action_of(&result, "ConfigMap/default/after").0, Action::Created, "the rest goes on");
    assert!(started.elapsed() >= Duration::from_millis(300));
    server.stop().await;
}

#[tokio::test]
async fn objects_of_one_rank_are_applied_concurrently_up_to_the_limit() {
    let server = ApiServer::start().await.unwrap();
    server.faults().add(FaultRule::new().verb("patch").latency(Duration::from_millis(50)));
    let proxy = Proxy::new(&server);
    let applier = proxy.applier(ApplyOptions { concurrency: 3, ..options() });
    let objects: Vec<Object> = (0..9).map(|i| cm(&format!("c{i}"), json!({}))).collect();
    let result = sync(&applier, &[apply(objects)], &Inventory::default()).await;
    assert_eq!(result.changes.count(Action::Created), 9);
    let max = proxy.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=3).contains(&max), "at most 3 requests at once, and more than one: {max}");
    server.stop().await;
}

#[tokio::test]
async fn an_immutable_field_fails_the_object_unless_it_opts_in_to_recreation() {
    let server = ApiServer::start().await.unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = Proxy { immutable: Some(("/api/v1/namespaces/default/configmaps/frozen", armed.clone())), ..Proxy::new(&server) };
    let applier = proxy.applier(options());
    let frozen = |value: &str| {
        object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "frozen"}, "immutable": true, "data": {"a": value}}))
    };
    let first = sync(&applier, &[apply(vec![frozen("1")])], &Inventory::default()).await;
    assert_eq!(action_of(&first, "ConfigMap/default/frozen"), (Action::Created, String::new()));
    let uid = configmaps(&server, "default").get("frozen").await.unwrap().metadata.uid;
    armed.store(true, Ordering::SeqCst);

    let refused = sync(&applier, &[apply(vec![frozen("2")])], &first.inventory).await;
    let (action, message) = action_of(&refused, "ConfigMap/default/frozen");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with(IMMUTABLE_MESSAGE) && message.contains(RECREATE_ANNOTATION), "{message}");
    assert_eq!(data(&server, "frozen").await.unwrap()["a"], "1");

    let opted_in = annotated(frozen("2"), RECREATE_ANNOTATION, "true");
    let recreated = sync(&applier, &[apply(vec![opted_in])], &refused.inventory).await;
    let (action, message) = action_of(&recreated, "ConfigMap/default/frozen");
    assert_eq!(action, Action::Configured);
    assert!(message.starts_with(&format!("re-created: {IMMUTABLE_MESSAGE}")), "{message}");
    let live = configmaps(&server, "default").get("frozen").await.unwrap();
    assert_ne!(live.metadata.uid, uid, "a new object");
    assert_eq!(live.data.unwrap()["a"], "2");
    server.stop().await;
}

fn web_deployment() -> Object {
    object(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}}))
}

/// Regression: a namespaced object whose manifest names no namespace was recorded without one
/// when discovery of its apiVersion failed, so the recorded `default/web` became a prune
/// candidate; once discovery answered again in the same sync (a later stage's CRD refreshes it)
/// the live Deployment was deleted.
#[tokio::test]
async fn a_transient_discovery_error_never_prunes_the_object_it_hides() {
    let server = ApiServer::start().await.unwrap();
    let applier = applier(&server, ApplyOptions { drift: DriftMode::Warn, ..options() });
    let stages = [apply(vec![web_deployment()]), Stage { name: "late".into(), action: StageAction::Apply, objects: vec![widgets_crd()] }];
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(first.changes.count(Action::Created), 2);

    server.faults().add(FaultRule::new().verb("get").path("/apis/apps/v1").status(500).times(1));
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(
        actions(&second),
        [
            (
                "Deployment/default/web".to_string(),
                Action::Failed,
                "discovering apps/v1: testkit: injected fault (500 InternalError)".into()
            ),
            ("CustomResourceDefinition/widgets.example.com".to_string(), Action::Unchanged, String::new()),
        ],
        "nothing pruned"
    );
    let deployments: Api<DynamicObject> = Api::default_namespaced_with(
        server.client().unwrap(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", "Deployment"), "deployments"),
    );
    assert!(deployments.get_opt("web").await.unwrap().is_some());
    assert_eq!(second.inventory, first.inventory, "same identities, and the digest that was applied");

    let third = sync(&applier, &stages, &second.inventory).await;
    assert_eq!(third.changes.count(Action::Unchanged), 2, "{:?}", actions(&third));
    server.stop().await;
}

/// Regression: an object recorded at a version its CRD no longer serves was taken for gone
/// (`no matches for kind`) and dropped from the inventory, so a release that removed it left
/// it in the cluster for good.
#[tokio::test]
async fn an_object_recorded_at_a_version_no_longer_served_is_still_pruned() {
    let server = ApiServer::start().await.unwrap();
    let applier = applier(&server, options());
    let widget = |version: &str, name: &str| {
        object(json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget", "metadata": {"name": name}}))
    };
    let first = sync(
        &applier,
        &[apply(vec![widgets_crd(), widget("v1", "keep"), widget("v1", "gone"), widget("v1", "staged")])],
        &Inventory::default(),
    )
    .await;
    assert_eq!(first.changes.count(Action::Created), 4);

    // The release moves to v2 and stops serving v1; it drops one widget and deletes another
    // in a delete stage that still names v1.
    let mut v2_only = widgets_crd();
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    v2_only.body["spec"]["versions"] = json!([
        {"name": "v1", "served": false, "storage": false, "schema": schema},
        {"name": "v2", "served": true, "storage": true, "schema": schema},
    ]);
    let delete = Stage { name: "cleanup".into(), action: StageAction::Delete, objects: vec![widget("v1", "staged")] };
    let second = sync(&applier, &[apply(vec![v2_only, widget("v2", "keep")]), delete], &first.inventory).await;
    assert_eq!(
        actions(&second),
        [
            ("CustomResourceDefinition/widgets.example.com".to_string(), Action::Configured, String::new()),
            ("Widget/default/keep".to_string(), Action::Unchanged, String::new()),
            ("Widget/default/staged".to_string(), Action::Pruned, "deleted by a delete stage".into()),
            ("Widget/default/gone".to_string(), Action::Pruned, String::new()),
        ]
    );
    let widgets: Api<DynamicObject> = Api::default_namespaced_with(
        server.client().unwrap(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v2", "Widget"), "widgets"),
    );
    let left: Vec<String> = widgets.list(&Default::default()).await.unwrap().items.into_iter().filter_map(|w| w.metadata.name).collect();
    assert_eq!(left, ["keep"]);
    server.stop().await;
}

/// Regression: kube's client retries 429/503/504 for minutes (15 times, honouring
/// `Retry-After`), so one object the server kept refusing held the sync for over four minutes.
/// Each request is now bounded by `request_timeout` and the object is Failed saying so.
#[tokio::test]
async fn a_transient_error_the_client_keeps_retrying_fails_the_object_within_the_request_timeout() {
    let server = ApiServer::start().await.unwrap();
    server.faults().add(FaultRule::new().verb("patch").path("/configmaps/busy").too_many_requests(1));
    server.faults().add(FaultRule::new().verb("patch").path("/configmaps/down").status(503));
    // The client as the controller builds it: kube's default retries on.
    let retrying = Applier::new(server.client().unwrap(), ApplyOptions { request_timeout: Duration::from_millis(500), ..options() });
    let stages = [apply(vec![cm("busy", json!({})), cm("down", json!({})), cm("fine", json!({}))])];
    let started = tokio::time::Instant::now();
    let result = sync(&retrying, &stages, &Inventory::default()).await;
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(action_of(&result, "ConfigMap/default/fine"), (Action::Created, String::new()));
    for name in ["busy", "down"] {
        let (action, message) = action_of(&result, &format!("ConfigMap/default/{name}"));
        assert_eq!(action, Action::Failed);
        assert!(message.starts_with("applying: no answer from the API server within 500ms (it kept answering 429/5xx"), "{message}");
    }

    // Without the client's retries the server's own answer is the message.
    let result = sync(&applier(&server, options()), &stages, &result.inventory).await;
    assert_eq!(action_of(&result, "ConfigMap/default/busy"), (Action::Failed, "testkit: injected fault (429 TooManyRequests)".into()));
    assert_eq!(action_of(&result, "ConfigMap/default/down"), (Action::Failed, "testkit: injected fault (503 ServiceUnavailable)".into()));
    assert_eq!(result.inventory.len(), 3);
    server.stop().await;
}

/// Regression: discovery was asked once right after the CRD reported Established; a real API
/// server updates discovery asynchronously, so its custom resources could fail with
/// `no matches for kind` (and `run --once` exit non-zero) although the CRD was in place.
#[tokio::test]
async fn custom_resources_wait_for_discovery_to_catch_up_with_an_established_crd() {
    let server = ApiServer::start().await.unwrap();
    let lag = Arc::new(AtomicUsize::new(2));
    let proxy = Proxy { lagging_discovery: Some(("/apis/example.com/v1", lag.clone())), ..Proxy::new(&server) };
    let applier = proxy.applier(options());
    let widget = object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}));
    let result = sync(&applier, &[apply(vec![widget.clone(), widgets_crd()])], &Inventory::default()).await;
    assert_eq!(action_of(&result, "Widget/default/w"), (Action::Created, String::new()));
    assert_eq!(lag.load(Ordering::SeqCst), 0, "discovery was asked again");

    // A kind nobody serves still fails at once, and only an Established CRD's kinds are waited for.
    let started = tokio::time::Instant::now();
    let gadget = object(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}));
    let result = sync(&applier, &[apply(vec![widget, gadget])], &result.inventory).await;
    assert_eq!(action_of(&result, "Gadget/g"), (Action::Failed, "no matches for kind \"Gadget\" in version \"example.com/v1\"".into()));
    assert!(started.elapsed() < Duration::from_secs(5));
    server.stop().await;
}

/// Regression: an object being deleted (finalizers pending) was dry-run, found equal and
/// reported Unchanged, i.e. synced, although it was about to vanish.
#[tokio::test]
async fn an_object_being_deleted_is_not_reported_synced() {
    let server = ApiServer::start().await.unwrap();
    let applier = applier(&server, options());
    let stages = [apply(vec![cm("held", json!({"a": "1"}))])];
    let first = sync(&applier, &stages, &Inventory::default()).await;
    server
        .load_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: default\n  finalizers: [example.com/hold]\n")
        .unwrap();
    configmaps(&server, "default").delete("held", &Default::default()).await.unwrap();

    server.reset_stats();
    let held = sync(&applier, &stages, &first.inventory).await;
    let (action, message) = action_of(&held, "ConfigMap/default/held");
    assert_eq!(action, Action::Failed);
    assert!(message.starts_with("being deleted"), "{message}");
    assert_eq!(server.stats().total_writes(), 0);
    assert_eq!(held.inventory, first.inventory);

    let release = PatchParams { field_manager: Some("testkit".into()), ..PatchParams::default() };
    configmaps(&server, "default").patch("held", &release, &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    assert!(data(&server, "held").await.is_none());
    let again = sync(&applier, &stages, &held.inventory).await;
    assert_eq!(action_of(&again, "ConfigMap/default/held"), (Action::Created, String::new()));
    server.stop().await;
}

/// Coverage of "a no-op pass makes no writes" beyond ConfigMaps: a CRD carrying a `status` block
/// (as generated CRDs do) with a status subresource, a custom resource with status, numbers and
/// booleans, a Namespace the server adds finalizers and a phase to (its manifest with a stray
/// namespace), Secrets (the server defaults `type`), a Service and a Deployment with quantities.
#[tokio::test]
async fn a_second_pass_writes_nothing_for_crds_namespaces_secrets_and_objects_with_status() {
    let server = ApiServer::start().await.unwrap();
    let mut crd = widgets_crd();
    crd.body["spec"]["versions"][0]["subresources"] = json!({"status": {}});
    crd.body["status"] = json!({"acceptedNames": {"kind": "", "plural": ""}, "conditions": [], "storedVersions": []});
    let widget = object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"size": 3, "ratio": 1.5, "on": true, "list": [1, 2]}, "status": {"ready": true}}));
    let secret = object(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}}));
    let service = object(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "web"}}}));
    let mut deploy = web_deployment();
    deploy.body["spec"]["replicas"] = json!(1);
    deploy.body["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "500m", "memory": "1Gi"}});
    let ns =
        object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "namespace": "stray", "labels": {"x": "y"}}}));
    let stages = [apply(vec![widget, crd, secret, service, deploy, ns])];
    let applier = applier(&server, options());
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(first.changes.count(Action::Created), 6, "{:?}", actions(&first));

    server.reset_stats();
    let second = sync(&applier, &stages, &first.inventory).await;
    assert!(second.changes.entries.iter().all(|e| e.action == Action::Unchanged), "{:?}", actions(&second));
    let stats = server.stats();
    assert_eq!((stats.total_writes(), stats.total_changes()), (0, 0), "{stats:?}");
    assert_eq!(second.inventory, first.inventory);
    server.stop().await;
}

/// Regression: in warn mode, an object someone re-created by hand with another value in an
/// immutable field (manifest unchanged) was deleted and re-created when it carried the
/// recreate annotation, and Failed otherwise; warn mode reports drift and never corrects it.
#[tokio::test]
async fn warn_mode_never_recreates_an_object_whose_immutable_field_drifted() {
    let server = ApiServer::start().await.unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = Proxy { immutable: Some(("/api/v1/namespaces/default/configmaps/frozen", armed.clone())), ..Proxy::new(&server) };
    let frozen = annotated(
        object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "frozen"}, "immutable": true, "data": {"a": "1"}})),
        RECREATE_ANNOTATION,
        "true",
    );
    let stages = [apply(vec![frozen])];
    let warn = proxy.applier(ApplyOptions { drift: DriftMode::Warn, ..options() });
    let first = sync(&warn, &stages, &Inventory::default()).await;
    let uid = configmaps(&server, "default").get("frozen").await.unwrap().metadata.uid;
    armed.store(true, Ordering::SeqCst);

    let warned = sync(&warn, &stages, &first.inventory).await;
    let (action, message) = action_of(&warned, "ConfigMap/default/frozen");
    assert_eq!(action, Action::Skipped);
    assert_eq!(message, format!("drifted: an immutable field differs ({IMMUTABLE_MESSAGE})"));
    assert_eq!(warned.drifted.len(), 1);
    assert_eq!(configmaps(&server, "default").get("frozen").await.unwrap().metadata.uid, uid, "not re-created");

    // Correct mode corrects it, by re-creating as the annotation allows.
    let corrected = sync(&proxy.applier(options()), &stages, &warned.inventory).await;
    assert_eq!(action_of(&corrected, "ConfigMap/default/frozen").0, Action::Configured);
    assert_ne!(configmaps(&server, "default").get("frozen").await.unwrap().metadata.uid, uid);
    server.stop().await;
}
