//! The `meta.k8s.io/v1` Table format `kubectl get` asks for: column definitions from the
//! resource's printer columns (a CRD's `additionalPrinterColumns`), one row per object.

use serde_json::{Value, json};

use super::meta;
use super::registry::{Cell, Column, ResourceType};

/// What `?includeObject=` asks rows to carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(v: Option<&str>) -> Include {
        match v {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// Whether an Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

/// Whether an Accept header asks for `PartialObjectMetadata` (or its list), as a metadata-only
/// client (kube's `metadata_watcher`, client-go's metadata informers) does.
pub fn wants_metadata(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| first.contains("as=PartialObjectMetadata") && first.contains("g=meta.k8s.io"))
}

/// An object as the real server answers a metadata-only request: its metadata alone, as
/// `meta.k8s.io/v1` `PartialObjectMetadata`. A `Status` (or anything without metadata) is left
/// as it is.
pub fn partial(obj: Value) -> Value {
    match obj.get("metadata") {
        Some(metadata) if obj.get("kind").and_then(Value::as_str) != Some("Status") => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
        }
        _ => obj,
    }
}

fn columns(rt: &ResourceType, version: &str) -> Vec<Column> {
    rt.version(version).map(|v| v.columns.clone()).unwrap_or_default()
}

/// A Table of `objects`; `headers` false leaves out the column definitions (watch events after the first).
pub fn table(
    rt: &ResourceType,
    version: &str,
    objects: &[Value],
    include: Include,
    headers: bool,
    resource_version: Option<String>,
) -> Value {
    let cols = columns(rt, version);
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0}),
    ];
    defs.extend(
        cols.iter()
            .map(|c| json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})),
    );
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut cells = vec![json!(meta::name(obj))];
            cells.extend(cols.iter().map(|c| cell(obj, c)));
            let mut row = json!({"cells": cells});
            match include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]});
                }
                Include::Object => row["object"] = obj.clone(),
            }
            row
        })
        .collect();
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "rows": rows});
    if headers {
        t["columnDefinitions"] = Value::Array(defs);
    } else {
        t["columnDefinitions"] = Value::Null;
    }
    if let Some(rv) = resource_version {
        t["metadata"]["resourceVersion"] = json!(rv);
    }
    t
}

fn cell(obj: &Value, c: &Column) -> Value {
    match &c.cell {
        Cell::DataCount => {
            let count = |f: &str| obj[f].as_object().map_or(0, |m| m.len());
            json!(count("data") + count("binaryData"))
        }
        Cell::Ready => {
            json!(format!("{}/{}", obj["status"]["readyReplicas"].as_i64().unwrap_or(0), obj["spec"]["replicas"].as_i64().unwrap_or(1)))
        }
        Cell::Path(path) => {
            let Some(v) = jsonpath(obj, path) else { return Value::Null };
            match (c.type_.as_str(), v) {
                ("date", Value::String(ts)) => json!(meta::age_seconds(ts).map(human_duration).unwrap_or_else(|| "<unknown>".into())),
                (_, v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => v.clone(),
                (_, v) => json!(v.to_string()),
            }
        }
    }
}

/// The JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[?(@.type=="Ready")].status`.
pub fn jsonpath<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut node = obj;
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            node = node.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                node = node.as_array()?.iter().find(|item| {
                    item[field.trim()].as_str() == Some(want) || serde_json::from_str::<Value>(want).is_ok_and(|w| item[field.trim()] == w)
                })?;
            } else {
                node = node.get(inner.parse::<usize>().ok()?)?;
            }
        } else {
            return None;
        }
    }
    Some(node)
}

/// `duration.HumanDuration`, as the AGE column prints.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => {
            let (m, r) = (s / 60, s % 60);
            if r == 0 { format!("{m}m") } else { format!("{m}m{r}s") }
        }
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => {
            let (h, m) = (s / 3600, (s % 3600) / 60);
            if m == 0 { format!("{h}h") } else { format!("{h}h{m}m") }
        }
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 8 * 86400 => {
            let (d, h) = (s / 86400, (s % 86400) / 3600);
            if h == 0 { format!("{d}d") } else { format!("{d}d{h}h") }
        }
        s if s < 2 * 365 * 86400 => format!("{}d", s / 86400),
        s if s < 8 * 365 * 86400 => {
            let (y, d) = (s / (365 * 86400), (s % (365 * 86400)) / 86400);
            if d == 0 { format!("{y}y") } else { format!("{y}y{d}d") }
        }
        s => format!("{}y", s / (365 * 86400)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_follows_fields_indexes_and_filters() {
        let obj = json!({"spec": {"x": [1, 2]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(jsonpath(&obj, ".spec.x[1]"), Some(&json!(2)));
        assert_eq!(jsonpath(&obj, ".status.conditions[?(@.type==\"Ready\")].status"), Some(&json!("True")));
        assert_eq!(jsonpath(&obj, ".status.missing"), None);
    }

    #[test]
    fn ages_print_like_kubectl() {
        let cases =
            [(5, "5s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (4 * 3600 + 60, "4h1m"), (30 * 3600, "30h"), (3 * 86400, "3d")];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want);
        }
    }
}
