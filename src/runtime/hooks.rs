//! The Cluster API Runtime SDK listener (`--hooks-addr`): HTTPS on its own port, serving
//! discovery and the `BeforeClusterUpgrade` and `AfterControlPlaneInitialized` handlers at the
//! paths Cluster API calls (`/hooks.runtime.cluster.x-k8s.io/v1alpha1/<hook>/<handler>`). What
//! each handler answers is decided in `targets::kubernetes::hook`; this file is the wire.
//!
//! The certificate and key are read from files (`--hooks-cert-file`, `--hooks-key-file`, as
//! cert-manager mounts `tls.crt` / `tls.key`) and read again when they change: a new connection
//! looks at the files at most once per [`CERT_RECHECK`], and a changed pair that parses and
//! matches replaces the old one without a restart. A half-written or mismatched pair keeps the
//! last good one (logged). Every connection is bounded like the admin listener's: a handshake and
//! read deadline, bodies over [`MAX_BODY_BYTES`] refused, at most [`MAX_CONNECTIONS`] at once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use super::body::BodyError;
use crate::model::ClusterKey;
use crate::model::sync::{MutexExt, RwLockExt};
use crate::targets::kubernetes::hook::{ANSWER_WITHIN, Answer, Hooks, RETRY_AFTER_SECONDS};
use crate::telemetry::metrics;

/// The Runtime SDK's API group and version of the hooks served.
pub const HOOKS_API_VERSION: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";
/// Where Cluster API asks which handlers this extension serves.
pub const DISCOVERY_PATH: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery";
/// Handler names (DNS labels; Cluster API registers them as `<name>.<ExtensionConfig name>`
/// and calls `/<group>/<version>/<hook, lower case>/<name>`).
pub const BEFORE_CLUSTER_UPGRADE: &str = "before-cluster-upgrade";
pub const AFTER_CONTROL_PLANE_INITIALIZED: &str = "after-control-plane-initialized";

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Largest request body: a Cluster object with its status, far below this.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Deadline for the TLS handshake, then for the request head, then for the body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a new connection may look at the certificate files.
pub const CERT_RECHECK: Duration = Duration::from_secs(1);
/// Largest certificate or key file read.
const MAX_PEM_BYTES: u64 = 256 * 1024;
/// Cluster API's per-call timeout this extension asks for (the default; at most 30).
const TIMEOUT_SECONDS: u32 = 10;

/// Errors of the hooks listener at start-up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--hooks-addr `{addr}`: expected `[host]:port` (`:9443`, `127.0.0.1:0`)")]
    ParseAddr { addr: String },
    #[error(
        "--hooks-addr needs --hooks-cert-file and --hooks-key-file (the serving certificate, as cert-manager mounts tls.crt and tls.key)"
    )]
    MissingCert,
    #[error("--hooks-addr serves Cluster API: it needs the kubernetes target, not the directory target")]
    DirectoryTarget,
    #[error("hooks listener: {0}")]
    Certificate(#[source] CertError),
    #[error("hooks listener: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Reads `--hooks-addr`: `:9443` listens on every address; empty or `0` is off (`None`).
///
/// # Errors
/// [`Error::ParseAddr`] for anything else than `[host]:port`.
pub fn parse_addr(addr: &str) -> Result<Option<SocketAddr>, Error> {
    super::admin::parse_addr(addr).map_err(|_| Error::ParseAddr { addr: addr.trim().to_owned() })
}

/// The serving certificate, from files, swapped in when the files change.
#[derive(Debug)]
pub struct Certificates {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The file contents in force and when the files were last looked at.
    seen: Mutex<(Vec<u8>, Instant)>,
}

impl Certificates {
    /// Loads the pair.
    ///
    /// # Errors
    /// [`Error::Certificate`]: a file cannot be read, holds no PEM certificate or key, or the key
    /// does not belong to the certificate.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<Certificates>, Error> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let (bytes, key) = read_pair(cert_file, key_file, &provider).map_err(Error::Certificate)?;
        Ok(Arc::new(Certificates {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new((bytes, Instant::now())),
        }))
    }

    /// Reads the files again if [`CERT_RECHECK`] has passed; a changed, valid pair is put in
    /// force for the next handshakes. Blocking: it reads two small files.
    fn refresh(&self) {
        {
            let mut seen = self.seen.locked();
            if seen.1.elapsed() < CERT_RECHECK {
                return;
            }
            seen.1 = Instant::now();
        }
        let raw = match (read_pem(&self.cert_file), read_pem(&self.key_file)) {
            (Ok(c), Ok(k)) => [c, k].concat(),
            (Err(e), _) | (_, Err(e)) => {
                warn!("hooks listener: {e}; the certificate in use stays");
                return;
            }
        };
        if self.seen.locked().0 == raw {
            return;
        }
        match read_pair(&self.cert_file, &self.key_file, &self.provider) {
            Ok((bytes, key)) => {
                // Said before it takes effect: whoever sees the new certificate finds it logged.
                info!(cert = %self.cert_file.display(), "hooks listener: the certificate changed; new connections use the new one");
                *self.current.write_locked() = Arc::new(key);
                self.seen.locked().0 = bytes;
            }
            // cert-manager may be half-way through writing the pair: the next look retries.
            Err(e) => warn!("hooks listener: {e}; the certificate in use stays"),
        }
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read_locked().clone())
    }
}

