//! A cluster as the stages see it: its identity and its variables (what `render` substitutes
//! and its values templates read), and where the directory target keeps its files.

use std::collections::BTreeMap;

/// One cluster of a subscription: a configured cluster of the directory target, or a Cluster
/// API `Cluster` matched in the management cluster (its live objects filled in).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    pub name: String,
    pub namespace: String,
    /// Substitution variables: subscription values overlaid with the cluster's own; nested
    /// mappings are flattened with dots (`network.podCidr`).
    pub values: BTreeMap<String, String>,
    /// Objects for cluster-stack values templates (`.Cluster`, `.ControlPlane`, `.InfraCluster`).
    pub objects: ClusterObjects,
}

/// The Cluster API objects of a workload cluster, as free-form maps. Without a `cluster`, a minimal
/// Cluster with the cluster's name and namespace is used.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterObjects {
    pub cluster: Option<serde_json::Value>,
    pub control_plane: Option<serde_json::Value>,
    pub infra_cluster: Option<serde_json::Value>,
}

/// The directory target's status directory (`<target>/status/<namespace>/<cluster>.yaml`): a
/// namespace of this name would share it, so the config refuses it.
pub const STATUS_DIR: &str = "status";

/// The directory the directory target writes a namespace's ClusterClass objects to; a cluster of
/// this name would share it, so the config refuses it.
pub const CLUSTER_CLASS_DIR: &str = "cluster-class";
