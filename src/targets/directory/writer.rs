//! The directory target: `<root>/<namespace>/<cluster>/<NN>-<kind>-<name>.yaml` per object and
//! `<root>/status/<namespace>/<cluster>.yaml`. Every file is written atomically and only when its
//! bytes change; files of objects a release dropped are removed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::cache::write_atomic;
use crate::model::Object;
use crate::model::cluster::{CLUSTER_CLASS_DIR, ClusterConfig, STATUS_DIR};
use applier::changeset::{Action, ChangeSet, Entry, ObjectRef};
use applier::order;

#[derive(Debug, Clone)]
pub struct DirectoryTarget {
    root: PathBuf,
}

impl DirectoryTarget {
    pub fn new(root: &Path) -> DirectoryTarget {
        DirectoryTarget { root: root.to_path_buf() }
    }

    pub fn cluster_dir(&self, cluster: &ClusterConfig) -> PathBuf {
        self.root.join(&cluster.namespace).join(&cluster.name)
    }

    /// Where the cluster's status file is; `status.rs` reads and writes it (`read_status`,
    /// `write_status`).
    pub fn status_path(&self, cluster: &ClusterConfig) -> PathBuf {
        self.root.join(STATUS_DIR).join(&cluster.namespace).join(format!("{}.yaml", cluster.name))
    }

    /// `<root>/<namespace>/cluster-class`: the ClusterClass objects of a namespace.
    pub fn class_dir(&self, namespace: &str) -> PathBuf {
        self.root.join(namespace).join(CLUSTER_CLASS_DIR)
    }

    /// Puts `objects` in the cluster's directory, in apply order, and removes every other
    /// manifest file there. One failed file never stops the others; each gets its entry.
    pub fn sync(&self, cluster: &ClusterConfig, objects: Vec<Object>) -> ChangeSet {
        self.sync_dir(&self.cluster_dir(cluster), objects)
    }

    /// As [`DirectoryTarget::sync`], for any directory under the root (a cluster's stage
    /// directory, a namespace's `cluster-class`). Idempotent: a second call with the same objects
    /// writes nothing.
    pub fn sync_dir(&self, dir: &Path, mut objects: Vec<Object>) -> ChangeSet {
        order::sort(&mut objects);
        let dir = dir.to_path_buf();
        let mut changes = ChangeSet::default();
        if let Err(error) = ensure_dir(&dir) {
            let message = error.to_string();
            changes.entries = objects.iter().map(|o| Entry::for_object(o, Action::Failed, message.clone())).collect();
            return changes;
        }
        let width = objects.len().to_string().len().max(2);
        let mut wanted = BTreeSet::new();
        for (i, o) in objects.iter().enumerate() {
            let name = format!("{:0width$}-{}-{}.yaml", i + 1, sanitize(&o.kind.to_lowercase()), sanitize(&o.name));
            let path = dir.join(&name);
            wanted.insert(name);
            let existed = path.exists();
            let written = manifest_text(o).and_then(|t| write_atomic(&path, t.as_bytes()).map_err(FileError::Write));
            let (action, message) = match written {
                Ok(false) => (Action::Unchanged, String::new()),
                Ok(true) if existed => (Action::Configured, String::new()),
                Ok(true) => (Action::Created, String::new()),
                Err(e) => (Action::Failed, e.to_string()),
            };
            changes.entries.push(Entry::for_object(o, action, message));
        }
        self.prune(&dir, &wanted, &mut changes);
        changes
    }

    fn prune(&self, dir: &Path, wanted: &BTreeSet<String>, changes: &mut ChangeSet) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut stale: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                // Our manifests, and temp files a crash may have left behind.
                (name.ends_with(".yaml") && !wanted.contains(&name)) || (name.starts_with('.') && name.contains(".tmp-"))
            })
            .collect();
        // Reverse apply order: dependents go before what they depend on.
        stale.sort();
        stale.reverse();
        for path in stale {
            let object = object_ref_of(&path);
            match std::fs::remove_file(&path) {
                Ok(()) => changes.entries.push(Entry {
                    object,
                    action: Action::Pruned,
                    message: String::new(),
                    file: String::new(),
                    chart: None,
                    stage: None,
                }),
                Err(e) => changes.entries.push(Entry {
                    object,
                    action: Action::Failed,
                    message: format!("cannot remove {}: {e}", path.display()),
                    file: String::new(),
                    chart: None,
                    stage: None,
                }),
            }
        }
    }
}

impl DirectoryTarget {
    /// Removes the subdirectories of `dir` not named in `keep` (stages a release dropped), with a
    /// Pruned entry per manifest. A subdirectory holding anything but files is left alone: it
    /// is not ours.
    pub fn prune_subdirs(&self, dir: &Path, keep: &BTreeSet<String>) -> ChangeSet {
        let mut changes = ChangeSet::default();
        let Ok(entries) = std::fs::read_dir(dir) else { return changes };
        let mut stale: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|e| !keep.contains(&e.file_name().to_string_lossy().into_owned()))
            .map(|e| e.path())
            .collect();
        stale.sort();
        for sub in stale {
            let only_files =
                std::fs::read_dir(&sub).map(|es| es.flatten().all(|e| e.file_type().is_ok_and(|t| t.is_file()))).unwrap_or(false);
            if !only_files {
                continue;
            }
            self.prune(&sub, &BTreeSet::new(), &mut changes);
            if let Err(e) = std::fs::remove_dir(&sub) {
                tracing::warn!(dir = %sub.display(), error = %e, "cannot remove a stage directory");
            }
        }
        changes
    }
}

/// Why an object's file could not be written (its entry says it, Failed).
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("cannot create {}: {source}", dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serialising {object}: {why}")]
    Serialise { object: String, why: String },
    #[error("{0}")]
    Write(#[source] crate::cache::Error),
}

fn ensure_dir(dir: &Path) -> Result<(), FileError> {
    std::fs::create_dir_all(dir).map_err(|source| FileError::CreateDir { dir: dir.to_owned(), source })
}

fn manifest_text(o: &Object) -> Result<String, FileError> {
    let body = serde_saphyr::to_string(&o.body).map_err(|e| FileError::Serialise { object: o.to_string(), why: e.to_string() })?;
    Ok(format!("# Source: {}\n{body}", o.file))
}

/// Keeps file names portable: Kubernetes names may hold `:` (e.g. `system:metrics`).
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') { c } else { '_' }).collect()
}

/// Reads back which object a manifest file held, for the prune entry.
fn object_ref_of(path: &Path) -> ObjectRef {
    let parsed = std::fs::read_to_string(path).ok().and_then(|t| kubeyaml::values(&t).ok()).and_then(|v| v.into_iter().next());
    let field = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_str).map(str::to_owned);
    match parsed {
        Some(v) => ObjectRef {
            api_version: field(&v, "apiVersion").unwrap_or_default(),
            kind: field(&v, "kind").unwrap_or_default(),
            namespace: v.get("metadata").and_then(|m| field(m, "namespace")),
            name: v.get("metadata").and_then(|m| field(m, "name")).unwrap_or_default(),
        },
        None => ObjectRef {
            api_version: String::new(),
            kind: "File".into(),
            namespace: None,
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        },
    }
}
