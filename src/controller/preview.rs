//! The release `stacksync preview --release` renders: a release not (yet) offered. Either a
//! local release — a directory as `csctl` writes it (or a release repository checkout), a
//! `.tgz` / `.tar` of one, an OCI image layout whose layers are the release's files (what `oras`
//! pushes) — or a tag of a configured source, fetched and verified as every release is.
//!
//! A local release is read where it is (an archive or an OCI layout is opened into a scratch
//! directory that goes with the preview): it never enters the cache, so nothing unpublished is
//! ever recorded as verified. Its identity is the digest of its files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{Context, PrepareError, PreparedRelease};
use crate::cache::unpack::{self, Limits};
use crate::config::{Config, Format, Subscription};
use crate::model::version::Version;
use crate::release::Release;

/// The most a local release's files may hold (read to hash them, copied out of an OCI layout).
const MAX_BYTES: u64 = crate::model::source::DEFAULT_MAX_UNPACKED_BYTES;
/// The most files a local release may hold.
const MAX_FILES: usize = 20_000;
/// The largest `metadata.yaml`, `oci-layout`, `index.json` or manifest read.
const MAX_SMALL_FILE: u64 = 4 << 20;

/// What `--release` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseArg {
    /// A release directory, archive or OCI layout on this machine.
    Path(PathBuf),
    /// `SOURCE:TAG`: a tag of a configured source.
    Tag { source: String, tag: String },
}

impl ReleaseArg {
    /// A path when something is there (or it looks like one), else `SOURCE:TAG`.
    pub fn parse(arg: &str) -> ReleaseArg {
        let path = Path::new(arg);
        if path.exists() || arg.starts_with(['.', '/', '~']) {
            return ReleaseArg::Path(path.to_owned());
        }
        match arg.split_once(':') {
            Some((source, tag)) if !source.is_empty() && !tag.is_empty() && !source.contains('/') => {
                ReleaseArg::Tag { source: source.to_owned(), tag: tag.to_owned() }
            }
            _ => ReleaseArg::Path(path.to_owned()),
        }
    }
}

/// Where a previewed release came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A local release: the path given and the digest of its files.
    Local { path: PathBuf, digest: String },
    /// A configured source's tag (fetched, verified and cached as usual).
    Source,
}

/// A release ready to preview: the subscription it is previewed for (its `path` pointing at the
/// release's root when the release is local) and the release prepared.
#[derive(Debug)]
pub struct Candidate {
    pub subscription: Subscription,
    pub prepared: PreparedRelease,
    pub origin: Origin,
    /// An archive or OCI layout opened for the preview; removed with it.
    _scratch: Option<tempfile::TempDir>,
}

/// Why the release to preview cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: no such file or directory", .0.display())]
    NotFound(PathBuf),
    #[error("{}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Unpack {
        path: PathBuf,
        #[source]
        source: unpack::UnpackError,
    },
    #[error("{}: OCI layout: {message}", path.display())]
    OciLayout { path: PathBuf, message: String },
    #[error("{file}: {message}")]
    Metadata { file: String, message: String },
    #[error("{0}")]
    Subscription(String),
    #[error("source `{src}` does not advertise tag `{tag}`{}", poll.as_ref().map(|e| format!(" (its poll failed: {e})")).unwrap_or_default())]
    NoSuchTag { src: String, tag: String, poll: Option<String> },
    #[error("release {tag} of source `{src}`: {error}")]
    Prepare { src: String, tag: String, error: Arc<PrepareError> },
    #[error("release {tag} of source `{src}` does not verify: {message}")]
    Unverified { src: String, tag: String, message: String },
}

/// Reads, opens or fetches the release `arg` names, for `subscription` (needed when more than
/// one could take it). `tag` names the release of a local manifests release (it has no
/// `metadata.yaml`) or the image of an OCI layout holding several.
///
/// # Errors
/// See [`Error`]: every one names the path, source, tag or subscription.
pub async fn candidate(ctx: &Context, arg: &ReleaseArg, subscription: Option<&str>, tag: Option<&str>) -> Result<Candidate, Error> {
    let config = ctx.config();
    match arg {
        ReleaseArg::Path(path) => {
            let (path, tag) = (path.clone(), tag.map(str::to_owned));
            let opened = tokio::task::spawn_blocking(move || open(&path, tag.as_deref()))
                .await
                .map_err(|e| Error::Read { path: PathBuf::new(), message: e.to_string() })??;
            local(&config, opened, subscription)
        }
        ReleaseArg::Tag { source, tag } => published(ctx, &config, source, tag, subscription).await,
    }
}

