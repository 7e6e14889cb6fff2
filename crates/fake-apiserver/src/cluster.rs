//! Where end-to-end tests run: a fresh loopback [`ApiServer`] by default, or the real cluster a
//! kubeconfig named by `STACKSYNC_E2E_KUBECONFIG` points at. Either way each test gets a fresh
//! namespace (the kubectl it is handed defaults to it) and removes what it made.

use std::path::{Path, PathBuf};

use super::kubectl::{self, Kubectl};
use super::{ApiServer, meta};

/// The variable naming a real cluster's kubeconfig.
pub const KUBECONFIG_ENV: &str = "STACKSYNC_E2E_KUBECONFIG";

/// The label on every namespace a test creates, so that what a panicking test left behind on a
/// real cluster can be found: `kubectl delete ns -l testkit.stacksync.dev/e2e=true`.
pub const LABEL: &str = "testkit.stacksync.dev/e2e";

/// Why a [`TestCluster`] could not be set up, used or cleaned up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the loopback API server")]
    Start(#[source] super::Error),
    #[error(transparent)]
    Kubectl(#[from] kubectl::Error),
    #[error("kubectl {args} failed: {stderr}")]
    Command { args: String, stderr: String },
    #[error("building a kube client from {path}")]
    Client {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The cluster one test runs against.
pub struct TestCluster {
    server: Option<ApiServer>,
    kubectl: Kubectl,
    namespace: String,
    /// Cluster-scoped objects the test created (`kind/name`), deleted by [`TestCluster::finish`].
    cleanup: Vec<String>,
}

impl TestCluster {
    /// A real cluster when `STACKSYNC_E2E_KUBECONFIG` is set, else a new loopback server; then
    /// a fresh namespace `testkit-xxxxx` in it.
    ///
    /// # Errors
    /// kubectl missing (run scripts/install-tools.sh), the server not starting, or the
    /// namespace not being created.
    pub async fn start() -> Result<TestCluster, Error> {
        let (server, source) = match std::env::var_os(KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
            Some(path) => (None, PathBuf::from(path)),
            None => {
                let server = ApiServer::start().await.map_err(Error::Start)?;
                let path = server.kubeconfig().to_path_buf();
                (Some(server), path)
            }
        };
        // kubectl gets its own copy of the kubeconfig, switched to the test's namespace.
        let kubectl = Kubectl::with_kubeconfig_copy(&source)?;
        let namespace = format!("testkit-{}", meta::name_suffix());
        let cluster = TestCluster { server, kubectl, namespace, cleanup: Vec::new() };
        let manifest =
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {}\n  labels: {{{LABEL}: \"true\"}}\n", cluster.namespace);
        let created = cluster.kubectl.run(&["create", "-f", "-"], Some(&manifest)).await?;
        if !created.success {
            return Err(Error::Command { args: "create namespace".into(), stderr: created.stderr });
        }
        cluster.run(&["config", "set-context", "--current", &format!("--namespace={}", cluster.namespace)]).await?;
        Ok(cluster)
    }

    async fn run(&self, args: &[&str]) -> Result<kubectl::Output, Error> {
        let out = self.kubectl.run(args, None).await?;
        if !out.success {
            return Err(Error::Command { args: args.join(" "), stderr: out.stderr });
        }
        Ok(out)
    }

    /// kubectl defaulting to this test's namespace.
    pub fn kubectl(&self) -> &Kubectl {
        &self.kubectl
    }

    /// The test's namespace, `testkit-xxxxx`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The kubeconfig kubectl uses (namespace set to the test's).
    pub fn kubeconfig(&self) -> &Path {
        self.kubectl.kubeconfig()
    }

    /// The loopback server, when not running against a real cluster: what only it can answer
    /// (stats, faults) is asserted through this.
    pub fn local(&self) -> Option<&ApiServer> {
        self.server.as_ref()
    }

    /// Deletes `kind/name` (cluster-scoped, e.g. a CRD) when the test finishes.
    pub fn delete_on_finish(&mut self, object: &str) {
        self.cleanup.push(object.to_string());
    }

    /// A kube client defaulting to this test's namespace.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read or a client cannot be built from it.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let path = self.kubeconfig().to_path_buf();
        let client_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Client { path: path.clone(), source };
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(|e| client_err(Box::new(e)))?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| client_err(Box::new(e)))?;
        config.default_namespace = self.namespace.clone();
        kube::Client::try_from(config).map_err(|e| client_err(Box::new(e)))
    }

    /// Deletes the namespace and every registered cluster-scoped object, waiting for them, then
    /// stops the loopback server.
    ///
    /// # Errors
    /// A deletion kubectl reports as failed (the loopback server is stopped regardless).
    pub async fn finish(self) -> Result<(), Error> {
        let mut result = Ok(());
        for object in self.cleanup.iter().rev() {
            if let Err(e) = self.run(&["delete", object, "--ignore-not-found", "--timeout=60s"]).await {
                result = Err(e);
            }
        }
        if let Err(e) = self.run(&["delete", "namespace", &self.namespace, "--ignore-not-found", "--timeout=120s"]).await {
            result = result.and(Err(e));
        }
        if let Some(server) = self.server {
            server.stop().await;
        }
        result
    }
}
