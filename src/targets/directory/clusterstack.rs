//! Cluster-stack subscriptions in a pass: load each release once, render its ClusterClass once
//! per namespace and its addons once per cluster (helm runs in parallel, bounded), then write
//! `<ns>/cluster-class/` and `<ns>/<cluster>[/<stage>]/` and each cluster's status.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use super::sync::finish;
use super::writer::DirectoryTarget;
use crate::config::{Config, Format, Subscription};
use crate::controller::pipeline;
use crate::controller::{ClusterReport, Context, PassReport, Prepared};
use crate::model::Object;
use crate::model::cluster::{ClusterConfig, ClusterObjects};
use crate::render::clusterstack::RenderedStage;
use crate::render::{Error, Errors};
use crate::status::{ClusterStatus, Reason};
use applier::{Action, ChangeSet, Entry, ObjectRef};

type Rendered<T> = Result<T, Errors>;

enum Done {
    Class(usize, String, Rendered<Vec<Object>>),
    Addon(usize, usize, Rendered<Vec<RenderedStage>>),
}

/// Renders and writes the cluster-stack subscriptions in `staged` (each with a prepared
/// release). One failing release, namespace or cluster never stops the others; a cluster that
/// cannot be rendered keeps what was written before.
pub(super) async fn sync(
    config: &Config,
    target: &DirectoryTarget,
    staged: &[(&Subscription, Prepared)],
    write_status: bool,
) -> Vec<ClusterReport> {
    // The same pipeline as the Kubernetes target: one helm, memoised layouts, a work directory.
    let ctx = match Context::new(config.clone()) {
        Ok(c) => c,
        Err(e) => return fail_all(target, staged, &format!("cannot open the cache: {e}"), write_status),
    };
    sync_with(&ctx, target, staged, write_status).await
}

/// [`sync`] with the process's long-lived context (the daemon's): its helm, memoised layouts
/// and work directory.
pub(super) async fn sync_with(
    ctx: &std::sync::Arc<Context>,
    target: &DirectoryTarget,
    staged: &[(&Subscription, Prepared)],
    write_status: bool,
) -> Vec<ClusterReport> {
    // A release in use that no longer verifies is not rendered: its clusters' statuses say why,
    // and the `cluster-class/` directories of its namespaces stay as they are.
    let mut held = Vec::new();
    let staged: Vec<(&Subscription, Prepared)> = staged
        .iter()
        .map(|(sub, prepared)| match &prepared.outcome {
            Ok(p) => match super::sync::unverified(target, sub, p) {
                Some(m) => {
                    held.extend(super::sync::hold_unverified(target, sub, &p.release, &m, write_status));
                    let held = crate::controller::PrepareError::Unverified { reason: m.reason, message: m.message.clone() };
                    (*sub, Prepared { outcome: Err(std::sync::Arc::new(held)), ..prepared.clone() })
                }
                None => (*sub, prepared.clone()),
            },
            Err(_) => (*sub, prepared.clone()),
        })
        .collect();
    let mut reports = render_and_write(ctx, target, &staged, write_status).await;
    reports.extend(held);
    reports
}

