//! Render: turns a release into the objects one cluster gets. A manifest directory is rendered
//! natively with `${var}` substitution from the cluster's values (files read once per release,
//! rendering a pure function of the file texts and the variables); a SovereignCloudStack
//! cluster-stack release is rendered with the real helm ([`clusterstack`]).

pub mod cel;
pub mod clusterstack;
pub mod helm;
pub mod labels;
pub mod renderer;
pub mod subst;
mod template;
pub mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::model::Object;
use crate::model::cluster::ClusterConfig;
use crate::model::sync::MutexExt;
use crate::release::Release;
use template::FileTemplate;

/// The largest manifest file read; a release is configuration, not a data set.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// What went wrong rendering a release for a cluster: each names the release-relative file (and
/// line) or chart it concerns. Cheap to clone (I/O causes are shared), so a memoised failure can
/// be handed to every cluster it concerns.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("release has no manifest directory `{path}`")]
    MissingDir { path: String },
    /// A file of the release could not be read (missing, unreadable, too large, not UTF-8).
    #[error("{file}: {source}")]
    ReadFile {
        file: String,
        #[source]
        source: ReadError,
    },
    #[error("{file}:{}:{}: {}", .source.line, .source.col, .source.message)]
    Substitute {
        file: String,
        #[source]
        source: subst::SubstError,
    },
    /// The text does not split into documents (a bad `---` line).
    #[error("{file}:{}: {}", .source.mark.line, .source.message)]
    Split {
        file: String,
        #[source]
        source: kubeyaml::SyntaxError,
    },
    /// A document is not YAML kubectl reads.
    #[error("{file}:{}: {}invalid YAML: {}", .source.mark.line, column(.source), .source.message)]
    Yaml {
        file: String,
        #[source]
        source: kubeyaml::SyntaxError,
    },
    /// A document is YAML but not a Kubernetes object, or an object is defined twice.
    #[error("{file}:{line}: {problem}")]
    Object { file: String, line: usize, problem: ObjectProblem },
    /// The cluster-stack release itself is malformed (layout, charts), as a message; the
    /// specific problems have their own variants.
    #[error("{file}: {message}")]
    Release { file: String, message: String },
    /// `metadata.yaml` is invalid or does not match the tag.
    #[error("{0}")]
    Metadata(crate::release::metadata::MetadataError),
    /// The tag does not name a cluster-stack release.
    #[error("{file}: tag {tag} is not a cluster-stack tag")]
    NotClusterStackTag { file: String, tag: String },
    /// The ClusterClass or cluster-addon chart is not in the release.
    #[error("{file}: no {what} chart: expected `{name}.tgz` or a directory `{name}/`")]
    MissingChart { file: String, what: &'static str, name: String },
    /// `clusteraddon.yaml` is invalid.
    #[error("{file}: {source}")]
    AddonConfig {
        file: String,
        #[source]
        source: Box<clusterstack::AddonConfigError>,
    },
    /// A stage listed in `clusteraddon.yaml` has no chart in the addon package.
    #[error("{file}: stage `{stage}` of {} has no chart (no `{stage}/Chart.yaml`)", clusterstack::ADDON_CONFIG)]
    StageChartMissing { file: String, stage: String },
    /// A stage was asked for that the release does not have.
    #[error("{}: stage `{stage}` has no chart", clusterstack::ADDON_CONFIG)]
    UnknownStage { stage: String },
    /// A stage was asked for of a single-chart addon.
    #[error("{}: stage `{stage}`: the addon has no stages", clusterstack::ADDON_CONFIG)]
    NoStages { stage: String },
    /// The addon archive holds something stacksync refuses, or cannot be opened.
    #[error("{file}: {source}")]
    Archive {
        file: String,
        #[source]
        source: clusterstack::ArchiveError,
    },
    #[error("{file}: cannot unpack: {source}")]
    Unpack {
        file: String,
        #[source]
        source: Arc<crate::cache::unpack::UnpackError>,
    },
    /// A directory of the work directory could not be created.
    #[error("{file}: cannot create {}: {source}", .path.display())]
    CreateDir {
        file: String,
        path: std::path::PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A cluster's values file could not be written for helm.
    #[error("{}: cannot write values: {source}", .path.display())]
    WriteValues {
        path: std::path::PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A values template (`cluster-addon-values.yaml`, `overwrite.yaml`) failed.
    #[error("{0}")]
    Template(#[from] gotemplate::Error),
    /// With `templates.strict`, a values template printed `<no value>` or `<nil>`.
    #[error("{}: `{}` would print {} (missing or nil in cluster {cluster}); `templates.strict` is set", at(&.warning.file, .warning.line), .warning.path, .warning.printed)]
    StrictTemplate { warning: gotemplate::Warning, cluster: String },
    /// A values template's output is not YAML.
    #[error("{file}: {what} is not valid YAML (its line {}: `{text}`): {}", .source.mark.line, .source.message)]
    ValuesNotYaml {
        file: String,
        /// `the rendered template` or `the rendered \`values\``.
        what: &'static str,
        /// The output line the parser stopped at, trimmed.
        text: String,
        #[source]
        source: kubeyaml::SyntaxError,
    },
    #[error("{file}: the rendered values are not a YAML mapping: {excerpt}")]
    ValuesNotMapping { file: String, excerpt: String },
    #[error("{chart}: {source}")]
    Helm {
        chart: String,
        #[source]
        source: helm::Error,
    },
}

impl Error {
    /// Whether trying again soon, with nothing changed by anyone, may succeed: I/O on the cache
    /// or work volume, a helm that timed out, could not be started or was killed. A malformed
    /// release, a template error, a bad manifest are permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::ReadFile { source, .. } => source.is_transient(),
            Error::Archive { source, .. } => source.is_transient(),
            Error::CreateDir { .. } | Error::WriteValues { .. } => true,
            Error::Helm { source, .. } => source.is_transient(),
            Error::MissingDir { .. }
            | Error::Substitute { .. }
            | Error::Split { .. }
            | Error::Yaml { .. }
            | Error::Object { .. }
            | Error::Release { .. }
            | Error::Metadata(_)
            | Error::NotClusterStackTag { .. }
            | Error::MissingChart { .. }
            | Error::AddonConfig { .. }
            | Error::StageChartMissing { .. }
            | Error::UnknownStage { .. }
            | Error::NoStages { .. }
            | Error::Unpack { .. }
            | Error::Template(_)
            | Error::StrictTemplate { .. }
            | Error::ValuesNotYaml { .. }
            | Error::ValuesNotMapping { .. } => false,
        }
    }

    /// A short stable CamelCase name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::MissingDir { .. } => "ManifestDirMissing",
            Error::ReadFile { .. } => "ReadFailed",
            Error::Substitute { .. } => "SubstitutionFailed",
            Error::Split { .. } | Error::Yaml { .. } => "InvalidYaml",
            Error::Object { .. } => "InvalidObject",
            Error::Release { .. } | Error::NotClusterStackTag { .. } | Error::MissingChart { .. } | Error::StageChartMissing { .. } => {
                "InvalidRelease"
            }
            Error::UnknownStage { .. } | Error::NoStages { .. } => "UnknownStage",
            Error::Metadata(_) => "InvalidMetadata",
            Error::AddonConfig { .. } => "InvalidAddonConfig",
            Error::Archive { .. } => "InvalidArchive",
            Error::Unpack { .. } => "UnpackFailed",
            Error::CreateDir { .. } | Error::WriteValues { .. } => "WorkDirUnavailable",
            Error::Template(_) => "TemplateFailed",
            Error::StrictTemplate { .. } => "TemplateStrict",
            Error::ValuesNotYaml { .. } | Error::ValuesNotMapping { .. } => "InvalidValues",
            Error::Helm { source, .. } => source.reason(),
        }
    }
}

