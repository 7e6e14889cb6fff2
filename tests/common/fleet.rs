//! A fleet on testkit's API servers: a management cluster with Cluster API's CRDs and ours,
//! workload clusters, a Git release repository (optionally served by a Git daemon) and the
//! config that points the daemon under test at them. Cluster API's part is played by the tests.

use std::path::Path;

use fake_apiserver::{ApiServer, Options, capi_crds_dir};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use testkit::git::{GitDaemon, ReleaseRepo};

use super::config::{Config, Sub};
use super::{condition, helm_path, res};

pub const NS: &str = "team-a";
pub const STACK: &str = "docker-ferrol-1-27";
/// The GitHub webhook's secret and the generic webhook's token of [`Env::served`].
pub const SECRET: &str = "It's a Secret to Everybody";
pub const TOKEN: &str = "generic-token";
/// A ConfigMap whose data says `version`, named after the Cluster.
pub fn cm(version: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-${{cluster.name}}\n  namespace: kube-system\ndata:\n  version: {version}\n"
    )
}

pub const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-${cluster.name}\n  namespace: kube-system\ndata:\n  cluster: ${cluster.name}\n";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub repo: ReleaseRepo,
    pub mgmt: ApiServer,
    pub workloads: Vec<ApiServer>,
    /// A Git daemon serving [`Env::repo`] (with [`Servers::git_daemon`]).
    pub git: Option<GitDaemon>,
}

/// What an [`Env`] starts.
pub struct Servers {
    /// Workload API servers.
    pub workloads: usize,
    /// Serve the release repository over `git://` (its connections counted), and write the
    /// webhooks' secret files (`github-secret`, `token`) beside the config.
    pub git_daemon: bool,
    /// Preload Cluster API's CRDs into the management cluster.
    pub cluster_api: bool,
    /// Preload stacksync's CRDs (deploy/crds).
    pub status_crds: bool,
}

impl Default for Servers {
    fn default() -> Servers {
        Servers { workloads: 1, git_daemon: false, cluster_api: true, status_crds: true }
    }
}

impl Env {
    /// A management cluster (Cluster API's CRDs and ours, namespace [`NS`]), `n_workloads`
    /// workload clusters and a release repository.
    pub async fn new(n_workloads: usize) -> Env {
        Env::start(Servers { workloads: n_workloads, ..Servers::default() }).await
    }

    /// One workload cluster and the release repository served by a Git daemon, with the
    /// webhooks' secrets: for the admin listener's tests.
    pub async fn served() -> Env {
        Env::start(Servers { git_daemon: true, ..Servers::default() }).await
    }

