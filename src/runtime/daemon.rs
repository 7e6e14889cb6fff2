//! The long-running process: for the Kubernetes target, source pollers and the Cluster
//! controller; for the directory target, source pollers and one syncer per subscription. Both reload the
//! config when the file changes (keeping the last good config on a bad edit) and stop cleanly on
//! SIGTERM/SIGINT.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::config::watch::ConfigWatcher;
use crate::config::{self, Config, Target};
use crate::controller::Context;
use crate::controller::poller::Pollers;
use crate::runtime::admin::Admin;
use crate::runtime::election::{Leadership, Params, ROLLOUT_LEASE};
use crate::targets::directory::syncers::Syncers;
use crate::targets::kubernetes;

/// How long in-flight reconciles get to finish after SIGTERM.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// What the daemon is given besides its config.
pub struct Options {
    /// Clusters reconciled at once (Kubernetes target).
    pub concurrency: u16,
    /// The admin listener, when it listens: told of every reload (its webhooks read the config
    /// in force).
    pub admin: Option<Arc<Admin>>,
    /// The Runtime SDK hooks, when they listen: told of every reload.
    pub hooks: Option<Arc<kubernetes::hook::Hooks>>,
    /// Sources to poll now (webhook deliveries).
    pub triggers: mpsc::Receiver<String>,
    /// Leader election on a Lease (`--leader-elect`); without it this process always writes.
    pub election: Option<ElectionOptions>,
    /// `--shard`: only Clusters labelled `stacksync.io/shard=<name>`, and the shard's own Lease.
    pub shard: Option<String>,
    /// The election of the rollout coordinator ([`ROLLOUT_LEASE`]): set with `--shard` (with
    /// or without `--leader-elect`), so that of all the shards' replicas one drives rollouts.
    /// Without it rollouts are driven by the controller (its leader, with election).
    pub coordinator: Option<ElectionOptions>,
}

/// How to elect a leader.
#[derive(Debug, Clone)]
pub struct ElectionOptions {
    /// The Lease's namespace; default: the management client's namespace (in a pod, its own).
    pub namespace: Option<String>,
    /// How long the lease holds without renewal.
    pub duration: Duration,
}

impl Options {
    /// No admin listener, nothing but the schedule triggers polls.
    pub fn new(concurrency: u16) -> Options {
        Options { concurrency, admin: None, hooks: None, triggers: mpsc::channel(1).1, election: None, shard: None, coordinator: None }
    }

    fn reloaded(&self, config: &Config) {
        if let Some(admin) = &self.admin {
            admin.set_config(config.clone());
        }
        if let Some(hooks) = &self.hooks {
            hooks.set_config(config.clone());
        }
    }
}

/// Runs until `shutdown` completes. The Kubernetes target runs as a controller (source pollers
/// and a per-Cluster reconciler, see [`run_kubernetes`]); the directory target passes over its
/// subscriptions on their schedules.
///
/// # Errors
/// Only when the config file's directory cannot be watched at start-up.
pub async fn run(path: PathBuf, initial: Config, options: Options, shutdown: impl Future<Output = ()>) -> notify::Result<()> {
    match initial.target {
        Target::Kubernetes(_) => run_kubernetes(path, initial, options, shutdown).await,
        Target::Directory(_) => run_directory(path, initial, options, shutdown).await,
    }
}

type ControllerTask = tokio::task::JoinHandle<Result<(), kubernetes::Error>>;

/// The Cluster controller while it runs (only on the leader), with its graceful-stop signal.
struct Running {
    task: ControllerTask,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Running {
    fn idle() -> Running {
        Running { task: tokio::spawn(std::future::pending()), stop: None }
    }

    fn start(ctx: &Arc<Context>, concurrency: u16, shard: Option<String>) -> Running {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            let _ = stopped.await;
        };
        Running { task: tokio::spawn(kubernetes::run(ctx.clone(), concurrency, shard, signal)), stop: Some(stop) }
    }

    /// Lets in-flight reconciles finish, within [`SHUTDOWN_GRACE`].
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.task).await.is_err() {
                warn!(seconds = SHUTDOWN_GRACE.as_secs(), "reconciles still running at the deadline; abandoned");
                self.task.abort();
            }
        }
        self.task.abort();
    }

    /// Stops at once: a reconcile in flight is dropped between two requests (it is
    /// cancellation-safe: the next leader's reconcile completes it).
    fn abort(self) {
        self.task.abort();
    }
}

