//! GitHub release assets as a source (reqwest, rustls): releases listed with pagination and
//! conditional requests, rate limits honoured, assets streamed to the blob store and verified
//! before anything uses them. The API token goes to the API origin only — never to the storage
//! host a download redirects to, and never into a log line.

pub mod materialise;
mod source;
pub mod verify;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, AUTHORIZATION, ETAG, HeaderMap, IF_NONE_MATCH, LOCATION, RETRY_AFTER, USER_AGENT};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use tracing::{debug, info, warn};

use crate::cache::blobs::{BlobError, Blobs};
use crate::model::Sha256Digest;

/// Never wait longer than this for a rate-limit reset inside one poll; fail and retry next poll.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(15 * 60);
/// Attempts for one download when the connection is cut.
pub const DOWNLOAD_ATTEMPTS: u32 = 3;

/// Redirects one asset download follows (GitHub's API to its storage host, and CDNs beyond).
pub const MAX_REDIRECTS: usize = 5;
/// Deadline of one API request, its body included.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(60);
/// Deadline of one asset download, every attempt included: a storage host trickling bytes is
/// cut off here, however steadily it trickles.
pub const DOWNLOAD_DEADLINE: Duration = Duration::from_secs(10 * 60);
/// Largest release-list page read; GitHub's pages of 100 releases are far below it.
pub const MAX_PAGE_BYTES: u64 = 32 * 1024 * 1024;
/// A connection that sends nothing for this long is cut (each request, each download attempt).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// A connection not established within this long is given up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most release-list pages read in one listing (100 releases each): a listing stopped here is
/// said at WARN, with the cap and the repository.
pub const MAX_PAGES: u32 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `message` says what failed in an operator's words (which deadline fired, the cause
    /// chain); `source` is reqwest's error when there is one (not for a bad URL or a deadline
    /// of our own).
    #[error("{repo}: request {url} failed: {message}")]
    Request {
        repo: String,
        url: String,
        message: String,
        #[source]
        source: Option<reqwest::Error>,
    },
    #[error("{repo}: {url} answered {status}: {message}")]
    Status { repo: String, url: String, status: u16, message: String },
    #[error("{repo}: rate limited for {seconds}s more (longer than the {max}s stacksync waits in one poll)")]
    RateLimited { repo: String, seconds: u64, max: u64 },
    #[error("{repo}: cannot read the release list: {url}: {source}")]
    Decode {
        repo: String,
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{repo}: {url}: the page is larger than the limit of {limit} bytes")]
    PageTooLarge { repo: String, url: String, limit: u64 },
    #[error("{repo}: release {tag}: asset {asset}: {source}")]
    Download {
        repo: String,
        tag: String,
        asset: String,
        #[source]
        source: BlobError,
    },
    /// The asset's URL (or the storage host it redirects to) answered a status that downloading
    /// again will not change (4xx but 429; 5xx and 429 are retried).
    #[error("{repo}: release {tag}: asset {asset}: {url}: answered {status}")]
    DownloadStatus { repo: String, tag: String, asset: String, url: String, status: StatusCode },
    #[error("{repo}: cannot read token: {source}")]
    Token {
        repo: String,
        #[source]
        source: TokenError,
    },
}

