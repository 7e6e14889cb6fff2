//! sprig's date functions with Go's `time` semantics: layouts as Go writes and reads them
//! (`2006-01-02 15:04:05`), durations as `time.Duration` prints and parses them. "Local" is UTC,
//! as in the operator's container; only `UTC` / `Local` zones are known (a named zone is an
//! error rather than a silent UTC). The functions that read the clock (`now`, `ago`, a date of
//! something that is not a time) are refused: their output would change on every render.

use std::rc::Rc;

use chrono::{Datelike, Timelike};

use super::super::value::{GoTime, Val};
use super::{A, FuncError, R};

pub(super) fn call(name: &str, a: &[A]) -> Option<R> {
    let s = |i: usize| a[i].string();
    Some(match name {
        "date" => (|| format_in(&s(0)?, &a[1].any(), "Local"))(),
        "dateInZone" | "date_in_zone" => (|| format_in(&s(0)?, &a[1].any(), &s(2)?))(),
        "htmlDate" => format_in("2006-01-02", &a[0].any(), "Local"),
        "htmlDateInZone" => (|| format_in("2006-01-02", &a[0].any(), &s(1)?))(),
        "toDate" | "mustToDate" => (|| match parse(&s(0)?, &s(1)?) {
            Ok(t) => Ok(Val::Time(Rc::new(t))),
            Err(e) if name == "mustToDate" => Err(e),
            Err(_) => Ok(Val::Time(Rc::new(GoTime::zero()))),
        })(),
        "unixEpoch" => a[0].time().map(|t| Val::str(t.secs.to_string())),
        "dateModify" | "date_modify" | "mustDateModify" | "must_date_modify" => (|| {
            let t = a[1].time()?;
            match parse_duration(&s(0)?) {
                Ok(d) => Ok(Val::Time(Rc::new(t.add_nanos(d)))),
                Err(e) if name.starts_with("must") => Err(e),
                Err(_) => Ok(Val::Time(Rc::new(t))),
            }
        })(),
        "duration" => {
            let n = match a[0].any() {
                Val::Str(s) => super::super::gonum::parse_int(&s, 10).unwrap_or(0),
                Val::I64(n) => n,
                _ => 0,
            };
            Ok(Val::str(duration_string(n.wrapping_mul(1_000_000_000))))
        }
        "durationRound" => {
            let d = match a[0].any() {
                Val::Str(s) => parse_duration(&s).unwrap_or(0),
                Val::I64(n) => n,
                Val::Time(_) => return Some(Err("durationRound of a time reads the clock".into())),
                _ => 0,
            };
            Ok(Val::str(duration_round(d)))
        }
        _ => return None,
    })
}

fn format_in(layout: &str, date: &Val, zone: &str) -> R {
    let t = match date {
        Val::Time(t) => (**t).clone(),
        // chrono's calendar ends at year ±262,143, Go's goes on: refused rather than printed wrong.
        Val::Int(n) | Val::I64(n) if chrono::DateTime::from_timestamp(*n, 0).is_none() => {
            return Err(format!("the Unix time {n} is outside the years stacksync can format (up to ±262,143)").into());
        }
        Val::Int(n) | Val::I64(n) => GoTime::unix(*n, 0),
        _ => return Err("a date of something that is not a time or a Unix time would read the clock".into()),
    };
    match zone {
        "UTC" | "Local" | "" => Ok(Val::str(format(&t.in_utc(), layout))),
        other => Err(format!("time zone `{other}` is not known to stacksync (only UTC and Local, which is UTC)").into()),
    }
}

impl GoTime {
    pub fn zero() -> GoTime {
        GoTime { secs: -62_135_596_800, nanos: 0, offset: 0, zone: "UTC".into() }
    }

    pub fn unix(secs: i64, nanos: u32) -> GoTime {
        GoTime { secs, nanos, offset: 0, zone: "UTC".into() }
    }

    fn in_utc(&self) -> GoTime {
        GoTime { offset: 0, zone: "UTC".into(), ..self.clone() }
    }

