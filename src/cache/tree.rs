//! Digest manifests of materialised release trees: every file's SHA-256, recorded when the tree
//! is written and checked before every use, so a tree edited, truncated, emptied or added to on
//! the volume is never rendered — the cache materialises it again from the verified source.
//!
//! The manifest lives beside the tree (`releases/<key>/<tag>@<commit>.sha256.json`), not in it:
//! nothing in the tree is stacksync's own, and renders never see the manifest.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::blobs::hash_file;

/// Bumped when the manifest format changes; a manifest of another format is a mismatch (the
/// tree is materialised again, which is always safe).
const FORMAT: u32 = 1;

/// What a tree holds: relative path -> what is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    format: u32,
    /// Regular files by release-relative path (`/`-separated; non-UTF-8 names hex-encoded), to
    /// `sha256:<hex>`; directories map to `dir`.
    entries: BTreeMap<String, String>,
}

/// How a tree differs from its manifest; names the first path that differs.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    #[error("no readable digest manifest ({0})")]
    NoManifest(#[source] ManifestProblem),
    #[error("{0} is missing")]
    Missing(String),
    #[error("{0} was modified")]
    Modified(String),
    #[error("{0} was added")]
    Added(String),
    #[error("{path} cannot be read: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Why a tree's digest manifest cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestProblem {
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("{len} bytes, more than {max}")]
    TooLarge { len: u64, max: u64 },
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    #[error("format {found} is not {FORMAT}")]
    Format { found: u32 },
}

const DIR: &str = "dir";
/// Anything but a regular file or a directory (symlink, fifo, ...): never part of a tree that
/// stacksync wrote, so its presence is damage.
const OTHER: &str = "other";

impl Manifest {
    /// Hashes every file under `root`.
    ///
    /// # Errors
    /// A directory or file cannot be read (the damage names it).
    pub fn of(root: &Path) -> Result<Manifest, Damage> {
        let mut entries = BTreeMap::new();
        walk(root, root, &mut entries)?;
        Ok(Manifest { format: FORMAT, entries })
    }

    /// The longest relative path in the tree, in bytes.
    pub fn longest_path(&self) -> Option<&str> {
        self.entries.keys().max_by_key(|k| k.len()).map(String::as_str)
    }

    pub fn files(&self) -> u64 {
        self.entries.values().filter(|v| v.as_str() != DIR).count() as u64
    }

    /// Compares the tree at `root` with this manifest, file by file.
    ///
    /// # Errors
    /// The first difference found.
    pub fn verify(&self, root: &Path) -> Result<(), Damage> {
        if self.format != FORMAT {
            return Err(Damage::NoManifest(ManifestProblem::Format { found: self.format }));
        }
        let now = Manifest::of(root)?;
        let mut want = self.entries.iter().peekable();
        let mut have = now.entries.iter().peekable();
        loop {
            match (want.peek(), have.peek()) {
                (None, None) => return Ok(()),
                (Some((p, _)), None) => return Err(Damage::Missing((*p).clone())),
                (None, Some((p, _))) => return Err(Damage::Added((*p).clone())),
                (Some((wp, wd)), Some((hp, hd))) => match wp.cmp(hp) {
                    std::cmp::Ordering::Less => return Err(Damage::Missing((*wp).clone())),
                    std::cmp::Ordering::Greater => return Err(Damage::Added((*hp).clone())),
                    std::cmp::Ordering::Equal if wd != hd => return Err(Damage::Modified((*wp).clone())),
                    std::cmp::Ordering::Equal => {
                        want.next();
                        have.next();
                    }
                },
            }
        }
    }

    /// Reads a manifest written by [`Manifest::to_bytes`].
    ///
    /// # Errors
    /// The file is missing, unreadable or not a manifest.
    pub fn read(path: &Path) -> Result<Manifest, Damage> {
        // A manifest is small (one line per file); a huge one is damage, not something to load.
        const MAX: u64 = 64 * 1024 * 1024;
        let io = |e| Damage::NoManifest(ManifestProblem::Io(e));
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX {
            return Err(Damage::NoManifest(ManifestProblem::TooLarge { len, max: MAX }));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        serde_json::from_slice(&bytes).map_err(|e| Damage::NoManifest(ManifestProblem::Json(e)))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<(), Damage> {
    let unreadable = |path: &Path, source: std::io::Error| Damage::Unreadable { path: rel_name(root, path), source };
    let entries = std::fs::read_dir(dir).map_err(|e| unreadable(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| unreadable(dir, e))?;
        let path = entry.path();
        let name = rel_name(root, &path);
        let kind = entry.file_type().map_err(|e| unreadable(&path, e))?;
        if kind.is_dir() {
            out.insert(name, DIR.to_owned());
            walk(root, &path, out)?;
        } else if kind.is_file() {
            let digest = hash_file(&path).map_err(|e| unreadable(&path, e))?;
            out.insert(name, digest.to_string());
        } else {
            out.insert(name, OTHER.to_owned());
        }
    }
    Ok(())
}

/// The manifest key of `path`: relative, `/`-separated, hex-encoded when not UTF-8 (so two
/// distinct byte names never collapse into one key).
fn rel_name(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let bytes = rel.as_os_str().as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => format!("hex:{}", hex::encode(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.yaml"), "a: 1\n").unwrap();
        std::fs::write(dir.path().join("sub/b.yaml"), "b: 2\n").unwrap();
        dir
    }

    #[test]
    fn every_kind_of_damage_is_named() {
        type Edit = fn(&Path);
        let table: &[(&str, Edit, Damage)] = &[
            ("edited", |p| std::fs::write(p.join("a.yaml"), "a: 2\n").unwrap(), Damage::Modified("a.yaml".into())),
            ("truncated", |p| std::fs::write(p.join("sub/b.yaml"), "").unwrap(), Damage::Modified("sub/b.yaml".into())),
            ("deleted", |p| std::fs::remove_file(p.join("sub/b.yaml")).unwrap(), Damage::Missing("sub/b.yaml".into())),
            ("added", |p| std::fs::write(p.join("c.yaml"), "c: 3\n").unwrap(), Damage::Added("c.yaml".into())),
            ("emptied", |p| std::fs::remove_dir_all(p.join("sub")).unwrap(), Damage::Missing("sub".into())),
            ("symlinked", |p| std::os::unix::fs::symlink("/etc/passwd", p.join("link")).unwrap(), Damage::Added("link".into())),
        ];
        for (what, edit, want) in table {
            let dir = tree();
            let manifest = Manifest::of(dir.path()).unwrap();
            assert_eq!(manifest.files(), 2);
            manifest.verify(dir.path()).unwrap();
            edit(dir.path());
            assert_eq!(manifest.verify(dir.path()).unwrap_err().to_string(), want.to_string(), "{what}");
        }
    }

    #[test]
    fn manifests_round_trip_and_garbage_is_no_manifest() {
        let dir = tree();
        let manifest = Manifest::of(dir.path()).unwrap();
        let file = dir.path().join("m.json");
        std::fs::write(&file, manifest.to_bytes()).unwrap();
        assert_eq!(Manifest::read(&file).unwrap(), manifest);
        std::fs::write(&file, "{").unwrap();
        assert!(matches!(Manifest::read(&file), Err(Damage::NoManifest(_))));
    }
}
