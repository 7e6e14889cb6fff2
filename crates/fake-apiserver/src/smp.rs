//! Strategic merge patch as the real server applies it to built-in kinds: lists merge by the
//! `x-kubernetes-patch-merge-key` their schema names when its patch strategy is `merge`
//! (others are replaced), and the directives `$patch` (replace, delete, merge),
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>` and `$retainKeys` are carried
//! out and never stored.

use serde_json::{Map, Value};

use super::schema::Node;
use super::status::{ApiError, ApiResult};

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Patches `doc` with `patch`; `node` is the kind's schema.
///
/// # Errors
/// 400 for a directive the real server refuses (an unknown `$patch` value); 500 for a list out
/// of its `$setElementOrder` order, as 1.35 answers it.
pub fn apply(doc: &mut Value, patch: &Value, node: Option<Node<'_>>) -> ApiResult<()> {
    match (doc.as_object_mut(), patch.as_object()) {
        (Some(d), Some(p)) => merge_map(d, p, node),
        _ => {
            *doc = strip(patch);
            Ok(())
        }
    }
}

fn strategy(node: Option<Node<'_>>) -> (bool, bool, Option<String>) {
    let s = node.and_then(|n| n.ext("x-kubernetes-patch-strategy")).and_then(Value::as_str).unwrap_or_default();
    let key = node.and_then(|n| n.ext("x-kubernetes-patch-merge-key")).and_then(Value::as_str).map(String::from);
    let parts: Vec<&str> = s.split(',').collect();
    (parts.contains(&"merge"), parts.contains(&"retainKeys"), key)
}

fn merge_map(doc: &mut Map<String, Value>, patch: &Map<String, Value>, node: Option<Node<'_>>) -> ApiResult<()> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *doc = strip_map(patch);
            return Ok(());
        }
        Some("delete") => {
            doc.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(ApiError::bad_request(format!("Unknown patch type: {other} in map: {}", Value::Object(patch.clone())))),
    }
    for (k, order) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER)
            && let (Some(Value::Array(list)), Some(order)) = (patch.get(field), order.as_array())
        {
            let (_, _, key) = strategy(node.and_then(|n| n.field(field)));
            check_order(list, order, key.as_deref())?;
        }
    }
    for (k, pv) in patch {
        if k.starts_with('$') {
            if let Some(field) = k.strip_prefix(DELETE_FROM)
                && let (Some(Value::Array(list)), Some(gone)) = (doc.get_mut(field), pv.as_array())
            {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        let child = node.and_then(|n| n.field(k));
        if pv.is_null() {
            doc.remove(k);
            continue;
        }
        match (doc.get_mut(k), pv) {
            (Some(Value::Object(d)), Value::Object(p)) => merge_map(d, p, child)?,
            (Some(Value::Array(d)), Value::Array(p)) => merge_list(d, p, child)?,
            // Absent or of another type: the patch's value is taken as it is, less its
            // directives, as 1.35's `removeDirectives` does: a map carrying `$patch` (whatever
            // the directive, `replace` too) is dropped with its key.
            (_, pv) => match without_directives(pv) {
                Some(v) => {
                    doc.insert(k.clone(), v);
                }
                None => {
                    doc.remove(k);
                }
            },
        }
    }
    for (k, pv) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER)
            && let (Some(Value::Array(list)), Some(order)) = (doc.get_mut(field), pv.as_array())
        {
            let (_, _, key) = strategy(node.and_then(|n| n.field(field)));
            reorder(list, order, key.as_deref());
        }
    }
    let (_, retain, _) = strategy(node);
    if retain && let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        doc.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(doc: &mut Vec<Value>, patch: &[Value], node: Option<Node<'_>>) -> ApiResult<()> {
    let (merge, _, key) = strategy(node);
    if !merge {
        *doc = patch.iter().map(strip).collect();
        return Ok(());
    }
    if patch.iter().any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace")) {
        *doc = patch.iter().filter(|p| p.get("$patch").is_none()).map(strip).collect();
        return Ok(());
    }
    let element = node.and_then(Node::items);
    let Some(key) = key else {
        for p in patch {
            if !doc.contains(p) {
                doc.push(strip(p));
            }
        }
        return Ok(());
    };
    for p in patch {
        let Some(kv) = p.get(&key) else {
            return Err(ApiError::bad_request(format!("map: {p} does not contain declared merge key: {key}")));
        };
        let pos = doc.iter().position(|d| d.get(&key) == Some(kv));
        if p.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = pos {
                doc.remove(i);
            }
            continue;
        }
        match (pos, p.as_object()) {
            (Some(i), Some(pm)) => {
                if let Some(d) = doc[i].as_object_mut() {
                    merge_map(d, pm, element)?;
                }
            }
            _ => doc.push(strip(p)),
        }
    }
    Ok(())
}

/// Puts the items `order` names first, in its order; others keep theirs after them.
fn reorder(list: &mut Vec<Value>, order: &[Value], key: Option<&str>) {
    let id = |v: &Value| match key {
        Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
        None => v.clone(),
    };
    let mut ordered = Vec::with_capacity(list.len());
    for o in order {
        let want = id(o);
        if let Some(i) = list.iter().position(|v| id(v) == want) {
            ordered.push(list.remove(i));
        }
    }
    ordered.append(list);
    *list = ordered;
}

fn strip_map(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), strip(v))).collect()
}

/// Drops every directive key from a value about to be stored.
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_map(m)),
        Value::Array(a) => Value::Array(a.iter().filter(|i| i.get("$patch").is_none()).map(strip).collect()),
        other => other.clone(),
    }
}

/// A value of the patch taken where the document has none: `None` for a map carrying `$patch`,
/// such maps dropped from inside it, other directive keys removed.
fn without_directives(v: &Value) -> Option<Value> {
    match v {
        Value::Object(m) if m.contains_key("$patch") => None,
        Value::Object(m) => Some(Value::Object(
            m.iter().filter(|(k, _)| !k.starts_with('$')).filter_map(|(k, v)| Some((k.clone(), without_directives(v)?))).collect(),
        )),
        Value::Array(a) => Some(Value::Array(a.iter().filter_map(without_directives).collect())),
        other => Some(other.clone()),
    }
}

/// 1.35's `validatePatchWithSetOrderList`: the patch's items (less deletions and other
/// directives) must come in the order `$setElementOrder` gives them.
fn check_order(list: &[Value], order: &[Value], key: Option<&str>) -> ApiResult<()> {
    let id = |v: &Value| match key {
        Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
        None => v.clone(),
    };
    let items: Vec<&Value> = list.iter().filter(|v| v.get("$patch").is_none()).collect();
    let mut at = 0;
    for o in order {
        if at == items.len() {
            break;
        }
        if id(items[at]) == id(o) {
            at += 1;
        }
    }
    if at == items.len() || order.is_empty() {
        return Ok(());
    }
    let go = |v: &[Value]| go_value(&Value::Array(v.to_vec()));
    Err(ApiError::untyped(format!("The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n", go(list), go(order))))
}

/// A decoded JSON value as Go's `%v` prints it: `map[k:v ...]` with sorted keys, `[a b]`.
fn go_value(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys.iter().map(|k| format!("{k}:{}", go_value(&m[k.as_str()]))).collect();
            format!("map[{}]", parts.join(" "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(go_value).collect::<Vec<_>>().join(" ")),
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".into(),
        other => other.to_string(),
    }
}