    fn add_nanos(&self, d: i64) -> GoTime {
        let total = i128::from(self.secs) * 1_000_000_000 + i128::from(self.nanos) + i128::from(d);
        let secs = total.div_euclid(1_000_000_000) as i64;
        let nanos = total.rem_euclid(1_000_000_000) as u32;
        GoTime { secs, nanos, ..self.clone() }
    }

    /// Go's `Time.String()`.
    pub fn string(&self) -> String {
        format(self, "2006-01-02 15:04:05.999999999 -0700 MST")
    }

    /// RFC 3339 with nanoseconds, as `encoding/json` marshals a time.
    pub fn rfc3339(&self) -> String {
        format(self, "2006-01-02T15:04:05.999999999Z07:00")
    }

    fn civil(&self) -> chrono::NaiveDateTime {
        chrono::DateTime::from_timestamp(self.secs + i64::from(self.offset), self.nanos).map(|d| d.naive_utc()).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Std {
    Lit,
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    Tz,
    /// Numeric zone: (ISO 8601 `Z` form, hours-only / hh:mm / hhmm / hh:mm:ss / hhmmss layout).
    NumTz(bool, &'static str),
    /// Fraction of a second: (separator, digits, trailing zeros kept).
    Frac(char, usize, bool),
}

/// Go's `nextStdChunk`: the literal before the first layout element, the element, the rest.
fn next_chunk(layout: &str) -> (&str, Std, &str, usize) {
    let b = layout.as_bytes();
    // Bytes, not `str` slices: `i` may sit inside a multi-byte character of the literal text.
    let at = |i: usize, s: &str| b[i..].starts_with(s.as_bytes());
    for i in 0..b.len() {
        let std = match b[i] {
            b'J' if at(i, "January") => Some((Std::LongMonth, 7)),
            b'J' if at(i, "Jan") => Some((Std::Month, 3)),
            b'M' if at(i, "Monday") => Some((Std::LongWeekDay, 6)),
            b'M' if at(i, "Mon") => Some((Std::WeekDay, 3)),
            b'M' if at(i, "MST") => Some((Std::Tz, 3)),
            b'0' if at(i, "002") => Some((Std::ZeroYearDay, 3)),
            b'0' if b.get(i + 1).is_some_and(|c| (b'1'..=b'6').contains(c)) => Some((
                [Std::ZeroMonth, Std::ZeroDay, Std::ZeroHour12, Std::ZeroMinute, Std::ZeroSecond, Std::Year][usize::from(b[i + 1] - b'1')],
                2,
            )),
            b'1' if at(i, "15") => Some((Std::Hour, 2)),
            b'1' => Some((Std::NumMonth, 1)),
            b'2' if at(i, "2006") => Some((Std::LongYear, 4)),
            b'2' => Some((Std::Day, 1)),
            b'_' if at(i, "_2006") => return (&layout[..i + 1], Std::LongYear, &layout[i + 5..], 4),
            b'_' if at(i, "__2") => Some((Std::UnderYearDay, 3)),
            b'_' if at(i, "_2") => Some((Std::UnderDay, 2)),
            b'3' => Some((Std::Hour12, 1)),
            b'4' => Some((Std::Minute, 1)),
            b'5' => Some((Std::Second, 1)),
            b'P' if at(i, "PM") => Some((Std::PM, 2)),
            b'p' if at(i, "pm") => Some((Std::Pm, 2)),
            b'-' | b'Z' => {
                let z = b[i] == b'Z';
                ["070000", "07:00:00", "0700", "07:00", "07"].iter().find(|f| at(i + 1, f)).map(|f| (Std::NumTz(z, f), 1 + f.len()))
            }
            b'.' | b',' if b.get(i + 1).is_some_and(|c| *c == b'0' || *c == b'9') => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while b.get(j) == Some(&ch) {
                    j += 1;
                }
                if b.get(j).is_some_and(u8::is_ascii_digit) {
                    None
                } else {
                    Some((Std::Frac(char::from(b[i]), j - i - 1, ch == b'0'), j - i))
                }
            }
            _ => None,
        };
        if let Some((std, len)) = std {
            return (&layout[..i], std, &layout[i + len..], len);
        }
    }
    (layout, Std::Lit, "", 0)
}

const MONTHS: [&str; 12] =
    ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Go's `Time.Format`.
pub fn format(t: &GoTime, layout: &str) -> String {
    let c = t.civil();
    let mut out = String::new();
    let mut rest = layout;
    while !rest.is_empty() {
        let (lit, std, after, _) = next_chunk(rest);
        out.push_str(lit);
        if std == Std::Lit {
            break;
        }
        rest = after;
        let (year, month, day) = (c.year(), c.month() as usize, c.day());
        let hour = c.hour();
        let hour12 = if hour.is_multiple_of(12) { 12 } else { hour % 12 };
        match std {
            Std::Lit => {}
            Std::Year => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Std::LongYear => out.push_str(&if year < 0 { format!("-{:04}", -year) } else { format!("{year:04}") }),
            Std::Month => out.push_str(&MONTHS[month - 1][..3]),
            Std::LongMonth => out.push_str(MONTHS[month - 1]),
            Std::NumMonth => out.push_str(&month.to_string()),
            Std::ZeroMonth => out.push_str(&format!("{month:02}")),
            Std::WeekDay => out.push_str(&DAYS[c.weekday().num_days_from_sunday() as usize][..3]),
            Std::LongWeekDay => out.push_str(DAYS[c.weekday().num_days_from_sunday() as usize]),
            Std::Day => out.push_str(&day.to_string()),
            Std::UnderDay => out.push_str(&format!("{day:>2}")),
            Std::ZeroDay => out.push_str(&format!("{day:02}")),
            Std::UnderYearDay => out.push_str(&format!("{:>3}", c.ordinal())),
            Std::ZeroYearDay => out.push_str(&format!("{:03}", c.ordinal())),
            Std::Hour => out.push_str(&format!("{hour:02}")),
            Std::Hour12 => out.push_str(&hour12.to_string()),
            Std::ZeroHour12 => out.push_str(&format!("{hour12:02}")),
            Std::Minute => out.push_str(&c.minute().to_string()),
            Std::ZeroMinute => out.push_str(&format!("{:02}", c.minute())),
            Std::Second => out.push_str(&c.second().to_string()),
            Std::ZeroSecond => out.push_str(&format!("{:02}", c.second())),
            Std::PM => out.push_str(if hour >= 12 { "PM" } else { "AM" }),
            Std::Pm => out.push_str(if hour >= 12 { "pm" } else { "am" }),
            Std::Tz => {
                if t.zone.is_empty() {
                    let m = t.offset / 60;
                    out.push_str(&format!("{}{:02}{:02}", if m < 0 { '-' } else { '+' }, m.abs() / 60, m.abs() % 60));
                } else {
                    out.push_str(&t.zone);
                }
            }
            Std::NumTz(iso, form) => {
                if iso && t.offset == 0 {
                    out.push('Z');
                } else {
                    let o = t.offset.abs();
                    out.push(if t.offset < 0 { '-' } else { '+' });
                    let (h, m, s) = (o / 3600, o / 60 % 60, o % 60);
                    out.push_str(&match form {
                        "07" => format!("{h:02}"),
                        "07:00" => format!("{h:02}:{m:02}"),
                        "0700" => format!("{h:02}{m:02}"),
                        "07:00:00" => format!("{h:02}:{m:02}:{s:02}"),
                        _ => format!("{h:02}{m:02}{s:02}"),
                    });
                }
            }
            Std::Frac(sep, n, zeros) => {
                let digits = format!("{:09}", t.nanos);
                let mut d = digits[..n.min(9)].to_owned();
                if !zeros {
                    while d.ends_with('0') {
                        d.pop();
                    }
                }
                if !d.is_empty() {
                    out.push(sep);
                    out.push_str(&d);
                }
            }
        }
    }
    out
}

/// Go's `time.ParseInLocation(layout, value, Local)` with Local being UTC.
fn parse(layout: &str, value: &str) -> Result<GoTime, FuncError> {
    let bad = |what: &str| format!("parsing time {value:?} as {layout:?}: cannot parse {what}");
    let (mut year, mut month, mut day, mut hour, mut min, mut sec, mut nanos) = (0i32, 1u32, 1u32, 0u32, 0u32, 0u32, 0u32);
    let (mut pm, mut pm_set, mut offset, mut zone): (bool, bool, Option<i32>, Option<String>) = (false, false, None, None);
    let mut yday: Option<u32> = None;
    let (mut l, mut v) = (layout, value);
    loop {
        let (lit, std, after, _) = next_chunk(l);
        v = v.strip_prefix(lit).ok_or_else(|| bad(&format!("{v:?} as {lit:?}")))?;
        if std == Std::Lit {
            if !v.is_empty() {
                return Err(format!("parsing time {value:?}: extra text: {v:?}").into());
            }
            break;
        }
        l = after;
        let num = |v: &mut &str, min_len: usize, max_len: usize, what: &str| -> Result<u32, FuncError> {
            let n = v.bytes().take(max_len).take_while(u8::is_ascii_digit).count();
            if n < min_len {
                return Err(bad(&format!("{v:?} as {what:?}")).into());
            }
            let x = v[..n].parse().map_err(|_| bad(what))?;
            *v = &v[n..];
            Ok(x)
        };
        match std {
            Std::Lit => {}
            Std::Year => {
                let yy = num(&mut v, 2, 2, "06")? as i32;
                year = if yy >= 69 { 1900 + yy } else { 2000 + yy };
            }
            Std::LongYear => year = num(&mut v, 4, 4, "2006")? as i32,
            Std::Month | Std::LongMonth => {
                let found = MONTHS.iter().position(|m| {
                    let name = if std == Std::Month { &m[..3] } else { m };
                    v.get(..name.len()).is_some_and(|p| p.eq_ignore_ascii_case(name))
                });
                let i = found.ok_or_else(|| bad(&format!("{v:?} as \"Jan\"")))?;
                v = &v[if std == Std::Month { 3 } else { MONTHS[i].len() }..];
                month = i as u32 + 1;
            }
            Std::NumMonth | Std::ZeroMonth => month = num(&mut v, if std == Std::ZeroMonth { 2 } else { 1 }, 2, "01")?,
            Std::WeekDay | Std::LongWeekDay => {
                let i = DAYS
                    .iter()
                    .position(|d| {
                        let name = if std == Std::WeekDay { &d[..3] } else { d };
                        v.get(..name.len()).is_some_and(|p| p.eq_ignore_ascii_case(name))
                    })
                    .ok_or_else(|| bad(&format!("{v:?} as \"Mon\"")))?;
                v = &v[if std == Std::WeekDay { 3 } else { DAYS[i].len() }..];
            }
            Std::Day | Std::UnderDay | Std::ZeroDay => {
                if std == Std::UnderDay && v.starts_with(' ') {
                    v = &v[1..];
                }
                day = num(&mut v, if std == Std::ZeroDay { 2 } else { 1 }, 2, "02")?;
            }
            Std::UnderYearDay | Std::ZeroYearDay => {
                for _ in 0..2 {
                    if std == Std::UnderYearDay && v.starts_with(' ') {
                        v = &v[1..];
                    }
                }
                yday = Some(num(&mut v, if std == Std::ZeroYearDay { 3 } else { 1 }, 3, "002")?);
            }
            Std::Hour => hour = num(&mut v, 2, 2, "15")?,
            Std::Hour12 | Std::ZeroHour12 => hour = num(&mut v, if std == Std::ZeroHour12 { 2 } else { 1 }, 2, "03")?,
            Std::Minute | Std::ZeroMinute => min = num(&mut v, if std == Std::ZeroMinute { 2 } else { 1 }, 2, "04")?,
            Std::Second | Std::ZeroSecond => {
                sec = num(&mut v, if std == Std::ZeroSecond { 2 } else { 1 }, 2, "05")?;
                // A fraction after the seconds is accepted even when the layout has none.
                if matches!(v.as_bytes().first(), Some(b'.' | b','))
                    && !matches!(next_chunk(l).1, Std::Frac(..))
                    && next_chunk(l).0.is_empty()
                {
                    let n = v[1..].bytes().take_while(u8::is_ascii_digit).count();
                    if n > 0 {
                        nanos = frac_nanos(&v[1..1 + n]);
                        v = &v[1 + n..];
                    }
                }
            }
            Std::PM | Std::Pm => {
                let t = v.get(..2).ok_or_else(|| bad("PM"))?;
                pm = match t.to_ascii_uppercase().as_str() {
                    "PM" => true,
                    "AM" => false,
                    _ => return Err(bad(&format!("{v:?} as \"PM\"")).into()),
                };
                pm_set = true;
                v = &v[2..];
            }
            Std::Tz => {
                if let Some(r) = v.strip_prefix("UTC") {
                    v = r;
                    offset = Some(0);
                    zone = Some("UTC".into());
                } else {
                    let n = v.bytes().take_while(u8::is_ascii_uppercase).count();
                    if n < 3 {
                        return Err(bad(&format!("{v:?} as \"MST\"")).into());
                    }
                    zone = Some(v[..n].to_owned());
                    offset = Some(0);
                    v = &v[n..];
                }
            }
            Std::NumTz(iso, form) => {
                if iso && v.starts_with('Z') {
                    v = &v[1..];
                    offset = Some(0);
                    zone = Some("UTC".into());
                } else {
                    let sign = match v.as_bytes().first() {
                        Some(b'+') => 1,
                        Some(b'-') => -1,
                        _ => return Err(bad(&format!("{v:?} as \"-07:00\"")).into()),
                    };
                    v = &v[1..];
                    let parts = match form {
                        "07" => 1,
                        "07:00" | "0700" => 2,
                        _ => 3,
                    };
                    let mut o = 0i32;
                    for (i, scale) in [3600, 60, 1].into_iter().take(parts).enumerate() {
                        if i > 0 && form.contains(':') {
                            v = v.strip_prefix(':').ok_or_else(|| bad(&format!("{v:?} as \":\"")))?;
                        }
                        o += num(&mut v, 2, 2, "07")? as i32 * scale;
                    }
                    offset = Some(sign * o);
                    zone = Some(String::new());
                }
            }
            Std::Frac(_, n, exact) => {
                // `.000` needs exactly that many digits; `.999` is optional and of any length.
                let has_sep = matches!(v.as_bytes().first(), Some(b'.' | b','));
                let digits = if has_sep { v[1..].bytes().take_while(u8::is_ascii_digit).count() } else { 0 };
                if exact && (!has_sep || digits != n) {
                    return Err(bad(&format!("{v:?} as \".000\"")).into());
                }
                if has_sep && digits > 0 {
                    nanos = frac_nanos(&v[1..1 + digits]);
                    v = &v[1 + digits..];
                }
            }
        }
    }
    if pm_set && hour > 12 {
        return Err(format!("parsing time {value:?}: hour out of range").into());
    }
    if pm_set {
        if pm && hour < 12 {
            hour += 12;
        } else if !pm && hour == 12 {
            hour = 0;
        }
    }
    if let Some(yd) = yday {
        let d = chrono::NaiveDate::from_yo_opt(year, yd).ok_or_else(|| format!("parsing time {value:?}: day-of-year out of range"))?;
        month = d.month();
        day = d.day();
    }
    if !(1..=12).contains(&month) {
        return Err(format!("parsing time {value:?}: month out of range").into());
    }
    let date = chrono::NaiveDate::from_ymd_opt(year, month, day).ok_or_else(|| format!("parsing time {value:?}: day out of range"))?;
    let time = chrono::NaiveTime::from_hms_opt(hour, min, sec).ok_or_else(|| {
        let what = if hour > 23 {
            "hour"
        } else if min > 59 {
            "minute"
        } else {
            "second"
        };
        format!("parsing time {value:?}: {what} out of range")
    })?;
    let local = date.and_time(time).and_utc().timestamp();
    let off = offset.unwrap_or(0);
    let zone = match (offset, zone) {
        (None, _) => "UTC".to_owned(),
        (Some(0), Some(z)) if z.is_empty() => "UTC".to_owned(),
        (_, Some(z)) => z,
        (Some(_), None) => String::new(),
    };
    Ok(GoTime { secs: local - i64::from(off), nanos, offset: off, zone })
}

fn frac_nanos(digits: &str) -> u32 {
    let mut d: String = digits.chars().take(9).collect();
    while d.len() < 9 {
        d.push('0');
    }
    d.parse().unwrap_or(0)
}

/// Go's `time.ParseDuration`, in nanoseconds.
pub(super) fn parse_duration(s: &str) -> Result<i64, FuncError> {
    let err = || format!("time: invalid duration {}", super::super::gofmt::quote(s));
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(err().into());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int: u128 = if int_len > 0 { rest[..int_len].parse().map_err(|_| err())? } else { 0 };
        rest = &rest[int_len..];
        let (mut frac, mut scale) = (0u128, 1u128);
        let mut frac_len = 0;
        if let Some(r) = rest.strip_prefix('.') {
            frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            for c in r[..frac_len].bytes().take(18) {
                frac = frac * 10 + u128::from(c - b'0');
                scale *= 10;
            }
            rest = &r[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return Err(err().into());
        }
        let unit_len = rest.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("time: missing unit in duration {}", super::super::gofmt::quote(s)).into()),
            u => {
                return Err(
                    format!("time: unknown unit {} in duration {}", super::super::gofmt::quote(u), super::super::gofmt::quote(s)).into()
                );
            }
        };
        rest = &rest[unit_len..];
        total = total.saturating_add(int.saturating_mul(unit)).saturating_add(frac * unit / scale);
        if total > 1 << 63 {
            return Err(err().into());
        }
    }
    if neg {
        Ok((total as i128).wrapping_neg() as i64)
    } else if total > i64::MAX as u128 {
        Err(err().into())
    } else {
        Ok(total as i64)
    }
}