/// Why the serving certificate could not be loaded. Names the files, never their content.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: larger than {} KiB; not a PEM certificate or key", path.display(), MAX_PEM_BYTES / 1024)]
    TooLarge { path: PathBuf },
    #[error("{}: not a PEM certificate chain ({source})", path.display())]
    Chain {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{}: no CERTIFICATE block", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no usable PEM private key (PKCS#8, PKCS#1 or SEC1) ({source})", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{} and {}: the key does not fit the certificate ({source})", key.display(), cert.display())]
    Mismatch {
        key: PathBuf,
        cert: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
}

fn read_pem(path: &Path) -> Result<Vec<u8>, CertError> {
    use std::io::Read;
    let fail = |source: std::io::Error| CertError::Read { path: path.to_owned(), source };
    let mut out = Vec::new();
    std::fs::File::open(path).map_err(fail)?.take(MAX_PEM_BYTES + 1).read_to_end(&mut out).map_err(fail)?;
    if out.len() as u64 > MAX_PEM_BYTES {
        return Err(CertError::TooLarge { path: path.to_owned() });
    }
    Ok(out)
}

/// Both files' bytes (to notice a change) and the parsed, matching pair.
fn read_pair(cert_file: &Path, key_file: &Path, provider: &CryptoProvider) -> Result<(Vec<u8>, CertifiedKey), CertError> {
    let cert_pem = read_pem(cert_file)?;
    let key_pem = read_pem(key_file)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|source| CertError::Chain { path: cert_file.to_owned(), source })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate { path: cert_file.to_owned() });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| CertError::Key { path: key_file.to_owned(), source })?;
    let pair = CertifiedKey::from_der(chain, key, provider).map_err(|source| CertError::Mismatch {
        key: key_file.to_owned(),
        cert: cert_file.to_owned(),
        source,
    })?;
    Ok(([cert_pem, key_pem].concat(), pair))
}

/// Binds the listener (at start-up, so a taken port is a start-up error).
///
/// # Errors
/// [`Error::Bind`].
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })
}

/// The TLS side of the listener: the certificate comes from `certs` at each handshake.
///
/// # Errors
/// [`Error::Certificate`] when the TLS configuration cannot be built (not with the built-in
/// provider; checked at start-up all the same).
pub fn acceptor(certs: &Arc<Certificates>) -> Result<tokio_rustls::TlsAcceptor, Error> {
    let mut tls = rustls::ServerConfig::builder_with_provider(certs.provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Certificate(CertError::Tls(e)))?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    // hyper serves HTTP/1.1 here; Cluster API's Go client falls back to it.
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session resumption: a resumed session skips the certificate, so a client would go on
    // trusting the old one after a rotation. A full handshake per call is nothing at this rate.
    tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(tls)))
}

/// Serves until the task is dropped; each connection on its own task. `certs` are looked at
/// again (at most once per [`CERT_RECHECK`]) as connections arrive.
pub async fn serve(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, certs: Arc<Certificates>, hooks: Arc<Hooks>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "hooks listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Before this connection's handshake, so it already gets a rotated certificate. Off the
        // async workers: it may read two files.
        let due = certs.clone();
        let _ = tokio::task::spawn_blocking(move || due.refresh()).await;
        let (acceptor, hooks) = (acceptor.clone(), hooks.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(READ_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    debug!(peer = %peer, error = %e, "hooks listener: TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(peer = %peer, "hooks listener: TLS handshake not done in time");
                    return;
                }
            };
            super::admin::serve_one_request(stream, peer, "hooks", move |req| {
                let hooks = hooks.clone();
                async move { route(&hooks, req).await }
            })
            .await;
            drop(permit);
        });
    }
}

