//! The library renderer: charts rendered by one long-lived `stacksync-renderer` process built on
//! helm's own Go library (`renderer/`, built by scripts/build-renderer.sh), instead of a `helm
//! template` process per render. Its output is byte for byte what `helm template` of the same helm
//! version ([`HELM_VERSION`]) prints; tests/renderer.rs holds it to that against the real helm.
//!
//! Protocol (renderer/main.go): frames of a 4-byte big-endian length and JSON, one request → one
//! response with the request's id, several in flight. The renderer keeps loaded charts (by path,
//! reloaded when their files change, bounded), grouped by release so that a collected release's
//! charts go with it ([`Renderer::retain`]).
//!
//! A render that does not answer within its deadline kills the renderer (Go cannot stop a
//! template midway); it and the renders in flight with it fail as transient errors, and the next
//! render starts a new renderer.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::oneshot;

use crate::model::sync::MutexExt;

/// The helm version the renderer is built on, as a literal (for `concat!` in `--version`).
#[macro_export]
macro_rules! helm_version {
    () => {
        "v4.3.2"
    };
}

/// The helm version the renderer is built on, and the one its referee (the real `helm`, built by
/// scripts/build-renderer.sh too) must report.
pub const HELM_VERSION: &str = helm_version!();
/// The renderer's program name.
pub const PROGRAM: &str = "stacksync-renderer";
/// Environment variable naming the renderer when the config does not.
pub const ENV_RENDERER: &str = "STACKSYNC_RENDERER";
/// The largest frame either way (renderer/main.go's `maxFrame`).
const MAX_FRAME: usize = 128 << 20;
/// The largest values file sent.
const MAX_VALUES: u64 = 16 << 20;
/// A new renderer must answer its version within this.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest helm error message kept.
const MAX_MESSAGE: usize = 4000;
/// The renderer's last standard-error bytes kept for a crash message.
const STDERR_TAIL: usize = 2000;

/// What went wrong with the library renderer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(
        "the library renderer `{PROGRAM}` was not found ({0}); build it with scripts/build-renderer.sh, set `helm.rendererPath` or {ENV_RENDERER}, or set `helm.renderer: process` to run the helm binary for every render"
    )]
    NotFound(String),
    /// The renderer could not be started or did not answer its version.
    #[error("cannot start the library renderer {path}: {message}")]
    Start { path: String, message: String },
    #[error(
        "the library renderer {path} renders as helm {found}, this stacksync expects helm {HELM_VERSION}: rebuild it with scripts/build-renderer.sh"
    )]
    Version { path: String, found: String },
    /// A `helm template` argument the library renderer does not take.
    #[error(
        "the library renderer cannot render {chart}: it does not take `{arg}` (set `helm.renderer: process` to run the helm binary instead)"
    )]
    Refused { chart: String, arg: String },
    #[error("helm template {chart}: cannot read values file {path}: {message}")]
    ReadValues { chart: String, path: String, message: String },
    /// helm refused the chart or its values; `message` is helm's.
    #[error("helm template {chart} failed (library renderer, helm {HELM_VERSION}): {message}")]
    Render { chart: String, message: String },
    #[error("helm template {chart} did not finish within {seconds}s (library renderer)")]
    Timeout { chart: String, seconds: u64 },
    /// The renderer died or broke the protocol while rendering.
    #[error("helm template {chart}: the library renderer failed: {message}")]
    Crashed { chart: String, message: String },
}

impl Error {
    /// Whether trying again may succeed with nothing changed: the renderer died or was too slow.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Start { .. } | Error::Timeout { .. } | Error::Crashed { .. })
    }

    /// A short stable CamelCase name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "RendererNotFound",
            Error::Start { .. } | Error::Crashed { .. } => "RendererFailed",
            Error::Version { .. } => "RendererVersion",
            Error::Refused { .. } => "RendererRefused",
            Error::ReadValues { .. } | Error::Render { .. } => "HelmTemplateFailed",
            Error::Timeout { .. } => "HelmTimeout",
        }
    }
}

/// One render, as `helm template NAME CHART --namespace NS [--kube-version V] [--include-crds]
/// [-f FILE]...` says it (the arguments stacksync passes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    pub chart: PathBuf,
    pub namespace: Option<String>,
    pub kube_version: Option<String>,
    pub include_crds: bool,
    pub values: Vec<PathBuf>,
    /// A probe render: the costly generators (key and certificate generation, bcrypt) replaced
    /// by cheap stand-ins whose output is random text of the same shape (renderer/probe.go). Its
    /// output is only ever compared with a real render of the same inputs, to tell which fields
    /// are generated; never applied.
    pub probe: bool,
}

