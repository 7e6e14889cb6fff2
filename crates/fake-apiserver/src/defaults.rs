//! What the real server fills in on every write of the kinds a cluster stack ships, as 1.35's
//! defaulting functions and registry strategies do it (what `kubectl get -o yaml` or a
//! server-side diff shows next to the fields the client sent): workload and pod template
//! defaults, Service IP allocation and port defaults, Secret `stringData` folded into `data`,
//! the namespace name label, and a CRD's structural-schema `default`s.

use base64::Engine;
use serde_json::{Value, json};

use super::registry::ResourceType;
use super::schema::Node;
use super::status::{ApiError, ApiResult};
use super::store::State;

/// Sets `obj[key]` when it is missing or null.
fn or_insert(obj: &mut Value, key: &str, value: Value) {
    if let Some(map) = obj.as_object_mut()
        && map.get(key).is_none_or(Value::is_null)
    {
        map.insert(key.to_string(), value);
    }
}

/// Defaults applied to every stored version of an object (create, update, patch, apply).
///
/// A built-in object comes back without any `null` field, as from the real server (Go decodes
/// a `null` into the zero value, which it does not encode): neither one sent nor one that
/// defaulting's indexing made (serde_json's `obj["absent"]` inserts a `null`).
///
/// # Errors
/// 400 for a Secret whose `data` is not base64, as decoding the real request fails.
pub fn apply(obj: &mut Value, rt: &ResourceType, version: &str) -> ApiResult<()> {
    let defaulted = set_defaults(obj, rt, version);
    if !rt.custom {
        super::fieldset::drop_nulls(obj);
    }
    // ObjectMeta's lists and maps are `omitempty`: an emptied one is not stored, for custom
    // resources too (their metadata is typed).
    if let Some(m) = obj["metadata"].as_object_mut() {
        for field in ["finalizers", "ownerReferences", "labels", "annotations"] {
            let empty = match m.get(field) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(field);
            }
        }
    }
    defaulted
}

