//! The distribution-API calls of an OCI source, over reqwest: tags listed page by page
//! (`Link`), a tag resolved to its manifest digest, the manifest fetched by that digest and
//! verified, layers streamed into the blob store and verified. `401` challenges are answered:
//! `Bearer` by fetching a token from the challenge's realm (anonymously or with the configured
//! user name and password), cached until it expires; `Basic` with the configured credentials.
//!
//! Why not an OCI client crate (`oci-client`): stacksync needs five GET/HEAD calls, and it needs
//! them on its own terms — every body read bounded and streamed into the verified blob store
//! (never held whole in memory), every call under a deadline, credentials read at each poll and
//! sent only to the registry and its token realm (a blob redirect to storage gets none), errors
//! that name the repository, tag and layer and never a secret. A general client would still need
//! all of that wrapped around it; the calls themselves are a few dozen lines over the reqwest
//! client the GitHub source already uses.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, LOCATION, USER_AGENT, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};
use sha2::{Digest, Sha256};
use tracing::{debug, info};

use super::{
    BearerChallenge, DockerConfigError, DockerCredentials, Error, MANIFEST_ACCEPT, MAX_AUX_FILE_BYTES, OciAuth, Repository, Result,
    docker_credentials, next_link, parse_bearer_challenge,
};
use crate::cache::blobs::{BlobError, Blobs};
use crate::model::Sha256Digest;
use crate::model::sync::MutexExt;
use crate::source::github::{BodyError, Secret, TokenError, describe, read_bounded};

/// Deadline of one API call (tag page, manifest, token), its body included: the source's
/// `timeout` unless set.
pub const REQUEST_DEADLINE: Duration = super::DEFAULT_TIMEOUT;
/// A layer download may take this many times the API-call deadline.
pub const DOWNLOAD_FACTOR: u32 = 10;
/// Deadline of one layer download.
pub const DOWNLOAD_DEADLINE: Duration = Duration::from_secs(10 * 60);
/// Longest wait for a TCP (and TLS) connection.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// Largest tag-list page, manifest or token response read.
pub const MAX_DOCUMENT_BYTES: u64 = 4 * 1024 * 1024;
/// Most `tags/list` pages followed in one listing.
pub const MAX_PAGES: u32 = 1000;
/// Most tags one listing accepts.
pub const MAX_TAGS: usize = 100_000;
/// Most redirects followed for one blob.
const MAX_REDIRECTS: u32 = 5;
/// A token is renewed this long before the expiry its service announced.
const TOKEN_MARGIN: Duration = Duration::from_secs(10);
/// Tags resolved to digests side by side.
pub const RESOLVE_CONCURRENCY: usize = 8;

/// Credentials as read for one poll.
#[derive(Debug, Clone)]
enum Credentials {
    Anonymous,
    Basic {
        username: String,
        password: Secret,
    },
    Bearer(Secret),
    /// A Docker config's `identitytoken`: an OAuth2 refresh token for the token service.
    IdentityToken(Secret),
}

/// Deadlines and caps of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub request_deadline: Duration,
    pub download_deadline: Duration,
    pub max_document_bytes: u64,
    pub page_size: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_deadline: REQUEST_DEADLINE,
            download_deadline: DOWNLOAD_DEADLINE,
            max_document_bytes: MAX_DOCUMENT_BYTES,
            page_size: super::DEFAULT_PAGE_SIZE,
        }
    }
}

/// A client for one repository of one registry.
pub struct Client {
    http: reqwest::Client,
    base: Url,
    repo: Repository,
    /// `registry/name`, for messages.
    display: String,
    credentials: Credentials,
    /// Where the credentials came from, for messages (`auth.password`, a Docker config file).
    origin: String,
    /// Key of this client's tokens in the process-wide token cache: registry, repository and a
    /// hash of the credentials, so a rotated password never reuses a token of the old one.
    token_key: String,
    /// `Authorization` value learned from a challenge during this client's life.
    auth: Mutex<Option<Secret>>,
    limits: Limits,
}

