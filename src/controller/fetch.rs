//! The fetch half of a pass: poll each source once, then select and cache each subscription's
//! release — from a Git mirror, from verified GitHub release assets or from the verified layers
//! of an OCI artifact.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use tracing::{error, info, info_span, warn};

use super::{Mismatch, POLL_TIMEOUT, PrepareError, Prepared, PreparedRelease};
use crate::cache::blobs::Blobs;
use crate::cache::index::GithubState;
use crate::cache::{Cache, Index, SourceState};
use crate::config::{Config, GitSourceConfig, GithubSourceConfig, OciSourceConfig, SourceKind, Subscription, tag_matches};
use crate::model::verification::AssetRecord;
use crate::release::{self, Release, short};
use crate::source::github::materialise;
use crate::source::github::{self, GhRelease};
use crate::source::{self, RemoteRefs, TagEvent, git, oci};
use crate::status::Reason;

type Verdicts = BTreeMap<String, Result<crate::verify::Verified, crate::verify::Refusal>>;

/// The cache key of a source: its name plus a hash of where it points.
pub fn source_key(name: &str, kind: &SourceKind) -> String {
    match kind {
        SourceKind::Git(g) => Cache::source_key(name, &g.url),
        SourceKind::Github(g) => Cache::source_key(name, &format!("{}#{}", g.api_url, g.repo)),
        SourceKind::Oci(o) => Cache::source_key(name, &oci_location(o)),
    }
}

/// Where an OCI source points, as its source state records it.
fn oci_location(o: &OciSourceConfig) -> String {
    format!("oci://{}/{}", o.repository.registry, o.repository.name)
}

/// Polls one source and merges what it advertises into the index, logging tag changes.
pub(crate) async fn poll_source(config: &Config, cache: &Cache, index: &mut Index, name: &str) -> source::Result<()> {
    let Some(src) = config.source(name) else { return Ok(()) };
    let key = source_key(name, &src.kind);
    let previous = index.sources.get(&key).cloned().unwrap_or_default();
    let github = index.github.get(&key).cloned().unwrap_or_default();
    let (next, github) = poll(config, cache, name, &previous, github).await?;
    index.sources.insert(key.clone(), next);
    if matches!(src.kind, SourceKind::Github(_)) {
        index.github.insert(key, github);
    }
    Ok(())
}

/// Polls one source: from what it advertised last (`previous`, and for a GitHub source its last
/// listing `github`), what it advertises now after the moved-tag policy and pins. Touches no
/// shared state, so sources are polled side by side and a slow one delays nobody.
///
/// # Errors
/// The source could not be reached or answered nonsense; the caller keeps the previous state.
pub async fn poll(
    config: &Config,
    cache: &Cache,
    name: &str,
    previous: &SourceState,
    mut github: GithubState,
) -> source::Result<(SourceState, GithubState)> {
    let Some(src) = config.source(name) else { return Ok((previous.clone(), github)) };
    let key = source_key(name, &src.kind);
    // Sources with `verify`: the keys as the files say now, and one verdict per tag.
    let trust = match &src.kind {
        SourceKind::Git(g) if g.signatures.is_set() => Some(super::signed::load(name, &g.signatures)?),
        SourceKind::Github(g) if g.signatures.is_set() => Some(super::signed::load(name, &g.signatures)?),
        SourceKind::Oci(o) if o.signatures.is_set() => Some(super::signed::load(name, &o.signatures)?),
        _ => None,
    };
    let (location, refs, allow_moved, verdicts) = match &src.kind {
        SourceKind::Git(g) => {
            let (refs, objects) = poll_git(name, g, cache, &key, previous).await?;
            let verdicts = trust.as_ref().map(|t| super::signed::git_verdicts(&refs.tags, &objects, t, crate::verify::unix_now()));
            (g.url.clone(), refs, g.allow_moved_tags, verdicts)
        }
        SourceKind::Github(g) => {
            let refs = poll_github(name, g, &mut github)
                .await
                .map_err(|source| source::Error::Github { source_name: name.to_owned(), source: Box::new(source) })?;
            let location = format!("{}#{}", g.api_url, g.repo);
            let blobs = Blobs::open(cache.root()).ok();
            let verdicts = trust.as_ref().map(|t| super::signed::github_verdicts(&location, &github.releases, blobs.as_ref(), t));
            (location, refs, g.allow_moved_tags, verdicts)
        }
        SourceKind::Oci(o) => {
            let (refs, verdicts) = poll_oci(name, o, cache, previous, trust.as_ref())
                .await
                .map_err(|source| source::Error::Oci { source_name: name.to_owned(), source: Box::new(source) })?;
            (oci_location(o), refs, o.allow_moved_tags, verdicts)
        }
    };
    let (mut next, events) = source::reconcile(previous, &location, &refs, allow_moved);
    log_events(name, &events);
    if let SourceKind::Git(g) = &src.kind {
        apply_pins(name, g, &mut next);
    }
    if let (Some(trust), Some(verdicts)) = (&trust, verdicts) {
        // A tag the moved-tag policy kept at its old commit was verified at the new one: it
        // does not count for the old commit.
        let verdicts = verdicts
            .into_iter()
            .map(|(tag, v)| {
                let moved = next.tags.get(&tag).is_some_and(|c| refs.tags.get(&tag).is_some_and(|r| r != c));
                let v = if moved {
                    Err(crate::verify::Refusal::Unsigned { what: format!("{tag} moved; the signature found is for its new target") })
                } else {
                    v
                };
                (tag, v)
            })
            .collect();
        super::signed::apply(name, previous, &mut next, trust, verdicts);
    }
    info!(source = name, tags = next.tags.len(), branches = next.heads.len(), "polled source");
    Ok((next, github))
}

