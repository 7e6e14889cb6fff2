//! The release cache on a volume: bare Git mirrors, release trees materialised atomically, and an
//! index of what is there, so a restart fetches and writes nothing it already has.
//!
//! Layout under the cache directory:
//! ```text
//! index.json                       what is cached and what each source last advertised
//! git/<source-key>.git/            bare mirror per source, fetched incrementally
//! releases/<source-key>/<tag>@<commit>/   the release tree at that commit
//! releases/<source-key>/<tag>@<commit>.sha256.json   digest manifest of that tree, checked before every use
//! tmp/                             work area; anything here is garbage after a crash
//! ```

pub mod blobs;
pub mod gc;
pub mod index;
pub mod tree;
pub mod unpack;

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use index::{Index, ReleaseEntry, SignatureRefusal, SourceState};

/// What the cache cannot do. Each message says its cause once: a cause in the message is not
/// also the error's `source()`, or a printer that follows the chain (`main`'s `{:#}`) says it
/// twice. `Write`, `Materialise` and `Tree` keep theirs as the source too: code finds the OS
/// error or the filler's error there ([`crate::model::repeats::cause`] for a temporary path new
/// at every try, retry decisions); they do not reach `main`'s printer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot create cache directory {path}: {cause}")]
    CreateDir { path: PathBuf, cause: std::io::Error },
    #[error("cannot read cache index {path}: {cause}")]
    ReadIndex { path: PathBuf, cause: std::io::Error },
    #[error("cache index {path} is corrupt ({cause}); move it away to rebuild the cache")]
    ParseIndex { path: PathBuf, cause: serde_json::Error },
    /// The index cannot be written (its path is the same at every try, so its text is the
    /// cause [`crate::model::repeats::cause`] compares).
    #[error("cannot write cache index {path}: {cause}")]
    WriteIndex { path: PathBuf, cause: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    /// The tree could not be filled (its filler's error: the mirror, the blobs, an archive).
    #[error("cannot materialise release {tag}@{commit} of source {source_name}: {source}")]
    Materialise {
        source_name: String,
        tag: String,
        commit: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// The filler's [`Fill::is_transient`] and [`Fill::reason`].
        transient: bool,
        reason: &'static str,
    },
    /// The tree written does not fit in the cache: a path longer than the system allows there,
    /// or a tree that could not be hashed.
    #[error("cannot materialise release {tag}@{commit} of source {source_name}: {problem}")]
    Tree {
        source_name: String,
        tag: String,
        commit: String,
        // Boxed: every cache result would carry its size.
        #[source]
        problem: Box<TreeProblem>,
    },
}

/// Why a filled tree cannot be placed in the cache.
#[derive(Debug, thiserror::Error)]
pub enum TreeProblem {
    /// The new tree cannot be read back to be hashed (the volume's trouble).
    #[error("hashing the new tree: {0}")]
    Hash(#[source] tree::Damage),
    /// `shown` is the path's first 60 characters.
    #[error(
        "path {shown}… ({len} bytes) is longer than the system allows (PATH_MAX {PATH_MAX}) once in the cache at {}",
        dir.display()
    )]
    PathTooLong { shown: String, len: usize, dir: PathBuf },
}

/// The error of a release tree's filler ([`Cache::release`]): says whether filling again soon
/// may succeed.
pub trait Fill: std::error::Error + Send + Sync + 'static {
    fn is_transient(&self) -> bool;
    /// A short stable name, for condition reasons and metric labels.
    fn reason(&self) -> &'static str;
}

/// A filler that failed reading or writing files: the disk may come back.
impl Fill for std::io::Error {
    fn is_transient(&self) -> bool {
        true
    }

    fn reason(&self) -> &'static str {
        "Io"
    }
}

