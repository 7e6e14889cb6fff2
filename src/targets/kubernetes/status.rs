//! `ClusterSync` and `StackRelease` status of the Kubernetes target: built from a sync's change
//! set, keeping transition times of what did not change, and written with server-side apply to
//! the status subresource only when it changed.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::warn;

use super::MANAGER;
use super::classes::ClassResult;
use crate::config::Subscription;
use crate::model::cluster::ClusterConfig;
use crate::release::Release;
use crate::status::crd::{
    ClusterSync, ClusterSyncSpec, ClusterSyncStatus, MAX_ENTRIES, StackRelease, StackReleaseSpec, StackReleaseStatus,
};

pub(super) use crate::status::desired::{entry, shorten, summarise};

/// Now, as the status resources carry times. The one clock read of the status code: what is
/// decided from it ([`crate::status::desired`]) gets the time passed in.
pub(super) fn now() -> String {
    crate::status::desired::timestamp(chrono::Utc::now())
}

/// Writes a status as it is (the apply-started note); the full write follows the apply. A
/// Cluster's first sync creates its ClusterSync here (owned by the Cluster), so even a first
/// install is recorded before its first object is written. What was written is kept in
/// `owner.written`, so the full write does not create it again.
///
/// # Errors
/// The management cluster refused the write or did not answer; the caller applies nothing.
pub(super) async fn write_progress(
    api: &Api<ClusterSync>,
    sub: &Subscription,
    c: &ClusterConfig,
    owner: &Owner<'_>,
    mut status: ClusterSyncStatus,
) -> Result<(), kube::Error> {
    summarise(&mut status);
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": c.name}, "status": status});
    let params = PatchParams::apply(MANAGER).force();
    let known = owner.exists || owner.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some();
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
    *owner.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(written);
    Ok(())
}

/// How often one reconcile tries a status write before it fails (and the controller retries
/// it with backoff).
pub(super) const WRITE_ATTEMPTS: u32 = 3;

/// Runs `write` until it succeeds, at most [`WRITE_ATTEMPTS`] times, waiting the crate's backoff
/// between tries; only what may pass by itself (5xx, 429, a timeout, a connection error) is
/// tried again. Each try is bounded by the management client's request timeout, so this is too.
///
/// # Errors
/// The last try's error.
pub(super) async fn retried<T, F, Fut>(mut write: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match write().await {
            Err(e) if attempt < WRITE_ATTEMPTS && may_pass(&e) => {
                warn!(attempt, error = %super::kube_error(&e), "status write failed; trying again");
                tokio::time::sleep(crate::schedule::backoff(attempt)).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// Whether a failed request may succeed when simply sent again.
fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        _ => true,
    }
}

/// Who a `ClusterSync` is about: its Cluster (the owner, so it is deleted with it) and the
/// subscription that covers it; and what this reconcile knows of the ClusterSync.
pub(super) struct Owner<'a> {
    pub api_version: &'a str,
    pub uid: Option<&'a str>,
    /// The reconcile read it and it was there.
    pub exists: bool,
    /// As the apply-started write left it, when that was written.
    pub written: std::sync::Mutex<Option<ClusterSync>>,
}

