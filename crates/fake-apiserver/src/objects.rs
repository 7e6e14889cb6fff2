//! The verbs on objects (get, list, create, update, patch, apply, delete) and the object
//! semantics behind them: uid, timestamps, resourceVersion, generation, status scoping,
//! finalizers, namespace termination and CRDs becoming served resources.

use serde_json::{Value, json};

use super::defaults;
use super::deletion::{add_finalizer, collect_garbage, finalize_namespace, remove};
use super::fieldset::Scope;
use super::meta;
use super::query::Query;
use super::registry::{self, Generation, ResourceType};
use super::smp;
use super::ssa::{self, Writer};
use super::status::{ApiError, ApiResult};
use super::store::{Key, State};
use super::target::{Target, Written, answer_shape, present};
use super::validation::{self, Body, Mode};

pub fn get(state: &State, t: &Target) -> ApiResult<Value> {
    let name = t.name();
    let mut obj = state.store.get(&t.key(name)).map(|o| present(o, t)).ok_or_else(|| t.not_found(name))?;
    answer_shape(&mut obj, t);
    Ok(obj)
}

/// Who writes: `?fieldManager=`, else the User-Agent's product (its printable characters), as
/// the real server defaults it, else `unknown` (a request without a User-Agent).
pub fn manager(q: &Query, user_agent: &str) -> String {
    match q.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => {
            let product: String = user_agent.split('/').next().unwrap_or_default().chars().filter(|c| !c.is_control()).take(128).collect();
            if product.is_empty() { "unknown".to_owned() } else { product }
        }
    }
}

pub fn create(state: &mut State, t: &Target, mut obj: Value, q: &Query, user_agent: &str) -> ApiResult<Written> {
    if t.subresource.is_some() {
        return Err(ApiError::method_not_allowed(format!(
            "create is not supported on {}/{}",
            t.rt.plural,
            t.subresource.as_deref().unwrap_or_default()
        )));
    }
    check_kind(&mut obj, t)?;
    set_namespace(&mut obj, t)?;
    field_validation(state, &mut obj, t, q, Body::Object)?;
    if meta::name(&obj).is_empty() {
        match obj["metadata"]["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() => obj["metadata"]["name"] = Value::String(format!("{prefix}{}", meta::name_suffix())),
            _ => {
                return Err(ApiError::invalid(
                    &t.rt.kind,
                    &t.rt.group,
                    "",
                    &[("metadata.name", "Required value: name or generateName is required".into())],
                ));
            }
        }
    }
    let name = meta::name(&obj).to_string();
    let key = t.key(&name);
    check_namespace_accepts(state, t, &name)?;
    if state.store.get(&key).is_some() {
        return Err(ApiError::already_exists(&t.rt.group, &t.rt.plural, &name));
    }
    ssa::strip_out_of_scope(&mut obj, if t.scope() == Scope::Main { Scope::Main } else { Scope::All });
    defaults::apply(&mut obj, &t.rt, &t.version)?;
    let writer = Writer { manager: &manager(q, user_agent), rt: &t.rt, version: &t.version, scope: t.scope() };
    ssa::record_update(None, &mut obj, &writer);
    insert_new(state, t, key, obj, q.dry_run())
}

/// Stores a new object with the metadata the server owns; shared by create and apply-create.
fn insert_new(state: &mut State, t: &Target, key: Key, mut obj: Value, dry_run: bool) -> ApiResult<Written> {
    let m = &mut obj["metadata"];
    m["uid"] = Value::String(meta::new_uid());
    m["creationTimestamp"] = Value::String(meta::now());
    if let Some(meta) = m.as_object_mut() {
        for field in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink"] {
            meta.remove(field);
        }
    }
    if t.rt.generation.is_some() {
        obj["metadata"]["generation"] = json!(1);
    }
    defaults_on_create(&mut obj, &t.rt);
    defaults::on_create(state, &mut obj, &t.rt);
    validate(None, &obj, t, &key.name)?;
    state.warnings.extend(validation::warnings(&obj, &t.rt));
    if is_crd(&t.rt) {
        registry::from_crd(&obj).map_err(|causes| ApiError::invalid(&t.rt.kind, &t.rt.group, &key.name, &causes))?;
        // What the create answers before the CRD controllers accept the names.
        obj["status"] = json!({"acceptedNames": {"kind": "", "plural": ""}, "conditions": null, "storedVersions": stored_versions(&obj)});
    }
    if dry_run {
        return Ok(Written { code: 201, body: present(&obj, t), changed: false });
    }
    let stored = state.store.put(key.clone(), obj);
    let body = present(&stored, t);
    if is_crd(&t.rt) {
        establish(state, &key);
    }
    Ok(Written { code: 201, body, changed: true })
}

