//! The workload clusters' clients as a reconcile gets them: from the Cluster's
//! `<cluster>-kubeconfig` Secret (key `value`), the parsed recipe reused while the Secret's
//! resourceVersion stays the same, with the kinds its syncs found served ([`Workloads`]); and the
//! reachability check of a preview ([`reachable`]).
//!
//! At fleet scale, what one Cluster costs between its reconciles is bounded.
//!
//! `kube::Client::try_from(Config)` builds a complete TLS configuration for every client — with
//! no CA in the kubeconfig, a copy of the platform's whole root store (about 70 KiB) — and keeps
//! up to 90 s of idle HTTP/1 connections per client, one per object that was in flight. At
//! 1,000 Clusters that was most of the process's memory (`docs/performance.md`). Here:
//!
//! - **One TLS configuration per distinct trust and identity** ([`TlsConfigs`]): keyed by a
//!   digest of the kubeconfig's CA certificates, client certificate and key, and
//!   `insecure-skip-tls-verify`; the one without a CA (the platform's roots) is built once per
//!   process. Configurations nobody uses any more are dropped (weak references).
//! - **Connections live as long as the reconcile that opened them**: what is kept for a Cluster
//!   between reconciles is its [`Recipe`] (the parsed kubeconfig and its shared TLS
//!   configuration), not a client; each reconcile builds a client from it (cheap) and its
//!   connections close when the reconcile drops it. Over TLS, HTTP/2 is offered first (ALPN
//!   `h2`, then `http/1.1`, as client-go does): against a real API server all of a reconcile's
//!   requests share one connection and one TLS handshake. Over HTTP/1.1 the pool keeps up to
//!   [`IDLE_CONNECTIONS`] idle connections, so the sync's requests (up to its `concurrency` at
//!   once) go over the same few connections instead of a new one for most requests: with one
//!   idle connection kept, a sync of 40 objects 8 at a time opened about 31 connections.
//! - **Few recipes** ([`Clients`]): a recipe is kept for its Cluster's next reconcile only while
//!   it was used in the last [`CLIENT_IDLE`], and at most [`MAX_CLIENTS`] are kept (the least
//!   recently used go first). A Cluster seen again after that gets a new one from its
//!   kubeconfig Secret (read on every reconcile anyway).
//!
//! What a Cluster keeps between reconciles otherwise ([`ClusterState`]): the kinds its syncs
//! found served and what its server said about waiting ([`Throttle`]) — a few hundred bytes.
//!
//! Every client here and the management cluster's (`client.rs`) record the `Retry-After` of
//! their server's 429 and 503 answers ([`Throttle`], below): on the path of every request, so
//! it lives here rather than in a file of its own.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::header::{HeaderMap, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use tracing::{debug, warn};

use kube::api::Api;
use kube::client::ConfigExt;
use sha2::{Digest, Sha256};

use super::super::error::kube_error;
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::model::sync::MutexExt;
use crate::status::Reason;
use applier::ssa;

/// How long a workload cluster gets to answer `GET /version` before its sync is skipped.
pub const REACHABLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A workload cluster's client and the kinds its syncs found served.
#[derive(Clone)]
pub struct Workload {
    pub client: kube::Client,
    pub discovery: ssa::Discovery,
}

/// Workload clients by Cluster, with the kubeconfig Secret's resourceVersion they came from
/// (bounded in number and age), their TLS configurations (one per distinct trust and
/// identity), and what each Cluster keeps between reconciles (served kinds).
#[derive(Default)]
pub(in crate::targets::kubernetes) struct Workloads {
    clients: Clients,
    tls: TlsConfigs,
    states: Mutex<HashMap<ClusterKey, ClusterState>>,
}

