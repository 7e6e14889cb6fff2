//! The real Cluster API providers' kinds on the management cluster of [`crate::capi`], for the SCS
//! cluster stacks: the CRDs of the kubeadm bootstrap and control-plane providers, of the Docker
//! provider and of cluster-api-provider-openstack (taken from their Go modules by
//! `scripts/build-provider-crds.sh`, never committed), installed with the contract labels their
//! kustomize builds add, and a player of the contracts those providers' controllers would
//! honour, since they do not run here.
//!
//! Installed as the providers' `config/crd` kustomizations would install them, minus their
//! conversion webhooks (served by the providers' managers, which do not run): a CRD with several
//! versions converts with the `None` strategy, so everything is written in one version per kind,
//! the latest one Cluster API's contract names (what `RefVersionsUpToDate` asks for).
//!
//! The player ([`Providers::start`]) does, for every Cluster that is not paused, what the
//! providers would report once machines booted at once: the infrastructure cluster
//! (`OpenStackCluster`, `DockerCluster`) gets the workload control plane as its endpoint and is
//! ready/provisioned; the `KubeadmControlPlane` writes the `<cluster>-kubeconfig` Secret
//! (pointing at the workload control plane) and reports its `spec.version`, its replicas ready
//! and up to date, initialized and available — in the status fields of the contract its API
//! version speaks (`v1beta1`: `ready`, `initialized`, `updatedReplicas`, a `Ready` condition;
//! `v1beta2`: `initialization.controlPlaneInitialized`, `upToDateReplicas`, `availableReplicas`,
//! an `Available` condition). Everything Cluster API decides stays the real manager's.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::kube::{Error, Result, apply_value, wait_established};

/// Field manager of the player's writes.
const PLAYER: &str = "testkit-provider-contracts";

/// How often the player looks at the providers' objects.
const PERIOD: Duration = Duration::from_millis(250);

/// The Cluster API version whose providers' CRDs are used: the one testkit runs
/// ([`crate::capi::version`]).
pub fn capi_version() -> String {
    crate::capi::version()
}

/// Where `scripts/build-provider-crds.sh` puts the CRDs for [`capi_version`]:
/// `kubeadm/`, `docker/`, `openstack/`.
pub fn dir() -> PathBuf {
    crate::kube::realkube_dir().join(format!("providers-{}", capi_version()))
}

/// True when the providers' CRDs are there (and Cluster API is built).
pub fn available() -> bool {
    let d = dir();
    crate::capi::available() && ["kubeadm", "docker", "openstack"].iter().all(|p| d.join(p).is_dir())
}

/// The contract labels a kustomization adds (`commonLabels`, and every `labels[].pairs`) that
/// name Cluster API contracts (`cluster.x-k8s.io/<contract>`), and the CRD files it lists.
pub fn contract_labels(kustomization: &Value) -> (BTreeMap<String, String>, Vec<String>) {
    let mut labels = BTreeMap::new();
    let mut add = |pairs: &Value| {
        for (k, v) in pairs.as_object().into_iter().flatten() {
            if k.starts_with("cluster.x-k8s.io/")
                && let Some(v) = v.as_str()
            {
                labels.insert(k.clone(), v.to_owned());
            }
        }
    };
    add(&kustomization["commonLabels"]);
    for entry in kustomization["labels"].as_array().into_iter().flatten() {
        add(&entry["pairs"]);
    }
    let files = kustomization["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str())
        .filter_map(|r| Path::new(r).file_name().map(|f| f.to_string_lossy().into_owned()))
        .collect();
    (labels, files)
}

/// The contracts a Cluster API of contract `contract` accepts, newest first (v1beta2 still
/// accepts providers of the v1beta1 contract).
fn compatible_contracts(contract: &str) -> Vec<&str> {
    if contract == "v1beta2" { vec!["v1beta2", "v1beta1"] } else { vec![contract] }
}

/// Orders Kubernetes API versions as Kubernetes does: GA above beta above alpha, then by
/// numbers (`v1alpha7 < v1beta1 < v1beta2 < v1`).
fn version_key(v: &str) -> (u32, u32, u32) {
    let rest = v.trim_start_matches('v');
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n)
    } else {
        (2, "0")
    };
    (major, stage, minor.parse().unwrap_or(0))
}