/// What the real server defaults on create that clients read back.
fn defaults_on_create(obj: &mut Value, rt: &ResourceType) {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
            obj["status"] = json!({"phase": "Active"});
        }
        ("", "Secret") if obj["type"].as_str().is_none_or(str::is_empty) => obj["type"] = json!("Opaque"),
        // The Service strategy's PrepareForCreate resets status (its load balancer is a struct
        // Go always encodes).
        ("", "Service") => obj["status"] = json!({"loadBalancer": {}}),
        // The StorageObjectInUseProtection admission plugin.
        ("", "PersistentVolumeClaim") => add_finalizer(obj, "kubernetes.io/pvc-protection"),
        ("", "PersistentVolume") => add_finalizer(obj, "kubernetes.io/pv-protection"),
        // The DaemonSet strategy's PrepareForCreate: templateGeneration 1, kept in this
        // annotation for old clients (bumped on template changes: not modelled).
        ("apps", "DaemonSet") => obj["metadata"]["annotations"]["deprecated.daemonset.template.generation"] = json!("1"),
        _ => {}
    }
}

pub fn update(state: &mut State, t: &Target, mut obj: Value, q: &Query, user_agent: &str) -> ApiResult<Written> {
    check_kind(&mut obj, t)?;
    set_namespace(&mut obj, t)?;
    field_validation(state, &mut obj, t, q, Body::Object)?;
    let name = t.name().to_string();
    if meta::name(&obj) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name(&obj)
        )));
    }
    let key = t.key(&name);
    let old = state.store.get(&key).cloned().ok_or_else(|| t.not_found(&name))?;
    match meta::resource_version(&obj) {
        Some(rv) if Some(rv) != meta::resource_version(&old) => return Err(ApiError::stale(&t.rt.group, &t.rt.plural, &name)),
        None if t.rt.custom => {
            return Err(ApiError::invalid(
                &t.rt.kind,
                &t.rt.group,
                &name,
                &[("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update".into())],
            ));
        }
        _ => {}
    }
    let writer = Writer { manager: &manager(q, user_agent), rt: &t.rt, version: &t.version, scope: t.scope() };
    let mut new = scoped(&old, obj, t.scope());
    defaults::on_update(&old, &mut new, &t.rt);
    defaults::apply(&mut new, &t.rt, &t.version)?;
    ssa::record_update(Some(&old), &mut new, &writer);
    finish_update(state, t, key, &old, new, q.dry_run())
}

/// Applies the endpoint's scope: the main resource keeps the stored status, `/status` keeps
/// everything but status; system metadata always comes from the stored object.
fn scoped(old: &Value, mut new: Value, scope: Scope) -> Value {
    match scope {
        Scope::All => {}
        Scope::Main => match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        },
        Scope::Status => {
            let mut base = old.clone();
            match new.get("status") {
                Some(s) => base["status"] = s.clone(),
                None => {
                    if let Some(m) = base.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            base["metadata"]["managedFields"] = new["metadata"]["managedFields"].clone();
            if base["metadata"]["managedFields"].is_null()
                && let Some(m) = base["metadata"].as_object_mut()
            {
                m.remove("managedFields");
            }
            new = base;
        }
    }
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
        "name",
        "namespace",
    ] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    new
}