/// A local release opened: its root (where `metadata.yaml` is, for a cluster stack), the
/// `metadata.yaml`'s cluster-stack version, and the scratch directory holding it, if any.
struct Opened {
    given: PathBuf,
    root: PathBuf,
    cluster_stack: Option<(String, String)>,
    tag: Option<String>,
    digest: String,
    scratch: Option<tempfile::TempDir>,
}

fn open(path: &Path, tag: Option<&str>) -> Result<Opened, Error> {
    let meta = std::fs::metadata(path).map_err(|_| Error::NotFound(path.to_owned()))?;
    let read = |e: std::io::Error| Error::Read { path: path.to_owned(), message: e.to_string() };
    let scratch = || tempfile::Builder::new().prefix("stacksync-preview-").tempdir().map_err(read);
    let (root, scratch) = if meta.is_file() {
        let dir = scratch()?;
        unpack::unpack(path, dir.path(), Limits::default()).map_err(|source| Error::Unpack { path: path.to_owned(), source })?;
        (wrapped(dir.path()), Some(dir))
    } else if path.join("oci-layout").is_file() {
        let dir = scratch()?;
        oci_layout(path, tag, dir.path())?;
        (dir.path().to_owned(), Some(dir))
    } else {
        (path.to_owned(), None)
    };
    let root = root.canonicalize().map_err(read)?;
    let digest = digest_of(&root)?;
    let metadata = root.join("metadata.yaml");
    let cluster_stack = if metadata.is_file() { Some(cluster_stack_version(&metadata)?) } else { None };
    Ok(Opened { given: path.to_owned(), root, cluster_stack, tag: tag.map(str::to_owned), digest, scratch })
}

