//! The `stacksync` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stacksync::config::{Config, Target};
use stacksync::controller::{Context as Ctx, output};
use stacksync::runtime::{admin, daemon, hooks, logging};
use stacksync::targets::{directory, kubernetes};

/// `--version`: the crate version, the commit and the build date (build.rs), and the helm version
/// charts are rendered as (the library renderer's).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STACKSYNC_COMMIT"),
    ", built ",
    env!("STACKSYNC_BUILD_DATE"),
    "; renders charts as helm ",
    stacksync::helm_version!(),
    ")"
);

/// How long blocking work still running after the daemon stopped (a Git fetch) may delay the exit.
const SHUTDOWN_LEFTOVERS: std::time::Duration = std::time::Duration::from_secs(2);
/// Exit code for an invalid config file.
const EXIT_CONFIG: u8 = 2;
/// Exit code when something is not synced (or a runtime failure).
const EXIT_NOT_SYNCED: u8 = 1;

#[derive(Subcommand)]
enum RolloutAction {
    /// Stop the running rollout at the next wave boundary (the running wave finishes).
    Pause {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The subscription's name.
        subscription: String,
    },
    /// Go on with a paused rollout: the current wave is started again, with a new waveTimeout.
    Resume {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The subscription's name.
        subscription: String,
    },
    /// Show the rollout to the newest release the subscription offers: each wave's Clusters,
    /// each Cluster's path (one Kubernetes minor at a time, with the versions), its maintenance
    /// windows now, and who is left out. Before it starts, what it would do now; once it runs,
    /// as its status records it. Reads only.
    Plan {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The subscription's name.
        subscription: String,
        /// `text` (default) or `json`.
        #[arg(short = 'o', long, value_name = "FORMAT", default_value = "text")]
        output: String,
    },
}