async fn poll_git(
    name: &str,
    g: &GitSourceConfig,
    cache: &Cache,
    key: &str,
    previous: &SourceState,
) -> source::Result<(RemoteRefs, BTreeMap<String, Vec<u8>>)> {
    let (url, dir, heads, src_name, auth) = (g.url.clone(), cache.git_dir(key), previous.heads.clone(), name.to_owned(), g.auth.clone());
    let task = tokio::task::spawn_blocking(move || git::fetch_with_auth(&src_name, &url, auth.as_ref(), &dir, &heads));
    let fetched = match tokio::time::timeout(POLL_TIMEOUT, task).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => return Err(source::Error::Task { source_name: name.into(), url: g.url.clone(), source: join }),
        Err(_) => return Err(source::Error::Timeout { source_name: name.into(), seconds: POLL_TIMEOUT.as_secs() }),
    };
    for (branch, old, new) in &fetched.force_pushed {
        warn!(source = name, branch, old = short(old), new = short(new), "branch was force-pushed");
    }
    for tag in &fetched.not_commits {
        warn!(source = name, tag, "tag does not point at a commit; ignored");
    }
    Ok((fetched.refs, fetched.tag_objects))
}

async fn poll_github(name: &str, g: &GithubSourceConfig, state: &mut GithubState) -> github::Result<RemoteRefs> {
    let client = client(g)?;
    let mut pages = state.pages.clone();
    let (releases, _stats) = client.list(&mut pages).await?;
    let mut by_tag = BTreeMap::new();
    for r in releases {
        if g.tag_pattern.as_deref().is_none_or(|p| tag_matches(p, &r.tag)) {
            by_tag.entry(r.tag.clone()).or_insert(r);
        }
    }
    let refs = RemoteRefs { tags: by_tag.iter().map(|(t, r)| (t.clone(), r.revision())).collect(), heads: BTreeMap::new() };
    state.pages = pages;
    state.releases = by_tag;
    tracing::debug!(source = name, releases = refs.tags.len(), "listed GitHub releases");
    Ok(refs)
}

fn oci_client(o: &OciSourceConfig) -> oci::Result<oci::client::Client> {
    let limits = oci::client::Limits {
        page_size: o.page_size,
        request_deadline: o.timeout,
        download_deadline: o.timeout * oci::client::DOWNLOAD_FACTOR,
        ..Default::default()
    };
    oci::client::Client::new(&o.repository, o.insecure, o.ca_file.as_deref(), o.auth.as_ref(), limits)
}

