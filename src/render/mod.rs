//! Render: turns a release into the objects one cluster gets. A manifest directory is rendered
//! natively with `${var}` substitution from the cluster's values (files read once per release,
//! rendering a pure function of the file texts and the variables); a SovereignCloudStack
//! cluster-stack release is rendered with the real helm ([`clusterstack`]).

pub mod cel;
pub mod clusterstack;
pub mod gotemplate;
pub mod helm;
pub mod subst;
pub mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;

use crate::model::cluster::ClusterConfig;
use crate::kubeyaml;
use crate::release::Release;

/// The largest manifest file read; a release is configuration, not a data set.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("release has no manifest directory `{path}`")]
    MissingDir { path: String },
    #[error("{file}: {message}")]
    ReadFile { file: String, message: String },
    #[error("{file}:{line}:{col}: {message}")]
    Substitute { file: String, line: usize, col: usize, message: String },
    #[error("{file}:{line}: {message}")]
    Parse { file: String, line: usize, message: String },
    #[error("{file}:{line}: {message}")]
    Object { file: String, line: usize, message: String },
    /// The cluster-stack release itself is malformed (metadata, layout, charts).
    #[error("{file}: {message}")]
    Release { file: String, message: String },
    /// A values template (`cluster-addon-values.yaml`, `overwrite.yaml`) failed.
    #[error("{0}")]
    Template(#[from] gotemplate::Error),
    #[error("{chart}: {source}")]
    Helm { chart: String, source: helm::Error },
}

impl Error {
    pub fn kind(&self) -> &'static str {
        match self {
            Error::MissingDir { .. } => "missing_dir",
            Error::ReadFile { .. } => "read_file",
            Error::Substitute { .. } => "substitute",
            Error::Parse { .. } => "parse",
            Error::Object { .. } => "object",
            Error::Release { .. } => "release",
            Error::Template(_) => "template",
            Error::Helm { source, .. } => source.kind(),
        }
    }
}

/// Every error of one render, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Errors(pub Vec<Error>);

impl fmt::Display for Errors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 5;
        for (i, e) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        if self.0.len() > SHOWN {
            write!(f, "; and {} more", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}

/// The rendered object lives in the shared vocabulary; `render::Object` stays its name here.
pub use crate::model::Object;

/// (group, kind, namespace, name): what makes an object unique in a cluster.
type ObjectKey<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

/// A release's manifest files, read once and rendered for each cluster.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    /// Release-relative path -> text, in path order.
    files: BTreeMap<String, String>,
}

impl Manifests {
    /// Reads every `*.yaml` / `*.yml` file under `tree/dir`, recursively.
    ///
    /// # Errors
    /// The directory is missing, a file is unreadable, too large, or not UTF-8.
    pub fn load(tree: &Path, dir: &str) -> Result<Manifests, Errors> {
        let root = tree.join(dir);
        if !root.is_dir() {
            return Err(Errors(vec![Error::MissingDir { path: dir.to_owned() }]));
        }
        let mut files = BTreeMap::new();
        let mut errors = Vec::new();
        collect(&root, dir, &mut files, &mut errors);
        if errors.is_empty() { Ok(Manifests { files }) } else { Err(Errors(errors)) }
    }

    /// Builds a set from in-memory files (tests, `--cluster` previews).
    pub fn from_files(files: impl IntoIterator<Item = (String, String)>) -> Manifests {
        Manifests { files: files.into_iter().collect() }
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Renders the objects `cluster` gets from `release`.
    ///
    /// # Errors
    /// Every substitution, YAML and object error found (all files are checked).
    pub fn render(&self, release: &Release, cluster: &ClusterConfig) -> Result<Vec<Object>, Errors> {
        let vars = variables(release, cluster);
        let mut objects = Vec::new();
        let mut errors = Vec::new();
        for (file, text) in &self.files {
            let text = match subst::substitute(text, &vars) {
                Ok(t) => t,
                Err(errs) => {
                    errors.extend(errs.into_iter().map(|e| Error::Substitute {
                        file: file.clone(),
                        line: e.line,
                        col: e.col,
                        message: e.message,
                    }));
                    continue;
                }
            };
            let docs = match kubeyaml::split(&text) {
                Ok(d) => d,
                Err(e) => {
                    errors.push(Error::Parse { file: file.clone(), line: e.mark.line, message: e.message });
                    continue;
                }
            };
            for (line, doc) in docs {
                match parse_object(file, None, line, doc) {
                    Ok(Some(o)) => objects.push(o),
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
        }
        // (group, kind, namespace, name) -> where it was first defined.
        let mut seen: BTreeMap<ObjectKey<'_>, (&str, usize)> = BTreeMap::new();
        for o in &objects {
            let key = (o.group(), o.kind.as_str(), o.namespace.as_deref(), o.name.as_str());
            if let Some((file, line)) = seen.insert(key, (&o.file, o.line)) {
                errors.push(Error::Object {
                    file: o.file.clone(),
                    line: o.line,
                    message: format!("{o} is defined twice (also at {file}:{line})"),
                });
            }
        }
        if errors.is_empty() { Ok(objects) } else { Err(Errors(errors)) }
    }
}

/// The substitution variables for one cluster: user values plus the built-ins.
pub fn variables(release: &Release, cluster: &ClusterConfig) -> BTreeMap<String, String> {
    let mut vars = cluster.values.clone();
    vars.insert("cluster.name".into(), cluster.name.clone());
    vars.insert("cluster.namespace".into(), cluster.namespace.clone());
    vars.insert("release.tag".into(), release.tag.clone());
    vars.insert("release.version".into(), release.version.to_string());
    vars.insert("release.commit".into(), release.commit.clone());
    vars
}

fn collect(dir: &Path, rel: &str, files: &mut BTreeMap<String, String>, errors: &mut Vec<Error>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(Error::ReadFile { file: rel.to_owned(), message: e.to_string() });
            return;
        }
    };
    for entry in entries {
        // An entry that cannot be read (a path past PATH_MAX, an I/O error) is an error, never
        // a file silently left out of the release.
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                errors.push(Error::ReadFile { file: rel.to_owned(), message: e.to_string() });
                continue;
            }
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel_path = format!("{rel}/{name}");
        let meta = match std::fs::symlink_metadata(entry.path()) {
            Ok(m) => m,
            Err(e) => {
                errors.push(Error::ReadFile { file: rel_path, message: e.to_string() });
                continue;
            }
        };
        if meta.is_dir() {
            collect(&entry.path(), &rel_path, files, errors);
        } else if meta.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml")) {
            if meta.len() > MAX_FILE_BYTES {
                errors.push(Error::ReadFile { file: rel_path, message: format!("file is larger than {MAX_FILE_BYTES} bytes") });
                continue;
            }
            match std::fs::read_to_string(entry.path()) {
                Ok(text) => {
                    files.insert(rel_path, text);
                }
                Err(e) => errors.push(Error::ReadFile { file: rel_path, message: e.to_string() }),
            }
        }
    }
}

