//! The applier under faults a healthy server does not show: immutable fields, CRDs that never
//! settle, discovery errors and lag, retried 429/5xx, objects being deleted.

use super::*;

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
    // A kind that is discovered (Deployment is known without asking).
    let web = object(json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "web"}, "revision": 1}));
    let stages = [apply(vec![web]), Stage { name: "late".into(), action: StageAction::Apply, objects: vec![widgets_crd()] }];
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(first.changes.count(Action::Created), 2);

    server.faults().add(FaultRule::new().verb("get").path("/apis/apps/v1").status(500).times(1));
    // A new applier (a restarted process): the first one remembers apps/v1 and would not ask.
    let applier = self::applier(&server, ApplyOptions { drift: DriftMode::Warn, ..options() });
    let second = sync(&applier, &stages, &first.inventory).await;
    assert_eq!(
        actions(&second),
        [
            (
                "ControllerRevision/default/web".to_string(),
                Action::Failed,
                "discovering apps/v1: testkit: injected fault (500 InternalError)".into()
            ),
            ("CustomResourceDefinition/widgets.example.com".to_string(), Action::Unchanged, String::new()),
        ],
        "nothing pruned"
    );
    let revisions: Api<DynamicObject> = Api::default_namespaced_with(
        server.client().unwrap(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", "ControllerRevision"), "controllerrevisions"),
    );
    assert!(revisions.get_opt("web").await.unwrap().is_some());
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
    let retrying = Applier::new(server.client().unwrap(), ApplyOptions { request_timeout: Duration::from_secs(2), ..options() });
    let stages = [apply(vec![cm("busy", json!({})), cm("down", json!({})), cm("fine", json!({}))])];
    let started = tokio::time::Instant::now();
    let result = sync(&retrying, &stages, &Inventory::default()).await;
    // Bounded by the request timeout, not by the client's minutes of retries.
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    assert_eq!(action_of(&result, "ConfigMap/default/fine"), (Action::Created, String::new()));
    for name in ["busy", "down"] {
        let (action, message) = action_of(&result, &format!("ConfigMap/default/{name}"));
        assert_eq!(action, Action::Failed);
        assert!(message.starts_with("applying: no answer from the API server within 2s (it kept answering 429/5xx"), "{message}");
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

/// What discovery found is remembered across syncs of one applier (an unchanged resync asks
/// nothing), so an API removed behind its back is noticed by the answer 404: the object fails
/// that sync with the server's words, and the next sync asks discovery again and says what is
/// missing. A kind found missing is never remembered: once its CRD is back, it is applied.
#[tokio::test]
async fn an_api_removed_behind_a_remembered_discovery_is_noticed_by_its_404() {
    let server = ApiServer::start().await.unwrap();
    let installer = applier(&server, ApplyOptions { owner: "crd-installer".into(), ..options() });
    sync(&installer, &[apply(vec![widgets_crd()])], &Inventory::default()).await;
    let applier = applier(&server, options());
    let widget = object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}));
    let stages = [apply(vec![widget])];
    let first = sync(&applier, &stages, &Inventory::default()).await;
    assert_eq!(action_of(&first, "Widget/default/w"), (Action::Created, String::new()));

    let crds: Api<DynamicObject> = Api::all_with(
        server.client().unwrap(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.delete("widgets.example.com", &Default::default()).await.unwrap();
    let second = sync(&applier, &stages, &first.inventory).await;
    let (action, message) = action_of(&second, "Widget/default/w");
    assert_eq!(action, Action::Failed);
    assert!(message.contains("not found") || message.contains("could not find"), "{message}");
    let third = sync(&applier, &stages, &second.inventory).await;
    assert_eq!(
        action_of(&third, "Widget/default/w"),
        (Action::Failed, "no matches for kind \"Widget\" in version \"example.com/v1\"".into())
    );

    sync(&installer, &[apply(vec![widgets_crd()])], &Inventory::default()).await;
    let fourth = sync(&applier, &stages, &third.inventory).await;
    assert!(action_of(&fourth, "Widget/default/w").0.is_synced(), "{:?}", actions(&fourth));
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
    // Re-created by hand with other data (so our fields are no longer ours: the resync looks).
    let cms = configmaps(&server, "default");
    cms.delete("frozen", &Default::default()).await.unwrap();
    let by_hand: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "frozen"}, "immutable": true, "data": {"a": "2"}})).unwrap();
    cms.create(&kube::api::PostParams { field_manager: Some("kubectl-create".into()), ..Default::default() }, &by_hand).await.unwrap();
    let uid = cms.get("frozen").await.unwrap().metadata.uid;
    armed.store(true, Ordering::SeqCst);

    let warned = sync(&warn, &stages, &first.inventory).await;
    let (action, message) = action_of(&warned, "ConfigMap/default/frozen");
    assert!(matches!(action, Action::Skipped(_)));
    assert_eq!(message, format!("drifted: an immutable field differs ({IMMUTABLE_MESSAGE})"));
    assert_eq!(warned.drifted.len(), 1);
    assert_eq!(configmaps(&server, "default").get("frozen").await.unwrap().metadata.uid, uid, "not re-created");

    // Correct mode corrects it, by re-creating as the annotation allows.
    let corrected = sync(&proxy.applier(options()), &stages, &warned.inventory).await;
    assert_eq!(action_of(&corrected, "ConfigMap/default/frozen").0, Action::Configured);
    assert_ne!(configmaps(&server, "default").get("frozen").await.unwrap().metadata.uid, uid);
    server.stop().await;
}