/// Tokens by client key: `(token, expiry)`. Tokens live longer than one poll's client.
fn tokens() -> &'static Mutex<HashMap<String, (Secret, Instant)>> {
    static TOKENS: OnceLock<Mutex<HashMap<String, (Secret, Instant)>>> = OnceLock::new();
    TOKENS.get_or_init(Default::default)
}

impl Client {
    /// Reads the credentials (at every poll: rotation needs no restart) and builds a client.
    ///
    /// The scheme: `https`, plain HTTP only with `insecure: true` (loopback included: secure by
    /// default, and one rule). The CA bundle is read here, at every poll, like the credentials,
    /// and added to the system's trust roots for this client only.
    ///
    /// # Errors
    /// Plain HTTP to a registry that is not loopback without `insecure`, unreadable credentials
    /// or CA bundle, or an HTTP client that cannot be built.
    pub fn new(repo: &Repository, insecure: bool, ca_file: Option<&Path>, auth: Option<&OciAuth>, limits: Limits) -> Result<Client> {
        let display = format!("{}/{}", repo.registry, repo.name);
        let plain_http = insecure;
        let base = repo.base_url(plain_http, insecure)?;
        let base = Url::parse(&base).map_err(|e| Error::Request {
            repo: display.clone(),
            url: base.clone(),
            message: e.to_string(),
            source: None,
        })?;
        let cred_err = |source: CredentialsError| Error::Credentials { repo: display.clone(), source };
        let (credentials, origin) = match auth {
            None => (Credentials::Anonymous, String::new()),
            Some(OciAuth::Basic { username, password }) => (
                Credentials::Basic {
                    username: username.clone(),
                    password: password.read().map_err(|e| cred_err(CredentialsError::Password(e)))?,
                },
                "`auth.username` / `auth.password`".to_owned(),
            ),
            Some(OciAuth::Bearer(token)) => (
                Credentials::Bearer(token.read().map_err(|e| cred_err(CredentialsError::BearerToken(e)))?),
                "`auth.bearerToken`".to_owned(),
            ),
            Some(OciAuth::DockerConfig(path)) => {
                let origin = format!("`auth.dockerConfig` {}", path.display());
                let text = read_small(path).map_err(|e| cred_err(CredentialsError::DockerConfigFile(e)))?;
                let text = String::from_utf8(text).map_err(|_| cred_err(CredentialsError::DockerConfigNotUtf8(path.clone())))?;
                let found = docker_credentials(&text, &repo.registry)
                    .map_err(|source| cred_err(CredentialsError::DockerConfig { path: path.clone(), source }))?;
                let credentials = match found {
                    DockerCredentials::Basic { username, password } => Credentials::Basic { username, password: Secret::new(password) },
                    DockerCredentials::IdentityToken(t) => Credentials::IdentityToken(Secret::new(t)),
                };
                (credentials, origin)
            }
        };
        let fingerprint = match &credentials {
            Credentials::Anonymous => String::new(),
            Credentials::Basic { username, password } => hex::encode(Sha256::digest(format!("{username}\n{}", password.expose()))),
            Credentials::Bearer(t) => hex::encode(Sha256::digest(t.expose())),
            Credentials::IdentityToken(t) => hex::encode(Sha256::digest(format!("identitytoken\n{}", t.expose()))),
        };
        let mut builder = reqwest::Client::builder()
            // Redirects are followed by hand: credentials never follow a redirect to another host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_DEADLINE.min(limits.request_deadline))
            .read_timeout(limits.request_deadline);
        if let Some(path) = ca_file {
            builder = builder.tls_certs_merge(read_ca_bundle(path).map_err(|source| Error::CaFile { repo: display.clone(), source })?);
        }
        let http = builder.build().map_err(|e| Error::Request {
            repo: display.clone(),
            url: base.to_string(),
            message: e.to_string(),
            source: Some(e),
        })?;
        Ok(Client {
            http,
            token_key: format!("{base}|{}|{fingerprint}", repo.name),
            base,
            repo: repo.clone(),
            display,
            credentials,
            origin,
            auth: Mutex::new(None),
            limits,
        })
    }

