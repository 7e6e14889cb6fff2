//! A real Kubernetes control plane on loopback for the end-to-end suite: etcd, kube-apiserver
//! (TLS from a CA made here, an admin client certificate in the kubeconfig),
//! kube-controller-manager (garbage collector, Deployment/ReplicaSet/namespace/service-account
//! controllers …), kube-scheduler and kwok (fake kubelets: Nodes heartbeat, Pods become Running
//! and Ready without containers), built from pinned Go modules by `scripts/build-realkube.sh`.
//!
//! Every child runs in its own process group with a parent-death signal bound to a thread that
//! lives as long as the process, so nothing outlives the test binary or `testkit kube`, however
//! it ends. Ports are free loopback ports; a start that loses a port race is retried.
//!
//! [`shared`] gives a test binary one control plane for all its tests (as envtest users do):
//! tests isolate themselves by namespace. `STACKSYNC_TEST_KUBECONFIG` points the suite at a
//! cluster of your own instead.

use std::fs::File;
use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::{ApiResource, Scope};
use serde_json::{Value, json};

/// The binaries `scripts/build-realkube.sh` builds, in start order.
pub const BINARIES: [&str; 5] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"];

/// How long one component may take to become ready before the start fails.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the real control plane's binaries are not in {dir} (missing {missing}); build them with scripts/build-realkube.sh (scripts/test.sh does; with STACKSYNC_KUBE_VERSION set as here)"
    )]
    NotBuilt { dir: PathBuf, missing: String },
    #[error("creating the control plane's directory {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("making certificates with openssl ({step}): {detail}")]
    Certificates { step: &'static str, detail: String },
    #[error("starting {component}")]
    Spawn {
        component: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{component} did not become ready: {reason}; its log ({log}) ends with:\n{tail}")]
    NotReady { component: &'static str, reason: String, log: PathBuf, tail: String },
    #[error("talking to the real API server: {what}")]
    Client {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("preloading {path}: {message}")]
    Preload { path: PathBuf, message: String },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directories (or files) of YAML applied once the control plane is ready, CRDs first and
    /// waited for until Established.
    pub preload: Vec<PathBuf>,
    /// How many kwok Nodes to create (Ready, 32 CPUs, 256 GiB, 110 pods each).
    pub nodes: usize,
    /// Where the binaries are; default [`bin_dir`].
    pub bin_dir: Option<PathBuf>,
    /// Write an audit log ([`Kube::audit_log`]): every request's user, verb, resource and
    /// response code (level `Metadata`, one JSON event per line), for tests that prove what an
    /// identity did and that nothing it did was refused.
    pub audit: bool,
    /// Run kube-apiserver with API priority and fairness (off by default: a shared control plane
    /// of many tests must not throttle them), its total concurrency limited to this many
    /// requests (`--max-requests-inflight` plus `--max-mutating-requests-inflight`), so a test's
    /// own FlowSchema and PriorityLevelConfiguration can make it answer 429 for real.
    pub priority_and_fairness: Option<u32>,
}

impl Default for Options {
    fn default() -> Options {
        Options { preload: Vec::new(), nodes: 1, bin_dir: None, audit: false, priority_and_fairness: None }
    }
}

/// The audit policy of [`Options::audit`]: metadata of every request, once, when answered.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n";

/// The Kubernetes release `scripts/build-realkube.sh` builds unless `STACKSYNC_KUBE_VERSION`
/// names another.
pub const DEFAULT_VERSION: &str = "v1.35.4";

/// The Kubernetes release of the control planes testkit starts: `STACKSYNC_KUBE_VERSION`
/// (e.g. `v1.33.13`), else [`DEFAULT_VERSION`].
pub fn version() -> String {
    std::env::var("STACKSYNC_KUBE_VERSION")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_VERSION.to_owned())
}

/// The minor of a `v1.<minor>.<patch>` version (0 when it is not one).
pub fn minor_of(version: &str) -> u32 {
    version.trim_start_matches('v').split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0)
}

