//! The real Cluster API on real control planes, for the end-to-end suite and the example: a
//! management control plane ([`Kube`]) running the Cluster API core manager (built from a
//! pinned module by `scripts/build-cluster-api.sh`) with its CRDs, conversion and admission
//! webhooks and the `ClusterTopology` and `RuntimeSDK` feature gates, and a second real control
//! plane that every workload Cluster's kubeconfig points at (its addons are applied there by
//! server-side apply and become healthy through the real controllers and kwok).
//!
//! Cluster API needs an infrastructure provider and a control-plane provider; the kubeadm
//! control plane and the real infrastructure providers need machines. This module brings
//! testkit's own minimal pair instead, honouring the Cluster API v1beta2 contracts:
//! `TestkitCluster` / `TestkitClusterTemplate` (`infrastructure.cluster.x-k8s.io/v1alpha1`) and
//! `TestkitControlPlane` / `TestkitControlPlaneTemplate` (`controlplane.cluster.x-k8s.io/
//! v1alpha1`), CRDs labelled with the contract version (`cluster.x-k8s.io/v1beta2: v1alpha1`), and
//! a small controller (a thread of this process) that does what a provider does: it marks the
//! infrastructure provisioned with the workload server as the control-plane endpoint, writes the
//! `<cluster>-kubeconfig` Secret, and reports the control plane initialized, at its
//! `spec.version` and available — at once, as machines that boot in no time would. Everything
//! Cluster API decides (ClusterClass validation and defaulting, topology, variables and patches,
//! the Runtime SDK extension discovery and hook calls, holding an upgrade) is the real manager's.
//!
//! Two knobs for tests, read from the Cluster: with `spec.paused` (or the `cluster.x-k8s.io/
//! paused` annotation) the provider leaves the Cluster's objects alone, as a provider must; with
//! the annotation `testkit.stacksync.io/unavailable-at: <version>` the control plane reports
//! that version once it is asked for it but never becomes available (a failed upgrade).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::kube::{Error, Kube, Options as KubeOptions, Result, apply_value, free_port, openssl, path_str, wait_established};

/// The Cluster API release `scripts/build-cluster-api.sh` builds unless `STACKSYNC_CAPI_VERSION`
/// names another.
pub const DEFAULT_VERSION: &str = "v1.14.2";

/// The Cluster API release testkit runs: `STACKSYNC_CAPI_VERSION` (e.g. `v1.10.10`), else
/// [`DEFAULT_VERSION`].
pub fn version() -> String {
    std::env::var("STACKSYNC_CAPI_VERSION")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_VERSION.to_owned())
}

/// The API forms the running Cluster API release serves, for tests that write its objects: a
/// release before v1.11 serves `cluster.x-k8s.io/v1beta1` only (and its Runtime SDK types as
/// `v1alpha1`); from v1.11 on `v1beta2` is the storage version (v1beta1 still served, deprecated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// `cluster.x-k8s.io/v1beta2` is served.
    pub v1beta2: bool,
}

impl Served {
    /// The forms of [`version`].
    pub fn current() -> Served {
        Served::of(&version())
    }

    /// The forms of release `version` (`v1.<minor>.<patch>`).
    pub fn of(version: &str) -> Served {
        Served { v1beta2: crate::kube::minor_of(version) >= 11 }
    }

