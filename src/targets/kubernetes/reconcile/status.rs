//! `ClusterSync` and `StackRelease` status of the Kubernetes target: built from a sync's change
//! set, keeping transition times of what did not change, and written with server-side apply to
//! the status subresource only when it changed.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::warn;

use super::super::error::kube_error;
use crate::config::Subscription;
use crate::model::cluster::ClusterConfig;
use crate::model::sync::MutexExt;
use crate::status::crd::{ClusterSync, ClusterSyncSpec, ClusterSyncStatus};

use crate::status::desired::summarise;

/// The field manager of every write, objects and status alike.
pub const MANAGER: &str = crate::model::manager::FIELD_MANAGER;

/// Now, as the status resources carry times. The one clock read of the status code: what is
/// decided from it ([`crate::status::desired`]) gets the time passed in.
pub(in crate::targets::kubernetes) fn now() -> String {
    crate::status::desired::timestamp(chrono::Utc::now())
}

/// Writes a status as it is (the apply-started note); the full write follows the apply. A
/// Cluster's first sync creates its ClusterSync here (owned by the Cluster), so even a first
/// install is recorded before its first object is written. What was written is kept in
/// `owner.written`, so the full write does not create it again.
///
/// # Errors
/// The management cluster refused the write or did not answer; the caller applies nothing.
pub(in crate::targets::kubernetes) async fn write_progress(
    api: &Api<ClusterSync>,
    sub: &Subscription,
    c: &ClusterConfig,
    owner: &Owner<'_>,
    mut status: ClusterSyncStatus,
) -> Result<(), kube::Error> {
    summarise(&mut status);
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": c.name}, "status": status});
    let params = PatchParams::apply(MANAGER).force();
    let known = owner.exists || owner.written.locked().is_some();
    if !known {
        // Known to be missing (the reconcile read it): created first, not asked for in vain.
        create(api, sub, c, owner).await?;
    }
    let written = match api.patch_status(&c.name, &params, &Patch::Apply(body.clone())).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            create(api, sub, c, owner).await?;
            api.patch_status(&c.name, &params, &Patch::Apply(body)).await?
        }
        other => other?,
    };
    *owner.written.locked() = Some(written);
    Ok(())
}

/// How often one reconcile tries a status write before it fails (and the controller retries
/// it with backoff).
pub(in crate::targets::kubernetes) const WRITE_ATTEMPTS: u32 = 3;

/// Runs `write` until it succeeds, at most [`WRITE_ATTEMPTS`] times, waiting the crate's backoff
/// between tries; only what may pass by itself soon (5xx, a timeout, a connection error) is
/// tried again. A 429 is not: the server said to wait, which the controller's retry of the
/// Cluster does (`Retry-After` is its lower bound) without holding this worker. Each try is
/// bounded by the management client's request timeout, so this is too.
///
/// # Errors
/// The last try's error.
pub(in crate::targets::kubernetes) async fn retried<T, F, Fut>(mut write: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match write().await {
            Err(e) if attempt < WRITE_ATTEMPTS && may_pass(&e) => {
                warn!(attempt, error = %kube_error(&e), "status write failed; trying again");
                tokio::time::sleep(crate::schedule::backoff(attempt)).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// Whether a failed request may succeed when simply sent again soon.
fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500,
        _ => true,
    }
}

/// Who a `ClusterSync` is about: its Cluster (the owner, so it is deleted with it) and the
/// subscription that covers it; and what this reconcile knows of the ClusterSync.
pub(in crate::targets::kubernetes) struct Owner<'a> {
    pub api_version: &'a str,
    pub uid: Option<&'a str>,
    /// The reconcile read it and it was there.
    pub exists: bool,
    /// As the apply-started write left it, when that was written.
    pub written: std::sync::Mutex<Option<ClusterSync>>,
    /// Its `stacksync.io/rotate-generated-at` annotation (`generated.rs`), if set.
    pub rotate_requested: Option<String>,
}