/// `$STACKSYNC_TOOLS_DIR/realkube` (default `~/.cache/stacksync-tools/realkube`): where the
/// build scripts install the control plane and Cluster API.
pub fn realkube_dir() -> PathBuf {
    let tools = std::env::var_os("STACKSYNC_TOOLS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
        home.join(".cache").join("stacksync-tools")
    });
    tools.join("realkube")
}

/// The directory `scripts/build-realkube.sh` installs the [`version`] into: `realkube/bin` for
/// the default release, `realkube/kubernetes-<version>/bin` for another.
pub fn bin_dir() -> PathBuf {
    let version = version();
    if version == DEFAULT_VERSION { realkube_dir().join("bin") } else { realkube_dir().join(format!("kubernetes-{version}")).join("bin") }
}

/// True when every binary is built (tests that need the real control plane skip loudly without
/// it, and fail under CI).
pub fn available() -> bool {
    missing(&bin_dir()).is_empty()
}

fn missing(dir: &Path) -> Vec<&'static str> {
    BINARIES.iter().copied().filter(|b| !dir.join(b).is_file()).collect()
}

/// One running control plane. [`Kube::stop`] (or dropping it) stops every component, newest
/// first, and removes its directory.
pub struct Kube {
    dir: PathBuf,
    url: String,
    kubeconfig: PathBuf,
    children: Vec<(&'static str, Child)>,
    /// How each component was started (program, arguments, environment): what
    /// [`Kube::restart`] starts again.
    commands: Vec<(&'static str, Command)>,
    /// etcd's client URL (its `/health`).
    etcd_url: String,
    started_in: Duration,
}

impl Kube {
    /// Starts a control plane and returns once `/readyz` answers ok, the Nodes are Ready, the
    /// `default` ServiceAccount exists and the preloaded files are applied.
    ///
    /// # Errors
    /// Missing binaries, openssl failing, a component that exits or does not become ready (the
    /// error names it and quotes the end of its log), a preload file the server refuses.
    pub async fn start(options: Options) -> Result<Kube> {
        let bins = options.bin_dir.clone().unwrap_or_else(bin_dir);
        let absent = missing(&bins);
        if !absent.is_empty() {
            return Err(Error::NotBuilt { dir: bins, missing: absent.join(", ") });
        }
        let started = Instant::now();
        let dir = make_dir()?;
        let mut kube = Kube {
            dir,
            url: String::new(),
            kubeconfig: PathBuf::new(),
            children: Vec::new(),
            commands: Vec::new(),
            etcd_url: String::new(),
            started_in: Duration::ZERO,
        };
        if let Err(e) = kube.boot(&bins, &options).await {
            // Keep the directory: the error points at logs in it.
            kube.kill_children();
            return Err(e);
        }
        kube.started_in = started.elapsed();
        Ok(kube)
    }

    async fn boot(&mut self, bins: &Path, options: &Options) -> Result<()> {
        let pki = Pki::make(&self.dir)?;

        // etcd: no fsync (data lives in a temp dir), a retry if another process took the port.
        let mut attempt = 0;
        let etcd_url = loop {
            attempt += 1;
            let client = free_port()?;
            let peer = free_port()?;
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let mut cmd = Command::new(bins.join("etcd"));
            cmd.arg("--name=testkit")
                .arg(format!("--data-dir={}", self.dir.join("etcd").display()))
                .arg(format!("--listen-client-urls={client_url}"))
                .arg(format!("--advertise-client-urls={client_url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=testkit={peer_url}"))
                .arg("--unsafe-no-fsync=true")
                .arg("--quota-backend-bytes=4294967296")
                .arg("--log-level=warn");
            self.spawn("etcd", cmd)?;
            match self.wait_http("etcd", &format!("{client_url}/health"), "true").await {
                Ok(()) => {
                    self.etcd_url.clone_from(&client_url);
                    break client_url;
                }
                Err(e) if attempt < 3 && self.exited("etcd") => {
                    tracing::warn!("etcd did not start ({e}); trying other ports");
                    self.children.retain(|(name, _)| *name != "etcd");
                }
                Err(e) => return Err(e),
            }
        };

        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            self.url = format!("https://127.0.0.1:{port}");
            let mut cmd = Command::new(bins.join("kube-apiserver"));
            cmd.arg(format!("--etcd-servers={etcd_url}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--advertise-address=127.0.0.1")
                .arg(format!("--secure-port={port}"))
                .arg(format!("--cert-dir={}", self.dir.join("apiserver-certs").display()))
                .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
                .arg(format!("--tls-private-key-file={}", pki.server_key.display()))
                .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
                .arg(format!("--token-auth-file={}", pki.tokens.display()))
                .arg(format!("--service-account-key-file={}", pki.sa_pub.display()))
                .arg(format!("--service-account-signing-key-file={}", pki.sa_key.display()))
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                .arg("--service-cluster-ip-range=10.0.0.0/24")
                .arg("--authorization-mode=RBAC")
                .arg("--allow-privileged=true")
                .arg("--profiling=false")
                .arg("--event-ttl=1h");
            match options.priority_and_fairness {
                Some(limit) => {
                    let mutating = (limit / 3).max(1);
                    cmd.arg("--enable-priority-and-fairness=true")
                        .arg(format!("--max-requests-inflight={}", limit.saturating_sub(mutating).max(1)))
                        .arg(format!("--max-mutating-requests-inflight={mutating}"));
                }
                None => {
                    cmd.arg("--enable-priority-and-fairness=false");
                }
            }
            if options.audit {
                let policy = self.dir.join("audit-policy.yaml");
                std::fs::write(&policy, AUDIT_POLICY).map_err(|source| Error::Write { path: policy.clone(), source })?;
                cmd.arg(format!("--audit-policy-file={}", policy.display()))
                    .arg(format!("--audit-log-path={}", self.audit_log().display()))
                    .arg("--audit-log-format=json")
                    .arg("--audit-log-mode=blocking")
                    .arg("--audit-log-maxbackup=0");
            }
            self.spawn("kube-apiserver", cmd)?;
            self.kubeconfig = self.dir.join("admin.kubeconfig");
            write_admin_kubeconfig(&self.kubeconfig, &self.url, &pki)?;
            match self.wait_readyz().await {
                Ok(()) => break,
                Err(e) if attempt < 3 && self.exited("kube-apiserver") => {
                    tracing::warn!("kube-apiserver did not start ({e}); trying another port");
                    self.children.retain(|(name, _)| *name != "kube-apiserver");
                }
                Err(e) => return Err(e),
            }
        }

        let kubeconfig = self.kubeconfig.display().to_string();
        let mut cmd = Command::new(bins.join("kube-controller-manager"));
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--authentication-kubeconfig={kubeconfig}"))
            .arg(format!("--authorization-kubeconfig={kubeconfig}"))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller")
            .arg(format!("--service-account-private-key-file={}", pki.sa_key.display()))
            .arg(format!("--root-ca-file={}", pki.ca_cert.display()))
            .arg("--use-service-account-credentials=false")
            .arg("--concurrent-gc-syncs=20")
            .arg("--profiling=false");
        self.spawn("kube-controller-manager", cmd)?;

        let mut cmd = Command::new(bins.join("kube-scheduler"));
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--authentication-kubeconfig={kubeconfig}"))
            .arg(format!("--authorization-kubeconfig={kubeconfig}"))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--profiling=false");
        self.spawn("kube-scheduler", cmd)?;

        let mut cmd = Command::new(bins.join("kwok"));
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--manage-all-nodes=true")
            .arg("--node-port=0")
            .arg("--cidr=10.244.0.0/16")
            .arg("--node-ip=127.0.0.1")
            .arg("--node-lease-duration-seconds=40");
        self.spawn("kwok", cmd)?;

        let client = self.client().await?;
        self.create_nodes(&client, options.nodes).await?;
        self.wait_default_service_account(&client).await?;
        for path in &options.preload {
            preload(&client, path).await?;
        }
        Ok(())
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The admin kubeconfig (client certificate in `system:masters`), inside the control
    /// plane's directory.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The control plane's directory: certificates, etcd's data, one `<component>.log` each.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long [`Kube::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Resident memory of every component now (from /proc), in bytes.
    pub fn rss(&self) -> Vec<(&'static str, u64)> {
        self.children.iter().map(|(name, child)| (*name, rss_of(child.id()))).collect()
    }

    /// The kube client config of the admin kubeconfig.
    ///
    /// # Errors
    /// An unreadable kubeconfig.
    pub async fn kube_config(&self) -> Result<kube::Config> {
        config_from(&self.kubeconfig).await
    }

    /// A client with the admin identity.
    ///
    /// # Errors
    /// An unreadable kubeconfig, or a client that cannot be built.
    pub async fn client(&self) -> Result<kube::Client> {
        let config = self.kube_config().await?;
        kube::Client::try_from(config).map_err(|source| Error::Client { what: "building a client".into(), source })
    }

    /// Copies the admin kubeconfig to `path` (written to a temporary name and renamed, so a
    /// reader never sees half a file).
    ///
    /// # Errors
    /// When it cannot be written.
    /// The audit log of a control plane started with [`Options::audit`] (JSON lines).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// The CA certificate that signed the API server's serving certificate (what a Pod finds
    /// in `/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("pki").join("ca.crt")
    }

    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::copy(&self.kubeconfig, &tmp).map_err(|source| Error::Write { path: tmp.clone(), source })?;
        std::fs::rename(&tmp, path).map_err(|source| Error::Write { path: path.to_path_buf(), source })
    }

    /// The first component that is no longer running, with its exit status.
    pub fn exited_component(&mut self) -> Option<(&'static str, String)> {
        self.children.iter_mut().find_map(|(name, child)| match child.try_wait() {
            Ok(Some(status)) => Some((*name, status.to_string())),
            _ => None,
        })
    }

    /// Stops every component (SIGTERM, newest first; SIGKILL after 10 s) and removes the
    /// directory.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        for (_, child) in self.children.iter().rev() {
            terminate(child.id());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (_, child) in self.children.iter_mut().rev() {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill_children();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    fn kill_children(&mut self) {
        for (_, child) in self.children.iter_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        self.children.clear();
    }

    fn log(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.log"))
    }

    /// Starts `cmd` in a process group of its own, its output in `<component>.log`, with the
    /// parent-death signal set by util-linux's `setpriv --pdeathsig KILL`, which then execs the
    /// component (the crate forbids `unsafe`: no `pre_exec` + `prctl` of our own).
    pub(crate) fn spawn(&mut self, component: &'static str, cmd: Command) -> Result<()> {
        let log_path = self.log(component);
        // A restarted component's log goes on where the killed one's stopped.
        let log =
            File::options().create(true).append(true).open(&log_path).map_err(|source| Error::Write { path: log_path.clone(), source })?;
        let log2 = log.try_clone().map_err(|source| Error::Write { path: log_path, source })?;
        let mut wrapped = Command::new("setpriv");
        wrapped.args(["--pdeathsig", "KILL", "--"]).arg(cmd.get_program()).args(cmd.get_args());
        for (key, value) in cmd.get_envs() {
            match value {
                Some(v) => wrapped.env(key, v),
                None => wrapped.env_remove(key),
            };
        }
        wrapped.stdin(Stdio::null()).stdout(log).stderr(log2).process_group(0);
        let child = spawn_supervised(wrapped).map_err(|source| Error::Spawn { component, source })?;
        self.children.push((component, child));
        self.commands.retain(|(name, _)| *name != component);
        self.commands.push((component, copy(&cmd)));
        Ok(())
    }

    /// SIGKILLs `component` (`etcd`, `kube-apiserver`, `kube-controller-manager`, …) and waits
    /// for it to be gone: a crash, as a fault to test against. [`Kube::restart`] starts it again.
    pub fn kill(&mut self, component: &str) {
        for (_, child) in self.children.iter_mut().filter(|(name, _)| *name == component) {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.retain(|(name, _)| *name != component);
    }

    /// Starts a [`Kube::kill`]ed component again with its first arguments (the same ports and
    /// data directory) and waits until it serves: etcd's `/health`, the API server's
    /// `/readyz`.
    ///
    /// # Errors
    /// It was never started, cannot be spawned, or does not become ready.
    pub async fn restart(&mut self, component: &'static str) -> Result<()> {
        let Some((_, cmd)) = self.commands.iter().find(|(name, _)| *name == component) else {
            return Err(self.not_ready(component, "it was never started".into()));
        };
        let again = copy(cmd);
        self.spawn(component, again)?;
        match component {
            "etcd" => {
                let url = format!("{}/health", self.etcd_url);
                self.wait_http("etcd", &url, "true").await
            }
            "kube-apiserver" => self.wait_readyz().await,
            _ => Ok(()),
        }
    }

    pub(crate) fn exited(&mut self, component: &str) -> bool {
        self.children.iter_mut().any(|(name, child)| *name == component && matches!(child.try_wait(), Ok(Some(_))))
    }

    pub(crate) fn not_ready(&self, component: &'static str, reason: String) -> Error {
        let log = self.log(component);
        Error::NotReady { component, reason, tail: tail(&log, 25), log }
    }

    /// Waits until `component` is alive and `url` answers 200 with `expect` in the body.
    pub(crate) async fn wait_http(&mut self, component: &'static str, url: &str, expect: &str) -> Result<()> {
        let http =
            reqwest::Client::builder().timeout(Duration::from_secs(2)).build().map_err(|e| self.not_ready(component, e.to_string()))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.exited(component) {
                return Err(self.not_ready(component, "it exited".into()));
            }
            if let Ok(resp) = http.get(url).send().await
                && resp.status().is_success()
                && resp.text().await.is_ok_and(|t| t.contains(expect))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready(component, format!("{url} did not answer within {}s", READY_TIMEOUT.as_secs())));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `component` is alive and its log has a line containing `line`.
    pub(crate) async fn wait_log(&mut self, component: &'static str, line: &str) -> Result<()> {
        let log = self.log(component);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.exited(component) {
                return Err(self.not_ready(component, "it exited".into()));
            }
            if std::fs::read_to_string(&log).is_ok_and(|text| text.contains(line)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready(component, format!("its log had no {line:?} within {}s", READY_TIMEOUT.as_secs())));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_readyz(&mut self) -> Result<()> {
        let client = self.client().await?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last;
        loop {
            if self.exited("kube-apiserver") {
                return Err(self.not_ready("kube-apiserver", "it exited".into()));
            }
            let request = http::Request::get("/readyz").body(Vec::new()).map_err(|e| self.not_ready("kube-apiserver", e.to_string()))?;
            match client.request_text(request).await {
                Ok(text) if text.trim() == "ok" => return Ok(()),
                Ok(text) => last = text,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(self
                    .not_ready("kube-apiserver", format!("/readyz did not answer ok within {}s (last: {last})", READY_TIMEOUT.as_secs())));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn create_nodes(&mut self, client: &kube::Client, count: usize) -> Result<()> {
        let nodes: Api<Node> = Api::all(client.clone());
        for i in 0..count {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": format!("kwok-node-{i}"),
                    "labels": {"type": "kwok", "kubernetes.io/hostname": format!("kwok-node-{i}"), "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                },
                "status": {
                    "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                    "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                },
            }))
            .map_err(|e| Error::Preload { path: PathBuf::from("<nodes>"), message: e.to_string() })?;
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => return Err(Error::Client { what: format!("creating Node kwok-node-{i}"), source }),
            }
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let list = nodes.list(&Default::default()).await.map_err(|source| Error::Client { what: "listing Nodes".into(), source })?;
            let ready = list
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .count();
            if ready >= count {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready("kwok", format!("{ready} of {count} Nodes Ready after {}s", READY_TIMEOUT.as_secs())));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_default_service_account(&mut self, client: &kube::Client) -> Result<()> {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if accounts.get_opt("default").await.ok().flatten().is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready("kube-controller-manager", "no default ServiceAccount (service account controller)".into()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Kube {
    fn drop(&mut self) {
        if !self.children.is_empty() {
            self.shutdown();
        }
    }
}

/// The control plane shared by every test of this test binary, started by the first caller;
/// or `None` (after printing why) when the binaries are not built and `CI` is not set — under CI
/// a missing control plane panics, so the suite cannot pass by skipping.
///
/// With `STACKSYNC_TEST_KUBECONFIG` set, that cluster is used instead (nothing is started).
/// It lives until the test binary exits; the parent-death signal stops its processes then.
pub async fn shared() -> Option<&'static Shared> {
    static SHARED: tokio::sync::OnceCell<Option<Shared>> = tokio::sync::OnceCell::const_new();
    SHARED
        .get_or_init(|| async {
            if let Some(path) = std::env::var_os("STACKSYNC_TEST_KUBECONFIG") {
                return Some(Shared { kubeconfig: PathBuf::from(path), _kube: None });
            }
            if !available() {
                let message = format!(
                    "the real control plane (Kubernetes {}) is not built in {} (scripts/build-realkube.sh)",
                    version(),
                    bin_dir().display()
                );
                assert!(std::env::var_os("CI").is_none(), "{message}; CI must run the real-Kubernetes tests");
                eprintln!("SKIPPED: {message}");
                return None;
            }
            // The control plane must outlive this test's runtime: start it on a runtime of its
            // own, on a thread that lives as long as the process.
            let started = keep_for_process(
                "testkit-kube",
                || Kube::start(Options { preload: shared_preload(), nodes: 3, ..Options::default() }),
                |kube| kube.kubeconfig.clone(),
            );
            match started.await {
                Ok(kubeconfig) => Some(Shared { kubeconfig, _kube: None }),
                Err(e) => panic!("starting the shared real control plane: {e}"),
            }
        })
        .await
        .as_ref()
}

/// Runs `start` on a thread of its own with a runtime of its own (what it starts must outlive
/// the caller's runtime: a test's), answers what `info` reads of the result, and keeps the result
/// (and that thread) for the life of the process; its children's parent-death signal stops them
/// when the process exits.
pub(crate) async fn keep_for_process<T, I, F, Fut>(name: &str, start: F, info: impl FnOnce(&T) -> I + Send + 'static) -> Result<I, String>
where
    T: 'static,
    I: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>>,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(format!("a runtime: {e}")));
                    return;
                }
            };
            match runtime.block_on(start()) {
                Ok(value) => {
                    let _ = tx.send(Ok(info(&value)));
                    let _kept = value;
                    loop {
                        std::thread::park();
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        })
        .map_err(|e| format!("a thread: {e}"))?;
    rx.await.unwrap_or_else(|_| Err("its thread ended".into()))
}

fn shared_preload() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    vec![root.join("testdata").join("crds"), root.join("deploy").join("crds")]
}

/// A control plane shared by a test binary (see [`shared`]).
pub struct Shared {
    kubeconfig: PathBuf,
    _kube: Option<Kube>,
}

impl Shared {
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// # Errors
    /// An unreadable kubeconfig.
    pub async fn kube_config(&self) -> Result<kube::Config> {
        config_from(&self.kubeconfig).await
    }

    /// # Errors
    /// An unreadable kubeconfig, or a client that cannot be built.
    pub async fn client(&self) -> Result<kube::Client> {
        let config = self.kube_config().await?;
        kube::Client::try_from(config).map_err(|source| Error::Client { what: "building a client".into(), source })
    }
}

pub(crate) async fn config_from(path: &Path) -> Result<kube::Config> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig { path: path.to_path_buf(), message: e.to_string() })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig { path: path.to_path_buf(), message: e.to_string() })
}

/// Server-side applies every YAML document of `path` (a file, or every `*.yaml`/`*.yml` of a
/// directory, sorted) as field manager `testkit`: CRDs first, each waited for until Established.
///
/// # Errors
/// An unreadable file, bad YAML, or an object the server refuses.
pub async fn preload(client: &kube::Client, path: &Path) -> Result<Vec<Value>> {
    let err = |message: String| Error::Preload { path: path.to_path_buf(), message };
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| err(e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut docs = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| err(format!("{}: {e}", file.display())))?;
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| err(format!("{}: {e}", file.display())))?;
        docs.extend(parsed.into_iter().filter(Value::is_object));
    }
    let (crds, rest): (Vec<Value>, Vec<Value>) = docs.into_iter().partition(|d| d["kind"] == "CustomResourceDefinition");
    let mut applied = Vec::new();
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
        applied.push(apply_value(client, crd).await.map_err(|e| err(e.to_string()))?);
        wait_established(client, &name).await.map_err(err)?;
    }
    for obj in rest {
        applied.push(apply_value(client, obj).await.map_err(|e| err(e.to_string()))?);
    }
    Ok(applied)
}

