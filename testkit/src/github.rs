//! A GitHub-compatible release server on loopback, built from GitHub's documented REST formats:
//! paginated release lists (`per_page`, `Link`), ETag / `If-None-Match` 304s, release by tag,
//! asset metadata with `digest`, asset downloads that answer 302 to a *different host name*
//! (`localhost` instead of `127.0.0.1`, like GitHub's storage host), rate-limit headers, and
//! fault injection (one-shot faults, and a storage host that trickles every download). Every request is recorded with its host and `Authorization` header, so tests
//! can prove the token never reaches the storage host.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One release asset.
#[derive(Debug, Clone)]
pub struct Asset {
    pub id: u64,
    pub name: String,
    pub data: Bytes,
    /// Whether the API publishes `digest` for it (GitHub does for assets uploaded since 2025).
    pub publish_digest: bool,
}

/// One release.
#[derive(Debug, Clone)]
pub struct Release {
    pub id: u64,
    pub owner_repo: String,
    pub tag: String,
    pub prerelease: bool,
    pub draft: bool,
    pub assets: Vec<Asset>,
}

/// Which endpoint a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    List,
    AssetApi,
    Storage,
}

/// What a fault does to the next matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Status(u16),
    /// 403 with `X-RateLimit-Remaining: 0` and a reset `secs` from now.
    RateLimited {
        reset_in_secs: u64,
    },
    /// 429 with `Retry-After`.
    RetryAfter {
        secs: u64,
    },
    /// Declares the full length, sends half, closes the connection.
    Truncate,
    /// Sends other bytes of the same length.
    WrongBytes,
}

/// A request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub host: String,
    pub path: String,
    pub authorization: Option<String>,
    pub status: u16,
}

#[derive(Default)]
struct State {
    releases: Vec<Release>,
    next_id: u64,
    faults: Vec<(Route, Fault)>,
    seen: Vec<Seen>,
    remaining: u64,
    /// Every storage download sends one byte per this interval (the whole length declared).
    trickle: Option<std::time::Duration>,
    /// Redirects the storage host adds before it serves a download (CDNs chain them).
    hops: usize,
}

/// A response body: whole, or trickled.
type Body = BoxBody<Bytes, Infallible>;