fn set_defaults(obj: &mut Value, rt: &ResourceType, version: &str) -> ApiResult<()> {
    if rt.custom {
        if let Some(root) = rt.version(version).and_then(|v| v.root()) {
            schema_defaults(obj, root);
        }
        return Ok(());
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => {
            let name = obj["metadata"]["name"].clone();
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
        }
        ("", "Secret") => secret(obj)?,
        ("", "Service") => service(&mut obj["spec"]),
        ("", "PersistentVolumeClaim") => {
            or_insert(&mut obj["spec"], "volumeMode", json!("Filesystem"));
            or_insert(obj, "status", json!({"phase": "Pending"}));
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            // autoscaling/v2's defaults (the stored version): one replica at least, scaled on
            // 80% CPU when no metric is named; status `desiredReplicas` has no omitempty.
            or_insert(&mut obj["spec"], "minReplicas", json!(1));
            if obj["spec"]["metrics"].as_array().is_none_or(Vec::is_empty) {
                obj["spec"]["metrics"] =
                    json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]);
            }
            or_insert(obj, "status", json!({"desiredReplicas": 0}));
        }
        ("networking.k8s.io", "IngressClass") if obj["spec"]["parameters"].is_object() => {
            or_insert(&mut obj["spec"]["parameters"], "scope", json!("Cluster"));
        }
        ("scheduling.k8s.io", "PriorityClass") => or_insert(obj, "preemptionPolicy", json!("PreemptLowerPriority")),
        ("", "Pod") => pod_spec(&mut obj["spec"]),
        ("", "PodTemplate") => pod_spec(&mut obj["template"]["spec"]),
        ("", "ReplicationController") => {
            or_insert(&mut obj["spec"], "replicas", json!(1));
            pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        ("apps", "Deployment") => {
            let spec = &mut obj["spec"];
            or_insert(spec, "replicas", json!(1));
            or_insert(spec, "revisionHistoryLimit", json!(10));
            or_insert(spec, "progressDeadlineSeconds", json!(600));
            or_insert(spec, "strategy", json!({}));
            or_insert(&mut spec["strategy"], "type", json!("RollingUpdate"));
            if spec["strategy"]["type"] == "RollingUpdate" {
                or_insert(&mut spec["strategy"], "rollingUpdate", json!({}));
                or_insert(&mut spec["strategy"]["rollingUpdate"], "maxSurge", json!("25%"));
                or_insert(&mut spec["strategy"]["rollingUpdate"], "maxUnavailable", json!("25%"));
            }
            pod_spec(&mut spec["template"]["spec"]);
            or_insert(obj, "status", json!({}));
        }
        ("apps", "ReplicaSet") => {
            or_insert(&mut obj["spec"], "replicas", json!(1));
            pod_spec(&mut obj["spec"]["template"]["spec"]);
            // `status.replicas` has no omitempty.
            or_insert(obj, "status", json!({"replicas": 0}));
        }
        ("apps", "DaemonSet") => {
            let spec = &mut obj["spec"];
            or_insert(spec, "revisionHistoryLimit", json!(10));
            or_insert(spec, "updateStrategy", json!({}));
            or_insert(&mut spec["updateStrategy"], "type", json!("RollingUpdate"));
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                or_insert(&mut spec["updateStrategy"], "rollingUpdate", json!({}));
                or_insert(&mut spec["updateStrategy"]["rollingUpdate"], "maxUnavailable", json!(1));
                or_insert(&mut spec["updateStrategy"]["rollingUpdate"], "maxSurge", json!(0));
            }
            pod_spec(&mut spec["template"]["spec"]);
            or_insert(
                obj,
                "status",
                json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}),
            );
        }
        ("apps", "StatefulSet") => {
            let spec = &mut obj["spec"];
            or_insert(spec, "replicas", json!(1));
            or_insert(spec, "revisionHistoryLimit", json!(10));
            or_insert(spec, "podManagementPolicy", json!("OrderedReady"));
            // Optional since 1.34, without omitempty: stored as "".
            or_insert(spec, "serviceName", json!(""));
            or_insert(spec, "updateStrategy", json!({}));
            or_insert(&mut spec["updateStrategy"], "type", json!("RollingUpdate"));
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                or_insert(&mut spec["updateStrategy"], "rollingUpdate", json!({}));
                or_insert(&mut spec["updateStrategy"]["rollingUpdate"], "partition", json!(0));
            }
            or_insert(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
            or_insert(&mut spec["persistentVolumeClaimRetentionPolicy"], "whenDeleted", json!("Retain"));
            or_insert(&mut spec["persistentVolumeClaimRetentionPolicy"], "whenScaled", json!("Retain"));
            if let Some(templates) = spec["volumeClaimTemplates"].as_array_mut() {
                for t in templates {
                    or_insert(t, "apiVersion", json!("v1"));
                    or_insert(t, "kind", json!("PersistentVolumeClaim"));
                    or_insert(&mut t["spec"], "volumeMode", json!("Filesystem"));
                    or_insert(t, "status", json!({"phase": "Pending"}));
                }
            }
            pod_spec(&mut spec["template"]["spec"]);
            or_insert(obj, "status", json!({"availableReplicas": 0, "replicas": 0}));
        }
        ("batch", "Job") => job_spec(&mut obj["spec"]),
        ("batch", "CronJob") => {
            let spec = &mut obj["spec"];
            or_insert(spec, "concurrencyPolicy", json!("Allow"));
            or_insert(spec, "suspend", json!(false));
            or_insert(spec, "successfulJobsHistoryLimit", json!(3));
            or_insert(spec, "failedJobsHistoryLimit", json!(1));
            job_spec(&mut spec["jobTemplate"]["spec"]);
        }
        ("storage.k8s.io", "StorageClass") => {
            or_insert(obj, "reclaimPolicy", json!("Delete"));
            or_insert(obj, "volumeBindingMode", json!("Immediate"));
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            for s in obj["subjects"].as_array_mut().into_iter().flatten() {
                let group = if s["kind"] == "ServiceAccount" { "" } else { "rbac.authorization.k8s.io" };
                or_insert(s, "apiGroup", json!(group));
            }
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration") => {
            let mutating = rt.kind.starts_with("Mutating");
            for w in obj["webhooks"].as_array_mut().into_iter().flatten() {
                or_insert(w, "failurePolicy", json!("Fail"));
                or_insert(w, "matchPolicy", json!("Equivalent"));
                or_insert(w, "namespaceSelector", json!({}));
                or_insert(w, "objectSelector", json!({}));
                or_insert(w, "timeoutSeconds", json!(10));
                if mutating {
                    or_insert(w, "reinvocationPolicy", json!("Never"));
                }
                if w["clientConfig"]["service"].is_object() {
                    or_insert(&mut w["clientConfig"]["service"], "port", json!(443));
                }
                for r in w["rules"].as_array_mut().into_iter().flatten() {
                    or_insert(r, "scope", json!("*"));
                }
            }
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            or_insert(&mut obj["spec"], "conversion", json!({"strategy": "None"}));
        }
        _ => {}
    }
    Ok(())
}

/// Allocations only a create makes: a Service's cluster IP and node ports, a Job's selector and
/// the labels its pods are found by.
pub fn on_create(state: &State, obj: &mut Value, rt: &ResourceType) {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Service") => allocate_service(state, &mut obj["spec"]),
        ("batch", "Job") if obj["spec"]["manualSelector"] != json!(true) => {
            let uid = obj["metadata"]["uid"].clone();
            let name = obj["metadata"]["name"].clone();
            obj["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
            let labels = &mut obj["spec"]["template"]["metadata"]["labels"];
            labels["batch.kubernetes.io/controller-uid"] = uid.clone();
            labels["batch.kubernetes.io/job-name"] = name.clone();
            labels["controller-uid"] = uid;
            labels["job-name"] = name;
        }
        _ => {}
    }
}

