//! Watches: newline-delimited JSON events from the store's log, resumable from a
//! resourceVersion (410 Expired once compacted), with periodic bookmarks, watch-list
//! (`sendInitialEvents=true` closed by the `k8s.io/initial-events-end` bookmark),
//! `timeoutSeconds`, selectors and the Table format.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::query::Selection;
use super::store::{Event, EventType, Shared, State};
use super::table::{self, Include};
use super::target::{Target, present};

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// Synthetic ADDED for what exists now, then changes (`resourceVersion` unset or "0").
    Now,
    /// Watch-list: like `Now`, closed by the initial-events-end bookmark.
    InitialEvents,
    /// Changes after this resourceVersion.
    After(u64),
}

#[derive(Debug, Clone)]
pub struct Params {
    pub target: Target,
    pub selection: Selection,
    pub start: Start,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub table: Option<Include>,
    /// Objects as `PartialObjectMetadata` (a metadata-only watch).
    pub metadata_only: bool,
}

struct Watcher {
    shared: Arc<Shared>,
    p: Params,
    cursor: u64,
    pending: VecDeque<Bytes>,
    changes: watch::Receiver<u64>,
    cut: watch::Receiver<u64>,
    deadline: Option<Instant>,
    done: bool,
    headers_sent: bool,
}

/// The event stream of one watch request; it ends on timeout, on a cut, or after an ERROR.
pub fn stream(shared: Arc<Shared>, p: Params) -> impl futures_util::Stream<Item = Bytes> + Send {
    let changes = shared.changes.subscribe();
    let cut = shared.faults.cut_signal();
    let deadline = p.timeout.map(|t| Instant::now() + t);
    let mut w = Watcher { shared, p, cursor: 0, pending: VecDeque::new(), changes, cut, deadline, done: false, headers_sent: false };
    w.begin();
    futures_util::stream::unfold(w, |mut w| async move { w.next().await.map(|b| (b, w)) })
}

impl Watcher {
    fn begin(&mut self) {
        let shared = self.shared.clone();
        let state = shared.lock();
        self.cursor = state.store.current_rv();
        match self.p.start {
            Start::Now | Start::InitialEvents => {
                let objects: Vec<Value> = state
                    .store
                    .list(&self.p.target.rt.group, &self.p.target.rt.plural, self.p.target.namespace.as_deref())
                    .filter(|(_, o)| self.p.selection.matches(o))
                    .map(|(_, o)| o.clone())
                    .collect();
                for o in objects {
                    self.push(EventType::Added.as_str(), &o);
                }
                if matches!(self.p.start, Start::InitialEvents) {
                    self.push_bookmark(true);
                }
            }
            Start::After(rv) => {
                self.cursor = rv;
                self.catch_up(&state);
            }
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            let deadline = self.deadline;
            let bookmark_every = self.shared.bookmark_interval;
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    let shared = self.shared.clone();
                    let state = shared.lock();
                    self.catch_up(&state);
                }
                _ = self.cut.changed() => return None,
                _ = sleep_until_opt(deadline) => return None,
                _ = tokio::time::sleep(bookmark_every), if self.p.bookmarks => self.push_bookmark(false),
            }
        }
    }

    /// Queues every logged event after the cursor that this watch selects.
    fn catch_up(&mut self, state: &State) {
        match state.store.events_since(self.cursor) {
            Err(too_old) => {
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {} ({})", too_old.requested, too_old.oldest),
                    "reason": "Expired", "code": 410,
                });
                self.push_raw("ERROR", status);
                self.done = true;
            }
            Ok(events) => {
                for e in events {
                    self.cursor = e.rv;
                    if let Some(kind) = self.selects(&e) {
                        self.push(kind, &e.object);
                    }
                }
            }
        }
    }

    /// The event type this watch reports for `e`, if any: a change that moves an object into
    /// or out of the selection reads as ADDED or DELETED, as the real watch cache reports it.
    fn selects(&self, e: &Event) -> Option<&'static str> {
        let t = &self.p.target;
        if e.key.group != t.rt.group || e.key.plural != t.rt.plural || t.namespace.as_deref().is_some_and(|ns| ns != e.key.namespace) {
            return None;
        }
        let now = self.p.selection.matches(&e.object);
        match e.kind {
            EventType::Added | EventType::Deleted => now.then_some(e.kind.as_str()),
            EventType::Modified => {
                let before = e.prev.as_deref().is_some_and(|p| self.p.selection.matches(p));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }

    fn push(&mut self, kind: &str, obj: &Value) {
        let object = present(obj, &self.p.target);
        let object = match self.p.table {
            Some(include) => {
                let t = table::table(&self.p.target.rt, &self.p.target.version, &[object], include, !self.headers_sent, None);
                self.headers_sent = true;
                t
            }
            None if self.p.metadata_only => table::partial(object),
            None => object,
        };
        self.push_raw(kind, object);
    }

    fn push_bookmark(&mut self, initial_events_end: bool) {
        let t = &self.p.target;
        let mut metadata = json!({"resourceVersion": self.cursor.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": t.rt.kind, "apiVersion": t.rt.api_version(&t.version), "metadata": metadata});
        self.push_raw("BOOKMARK", object);
    }

    fn push_raw(&mut self, kind: &str, object: Value) {
        let mut line = json!({"type": kind, "object": object}).to_string();
        line.push('\n');
        self.pending.push_back(Bytes::from(line));
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
