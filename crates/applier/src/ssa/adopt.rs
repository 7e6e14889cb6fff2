//! Taking objects over from another field manager (a tool being replaced: the SCS
//! cluster-stack-operator, say, which applies as `kubectl`). For each rendered object: what taking
//! it over would change — the values our apply sets differently (a forced server-side dry-run),
//! and the fields only the other manager holds that our render does not set (they go when its
//! ownership is released) — and, when asked, the take-over itself: a forced apply as our
//! [`super::Manager`], then an empty apply as the other manager, which releases every field it
//! held. Fields we set stay (we own them now), fields nobody else sets go; nothing is deleted.

use std::collections::{BTreeSet, HashSet};

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::object::{Policy, to_value, whole};
use super::{Applier, Digests, InventoryEntry, Stage, diff, preview};
use crate::ObjectRef;
use crate::StageAction;

/// What taking one object over does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Nothing but ownership changes (and our owner label is added).
    Identical,
    /// Values change (`fields`, `released`); no pod is replaced.
    Changes,
    /// A workload's pod template changes: its pods would be replaced.
    Restarts,
    /// Not in the cluster: the first sync creates it.
    Missing,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Identical => "identical",
            Verdict::Changes => "changes",
            Verdict::Restarts => "restarts",
            Verdict::Missing => "missing",
        })
    }
}

/// One rendered object, judged (and taken over, when asked).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Adopted {
    /// The object.
    pub object: ObjectRef,
    /// Whether it can be taken over, and how.
    pub verdict: Verdict,
    /// Fields whose values our apply would change (`.data.a`), our owner label left out.
    pub fields: Vec<String>,
    /// Fields only the other manager set, which our render does not: removed when its
    /// ownership is released (`.spec.template.spec.containers[name=x].env[name=Y]`).
    pub released: Vec<String>,
    /// Whether the other manager held any field of it (false: not its object, or already ours).
    pub held: bool,
    /// Fields the chart generates at render time (JSON pointers): their live values are kept
    /// (and [`Adoption::generated`] records them for every later sync).
    pub generated: Vec<String>,
    /// Taken over (apply and release both done).
    pub taken: bool,
}

/// Fields each rendered object gets anew from every render (JSON pointers), by
/// `(group, kind, namespace as rendered, name)`.
pub type Generated = std::collections::BTreeMap<(String, String, Option<String>, String), Vec<String>>;

/// What an adoption of one cluster's objects found (and did).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Adoption {
    /// Every rendered object, judged, in apply order.
    pub objects: Vec<Adopted>,
    /// Objects that could not be judged or taken over, with why.
    pub failures: Vec<(ObjectRef, String)>,
    /// The inventory of what was taken over: a status seeded with it prunes what a later
    /// release drops.
    #[serde(skip)]
    pub inventory: Vec<InventoryEntry>,
    /// The generated fields of what was taken over, as `ClusterSync.status.generated` records
    /// them: every later sync keeps their live values.
    pub generated: Vec<String>,
}

impl Adoption {
    /// Whether any object's pods would be replaced.
    pub fn restarts(&self) -> bool {
        self.objects.iter().any(|o| o.verdict == Verdict::Restarts)
    }
}

