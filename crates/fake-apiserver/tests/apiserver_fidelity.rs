//! testkit's API server where a controller could tell it from a real kube-apiserver 1.35: the
//! built-in kinds and their schemas, defaulting, validation, immutability, garbage collection,
//! strategic merge patch and list semantics. Raw HTTP, so headers and exact bodies are visible.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::time::Duration;

use fake_apiserver::ApiServer;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(20);

/// One answer: status code, lower-cased head (headers), JSON body.
struct Answer {
    code: u16,
    head: String,
    body: Value,
}

async fn send(server: &ApiServer, method: &str, path: &str, content_type: &str, body: &Value) -> Answer {
    let addr = server.url().trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let payload = if body.is_null() { String::new() } else { body.to_string() };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    Answer { code, head: head.to_lowercase(), body: serde_json::from_str(body).unwrap_or(Value::Null) }
}

async fn apply(server: &ApiServer, path: &str, manager: &str, obj: &Value) -> Answer {
    send(server, "PATCH", &format!("{path}?fieldManager={manager}"), "application/apply-patch+yaml", obj).await
}

async fn get(server: &ApiServer, path: &str) -> Value {
    let answer = send(server, "GET", path, "application/json", &Value::Null).await;
    assert_eq!(answer.code, 200, "GET {path}: {}", answer.body);
    answer.body
}

fn deployment(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec})
}

fn pod_template(containers: Value) -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}})
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

#[tokio::test]
async fn storage_classes_and_persistent_volume_claims_are_served_with_their_scope() {
    let server = ApiServer::start().await.unwrap();
    let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"}, "provisioner": "x.io/p"});
    assert_eq!(apply(&server, "/apis/storage.k8s.io/v1/storageclasses/fast", "t", &sc).await.code, 201);
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "fast"}});
    assert_eq!(apply(&server, "/api/v1/namespaces/default/persistentvolumeclaims/data", "t", &pvc).await.code, 201);
    let core = get(&server, "/api/v1").await;
    let pvcs = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "persistentvolumeclaims").unwrap();
    assert_eq!((pvcs["namespaced"].clone(), pvcs["shortNames"].clone()), (json!(true), json!(["pvc"])));
    assert!(core["resources"].as_array().unwrap().iter().any(|r| r["name"] == "persistentvolumeclaims/status"));
    let storage = get(&server, "/apis/storage.k8s.io/v1").await;
    let scs = storage["resources"].as_array().unwrap().iter().find(|r| r["name"] == "storageclasses").unwrap();
    assert_eq!((scs["namespaced"].clone(), scs["shortNames"].clone()), (json!(false), json!(["sc"])));
    let reviews = get(&server, "/apis/authorization.k8s.io/v1").await;
    assert!(reviews["resources"].as_array().unwrap().iter().all(|r| r["verbs"] == json!(["create"])));
    server.stop().await;
}

