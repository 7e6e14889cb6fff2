//! Release sources: where the scheduler's polls go. Each kind of source (`git/`, `github/`,
//! `oci/`) implements [`Source`]: what it advertises, how a release's tree gets into the cache,
//! which webhook deliveries concern it. [`reconcile`] turns what a source advertises into the
//! accepted tag set, applying the moved/deleted-tag policy; [`signed`] the signature policy.

pub mod git;
pub mod github;
pub mod oci;
pub mod signed;
mod trees;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use crate::cache::{Cache, Index, SourceState};
use crate::config::SourceKind;
use crate::model::sync::MutexExt;
use crate::model::verification::AssetRecord;
use crate::release::Release;
use verify::{Refusal, Trust, TrustFiles, Verified};

/// The kind of a configured source: the one place a [`SourceKind`] is matched. A new kind of
/// source is its folder here, its arm in `SourceKind` (with its parser in `config/sources.rs`)
/// and its line below.
pub fn of(kind: &SourceKind) -> &dyn Source {
    match kind {
        SourceKind::Git(g) => g,
        SourceKind::Github(g) => g,
        SourceKind::Oci(o) => o,
    }
}

/// A boxed future, as a trait object's async methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one kind of release source does for the controller. Implementations hold the source's
/// config; everything they need besides is passed in. None keeps state of its own between calls
/// except through [`SourceState`] (persisted in the cache index; `own` is theirs alone), so a
/// restart, or a cache rebuilt from nothing, asks the remote again and loses nothing else.
pub trait Source: Send + Sync {
    /// Where the source points (a URL, `api#owner/repo`, `oci://registry/name`): its state's
    /// `url` and, with the source's name, its cache key ([`key`]).
    fn location(&self) -> String;

    /// Whether a tag that moved is accepted at its new target (`allowMovedTags`).
    fn allow_moved_tags(&self) -> bool;

    /// The trusted keys of `verify:`; not set when the source does not check signatures.
    fn trust_files(&self) -> &TrustFiles;

    /// What the source advertises now: its release tags and what each names, the verdict on
    /// each tag's signature when `trust` is given, and its own state to persist. Bounded in
    /// time. Touches no shared state: sources are polled side by side.
    ///
    /// # Errors
    /// The source cannot be reached or answered nonsense; the caller keeps `previous`.
    fn poll<'a>(&'a self, at: At<'a>, previous: &'a SourceState, trust: Option<&'a Trust>) -> BoxFuture<'a, Result<Polled>>;

    /// Takes out of the accepted tags what the config pins elsewhere (Git's `pins`), logging
    /// each. Most kinds pin nothing at the tag level.
    fn refuse_unpinned(&self, _source: &str, _state: &mut SourceState) {}

    /// Whether a release accepted earlier breaks one of the config's pins now (a tag's commit,
    /// an asset's digest): the message names the tag, the pin and both values. Pure.
    fn pin_mismatch(&self, _source: &str, _rel: &Release, _assets: &[AssetRecord]) -> Option<String> {
        None
    }

    /// Puts `rel`'s tree into the cache, verified, or finds it there (verified again), and
    /// records it in `index` (a scratch index the caller merges). `state` is the source's last
    /// poll. Callers serialise calls per release.
    ///
    /// # Errors
    /// Naming the source, tag and asset; `is_transient` tells a passing fault from a refusal.
    fn materialise<'a>(
        &'a self,
        at: At<'a>,
        state: &'a SourceState,
        index: Index,
        rel: &'a Release,
    ) -> BoxFuture<'a, (Index, Result<Materialised, ReleaseError>)>;

    /// After `materialise` failed: the signature refusal that takes `rel`'s tag out of the
    /// accepted set (a GitHub release whose asset signatures do not verify), with the keys
    /// it was checked against.
    fn refusal(&self, _rel: &Release) -> Option<(Refusal, Trust)> {
        None
    }

    /// Whether a push that a webhook delivery reports concerns this source.
    fn concerns(&self, _push: &Push<'_>) -> bool {
        false
    }
}

