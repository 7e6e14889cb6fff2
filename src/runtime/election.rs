//! Leader election on a `coordination.k8s.io` Lease: only the holder reconciles Clusters and
//! writes; standbys poll their sources (warm caches) and write nothing.
//!
//! Every decision is timed on the monotonic clock, never by comparing the Lease's `renewTime`
//! with this process's wall clock (kube-lease-manager, used before, did: a standby whose clock
//! stepped forward took a live lease, a leader whose clock stepped forward wrote a `renewTime`
//! an hour ahead that kept a standby waiting an hour after it died). As Kubernetes' own
//! components do: a standby takes the Lease over when its record has not changed for
//! `leaseDurationSeconds` since this process last saw it change (so a standby that starts
//! waits one duration before taking a lease someone holds); the leader renews twice per
//! [`Params::grace`] and stops writing when no renewal has succeeded for `duration - grace`.
//! Every write is an update with the `resourceVersion` read, so two replicas never both
//! succeed in taking the same record.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// The Lease of the rollout coordinator of a sharded fleet: every replica of every shard
/// competes for it, and its holder alone drives the fleet's rollouts (a shard sees only its own
/// Clusters; a rollout moves them all and keeps one state per release). An unsharded controller
/// needs none: its own leader drives rollouts.
pub const ROLLOUT_LEASE: &str = "stacksync-rollout";

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("leader election: cannot create or read Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Which Lease, held how long, by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub namespace: String,
    pub name: String,
    /// This process, as the Lease's `holderIdentity` shows it.
    pub identity: String,
    /// How long the lease holds without renewal: a dead leader is replaced after at most this.
    pub duration: Duration,
}

impl Params {
    /// The leader renews twice in this time, and stops writing this long before a standby may
    /// take over (a third of the duration, at least 1 s).
    pub fn grace(&self) -> Duration {
        (self.duration / 3).max(Duration::from_secs(1))
    }

    /// The Lease's name: `stacksync`, or `stacksync-<shard>` (one Lease per shard).
    pub fn lease_name(shard: Option<&str>) -> String {
        shard.map_or_else(|| "stacksync".to_owned(), |s| format!("stacksync-{s}"))
    }

    /// Whether `shard` may name a shard: not one whose Lease would be the rollout
    /// coordinator's ([`ROLLOUT_LEASE`]).
    pub fn shard_allowed(shard: &str) -> bool {
        Params::lease_name(Some(shard)) != ROLLOUT_LEASE
    }

    /// `<pod name or host name>_<pid>`: unique per process, readable in `kubectl get lease`.
    pub fn default_identity() -> String {
        let host = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_else(|_| "stacksync".into());
        format!("{host}_{}", std::process::id())
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(2)).unwrap_or(i32::MAX)
    }
}

/// A running election: [`Election::is_leader`] says whether this process may write now.
pub struct Election {
    leader: watch::Receiver<bool>,
    task: JoinHandle<()>,
    api: Api<Lease>,
    params: Params,
}