/// The rollout driver of a sharded fleet while this process holds [`ROLLOUT_LEASE`] (see
/// [`kubernetes::coordinate`]), with its graceful-stop signal.
struct Coordinating(Running);

impl Coordinating {
    fn idle() -> Coordinating {
        Coordinating(Running::idle())
    }

    fn start(ctx: &Option<Arc<Context>>, holds: bool) -> Coordinating {
        let Some(ctx) = ctx.as_ref().filter(|_| holds) else { return Coordinating::idle() };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            let _ = stopped.await;
        };
        let ctx = ctx.clone();
        let task = tokio::spawn(async move {
            kubernetes::coordinate(ctx, signal).await;
            Ok(())
        });
        Coordinating(Running { task, stop: Some(stop) })
    }

    fn is_running(&self) -> bool {
        self.0.stop.is_some()
    }
}

/// Whether this process holds the rollout coordinator's Lease; never, without one.
fn coordinates(lease: Option<&Leadership>) -> bool {
    lease.is_some_and(Leadership::is_leader)
}

/// Completes when the rollout coordinator's Lease may have changed hands; never without one.
async fn coordinator_changed(lease: &mut Option<Leadership>) {
    match lease {
        Some(l) => l.changed().await,
        None => std::future::pending().await,
    }
}

/// Records (metric and log) whether this process holds the rollout coordinator's Lease.
fn said_coordinating(holds: bool) {
    crate::telemetry::metrics().lease_held(ROLLOUT_LEASE, holds);
    if holds {
        info!(lease = ROLLOUT_LEASE, "rollout coordinator: this process holds the lease; driving the fleet's rollouts");
    } else {
        warn!(lease = ROLLOUT_LEASE, "rollout coordinator: the lease is lost; stopped driving rollouts");
        crate::telemetry::metrics().forget_rollouts();
    }
}

