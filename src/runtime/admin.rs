//! The admin listener (`--admin-addr`): `/healthz`, `/readyz`, `/metrics`, and the push
//! webhooks `POST /hooks/github` and `POST /hooks/generic/<source>`, which poll the sources a
//! delivery names at once instead of at their next scheduled poll.
//!
//! Every connection is bounded: a deadline on reading the request head and the body, bodies over
//! [`MAX_BODY_BYTES`] refused with 413 before they are read, at most [`MAX_CONNECTIONS`] at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, error, info, warn};

use super::body::BodyError;
use super::webhook::{self, GithubEvent, MAX_BODY_BYTES, ReplayWindow};
use crate::config::Config;
use crate::model::sync::MutexExt;
use crate::telemetry::{metrics, readiness};

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Deadline for a client to send its request head, and separately its body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head (request line and headers) read.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Longest `X-GitHub-Delivery` remembered (GitHub's are 36-character GUIDs).
const MAX_DELIVERY_ID: usize = 128;
/// Largest secret or token file read.
const MAX_SECRET_BYTES: u64 = 4096;

/// Errors of the admin listener.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--admin-addr `{addr}`: expected `[host]:port` (`:8080`, `127.0.0.1:0`), or `0` to turn the listener off")]
    ParseAddr { addr: String },
    #[error("admin listener: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Reads `--admin-addr`: `:8080` listens on every address, `0` or an empty string turns the
/// listener off (`None`).
///
/// # Errors
/// [`Error::ParseAddr`] for anything else than `[host]:port`.
pub fn parse_addr(addr: &str) -> Result<Option<SocketAddr>, Error> {
    let addr = addr.trim();
    if addr.is_empty() || addr == "0" {
        return Ok(None);
    }
    let full = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.to_owned() };
    full.parse().map(Some).map_err(|_| Error::ParseAddr { addr: addr.to_owned() })
}

/// Binds the listener (before anything else starts, so a taken port is a start-up error).
///
/// # Errors
/// [`Error::Bind`].
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })
}

/// What the listener shares with the daemon: the config in force (for the webhook secrets and
/// the sources a delivery may name) and the channel on which it asks for polls.
pub struct Admin {
    config: Mutex<Arc<Config>>,
    triggers: mpsc::Sender<String>,
    replay: Mutex<ReplayWindow>,
}

impl Admin {
    /// The listener's state and the receiving end of its poll requests (source names), which
    /// the daemon hands to its pollers.
    pub fn new(config: Config) -> (Arc<Admin>, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(256);
        (Arc::new(Admin { config: Mutex::new(Arc::new(config)), triggers: tx, replay: Mutex::default() }), rx)
    }

    /// Puts a reloaded config in force for the webhooks and `/readyz`.
    pub fn set_config(&self, config: Config) {
        *self.config.locked() = Arc::new(config);
    }

    fn config(&self) -> Arc<Config> {
        self.config.locked().clone()
    }

    fn trigger(&self, sources: &[String]) {
        for s in sources {
            // A full queue means polls are already requested faster than they run; the pollers
            // coalesce requests anyway, so dropping one loses nothing.
            if self.triggers.try_send(s.clone()).is_err() {
                debug!(source = %s, "poll request queue full; a poll is already pending");
            }
        }
    }
}

/// Serves until the task is dropped. Each connection runs on its own task.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                warn!(error = %e, "admin listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            serve_one_request(stream, peer, "admin", move |req| {
                let admin = admin.clone();
                async move { route(&admin, req).await }
            })
            .await;
            drop(permit);
        });
    }
}

pub(super) type Reply = Response<Full<Bytes>>;