async fn render_and_write(
    ctx: &std::sync::Arc<Context>,
    target: &DirectoryTarget,
    staged: &[(&Subscription, Prepared)],
    write_status: bool,
) -> Vec<ClusterReport> {
    if let Err(e) = ctx.work_dir() {
        return fail_all(target, staged, &e.to_string(), write_status);
    }
    if let Err(e) = ctx.helm().await {
        error!("{e}");
        return fail_all(target, staged, &e.to_string(), write_status);
    }

    let mut layouts: Vec<Rendered<()>> = Vec::new();
    for (sub, prepared) in staged {
        let Ok(p) = &prepared.outcome else {
            layouts.push(Err(Errors(vec![Error::Release { file: ".".into(), message: "release unavailable".into() }])));
            continue;
        };
        let loaded = ctx.layout(sub, p).await;
        if let Err(e) = &loaded {
            error!(subscription = %sub.name, tag = %p.release.tag, "cluster-stack release is invalid: {e}");
        }
        layouts.push(loaded.map(|_| ()).map_err(|e| e.into_errors(&sub.path)));
    }

    let mut jobs = JoinSet::new();
    let progress = crate::model::progress::reporter();
    for (i, (sub, prepared)) in staged.iter().enumerate() {
        let (Ok(()), Ok(p)) = (&layouts[i], &prepared.outcome) else { continue };
        progress.add("Clusters rendered", sub.clusters.len() as u64);
        let namespaces: BTreeSet<&str> = sub.clusters.iter().map(|c| c.namespace.as_str()).collect();
        for ns in namespaces {
            let (ctx, sub, p, ns) = (ctx.clone(), (*sub).clone(), p.clone(), ns.to_owned());
            jobs.spawn(async move {
                let r = pipeline::cluster_class(&ctx, &sub, &p, &ns).await.map_err(|e| e.into_errors(&sub.path));
                Done::Class(i, ns, r)
            });
        }
        for (j, c) in sub.clusters.iter().enumerate() {
            let (ctx, sub, p, c) = (ctx.clone(), (*sub).clone(), p.clone(), c.clone());
            jobs.spawn(async move {
                let r = pipeline::addons(&ctx, &sub, &p, &c).await.map(|r| r.stages).map_err(|e| e.into_errors(&sub.path));
                Done::Addon(i, j, r)
            });
        }
    }
    let mut classes: BTreeMap<(usize, String), Rendered<Vec<Object>>> = BTreeMap::new();
    let mut addons: BTreeMap<(usize, usize), Rendered<Vec<RenderedStage>>> = BTreeMap::new();
    while let Some(done) = jobs.join_next().await {
        match done {
            Ok(Done::Class(i, ns, r)) => {
                classes.insert((i, ns), r);
            }
            Ok(Done::Addon(i, j, r)) => {
                progress.done();
                addons.insert((i, j), r);
            }
            Err(join) => error!("render task failed: {join}"),
        }
    }

    let class_entries = write_cluster_classes(target, staged, &layouts, &classes);
    let mut reports = Vec::new();
    for (i, (sub, prepared)) in staged.iter().enumerate() {
        let Ok(p) = &prepared.outcome else { continue };
        let rel = &p.release;
        for (j, c) in sub.clusters.iter().enumerate() {
            let who = format!("{}/{}", c.namespace, c.name);
            let mut errors = Vec::new();
            if let Err(e) = &layouts[i] {
                errors.extend(e.0.iter().cloned());
            }
            if let Some(Err(e)) = classes.get(&(i, c.namespace.clone())) {
                errors.extend(e.0.iter().cloned());
            }
            match addons.get(&(i, j)) {
                Some(Err(e)) => errors.extend(e.0.iter().cloned()),
                None if errors.is_empty() => {
                    errors.push(Error::Release { file: sub.path.clone(), message: "the render task did not finish".into() });
                }
                _ => {}
            }
            if let (true, Some(Ok(stages))) = (errors.is_empty(), addons.get(&(i, j))) {
                let objects = stages.iter().map(|s| s.objects.len()).sum();
                if write_status && let Err(report) = super::sync::record_progress(target, sub, c, rel, objects) {
                    reports.push(*report);
                    continue;
                }
                let mut changes = ChangeSet::default();
                changes.entries.extend(class_entries.get(&(i, c.namespace.clone())).cloned().unwrap_or_default());
                changes.entries.extend(write_addons(target, c, stages).entries);
                let before = target.read_status(c).and_then(|s| s.applied_release);
                let status = ClusterStatus::applied(sub, c, rel, &changes, before);
                info!(cluster = %who, subscription = %sub.name, tag = %rel.tag, ready = status.ready, "synced: {}", changes.summary());
                for e in changes.entries.iter().filter(|e| !e.is_synced()) {
                    warn!(cluster = %who, object = %e.object, "{}: {}", e.action, e.message);
                }
                reports.push(finish(target, sub, c, status, changes, write_status));
            } else {
                let errs = Errors(errors);
                error!(cluster = %who, subscription = %sub.name, tag = %rel.tag, "render failed; the applied release stays: {errs}");
                let status = ClusterStatus::failed(sub, c, Some(rel), target.read_status(c), Reason::RenderFailed, errs.to_string());
                reports.push(finish(target, sub, c, status, ChangeSet::default(), write_status));
            }
        }
    }
    reports
}

