//! Deletion as the real control plane carries it out: propagation policies and the garbage
//! collector (Background deletes dependents once their owners are gone, Foreground keeps the
//! owner with the `foregroundDeletion` finalizer until its blocking dependents are gone, Orphan
//! strips the references), finalizers, the generation bump of a graceful deletion, and the
//! namespace controller (content deleted, conditions while some remains). The controllers' work
//! is done synchronously within the request that triggers it.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::fieldset::Scope;
use super::meta;
use super::query::{Query, Selection};
use super::ssa::{Writer, record_update};
use super::status::{self, ApiError, ApiResult};
use super::store::{Key, State};
use super::target::{Target, Written, list_item, present};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// `propagationPolicy` of a DeleteOptions body or query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Background,
    Foreground,
    Orphan,
}

fn policy(opts: &Value, q: &Query) -> ApiResult<Policy> {
    let named = opts["propagationPolicy"].as_str().or_else(|| q.get("propagationPolicy"));
    match named {
        Some("Background") => Ok(Policy::Background),
        Some("Foreground") => Ok(Policy::Foreground),
        Some("Orphan") => Ok(Policy::Orphan),
        None if opts["orphanDependents"] == json!(true) || q.get("orphanDependents") == Some("true") => Ok(Policy::Orphan),
        None => Ok(Policy::Background),
        Some(other) => Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ),
        )),
    }
}

pub fn delete(state: &mut State, t: &Target, body: &[u8], q: &Query) -> ApiResult<Written> {
    let name = t.name.clone().unwrap_or_default();
    let key = t.key(&name);
    let old = state.store.get(&key).cloned().ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.plural, &name))?;
    let opts: Value = if body.is_empty() { json!({}) } else { serde_json::from_slice(body).unwrap_or_else(|_| json!({})) };
    let pre = &opts["preconditions"];
    if pre["uid"].as_str().is_some_and(|uid| Some(uid) != old["metadata"]["uid"].as_str())
        || pre["resourceVersion"].as_str().is_some_and(|rv| Some(rv) != meta::resource_version(&old))
    {
        return Err(ApiError::stale(&t.rt.group, &t.rt.plural, &name));
    }
    let policy = policy(&opts, q)?;
    let dry_run = q.dry_run() || opts["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All"));
    if dry_run {
        let mut would = present(&old, t);
        if !meta::finalizers(&old).is_empty() || is_namespace(&key) || policy != Policy::Background {
            would["metadata"]["deletionTimestamp"] = json!(meta::now());
        }
        return Ok(Written { code: 200, body: would, changed: false });
    }
    if meta::is_deleting(&old) {
        return Ok(Written { code: 200, body: present(&old, t), changed: false });
    }
    if is_namespace(&key) {
        let mut ns = old.clone();
        ns["metadata"]["deletionTimestamp"] = json!(meta::now());
        ns["status"]["phase"] = json!("Terminating");
        let marked = state.store.put(key.clone(), ns);
        // The DELETE answers the namespace as it marked it: what the namespace controller then
        // does (its conditions, the finalizer) is for later reads, as on the real control plane.
        let body = present(&marked, t);
        for k in state.store.keys_in_namespace(&name) {
            delete_key(state, &k, Policy::Background);
        }
        collect_garbage(state);
        finalize_namespace(state, &name);
        return Ok(Written { code: 200, body, changed: true });
    }
    let gone = delete_key(state, &key, policy).unwrap_or(old);
    collect_garbage(state);
    let now = state.store.get(&key).cloned();
    let body = match now {
        Some(still) => present(&still, t),
        None if t.rt.custom || !meta::finalizers(&gone).is_empty() => present(&gone, t),
        None => status::success(&t.rt.group, &t.rt.plural, &name, gone["metadata"]["uid"].as_str().unwrap_or_default()),
    };
    Ok(Written { code: 200, body, changed: true })
}

/// Deletes every selected object of a collection; answers the list of what it deleted, as the
/// real server does.
pub fn delete_collection(state: &mut State, t: &Target, sel: &Selection, q: &Query) -> ApiResult<Written> {
    let selected: Vec<(Key, Value)> = state
        .store
        .list(&t.rt.group, &t.rt.plural, t.namespace.as_deref())
        .filter(|(_, o)| sel.matches(o))
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect();
    let changed = !selected.is_empty() && !q.dry_run();
    let mut items = Vec::new();
    for (k, o) in &selected {
        if q.dry_run() {
            items.push(present(o, t));
        } else if let Some(after) = delete_key(state, k, Policy::Background) {
            items.push(present(&after, t));
        }
    }
    if !q.dry_run() {
        collect_garbage(state);
    }
    for item in &mut items {
        list_item(item, t);
    }
    let body = json!({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version(&t.version), "metadata": {"resourceVersion": state.store.current_rv().to_string()}, "items": items});
    Ok(Written { code: 200, body, changed })
}

