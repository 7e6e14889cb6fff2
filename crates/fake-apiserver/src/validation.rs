//! Validation as the real server runs it on writes: field validation (`fieldValidation=Strict`
//! / `Warn` / `Ignore`: unknown fields refused, warned about and dropped, or dropped; for CRDs
//! that is pruning), a CRD's structural schema (types, enums, ranges, lengths, patterns,
//! required → 422 Invalid), object names and labels, and the fields that may not change.

use serde_json::{Map, Value};

use super::registry::ResourceType;
use super::schema::{ListType, Node};
use super::status::{ApiError, ApiResult};

/// `?fieldValidation=`: the default is Warn, as since 1.27.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ignore,
    Warn,
    Strict,
}

impl Mode {
    /// # Errors
    /// 422 for a value other than the three, as 1.35 validates the request's `options`
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
    pub fn parse(v: Option<&str>, options: &str) -> ApiResult<Mode> {
        match v {
            None | Some("") | Some("Warn") => Ok(Mode::Warn),
            Some("Ignore") => Ok(Mode::Ignore),
            Some("Strict") => Ok(Mode::Strict),
            Some(other) => Err(ApiError::invalid_options(
                options,
                "fieldValidation",
                &format!("Unsupported value: \"{other}\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""),
            )),
        }
    }
}

/// How a request body reached the server: the error wording differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// A create or update body.
    Object,
    /// A JSON, merge or strategic merge patch (the patched object is decoded).
    Patch,
    /// A server-side apply configuration.
    Apply,
}

/// Removes the fields the kind's schema does not declare (apiVersion, kind and metadata are
/// always declared; metadata is ObjectMeta) and returns them as `spec.foo` paths, or refuses
/// them under Strict.
///
/// # Errors
/// 400 under Strict when a field is unknown.
pub fn unknown_fields(
    obj: &mut Value,
    rt: &ResourceType,
    version: &str,
    mode: Mode,
    body: Body,
    duplicates: &[String],
) -> ApiResult<Vec<String>> {
    let mut found = Found::default();
    let (namespace, name) = (
        obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
        obj["metadata"]["name"].as_str().unwrap_or_default().to_string(),
    );
    if let (Some(root), Some(map)) = (rt.version(version).and_then(|v| v.root()), obj.as_object_mut()) {
        prune_object(map, root, rt.custom, &At { strict: String::new(), smd: String::new() }, &mut found, true);
    }
    // An apply configuration is converted to the kind's typed schema whatever the mode: an
    // unknown field fails it, with structured-merge-diff's message and a 500.
    if body == Body::Apply && !(found.unknown.is_empty() && found.mistyped.is_empty()) {
        let mut errors: Vec<String> = found.mistyped;
        errors.extend(found.unknown.iter().map(|f| format!("{}: field not declared in schema", f.smd)));
        let errors = if errors.len() == 1 { errors[0].clone() } else { format!("errors:\n  {}", errors.join("\n  ")) };
        let gv = if rt.group.is_empty() { format!("/{version}") } else { format!("{}/{version}", rt.group) };
        return Err(ApiError::untyped(format!(
            "failed to create typed patch object ({namespace}/{name}; {gv}, Kind={}): {errors}",
            rt.kind
        )));
    }
    let mut problems: Vec<String> = duplicates.iter().map(|f| format!("duplicate field \"{f}\"")).collect();
    problems.extend(found.unknown.iter().map(|f| format!("unknown field \"{}\"", f.strict)));
    if problems.is_empty() || mode != Mode::Strict {
        return Ok(if mode == Mode::Warn { problems } else { Vec::new() });
    }
    let message = match body {
        Body::Apply => String::new(),
        _ => {
            let list = problems.join(", ");
            let strict = format!("strict decoding error: {list}");
            if body == Body::Object {
                format!("{} in version \"{version}\" cannot be handled as a {}: {strict}", rt.kind, rt.kind)
            } else {
                strict
            }
        }
    };
    Err(ApiError::bad_request(message))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

/// Whether fields not in `properties` are unknown here. A built-in type is closed when it
/// declares properties; a CRD's object is closed unless it preserves unknown fields or is a map.
fn closed(node: Node<'_>, custom: bool) -> bool {
    if node.preserves_unknown() || node.additional().is_some() {
        return false;
    }
    if custom { node.types().contains(&"object") || node.has_properties() } else { node.has_properties() }
}

/// Where an unknown field is: `spec.containers[0].foo` as the strict decoder says it, and
/// `.spec.containers[name="c"].foo` as structured-merge-diff does.
struct At {
    strict: String,
    smd: String,
}

/// What a walk of a body against the kind's schema found: fields it does not declare, and (as
/// structured-merge-diff words them) scalars of the wrong type where it wants a number.
#[derive(Default)]
struct Found {
    unknown: Vec<At>,
    mistyped: Vec<String>,
}

fn prune_object(map: &mut Map<String, Value>, node: Node<'_>, custom: bool, at: &At, found: &mut Found, top: bool) {
    let embedded = top || node.embedded_resource();
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        let here = At { strict: join(&at.strict, &k), smd: format!("{}.{k}", at.smd) };
        if embedded && (k == "apiVersion" || k == "kind") {
            continue;
        }
        if embedded && k == "metadata" {
            if let (Some(meta), Some(object_meta)) = (map.get_mut(&k), Node::definition("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"))
            {
                prune_value(meta, object_meta, false, &here, found);
            }
            continue;
        }
        match node.field(&k) {
            Some(child) => {
                if let Some(v) = map.get_mut(&k) {
                    prune_value(v, child, custom, &here, found);
                }
            }
            None if closed(node, custom) => {
                map.remove(&k);
                found.unknown.push(here);
            }
            None => {}
        }
    }
}