/// Why a file of a release could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    #[error("file is missing")]
    Missing,
    #[error("file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Io(#[source] Arc<std::io::Error>),
}

impl ReadError {
    pub fn io(e: std::io::Error) -> ReadError {
        ReadError::Io(Arc::new(e))
    }

    /// I/O on the cache volume may pass; a file that is missing, too large or not UTF-8 is the
    /// release's, and stays so.
    pub fn is_transient(&self) -> bool {
        match self {
            ReadError::Missing | ReadError::TooLarge { .. } => false,
            ReadError::Io(e) => !matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData),
        }
    }
}

/// Why a document is not a Kubernetes object stacksync can apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectProblem {
    #[error("expected a Kubernetes object (a mapping), found {found}")]
    NotAMapping { found: &'static str },
    #[error("object has no `apiVersion`")]
    NoApiVersion,
    #[error("object has no `kind`")]
    NoKind,
    #[error("{kind} has no `metadata.name`")]
    NoName { kind: String },
    /// `also` is where it was first defined: `at <file>:<line>` or `in <template>`.
    #[error("{object} is defined twice (also {also})")]
    DefinedTwice { object: String, also: String },
}

/// `column N: ` when the parser names a column past the first.
fn column(e: &kubeyaml::SyntaxError) -> String {
    if e.mark.col > 1 { format!("column {}: ", e.mark.col) } else { String::new() }
}