/// Lists an OCI repository's tags and resolves each release tag to its manifest digest (the
/// "commit" of the release: the tree is pulled by that digest, never by the tag). Tags that are
/// not release tags (no version in them, or outside `tagPattern`) are not resolved.
async fn poll_oci(
    name: &str,
    o: &OciSourceConfig,
    cache: &Cache,
    previous: &SourceState,
    trust: Option<&crate::verify::Trust>,
) -> oci::Result<(RemoteRefs, Option<Verdicts>)> {
    use futures_util::stream::{self, StreamExt, TryStreamExt};
    let client = oci_client(o)?;
    let bounded = async {
        let (all, pages) = client.tags().await?;
        let wanted: Vec<String> = all
            .iter()
            .filter(|t| crate::model::version::Version::from_tag(t).is_some())
            .filter(|t| o.tag_pattern.as_deref().is_none_or(|p| tag_matches(p, t)))
            .cloned()
            .collect();
        let all: std::collections::BTreeSet<String> = all.into_iter().collect();
        let client = &client;
        let resolved: Vec<(String, String)> = stream::iter(wanted)
            .map(|tag| async move { client.resolve(&tag).await.map(|d| (tag, d.hex().to_owned())) })
            .buffer_unordered(oci::client::RESOLVE_CONCURRENCY)
            .try_collect()
            .await?;
        let resolved: BTreeMap<String, String> = resolved.into_iter().collect();
        let verdicts = match trust {
            Some(trust) => {
                let blobs = Blobs::open(cache.root()).map_err(|e| oci::Error::Tags {
                    repo: oci_location(o),
                    message: format!("cannot open the blob store for signatures: {e}"),
                })?;
                Some(super::signed::oci_verdicts(client, &oci_location(o), &blobs, &resolved, &all, trust).await)
            }
            None => None,
        };
        Ok::<_, oci::Error>((resolved, pages, verdicts))
    };
    let (resolved, pages, verdicts) = match tokio::time::timeout(POLL_TIMEOUT, bounded).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(oci::Error::Tags {
                repo: oci_location(o),
                message: format!("the poll did not finish within {}s", POLL_TIMEOUT.as_secs()),
            });
        }
    };
    tracing::debug!(source = name, tags = resolved.len(), pages, known = previous.tags.len(), "listed OCI tags");
    Ok((RemoteRefs { tags: resolved, heads: BTreeMap::new() }, verdicts))
}

fn client(g: &GithubSourceConfig) -> github::Result<github::Client> {
    let token = match &g.token {
        Some(t) => Some(t.read().map_err(|source| github::Error::Token { repo: g.repo.clone(), source })?),
        None => None,
    };
    github::Client::new(&g.api_url, &g.repo, token)
}

fn log_events(name: &str, events: &[TagEvent]) {
    for event in events {
        match event {
            TagEvent::New { tag, commit } => info!(source = name, tag, commit = short(commit), "new tag"),
            TagEvent::Deleted { tag, commit } => warn!(source = name, tag, commit = short(commit), "tag was deleted upstream"),
            TagEvent::Moved { tag, old, new, accepted: true } => {
                warn!(source = name, tag, old = short(old), new = short(new), "tag moved; accepted (allowMovedTags)");
            }
            TagEvent::Moved { tag, old, new, accepted: false } => error!(
                source = name,
                tag,
                old = short(old),
                new = short(new),
                "tag moved to another commit; refused, still using the old commit (set allowMovedTags to accept)"
            ),
        }
    }
}

/// A pinned tag pointing anywhere but its pin is not a release.
fn apply_pins(name: &str, g: &GitSourceConfig, state: &mut SourceState) {
    for (tag, pin) in &g.pins {
        if let Some(commit) = state.tags.get(tag)
            && commit != pin
        {
            error!(source = name, tag, pinned = short(pin), actual = short(commit), "tag does not point at its pinned commit; refused");
            state.refused.insert(tag.clone(), commit.clone());
            state.tags.remove(tag);
        }
    }
}

/// One lock per release, so concurrent requests for the same release share one download: the
/// second waits, then finds the tree in the cache.
fn release_lock(id: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut map = LOCKS.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    map.entry(id.to_owned()).or_default().clone()
}

