//! What a sync would do, without doing it (a `diff` command): every object of the stages is
//! server-side dry-run applied and compared with the live object; delete stages and the prune
//! are looked up. Nothing is written. The same preparation as a sync (namespaces, owner label,
//! policies) makes the dry-run send exactly what the sync would.

use std::collections::HashSet;

use kube::api::{Api, DynamicObject, PatchParams};
use serde_json::Value;

use super::discovery::Unresolved;
use super::object::{Policy, to_value};
use super::{Applier, Digests, Inventory, Stage, diff, is_crd, key_only, unified};
use crate::StageAction;
use crate::{ObjectRef, SkipReason};

/// What would happen to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned {
    /// Not there yet: it would be created.
    Create,
    /// There and different: it would be written.
    Update,
    /// Deleted by a delete stage.
    Delete,
    /// Pruned: the release no longer has it.
    Prune,
}

impl std::fmt::Display for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Planned::Create => "create",
            Planned::Update => "update",
            Planned::Delete => "delete",
            Planned::Prune => "prune",
        })
    }
}

/// One object a sync would change, with the unified diff of its fields (live → desired,
/// server-owned metadata and `status` left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedChange {
    /// The object.
    pub object: ObjectRef,
    /// What would happen to it.
    pub change: Planned,
    /// The unified diff (live → desired); empty for a creation or a deletion.
    pub diff: String,
    /// An update's changed field paths (`.data.a`, `.spec.template.spec.containers[0].image`).
    pub fields: Vec<String>,
    /// An update of a Deployment, DaemonSet or StatefulSet whose pod template changes: its
    /// pods are replaced.
    pub restarts: bool,
    /// Judged by comparing the rendered fields with the live object, because the server refused
    /// the dry-run (an identity allowed to read only): defaults the server would add and
    /// fields another manager owns are not seen.
    pub client_side: bool,
}

/// Kinds whose pods are replaced when their pod template changes.
const WORKLOADS: [&str; 3] = ["Deployment", "DaemonSet", "StatefulSet"];

/// Whether an update of `object` changing `fields` replaces its pods.
pub fn restarts(object: &ObjectRef, fields: &[String]) -> bool {
    object.api_version.starts_with("apps/")
        && WORKLOADS.contains(&object.kind.as_str())
        && fields.iter().any(|f| f.starts_with(".spec.template"))
}

