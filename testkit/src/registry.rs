//! A real OCI registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) on a free
//! loopback port, its config and storage in a temp dir, killed on drop. Artifacts are pushed
//! through the distribution API as `csctl`/ORAS push them (blobs, then an OCI image manifest
//! whose layers carry `org.opencontainers.image.title`).
//!
//! Authentication, as real registries do it:
//! - [`Auth::Htpasswd`]: the registry's own basic authentication (bcrypt htpasswd).
//! - [`Auth::Token`]: the registry's `auth.token` mode. [`TokenServer`] is the token service:
//!   it checks basic credentials (or lets anonymous callers pull), then issues an RS256 JWT
//!   signed with an `openssl`-made key whose certificate is the registry's `rootcertbundle`;
//!   the JWT's `kid` is the key's libtrust id, which is how distribution finds the key.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Debian's registry binary.
pub const DOCKER_REGISTRY: &str = "/usr/bin/docker-registry";
/// The user of [`Auth::Htpasswd`] and [`TokenServer`].
pub const USER: &str = "deployer";
/// The Docker config `identitytoken` (OAuth2 refresh token) [`TokenServer`] accepts for [`USER`].
pub const IDENTITY_TOKEN: &str = "testkit-identity-refresh-7d2a";
/// That user's password.
pub const PASSWORD: &str = "correct-horse-staple";
/// [`PASSWORD`] hashed with bcrypt (cost 5), made once for this fixture.
const PASSWORD_BCRYPT: &str = "$2b$05$stacksynctestkitsaltA.7vKggPEdiSkVLlgD52pXgHj9oJVrpdu";
/// The empty config descriptor ORAS and csctl use for artifacts.
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";
const SERVICE: &str = "stacksync-test-registry";
const ISSUER: &str = "testkit-token-service";

/// How the registry authenticates clients.
pub enum Auth<'a> {
    None,
    /// Basic authentication of [`USER`] / [`PASSWORD`].
    Htpasswd,
    /// Token authentication by this token service.
    Token(&'a TokenServer),
}

/// A running `docker-registry`.
pub struct Registry {
    addr: SocketAddr,
    dir: PathBuf,
    child: Child,
    http: reqwest::Client,
    /// `http` or `https`.
    scheme: &'static str,
    /// Credentials the test pushes with.
    push_auth: Option<(String, String)>,
    token: Option<(String, String)>,
}