/// Serves one HTTP/1.1 request on `io` (the admin and the hooks listener): no keep-alive — an
/// idle connection must not hold one of the listener's slots (the kubelet's probes need them;
/// Cluster API's calls are seconds apart) —, the request head within [`READ_TIMEOUT`] and
/// [`MAX_HEAD_BYTES`].
pub(super) async fn serve_one_request<I, F, Fut>(io: I, peer: SocketAddr, listener: &'static str, handle: F)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    F: Fn(Request<Incoming>) -> Fut,
    Fut: std::future::Future<Output = Reply>,
{
    let service = hyper::service::service_fn(move |req| {
        let reply = handle(req);
        async move { Ok::<_, Infallible>(reply.await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(io), service);
    if let Err(e) = conn.await {
        debug!(peer = %peer, error = %e, "{listener} connection ended");
    }
}

fn reply(status: StatusCode, body: impl Into<String>) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body.into() + "\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

async fn route(admin: &Admin, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "ok"),
        (&Method::GET, "/readyz") => {
            let config = admin.config();
            // The directory target polls inside its passes: the first pass is what counts there.
            let sources: std::collections::BTreeSet<&str> = match config.target {
                crate::config::Target::Kubernetes(_) => config.subscriptions.iter().map(|s| s.source.as_str()).collect(),
                crate::config::Target::Directory(_) => Default::default(),
            };
            match readiness().check(sources) {
                Ok(()) => reply(StatusCode::OK, "ready"),
                Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
            }
        }
        (&Method::GET, "/metrics") => {
            let mut r = reply(StatusCode::OK, "");
            *r.body_mut() = Full::new(Bytes::from(metrics().encode()));
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"));
            r
        }
        (&Method::POST, "/hooks/github") => github(admin, req).await,
        (&Method::POST, p) if p.starts_with("/hooks/generic/") => {
            let source = p.trim_start_matches("/hooks/generic/").to_owned();
            generic(admin, &source, req).await
        }
        (_, "/healthz" | "/readyz" | "/metrics") => reply(StatusCode::METHOD_NOT_ALLOWED, "use GET"),
        (_, p) if p.starts_with("/hooks/") => reply(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
        _ => reply(StatusCode::NOT_FOUND, "not found; try /healthz, /readyz, /metrics, /hooks/github, /hooks/generic/<source>"),
    }
}

/// Reads the body, refusing one over [`MAX_BODY_BYTES`] and one that does not arrive within
/// [`READ_TIMEOUT`] (the one bounded reader of both listeners: [`super::body::read`]).
async fn read_body(req: Request<Incoming>) -> Result<Bytes, BodyError> {
    super::body::read(req, MAX_BODY_BYTES, READ_TIMEOUT).await
}

/// Reads a secret file (whole, trimmed of surrounding white space, at most
/// [`MAX_SECRET_BYTES`]). Read on every delivery, so a rotated Secret volume is used at once.
fn read_secret(path: &Path) -> Result<Vec<u8>, SecretFileError> {
    use std::io::Read;
    let fail = |source: std::io::Error| SecretFileError::Read { path: path.to_owned(), source };
    let meta = std::fs::metadata(path).map_err(fail)?;
    if !meta.is_file() {
        return Err(SecretFileError::NotAFile { path: path.to_owned() });
    }
    let mut text = Vec::new();
    std::fs::File::open(path).map_err(fail)?.take(MAX_SECRET_BYTES + 1).read_to_end(&mut text).map_err(fail)?;
    if text.len() as u64 > MAX_SECRET_BYTES {
        return Err(SecretFileError::TooLarge { path: path.to_owned() });
    }
    let trimmed = text.trim_ascii();
    if trimmed.is_empty() {
        return Err(SecretFileError::Empty { path: path.to_owned() });
    }
    Ok(trimmed.to_vec())
}

/// A webhook secret or token file that cannot be used. Names the file, never its content.
#[derive(Debug, thiserror::Error)]
enum SecretFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a regular file", path.display())]
    NotAFile { path: std::path::PathBuf },
    #[error("{}: larger than {MAX_SECRET_BYTES} bytes; not a secret", path.display())]
    TooLarge { path: std::path::PathBuf },
    #[error("{}: the file is empty", path.display())]
    Empty { path: std::path::PathBuf },
}

fn header<'r>(req: &'r Request<Incoming>, name: &str) -> Option<&'r str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn github(admin: &Admin, req: Request<Incoming>) -> Reply {
    let m = metrics();
    let config = admin.config();
    let Some(secret_file) = config.webhooks.github_secret_file.clone() else {
        return reply(StatusCode::NOT_FOUND, "the GitHub webhook is not configured (webhooks.github.secretFile)");
    };
    let event = header(&req, "x-github-event").unwrap_or_default().to_owned();
    let delivery = header(&req, "x-github-delivery").unwrap_or_default().to_owned();
    let signature = header(&req, "x-hub-signature-256").map(str::to_owned);
    if header(&req, CONTENT_TYPE.as_str()).is_some_and(|c| c.starts_with("application/x-www-form-urlencoded")) {
        m.webhook("github", "other", "bad_request");
        return reply(StatusCode::UNSUPPORTED_MEDIA_TYPE, "set the webhook's content type to application/json");
    }
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            warn!(delivery = %delivery, event = %event, "webhook: body over 1 MiB refused");
            m.webhook("github", "other", "too_large");
            return reply(StatusCode::PAYLOAD_TOO_LARGE, "body over 1 MiB");
        }
        Err(e) => {
            m.webhook("github", "other", "bad_request");
            return reply(StatusCode::BAD_REQUEST, e.message(MAX_BODY_BYTES));
        }
    };
    let secret = match read_secret(&secret_file) {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "webhook: the GitHub secret file is unreadable; deliveries are refused");
            m.webhook("github", "other", "unavailable");
            return reply(StatusCode::SERVICE_UNAVAILABLE, "the webhook secret is unavailable");
        }
    };
    if !webhook::verify_signature(&secret, &body, signature.as_deref()) {
        warn!(delivery = %delivery, event = %event, "webhook: bad or missing X-Hub-Signature-256; nothing triggered");
        m.webhook("github", "other", "unauthorized");
        return reply(StatusCode::UNAUTHORIZED, "bad or missing X-Hub-Signature-256");
    }
    let parsed = match webhook::parse_github(&event, &body) {
        Ok(p) => p,
        Err(e) => {
            warn!(delivery = %delivery, event = %event, "webhook: {e}");
            m.webhook("github", "other", "bad_request");
            return reply(StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    let label = parsed.label(&event);
    if delivery.len() > MAX_DELIVERY_ID {
        m.webhook("github", label, "bad_request");
        return reply(StatusCode::BAD_REQUEST, format!("X-GitHub-Delivery longer than {MAX_DELIVERY_ID} characters"));
    }
    // Recorded only once the signature holds: unsigned requests cannot use up delivery ids.
    if !delivery.is_empty() && !admin.replay.locked().first_seen(&delivery, tokio::time::Instant::now()) {
        info!(delivery = %delivery, event = %event, "webhook: delivery already handled within the hour; nothing triggered");
        m.webhook("github", label, "replayed");
        return reply(StatusCode::OK, "delivery already handled");
    }
    act_on_github(admin, &config, parsed, (&event, &delivery, label))
}

/// What an authentic, new GitHub delivery (`event`, `delivery`, its metrics `label`) does: a
/// ping is answered, a push or release of a repository a source follows polls those sources
/// now, anything else is not acted on.
fn act_on_github(admin: &Admin, config: &Config, parsed: GithubEvent, (event, delivery, label): (&str, &str, &'static str)) -> Reply {
    let m = metrics();
    match parsed {
        GithubEvent::Ping => {
            info!(delivery = %delivery, "webhook: ping");
            m.webhook("github", label, "ignored");
            reply(StatusCode::OK, "pong")
        }
        GithubEvent::Other | GithubEvent::IgnoredAction(_) => {
            info!(delivery = %delivery, event = %event, "webhook: event not acted on");
            m.webhook("github", label, "ignored");
            reply(StatusCode::ACCEPTED, "event not acted on")
        }
        GithubEvent::Changed(repo) => {
            let sources = webhook::matching_sources(config, &repo);
            info!(delivery = %delivery, event = %event, repository = %repo.full_name, sources = ?sources, "webhook: polling now");
            if sources.is_empty() {
                m.webhook("github", label, "no_match");
                return reply(StatusCode::ACCEPTED, format!("no source follows {}", repo.full_name));
            }
            admin.trigger(&sources);
            m.webhook("github", label, "triggered");
            reply(StatusCode::ACCEPTED, format!("polling {}", sources.join(", ")))
        }
    }
}

async fn generic(admin: &Admin, source: &str, req: Request<Incoming>) -> Reply {
    let m = metrics();
    let config = admin.config();
    let Some(token_file) = config.webhooks.generic_token_file.clone() else {
        return reply(StatusCode::NOT_FOUND, "the generic webhook is not configured (webhooks.generic.tokenFile)");
    };
    let presented = header(&req, "authorization").and_then(|a| a.strip_prefix("Bearer ")).map(|t| t.trim().as_bytes().to_vec());
    if let Err(BodyError::TooLarge) = read_body(req).await {
        m.webhook("generic", "push", "too_large");
        return reply(StatusCode::PAYLOAD_TOO_LARGE, "body over 1 MiB");
    }
    let token = match read_secret(&token_file) {
        Ok(t) => t,
        Err(e) => {
            error!(error = %e, "webhook: the generic token file is unreadable; deliveries are refused");
            m.webhook("generic", "push", "unavailable");
            return reply(StatusCode::SERVICE_UNAVAILABLE, "the webhook token is unavailable");
        }
    };
    if !presented.is_some_and(|p| webhook::token_matches(&token, &p)) {
        warn!(source = %source, "webhook: bad or missing bearer token; nothing triggered");
        m.webhook("generic", "push", "unauthorized");
        return reply(StatusCode::UNAUTHORIZED, "bad or missing Authorization: Bearer token");
    }
    // Named only after authentication, so the source list is not open to probing.
    if config.source(source).is_none() {
        m.webhook("generic", "push", "no_match");
        return reply(StatusCode::NOT_FOUND, format!("no source named `{source}`"));
    }
    info!(source = %source, "webhook: polling now");
    admin.trigger(&[source.to_owned()]);
    m.webhook("generic", "push", "triggered");
    reply(StatusCode::ACCEPTED, format!("polling {source}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_addr_forms() {
        assert_eq!(parse_addr(":8080").unwrap(), Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(parse_addr("127.0.0.1:0").unwrap(), Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(parse_addr("[::1]:9000").unwrap(), Some("[::1]:9000".parse().unwrap()));
        assert_eq!(parse_addr("0").unwrap(), None);
        assert_eq!(parse_addr("").unwrap(), None);
        assert!(parse_addr("localhost").unwrap_err().to_string().contains("`localhost`"));
    }
}