/// The running server. Dropping it does not stop it: call [`GithubServer::stop`].
pub struct GithubServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl GithubServer {
    /// Starts an empty server on `127.0.0.1:<free port>`.
    pub async fn start() -> std::io::Result<GithubServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State { remaining: 5000, next_id: 1, ..State::default() }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(&state, addr, req)) }
                    });
                    // A trickled body outlives its request's handler: the connection task
                    // ends when the client hangs up (or the server stops).
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Ok(GithubServer { addr, state, task })
    }

    /// Starts a server with the releases under `dir`: `<dir>/<owner>/<repo>/<tag>/<asset files>`.
    /// Releases are created in tag-directory name order (the last is the newest). A
    /// `release.yaml` beside the assets may set `prerelease`, `draft` and `digests: false`
    /// (publish no `digest` fields); it is not an asset.
    pub async fn serve_dir(dir: &Path) -> std::io::Result<GithubServer> {
        let server = GithubServer::start().await?;
        for owner in sorted_dirs(dir)? {
            for repo in sorted_dirs(&owner)? {
                for tag_dir in sorted_dirs(&repo)? {
                    let owner_repo = format!("{}/{}", file_name(&owner), file_name(&repo));
                    let meta: ReleaseYaml = match std::fs::read_to_string(tag_dir.join("release.yaml")) {
                        Ok(t) => serde_saphyr::from_str(&t).map_err(|e| std::io::Error::other(e.to_string()))?,
                        Err(_) => ReleaseYaml::default(),
                    };
                    let mut files = Vec::new();
                    for entry in std::fs::read_dir(&tag_dir)?.flatten() {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        if name != "release.yaml" && entry.path().is_file() {
                            files.push((name, std::fs::read(entry.path())?));
                        }
                    }
                    files.sort();
                    let id = server.add_release(&owner_repo, &file_name(&tag_dir), &files, meta.prerelease, meta.draft);
                    if !meta.digests.unwrap_or(true) {
                        server.hide_digests(id);
                    }
                }
            }
        }
        Ok(server)
    }

    /// `http://127.0.0.1:<port>/`: the `apiUrl` to configure.
    pub fn api_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Publishes a release (newest so far); returns its id.
    pub fn add_release(&self, owner_repo: &str, tag: &str, assets: &[(String, Vec<u8>)], prerelease: bool, draft: bool) -> u64 {
        let mut s = lock(&self.state);
        let id = s.next_id;
        s.next_id += 1;
        let mut list = Vec::new();
        for (name, data) in assets {
            let aid = s.next_id;
            s.next_id += 1;
            list.push(Asset { id: aid, name: name.clone(), data: Bytes::from(data.clone()), publish_digest: true });
        }
        s.releases.push(Release { id, owner_repo: owner_repo.to_owned(), tag: tag.to_owned(), prerelease, draft, assets: list });
        id
    }

    /// Deletes a release (its assets go with it), as `DELETE /repos/{o}/{r}/releases/{id}` does.
    pub fn remove_release(&self, tag: &str) {
        lock(&self.state).releases.retain(|r| r.tag != tag);
    }

    /// Stops publishing `digest` for the assets of a release.
    pub fn hide_digests(&self, release_id: u64) {
        let mut s = lock(&self.state);
        for r in s.releases.iter_mut().filter(|r| r.id == release_id) {
            for a in &mut r.assets {
                a.publish_digest = false;
            }
        }
    }

    /// Replaces the bytes of an asset (same id): a tampered or re-uploaded asset.
    pub fn replace_asset_bytes(&self, tag: &str, name: &str, data: &[u8]) {
        let mut s = lock(&self.state);
        for r in s.releases.iter_mut().filter(|r| r.tag == tag) {
            for a in r.assets.iter_mut().filter(|a| a.name == name) {
                a.data = Bytes::from(data.to_vec());
            }
        }
    }

    /// Injects a fault into the next request to `route`.
    pub fn fail_next(&self, route: Route, fault: Fault) {
        lock(&self.state).faults.push((route, fault));
    }

    /// From now on, every storage download declares the asset's whole length and then sends
    /// one byte per `every` (a storage host that is slow but never silent); `None` stops it.
    pub fn trickle_storage(&self, every: Option<std::time::Duration>) {
        lock(&self.state).trickle = every;
    }

    /// From now on, the storage host redirects every download `hops` more times (to itself,
    /// `/hop/<n>/<asset>`) before it serves it; 0 serves at once.
    pub fn storage_hops(&self, hops: usize) {
        lock(&self.state).hops = hops;
    }

    /// Every request seen, in order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state).seen.clone()
    }

    /// Requests whose path starts with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        lock(&self.state).seen.iter().filter(|s| s.path.starts_with(prefix)).count()
    }

    /// Stops the server and waits for its connections to end.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ReleaseYaml {
    prerelease: bool,
    draft: bool,
    digests: Option<bool>,
}

fn sorted_dirs(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out: Vec<_> = std::fs::read_dir(dir)?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    out.sort();
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn now_epoch() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn handle(state: &Mutex<State>, addr: SocketAddr, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let host = req.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let path = req.uri().path().to_owned();
    let query: BTreeMap<String, String> =
        req.uri().query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    let if_none_match = req.headers().get("if-none-match").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut s = lock(state);
    let trickled = trickled(&s, &path);
    let resp = route(&mut s, addr, &path, &query, if_none_match.as_deref(), &accept);
    let full_path = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    s.seen.push(Seen { host, path: full_path, authorization: auth, status: resp.status().as_u16() });
    match trickled {
        Some((data, every)) if resp.status().is_success() => {
            let (parts, _) = resp.into_parts();
            let bytes = futures_util::stream::unfold((data, 0usize), move |(data, at)| async move {
                if at >= data.len() {
                    return None;
                }
                if at > 0 {
                    tokio::time::sleep(every).await;
                }
                let frame = Frame::data(data.slice(at..at + 1));
                Some((Ok::<_, Infallible>(frame), (data, at + 1)))
            });
            Response::from_parts(parts, StreamBody::new(bytes).boxed())
        }
        _ => resp.map(BodyExt::boxed),
    }
}

/// The asset a storage request asks for and the trickle interval, when downloads trickle.
fn trickled(s: &State, path: &str) -> Option<(Bytes, std::time::Duration)> {
    let every = s.trickle?;
    let id = path.strip_prefix("/storage/")?;
    find_asset(s, id).map(|(_, a)| (a.data.clone(), every))
}

fn take_fault(s: &mut State, route: Route) -> Option<Fault> {
    let i = s.faults.iter().position(|(r, _)| *r == route)?;
    Some(s.faults.remove(i).1)
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(bytes)));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json; charset=utf-8"));
    r
}