impl Workloads {
    /// A client of the workload cluster for this reconcile (its connections close with it),
    /// built from its `<cluster>-kubeconfig` Secret (key `value`), whose parsed form is reused,
    /// with what discovery found, while the Secret's resourceVersion stays the same.
    ///
    /// # Errors
    /// The Secret is missing or unreadable, or holds no usable kubeconfig ([`WorkloadError`]).
    pub(in crate::targets::kubernetes) async fn get(
        &self,
        mgmt: &kube::Client,
        key: &ClusterKey,
        c: &ClusterConfig,
        timeout: std::time::Duration,
    ) -> Result<Workload, WorkloadError> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(mgmt.clone(), &c.namespace);
        let name = format!("{}-kubeconfig", c.name);
        let at = || format!("{}/{name}", c.namespace);
        let secret = match secrets.get_opt(&name).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(WorkloadError::SecretMissing { secret: at() }),
            Err(source) => return Err(WorkloadError::ReadSecret { secret: at(), source }),
        };
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let state = {
            let mut states = self.states.locked();
            match states.get(key) {
                Some(state) => state.clone(),
                None => states.entry(key.clone()).or_insert_with(|| ClusterState::new(key)).clone(),
            }
        };
        let client = match self.clients.get(key, &version, Some(&state.throttle)) {
            Some(client) => client,
            None => {
                let recipe = recipe(&at(), &secret, timeout, &self.tls).await?;
                // Built once already by `Recipe::new`: a failure here is as unlikely as it is
                // described (never with the error's text, which may quote the kubeconfig).
                let client = recipe.client(Some(&state.throttle)).map_err(|_| WorkloadError::NoClient { secret: at() })?;
                self.clients.put(key.clone(), version, recipe);
                client
            }
        };
        Ok(Workload { client, discovery: state.discovery })
    }

    /// How long `key`'s workload API server said to wait still, if it did.
    pub(in crate::targets::kubernetes) fn throttled(&self, key: &ClusterKey) -> Option<std::time::Duration> {
        self.states.locked().get(key).and_then(|s| s.throttle.remaining())
    }

    /// Forgets what is kept for a Cluster that is gone.
    pub(in crate::targets::kubernetes) fn forget(&self, key: &ClusterKey) {
        self.clients.remove(key);
        self.states.locked().remove(key);
    }
}

/// Why a workload cluster's client could not be had. Messages name the Secret and what is
/// wrong, never its content: a YAML error would quote the line (a token, a key). Each may pass
/// by itself (Cluster API writes the Secret, a person fixes it): the reconcile retries.
#[derive(Debug, thiserror::Error)]
pub(in crate::targets::kubernetes) enum WorkloadError {
    #[error("Secret {secret} does not exist yet")]
    SecretMissing { secret: String },
    #[error("reading Secret {secret}: {}", kube_error(.source))]
    ReadSecret {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {secret} has no key `value`")]
    NoKubeconfig { secret: String },
    #[error("Secret {secret}: key `value` {why}")]
    Unusable { secret: String, why: &'static str },
    #[error("Secret {secret}: its kubeconfig gave no client")]
    NoClient { secret: String },
}

impl WorkloadError {
    /// The condition reason the Cluster gets.
    pub(in crate::targets::kubernetes) fn reason(&self) -> Reason {
        match self {
            WorkloadError::SecretMissing { .. } | WorkloadError::NoKubeconfig { .. } => Reason::KubeconfigMissing,
            WorkloadError::ReadSecret { .. } | WorkloadError::Unusable { .. } | WorkloadError::NoClient { .. } => {
                Reason::ClusterUnreachable
            }
        }
    }
}

/// What a workload client is built from, read from the kubeconfig Secret `secret`.
async fn recipe(
    secret: &str,
    data: &k8s_openapi::api::core::v1::Secret,
    timeout: std::time::Duration,
    tls: &TlsConfigs,
) -> Result<Recipe, WorkloadError> {
    let unusable = |why: &'static str| WorkloadError::Unusable { secret: secret.to_owned(), why };
    let bytes = data.data.as_ref().and_then(|d| d.get("value")).map(|b| b.0.clone()).unwrap_or_default();
    if bytes.is_empty() {
        return Err(WorkloadError::NoKubeconfig { secret: secret.to_owned() });
    }
    let text = String::from_utf8(bytes).map_err(|_| unusable("is not UTF-8 text"))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|_| unusable("is not a valid kubeconfig (YAML with clusters, users, contexts)"))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.map_err(|e| unusable(unusable_why(&e)))?;
    with_user_agent(&mut config);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    applier::ssa::set_request_timeout(timeout);
    config.connect_timeout = Some(timeout.min(std::time::Duration::from_secs(10)));
    Recipe::new(config, tls).map_err(|_| unusable("is a kubeconfig whose TLS settings or server URL cannot be used"))
}

/// What is wrong with a kubeconfig kube cannot make a client of, in words of our own: kube's
/// messages may quote what they could not parse (a key, a token).
fn unusable_why(e: &kube::config::KubeconfigError) -> &'static str {
    use kube::config::KubeconfigError as K;
    match e {
        K::CurrentContextNotSet | K::LoadContext(_) | K::LoadClusterOfContext(_) => {
            "is a kubeconfig without a usable current context (a context naming a cluster and user it defines)"
        }
        K::MissingClusterUrl | K::ParseClusterUrl(_) => "is a kubeconfig whose cluster has no usable server URL",
        K::ParseProxyUrl(_) => "is a kubeconfig whose cluster has a proxy URL that cannot be parsed",
        K::LoadCertificateAuthority(_) | K::ParseCertificates(_) => {
            "is a kubeconfig whose certificate-authority data is not a PEM certificate"
        }
        K::LoadClientCertificate(_) | K::LoadClientKey(_) => "is a kubeconfig whose client certificate or key cannot be read",
        _ => "is a kubeconfig stacksync cannot use",
    }
}

