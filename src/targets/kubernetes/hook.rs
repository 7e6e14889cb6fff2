//! What the Cluster API runtime hook answers (`runtime::hooks` serves it over HTTPS). Cluster
//! API asks before it upgrades a Cluster (`BeforeClusterUpgrade`) and tells after its control
//! plane first came up (`AfterControlPlaneInitialized`). The answer comes from the Cluster's
//! `ClusterSync`, which the controller keeps: the hook never runs stages itself, it reads how far
//! they are and asks the controller (the `stacksync.io/reconcile-requested-at` annotation) to
//! look at the Cluster now when they are not done.
//!
//! The decision is pure ([`decide`]); reading the ClusterSync and writing the annotation are the
//! only I/O, each with the management client's request deadline.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::client::management_client;
use super::error::ClientError;
use super::error::kube_error;
use super::reconcile::decide::{subscription_for, topology_class};
use super::reconcile::upgrade::DONE;
use super::settings::target;
use crate::config::{Config, Format, KubernetesTarget, Target};
use crate::model::ClusterKey;
use crate::model::sync::MutexExt;
use crate::status::crd::{ClusterSync, ClusterSyncStatus, RECONCILE_REQUESTED_AT};

/// How long Cluster API is asked to wait before it asks again while stages run. It may ask
/// sooner (any change of the Cluster makes it reconcile); the stages' own polls are 2–30 s.
pub const RETRY_AFTER_SECONDS: u32 = 10;

/// The answer to one hook call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `status: Success`, `retryAfterSeconds: 0`: go on.
    Proceed(String),
    /// `status: Success` with `retryAfterSeconds`: not yet (a blocking hook holds the upgrade).
    Retry(String),
    /// `status: Failure`: the upgrade stages failed; the message says where and why.
    Fail(String),
}

impl Answer {
    /// A short label for logs and the metric (`proceed`, `retry`, `failure`).
    pub fn label(&self) -> &'static str {
        match self {
            Answer::Proceed(_) => "proceed",
            Answer::Retry(_) => "retry",
            Answer::Fail(_) => "failure",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Answer::Proceed(m) | Answer::Retry(m) | Answer::Fail(m) => m,
        }
    }
}

/// Whom a hook call is about, as far as the config tells (pure).
#[derive(Debug, PartialEq, Eq)]
pub enum Covered {
    /// No subscription of ours covers it, or it has nothing stacksync runs stages for.
    No(String),
    /// A cluster-stack subscription covers it and its class names release `tag`.
    Release { subscription: String, tag: String },
    /// Its subscription is suspended: stacksync runs nothing for it (`why`), unless it was just
    /// adopted ([`adopted`]).
    Suspended { subscription: String, why: String },
}

/// The reason of the `Reconciling` condition `stacksync adopt` seeds a ClusterSync with.
pub const ADOPTED: &str = "Adopted";

/// Whether the ClusterSync was seeded by `stacksync adopt` and no sync has applied its release
/// since (`status.adopted`): its upgrades are held (the tool it was adopted from no longer holds
/// them, stacksync has not run its stages yet).
pub fn adopted(status: Option<&ClusterSyncStatus>) -> bool {
    status.is_some_and(|s| s.adopted.is_some())
}

/// Which subscription covers the request's Cluster and which release its class names — the
/// matching the reconcile uses ([`subscription_for`]). Pure.
pub fn covered(config: &Config, key: &ClusterKey, cluster: &Value) -> Covered {
    if matches!(config.target, Target::Directory(_)) {
        return Covered::No("the directory target manages no Clusters".into());
    }
    let labels: BTreeMap<String, String> = cluster
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    let class = topology_class(cluster);
    let Some((sub, _)) = subscription_for(config, key, &labels, class.as_deref()) else {
        return Covered::No(format!("no stacksync subscription covers Cluster {key}"));
    };
    if sub.suspend {
        let why = format!("subscription {} is suspended; stacksync runs nothing for Cluster {key}", sub.name);
        return Covered::Suspended { subscription: sub.name.clone(), why };
    }
    let (Format::ClusterStack, Some(families)) = (sub.format, sub.families()) else {
        return Covered::No(format!("subscription {} is not a cluster stack; it has no upgrade stages", sub.name));
    };
    let Some(class) = class else { return Covered::No(format!("Cluster {key} has no spec.topology.class")) };
    if families.covers_class(&class) {
        Covered::Release { subscription: sub.name.clone(), tag: class }
    } else {
        Covered::No(format!("class {class} is not a release of stack {} (subscription {})", families.describe(), sub.name))
    }
}

