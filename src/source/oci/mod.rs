//! OCI registries as a release source: a repository's tags are releases, each tag's artifact
//! (an OCI image manifest whose layers carry `org.opencontainers.image.title`) is the release's
//! files. This module holds the pure parts — repository references, the plain-HTTP policy,
//! `Link` pagination, `WWW-Authenticate` challenges, manifest parsing with safe layer names;
//! [`client`] does the distribution-API calls.
//!
//! The layout SovereignCloudStack's `csctl publish` pushes (through ORAS) is an image manifest
//! with `artifactType: application/vnd.scs.cluster-stacks.v1`, the empty config
//! (`application/vnd.oci.empty.v1+json`) and one layer per release file, titled by its file
//! name: `metadata.yaml` (`application/vnd.scs.metadata.layer.v1+yaml`), the cluster-class and
//! cluster-addon helm packages (`application/vnd.scs.cluster-class.v1.tar+gzip`,
//! `application/vnd.scs.cluster-addon.layer.v1.tar+gzip`), `clusteraddon.yaml`
//! (`application/vnd.scs.cluster-addon.config.layer.v1+yaml`), `hashes.json`, `node-images.yaml`.
//! Laid out as files by title, that is exactly the tree a GitHub release of the same stack gives,
//! so the rest of the pipeline reads it unchanged.

pub mod client;
mod source;

use std::collections::BTreeSet;

use serde::Deserialize;
use thiserror::Error;

use crate::model::Sha256Digest;

/// What `csctl` sets as the `artifactType` of a cluster-stack release.
pub const CLUSTER_STACK_ARTIFACT: &str = "application/vnd.scs.cluster-stacks.v1";
/// The OCI image manifest media type (the only manifest a release can be).
pub const IMAGE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The annotation naming a layer's file.
pub const TITLE: &str = "org.opencontainers.image.title";
use crate::model::source::{
    OCI_DEFAULT_PAGE_SIZE as DEFAULT_PAGE_SIZE, OCI_DEFAULT_TIMEOUT as DEFAULT_TIMEOUT, OciAuth, ReferenceError, Repository,
};
/// Most layers a release artifact may have.
pub const MAX_LAYERS: usize = 256;

/// Largest Docker config or CA bundle file read.
pub const MAX_AUX_FILE_BYTES: u64 = 1024 * 1024;

/// Credentials a Docker config file holds for one registry. `Debug` shows no secret.
#[derive(Clone, PartialEq, Eq)]
pub enum DockerCredentials {
    /// `auth` (base64 `user:password`) or `username` and `password`.
    Basic { username: String, password: String },
    /// `identitytoken`: an OAuth2 refresh token, exchanged at the token service of the
    /// registry's `Bearer` challenge.
    IdentityToken(String),
}

impl std::fmt::Debug for DockerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DockerCredentials::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            DockerCredentials::IdentityToken(_) => f.write_str("IdentityToken(***)"),
        }
    }
}

/// Why a Docker config file gives no credentials for a registry. Never quotes the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerConfigError {
    /// serde's own message can quote a value (a password): only the place is kept.
    #[error("not a Docker config (JSON with `auths`): error at line {line} column {column}")]
    NotJson { line: usize, column: usize },
    #[error("`auths` has no entry for `{0}`")]
    NoEntry(String),
    #[error("`auths.{0}.auth` is not base64 of `user:password`")]
    BadAuth(String),
    #[error("`auths.{0}` has no `auth`, `username`/`password` or `identitytoken`")]
    NoCredentials(String),
}