impl Error {
    /// Whether trying again soon may succeed with nothing changed: the network, a 5xx or 429, a
    /// rate limit, the blob store's disk; not a 4xx, a page that is not a release list or too
    /// large, an asset that does not verify, or a token that is not there.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Request { .. } | Error::RateLimited { .. } => true,
            // 304 without a cached page: the cache was dropped meanwhile; the next poll asks anew.
            Error::Status { status, .. } => *status >= 500 || *status == 429 || *status == 304,
            Error::DownloadStatus { status, .. } => status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS,
            Error::Decode { .. } | Error::PageTooLarge { .. } => false,
            Error::Download { source, .. } => source.is_transient(),
            Error::Token { source, .. } => source.is_transient(),
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Request { .. } => "GithubRequest",
            Error::Status { status: 401 | 403, .. }
            | Error::DownloadStatus { status: StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, .. } => "Unauthorized",
            Error::Status { status: 404, .. } | Error::DownloadStatus { status: StatusCode::NOT_FOUND, .. } => "NotFound",
            Error::Status { .. } | Error::DownloadStatus { .. } => "GithubStatus",
            Error::RateLimited { .. } => "RateLimited",
            Error::Decode { .. } => "GithubDecode",
            Error::PageTooLarge { .. } => "PageTooLarge",
            Error::Download { source, .. } => source.reason(),
            Error::Token { .. } => "Token",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A string that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Secret {
    pub fn new(secret: String) -> Secret {
        Secret(secret)
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

use crate::model::source::TokenSource;

/// Why a token (or password) could not be read from its [`TokenSource`]. Never holds the secret.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token file {}: {source}", path.display())]
    File {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("environment variable {var} is not set")]
    Env {
        var: String,
        #[source]
        source: std::env::VarError,
    },
    #[error("the token is empty")]
    Empty,
}

impl TokenError {
    /// A file that cannot be read may be a mounted Secret being rotated; an unset variable or an
    /// empty token waits for someone to change it.
    pub fn is_transient(&self) -> bool {
        matches!(self, TokenError::File { .. })
    }
}

impl TokenSource {
    /// # Errors
    /// The file cannot be read, the variable is unset, or the token is empty.
    pub fn read(&self) -> std::result::Result<Secret, TokenError> {
        let raw = match self {
            TokenSource::File(p) => std::fs::read_to_string(p).map_err(|source| TokenError::File { path: p.clone(), source })?,
            TokenSource::Env(v) => std::env::var(v).map_err(|source| TokenError::Env { var: v.clone(), source })?,
        };
        let token = raw.trim();
        if token.is_empty() {
            return Err(TokenError::Empty);
        }
        Ok(Secret(token.to_owned()))
    }
}

pub use crate::model::published::{CachedPage, GhAsset, GhRelease, GithubState};

/// The list endpoint's JSON, reduced to what is used.
#[derive(Deserialize)]
struct ApiRelease {
    id: u64,
    tag_name: String,
    #[serde(default)]
    draft: bool,
    #[serde(default)]
    prerelease: bool,
    #[serde(default)]
    assets: Vec<ApiAsset>,
}

#[derive(Deserialize)]
struct ApiAsset {
    id: u64,
    name: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    digest: Option<String>,
    url: String,
}

/// What a listing cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListStats {
    pub pages: u32,
    pub not_modified: u32,
}

/// A client for one repository.
pub struct Client {
    http: reqwest::Client,
    api: Url,
    repo: String,
    token: Option<Secret>,
    /// `(remaining, reset epoch seconds)` from the last response.
    /// What the last response said of the quota: requests left, and when (on the monotonic
    /// clock) it resets.
    quota: std::sync::Mutex<Option<(u64, Instant)>>,
    limits: Limits,
}

/// Deadlines and size caps of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub request_deadline: Duration,
    pub download_deadline: Duration,
    pub max_page_bytes: u64,
    /// A connection silent this long is cut ([`READ_TIMEOUT`]).
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_deadline: REQUEST_DEADLINE,
            download_deadline: DOWNLOAD_DEADLINE,
            max_page_bytes: MAX_PAGE_BYTES,
            read_timeout: READ_TIMEOUT,
        }
    }
}

/// A request error as an operator needs it: a timeout says so and how long, anything else
/// shows its cause chain (reqwest's own text is only `error sending request`).
pub fn describe(e: &reqwest::Error, deadline: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {}s", deadline.as_secs());
    }
    chain(e)
}

/// [`describe`] for a request sent at `started` under a client with `read_timeout` and
/// [`CONNECT_TIMEOUT`]: a timeout names the deadline that fired — connecting, a silent
/// connection (read timeout), or the request's own `deadline` — never a longer one that did not.
pub fn describe_since(e: &reqwest::Error, deadline: Duration, read_timeout: Duration, started: Instant) -> String {
    if !e.is_timeout() {
        return chain(e);
    }
    timeout_message(e.is_connect(), deadline, read_timeout, started.elapsed())
}