#[tokio::test]
async fn a_port_without_protocol_is_keyed_by_the_defaulted_tcp() {
    let server = ApiServer::start().await.unwrap();
    let path = format!("{DEPLOYMENTS}/web");
    let first = deployment(
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!([{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]))}),
    );
    assert_eq!(apply(&server, &path, "a", &first).await.code, 201);
    let second = deployment(
        "web",
        json!({"template": pod_template(json!([{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}]}]))}),
    );
    let answer = apply(&server, &path, "b", &second).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    let ports = &answer.body["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(ports.as_array().unwrap().len(), 1, "one port 80 item: {ports}");
    let fields = serde_json::to_string(&answer.body["metadata"]["managedFields"][0]["fieldsV1"]).unwrap();
    assert!(fields.contains(r#"k:{\"containerPort\":80,\"protocol\":\"TCP\"}"#), "{fields}");
    server.stop().await;
}

#[tokio::test]
async fn a_label_selector_is_atomic_so_a_second_applier_conflicts() {
    let server = ApiServer::start().await.unwrap();
    let path = format!("{DEPLOYMENTS}/web");
    let spec = |labels: Value| json!({"selector": {"matchLabels": labels}, "template": pod_template(json!([{"name": "c", "image": "i"}]))});
    assert_eq!(apply(&server, &path, "a", &deployment("web", spec(json!({"app": "web"})))).await.code, 201);
    let answer = apply(&server, &path, "b", &deployment("web", json!({"selector": {"matchLabels": {"app": "web", "tier": "x"}}}))).await;
    assert_eq!(answer.code, 409, "{}", answer.body);
    assert_eq!(answer.body["message"], r#"Apply failed with 1 conflict: conflict with "a": .spec.selector"#);
    server.stop().await;
}

#[tokio::test]
async fn workloads_services_and_secrets_come_back_defaulted_as_a_real_server_stores_them() {
    let server = ApiServer::start().await.unwrap();
    let spec = json!({"selector": {"matchLabels": {"app": "web"}},
        "template": pod_template(json!([{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}]))});
    let d = apply(&server, &format!("{DEPLOYMENTS}/web"), "a", &deployment("web", spec)).await.body;
    assert_eq!(d["spec"]["strategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}));
    assert_eq!(
        (d["spec"]["replicas"].clone(), d["spec"]["revisionHistoryLimit"].clone(), d["spec"]["progressDeadlineSeconds"].clone()),
        (json!(1), json!(10), json!(600))
    );
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(
        (pod["dnsPolicy"].clone(), pod["restartPolicy"].clone(), pod["schedulerName"].clone()),
        (json!("ClusterFirst"), json!("Always"), json!("default-scheduler"))
    );
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    let c = &pod["containers"][0];
    assert_eq!((c["imagePullPolicy"].clone(), c["ports"][0]["protocol"].clone()), (json!("Always"), json!("TCP")));
    assert_eq!(
        c["readinessProbe"],
        json!({"httpGet": {"path": "/", "port": 80, "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
    // Defaults are not the applier's: its managedFields hold only what it sent.
    let owned = serde_json::to_string(&d["metadata"]["managedFields"][0]["fieldsV1"]).unwrap();
    assert!(!owned.contains("strategy") && !owned.contains("dnsPolicy"), "{owned}");

    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    let s = apply(&server, "/api/v1/namespaces/default/services/web", "a", &svc).await.body;
    assert_eq!((s["spec"]["type"].clone(), s["spec"]["sessionAffinity"].clone()), (json!("ClusterIP"), json!("None")));
    assert_eq!(s["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
    let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.96."), "{ip}");
    assert_eq!(s["spec"]["clusterIPs"], json!([ip]));
    // A re-apply without clusterIP keeps the allocated one and changes nothing.
    let again = apply(&server, "/api/v1/namespaces/default/services/web", "a", &svc).await.body;
    assert_eq!(again["metadata"]["resourceVersion"], s["metadata"]["resourceVersion"]);

    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"token": "abc"}});
    let stored = apply(&server, "/api/v1/namespaces/default/secrets/s", "a", &secret).await.body;
    assert_eq!(
        (stored["data"].clone(), stored.get("stringData"), stored["type"].clone()),
        (json!({"token": "YWJj"}), None, json!("Opaque"))
    );
    let bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}, "data": {"k": "not base64!"}});
    let answer = apply(&server, "/api/v1/namespaces/default/secrets/b", "a", &bad).await;
    assert_eq!(answer.code, 400, "{}", answer.body);
    assert!(!answer.body["message"].as_str().unwrap().contains("not base64"), "never echoes a Secret's content");

    let ns =
        apply(&server, "/api/v1/namespaces/team", "a", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}))
            .await
            .body;
    assert_eq!(ns["metadata"]["labels"], json!({"kubernetes.io/metadata.name": "team"}));
    server.stop().await;
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn field_validation_strict_refuses_warn_drops_with_a_warning_ignore_drops() {
    let server = ApiServer::start().await.unwrap();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "bogus": 1}, "data": {"a": "1"}, "extra": true});
    let strict = send(&server, "POST", &format!("{CONFIGMAPS}?fieldValidation=Strict"), "application/json", &body).await;
    assert_eq!(strict.code, 400);
    assert_eq!(
        strict.body["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "extra", unknown field "metadata.bogus""#
    );
    // An apply configuration must fit the typed schema whatever the mode.
    let applied =
        send(&server, "PATCH", &format!("{CONFIGMAPS}/c?fieldManager=m&fieldValidation=Ignore"), "application/apply-patch+yaml", &body)
            .await;
    assert_eq!(
        (applied.code, applied.body["message"].clone()),
        (
            500,
            json!(
                "failed to create typed patch object (default/c; /v1, Kind=ConfigMap): errors:\n  .extra: field not declared in schema\n  .metadata.bogus: field not declared in schema"
            )
        )
    );
    let d = deployment(
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!([{"name": "c", "image": "i", "bogus": 1}]))}),
    );
    let keyed = apply(&server, &format!("{DEPLOYMENTS}/web"), "m", &d).await;
    assert!(
        keyed.body["message"]
            .as_str()
            .unwrap()
            .ends_with(r#": .spec.template.spec.containers[name="c"].bogus: field not declared in schema"#),
        "{}",
        keyed.body
    );
    let warn = send(&server, "POST", CONFIGMAPS, "application/json", &body).await;
    assert_eq!(warn.code, 201);
    assert!(warn.head.contains(r#"warning: 299 - "unknown field \"extra\"""#), "{}", warn.head);
    assert_eq!((warn.body.get("extra"), warn.body["metadata"].get("bogus")), (None, None));
    let mut again = body.clone();
    again["metadata"]["name"] = json!("d");
    let ignore = send(&server, "POST", &format!("{CONFIGMAPS}?fieldValidation=Ignore"), "application/json", &again).await;
    assert_eq!(ignore.code, 201);
    assert!(!ignore.head.contains("warning:"));
    let bad = send(&server, "POST", &format!("{CONFIGMAPS}?fieldValidation=Loud"), "application/json", &again).await;
    assert_eq!(bad.code, 400);
    server.stop().await;
}

#[tokio::test]
async fn names_labels_and_immutable_fields_are_refused_as_invalid() {
    let server = ApiServer::start().await.unwrap();
    let cm = |name: &str, labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"a": "1"}});
    let bad_name = send(&server, "POST", CONFIGMAPS, "application/json", &cm("Bad_Name", json!({}))).await;
    assert_eq!((bad_name.code, bad_name.body["reason"].clone()), (422, json!("Invalid")));
    assert!(
        bad_name.body["message"]
            .as_str()
            .unwrap()
            .starts_with(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#)
    );
    assert_eq!(bad_name.body["details"].get("group"), None, "the core group is omitted, not \"\"");
    let bad_label = send(&server, "POST", CONFIGMAPS, "application/json", &cm("c", json!({"app": "has space"}))).await;
    assert_eq!(bad_label.code, 422);
    assert_eq!(bad_label.body["details"]["causes"][0]["field"], "metadata.labels");

    let frozen = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}, "data": {"a": "1"}, "immutable": true});
    assert_eq!(apply(&server, &format!("{CONFIGMAPS}/f"), "m", &frozen).await.code, 201);
    let mut changed = frozen.clone();
    changed["data"]["a"] = json!("2");
    let refused = apply(&server, &format!("{CONFIGMAPS}/f"), "m", &changed).await;
    assert_eq!(refused.code, 422);
    assert_eq!(refused.body["message"], r#"ConfigMap "f" is invalid: data: Forbidden: field is immutable when `immutable` is set"#);

    let path = format!("{DEPLOYMENTS}/web");
    let spec = |app: &str| json!({"selector": {"matchLabels": {"app": app}}, "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}});
    assert_eq!(apply(&server, &path, "m", &deployment("web", spec("web"))).await.code, 201);
    let moved = apply(&server, &path, "m", &deployment("web", spec("other"))).await;
    assert_eq!(moved.code, 422);
    assert!(
        moved.body["message"]
            .as_str()
            .unwrap()
            .contains("spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"other\"}"),
        "{}",
        moved.body
    );

    let with_managed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "managedFields": [{"manager": "x"}]}});
    let answer = apply(&server, &format!("{CONFIGMAPS}/m"), "m", &with_managed).await;
    assert_eq!((answer.code, answer.body["message"].clone()), (400, json!("metadata.managedFields must be nil")));
    server.stop().await;
}