/// A poll that takes longer than this is abandoned (and retried at the next poll).
pub const POLL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// What a message about a release in use that no longer verifies adds: nothing more is done.
pub const STAYS: &str = "it is not applied again and what is in place stays until a release that verifies is available";

/// A source's cache key: its name plus a hash of where it points.
pub fn key(name: &str, source: &dyn Source) -> String {
    Cache::source_key(name, &source.location())
}

/// Where a call works: the source's name (for messages), its cache key and the cache.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub name: &'a str,
    pub key: &'a str,
    pub cache: &'a Cache,
}

/// What a poll found.
#[derive(Debug, Default)]
pub struct Polled {
    /// Tags (and branches) as the remote advertises them, each naming a commit, a manifest
    /// digest or an asset revision.
    pub refs: RemoteRefs,
    /// With `trust`: one verdict per tag it could judge (a tag without one is refused).
    pub verdicts: Option<BTreeMap<String, Result<Verified, Refusal>>>,
    /// Tags the source marks as pre-releases (left out unless a subscription allows them).
    pub prereleases: BTreeSet<String>,
    /// The source kind's own state, persisted with its tags (a GitHub listing's pages).
    pub own: Option<serde_json::Value>,
}

/// A release tree in the cache.
#[derive(Debug)]
pub struct Materialised {
    pub tree: PathBuf,
    /// Whether this call wrote it (false: it was there, verified).
    pub fetched: bool,
    /// Each asset's digest and how it was verified (sources whose releases are blobs).
    pub assets: Vec<AssetRecord>,
    /// Who signed the release, when it is checked at materialisation (GitHub assets).
    pub signed_by: Option<String>,
}

/// A push, as a webhook delivery names its repository.
#[derive(Debug)]
pub struct Push<'a> {
    /// `owner/name`, as GitHub spells it.
    pub full_name: &'a str,
    /// The repository's clone URLs, each reduced by [`normalise_url`].
    pub urls: &'a [String],
}

