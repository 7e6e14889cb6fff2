//! A loopback Kubernetes API server for tests: enough of the real one's HTTP behaviour
//! (discovery, OpenAPI, CRUD, watch, server-side apply, Table) that the real kubectl and
//! kube-rs accept it, with fault injection and write counters for the tests' assertions.
//!
//! It is for what a real kube-apiserver cannot give a test: injected faults ([`FaultRule`]:
//! 5xx, 429 with Retry-After, latency, cut watches), request and write counters ([`Stats`]),
//! and speed (a server starts in milliseconds, so a test may start hundreds). What is claimed
//! about Kubernetes itself is proven on the real control plane (testkit's `kube`); a
//! differential test (`tests/differential.rs`) sends the same requests to both and keeps this
//! one honest. What is faithful and what is simplified: docs/testkit.md.
//!
//! ```no_run
//! # async fn example() -> fake_apiserver::Result<()> {
//! use fake_apiserver::{ApiServer, FaultRule, Options, capi_crds_dir};
//!
//! let server = ApiServer::start_with(Options { preload: vec![capi_crds_dir()], ..Options::default() }).await?;
//! server.faults().add(FaultRule::new().verb("patch").path("/configmaps/").status(503).times(1));
//! let client = server.client()?; // or server.kubeconfig() for kubectl
//! // ... exercise the code under test with `client` ...
//! assert_eq!(server.stats().total_writes(), 0);
//! server.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! Inside, each module uses only modules named before it here (`tests/layering.rs` checks that no
//! file imports from a file that imports from it): the leaves `schema`, `status`, `meta`, `faults`,
//! `events`; the resource model `registry`, `kinds`, `fieldset`, `query`; `store` (the objects,
//! the event log, and `Shared`: what every connection shares); `target` (what a request
//! addresses); the handlers `defaults`, `validation`, `smp`, `ssa`, `deletion`, `objects`,
//! `lists`, `table`, `watch`, `discovery`, `openapi`, `protobuf`; `server` (HTTP and routing);
//! this file's [`ApiServer`]; and on top the test helpers [`kubectl`] and [`cluster`].

pub mod cluster;
mod defaults;
mod deletion;
mod discovery;
mod events;
mod faults;
mod fieldset;
mod kinds;
pub mod kubectl;
mod lists;
mod meta;
mod objects;
mod openapi;
mod protobuf;
mod query;
mod registry;
mod schema;
mod server;
mod smp;
mod ssa;
mod status;
mod store;
mod table;
mod target;
mod validation;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use faults::{Counts, FaultRule, Faults, Stats};
pub use status::ApiError;

use query::Query;
use store::{Shared, State, Store};
use target::Target;

/// Why a server did not start, or a fixture did not load; each variant names what failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding 127.0.0.1:0")]
    Bind(#[source] std::io::Error),
    #[error("writing the kubeconfig {path}")]
    WriteKubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("building a kube client for {url}")]
    Client {
        url: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading fixture {path}")]
    ReadFixture {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing fixture YAML: {message}")]
    ParseFixture { message: String },
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    #[error("loading {object}")]
    Load {
        object: String,
        #[source]
        source: ApiError,
    },
}

/// This crate's result: [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a server behaves; `Options::default()` suits most tests.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often an idle watch that allows bookmarks gets one (the real server: about a minute).
    pub bookmark_interval: Duration,
    /// How many events the log keeps for resuming watches; older resourceVersions answer 410.
    pub event_retention: usize,
    /// Directories of CRD (or any) YAML files applied at start, e.g. [`capi_crds_dir`].
    pub preload: Vec<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options { bookmark_interval: Duration::from_secs(5), event_retention: 10_000, preload: Vec::new() }
    }
}

/// The Cluster API CRDs in the repository's `testdata/crds`.
pub fn capi_crds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..").join("testdata").join("crds")
}