fn prune_value(v: &mut Value, node: Node<'_>, custom: bool, at: &At, found: &mut Found) {
    let numeric = matches!(node.types().as_slice(), ["integer"] | ["number"]);
    let go_type = match v {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Object(_) => "map[string]interface {}",
        Value::Array(_) => "[]interface {}",
        Value::Null | Value::Number(_) => "",
    };
    if numeric && !go_type.is_empty() {
        found.mistyped.push(format!("{}: expected numeric (int or float), got {go_type}", at.smd));
        return;
    }
    match v {
        Value::Object(map) => prune_object(map, node, custom, at, found, false),
        Value::Array(items) => {
            let Some(element) = node.items() else { return };
            let list_type = node.list_type();
            for (i, item) in items.iter_mut().enumerate() {
                let smd = match &list_type {
                    ListType::Map(keys) => {
                        let parts: Vec<String> = keys.iter().filter_map(|k| item.get(k).map(|v| format!("{k}={v}"))).collect();
                        format!("{}[{}]", at.smd, parts.join(","))
                    }
                    ListType::Set => format!("{}[={item}]", at.smd),
                    ListType::Atomic => format!("{}[{i}]", at.smd),
                };
                prune_value(item, element, custom, &At { strict: format!("{}[{i}]", at.strict), smd }, found);
            }
        }
        _ => {}
    }
}

/// A CRD's structural schema on a custom resource: every violation as `(field, message)`.
pub fn schema_errors(obj: &Value, rt: &ResourceType, version: &str) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    if let Some(root) = rt.version(version).and_then(|v| v.root()) {
        check_value(obj, root, "", &mut errors, true);
    }
    errors
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn quoted(v: &Value) -> String {
    v.to_string()
}