    fn url(&self, path: &str) -> Result<Url> {
        self.base.join(&format!("v2/{}/{path}", self.repo.name)).map_err(|e| Error::Request {
            repo: self.display.clone(),
            url: path.to_owned(),
            message: e.to_string(),
            source: None,
        })
    }

    fn same_origin(&self, url: &Url) -> bool {
        url.scheme() == self.base.scheme()
            && url.host_str() == self.base.host_str()
            && url.port_or_known_default() == self.base.port_or_known_default()
    }

    /// The `Authorization` value for the registry right now, if any.
    fn authorization(&self) -> Option<String> {
        if let Credentials::Bearer(t) = &self.credentials {
            return Some(format!("Bearer {}", t.expose()));
        }
        if let Some(a) = self.auth.locked().as_ref() {
            return Some(a.expose().to_owned());
        }
        let cached = tokens().locked().get(&self.token_key).cloned();
        match cached {
            Some((token, expiry)) if Instant::now() < expiry => Some(format!("Bearer {}", token.expose())),
            _ => None,
        }
    }

    fn request(&self, method: Method, url: &Url, accept: &str, deadline: Duration) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .request(method, url.clone())
            .header(ACCEPT, accept)
            .header(USER_AGENT, concat!("stacksync/", env!("CARGO_PKG_VERSION")))
            .timeout(deadline);
        if self.same_origin(url)
            && let Some(auth) = self.authorization()
        {
            req = req.header(AUTHORIZATION, auth);
        }
        req
    }

    fn request_err(&self, url: &Url, deadline: Duration) -> impl Fn(reqwest::Error) -> Error + '_ {
        let url = url.to_string();
        move |e| {
            let e = e.without_url();
            Error::Request { repo: self.display.clone(), url: url.clone(), message: explain(&e, deadline), source: Some(e) }
        }
    }

    /// Sends a request to the registry, answering one `401` challenge and retrying once.
    async fn send(&self, method: Method, url: &Url, accept: &str, deadline: Duration) -> Result<reqwest::Response> {
        let resp = self.request(method.clone(), url, accept, deadline).send().await.map_err(self.request_err(url, deadline))?;
        if resp.status() != StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        self.answer_challenge(resp.headers()).await?;
        let resp = self.request(method, url, accept, deadline).send().await.map_err(self.request_err(url, deadline))?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            return Err(self.refused());
        }
        Ok(resp)
    }

    fn refused(&self) -> Error {
        let message = match &self.credentials {
            Credentials::Anonymous => {
                "the registry needs credentials: set `auth` (`username` and `password`, `bearerToken` or `dockerConfig`)".to_owned()
            }
            Credentials::Basic { .. } => format!("the registry refused the credentials ({})", self.origin),
            Credentials::Bearer(_) | Credentials::IdentityToken(_) => format!("the registry refused the token ({})", self.origin),
        };
        Error::Unauthorized { repo: self.display.clone(), message }
    }

    /// Learns how to authenticate from a `WWW-Authenticate` header.
    async fn answer_challenge(&self, headers: &HeaderMap) -> Result<()> {
        let header = headers.get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if let Credentials::Bearer(_) = self.credentials {
            // A configured token is the only thing stacksync has to offer.
            return Err(self.refused());
        }
        if let Some(challenge) = parse_bearer_challenge(header) {
            let (token, lifetime) = self.fetch_token(&challenge).await?;
            let expiry = Instant::now() + lifetime.saturating_sub(TOKEN_MARGIN).max(Duration::from_secs(1));
            let mut cache = tokens().locked();
            // Expired tokens (and those of rotated credentials, once expired) are dropped here.
            let now = Instant::now();
            cache.retain(|_, (_, until)| *until > now);
            cache.insert(self.token_key.clone(), (token, expiry));
            drop(cache);
            *self.auth.locked() = None;
            return Ok(());
        }
        if header.trim_start().get(..5).is_some_and(|s| s.eq_ignore_ascii_case("basic")) {
            let Credentials::Basic { username, password } = &self.credentials else { return Err(self.refused()) };
            let value = basic(username, password);
            *self.auth.locked() = Some(value);
            return Ok(());
        }
        Err(Error::Unauthorized {
            repo: self.display.clone(),
            message: "the registry answered 401 without a Basic or Bearer challenge".into(),
        })
    }

    /// `GET <realm>?service=…&scope=…`, with the basic credentials when there are any. The realm
    /// may be another host (a token service): credentials go there only over https, or to
    /// loopback.
    async fn fetch_token(&self, challenge: &BearerChallenge) -> Result<(Secret, Duration)> {
        let deadline = self.limits.request_deadline;
        let bad = |message: String| Error::Unauthorized { repo: self.display.clone(), message };
        let mut realm = Url::parse(&challenge.realm).map_err(|e| bad(format!("the token realm is not a URL: {e}")))?;
        let scope = challenge.scope.clone().unwrap_or_else(|| format!("repository:{}:pull", self.repo.name));
        {
            let mut q = realm.query_pairs_mut();
            if let Some(service) = &challenge.service {
                q.append_pair("service", service);
            }
            q.append_pair("scope", &scope);
        }
        let loopback =
            realm.host_str().is_some_and(|h| h == "localhost" || h.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback()));
        if !matches!(self.credentials, Credentials::Anonymous) && realm.scheme() != "https" && !loopback {
            return Err(bad(format!(
                "the token realm {} is not https: credentials are not sent there",
                realm.origin().ascii_serialization()
            )));
        }
        let mut req = self.http.get(realm.clone()).header(USER_AGENT, concat!("stacksync/", env!("CARGO_PKG_VERSION"))).timeout(deadline);
        match &self.credentials {
            Credentials::Basic { username, password } => req = req.header(AUTHORIZATION, basic(username, password).expose()),
            Credentials::IdentityToken(refresh) => {
                // OAuth2 refresh-token grant, as Docker clients use an `identitytoken`.
                let mut form = Url::parse("form:").map_err(|e| bad(e.to_string()))?;
                {
                    let mut q = form.query_pairs_mut();
                    q.append_pair("grant_type", "refresh_token").append_pair("refresh_token", refresh.expose());
                    q.append_pair("client_id", "stacksync").append_pair("scope", &scope);
                    if let Some(service) = &challenge.service {
                        q.append_pair("service", service);
                    }
                }
                let body = form.query().unwrap_or_default().to_owned();
                let mut url = realm.clone();
                url.set_query(None);
                req = self
                    .http
                    .post(url)
                    .header(USER_AGENT, concat!("stacksync/", env!("CARGO_PKG_VERSION")))
                    .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(body)
                    .timeout(deadline);
            }
            Credentials::Anonymous | Credentials::Bearer(_) => {}
        }
        let resp = req.send().await.map_err(self.request_err(&realm, deadline))?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.refused());
        }
        if !status.is_success() {
            return Err(Error::Status {
                repo: self.display.clone(),
                url: strip_query(&realm),
                status: status.as_u16(),
                message: "token request failed".into(),
            });
        }
        let body = self.read_bounded(resp, &realm).await?;
        #[derive(serde::Deserialize)]
        struct TokenResponse {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        let t: TokenResponse =
            serde_json::from_slice(&body).map_err(|e| bad(format!("the token service answered something that is not a token: {e}")))?;
        let token =
            t.token.or(t.access_token).filter(|t| !t.is_empty()).ok_or_else(|| bad("the token service answered no token".into()))?;
        // The distribution spec: a token without `expires_in` lives 60 seconds.
        let lifetime = Duration::from_secs(t.expires_in.unwrap_or(60).max(1));
        debug!(repo = %self.display, seconds = lifetime.as_secs(), "registry token issued");
        Ok((Secret::new(token), lifetime))
    }

    /// Reads a body chunk by chunk, refusing it past the document cap, within the deadline.
    async fn read_bounded(&self, resp: reqwest::Response, url: &Url) -> Result<Vec<u8>> {
        let limit = self.limits.max_document_bytes;
        read_bounded(resp, limit, self.limits.request_deadline).await.map_err(|e| match e {
            BodyError::TooLarge => Error::TooLarge { repo: self.display.clone(), url: strip_query(url), limit },
            BodyError::Request { message, source } => Error::Request { repo: self.display.clone(), url: strip_query(url), message, source },
        })
    }

    async fn status_err(&self, url: &Url, resp: reqwest::Response) -> Error {
        let status = resp.status().as_u16();
        let text = tokio::time::timeout(Duration::from_secs(5), resp.text()).await.ok().and_then(|r| r.ok()).unwrap_or_default();
        let message: String = text.chars().take(200).collect::<String>().replace('\n', " ");
        Error::Status { repo: self.display.clone(), url: strip_query(url), status, message }
    }

    /// Every tag of the repository, following `Link: rel="next"` (at most [`MAX_PAGES`] pages
    /// and [`MAX_TAGS`] tags; a server looping its links stops the listing).
    ///
    /// # Errors
    /// A request fails, an unexpected status, a page that is not a tag list, or too many tags.
    pub async fn tags(&self) -> Result<(Vec<String>, u32)> {
        #[derive(serde::Deserialize)]
        struct TagList {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let mut url = self.url(&format!("tags/list?n={}", self.limits.page_size))?;
        let mut tags = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut pages = 0;
        loop {
            if !seen.insert(url.to_string()) {
                break;
            }
            pages += 1;
            if pages > MAX_PAGES {
                return Err(Error::Tags { repo: self.display.clone(), message: format!("more than {MAX_PAGES} pages") });
            }
            let resp = self.send(Method::GET, &url, "application/json", self.limits.request_deadline).await?;
            if !resp.status().is_success() {
                return Err(self.status_err(&url, resp).await);
            }
            let next = resp
                .headers()
                .get("link")
                .and_then(|v| v.to_str().ok())
                .and_then(|l| next_link(l, self.base.as_str().trim_end_matches('/')));
            let body = self.read_bounded(resp, &url).await?;
            let page: TagList = serde_json::from_slice(&body)
                .map_err(|e| Error::Tags { repo: self.display.clone(), message: format!("not a tag list: {e}") })?;
            tags.extend(page.tags.unwrap_or_default());
            if tags.len() > MAX_TAGS {
                return Err(Error::Tags { repo: self.display.clone(), message: format!("more than {MAX_TAGS} tags") });
            }
            match next.and_then(|n| Url::parse(&n).ok()) {
                // Links stay on the registry: a page never sends the client elsewhere.
                Some(n) if self.same_origin(&n) => url = n,
                _ => break,
            }
        }
        Ok((tags, pages))
    }

    /// The digest of the manifest `tag` names: `HEAD` answers it in `Docker-Content-Digest`;
    /// a registry that does not is asked with `GET` and the bytes are hashed. The digest is only
    /// a pin here: the manifest is verified against it when it is fetched by digest.
    ///
    /// # Errors
    /// The tag is gone, a request fails, or the answer has no usable digest.
    pub async fn resolve(&self, tag: &str) -> Result<Sha256Digest> {
        let url = self.url(&format!("manifests/{tag}"))?;
        let resp = self.send(Method::HEAD, &url, MANIFEST_ACCEPT, self.limits.request_deadline).await?;
        if !resp.status().is_success() {
            return Err(self.status_err(&url, resp).await);
        }
        if let Some(d) = resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()) {
            return d.strip_prefix("sha256:").and_then(Sha256Digest::parse).ok_or_else(|| Error::Manifest {
                repo: self.display.clone(),
                reference: tag.to_owned(),
                message: format!("Docker-Content-Digest `{}` is not a sha256 digest", d.chars().take(80).collect::<String>()),
            });
        }
        let resp = self.send(Method::GET, &url, MANIFEST_ACCEPT, self.limits.request_deadline).await?;
        if !resp.status().is_success() {
            return Err(self.status_err(&url, resp).await);
        }
        Ok(Sha256Digest::of(&self.read_bounded(resp, &url).await?))
    }

    /// The manifest with `digest`, its bytes verified against it.
    ///
    /// # Errors
    /// A request fails, or the bytes do not hash to `digest` (fail closed).
    pub async fn manifest(&self, tag: &str, digest: &Sha256Digest) -> Result<Vec<u8>> {
        let url = self.url(&format!("manifests/{digest}"))?;
        let resp = self.send(Method::GET, &url, MANIFEST_ACCEPT, self.limits.request_deadline).await?;
        if !resp.status().is_success() {
            return Err(self.status_err(&url, resp).await);
        }
        let bytes = self.read_bounded(resp, &url).await?;
        let actual = Sha256Digest::of(&bytes);
        if actual != *digest {
            return Err(Error::ManifestMismatch { repo: self.display.clone(), tag: tag.to_owned(), expected: digest.clone(), actual });
        }
        Ok(bytes)
    }

    /// Streams the blob `digest` into the blob store, verified against it, at most `limit`
    /// bytes. Redirects (to a storage host) are followed without credentials.
    ///
    /// # Errors
    /// A request fails, the blob is larger than `limit`, or its bytes do not hash to `digest`
    /// (the temp file is removed; nothing is stored).
    pub async fn blob(&self, tag: &str, layer: &str, digest: &Sha256Digest, blobs: &Blobs, limit: u64) -> Result<Sha256Digest> {
        let deadline = self.limits.download_deadline;
        let layer_err = |source: BlobError| Error::Layer {
            repo: self.display.clone(),
            tag: tag.to_owned(),
            layer: layer.to_owned(),
            source: Box::new(source),
        };
        let io = |message: String| BlobError::Io { path: format!("blob {digest}").into(), source: std::io::Error::other(message) };
        let download = async {
            let mut url = self.url(&format!("blobs/{digest}"))?;
            let mut resp = self.send(Method::GET, &url, "application/octet-stream", deadline).await?;
            let mut hops = 0;
            while resp.status().is_redirection() {
                hops += 1;
                let location = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                if hops > MAX_REDIRECTS || location.is_empty() {
                    return Err(layer_err(io(format!("{} redirects, or a redirect without a location", hops))));
                }
                url = url.join(&location).map_err(|e| layer_err(io(format!("bad redirect: {e}"))))?;
                debug!(repo = %self.display, host = url.host_str().unwrap_or_default(), "following blob redirect");
                // `request` adds credentials only for the registry's own origin.
                resp = self
                    .request(Method::GET, &url, "application/octet-stream", deadline)
                    .send()
                    .await
                    .map_err(|e| layer_err(io(describe(&e.without_url(), deadline))))?;
            }
            if !resp.status().is_success() {
                return Err(self.status_err(&url, resp).await);
            }
            if resp.content_length().is_some_and(|n| n > limit) {
                return Err(layer_err(BlobError::TooLarge { limit }));
            }
            let mut writer = blobs.writer(limit).map_err(layer_err)?;
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) => writer.write(&chunk).map_err(layer_err)?,
                    Ok(None) => break,
                    Err(e) => {
                        let cause = describe(&e.without_url(), deadline);
                        return Err(layer_err(io(format!("connection cut after {} bytes: {cause}", writer.written()))));
                    }
                }
            }
            writer.finish(blobs, Some(digest)).map_err(layer_err)
        };
        match tokio::time::timeout(deadline, download).await {
            Ok(result) => {
                let digest = result?;
                info!(repo = %self.display, tag, layer, digest = %digest, "downloaded layer");
                Ok(digest)
            }
            // Dropping the future closes the connection and removes the temp blob.
            Err(_) => Err(layer_err(io(format!("timed out after {}s", deadline.as_secs())))),
        }
    }
}