    /// `v1beta2` or `v1beta1`: the version of `cluster.x-k8s.io` to write and read.
    pub fn cluster_version(self) -> &'static str {
        if self.v1beta2 { "v1beta2" } else { "v1beta1" }
    }

    /// `cluster.x-k8s.io/<cluster_version>`.
    pub fn cluster_api_version(self) -> String {
        format!("cluster.x-k8s.io/{}", self.cluster_version())
    }

    /// The version of `runtime.cluster.x-k8s.io` (ExtensionConfig): `v1beta2` or `v1alpha1`.
    pub fn runtime_version(self) -> &'static str {
        if self.v1beta2 { "v1beta2" } else { "v1alpha1" }
    }

    /// A Cluster's `spec.topology` naming `class` at `version` with one control-plane replica:
    /// v1beta2 names the class in `classRef.name`, v1beta1 in `class`.
    pub fn topology(self, class: &str, version: &str) -> Value {
        let mut t = self.class_fields(class);
        t["version"] = json!(version);
        t["controlPlane"] = json!({"replicas": 1});
        t
    }

    /// The fields of `spec.topology` that name the class (for a merge patch that moves a
    /// Cluster): `{"classRef": {"name": class}}` or `{"class": class}`.
    pub fn class_fields(self, class: &str) -> Value {
        if self.v1beta2 { json!({"classRef": {"name": class}}) } else { json!({"class": class}) }
    }

    /// The conditions of Cluster API's v1beta2 vocabulary (`Available`, `Paused`, …) on an
    /// object read in [`Served::cluster_version`]: `status.conditions` in v1beta2,
    /// `status.v1beta2.conditions` in v1beta1 (from Cluster API 1.9 on).
    pub fn v1beta2_conditions(self, obj: &Value) -> Value {
        if self.v1beta2 { obj["status"]["conditions"].clone() } else { obj["status"]["v1beta2"]["conditions"].clone() }
    }

    /// How the Cluster's `TopologyReconciled` condition says a lifecycle hook holds an
    /// upgrade: `(reason, part of its message)`. v1.11 on: `ClusterUpgrading`, "… hooks are
    /// blocking upgrade: BeforeClusterUpgrade: …"; before: `LifecycleHookBlocking`, "hook
    /// \"BeforeClusterUpgrade\" is blocking: …".
    pub fn hook_blocking(self, hook: &str) -> (&'static str, String) {
        if self.v1beta2 {
            ("ClusterUpgrading", format!("hooks are blocking upgrade: {hook}"))
        } else {
            ("LifecycleHookBlocking", format!("hook \"{hook}\" is blocking"))
        }
    }

    /// Whether the Cluster's `TopologyReconciled` quotes the message of a hook that answered
    /// `Failure` (v1.11 on); before, it says only `… failed to call extension handler "<name>":
    /// got failure response` (the message is in the manager's log).
    pub fn quotes_hook_failures(self) -> bool {
        self.v1beta2
    }

    /// A ClusterClass manifest (YAML text, possibly a Helm template) written in v1beta2 form,
    /// in the form this release serves: unchanged for v1beta2; for v1beta1 its apiVersion and
    /// the template references (`templateRef:` is `ref:` in v1beta1). Enough for the simple
    /// classes of the tests' stacks (no MachinePools, no v1beta2-only fields).
    pub fn cluster_class_text(self, text: &str) -> String {
        if self.v1beta2 || !text.contains("kind: ClusterClass") {
            return text.to_owned();
        }
        text.replace("apiVersion: cluster.x-k8s.io/v1beta2", "apiVersion: cluster.x-k8s.io/v1beta1").replace("templateRef:", "ref:")
    }
}

/// The annotation that makes the test control-plane provider fail an upgrade to this version.
pub const UNAVAILABLE_AT: &str = "testkit.stacksync.io/unavailable-at";

/// Field manager of the test providers' writes.
const PROVIDER: &str = "testkit-provider";

/// How often the test providers look at their objects.
const PROVIDER_PERIOD: Duration = Duration::from_millis(250);

/// Where `scripts/build-cluster-api.sh` installs the [`version`] (`capi-manager`, `crds/`,
/// `webhooks.yaml`): `realkube/cluster-api` for the default release,
/// `realkube/cluster-api-<version>` for another.
pub fn dir() -> PathBuf {
    let version = version();
    if version == DEFAULT_VERSION {
        crate::kube::realkube_dir().join("cluster-api")
    } else {
        crate::kube::realkube_dir().join(format!("cluster-api-{version}"))
    }
}

/// True when the real control plane and the Cluster API manager are built.
pub fn available() -> bool {
    let d = dir();
    crate::kube::available() && d.join("capi-manager").is_file() && d.join("webhooks.yaml").is_file() && d.join("crds").is_dir()
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// YAML applied to the management control plane once Cluster API runs (e.g. deploy/crds).
    pub preload: Vec<PathBuf>,
    /// kwok Nodes of the workload control plane (default 1).
    pub workload_nodes: usize,
}

