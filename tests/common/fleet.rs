//! A fleet for controller tests: a testkit management cluster with Cluster API's CRDs and ours,
//! workload clusters, a Git release repository, and the real binary as a daemon. Cluster API's
//! part is played by the tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use testkit::apiserver::{ApiServer, Options, capi_crds_dir};
use testkit::git::ReleaseRepo;

pub const NS: &str = "team-a";
pub const STACK: &str = "docker-ferrol-1-27";
pub const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-${cluster.name}\n  namespace: kube-system\ndata:\n  cluster: ${cluster.name}\n";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub repo: ReleaseRepo,
    pub mgmt: ApiServer,
    pub workloads: Vec<ApiServer>,
}

impl Env {
    pub async fn new(n_workloads: usize) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
        let mgmt = ApiServer::start_with(Options { preload: vec![capi_crds_dir(), crds], ..Options::default() }).await.expect("mgmt");
        let mut workloads = Vec::new();
        for _ in 0..n_workloads {
            workloads.push(ApiServer::start().await.expect("workload"));
        }
        mgmt.load_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n")).expect("namespace");
        Env { dir, repo, mgmt, workloads }
    }

    pub fn mgmt(&self) -> kube::Client {
        self.mgmt.client().expect("client")
    }

    pub fn clusters(&self) -> Api<DynamicObject> {
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
        Api::namespaced_with(self.mgmt(), NS, &res)
    }

    pub async fn add_cluster(&self, name: &str, class: &str, ready: bool) {
        let body = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": {"stack": "ferrol"}},
            "spec": {
                "topology": {"class": class, "version": "v1.27.3"},
                "controlPlaneEndpoint": {"host": format!("{name}.example.test"), "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}},
            },
        });
        self.clusters().patch(name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
        self.set_ready(name, ready).await;
    }

    pub async fn set_ready(&self, name: &str, ready: bool) {
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": ready}});
        self.clusters().patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
    }

    pub async fn patch_cluster(&self, name: &str, patch: Value) {
        self.clusters().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.expect("patch cluster");
    }

    pub async fn add_kubeconfig(&self, name: &str, i: usize) {
        let kubeconfig = std::fs::read(self.workloads[i].kubeconfig()).expect("kubeconfig");
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.metadata.namespace = Some(NS.into());
        secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
        let api: Api<Secret> = Api::namespaced(self.mgmt(), NS);
        api.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
    }

    /// A config with one Git source and one subscription selecting Clusters labelled
    /// `stack: ferrol`; `sub_extra` and `target_extra` are indented lines added to them.
    pub fn config(&self, sub_extra: &str, target_extra: &str, top_extra: &str) -> PathBuf {
        // testkit runs no controllers: a Deployment never becomes available there, so health
        // checks are off unless a test turns them on.
        let health = if sub_extra.contains("healthTimeout") { "" } else { "    healthTimeout: 0s\n" };
        let text = format!(
            "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: {cache}\n{top_extra}sources:\n  - name: stacks\n    git:\n      url: {url}\nsubscriptions:\n  - name: ferrol\n    source: stacks\n    interval: 1h\n{health}{sub_extra}    clusterSelector:\n      matchLabels: {{stack: ferrol}}\ntarget:\n  kubernetes:\n    kubeconfig: {kubeconfig}\n    notReadyRetry: 1h\n{target_extra}",
            cache = self.dir.path().join("cache").display(),
            url = self.repo.file_url(),
            kubeconfig = self.mgmt.kubeconfig().display(),
        );
        let path = self.dir.path().join("stacksync.yaml");
        std::fs::write(&path, text).expect("config");
        path
    }

    pub async fn cluster_sync(&self, name: &str) -> Option<Value> {
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("stacksync.io", "v1alpha1", "ClusterSync"));
        let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt(), NS, &res);
        api.get_opt(name).await.expect("get ClusterSync").map(|o| serde_json::to_value(o).expect("json"))
    }

    pub async fn ready_reason(&self, name: &str) -> Option<(String, String)> {
        let cs = self.cluster_sync(name).await?;
        let c = condition(&cs, "Ready");
        Some((c["status"].as_str()?.to_owned(), c["reason"].as_str()?.to_owned()))
    }

    pub async fn configmap(&self, i: usize, name: &str) -> Option<ConfigMap> {
        let api: Api<ConfigMap> = Api::namespaced(self.workloads[i].client().expect("client"), "kube-system");
        api.get_opt(name).await.expect("get")
    }

    pub async fn cluster_classes(&self) -> Vec<String> {
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "ClusterClass"));
        let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt(), NS, &res);
        let mut names: Vec<String> =
            api.list(&Default::default()).await.expect("list").items.into_iter().filter_map(|o| o.metadata.name).collect();
        names.sort();
        names
    }
}

pub fn condition<'a>(cs: &'a Value, type_: &str) -> &'a Value {
    cs["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == type_)).unwrap_or(&Value::Null)
}

/// The running daemon; killed when dropped, stopped with SIGTERM by [`Daemon::stop`].
pub struct Daemon {
    pub child: tokio::process::Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(config: &Path, log: PathBuf) -> Daemon {
        Daemon::start_with(config, log, &[])
    }

    /// `stacksync run` with `extra` arguments.
    pub fn start_with(config: &Path, log: PathBuf, extra: &[&str]) -> Daemon {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
            .args(["run", "--admin-addr", "127.0.0.1:0", "--config", &config.to_string_lossy()])
            .args(extra)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info,stacksync::controller::kubernetes::run=debug")
            .stderr(std::fs::File::create(&log).expect("log"))
            .kill_on_drop(true)
            .spawn()
            .expect("daemon");
        Daemon { child, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `cond` every 50 ms for at most `within`.
    pub async fn eventually(&self, what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !cond().await {
            assert!(start.elapsed() < within, "{what}: not within {within:?}; log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        start.elapsed()
    }

    /// The hooks listener's `https://127.0.0.1:<port>` (`--hooks-addr`), from its log line.
    pub async fn hooks_url(&self) -> String {
        let mut addr = String::new();
        self.eventually("the hooks listener", Duration::from_secs(20), async || {
            let log = self.log();
            let found = log.lines().find(|l| l.contains("hooks listener")).and_then(|l| l.split("addr=").nth(1));
            addr = found.and_then(|a| a.split_whitespace().next()).unwrap_or_default().to_owned();
            !addr.is_empty()
        })
        .await;
        format!("https://{addr}")
    }

    pub async fn stop(mut self) {
        let pid = self.child.id().expect("pid").to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await.expect("stopped in time").expect("wait");
        assert_eq!(status.code(), Some(0), "log:\n{}", self.log());
    }
}

/// Runs the CLI to completion with extra environment.
pub async fn cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"));
    cmd.args(args).env("NO_COLOR", "1").env("RUST_LOG", "info").kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(super::CLI_TIMEOUT, cmd.output()).await.expect("finished in time").expect("run stacksync")
}

/// Every file of a cluster-stack fixture release: (path under the release root, text).
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
    files
}

/// Copies a cluster-stack fixture release into the repository and tags it.
pub fn publish(repo: &ReleaseRepo, release: &str) {
    let _ = repo.git(&["rm", "-rq", "--ignore-unmatch", "."]);
    let files = fixture_files(release);
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    repo.release(release, &refs);
}

pub fn helm_path() -> String {
    let tools = std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/stacksync-tools")))
        .expect("HOME");
    std::env::var("STACKSYNC_HELM").unwrap_or_else(|_| tools.join("bin/helm").to_string_lossy().into_owned())
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