impl Election {
    /// Creates the Lease if needed and starts competing for it.
    ///
    /// # Errors
    /// [`Error::Lease`]: the Lease cannot be created or read (RBAC, no API server).
    pub async fn start(client: kube::Client, params: Params) -> Result<Election, Error> {
        let api: Api<Lease> = Api::namespaced(client, &params.namespace);
        let lease_error = |source| Error::Lease { namespace: params.namespace.clone(), name: params.name.clone(), source };
        if api.get_opt(&params.name).await.map_err(lease_error)?.is_none() {
            let lease = Lease { metadata: ObjectMeta { name: Some(params.name.clone()), ..ObjectMeta::default() }, spec: None };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => {}
                // Another replica created it first.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(lease_error(e)),
            }
        }
        let (tx, leader) = watch::channel(false);
        let task = tokio::spawn(compete(api.clone(), params.clone(), tx));
        info!(lease = %format!("{}/{}", params.namespace, params.name), identity = %params.identity, "leader election: competing for the lease");
        Ok(Election { leader, task, api, params })
    }

    /// Whether this process holds the lease (as last confirmed).
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Completes when leadership changes; returns the new state.
    pub async fn changed(&mut self) -> bool {
        if self.leader.changed().await.is_err() {
            // The competing task ended (it does not, short of a panic): stay a standby.
            std::future::pending::<()>().await;
        }
        *self.leader.borrow_and_update()
    }

    /// Gives the lease up (so a standby takes over at once instead of after the lease
    /// duration) and stops competing. Bounded by `deadline`.
    pub async fn release(self, deadline: Duration) {
        self.task.abort();
        let name = self.params.name.clone();
        match tokio::time::timeout(deadline, release(&self.api, &self.params)).await {
            Ok(Ok(true)) => info!(lease = %name, "leader election: lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => warn!(lease = %name, error = %e, "leader election: cannot release the lease; it expires by itself"),
            Err(_) => warn!(lease = %name, "leader election: lease not released in time; it expires by itself"),
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Clears the Lease's holder if it is this process (an update with the `resourceVersion`
/// read: a Lease someone else took meanwhile is left alone). `Ok(false)`: not ours.
async fn release(api: &Api<Lease>, params: &Params) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(&params.name).await? else { return Ok(false) };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(params.identity.as_str()) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    api.replace(&params.name, &PostParams::default(), &lease).await?;
    Ok(true)
}

/// What this process knows of the Lease, all on the monotonic clock.
#[derive(Default)]
struct Seen {
    /// The record last read, and when it was first read with that content.
    record: Option<(LeaseSpec, Instant)>,
    /// When this process last wrote itself into the Lease as holder.
    renewed: Option<Instant>,
}

/// What a read of the Lease leads to.
#[derive(Debug, PartialEq, Eq)]
enum Act {
    /// Ours: write a new `renewTime`.
    Renew,
    /// Free, or its holder has not renewed for its duration: take it.
    Take,
    /// Ours and renewed recently, or someone else's and alive: nothing.
    Wait,
}

/// Decides what to do with `spec`, read at `now`. Pure but for updating `seen.record`.
fn decide(seen: &mut Seen, spec: &LeaseSpec, params: &Params, now: Instant) -> Act {
    if seen.record.as_ref().is_none_or(|(r, _)| r != spec) {
        seen.record = Some((spec.clone(), now));
    }
    let unchanged_for = seen.record.as_ref().map_or(Duration::ZERO, |(_, at)| now.saturating_duration_since(*at));
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        None => Act::Take,
        Some(h) if h == params.identity => {
            // Twice per grace: one failed renewal still leaves time for the next.
            let due = seen.renewed.is_none_or(|at| now.saturating_duration_since(at) >= params.grace() / 2);
            if due { Act::Renew } else { Act::Wait }
        }
        Some(_) => {
            let duration = spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).map_or(params.duration, Duration::from_secs);
            if unchanged_for >= duration { Act::Take } else { Act::Wait }
        }
    }
}