fn with_quota(mut r: Response<Full<Bytes>>, remaining: u64) -> Response<Full<Bytes>> {
    let h = r.headers_mut();
    let value = |v: String| hyper::header::HeaderValue::from_str(&v).unwrap_or(hyper::header::HeaderValue::from_static("0"));
    h.insert("x-ratelimit-limit", value("5000".into()));
    h.insert("x-ratelimit-remaining", value(remaining.to_string()));
    h.insert("x-ratelimit-reset", value((now_epoch() + 3600).to_string()));
    r
}

fn fault_response(fault: &Fault) -> Option<Response<Full<Bytes>>> {
    match fault {
        Fault::Status(code) => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Some(json(status, &serde_json::json!({"message": "injected fault"})))
        }
        Fault::RateLimited { reset_in_secs } => {
            let mut r = json(StatusCode::FORBIDDEN, &serde_json::json!({"message": "API rate limit exceeded"}));
            let h = r.headers_mut();
            h.insert("x-ratelimit-remaining", hyper::header::HeaderValue::from_static("0"));
            if let Ok(v) = hyper::header::HeaderValue::from_str(&(now_epoch() + reset_in_secs).to_string()) {
                h.insert("x-ratelimit-reset", v);
            }
            Some(r)
        }
        Fault::RetryAfter { secs } => {
            let mut r = json(StatusCode::TOO_MANY_REQUESTS, &serde_json::json!({"message": "secondary rate limit"}));
            if let Ok(v) = hyper::header::HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert("retry-after", v);
            }
            Some(r)
        }
        Fault::Truncate | Fault::WrongBytes => None,
    }
}

fn route(
    s: &mut State,
    addr: SocketAddr,
    path: &str,
    query: &BTreeMap<String, String>,
    etag: Option<&str>,
    accept: &str,
) -> Response<Full<Bytes>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["_testkit", "stats"] => {
            let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
            for seen in &s.seen {
                let kind = if seen.path.contains("/releases/assets/") {
                    "asset"
                } else if seen.path.starts_with("/storage/") {
                    "storage"
                } else if seen.status == 304 {
                    "not_modified"
                } else {
                    "list"
                };
                *by_kind.entry(kind).or_default() += 1;
            }
            json(StatusCode::OK, &serde_json::json!({"requests": s.seen.len(), "byKind": by_kind}))
        }
        ["repos", owner, repo, "releases"] => {
            if let Some(resp) = take_fault(s, Route::List).as_ref().and_then(fault_response) {
                return resp;
            }
            let owner_repo = format!("{owner}/{repo}");
            let per_page: usize = query.get("per_page").and_then(|p| p.parse().ok()).unwrap_or(30).clamp(1, 100);
            let page: usize = query.get("page").and_then(|p| p.parse().ok()).unwrap_or(1).max(1);
            // Newest first, as GitHub lists them.
            let all: Vec<&Release> = s.releases.iter().rev().filter(|r| r.owner_repo == owner_repo).collect();
            let slice: Vec<serde_json::Value> =
                all.iter().skip((page - 1) * per_page).take(per_page).map(|r| release_json(r, addr)).collect();
            let body = serde_json::Value::Array(slice);
            let tag = format!("\"{}\"", hex::encode(Sha256::digest(body.to_string().as_bytes())));
            let pages = all.len().div_ceil(per_page).max(1);
            if etag == Some(tag.as_str()) {
                // Conditional hits cost no quota, as on GitHub.
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = StatusCode::NOT_MODIFIED;
                return with_quota(r, s.remaining);
            }
            s.remaining = s.remaining.saturating_sub(1);
            let mut r = with_quota(json(StatusCode::OK, &body), s.remaining);
            let link =
                |p: usize, rel: &str| format!("<http://{addr}/repos/{owner_repo}/releases?per_page={per_page}&page={p}>; rel=\"{rel}\"");
            let mut links = Vec::new();
            if page < pages {
                links.push(link(page + 1, "next"));
                links.push(link(pages, "last"));
            }
            if page > 1 {
                links.push(link(1, "first"));
                links.push(link(page - 1, "prev"));
            }
            let h = r.headers_mut();
            if let Ok(v) = hyper::header::HeaderValue::from_str(&tag) {
                h.insert("etag", v);
            }
            if !links.is_empty()
                && let Ok(v) = hyper::header::HeaderValue::from_str(&links.join(", "))
            {
                h.insert("link", v);
            }
            r
        }
        ["repos", owner, repo, "releases", "tags", tag] => {
            let owner_repo = format!("{owner}/{repo}");
            match s.releases.iter().find(|r| r.owner_repo == owner_repo && r.tag == *tag && !r.draft) {
                Some(r) => json(StatusCode::OK, &release_json(r, addr)),
                None => json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"})),
            }
        }
        ["repos", _, _, "releases", "assets", id] => {
            if let Some(resp) = take_fault(s, Route::AssetApi).as_ref().and_then(fault_response) {
                return resp;
            }
            let Some((release, asset)) = find_asset(s, id) else {
                return json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"}));
            };
            if !accept.contains("application/octet-stream") {
                return json(StatusCode::OK, &asset_json(release, asset, addr));
            }
            // GitHub redirects downloads to a storage host; here: the same server under another name.
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::FOUND;
            let location = match s.hops {
                0 => format!("http://localhost:{}/storage/{}?signature=testkit", addr.port(), asset.id),
                n => format!("http://localhost:{}/hop/{n}/{}?signature=testkit", addr.port(), asset.id),
            };
            if let Ok(v) = hyper::header::HeaderValue::from_str(&location) {
                r.headers_mut().insert("location", v);
            }
            r
        }
        ["hop", n, id] => {
            let next = match n.parse::<usize>().unwrap_or(1) {
                0 | 1 => format!("/storage/{id}?signature=testkit"),
                n => format!("/hop/{}/{id}?signature=testkit", n - 1),
            };
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::FOUND;
            if let Ok(v) = hyper::header::HeaderValue::from_str(&next) {
                r.headers_mut().insert("location", v);
            }
            r
        }
        ["storage", id] => {
            let fault = take_fault(s, Route::Storage);
            if let Some(resp) = fault.as_ref().and_then(fault_response) {
                return resp;
            }
            let Some((_, asset)) = find_asset(s, id) else {
                return json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"}));
            };
            let data = asset.data.clone();
            let body = match fault {
                Some(Fault::Truncate) => data.slice(..data.len() / 2),
                Some(Fault::WrongBytes) => Bytes::from(data.iter().map(|b| b ^ 0x55).collect::<Vec<u8>>()),
                _ => data.clone(),
            };
            let mut r = Response::new(Full::new(body));
            if let Ok(v) = hyper::header::HeaderValue::from_str(&data.len().to_string()) {
                r.headers_mut().insert("content-length", v);
            }
            r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/octet-stream"));
            r
        }
        _ => json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"})),
    }
}