/// Writes each namespace's `cluster-class/` directory with the ClusterClass objects of every
/// subscription that has clusters there. When one of them failed, the directory is left as it
/// was (so no working ClusterClass is pruned) and the others' objects are Skipped.
fn write_cluster_classes(
    target: &DirectoryTarget,
    staged: &[(&Subscription, Prepared)],
    layouts: &[Rendered<()>],
    classes: &BTreeMap<(usize, String), Rendered<Vec<Object>>>,
) -> BTreeMap<(usize, String), Vec<Entry>> {
    let mut users: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for (i, (sub, _)) in staged.iter().enumerate() {
        for c in &sub.clusters {
            users.entry(c.namespace.as_str()).or_default().insert(i);
        }
    }
    let mut out = BTreeMap::new();
    for (ns, subs) in users {
        let mut failed: Vec<&str> = Vec::new();
        let mut merged: BTreeMap<ObjectRef, (Object, BTreeSet<usize>)> = BTreeMap::new();
        for &i in &subs {
            match (layouts.get(i), classes.get(&(i, ns.to_owned()))) {
                (Some(Ok(_)), Some(Ok(objects))) => {
                    for o in objects {
                        let key = ObjectRef::from(o);
                        match merged.get_mut(&key) {
                            Some((first, owners)) if first.body == o.body => {
                                owners.insert(i);
                            }
                            Some(_) => failed.push(staged[i].0.name.as_str()),
                            None => {
                                merged.insert(key, (o.clone(), BTreeSet::from([i])));
                            }
                        }
                    }
                }
                _ => failed.push(staged[i].0.name.as_str()),
            }
        }
        if !failed.is_empty() {
            let message = format!("{ns}/cluster-class was not updated: subscription(s) {} could not be rendered there", failed.join(", "));
            warn!(namespace = ns, "{message}");
            for (o, owners) in merged.values() {
                for i in owners {
                    let entry: &mut Vec<Entry> = out.entry((*i, ns.to_owned())).or_default();
                    entry.push(Entry::for_object(o, Action::Skipped(applier::changeset::SkipReason::Held), message.clone()));
                }
            }
            continue;
        }
        let owners: BTreeMap<ObjectRef, BTreeSet<usize>> = merged.iter().map(|(k, (_, o))| (k.clone(), o.clone())).collect();
        let objects: Vec<Object> = merged.into_values().map(|(o, _)| o).collect();
        let changes = target.sync_dir(&target.class_dir(ns), objects);
        for e in changes.entries {
            // Pruned entries (and failed prunes) concern every subscription of the namespace.
            let to: Vec<usize> = owners.get(&e.object).map_or_else(|| subs.iter().copied().collect(), |o| o.iter().copied().collect());
            for i in to {
                out.entry((i, ns.to_owned())).or_insert_with(Vec::new).push(e.clone());
            }
        }
    }
    out
}