/// The answer to `BeforeClusterUpgrade` for a Cluster whose class names release `want`, from
/// its ClusterSync's status (`None`: no ClusterSync yet). Pure.
///
/// Success once `want` is applied or its stages are done; failure while a stage has failed (the
/// controller keeps trying: a later call may succeed); otherwise retry.
pub fn decide(key: &ClusterKey, want: &str, status: Option<&ClusterSyncStatus>) -> Answer {
    let Some(s) = status else {
        return Answer::Retry(format!("stacksync has not reconciled Cluster {key} yet; the upgrade stages of {want} run first"));
    };
    if s.applied_release.as_ref().is_some_and(|r| r.tag == want) {
        return Answer::Proceed(format!("release {want} is applied to Cluster {key}"));
    }
    if let Some(u) = s.upgrade.as_ref().filter(|u| u.to == want) {
        if u.phase == DONE {
            return Answer::Proceed(format!("the {} stages of {want} are done for Cluster {key}", u.hook));
        }
        if !u.failure.is_empty() {
            return Answer::Fail(format!("Cluster {key}: {}", u.failure));
        }
        let stage = format!("{} stage {}/{} `{}` {}", u.hook, u.stage_index + 1, u.stages, u.stage, u.phase);
        return Answer::Retry(match u.waiting_for.as_str() {
            "" => format!("Cluster {key}: {stage} ({} → {})", u.from, u.to),
            why => format!("Cluster {key}: {stage} ({} → {}): {why}", u.from, u.to),
        });
    }
    if s.class.as_deref() != Some(want) {
        return Answer::Retry(format!(
            "stacksync has not reconciled Cluster {key} with class {want} yet (last seen: {}); its upgrade stages run first",
            s.class.as_deref().unwrap_or("none")
        ));
    }
    // Seen, but the stages have not started: the release is not available yet, or its render
    // failed. The ClusterSync's message says which.
    let why = if s.message.is_empty() { "its upgrade stages have not started" } else { s.message.as_str() };
    Answer::Retry(format!("Cluster {key} waits for release {want}: {why}"))
}

/// The hook's state: the config in force (reloaded with the daemon's) and a management client
/// for it, built on first use and again when the target changes.
pub struct Hooks {
    config: Mutex<Arc<Config>>,
    client: tokio::sync::Mutex<Option<(KubernetesTarget, kube::Client)>>,
}

impl Hooks {
    pub fn new(config: Config) -> Arc<Hooks> {
        Arc::new(Hooks { config: Mutex::new(Arc::new(config)), client: tokio::sync::Mutex::new(None) })
    }

    /// Puts a reloaded config in force for the next calls.
    pub fn set_config(&self, config: Config) {
        *self.config.locked() = Arc::new(config);
    }

    fn config(&self) -> Arc<Config> {
        self.config.locked().clone()
    }

    async fn mgmt(&self, config: &Config) -> Result<kube::Client, ClientError> {
        let k = target(config);
        let mut slot = self.client.lock().await;
        if let Some((t, client)) = slot.as_ref()
            && *t == k
        {
            return Ok(client.clone());
        }
        let client = management_client(&k).await?;
        *slot = Some((k, client.clone()));
        Ok(client)
    }

    /// `BeforeClusterUpgrade` for `cluster` (the request's Cluster object, v1beta1 or v1beta2).
    /// While the stages are not done, the controller is asked to reconcile the Cluster now.
    /// Never fails: what cannot be read is a retry with the reason (Cluster API asks again).
    pub async fn before_cluster_upgrade(&self, key: &ClusterKey, cluster: &Value) -> Answer {
        let config = self.config();
        let want = match covered(&config, key, cluster) {
            Covered::No(why) => return Answer::Proceed(why),
            Covered::Suspended { subscription, why } => return self.suspended(&config, key, &subscription, why).await,
            Covered::Release { tag, .. } => tag,
        };
        let syncs = match self.mgmt(&config).await {
            Ok(client) => Api::<ClusterSync>::namespaced(client, &key.namespace),
            Err(e) => return Answer::Retry(format!("stacksync cannot reach the management cluster: {e}")),
        };
        let current = match syncs.get_opt(&key.name).await {
            Ok(c) => c,
            Err(e) => return Answer::Retry(format!("cannot read ClusterSync {key}: {}", kube_error(&e))),
        };
        let answer = decide(key, &want, current.as_ref().and_then(|c| c.status.as_ref()));
        if matches!(answer, Answer::Retry(_))
            && let Some(cs) = &current
        {
            nudge(&syncs, key, cs).await;
        }
        answer
    }

