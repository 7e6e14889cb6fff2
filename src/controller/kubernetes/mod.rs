//! The Kubernetes target: finds the Cluster API clusters each subscription covers in the
//! management cluster, reaches each workload cluster through its `<cluster>-kubeconfig` Secret,
//! applies the rendered release with server-side apply and records a `ClusterSync` per cluster
//! and a `StackRelease` per subscription × release.

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::{error, info, info_span, warn};

mod status;

use status::{applied_crd, failed_crd, record_release, write_cluster_sync};

use super::{ClusterReport, Prepared};
use crate::apply::ChangeSet;
use crate::apply::ssa::{self, Applier, ApplyOptions, Inventory, Stage, StageAction};
use crate::config::Format;
use crate::config::{ClusterConfig, Config, KubernetesTarget, Subscription};
use crate::release::{Release, short};
use crate::render::Manifests;
use crate::render::clusterstack::Layout;
use crate::render::helm::Helm;
use crate::status::crd::ClusterSync;
use crate::status::{ClusterStatus, Reason};

/// The field manager of every write, objects and status alike.
pub const MANAGER: &str = ssa::FIELD_MANAGER;

/// How a subscription's release becomes objects: plain manifests, or a cluster stack (ClusterClass
/// for the management cluster, addons per workload cluster, rendered with helm).
enum Renderer {
    Manifests(Result<Manifests, crate::render::Errors>),
    Stack { layout: Result<std::sync::Arc<Layout>, String>, helm: Result<Helm, String>, work: std::path::PathBuf },
    Unavailable,
}

impl Renderer {
    /// The stages `cluster` gets from `rel`.
    async fn stages(&self, rel: &Release, cluster: &ClusterConfig) -> Result<Vec<Stage>, String> {
        match self {
            Renderer::Manifests(m) => {
                let objects = m.as_ref().map_err(ToString::to_string)?.render(rel, cluster).map_err(|e| e.to_string())?;
                Ok(vec![Stage { name: "manifests".into(), action: StageAction::Apply, objects }])
            }
            Renderer::Stack { layout, helm, work } => {
                let (layout, helm) = (layout.as_ref().map_err(Clone::clone)?, helm.as_ref().map_err(Clone::clone)?);
                let stages = layout.render_addons(helm, cluster, work).await.map_err(|e| e.to_string())?;
                let stages: Vec<Stage> = stages
                    .into_iter()
                    .map(|s| Stage { name: s.name.unwrap_or_else(|| "addons".into()), action: StageAction::Apply, objects: s.objects })
                    .collect();
                unique_across_stages(&stages)?;
                Ok(stages)
            }
            Renderer::Unavailable => Err("release unavailable".into()),
        }
    }

    /// Where namespaced objects without a namespace go: addons to `kube-system` (what
    /// `helm template --namespace kube-system` means), plain manifests to `default`.
    fn default_namespace(&self) -> &'static str {
        match self {
            Renderer::Stack { .. } => "kube-system",
            _ => "default",
        }
    }
}

/// Refuses an object rendered by two stages: each stage would apply its own version on every
/// pass and the cluster would never settle.
fn unique_across_stages(stages: &[Stage]) -> Result<(), String> {
    let mut seen: BTreeMap<(String, String, Option<String>, String), &str> = BTreeMap::new();
    for stage in stages {
        for o in &stage.objects {
            let key = (o.group().to_owned(), o.kind.clone(), o.namespace.clone(), o.name.clone());
            if let Some(first) = seen.insert(key, &stage.name)
                && first != stage.name
            {
                return Err(format!("{o} is rendered by stages `{first}` and `{}`; an object belongs to one stage", stage.name));
            }
        }
    }
    Ok(())
}

/// A workload cluster found in the management cluster.
#[derive(Debug, Clone)]
pub struct Found {
    pub config: ClusterConfig,
    /// Why it cannot be synced yet (control plane not ready, no kubeconfig Secret).
    pub not_ready: Option<(Reason, String)>,
}

/// The result of the Kubernetes half of a pass.
#[derive(Debug, Default)]
pub struct Outcome {
    pub clusters: Vec<ClusterReport>,
    /// Subscription-level failures (management cluster unreachable, Clusters not listable):
    /// nothing may be reported synced while one is present.
    pub failures: Vec<String>,
    /// By subscription: clusters skipped as not ready or unreachable, to try again after
    /// `notReadyRetry` (only them).
    pub retry: BTreeMap<String, std::collections::BTreeSet<(String, String)>>,
}

