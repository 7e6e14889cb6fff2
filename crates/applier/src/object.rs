//! The rendered object: what `render` produces and `apply` puts in place.

use std::fmt;

use serde_json::Value;

/// A rendered Kubernetes object and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// `group/version` (`v1` for the core group).
    pub api_version: String,
    /// The kind, as the manifest names it.
    pub kind: String,
    /// As rendered; `None` for a cluster-scoped object or one that takes the applier's default.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// Release-relative file and the line its document starts on; for helm charts, the template
    /// file as helm's `# Source:` names it.
    pub file: String,
    /// The 1-based line of `file` its document starts on.
    pub line: usize,
    /// The whole object as JSON, what is sent (with the owner label added and the namespace defaulted).
    pub body: Value,
    /// The release-relative chart it was rendered from (cluster-stack releases).
    pub chart: Option<String>,
    /// The cluster-addon stage (`cluster-class` for ClusterClass objects).
    pub stage: Option<String>,
}

impl Object {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}
