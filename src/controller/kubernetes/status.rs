//! `ClusterSync` and `StackRelease` status of the Kubernetes target: built from a sync's change
//! set, keeping transition times of what did not change, and written with server-side apply to
//! the status subresource only when it changed.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::warn;

use super::{ClassResult, MANAGER};
use crate::apply::ChangeSet;
use crate::config::{ClusterConfig, Subscription};
use crate::release::Release;
use crate::status::crd::{
    ClusterSync, ClusterSyncSpec, ClusterSyncStatus, Condition, MAX_ENTRIES, ObjectEntry, ReleaseRefStatus, StackRelease, StackReleaseSpec,
    StackReleaseStatus,
};
use crate::status::{ClusterStatus, Reason};

pub(super) fn release_ref(r: &Release) -> ReleaseRefStatus {
    ReleaseRefStatus { tag: r.tag.clone(), version: r.version.to_string(), commit: r.commit.clone() }
}

pub(super) fn entry(e: &crate::apply::Entry, previous: &[ObjectEntry], now: &str) -> ObjectEntry {
    let (group, version) = match e.object.api_version.rsplit_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), e.object.api_version.clone()),
    };
    let namespace = e.object.namespace.clone().unwrap_or_default();
    let synced = e.is_synced();
    // The transition time stays while the object stays in the same state.
    let since = previous
        .iter()
        .find(|p| p.kind == e.object.kind && p.name == e.object.name && p.namespace == namespace && p.group == group && p.synced == synced)
        .map_or_else(|| now.to_owned(), |p| p.last_transition_time.clone());
    ObjectEntry {
        group,
        version,
        kind: e.object.kind.clone(),
        namespace,
        name: e.object.name.clone(),
        synced,
        action: e.action.to_string(),
        message: e.message.clone(),
        last_transition_time: since,
    }
}

pub(super) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Conditions for a status, keeping transition times of conditions whose status is unchanged.
pub(super) fn conditions(previous: &[Condition], ready: bool, reason: Reason, message: &str) -> Vec<Condition> {
    let stalled = matches!(reason, Reason::RenderFailed | Reason::NotSynced | Reason::PrunePaused);
    let reconciling = !ready && !stalled;
    let make = |type_: &str, on: bool, why: &str| {
        let status = if on { "True" } else { "False" };
        let since = previous.iter().find(|c| c.type_ == type_ && c.status == status).map_or_else(now, |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: why.into(),
            // A Ready cluster needs no explanation; every other condition carries the reason's message.
            message: if type_ == "Ready" && on { String::new() } else { message.to_owned() },
            last_transition_time: since,
            observed_generation: None,
        }
    };
    let why = format!("{reason:?}");
    vec![make("Ready", ready, &why), make("Reconciling", reconciling, &why), make("Stalled", stalled && !ready, &why)]
}

pub(super) fn applied_crd(
    prev: &ClusterSyncStatus,
    rel: &Release,
    st: &ClusterStatus,
    changes: &ChangeSet,
    inventory: Vec<String>,
    digest: String,
) -> ClusterSyncStatus {
    let now = now();
    let failing: Vec<ObjectEntry> =
        changes.entries.iter().filter(|e| e.is_release_object() && !e.is_synced()).map(|e| entry(e, &prev.entries, &now)).collect();
    let truncated = failing.len().saturating_sub(MAX_ENTRIES) as u32;
    ClusterSyncStatus {
        wanted_release: Some(release_ref(rel)),
        applied_release: Some(release_ref(rel)),
        synced: st.synced as u32,
        total: st.total as u32,
        conditions: conditions(&prev.conditions, st.ready, st.reason, &st.message),
        rendered_digest: digest,
        entries: failing.into_iter().take(MAX_ENTRIES).collect(),
        entries_truncated: truncated,
        inventory,
        observed_generation: None,
    }
}

