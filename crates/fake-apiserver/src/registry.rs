//! Which resources the server serves: the built-in kinds and every established CRD, with what
//! discovery, OpenAPI and the Table printer need to know about each.

use serde_json::Value;

use super::schema::Node;

/// How a printer column gets its cell.
#[derive(Debug, Clone)]
pub enum Cell {
    /// A JSONPath (the subset CRDs use: `.a.b`, `[n]`, `[?(@.k=="v")]`).
    Path(String),
    /// `len(data) + len(binaryData)`, as ConfigMap and Secret print it.
    DataCount,
    /// `readyReplicas/replicas`, as Deployment prints it.
    Ready,
}

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub cell: Cell,
}

impl Column {
    pub fn path(name: &str, type_: &str, path: &str) -> Column {
        Column {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            cell: Cell::Path(path.into()),
        }
    }

    pub fn computed(name: &str, type_: &str, cell: Cell) -> Column {
        Column { cell, ..Column::path(name, type_, "") }
    }
}

/// One served version of a resource.
#[derive(Debug, Clone)]
pub struct Version {
    pub name: String,
    pub status: bool,
    pub columns: Vec<Column>,
    /// A CRD's `openAPIV3Schema` (structural): list and map types, validation, pruning, defaults.
    pub schema: Option<Value>,
    /// A built-in kind's definition in the 1.35 schemas (`io.k8s.api.apps.v1.Deployment`).
    pub definition: Option<String>,
    /// A CRD version's `selectableFields` (`spec.color`), usable in field selectors.
    pub selectable: Vec<String>,
    /// Whether a CRD stores its objects in this version (built-in kinds: false, see
    /// `kinds::storage_version`).
    pub storage: bool,
}

impl Version {
    /// The schema objects of this version follow, if any.
    pub fn root(&self) -> Option<Node<'_>> {
        match (&self.schema, &self.definition) {
            (Some(schema), _) => Some(Node::new(schema)),
            (None, Some(name)) => Node::definition(name),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Served versions, preferred first.
    pub versions: Vec<Version>,
    /// Whether objects carry `metadata.generation`, and what bumps it.
    pub generation: Option<Generation>,
    /// Defined by a CRD (custom resources differ in a few server behaviours, e.g. DELETE's answer).
    pub custom: bool,
}

/// What a kind's strategy compares to bump `metadata.generation` on an update (its
/// `PrepareForUpdate` in kube-apiserver 1.35's `pkg/registry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Everything outside metadata (and status, where it has a subresource): `spec`, or what
    /// stands for it (a webhook configuration's `webhooks`).
    Spec,
    /// `spec` and `metadata.annotations`: a Deployment, whose annotations its controller copies
    /// to its ReplicaSets (StatefulSets, DaemonSets and ReplicaSets compare `spec` only).
    SpecAndAnnotations,
    /// Everything outside metadata and `metadata.labels`: an EndpointSlice.
    SpecAndLabels,
    /// Set to 1 on create and never bumped by an update: a PriorityClass.
    OnCreate,
}

impl ResourceType {
    pub fn version(&self, name: &str) -> Option<&Version> {
        self.versions.iter().find(|v| v.name == name)
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() { version.to_string() } else { format!("{}/{version}", self.group) }
    }

    /// `plural` or `plural.group`: how stats and messages name the resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub fn has_status(&self, version: &str) -> bool {
        self.version(version).is_some_and(|v| v.status)
    }
}

/// The set of served resources.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub types: Vec<ResourceType>,
}

