//! Git release repositories through gix: one bare mirror per source in the cache, fetched
//! incrementally on every poll (never a fresh clone), tags read from what the remote advertises.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;
use gix::protocol::handshake::Ref;
use gix::remote::{Direction, fetch::Tags};
use gix::{ObjectId, Repository};
use tracing::{info, warn};

use self::cli as git_cli;
use super::{RemoteRefs, Result};

pub mod cli;
mod source;
use crate::model::source::GitAuth;

/// What one fetch saw.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    pub refs: RemoteRefs,
    /// Branches whose new head does not contain the old one: `(branch, old, new)`.
    pub force_pushed: Vec<(String, String, String)>,
    /// Tags pointing at something that is not a commit (skipped).
    pub not_commits: Vec<String>,
    /// Annotated tags: the raw tag object (what a signature covers, and the signature), by tag.
    /// Lightweight tags are absent. Objects larger than [`MAX_TAG_OBJECT_BYTES`] are absent too.
    pub tag_objects: BTreeMap<String, Vec<u8>>,
}

/// Largest tag object kept for signature verification (a message plus an RSA-4096 signature is
/// a few KiB).
pub const MAX_TAG_OBJECT_BYTES: usize = 64 << 10;

/// How long one fetch may take in all, connecting included. Below the controller's poll timeout,
/// so a fetch is cancelled by its own deadline (and its thread really ends) before the poll
/// gives up on it.
pub const FETCH_DEADLINE: Duration = Duration::from_secs(100);
/// Longest silence on a `git://` connection before the fetch fails.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// A mirror marked with this file is cloned again at the next fetch (a materialisation found
/// objects missing or unreadable).
const DAMAGED_MARKER: &str = "stacksync-damaged";

/// What a Git fetch or a materialisation from the mirror could not do. gix's own errors are
/// kept as the source; the message shows their whole chain (gix's plain Display shows only the
/// outermost step).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The mirror's directory cannot be prepared (its parent created, a leftover removed).
    #[error("opening the mirror: {}: {source}", path.display())]
    PrepareMirror {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening the mirror: {}", causes(source))]
    OpenMirror {
        #[source]
        source: Box<gix::Error>,
    },
    #[error("reading the mirror's refs: {}", causes(source))]
    ReadRefs {
        #[source]
        source: Box<gix::Error>,
    },
    /// The fetch claims an object the mirror cannot read: damage, not a tag to skip.
    #[error("tag {tag}: object {object} is missing from the mirror: {source}")]
    MissingObject {
        tag: String,
        object: ObjectId,
        #[source]
        source: Box<gix::Error>,
    },
    #[error("replacing the damaged mirror {}: {source}", dir.display())]
    ReplaceMirror {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The URL (or the refspecs) gix refuses: the config must change.
    #[error("{step}: {}", causes(source))]
    InvalidRemote {
        step: &'static str,
        #[source]
        source: Box<gix::Error>,
    },
    /// Talking to the remote failed at `step` (connecting, listing refs, fetching).
    #[error("{step}: {}", causes(source))]
    Remote {
        step: &'static str,
        #[source]
        source: Box<gix::Error>,
    },
    #[error("connecting: {source}")]
    Connect {
        #[source]
        source: std::io::Error,
    },
    #[error("timed out after {}s", deadline.as_secs())]
    TimedOut { deadline: Duration },
    /// The remote sent nothing for the longest silence a `git://` read waits for.
    #[error("{step}: the remote sent nothing for {}s (a git:// read waits at most that long)", silence.as_secs())]
    Silent { step: &'static str, silence: Duration },
    /// A fetch through the `git` binary (SSH, HTTP(S)).
    #[error(transparent)]
    Cli(git_cli::Error),
    #[error("bad commit id: {source}")]
    BadCommit {
        #[source]
        source: Box<gix::Error>,
    },
    #[error("commit not in the mirror: {}", causes(source))]
    CommitMissing {
        #[source]
        source: Box<gix::Error>,
    },
    /// A tree or blob of the release cannot be read (`path` relative to the release; empty for
    /// its root).
    #[error("reading {}: {}", if path.as_os_str().is_empty() { "the tree".to_owned() } else { path.display().to_string() }, causes(source))]
    ReadObject {
        path: PathBuf,
        #[source]
        source: Box<gix::Error>,
    },
    /// A tree entry whose name would escape the release directory (or is `.git`).
    #[error("unsafe entry name {name:?} in {}", dir.display())]
    UnsafeEntry { name: String, dir: PathBuf },
    #[error("creating {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {}: {source}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether trying again soon may succeed with nothing changed: the remote's trouble and the
    /// cache volume's I/O pass (a damaged mirror is cloned again); a URL gix refuses, a release
    /// tree with an unsafe name, or credentials the remote refuses do not.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::InvalidRemote { .. } | Error::UnsafeEntry { .. } | Error::BadCommit { .. } => false,
            Error::Cli(e) => e.is_transient(),
            Error::PrepareMirror { .. }
            | Error::OpenMirror { .. }
            | Error::ReadRefs { .. }
            | Error::MissingObject { .. }
            | Error::ReplaceMirror { .. }
            | Error::Remote { .. }
            | Error::Connect { .. }
            | Error::TimedOut { .. }
            | Error::Silent { .. }
            | Error::CommitMissing { .. }
            | Error::ReadObject { .. }
            | Error::CreateDir { .. }
            | Error::WriteFile { .. } => true,
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::PrepareMirror { .. } | Error::OpenMirror { .. } | Error::ReadRefs { .. } | Error::ReplaceMirror { .. } => "GitMirror",
            Error::MissingObject { .. } | Error::CommitMissing { .. } | Error::ReadObject { .. } => "GitMirrorDamaged",
            Error::InvalidRemote { .. } => "GitInvalidRemote",
            Error::Remote { .. } | Error::Connect { .. } => "GitRemote",
            Error::TimedOut { .. } | Error::Silent { .. } => "Timeout",
            Error::Cli(e) => e.reason(),
            Error::BadCommit { .. } => "BadCommit",
            Error::UnsafeEntry { .. } => "UnsafeEntry",
            Error::CreateDir { .. } | Error::WriteFile { .. } => "CacheWrite",
        }
    }

    /// Whether the failure is the mirror's (a missing or unreadable object, an unopenable
    /// mirror): the next fetch clones it again. Errors writing the tree are the destination's.
    fn damages_mirror(&self) -> bool {
        matches!(self, Error::OpenMirror { .. } | Error::BadCommit { .. } | Error::CommitMissing { .. } | Error::ReadObject { .. })
    }
}

