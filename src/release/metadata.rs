//! `metadata.yaml` of a SovereignCloudStack cluster-stack release: which cluster-stack, Kubernetes,
//! cluster-addon and node-image versions the release holds. Read with positions so every error
//! names the line and field, and checked against the release tag.

use std::fmt;

use kubeyaml::{self, Mark, Node, Value};

use crate::model::version::{ScsVersion, Version};

/// The `apiVersion` csctl writes; optional (the reference operator does not read it).
pub const API_VERSION: &str = "metadata.clusterstack.x-k8s.io/v1alpha1";
pub const FILE: &str = "metadata.yaml";

/// A validated `metadata.yaml`. Versions are normalised to the dotted form used in chart and
/// ClusterClass names (`v2`, `v0-sha.abc123`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub cluster_stack: String,
    /// `v<major>.<minor>.<patch>`, passed to `helm template --kube-version`.
    pub kubernetes: String,
    pub cluster_addon: String,
    pub node_image: Option<String>,
}

/// One problem in a metadata file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub field: String,
    pub message: String,
}

impl fmt::Display for MetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.col)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Parses and validates `text` (read from `file`, release-relative) for the release whose tag
/// parsed as `tag_version`.
///
/// # Errors
/// Every problem found: invalid YAML, a missing or malformed required field, versions that do
/// not match the tag.
pub fn parse(file: &str, text: &str, tag_version: &Version) -> Result<Metadata, Vec<MetadataError>> {
    let mut errors = Vec::new();
    let mut err = |mark: Mark, field: &str, message: String| {
        errors.push(MetadataError { file: file.to_owned(), line: mark.line, col: mark.col, field: field.to_owned(), message });
    };
    let root = match kubeyaml::parse(text) {
        Ok(kubeyaml::Document { root: Some(root), warnings, .. }) => {
            for w in warnings {
                tracing::warn!(file, line = w.line, "{}", w.message);
            }
            root
        }
        Ok(kubeyaml::Document { root: None, .. }) => {
            err(
                Mark { line: 1, col: 1 },
                "",
                "the file is empty; expected `versions.clusterStack`, `versions.kubernetes` and `versions.components.clusterAddon`".into(),
            );
            return Err(errors);
        }
        Err(e) => {
            err(e.mark, "", format!("invalid YAML: {}", e.message));
            return Err(errors);
        }
    };
    if let Some(api) = get(&root, "apiVersion")
        && api.scalar_text() != Some(API_VERSION)
    {
        err(api.mark, "apiVersion", format!("expected `{API_VERSION}`, found {}", describe(api)));
    }
    let Some(versions) = get(&root, "versions").filter(|v| matches!(v.value, Value::Map(_))) else {
        err(root.mark, "versions", "missing required mapping `versions`".into());
        return Err(errors);
    };
    let [cs, k8s, addon, node_image] = version_fields(versions, &mut err);

    let Version::Scs { stack, version: tag_v } = tag_version else {
        err(root.mark, "", "metadata.yaml belongs to cluster-stack releases, but the tag is not a cluster-stack tag".into());
        return Err(errors);
    };
    let mut out = Metadata { cluster_stack: String::new(), kubernetes: String::new(), cluster_addon: String::new(), node_image: None };
    let mut check = |field: (Option<(String, Mark)>, &str), decide: &dyn Fn(&str) -> Result<String, BadVersion>| -> Option<String> {
        let (v, mark) = field.0?;
        decide(&v).map_err(|bad| err(mark, field.1, bad.to_string())).ok()
    };
    if let Some(v) = check((cs, "versions.clusterStack"), &|v| cluster_stack_version(v, tag_v)) {
        out.cluster_stack = v;
    }
    if let Some(v) = check((k8s, "versions.kubernetes"), &|v| kubernetes_version(v, stack)) {
        out.kubernetes = v;
    }
    if let Some(v) = check((addon, "versions.components.clusterAddon"), &component_version) {
        out.cluster_addon = v;
    }
    out.node_image = check((node_image, "versions.components.nodeImage"), &component_version);
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// The four version fields of `versions`, each as written with where (`None`: missing, empty
/// or no string, said with `err`; `nodeImage` is optional).
fn version_fields(versions: &Node, err: &mut dyn FnMut(Mark, &str, String)) -> [Option<(String, Mark)>; 4] {
    let mut scalar = |node: Option<&Node>, parent: &Node, field: &str| -> Option<(String, Mark)> {
        match node {
            // `clusterStack:` with nothing after it: the field is there, its value is not.
            Some(n) if n.is_null() => {
                err(n.mark, field, "the field is empty; expected a version string".into());
                None
            }
            Some(n) => match &n.value {
                Value::Scalar(s) if !s.text.trim().is_empty() => Some((s.text.trim().to_owned(), n.mark)),
                _ => {
                    err(n.mark, field, format!("expected a version string, found {}", describe(n)));
                    None
                }
            },
            _ => {
                err(parent.mark, field, format!("missing required field `{field}`"));
                None
            }
        }
    };
    let cs = scalar(get(versions, "clusterStack"), versions, "versions.clusterStack");
    let k8s = scalar(get(versions, "kubernetes"), versions, "versions.kubernetes");
    let components = get(versions, "components");
    let addon = scalar(components.and_then(|c| get(c, "clusterAddon")), components.unwrap_or(versions), "versions.components.clusterAddon");
    let node_image = match components.and_then(|c| get(c, "nodeImage")) {
        Some(n) if !n.is_null() => scalar(Some(n), versions, "versions.components.nodeImage"),
        _ => None,
    };
    [cs, k8s, addon, node_image]
}

/// What is wrong with a version field of `metadata.yaml` (`given`: the field as written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadVersion {
    #[error("`{given}` ({dotted}) does not match the release tag, which is version {tag}")]
    TagMismatch { given: String, dotted: String, tag: String },
    #[error("`{given}` is not a cluster-stack version; expected `v<N>` or `v0-sha.<hash>`")]
    ClusterStackSyntax { given: String },
    #[error("`{given}` is not a Kubernetes version; expected `v<major>.<minor>.<patch>` such as `v1.27.3`")]
    KubernetesSyntax { given: String },
    #[error("`{given}` does not match the stack `{stack}` (Kubernetes {major}.{minor})")]
    StackMismatch { given: String, stack: String, major: String, minor: String },
    #[error("`{given}` is not a version; expected `v<N>` or `v0-sha.<hash>`")]
    ComponentSyntax { given: String },
}

