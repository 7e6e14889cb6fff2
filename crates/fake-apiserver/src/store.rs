//! The server's state: the registry of served resources, every object keyed by resource,
//! namespace and name, one global resourceVersion counter, and the event log watches replay;
//! and [`Shared`], that state behind the lock every connection takes, with the change signal
//! watches wait on, the faults and the counters. Everything that handles a request sits above
//! this module.
//!
//! Lists cost what they return, not the store's size: objects are ordered by resource, then
//! namespace, then name, so one resource (or one namespace of it) is a range; and a label index
//! per resource, `(key, value)` → keys, gives the candidates of a selector with an equality or
//! set-based `in` requirement. Candidates are still matched against the whole selection, so the
//! index only narrows, never decides.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::faults::{Counters, Faults};
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

/// Label index of one resource: `(label key, label value)` → the objects carrying it.
type LabelIndex = HashMap<(String, String), BTreeSet<Key>>;

#[derive(Debug)]
pub struct Store {
    rv: u64,
    /// Shared with the event log: a write stores the object once.
    objects: BTreeMap<Key, Arc<Value>>,
    /// By `(group, plural)`.
    labels: HashMap<(String, String), LabelIndex>,
    events: VecDeque<Arc<Event>>,
    /// Every event up to and including this resourceVersion has been dropped.
    compacted: u64,
    retain: usize,
}

impl Store {
    pub fn new(retain: usize) -> Store {
        Store { rv: 1, objects: BTreeMap::new(), labels: HashMap::new(), events: VecDeque::new(), compacted: 0, retain: retain.max(1) }
    }