/// Go's `Duration.String()` of `d` nanoseconds.
pub(super) fn duration_string(d: i64) -> String {
    let neg = d < 0;
    let u = d.unsigned_abs();
    let frac = |u: u64, prec: u32| -> (String, u64) {
        let p = 10u64.pow(prec);
        let (int, f) = (u / p, u % p);
        let mut digits = format!("{f:0width$}", width = prec as usize);
        while digits.ends_with('0') {
            digits.pop();
        }
        (if digits.is_empty() { String::new() } else { format!(".{digits}") }, int)
    };
    let body = if u == 0 {
        "0s".to_owned()
    } else if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        let (f, i) = frac(u, 3);
        format!("{i}{f}µs")
    } else if u < 1_000_000_000 {
        let (f, i) = frac(u, 6);
        format!("{i}{f}ms")
    } else {
        let (f, secs) = frac(u, 9);
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            format!("{h}h{m}m{s}{f}s")
        } else if m > 0 {
            format!("{m}m{s}{f}s")
        } else {
            format!("{s}{f}s")
        }
    };
    if neg { format!("-{body}") } else { body }
}

/// sprig's `durationRound`: the largest whole unit.
fn duration_round(d: i64) -> String {
    let u = d.unsigned_abs();
    const S: u64 = 1_000_000_000;
    for (unit, name) in
        [(S * 3600 * 24 * 365, "y"), (S * 3600 * 24 * 30, "mo"), (S * 3600 * 24, "d"), (S * 3600, "h"), (S * 60, "m"), (S, "s")]
    {
        if u > unit {
            return format!("{}{name}", u / unit);
        }
    }
    "0s".to_owned()
}