/// Which deadline cut a request that timed out `elapsed` after it was sent (pure).
fn timeout_message(connecting: bool, deadline: Duration, read_timeout: Duration, elapsed: Duration) -> String {
    if connecting {
        return format!("no connection within {}s (connect timeout)", CONNECT_TIMEOUT.as_secs().min(deadline.as_secs()));
    }
    // The request's deadline fires at `deadline`; anything earlier is the read timeout.
    if elapsed + Duration::from_secs(1) < deadline && read_timeout < deadline {
        return format!(
            "nothing received for {}s (read timeout), {}s after the request was sent",
            read_timeout.as_secs(),
            elapsed.as_secs()
        );
    }
    format!("timed out after {}s (the request's deadline)", deadline.as_secs())
}

fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// How reading a bounded body ended badly ([`read_bounded`]).
pub enum BodyError {
    /// More than the limit arrived (or was declared).
    TooLarge,
    /// The deadline passed or the connection failed: the message says which; `source` is
    /// reqwest's error when the connection failed.
    Request { message: String, source: Option<reqwest::Error> },
}

/// Reads a response body chunk by chunk, refusing it past `limit` bytes (a declared length
/// is not trusted, only checked first), all within `deadline`.
pub async fn read_bounded(mut resp: reqwest::Response, limit: u64, deadline: Duration) -> std::result::Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    let started = Instant::now();
    let read = async {
        while let Some(chunk) = resp.chunk().await? {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Ok(false);
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<bool, reqwest::Error>(true)
    };
    match tokio::time::timeout(deadline, read).await {
        Err(_) => Err(BodyError::Request {
            message: format!("timed out after {}s (the request's deadline, body included)", deadline.as_secs()),
            source: None,
        }),
        Ok(Err(e)) => {
            let e = e.without_url();
            Err(BodyError::Request { message: describe_since(&e, deadline, deadline, started), source: Some(e) })
        }
        Ok(Ok(false)) => Err(BodyError::TooLarge),
        Ok(Ok(true)) => Ok(body),
    }
}

/// The HTTP client of a [`Client`].
fn http(read_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        // Redirects are followed by hand so the token never follows them to another host.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        // A silent connection fails here; a trickling one at the per-operation deadlines.
        .read_timeout(read_timeout)
        .build()
}

impl Client {
    /// # Errors
    /// The API URL is invalid or the HTTP client cannot be built.
    pub fn new(api_url: &str, repo: &str, token: Option<Secret>) -> Result<Client> {
        let err = |message: String, source| Error::Request { repo: repo.to_owned(), url: api_url.to_owned(), message, source };
        let mut api = Url::parse(api_url).map_err(|e| err(e.to_string(), None))?;
        if !api.path().ends_with('/') {
            let path = format!("{}/", api.path());
            api.set_path(&path);
        }
        let http = http(READ_TIMEOUT).map_err(|e| err(e.to_string(), Some(e)))?;
        Ok(Client { http, api, repo: repo.to_owned(), token, quota: std::sync::Mutex::new(None), limits: Limits::default() })
    }