/// Writes a cluster's addon objects: a single chart into the cluster directory, stages into
/// `<cluster>/<stage>/` in order; directories of dropped stages are removed.
pub(crate) fn write_addons(target: &DirectoryTarget, cluster: &ClusterConfig, stages: &[RenderedStage]) -> ChangeSet {
    let dir = target.cluster_dir(cluster);
    let mut changes = ChangeSet::default();
    let mut keep = BTreeSet::new();
    let mut top_level = Vec::new();
    for stage in stages {
        match &stage.name {
            None => top_level.extend(stage.objects.iter().cloned()),
            Some(name) => {
                keep.insert(name.clone());
                changes.entries.extend(target.sync_dir(&dir.join(name), stage.objects.clone()).entries);
            }
        }
    }
    changes.entries.extend(target.sync_dir(&dir, top_level).entries);
    changes.entries.extend(target.prune_subdirs(&dir, &keep).entries);
    changes
}

fn fail_all(target: &DirectoryTarget, staged: &[(&Subscription, Prepared)], message: &str, write_status: bool) -> Vec<ClusterReport> {
    let mut reports = Vec::new();
    for (sub, prepared) in staged {
        let rel = prepared.outcome.as_ref().ok().map(|p| &p.release);
        for c in &sub.clusters {
            let status = ClusterStatus::failed(sub, c, rel, target.read_status(c), Reason::RenderFailed, message.to_owned());
            reports.push(finish(target, sub, c, status, ChangeSet::default(), write_status));
        }
    }
    reports
}

/// Reads a `--cluster` file: any multi-document YAML holding exactly one `Cluster` (what
/// `clusterctl generate cluster` prints, say). Its control plane and infrastructure cluster are
/// the documents its `spec.controlPlaneRef` / `spec.infrastructureRef` name (kind and name; without
/// a ref, a kind ending in `ControlPlane` / in `Cluster`); every other document is ignored.
///
/// # Errors
/// A message naming the file and what is wrong.
pub fn read_cluster_file(path: &Path) -> Result<ClusterConfig, ClusterFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Read { file: file.clone(), source })?;
    let docs: Vec<Value> = kubeyaml::values(&text).map_err(|e| ClusterFileError::Yaml {
        file: file.clone(),
        line: e.mark.line,
        message: e.message.to_string(),
    })?;
    let text_at = |v: &Value, p: &[&str]| p.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).map(str::to_owned);
    let kind_of = |v: &Value| text_at(v, &["kind"]).unwrap_or_default();
    let mut clusters: Vec<Value> = docs.iter().filter(|d| kind_of(d) == "Cluster").cloned().collect();
    let cluster = match clusters.len() {
        1 => clusters.remove(0),
        0 => return Err(ClusterFileError::NoCluster { file }),
        _ => {
            let names: Vec<String> = clusters.iter().filter_map(|c| text_at(c, &["metadata", "name"])).collect();
            return Err(ClusterFileError::ManyClusters { file, n: clusters.len(), names: names.join(", ") });
        }
    };
    let name = text_at(&cluster, &["metadata", "name"]).ok_or_else(|| ClusterFileError::NoName { file: file.clone() })?;
    let namespace = text_at(&cluster, &["metadata", "namespace"]).unwrap_or_else(|| "default".to_owned());
    let pick = |slot: &str, suffix: &str| -> Result<Option<Value>, ClusterFileError> {
        let r_kind = text_at(&cluster, &["spec", slot, "kind"]);
        let r_name = text_at(&cluster, &["spec", slot, "name"]);
        let found: Vec<&Value> = docs
            .iter()
            .filter(|d| {
                let kind = kind_of(d);
                match (&r_kind, &r_name) {
                    (Some(k), Some(n)) => kind == *k && text_at(d, &["metadata", "name"]).as_deref() == Some(n.as_str()),
                    (Some(k), None) => kind == *k,
                    _ => kind != "Cluster" && kind.ends_with(suffix),
                }
            })
            .collect();
        match found.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((*one).clone())),
            _ => Err(ClusterFileError::Ambiguous { file: file.clone(), slot: slot.to_owned() }),
        }
    };
    let objects = ClusterObjects {
        control_plane: pick("controlPlaneRef", "ControlPlane")?,
        infra_cluster: pick("infrastructureRef", "Cluster")?,
        cluster: Some(cluster),
    };
    Ok(ClusterConfig { name, namespace, values: BTreeMap::new(), objects })
}