/// Picks the credentials for `registry` (`host[:port]`) from a Docker config file's text. The
/// `auths` key may be the bare host or a URL of it (`https://host/v1/`, as `docker login` writes
/// for Docker Hub). Errors never quote the file's content.
///
/// # Errors
/// Not JSON (line and column only), no `auths` entry for the registry, or an entry without
/// usable credentials.
pub fn docker_credentials(text: &str, registry: &str) -> Result<DockerCredentials, DockerConfigError> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        auths: std::collections::BTreeMap<String, Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        auth: Option<String>,
        username: Option<String>,
        password: Option<String>,
        identitytoken: Option<String>,
    }
    // serde's messages can quote a value: report only where the file is broken.
    let file: File = serde_json::from_str(text).map_err(|e| DockerConfigError::NotJson { line: e.line(), column: e.column() })?;
    let host_of = |key: &str| -> String {
        let k = key.split_once("://").map_or(key, |(_, rest)| rest);
        k.split('/').next().unwrap_or_default().to_ascii_lowercase()
    };
    let wanted = registry.to_ascii_lowercase();
    let entry = file
        .auths
        .iter()
        .find(|(k, _)| **k == wanted)
        .or_else(|| file.auths.iter().find(|(k, _)| host_of(k) == wanted))
        .map(|(_, e)| e)
        .ok_or_else(|| DockerConfigError::NoEntry(registry.to_owned()))?;
    let nonempty = |s: &Option<String>| s.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    if let Some(token) = nonempty(&entry.identitytoken) {
        return Ok(DockerCredentials::IdentityToken(token));
    }
    if let (Some(username), Some(password)) = (nonempty(&entry.username), nonempty(&entry.password)) {
        return Ok(DockerCredentials::Basic { username, password });
    }
    if let Some(auth) = nonempty(&entry.auth) {
        use base64::Engine;
        let bad = || DockerConfigError::BadAuth(registry.to_owned());
        let raw = base64::engine::general_purpose::STANDARD.decode(auth.as_bytes()).map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let (username, password) = raw.split_once(':').filter(|(u, p)| !u.is_empty() && !p.is_empty()).ok_or_else(bad)?;
        return Ok(DockerCredentials::Basic { username: username.to_owned(), password: password.to_owned() });
    }
    Err(DockerConfigError::NoCredentials(registry.to_owned()))
}

/// One layer of a release artifact: a file of the release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The `org.opencontainers.image.title` annotation: the file name.
    pub title: String,
    pub digest: Sha256Digest,
    pub size: u64,
    pub media_type: String,
}

/// A release artifact's manifest, reduced to what is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub artifact_type: Option<String>,
    pub layers: Vec<Layer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifest {
    schema_version: Option<u32>,
    media_type: Option<String>,
    artifact_type: Option<String>,
    config: Option<RawDescriptor>,
    #[serde(default)]
    layers: Vec<RawDescriptor>,
    manifests: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDescriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// Why a release artifact's manifest is refused. Permanent: the artifact must be pushed again.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is not an OCI image manifest: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the tag names an image index (several manifests), not a release artifact")]
    Index,
    #[error("manifest media type `{0}` is not `{IMAGE_MANIFEST}`")]
    MediaType(String),
    #[error("the manifest's schemaVersion is not 2")]
    SchemaVersion,
    #[error("the artifact has {0} layers, more than {MAX_LAYERS}")]
    TooManyLayers(usize),
    #[error("the artifact has no layers (no files)")]
    NoLayers,
    /// `digest` is cut to 80 characters.
    #[error("layer {index}: digest `{digest}` is not `sha256:<64 hex>`")]
    LayerDigest { index: usize, digest: String },
    #[error("layer {index} ({digest}) has no `{TITLE}` annotation: it cannot be named as a file")]
    NoTitle { index: usize, digest: Sha256Digest },
    #[error("layer {index} ({digest}): title {title:?} {problem}")]
    BadTitle { index: usize, digest: Sha256Digest, title: String, problem: &'static str },
    #[error("two layers are titled {0:?}")]
    RepeatedTitle(String),
}

/// Parses a release artifact's manifest (bytes already verified against their digest): an OCI
/// image manifest whose layers all have a sha256 digest and a title that is a plain file name,
/// each title once.
///
/// # Errors
/// A message naming the layer: not JSON, an image index or a Docker image manifest, too many
/// layers, a digest that is not sha256, a missing, unsafe or repeated title.
pub fn parse_manifest(bytes: &[u8]) -> Result<Artifact, ManifestError> {
    let raw: RawManifest = serde_json::from_slice(bytes).map_err(ManifestError::NotJson)?;
    if raw.manifests.is_some() || raw.media_type.as_deref() == Some("application/vnd.oci.image.index.v1+json") {
        return Err(ManifestError::Index);
    }
    match raw.media_type.as_deref() {
        None | Some(IMAGE_MANIFEST) => {}
        Some(other) => return Err(ManifestError::MediaType(other.to_owned())),
    }
    if raw.schema_version != Some(2) {
        return Err(ManifestError::SchemaVersion);
    }
    if raw.layers.len() > MAX_LAYERS {
        return Err(ManifestError::TooManyLayers(raw.layers.len()));
    }
    if raw.layers.is_empty() {
        return Err(ManifestError::NoLayers);
    }
    let artifact_type = raw.artifact_type.or_else(|| raw.config.map(|c| c.media_type)).filter(|t| !t.is_empty());
    let mut seen = BTreeSet::new();
    let mut layers = Vec::with_capacity(raw.layers.len());
    for (i, l) in raw.layers.into_iter().enumerate() {
        let digest = l
            .digest
            .strip_prefix("sha256:")
            .and_then(Sha256Digest::parse)
            .ok_or_else(|| ManifestError::LayerDigest { index: i, digest: l.digest.chars().take(80).collect() })?;
        let Some(title) = l.annotations.get(TITLE) else {
            return Err(ManifestError::NoTitle { index: i, digest });
        };
        if let Err(problem) = check_title(title) {
            return Err(ManifestError::BadTitle { index: i, digest, title: title.clone(), problem });
        }
        if !seen.insert(title.clone()) {
            return Err(ManifestError::RepeatedTitle(title.clone()));
        }
        layers.push(Layer { title: title.clone(), digest, size: l.size, media_type: l.media_type });
    }
    Ok(Artifact { artifact_type, layers })
}

/// A layer title must be a plain file name: it becomes a path in the release tree.
fn check_title(title: &str) -> Result<(), &'static str> {
    if title.is_empty() || title.len() > 255 {
        return Err("must be 1 to 255 bytes long");
    }
    if title.contains(['/', '\\', '\0']) || title == "." || title == ".." {
        return Err("is not a plain file name (no `/`, `\\`, `..`)");
    }
    if title.starts_with('.') {
        return Err("starts with `.` (names starting with `.` are stacksync's own)");
    }
    if title.chars().any(char::is_control) {
        return Err("holds control characters");
    }
    Ok(())
}

