//! Field paths and sets in the structured-merge-diff sense: what server-side apply tracks per
//! manager, their `FieldsV1` encoding, and the list semantics (atomic, set, map keyed by fields)
//! that decide how a list is owned and merged.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use super::registry::ResourceType;
use super::schema::{self, Node};

/// One step of a path: a struct/map field, a keyed list item, a set member, or an index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Element {
    Field(String),
    /// The item's key fields as compact JSON with sorted keys, e.g. `{"name":"nginx"}`.
    Key(String),
    /// A set member as compact JSON, e.g. `"example.com/finalizer"`.
    Value(String),
    Index(usize),
}

pub type Path = Vec<Element>;

/// A set of owned paths. A path is in the set when its node is owned itself (a leaf, or a
/// keyed item's `.`); its ancestors are implied, not members.
pub type FieldSet = BTreeSet<Path>;

pub use super::schema::ListType;

/// `.spec.containers[name="nginx"].image`, as conflict messages print a path.
pub struct Display<'a>(pub &'a [Element]);

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in self.0 {
            match e {
                Element::Field(name) => write!(f, ".{name}")?,
                Element::Key(json) => {
                    let parsed: Map<String, Value> = serde_json::from_str(json).unwrap_or_default();
                    let parts: Vec<String> = parsed.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, "[{}]", parts.join(","))?
                }
                Element::Value(json) => write!(f, "[={json}]")?,
                Element::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// Metadata fields the server owns; never part of a manager's set.
const SYSTEM_METADATA: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Which part of an object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (no status subresource).
    All,
    /// Everything but `.status` (the main resource of a kind with a status subresource).
    Main,
    /// Only `.status` (the `/status` subresource).
    Status,
}

/// The fields an object sets, as server-side apply would record them for its manager.
pub fn fields_of(obj: &Value, rt: &ResourceType, version: &str, scope: Scope) -> FieldSet {
    collect(obj, rt, version, scope, walk)
}

type Walker = fn(&Value, &mut Path, Option<Node<'_>>, &mut FieldSet);

/// Runs `walker` over the fields of `obj` the scope covers (not apiVersion, kind or the
/// metadata the server owns).
fn collect(obj: &Value, rt: &ResourceType, version: &str, scope: Scope, walker: Walker) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(map) = obj.as_object() else { return out };
    for (k, v) in map {
        let keep = match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => false,
            ("status", Scope::Main) => false,
            ("status", Scope::Status) => true,
            (_, Scope::Status) => false,
            _ => true,
        };
        if !keep {
            continue;
        }
        if k == "metadata" {
            let Some(meta) = v.as_object() else { continue };
            for (mk, mv) in meta {
                if !SYSTEM_METADATA.contains(&mk.as_str()) {
                    let mut path = vec![Element::Field("metadata".into()), Element::Field(mk.clone())];
                    let node = schema_at(rt, version, &path);
                    walker(mv, &mut path, node, &mut out);
                }
            }
            continue;
        }
        let mut path = vec![Element::Field(k.clone())];
        let node = schema_at(rt, version, &path);
        walker(v, &mut path, node, &mut out);
    }
    out
}

/// Every node below and including `path`, as a comparison visits them: every field and map
/// entry, keyed items and set members; nothing inside atomic lists and maps.
fn walk_nodes(v: &Value, path: &mut Path, node: Option<Node<'_>>, out: &mut FieldSet) {
    out.insert(path.clone());
    match v {
        Value::Object(map) if !node.is_some_and(Node::map_atomic) => {
            for (k, child) in map {
                path.push(Element::Field(k.clone()));
                walk_nodes(child, path, node.and_then(|n| n.field(k)), out);
                path.pop();
            }
        }
        Value::Array(items) => {
            let element = node.and_then(Node::items);
            match node.map_or(ListType::Atomic, Node::list_type) {
                ListType::Atomic => {}
                ListType::Set => {
                    for item in items {
                        path.push(Element::Value(item.to_string()));
                        out.insert(path.clone());
                        path.pop();
                    }
                }
                ListType::Map(keys) => {
                    for item in items {
                        path.push(item_key(item, &keys, element));
                        walk_nodes(item, path, element, out);
                        path.pop();
                    }
                }
            }
        }
        _ => {}
    }
}

