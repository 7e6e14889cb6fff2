//! The desired status, decided in one place. A reconcile finds things out (what it applied, what
//! failed, what is not healthy, why it stopped) and describes them as an [`Outcome`];
//! [`desired`] turns the previous `ClusterSync` status, that outcome and the time into the next
//! one — `Ready`, its reason and message, `Reconciling` and `Stalled` — and nothing else decides
//! them. [`rollup`] does the same for a `StackRelease`'s Clusters. Pure: no I/O, no clock (the
//! time is passed in), so every rule is table-tested below.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Reason;
use super::crd::{ClusterCounts, ClusterSync, ClusterSyncStatus, Condition, MAX_ENTRIES, ObjectEntry, ReleaseRefStatus, UpgradeStatus};
use crate::release::Release;
use applier::changeset::{ChangeSet, Entry, ObjectRef};
use applier::health::Health;

/// Width of the `MESSAGE` column's text.
pub const MESSAGE_COLUMN: usize = 80;

/// A time as the status resources carry it (RFC 3339, seconds).
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What one reconcile found, before any status is decided.
#[derive(Debug)]
pub enum Outcome<'a> {
    /// Nothing is written to the Cluster (it is paused, its subscription suspended): `Ready`
    /// stays what it was, a condition named after the reason says why.
    Held { reason: Reason, message: String },
    /// The reconcile stopped before applying anything. `transient`: it may pass by itself
    /// (Reconciling, retried with backoff); otherwise it needs a change (Stalled), and `cause`
    /// is the error's own stable reason, given to the `Stalled` condition.
    Failed { wanted: Option<&'a Release>, reason: Reason, message: String, transient: bool, cause: Option<&'static str> },
    /// The apply of `release` (`objects` objects) is about to start: the status must not claim
    /// the old release any more.
    Started { release: &'a Release, objects: usize },
    /// An upgrade stage of `release` waits (`failed: false`) or failed: the applied release and
    /// its objects stay.
    Upgrade { release: &'a Release, upgrade: UpgradeStatus, message: String, failed: bool },
    /// The release was applied (every object tried).
    Applied(Applied<'a>),
}

/// What applying a release found.
#[derive(Debug)]
pub struct Applied<'a> {
    pub release: &'a Release,
    pub changes: &'a ChangeSet,
    /// Pruning stopped at `pruneLimit`: why.
    pub prune_paused: Option<&'a str>,
    /// The failed objects whose failures may pass by themselves (a timeout, 5xx, 429).
    pub transient: &'a [ObjectRef],
    /// Objects synced but not healthy, and how; judged only with a `health_timeout`.
    pub unhealthy: &'a [(ObjectRef, Health)],
    pub health_timeout: Option<Duration>,
    /// What the values templates printed as `<no value>` / `<nil>`.
    pub warnings: &'a [String],
    pub inventory: Vec<String>,
    pub digest: String,
    /// What rendered the release's charts (`status.renderedBy`); empty for manifests.
    pub rendered_by: String,
    pub upgrade: Option<UpgradeStatus>,
}

/// `Ready`, its reason and message: what `kubectl get` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ready: bool,
    pub reason: Reason,
    pub message: String,
}

/// A Cluster not Ready for `reason` is Stalled: it will not pass without a change (the
/// `Stalled` condition, and the metrics' `stalled` label).
pub fn stalls(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::RenderFailed
            | Reason::NotSynced
            | Reason::PrunePaused
            | Reason::ReleaseNotAvailable
            | Reason::ReleaseRefused
            | Reason::Unhealthy
            | Reason::TagRefused
            | Reason::PinMismatch
            | Reason::SignatureInvalid
    )
}

/// `Ready`, its reason and message for an outcome. `previous_ready`: what `Ready` said before
/// (a held Cluster keeps it).
pub fn verdict(outcome: &Outcome<'_>, previous: &ClusterSyncStatus, now: DateTime<Utc>) -> Verdict {
    match outcome {
        Outcome::Held { reason, message } => {
            let ready = previous.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
            Verdict { ready, reason: *reason, message: message.clone() }
        }
        Outcome::Failed { reason, message, .. } => Verdict { ready: false, reason: *reason, message: message.clone() },
        Outcome::Started { release, objects } => {
            Verdict { ready: false, reason: Reason::Progressing, message: format!("applying {} ({objects} objects)", release.tag) }
        }
        Outcome::Upgrade { message, failed, .. } => {
            Verdict { ready: false, reason: if *failed { Reason::UpgradeFailed } else { Reason::Progressing }, message: message.clone() }
        }
        Outcome::Applied(a) => applied_verdict(a, previous, now),
    }
}

