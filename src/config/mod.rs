//! The auto-subscribe config file: the first stage of the pipeline. Parsed into a position-aware
//! tree, validated into [`Config`] (every error with file, line, column and field path), diffed
//! against the running config on reload, and watched for edits.

mod diff;
mod validate;
pub mod watch;
pub mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use diff::diff;

use crate::release::version::Constraint;
use crate::schedule::Schedule;

/// The only `apiVersion` this build reads.
pub const API_VERSION: &str = "stacksync.io/v1alpha1";
pub const KIND: &str = "Config";

/// A validated config. Relative paths in the file are resolved against the file's directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub file: PathBuf,
    pub cache: CacheConfig,
    pub sources: Vec<SourceConfig>,
    pub subscriptions: Vec<Subscription>,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    pub dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    pub name: String,
    pub kind: SourceKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SourceKind {
    Git(GitSourceConfig),
}

#[derive(Debug, Clone, PartialEq)]
pub struct GitSourceConfig {
    /// `file://`, `git://`, `http://` or `https://`.
    pub url: String,
    /// Accept a tag that now points at another commit instead of refusing it.
    pub allow_moved_tags: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub name: String,
    pub source: String,
    /// For cluster-stack tags: `<provider>-<name>-<k8s major>-<k8s minor>`. Without it, plain
    /// semver tags are the releases.
    pub stack: Option<String>,
    pub version: String,
    pub constraint: Constraint,
    pub schedule: Schedule,
    pub auto_upgrade: bool,
    /// The directory of manifests inside the release tree.
    pub path: String,
    pub clusters: Vec<ClusterConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    pub name: String,
    pub namespace: String,
    /// Substitution variables: subscription values overlaid with the cluster's own; nested
    /// mappings are flattened with dots (`network.podCidr`).
    pub values: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Directory(PathBuf),
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    /// Dotted field path such as `subscriptions[0].clusters[1].name`; empty for the document.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.col)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a config file, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl Config {
    /// Reads and validates a config file.
    ///
    /// # Errors
    /// Every problem found, each naming the file, line, column and field; an unreadable file is
    /// one error at line 1.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: path.to_owned(),
                line: 1,
                col: 1,
                field: String::new(),
                message: format!("cannot read config file: {e}"),
            }])
        })?;
        Self::parse(path, &text)
    }

    /// Validates config text as if read from `path`.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigErrors> {
        validate::validate(path, text)
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    pub fn subscription(&self, name: &str) -> Option<&Subscription> {
        self.subscriptions.iter().find(|s| s.name == name)
    }
}