/// [`describe`], with a hint when the registry's certificate is not trusted.
fn explain(e: &reqwest::Error, deadline: Duration) -> String {
    let text = describe(e, deadline);
    let untrusted = ["UnknownIssuer", "unknown issuer", "invalid peer certificate", "self-signed", "self signed"];
    if untrusted.iter().any(|w| text.contains(w)) {
        return format!("{text} (the registry's TLS certificate is not trusted: set `caFile` to the CA bundle that issued it)");
    }
    if text.contains("InvalidContentType") {
        return format!("{text} (the registry does not speak TLS; for a plain-HTTP registry set `insecure: true`)");
    }
    text
}

/// Why the configured credentials cannot be read (`sources[].oci.auth`). Never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("password: {0}")]
    Password(#[source] TokenError),
    #[error("bearerToken: {0}")]
    BearerToken(#[source] TokenError),
    #[error("dockerConfig: {0}")]
    DockerConfigFile(#[source] AuxFileError),
    #[error("dockerConfig: {} is not UTF-8", .0.display())]
    DockerConfigNotUtf8(std::path::PathBuf),
    #[error("dockerConfig {}: {source}", path.display())]
    DockerConfig {
        path: std::path::PathBuf,
        #[source]
        source: DockerConfigError,
    },
}

impl CredentialsError {
    /// A file that cannot be read may be a mounted Secret being rotated; anything else waits for
    /// someone to change it.
    pub fn is_transient(&self) -> bool {
        match self {
            CredentialsError::Password(e) | CredentialsError::BearerToken(e) => e.is_transient(),
            CredentialsError::DockerConfigFile(e) => e.is_io(),
            CredentialsError::DockerConfigNotUtf8(_) | CredentialsError::DockerConfig { .. } => false,
        }
    }
}

/// Why a small file (a Docker config, a CA bundle) cannot be used; the caller names which.
#[derive(Debug, thiserror::Error)]
pub enum AuxFileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: larger than {MAX_AUX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: std::path::PathBuf },
    #[error("{}: not a PEM certificate bundle: {}", path.display(), describe(source, Duration::ZERO))]
    NotPem {
        path: std::path::PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("{}: holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)", path.display())]
    NoCertificate { path: std::path::PathBuf },
}

impl AuxFileError {
    /// Whether the file could not be read at all (rather than read and refused).
    pub fn is_io(&self) -> bool {
        matches!(self, AuxFileError::Io { .. })
    }
}

/// Reads a small file (a Docker config, a CA bundle) with a size cap.
fn read_small(path: &Path) -> std::result::Result<Vec<u8>, AuxFileError> {
    use std::io::Read;
    let io = |source| AuxFileError::Io { path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_AUX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_AUX_FILE_BYTES {
        return Err(AuxFileError::TooLarge { path: path.to_owned() });
    }
    Ok(bytes)
}

/// The certificates of a PEM bundle (`caFile`): at least one, each a parseable X.509 certificate.
fn read_ca_bundle(path: &Path) -> std::result::Result<Vec<reqwest::Certificate>, AuxFileError> {
    let bytes = read_small(path)?;
    let certs = reqwest::Certificate::from_pem_bundle(&bytes).map_err(|source| AuxFileError::NotPem { path: path.to_owned(), source })?;
    if certs.is_empty() {
        return Err(AuxFileError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}

fn basic(username: &str, password: &Secret) -> Secret {
    use base64::Engine;
    Secret::new(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{username}:{}", password.expose()))))
}

/// A URL for a message: no query (a token realm's query names the scope, never a secret, but
/// messages stay short).
fn strip_query(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_never_print() {
        let b = basic("deployer", &Secret::new("hunter2".into()));
        assert_eq!(format!("{b:?}"), "Secret(***)");
        assert!(b.expose().starts_with("Basic "));
    }

    #[test]
    fn plain_http_to_a_remote_registry_needs_insecure() {
        let remote = Repository::parse("r.example/a").unwrap();
        let c = Client::new(&remote, false, None, None, Limits::default()).unwrap();
        assert_eq!(c.base.as_str(), "https://r.example/");
        let c = Client::new(&remote, true, None, None, Limits::default()).unwrap();
        assert_eq!(c.base.as_str(), "http://r.example/");
        let local = Repository::parse("127.0.0.1:5000/a").unwrap();
        let c = Client::new(&local, false, None, None, Limits::default()).unwrap();
        assert_eq!(c.url("tags/list?n=5").unwrap().as_str(), "https://127.0.0.1:5000/v2/a/tags/list?n=5", "loopback is https too");
        let c = Client::new(&local, true, None, None, Limits::default()).unwrap();
        assert_eq!(c.url("tags/list?n=5").unwrap().as_str(), "http://127.0.0.1:5000/v2/a/tags/list?n=5");
    }
}
