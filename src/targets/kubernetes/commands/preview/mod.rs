//! `stacksync preview`: what a release not (yet) offered would do to every Cluster its
//! subscription would give it to. Each Cluster's addons are rendered by the reconcile's own
//! code (once per distinct set of values: the render memo) and previewed with server-side
//! dry-runs against its workload cluster; the release's ClusterClass once per namespace against
//! the management cluster; what the release no longer renders is found from each ClusterSync's
//! inventory. Workload clusters are read side by side, as many at once as the daemon's
//! reconciles. Reads and dry-runs only: no apply, no status, no Event, nothing cached as
//! verified ([`crate::controller::preview`]).

mod report;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use serde::Serialize;
use tracing::Instrument;

use super::super::Error;
use super::super::reconcile::cluster::key_of;
use super::super::reconcile::decide::{control_plane_ready, is_paused, subscription_for, topology_class};
use super::super::reconcile::upgrade::HOOK;
use super::super::reconcile::workload::reachable;
use super::management::Management;
use crate::config::{Format, Subscription};
use crate::controller::Context;
use crate::controller::preview::{Candidate, Origin};
use crate::model::ClusterKey;
use crate::render::clusterstack::INSTALL_HOOK;
use crate::status::crd::{ClusterSync, ClusterSyncStatus};
use applier::ssa::{Applier, Inventory, Planned, Preview};

pub use report::{markdown, text};

/// The `apiVersion` of `-o json`: its shape changes only with a new version.
pub const API_VERSION: &str = "stacksync.io/v1alpha1";

/// What a preview looks at.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only this Cluster.
    pub only: Option<ClusterKey>,
    /// Clusters previewed at once.
    pub concurrency: usize,
    /// Keep each change's unified diff (`--diff`). Without, only the changed fields are kept: a
    /// fleet's diffs are most of a preview's memory.
    pub diffs: bool,
}

/// What a release would do to a fleet (`-o json`, documented in docs/preview.md).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetPreview {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub subscription: String,
    pub release: ReleaseInfo,
    pub summary: Summary,
    /// The release's ClusterClass and templates, per namespace of the Clusters previewed.
    pub management: Vec<NamespacePreview>,
    pub clusters: Vec<ClusterPreview>,
    /// `rollout:` subscriptions: the waves the Clusters would be moved in (`namespace/name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waves: Option<Vec<Vec<String>>>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseInfo {
    pub tag: String,
    pub source: String,
    /// The tag's commit or digest; for a local release the digest of its files.
    pub revision: String,
    /// `local` (with `path`) or `source`.
    pub origin: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A cluster stack's Kubernetes version (`metadata.yaml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

/// The fleet in numbers.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub clusters: usize,
    /// Clusters some object of would change.
    pub changed: usize,
    pub unchanged: usize,
    /// Clusters that could not be judged: unreachable, not ready, or an error.
    pub unjudged: usize,
    pub unreachable: usize,
    pub not_ready: usize,
    pub errors: usize,
    /// Objects of workload clusters by what would happen to them.
    pub create: usize,
    pub update: usize,
    pub prune: usize,
    pub delete: usize,
    /// Workloads whose pods would be replaced, over all Clusters.
    pub restarts: usize,
    /// Clusters whose Kubernetes version the move changes (held by `BeforeClusterUpgrade`).
    pub kubernetes_upgrades: usize,
}

/// The ClusterClass of one namespace.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespacePreview {
    pub namespace: String,
    pub changes: Vec<ObjectChange>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ObjectFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How one Cluster was judged.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Judged {
    Changes,
    Unchanged,
    Unreachable,
    NotReady,
    Error,
}