    /// Replaces the default deadlines and caps.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Client {
        if limits.read_timeout != self.limits.read_timeout
            && let Ok(http) = http(limits.read_timeout)
        {
            self.http = http;
        }
        self.limits = limits;
        self
    }

    fn same_origin(&self, url: &Url) -> bool {
        url.scheme() == self.api.scheme()
            && url.host_str() == self.api.host_str()
            && url.port_or_known_default() == self.api.port_or_known_default()
    }

    fn request(&self, url: &Url, accept: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .get(url.clone())
            .header(ACCEPT, accept)
            .header(USER_AGENT, concat!("stacksync/", env!("CARGO_PKG_VERSION")))
            .header("X-GitHub-Api-Version", "2022-11-28");
        if let Some(token) = &self.token
            && self.same_origin(url)
        {
            req = req.header(AUTHORIZATION, format!("Bearer {}", token.0));
        }
        req
    }

    /// Sends a GET, waiting out rate limits (bounded by [`MAX_RATE_LIMIT_WAIT`]).
    async fn send(&self, url: &Url, accept: &str, etag: Option<&str>) -> Result<reqwest::Response> {
        self.send_within(url, accept, etag, self.limits.request_deadline).await
    }

    /// [`Client::send`] with its own deadline (a download's is longer than an API call's).
    async fn send_within(&self, url: &Url, accept: &str, etag: Option<&str>, deadline: Duration) -> Result<reqwest::Response> {
        loop {
            let started = Instant::now();
            let request_err = |e: reqwest::Error| {
                let e = e.without_url();
                Error::Request {
                    repo: self.repo.clone(),
                    url: url.to_string(),
                    message: describe_since(&e, deadline, self.limits.read_timeout, started),
                    source: Some(e),
                }
            };
            if let Some(wait) = self.quota_wait() {
                self.wait(wait).await?;
            }
            let mut req = self.request(url, accept).timeout(deadline);
            if let Some(etag) = etag {
                req = req.header(IF_NONE_MATCH, etag);
            }
            let resp = req.send().await.map_err(request_err)?;
            self.record_quota(resp.headers());
            match rate_limit_wait(resp.status(), resp.headers(), server_epoch(resp.headers())) {
                Some(wait) => self.wait(wait).await?,
                None => return Ok(resp),
            }
        }
    }

    fn quota_wait(&self) -> Option<Duration> {
        let quota = *self.quota.lock().ok()?;
        match quota {
            Some((0, reset)) => Some(reset.saturating_duration_since(Instant::now()).max(Duration::from_secs(1))),
            _ => None,
        }
    }

    fn record_quota(&self, headers: &HeaderMap) {
        let remaining = header_u64(headers, "x-ratelimit-remaining");
        let reset = header_u64(headers, "x-ratelimit-reset");
        if let (Some(remaining), Some(reset)) = (remaining, reset) {
            debug!(repo = %self.repo, remaining, reset, "GitHub API quota");
            crate::telemetry::metrics().github_quota(&self.repo, remaining, header_u64(headers, "x-ratelimit-limit"));
            let reset_in = Duration::from_secs(reset.saturating_sub(server_epoch(headers)));
            if let Ok(mut q) = self.quota.lock() {
                *q = Some((remaining, Instant::now() + reset_in));
            }
        }
    }

    async fn wait(&self, wait: Duration) -> Result<()> {
        if wait > MAX_RATE_LIMIT_WAIT {
            return Err(Error::RateLimited { repo: self.repo.clone(), seconds: wait.as_secs(), max: MAX_RATE_LIMIT_WAIT.as_secs() });
        }
        warn!(repo = %self.repo, seconds = wait.as_secs(), "GitHub rate limit reached; waiting for the reset");
        tokio::time::sleep(wait).await;
        if let Ok(mut q) = self.quota.lock() {
            *q = None;
        }
        Ok(())
    }

    /// Lists every non-draft release, newest first, following `Link: rel="next"`. Pages whose
    /// ETag still matches come from `cache` (a 304 costs no quota); `cache` is updated.
    ///
    /// # Errors
    /// A request fails, an unexpected status, or a page that is not a release list.
    pub async fn list(&self, cache: &mut BTreeMap<String, CachedPage>) -> Result<(Vec<GhRelease>, ListStats)> {
        let mut url = self.api.join(&format!("repos/{}/releases?per_page=100&page=1", self.repo)).map_err(|e| Error::Request {
            repo: self.repo.clone(),
            url: self.api.to_string(),
            message: e.to_string(),
            source: None,
        })?;
        let mut releases = Vec::new();
        let mut stats = ListStats::default();
        let mut seen = std::collections::BTreeSet::new();
        loop {
            // A server looping its Link headers must not loop us.
            if !seen.insert(url.to_string()) {
                warn!(repo = %self.repo, url = %url, pages = stats.pages, "the release list links back to a page already read; listing stopped there (releases on later pages are not seen)");
                break;
            }
            if stats.pages >= MAX_PAGES {
                warn!(repo = %self.repo, pages = stats.pages, cap = MAX_PAGES, "release listing stopped at the cap of {MAX_PAGES} pages; older releases are not seen");
                break;
            }
            stats.pages += 1;
            let key = url.to_string();
            let cached = cache.get(&key).cloned();
            let resp = self.send(&url, "application/vnd.github+json", cached.as_ref().map(|c| c.etag.as_str())).await?;
            let page = match resp.status() {
                StatusCode::NOT_MODIFIED => {
                    stats.not_modified += 1;
                    match cached {
                        Some(c) => c,
                        None => return Err(self.status_err(&url, 304, "304 without a cached page".into())),
                    }
                }
                s if s.is_success() => {
                    let etag = resp.headers().get(ETAG).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                    let next = next_link(resp.headers()).map(str::to_owned);
                    let body = self.read_page(resp, &key).await?;
                    let api: Vec<ApiRelease> = serde_json::from_slice(&body).map_err(|source| Error::Decode {
                        repo: self.repo.clone(),
                        url: key.clone(),
                        source,
                    })?;
                    let releases = api
                        .into_iter()
                        .filter(|r| !r.draft)
                        .map(|r| GhRelease {
                            id: r.id,
                            tag: r.tag_name,
                            prerelease: r.prerelease,
                            assets: r
                                .assets
                                .into_iter()
                                .map(|a| GhAsset { id: a.id, name: a.name, size: a.size, digest: a.digest, url: a.url })
                                .collect(),
                        })
                        .collect();
                    CachedPage { etag, releases, next }
                }
                s => {
                    let text = resp.text().await.unwrap_or_default();
                    return Err(self.status_err(&url, s.as_u16(), excerpt(&text)));
                }
            };
            releases.extend(page.releases.iter().cloned());
            let next = page.next.clone();
            cache.insert(key, page);
            match next.and_then(|n| Url::parse(&n).ok()) {
                Some(n) => url = n,
                None => break,
            }
        }
        // Pages beyond the current end are stale.
        cache.retain(|k, _| seen.contains(k));
        if let Ok(Some((remaining, _))) = self.quota.lock().map(|q| *q) {
            info!(repo = %self.repo, releases = releases.len(), pages = stats.pages, not_modified = stats.not_modified, remaining, "listed releases");
        }
        Ok((releases, stats))
    }

    /// Reads a page body chunk by chunk, refusing it past [`Limits::max_page_bytes`] (the
    /// declared length is not trusted) and within the request deadline.
    async fn read_page(&self, resp: reqwest::Response, url: &str) -> Result<Vec<u8>> {
        let limit = self.limits.max_page_bytes;
        read_bounded(resp, limit, self.limits.request_deadline).await.map_err(|e| match e {
            BodyError::TooLarge => Error::PageTooLarge { repo: self.repo.clone(), url: url.to_owned(), limit },
            BodyError::Request { message, source } => Error::Request { repo: self.repo.clone(), url: url.to_owned(), message, source },
        })
    }

    fn status_err(&self, url: &Url, status: u16, message: String) -> Error {
        Error::Status { repo: self.repo.clone(), url: url.to_string(), status, message }
    }

    /// Streams one asset into the blob store, verifying it against `expected` when given.
    /// Follows up to [`MAX_REDIRECTS`] redirects (to storage hosts, without the token); retries a
    /// cut connection.
    ///
    /// # Errors
    /// The request or the body fails after [`DOWNLOAD_ATTEMPTS`], the asset exceeds `limit`, or
    /// the digest does not match (never retried: fail closed).
    pub async fn download(
        &self,
        tag: &str,
        asset: &GhAsset,
        blobs: &Blobs,
        expected: Option<&Sha256Digest>,
        limit: u64,
    ) -> Result<Sha256Digest> {
        let dl_err =
            |source: BlobError| Error::Download { repo: self.repo.clone(), tag: tag.to_owned(), asset: asset.name.clone(), source };
        let io = |message: String| BlobError::Io { path: asset.url.clone().into(), source: std::io::Error::other(message) };
        let url = Url::parse(&asset.url).map_err(|e| dl_err(io(e.to_string())))?;
        let deadline = self.limits.download_deadline;
        match tokio::time::timeout(deadline, self.download_attempts(tag, asset, &url, blobs, expected, limit)).await {
            Ok(result) => result.map_err(|e| match e {
                Attempt::Retry(message) => dl_err(io(message)),
                Attempt::Fatal(e) => dl_err(e),
                Attempt::Status { url, status } => {
                    Error::DownloadStatus { repo: self.repo.clone(), tag: tag.to_owned(), asset: asset.name.clone(), url, status }
                }
            }),
            // Dropping the future drops the response: the connection is closed, the temp blob
            // removed.
            Err(_) => Err(dl_err(io(format!(
                "timed out after {}s (the download's overall deadline, every attempt included)",
                deadline.as_secs()
            )))),
        }
    }

    async fn download_attempts(
        &self,
        tag: &str,
        asset: &GhAsset,
        url: &Url,
        blobs: &Blobs,
        expected: Option<&Sha256Digest>,
        limit: u64,
    ) -> std::result::Result<Sha256Digest, Attempt> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.download_once(url, blobs, expected, limit).await {
                Err(Attempt::Retry(message)) if attempt < DOWNLOAD_ATTEMPTS => {
                    let backoff = crate::schedule::backoff(attempt);
                    warn!(repo = %self.repo, tag, asset = %asset.name, attempt, error = %message, "download interrupted; retrying");
                    tokio::time::sleep(backoff).await;
                }
                Err(Attempt::Retry(message)) if attempt > 1 => {
                    return Err(Attempt::Retry(format!("{attempt} attempts failed, the last: {message}")));
                }
                other => return other,
            }
        }
    }

    async fn download_once(
        &self,
        url: &Url,
        blobs: &Blobs,
        expected: Option<&Sha256Digest>,
        limit: u64,
    ) -> std::result::Result<Sha256Digest, Attempt> {
        let mut resp = self
            .send_within(url, "application/octet-stream", None, self.limits.download_deadline)
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?;
        // Storage hosts and CDNs chain redirects: each is followed, up to MAX_REDIRECTS.
        let mut at = url.clone();
        let mut hops = 0;
        while resp.status().is_redirection() {
            let location = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let host = |u: &Url| u.host_str().unwrap_or_default().to_owned();
            if hops == MAX_REDIRECTS {
                let message = format!("more than {MAX_REDIRECTS} redirects (the last from {}); refusing to follow more", host(&at));
                return Err(Attempt::Fatal(BlobError::Io { path: url.as_str().into(), source: std::io::Error::other(message) }));
            }
            hops += 1;
            let target = at
                .join(&location)
                .map_err(|e| Attempt::Fatal(BlobError::Io { path: location.clone().into(), source: std::io::Error::other(e) }))?;
            debug!(repo = %self.repo, host = %host(&target), hops, "following asset redirect");
            // `request` adds the token only for the API origin: storage hosts never see it.
            let started = Instant::now();
            resp = self.request(&target, "application/octet-stream").timeout(self.limits.download_deadline).send().await.map_err(|e| {
                Attempt::Retry(describe_since(&e.without_url(), self.limits.download_deadline, self.limits.read_timeout, started))
            })?;
            at = target;
        }
        let status = resp.status();
        if !status.is_success() {
            // Where it ended, by host only: a storage URL's query is a signature.
            let ended =
                if hops > 0 { format!(" (after {hops} redirects, at {})", at.host_str().unwrap_or_default()) } else { String::new() };
            return Err(if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                Attempt::Retry(format!("answered {status}{ended}"))
            } else {
                Attempt::Status { url: format!("{url}{ended}"), status }
            });
        }
        if let Some(len) = resp.content_length()
            && len > limit
        {
            return Err(Attempt::Fatal(BlobError::TooLarge { limit }));
        }
        let mut writer = blobs.writer(limit).map_err(Attempt::Fatal)?;
        let started = Instant::now();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => writer.write(&chunk).map_err(Attempt::Fatal)?,
                Ok(None) => break,
                Err(e) => {
                    let cause = describe_since(&e.without_url(), self.limits.download_deadline, self.limits.read_timeout, started);
                    return Err(Attempt::Retry(format!("connection cut after {} bytes: {cause}", writer.written())));
                }
            }
        }
        writer.finish(blobs, expected).map_err(Attempt::Fatal)
    }
}

