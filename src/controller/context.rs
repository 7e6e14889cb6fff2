//! The long-lived state of a running stacksync, made once per process: the config in force, the
//! cache and its index, one helm for the process (one bound on concurrent renders), a work
//! directory, and memoised release layouts. The source pollers and every reconcile share it.
//!
//! The index is the one piece of mutable shared state. Nothing holds its lock across network
//! I/O: a poll works on a copy of its own source's state and merges the result back, so a slow
//! source never delays another.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;
use tracing::{Instrument, error, info, warn};

use super::Prepared;
use super::error::RenderError;
use super::error::WorkDirError;
use super::fetch::{self, source_key};
use super::{PrepareError, PreparedRelease};
use crate::cache::{self, Cache, Index};
use crate::config::{Config, Format, Subscription};
use crate::model::sync::{MutexExt, RwLockExt};
use crate::release::{self, Release, Selection};
use crate::render::clusterstack::Layout;
use crate::render::helm::Helm;

/// The cache volume's directory of helm renders kept across restarts
/// ([`crate::render::helm::Disk`]).
pub const RENDERS_DIR: &str = "renders";

/// Shared by every task of the process. Cheap to reach through an `Arc`.
pub struct Context {
    config: RwLock<Arc<Config>>,
    pub cache: Cache,
    index: tokio::sync::Mutex<Index>,
    helm: tokio::sync::OnceCell<Result<Helm, crate::render::helm::Error>>,
    work: Result<tempfile::TempDir, WorkDirError>,
    layouts: Mutex<HashMap<(String, String, bool), Arc<Layout>>>,
    /// Bumped whenever a poll changed what some source offers (and after each source's first
    /// poll): the Cluster reconciler re-runs every Cluster then.
    published: watch::Sender<u64>,
    /// Sources polled at least once by this process (successfully or not).
    polled: Mutex<std::collections::BTreeSet<String>>,
    /// The error of each source's last poll, while it fails (said beside a release that is
    /// unavailable).
    poll_errors: Mutex<BTreeMap<String, String>>,
    /// Releases that could not be prepared for a reason that needs a change (a digest that
    /// does not match, a refused signature, an unsafe archive), by cache id, and since when:
    /// every Cluster of the release gets this answer instead of another download, until the
    /// input changes (a poll that changed what a source offers, a new config) or
    /// [`RETRY_REFUSED`] has passed.
    refused: Mutex<HashMap<String, (std::time::Instant, Arc<PrepareError>)>>,
    /// One prepare per release at a time: the Clusters waiting behind a refusal get it from
    /// `refused` instead of downloading again.
    preparing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// What each subscription's source offers, what is selected from it and the releases
    /// prepared, as every Cluster's reconcile asks: worked out once, not once per Cluster.
    /// Selecting copied every tag of the source under the index lock, and preparing checked the
    /// cached tree against its digest manifest, reading and hashing every file: at 10,000
    /// Clusters most of a steady-state reconcile's work. Forgotten whenever the index or the
    /// config changes ([`Context::forget_answers`]: a poll, a publication, a release cached,
    /// adopted or collected), so a moved tag, a new pin or a collected tree is never answered
    /// from here, and after [`PREPARED_FOR`] at the latest.
    answers: Mutex<Answers>,
    /// Whether helm's renders are kept on the cache volume (off for `stacksync preview`, which
    /// writes nothing there).
    disk_renders: std::sync::atomic::AtomicBool,
    /// Every render is a probe ([`Context::renders_for_preview`]).
    probe_renders: std::sync::atomic::AtomicBool,
    /// The last selection note said at INFO per subscription (`tag … is no longer advertised;
    /// staying on it`): said when it changes, not at every poll.
    notes: Mutex<HashMap<String, String>>,
}

/// How many releases one selection tries when their signatures are refused as they are cached.
const MAX_SIGNATURE_RETRIES: usize = 8;

