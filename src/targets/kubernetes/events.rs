//! Kubernetes Events on `ClusterSync` and `StackRelease` (what `kubectl describe` and `kubectl
//! events` show): which are due is a pure function of the status before and after a reconcile
//! ([`for_cluster_sync`]); [`Events`] publishes them with kube-runtime's `Recorder`, which
//! folds a repeated event into a series (`x5 over 10m`) instead of writing a new one.
//!
//! Normal events are published on a change (applied, release available, paused, waiting);
//! Warnings on every reconcile that ends in them, so their series counts the attempts.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::debug;

use super::error::kube_error;
use crate::status::crd::{ClusterSyncStatus, Condition};

/// The `reportingController` of every event.
pub const CONTROLLER: &str = "stacksync.io/stacksync";

/// Largest event note (the API server refuses notes over 1 KiB).
const MAX_NOTE: usize = 1000;

/// Events queued at most; more are dropped (a flood of failures must not hold reconciles up).
const QUEUE: usize = 1024;

enum Job {
    Publish(ObjectReference, Vec<Event>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The process's event publisher: reconciles queue their events and go on; one task publishes
/// them in order with kube-runtime's `Recorder` (its dedup cache lives as long as the
/// controller), as client-go's broadcaster does. The task ends when the `Events` is dropped.
pub(super) struct Events {
    queue: tokio::sync::mpsc::Sender<Job>,
}

impl Events {
    /// `instance` tells replicas apart (the pod name, from `POD_NAME`, else the host name).
    /// Must be called within the Tokio runtime (it starts the publishing task).
    pub(super) fn new(client: kube::Client) -> Events {
        let instance = std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok()).filter(|s| !s.is_empty());
        let recorder = Recorder::new(client, Reporter { controller: CONTROLLER.into(), instance });
        let (queue, mut jobs) = tokio::sync::mpsc::channel::<Job>(QUEUE);
        tokio::spawn(async move {
            while let Some(job) = jobs.recv().await {
                match job {
                    Job::Publish(reference, events) => {
                        for ev in &events {
                            if let Err(e) = recorder.publish(ev, &reference).await {
                                debug!(reason = %ev.reason, error = %kube_error(&e), "cannot publish an event");
                            }
                        }
                    }
                    Job::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Events { queue }
    }

    /// Queues `events` about the ClusterSync `namespace/name` (`uid`: `kubectl describe`
    /// selects events by it). Best effort: an event that cannot be written, or finds the queue
    /// full, is dropped (events are a view, the status is the record).
    pub(super) fn cluster_sync(&self, namespace: &str, name: &str, uid: Option<String>, events: Vec<Event>) {
        if events.is_empty() {
            // The steady state of every Cluster: nothing is built for nothing to say.
            return;
        }
        let reference = ObjectReference {
            api_version: Some("stacksync.io/v1alpha1".into()),
            kind: Some("ClusterSync".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid,
            ..ObjectReference::default()
        };
        self.publish(reference, events);
    }

    /// Queues `events` about the (cluster-scoped) StackRelease `name`.
    pub(super) fn stack_release(&self, name: &str, uid: Option<String>, events: Vec<Event>) {
        let reference = ObjectReference {
            api_version: Some("stacksync.io/v1alpha1".into()),
            kind: Some("StackRelease".into()),
            name: Some(name.into()),
            uid,
            ..ObjectReference::default()
        };
        self.publish(reference, events);
    }

    fn publish(&self, reference: ObjectReference, events: Vec<Event>) {
        if !events.is_empty() && self.queue.try_send(Job::Publish(reference, events)).is_err() {
            debug!("event queue full; events dropped");
        }
    }

    /// Waits (at most `deadline`) until everything queued so far is published: before a
    /// `run --once` process exits.
    pub(super) async fn flush(&self, deadline: std::time::Duration) {
        let (done, published) = tokio::sync::oneshot::channel();
        if self.queue.send(Job::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(deadline, published).await;
        }
    }
}

pub(super) fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(crate::status::desired::shorten(&note, MAX_NOTE)),
        action: action.into(),
        secondary: None,
    }
}

fn ready(status: &ClusterSyncStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

fn has(status: &ClusterSyncStatus, type_: &str) -> bool {
    status.conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// The events a reconcile that turned `prev` into `next` is worth, having made `writes` writes
/// (`summary`: what the applier did, in words, asked only for an `Applied` event). A reconcile
/// that changed nothing is worth none, and allocates nothing to find that out.
pub(super) fn for_cluster_sync(
    prev: &ClusterSyncStatus,
    next: &ClusterSyncStatus,
    writes: usize,
    summary: impl FnOnce() -> String,
) -> Vec<Event> {
    let mut out = Vec::new();
    fn tag(s: &ClusterSyncStatus) -> Option<&str> {
        s.applied_release.as_ref().map(|r| r.tag.as_str())
    }
    let applied = tag(next);
    if let Some(newest) = &next.newest_available
        && next.newest_available != prev.newest_available
        && Some(newest.as_str()) != applied
    {
        let now = applied.unwrap_or("nothing");
        out.push(event(EventType::Normal, "ReleaseAvailable", "Poll", format!("{newest} is available (applied: {now})")));
    }
    let rotated = |s: &ClusterSyncStatus| s.generated_rotation.as_ref().and_then(|g| g.last_rotated.clone());
    if let Some(g) = next.generated_rotation.as_ref().filter(|_| rotated(next).is_some() && rotated(next) != rotated(prev)) {
        // Pointers and times only: never a value.
        let why = match g.last_reason.as_deref() {
            Some("CertificateDue") => "a generated certificate reached its renewal time",
            _ => "requested (stacksync rotate)",
        };
        let next_due = g.renew_at.as_deref().map(|r| format!("; the next renewal is due at {r}")).unwrap_or_default();
        out.push(event(
            EventType::Normal,
            "GeneratedRotated",
            "Rotate",
            format!("rotated the {} values its charts generate: {why}{next_due}", next.generated.len()),
        ));
    }
    for (type_, reason) in [("Paused", "Paused"), ("Suspended", "Suspended")] {
        if has(next, type_) && !has(prev, type_) {
            let note = next.conditions.iter().find(|c| c.type_ == type_).map(|c| c.message.clone()).unwrap_or_default();
            out.push(event(EventType::Normal, reason, "Reconcile", note));
        }
    }
    let Some(now) = ready(next) else { return out };
    let before = ready(prev);
    let changed = before.is_none_or(|b| b.status != now.status || b.reason != now.reason);
    match (now.status.as_str(), now.reason.as_str()) {
        ("True", _) if writes > 0 || tag(prev) != applied || changed => {
            let release = applied.unwrap_or("the release");
            out.push(event(EventType::Normal, "Applied", "Apply", format!("{release}: {}", summary())));
        }
        ("True", _) => {}
        // Rolling out: a stage waits for health. One event when it starts waiting.
        (_, "Progressing") if changed => out.push(event(EventType::Normal, "Waiting", "Apply", now.message.clone())),
        (_, "Progressing") => {}
        // A Cluster being provisioned: said once, not a warning.
        (_, reason @ ("ControlPlaneNotReady" | "KubeconfigMissing")) if changed => {
            out.push(event(EventType::Normal, reason, "Reconcile", now.message.clone()))
        }
        (_, "ControlPlaneNotReady" | "KubeconfigMissing") => {}
        (_, "Unhealthy") => out.push(event(EventType::Warning, "HealthTimedOut", "Apply", now.message.clone())),
        (_, "PrunePaused") => out.push(event(EventType::Warning, "PrunePaused", "Prune", now.message.clone())),
        (_, reason) => out.push(event(EventType::Warning, reason, "Reconcile", now.message.clone())),
    }
    out
}

/// The Warning of a reconcile that could not record that the apply of `tag` started (and so
/// applied nothing): `StatusWriteFailed`, with the management cluster's answer.
pub(super) fn progress_unrecorded(tag: &str, error: &str) -> Event {
    event(
        EventType::Warning,
        "StatusWriteFailed",
        "Apply",
        format!("cannot record that the apply of {tag} started ({error}); nothing was applied, retried with backoff"),
    )
}

/// The events of a StackRelease write: `created` when this release was first recorded,
/// `failed` when its ClusterClass could not be applied (with the first error).
pub(super) fn for_stack_release(tag: &str, created: bool, unverified: usize, failed: Option<&str>) -> Vec<Event> {
    let mut out = Vec::new();
    if created {
        out.push(event(EventType::Normal, "ReleaseAvailable", "Poll", format!("{tag} is offered")));
        if unverified > 0 {
            out.push(event(
                EventType::Warning,
                "Unverified",
                "Verify",
                format!("{tag}: {unverified} asset(s) have no digest to verify against (verify: bestEffort)"),
            ));
        }
    }
    if let Some(e) = failed {
        out.push(event(EventType::Warning, "ClassApplyFailed", "Apply", format!("{tag}: {e}")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::crd::ReleaseRefStatus;

    fn status(ready: &str, reason: &str, tag: Option<&str>, newest: Option<&str>) -> ClusterSyncStatus {
        ClusterSyncStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: reason.into(),
                message: format!("{reason} message"),
                last_transition_time: String::new(),
                observed_generation: None,
            }],
            applied_release: tag.map(|t| ReleaseRefStatus { tag: t.into(), ..ReleaseRefStatus::default() }),
            newest_available: newest.map(Into::into),
            ..ClusterSyncStatus::default()
        }
    }

    fn reasons(events: &[Event]) -> Vec<(String, bool)> {
        events.iter().map(|e| (e.reason.clone(), e.type_ == EventType::Warning)).collect()
    }

    #[test]
    fn events_by_transition() {
        let none = ClusterSyncStatus::default();
        let synced = status("True", "Synced", Some("v1"), Some("v1"));
        let r = |prev: &ClusterSyncStatus, next: &ClusterSyncStatus, writes| {
            reasons(&for_cluster_sync(prev, next, writes, || "1 created".into()))
        };
        // First apply; a quiet resync says nothing; a drift taken back does.
        assert_eq!(r(&none, &synced, 3), [("Applied".into(), false)]);
        assert_eq!(r(&synced, &synced, 0), []);
        assert_eq!(r(&synced, &synced, 1), [("Applied".into(), false)]);
        // A newer release appears while autoUpgrade is off.
        let offered = status("True", "Synced", Some("v1"), Some("v2"));
        assert_eq!(r(&synced, &offered, 0), [("ReleaseAvailable".into(), false)]);
        // Failures are Warnings every time (the Recorder counts them as a series).
        let failed = status("False", "NotSynced", Some("v1"), Some("v1"));
        assert_eq!(r(&synced, &failed, 0), [("NotSynced".into(), true)]);
        assert_eq!(r(&failed, &failed, 0), [("NotSynced".into(), true)]);
        assert_eq!(r(&synced, &status("False", "PrunePaused", Some("v1"), Some("v1")), 0), [("PrunePaused".into(), true)]);
        // Waiting for health once; timing out is a Warning.
        let waiting = status("False", "Progressing", Some("v1"), Some("v1"));
        assert_eq!(r(&synced, &waiting, 1), [("Waiting".into(), false)]);
        assert_eq!(r(&waiting, &waiting, 0), []);
        assert_eq!(r(&waiting, &status("False", "Unhealthy", Some("v1"), Some("v1")), 0), [("HealthTimedOut".into(), true)]);
        let provisioning = status("False", "ControlPlaneNotReady", None, Some("v1"));
        assert_eq!(r(&none, &provisioning, 0), [("ReleaseAvailable".into(), false), ("ControlPlaneNotReady".into(), false)]);
        assert_eq!(r(&provisioning, &provisioning, 0), []);
        // Recovery is an Applied event.
        assert_eq!(r(&failed, &synced, 0), [("Applied".into(), false)]);
        // A rotation of the generated values is said once, with no value in it.
        let rotation = |at: &str| crate::status::crd::GeneratedRotation {
            last_rotated: Some(at.into()),
            last_reason: Some("CertificateDue".into()),
            renew_at: Some("2028-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        let rotated = ClusterSyncStatus { generated_rotation: Some(rotation("2026-12-07T00:00:00Z")), ..synced.clone() };
        let events = for_cluster_sync(&synced, &rotated, 5, || "5 configured".into());
        assert_eq!(reasons(&events), [("GeneratedRotated".into(), false), ("Applied".into(), false)]);
        let note = events[0].note.clone().unwrap_or_default();
        assert!(note.contains("renewal time") && note.contains("2028-01-01"), "{note}");
        assert_eq!(r(&rotated, &rotated, 0), []);
    }

    #[test]
    fn pausing_is_told_once() {
        let synced = status("True", "Synced", Some("v1"), Some("v1"));
        let mut paused = synced.clone();
        paused.conditions.push(Condition {
            type_: "Paused".into(),
            status: "True".into(),
            reason: "Paused".into(),
            ..synced.conditions[0].clone()
        });
        assert_eq!(reasons(&for_cluster_sync(&synced, &paused, 0, String::new)), [("Paused".into(), false)]);
        assert_eq!(reasons(&for_cluster_sync(&paused, &paused, 0, String::new)), []);
    }

    #[test]
    fn stack_release_events() {
        assert_eq!(reasons(&for_stack_release("v2", true, 0, None)), [("ReleaseAvailable".into(), false)]);
        assert_eq!(reasons(&for_stack_release("v2", true, 2, None)), [("ReleaseAvailable".into(), false), ("Unverified".into(), true)]);
        assert_eq!(reasons(&for_stack_release("v2", false, 2, Some("boom"))), [("ClassApplyFailed".into(), true)]);
    }
}