/// Walks a value as structured-merge-diff's `ToFieldSet` does: scalars, atomic lists and atomic
/// maps are members; keyed list items and set members too; a map entry that is not a declared
/// field of its schema is a member itself as well (so it carries a `.` when it has children).
fn walk(v: &Value, path: &mut Path, node: Option<Node<'_>>, out: &mut FieldSet) {
    match v {
        Value::Object(map) if !map.is_empty() && !node.is_some_and(Node::map_atomic) => {
            for (k, child) in map {
                path.push(Element::Field(k.clone()));
                walk(child, path, node.and_then(|n| n.field(k)), out);
                if node.is_none_or(|n| n.property(k).is_none()) {
                    out.insert(path.clone());
                }
                path.pop();
            }
        }
        // An empty keyed or set list sets nothing; an empty atomic list is a value.
        Value::Array(items) => {
            let element = node.and_then(Node::items);
            match node.map_or(ListType::Atomic, Node::list_type) {
                ListType::Atomic => {
                    out.insert(path.clone());
                }
                ListType::Set => {
                    for item in items {
                        path.push(Element::Value(item.to_string()));
                        out.insert(path.clone());
                        path.pop();
                    }
                }
                ListType::Map(keys) => {
                    for item in items {
                        path.push(item_key(item, &keys, element));
                        out.insert(path.clone());
                        walk(item, path, element, out);
                        path.pop();
                    }
                }
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The set plus every declared struct field on the way to its members (structured-merge-diff's
/// `EnsureNamedFieldsAreMembers`); with [`fields_of`] it is every node of an object.
pub fn named(set: &FieldSet, rt: &ResourceType, version: &str) -> FieldSet {
    let mut out = set.clone();
    for path in set {
        for i in 1..path.len() {
            let Element::Field(name) = &path[i - 1] else { continue };
            let prefix = &path[..i];
            if out.contains(prefix) {
                continue;
            }
            let declared = match &path[..i - 1] {
                [] => true,
                parent => schema_at(rt, version, parent).is_some_and(|n| n.property(name).is_some()),
            };
            if declared {
                out.insert(prefix.to_vec());
            }
        }
    }
    out
}

/// Every node of an object that a comparison visits.
/// `metadata` itself is not one: the server's typed objects always have it.
pub fn nodes_of(obj: &Value, rt: &ResourceType, version: &str, scope: Scope) -> FieldSet {
    collect(obj, rt, version, scope, walk_nodes)
}

/// What changed between two objects, as structured-merge-diff's `Compare` reports it.
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

pub fn compare(old: &Value, new: &Value, rt: &ResourceType, version: &str, scope: Scope) -> Comparison {
    let before = nodes_of(old, rt, version, scope);
    let after = nodes_of(new, rt, version, scope);
    let added: FieldSet = after.difference(&before).cloned().collect();
    let removed: FieldSet = before.difference(&after).cloned().collect();
    // A container a removal emptied (now null) is not a modification of it.
    let emptied = |p: &Path| {
        value_at(new, p, rt, version).is_some_and(Value::is_null)
            && value_at(old, p, rt, version).is_some_and(|v| v.is_object() || v.is_array())
    };
    let modified: FieldSet = after
        .intersection(&before)
        .filter(|p| is_leaf(&after, p) && !emptied(p) && value_at(old, p, rt, version) != value_at(new, p, rt, version))
        .cloned()
        .collect();
    Comparison { added, modified, removed }
}

/// Removes from `obj` every node whose path is in `set`, with what lies below it
/// (structured-merge-diff's `RemoveItems`).
pub fn remove_items(obj: &mut Value, set: &FieldSet, rt: &ResourceType, version: &str) {
    let mut members: Vec<&Path> = set.iter().collect();
    // Shallowest first: a removed node takes what lies below it (its key fields included).
    members.sort_by_key(|p| p.len());
    for path in members {
        let Some((last, parent_path)) = path.split_last() else { continue };
        let element = schema_at(rt, version, parent_path).and_then(Node::items);
        let Some(parent) = value_at_mut(obj, parent_path, rt, version) else { continue };
        let emptied = match (last, parent) {
            (Element::Field(name), Value::Object(map)) => map.remove(name).is_some() && map.is_empty(),
            (Element::Key(key), Value::Array(items)) => {
                let key: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let before = items.len();
                items.retain(|item| !matches_key(item, &key, element));
                items.len() < before && items.is_empty()
            }
            (Element::Value(json), Value::Array(items)) => {
                let want: Value = serde_json::from_str(json).unwrap_or(Value::Null);
                let before = items.len();
                items.retain(|item| *item != want);
                items.len() < before && items.is_empty()
            }
            _ => false,
        };
        // A container emptied by a removal becomes null (its node, and who owns it, stays; the
        // caller drops the null, as the server's typed round trip does).
        if emptied
            && let Some((Element::Field(_), _)) = parent_path.split_last()
            && let Some(parent) = value_at_mut(obj, parent_path, rt, version)
        {
            *parent = Value::Null;
        }
    }
}

/// Drops null values (what the server's typed objects cannot hold).
pub fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The `Key` element naming a keyed list item; a key field the item leaves out counts with the
/// value the schema defaults it to (a port's `protocol: TCP`), as the real server keys it.
pub fn item_key(item: &Value, keys: &[String], element: Option<Node<'_>>) -> Element {
    let mut key = Map::new();
    for k in keys {
        if let Some(v) = item.get(k).cloned().or_else(|| schema::key_default(element, k)) {
            key.insert(k.clone(), v);
        }
    }
    Element::Key(Value::Object(key).to_string())
}

/// The schema node at `path`: the kind's schema, with `metadata` always read as ObjectMeta
/// (a CRD's schema does not describe it).
pub fn schema_at<'a>(rt: &'a ResourceType, version: &str, path: &[Element]) -> Option<Node<'a>> {
    let (mut node, rest) = match path.first() {
        Some(Element::Field(f)) if f == "metadata" => (Node::definition("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")?, &path[1..]),
        _ => (rt.version(version)?.root()?, path),
    };
    for e in rest {
        node = match e {
            Element::Field(name) => node.field(name)?,
            _ => node.items()?,
        };
    }
    Some(node)
}

/// The value at `path` in `obj`, if present.
pub fn value_at<'a>(obj: &'a Value, path: &[Element], rt: &ResourceType, version: &str) -> Option<&'a Value> {
    let mut node = obj;
    for (i, e) in path.iter().enumerate() {
        node = match e {
            Element::Field(name) => node.get(name)?,
            Element::Index(i) => node.get(*i)?,
            Element::Key(key) => {
                let key: Map<String, Value> = serde_json::from_str(key).ok()?;
                let element = schema_at(rt, version, &path[..i]).and_then(Node::items);
                node.as_array()?.iter().find(|item| matches_key(item, &key, element))?
            }
            Element::Value(json) => {
                let want: Value = serde_json::from_str(json).ok()?;
                node.as_array()?.iter().find(|item| **item == want)?
            }
        };
    }
    Some(node)
}

fn matches_key(item: &Value, key: &Map<String, Value>, element: Option<Node<'_>>) -> bool {
    key.iter().all(|(k, v)| item.get(k).cloned().or_else(|| schema::key_default(element, k)).as_ref() == Some(v))
}

fn value_at_mut<'a>(obj: &'a mut Value, path: &[Element], rt: &ResourceType, version: &str) -> Option<&'a mut Value> {
    let mut node = obj;
    for (i, e) in path.iter().enumerate() {
        node = match e {
            Element::Field(name) => node.get_mut(name)?,
            Element::Index(i) => node.get_mut(*i)?,
            Element::Key(key) => {
                let key: Map<String, Value> = serde_json::from_str(key).ok()?;
                let element = schema_at(rt, version, &path[..i]).and_then(Node::items);
                node.as_array_mut()?.iter_mut().find(|item| matches_key(item, &key, element))?
            }
            Element::Value(json) => {
                let want: Value = serde_json::from_str(json).ok()?;
                node.as_array_mut()?.iter_mut().find(|item| **item == want)?
            }
        };
    }
    Some(node)
}

