//! Which Clusters a rollout moves and along which path (pure): those on an older release of a
//! family the subscription follows, one Kubernetes minor at a time, each minor on its newest
//! offered release.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::super::reconcile::decide::topology_class;
use crate::model::version::Families;
use crate::model::version::Version;
use crate::status::crd::{ClusterPath, FailedCluster, RolloutStatus, WaveStatus};

use super::{LEFT_ALONE, Member};

/// The Clusters a rollout to `target_tag` moves: the members whose class is an older release of
/// a family the subscription follows (of the same stack, or of its line at an older Kubernetes
/// minor), with whether each is a canary. `None` when the tag is not a version.
pub fn older(members: &BTreeMap<String, Member>, target_tag: &str, families: Families<'_>) -> Option<Vec<(String, bool)>> {
    let to = Version::from_tag(target_tag)?;
    Some(members.iter().filter(|(_, m)| on_older(&m.obj.data, &to, families)).map(|(k, m)| (k.clone(), m.canary)).collect())
}

/// Whether `cluster`'s class names an older release than `target_tag` of a family the
/// subscription follows: a Cluster the rollout is to move.
pub fn is_older(cluster: &Value, target_tag: &str, families: Families<'_>) -> bool {
    Version::from_tag(target_tag).is_some_and(|to| on_older(cluster, &to, families))
}

pub(super) fn on_older(cluster: &Value, to: &Version, families: Families<'_>) -> bool {
    topology_class(cluster)
        .and_then(|c| Version::from_tag(&c))
        .filter(|v| families.covers_version(v))
        .and_then(|v| v.order(to))
        .is_some_and(|o| o == std::cmp::Ordering::Less)
}

/// Why a Cluster has no path to the target: no release of a Kubernetes minor between theirs is
/// offered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no release of Kubernetes {major}.{minor} is offered: a Cluster moves one minor at a time")]
pub struct NoPath {
    pub major: u64,
    pub minor: u64,
}

/// The classes a Cluster on `from` passes through to `target`, in order, the last `target`:
/// Cluster API moves a control plane one Kubernetes minor at a time, so each minor between
/// theirs is a step, on the newest release `offered` (tags, newest first) of that minor. One
/// step when they share a minor.
///
/// # Errors
/// [`NoPath`]: a minor between theirs has no release offered.
pub fn path(from: &str, target: &str, offered: &[String]) -> Result<Vec<String>, NoPath> {
    let minor = |tag: &str| -> Option<(u64, u64)> {
        Version::from_tag(tag).and_then(|v| v.family().and_then(crate::model::version::family_parts).map(|(_, k)| k))
    };
    let (Some((major, from_minor)), Some((target_major, target_minor))) = (minor(from), minor(target)) else {
        return Ok(vec![target.to_owned()]);
    };
    if major != target_major || from_minor >= target_minor {
        return Ok(vec![target.to_owned()]);
    }
    let mut steps = Vec::new();
    for m in from_minor + 1..target_minor {
        // `offered` is newest first: the first of the minor is its newest.
        match offered.iter().find(|t| minor(t) == Some((major, m))) {
            Some(t) => steps.push(t.clone()),
            None => return Err(NoPath { major, minor: m }),
        }
    }
    steps.push(target.to_owned());
    Ok(steps)
}

/// Where Cluster `key`, now on class `current`, goes next: the class after `current` on its
/// path, or the first when it is not on its path yet; `target` for a Cluster without a path.
pub fn next_stop(st: &RolloutStatus, key: &str, current: &str, target: &str) -> String {
    let Some(p) = path_of(st.plan.iter(), key) else { return target.to_owned() };
    match p.steps.iter().position(|s| s == current) {
        Some(i) => p.steps.get(i + 1).cloned().unwrap_or_else(|| target.to_owned()),
        None => p.steps.first().cloned().unwrap_or_else(|| target.to_owned()),
    }
}

/// The paths of the rollout's Clusters (`older`, read as `members`) to `target`, and those that
/// have none (a minor between theirs and the target's offers no release), as failures of no
/// wave (reason `NoPath`, left as they are).
pub fn paths(
    members: &BTreeMap<String, Member>,
    older: &[(String, bool)],
    target: &str,
    offered: &[String],
) -> (BTreeMap<String, Vec<String>>, Vec<FailedCluster>) {
    let (mut paths, mut none) = (BTreeMap::new(), Vec::new());
    for (key, _) in older {
        let class = members.get(key).and_then(|m| topology_class(&m.obj.data)).unwrap_or_default();
        match path(&class, target, offered) {
            Ok(p) => {
                paths.insert(key.clone(), p);
            }
            Err(why) => none.push(FailedCluster {
                cluster: key.clone(),
                wave: 0,
                reason: "NoPath".into(),
                message: format!("on {class}: {why}"),
                outcome: LEFT_ALONE.into(),
                detail: String::new(),
            }),
        }
    }
    (paths, none)
}

/// Why a rollout to `target` moves nobody although Clusters are not on it: `moving` Clusters
/// have a path and every one `left_out` has none (`NoPath`). `None` when some Cluster moves, or
/// none is left out for want of a path (then every Cluster runs the target already).
pub fn nothing_can_move(moving: usize, left_out: &[FailedCluster], target: &str) -> Option<String> {
    let no_path: Vec<&FailedCluster> = left_out.iter().filter(|f| f.reason == "NoPath").collect();
    let first = no_path.first()?;
    if moving > 0 {
        return None;
    }
    let (n, verb) = if no_path.len() == 1 { ("1 Cluster".to_owned(), "has") } else { (format!("{} Clusters", no_path.len()), "have") };
    Some(format!("nothing can move to {target}: {n} not on it {verb} no path to it ({}: {})", first.cluster, first.message))
}

pub(super) fn path_of<'w>(mut waves: impl Iterator<Item = &'w WaveStatus>, key: &str) -> Option<&'w ClusterPath> {
    waves.find_map(|w| w.paths.iter().find(|p| p.cluster == key))
}
