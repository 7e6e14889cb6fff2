//! How long ago a wall-clock time written in status was, measured so that a step of the wall
//! clock (an NTP correction, a VM resumed) does not change it: `stageTimeout` and `waveTimeout`
//! judge a wait by this.
//!
//! Status keeps RFC 3339 wall-clock times (`status.upgrade.since`, `status.rollout.waveStarted`):
//! for people, and so that a restarted process knows where a wait began. The wall clock may
//! jump, the monotonic clock does not; so the first time this process sees a time it notes the
//! monotonic instant that time corresponds to (now, minus how long ago the wall clock says it
//! was), and from then on measures on the monotonic clock alone. A time written before this
//! process started can only be judged by the wall clock, once, at first sight: a jump while no
//! process runs counts (documented in docs/upgrades.md).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// How many times are remembered: one per Cluster mid-upgrade and per running wave is far
/// fewer; past this the oldest are forgotten (and judged by the wall clock again if seen).
const REMEMBERED: usize = 16_384;

/// When this process first saw each time (monotonic) and how long ago the wall clock then said
/// it was, by the time as written.
type Seen = HashMap<String, (Instant, Duration)>;

fn seen() -> &'static Mutex<Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// How long ago `stamp` (RFC 3339) was: on the monotonic clock from the first time this process
/// saw it. Unreadable, or in the future at first sight, is no time at all.
pub fn elapsed_since(stamp: &str) -> Duration {
    let Ok(mut seen) = seen().lock() else { return wall_elapsed(stamp, Utc::now()) };
    elapsed_in(&mut seen, stamp, Utc::now(), Instant::now())
}

/// Notes `stamp` as seen now (a time this process just wrote), so a jump before it is first
/// judged does not count.
pub fn note(stamp: &str) {
    if !stamp.is_empty() {
        let _ = elapsed_since(stamp);
    }
}

/// [`elapsed_since`] over an explicit memory and clocks (the tests step the wall clock).
fn elapsed_in(seen: &mut Seen, stamp: &str, wall: DateTime<Utc>, mono: Instant) -> Duration {
    if let Some((at, ago)) = seen.get(stamp) {
        return ago.saturating_add(mono.saturating_duration_since(*at));
    }
    let ago = wall_elapsed(stamp, wall);
    if seen.len() >= REMEMBERED
        && let Some(oldest) = seen.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone())
    {
        seen.remove(&oldest);
    }
    seen.insert(stamp.to_owned(), (mono, ago));
    ago
}

/// How long before `wall` the wall clock says `stamp` was.
fn wall_elapsed(stamp: &str, wall: DateTime<Utc>) -> Duration {
    DateTime::parse_from_rfc3339(stamp)
        .ok()
        .and_then(|t| wall.signed_duration_since(t.with_timezone(&Utc)).to_std().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wall_clock_step_after_first_sight_does_not_count() {
        let mut seen = HashMap::new();
        let wall: DateTime<Utc> = "2026-01-01T12:00:00Z".parse().unwrap();
        let s = Duration::from_secs;
        let mono = Instant::now() + s(7200);
        let stamp = "2026-01-01T11:59:00Z";
        // First sight: the wall clock says a minute ago.
        assert_eq!(elapsed_in(&mut seen, stamp, wall, mono), s(60));
        // Ten seconds later, whatever the wall clock says: forward an hour, back ten minutes.
        for jump in [chrono::Duration::hours(1), chrono::Duration::minutes(-10)] {
            assert_eq!(elapsed_in(&mut seen, stamp, wall + jump, mono + s(10)), s(70), "{jump}");
        }
        // A time first seen in the future (written before a backward step) is no time yet, and
        // then counts from now.
        let ahead = "2026-01-01T12:10:00Z";
        assert_eq!(elapsed_in(&mut seen, ahead, wall, mono), Duration::ZERO);
        assert_eq!(elapsed_in(&mut seen, ahead, wall, mono + s(5)), s(5));
        assert_eq!(elapsed_in(&mut seen, "not a time", wall, mono), Duration::ZERO);
        // Longer ago than the monotonic clock has run (written before a reboot): all of it.
        let long_ago = "2025-01-01T12:00:00Z";
        assert_eq!(elapsed_in(&mut seen, long_ago, wall, Instant::now()), s(365 * 24 * 3600));
    }
}
