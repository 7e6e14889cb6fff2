//! When each subscription is polled: the queue of what is due next (the daemon loop sleeps
//! until the earliest due time; tests drive it with tokio's paused clock), and the one retry
//! backoff. What a schedule is and how durations are written is `model::schedule`.

pub mod clock;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::model::schedule::Schedule;

/// The one retry backoff of the crate: 500 ms doubled per attempt (1-based), capped at 30 s.
pub fn backoff(attempt: u32) -> Duration {
    let factor = 1u64 << attempt.saturating_sub(1).min(16);
    Duration::from_millis(500u64.saturating_mul(factor)).min(Duration::from_secs(30))
}

/// `d` spread by up to ±20%, so retries of many Clusters that failed together do not arrive
/// together.
pub fn jittered(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(d.as_nanos());
    let spread = (h.finish() % 401) as f64 / 1000.0 - 0.2;
    d.mul_f64(1.0 + spread)
}

/// The set of subscriptions and when each is next due.
#[derive(Debug, Default)]
pub struct Queue {
    due: BTreeMap<String, Instant>,
}

impl Queue {
    /// Makes `name` due right away (new or changed subscriptions, webhook triggers).
    pub fn trigger(&mut self, name: &str, now: Instant) {
        self.due.insert(name.to_owned(), now);
    }

    /// Schedules `name`'s next poll.
    pub fn schedule(&mut self, name: &str, schedule: &Schedule, now: Instant, wall: DateTime<Utc>) {
        self.due.insert(name.to_owned(), now + schedule.delay_after(wall));
    }

    pub fn remove(&mut self, name: &str) {
        self.due.remove(name);
    }

    /// Keeps only the named subscriptions.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.due.retain(|k, _| keep(k));
    }

    /// The earliest due time, if anything is queued.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// Removes and returns every subscription due at `now`, in name order.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self.due.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
        for k in &due {
            self.due.remove(k);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let got: Vec<u64> = (1..=8).map(|a| backoff(a).as_millis() as u64).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    }

    #[tokio::test(start_paused = true)]
    async fn queue_fires_each_subscription_on_its_interval() {
        let mut q = Queue::default();
        let wall: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let start = Instant::now();
        q.schedule("fast", &Schedule::Interval(Duration::from_secs(10)), start, wall);
        q.schedule("slow", &Schedule::Interval(Duration::from_secs(60)), start, wall);
        let mut fired = Vec::new();
        for _ in 0..7 {
            let at = q.next_due().unwrap();
            tokio::time::sleep_until(at).await;
            for name in q.take_due(Instant::now()) {
                fired.push((name.clone(), (Instant::now() - start).as_secs()));
                let s = if name == "fast" { Duration::from_secs(10) } else { Duration::from_secs(60) };
                q.schedule(&name, &Schedule::Interval(s), Instant::now(), wall);
            }
        }
        let fast: Vec<u64> = fired.iter().filter(|(n, _)| n == "fast").map(|(_, t)| *t).collect();
        // Seven wake-ups: at 60 s both are due together and fire in the same wake-up.
        assert_eq!(fast, vec![10, 20, 30, 40, 50, 60, 70]);
        let slow: Vec<u64> = fired.iter().filter(|(n, _)| n == "slow").map(|(_, t)| *t).collect();
        assert_eq!(slow, vec![60]);
    }
}
