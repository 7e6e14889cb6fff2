//! Leader election on a `coordination.k8s.io` Lease (kube-lease-manager): only the holder
//! reconciles Clusters and writes; standbys poll their sources (warm caches) and write nothing.
//!
//! kube-lease-manager renews the lease and reports when it is won or lost, but while its renewals
//! fail (an API server that does not answer) it keeps saying "leader". A leader that cannot
//! renew must stop writing before another replica may take over, so this module also confirms
//! the lease by reading it: leadership ends when no read has shown this process as the holder
//! for `duration - grace`, whatever the manager says.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("leader election: cannot create or read Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: LeaseManagerError,
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
    /// Renewal starts this long before expiry (a third of the duration, at least 1 s).
    pub fn grace(&self) -> Duration {
        (self.duration / 3).max(Duration::from_secs(1))
    }

    /// The Lease's name: `stacksync`, or `stacksync-<shard>` (one Lease per shard).
    pub fn lease_name(shard: Option<&str>) -> String {
        shard.map_or_else(|| "stacksync".to_owned(), |s| format!("stacksync-{s}"))
    }

    /// `<pod name or host name>_<pid>`: unique per process, readable in `kubectl get lease`.
    pub fn default_identity() -> String {
        let host = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_else(|_| "stacksync".into());
        format!("{host}_{}", std::process::id())
    }
}

/// A running election: [`Election::leader`] says whether this process may write now.
pub struct Election {
    leader: watch::Receiver<bool>,
    manager: Option<(watch::Receiver<bool>, JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>)>,
    confirm: JoinHandle<()>,
    params: Params,
}

impl Election {
    /// Creates the Lease if needed and starts competing for it.
    ///
    /// # Errors
    /// [`Error::Lease`]: the Lease cannot be created or read (RBAC, no API server).
    pub async fn start(client: kube::Client, params: Params) -> Result<Election, Error> {
        let secs = params.duration.as_secs().max(2);
        let grace = params.grace().as_secs().clamp(1, secs - 1);
        let manager = LeaseManagerBuilder::new(client.clone(), &params.name)
            .with_namespace(&params.namespace)
            .with_identity(&params.identity)
            .with_duration(secs)
            .with_grace(grace)
            .with_field_manager("stacksync-leader-election")
            .build()
            .await
            .map_err(|source| Error::Lease { namespace: params.namespace.clone(), name: params.name.clone(), source })?;
        let (says, task) = manager.watch().await;
        let (tx, leader) = watch::channel(false);
        let api: Api<Lease> = Api::namespaced(client, &params.namespace);
        let confirm = tokio::spawn(confirm(api, params.clone(), says.clone(), tx));
        info!(lease = %format!("{}/{}", params.namespace, params.name), identity = %params.identity, "leader election: competing for the lease");
        Ok(Election { leader, manager: Some((says, task)), confirm, params })
    }

    /// Whether this process holds the lease (as last confirmed).
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Completes when leadership changes; returns the new state.
    pub async fn changed(&mut self) -> bool {
        if self.leader.changed().await.is_err() {
            // The confirming task ended (it does not, short of a panic): stay a standby.
            std::future::pending::<()>().await;
        }
        *self.leader.borrow_and_update()
    }

    /// Gives the lease up (so a standby takes over at once instead of after the lease
    /// duration) and stops competing. Bounded by `deadline`.
    pub async fn release(mut self, deadline: Duration) {
        self.confirm.abort();
        if let Some((says, task)) = self.manager.take() {
            // Dropping the last receiver makes the manager's task release the lease and end.
            drop(says);
            match tokio::time::timeout(deadline, task).await {
                Ok(Ok(Ok(_))) => info!(lease = %self.params.name, "leader election: lease released"),
                Ok(Ok(Err(e))) => {
                    warn!(lease = %self.params.name, error = %e, "leader election: cannot release the lease; it expires by itself")
                }
                Ok(Err(_)) | Err(_) => {
                    warn!(lease = %self.params.name, "leader election: lease not released in time; it expires by itself")
                }
            }
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        self.confirm.abort();
    }
}

/// Publishes `manager says leader AND a read of the Lease showed us as holder less than
/// `duration - grace` ago`, re-checked every `grace / 2`.
async fn confirm(api: Api<Lease>, params: Params, mut says: watch::Receiver<bool>, out: watch::Sender<bool>) {
    let trust = params.duration.saturating_sub(params.grace());
    let every = (params.grace() / 2).max(Duration::from_millis(200));
    let mut confirmed: Option<Instant> = None;
    loop {
        let manager_says = *says.borrow_and_update();
        if manager_says {
            match tokio::time::timeout(every, api.get_opt(&params.name)).await {
                Ok(Ok(Some(lease))) => {
                    let holder = lease.spec.and_then(|s| s.holder_identity);
                    confirmed = (holder.as_deref() == Some(params.identity.as_str())).then(Instant::now);
                }
                Ok(Ok(None)) => confirmed = None,
                // Unreadable: the last confirmation ages out below.
                Ok(Err(_)) | Err(_) => {}
            }
        } else {
            confirmed = None;
        }
        let leader = manager_says && confirmed.is_some_and(|at| at.elapsed() < trust);
        out.send_if_modified(|now| {
            let changed = *now != leader;
            *now = leader;
            changed
        });
        tokio::select! {
            r = says.changed() => if r.is_err() { return },
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Leadership as the daemon sees it: off (no election: always the leader), starting (the
/// Lease cannot be reached yet: a standby), or running.
pub enum Leadership {
    Off,
    Starting(JoinHandle<Election>),
    On(Election),
}

impl Leadership {
    /// Starts competing for the Lease of `shard` in `namespace` (default: the management
    /// client's namespace), retrying with backoff until the Lease can be created or read.
    pub fn start(
        target: crate::config::KubernetesTarget,
        shard: Option<String>,
        namespace: Option<String>,
        duration: Duration,
    ) -> Leadership {
        Leadership::Starting(tokio::spawn(async move {
            let mut attempt = 0u32;
            loop {
                let result = match crate::targets::kubernetes::management_client(&target).await {
                    Ok(client) => {
                        let params = Params {
                            namespace: namespace.clone().unwrap_or_else(|| client.default_namespace().to_owned()),
                            name: Params::lease_name(shard.as_deref()),
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
                Ok(e) => *self = Leadership::On(e),
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
        let p = Params { namespace: "ns".into(), name: "n".into(), identity: "i".into(), duration: Duration::from_secs(15) };
        assert_eq!(p.grace(), Duration::from_secs(5));
        assert_eq!(Params { duration: Duration::from_secs(2), ..p }.grace(), Duration::from_secs(1));
    }
}
