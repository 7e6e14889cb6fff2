//! Git release repositories through gix: one bare mirror per source in the cache, fetched
//! incrementally on every poll (never a fresh clone), tags read from what the remote advertises.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;
use gix::protocol::handshake::Ref;
use gix::remote::{Direction, fetch::Tags};
use gix::{ObjectId, Repository};

use super::{Error, RemoteRefs, Result};

/// What one fetch saw.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    pub refs: RemoteRefs,
    /// Branches whose new head does not contain the old one: `(branch, old, new)`.
    pub force_pushed: Vec<(String, String, String)>,
    /// Tags pointing at something that is not a commit (skipped).
    pub not_commits: Vec<String>,
}

fn git_err(source: &str, url: &str, what: &str) -> impl Fn(gix::Error) -> Error {
    let (source, url, what) = (source.to_owned(), url.to_owned(), what.to_owned());
    // gix's Display shows only the outermost message; the alternate form shows the chain.
    move |e| Error::Fetch { source_name: source.clone(), url: url.clone(), message: format!("{what}: {e:#}") }
}

fn open_or_init(dir: &Path) -> std::result::Result<Repository, String> {
    if dir.join("HEAD").is_file() {
        return gix::open(dir).map_err(|e| format!("{e:#}"));
    }
    let prepare = || -> std::io::Result<()> {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // init_bare refuses a non-empty directory: a leftover from an interrupted init goes.
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        Ok(())
    };
    prepare().map_err(|e| format!("{}: {e}", dir.display()))?;
    gix::init_bare(dir).map_err(|e| format!("{e:#}"))
}

/// Fetches every branch and tag of `url` into the bare mirror at `dir` (created on first use)
/// and reports what the remote advertises. Blocking: call from `spawn_blocking`.
///
/// `known_heads` are the branch heads seen at the previous poll, for force-push detection.
///
/// # Errors
/// The remote cannot be reached or refuses, or the mirror cannot be opened or written.
pub fn fetch(source: &str, url: &str, dir: &Path, known_heads: &BTreeMap<String, String>) -> Result<Fetched> {
    let repo = open_or_init(dir).map_err(|message| Error::Fetch {
        source_name: source.to_owned(),
        url: url.to_owned(),
        message: format!("opening the mirror: {message}"),
    })?;
    let interrupt = AtomicBool::new(false);
    let outcome = repo
        .remote_at(url)
        .map_err(git_err(source, url, "invalid URL"))?
        .with_fetch_tags(Tags::None)
        .with_refspecs(["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], Direction::Fetch)
        .map_err(git_err(source, url, "refspecs"))?
        .connect(Direction::Fetch)
        .map_err(git_err(source, url, "connecting"))?
        .prepare_fetch(gix::progress::Discard, gix::remote::ref_map::Options::default())
        .map_err(git_err(source, url, "listing refs"))?
        .receive(gix::progress::Discard, &interrupt)
        .map_err(git_err(source, url, "fetching"))?;

    let mut out = Fetched::default();
    for r in &outcome.ref_map.remote_refs {
        if let Ref::Unborn { .. } = r {
            continue;
        }
        let (name, target, _peeled) = r.unpack();
        let Some(target) = target else { continue };
        let name = name.to_str_lossy();
        if let Some(tag) = name.strip_prefix("refs/tags/") {
            // Peel locally: v1 servers do not always send the peeled id.
            match repo.find_object(target.to_owned()).ok().and_then(|o| o.peel_to_commit().ok()) {
                Some(commit) => {
                    out.refs.tags.insert(tag.to_owned(), commit.id.to_string());
                }
                None => out.not_commits.push(tag.to_owned()),
            }
        } else if let Some(branch) = name.strip_prefix("refs/heads/") {
            out.refs.heads.insert(branch.to_owned(), target.to_string());
        }
    }
    for (branch, new) in &out.refs.heads {
        let Some(old) = known_heads.get(branch) else { continue };
        if old == new {
            continue;
        }
        let (Ok(old_id), Ok(new_id)) = (ObjectId::from_hex(old.as_bytes()), ObjectId::from_hex(new.as_bytes())) else {
            continue;
        };
        if !is_ancestor(&repo, old_id, new_id) {
            out.force_pushed.push((branch.clone(), old.clone(), new.clone()));
        }
    }
    Ok(out)
}

/// Whether `a` is reachable from `b`. An unreadable history counts as "no" (reported as a force
/// push, which is only ever logged).
fn is_ancestor(repo: &Repository, a: ObjectId, b: ObjectId) -> bool {
    let Ok(walk) = repo.rev_walk([b]).all() else { return false };
    walk.map_while(std::result::Result::ok).any(|info| info.id == a)
}

/// Writes the tree of `commit` from the mirror at `dir` into `dest`. Symlinks and submodules
/// are skipped (a release is plain files; a link could point outside the tree). Blocking.
///
/// Returns the number of files written.
///
/// # Errors
/// The commit is not in the mirror, an object cannot be read, an entry has an unsafe name, or a
/// file cannot be written.
pub fn materialise(dir: &Path, commit: &str, dest: &Path) -> std::result::Result<u64, String> {
    let repo = gix::open(dir).map_err(|e| format!("opening the mirror: {e:#}"))?;
    let id = ObjectId::from_hex(commit.as_bytes()).map_err(|e| format!("bad commit id: {e}"))?;
    let commit = repo.find_object(id).and_then(|o| o.peel_to_commit()).map_err(|e| format!("commit not in the mirror: {e:#}"))?;
    let tree = commit.tree().map_err(|e| format!("reading the tree: {e:#}"))?;
    let mut files = 0;
    write_tree(&repo, tree, dest, &PathBuf::new(), &mut files)?;
    Ok(files)
}

fn write_tree(repo: &Repository, tree: gix::Tree<'_>, dest: &Path, rel: &Path, files: &mut u64) -> std::result::Result<(), String> {
    for entry in tree.iter() {
        let entry = entry.map_err(|e| format!("reading tree {}: {e:#}", rel.display()))?;
        let name = entry.filename().to_str_lossy().into_owned();
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) || name.eq_ignore_ascii_case(".git") {
            return Err(format!("unsafe entry name {name:?} in {}", rel.display()));
        }
        let rel_path = rel.join(&name);
        let path = dest.join(&rel_path);
        match entry.mode().kind() {
            EntryKind::Tree => {
                std::fs::create_dir(&path).map_err(|e| format!("creating {}: {e}", rel_path.display()))?;
                let sub = repo.find_tree(entry.object_id()).map_err(|e| format!("reading {}: {e:#}", rel_path.display()))?;
                write_tree(repo, sub, dest, &rel_path, files)?;
            }
            EntryKind::Blob | EntryKind::BlobExecutable => {
                let mut blob = repo.find_blob(entry.object_id()).map_err(|e| format!("reading {}: {e:#}", rel_path.display()))?;
                std::fs::write(&path, blob.take_data()).map_err(|e| format!("writing {}: {e}", rel_path.display()))?;
                *files += 1;
            }
            EntryKind::Link => tracing::warn!(path = %rel_path.display(), "skipping symlink in release tree"),
            EntryKind::Commit => tracing::warn!(path = %rel_path.display(), "skipping submodule in release tree"),
        }
    }
    Ok(())
}
