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
    #[allow(dead_code, reason = "read by the validation tests")]
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