/// Connects to the management cluster.
///
/// # Errors
/// The kubeconfig cannot be read or the client cannot be built.
pub async fn management_client(k: &KubernetesTarget) -> Result<kube::Client, String> {
    let config = match &k.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
            let opts = kube::config::KubeConfigOptions { context: k.context.clone(), ..Default::default() };
            kube::Config::from_custom_kubeconfig(kc, &opts).await.map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| format!("no in-cluster config and no usable $KUBECONFIG: {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("building the client: {e}"))
}

/// Syncs every prepared subscription to its clusters.
///
/// With `only`, syncs just those clusters (`(namespace, name)`): a retry of clusters that were
/// not ready must not re-check every other cluster of the subscription.
pub async fn sync(
    config: &Config,
    k: &KubernetesTarget,
    staged: &[(&Subscription, Prepared)],
    only: Option<&std::collections::BTreeSet<(String, String)>>,
) -> Outcome {
    let mut out = Outcome::default();
    let mgmt = match management_client(k).await {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "cannot reach the management cluster");
            out.failures.push(format!("management cluster: {e}"));
            for (sub, _) in staged {
                for c in &sub.clusters {
                    let status = ClusterStatus::failed(sub, c, None, None, Reason::ReleaseUnavailable, format!("management cluster: {e}"));
                    out.clusters.push(ClusterReport {
                        subscription: sub.name.clone(),
                        cluster: c.clone(),
                        status,
                        changes: ChangeSet::default(),
                    });
                }
            }
            return out;
        }
    };
    let work = match tempfile::Builder::new().prefix("stacksync-render-").tempdir() {
        Ok(w) => w,
        Err(e) => {
            error!(error = %e, "cannot create a work directory");
            return out;
        }
    };
    let mut claimed: BTreeMap<(String, String), String> = BTreeMap::new();
    for (sub, prepared) in staged {
        let span = info_span!("subscription", subscription = %sub.name, source = %sub.source);
        let _enter = span.enter();
        let found = match discover(&mgmt, sub).await {
            Ok(f) => f,
            Err(e) => {
                error!(error = %e, "cannot list clusters");
                out.failures.push(format!("subscription {}: {e}", sub.name));
                continue;
            }
        };
        let mut found = found;
        if let Some(only) = only {
            found.retain(|f| only.contains(&(f.config.namespace.clone(), f.config.name.clone())));
        }
        // A cluster follows one stack: a selector of a later subscription does not take a
        // cluster an earlier one already has (they would fight over its ClusterSync).
        found.retain(|f| {
            let key = (f.config.namespace.clone(), f.config.name.clone());
            match claimed.get(&key) {
                Some(owner) if owner != &sub.name => {
                    error!(cluster = %format!("{}/{}", key.0, key.1), owner = %owner, "cluster matched by two subscriptions; left to the first");
                    out.failures.push(format!("cluster {}/{} is matched by subscriptions {owner} and {}", key.0, key.1, sub.name));
                    false
                }
                _ => {
                    claimed.insert(key, sub.name.clone());
                    true
                }
            }
        });
        if found.is_empty() {
            warn!("no cluster matches this subscription");
        }
        let renderer = renderer(config, sub, prepared, &work).await;
        let class = match (&renderer, &prepared.outcome) {
            (Renderer::Stack { .. }, Ok(p)) => Some(apply_cluster_classes(&mgmt, sub, &p.release, &renderer, &found).await),
            _ => None,
        };
        for cluster in found {
            let (report, status_error) = sync_cluster(&mgmt, k, sub, prepared, &renderer, &cluster).await;
            if cluster.not_ready.is_some() || report.status.reason == Reason::ClusterUnreachable {
                out.retry.entry(sub.name.clone()).or_default().insert((cluster.config.namespace.clone(), cluster.config.name.clone()));
            }
            out.failures.extend(status_error);
            out.clusters.push(report);
        }
        if let Ok(p) = &prepared.outcome {
            let applied = out.clusters.iter().filter(|c| c.subscription == sub.name).all(|c| c.status.ready);
            record_release(&mgmt, sub, &p.release, &p.assets, applied, class.as_ref()).await;
        }
    }
    out
}