/// Reads one document of a manifest text (`doc`, starting at `line` of `file`) as kubectl reads
/// it ([`crate::kubeyaml`]). Empty, comment-only and `null` documents are `None`. A repeated
/// mapping key is logged with the chart, template and line (kubectl keeps its last value).
pub(crate) fn parse_object(file: &str, chart: Option<&str>, line: usize, doc: &str) -> Result<Option<Object>, Error> {
    let parse_err = |e: kubeyaml::SyntaxError| Error::Parse {
        file: file.to_owned(),
        line: e.mark.line,
        message: if e.mark.col > 1 {
            format!("column {}: invalid YAML: {}", e.mark.col, e.message)
        } else {
            format!("invalid YAML: {}", e.message)
        },
    };
    let parsed = kubeyaml::parse_document(doc, line).map_err(parse_err)?;
    for w in &parsed.warnings {
        tracing::warn!(chart = chart.unwrap_or_default(), template = file, line = w.line, "{}", w.message);
    }
    let value = match &parsed.root {
        None => Value::Null,
        Some(root) => root.to_json().map_err(parse_err)?,
    };
    let obj_err = |message: String| Error::Object { file: file.to_owned(), line, message };
    let map = match value {
        Value::Null => return Ok(None),
        Value::Object(m) => m,
        other => return Err(obj_err(format!("expected a Kubernetes object (a mapping), found {}", json_type(&other)))),
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let api_version = text("apiVersion").ok_or_else(|| obj_err("object has no `apiVersion`".into()))?;
    let kind = text("kind").ok_or_else(|| obj_err("object has no `kind`".into()))?;
    let meta = map.get("metadata").and_then(Value::as_object);
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| obj_err(format!("{kind} has no `metadata.name`")))?
        .to_owned();
    let namespace = meta.and_then(|m| m.get("namespace")).and_then(Value::as_str).map(str::to_owned);
    Ok(Some(Object { api_version, kind, namespace, name, file: file.to_owned(), line, body: Value::Object(map), chart: None, stage: None }))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::version::Version;

    fn release() -> Release {
        Release { source: "s".into(), tag: "v1.0.0".into(), commit: "abc".into(), version: Version::from_tag("v1.0.0").unwrap() }
    }

    fn cluster() -> ClusterConfig {
        ClusterConfig {
            name: "alpha".into(),
            namespace: "team-a".into(),
            values: [("region".to_owned(), "eu-1".to_owned())].into(),
            objects: Default::default(),
        }
    }

    #[test]
    fn renders_documents_with_values() {
        let m = Manifests::from_files([(
            "manifests/a.yaml".to_owned(),
            "# leading comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${cluster.name}-cfg\ndata:\n  region: ${region}\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: x}\n".to_owned(),
        )]);
        let objs = m.render(&release(), &cluster()).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].name, "alpha-cfg");
        assert_eq!(objs[0].body["data"]["region"], "eu-1");
        assert_eq!((objs[1].line, objs[1].group()), (10, "apps"));
    }

    #[test]
    fn errors_name_file_and_line() {
        let m = Manifests::from_files([
            ("m/a.yaml".to_owned(), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${nope}\n".to_owned()),
            ("m/b.yaml".to_owned(), "apiVersion: v1\nkind: ConfigMap\n---\nkind: X\nmetadata: {name: y}\n".to_owned()),
            ("m/c.yaml".to_owned(), "a: [1\n".to_owned()),
        ]);
        let errs = m.render(&release(), &cluster()).unwrap_err();
        let text: Vec<String> = errs.0.iter().map(ToString::to_string).collect();
        assert!(text[0].starts_with("m/a.yaml:4:9: unknown variable `nope`"), "{}", text[0]);
        assert_eq!(text[1], "m/b.yaml:1: ConfigMap has no `metadata.name`");
        assert_eq!(text[2], "m/b.yaml:4: object has no `apiVersion`");
        assert!(text[3].starts_with("m/c.yaml:"), "{}", text[3]);
    }

    #[test]
    fn duplicate_objects_are_an_error() {
        let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
        let m = Manifests::from_files([("m/a.yaml".to_owned(), doc.to_owned()), ("m/b.yaml".to_owned(), doc.to_owned())]);
        let errs = m.render(&release(), &cluster()).unwrap_err();
        assert!(errs.to_string().contains("defined twice (also at m/a.yaml:1)"), "{errs}");
    }
}