/// A Git release tree is filled from the mirror ([`materialise`]).
impl crate::cache::Fill for Error {
    fn is_transient(&self) -> bool {
        Error::is_transient(self)
    }

    fn reason(&self) -> &'static str {
        Error::reason(self)
    }
}

/// Why a fetch failed: remotes come back by themselves; a damaged mirror must be cloned again.
enum Failure {
    Remote(Error),
    /// The mirror cannot be opened, or lacks objects its refs point at.
    Local(Error),
    /// Failed while receiving the pack: the remote cut the connection, or the mirror's own
    /// objects broke negotiation. A fresh clone tells which.
    Receiving(Error),
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::Remote(e) | Failure::Local(e) | Failure::Receiving(e) => e,
        }
    }
}

/// The source-level error of a fetch of `url` for source `source`.
fn in_source(source: &str, url: &str) -> impl Fn(Error) -> super::Error {
    let (source, url) = (source.to_owned(), url.to_owned());
    move |e| super::Error::Git { source_name: source.clone(), url: url.clone(), source: Box::new(e) }
}

fn open_or_init(dir: &Path) -> std::result::Result<Repository, Error> {
    if dir.join("HEAD").is_file() {
        return gix::open(dir).map_err(|e| Error::OpenMirror { source: Box::new(e) });
    }
    init(dir)
}

fn init(dir: &Path) -> std::result::Result<Repository, Error> {
    let prepare = || -> std::io::Result<()> {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // init_bare refuses a non-empty directory: a leftover from an interrupted init goes.
        if std::fs::symlink_metadata(dir).is_ok() {
            remove_any(dir)?;
        }
        Ok(())
    };
    prepare().map_err(|source| Error::PrepareMirror { path: dir.to_owned(), source })?;
    gix::init_bare(dir).map_err(|e| Error::OpenMirror { source: Box::new(e) })
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) }
}