pub fn add_finalizer(obj: &mut Value, name: &str) {
    let list = &mut obj["metadata"]["finalizers"];
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(a) = list.as_array_mut()
        && !a.iter().any(|f| f == name)
    {
        a.push(json!(name));
    }
}

fn drop_finalizer(obj: &mut Value, name: &str) {
    if let Some(a) = obj["metadata"]["finalizers"].as_array_mut() {
        a.retain(|f| f != name);
    }
    if obj["metadata"]["finalizers"].as_array().is_some_and(Vec::is_empty)
        && let Some(m) = obj["metadata"].as_object_mut()
    {
        m.remove("finalizers");
    }
}

/// Deletes one object under `policy`: marks it deleting (generation bumped, the policy's
/// finalizer added) when finalizers hold it, else removes it. Returns its resulting state.
pub fn delete_key(state: &mut State, key: &Key, policy: Policy) -> Option<Value> {
    let obj = state.store.get(key)?.clone();
    let policy_finalizer = match policy {
        Policy::Foreground => Some(FOREGROUND),
        Policy::Orphan => Some(ORPHAN),
        Policy::Background => None,
    };
    if meta::finalizers(&obj).is_empty() && policy_finalizer.is_none() {
        return remove(state, key);
    }
    if meta::is_deleting(&obj) {
        return Some(obj);
    }
    let mut marked = obj;
    marked["metadata"]["deletionTimestamp"] = json!(meta::now());
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    if let Some(generation) = marked["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
        marked["metadata"]["generation"] = json!(generation + 1);
    }
    if let Some(f) = policy_finalizer {
        add_finalizer(&mut marked, f);
    }
    Some(Value::clone(&state.store.put(key.clone(), marked)))
}

/// Removes an object for good, with the cascades the real control plane runs: a CRD takes its
/// custom resources with it, and a terminating namespace that became empty finishes.
pub fn remove(state: &mut State, key: &Key) -> Option<Value> {
    let gone = state.store.remove(key)?;
    if key.group == "apiextensions.k8s.io" && key.plural == "customresourcedefinitions" {
        let group = gone["spec"]["group"].as_str().unwrap_or_default().to_string();
        let plural = gone["spec"]["names"]["plural"].as_str().unwrap_or_default().to_string();
        let instances: Vec<Key> = state.store.list(&group, &plural, None).map(|(k, _)| k.clone()).collect();
        for k in instances {
            state.store.remove(&k);
        }
        state.registry.set_custom(&group, &plural, None);
    }
    if !key.namespace.is_empty() {
        finalize_namespace(state, &key.namespace);
    }
    Some(gone)
}

/// What the garbage collector knows of an owner.
struct Owner {
    key: Key,
    foreground: bool,
    orphan: bool,
}

/// Runs the garbage collector until nothing changes: dependents whose owners are all gone are
/// deleted, dangling references next to live owners are removed, dependents of a foreground
/// deletion are deleted, orphaning owners lose their references and then their finalizer, and a
/// foreground owner whose blocking dependents are gone loses its finalizer.
pub fn collect_garbage(state: &mut State) {
    for _ in 0..64 {
        if !gc_pass(state) {
            return;
        }
    }
}