/// Why a release could not be put into the cache, named after the step, with the source, tag
/// and asset.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// A GitHub release the last listing does not have, and not cached either.
    #[error("release {tag} is not in the last listing of {repo} and not in the cache")]
    NotListed { tag: String, repo: String },
    /// A GitHub release whose assets changed since its tag was accepted.
    #[error("release {tag}: assets changed since they were accepted (moved tag); refusing")]
    AssetsMoved { tag: String },
    /// A release's asset signatures do not verify against the source's keys.
    #[error("{0}")]
    Signature(String),
    /// The source's trusted key files cannot be read or parsed.
    #[error("{0}")]
    TrustFiles(#[source] verify::KeyFileError),
    /// Writing the release tree into the cache (Git releases: reading it from the mirror).
    #[error("{0}")]
    Cache(#[source] crate::cache::Error),
    /// Downloading and verifying a GitHub release's assets.
    #[error("{0}")]
    Download(#[source] github::materialise::DownloadError),
    #[error("{0}")]
    Github(#[source] github::Error),
    #[error("{0}")]
    Oci(#[source] oci::Error),
    #[error("cannot open blob store: {0}")]
    Blobs(#[source] std::io::Error),
    #[error("materialise task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

impl ReleaseError {
    /// Whether trying again soon may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        match self {
            ReleaseError::NotListed { .. }
            | ReleaseError::AssetsMoved { .. }
            | ReleaseError::Signature(_)
            | ReleaseError::TrustFiles(_) => false,
            ReleaseError::Blobs(_) | ReleaseError::Task(_) => true,
            ReleaseError::Cache(e) => e.is_transient(),
            ReleaseError::Download(e) => e.is_transient(),
            ReleaseError::Github(e) => e.is_transient(),
            ReleaseError::Oci(e) => e.is_transient(),
        }
    }

    /// Whether the release's signatures were refused.
    pub fn is_signature(&self) -> bool {
        matches!(self, ReleaseError::Signature(_))
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ReleaseError::NotListed { .. } => "ReleaseNotListed",
            ReleaseError::AssetsMoved { .. } => "AssetsMoved",
            ReleaseError::Signature(_) => "SignatureInvalid",
            ReleaseError::TrustFiles(_) => "TrustFiles",
            ReleaseError::Cache(e) => e.reason(),
            ReleaseError::Download(e) => e.reason(),
            ReleaseError::Github(e) => e.reason(),
            ReleaseError::Oci(e) => e.reason(),
            ReleaseError::Blobs(_) => "BlobStore",
            ReleaseError::Task(_) => "Task",
        }
    }
}

/// A clone URL reduced to `host/path`: scheme, user, port, a trailing `/` and `.git` dropped,
/// lower-cased (GitHub, GitLab and Gitea treat names case-insensitively). `git@host:o/r.git`,
/// `ssh://git@host/o/r`, `https://host/o/r.git` and `git://host/o/r` are the same repository.
pub fn normalise_url(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_owned(),
        // scp-like `user@host:path`.
        None => match url.split_once(':') {
            Some((host, path)) if !host.contains('/') => format!("{host}/{path}"),
            _ => url.to_owned(),
        },
    };
    let (authority, path) = rest.split_once('/').unwrap_or((&rest, ""));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path).trim_end_matches('/');
    format!("{host}/{path}").to_ascii_lowercase()
}

/// Polls one source: from what it advertised last (`previous`), what it advertises now after
/// the moved-tag policy, the config's pins and, with `verify` keys, the signature policy. Tag
/// changes are logged. Touches no shared state, so sources are polled side by side and a slow
/// one delays nobody.
///
/// # Errors
/// The source could not be reached, answered nonsense, or its keys cannot be read; the caller
/// keeps `previous`.
pub async fn poll(source: &dyn Source, at: At<'_>, previous: &SourceState) -> Result<SourceState> {
    let trust = if source.trust_files().is_set() { Some(signed::load(at.name, source.trust_files())?) } else { None };
    let polled = source.poll(at, previous, trust.as_ref()).await?;
    let (mut next, events) = reconcile(previous, &source.location(), &polled.refs, source.allow_moved_tags());
    log_events(at.name, &events);
    source.refuse_unpinned(at.name, &mut next);
    if let (Some(trust), Some(verdicts)) = (&trust, polled.verdicts) {
        // A tag the moved-tag policy kept at its old commit was verified at the new one: it
        // does not count for the old commit.
        let verdicts = verdicts
            .into_iter()
            .map(|(tag, v)| {
                let moved = next.tags.get(&tag).is_some_and(|c| polled.refs.tags.get(&tag).is_some_and(|r| r != c));
                let v = if moved {
                    Err(Refusal::Unsigned { what: format!("{tag} moved; the signature found is for its new target") })
                } else {
                    v
                };
                (tag, v)
            })
            .collect();
        signed::apply(at.name, previous, &mut next, trust, verdicts);
    }
    next.prereleases = polled.prereleases;
    next.own = polled.own.map(std::sync::Arc::new);
    tracing::info!(source = at.name, tags = next.tags.len(), branches = next.heads.len(), "polled source");
    Ok(next)
}

/// Puts `rel` into the cache (or finds it there, verified), logging once per download. One
/// download per release at a time in the process: concurrent callers for the same release wait
/// for the first, then find its tree. Never while the cache is cleaned up ([`cleaning`]). `state` is the source's last poll; the release is recorded
/// in `index`, which is handed back.
pub async fn materialise(
    source: &dyn Source,
    at: At<'_>,
    state: &SourceState,
    index: Index,
    rel: &Release,
) -> (Index, Result<Materialised, ReleaseError>) {
    let span = tracing::info_span!("release", source = %rel.source, tag = %rel.tag, commit = %crate::release::short(&rel.commit));
    let _using = cache_users().read().await;
    let id = crate::cache::ReleaseEntry::id(at.key, &rel.tag, &rel.commit);
    let lock = release_lock(&id);
    let _guard = lock.lock().await;
    let (index, result) = source.materialise(at, state, index, rel).await;
    match &result {
        // Once per download at INFO; a release found in the cache (every Cluster's reconcile
        // asks) at DEBUG.
        Ok(m) => {
            failures().cleared(&id);
            match m.fetched {
                true => span.in_scope(|| tracing::info!(fetched = true, path = %m.tree.display(), "release ready")),
                false => span.in_scope(|| tracing::debug!(fetched = false, path = %m.tree.display(), "release ready")),
            }
        }
        // Every retry (each pass, each Cluster) meets the same full or read-only volume: said
        // once per cause, not per retry (the text names a temp file new on each try).
        Err(e) if failures().worth(&id, &crate::model::repeats::cause(e)) => {
            span.in_scope(|| tracing::error!(error = %e, "cannot cache release; the release in use stays"));
        }
        Err(e) => span.in_scope(|| tracing::debug!(error = %e, "cannot cache release (unchanged since it was said)")),
    }
    (index, result)
}

/// The last failure said for each release being materialised.
fn failures() -> &'static crate::model::repeats::Repeats<String> {
    static SAID: std::sync::OnceLock<crate::model::repeats::Repeats<String>> = std::sync::OnceLock::new();
    SAID.get_or_init(Default::default)
}