fn applied_verdict(a: &Applied<'_>, previous: &ClusterSyncStatus, now: DateTime<Utc>) -> Verdict {
    let (synced, total, first) = counts(a.changes);
    let mut v = match first {
        None => Verdict { ready: true, reason: Reason::Synced, message: String::new() },
        Some(first) => {
            let more = total - synced - 1;
            let tail = if more > 0 { format!(" (and {more} more of {total} objects not synced)") } else { String::new() };
            let failed: Vec<&ObjectRef> =
                a.changes.entries.iter().filter(|e| e.action == applier::Action::Failed).map(|e| &e.object).collect();
            // Every failure may pass by itself: retried with backoff (Reconciling), not Stalled.
            let transient = !failed.is_empty() && failed.iter().all(|o| a.transient.contains(o));
            Verdict {
                ready: false,
                reason: if transient { Reason::TransientError } else { Reason::NotSynced },
                message: format!("{}: {}{tail}", first.object, first.message),
            }
        }
    };
    if let Some(paused) = a.prune_paused {
        v = Verdict { ready: false, reason: Reason::PrunePaused, message: paused.to_owned() };
    }
    if let Some(timeout) = a.health_timeout
        && v.ready
        && !a.unhealthy.is_empty()
    {
        v = judge_health(a.unhealthy, timeout, previous, now);
    }
    if v.ready
        && let Some(first) = a.warnings.first()
    {
        // Applied as the SCS operator would, but said where a user looks.
        let more = if a.warnings.len() > 1 { format!(" (and {} more)", a.warnings.len() - 1) } else { String::new() };
        v.message = format!("values template warning: {first}{more}");
    }
    v
}

/// Objects of the release synced, in all, and the first that is not.
fn counts(changes: &ChangeSet) -> (usize, usize, Option<&Entry>) {
    let objects = changes.entries.iter().filter(|e| e.is_release_object());
    let (mut synced, mut total, mut first) = (0, 0, None);
    for e in objects {
        total += 1;
        if e.is_synced() {
            synced += 1;
        } else if first.is_none() {
            first = Some(e);
        }
    }
    (synced, total, first)
}

/// Every object is synced but some are not healthy: `Progressing` while `timeout` has not passed
/// since the apply started (the `Reconciling` condition's transition), `Unhealthy` after it — or
/// at once when one has failed (it will not heal by itself).
fn judge_health(unhealthy: &[(ObjectRef, Health)], timeout: Duration, previous: &ClusterSyncStatus, now: DateTime<Utc>) -> Verdict {
    let since = previous
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciling" && c.status == "True")
        .and_then(|c| DateTime::parse_from_rfc3339(&c.last_transition_time).ok())
        .map(|t| t.with_timezone(&Utc));
    let waited = since.and_then(|t| now.signed_duration_since(t).to_std().ok()).unwrap_or_default();
    let failed = unhealthy.iter().any(|(_, h)| matches!(h, Health::Failed(_)));
    let (first, health) = &unhealthy[0];
    let more = if unhealthy.len() > 1 { format!(" (and {} more not healthy)", unhealthy.len() - 1) } else { String::new() };
    if failed || waited >= timeout {
        let (o, h) = unhealthy.iter().find(|(_, h)| matches!(h, Health::Failed(_))).unwrap_or(&unhealthy[0]);
        let mut message = format!("{o}: {h}{more}");
        if !failed {
            message.push_str(&format!("; not healthy within healthTimeout {}", crate::model::schedule::format_duration(timeout)));
        }
        Verdict { ready: false, reason: Reason::Unhealthy, message }
    } else {
        Verdict { ready: false, reason: Reason::Progressing, message: format!("{first}: {health}{more}") }
    }
}