/// How one download attempt failed: worth another attempt (the message says why), or not.
enum Attempt {
    Retry(String),
    Fatal(BlobError),
    /// A status another attempt will not change.
    Status {
        url: String,
        status: StatusCode,
    },
}

/// How long to wait before retrying a response, if it says the rate limit was hit: 403 or 429
/// with `Retry-After`, or with `X-RateLimit-Remaining: 0` (wait until `X-RateLimit-Reset`).
/// A 403 without either is a permission problem, not a rate limit. Pure.
pub fn rate_limit_wait(status: StatusCode, headers: &HeaderMap, now_epoch: u64) -> Option<Duration> {
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    if let Some(secs) = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs.max(1)));
    }
    if header_u64(headers, "x-ratelimit-remaining") == Some(0) {
        let reset = header_u64(headers, "x-ratelimit-reset").unwrap_or(now_epoch + 60);
        return Some(Duration::from_secs(reset.saturating_sub(now_epoch).max(1)));
    }
    None
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok())
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(headers: &HeaderMap) -> Option<&str> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params.split(';').any(|p| p.trim() == "rel=\"next\"").then(|| url.trim().trim_start_matches('<').trim_end_matches('>'))
    })
}

/// Now as the server saw it when it answered (its `Date` header), else as our clock says:
/// GitHub's `X-RateLimit-Reset` is a time on the server's clock, so a step of ours (or a clock
/// that is simply wrong) neither cuts the wait to a retry a second nor stretches it.
fn server_epoch(headers: &HeaderMap) -> u64 {
    headers
        .get(reqwest::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| chrono::DateTime::parse_from_rfc2822(v).ok())
        .and_then(|t| u64::try_from(t.timestamp()).ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0))
}