/// An archive of one directory (`tar czf r.tgz release/`) is that directory's release.
fn wrapped(dir: &Path) -> PathBuf {
    if dir.join("metadata.yaml").exists() {
        return dir.to_owned();
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
    match entries.as_slice() {
        [only] if only.is_dir() => only.clone(),
        _ => dir.to_owned(),
    }
}

/// Reads `versions.clusterStack` of a `metadata.yaml`, and the file's name for messages (the
/// whole file is validated, with lines and fields, when the release is loaded).
fn cluster_stack_version(file: &Path) -> Result<(String, String), Error> {
    let shown = file.display().to_string();
    let text = read_small(file)?;
    let value: serde_json::Value = serde_saphyr::from_str(&text)
        .map_err(|e| Error::Metadata { file: shown.clone(), message: format!("invalid YAML: {}", unpack::shown(&e.to_string())) })?;
    match value.pointer("/versions/clusterStack").and_then(serde_json::Value::as_str) {
        Some(v) if !v.is_empty() => Ok((v.to_owned(), shown)),
        _ => Err(Error::Metadata { file: shown, message: "versions.clusterStack: required (e.g. `v3`)".into() }),
    }
}

fn read_small(file: &Path) -> Result<String, Error> {
    use std::io::Read;
    let err = |message: String| Error::Read { path: file.to_owned(), message };
    let f = std::fs::File::open(file).map_err(|e| err(e.to_string()))?;
    let mut text = String::new();
    f.take(MAX_SMALL_FILE + 1).read_to_string(&mut text).map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_SMALL_FILE {
        return Err(err(format!("larger than {MAX_SMALL_FILE} bytes")));
    }
    Ok(text)
}

/// The digest of a release's files: every regular file's path and content, in path order
/// (links are not followed). Bounded by [`MAX_BYTES`] and [`MAX_FILES`].
fn digest_of(root: &Path) -> Result<String, Error> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| Error::Read { path: dir.clone(), message: e.to_string() })?;
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                dirs.push(e.path());
            } else if kind.is_file() {
                let len = e.metadata().map(|m| m.len()).unwrap_or_default();
                files.push((e.path(), len));
            }
            if files.len() > MAX_FILES {
                return Err(Error::Read { path: root.to_owned(), message: format!("holds more than {MAX_FILES} files") });
            }
        }
    }
    files.sort();
    // Sized before anything is read: a huge file is refused, not loaded.
    if files.iter().map(|(_, len)| *len).sum::<u64>() > MAX_BYTES {
        return Err(Error::Read { path: root.to_owned(), message: format!("holds more than {MAX_BYTES} bytes") });
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    for (f, len) in &files {
        use std::io::Read;
        let read = |e: std::io::Error| Error::Read { path: f.clone(), message: e.to_string() };
        let rel = f.strip_prefix(root).unwrap_or(f).to_string_lossy();
        h.update((rel.len() as u64).to_be_bytes());
        h.update(rel.as_bytes());
        h.update(len.to_be_bytes());
        // At most the size seen: a file growing meanwhile cannot make this read unbounded.
        let mut file = std::fs::File::open(f).map_err(read)?.take(*len);
        loop {
            let n = file.read(&mut buf).map_err(read)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// Writes the files of an OCI image layout's release artifact into `out`: the image `tag`
/// names (`org.opencontainers.image.ref.name`), or its only one. Every blob is checked against
/// its digest; layer titles are plain file names ([`crate::source::oci::parse_manifest`]).
fn oci_layout(layout: &Path, tag: Option<&str>, out: &Path) -> Result<(), Error> {
    let bad = |message: String| Error::OciLayout { path: layout.to_owned(), message };
    let index: serde_json::Value =
        serde_json::from_str(&read_small(&layout.join("index.json"))?).map_err(|e| bad(format!("index.json is not JSON: {e}")))?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let name =
        |m: &serde_json::Value| m.pointer("/annotations/org.opencontainers.image.ref.name").and_then(|n| n.as_str()).map(str::to_owned);
    let chosen: Vec<&serde_json::Value> = match tag {
        Some(t) => manifests.iter().filter(|m| name(m).as_deref() == Some(t)).collect(),
        None => manifests.iter().collect(),
    };
    let manifest = match chosen.as_slice() {
        [one] => *one,
        [] => return Err(bad(format!("index.json has no image{}", tag.map(|t| format!(" named `{t}`")).unwrap_or_default()))),
        _ => {
            let names: Vec<String> = chosen.iter().map(|m| name(m).unwrap_or_else(|| "(unnamed)".into())).collect();
            return Err(bad(format!("index.json has {} images ({}): name one with --tag", names.len(), names.join(", "))));
        }
    };
    let digest = manifest["digest"].as_str().unwrap_or_default();
    let bytes = blob(layout, digest, MAX_SMALL_FILE).map_err(|e| bad(e.to_string()))?;
    let artifact = crate::source::oci::parse_manifest(&bytes).map_err(|e| bad(format!("manifest {digest}: {e}")))?;
    let mut total = 0u64;
    for l in &artifact.layers {
        total += l.size;
        if total > MAX_BYTES {
            return Err(bad(format!("its layers hold more than {MAX_BYTES} bytes")));
        }
        let bytes = blob(layout, &l.digest.to_string(), l.size).map_err(|e| bad(e.to_string()))?;
        std::fs::write(out.join(&l.title), bytes).map_err(|e| Error::Read { path: out.join(&l.title), message: e.to_string() })?;
    }
    Ok(())
}

/// Why a blob of an OCI layout cannot be taken.
#[derive(Debug, thiserror::Error)]
enum BadBlob {
    /// The digest as shown (quoted).
    #[error("digest {0} is not a sha256 digest")]
    NotSha256(String),
    #[error("blob {digest}: {source}")]
    Read {
        digest: String,
        #[source]
        source: std::io::Error,
    },
    #[error("blob {digest} is larger than its {limit} bytes")]
    TooLarge { digest: String, limit: u64 },
    #[error("blob {digest} does not match its digest (sha256:{got})")]
    Mismatch { digest: String, got: String },
}

/// One blob of an OCI layout, at most `limit` bytes, checked against `digest`.
fn blob(layout: &Path, digest: &str, limit: u64) -> Result<Vec<u8>, BadBlob> {
    use std::io::Read;
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| BadBlob::NotSha256(format!("{:?}", unpack::shown(digest))))?;
    let path = layout.join("blobs").join("sha256").join(hex);
    let read = |source| BadBlob::Read { digest: digest.to_owned(), source };
    let f = std::fs::File::open(&path).map_err(read)?;
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > limit {
        return Err(BadBlob::TooLarge { digest: digest.to_owned(), limit });
    }
    let got = hex::encode(Sha256::digest(&bytes));
    if got != hex.to_ascii_lowercase() {
        return Err(BadBlob::Mismatch { digest: digest.to_owned(), got });
    }
    Ok(bytes)
}

/// The local release as a candidate of the subscription that takes it.
fn local(config: &Config, o: Opened, subscription: Option<&str>) -> Result<Candidate, Error> {
    let format = if o.cluster_stack.is_some() { Format::ClusterStack } else { Format::Manifests };
    let chart_stack = o.cluster_stack.as_ref().and_then(|_| class_chart_stack(&o.root));
    let fits = |s: &Subscription| {
        s.format == format
            && match (s.families(), &chart_stack) {
                (Some(families), Some(chart)) => families.covers(chart),
                _ => true,
            }
    };
    let what = match &chart_stack {
        Some(stack) => format!("a cluster stack of `{stack}`"),
        None if format == Format::ClusterStack => "a cluster stack".to_owned(),
        None => "a manifests release (no metadata.yaml)".to_owned(),
    };
    let sub = choose(config, subscription, &what, fits)?;
    // The family is the chart's (a line's subscription follows several).
    let family = chart_stack.clone().or_else(|| sub.stack.clone());
    let (tag, version) = match (&o.cluster_stack, &family) {
        (Some((v, file)), Some(stack)) => {
            let tag = format!("{stack}-{}", v.replace('.', "-"));
            let version = Version::from_tag(&tag).ok_or_else(|| Error::Metadata {
                file: file.clone(),
                message: format!("versions.clusterStack: `{v}` is not a cluster-stack version (`v<N>` or `v0-sha.<hash>`)"),
            })?;
            (tag, version)
        }
        (Some(_), None) => return Err(Error::Subscription(format!("subscription `{}` names no `stack`", sub.name))),
        (None, _) => {
            let tag = o
                .tag
                .clone()
                .ok_or_else(|| Error::Subscription(format!("{} has no metadata.yaml naming its version: give --tag", o.given.display())))?;
            let version =
                Version::from_tag(&tag).ok_or_else(|| Error::Subscription(format!("--tag `{tag}` is not a release version (`v1.2.3`)")))?;
            (tag, version)
        }
    };
    let mut subscription = sub.clone();
    // A cluster stack's root is where its metadata.yaml is; a manifests release is the tree
    // the subscription's path is read from, when that path is there.
    if format == Format::ClusterStack || !o.root.join(&sub.path).is_dir() {
        subscription.path = ".".into();
    }
    let commit = o.digest.trim_start_matches("sha256:").to_owned();
    let prepared = PreparedRelease {
        release: Release { source: sub.source.clone(), tag, commit, version },
        tree: o.root,
        fetched: false,
        note: None,
        assets: Vec::new(),
        unverified: None,
        signed_by: None,
        moved_tags_accepted: false,
    };
    Ok(Candidate { subscription, prepared, origin: Origin::Local { path: o.given, digest: o.digest }, _scratch: o.scratch })
}

/// The stack a release's ClusterClass chart is named for (`<stack>-cluster-class-<version>`).
fn class_chart_stack(root: &Path) -> Option<String> {
    std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.find("-cluster-class-").map(|i| name[..i].to_owned())
    })
}