/// A management control plane running the real Cluster API, and the workload control plane its
/// Clusters point at. [`ClusterApi::stop`] (or dropping it) stops the providers, the manager and
/// both control planes.
pub struct ClusterApi {
    mgmt: Kube,
    workload: Kube,
    provider: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
    started_in: Duration,
    /// The manager's `/readyz`, to wait on after a restart.
    manager_ready: String,
}

impl ClusterApi {
    /// Starts both control planes, installs Cluster API (CRDs with their conversion webhook,
    /// the admission webhooks, the test providers' CRDs), starts its manager and waits until its
    /// webhook server is ready, then starts the test providers and applies `preload`.
    ///
    /// # Errors
    /// What [`Kube::start`] fails with; the manager not built, exiting or not becoming ready
    /// (the error quotes its log); an object the server refuses.
    pub async fn start(options: Options) -> Result<ClusterApi> {
        let started = Instant::now();
        let capi = dir();
        if !capi.join("capi-manager").is_file() {
            return Err(Error::NotBuilt { dir: capi, missing: "capi-manager (scripts/build-cluster-api.sh)".into() });
        }
        let workload_nodes = options.workload_nodes.max(1);
        let (mgmt, workload) = tokio::join!(
            Kube::start(KubeOptions { nodes: 1, ..KubeOptions::default() }),
            Kube::start(KubeOptions { nodes: workload_nodes, ..KubeOptions::default() }),
        );
        let mut api =
            ClusterApi { mgmt: mgmt?, workload: workload?, provider: None, started_in: Duration::ZERO, manager_ready: String::new() };
        api.install(&capi).await?;
        let client = api.mgmt.client().await?;
        for path in &options.preload {
            crate::kube::preload(&client, path).await?;
        }
        api.started_in = started.elapsed();
        Ok(api)
    }

