//! The controller wires the stages for one pass: poll each needed source once, select and cache
//! each subscription's release, render it per cluster, apply to the target and record status.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use tracing::{Instrument, error, info, info_span, warn};

use crate::apply::{ChangeSet, DirectoryTarget};
use crate::cache::index::Adopted;
use crate::cache::{self, Cache, Index};
use crate::config::{ClusterConfig, Config, SourceKind, Subscription, Target};
use crate::release::{self, Release, short};
use crate::render::Manifests;
use crate::source::{self, TagEvent, git};
use crate::status::{ClusterStatus, Reason};

/// A poll that takes longer than this is abandoned (and retried at the next poll).
pub const POLL_TIMEOUT: Duration = Duration::from_secs(120);

/// A subscription's release, fetched and cached, ready to render.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub subscription: String,
    pub source: String,
    pub outcome: Result<PreparedRelease, String>,
}

#[derive(Debug, Clone)]
pub struct PreparedRelease {
    pub release: Release,
    pub tree: PathBuf,
    /// True when this pass wrote the tree into the cache; false when it was already there.
    pub fetched: bool,
    pub note: Option<String>,
}

/// What happened to one cluster in a pass.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    pub subscription: String,
    pub cluster: ClusterConfig,
    pub status: ClusterStatus,
    pub changes: ChangeSet,
}

#[derive(Debug, Clone, Default)]
pub struct PassReport {
    pub prepared: Vec<Prepared>,
    pub clusters: Vec<ClusterReport>,
    /// Sources that could not be polled this pass (their cached tags were used).
    pub source_errors: BTreeMap<String, String>,
}

impl PassReport {
    /// True when every cluster of every subscription is ready.
    pub fn all_synced(&self) -> bool {
        self.clusters.iter().all(|c| c.status.ready)
    }

    /// One line per cluster that is not ready, naming what is wrong.
    pub fn not_synced(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in self.clusters.iter().filter(|c| !c.status.ready) {
            out.push(format!(
                "{}/{} ({}): {:?}: {}",
                c.cluster.namespace, c.cluster.name, c.subscription, c.status.reason, c.status.message
            ));
            for o in c.status.objects.iter().filter(|o| !o.synced) {
                out.push(format!("  {}: {}", o.object(), o.message));
            }
        }
        out
    }
}

/// Runs the stages for `subs` (all subscriptions when `None`). With `apply` false, stops after
/// fetching and caching (`stacksync fetch`).
///
/// Never fails as a whole for one bad source, release or cluster: those are reported per
/// subscription and cluster. What was applied before stays in place.
///
/// # Errors
/// Only when the cache itself cannot be opened or its index read or written.
pub async fn pass(config: &Config, subs: Option<&[String]>, apply: bool) -> cache::Result<PassReport> {
    let cache = Cache::open(&config.cache.dir)?;
    let mut index = cache.load_index()?;
    let selected: Vec<&Subscription> = config.subscriptions.iter().filter(|s| subs.is_none_or(|names| names.contains(&s.name))).collect();
    let mut report = PassReport::default();

    let needed: BTreeSet<&str> = selected.iter().map(|s| s.source.as_str()).collect();
    for name in needed {
        if let Err(e) = poll_source(config, &cache, &mut index, name).await {
            warn!(source = name, error = %e, "source poll failed; using the releases cached from the last successful poll");
            report.source_errors.insert(name.to_owned(), e.to_string());
        }
    }

    for sub in selected {
        let span = info_span!("subscription", subscription = %sub.name, source = %sub.source);
        let (prepared, next_index) = prepare(config, &cache, index, sub).instrument(span.clone()).await;
        index = next_index;
        if apply {
            let target = match &config.target {
                Target::Directory(dir) => DirectoryTarget::new(dir),
            };
            let reports = span.in_scope(|| sync_subscription(&target, sub, &prepared, report.source_errors.get(&sub.source), true));
            let all_rendered = reports.iter().all(|r| r.status.reason != Reason::RenderFailed);
            if let (Ok(p), true) = (&prepared.outcome, all_rendered) {
                index.adopted.insert(
                    sub.name.clone(),
                    Adopted { source: sub.source.clone(), tag: p.release.tag.clone(), commit: p.release.commit.clone() },
                );
            }
            report.clusters.extend(reports);
        }
        report.prepared.push(prepared);
    }
    cache.save_index(&index)?;
    Ok(report)
}

/// Fetches one source and merges what it advertises into the index, logging tag changes.
async fn poll_source(config: &Config, cache: &Cache, index: &mut Index, name: &str) -> source::Result<()> {
    let Some(src) = config.source(name) else { return Ok(()) };
    let SourceKind::Git(g) = &src.kind;
    let key = Cache::source_key(name, &g.url);
    let previous = index.sources.get(&key).cloned().unwrap_or_default();
    let (url, dir, heads, src_name) = (g.url.clone(), cache.git_dir(&key), previous.heads.clone(), name.to_owned());
    let task = tokio::task::spawn_blocking(move || git::fetch(&src_name, &url, &dir, &heads));
    let fetched = match tokio::time::timeout(POLL_TIMEOUT, task).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => {
            return Err(source::Error::Fetch {
                source_name: name.into(),
                url: g.url.clone(),
                message: format!("poll task failed: {join}"),
            });
        }
        Err(_) => return Err(source::Error::Timeout { source_name: name.into(), seconds: POLL_TIMEOUT.as_secs() }),
    };
    for (branch, old, new) in &fetched.force_pushed {
        warn!(source = name, branch, old = short(old), new = short(new), "branch was force-pushed");
    }
    for tag in &fetched.not_commits {
        warn!(source = name, tag, "tag does not point at a commit; ignored");
    }
    let (next, events) = source::reconcile(&previous, &g.url, &fetched.refs, g.allow_moved_tags);
    for event in &events {
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
    info!(source = name, tags = next.tags.len(), branches = next.heads.len(), "polled source");
    index.sources.insert(key, next);
    Ok(())
}