/// How long a release refused for a reason that needs a change is not fetched again when
/// nothing changed: the longest a fixed upstream waits without a poll noticing it.
pub const RETRY_REFUSED: std::time::Duration = std::time::Duration::from_secs(600);

/// How long an answer of [`Context`]'s (a selection, a prepared release) is handed out again
/// when nothing it depends on changed: a release tree edited on the volume (outside this
/// process) is found and materialised again at the first prepare after this.
pub const PREPARED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// What a source advertises (tag -> commit, pre-releases left out unless allowed) and every
/// release of it still in the cache (`known`: a Cluster may run a release whose tag was deleted
/// upstream).
#[derive(Debug, Default)]
pub struct Tags {
    pub advertised: BTreeMap<String, String>,
    pub known: BTreeMap<String, String>,
}

/// Answers worked out from the index and the config, by subscription (tags by source and
/// whether pre-releases count).
#[derive(Default)]
struct Answers {
    /// Bumped whenever the answers are forgotten: an answer worked out from what was there
    /// before is not kept.
    generation: u64,
    tags: HashMap<(String, bool), Kept<Arc<Tags>>>,
    selected: HashMap<String, Kept<Result<Selection, release::Error>>>,
    offered: HashMap<String, Kept<Arc<Vec<Release>>>>,
    /// By (source, tag, commit); handed out with `fetched: false`.
    prepared: HashMap<(String, String, String), Kept<PreparedRelease>>,
}

/// One answer, with when it was worked out and from which config.
struct Kept<V> {
    at: std::time::Instant,
    config: Arc<Config>,
    value: V,
}

impl<V: Clone> Kept<V> {
    /// The answer, while it is younger than [`PREPARED_FOR`] and was worked out from `config`.
    fn fresh(&self, config: &Arc<Config>) -> Option<V> {
        (self.at.elapsed() < PREPARED_FOR && Arc::ptr_eq(&self.config, config)).then(|| self.value.clone())
    }

    /// The answer for `sub`, while it is fresh and `sub` is the subscription of its config (not
    /// one a caller edited, nor one of another config).
    fn fresh_for(&self, sub: &Subscription) -> Option<V> {
        let ours = self.config.subscriptions.iter().any(|s| std::ptr::eq(s, sub));
        (ours && self.at.elapsed() < PREPARED_FOR).then(|| self.value.clone())
    }
}

impl Context {
    /// Opens the cache and its index and makes the process's work directory. A work directory
    /// that cannot be made is not fatal here: each render that needs it fails, loudly, with the
    /// reason (`WorkDirUnavailable`), and everything else goes on.
    ///
    /// # Errors
    /// The cache cannot be opened or its index read.
    pub fn new(config: Config) -> cache::Result<Arc<Context>> {
        let cache = Cache::open(&config.cache.dir)?;
        let index = cache.load_index()?;
        let work = tempfile::Builder::new()
            .prefix("stacksync-work-")
            .tempdir()
            .map_err(|e| WorkDirError { dir: std::env::temp_dir(), source: Arc::new(e) });
        if let Err(e) = &work {
            error!("{e}; cluster stacks cannot be rendered until it can be created (set TMPDIR to a writable directory)");
        }
        Ok(Arc::new(Context {
            config: RwLock::new(Arc::new(config)),
            cache,
            index: tokio::sync::Mutex::new(index),
            helm: tokio::sync::OnceCell::new(),
            work,
            layouts: Mutex::new(HashMap::new()),
            published: watch::channel(0).0,
            polled: Mutex::new(std::collections::BTreeSet::new()),
            poll_errors: Mutex::new(BTreeMap::new()),
            refused: Mutex::new(HashMap::new()),
            preparing: Mutex::new(HashMap::new()),
            answers: Mutex::new(Answers::default()),
            disk_renders: std::sync::atomic::AtomicBool::new(true),
            probe_renders: std::sync::atomic::AtomicBool::new(false),
            notes: Mutex::new(HashMap::new()),
        }))
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.config.read_locked().clone()
    }