#[tokio::test]
async fn an_object_being_deleted_takes_no_new_finalizers() {
    let server = ApiServer::start().await.unwrap();
    let obj = |finalizers: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": finalizers}});
    assert_eq!(apply(&server, &format!("{CONFIGMAPS}/c"), "m", &obj(json!(["a.io/x"]))).await.code, 201);
    assert_eq!(send(&server, "DELETE", &format!("{CONFIGMAPS}/c"), "application/json", &Value::Null).await.code, 200);
    let answer = apply(&server, &format!("{CONFIGMAPS}/c"), "m", &obj(json!(["a.io/x", "b.io/y"]))).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert!(answer.body["message"].as_str().unwrap().ends_with(r#"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"b.io/y"}"#));
    server.stop().await;
}

fn widget_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "required": ["size"], "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}})
}

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[tokio::test]
async fn custom_resources_are_validated_pruned_and_defaulted_by_their_structural_schema() {
    let server = ApiServer::start().await.unwrap();
    assert_eq!(
        apply(&server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "m", &widget_crd()).await.code,
        201
    );
    let widget = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
    let invalid = apply(&server, &format!("{WIDGETS}/w"), "m", &widget(json!({"size": 0, "mode": "medium"}))).await;
    assert_eq!(invalid.code, 422, "{}", invalid.body);
    assert_eq!(
        invalid.body["message"],
        r#"Widget.example.com "w" is invalid: [spec.mode: Unsupported value: "medium": supported values: "fast", "slow", spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1]"#
    );
    let missing = apply(&server, &format!("{WIDGETS}/w"), "m", &widget(json!({"mode": "fast"}))).await;
    assert_eq!(
        missing.body["details"]["causes"][0],
        json!({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"})
    );
    let typed = apply(&server, &format!("{WIDGETS}/w"), "m", &widget(json!({"size": "big"}))).await;
    assert_eq!(typed.body["details"]["causes"][0]["reason"], "FieldValueTypeInvalid");

    let refused = apply(&server, &format!("{WIDGETS}/w"), "m", &widget(json!({"size": 3, "unknown": 1}))).await;
    assert_eq!(refused.code, 500, "an apply configuration must fit the schema: {}", refused.body);
    let ok =
        apply(&server, &format!("{WIDGETS}/w"), "m", &widget(json!({"size": 3, "free": {"any": {"thing": 1}}, "selector": {"a": "1"}})))
            .await;
    assert_eq!(ok.code, 201, "{}", ok.body);
    assert_eq!(ok.body["spec"], json!({"size": 3, "mode": "fast", "free": {"any": {"thing": 1}}, "selector": {"a": "1"}}), "defaulted");
    // Other writes prune what the schema does not declare, with a warning.
    let mut pruned = ok.body.clone();
    pruned["spec"]["unknown"] = json!(1);
    let updated = send(&server, "PUT", &format!("{WIDGETS}/w"), "application/json", &pruned).await;
    assert_eq!((updated.code, updated.body["spec"].get("unknown")), (200, None), "{}", updated.body);
    assert!(updated.head.contains(r#"unknown field \"spec.unknown\""#), "{}", updated.head);
    // An atomic map belongs to its applier as a whole: another applier conflicts on it.
    let other = apply(&server, &format!("{WIDGETS}/w"), "n", &widget(json!({"selector": {"b": "2"}}))).await;
    assert_eq!(
        (other.code, other.body["message"].clone()),
        (409, json!(r#"Apply failed with 1 conflict: conflict with "m": .spec.selector"#))
    );
    server.stop().await;
}

/// A ConfigMap owned by the objects with these uids.
fn owned_cm(name: &str, owners: &[(&str, &str, bool)]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(owner, uid, block)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid, "blockOwnerDeletion": block}))
        .collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": refs}})
}

async fn make_cm(server: &ApiServer, obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap();
    let answer = apply(server, &format!("{CONFIGMAPS}/{name}"), "m", obj).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    answer.body["metadata"]["uid"].as_str().unwrap().to_string()
}

async fn exists(server: &ApiServer, name: &str) -> Option<Value> {
    let answer = send(server, "GET", &format!("{CONFIGMAPS}/{name}"), "application/json", &Value::Null).await;
    (answer.code == 200).then_some(answer.body)
}

async fn delete_with(server: &ApiServer, name: &str, policy: &str) -> Answer {
    send(server, "DELETE", &format!("{CONFIGMAPS}/{name}"), "application/json", &json!({"propagationPolicy": policy})).await
}

#[tokio::test]
async fn background_deletion_collects_dependents_whose_owners_are_all_gone() {
    let server = ApiServer::start().await.unwrap();
    let a = make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})).await;
    let b = make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}})).await;
    make_cm(&server, &owned_cm("only-a", &[("a", &a, false)])).await;
    let child = make_cm(&server, &owned_cm("a-and-b", &[("a", &a, false), ("b", &b, false)])).await;
    let grand = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "grandchild2",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "a-and-b", "uid": child}]}});
    make_cm(&server, &grand).await;
    assert_eq!(delete_with(&server, "a", "Background").await.code, 200);
    assert!(exists(&server, "only-a").await.is_none(), "its only owner is gone");
    let shared = exists(&server, "a-and-b").await.expect("b still owns it");
    assert_eq!(shared["metadata"]["ownerReferences"].as_array().unwrap().len(), 1, "the reference to a is removed");
    assert!(exists(&server, "grandchild2").await.is_some());
    assert_eq!(delete_with(&server, "b", "Background").await.code, 200);
    assert!(exists(&server, "a-and-b").await.is_none());
    assert!(exists(&server, "grandchild2").await.is_none(), "the cascade goes on down the chain");
    server.stop().await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents_and_orphan_strips_references() {
    let server = ApiServer::start().await.unwrap();
    let owner = make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})).await;
    let mut held = owned_cm("held", &[("owner", &owner, true)]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    make_cm(&server, &held).await;
    let answer = delete_with(&server, "owner", "Foreground").await;
    assert_eq!(answer.code, 200);
    assert_eq!(answer.body["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    assert!(answer.body["metadata"]["deletionTimestamp"].is_string());
    let dependent = exists(&server, "held").await.unwrap();
    assert!(dependent["metadata"]["deletionTimestamp"].is_string(), "the dependent is being deleted");
    assert!(exists(&server, "owner").await.is_some(), "the owner waits for its blocking dependent");
    let release = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": []}});
    let released = send(&server, "PATCH", &format!("{CONFIGMAPS}/held"), "application/merge-patch+json", &release).await;
    assert_eq!(released.code, 200, "{}", released.body);
    assert!(exists(&server, "held").await.is_none());
    assert!(exists(&server, "owner").await.is_none(), "the owner goes once its dependent is gone");

    let parent = make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "parent"}})).await;
    make_cm(&server, &owned_cm("kept", &[("parent", &parent, true)])).await;
    assert_eq!(delete_with(&server, "parent", "Orphan").await.code, 200);
    assert!(exists(&server, "parent").await.is_none());
    let kept = exists(&server, "kept").await.expect("orphaned, not deleted");
    assert_eq!(kept["metadata"].get("ownerReferences"), None);
    server.stop().await;
}

