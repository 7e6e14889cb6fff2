//! `stacksync console`: a local, read-only web console over the management cluster — the
//! fleet, its rollouts, each Cluster, the releases, and preview reports — read with the user's
//! own credentials (their RBAC decides what they see), live.
//!
//! It sits beside the pipeline, not in it: it reads the status resources the Kubernetes target
//! writes (`ClusterSync`, `StackRelease`), Cluster API's `Cluster`s and the Events on them, and
//! writes nothing. `watch.rs` keeps them with kube-runtime reflectors and tells the pages what
//! changed; `view.rs` decides what is shown (pure); `pages/` writes the HTML, every string
//! escaped (`html.rs`); `server.rs` serves it on loopback with a strict Content-Security-Policy,
//! the script and stylesheet from the binary (nothing from the network: air-gapped management
//! clusters), and the changes as server-sent events.

pub mod html;
pub mod pages;
pub mod server;
pub mod view;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use server::{CSP, Console};
pub use view::Snapshot;

use crate::config::{Config, ConfigErrors, Target};

/// `User-Agent` of every request the console makes (unless the kubeconfig sets one).
pub const USER_AGENT: &str = concat!("stacksync-console/", env!("CARGO_PKG_VERSION"));

/// How long the console waits for the management cluster to answer its first question.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `stacksync console`'s options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The management cluster's kubeconfig (default: the config's, else `$KUBECONFIG`,
    /// `~/.kube/config` or the in-cluster environment).
    pub kubeconfig: Option<PathBuf>,
    /// Its context (default: the config's, else the kubeconfig's current context).
    pub context: Option<String>,
    pub listen: SocketAddr,
    /// Listen on an address that is not loopback.
    pub allow_remote: bool,
    /// A stacksync config: rollout budgets and windows, and the exact pause/resume command.
    pub config: Option<PathBuf>,
    /// A `stacksync preview -o json` report to show on the Preview page.
    pub preview: Option<PathBuf>,
}