/// On update, what the client left out of a Service keeps its allocated values (as the real
/// registry's `patchAllocatedValues` does).
pub fn on_update(old: &Value, new: &mut Value, rt: &ResourceType) {
    if rt.group.is_empty() && rt.kind == "Service" {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if new["spec"].get(field).is_none_or(Value::is_null)
                && let Some(v) = old["spec"].get(field)
            {
                new["spec"][field] = v.clone();
            }
        }
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        for p in new["spec"]["ports"].as_array_mut().into_iter().flatten() {
            if p.get("nodePort").is_none()
                && let Some(n) = old_ports.iter().find(|o| o["port"] == p["port"]).and_then(|o| o.get("nodePort"))
            {
                p["nodePort"] = n.clone();
            }
        }
    }
}

fn secret(obj: &mut Value) -> ApiResult<()> {
    or_insert(obj, "type", json!("Opaque"));
    if let Some(at) = secret_data_error(obj) {
        // The real decoder's message names the offset, never the content.
        return Err(ApiError::bad_request(format!(
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte {at}"
        )));
    }
    let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else { return Ok(()) };
    if !obj["data"].is_object() {
        obj["data"] = json!({});
    }
    for (k, v) in string_data {
        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or_default()));
    }
    Ok(())
}

fn service(spec: &mut Value) {
    or_insert(spec, "type", json!("ClusterIP"));
    or_insert(spec, "sessionAffinity", json!("None"));
    let type_ = spec["type"].as_str().unwrap_or_default().to_string();
    if type_ != "ExternalName" {
        or_insert(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if type_ == "NodePort" || type_ == "LoadBalancer" {
        or_insert(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if type_ == "LoadBalancer" {
        or_insert(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    for p in spec["ports"].as_array_mut().into_iter().flatten() {
        or_insert(p, "protocol", json!("TCP"));
        let port = p["port"].clone();
        or_insert(p, "targetPort", port);
    }
}

fn allocate_service(state: &State, spec: &mut Value) {
    let type_ = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    let services: Vec<&Value> = state.store.list("", "services", None).map(|(_, o)| o).collect();
    if type_ != "ExternalName" {
        if spec["clusterIP"].as_str().is_none_or(str::is_empty) {
            let used: Vec<&str> = services.iter().filter_map(|s| s["spec"]["clusterIP"].as_str()).collect();
            let ip = (1..=65_000u32).map(|n| format!("10.96.{}.{}", n / 250, n % 250 + 1)).find(|ip| !used.contains(&ip.as_str()));
            spec["clusterIP"] = json!(ip.unwrap_or_else(|| "10.96.255.254".into()));
        }
        let ip = spec["clusterIP"].clone();
        or_insert(spec, "clusterIPs", json!([ip]));
        or_insert(spec, "ipFamilies", json!(["IPv4"]));
        or_insert(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
    if type_ == "NodePort" || type_ == "LoadBalancer" {
        let used: Vec<i64> = services
            .iter()
            .flat_map(|s| s["spec"]["ports"].as_array().into_iter().flatten().filter_map(|p| p["nodePort"].as_i64()))
            .collect();
        let mut next = 30_000;
        for p in spec["ports"].as_array_mut().into_iter().flatten() {
            if p.get("nodePort").is_none() {
                while used.contains(&next) {
                    next += 1;
                }
                p["nodePort"] = json!(next);
                next += 1;
            }
        }
    }
}

fn job_spec(spec: &mut Value) {
    or_insert(spec, "parallelism", json!(1));
    or_insert(spec, "completions", json!(1));
    or_insert(spec, "backoffLimit", json!(6));
    or_insert(spec, "completionMode", json!("NonIndexed"));
    or_insert(spec, "suspend", json!(false));
    or_insert(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    pod_spec(&mut spec["template"]["spec"]);
}

/// SetDefaults_PodSpec and its containers, probes and volumes.
fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    or_insert(spec, "dnsPolicy", json!("ClusterFirst"));
    or_insert(spec, "restartPolicy", json!("Always"));
    or_insert(spec, "terminationGracePeriodSeconds", json!(30));
    or_insert(spec, "securityContext", json!({}));
    or_insert(spec, "schedulerName", json!("default-scheduler"));
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            container(c);
        }
    }
    for v in spec["volumes"].as_array_mut().into_iter().flatten() {
        for source in ["configMap", "secret", "downwardAPI", "projected"] {
            if v[source].is_object() {
                or_insert(&mut v[source], "defaultMode", json!(420));
            }
        }
        if v["hostPath"].is_object() {
            or_insert(&mut v["hostPath"], "type", json!(""));
        }
    }
}

fn container(c: &mut Value) {
    let image = c["image"].as_str().unwrap_or_default();
    let tag = image.rsplit('/').next().and_then(|last| last.split_once(':')).map(|(_, t)| t);
    let pull = if image.contains('@') || tag.is_some_and(|t| t != "latest") { "IfNotPresent" } else { "Always" };
    or_insert(c, "imagePullPolicy", json!(pull));
    or_insert(c, "terminationMessagePath", json!("/dev/termination-log"));
    or_insert(c, "terminationMessagePolicy", json!("File"));
    or_insert(c, "resources", json!({}));
    for p in c["ports"].as_array_mut().into_iter().flatten() {
        or_insert(p, "protocol", json!("TCP"));
    }
    for e in c["env"].as_array_mut().into_iter().flatten() {
        if e["valueFrom"]["fieldRef"].is_object() {
            or_insert(&mut e["valueFrom"]["fieldRef"], "apiVersion", json!("v1"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let p = &mut c[probe];
        if !p.is_object() {
            continue;
        }
        or_insert(p, "timeoutSeconds", json!(1));
        or_insert(p, "periodSeconds", json!(10));
        or_insert(p, "successThreshold", json!(1));
        or_insert(p, "failureThreshold", json!(3));
        if p["httpGet"].is_object() {
            or_insert(&mut p["httpGet"], "scheme", json!("HTTP"));
        }
    }
    if let Some(m) = c.as_object_mut()
        && m.get("ports").is_some_and(|p| p.as_array().is_some_and(Vec::is_empty))
    {
        m.remove("ports");
    }
}

/// A CRD's structural-schema `default`s, applied where a field is missing (objects are walked
/// where they exist, so a default inside an absent object does not create it).
pub fn schema_defaults(v: &mut Value, node: Node<'_>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = node.v.get("properties") {
                for (k, prop) in props {
                    let child = Node::new(prop);
                    if !map.contains_key(k)
                        && let Some(d) = child.default()
                    {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if let (Some(child), Some(value)) = (node.field(&k), map.get_mut(&k)) {
                    schema_defaults(value, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(element) = node.items() {
                for item in items {
                    schema_defaults(item, element);
                }
            }
        }
        _ => {}
    }
}

/// An apply configuration the real server cannot convert once merged: a Secret's `data` that is
/// not base64 fails as a 500, naming the object as the configuration names it.
///
/// # Errors
/// 500 without a reason, in the real words.
pub fn check_applied(applied: &Value, rt: &ResourceType, version: &str) -> ApiResult<()> {
    if rt.custom || !rt.group.is_empty() || rt.kind != "Secret" {
        return Ok(());
    }
    let Some(at) = secret_data_error(applied) else { return Ok(()) };
    let (namespace, name) =
        (applied["metadata"]["namespace"].as_str().unwrap_or_default(), applied["metadata"]["name"].as_str().unwrap_or_default());
    Err(ApiError::untyped(format!(
        "failed to convert new object ({namespace}/{name}; /{version}, Kind=Secret) to proper version: unable to convert unstructured object to /{version}, Kind=Secret: error decoding from json: illegal base64 data at input byte {at}"
    )))
}

/// The offset Go's standard base64 decoder reports for the first `data` value it cannot
/// decode: the first byte outside the alphabet, or the start of an incomplete last quantum.
fn secret_data_error(obj: &Value) -> Option<usize> {
    obj["data"].as_object()?.values().find_map(|v| go_base64_error(v.as_str().unwrap_or_default()))
}

fn go_base64_error(text: &str) -> Option<usize> {
    let alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
    let bytes = text.as_bytes();
    let mut quantum_start = 0;
    let mut in_quantum = 0;
    let mut padding = false;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\r' | b'\n' => continue,
            b'=' if in_quantum >= 2 => padding = true,
            _ if alphabet(b) && !padding => {}
            _ => return Some(i),
        }
        if in_quantum == 0 {
            quantum_start = i;
        }
        in_quantum = (in_quantum + 1) % 4;
        if in_quantum == 0 {
            padding = false;
        }
    }
    (in_quantum != 0).then_some(quantum_start)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_errors_name_the_offset_go_names() {
        // The real server's answers: `not base64!` at byte 3, `abc` at byte 0.
        for (text, want) in
            [("not base64!", Some(3)), ("abc", Some(0)), ("YWJj", None), ("YQ==", None), ("YWJjZA", Some(4)), ("Y===", Some(1))]
        {
            assert_eq!(super::go_base64_error(text), want, "{text}");
        }
    }
}