/// Bumps generation, stores (or finishes a pending deletion) and runs the CRD and namespace
/// hooks. A write that changes nothing is not stored and keeps the resourceVersion.
fn finish_update(state: &mut State, t: &Target, key: Key, old: &Value, mut new: Value, dry_run: bool) -> ApiResult<Written> {
    if is_crd(&t.rt) {
        registry::from_crd(&new).map_err(|causes| ApiError::invalid(&t.rt.kind, &t.rt.group, &key.name, &causes))?;
    }
    validate(Some(old), &new, t, &key.name)?;
    state.warnings.extend(validation::warnings(&new, &t.rt));
    // Without a status subresource, status is part of what generation tracks.
    let status_apart = t.rt.has_status(&t.version);
    let meta_map = |o: &Value, field: &str| o["metadata"].get(field).cloned().filter(|a| a.as_object().is_some_and(|a| !a.is_empty()));
    let changed = |field: &str| meta_map(old, field) != meta_map(&new, field);
    let bumped = match t.rt.generation {
        None | Some(Generation::OnCreate) => false,
        Some(Generation::Spec) => spec_of(old, status_apart) != spec_of(&new, status_apart),
        Some(Generation::SpecAndAnnotations) => spec_of(old, status_apart) != spec_of(&new, status_apart) || changed("annotations"),
        Some(Generation::SpecAndLabels) => spec_of(old, status_apart) != spec_of(&new, status_apart) || changed("labels"),
    };
    if bumped {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(generation);
    }
    if new == *old {
        return Ok(Written { code: 200, body: present(old, t), changed: false });
    }
    if dry_run {
        return Ok(Written { code: 200, body: present(&new, t), changed: false });
    }
    if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() && !is_namespace(&t.rt) {
        state.store.overwrite(&key, new);
        let gone = remove(state, &key).unwrap_or(Value::Null);
        collect_garbage(state);
        return Ok(Written { code: 200, body: present(&gone, t), changed: true });
    }
    let deleting = meta::is_deleting(&new);
    let stored = state.store.put(key.clone(), new);
    if deleting {
        collect_garbage(state);
    }
    if is_crd(&t.rt) {
        establish(state, &key);
    }
    if is_namespace(&t.rt) {
        finalize_namespace(state, &key.name);
    }
    let body = state.store.get(&key).map(|o| present(o, t)).unwrap_or_else(|| present(&stored, t));
    Ok(Written { code: 200, body, changed: true })
}

fn spec_of(obj: &Value, status_apart: bool) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        if status_apart {
            m.remove("status");
        }
    }
    o
}

pub fn patch(state: &mut State, t: &Target, body: &[u8], content_type: &str, q: &Query, user_agent: &str) -> ApiResult<Written> {
    let name = t.name().to_string();
    let key = t.key(&name);
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media == "application/apply-patch+yaml" {
        return apply(state, t, body, q);
    }
    let old = state.store.get(&key).cloned().ok_or_else(|| t.not_found(&name))?;
    let current = present(&old, t);
    let patched = match media {
        "application/json-patch+json" => {
            let ops: json_patch::Patch =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            let mut doc = current.clone();
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::new(422, "Invalid", format!("the server rejected our request due to an error in our request: {e}"))
            })?;
            doc
        }
        "application/merge-patch+json" => {
            let p: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
            let mut doc = current.clone();
            json_patch::merge(&mut doc, &p);
            doc
        }
        // Custom resources have no patch strategies: the real server refuses strategic merge.
        "application/strategic-merge-patch+json" if !t.rt.custom => {
            let p: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid strategic merge patch: {e}")))?;
            let mut doc = current.clone();
            smp::apply(&mut doc, &p, t.rt.version(&t.version).and_then(|v| v.root()))?;
            doc
        }
        _ => {
            let strategic = if t.rt.custom { "" } else { "application/strategic-merge-patch+json, " };
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, {strategic}application/apply-patch+yaml"
                ),
            ));
        }
    };
    let mut patched = patched;
    field_validation(state, &mut patched, t, q, Body::Patch)?;
    if meta::resource_version(&patched) != meta::resource_version(&current) {
        return Err(ApiError::stale(&t.rt.group, &t.rt.plural, &name));
    }
    let writer = Writer { manager: &manager(q, user_agent), rt: &t.rt, version: &t.version, scope: t.scope() };
    let mut new = scoped(&old, patched, t.scope());
    new["apiVersion"] = old["apiVersion"].clone();
    defaults::on_update(&old, &mut new, &t.rt);
    defaults::apply(&mut new, &t.rt, &t.version)?;
    ssa::record_update(Some(&old), &mut new, &writer);
    finish_update(state, t, key, &old, new, q.dry_run())
}

