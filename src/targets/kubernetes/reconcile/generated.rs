//! What a Cluster's charts generate at render time (`genCA`, `genSignedCert`, `randAlphaNum`,
//! a pod template's checksum of one) stays the Cluster's: the fields a render finds by
//! rendering each chart twice (`crate::render::clusterstack`), and those its ClusterSync
//! recorded, keep their live values in every sync (`applier::ssa` `generated.rs`), whatever
//! restarted, moved or re-rendered in between. They change only on purpose: a rotation, asked
//! for (`stacksync rotate`, the [`ROTATE_REQUESTED_AT`] annotation) or due because a generated
//! certificate reached two thirds of its lifetime ([`applier::ssa::Validity::renew_at`]). A
//! rotation renders anew (not from the memo) and applies every generated value of the Cluster
//! as rendered, so a CA and what it signed move together.
//!
//! Only pointers are recorded, in `status.generated` and `status.generatedRotation`; no value
//! is ever logged, recorded or put in an Event.

use applier::ssa::Validity;
use chrono::{DateTime, Utc};

use crate::status::crd::{ClusterSyncStatus, GeneratedRotation};

/// The ClusterSync annotation `stacksync rotate` sets (an RFC 3339 time): rotate this Cluster's
/// generated values once.
pub const ROTATE_REQUESTED_AT: &str = "stacksync.io/rotate-generated-at";

/// Why a sync rotates a Cluster's generated values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::targets::kubernetes) enum Rotation {
    /// `stacksync rotate`: the annotation's value.
    Requested(String),
    /// A generated certificate reached its renewal time (RFC 3339).
    CertificateDue(String),
}

impl Rotation {
    /// The status's and the metric's word for it.
    pub(in crate::targets::kubernetes) fn reason(&self) -> &'static str {
        match self {
            Rotation::Requested(_) => "Requested",
            Rotation::CertificateDue(_) => "CertificateDue",
        }
    }
}

/// Whether this sync rotates: a request not handled yet, else a certificate due at `now`.
pub(in crate::targets::kubernetes) fn rotation(prev: &ClusterSyncStatus, requested: Option<&str>, now: DateTime<Utc>) -> Option<Rotation> {
    let recorded = prev.generated_rotation.as_ref();
    if let Some(r) = requested
        && recorded.and_then(|g| g.last_handled_request.as_deref()) != Some(r)
    {
        return Some(Rotation::Requested(r.to_owned()));
    }
    let due = recorded.and_then(|g| g.renew_at.as_deref())?;
    let at = DateTime::parse_from_rfc3339(due).ok()?;
    (at <= now).then(|| Rotation::CertificateDue(due.to_owned()))
}

/// The fields to keep (or rotate) this sync: those recorded and those this render found.
pub(in crate::targets::kubernetes) fn recorded(prev: &[String], rendered: &[String]) -> applier::ssa::GeneratedFields {
    if rendered.is_empty() {
        return applier::ssa::parse_generated(prev);
    }
    let mut lines = prev.to_vec();
    lines.extend_from_slice(rendered);
    lines.sort();
    lines.dedup();
    applier::ssa::parse_generated(&lines)
}

/// The generated fields recorded for a rendered object (a render records an object without a
/// namespace under the one it renders for: a cluster stack's addon namespace).
pub(in crate::targets::kubernetes) fn of_object<'a>(recorded: &'a applier::ssa::GeneratedFields, o: &crate::model::Object) -> &'a [String] {
    if recorded.is_empty() {
        return &[];
    }
    let namespace = o.namespace.clone().or_else(|| Some(crate::render::clusterstack::ADDON_NAMESPACE.to_owned()));
    recorded.get(&(o.group().to_owned(), o.kind.clone(), namespace, o.name.clone())).map_or(&[], Vec::as_slice)
}