/// The OCI media types a manifest request accepts (image manifest and image index).
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";

#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("repository `{reference}`: plain HTTP is allowed only for a loopback registry or with `insecure: true`")]
    Insecure { reference: String },
    /// `message` says what failed in an operator's words; `source` is reqwest's error when
    /// there is one (not for a bad URL or a deadline of our own).
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
    #[error("{repo}: {message}")]
    Unauthorized { repo: String, message: String },
    #[error("{repo}: caFile {source}")]
    CaFile {
        repo: String,
        #[source]
        source: client::AuxFileError,
    },
    #[error("{repo}: cannot read the credentials: {source}")]
    Credentials {
        repo: String,
        #[source]
        source: client::CredentialsError,
    },
    #[error("{repo}: {url}: the response is larger than the limit of {limit} bytes")]
    TooLarge { repo: String, url: String, limit: u64 },
    #[error("{repo}: tag listing: {message}")]
    Tags { repo: String, message: String },
    #[error("{repo}: {reference}: {message}")]
    Manifest { repo: String, reference: String, message: String },
    /// The manifest a release's digest names is not a release artifact ([`parse_manifest`]).
    #[error("{repo}: {reference}: {source}")]
    Artifact {
        repo: String,
        reference: String,
        #[source]
        source: Box<ManifestError>,
    },
    /// The manifest's bytes do not hash to the digest its tag resolved to (fail closed).
    #[error("{repo}: release {tag}: manifest digest mismatch: expected {expected}, got {actual}")]
    ManifestMismatch { repo: String, tag: String, expected: Sha256Digest, actual: Sha256Digest },
    #[error("{repo}: release {tag}: layer {layer}: {source}")]
    Layer {
        repo: String,
        tag: String,
        layer: String,
        // Boxed (as `Artifact`'s): every OCI result would carry the largest variant's size.
        #[source]
        source: Box<crate::cache::blobs::BlobError>,
    },
}