fn apply(state: &mut State, t: &Target, body: &[u8], q: &Query) -> ApiResult<Written> {
    let mut applied = parse_apply_body(body)?;
    let name = t.name().to_string();
    let Some(manager) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
        return Err(ApiError::bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set"));
    };
    check_applied_kind(&applied, t)?;
    check_kind(&mut applied, t)?;
    if applied["metadata"].get("managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    // The real server names the object by the configuration as sent (no namespace unless it
    // has one) when it fails to type it or to convert the merged result.
    field_validation(state, &mut applied, t, q, Body::Apply)?;
    defaults::check_applied(&applied, &t.rt, &t.version)?;
    set_namespace(&mut applied, t)?;
    // The API server checks the name after merging the applied configuration into the live
    // object, which keeps the live name: an apply without `metadata.name` (kube-lease-manager's
    // lease renewals) updates an existing object and fails only when it would create one.
    if meta::name(&applied).is_empty() && state.store.get(&t.key(&name)).is_some() {
        if !applied["metadata"].is_object() {
            applied["metadata"] = json!({});
        }
        applied["metadata"]["name"] = json!(name);
    }
    if meta::name(&applied) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name(&applied)
        )));
    }
    let key = t.key(&name);
    let writer = Writer { manager, rt: &t.rt, version: &t.version, scope: t.scope() };
    let force = q.flag("force");
    match state.store.get(&key).cloned() {
        None => {
            if t.scope() == Scope::Status {
                return Err(t.not_found(&name));
            }
            check_namespace_accepts(state, t, &name)?;
            let mut skeleton = json!({"apiVersion": applied["apiVersion"], "kind": applied["kind"], "metadata": {"name": name}});
            if t.rt.namespaced {
                skeleton["metadata"]["namespace"] = json!(key.namespace);
            }
            let mut obj = ssa::apply(&skeleton, &applied, &writer, force)?;
            defaults::apply(&mut obj, &t.rt, &t.version)?;
            insert_new(state, t, key, obj, q.dry_run())
        }
        Some(old) => {
            if let Some(rv) = meta::resource_version(&applied)
                && Some(rv) != meta::resource_version(&old)
            {
                return Err(ApiError::stale(&t.rt.group, &t.rt.plural, &name));
            }
            let mut new = ssa::apply(&old, &applied, &writer, force)?;
            new["apiVersion"] = old["apiVersion"].clone();
            let mut new = scoped(&old, new, t.scope());
            defaults::on_update(&old, &mut new, &t.rt);
            defaults::apply(&mut new, &t.rt, &t.version)?;
            finish_update(state, t, key, &old, new, q.dry_run())
        }
    }
}

fn parse_apply_body(body: &[u8]) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("apply patch is not UTF-8"))?;
    serde_saphyr::from_str::<Value>(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// Serves a stored CRD and sets its `NamesAccepted` and `Established` conditions (a write of
/// its own, as the real CRD controllers do it after the create).
fn establish(state: &mut State, key: &Key) {
    let Some(crd) = state.store.get(key).cloned() else { return };
    let Ok(rt) = registry::from_crd(&crd) else { return };
    state.registry.set_custom(&rt.group.clone(), &rt.plural.clone(), Some(rt));
    if meta::is_deleting(&crd) {
        return;
    }
    let now = meta::now();
    let condition = |type_: &str, reason: &str, message: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let stored_versions = stored_versions(&crd);
    let mut accepted = crd["spec"]["names"].clone();
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(crd["spec"]["names"]["kind"].as_str().unwrap_or_default().to_lowercase());
    }
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{}List", crd["spec"]["names"]["kind"].as_str().unwrap_or_default()));
    }
    let status = json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": accepted,
        "storedVersions": stored_versions,
    });
    let current = &crd["status"];
    let same = current["acceptedNames"] == status["acceptedNames"]
        && current["storedVersions"] == status["storedVersions"]
        && current["conditions"].as_array().is_some_and(|c| c.len() == 2);
    if !same {
        let mut updated = crd;
        updated["status"] = status;
        state.store.put(key.clone(), updated);
    }
}

