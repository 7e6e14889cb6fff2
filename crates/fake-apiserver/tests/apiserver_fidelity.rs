//! testkit's API server where a controller could tell it from a real kube-apiserver 1.35: the
//! built-in kinds and their schemas, defaulting, validation, immutability, garbage collection,
//! strategic merge patch, list semantics, generation, field selectors, managedFields and error
//! texts. Each case is written once and run by `peers::run` against testkit's server and against
//! the real control plane (`testkit::kube`): its assertions must hold on both, and every answer
//! it records must be the same on both (see `peers/mod.rs`).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

#[macro_use]
mod peers;

use peers::Side;
use serde_json::{Value, json};

/// Cases whose real side still differs, each with the difference it found (printed as
/// `KNOWN DIFFERENCE`; the test fails once the difference is gone, to be moved to `cases!`).
macro_rules! known_to_differ {
    ($($case:ident: $why:literal),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            peers::run_known_to_differ(stringify!($case), self::cases::$case, $why).await;
        }
    )*};
}

cases!(
    a_port_without_protocol_is_keyed_by_the_defaulted_tcp,
    a_label_selector_is_atomic_so_a_second_applier_conflicts,
    background_deletion_collects_dependents_whose_owners_are_all_gone,
    duplicate_fields_are_refused_under_strict_and_warned_about_otherwise,
    managed_fields_list_appliers_before_updaters,
    a_custom_resource_without_status_subresource_bumps_generation_on_status,
    a_deployment_generation_follows_its_annotations_and_other_workloads_only_their_spec,
    field_selectors_are_refused_in_each_kinds_own_words,
    an_apply_to_a_custom_resource_status_records_the_labels_it_sent,
    a_put_naming_another_object_and_an_apply_of_another_version_are_bad_requests,
    storage_classes_and_persistent_volume_claims_are_served_with_their_scope,
    generation_is_carried_by_the_kinds_whose_strategies_set_it,
    custom_resources_are_validated_pruned_and_defaulted_by_their_structural_schema,
    graceful_deletion_bumps_generation_and_a_terminating_namespace_reports_its_content,
    foreground_deletion_waits_for_blocking_dependents_and_orphan_strips_references,
    secrets_are_selected_by_type,
    deletecollection_answers_the_list_of_what_it_deleted,
    an_object_being_deleted_takes_no_new_finalizers,
    names_labels_and_immutable_fields_are_refused_as_invalid,
    field_validation_strict_refuses_warn_drops_with_a_warning_ignore_drops,
    continue_pages_are_a_snapshot_and_exact_reads_the_past,
    strategic_merge_patch_merges_by_key_and_never_stores_its_directives,
    workloads_services_and_secrets_come_back_defaulted_as_a_real_server_stores_them,
);

// None at present: every case agrees with the real server.
known_to_differ!();

mod cases {
    use super::*;