/// One cheap request before a preview (`stacksync diff`): a cluster that is down is skipped in
/// seconds. A sync makes none: its first request is the check (`ApplyOptions::reach_within`).
pub(in crate::targets::kubernetes) async fn reachable(client: &kube::Client) -> Result<(), Unreachable> {
    match tokio::time::timeout(REACHABLE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 401 => Err(Unreachable::Refused(s.message.clone())),
        // Any other answer (a 403 on /version) is an answer: the cluster is there.
        Ok(Err(kube::Error::Api(_))) => Ok(()),
        Ok(Err(e)) => Err(Unreachable::Failed(e)),
        Err(_) => Err(Unreachable::Timeout(REACHABLE_TIMEOUT.as_secs())),
    }
}

/// A workload cluster that did not answer the reachability check.
#[derive(Debug, thiserror::Error)]
pub(in crate::targets::kubernetes) enum Unreachable {
    /// Said with its causes (`client error (Connect)` alone does not say that the connection
    /// was refused).
    #[error("the workload cluster's API server does not answer: {}", super::super::error::kube_error(.0))]
    Failed(#[source] kube::Error),
    #[error("the workload cluster's API server did not answer within {0}s")]
    Timeout(u64),
    #[error(
        "the workload cluster refused the credentials of its kubeconfig Secret ({0} 401): its client certificate or token is invalid or expired"
    )]
    Refused(String),
}

/// Idle connections a workload client's pool keeps while its reconcile runs: as many as a sync
/// has requests in flight (`ApplyOptions::concurrency`), so they are reused, not reopened.
pub const IDLE_CONNECTIONS: usize = 8;
/// How long an idle connection stays open (at most: it closes with its reconcile's client).
pub const CONNECTION_IDLE: Duration = Duration::from_secs(30);
/// How long an unused workload client recipe is kept.
pub const CLIENT_IDLE: Duration = Duration::from_secs(60);
/// At most this many workload client recipes are kept at once.
pub const MAX_CLIENTS: usize = 256;

/// Shared rustls client configurations, by what determines them.
#[derive(Default)]
pub struct TlsConfigs {
    by_key: Mutex<HashMap<[u8; 32], Weak<rustls::ClientConfig>>>,
    /// Configurations built (for tests and the bench's view of sharing).
    built: std::sync::atomic::AtomicU64,
}

