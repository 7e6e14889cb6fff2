//! `testkit apiserver --kubeconfig-out FILE`, `testkit kube --kubeconfig-out FILE` and
//! `testkit github --releases DIR --addr-out FILE`: run one loopback server (or a real control
//! plane) until interrupted, so a person or a script can poke it with kubectl or curl.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use fake_apiserver::{ApiServer, Options, write_kubeconfig};
use testkit::github::GithubServer;

#[derive(Parser)]
#[command(name = "testkit", about = "stacksync's test infrastructure")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a loopback Kubernetes API server on 127.0.0.1 and a free port until interrupted.
    Apiserver {
        /// Where to write a kubeconfig pointing at the server.
        #[arg(long)]
        kubeconfig_out: PathBuf,
        /// Apply every YAML file of this directory at start (repeatable), e.g. testdata/crds.
        #[arg(long)]
        preload: Vec<PathBuf>,
    },
    /// Run a real Kubernetes control plane on 127.0.0.1 (etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler, kwok with fake Nodes) until SIGINT or SIGTERM.
    /// The kubeconfig (admin client certificate) is written once /readyz answers ok, the Nodes
    /// are Ready and the preloaded files are applied. Build the binaries first with
    /// scripts/build-realkube.sh.
    Kube {
        /// Where to write the admin kubeconfig.
        #[arg(long)]
        kubeconfig_out: PathBuf,
        /// Apply every YAML file of this directory (or this file) at start, CRDs first
        /// (repeatable), e.g. testdata/crds and deploy/crds.
        #[arg(long)]
        preload: Vec<PathBuf>,
        /// How many kwok Nodes to create.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Also run the real Cluster API (its core manager with the ClusterTopology and
        /// RuntimeSDK feature gates, CRDs and webhooks, and testkit's infrastructure and
        /// control-plane providers) and a second control plane its Clusters' kubeconfig Secrets
        /// point at. Build it first with scripts/build-cluster-api.sh.
        #[arg(long)]
        cluster_api: bool,
        /// With --cluster-api: where to write the workload control plane's kubeconfig.
        #[arg(long, requires = "cluster_api")]
        workload_kubeconfig_out: Option<PathBuf>,
    },
    /// Serve a GitHub-compatible releases API on 127.0.0.1 and a free port until interrupted,
    /// from `DIR/<owner>/<repo>/<tag>/<asset files>` (a `release.yaml` beside the assets may set
    /// `prerelease`, `draft`, `digests: false`).
    Github {
        #[arg(long, value_name = "DIR")]
        releases: PathBuf,
        /// Where to write the API URL (`http://127.0.0.1:<port>/`).
        #[arg(long, value_name = "FILE")]
        addr_out: PathBuf,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Apiserver { kubeconfig_out, preload } => {
            let server = ApiServer::start_with(Options { preload, ..Options::default() }).await.context("starting the API server")?;
            write_kubeconfig(&kubeconfig_out, server.url()).with_context(|| format!("writing {}", kubeconfig_out.display()))?;
            println!("serving {} (kubeconfig: {}); stats at {}/_testkit/stats", server.url(), kubeconfig_out.display(), server.url());
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
            server.stop().await;
        }
        Command::Kube { kubeconfig_out, preload, nodes, cluster_api: true, workload_kubeconfig_out } => {
            let api = testkit::capi::ClusterApi::start(testkit::capi::Options { preload, workload_nodes: nodes })
                .await
                .context("starting Cluster API on a real control plane")?;
            api.mgmt().write_kubeconfig(&kubeconfig_out).with_context(|| format!("writing {}", kubeconfig_out.display()))?;
            if let Some(out) = &workload_kubeconfig_out {
                api.workload().write_kubeconfig(out).with_context(|| format!("writing {}", out.display()))?;
            }
            println!(
                "serving Cluster API {} at {} (kubeconfig: {}; logs in {}), workload clusters at {} (logs in {}); ready in {:.1}s",
                testkit::capi::version(),
                api.mgmt().url(),
                kubeconfig_out.display(),
                api.mgmt().dir().display(),
                api.workload().url(),
                api.workload().dir().display(),
                api.started_in().as_secs_f64(),
            );
            wait_for_stop_or_exit(Running::ClusterApi(Box::new(api))).await?;
        }
        Command::Kube { kubeconfig_out, preload, nodes, .. } => {
            let kube = testkit::kube::Kube::start(testkit::kube::Options { preload, nodes, ..Default::default() })
                .await
                .context("starting the control plane")?;
            kube.write_kubeconfig(&kubeconfig_out).with_context(|| format!("writing {}", kubeconfig_out.display()))?;
            let rss: u64 = kube.rss().iter().map(|(_, bytes)| bytes).sum();
            println!(
                "serving {} (kubeconfig: {}; logs in {}); ready in {:.1}s, {} MiB resident",
                kube.url(),
                kubeconfig_out.display(),
                kube.dir().display(),
                kube.started_in().as_secs_f64(),
                rss / (1024 * 1024)
            );
            wait_for_stop_or_exit(Running::Kube(kube)).await?;
        }
        Command::Github { releases, addr_out } => {
            let server = GithubServer::serve_dir(&releases).await.with_context(|| format!("serving {}", releases.display()))?;
            std::fs::write(&addr_out, server.api_url()).with_context(|| format!("writing {}", addr_out.display()))?;
            println!(
                "serving GitHub releases of {} at {}; stats at {}_testkit/stats",
                releases.display(),
                server.api_url(),
                server.api_url()
            );
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
            server.stop().await;
        }
    }
    Ok(())
}

/// What `testkit kube` runs.
enum Running {
    Kube(testkit::kube::Kube),
    ClusterApi(Box<testkit::capi::ClusterApi>),
}

impl Running {
    fn exited_component(&mut self) -> Option<(&'static str, String, PathBuf)> {
        match self {
            Running::Kube(k) => k.exited_component().map(|(c, s)| (c, s, k.dir().join(format!("{c}.log")))),
            Running::ClusterApi(a) => {
                let dir = a.mgmt().dir().to_path_buf();
                a.exited_component().map(|(c, s)| (c, s, dir.join(format!("{c}.log"))))
            }
        }
    }

    fn stop(self) {
        match self {
            Running::Kube(k) => k.stop(),
            Running::ClusterApi(a) => a.stop(),
        }
    }
}

/// Waits for SIGINT or SIGTERM (then stops every component) or for a component to exit (then
/// stops the others and fails, naming it).
async fn wait_for_stop_or_exit(mut running: Running) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                if let Some((component, status, log)) = running.exited_component() {
                    running.stop();
                    anyhow::bail!("{component} exited ({status}); see {}", log.display());
                }
            }
        }
    }
    running.stop();
    Ok(())
}