/// The clusters `sub` covers: its static list plus what its selector matches.
async fn discover(mgmt: &kube::Client, sub: &Subscription) -> Result<Vec<Found>, String> {
    let api_res = cluster_resource(mgmt).await?;
    let all: Api<DynamicObject> = Api::all_with(mgmt.clone(), &api_res);
    let mut wanted: BTreeMap<(String, String), (ClusterConfig, Option<DynamicObject>)> = BTreeMap::new();
    for c in &sub.clusters {
        let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), &c.namespace, &api_res);
        let obj = api.get_opt(&c.name).await.map_err(|e| format!("reading Cluster {}/{}: {e}", c.namespace, c.name))?;
        wanted.insert((c.namespace.clone(), c.name.clone()), (c.clone(), obj));
    }
    if let Some(sel) = &sub.selector {
        let mut lp = ListParams::default();
        if !sel.match_labels.is_empty() {
            lp = lp.labels(&sel.match_labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","));
        }
        for obj in all.list(&lp).await.map_err(|e| format!("listing Clusters: {e}"))? {
            let ns = obj.metadata.namespace.clone().unwrap_or_default();
            let name = obj.metadata.name.clone().unwrap_or_default();
            if sel.match_stack_class {
                let class = obj.data.pointer("/spec/topology/class").and_then(Value::as_str).unwrap_or_default();
                let Some(stack) = &sub.stack else { continue };
                if !class.starts_with(&format!("{stack}-v")) {
                    continue;
                }
            }
            let values =
                sub.clusters.iter().find(|c| c.name == name && c.namespace == ns).map_or_else(|| sub.values.clone(), |c| c.values.clone());
            let config = ClusterConfig { name: name.clone(), namespace: ns.clone(), values, objects: Default::default() };
            wanted.entry((ns, name)).or_insert((config, Some(obj)));
        }
    }
    let mut out = Vec::new();
    for ((ns, name), (mut config, obj)) in wanted {
        let not_ready = match &obj {
            None => Some((Reason::ClusterNotFound, format!("Cluster {ns}/{name} does not exist (yet)"))),
            Some(o) if !control_plane_ready(&o.data) => Some((Reason::ControlPlaneNotReady, "control plane is not ready yet".to_owned())),
            Some(_) => None,
        };
        if let Some(o) = &obj {
            // The live objects, for cluster-stack values templates (`.Cluster`, `.ControlPlane`,
            // `.InfraCluster`); objects written in the config win.
            if config.objects.cluster.is_none() {
                config.objects.cluster = serde_json::to_value(o).ok();
            }
            if config.objects.control_plane.is_none() {
                config.objects.control_plane = referenced(mgmt, &ns, &o.data["spec"]["controlPlaneRef"]).await;
            }
            if config.objects.infra_cluster.is_none() {
                config.objects.infra_cluster = referenced(mgmt, &ns, &o.data["spec"]["infrastructureRef"]).await;
            }
        }
        out.push(Found { config, not_ready });
    }
    Ok(out)
}

/// The object a Cluster's reference points at: v1beta1 refs carry `apiVersion`, v1beta2 refs
/// `apiGroup` (the served version is discovered). `None` when absent or unreadable.
async fn referenced(mgmt: &kube::Client, ns: &str, r: &Value) -> Option<Value> {
    let kind = r["kind"].as_str()?;
    let name = r["name"].as_str()?;
    let (res, _) = match (r["apiVersion"].as_str(), r["apiGroup"].as_str()) {
        (Some(api_version), _) => {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            kube::discovery::pinned_kind(mgmt, &GroupVersionKind::gvk(group, version, kind)).await.ok()?
        }
        (None, Some(group)) => kube::discovery::group(mgmt, group).await.ok()?.recommended_kind(kind)?,
        _ => return None,
    };
    let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), r["namespace"].as_str().unwrap_or(ns), &res);
    api.get_opt(name).await.ok().flatten().and_then(|o| serde_json::to_value(o).ok())
}

/// `cluster.x-k8s.io` Cluster at the newest version the management cluster serves.
async fn cluster_resource(mgmt: &kube::Client) -> Result<ApiResource, String> {
    for version in ["v1beta2", "v1beta1"] {
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster");
        if let Ok((res, _)) = kube::discovery::pinned_kind(mgmt, &gvk).await {
            return Ok(res);
        }
    }
    Err("the management cluster serves no cluster.x-k8s.io Cluster (v1beta2 or v1beta1): is Cluster API installed?".to_owned())
}

