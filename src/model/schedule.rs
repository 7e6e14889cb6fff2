//! When a subscription is polled, as the config says it: cron expressions or fixed intervals,
//! and the duration syntax every timeout and interval of the config uses (`90s`, `1h30m`).
//! Parsing and arithmetic only; the queue that sleeps on them is `schedule::Queue`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// How often a subscription is polled.
#[derive(Clone)]
pub enum Schedule {
    /// A cron expression: five fields (minute first) or six (seconds first), in UTC.
    Cron {
        expr: String,
        schedule: Box<cron::Schedule>,
    },
    Interval(Duration),
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Schedule::Cron { expr: a, .. }, Schedule::Cron { expr: b, .. }) => a == b,
            (Schedule::Interval(a), Schedule::Interval(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Cron { expr, .. } => write!(f, "cron `{expr}`"),
            Schedule::Interval(d) => write!(f, "every {}", format_duration(*d)),
        }
    }
}

/// Why a schedule or duration in the config cannot be read. Always permanent: the text must
/// change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("expected a cron expression with 5 fields (minute hour day month weekday), found {fields} fields")]
    CronFields { fields: usize },
    #[error("invalid weekday field `{field}`: expected days 0-7 (0 and 7 are Sunday) or names (`mon-fri`), in lists, ranges and steps")]
    Weekdays { field: String },
    #[error("invalid cron expression: {source}")]
    Cron {
        #[source]
        source: cron::error::Error,
    },
    #[error("interval must be at least {}", format_duration(MIN_INTERVAL))]
    IntervalTooShort,
    #[error("expected a duration such as `30s`, `5m` or `1h30m`, found `{text}`")]
    Duration { text: String },
    #[error("duration `{text}` is longer than the maximum of {}", format_duration(MAX_DURATION))]
    TooLong { text: String },
}

impl Error {
    /// Never: a schedule is wrong until the config changes.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::CronFields { .. } | Error::Cron { .. } | Error::Weekdays { .. } => "InvalidCron",
            Error::IntervalTooShort => "IntervalTooShort",
            Error::Duration { .. } => "InvalidDuration",
            Error::TooLong { .. } => "DurationTooLong",
        }
    }
}

/// The shortest interval accepted: polling faster than this only burns the source's quota.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Used when a subscription names neither `schedule` nor `interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

impl Schedule {
    /// Parses a cron expression; five fields get a `0` seconds field in front.
    ///
    /// # Errors
    /// The wrong number of fields, or what the cron parser refuses.
    pub fn cron(expr: &str) -> Result<Schedule, Error> {
        parse_cron(expr).map(|s| Schedule::Cron { expr: expr.to_owned(), schedule: Box::new(s) })
    }

    /// Parses an interval such as `30s`, `5m`, `1h30m`.
    ///
    /// # Errors
    /// Not a duration, or shorter than [`MIN_INTERVAL`].
    pub fn interval(text: &str) -> Result<Schedule, Error> {
        let d = parse_duration(text)?;
        if d < MIN_INTERVAL {
            return Err(Error::IntervalTooShort);
        }
        Ok(Schedule::Interval(d))
    }

    /// How long from `now` until the next poll.
    pub fn delay_after(&self, now: DateTime<Utc>) -> Duration {
        match self {
            Schedule::Interval(d) => *d,
            Schedule::Cron { schedule, .. } => schedule
                .after(&now)
                .next()
                .and_then(|next| (next - now).to_std().ok())
                // A cron expression with no future time (e.g. a past year) never fires again.
                .unwrap_or(Duration::from_secs(365 * 24 * 3600)),
        }
    }
}

/// Parses a cron expression. Five fields are Unix cron's (`minute hour day month weekday`,
/// weekdays `0`-`7` with `0` and `7` Sunday, as crontab(5) and Kubernetes CronJobs read them):
/// a `0` seconds field goes in front and the weekdays are written as the parser counts them
/// (`1` is Sunday there). Six or seven fields are the parser's own (seconds first, weekdays `1`
/// Sunday to `7` Saturday, or names).
///
/// # Errors
/// The wrong number of fields, or what the cron parser refuses.
pub fn parse_cron(expr: &str) -> Result<cron::Schedule, Error> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let full = match fields.len() {
        5 => {
            let weekdays = unix_weekdays(fields[4]).ok_or_else(|| Error::Weekdays { field: fields[4].to_owned() })?;
            format!("0 {} {weekdays}", fields[..4].join(" "))
        }
        6 | 7 => expr.to_owned(),
        fields => return Err(Error::CronFields { fields }),
    };
    cron::Schedule::from_str(&full).map_err(|source| Error::Cron { source })
}

