//! The long-running loop: poll each subscription on its schedule, reload the config when the
//! file changes (keeping the last good config on a bad edit), and stop cleanly on SIGTERM/SIGINT.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;

use chrono::Utc;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::config::watch::ConfigWatcher;
use crate::config::{self, Config, Target};
use crate::controller;
use crate::schedule::Queue;

/// Runs until `shutdown` completes. A pass in progress is abandoned at shutdown; every file it
/// wrote is complete (atomic writes), and the next start picks up from the cache.
///
/// # Errors
/// Only when the config file's directory cannot be watched at start-up.
pub async fn run(path: PathBuf, initial: Config, shutdown: impl Future<Output = ()>) -> notify::Result<()> {
    let mut watcher = ConfigWatcher::new(&path)?;
    let mut config = initial;
    let mut last_text = crate::config::read_bounded(&path).unwrap_or_default();
    let mut queue = Queue::default();
    let now = Instant::now();
    for sub in &config.subscriptions {
        queue.trigger(&sub.name, now);
    }
    info!(file = %path.display(), subscriptions = config.subscriptions.len(), "stacksync started");
    tokio::pin!(shutdown);
    // Clusters skipped as not ready, per subscription, and when to try them again (only them).
    let mut retries: BTreeMap<String, (Instant, BTreeSet<(String, String)>)> = BTreeMap::new();
    loop {
        let next_retry = retries.values().map(|(at, _)| *at).min();
        let next = [queue.next_due(), next_retry].into_iter().flatten().min();
        tokio::select! {
            () = &mut shutdown => {
                info!("shutting down");
                return Ok(());
            }
            Some(()) = watcher.changed() => {
                reload(&path, &mut config, &mut last_text, &mut queue);
                retries.retain(|name, _| config.subscription(name).is_some());
            }
            () = sleep_until(next) => {
                let now = Instant::now();
                let due = queue.take_due(now);
                // A full pass of a subscription covers its retries too.
                let retry: Vec<String> =
                    retries.iter().filter(|(name, (at, _))| *at <= now && !due.contains(name)).map(|(name, _)| name.clone()).collect();
                let clusters: BTreeSet<(String, String)> =
                    retry.iter().filter_map(|name| retries.get(name)).flat_map(|(_, set)| set.iter().cloned()).collect();
                for (subs, scope) in [(due.clone(), None), (retry, Some(&clusters))] {
                    if subs.is_empty() {
                        continue;
                    }
                    // Shutdown does not wait for a long pass (a rate-limit wait can take minutes):
                    // everything a pass writes is atomic, so abandoning it leaves a consistent cache.
                    let result = tokio::select! {
                        result = controller::pass_scoped(&config, Some(&subs), scope, true) => result,
                        () = &mut shutdown => {
                            info!("shutting down; the pass in progress was abandoned");
                            return Ok(());
                        }
                    };
                    for name in &subs {
                        retries.remove(name);
                    }
                    match result {
                        Ok(report) => {
                            let ready = report.clusters.iter().filter(|c| c.status.ready).count();
                            let kind = if scope.is_some() { "retry of clusters that were not ready" } else { "pass" };
                            info!(subscriptions = subs.len(), clusters = report.clusters.len(), ready, "{kind} complete");
                            let at = Instant::now() + not_ready_retry(&config);
                            for (name, set) in report.retry {
                                retries.insert(name, (at, set));
                            }
                        }
                        Err(e) => error!(error = %e, "pass failed: cache unavailable"),
                    }
                }
                let (now, wall) = (Instant::now(), Utc::now());
                for name in &due {
                    if let Some(sub) = config.subscription(name) {
                        queue.schedule(name, &sub.schedule, now, wall);
                    }
                }
            }
        }
    }
}

fn not_ready_retry(config: &Config) -> std::time::Duration {
    match &config.target {
        Target::Kubernetes(k) => k.not_ready_retry,
        Target::Directory(_) => crate::config::KubernetesTarget::default().not_ready_retry,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Applies a config edit: a valid one replaces the running config and re-polls what changed; an
/// invalid one is logged and ignored.
fn reload(path: &std::path::Path, config: &mut Config, last_text: &mut String, queue: &mut Queue) {
    let text = match crate::config::read_bounded(path) {
        Ok(t) => t,
        Err(e) => {
            warn!(file = %path.display(), error = %e, "config file unreadable; keeping the last good config");
            return;
        }
    };
    if text == *last_text {
        return;
    }
    *last_text = text.clone();
    let new = match Config::parse(path, &text) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors.0 {
                error!(file = %e.file.display(), line = e.line, column = e.col, field = %e.field, "invalid config: {}", e.message);
            }
            error!(errors = errors.0.len(), "config reload rejected; keeping the last good config");
            return;
        }
    };
    let changes = config::diff(config, &new);
    if changes.is_empty() {
        info!("config reloaded: no effective change");
        return;
    }
    for change in &changes {
        info!(change = %change, "config reloaded");
    }
    let now = Instant::now();
    queue.retain(|name| new.subscription(name).is_some());
    for sub in &new.subscriptions {
        if config.subscription(&sub.name) != Some(sub)
            || config.cache != new.cache
            || config.target != new.target
            || config.source(&sub.source) != new.source(&sub.source)
        {
            queue.trigger(&sub.name, now);
        }
    }
    *config = new;
}