impl Applier {
    /// Judges taking the rendered objects of `stages` over from field manager `from`; with
    /// `write`, takes each over (the caller decides whether the judgement allows it). Delete
    /// stages are left out: adoption deletes nothing. The `generated` fields of an object keep
    /// their live values.
    pub async fn adopt(&self, stages: &[Stage], from: &str, generated: &Generated, write: bool) -> Adoption {
        let mut cache = self.discovery_cache();
        let none: Digests<'_> = Default::default();
        let mut out = Adoption::default();
        let mut seen = HashSet::new();
        for stage in stages.iter().filter(|s| s.action == StageAction::Apply) {
            for o in &stage.objects {
                let (_, prepared) = self.prepare(o, stage, &none, &mut cache).await;
                let t = match prepared {
                    Ok(t) => t,
                    Err(not) if matches!(not.entry.action, crate::Action::Skipped(_)) => continue,
                    Err(not) => {
                        out.failures.push((not.entry.object, not.entry.message));
                        continue;
                    }
                };
                let object = t.entry.object.clone();
                if !seen.insert(super::key_only(&t.inventory)) {
                    continue;
                }
                let api = t.api(&self.client);
                let live = match self.within("reading", &object, api.get_opt(&t.object.name)).await {
                    Ok(Ok(live)) => live.as_ref().map(to_value),
                    Ok(Err(source)) => {
                        out.failures.push((object.clone(), super::Error::Get { object, source }.message(&self.options.manager)));
                        continue;
                    }
                    Err(e) => {
                        out.failures.push((object, e.message(&self.options.manager)));
                        continue;
                    }
                };
                let pointers = generated
                    .get(&(o.group().to_owned(), o.kind.clone(), o.namespace.clone(), o.name.clone()))
                    .cloned()
                    .unwrap_or_default();
                let Some(live) = live else {
                    out.objects.push(Adopted {
                        object,
                        verdict: Verdict::Missing,
                        fields: Vec::new(),
                        released: Vec::new(),
                        held: false,
                        generated: pointers,
                        taken: false,
                    });
                    continue;
                };
                if t.policy == Policy::ApplyOnce {
                    // Never written over by a sync: ours by label only, its fields stay theirs.
                    continue;
                }
                // What the chart generates keeps its live value.
                let kept;
                let t = match t.with_generated_kept(&live, &pointers) {
                    Some(k) => {
                        kept = k;
                        &kept
                    }
                    None => &t,
                };
                let dry_params = PatchParams { dry_run: true, ..PatchParams::apply(self.options.manager.field_manager()).force() };
                let dry = match self.within("dry-run apply", &object, self.apply_request(t, &dry_params)).await {
                    Ok(Ok((bytes, _))) => match whole(&bytes) {
                        Ok(dry) => dry,
                        Err(source) => {
                            out.failures.push((object.clone(), super::Error::DryRun { object, source }.message(&self.options.manager)));
                            continue;
                        }
                    },
                    Ok(Err(source)) => {
                        out.failures.push((object.clone(), super::Error::DryRun { object, source }.message(&self.options.manager)));
                        continue;
                    }
                    Err(e) => {
                        out.failures.push((object, e.message(&self.options.manager)));
                        continue;
                    }
                };
                let owner_label = format!(".metadata.labels.{}", self.options.manager.owner_label());
                let fields: Vec<String> =
                    diff::changed_paths(&live, &dry).into_iter().filter(|p| *p != owner_label && *p != ".metadata.labels").collect();
                let theirs = owned(&live, from);
                let held = theirs.is_some();
                let released = released(theirs, &dry, from);
                let all: Vec<String> = fields.iter().chain(&released).cloned().collect();
                let verdict = if preview::restarts(&object, &all) {
                    Verdict::Restarts
                } else if all.is_empty() {
                    Verdict::Identical
                } else {
                    Verdict::Changes
                };
                let mut adopted = Adopted { object: object.clone(), verdict, fields, released, held, generated: pointers, taken: false };
                if write {
                    match self.take_over(t, from).await {
                        Ok(fields) => {
                            adopted.taken = true;
                            out.generated.extend(adopted.generated.iter().map(|p| super::generated::line(&t.inventory, p)));
                            out.inventory.push(InventoryEntry { fields, ..t.inventory.clone() });
                        }
                        Err(message) => out.failures.push((object, message)),
                    }
                }
                out.objects.push(adopted);
            }
        }
        out
    }

    /// The client of the cluster this applier writes to.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The resource serving `kind` at `api_version` in this cluster.
    ///
    /// # Errors
    /// Discovery's message: the kind is not served, or the server did not answer.
    pub async fn resource(&self, api_version: &str, kind: &str) -> Result<kube::api::ApiResource, String> {
        match self.discovery_cache().resolve(api_version, kind).await {
            Ok(r) => Ok((*r.resource).clone()),
            Err(super::discovery::Unresolved::NoMatch(m) | super::discovery::Unresolved::Failed(m)) => Err(m),
        }
    }

    /// The forced apply as ours, then the release of `from`'s fields. Returns the hash of the
    /// fields we own (the inventory's `fields`).
    async fn take_over(&self, t: &super::object::Target<'_>, from: &str) -> Result<String, String> {
        let object = &t.entry.object;
        let params = PatchParams::apply(self.options.manager.field_manager()).force();
        let ours = match self.within("apply", object, self.apply_request(t, &params)).await {
            Ok(Ok((bytes, _))) => whole(&bytes).map_err(|e| format!("reading the answer to the apply: {e}"))?,
            Ok(Err(source)) => return Err(super::Error::Patch { object: object.clone(), source }.message(&self.options.manager)),
            Err(e) => return Err(e.message(&self.options.manager)),
        };
        let hash = diff::our_fields(&ours, self.options.manager.field_manager()).map(diff::fields_hash).unwrap_or_default();
        if owned(&ours, from).is_some() {
            // Every field of theirs we set is ours too now: an apply of nothing as them drops
            // their entry, and the fields only they set.
            let mut metadata = json!({"name": t.object.name});
            if let Some(ns) = &t.inventory.namespace {
                metadata["namespace"] = json!(ns);
            }
            let empty = json!({"apiVersion": t.object.api_version, "kind": t.object.kind, "metadata": metadata});
            let api = t.api(&self.client);
            match self.within("release", object, api.patch(&t.object.name, &PatchParams::apply(from), &Patch::Apply(&empty))).await {
                Ok(Ok(_)) => {}
                Ok(Err(source)) => {
                    return Err(format!(
                        "releasing the fields of {from}: {}",
                        super::Error::Patch { object: object.clone(), source }.message(&self.options.manager)
                    ));
                }
                Err(e) => return Err(e.message(&self.options.manager)),
            }
        }
        Ok(hash)
    }
}