/// Server-side applies one object (force, field manager `testkit`), finding its resource by
/// discovery.
///
/// # Errors
/// An unknown kind, or the server's refusal.
pub async fn apply_value(client: &kube::Client, obj: Value) -> Result<Value, kube::Error> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), &namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let _: &ApiResource = &resource;
    let applied = api.patch(&name, &PatchParams::apply("testkit").force(), &Patch::Apply(&obj)).await?;
    serde_json::to_value(applied).map_err(kube::Error::SerdeError)
}

pub(crate) async fn wait_established(client: &kube::Client, name: &str) -> Result<(), String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let crd = crds.get(name).await.map_err(|e| format!("reading CRD {name}: {e}"))?;
        let established = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("CRD {name} not Established after 60s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A directory of our own under the temp dir, named after this process; directories of
/// processes that are gone (a killed test binary) are removed first.
fn make_dir() -> Result<PathBuf> {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let base = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("testkit-kube-").and_then(|rest| rest.split('-').next())
                && let Ok(pid) = pid.parse::<u32>()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = base.join(format!("testkit-kube-{}-{seq}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| Error::Dir { path: dir.clone(), source })?;
    Ok(dir)
}

pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| Error::Spawn { component: "a free port", source })?;
    listener.local_addr().map(|a| a.port()).map_err(|source| Error::Spawn { component: "a free port", source })
}

/// The certificates and keys of one control plane (ECDSA P-256, made with openssl).
struct Pki {
    /// A static bearer token in `system:masters`, for clients that cannot present a client
    /// certificate (wrk in the benchmark); in the kubeconfig as user `testkit-token`.
    token: String,
    tokens: PathBuf,
    ca_cert: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    admin_cert: PathBuf,
    admin_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
}

impl Pki {
    fn make(dir: &Path) -> Result<Pki> {
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(|source| Error::Dir { path: pki.clone(), source })?;
        let p = |name: &str| pki.join(name);
        let key = |name: &str| {
            openssl("a key", &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &path_str(&p(name))])
        };
        key("ca.key")?;
        openssl(
            "the CA",
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &path_str(&p("ca.key")),
                "-subj",
                "/CN=testkit-kube-ca",
                "-days",
                "3650",
                "-out",
                &path_str(&p("ca.crt")),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )?;
        let sign = |name: &str, subject: &str, ext: &str| -> Result<()> {
            key(&format!("{name}.key"))?;
            openssl(
                "a request",
                &[
                    "req",
                    "-new",
                    "-key",
                    &path_str(&p(&format!("{name}.key"))),
                    "-subj",
                    subject,
                    "-out",
                    &path_str(&p(&format!("{name}.csr"))),
                ],
            )?;
            std::fs::write(p(&format!("{name}.ext")), ext).map_err(|source| Error::Write { path: p(&format!("{name}.ext")), source })?;
            openssl(
                "signing",
                &[
                    "x509",
                    "-req",
                    "-in",
                    &path_str(&p(&format!("{name}.csr"))),
                    "-CA",
                    &path_str(&p("ca.crt")),
                    "-CAkey",
                    &path_str(&p("ca.key")),
                    "-CAcreateserial",
                    "-days",
                    "3650",
                    "-extfile",
                    &path_str(&p(&format!("{name}.ext"))),
                    "-out",
                    &path_str(&p(&format!("{name}.crt"))),
                ],
            )
        };
        sign(
            "server",
            "/CN=kube-apiserver",
            "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
        )?;
        sign(
            "admin",
            "/O=system:masters/CN=testkit-admin",
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
        )?;
        key("sa.key")?;
        openssl("the service account key", &["pkey", "-in", &path_str(&p("sa.key")), "-pubout", "-out", &path_str(&p("sa.pub"))])?;
        let mut random = [0u8; 24];
        File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut random))
            .map_err(|e| Error::Certificates { step: "a token", detail: e.to_string() })?;
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(p("tokens.csv"), format!("{token},testkit-token,testkit-token,\"system:masters\"\n"))
            .map_err(|source| Error::Write { path: p("tokens.csv"), source })?;
        Ok(Pki {
            token,
            tokens: p("tokens.csv"),
            ca_cert: p("ca.crt"),
            server_cert: p("server.crt"),
            server_key: p("server.key"),
            admin_cert: p("admin.crt"),
            admin_key: p("admin.key"),
            sa_key: p("sa.key"),
            sa_pub: p("sa.pub"),
        })
    }
}