    /// The newest resourceVersion handed out.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key).map(|o| &**o)
    }

    /// Objects of one resource, ordered by namespace then name; `namespace` None means all.
    /// A range of the store: costs the objects it yields.
    pub fn list<'a>(&'a self, group: &str, plural: &str, namespace: Option<&str>) -> impl Iterator<Item = (&'a Key, &'a Value)> + use<'a> {
        let start =
            Key { group: group.into(), plural: plural.into(), namespace: namespace.unwrap_or_default().into(), name: String::new() };
        let whole_namespace = namespace.is_some();
        self.objects
            .range(start.clone()..)
            .take_while(move |(k, _)| {
                k.group == start.group && k.plural == start.plural && (!whole_namespace || k.namespace == start.namespace)
            })
            .map(|(k, o)| (k, &**o))
    }

    /// Objects of one resource carrying the label `key` with one of `values`, ordered by
    /// namespace then name; `namespace` None means all. Costs the objects it yields (the index
    /// is ordered like the store, so a namespace is a range of it too).
    pub fn list_labelled(&self, group: &str, plural: &str, namespace: Option<&str>, key: &str, values: &[&str]) -> Vec<(&Key, &Value)> {
        let Some(index) = self.labels.get(&(group.to_string(), plural.to_string())) else { return Vec::new() };
        let start =
            Key { group: group.into(), plural: plural.into(), namespace: namespace.unwrap_or_default().into(), name: String::new() };
        let mut keys: Vec<&Key> = values
            .iter()
            .filter_map(|v| index.get(&(key.to_string(), (*v).to_string())))
            .flat_map(|set| set.range(&start..).take_while(|k| namespace.is_none_or(|ns| k.namespace == ns)))
            .collect();
        if values.len() > 1 {
            keys.sort();
            keys.dedup();
        }
        keys.into_iter().filter_map(|k| self.objects.get_key_value(k)).map(|(k, o)| (k, &**o)).collect()
    }

    /// How many objects of one resource carry the label `key` with one of `values`: what
    /// [`Store::list_labelled`] would look at.
    pub fn count_labelled(&self, group: &str, plural: &str, key: &str, values: &[&str]) -> usize {
        let Some(index) = self.labels.get(&(group.to_string(), plural.to_string())) else { return 0 };
        values.iter().filter_map(|v| index.get(&(key.to_string(), (*v).to_string()))).map(BTreeSet::len).sum()
    }

    /// Every object, whatever the resource.
    pub fn all(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// Keys of every object in a namespace, whatever the resource.
    pub fn keys_in_namespace(&self, namespace: &str) -> Vec<Key> {
        self.objects.keys().filter(|k| k.namespace == namespace).cloned().collect()
    }

    /// Stores `obj` under a new resourceVersion, logs the event and returns the stored object
    /// (the one the store and the log share).
    pub fn put(&mut self, key: Key, obj: Value) -> Arc<Value> {
        let mirror = super::events::other_view(&key.group, &key.plural, &obj)
            .map(|(group, converted)| (Key { group: group.to_owned(), ..key.clone() }, converted));
        let stored = self.put_one(key, obj);
        if let Some((other, converted)) = mirror {
            self.put_one(other, converted);
        }
        stored
    }

    fn put_one(&mut self, key: Key, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        let obj = Arc::new(obj);
        let prev = self.objects.insert(key.clone(), obj.clone());
        reindex(&mut self.labels, &key, prev.as_deref(), Some(&obj));
        let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
        self.log(kind, key, obj.clone(), prev);
        obj
    }

    /// Replaces an object without a new resourceVersion or event: only for the state a
    /// deletion reports right after (the update that removed the last finalizer).
    pub fn overwrite(&mut self, key: &Key, obj: Value) {
        if let Some(slot) = self.objects.get_mut(key) {
            let prev = std::mem::replace(slot, Arc::new(obj));
            reindex(&mut self.labels, key, Some(&prev), self.objects.get(key).map(|o| &**o));
        }
    }

    /// Removes an object under a new resourceVersion and logs DELETED.
    pub fn remove(&mut self, key: &Key) -> Option<Value> {
        let removed = self.remove_one(key)?;
        if let Some((group, _)) = super::events::other_view(&key.group, &key.plural, &removed) {
            self.remove_one(&Key { group: group.to_owned(), ..key.clone() });
        }
        Some(removed)
    }

    fn remove_one(&mut self, key: &Key) -> Option<Value> {
        let prev = self.objects.remove(key)?;
        reindex(&mut self.labels, key, Some(&prev), None);
        let mut obj = (*prev).clone();
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        self.log(EventType::Deleted, key.clone(), Arc::new(obj.clone()), Some(prev));
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

    fn log(&mut self, kind: EventType, key: Key, object: Arc<Value>, prev: Option<Arc<Value>>) {
        let event = Event { rv: self.rv, kind, key, object, prev };
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

/// Moves `key` in the label index from the labels of `old` to those of `new`.
fn reindex(labels: &mut HashMap<(String, String), LabelIndex>, key: &Key, old: Option<&Value>, new: Option<&Value>) {
    let pairs = |o: Option<&Value>| -> Vec<(String, String)> {
        o.and_then(super::meta::labels)
            .map(|l| l.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
            .unwrap_or_default()
    };
    let (old, new) = (pairs(old), pairs(new));
    if old == new {
        return;
    }
    let index = labels.entry((key.group.clone(), key.plural.clone())).or_default();
    for pair in old.iter().filter(|p| !new.contains(p)) {
        if let Some(set) = index.get_mut(pair) {
            set.remove(key);
            if set.is_empty() {
                index.remove(pair);
            }
        }
    }
    for pair in new.into_iter().filter(|p| !old.contains(p)) {
        index.entry(pair).or_default().insert(key.clone());
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

/// What every connection shares.
pub struct Shared {
    state: Mutex<State>,
    /// The newest resourceVersion, sent after every write so watches wake up.
    pub changes: watch::Sender<u64>,
    pub faults: Faults,
    pub counters: Counters,
    /// How often an idle watch that allows bookmarks gets one ([`crate::Options`]).
    pub bookmark_interval: Duration,
}

impl Shared {
    pub fn new(state: State, bookmark_interval: Duration) -> Shared {
        let rv = state.store.current_rv();
        Shared {
            state: Mutex::new(state),
            changes: watch::channel(rv).0,
            faults: Faults::default(),
            counters: Counters::default(),
            bookmark_interval,
        }
    }

    /// The state lock. A panic while holding it cannot leave a half-written object (every
    /// write is one `Store::put`), so a poisoned lock is taken over.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a write and wakes the watches.
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.lock();
        let out = f(&mut state);
        let rv = state.store.current_rv();
        drop(state);
        self.changes.send_if_modified(|cur| {
            let changed = *cur != rv;
            *cur = rv;
            changed
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::LabelSelector;
    use serde_json::json;

    fn key(plural: &str, ns: &str, name: &str) -> Key {
        Key { group: String::new(), plural: plural.into(), namespace: ns.into(), name: name.into() }
    }

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    /// What a list without the index returns: every object of the resource, matched one by one.
    fn scanned<'a>(store: &'a Store, plural: &str, ns: Option<&str>, sel: &LabelSelector) -> Vec<&'a Key> {
        store.all().filter(|(k, o)| k.plural == plural && ns.is_none_or(|n| k.namespace == n) && sel.matches(o)).map(|(k, _)| k).collect()
    }

    fn indexed<'a>(store: &'a Store, plural: &str, ns: Option<&str>, sel: &LabelSelector) -> Vec<&'a Key> {
        let found = match sel.indexable().into_iter().min_by_key(|(k, vs)| store.count_labelled("", plural, k, vs)) {
            Some((k, vs)) => store.list_labelled("", plural, ns, k, &vs),
            None => store.list("", plural, ns).collect(),
        };
        found.into_iter().filter(|(_, o)| sel.matches(o)).map(|(k, _)| k).collect()
    }

    #[test]
    fn the_label_index_finds_what_a_scan_finds_after_every_kind_of_change() {
        let mut store = Store::new(10);
        for (i, ns) in ["a", "a-b", "b", ""].iter().enumerate() {
            for j in 0..4 {
                let app = ["web", "db", "web", "cache"][j];
                store.put(key("configmaps", ns, &format!("cm{j}")), obj(json!({"app": app, "tier": format!("t{}", (i + j) % 2)})));
                store.put(key("secrets", ns, &format!("s{j}")), obj(json!({"app": app})));
            }
        }
        store.put(key("configmaps", "a", "unlabelled"), json!({"metadata": {}}));
        store.put(key("configmaps", "a", "odd"), obj(json!({"app": 7})));
        // Relabel, drop a label, overwrite, remove: the index follows each.
        store.put(key("configmaps", "a", "cm0"), obj(json!({"app": "db"})));
        store.put(key("configmaps", "b", "cm1"), obj(json!({"tier": "t0"})));
        store.overwrite(&key("configmaps", "a-b", "cm2"), obj(json!({"app": "cache", "tier": "t1"})));
        store.remove(&key("configmaps", "b", "cm0"));
        let selectors = [
            "app=web",
            "app==db",
            "app=cache,tier=t1",
            "app in (web,cache)",
            "app in (web,db),tier notin (t0)",
            "tier=t0,app!=web",
            "app",
            "!app",
            "app=7",
            "app=nothing",
            "",
        ];
        for s in selectors {
            let sel = LabelSelector::parse(s).expect("parses");
            for ns in [None, Some("a"), Some("a-b"), Some("b"), Some("")] {
                for plural in ["configmaps", "secrets", "pods"] {
                    assert_eq!(indexed(&store, plural, ns, &sel), scanned(&store, plural, ns, &sel), "{plural} in {ns:?} by {s:?}");
                }
            }
        }
        // cm1 of 4 namespaces and the relabelled a/cm0, less the relabelled b/cm1.
        assert_eq!(store.count_labelled("", "configmaps", "app", &["db"]), 4);
    }
}
