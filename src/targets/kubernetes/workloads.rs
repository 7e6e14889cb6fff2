//! The workload clusters' clients as a reconcile gets them: from the Cluster's
//! `<cluster>-kubeconfig` Secret (key `value`), the parsed recipe reused while the Secret's
//! resourceVersion stays the same (`workload.rs` bounds what is kept), with the kinds its syncs
//! found served; and the reachability check of a preview.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::Api;

use super::client::kube_error;
use super::workload::{self, Clients, ClusterState, Recipe, TlsConfigs};
use crate::model::ClusterKey;
use crate::model::cluster::ClusterConfig;
use crate::model::sync::MutexExt;
use crate::status::Reason;
use applier::ssa;

/// How long a workload cluster gets to answer `GET /version` before its sync is skipped.
pub const REACHABLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A workload cluster's client and the kinds its syncs found served.
#[derive(Clone)]
pub struct Workload {
    pub client: kube::Client,
    pub discovery: ssa::Discovery,
}

/// Workload clients by Cluster, with the kubeconfig Secret's resourceVersion they came from
/// (bounded in number and age), their TLS configurations (one per distinct trust and
/// identity), and what each Cluster keeps between reconciles (served kinds).
#[derive(Default)]
pub(super) struct Workloads {
    clients: Clients,
    tls: TlsConfigs,
    states: Mutex<HashMap<ClusterKey, ClusterState>>,
}

impl Workloads {
    /// A client of the workload cluster for this reconcile (its connections close with it),
    /// built from its `<cluster>-kubeconfig` Secret (key `value`), whose parsed form is reused,
    /// with what discovery found, while the Secret's resourceVersion stays the same.
    ///
    /// # Errors
    /// The Secret is missing or unreadable, or holds no usable kubeconfig ([`WorkloadError`]).
    pub(super) async fn get(
        &self,
        mgmt: &kube::Client,
        key: &ClusterKey,
        c: &ClusterConfig,
        timeout: std::time::Duration,
    ) -> Result<Workload, WorkloadError> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(mgmt.clone(), &c.namespace);
        let name = format!("{}-kubeconfig", c.name);
        let at = || format!("{}/{name}", c.namespace);
        let secret = match secrets.get_opt(&name).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(WorkloadError::SecretMissing { secret: at() }),
            Err(source) => return Err(WorkloadError::ReadSecret { secret: at(), source }),
        };
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let state = {
            let mut states = self.states.locked();
            match states.get(key) {
                Some(state) => state.clone(),
                None => states.entry(key.clone()).or_insert_with(|| ClusterState::new(key)).clone(),
            }
        };
        let client = match self.clients.get(key, &version, Some(&state.throttle)) {
            Some(client) => client,
            None => {
                let recipe = recipe(&at(), &secret, timeout, &self.tls).await?;
                // Built once already by `Recipe::new`: a failure here is as unlikely as it is
                // described (never with the error's text, which may quote the kubeconfig).
                let client = recipe.client(Some(&state.throttle)).map_err(|_| WorkloadError::NoClient { secret: at() })?;
                self.clients.put(key.clone(), version, recipe);
                client
            }
        };
        Ok(Workload { client, discovery: state.discovery })
    }

    /// How long `key`'s workload API server said to wait still, if it did.
    pub(super) fn throttled(&self, key: &ClusterKey) -> Option<std::time::Duration> {
        self.states.locked().get(key).and_then(|s| s.throttle.remaining())
    }

    /// Forgets what is kept for a Cluster that is gone.
    pub(super) fn forget(&self, key: &ClusterKey) {
        self.clients.remove(key);
        self.states.locked().remove(key);
    }
}