/// Fetches every branch and tag of `url` into the bare mirror at `dir` (created on first use)
/// and reports what the remote advertises. Blocking: call from `spawn_blocking`. Gives up after
/// [`FETCH_DEADLINE`] (see [`fetch_with_deadline`]).
///
/// `known_heads` are the branch heads seen at the previous poll, for force-push detection.
///
/// # Errors
/// The remote cannot be reached or refuses, the deadline passed, or the mirror cannot be
/// written.
pub fn fetch(source: &str, url: &str, dir: &Path, known_heads: &BTreeMap<String, String>) -> Result<Fetched> {
    fetch_with_deadline(source, url, dir, known_heads, FETCH_DEADLINE)
}

/// [`fetch`] of a repository that may need credentials (`sources[].git.auth`). SSH and HTTP(S)
/// URLs go through the `git` binary (see [`git_cli`]); the secrets are read now, for this fetch.
///
/// # Errors
/// As [`fetch`], and the credentials cannot be read or are refused.
pub fn fetch_with_auth(
    source: &str,
    url: &str,
    auth: Option<&GitAuth>,
    dir: &Path,
    known_heads: &BTreeMap<String, String>,
) -> Result<Fetched> {
    fetch_inner(source, url, auth, dir, known_heads, FETCH_DEADLINE)
}

/// [`fetch`] with an explicit deadline. When the deadline passes the fetch is cancelled — the
/// interrupt flag stops gix between packets and a `git://` socket is shut down under a blocked
/// read — so when this returns, nothing runs on.
///
/// A damaged mirror (unopenable, objects missing, marked by a failed materialisation) is cloned
/// again from the remote; the old one is replaced only once the new clone is complete.
///
/// # Errors
/// As [`fetch`]; a deadline error says `timed out after Ns`.
pub fn fetch_with_deadline(
    source: &str,
    url: &str,
    dir: &Path,
    known_heads: &BTreeMap<String, String>,
    deadline: Duration,
) -> Result<Fetched> {
    fetch_inner(source, url, None, dir, known_heads, deadline)
}

fn fetch_inner(
    source: &str,
    url: &str,
    auth: Option<&GitAuth>,
    dir: &Path,
    known_heads: &BTreeMap<String, String>,
    deadline: Duration,
) -> Result<Fetched> {
    let started = Instant::now();
    let marked = dir.join(DAMAGED_MARKER).exists();
    if !marked {
        match fetch_into(url, auth, dir, known_heads, deadline) {
            Ok(fetched) => return Ok(fetched),
            Err(Failure::Remote(e)) => return Err(in_source(source, url)(e)),
            Err(Failure::Local(e) | Failure::Receiving(e)) => {
                warn!(source, error = %e, "fetch into the Git mirror failed; cloning the mirror again");
            }
        }
    } else {
        warn!(source, "the Git mirror was marked damaged; cloning it again");
    }
    let left = deadline.saturating_sub(started.elapsed());
    if left.is_zero() {
        return Err(in_source(source, url)(Error::TimedOut { deadline }));
    }
    reclone(source, url, auth, dir, known_heads, left)
}

/// Clones into a sibling directory and swaps it in only when complete, so a failed clone (the
/// remote is down too) leaves the old mirror as it was.
fn reclone(
    source: &str,
    url: &str,
    auth: Option<&GitAuth>,
    dir: &Path,
    known_heads: &BTreeMap<String, String>,
    deadline: Duration,
) -> Result<Fetched> {
    let sibling = |what: &str| {
        let mut name = dir.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{what}-{}", std::process::id()));
        dir.with_file_name(name)
    };
    let fresh = sibling("reclone");
    let _ = remove_any(&fresh);
    let fetched = match fetch_into(url, auth, &fresh, known_heads, deadline) {
        Ok(f) => f,
        Err(failure) => {
            let _ = remove_any(&fresh);
            return Err(in_source(source, url)(failure.into_error()));
        }
    };
    let old = sibling("damaged");
    let _ = remove_any(&old);
    let swapped = (|| {
        if std::fs::symlink_metadata(dir).is_ok() {
            std::fs::rename(dir, &old)?;
        }
        std::fs::rename(&fresh, dir)
    })();
    let _ = remove_any(&old);
    if let Err(e) = swapped {
        let _ = remove_any(&fresh);
        return Err(in_source(source, url)(Error::ReplaceMirror { dir: dir.to_owned(), source: e }));
    }
    info!(source, "cloned the Git mirror again");
    Ok(fetched)
}

