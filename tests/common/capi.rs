//! A tenant of the real Cluster API (`testkit::capi::shared`, one per test binary): a namespace of
//! its own on the management control plane, an `ExtensionConfig` that sends the Runtime SDK
//! hooks of that namespace's Clusters to this tenant's daemon, a Git release repository of the
//! `testkit-ferrol-1-35` stack, and the real binary as a daemon with its hooks listener. The
//! Clusters are created with `spec.topology` and everything else is Cluster API's: the topology
//! controller creates their control plane and infrastructure from the ClusterClass stacksync
//! applied, testkit's providers bring them up and write the kubeconfig Secret (pointing at the
//! shared workload control plane, where each Cluster's addons live in a namespace of its own).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::git::ReleaseRepo;

use super::certs::make_certs;
use super::config::{Config, Sub};
use super::daemon::{Daemon, Launch, eventually, tail};
use super::fleet::fixture_files;
use super::helm_path;
pub use super::res;

pub const STACK: &str = "testkit-ferrol-1-35";
pub const V1: &str = "testkit-ferrol-1-35-v1";
pub const V2: &str = "testkit-ferrol-1-35-v2";
/// The Kubernetes versions of the two releases (their `metadata.yaml`).
pub const K1: &str = "v1.35.0";
pub const K2: &str = "v1.35.4";