impl TlsConfigs {
    /// The TLS configuration for `config`: shared with every other client of the same trust and
    /// identity. `None` when it cannot be shared (an exec plugin's identity, files read from
    /// disk): the caller builds its own.
    fn get(&self, config: &kube::Config) -> Result<Arc<rustls::ClientConfig>, kube::Error> {
        let Some(key) = tls_key(config) else { return self.build(config) };
        if let Some(shared) = self.by_key.locked().get(&key).and_then(Weak::upgrade) {
            return Ok(shared);
        }
        let built = self.build(config)?;
        let mut map = self.by_key.locked();
        if let Some(raced) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(raced);
        }
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        map.insert(key, Arc::downgrade(&built));
        Ok(built)
    }

    fn build(&self, config: &kube::Config) -> Result<Arc<rustls::ClientConfig>, kube::Error> {
        self.built.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tls = config.rustls_client_config()?;
        // HTTP/2 first, as client-go offers it: a reconcile's requests share one connection
        // (one TLS handshake) instead of one connection per request in flight.
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(tls))
    }

    /// How many configurations were built so far.
    pub fn built(&self) -> u64 {
        self.built.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What determines a kubeconfig's TLS configuration, as a digest; `None` when something is
/// read at connection time (an exec plugin's client certificate, certificate files on disk, a
/// CA file reloaded on rotation), which is not shared.
fn tls_key(config: &kube::Config) -> Option<[u8; 32]> {
    let a = &config.auth_info;
    if a.exec.is_some() || a.client_certificate.is_some() || a.client_key.is_some() || config.root_cert_file.is_some() {
        return None;
    }
    let mut h = Sha256::new();
    let mut part = |tag: &[u8], bytes: &[u8]| {
        h.update(tag);
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    for der in config.root_cert.iter().flatten() {
        part(b"ca", der);
    }
    part(b"insecure", &[u8::from(config.accept_invalid_certs)]);
    // The client certificate and key as kube reads them (serialised: kube's own serialiser is
    // the one public way to the key's bytes). Hashed here, never kept or logged.
    let identity = kube::config::AuthInfo {
        client_certificate_data: a.client_certificate_data.clone(),
        client_key_data: a.client_key_data.clone(),
        ..Default::default()
    };
    part(b"identity", &serde_json::to_vec(&identity).unwrap_or_default());
    Some(h.finalize().into())
}

/// What a workload client is built from: a Cluster's parsed kubeconfig and its TLS
/// configuration (shared with every other Cluster of the same trust and identity). Kept between
/// reconciles instead of a client, so no connection outlives the reconcile that opened it.
#[derive(Clone)]
pub struct Recipe {
    config: kube::Config,
    tls: Arc<rustls::ClientConfig>,
}

impl Recipe {
    /// The recipe for `config`, checked by building a client from it once.
    ///
    /// # Errors
    /// As [`client`].
    pub fn new(config: kube::Config, tls: &TlsConfigs) -> Result<Recipe, kube::Error> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Set once per process, as kube does; losing a race to another thread is fine.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let recipe = Recipe { tls: tls.get(&config)?, config };
        recipe.client(None)?;
        Ok(recipe)
    }

    /// A new client (its own connection pool), under `throttle` if given (what its server said
    /// about waiting outlives the client). Per-request I/O deadlines are the kubeconfig's
    /// timeouts, as kube sets them.
    ///
    /// # Errors
    /// As [`client`].
    pub fn client(&self, throttle: Option<&Throttle>) -> Result<kube::Client, kube::Error> {
        let throttle = throttle.cloned().unwrap_or_else(|| Throttle::new("the workload API server"));
        build(&self.config, self.tls.clone(), &throttle)
    }
}

/// Builds a client for `config` over a TLS configuration from `tls`, with a bounded pool of
/// idle connections. Per-request I/O deadlines are `config`'s timeouts, as kube sets them.
///
/// # Errors
/// The TLS configuration cannot be built (an unreadable CA or key), the server name is invalid,
/// or the authentication settings cannot be used.
pub fn client(config: &kube::Config, tls: &TlsConfigs) -> Result<kube::Client, kube::Error> {
    Recipe::new(config.clone(), tls)?.client(None)
}

/// `User-Agent: stacksync/<version>` on every request (unless the kubeconfig sets one): what an
/// API server's audit log and metrics attribute the requests to.
pub(crate) fn with_user_agent(config: &mut kube::Config) {
    use hyper::header::{HeaderValue, USER_AGENT};
    if !config.headers.iter().any(|(name, _)| name == USER_AGENT) {
        config.headers.push((USER_AGENT, HeaderValue::from_static(concat!("stacksync/", env!("CARGO_PKG_VERSION")))));
    }
}

fn build(config: &kube::Config, tls_config: Arc<rustls::ClientConfig>, throttle: &Throttle) -> Result<kube::Client, kube::Error> {
    use tower::Layer;

    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let resolver: Arc<dyn hyper_rustls::ResolveServerName + Send + Sync> = match &config.tls_server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|e| kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e)))?;
            Arc::new(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => Arc::new(hyper_rustls::DefaultServerNameResolver::default()),
    };
    let https = hyper_rustls::HttpsConnector::new(http, tls_config, false, resolver);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let pool = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
        .pool_idle_timeout(CONNECTION_IDLE)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build::<_, kube::client::Body>(connector);
    let pool = tower::ServiceExt::map_err(pool, tower::BoxError::from);
    let service = config.extra_headers_layer()?.layer(pool);
    let service = tower::util::option_layer(config.auth_layer()?).layer(service);
    let service = config.base_uri_layer().layer(service);
    let service = throttle.layer().layer(service);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// A workload client's recipe kept for its Cluster's next reconcile.
