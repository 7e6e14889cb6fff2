//! The cluster-stack pipeline, written once: a cluster's addons and a namespace's ClusterClass
//! objects from a prepared release, with the process's one helm, its memoised release layouts
//! and its work directory (all from [`Context`]). The Kubernetes reconcile, `render`, `diff` and
//! the directory target's pass all render through here.

use std::path::PathBuf;

use super::error::WorkDirError;
use super::{Context, PreparedRelease};
use crate::config::Subscription;
use crate::model::Object;
use crate::model::cluster::ClusterConfig;
use crate::render::clusterstack::RenderedAddons;
use crate::status::Reason;

/// Why a cluster stack could not be rendered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RenderError {
    /// The process's work directory could not be created: nothing can be rendered.
    #[error("{0}")]
    WorkDir(#[from] WorkDirError),
    /// helm is missing or unusable.
    #[error("{0}")]
    Helm(#[source] crate::render::helm::Error),
    /// The release's layout (metadata, charts, archives) is invalid.
    #[error("{0}")]
    Release(#[source] crate::render::Errors),
    /// Reading the release's layout did not finish (the blocking task panicked or was
    /// cancelled at shutdown).
    #[error("load task failed: {0}")]
    Task(#[source] std::sync::Arc<tokio::task::JoinError>),
    /// A values template, helm or an object failed; every problem of every stage.
    #[error("{0}")]
    Render(#[source] crate::render::Errors),
    /// One object rendered by two stages: each would apply its own version on every pass and
    /// the cluster would never settle.
    #[error("{object} is rendered by stages `{first}` and `{second}`; an object belongs to one stage")]
    TwoStages { object: String, first: String, second: String },
}

impl RenderError {
    /// The condition reason a Cluster gets.
    pub fn reason(&self) -> Reason {
        match self {
            RenderError::WorkDir(_) => Reason::WorkDirUnavailable,
            _ => Reason::RenderFailed,
        }
    }

    /// Whether it may pass by itself (a work directory may become writable, a task cut at
    /// shutdown, helm out of time on a busy machine); a broken release or a missing helm needs
    /// a change.
    pub fn is_transient(&self) -> bool {
        match self {
            RenderError::WorkDir(_) | RenderError::Task(_) => true,
            RenderError::Helm(e) => e.is_transient(),
            RenderError::Release(e) | RenderError::Render(e) => e.is_transient(),
            RenderError::TwoStages { .. } => false,
        }
    }

    /// A short stable name of what failed (metric labels, logs).
    pub fn kind(&self) -> &'static str {
        match self {
            RenderError::WorkDir(_) => "WorkDir",
            RenderError::Helm(_) => "Helm",
            RenderError::Release(_) => "Release",
            RenderError::Task(_) => "Task",
            RenderError::Render(_) => "Render",
            RenderError::TwoStages { .. } => "TwoStages",
        }
    }

    /// As the directory target reports render problems: one [`crate::render::Errors`].
    pub fn into_errors(self, file: &str) -> crate::render::Errors {
        match self {
            RenderError::Render(e) => e,
            other => crate::render::Errors(vec![crate::render::Error::Release { file: file.to_owned(), message: other.to_string() }]),
        }
    }
}

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