/// A Unix cron weekday field (`1-5`, `0,6`, `*/2`, `mon-fri`, `5-7`) as the parser's list of
/// days (`1` Sunday .. `7` Saturday); `*` and `?` as they are. `None`: not a weekday field.
fn unix_weekdays(field: &str) -> Option<String> {
    if field == "*" || field == "?" {
        return Some(field.to_owned());
    }
    let day = |s: &str| -> Option<u32> {
        const NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        match s.parse::<u32>() {
            Ok(n) if n <= 7 => Some(n % 7),
            Ok(_) => None,
            Err(_) => NAMES.iter().position(|n| n.eq_ignore_ascii_case(s)).map(|p| p as u32),
        }
    };
    let mut days = std::collections::BTreeSet::new();
    for part in field.split(',') {
        let (base, step) = match part.split_once('/') {
            Some((b, s)) => (b, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (from, to) = match base.split_once('-') {
            _ if base == "*" => (0, 6),
            Some((a, b)) => {
                // `7` ends a range as Sunday at its end (`5-7`: Friday to Sunday).
                let b = if b == "7" { 7 } else { day(b)? };
                (day(a)?, b)
            }
            None => {
                let d = day(base)?;
                (d, if step > 1 { 6 } else { d })
            }
        };
        if from > to {
            return None;
        }
        days.extend((from..=to).step_by(step as usize).map(|d| d % 7));
    }
    Some(days.iter().map(|d| (d + 1).to_string()).collect::<Vec<_>>().join(","))
}

/// Longest duration a config may give (an interval, a retry, a timeout): one year. Longer ones
/// are mistakes, and unbounded ones overflow the clock arithmetic that schedules them.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses `90s`, `5m`, `2h`, `1h30m`, `500ms`, with checked arithmetic, up to [`MAX_DURATION`].
///
/// # Errors
/// Not of the expected form, or longer than the cap.
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    let expected = || Error::Duration { text: text.to_owned() };
    let too_long = || Error::TooLong { text: text.to_owned() };
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(expected());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(expected());
        }
        // More digits than a u64 holds is too long, not malformed.
        let n: u64 = rest[..digits].parse().map_err(|_| too_long())?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let secs_per = match &rest[..unit] {
            "ms" => None,
            "s" => Some(1),
            "m" => Some(60),
            "h" => Some(3600),
            _ => return Err(expected()),
        };
        let d = match secs_per {
            None => Duration::from_millis(n),
            Some(k) => Duration::from_secs(n.checked_mul(k).ok_or_else(too_long)?),
        };
        total = total.checked_add(d).filter(|t| *t <= MAX_DURATION).ok_or_else(too_long)?;
        rest = &rest[unit..];
    }
    Ok(total)
}

/// The shortest form [`parse_duration`] reads back: `90s` is `1m30s`, `3600s` is `1h`, `3630s`
/// is `1h30s`; zero parts are left out, a sub-second rest is shown as `ms` (`1s500ms`), and
/// zero is `0s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    let ms = d.subsec_millis();
    if s == 0 && ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (n, unit) in [(s / 3600, "h"), ((s % 3600) / 60, "m"), (s % 60, "s"), (u64::from(ms), "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_format() {
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("45s").unwrap(), Duration::from_secs(45));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn huge_durations_overflowed_into_panics() {
        for text in [
            "18446744073709551615s",
            "99999999999999999h",
            "18446744073709551615s18446744073709551615s",
            "9999999999999999999999s",
            "8761h",
            "366d",
        ] {
            let err = parse_duration(text).unwrap_err().to_string();
            assert!(err.contains(text), "{text}: {err}");
        }
        assert!(parse_duration("8761h").unwrap_err().to_string().contains("longer than the maximum of 8760h"));
        assert_eq!(parse_duration("8760h").unwrap(), MAX_DURATION);
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert!(Schedule::interval("0s").is_err());
    }

    #[test]
    fn durations_format_without_zero_parts_and_read_back() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1s500ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(59), "59s"),
            (Duration::from_secs(60), "1m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(3599), "59m59s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(3630), "1h30s"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(3661), "1h1m1s"),
            (Duration::from_secs(86400), "24h"),
            (MAX_DURATION, "8760h"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text, "{d:?}");
            if !d.is_zero() {
                assert_eq!(parse_duration(text).unwrap(), d, "{text} reads back");
            }
        }
        // What is under a millisecond is not shown.
        assert_eq!(format_duration(Duration::from_micros(1_000_999)), "1s");
        assert_eq!(format_duration(Duration::from_micros(999)), "0s");
    }

    #[test]
    fn five_field_weekdays_are_read_as_unix_cron_reads_them() {
        use chrono::TimeZone;
        // 2026-07-19 is a Sunday.
        let sunday = chrono::Utc.with_ymd_and_hms(2026, 7, 19, 12, 0, 0).unwrap();
        let next_day = |expr: &str| {
            let s = parse_cron(expr).unwrap();
            s.after(&sunday).next().map(|t| chrono::Datelike::weekday(&t).num_days_from_sunday())
        };
        assert_eq!(next_day("0 22 * * 1-5"), Some(1), "1-5 is Monday to Friday, as crontab(5) says");
        assert_eq!(next_day("0 22 * * 0"), Some(0), "0 is Sunday");
        assert_eq!(next_day("0 22 * * 7"), Some(0), "so is 7");
        assert_eq!(next_day("0 22 * * 6"), Some(6));
        assert_eq!(next_day("0 9 * * 5-7"), Some(5), "Friday to Sunday: Sunday 09:00 is past, Friday next");
        assert_eq!(next_day("0 22 * * mon-fri"), Some(1));
        assert_eq!(next_day("0 22 * * */2"), Some(0), "every second day from Sunday: Sunday 22:00 today");
        assert_eq!(unix_weekdays("1-5").as_deref(), Some("2,3,4,5,6"));
        assert_eq!(unix_weekdays("0,6").as_deref(), Some("1,7"));
        for bad in ["8", "5-2", "x", "1/0"] {
            assert!(parse_cron(&format!("0 22 * * {bad}")).is_err(), "{bad}");
        }
    }

    #[test]
    fn five_field_cron_is_accepted() {
        let s = Schedule::cron("*/5 * * * *").unwrap();
        let now: DateTime<Utc> = "2026-01-01T00:01:30Z".parse().unwrap();
        assert_eq!(s.delay_after(now), Duration::from_secs(210));
        assert!(Schedule::cron("* * *").is_err());
        assert!(Schedule::cron("61 * * * *").is_err());
    }
}