/// `versions.clusterStack` (`v` as written) in its dotted form, when it is the release tag's
/// version `tag`.
fn cluster_stack_version(v: &str, tag: &ScsVersion) -> Result<String, BadVersion> {
    match scs_version(v) {
        Some(parsed) if &parsed == tag => Ok(dotted(&parsed)),
        Some(parsed) => Err(BadVersion::TagMismatch { given: v.to_owned(), dotted: dotted(&parsed), tag: dotted(tag) }),
        None => Err(BadVersion::ClusterStackSyntax { given: v.to_owned() }),
    }
}

/// `versions.kubernetes` (`v` as written) as `v<major>.<minor>.<patch>`, when its minor is the
/// one the name of `stack` says (`docker-ferrol-1-27`: 1.27).
fn kubernetes_version(v: &str, stack: &str) -> Result<String, BadVersion> {
    let Some((major, minor)) = kube_version(v) else { return Err(BadVersion::KubernetesSyntax { given: v.to_owned() }) };
    let want = stack.rsplitn(3, '-').take(2).collect::<Vec<_>>();
    let (want_minor, want_major) = (want.first().copied().unwrap_or(""), want.get(1).copied().unwrap_or(""));
    if major.to_string() != want_major || minor.to_string() != want_minor {
        return Err(BadVersion::StackMismatch {
            given: v.to_owned(),
            stack: stack.to_owned(),
            major: want_major.to_owned(),
            minor: want_minor.to_owned(),
        });
    }
    Ok(if v.starts_with('v') { v.to_owned() } else { format!("v{v}") })
}

