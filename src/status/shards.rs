//! The parts of a `StackRelease` (`status.shards`, one per shard), decided purely: the roll-up
//! of the ClusterClass applies every part says, which parts are stale, what a stale part does to
//! the fleet's Cluster counts, and when a shard writes its own part again. No I/O, no clock: the
//! time is passed in.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::crd::{ClusterCounts, MAX_ENTRIES, ObjectEntry, ShardStatus};
use super::desired::{Tally, timestamp};

/// A part not written for this many heartbeat periods is stale: one missed heartbeat is a busy
/// or restarting process, three are a stopped one.
pub const STALE_AFTER_PERIODS: u32 = 3;

/// The ClusterClass apply of the whole fleet, rolled up from every part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassRollup {
    /// `Failed` if any part failed, else `Applied` if any applied, else `Selected`.
    pub phase: String,
    /// Every part's objects that are not synced, by part, the first [`MAX_ENTRIES`].
    pub entries: Vec<ObjectEntry>,
    /// Summed over the parts: a namespace two shards both apply to counts twice.
    pub synced: u32,
    pub total: u32,
}

/// The roll-up of `parts` (stale ones included: what a stopped shard applied stays applied).
pub fn class_rollup(parts: &[ShardStatus]) -> ClassRollup {
    let any = |phase: &str| parts.iter().any(|p| p.phase == phase);
    let phase = if any("Failed") {
        "Failed"
    } else if any("Applied") {
        "Applied"
    } else {
        "Selected"
    };
    ClassRollup {
        phase: phase.to_owned(),
        entries: parts.iter().flat_map(|p| p.entries.iter().cloned()).take(MAX_ENTRIES).collect(),
        synced: parts.iter().map(|p| p.synced).sum(),
        total: parts.iter().map(|p| p.total).sum(),
    }
}