/// Selects and caches a subscription's release. Takes and returns the index so the blocking
/// materialisation can own it.
pub async fn prepare(config: &Config, cache: &Cache, index: Index, sub: &Subscription) -> (Prepared, Index) {
    let mut prepared = Prepared {
        subscription: sub.name.clone(),
        source: sub.source.clone(),
        outcome: Err(Arc::new(PrepareError::UnknownSource(sub.source.clone()))),
    };
    let Some(src) = config.source(&sub.source) else {
        return (prepared, index);
    };
    let key = source_key(&src.name, &src.kind);
    let mut index = index;
    // A GitHub release refused for its asset signatures leaves the tag set and the next newest is
    // tried; a bounded number of times (each try downloads a release).
    for _ in 0..MAX_SIGNATURE_RETRIES {
        let mut tags = index.sources.get(&key).map(|s| s.tags.clone()).unwrap_or_default();
        if matches!(src.kind, SourceKind::Github(_)) && !sub.prereleases {
            let releases = index.github.get(&key).map(|g| &g.releases);
            tags.retain(|t, _| releases.and_then(|r| r.get(t)).is_none_or(|r| !r.prerelease));
        }
        let adopted = index.adopted.get(&sub.name).map(|a| release::Adopted { source: &a.source, tag: &a.tag, commit: &a.commit });
        let selection = match release::select(&sub.wanted(), &tags, adopted) {
            Ok(s) => s,
            Err(e) => {
                warn!("{e}");
                prepared.outcome = Err(Arc::new(PrepareError::Select(e)));
                return (prepared, index);
            }
        };
        if let Some(note) = &selection.note {
            let rel = &selection.release;
            info_span!("release", source = %rel.source, tag = %rel.tag, commit = %short(&rel.commit)).in_scope(|| info!("{note}"));
        }
        let claimed = index.sources.get(&key).and_then(|s| s.refused.get(&selection.release.tag)).cloned();
        let (signer, refused) = signature(index.sources.get(&key), &selection.release);
        if let Some(m) = refused {
            prepared.outcome = Ok(held(cache, &key, &selection.release, m));
            return (prepared, index);
        }
        let (next, outcome) = materialise(config, cache, index, &selection.release).await;
        index = next;
        if let (Err(_), SourceKind::Github(g)) = (&outcome, &src.kind)
            && let Some((refusal, trust)) = super::signed::github_refusal(g, &selection.release.tag, &selection.release.commit)
            && index.sources.get(&key).is_some_and(|s| s.tags.contains_key(&selection.release.tag))
        {
            if let Some(state) = index.sources.get_mut(&key) {
                super::signed::refuse(&src.name, state, &selection.release.tag, &refusal, &trust);
            }
            continue;
        }
        prepared.outcome = outcome
            .map(|p| {
                let unverified = mismatch(&src.name, &src.kind, &p.release, claimed.as_deref(), &p.assets);
                PreparedRelease { note: selection.note, unverified, signed_by: p.signed_by.or(signer), ..p }
            })
            .map_err(Arc::new);
        return (prepared, index);
    }
    prepared.outcome = Err(Arc::new(PrepareError::SignatureRetries(MAX_SIGNATURE_RETRIES)));
    (prepared, index)
}

/// How many releases one selection tries when their asset signatures are refused.
const MAX_SIGNATURE_RETRIES: usize = 8;

/// Whether a release accepted earlier still verifies, now: against the config's pins (a Git
/// tag's commit, a GitHub asset's digest) and against what the source claims for its tag
/// (`claimed`: the commit or revision a moved tag now points at, which was refused). Pure.
/// `None` when it verifies; otherwise the reason (`PinMismatch`, `TagRefused`) and a message
/// naming the tag, the pin and both digests.
pub fn mismatch(source: &str, kind: &SourceKind, rel: &Release, claimed: Option<&str>, assets: &[AssetRecord]) -> Option<Mismatch> {
    let stays = "it is not applied again and what is in place stays until a release that verifies is available";
    match kind {
        SourceKind::Git(g) => {
            if let Some(pin) = g.pins.get(&rel.tag).filter(|pin| **pin != rel.commit) {
                return Some(Mismatch {
                    reason: Reason::PinMismatch,
                    message: format!(
                        "tag {} is pinned to commit {pin} (git.pins of source {source}) but the release in use is commit {}; {stays} (fix the pin, or publish a tag at the pinned commit)",
                        rel.tag, rel.commit
                    ),
                });
            }
        }
        SourceKind::Github(g) => {
            for a in assets {
                let key = format!("{}/{}", rel.tag, a.name);
                let Some(pin) = g.digests.get(&key) else { continue };
                if crate::model::Sha256Digest::parse(&a.digest).as_ref() != Some(pin) {
                    return Some(Mismatch {
                        reason: Reason::PinMismatch,
                        message: format!(
                            "asset {} of release {} is pinned to {pin} (github.digests `{key}` of source {source}) but the release in use has {}; {stays} (fix the pin, or publish a release whose asset matches it)",
                            a.name, rel.tag, a.digest
                        ),
                    });
                }
            }
        }
        SourceKind::Oci(_) => {}
    }
    let claimed = claimed.filter(|c| *c != rel.commit)?;
    Some(Mismatch {
        reason: Reason::TagRefused,
        message: format!(
            "tag {} now points at {} in source {source}; refused, {} stays applied (set allowMovedTags, or fix the pin, to accept it)",
            rel.tag,
            short(claimed),
            short(&rel.commit)
        ),
    })
}