#[tokio::test]
async fn graceful_deletion_bumps_generation_and_a_terminating_namespace_reports_its_content() {
    let server = ApiServer::start().await.unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    assert_eq!(apply(&server, "/api/v1/namespaces/team", "m", &ns).await.code, 201);
    let mut d = deployment(
        "web",
        json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!([{"name": "c", "image": "i"}]))}),
    );
    d["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let created = apply(&server, "/apis/apps/v1/namespaces/team/deployments/web", "m", &d).await;
    assert_eq!(created.body["metadata"]["generation"], 1);
    assert_eq!(send(&server, "DELETE", "/api/v1/namespaces/team", "application/json", &Value::Null).await.code, 200);
    let held = get(&server, "/apis/apps/v1/namespaces/team/deployments/web").await;
    assert_eq!(held["metadata"]["generation"], 2, "a deletion that sets deletionTimestamp bumps generation");
    let team = get(&server, "/api/v1/namespaces/team").await;
    let conditions = team["status"]["conditions"].as_array().unwrap();
    let remaining = conditions.iter().find(|c| c["type"] == "NamespaceContentRemaining").unwrap();
    assert_eq!(remaining["message"], "Some resources are remaining: deployments.apps has 1 resource instances");
    let finalizers = conditions.iter().find(|c| c["type"] == "NamespaceFinalizersRemaining").unwrap();
    assert_eq!(finalizers["message"], "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances");
    let refused = apply(
        &server,
        "/api/v1/namespaces/team/configmaps/c",
        "m",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await;
    assert_eq!(refused.code, 403);
    assert_eq!(refused.body["details"]["causes"][0]["reason"], "NamespaceTerminating");
    server.stop().await;
}

#[tokio::test]
async fn deletecollection_answers_the_list_of_what_it_deleted() {
    let server = ApiServer::start().await.unwrap();
    make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})).await;
    let answer = send(&server, "DELETE", CONFIGMAPS, "application/json", &Value::Null).await;
    assert_eq!((answer.code, answer.body["kind"].clone()), (200, json!("ConfigMapList")));
    assert_eq!(answer.body["items"][0]["metadata"]["name"], "x");
    server.stop().await;
}

