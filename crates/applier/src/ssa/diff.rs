//! Pure comparison of a live object with the server's dry-run of our apply: which fields would
//! change, and whether our field ownership would. Decides whether the applier writes at all.

use serde_json::{Map, Value};

/// Metadata the server owns: it differs between any two reads and says nothing about drift.
const SERVER_METADATA: &[&str] = &["managedFields", "resourceVersion", "generation", "creationTimestamp", "uid"];

/// How many changed paths a message names before it says "and N more".
const SHOWN_PATHS: usize = 8;

/// The object without server-owned metadata and without `status` (status is not ours to apply).
pub fn normalize(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in SERVER_METADATA {
                meta.remove(*key);
            }
        }
    }
    object
}

/// Field paths (`.spec.replicas`, `.data.a`, `.spec.containers[0].image`) whose values differ
/// between `live` and `desired`, both normalized. Empty when nothing would change.
pub fn changed_paths(live: &Value, desired: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    walk(&normalize(live), &normalize(desired), &mut String::new(), &mut paths);
    paths
}

fn walk(live: &Value, desired: &Value, path: &mut String, out: &mut Vec<String>) {
    if live == desired {
        return;
    }
    match (live, desired) {
        (Value::Object(a), Value::Object(b)) => walk_maps(a, b, path, out),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(x, y, path, out);
                path.truncate(len);
            }
        }
        _ => out.push(if path.is_empty() { ".".to_string() } else { path.clone() }),
    }
}

fn walk_maps(a: &Map<String, Value>, b: &Map<String, Value>, path: &mut String, out: &mut Vec<String>) {
    let mut keys: Vec<&String> = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))).collect();
    keys.sort();
    for key in keys {
        let len = path.len();
        path.push('.');
        path.push_str(key);
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => walk(x, y, path, out),
            _ => out.push(path.clone()),
        }
        path.truncate(len);
    }
}

/// The fields our manager (`field_manager`) owns through apply (its `managedFields` FieldsV1), if
/// any.
pub fn our_fields<'a>(object: &'a Value, field_manager: &str) -> Option<&'a Value> {
    crate::health::at(object, "/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|m| m["manager"] == field_manager && m["operation"] == "Apply" && m.get("subresource").is_none_or(|s| s == ""))
        .and_then(|m| m.get("fieldsV1"))
}

/// 12 hex digits of the sha256 of a FieldsV1 (as [`our_fields`] returns it), for the inventory:
/// the server keeps FieldsV1 as the bytes it wrote, so the same ownership hashes the same.
pub fn fields_hash(fields: &Value) -> String {
    use sha2::{Digest, Sha256};
    let bytes = serde_json::to_vec(fields).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..6])
}

/// `".data.a, .spec.x"`, at most `SHOWN_PATHS` (8) of them.
pub fn describe(paths: &[String]) -> String {
    let mut text = paths.iter().take(SHOWN_PATHS).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > SHOWN_PATHS {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN_PATHS));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ssa::TEST_FIELD_MANAGER;

    #[test]
    fn server_metadata_and_status_are_not_drift() {
        let live = json!({"metadata": {"name": "a", "uid": "1", "resourceVersion": "7", "generation": 2,
            "creationTimestamp": "t", "managedFields": [{}]}, "status": {"phase": "x"}, "data": {"a": "1"}});
        let desired = json!({"metadata": {"name": "a", "resourceVersion": "8"}, "data": {"a": "1"}});
        assert!(changed_paths(&live, &desired).is_empty());
    }

    #[test]
    fn changed_added_removed_and_list_item_paths() {
        let cases = [
            (json!({"data": {"a": "1"}}), json!({"data": {"a": "2"}}), vec![".data.a"]),
            (json!({"data": {}}), json!({"data": {"b": "1"}}), vec![".data.b"]),
            (json!({"data": {"a": "1", "b": "2"}}), json!({"data": {"a": "1"}}), vec![".data.b"]),
            (json!({"spec": {"c": [{"i": "x"}, {"i": "y"}]}}), json!({"spec": {"c": [{"i": "x"}, {"i": "z"}]}}), vec![".spec.c[1].i"]),
            (json!({"spec": {"c": [1]}}), json!({"spec": {"c": [1, 2]}}), vec![".spec.c"]),
            (
                json!({"metadata": {"labels": {"a": "1"}}}),
                json!({"metadata": {"labels": {"a": "1", "o": "x"}}}),
                vec![".metadata.labels.o"],
            ),
        ];
        for (live, desired, want) in cases {
            assert_eq!(changed_paths(&live, &desired), want, "{live} -> {desired}");
        }
    }

    #[test]
    fn our_fields_are_the_apply_entry_of_our_manager() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:a": {}}},
            {"manager": TEST_FIELD_MANAGER, "operation": "Update", "fieldsV1": {"f:b": {}}},
            {"manager": TEST_FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:c": {}}},
        ]}});
        assert_eq!(our_fields(&obj, TEST_FIELD_MANAGER), Some(&json!({"f:c": {}})));
        assert_eq!(our_fields(&json!({"metadata": {}}), TEST_FIELD_MANAGER), None);
    }

    #[test]
    fn describe_caps_the_list() {
        let paths: Vec<String> = (0..10).map(|i| format!(".data.k{i}")).collect();
        assert!(describe(&paths).ends_with(".data.k7 and 2 more"));
        assert_eq!(describe(&paths[..2]), ".data.k0, .data.k1");
    }
}