use super::admin::Reply;

fn json_reply(status: StatusCode, body: &Value) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// An error that is not a hook answer: Cluster API treats any status but 200 as a failed call
/// and logs the body.
fn error_reply(status: StatusCode, message: impl Into<String>) -> Reply {
    json_reply(status, &json!({"status": "Failure", "message": message.into()}))
}

async fn route(hooks: &Hooks, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let hook = match path.as_str() {
        DISCOVERY_PATH => {
            if req.method() != Method::POST && req.method() != Method::GET {
                return error_reply(StatusCode::METHOD_NOT_ALLOWED, "use POST");
            }
            metrics().runtime_hook("Discovery", "proceed");
            return json_reply(StatusCode::OK, &discovery());
        }
        p if p == handler_path("BeforeClusterUpgrade", BEFORE_CLUSTER_UPGRADE) => Hook::BeforeClusterUpgrade,
        p if p == handler_path("AfterControlPlaneInitialized", AFTER_CONTROL_PLANE_INITIALIZED) => Hook::AfterControlPlaneInitialized,
        _ => {
            return error_reply(
                StatusCode::NOT_FOUND,
                format!(
                    "not found; this extension serves {DISCOVERY_PATH}, {} and {}",
                    handler_path("BeforeClusterUpgrade", BEFORE_CLUSTER_UPGRADE),
                    handler_path("AfterControlPlaneInitialized", AFTER_CONTROL_PLANE_INITIALIZED)
                ),
            );
        }
    };
    if req.method() != Method::POST {
        return error_reply(StatusCode::METHOD_NOT_ALLOWED, "use POST");
    }
    let body = match read_body(req).await {
        Ok(b) => b,
        Err((status, why)) => {
            warn!(hook = hook.name(), "runtime hook: {why}");
            metrics().runtime_hook(hook.name(), "bad_request");
            return error_reply(status, why);
        }
    };
    let request = match parse_request(hook, &body) {
        Ok(r) => r,
        Err(why) => {
            warn!(hook = hook.name(), "runtime hook: {why}");
            metrics().runtime_hook(hook.name(), "bad_request");
            return error_reply(StatusCode::BAD_REQUEST, why.to_string());
        }
    };
    let key = &request.key;
    let decided = async {
        match hook {
            Hook::BeforeClusterUpgrade => hooks.before_cluster_upgrade(key, &request.cluster).await,
            Hook::AfterControlPlaneInitialized => hooks.after_control_plane_initialized(key, &request.cluster).await,
        }
    };
    let answer = tokio::time::timeout(ANSWER_WITHIN, decided).await.unwrap_or_else(|_| {
        Answer::Retry(format!("stacksync could not read the state of Cluster {key} within {}s", ANSWER_WITHIN.as_secs()))
    });
    // Non-blocking hooks have no retry: a "not yet" is a success there.
    let answer = match (hook, answer) {
        (Hook::AfterControlPlaneInitialized, Answer::Retry(m)) => Answer::Proceed(m),
        (_, a) => a,
    };
    info!(
        hook = %hook.name(),
        cluster = %key,
        from = %request.from,
        to = %request.to,
        answer = %answer.label(),
        "runtime hook: {}",
        answer.message()
    );
    metrics().runtime_hook(hook.name(), answer.label());
    json_reply(StatusCode::OK, &response(hook, &answer))
}

/// The hooks served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    BeforeClusterUpgrade,
    AfterControlPlaneInitialized,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Hook::BeforeClusterUpgrade => "BeforeClusterUpgrade",
            Hook::AfterControlPlaneInitialized => "AfterControlPlaneInitialized",
        }
    }
}

/// `/<group>/<version>/<hook in lower case>/<handler name>`: Cluster API's path for a handler.
fn handler_path(hook: &str, handler: &str) -> String {
    format!("/{HOOKS_API_VERSION}/{}/{handler}", hook.to_ascii_lowercase())
}

