//! `testkit apiserver --kubeconfig-out FILE` and `testkit github --releases DIR --addr-out FILE`:
//! run one loopback server until interrupted, so a person or a script can poke it with kubectl
//! or curl.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use testkit::apiserver::{ApiServer, Options, write_kubeconfig};
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