/// Why a workload cluster's client could not be had. Messages name the Secret and what is
/// wrong, never its content: a YAML error would quote the line (a token, a key). Each may pass
/// by itself (Cluster API writes the Secret, a person fixes it): the reconcile retries.
#[derive(Debug, thiserror::Error)]
pub(super) enum WorkloadError {
    #[error("Secret {secret} does not exist yet")]
    SecretMissing { secret: String },
    #[error("reading Secret {secret}: {}", kube_error(.source))]
    ReadSecret {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {secret} has no key `value`")]
    NoKubeconfig { secret: String },
    #[error("Secret {secret}: key `value` {why}")]
    Unusable { secret: String, why: &'static str },
    #[error("Secret {secret}: its kubeconfig gave no client")]
    NoClient { secret: String },
}

impl WorkloadError {
    /// The condition reason the Cluster gets.
    pub(super) fn reason(&self) -> Reason {
        match self {
            WorkloadError::SecretMissing { .. } | WorkloadError::NoKubeconfig { .. } => Reason::KubeconfigMissing,
            WorkloadError::ReadSecret { .. } | WorkloadError::Unusable { .. } | WorkloadError::NoClient { .. } => {
                Reason::ClusterUnreachable
            }
        }
    }
}

/// What a workload client is built from, read from the kubeconfig Secret `secret`.
async fn recipe(
    secret: &str,
    data: &k8s_openapi::api::core::v1::Secret,
    timeout: std::time::Duration,
    tls: &TlsConfigs,
) -> Result<Recipe, WorkloadError> {
    let unusable = |why: &'static str| WorkloadError::Unusable { secret: secret.to_owned(), why };
    let bytes = data.data.as_ref().and_then(|d| d.get("value")).map(|b| b.0.clone()).unwrap_or_default();
    if bytes.is_empty() {
        return Err(WorkloadError::NoKubeconfig { secret: secret.to_owned() });
    }
    let text = String::from_utf8(bytes).map_err(|_| unusable("is not UTF-8 text"))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|_| unusable("is not a valid kubeconfig (YAML with clusters, users, contexts)"))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.map_err(|e| unusable(unusable_why(&e)))?;
    workload::with_user_agent(&mut config);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config.connect_timeout = Some(timeout.min(std::time::Duration::from_secs(10)));
    workload::Recipe::new(config, tls).map_err(|_| unusable("is a kubeconfig whose TLS settings or server URL cannot be used"))
}

/// What is wrong with a kubeconfig kube cannot make a client of, in words of our own: kube's
/// messages may quote what they could not parse (a key, a token).
fn unusable_why(e: &kube::config::KubeconfigError) -> &'static str {
    use kube::config::KubeconfigError as K;
    match e {
        K::CurrentContextNotSet | K::LoadContext(_) | K::LoadClusterOfContext(_) => {
            "is a kubeconfig without a usable current context (a context naming a cluster and user it defines)"
        }
        K::MissingClusterUrl | K::ParseClusterUrl(_) => "is a kubeconfig whose cluster has no usable server URL",
        K::ParseProxyUrl(_) => "is a kubeconfig whose cluster has a proxy URL that cannot be parsed",
        K::LoadCertificateAuthority(_) | K::ParseCertificates(_) => {
            "is a kubeconfig whose certificate-authority data is not a PEM certificate"
        }
        K::LoadClientCertificate(_) | K::LoadClientKey(_) => "is a kubeconfig whose client certificate or key cannot be read",
        _ => "is a kubeconfig stacksync cannot use",
    }
}

/// One cheap request before a preview (`stacksync diff`): a cluster that is down is skipped in
/// seconds. A sync makes none: its first request is the check (`ApplyOptions::reach_within`).
pub(super) async fn reachable(client: &kube::Client) -> Result<(), Unreachable> {
    match tokio::time::timeout(REACHABLE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 401 => Err(Unreachable::Refused(s.message.clone())),
        // Any other answer (a 403 on /version) is an answer: the cluster is there.
        Ok(Err(kube::Error::Api(_))) => Ok(()),
        Ok(Err(e)) => Err(Unreachable::Failed(e)),
        Err(_) => Err(Unreachable::Timeout(REACHABLE_TIMEOUT.as_secs())),
    }
}

/// A workload cluster that did not answer the reachability check.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreachable {
    /// Said with its causes (`client error (Connect)` alone does not say that the connection
    /// was refused).
    #[error("the workload cluster's API server does not answer: {}", super::client::kube_error(.0))]
    Failed(#[source] kube::Error),
    #[error("the workload cluster's API server did not answer within {0}s")]
    Timeout(u64),
    #[error(
        "the workload cluster refused the credentials of its kubeconfig Secret ({0} 401): its client certificate or token is invalid or expired"
    )]
    Refused(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_secret_and_reasons_match_what_is_wrong() {
        let secret = "ns/c-kubeconfig".to_owned();
        let table = [
            (
                WorkloadError::SecretMissing { secret: secret.clone() },
                Reason::KubeconfigMissing,
                "Secret ns/c-kubeconfig does not exist yet",
            ),
            (
                WorkloadError::NoKubeconfig { secret: secret.clone() },
                Reason::KubeconfigMissing,
                "Secret ns/c-kubeconfig has no key `value`",
            ),
            (
                WorkloadError::Unusable { secret: secret.clone(), why: "is not UTF-8 text" },
                Reason::ClusterUnreachable,
                "Secret ns/c-kubeconfig: key `value` is not UTF-8 text",
            ),
            (WorkloadError::NoClient { secret }, Reason::ClusterUnreachable, "Secret ns/c-kubeconfig: its kubeconfig gave no client"),
        ];
        for (e, reason, message) in table {
            assert_eq!((e.reason(), e.to_string()), (reason, message.to_owned()));
        }
    }
}
