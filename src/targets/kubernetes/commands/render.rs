//! `stacksync render` for a Kubernetes target: the Clusters come from the management cluster
//! (what `clusterSelector` matches, plus listed ones), each rendered with the same code a
//! reconcile uses — the release its class names, its live objects injected — into a directory
//! (`<out>/<namespace>/<cluster>[/<stage>]`, ClusterClasses in `<out>/<namespace>/cluster-class/`).
//! Nothing is written to any cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use kube::api::{Api, DynamicObject, ListParams};
use tracing::{error, info};

use super::super::Error;
use super::super::reconcile::cluster::key_of;
use super::super::reconcile::decide::{subscription_for, topology_class};
use super::management::Management;
use crate::config::Format;
use crate::controller::{ClusterReport, Context, PassReport};
use crate::model::ClusterKey;
use crate::model::Object;
use crate::release::Release;
use crate::render::clusterstack::RenderedStage;
use crate::status::{ClusterStatus, Reason};
use crate::targets::directory::DirectoryTarget;
use applier::ChangeSet;

/// Renders every Cluster a subscription covers into `out`.
///
/// # Errors
/// The management cluster cannot be reached or its Clusters listed: the message says how to
/// render without it (`--cluster FILE`, or clusters listed in the config).
pub async fn render(ctx: Arc<Context>, out: &Path) -> Result<PassReport, Error> {
    let mut report = PassReport { source_errors: ctx.poll_all().await, ..PassReport::default() };
    let management = Management::connect(ctx.clone()).await?;
    let api: Api<DynamicObject> = Api::all_with(management.client().clone(), management.clusters());
    let clusters = api.list(&ListParams::default()).await.map_err(Error::ListClusters)?.items;
    let config = ctx.config();
    let target = DirectoryTarget::new(out);
    // (namespace) -> ClusterClass objects of every release used there.
    let mut classes: BTreeMap<String, Vec<Object>> = BTreeMap::new();
    let mut rendered_classes: BTreeSet<(String, String)> = BTreeSet::new();
    let present: BTreeSet<ClusterKey> = clusters.iter().filter_map(key_of).collect();
    let progress = crate::model::progress::reporter();
    progress.add("Clusters rendered", clusters.len() as u64);
    for obj in &clusters {
        let _done = progress.tick();
        let Some(key) = key_of(obj) else { continue };
        let labels = obj.metadata.labels.clone().unwrap_or_default();
        let class = topology_class(&obj.data);
        let Some((sub, c)) = subscription_for(&config, &key, &labels, class.as_deref()) else { continue };
        let c = management.with_live_objects(obj, c).await;
        let failed = |reason: Reason, message: String, rel: Option<&Release>| {
            error!(cluster = %key, "{message}");
            ClusterReport {
                subscription: sub.name.clone(),
                cluster: c.clone(),
                status: ClusterStatus::failed(sub, &c, rel, None, reason, message),
                changes: ChangeSet::default(),
            }
        };
        let rel = match management.choose(sub, class.as_deref()).await {
            Ok(r) => r,
            Err(f) => {
                report.clusters.push(failed(f.reason(), f.to_string(), None));
                continue;
            }
        };
        let prepared = match ctx.prepare(&rel).await {
            Ok(p) => p,
            Err(e) => {
                report.clusters.push(failed(e.status_reason(), e.to_string(), Some(&rel)));
                continue;
            }
        };
        let stages = match management.render(sub, &prepared, &c, false).await {
            Ok(s) => s,
            Err(f) => {
                report.clusters.push(failed(f.reason(), f.to_string(), Some(&rel)));
                continue;
            }
        };
        if sub.format == Format::ClusterStack && rendered_classes.insert((key.namespace.clone(), rel.tag.clone())) {
            match crate::controller::pipeline::cluster_class(&ctx, sub, &prepared, &key.namespace).await {
                Ok(o) => classes.entry(key.namespace.clone()).or_default().extend(o),
                Err(e) => {
                    report.clusters.push(failed(e.reason(), e.to_string(), Some(&rel)));
                    continue;
                }
            }
        }
        let staged: Vec<RenderedStage> = stages
            .stages
            .into_iter()
            .map(|s| RenderedStage {
                name: (sub.format == Format::ClusterStack && s.name != "addons").then_some(s.name),
                objects: s.objects,
                generated: Vec::new(),
                stand_ins: false,
            })
            .collect();
        let changes = crate::targets::directory::clusterstack::write_addons(&target, &c, &staged);
        let status = ClusterStatus::applied(sub, &c, &rel, &changes, None);
        info!(cluster = %key, tag = %rel.tag, objects = status.total, "rendered");
        report.clusters.push(ClusterReport { subscription: sub.name.clone(), cluster: c.clone(), status, changes });
    }
    for (ns, objects) in classes {
        let dir = out.join(&ns).join(crate::model::cluster::CLUSTER_CLASS_DIR);
        target.sync_dir(&dir, objects);
    }
    for sub in &config.subscriptions {
        for c in sub.clusters.iter().filter(|c| !present.contains(&ClusterKey::new(&c.namespace, &c.name))) {
            let message = format!("Cluster {}/{} does not exist in the management cluster", c.namespace, c.name);
            let status = ClusterStatus::failed(sub, c, None, None, Reason::ClusterNotFound, message);
            report.clusters.push(ClusterReport {
                subscription: sub.name.clone(),
                cluster: c.clone(),
                status,
                changes: ChangeSet::default(),
            });
        }
    }
    Ok(report)
}