/// Why the console cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "--listen {addr}: not a loopback address; the console shows the fleet to whoever reaches it, so it listens on 127.0.0.1 or ::1 unless --allow-remote says otherwise"
    )]
    NotLoopback { addr: SocketAddr },
    #[error("--config {}: {source}", path.display())]
    Config {
        path: PathBuf,
        #[source]
        source: ConfigErrors,
    },
    #[error("reading kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig found and not in a cluster: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the client: {0}")]
    Client(#[source] kube::Error),
    #[error("asking the management cluster which Cluster API it serves: {0}")]
    Discovery(#[source] crate::targets::kubernetes::Error),
    #[error("the management cluster did not answer within {}s", CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout,
    #[error("--preview {}: {message}", path.display())]
    Preview { path: PathBuf, message: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The management cluster's client for `o`, and the name of the context it uses.
///
/// # Errors
/// An unreadable kubeconfig, an unknown context, or a client that cannot be built.
pub async fn client(o: &Options, config: Option<&Config>) -> Result<(kube::Client, String), Error> {
    let target = config.and_then(|c| match &c.target {
        Target::Kubernetes(k) => Some(k),
        Target::Directory(_) => None,
    });
    let path = o.kubeconfig.clone().or_else(|| target.and_then(|k| k.kubeconfig.clone()));
    let context = o.context.clone().or_else(|| target.and_then(|k| k.context.clone()));
    let opts = kube::config::KubeConfigOptions { context: context.clone(), ..Default::default() };
    let (mut kc, name) = match &path {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig { path: path.clone(), source })?;
            let name = context.clone().or_else(|| file.current_context.clone()).unwrap_or_default();
            let kc = kube::Config::from_custom_kubeconfig(file, &opts)
                .await
                .map_err(|source| Error::Kubeconfig { path: path.clone(), source })?;
            (kc, name)
        }
        None if context.is_some() => {
            let kc = kube::Config::from_kubeconfig(&opts)
                .await
                .map_err(|source| Error::Kubeconfig { path: PathBuf::from("$KUBECONFIG"), source })?;
            (kc, context.clone().unwrap_or_default())
        }
        None => {
            let kc = kube::Config::infer().await.map_err(Error::Infer)?;
            let name = kube::config::Kubeconfig::read().ok().and_then(|f| f.current_context).unwrap_or_else(|| "in-cluster".into());
            (kc, name)
        }
    };
    // Every request has a deadline; a watch is a long request the server ends after about five
    // minutes, so the read deadline stays above that (kube's own default).
    kc.connect_timeout = Some(CONNECT_TIMEOUT);
    kc.read_timeout = Some(Duration::from_secs(295));
    kc.write_timeout = Some(CONNECT_TIMEOUT);
    // What the API server's audit log attributes the console's requests to.
    if !kc.headers.iter().any(|(name, _)| name == hyper::header::USER_AGENT) {
        kc.headers.push((hyper::header::USER_AGENT, hyper::header::HeaderValue::from_static(USER_AGENT)));
    }
    let client = kube::Client::try_from(kc).map_err(Error::Client)?;
    Ok((client, name))
}

/// Starts the watches, binds `o.listen`, calls `bound` with the console's URL, and serves until
/// the process is told to stop (Ctrl-C or SIGTERM).
///
/// # Errors
/// See [`Error`]: all of them before anything is served.
pub async fn run(o: Options, bound: impl FnOnce(&str)) -> Result<(), Error> {
    let running = start(o).await?;
    bound(&running.url);
    stopped().await;
    drop(running);
    Ok(())
}

/// How long the daemon's console waits before it tries to start again.
const RETRY: Duration = Duration::from_secs(30);

/// The console inside the daemon (`stacksync run --console-addr`): started with the daemon's own
/// credentials and config, on a loopback address only (reached with `kubectl port-forward`),
/// tried again every 30 s while the management cluster cannot be read or the port is taken,
/// then served for as long as the task runs. Its address is logged (`console listener`).
/// A console that cannot start never stops the daemon: it says why, at warning level.
pub async fn serve_in_daemon(listen: SocketAddr, config: PathBuf) {
    let o = Options { kubeconfig: None, context: None, listen, allow_remote: false, config: Some(config), preview: None };
    loop {
        match start(o.clone()).await {
            Ok(running) => {
                tracing::info!(addr = %running.addr, url = %running.url, "console listener (read-only)");
                // Serves until the daemon's runtime ends, which drops (and so stops) it.
                let _serving = running;
                return std::future::pending().await;
            }
            Err(e @ Error::NotLoopback { .. }) => {
                tracing::error!(error = %e, "console listener: not started");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?RETRY, "console listener: not started yet");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// A console being served; dropping it stops the listener and the watches.
pub struct Running {
    /// `http://host:port/`.
    pub url: String,
    pub addr: SocketAddr,
    served: tokio::task::JoinHandle<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.served.abort();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the watches and serves `o.listen` until the answer is dropped.
///
/// # Errors
/// See [`Error`]: all of them before anything is served.
pub async fn start(o: Options) -> Result<Running, Error> {
    if !o.listen.ip().is_loopback() && !o.allow_remote {
        return Err(Error::NotLoopback { addr: o.listen });
    }
    let config = match &o.config {
        Some(path) => Some(Arc::new(Config::load(path).map_err(|source| Error::Config { path: path.clone(), source })?)),
        None => None,
    };
    let preview = match &o.preview {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::Preview { path: path.clone(), message: e.to_string() })?;
            Some(pages::preview::parse(&text).map_err(|e| Error::Preview { path: path.clone(), message: e.to_string() })?)
        }
        None => None,
    };
    let (client, context) = client(&o, config.as_deref()).await?;
    let clusters = match tokio::time::timeout(CONNECT_TIMEOUT, crate::targets::kubernetes::cluster_resource(&client)).await {
        Err(_) => return Err(Error::ConnectTimeout),
        Ok(Ok(ar)) => Some(ar),
        Ok(Err(crate::targets::kubernetes::Error::ClusterApiMissing)) => None,
        Ok(Err(e)) => return Err(Error::Discovery(e)),
    };
    let listener = tokio::net::TcpListener::bind(o.listen).await.map_err(|source| Error::Bind { addr: o.listen, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: o.listen, source })?;
    let (stores, tasks) = watch::Stores::start(&client, clusters);
    let mut hosts: Vec<String> = ["127.0.0.1", "localhost", "[::1]"].map(str::to_owned).into();
    let listen_host = match addr {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    };
    hosts.push(listen_host.clone());
    let console = Arc::new(Console {
        stores,
        client,
        context,
        config,
        config_path: o.config.as_ref().map(|p| p.display().to_string()),
        preview,
        hosts,
    });
    let shown = if addr.ip().is_unspecified() { "127.0.0.1".to_owned() } else { listen_host };
    let served = tokio::spawn(server::serve(listener, console));
    Ok(Running { url: format!("http://{shown}:{}/", addr.port()), addr, served, tasks })
}

/// Ctrl-C or SIGTERM.
async fn stopped() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