struct Kept {
    /// The kubeconfig Secret's resourceVersion it was built from.
    version: String,
    recipe: Recipe,
    used: Instant,
}

/// Workload client recipes by Cluster: bounded in number and age (module docs).
#[derive(Default)]
pub struct Clients {
    kept: Mutex<HashMap<ClusterKey, Kept>>,
}

impl Clients {
    /// A new client from the recipe kept for `key`, if that was made from the Secret at
    /// `version`, under `throttle`.
    pub fn get(&self, key: &ClusterKey, version: &str, throttle: Option<&Throttle>) -> Option<kube::Client> {
        let recipe = {
            let mut kept = self.kept.locked();
            let k = kept.get_mut(key).filter(|k| k.version == version && !version.is_empty())?;
            k.used = Instant::now();
            k.recipe.clone()
        };
        recipe.client(throttle).ok()
    }

    /// Keeps `recipe` for `key`, dropping recipes unused for [`CLIENT_IDLE`] and, past
    /// [`MAX_CLIENTS`], the least recently used.
    pub fn put(&self, key: ClusterKey, version: String, recipe: Recipe) {
        let now = Instant::now();
        let mut kept = self.kept.locked();
        kept.insert(key, Kept { version, recipe, used: now });
        if kept.len() > MAX_CLIENTS / 2 {
            kept.retain(|_, k| now.duration_since(k.used) < CLIENT_IDLE);
        }
        while kept.len() > MAX_CLIENTS {
            let Some(oldest) = kept.iter().min_by_key(|(_, k)| k.used).map(|(key, _)| key.clone()) else { break };
            kept.remove(&oldest);
        }
    }

    /// Forgets the recipe of a Cluster that is gone.
    pub fn remove(&self, key: &ClusterKey) {
        self.kept.locked().remove(key);
    }

    /// How many recipes are kept.
    pub fn len(&self) -> usize {
        self.kept.locked().len()
    }

    /// Whether no recipe is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a Cluster keeps between reconciles, whether or not its client is kept.
#[derive(Clone)]
pub struct ClusterState {
    /// The kinds its syncs found served.
    pub discovery: ssa::Discovery,
    /// When its API server said to ask again (`Retry-After`), for every client of it.
    pub throttle: Throttle,
}

impl ClusterState {
    /// What `key` keeps, before its first sync.
    pub fn new(key: &ClusterKey) -> ClusterState {
        ClusterState { discovery: ssa::Discovery::default(), throttle: Throttle::new(format!("the API server of workload cluster {key}")) }
    }
}

// ---------------------------------------------------------------------------------------------
// What an API server said about how soon to ask again: a tower layer on a client records the
// `Retry-After` of its 429 and 503 answers, per client (per server), and says it once.
//
// kube keeps an API error's `Status` but not the response's headers, and a real API server's
// priority-and-fairness rejection is plain text (`Too many requests, please try again later.`)
// with the wait only in its `Retry-After` header. Recorded here, the controller takes it as the
// lower bound of a failed Cluster's next retry ([`Throttle::remaining`]), without holding a
// worker. As client-go does, the wait is for the work that was refused: other requests go on
// (with API priority and fairness a 429 means "this priority level is full now", and holding
// every request for each one made a 12-Cluster fleet at one seat converge in 71 s instead of
// 14–30 s — `tests/chaos_throttle.rs`).

/// The longest wait taken from a `Retry-After`: a proxy answering a day must not stop a Cluster
/// for a day (the server is asked again after this, and may say to wait again).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// One client's "not before": when its server said to ask again. Clones share it.
#[derive(Clone)]
pub struct Throttle(Arc<Inner>);

struct Inner {
    /// Whose server this is, for the log: "the management API server", "the workload API server
    /// of ns/name".
    who: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    until: Option<Instant>,
    /// When each cause (the status code) was last said at WARN.
    said: HashMap<u16, Instant>,
    /// Throttling answers since the cause was last said at WARN.
    since: u64,
}

impl Throttle {
    /// A throttle for the clients of `who`'s API server (named in the log).
    pub fn new(who: impl Into<String>) -> Throttle {
        Throttle(Arc::new(Inner { who: who.into(), state: Mutex::default() }))
    }

    /// How long the server said to wait still, if it did.
    pub fn remaining(&self) -> Option<Duration> {
        let until = self.0.state.locked().until?;
        until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }

    /// The layer that puts this throttle on a client's service stack.
    pub fn layer(&self) -> ThrottleLayer {
        ThrottleLayer(self.clone())
    }

    /// The server answered `code` with `Retry-After: wait` to a `what` (the method): the work it refused is
    /// not retried before then. Said at WARN once per cause and hour, at DEBUG otherwise.
    fn record(&self, code: StatusCode, wait: Duration, what: &str) {
        let now = Instant::now();
        let wait = wait.min(MAX_RETRY_AFTER);
        let (loud, since) = {
            let mut s = self.0.state.locked();
            let until = now + wait;
            s.until = Some(s.until.map_or(until, |u| u.max(until)));
            s.since += 1;
            let loud = s.said.get(&code.as_u16()).is_none_or(|at| now.duration_since(*at) >= crate::model::repeats::REPEAT);
            if loud {
                s.said.insert(code.as_u16(), now);
                s.since = 0;
            }
            (loud, s.since)
        };
        let who = &self.0.who;
        if loud {
            warn!(
                status = code.as_u16(),
                retry_after = ?wait,
                method = what,
                "{who} throttles stacksync ({code} with Retry-After): what it refused is retried after the time it said, \
                 not before (said once per cause and hour)"
            );
        } else {
            debug!(status = code.as_u16(), retry_after = ?wait, method = what, since_said = since, "{who} throttles stacksync");
        }
    }
}

/// The wait a response asks for: `Retry-After` in seconds (the form API servers send), on a 429
/// or a 503 only.
fn asked_wait(code: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    if code != StatusCode::TOO_MANY_REQUESTS && code != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let secs: u64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    // `Retry-After: 0` still means "not right now": a second, as client-go takes it.
    Some(Duration::from_secs(secs.max(1)))
}

/// Puts a [`Throttle`] on a client's service stack.
#[derive(Clone)]
pub struct ThrottleLayer(Throttle);

impl<S> tower::Layer<S> for ThrottleLayer {
    type Service = Throttled<S>;

    fn layer(&self, inner: S) -> Throttled<S> {
        Throttled { inner, throttle: self.0.clone() }
    }
}

/// A client service under a [`Throttle`].
#[derive(Clone)]
pub struct Throttled<S> {
    inner: S,
    throttle: Throttle,
}

impl<S, ReqBody, B> tower::Service<Request<ReqBody>> for Throttled<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Recording<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // Nothing allocated per request: the method (a standard one is a plain value) and a
        // shared handle on the throttle.
        let method = req.method().clone();
        Recording { sent: self.inner.call(req), throttle: Some(self.throttle.clone()), method }
    }
}

pin_project_lite::pin_project! {
    /// A request under way; its answer's `Retry-After` is recorded when it comes.
    pub struct Recording<F> {
        #[pin]
        sent: F,
        throttle: Option<Throttle>,
        method: hyper::Method,
    }
}

impl<F, B, E> std::future::Future for Recording<F>
where
    F: std::future::Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let out = std::task::ready!(this.sent.poll(cx));
        if let (Ok(resp), Some(throttle)) = (&out, this.throttle.take())
            && let Some(wait) = asked_wait(resp.status(), resp.headers())
        {
            throttle.record(resp.status(), wait, this.method.as_str());
        }
        Poll::Ready(out)
    }
}