/// The FieldsV1 `manager` holds through apply (its main resource, not a subresource).
fn owned<'a>(object: &'a Value, manager: &str) -> Option<&'a Value> {
    crate::health::at(object, "/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|m| m["manager"] == manager && m["operation"] == "Apply" && m.get("subresource").is_none_or(|s| s == ""))
        .and_then(|m| m.get("fieldsV1"))
}

/// The fields `theirs` holds that no other manager of `after` (our dry-run's answer) holds:
/// what releasing them removes.
fn released(theirs: Option<&Value>, after: &Value, from: &str) -> Vec<String> {
    let Some(theirs) = theirs else { return Vec::new() };
    let mut kept = BTreeSet::new();
    for m in crate::health::at(after, "/metadata/managedFields").and_then(Value::as_array).into_iter().flatten() {
        if m["manager"] == from && m["operation"] == "Apply" {
            continue;
        }
        if let Some(f) = m.get("fieldsV1") {
            leaves(f, &mut String::new(), &mut kept);
        }
    }
    let mut theirs_leaves = BTreeSet::new();
    leaves(theirs, &mut String::new(), &mut theirs_leaves);
    theirs_leaves.difference(&kept).cloned().collect()
}

/// The paths a FieldsV1 owns, readable: `f:a` is `.a`, `k:{"name":"x"}` is `[name=x]`, `v:"x"`
/// is `[x]`, `i:0` is `[0]`; a `.` entry owns the node itself (a list item's existence).
pub fn leaves(fields: &Value, path: &mut String, out: &mut BTreeSet<String>) {
    let Some(map) = fields.as_object() else { return };
    if map.is_empty() && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (key, child) in map {
        if key == "." {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            continue;
        }
        let len = path.len();
        path.push_str(&segment(key));
        leaves(child, path, out);
        path.truncate(len);
    }
}

fn segment(key: &str) -> String {
    if let Some(name) = key.strip_prefix("f:") {
        return format!(".{name}");
    }
    if let Some(k) = key.strip_prefix("k:") {
        let inner = match serde_json::from_str::<serde_json::Map<String, Value>>(k) {
            Ok(m) => m.iter().map(|(k, v)| format!("{k}={}", scalar(v))).collect::<Vec<_>>().join(","),
            Err(_) => k.to_owned(),
        };
        return format!("[{inner}]");
    }
    if let Some(v) = key.strip_prefix("v:") {
        return format!("[{}]", serde_json::from_str::<Value>(v).map_or_else(|_| v.to_owned(), |v| scalar(&v)));
    }
    if let Some(i) = key.strip_prefix("i:") {
        return format!("[{i}]");
    }
    format!(".{key}")
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_v1_reads_as_paths() {
        let f = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"x\"}": {".": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:value": {}}}}}}}},
            "f:finalizers": {"v:\"a\"": {}},
            "f:args": {"i:0": {}},
        });
        let mut out = BTreeSet::new();
        leaves(&f, &mut String::new(), &mut out);
        let out: Vec<&str> = out.iter().map(String::as_str).collect();
        assert_eq!(
            out,
            [
                ".args[0]",
                ".finalizers[a]",
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.template.spec.containers[name=x]",
                ".spec.template.spec.containers[name=x].env[name=A]",
                ".spec.template.spec.containers[name=x].env[name=A].value",
            ]
        );
    }

    #[test]
    fn what_only_they_hold_is_released() {
        let theirs = json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}});
        let after = json!({"metadata": {"managedFields": [
            {"manager": "kubectl", "operation": "Apply", "fieldsV1": theirs},
            {"manager": crate::ssa::TEST_FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}},
        ]}});
        assert_eq!(released(Some(&theirs), &after, "kubectl"), vec![".data.b".to_owned()]);
        assert!(released(None, &after, "kubectl").is_empty());
    }
}