fn excerpt(text: &str) -> String {
    let t: String = text.chars().take(200).collect();
    t.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_timeout_names_the_deadline_that_fired_not_a_longer_one() {
        let s = Duration::from_secs;
        // (connecting, the request's deadline, elapsed, the message says); read timeout 60 s
        let table = [
            (false, s(600), s(60), "nothing received for 60s (read timeout), 60s after the request was sent"),
            (false, s(600), s(600), "timed out after 600s (the request's deadline)"),
            (false, s(60), s(60), "timed out after 60s (the request's deadline)"),
            (false, s(2), s(2), "timed out after 2s (the request's deadline)"),
            (true, s(600), s(10), "no connection within 10s (connect timeout)"),
        ];
        for (connecting, deadline, elapsed, want) in table {
            assert_eq!(timeout_message(connecting, deadline, s(60), elapsed), want, "{deadline:?} {elapsed:?}");
        }
    }

    #[test]
    fn rate_limit_waits_come_from_headers() {
        // (status, headers, expected wait in seconds)
        type Case<'a> = (StatusCode, &'a [(&'static str, &'a str)], Option<u64>);
        let table: &[Case] = &[
            (StatusCode::FORBIDDEN, &[("retry-after", "30")], Some(30)),
            (StatusCode::TOO_MANY_REQUESTS, &[("retry-after", "5")], Some(5)),
            (StatusCode::FORBIDDEN, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1060")], Some(60)),
            (StatusCode::FORBIDDEN, &[("x-ratelimit-remaining", "10")], None),
            (StatusCode::OK, &[("retry-after", "30")], None),
        ];
        for (status, h, want) in table {
            assert_eq!(rate_limit_wait(*status, &headers(h), 1000), want.map(Duration::from_secs), "{status} {h:?}");
        }
    }

    #[test]
    fn the_reset_is_read_on_the_servers_clock_not_ours() {
        // Our clock an hour ahead (or ten minutes behind) of the server's: the wait is what
        // the server means, not a retry a second for an hour.
        let h = headers(&[("date", "Sun, 29 Nov 2026 01:00:00 GMT"), ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1795914060")]);
        assert_eq!(server_epoch(&h), 1_795_914_000);
        assert_eq!(rate_limit_wait(StatusCode::FORBIDDEN, &h, server_epoch(&h)), Some(Duration::from_secs(60)));
        assert!(server_epoch(&headers(&[("date", "garbage")])) > 1_700_000_000, "no usable Date: our clock");
    }

    #[tokio::test(start_paused = true)]
    async fn an_exhausted_quota_waits_until_the_reset() {
        let client = Client::new("http://127.0.0.1:1/", "o/r", None).unwrap();
        *client.quota.lock().unwrap() = Some((0, Instant::now() + Duration::from_secs(120)));
        let wait = client.quota_wait().unwrap();
        // (A stalled machine may have used a few seconds of it.)
        assert!((110..=120).contains(&wait.as_secs()), "{wait:?}");
        let start = tokio::time::Instant::now();
        client.wait(wait).await.unwrap();
        assert!(start.elapsed() >= wait);
        assert_eq!(client.quota_wait(), None, "the quota is fresh after the reset");
        let err = client.wait(MAX_RATE_LIMIT_WAIT + Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(err, Error::RateLimited { .. }), "{err}");
    }

    #[test]
    fn only_what_may_pass_by_itself_is_transient() {
        let status = |status| Error::Status { repo: "o/r".into(), url: "u".into(), status, message: String::new() };
        let asset = |status| Error::DownloadStatus { repo: "o/r".into(), tag: "v1".into(), asset: "a".into(), url: "u".into(), status };
        for (e, transient, reason) in [
            (status(502), true, "GithubStatus"),
            (status(429), true, "GithubStatus"),
            (status(404), false, "NotFound"),
            (status(401), false, "Unauthorized"),
            (asset(StatusCode::NOT_FOUND), false, "NotFound"),
            (asset(StatusCode::SERVICE_UNAVAILABLE), true, "GithubStatus"),
            (Error::RateLimited { repo: "o/r".into(), seconds: 9999, max: 900 }, true, "RateLimited"),
            (Error::Token { repo: "o/r".into(), source: TokenError::Empty }, false, "Token"),
            (Error::PageTooLarge { repo: "o/r".into(), url: "u".into(), limit: 1 }, false, "PageTooLarge"),
            (
                Error::Download {
                    repo: "o/r".into(),
                    tag: "v1".into(),
                    asset: "a".into(),
                    source: BlobError::Mismatch { expected: Sha256Digest::of(b"a"), actual: Sha256Digest::of(b"b") },
                },
                false,
                "DigestMismatch",
            ),
        ] {
            assert_eq!((e.is_transient(), e.reason()), (transient, reason), "{e}");
        }
        assert_eq!(asset(StatusCode::NOT_FOUND).to_string(), "o/r: release v1: asset a: u: answered 404 Not Found");
    }

    #[test]
    fn next_link_is_found() {
        let h = headers(&[("link", r#"<https://api.example/r?page=2>; rel="next", <https://api.example/r?page=5>; rel="last""#)]);
        assert_eq!(next_link(&h), Some("https://api.example/r?page=2"));
        assert_eq!(next_link(&headers(&[("link", r#"<https://x?page=1>; rel="prev""#)])), None);
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret("ghp_supersecret".into());
        assert_eq!(format!("{s:?}"), "Secret(***)");
    }

    #[test]
    fn revision_changes_when_an_asset_is_replaced() {
        let mut r = GhRelease {
            id: 1,
            tag: "v1".into(),
            prerelease: false,
            assets: vec![GhAsset { id: 1, name: "a".into(), size: 1, digest: None, url: String::new() }],
        };
        let before = r.revision();
        r.assets[0].id = 2;
        assert_ne!(before, r.revision());
    }
}