/// A `helm template` argument the library renderer does not take, as its message says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotTaken {
    /// A flag it does not know (as given).
    #[error("{0}")]
    Flag(String),
    /// A flag that needs a value, without one.
    #[error("{0} without a value")]
    NoValue(String),
    /// Other than two positional arguments (how many).
    #[error("{0} positional arguments (a release name and a chart are needed)")]
    Positional(usize),
}

impl Template {
    /// Reads `helm template` arguments.
    ///
    /// # Errors
    /// [`NotTaken`]: an unknown flag, a flag without its value, or other than two positional
    /// arguments.
    pub fn from_args(args: &[OsString]) -> Result<Template, NotTaken> {
        let mut positional = Vec::new();
        let (mut namespace, mut kube_version, mut include_crds, mut values) = (None, None, false, Vec::new());
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let text = arg.to_string_lossy();
            let (flag, inline) = match text.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(OsString::from(v))),
                _ => (text.clone().into_owned(), None),
            };
            let mut value = |name: &str| inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| NotTaken::NoValue(name.to_owned()));
            match flag.as_str() {
                "--include-crds" if inline.is_none() => include_crds = true,
                "--namespace" | "-n" => namespace = Some(value(&flag)?.to_string_lossy().into_owned()),
                "--kube-version" => kube_version = Some(value(&flag)?.to_string_lossy().into_owned()),
                "-f" | "--values" => values.push(PathBuf::from(value(&flag)?)),
                f if f.starts_with('-') && f.len() > 1 => return Err(NotTaken::Flag(text.into_owned())),
                _ => positional.push(arg.clone()),
            }
        }
        match <[OsString; 2]>::try_from(positional) {
            Ok([name, chart]) => Ok(Template {
                name: name.to_string_lossy().into_owned(),
                chart: PathBuf::from(chart),
                namespace,
                kube_version,
                include_crds,
                values,
                probe: false,
            }),
            Err(p) => Err(NotTaken::Positional(p.len())),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    id: u64,
    op: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    chart: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    group: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    kube_version: &'a str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    include_crds: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    values: Vec<ValuesFile>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    probe: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<&'a [String]>,
}

impl Request<'_> {
    fn op(op: &'static str) -> Request<'static> {
        Request {
            id: 0,
            op,
            chart: "",
            group: "",
            name: "",
            namespace: "",
            kube_version: "",
            include_crds: false,
            values: Vec::new(),
            probe: false,
            groups: None,
        }
    }
}

#[derive(Debug, Serialize)]
struct ValuesFile {
    name: String,
    content: String,
}

#[derive(Debug, Default, Deserialize)]
struct Response {
    id: u64,
    #[serde(default)]
    manifest: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    dropped: usize,
    /// What the renderer can do beyond rendering, told with its version (`probe`).
    #[serde(default)]
    features: Vec<String>,
}

/// The renders waiting for an answer, and why the renderer is gone once it is.
#[derive(Debug, Default)]
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Response>>,
    gone: Option<String>,
}

/// One running renderer process.
#[derive(Debug)]
struct Conn {
    child: Mutex<tokio::process::Child>,
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    pending: Arc<Mutex<Pending>>,
    stderr: Arc<Mutex<String>>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
        let _ = self.child.locked().start_kill();
    }
}

/// A started, version-checked library renderer. Cheap to clone; clones share the process.
#[derive(Debug, Clone)]
pub struct Renderer {
    path: PathBuf,
    version: String,
    /// It renders probes ([`Template::probe`]); a renderer built before them renders for real.
    probes: bool,
    conn: Arc<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    next_id: Arc<AtomicU64>,
    starts: Arc<AtomicU64>,
}

/// Removes a render's entry when its caller stops waiting (answered, timed out or dropped).
struct Waiting<'a>(&'a Mutex<Pending>, u64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.locked().waiting.remove(&self.1);
    }
}

