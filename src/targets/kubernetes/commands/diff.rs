//! `stacksync diff` for a Kubernetes target: for each Cluster a subscription covers (or one),
//! what its next sync would change — rendered by the reconcile's own code, previewed with
//! server-side dry-runs against its workload cluster, pruned against its ClusterSync's
//! inventory. Nothing is written anywhere.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use tracing::Instrument;
use tracing::info_span;

use super::super::Error;
use super::super::reconcile::cluster::key_of;
use super::super::reconcile::decide::{subscription_for, topology_class};
use super::super::reconcile::workload::reachable;
use super::management::Management;
use crate::controller::Context;
use crate::model::ClusterKey;
use crate::status::crd::ClusterSync;
use applier::ssa::{Applier, Inventory, Preview};

/// What the next sync of one Cluster would do.
#[derive(Debug, Clone)]
pub struct ClusterDiff {
    pub cluster: ClusterKey,
    /// The release the sync would apply.
    pub release: Option<String>,
    /// The release its ClusterSync says is applied.
    pub applied: Option<String>,
    /// Changes and objects that cannot be previewed; `None` when the Cluster could not be
    /// looked at (`error` says why).
    pub preview: Option<Preview>,
    pub error: Option<String>,
}

/// Previews the next sync of every covered Cluster, or of `only`.
///
/// # Errors
/// The management cluster cannot be reached or its Clusters listed.
pub async fn diff(ctx: Arc<Context>, only: Option<&ClusterKey>) -> Result<Vec<ClusterDiff>, Error> {
    let source_errors = ctx.poll_all().await;
    for (source, e) in &source_errors {
        tracing::warn!(source = %source, "{e}");
    }
    let management = Management::connect(ctx.clone()).await?;
    let clusters = management.clusters_of(only).await?;
    if let Some(key) = only
        && clusters.is_empty()
    {
        return Ok(vec![failed(key.clone(), format!("Cluster {key} does not exist"))]);
    }
    let mut out = Vec::new();
    // A release's ClusterClass is previewed once per namespace, with the first Cluster using it.
    let mut classes = std::collections::BTreeSet::new();
    for obj in &clusters {
        let Some(key) = key_of(obj) else { continue };
        let span = info_span!("cluster", cluster = %key);
        if let Some(d) = one(&management, obj, key, &mut classes).instrument(span).await {
            out.push(d);
        }
    }
    if let Some(key) = only
        && out.is_empty()
    {
        return Ok(vec![failed(key.clone(), format!("no subscription covers Cluster {key}"))]);
    }
    Ok(out)
}

fn failed(cluster: ClusterKey, error: String) -> ClusterDiff {
    ClusterDiff { cluster, release: None, applied: None, preview: None, error: Some(error) }
}

async fn one(
    management: &Management,
    obj: &DynamicObject,
    key: ClusterKey,
    classes: &mut std::collections::BTreeSet<(String, String)>,
) -> Option<ClusterDiff> {
    let config = management.ctx().config();
    let labels = obj.metadata.labels.clone().unwrap_or_default();
    let class = topology_class(&obj.data);
    let (sub, c) = subscription_for(&config, &key, &labels, class.as_deref())?;
    let c = management.with_live_objects(obj, c).await;
    let syncs: Api<ClusterSync> = Api::namespaced(management.client().clone(), &key.namespace);
    let previous = match syncs.get_opt(&key.name).await {
        Ok(p) => p.and_then(|p| p.status).unwrap_or_default(),
        Err(e) => return Some(failed(key, format!("cannot read its ClusterSync: {}", super::super::error::kube_error(&e)))),
    };
    let applied = previous.applied_release.as_ref().map(|r| r.tag.clone());
    let mut d = ClusterDiff { cluster: key, release: None, applied, preview: None, error: None };
    let result = async {
        let rel = management.choose(sub, class.as_deref()).await.map_err(|f| f.to_string())?;
        d.release = Some(rel.tag.clone());
        let prepared = management.ctx().prepare(&rel).await.map_err(|e| e.to_string())?;
        let rendered = management.render(sub, &prepared, &c, false).await.map_err(|e| e.to_string())?;
        let super::super::Workload { client, discovery, .. } = management.workload(&d.cluster, &c).await.map_err(|e| e.to_string())?;
        reachable(&client).await.map_err(|e| e.to_string())?;
        let mut options = management.apply_options(sub, &c);
        options.generated = super::super::reconcile::generated::recorded(&previous.generated, &rendered.generated);
        let applier = Applier::new(client, options).with_discovery(discovery);
        let mut preview = applier.preview(&rendered.stages, &Inventory::from_lines(&previous.inventory)).await;
        if sub.format == crate::config::Format::ClusterStack && classes.insert((c.namespace.clone(), rel.tag.clone())) {
            // The ClusterClass this release needs in the Cluster's namespace (management cluster).
            let class = management.class_preview(sub, &c.namespace, &rel).await.map_err(|e| format!("{e:#}"))?;
            preview.changes.splice(0..0, class.changes);
            preview.failures.extend(class.failures);
        }
        Ok::<_, String>(preview)
    };
    match result.await {
        Ok(p) => d.preview = Some(p),
        Err(e) => d.error = Some(e),
    }
    Some(d)
}

/// What `stacksync diff` prints of the Clusters' diffs, and what it decides by.
#[derive(Debug, Default)]
pub struct Printed {
    /// A line per Cluster (its release; `no changes`, how many changes, or its error), each
    /// change's unified diff, each object that could not be previewed.
    pub text: String,
    /// Whether the next sync of some Cluster would change something.
    pub changes: bool,
    /// What could not be previewed: `<cluster>: <message>`, `<cluster>: <object>: <message>`.
    pub errors: Vec<String>,
}

/// The text of `diffs` for people ([`Printed`]).
pub fn printed(diffs: &[ClusterDiff]) -> Printed {
    use std::fmt::Write as _;
    let mut out = Printed::default();
    for d in diffs {
        let release = match (&d.applied, &d.release) {
            (Some(a), Some(r)) if a != r => format!(" (release {a} -> {r})"),
            (_, Some(r)) => format!(" (release {r})"),
            _ => String::new(),
        };
        if let Some(e) = &d.error {
            let _ = writeln!(out.text, "{}{release}: ERROR: {e}", d.cluster);
            out.errors.push(format!("{}: {e}", d.cluster));
            continue;
        }
        let Some(p) = &d.preview else { continue };
        if p.is_clean() {
            let _ = writeln!(out.text, "{}{release}: no changes", d.cluster);
            continue;
        }
        let _ = writeln!(out.text, "{}{release}: {} changes", d.cluster, p.changes.len());
        for c in &p.changes {
            let _ = writeln!(out.text, "{} {}", c.change, c.object);
            out.text.push_str(&c.diff);
        }
        for (object, message) in &p.failures {
            let _ = writeln!(out.text, "ERROR {object}: {message}");
            out.errors.push(format!("{}: {object}: {message}", d.cluster));
        }
        out.changes |= !p.changes.is_empty();
    }
    out
}