#[derive(Subcommand)]
enum AdoptFrom {
    /// From the SovereignCloudStack cluster-stack-operator (docs/migration.md): a report of
    /// every object (identical, changes, restarts, missing, leftover) and of what blocks the move;
    /// then the hook handed over (CSO scaled to 0, its ExtensionConfig and webhooks deleted),
    /// every object taken over from field manager `kubectl` with no value changed, and each
    /// Cluster's ClusterSync seeded. Exit 0: adoptable with no pod restarted (and, without
    /// --dry-run, adopted); 1: blocked or a restart; 2: an error.
    Cso {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Report only; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Report on this Cluster only, as `<namespace>/<name>` (and the ClusterClasses of its
        /// namespace). Only with --dry-run: the hook hand-over concerns every Cluster CSO manages,
        /// so an adoption takes them all.
        #[arg(long, value_name = "NAMESPACE/NAME", requires = "dry_run")]
        cluster: Option<String>,
        /// After an adoption: remove CSO's finalizers, ClusterAddons, ClusterStackReleases,
        /// ClusterStacks, CRDs and Deployment, in that order.
        #[arg(long, conflicts_with = "dry_run")]
        cleanup: bool,
        /// Objects CSO applied that the release no longer renders get stacksync's owner label and
        /// the ClusterSync's inventory: the first sync prunes them (within `pruneLimit`).
        #[arg(long)]
        prune_leftovers: bool,
        /// CSO's Deployment.
        #[arg(long, value_name = "NAMESPACE/NAME", default_value = "cso-system/cso-controller-manager")]
        cso_deployment: String,
        /// CSO's ExtensionConfig.
        #[arg(long, value_name = "NAME", default_value = "cso-hook-server-extensionconfig")]
        cso_extension_config: String,
        /// CSO's ValidatingWebhookConfiguration.
        #[arg(long, value_name = "NAME", default_value = "cso-validating-webhook-configuration")]
        cso_webhook: String,
        /// Output: `text` (a line per object) or `json` (the whole report, with `adoptable`).
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: AdoptOutput,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum AdoptOutput {
    Text,
    Json,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PreviewOutput {
    Text,
    Json,
    Markdown,
}

#[derive(Parser)]
#[command(name = "stacksync", version = VERSION, about = "Keeps Cluster API clusters on the cluster-stack releases they subscribe to")]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the synchroniser: poll on schedule, apply, reload the config when it changes.
    // --lease-namespace with either Lease: a shard's (--leader-elect) or the rollout
    // coordinator's (--shard).
    #[command(group(clap::ArgGroup::new("elects").args(["leader_elect", "shard"]).multiple(true)))]
    Run {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// One full pass, then exit: 0 when every object of every cluster is synced.
        #[arg(long)]
        once: bool,
        /// Clusters reconciled at once (Kubernetes target).
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
        concurrency: u16,
        /// Where `/healthz`, `/readyz`, `/metrics` and the push webhooks listen (`[host]:port`);
        /// `0` turns the listener off. The bound address is logged (`admin listener`).
        #[arg(long, value_name = "ADDR", default_value = ":8080")]
        admin_addr: String,
        /// Where the Cluster API Runtime SDK hooks listen, over HTTPS (`[host]:port`, e.g.
        /// `:9443`); off unless set. Needs --hooks-cert-file and --hooks-key-file. The bound
        /// address is logged (`hooks listener`).
        #[arg(long, value_name = "ADDR", default_value = "", requires_all = ["hooks_cert_file", "hooks_key_file"])]
        hooks_addr: String,
        /// The hooks listener's certificate chain (PEM, cert-manager's `tls.crt`); read again
        /// when it changes.
        #[arg(long, value_name = "FILE")]
        hooks_cert_file: Option<PathBuf>,
        /// The hooks listener's private key (PEM, cert-manager's `tls.key`).
        #[arg(long, value_name = "FILE")]
        hooks_key_file: Option<PathBuf>,
        /// Leader election on a coordination.k8s.io Lease (Kubernetes target): only the holder
        /// writes; other replicas stand by with warm caches.
        #[arg(long)]
        leader_elect: bool,
        /// The Leases' namespace (default: the management client's, in a pod its own).
        #[arg(long, value_name = "NAMESPACE", requires = "elects")]
        lease_namespace: Option<String>,
        /// How long the Lease holds without renewal: a dead leader is replaced within this.
        #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_lease_duration)]
        lease_duration: std::time::Duration,
        /// Reconcile only Clusters labelled `stacksync.io/shard=<NAME>` (with --leader-elect,
        /// one Lease per shard: `stacksync-<NAME>`). Every shard's replicas also compete for
        /// the Lease `stacksync-rollout`, with or without --leader-elect: its holder drives the
        /// fleet's rollouts.
        #[arg(long, value_name = "NAME", value_parser = parse_shard)]
        shard: Option<String>,
        /// Also serve the read-only console (docs/console.md) on this loopback address
        /// (`127.0.0.1:PORT`; port 0: any), for `kubectl port-forward`; off unless set
        /// (Kubernetes target). It reads with the daemon's credentials and never shows a
        /// Secret; the bound address is logged (`console listener`). docs/operations.md says
        /// who can reach it.
        #[arg(long, value_name = "ADDR", value_parser = parse_loopback)]
        console_addr: Option<std::net::SocketAddr>,
    },
    /// Ask the running controller to reconcile a Cluster now (Kubernetes target): sets
    /// `stacksync.io/reconcile-requested-at` on its ClusterSync.
    Reconcile {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The Cluster, as `<namespace>/<name>`.
        #[arg(value_name = "NAMESPACE/NAME")]
        cluster: String,
    },
    /// Rotate the values a Cluster's charts generate (certificates, keys, passwords; Kubernetes
    /// target): sets `stacksync.io/rotate-generated-at` on its ClusterSync; the running
    /// controller renders them anew and applies them once (docs/clusterstacks.md).
    Rotate {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The Cluster, as `<namespace>/<name>`.
        #[arg(value_name = "NAMESPACE/NAME")]
        cluster: String,
    },
    /// Pause or resume a subscription's fleet rollout (`rollout:`, Kubernetes target): sets
    /// `stacksync.io/rollout-pause` / `stacksync.io/rollout-resume` on the StackRelease of the
    /// release it rolls out.
    Rollout {
        #[command(subcommand)]
        action: RolloutAction,
    },
    /// Move a management cluster to stacksync from another tool without restarting anything.
    Adopt {
        #[command(subcommand)]
        from: AdoptFrom,
    },
    /// Show what the next sync would change, without changing anything: per Cluster (Kubernetes
    /// target: server-side dry-runs) or per file (directory target), as unified diffs. Exit 0:
    /// nothing would change; 1: something would; 2: an error (as `flux diff`).
    Diff {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Only this Cluster, as `<namespace>/<name>` (Kubernetes target).
        #[arg(long, value_name = "NAMESPACE/NAME")]
        cluster: Option<String>,
    },
    /// Preview a release that is not (yet) offered against every Cluster its subscription would
    /// give it to (Kubernetes target): objects created, changed (which fields), pruned, which
    /// workloads restart, upgrade stages, Kubernetes moves, Clusters that cannot be judged, and
    /// the rollout's waves. Reads and dry-runs only. Exit 0: nothing would change; 1: something
    /// would; 2: an error, or a Cluster that could not be judged.
    Preview {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// A release directory (as `csctl` writes it), a `.tgz` of one, an OCI image layout, or
        /// `SOURCE:TAG` of a configured source (fetched and verified as usual).
        #[arg(long, value_name = "PATH|SOURCE:TAG")]
        release: String,
        /// The subscription to preview it for (needed when several could take it).
        #[arg(long, value_name = "NAME")]
        subscription: Option<String>,
        /// Only this Cluster, as `<namespace>/<name>`.
        #[arg(long, value_name = "NAMESPACE/NAME")]
        cluster: Option<String>,
        /// A local manifests release's tag (it has no `metadata.yaml`), or the image of an OCI
        /// layout holding several.
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        /// Output: `text`, `json` (stable, docs/preview.md) or `markdown` (a pull-request comment).
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: PreviewOutput,
        /// Each change's unified diff too (text and json).
        #[arg(long)]
        diff: bool,
        /// Markdown output: changed objects shown per kind.
        #[arg(long, value_name = "N", default_value_t = 5)]
        max_objects: usize,
        /// Clusters previewed at once.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
        concurrency: u16,
    },
    /// Open a read-only web console of the management cluster: the fleet, its rollouts, each
    /// Cluster, the releases, preview reports; live. Reads with your own credentials (your RBAC
    /// decides what it shows), writes nothing, listens on loopback and prints its URL
    /// (docs/console.md).
    Console {
        /// The management cluster's kubeconfig (default: the config's, else $KUBECONFIG or
        /// ~/.kube/config).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// The kubeconfig context (default: the config's, else the current context).
        #[arg(long, value_name = "NAME")]
        context: Option<String>,
        /// Where the console listens: a loopback address unless --allow-remote (port 0: any
        /// free port).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7654")]
        listen: std::net::SocketAddr,
        /// Listen on an address that is not loopback: whoever reaches it sees what your
        /// credentials can read.
        #[arg(long)]
        allow_remote: bool,
        /// A stacksync config: rollout budgets (maxFailures) and maintenance windows now, the
        /// exact pause/resume command; its kubeconfig when --kubeconfig is not given.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// A `stacksync preview -o json` report to show on the Preview page.
        #[arg(long, value_name = "FILE")]
        preview: Option<PathBuf>,
    },
    /// Validate a config file and print every error found.
    CheckConfig {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Fetch, verify and cache every subscribed release; apply nothing.
    Fetch {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print the CustomResourceDefinitions of the status resources (ClusterSync, StackRelease).
    Crds,
    /// Render every subscription for its clusters into a directory; touch no target.
    Render {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Render only what this cluster would get, offline (the release comes from the cache):
        /// a Cluster object, optionally followed by its control plane and infrastructure
        /// cluster objects (multi-document YAML).
        #[arg(long, value_name = "FILE")]
        cluster: Option<PathBuf>,
    },
}

/// mimalloc, not the platform's malloc: allocation was a quarter of the process's CPU at fleet
/// scale (docs/performance.md "The whole process").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let args: Vec<String> = std::env::args().collect();
            if e.use_stderr() && logging::json_requested(&args) {
                logging::init(logging::LogFormat::Json);
                logging::error_line(e.render().to_string().trim_end());
                return ExitCode::from(EXIT_CONFIG);
            }
            e.exit()
        }
    };
    logging::init(cli.log_format);
    match real_main(cli.command) {
        Ok(code) => code,
        Err(e) => {
            logging::error_line(&format!("error: {e:#}"));
            ExitCode::from(EXIT_NOT_SYNCED)
        }
    }
}

fn real_main(command: Command) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    match command {
        Command::Crds => {
            print!("{}", stacksync::status::crd::crds_yaml().map_err(|e| anyhow::anyhow!("{e}"))?);
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig { file } => Ok(check_config(&file)),
        Command::Run {
            config,
            once,
            concurrency,
            admin_addr,
            hooks_addr,
            hooks_cert_file,
            hooks_key_file,
            leader_elect,
            lease_namespace,
            lease_duration,
            shard,
            console_addr,
        } => {
            let hooks_files = hooks_cert_file.zip(hooks_key_file);
            let election = daemon::ElectionOptions { namespace: lease_namespace, duration: lease_duration };
            let args = RunArgs { once, concurrency, admin_addr, hooks_addr, hooks_files, leader_elect, election, shard, console_addr };
            run(runtime, config, args)
        }
        Command::Reconcile { config, cluster } => request(&runtime, &config, &cluster, Request::Reconcile),
        Command::Rotate { config, cluster } => request(&runtime, &config, &cluster, Request::Rotation),
        Command::Rollout { action } => rollout(&runtime, action),
        Command::Adopt { from } => adopt_command(&runtime, from),
        Command::Diff { config, cluster } => diff_command(&runtime, &config, cluster.as_deref()),
        Command::Preview { config, release, subscription, cluster, tag, output, diff, max_objects, concurrency } => {
            let args = PreviewArgs { release, subscription, cluster, tag, concurrency: usize::from(concurrency), diffs: diff };
            preview_command(&runtime, &config, args, output, max_objects)
        }
        Command::Fetch { config } => fetch(&runtime, &config),
        Command::Render { config, out, cluster } => render(&runtime, &config, &out, cluster.as_deref()),
        Command::Console { kubeconfig, context, listen, allow_remote, config, preview } => {
            let options = stacksync::console::Options { kubeconfig, context, listen, allow_remote, config, preview };
            runtime
                .block_on(stacksync::console::run(options, |url| {
                    use std::io::Write as _;
                    println!("stacksync console: {url} (read-only; Ctrl-C to stop)");
                    let _ = std::io::stdout().flush();
                }))
                .context("stacksync console")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What `run` was asked, besides its config file.
struct RunArgs {
    once: bool,
    concurrency: u16,
    admin_addr: String,
    hooks_addr: String,
    /// `--hooks-cert-file` and `--hooks-key-file`.
    hooks_files: Option<(PathBuf, PathBuf)>,
    leader_elect: bool,
    /// `--lease-namespace`, `--lease-duration`.
    election: daemon::ElectionOptions,
    shard: Option<String>,
    console_addr: Option<std::net::SocketAddr>,
}

/// `run`: the daemon, or with `--once` one pass.
fn run(runtime: tokio::runtime::Runtime, config: PathBuf, args: RunArgs) -> anyhow::Result<ExitCode> {
    let cfg = match load(&config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if let Err(code) = check_helm(&runtime, &cfg) {
        return Ok(code);
    }
    if args.once {
        return run_once(&runtime, cfg, args.concurrency);
    }
    let mut options = daemon::Options::new(args.concurrency);
    // Shards elect one rollout coordinator among them even without --leader-elect:
    // two shards driving the same rollout would each move Clusters.
    options.coordinator = args.shard.is_some().then(|| args.election.clone());
    options.election = args.leader_elect.then_some(args.election);
    options.shard = args.shard;
    start_admin(&runtime, &cfg, &args.admin_addr, &mut options)?;
    let hooks_files = args.hooks_files.as_ref().map(|(cert, key)| (cert.as_path(), key.as_path()));
    start_hooks(&runtime, &cfg, &args.hooks_addr, hooks_files, &mut options)?;
    if let Some(addr) = args.console_addr {
        if matches!(cfg.target, Target::Directory(_)) {
            anyhow::bail!("--console-addr: the console shows a management cluster; the config's target is a directory");
        }
        runtime.spawn(stacksync::console::serve_in_daemon(addr, config.clone()));
    }
    let result = runtime.block_on(daemon::run(config, cfg, options, shutdown_signal()));
    // A blocking fetch stuck on a silent server must not hold the exit: everything the
    // daemon writes is atomic, so abandoning it leaves a consistent cache.
    runtime.shutdown_timeout(SHUTDOWN_LEFTOVERS);
    result.context("watching the config file")?;
    Ok(ExitCode::SUCCESS)
}

/// `adopt cso`.
fn adopt_command(runtime: &tokio::runtime::Runtime, from: AdoptFrom) -> anyhow::Result<ExitCode> {
    let AdoptFrom::Cso { config, dry_run, cluster, cleanup, prune_leftovers, cso_deployment, cso_extension_config, cso_webhook, output } =
        from;
    let cfg = match load(&config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if check_helm(runtime, &cfg).is_err() {
        return Ok(ExitCode::from(EXIT_DIFF_ERROR));
    }
    let parsed = (|| {
        Ok::<_, anyhow::Error>(kubernetes::commands::adopt::Options {
            dry_run,
            cluster: cluster.as_deref().map(cluster_key).transpose()?,
            cleanup,
            prune_leftovers,
            deployment: cluster_key(&cso_deployment)?,
            extension_config: cso_extension_config,
            webhook: cso_webhook,
        })
    })();
    let options = match parsed {
        Ok(o) => o,
        Err(e) => {
            logging::error_line(&format!("error: {e:#}"));
            return Ok(ExitCode::from(EXIT_DIFF_ERROR));
        }
    };
    let progress = show_progress(matches!(output, AdoptOutput::Json));
    let adopted = runtime.block_on(adopt(cfg, &options));
    progress.finish();
    Ok(match adopted {
        Ok(report) => {
            match output {
                AdoptOutput::Text => print!("{}", report.text()),
                AdoptOutput::Json => println!("{}", serde_json::to_string_pretty(&report.json()).context("printing the report")?),
            }
            let ok = if options.cleanup { report.blockers.is_empty() } else { report.adoptable() };
            if ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_DIFF_CHANGES) }
        }
        Err(e) => {
            logging::error_line(&format!("error: {e:#}"));
            ExitCode::from(EXIT_DIFF_ERROR)
        }
    })
}

/// The progress line of a fleet command (items done of total, rate, time left), shown only when
/// both standard output and standard error are terminals and the output is not `-o json`
/// (`runtime::progress`). The caller finishes it before printing its output; an early return
/// (an error) finishes it when the guard drops.
fn show_progress(machine_readable: bool) -> ProgressShown {
    let reporter = stacksync::runtime::progress::for_command(machine_readable);
    stacksync::model::progress::install(reporter.clone());
    ProgressShown(reporter)
}

struct ProgressShown(stacksync::model::progress::Reporter);

impl ProgressShown {
    fn finish(&self) {
        self.0.finish();
    }
}

impl Drop for ProgressShown {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// `<namespace>/<name>` (a Cluster, a Deployment).
fn cluster_key(text: &str) -> anyhow::Result<stacksync::model::ClusterKey> {
    text.split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .map(|(ns, name)| stacksync::model::ClusterKey::new(ns, name))
        .ok_or_else(|| anyhow::anyhow!("expected <namespace>/<name>, found `{text}`"))
}

/// `diff`: exit 0 when nothing would change, 1 when something would, 2 on an error.
fn diff_command(runtime: &tokio::runtime::Runtime, config: &Path, cluster: Option<&str>) -> anyhow::Result<ExitCode> {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if check_helm(runtime, &cfg).is_err() {
        return Ok(ExitCode::from(EXIT_DIFF_ERROR));
    }
    Ok(match runtime.block_on(diff(cfg, cluster)) {
        Ok(true) => ExitCode::from(EXIT_DIFF_CHANGES),
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => {
            logging::error_line(&format!("error: {e:#}"));
            ExitCode::from(EXIT_DIFF_ERROR)
        }
    })
}

/// `preview`: the report in the output asked for; exit 0 when nothing would change, 1 when
/// something would, 2 on an error or a Cluster that could not be judged.
fn preview_command(
    runtime: &tokio::runtime::Runtime,
    config: &Path,
    args: PreviewArgs,
    output: PreviewOutput,
    max_objects: usize,
) -> anyhow::Result<ExitCode> {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if check_helm(runtime, &cfg).is_err() {
        return Ok(ExitCode::from(EXIT_DIFF_ERROR));
    }
    let diffs = args.diffs;
    let progress = show_progress(matches!(output, PreviewOutput::Json));
    let previewed = runtime.block_on(preview(cfg, args));
    progress.finish();
    Ok(match previewed {
        Ok(p) => {
            match output {
                PreviewOutput::Text => print!("{}", kubernetes::commands::preview::text(&p, diffs)),
                PreviewOutput::Markdown => print!("{}", kubernetes::commands::preview::markdown(&p, max_objects)),
                PreviewOutput::Json => println!("{}", serde_json::to_string_pretty(&p).context("printing the preview")?),
            }
            if p.unjudged() {
                ExitCode::from(EXIT_DIFF_ERROR)
            } else if p.changes() {
                ExitCode::from(EXIT_DIFF_CHANGES)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            logging::error_line(&format!("error: {e:#}"));
            ExitCode::from(EXIT_DIFF_ERROR)
        }
    })
}

/// `fetch`: every subscribed release fetched, verified and cached; its table.
fn fetch(runtime: &tokio::runtime::Runtime, config: &Path) -> anyhow::Result<ExitCode> {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if let Err(code) = check_helm(runtime, &cfg) {
        return Ok(code);
    }
    let progress = show_progress(false);
    let report = runtime.block_on(directory::pass(&cfg, None, false));
    progress.finish();
    let report = report?;
    print!("{}", output::fetch_table(&report));
    let ok = report.prepared.iter().all(|p| p.outcome.is_ok());
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_SYNCED) })
}

/// `check-config`: the config's summary, or its errors (exit 2).
fn check_config(file: &Path) -> ExitCode {
    match load(file) {
        Ok(config) => {
            println!(
                "{}: ok ({} sources, {} subscriptions, {} clusters)",
                file.display(),
                config.sources.len(),
                config.subscriptions.len(),
                config.subscriptions.iter().map(|s| s.clusters.len()).sum::<usize>()
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `run --once`: one pass, then the exit code of what it found.
fn run_once(runtime: &tokio::runtime::Runtime, cfg: Config, concurrency: u16) -> anyhow::Result<ExitCode> {
    let report = match &cfg.target {
        Target::Kubernetes(_) => {
            let ctx = Ctx::new(cfg).context("opening the cache")?;
            // On a runtime worker, as the daemon runs its controller: polled from `block_on`'s
            // thread, every answer would wake another thread.
            let pass = runtime.spawn(kubernetes::pass(ctx, usize::from(concurrency)));
            runtime.block_on(pass).context("the pass")?
        }
        Target::Directory(_) => runtime.block_on(directory::pass(&cfg, None, true))?,
    };
    print!("{}", output::verdict(&report));
    Ok(if report.all_synced() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_SYNCED) })
}

/// The admin listener (`--admin-addr`), bound now so a taken port is a start-up error.
fn start_admin(runtime: &tokio::runtime::Runtime, cfg: &Config, addr: &str, options: &mut daemon::Options) -> anyhow::Result<()> {
    let Some(addr) = admin::parse_addr(addr)? else { return Ok(()) };
    let listener = runtime.block_on(admin::bind(addr))?;
    let bound = listener.local_addr().context("reading the admin listener's address")?;
    tracing::info!(addr = %bound, "admin listener");
    let (state, triggers) = admin::Admin::new(cfg.clone());
    runtime.spawn(admin::serve(listener, state.clone()));
    options.admin = Some(state);
    options.triggers = triggers;
    Ok(())
}

/// The Runtime SDK listener (`--hooks-addr`) with its serving certificate.
fn start_hooks(
    runtime: &tokio::runtime::Runtime,
    cfg: &Config,
    addr: &str,
    pair: Option<(&Path, &Path)>,
    options: &mut daemon::Options,
) -> anyhow::Result<()> {
    let Some(addr) = hooks::parse_addr(addr)? else { return Ok(()) };
    let Some((cert, key)) = pair else { return Err(hooks::Error::MissingCert.into()) };
    if matches!(cfg.target, Target::Directory(_)) {
        return Err(hooks::Error::DirectoryTarget.into());
    }
    let certs = hooks::Certificates::load(cert, key)?;
    let acceptor = hooks::acceptor(&certs)?;
    let listener = runtime.block_on(hooks::bind(addr))?;
    let bound = listener.local_addr().context("reading the hooks listener's address")?;
    tracing::info!(addr = %bound, "hooks listener");
    let state = kubernetes::hook::Hooks::new(cfg.clone());
    runtime.spawn(hooks::serve(listener, acceptor, certs, state.clone()));
    options.hooks = Some(state);
    Ok(())
}

/// What `reconcile` and `rotate` ask of the running controller.
#[derive(Clone, Copy)]
enum Request {
    Reconcile,
    Rotation,
}

/// `reconcile <namespace>/<name>`, `rotate <namespace>/<name>`.
fn request(runtime: &tokio::runtime::Runtime, config: &Path, cluster: &str, what: Request) -> anyhow::Result<ExitCode> {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let Some((namespace, name)) = cluster.split_once('/') else {
        logging::error_line(&format!("error: expected <namespace>/<name>, found `{cluster}`"));
        return Ok(ExitCode::from(EXIT_CONFIG));
    };
    let key = stacksync::model::ClusterKey::new(namespace, name);
    let ctx = Ctx::new(cfg).context("opening the cache")?;
    let (at, asked) = match what {
        Request::Reconcile => (runtime.block_on(kubernetes::request_reconcile(ctx, &key))?, "reconcile"),
        Request::Rotation => (runtime.block_on(kubernetes::request_rotation(ctx, &key))?, "rotation of the generated values"),
    };
    println!("{asked} of {key} requested at {at}");
    Ok(ExitCode::SUCCESS)
}

/// `rollout pause|resume`.
fn rollout(runtime: &tokio::runtime::Runtime, action: RolloutAction) -> anyhow::Result<ExitCode> {
    let (config, subscription, resume) = match action {
        RolloutAction::Pause { config, subscription } => (config, subscription, false),
        RolloutAction::Resume { config, subscription } => (config, subscription, true),
        RolloutAction::Plan { config, subscription, output } => return rollout_plan(runtime, &config, &subscription, &output),
    };
    let ctx = match rollout_context(&config, &subscription)? {
        Ok(ctx) => ctx,
        Err(code) => return Ok(code),
    };
    let release = runtime.block_on(kubernetes::request_rollout(ctx, &subscription, resume))?;
    if resume {
        println!("rollout of {subscription} (StackRelease {release}): resume requested");
    } else {
        println!("rollout of {subscription} (StackRelease {release}): pause requested; it stops at the next wave boundary");
    }
    Ok(ExitCode::SUCCESS)
}

/// The context of a `rollout` command: the config loaded, and `subscription` one of its
/// subscriptions with `rollout:` (else the exit code, the error said).
fn rollout_context(config: &Path, subscription: &str) -> anyhow::Result<Result<std::sync::Arc<Ctx>, ExitCode>> {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return Ok(Err(code)),
    };
    if !cfg.subscriptions.iter().any(|s| s.name == subscription && s.rollout.is_some()) {
        logging::error_line(&format!("error: {} has no subscription `{subscription}` with `rollout:`", config.display()));
        return Ok(Err(ExitCode::from(EXIT_CONFIG)));
    }
    Ok(Ok(Ctx::new(cfg).context("opening the cache")?))
}

/// `rollout plan`.
fn rollout_plan(runtime: &tokio::runtime::Runtime, config: &Path, subscription: &str, output: &str) -> anyhow::Result<ExitCode> {
    if !["text", "json"].contains(&output) {
        logging::error_line(&format!("error: -o {output}: expected `text` or `json`"));
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    let ctx = match rollout_context(config, subscription)? {
        Ok(ctx) => ctx,
        Err(code) => return Ok(code),
    };
    let progress = show_progress(output == "json");
    let report = runtime.block_on(kubernetes::rollout_plan(ctx, subscription))?;
    progress.finish();
    if output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}

/// `render`: every configured cluster, the Clusters a selector finds, or one `--cluster` file.
fn render(runtime: &tokio::runtime::Runtime, config: &Path, out: &Path, cluster: Option<&Path>) -> anyhow::Result<ExitCode> {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if let Err(code) = check_helm(runtime, &cfg) {
        return Ok(code);
    }
    let selects = cfg.subscriptions.iter().any(|s| s.selector.is_some());
    let progress = show_progress(false);
    let report = match cluster {
        // Clusters chosen by clusterSelector live in the management cluster: render them the
        // way a reconcile would.
        None if selects && matches!(cfg.target, Target::Kubernetes(_)) => {
            let ctx = Ctx::new(cfg).context("opening the cache")?;
            runtime.block_on(kubernetes::render(ctx, out)).map_err(|e| {
                anyhow::anyhow!("{e}\nrender needs the management cluster to find the Clusters chosen by clusterSelector; render one Cluster offline with --cluster FILE, or list the clusters in the config")
            })?
        }
        None => runtime.block_on(directory::render_to(&cfg, out))?,
        Some(file) => {
            let one = directory::clusterstack::read_cluster_file(file)?;
            runtime.block_on(directory::clusterstack::render_cluster(&cfg, one, out))?
        }
    };
    progress.finish();
    print!("{}", output::rendered(&report, out));
    Ok(if report.all_synced() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_SYNCED) })
}

fn parse_lease_duration(text: &str) -> Result<std::time::Duration, String> {
    let d = stacksync::model::schedule::parse_duration(text).map_err(|e| e.to_string())?;
    if d < std::time::Duration::from_secs(2) || d > std::time::Duration::from_secs(300) {
        return Err(format!("{text}: expected a duration from 2s to 5m"));
    }
    Ok(d)
}

/// A shard name is a label value: at most 63 characters of `[a-z0-9-]`, alphanumeric at both ends.
/// `--console-addr`: a loopback address only — in a pod, reached through `kubectl
/// port-forward`, never from the pod network.
fn parse_loopback(text: &str) -> Result<std::net::SocketAddr, String> {
    let addr: std::net::SocketAddr = text.parse().map_err(|e| format!("{text:?}: {e} (want 127.0.0.1:PORT)"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{addr} is not a loopback address: the console listens on 127.0.0.1 or [::1], reached with kubectl port-forward"
        ));
    }
    Ok(addr)
}

fn parse_shard(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 63
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if !ok {
        return Err(format!("`{text}`: expected a DNS label (a-z, 0-9, `-`; at most 63)"));
    }
    if !stacksync::runtime::election::Params::shard_allowed(text) {
        let lease = stacksync::runtime::election::ROLLOUT_LEASE;
        return Err(format!("`{text}`: reserved (its Lease would be `{lease}`, the rollout coordinator's)"));
    }
    Ok(text.to_owned())
}

/// When a subscription renders cluster stacks, finds helm and logs its version; a missing helm
/// is a start-up error then (exit code 1), not a surprise at the first render.
fn check_helm(runtime: &tokio::runtime::Runtime, config: &Config) -> Result<(), ExitCode> {
    if !config.subscriptions.iter().any(|s| s.format == stacksync::config::Format::ClusterStack) {
        return Ok(());
    }
    match runtime.block_on(stacksync::render::helm::Helm::locate(&config.helm)) {
        Ok(helm) => {
            tracing::info!(path = %helm.path().display(), version = helm.version(), renderer = helm.kind(), "helm found");
            Ok(())
        }
        Err(e) => {
            logging::error_line(&format!("error: {e}"));
            Err(ExitCode::from(EXIT_NOT_SYNCED))
        }
    }
}

/// Loads the config, printing every error; the exit code is 2 when it is invalid.
/// `stacksync diff` exit codes (those of `flux diff`).
const EXIT_DIFF_CHANGES: u8 = 1;
const EXIT_DIFF_ERROR: u8 = 2;

/// Prints what the next sync would change. `Ok(true)`: something would; an error when a
/// Cluster or file could not be previewed (after printing everything that could).
async fn diff(cfg: Config, cluster: Option<&str>) -> anyhow::Result<bool> {
    let (text, changes, errors) = match cfg.target.clone() {
        Target::Directory(dir) => {
            if cluster.is_some() {
                anyhow::bail!("--cluster is for a Kubernetes target; a directory target is diffed whole");
            }
            let (files, failures) = directory::diff::diff_directory(&cfg, &dir).await?;
            (directory::diff::text(&files), !files.is_empty(), failures)
        }
        Target::Kubernetes(_) => {
            let only = cluster.map(|c| {
                let (ns, name) = c.split_once('/').ok_or_else(|| anyhow::anyhow!("expected <namespace>/<name>, found `{c}`"))?;
                Ok::<_, anyhow::Error>(stacksync::model::ClusterKey::new(ns, name))
            });
            let only = only.transpose()?;
            let ctx = Ctx::new(cfg).context("opening the cache")?;
            let printed = kubernetes::commands::diff::printed(&kubernetes::diff(ctx, only.as_ref()).await?);
            (printed.text, printed.changes, printed.errors)
        }
    };
    print!("{text}");
    if !errors.is_empty() {
        anyhow::bail!("{} could not be previewed:\n  {}", errors.len(), errors.join("\n  "));
    }
    Ok(changes)
}

/// What `stacksync preview` was asked.
struct PreviewArgs {
    release: String,
    subscription: Option<String>,
    cluster: Option<String>,
    tag: Option<String>,
    concurrency: usize,
    diffs: bool,
}

/// The preview of a release not (yet) offered, for the Kubernetes target.
async fn preview(cfg: Config, args: PreviewArgs) -> anyhow::Result<kubernetes::commands::preview::FleetPreview> {
    use stacksync::controller::preview::{ReleaseArg, candidate};
    if !matches!(cfg.target, Target::Kubernetes(_)) {
        anyhow::bail!("preview needs a Kubernetes target (a directory target is previewed with `render --out` and a diff of the files)");
    }
    let only = match args.cluster.as_deref() {
        Some(c) => {
            let (ns, name) = c.split_once('/').ok_or_else(|| anyhow::anyhow!("expected <namespace>/<name>, found `{c}`"))?;
            Some(stacksync::model::ClusterKey::new(ns, name))
        }
        None => None,
    };
    let ctx = Ctx::new(cfg).context("opening the cache")?;
    ctx.renders_for_preview();
    let arg = ReleaseArg::parse(&args.release);
    let candidate = candidate(&ctx, &arg, args.subscription.as_deref(), args.tag.as_deref()).await?;
    let options = kubernetes::commands::preview::Options { only, concurrency: args.concurrency, diffs: args.diffs };
    Ok(kubernetes::commands::preview::preview(ctx, &candidate, &options).await?)
}

async fn adopt(cfg: Config, options: &kubernetes::commands::adopt::Options) -> anyhow::Result<kubernetes::commands::adopt::Report> {
    if !matches!(cfg.target, Target::Kubernetes(_)) {
        anyhow::bail!("adopt needs a Kubernetes target: it takes objects over in the management and workload clusters");
    }
    let ctx = Ctx::new(cfg).context("opening the cache")?;
    Ok(kubernetes::commands::adopt::adopt(ctx, options).await?)
}

fn load(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|errors| {
        for e in &errors.0 {
            if logging::is_json() {
                tracing::error!(file = %e.file.display(), line = e.line, column = e.col, field = %e.field, "invalid config: {}", e.message);
            } else {
                eprintln!("{e}");
            }
        }
        logging::error_line(&format!("{}: {} error(s); config is invalid", path.display(), errors.0.len()));
        ExitCode::from(EXIT_CONFIG)
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    // The first signal starts a graceful stop; a second one ends the process at once.
    tokio::spawn(async {
        let _ = tokio::signal::ctrl_c().await;
        logging::error_line("second signal: exiting now");
        std::process::exit(130);
    });
    #[cfg(unix)]
    tokio::spawn(async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
            logging::error_line("second signal: exiting now");
            std::process::exit(143);
        }
    });
}