/// The Kubernetes target: a [`Context`] for the process, one poller task per source, and the
/// Cluster controller — on the leader only, when leader election is on: a standby polls its
/// sources (warm caches) and writes nothing, and a leader that loses the lease stops its
/// controller at once. With `--shard`, every replica also competes for [`ROLLOUT_LEASE`]: its
/// holder, whatever its shard and whether it leads it, drives the fleet's rollouts, and stops
/// at once when it loses that Lease. A reload puts the new config in force at once (pollers of
/// changed sources poll, every Cluster is reconciled); a reload that changes the cache, the
/// target or helm rebuilds the context, the controller and the rollout coordinator.
///
/// # Errors
/// Only when the config file's directory cannot be watched at start-up.
pub async fn run_kubernetes(
    path: PathBuf,
    initial: Config,
    mut options: Options,
    shutdown: impl Future<Output = ()>,
) -> notify::Result<()> {
    let concurrency = options.concurrency;
    let mut watcher = ConfigWatcher::new(&path)?;
    let mut config = initial;
    let mut last_text = crate::config::read_bounded(&path).unwrap_or_default();
    tokio::pin!(shutdown);
    info!(file = %path.display(), subscriptions = config.subscriptions.len(), shard = options.shard.as_deref().unwrap_or(""), "stacksync started");
    let mut leadership = match (&options.election, &config.target) {
        (Some(e), Target::Kubernetes(k)) => {
            Leadership::start(k.clone(), Params::lease_name(options.shard.as_deref()), e.namespace.clone(), e.duration)
        }
        _ => Leadership::Off,
    };
    // The Lease this process competes for (leader election only), for `stacksync_lease_held`:
    // one leader per Lease is what an alert can check across replicas and shards.
    let lease = (!matches!(leadership, Leadership::Off)).then(|| Params::lease_name(options.shard.as_deref()));
    let readiness = crate::telemetry::readiness();
    let set_standby = |standby: bool| {
        readiness.set_standby(standby);
        if let Some(lease) = &lease {
            crate::telemetry::metrics().lease_held(lease, !standby);
        }
    };
    set_standby(!leadership.is_leader());
    let mut coordinator = match (&options.coordinator, &config.target) {
        (Some(e), Target::Kubernetes(k)) => {
            if options.election.is_none() {
                info!(
                    lease = ROLLOUT_LEASE,
                    "rollout coordinator: --shard without --leader-elect still elects one replica of all the shards to drive rollouts"
                );
            }
            Some(Leadership::start(k.clone(), ROLLOUT_LEASE.to_owned(), e.namespace.clone(), e.duration))
        }
        _ => None,
    };
    if coordinator.is_some() {
        crate::telemetry::metrics().set_rollouts_apart();
        crate::telemetry::metrics().lease_held(ROLLOUT_LEASE, false);
    }
    loop {
        let ctx = match Context::new(config.clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                error!(error = %e, "cache unavailable; waiting for a config change");
                None
            }
        };
        let mut pollers = Pollers::default();
        if let Some(ctx) = &ctx {
            pollers.sync(ctx);
        }
        let shard = options.shard.clone();
        let start = |ctx: &Option<Arc<Context>>, leader: bool| match ctx {
            Some(ctx) if leader => Running::start(ctx, concurrency, shard.clone()),
            _ => Running::idle(),
        };
        let mut controller = start(&ctx, leadership.is_leader());
        let mut rollouts = Coordinating::start(&ctx, coordinates(coordinator.as_ref()));
        loop {
            tokio::select! {
                () = &mut shutdown => {
                    info!("shutting down: letting in-flight reconciles finish");
                    tokio::join!(controller.stop(), rollouts.0.stop());
                    set_standby(true);
                    let coordinator_released = async {
                        if let Some(lease) = coordinator {
                            lease.release(Duration::from_secs(5)).await;
                        }
                    };
                    tokio::join!(leadership.release(Duration::from_secs(5)), coordinator_released);
                    return Ok(());
                }
                _ = &mut rollouts.0.task => {
                    // It ends only when told to (or by a panic): idle until the Lease changes.
                    rollouts = Coordinating::idle();
                }
                () = coordinator_changed(&mut coordinator) => {
                    let holds = coordinates(coordinator.as_ref());
                    if holds == rollouts.is_running() {
                        continue;
                    }
                    said_coordinating(holds);
                    if holds {
                        rollouts = Coordinating::start(&ctx, true);
                    } else {
                        std::mem::replace(&mut rollouts, Coordinating::idle()).0.abort();
                    }
                }
                done = &mut controller.task => {
                    match done {
                        Ok(Err(e)) => error!(reason = e.reason(), "{e}; fix the config (it is reloaded when it changes)"),
                        Ok(Ok(())) => {}
                        Err(join) => error!("controller task failed: {join}"),
                    }
                    controller = Running::idle();
                }
                () = leadership.changed() => {
                    let leader = leadership.is_leader();
                    if leader == controller.stop.is_some() {
                        continue;
                    }
                    set_standby(!leader);
                    if leader {
                        info!("leader election: this process holds the lease; reconciling Clusters");
                        controller = start(&ctx, true);
                    } else {
                        warn!("leader election: the lease is lost; stopped writing");
                        std::mem::replace(&mut controller, Running::idle()).abort();
                    }
                }
                Some(source) = options.triggers.recv() => pollers.trigger(&source),
                Some(()) = watcher.changed() => {
                    let Some(new) = reload(&path, &config, &mut last_text) else { continue };
                    let rebuild = ctx.is_none() || new.cache != config.cache || new.target != config.target || new.helm != config.helm;
                    let changed: Vec<String> = new
                        .sources
                        .iter()
                        .filter(|s| {
                            config.source(&s.name) != Some(s)
                                || new.subscriptions.iter().any(|sub| sub.source == s.name && config.subscription(&sub.name) != Some(sub))
                        })
                        .map(|s| s.name.clone())
                        .collect();
                    config = new;
                    options.reloaded(&config);
                    if rebuild {
                        break;
                    }
                    if let Some(ctx) = &ctx {
                        ctx.set_config(config.clone());
                        pollers.sync(ctx);
                        for name in &changed {
                            pollers.trigger(name);
                        }
                    }
                }
            }
        }
        info!("cache, target or helm changed: restarting the controller");
        tokio::join!(controller.stop(), rollouts.0.stop());
    }
}