/// v1beta1: `status.controlPlaneReady`; v1beta2: `status.initialization.controlPlaneInitialized`
/// or a true `ControlPlaneInitialized` / `ControlPlaneReady` condition.
fn control_plane_ready(cluster: &Value) -> bool {
    let status = &cluster["status"];
    if status["controlPlaneReady"] == json!(true) || status["initialization"]["controlPlaneInitialized"] == json!(true) {
        return true;
    }
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| matches!(c["type"].as_str(), Some("ControlPlaneInitialized" | "ControlPlaneReady")) && c["status"] == "True")
    })
}

/// Reads `<cluster>-kubeconfig` (key `value`) and builds a client for the workload cluster.
async fn workload_client(mgmt: &kube::Client, c: &ClusterConfig) -> Result<kube::Client, (Reason, String)> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(mgmt.clone(), &c.namespace);
    let name = format!("{}-kubeconfig", c.name);
    let secret = match secrets.get_opt(&name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err((Reason::KubeconfigMissing, format!("Secret {}/{name} does not exist yet", c.namespace))),
        Err(e) => return Err((Reason::ClusterUnreachable, format!("reading Secret {}/{name}: {e}", c.namespace))),
    };
    let bytes = secret.data.as_ref().and_then(|d| d.get("value")).map(|b| b.0.clone()).unwrap_or_default();
    if bytes.is_empty() {
        return Err((Reason::KubeconfigMissing, format!("Secret {}/{name} has no key `value`", c.namespace)));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| (Reason::ClusterUnreachable, format!("Secret {}/{name}: kubeconfig is not UTF-8", c.namespace)))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|e| (Reason::ClusterUnreachable, format!("Secret {}/{name}: {e}", c.namespace)))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| (Reason::ClusterUnreachable, format!("Secret {}/{name}: {e}", c.namespace)))?;
    kube::Client::try_from(config).map_err(|e| (Reason::ClusterUnreachable, e.to_string()))
}

/// How long a workload cluster gets to answer `GET /version` before its sync is skipped.
pub const REACHABLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// One cheap request before the sync: a cluster that is down is skipped in seconds instead of
/// failing every object after the client's retries.
async fn reachable(client: &kube::Client) -> Result<(), String> {
    match tokio::time::timeout(REACHABLE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("the workload cluster's API server does not answer: {e}")),
        Err(_) => Err(format!("the workload cluster's API server did not answer within {}s", REACHABLE_TIMEOUT.as_secs())),
    }
}

/// The owner of the objects applied for one cluster and subscription (the applier makes it
/// label-safe).
fn owner_id(sub: &Subscription, c: &ClusterConfig) -> String {
    format!("{}.{}.{}", sub.name, c.namespace, c.name)
}