/// Reads the Lease every `grace / 2`, renews or takes it as [`decide`] says, and publishes
/// whether this process leads: it holds the Lease and last wrote it less than
/// `duration - grace` ago.
async fn compete(api: Api<Lease>, params: Params, out: watch::Sender<bool>) {
    let trust = params.duration.saturating_sub(params.grace());
    let every = (params.grace() / 2).max(Duration::from_millis(200));
    let mut seen = Seen::default();
    // The failure last said: a failure is said once at WARN (RBAC, an API server away), not on
    // every try; it is said again when it changes, and forgotten on success.
    let mut failing: Option<String> = None;
    loop {
        match tokio::time::timeout(every, api.get_opt(&params.name)).await {
            Ok(Ok(Some(mut lease))) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let act = decide(&mut seen, &spec, &params, Instant::now());
                if spec.holder_identity.as_deref() != Some(params.identity.as_str()) {
                    seen.renewed = None;
                }
                if act != Act::Wait {
                    let wall = MicroTime(k8s_openapi::jiff::Timestamp::now());
                    let s = lease.spec.get_or_insert_with(LeaseSpec::default);
                    if act == Act::Take {
                        s.holder_identity = Some(params.identity.clone());
                        s.acquire_time = Some(wall.clone());
                        s.lease_transitions = Some(s.lease_transitions.unwrap_or(0).saturating_add(1));
                    }
                    s.renew_time = Some(wall);
                    s.lease_duration_seconds = Some(params.seconds());
                    let sent = Instant::now();
                    // An update with the resourceVersion read: a conflict means someone else
                    // wrote first, and the next read shows who.
                    match tokio::time::timeout(every, api.replace(&params.name, &PostParams::default(), &lease)).await {
                        Ok(Ok(written)) => {
                            seen.renewed = Some(sent);
                            seen.record = Some((written.spec.unwrap_or_default(), sent));
                            failing = None;
                            if act == Act::Take {
                                info!(lease = %params.name, identity = %params.identity, "leader election: took the lease");
                            }
                        }
                        // Someone else wrote first: the next read shows who.
                        Ok(Err(kube::Error::Api(e))) if e.code == 409 => {
                            debug!(lease = %params.name, "leader election: the lease changed meanwhile")
                        }
                        Ok(Err(e)) => {
                            said(&mut failing, &params, format!("cannot write the lease: {}", crate::targets::kubernetes::kube_error(&e)))
                        }
                        Err(_) => said(&mut failing, &params, format!("writing the lease took longer than {every:?}")),
                    }
                }
            }
            // Gone: recreated by whoever reads it next; we lead no more.
            Ok(Ok(None)) => {
                seen.renewed = None;
                let lease = Lease { metadata: ObjectMeta { name: Some(params.name.clone()), ..ObjectMeta::default() }, spec: None };
                let _ = api.create(&PostParams::default(), &lease).await;
            }
            // Unreadable: the last renewal ages out below.
            Ok(Err(e)) => said(&mut failing, &params, format!("cannot read the lease: {}", crate::targets::kubernetes::kube_error(&e))),
            Err(_) => said(&mut failing, &params, format!("reading the lease took longer than {every:?}")),
        }
        let leader = seen.renewed.is_some_and(|at| at.elapsed() < trust);
        out.send_if_modified(|now| {
            let changed = *now != leader;
            *now = leader;
            changed
        });
        tokio::time::sleep(every).await;
    }
}

/// Says `message` at WARN unless it is what was said last (then DEBUG).
fn said(failing: &mut Option<String>, params: &Params, message: String) {
    if failing.as_deref() == Some(message.as_str()) {
        debug!(lease = %params.name, "leader election: {message}");
    } else {
        warn!(lease = %params.name, identity = %params.identity, "leader election: {message}; standing by until it succeeds");
        *failing = Some(message);
    }
}

/// Leadership as the daemon sees it: off (no election: always the leader), starting (the
/// Lease cannot be reached yet: a standby), or running.
pub enum Leadership {
    Off,
    Starting(JoinHandle<Election>),
    On(Box<Election>),
}