pub struct CapiTenant {
    pub dir: tempfile::TempDir,
    pub repo: ReleaseRepo,
    pub ns: String,
    env: testkit::capi::Shared,
    client: kube::Client,
    workload: kube::Client,
    /// The API forms the running Cluster API serves (`STACKSYNC_CAPI_VERSION`).
    pub served: testkit::capi::Served,
    /// The hooks listener's CA, certificate and key.
    pub ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl CapiTenant {
    /// A new tenant of the shared Cluster API named after `test`; `None` when Cluster API is not
    /// built and this is not CI.
    pub async fn new(test: &str) -> Option<CapiTenant> {
        let env = testkit::capi::shared().await?;
        Some(CapiTenant::on(env.clone(), test).await)
    }

    /// A new tenant named after `test` of the Cluster API `env` (a test's own
    /// [`testkit::capi::ClusterApi::view`]).
    pub async fn on(env: testkit::capi::Shared, test: &str) -> CapiTenant {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let client = env.client().await.expect("client of the management control plane");
        let workload = env.workload_client().await.expect("client of the workload control plane");
        let mut short: String = test.chars().filter(|c| c.is_ascii_alphanumeric()).take(16).collect::<String>().to_ascii_lowercase();
        short.push_str(&format!("-{}-{}", std::process::id() % 100_000, SEQ.fetch_add(1, Ordering::Relaxed)));
        let ns = format!("capi-{short}");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
        namespaces.create(&PostParams::default(), &body).await.expect("create the tenant's namespace");
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs).expect("certs");
        let (ca, cert, key) = make_certs(&certs, "hooks", false);
        CapiTenant { dir, repo, ns, env, client, workload, served: testkit::capi::Served::current(), ca, cert, key }
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The kubeconfigs of the management and the workload control planes (for the real kubectl).
    pub fn kubeconfigs(&self) -> (PathBuf, PathBuf) {
        (self.env.kubeconfig().to_path_buf(), self.env.workload_kubeconfig().to_path_buf())
    }

    pub fn workload(&self) -> kube::Client {
        self.workload.clone()
    }

    /// The Cluster API manager's log, for failure messages.
    pub fn manager_log(&self) -> String {
        std::fs::read_to_string(self.env.manager_log()).unwrap_or_default()
    }

    /// The config: one Git source, one cluster-stack subscription of [`STACK`] selecting this
    /// tenant's Clusters (label `e2e: <ns>`), polled every 2 s, `edit`ed; the real helm.
    pub fn config(&self, edit: impl FnOnce(Sub) -> Sub) -> Config {
        Config::new(self.dir.path())
            .helm(&helm_path())
            .git("stacks", &self.repo.file_url())
            .sub(edit(Sub::new(&self.ns, "stacks").clusterstack(STACK).interval("2s").select("e2e", &self.ns)))
            .kubernetes(self.env.kubeconfig())
            .kubernetes_set("notReadyRetry", "1s")
    }

    /// Tags fixture release `release` (testdata/clusterstack), each file passed through
    /// `edit(path, text)` first.
    pub fn publish(&self, release: &str, edit: impl Fn(&str, String) -> String) {
        let _ = self.repo.git(&["rm", "-rq", "--ignore-unmatch", "."]);
        let files: Vec<(String, String)> =
            fixture_files(release).into_iter().map(|(p, t)| (p.clone(), self.served.cluster_class_text(&edit(&p, t)))).collect();
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        self.repo.release(release, &refs);
    }

    /// Tags fixture release `from` (testdata/clusterstack, of [`STACK`]) as release `tag` of
    /// another family of its line: `testkit-ferrol-1-35` becomes the tag's family in every path
    /// and file, and the release's Kubernetes version `kubernetes`; then each file passes through
    /// `edit(path, text)`.
    pub fn publish_family(&self, tag: &str, from: &str, kubernetes: &str, edit: impl Fn(&str, String) -> String) {
        let family = tag.rsplit_once("-v").map_or(tag, |(f, _)| f);
        let _ = self.repo.git(&["rm", "-rq", "--ignore-unmatch", "."]);
        let files: Vec<(String, String)> = fixture_files(from)
            .into_iter()
            .map(|(p, t)| {
                let p = p.replace(STACK, family);
                let t = t.replace(STACK, family).replace(K1, kubernetes).replace(K2, kubernetes);
                let t = self.served.cluster_class_text(&edit(&p, t));
                (p, t)
            })
            .collect();
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        self.repo.release(tag, &refs);
    }

    /// `stacksync run` with the hooks listener on a free port, and the `ExtensionConfig` that
    /// makes Cluster API call it for this tenant's namespace (written once the listener is up).
    pub async fn start(&self, config: &Path, extra: &[&str]) -> Daemon {
        self.start_launched(config, |launch| launch.args(extra)).await
    }

    /// [`CapiTenant::start`] with the launch `edit`ed (arguments, environment).
    pub async fn start_launched(&self, config: &Path, edit: impl FnOnce(Launch) -> Launch) -> Daemon {
        let daemon = edit(self.launch(config, "daemon.log")).start().await;
        let url = daemon.hooks_url().await;
        self.extension_config(&url).await;
        // Discovered before any Cluster comes: a control plane that came up before would not be
        // announced (AfterControlPlaneInitialized), nor an upgrade asked about.
        self.eventually(&daemon, "the extension discovered by Cluster API", Duration::from_secs(120), async || {
            let handlers = self.extension().await["status"]["handlers"].clone();
            handlers.as_array().is_some_and(|h| h.iter().any(|h| h["requestHook"]["hook"] == "BeforeClusterUpgrade"))
        })
        .await;
        daemon
    }

    /// `stacksync run` with the hooks listener (this tenant's certificate), its log `log` in the
    /// tenant's directory; not started. [`CapiTenant::start`] also points Cluster API at it.
    pub fn launch(&self, config: &Path, log: &str) -> Launch {
        Daemon::launch(config, self.dir.path().join(log)).hooks(&self.cert, &self.key)
    }

    /// Waits until Cluster API's ClusterClass controller reconciled ClusterClass `name` as it
    /// is now (variables resolved at its generation): only then does its webhook let a Cluster
    /// move to it.
    pub async fn class_reconciled(&self, daemon: &Daemon, name: &str) {
        self.eventually(daemon, &format!("ClusterClass {name} reconciled by Cluster API"), Duration::from_secs(120), async || {
            self.cluster_classes().await.iter().any(|cc| {
                cc["metadata"]["name"] == name
                    && self.capi_condition(cc, "VariablesReady").0 == "True"
                    && cc["status"]["observedGeneration"].as_i64().is_some()
                    && cc["status"]["observedGeneration"] == cc["metadata"]["generation"]
            })
        })
        .await;
    }

    /// An `ExtensionConfig` named after the tenant, for Clusters of its namespace only.
    pub async fn extension_config(&self, url: &str) {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&self.ca).expect("ca"));
        let body = json!({
            "apiVersion": format!("runtime.cluster.x-k8s.io/{}", self.served.runtime_version()), "kind": "ExtensionConfig",
            "metadata": {"name": self.ns},
            "spec": {
                "clientConfig": {"url": url, "caBundle": ca},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
            },
        });
        let api: Api<DynamicObject> =
            Api::all_with(self.client(), &res("runtime.cluster.x-k8s.io", self.served.runtime_version(), "ExtensionConfig"));
        api.patch(&self.ns, &PatchParams::apply("e2e").force(), &Patch::Apply(body)).await.expect("ExtensionConfig");
    }

    /// The ExtensionConfig as Cluster API reconciled it (its discovered handlers).
    pub async fn extension(&self) -> Value {
        let api: Api<DynamicObject> =
            Api::all_with(self.client(), &res("runtime.cluster.x-k8s.io", self.served.runtime_version(), "ExtensionConfig"));
        serde_json::to_value(api.get(&self.ns).await.expect("ExtensionConfig")).expect("json")
    }

    pub fn clusters(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), &self.ns, &res("cluster.x-k8s.io", self.served.cluster_version(), "Cluster"))
    }

    /// A Cluster with `spec.topology` (class and version), labelled for this tenant, with
    /// `extra` merged into its metadata (annotations).
    pub async fn add_cluster(&self, name: &str, class: &str, version: &str, annotations: Value) {
        self.add_labelled_cluster(name, class, version, annotations, json!({})).await;
    }

    /// [`CapiTenant::add_cluster`] with `labels` too (e.g. its shard: Cluster API refuses an
    /// edit of a Cluster whose class does not exist yet, so a label cannot come later).
    pub async fn add_labelled_cluster(&self, name: &str, class: &str, version: &str, annotations: Value, labels: Value) {
        let mut all = json!({"e2e": self.ns});
        if let (Some(all), Some(more)) = (all.as_object_mut(), labels.as_object()) {
            all.extend(more.clone());
        }
        let body = json!({
            "apiVersion": self.served.cluster_api_version(), "kind": "Cluster",
            "metadata": {"name": name, "namespace": self.ns, "labels": all, "annotations": annotations},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}},
                "topology": self.served.topology(class, version),
            },
        });
        self.clusters().create(&PostParams::default(), &serde_json::from_value(body).expect("Cluster")).await.expect("create the Cluster");
    }

    /// Moves a Cluster to `class` at Kubernetes `version` (the SCS way: both together), in the
    /// form the running Cluster API serves.
    pub async fn move_cluster(&self, name: &str, class: &str, version: &str) {
        let mut topology = self.served.class_fields(class);
        topology["version"] = json!(version);
        self.patch_cluster(name, json!({"spec": {"topology": topology}})).await;
    }

    /// `(status, reason, message)` of a condition of Cluster API's v1beta2 vocabulary
    /// (`Available`, `Paused`, `TopologyReconciled`, a ClusterClass's `VariablesReady`) on one of
    /// its objects: `status.conditions` in v1beta2, `status.v1beta2.conditions` in v1beta1.
    pub fn capi_condition(&self, obj: &Value, type_: &str) -> (String, String, String) {
        condition(&json!({"status": {"conditions": self.served.v1beta2_conditions(obj)}}), type_)
    }

    /// The class a Cluster's topology names (v1beta1 `class`, v1beta2 `classRef.name`).
    pub fn class_of(cluster: &Value) -> &str {
        cluster["spec"]["topology"]["classRef"]["name"].as_str().or(cluster["spec"]["topology"]["class"].as_str()).unwrap_or_default()
    }

    /// Edits a Cluster's topology (a merge patch, as `kubectl patch --type merge` does).
    pub async fn patch_cluster(&self, name: &str, patch: Value) {
        self.clusters().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.expect("patch the Cluster");
    }

    pub async fn cluster(&self, name: &str) -> Value {
        serde_json::to_value(self.clusters().get(name).await.expect("Cluster")).expect("json")
    }

    /// The Cluster's control plane (created by the topology controller), if there is one yet.
    pub async fn control_plane(&self, cluster: &str) -> Option<Value> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client(), &self.ns, &res("controlplane.cluster.x-k8s.io", "v1alpha1", "TestkitControlPlane"));
        let lp = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
        let list = api.list(&lp).await.expect("list control planes");
        list.items.into_iter().next().map(|o| serde_json::to_value(o).expect("json"))
    }

    /// The ClusterClasses in the tenant's namespace.
    pub async fn cluster_classes(&self) -> Vec<Value> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client(), &self.ns, &res("cluster.x-k8s.io", self.served.cluster_version(), "ClusterClass"));
        api.list(&ListParams::default()).await.expect("list").items.into_iter().map(|o| serde_json::to_value(o).expect("json")).collect()
    }

    pub async fn cluster_sync(&self, name: &str) -> Value {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), &self.ns, &res("stacksync.io", "v1alpha1", "ClusterSync"));
        api.get_opt(name).await.expect("get ClusterSync").map(|o| serde_json::to_value(o).expect("json")).unwrap_or(Value::Null)
    }

    /// The namespace of a Cluster's addons on the workload control plane.
    pub fn addon_namespace(&self, cluster: &str) -> String {
        format!("{}-{cluster}", self.ns)
    }

    /// [`eventually`]; the failure message carries the ends of the daemon's and the manager's logs.
    pub async fn eventually(&self, daemon: &Daemon, what: &str, within: Duration, cond: impl AsyncFnMut() -> bool) -> Duration {
        eventually(what, within, cond, || {
            format!("daemon log:\n{}\nCluster API manager log (end):\n{}", tail(&daemon.log(), 60), tail(&self.manager_log(), 40))
        })
        .await
    }

    /// Deletes the Clusters (Cluster API removes what it made), the ExtensionConfig and the
    /// namespace.
    pub async fn delete(self) {
        let _ = self.clusters().delete_collection(&Default::default(), &Default::default()).await;
        let api: Api<DynamicObject> =
            Api::all_with(self.client(), &res("runtime.cluster.x-k8s.io", self.served.runtime_version(), "ExtensionConfig"));
        let _ = api.delete(&self.ns, &Default::default()).await;
        let namespaces: Api<Namespace> = Api::all(self.client());
        let _ = namespaces.delete(&self.ns, &Default::default()).await;
    }
}