#[tokio::test]
async fn strategic_merge_patch_merges_by_key_and_never_stores_its_directives() {
    let server = ApiServer::start().await.unwrap();
    let path = format!("{DEPLOYMENTS}/web");
    let containers = json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]}, {"name": "b", "image": "b:1"}]);
    let spec = json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(containers)});
    assert_eq!(apply(&server, &path, "m", &deployment("web", spec)).await.code, 201);
    let smp = "application/strategic-merge-patch+json";
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
        "containers": [{"name": "a", "image": "a:2"}, {"name": "c", "image": "c:1"}, {"name": "b", "$patch": "delete"}]}}}});
    let answer = send(&server, "PATCH", &path, smp, &patch).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    let got = &answer.body["spec"]["template"]["spec"]["containers"];
    let names: Vec<&str> = got.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["c", "a"], "b deleted, c added, in $setElementOrder's order");
    assert_eq!(got[1]["env"], json!([{"name": "X", "value": "1"}]), "a merged by name, its env kept");
    assert_eq!(got[1]["image"], "a:2");
    assert!(!answer.body.to_string().contains('$'), "no directive is stored: {}", answer.body);

    // `strategy` is `retainKeys`: what the list leaves out goes, without a null for it.
    let retain = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    let answer = send(&server, "PATCH", &path, smp, &retain).await;
    assert_eq!(answer.body["spec"]["strategy"], json!({"type": "Recreate"}), "{}", answer.body);
    let replace = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
    let answer = send(&server, "PATCH", &path, smp, &replace).await;
    assert_eq!(answer.body["metadata"]["labels"], json!({"only": "this"}));

    assert_eq!(
        apply(&server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "m", &widget_crd()).await.code,
        201
    );
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}});
    assert_eq!(apply(&server, &format!("{WIDGETS}/w"), "m", &w).await.code, 201);
    let refused = send(&server, "PATCH", &format!("{WIDGETS}/w"), smp, &json!({"spec": {"size": 2}})).await;
    assert_eq!(refused.code, 415, "custom resources take no strategic merge patch");
    server.stop().await;
}