/// What the last poll said about the signature of `rel` (sources with `verify`): who signed it,
/// and — when it is refused now (a key rotated out, a tag re-signed badly) while it is still the
/// release selected (in use: never downgraded silently) — a `SignatureInvalid` mismatch: it is
/// not applied again and what is in place stays. Pure.
pub fn signature(state: Option<&SourceState>, rel: &Release) -> (Option<String>, Option<Mismatch>) {
    let Some(state) = state else { return (None, None) };
    let signer = state.signers.get(&rel.tag).filter(|s| *s != "pending").cloned();
    let refused = state.unsigned.get(&rel.tag).filter(|r| r.commit == rel.commit).map(|r| Mismatch {
        reason: Reason::SignatureInvalid,
        message: format!(
            "{}; the release in use is not applied again and what is in place stays until a signed release is available",
            r.message
        ),
    });
    (signer, refused)
}

/// The release in use whose signature is refused now: held — never materialised (whatever its
/// kind: a GitHub release's assets would be refused again), never applied; what is in place
/// stays and the status says why (`m`). The tree path is where it would be; nothing reads it.
pub fn held(cache: &Cache, key: &str, rel: &Release, m: Mismatch) -> PreparedRelease {
    PreparedRelease {
        release: rel.clone(),
        tree: cache.release_path(key, &rel.tag, &rel.commit),
        fetched: false,
        note: None,
        assets: Vec::new(),
        unverified: Some(m),
        signed_by: None,
    }
}

/// Puts `rel` in the cache (or finds it there, verified) and says where its tree is. One
/// download per release at a time: concurrent callers for the same release wait for the first.
/// Takes and returns the index: it reads the source's last listing from it and records the tree.
pub async fn materialise(config: &Config, cache: &Cache, index: Index, rel: &Release) -> (Index, Result<PreparedRelease, PrepareError>) {
    let Some(src) = config.source(&rel.source) else {
        return (index, Err(PrepareError::UnknownSource(rel.source.clone())));
    };
    let key = source_key(&src.name, &src.kind);
    let span = info_span!("release", source = %rel.source, tag = %rel.tag, commit = %short(&rel.commit));
    let lock = release_lock(&crate::cache::ReleaseEntry::id(&key, &rel.tag, &rel.commit));
    let _guard = lock.lock().await;
    let (index, result) = match &src.kind {
        SourceKind::Git(_) => materialise_git(cache, index, &key, rel).await,
        SourceKind::Github(g) => materialise_github(cache, index, &key, rel, g).await,
        SourceKind::Oci(o) => materialise_oci(cache, index, &key, rel, o).await,
    };
    let outcome = match result {
        Ok((tree, fetched, assets, signed_by)) => {
            // Once per download at INFO; a release found in the cache (every Cluster's
            // reconcile asks) at DEBUG.
            if fetched {
                span.in_scope(|| info!(fetched, path = %tree.display(), "release ready"));
            } else {
                span.in_scope(|| tracing::debug!(fetched, path = %tree.display(), "release ready"));
            }
            let unverified = mismatch(&src.name, &src.kind, rel, None, &assets);
            Ok(PreparedRelease { release: rel.clone(), tree, fetched, note: None, assets, unverified, signed_by })
        }
        Err(e) => {
            span.in_scope(|| error!(error = %e, "cannot cache release; the release in use stays"));
            Err(e)
        }
    };
    (index, outcome)
}

/// The tree, whether this call wrote it, the assets, and who signed them (GitHub sources with
/// `verify` keys; Git and OCI releases were verified when polled).
type Materialised = Result<(std::path::PathBuf, bool, Vec<AssetRecord>, Option<String>), PrepareError>;