impl Judged {
    fn judged(self) -> bool {
        matches!(self, Judged::Changes | Judged::Unchanged)
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreview {
    /// `namespace/name`.
    pub cluster: String,
    pub result: Judged,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The release its ClusterSync says is applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// Its Kubernetes version now and after the move (cluster stacks with a topology version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesMove>,
    /// The addon stages that would run one by one before the apply, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StagePreview>,
    pub changes: Vec<ObjectChange>,
    /// Workloads whose pods would be replaced (`Kind/namespace/name`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ObjectFailure>,
    /// `rollout:` subscriptions: the wave it would be moved in (1-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<usize>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesMove {
    pub from: String,
    pub to: String,
    /// The version changes: Cluster API asks `BeforeClusterUpgrade` first, and stacksync holds
    /// the upgrade until the stages are done.
    pub held_by_before_cluster_upgrade: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StagePreview {
    /// `BeforeClusterUpgrade` (a release change) or `AfterControlPlaneInitialized` (a first
    /// install whose stages wait).
    pub hook: String,
    pub name: String,
    /// `apply` or `delete`.
    pub action: String,
    /// `waitForPreCondition`: the CEL expression and the objects it reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_before: Option<String>,
    /// `waitForPostCondition`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_after: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectChange {
    /// `Kind/namespace/name` (`Kind/name` when cluster-scoped).
    pub object: String,
    pub api_version: String,
    /// `create`, `update`, `prune` or `delete`.
    pub change: String,
    /// An update's changed field paths.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    pub restarts: bool,
    /// Judged without the server (the dry-run was forbidden): see docs/preview.md.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub client_side: bool,
    /// Unified diff, live → desired (with `--diff`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub diff: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectFailure {
    pub object: String,
    pub message: String,
}

impl FleetPreview {
    /// Whether anything would change.
    pub fn changes(&self) -> bool {
        self.summary.changed > 0 || self.management.iter().any(|n| !n.changes.is_empty())
    }

    /// Whether some Cluster or namespace could not be judged.
    pub fn unjudged(&self) -> bool {
        self.summary.unjudged > 0
            || self.management.iter().any(|n| n.error.is_some() || !n.failures.is_empty())
            || self.clusters.iter().any(|c| !c.failures.is_empty())
    }
}

/// Previews `candidate` on every Cluster its subscription covers (or `options.only`).
///
/// # Errors
/// The management cluster cannot be reached or its Clusters listed; a Cluster asked for that
/// does not exist or that the subscription does not cover.
pub async fn preview(ctx: Arc<Context>, candidate: &Candidate, options: &Options) -> Result<FleetPreview, Error> {
    let mgmt = Management::connect(ctx.clone()).await?;
    let sub = &candidate.subscription;
    let clusters = mgmt.clusters_of(options.only.as_ref()).await?;
    let config = ctx.config();
    let covered: Vec<(DynamicObject, ClusterKey, crate::model::cluster::ClusterConfig)> = clusters
        .into_iter()
        .filter_map(|obj| {
            let key = key_of(&obj)?;
            let labels = obj.metadata.labels.clone().unwrap_or_default();
            let class = topology_class(&obj.data);
            let (s, c) = subscription_for(&config, &key, &labels, class.as_deref())?;
            (s.name == sub.name).then_some((obj, key, c))
        })
        .collect();
    if let Some(key) = &options.only
        && covered.is_empty()
    {
        return Err(Error::Preview(format!("Cluster {key} does not exist or subscription `{}` does not cover it", sub.name)));
    }
    let layout = match sub.format {
        Format::ClusterStack => Some(ctx.layout(sub, &candidate.prepared).await.map_err(|e| Error::Preview(e.to_string()))?),
        Format::Manifests => None,
    };
    let kubernetes = layout.as_ref().map(|l| l.metadata.kubernetes.clone());
    let waves = sub.rollout.as_ref().map(|r| {
        let members: Vec<(String, bool)> = covered
            .iter()
            .map(|(obj, key, _)| {
                let labels = obj.metadata.labels.clone().unwrap_or_default();
                let canary = !r.canary_labels.is_empty() && r.canary_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
                (key.to_string(), canary)
            })
            .collect();
        super::super::plan(&r.waves, &members)
    });

    let tag = candidate.prepared.release.tag.clone();
    let hooks: BTreeMap<&str, Vec<StagePreview>> = [INSTALL_HOOK, HOOK]
        .into_iter()
        .map(|hook| (hook, layout.as_ref().map(|l| stages_of(hook, l.hook_stages(hook))).unwrap_or_default()))
        .collect();
    let concurrency = options.concurrency.max(1);
    let progress = crate::model::progress::reporter();
    progress.add("Clusters previewed", covered.len() as u64);
    let progress = &progress;
    let fleet = Fleet { mgmt: &mgmt, candidate, hooks: &hooks, kubernetes: kubernetes.as_deref(), diffs: options.diffs };
    let fleet = &fleet;
    let mut out: Vec<ClusterPreview> = futures_util::stream::iter(covered.iter())
        .map(|(obj, key, c)| {
            let span = tracing::info_span!("cluster", cluster = %key);
            async move {
                let _done = progress.tick();
                one(fleet, obj, key, c.clone()).await
            }
            .instrument(span)
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    if let Some(waves) = &waves {
        let wave_of: std::collections::HashMap<&str, usize> =
            waves.iter().enumerate().flat_map(|(i, w)| w.iter().map(move |c| (c.as_str(), i + 1))).collect();
        for c in &mut out {
            c.wave = wave_of.get(c.cluster.as_str()).copied();
        }
    }

    let mut management = Vec::new();
    if sub.format == Format::ClusterStack {
        let namespaces: std::collections::BTreeSet<&str> = covered.iter().map(|(_, k, _)| k.namespace.as_str()).collect();
        for ns in namespaces {
            management.push(match mgmt.class_preview_prepared(sub, ns, &candidate.prepared).await {
                Ok(p) => {
                    let (changes, failures) = changes_of(p, options.diffs);
                    NamespacePreview { namespace: ns.to_owned(), changes, failures, error: None }
                }
                Err(e) => {
                    NamespacePreview { namespace: ns.to_owned(), changes: Vec::new(), failures: Vec::new(), error: Some(e.to_string()) }
                }
            });
        }
    }

    let rel = &candidate.prepared.release;
    let (origin, path) = match &candidate.origin {
        Origin::Local { path, .. } => ("local", Some(path.display().to_string())),
        Origin::Source => ("source", None),
    };
    Ok(FleetPreview {
        api_version: API_VERSION,
        kind: "FleetPreview",
        subscription: sub.name.clone(),
        release: ReleaseInfo {
            tag,
            source: rel.source.clone(),
            revision: match &candidate.origin {
                Origin::Local { digest, .. } => digest.clone(),
                Origin::Source => rel.commit.clone(),
            },
            origin,
            path,
            kubernetes,
            signed_by: candidate.prepared.signed_by.clone(),
        },
        summary: summarise(&out),
        management,
        clusters: out,
        waves,
    })
}

fn summarise(clusters: &[ClusterPreview]) -> Summary {
    let mut s = Summary { clusters: clusters.len(), ..Summary::default() };
    for c in clusters {
        match c.result {
            Judged::Changes => s.changed += 1,
            Judged::Unchanged => s.unchanged += 1,
            Judged::Unreachable => s.unreachable += 1,
            Judged::NotReady => s.not_ready += 1,
            Judged::Error => s.errors += 1,
        }
        if !c.result.judged() {
            s.unjudged += 1;
        }
        for o in &c.changes {
            match o.change.as_str() {
                "create" => s.create += 1,
                "update" => s.update += 1,
                "prune" => s.prune += 1,
                _ => s.delete += 1,
            }
        }
        s.restarts += c.restarts.len();
        s.kubernetes_upgrades += usize::from(c.kubernetes.as_ref().is_some_and(|k| k.held_by_before_cluster_upgrade));
    }
    s
}

/// The stages of `hook` as a preview shows them.
fn stages_of(hook: &str, stages: &[crate::render::clusterstack::StageRef]) -> Vec<StagePreview> {
    let wait = |w: &Option<crate::render::cel::WaitFor>| {
        w.as_ref().map(|w| {
            let objects: Vec<String> = w
                .objects
                .iter()
                .map(|o| {
                    if o.namespace.is_empty() {
                        format!("{} = {}/{}", o.key, o.kind, o.name)
                    } else {
                        format!("{} = {}/{}/{}", o.key, o.kind, o.namespace, o.name)
                    }
                })
                .collect();
            format!("{} (reading {})", w.conditions, objects.join(", "))
        })
    };
    stages
        .iter()
        .map(|s| StagePreview {
            hook: hook.to_owned(),
            name: s.name.clone(),
            action: match s.action {
                crate::model::StageAction::Apply => "apply".into(),
                crate::model::StageAction::Delete => "delete".into(),
            },
            waits_before: wait(&s.pre),
            waits_after: wait(&s.post),
        })
        .collect()
}

/// The changes and failures of a preview, as the report shows them.
fn changes_of(p: Preview, diffs: bool) -> (Vec<ObjectChange>, Vec<ObjectFailure>) {
    let changes = p
        .changes
        .into_iter()
        .map(|c| ObjectChange {
            object: c.object.to_string(),
            api_version: c.object.api_version.clone(),
            change: c.change.to_string(),
            fields: c.fields,
            restarts: c.restarts,
            client_side: c.client_side,
            diff: if diffs { c.diff } else { String::new() },
        })
        .collect();
    let failures = p.failures.into_iter().map(|(o, message)| ObjectFailure { object: o.to_string(), message }).collect();
    (changes, failures)
}

fn judged(cluster: &ClusterKey, result: Judged, message: String) -> ClusterPreview {
    ClusterPreview {
        cluster: cluster.to_string(),
        result,
        message: Some(message),
        applied: None,
        kubernetes: None,
        stages: Vec::new(),
        changes: Vec::new(),
        restarts: Vec::new(),
        failures: Vec::new(),
        wave: None,
    }
}

/// What every Cluster's preview shares.
struct Fleet<'a> {
    mgmt: &'a Management,
    candidate: &'a Candidate,
    /// The release's stages by hook.
    hooks: &'a BTreeMap<&'a str, Vec<StagePreview>>,
    /// The release's Kubernetes version (cluster stacks).
    kubernetes: Option<&'a str>,
    diffs: bool,
}

async fn one(fleet: &Fleet<'_>, obj: &DynamicObject, key: &ClusterKey, c: crate::model::cluster::ClusterConfig) -> ClusterPreview {
    let Fleet { mgmt, candidate, hooks, kubernetes, diffs } = *fleet;
    let sub: &Subscription = &candidate.subscription;
    let tag = &candidate.prepared.release.tag;
    let syncs: Api<ClusterSync> = Api::namespaced(mgmt.client().clone(), &key.namespace);
    let previous: ClusterSyncStatus = match syncs.get_opt(&key.name).await {
        Ok(p) => p.and_then(|p| p.status).unwrap_or_default(),
        Err(e) => return judged(key, Judged::Error, format!("cannot read its ClusterSync: {}", super::super::error::kube_error(&e))),
    };
    let applied = previous.applied_release.as_ref().map(|r| r.tag.clone());
    let mut p = judged(key, Judged::Unchanged, String::new());
    p.message = None;
    p.applied.clone_from(&applied);
    if let (Some(to), Some(from)) = (kubernetes, obj.data.pointer("/spec/topology/version").and_then(|v| v.as_str())) {
        p.kubernetes = Some(KubernetesMove { from: from.to_owned(), to: to.to_owned(), held_by_before_cluster_upgrade: from != to });
    }
    if sub.format == Format::ClusterStack && applied.as_deref() != Some(tag.as_str()) {
        let hook = if applied.is_none() { INSTALL_HOOK } else { HOOK };
        let stages = hooks.get(hook).cloned().unwrap_or_default();
        // A first install whose stages do not wait applies them all at once.
        if hook == HOOK || stages.iter().any(|s| s.waits_before.is_some() || s.waits_after.is_some()) {
            p.stages = stages;
        }
    }
    if !control_plane_ready(&obj.data) {
        p.result = Judged::NotReady;
        p.message = Some("its control plane is not ready: nothing is applied until it is".into());
        return p;
    }
    if is_paused(obj) {
        p.message = Some("paused: nothing is applied while it is".into());
    }
    let c = mgmt.with_live_objects(obj, c).await;
    let rendered = match mgmt.render(sub, &candidate.prepared, &c, false).await {
        Ok(r) => r,
        Err(e) => {
            p.result = Judged::Error;
            p.message = Some(format!("cannot render {tag}: {e}"));
            return p;
        }
    };
    let super::super::Workload { client, discovery } = match mgmt.workload(key, &c).await {
        Ok(w) => w,
        Err(e) => {
            p.result = Judged::Unreachable;
            p.message = Some(e.to_string());
            return p;
        }
    };
    if let Err(e) = reachable(&client).await {
        p.result = Judged::Unreachable;
        p.message = Some(e.to_string());
        return p;
    }
    let mut options = mgmt.apply_options(sub, &c);
    // What the charts generate stays as it is live: not a change, not a restart.
    options.generated = crate::targets::kubernetes::reconcile::generated::recorded(&previous.generated, &rendered.generated);
    let applier = Applier::new(client, options).with_discovery(discovery);
    let preview = applier.preview(&rendered.stages, &Inventory::from_lines(&previous.inventory)).await;
    let (changes, failures) = changes_of(preview, diffs);
    p.restarts = changes.iter().filter(|c| c.restarts && c.change == Planned::Update.to_string()).map(|c| c.object.clone()).collect();
    p.result = if changes.is_empty() { Judged::Unchanged } else { Judged::Changes };
    p.changes = changes;
    p.failures = failures;
    p
}
