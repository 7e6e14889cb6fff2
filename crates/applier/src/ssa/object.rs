//! The one code path per object: read the live object, dry-run our apply, compare, and write only
//! on drift; and the one path that deletes an object only when it is ours. The batch in
//! `mod.rs` loops over these.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GetParams, Patch, PatchParams, Preconditions};
use serde_json::Value;

use super::answer::{self, Seen};
use super::error::{Error, Result};
use super::inventory::InventoryEntry;
use super::{Applier, DriftMode, diff};
use crate::Object;
use crate::health::{self, Health};
use crate::{Action, Entry, ObjectRef, SkipReason};

/// The policy annotation's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Apply,
    ApplyOnce,
    Ignore,
}

/// One object, resolved and ready to apply: everything the requests need.
pub struct Target<'a> {
    pub object: &'a Object,
    /// Its entry, with the namespace it really lives in; the action and message are filled in.
    pub entry: Entry,
    /// The resource serving its kind (what a listing of the kind asks for).
    pub resource: Arc<ApiResource>,
    /// The manifest as sent, serialized once: defaulted namespace, our owner label. Its sha256
    /// is the inventory's digest.
    pub body: Vec<u8>,
    pub inventory: InventoryEntry,
    pub policy: Policy,
    pub force: bool,
    pub recreate: bool,
    /// The digest the previous sync applied this object with, if it did.
    pub previous_digest: Option<String>,
    /// The hash of our fields the previous sync recorded for it, if it did.
    pub previous_fields: Option<String>,
    /// The fields its chart generates at render time (JSON pointers, [`super::generated`]):
    /// their live values are kept.
    pub generated: Vec<String>,
}

impl Target<'_> {
    /// A kube API handle for the object's kind and namespace (for the rarer requests: delete,
    /// re-create, wait; applies and reads build their requests from `resource` directly).
    pub fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match &self.inventory.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &*self.resource),
            None => Api::all_with(client.clone(), &*self.resource),
        }
    }

    /// The same target with the live values kept at `pointers`, fields the chart generates at
    /// render time ([`super::generated`]); `None` when there are none or they are the live
    /// values already.
    pub(super) fn with_generated_kept(&self, live: &Value, pointers: &[String]) -> Option<Target<'_>> {
        if pointers.is_empty() {
            return None;
        }
        let body: Value = serde_json::from_slice(&self.body).ok()?;
        let kept = super::generated::keep_live(&body, live, pointers)?;
        let mut t = self.clone_for_retry();
        t.body = serde_json::to_vec(&kept).ok()?;
        Some(t)
    }

    /// The soonest renewal among the certificates it generates, as it sends them.
    pub(super) fn renewal(&self) -> Option<super::generated::Validity> {
        if self.generated.is_empty() {
            return None;
        }
        let body: Value = serde_json::from_slice(&self.body).ok()?;
        super::generated::soonest_renewal(&body, &self.generated)
    }

    /// The same target, for a second request (the API handle and body are cheap to clone).
    fn clone_for_retry(&self) -> Target<'_> {
        Target {
            object: self.object,
            entry: self.entry.clone(),
            resource: self.resource.clone(),
            body: self.body.clone(),
            inventory: self.inventory.clone(),
            policy: self.policy,
            force: self.force,
            recreate: self.recreate,
            previous_digest: self.previous_digest.clone(),
            previous_fields: self.previous_fields.clone(),
            generated: self.generated.clone(),
        }
    }
}

/// The message of an object found with a `deletionTimestamp`.
const BEING_DELETED: &str = "being deleted (it has a deletionTimestamp, finalizers pending); created again once it is gone";

/// What became of one object.
pub struct Outcome {
    pub entry: Entry,
    /// Set when the live object differed from an unchanged manifest (corrected or only reported).
    pub drifted: Option<Vec<String>>,
    /// The object's health as the server showed it after this sync (`None`: not looked at).
    pub health: Option<Health>,
    /// Failed for a reason that may pass by itself (timeout, 5xx, 429, connection).
    pub transient: bool,
    /// Hash of our fields on the object as the server showed it after this sync, when the live
    /// object is now what our apply makes it (created, configured, unchanged): the inventory
    /// records it and the next sync's listing compares with it.
    pub fields: Option<String>,
    /// The soonest renewal among the certificates it generates that this sync saw live or sent
    /// (`None`: none, or not looked at).
    pub renewal: Option<super::generated::Validity>,
    /// Not applied: its render holds stand-ins for a generated field that has no live value
    /// ([`super::ApplyOptions::generated_stand_ins`]).
    pub stand_ins_refused: bool,
}