/// `(contract, apiVersion)` Cluster API of contract `contract` picks for a CRD with these labels:
/// the newest compatible contract with a label, and the newest version it lists (Cluster API's
/// `GetLatestContractAndAPIVersionFromContract`). `None` when no compatible contract is labelled.
pub fn latest_version(labels: &BTreeMap<String, String>, contract: &str) -> Option<(String, String)> {
    compatible_contracts(contract).into_iter().find_map(|c| {
        let versions = labels.get(&format!("cluster.x-k8s.io/{c}")).filter(|v| !v.is_empty())?;
        let newest = versions.split('_').max_by_key(|v| version_key(v))?;
        Some((c.to_owned(), newest.to_owned()))
    })
}

/// Every provider CRD under `dir` (`<provider>/*.yaml`), each with the contract labels of the
/// kustomization that lists it. Sorted by file.
///
/// # Errors
/// A directory or file that cannot be read, bad YAML.
pub fn crds(dir: &Path) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for provider in ["kubeadm", "docker", "openstack"] {
        let pdir = dir.join(provider);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&pdir)
            .map_err(|source| Error::Dir { path: pdir.clone(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        let (kustomizations, crd_files): (Vec<PathBuf>, Vec<PathBuf>) =
            files.into_iter().partition(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("kustomization")));
        let mut labels_of: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for k in &kustomizations {
            for doc in crate::capi::read_docs(k)? {
                let (labels, files) = contract_labels(&doc);
                for f in files {
                    labels_of.entry(f).or_default().extend(labels.clone());
                }
            }
        }
        for file in &crd_files {
            let name = file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let labels = labels_of.get(&name).cloned().unwrap_or_default();
            for mut crd in crate::capi::read_docs(file)? {
                if crd["kind"] != "CustomResourceDefinition" {
                    continue;
                }
                for (k, v) in &labels {
                    crd["metadata"]["labels"][k] = json!(v);
                }
                out.push(crd);
            }
        }
    }
    Ok(out)
}

/// The contract of the running Cluster API: the storage version of its `Cluster` CRD.
///
/// # Errors
/// The CRD cannot be read.
pub async fn contract(client: &kube::Client) -> Result<String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd =
        crds.get("clusters.cluster.x-k8s.io").await.map_err(|source| Error::Client { what: "reading the Cluster CRD".into(), source })?;
    Ok(crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.clone()).unwrap_or_else(|| "v1beta1".into()))
}

/// `(contract, apiVersion)` the running Cluster API picks for `group`'s `kind`, from its CRD's
/// labels; `None` when the CRD is not installed or names no compatible contract.
///
/// # Errors
/// The CRD cannot be read.
pub async fn latest_api_version(client: &kube::Client, group: &str, kind: &str) -> Result<Option<(String, String)>> {
    let contract = contract(client).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{}.{group}", plural(kind));
    let crd = crds.get_opt(&name).await.map_err(|source| Error::Client { what: format!("reading CRD {name}"), source })?;
    let labels: BTreeMap<String, String> = crd.and_then(|c| c.metadata.labels).unwrap_or_default();
    Ok(latest_version(&labels, &contract))
}

/// The plural Cluster API computes for a provider kind (lower case, `s`, as `CalculateCRDName`).
fn plural(kind: &str) -> String {
    format!("{}s", kind.to_ascii_lowercase())
}

/// Installs the providers' CRDs ([`crds`] of [`dir`]) and waits until each is Established.
///
/// # Errors
/// [`crds`]' errors; a CRD the server refuses or that does not become Established.
pub async fn install(client: &kube::Client) -> Result<()> {
    let d = dir();
    let mut names = Vec::new();
    for crd in crds(&d)? {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        apply_value(client, crd).await.map_err(|source| Error::Client { what: format!("applying the provider CRD {name}"), source })?;
        names.push(name);
    }
    for name in &names {
        wait_established(client, name).await.map_err(|message| Error::Preload { path: d.clone(), message })?;
    }
    Ok(())
}