    async fn install(&mut self, capi: &Path) -> Result<()> {
        let client = self.mgmt.client().await?;
        let certs = serving_cert(self.mgmt.dir(), "capi-webhook")?;
        let ca = std::fs::read(self.mgmt.dir().join("pki").join("ca.crt"))
            .map_err(|source| Error::Write { path: self.mgmt.dir().join("pki/ca.crt"), source })?;
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
        let webhook_port = free_port()?;
        let webhook_url = format!("https://127.0.0.1:{webhook_port}");

        // The CRDs, each with more than one version converted by the manager's webhook.
        let crds = capi.join("crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
            .map_err(|source| Error::Dir { path: crds.clone(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        let mut names = Vec::new();
        for file in &files {
            for mut crd in read_docs(file)? {
                if crd["spec"]["versions"].as_array().is_some_and(|v| v.len() > 1) {
                    crd["spec"]["conversion"] = json!({
                        "strategy": "Webhook",
                        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": format!("{webhook_url}/convert"), "caBundle": ca_bundle}},
                    });
                }
                names.push(crd["metadata"]["name"].as_str().unwrap_or_default().to_owned());
                apply_value(&client, crd)
                    .await
                    .map_err(|source| Error::Client { what: format!("applying CRDs of {}", file.display()), source })?;
            }
        }
        for crd in provider_crds() {
            names.push(crd["metadata"]["name"].as_str().unwrap_or_default().to_owned());
            apply_value(&client, crd).await.map_err(|source| Error::Client { what: "applying the test providers' CRDs".into(), source })?;
        }
        for name in &names {
            wait_established(&client, name).await.map_err(|message| Error::Preload { path: crds.clone(), message })?;
        }

        // The manager, with the admin kubeconfig (system:masters: no RBAC to install).
        let health = free_port()?;
        let mut cmd = Command::new(capi.join("capi-manager"));
        cmd.env("KUBECONFIG", self.mgmt.kubeconfig())
            .arg("--leader-elect=false")
            .arg(format!("--webhook-port={webhook_port}"))
            .arg(format!("--webhook-cert-dir={}", path_str(&certs)))
            .arg(format!("--health-addr=127.0.0.1:{health}"))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()?))
            .arg("--insecure-diagnostics=true")
            .arg("--feature-gates=ClusterTopology=true,RuntimeSDK=true")
            .arg("--remote-connection-grace-period=20s")
            .arg("--v=2");
        self.mgmt.spawn("capi-manager", cmd)?;
        self.manager_ready = format!("http://127.0.0.1:{health}/readyz");
        self.mgmt.wait_http("capi-manager", &self.manager_ready.clone(), "ok").await?;
        // Ready is not yet serving topology Clusters: the Runtime SDK's registry is warmed up
        // after, from the ExtensionConfigs there are then. One a test creates before that (an
        // unreachable one stands for a stopped operator's) fails the warmup, and every Cluster
        // waits on "registry not initialized" until the manager gives up a minute later.
        self.mgmt.wait_log("capi-manager", "The extension registry is warmed up").await?;

        // The admission webhooks, pointed at the manager on loopback.
        let webhooks = capi.join("webhooks.yaml");
        for mut doc in read_docs(&webhooks)? {
            if let Some(hooks) = doc["webhooks"].as_array_mut() {
                for hook in hooks {
                    let path = hook["clientConfig"]["service"]["path"].as_str().unwrap_or("/").to_owned();
                    hook["clientConfig"] = json!({"url": format!("{webhook_url}{path}"), "caBundle": ca_bundle});
                }
            }
            apply_value(&client, doc).await.map_err(|source| Error::Client { what: format!("applying {}", webhooks.display()), source })?;
        }

        // The test providers.
        let stop = Arc::new(AtomicBool::new(false));
        let mgmt_config = self.mgmt.kube_config().await?;
        let kubeconfig = std::fs::read(self.workload.kubeconfig())
            .map_err(|source| Error::Write { path: self.workload.kubeconfig().to_path_buf(), source })?;
        let endpoint = endpoint_of(self.workload.url());
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("testkit-capi-providers".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("testkit providers: a runtime: {e}");
                        return;
                    }
                };
                runtime.block_on(providers(mgmt_config, kubeconfig, endpoint, flag));
            })
            .map_err(|source| Error::Spawn { component: "the test providers", source })?;
        self.provider = Some((stop, thread));
        Ok(())
    }

    /// The management control plane (Cluster API runs here).
    pub fn mgmt(&self) -> &Kube {
        &self.mgmt
    }

    /// The workload control plane every Cluster's kubeconfig Secret points at.
    pub fn workload(&self) -> &Kube {
        &self.workload
    }

    /// The management control plane, to kill and restart its components ([`Kube::kill`]).
    pub fn mgmt_mut(&mut self) -> &mut Kube {
        &mut self.mgmt
    }

    /// The workload control plane, to kill and restart its components.
    pub fn workload_mut(&mut self) -> &mut Kube {
        &mut self.workload
    }

    /// SIGKILLs the Cluster API manager: a crash, as a fault to test against.
    pub fn kill_manager(&mut self) {
        self.mgmt.kill("capi-manager");
    }

    /// Starts a [`ClusterApi::kill_manager`]ed manager again with its first arguments (the same
    /// webhook port and certificate) and waits until it is ready.
    ///
    /// # Errors
    /// It cannot be spawned, exits, or does not become ready.
    pub async fn restart_manager(&mut self) -> Result<()> {
        self.mgmt.restart("capi-manager").await?;
        let ready = self.manager_ready.clone();
        self.mgmt.wait_http("capi-manager", &ready, "ok").await
    }

    /// What a test needs to reach this instance (as [`shared`] gives for the shared one).
    pub fn view(&self) -> Shared {
        Shared {
            kubeconfig: self.mgmt.kubeconfig().to_path_buf(),
            workload_kubeconfig: self.workload.kubeconfig().to_path_buf(),
            manager_log: self.mgmt.dir().join("capi-manager.log"),
        }
    }

    /// How long [`ClusterApi::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The first component of either control plane that is no longer running.
    pub fn exited_component(&mut self) -> Option<(&'static str, String)> {
        self.mgmt.exited_component().or_else(|| self.workload.exited_component())
    }

    /// Stops the test providers, the manager and both control planes.
    pub fn stop(mut self) {
        self.stop_providers();
    }

    fn stop_providers(&mut self) {
        if let Some((stop, thread)) = self.provider.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

impl Drop for ClusterApi {
    fn drop(&mut self) {
        // The control planes stop themselves when dropped (the manager first: newest first).
        self.stop_providers();
    }
}

/// The Cluster API environment shared by every test of a test binary, started by the first
/// caller on a thread of its own (it outlives each test's runtime); `None` (after printing why)
/// when it is not built and `CI` is not set — under CI that panics, so the suite cannot pass by
/// skipping. Preloads stacksync's CRDs (`deploy/crds`).
pub async fn shared() -> Option<&'static Shared> {
    static SHARED: tokio::sync::OnceCell<Option<Shared>> = tokio::sync::OnceCell::const_new();
    SHARED
        .get_or_init(|| async {
            if !available() {
                let message = format!(
                    "the real control plane (Kubernetes {}) and Cluster API {} are not built in {} and {} (scripts/build-realkube.sh, scripts/build-cluster-api.sh)",
                    crate::kube::version(),
                    version(),
                    crate::kube::bin_dir().display(),
                    dir().display()
                );
                assert!(std::env::var_os("CI").is_none(), "{message}; CI must run the Cluster API tests");
                eprintln!("SKIPPED: {message}");
                return None;
            }
            let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("deploy").join("crds");
            let started = crate::kube::keep_for_process(
                "testkit-capi",
                || ClusterApi::start(Options { preload: vec![crds], workload_nodes: 2 }),
                ClusterApi::view,
            );
            match started.await {
                Ok(shared) => Some(shared),
                Err(e) => panic!("starting the real Cluster API: {e}"),
            }
        })
        .await
        .as_ref()
}

