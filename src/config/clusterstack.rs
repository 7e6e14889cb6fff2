//! Validation of the cluster-stack parts of the config: `helm`, a subscription's `format`, and a
//! cluster's `cluster` / `controlPlane` / `infraCluster` objects.

use std::path::Path;

use super::validate::{Cx, Fields, describe};
use super::yaml::{Node, Value};
use super::{ClusterObjects, Format, HelmConfig, TemplatesConfig};
use crate::schedule::{format_duration, parse_duration};

/// The directory the directory target writes a namespace's ClusterClass objects to; a cluster of
/// this name would share it.
pub const CLUSTER_CLASS_DIR: &str = "cluster-class";

impl Format {
    /// The release-relative directory read when `path` is not set.
    pub fn default_path(self) -> &'static str {
        match self {
            Format::Manifests => "manifests",
            Format::ClusterStack => ".",
        }
    }
}

impl Cx {
    pub(super) fn helm(&mut self, node: &Node, base: &Path) -> Option<HelmConfig> {
        let f = self.fields(node, "helm", &["path", "parallelism", "timeout"])?;
        let mut helm = HelmConfig::default();
        if let Some(p) = self.string(&f, "path") {
            helm.path = Some(base.join(p));
        }
        if let Some(n) = f.get("parallelism") {
            match n.scalar_text().and_then(|t| t.parse::<usize>().ok()).filter(|n| (1..=64).contains(n)) {
                Some(v) => helm.parallelism = v,
                None => self.error(n.mark, &f.path("parallelism"), format!("expected a number from 1 to 64, found {}", describe(n))),
            }
        }
        if let Some(n) = f.get("timeout") {
            let text = self.string(&f, "timeout").unwrap_or_default();
            match parse_duration(&text) {
                Ok(d) if d.as_secs() >= 1 => helm.timeout = d,
                Ok(d) => self.error(n.mark, &f.path("timeout"), format!("timeout {} is too short; use at least 1s", format_duration(d))),
                Err(e) => self.error(n.mark, &f.path("timeout"), e),
            }
        }
        Some(helm)
    }

    pub(super) fn templates(&mut self, node: &Node) -> Option<TemplatesConfig> {
        let f = self.fields(node, "templates", &["strict"])?;
        Some(TemplatesConfig { strict: self.bool(&f, "strict", false) })
    }

    /// Reads `format`; a cluster-stack release is found by its tag, so it needs `stack`.
    pub(super) fn format(&mut self, f: &Fields<'_>, stack: Option<&String>) -> Format {
        let Some(node) = f.get("format") else { return Format::Manifests };
        let format = match node.scalar_text() {
            Some("manifests") => Format::Manifests,
            Some("clusterstack") => Format::ClusterStack,
            _ => {
                self.error(node.mark, &f.path("format"), format!("expected `manifests` or `clusterstack`, found {}", describe(node)));
                return Format::Manifests;
            }
        };
        if format == Format::ClusterStack && stack.is_none() {
            self.error(
                node.mark,
                &f.path("format"),
                "format `clusterstack` needs `stack` (`<provider>-<name>-<k8s major>-<k8s minor>`): cluster-stack releases are found by their tags",
            );
        }
        format
    }

    /// Reads a cluster's `cluster`, `controlPlane` and `infraCluster` objects. A `cluster` object's
    /// `metadata.name` / `metadata.namespace`, when set, must be the cluster's own.
    pub(super) fn cluster_objects(&mut self, f: &Fields<'_>, name: Option<&str>, namespace: Option<&str>) -> ClusterObjects {
        let object = |cx: &mut Cx, key: &str| -> Option<serde_json::Value> {
            let node = f.get(key)?;
            if !matches!(node.value, Value::Map(_)) {
                cx.error(node.mark, &f.path(key), format!("expected a mapping (the object as in Kubernetes), found {}", node.type_name()));
                return None;
            }
            Some(node.to_json())
        };
        let cluster = object(self, "cluster");
        let objects = ClusterObjects { cluster, control_plane: object(self, "controlPlane"), infra_cluster: object(self, "infraCluster") };
        if let (Some(c), Some(node)) = (&objects.cluster, f.get("cluster")) {
            for (field, want) in [("name", name), ("namespace", namespace)] {
                let got = c.get("metadata").and_then(|m| m.get(field)).and_then(serde_json::Value::as_str);
                if let (Some(got), Some(want)) = (got, want)
                    && got != want
                {
                    self.error(
                        node.mark,
                        &f.path(&format!("cluster.metadata.{field}")),
                        format!("`{got}` differs from the cluster's {field} `{want}`; leave it out or make them equal"),
                    );
                }
            }
        }
        objects
    }

    pub(super) fn reserved_cluster_name(&mut self, f: &Fields<'_>, name: &str) {
        if name == CLUSTER_CLASS_DIR {
            let mark = f.get("name").map(|n| n.mark).unwrap_or_default();
            self.error(
                mark,
                &f.path("name"),
                "cluster name `cluster-class` is reserved: the directory target writes a namespace's ClusterClass objects to `<target>/<namespace>/cluster-class/`",
            );
        }
    }
}
