//! The inventory: which objects one (cluster, subscription) sync applied, and with which manifest
//! digest. The next sync prunes what dropped out of it and tells release changes from drift by it.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ObjectRef;

/// Every object one sync put (or meant to put) in place, in apply order.
#[derive(Serialize, Deserialize, Clone, Default, PartialEq, Eq, Debug)]
pub struct Inventory {
    /// One entry per object.
    pub entries: Vec<InventoryEntry>,
}

impl Inventory {
    /// How many objects it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none (a first sync, or a lost inventory).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses the compact strings of [`Inventory::to_lines`]. A line that does not parse is
    /// dropped (with a warning): its object is then never pruned, the safe way to lose it.
    pub fn from_lines(lines: &[String]) -> Inventory {
        let entries = lines
            .iter()
            .filter_map(|l| match l.parse() {
                Ok(e) => Some(e),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring an unreadable inventory entry");
                    None
                }
            })
            .collect();
        Inventory { entries }
    }

    /// One compact string per entry (see [`InventoryEntry`]).
    pub fn to_lines(&self) -> Vec<String> {
        self.entries.iter().map(ToString::to_string).collect()
    }

    /// The entry for the same object (any version), if any.
    pub fn find(&self, key: &Key<'_>) -> Option<&InventoryEntry> {
        self.entries.iter().find(|e| e.key() == *key)
    }
}

/// One object of an inventory. Serialised as one compact string,
/// `group|kind|namespace|name|version|digest|fields` (empty namespace for cluster-scoped objects;
/// `|fields` left out when empty, and lines of six fields read as having none), so an inventory
/// of thousands of objects stays small in a status resource.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct InventoryEntry {
    /// The API group (empty for the core group).
    pub group: String,
    /// The kind.
    pub kind: String,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The API version it was applied at (`v1`).
    pub version: String,
    /// Digest of the manifest as applied (16 hex digits of its sha256); empty when unknown.
    pub digest: String,
    /// Hash of the fields our manager owned right after our last apply (12 hex digits of the
    /// sha256 of its `managedFields` FieldsV1); empty when unknown. While the listed object shows
    /// the same, nobody changed one of our fields and an unchanged manifest needs no request.
    pub fields: String,
}

/// What makes an object the same object across versions: `(group, kind, namespace, name)`.
pub type Key<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

impl InventoryEntry {
    /// What identifies the object whatever its version.
    pub fn key(&self) -> Key<'_> {
        (&self.group, &self.kind, self.namespace.as_deref(), &self.name)
    }

    /// `group/version` (`v1` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The object as a change-set entry names it.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef { api_version: self.api_version(), kind: self.kind.clone(), namespace: self.namespace.clone(), name: self.name.clone() }
    }
}

impl fmt::Display for InventoryEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names may not contain `%` (they must be valid path segments), so escaping `|` as `%7C`
        // is unambiguous; the other fields cannot hold either character.
        let name = self.name.replace('|', "%7C");
        let ns = self.namespace.as_deref().unwrap_or_default();
        write!(f, "{}|{}|{ns}|{name}|{}|{}", self.group, self.kind, self.version, self.digest)?;
        if !self.fields.is_empty() {
            write!(f, "|{}", self.fields)?;
        }
        Ok(())
    }
}

/// A status line that is not an inventory entry (the line is quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inventory entry `{0}` is not `group|kind|namespace|name|version|digest[|fields]`")]
pub struct ParseEntryError(String);

impl FromStr for InventoryEntry {
    type Err = ParseEntryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = s.split('|').collect();
        let [group, kind, namespace, name, version, rest @ ..] = fields.as_slice() else {
            return Err(ParseEntryError(s.to_string()));
        };
        if kind.is_empty() || name.is_empty() || version.is_empty() || rest.len() > 2 {
            return Err(ParseEntryError(s.to_string()));
        }
        Ok(InventoryEntry {
            group: (*group).to_string(),
            kind: (*kind).to_string(),
            namespace: (!namespace.is_empty()).then(|| (*namespace).to_string()),
            name: name.replace("%7C", "|"),
            version: (*version).to_string(),
            digest: rest.first().map(|d| (*d).to_string()).unwrap_or_default(),
            fields: rest.get(1).map(|d| (*d).to_string()).unwrap_or_default(),
        })
    }
}