    fn deployment(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec})
    }

    fn pod_template(containers: Value) -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}})
    }

    const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/{ns}/deployments";

    pub(super) async fn storage_classes_and_persistent_volume_claims_are_served_with_their_scope(s: &Side) {
        let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"}, "provisioner": "x.io/p"});
        assert_eq!(s.apply("/apis/storage.k8s.io/v1/storageclasses/fast", "t", &sc).await.code, 201);
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "fast"}});
        assert_eq!(s.apply("/api/v1/namespaces/{ns}/persistentvolumeclaims/data", "t", &pvc).await.code, 201);
        let core = s.get("/api/v1").await;
        let pvcs = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "persistentvolumeclaims").unwrap();
        assert_eq!((pvcs["namespaced"].clone(), pvcs["shortNames"].clone()), (json!(true), json!(["pvc"])));
        assert!(core["resources"].as_array().unwrap().iter().any(|r| r["name"] == "persistentvolumeclaims/status"));
        let storage = s.get("/apis/storage.k8s.io/v1").await;
        let scs = storage["resources"].as_array().unwrap().iter().find(|r| r["name"] == "storageclasses").unwrap();
        assert_eq!((scs["namespaced"].clone(), scs["shortNames"].clone()), (json!(false), json!(["sc"])));
        let reviews = s.get("/apis/authorization.k8s.io/v1").await;
        assert!(reviews["resources"].as_array().unwrap().iter().all(|r| r["verbs"] == json!(["create"])));
    }

    pub(super) async fn a_port_without_protocol_is_keyed_by_the_defaulted_tcp(s: &Side) {
        let path = format!("{DEPLOYMENTS}/web");
        let first = deployment(
            "web",
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!([{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]))}),
        );
        assert_eq!(s.apply(&path, "a", &first).await.code, 201);
        let second = deployment(
            "web",
            json!({"template": pod_template(json!([{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}]}]))}),
        );
        let answer = s.apply(&path, "b", &second).await;
        assert_eq!(answer.code, 200, "{}", answer.body);
        let ports = &answer.body["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(ports.as_array().unwrap().len(), 1, "one port 80 item: {ports}");
        let fields = serde_json::to_string(&answer.body["metadata"]["managedFields"][0]["fieldsV1"]).unwrap();
        assert!(fields.contains(r#"k:{\"containerPort\":80,\"protocol\":\"TCP\"}"#), "{fields}");
    }

    pub(super) async fn a_label_selector_is_atomic_so_a_second_applier_conflicts(s: &Side) {
        let path = format!("{DEPLOYMENTS}/web");
        let spec =
            |labels: Value| json!({"selector": {"matchLabels": labels}, "template": pod_template(json!([{"name": "c", "image": "i"}]))});
        assert_eq!(s.apply(&path, "a", &deployment("web", spec(json!({"app": "web"})))).await.code, 201);
        let answer = s.apply(&path, "b", &deployment("web", json!({"selector": {"matchLabels": {"app": "web", "tier": "x"}}}))).await;
        assert_eq!(answer.code, 409, "{}", answer.body);
        assert_eq!(answer.body["message"], r#"Apply failed with 1 conflict: conflict with "a": .spec.selector"#);
    }

    pub(super) async fn workloads_services_and_secrets_come_back_defaulted_as_a_real_server_stores_them(s: &Side) {
        let spec = json!({"selector": {"matchLabels": {"app": "web"}},
        "template": pod_template(json!([{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}]))});
        let d = s.apply(&format!("{DEPLOYMENTS}/web"), "a", &deployment("web", spec)).await.body;
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
        let service = s.apply("/api/v1/namespaces/{ns}/services/web", "a", &svc).await.body;
        assert_eq!((service["spec"]["type"].clone(), service["spec"]["sessionAffinity"].clone()), (json!("ClusterIP"), json!("None")));
        assert_eq!(service["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        // An address of the server's service range (testkit's 10.96.0.0/12, the real control
        // plane's as it was started), whichever that is.
        let ip = service["spec"]["clusterIP"].as_str().unwrap().to_string();
        assert!(ip.parse::<std::net::Ipv4Addr>().is_ok(), "{ip}");
        assert_eq!(service["spec"]["clusterIPs"], json!([ip]));
        // A re-apply without clusterIP keeps the allocated one and changes nothing.
        let again = s.apply("/api/v1/namespaces/{ns}/services/web", "a", &svc).await.body;
        assert_eq!(again["metadata"]["resourceVersion"], service["metadata"]["resourceVersion"]);

        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"token": "abc"}});
        let stored = s.apply("/api/v1/namespaces/{ns}/secrets/s", "a", &secret).await.body;
        assert_eq!(
            (stored["data"].clone(), stored.get("stringData"), stored["type"].clone()),
            (json!({"token": "YWJj"}), None, json!("Opaque"))
        );
        let bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}, "data": {"k": "not base64!"}});
        // An apply fails converting the merged object: 500 (a POST: 400).
        let answer = s.apply("/api/v1/namespaces/{ns}/secrets/b", "a", &bad).await;
        assert_eq!(answer.code, 500, "{}", answer.body);
        assert!(!answer.body["message"].as_str().unwrap().contains("not base64"), "never echoes a Secret's content");
        let posted = s.send("POST", "/api/v1/namespaces/{ns}/secrets", "application/json", &bad).await;
        assert_eq!(
            (posted.code, posted.body["message"].clone()),
            (400, json!(r#"Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3"#))
        );

        let ns = s
            .apply(
                "/api/v1/namespaces/defaulted-team",
                "a",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "defaulted-team"}}),
            )
            .await
            .body;
        assert_eq!(ns["metadata"]["labels"], json!({"kubernetes.io/metadata.name": "defaulted-team"}));
    }

    const CONFIGMAPS: &str = "/api/v1/namespaces/{ns}/configmaps";

    pub(super) async fn field_validation_strict_refuses_warn_drops_with_a_warning_ignore_drops(s: &Side) {
        let body =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "bogus": 1}, "data": {"a": "1"}, "extra": true});
        let strict = s.send("POST", &format!("{CONFIGMAPS}?fieldValidation=Strict"), "application/json", &body).await;
        assert_eq!(strict.code, 400);
        assert_eq!(
            strict.body["message"],
            r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "extra", unknown field "metadata.bogus""#
        );
        // An apply configuration must fit the typed schema whatever the mode; the object is
        // named as the configuration names it (here without a namespace). One unknown field: of
        // several, the real server names a varying subset.
        let one = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}, "extra": true});
        let applied =
            s.send("PATCH", &format!("{CONFIGMAPS}/c?fieldManager=m&fieldValidation=Ignore"), "application/apply-patch+yaml", &one).await;
        assert_eq!(
            (applied.code, applied.body.get("reason"), applied.body["message"].clone()),
            (500, None, json!("failed to create typed patch object (/c; /v1, Kind=ConfigMap): .extra: field not declared in schema"))
        );
        let d = deployment(
            "web",
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!([{"name": "c", "image": "i", "bogus": 1}]))}),
        );
        let keyed = s.apply(&format!("{DEPLOYMENTS}/web"), "m", &d).await;
        assert!(
            keyed.body["message"]
                .as_str()
                .unwrap()
                .ends_with(r#": .spec.template.spec.containers[name="c"].bogus: field not declared in schema"#),
            "{}",
            keyed.body
        );
        let mut counted = workload("Deployment", json!({}));
        counted["spec"]["replicas"] = json!("3");
        let mistyped = s.apply(&format!("{DEPLOYMENTS}/w"), "m", &counted).await;
        assert_eq!(
            (mistyped.code, mistyped.body["message"].clone()),
            (
                500,
                json!(
                    "failed to create typed patch object (/w; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string"
                )
            )
        );
        let warn = s.send("POST", CONFIGMAPS, "application/json", &body).await;
        assert_eq!(warn.code, 201);
        assert!(warn.head.contains(r#"warning: 299 - "unknown field \"extra\"""#), "{}", warn.head);
        assert_eq!((warn.body.get("extra"), warn.body["metadata"].get("bogus")), (None, None));
        let mut again = body.clone();
        again["metadata"]["name"] = json!("d");
        let ignore = s.send("POST", &format!("{CONFIGMAPS}?fieldValidation=Ignore"), "application/json", &again).await;
        assert_eq!(ignore.code, 201);
        assert!(!ignore.head.contains("warning:"));
        let bad = s.send("POST", &format!("{CONFIGMAPS}?fieldValidation=Loud"), "application/json", &again).await;
        assert_eq!(
            (bad.code, bad.body["message"].clone()),
            (
                422,
                json!(
                    r#"CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn""#
                )
            )
        );
    }

    pub(super) async fn names_labels_and_immutable_fields_are_refused_as_invalid(s: &Side) {
        let cm = |name: &str, labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"a": "1"}});
        let bad_name = s.send("POST", CONFIGMAPS, "application/json", &cm("Bad_Name", json!({}))).await;
        assert_eq!((bad_name.code, bad_name.body["reason"].clone()), (422, json!("Invalid")));
        assert!(
            bad_name.body["message"].as_str().unwrap().starts_with(
                r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#
            )
        );
        assert_eq!(bad_name.body["details"].get("group"), None, "the core group is omitted, not \"\"");
        let bad_label = s.send("POST", CONFIGMAPS, "application/json", &cm("c", json!({"app": "has space"}))).await;
        assert_eq!(bad_label.code, 422);
        assert_eq!(bad_label.body["details"]["causes"][0]["field"], "metadata.labels");

        let frozen = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}, "data": {"a": "1"}, "immutable": true});
        assert_eq!(s.apply(&format!("{CONFIGMAPS}/f"), "m", &frozen).await.code, 201);
        let mut changed = frozen.clone();
        changed["data"]["a"] = json!("2");
        let refused = s.apply(&format!("{CONFIGMAPS}/f"), "m", &changed).await;
        assert_eq!(refused.code, 422);
        assert_eq!(refused.body["message"], r#"ConfigMap "f" is invalid: data: Forbidden: field is immutable when `immutable` is set"#);

        let path = format!("{DEPLOYMENTS}/web");
        let spec = |app: &str| json!({"selector": {"matchLabels": {"app": app}}, "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}});
        assert_eq!(s.apply(&path, "m", &deployment("web", spec("web"))).await.code, 201);
        let moved = s.apply(&path, "m", &deployment("web", spec("other"))).await;
        assert_eq!(moved.code, 422);
        assert!(
            moved.body["message"]
                .as_str()
                .unwrap()
                .ends_with(r#"spec.selector: Invalid value: {"matchLabels":{"app":"other"}}: field is immutable"#),
            "{}",
            moved.body
        );

        let with_managed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "managedFields": [{"manager": "x"}]}});
        let answer = s.apply(&format!("{CONFIGMAPS}/m"), "m", &with_managed).await;
        assert_eq!((answer.code, answer.body["message"].clone()), (400, json!("metadata.managedFields must be nil")));
    }

    pub(super) async fn an_object_being_deleted_takes_no_new_finalizers(s: &Side) {
        let obj = |finalizers: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": finalizers}});
        assert_eq!(s.apply(&format!("{CONFIGMAPS}/c"), "m", &obj(json!(["a.io/x"]))).await.code, 201);
        assert_eq!(s.send("DELETE", &format!("{CONFIGMAPS}/c"), "application/json", &Value::Null).await.code, 200);
        let answer = s.apply(&format!("{CONFIGMAPS}/c"), "m", &obj(json!(["a.io/x", "b.io/y"]))).await;
        assert_eq!(answer.code, 422, "{}", answer.body);
        assert!(answer.body["message"].as_str().unwrap().ends_with(r#"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"b.io/y"}"#));
    }

    /// A Widget CRD in `group`: one per case, as the real control plane is shared by the cases.
    fn widget_crd(group: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "required": ["size"], "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}})
    }

    fn widgets(group: &str) -> String {
        format!("/apis/{group}/v1/namespaces/{{ns}}/widgets")
    }

    pub(super) async fn custom_resources_are_validated_pruned_and_defaulted_by_their_structural_schema(s: &Side) {
        s.crd(&widget_crd("cr.fidelity.test")).await;
        let path = format!("{}/w", widgets("cr.fidelity.test"));
        let widget = |spec: Value| json!({"apiVersion": "cr.fidelity.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
        // One violation a request: the real server lists several in a varying order (Go's map
        // iteration over the schema's properties).
        for (spec, message) in [
            (json!({"size": 3, "mode": "medium"}), r#"spec.mode: Unsupported value: "medium": supported values: "fast", "slow""#),
            (json!({"size": 0}), "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"),
        ] {
            let invalid = s.apply(&path, "m", &widget(spec)).await;
            assert_eq!(
                (invalid.code, invalid.body["message"].clone()),
                (422, json!(format!(r#"Widget.cr.fidelity.test "w" is invalid: {message}"#)))
            );
        }
        let missing = s.apply(&path, "m", &widget(json!({"mode": "fast"}))).await;
        assert_eq!(
            missing.body["details"]["causes"][0],
            json!({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"})
        );
        // A string for an integer: an apply configuration does not type (500, no reason); a
        // create is refused by the schema (422).
        let typed = s.apply(&path, "m", &widget(json!({"size": "big"}))).await;
        assert_eq!(
            (typed.code, typed.body.get("reason"), typed.body["message"].clone()),
            (
                500,
                None,
                json!(
                    "failed to create typed patch object (/w; cr.fidelity.test/v1, Kind=Widget): .spec.size: expected numeric (int or float), got string"
                )
            )
        );
        let posted = s.send("POST", &widgets("cr.fidelity.test"), "application/json", &widget(json!({"size": "big"}))).await;
        assert_eq!((posted.code, posted.body["details"]["causes"][0]["reason"].clone()), (422, json!("FieldValueTypeInvalid")));

        let refused = s.apply(&path, "m", &widget(json!({"size": 3, "unknown": 1}))).await;
        assert_eq!(refused.code, 500, "an apply configuration must fit the schema: {}", refused.body);
        let ok = s.apply(&path, "m", &widget(json!({"size": 3, "free": {"any": {"thing": 1}}, "selector": {"a": "1"}}))).await;
        assert_eq!(ok.code, 201, "{}", ok.body);
        assert_eq!(ok.body["spec"], json!({"size": 3, "mode": "fast", "free": {"any": {"thing": 1}}, "selector": {"a": "1"}}), "defaulted");
        // Other writes prune what the schema does not declare, with a warning.
        let mut pruned = ok.body.clone();
        pruned["spec"]["unknown"] = json!(1);
        let updated = s.send("PUT", &path, "application/json", &pruned).await;
        assert_eq!((updated.code, updated.body["spec"].get("unknown")), (200, None), "{}", updated.body);
        assert!(updated.head.contains(r#"unknown field \"spec.unknown\""#), "{}", updated.head);
        // An atomic map belongs to its applier as a whole: another applier conflicts on it.
        let other = s.apply(&path, "n", &widget(json!({"selector": {"b": "2"}}))).await;
        assert_eq!(
            (other.code, other.body["message"].clone()),
            (409, json!(r#"Apply failed with 1 conflict: conflict with "m": .spec.selector"#))
        );
    }

    /// A ConfigMap owned by the objects with these uids.
    fn owned_cm(name: &str, owners: &[(&str, &str, bool)]) -> Value {
        let refs: Vec<Value> = owners
        .iter()
        .map(|(owner, uid, block)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid, "blockOwnerDeletion": block}))
        .collect();
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": refs}})
    }

    async fn make_cm(s: &Side, obj: &Value) -> String {
        let name = obj["metadata"]["name"].as_str().unwrap();
        let answer = s.apply(&format!("{CONFIGMAPS}/{name}"), "m", obj).await;
        assert_eq!(answer.code, 201, "{}", answer.body);
        answer.body["metadata"]["uid"].as_str().unwrap().to_string()
    }

    async fn exists(s: &Side, name: &str) -> Option<Value> {
        let answer = s.send("GET", &format!("{CONFIGMAPS}/{name}"), "application/json", &Value::Null).await;
        (answer.code == 200).then_some(answer.body)
    }

    /// Waits until the ConfigMap is gone: the real garbage collector works shortly after the
    /// request that lets it, testkit's within it.
    async fn gone(s: &Side, name: &str) {
        s.eventually(&format!("{CONFIGMAPS}/{name}"), |a| a.code == 404).await;
    }

    /// Waits until the ConfigMap's owner references are `n` (or absent, for 0).
    async fn owners(s: &Side, name: &str, n: usize) -> Value {
        let owned = |a: &peers::Answer| a.body["metadata"]["ownerReferences"].as_array().map_or(0, Vec::len) == n;
        s.eventually(&format!("{CONFIGMAPS}/{name}"), |a| a.code == 200 && owned(a)).await.body
    }

    async fn delete_with(s: &Side, name: &str, policy: &str) -> peers::Answer {
        s.send("DELETE", &format!("{CONFIGMAPS}/{name}"), "application/json", &json!({"propagationPolicy": policy})).await
    }

    pub(super) async fn background_deletion_collects_dependents_whose_owners_are_all_gone(s: &Side) {
        let a = make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})).await;
        let b = make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}})).await;
        make_cm(s, &owned_cm("only-a", &[("a", &a, false)])).await;
        let child = make_cm(s, &owned_cm("a-and-b", &[("a", &a, false), ("b", &b, false)])).await;
        let grand = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "grandchild2",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "a-and-b", "uid": child}]}});
        make_cm(s, &grand).await;
        assert_eq!(delete_with(s, "a", "Background").await.code, 200);
        // Its only owner is gone: collected. b still owns a-and-b: kept, the reference to a removed.
        gone(s, "only-a").await;
        owners(s, "a-and-b", 1).await;
        assert!(exists(s, "grandchild2").await.is_some());
        assert_eq!(delete_with(s, "b", "Background").await.code, 200);
        gone(s, "a-and-b").await;
        // The cascade goes on down the chain.
        gone(s, "grandchild2").await;
    }

    pub(super) async fn foreground_deletion_waits_for_blocking_dependents_and_orphan_strips_references(s: &Side) {
        let owner = make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})).await;
        let mut held = owned_cm("held", &[("owner", &owner, true)]);
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        make_cm(s, &held).await;
        let answer = delete_with(s, "owner", "Foreground").await;
        assert_eq!(answer.code, 200);
        assert_eq!(answer.body["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        assert!(answer.body["metadata"]["deletionTimestamp"].is_string());
        // The dependent is being deleted.
        s.eventually(&format!("{CONFIGMAPS}/held"), |a| a.body["metadata"]["deletionTimestamp"].is_string()).await;
        assert!(exists(s, "owner").await.is_some(), "the owner waits for its blocking dependent");
        let release = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": []}});
        let released = s.send("PATCH", &format!("{CONFIGMAPS}/held"), "application/merge-patch+json", &release).await;
        assert_eq!(released.code, 200, "{}", released.body);
        gone(s, "held").await;
        // The owner goes once its dependent is gone.
        gone(s, "owner").await;

        let parent = make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "parent"}})).await;
        make_cm(s, &owned_cm("kept", &[("parent", &parent, true)])).await;
        assert_eq!(delete_with(s, "parent", "Orphan").await.code, 200);
        gone(s, "parent").await;
        // Orphaned, not deleted.
        owners(s, "kept", 0).await;
    }

    pub(super) async fn graceful_deletion_bumps_generation_and_a_terminating_namespace_reports_its_content(s: &Side) {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "terminating-team"}});
        assert_eq!(s.apply("/api/v1/namespaces/terminating-team", "m", &ns).await.code, 201);
        let mut d = deployment(
            "web",
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!([{"name": "c", "image": "i"}]))}),
        );
        d["metadata"]["finalizers"] = json!(["example.com/hold"]);
        let created = s.apply("/apis/apps/v1/namespaces/terminating-team/deployments/web", "m", &d).await;
        assert_eq!(created.body["metadata"]["generation"], 1);
        assert_eq!(s.send("DELETE", "/api/v1/namespaces/terminating-team", "application/json", &Value::Null).await.code, 200);
        // The namespace controller deletes the Deployment: setting its deletionTimestamp bumps its
        // generation.
        s.eventually("/apis/apps/v1/namespaces/terminating-team/deployments/web", |a| a.body["metadata"]["generation"] == 2).await;
        let reported = |a: &peers::Answer| {
            a.body["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "NamespaceFinalizersRemaining" && c["status"] == "True"))
        };
        let team = s.eventually("/api/v1/namespaces/terminating-team", reported).await.body;
        let conditions = team["status"]["conditions"].as_array().unwrap();
        let remaining = conditions.iter().find(|c| c["type"] == "NamespaceContentRemaining").unwrap();
        assert_eq!(remaining["message"], "Some resources are remaining: deployments.apps has 1 resource instances");
        let finalizers = conditions.iter().find(|c| c["type"] == "NamespaceFinalizersRemaining").unwrap();
        assert_eq!(
            finalizers["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
        let refused = s
            .apply(
                "/api/v1/namespaces/terminating-team/configmaps/c",
                "m",
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            )
            .await;
        assert_eq!(refused.code, 403);
        assert_eq!(refused.body["details"]["causes"][0]["reason"], "NamespaceTerminating");
        let release = json!({"metadata": {"finalizers": null}});
        s.send("PATCH", "/apis/apps/v1/namespaces/terminating-team/deployments/web", "application/merge-patch+json", &release).await;
        s.eventually("/api/v1/namespaces/terminating-team", |a| a.code == 404).await;
    }

    pub(super) async fn deletecollection_answers_the_list_of_what_it_deleted(s: &Side) {
        make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})).await;
        let answer = s.send("DELETE", CONFIGMAPS, "application/json", &Value::Null).await;
        assert_eq!((answer.code, answer.body["kind"].clone()), (200, json!("ConfigMapList")));
        assert_eq!(answer.body["items"][0]["metadata"]["name"], "x");
    }

    pub(super) async fn strategic_merge_patch_merges_by_key_and_never_stores_its_directives(s: &Side) {
        let path = format!("{DEPLOYMENTS}/web");
        let containers = json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]}, {"name": "b", "image": "b:1"}]);
        let spec = json!({"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(containers)});
        assert_eq!(s.apply(&path, "m", &deployment("web", spec)).await.code, 201);
        let smp = "application/strategic-merge-patch+json";
        let patch = json!({"spec": {"template": {"spec": {
        // As kubectl computes it: the order of the list it wants, the changed items in that
        // order, deletions after them.
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
        "containers": [{"name": "c", "image": "c:1"}, {"name": "a", "image": "a:2"}, {"name": "b", "$patch": "delete"}]}}}});
        let answer = s.send("PATCH", &path, smp, &patch).await;
        assert_eq!(answer.code, 200, "{}", answer.body);
        let got = &answer.body["spec"]["template"]["spec"]["containers"];
        let names: Vec<&str> = got.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["c", "a"], "b deleted, c added, in $setElementOrder's order");
        assert_eq!(got[1]["env"], json!([{"name": "X", "value": "1"}]), "a merged by name, its env kept");
        assert_eq!(got[1]["image"], "a:2");
        assert!(!answer.body.to_string().contains('$'), "no directive is stored: {}", answer.body);

        // A list out of its `$setElementOrder` order (no client computes one) is refused.
        let disordered = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
        "containers": [{"name": "a", "image": "a:3"}, {"name": "c", "image": "c:2"}]}}}});
        let refused = s.send("PATCH", &path, smp, &disordered).await;
        assert_eq!(
            (refused.code, refused.body.get("reason"), refused.body["message"].clone()),
            (
                500,
                None,
                json!(
                    "The order in patch list:\n[map[image:a:3 name:a] map[image:c:2 name:c]]\n doesn't match $setElementOrder list:\n[map[name:c] map[name:a]]\n"
                )
            )
        );
        // `strategy` is `retainKeys`: what the list leaves out goes, without a null for it.
        let retain = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let answer = s.send("PATCH", &path, smp, &retain).await;
        assert_eq!(answer.body["spec"]["strategy"], json!({"type": "Recreate"}), "{}", answer.body);
        let labelled = s.send("PATCH", &path, smp, &json!({"metadata": {"labels": {"a": "1", "b": "2"}}})).await;
        assert_eq!(labelled.body["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        let replace = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
        let answer = s.send("PATCH", &path, smp, &replace).await;
        assert_eq!(answer.body["metadata"]["labels"], json!({"only": "this"}), "{}", answer.body);
        // Where the object has no such map, the patch's map is taken less its directives, and a
        // map carrying `$patch` is dropped whole (1.35's `removeDirectives`).
        let nothing = json!({"spec": {"template": {"spec": {"nodeSelector": {"$patch": "replace", "disk": "ssd"}}}}});
        let answer = s.send("PATCH", &path, smp, &nothing).await;
        assert_eq!(answer.body["spec"]["template"]["spec"].get("nodeSelector"), None, "{}", answer.body);

        s.crd(&widget_crd("smp.fidelity.test")).await;
        let path = format!("{}/w", widgets("smp.fidelity.test"));
        let w = json!({"apiVersion": "smp.fidelity.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}});
        assert_eq!(s.apply(&path, "m", &w).await.code, 201);
        let refused = s.send("PATCH", &path, smp, &json!({"spec": {"size": 2}})).await;
        assert_eq!(refused.code, 415, "custom resources take no strategic merge patch");
    }

    pub(super) async fn continue_pages_are_a_snapshot_and_exact_reads_the_past(s: &Side) {
        for name in ["a", "b", "c"] {
            make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}})).await;
        }
        let first = s.get(&format!("{CONFIGMAPS}?limit=1")).await;
        let list_rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let token = first["metadata"]["continue"].as_str().unwrap().to_string();
        // Changes after the first page are not seen by the following ones.
        s.send("DELETE", &format!("{CONFIGMAPS}/b"), "application/json", &Value::Null).await;
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"v": "2"}});
        s.apply(&format!("{CONFIGMAPS}/c"), "m", &changed).await;
        make_cm(s, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}})).await;
        let rest = s.get(&format!("{CONFIGMAPS}?limit=10&continue={token}")).await;
        let names: Vec<&str> = rest["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(rest["items"][1]["data"]["v"], "1");
        assert_eq!(rest["metadata"]["resourceVersion"], list_rv.as_str());

        let exact = s.get(&format!("{CONFIGMAPS}?resourceVersion={list_rv}&resourceVersionMatch=Exact")).await;
        assert_eq!(exact["items"].as_array().unwrap().len(), 3);
        assert_eq!(exact["metadata"]["resourceVersion"], list_rv.as_str());
        let refused = s.send("GET", &format!("{CONFIGMAPS}?resourceVersionMatch=Exact"), "application/json", &Value::Null).await;
        assert_eq!(
            (refused.code, refused.body["reason"].clone(), refused.body["message"].clone()),
            (
                422,
                json!("Invalid"),
                json!(
                    r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"#
                )
            )
        );
        // Only testkit's log can be compacted on demand (the real server's: every 5 minutes).
        if let Some(server) = s.testkit() {
            server.compact();
            let expired = server.client().unwrap();
            let request =
                http::Request::get(format!("/api/v1/namespaces/{}/configmaps?limit=10&continue={token}", s.ns())).body(Vec::new()).unwrap();
            let response = expired.send(request.map(kube::client::Body::from)).await.unwrap();
            assert_eq!(response.status().as_u16(), 410);
        }
    }

    pub(super) async fn secrets_are_selected_by_type(s: &Side) {
        for (name, type_) in [("a", "Opaque"), ("b", "kubernetes.io/tls")] {
            let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type_, "data": {"tls.crt": "", "tls.key": ""}});
            assert_eq!(s.apply(&format!("/api/v1/namespaces/{{ns}}/secrets/{name}"), "m", &secret).await.code, 201);
        }
        let tls = s.get("/api/v1/namespaces/{ns}/secrets?fieldSelector=type%3Dkubernetes.io%2Ftls").await;
        assert_eq!(tls["items"].as_array().unwrap().len(), 1);
        assert_eq!(tls["items"][0]["metadata"]["name"], "b");
        let refused = s.send("GET", "/api/v1/namespaces/{ns}/configmaps?fieldSelector=type%3Dx", "application/json", &Value::Null).await;
        assert_eq!(
            (refused.code, refused.body["message"].clone()),
            (400, json!(r#""type" is not a known field selector: only "metadata.name", "metadata.namespace""#))
        );
    }

    pub(super) async fn duplicate_fields_are_refused_under_strict_and_warned_about_otherwise(s: &Side) {
        let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","name":"d"},"data":{"a":"1"}}"#;
        for (query, code, needle) in [
            ("?fieldValidation=Strict", 400, r#"strict decoding error: duplicate field \"metadata.name\""#),
            ("", 201, r#"warning: 299 - "duplicate field \"metadata.name\"""#),
        ] {
            let answer = s.send_bytes("POST", &format!("{CONFIGMAPS}{query}"), "application/json", body.as_bytes().to_vec()).await;
            assert_eq!(answer.code, code, "{}", answer.body);
            let text = format!("{}\r\n\r\n{}", answer.head, answer.body).to_lowercase();
            assert!(text.contains(&needle.to_lowercase()), "{text}");
        }
    }

    pub(super) async fn managed_fields_list_appliers_before_updaters(s: &Side) {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        assert_eq!(s.send("POST", &format!("{CONFIGMAPS}?fieldManager=zz-updater"), "application/json", &cm).await.code, 201);
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}});
        let answer = s.apply(&format!("{CONFIGMAPS}/c"), "applier", &applied).await;
        let ops: Vec<&str> =
            answer.body["metadata"]["managedFields"].as_array().unwrap().iter().map(|e| e["operation"].as_str().unwrap()).collect();
        assert_eq!(ops, ["Apply", "Update"]);
    }

    pub(super) async fn a_custom_resource_without_status_subresource_bumps_generation_on_status(s: &Side) {
        let mut crd = widget_crd("gen.fidelity.test");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        s.crd(&crd).await;
        let path = format!("{}/w", widgets("gen.fidelity.test"));
        let mut w = json!({"apiVersion": "gen.fidelity.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}});
        assert_eq!(s.apply(&path, "m", &w).await.body["metadata"]["generation"], 1);
        w["status"] = json!({"ready": true});
        let answer = s.apply(&path, "m", &w).await;
        assert_eq!(answer.body["metadata"]["generation"], 2, "{}", answer.body);
    }

    /// A workload of `kind` whose template matches its selector, with `annotations`.
    fn workload(kind: &str, annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w", "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": pod_template_for("w")}})
    }

    fn pod_template_for(app: &str) -> Value {
        json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    pub(super) async fn a_deployment_generation_follows_its_annotations_and_other_workloads_only_their_spec(s: &Side) {
        // 1.35's strategies: a Deployment's PrepareForUpdate compares spec and annotations (they are
        // copied to its ReplicaSets); StatefulSet, DaemonSet and ReplicaSet compare spec only.
        for (plural, kind, bumped) in [
            ("deployments", "Deployment", 2),
            ("statefulsets", "StatefulSet", 1),
            ("daemonsets", "DaemonSet", 1),
            ("replicasets", "ReplicaSet", 1),
        ] {
            let path = format!("/apis/apps/v1/namespaces/{{ns}}/{plural}/w");
            let created = s.apply(&path, "m", &workload(kind, json!({"a": "1"}))).await;
            assert_eq!((created.code, created.body["metadata"]["generation"].clone()), (201, json!(1)), "{kind}: {}", created.body);
            let annotated = s.apply(&path, "m", &workload(kind, json!({"a": "2"}))).await;
            assert_eq!(annotated.body["metadata"]["generation"], bumped, "{kind}: an annotation change: {}", annotated.body);
            let mut labelled = workload(kind, json!({"a": "2"}));
            labelled["metadata"]["labels"] = json!({"tier": "web"});
            let answer = s.apply(&path, "m", &labelled).await;
            assert_eq!(answer.body["metadata"]["generation"], bumped, "{kind}: a label change bumps nothing: {}", answer.body);
        }
    }

    pub(super) async fn generation_is_carried_by_the_kinds_whose_strategies_set_it(s: &Side) {
        // Per kind: its path, the object, a change of what its strategy compares, and the
        // generations after the create, a label change and that change (None: it has none).
        let ns = s.ns().to_string();
        let named = |kind: &str| format!("{ns}-{kind}");
        let cases = [
            (
                "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/h".to_string(),
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}, "maxReplicas": 2}}),
                ("/spec/maxReplicas", json!(3)),
                [None, None, None],
            ),
            (
                "/api/v1/namespaces/{ns}/podtemplates/t".to_string(),
                json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": pod_template_for("t")}),
                ("/template/spec/containers/0/image", json!("j")),
                [Some(1), Some(1), Some(2)],
            ),
            (
                "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/e".to_string(),
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "e"}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.1.2.3"]}]}),
                ("/endpoints/0/addresses/0", json!("10.1.2.4")),
                [Some(1), Some(2), Some(3)],
            ),
            (
                format!("/apis/networking.k8s.io/v1/ingressclasses/{}", named("ic")),
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": named("ic")},
                "spec": {"controller": "example.com/ingress", "parameters": {"apiGroup": "example.com", "kind": "P", "name": "a"}}}),
                ("/spec/parameters/name", json!("b")),
                [Some(1), Some(1), Some(2)],
            ),
            (
                format!("/apis/scheduling.k8s.io/v1/priorityclasses/{}", named("pc")),
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": named("pc")}, "value": 1000,
                "description": "a"}),
                ("/description", json!("b")),
                [Some(1), Some(1), Some(1)],
            ),
            (
                format!("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{}", named("vwc")),
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": named("vwc")},
                "webhooks": [{"name": "w.example.com", "clientConfig": {"url": "https://example.com/x"}, "admissionReviewVersions": ["v1"],
                    "sideEffects": "None", "failurePolicy": "Ignore"}]}),
                ("/webhooks/0/failurePolicy", json!("Fail")),
                [Some(1), Some(1), Some(2)],
            ),
        ];
        for (path, obj, (pointer, value), want) in cases {
            let generation = |a: &peers::Answer| a.body["metadata"]["generation"].as_i64();
            let created = s.apply(&path, "m", &obj).await;
            assert_eq!((created.code, generation(&created)), (201, want[0]), "{path}: {}", created.body);
            let mut labelled = obj.clone();
            labelled["metadata"]["labels"] = json!({"tier": "x"});
            let answer = s.apply(&path, "m", &labelled).await;
            assert_eq!(generation(&answer), want[1], "{path}, a label change: {}", answer.body);
            let mut changed = labelled;
            *changed.pointer_mut(pointer).unwrap() = value;
            let answer = s.apply(&path, "m", &changed).await;
            assert_eq!(generation(&answer), want[2], "{path}, {pointer}: {}", answer.body);
        }
    }

    pub(super) async fn field_selectors_are_refused_in_each_kinds_own_words(s: &Side) {
        let refused = |answer: &peers::Answer| (answer.code, answer.body["reason"].clone(), answer.body["message"].clone());
        // A kind without a field label conversion of its own: runtime's default.
        let deployments = s.send("GET", &format!("{DEPLOYMENTS}?fieldSelector=spec.foo%3Dx"), "application/json", &Value::Null).await;
        assert_eq!(
            refused(&deployments),
            (400, json!("BadRequest"), json!(r#""spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace""#))
        );
        assert_eq!(
            s.send("GET", &format!("{DEPLOYMENTS}?fieldSelector=metadata.name%3Dx"), "application/json", &Value::Null).await.code,
            200
        );
        // Kinds with their own: core's words, the Job's, events.k8s.io's names for the same fields.
        let pods = s.send("GET", "/api/v1/namespaces/{ns}/pods?fieldSelector=spec.foo%3Dx", "application/json", &Value::Null).await;
        assert_eq!(refused(&pods), (400, json!("BadRequest"), json!("field label not supported: spec.foo")));
        let events =
            s.send("GET", "/api/v1/namespaces/{ns}/events?fieldSelector=regarding.name%3Dx", "application/json", &Value::Null).await;
        assert_eq!(refused(&events), (400, json!("BadRequest"), json!("field label not supported: regarding.name")));
        let new_events = s
            .send("GET", "/apis/events.k8s.io/v1/namespaces/{ns}/events?fieldSelector=regarding.name%3Dx", "application/json", &Value::Null)
            .await;
        assert_eq!(new_events.code, 200, "{}", new_events.body);
        let jobs = s.send("GET", "/apis/batch/v1/namespaces/{ns}/jobs?fieldSelector=spec.foo%3Dx", "application/json", &Value::Null).await;
        assert_eq!(refused(&jobs), (400, json!("BadRequest"), json!(r#"field label "spec.foo" not supported for Job"#)));
        let namespaces = s.send("GET", "/api/v1/namespaces?fieldSelector=metadata.namespace%3Dx", "application/json", &Value::Null).await;
        assert_eq!(refused(&namespaces), (400, json!("BadRequest"), json!("field label not supported: metadata.namespace")));
    }

    pub(super) async fn an_apply_to_a_custom_resource_status_records_the_labels_it_sent(s: &Side) {
        let group = "status.fidelity.test";
        let mut crd = widget_crd(group);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        crd["spec"]["versions"][0]["subresources"] = json!({"status": {}});
        s.crd(&crd).await;
        let path = format!("{}/w", widgets(group));
        let w = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w", "labels": {"app": "w"}}, "spec": {"size": 1}});
        assert_eq!(s.apply(&path, "m", &w).await.code, 201);
        let status = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w", "labels": {"app": "w", "extra": "x"}},
        "status": {"ready": true}});
        let answer = s.apply(&format!("{path}/status"), "reporter", &status).await;
        assert_eq!(answer.code, 200, "{}", answer.body);
        // The labels keep their values; the reporter's entry names the labels it sent all the same.
        assert_eq!(answer.body["metadata"]["labels"], json!({"app": "w"}));
        let entries = answer.body["metadata"]["managedFields"].as_array().unwrap();
        let reporter = entries.iter().find(|e| e["manager"] == "reporter").unwrap();
        assert_eq!(reporter["subresource"], "status");
        assert_eq!(reporter["fieldsV1"], json!({"f:metadata": {"f:labels": {"f:app": {}, "f:extra": {}}}, "f:status": {"f:ready": {}}}));
    }

    pub(super) async fn a_put_naming_another_object_and_an_apply_of_another_version_are_bad_requests(s: &Side) {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "real"}, "data": {"a": "1"}});
        assert_eq!(s.apply(&format!("{CONFIGMAPS}/real"), "m", &cm).await.code, 201);
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}, "data": {"a": "2"}});
        let put = s.send("PUT", &format!("{CONFIGMAPS}/real"), "application/json", &other).await;
        assert_eq!(
            (put.code, put.body["reason"].clone(), put.body["message"].clone()),
            (400, json!("BadRequest"), json!("the name of the object (other) does not match the name on the URL (real)"))
        );
        let mut d = workload("Deployment", json!({}));
        d["apiVersion"] = json!("apps/v2");
        let applied = s.apply(&format!("{DEPLOYMENTS}/w"), "m", &d).await;
        assert_eq!(
            (applied.code, applied.body["reason"].clone(), applied.body["message"].clone()),
            (400, json!("BadRequest"), json!("invalid object type: apps/v2, Kind=Deployment"))
        );
    }
}