/// `(status, reason, message)` of a condition.
pub fn condition(obj: &Value, type_: &str) -> (String, String, String) {
    let c = super::condition(obj, type_);
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (s("status"), s("reason"), s("message"))
}

/// How long Cluster API and stacksync get for one step (a Cluster coming up, an upgrade): they
/// take seconds; the bound only keeps a broken run from hanging.
pub const STEP: Duration = Duration::from_secs(120);

pub fn applied(cs: &Value) -> &str {
    cs["status"]["appliedRelease"]["tag"].as_str().unwrap_or_default()
}

pub fn ready(cs: &Value) -> bool {
    condition(cs, "Ready").0 == "True"
}

/// V2 with its upgrade gate renamed to `gate` (tests share one workload control plane: each
/// test's gate is its own).
pub fn v2_gated_by(gate: &str) -> impl Fn(&str, String) -> String + '_ {
    move |path: &str, text: String| {
        if path == "clusteraddon.yaml" { text.replace("name: upgrade-gate,", &format!("name: {gate},")) } else { text }
    }
}

/// V2 without a wait in its upgrade stages.
pub fn v2_ungated(path: &str, text: String) -> String {
    if path != "clusteraddon.yaml" {
        return text;
    }
    let start = text.find("      waitForPostCondition:").expect("the gate");
    let end = text[start..].find("    - name: metrics-server").expect("next stage") + start;
    format!("{}{}", &text[..start], &text[end..])
}