fn is_crd(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

fn is_namespace(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "namespaces"
}

/// Fills a missing apiVersion/kind and rejects a mismatched one.
/// An apply configuration of another group, version or kind than the endpoint's is refused by
/// the field manager's version check, in its words (`invalid object type: apps/v2,
/// Kind=Deployment`; the core group is empty before the slash).
fn check_applied_kind(applied: &Value, t: &Target) -> ApiResult<()> {
    let (Some(api_version), Some(kind)) = (applied["apiVersion"].as_str(), applied["kind"].as_str()) else { return Ok(()) };
    if api_version.is_empty() || kind.is_empty() || (api_version == t.rt.api_version(&t.version) && kind == t.rt.kind) {
        return Ok(());
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Err(ApiError::bad_request(format!("invalid object type: {group}/{version}, Kind={kind}")))
}

fn check_kind(obj: &mut Value, t: &Target) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request must be an object"));
    }
    let want_av = t.rt.api_version(&t.version);
    match obj["apiVersion"].as_str() {
        None | Some("") => obj["apiVersion"] = json!(want_av),
        Some(av) if av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match obj["kind"].as_str() {
        None | Some("") => obj["kind"] = json!(t.rt.kind),
        Some(kind) if kind != t.rt.kind => {
            return Err(ApiError::bad_request(format!("the kind in the data ({kind}) does not match the expected kind ({})", t.rt.kind)));
        }
        _ => {}
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    Ok(())
}

fn set_namespace(obj: &mut Value, t: &Target) -> ApiResult<()> {
    if !t.rt.namespaced {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        return Ok(());
    }
    let url_ns = t.namespace.clone().unwrap_or_default();
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() && ns != url_ns => {
            Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"))
        }
        _ => {
            obj["metadata"]["namespace"] = json!(url_ns);
            Ok(())
        }
    }
}

fn check_namespace_accepts(state: &State, t: &Target, name: &str) -> ApiResult<()> {
    if !t.rt.namespaced {
        return Ok(());
    }
    let ns = t.namespace.clone().unwrap_or_default();
    let key = Key { group: String::new(), plural: "namespaces".into(), namespace: String::new(), name: ns.clone() };
    match state.store.get(&key) {
        None => Err(ApiError::not_found("", "namespaces", &ns)),
        Some(n) if meta::is_deleting(n) => Err(ApiError::namespace_terminating(&t.rt.group, &t.rt.plural, name, &ns)),
        Some(_) => Ok(()),
    }
}

/// Field validation of a request body: unknown fields dropped (Warn adds a `Warning` header for
/// each) or refused (Strict).
fn field_validation(state: &mut State, obj: &mut Value, t: &Target, q: &Query, body: Body) -> ApiResult<()> {
    let options = match body {
        // A PUT names its object in the path, a POST does not.
        Body::Object if t.name.is_some() => "UpdateOptions",
        Body::Object => "CreateOptions",
        Body::Patch | Body::Apply => "PatchOptions",
    };
    let mode = Mode::parse(q.get("fieldValidation"), options)?;
    let duplicates = std::mem::take(&mut state.duplicates);
    let warnings = validation::unknown_fields(obj, &t.rt, &t.version, mode, body, &duplicates)?;
    state.warnings.extend(warnings);
    Ok(())
}

/// What the real server validates before storing: names and labels, a custom resource's
/// structural schema, and on updates the immutable fields and the finalizer rule.
fn validate(old: Option<&Value>, new: &Value, t: &Target, name: &str) -> ApiResult<()> {
    let mut errors = validation::metadata_errors(new, &t.rt);
    if let Some(old) = old {
        // 1.35's `rest.BeforeUpdate` checks the metadata update rules and then the kind's
        // strategy checks them again: a new finalizer on an object being deleted is a cause
        // twice (the message, an aggregate, names it once).
        let finalizers = validation::finalizer_errors(old, new);
        errors.extend(finalizers.iter().cloned());
        errors.extend(finalizers);
        errors.extend(validation::immutable_errors(old, new, &t.rt));
    }
    if t.rt.custom {
        errors.extend(validation::schema_errors(new, &t.rt, &t.version));
    } else if t.scope() == Scope::Main {
        errors.extend(validation::workload_errors(new, &t.rt));
    }
    if errors.is_empty() {
        return Ok(());
    }
    let causes: Vec<(&str, String)> = errors.iter().map(|(f, m)| (f.as_str(), m.clone())).collect();
    Err(ApiError::invalid(&t.rt.kind, &t.rt.group, name, &causes))
}

/// A CRD's `status.storedVersions` as the CRD controllers first write it: the version with
/// `storage: true`.
fn stored_versions(crd: &Value) -> Vec<Value> {
    crd["spec"]["versions"].as_array().into_iter().flatten().filter(|v| v["storage"] == json!(true)).map(|v| v["name"].clone()).collect()
}
