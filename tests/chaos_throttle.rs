//! An API server that throttles: it answers 429 with `Retry-After`. stacksync sends nothing to
//! it before the time it said (requests counted at the server), no path loops on it, the log
//! says it once per cause, and the fleet converges once the server accepts again. First with
//! testkit's API server (faults and counting), then with the real kube-apiserver's priority and
//! fairness set low for stacksync's own identity.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::kube::{Kube, Options};

use common::fleet::{CM, Env};
use common::{Daemon, Sub};
use fake_apiserver::{FaultRule, Stats};

/// The management API server answers every ClusterSync write 429 `Retry-After: 4` for 16 s
/// while two Clusters have their release to record: each Cluster's write is retried after the
/// wait, not before. Before, each reconcile retried the write three times in place, then again
/// at 0.5, 1, 2, 4 s: 26 writes in the 16 s, and a warning for each Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_server_answering_429_is_asked_again_only_after_its_retry_after() {
    const RETRY_AFTER: u64 = 4;
    const WINDOW: Duration = Duration::from_secs(16);
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    for name in ["alpha", "beta"] {
        env.add_synced_cluster(name, 0).await;
    }
    env.mgmt.faults().add(FaultRule::new().verb("patch").path("/clustersyncs/").too_many_requests(RETRY_AFTER));
    env.mgmt.reset_stats();
    let config = env.config().write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let stats = env.mgmt.stats();
    let held = started.elapsed();
    let writes = Stats::count(&stats.requests, "patch", "clustersyncs.stacksync.io/status")
        + Stats::count(&stats.requests, "patch", "clustersyncs.stacksync.io");
    let all: u64 = stats.requests.values().flat_map(|m| m.values()).sum();
    // One write per Cluster, then at most one per Cluster and Retry-After (the server's own
    // clock and the jitter may let one more round in).
    let bound = 2 * (held.as_secs() / RETRY_AFTER + 2);
    eprintln!("in {held:?}: {writes} ClusterSync writes (bound {bound}), {all} requests in all: {stats:?}");
    assert!(writes <= bound, "{writes} ClusterSync writes in {held:?} with Retry-After: {RETRY_AFTER} (bound {bound}): {stats:?}");
    assert!(all <= 60, "{all} requests to a throttling server in {held:?}: {stats:?}");
    for name in ["alpha", "beta"] {
        assert_ne!(env.applied(name).await, "v1.0.0", "{name} reported synced although its status could not be written");
    }
    // Once per cause: one warning that the server throttles, none per Cluster and retry.
    let log = daemon.log();
    assert_eq!(log.matches("throttles stacksync").count(), 1, "{log}");
    assert!(!log.contains("cannot record that the apply"), "a warning per Cluster and retry: {log}");

    env.mgmt.faults().clear();
    for name in ["alpha", "beta"] {
        daemon
            .eventually(&format!("{name} Ready after the throttling"), Duration::from_secs(RETRY_AFTER * 2 + 30), async || {
                env.applied(name).await == "v1.0.0"
            })
            .await;
    }
    daemon.stop().await;
}

/// The workload API server answers every server-side apply 429 `Retry-After: 8` for 16 s: the
/// Cluster is retried after the wait, not on the backoff's 0.5, 1, 2, 4 s (5 applies before), and
/// synced once the server accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_server_answering_429_is_asked_again_only_after_its_retry_after() {
    const RETRY_AFTER: u64 = 8;
    const WINDOW: Duration = Duration::from_secs(16);
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_synced_cluster("alpha", 0).await;
    env.workloads[0].faults().add(FaultRule::new().verb("patch").too_many_requests(RETRY_AFTER));
    env.workloads[0].reset_stats();
    let config = env.config().write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let stats = env.workloads[0].stats();
    let held = started.elapsed();
    let patches: u64 = stats.requests.get("patch").map(|m| m.values().sum()).unwrap_or(0);
    let bound = held.as_secs() / RETRY_AFTER + 2;
    eprintln!("in {held:?}: {patches} applies (bound {bound}): {stats:?}");
    assert!(patches >= 1, "the sync never reached the workload server: {stats:?}");
    assert!(patches <= bound, "{patches} applies in {held:?} with Retry-After: {RETRY_AFTER} (bound {bound}): {stats:?}");
    assert_ne!(env.applied("alpha").await, "v1.0.0", "reported synced although nothing was applied");
    let log = daemon.log();
    assert_eq!(log.matches("throttles stacksync").count(), 1, "{log}");

    env.workloads[0].faults().clear();
    daemon
        .eventually("alpha Ready after the throttling", Duration::from_secs(RETRY_AFTER * 2 + 30), async || {
            env.applied("alpha").await == "v1.0.0"
        })
        .await;
    assert!(env.configmap(0, "addon-alpha").await.is_some(), "the object was not applied after the throttling");
    daemon.stop().await;
}