impl Serialize for InventoryEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for InventoryEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What pruning may do this pass, decided before any request is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrunePlan<'a> {
    /// Nothing dropped out of the inventory.
    Nothing,
    /// Delete these, in this order (reverse apply order).
    Delete(Vec<&'a InventoryEntry>),
    /// Delete nothing; keep every candidate in the inventory and say why.
    Paused { candidates: Vec<&'a InventoryEntry>, reason: String },
    /// Pruning is off: keep every candidate in the inventory, so turning it on later prunes them.
    Disabled(Vec<&'a InventoryEntry>),
}

/// Limits the plan is made under (from `ApplyOptions`).
#[derive(Debug, Clone, Copy)]
pub struct PruneLimits {
    pub enabled: bool,
    pub limit: usize,
    pub allow_empty: bool,
    /// Whether any Apply stage had objects this pass.
    pub rendered_any: bool,
}

/// Entries of `previous` whose object is neither in `applied` nor in `excluded` (the objects of
/// delete stages, which are handled there), in reverse apply order, and whether they may go.
pub fn plan<'a>(previous: &'a Inventory, applied: &Inventory, excluded: &[Key<'_>], limits: PruneLimits) -> PrunePlan<'a> {
    let wanted: HashSet<Key<'_>> = applied.entries.iter().map(InventoryEntry::key).chain(excluded.iter().copied()).collect();
    let mut candidates: Vec<&InventoryEntry> = previous.entries.iter().filter(|e| !wanted.contains(&e.key())).collect();
    candidates.sort_by(|a, b| crate::order::compare_keys(b.key(), a.key()));
    candidates.dedup_by(|a, b| a.key() == b.key());
    if candidates.is_empty() {
        return PrunePlan::Nothing;
    }
    let n = candidates.len();
    if !limits.enabled {
        return PrunePlan::Disabled(candidates);
    }
    let reason = if !limits.rendered_any && !limits.allow_empty {
        format!("pruning paused: the render is empty and would delete all {n} objects; allow empty prune to permit it")
    } else if n > limits.limit {
        format!("pruning paused: {n} objects to delete exceed the prune limit of {}", limits.limit)
    } else {
        return PrunePlan::Delete(candidates);
    };
    PrunePlan::Paused { candidates, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, name: &str) -> InventoryEntry {
        let group = if kind == "CustomResourceDefinition" { "apiextensions.k8s.io" } else { "" };
        InventoryEntry {
            group: group.into(),
            kind: kind.into(),
            namespace: (kind == "ConfigMap").then(|| "default".into()),
            name: name.into(),
            version: "v1".into(),
            digest: "abc".into(),
            fields: String::new(),
        }
    }

    #[test]
    fn entries_round_trip_as_compact_strings() {
        let mut odd = entry("ClusterRole", "system:a|b");
        odd.group = "rbac.authorization.k8s.io".into();
        let inv = Inventory { entries: vec![entry("ConfigMap", "a"), odd, entry("Namespace", "team")] };
        let json = serde_json::to_string(&inv).unwrap();
        assert_eq!(
            json,
            r#"{"entries":["|ConfigMap|default|a|v1|abc","rbac.authorization.k8s.io|ClusterRole||system:a%7Cb|v1|abc","|Namespace||team|v1|abc"]}"#
        );
        assert_eq!(serde_json::from_str::<Inventory>(&json).unwrap(), inv);
        let mut lines = inv.to_lines();
        lines.push("not an entry".into());
        assert_eq!(Inventory::from_lines(&lines), inv, "unreadable lines are dropped");
        // The digest is optional (an inventory written without it).
        let old: InventoryEntry = "apps|Deployment|default|web|v1".parse().unwrap();
        assert_eq!((old.api_version(), old.digest.as_str()), ("apps/v1".to_string(), ""));
        // Seven fields: the hash of our fields; six (written before it existed) read as none.
        let with: InventoryEntry = "|ConfigMap|default|a|v1|abc|0123456789ab".parse().unwrap();
        assert_eq!((with.digest.as_str(), with.fields.as_str()), ("abc", "0123456789ab"));
        assert_eq!(with.to_string(), "|ConfigMap|default|a|v1|abc|0123456789ab");
        assert_eq!("|ConfigMap|default|a|v1|abc".parse::<InventoryEntry>().unwrap().fields, "");
        for bad in ["", "a|b", "|ConfigMap|default||v1|", "a|b|c|d|e|f|g|h"] {
            assert!(bad.parse::<InventoryEntry>().is_err(), "{bad}");
        }
    }

    fn limits(limit: usize) -> PruneLimits {
        PruneLimits { enabled: true, limit, allow_empty: false, rendered_any: true }
    }

    #[test]
    fn plan_prunes_dropped_objects_in_reverse_apply_order() {
        let previous = Inventory {
            entries: vec![
                entry("CustomResourceDefinition", "w.example.com"),
                entry("Namespace", "n"),
                entry("ConfigMap", "a"),
                entry("ConfigMap", "b"),
            ],
        };
        let mut applied = Inventory { entries: vec![entry("ConfigMap", "a")] };
        applied.entries[0].version = "v2".into(); // a new version is the same object
        let names = |p: PrunePlan<'_>| match p {
            PrunePlan::Delete(es) => es.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(names(plan(&previous, &applied, &[], limits(50))), ["b", "n", "w.example.com"]);
        let excluded = [("", "Namespace", None, "n")];
        assert_eq!(names(plan(&previous, &applied, &excluded, limits(50))), ["b", "w.example.com"]);
        assert_eq!(plan(&previous, &previous, &[], limits(50)), PrunePlan::Nothing);
    }

    #[test]
    fn plan_pauses_over_the_limit_on_an_empty_render_and_when_disabled() {
        let previous = Inventory { entries: vec![entry("ConfigMap", "a"), entry("ConfigMap", "b")] };
        let applied = Inventory::default();
        let paused = |p: PrunePlan<'_>| match p {
            PrunePlan::Paused { candidates, reason } => (candidates.len(), reason),
            other => panic!("{other:?}"),
        };
        let (n, reason) = paused(plan(&previous, &applied, &[], limits(1)));
        assert_eq!((n, reason.as_str()), (2, "pruning paused: 2 objects to delete exceed the prune limit of 1"));
        let (_, reason) = paused(plan(&previous, &applied, &[], PruneLimits { rendered_any: false, ..limits(50) }));
        assert!(reason.contains("render is empty"), "{reason}");
        let allowed = plan(&previous, &applied, &[], PruneLimits { rendered_any: false, allow_empty: true, ..limits(50) });
        assert!(matches!(allowed, PrunePlan::Delete(es) if es.len() == 2));
        let disabled = plan(&previous, &applied, &[], PruneLimits { enabled: false, ..limits(50) });
        assert!(matches!(disabled, PrunePlan::Disabled(es) if es.len() == 2));
    }
}