/// Materialisations and cache cleanup exclude each other: a cleanup deletes blobs and trees that
/// no kept release references, and those of a download in progress are referenced by nothing
/// yet. Materialisations share it; a cleanup takes it alone.
fn cache_users() -> &'static tokio::sync::RwLock<()> {
    static USERS: std::sync::OnceLock<tokio::sync::RwLock<()>> = std::sync::OnceLock::new();
    USERS.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// Held while the cache is cleaned up: `None` while a release is being materialised in this
/// process (the cleanup is skipped, not queued: waiting for a long download would hold back
/// every reconcile behind it), otherwise a guard that holds new materialisations back until it
/// is dropped. So a cleanup never deletes the blobs or the tree of a download in progress.
pub fn cleaning() -> Option<tokio::sync::RwLockWriteGuard<'static, ()>> {
    cache_users().try_write().ok()
}

/// One lock per release, so concurrent requests for the same release share one download.
fn release_lock(id: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    use std::sync::{Arc, Mutex, OnceLock};
    static LOCKS: OnceLock<Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut map = LOCKS.get_or_init(Default::default).locked();
    map.entry(id.to_owned()).or_default().clone()
}

fn log_events(name: &str, events: &[TagEvent]) {
    use crate::release::short;
    use tracing::{error, info, warn};
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

/// Why polling a source failed; the previous tag set stays.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("source {source_name} ({url}): {source}")]
    Git {
        source_name: String,
        url: String,
        #[source]
        source: Box<git::Error>,
    },
    /// The blocking fetch task panicked or was cancelled.
    #[error("source {source_name} ({url}): poll task failed: {source}")]
    Task {
        source_name: String,
        url: String,
        #[source]
        source: tokio::task::JoinError,
    },
    /// The source's trusted keys (`verify:`) cannot be read or parsed.
    #[error("source {source_name} ({}): {source}", source.path.display())]
    Keys {
        source_name: String,
        #[source]
        source: verify::KeyFileError,
    },
    #[error("source {source_name}: poll did not finish within {seconds}s")]
    Timeout { source_name: String, seconds: u64 },
    #[error("source {source_name}: {source}")]
    Github {
        source_name: String,
        // Boxed: the GitHub error is large and would bloat every source result.
        #[source]
        source: Box<github::Error>,
    },
    #[error("source {source_name}: {source}")]
    Oci {
        source_name: String,
        #[source]
        source: Box<oci::Error>,
    },
}

