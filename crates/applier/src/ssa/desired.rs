//! The manifest as sent, written straight from the rendered one: the namespace it lives in (none
//! for cluster-scoped kinds) and our owner label, without copying the manifest first. The bytes
//! are exactly those of serializing the edited copy (`serde_json`'s maps are ordered by key, and
//! so is what this writes), so the digests of inventories written before stay valid.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// `body` with `metadata.namespace` set (or removed, for `None`) and `metadata.labels` carrying
/// `label` (the manager's owner label) = `owner`. A body that is no object, or whose `metadata` is no object, is
/// written as it is.
pub(super) struct Desired<'a> {
    pub body: &'a Value,
    pub namespace: Option<&'a str>,
    pub label: &'a str,
    pub owner: &'a str,
}

impl Serialize for Desired<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(top) = self.body else { return self.body.serialize(s) };
        let meta = Meta { meta: top.get("metadata"), namespace: self.namespace, label: self.label, owner: self.owner };
        merged(s, top, "metadata", &meta)
    }
}

struct Meta<'a> {
    meta: Option<&'a Value>,
    namespace: Option<&'a str>,
    label: &'a str,
    owner: &'a str,
}

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let empty = Map::new();
        let meta = match self.meta {
            None => &empty,
            Some(Value::Object(m)) => m,
            Some(other) => return other.serialize(s),
        };
        let labels = Labels { labels: meta.get("labels"), label: self.label, owner: self.owner };
        let mut out = s.serialize_map(None)?;
        let (mut labels_done, mut namespace_done) = (false, false);
        let mut pending = |out: &mut S::SerializeMap, before: Option<&str>| -> Result<(), S::Error> {
            // "labels" < "namespace": the synthetic entries come in key order too.
            if !labels_done && before.is_none_or(|k| k > "labels") {
                out.serialize_entry("labels", &labels)?;
                labels_done = true;
            }
            if !namespace_done && before.is_none_or(|k| k > "namespace") {
                if let Some(ns) = self.namespace {
                    out.serialize_entry("namespace", ns)?;
                }
                namespace_done = true;
            }
            Ok(())
        };
        for (k, v) in meta {
            pending(&mut out, Some(k))?;
            match k.as_str() {
                "labels" | "namespace" => {}
                _ => out.serialize_entry(k, v)?,
            }
        }
        pending(&mut out, None)?;
        out.end()
    }
}

struct Labels<'a> {
    labels: Option<&'a Value>,
    label: &'a str,
    owner: &'a str,
}

impl Serialize for Labels<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let empty = Map::new();
        // Labels that are no object are replaced by ours alone.
        let labels = match self.labels {
            Some(Value::Object(l)) => l,
            _ => &empty,
        };
        merged(s, labels, self.label, &self.owner)
    }
}

/// `map` written in key order with `key` set to `value` (inserted at its place, or replacing).
fn merged<S: Serializer, V: Serialize + ?Sized>(s: S, map: &Map<String, Value>, key: &str, value: &V) -> Result<S::Ok, S::Error> {
    let mut out = s.serialize_map(None)?;
    let mut done = false;
    for (k, v) in map {
        if !done && k.as_str() >= key {
            out.serialize_entry(key, value)?;
            done = true;
        }
        if k != key {
            out.serialize_entry(k, v)?;
        }
    }
    if !done {
        out.serialize_entry(key, value)?;
    }
    out.end()
}
