//! Renders of cluster-stack charts as `helm template` prints them, with a bounded number of
//! concurrent renders and a time limit each: by the library renderer ([`super::renderer`], helm's
//! own Go library in one long-lived process: `helm.renderer: library`, the default), or by the
//! real `helm` binary, one `helm template` process per render (`helm.renderer: process`, as Argo
//! CD and the SCS cluster-stack-operator do). Both take the same `helm template` arguments.
//!
//! helm runs isolated from the user's helm setup: `HELM_CACHE_HOME`, `HELM_CONFIG_HOME` and
//! `HELM_DATA_HOME` point into a work directory, so no plugin, repository or registry login
//! changes the output; charts must vendor their dependencies (as `helm package` does).
//!
//! Renders are memoised in memory ([`Memo`]): callers key each render by what decides its output
//! (release identity, chart, values content, helm and Kubernetes versions, namespace), so an
//! unchanged resync runs helm zero times. With [`Helm::with_disk`] they are also kept on disk
//! ([`Disk`], the cache volume's `renders/`), grouped by release and collected with it, so a
//! restarted process does not run helm again for what it rendered before.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use tokio::sync::Semaphore;

use super::renderer::{self, Renderer, Template};
use crate::config::{HelmConfig, HelmRenderer};
use crate::model::sync::MutexExt;

/// Environment variable naming the helm binary when the config does not.
pub const ENV_HELM: &str = "STACKSYNC_HELM";
/// The longest helm error output kept in a message.
const MAX_STDERR: usize = 2000;
/// The first helm 3 minor with `helm template --kube-version`.
const MIN_HELM3_MINOR: u64 = 6;
/// `helm version` must answer within this.
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of rendered output the memo keeps; the oldest renders go first.
pub const MEMO_BYTES: usize = 64 * 1024 * 1024;

/// What a stand-in render's memo key adds to the real render's ([`Helm::with_stand_ins`]).
const STAND_IN: &[u8] = b"stand-in: a probe, never applied where nothing generated is live";

/// What went wrong finding or running helm. Cheap to clone (I/O causes are shared), so the
/// process's one located helm, or why there is none, can be handed to every render.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(
        "helm not found: {0}; set `helm.path` in the config or {ENV_HELM}, or install helm 3.6 or later (for the tests: scripts/install-tools.sh)"
    )]
    NotFound(Missing),
    /// `helm version` could not be started.
    #[error("{path}: `helm version` failed: {source}")]
    VersionRun {
        path: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("{path}: `helm version` failed: no answer within {seconds}s")]
    VersionTimeout { path: String, seconds: u64 },
    /// `helm version` ran and failed; `stderr` is an excerpt of its error output.
    #[error("{path}: `helm version` failed: {stderr}")]
    VersionFailed { path: String, stderr: String },
    #[error(
        "{path}: `helm version` failed: unsupported version `{version}`; helm 3.{MIN_HELM3_MINOR} or later is needed (`helm template --kube-version`)"
    )]
    Unsupported { path: String, version: String },
    /// `helm template` could not be started.
    #[error("cannot run {path}: {source}")]
    Spawn {
        path: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("helm template {chart} did not finish within {seconds}s")]
    Timeout { chart: String, seconds: u64 },
    /// `helm template` ran and failed; `stderr` is an excerpt of its error output.
    #[error("helm template {chart} failed ({}): {stderr}", describe(.status))]
    Template { chart: String, status: std::process::ExitStatus, stderr: String },
    /// The library renderer (`helm.renderer: library`) is missing, refused a chart or failed.
    #[error(transparent)]
    Library(#[from] renderer::Error),
}

/// Where helm was looked for and not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error("`helm.path` {} does not exist", .0.display())]
    ConfigPath(PathBuf),
    #[error("{ENV_HELM}={} does not exist", .0.display())]
    EnvPath(PathBuf),
    #[error("no `helm` on PATH")]
    NotOnPath,
}