impl Outcome {
    pub fn new(entry: &Entry, action: Action, message: impl Into<String>) -> Outcome {
        Outcome {
            entry: Entry { action, message: message.into(), ..entry.clone() },
            drifted: None,
            health: None,
            transient: false,
            fields: None,
            renewal: None,
            stand_ins_refused: false,
        }
    }

    /// Records the hash of our fields as `object` shows them.
    fn with_fields(self, object: &Value, field_manager: &str) -> Outcome {
        Outcome { fields: diff::our_fields(object, field_manager).map(diff::fields_hash), ..self }
    }

    /// Records our fields and the health of the object as the server showed it.
    fn with_seen(self, seen: &Seen) -> Outcome {
        Outcome { fields: seen.fields.clone(), health: Some(seen.health.clone()), ..self }
    }

    fn with_drift(self, drifted: Option<Vec<String>>) -> Outcome {
        Outcome { drifted, ..self }
    }

    fn with_health(self, object: &Value) -> Outcome {
        Outcome { health: Some(health::assess(object)), ..self }
    }

    /// `cluster_down`: the cluster stopped answering this sync ([`super::Reach`]); the sync says
    /// that once for the cluster, so each object's failure is only a DEBUG line.
    fn failed(entry: &Entry, error: &Error, manager: &super::Manager, cluster_down: bool) -> Outcome {
        // The error's Display names the operation and object only; the cause is in the message.
        let message = error.message(manager);
        if cluster_down {
            tracing::debug!(object = %entry.object, error = %error, %message, "apply failed: the cluster stopped answering");
        } else {
            tracing::warn!(object = %entry.object, error = %error, %message, kind = error.kind(), transient = error.is_transient(), "apply failed");
        }
        Outcome { transient: error.is_transient(), ..Outcome::new(entry, Action::Failed, message) }
    }
}

/// What [`Applier::delete_owned`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// Nothing to delete.
    Absent,
    /// Left alone: the live object's owner label (if any) is not ours.
    NotOurs(Option<String>),
    Deleted,
}

impl Applier {
    /// Applies one object. Idempotent: when the live object is already as the manifest wants it,
    /// it makes a read and a dry-run and writes nothing. Never panics or returns early for the
    /// batch: every error is the object's Failed outcome.
    /// `fresh`: new to the inventory and not listed as ours, so applied at once.
    pub(super) async fn apply_one(&self, t: &Target<'_>, fresh: bool) -> Outcome {
        match self.try_apply(t, fresh).await {
            Ok(outcome) => outcome,
            // The live object differs in an immutable field from a manifest that did not change
            // (someone re-created it by hand): drift, which warn mode reports and never corrects,
            // least of all by deleting the object.
            Err(e) if e.is_immutable() && !release_changed(t) && self.options.drift == DriftMode::Warn => {
                let message = format!("drifted: an immutable field differs ({})", e.server_message());
                Outcome::new(&t.entry, Action::Skipped(SkipReason::Drifted), message).with_drift(Some(Vec::new()))
            }
            Err(e) if e.is_immutable() && t.recreate => match self.stand_ins_unkept(t, None) {
                // Re-created, it would get the stand-ins.
                Some(refused) => refused,
                None => self.recreate(t, &e).await,
            },
            Err(e) => {
                if e.is_not_found() {
                    // The kind may no longer be served: the next sync asks discovery again.
                    self.discovery.forget(&t.object.api_version);
                }
                Outcome::failed(&t.entry, &e, &self.options.manager, self.reach.down().is_some())
            }
        }
    }