/// `file:line`, or `file` when no line applies (as [`gotemplate::Error`] shows it).
fn at(file: &str, line: usize) -> String {
    if line > 0 { format!("{file}:{line}") } else { file.to_owned() }
}

/// Every error of one render, in file order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct Errors(pub Vec<Error>);

impl Errors {
    /// Transient when any of them is: trying again may then give a different answer.
    pub fn is_transient(&self) -> bool {
        self.0.iter().any(Error::is_transient)
    }

    /// The first error's reason (`RenderFailed` when there is none).
    pub fn reason(&self) -> &'static str {
        self.0.first().map_or("RenderFailed", Error::reason)
    }
}

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

/// (group, kind, namespace, name): what makes an object unique in a cluster.
type ObjectKey<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

/// A release's manifest files, read once and rendered for each cluster.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    /// Release-relative path -> text, in path order.
    files: BTreeMap<String, String>,
    /// Each file parsed once with tokens for its variables ([`template`]), built by the first
    /// render that needs it, for the last few sets of variable names (Clusters with values of
    /// their own have other names); clones share them.
    templates: Arc<Mutex<BTreeMap<String, Vec<Arc<FileTemplate>>>>>,
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
        if errors.is_empty() { Ok(Manifests { files, ..Manifests::default() }) } else { Err(Errors(errors)) }
    }

    /// Builds a set from in-memory files (tests, `--cluster` previews).
    pub fn from_files(files: impl IntoIterator<Item = (String, String)>) -> Manifests {
        Manifests { files: files.into_iter().collect(), ..Manifests::default() }
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Renders the objects `cluster` gets from `release`.
    ///
    /// # Errors
    /// Every substitution, YAML and object error found (all files are checked).
    pub fn render(&self, release: &Release, cluster: &ClusterConfig) -> Result<Vec<Object>, Errors> {
        let version = release.version.to_string();
        let vars = variables(release, cluster, &version);
        let names: Vec<&str> = vars.keys().copied().collect();
        let mut objects = Vec::new();
        let mut errors = Vec::new();
        for (file, text) in &self.files {
            // Parsed once per release; the text path below when that does not apply.
            if let Some(docs) = self.template(file, text, &names).fill(&vars) {
                for (line, value) in docs {
                    match object_from_json(file, line, value) {
                        Ok(Some(o)) => objects.push(o),
                        Ok(None) => {}
                        Err(e) => errors.push(e),
                    }
                }
                continue;
            }
            let text = match subst::substitute(text, &vars) {
                Ok(t) => t,
                Err(errs) => {
                    errors.extend(errs.into_iter().map(|source| Error::Substitute { file: file.clone(), source }));
                    continue;
                }
            };
            let docs = match kubeyaml::split(&text) {
                Ok(d) => d,
                Err(e) => {
                    errors.push(Error::Split { file: file.clone(), source: e });
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
                    problem: ObjectProblem::DefinedTwice { object: o.to_string(), also: format!("at {file}:{line}") },
                });
            }
        }
        if errors.is_empty() { Ok(objects) } else { Err(Errors(errors)) }
    }
}

/// Sets of variable names a file's template is kept for ([`Manifests::template`]).
const NAME_SETS: usize = 4;