/// Merges an applied configuration into a live object: maps recursively (atomic maps replaced),
/// keyed lists item by item and sets by union (in [`merge_order`]), atomic lists and scalars
/// replaced. A `null` removes the field.
pub fn merge(live: &mut Value, applied: &Value, path: &mut Path, rt: &ResourceType, version: &str) {
    let node = schema_at(rt, version, path);
    match (live, applied) {
        (Value::Object(live), Value::Object(applied)) if !node.is_some_and(Node::map_atomic) => {
            for (k, av) in applied {
                if av.is_null() {
                    live.remove(k);
                    continue;
                }
                path.push(Element::Field(k.clone()));
                match live.get_mut(k) {
                    Some(lv) => merge(lv, av, path, rt, version),
                    None => {
                        live.insert(k.clone(), av.clone());
                    }
                }
                path.pop();
            }
        }
        (Value::Array(live), Value::Array(applied)) => match node.map_or(ListType::Atomic, Node::list_type) {
            ListType::Atomic => *live = applied.clone(),
            ListType::Set => {
                let ids = |items: &[Value]| items.iter().map(|i| Element::Value(i.to_string())).collect::<Vec<_>>();
                let (lk, ak) = (ids(live), ids(applied));
                *live = merge_order(&lk, &ak)
                    .into_iter()
                    .map(|(l, a)| a.map_or_else(|| live[l.unwrap_or(0)].clone(), |a| applied[a].clone()))
                    .collect();
            }
            ListType::Map(keys) => {
                let element = node.and_then(Node::items);
                let lk: Vec<Element> = live.iter().map(|i| item_key(i, &keys, element)).collect();
                let ak: Vec<Element> = applied.iter().map(|i| item_key(i, &keys, element)).collect();
                let mut out = Vec::with_capacity(live.len().max(applied.len()));
                for (l, a) in merge_order(&lk, &ak) {
                    match (l, a) {
                        (Some(l), Some(a)) => {
                            let mut item = live[l].clone();
                            path.push(ak[a].clone());
                            merge(&mut item, &applied[a], path, rt, version);
                            path.pop();
                            out.push(item);
                        }
                        (Some(l), None) => out.push(live[l].clone()),
                        (None, Some(a)) => out.push(applied[a].clone()),
                        (None, None) => {}
                    }
                }
                *live = out;
            }
        },
        (live, applied) => *live = applied.clone(),
    }
}