/// A component's version (`v` as written) in its dotted form.
fn component_version(v: &str) -> Result<String, BadVersion> {
    scs_version(v).map(|parsed| dotted(&parsed)).ok_or_else(|| BadVersion::ComponentSyntax { given: v.to_owned() })
}

fn get<'n>(node: &'n Node, key: &str) -> Option<&'n Node> {
    node.get(key)
}

fn describe(node: &Node) -> String {
    match &node.value {
        Value::Scalar(s) if !node.is_null() => format!("`{}`", s.text),
        _ => node.type_name().to_owned(),
    }
}

/// `v3`, `v0-sha.abc` or `v0-sha-abc` (csctl writes either).
fn scs_version(v: &str) -> Option<ScsVersion> {
    let rest = v.strip_prefix('v')?;
    if let Some(hash) = rest.strip_prefix("0-sha.").or_else(|| rest.strip_prefix("0-sha-")) {
        return (!hash.is_empty() && hash.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
            .then(|| ScsVersion::Hash(hash.to_owned()));
    }
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    rest.parse().ok().map(ScsVersion::Number)
}

/// The dotted form used in chart and ClusterClass names.
pub fn dotted(v: &ScsVersion) -> String {
    match v {
        ScsVersion::Number(n) => format!("v{n}"),
        ScsVersion::Hash(h) => format!("v0-sha.{h}"),
    }
}

/// `v1.27.3` (or `1.27.3`) -> (1, 27).
fn kube_version(v: &str) -> Option<(u64, u64)> {
    let plain = v.strip_prefix('v').unwrap_or(v);
    let parsed = semver::Version::parse(plain).ok()?;
    Some((parsed.major, parsed.minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(t: &str) -> Version {
        Version::from_tag(t).unwrap()
    }

    const GOOD: &str = "apiVersion: metadata.clusterstack.x-k8s.io/v1alpha1\nversions:\n  clusterStack: v2\n  kubernetes: v1.27.3\n  components:\n    clusterAddon: v0-sha.abc12\n    nodeImage: v1\n";

    #[test]
    fn valid_metadata_is_normalised() {
        let m = parse("metadata.yaml", GOOD, &tag("docker-ferrol-1-27-v2")).unwrap();
        assert_eq!(
            m,
            Metadata {
                cluster_stack: "v2".into(),
                kubernetes: "v1.27.3".into(),
                cluster_addon: "v0-sha.abc12".into(),
                node_image: Some("v1".into())
            }
        );
        let hashed = GOOD.replace("clusterStack: v2", "clusterStack: v0-sha-hipstsw");
        let m = parse("metadata.yaml", &hashed, &tag("docker-ferrol-1-27-v0-sha-hipstsw")).unwrap();
        assert_eq!(m.cluster_stack, "v0-sha.hipstsw");
    }

    #[test]
    fn errors_name_line_and_field() {
        let table: &[(&str, &str, &str)] = &[
            ("", "docker-ferrol-1-27-v2", "metadata.yaml:1:1: the file is empty"),
            ("versions: [1]\n", "docker-ferrol-1-27-v2", "metadata.yaml:1:1: versions: missing required mapping `versions`"),
            (
                "versions:\n  kubernetes: v1.27.3\n  components: {clusterAddon: v1}\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:2:3: versions.clusterStack: missing required field",
            ),
            (
                "versions:\n  clusterStack: v2\n  kubernetes: v1.27.3\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:2:3: versions.components.clusterAddon: missing required field",
            ),
            (
                "versions:\n  clusterStack: v3\n  kubernetes: v1.27.3\n  components: {clusterAddon: v1}\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:2:17: versions.clusterStack: `v3` (v3) does not match the release tag, which is version v2",
            ),
            (
                "versions:\n  clusterStack: v2\n  kubernetes: \"1.27\"\n  components: {clusterAddon: v1}\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:3:15: versions.kubernetes: `1.27` is not a Kubernetes version",
            ),
            (
                "versions:\n  clusterStack: v2\n  kubernetes: v1.28.1\n  components: {clusterAddon: v1}\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:3:15: versions.kubernetes: `v1.28.1` does not match the stack `docker-ferrol-1-27`",
            ),
            (
                "versions:\n  clusterStack: v2\n  kubernetes: v1.27.1\n  components: {clusterAddon: two}\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:4:30: versions.components.clusterAddon: `two` is not a version",
            ),
            (
                "apiVersion: v1\nversions:\n  clusterStack: v2\n  kubernetes: v1.27.1\n  components: {clusterAddon: v1}\n",
                "docker-ferrol-1-27-v2",
                "metadata.yaml:1:13: apiVersion: expected `metadata.clusterstack.x-k8s.io/v1alpha1`",
            ),
            ("versions: {\n", "docker-ferrol-1-27-v2", "metadata.yaml:2:1: invalid YAML: did not find expected node content"),
        ];
        for (text, t, want) in table {
            let errs = parse("metadata.yaml", text, &tag(t)).unwrap_err();
            assert!(errs[0].to_string().starts_with(want), "{text:?}\n got: {}\nwant: {want}", errs[0]);
        }
    }

    #[test]
    fn an_empty_required_field_is_reported_where_it_is_not_as_missing() {
        let text = "versions:\n  clusterStack: v2\n  kubernetes:\n  components: {clusterAddon: v1}\n";
        let errs = parse("metadata.yaml", text, &tag("docker-ferrol-1-27-v2")).unwrap_err();
        assert_eq!(errs[0].to_string(), "metadata.yaml:3:14: versions.kubernetes: the field is empty; expected a version string");
    }

    #[test]
    fn each_version_field_is_decided_on_its_own() {
        let two = ScsVersion::Number(2);
        let cases: [(&str, Result<&str, &str>); 4] = [
            ("v2", Ok("v2")),
            ("v3", Err("`v3` (v3) does not match the release tag, which is version v2")),
            ("2", Err("`2` is not a cluster-stack version; expected `v<N>` or `v0-sha.<hash>`")),
            ("v0-sha-abc", Err("`v0-sha-abc` (v0-sha.abc) does not match the release tag, which is version v2")),
        ];
        for (v, want) in cases {
            let said = cluster_stack_version(v, &two).map_err(|e| e.to_string());
            assert_eq!(said.as_deref().map_err(String::as_str), want, "clusterStack {v}");
        }
        let cases: [(&str, Result<&str, &str>); 4] = [
            ("v1.27.3", Ok("v1.27.3")),
            ("1.27.3", Ok("v1.27.3")),
            ("v1.28.0", Err("`v1.28.0` does not match the stack `docker-ferrol-1-27` (Kubernetes 1.27)")),
            ("1.27", Err("`1.27` is not a Kubernetes version; expected `v<major>.<minor>.<patch>` such as `v1.27.3`")),
        ];
        for (v, want) in cases {
            let said = kubernetes_version(v, "docker-ferrol-1-27").map_err(|e| e.to_string());
            assert_eq!(said.as_deref().map_err(String::as_str), want, "kubernetes {v}");
        }
        let cases: [(&str, Result<&str, &str>); 3] = [
            ("v1", Ok("v1")),
            ("v0-sha-abc", Ok("v0-sha.abc")),
            ("latest", Err("`latest` is not a version; expected `v<N>` or `v0-sha.<hash>`")),
        ];
        for (v, want) in cases {
            let said = component_version(v).map_err(|e| e.to_string());
            assert_eq!(said.as_deref().map_err(String::as_str), want, "component {v}");
        }
    }
}