/// How to reach a Cluster API environment: the one shared by a test binary (see [`shared`]),
/// or a test's own ([`ClusterApi::view`]).
#[derive(Debug, Clone)]
pub struct Shared {
    kubeconfig: PathBuf,
    workload_kubeconfig: PathBuf,
    manager_log: PathBuf,
}

impl Shared {
    /// The management control plane's admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The workload control plane's admin kubeconfig (what every Cluster's Secret holds).
    pub fn workload_kubeconfig(&self) -> &Path {
        &self.workload_kubeconfig
    }

    /// The Cluster API manager's log (for a failing test's message).
    pub fn manager_log(&self) -> &Path {
        &self.manager_log
    }

    /// # Errors
    /// An unreadable kubeconfig, or a client that cannot be built.
    pub async fn client(&self) -> Result<kube::Client> {
        client_of(&self.kubeconfig).await
    }

    /// # Errors
    /// An unreadable kubeconfig, or a client that cannot be built.
    pub async fn workload_client(&self) -> Result<kube::Client> {
        client_of(&self.workload_kubeconfig).await
    }
}

async fn client_of(path: &Path) -> Result<kube::Client> {
    let config = crate::kube::config_from(path).await?;
    kube::Client::try_from(config).map_err(|source| Error::Client { what: "building a client".into(), source })
}

/// `(host, port)` of `https://host:port`.
pub(crate) fn endpoint_of(url: &str) -> (String, u16) {
    let rest = url.trim_start_matches("https://");
    let (host, port) = rest.rsplit_once(':').unwrap_or((rest, "443"));
    (host.to_owned(), port.trim_end_matches('/').parse().unwrap_or(443))
}

pub(crate) fn read_docs(path: &Path) -> Result<Vec<Value>> {
    let err = |message: String| Error::Preload { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| err(e.to_string()))?;
    Ok(docs.into_iter().filter(Value::is_object).collect())
}