/// The directory target, in the Kubernetes target's shape: a [`Context`] for the process, one
/// poller task per source and one syncer task per subscription
/// ([`crate::targets::directory::syncers::Syncers`]). A download runs in the syncer of the subscription that
/// needs it, so a slow or hanging source delays only its own subscriptions, and this loop —
/// reloads, webhook triggers, shutdown — waits for none of them. A reload puts the new config in
/// force at once: pollers of changed sources poll, syncers of changed subscriptions start afresh;
/// one that changes the cache, the target or helm rebuilds the context.
///
/// # Errors
/// Only when the config file's directory cannot be watched at start-up.
pub async fn run_directory(path: PathBuf, initial: Config, mut options: Options, shutdown: impl Future<Output = ()>) -> notify::Result<()> {
    let mut watcher = ConfigWatcher::new(&path)?;
    let mut config = initial;
    let mut last_text = crate::config::read_bounded(&path).unwrap_or_default();
    info!(file = %path.display(), subscriptions = config.subscriptions.len(), "stacksync started");
    // One writer per output directory is the operator's to arrange: no lease here.
    crate::telemetry::readiness().set_standby(false);
    tokio::pin!(shutdown);
    loop {
        let ctx = match Context::new(config.clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                error!(error = %e, "cache unavailable; waiting for a config change");
                None
            }
        };
        let mut pollers = Pollers::default();
        let mut syncers = Syncers::default();
        if let Some(ctx) = &ctx {
            pollers.sync(ctx);
            syncers.sync(ctx);
        }
        loop {
            tokio::select! {
                () = &mut shutdown => {
                    // A sync in progress (a download, a rate-limit wait) is abandoned: everything
                    // it writes is atomic, so the cache and the directory stay consistent.
                    info!("shutting down");
                    pollers.stop();
                    syncers.stop().await;
                    return Ok(());
                }
                Some(source) = options.triggers.recv() => pollers.trigger(&source),
                Some(()) = watcher.changed() => {
                    let Some(new) = reload(&path, &config, &mut last_text) else { continue };
                    let rebuild = ctx.is_none() || new.cache != config.cache || new.target != config.target || new.helm != config.helm;
                    let changed_sources: Vec<String> =
                        new.sources.iter().filter(|s| config.source(&s.name) != Some(s)).map(|s| s.name.clone()).collect();
                    let changed_subs: Vec<String> = new
                        .subscriptions
                        .iter()
                        .filter(|sub| config.subscription(&sub.name) != Some(sub) || changed_sources.contains(&sub.source))
                        .map(|sub| sub.name.clone())
                        .collect();
                    config = new;
                    options.reloaded(&config);
                    if rebuild {
                        break;
                    }
                    if let Some(ctx) = &ctx {
                        ctx.set_config(config.clone());
                        pollers.sync(ctx);
                        for name in &changed_sources {
                            pollers.trigger(name);
                        }
                        syncers.sync(ctx);
                        for name in &changed_subs {
                            syncers.restart(ctx, name);
                        }
                    }
                }
            }
        }
        info!("cache, target or helm changed: starting again with the new config");
        pollers.stop();
        syncers.stop().await;
    }
}

/// Reads a config edit: a valid, effective change is returned (and logged); an invalid one is
/// logged and ignored, the running config stays.
fn reload(path: &std::path::Path, config: &Config, last_text: &mut String) -> Option<Config> {
    let text = match crate::config::read_bounded(path) {
        Ok(t) => t,
        Err(e) => {
            warn!(file = %path.display(), error = %e, "config file unreadable; keeping the last good config");
            return None;
        }
    };
    if text == *last_text {
        return None;
    }
    last_text.clone_from(&text);
    let new = match Config::parse(path, &text) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors.0 {
                error!(file = %e.file.display(), line = e.line, column = e.col, field = %e.field, "invalid config: {}", e.message);
            }
            error!(errors = errors.0.len(), "config reload rejected; keeping the last good config");
            return None;
        }
    };
    let changes = config::diff(config, &new);
    if changes.is_empty() {
        info!("config reloaded: no effective change");
        return None;
    }
    for change in &changes {
        info!(change = %change, "config reloaded");
    }
    Some(new)
}