    /// `BeforeClusterUpgrade` for a Cluster of a suspended subscription: it goes on, unless its
    /// ClusterSync was seeded by `stacksync adopt` and not synced since — then nobody would run
    /// its upgrade stages, and it is held until the subscription is resumed.
    async fn suspended(&self, config: &Config, key: &ClusterKey, subscription: &str, why: String) -> Answer {
        let syncs = match self.mgmt(config).await {
            Ok(client) => Api::<ClusterSync>::namespaced(client, &key.namespace),
            Err(e) => return Answer::Retry(format!("stacksync cannot reach the management cluster: {e}")),
        };
        match syncs.get_opt(&key.name).await {
            Ok(cs) if adopted(cs.as_ref().and_then(|c| c.status.as_ref())) => Answer::Retry(format!(
                "Cluster {key} was adopted by stacksync and subscription {subscription} is suspended: its upgrade is held until the subscription is resumed and has synced it"
            )),
            Ok(_) => Answer::Proceed(why),
            Err(e) => Answer::Retry(format!("cannot read ClusterSync {key}: {}", kube_error(&e))),
        }
    }

    /// `AfterControlPlaneInitialized`: non-blocking, always a success; a Cluster of ours is
    /// reconciled now (its install stages start without waiting for the next watch event).
    pub async fn after_control_plane_initialized(&self, key: &ClusterKey, cluster: &Value) -> Answer {
        let config = self.config();
        let covered = match covered(&config, key, cluster) {
            Covered::No(why) | Covered::Suspended { why, .. } => return Answer::Proceed(why),
            Covered::Release { subscription, .. } => subscription,
        };
        if let Ok(client) = self.mgmt(&config).await {
            let syncs = Api::<ClusterSync>::namespaced(client, &key.namespace);
            if let Ok(Some(cs)) = syncs.get_opt(&key.name).await {
                nudge(&syncs, key, &cs).await;
            }
        }
        Answer::Proceed(format!("Cluster {key} (subscription {covered}) gets its addons from stacksync"))
    }
}

/// Asks the controller to reconcile the Cluster now, unless a request is already pending (one
/// outstanding request per Cluster however often Cluster API calls).
async fn nudge(syncs: &Api<ClusterSync>, key: &ClusterKey, cs: &ClusterSync) {
    let requested = cs.metadata.annotations.as_ref().and_then(|a| a.get(RECONCILE_REQUESTED_AT));
    let handled = cs.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_ref());
    if requested.is_some() && requested != handled {
        debug!(cluster = %key, "a reconcile request is already pending");
        return;
    }
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let body = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_AT: at}}});
    if let Err(e) = syncs.patch(&key.name, &PatchParams::default(), &Patch::Merge(body)).await {
        warn!(cluster = %key, error = %kube_error(&e), "runtime hook: cannot request a reconcile");
    }
}

/// A request's deadline inside Cluster API's (10 s by default): answer before it gives up.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(8);

#[cfg(test)]
mod tests {
    use super::super::reconcile::upgrade::HOOK;
    use super::*;
    use crate::status::crd::{ReleaseRefStatus, UpgradeStatus};

    const V3: &str = "docker-ferrol-1-27-v3";
    const V4: &str = "docker-ferrol-1-27-v4";

    fn key() -> ClusterKey {
        ClusterKey::new("team-a", "alpha")
    }

    fn status(class: &str, applied: &str, upgrade: Option<UpgradeStatus>) -> ClusterSyncStatus {
        ClusterSyncStatus {
            class: Some(class.into()),
            applied_release: Some(ReleaseRefStatus { tag: applied.into(), ..ReleaseRefStatus::default() }),
            upgrade,
            message: "render failed: boom".into(),
            ..ClusterSyncStatus::default()
        }
    }