/// A serving certificate for 127.0.0.1 signed by the control plane's CA, as `tls.crt` and
/// `tls.key` in `<control plane dir>/<name>/` (the layout controller-runtime's webhook server
/// reads).
fn serving_cert(kube_dir: &Path, name: &str) -> Result<PathBuf> {
    let out = kube_dir.join(name);
    std::fs::create_dir_all(&out).map_err(|source| Error::Dir { path: out.clone(), source })?;
    let pki = kube_dir.join("pki");
    let (key, csr, crt, ext) = (out.join("tls.key"), out.join("tls.csr"), out.join("tls.crt"), out.join("tls.ext"));
    openssl("a webhook key", &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &path_str(&key)])?;
    openssl("a webhook request", &["req", "-new", "-key", &path_str(&key), "-subj", &format!("/CN={name}"), "-out", &path_str(&csr)])?;
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
    )
    .map_err(|source| Error::Write { path: ext.clone(), source })?;
    openssl(
        "signing the webhook certificate",
        &[
            "x509",
            "-req",
            "-in",
            &path_str(&csr),
            "-CA",
            &path_str(&pki.join("ca.crt")),
            "-CAkey",
            &path_str(&pki.join("ca.key")),
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            &path_str(&ext),
            "-out",
            &path_str(&crt),
        ],
    )?;
    Ok(out)
}

/// The CRDs of the test providers: the contract label says which of their API versions speaks
/// Cluster API's v1beta2 contract.
fn provider_crds() -> Vec<Value> {
    let crd = |group: &str, kind: &str, template: bool| {
        let plural = format!("{}s", kind.to_ascii_lowercase());
        let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let spec = if template {
            json!({"type": "object", "properties": {"template": {"type": "object", "properties": {"spec": open}}}})
        } else {
            open.clone()
        };
        // Both contract labels: Cluster API before v1.11 looks for its v1beta1 contract's.
        let mut labels =
            json!({"cluster.x-k8s.io/v1beta2": "v1alpha1", "cluster.x-k8s.io/v1beta1": "v1alpha1", "cluster.x-k8s.io/provider": "testkit"});
        let column = |name: &str, path: &str| json!({"name": name, "type": "string", "jsonPath": path});
        let mut columns =
            vec![json!({"name": "Cluster", "type": "string", "jsonPath": ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"})];
        if kind == "TestkitControlPlane" {
            columns.push(column("Desired", ".spec.version"));
            columns.push(column("Version", ".status.version"));
            columns.push(column("Available", ".status.conditions[?(@.type==\"Available\")].status"));
        } else if kind == "TestkitCluster" {
            columns.push(column("Provisioned", ".status.initialization.provisioned"));
        }
        columns.push(json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
        if template {
            labels["clusterctl.cluster.x-k8s.io/move"] = json!("");
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}"), "labels": labels},
            "spec": {
                "group": group,
                "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural, "singular": kind.to_ascii_lowercase()},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1alpha1", "served": true, "storage": true,
                    "subresources": if template { json!({}) } else { json!({"status": {}}) },
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec, "status": open}}},
                }],
            },
        })
    };
    vec![
        crd("infrastructure.cluster.x-k8s.io", "TestkitCluster", false),
        crd("infrastructure.cluster.x-k8s.io", "TestkitClusterTemplate", true),
        crd("controlplane.cluster.x-k8s.io", "TestkitControlPlane", false),
        crd("controlplane.cluster.x-k8s.io", "TestkitControlPlaneTemplate", true),
    ]
}

fn resource(group: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), &format!("{}s", kind.to_ascii_lowercase()))
}

/// The test providers' controller: every [`PROVIDER_PERIOD`] until `stop`, brings every
/// `TestkitCluster` and `TestkitControlPlane` to what its provider would report.
async fn providers(mut config: kube::Config, kubeconfig: Vec<u8>, endpoint: (String, u16), stop: Arc<AtomicBool>) {
    config.read_timeout = Some(Duration::from_secs(10));
    config.connect_timeout = Some(Duration::from_secs(5));
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("testkit providers: a client: {e}");
            return;
        }
    };
    let mut secrets_written = HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = reconcile_infra(&client, &endpoint).await {
            tracing::debug!("testkit providers: infrastructure: {e}");
        }
        if let Err(e) = reconcile_control_planes(&client, &kubeconfig, &mut secrets_written).await {
            tracing::debug!("testkit providers: control planes: {e}");
        }
        tokio::time::sleep(PROVIDER_PERIOD).await;
    }
}