/// The next `ClusterSync` status: `previous` with what `outcome` changed, `Ready` /
/// `Reconciling` / `Stalled` as [`verdict`] decides. The caller stamps what is not about the
/// outcome (the class, the newest release, the handled request) and the write sets
/// `lastSyncTime` and the at-a-glance fields.
pub fn desired(previous: &ClusterSyncStatus, outcome: &Outcome<'_>, now: DateTime<Utc>) -> ClusterSyncStatus {
    let v = verdict(outcome, previous, now);
    let at = timestamp(now);
    match outcome {
        Outcome::Held { reason, .. } => {
            // Ready stays what it was (nothing changed in the cluster); a `Paused` /
            // `Suspended` condition says why nothing happens.
            let mut next = previous.clone();
            next.conditions.retain(|c| c.type_ == "Ready");
            next.conditions.push(condition(&previous.conditions, reason.as_str(), reason.as_str(), &v.message, &at));
            next
        }
        Outcome::Failed { wanted, transient, cause, .. } => ClusterSyncStatus {
            wanted_release: wanted.map(release_ref).or_else(|| previous.wanted_release.clone()),
            conditions: conditions_with(&previous.conditions, &v, Some(!transient), *cause, &at),
            ..previous.clone()
        },
        Outcome::Started { release, .. } => ClusterSyncStatus {
            wanted_release: Some(release_ref(release)),
            conditions: progressing(&previous.conditions, &v.message, &at),
            ..previous.clone()
        },
        Outcome::Upgrade { release, upgrade, failed, .. } => ClusterSyncStatus {
            wanted_release: Some(release_ref(release)),
            conditions: if *failed {
                conditions(&previous.conditions, &v, &at)
            } else {
                progressing(&previous.conditions, &v.message, &at)
            },
            upgrade: Some(upgrade.clone()),
            ..previous.clone()
        },
        Outcome::Applied(a) => {
            let health_of =
                |e: &Entry| a.health_timeout.and_then(|_| a.unhealthy.iter().find(|(o, _)| *o == e.object).map(|(_, h)| h.to_string()));
            let failing: Vec<ObjectEntry> = a
                .changes
                .entries
                .iter()
                .filter(|e| e.is_release_object() && (!e.is_synced() || health_of(e).is_some()))
                .map(|e| ObjectEntry { health: health_of(e).unwrap_or_default(), ..entry(e, &previous.entries, &at) })
                .collect();
            let (synced, total, _) = counts(a.changes);
            ClusterSyncStatus {
                wanted_release: Some(release_ref(a.release)),
                applied_release: applied_release(previous, a.release, synced == total),
                synced: synced as u32,
                total: total as u32,
                conditions: conditions(&previous.conditions, &v, &at),
                rendered_digest: a.digest.clone(),
                rendered_by: a.rendered_by.clone(),
                entries_truncated: failing.len().saturating_sub(MAX_ENTRIES) as u32,
                entries: failing.into_iter().take(MAX_ENTRIES).collect(),
                inventory: a.inventory.clone(),
                generated: still_applied(&previous.generated, &a.inventory),
                upgrade: a.upgrade.clone(),
                ..ClusterSyncStatus::default()
            }
        }
    }
}

/// The release a Cluster runs after an apply of `release`: that release once every one of its
/// objects is synced (unhealthy ones included: they are in place, the health verdict says the
/// rest), otherwise the one it ran before — a release refused after its first object is not
/// what the Cluster runs, and the rollout, the upgrade hook and the moved-tag memory all read
/// `appliedRelease` as that.
fn applied_release(previous: &ClusterSyncStatus, release: &Release, all_synced: bool) -> Option<ReleaseRefStatus> {
    if all_synced { Some(release_ref(release)) } else { previous.applied_release.clone() }
}

/// The generated-field records (`group|kind|namespace|name|pointer`) of objects `inventory`
/// still holds: a release that drops an object drops its record.
fn still_applied(generated: &[String], inventory: &[String]) -> Vec<String> {
    let key = |line: &str| line.splitn(5, '|').take(4).collect::<Vec<_>>().join("|");
    let applied: std::collections::HashSet<String> = inventory.iter().map(|l| key(l)).collect();
    generated.iter().filter(|l| applied.contains(&key(l))).cloned().collect()
}

pub fn release_ref(r: &Release) -> ReleaseRefStatus {
    ReleaseRefStatus { tag: r.tag.clone(), version: r.version.to_string(), commit: r.commit.clone() }
}

/// One object of a change set as the status lists it; its transition time stays while it
/// stays in the same state.
pub fn entry(e: &Entry, previous: &[ObjectEntry], now: &str) -> ObjectEntry {
    let (group, version) = match e.object.api_version.rsplit_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), e.object.api_version.clone()),
    };
    let namespace = e.object.namespace.clone().unwrap_or_default();
    let synced = e.is_synced();
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
        health: String::new(),
    }
}

