//! What a sync would do, without doing it (`stacksync diff`): every object of the stages is
//! server-side dry-run applied and compared with the live object; delete stages and the prune
//! are looked up. Nothing is written. The same preparation as a sync (namespaces, owner label,
//! policies) makes the dry-run send exactly what the sync would.

use std::collections::HashSet;

use kube::api::{Api, DynamicObject, PatchParams};
use serde_json::Value;

use super::discovery::Unresolved;
use super::object::{Policy, to_value};
use super::{Applier, Digests, FIELD_MANAGER, Inventory, OWNER_LABEL, Stage, diff, is_crd, key_only, unified};
use crate::apply::{ObjectRef, SkipReason};
use crate::model::StageAction;

/// What would happen to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned {
    Create,
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
    pub object: ObjectRef,
    pub change: Planned,
    pub diff: String,
}

/// What a sync would do to one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
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
                let group = crate::apply::health::at(&o.body, "/spec/group")?.as_str()?;
                let kind = crate::apply::health::at(&o.body, "/spec/names/kind")?.as_str()?;
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
                    Err(not) if matches!(not.entry.action, crate::apply::Action::Skipped(SkipReason::Ignored)) => continue,
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
                        out.failures.push((object, error.message()));
                        continue;
                    }
                };
                if stage.action == StageAction::Delete {
                    if let Some(live) = live.filter(|l| ours(l, &self.owner_value)) {
                        out.push(object, Planned::Delete, &yaml(&diff::normalize(&live)), "");
                    }
                    continue;
                }
                if t.policy == Policy::ApplyOnce && live.is_some() {
                    continue;
                }
                let params = PatchParams { dry_run: true, ..PatchParams::apply(FIELD_MANAGER).force() };
                let dry = match self.within("dry-run apply", &object, self.apply_request(&t, &params)).await {
                    Ok(Ok((bytes, _))) => match super::object::whole(&bytes) {
                        Ok(dry) => diff::normalize(&dry),
                        Err(source) => {
                            out.failures.push((object, super::Error::DryRun { object: t.entry.object.clone(), source }.message()));
                            continue;
                        }
                    },
                    Ok(Err(e)) => {
                        out.failures.push((object, super::Error::DryRun { object: t.entry.object.clone(), source: e }.message()));
                        continue;
                    }
                    Err(e) => {
                        out.failures.push((object, e.message()));
                        continue;
                    }
                };
                match live {
                    None => out.push(object, Planned::Create, "", &yaml(&dry)),
                    Some(live) => out.push(object, Planned::Update, &yaml(&diff::normalize(&live)), &yaml(&dry)),
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
                Ok(Some(live)) if ours(&live, &self.owner_value) => {
                    out.push(e.object_ref(), Planned::Prune, &yaml(&diff::normalize(&live)), "")
                }
                Ok(_) => {}
                Err(error) => out.failures.push((e.object_ref(), error.message())),
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
        self.changes.push(PlannedChange { object, change, diff });
    }
}

fn ours(live: &Value, owner: &str) -> bool {
    crate::apply::health::at(live, "/metadata/labels").and_then(|l| l.get(OWNER_LABEL)).and_then(Value::as_str) == Some(owner)
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
}