#[tokio::test]
async fn continue_pages_are_a_snapshot_and_exact_reads_the_past() {
    let server = ApiServer::start().await.unwrap();
    for name in ["a", "b", "c"] {
        make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}})).await;
    }
    let first = get(&server, &format!("{CONFIGMAPS}?limit=1")).await;
    let list_rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // Changes after the first page are not seen by the following ones.
    send(&server, "DELETE", &format!("{CONFIGMAPS}/b"), "application/json", &Value::Null).await;
    let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"v": "2"}});
    apply(&server, &format!("{CONFIGMAPS}/c"), "m", &changed).await;
    make_cm(&server, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}})).await;
    let rest = get(&server, &format!("{CONFIGMAPS}?limit=10&continue={token}")).await;
    let names: Vec<&str> = rest["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b", "c"]);
    assert_eq!(rest["items"][1]["data"]["v"], "1");
    assert_eq!(rest["metadata"]["resourceVersion"], list_rv.as_str());

    let exact = get(&server, &format!("{CONFIGMAPS}?resourceVersion={list_rv}&resourceVersionMatch=Exact")).await;
    assert_eq!(exact["items"].as_array().unwrap().len(), 3);
    assert_eq!(exact["metadata"]["resourceVersion"], list_rv.as_str());
    let refused = send(&server, "GET", &format!("{CONFIGMAPS}?resourceVersionMatch=Exact"), "application/json", &Value::Null).await;
    assert_eq!(refused.code, 400);
    server.compact();
    let expired = send(&server, "GET", &format!("{CONFIGMAPS}?limit=10&continue={token}"), "application/json", &Value::Null).await;
    assert_eq!((expired.code, expired.body["reason"].clone()), (410, json!("Expired")));
    server.stop().await;
}