impl Renderer {
    /// Finds the renderer (`configured`, else `$STACKSYNC_RENDERER`, else beside this
    /// executable, else in the tools directory of the project's scripts, else on `PATH`),
    /// starts it and checks that it renders as helm [`HELM_VERSION`].
    ///
    /// # Errors
    /// It is missing, does not start or answer, or is built on another helm version.
    pub async fn locate(configured: Option<&Path>) -> Result<Renderer, Error> {
        let path = find(configured)?;
        let renderer = Renderer {
            path,
            version: String::new(),
            probes: false,
            conn: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
            starts: Arc::default(),
        };
        let conn = renderer.connection().await?;
        let answer = renderer.ask(&conn, Request::op("version"), START_TIMEOUT).await.map_err(|e| renderer.start_error(&e))?;
        let version = answer.version;
        if version.split('+').next() != Some(HELM_VERSION) {
            return Err(Error::Version { path: renderer.path.display().to_string(), found: version });
        }
        let probes = answer.features.iter().any(|f| f == "probe");
        Ok(Renderer { version, probes, ..renderer })
    }

    /// Whether it renders probes ([`Template::probe`]): it says so when asked its version.
    pub fn probes(&self) -> bool {
        self.probes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// As `helm version --short` of the same helm build prints it, e.g. `v4.3.2`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The process id of the running renderer, if one runs (for measuring its memory).
    pub async fn pid(&self) -> Option<u32> {
        self.conn.lock().await.as_ref().and_then(|c| c.child.locked().id())
    }

    /// How many renderer processes were started (1 unless one died or timed out).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Renders `template`: `helm template`'s standard output. `group` names the release the
    /// chart belongs to (see [`Renderer::retain`]; empty: none); `chart` names it in errors.
    ///
    /// Cancellation-safe: dropping the future abandons the render (the renderer finishes it and
    /// its answer is dropped).
    ///
    /// # Errors
    /// A values file cannot be read, helm fails (its message), or the renderer dies or does not
    /// answer within `timeout` (then it is killed; the next render starts a new one).
    pub async fn render(&self, group: &str, chart: &str, template: &Template, timeout: Duration) -> Result<String, Error> {
        let mut values = Vec::with_capacity(template.values.len());
        for path in &template.values {
            values.push(ValuesFile { name: path.display().to_string(), content: read_values(chart, path).await? });
        }
        let chart_path = template.chart.to_string_lossy();
        let request = Request {
            chart: &chart_path,
            group,
            name: &template.name,
            namespace: template.namespace.as_deref().unwrap_or_default(),
            kube_version: template.kube_version.as_deref().unwrap_or_default(),
            include_crds: template.include_crds,
            values,
            probe: template.probe,
            ..Request::op("render")
        };
        let conn = self.connection().await.map_err(|e| Error::Crashed { chart: chart.to_owned(), message: e.to_string() })?;
        let answer = self.ask(&conn, request, timeout).await.map_err(|e| match e {
            Failure::Timeout => Error::Timeout { chart: chart.to_owned(), seconds: timeout.as_secs() },
            Failure::Gone(message) => Error::Crashed { chart: chart.to_owned(), message },
        })?;
        if answer.error.is_empty() {
            Ok(answer.manifest)
        } else {
            Err(Error::Render { chart: chart.to_owned(), message: one_line(&answer.error) })
        }
    }

    /// Drops the renderer's charts of every release group not in `keep`, and of every path gone
    /// (garbage collection of releases); returns how many it dropped. Best effort: a renderer
    /// that is not running holds none (`None`).
    pub async fn retain(&self, keep: &[String]) -> Option<usize> {
        let conn = self.conn.lock().await.clone()?;
        let request = Request { groups: Some(keep), ..Request::op("retain") };
        match self.ask(&conn, request, START_TIMEOUT).await {
            Ok(r) => {
                tracing::debug!(dropped = r.dropped, "the library renderer dropped the charts of collected releases");
                Some(r.dropped)
            }
            Err(e) => {
                tracing::debug!(error = %e.message(), "the library renderer did not drop charts");
                None
            }
        }
    }

    /// The running renderer, started when there is none (or the last one died).
    async fn connection(&self) -> Result<Arc<Conn>, Error> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref()
            && conn.pending.locked().gone.is_none()
        {
            return Ok(conn.clone());
        }
        let conn = Arc::new(self.spawn()?);
        self.starts.fetch_add(1, Ordering::Relaxed);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn spawn(&self) -> Result<Conn, Error> {
        let mut child = tokio::process::Command::new(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Start { path: self.path.display().to_string(), message: e.to_string() })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
            return Err(Error::Start { path: self.path.display().to_string(), message: "no pipes".into() });
        };
        let pending = Arc::new(Mutex::new(Pending::default()));
        let tail = Arc::new(Mutex::new(String::new()));
        let reader = tokio::spawn(read_responses(stdout, pending.clone(), tail.clone()));
        let errors = tokio::spawn(keep_stderr(stderr, tail.clone()));
        Ok(Conn { child: Mutex::new(child), stdin: tokio::sync::Mutex::new(stdin), pending, stderr: tail, tasks: [reader, errors] })
    }

