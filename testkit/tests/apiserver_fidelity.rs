//! testkit's API server where a controller could tell it from a real kube-apiserver 1.35: the
//! built-in kinds and their schemas, defaulting, validation, immutability, garbage collection,
//! strategic merge patch and list semantics. Raw HTTP, so headers and exact bodies are visible.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

use std::time::Duration;

use serde_json::{Value, json};
use testkit::apiserver::ApiServer;
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