/// A `--cluster` file that does not describe one Cluster. Names the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    #[error("{file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}: invalid YAML: {message}")]
    Yaml { file: String, line: usize, message: String },
    #[error("{file}: no `kind: Cluster` object; expected exactly one Cluster")]
    NoCluster { file: String },
    #[error("{file}: {n} Cluster objects ({names}); expected exactly one")]
    ManyClusters { file: String, n: usize, names: String },
    #[error("{file}: the Cluster has no metadata.name")]
    NoName { file: String },
    #[error("{file}: more than one object could be the Cluster's `{slot}`; name it in spec.{slot}")]
    Ambiguous { file: String, slot: String },
}

/// `stacksync render --cluster FILE`: renders what one cluster would get, without polling any
/// source (the release comes from the cache). The subscription is the one listing the cluster,
/// else the only cluster-stack subscription whose stack the Cluster's `spec.topology.class`
/// names, else the only cluster-stack subscription.
///
/// # Errors
/// The cluster matches no subscription, or the cache cannot be opened.
pub async fn render_cluster(config: &Config, cluster: ClusterConfig, out: &Path) -> anyhow::Result<PassReport> {
    let stack_subs: Vec<&Subscription> = config.subscriptions.iter().filter(|s| s.format == Format::ClusterStack).collect();
    let class = cluster.objects.cluster.as_ref().and_then(|c| c.get("spec")?.get("topology")?.get("class")?.as_str().map(str::to_owned));
    let listed = stack_subs.iter().find(|s| s.clusters.iter().any(|c| c.name == cluster.name && c.namespace == cluster.namespace));
    let by_class: Vec<&&Subscription> =
        stack_subs.iter().filter(|s| class.as_deref().zip(s.families()).is_some_and(|(cl, f)| f.covers_class(cl))).collect();
    let sub: &Subscription = match (listed, by_class.as_slice(), stack_subs.as_slice()) {
        (Some(s), _, _) => s,
        (None, [s], _) => s,
        (None, [], [s]) => s,
        _ => {
            let names: Vec<&str> = stack_subs.iter().map(|s| s.name.as_str()).collect();
            anyhow::bail!(
                "cluster {}/{} matches no single cluster-stack subscription (topology class: {}; subscriptions: {})",
                cluster.namespace,
                cluster.name,
                class.as_deref().unwrap_or("none"),
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            );
        }
    };
    let mut one = sub.clone();
    let values = sub.clusters.iter().find(|c| c.name == cluster.name && c.namespace == cluster.namespace).map(|c| c.values.clone());
    one.clusters = vec![ClusterConfig { values: values.unwrap_or_default(), ..cluster }];
    // A Cluster with a topology class gets the release its class names, as in a cluster.
    let prepared = match (&class, one.families()) {
        (Some(class), Some(families)) => {
            let ctx = crate::controller::Context::new(config.clone())?;
            let tags = ctx.tags(&one).await;
            let rel = crate::release::for_class(&one.source, class, families, &tags.known)
                .map_err(|e| anyhow::anyhow!("{e} (run `stacksync fetch` first)"))?;
            let outcome = ctx.prepare(&rel).await;
            Prepared { subscription: one.name.clone(), source: one.source.clone(), outcome }
        }
        _ => {
            let ctx = Context::new(config.clone())?;
            let prepared = ctx.prepare_subscription(&one).await;
            ctx.save_index().await?;
            prepared
        }
    };
    let target = DirectoryTarget::new(out);
    let mut report = PassReport::default();
    match &prepared.outcome {
        Ok(_) => report.clusters = sync(config, &target, &[(&one, prepared.clone())], false).await,
        Err(e) => anyhow::bail!("no cached release for subscription `{}` (run `stacksync fetch` first): {e}", one.name),
    }
    report.prepared.push(prepared);
    Ok(report)
}