fn find_asset<'a>(s: &'a State, id: &str) -> Option<(&'a Release, &'a Asset)> {
    let id: u64 = id.parse().ok()?;
    s.releases.iter().find_map(|r| r.assets.iter().find(|a| a.id == id).map(|a| (r, a)))
}

fn asset_json(r: &Release, a: &Asset, addr: SocketAddr) -> serde_json::Value {
    let mut v = serde_json::json!({
        "url": format!("http://{addr}/repos/{}/releases/assets/{}", r.owner_repo, a.id),
        "browser_download_url": format!("http://{addr}/{}/releases/download/{}/{}", r.owner_repo, r.tag, a.name),
        "id": a.id,
        "node_id": format!("RA_{}", a.id),
        "name": a.name,
        "label": "",
        "state": "uploaded",
        "content_type": "application/octet-stream",
        "size": a.data.len(),
        "download_count": 0,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    });
    if a.publish_digest {
        v["digest"] = serde_json::Value::String(format!("sha256:{}", hex::encode(Sha256::digest(&a.data))));
    }
    v
}

fn release_json(r: &Release, addr: SocketAddr) -> serde_json::Value {
    serde_json::json!({
        "url": format!("http://{addr}/repos/{}/releases/{}", r.owner_repo, r.id),
        "html_url": format!("http://{addr}/{}/releases/tag/{}", r.owner_repo, r.tag),
        "id": r.id,
        "node_id": format!("RE_{}", r.id),
        "tag_name": r.tag,
        "target_commitish": "main",
        "name": r.tag,
        "draft": r.draft,
        "prerelease": r.prerelease,
        "created_at": "2026-01-01T00:00:00Z",
        "published_at": if r.draft { serde_json::Value::Null } else { serde_json::Value::String("2026-01-01T00:00:00Z".into()) },
        "assets": r.assets.iter().map(|a| asset_json(r, a, addr)).collect::<Vec<_>>(),
        "body": "",
    })
}