/// Creates the ClusterSync if needed (owned by its Cluster) and writes its status with
/// server-side apply (returning its uid, for Events), only when it changed — or when the last sync time is older than
/// `heartbeat`, so `LAST SYNC` shows the daemon is alive without a write per reconcile.
pub(super) async fn write_cluster_sync(
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

/// Records the release a subscription selected as a `StackRelease`.
pub(super) async fn record_release(
    mgmt: &kube::Client,
    events: &super::events::Events,
    sub: &Subscription,
    rel: &Release,
    (assets, signed_by): (&[crate::model::verification::AssetRecord], Option<&str>),
    applied: bool,
    class: Option<&ClassResult>,
) {
    let api: Api<StackRelease> = Api::all(mgmt.clone());
    let name = release_name(&sub.name, &rel.tag);
    let failing = class.map_or(0, |c| c.changes.entries.iter().filter(|e| !e.is_synced()).count());
    if failing > MAX_ENTRIES {
        // A cap that changes what a user sees: said where the operator looks.
        warn!(release = %name, cap = MAX_ENTRIES, more = failing - MAX_ENTRIES, "the StackRelease lists the first {MAX_ENTRIES} ClusterClass objects that are not synced; the others are not listed");
    }
    let status = StackReleaseStatus {
        version: rel.version.to_string(),
        commit: rel.commit.clone(),
        assets: assets
            .iter()
            .map(|a| crate::status::crd::AssetDigest {
                name: a.name.clone(),
                digest: a.digest.clone(),
                verified_by: a.verified_by.to_string(),
            })
            .collect(),
        verified: assets.iter().all(|a| a.verified_by != crate::model::verification::VerifiedBy::Unverified),
        verified_by: verified_by(assets, signed_by),
        signed_by: signed_by.unwrap_or_default().to_owned(),
        refusal: String::new(),
        cached: true,
        phase: if class.is_some_and(ClassResult::failed) {
            "Failed".into()
        } else if applied {
            "Applied".into()
        } else {
            "Selected".into()
        },
        conditions: Vec::new(),
        clusters: None,
        entries: class
            .map(|c| c.changes.entries.iter().filter(|e| !e.is_synced()).take(MAX_ENTRIES).map(|e| entry(e, &[], &now())).collect())
            .unwrap_or_default(),
        synced: class.map_or(0, |c| c.changes.entries.iter().filter(|e| e.is_synced()).count() as u32),
        total: class.map_or(0, |c| c.changes.entries.len() as u32),
        class_inventory: class.map(|c| c.inventory.clone()).unwrap_or_default(),
        rollout: None,
    };
    let spec = StackReleaseSpec { subscription: sub.name.clone(), source: sub.source.clone(), tag: rel.tag.clone() };
    let params = PatchParams::apply(MANAGER).force();
    let current = api.get_opt(&name).await.ok().flatten();
    let mut uid = current.as_ref().and_then(|c| c.metadata.uid.clone());
    if current.as_ref().map(|c| &c.spec) != Some(&spec) {
        let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "spec": spec});
        match api.patch(&name, &params, &Patch::Apply(body)).await {
            Ok(written) => uid = written.metadata.uid,
            Err(e) => {
                warn!(release = %name, error = %e, "cannot write StackRelease");
                return;
            }
        }
    }
    let old_status = current.as_ref().and_then(|c| c.status.clone());
    let problem = class.and_then(ClassResult::problem).unwrap_or_default();
    let newly_failed = (status.phase == "Failed" && old_status.as_ref().is_none_or(|o| o.phase != "Failed")).then_some(problem.as_str());
    let unverified = assets.iter().filter(|a| a.verified_by == crate::model::verification::VerifiedBy::Unverified).count();
    let evs = super::events::for_stack_release(&rel.tag, current.is_none(), unverified, newly_failed);
    events.stack_release(&name, uid, evs);
    // `conditions` and `clusters` belong to the roll-up (its own field manager): not compared,
    // not written here.
    // So does `rollout` (the rollout driver's).
    let unchanged = old_status.is_some_and(|c| StackReleaseStatus { conditions: Vec::new(), clusters: None, rollout: None, ..c } == status);
    if unchanged {
        return;
    }
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "status": status});
    if let Err(e) = api.patch_status(&name, &params, &Patch::Apply(body)).await {
        warn!(release = %name, error = %e, "cannot write StackRelease status");
    }
}

/// Records a release refused for its signature as a `StackRelease` in phase `Refused`: the
/// roll-up makes it `Ready=False` with reason `SignatureInvalid` and this message (the tag, the
/// signer found or `unsigned`, the trusted keys). Written only when it changed.
pub(super) async fn record_refused(mgmt: &kube::Client, sub: &Subscription, tag: &str, refusal: &crate::cache::SignatureRefusal) {
    let api: Api<StackRelease> = Api::all(mgmt.clone());
    let name = release_name(&sub.name, tag);
    let current = api.get_opt(&name).await.ok().flatten();
    let old = current.as_ref().and_then(|c| c.status.clone());
    if old.as_ref().is_some_and(|o| o.phase == "Refused" && o.refusal == refusal.message && o.commit == refusal.commit) {
        return;
    }
    let params = PatchParams::apply(MANAGER).force();
    let spec = StackReleaseSpec { subscription: sub.name.clone(), source: sub.source.clone(), tag: tag.to_owned() };
    if current.as_ref().map(|c| &c.spec) != Some(&spec) {
        let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "spec": spec});
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(body)).await {
            warn!(release = %name, error = %e, "cannot write StackRelease");
            return;
        }
    }
    let version = crate::model::version::Version::from_tag(tag).map(|v| v.to_string()).unwrap_or_default();
    let status = StackReleaseStatus {
        version,
        commit: refusal.commit.clone(),
        verified: false,
        verified_by: "refused".into(),
        signed_by: if refusal.signer == "unsigned" { String::new() } else { refusal.signer.clone() },
        refusal: refusal.message.clone(),
        cached: false,
        phase: "Refused".into(),
        ..StackReleaseStatus::default()
    };
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "status": status});
    if let Err(e) = api.patch_status(&name, &params, &Patch::Apply(body)).await {
        warn!(release = %name, error = %e, "cannot write StackRelease status");
    }
}

/// The `VERIFIEDBY` column: how the content was checked (`git`, `published`, `oci`, …) and,
/// for a signed release, who signed it: `git+ssh:SHA256:…`, `oci+cosign:SHA256:…`.
fn verified_by(assets: &[crate::model::verification::AssetRecord], signed_by: Option<&str>) -> String {
    let content = crate::source::github::verify::summary(assets.iter().map(|a| a.verified_by));
    match signed_by {
        Some(s) if !s.is_empty() => format!("{content}+{s}"),
        _ => content,
    }
}

/// `<subscription>.<tag>` made a valid object name.
pub(super) fn release_name(sub: &str, tag: &str) -> String {
    let raw: String = format!("{sub}.{tag}")
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
        .collect();
    raw.chars().take(253).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Reason;

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

    #[test]
    fn release_names_are_valid_object_names() {
        assert_eq!(release_name("ferrol", "docker-ferrol-1-27-v2"), "ferrol.docker-ferrol-1-27-v2");
        assert_eq!(release_name("s", "v1.2.3+build_7"), "s.v1.2.3-build-7");
    }
}