/// `Ready`, `Reconciling` and `Stalled` for a verdict, keeping transition times of conditions
/// whose status is unchanged. Stalled when the reason [`stalls`].
pub fn conditions(previous: &[Condition], v: &Verdict, now: &str) -> Vec<Condition> {
    conditions_with(previous, v, None, None, now)
}

/// As [`conditions`]; `stalled` overrides what the reason says (a failure known permanent or
/// transient by its error), and `cause` names it on `Stalled` / `Reconciling`.
fn conditions_with(previous: &[Condition], v: &Verdict, stalled: Option<bool>, cause: Option<&str>, now: &str) -> Vec<Condition> {
    let stalled = stalled.unwrap_or_else(|| stalls(v.reason)) && !v.ready;
    // TransientError, ClusterUnreachable, ControlPlaneNotReady, …: Reconciling (retried).
    let reconciling = !v.ready && !stalled && !matches!(v.reason, Reason::Paused | Reason::Suspended);
    let why = v.reason.as_str();
    let detail = cause.unwrap_or(why);
    vec![
        make(previous, "Ready", v.ready, why, &v.message, now),
        make(previous, "Reconciling", reconciling, if reconciling { detail } else { why }, &v.message, now),
        make(previous, "Stalled", stalled, if stalled { detail } else { why }, &v.message, now),
    ]
}

/// A condition of `type_` that is True, keeping its transition time when it was True before.
pub fn condition(previous: &[Condition], type_: &str, reason: &str, message: &str, now: &str) -> Condition {
    make(previous, type_, true, reason, message, now)
}

/// The conditions while an apply is under way: not Ready, Reconciling (`Progressing`).
pub fn progressing(previous: &[Condition], message: &str, now: &str) -> Vec<Condition> {
    let v = Verdict { ready: false, reason: Reason::Progressing, message: message.to_owned() };
    conditions_with(previous, &v, Some(false), None, now)
}

/// A condition, keeping its transition time while its status is unchanged.
fn make(previous: &[Condition], type_: &str, on: bool, reason: &str, message: &str, now: &str) -> Condition {
    let status = if on { "True" } else { "False" };
    let since =
        previous.iter().find(|c| c.type_ == type_ && c.status == status).map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        // A Ready cluster's message is empty unless there is something to know (a values
        // template warning); every other condition carries the reason's message.
        message: message.to_owned(),
        last_transition_time: since,
        observed_generation: None,
    }
}

/// The first line of `text`, cut at a character boundary to `max` characters with `…`.
pub fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut out: String = line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The at-a-glance fields: `objects` (`synced/total`) and `message` (the `Ready` condition's
/// message while it is not `True`, shortened to [`MESSAGE_COLUMN`] characters).
pub fn summarise(status: &mut ClusterSyncStatus) {
    status.objects = format!("{}/{}", status.synced, status.total);
    status.message = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status != "True")
        .map(|c| shorten(&c.message, MESSAGE_COLUMN))
        .unwrap_or_default();
}

/// A release's Clusters by state, and the first that is not ready.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub counts: ClusterCounts,
    /// The first Cluster that is not ready, and why (`ns/name: message`).
    pub first_problem: Option<String>,
    /// Shards whose part of the `StackRelease` is stale, with their Clusters and last
    /// heartbeat ([`super::shards::without_stale`]).
    pub stale_shards: Vec<String>,
}

/// Clusters by release (`StackRelease` name, from `name_of(subscription, tag)`): a Cluster
/// counts for its applied release, or for the one being applied when none is yet.
pub fn tally<'a>(syncs: impl IntoIterator<Item = &'a ClusterSync>, name_of: impl Fn(&str, &str) -> String) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    for cs in syncs {
        let Some(st) = &cs.status else { continue };
        let Some(tag) = st.applied_release.as_ref().or(st.wanted_release.as_ref()).map(|r| r.tag.as_str()) else { continue };
        let t = out.entry(name_of(&cs.spec.subscription, tag)).or_default();
        let is_true = |type_: &str| st.conditions.iter().any(|c| c.type_ == type_ && c.status == "True");
        t.counts.total += 1;
        if is_true("Ready") {
            t.counts.ready += 1;
            continue;
        }
        if is_true("Reconciling") {
            t.counts.progressing += 1;
        } else {
            t.counts.not_ready += 1;
        }
        if t.first_problem.is_none() {
            let ns = cs.metadata.namespace.as_deref().unwrap_or_default();
            let why = st.conditions.iter().find(|c| c.type_ == "Ready").map_or("no status yet", |c| c.message.as_str());
            t.first_problem = Some(format!("{ns}/{}: {}", cs.spec.cluster, shorten(why, MESSAGE_COLUMN)));
        }
    }
    for t in out.values_mut() {
        t.counts.summary = format!("{}/{}", t.counts.ready, t.counts.total);
    }
    out
}