    fn upgrade(phase: &str, failure: &str) -> UpgradeStatus {
        UpgradeStatus {
            hook: HOOK.into(),
            from: V3.into(),
            to: V4.into(),
            stage_index: 1,
            stages: 3,
            stage: "cni".into(),
            phase: phase.into(),
            waiting_for: "`gate.data.go == 'yes'` is false".into(),
            failure: failure.into(),
            ..UpgradeStatus::default()
        }
    }

    fn config(extra: &str) -> Config {
        let text = format!(
            "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: /tmp/cache\nsources:\n  - name: stacks\n    git:\n      url: https://example.test/stacks.git\nsubscriptions:\n  - name: ferrol\n    source: stacks\n    stack: docker-ferrol-1-27\n    format: clusterstack\n    interval: 1h\n{extra}    clusterSelector:\n      matchLabels: {{stack: ferrol}}\ntarget:\n  kubernetes: {{}}\n"
        );
        Config::parse(std::path::Path::new("stacksync.yaml"), &text).unwrap()
    }

    #[test]
    fn a_cluster_is_covered_as_the_reconcile_matches_it() {
        let cluster = |labels: Value, topology: Value| json!({"metadata": {"name": "alpha", "namespace": "team-a", "labels": labels}, "spec": {"topology": topology}});
        let ours = json!({"stack": "ferrol"});
        let table = [
            (config(""), cluster(ours.clone(), json!({"class": V4})), Ok(V4)),
            // v1beta2 names the class in classRef.
            (config(""), cluster(ours.clone(), json!({"classRef": {"name": V4}})), Ok(V4)),
            (config(""), cluster(json!({}), json!({"class": V4})), Err("no stacksync subscription covers Cluster team-a/alpha")),
            (config(""), cluster(ours.clone(), json!({"class": "other-stack-1-27-v1"})), Err("is not a release of stack")),
            (config(""), cluster(ours.clone(), json!({})), Err("has no spec.topology.class")),
            (config("    suspend: true\n"), cluster(ours.clone(), json!({"class": V4})), Err("is suspended")),
        ];
        for (config, c, want) in table {
            let got = covered(&config, &key(), &c);
            match (want, &got) {
                (Ok(tag), Covered::Release { tag: t, subscription }) => assert_eq!((t.as_str(), subscription.as_str()), (tag, "ferrol")),
                (Err(why), Covered::No(m) | Covered::Suspended { why: m, .. }) => assert!(m.contains(why), "{m}"),
                _ => panic!("{c}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn the_answer_follows_the_cluster_sync() {
        let table: Vec<(Option<ClusterSyncStatus>, &str, &str)> = vec![
            (None, "retry", "has not reconciled"),
            (Some(status(V3, V3, None)), "retry", "with class docker-ferrol-1-27-v4 yet (last seen: docker-ferrol-1-27-v3)"),
            (Some(status(V4, V3, None)), "retry", "waits for release docker-ferrol-1-27-v4: render failed: boom"),
            (Some(status(V4, V3, Some(upgrade("PostCondition", "")))), "retry", "stage 2/3 `cni` PostCondition"),
            (Some(status(V4, V3, Some(upgrade("PostCondition", "stage `cni` not done within stageTimeout")))), "failure", "stageTimeout"),
            (Some(status(V4, V3, Some(upgrade(DONE, "")))), "proceed", "stages of docker-ferrol-1-27-v4 are done"),
            (Some(status(V4, V4, None)), "proceed", "is applied"),
            // Stages of an earlier move (to v3) say nothing about v4.
            (Some(status(V4, V3, Some(UpgradeStatus { to: V3.into(), ..upgrade(DONE, "") }))), "retry", "waits for release"),
        ];
        for (st, want, text) in table {
            let a = decide(&key(), V4, st.as_ref());
            assert_eq!(a.label(), want, "{st:?} -> {a:?}");
            assert!(a.message().contains(text), "{a:?} lacks {text:?}");
            assert!(a.message().contains("team-a/alpha"), "{a:?} names no Cluster");
        }
    }
}