/// `parts` with `mine` in place of the part of the same name (added when there is none),
/// sorted by name as the API server keeps a list-map in no particular order.
pub fn with_part(parts: &[ShardStatus], mine: &ShardStatus) -> Vec<ShardStatus> {
    let mut out: Vec<ShardStatus> = parts.iter().filter(|p| p.name != mine.name).cloned().chain([mine.clone()]).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Whether `part` is stale at `now`: past its `staleAfter`. One whose time cannot be read is
/// stale too: a part that cannot say it is alive is never counted as ready.
pub fn is_stale(part: &ShardStatus, now: DateTime<Utc>) -> bool {
    DateTime::parse_from_rfc3339(&part.stale_after).map_or(true, |t| now > t.with_timezone(&Utc))
}

/// `part` stamped as written at `now` by a shard whose heartbeat period is `period`.
pub fn stamp(part: &mut ShardStatus, now: DateTime<Utc>, period: Duration) {
    part.heartbeat_time = timestamp(now);
    let stale = chrono::Duration::from_std(period * STALE_AFTER_PERIODS).unwrap_or(chrono::Duration::MAX);
    part.stale_after = timestamp(now.checked_add_signed(stale).unwrap_or(DateTime::<Utc>::MAX_UTC));
}

/// Whether a shard writes `wanted` over `written` (its part as last written) at `now`: it says
/// something new, or its heartbeat is `period` old. `wanted`'s times are not compared.
pub fn part_due(written: Option<&ShardStatus>, wanted: &ShardStatus, now: DateTime<Utc>, period: Duration) -> bool {
    let Some(w) = written else { return true };
    let same = ShardStatus { heartbeat_time: w.heartbeat_time.clone(), stale_after: w.stale_after.clone(), ..wanted.clone() } == *w;
    let beat = DateTime::parse_from_rfc3339(&w.heartbeat_time).ok().map(|t| t.with_timezone(&Utc));
    let old = beat.is_none_or(|t| now.signed_duration_since(t).to_std().is_ok_and(|age| age >= period));
    !same || old
}

/// The fleet's tally of a release with the stale parts taken out of what is ready: their
/// Clusters (as each part last counted them) are not ready nor progressing — nobody applies or
/// watches them — but `notReady` and `stale`; `staleShards` names the parts and since when.
pub fn without_stale(mut tally: Tally, parts: &[ShardStatus], now: DateTime<Utc>) -> Tally {
    for part in parts.iter().filter(|p| is_stale(p, now)) {
        let c: &ClusterCounts = &part.clusters;
        let counts = &mut tally.counts;
        let ready = c.ready.min(counts.ready);
        let progressing = c.progressing.min(counts.progressing);
        counts.ready -= ready;
        counts.progressing -= progressing;
        counts.not_ready += ready + progressing;
        counts.stale += c.total;
        tally.stale_shards.push(format!("{} (its {} Clusters; last heartbeat {})", part.name, c.total, part.heartbeat_time));
    }
    tally.counts.summary = format!("{}/{}", tally.counts.ready, tally.counts.total);
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn part(name: &str, phase: &str, synced: u32, total: u32, ready: u32, clusters: u32, written: i64) -> ShardStatus {
        let mut p = ShardStatus {
            name: name.into(),
            phase: phase.into(),
            synced,
            total,
            clusters: ClusterCounts { total: clusters, ready, not_ready: clusters - ready, ..Default::default() },
            ..Default::default()
        };
        stamp(&mut p, at(written), Duration::from_secs(60));
        p
    }

    #[test]
    fn the_class_rollup_counts_every_part() {
        let failing = ObjectEntry { name: "cc".into(), action: "Failed".into(), ..Default::default() };
        let mut b = part("b", "Failed", 1, 2, 0, 0, 0);
        b.entries = vec![failing.clone()];
        let parts = [part("a", "Applied", 2, 2, 0, 0, 0), b, part("z", "Selected", 0, 0, 0, 0, 0)];
        let r = class_rollup(&parts);
        assert_eq!((r.phase.as_str(), r.synced, r.total, r.entries), ("Failed", 3, 4, vec![failing]));
        assert_eq!(class_rollup(&[parts[0].clone(), parts[2].clone()]).phase, "Applied");
        assert_eq!(class_rollup(&[parts[2].clone()]).phase, "Selected");
    }

    #[test]
    fn a_part_replaces_its_own_and_keeps_the_others() {
        let parts = [part("b", "Applied", 1, 1, 0, 0, 0), part("a", "Selected", 0, 0, 0, 0, 0)];
        let mine = part("a", "Applied", 2, 2, 0, 0, 5);
        let names: Vec<_> = with_part(&parts, &mine).into_iter().map(|p| (p.name, p.phase)).collect();
        assert_eq!(names, [("a".to_owned(), "Applied".to_owned()), ("b".into(), "Applied".into())]);
    }

    #[test]
    fn a_part_goes_stale_three_heartbeats_after_it_was_written() {
        let p = part("a", "Applied", 0, 0, 0, 0, 0);
        assert!(!is_stale(&p, at(180)), "at the limit, not past it");
        assert!(is_stale(&p, at(181)));
        assert!(is_stale(&ShardStatus { stale_after: "garbage".into(), ..p }, at(0)), "unreadable: stale");
    }

    #[test]
    fn a_shard_writes_its_part_when_it_changed_or_its_heartbeat_is_due() {
        let period = Duration::from_secs(60);
        let written = part("a", "Applied", 1, 1, 1, 2, 0);
        let same = ShardStatus { heartbeat_time: String::new(), stale_after: String::new(), ..written.clone() };
        assert!(part_due(None, &same, at(0), period));
        assert!(!part_due(Some(&written), &same, at(59), period));
        assert!(part_due(Some(&written), &same, at(60), period), "heartbeat");
        let counted = ShardStatus { clusters: ClusterCounts { total: 2, ready: 2, ..Default::default() }, ..same };
        assert!(part_due(Some(&written), &counted, at(1), period), "its Clusters changed");
    }

    #[test]
    fn a_stale_parts_clusters_are_not_counted_as_ready() {
        let fleet = Tally {
            counts: ClusterCounts { total: 4, ready: 2, progressing: 0, not_ready: 2, stale: 0, summary: "2/4".into() },
            ..Default::default()
        };
        let parts = [part("a", "Applied", 0, 0, 1, 2, 100), part("b", "Applied", 0, 0, 1, 2, 0)];
        let fresh = without_stale(fleet.clone(), &parts, at(150));
        assert_eq!(fresh, fleet);
        let t = without_stale(fleet, &parts, at(200));
        assert_eq!((t.counts.total, t.counts.ready, t.counts.not_ready, t.counts.stale), (4, 1, 3, 2));
        assert_eq!(t.counts.summary, "1/4");
        assert_eq!(t.stale_shards, ["b (its 2 Clusters; last heartbeat 2027-01-15T08:00:00Z)"]);
    }
}