fn gc_pass(state: &mut State) -> bool {
    // Only dependents (objects with owner references) are cloned; owners are known by uid.
    let all: Vec<(Key, Value)> = state
        .store
        .all()
        .filter(|(_, o)| o["metadata"]["ownerReferences"].as_array().is_some_and(|r| !r.is_empty()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let owners: HashMap<String, Owner> = state
        .store
        .all()
        .filter_map(|(k, o)| {
            let uid = o["metadata"]["uid"].as_str()?.to_string();
            let deleting = meta::is_deleting(o);
            let fins = o["metadata"]["finalizers"].as_array();
            let has = |name: &str| fins.is_some_and(|f| f.iter().any(|x| x == name));
            Some((uid, Owner { key: k.clone(), foreground: deleting && has(FOREGROUND), orphan: deleting && has(ORPHAN) }))
        })
        .collect();
    let mut blocking: HashMap<String, usize> = HashMap::new();
    for (key, obj) in &all {
        let Some(refs) = obj["metadata"]["ownerReferences"].as_array() else { continue };
        let uids: Vec<String> = refs.iter().filter_map(|r| r["uid"].as_str().map(String::from)).collect();
        let orphaned: Vec<&String> = uids.iter().filter(|u| owners.get(*u).is_some_and(|o| o.orphan)).collect();
        let live: Vec<&String> = uids.iter().filter(|u| owners.contains_key(*u) && !orphaned.contains(u)).collect();
        if !orphaned.is_empty() || (live.len() < uids.len() && !live.is_empty()) {
            // Orphaned and dangling references go; the dependent stays.
            let mut kept = obj.clone();
            if let Some(a) = kept["metadata"]["ownerReferences"].as_array_mut() {
                a.retain(|r| r["uid"].as_str().is_some_and(|u| live.iter().any(|l| *l == u)));
            }
            if kept["metadata"]["ownerReferences"].as_array().is_some_and(Vec::is_empty)
                && let Some(m) = kept["metadata"].as_object_mut()
            {
                m.remove("ownerReferences");
            }
            // The collector's patch is an update like any other: the references it removes
            // leave every manager's set (an emptied entry goes), and it owns nothing itself.
            let version = obj["apiVersion"].as_str().and_then(|a| a.rsplit('/').next()).unwrap_or_default().to_string();
            if let Some(rt) = state.registry.find(&key.group, &version, &key.plural).cloned() {
                let writer = Writer { manager: "kube-controller-manager", rt: &rt, version: &version, scope: Scope::Main };
                record_update(Some(obj), &mut kept, &writer);
            }
            state.store.put(key.clone(), kept);
            return true;
        }
        if live.is_empty() {
            if meta::is_deleting(obj) {
                continue;
            }
            delete_key(state, key, Policy::Background);
            return true;
        }
        if live.iter().filter_map(|u| owners.get(*u)).any(|o| o.foreground) && !meta::is_deleting(obj) {
            delete_key(state, key, Policy::Foreground);
            return true;
        }
        for r in refs {
            if r["blockOwnerDeletion"] == json!(true)
                && let Some(uid) = r["uid"].as_str()
            {
                *blocking.entry(uid.to_string()).or_default() += 1;
            }
        }
    }
    for (uid, owner) in &owners {
        if !(owner.foreground || owner.orphan) || blocking.get(uid).is_some_and(|n| *n > 0) {
            continue;
        }
        if owner.orphan && all.iter().any(|(_, o)| references(o, uid)) {
            continue;
        }
        let Some(mut obj) = state.store.get(&owner.key).cloned() else { continue };
        drop_finalizer(&mut obj, if owner.foreground { FOREGROUND } else { ORPHAN });
        if meta::finalizers(&obj).is_empty() {
            state.store.overwrite(&owner.key, obj);
            remove(state, &owner.key);
        } else {
            state.store.put(owner.key.clone(), obj);
        }
        return true;
    }
    false
}

fn references(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"].as_array().is_some_and(|a| a.iter().any(|r| r["uid"] == uid))
}

fn is_namespace(key: &Key) -> bool {
    key.group.is_empty() && key.plural == "namespaces"
}

/// The namespace controller: a terminating namespace with content left reports it in its
/// conditions, as the real controller does; once empty it loses its `kubernetes` finalizer and,
/// without other finalizers, goes away.
pub fn finalize_namespace(state: &mut State, namespace: &str) {
    let key = Key { group: String::new(), plural: "namespaces".into(), namespace: String::new(), name: namespace.into() };
    let Some(ns) = state.store.get(&key).cloned() else { return };
    if !meta::is_deleting(&ns) {
        return;
    }
    let left = state.store.keys_in_namespace(namespace);
    if !left.is_empty() {
        let conditions = remaining_conditions(state, &left);
        if ns["status"]["conditions"] != conditions {
            let mut ns = ns;
            ns["status"]["conditions"] = conditions;
            state.store.put(key, ns);
        }
        return;
    }
    if meta::finalizers(&ns).is_empty() && ns["spec"]["finalizers"].as_array().is_none_or(Vec::is_empty) {
        state.store.remove(&key);
    } else if ns["spec"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()) {
        let mut ns = ns;
        ns["spec"]["finalizers"] = json!([]);
        state.store.put(key.clone(), ns);
        if meta::finalizers(state.store.get(&key).unwrap_or(&Value::Null)).is_empty() {
            state.store.remove(&key);
        }
    }
}

fn remaining_conditions(state: &State, left: &[Key]) -> Value {
    let now = meta::now();
    let mut by_resource: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let mut by_finalizer: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for k in left {
        let resource = if k.group.is_empty() { k.plural.clone() } else { format!("{}.{}", k.plural, k.group) };
        *by_resource.entry(resource).or_default() += 1;
        for f in state.store.get(k).map(meta::finalizers).unwrap_or_default() {
            *by_finalizer.entry(f).or_default() += 1;
        }
    }
    let content: Vec<String> = by_resource.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
    let finalizers: Vec<String> = by_finalizer.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
    let cond = |type_: &str, status: &str, reason: &str, message: String| json!({"type": type_, "status": status, "lastTransitionTime": now, "reason": reason, "message": message});
    json!([
        cond("NamespaceDeletionDiscoveryFailure", "False", "ResourcesDiscovered", "All resources successfully discovered".into()),
        cond(
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into()
        ),
        cond(
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into()
        ),
        cond("NamespaceContentRemaining", "True", "SomeResourcesRemain", format!("Some resources are remaining: {}", content.join(", "))),
        if finalizers.is_empty() {
            cond("NamespaceFinalizersRemaining", "False", "ContentHasNoFinalizers", "All content-preserving finalizers finished".into())
        } else {
            cond(
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                format!("Some content in the namespace has finalizers remaining: {}", finalizers.join(", ")),
            )
        },
    ])
}