    pub async fn start(servers: Servers) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let repos = dir.path().join("repos");
        std::fs::create_dir_all(&repos).expect("repos");
        let repo = ReleaseRepo::create(&repos, "stacks").expect("repo");
        let git = match servers.git_daemon {
            true => {
                std::fs::write(dir.path().join("github-secret"), format!("{SECRET}\n")).expect("secret");
                std::fs::write(dir.path().join("token"), TOKEN).expect("token");
                Some(GitDaemon::start(&repos).await.expect("git daemon"))
            }
            false => None,
        };
        let mut preload = Vec::new();
        if servers.cluster_api {
            preload.push(capi_crds_dir());
        }
        if servers.status_crds {
            preload.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds"));
        }
        let mgmt = ApiServer::start_with(Options { preload, ..Options::default() }).await.expect("mgmt");
        let mut workloads = Vec::new();
        for _ in 0..servers.workloads {
            workloads.push(ApiServer::start().await.expect("workload"));
        }
        mgmt.load_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n")).expect("namespace");
        Env { dir, repo, mgmt, workloads, git }
    }

    pub fn mgmt(&self) -> kube::Client {
        self.mgmt.client().expect("client")
    }

    pub fn clusters(&self) -> Api<DynamicObject> {
        self.clusters_in(NS)
    }

    pub fn clusters_in(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.mgmt(), namespace, &res("cluster.x-k8s.io", "v1beta1", "Cluster"))
    }

    /// Another namespace beside [`NS`].
    pub fn add_namespace(&self, namespace: &str) {
        self.mgmt.load_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n")).expect("namespace");
    }

    /// A Cluster labelled `stack: ferrol` with `spec.topology.class: class`; `ready` sets
    /// `status.controlPlaneReady`.
    pub async fn add_cluster(&self, name: &str, class: &str, ready: bool) {
        self.add_labelled_cluster(name, class, ready, &[]).await;
    }

    /// [`Env::add_cluster`] with more labels.
    pub async fn add_labelled_cluster(&self, name: &str, class: &str, ready: bool, labels: &[(&str, &str)]) {
        self.add_cluster_in(NS, name, class, ready, labels).await;
    }

    /// [`Env::add_labelled_cluster`] in `namespace`.
    pub async fn add_cluster_in(&self, namespace: &str, name: &str, class: &str, ready: bool, labels: &[(&str, &str)]) {
        let mut all = serde_json::Map::new();
        all.insert("stack".into(), "ferrol".into());
        for (k, v) in labels {
            all.insert((*k).into(), (*v).into());
        }
        let body = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": all},
            "spec": {
                "topology": {"class": class, "version": "v1.27.3"},
                "controlPlaneEndpoint": {"host": format!("{name}.example.test"), "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}},
            },
        });
        let clusters = self.clusters_in(namespace);
        clusters.patch(name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": ready}});
        clusters.patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
    }

    /// A ready Cluster of class `docker-ferrol-1-27-v1` with its kubeconfig Secret for workload
    /// cluster `i`: all a sync needs.
    pub async fn add_synced_cluster(&self, name: &str, i: usize) {
        self.add_cluster(name, "docker-ferrol-1-27-v1", true).await;
        self.add_kubeconfig(name, i).await;
    }

    pub async fn set_ready(&self, name: &str, ready: bool) {
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": ready}});
        self.clusters().patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
    }

    pub async fn patch_cluster(&self, name: &str, patch: Value) {
        self.clusters().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.expect("patch cluster");
    }

    /// The `<name>-kubeconfig` Secret pointing at workload cluster `i`.
    pub async fn add_kubeconfig(&self, name: &str, i: usize) {
        let kubeconfig = std::fs::read(self.workloads[i].kubeconfig()).expect("kubeconfig");
        self.put_kubeconfig(name, kubeconfig).await;
    }

    /// [`Env::add_kubeconfig`] for a Cluster in `namespace`.
    pub async fn add_kubeconfig_in(&self, namespace: &str, name: &str, i: usize) {
        let kubeconfig = std::fs::read(self.workloads[i].kubeconfig()).expect("kubeconfig");
        self.put_kubeconfig_in(namespace, name, kubeconfig).await;
    }

    /// The `<name>-kubeconfig` Secret with `kubeconfig` as its value.
    pub async fn put_kubeconfig(&self, name: &str, kubeconfig: Vec<u8>) {
        self.put_kubeconfig_in(NS, name, kubeconfig).await;
    }

    async fn put_kubeconfig_in(&self, namespace: &str, name: &str, kubeconfig: Vec<u8>) {
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.metadata.namespace = Some(namespace.into());
        secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
        let api: Api<Secret> = Api::namespaced(self.mgmt(), namespace);
        api.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
    }

    /// The Git daemon serving the repository ([`Env::served`]).
    pub fn git_daemon(&self) -> &GitDaemon {
        self.git.as_ref().expect("Env::served starts the Git daemon")
    }

    /// The release repository's URL: `git://` when served by the Git daemon, else `file://`.
    pub fn repo_url(&self) -> String {
        match &self.git {
            Some(git) => git.url("stacks.git"),
            None => self.repo.file_url(),
        }
    }

    /// The subscription every fleet test starts from: `ferrol` of source `stacks`, selecting
    /// Clusters labelled `stack: ferrol`, health checks off (testkit runs no controllers: a
    /// Deployment never becomes available there; a test that wants them sets `healthTimeout`).
    pub fn ferrol() -> Sub {
        Sub::new("ferrol", "stacks").health_timeout("0s").select("stack", "ferrol")
    }

    /// A config of one Git source `stacks` (the repository) and [`Env::ferrol`] to the
    /// management cluster, `notReadyRetry: 1h` (only a watch event brings a Cluster back).
    pub fn config(&self) -> Config {
        self.config_with(Env::ferrol())
    }

    /// [`Env::config`] with `sub` as its subscription.
    pub fn config_with(&self, sub: Sub) -> Config {
        Config::new(self.dir.path())
            .git("stacks", &self.repo_url())
            .sub(sub)
            .kubernetes(self.mgmt.kubeconfig())
            .kubernetes_set("notReadyRetry", "1h")
    }

    /// [`Env::config`] with both webhooks on (their secrets are [`SECRET`] and [`TOKEN`]).
    pub fn webhooks_config(&self) -> Config {
        self.config().set("webhooks", json!({"github": {"secretFile": "github-secret"}, "generic": {"tokenFile": "token"}}))
    }

    /// [`Env::ferrol`] as the cluster stack [`STACK`] rendered by the real helm, `edit`ed.
    pub fn stack_config(&self, edit: impl FnOnce(Sub) -> Sub) -> Config {
        self.config_with(edit(Env::ferrol().clusterstack(STACK))).helm(&helm_path())
    }

    pub async fn cluster_sync(&self, name: &str) -> Option<Value> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt(), NS, &res("stacksync.io", "v1alpha1", "ClusterSync"));
        api.get_opt(name).await.expect("get ClusterSync").map(|o| serde_json::to_value(o).expect("json"))
    }

    pub async fn ready_reason(&self, name: &str) -> Option<(String, String)> {
        let cs = self.cluster_sync(name).await?;
        let c = condition(&cs, "Ready");
        Some((c["status"].as_str()?.to_owned(), c["reason"].as_str()?.to_owned()))
    }

    /// The release tag applied to a Cluster whose ClusterSync is Ready; empty otherwise.
    pub async fn applied(&self, name: &str) -> String {
        let Some(cs) = self.cluster_sync(name).await else { return String::new() };
        if condition(&cs, "Ready")["status"] != "True" {
            return String::new();
        }
        cs["status"]["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
    }

    /// The release tag the ClusterSync says was applied, Ready or not; empty without one.
    pub async fn applied_tag(&self, name: &str) -> String {
        let cs = self.cluster_sync(name).await.unwrap_or_default();
        cs["status"]["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
    }

    pub async fn configmap(&self, i: usize, name: &str) -> Option<ConfigMap> {
        let api: Api<ConfigMap> = Api::namespaced(self.workloads[i].client().expect("client"), "kube-system");
        api.get_opt(name).await.expect("get")
    }

    pub async fn cluster_classes(&self) -> Vec<String> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt(), NS, &res("cluster.x-k8s.io", "v1beta1", "ClusterClass"));
        let mut names: Vec<String> =
            api.list(&Default::default()).await.expect("list").items.into_iter().filter_map(|o| o.metadata.name).collect();
        names.sort();
        names
    }
}