async fn materialise_git(cache: &Cache, mut index: Index, key: &str, rel: &Release) -> (Index, Materialised) {
    let (cache, git_dir, key, commit, source_name, tag) =
        (cache.clone(), cache.git_dir(key), key.to_owned(), rel.commit.clone(), rel.source.clone(), rel.tag.clone());
    let task = tokio::task::spawn_blocking(move || {
        let result = cache.release(&mut index, &source_name, &key, &tag, &commit, |tmp| git::materialise(&git_dir, &commit, tmp));
        (index, result.map(|(p, f)| (p, f, Vec::new(), None)).map_err(PrepareError::Cache))
    });
    match task.await {
        Ok(pair) => pair,
        Err(join) => (Index::default(), Err(PrepareError::Task(join))),
    }
}

async fn materialise_github(cache: &Cache, index: Index, key: &str, rel: &Release, g: &GithubSourceConfig) -> (Index, Materialised) {
    let location = format!("{}#{}", g.api_url, g.repo);
    // Signatures are checked on every use, a cached tree included: a key rotated out since the
    // tree was cached no longer vouches for it.
    let check = |records: &[AssetRecord], blobs: &Blobs| -> Result<Option<String>, PrepareError> {
        if !g.signatures.is_set() {
            return Ok(None);
        }
        let trust = g.signatures.load().map_err(PrepareError::TrustFiles)?;
        super::signed::github_assets(&location, &rel.tag, &rel.commit, records, blobs, &trust)
            .map(|v| Some(v.signer))
            .map_err(|r| PrepareError::Signature(super::signed::refusal_message(&rel.source, &rel.tag, &r, &trust)))
    };
    materialise_blobs(
        cache,
        index,
        key,
        rel,
        options(g).unpack,
        async |index: &Index, blobs: &Blobs| {
            let Some(release) = index.github.get(key).and_then(|s| s.releases.get(&rel.tag)).cloned() else {
                return Err(PrepareError::NotListed { tag: rel.tag.clone(), repo: g.repo.clone() });
            };
            if release.revision() != rel.commit {
                return Err(PrepareError::AssetsMoved { tag: rel.tag.clone() });
            }
            download(g, blobs, &release).await
        },
        check,
    )
    .await
}

async fn materialise_oci(cache: &Cache, index: Index, key: &str, rel: &Release, o: &OciSourceConfig) -> (Index, Materialised) {
    let unpack = crate::cache::unpack::Limits { max_bytes: o.max_unpacked_bytes, ..Default::default() };
    materialise_blobs(
        cache,
        index,
        key,
        rel,
        unpack,
        async |_: &Index, blobs: &Blobs| pull_oci(o, blobs, rel).await.map_err(PrepareError::Oci),
        |_: &[AssetRecord], _: &Blobs| Ok(None),
    )
    .await
}

/// The release tree of a source whose files are verified blobs (GitHub assets, OCI layers). A
/// verified tree of exactly this revision is used as it is — a restart asks the source nothing
/// for it, and a release deleted upstream stays usable; otherwise `bring` puts the release's
/// blobs into the store (verified) and the tree is filled from them.
async fn materialise_blobs(
    cache: &Cache,
    index: Index,
    key: &str,
    rel: &Release,
    unpack: crate::cache::unpack::Limits,
    bring: impl AsyncFnOnce(&Index, &Blobs) -> Result<Vec<AssetRecord>, PrepareError>,
    check: impl FnOnce(&[AssetRecord], &Blobs) -> Result<Option<String>, PrepareError>,
) -> (Index, Materialised) {
    let blobs = match Blobs::open(cache.root()) {
        Ok(b) => b,
        Err(e) => return (index, Err(PrepareError::Blobs(e))),
    };
    let tree = cache.release_path(key, &rel.tag, &rel.commit);
    let cached = if tree.is_dir() { materialise::verify_cached(&tree, &blobs) } else { None };
    let records = match cached {
        Some(records) => records,
        None => {
            if tree.is_dir() {
                let _ = std::fs::remove_dir_all(&tree);
            }
            match bring(&index, &blobs).await {
                Ok(r) => r,
                Err(e) => return (index, Err(e)),
            }
        }
    };
    let signer = match check(&records, &blobs) {
        Ok(s) => s,
        Err(e) => return (index, Err(e)),
    };
    let (cache, key, rel) = (cache.clone(), key.to_owned(), rel.clone());
    let task = tokio::task::spawn_blocking(move || {
        let mut index = index;
        let fill = |tmp: &std::path::Path| materialise::fill(&blobs, &records, tmp, unpack);
        let result = cache.release(&mut index, &rel.source, &key, &rel.tag, &rel.commit, fill);
        (index, result.map(|(p, f)| (p, f, records.clone(), signer)).map_err(PrepareError::Cache))
    });
    match task.await {
        Ok(pair) => pair,
        Err(join) => (Index::default(), Err(PrepareError::Task(join))),
    }
}