impl Error {
    /// Whether trying again soon may succeed with nothing changed: the volume (a write, a read,
    /// a directory) may come back; a corrupt index, a tree that does not fit, or a filler's
    /// permanent refusal (an unsafe archive) need a change.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::CreateDir { .. } | Error::ReadIndex { .. } | Error::WriteIndex { .. } | Error::Write { .. } => true,
            Error::Tree { problem, .. } => matches!(**problem, TreeProblem::Hash(_)),
            Error::ParseIndex { .. } => false,
            Error::Materialise { transient, .. } => *transient,
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::CreateDir { .. } | Error::WriteIndex { .. } | Error::Write { .. } => "CacheWrite",
            Error::ReadIndex { .. } => "CacheRead",
            Error::ParseIndex { .. } => "CacheIndexCorrupt",
            Error::Tree { problem, .. } => match **problem {
                TreeProblem::Hash(_) => "CacheRead",
                TreeProblem::PathTooLong { .. } => "PathTooLong",
            },
            Error::Materialise { reason, .. } => reason,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Linux's limit on a path passed to the kernel, terminating NUL included.
pub const PATH_MAX: usize = 4096;
/// What a tree's digest manifest adds to the tree's file name.
const MANIFEST_SUFFIX: &str = ".sha256.json";
/// The longest name of a release tree: its manifest's name must fit in a file name (255 bytes).
const MAX_TREE_NAME: usize = 255 - MANIFEST_SUFFIX.len();

/// A handle on the cache directory. Cheap to clone; holds no open files.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// Opens (creating if needed) the cache at `root` and clears leftovers of interrupted work.
    ///
    /// # Errors
    /// When the directories cannot be created.
    pub fn open(root: &Path) -> Result<Cache> {
        for dir in [root.to_path_buf(), root.join("git"), root.join("releases"), root.join("tmp")] {
            std::fs::create_dir_all(&dir).map_err(|cause| Error::CreateDir { path: dir.clone(), cause })?;
        }
        let cache = Cache { root: root.to_path_buf() };
        // Nothing in tmp/ was ever visible as a cached release, so leftovers of interrupted work
        // can go — but only those of processes that are gone: another pass (or `stacksync fetch`
        // next to a running daemon) may be writing there right now.
        if let Ok(entries) = std::fs::read_dir(cache.root.join("tmp")) {
            for entry in entries.flatten() {
                if is_abandoned(&entry.file_name().to_string_lossy()) {
                    let _ = remove_any(&entry.path());
                }
            }
        }
        Ok(cache)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A stable directory-safe key for a source: its name plus a hash of its URL, so pointing a
    /// source at another repository never reuses the old mirror.
    pub fn source_key(name: &str, url: &str) -> String {
        let digest = Sha256::digest(url.as_bytes());
        format!("{name}-{}", &hex::encode(digest)[..12])
    }

    pub fn git_dir(&self, key: &str) -> PathBuf {
        self.root.join("git").join(format!("{key}.git"))
    }

    /// Where the tree of `tag@commit` lives (whether or not it is there yet).
    pub fn release_path(&self, key: &str, tag: &str, commit: &str) -> PathBuf {
        self.root.join(Self::release_rel(key, tag, commit))
    }

    /// `releases/<key>/<tag>@<commit>`; with a tag too long for a file name (a ClusterClass name
    /// may be 253 characters, a file name 255 bytes, its manifest's 12 more) the name is
    /// shortened with a digest of the whole ([`crate::model::names::bounded`]).
    fn release_rel(key: &str, tag: &str, commit: &str) -> PathBuf {
        PathBuf::from("releases").join(key).join(crate::model::names::bounded(format!("{tag}@{commit}"), MAX_TREE_NAME))
    }

    /// The digest manifest of the tree at `tree` (a sibling file, so renders never see it).
    pub fn manifest_path(tree: &Path) -> PathBuf {
        let mut name = tree.file_name().unwrap_or_default().to_os_string();
        name.push(MANIFEST_SUFFIX);
        tree.with_file_name(name)
    }

    /// Checks the tree at `dir` against its digest manifest.
    ///
    /// # Errors
    /// The first difference, or a missing manifest (a tree written before manifests existed, or
    /// by a process killed between the rename and the manifest write).
    pub fn verify_tree(dir: &Path) -> Result<u64, tree::Damage> {
        let manifest = tree::Manifest::read(&Self::manifest_path(dir))?;
        manifest.verify(dir)?;
        Ok(manifest.files())
    }

    /// Moves a damaged tree out of the way (one rename, so no reader sees it half-deleted),
    /// then deletes it.
    fn discard(&self, dir: &Path) {
        let aside = self.root.join("tmp").join(format!("damaged-{}-{}", std::process::id(), unique()));
        let target = if std::fs::rename(dir, &aside).is_ok() { aside } else { dir.to_path_buf() };
        if let Err(e) = remove_any(&target) {
            tracing::warn!(path = %target.display(), error = %e, "cannot remove a damaged release tree");
        }
        let _ = std::fs::remove_file(Self::manifest_path(dir));
    }

    /// Loads the index; a missing index is an empty one.
    ///
    /// # Errors
    /// When the index exists but cannot be read or parsed.
    pub fn load_index(&self) -> Result<Index> {
        let path = self.root.join("index.json");
        match std::fs::read(&path) {
            Ok(bytes) => {
                let mut index: Index = serde_json::from_slice(&bytes).map_err(|cause| Error::ParseIndex { path, cause })?;
                index.migrate();
                Ok(index)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Index::default()),
            Err(cause) => Err(Error::ReadIndex { path, cause }),
        }
    }

    /// Writes the index atomically; a no-op when nothing changed.
    ///
    /// # Errors
    /// When the file cannot be written or renamed into place.
    pub fn save_index(&self, index: &Index) -> Result<()> {
        let path = self.root.join("index.json");
        let mut bytes = serde_json::to_vec_pretty(index).map_err(|e| Error::WriteIndex { path: path.clone(), cause: e.into() })?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes).map(|_| ()).map_err(|e| match e {
            Error::Write { path, source } => Error::WriteIndex { path, cause: source },
            other => other,
        })
    }