pub(crate) fn path_str(p: &Path) -> String {
    p.display().to_string()
}

pub(crate) fn openssl(step: &'static str, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Certificates { step, detail: e.to_string() })?;
    if out.status.success() { Ok(()) } else { Err(Error::Certificates { step, detail: String::from_utf8_lossy(&out.stderr).into_owned() }) }
}

fn write_admin_kubeconfig(path: &Path, url: &str, pki: &Pki) -> Result<()> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| Error::Write { path: p.to_path_buf(), source });
    use base64::Engine as _;
    let b64 = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testkit-kube", "cluster": {"server": url, "certificate-authority-data": b64(read(&pki.ca_cert)?)}}],
        "users": [{"name": "testkit-admin", "user": {
            "client-certificate-data": b64(read(&pki.admin_cert)?),
            "client-key-data": b64(read(&pki.admin_key)?),
        }}, {"name": "testkit-token", "user": {"token": pki.token}}],
        "contexts": [
            {"name": "testkit-kube", "context": {"cluster": "testkit-kube", "user": "testkit-admin", "namespace": "default"}},
            {"name": "testkit-kube-token", "context": {"cluster": "testkit-kube", "user": "testkit-token", "namespace": "default"}},
        ],
        "current-context": "testkit-kube",
    });
    let text = serde_json::to_string_pretty(&config).unwrap_or_default();
    std::fs::write(path, text).map_err(|source| Error::Write { path: path.to_path_buf(), source })
}