/// The order of a merged keyed or set list, as structured-merge-diff since 4.2 (and so
/// Kubernetes 1.35) orders it: the applied order wins for the items both lists have, items only
/// the live list has keep their place among them, new items come where the applier put them.
/// Each entry is (index in live, index in applied).
fn merge_order(live: &[Element], applied: &[Element]) -> Vec<(Option<usize>, Option<usize>)> {
    let in_live = |e: &Element| live.iter().position(|l| l == e);
    let in_applied = |e: &Element| applied.iter().position(|a| a == e);
    // The shared items in the applied order; the next one is the one to place next.
    let shared: Vec<usize> = (0..applied.len()).filter(|&a| in_live(&applied[a]).is_some()).collect();
    let mut next_shared = shared.iter().copied().peekable();
    let mut placed = vec![false; applied.len()];
    let mut out = Vec::new();
    let (mut l, mut a) = (0, 0);
    while l < live.len() || a < applied.len() {
        if l < live.len() && a < applied.len() {
            if live[l] == applied[a] {
                out.push((Some(l), Some(a)));
                placed[a] = true;
                l += 1;
                a += 1;
                next_shared.next();
                continue;
            }
            // A shared item whose turn has not come: the applied order places it later.
            if in_applied(&live[l]).is_some() && next_shared.peek().is_some_and(|&s| applied[s] != live[l]) {
                l += 1;
                continue;
            }
        }
        if l < live.len() {
            match in_applied(&live[l]) {
                None => {
                    out.push((Some(l), None));
                    l += 1;
                    continue;
                }
                Some(at) if placed[at] => l += 1,
                Some(_) => {}
            }
        }
        if a < applied.len() {
            placed[a] = true;
            out.push((in_live(&applied[a]), Some(a)));
            if next_shared.peek() == Some(&a) {
                next_shared.next();
            }
            a += 1;
        }
    }
    out
}

/// FieldsV1 JSON (`{"f:data":{"f:a":{}}}`) of a set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for e in path {
            let child = node.entry(encode(e)).or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(child) = child else { break };
            node = child;
        }
    }
    // A member that also has children is marked with "."; a childless member stays `{}`.
    for path in set {
        if let Some(Value::Object(node)) = node_at(&mut root, path)
            && !node.is_empty()
            && !node.contains_key(".")
        {
            node.insert(".".into(), Value::Object(Map::new()));
        }
    }
    Value::Object(root)
}

fn node_at<'a>(root: &'a mut Map<String, Value>, path: &[Element]) -> Option<&'a mut Value> {
    let (first, rest) = path.split_first()?;
    let mut node = root.get_mut(&encode(first))?;
    for e in rest {
        node = node.get_mut(encode(e))?;
    }
    Some(node)
}