/// `sha256:<hex>` of bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl Registry {
    /// Starts a registry storing under `dir`, waiting until it listens.
    pub async fn start(dir: &Path, auth: Auth<'_>) -> std::io::Result<Registry> {
        Self::start_with(dir, auth, false).await
    }

    /// Starts a registry serving TLS only, with a certificate for `127.0.0.1` issued by a CA
    /// made with `openssl` under `dir` ([`Registry::ca_file`]).
    pub async fn start_tls(dir: &Path, auth: Auth<'_>) -> std::io::Result<Registry> {
        Self::start_with(dir, auth, true).await
    }

    /// The PEM certificate of the CA that issued a TLS registry's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("tls/ca.pem")
    }

    async fn start_with(dir: &Path, auth: Auth<'_>, tls: bool) -> std::io::Result<Registry> {
        std::fs::create_dir_all(dir)?;
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:0\n",
            data = dir.join("data").display()
        );
        let mut http = reqwest::Client::builder().timeout(Duration::from_secs(30));
        if tls {
            let ca = make_tls(&dir.join("tls")).await?;
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.join("tls/cert.pem").display(),
                dir.join("tls/key.pem").display()
            ));
            http = http.tls_certs_merge([reqwest::Certificate::from_pem(&ca).map_err(std::io::Error::other)?]);
        }
        let scheme = if tls { "https" } else { "http" };
        let mut token = None;
        match auth {
            Auth::None => {}
            Auth::Htpasswd => {
                std::fs::write(dir.join("htpasswd"), format!("{USER}:{PASSWORD_BCRYPT}\n"))?;
                config.push_str(&format!("auth:\n  htpasswd:\n    realm: testkit\n    path: {}\n", dir.join("htpasswd").display()));
            }
            Auth::Token(server) => {
                config.push_str(&format!(
                    "auth:\n  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {cert}\n",
                    realm = server.realm(),
                    cert = server.dir.join("cert.pem").display()
                ));
                token = Some((USER.to_owned(), PASSWORD.to_owned()));
            }
        }
        let push_auth = matches!(auth, Auth::Htpasswd).then(|| (USER.to_owned(), PASSWORD.to_owned()));
        let conf = dir.join("config.yml");
        std::fs::write(&conf, config)?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let mut child = Command::new(DOCKER_REGISTRY)
            .arg("serve")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default();
                return Err(std::io::Error::other(format!("docker-registry exited with {status}: {log}")));
            }
            let log = std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default();
            if let Some(addr) =
                log.split("listening on ").nth(1).and_then(|r| r.split(['"', ' ', ',', '\n']).next()).and_then(|a| a.parse().ok())
            {
                break addr;
            }
            if tokio::time::Instant::now() > deadline {
                let _ = child.kill().await;
                return Err(std::io::Error::other("docker-registry did not listen within 20s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let http = http.build().map_err(std::io::Error::other)?;
        let registry = Registry { addr, dir: dir.to_path_buf(), child, http, scheme, push_auth, token };
        // Ready when the API answers (401 counts: it is up).
        for _ in 0..200 {
            if registry.http.get(format!("{scheme}://{addr}/v2/")).send().await.is_ok() {
                return Ok(registry);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(std::io::Error::other("docker-registry did not answer /v2/"))
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `127.0.0.1:<port>/<name>`, as a source's `repository`.
    pub fn repository(&self, name: &str) -> String {
        format!("{}/{name}", self.addr)
    }

    /// A request with the test's push credentials.
    async fn authed(&self, method: reqwest::Method, url: &str, scope_name: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        if let Some((u, p)) = &self.push_auth {
            return req.basic_auth(u, Some(p));
        }
        if let Some((u, p)) = &self.token {
            // The token realm is on the same machine; ask it directly for push and pull.
            let realm = self.token_realm().await;
            let resp = self
                .http
                .get(format!("{realm}?service={SERVICE}&scope=repository:{scope_name}:pull,push"))
                .basic_auth(u, Some(p))
                .send()
                .await
                .expect("token request");
            let body: serde_json::Value = resp.json().await.expect("token json");
            return req.bearer_auth(body["token"].as_str().expect("token"));
        }
        req
    }

    async fn token_realm(&self) -> String {
        let resp = self.http.get(format!("{}://{}/v2/", self.scheme, self.addr)).send().await.expect("challenge");
        let header = resp.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        header.split("realm=\"").nth(1).and_then(|r| r.split('"').next()).expect("realm").to_owned()
    }

    /// Uploads a blob (POST, then PUT with its digest); returns the digest.
    pub async fn push_blob(&self, name: &str, bytes: &[u8]) -> String {
        let d = digest(bytes);
        let url = format!("{}://{}/v2/{name}/blobs/uploads/", self.scheme, self.addr);
        let resp = self.authed(reqwest::Method::POST, &url, name).await.send().await.expect("start upload");
        assert_eq!(resp.status(), 202, "start upload: {}", resp.text().await.unwrap_or_default());
        let location = resp.headers()["location"].to_str().expect("location").to_owned();
        let location = if location.starts_with('/') { format!("{}://{}{location}", self.scheme, self.addr) } else { location };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={d}");
        let resp = self
            .authed(reqwest::Method::PUT, &put, name)
            .await
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .expect("upload");
        assert_eq!(resp.status(), 201, "upload: {}", resp.text().await.unwrap_or_default());
        d
    }

    /// Puts a manifest under `reference` (a tag); returns its digest.
    pub async fn put_manifest(&self, name: &str, reference: &str, manifest: &[u8]) -> String {
        let url = format!("{}://{}/v2/{name}/manifests/{reference}", self.scheme, self.addr);
        let resp = self
            .authed(reqwest::Method::PUT, &url, name)
            .await
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.to_vec())
            .send()
            .await
            .expect("put manifest");
        assert_eq!(resp.status(), 201, "put manifest: {}", resp.text().await.unwrap_or_default());
        digest(manifest)
    }

    /// Pushes an artifact as `csctl publish` does: every file a layer titled by its name, the
    /// empty config, `artifactType` set. Files are `(title, media type, bytes)`. Returns the
    /// manifest digest.
    pub async fn push_artifact(&self, name: &str, tag: &str, artifact_type: &str, files: &[(&str, &str, Vec<u8>)]) -> String {
        let config = self.push_blob(name, b"{}").await;
        let mut layers = Vec::new();
        for (title, media_type, bytes) in files {
            let d = self.push_blob(name, bytes).await;
            layers.push(serde_json::json!({
                "mediaType": media_type, "digest": d, "size": bytes.len(),
                "annotations": {"org.opencontainers.image.title": title},
            }));
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": artifact_type,
            "config": {"mediaType": EMPTY_CONFIG, "digest": config, "size": 2},
            "layers": layers,
            "annotations": {"org.opencontainers.image.created": "2026-11-23T00:00:00Z"},
        });
        self.put_manifest(name, tag, &serde_json::to_vec(&manifest).expect("json")).await
    }

    /// Where the registry keeps a blob's bytes: overwriting them makes the registry serve bytes
    /// that do not match their digest (its filesystem driver does not re-check).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// Requests of `method` (`GET`, `HEAD`, …) whose URI contains `needle`, from the registry's
    /// log (it names every request: how tests count what a client fetched).
    pub fn requests(&self, method: &str, needle: &str) -> usize {
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        let method = format!("http.request.method={method} ");
        log.lines().filter(|l| l.contains("response completed") && l.contains(&method) && l.contains(needle)).count()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The token service of [`Auth::Token`]: `GET /token?service=…&scope=…` with basic credentials
/// of [`USER`] (pull and push) or none (pull only, when `anonymous_pull`).
pub struct TokenServer {
    addr: SocketAddr,
    dir: PathBuf,
    task: JoinHandle<()>,
    issued: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

struct Signer {
    key: PathBuf,
    kid: String,
    anonymous_pull: bool,
    issued: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl TokenServer {
    /// Makes an RSA key and a self-signed certificate with `openssl` under `dir` and serves.
    pub async fn start(dir: &Path, anonymous_pull: bool) -> std::io::Result<TokenServer> {
        std::fs::create_dir_all(dir)?;
        let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
        openssl(&["genrsa", "-out", &key.to_string_lossy(), "2048"], None).await?;
        openssl(
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &key.to_string_lossy(),
                "-subj",
                "/CN=testkit-token",
                "-days",
                "2",
                "-out",
                &cert.to_string_lossy(),
            ],
            None,
        )
        .await?;
        let pem = openssl(&["x509", "-in", &cert.to_string_lossy(), "-pubkey", "-noout"], None).await?;
        let der = openssl(&["pkey", "-pubin", "-outform", "DER"], Some(&pem)).await?;
        let kid = libtrust_key_id(&der);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (issued, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let signer = Arc::new(Signer { key, kid, anonymous_pull, issued: issued.clone(), refused: refused.clone() });
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let signer = signer.clone();
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let signer = signer.clone();
                        async move { Ok::<_, Infallible>(issue(&signer, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Ok(TokenServer { addr, dir: dir.to_path_buf(), task, issued, refused })
    }

    /// `http://127.0.0.1:<port>/token`.
    pub fn realm(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::SeqCst)
    }

    /// Token requests refused (wrong credentials) so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A CA (`ca.pem`) and a server certificate it issued for `127.0.0.1` (`cert.pem`, `key.pem`),
/// P-256 keys, valid two days. Returns the CA's PEM.
async fn make_tls(dir: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::create_dir_all(dir)?;
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509", "-new"];
    ca.extend(ec);
    let (ca_key, ca_pem) = (p("ca.key"), p("ca.pem"));
    ca.extend(["-keyout", &ca_key, "-out", &ca_pem, "-subj", "/CN=testkit-registry-ca", "-days", "2"]);
    openssl(&ca, None).await?;
    let mut csr = vec!["req", "-new"];
    let (key, csr_path) = (p("key.pem"), p("server.csr"));
    csr.extend(ec);
    csr.extend(["-keyout", &key, "-out", &csr_path, "-subj", "/CN=127.0.0.1"]);
    openssl(&csr, None).await?;
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )?;
    let (ext, cert) = (p("server.ext"), p("cert.pem"));
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &csr_path,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
        None,
    )
    .await?;
    std::fs::read(dir.join("ca.pem"))
}

async fn openssl(args: &[&str], stdin: Option<&[u8]>) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input).await?;
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.map_err(std::io::Error::other)??;
    if !out.status.success() {
        return Err(std::io::Error::other(format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(out.stdout)
}

/// distribution's (libtrust's) key id: the SHA-256 of the DER public key, first 240 bits,
/// base32 without padding, in groups of four joined by `:`.
fn libtrust_key_id(der: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let hash = Sha256::digest(der);
    let mut bits = 0u32;
    let mut value = 0u32;
    let mut out = String::new();
    for byte in &hash[..30] {
        value = (value << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((value >> bits) & 31) as usize]));
        }
    }
    let chars: Vec<char> = out.chars().collect();
    chars.chunks(4).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>().join(":")
}

async fn issue(signer: &Signer, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    if req.method() == hyper::Method::POST {
        return issue_oauth(signer, req).await;
    }
    let query: BTreeMap<String, String> = form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
    let presented = req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Basic "));
    let expected = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let actions: Vec<&str> = match presented {
        Some(p) if p == expected => vec!["pull", "push"],
        Some(_) => {
            signer.refused.fetch_add(1, Ordering::SeqCst);
            return reply(StatusCode::UNAUTHORIZED, b"{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}".to_vec());
        }
        None if signer.anonymous_pull => vec!["pull"],
        None => {
            signer.refused.fetch_add(1, Ordering::SeqCst);
            return reply(StatusCode::UNAUTHORIZED, b"{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}".to_vec());
        }
    };
    // `repository:<name>:<actions>`; grant what was asked, within what this caller may do.
    match sign(signer, &query, presented.is_some(), &actions).await {
        Ok(token) => reply(StatusCode::OK, serde_json::to_vec(&serde_json::json!({"token": token, "expires_in": 300})).unwrap_or_default()),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string().into_bytes()),
    }
}

/// The OAuth2 form of the token endpoint (`POST`, `grant_type=refresh_token`), as Docker clients
/// use an `identitytoken`: [`IDENTITY_TOKEN`] is exchanged for a token of [`USER`].
async fn issue_oauth(signer: &Signer, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    let Ok(body) = http_body_util::Limited::new(req.into_body(), 64 * 1024).collect().await else {
        return reply(StatusCode::BAD_REQUEST, b"{\"error\":\"invalid_request\"}".to_vec());
    };
    let form: BTreeMap<String, String> = form_urlencoded::parse(&body.to_bytes()).into_owned().collect();
    if form.get("grant_type").map(String::as_str) != Some("refresh_token")
        || form.get("refresh_token").map(String::as_str) != Some(IDENTITY_TOKEN)
    {
        signer.refused.fetch_add(1, Ordering::SeqCst);
        return reply(StatusCode::UNAUTHORIZED, b"{\"error\":\"invalid_grant\"}".to_vec());
    }
    match sign(signer, &form, true, &["pull", "push"]).await {
        Ok(token) => {
            reply(StatusCode::OK, serde_json::to_vec(&serde_json::json!({"access_token": token, "expires_in": 300})).unwrap_or_default())
        }
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string().into_bytes()),
    }
}

/// A registry JWT granting `actions` of what `query`'s scope asks.
async fn sign(signer: &Signer, query: &BTreeMap<String, String>, user: bool, actions: &[&str]) -> std::io::Result<String> {
    let access: Vec<serde_json::Value> = query
        .get("scope")
        .into_iter()
        .flat_map(|s| s.split(' '))
        .filter_map(|s| {
            let mut parts = s.splitn(3, ':');
            let (kind, name, asked) = (parts.next()?, parts.next()?, parts.next()?);
            let granted: Vec<&str> = asked.split(',').filter(|a| actions.contains(a)).collect();
            Some(serde_json::json!({"type": kind, "name": name, "actions": granted}))
        })
        .collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let n = signer.issued.fetch_add(1, Ordering::SeqCst);
    let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "kid": signer.kid});
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": if user { USER } else { "" }, "aud": query.get("service").map_or(SERVICE, String::as_str),
        "exp": now + 300, "nbf": now.saturating_sub(10), "iat": now, "jti": format!("testkit-{n}"), "access": access,
    });
    let b64 = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap_or_default());
    let signing_input = format!("{}.{}", b64(&header), b64(&claims));
    let signature = openssl(&["dgst", "-sha256", "-sign", &signer.key.to_string_lossy()], Some(signing_input.as_bytes())).await?;
    Ok(format!("{signing_input}.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature)))
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// A thin front for [`Registry`] that pages `GET /v2/<name>/tags/list` as the distribution spec
/// describes (`?n=` and `?last=`, `Link: <…>; rel="next"`): Debian's registry 2.8 answers the
/// whole list whatever `n` says. Every other request is passed through unchanged.
pub struct PagingFront {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl PagingFront {
    pub async fn start(registry: &Registry) -> std::io::Result<PagingFront> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let upstream = registry.addr;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(std::io::Error::other)?;
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let http = http.clone();
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let http = http.clone();
                        async move { Ok::<_, Infallible>(forward(&http, upstream, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Ok(PagingFront { addr, task })
    }

    /// `127.0.0.1:<port>/<name>`, as a source's `repository`.
    pub fn repository(&self, name: &str) -> String {
        format!("{}/{name}", self.addr)
    }

    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn forward(http: &reqwest::Client, upstream: SocketAddr, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let query: BTreeMap<String, String> = form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
    let paged = path.ends_with("/tags/list") && req.method() == hyper::Method::GET;
    let url = if paged { format!("http://{upstream}{path}") } else { format!("http://{upstream}{}", req.uri()) };
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut out = http.request(method, url);
    for name in ["accept", "authorization"] {
        if let Some(v) = req.headers().get(name).and_then(|v| v.to_str().ok()) {
            out = out.header(name, v);
        }
    }
    let resp = match out.send().await {
        Ok(r) => r,
        Err(e) => return reply(StatusCode::BAD_GATEWAY, e.to_string().into_bytes()),
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = resp.headers().clone();
    let body = resp.bytes().await.unwrap_or_default();
    let mut link = None;
    let body = if paged && status == StatusCode::OK {
        let mut list: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let mut tags: Vec<String> = serde_json::from_value(list["tags"].take()).unwrap_or_default();
        tags.sort();
        if let Some(last) = query.get("last") {
            tags.retain(|t| t > last);
        }
        if let Some(n) = query.get("n").and_then(|n| n.parse::<usize>().ok())
            && tags.len() > n
        {
            tags.truncate(n);
            link = tags.last().map(|last| format!("<{path}?n={n}&last={last}>; rel=\"next\""));
        }
        list["tags"] = serde_json::json!(tags);
        Bytes::from(serde_json::to_vec(&list).unwrap_or_default())
    } else {
        body
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    for name in ["content-type", "docker-content-digest", "www-authenticate", "location", "docker-distribution-api-version"] {
        if let Some(v) = headers.get(name).and_then(|v| hyper::header::HeaderValue::from_bytes(v.as_bytes()).ok()) {
            r.headers_mut().insert(name, v);
        }
    }
    if let Some(l) = link.and_then(|l| hyper::header::HeaderValue::from_str(&l).ok()) {
        r.headers_mut().insert("link", l);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_are_twelve_groups_of_four() {
        let kid = libtrust_key_id(b"anything");
        assert_eq!(kid.split(':').count(), 12);
        assert!(kid.split(':').all(|g| g.len() == 4));
    }
}
