//! The management cluster's clients: one for requests (every request has a deadline, no
//! retry of kube's own) and one for watches (kube's timeouts), from the target's kubeconfig
//! or the in-cluster environment; and Cluster API's `Cluster` as the management cluster serves it.

use kube::api::{ApiResource, GroupVersionKind};

use super::error::{ClientError, Error};
use super::reconcile::workload::Throttle;
use crate::config::KubernetesTarget;

/// Connects to the management cluster.
///
/// # Errors
/// The kubeconfig cannot be read or the client cannot be built.
pub async fn management_client(k: &KubernetesTarget) -> Result<kube::Client, ClientError> {
    Ok(throttled_management_client(k).await?.0)
}

/// [`management_client`] and its [`Throttle`]: what the server said about waiting (429/503 with
/// `Retry-After`), which the controller takes as the lower bound of a Cluster's next retry.
///
/// # Errors
/// As [`management_client`].
pub(super) async fn throttled_management_client(k: &KubernetesTarget) -> Result<(kube::Client, Throttle), ClientError> {
    let mut config = management_config(k).await?;
    // Every request has a deadline: a frozen API server fails a reconcile, it never hangs it.
    config.read_timeout = Some(k.request_timeout);
    config.write_timeout = Some(k.request_timeout);
    // A request cut by it says its value (a bare `TimedOut` does not carry it).
    applier::ssa::set_request_timeout(k.request_timeout);
    config.connect_timeout = Some(k.request_timeout.min(std::time::Duration::from_secs(10)));
    // kube's default retry waits out 429/503 for minutes (15 attempts, up to 1000 s apart):
    // a failed request fails the reconcile at once, and the controller retries it with its own
    // jittered backoff, per Cluster, without holding a worker. What the server says about
    // waiting (`Retry-After`) is kept by the throttle: the lower bound of that backoff.
    config.default_retry = false;
    let throttle = Throttle::new("the management API server");
    let client = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?.with_layer(&throttle.layer()).build();
    Ok((client, throttle))
}

/// A client for the management cluster's watches: a watch is a long request (the server ends
/// it after about five minutes) that may be silent for a while, so it keeps kube's own timeouts,
/// and kube's own retry, which waits out a 429's or 503's `Retry-After` (the watcher's backoff
/// follows when it gives up).
///
/// # Errors
/// As [`management_client`].
pub async fn management_watch_client(k: &KubernetesTarget) -> Result<kube::Client, ClientError> {
    let config = management_config(k).await?;
    kube::Client::try_from(config).map_err(ClientError::Build)
}

async fn management_config(k: &KubernetesTarget) -> Result<kube::Config, ClientError> {
    let mut config = match &k.kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig { path: path.clone(), source })?;
            let opts = kube::config::KubeConfigOptions { context: k.context.clone(), ..Default::default() };
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|source| ClientError::Kubeconfig { path: path.clone(), source })?
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer)?,
    };
    super::reconcile::workload::with_user_agent(&mut config);
    Ok(config)
}

/// `cluster.x-k8s.io` `Cluster` at the newest version the management cluster serves. A server
/// that does not answer is a `Discovery` error, never "Cluster API is not installed".
pub async fn cluster_resource(mgmt: &kube::Client) -> Result<ApiResource, Error> {
    let groups = mgmt.list_api_groups().await.map_err(Error::Discovery)?;
    let Some(group) = groups.groups.iter().find(|g| g.name == "cluster.x-k8s.io") else { return Err(Error::ClusterApiMissing) };
    for version in ["v1beta2", "v1beta1"] {
        if !group.versions.iter().any(|v| v.version == version) {
            continue;
        }
        let resources = mgmt.list_api_group_resources(&format!("cluster.x-k8s.io/{version}")).await.map_err(Error::Discovery)?;
        if let Some(r) = resources.resources.iter().find(|r| r.kind == "Cluster" && !r.name.contains('/')) {
            return Ok(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster"), &r.name));
        }
    }
    Err(Error::ClusterApiMissing)
}
