//! The stages a Cluster gets from a prepared release: a manifests release's objects (read once,
//! `manifests.rs`) or a cluster stack's addons through the controller's pipeline, each object in
//! one stage. Errors stay typed ([`StagesError`]) until the Cluster's status is written.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use tracing::{debug, error};

use super::super::context::Kube;
use crate::config::{Format, Subscription};
use crate::controller::PreparedRelease;
use crate::controller::pipeline::{self, RenderError};
use crate::model::ClusterKey;
use crate::model::StageAction;
use crate::model::cluster::ClusterConfig;
use crate::render::clusterstack::RenderedAddons;
use crate::status::Reason;
use crate::status::crd::ClusterSyncStatus;
use applier::ssa::Stage;

/// A Cluster's stages, and what its values templates printed as `<no value>` / `<nil>`.
pub(in crate::targets::kubernetes) struct Rendered {
    pub stages: Vec<Stage>,
    pub warnings: Vec<String>,
    /// The fields the charts generate at render time, `group|kind|namespace|name|pointer`
    /// (`crate::render::clusterstack::RenderedStage::generated`).
    pub generated: Vec<String>,
    /// Charts that generate were rendered as stand-ins ([`crate::render::helm::Helm::with_stand_ins`]), checked
    /// against the ClusterSync's record: the applier must keep every generated field's live
    /// value (`ApplyOptions::generated_stand_ins`).
    pub stand_ins: bool,
}