fn check_value(v: &Value, node: Node<'_>, path: &str, errors: &mut Vec<(String, String)>, top: bool) {
    let types = node.types();
    let actual = json_type(v);
    if v.is_null() {
        if !top && node.v.get("nullable").and_then(Value::as_bool) != Some(true) && !types.is_empty() {
            errors.push((path.to_string(), format!("Invalid value: \"null\": {path} in body must be of type {}: \"null\"", types[0])));
        }
        return;
    }
    let type_ok = types.is_empty() || types.contains(&actual) || (actual == "integer" && types.contains(&"number"));
    if !type_ok {
        errors.push((path.to_string(), format!("Invalid value: \"{actual}\": {path} in body must be of type {}: \"{actual}\"", types[0])));
        return;
    }
    if let Some(Value::Array(allowed)) = node.v.get("enum")
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(quoted).collect();
        errors.push((path.to_string(), format!("Unsupported value: {}: supported values: {}", quoted(v), list.join(", "))));
    }
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(min) = node.v.get("minimum").and_then(Value::as_f64) {
                let exclusive = node.v.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
                if x < min || (exclusive && x == min) {
                    let op = if exclusive { "greater than" } else { "greater than or equal to" };
                    errors.push((path.to_string(), format!("Invalid value: {n}: {path} in body should be {op} {}", number(min))));
                }
            }
            if let Some(max) = node.v.get("maximum").and_then(Value::as_f64) {
                let exclusive = node.v.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
                if x > max || (exclusive && x == max) {
                    let op = if exclusive { "less than" } else { "less than or equal to" };
                    errors.push((path.to_string(), format!("Invalid value: {n}: {path} in body should be {op} {}", number(max))));
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = node.v.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                errors.push((path.to_string(), format!("Too long: may not be more than {max} bytes")));
            }
            if let Some(min) = node.v.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                errors
                    .push((path.to_string(), format!("Invalid value: {}: {path} in body should be at least {min} chars long", quoted(v))));
            }
            if let Some(pattern) = node.v.get("pattern").and_then(Value::as_str)
                && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
            {
                errors.push((path.to_string(), format!("Invalid value: {}: {path} in body should match '{pattern}'", quoted(v))));
            }
        }
        Value::Array(items) => {
            if let Some(max) = node.v.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push((path.to_string(), format!("Too many: {}: must have at most {max} items", items.len())));
            }
            if let Some(min) = node.v.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                errors.push((path.to_string(), format!("Invalid value: {}: {path} in body should have at least {min} items", items.len())));
            }
            if let Some(element) = node.items() {
                for (i, item) in items.iter().enumerate() {
                    check_value(item, element, &format!("{path}[{i}]"), errors, false);
                }
            }
        }
        Value::Object(map) => {
            for req in node.required() {
                if !map.contains_key(&req) {
                    errors.push((join(path, &req), "Required value".to_string()));
                }
            }
            for (k, child) in map {
                if top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(child_node) = node.field(k) {
                    check_value(child, child_node, &join(path, k), errors, false);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 { format!("{}", x as i64) } else { x.to_string() }
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Go's `IsDNS1123Subdomain`: at most 253 characters of dot-separated labels; unlike a DNS
/// label alone, a part may be longer than 63.
fn is_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// `prefix/name` keys of labels and annotations.
fn qualified_name_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_subdomain(p)
    {
        return Some(format!("prefix part {SUBDOMAIN_MSG}"));
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 bytes".into());
    }
    (!is_name_part(name)).then(|| NAME_PART_MSG.to_string())
}

/// A workload's selector (apps Deployment, ReplicaSet, DaemonSet, StatefulSet): required, and
/// it must select the pod template's labels — the two errors the real server reports, in its
/// order and words.
pub fn workload_errors(obj: &Value, rt: &ResourceType) -> Vec<(String, String)> {
    if (rt.group.as_str(), rt.kind.as_str()) == ("", "Pod") {
        return container_errors(obj.get("spec"), "spec");
    }
    if rt.group != "apps" || !matches!(rt.kind.as_str(), "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") {
        return Vec::new();
    }
    let mut errors = Vec::new();
    let selector = obj.get("spec").and_then(|s| s.get("selector")).filter(|s| s.is_object());
    if selector.is_none() {
        errors.push(("spec.selector".to_owned(), "Required value".to_owned()));
    }
    let empty = serde_json::Map::new();
    let labels = obj.pointer("/spec/template/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
    if !selector.is_some_and(|s| selects(s, labels)) {
        let shown = serde_json::to_string(labels).unwrap_or_default();
        errors.push((
            "spec.template.metadata.labels".to_owned(),
            format!("Invalid value: {shown}: `selector` does not match template `labels`"),
        ));
    }
    errors.extend(container_errors(obj.pointer("/spec/template/spec"), "spec.template.spec"));
    errors
}

/// Every container (init, regular) must name an image.
fn container_errors(pod_spec: Option<&Value>, at: &str) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in pod_spec.and_then(|s| s.get(list)).and_then(Value::as_array).into_iter().flatten().enumerate() {
            if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                errors.push((format!("{at}.{list}[{i}].image"), "Required value".to_owned()));
            }
        }
    }
    errors
}