impl Error {
    /// Whether trying again soon may succeed with nothing changed: helm could not be started,
    /// did not answer in time or was killed by a signal (out of memory). A missing or too old
    /// helm needs the installation or the config changed; a failing chart, the release.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::VersionRun { .. } | Error::VersionTimeout { .. } | Error::Spawn { .. } | Error::Timeout { .. } => true,
            Error::Template { status, .. } => status.code().is_none(),
            Error::Library(e) => e.is_transient(),
            Error::NotFound(_) | Error::VersionFailed { .. } | Error::Unsupported { .. } => false,
        }
    }

    /// A short stable CamelCase name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "HelmNotFound",
            Error::VersionRun { .. } | Error::VersionTimeout { .. } | Error::VersionFailed { .. } => "HelmVersion",
            Error::Unsupported { .. } => "HelmUnsupported",
            Error::Spawn { .. } => "HelmSpawn",
            Error::Timeout { .. } => "HelmTimeout",
            Error::Template { .. } => "HelmTemplateFailed",
            Error::Library(e) => e.reason(),
        }
    }
}

/// How a helm process ended, as messages say it.
fn describe(status: &std::process::ExitStatus) -> String {
    status.code().map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit code {c}"))
}

/// A located, version-checked helm: the library renderer or the helm binary. Cheap to clone;
/// clones share the concurrency bound (and the library renderer's process).
#[derive(Debug, Clone)]
pub struct Helm {
    /// The library renderer; `None`: the helm binary at `path` runs per render.
    library: Option<Renderer>,
    path: PathBuf,
    version: String,
    permits: Arc<Semaphore>,
    timeout: Duration,
    home: Option<PathBuf>,
    memo: Arc<Mutex<Memo>>,
    /// The on-disk tier of the memo, if any.
    disk: Option<Arc<Disk>>,
    /// Renders run (renders the memo answered are not counted).
    runs: Arc<AtomicU64>,
    /// Every render is a probe ([`Helm::probes_only`]).
    probes_only: bool,
    /// A chart that generates is rendered once as a probe when the memo has no real render of it
    /// ([`Helm::with_stand_ins`]).
    stand_ins: bool,
}

/// Bytes of rendered output kept on disk; past it, new renders are not written (until garbage
/// collection removes the renders of releases no longer kept).
pub const DISK_BYTES: u64 = 512 * 1024 * 1024;

/// The on-disk memo: `<dir>/<group>/<key>.yaml`, one group per release ([`render_group`]),
/// each file the render after a `# sha256:<hex>` line (checked on every read: a damaged file is
/// a miss), written to a temporary file and renamed into place.
#[derive(Debug)]
pub struct Disk {
    dir: PathBuf,
    /// Bytes written under `dir`, counted once at start and kept up to date.
    bytes: AtomicU64,
    limit: u64,
}

/// The group of a release's renders on disk: a digest of its tag and commit.
pub fn render_group(tag: &str, commit: &str) -> String {
    let mut h = Sha256::new();
    h.update(tag.as_bytes());
    h.update(b"@");
    h.update(commit.as_bytes());
    hex::encode(&h.finalize()[..12])
}

