//! Source pollers: one task per source, polling on the union of its subscriptions' schedules
//! and at once when triggered (a config reload, a webhook). Each publishes what its source offers
//! through the [`Context`]; none waits for another, so a slow source delays only itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::{Context, POLL_TIMEOUT};

/// The running pollers, by source name.
#[derive(Default)]
pub struct Pollers {
    tasks: BTreeMap<String, (Arc<Notify>, JoinHandle<()>)>,
}

impl Pollers {
    /// Starts a poller for every source a subscription uses and stops those of sources no
    /// longer used. Call again after a reload.
    pub fn sync(&mut self, ctx: &Arc<Context>) {
        let config = ctx.config();
        let wanted: std::collections::BTreeSet<String> = config.subscriptions.iter().map(|s| s.source.clone()).collect();
        self.tasks.retain(|name, (_, task)| {
            let keep = wanted.contains(name) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for name in wanted {
            self.tasks.entry(name.clone()).or_insert_with(|| {
                let notify = Arc::new(Notify::new());
                let task = tokio::spawn(poll_loop(ctx.clone(), name, notify.clone()));
                (notify, task)
            });
        }
    }

    /// Polls `source` now (its poller wakes; a poll in progress finishes first).
    pub fn trigger(&self, source: &str) {
        if let Some((notify, _)) = self.tasks.get(source) {
            notify.notify_one();
        }
    }

    /// The sources being polled.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.tasks.keys().map(String::as_str)
    }

    /// Stops every poller.
    pub fn stop(&mut self) {
        for (_, (_, task)) in std::mem::take(&mut self.tasks) {
            task.abort();
        }
    }
}

impl Drop for Pollers {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn poll_loop(ctx: Arc<Context>, source: String, trigger: Arc<Notify>) {
    let mut failures = 0u32;
    let metrics = crate::telemetry::metrics();
    loop {
        let started = std::time::Instant::now();
        let polled = tokio::time::timeout(POLL_TIMEOUT, ctx.poll(&source)).await;
        let result = match &polled {
            Ok(Ok(_)) => "success",
            Ok(Err(_)) => "error",
            Err(_) => "timeout",
        };
        metrics.polled(&source, result, started.elapsed());
        match polled {
            Ok(Ok(changed)) => {
                failures = 0;
                if changed {
                    info!(source = %source, "source offers new releases");
                }
            }
            Ok(Err(e)) => {
                failures = failures.saturating_add(1);
                warn!(source = %source, error = %e, "source poll failed; using the releases cached from the last successful poll");
            }
            Err(_) => {
                failures = failures.saturating_add(1);
                warn!(source = %source, seconds = POLL_TIMEOUT.as_secs(), "source poll timed out; using the cached releases");
            }
        }
        let config = ctx.config();
        let now = Utc::now();
        let mut wait = config
            .subscriptions
            .iter()
            .filter(|s| s.source == source)
            .map(|s| s.schedule.delay_after(now))
            .min()
            .unwrap_or(Duration::from_secs(3600));
        if failures > 0 {
            // A failed poll is retried sooner than the schedule, with backoff, never later.
            wait = wait.min(crate::schedule::jittered(crate::schedule::backoff(failures).max(Duration::from_secs(5))));
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = trigger.notified() => info!(source = %source, "poll triggered"),
        }
    }
}