/// A kind the player plays, at the version Cluster API reads it in.
#[derive(Debug, Clone)]
struct Played {
    resource: ApiResource,
    contract: String,
}

/// The contract player (see the module's documentation). Stopped and joined by
/// [`Providers::stop`] or when dropped.
pub struct Providers {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Providers {
    /// Starts playing the providers' contracts on the management control plane of `env`, its
    /// Clusters' endpoint and kubeconfig the workload control plane of `env`. The CRDs must be
    /// installed ([`install`]).
    ///
    /// # Errors
    /// An unreadable kubeconfig, a CRD that cannot be read, a thread that cannot be spawned.
    pub async fn start(env: &crate::capi::Shared) -> Result<Providers> {
        let client = env.client().await?;
        let mut cluster_kinds = Vec::new();
        for (group, kind) in [("infrastructure.cluster.x-k8s.io", "OpenStackCluster"), ("infrastructure.cluster.x-k8s.io", "DockerCluster")]
        {
            if let Some(played) = played(&client, group, kind).await? {
                cluster_kinds.push(played);
            }
        }
        let control_plane = played(&client, "controlplane.cluster.x-k8s.io", "KubeadmControlPlane").await?;
        let cluster_version = contract(&client).await?;
        let config = crate::kube::config_from(env.kubeconfig()).await?;
        let kubeconfig = std::fs::read(env.workload_kubeconfig())
            .map_err(|source| Error::Write { path: env.workload_kubeconfig().to_path_buf(), source })?;
        let workload = crate::kube::config_from(env.workload_kubeconfig()).await?;
        let endpoint = crate::capi::endpoint_of(workload.cluster_url.to_string().as_str());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("testkit-provider-contracts".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("provider contracts: a runtime: {e}");
                        return;
                    }
                };
                let world = World { cluster_kinds, control_plane, cluster_version, kubeconfig, endpoint };
                runtime.block_on(play(config, world, flag));
            })
            .map_err(|source| Error::Spawn { component: "the provider contract player", source })?;
        Ok(Providers { stop, thread: Some(thread) })
    }

    /// Stops the player and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Providers {
    fn drop(&mut self) {
        self.halt();
    }
}

async fn played(client: &kube::Client, group: &str, kind: &str) -> Result<Option<Played>> {
    Ok(latest_api_version(client, group, kind).await?.map(|(contract, version)| Played {
        resource: ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, &version, kind), &plural(kind)),
        contract,
    }))
}

struct World {
    cluster_kinds: Vec<Played>,
    control_plane: Option<Played>,
    /// The version Cluster objects are read in.
    cluster_version: String,
    kubeconfig: Vec<u8>,
    endpoint: (String, u16),
}

async fn play(mut config: kube::Config, world: World, stop: Arc<AtomicBool>) {
    config.read_timeout = Some(Duration::from_secs(10));
    config.connect_timeout = Some(Duration::from_secs(5));
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("provider contracts: a client: {e}");
            return;
        }
    };
    let mut secrets_written = HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        for kind in &world.cluster_kinds {
            if let Err(e) = infra_clusters(&client, &world, kind).await {
                tracing::debug!("provider contracts: {}: {e}", kind.resource.kind);
            }
        }
        if let Some(kind) = &world.control_plane
            && let Err(e) = control_planes(&client, &world, kind, &mut secrets_written).await
        {
            tracing::debug!("provider contracts: {}: {e}", kind.resource.kind);
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// The Cluster an object belongs to (label `cluster.x-k8s.io/cluster-name`), unless it is
/// paused (then a provider leaves its objects alone).
async fn live_cluster(client: &kube::Client, world: &World, ns: &str, obj: &DynamicObject) -> Result<Option<String>, kube::Error> {
    let Some(name) = obj.metadata.labels.as_ref().and_then(|l| l.get("cluster.x-k8s.io/cluster-name")) else { return Ok(None) };
    let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", &world.cluster_version, "Cluster"));
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
    let Some(cluster) = clusters.get_opt(name).await? else { return Ok(None) };
    let paused = cluster.data["spec"]["paused"] == json!(true)
        || cluster.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("cluster.x-k8s.io/paused"));
    Ok(if paused { None } else { Some(name.clone()) })
}