impl Manifests {
    /// `file`'s template for these variable names, built on first use.
    fn template(&self, file: &str, text: &str, names: &[&str]) -> Arc<FileTemplate> {
        let mut templates = self.templates.locked();
        if let Some(t) = templates.get(file).and_then(|kept| kept.iter().find(|t| t.fits(names))) {
            return t.clone();
        }
        let t = Arc::new(FileTemplate::build(text, names));
        let kept = templates.entry(file.to_owned()).or_default();
        kept.insert(0, t.clone());
        kept.truncate(NAME_SETS);
        t
    }
}

/// The substitution variables for one cluster: user values plus the built-ins (`version`: the
/// release's version as text), borrowed from the Cluster and the release.
pub fn variables<'a>(release: &'a Release, cluster: &'a ClusterConfig, version: &'a str) -> subst::Variables<'a> {
    let mut vars: subst::Variables<'a> = cluster.values.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    vars.insert("cluster.name", &cluster.name);
    vars.insert("cluster.namespace", &cluster.namespace);
    vars.insert("release.tag", &release.tag);
    vars.insert("release.version", version);
    vars.insert("release.commit", &release.commit);
    vars
}

fn collect(dir: &Path, rel: &str, files: &mut BTreeMap<String, String>, errors: &mut Vec<Error>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(Error::ReadFile { file: rel.to_owned(), source: ReadError::io(e) });
            return;
        }
    };
    for entry in entries {
        // An entry that cannot be read (a path past PATH_MAX, an I/O error) is an error, never
        // a file silently left out of the release.
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                errors.push(Error::ReadFile { file: rel.to_owned(), source: ReadError::io(e) });
                continue;
            }
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel_path = format!("{rel}/{name}");
        let meta = match std::fs::symlink_metadata(entry.path()) {
            Ok(m) => m,
            Err(e) => {
                errors.push(Error::ReadFile { file: rel_path, source: ReadError::io(e) });
                continue;
            }
        };
        if meta.is_dir() {
            collect(&entry.path(), &rel_path, files, errors);
        } else if meta.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml")) {
            if meta.len() > MAX_FILE_BYTES {
                errors.push(Error::ReadFile { file: rel_path, source: ReadError::TooLarge { limit: MAX_FILE_BYTES } });
                continue;
            }
            match std::fs::read_to_string(entry.path()) {
                Ok(text) => {
                    files.insert(rel_path, text);
                }
                Err(e) => errors.push(Error::ReadFile { file: rel_path, source: ReadError::io(e) }),
            }
        }
    }
}

/// Reads one document of a manifest text (`doc`, starting at `line` of `file`) as kubectl reads
/// it ([`kubeyaml`]). Empty, comment-only and `null` documents are `None`. A repeated
/// mapping key is logged with the chart, template and line (kubectl keeps its last value).
pub(crate) fn parse_object(file: &str, chart: Option<&str>, line: usize, doc: &str) -> Result<Option<Object>, Error> {
    let parse_err = |source: kubeyaml::SyntaxError| Error::Yaml { file: file.to_owned(), source };
    let parsed = kubeyaml::parse_document(doc, line).map_err(parse_err)?;
    for w in &parsed.warnings {
        tracing::warn!(chart = chart.unwrap_or_default(), template = file, line = w.line, "{}", w.message);
    }
    let value = match &parsed.root {
        None => Value::Null,
        Some(root) => root.to_json().map_err(parse_err)?,
    };
    object_from_json(file, line, value)
}

