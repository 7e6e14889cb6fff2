//! The cluster-stack pipeline, written once: a cluster's addons and a namespace's ClusterClass
//! objects from a prepared release, with the process's one helm, its memoised release layouts
//! and its work directory (all from [`Context`]). The Kubernetes reconcile, `render`, `diff` and
//! the directory target's pass all render through here.

use std::path::PathBuf;

use super::{Context, PreparedRelease};
use crate::config::Subscription;
use crate::model::Object;
use crate::model::cluster::ClusterConfig;
use crate::render::clusterstack::RenderedAddons;

pub use super::error::RenderError;

/// The addons of cluster `c`, stage by stage, and what its values templates printed as
/// `<no value>` / `<nil>`. Values files are written under a directory of the work directory
/// unique to this render and removed afterwards.
///
/// # Errors
/// See [`RenderError`].
pub async fn addons(
    ctx: &Context,
    sub: &Subscription,
    prepared: &PreparedRelease,
    c: &ClusterConfig,
) -> Result<RenderedAddons, RenderError> {
    addons_with(ctx, &ctx.helm().await?, sub, prepared, c).await
}

/// [`addons`] rendered by `helm` (e.g. one [`crate::render::helm::Helm::without_memo`]).
///
/// # Errors
/// See [`RenderError`].
pub async fn addons_with(
    ctx: &Context,
    helm: &crate::render::helm::Helm,
    sub: &Subscription,
    prepared: &PreparedRelease,
    c: &ClusterConfig,
) -> Result<RenderedAddons, RenderError> {
    let work = ctx.work_dir()?.to_path_buf();
    let layout = ctx.layout(sub, prepared).await?;
    let dir = scratch(&work, c);
    let rendered = layout.render_addons_reporting(helm, c, &dir).await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let mut rendered = rendered.map_err(RenderError::Render)?;
    for stage in &mut rendered.stages {
        crate::render::labels::add(&mut stage.objects, &sub.adopted_labels);
    }
    Ok(rendered)
}

/// The release's ClusterClass objects for `namespace`.
///
/// # Errors
/// See [`RenderError`].
pub async fn cluster_class(
    ctx: &Context,
    sub: &Subscription,
    prepared: &PreparedRelease,
    namespace: &str,
) -> Result<Vec<Object>, RenderError> {
    let helm = ctx.helm().await?;
    let layout = ctx.layout(sub, prepared).await?;
    let mut objects = layout.render_cluster_class(&helm, namespace).await.map_err(RenderError::Render)?;
    crate::render::labels::add(&mut objects, &sub.adopted_labels);
    Ok(objects)
}

/// A directory no other render uses at the same time.
fn scratch(work: &std::path::Path, c: &ClusterConfig) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    work.join("clusters").join(format!("{}-{}-{}", c.namespace, c.name, NEXT.fetch_add(1, Ordering::Relaxed)))
}