async fn infra_clusters(client: &kube::Client, world: &World, kind: &Played) -> Result<(), kube::Error> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
    for obj in all.list(&ListParams::default()).await?.items {
        let (Some(ns), Some(name)) = (obj.metadata.namespace.clone(), obj.metadata.name.clone()) else { continue };
        if obj.metadata.deletion_timestamp.is_some() || live_cluster(client, world, &ns, &obj).await?.is_none() {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.resource);
        let want = json!({"host": world.endpoint.0, "port": world.endpoint.1});
        if obj.data["spec"]["controlPlaneEndpoint"] != want {
            api.patch(&name, &PatchParams::apply(PLAYER), &Patch::Merge(json!({"spec": {"controlPlaneEndpoint": want}}))).await?;
        }
        let status = infra_status(&kind.contract);
        if !contains(&obj.data["status"], &status) {
            api.patch_status(&name, &PatchParams::apply(PLAYER), &Patch::Merge(json!({ "status": status }))).await?;
        }
    }
    Ok(())
}

/// What an infrastructure cluster of this contract reports once provisioned.
fn infra_status(contract: &str) -> Value {
    if contract == "v1beta1" { json!({"ready": true}) } else { json!({"initialization": {"provisioned": true}}) }
}

/// True when every field of `want` is in `have` with the same value.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        _ => have == want,
    }
}

/// What a control plane of this contract reports once its `replicas` machines run `version`:
/// the fields Cluster API's topology controller (upgrading, scaling) and Cluster controller
/// (initialized, available) read. Conditions carry `now` as their transition time.
pub fn control_plane_status(contract: &str, version: &str, replicas: i64, generation: i64, now: &str) -> Value {
    let condition = |type_: &str| json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": now, "observedGeneration": generation});
    if contract == "v1beta1" {
        let v1beta1 = |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now});
        json!({
            "version": version, "replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas,
            "unavailableReplicas": 0, "ready": true, "initialized": true, "observedGeneration": generation,
            "conditions": [v1beta1("Ready"), v1beta1("Available")],
            "v1beta2": {"conditions": [condition("Available")]},
        })
    } else {
        json!({
            "version": version, "replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
            "upToDateReplicas": replicas, "initialization": {"controlPlaneInitialized": true}, "observedGeneration": generation,
            "conditions": [condition("Available")],
        })
    }
}

async fn control_planes(
    client: &kube::Client,
    world: &World,
    kind: &Played,
    secrets_written: &mut HashSet<String>,
) -> Result<(), kube::Error> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
    for obj in all.list(&ListParams::default()).await?.items {
        let (Some(ns), Some(name), Some(uid)) = (obj.metadata.namespace.clone(), obj.metadata.name.clone(), obj.metadata.uid.clone())
        else {
            continue;
        };
        if obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(cluster) = live_cluster(client, world, &ns, &obj).await? else { continue };
        if secrets_written.insert(uid.clone()) {
            let owner = json!({"apiVersion": kind.resource.api_version, "kind": kind.resource.kind, "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true});
            kubeconfig_secret(client, &ns, &cluster, owner, &world.kubeconfig).await.inspect_err(|_| {
                secrets_written.remove(&uid);
            })?;
        }
        let Some(version) = obj.data["spec"]["version"].as_str() else { continue };
        let replicas = obj.data["spec"]["replicas"].as_i64().unwrap_or(1);
        let generation = obj.metadata.generation.unwrap_or(0);
        let current = &obj.data["status"];
        let unchanged = current["version"].as_str() == Some(version)
            && current["replicas"].as_i64() == Some(replicas)
            && current["readyReplicas"].as_i64() == Some(replicas)
            && current["observedGeneration"].as_i64() == Some(generation);
        if unchanged {
            continue;
        }
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let status = control_plane_status(&kind.contract, version, replicas, generation, &now);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.resource);
        api.patch_status(&name, &PatchParams::apply(PLAYER), &Patch::Merge(json!({ "status": status }))).await?;
    }
    Ok(())
}