impl Error {
    /// Whether polling again soon may succeed with nothing changed: the remote's and the cache
    /// volume's trouble passes; a URL, credentials or keys the remote or stacksync refuse wait
    /// for someone to change them. (Polls run on their schedule either way.)
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Git { source, .. } => source.is_transient(),
            Error::Task { .. } | Error::Timeout { .. } => true,
            Error::Keys { source, .. } => source.is_transient(),
            Error::Github { source, .. } => source.is_transient(),
            Error::Oci { source, .. } => source.is_transient(),
        }
    }

    /// A short stable name, for condition reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Git { source, .. } => source.reason(),
            Error::Task { .. } => "PollTask",
            Error::Keys { source, .. } => source.reason(),
            Error::Timeout { .. } => "Timeout",
            Error::Github { source, .. } => source.reason(),
            Error::Oci { source, .. } => source.reason(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Refs as a remote advertises them, peeled to commits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteRefs {
    pub tags: BTreeMap<String, String>,
    pub heads: BTreeMap<String, String>,
}

/// Something about a source's tags worth telling an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagEvent {
    New {
        tag: String,
        commit: String,
    },
    /// The tag now points elsewhere. `accepted` is false when policy kept the old commit.
    Moved {
        tag: String,
        old: String,
        new: String,
        accepted: bool,
    },
    Deleted {
        tag: String,
        commit: String,
    },
}

