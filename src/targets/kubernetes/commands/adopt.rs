//! `stacksync adopt cso`: a management cluster moves from the SovereignCloudStack
//! cluster-stack-operator (CSO) to stacksync with no pod restarted and nothing deleted.
//!
//! CSO applies with server-side apply as field manager `kubectl` (forced), labels every object
//! and the pod templates of its workloads `clusterstack.x-k8s.io/instance: owned`, records what
//! it applied in `ClusterAddon` (one per Cluster) and `ClusterStackRelease` (one per release and
//! namespace) objects, and holds upgrades with its own Runtime Extension. The move:
//! 1. a report per Cluster and per namespace's ClusterClasses: every object identical, changed
//!    (which fields), restarting pods, missing, or a CSO leftover; and what blocks the move (an
//!    upgrade in flight, a release the config does not offer, stacksync's hook not discovered);
//! 2. unless `--dry-run` and only when nothing blocks and nothing restarts: the hook handed over
//!    (CSO scaled to zero, then its ExtensionConfig and validating webhooks removed — stacksync's
//!    ExtensionConfig is already discovered), each object taken over (`Applier::adopt`), each
//!    Cluster's `ClusterSync` seeded with the release CSO applied and the inventory taken over;
//! 3. `--cleanup`, later: CSO's finalizers, objects and CRDs removed, in that order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::super::Error;
use super::super::error::kube_error;
use super::super::reconcile::decide::{subscription_for, topology_class};
use super::super::reconcile::status::{Owner, write_cluster_sync};
use super::super::reconcile::workload::reachable;
use super::management::Management;
use crate::controller::Context;
use crate::model::ClusterKey;
use crate::status::crd::{ClusterSync, ClusterSyncStatus, Condition, ReleaseRefStatus};
use applier::ObjectRef;
use applier::ssa::{Adoption, Applier, Generated, Inventory, Stage, StageAction, Verdict};

/// The field manager CSO applies as.
pub const CSO_MANAGER: &str = "kubectl";
/// The label CSO puts on what it applies (and on its workloads' pod templates).
pub const CSO_LABEL: (&str, &str) = ("clusterstack.x-k8s.io/instance", "owned");
const GROUP: &str = "clusterstack.x-k8s.io";
const VERSION: &str = "v1alpha1";
/// CSO's finalizers on its ClusterStackReleases and ClusterAddons.
const FINALIZERS: [&str; 2] = ["clusterstackrelease.clusterstack.x-k8s.io", "clusteraddon.clusterstack.x-k8s.io"];
/// How long CSO's pods get to go after it is scaled to zero.
const SCALE_DOWN_WAIT: Duration = Duration::from_secs(120);

/// What `adopt cso` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub dry_run: bool,
    /// Only this Cluster (its ClusterAddon, and the ClusterClasses of its namespace).
    pub cluster: Option<ClusterKey>,
    /// Remove CSO's finalizers, objects and CRDs (after an adoption).
    pub cleanup: bool,
    /// Objects CSO applied that the release no longer renders are pruned by the first sync (within
    /// `pruneLimit`); without it they stay, reported.
    pub prune_leftovers: bool,
    /// CSO's Deployment, `namespace/name`.
    pub deployment: ClusterKey,
    /// CSO's ExtensionConfig and ValidatingWebhookConfiguration.
    pub extension_config: String,
    pub webhook: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dry_run: false,
            cluster: None,
            cleanup: false,
            prune_leftovers: false,
            deployment: ClusterKey::new("cso-system", "cso-controller-manager"),
            extension_config: "cso-hook-server-extensionconfig".into(),
            webhook: "cso-validating-webhook-configuration".into(),
        }
    }
}

/// One Cluster CSO manages.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAdoption {
    #[serde(serialize_with = "as_text")]
    pub cluster: ClusterKey,
    /// Its `ClusterAddon`.
    pub addon: String,
    /// The release CSO applied (`ClusterAddon.spec.clusterStack`).
    pub release: Option<String>,
    pub adoption: Option<Adoption>,
    /// Objects CSO recorded applying that the release no longer renders (`kind/namespace/name`).
    pub leftovers: Vec<String>,
    /// Why this Cluster cannot be adopted now.
    pub blockers: Vec<String>,
    /// Its ClusterSync was seeded.
    pub seeded: bool,
    /// The leftovers were labelled ours and put in the seeded inventory: the first sync prunes them.
    pub leftovers_pruned: bool,
    /// The Cluster no longer exists (its ClusterAddon is CSO's leftover): nothing to adopt.
    pub gone: bool,
}

/// The ClusterClasses of one release in one namespace (a `ClusterStackRelease`).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassAdoption {
    pub namespace: String,
    pub release: String,
    pub adoption: Option<Adoption>,
    /// Objects CSO recorded applying for this release that its render no longer has: reported,
    /// never pruned (ClusterClasses and templates may still be referenced).
    pub leftovers: Vec<String>,
    pub blockers: Vec<String>,
}