impl Leadership {
    /// Starts competing for the Lease `lease` (a shard's, [`Params::lease_name`], or
    /// [`ROLLOUT_LEASE`]) in `namespace` (default: the management client's namespace), retrying
    /// with backoff until the Lease can be created or read.
    pub fn start(target: crate::config::KubernetesTarget, lease: String, namespace: Option<String>, duration: Duration) -> Leadership {
        Leadership::Starting(tokio::spawn(async move {
            let mut attempt = 0u32;
            loop {
                let result = match crate::targets::kubernetes::management_client(&target).await {
                    Ok(client) => {
                        let params = Params {
                            namespace: namespace.clone().unwrap_or_else(|| client.default_namespace().to_owned()),
                            name: lease.clone(),
                            identity: Params::default_identity(),
                            duration,
                        };
                        Election::start(client, params).await.map_err(|e| e.to_string())
                    }
                    Err(e) => Err(format!("leader election: management cluster: {e}")),
                };
                match result {
                    Ok(e) => return e,
                    Err(e) => {
                        attempt = attempt.saturating_add(1);
                        let wait = crate::schedule::jittered(crate::schedule::backoff(attempt).max(Duration::from_secs(2)));
                        warn!(retry_in = ?wait, "{e}; a standby until then");
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }))
    }

    /// Whether this process may write now.
    pub fn is_leader(&self) -> bool {
        match self {
            Leadership::Off => true,
            Leadership::Starting(_) => false,
            Leadership::On(e) => e.is_leader(),
        }
    }

    /// Completes when [`Leadership::is_leader`] may have changed. Cancellation-safe.
    pub async fn changed(&mut self) {
        match self {
            Leadership::Off => std::future::pending().await,
            Leadership::Starting(task) => match task.await {
                Ok(e) => *self = Leadership::On(Box::new(e)),
                // The retry loop does not end by itself: only a panic gets here.
                Err(_) => std::future::pending().await,
            },
            Leadership::On(e) => {
                e.changed().await;
            }
        }
    }

    /// Releases the Lease (when held) within `deadline`.
    pub async fn release(self, deadline: Duration) {
        match self {
            Leadership::Off => {}
            Leadership::Starting(task) => task.abort(),
            Leadership::On(e) => e.release(deadline).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_and_grace() {
        assert_eq!(Params::lease_name(None), "stacksync");
        assert_eq!(Params::lease_name(Some("eu-1")), "stacksync-eu-1");
        // A shard named `rollout` would share the rollout coordinator's Lease.
        assert!(Params::shard_allowed("eu-1") && Params::shard_allowed("rollouts"));
        assert!(!Params::shard_allowed("rollout"));
        let p = Params { namespace: "ns".into(), name: "n".into(), identity: "i".into(), duration: Duration::from_secs(15) };
        assert_eq!(p.grace(), Duration::from_secs(5));
        assert_eq!(Params { duration: Duration::from_secs(2), ..p }.grace(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_a_lease_unchanged_for_its_duration_whatever_renew_time_says() {
        let p = Params { namespace: "ns".into(), name: "n".into(), identity: "me".into(), duration: Duration::from_secs(15) };
        let s = Duration::from_secs;
        let t0 = Instant::now();
        // renewTime is never read: an hour ahead or ten minutes behind, the same decisions.
        let held = |renew: &str| LeaseSpec {
            holder_identity: Some("other".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renew.parse().unwrap())),
            ..LeaseSpec::default()
        };
        let mut seen = Seen::default();
        let (late, early) = ("2026-01-01T13:00:00Z", "2026-01-01T11:50:00Z");
        assert_eq!(decide(&mut seen, &held(early), &p, t0), Act::Wait, "first sight: one duration from now");
        assert_eq!(decide(&mut seen, &held(early), &p, t0 + s(14)), Act::Wait);
        // Renewed (the record changed): another whole duration.
        assert_eq!(decide(&mut seen, &held(late), &p, t0 + s(14)), Act::Wait);
        assert_eq!(decide(&mut seen, &held(late), &p, t0 + s(28)), Act::Wait);
        assert_eq!(decide(&mut seen, &held(late), &p, t0 + s(29)), Act::Take, "unchanged for 15s");
        // Free: at once.
        assert_eq!(decide(&mut Seen::default(), &LeaseSpec::default(), &p, t0), Act::Take);
        // Ours: renewed every half grace (2.5 s).
        let ours = LeaseSpec { holder_identity: Some("me".into()), ..LeaseSpec::default() };
        let mut seen = Seen { renewed: Some(t0), ..Seen::default() };
        assert_eq!(decide(&mut seen, &ours, &p, t0 + s(2)), Act::Wait);
        assert_eq!(decide(&mut seen, &ours, &p, t0 + s(3)), Act::Renew);
    }
}