/// Fetches the manifest of `rel` by its pinned digest (verified), then every layer the blob
/// store lacks (each verified while streaming), within the size limits.
async fn pull_oci(o: &OciSourceConfig, blobs: &Blobs, rel: &Release) -> oci::Result<Vec<AssetRecord>> {
    let repo = oci_location(o);
    let manifest_err = |message: String| oci::Error::Manifest { repo: repo.clone(), reference: format!("release {}", rel.tag), message };
    let digest =
        crate::model::Sha256Digest::parse(&rel.commit).ok_or_else(|| manifest_err(format!("`{}` is not a manifest digest", rel.commit)))?;
    let client = oci_client(o)?;
    let bytes = client.manifest(&rel.tag, &digest).await?;
    let artifact = oci::parse_manifest(&bytes).map_err(|e| oci::Error::Artifact {
        repo: repo.clone(),
        reference: format!("release {}", rel.tag),
        source: Box::new(e),
    })?;
    let declared: u64 = artifact.layers.iter().map(|l| l.size).fold(0, u64::saturating_add);
    if declared > o.max_release_bytes {
        return Err(manifest_err(format!("the layers declare {declared} bytes, more than maxReleaseSize {}", o.max_release_bytes)));
    }
    info!(source = %rel.source, tag = %rel.tag, layers = artifact.layers.len(), artifact_type = artifact.artifact_type.as_deref().unwrap_or("-"), "pulling OCI artifact");
    let mut records = Vec::with_capacity(artifact.layers.len());
    let mut received: u64 = 0;
    for layer in &artifact.layers {
        let cached = blobs.verify(&layer.digest).unwrap_or(false);
        if !cached {
            let left = o.max_release_bytes.saturating_sub(received);
            client.blob(&rel.tag, &layer.title, &layer.digest, blobs, o.max_asset_bytes.min(left)).await?;
        }
        let size = std::fs::metadata(blobs.path(&layer.digest)).map(|m| m.len()).unwrap_or(layer.size);
        received = received.saturating_add(size);
        records.push(AssetRecord {
            name: layer.title.clone(),
            digest: layer.digest.to_string(),
            verified_by: crate::model::verification::VerifiedBy::Registry,
            size,
        });
    }
    if received > o.max_release_bytes {
        return Err(manifest_err(format!("the layers hold {received} bytes, more than maxReleaseSize {}", o.max_release_bytes)));
    }
    Ok(records)
}

async fn download(g: &GithubSourceConfig, blobs: &Blobs, release: &GhRelease) -> Result<Vec<AssetRecord>, PrepareError> {
    let client = client(g).map_err(PrepareError::Github)?;
    materialise::download_all(&client, blobs, release, &options(g)).await.map_err(PrepareError::Download)
}

fn options(g: &GithubSourceConfig) -> materialise::Options {
    materialise::Options {
        verify: g.verify,
        pins: g.digests.clone(),
        max_asset_bytes: g.max_asset_bytes,
        max_release_bytes: g.max_release_bytes,
        unpack: crate::cache::unpack::Limits { max_bytes: g.max_unpacked_bytes, ..Default::default() },
    }
}