    /// Sends `request` on `conn` and waits for its answer at most `timeout`; on timeout, kills
    /// the renderer.
    async fn ask(&self, conn: &Arc<Conn>, mut request: Request<'_>, timeout: Duration) -> Result<Response, Failure> {
        request.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&request).map_err(|e| Failure::Gone(format!("cannot encode the request: {e}")))?;
        if body.len() > MAX_FRAME {
            return Err(Failure::Gone(format!("a request of {} bytes, more than the limit of {MAX_FRAME}", body.len())));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = conn.pending.locked();
            if let Some(gone) = &pending.gone {
                return Err(Failure::Gone(gone.clone()));
            }
            pending.waiting.insert(request.id, tx);
        }
        let _waiting = Waiting(&conn.pending, request.id);
        let exchange = async {
            {
                let mut stdin = conn.stdin.lock().await;
                let len = u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes();
                let sent = async {
                    stdin.write_all(&len).await?;
                    stdin.write_all(&body).await?;
                    stdin.flush().await
                };
                if let Err(e) = sent.await {
                    return Err(Failure::Gone(format!("cannot send a request: {e}{}", tail(&conn.stderr))));
                }
            }
            rx.await.map_err(|_| Failure::Gone(conn.pending.locked().gone.clone().unwrap_or_else(|| "it exited".into())))
        };
        let started = tokio::time::Instant::now();
        match tokio::time::timeout(timeout, exchange).await {
            // The timer's granularity is a millisecond: an answer after the deadline is late all
            // the same (the renderer answered, so it is kept).
            Ok(Ok(_)) if started.elapsed() > timeout => Err(Failure::Timeout),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => {
                self.discard(conn).await;
                Err(e)
            }
            Err(_) => {
                tracing::warn!(path = %self.path.display(), "a render did not finish in time: restarting the library renderer");
                self.discard(conn).await;
                Err(Failure::Timeout)
            }
        }
    }

    /// Kills `conn` and forgets it, unless a newer renderer already replaced it.
    async fn discard(&self, conn: &Arc<Conn>) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
        }
        conn.pending.locked().gone.get_or_insert_with(|| "it was stopped".into());
        let _ = conn.child.locked().start_kill();
    }

    fn start_error(&self, failure: &Failure) -> Error {
        Error::Start { path: self.path.display().to_string(), message: failure.message() }
    }
}

/// Why an exchange with the renderer failed.
#[derive(Debug)]
enum Failure {
    Timeout,
    Gone(String),
}

impl Failure {
    fn message(&self) -> String {
        match self {
            Failure::Timeout => "no answer in time".into(),
            Failure::Gone(m) => m.clone(),
        }
    }
}

/// Hands each response to the render waiting for it, until the renderer's output ends or breaks
/// the protocol; then every render still waiting learns it is gone.
async fn read_responses(stdout: tokio::process::ChildStdout, pending: Arc<Mutex<Pending>>, stderr: Arc<Mutex<String>>) {
    let mut reader = tokio::io::BufReader::with_capacity(1 << 16, stdout);
    let why = loop {
        let mut head = [0u8; 4];
        if let Err(e) = reader.read_exact(&mut head).await {
            break if e.kind() == std::io::ErrorKind::UnexpectedEof { "it exited".to_owned() } else { format!("cannot read: {e}") };
        }
        let len = u32::from_be_bytes(head) as usize;
        if len > MAX_FRAME {
            break format!("an answer of {len} bytes, more than the limit of {MAX_FRAME}");
        }
        let mut body = vec![0; len];
        if let Err(e) = reader.read_exact(&mut body).await {
            break format!("an answer cut short: {e}");
        }
        let answer: Response = match serde_json::from_slice(&body) {
            Ok(a) => a,
            Err(e) => break format!("an answer that is not the protocol's: {e}"),
        };
        if let Some(tx) = pending.locked().waiting.remove(&answer.id) {
            let _ = tx.send(answer);
        }
    };
    // Its last words (a Go panic, an out-of-memory kill) come on stderr; give them a moment.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut p = pending.locked();
    p.gone.get_or_insert_with(|| format!("{why}{}", tail(&stderr)));
    p.waiting.clear();
}