/// Whether a LabelSelector (`matchLabels`, `matchExpressions`) selects `labels`. An empty
/// selector selects nothing here, as for workloads.
fn selects(selector: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_none_or(|e| e.is_empty()) {
        return false;
    }
    let labels_ok = match_labels.into_iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = expressions.into_iter().flatten().all(|e| {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let value = labels.get(key).and_then(Value::as_str);
        match e["operator"].as_str().unwrap_or_default() {
            "In" => value.is_some_and(|v| values.contains(&v)),
            "NotIn" => value.is_none_or(|v| !values.contains(&v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// Names, label keys and values, annotation keys: every violation as `(field, message)`.
pub fn metadata_errors(obj: &Value, rt: &ResourceType) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let path_segment = rt.group == "rbac.authorization.k8s.io";
    if path_segment {
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            errors.push(("metadata.name".into(), format!("Invalid value: \"{name}\": may not contain '/' or '%'")));
        }
    } else {
        let (ok, msg) = match (rt.group.as_str(), rt.kind.as_str()) {
            ("", "Namespace") => (is_dns_label(name), LABEL_MSG),
            ("", "Service") => (is_dns_label(name) && name.as_bytes().first().is_some_and(u8::is_ascii_lowercase), DNS1035_MSG),
            _ => (is_subdomain(name), SUBDOMAIN_MSG),
        };
        if !name.is_empty() && !ok {
            errors.push(("metadata.name".into(), format!("Invalid value: \"{name}\": {msg}")));
        }
    }
    for (k, v) in obj["metadata"]["labels"].as_object().into_iter().flatten() {
        if let Some(msg) = qualified_name_error(k) {
            errors.push(("metadata.labels".into(), format!("Invalid value: \"{k}\": {msg}")));
        }
        let value = v.as_str().unwrap_or_default();
        if !value.is_empty() && !is_name_part(value) {
            let msg = if value.len() > 63 { "must be no more than 63 bytes" } else { LABEL_VALUE_MSG };
            errors.push(("metadata.labels".into(), format!("Invalid value: \"{value}\": {msg}")));
        }
    }
    for k in obj["metadata"]["annotations"].as_object().into_iter().flat_map(|m| m.keys()) {
        if let Some(msg) = qualified_name_error(k) {
            errors.push(("metadata.annotations".into(), format!("Invalid value: \"{k}\": {msg}")));
        }
    }
    errors
}

/// A Go-printed LabelSelector, as immutability errors quote it.
fn go_selector(v: &Value) -> String {
    // 1.35's field errors print a struct value as Go's JSON: fields in declaration order, map
    // keys sorted, empty ones omitted.
    let mut fields = Vec::new();
    if let Some(labels) = v["matchLabels"].as_object().filter(|m| !m.is_empty()) {
        let mut sorted: Vec<(&String, &Value)> = labels.iter().collect();
        sorted.sort_by_key(|(k, _)| *k);
        let labels: Vec<String> = sorted.iter().map(|(k, v)| format!("{}:{v}", Value::from(k.as_str()))).collect();
        fields.push(format!("\"matchLabels\":{{{}}}", labels.join(",")));
    }
    if let Some(exprs) = v["matchExpressions"].as_array().filter(|a| !a.is_empty()) {
        let exprs: Vec<String> = exprs
            .iter()
            .map(|e| {
                let values = e["values"].as_array().filter(|a| !a.is_empty()).map(|a| format!(",\"values\":{}", Value::Array(a.clone())));
                format!("{{\"key\":{},\"operator\":{}{}}}", e["key"], e["operator"], values.unwrap_or_default())
            })
            .collect();
        fields.push(format!("\"matchExpressions\":[{}]", exprs.join(",")));
    }
    format!("{{{}}}", fields.join(","))
}

/// Fields an update may not change, as `(field, message)`.
pub fn immutable_errors(old: &Value, new: &Value, rt: &ResourceType) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let mut push = |field: &str, message: String| errors.push((field.to_string(), message));
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "ConfigMap" | "Secret") if old["immutable"] == Value::Bool(true) => {
            let fields: &[&str] = if rt.kind == "Secret" { &["data", "type"] } else { &["data", "binaryData"] };
            for field in fields {
                if old.get(*field) != new.get(*field) {
                    push(field, "Forbidden: field is immutable when `immutable` is set".into());
                }
            }
            if new["immutable"] != Value::Bool(true) {
                push("immutable", "Forbidden: field is immutable when `immutable` is set".into());
            }
        }
        ("", "Secret") if old["type"] != new["type"] => {
            push("type", format!("Invalid value: {}: field is immutable", new["type"]));
        }
        ("apps", "Deployment" | "DaemonSet" | "ReplicaSet") if old["spec"]["selector"] != new["spec"]["selector"] => {
            push("spec.selector", format!("Invalid value: {}: field is immutable", go_selector(&new["spec"]["selector"])));
        }
        ("apps", "StatefulSet") => {
            let mut a = old["spec"].clone();
            let mut b = new["spec"].clone();
            for field in [
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
                "revisionHistoryLimit",
            ] {
                for s in [&mut a, &mut b] {
                    if let Some(m) = s.as_object_mut() {
                        m.remove(field);
                    }
                }
            }
            if a != b {
                push(
                    "spec",
                    "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into(),
                );
            }
        }
        ("batch", "Job") => {
            if old["spec"]["selector"] != new["spec"]["selector"] {
                push("spec.selector", format!("Invalid value: {}: field is immutable", go_selector(&new["spec"]["selector"])));
            }
            if old["spec"]["template"] != new["spec"]["template"] {
                push("spec.template", "Invalid value: core.PodTemplateSpec{...}: field is immutable".into());
            }
        }
        ("", "Service") => {
            let (a, b) = (&old["spec"]["clusterIP"], &new["spec"]["clusterIP"]);
            if a.is_string() && b.is_string() && a != b && old["spec"]["type"] != "ExternalName" && new["spec"]["type"] != "ExternalName" {
                push("spec.clusterIPs[0]", format!("Invalid value: {b}: may not change once set"));
            }
        }
        ("", "PersistentVolumeClaim") => {
            let strip = |v: &Value| {
                let mut s = v["spec"].clone();
                if let Some(m) = s.as_object_mut() {
                    m.remove("volumeAttributesClassName");
                    if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut) {
                        r.remove("requests");
                    }
                    m.remove("volumeName");
                }
                s
            };
            if strip(old) != strip(new) {
                push(
                    "spec",
                    "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
                        .into(),
                );
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            for field in ["parameters", "provisioner", "reclaimPolicy", "volumeBindingMode"] {
                if old.get(field) != new.get(field) {
                    push(field, format!("Forbidden: updates to {field} are forbidden."));
                }
            }
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") if old["roleRef"] != new["roleRef"] => {
            push("roleRef", format!("Invalid value: {}: cannot change roleRef", new["roleRef"]));
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") if old["spec"]["scope"] != new["spec"]["scope"] => {
            push("spec.scope", format!("Invalid value: {}: field is immutable", new["spec"]["scope"]));
        }
        _ => {}
    }
    errors
}

/// The finalizer rule of objects being deleted: none may be added.
pub fn finalizer_errors(old: &Value, new: &Value) -> Vec<(String, String)> {
    if old["metadata"]["deletionTimestamp"].is_null() {
        return Vec::new();
    }
    let before: Vec<&Value> = old["metadata"]["finalizers"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let added: Vec<String> =
        new["metadata"]["finalizers"].as_array().into_iter().flatten().filter(|f| !before.contains(f)).map(|f| format!("{f}")).collect();
    if added.is_empty() {
        return Vec::new();
    }
    vec![(
        "metadata.finalizers".into(),
        format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            added.join(", ")
        ),
    )]
}

/// Fields a JSON body names twice (`metadata.name`), as the real strict decoder reports them;
/// serde_json keeps the last, as the real decoder does.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = serde::de::DeserializeSeed::deserialize(Dups { path: String::new(), found: &mut found }, &mut de);
    found
}