/// The Cluster an object belongs to (its `cluster.x-k8s.io/cluster-name` label), when it is
/// not paused.
async fn owning_cluster(client: &kube::Client, ns: &str, obj: &DynamicObject) -> Result<Option<Value>, kube::Error> {
    let Some(name) = obj.metadata.labels.as_ref().and_then(|l| l.get("cluster.x-k8s.io/cluster-name")) else { return Ok(None) };
    let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", Served::current().cluster_version(), "Cluster"));
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
    let Some(cluster) = clusters.get_opt(name).await? else { return Ok(None) };
    let value = serde_json::to_value(cluster).map_err(kube::Error::SerdeError)?;
    let paused = value["spec"]["paused"] == json!(true) || value["metadata"]["annotations"].get("cluster.x-k8s.io/paused").is_some();
    Ok(if paused { None } else { Some(value) })
}

async fn reconcile_infra(client: &kube::Client, endpoint: &(String, u16)) -> Result<(), kube::Error> {
    let res = resource("infrastructure.cluster.x-k8s.io", "TestkitCluster");
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &res);
    for obj in all.list(&ListParams::default()).await?.items {
        let (Some(ns), Some(name)) = (obj.metadata.namespace.clone(), obj.metadata.name.clone()) else { continue };
        if obj.metadata.deletion_timestamp.is_some() || owning_cluster(client, &ns, &obj).await?.is_none() {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &res);
        let want = json!({"host": endpoint.0, "port": endpoint.1});
        if obj.data["spec"]["controlPlaneEndpoint"] != want {
            api.patch(&name, &PatchParams::apply(PROVIDER), &Patch::Merge(json!({"spec": {"controlPlaneEndpoint": want}}))).await?;
        }
        if obj.data["status"]["initialization"]["provisioned"] != json!(true) {
            let status = json!({"status": {"initialization": {"provisioned": true}, "ready": true}});
            api.patch_status(&name, &PatchParams::apply(PROVIDER), &Patch::Merge(status)).await?;
        }
    }
    Ok(())
}

async fn reconcile_control_planes(
    client: &kube::Client,
    kubeconfig: &[u8],
    secrets_written: &mut HashSet<String>,
) -> Result<(), kube::Error> {
    let res = resource("controlplane.cluster.x-k8s.io", "TestkitControlPlane");
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &res);
    for obj in all.list(&ListParams::default()).await?.items {
        let (Some(ns), Some(name), Some(uid)) = (obj.metadata.namespace.clone(), obj.metadata.name.clone(), obj.metadata.uid.clone())
        else {
            continue;
        };
        if obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(cluster) = owning_cluster(client, &ns, &obj).await? else { continue };
        let cluster_name = cluster["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if secrets_written.insert(uid.clone()) {
            write_kubeconfig_secret(client, &ns, &cluster_name, &name, &uid, kubeconfig).await.inspect_err(|_| {
                secrets_written.remove(&uid);
            })?;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &res);
        let Some(version) = obj.data["spec"]["version"].as_str() else { continue };
        let replicas = obj.data["spec"]["replicas"].as_i64().unwrap_or(1);
        let failing = cluster["metadata"]["annotations"][UNAVAILABLE_AT].as_str() == Some(version);
        let ready = if failing { 0 } else { replicas };
        let (status, reason, message) = if failing {
            ("False", "TestkitUnavailable", format!("the control plane does not come up at {version} ({UNAVAILABLE_AT})"))
        } else {
            ("True", "TestkitAvailable", String::new())
        };
        let current = &obj.data["status"];
        let generation = obj.metadata.generation.unwrap_or(0);
        let available = current["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Available"));
        let unchanged = current["version"].as_str() == Some(version)
            && current["readyReplicas"].as_i64() == Some(ready)
            && current["replicas"].as_i64() == Some(replicas)
            && current["observedGeneration"].as_i64() == Some(generation)
            && current["ready"] == json!(!failing)
            && available.is_some_and(|c| c["status"] == status);
        if unchanged {
            continue;
        }
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        // The v1beta2 contract's fields and the v1beta1 contract's (`initialized`, `ready`,
        // `updatedReplicas`, `unavailableReplicas`): Cluster API before v1.11 reads the latter.
        let body = json!({"status": {
            "version": version,
            "initialization": {"controlPlaneInitialized": true},
            "initialized": true,
            "ready": !failing,
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "upToDateReplicas": replicas,
            "updatedReplicas": replicas,
            "unavailableReplicas": replicas - ready,
            "observedGeneration": generation,
            "conditions": [{"type": "Available", "status": status, "reason": reason, "message": message, "lastTransitionTime": now, "observedGeneration": generation}],
        }});
        api.patch_status(&name, &PatchParams::apply(PROVIDER), &Patch::Merge(body)).await?;
    }
    Ok(())
}