fn encode(e: &Element) -> String {
    match e {
        Element::Field(n) => format!("f:{n}"),
        Element::Key(k) => format!("k:{k}"),
        Element::Value(v) => format!("v:{v}"),
        Element::Index(i) => format!("i:{i}"),
    }
}

/// Parses FieldsV1 JSON into a set; unknown prefixes are skipped.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    let mut path = Path::new();
    parse_node(v, &mut path, &mut out);
    out
}

fn parse_node(v: &Value, path: &mut Path, out: &mut FieldSet) {
    let Some(map) = v.as_object() else { return };
    if map.is_empty() && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (k, child) in map {
        if k == "." {
            out.insert(path.clone());
            continue;
        }
        let element = match k.split_at_checked(2) {
            Some(("f:", n)) => Element::Field(n.into()),
            Some(("k:", n)) => Element::Key(canonical(n)),
            Some(("v:", n)) => Element::Value(canonical(n)),
            Some(("i:", n)) => match n.parse() {
                Ok(i) => Element::Index(i),
                Err(_) => continue,
            },
            _ => continue,
        };
        path.push(element);
        parse_node(child, path, out);
        path.pop();
    }
}

/// Re-serialises JSON compactly with sorted keys so equal keys compare equal.
fn canonical(json: &str) -> String {
    serde_json::from_str::<Value>(json).map(|v| v.to_string()).unwrap_or_else(|_| json.to_string())
}

/// Whether no other member of `set` lies below `path`.
pub fn is_leaf(set: &FieldSet, path: &Path) -> bool {
    set.range(path.clone()..).nth(1).is_none_or(|next| !next.starts_with(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds;
    use serde_json::json;

    fn deployment() -> ResourceType {
        kinds::registry().find("apps", "v1", "deployments").cloned().expect("built-in")
    }

    #[test]
    fn fields_v1_round_trips_keyed_lists() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"a": "1"}},
            "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]}}}});
        let set = fields_of(&obj, &deployment(), "v1", Scope::Main);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn paths_print_like_structured_merge_diff() {
        let path = vec![Element::Field("spec".into()), Element::Field("containers".into()), Element::Key("{\"name\":\"nginx\"}".into())];
        assert_eq!(Display(&path).to_string(), ".spec.containers[name=\"nginx\"]");
        let set_member = vec![Element::Field("metadata".into()), Element::Field("finalizers".into()), Element::Value("\"x\"".into())];
        assert_eq!(Display(&set_member).to_string(), ".metadata.finalizers[=\"x\"]");
    }

    #[test]
    fn removing_the_last_key_removes_the_emptied_map() {
        let mut obj = json!({"data": {"a": "1"}, "metadata": {"name": "x"}});
        let set: FieldSet = [vec![Element::Field("data".into()), Element::Field("a".into())]].into_iter().collect();
        remove_items(&mut obj, &set, &deployment(), "v1");
        assert_eq!(obj, json!({"data": null, "metadata": {"name": "x"}}));
        drop_nulls(&mut obj);
        assert_eq!(obj, json!({"metadata": {"name": "x"}}));
    }

    #[test]
    fn merged_lists_follow_the_applied_order_as_structured_merge_diff_4_2_and_later() {
        let e = |names: &[&str]| names.iter().map(|n| Element::Key(format!("{{\"name\":\"{n}\"}}"))).collect::<Vec<_>>();
        let order = |live: &[&str], applied: &[&str]| -> Vec<String> {
            let (l, a) = (e(live), e(applied));
            merge_order(&l, &a)
                .into_iter()
                .map(|(li, ai)| match (li, ai) {
                    (_, Some(ai)) => applied[ai].to_string(),
                    (Some(li), None) => live[li].to_string(),
                    (None, None) => String::new(),
                })
                .collect()
        };
        // A new item comes after the ones already there; shared items take the applied order;
        // items only the live list has keep their place among them.
        assert_eq!(order(&["nginx"], &["sidecar"]), ["nginx", "sidecar"]);
        assert_eq!(order(&["a", "b"], &["b", "a"]), ["b", "a"]);
        assert_eq!(order(&["a", "x", "b"], &["b", "a"]), ["x", "b", "a"]);
        assert_eq!(order(&["a", "b", "c"], &["c", "new", "a"]), ["b", "c", "new", "a"]);
    }
}