/// A `StackRelease`'s `Ready` and `Reconciling`: refused for its signature (`refusal`), failed
/// when its ClusterClass failed (`phase` `Failed`, the first failing object in `entries`), not
/// ready while a shard's part is stale (`ShardStale`: its Clusters' state is not known) or any
/// of its Clusters is not ready, reconciling while any is being applied.
pub fn rollup(previous: &[Condition], phase: &str, refusal: &str, entries: &[ObjectEntry], tally: &Tally, now: &str) -> Vec<Condition> {
    if phase == "Refused" {
        return vec![
            make(previous, "Ready", false, "SignatureInvalid", refusal, now),
            make(previous, "Reconciling", false, "Idle", "", now),
        ];
    }
    let c = &tally.counts;
    let (ready, reason, message) = if phase == "Failed" {
        let first = entries.first().map_or_else(String::new, |e| format!(": {}/{}: {}", e.kind, e.name, e.message));
        (false, "ClassFailed", format!("the release's ClusterClass objects are not synced{first}"))
    } else if !tally.stale_shards.is_empty() {
        let shards = tally.stale_shards.join(", ");
        (false, "ShardStale", format!("{} of {} Clusters not counted as ready: stale shard part: {shards}", c.total - c.ready, c.total))
    } else if c.ready < c.total {
        let problem = tally.first_problem.as_deref().unwrap_or_default();
        let reason = if c.not_ready == 0 { "Progressing" } else { "ClustersNotReady" };
        (false, reason, format!("{} of {} Clusters not ready; first: {problem}", c.total - c.ready, c.total))
    } else if c.total == 0 {
        (true, "Ready", "no Cluster runs this release".to_owned())
    } else {
        (true, "Ready", format!("{} of {} Clusters synced and healthy", c.ready, c.total))
    };
    let reconciling = c.progressing > 0;
    let busy = if reconciling { format!("{} Clusters being applied or waiting for health", c.progressing) } else { String::new() };
    vec![
        make(previous, "Ready", ready, reason, &message, now),
        make(previous, "Reconciling", reconciling, if reconciling { "Progressing" } else { "Idle" }, &busy, now),
    ]
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::crd::ClusterSyncSpec;

    const NOW: &str = "2026-11-26T10:00:00Z";

    #[test]
    fn generated_fields_stay_recorded_while_their_object_is_applied() {
        let generated: Vec<String> =
            ["|Secret|ns|token|/data/t", "apps|Deployment|ns|ms|/spec/x", "|ConfigMap|ns|gone|/data/a"].map(String::from).to_vec();
        let inventory: Vec<String> = ["|Secret|ns|token|v1|abc|def", "apps|Deployment|ns|ms|v1"].map(String::from).to_vec();
        assert_eq!(still_applied(&generated, &inventory), generated[..2].to_vec());
        assert!(still_applied(&generated, &[]).is_empty());
    }

    fn release_name(sub: &str, tag: &str) -> String {
        format!("{sub}.{tag}")
    }

    fn conditions(previous: &[Condition], phase: &str, entries: &[ObjectEntry], tally: &Tally) -> Vec<Condition> {
        rollup(previous, phase, "", entries, tally, NOW)
    }

    fn sync(ns: &str, name: &str, tag: &str, ready: &str, reconciling: bool, message: &str) -> ClusterSync {
        let mut cs = ClusterSync::new(name, ClusterSyncSpec { cluster: name.into(), subscription: "ferrol".into() });
        cs.metadata.namespace = Some(ns.into());
        let cond = |t: &str, s: &str, m: &str| Condition {
            type_: t.into(),
            status: s.into(),
            reason: "R".into(),
            message: m.into(),
            last_transition_time: "2026-11-23T00:00:00Z".into(),
            observed_generation: None,
        };
        cs.status = Some(ClusterSyncStatus {
            applied_release: Some(ReleaseRefStatus { tag: tag.into(), ..Default::default() }),
            conditions: vec![cond("Ready", ready, message), cond("Reconciling", if reconciling { "True" } else { "False" }, "")],
            ..Default::default()
        });
        cs
    }

    #[test]
    fn clusters_count_for_the_release_they_run() {
        let syncs = [
            sync("a", "one", "v1", "True", false, "ok"),
            sync("a", "two", "v1", "False", true, "applying"),
            sync("b", "three", "v1", "False", false, "ConfigMap/x: no matches for kind"),
            sync("a", "four", "v2", "True", false, "ok"),
        ];
        let t = tally(&syncs, release_name);
        let v1 = &t[&release_name("ferrol", "v1")];
        assert_eq!((v1.counts.total, v1.counts.ready, v1.counts.progressing, v1.counts.not_ready), (3, 1, 1, 1));
        assert_eq!(v1.counts.summary, "1/3");
        assert_eq!(v1.first_problem.as_deref(), Some("a/two: applying"));
        let conds = conditions(&[], "Applied", &[], v1);
        assert_eq!((conds[0].status.as_str(), conds[0].reason.as_str()), ("False", "ClustersNotReady"));
        assert_eq!(conds[1].status, "True");
        let v2 = &t[&release_name("ferrol", "v2")];
        let conds = conditions(&[], "Applied", &[], v2);
        assert_eq!((conds[0].status.as_str(), conds[0].message.as_str()), ("True", "1 of 1 Clusters synced and healthy"));
    }

    #[test]
    fn a_failed_class_is_not_ready_and_an_unused_release_is() {
        let none = Tally::default();
        assert_eq!(conditions(&[], "Failed", &[], &none)[0].reason, "ClassFailed");
        let ok = conditions(&[], "Applied", &[], &none);
        assert_eq!((ok[0].status.as_str(), ok[0].message.as_str()), ("True", "no Cluster runs this release"));
    }

    #[test]
    fn the_transition_time_stays_while_the_status_does() {
        let mut prev = conditions(&[], "Applied", &[], &Tally::default());
        prev[0].last_transition_time = "2020-01-01T00:00:00Z".into();
        let again = conditions(&prev, "Applied", &[], &Tally::default());
        assert_eq!(again[0].last_transition_time, "2020-01-01T00:00:00Z");
    }

    fn at(t: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
    }

    fn rel() -> Release {
        Release {
            source: "s".into(),
            tag: "v1.0.0".into(),
            commit: "c".repeat(40),
            version: crate::model::version::Version::from_tag("v1.0.0").unwrap(),
        }
    }

    fn object(name: &str) -> ObjectRef {
        ObjectRef { api_version: "apps/v1".into(), kind: "Deployment".into(), namespace: Some("kube-system".into()), name: name.into() }
    }

    fn changes(actions: &[(&str, applier::Action, &str)]) -> ChangeSet {
        let mut set = ChangeSet::default();
        for (name, action, message) in actions {
            set.entries.push(Entry {
                object: object(name),
                action: *action,
                message: (*message).into(),
                file: "m.yaml".into(),
                chart: None,
                stage: None,
            });
        }
        set
    }

    fn applied<'a>(release: &'a Release, changes: &'a ChangeSet) -> Applied<'a> {
        Applied {
            release,
            changes,
            prune_paused: None,
            transient: &[],
            unhealthy: &[],
            health_timeout: None,
            warnings: &[],
            inventory: Vec::new(),
            digest: "sha256:x".into(),
            rendered_by: String::new(),
            upgrade: None,
        }
    }

    /// `(Ready, reason, Reconciling, Stalled, the Stalled condition's reason)` of a status.
    fn shape(st: &ClusterSyncStatus) -> (String, String, String, String, String) {
        let get = |t: &str| st.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
        let (ready, reconciling, stalled) = (get("Ready"), get("Reconciling"), get("Stalled"));
        (ready.status, ready.reason, reconciling.status, stalled.status, stalled.reason)
    }

    fn s(v: (&str, &str, &str, &str, &str)) -> (String, String, String, String, String) {
        (v.0.into(), v.1.into(), v.2.into(), v.3.into(), v.4.into())
    }

    #[test]
    fn what_was_applied_decides_ready_reconciling_and_stalled() {
        use applier::Action::{Failed, Unchanged};
        let r = rel();
        let (ok, broken) =
            (changes(&[("a", Unchanged, ""), ("b", Unchanged, "")]), changes(&[("a", Unchanged, ""), ("b", Failed, "denied")]));
        let transient = [object("b")];
        let progressing = [(object("a"), Health::Progressing("0 of 1 replicas available".into()))];
        let failed_job = [(object("a"), Health::Failed("Job failed".into()))];
        let warnings = ["cluster-addon-values.yaml: <no value>".to_owned()];
        let reconciling_since = vec![Condition {
            type_: "Reconciling".into(),
            status: "True".into(),
            reason: "Progressing".into(),
            message: String::new(),
            last_transition_time: "2026-11-26T09:55:00Z".into(),
            observed_generation: None,
        }];
        let minute = Some(Duration::from_secs(60));
        let hour = Some(Duration::from_secs(3600));
        type Case<'a> = (&'a str, Applied<'a>, Vec<Condition>, (&'a str, &'a str, &'a str, &'a str, &'a str), &'a str);
        let table: Vec<Case> = vec![
            ("all synced", applied(&r, &ok), vec![], ("True", "Synced", "False", "False", "Synced"), ""),
            ("a refusal needs a change", applied(&r, &broken), vec![], ("False", "NotSynced", "False", "True", "NotSynced"), "denied"),
            (
                "every failure may pass",
                Applied { transient: &transient, ..applied(&r, &broken) },
                vec![],
                ("False", "TransientError", "True", "False", "TransientError"),
                "denied",
            ),
            (
                "pruning paused",
                Applied { prune_paused: Some("3 objects to prune, pruneLimit 2"), ..applied(&r, &ok) },
                vec![],
                ("False", "PrunePaused", "False", "True", "PrunePaused"),
                "pruneLimit",
            ),
            (
                "rolling out within healthTimeout",
                Applied { unhealthy: &progressing, health_timeout: hour, ..applied(&r, &ok) },
                reconciling_since.clone(),
                ("False", "Progressing", "True", "False", "Progressing"),
                "0 of 1 replicas",
            ),
            (
                "past healthTimeout",
                Applied { unhealthy: &progressing, health_timeout: minute, ..applied(&r, &ok) },
                reconciling_since.clone(),
                ("False", "Unhealthy", "False", "True", "Unhealthy"),
                "not healthy within healthTimeout 1m",
            ),
            (
                "a failed Job at once",
                Applied { unhealthy: &failed_job, health_timeout: hour, ..applied(&r, &ok) },
                reconciling_since.clone(),
                ("False", "Unhealthy", "False", "True", "Unhealthy"),
                "Job failed",
            ),
            (
                "health not judged without healthTimeout",
                Applied { unhealthy: &progressing, ..applied(&r, &ok) },
                vec![],
                ("True", "Synced", "False", "False", "Synced"),
                "",
            ),
            (
                "a values warning is said on a Ready Cluster",
                Applied { warnings: &warnings, ..applied(&r, &ok) },
                vec![],
                ("True", "Synced", "False", "False", "Synced"),
                "values template warning: cluster-addon-values.yaml",
            ),
        ];
        for (name, a, previous, want, message) in table {
            let prev = ClusterSyncStatus { conditions: previous, ..Default::default() };
            let st = desired(&prev, &Outcome::Applied(a), at(NOW));
            assert_eq!(shape(&st), s(want), "{name}");
            let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
            assert!(ready.message.contains(message), "{name}: {}", ready.message);
            // Applied only when every object is synced; the previous status had none.
            let all = st.synced == st.total;
            assert_eq!(st.applied_release.as_ref().map(|r| r.tag.as_str()), all.then_some("v1.0.0"), "{name}");
        }
    }

    /// Regression: a Cluster whose apply of 5,001 objects was refused after the first said
    /// `appliedRelease: v5.0.0` (its conditions said `synced 1/5001`).
    #[test]
    fn a_release_refused_after_its_first_object_is_not_recorded_as_applied() {
        use applier::Action::{Created, Failed, Unchanged};
        let (old, new) = (rel(), Release { tag: "v5.0.0".into(), commit: "d".repeat(40), ..rel() });
        let previous = ClusterSyncStatus { applied_release: Some(release_ref(&old)), synced: 3, total: 3, ..Default::default() };
        let refused: Vec<(String, applier::Action, &str)> = std::iter::once(("o-0".to_owned(), Created, ""))
            .chain((1..5001).map(|i| (format!("o-{i}"), Failed, "refused: the apply stopped")))
            .collect();
        let refused: Vec<(&str, applier::Action, &str)> = refused.iter().map(|(n, a, m)| (n.as_str(), *a, *m)).collect();
        let (refused, whole) = (changes(&refused), changes(&[("a", Created, ""), ("b", Unchanged, "")]));
        let table: [(&str, &ChangeSet, &ClusterSyncStatus, Option<&str>); 4] = [
            ("refused after 1 of 5001: the old release stays", &refused, &previous, Some("v1.0.0")),
            ("refused on a first install: none", &refused, &ClusterSyncStatus::default(), None),
            ("every object synced: the new release", &whole, &previous, Some("v5.0.0")),
            ("every object synced on a first install", &whole, &ClusterSyncStatus::default(), Some("v5.0.0")),
        ];
        for (name, changes, prev, want) in table {
            let st = desired(prev, &Outcome::Applied(applied(&new, changes)), at(NOW));
            assert_eq!(st.applied_release.as_ref().map(|r| r.tag.as_str()), want, "{name}");
            assert_eq!(st.wanted_release.as_ref().map(|r| r.tag.as_str()), Some("v5.0.0"), "{name}");
            if changes.entries.len() == 5001 {
                assert_eq!((st.synced, st.total), (1, 5001), "{name}");
                assert_eq!(shape(&st).1, "NotSynced", "{name}");
            }
        }
    }

    #[test]
    fn a_permanent_failure_stalls_with_its_cause_and_a_transient_one_is_retried() {
        let r = rel();
        let prev = ClusterSyncStatus {
            applied_release: Some(release_ref(&r)),
            synced: 3,
            total: 3,
            inventory: vec!["apps|Deployment|kube-system|a|v1|d|f".into()],
            ..Default::default()
        };
        let failed = |reason, transient, cause| Outcome::Failed { wanted: None, reason, message: "m".into(), transient, cause };
        let table = [
            (failed(Reason::ReleaseRefused, false, Some("DigestMismatch")), ("False", "ReleaseRefused", "False", "True", "DigestMismatch")),
            (
                failed(Reason::ReleaseUnavailable, true, Some("Http")),
                ("False", "ReleaseUnavailable", "True", "False", "ReleaseUnavailable"),
            ),
            (failed(Reason::RenderFailed, false, None), ("False", "RenderFailed", "False", "True", "RenderFailed")),
            // helm out of time: a render failure that may pass by itself is not Stalled.
            (failed(Reason::RenderFailed, true, Some("Helm")), ("False", "RenderFailed", "True", "False", "RenderFailed")),
            (failed(Reason::ControlPlaneNotReady, true, None), ("False", "ControlPlaneNotReady", "True", "False", "ControlPlaneNotReady")),
        ];
        for (outcome, want) in table {
            let st = desired(&prev, &outcome, at(NOW));
            assert_eq!(shape(&st), s(want), "{outcome:?}");
            // What is in place stays recorded: nothing was applied.
            assert_eq!(
                (st.applied_release.clone(), st.synced, st.inventory.clone()),
                (prev.applied_release.clone(), 3, prev.inventory.clone())
            );
        }
    }

    #[test]
    fn a_held_cluster_keeps_ready_and_says_why() {
        let prev = desired(&ClusterSyncStatus::default(), &Outcome::Applied(applied(&rel(), &changes(&[]))), at("2026-11-26T09:00:00Z"));
        let held = desired(&prev, &Outcome::Held { reason: Reason::Paused, message: "paused".into() }, at(NOW));
        let types: Vec<(&str, &str)> = held.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(types, [("Ready", "True"), ("Paused", "True")]);
        assert!(verdict(&Outcome::Held { reason: Reason::Paused, message: String::new() }, &prev, at(NOW)).ready);
        // Ready's transition time is the one from before: nothing changed in the cluster.
        assert_eq!(held.conditions[0].last_transition_time, "2026-11-26T09:00:00Z");
    }

    #[test]
    fn transition_times_stay_while_a_condition_does_and_move_when_it_changes() {
        let r = rel();
        let ok = changes(&[("a", applier::Action::Unchanged, "")]);
        let first = desired(&ClusterSyncStatus::default(), &Outcome::Applied(applied(&r, &ok)), at("2026-11-26T09:00:00Z"));
        let again = desired(&first, &Outcome::Applied(applied(&r, &ok)), at(NOW));
        assert_eq!(again.conditions, first.conditions);
        let started = desired(&again, &Outcome::Started { release: &r, objects: 1 }, at(NOW));
        assert_eq!(shape(&started), s(("False", "Progressing", "True", "False", "Progressing")));
        let ready = started.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.last_transition_time.as_str(), ready.message.as_str()), (NOW, "applying v1.0.0 (1 objects)"));
    }
}