    /// Returns the tree of `tag@commit`, materialising it with `fill` when it is not cached.
    /// `fill` writes the tree into the empty directory it is given; only a complete tree is ever
    /// renamed into place, so a crash or error leaves nothing half-written visible.
    ///
    /// The returned flag is true when `fill` ran.
    ///
    /// # Errors
    /// `fill`'s error, or an I/O error creating or renaming the directories.
    pub fn release<F, E>(&self, index: &mut Index, source: &str, key: &str, tag: &str, commit: &str, fill: F) -> Result<(PathBuf, bool)>
    where
        F: FnOnce(&Path) -> std::result::Result<u64, E>,
        E: Fill,
    {
        let rel = Self::release_rel(key, tag, commit);
        let dir = self.root.join(&rel);
        let id = ReleaseEntry::id(key, tag, commit);
        let entry = |files| ReleaseEntry {
            source: source.to_owned(),
            tag: tag.to_owned(),
            commit: commit.to_owned(),
            path: rel.to_string_lossy().into_owned(),
            files,
        };
        if let Some(files) = self.cached_tree(&dir, (source, tag, commit)) {
            index.releases.entry(id).or_insert_with(|| entry(files));
            return Ok((dir, false));
        }
        let (tmp, manifest) = self.filled(key, &dir, (source, tag, commit), fill)?;
        let files = manifest.files();
        self.place(&tmp, &dir, &manifest)?;
        index.releases.insert(id, entry(files));
        Ok((dir, true))
    }

    /// The files of the tree at `dir` when it is exactly what was written there. Whatever is at
    /// the final path is used only then: a tree edited, truncated, emptied or added to on the
    /// volume is discarded (and materialised again from the verified mirror or blobs, never
    /// rendered). `None`: nothing usable there.
    fn cached_tree(&self, dir: &Path, (source, tag, commit): (&str, &str, &str)) -> Option<u64> {
        std::fs::symlink_metadata(dir).ok()?;
        match Self::verify_tree(dir) {
            Ok(files) => Some(files),
            Err(damage) => {
                tracing::warn!(source, tag, commit, %damage, "cached release tree does not match its digest manifest; materialising it again");
                self.discard(dir);
                None
            }
        }
    }