impl Error {
    /// Whether asking again soon may succeed with nothing changed: a request that failed, a
    /// server error or a rate limit; not a refused credential, a bad reference, an artifact too
    /// large or malformed, a layer whose digest does not match.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Request { .. } => true,
            Error::Status { status, .. } => *status == 429 || *status >= 500,
            Error::Layer { source, .. } => source.is_transient(),
            // A file that cannot be read may be a mounted Secret being rotated.
            Error::CaFile { source, .. } => source.is_io(),
            Error::Credentials { source, .. } => source.is_transient(),
            Error::Reference { .. }
            | Error::Insecure { .. }
            | Error::Unauthorized { .. }
            | Error::TooLarge { .. }
            | Error::Tags { .. }
            | Error::Manifest { .. }
            | Error::Artifact { .. }
            | Error::ManifestMismatch { .. } => false,
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Reference { .. } => "BadReference",
            Error::Insecure { .. } => "Insecure",
            Error::Request { .. } => "RequestFailed",
            Error::Status { .. } => "HttpStatus",
            Error::Unauthorized { .. } => "Unauthorized",
            Error::CaFile { .. } => "CaFile",
            Error::Credentials { .. } => "Credentials",
            Error::TooLarge { .. } => "TooLarge",
            Error::Tags { .. } => "BadTagList",
            Error::Manifest { .. } | Error::Artifact { .. } => "BadManifest",
            Error::ManifestMismatch { .. } => "DigestMismatch",
            Error::Layer { source, .. } => source.reason(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Repository {
    /// The base URL of the registry: `https://` unless plain HTTP is allowed.
    ///
    /// # Errors
    /// Plain HTTP asked for a non-loopback registry without `insecure: true`.
    pub fn base_url(&self, plain_http: bool, insecure: bool) -> Result<String, Error> {
        if plain_http && !insecure && !self.is_loopback() {
            return Err(Error::Insecure { reference: format!("{}/{}", self.registry, self.name) });
        }
        let scheme = if plain_http { "http" } else { "https" };
        Ok(format!("{scheme}://{}", self.registry))
    }
}

/// The target of `rel="next"` in a `Link` header, resolved against `base` (`scheme://host`) when
/// relative, as registries answer `Link: </v2/x/tags/list?n=100&last=v1>; rel="next"`.
pub fn next_link(header: &str, base: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let is_next = params.split(';').any(|p| {
            p.trim().split_once('=').is_some_and(|(k, v)| k.trim().eq_ignore_ascii_case("rel") && v.trim().trim_matches('"') == "next")
        });
        if !is_next {
            return None;
        }
        Some(if target.starts_with('/') { format!("{base}{target}") } else { target.to_owned() })
    })
}

/// A `WWW-Authenticate: Bearer realm=…,service=…,scope=…` challenge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BearerChallenge {
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
}