/// The `DiscoveryResponse`: `BeforeClusterUpgrade` fails closed (an unreachable stacksync holds
/// the upgrade: the stages must run first); `AfterControlPlaneInitialized` is informational and
/// ignored when stacksync cannot be reached (the Cluster watch starts the install anyway).
pub fn discovery() -> Value {
    let handler = |name: &str, hook: &str, policy: &str| {
        json!({
            "name": name,
            "requestHook": {"apiVersion": HOOKS_API_VERSION, "hook": hook},
            "timeoutSeconds": TIMEOUT_SECONDS,
            "failurePolicy": policy,
        })
    };
    json!({
        "apiVersion": HOOKS_API_VERSION,
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": [
            handler(BEFORE_CLUSTER_UPGRADE, "BeforeClusterUpgrade", "Fail"),
            handler(AFTER_CONTROL_PLANE_INITIALIZED, "AfterControlPlaneInitialized", "Ignore"),
        ],
    })
}

/// The `<Hook>Response` for an answer. `BeforeClusterUpgradeResponse` carries
/// `retryAfterSeconds` (0: go on); `AfterControlPlaneInitializedResponse` has none.
fn response(hook: Hook, answer: &Answer) -> Value {
    let (status, retry) = match answer {
        Answer::Proceed(_) => ("Success", 0),
        Answer::Retry(_) => ("Success", RETRY_AFTER_SECONDS),
        Answer::Fail(_) => ("Failure", 0),
    };
    let mut r = json!({
        "apiVersion": HOOKS_API_VERSION,
        "kind": format!("{}Response", hook.name()),
        "status": status,
        "message": answer.message(),
    });
    if hook == Hook::BeforeClusterUpgrade {
        r["retryAfterSeconds"] = json!(retry);
    }
    r
}

/// What a hook request carries that is used.
#[derive(Debug)]
struct HookRequest {
    key: ClusterKey,
    cluster: Value,
    from: String,
    to: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    api_version: Option<String>,
    kind: Option<String>,
    cluster: Value,
    #[serde(default)]
    from_kubernetes_version: String,
    #[serde(default)]
    to_kubernetes_version: String,
}