struct Dups<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Dups<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Dups<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq.next_element_seed(Dups { path: format!("{}[{i}]", self.path), found: &mut *self.found })?.is_some() {
            i += 1;
        }
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            if !seen.insert(key) {
                self.found.push(path.clone());
            }
            map.next_value_seed(Dups { path, found: &mut *self.found })?;
        }
        Ok(())
    }
}

/// Warnings the kind's 1.35 strategy gives on create and update: a `kubernetes.io/tls` Secret
/// whose data holds no certificate or key PEM block (as Go's `tls.X509KeyPair` words it; the
/// real server also warns of a pair that does not parse or match, which testkit does not check).
pub fn warnings(obj: &Value, rt: &ResourceType) -> Vec<String> {
    if rt.custom || !rt.group.is_empty() || rt.kind != "Secret" || obj["type"] != "kubernetes.io/tls" {
        return Vec::new();
    }
    let decoded = |field: &str| {
        let text = obj["data"][field].as_str().unwrap_or_default();
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let (cert, key) = (pem_blocks(&decoded("tls.crt")), pem_blocks(&decoded("tls.key")));
    let missing = |blocks: &[String], input: &str, wanted: &dyn Fn(&str) -> bool, name: &str| {
        if blocks.iter().any(|b| wanted(b)) {
            None
        } else if blocks.is_empty() {
            Some(format!("tls: failed to find any PEM data in {input} input"))
        } else {
            Some(format!(
                "tls: failed to find {name} PEM block in {input} input after skipping PEM blocks of the following types: [{}]",
                blocks.join(" ")
            ))
        }
    };
    let certificate = missing(&cert, "certificate", &|b| b == "CERTIFICATE", "\"CERTIFICATE\"");
    let private = missing(&key, "key", &|b| b == "PRIVATE KEY" || b.ends_with(" PRIVATE KEY"), "PEM block with \"PRIVATE KEY\"");
    certificate.or(private).into_iter().collect()
}

/// The types of the PEM blocks in `text` that Go's `pem.Decode` finds: a `BEGIN` line, a
/// base64 body, the matching `END` line.
fn pem_blocks(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("-----BEGIN ") {
        rest = &rest[at + "-----BEGIN ".len()..];
        let Some(end_of_type) = rest.find("-----") else { break };
        let kind = rest[..end_of_type].to_string();
        let end = format!("-----END {kind}-----");
        let Some(close) = rest.find(&end) else { continue };
        let body: String = rest[end_of_type + 5..close].chars().filter(|c| !c.is_whitespace()).collect();
        if base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &body).is_ok() {
            found.push(kind);
        }
        rest = &rest[close + end.len()..];
    }
    found
}