/// Every file of a cluster-stack fixture release: (path under the release root, text), sorted.
pub fn fixture_files(release: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/clusterstack").join(release);
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("fixture").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(&root).expect("prefix").to_string_lossy().into_owned();
                files.push((rel, std::fs::read_to_string(&p).expect("text")));
            }
        }
    }
    files.sort();
    files
}

/// Copies a cluster-stack fixture release into the repository and tags it.
pub fn publish(repo: &ReleaseRepo, release: &str) {
    let _ = repo.git(&["rm", "-rq", "--ignore-unmatch", "."]);
    let files = fixture_files(release);
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    repo.release(release, &refs);
}

/// v4: v3's addons with `BeforeClusterUpgrade` stages that delete `legacy-dns`, apply `cni` and
/// wait for a gate ConfigMap (`waitForPostCondition`), then apply `metrics-server`.
pub fn publish_v4_with_upgrade_stages(repo: &ReleaseRepo) {
    let stages = "  BeforeClusterUpgrade:\n    - name: legacy-dns\n      action: delete\n    - name: cni\n      action: apply\n      waitForPostCondition:\n        objects:\n          - {key: gate, apiVersion: v1, kind: ConfigMap, name: upgrade-gate, namespace: kube-system}\n        conditions: \"gate.data.go == 'yes'\"\n    - name: metrics-server\n      action: apply\n";
    publish_v3_as(repo, "v4", None, stages);
}

/// v3's fixture files as release `version` (the ClusterClass chart renamed, `metadata.yaml`
/// and its `Chart.yaml` saying `version`), each text then passed through `edit(path, text)`.
pub fn v3_files_as(version: &str, edit: impl Fn(&str, String) -> String) -> Vec<(String, String)> {
    fixture_files("docker-ferrol-1-27-v3")
        .into_iter()
        .map(|(rel, text)| {
            let rel = rel.replace("cluster-class-v3", &format!("cluster-class-{version}"));
            let text = match rel.as_str() {
                "metadata.yaml" => text.replace("clusterStack: v3", &format!("clusterStack: {version}")),
                r if r.ends_with("Chart.yaml") && r.contains("cluster-class") => {
                    text.replace("version: v3", &format!("version: {version}"))
                }
                _ => text,
            };
            let text = edit(&rel, text);
            (rel, text)
        })
        .collect()
}

/// v3's fixture as release `version` whose metadata says Kubernetes `kubernetes`, with `extra`
/// files (path under the release root, text).
pub fn publish_v3_on(repo: &ReleaseRepo, version: &str, kubernetes: &str, extra: &[(&str, &str)]) {
    let mut files = v3_files_as(version, |rel, text| match rel {
        "metadata.yaml" => text.replace("kubernetes: v1.27.3", &format!("kubernetes: {kubernetes}")),
        _ => text,
    });
    files.extend(extra.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())));
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    repo.release(&format!("{STACK}-{version}"), &refs);
}

/// v3's fixture as release `version`, with `install` replacing its install stages (when given)
/// and `upgrade` its `BeforeClusterUpgrade` stages.
pub fn publish_v3_as(repo: &ReleaseRepo, version: &str, install: Option<&str>, upgrade: &str) {
    let files = v3_files_as(version, |rel, text| {
        if rel != "clusteraddon.yaml" {
            return text;
        }
        let head = &text[..text.find("  BeforeClusterUpgrade:").expect("hook")];
        let head = match install {
            Some(i) => format!("{}{i}", &head[..head.find("  AfterControlPlaneInitialized:").expect("hook")]),
            None => head.to_owned(),
        };
        format!("{head}{upgrade}")
    });
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    repo.release(&format!("docker-ferrol-1-27-{version}"), &refs);
}