impl Disk {
    pub fn open(dir: &Path, limit: u64) -> Disk {
        let bytes = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|group| std::fs::read_dir(group.path()).into_iter().flatten().flatten())
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum();
        Disk { dir: dir.to_path_buf(), bytes: AtomicU64::new(bytes), limit }
    }

    fn file(&self, group: &str, key: &MemoKey) -> PathBuf {
        self.dir.join(group).join(format!("{}.yaml", hex::encode(key.0)))
    }

    /// The render kept for `key`, if its file is there, not larger than the memory memo allows,
    /// and intact.
    fn get(&self, group: &str, key: &MemoKey) -> Option<Arc<str>> {
        let path = self.file(group, key);
        let len = std::fs::metadata(&path).ok()?.len();
        if len > MEMO_BYTES as u64 + 128 {
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let (head, body) = text.split_once('\n')?;
        let want = head.strip_prefix("# sha256:")?;
        (hex::encode(Sha256::digest(body.as_bytes())) == want).then(|| body.into())
    }

    /// Keeps `output` for `key` unless the limit is reached. Best effort: a render that cannot be
    /// written is rendered again next time.
    fn put(&self, group: &str, key: &MemoKey, output: &str) {
        let len = output.len() as u64 + 80;
        if self.bytes.load(Ordering::Relaxed) + len > self.limit {
            return;
        }
        let path = self.file(group, key);
        let text = format!("# sha256:{}\n{output}", hex::encode(Sha256::digest(output.as_bytes())));
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, &text))
            .and_then(|()| std::fs::rename(&tmp, &path));
        match written {
            Ok(()) => {
                self.bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::debug!(path = %path.display(), error = %e, "cannot keep a helm render on disk");
            }
        }
    }

    /// Removes the renders of every release whose group is not in `keep`.
    pub fn collect(&self, keep: &std::collections::HashSet<String>) {
        for group in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = group.file_name().to_string_lossy().into_owned();
            if keep.contains(&name) {
                continue;
            }
            let size: u64 =
                std::fs::read_dir(group.path()).into_iter().flatten().flatten().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
            if std::fs::remove_dir_all(group.path()).is_ok() {
                self.bytes.fetch_sub(size.min(self.bytes.load(Ordering::Relaxed)), Ordering::Relaxed);
                tracing::debug!(group = %name, "helm renders of a collected release removed");
            }
        }
    }

    /// Bytes kept on disk.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// What decides a render's output, hashed: see [`Helm::template_memoised`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoKey([u8; 32]);

impl MemoKey {
    /// The key of `parts` (each length-prefixed, so no two lists of parts collide).
    pub fn of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> MemoKey {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        MemoKey(h.finalize().into())
    }

    /// This key narrowed by `part` (e.g. one Cluster's identity).
    pub fn with(&self, part: &[u8]) -> MemoKey {
        MemoKey::of([self.0.as_slice(), part])
    }
}

/// Rendered outputs by key, at most `limit` bytes of them, the oldest evicted first.
#[derive(Debug)]
pub struct Memo {
    outputs: HashMap<MemoKey, Arc<str>>,
    order: VecDeque<MemoKey>,
    bytes: usize,
    limit: usize,
}

impl Memo {
    pub fn new(limit: usize) -> Memo {
        Memo { outputs: HashMap::new(), order: VecDeque::new(), bytes: 0, limit }
    }

    pub fn get(&self, key: &MemoKey) -> Option<Arc<str>> {
        self.outputs.get(key).cloned()
    }

    /// Keeps `output` (not when it alone exceeds the limit), evicting the oldest to fit.
    pub fn insert(&mut self, key: MemoKey, output: Arc<str>) {
        if output.len() > self.limit || self.outputs.contains_key(&key) {
            return;
        }
        while self.bytes + output.len() > self.limit {
            let Some(old) = self.order.pop_front() else { break };
            if let Some(o) = self.outputs.remove(&old) {
                self.bytes -= o.len();
            }
        }
        self.bytes += output.len();
        self.order.push_back(key);
        self.outputs.insert(key, output);
    }