/// One running server on `127.0.0.1:<free port>`, with its kubeconfig in a temp dir.
/// Dropping it aborts the server; [`ApiServer::stop`] also waits for it.
pub struct ApiServer {
    url: String,
    kubeconfig: PathBuf,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl ApiServer {
    /// Starts a server with the built-in kinds and namespaces `default`, `kube-system`,
    /// `kube-public` and `kube-node-lease`.
    ///
    /// # Errors
    /// Binding the port, writing the kubeconfig, or a preload file that fails to load.
    pub async fn start() -> Result<ApiServer> {
        ApiServer::start_with(Options::default()).await
    }

    /// Starts a server as [`ApiServer::start`] does, then applies the files of `options.preload`.
    ///
    /// # Errors
    /// As [`ApiServer::start`].
    pub async fn start_with(options: Options) -> Result<ApiServer> {
        schema::load()?;
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::Bind)?;
        let url = format!("http://{addr}");
        let dir = tempfile::tempdir().map_err(|source| Error::WriteKubeconfig { path: std::env::temp_dir(), source })?;
        let kubeconfig = dir.path().join("kubeconfig");
        write_kubeconfig(&kubeconfig, &url)?;
        let preload = options.preload.clone();
        let state =
            State { registry: kinds::registry(), store: Store::new(options.event_retention), warnings: Vec::new(), duplicates: Vec::new() };
        let shared = Arc::new(Shared::new(state, options.bookmark_interval));
        let mut server = ApiServer { url, kubeconfig, shared: shared.clone(), task: None, _dir: dir };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            server.apply_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?;
        }
        for dir in &preload {
            server.load_dir(dir)?;
        }
        server.task = Some(tokio::spawn(server::serve(listener, shared)));
        Ok(server)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig (context `testkit`, namespace `default`) pointing at this server.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube config for this server. Its default retries (429/503/504) are left on, as a
    /// client in production has them; tests of error paths may want `default_retry = false`.
    pub fn kube_config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().unwrap_or_default());
        config.default_namespace = "default".into();
        config
    }

    /// # Errors
    /// When kube cannot build a client for the URL.
    pub fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.kube_config()).map_err(|source| Error::Client { url: self.url.clone(), source })
    }

    /// The faults injected into this server's answers; add a [`FaultRule`] to fail requests.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Request, write and change counters since start (or the last reset).
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Sets every counter of [`ApiServer::stats`] back to zero.
    pub fn reset_stats(&self) {
        self.shared.counters.reset();
    }

    /// Drops the event log: watches resuming from any older resourceVersion get 410 Expired.
    pub fn compact(&self) {
        self.shared.lock().store.compact();
    }

    /// Server-side applies every document of every `*.yaml`/`*.yml`/`*.json` file in `dir`
    /// (sorted by name) as field manager `testkit`. Counters are not touched.
    ///
    /// # Errors
    /// An unreadable file, bad YAML, or an object the server refuses.
    pub fn load_dir(&self, dir: &Path) -> Result<Vec<Value>> {
        let entries = std::fs::read_dir(dir).map_err(|source| Error::ReadFixture { path: dir.to_path_buf(), source })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json"))
            .collect();
        files.sort();
        let mut loaded = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| Error::ReadFixture { path: file.clone(), source })?;
            loaded.extend(self.load_yaml(&text)?);
        }
        Ok(loaded)
    }

    /// Server-side applies every document of a multi-document YAML string, in order.
    ///
    /// # Errors
    /// Bad YAML, or an object the server refuses (unknown kind, conflict, invalid CRD).
    pub fn load_yaml(&self, yaml: &str) -> Result<Vec<Value>> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).map_err(|e| Error::ParseFixture { message: e.to_string() })?;
        docs.into_iter().filter(|d| d.is_object()).map(|d| self.apply_object(d)).collect()
    }

    fn apply_object(&self, obj: Value) -> Result<Value> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let ident = format!("{kind}/{name}");
        let (group, version) = api_version.rsplit_once('/').map_or((String::new(), api_version.clone()), |(g, v)| (g.into(), v.into()));
        let body = obj.to_string();
        self.shared.write(|state| {
            let rt = state.registry.find_kind(&group, &version, &kind).cloned().ok_or_else(|| Error::Load {
                object: ident.clone(),
                source: ApiError::new(404, "NotFound", format!("no matches for kind {kind:?} in version {api_version:?}")),
            })?;
            let namespace = rt.namespaced.then(|| obj["metadata"]["namespace"].as_str().unwrap_or("default").to_string());
            let target = Target { rt, version, namespace, name: Some(name.clone()), subresource: None };
            let query = Query::parse(Some("fieldManager=testkit&force=true"));
            objects::patch(state, &target, body.as_bytes(), "application/apply-patch+yaml", &query, "testkit")
                .map(|w| w.body)
                .map_err(|source| Error::Load { object: ident.clone(), source })
        })
    }

    /// Stops accepting, ends every connection (open watches included) and waits for the server task.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Writes a kubeconfig for `url` (JSON, which every kubeconfig reader accepts as YAML).
///
/// # Errors
/// When the file cannot be written.
pub fn write_kubeconfig(path: &Path, url: &str) -> Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testkit", "cluster": {"server": url}}],
        "users": [{"name": "testkit", "user": {}}],
        "contexts": [{"name": "testkit", "context": {"cluster": "testkit", "user": "testkit", "namespace": "default"}}],
        "current-context": "testkit",
    });
    let text = serde_json::to_string_pretty(&config).unwrap_or_default();
    std::fs::write(path, text).map_err(|source| Error::WriteKubeconfig { path: path.to_path_buf(), source })
}
