//! The server's state: the registry of served resources, every object keyed by resource,
//! namespace and name, one global resourceVersion counter, and the event log watches replay.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use super::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub group: String,
    pub plural: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as the log keeps it for watches.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    pub key: Key,
    /// The object after the change (for DELETED: its last state, with the deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change, so a selector-filtered watch can turn a change that
    /// leaves its selection into DELETED, as the real watch cache does.
    pub prev: Option<Arc<Value>>,
}

/// A watch asked to resume from a resourceVersion the log no longer holds.
#[derive(Debug)]
pub struct TooOld {
    pub requested: u64,
    pub oldest: u64,
}

#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    events: VecDeque<Arc<Event>>,
    /// Every event up to and including this resourceVersion has been dropped.
    compacted: u64,
    retain: usize,
}

impl Store {
    pub fn new(retain: usize) -> Store {
        Store { rv: 1, objects: BTreeMap::new(), events: VecDeque::new(), compacted: 0, retain: retain.max(1) }
    }

    /// The newest resourceVersion handed out.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Objects of one resource, ordered by namespace then name; `namespace` None means all.
    pub fn list<'a>(
        &'a self,
        group: &'a str,
        plural: &'a str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a Key, &'a Value)> + 'a {
        self.objects.iter().filter(move |(k, _)| k.group == group && k.plural == plural && namespace.is_none_or(|ns| k.namespace == ns))
    }

    /// Every object, whatever the resource.
    pub fn all(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter()
    }

    /// Keys of every object in a namespace, whatever the resource.
    pub fn keys_in_namespace(&self, namespace: &str) -> Vec<Key> {
        self.objects.keys().filter(|k| k.namespace == namespace).cloned().collect()
    }

    /// Stores `obj` under a new resourceVersion, logs the event and returns the stored object.
    pub fn put(&mut self, key: Key, mut obj: Value) -> Value {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        let prev = self.objects.insert(key.clone(), obj.clone());
        let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
        self.log(kind, key, obj.clone(), prev);
        obj
    }

    /// Replaces an object without a new resourceVersion or event: only for the state a
    /// deletion reports right after (the update that removed the last finalizer).
    pub fn overwrite(&mut self, key: &Key, obj: Value) {
        if let Some(slot) = self.objects.get_mut(key) {
            *slot = obj;
        }
    }

    /// Removes an object under a new resourceVersion and logs DELETED.
    pub fn remove(&mut self, key: &Key) -> Option<Value> {
        let prev = self.objects.remove(key)?;
        let mut obj = prev.clone();
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        self.log(EventType::Deleted, key.clone(), obj.clone(), Some(prev));
        Some(obj)
    }

    /// Objects of one resource as they were at `rv` (the newest state rolled back through the
    /// event log), ordered by namespace then name; `TooOld` once the log no longer reaches back.
    pub fn snapshot(&self, rv: u64, group: &str, plural: &str, namespace: Option<&str>) -> Result<Vec<(Key, Value)>, TooOld> {
        let events = self.events_since(rv)?;
        let mut objects: BTreeMap<Key, Value> = self.list(group, plural, namespace).map(|(k, v)| (k.clone(), v.clone())).collect();
        for e in events.iter().rev() {
            let k = &e.key;
            if k.group != group || k.plural != plural || namespace.is_some_and(|ns| k.namespace != ns) {
                continue;
            }
            match (&e.kind, &e.prev) {
                (EventType::Added, _) => {
                    objects.remove(k);
                }
                (_, Some(prev)) => {
                    objects.insert(k.clone(), (**prev).clone());
                }
                (_, None) => {}
            }
        }
        Ok(objects.into_iter().collect())
    }

    fn log(&mut self, kind: EventType, key: Key, object: Value, prev: Option<Value>) {
        let event = Event { rv: self.rv, kind, key, object: Arc::new(object), prev: prev.map(Arc::new) };
        self.events.push_back(Arc::new(event));
        while self.events.len() > self.retain {
            if let Some(dropped) = self.events.pop_front() {
                self.compacted = dropped.rv;
            }
        }
    }

    /// Events after `rv`, or `TooOld` when some of them were dropped.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<Event>>, TooOld> {
        if rv < self.compacted {
            return Err(TooOld { requested: rv, oldest: self.compacted + 1 });
        }
        let start = self.events.partition_point(|e| e.rv <= rv);
        Ok(self.events.range(start..).cloned().collect())
    }

    /// Drops the whole event log, as etcd compaction does: resuming a watch from any
    /// resourceVersion older than now answers 410 Gone.
    pub fn compact(&mut self) {
        self.events.clear();
        self.compacted = self.rv;
    }
}

/// Everything behind the server's one lock.
#[derive(Debug)]
pub struct State {
    pub registry: Registry,
    pub store: Store,
    /// `Warning` headers the current request collects (field validation's unknown fields).
    pub warnings: Vec<String>,
    /// Fields the current request's JSON body names twice, for field validation.
    pub duplicates: Vec<String>,
}