/// The whole report (and what was done); `-o json` prints it as it is, with `adoptable`.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub clusters: Vec<ClusterAdoption>,
    pub classes: Vec<ClassAdoption>,
    /// Steps of the hook hand-over still to take (`--dry-run`) or taken.
    pub handover: Vec<String>,
    /// What blocks the move as a whole.
    pub blockers: Vec<String>,
    /// What was changed, in order.
    pub done: Vec<String>,
    /// A clean-up (`--cleanup`), not an adoption.
    pub cleanup: bool,
}

impl Report {
    /// Nothing blocks, nothing restarts, every object was judged.
    pub fn adoptable(&self) -> bool {
        self.blockers.is_empty()
            && self.clusters.iter().all(|c| c.gone || (c.blockers.is_empty() && c.adoption.as_ref().is_some_and(clean)))
            && self.classes.iter().all(|c| c.blockers.is_empty() && c.adoption.as_ref().is_some_and(clean))
    }

    /// The report as JSON: every field, and `adoptable`.
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        v["adoptable"] = serde_json::Value::Bool(self.adoptable());
        v
    }

    /// The report as text, one line per object.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.clusters {
            out.push_str(&format!(
                "Cluster {} (ClusterAddon {}, release {})\n",
                c.cluster,
                c.addon,
                c.release.as_deref().unwrap_or("unknown")
            ));
            if c.gone {
                out.push_str("  gone       the Cluster does not exist: nothing to adopt (--cleanup removes its ClusterAddon)\n");
            }
            lines(&mut out, c.adoption.as_ref(), &c.blockers);
            for l in &c.leftovers {
                let fate = if c.leftovers_pruned { "labelled ours: the first sync prunes it" } else { "kept; --prune-leftovers prunes it" };
                out.push_str(&format!("  leftover   {l} (applied by CSO, not in the release: {fate})\n"));
            }
            if c.seeded {
                let a = c.adoption.as_ref();
                out.push_str(&format!(
                    "  seeded     ClusterSync: release {}, {} objects in its inventory, {} generated fields kept\n",
                    c.release.as_deref().unwrap_or_default(),
                    a.map_or(0, |a| a.inventory.len()),
                    a.map_or(0, |a| a.generated.len())
                ));
            }
        }
        for c in &self.classes {
            out.push_str(&format!("ClusterClasses of {} in namespace {}\n", c.release, c.namespace));
            lines(&mut out, c.adoption.as_ref(), &c.blockers);
            for l in &c.leftovers {
                out.push_str(&format!("  leftover   {l} (applied by CSO, not in the release: kept)\n"));
            }
        }
        for h in &self.handover {
            out.push_str(&format!("hand-over  {h}\n"));
        }
        for b in &self.blockers {
            out.push_str(&format!("blocked    {b}\n"));
        }
        for d in &self.done {
            out.push_str(&format!("done       {d}\n"));
        }
        if self.cleanup {
            let state = if self.blockers.is_empty() { "CSO is gone" } else { "stopped at the first failure; run it again" };
            out.push_str(&format!("clean-up: {} steps done; {state}\n", self.done.len()));
            return out;
        }
        let all: Vec<&Adoption> = self
            .clusters
            .iter()
            .filter_map(|c| c.adoption.as_ref())
            .chain(self.classes.iter().filter_map(|c| c.adoption.as_ref()))
            .collect();
        let count = |v: Verdict| all.iter().flat_map(|a| &a.objects).filter(|o| o.verdict == v).count();
        let blockers = self.blockers.len()
            + self.clusters.iter().map(|c| c.blockers.len()).sum::<usize>()
            + self.classes.iter().map(|c| c.blockers.len()).sum::<usize>();
        let leftovers =
            self.clusters.iter().map(|c| c.leftovers.len()).sum::<usize>() + self.classes.iter().map(|c| c.leftovers.len()).sum::<usize>();
        out.push_str(&format!(
            "{} Clusters and the ClusterClasses of {} release(s): {} objects identical, {} with changes, {} restarting pods, {} missing, {} not judged, {} leftovers; {} blockers: {}\n",
            self.clusters.iter().filter(|c| !c.gone).count(),
            self.classes.len(),
            count(Verdict::Identical),
            count(Verdict::Changes),
            count(Verdict::Restarts),
            count(Verdict::Missing),
            all.iter().map(|a| a.failures.len()).sum::<usize>(),
            leftovers,
            blockers,
            if self.adoptable() { "adoptable with no restart" } else { "not adoptable now" },
        ));
        out
    }
}

/// `<namespace>/<name>`.
fn as_text<S: serde::Serializer>(key: &ClusterKey, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(key)
}

fn clean(a: &Adoption) -> bool {
    a.failures.is_empty() && !a.restarts()
}

