//! Maintenance windows (`rollout.windows`): a cron schedule read in an IANA time zone opens a
//! window that lasts a duration; a window may be for the Clusters with some labels only. Pure:
//! the rollout passes `now` (the wall clock — a window is a time of day for people) and reads
//! whether a Cluster is inside one of its windows, and when the next one opens.
//!
//! The schedule is matched against the zone's civil time (what a clock on the wall there shows),
//! so `0 22 * * 1-5` in `Europe/Berlin` opens at 22:00 Berlin time in winter and in summer. A
//! start that falls into a daylight-saving gap opens at the first instant after the gap (as
//! `cron` on a host in that zone does); one in a repeated hour opens at its first occurrence.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};

/// At most this many schedule times are looked at to answer one question: a schedule firing
/// every second is looked back over two hours at most, never looped over for days.
const MAX_STEPS: usize = 10_000;

/// One maintenance window.
#[derive(Clone)]
pub struct Window {
    /// The cron expression as written (five fields, or six with seconds first).
    pub expr: String,
    schedule: Box<cron::Schedule>,
    /// How long the window stays open after each start.
    pub duration: Duration,
    /// The IANA time zone the schedule is read in (`UTC` when not given).
    pub zone: String,
    tz: jiff::tz::TimeZone,
    /// Only Clusters with all these labels have this window (empty: every Cluster).
    pub labels: BTreeMap<String, String>,
}

impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        (&self.expr, self.duration, &self.zone, &self.labels) == (&other.expr, other.duration, &other.zone, &other.labels)
    }
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` for {} ({})", self.expr, super::schedule::format_duration(self.duration), self.zone)?;
        if !self.labels.is_empty() {
            write!(f, " for {:?}", self.labels)?;
        }
        Ok(())
    }
}

/// Why a window in the config cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Schedule(#[from] super::schedule::Error),
    #[error("unknown time zone `{zone}`: expected an IANA name such as `Europe/Berlin` or `UTC`")]
    Zone { zone: String },
}

impl Window {
    /// A window opened by `expr` (cron, read in `zone`) for `duration`, for the Clusters with
    /// all of `labels`.
    ///
    /// # Errors
    /// `expr` is not a cron expression, or `zone` is not a time zone the database knows.
    pub fn new(expr: &str, duration: Duration, zone: &str, labels: BTreeMap<String, String>) -> Result<Window, Error> {
        let schedule = super::schedule::parse_cron(expr)?;
        let tz = jiff::tz::db().get(zone).map_err(|_| Error::Zone { zone: zone.to_owned() })?;
        Ok(Window { expr: expr.to_owned(), schedule: Box::new(schedule), duration, zone: zone.to_owned(), tz, labels })
    }

    /// Whether this window is one of the Cluster's (it has all of [`Window::labels`]).
    pub fn applies(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    /// When the window open at `now` closes; `None` when it is closed at `now`.
    pub fn open_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let civil_now = self.civil(now)?;
        // The latest start at or before now: the schedule's times newest first, from an hour
        // past now's civil time (in a repeated hour the civil time went back: a start of its
        // first pass is later by the clock on the wall than now, yet earlier in fact); a start
        // that opens after now (that hour, or a daylight-saving gap) is passed over.
        let from = Utc.from_utc_datetime(&civil_now) + chrono::Duration::seconds(3601);
        for start in self.schedule.after(&from).rev().take(MAX_STEPS) {
            let Some(opened) = self.instant(start.naive_utc()) else { continue };
            if opened > now {
                continue;
            }
            let closes = opened + chrono::Duration::from_std(self.duration).ok()?;
            return (now < closes).then_some(closes);
        }
        None
    }

    /// When the window opens next after `now` (`None`: never again, e.g. a past year).
    pub fn next_open(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let civil_now = self.civil(now)?;
        // An hour back: a start in a repeated hour may open after now though its civil time is
        // before now's.
        let from = Utc.from_utc_datetime(&civil_now) - chrono::Duration::hours(1);
        self.schedule.after(&from).take(MAX_STEPS).filter_map(|start| self.instant(start.naive_utc())).find(|t| *t > now)
    }

    /// `now` as the civil time of the zone.
    fn civil(&self, now: DateTime<Utc>) -> Option<NaiveDateTime> {
        let ts = jiff::Timestamp::from_second(now.timestamp()).ok()?;
        let dt = ts.to_zoned(self.tz.clone()).datetime();
        chrono::NaiveDate::from_ymd_opt(i32::from(dt.year()), dt.month().try_into().ok()?, dt.day().try_into().ok()?)?.and_hms_opt(
            dt.hour().try_into().ok()?,
            dt.minute().try_into().ok()?,
            dt.second().try_into().ok()?,
        )
    }

    /// The instant a civil time of the zone names (a gap's times: the first instant after it;
    /// a repeated hour's: its first occurrence).
    fn instant(&self, civil: NaiveDateTime) -> Option<DateTime<Utc>> {
        use chrono::{Datelike, Timelike};
        let dt = jiff::civil::DateTime::new(
            i16::try_from(civil.year()).ok()?,
            i8::try_from(civil.month()).ok()?,
            i8::try_from(civil.day()).ok()?,
            i8::try_from(civil.hour()).ok()?,
            i8::try_from(civil.minute()).ok()?,
            i8::try_from(civil.second()).ok()?,
            0,
        )
        .ok()?;
        let ts = self.tz.to_ambiguous_timestamp(dt).compatible().ok()?;
        Utc.timestamp_opt(ts.as_second(), 0).single()
    }
}

/// Where a Cluster stands with its windows at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No windows are configured: any time.
    Always,
    /// Inside one, open until then.
    Open(DateTime<Utc>),
    /// Outside every window of the Cluster: the next opens then (`None`: none of its windows
    /// opens again, or none is the Cluster's).
    Closed(Option<DateTime<Utc>>),
}

impl Verdict {
    pub fn is_open(&self) -> bool {
        !matches!(self, Verdict::Closed(_))
    }
}

/// The windows as they stand at one instant: each one's end if open, else its next opening.
/// Computed once per look at a fleet, then asked for each Cluster's labels.
pub struct At<'w> {
    windows: Vec<Standing<'w>>,
}

/// A window, when it closes if open, and when it opens next if closed.
type Standing<'w> = (&'w Window, Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// `windows` at `now`.
pub fn at(windows: &[Window], now: DateTime<Utc>) -> At<'_> {
    At {
        windows: windows
            .iter()
            .map(|w| {
                let until = w.open_until(now);
                let next = if until.is_some() { None } else { w.next_open(now) };
                (w, until, next)
            })
            .collect(),
    }
}

impl At<'_> {
    /// Whether a Cluster with `labels` may be moved now.
    pub fn verdict(&self, labels: &BTreeMap<String, String>) -> Verdict {
        if self.windows.is_empty() {
            return Verdict::Always;
        }
        let mine = || self.windows.iter().filter(|(w, _, _)| w.applies(labels));
        if let Some(until) = mine().filter_map(|(_, until, _)| *until).max() {
            return Verdict::Open(until);
        }
        Verdict::Closed(mine().filter_map(|(_, _, next)| *next).min())
    }
}

/// Whether a Cluster with `labels` may be moved at `now` under `windows`.
pub fn verdict(windows: &[Window], labels: &BTreeMap<String, String>, now: DateTime<Utc>) -> Verdict {
    at(windows, now).verdict(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn window(expr: &str, hours: u64, zone: &str) -> Window {
        Window::new(expr, Duration::from_secs(hours * 3600), zone, BTreeMap::new()).unwrap()
    }

    #[test]
    fn a_weeknight_window_in_berlin_is_open_at_22_local_in_winter_and_in_summer() {
        let w = window("0 22 * * 1-5", 2, "Europe/Berlin");
        // Winter: UTC+1. Tuesday 2026-01-13 22:30 Berlin = 21:30 UTC.
        assert_eq!(w.open_until(at("2026-01-13T21:30:00Z")), Some(at("2026-01-13T23:00:00Z")));
        assert_eq!(w.open_until(at("2026-01-13T20:59:59Z")), None);
        assert_eq!(w.open_until(at("2026-01-13T23:00:00Z")), None, "closed at its end");
        // Summer: UTC+2. Tuesday 2026-07-14 22:00 Berlin = 20:00 UTC.
        assert_eq!(w.open_until(at("2026-07-14T20:00:00Z")), Some(at("2026-07-14T22:00:00Z")));
        assert_eq!(w.next_open(at("2026-07-14T19:00:00Z")), Some(at("2026-07-14T20:00:00Z")));
        // Friday night's window, then Monday's: the weekend is closed.
        assert_eq!(w.next_open(at("2026-07-17T23:00:00Z")), Some(at("2026-07-20T20:00:00Z")));
    }

    #[test]
    fn a_window_spanning_midnight_stays_open_into_the_next_day() {
        let w = window("0 23 * * *", 3, "UTC");
        assert_eq!(w.open_until(at("2026-03-02T01:30:00Z")), Some(at("2026-03-02T02:00:00Z")));
        assert_eq!(w.open_until(at("2026-03-02T02:00:01Z")), None);
    }

    #[test]
    fn a_start_in_the_spring_gap_opens_after_the_gap_and_a_repeated_hour_opens_once() {
        // Europe/Berlin 2026-03-29: 02:00 local does not exist (clocks go 02:00 -> 03:00, 01:00 UTC).
        let w = window("30 2 * * *", 1, "Europe/Berlin");
        assert_eq!(w.next_open(at("2026-03-29T00:00:00Z")), Some(at("2026-03-29T01:30:00Z")));
        assert!(w.open_until(at("2026-03-29T01:45:00Z")).is_some());
        // 2026-10-25: 02:00-03:00 local happens twice; the window opens at the first 02:30 (00:30 UTC).
        assert_eq!(w.next_open(at("2026-10-24T23:00:00Z")), Some(at("2026-10-25T00:30:00Z")));
        assert_eq!(w.open_until(at("2026-10-25T01:00:00Z")), Some(at("2026-10-25T01:30:00Z")));
    }

    #[test]
    fn a_cluster_has_the_windows_of_its_labels_and_none_means_always() {
        let canary = BTreeMap::from([("canary".to_owned(), "true".to_owned())]);
        let windows =
            vec![Window::new("0 10 * * *", Duration::from_secs(3600), "UTC", canary.clone()).unwrap(), window("0 22 * * *", 1, "UTC")];
        let now = at("2026-05-05T10:30:00Z");
        assert_eq!(verdict(&windows, &canary, now), Verdict::Open(at("2026-05-05T11:00:00Z")));
        assert_eq!(verdict(&windows, &BTreeMap::new(), now), Verdict::Closed(Some(at("2026-05-05T22:00:00Z"))));
        assert_eq!(verdict(&[], &BTreeMap::new(), now), Verdict::Always);
        let only_canaries = &windows[..1];
        assert_eq!(verdict(only_canaries, &BTreeMap::new(), now), Verdict::Closed(None), "no window is this Cluster's");
    }

    #[test]
    fn a_schedule_firing_every_second_is_answered_in_bounded_steps() {
        let w = window("* * * * * *", 0, "UTC");
        assert_eq!(w.open_until(at("2026-05-05T10:30:00Z")), None, "a zero-length window is never open");
        assert_eq!(w.next_open(at("2026-05-05T10:30:00Z")), Some(at("2026-05-05T10:30:01Z")));
    }

    #[test]
    fn unknown_zones_and_bad_schedules_are_named() {
        let e = Window::new("0 22 * * *", Duration::from_secs(60), "Mars/Olympus", BTreeMap::new()).unwrap_err();
        assert!(e.to_string().contains("unknown time zone `Mars/Olympus`"), "{e}");
        assert!(Window::new("0 22 * *", Duration::from_secs(60), "UTC", BTreeMap::new()).is_err());
    }
}