/// The subscription named, or the only one that fits.
fn choose<'a>(
    config: &'a Config,
    named: Option<&str>,
    what: &str,
    fits: impl Fn(&Subscription) -> bool,
) -> Result<&'a Subscription, Error> {
    if let Some(name) = named {
        let sub = config.subscriptions.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = config.subscriptions.iter().map(|s| s.name.as_str()).collect();
            Error::Subscription(format!("no subscription `{name}` (the config has: {})", names.join(", ")))
        })?;
        if !fits(sub) {
            return Err(Error::Subscription(format!("subscription `{name}` cannot take {what}")));
        }
        return Ok(sub);
    }
    let fitting: Vec<&Subscription> = config.subscriptions.iter().filter(|s| fits(s)).collect();
    match fitting.as_slice() {
        [one] => Ok(one),
        [] => Err(Error::Subscription(format!("no subscription takes {what}"))),
        many => {
            let names: Vec<&str> = many.iter().map(|s| s.name.as_str()).collect();
            Err(Error::Subscription(format!(
                "{} subscriptions take {what} ({}): name one with --subscription",
                names.len(),
                names.join(", ")
            )))
        }
    }
}

/// A configured source's tag, polled, fetched and verified as the daemon would.
async fn published(ctx: &Context, config: &Config, source: &str, tag: &str, named: Option<&str>) -> Result<Candidate, Error> {
    if config.source(source).is_none() {
        let names: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        return Err(Error::Subscription(format!("no source `{source}` (the config has: {})", names.join(", "))));
    }
    let version = Version::from_tag(tag).ok_or_else(|| Error::Subscription(format!("tag `{tag}` is not a release version")))?;
    let stack = match &version {
        Version::Scs { stack, .. } => Some(stack.clone()),
        Version::Semver(_) => None,
    };
    let covered = |s: &Subscription| match (s.families(), &stack) {
        (Some(f), Some(family)) => f.covers(family),
        (None, None) => true,
        _ => false,
    };
    let sub = choose(config, named, &format!("tag `{tag}` of source `{source}`"), |s| s.source == source && covered(s))?;
    let poll = ctx.poll(source).await.err().map(|e| e.to_string());
    // A tag the poll refused (a signature not trusted, a tag that moved) is not offered: say why.
    if let Some(message) = ctx.refusal_of(source, tag).await {
        return Err(Error::Unverified { src: source.into(), tag: tag.into(), message });
    }
    let commit = ctx.commit_of(source, tag).await.ok_or_else(|| Error::NoSuchTag { src: source.into(), tag: tag.into(), poll })?;
    let rel = Release { source: source.to_owned(), tag: tag.to_owned(), commit, version };
    let prepared = ctx.prepare(&rel).await.map_err(|error| Error::Prepare { src: source.into(), tag: tag.into(), error })?;
    if let Some(m) = &prepared.unverified {
        return Err(Error::Unverified { src: source.into(), tag: tag.into(), message: m.message.clone() });
    }
    Ok(Candidate { subscription: sub.clone(), prepared, origin: Origin::Source, _scratch: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_argument_is_a_path_or_source_and_tag() {
        assert_eq!(
            ReleaseArg::parse("stacks:docker-ferrol-1-27-v3"),
            ReleaseArg::Tag { source: "stacks".into(), tag: "docker-ferrol-1-27-v3".into() }
        );
        assert_eq!(ReleaseArg::parse("./stacks:v3"), ReleaseArg::Path("./stacks:v3".into()));
        assert_eq!(ReleaseArg::parse("release/v3"), ReleaseArg::Path("release/v3".into()));
        assert_eq!(ReleaseArg::parse("/tmp"), ReleaseArg::Path("/tmp".into()));
    }

    #[test]
    fn an_oci_layout_gives_its_files_checked_against_their_digests() {
        let dir = tempfile::tempdir().expect("dir");
        let layout = dir.path();
        let put = |bytes: &[u8]| {
            let hex = hex::encode(Sha256::digest(bytes));
            std::fs::create_dir_all(layout.join("blobs/sha256")).expect("blobs");
            std::fs::write(layout.join("blobs/sha256").join(&hex), bytes).expect("blob");
            (format!("sha256:{hex}"), bytes.len())
        };
        let (file, size) = put(b"versions: {}\n");
        let (config, _) = put(b"{}");
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.scs.clusterstack","config":{{"mediaType":"application/vnd.oci.empty.v1+json","digest":"{config}","size":2}},"layers":[{{"mediaType":"application/yaml","digest":"{file}","size":{size},"annotations":{{"org.opencontainers.image.title":"metadata.yaml"}}}}]}}"#
        );
        let (m, msize) = put(manifest.as_bytes());
        std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("layout");
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{m}","size":{msize},"annotations":{{"org.opencontainers.image.ref.name":"v3"}}}}]}}"#
        );
        std::fs::write(layout.join("index.json"), index).expect("index");
        let out = tempfile::tempdir().expect("out");
        oci_layout(layout, None, out.path()).expect("opened");
        assert_eq!(std::fs::read_to_string(out.path().join("metadata.yaml")).expect("file"), "versions: {}\n");
        let e = oci_layout(layout, Some("v4"), out.path()).unwrap_err().to_string();
        assert!(e.ends_with("OCI layout: index.json has no image named `v4`"), "{e}");
        // A blob that does not match its digest is refused.
        std::fs::write(layout.join("blobs/sha256").join(file.trim_start_matches("sha256:")), b"versions: []\n").expect("tamper");
        let e = oci_layout(layout, Some("v3"), out.path()).unwrap_err().to_string();
        assert!(e.contains("does not match its digest"), "{e}");
    }

    #[test]
    fn a_release_digest_covers_names_and_contents() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("a"), "1").expect("a");
        let one = digest_of(dir.path()).expect("digest");
        std::fs::write(dir.path().join("a"), "2").expect("a");
        let two = digest_of(dir.path()).expect("digest");
        std::fs::rename(dir.path().join("a"), dir.path().join("b")).expect("mv");
        let three = digest_of(dir.path()).expect("digest");
        assert!(one != two && two != three && one.starts_with("sha256:"), "{one} {two} {three}");
    }
}
