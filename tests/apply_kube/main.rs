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

use applier::ssa::{AdoptionPolicy, Applier, ApplyOptions, DriftMode, Inventory, Stage, StageAction, SyncResult};
use applier::{Action, Entry, SkipReason};
use fake_apiserver::{ApiServer, FaultRule, Stats};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use stacksync::model::Object;
use stacksync::model::manager::{FIELD_MANAGER, OWNER_LABEL};

const TIMEOUT: Duration = Duration::from_secs(60);
const OWNER: &str = "stack.team-a.alpha";
// stacksync's annotations (`stacksync::model::manager::LABEL_PREFIX`), as a manifest carries them.
const POLICY_ANNOTATION: &str = "stacksync.io/policy";
const FORCE_ANNOTATION: &str = "stacksync.io/force";
const RECREATE_ANNOTATION: &str = "stacksync.io/recreate-on-immutable";

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
    ApplyOptions { owner: OWNER.into(), ..ApplyOptions::new(stacksync::model::manager::manager()) }
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

fn widgets_crd() -> Object {
    object(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
}

mod basics;
mod faults;
mod listing;