/// The `<cluster>-kubeconfig` Secret the kubeadm control plane writes (key `value`, type
/// `cluster.x-k8s.io/secret`, the cluster-name label), owned by the control plane.
async fn kubeconfig_secret(client: &kube::Client, ns: &str, cluster: &str, owner: Value, kubeconfig: &[u8]) -> Result<(), kube::Error> {
    let name = format!("{cluster}-kubeconfig");
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}, "ownerReferences": [owner]},
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(kubeconfig)},
    });
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()));
    api.patch(&name, &PatchParams::apply(PLAYER).force(), &Patch::Apply(secret)).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_latest_version_is_cluster_api_s_choice() {
        let kubeadm = labels(&[("cluster.x-k8s.io/v1beta1", "v1beta1"), ("cluster.x-k8s.io/v1beta2", "v1beta2")]);
        let capo = labels(&[("cluster.x-k8s.io/v1beta1", "v1alpha7_v1beta1")]);
        type Case<'a> = (&'a BTreeMap<String, String>, &'a str, Option<(&'a str, &'a str)>);
        let cases: [Case; 5] = [
            (&kubeadm, "v1beta2", Some(("v1beta2", "v1beta2"))),
            (&kubeadm, "v1beta1", Some(("v1beta1", "v1beta1"))),
            // A provider of the v1beta1 contract under Cluster API v1beta2: still accepted.
            (&capo, "v1beta2", Some(("v1beta1", "v1beta1"))),
            (&capo, "v1beta1", Some(("v1beta1", "v1beta1"))),
            (&labels(&[("cluster.x-k8s.io/provider", "x")]), "v1beta2", None),
        ];
        for (labels, contract, want) in cases {
            let got = latest_version(labels, contract);
            assert_eq!(got.as_ref().map(|(c, v)| (c.as_str(), v.as_str())), want, "{labels:?} under {contract}");
        }
        let mut versions = ["v1", "v1alpha7", "v1beta2", "v1beta1", "v1alpha10"];
        versions.sort_by_key(|v| version_key(v));
        assert_eq!(versions, ["v1alpha7", "v1alpha10", "v1beta1", "v1beta2", "v1"]);
    }

    #[test]
    fn contract_labels_come_from_common_labels_and_label_pairs() {
        let k: Value =
            serde_saphyr::from_str("commonLabels:\n  cluster.x-k8s.io/v1beta1: v1alpha7_v1beta1\nresources:\n- bases/a.yaml\n").unwrap();
        let (l, files) = contract_labels(&k);
        assert_eq!(l, labels(&[("cluster.x-k8s.io/v1beta1", "v1alpha7_v1beta1")]));
        assert_eq!(files, ["a.yaml"]);
        let k: Value = serde_saphyr::from_str(
            "labels:\n- pairs:\n    cluster.x-k8s.io/v1beta1: v1beta1\n    cluster.x-k8s.io/v1beta2: v1beta2\n    other: x\nresources:\n- bases/b.yaml\n",
        )
        .unwrap();
        let (l, _) = contract_labels(&k);
        assert_eq!(l, labels(&[("cluster.x-k8s.io/v1beta1", "v1beta1"), ("cluster.x-k8s.io/v1beta2", "v1beta2")]));
    }

    #[test]
    fn control_plane_status_speaks_the_contract_of_its_version() {
        let old = control_plane_status("v1beta1", "v1.33.6", 1, 2, "2026-01-01T00:00:00Z");
        assert_eq!(
            (old["ready"].clone(), old["initialized"].clone(), old["updatedReplicas"].clone()),
            (json!(true), json!(true), json!(1))
        );
        let new = control_plane_status("v1beta2", "v1.33.6", 1, 2, "2026-01-01T00:00:00Z");
        assert_eq!(new["initialization"]["controlPlaneInitialized"], true);
        assert_eq!(new["conditions"][0]["type"], "Available");
        assert!(contains(&json!({"a": {"b": 1, "c": 2}}), &json!({"a": {"b": 1}})));
        assert!(!contains(&json!({"a": {"b": 2}}), &json!({"a": {"b": 1}})));
    }
}