/// The object a document's JSON describes (`None` for a `null` document).
fn object_from_json(file: &str, line: usize, value: Value) -> Result<Option<Object>, Error> {
    let obj_err = |problem: ObjectProblem| Error::Object { file: file.to_owned(), line, problem };
    let map = match value {
        Value::Null => return Ok(None),
        Value::Object(m) => m,
        other => return Err(obj_err(ObjectProblem::NotAMapping { found: json_type(&other) })),
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let api_version = text("apiVersion").ok_or_else(|| obj_err(ObjectProblem::NoApiVersion))?;
    let kind = text("kind").ok_or_else(|| obj_err(ObjectProblem::NoKind))?;
    let meta = map.get("metadata").and_then(Value::as_object);
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| obj_err(ObjectProblem::NoName { kind: kind.clone() }))?
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
    use crate::model::version::Version;

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

    /// Clusters with values of their own (other variable names) each get their template, kept
    /// side by side, and the objects the text gives.
    #[test]
    fn clusters_with_other_variable_names_render_alike_from_their_templates() {
        let m = Manifests::from_files([(
            "m/a.yaml".to_owned(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${cluster.name}\ndata:\n  count: ${replicas:-1}\n".to_owned(),
        )]);
        let mut other = cluster();
        other.name = "beta".into();
        other.values.insert("replicas".into(), "3".into());
        let mut spaced = cluster();
        spaced.name = "gamma".into();
        spaced.values.insert("replicas".into(), "not a number".into());
        for _ in 0..2 {
            for (c, want) in
                [(&cluster(), serde_json::json!(1)), (&other, serde_json::json!(3)), (&spaced, serde_json::json!("not a number"))]
            {
                let objs = m.render(&release(), c).unwrap();
                assert_eq!((objs[0].name.as_str(), &objs[0].body["data"]["count"]), (c.name.as_str(), &want));
            }
        }
        assert_eq!(m.templates.lock().unwrap()["m/a.yaml"].len(), 2, "one template per set of names");
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
    fn manifest_and_template_errors_are_permanent_io_and_helm_runs_may_pass() {
        let m = Manifests::from_files([
            ("m/a.yaml".to_owned(), "a: [1\n".to_owned()),
            ("m/b.yaml".to_owned(), "apiVersion: v1\nkind: X\n".to_owned()),
        ]);
        let errs = m.render(&release(), &cluster()).unwrap_err();
        let reasons: Vec<&str> = errs.0.iter().map(Error::reason).collect();
        assert_eq!((reasons.as_slice(), errs.is_transient()), (["InvalidYaml", "InvalidObject"].as_slice(), false));
        // The parser's error is the source, not only a copy of its text.
        let source = std::error::Error::source(&errs.0[0]).map(ToString::to_string);
        assert!(source.as_deref().is_some_and(|s| s.contains("did not find expected")), "{source:?}");

        let read = |e: std::io::Error| Error::ReadFile { file: "m/a.yaml".into(), source: ReadError::io(e) };
        assert!(read(std::io::Error::other("input/output error")).is_transient(), "I/O on the cache volume may pass");
        assert!(!read(std::io::ErrorKind::InvalidData.into()).is_transient(), "a file that is not UTF-8 stays so");
        let too_large = Error::ReadFile { file: "m/a.yaml".into(), source: ReadError::TooLarge { limit: MAX_FILE_BYTES } };
        assert_eq!(
            (too_large.is_transient(), too_large.to_string()),
            (false, format!("m/a.yaml: file is larger than {MAX_FILE_BYTES} bytes"))
        );

        let template = Error::Template(gotemplate::Error { file: "v.yaml".into(), line: 3, message: "boom".into() });
        assert_eq!(
            (template.is_transient(), template.reason(), template.to_string().as_str()),
            (false, "TemplateFailed", "v.yaml:3: boom")
        );
        let helm = |source| Error::Helm { chart: "c-v1.tgz".into(), source };
        let timeout = helm(helm::Error::Timeout { chart: "c-v1.tgz".into(), seconds: 5 });
        assert_eq!((timeout.is_transient(), timeout.reason()), (true, "HelmTimeout"));
        let missing = helm(helm::Error::NotFound(helm::Missing::NotOnPath));
        assert_eq!((missing.is_transient(), missing.reason()), (false, "HelmNotFound"));
        assert!(Errors(vec![template, timeout]).is_transient(), "one error that may pass makes the render worth retrying");
    }

    #[test]
    fn duplicate_objects_are_an_error() {
        let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
        let m = Manifests::from_files([("m/a.yaml".to_owned(), doc.to_owned()), ("m/b.yaml".to_owned(), doc.to_owned())]);
        let errs = m.render(&release(), &cluster()).unwrap_err();
        assert!(errs.to_string().contains("defined twice (also at m/a.yaml:1)"), "{errs}");
    }
}