impl Registry {
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.group == group && t.plural == plural && t.version(version).is_some())
    }

    pub fn find_kind(&self, group: &str, version: &str, kind: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.group == group && t.kind == kind && t.version(version).is_some())
    }

    /// Groups in discovery order (core first, then built-ins, then CRD groups by name) with
    /// their versions, preferred first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for t in &self.types {
            let pos = match groups.iter().position(|(g, _)| *g == t.group) {
                Some(pos) => pos,
                None => {
                    groups.push((t.group.clone(), Vec::new()));
                    groups.len() - 1
                }
            };
            for v in &t.versions {
                if !groups[pos].1.contains(&v.name) {
                    groups[pos].1.push(v.name.clone());
                }
            }
        }
        for (_, versions) in &mut groups {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        groups
    }

    /// Resources served in one group-version.
    pub fn in_group_version<'a>(&'a self, group: &'a str, version: &'a str) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types.iter().filter(move |t| t.group == group && t.version(version).is_some())
    }

    /// Replaces (or removes, when `rt` is None) the type a CRD named `group`/`plural` defines.
    pub fn set_custom(&mut self, group: &str, plural: &str, rt: Option<ResourceType>) {
        self.types.retain(|t| !(t.custom && t.group == group && t.plural == plural));
        if let Some(rt) = rt {
            self.types.push(rt);
        }
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first (`v2` > `v1` > `v1beta2`).
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else { return (0, 0, 0) };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else { return (0, 0, 0) };
    let tail = &rest[digits.len()..];
    let (level, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (level, major, minor)
}

/// The resource a CRD object defines, or why it cannot be served.
pub fn from_crd(crd: &Value) -> Result<ResourceType, Vec<(&'static str, String)>> {
    let spec = &crd["spec"];
    let mut errors = Vec::new();
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_string();
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    if group.is_empty() {
        errors.push(("spec.group", "Required value".to_string()));
    }
    if plural.is_empty() {
        errors.push(("spec.names.plural", "Required value".to_string()));
    }
    if kind.is_empty() {
        errors.push(("spec.names.kind", "Required value".to_string()));
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if !plural.is_empty() && name != format!("{plural}.{group}") {
        errors.push(("metadata.name", format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group")));
    }
    let scope = spec["scope"].as_str().unwrap_or_default();
    if scope != "Namespaced" && scope != "Cluster" {
        errors.push(("spec.scope", format!("Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\"")));
    }
    let mut versions = Vec::new();
    let all = spec["versions"].as_array().cloned().unwrap_or_default();
    if all.is_empty() {
        errors.push(("spec.versions", "Invalid value: null: must have exactly one version marked as storage version".to_string()));
    } else if all.iter().filter(|v| v["storage"].as_bool() == Some(true)).count() != 1 {
        errors.push(("spec.versions", "Invalid value: must have exactly one version marked as storage version".to_string()));
    }
    for v in &all {
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let columns = match v["additionalPrinterColumns"].as_array() {
            Some(cols) => cols
                .iter()
                .map(|c| Column {
                    name: c["name"].as_str().unwrap_or_default().into(),
                    type_: c["type"].as_str().unwrap_or("string").into(),
                    format: c["format"].as_str().unwrap_or_default().into(),
                    description: c["description"].as_str().unwrap_or_default().into(),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    cell: Cell::Path(c["jsonPath"].as_str().unwrap_or_default().into()),
                })
                .collect(),
            None => vec![age()],
        };
        versions.push(Version {
            name: v["name"].as_str().unwrap_or_default().into(),
            status: v["subresources"]["status"].is_object(),
            columns,
            schema: v["schema"].get("openAPIV3Schema").cloned(),
            definition: None,
            storage: v["storage"] == Value::Bool(true),
            selectable: v["selectableFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["jsonPath"].as_str().map(|p| p.trim_start_matches('.').to_string()))
                .collect(),
        });
    }
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
    if !errors.is_empty() {
        return Err(errors);
    }
    let strings = |field: &str| -> Vec<String> {
        names[field].as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    Ok(ResourceType {
        list_kind: names["listKind"].as_str().map(String::from).unwrap_or_else(|| format!("{kind}List")),
        singular: names["singular"].as_str().map(String::from).unwrap_or_else(|| kind.to_lowercase()),
        short_names: strings("shortNames"),
        categories: strings("categories"),
        namespaced: scope == "Namespaced",
        group,
        kind,
        plural,
        versions,
        generation: Some(Generation::Spec),
        custom: true,
    })
}

pub fn age() -> Column {
    Column::path("Age", "date", ".metadata.creationTimestamp")
}
