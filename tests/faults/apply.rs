//! Hostile identities in manifests and inventories: nothing is sent for a name, namespace or
//! kind the API server would refuse, so no request URL can be steered to another resource.

use std::time::Duration;

use applier::Action;
use applier::ssa::{Applier, ApplyOptions, Inventory, Stage, StageAction};
use fake_apiserver::{ApiServer, Stats};
use serde_json::json;
use stacksync::model::Object;

fn configmap(namespace: Option<&str>, name: &str) -> Object {
    let mut body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}});
    if let Some(ns) = namespace {
        body["metadata"]["namespace"] = json!(ns);
    }
    Object {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: namespace.map(Into::into),
        name: name.into(),
        file: "manifests/evil.yaml".into(),
        line: 1,
        body,
        chart: None,
        stage: None,
    }
}

#[tokio::test]
async fn object_name_with_dot_dot_reached_secrets() {
    let server = ApiServer::start().await.unwrap();
    server.load_yaml("apiVersion: v1\nkind: Secret\nmetadata:\n  name: victim\n  namespace: default\ndata:\n  k: dg==\n").unwrap();
    let mut config = server.kube_config();
    config.default_retry = false;
    let applier = Applier::new(
        kube::Client::try_from(config).unwrap(),
        ApplyOptions { owner: "o".into(), ..ApplyOptions::new(stacksync::model::manager::manager()) },
    );
    server.reset_stats();
    let objects = vec![
        configmap(None, "x/../../secrets/victim"),
        configmap(Some("default/../kube-system"), "ok"),
        configmap(None, "a?dryRun=All"),
        configmap(None, "fine"),
    ];
    let stage = Stage { name: "main".into(), action: StageAction::Apply, objects };
    let result = tokio::time::timeout(Duration::from_secs(30), applier.sync(&[stage], &Inventory::default())).await.unwrap();
    let by_name = |name: &str| result.changes.entries.iter().find(|e| e.object.name == name).unwrap();
    for name in ["x/../../secrets/victim", "ok", "a?dryRun=All"] {
        let e = by_name(name);
        assert_eq!(e.action, Action::Failed, "{name}: {}", e.message);
        assert!(e.message.contains("nothing was sent"), "{name}: {}", e.message);
    }
    assert_eq!(by_name("fine").action, Action::Created);
    let stats = server.stats();
    assert_eq!(Stats::count(&stats.requests, "get", "secrets"), 0, "a request reached secrets: {:?}", stats.requests);
    assert_eq!(stats.total_writes(), 1, "{:?}", stats.writes);
    server.stop().await;
}