/// `live` with every field of `desired` put over it (maps merged, anything else replaced): what
/// an apply of `desired` would leave, as far as can be told without the server.
pub fn overlay(live: &Value, desired: &Value) -> Value {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => {
            let mut out = l.clone();
            for (k, v) in d {
                let merged = match l.get(k) {
                    Some(lv) => overlay(lv, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        _ => desired.clone(),
    }
}

/// What a sync would do to one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    /// One entry per object that would change, in apply order.
    pub changes: Vec<PlannedChange>,
    /// Objects that could not be previewed (the sync would fail on them too), with why.
    pub failures: Vec<(ObjectRef, String)>,
}

impl Applier {
    /// Previews a [`Applier::sync`] of `stages` over `previous`: creations and updates from
    /// forced server-side dry-runs (what our fields would become), deletions and prunes from
    /// the live objects that carry our owner label.
    pub async fn preview(&self, stages: &[Stage], previous: &Inventory) -> Preview {
        let mut cache = self.discovery_cache();
        let digests: Digests<'_> = super::digests(previous);
        // Kinds this release defines: before its CRDs are applied the server does not serve them,
        // and their objects would be created.
        let defined: HashSet<(String, String)> = stages
            .iter()
            .flat_map(|s| &s.objects)
            .filter(|o| is_crd(o.group(), &o.kind))
            .filter_map(|o| {
                let group = crate::health::at(&o.body, "/spec/group")?.as_str()?;
                let kind = crate::health::at(&o.body, "/spec/names/kind")?.as_str()?;
                Some((group.to_owned(), kind.to_owned()))
            })
            .collect();
        let mut out = Preview::default();
        let (mut rendered, mut deleted) = (HashSet::new(), HashSet::new());
        for stage in stages {
            for o in &stage.objects {
                let (inventory, prepared) = self.prepare(o, stage, &digests, &mut cache).await;
                match stage.action {
                    StageAction::Apply => rendered.insert(key_only(&inventory)),
                    StageAction::Delete => deleted.insert(key_only(&inventory)),
                };
                let t = match prepared {
                    Ok(t) => t,
                    Err(not) if matches!(not.entry.action, crate::Action::Skipped(SkipReason::Ignored)) => continue,
                    Err(not) if not.kind_not_served && stage.action == StageAction::Delete => continue,
                    Err(not) if not.kind_not_served && defined.contains(&(o.group().to_owned(), o.kind.clone())) => {
                        let body = self.desired_body(&o.body, o.namespace.as_deref());
                        out.push(not.entry.object, Planned::Create, "", &yaml(&diff::normalize(&body)));
                        continue;
                    }
                    Err(not) => {
                        out.failures.push((not.entry.object, not.entry.message));
                        continue;
                    }
                };
                let object = t.entry.object.clone();
                let live = match self.get(&t.api(&self.client), &t.object.name, &object).await {
                    Ok(live) => live,
                    Err(error) => {
                        out.failures.push((object, error.message(&self.options.manager)));
                        continue;
                    }
                };
                if stage.action == StageAction::Delete {
                    if let Some(live) = live.filter(|l| ours(l, self.options.manager.owner_label(), &self.owner_value)) {
                        out.push(object, Planned::Delete, &yaml(&diff::normalize(&live)), "");
                    }
                    continue;
                }
                if t.policy == Policy::ApplyOnce && live.is_some() {
                    continue;
                }
                // What the chart generates keeps its live value: not a change.
                let t = match live.as_ref().and_then(|l| t.with_generated_kept(l, &t.generated)) {
                    Some(kept) => kept,
                    None => t,
                };
                let params = PatchParams { dry_run: true, ..PatchParams::apply(self.options.manager.field_manager()).force() };
                let dry = match self.within("dry-run apply", &object, self.apply_request(&t, &params)).await {
                    Ok(Ok((bytes, _))) => match super::object::whole(&bytes) {
                        Ok(dry) => diff::normalize(&dry),
                        Err(source) => {
                            out.failures.push((
                                object,
                                super::Error::DryRun { object: t.entry.object.clone(), source }.message(&self.options.manager),
                            ));
                            continue;
                        }
                    },
                    Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                        // Read-only: judged from the rendered fields over the live object.
                        let desired =
                            serde_json::from_slice(&t.body).unwrap_or_else(|_| self.desired_body(&o.body, o.namespace.as_deref()));
                        let judged = match &live {
                            Some(live) => diff::normalize(&overlay(live, &desired)),
                            None => diff::normalize(&desired),
                        };
                        let before = out.changes.len();
                        match &live {
                            None => out.push(object, Planned::Create, "", &yaml(&judged)),
                            Some(live) => out.push_judged(object, &diff::normalize(live), &judged),
                        }
                        if let Some(c) = out.changes.get_mut(before) {
                            c.client_side = true;
                        }
                        continue;
                    }
                    Ok(Err(e)) => {
                        out.failures.push((
                            object,
                            super::Error::DryRun { object: t.entry.object.clone(), source: e }.message(&self.options.manager),
                        ));
                        continue;
                    }
                    Err(e) => {
                        out.failures.push((object, e.message(&self.options.manager)));
                        continue;
                    }
                };
                match live {
                    None => out.push(object, Planned::Create, "", &yaml(&dry)),
                    Some(live) => out.push_judged(object, &diff::normalize(&live), &dry),
                }
            }
        }
        for e in &previous.entries {
            let key = key_only(e);
            if rendered.contains(&key) || deleted.contains(&key) {
                continue;
            }
            let resource = match cache.resolve_any_version(&e.api_version(), &e.kind).await {
                Ok(r) => r.resource,
                Err(Unresolved::NoMatch(_)) => continue,
                Err(Unresolved::Failed(m)) => {
                    out.failures.push((e.object_ref(), m));
                    continue;
                }
            };
            let api: Api<DynamicObject> = match &e.namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &*resource),
                None => Api::all_with(self.client.clone(), &*resource),
            };
            match self.get(&api, &e.name, &e.object_ref()).await {
                Ok(Some(live)) if ours(&live, self.options.manager.owner_label(), &self.owner_value) => {
                    out.push(e.object_ref(), Planned::Prune, &yaml(&diff::normalize(&live)), "")
                }
                Ok(_) => {}
                Err(error) => out.failures.push((e.object_ref(), error.message(&self.options.manager))),
            }
        }
        out
    }

    async fn get(&self, api: &Api<DynamicObject>, name: &str, object: &ObjectRef) -> Result<Option<Value>, super::Error> {
        match self.within("reading", object, api.get_opt(name)).await {
            Ok(Ok(live)) => Ok(live.as_ref().map(to_value)),
            Ok(Err(source)) => Err(super::Error::Get { object: object.clone(), source }),
            Err(e) => Err(e),
        }
    }
}

impl Preview {
    /// Nothing would change and nothing failed.
    pub fn is_clean(&self) -> bool {
        self.changes.is_empty() && self.failures.is_empty()
    }

    fn push(&mut self, object: ObjectRef, change: Planned, old: &str, new: &str) {
        let name = object.to_string();
        let diff = unified::unified(old, new, &format!("live/{name}"), &format!("desired/{name}"));
        if change == Planned::Update && diff.is_empty() {
            return;
        }
        self.changes.push(PlannedChange { object, change, diff, fields: Vec::new(), restarts: false, client_side: false });
    }

    /// An update from `live` to `desired` (both normalized), with the fields it changes and
    /// whether it replaces pods; nothing when they are the same.
    fn push_judged(&mut self, object: ObjectRef, live: &Value, desired: &Value) {
        let fields = diff::changed_paths(live, desired);
        if fields.is_empty() {
            return;
        }
        let restarts = restarts(&object, &fields);
        let before = self.changes.len();
        self.push(object, Planned::Update, &yaml(live), &yaml(desired));
        if let Some(c) = self.changes.get_mut(before) {
            c.fields = fields;
            c.restarts = restarts;
        }
    }
}

fn ours(live: &Value, owner_label: &str, owner: &str) -> bool {
    crate::health::at(live, "/metadata/labels").and_then(|l| l.get(owner_label)).and_then(Value::as_str) == Some(owner)
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
}