/// Whether `e`, or an error it was caused by, is a 429 of an API server: said once by the
/// throttle of that server's client, not again by each piece of work it refused.
pub(crate) fn is_throttled(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(kube::Error::Api(s)) = e.downcast_ref::<kube::Error>()
            && s.code == 429
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn config(server: &str, ca: Option<Vec<u8>>) -> kube::Config {
        let mut c = kube::Config::new(server.parse().expect("url"));
        c.root_cert = ca.map(|d| vec![d]);
        c
    }

    #[test]
    fn one_tls_configuration_per_trust_and_identity() {
        let tls = TlsConfigs::default();
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let a = tls.get(&config("https://a.example:6443", None)).expect("platform roots");
        let b = tls.get(&config("https://b.example:6443", None)).expect("platform roots");
        assert!(Arc::ptr_eq(&a, &b), "the platform's roots are loaded once");
        assert_eq!(tls.built(), 1);
        // Another identity is another configuration.
        let mut with_token = config("https://c.example:6443", None);
        with_token.auth_info.client_certificate_data = Some("not a certificate".into());
        assert!(tls.get(&with_token).is_err(), "an unusable client certificate is an error");
        assert_eq!(tls.built(), 2);
        drop((a, b));
        // Dropped by everyone: built again when needed.
        let _c = tls.get(&config("https://d.example:6443", None)).expect("platform roots");
        assert_eq!(tls.built(), 3);
    }

    #[test]
    fn a_file_read_at_connection_time_is_not_shared() {
        let mut c = config("https://a.example:6443", None);
        assert!(tls_key(&c).is_some());
        c.auth_info.client_certificate = Some("/etc/cert.pem".into());
        assert!(tls_key(&c).is_none());
    }

    #[tokio::test]
    async fn kept_clients_are_bounded() {
        let clients = Clients::default();
        let c = Recipe::new(config("http://127.0.0.1:1", None), &TlsConfigs::default()).expect("recipe");
        for i in 0..MAX_CLIENTS + 10 {
            clients.put(ClusterKey::new("ns", format!("c{i}")), "1".into(), c.clone());
        }
        assert_eq!(clients.len(), MAX_CLIENTS);
        // The least recently used went first.
        assert!(clients.get(&ClusterKey::new("ns", "c0"), "1", None).is_none());
        assert!(clients.get(&ClusterKey::new("ns", format!("c{}", MAX_CLIENTS + 9)), "1", None).is_some());
        // Another resourceVersion of the Secret: not the kept client.
        assert!(clients.get(&ClusterKey::new("ns", format!("c{}", MAX_CLIENTS + 9)), "2", None).is_none());
    }

    #[test]
    fn only_429_and_503_with_seconds_ask_for_a_wait() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(asked_wait(StatusCode::TOO_MANY_REQUESTS, &h), Some(Duration::from_secs(7)));
        assert_eq!(asked_wait(StatusCode::SERVICE_UNAVAILABLE, &h), Some(Duration::from_secs(7)));
        assert_eq!(asked_wait(StatusCode::INTERNAL_SERVER_ERROR, &h), None);
        assert_eq!(asked_wait(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new()), None, "no header: the caller's backoff");
        h.insert(RETRY_AFTER, HeaderValue::from_static("0"));
        assert_eq!(asked_wait(StatusCode::TOO_MANY_REQUESTS, &h), Some(Duration::from_secs(1)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(asked_wait(StatusCode::TOO_MANY_REQUESTS, &h), None, "an HTTP date is not what API servers send");
    }

    #[test]
    fn a_recorded_wait_is_kept_and_capped() {
        let t = Throttle::new("the test server");
        assert_eq!(t.remaining(), None);
        t.record(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(86_400), "GET /x");
        let left = t.remaining().expect("throttled");
        assert!(left <= MAX_RETRY_AFTER && left > MAX_RETRY_AFTER - Duration::from_secs(5), "{left:?}");
        // A shorter wait said later does not shorten the one in force.
        t.record(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(1), "GET /x");
        assert!(t.remaining().expect("throttled") > Duration::from_secs(60));
    }

    #[test]
    fn a_429_is_found_in_an_error_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading: {0}")]
        struct Outer(#[source] kube::Error);
        let api = |code| kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed());
        assert!(is_throttled(&Outer(api(429))));
        assert!(!is_throttled(&Outer(api(500))));
    }

    #[test]
    fn messages_name_the_secret_and_reasons_match_what_is_wrong() {
        let secret = "ns/c-kubeconfig".to_owned();
        let table = [
            (
                WorkloadError::SecretMissing { secret: secret.clone() },
                Reason::KubeconfigMissing,
                "Secret ns/c-kubeconfig does not exist yet",
            ),
            (
                WorkloadError::NoKubeconfig { secret: secret.clone() },
                Reason::KubeconfigMissing,
                "Secret ns/c-kubeconfig has no key `value`",
            ),
            (
                WorkloadError::Unusable { secret: secret.clone(), why: "is not UTF-8 text" },
                Reason::ClusterUnreachable,
                "Secret ns/c-kubeconfig: key `value` is not UTF-8 text",
            ),
            (WorkloadError::NoClient { secret }, Reason::ClusterUnreachable, "Secret ns/c-kubeconfig: its kubeconfig gave no client"),
        ];
        for (e, reason, message) in table {
            assert_eq!((e.reason(), e.to_string()), (reason, message.to_owned()));
        }
    }
}
