//! Field ownership: `metadata.managedFields` per manager and operation, server-side apply with
//! conflict detection, forced takeover and removal of fields an applier stops sending, and the
//! ownership bookkeeping of ordinary writes (create, update, patch).

use serde_json::{Map, Value, json};

use super::fieldset::{self, Display, FieldSet, Path, Scope};
use super::meta;
use super::registry::ResourceType;
use super::status::{ApiError, ApiResult};

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Two entries are the same manager when name, operation, subresource and (for updates
    /// only) apiVersion agree, as the real field manager identifies them.
    fn same_identity(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == "Apply" || self.api_version == other.api_version)
    }

    /// How conflict messages name the manager (`"alpha"`, `"beta" using v1`).
    fn printed(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

pub fn read_entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj["metadata"]["managedFields"].as_array() else { return Vec::new() };
    list.iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().into(),
            operation: e["operation"].as_str().unwrap_or("Update").into(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
            time: e["time"].as_str().map(String::from),
            subresource: e["subresource"].as_str().unwrap_or_default().into(),
            fields: fieldset::from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

/// Writes the entries in the real server's order: Apply before Update, then by time, manager,
/// apiVersion and subresource.
pub fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|p, q| {
        let secs = |e: &Entry| e.time.as_deref().and_then(|t| t.parse::<jiff::Timestamp>().ok()).map_or(0, |t| t.as_second());
        (p.operation.as_str(), secs(p), p.manager.as_str(), p.api_version.as_str(), p.subresource.as_str()).cmp(&(
            q.operation.as_str(),
            secs(q),
            q.manager.as_str(),
            q.api_version.as_str(),
            q.subresource.as_str(),
        ))
    });
    let list: Vec<Value> = sorted
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": fieldset::to_fields_v1(&e.fields),
            });
            if let Some(time) = &e.time {
                v["time"] = Value::String(time.clone());
            }
            if !e.subresource.is_empty() {
                v["subresource"] = Value::String(e.subresource.clone());
            }
            v
        })
        .collect();
    match obj["metadata"].as_object_mut() {
        Some(meta) if list.is_empty() => {
            meta.remove("managedFields");
        }
        Some(meta) => {
            meta.insert("managedFields".into(), Value::Array(list));
        }
        None => {}
    }
}

/// What a write is: who makes it, through which endpoint, in which version.
pub struct Writer<'a> {
    pub manager: &'a str,
    pub rt: &'a ResourceType,
    pub version: &'a str,
    pub scope: Scope,
}

impl Writer<'_> {
    fn subresource(&self) -> &'static str {
        if self.scope == Scope::Status { "status" } else { "" }
    }
}

/// Server-side apply of `applied` onto `live` (an object, or a bare skeleton when creating),
/// as structured-merge-diff's `Updater.Apply` does it: merge, prune what this manager applied
/// last time and nobody owns now, then compare the result with the live object — a field
/// another manager owns that the apply modifies or adds is a conflict (unless forced, when
/// that manager loses it), and removed fields leave every set. Returns the new object with its
/// managedFields; system metadata is left to the caller.
///
/// # Errors
/// 409 Conflict listing every conflicting field, unless `force`.
pub fn apply(live: &Value, applied: &Value, w: &Writer<'_>, force: bool) -> ApiResult<Value> {
    let (rt, version) = (w.rt, w.version);
    let new_set = applied_set(applied, w);
    let mut entries = read_entries(live);
    let me = Entry {
        manager: w.manager.into(),
        operation: "Apply".into(),
        api_version: applied["apiVersion"].as_str().unwrap_or_default().into(),
        time: None,
        subresource: w.subresource().into(),
        fields: FieldSet::new(),
    };
    let last = entries.iter().find(|e| e.same_identity(&me)).map(|e| e.fields.clone()).unwrap_or_default();

    let mut scoped = applied.clone();
    strip_out_of_scope(&mut scoped, w.scope);
    if let Some(meta) = scoped.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    let mut merged = live.clone();
    fieldset::merge(&mut merged, &scoped, &mut Vec::new(), rt, version);
    let result = if last.is_empty() { merged } else { prune(&merged, &entries, &me, &new_set, &last, w) };

    let cmp = fieldset::compare(live, &result, rt, version, w.scope);
    let changed: FieldSet = cmp.modified.union(&cmp.added).cloned().collect();
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if !e.same_identity(&me) {
            conflicts.extend(e.fields.intersection(&changed).map(|p| (i, p.clone())));
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&entries, &conflicts));
    }
    for e in &mut entries {
        if !e.same_identity(&me) {
            e.fields.retain(|p| !changed.contains(p) && !cmp.removed.contains(p));
        }
    }
    let mut obj = result;
    fieldset::drop_nulls(&mut obj);
    // The real server stamps the applier's entry whenever the apply changes the object (a
    // value-only change included), not only when its field set changes.
    let object_changed = without_managed_fields(&obj) != without_managed_fields(live);
    match entries.iter().position(|e| e.same_identity(&me)) {
        Some(i) => {
            if entries[i].fields != new_set || entries[i].api_version != me.api_version || object_changed {
                entries[i].fields = new_set;
                entries[i].api_version = me.api_version;
                entries[i].time = Some(meta::now());
            }
        }
        None => entries.push(Entry { fields: new_set, time: Some(meta::now()), ..me }),
    }
    write_entries(&mut obj, &entries);
    Ok(obj)
}