    async fn try_apply(&self, t: &Target<'_>, fresh: bool) -> Result<Outcome> {
        if fresh {
            if let Some(refused) = self.stand_ins_unkept(t, None) {
                return Ok(refused);
            }
            return self.apply_new(t).await;
        }
        let live = self.within("reading", &t.entry.object, self.get_value(t)).await?;
        let live = live.map_err(|source| Error::Get { object: t.entry.object.clone(), source })?;
        if let Some(refused) = self.stand_ins_unkept(t, live.as_ref()) {
            return Ok(refused);
        }
        let Some(live) = live else {
            // Absent: nothing to compare with and nothing to overwrite, in any drift mode.
            let created = self.patch(t).await?;
            return Ok(Outcome::new(&t.entry, Action::Created, "").with_seen(&created));
        };
        if answer::being_deleted(&live) {
            // A dry-run or a write would "succeed" on it, yet it is about to vanish (finalizers
            // pending): not synced. Once it is gone the next sync creates it.
            return Ok(Outcome::new(&t.entry, Action::Failed, BEING_DELETED));
        }
        if t.policy == Policy::ApplyOnce {
            return Ok(Outcome::new(&t.entry, Action::Skipped(SkipReason::ApplyOnceExists), crate::changeset::SKIPPED_APPLY_ONCE)
                .with_health(&live));
        }
        // Values the chart generates at render time stay as they are live.
        let kept;
        let keep: &[String] = if self.options.rotate_generated { &[] } else { &t.generated };
        let t = match t.with_generated_kept(&live, keep) {
            Some(k) => {
                kept = k;
                &kept
            }
            None => t,
        };
        let renewal = t.renewal();
        self.apply_over(t, &live).await.map(|o| Outcome { renewal, ..o })
    }

    /// With [`super::ApplyOptions::generated_stand_ins`], the outcome of an object not to apply:
    /// a generated field its render has would not get a live value (`live` lacks it, or there is
    /// no live object, or this sync rotates), so the stand-in would go out. `None`: apply it.
    fn stand_ins_unkept(&self, t: &Target<'_>, live: Option<&Value>) -> Option<Outcome> {
        if !self.options.generated_stand_ins || t.generated.is_empty() {
            return None;
        }
        let body: Value = serde_json::from_slice(&t.body).ok()?;
        let live = live.filter(|_| !self.options.rotate_generated);
        let unkept = super::generated::unkept(&body, live, &t.generated);
        if unkept.is_empty() {
            return None;
        }
        let message = format!(
            "not applied: generated at render time ({}) with no live value to keep, and this render \
             holds stand-ins there (rendered without making keys); it is rendered for real and applied \
             at the next sync",
            unkept.join(", ")
        );
        tracing::debug!(object = %t.entry.object, fields = %unkept.join(","), "a stand-in render is not applied where nothing generated is live");
        Some(Outcome { transient: true, stand_ins_refused: true, ..Outcome::new(&t.entry, Action::Failed, message) })
    }

    /// The full path's apply over the `live` object: a dry-run first, then a write only where
    /// something changes (drift is corrected or only reported by the drift mode).
    async fn apply_over(&self, t: &Target<'_>, live: &Value) -> Result<Outcome> {
        let live = live.clone();
        let health = health::assess(&live);
        // Forced, so the dry-run shows the object as the manifest wants it even where another
        // manager holds a field; whether we may take it is decided by the real write.
        let dry_params = PatchParams { dry_run: true, ..PatchParams::apply(self.options.manager.field_manager()).force() };
        let dry = self.within("dry-run apply", &t.entry.object, self.apply_request(t, &dry_params)).await?;
        let dry = dry.and_then(|(bytes, _)| whole(&bytes));
        let dry = dry.map_err(|source| Error::DryRun { object: t.entry.object.clone(), source })?;
        let changed = diff::changed_paths(&live, &dry);
        let manager = self.options.manager.field_manager();
        if changed.is_empty() && diff::our_fields(&live, manager) == diff::our_fields(&dry, manager) {
            return Ok(Outcome { health: Some(health), ..Outcome::new(&t.entry, Action::Unchanged, "").with_fields(&dry, manager) });
        }
        let release_changed = release_changed(t);
        let drifted = (!release_changed && !changed.is_empty()).then_some(changed);
        if !release_changed && self.options.drift == DriftMode::Warn {
            let outcome = match drifted {
                Some(paths) => Outcome::new(&t.entry, Action::Skipped(SkipReason::Drifted), format!("drifted: {}", diff::describe(&paths)))
                    .with_drift(Some(paths)),
                // Only ownership would change: nothing a user would call drift.
                None => Outcome::new(&t.entry, Action::Unchanged, ""),
            };
            return Ok(Outcome { health: Some(health), ..outcome });
        }
        let (applied, took_over) = self.patch_taking_back(t).await?;
        let mut message = drifted.as_deref().map(|p| format!("corrected drift: {}", diff::describe(p))).unwrap_or_default();
        if let Some(managers) = took_over {
            message = format!("{message}{}taken back from {managers}", if message.is_empty() { "" } else { ", " });
        }
        Ok(Outcome::new(&t.entry, Action::Configured, message).with_drift(drifted).with_seen(&applied))
    }