/// `next`'s record of what is generated after a sync that found `lines` (the applier's, the
/// namespace as each object lives), saw or sent certificates due at `renewal`, and — when
/// `rotated` — rotated them for that reason; `complete`: every object of the release is synced
/// (a rotation only counts as done then, else the next sync rotates again).
pub(in crate::targets::kubernetes) fn record(
    next: &mut ClusterSyncStatus,
    prev: &ClusterSyncStatus,
    lines: Vec<String>,
    renewal: Option<Validity>,
    rotated: Option<&Rotation>,
    complete: bool,
    now: DateTime<Utc>,
) {
    if !lines.is_empty() {
        next.generated.extend(lines);
        next.generated.sort();
        next.generated.dedup();
    }
    let before = prev.generated_rotation.clone().unwrap_or_default();
    let mut g = before.clone();
    let known = before.renew_at.as_deref().and_then(|r| DateTime::parse_from_rfc3339(r).ok()).map(|r| r.timestamp());
    let soonest = match (rotated, renewal) {
        // A completed rotation replaced every generated certificate: what it sent is what counts.
        (Some(_), r) if complete => r,
        (_, Some(r)) if known.is_none_or(|k| r.renew_at() < k) => Some(r),
        _ => None,
    };
    if let Some(v) = soonest {
        g.renew_at = Some(rfc3339(v.renew_at()));
        g.expires_at = Some(rfc3339(v.not_after));
    } else if rotated.is_some() && complete {
        (g.renew_at, g.expires_at) = (None, None);
    }
    if let Some(r) = rotated.filter(|_| complete) {
        g.last_rotated = Some(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        g.last_reason = Some(r.reason().to_owned());
        if let Rotation::Requested(token) = r {
            g.last_handled_request = Some(token.clone());
        }
    }
    next.generated_rotation = (g != GeneratedRotation::default()).then_some(g);
}

fn rfc3339(seconds: i64) -> String {
    DateTime::<Utc>::from_timestamp(seconds, 0).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).expect("time").with_timezone(&Utc)
    }

    fn due(renew_at: &str) -> ClusterSyncStatus {
        ClusterSyncStatus {
            generated_rotation: Some(GeneratedRotation { renew_at: Some(renew_at.into()), ..GeneratedRotation::default() }),
            ..ClusterSyncStatus::default()
        }
    }

    #[test]
    fn a_rotation_is_due_at_its_renewal_time_or_once_per_request() {
        let prev = due("2027-01-01T00:00:00Z");
        assert_eq!(rotation(&prev, None, at("2026-12-31T23:59:59Z")), None);
        assert_eq!(rotation(&prev, None, at("2027-01-01T00:00:00Z")), Some(Rotation::CertificateDue("2027-01-01T00:00:00Z".into())));
        assert_eq!(rotation(&prev, Some("t1"), at("2026-01-01T00:00:00Z")), Some(Rotation::Requested("t1".into())));
        let mut handled = prev.clone();
        handled.generated_rotation.as_mut().expect("set").last_handled_request = Some("t1".into());
        assert_eq!(rotation(&handled, Some("t1"), at("2026-01-01T00:00:00Z")), None);
        assert_eq!(rotation(&ClusterSyncStatus::default(), None, at("2030-01-01T00:00:00Z")), None);
    }

    #[test]
    fn the_record_keeps_the_soonest_renewal_until_a_rotation_completes() {
        let now = at("2026-06-01T00:00:00Z");
        let prev = due("2027-01-01T00:00:00Z");
        let later = Validity { not_before: at("2026-01-01T00:00:00Z").timestamp(), not_after: at("2029-01-01T00:00:00Z").timestamp() };
        let mut next = ClusterSyncStatus::default();
        record(&mut next, &prev, vec!["|Secret|kube-system|ca|/data/tls.crt".into()], Some(later), None, true, now);
        assert_eq!(next.generated, ["|Secret|kube-system|ca|/data/tls.crt"]);
        assert_eq!(next.generated_rotation, prev.generated_rotation, "a later certificate does not move the renewal");

        let rotation = Rotation::Requested("t1".into());
        let mut half = ClusterSyncStatus::default();
        record(&mut half, &prev, Vec::new(), Some(later), Some(&rotation), false, now);
        assert_eq!(half.generated_rotation, prev.generated_rotation, "an incomplete rotation is done again");

        let mut done = ClusterSyncStatus::default();
        record(&mut done, &prev, Vec::new(), Some(later), Some(&rotation), true, now);
        let g = done.generated_rotation.expect("recorded");
        assert_eq!(g.renew_at, Some(rfc3339(later.renew_at())));
        assert_eq!(g.expires_at.as_deref(), Some("2029-01-01T00:00:00Z"));
        assert_eq!(g.last_rotated.as_deref(), Some("2026-06-01T00:00:00Z"));
        assert_eq!(g.last_reason.as_deref(), Some("Requested"));
        assert_eq!(g.last_handled_request.as_deref(), Some("t1"));
    }
}
