//! `StackRelease`s of the Kubernetes target: what a subscription selected, how it was verified,
//! its ClusterClass apply, or why its signature was refused; written with server-side apply,
//! only when they changed.

use std::collections::BTreeMap;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::warn;

use super::class_results::ClassResult;
use super::context::Kube;
use super::ledger::release_name;
use super::reconcile::status::{MANAGER, now};
use crate::config::Subscription;
use crate::release::Release;
use crate::status::crd::{MAX_ENTRIES, StackRelease, StackReleaseSpec, StackReleaseStatus};
use crate::status::desired::entry;
use crate::status::shards::{class_rollup, with_part};

/// Records the release a subscription selected as a `StackRelease` (and in the ledger): this
/// process's part (`status.shards[]`, what its ClusterClass apply gave) and the fleet's roll-up
/// of every part (`phase`, `entries`, `synced`, `total`), with what all shards share (digests,
/// verification, `classInventory`). The roll-up is written first (a new StackRelease needs its
/// required fields before a part can land), conditionally on the StackRelease read.
pub(super) async fn record_release(
    kube: &Kube,
    sub: &Subscription,
    rel: &Release,
    (assets, signed_by): (&[crate::model::verification::AssetRecord], Option<&str>),
    applied: bool,
    class: Option<&ClassResult>,
) {
    let api: Api<StackRelease> = Api::all(kube.mgmt.clone());
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
        // The roll-up of every part, below.
        phase: String::new(),
        conditions: Vec::new(),
        clusters: None,
        entries: Vec::new(),
        synced: 0,
        total: 0,
        // Merged with what the StackRelease records, below.
        class_inventory: Vec::new(),
        rollout: None,
        // Written with this shard's own field manager, below.
        shards: Vec::new(),
    };
    let spec = StackReleaseSpec { subscription: sub.name.clone(), source: sub.source.clone(), tag: rel.tag.clone() };
    let params = PatchParams::apply(MANAGER).force();
    let mut current = api.get_opt(&name).await.ok().flatten();
    let created = current.is_none();
    if current.as_ref().map(|c| &c.spec) != Some(&spec) {
        let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "spec": spec});
        match api.patch(&name, &params, &Patch::Apply(body)).await {
            // The StackRelease as it is now, its status included (also when the read failed).
            Ok(written) => current = Some(written),
            Err(e) => {
                warn!(release = %name, error = %e, "cannot write StackRelease");
                return;
            }
        }
    }
    // One writer of this process's parts at a time: the roll-up's Cluster counts and this.
    let mut written = kube.parts.lock().await;
    let mut part = kube.parts.base(&written, &name, current.as_ref());
    part.phase = if class.is_some_and(ClassResult::failed) {
        "Failed".into()
    } else if applied {
        "Applied".into()
    } else {
        "Selected".into()
    };
    part.entries = class
        .map(|c| c.changes.entries.iter().filter(|e| !e.is_synced()).take(MAX_ENTRIES).map(|e| entry(e, &[], &now())).collect())
        .unwrap_or_default();
    part.synced = class.map_or(0, |c| c.changes.entries.iter().filter(|e| e.is_synced()).count() as u32);
    part.total = class.map_or(0, |c| c.changes.entries.len() as u32);
    let uid = current.as_ref().and_then(|c| c.metadata.uid.clone());
    let mut version = current.as_ref().and_then(|c| c.metadata.resource_version.clone());
    let mut old_status = current.and_then(|c| c.status);
    let stored = old_status.as_ref().and_then(|o| o.shards.iter().find(|p| p.name == part.name)).cloned();
    let problem = class.and_then(ClassResult::problem).unwrap_or_default();
    // Failed here and not before: as this shard's part said, else (none yet) as the roll-up did.
    let failed_before = stored.as_ref().map(|p| p.phase.as_str()).or(old_status.as_ref().map(|o| o.phase.as_str()));
    let newly_failed = (part.phase == "Failed" && failed_before != Some("Failed")).then_some(problem.as_str());
    let unverified = assets.iter().filter(|a| a.verified_by == crate::model::verification::VerifiedBy::Unverified).count();
    let evs = super::events::for_stack_release(&rel.tag, created, unverified, newly_failed);
    kube.events.stack_release(&name, uid, evs);
    // The ClusterClass inventory is the fleet's, not this process's: what it applied is added to
    // what was recorded (by another shard, or before a restart), which pruning works from. So is
    // the roll-up of the parts. The write is conditional on the StackRelease read, so two shards
    // recording at once both land: the one that read an older StackRelease reads it again.
    for attempt in 1..=CONFLICT_RETRIES {
        let mut status = status.clone();
        let recorded = old_status.as_ref().map_or(&[][..], |o| &o.class_inventory[..]);
        status.class_inventory = class_inventory(recorded, class.map_or(&[][..], |c| &c.inventory[..]));
        let parts = with_part(old_status.as_ref().map_or(&[][..], |o| &o.shards[..]), &part);
        let fleet = class_rollup(&parts);
        (status.phase, status.entries, status.synced, status.total) = (fleet.phase, fleet.entries, fleet.synced, fleet.total);
        // `conditions` and `clusters` belong to the roll-up (its own field manager): not
        // compared, not written here. So does `rollout` (the rollout driver's), and each part
        // (its shard's).
        let unchanged = old_status.as_ref().is_some_and(|c| {
            StackReleaseStatus { conditions: Vec::new(), clusters: None, rollout: None, shards: Vec::new(), ..c.clone() } == status
        });
        if unchanged {
            break;
        }
        let mut metadata = json!({"name": name});
        if let Some(v) = &version {
            metadata["resourceVersion"] = json!(v);
        }
        let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": metadata, "status": status});
        let error = match api.patch_status(&name, &params, &Patch::Apply(body)).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < CONFLICT_RETRIES => match api.get_opt(&name).await {
                Ok(Some(again)) => {
                    version = again.metadata.resource_version.clone();
                    old_status = again.status;
                    continue;
                }
                Ok(None) => kube::Error::Api(e),
                Err(e) => e,
            },
            Err(e) => e,
        };
        warn!(release = %name, error = %error, "cannot write StackRelease status");
        return;
    }
    kube.ledger.note(&sub.name, &rel.tag, &rel.commit);
    let period = super::parts::heartbeat(kube.target().resync);
    if let Err(e) = kube.parts.write(&kube.mgmt, &mut written, &name, stored.as_ref(), part, period).await {
        warn!(release = %name, shard = kube.parts.name(), error = %e, "cannot write this shard's part of the StackRelease status");
    }
}