fn lines(out: &mut String, adoption: Option<&Adoption>, blockers: &[String]) {
    for b in blockers {
        out.push_str(&format!("  blocked    {b}\n"));
    }
    let Some(a) = adoption else { return };
    for o in &a.objects {
        let mut fields: Vec<String> = o.fields.clone();
        fields.extend(o.released.iter().map(|r| format!("{r} (removed)")));
        let detail = if fields.is_empty() { String::new() } else { format!(": {}", applier::ssa::describe_paths(&fields)) };
        let taken = if o.taken { " (taken over)" } else { "" };
        let generated = if o.generated.is_empty() {
            String::new()
        } else {
            format!(" (generated at render time, the live values kept: {})", o.generated.join(", "))
        };
        out.push_str(&format!("  {:<10} {}{detail}{generated}{taken}\n", o.verdict.to_string(), o.object));
    }
    for (object, why) in &a.failures {
        out.push_str(&format!("  failed     {object}: {why}\n"));
    }
}

fn cso(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// ClusterClass names keep a pre-release's dot (`…-v0-sha.abc`); tags and CSO's release names
/// have a dash there.
fn dashed(name: &str) -> String {
    name.replace('.', "-")
}

/// Runs `adopt cso`.
///
/// # Errors
/// The management cluster cannot be reached, or CSO's kinds are not served there.
pub async fn adopt(ctx: Arc<Context>, options: &Options) -> Result<Report, Error> {
    for (source, e) in ctx.poll_all().await {
        warn!(source = %source, "{e}");
    }
    let mgmt = Management::connect(ctx.clone()).await?;
    let mut report = Report::default();
    if options.cleanup {
        report.cleanup = true;
        cleanup(&mgmt, options, &mut report).await;
        return Ok(report);
    }
    let addons_api: Api<DynamicObject> = Api::all_with(mgmt.client().clone(), &cso("ClusterAddon", "clusteraddons"));
    let addons = match addons_api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            report
                .blockers
                .push(format!("{GROUP}/{VERSION} ClusterAddon is not served: the SCS cluster-stack-operator is not installed here"));
            return Ok(report);
        }
        Err(e) => return Err(Error::ListClusters(e)),
    };
    let releases_api: Api<DynamicObject> = Api::all_with(mgmt.client().clone(), &cso("ClusterStackRelease", "clusterstackreleases"));
    let csrs = releases_api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();

    handover_plan(&mgmt, options, &mut report).await;

    // Per Cluster: judge (and later take over) its addons.
    let mut namespaces: BTreeMap<String, Vec<(crate::config::Subscription, String)>> = BTreeMap::new();
    let mut work = Vec::new();
    let progress = crate::model::progress::reporter();
    progress.add("Clusters judged", addons.len() as u64);
    for addon in &addons {
        let _done = progress.tick();
        let ns = addon.metadata.namespace.clone().unwrap_or_default();
        let name = addon.data["spec"]["clusterRef"]["name"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| addon.metadata.name.as_deref().and_then(|n| n.strip_prefix("cluster-addon-")).map(str::to_owned))
            .unwrap_or_default();
        let key = ClusterKey::new(ns.clone(), name);
        if options.cluster.as_ref().is_some_and(|only| only != &key) {
            continue;
        }
        let (c, job) = judge_cluster(&mgmt, addon, key).await;
        if let Some(job) = &job {
            namespaces.entry(ns).or_default().push((job.sub.clone(), job.class.clone()));
        }
        report.clusters.push(c);
        work.push(job);
    }
    let suspended: BTreeSet<&str> = namespaces.values().flatten().filter(|(s, _)| s.suspend).map(|(s, _)| s.name.as_str()).collect();
    for name in suspended {
        report.handover.push(format!(
            "subscription {name} is suspended: stacksync holds the upgrades of the Clusters it adopts until you resume it (and its first sync runs)"
        ));
    }
    if let Some(only) = &options.cluster
        && report.clusters.is_empty()
    {
        report.blockers.push(format!("no ClusterAddon of CSO names Cluster {only}"));
    }

    // Per namespace: the ClusterClasses of each ClusterStackRelease there.
    let mut class_work = Vec::new();
    for csr in &csrs {
        let ns = csr.metadata.namespace.clone().unwrap_or_default();
        let release = csr.metadata.name.clone().unwrap_or_default();
        let Some(subs) = namespaces.get(&ns) else {
            if options.cluster.as_ref().is_none_or(|only| only.namespace == ns) {
                report.handover.push(format!(
                    "ClusterStackRelease {ns}/{release}: no Cluster CSO manages is in {ns}; its ClusterClasses are left as they are (not stacksync's)"
                ));
            }
            continue;
        };
        let (mut c, job) = judge_classes(&mgmt, &ns, &release, subs).await;
        if let Some(a) = &c.adoption {
            let rendered: BTreeSet<String> = a.objects.iter().map(|o| key_text(&o.object)).collect();
            c.leftovers = csr.data["status"]["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| !rendered.contains(&record_key(r)))
                .map(|r| leftover_ref(r).to_string())
                .collect();
        }
        report.classes.push(c);
        class_work.push(job);
    }

    if options.dry_run || !report.adoptable() {
        return Ok(report);
    }
    if !handover(&mgmt, options, &mut report).await {
        return Ok(report);
    }
    for (c, job) in report.clusters.iter_mut().zip(work) {
        let Some(job) = job else { continue };
        take_cluster(&mgmt, options, c, job, &mut report.done).await;
    }
    for (c, job) in report.classes.iter_mut().zip(class_work) {
        let Some((applier, stages)) = job else { continue };
        let a = applier.adopt(&stages, CSO_MANAGER, &Generated::default(), true).await;
        report.done.push(format!("ClusterClasses of {} in {}: {} objects taken over", c.release, c.namespace, a.inventory.len()));
        c.adoption = Some(a);
    }
    Ok(report)
}

