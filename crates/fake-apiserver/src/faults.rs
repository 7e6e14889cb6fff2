//! Fault injection and request accounting: per path/verb rules that answer an error status
//! (429 with Retry-After included), add latency or fire a limited number of times; a switch that
//! cuts every open watch; counters of requests and writes per verb and resource.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// One injected fault. Unset matchers match everything.
#[derive(Debug, Clone, Default)]
pub struct FaultRule {
    verb: Option<String>,
    path_contains: Option<String>,
    status: Option<u16>,
    retry_after: Option<u64>,
    latency: Option<Duration>,
    remaining: Option<u32>,
    skip: u32,
}

impl FaultRule {
    /// A rule matching every request and answering it normally; narrow and arm it with the
    /// methods below.
    pub fn new() -> FaultRule {
        FaultRule::default()
    }

    /// Match one verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub fn verb(mut self, verb: &str) -> FaultRule {
        self.verb = Some(verb.to_string());
        self
    }

    /// Match requests whose path contains `fragment` (e.g. `/configmaps/c1`).
    pub fn path(mut self, fragment: &str) -> FaultRule {
        self.path_contains = Some(fragment.to_string());
        self
    }

    /// Answer this status instead of serving (a `Status` with the code's reason).
    pub fn status(mut self, code: u16) -> FaultRule {
        self.status = Some(code);
        self
    }

    /// Answer 429 TooManyRequests with `Retry-After: secs` and `details.retryAfterSeconds`.
    pub fn too_many_requests(mut self, secs: u64) -> FaultRule {
        self.status = Some(429);
        self.retry_after = Some(secs);
        self
    }

    /// Delay matching requests (then serve them, or answer the status if one is set).
    pub fn latency(mut self, delay: Duration) -> FaultRule {
        self.latency = Some(delay);
        self
    }

    /// Fire only for the next `n` matching requests.
    pub fn times(mut self, n: u32) -> FaultRule {
        self.remaining = Some(n);
        self
    }

    /// Let the first `n` matching requests through untouched, then fire (a write that lands,
    /// then the ones after it that fail).
    pub fn skip(mut self, n: u32) -> FaultRule {
        self.skip = n;
        self
    }

    /// A rule from JSON, as `POST /_testkit/faults` takes it:
    /// `{"verb", "path", "status", "retryAfter", "latencyMs", "times", "skip"}`, every field
    /// optional.
    ///
    /// # Errors
    /// A field of the wrong type, named in the message.
    pub fn from_json(v: &serde_json::Value) -> Result<FaultRule, String> {
        let text = |k: &str| match v.get(k) {
            None => Ok(None),
            Some(x) => x.as_str().map(|s| Some(s.to_string())).ok_or_else(|| format!("{k} must be a string")),
        };
        let number = |k: &str| match v.get(k) {
            None => Ok(None),
            Some(x) => x.as_u64().map(Some).ok_or_else(|| format!("{k} must be a non-negative integer")),
        };
        Ok(FaultRule {
            verb: text("verb")?,
            path_contains: text("path")?,
            status: number("status")?.map(|s| u16::try_from(s).map_err(|_| "status out of range".to_string())).transpose()?,
            retry_after: number("retryAfter")?,
            latency: number("latencyMs")?.map(Duration::from_millis),
            remaining: number("times")?.map(|n| u32::try_from(n).map_err(|_| "times out of range".to_string())).transpose()?,
            skip: number("skip")?.map(|n| u32::try_from(n).map_err(|_| "skip out of range".to_string())).transpose()?.unwrap_or(0),
        })
    }

    fn matches(&self, verb: &str, path: &str) -> bool {
        self.remaining != Some(0)
            && self.verb.as_deref().is_none_or(|v| v == verb)
            && self.path_contains.as_deref().is_none_or(|p| path.contains(p))
    }
}

/// What the fault layer decided for one request.
#[derive(Debug, Default)]
pub struct Decision {
    pub latency: Duration,
    pub status: Option<(u16, Option<u64>)>,
}

/// Handle to a server's faults; clones share the rules.
#[derive(Debug, Clone)]
pub struct Faults {
    rules: Arc<Mutex<Vec<FaultRule>>>,
    cut: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults { rules: Arc::default(), cut: watch::channel(0).0 }
    }
}

impl Faults {
    fn rules(&self) -> MutexGuard<'_, Vec<FaultRule>> {
        self.rules.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a rule; it fires on the matching requests from now on.
    pub fn add(&self, rule: FaultRule) {
        self.rules().push(rule);
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules().clear();
    }

    /// Ends every open watch stream now (clients see the response end, as when an API server
    /// restarts or a load balancer drops them).
    pub fn cut_watches(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    pub(crate) fn cut_signal(&self) -> watch::Receiver<u64> {
        self.cut.subscribe()
    }

    /// Consumes one firing of every matching rule.
    pub(crate) fn decide(&self, verb: &str, path: &str) -> Decision {
        let mut decision = Decision::default();
        for rule in self.rules().iter_mut().filter(|r| r.matches(verb, path)) {
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            decision.latency += rule.latency.unwrap_or_default();
            if decision.status.is_none() {
                decision.status = rule.status.map(|s| (s, rule.retry_after));
            }
        }
        decision
    }
}

/// Counts per verb, then per resource (`configmaps`, `deployments.apps`, `deployments.apps/status`).
pub type Counts = BTreeMap<String, BTreeMap<String, u64>>;

/// A snapshot of the counters, as `GET /_testkit/stats` answers it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Stats {
    /// Every API request that reached a resource, including reads and refused ones, and every
    /// discovery request (verb `discovery`, by the group-version or list asked for).
    pub requests: Counts,
    /// Successful, non-dry-run mutating requests (create, update, patch, delete, deletecollection).
    pub writes: Counts,
    /// Those of the writes that changed the store (a re-apply of the same object is a write but no change).
    pub changes: Counts,
}

impl Stats {
    /// Total writes over all verbs and resources.
    pub fn total_writes(&self) -> u64 {
        self.writes.values().flat_map(|m| m.values()).sum()
    }

    /// Total changes over all verbs and resources.
    pub fn total_changes(&self) -> u64 {
        self.changes.values().flat_map(|m| m.values()).sum()
    }

    /// Count of one verb on one resource in `counts`.
    pub fn count(counts: &Counts, verb: &str, resource: &str) -> u64 {
        counts.get(verb).and_then(|m| m.get(resource)).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Counters(Arc<Mutex<Stats>>);

impl Counters {
    fn lock(&self) -> MutexGuard<'_, Stats> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn request(&self, verb: &str, resource: &str) {
        *self.lock().requests.entry(verb.into()).or_default().entry(resource.into()).or_default() += 1;
    }

    pub fn write(&self, verb: &str, resource: &str, changed: bool) {
        let mut stats = self.lock();
        *stats.writes.entry(verb.into()).or_default().entry(resource.into()).or_default() += 1;
        if changed {
            *stats.changes.entry(verb.into()).or_default().entry(resource.into()).or_default() += 1;
        }
    }

    pub fn snapshot(&self) -> Stats {
        self.lock().clone()
    }

    pub fn reset(&self) {
        *self.lock() = Stats::default();
    }
}
