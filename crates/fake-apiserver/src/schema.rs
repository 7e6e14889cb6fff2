//! The Kubernetes 1.35 schemas the server serves built-in kinds from: the JSON schema
//! definitions generated from the real OpenAPI (PyPI's `kubernetes-validate`, installed by
//! scripts/install-tools.sh), read once per process. The same cursor walks a CRD's structural
//! schema, so list types, atomic maps, field validation and pruning work alike for both.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The schema file, found where scripts/install-tools.sh puts it:
/// `$STACKSYNC_TOOLS_DIR/kubernetes-json-schema/v1.35.0/_definitions.json` (default
/// `$HOME/.cache/stacksync-tools`), or wherever `TESTKIT_K8S_SCHEMA` says.
pub fn schema_path() -> PathBuf {
    if let Some(path) = std::env::var_os("TESTKIT_K8S_SCHEMA") {
        return PathBuf::from(path);
    }
    let tools = match std::env::var_os("STACKSYNC_TOOLS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache").join("stacksync-tools"),
    };
    tools.join("kubernetes-json-schema").join("v1.35.0").join("_definitions.json")
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "reading the Kubernetes 1.35 schemas at {path}: {message}; run scripts/install-tools.sh (it installs them from PyPI's kubernetes-validate)"
    )]
    Load { path: String, message: String },
}

/// Every definition by name (`io.k8s.api.apps.v1.Deployment`).
#[derive(Debug)]
pub struct Defs {
    pub defs: Map<String, Value>,
}

static DEFS: OnceLock<Result<Defs, SchemaError>> = OnceLock::new();

/// Loads the definitions once per process.
///
/// # Errors
/// A missing or unreadable file (the message says to run scripts/install-tools.sh).
pub fn load() -> Result<&'static Defs, SchemaError> {
    DEFS.get_or_init(|| {
        let path = schema_path();
        let fail = |message: String| SchemaError::Load { path: path.display().to_string(), message };
        let text = std::fs::read(&path).map_err(|e| fail(e.to_string()))?;
        let mut doc: Value = serde_json::from_slice(&text).map_err(|e| fail(e.to_string()))?;
        match doc.get_mut("$defs").map(Value::take) {
            Some(Value::Object(defs)) => Ok(Defs { defs }),
            _ => Err(fail("no $defs object".into())),
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The definitions when they loaded.
pub fn defs() -> Option<&'static Defs> {
    load().ok()
}

/// How a list is merged and owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// A position in a schema, `$ref`s resolved.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub v: &'a Value,
    /// The property as written, whose extensions next to a `$ref` (a Deployment's `strategy`
    /// is `retainKeys`) apply on top of the referenced definition's.
    outer: &'a Value,
    /// Whether this node belongs to the built-in definitions (not a CRD's schema).
    builtin: bool,
}

impl<'a> Node<'a> {
    pub fn new(v: &'a Value) -> Node<'a> {
        Node { v: resolve(v), outer: v, builtin: false }
    }

    fn child(self, v: &'a Value) -> Node<'a> {
        Node { builtin: self.builtin, ..Node::new(v) }
    }

    /// A built-in definition by name.
    pub fn definition(name: &str) -> Option<Node<'static>> {
        defs()?.defs.get(name).map(|v| Node { builtin: true, ..Node::new(v) })
    }

    /// The schema of a field of this object: a declared property, else the map's element type.
    pub fn field(self, name: &str) -> Option<Node<'a>> {
        self.property(name).or_else(|| self.additional())
    }

    pub fn property(self, name: &str) -> Option<Node<'a>> {
        self.v.get("properties").and_then(|p| p.get(name)).map(|v| self.child(v))
    }

    pub fn additional(self) -> Option<Node<'a>> {
        self.v.get("additionalProperties").filter(|a| a.is_object()).map(|v| self.child(v))
    }

    pub fn has_properties(self) -> bool {
        self.v.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty())
    }

    pub fn items(self) -> Option<Node<'a>> {
        self.v.get("items").map(|v| self.child(v))
    }

    /// An `x-kubernetes-*` extension, the property's own before its definition's.
    pub fn ext(self, name: &str) -> Option<&'a Value> {
        self.outer.get(name).or_else(|| self.v.get(name))
    }

    /// `x-kubernetes-list-type`; without it a strategic merge key makes a keyed list, as the
    /// real server's schema conversion does, and anything else is atomic.
    pub fn list_type(self) -> ListType {
        match self.ext("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => ListType::Map(strings(self.ext("x-kubernetes-list-map-keys"))),
            Some("set") => ListType::Set,
            Some(_) => ListType::Atomic,
            None => match (
                self.ext("x-kubernetes-patch-strategy").and_then(Value::as_str),
                self.ext("x-kubernetes-patch-merge-key").and_then(Value::as_str),
            ) {
                (Some(s), Some(key)) if s.split(',').any(|p| p == "merge") => ListType::Map(vec![key.to_string()]),
                _ => ListType::Atomic,
            },
        }
    }

    /// `x-kubernetes-map-type: atomic` (LabelSelector, ObjectReference-like structs, ...).
    pub fn map_atomic(self) -> bool {
        self.ext("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }

    pub fn preserves_unknown(self) -> bool {
        self.ext("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
    }

    pub fn embedded_resource(self) -> bool {
        self.ext("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true)
    }

    /// The JSON types this node accepts (`"null"` dropped); empty means anything.
    pub fn types(self) -> Vec<&'a str> {
        if self.ext("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
            return vec!["integer", "string"];
        }
        let mut out = Vec::new();
        match self.v.get("type") {
            Some(Value::String(t)) => out.push(t.as_str()),
            Some(Value::Array(ts)) => out.extend(ts.iter().filter_map(Value::as_str).filter(|t| *t != "null")),
            _ => {}
        }
        if let Some(Value::Array(options)) = self.v.get("oneOf") {
            for o in options {
                out.extend(Node::new(o).types());
            }
        }
        out
    }

    pub fn required(self) -> Vec<String> {
        strings(self.v.get("required"))
    }

    pub fn default(self) -> Option<&'a Value> {
        self.v.get("default")
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

fn resolve(mut v: &Value) -> &Value {
    for _ in 0..8 {
        let Some(name) = v.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/")) else { break };
        match defs().and_then(|d| d.defs.get(name)) {
            Some(target) => v = target,
            None => break,
        }
    }
    v
}

/// The value a keyed list's item has for a key field it leaves out, so it is keyed as the
/// server keys it: the schema's `default`; for built-in kinds a port's `protocol` is `TCP` (the
/// real OpenAPI v3 says so; the v2-derived definitions read here leave defaults out).
pub fn key_default(item: Option<Node<'_>>, key: &str) -> Option<Value> {
    let item = item?;
    if let Some(d) = item.property(key).and_then(Node::default) {
        return Some(d.clone());
    }
    (item.builtin && key == "protocol").then(|| Value::String("TCP".into()))
}