/// Merges what the remote advertises now into the previous state.
///
/// A moved tag keeps its old commit unless `allow_moved_tags`; a deleted tag is dropped. Pure.
pub fn reconcile(previous: &SourceState, url: &str, remote: &RemoteRefs, allow_moved_tags: bool) -> (SourceState, Vec<TagEvent>) {
    let mut next = SourceState { url: url.to_owned(), heads: remote.heads.clone(), ..SourceState::default() };
    let mut events = Vec::new();
    for (tag, new) in &remote.tags {
        match previous.tags.get(tag) {
            None => {
                events.push(TagEvent::New { tag: tag.clone(), commit: new.clone() });
                next.tags.insert(tag.clone(), new.clone());
            }
            Some(old) if old == new => {
                next.tags.insert(tag.clone(), new.clone());
            }
            Some(old) => {
                events.push(TagEvent::Moved { tag: tag.clone(), old: old.clone(), new: new.clone(), accepted: allow_moved_tags });
                if allow_moved_tags {
                    next.tags.insert(tag.clone(), new.clone());
                } else {
                    next.tags.insert(tag.clone(), old.clone());
                    next.refused.insert(tag.clone(), new.clone());
                }
            }
        }
    }
    // Every tag the remote advertised last time counts, accepted or not: a tag refused (it
    // missed its pin, its signature did not verify) is not in `tags`, yet a Cluster may still
    // run it, and its deletion is as much news as any other's.
    let refused = previous.refused.iter().chain(previous.unsigned.iter().map(|(t, r)| (t, &r.commit)));
    let mut gone = BTreeMap::new();
    for (tag, commit) in refused.chain(&previous.tags) {
        if !remote.tags.contains_key(tag) {
            // The accepted commit wins over the one refused (they are chained last).
            gone.insert(tag, commit);
        }
    }
    for (tag, commit) in gone {
        events.push(TagEvent::Deleted { tag: tag.clone(), commit: commit.clone() });
    }
    // A source seen for the first time: every tag is "new", which is noise, not news.
    if previous.tags.is_empty() {
        events.retain(|e| !matches!(e, TagEvent::New { .. }));
    }
    (next, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(tags: &[(&str, &str)]) -> RemoteRefs {
        RemoteRefs { tags: tags.iter().map(|(t, c)| ((*t).into(), (*c).into())).collect(), heads: BTreeMap::new() }
    }

    #[test]
    fn moved_tag_is_refused_unless_allowed() {
        let (first, events) = reconcile(&SourceState::default(), "u", &refs(&[("v1.0.0", "aaa")]), false);
        assert!(events.is_empty());
        let (refused, events) = reconcile(&first, "u", &refs(&[("v1.0.0", "bbb")]), false);
        assert_eq!(refused.tags["v1.0.0"], "aaa");
        assert_eq!(refused.refused["v1.0.0"], "bbb");
        assert_eq!(events, vec![TagEvent::Moved { tag: "v1.0.0".into(), old: "aaa".into(), new: "bbb".into(), accepted: false }]);
        let (allowed, _) = reconcile(&first, "u", &refs(&[("v1.0.0", "bbb")]), true);
        assert_eq!(allowed.tags["v1.0.0"], "bbb");
    }

    #[test]
    fn refused_tag_stays_refused_on_later_polls() {
        let (first, _) = reconcile(&SourceState::default(), "u", &refs(&[("v1.0.0", "aaa")]), false);
        let (second, _) = reconcile(&first, "u", &refs(&[("v1.0.0", "bbb")]), false);
        let (third, events) = reconcile(&second, "u", &refs(&[("v1.0.0", "bbb")]), false);
        assert_eq!(third.tags["v1.0.0"], "aaa");
        assert_eq!(events.len(), 1);
    }

    /// Regression: a tag refused at one poll (it missed its pin, or its signature did not
    /// verify: not in the accepted tags) and deleted upstream before the next was only logged at
    /// INFO by the selection ("no longer advertised; staying on it"), never as deleted.
    #[test]
    fn a_refused_tag_deleted_upstream_is_reported_as_deleted() {
        let refused = SourceState { refused: [("v1.0.0".into(), "bbb".into())].into(), ..SourceState::default() };
        let unsigned = SourceState {
            unsigned: [("v1.0.0".into(), crate::cache::SignatureRefusal { commit: "bbb".into(), ..Default::default() })].into(),
            ..SourceState::default()
        };
        // A moved tag refused by the moved-tag policy stays accepted at its old commit.
        let moved = SourceState {
            tags: [("v1.0.0".into(), "aaa".into())].into(),
            refused: [("v1.0.0".into(), "bbb".into())].into(),
            ..SourceState::default()
        };
        let table = [("missed its pin", refused, "bbb"), ("signature refused", unsigned, "bbb"), ("moved, refused", moved, "aaa")];
        for (name, mut previous, commit) in table {
            previous.tags.insert("v0.9.0".into(), "ccc".into());
            let (next, events) = reconcile(&previous, "u", &refs(&[("v0.9.0", "ccc")]), false);
            assert_eq!(events, vec![TagEvent::Deleted { tag: "v1.0.0".into(), commit: commit.into() }], "{name}");
            assert!(!next.tags.contains_key("v1.0.0") && next.refused.is_empty(), "{name}");
            // Said once: the next poll knows nothing of it.
            assert_eq!(reconcile(&next, "u", &refs(&[("v0.9.0", "ccc")]), false).1, vec![], "{name}");
        }
    }

    #[test]
    fn new_and_deleted_tags_are_reported() {
        let (first, _) = reconcile(&SourceState::default(), "u", &refs(&[("v1.0.0", "aaa")]), false);
        let (next, events) = reconcile(&first, "u", &refs(&[("v1.1.0", "ccc")]), false);
        assert_eq!(next.tags.len(), 1);
        assert_eq!(
            events,
            vec![
                TagEvent::New { tag: "v1.1.0".into(), commit: "ccc".into() },
                TagEvent::Deleted { tag: "v1.0.0".into(), commit: "aaa".into() }
            ]
        );
    }
}