fn tail(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// SIGTERM through procps' `kill` (the crate forbids `unsafe`, so no libc::kill).
/// A command with `cmd`'s program, arguments and environment changes (a `Command` is not
/// `Clone`).
fn copy(cmd: &Command) -> Command {
    let mut again = Command::new(cmd.get_program());
    again.args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => again.env(key, v),
            None => again.env_remove(key),
        };
    }
    again
}

fn terminate(pid: u32) {
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).stdin(Stdio::null()).stderr(Stdio::null()).status();
}

/// Spawns `cmd` (in a process group of its own) from one thread that lives as long as the
/// process, with `PR_SET_PDEATHSIG`:
/// the kernel delivers the parent-death signal when the *thread* that forked exits, so forking
/// from a test's short-lived thread would kill the child when that test ends.
fn spawn_supervised(cmd: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        let spawned = std::thread::Builder::new().name("testkit-kube-spawner".into()).spawn(move || {
            while let Ok((mut cmd, reply)) = rx.recv() {
                let _ = reply.send(cmd.spawn());
            }
            // Every sender is gone only at process exit; keep the thread (and the children's
            // parent-death binding) until then.
            loop {
                std::thread::park();
            }
        });
        if let Err(e) = spawned {
            tracing::error!("testkit kube: cannot start the spawner thread: {e}");
        }
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let send = sender.lock().map_err(|_| std::io::Error::other("spawner lock poisoned"))?.send((cmd, reply_tx));
    send.map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}