/// Why a Cluster's stages could not be rendered.
#[derive(Debug, thiserror::Error)]
pub(in crate::targets::kubernetes) enum StagesError {
    /// A manifests release's files could not be read or rendered: the release needs a change.
    #[error("{0}")]
    Manifests(#[source] crate::render::Errors),
    /// A cluster stack's addons (the work directory, helm, the release's layout, a values
    /// template): transient or not by the pipeline's error.
    #[error("{0}")]
    Addons(#[source] RenderError),
    /// One object in two stages ([`RenderError::TwoStages`]).
    #[error("{0}")]
    TwoStages(#[source] RenderError),
}

impl StagesError {
    /// The condition reason the Cluster gets.
    pub(in crate::targets::kubernetes) fn reason(&self) -> Reason {
        match self {
            StagesError::Addons(e) => e.reason(),
            StagesError::Manifests(_) | StagesError::TwoStages(_) => Reason::RenderFailed,
        }
    }

    /// Whether it may pass by itself.
    pub(in crate::targets::kubernetes) fn is_transient(&self) -> bool {
        matches!(self, StagesError::Addons(e) if e.is_transient())
    }

    /// The pipeline's own short name of what failed, for the `Stalled` condition.
    pub(in crate::targets::kubernetes) fn kind(&self) -> Option<&'static str> {
        match self {
            StagesError::Addons(e) => Some(e.kind()),
            StagesError::Manifests(_) | StagesError::TwoStages(_) => None,
        }
    }
}

/// The stages a Cluster gets from a prepared release; `fresh`: rendered anew, not answered
/// by the render memo (a rotation of generated values). `prev`: the Cluster's status, whose
/// record of what its charts generate lets a render the memo has not kept (a restart on an
/// empty cache) skip making keys ([`addons`]).
///
/// # Errors
/// See [`StagesError`]; a render failure is logged here (the applied release stays).
pub(in crate::targets::kubernetes) async fn render(
    kube: &Kube,
    key: &ClusterKey,
    sub: &Subscription,
    prepared: &PreparedRelease,
    c: &ClusterConfig,
    prev: &ClusterSyncStatus,
    fresh: bool,
) -> Result<Rendered, StagesError> {
    let rel = &prepared.release;
    let failed = |e: StagesError| {
        if e.reason() == Reason::RenderFailed {
            error!("render failed; the applied release stays: {e}");
        }
        e
    };
    match sub.format {
        Format::Manifests => {
            let manifests = kube.manifests.get(prepared, &sub.path).await.map_err(|e| failed(StagesError::Manifests(e)))?;
            let mut objects = manifests.render(rel, c).map_err(|e| failed(StagesError::Manifests(e)))?;
            crate::render::labels::add(&mut objects, &sub.adopted_labels);
            Ok(Rendered {
                stages: vec![Stage { name: "manifests".into(), action: StageAction::Apply, objects }],
                warnings: Vec::new(),
                generated: Vec::new(),
                stand_ins: false,
            })
        }
        Format::ClusterStack => {
            let rendered = addons(kube, key, sub, prepared, c, prev, fresh).await.map_err(|e| failed(StagesError::Addons(e)))?;
            let stand_ins = rendered.stages.iter().any(|s| s.stand_ins);
            let mut generated = Vec::new();
            let stages: Vec<Stage> = rendered
                .stages
                .into_iter()
                .map(|s| {
                    generated.extend(s.generated);
                    Stage { name: s.name.unwrap_or_else(|| "addons".into()), action: StageAction::Apply, objects: s.objects }
                })
                .collect();
            unique_across_stages(&stages).map_err(|e| failed(StagesError::TwoStages(e)))?;
            Ok(Rendered { stages, warnings: rendered.warnings.iter().map(ToString::to_string).collect(), generated, stand_ins })
        }
    }
}

/// A cluster stack's addons for the Cluster.
///
/// - `fresh` (a rotation): rendered anew, not from the memo, so its generated values are new.
/// - A Cluster whose last sync synced every object and whose ClusterSync records what its
///   charts generate (`status.generated`) is rendered with *stand-ins* where they generate
///   (probes: no key made) — the keys a real render makes would be thrown away, since the
///   applier keeps every generated field's live value, and it never applies a stand-in where
///   nothing generated is live (`ApplyOptions::generated_stand_ins`):
///   - on the release it applied (a restart on an empty cache, a leader change), a chart that
///     generates and that the memo has no render of is rendered once, as a probe
///     ([`crate::render::helm::Helm::with_stand_ins`]); used only when the whole render,
///     generated fields left out, has the recorded digest (`status.renderedDigest`): the same
///     objects, and nothing generated that the record lacks (a stand-in differs from what was
///     applied);
///   - otherwise (a new release, changed values) each chart that generates is rendered as two
///     probes, which differ where it generates; used when all it generates is recorded.
///
///   A release that generates something the record lacks, and a Cluster whose last sync left an
///   object out (such as a stand-in refused where a generated object was gone), are rendered
///   for real. This is what makes restarts and new releases cost no key generation:
///   docs/clusterstacks.md, docs/performance.md.
async fn addons(
    kube: &Kube,
    key: &ClusterKey,
    sub: &Subscription,
    prepared: &PreparedRelease,
    c: &ClusterConfig,
    prev: &ClusterSyncStatus,
    fresh: bool,
) -> Result<RenderedAddons, RenderError> {
    let helm = kube.ctx.helm().await?;
    if fresh {
        return pipeline::addons_with(&kube.ctx, &helm.without_memo(), sub, prepared, c).await;
    }
    // Only after a sync that synced every object: one that did not (a stand-in refused where a
    // generated object was gone, anything else failing) is followed by a real render, in this
    // process or the next.
    let complete = prev.total > 0 && prev.synced == prev.total;
    if !complete || prev.generated.is_empty() || !helm.probes() {
        return pipeline::addons_with(&kube.ctx, &helm, sub, prepared, c).await;
    }
    let same_release = prev.applied_release.as_ref().is_some_and(|r| r.tag == prepared.release.tag);
    if same_release && !prev.rendered_digest.is_empty() {
        // The release applied (a restart): one probe per chart that generates.
        match pipeline::addons_with(&kube.ctx, &helm.with_stand_ins(), sub, prepared, c).await {
            Ok(r) if !r.stages.iter().any(|s| s.stand_ins) => return Ok(r),
            Ok(r) => {
                let recorded = super::generated::recorded(&prev.generated, &[]);
                if rendered_digest(r.stages.iter().flat_map(|s| &s.objects), &recorded) == prev.rendered_digest {
                    debug!(cluster = %key, "rendered with stand-ins for what the charts generate (the ClusterSync's record matches)");
                    return Ok(r);
                }
            }
            // A real render tells the error as it is.
            Err(_) => return pipeline::addons_with(&kube.ctx, &helm, sub, prepared, c).await,
        }
    }
    // Another release, or other values: what the charts generate found by comparing two probes
    // (no key), used when all of it was generated before (the record has it, so it is live:
    // the applier keeps it). A release that generates something new is rendered for real.
    if let Ok(mut r) = pipeline::addons_with(&kube.ctx, &helm.probes_only(), sub, prepared, c).await {
        let known: std::collections::HashSet<&str> = prev.generated.iter().map(String::as_str).collect();
        if r.stages.iter().flat_map(|s| &s.generated).all(|l| known.contains(l.as_str())) {
            debug!(cluster = %key, "rendered with stand-ins for what the charts generate (all of it recorded)");
            r.stages.iter_mut().for_each(|s| s.stand_ins = true);
            return Ok(r);
        }
    }
    debug!(cluster = %key, "the render generates what the ClusterSync does not record; rendering for real");
    pipeline::addons_with(&kube.ctx, &helm, sub, prepared, c).await
}

/// Refuses an object rendered by two stages: each stage would apply its own version on every
/// pass and the cluster would never settle.
fn unique_across_stages(stages: &[Stage]) -> Result<(), RenderError> {
    let mut seen: BTreeMap<(String, String, Option<String>, String), &str> = BTreeMap::new();
    for stage in stages {
        for o in &stage.objects {
            let key = (o.group().to_owned(), o.kind.clone(), o.namespace.clone(), o.name.clone());
            if let Some(first) = seen.insert(key, &stage.name)
                && first != stage.name
            {
                return Err(RenderError::TwoStages { object: o.to_string(), first: first.to_owned(), second: stage.name.clone() });
            }
        }
    }
    Ok(())
}

/// What the status records of the rendered objects: a change means the apply-started status is
/// written before the first object is. The fields the charts generate are left out (`generated`,
/// `generated.rs`): a render with new random values is the same render.
pub(in crate::targets::kubernetes) fn rendered_digest<'a>(
    objects: impl Iterator<Item = &'a crate::model::Object>,
    generated: &applier::ssa::GeneratedFields,
) -> String {
    let mut h = Sha256::new();
    for o in objects {
        match super::generated::of_object(generated, o) {
            [] => h.update(serde_json::to_vec(&o.body).unwrap_or_default()),
            pointers => h.update(serde_json::to_vec(&applier::ssa::without_generated(&o.body, pointers)).unwrap_or_default()),
        }
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_in_two_stages_is_refused() {
        let object = |name: &str| crate::model::Object {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("kube-system".into()),
            name: name.into(),
            file: "f.yaml".into(),
            line: 1,
            body: json!({}),
            chart: None,
            stage: None,
        };
        let stage = |name: &str, objects: Vec<crate::model::Object>| Stage { name: name.into(), action: StageAction::Apply, objects };
        assert!(unique_across_stages(&[stage("cni", vec![object("a")]), stage("csi", vec![object("b")])]).is_ok());
        let err = unique_across_stages(&[stage("cni", vec![object("a")]), stage("csi", vec![object("a")])]).unwrap_err().to_string();
        assert!(err.contains("ConfigMap/kube-system/a is rendered by stages `cni` and `csi`"), "{err}");
    }

    #[test]
    fn render_errors_keep_their_reason_and_transience() {
        let manifests = StagesError::Manifests(crate::render::Errors(Vec::new()));
        assert_eq!((manifests.reason(), manifests.is_transient(), manifests.kind()), (Reason::RenderFailed, false, None));
        let two = StagesError::TwoStages(RenderError::TwoStages { object: "o".into(), first: "a".into(), second: "b".into() });
        assert_eq!((two.reason(), two.is_transient(), two.kind()), (Reason::RenderFailed, false, None));
    }
}