/// Logs the renderer's standard error (helm's warnings) and keeps its tail for crash messages.
async fn keep_stderr(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    let mut chunk = vec![0u8; 8192];
    while let Ok(n) = stderr.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&chunk[..n]);
        tracing::debug!(output = %text.trim_end(), "library renderer");
        let mut t = tail.locked();
        t.push_str(&text);
        if t.len() > STDERR_TAIL {
            let mut cut = t.len() - STDERR_TAIL;
            while !t.is_char_boundary(cut) {
                cut += 1;
            }
            t.drain(..cut);
        }
    }
}

/// helm's error message on one line (as the helm binary's is, see `helm::excerpt`), at most
/// [`MAX_MESSAGE`] bytes of it.
pub fn one_line(message: &str) -> String {
    let mut line = message.trim().replace('\n', " | ");
    if line.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}

fn tail(stderr: &Mutex<String>) -> String {
    let t = stderr.locked();
    let t = t.trim();
    if t.is_empty() { String::new() } else { format!(": {}", t.replace('\n', " | ")) }
}

async fn read_values(chart: &str, path: &Path) -> Result<String, Error> {
    let error = |message: String| Error::ReadValues { chart: chart.to_owned(), path: path.display().to_string(), message };
    let file = tokio::fs::File::open(path).await.map_err(|e| error(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_VALUES + 1).read_to_string(&mut text).await.map_err(|e| error(e.to_string()))?;
    if text.len() as u64 > MAX_VALUES {
        return Err(error(format!("larger than {MAX_VALUES} bytes")));
    }
    Ok(text)
}

/// Where the renderer is; see [`Renderer::locate`].
fn find(configured: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(p) = configured {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(Error::NotFound(format!("`helm.rendererPath` {} does not exist", p.display())))
        };
    }
    if let Some(p) = std::env::var_os(ENV_RENDERER).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(Error::NotFound(format!("{ENV_RENDERER}={} does not exist", p.display()))) };
    }
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(PROGRAM)));
    let tools = std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/stacksync-tools")))
        .map(|d| d.join("bin").join(PROGRAM));
    let on_path = std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(PROGRAM)).find(|p| p.is_file()));
    [beside, tools, on_path]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .ok_or_else(|| Error::NotFound("not beside this executable, in $STACKSYNC_TOOLS_DIR/bin or on PATH".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<OsString> {
        text.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn the_arguments_stacksync_passes_are_read_and_any_other_is_refused_by_name() {
        let t =
            Template::from_args(&args("--include-crds --kube-version v1.32.0 cluster-addon /r/chart --namespace kube-system -f /v.yaml"))
                .expect("taken");
        assert_eq!(
            t,
            Template {
                name: "cluster-addon".into(),
                chart: "/r/chart".into(),
                namespace: Some("kube-system".into()),
                kube_version: Some("v1.32.0".into()),
                include_crds: true,
                values: vec!["/v.yaml".into()],
                probe: false,
            }
        );
        let t = Template::from_args(&args("stack /c.tgz --namespace=team-a --values=/a -f /b")).expect("taken");
        assert_eq!((t.namespace.as_deref(), t.values.len(), t.include_crds), (Some("team-a"), 2, false));
        for (given, refused) in [
            ("x /c --set a=b", "--set"),
            ("x /c --namespace", "--namespace without a value"),
            ("/c", "1 positional arguments (a release name and a chart are needed)"),
            ("x /c --include-crds=false", "--include-crds=false"),
        ] {
            assert_eq!(Template::from_args(&args(given)).map_err(|e| e.to_string()), Err(refused.to_owned()), "{given}");
        }
    }

    #[test]
    fn a_dead_or_slow_renderer_is_transient_a_refused_chart_is_not() {
        let crashed = Error::Crashed { chart: "c".into(), message: "it exited".into() };
        assert_eq!((crashed.is_transient(), crashed.reason()), (true, "RendererFailed"));
        let render = Error::Render { chart: "c".into(), message: "template: x: boom".into() };
        assert_eq!((render.is_transient(), render.reason()), (false, "HelmTemplateFailed"));
        assert_eq!(render.to_string(), format!("helm template c failed (library renderer, helm {HELM_VERSION}): template: x: boom"));
        let refused = Error::Refused { chart: "c".into(), arg: "--set".into() };
        assert!(!refused.is_transient() && refused.to_string().contains("helm.renderer: process"), "{refused}");
    }
}