/// Selects and caches a subscription's release. Takes and returns the index so the blocking
/// materialisation can own it.
async fn prepare(config: &Config, cache: &Cache, index: Index, sub: &Subscription) -> (Prepared, Index) {
    let mut prepared = Prepared { subscription: sub.name.clone(), source: sub.source.clone(), outcome: Err(String::new()) };
    let Some(SourceKind::Git(g)) = config.source(&sub.source).map(|s| &s.kind) else {
        prepared.outcome = Err(format!("unknown source `{}`", sub.source));
        return (prepared, index);
    };
    let key = Cache::source_key(&sub.source, &g.url);
    let tags = index.sources.get(&key).map(|s| s.tags.clone()).unwrap_or_default();
    let selection = match release::select(sub, &tags, index.adopted.get(&sub.name)) {
        Ok(s) => s,
        Err(msg) => {
            warn!("{msg}");
            prepared.outcome = Err(msg);
            return (prepared, index);
        }
    };
    let rel = selection.release.clone();
    let span = info_span!("release", source = %rel.source, tag = %rel.tag, commit = %short(&rel.commit));
    if let Some(note) = &selection.note {
        span.in_scope(|| info!("{note}"));
    }
    let (cache, git_dir, commit, source_name, tag) =
        (cache.clone(), cache.git_dir(&key), rel.commit.clone(), rel.source.clone(), rel.tag.clone());
    let mut index = index;
    let task = tokio::task::spawn_blocking(move || {
        let result = cache.release(&mut index, &source_name, &key, &tag, &commit, |tmp| git::materialise(&git_dir, &commit, tmp));
        (index, result)
    });
    let (index, result) = match task.await {
        Ok(pair) => pair,
        Err(join) => {
            prepared.outcome = Err(format!("materialise task failed: {join}"));
            return (prepared, Index::default());
        }
    };
    prepared.outcome = match result {
        Ok((tree, fetched)) => {
            span.in_scope(|| info!(fetched, path = %tree.display(), "release ready"));
            Ok(PreparedRelease { release: rel, tree, fetched, note: selection.note })
        }
        Err(e) => {
            span.in_scope(|| error!(error = %e, "cannot cache release"));
            Err(e.to_string())
        }
    };
    (prepared, index)
}

/// Renders and applies a prepared release to each cluster of `sub`, writing status.
fn sync_subscription(
    target: &DirectoryTarget,
    sub: &Subscription,
    prepared: &Prepared,
    source_error: Option<&String>,
    write_status: bool,
) -> Vec<ClusterReport> {
    let release = match &prepared.outcome {
        Ok(p) => p,
        Err(msg) => {
            let msg = match source_error {
                Some(e) => format!("{msg} (source poll failed: {e})"),
                None => msg.clone(),
            };
            return sub
                .clusters
                .iter()
                .map(|c| {
                    let status = ClusterStatus::failed(sub, c, None, target.read_status(c), Reason::ReleaseUnavailable, msg.clone());
                    finish(target, sub, c, status, ChangeSet::default(), write_status)
                })
                .collect();
        }
    };
    let rel = &release.release;
    let span = info_span!("release", source = %rel.source, tag = %rel.tag, commit = %short(&rel.commit));
    let _guard = span.enter();
    let manifests = Manifests::load(&release.tree, &sub.path);
    sub.clusters
        .iter()
        .map(|c| {
            let rendered = manifests.as_ref().map_err(Clone::clone).and_then(|m| m.render(rel, c));
            match rendered {
                Ok(objects) => {
                    let changes = target.sync(c, objects);
                    let status = ClusterStatus::applied(sub, c, rel, &changes);
                    info!(cluster = %format!("{}/{}", c.namespace, c.name), ready = status.ready, "synced: {}", changes.summary());
                    for e in changes.entries.iter().filter(|e| !e.action.is_synced()) {
                        warn!(cluster = %format!("{}/{}", c.namespace, c.name), object = %e.object, "{}: {}", e.action, e.message);
                    }
                    finish(target, sub, c, status, changes, write_status)
                }
                Err(errs) => {
                    error!(cluster = %format!("{}/{}", c.namespace, c.name), "render failed; the applied release stays: {errs}");
                    let status = ClusterStatus::failed(sub, c, Some(rel), target.read_status(c), Reason::RenderFailed, errs.to_string());
                    finish(target, sub, c, status, ChangeSet::default(), write_status)
                }
            }
        })
        .collect()
}

fn finish(
    target: &DirectoryTarget,
    sub: &Subscription,
    cluster: &ClusterConfig,
    status: ClusterStatus,
    changes: ChangeSet,
    write_status: bool,
) -> ClusterReport {
    if write_status && let Err(e) = target.write_status(cluster, &status) {
        error!(cluster = %format!("{}/{}", cluster.namespace, cluster.name), error = %e, "cannot write status");
    }
    ClusterReport { subscription: sub.name.clone(), cluster: cluster.clone(), status, changes }
}

/// Renders every subscription's release into `out` without status files (`stacksync render`).
///
/// # Errors
/// As [`pass`].
pub async fn render_to(config: &Config, out: &std::path::Path) -> cache::Result<PassReport> {
    let mut report = pass(config, None, false).await?;
    let target = DirectoryTarget::new(out);
    for (sub, prepared) in config.subscriptions.iter().zip(report.prepared.clone()) {
        report.clusters.extend(sync_subscription(&target, sub, &prepared, report.source_errors.get(&sub.source), false));
    }
    Ok(report)
}