/// The fields an apply records for its manager: what it sent, less the fields the endpoint's
/// strategy resets. A custom resource's status strategy resets only `spec` (apiextensions'
/// `GetResetFields`), so an apply to its `/status` records the labels, annotations and other
/// metadata it sent, although the strategy then keeps the live values (1.35 does exactly that).
/// Built-in kinds are modelled as resetting everything but `status` there.
fn applied_set(applied: &Value, w: &Writer<'_>) -> FieldSet {
    if w.scope == Scope::Status && w.rt.custom {
        let mut sent = applied.clone();
        if let Some(map) = sent.as_object_mut() {
            map.remove("spec");
        }
        return fieldset::fields_of(&sent, w.rt, w.version, Scope::All);
    }
    fieldset::fields_of(applied, w.rt, w.version, w.scope)
}

/// The object without `metadata.managedFields` (and the system metadata a write changes).
fn without_managed_fields(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["managedFields", "resourceVersion", "generation"] {
            meta.remove(key);
        }
    }
    obj
}

/// structured-merge-diff's prune: what `me` applied last time and no longer applies goes,
/// unless some manager (`me`'s new set included) owns it.
fn prune(merged: &Value, entries: &[Entry], me: &Entry, new_set: &FieldSet, last: &FieldSet, w: &Writer<'_>) -> Value {
    let (rt, version) = (w.rt, w.version);
    let last = fieldset::named(last, rt, version);
    let mut pruned = merged.clone();
    fieldset::remove_items(&mut pruned, &last, rt, version);
    let mut owned: FieldSet = new_set.clone();
    for e in entries.iter().filter(|e| !e.same_identity(me)) {
        owned.extend(e.fields.iter().cloned());
    }
    let owned = fieldset::named(&owned, rt, version);
    let merged_nodes = fieldset::nodes_of(merged, rt, version, w.scope);
    let pruned_nodes = fieldset::nodes_of(&pruned, rt, version, w.scope);
    let gone: FieldSet = merged_nodes.iter().filter(|p| !pruned_nodes.contains(*p) && !owned.contains(*p)).cloned().collect();
    let mut kept = merged.clone();
    fieldset::remove_items(&mut kept, &gone, rt, version);
    // Only what this manager applied before may go.
    let kept_nodes = fieldset::nodes_of(&kept, rt, version, w.scope);
    let dangling: FieldSet = merged_nodes.iter().filter(|p| !kept_nodes.contains(*p) && last.contains(*p)).cloned().collect();
    let mut out = merged.clone();
    fieldset::remove_items(&mut out, &dangling, rt, version);
    out
}

/// Records the ownership an ordinary write (create, update, patch) takes, as
/// structured-merge-diff's `Updater.Update` does: the manager gains every field the write adds
/// or modifies, other managers lose those, and removed fields leave every set.
pub fn record_update(old: Option<&Value>, new: &mut Value, w: &Writer<'_>) {
    // What a create compares against: an empty object whose metadata exists, as the server's
    // typed empty object has it.
    let empty = json!({"metadata": {}});
    let old_obj = old.unwrap_or(&empty);
    let cmp = fieldset::compare(old_obj, new, w.rt, w.version, w.scope);
    let changed: FieldSet = cmp.modified.union(&cmp.added).cloned().collect();

    // A write that sends managedFields different from the stored ones resets them, as the real
    // server lets clients do (kubectl's migration off client-side apply relies on it).
    let mut entries =
        if new["metadata"].get("managedFields").is_some() && new["metadata"]["managedFields"] != old_obj["metadata"]["managedFields"] {
            read_entries(new)
        } else {
            read_entries(old_obj)
        };
    let me = Entry {
        manager: w.manager.into(),
        operation: "Update".into(),
        api_version: w.rt.api_version(w.version),
        time: Some(meta::now()),
        subresource: w.subresource().into(),
        fields: FieldSet::new(),
    };
    for e in &mut entries {
        e.fields.retain(|p| !cmp.removed.contains(p));
        if !e.same_identity(&me) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| e.same_identity(&me)) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = me.time.clone();
            }
            None => entries.push(Entry { fields: changed, ..me }),
        }
    }
    write_entries(new, &entries);
}