#[tokio::test]
async fn secrets_are_selected_by_type() {
    let server = ApiServer::start().await.unwrap();
    for (name, type_) in [("a", "Opaque"), ("b", "kubernetes.io/tls")] {
        let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type_, "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(apply(&server, &format!("/api/v1/namespaces/default/secrets/{name}"), "m", &s).await.code, 201);
    }
    let tls = get(&server, "/api/v1/namespaces/default/secrets?fieldSelector=type%3Dkubernetes.io%2Ftls").await;
    assert_eq!(tls["items"].as_array().unwrap().len(), 1);
    assert_eq!(tls["items"][0]["metadata"]["name"], "b");
    let refused =
        send(&server, "GET", "/api/v1/namespaces/default/configmaps?fieldSelector=type%3Dx", "application/json", &Value::Null).await;
    assert_eq!((refused.code, refused.body["message"].clone()), (400, json!("field label not supported: type")));
    server.stop().await;
}

#[tokio::test]
async fn duplicate_fields_are_refused_under_strict_and_warned_about_otherwise() {
    let server = ApiServer::start().await.unwrap();
    let addr = server.url().trim_start_matches("http://").to_string();
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","name":"d"},"data":{"a":"1"}}"#;
    let raw = |query: &str| {
        format!(
            "POST {CONFIGMAPS}{query} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    for (query, code, needle) in [
        ("?fieldValidation=Strict", "400", r#"strict decoding error: duplicate field \"metadata.name\""#),
        ("", "201", r#"warning: 299 - "duplicate field \"metadata.name\"""#),
    ] {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(raw(query).as_bytes()).await.unwrap();
        let mut response = String::new();
        tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
        let response = response.to_lowercase();
        assert!(response.starts_with(&format!("http/1.1 {code}")), "{response}");
        assert!(response.contains(&needle.to_lowercase()), "{response}");
    }
    server.stop().await;
}

#[tokio::test]
async fn managed_fields_list_appliers_before_updaters() {
    let server = ApiServer::start().await.unwrap();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    assert_eq!(send(&server, "POST", &format!("{CONFIGMAPS}?fieldManager=zz-updater"), "application/json", &cm).await.code, 201);
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}});
    let answer = apply(&server, &format!("{CONFIGMAPS}/c"), "applier", &applied).await;
    let ops: Vec<&str> =
        answer.body["metadata"]["managedFields"].as_array().unwrap().iter().map(|e| e["operation"].as_str().unwrap()).collect();
    assert_eq!(ops, ["Apply", "Update"]);
    server.stop().await;
}

#[tokio::test]
async fn a_custom_resource_without_status_subresource_bumps_generation_on_status() {
    let server = ApiServer::start().await.unwrap();
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    assert_eq!(apply(&server, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "m", &crd).await.code, 201);
    let mut w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}});
    assert_eq!(apply(&server, &format!("{WIDGETS}/w"), "m", &w).await.body["metadata"]["generation"], 1);
    w["status"] = json!({"ready": true});
    let answer = apply(&server, &format!("{WIDGETS}/w"), "m", &w).await;
    assert_eq!(answer.body["metadata"]["generation"], 2, "{}", answer.body);
    server.stop().await;
}