async fn sync_cluster(
    mgmt: &kube::Client,
    k: &KubernetesTarget,
    sub: &Subscription,
    prepared: &Prepared,
    renderer: &Renderer,
    found: &Found,
) -> (ClusterReport, Option<String>) {
    let c = &found.config;
    let label = format!("{}/{}", c.namespace, c.name);
    let syncs: Api<ClusterSync> = Api::namespaced(mgmt.clone(), &c.namespace);
    let wanted = prepared.outcome.as_ref().ok().map(|p| &p.release);
    // The previous status holds the inventory pruning works from: without it, applying would
    // forget what to prune. Better to sync this cluster next time.
    let previous = match syncs.get_opt(&c.name).await {
        Ok(p) => p,
        Err(e) => {
            let message = format!("cannot read ClusterSync {label} (its inventory decides what to prune): {e}");
            error!(cluster = %label, "{message}");
            let status = ClusterStatus::failed(sub, c, wanted, None, Reason::ClusterUnreachable, message.clone());
            return (
                ClusterReport { subscription: sub.name.clone(), cluster: c.clone(), status, changes: ChangeSet::default() },
                Some(message),
            );
        }
    };
    let prev_status = previous.as_ref().and_then(|p| p.status.clone()).unwrap_or_default();

    let fail = |reason: Reason, message: String| {
        let mut status = ClusterStatus::failed(sub, c, wanted, None, reason, message);
        status.applied_release = prev_status.applied_release.as_ref().map(|r| crate::status::ReleaseRef {
            tag: r.tag.clone(),
            version: r.version.clone(),
            commit: r.commit.clone(),
            assets: Vec::new(),
        });
        status.synced = prev_status.synced as usize;
        status.total = prev_status.total as usize;
        status
    };
    let (status, changes, crd_status) = 'done: {
        if let Some((reason, message)) = &found.not_ready {
            info!(cluster = %label, "{message}; retrying in {}", crate::schedule::format_duration(k.not_ready_retry));
            let st = fail(*reason, message.clone());
            break 'done (st.clone(), ChangeSet::default(), failed_crd(&prev_status, wanted, &st));
        }
        let Ok(p) = &prepared.outcome else {
            let msg = prepared.outcome.as_ref().err().cloned().unwrap_or_default();
            let st = fail(Reason::ReleaseUnavailable, msg);
            break 'done (st.clone(), ChangeSet::default(), failed_crd(&prev_status, wanted, &st));
        };
        let rel = &p.release;
        let rspan = info_span!("release", source = %rel.source, tag = %rel.tag, commit = %short(&rel.commit));
        let _r = rspan.enter();
        let stages = match renderer.stages(rel, c).await {
            Ok(s) => s,
            Err(errs) => {
                error!(cluster = %label, "render failed; the applied release stays: {errs}");
                let st = fail(Reason::RenderFailed, errs);
                break 'done (st.clone(), ChangeSet::default(), failed_crd(&prev_status, wanted, &st));
            }
        };
        let client = match workload_client(mgmt, c).await {
            Ok(client) => match reachable(&client).await {
                Ok(()) => client,
                Err(message) => {
                    warn!(cluster = %label, "{message}");
                    let st = fail(Reason::ClusterUnreachable, message);
                    break 'done (st.clone(), ChangeSet::default(), failed_crd(&prev_status, wanted, &st));
                }
            },
            Err((reason, message)) => {
                warn!(cluster = %label, "{message}");
                let st = fail(reason, message);
                break 'done (st.clone(), ChangeSet::default(), failed_crd(&prev_status, wanted, &st));
            }
        };
        let digest = rendered_digest(stages.iter().flat_map(|s| &s.objects));
        let applier = Applier::new(
            client,
            ApplyOptions {
                owner: owner_id(sub, c),
                force: sub.force,
                drift: k.drift_mode,
                prune_limit: k.prune_limit,
                allow_empty_prune: k.allow_empty_prune,
                default_namespace: renderer.default_namespace().into(),
                ..ApplyOptions::default()
            },
        );
        let previous_inventory = Inventory::from_lines(&prev_status.inventory);
        let result = applier.sync(&stages, &previous_inventory).await;
        let mut st = ClusterStatus::applied(sub, c, rel, &result.changes).with_assets(&rel.tag, &rel.commit, &p.assets);
        if let Some(paused) = &result.prune_paused {
            st.ready = false;
            st.reason = Reason::PrunePaused;
            st.message = paused.clone();
        }
        for (object, fields) in &result.drifted {
            warn!(cluster = %label, object = %object, fields = %fields.join(", "), "drifted (driftMode: warn; not corrected)");
        }
        info!(cluster = %label, ready = st.ready, "synced: {}", result.changes.summary());
        let crd = applied_crd(&prev_status, rel, &st, &result.changes, result.inventory.to_lines(), digest);
        (st, result.changes, crd)
    };
    // Status nobody can read is a failure of the pass, whatever happened to the objects.
    let status_error = write_cluster_sync(&syncs, sub, c, previous.as_ref(), crd_status).await.err().map(|e| {
        error!(cluster = %label, error = %e, "cannot write ClusterSync status");
        format!("cannot write ClusterSync {label}: {e} (are the CRDs installed? kubectl apply -f deploy/crds/)")
    });
    (ClusterReport { subscription: sub.name.clone(), cluster: c.clone(), status, changes }, status_error)
}