/// The identity stacksync runs as on the real server: the shipped ServiceAccount (deploy/rbac.yaml),
/// impersonated by the admin kubeconfig (the admin itself, `system:masters`, is exempt from
/// priority and fairness).
const SA: &str = "system:serviceaccount:stacksync-system:stacksync";
const REAL_NS: &str = "fleet";

/// Puts `SA` at one seat of the server's concurrency, nothing borrowed, no queue: every request
/// of it beyond one in flight is answered 429 by the real priority-and-fairness filter.
const FLOW_CONTROL: &str = "apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: stacksync-slow
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Reject
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: stacksync-slow
spec:
  priorityLevelConfiguration:
    name: stacksync-slow
  matchingPrecedence: 150
  distinguisherMethod:
    type: ByUser
  rules:
    - subjects:
        - kind: ServiceAccount
          serviceAccount: {name: stacksync, namespace: stacksync-system}
      resourceRules:
        - verbs: [\"*\"]
          apiGroups: [\"*\"]
          resources: [\"*\"]
          clusterScope: true
          namespaces: [\"*\"]
      nonResourceRules:
        - verbs: [\"*\"]
          nonResourceURLs: [\"*\"]
";

/// The requests of `SA` in the audit log: seconds since the first, response code, verb and URI.
fn audited(log: &std::path::Path) -> Vec<(f64, u16, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let events: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let mine: Vec<(chrono::DateTime<chrono::Utc>, u16, String)> = events
        .iter()
        .filter(|e| e["user"]["username"] == SA || e["impersonatedUser"]["username"] == SA)
        .filter_map(|e| {
            let at = chrono::DateTime::parse_from_rfc3339(e["requestReceivedTimestamp"].as_str()?).ok()?.with_timezone(&chrono::Utc);
            let what = format!("{} {}", e["verb"].as_str()?, e["requestURI"].as_str()?);
            Some((at, u16::try_from(e["responseStatus"]["code"].as_u64()?).ok()?, what))
        })
        .collect();
    let first = mine.iter().map(|(t, ..)| *t).min().unwrap_or_default();
    let mut out: Vec<_> = mine.into_iter().map(|(t, c, w)| ((t - first).num_milliseconds() as f64 / 1000.0, c, w)).collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The shortest time between a 429 to one Cluster's reconcile (a read or write of its
/// ClusterSync or kubeconfig Secret, by name) and the next request of the same verb and URI:
/// how soon refused work was sent again.
fn soonest_retry(requests: &[(f64, u16, String)]) -> Option<f64> {
    let one_clusters = |what: &str| !what.starts_with("watch ") && (what.contains("/clustersyncs/") || what.contains("/secrets/"));
    requests
        .iter()
        .enumerate()
        .filter(|(_, (_, code, what))| *code == 429 && one_clusters(what))
        .filter_map(|(i, (t, _, what))| requests[i + 1..].iter().find(|(_, _, w)| w == what).map(|(next, ..)| (next - t, what)))
        .inspect(|(d, w)| {
            if *d < 1.0 {
                eprintln!("sent again {d}s after a 429: {w}");
            }
        })
        .map(|(d, _)| d)
        .reduce(f64::min)
}

/// Promise: with API priority and fairness on the real kube-apiserver putting stacksync's own
/// identity at one seat with no queue (it answers 429 with its `Retry-After`), stacksync
/// converges, sends nothing in a loop (its requests and the 429s counted in the server's audit
/// log), and says it is throttled once, not per request or per Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_throttling_stacksync_is_waited_out_not_hammered() {
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    }
    const N: usize = 12;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let flow = dir.path().join("flow-control.yaml");
    std::fs::write(&flow, format!("{FLOW_CONTROL}---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {REAL_NS}\n")).expect("write");
    // Applied in order once the server is up: CRDs, stacksync's namespace and RBAC (what the
    // shipped Deployment runs with), the flow control, the fleet's namespace.
    let kube = Kube::start(Options {
        preload: vec![
            fake_apiserver::capi_crds_dir(),
            root.join("deploy/crds"),
            root.join("deploy/namespace.yaml"),
            root.join("deploy/rbac.yaml"),
            flow,
        ],
        audit: true,
        priority_and_fairness: Some(60),
        ..Options::default()
    })
    .await
    .expect("control plane");

    // The fleet, written as the admin (exempt); each Cluster's kubeconfig is the admin's too:
    // what is throttled is stacksync's management identity.
    let client = kube.client().await.expect("client");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), REAL_NS, &common::res("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), REAL_NS);
    let admin = std::fs::read(kube.kubeconfig()).expect("kubeconfig");
    for i in 0..N {
        let name = format!("c{i:02}");
        let body = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": REAL_NS, "labels": {"fleet": "later"}},
            "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
        });
        clusters.patch(&name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": true}});
        clusters.patch_status(&name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.metadata.namespace = Some(REAL_NS.into());
        secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(admin.clone()))].into());
        secrets.create(&PostParams::default(), &secret).await.expect("secret");
    }
    let mut kubeconfig: serde_json::Value = serde_json::from_slice(&admin).expect("json kubeconfig");
    kubeconfig["users"][0]["user"]["as"] = json!(SA);
    let as_sa = dir.path().join("stacksync.kubeconfig");
    std::fs::write(&as_sa, kubeconfig.to_string()).expect("write");

    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{cluster.name}}-addon\n  namespace: {REAL_NS}\ndata:\n  cluster: ${{cluster.name}}\n"
    );
    repo.release("v1.0.0", &[("manifests/addon.yaml", &cm)]);
    let config = common::config::Config::new(dir.path())
        .git("stacks", &repo.file_url())
        .sub(Sub::new("throttled", "stacks").health_timeout("0s").interval("5s").select("fleet", "throttled"))
        .kubernetes(&as_sa)
        .kubernetes_set("notReadyRetry", "2s")
        .write();
    let daemon = Daemon::start(&config, dir.path().join("daemon.log")).await;
    // Its watches listed (through the same throttle) and its source polled before any Cluster is
    // its own: a watch's first list completing is a change of every Cluster, which reconciles
    // them at once whatever their backoff (kube-runtime's controller) — not what is measured.
    daemon.eventually("ready", Duration::from_secs(120), async || daemon.get("/readyz").await.0 == 200).await;
    for i in 0..N {
        let label = json!({"metadata": {"labels": {"fleet": "throttled"}}});
        clusters.patch(&format!("c{i:02}"), &PatchParams::default(), &Patch::Merge(label)).await.expect("label");
    }
    let syncs: Api<DynamicObject> = Api::namespaced_with(client.clone(), REAL_NS, &common::res("stacksync.io", "v1alpha1", "ClusterSync"));
    let ready = async || {
        let list = syncs.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        list.iter()
            .filter(|o| {
                let v = serde_json::to_value(o).unwrap_or_default();
                common::condition(&v, "Ready")["status"] == "True" && v["status"]["appliedRelease"]["tag"] == "v1.0.0"
            })
            .count()
    };
    let took = daemon.eventually("every Cluster Ready", Duration::from_secs(240), async || ready().await == N).await;
    // Twenty seconds of steady state under the same limits: what it sends when nothing changes.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let requests = audited(&kube.audit_log());
    let log = daemon.log();
    daemon.stop().await;

    if std::env::var_os("SHOWLOG").is_some() {
        eprintln!("{log}");
    }
    let refused: Vec<f64> = requests.iter().filter(|(_, c, _)| *c == 429).map(|(t, ..)| *t).collect();
    let span = requests.iter().map(|(t, ..)| *t).fold(0.0, f64::max);
    let soonest = soonest_retry(&requests);
    let busiest = (0..=span as usize).map(|s| refused.iter().filter(|t| **t as usize == s).count()).max().unwrap_or(0);
    eprintln!(
        "{N} Clusters Ready in {took:?}; {} requests of {SA} in {span:.0}s, {} answered 429 (at most {busiest} in one second); refused work sent again {soonest:?}s after at the soonest",
        requests.len(),
        refused.len()
    );
    assert!(!refused.is_empty(), "the server never throttled stacksync: the test proves nothing");
    // The server says `Retry-After: 1`: a Cluster's refused work is not sent again sooner.
    assert!(soonest.is_none_or(|s| s >= 0.95), "a Cluster's refused request was sent again after {soonest:?}s");
    // Each Cluster's sync is a handful of management requests; a hot loop is thousands.
    assert!(requests.len() <= 60 * N, "{} requests for {N} Clusters", requests.len());
    assert!(busiest <= 3 * N, "{busiest} requests answered 429 in one second");
    let said: Vec<&str> = log.lines().filter(|l| l.contains("throttles stacksync")).collect();

    assert!(!said.is_empty() && said.len() <= 2, "said once per cause (429, perhaps 503), not per request:\n{}", said.join("\n"));
    assert!(said.iter().all(|l| l.contains(" WARN ")), "{said:?}");
}
