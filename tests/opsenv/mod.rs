//! The real binary as a controller against testkit API servers, a Git daemon serving the
//! release repository, and its admin listener: shared by the admin and leader-election tests.

#![allow(dead_code)] // each test binary uses a part

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;
use testkit::apiserver::{ApiServer, Options, capi_crds_dir};
use testkit::git::{GitDaemon, ReleaseRepo};

pub const NS: &str = "team-a";
pub const SECRET: &str = "It's a Secret to Everybody";
pub const TOKEN: &str = "generic-token";

pub fn cm(version: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-${{cluster.name}}\n  namespace: kube-system\ndata:\n  version: {version}\n"
    )
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub repo: ReleaseRepo,
    pub git: GitDaemon,
    pub mgmt: ApiServer,
    pub workload: ApiServer,
}

impl Env {
    pub async fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let repos = dir.path().join("repos");
        std::fs::create_dir_all(&repos).expect("repos");
        let repo = ReleaseRepo::create(&repos, "stacks").expect("repo");
        let git = GitDaemon::start(&repos).await.expect("git daemon");
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
        let mgmt = ApiServer::start_with(Options { preload: vec![capi_crds_dir(), crds], ..Options::default() }).await.expect("mgmt");
        let workload = ApiServer::start().await.expect("workload");
        mgmt.load_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n")).expect("namespace");
        std::fs::write(dir.path().join("github-secret"), format!("{SECRET}\n")).expect("secret");
        std::fs::write(dir.path().join("token"), TOKEN).expect("token");
        Env { dir, repo, git, mgmt, workload }
    }

    pub async fn add_cluster(&self, name: &str) {
        self.add_labelled_cluster(name, &[]).await;
    }

    /// A ready Cluster labelled `stack: ferrol` and `labels`, with its kubeconfig Secret.
    pub async fn add_labelled_cluster(&self, name: &str, labels: &[(&str, &str)]) {
        let mut all = serde_json::Map::new();
        all.insert("stack".into(), "ferrol".into());
        for (k, v) in labels {
            all.insert((*k).into(), (*v).into());
        }
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
        let clusters: Api<DynamicObject> = Api::namespaced_with(self.mgmt.client().expect("client"), NS, &res);
        let body = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": all},
            "spec": {"controlPlaneEndpoint": {"host": "h.example.test", "port": 6443}},
        });
        clusters.patch(name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": true}});
        clusters.patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
        let kubeconfig = std::fs::read(self.workload.kubeconfig()).expect("kubeconfig");
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
        let api: Api<Secret> = Api::namespaced(self.mgmt.client().expect("client"), NS);
        api.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
    }

    /// One Git source (served by the daemon), polled hourly, and the webhooks.
    pub fn config(&self, url: &str) -> PathBuf {
        let text = format!(
            "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: {cache}\nwebhooks:\n  github:\n    secretFile: github-secret\n  generic:\n    tokenFile: token\nsources:\n  - name: stacks\n    git:\n      url: {url}\nsubscriptions:\n  - name: ferrol\n    source: stacks\n    interval: 1h\n    healthTimeout: 0s\n    clusterSelector:\n      matchLabels: {{stack: ferrol}}\ntarget:\n  kubernetes:\n    kubeconfig: {kubeconfig}\n    notReadyRetry: 1h\n",
            cache = self.dir.path().join("cache").display(),
            kubeconfig = self.mgmt.kubeconfig().display(),
        );
        let path = self.dir.path().join("stacksync.yaml");
        std::fs::write(&path, text).expect("config");
        path
    }

    pub async fn applied(&self, name: &str) -> String {
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("stacksync.io", "v1alpha1", "ClusterSync"));
        let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt.client().expect("client"), NS, &res);
        let Some(cs) = api.get_opt(name).await.expect("get") else { return String::new() };
        let ready =
            cs.data["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        if !ready {
            return String::new();
        }
        cs.data["status"]["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
    }
}

pub struct Daemon {
    pub child: tokio::process::Child,
    pub log: PathBuf,
    pub base: String,
}

impl Daemon {
    pub async fn start(config: &Path, log: PathBuf) -> Daemon {
        Daemon::start_with(config, log, &[]).await
    }

    /// Starts `stacksync run` with `extra` arguments; returns once the admin listener is up.
    pub async fn start_with(config: &Path, log: PathBuf, extra: &[&str]) -> Daemon {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
            .args(["run", "--admin-addr", "127.0.0.1:0", "--config", &config.to_string_lossy()])
            .args(extra)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(&log).expect("log"))
            .kill_on_drop(true)
            .spawn()
            .expect("daemon");
        let mut daemon = Daemon { child, log, base: String::new() };
        let start = Instant::now();
        daemon.base = loop {
            let log = daemon.log();
            if let Some(line) = log.lines().find(|l| l.contains("admin listener")) {
                let addr = line.split("addr=").nth(1).and_then(|a| a.split_whitespace().next()).expect("addr in the log line");
                break format!("http://{addr}");
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no admin listener line; log:\n{log}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        daemon
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn eventually(&self, what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !cond().await {
            assert!(start.elapsed() < within, "{what}: not within {within:?}; log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        start.elapsed()
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = reqwest::get(format!("{}{path}", self.base)).await.expect("GET");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    pub async fn post(&self, path: &str, headers: &[(&str, String)], body: Vec<u8>) -> (u16, String) {
        let client = reqwest::Client::new();
        let mut req = client.post(format!("{}{path}", self.base)).body(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let r = req.send().await.expect("POST");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    pub async fn github(&self, event: &str, delivery: &str, body: &[u8], secret: &str) -> (u16, String) {
        let headers = [
            ("x-github-event", event.to_owned()),
            ("x-github-delivery", delivery.to_owned()),
            ("x-hub-signature-256", sign(secret, body)),
            ("content-type", "application/json".to_owned()),
        ];
        self.post("/hooks/github", &headers, body.to_vec()).await
    }

    /// The value of a series in `/metrics` (0 when absent).
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
    }

    pub async fn stop(mut self) {
        let pid = self.child.id().expect("pid").to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await.expect("stopped in time").expect("wait");
        assert_eq!(status.code(), Some(0), "log:\n{}", self.log());
    }
}

pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}