/// Drops what the endpoint ignores: `.status` on the main resource of a kind with a status
/// subresource, everything but `.status` on `/status`.
pub fn strip_out_of_scope(obj: &mut Value, scope: Scope) {
    let Some(map) = obj.as_object_mut() else { return };
    match scope {
        Scope::All => {}
        Scope::Main => {
            map.remove("status");
        }
        Scope::Status => {
            map.retain(|k, _| matches!(k.as_str(), "status" | "apiVersion" | "kind" | "metadata"));
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "resourceVersion"));
            }
        }
    }
}

fn conflict_error(entries: &[Entry], conflicts: &[(usize, Path)]) -> ApiError {
    let mut causes: Vec<(String, String)> = conflicts.iter().map(|(i, path)| (entries[*i].printed(), Display(path).to_string())).collect();
    causes.sort();
    let message = if causes.len() == 1 {
        format!("Apply failed with 1 conflict: conflict with {}: {}", causes[0].0, causes[0].1)
    } else {
        let mut by_manager: Map<String, Value> = Map::new();
        for (manager, path) in &causes {
            if let Value::Array(paths) = by_manager.entry(manager.clone()).or_insert_with(|| Value::Array(Vec::new())) {
                paths.push(Value::String(path.clone()));
            }
        }
        let mut lines = Vec::new();
        for (manager, paths) in &by_manager {
            lines.push(format!("conflicts with {manager}:"));
            for p in paths.as_array().into_iter().flatten() {
                lines.push(format!("- {}", p.as_str().unwrap_or_default()));
            }
        }
        format!("Apply failed with {} conflicts: {}", causes.len(), lines.join("\n"))
    };
    ApiError::apply_conflict(message, &causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds;

    fn configmaps() -> ResourceType {
        kinds::registry().find("", "v1", "configmaps").cloned().expect("built-in")
    }

    fn cm(metadata: Value, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    }

    fn apply_as(live: &Value, applied: &Value, manager: &str, force: bool) -> ApiResult<Value> {
        let rt = configmaps();
        apply(live, applied, &Writer { manager, rt: &rt, version: "v1", scope: Scope::All }, force)
    }

    #[test]
    fn conflicts_name_update_managers_with_their_api_version() {
        let rt = configmaps();
        let old = cm(json!({"name": "c"}), json!({"a": "1"}));
        let mut edited = cm(json!({"name": "c"}), json!({"a": "2"}));
        record_update(Some(&old), &mut edited, &Writer { manager: "kubectl-edit", rt: &rt, version: "v1", scope: Scope::All });
        let err = apply_as(&edited, &cm(json!({"name": "c"}), json!({"a": "3"})), "sync", false).expect_err("conflict");
        assert_eq!(err.message, r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.a"#);
        assert_eq!(
            err.details.expect("details")["causes"][0],
            json!({"reason": "FieldManagerConflict", "message": "conflict with \"kubectl-edit\" using v1", "field": ".data.a"})
        );
    }

    #[test]
    fn finalizers_are_a_set_each_manager_removes_only_its_own() {
        let skeleton = cm(json!({"name": "c"}), json!({}));
        let one = apply_as(&skeleton, &cm(json!({"name": "c", "finalizers": ["a.io/x"]}), json!({})), "a", false).expect("applies");
        let two = apply_as(&one, &cm(json!({"name": "c", "finalizers": ["b.io/y"]}), json!({})), "b", false).expect("applies");
        assert_eq!(two["metadata"]["finalizers"], json!(["a.io/x", "b.io/y"]));
        let dropped = apply_as(&two, &cm(json!({"name": "c"}), json!({})), "a", false).expect("applies");
        assert_eq!(dropped["metadata"]["finalizers"], json!(["b.io/y"]));
    }

    #[test]
    fn an_unchanged_reapply_keeps_the_managed_fields_time() {
        let skeleton = cm(json!({"name": "c"}), json!({}));
        let applied = cm(json!({"name": "c"}), json!({"a": "1"}));
        let first = apply_as(&skeleton, &applied, "a", false).expect("applies");
        let again = apply_as(&first, &applied, "a", false).expect("applies");
        assert_eq!(first, again);
    }
}