/// The `<cluster>-kubeconfig` Secret a control-plane provider writes (Cluster API's format:
/// key `value`, type `cluster.x-k8s.io/secret`, the cluster-name label), owned by the control
/// plane as the kubeadm control plane owns its own.
async fn write_kubeconfig_secret(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    control_plane: &str,
    uid: &str,
    kubeconfig: &[u8],
) -> Result<(), kube::Error> {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": format!("{cluster}-kubeconfig"), "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
            "ownerReferences": [{"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha1", "kind": "TestkitControlPlane", "name": control_plane, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(kubeconfig)},
    });
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()));
    api.patch(&format!("{cluster}-kubeconfig"), &PatchParams::apply(PROVIDER).force(), &Patch::Apply(secret)).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_crds_carry_the_contract_label_and_the_names_cluster_api_computes() {
        let crds = provider_crds();
        let names: Vec<&str> = crds.iter().map(|c| c["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "testkitclusters.infrastructure.cluster.x-k8s.io",
                "testkitclustertemplates.infrastructure.cluster.x-k8s.io",
                "testkitcontrolplanes.controlplane.cluster.x-k8s.io",
                "testkitcontrolplanetemplates.controlplane.cluster.x-k8s.io",
            ]
        );
        assert!(crds.iter().all(|c| c["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] == "v1alpha1"));
        assert_eq!(endpoint_of("https://127.0.0.1:6443"), ("127.0.0.1".to_owned(), 6443));
    }

    #[test]
    fn each_cluster_api_release_is_written_in_the_form_it_serves() {
        let (old, new) = (Served::of("v1.10.10"), Served::of("v1.14.2"));
        assert_eq!(
            (old.cluster_api_version(), new.cluster_api_version()),
            ("cluster.x-k8s.io/v1beta1".into(), "cluster.x-k8s.io/v1beta2".into())
        );
        assert_eq!((old.runtime_version(), new.runtime_version()), ("v1alpha1", "v1beta2"));
        assert_eq!(old.topology("c", "v1.33.0"), json!({"class": "c", "version": "v1.33.0", "controlPlane": {"replicas": 1}}));
        assert_eq!(new.topology("c", "v1.33.0"), json!({"classRef": {"name": "c"}, "version": "v1.33.0", "controlPlane": {"replicas": 1}}));
        let class = "apiVersion: cluster.x-k8s.io/v1beta2\nkind: ClusterClass\nspec:\n  controlPlane:\n    templateRef:\n      kind: X\n";
        assert_eq!(
            old.cluster_class_text(class),
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: ClusterClass\nspec:\n  controlPlane:\n    ref:\n      kind: X\n"
        );
        assert_eq!(new.cluster_class_text(class), class);
        let status = json!({"status": {"conditions": [{"type": "Ready"}], "v1beta2": {"conditions": [{"type": "Available"}]}}});
        assert_eq!(old.v1beta2_conditions(&status)[0]["type"], "Available");
        assert_eq!(new.v1beta2_conditions(&status)[0]["type"], "Ready");
        assert_eq!((crate::kube::minor_of("v1.33.13"), crate::kube::minor_of("1.35.4"), crate::kube::minor_of("x")), (33, 35, 0));
    }
}