/// How many times Cluster API called `hook` for the Cluster, from the daemon's log (one INFO
/// line per call).
pub fn hook_calls(daemon: &Daemon, hook: &str, cluster: &str) -> usize {
    daemon
        .log()
        .lines()
        .filter(|l| l.contains("runtime hook") && l.contains(&format!("hook={hook}")) && l.contains(&format!("cluster={cluster}")))
        .count()
}

pub async fn open_gate(t: &CapiTenant, gate: &str) {
    let api: Api<ConfigMap> = Api::namespaced(t.workload(), "kube-system");
    let body =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate, "namespace": "kube-system"}, "data": {"go": "yes"}});
    api.patch(gate, &PatchParams::apply("platform-team"), &Patch::Apply(body)).await.expect("open the gate");
}

/// Waits until the Cluster is up on `class`: its control plane at `version` and available, its
/// ClusterSync Ready with `class` applied.
pub async fn wait_up(t: &CapiTenant, daemon: &Daemon, name: &str, class: &str, version: &str) {
    t.eventually(daemon, &format!("{name} up on {class} at {version}"), STEP, async || {
        let cp = t.control_plane(name).await.unwrap_or_default();
        let cs = t.cluster_sync(name).await;
        cp["status"]["version"] == version && condition(&cp, "Available").0 == "True" && applied(&cs) == class && ready(&cs)
    })
    .await;
}

/// `status.rollout.phase` of the release's StackRelease.
pub async fn rollout_phase(t: &CapiTenant, release: &str) -> String {
    rollout_status(t, release).await["phase"].as_str().unwrap_or_default().to_owned()
}

/// `status.rollout` of the release's StackRelease.
pub async fn rollout_status(t: &CapiTenant, release: &str) -> Value {
    let api: Api<kube::api::DynamicObject> = Api::all_with(t.client(), &res("stacksync.io", "v1alpha1", "StackRelease"));
    let list = api.list(&Default::default()).await.expect("StackReleases");
    list.items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("json"))
        .find(|r| r["spec"]["subscription"] == t.ns.as_str() && r["spec"]["tag"] == release)
        .map(|r| r["status"]["rollout"].clone())
        .unwrap_or_default()
}