    /// An object new to the inventory and not listed as ours: applied at once, without a read or
    /// a dry-run first (server-side apply creates what is absent), so a cold sync costs one
    /// request per object (and one LIST per kind).
    /// Nothing of another manager is overwritten: without force a field another manager holds
    /// with another value is a conflict, as on the full path (taken back only from the managers
    /// of [`super::AdoptionPolicy::take_back_from`]). The server's answer tells created (201) from
    /// existing (200); there is no drift to report for an object we never applied. An object
    /// found being deleted is not synced, as on the full path.
    async fn apply_new(&self, t: &Target<'_>) -> Result<Outcome> {
        let (applied, created, took_over) = self.patch_taking_back_reporting(t).await?;
        if applied.deleting {
            return Ok(Outcome::new(&t.entry, Action::Failed, BEING_DELETED));
        }
        let outcome = match (created, took_over) {
            (true, _) => Outcome::new(&t.entry, Action::Created, ""),
            // As the full path reports an object it finds and applies for a changed manifest.
            (false, None) => Outcome::new(&t.entry, Action::Configured, ""),
            (false, Some(managers)) => Outcome::new(&t.entry, Action::Configured, format!("taken back from {managers}")),
        };
        Ok(Outcome { renewal: t.renewal(), ..outcome.with_seen(&applied) })
    }

    /// Applies; when that conflicts only with managers a human uses (`kubectl edit`, `kubectl
    /// patch`, …: [`super::AdoptionPolicy::take_back_from`]), applies again taking the fields back, as
    /// Flux does. A conflict with any other manager (another controller) stays a conflict.
    /// Returns the object and, when fields were taken back, from whom.
    async fn patch_taking_back(&self, t: &Target<'_>) -> Result<(Seen, Option<String>)> {
        self.patch_taking_back_reporting(t).await.map(|(o, _, took_over)| (o, took_over))
    }

    /// As [`Applier::patch_taking_back`], also telling whether the (first) apply created the object.
    async fn patch_taking_back_reporting(&self, t: &Target<'_>) -> Result<(Seen, bool, Option<String>)> {
        match self.patch_reporting(t).await {
            Ok((o, created)) => Ok((o, created, None)),
            Err(e) if !t.force => {
                let managers = e.conflicting_managers();
                if !self.options.adoption.takes_back(&managers) {
                    return Err(e);
                }
                let forced = Target { force: true, ..t.clone_for_retry() };
                let applied = self.patch(&forced).await?;
                let who = managers.iter().map(|m| format!("\"{m}\"")).collect::<Vec<_>>().join(", ");
                tracing::info!(object = %t.entry.object, managers = %who, "fields changed by hand were taken back");
                Ok((applied, false, Some(who)))
            }
            Err(e) => Err(e),
        }
    }

    async fn patch(&self, t: &Target<'_>) -> Result<Seen> {
        self.patch_reporting(t).await.map(|(o, _)| o)
    }

    /// Applies, and tells whether the apply created the object (the server answered 201).
    async fn patch_reporting(&self, t: &Target<'_>) -> Result<(Seen, bool)> {
        let mut params = PatchParams::apply(self.options.manager.field_manager());
        params.force = t.force;
        let applied = self.within("applying", &t.entry.object, self.apply_request(t, &params)).await?;
        let applied = applied.and_then(|(bytes, code)| {
            Ok((Seen::from_slice(&bytes, self.options.manager.field_manager()).map_err(kube::Error::SerdeError)?, code))
        });
        let (applied, code) = applied.map_err(|source| Error::Patch { object: t.entry.object.clone(), source })?;
        tracing::debug!(object = %t.entry.object, "applied");
        Ok((applied, code == 201))
    }