/// Why a hook request was refused (400): each says which request and what is wrong with it.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error("{want}: not valid JSON of a {want} ({source})")]
    Json {
        want: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{want}: apiVersion {found} is not served; this extension serves {HOOKS_API_VERSION}")]
    ApiVersion { want: String, found: String },
    #[error("{want}: kind {found} sent to the {hook} handler")]
    Kind { want: String, found: String, hook: &'static str },
    #[error("{want}: `cluster` must be a Cluster object")]
    NotAnObject { want: String },
    #[error("{want}: cluster.apiVersion {found} is not a Cluster API Cluster (cluster.x-k8s.io/v1beta1 or v1beta2)")]
    NotACluster { want: String, found: String },
    #[error("{want}: cluster.metadata.{field}: {source}")]
    Name {
        want: String,
        field: &'static str,
        #[source]
        source: crate::model::names::NameError,
    },
}

/// Parses a `<Hook>Request`. The Cluster may be `cluster.x-k8s.io/v1beta1` (what the v1alpha1
/// hooks send today) or `v1beta2`. Pure.
fn parse_request(hook: Hook, body: &[u8]) -> Result<HookRequest, BadRequest> {
    let want = format!("{}Request", hook.name());
    let wire: Wire = match serde_json::from_slice(body) {
        Ok(w) => w,
        Err(source) => return Err(BadRequest::Json { want, source }),
    };
    if let Some(v) = wire.api_version.as_deref().filter(|v| *v != HOOKS_API_VERSION) {
        return Err(BadRequest::ApiVersion { want, found: v.to_owned() });
    }
    if let Some(k) = wire.kind.as_deref().filter(|k| *k != want) {
        return Err(BadRequest::Kind { found: k.to_owned(), want, hook: hook.name() });
    }
    let cluster = wire.cluster;
    if !cluster.is_object() {
        return Err(BadRequest::NotAnObject { want });
    }
    match cluster["apiVersion"].as_str() {
        None | Some("cluster.x-k8s.io/v1beta1" | "cluster.x-k8s.io/v1beta2") => {}
        Some(v) => return Err(BadRequest::NotACluster { want, found: v.to_owned() }),
    }
    let field = |name: &str| cluster["metadata"][name].as_str().unwrap_or_default().to_owned();
    let (namespace, name) = (field("namespace"), field("name"));
    // Both end up in a URL path (the ClusterSync's).
    if let Err(source) = crate::model::names::check_namespace(&namespace) {
        return Err(BadRequest::Name { want, field: "namespace", source });
    }
    if let Err(source) = crate::model::names::check_name(&name) {
        return Err(BadRequest::Name { want, field: "name", source });
    }
    Ok(HookRequest { key: ClusterKey::new(namespace, name), cluster, from: wire.from_kubernetes_version, to: wire.to_kubernetes_version })
}

/// Reads the body within [`READ_TIMEOUT`], refusing one over [`MAX_BODY_BYTES`].
async fn read_body(req: Request<Incoming>) -> Result<Bytes, (StatusCode, String)> {
    super::body::read(req, MAX_BODY_BYTES, READ_TIMEOUT).await.map_err(|e| {
        let status = match e {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::TimedOut => StatusCode::REQUEST_TIMEOUT,
            BodyError::Failed(_) => StatusCode::BAD_REQUEST,
        };
        (status, e.message(MAX_BODY_BYTES))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_are_served_where_cluster_api_calls_them() {
        assert_eq!(
            handler_path("BeforeClusterUpgrade", BEFORE_CLUSTER_UPGRADE),
            "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclusterupgrade/before-cluster-upgrade"
        );
        let d = discovery();
        assert_eq!(d["handlers"][0]["requestHook"], json!({"apiVersion": HOOKS_API_VERSION, "hook": "BeforeClusterUpgrade"}));
        assert_eq!(d["handlers"][1]["failurePolicy"], "Ignore");
    }

    #[test]
    fn requests_are_read_in_both_cluster_versions_and_bad_ones_say_why() {
        let body = |cluster: Value| {
            serde_json::to_vec(&json!({
                "apiVersion": HOOKS_API_VERSION, "kind": "BeforeClusterUpgradeRequest", "cluster": cluster,
                "fromKubernetesVersion": "v1.27.3", "toKubernetesVersion": "v1.28.1",
            }))
            .unwrap()
        };
        for v in ["v1beta1", "v1beta2"] {
            let c = json!({"apiVersion": format!("cluster.x-k8s.io/{v}"), "kind": "Cluster", "metadata": {"name": "alpha", "namespace": "team-a"}});
            let r = parse_request(Hook::BeforeClusterUpgrade, &body(c)).unwrap();
            assert_eq!((r.key.to_string(), r.to.as_str()), ("team-a/alpha".to_owned(), "v1.28.1"));
        }
        let table: Vec<(Vec<u8>, &str)> = vec![
            (b"{not json".to_vec(), "not valid JSON"),
            (br#"{"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1"}"#.to_vec(), "missing field `cluster`"),
            (body(json!("alpha")), "must be a Cluster object"),
            (body(json!({"apiVersion": "v1", "kind": "ConfigMap"})), "is not a Cluster API Cluster"),
            (body(json!({"metadata": {"name": "../x", "namespace": "team-a"}})), "cluster.metadata.name"),
            (
                br#"{"apiVersion": "hooks.runtime.cluster.x-k8s.io/v9", "cluster": {}}"#.to_vec(),
                "apiVersion hooks.runtime.cluster.x-k8s.io/v9 is not served",
            ),
        ];
        for (b, want) in table {
            let e = parse_request(Hook::BeforeClusterUpgrade, &b).unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("BeforeClusterUpgradeRequest: "), "{e}");
        }
        let e = parse_request(Hook::AfterControlPlaneInitialized, &body(json!({}))).unwrap_err().to_string();
        assert!(e.contains("kind BeforeClusterUpgradeRequest sent to the AfterControlPlaneInitialized handler"), "{e}");
    }

    #[test]
    fn responses_have_the_runtime_sdk_shape() {
        let r = response(Hook::BeforeClusterUpgrade, &Answer::Retry("stage 2/3".into()));
        assert_eq!(
            r,
            json!({"apiVersion": HOOKS_API_VERSION, "kind": "BeforeClusterUpgradeResponse", "status": "Success", "message": "stage 2/3", "retryAfterSeconds": RETRY_AFTER_SECONDS})
        );
        let r = response(Hook::BeforeClusterUpgrade, &Answer::Fail("timed out".into()));
        assert_eq!((r["status"].as_str(), r["retryAfterSeconds"].as_u64()), (Some("Failure"), Some(0)));
        let r = response(Hook::AfterControlPlaneInitialized, &Answer::Proceed("ok".into()));
        assert!(r.get("retryAfterSeconds").is_none() && r["kind"] == "AfterControlPlaneInitializedResponse");
    }
}