fn rendered_digest<'a>(objects: impl Iterator<Item = &'a crate::render::Object>) -> String {
    let mut h = Sha256::new();
    for o in objects {
        h.update(serde_json::to_vec(&o.body).unwrap_or_default());
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

async fn renderer(config: &Config, sub: &Subscription, prepared: &Prepared, work: &tempfile::TempDir) -> Renderer {
    let Ok(p) = &prepared.outcome else { return Renderer::Unavailable };
    if sub.format != Format::ClusterStack {
        return Renderer::Manifests(Manifests::load(&p.tree, &sub.path));
    }
    let dir = work.path().join(&sub.name);
    let helm = Helm::locate(&config.helm).await.map(|h| h.with_home(&dir.join("helm"))).map_err(|e| e.to_string());
    let (tree, path, release, unpack) = (p.tree.clone(), sub.path.clone(), p.release.clone(), dir.join("release"));
    let layout = match tokio::task::spawn_blocking(move || Layout::load(&tree, &path, &release, &unpack)).await {
        Ok(r) => r.map(std::sync::Arc::new).map_err(|e| e.to_string()),
        Err(join) => Err(format!("load task failed: {join}")),
    };
    if let Err(e) = &layout {
        error!(tag = %p.release.tag, "cluster-stack release is invalid: {e}");
    }
    Renderer::Stack { layout, helm, work: dir }
}

/// The ClusterClass apply of one release, over every namespace it went to.
#[derive(Debug, Default)]
pub(super) struct ClassResult {
    changes: ChangeSet,
    errors: Vec<String>,
}

/// Renders the ClusterClass once per namespace of the subscription's clusters and applies it to
/// the management cluster. Old ClusterClasses are never pruned: clusters may still use them.
async fn apply_cluster_classes(
    mgmt: &kube::Client,
    sub: &Subscription,
    rel: &Release,
    renderer: &Renderer,
    found: &[Found],
) -> ClassResult {
    let mut out = ClassResult::default();
    let Renderer::Stack { layout: Ok(layout), helm: Ok(helm), .. } = renderer else {
        if let Renderer::Stack { layout, helm, .. } = renderer {
            out.errors.extend(layout.as_ref().err().cloned());
            out.errors.extend(helm.as_ref().err().cloned());
        }
        return out;
    };
    let namespaces: std::collections::BTreeSet<&str> = found.iter().map(|f| f.config.namespace.as_str()).collect();
    for ns in namespaces {
        let objects = match layout.render_cluster_class(helm, ns).await {
            Ok(o) => o,
            Err(e) => {
                error!(namespace = ns, tag = %rel.tag, "ClusterClass render failed: {e}");
                out.errors.push(format!("{ns}: {e}"));
                continue;
            }
        };
        let applier = Applier::new(
            mgmt.clone(),
            ApplyOptions {
                owner: format!("{}.{ns}.clusterclass", sub.name),
                default_namespace: ns.to_owned(),
                force: sub.force,
                prune: false,
                ..ApplyOptions::default()
            },
        );
        let stage = Stage { name: crate::render::clusterstack::CLUSTER_CLASS_STAGE.into(), action: StageAction::Apply, objects };
        let result = applier.sync(&[stage], &Inventory::default()).await;
        info!(namespace = ns, tag = %rel.tag, "ClusterClass applied: {}", result.changes.summary());
        out.changes.entries.extend(result.changes.entries);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_in_two_stages_is_refused() {
        let object = |name: &str| crate::render::Object {
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
        let stage = |name: &str, objects: Vec<crate::render::Object>| Stage { name: name.into(), action: StageAction::Apply, objects };
        assert!(unique_across_stages(&[stage("cni", vec![object("a")]), stage("csi", vec![object("b")])]).is_ok());
        let err = unique_across_stages(&[stage("cni", vec![object("a")]), stage("csi", vec![object("a")])]).unwrap_err();
        assert!(err.contains("ConfigMap/kube-system/a is rendered by stages `cni` and `csi`"), "{err}");
    }

    #[test]
    fn control_plane_readiness_in_v1beta1_and_v1beta2() {
        let table = [
            (json!({"status": {"controlPlaneReady": true}}), true),
            (json!({"status": {"controlPlaneReady": false}}), false),
            (json!({"status": {"initialization": {"controlPlaneInitialized": true}}}), true),
            (json!({"status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}}), true),
            (json!({"status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "False"}]}}), false),
            (json!({"spec": {}}), false),
        ];
        for (cluster, want) in table {
            assert_eq!(control_plane_ready(&cluster), want, "{cluster}");
        }
    }
}
