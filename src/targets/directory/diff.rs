//! `stacksync diff` for a directory target: the next pass rendered into a scratch directory and
//! compared file by file with the target directory (status files left out).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::model::cluster::STATUS_DIR;
use applier::ssa::{Planned, unified::unified};

/// Largest file compared; bigger ones are reported as changed when their bytes differ.
const MAX_DIFF_BYTES: u64 = 8 * 1024 * 1024;

/// A file the next pass would write or remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// Relative to the target directory.
    pub path: PathBuf,
    pub change: Planned,
    pub diff: String,
}

/// What the next pass would change in `target`, and the render's failures (`cluster: message`).
///
/// # Errors
/// The scratch directory cannot be made, the cache cannot be opened, a directory cannot be read.
pub async fn diff_directory(config: &Config, target: &Path) -> anyhow::Result<(Vec<FileDiff>, Vec<String>)> {
    use anyhow::Context as _;
    let scratch = tempfile::Builder::new().prefix("stacksync-diff-").tempdir().context("cannot create a scratch directory")?;
    let report = super::pass::render_to(config, scratch.path()).await?;
    let failures: Vec<String> = report
        .clusters
        .iter()
        .filter(|c| c.status.reason != crate::status::Reason::Synced)
        .map(|c| format!("{}/{}: {}", c.cluster.namespace, c.cluster.name, c.status.message))
        .collect();
    let (scratch_dir, target_dir) = (scratch.path().to_path_buf(), target.to_path_buf());
    let diffs = tokio::task::spawn_blocking(move || compare(&scratch_dir, &target_dir))
        .await
        .context("compare task failed")?
        .with_context(|| format!("cannot compare with {}", target.display()))?;
    Ok((diffs, failures))
}

fn compare(new: &Path, old: &Path) -> std::io::Result<Vec<FileDiff>> {
    let mut paths = BTreeSet::new();
    files(new, Path::new(""), &mut paths)?;
    files(old, Path::new(""), &mut paths)?;
    let mut texts = Vec::new();
    for rel in paths {
        let (n, o) = (read(&new.join(&rel))?, read(&old.join(&rel))?);
        if n != o {
            texts.push((rel, o, n));
        }
    }
    // A file that only moved in the apply order (`01-configmap-cfg.yaml` became
    // `02-configmap-cfg.yaml`) is the same object: one update, not a prune and a create.
    let object = |p: &Path| {
        (p.parent().map(Path::to_path_buf), p.file_name().map(|f| f.to_string_lossy().split_once('-').map(|(_, rest)| rest.to_owned())))
    };
    // Pair each created file with a removed one of the same object.
    let mut moved_from: Vec<Option<usize>> = vec![None; texts.len()];
    let mut paired = vec![false; texts.len()];
    for i in 0..texts.len() {
        if texts[i].1.is_some() {
            continue;
        }
        let removed = (0..texts.len()).find(|&j| !paired[j] && texts[j].2.is_none() && object(&texts[j].0) == object(&texts[i].0));
        if let Some(j) = removed {
            paired[j] = true;
            moved_from[i] = Some(j);
        }
    }
    let mut out = Vec::new();
    for (i, (rel, o, n)) in texts.iter().enumerate() {
        if paired[i] {
            continue;
        }
        let (old_path, old_text) = match moved_from[i] {
            Some(j) => (&texts[j].0, &texts[j].1),
            None => (rel, o),
        };
        let change = match (old_text, n) {
            (None, _) => Planned::Create,
            (_, None) => Planned::Prune,
            _ => Planned::Update,
        };
        let (a, b) = (old_text.as_deref().unwrap_or_default(), n.as_deref().unwrap_or_default());
        let diff = unified(a, b, &format!("live/{}", old_path.display()), &format!("desired/{}", rel.display()));
        out.push(FileDiff { path: rel.clone(), change, diff });
    }
    Ok(out)
}

/// Every file under `root` (relative), the status directory left out; a missing root has none.
fn files(root: &Path, rel: &Path, out: &mut BTreeSet<PathBuf>) -> std::io::Result<()> {
    let dir = root.join(rel);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = rel.join(entry.file_name());
        if rel.as_os_str().is_empty() && entry.file_name() == STATUS_DIR {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            files(root, &path, out)?;
        } else if kind.is_file() {
            out.insert(path);
        }
    }
    Ok(())
}

/// A file's text (lossy), `None` when absent; a huge file reads as its size only.
fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_DIFF_BYTES => Ok(Some(format!("# {} bytes, too large to diff\n", m.len()))),
        Ok(_) => Ok(Some(String::from_utf8_lossy(&std::fs::read(path)?).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What `stacksync diff` prints of `files`: a line per file (`<change> <path>`) and its unified
/// diff.
pub fn text(files: &[FileDiff]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for f in files {
        let _ = writeln!(out, "{} {}", f.change, f.path.display());
        out.push_str(&f.diff);
    }
    out
}