    /// A new directory under `tmp/` that `fill` wrote the release into, and its digest manifest;
    /// the tree must fit under `dir`, its final path. Nothing is left in `tmp/` on an error.
    fn filled<F, E>(&self, key: &str, dir: &Path, (source, tag, commit): (&str, &str, &str), fill: F) -> Result<(PathBuf, tree::Manifest)>
    where
        F: FnOnce(&Path) -> std::result::Result<u64, E>,
        E: Fill,
    {
        let materialise = |problem| Error::Tree {
            source_name: source.to_owned(),
            tag: tag.to_owned(),
            commit: commit.to_owned(),
            problem: Box::new(problem),
        };
        let tmp = self.root.join("tmp").join(format!("{key}-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&tmp).map_err(|source| Error::Write { path: tmp.clone(), source })?;
        if let Err(e) = fill(&tmp) {
            let _ = remove_any(&tmp);
            return Err(Error::Materialise {
                source_name: source.to_owned(),
                tag: tag.to_owned(),
                commit: commit.to_owned(),
                transient: e.is_transient(),
                reason: e.reason(),
                source: Box::new(e),
            });
        }
        let manifest = match tree::Manifest::of(&tmp) {
            Ok(m) => m,
            Err(d) => {
                let _ = remove_any(&tmp);
                return Err(materialise(TreeProblem::Hash(d)));
            }
        };
        // The tree was written in tmp/, whose path is shorter than its final one: a path that
        // fits there may not fit in releases/, where nothing could read it.
        if let Some(longest) = manifest.longest_path()
            && dir.as_os_str().len() + 1 + longest.len() >= PATH_MAX
        {
            let _ = remove_any(&tmp);
            return Err(materialise(TreeProblem::PathTooLong {
                shown: longest.chars().take(60).collect(),
                len: longest.len(),
                dir: dir.to_path_buf(),
            }));
        }
        Ok((tmp, manifest))
    }

    /// Renames the tree at `tmp` to `dir`, its digest manifest written first: a tree without
    /// one is re-materialised, so a crash between the two steps costs a re-materialisation,
    /// never an unverified use. Another process may have placed the same tree first: it is
    /// used only if it verifies.
    fn place(&self, tmp: &Path, dir: &Path, manifest: &tree::Manifest) -> Result<()> {
        let parent = dir.parent().unwrap_or(&self.root);
        let manifest_path = Self::manifest_path(dir);
        let placed = std::fs::create_dir_all(parent)
            .map_err(|source| Error::Write { path: parent.to_path_buf(), source })
            .and_then(|()| write_atomic(&manifest_path, &manifest.to_bytes()))
            .and_then(|_| std::fs::rename(tmp, dir).map_err(|source| Error::Write { path: dir.to_path_buf(), source }));
        if let Err(e) = placed {
            let _ = remove_any(tmp);
            if Self::verify_tree(dir).is_err() {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Whether a temp name `…-<pid>-<n>` (or `.tmp-<pid>-<n>`) belongs to a process that no longer
/// runs. Names without a readable pid are treated as abandoned.
pub(crate) fn is_abandoned(name: &str) -> bool {
    let mut parts = name.rsplit('-');
    let (Some(_n), Some(pid)) = (parts.next(), parts.next()) else { return true };
    match pid.parse::<u32>() {
        Ok(pid) if pid == std::process::id() => false,
        Ok(pid) => !Path::new("/proc").join(pid.to_string()).exists(),
        Err(_) => true,
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) }
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename, unless the
/// file already holds exactly these bytes. Returns whether the file was written.
///
/// # Errors
/// I/O errors, with the path. On error the old file (if any) is untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    let err = |source| Error::Write { path: path.to_owned(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // The temporary name adds up to 34 bytes to the file's: a long one (a tree's manifest named
    // after a long tag) is shortened so the temporary one is a file name too (255 bytes).
    let name = crate::model::names::bounded(name, 255 - 40);
    let tmp = dir.join(format!(".{name}.tmp-{}-{}", std::process::id(), unique()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a cache index that could not be read or parsed said its cause twice where the
    /// chain is printed (`main`'s `{:#}`): "… (EOF while parsing …); move it away …: EOF while
    /// parsing …", "Is a directory (os error 21): Is a directory (os error 21)".
    #[test]
    fn cache_index_errors_say_their_cause_once() {
        type Spoil = fn(&Path);
        let truncated: Spoil = |root| std::fs::write(root.join("index.json"), "{\"sources\": {").unwrap();
        let a_directory: Spoil = |root| std::fs::create_dir(root.join("index.json")).unwrap();
        let table = [("truncated", truncated, "EOF while parsing"), ("a directory", a_directory, "Is a directory (os error 21)")];
        for (name, spoil, cause) in table {
            let dir = tempfile::tempdir().unwrap();
            let cache = Cache::open(dir.path()).unwrap();
            spoil(dir.path());
            let err = cache.load_index().unwrap_err();
            let printed = format!("{:#}", anyhow::Error::from(err).context("opening the cache"));
            assert_eq!(printed.matches(cause).count(), 1, "{name}: {printed}");
            assert!(printed.starts_with("opening the cache: "), "{name}: {printed}");
        }
        // Written over a directory: "cannot write cache index …: Is a directory (os error 21)".
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("index.json")).unwrap();
        let err = cache.save_index(&Index::default()).unwrap_err();
        let printed = format!("{:#}", anyhow::Error::from(err));
        assert_eq!(printed.matches("os error 21").count(), 1, "{printed}");
        assert!(printed.starts_with("cannot write cache index "), "{printed}");
        let blocked = tempfile::tempdir().unwrap();
        std::fs::write(blocked.path().join("file"), "").unwrap();
        let err = Cache::open(&blocked.path().join("file").join("cache")).err().unwrap();
        let printed = format!("{:#}", anyhow::Error::from(err));
        assert_eq!(printed.matches("Not a directory").count(), 1, "{printed}");
    }

    #[test]
    fn failed_fill_leaves_nothing_visible() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut index = Index::default();
        let err = cache
            .release(&mut index, "s", "s-1", "v1.0.0", "abc", |tmp| {
                std::fs::write(tmp.join("half"), "x").unwrap();
                Err(std::io::Error::other("boom"))
            })
            .unwrap_err();
        assert!(err.to_string().contains("boom"));
        assert!(index.releases.is_empty());
        assert!(!dir.path().join("releases/s-1/v1.0.0@abc").exists());
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn cached_release_is_not_filled_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut index = Index::default();
        let fill = |tmp: &Path| -> std::io::Result<u64> {
            std::fs::write(tmp.join("a.yaml"), "a: 1")?;
            Ok(1)
        };
        let (_, fresh) = cache.release(&mut index, "s", "s-1", "v1.0.0", "abc", fill).unwrap();
        assert!(fresh);
        let (path, fresh) =
            cache.release(&mut index, "s", "s-1", "v1.0.0", "abc", |_| -> std::io::Result<u64> { panic!("filled twice") }).unwrap();
        assert!(!fresh);
        assert_eq!(std::fs::read_to_string(path.join("a.yaml")).unwrap(), "a: 1");
    }

    #[test]
    fn damaged_or_emptied_tree_is_materialised_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut index = Index::default();
        let fill = |tmp: &Path| -> std::io::Result<u64> {
            std::fs::write(tmp.join("a.yaml"), "a: 1")?;
            Ok(1)
        };
        let (path, _) = cache.release(&mut index, "s", "s-1", "v1.0.0", "abc", fill).unwrap();
        type Edit = fn(&Path);
        let damages: &[Edit] = &[
            |p| std::fs::write(p.join("a.yaml"), "a: tampered").unwrap(),
            |p| std::fs::write(p.join("extra.yaml"), "x: 1").unwrap(),
            |p| std::fs::remove_file(p.join("a.yaml")).unwrap(),
            |p| std::fs::remove_file(Cache::manifest_path(p)).unwrap(),
            |p| {
                std::fs::remove_dir_all(p).unwrap();
                std::fs::write(p, "not a dir").unwrap();
            },
        ];
        for (i, damage) in damages.iter().enumerate() {
            damage(&path);
            let (again, fresh) = cache.release(&mut index, "s", "s-1", "v1.0.0", "abc", fill).unwrap();
            assert!(fresh, "damage {i} was not noticed");
            assert_eq!(std::fs::read_to_string(again.join("a.yaml")).unwrap(), "a: 1", "damage {i}");
            assert_eq!(std::fs::read_dir(&again).unwrap().count(), 1, "damage {i}");
            let (_, fresh) =
                cache.release(&mut index, "s", "s-1", "v1.0.0", "abc", |_| -> std::io::Result<u64> { panic!("filled twice") }).unwrap();
            assert!(!fresh);
        }
    }

    #[test]
    fn path_longer_than_path_max_was_skipped_silently() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut index = Index::default();
        let commit = "c".repeat(40);
        // A relative path that fits under tmp/ (shorter) but not under releases/ (longer).
        let final_len = cache.release_path("s-1", "v1.0.0", &commit).as_os_str().len();
        let want = PATH_MAX - final_len;
        let (dirs, file) = (want / 201, "f".repeat((want % 201).max(1)));
        let err = cache
            .release(&mut index, "s", "s-1", "v1.0.0", &commit, |tmp| {
                assert!(tmp.as_os_str().len() + 1 + want < PATH_MAX, "the test needs a shorter tmp path");
                let script = format!(
                    "cd \"$0\" && for i in $(seq {dirs}); do mkdir {0} && cd {0} || exit 1; done && echo x > {file}",
                    "d".repeat(200)
                );
                let ok = std::process::Command::new("sh").arg("-c").arg(script).arg(tmp).status()?;
                if ok.success() { Ok(1) } else { Err(std::io::Error::other("mkdir failed")) }
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("PATH_MAX"), "{err}");
        assert!(index.releases.is_empty());
    }

    #[test]
    fn only_temp_work_of_dead_processes_is_abandoned() {
        assert!(!is_abandoned(&format!("stacks-1-{}-3", std::process::id())));
        assert!(!is_abandoned(&format!(".tmp-{}-0", std::process::id())));
        // pid 1 always runs; a pid past the kernel's maximum never does.
        assert!(!is_abandoned("stacks-1-1-0"));
        assert!(is_abandoned("stacks-1-4194305-0"));
        assert!(is_abandoned("garbage"));
    }

    #[test]
    fn atomic_write_skips_identical_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        assert!(write_atomic(&p, b"one").unwrap());
        assert!(!write_atomic(&p, b"one").unwrap());
        assert!(write_atomic(&p, b"two").unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
    }
}
