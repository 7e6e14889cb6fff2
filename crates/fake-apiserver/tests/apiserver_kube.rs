//! kube-rs against testkit's API server: the client stacksync's sync engine uses gets the same
//! answers a real API server gives (apply, conflicts, watch, status, selectors, errors).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::time::Duration;

use fake_apiserver::{ApiServer, FaultRule, Options, Stats, capi_crds_dir};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(20);

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn api_error(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A raw HTTP/1.1 request, for what a typed client hides (headers, content types).
async fn raw(server: &ApiServer, method: &str, path: &str, accept: &str) -> (u16, String, String) {
    let addr = server.url().trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, head.to_lowercase(), body.to_string())
}

#[tokio::test]
async fn apply_conflicts_with_another_manager_and_force_takes_ownership() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    let alpha = PatchParams::apply("alpha");
    let created = api.patch("c", &alpha, &Patch::Apply(cm("c", json!({"a": "1", "b": "2"})))).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let beta = PatchParams::apply("beta");
    let err = api.patch("c", &beta, &Patch::Apply(cm("c", json!({"a": "x", "b": "y"})))).await.unwrap_err();
    let (code, reason, message) = api_error(err);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(message, "Apply failed with 2 conflicts: conflicts with \"alpha\":\n- .data.a\n- .data.b");

    // The same value is shared ownership, not a conflict.
    api.patch("c", &beta, &Patch::Apply(cm("c", json!({"a": "1"})))).await.unwrap();
    let forced = api.patch("c", &beta.clone().force(), &Patch::Apply(cm("c", json!({"a": "1", "b": "forced"})))).await.unwrap();
    assert_eq!(forced.data.unwrap()["b"], "forced");
    assert_eq!(forced.metadata.uid.unwrap(), uid);
    let managers: Vec<(String, String)> = forced
        .metadata
        .managed_fields
        .unwrap()
        .iter()
        .map(|m| (m.manager.clone().unwrap(), serde_json::to_string(&m.fields_v1.as_ref().unwrap().0).unwrap()))
        .collect();
    assert_eq!(
        managers,
        [
            ("alpha".to_string(), r#"{"f:data":{"f:a":{}}}"#.to_string()),
            ("beta".to_string(), r#"{"f:data":{"f:a":{},"f:b":{}}}"#.to_string())
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn apply_removes_keyed_list_items_the_applier_stopped_sending() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Deployment> = Api::default_namespaced(server.client().unwrap());
    let deploy = |containers: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": containers}}}})
    };
    let pp = PatchParams::apply("sync");
    let two = json!([{"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "proxy:1"}]);
    api.patch("web", &pp, &Patch::Apply(deploy(two))).await.unwrap();
    // Another manager sets a field inside the container the applier keeps.
    let env = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "env": [{"name": "X", "value": "1"}]}]}}}});
    let containers = |d: &Deployment| serde_json::to_value(d).unwrap()["spec"]["template"]["spec"]["containers"].clone();
    let merged = api.patch("web", &PatchParams::apply("operator"), &Patch::Apply(env)).await.unwrap();
    assert_eq!(containers(&merged).as_array().unwrap().len(), 2);

    let one = json!([{"name": "app", "image": "app:2"}]);
    let after = api.patch("web", &pp, &Patch::Apply(deploy(one))).await.unwrap();
    assert_eq!(
        containers(&after),
        // With the container defaults the real server fills in.
        json!([{"name": "app", "image": "app:2", "env": [{"name": "X", "value": "1"}], "imagePullPolicy": "IfNotPresent",
            "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}]),
        "the sidecar is gone, the operator's env stays"
    );
    assert_eq!(after.metadata.generation, Some(3));
    server.stop().await;
}

#[tokio::test]
async fn update_with_a_stale_resource_version_conflicts() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    let first = api.create(&PostParams::default(), &serde_json::from_value(cm("c", json!({"a": "1"}))).unwrap()).await.unwrap();
    let mut second = first.clone();
    second.data = Some([("a".to_string(), "2".to_string())].into());
    api.replace("c", &PostParams::default(), &second).await.unwrap();

    let (code, reason, message) = api_error(api.replace("c", &PostParams::default(), &first).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(message.starts_with("Operation cannot be fulfilled on configmaps \"c\": the object has been modified"), "{message}");

    let (code, reason, _) = api_error(api.create(&PostParams::default(), &first).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    let (code, reason, message) = api_error(api.get("missing").await.unwrap_err());
    assert_eq!((code, reason.as_str(), message.as_str()), (404, "NotFound", "configmaps \"missing\" not found"));
    server.stop().await;
}

#[tokio::test]
async fn dry_run_all_returns_the_object_but_stores_and_counts_nothing() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    let mut pp = PatchParams::apply("sync");
    pp.dry_run = true;
    let would = api.patch("c", &pp, &Patch::Apply(cm("c", json!({"a": "1"})))).await.unwrap();
    assert_eq!(would.data.unwrap()["a"], "1");
    let (code, _, _) = api_error(api.get("c").await.unwrap_err());
    assert_eq!(code, 404);
    let stats = server.stats();
    assert_eq!((stats.total_writes(), stats.total_changes()), (0, 0));
    assert_eq!(Stats::count(&stats.requests, "patch", "configmaps"), 1);
    server.stop().await;
}

#[tokio::test]
async fn status_subresource_splits_spec_and_status_and_generation_tracks_spec() {
    let server = ApiServer::start_with(Options { preload: vec![capi_crds_dir()], ..Options::default() }).await.unwrap();
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    let api: Api<DynamicObject> = Api::default_namespaced_with(server.client().unwrap(), &ApiResource::from_gvk(&gvk));
    let cluster = |spec: Value, status: Value| {
        serde_json::from_value::<DynamicObject>(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c"}, "spec": spec, "status": status}),
        )
        .unwrap()
    };
    let pp = PatchParams::apply("sync");
    let created = api.patch("c", &pp, &Patch::Apply(cluster(json!({"paused": false}), json!({"phase": "Ignored"})))).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.data.get("status").is_none(), "the main resource ignores status");

    let status = api
        .patch_status(
            "c",
            &PatchParams::apply("controller"),
            &Patch::Apply(cluster(json!({"paused": true}), json!({"phase": "Provisioned"}))),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Provisioned");
    assert_eq!(status.data["spec"]["paused"], false, "/status ignores spec");
    assert_eq!(status.metadata.generation, Some(1), "a status write keeps the generation");

    let spec = api.patch("c", &pp, &Patch::Apply(cluster(json!({"paused": true}), json!({})))).await.unwrap();
    assert_eq!(spec.metadata.generation, Some(2));
    assert_eq!(spec.data["status"]["phase"], "Provisioned");
    server.stop().await;
}

#[tokio::test]
async fn list_filters_by_label_and_field_selectors_and_pages_with_continue() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    for (i, tier) in ["web", "web", "db", "web", "db"].iter().enumerate() {
        let mut obj = cm(&format!("c{i}"), json!({}));
        obj["metadata"]["labels"] = json!({"tier": tier});
        api.patch(&format!("c{i}"), &PatchParams::apply("t"), &Patch::Apply(obj)).await.unwrap();
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| list.items.into_iter().map(|c| c.metadata.name.unwrap()).collect::<Vec<_>>();
    assert_eq!(names(api.list(&ListParams::default().labels("tier=db")).await.unwrap()), ["c2", "c4"]);
    assert_eq!(names(api.list(&ListParams::default().labels("tier in (web),tier!=db")).await.unwrap()), ["c0", "c1", "c3"]);
    assert_eq!(names(api.list(&ListParams::default().fields("metadata.name=c3")).await.unwrap()), ["c3"]);

    let page1 = api.list(&ListParams::default().labels("tier=web").limit(2)).await.unwrap();
    let token = page1.metadata.continue_.clone().unwrap();
    assert_eq!(page1.metadata.remaining_item_count, Some(1));
    assert_eq!(names(page1), ["c0", "c1"]);
    let page2 = api.list(&ListParams::default().labels("tier=web").limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(page2.metadata.continue_, None);
    assert_eq!(names(page2), ["c3"]);

    let (code, _, message) = api_error(api.list(&ListParams::default().fields("data.x=1")).await.unwrap_err());
    // ConfigMaps have no field label conversion: runtime's default words it (1.35).
    assert_eq!((code, message.as_str()), (400, r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#));

    // Pages across namespaces follow the list's order even where one namespace's name is a
    // prefix of another's (`a` < `a-b`, yet "a/…" > "a-b/…" as strings).
    let client = server.client().unwrap();
    for ns in ["a", "a-b"] {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        namespaces.patch(ns, &PatchParams::apply("t"), &Patch::Apply(body)).await.unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for name in ["x", "y"] {
            let mut obj = cm(name, json!({}));
            obj["metadata"]["namespace"] = json!(ns);
            obj["metadata"]["labels"] = json!({"paged": "yes"});
            api.patch(name, &PatchParams::apply("t"), &Patch::Apply(obj)).await.unwrap();
        }
    }
    let all: Api<ConfigMap> = Api::all(client);
    let (mut seen, mut params) = (Vec::new(), ListParams::default().labels("paged=yes").limit(1));
    loop {
        let page = all.list(&params).await.unwrap();
        seen.extend(
            page.items.iter().map(|c| format!("{}/{}", c.metadata.namespace.as_deref().unwrap(), c.metadata.name.as_deref().unwrap())),
        );
        match page.metadata.continue_ {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(seen, ["a/x", "a/y", "a-b/x", "a-b/y"]);

    api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=db")).await.unwrap();
    assert_eq!(names(api.list(&ListParams::default()).await.unwrap()), ["c0", "c1", "c3"]);
    server.stop().await;
}

#[tokio::test]
async fn watcher_sees_changes_and_recovers_after_watches_are_cut() {
    let server = ApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let next_applied =
        async |events: &mut (dyn futures_util::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin + Send)| loop {
            match tokio::time::timeout(TIMEOUT, events.try_next()).await.unwrap().unwrap().unwrap() {
                watcher::Event::Apply(cm) => return cm,
                _ => continue,
            }
        };
    // The initial list completes first.
    loop {
        if let watcher::Event::InitDone = tokio::time::timeout(TIMEOUT, events.try_next()).await.unwrap().unwrap().unwrap() {
            break;
        }
    }
    api.patch("c", &PatchParams::apply("t"), &Patch::Apply(cm("c", json!({"v": "1"})))).await.unwrap();
    assert_eq!(next_applied(&mut events).await.data.unwrap()["v"], "1");

    server.faults().cut_watches();
    api.patch("c", &PatchParams::apply("t"), &Patch::Apply(cm("c", json!({"v": "2"})))).await.unwrap();
    assert_eq!(next_applied(&mut events).await.data.unwrap()["v"], "2");
    drop(events);
    server.stop().await;
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_and_answers_410_once_compacted() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    let first = api.patch("a", &PatchParams::apply("t"), &Patch::Apply(cm("a", json!({})))).await.unwrap();
    let rv = first.metadata.resource_version.unwrap();
    api.patch("b", &PatchParams::apply("t"), &Patch::Apply(cm("b", json!({})))).await.unwrap();

    let wp = WatchParams::default().timeout(5);
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    match tokio::time::timeout(TIMEOUT, stream.try_next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("b"), "only what came after {rv}"),
        other => panic!("unexpected {other:?}"),
    }
    drop(stream);

    server.compact();
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    match tokio::time::timeout(TIMEOUT, stream.try_next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Error(status) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("unexpected {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn watch_list_sends_initial_events_then_the_end_bookmark() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    api.patch("a", &PatchParams::apply("t"), &Patch::Apply(cm("a", json!({})))).await.unwrap();
    let wp = WatchParams::default().initial_events().timeout(5);
    let mut stream = api.watch(&wp, "").await.unwrap().boxed();
    let mut next = async || tokio::time::timeout(TIMEOUT, stream.try_next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(next().await, WatchEvent::Added(cm) if cm.metadata.name.as_deref() == Some("a")));
    match next().await {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str), Some("true")),
        other => panic!("unexpected {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_and_namespace_deletion_cascades() {
    let server = ApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "team");
    let mut held = cm("held", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.patch("held", &PatchParams::apply("t"), &Patch::Apply(held)).await.unwrap();
    api.patch("free", &PatchParams::apply("t"), &Patch::Apply(cm("free", json!({})))).await.unwrap();

    namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    let ns = namespaces.get("team").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(api.get("held").await.unwrap().metadata.deletion_timestamp.is_some());
    assert_eq!(api_error(api.get("free").await.unwrap_err()).0, 404);
    let (code, reason, _) = api_error(api.patch("new", &PatchParams::apply("t"), &Patch::Apply(cm("new", json!({})))).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}])).unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(api_error(api.get("held").await.unwrap_err()).0, 404);
    assert_eq!(api_error(namespaces.get("team").await.unwrap_err()).0, 404, "the emptied namespace finishes");
    server.stop().await;
}

#[tokio::test]
async fn deleting_a_crd_stops_serving_its_resources() {
    let server = ApiServer::start_with(Options { preload: vec![capi_crds_dir()], ..Options::default() }).await.unwrap();
    let client = server.client().unwrap();
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "ClusterClass");
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let cc: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass", "metadata": {"name": "cc"}}))
            .unwrap();
    api.patch("cc", &PatchParams::apply("t"), &Patch::Apply(cc)).await.unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client);
    crds.delete("clusterclasses.cluster.x-k8s.io", &DeleteParams::default()).await.unwrap();
    let (code, _, message) = api_error(api.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((code, message.as_str()), (404, "the server could not find the requested resource"));
    server.stop().await;
}

#[tokio::test]
async fn injected_faults_answer_status_retry_after_and_latency() {
    let server = ApiServer::start().await.unwrap();
    let mut config = server.kube_config();
    config.default_retry = false;
    let api: Api<ConfigMap> = Api::default_namespaced(kube::Client::try_from(config).unwrap());
    server.faults().add(FaultRule::new().verb("patch").path("/configmaps/c").status(500).times(1));
    let apply = async || api.patch("c", &PatchParams::apply("t"), &Patch::Apply(cm("c", json!({})))).await;
    let (code, reason, _) = api_error(apply().await.unwrap_err());
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    apply().await.expect("the rule fired once");

    server.faults().add(FaultRule::new().verb("get").too_many_requests(7));
    let (code, head, body) = raw(&server, "GET", "/api/v1/namespaces/default/configmaps/c", "application/json").await;
    assert_eq!(code, 429);
    assert!(head.contains("retry-after: 7"), "{head}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status["reason"].as_str(), status["details"]["retryAfterSeconds"].as_u64()), (Some("TooManyRequests"), Some(7)));
    server.faults().clear();

    server.faults().add(FaultRule::new().verb("list").latency(Duration::from_millis(300)));
    let started = tokio::time::Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    server.stop().await;
}

#[tokio::test]
async fn stats_endpoint_counts_requests_writes_and_changes_per_verb_and_resource() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().unwrap());
    for _ in 0..2 {
        api.patch("c", &PatchParams::apply("t"), &Patch::Apply(cm("c", json!({"a": "1"})))).await.unwrap();
    }
    api.get("c").await.unwrap();
    let (code, _, body) = raw(&server, "GET", "/_testkit/stats", "application/json").await;
    assert_eq!(code, 200);
    let stats: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats["requests"]["patch"]["configmaps"], 2);
    assert_eq!(stats["requests"]["get"]["configmaps"], 1);
    assert_eq!(stats["writes"]["patch"]["configmaps"], 2);
    assert_eq!(stats["changes"]["patch"]["configmaps"], 1, "the second apply changed nothing");
    server.stop().await;
}

#[tokio::test]
async fn discovery_answers_aggregated_only_under_its_exact_content_type() {
    let server = ApiServer::start().await.unwrap();
    let agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let (code, head, body) = raw(&server, "GET", "/apis", agg).await;
    assert_eq!(code, 200);
    assert!(head.contains("content-type: application/json;g=apidiscovery.k8s.io;v=v2;as=apigroupdiscoverylist"), "{head}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert!(list["items"].as_array().unwrap().iter().any(|g| g["metadata"]["name"] == "apps"));

    let (_, head, body) = raw(&server, "GET", "/apis", "application/json").await;
    assert!(head.contains("content-type: application/json\r\n"), "{head}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["kind"], "APIGroupList");

    // kube-rs reads both forms alike.
    let legacy = kube::Discovery::new(server.client().unwrap()).run().await.unwrap();
    let aggregated = kube::Discovery::new(server.client().unwrap()).run_aggregated().await.unwrap();
    for discovery in [legacy, aggregated] {
        let (resource, caps) = discovery.resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")).unwrap();
        assert_eq!((resource.plural.as_str(), caps.scope), ("deployments", kube::discovery::Scope::Namespaced));
        assert!(
            caps.subresources.iter().any(|(sub, _)| sub.plural == "deployments/status" || sub.plural == "status"),
            "{:?}",
            caps.subresources
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn two_servers_are_independent() {
    let (a, b) = (ApiServer::start().await.unwrap(), ApiServer::start().await.unwrap());
    assert_ne!(a.url(), b.url());
    let api_a: Api<ConfigMap> = Api::default_namespaced(a.client().unwrap());
    let api_b: Api<ConfigMap> = Api::default_namespaced(b.client().unwrap());
    api_a.patch("only-a", &PatchParams::apply("t"), &Patch::Apply(cm("only-a", json!({})))).await.unwrap();
    assert_eq!(api_error(api_b.get("only-a").await.unwrap_err()).0, 404);
    assert_eq!(b.stats().total_writes(), 0);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn control_endpoints_drive_faults_and_counters_over_http() {
    let server = ApiServer::start().await.unwrap();
    let addr = server.url().trim_start_matches("http://").to_string();
    let post = async |path: &str, body: &str| {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
        response
    };
    let added = post("/_testkit/faults", r#"{"verb": "get", "path": "/namespaces/default", "status": 503, "times": 1}"#).await;
    assert!(added.starts_with("HTTP/1.1 200"), "{added}");
    let (code, _, _) = raw(&server, "GET", "/api/v1/namespaces/default", "application/json").await;
    assert_eq!(code, 503);
    let (code, _, _) = raw(&server, "GET", "/api/v1/namespaces/default", "application/json").await;
    assert_eq!(code, 200, "the rule fired once");
    assert!(post("/_testkit/faults", r#"{"status": "x"}"#).await.starts_with("HTTP/1.1 400"));

    let (_, _, stats) = raw(&server, "GET", "/_testkit/stats", "application/json").await;
    assert_eq!(serde_json::from_str::<Value>(&stats).unwrap()["requests"]["get"]["namespaces"], 2);
    raw(&server, "DELETE", "/_testkit/stats", "application/json").await;
    assert_eq!(server.stats(), Stats::default());
    server.stop().await;
}

#[tokio::test]
async fn await_condition_sees_a_new_crd_established_then_its_resource_is_served() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = ApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster", "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    let established =
        kube::runtime::wait::await_condition(crds.clone(), "widgets.example.com", kube::runtime::conditions::is_crd_established());
    let (pp, patch) = (PatchParams::apply("t"), Patch::Apply(crd));
    let (created, waited) = tokio::join!(crds.patch("widgets.example.com", &pp, &patch), tokio::time::timeout(TIMEOUT, established));
    assert!(created.unwrap().status.is_none_or(|s| s.conditions.is_none()), "the create answers before the controllers run");
    assert!(waited.unwrap().unwrap().is_some());

    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::all_with(client, &ApiResource::from_gvk(&gvk));
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})).unwrap();
    let stored = widgets.patch("w", &PatchParams::apply("t"), &Patch::Apply(w)).await.unwrap();
    assert_eq!(stored.metadata.namespace, None, "cluster-scoped");
    server.stop().await;
}

/// kube-lease-manager renews a Lease with an apply that has no `metadata.name`: the API server
/// merges it into the live object (which keeps its name); only a create needs the name.
#[tokio::test]
async fn apply_without_a_name_updates_an_existing_object_and_cannot_create_one() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client().unwrap(), "default");
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}});
    let err = api.patch("lease", &PatchParams::apply("m"), &Patch::Apply(&nameless)).await.unwrap_err();
    assert_eq!(api_error(err).0, 400);
    api.patch("lease", &PatchParams::apply("m"), &Patch::Apply(cm("lease", json!({"a": "0"})))).await.unwrap();
    let written = api.patch("lease", &PatchParams::apply("m"), &Patch::Apply(&nameless)).await.unwrap();
    assert_eq!((written.metadata.name.as_deref(), written.data.unwrap()["a"].as_str()), (Some("lease"), "1"));
}

/// A metadata-only client (`Accept: …;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`, what
/// kube's `Api<PartialObjectMeta<K>>` and client-go's metadata informers send) gets metadata
/// alone, as from the real server: no Secret data crosses the wire.
#[tokio::test]
async fn metadata_only_requests_get_partial_object_metadata() {
    let server = ApiServer::start().await.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(server.client().unwrap());
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "b"}}, "data": {"k": "dg=="}});
    secrets.patch("s", &PatchParams::apply("t"), &Patch::Apply(secret)).await.unwrap();

    let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let (code, _, body) = raw(&server, "GET", "/api/v1/namespaces/default/secrets/s", one).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((code, v["kind"].as_str(), v["apiVersion"].as_str()), (200, Some("PartialObjectMetadata"), Some("meta.k8s.io/v1")), "{v}");
    assert_eq!(v["metadata"]["labels"]["a"], "b");
    assert!(v.get("data").is_none(), "{v}");

    let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let (code, _, body) = raw(&server, "GET", "/api/v1/namespaces/default/secrets", list).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (code, v["kind"].as_str(), v["apiVersion"].as_str()),
        (200, Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1")),
        "{v}"
    );
    assert!(v["metadata"]["resourceVersion"].is_string(), "{v}");
    assert_eq!(v["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(v["items"][0]["metadata"]["name"], "s");
    assert!(v["items"][0].get("data").is_none(), "{v}");

    // A watcher over `Api<PartialObjectMeta<Secret>>` (as the controller watches kubeconfig
    // Secrets): the initial list and a change, metadata only.
    let api: Api<kube::api::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>> = Api::default_namespaced(server.client().unwrap());
    let listed = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.iter().map(|m| m.metadata.name.as_deref()).collect::<Vec<_>>(), [Some("s")]);
    let mut events = watcher(api, watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitDone = tokio::time::timeout(TIMEOUT, events.try_next()).await.unwrap().unwrap().unwrap() {
            break;
        }
    }
    let changed = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "c"}}, "data": {"k": "dg=="}});
    secrets.patch("s", &PatchParams::apply("t"), &Patch::Apply(changed)).await.unwrap();
    loop {
        if let watcher::Event::Apply(m) = tokio::time::timeout(TIMEOUT, events.try_next()).await.unwrap().unwrap().unwrap() {
            assert_eq!(m.metadata.labels.unwrap_or_default().get("a").map(String::as_str), Some("c"));
            assert_eq!(m.types.map(|t| t.kind).as_deref(), Some("PartialObjectMetadata"));
            break;
        }
    }
    drop(events);
    server.stop().await;
}