/// What taking one Cluster over needs, once judged.
struct ClusterJob {
    sub: crate::config::Subscription,
    c: crate::model::cluster::ClusterConfig,
    class: String,
    release: crate::release::Release,
    applier: Applier,
    stages: Vec<Stage>,
    generated: Generated,
    uid: Option<String>,
    /// CSO's records of what it applied that the release no longer renders.
    leftovers: Vec<Value>,
}

async fn judge_cluster(mgmt: &Management, addon: &DynamicObject, key: ClusterKey) -> (ClusterAdoption, Option<ClusterJob>) {
    let config = mgmt.ctx().config();
    let mut out = ClusterAdoption {
        cluster: key.clone(),
        addon: addon.metadata.name.clone().unwrap_or_default(),
        release: addon.data["spec"]["clusterStack"].as_str().filter(|s| !s.is_empty()).map(dashed),
        adoption: None,
        leftovers: Vec::new(),
        blockers: Vec::new(),
        seeded: false,
        leftovers_pruned: false,
        gone: false,
    };
    let spec = &addon.data["spec"];
    if let Some(hook) = spec["hook"].as_str().filter(|h| !h.is_empty()) {
        out.blockers.push(format!(
            "ClusterAddon {}/{} runs the {hook} hook: an upgrade is in flight; adopt once it is done",
            key.namespace, out.addon
        ));
    }
    let pending: Vec<String> = addon.data["status"]["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["phase"].as_str().is_some_and(|p| p != "done"))
        .map(|s| format!("{} ({})", s["name"].as_str().unwrap_or("?"), s["phase"].as_str().unwrap_or("?")))
        .collect();
    if !pending.is_empty() {
        out.blockers.push(format!("ClusterAddon {}/{} has stages pending: {}", key.namespace, out.addon, pending.join(", ")));
    }
    let clusters: Api<DynamicObject> = Api::namespaced_with(mgmt.client().clone(), &key.namespace, mgmt.clusters());
    let cluster = match clusters.get_opt(&key.name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            // CSO's record of a Cluster deleted (its finalizer kept it): nothing to take over.
            out.gone = true;
            return (out, None);
        }
        Err(e) => {
            out.blockers.push(format!("cannot read Cluster {key}: {}", kube_error(&e)));
            return (out, None);
        }
    };
    if super::super::reconcile::decide::is_paused(&cluster) {
        out.blockers.push(format!(
            "Cluster {key} is paused (spec.paused or cluster.x-k8s.io/paused, as during clusterctl move): nothing is written to it; adopt once it is resumed"
        ));
        return (out, None);
    }
    let Some(class) = topology_class(&cluster.data) else {
        out.blockers.push(format!("Cluster {key} has no spec.topology class"));
        return (out, None);
    };
    if out.release.as_deref().is_some_and(|r| r != dashed(&class)) {
        out.blockers.push(format!(
            "Cluster {key} names class {class} but CSO applied {}: an upgrade is in flight; adopt once it is done",
            out.release.as_deref().unwrap_or_default()
        ));
    }
    let labels = cluster.metadata.labels.clone().unwrap_or_default();
    let Some((sub, c)) = subscription_for(&config, &key, &labels, Some(&class)) else {
        out.blockers.push(format!("no subscription of the config covers Cluster {key}"));
        return (out, None);
    };
    if sub.adopted_labels.get(CSO_LABEL.0).map(String::as_str) != Some(CSO_LABEL.1) {
        out.blockers.push(format!(
            "subscription {} has no adoptedLabels {{{}: {}}}: every pod template would lose CSO's label and its pods be replaced",
            sub.name, CSO_LABEL.0, CSO_LABEL.1
        ));
    }
    let sub = sub.clone();
    let c = mgmt.with_live_objects(&cluster, c).await;
    let release = match mgmt.choose(&sub, Some(&class)).await {
        Ok(r) => r,
        Err(e) => {
            out.blockers.push(format!("release {class} is not offered by subscription {}: {e}", sub.name));
            return (out, None);
        }
    };
    let result = async {
        let prepared = mgmt.ctx().prepare(&release).await.map_err(|e| e.to_string())?;
        let rendered = mgmt.render(&sub, &prepared, &c, false).await.map_err(|e| e.to_string())?;
        let super::super::Workload { client, discovery, .. } = mgmt.workload(&key, &c).await.map_err(|e| e.to_string())?;
        reachable(&client).await.map_err(|e| e.to_string())?;
        let generated = generated(mgmt, &sub, &prepared, &c, &rendered.stages).await.map_err(|e| e.to_string())?;
        let applier = Applier::new(client, mgmt.apply_options(&sub, &c)).with_discovery(discovery);
        let adoption = applier.adopt(&rendered.stages, CSO_MANAGER, &generated, false).await;
        Ok::<_, String>((applier, rendered.stages, generated, adoption))
    };
    let (applier, stages, generated, adoption) = match result.await {
        Ok(r) => r,
        Err(e) => {
            out.blockers.push(format!("cannot judge Cluster {key}'s addons: {e}"));
            return (out, None);
        }
    };
    let rendered: BTreeSet<String> = adoption.objects.iter().map(|o| key_text(&o.object)).collect();
    let leftovers: Vec<Value> = addon.data["status"]["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !rendered.contains(&record_key(r)))
        .cloned()
        .collect();
    out.leftovers = leftovers.iter().map(|r| leftover_ref(r).to_string()).collect();
    out.adoption = Some(adoption);
    let uid = cluster.metadata.uid.clone();
    (out, Some(ClusterJob { sub, c, class, release, applier, stages, generated, uid, leftovers }))
}

/// The fields of a cluster's addons the charts generate at render time: where a second render,
/// by a helm with no memo, differs from the first.
async fn generated(
    mgmt: &Management,
    sub: &crate::config::Subscription,
    prepared: &crate::controller::PreparedRelease,
    c: &crate::model::cluster::ClusterConfig,
    first: &[Stage],
) -> Result<Generated, crate::controller::pipeline::RenderError> {
    let mut out = Generated::default();
    if sub.format != crate::config::Format::ClusterStack {
        // Plain manifests are substituted, never generated.
        return Ok(out);
    }
    let helm = mgmt.ctx().helm().await?.without_memo();
    let second = crate::controller::pipeline::addons_with(mgmt.ctx(), &helm, sub, prepared, c).await?;
    let key = |o: &crate::model::Object| (o.group().to_owned(), o.kind.clone(), o.namespace.clone(), o.name.clone());
    let again: BTreeMap<_, &crate::model::Object> = second.stages.iter().flat_map(|s| &s.objects).map(|o| (key(o), o)).collect();
    for o in first.iter().flat_map(|s| &s.objects) {
        if let Some(other) = again.get(&key(o)) {
            let differing = applier::ssa::generated_fields(&o.body, &other.body);
            if !differing.is_empty() {
                out.insert(key(o), differing);
            }
        }
    }
    Ok(out)
}

/// `group|kind|namespace|name` of an object.
fn key_text(o: &ObjectRef) -> String {
    let group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    format!("{group}|{}|{}|{}", o.kind, o.namespace.as_deref().unwrap_or_default(), o.name)
}

/// The same of one of CSO's `status.resources` records.
fn record_key(r: &Value) -> String {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
    format!("{}|{}|{}|{}", s("group"), s("kind"), s("namespace"), s("name"))
}

async fn judge_classes(
    mgmt: &Management,
    ns: &str,
    release: &str,
    subs: &[(crate::config::Subscription, String)],
) -> (ClassAdoption, Option<(Applier, Vec<Stage>)>) {
    let mut out = ClassAdoption { namespace: ns.to_owned(), release: release.to_owned(), ..ClassAdoption::default() };
    // The subscription of a Cluster of this namespace on this release, else of any there.
    let sub = subs.iter().find(|(_, class)| dashed(class) == release).or_else(|| subs.first()).map(|(s, _)| s.clone());
    let Some(sub) = sub else { return (out, None) };
    let result = async {
        let rel = mgmt
            .choose(&sub, Some(release))
            .await
            .map_err(|e| format!("release {release} is not offered by subscription {}: {e}", sub.name))?;
        let prepared = mgmt.ctx().prepare(&rel).await.map_err(|e| e.to_string())?;
        let objects = crate::controller::pipeline::cluster_class(mgmt.ctx(), &sub, &prepared, ns).await.map_err(|e| e.to_string())?;
        let stages = vec![Stage { name: crate::render::clusterstack::CLUSTER_CLASS_STAGE.into(), action: StageAction::Apply, objects }];
        let applier = Applier::new(mgmt.client().clone(), super::super::classes::class_options(&sub, ns));
        let adoption = applier.adopt(&stages, CSO_MANAGER, &Generated::default(), false).await;
        Ok::<_, String>((applier, stages, adoption))
    };
    match result.await {
        Ok((applier, stages, adoption)) => {
            out.adoption = Some(adoption);
            (out, Some((applier, stages)))
        }
        Err(e) => {
            out.blockers.push(e);
            (out, None)
        }
    }
}

/// What the hand-over will do, and what would stop it: stacksync's own ExtensionConfig must be
/// discovered by Cluster API (its `BeforeClusterUpgrade` handler) before CSO's goes.
async fn handover_plan(mgmt: &Management, options: &Options, report: &mut Report) {
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(mgmt.client().clone(), &options.deployment.namespace, &resource("apps", "v1", "Deployment", "deployments"));
    match deployments.get_opt(&options.deployment.name).await {
        Ok(Some(d)) => {
            let replicas = d.data["spec"]["replicas"].as_i64().unwrap_or(1);
            let running = d.data["status"]["replicas"].as_i64().unwrap_or(0);
            if replicas > 0 || running > 0 {
                report.handover.push(format!("scale CSO's Deployment {} to 0 (runs {running} of {replicas} now)", options.deployment));
            }
        }
        Ok(None) => {}
        Err(e) => report.blockers.push(format!("cannot read CSO's Deployment {}: {}", options.deployment, kube_error(&e))),
    }
    let (extensions, ours) = extension_configs(mgmt, &options.extension_config).await;
    if extensions.iter().any(|n| n == &options.extension_config) {
        report.handover.push(format!("delete CSO's ExtensionConfig {} (its hooks)", options.extension_config));
    }
    match ours {
        Some(name) => report.handover.push(format!("stacksync's ExtensionConfig {name} is discovered by Cluster API (BeforeClusterUpgrade)")),
        None => report.blockers.push(
            "no ExtensionConfig but CSO's has a BeforeClusterUpgrade handler discovered by Cluster API: deploy stacksync with its hooks (deploy/) first, so that upgrades stay held while the hooks change hands".into(),
        ),
    }
    let webhooks: Api<DynamicObject> = Api::all_with(
        mgmt.client().clone(),
        &resource("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
    );
    if matches!(webhooks.get_opt(&options.webhook).await, Ok(Some(_))) {
        report.handover.push(format!(
            "delete CSO's ValidatingWebhookConfiguration {} (failurePolicy Fail: with CSO gone it would refuse every Cluster change)",
            options.webhook
        ));
    }
}

/// The ExtensionConfigs (names), and the first that is not CSO's and has a discovered
/// `BeforeClusterUpgrade` handler.
async fn extension_configs(mgmt: &Management, cso_name: &str) -> (Vec<String>, Option<String>) {
    for version in ["v1beta2", "v1alpha1"] {
        let api: Api<DynamicObject> =
            Api::all_with(mgmt.client().clone(), &resource("runtime.cluster.x-k8s.io", version, "ExtensionConfig", "extensionconfigs"));
        let Ok(list) = api.list(&ListParams::default()).await else { continue };
        let names = list.items.iter().filter_map(|e| e.metadata.name.clone()).collect();
        let ours = list
            .items
            .iter()
            .filter(|e| e.metadata.name.as_deref() != Some(cso_name))
            .find(|e| {
                e.data["status"]["handlers"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|h| h["requestHook"]["hook"] == "BeforeClusterUpgrade"))
            })
            .and_then(|e| e.metadata.name.clone());
        return (names, ours);
    }
    (Vec::new(), None)
}

/// CSO scaled to zero (its pods gone), then its ExtensionConfig and webhooks deleted. False when
/// a step failed (said in the report; nothing after it is done).
async fn handover(mgmt: &Management, options: &Options, report: &mut Report) -> bool {
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(mgmt.client().clone(), &options.deployment.namespace, &resource("apps", "v1", "Deployment", "deployments"));
    if let Ok(Some(_)) = deployments.get_opt(&options.deployment.name).await {
        let patch = json!({"spec": {"replicas": 0}});
        if let Err(e) = deployments.patch(&options.deployment.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            report.blockers.push(format!("cannot scale CSO's Deployment {} to 0: {}", options.deployment, kube_error(&e)));
            return false;
        }
        let started = tokio::time::Instant::now();
        loop {
            match deployments.get_opt(&options.deployment.name).await {
                Ok(Some(d)) if d.data["status"]["replicas"].as_i64().unwrap_or(0) > 0 => {}
                Ok(_) => break,
                Err(e) => warn!(deployment = %options.deployment, error = %kube_error(&e), "cannot read CSO's Deployment"),
            }
            if started.elapsed() > SCALE_DOWN_WAIT {
                report
                    .blockers
                    .push(format!("CSO's Deployment {} still has pods {SCALE_DOWN_WAIT:?} after it was scaled to 0", options.deployment));
                return false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        report.done.push(format!("scaled CSO's Deployment {} to 0", options.deployment));
        info!(deployment = %options.deployment, "scaled CSO to 0");
    }
    for version in ["v1beta2", "v1alpha1"] {
        let api: Api<DynamicObject> =
            Api::all_with(mgmt.client().clone(), &resource("runtime.cluster.x-k8s.io", version, "ExtensionConfig", "extensionconfigs"));
        match api.delete(&options.extension_config, &DeleteParams::default()).await {
            Ok(_) => {
                report.done.push(format!("deleted CSO's ExtensionConfig {}", options.extension_config));
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                report.blockers.push(format!("cannot delete CSO's ExtensionConfig {}: {}", options.extension_config, kube_error(&e)));
                return false;
            }
        }
    }
    let webhooks: Api<DynamicObject> = Api::all_with(
        mgmt.client().clone(),
        &resource("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
    );
    match webhooks.delete(&options.webhook, &DeleteParams::default()).await {
        Ok(_) => report.done.push(format!("deleted CSO's ValidatingWebhookConfiguration {}", options.webhook)),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            report.blockers.push(format!("cannot delete CSO's ValidatingWebhookConfiguration {}: {}", options.webhook, kube_error(&e)));
            return false;
        }
    }
    true
}

/// Takes a judged Cluster's objects over, labels CSO's leftovers as ours when asked (the first
/// sync prunes them), and seeds its ClusterSync.
async fn take_cluster(mgmt: &Management, options: &Options, out: &mut ClusterAdoption, job: ClusterJob, done: &mut Vec<String>) {
    let ClusterJob { sub, c, class, release, applier, stages, generated, uid, leftovers } = job;
    let mut adoption = applier.adopt(&stages, CSO_MANAGER, &generated, true).await;
    if options.prune_leftovers {
        out.leftovers_pruned = true;
        let owner = applier::ssa::owner_label_value(&applier.options().owner);
        for r in &leftovers {
            match label_leftover(&applier, r, &owner).await {
                Ok(entry) => adoption.inventory.push(entry),
                Err(e) => adoption.failures.push((leftover_ref(r), e.to_string())),
            }
        }
    }
    done.push(format!("Cluster {}: {} objects taken over", out.cluster, adoption.inventory.len()));
    let inventory = Inventory { entries: adoption.inventory.clone() };
    let at = super::super::reconcile::status::now();
    let status = ClusterSyncStatus {
        class: Some(class),
        applied_release: Some(ReleaseRefStatus {
            tag: release.tag.clone(),
            version: release.version.to_string(),
            commit: release.commit.clone(),
        }),
        inventory: inventory.to_lines(),
        generated: adoption.generated.clone(),
        adopted: Some(format!("SCS cluster-stack-operator at {at}")),
        message: "adopted from the SCS cluster-stack-operator; the next sync checks every object".into(),
        conditions: vec![Condition {
            type_: "Reconciling".into(),
            status: "True".into(),
            reason: super::super::hook::ADOPTED.into(),
            message: "adopted from the SCS cluster-stack-operator; the next sync checks every object".into(),
            last_transition_time: at.clone(),
            observed_generation: None,
        }],
        ..ClusterSyncStatus::default()
    };
    let api_version = format!("{}/{}", mgmt.clusters().group, mgmt.clusters().version);
    let owner =
        Owner { api_version: &api_version, uid: uid.as_deref(), exists: false, written: Default::default(), rotate_requested: None };
    let syncs: Api<ClusterSync> = Api::namespaced(mgmt.client().clone(), &out.cluster.namespace);
    let previous = syncs.get_opt(&out.cluster.name).await.ok().flatten();
    if previous.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.applied_release.is_some()) {
        done.push(format!("Cluster {}: its ClusterSync already records a release; left as it is", out.cluster));
    } else {
        match write_cluster_sync(&syncs, &sub, &c, &owner, previous.as_ref(), status, Duration::ZERO).await {
            Ok(_) => out.seeded = true,
            Err(e) => adoption.failures.push((
                ObjectRef {
                    api_version: "stacksync.io/v1alpha1".into(),
                    kind: "ClusterSync".into(),
                    namespace: Some(out.cluster.namespace.clone()),
                    name: out.cluster.name.clone(),
                },
                format!("cannot seed the ClusterSync: {}", kube_error(&e)),
            )),
        }
    }
    out.adoption = Some(adoption);
}

fn leftover_ref(r: &Value) -> ObjectRef {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
    ObjectRef {
        api_version: if s("group").is_empty() { s("version") } else { format!("{}/{}", s("group"), s("version")) },
        kind: s("kind"),
        namespace: Some(s("namespace")).filter(|n| !n.is_empty()),
        name: s("name"),
    }
}

/// Puts our owner label on a leftover (so the first sync may prune it) and returns its entry.
async fn label_leftover(applier: &Applier, r: &Value, owner: &str) -> Result<applier::ssa::InventoryEntry, Leftover> {
    let o = leftover_ref(r);
    let group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g).to_owned();
    let version = o.api_version.rsplit_once('/').map_or(o.api_version.as_str(), |(_, v)| v).to_owned();
    let res = applier.resource(&o.api_version, &o.kind).await.map_err(Leftover::NotServed)?;
    let api: Api<DynamicObject> = match &o.namespace {
        Some(ns) => Api::namespaced_with(applier.client().clone(), ns, &res),
        None => Api::all_with(applier.client().clone(), &res),
    };
    let mut metadata = json!({"name": o.name, "labels": {crate::model::manager::OWNER_LABEL: owner}});
    if let Some(ns) = &o.namespace {
        metadata["namespace"] = json!(ns);
    }
    let body = json!({"apiVersion": o.api_version, "kind": o.kind, "metadata": metadata});
    match api.patch(&o.name, &PatchParams::apply(crate::model::manager::FIELD_MANAGER), &Patch::Apply(&body)).await {
        Ok(_) => Ok(applier::ssa::InventoryEntry {
            group,
            kind: o.kind,
            namespace: o.namespace,
            name: o.name,
            version,
            digest: String::new(),
            fields: String::new(),
        }),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(Leftover::Gone),
        Err(e) => Err(Leftover::Label(e)),
    }
}

/// Why one of CSO's leftovers could not be labelled for pruning.
#[derive(Debug, thiserror::Error)]
enum Leftover {
    /// Its kind is not served, or discovery failed (discovery's message).
    #[error("{0}")]
    NotServed(String),
    #[error("already gone")]
    Gone,
    #[error("cannot label it for pruning: {}", kube_error(.0))]
    Label(#[source] kube::Error),
}

/// CSO's finalizers, objects and CRDs removed, in that order; refused while CSO runs.
async fn cleanup(mgmt: &Management, options: &Options, report: &mut Report) {
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(mgmt.client().clone(), &options.deployment.namespace, &resource("apps", "v1", "Deployment", "deployments"));
    if let Ok(Some(d)) = deployments.get_opt(&options.deployment.name).await
        && (d.data["spec"]["replicas"].as_i64().unwrap_or(1) > 0 || d.data["status"]["replicas"].as_i64().unwrap_or(0) > 0)
    {
        report
            .blockers
            .push(format!("CSO's Deployment {} still runs: adopt first (it scales CSO to 0), then clean up", options.deployment));
        return;
    }
    let kinds = [("ClusterAddon", "clusteraddons"), ("ClusterStackRelease", "clusterstackreleases"), ("ClusterStack", "clusterstacks")];
    for (kind, plural) in kinds {
        let api: Api<DynamicObject> = Api::all_with(mgmt.client().clone(), &cso(kind, plural));
        let items = match api.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => {
                report.blockers.push(format!("cannot list {kind}s: {}", kube_error(&e)));
                return;
            }
        };
        for item in items {
            let (Some(ns), Some(name)) = (item.metadata.namespace.clone(), item.metadata.name.clone()) else { continue };
            let api: Api<DynamicObject> = Api::namespaced_with(mgmt.client().clone(), &ns, &cso(kind, plural));
            let finalizers = item.metadata.finalizers.clone().unwrap_or_default();
            if finalizers.iter().any(|f| FINALIZERS.contains(&f.as_str())) {
                let kept: Vec<&String> = finalizers.iter().filter(|f| !FINALIZERS.contains(&f.as_str())).collect();
                let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": item.metadata.resource_version}});
                match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => report.done.push(format!("removed CSO's finalizer from {kind} {ns}/{name}")),
                    Err(e) => {
                        report.blockers.push(format!("cannot remove CSO's finalizer from {kind} {ns}/{name}: {}", kube_error(&e)));
                        return;
                    }
                }
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => report.done.push(format!("deleted {kind} {ns}/{name}")),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    report.blockers.push(format!("cannot delete {kind} {ns}/{name}: {}", kube_error(&e)));
                    return;
                }
            }
        }
    }
    let crds: Api<DynamicObject> = Api::all_with(
        mgmt.client().clone(),
        &resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions"),
    );
    for (_, plural) in kinds {
        let name = format!("{plural}.{GROUP}");
        match crds.delete(&name, &DeleteParams::default()).await {
            Ok(_) => report.done.push(format!("deleted CustomResourceDefinition {name}")),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                report.blockers.push(format!("cannot delete CustomResourceDefinition {name}: {}", kube_error(&e)));
                return;
            }
        }
    }
    match deployments.delete(&options.deployment.name, &DeleteParams::default()).await {
        Ok(_) => report
            .done
            .push(format!("deleted CSO's Deployment {} (its namespace, RBAC and certificates are yours to delete)", options.deployment)),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => report.blockers.push(format!("cannot delete CSO's Deployment {}: {}", options.deployment, kube_error(&e))),
    }
}