    /// Bytes of output kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Helm {
    /// The renderer the config names: the library renderer (started, and checked to render as
    /// helm [`renderer::HELM_VERSION`]: [`Renderer::locate`]), or the helm binary (config `path`,
    /// else `$STACKSYNC_HELM`, else `helm` on `PATH`, whose `helm version --short` must report
    /// version 3.6 or later).
    ///
    /// # Errors
    /// The renderer or helm is missing, does not run, or is of another (too old) version.
    pub async fn locate(config: &HelmConfig) -> Result<Helm, Error> {
        if config.renderer == HelmRenderer::Library {
            let library = Renderer::locate(config.renderer_path.as_deref()).await?;
            return Ok(Helm {
                path: library.path().to_path_buf(),
                version: library.version().to_owned(),
                library: Some(library),
                ..Helm::new(PathBuf::new(), String::new(), config)
            });
        }
        let path = match (&config.path, std::env::var_os(ENV_HELM).filter(|v| !v.is_empty())) {
            (Some(p), _) => {
                if !p.is_file() {
                    return Err(Error::NotFound(Missing::ConfigPath(p.clone())));
                }
                p.clone()
            }
            (None, Some(p)) => {
                let p = PathBuf::from(p);
                if !p.is_file() {
                    return Err(Error::NotFound(Missing::EnvPath(p)));
                }
                p
            }
            (None, None) => search_path("helm").ok_or(Error::NotFound(Missing::NotOnPath))?,
        };
        let shown = path.display().to_string();
        let run = tokio::process::Command::new(&path).args(["version", "--short"]).stdin(Stdio::null()).kill_on_drop(true).output();
        let out = match tokio::time::timeout(VERSION_TIMEOUT, run).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(Error::VersionRun { path: shown, source: Arc::new(e) }),
            Err(_) => return Err(Error::VersionTimeout { path: shown, seconds: VERSION_TIMEOUT.as_secs() }),
        };
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() {
            return Err(Error::VersionFailed { path: shown, stderr: excerpt(&String::from_utf8_lossy(&out.stderr)) });
        }
        let mut parts = version.strip_prefix('v').unwrap_or_default().split(['.', '+', '-']).map(|p| p.parse::<u64>().ok());
        let (major, minor) = (parts.next().flatten(), parts.next().flatten());
        // `helm template --kube-version` (every addon render) exists from helm 3.6 on; an older helm
        // would fail each render with "unknown flag" instead of failing here.
        match (major, minor) {
            (Some(m), _) if m >= 4 => {}
            (Some(3), Some(n)) if n >= MIN_HELM3_MINOR => {}
            _ => {
                return Err(Error::Unsupported { path: shown, version });
            }
        }
        Ok(Helm::new(path, version, config))
    }

    fn new(path: PathBuf, version: String, config: &HelmConfig) -> Helm {
        Helm {
            library: None,
            path,
            version,
            permits: Arc::new(Semaphore::new(config.parallelism.max(1))),
            timeout: config.timeout,
            home: None,
            memo: Arc::new(Mutex::new(Memo::new(MEMO_BYTES))),
            disk: None,
            runs: Arc::new(AtomicU64::new(0)),
            probes_only: false,
            stand_ins: false,
        }
    }

    /// The same helm rendering every chart as a probe (with the library renderer; see
    /// [`Template::probe`]): no key, certificate or bcrypt hash is generated, each is random text
    /// of its shape. For `stacksync preview`, which applies nothing and keeps every generated
    /// field's live value: its renders cost no key generation. Its renders are memoised apart
    /// from real ones and never on disk, so no probe is ever taken for a real render.
    #[must_use]
    pub fn probes_only(&self) -> Helm {
        Helm { memo: Arc::new(Mutex::new(Memo::new(MEMO_BYTES))), disk: None, probes_only: self.probes(), ..self.clone() }
    }

    /// The same helm (and memo), except that a chart that generates at render time and that the
    /// memo has no real render of is rendered once, as a probe: its generated fields hold
    /// stand-ins, never to be applied (see [`crate::render::clusterstack::RenderedStage::stand_ins`]).
    /// For a Cluster whose ClusterSync records what its charts generate, after a restart on an
    /// empty cache: the applier keeps each generated field's live value, so the keys a real render
    /// would make are thrown away; the caller checks the stand-in render against the recorded
    /// digest and renders for real when it differs. Stand-in renders are memoised as real ones
    /// are (in memory and on disk, so a quiet resync after a restart renders nothing), under keys
    /// of their own: no stand-in ever answers for a real render. With `helm.renderer: process`
    /// (no probes), the same helm.
    #[must_use]
    pub fn with_stand_ins(&self) -> Helm {
        Helm { stand_ins: self.probes(), ..self.clone() }
    }

    /// Whether a chart that generates is rendered as a stand-in on a memo miss ([`Helm::with_stand_ins`]).
    pub fn renders_stand_ins(&self) -> bool {
        self.stand_ins
    }

    /// The stand-in render kept for `key` (the real render's key), if any ([`Helm::recall`]).
    pub fn recall_stand_in(&self, group: &str, key: &MemoKey) -> Option<Arc<str>> {
        self.recall(group, &key.with(STAND_IN))
    }

    /// Keeps a stand-in render for `key` (the real render's key), as [`Helm::remember`] does.
    pub fn remember_stand_in(&self, group: &str, key: &MemoKey, out: &Arc<str>) {
        self.remember(group, &key.with(STAND_IN), out);
    }

    /// The same helm with a memo of its own, empty, and none on disk: every render runs helm
    /// (`stacksync adopt` renders twice to find what a chart generates at render time).
    #[must_use]
    pub fn without_memo(&self) -> Helm {
        Helm { memo: Arc::new(Mutex::new(Memo::new(MEMO_BYTES))), disk: None, ..self.clone() }
    }

    /// Keeps renders on disk under `dir` too (the cache volume's `renders/`), at most
    /// [`DISK_BYTES`] of them: a restarted process answers from there instead of running helm.
    #[must_use]
    pub fn with_disk(mut self, dir: &Path) -> Helm {
        self.disk = Some(Arc::new(Disk::open(dir, DISK_BYTES)));
        self
    }

    /// The on-disk memo, if any (garbage collection removes the renders of collected releases).
    pub fn disk(&self) -> Option<&Disk> {
        self.disk.as_deref()
    }

    /// Keeps helm's cache, config and data directories under `dir` (see the module docs).
    #[must_use]
    pub fn with_home(mut self, dir: &Path) -> Helm {
        self.home = Some(dir.to_path_buf());
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// As `helm version --short` printed it, e.g. `v4.1.4+g05fa379`; for the library renderer,
    /// the helm version it is built on, e.g. `v4.3.2`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The library renderer, when charts are rendered by it.
    pub fn library(&self) -> Option<&Renderer> {
        self.library.as_ref()
    }

    /// How charts are rendered, for logs: `library renderer` or `helm binary`.
    pub fn kind(&self) -> &'static str {
        if self.library.is_some() { "library renderer" } else { "helm binary" }
    }

    /// Lets the library renderer drop the loaded charts of every release whose render group
    /// ([`render_group`]) is not in `keep` (garbage collection). Nothing for the helm binary.
    pub async fn collect(&self, keep: &std::collections::HashSet<String>) {
        if let Some(library) = &self.library {
            let _ = library.retain(&keep.iter().cloned().collect::<Vec<_>>()).await;
        }
    }

    /// How many renders this helm (and its clones) ran: helm processes started, or library renders.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// The memo's answer for `key` (helm's version added, as [`Helm::recall`] does), if memory has one.
    pub fn memoised(&self, key: &MemoKey) -> Option<Arc<str>> {
        self.memo.locked().get(&self.versioned(key))
    }

    /// `key` with helm's version: a render is only ever answered for the helm that made it.
    fn versioned(&self, key: &MemoKey) -> MemoKey {
        let probe: &[u8] = if self.probes_only { b"probe" } else { b"" };
        MemoKey::of([key.0.as_slice(), self.version.as_bytes(), probe])
    }

    /// The memo's answer for `key`: from memory, else from the disk tier (`group` is the
    /// release's, [`render_group`]), which memory then keeps.
    pub fn recall(&self, group: &str, key: &MemoKey) -> Option<Arc<str>> {
        let key = self.versioned(key);
        if let Some(out) = self.memo.locked().get(&key) {
            return Some(out);
        }
        let out = self.disk.as_ref().and_then(|d| d.get(group, &key))?;
        self.memo.locked().insert(key, out.clone());
        Some(out)
    }

    /// Keeps `out` as the answer for `key`, in memory and on disk.
    pub fn remember(&self, group: &str, key: &MemoKey, out: &Arc<str>) {
        let key = self.versioned(key);
        if let Some(disk) = &self.disk {
            disk.put(group, &key, out);
        }
        self.memo.locked().insert(key, out.clone());
    }

    /// As [`Helm::template`], answered from the memo when `key` was rendered before. The caller
    /// makes `key` from everything that decides the output besides helm's version (added here):
    /// release identity, chart, values content, Kubernetes version, namespace. Failures are not
    /// memoised.
    ///
    /// # Errors
    /// As [`Helm::template`].
    pub async fn template_memoised(&self, group: &str, key: MemoKey, chart: &str, args: &[OsString]) -> Result<Arc<str>, Error> {
        if let Some(out) = self.recall(group, &key) {
            return Ok(out);
        }
        let out: Arc<str> = self.template_in(group, chart, args).await?.into();
        self.remember(group, &key, &out);
        Ok(out)
    }

    /// Runs `helm template ARGS` and returns its standard output. Waits for a free slot first;
    /// the time limit counts from the start of the run. `chart` names the chart in errors.
    /// The library renderer takes the arguments stacksync passes (release name, chart,
    /// `--namespace`, `--kube-version`, `--include-crds`, `-f`) and refuses any other.
    ///
    /// Cancellation-safe: dropping the future kills helm (the library renderer finishes the
    /// render and drops it).
    ///
    /// # Errors
    /// helm cannot be started, fails (with an excerpt of its standard error) or times out; the
    /// library renderer refuses an argument, fails (helm's message) or dies.
    pub async fn template(&self, chart: &str, args: &[OsString]) -> Result<String, Error> {
        self.template_in("", chart, args).await
    }

    /// As [`Helm::template`], for a chart of the release whose renders are `group`: the library
    /// renderer keeps the chart loaded until [`Helm::collect`] drops the group.
    ///
    /// # Errors
    /// As [`Helm::template`].
    pub async fn template_in(&self, group: &str, chart: &str, args: &[OsString]) -> Result<String, Error> {
        self.timed(group, chart, args, false).await
    }

    /// A probe render of the same arguments (see [`Template::probe`]): with the library renderer,
    /// the chart rendered with cheap stand-ins for key, certificate and bcrypt generation, to be
    /// compared with a real render; `None` with `helm.renderer: process` (the helm binary has no
    /// such mode: compare two real renders).
    ///
    /// # Errors
    /// As [`Helm::template`].
    pub async fn probe_in(&self, group: &str, chart: &str, args: &[OsString]) -> Option<Result<String, Error>> {
        if !self.probes() {
            return None;
        }
        Some(self.timed(group, chart, args, true).await)
    }

    /// Whether [`Helm::probe_in`] renders (the library renderer is in use and renders probes).
    pub fn probes(&self) -> bool {
        self.library.as_ref().is_some_and(Renderer::probes)
    }

    async fn timed(&self, group: &str, chart: &str, args: &[OsString], probe: bool) -> Result<String, Error> {
        let started = std::time::Instant::now();
        let result = self.run_template(group, chart, args, probe).await;
        let outcome = match &result {
            // A probe the chart cannot run (it parses a generated key back) is no failure: a
            // real render takes its place.
            Err(_) if probe => return result,
            Ok(_) => "success",
            Err(Error::Timeout { .. } | Error::Library(renderer::Error::Timeout { .. })) => "timeout",
            Err(_) => "error",
        };
        crate::telemetry::metrics().helm_ran(outcome, started.elapsed());
        result
    }

    async fn run_template(&self, group: &str, chart: &str, args: &[OsString], probe: bool) -> Result<String, Error> {
        // The semaphore is never closed; were it, no helm could run.
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| Error::Spawn { path: self.path.display().to_string(), source: Arc::new(std::io::Error::other(e)) })?;
        if let Some(library) = &self.library {
            let mut template =
                Template::from_args(args).map_err(|arg| renderer::Error::Refused { chart: chart.to_owned(), arg: arg.to_string() })?;
            template.probe = probe || self.probes_only;
            self.runs.fetch_add(1, Ordering::Relaxed);
            return Ok(library.render(group, chart, &template, self.timeout).await?);
        }
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.arg("template").args(args).stdin(Stdio::null()).kill_on_drop(true);
        if let Some(home) = &self.home {
            cmd.env("HELM_CACHE_HOME", home.join("cache"))
                .env("HELM_CONFIG_HOME", home.join("config"))
                .env("HELM_DATA_HOME", home.join("data"));
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        let out = match tokio::time::timeout(self.timeout, cmd.output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(Error::Spawn { path: self.path.display().to_string(), source: Arc::new(e) }),
            Err(_) => return Err(Error::Timeout { chart: chart.to_owned(), seconds: self.timeout.as_secs() }),
        };
        if !out.status.success() {
            return Err(Error::Template {
                chart: chart.to_owned(),
                status: out.status,
                stderr: excerpt(&String::from_utf8_lossy(&out.stderr)),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn search_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The first part of helm's error output, on one line.
fn excerpt(stderr: &str) -> String {
    let one_line = stderr.trim().replace('\n', " | ");
    if one_line.len() <= MAX_STDERR {
        return one_line;
    }
    let mut end = MAX_STDERR;
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &one_line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_chart_is_permanent_a_killed_or_slow_helm_may_pass() {
        use std::os::unix::process::ExitStatusExt as _;
        let failed = |raw| Error::Template { chart: "c".into(), status: std::process::ExitStatus::from_raw(raw), stderr: "e".into() };
        assert_eq!(
            (failed(1 << 8).is_transient(), failed(1 << 8).to_string().as_str()),
            (false, "helm template c failed (exit code 1): e")
        );
        assert_eq!((failed(9).is_transient(), failed(9).to_string().as_str()), (true, "helm template c failed (killed by a signal): e"));
        let spawn = Error::Spawn { path: "/bin/helm".into(), source: Arc::new(std::io::ErrorKind::OutOfMemory.into()) };
        assert_eq!((spawn.is_transient(), spawn.reason()), (true, "HelmSpawn"));
        assert!(std::error::Error::source(&spawn).is_some());
        let old = Error::Unsupported { path: "/bin/helm".into(), version: "v3.5.0".into() };
        assert_eq!((old.is_transient(), old.reason()), (false, "HelmUnsupported"));
        assert!(old.to_string().starts_with("/bin/helm: `helm version` failed: unsupported version `v3.5.0`; helm 3.6 or later"), "{old}");
    }

    #[test]
    fn the_memo_keeps_at_most_its_limit_and_evicts_the_oldest() {
        let key = |n: u8| MemoKey::of([[n].as_slice()]);
        let mut memo = Memo::new(10);
        memo.insert(key(1), "aaaa".into());
        memo.insert(key(2), "bbbb".into());
        memo.insert(key(3), "cccc".into());
        assert_eq!((memo.get(&key(1)), memo.bytes()), (None, 8), "the oldest went");
        assert_eq!(memo.get(&key(3)).as_deref(), Some("cccc"));
        memo.insert(key(4), "x".repeat(11).into());
        assert_eq!((memo.get(&key(4)), memo.bytes()), (None, 8), "larger than the limit: not kept");
        assert_ne!(MemoKey::of([b"ab".as_slice(), b"c"]), MemoKey::of([b"a".as_slice(), b"bc"]));
    }
}