/// How many times a StackRelease's status is written when another writer changed it between the
/// read and the write (409 Conflict).
const CONFLICT_RETRIES: usize = 4;

/// A StackRelease's `classInventory` after this process applied `mine`: what was `recorded`
/// stays (another shard's namespaces, a namespace applied before a restart, none of which this
/// process applied), and `mine` is added, its line replacing a recorded one for the same object
/// (`group|kind|namespace|name`; the version and digests after it are what the apply saw).
/// Sorted, each object once: the same fleet always records the same list.
fn class_inventory(recorded: &[String], mine: &[String]) -> Vec<String> {
    let object = |line: &str| line.splitn(5, '|').take(4).collect::<Vec<_>>().join("|");
    let mut by_object: BTreeMap<String, &String> = BTreeMap::new();
    for line in recorded.iter().chain(mine) {
        by_object.insert(object(line), line);
    }
    by_object.into_values().cloned().collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_inventory_keeps_what_other_shards_and_earlier_processes_recorded() {
        let line = |ns: &str, name: &str, version: &str| {
            format!("cluster.x-k8s.io|ClusterClass|{ns}|{name}|{version}|c7e02d2ea87b65fb|4d9c40517307")
        };
        // Another shard (or this process before a restart) applied the class in `team-b`.
        let recorded = [line("team-b", "v2", "v1beta1")];
        let mine = [line("team-a", "v2", "v1beta1")];
        assert_eq!(class_inventory(&recorded, &mine), [line("team-a", "v2", "v1beta1"), line("team-b", "v2", "v1beta1")]);
        // The same object at the version served now: listed once, as applied now.
        let moved = [line("team-b", "v2", "v1beta2")];
        assert_eq!(class_inventory(&recorded, &moved), [line("team-b", "v2", "v1beta2")]);
        // Nothing applied here (a manifests release): what is recorded stays as it is.
        assert_eq!(class_inventory(&recorded, &[]), recorded);
        assert!(class_inventory(&[], &[]).is_empty());
    }
}