/// The cached releases garbage collection must keep: for every subscription, the release it
/// adopted (in use) plus the `cache.keepReleases` newest cached releases it could select.
pub fn releases_to_keep(config: &Config, index: &Index) -> std::collections::BTreeSet<String> {
    use crate::model::version::Version;
    let mut keep = std::collections::BTreeSet::new();
    for sub in &config.subscriptions {
        let Some(src) = config.source(&sub.source) else { continue };
        let key = source_key(&src.name, &src.kind);
        if let Some(a) = index.adopted.get(&sub.name) {
            keep.insert(crate::cache::ReleaseEntry::id(&key, &a.tag, &a.commit));
        }
        let mut mine: Vec<(Version, String)> = index
            .releases
            .iter()
            .filter(|(id, _)| id.starts_with(&format!("{key}/")))
            .filter_map(|(id, e)| Version::from_tag(&e.tag).map(|v| (v, id.clone())))
            .filter(|(v, _)| match (&sub.stack, v) {
                (Some(stack), Version::Scs { stack: s, .. }) => s == stack,
                (None, Version::Semver(_)) => true,
                _ => false,
            })
            .collect();
        mine.sort_by(|a, b| b.0.compare(&a.0).unwrap_or(std::cmp::Ordering::Equal).then_with(|| b.1.cmp(&a.1)));
        keep.extend(mine.into_iter().take(config.cache.keep_releases).map(|(_, id)| id));
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GitSourceConfig;
    use crate::model::source::Verify;
    use crate::model::verification::VerifiedBy;

    fn rel(tag: &str, commit: &str) -> Release {
        Release {
            source: "s".into(),
            tag: tag.into(),
            commit: commit.into(),
            version: crate::model::version::Version::from_tag(tag).unwrap(),
        }
    }

    fn git(pins: &[(&str, &str)]) -> SourceKind {
        SourceKind::Git(GitSourceConfig {
            url: "file:///r".into(),
            allow_moved_tags: false,
            pins: pins.iter().map(|(t, c)| ((*t).to_owned(), (*c).to_owned())).collect(),
            auth: None,
            signatures: Default::default(),
        })
    }

    fn github(pins: &[(&str, &str)]) -> SourceKind {
        SourceKind::Github(GithubSourceConfig {
            repo: "acme/stacks".into(),
            api_url: "http://127.0.0.1/".into(),
            token: None,
            tag_pattern: None,
            verify: Verify::Required,
            digests: pins.iter().map(|(k, d)| ((*k).to_owned(), crate::model::Sha256Digest::parse(d).unwrap())).collect(),
            max_asset_bytes: 0,
            max_release_bytes: 0,
            max_unpacked_bytes: 0,
            allow_moved_tags: false,
            signatures: Default::default(),
        })
    }

    fn asset(name: &str, digest: &str) -> AssetRecord {
        AssetRecord { name: name.into(), digest: format!("sha256:{digest}"), verified_by: VerifiedBy::Published, size: 1 }
    }

    #[test]
    fn a_release_in_use_that_no_longer_verifies_says_which_pin_and_both_digests() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let (x, y) = ("1".repeat(64), "2".repeat(64));
        let assets = [asset("m.tar.gz", &x)];
        let (pin_names, digest_names) =
            ([b.as_str(), a.as_str(), "git.pins", "v1.0.0"], [x.as_str(), y.as_str(), "github.digests", "m.tar.gz"]);
        // (source, release commit, what the source now claims, assets, reason, the message names)
        type Case<'a> = (SourceKind, &'a str, Option<&'a str>, &'a [AssetRecord], Option<Reason>, &'a [&'a str]);
        let table: Vec<Case> = vec![
            (git(&[]), &a, None, &[], None, &[]),
            (git(&[("v1.0.0", &a)]), &a, None, &[], None, &[]),
            (git(&[("v2.0.0", &b)]), &a, None, &[], None, &[]),
            (git(&[("v1.0.0", &b)]), &a, Some(&a), &[], Some(Reason::PinMismatch), &pin_names),
            (git(&[]), &a, Some(&b), &[], Some(Reason::TagRefused), &["bbbbbbbbbbbb", "aaaaaaaaaaaa", "allowMovedTags"]),
            (git(&[]), &a, Some(&a), &[], None, &[]),
            (github(&[("v1.0.0/m.tar.gz", &x)]), &a, None, &assets, None, &[]),
            (github(&[("v1.0.0/other", &y)]), &a, None, &assets, None, &[]),
            (github(&[("v1.0.0/m.tar.gz", &y)]), &a, None, &assets, Some(Reason::PinMismatch), &digest_names),
            (github(&[]), &a, Some(&b), &assets, Some(Reason::TagRefused), &["bbbbbbbbbbbb"]),
        ];
        for (kind, commit, claimed, assets, reason, names) in table {
            let got = mismatch("s", &kind, &rel("v1.0.0", commit), claimed, assets);
            assert_eq!(got.as_ref().map(|m| m.reason), reason, "{got:?}");
            let message = got.map(|m| m.message).unwrap_or_default();
            for name in names {
                assert!(message.contains(name), "{message} should name {name}");
            }
        }
    }
}
