//! The vocabulary every stage shares: plain data with no I/O, importing nothing from the other
//! stages (they import it). Cluster and object identities, a cluster's variables
//! ([`cluster`]), the rendered [`Object`], digests ([`digest`]), versions and constraints
//! ([`version`]) and what a subscription wants of them ([`Wanted`]), schedules and durations
//! ([`schedule`]), how a source is reached ([`source`]), verification records
//! ([`verification`]), Kubernetes name validation ([`names`]), taking a lock poisoned or not ([`sync`]), a failure said once per cause ([`repeats`]), what a release host published
//! ([`published`]), how far a long command is ([`progress`]), stacksync as a writer to Kubernetes ([`manager`]), and the small enums two stages used to define each on their own. A type
//! moves here when a second stage needs it; `tests/layering.rs` keeps this module a leaf.

use std::fmt;

pub mod cluster;
pub mod digest;
pub mod manager;
pub mod progress;
pub mod published;
pub mod repeats;
pub mod schedule;
pub mod source;
pub mod verification;
pub mod version;
pub mod window;

pub use digest::Sha256Digest;
// The applier's vocabulary (`crates/applier`): the rendered object, Kubernetes identity checks,
// the lock helper, what a stage and a resync do.
pub use applier::{DriftMode, HAND_MANAGERS, Object, StageAction, names, object, sync};

/// What a subscription wants of a source's tags: the part of its config release selection reads
/// (so `release` needs nothing from `config`, and `config` builds it without knowing `release`).
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub source: &'a str,
    /// Cluster-stack tags of this stack; `None`: plain semver tags.
    pub stack: Option<&'a str>,
    /// With `stack` a line: the Kubernetes minors whose families are followed.
    pub kubernetes: Option<&'a semver::VersionReq>,
    /// The constraint as written, for messages.
    pub version: &'a str,
    pub constraint: &'a version::Constraint,
    pub auto_upgrade: bool,
}

impl Wanted<'_> {
    /// The cluster-stack families wanted (`None`: plain semver tags).
    pub fn families(&self) -> Option<version::Families<'_>> {
        self.stack.map(|stack| version::Families { stack, kubernetes: self.kubernetes })
    }

    /// Whether `v` is a release of what is wanted, the constraint aside.
    pub fn kind_of(&self, v: &version::Version) -> bool {
        match (self.families(), v) {
            (Some(f), version::Version::Scs { .. }) => f.covers_version(v),
            (None, version::Version::Semver(_)) => true,
            _ => false,
        }
    }
}

/// A Cluster API `Cluster` (or a configured cluster of the directory target): namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterKey {
    pub namespace: String,
    pub name: String,
}

impl ClusterKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ClusterKey {
        ClusterKey { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One object in a cluster: API group (empty for the core group), kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.kind, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// A cached release: `<source key>/<tag>@<commit>` (the cache index's key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleaseId(pub String);

impl ReleaseId {
    pub fn new(source_key: &str, tag: &str, commit: &str) -> ReleaseId {
        ReleaseId(format!("{source_key}/{tag}@{commit}"))
    }
}

impl fmt::Display for ReleaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_as_kubectl_names_them() {
        assert_eq!(ClusterKey::new("team-a", "alpha").to_string(), "team-a/alpha");
        let o = ObjKey { group: "apps".into(), kind: "Deployment".into(), namespace: Some("kube-system".into()), name: "ccm".into() };
        assert_eq!(o.to_string(), "Deployment/kube-system/ccm");
        assert_eq!(ReleaseId::new("stacks-abc", "v1", "c0ffee").to_string(), "stacks-abc/v1@c0ffee");
    }
}