/// Parses a Bearer challenge; `None` for another scheme or without a realm. Quoted values may
/// hold commas (`scope="repository:a/b:pull,push"`), so the split honours quotes.
pub fn parse_bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let (scheme, rest) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut out = BearerChallenge::default();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "realm" => value.clone_into(&mut out.realm),
            "service" => out.service = Some(value.to_owned()),
            "scope" => out.scope = Some(value.to_owned()),
            _ => {}
        }
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    (!out.realm.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(layers: &str) -> Vec<u8> {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{IMAGE_MANIFEST}","artifactType":"{CLUSTER_STACK_ARTIFACT}","config":{{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2}},"layers":[{layers}]}}"#
        )
        .into_bytes()
    }

    fn layer(title: &str) -> String {
        format!(
            r#"{{"mediaType":"application/vnd.scs.metadata.layer.v1+yaml","digest":"sha256:{}","size":3,"annotations":{{"{TITLE}":"{title}"}}}}"#,
            "a".repeat(64)
        )
    }

    #[test]
    fn csctl_manifest_parses_into_titled_layers() {
        let a = parse_manifest(&manifest(&layer("metadata.yaml"))).unwrap();
        assert_eq!(a.artifact_type.as_deref(), Some(CLUSTER_STACK_ARTIFACT));
        assert_eq!(a.layers[0].title, "metadata.yaml");
        assert_eq!(a.layers[0].digest.hex(), "a".repeat(64));
    }

    #[test]
    fn unsafe_missing_or_repeated_titles_are_refused() {
        // (layers JSON, expected words in the error)
        let table: &[(String, &str)] = &[
            (layer("../etc/passwd"), "not a plain file name"),
            (layer("a/b.yaml"), "not a plain file name"),
            (layer(".."), "not a plain file name"),
            (layer(".stacksync-assets.json"), "starts with `.`"),
            (layer(""), "1 to 255"),
            (format!("{},{}", layer("x.yaml"), layer("x.yaml")), "two layers are titled"),
            (layer("m.yaml").replace(TITLE, "other"), "has no `org.opencontainers.image.title`"),
            (layer("m.yaml").replace("sha256:", "sha512:"), "is not `sha256:<64 hex>`"),
            (String::new(), "no layers"),
        ];
        for (layers, want) in table {
            let err = parse_manifest(&manifest(layers)).unwrap_err().to_string();
            assert!(err.contains(want), "{layers}: {err}");
        }
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(parse_manifest(index).unwrap_err().to_string().contains("image index"));
        let docker = br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","layers":[]}"#;
        assert!(parse_manifest(docker).unwrap_err().to_string().contains("is not `application/vnd.oci.image.manifest.v1+json`"));
    }

    #[test]
    fn repository_references_parse_and_bad_ones_are_refused() {
        let r = Repository::parse("registry.example:5000/scs/openstack-scs").unwrap();
        assert_eq!(r.registry, "registry.example:5000");
        assert_eq!(r.name, "scs/openstack-scs");
        assert!(!r.is_loopback());
        for bad in [
            "",
            "https://r.example/a",
            "r.example",
            "r.example/a:v1",
            "r.example/a@sha256:00",
            "r.example:0/a",
            "r.example/A",
            "r.example/a//b",
        ] {
            assert!(Repository::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_only_for_loopback_or_insecure() {
        let local = Repository::parse("127.0.0.1:5000/a").unwrap();
        assert_eq!(local.base_url(true, false).unwrap(), "http://127.0.0.1:5000");
        let remote = Repository::parse("r.example/a").unwrap();
        assert!(matches!(remote.base_url(true, false), Err(Error::Insecure { .. })));
        assert_eq!(remote.base_url(true, true).unwrap(), "http://r.example");
        assert_eq!(remote.base_url(false, false).unwrap(), "https://r.example");
    }

    #[test]
    fn docker_config_entries_are_picked_by_host() {
        let config = r#"{"auths":{
            "other.example":{"auth":"eDp5"},
            "https://r.example:5000/v1/":{"auth":"ZGVwbG95ZXI6czNjcmV0"},
            "plain.example":{"username":"u","password":"p"},
            "oauth.example":{"identitytoken":"refresh-me"},
            "empty.example":{},
            "bad.example":{"auth":"bm8tY29sb24="}}}"#;
        let basic = |u: &str, p: &str| DockerCredentials::Basic { username: u.into(), password: p.into() };
        assert_eq!(docker_credentials(config, "r.example:5000").unwrap(), basic("deployer", "s3cret"));
        assert_eq!(format!("{:?}", basic("deployer", "s3cret")), "Basic(deployer, ***)");
        assert_eq!(docker_credentials(config, "plain.example").unwrap(), basic("u", "p"));
        assert_eq!(docker_credentials(config, "oauth.example").unwrap(), DockerCredentials::IdentityToken("refresh-me".into()));
        assert!(docker_credentials(config, "r.example").unwrap_err().to_string().contains("no entry for `r.example`"));
        assert!(docker_credentials(config, "empty.example").unwrap_err().to_string().contains("has no `auth`"));
        assert!(docker_credentials(config, "bad.example").unwrap_err().to_string().contains("not base64 of `user:password`"));
        // A broken file is located, never quoted.
        let err = docker_credentials(r#"{"auths":{"x":{"auth":42, "password":"hunter2"}}}"#, "x").unwrap_err().to_string();
        assert!(err.contains("line 1 column") && !err.contains("hunter2"), "{err}");
    }

    #[test]
    fn link_pagination_next_is_resolved() {
        let h = r#"</v2/a/tags/list?n=2&last=v2>; rel="next""#;
        assert_eq!(next_link(h, "http://127.0.0.1:5000").as_deref(), Some("http://127.0.0.1:5000/v2/a/tags/list?n=2&last=v2"));
        assert_eq!(next_link(r#"<https://x/y>; rel="prev""#, "http://b"), None);
        assert_eq!(next_link("garbage", "http://b"), None);
    }

    #[test]
    fn bearer_challenge_with_commas_in_scope() {
        let c = parse_bearer_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.realm, "https://auth.example/token");
        assert_eq!(c.service.as_deref(), Some("registry.example"));
        assert_eq!(c.scope.as_deref(), Some("repository:a/b:pull,push"));
        assert_eq!(parse_bearer_challenge(r#"Basic realm="x""#), None);
        assert_eq!(parse_bearer_challenge("Bearer service=x"), None);
    }
}