/// Creates the ClusterSync if needed (owned by its Cluster) and writes its status with
/// server-side apply (returning its uid, for Events), only when it changed — or when the last sync time is older than
/// `heartbeat`, so `LAST SYNC` shows the daemon is alive without a write per reconcile.
pub(in crate::targets::kubernetes) async fn write_cluster_sync(
    api: &Api<ClusterSync>,
    sub: &Subscription,
    c: &ClusterConfig,
    owner: &Owner<'_>,
    previous: Option<&ClusterSync>,
    mut status: ClusterSyncStatus,
    heartbeat: std::time::Duration,
) -> Result<Option<String>, kube::Error> {
    let spec = ClusterSyncSpec { cluster: c.name.clone(), subscription: sub.name.clone() };
    let params = PatchParams::apply(MANAGER).force();
    let owned = previous.is_some_and(|p| {
        owner.uid.is_none() || p.metadata.owner_references.as_ref().is_some_and(|r| r.iter().any(|r| Some(r.uid.as_str()) == owner.uid))
    });
    let (generation, uid) = match previous {
        Some(p) if p.spec == spec && owned => (p.metadata.generation, p.metadata.uid.clone()),
        _ => {
            let written = create(api, sub, c, owner).await?;
            (written.metadata.generation, written.metadata.uid)
        }
    };
    status.observed_generation = generation;
    summarise(&mut status);
    for cond in &mut status.conditions {
        cond.observed_generation = generation;
    }
    let old = previous.and_then(|p| p.status.as_ref());
    let fresh = old
        .and_then(|o| o.last_sync_time.as_deref())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| chrono::Utc::now().signed_duration_since(t).to_std().is_ok_and(|age| age < heartbeat));
    if let Some(o) = old
        && fresh
    {
        status.last_sync_time.clone_from(&o.last_sync_time);
        if o == &status {
            return Ok(uid);
        }
    }
    status.last_sync_time = Some(now());
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": c.name}, "status": status});
    api.patch_status(&c.name, &params, &Patch::Apply(body)).await?;
    Ok(uid)
}

/// Creates (or takes back) the ClusterSync of `c`: its spec, subscription label and owner (the
/// Cluster, so it is deleted with it).
async fn create(api: &Api<ClusterSync>, sub: &Subscription, c: &ClusterConfig, owner: &Owner<'_>) -> Result<ClusterSync, kube::Error> {
    let spec = ClusterSyncSpec { cluster: c.name.clone(), subscription: sub.name.clone() };
    let owner_refs = match owner.uid {
        Some(uid) => json!([{"apiVersion": owner.api_version, "kind": "Cluster", "name": c.name, "uid": uid}]),
        None => json!([]),
    };
    let body = json!({
        "apiVersion": "stacksync.io/v1alpha1",
        "kind": "ClusterSync",
        "metadata": {"name": c.name, "labels": {"stacksync.io/subscription": sub.name}, "ownerReferences": owner_refs},
        "spec": spec,
    });
    api.patch(&c.name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(body)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Reason;
    use crate::status::desired::shorten;

    #[test]
    fn the_message_column_is_the_first_line_shortened() {
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("first line\nsecond", 80), "first line");
        assert_eq!(shorten("ääääääääää", 5), "ääää…");
        let mut st = ClusterSyncStatus { synced: 2, total: 3, ..Default::default() };
        let v = |ready, reason, message: &str| crate::status::desired::Verdict { ready, reason, message: message.into() };
        let conditions = |v| crate::status::desired::conditions(&[], &v, "2026-11-26T00:00:00Z");
        st.conditions = conditions(v(false, Reason::NotSynced, "StorageClass/standard: no matches for kind"));
        summarise(&mut st);
        assert_eq!(st.objects, "2/3");
        assert_eq!(st.message, "StorageClass/standard: no matches for kind");
        st.conditions = conditions(v(true, Reason::Synced, "all synced"));
        summarise(&mut st);
        assert_eq!(st.message, "");
    }
}
