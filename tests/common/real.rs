//! A tenant of the real control plane (`testkit::kube::shared`, one per test binary): a
//! namespace of its own, Clusters labelled for it alone, a Git release repository, and the
//! daemon under test's config. The management cluster is the real API server; each Cluster's
//! kubeconfig Secret points back at the same server (its addons go to the Cluster's namespace),
//! so Deployments become Available through the real controllers, the scheduler and kwok.
//! Cluster API's part is played by the test (the next step puts the real Cluster API here).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::git::ReleaseRepo;
use testkit::kube::Shared;

use super::config::{Config, Sub};
use super::{condition, helm_path, res, tool};

pub struct Tenant {
    pub dir: tempfile::TempDir,
    pub repo: ReleaseRepo,
    /// The namespace of this tenant's Clusters, their Secrets, ClusterClasses and addons.
    pub ns: String,
    kube: &'static Shared,
    client: kube::Client,
}

impl Tenant {
    /// A new tenant named after `test` (shortened, made unique in this process); `None` when
    /// the real control plane is not built and this is not CI (the test then returns early).
    pub async fn new(test: &str) -> Option<Tenant> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let kube = testkit::kube::shared().await?;
        let client = kube.client().await.expect("client of the real control plane");
        let mut short: String = test.chars().filter(|c| c.is_ascii_alphanumeric()).take(20).collect::<String>().to_ascii_lowercase();
        short.push_str(&format!("-{}-{}", std::process::id() % 100_000, SEQ.fetch_add(1, Ordering::Relaxed)));
        let ns = format!("e2e-{short}");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
        namespaces.create(&PostParams::default(), &body).await.expect("create the tenant's namespace");
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
        Some(Tenant { dir, repo, ns, kube, client })
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.kube.kubeconfig().to_path_buf()
    }

    /// The label value that selects this tenant's Clusters (and only them).
    pub fn label(&self) -> &str {
        &self.ns
    }

    pub fn clusters(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), &self.ns, &res("cluster.x-k8s.io", "v1beta1", "Cluster"))
    }

    pub fn cluster_syncs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), &self.ns, &res("stacksync.io", "v1alpha1", "ClusterSync"))
    }

    /// A Cluster labelled for this tenant, its control plane ready (as Cluster API would say),
    /// and its `<name>-kubeconfig` Secret pointing at the real server.
    pub async fn add_cluster(&self, name: &str) {
        let body = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": self.ns, "labels": {"e2e": self.label()}},
            "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
        });
        self.clusters().patch(name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": true}});
        self.clusters().patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
        let kubeconfig = std::fs::read(self.kube.kubeconfig()).expect("kubeconfig");
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.metadata.namespace = Some(self.ns.clone());
        secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
        let api: Api<Secret> = Api::namespaced(self.client(), &self.ns);
        api.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
    }

    /// A config with one Git source of plain manifests and one subscription (named after the
    /// tenant) selecting this tenant's Clusters, `edit`ed; `notReadyRetry: 1s`.
    pub fn config(&self, edit: impl FnOnce(Sub) -> Sub) -> Config {
        Config::new(self.dir.path())
            .git("stacks", &self.repo.file_url())
            .sub(edit(Sub::new(&self.ns, "stacks").select("e2e", self.label())))
            .kubernetes(self.kube.kubeconfig())
            .kubernetes_set("notReadyRetry", "1s")
    }

    /// A cluster-stack subscription (`docker-ferrol-1-27`, rendered with the real helm), `edit`ed.
    pub fn stack_config(&self, edit: impl FnOnce(Sub) -> Sub) -> Config {
        self.config(|s| edit(s.clusterstack("docker-ferrol-1-27"))).helm(&helm_path())
    }

    pub async fn cluster_sync(&self, name: &str) -> Option<Value> {
        self.cluster_syncs().get_opt(name).await.expect("get ClusterSync").map(|o| serde_json::to_value(o).expect("json"))
    }

    /// `(status, reason)` of the ClusterSync's Ready condition.
    pub async fn ready(&self, name: &str) -> Option<(String, String)> {
        let cs = self.cluster_sync(name).await?;
        let c = condition(&cs, "Ready");
        Some((c["status"].as_str()?.to_owned(), c["reason"].as_str()?.to_owned()))
    }

    /// Runs the real kubectl against the real server.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        let kubectl = tool("kubectl").expect("kubectl (scripts/install-tools.sh)");
        std::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(self.kube.kubeconfig())
            .args(args)
            .output()
            .expect("run kubectl (scripts/install-tools.sh)")
    }

    /// Deletes the namespace (the real namespace controller removes what is in it).
    pub async fn delete(self) {
        let namespaces: Api<Namespace> = Api::all(self.client());
        let _ = namespaces.delete(&self.ns, &Default::default()).await;
    }
}