pub(super) fn failed_crd(prev: &ClusterSyncStatus, wanted: Option<&Release>, st: &ClusterStatus) -> ClusterSyncStatus {
    ClusterSyncStatus {
        wanted_release: wanted.map(release_ref).or_else(|| prev.wanted_release.clone()),
        conditions: conditions(&prev.conditions, false, st.reason, &st.message),
        ..prev.clone()
    }
}

/// Creates the ClusterSync if needed and writes its status with server-side apply, only when it
/// changed.
pub(super) async fn write_cluster_sync(
    api: &Api<ClusterSync>,
    sub: &Subscription,
    c: &ClusterConfig,
    previous: Option<&ClusterSync>,
    mut status: ClusterSyncStatus,
) -> Result<(), kube::Error> {
    let spec = ClusterSyncSpec { cluster: c.name.clone(), subscription: sub.name.clone() };
    let params = PatchParams::apply(MANAGER).force();
    let generation = match previous {
        Some(p) if p.spec == spec => p.metadata.generation,
        _ => {
            let body = json!({
                "apiVersion": "stacksync.io/v1alpha1",
                "kind": "ClusterSync",
                "metadata": {"name": c.name, "labels": {"stacksync.io/subscription": sub.name}},
                "spec": spec,
            });
            api.patch(&c.name, &params, &Patch::Apply(body)).await?.metadata.generation
        }
    };
    status.observed_generation = generation;
    for cond in &mut status.conditions {
        cond.observed_generation = generation;
    }
    if previous.and_then(|p| p.status.as_ref()) == Some(&status) {
        return Ok(());
    }
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": c.name}, "status": status});
    api.patch_status(&c.name, &params, &Patch::Apply(body)).await?;
    Ok(())
}

/// Records the release a subscription selected as a `StackRelease`.
pub(super) async fn record_release(
    mgmt: &kube::Client,
    sub: &Subscription,
    rel: &Release,
    assets: &[crate::source::github::materialise::AssetRecord],
    applied: bool,
    class: Option<&ClassResult>,
) {
    let api: Api<StackRelease> = Api::all(mgmt.clone());
    let name = release_name(&sub.name, &rel.tag);
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
        verified: assets.iter().all(|a| a.verified_by != crate::source::github::verify::VerifiedBy::Unverified),
        verified_by: crate::source::github::verify::summary(assets.iter().map(|a| a.verified_by)),
        cached: true,
        phase: if class.is_some_and(|c| !c.errors.is_empty()) {
            "Failed".into()
        } else if applied {
            "Applied".into()
        } else {
            "Selected".into()
        },
        conditions: Vec::new(),
        entries: class
            .map(|c| c.changes.entries.iter().filter(|e| !e.is_synced()).take(MAX_ENTRIES).map(|e| entry(e, &[], &now())).collect())
            .unwrap_or_default(),
        synced: class.map_or(0, |c| c.changes.entries.iter().filter(|e| e.is_synced()).count() as u32),
        total: class.map_or(0, |c| c.changes.entries.len() as u32),
    };
    let spec = StackReleaseSpec { subscription: sub.name.clone(), source: sub.source.clone(), tag: rel.tag.clone() };
    let params = PatchParams::apply(MANAGER).force();
    let current = api.get_opt(&name).await.ok().flatten();
    if current.as_ref().map(|c| &c.spec) != Some(&spec) {
        let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "spec": spec});
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(body)).await {
            warn!(release = %name, error = %e, "cannot write StackRelease");
            return;
        }
    }
    if current.and_then(|c| c.status) == Some(status.clone()) {
        return;
    }
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "status": status});
    if let Err(e) = api.patch_status(&name, &params, &Patch::Apply(body)).await {
        warn!(release = %name, error = %e, "cannot write StackRelease status");
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

    #[test]
    fn release_names_are_valid_object_names() {
        assert_eq!(release_name("ferrol", "docker-ferrol-1-27-v2"), "ferrol.docker-ferrol-1-27-v2");
        assert_eq!(release_name("s", "v1.2.3+build_7"), "s.v1.2.3-build-7");
    }
}