/// Cancels a fetch at its deadline from another thread: sets gix's interrupt flag and shuts a
/// `git://` socket down, so even a read blocked on a silent server returns.
struct Watchdog {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    fired: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(deadline: Duration, interrupt: Arc<AtomicBool>, socket: Option<TcpStream>) -> Watchdog {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let thread = std::thread::Builder::new()
            .name("git-fetch-deadline".into())
            .spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(deadline) {
                    flag.store(true, Ordering::SeqCst);
                    interrupt.store(true, Ordering::SeqCst);
                    if let Some(s) = socket {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                }
            })
            .ok();
        Watchdog { done: Some(done), thread, fired }
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A `git://` URL's host, port and path.
fn git_daemon_address(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("git://")?;
    let (authority, path) = rest.split_once('/').map_or((rest, "/"), |(a, p)| (a, &rest[a.len()..p.len() + a.len() + 1]));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h.to_owned(), p.parse().ok()?),
        _ => (authority.to_owned(), 9418),
    };
    Some((host.trim_start_matches('[').trim_end_matches(']').to_owned(), port, path.to_owned()))
}

fn fetch_into(
    url: &str,
    auth: Option<&GitAuth>,
    dir: &Path,
    known_heads: &BTreeMap<String, String>,
    deadline: Duration,
) -> std::result::Result<Fetched, Failure> {
    let started = Instant::now();
    let repo = open_or_init(dir).map_err(Failure::Local)?;
    let (repo, refs) = if git_cli::uses_cli(url) {
        git_cli::fetch(url, auth, dir, started + deadline).map_err(|e| match e {
            git_cli::Error::TimedOut => Failure::Remote(Error::TimedOut { deadline }),
            e if e.is_local_damage() => Failure::Local(Error::Cli(e)),
            e => Failure::Remote(Error::Cli(e)),
        })?;
        // Opened again: the objects and refs git just wrote are read fresh.
        let repo = gix::open(dir).map_err(|e| Failure::Local(Error::OpenMirror { source: Box::new(e) }))?;
        let refs = mirror_refs(&repo).map_err(Failure::Local)?;
        (repo, refs)
    } else {
        let refs = fetch_gix(url, &repo, deadline, started)?;
        (repo, refs)
    };
    let mut out = Fetched::default();
    for (name, target) in &refs {
        if let Some(tag) = name.strip_prefix("refs/tags/") {
            // Peel locally: v1 servers do not always send the peeled id. An object the fetch
            // claims to have but the mirror cannot read is damage, not a tag to skip.
            let object = repo
                .find_object(*target)
                .map_err(|e| Failure::Local(Error::MissingObject { tag: tag.to_owned(), object: *target, source: Box::new(e) }))?;
            if object.kind == gix::object::Kind::Tag && object.data.len() <= MAX_TAG_OBJECT_BYTES {
                out.tag_objects.insert(tag.to_owned(), object.data.clone());
            }
            match object.peel_to_commit().ok() {
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

/// Fetches `file://` and `git://` in-process; returns the refs the remote advertised.
fn fetch_gix(url: &str, repo: &Repository, deadline: Duration, started: Instant) -> std::result::Result<Vec<(String, ObjectId)>, Failure> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let invalid = |step| move |e: gix::Error| Failure::Remote(Error::InvalidRemote { step, source: Box::new(e) });
    let remote = repo.remote_at(url).map_err(invalid("invalid URL"))?;
    let remote = remote
        .with_fetch_tags(Tags::None)
        .with_refspecs(["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], Direction::Fetch)
        .map_err(invalid("refspecs"))?;
    let remote_err = |step: &'static str, watchdog: &Watchdog| {
        let fired = watchdog.fired();
        move |e: gix::Error| {
            if fired || started.elapsed() >= deadline {
                Error::TimedOut { deadline }
            } else if is_silence(&e) {
                // A blocked read of a `git://` socket ends at its read timeout as `WouldBlock`:
                // that is the remote's silence, not a handshake gone wrong.
                Error::Silent { step, silence: READ_TIMEOUT.min(deadline) }
            } else {
                Error::Remote { step, source: Box::new(e) }
            }
        }
    };
    // git:// runs over a socket we open, so the deadline can shut it under a blocked read;
    // other schemes (file://: a local git-upload-pack) stop at gix's interrupt checks.
    let outcome = if let Some((host, port, path)) = git_daemon_address(url) {
        let stream = connect(&host, port, deadline).map_err(|source| Failure::Remote(Error::Connect { source }))?;
        let watchdog = Watchdog::start(deadline.saturating_sub(started.elapsed()), interrupt.clone(), stream.try_clone().ok());
        let write = stream.try_clone().map_err(|source| Failure::Remote(Error::Connect { source }))?;
        let transport = gix::protocol::transport::client::git::blocking_io::Connection::new(
            stream,
            write,
            gix::protocol::transport::Protocol::V2,
            path,
            Some((host, Some(port))),
            gix::protocol::transport::client::git::ConnectMode::Daemon,
            false,
        );
        let prepared = remote
            .to_connection_with_transport(transport)
            .prepare_fetch(gix::progress::Discard, gix::remote::ref_map::Options::default())
            .map_err(|e| Failure::Remote(remote_err("listing refs", &watchdog)(e)))?;
        let received = prepared.receive(gix::progress::Discard, &interrupt);
        received.map_err(|e| Failure::Receiving(remote_err("fetching", &watchdog)(e)))
    } else {
        let watchdog = Watchdog::start(deadline, interrupt.clone(), None);
        let prepared = remote
            .connect(Direction::Fetch)
            .map_err(|e| Failure::Remote(remote_err("connecting", &watchdog)(e)))?
            .prepare_fetch(gix::progress::Discard, gix::remote::ref_map::Options::default())
            .map_err(|e| Failure::Remote(remote_err("listing refs", &watchdog)(e)))?;
        let received = prepared.receive(gix::progress::Discard, &interrupt);
        received.map_err(|e| Failure::Receiving(remote_err("fetching", &watchdog)(e)))
    };
    let outcome = match outcome {
        Ok(o) => o,
        // A timeout is the remote's doing, never a reason to clone again.
        Err(Failure::Receiving(e)) if started.elapsed() >= deadline => return Err(Failure::Remote(e)),
        Err(e) => return Err(e),
    };
    let mut refs = Vec::new();
    for r in &outcome.ref_map.remote_refs {
        if let Ref::Unborn { .. } = r {
            continue;
        }
        let (name, target, _peeled) = r.unpack();
        if let Some(target) = target {
            refs.push((name.to_str_lossy().into_owned(), target.to_owned()));
        }
    }
    Ok(refs)
}

/// The branches and tags of a mirror `git fetch --prune` just updated: exactly the remote's.
fn mirror_refs(repo: &Repository) -> std::result::Result<Vec<(String, ObjectId)>, Error> {
    let read = |e| Error::ReadRefs { source: Box::new(e) };
    let platform = repo.references().map_err(read)?;
    let mut refs = Vec::new();
    for r in platform.all().map_err(read)? {
        let r = r.map_err(read)?;
        if let Some(id) = r.target().try_id() {
            refs.push((r.name().as_bstr().to_str_lossy().into_owned(), id.to_owned()));
        }
    }
    Ok(refs)
}

/// A gix error with its causes, each said by its message. gix's own alternate form (`{:#}`)
/// says each cause as a Rust debug struct (`Message { message: "Failed to prepare fetch
/// negotiation" }`), its plain one only the outermost step.
fn causes(e: &gix::Error) -> impl std::fmt::Display + '_ {
    struct Causes<'a>(&'a gix::Error);
    impl std::fmt::Display for Causes<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let mut said = 0;
            // A nested gix error is a boundary: its own errors follow it. An I/O error that
            // wraps another says that one's message, which follows it too.
            let steps = self
                .0
                .iter_errors()
                .filter(|e| !e.is::<gix::Error>() && e.downcast_ref::<std::io::Error>().is_none_or(|io| io.get_ref().is_none()));
            for step in steps {
                let text = step.to_string();
                if text.is_empty() {
                    continue;
                }
                if said > 0 {
                    f.write_str(": ")?;
                }
                f.write_str(&text)?;
                said += 1;
            }
            if said == 0 { write!(f, "{}", self.0) } else { Ok(()) }
        }
    }
    Causes(e)
}