    /// The apply PATCH as `Api::patch` sends it (the body serialized once, in `prepare`): the
    /// answer's bytes and status code.
    pub(super) async fn apply_request(&self, t: &Target<'_>, params: &PatchParams) -> kube::Result<(Bytes, u16)> {
        let url = <DynamicObject as kube::Resource>::url_path(&*t.resource, t.inventory.namespace.as_deref());
        // kube builds the URL, query and headers; the body is swapped for the bytes we have.
        let request = kube::core::Request::new(url).patch(&t.object.name, params, &Patch::Apply(())).map_err(kube::Error::BuildRequest)?;
        self.send(request.map(|_| t.body.clone())).await
    }

    /// The live object, as `Api::get_opt` reads it (absent: `None`).
    async fn get_value(&self, t: &Target<'_>) -> kube::Result<Option<Value>> {
        let url = <DynamicObject as kube::Resource>::url_path(&*t.resource, t.inventory.namespace.as_deref());
        let request = kube::core::Request::new(url).get(&t.object.name, &GetParams::default()).map_err(kube::Error::BuildRequest)?;
        match self.send(request).await {
            Ok((bytes, _)) => whole(&bytes).map(Some),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends one request: the answer's bytes (read as the caller needs them, no typed object in
    /// between) and status code; an error answer as kube reads one.
    pub(super) async fn send(&self, request: hyper::http::Request<Vec<u8>>) -> kube::Result<(Bytes, u16)> {
        self.reach.send(self.send_now(request)).await
    }

    async fn send_now(&self, request: hyper::http::Request<Vec<u8>>) -> kube::Result<(Bytes, u16)> {
        use http_body_util::BodyExt;
        let response = self.client.send(request.map(kube::client::Body::from)).await?;
        let code = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        if code >= 400 {
            // As kube reads an error answer: the server's Status, or one made of its text.
            let status = serde_json::from_slice::<kube::core::Status>(&bytes).unwrap_or_else(|_| {
                kube::core::Status::failure(String::from_utf8_lossy(&bytes).trim(), "Failed to parse error data").with_code(code)
            });
            return Err(kube::Error::Api(status.boxed()));
        }
        Ok((bytes, code))
    }

    /// Deletes and re-creates an object whose change the server refused as immutable (the
    /// object opted in with the recreate annotation).
    async fn recreate(&self, t: &Target<'_>, cause: &Error) -> Outcome {
        let result = async {
            let name = &t.object.name;
            let api = t.api(&self.client);
            let live = self.within("reading", &t.entry.object, api.get_opt(name)).await?;
            let live = live.map_err(|source| Error::Get { object: t.entry.object.clone(), source })?;
            if let Some(live) = live {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid: live.metadata.uid.clone(), resource_version: None }),
                    ..DeleteParams::background()
                };
                let deleted = self.within("deleting", &t.entry.object, api.delete(name, &dp)).await?;
                deleted.map_err(|source| Error::Delete { object: t.entry.object.clone(), source })?;
                self.await_gone(&api, name, live.metadata.uid.as_deref(), &t.entry.object).await?;
            }
            self.patch(t).await
        };
        match result.await {
            Ok(o) => {
                Outcome::new(&t.entry, Action::Configured, format!("re-created: {}", cause.message(&self.options.manager))).with_seen(&o)
            }
            Err(e) => Outcome::failed(&t.entry, &e, &self.options.manager, self.reach.down().is_some()),
        }
    }

    async fn await_gone(&self, api: &Api<DynamicObject>, name: &str, uid: Option<&str>, object: &ObjectRef) -> Result<()> {
        let wait = self.options.delete_wait;
        let mut backoff = Backoff::until(wait);
        loop {
            let live = self.within("reading", object, api.get_opt(name)).await?;
            let live = live.map_err(|source| Error::Get { object: object.clone(), source })?;
            if live.is_none_or(|l| l.metadata.uid.as_deref() != uid) {
                return Ok(());
            }
            if !backoff.wait().await {
                return Err(Error::AwaitDeletion { object: object.clone(), wait });
            }
        }
    }

    /// Waits until a CRD reports `Established`, bounded by `crd_wait`.
    pub(super) async fn await_established(&self, t: &Target<'_>) -> Result<()> {
        let wait = self.options.crd_wait;
        let mut backoff = Backoff::until(wait);
        let last = loop {
            let live = self.within("reading", &t.entry.object, t.api(&self.client).get_opt(&t.object.name)).await?;
            let live = live.map_err(|source| Error::Get { object: t.entry.object.clone(), source })?;
            let condition = live.as_ref().and_then(|l| {
                crate::health::at(&l.data, "/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Established").cloned()
            });
            if condition.as_ref().is_some_and(|c| c["status"] == "True") {
                return Ok(());
            }
            if !backoff.wait().await {
                break condition.as_ref().and_then(|c| c["message"].as_str()).unwrap_or_default().to_string();
            }
        };
        let detail = if last.is_empty() { String::new() } else { format!(": {last}") };
        Err(Error::Establish { object: t.entry.object.clone(), wait, detail })
    }

    /// Deletes the object only when its owner label is ours (with the live uid as a
    /// precondition, so a re-created object of someone else is never hit).
    pub(super) async fn delete_owned(&self, api: &Api<DynamicObject>, name: &str, object: &ObjectRef) -> Result<Deletion> {
        let live = self.within("reading", object, api.get_opt(name)).await?;
        let live = live.map_err(|source| Error::Get { object: object.clone(), source })?;
        let Some(live) = live else { return Ok(Deletion::Absent) };
        let label = live.metadata.labels.as_ref().and_then(|l| l.get(self.options.manager.owner_label())).cloned();
        if label.as_deref() != Some(self.owner_value.as_str()) {
            return Ok(Deletion::NotOurs(label));
        }
        if live.metadata.deletion_timestamp.is_some() {
            return Ok(Deletion::Deleted);
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: live.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::background()
        };
        match self.within("deleting", object, api.delete(name, &dp)).await? {
            Ok(_) => {
                tracing::debug!(object = %object, "deleted");
                Ok(Deletion::Deleted)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deletion::Absent),
            Err(source) => Err(Error::Delete { object: object.clone(), source }),
        }
    }

    /// Bounds one request by `request_timeout`: the outer error is the timeout, the inner
    /// result the request's own, so each call site still picks its error variant.
    pub(super) async fn within<T>(
        &self,
        operation: &'static str,
        object: &ObjectRef,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<kube::Result<T>> {
        let after = self.options.request_timeout;
        tokio::time::timeout(after, request).await.map_err(|_| Error::Timeout { operation, object: object.clone(), after })
    }
}

/// The pauses of a check repeated until `wait` has passed: from 50 ms, doubled up to 1 s. (A
/// loop rather than a function taking an async closure: futures of async closures that borrow
/// are not provably `Send`, and the controller spawns the applier's futures.)
pub(super) struct Backoff {
    deadline: tokio::time::Instant,
    delay: Duration,
}

impl Backoff {
    pub(super) fn until(wait: Duration) -> Backoff {
        Backoff { deadline: tokio::time::Instant::now() + wait, delay: Duration::from_millis(50) }
    }

    /// Sleeps before the next check; false when the time is up (check no more).
    pub(super) async fn wait(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if now >= self.deadline {
            return false;
        }
        tokio::time::sleep(self.delay.min(self.deadline.saturating_duration_since(now))).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(1));
        true
    }
}

/// Whether the manifest differs from the one the previous sync applied (or is new).
fn release_changed(t: &Target<'_>) -> bool {
    t.previous_digest.as_deref() != Some(t.inventory.digest.as_str())
}

/// An answer read whole (the full path compares live and dry-run objects field by field).
pub(super) fn whole(bytes: &[u8]) -> kube::Result<Value> {
    serde_json::from_slice(bytes).map_err(kube::Error::SerdeError)
}

pub(super) fn to_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}