    /// Puts a reloaded config in force (same cache and target; those rebuild the context).
    pub fn set_config(&self, config: Config) {
        *self.config.write_locked() = Arc::new(config);
        self.publish();
    }

    /// Notified (the value changes) whenever what the sources offer may have changed.
    pub fn published(&self) -> watch::Receiver<u64> {
        self.published.subscribe()
    }

    fn publish(&self) {
        // What the sources offer (or the config) changed: what was refused is tried again.
        self.refused.locked().clear();
        self.forget_answers();
        self.published.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Polls one source and publishes when what it advertises changed.
    ///
    /// # Errors
    /// The poll failed; what the source advertised before stays in force.
    pub async fn poll(&self, source: &str) -> crate::source::Result<bool> {
        let config = self.config();
        let Some(src) = config.source(source) else { return Ok(false) };
        let kind = crate::source::of(&src.kind);
        let key = crate::source::key(&src.name, kind);
        let previous = self.index.lock().await.sources.get(&key).cloned().unwrap_or_default();
        let at = crate::source::At { name: source, key: &key, cache: &self.cache };
        let polled = crate::source::poll(kind, at, &previous).await;
        let first = self.polled.locked().insert(source.to_owned());
        {
            let mut errors = self.poll_errors.locked();
            match &polled {
                Ok(_) => errors.remove(source),
                Err(e) => errors.insert(source.to_owned(), e.to_string()),
            };
        }
        let next = match polled {
            Ok(p) => p,
            Err(e) => {
                if first {
                    self.publish();
                }
                return Err(e);
            }
        };
        let changed = next.tags != previous.tags || next.heads != previous.heads || next.prereleases != previous.prereleases;
        {
            let mut index = self.index.lock().await;
            index.sources.insert(key, next);
            self.forget_answers();
            self.save(&index);
        }
        if changed || first {
            self.publish();
        }
        Ok(changed)
    }

    /// Why the last poll of `source` failed, while it fails.
    pub fn poll_error(&self, source: &str) -> Option<String> {
        self.poll_errors.locked().get(source).cloned()
    }

    /// Whether `source` was polled by this process yet (its tags may be older until then).
    pub fn polled(&self, source: &str) -> bool {
        self.polled.locked().contains(source)
    }

    /// Polls every source the subscriptions use, side by side. Failures are logged and returned
    /// by source name; their cached tags stay in use.
    pub async fn poll_all(&self) -> BTreeMap<String, String> {
        let config = self.config();
        let names: std::collections::BTreeSet<&str> = config.subscriptions.iter().map(|s| s.source.as_str()).collect();
        let polls = names.into_iter().map(|name| async move { (name.to_owned(), self.poll(name).await) });
        let mut failed = BTreeMap::new();
        for (name, result) in futures_util::future::join_all(polls).await {
            if let Err(e) = result {
                warn!(source = %name, error = %e, "source poll failed; using the releases cached from the last successful poll");
                failed.insert(name, e.to_string());
            }
        }
        failed
    }

    /// Writes the index. A volume that stays full or read-only fails every poll's write: said
    /// once per cause, DEBUG in between.
    fn save(&self, index: &Index) {
        static SAID: std::sync::OnceLock<crate::model::repeats::Repeats<std::path::PathBuf>> = std::sync::OnceLock::new();
        let said = SAID.get_or_init(Default::default);
        match self.cache.save_index(index) {
            Ok(()) => said.cleared(&self.cache.root().to_path_buf()),
            Err(e) if said.worth(&self.cache.root().to_path_buf(), &crate::model::repeats::cause(&e)) => {
                error!(error = %e, "cannot write the cache index; the next start polls again");
            }
            Err(e) => tracing::debug!(error = %e, "cannot write the cache index (unchanged since it was said)"),
        }
    }

    /// What `sub`'s source advertises (tag -> commit), pre-releases left out unless allowed,
    /// and every release of that source still in the cache (`known`: a Cluster may run a
    /// release whose tag was deleted upstream).
    pub async fn tags(&self, sub: &Subscription) -> Arc<Tags> {
        let config = self.config();
        let generation = self.answers.locked().generation;
        let index = self.index.lock().await;
        self.tags_in(&index, &config, generation, sub)
    }

    /// [`Context::tags`] from the index as locked by the caller.
    fn tags_in(&self, index: &Index, config: &Arc<Config>, generation: u64, sub: &Subscription) -> Arc<Tags> {
        let memo = (sub.source.clone(), sub.prereleases);
        if let Some(tags) = self.answers.locked().tags.get(&memo).and_then(|k| k.fresh(config)) {
            return tags;
        }
        let Some(src) = config.source(&sub.source) else { return Arc::default() };
        let key = source_key(&src.name, &src.kind);
        let state = index.sources.get(&key);
        let mut advertised = state.map(|s| s.tags.clone()).unwrap_or_default();
        if !sub.prereleases
            && let Some(state) = state
        {
            advertised.retain(|t, _| !state.prereleases.contains(t));
        }
        let mut known = advertised.clone();
        let prefix = format!("{key}/");
        for (id, entry) in &index.releases {
            if id.starts_with(&prefix) && !state.is_some_and(|s| s.refused.contains_key(&entry.tag)) {
                known.entry(entry.tag.clone()).or_insert_with(|| entry.commit.clone());
            }
        }
        let tags = Arc::new(Tags { advertised, known });
        self.remember(generation, |a| {
            a.tags.insert(memo, Kept { at: std::time::Instant::now(), config: config.clone(), value: tags.clone() });
        });
        tags
    }

    /// Keeps an answer worked out from the index and config as they were at `generation`,
    /// unless they changed since.
    fn remember(&self, generation: u64, keep: impl FnOnce(&mut Answers)) {
        let mut answers = self.answers.locked();
        if answers.generation == generation {
            keep(&mut answers);
        }
    }

    /// [`Context::remember`] for an answer about `sub`, kept only when `sub` is a subscription
    /// of `config` (a caller may hold one of an older config, or one it edited).
    fn remember_for(&self, generation: u64, config: &Arc<Config>, sub: &Subscription, keep: impl FnOnce(&mut Answers)) {
        if config.subscriptions.iter().any(|s| std::ptr::eq(s, sub)) {
            self.remember(generation, keep);
        }
    }

    /// Forgets every answer worked out from the index or the config: called by whatever changes
    /// either (a poll, a publication, an adopted release, a release cached or collected), and by
    /// `tests/cluster_path.rs` to measure a reconcile that misses them (as one more than
    /// [`PREPARED_FOR`] after the last does).
    pub fn forget_answers(&self) {
        let mut answers = self.answers.locked();
        let generation = answers.generation.wrapping_add(1);
        *answers = Answers { generation, ..Answers::default() };
    }

    /// The commit (or digest) `source` last advertised for `tag`, pre-releases included.
    pub async fn commit_of(&self, source: &str, tag: &str) -> Option<String> {
        let config = self.config();
        let src = config.source(source)?;
        let key = source_key(&src.name, &src.kind);
        self.index.lock().await.sources.get(&key)?.tags.get(tag).cloned()
    }

    /// Why `source`'s last poll refused `tag`, if it did: its signature (sources with `verify`)
    /// or a move the source does not allow.
    pub async fn refusal_of(&self, source: &str, tag: &str) -> Option<String> {
        let config = self.config();
        let src = config.source(source)?;
        let key = source_key(&src.name, &src.kind);
        let index = self.index.lock().await;
        let state = index.sources.get(&key)?;
        if let Some(r) = state.unsigned.get(tag) {
            return Some(r.message.clone());
        }
        state.refused.get(tag).map(|now| format!("the tag moved (it now names {now}) and the source does not allow moved tags"))
    }

    /// Releases of a subscription's source refused for their signature (sources with `verify`)
    /// that the subscription would otherwise consider (its stack and constraint): tag -> why.
    pub async fn signature_refusals(&self, sub: &Subscription) -> BTreeMap<String, crate::cache::SignatureRefusal> {
        let config = self.config();
        let Some(src) = config.source(&sub.source) else { return BTreeMap::new() };
        let key = source_key(&src.name, &src.kind);
        let index = self.index.lock().await;
        let Some(state) = index.sources.get(&key) else { return BTreeMap::new() };
        let wanted = sub.wanted();
        state
            .unsigned
            .iter()
            .filter(|(tag, _)| {
                let Some(v) = crate::model::version::Version::from_tag(tag) else { return false };
                wanted.kind_of(&v) && wanted.constraint.matches(&v)
            })
            .map(|(t, r)| (t.clone(), r.clone()))
            .collect()
    }

    /// Tags of a subscription's source that moved (or miss their pin) and were refused: tag ->
    /// the commit the remote now claims.
    pub async fn refused(&self, sub: &Subscription) -> BTreeMap<String, String> {
        let config = self.config();
        let Some(src) = config.source(&sub.source) else { return BTreeMap::new() };
        let key = source_key(&src.name, &src.kind);
        self.index.lock().await.sources.get(&key).map(|s| s.refused.clone()).unwrap_or_default()
    }

    /// The release a subscription runs when nothing else decides (plain manifests, a Cluster
    /// without a topology class): the newest allowed, as `release::select` rules.
    ///
    /// # Errors
    /// Nothing matches.
    pub async fn select(&self, sub: &Subscription) -> Result<Selection, release::Error> {
        self.answer_for(
            sub,
            |a| &mut a.selected,
            |index, tags| {
                let adopted = index.adopted.get(&sub.name).map(|a| release::Adopted { source: &a.source, tag: &a.tag, commit: &a.commit });
                release::select(&sub.wanted(), &tags.advertised, adopted)
            },
        )
        .await
    }

    /// The releases a cluster-stack subscription offers (newest first).
    pub async fn offered(&self, sub: &Subscription) -> Arc<Vec<Release>> {
        let Some(families) = sub.families() else { return Arc::default() };
        self.answer_for(
            sub,
            |a| &mut a.offered,
            |_, tags| Arc::new(release::offered(&sub.source, &tags.advertised, families, &sub.constraint, sub.available_releases)),
        )
        .await
    }

    /// The answer `pick` keeps for `sub` while it is fresh; otherwise worked out by `work` from
    /// the index and the source's tags, and kept.
    async fn answer_for<V: Clone>(
        &self,
        sub: &Subscription,
        pick: fn(&mut Answers) -> &mut HashMap<String, Kept<V>>,
        work: impl FnOnce(&Index, &Tags) -> V,
    ) -> V {
        let (kept, generation) = {
            let mut answers = self.answers.locked();
            (pick(&mut answers).get(&sub.name).and_then(|k| k.fresh_for(sub)), answers.generation)
        };
        if let Some(value) = kept {
            return value;
        }
        let config = self.config();
        let index = self.index.lock().await;
        let tags = self.tags_in(&index, &config, generation, sub);
        let value = work(&index, &tags);
        drop(index);
        self.remember_for(generation, &config, sub, |a| {
            pick(a).insert(sub.name.clone(), Kept { at: std::time::Instant::now(), config: config.clone(), value: value.clone() });
        });
        value
    }

    /// Records the release a subscription has in use (kept by garbage collection; the one
    /// `autoUpgrade: false` stays on). Returns whether it changed.
    pub async fn adopt(&self, sub: &Subscription, rel: &Release) -> bool {
        let mut index = self.index.lock().await;
        let adopted = crate::cache::index::Adopted { source: sub.source.clone(), tag: rel.tag.clone(), commit: rel.commit.clone() };
        if index.adopted.get(&sub.name) == Some(&adopted) {
            return false;
        }
        index.adopted.insert(sub.name.clone(), adopted);
        self.forget_answers();
        self.save(&index);
        true
    }

    /// The cached tree of `rel`, materialised (downloaded, verified) when it is not there yet.
    ///
    /// # Errors
    /// Naming the source, tag and what went wrong; the same error, without another download,
    /// while a refusal that needs a change stands (see [`RETRY_REFUSED`]).
    pub async fn prepare(&self, rel: &Release) -> Result<PreparedRelease, Arc<PrepareError>> {
        let config = self.config();
        let memo = (rel.source.clone(), rel.tag.clone(), rel.commit.clone());
        let generation = {
            let answers = self.answers.locked();
            if let Some(prepared) = answers.prepared.get(&memo).and_then(|k| k.fresh(&config)) {
                return Ok(prepared);
            }
            answers.generation
        };
        let outcome = self.prepare_again(rel).await;
        if let Ok(p) = &outcome {
            let value = PreparedRelease { fetched: false, ..p.clone() };
            self.remember(generation, |a| {
                let now = std::time::Instant::now();
                a.prepared.retain(|_, k| now.duration_since(k.at) < PREPARED_FOR);
                a.prepared.insert(memo, Kept { at: now, config, value });
            });
        }
        outcome
    }

    /// [`Context::prepare`] without the memo: the tree checked (or materialised) now.
    async fn prepare_again(&self, rel: &Release) -> Result<PreparedRelease, Arc<PrepareError>> {
        let config = self.config();
        let Some(src) = config.source(&rel.source) else { return Err(Arc::new(PrepareError::UnknownSource(rel.source.clone()))) };
        let kind = crate::source::of(&src.kind);
        let key = crate::source::key(&src.name, kind);
        let id = crate::cache::ReleaseEntry::id(&key, &rel.tag, &rel.commit);
        let lock = self.preparing.locked().entry(id.clone()).or_default().clone();
        let _one = lock.lock().await;
        if let Some((since, e)) = self.refused.locked().get(&id)
            && since.elapsed() < RETRY_REFUSED
        {
            return Err(e.clone());
        }
        // The materialisation reads only the source's own state (shared, not copied) and writes
        // a scratch index whose new release entries are merged back.
        let (own, claimed, signer, refused) = {
            let index = self.index.lock().await;
            let state = index.sources.get(&key);
            let (signer, refused) = fetch::signature(state, rel);
            (state.and_then(|s| s.own.clone()), state.and_then(|s| s.refused.get(&rel.tag)).cloned(), signer, refused)
        };
        if let Some(m) = refused {
            return Ok(fetch::held(&self.cache, &key, rel, m));
        }
        let state = crate::cache::SourceState { own, ..Default::default() };
        let at = crate::source::At { name: &src.name, key: &key, cache: &self.cache };
        let (scratch, outcome) = crate::source::materialise(kind, at, &state, Index::default(), rel).await;
        let outcome = outcome
            .map(|m| PreparedRelease {
                unverified: fetch::mismatch(&src.name, kind, rel, claimed.as_deref(), &m.assets),
                signed_by: m.signed_by.or(signer),
                release: rel.clone(),
                tree: m.tree,
                fetched: m.fetched,
                note: None,
                assets: m.assets,
                moved_tags_accepted: kind.allow_moved_tags(),
            })
            .map_err(|e| Arc::new(PrepareError::Source(e)));
        if let Err(e) = &outcome
            && !e.is_transient()
        {
            self.refused.locked().insert(id, (std::time::Instant::now(), e.clone()));
        }
        // A release whose signatures were refused when it was cached (a GitHub release's assets:
        // its poll only saw that every asset had a `.sig`) leaves the accepted tags now: the next
        // selection is the newest verified.
        if outcome.is_err()
            && let Some((refusal, trust)) = kind.refusal(rel)
        {
            let mut index = self.index.lock().await;
            let taken = index
                .sources
                .get_mut(&key)
                .is_some_and(|state| crate::source::signed::refuse(&src.name, state, &rel.tag, &refusal, &trust));
            // Only a change is news: a release in use refused again (kept, never downgraded
            // silently) must not wake the syncers into another pass and another refusal.
            if taken {
                self.save(&index);
                drop(index);
                self.publish();
            }
        }
        if !scratch.releases.is_empty() {
            let mut index = self.index.lock().await;
            let before = index.releases.len();
            index.releases.extend(scratch.releases);
            if index.releases.len() != before {
                self.forget_answers();
                self.save(&index);
            }
        }
        outcome
    }

    /// A subscription's release, selected from what its source last advertised and prepared:
    /// the one path every caller without a Cluster class takes (the directory target's syncers,
    /// `run --once`, `fetch`, `render`). A release refused for its signatures when it is cached
    /// leaves the accepted tags and the next newest is tried, a bounded number of times (each
    /// try downloads a release).
    pub async fn prepare_subscription(&self, sub: &Subscription) -> Prepared {
        let mut prepared = Prepared {
            subscription: sub.name.clone(),
            source: sub.source.clone(),
            outcome: Err(Arc::new(PrepareError::SignatureRetries(MAX_SIGNATURE_RETRIES))),
        };
        if self.config().source(&sub.source).is_none() {
            prepared.outcome = Err(Arc::new(PrepareError::UnknownSource(sub.source.clone())));
            return prepared;
        }
        for _ in 0..MAX_SIGNATURE_RETRIES {
            let selection = match self.select(sub).await {
                Ok(s) => s,
                Err(e) => {
                    warn!("{e}");
                    prepared.outcome = Err(Arc::new(PrepareError::Select(e)));
                    return prepared;
                }
            };
            let rel = &selection.release;
            let span = tracing::info_span!("release", source = %rel.source, tag = %rel.tag, commit = %release::short(&rel.commit));
            if let Some(note) = &selection.note {
                // The tag's deletion itself is said once at WARN by the poll that saw it (every
                // source kind alike); what the selection makes of it once at INFO, then DEBUG.
                let new = self.notes.locked().insert(sub.name.clone(), note.clone()).as_ref() != Some(note);
                if new {
                    span.in_scope(|| info!("{note}"));
                } else {
                    span.in_scope(|| tracing::debug!("{note}"));
                }
            } else {
                self.notes.locked().remove(&sub.name);
            }
            let outcome = self.prepare(rel).instrument(span).await;
            if outcome.as_ref().is_err_and(|e| e.is_signature()) && !self.tags(sub).await.advertised.contains_key(&rel.tag) {
                continue;
            }
            prepared.outcome = outcome.map(|p| PreparedRelease { note: selection.note, ..p });
            return prepared;
        }
        prepared
    }

    /// Writes the cache index now.
    ///
    /// # Errors
    /// It cannot be written.
    pub async fn save_index(&self) -> cache::Result<()> {
        self.cache.save_index(&*self.index.lock().await)
    }

    /// Renders for `stacksync preview` (before the first render): in memory only, so a preview
    /// of a release that is not published leaves nothing on the cache volume; and as probes
    /// ([`Helm::probes_only`]), since a preview applies nothing and keeps every generated field's
    /// live value: no key is generated.
    pub fn renders_for_preview(&self) {
        self.disk_renders.store(false, std::sync::atomic::Ordering::Relaxed);
        self.probe_renders.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The process's helm, located once (its version logged). Only cluster-stack subscriptions
    /// ask for it.
    ///
    /// # Errors
    /// helm is missing or unusable; the message says how to fix it.
    pub async fn helm(&self) -> Result<Helm, RenderError> {
        let work = self.work_dir()?.to_path_buf();
        let renders = self.disk_renders.load(std::sync::atomic::Ordering::Relaxed).then(|| self.cache.root().join(RENDERS_DIR));
        let probes = self.probe_renders.load(std::sync::atomic::Ordering::Relaxed);
        let config = self.config();
        self.helm
            .get_or_init(|| async move {
                match Helm::locate(&config.helm).await {
                    Ok(h) => {
                        info!(path = %h.path().display(), version = h.version(), renderer = h.kind(), "helm found");
                        let h = h.with_home(&work.join("helm"));
                        Ok(match &renders {
                            _ if probes => h.probes_only(),
                            Some(dir) => h.with_disk(dir),
                            None => h,
                        })
                    }
                    Err(e) => {
                        error!("{e}");
                        Err(e)
                    }
                }
            })
            .await
            .clone()
            .map_err(RenderError::Helm)
    }

    /// The process's work directory (helm homes, unpacked charts, per-cluster renders).
    ///
    /// # Errors
    /// It could not be created at start-up.
    pub fn work_dir(&self) -> Result<&Path, WorkDirError> {
        self.work.as_ref().map(tempfile::TempDir::path).map_err(Clone::clone)
    }

    /// The layout of a cluster-stack release, read and unpacked once per process.
    ///
    /// # Errors
    /// The work directory is missing, or every problem of the release.
    pub async fn layout(&self, sub: &Subscription, prepared: &PreparedRelease) -> Result<Arc<Layout>, RenderError> {
        debug_assert_eq!(sub.format, Format::ClusterStack);
        let options = self.config().templates;
        let memo = (prepared.tree.display().to_string(), sub.path.clone(), options.strict);
        if let Some(l) = self.layouts.locked().get(&memo) {
            return Ok(l.clone());
        }
        let unpack = self
            .work_dir()?
            .join("releases")
            .join(crate::model::names::bounded(format!("{}-{}", prepared.release.tag, release::short(&prepared.release.commit)), 255));
        let (tree, path, rel) = (prepared.tree.clone(), sub.path.clone(), prepared.release.clone());
        let layout = match tokio::task::spawn_blocking(move || Layout::load(&tree, &path, &rel, &unpack)).await {
            Ok(r) => r.map(|l| Arc::new(Layout { template_options: options, ..l })).map_err(RenderError::Release)?,
            Err(join) => return Err(RenderError::Task(Arc::new(join))),
        };
        info!(tag = %prepared.release.tag, unpacked = ?layout.unpacked, "cluster-stack release loaded");
        self.layouts.locked().insert(memo, layout.clone());
        Ok(layout)
    }

    /// Removes cached releases nothing needs: kept are each subscription's adopted release and
    /// `cache.keepReleases` newest, plus `in_use`. Skipped while a release is being
    /// materialised ([`crate::source::cleaning`]).
    pub async fn collect_garbage(&self, in_use: &std::collections::BTreeSet<String>) {
        let config = self.config();
        // Not while a release is being materialised (its blobs are referenced by nothing yet):
        // the next cleanup does it.
        let Some(_cleaning) = crate::source::cleaning() else {
            tracing::debug!("cache cleanup skipped: a release is being materialised");
            return;
        };
        let mut index = self.index.lock().await;
        let mut keep = fetch::releases_to_keep(&config, &index);
        keep.extend(in_use.iter().cloned());
        crate::cache::gc::collect(&self.cache, &mut index, &keep, crate::source::github::materialise::referenced_blobs);
        self.forget_answers();
        self.save(&index);
        // helm's renders on disk, and the charts the library renderer holds, go with their release.
        if let Some(Ok(helm)) = self.helm.get() {
            let groups = index.releases.values().map(|r| crate::render::helm::render_group(&r.tag, &r.commit)).collect();
            if let Some(disk) = helm.disk() {
                disk.collect(&groups);
            }
            helm.collect(&groups).await;
        }
    }

    /// The cache id of a release (`<source key>/<tag>@<commit>`).
    pub fn release_id(&self, rel: &Release) -> Option<String> {
        let config = self.config();
        let src = config.source(&rel.source)?;
        Some(crate::cache::ReleaseEntry::id(&source_key(&src.name, &src.kind), &rel.tag, &rel.commit))
    }
}