/// Whether an error comes from a read or write that timed out (`WouldBlock` / `TimedOut` of a
/// socket with a timeout), anywhere in its chain of causes or, where a cause was flattened into
/// text, in its message.
fn is_silence(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>().is_some_and(|io| matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)) {
            return true;
        }
        cause = c.source();
    }
    let text = format!("{e:#}");
    text.contains("WouldBlock") || text.contains("Resource temporarily unavailable")
}

/// Connects with the remaining deadline as connect timeout and a bounded silence per read.
fn connect(host: &str, port: u16, deadline: Duration) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::other(format!("{host}:{port} resolves to no address"));
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, deadline.min(Duration::from_secs(10))) {
            Ok(s) => {
                s.set_read_timeout(Some(READ_TIMEOUT.min(deadline)))?;
                s.set_write_timeout(Some(READ_TIMEOUT.min(deadline)))?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
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
pub fn materialise(dir: &Path, commit: &str, dest: &Path) -> std::result::Result<u64, Error> {
    let result = materialise_from(dir, commit, dest);
    if result.as_ref().is_err_and(Error::damages_mirror) {
        // Whatever broke (a missing or unreadable object, an unopenable mirror), the next fetch
        // clones the mirror again rather than failing the same way forever.
        let _ = std::fs::write(dir.join(DAMAGED_MARKER), b"");
    }
    result
}

fn materialise_from(dir: &Path, commit: &str, dest: &Path) -> std::result::Result<u64, Error> {
    let repo = gix::open(dir).map_err(|e| Error::OpenMirror { source: Box::new(e) })?;
    let id = ObjectId::from_hex(commit.as_bytes()).map_err(|e| Error::BadCommit { source: Box::new(e) })?;
    let commit = repo.find_object(id).and_then(|o| o.peel_to_commit()).map_err(|e| Error::CommitMissing { source: Box::new(e) })?;
    let tree = commit.tree().map_err(|e| Error::ReadObject { path: PathBuf::new(), source: Box::new(e) })?;
    let mut files = 0;
    write_tree(&repo, tree, dest, &PathBuf::new(), &mut files)?;
    Ok(files)
}

fn write_tree(repo: &Repository, tree: gix::Tree<'_>, dest: &Path, rel: &Path, files: &mut u64) -> std::result::Result<(), Error> {
    let read = |path: &Path| {
        let path = path.to_owned();
        move |e| Error::ReadObject { path, source: Box::new(e) }
    };
    for entry in tree.iter() {
        let entry = entry.map_err(|e| read(rel)(e))?;
        let name = entry.filename().to_str_lossy().into_owned();
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) || name.eq_ignore_ascii_case(".git") {
            return Err(Error::UnsafeEntry { name, dir: rel.to_owned() });
        }
        let rel_path = rel.join(&name);
        let path = dest.join(&rel_path);
        match entry.mode().kind() {
            EntryKind::Tree => {
                std::fs::create_dir(&path).map_err(|source| Error::CreateDir { path: rel_path.clone(), source })?;
                let sub = repo.find_tree(entry.object_id()).map_err(|e| read(&rel_path)(e))?;
                write_tree(repo, sub, dest, &rel_path, files)?;
            }
            EntryKind::Blob | EntryKind::BlobExecutable => {
                let mut blob = repo.find_blob(entry.object_id()).map_err(|e| read(&rel_path)(e))?;
                std::fs::write(&path, blob.take_data()).map_err(|source| Error::WriteFile { path: rel_path.clone(), source })?;
                *files += 1;
            }
            EntryKind::Link => tracing::warn!(path = %rel_path.display(), "skipping symlink in release tree"),
            EntryKind::Commit => tracing::warn!(path = %rel_path.display(), "skipping submodule in release tree"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.test", "-c", "commit.gpgsign=false"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Regression: Git mirror warnings said gix's causes as Rust debug structs (`Message {
    /// message: "Failed to prepare fetch negotiation" }`).
    #[test]
    fn a_gix_error_is_said_by_its_messages_not_debug_structs() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
        let gix = gix::Exn::new(refused).raise(gix::error::message("Failed to prepare fetch negotiation")).into_error();
        let e = Error::Remote { step: "fetching", source: Box::new(gix) };
        assert_eq!(e.to_string(), "fetching: Failed to prepare fetch negotiation: connection reset by peer");
        let flat = gix::Exn::new(gix::error::message("only this")).into_error();
        assert_eq!(Error::OpenMirror { source: Box::new(flat) }.to_string(), "opening the mirror: only this");
    }

    /// Regression: a `git://` remote that accepted and then said nothing was reported as
    /// "Transport handshake failed … WouldBlock".
    #[test]
    fn a_silent_remote_is_named_as_silence_not_a_failed_handshake() {
        #[derive(Debug, thiserror::Error)]
        #[error("Transport handshake failed")]
        struct Handshake(#[source] std::io::Error);
        let blocked = Handshake(std::io::Error::from(std::io::ErrorKind::WouldBlock));
        assert!(is_silence(&blocked));
        assert!(!is_silence(&Handshake(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))));
        let e = Error::Silent { step: "listing refs", silence: READ_TIMEOUT };
        assert_eq!(e.to_string(), "listing refs: the remote sent nothing for 30s (a git:// read waits at most that long)");
        assert!(e.is_transient());
        assert_eq!(e.reason(), "Timeout");
    }

    #[test]
    fn a_failed_materialisation_marks_the_mirror_only_when_the_mirror_broke() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q"]);
        std::fs::write(work.join("a.yaml"), "a: 1\n").unwrap();
        git(&work, &["add", "a.yaml"]);
        git(&work, &["commit", "-q", "-m", "one"]);
        let commit = git(&work, &["rev-parse", "HEAD"]);
        let mirror = tmp.path().join("mirror.git");
        git(tmp.path(), &["clone", "-q", "--bare", work.to_str().unwrap(), mirror.to_str().unwrap()]);
        let marked = |dir: &Path| dir.join(DAMAGED_MARKER).exists();

        // The destination's trouble (it does not exist): a cache write, transient, the mirror is fine.
        let err = materialise(&mirror, &commit, &tmp.path().join("missing")).unwrap_err();
        assert!(matches!(err, Error::WriteFile { .. }) && err.is_transient() && err.reason() == "CacheWrite", "{err:?}");
        assert!(!marked(&mirror));
        // A commit the mirror lacks: damage, cloned again at the next fetch.
        let dest = tmp.path().join("dest");
        std::fs::create_dir(&dest).unwrap();
        let err = materialise(&mirror, &"0".repeat(40), &dest).unwrap_err();
        assert!(matches!(err, Error::CommitMissing { .. }) && err.is_transient(), "{err:?}");
        assert!(err.to_string().starts_with("commit not in the mirror: "), "{err}");
        assert!(marked(&mirror));
        std::fs::remove_file(mirror.join(DAMAGED_MARKER)).unwrap();
        // Not a repository at all.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let err = materialise(&empty, &commit, &dest).unwrap_err();
        assert!(matches!(err, Error::OpenMirror { .. }) && err.reason() == "GitMirror", "{err:?}");
        assert!(marked(&empty));
        // And the release itself.
        assert_eq!(materialise(&mirror, &commit, &dest).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(dest.join("a.yaml")).unwrap(), "a: 1\n");
    }

    #[test]
    fn a_fetch_error_names_source_and_url_and_keeps_its_cause() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("file://{}", tmp.path().join("nowhere").display());
        let err = fetch_with_deadline("stacks", &url, &tmp.path().join("m.git"), &BTreeMap::new(), Duration::from_secs(20)).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with(&format!("source stacks ({url}): ")), "{text}");
        // The cause is the typed git::Error (boxed in source::Error, so the Box is what `source` gives).
        assert!(std::error::Error::source(&err).is_some_and(|s| s.downcast_ref::<Box<Error>>().is_some()), "{err:?}");
        assert!(err.is_transient(), "an unreachable remote may come back: {err:?}");
    }
}
