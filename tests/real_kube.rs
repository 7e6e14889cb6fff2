//! The Kubernetes target on real Kubernetes: one real control plane per test binary
//! (`testkit::kube::shared`: etcd, kube-apiserver, controller-manager, scheduler, kwok), each
//! test a tenant with a namespace of its own. What is claimed here is refereed by the real
//! server and the real controllers: server-side apply and its managedFields, defaulting,
//! Deployments becoming Available (a ClusterSync is Ready because the Deployment really is),
//! garbage collection of a deleted Cluster's ClusterSync, Events as `kubectl get events` shows
//! them, printer columns as `kubectl get` prints them, deploy/ and its RBAC installed for real,
//! and examples/kubernetes run as a user runs it. Faults and request counting stay on
//! testkit's API server (tests/controller.rs, tests/kubernetes_target.rs, tests/apply_kube/).
//! Cluster API is played by the test.
//!
//! Run against your own cluster: `STACKSYNC_TEST_KUBECONFIG=~/.kube/config cargo test --test real_kube`
//! (Cluster API's CRDs and deploy/crds installed there; the tests write only in namespaces
//! named `e2e-…` and their cluster-scoped StackReleases named after them).

mod common;

use std::time::Duration;

use common::real::Tenant;
use common::{Daemon, condition};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// A ConfigMap and a Deployment in the Cluster's own namespace (its workload cluster is the
/// same real server); kwok runs the Deployment's pod.
fn addons(deployment_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-${{cluster.name}}\n  namespace: ${{cluster.namespace}}\ndata:\n  cluster: ${{cluster.name}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ccm-${{cluster.name}}\n  namespace: ${{cluster.namespace}}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: ccm-${{cluster.name}}}}\n  template:\n    metadata:\n      labels: {{app: ccm-${{cluster.name}}}}\n    spec:\n{deployment_extra}      containers:\n        - name: ccm\n          image: registry.example/ccm:1.0\n"
    )
}

/// [`common::eventually`] for what no daemon's log explains.
async fn eventually(what: &str, within: Duration, cond: impl AsyncFnMut() -> bool) -> Duration {
    common::eventually(what, within, cond, String::new).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_sync_is_ready_because_its_deployment_really_became_available() {
    let Some(t) = Tenant::new("available").await else { return };
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", &addons(""))]);
    t.add_cluster("alpha").await;
    let config = t.config(|s| s.health_timeout("2m")).write();
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);

    // Ready, and it is true: the real Deployment controller says Available, kwok runs the pod.
    let (status, reason) = t.ready("alpha").await.expect("ClusterSync");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Synced"), "{}", common::stderr(&o));
    let deployments: Api<Deployment> = Api::namespaced(t.client(), &t.ns);
    let d = deployments.get("ccm-alpha").await.expect("Deployment");
    let st = d.status.expect("status");
    assert_eq!(st.available_replicas, Some(1));
    assert!(
        st.conditions.unwrap_or_default().iter().any(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"))
    );
    let pods: Api<Pod> = Api::namespaced(t.client(), &t.ns);
    let running = pods.list(&Default::default()).await.expect("pods").items;
    assert!(
        running.iter().any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            && p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| n.starts_with("kwok-node-"))),
        "no Running pod on a kwok node"
    );

    // The real server defaulted the Deployment (strategy, revisionHistoryLimit, the pod's
    // restartPolicy …), which stacksync neither owns nor fights: a second pass writes nothing.
    let cs = t.cluster_sync("alpha").await.expect("cs");
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    let cs2 = t.cluster_sync("alpha").await.expect("cs");
    assert_eq!(cs["status"]["objects"], cs2["status"]["objects"]);
    let d2 = deployments.get("ccm-alpha").await.expect("Deployment");
    assert_eq!(d2.metadata.generation, d.metadata.generation, "an unchanged pass changed the Deployment's spec");

    // `kubectl get clustersyncs` prints the columns of deploy/crds on the real server.
    let out = t.kubectl(&["get", "clustersyncs", "-n", &t.ns]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = text.lines().next().unwrap_or_default();
    assert!(header.contains("READY") && header.contains("APPLIED") && header.contains("SYNCED"), "{text}");
    assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("alpha") && l.contains("True")), "{text}");
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_that_cannot_become_available_is_not_reported_ready() {
    let Some(t) = Tenant::new("unavailable").await else { return };
    // No Node has this label: the scheduler leaves the pod Pending, the Deployment stays
    // unavailable, and stacksync must say so.
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", &addons("      nodeSelector: {pool: nowhere}\n"))]);
    t.add_cluster("alpha").await;
    let config = t.config(|s| s.health_timeout("3s")).write();
    let o = common::run_once(&config).await;
    let (status, reason) = t.ready("alpha").await.expect("ClusterSync");
    assert_eq!(status, "False", "{}", common::stderr(&o));
    assert_eq!(reason, "Unhealthy", "{}", common::stderr(&o));
    let cs = t.cluster_sync("alpha").await.expect("cs");
    let message = condition(&cs, "Ready")["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("ccm-alpha"), "the message names the Deployment: {message}");

    // Make it schedulable (a Node gets the label): the next pass sees it Available, for real.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(t.client());
    let node = format!("kwok-node-{}", std::process::id() % 3);
    let pp = PatchParams::apply(&format!("e2e-{}", t.ns)).force();
    let label = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"pool": "nowhere"}}});
    nodes.patch(&node, &pp, &Patch::Apply(label)).await.expect("label a node");
    let o = common::run_once(&t.config(|s| s.health_timeout("2m")).write()).await;
    common::assert_exit(&o, 0);
    assert_eq!(t.ready("alpha").await.expect("cs").0, "True", "{}", common::stderr(&o));
    let unlabel = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
    nodes.patch(&node, &pp, &Patch::Apply(unlabel)).await.expect("unlabel the node");
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_taken_back_and_what_a_release_dropped_is_pruned_on_the_real_server() {
    let Some(t) = Tenant::new("drift").await else { return };
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", &addons(""))]);
    t.add_cluster("alpha").await;
    let config = t.config(|s| s.health_timeout("0s")).write();
    common::assert_exit(&common::run_once(&config).await, 0);

    // `kubectl patch` of a field stacksync owns, by the real kubectl: taken back.
    let out = t.kubectl(&["patch", "configmap", "addon-alpha", "-n", &t.ns, "--type=merge", "-p", r#"{"data":{"cluster":"patched"}}"#]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), &t.ns);
    assert_eq!(cms.get("addon-alpha").await.expect("cm").data.unwrap_or_default()["cluster"], "alpha");
    assert!(common::stderr(&o).contains("taken back"), "{}", common::stderr(&o));

    // The managedFields the real server keeps name stacksync as the owner of data.cluster again.
    let cm = cms.get("addon-alpha").await.expect("cm");
    let owners: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.fields_v1.as_ref().is_some_and(|f| f.0.to_string().contains("f:cluster")))
        .filter_map(|m| m.manager)
        .collect();
    assert!(owners.iter().all(|m| m != "kubectl-patch"), "{owners:?}");

    // v1.1.0 drops the Deployment: pruned; the real garbage collector removes its ReplicaSet.
    let only_cm = addons("");
    let cm_doc = only_cm.split("---\n").next().expect("first document");
    t.repo.release("v1.1.0", &[("manifests/addons.yaml", cm_doc)]);
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    let deployments: Api<Deployment> = Api::namespaced(t.client(), &t.ns);
    assert!(deployments.get_opt("ccm-alpha").await.expect("get").is_none(), "{}", common::stderr(&o));
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(t.client(), &t.ns);
    eventually("the garbage collector removes the ReplicaSet", Duration::from_secs(60), async || {
        replica_sets.list(&Default::default()).await.expect("list").items.is_empty()
    })
    .await;
    assert!(cms.get_opt("addon-alpha").await.expect("get").is_some());
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_syncs_a_new_cluster_its_events_show_in_kubectl_and_gc_removes_its_cluster_sync() {
    let Some(t) = Tenant::new("daemon").await else { return };
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", &addons(""))]);
    let config = t.config(|s| s.health_timeout("2m")).write();
    let daemon = Daemon::start(&config, t.dir.path().join("daemon.log")).await;
    t.add_cluster("alpha").await;
    let took = daemon
        .eventually("ClusterSync alpha Ready", Duration::from_secs(90), async || t.ready("alpha").await.is_some_and(|(s, _)| s == "True"))
        .await;
    eprintln!("a new Cluster was Ready (Deployment Available) {:.1}s after it appeared", took.as_secs_f64());

    // The Events stacksync records (events.k8s.io/v1) are what `kubectl get events` shows: the
    // real server keeps one store behind both APIs.
    let shown = daemon
        .eventually("kubectl get events shows stacksync's Events", Duration::from_secs(30), async || {
            let out = t.kubectl(&["get", "events", "-n", &t.ns, "-o", "json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["items"].as_array().is_some_and(|items| {
                items.iter().any(|e| {
                    e["involvedObject"]["kind"] == "ClusterSync"
                        && e["reportingComponent"].as_str().is_some_and(|c| c.contains("stacksync"))
                })
            })
        })
        .await;
    let _ = shown;

    // Cluster API deletes the Cluster: the real garbage collector deletes its ClusterSync (owned
    // by it), the reconciler leaves the rest alone.
    t.clusters().delete("alpha", &Default::default()).await.expect("delete the Cluster");
    daemon
        .eventually("the ClusterSync is garbage-collected", Duration::from_secs(60), async || t.cluster_sync("alpha").await.is_none())
        .await;
    daemon.stop().await;
    t.delete().await;
}

/// deploy/ installed for real with `kubectl apply -k`: the Deployment's pods are scheduled and
/// Running (kwok), and a pass made with the ServiceAccount's own permissions (the admin
/// certificate impersonating `system:serviceaccount:stacksync-system:stacksync`, judged by the
/// real RBAC authorizer) syncs a Cluster — deploy/rbac.yaml is enough, and nothing needs more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_installs_with_kubectl_its_pods_run_and_its_rbac_is_enough_for_a_pass() {
    let Some(t) = Tenant::new("deploy").await else { return };
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let out = t.kubectl(&["apply", "-k", &deploy.display().to_string()]);
    assert!(out.status.success(), "kubectl apply -k deploy/: {}", String::from_utf8_lossy(&out.stderr));
    let out = t.kubectl(&["rollout", "status", "deployment/stacksync", "-n", "stacksync-system", "--timeout=120s"]);
    assert!(out.status.success(), "rollout: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let pods: Api<Pod> = Api::namespaced(t.client(), "stacksync-system");
    let running = pods.list(&Default::default()).await.expect("pods").items;
    let running = running.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count();
    assert!(running >= 2, "{running} stacksync pods Running");

    // The ServiceAccount's permissions, as the real authorizer grants them.
    let mut kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.kubeconfig()).expect("kubeconfig")).expect("json");
    kubeconfig["users"][0]["user"]["as"] = json!("system:serviceaccount:stacksync-system:stacksync");
    let as_sa = t.dir.path().join("serviceaccount.kubeconfig");
    std::fs::write(&as_sa, kubeconfig.to_string()).expect("write");
    let denied = t.kubectl(&["--kubeconfig", &as_sa.display().to_string(), "get", "configmaps", "-n", "kube-system"]);
    assert!(!denied.status.success(), "the ServiceAccount may not read ConfigMaps of the management cluster");
    // The console in the daemon (`--console-addr`) watches the Events it shows.
    let events = t.kubectl(&[
        "--kubeconfig",
        &as_sa.display().to_string(),
        "get",
        "events",
        "-A",
        "--field-selector",
        "involvedObject.kind=Cluster",
    ]);
    assert!(events.status.success(), "the console's Events: {}", String::from_utf8_lossy(&events.stderr));
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", &addons(""))]);
    t.add_cluster("alpha").await;
    let config = t.config(|s| s.health_timeout("2m")).write();
    let text =
        std::fs::read_to_string(&config).expect("config").replace(&t.kubeconfig().display().to_string(), &as_sa.display().to_string());
    std::fs::write(&config, text).expect("config");
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    assert_eq!(t.ready("alpha").await.expect("ClusterSync").0, "True", "{}", common::stderr(&o));
    assert!(!common::stderr(&o).contains("forbidden"), "{}", common::stderr(&o));
    t.delete().await;
}

/// `examples/kubernetes/run.sh` as a user runs it: two real control planes, a Cluster, one
/// pass that waits until the addons' Deployment is really Available, and everything stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_example_syncs_a_cluster_on_two_real_control_planes() {
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    }
    let Some(out) = common::run_example("kubernetes", &["manifests"], &[], Duration::from_secs(400)).await else { return };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("clusters ready"), "{stdout}");
    let deployments = stdout.lines().find(|l| l.starts_with("deployment.apps/")).unwrap_or_default();
    assert!(deployments.contains("1/1"), "the addon Deployment is Available: {stdout}");
    assert!(stdout.contains("Running"), "{stdout}");
    // The Cluster and the subscription agree, and the row says what chose the release: a
    // plain-manifests subscription does not follow the class.
    let row: Vec<&str> = stdout.lines().find(|l| l.starts_with("alpha ")).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row.get(1..4), Some(&["docker-ferrol-1-27-v1", "subscription", "docker-ferrol-1-27-v1"][..]), "{stdout}");
}

/// Leader election on the real Lease API (resourceVersion preconditions, the real server's
/// clock for renewals): of two replicas one holds the Lease and syncs, a killed leader is
/// replaced once the Lease expires, and SIGTERM releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_on_a_real_lease_hands_over_and_releases() {
    let Some(t) = Tenant::new("lease").await else { return };
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", &addons(""))]);
    t.add_cluster("alpha").await;
    let config = t.config(|s| s.health_timeout("0s")).write();
    let args = ["--leader-elect", "--lease-namespace", t.ns.as_str(), "--lease-duration", "8s"];
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(t.client(), &t.ns);
    let holder = async || -> Option<String> {
        leases.get_opt("stacksync").await.expect("get lease")?.spec?.holder_identity.filter(|h| !h.is_empty())
    };
    let mut a = Daemon::start_with(&config, t.dir.path().join("a.log"), &args).await;
    a.eventually("a leads and syncs", Duration::from_secs(60), async || t.ready("alpha").await.is_some_and(|(s, _)| s == "True")).await;
    let a_id = format!("_{}", a.pid());
    assert!(holder().await.is_some_and(|h| h.ends_with(&a_id)), "{:?}", holder().await);

    let b = Daemon::start_with(&config, t.dir.path().join("b.log"), &args).await;
    let b_id = format!("_{}", b.pid());
    // Longer than the lease: the leader's renewals, not luck, keep it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(holder().await.is_some_and(|h| h.ends_with(&a_id)), "the standby took a held Lease: {:?}", holder().await);

    // The leader dies without releasing: the standby takes over once the Lease expires.
    a.kill().await;
    let took =
        b.eventually("b takes over the Lease", Duration::from_secs(40), async || holder().await.is_some_and(|h| h.ends_with(&b_id))).await;
    eprintln!("handover on the real Lease API after {took:?} (lease 8s)");
    b.stop().await;
    assert_eq!(holder().await, None, "SIGTERM did not release the Lease");
    t.delete().await;
}

/// A cluster-stack release on the real server: its ClusterClass and templates accepted in the
/// Cluster's namespace, its addons rendered by the real helm and Ready for real; then the class
/// moves (Cluster API's part, played here) to a release with `BeforeClusterUpgrade` stages, which
/// run in order and wait for their CEL post-condition on the real server before the new
/// release's addons are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_stack_upgrade_runs_its_stages_on_the_real_server() {
    let Some(t) = Tenant::new("stack").await else { return };
    common::fleet::publish(&t.repo, "docker-ferrol-1-27-v3");
    common::fleet::publish_v4_with_upgrade_stages(&t.repo);
    t.add_cluster("alpha").await;
    let topology = json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v3", "version": "v1.27.3"}, "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}}}});
    t.clusters().patch("alpha", &PatchParams::default(), &Patch::Merge(topology)).await.expect("class");
    let config = t.stack_config(|s| s.set("availableReleases", 2).set("stageTimeout", "1h").health_timeout("2m")).write();
    let daemon = Daemon::start(&config, t.dir.path().join("daemon.log")).await;
    let applied = async || {
        t.cluster_sync("alpha").await.unwrap_or_default()["status"]["appliedRelease"]["tag"].as_str().unwrap_or_default().to_owned()
    };
    daemon
        .eventually("alpha Ready on v3", Duration::from_secs(120), async || {
            applied().await == "docker-ferrol-1-27-v3" && t.ready("alpha").await.is_some_and(|(s, _)| s == "True")
        })
        .await;
    let classes = t.kubectl(&["get", "clusterclasses", "-n", &t.ns, "-o", "name"]);
    let classes = String::from_utf8_lossy(&classes.stdout).into_owned();
    assert!(classes.contains("docker-ferrol-1-27-v3") && classes.contains("docker-ferrol-1-27-v4"), "{classes}");

    // The class moves to v4: its stages run; stage 2 waits for the gate on the real server.
    let to_v4 = json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v4"}}});
    t.clusters().patch("alpha", &PatchParams::default(), &Patch::Merge(to_v4)).await.expect("class");
    let upgrade = async || t.cluster_sync("alpha").await.unwrap_or_default()["status"]["upgrade"].clone();
    daemon
        .eventually("waiting at stage 2's post-condition", Duration::from_secs(60), async || {
            let u = upgrade().await;
            u["stage"] == "cni" && u["phase"] == "PostCondition"
        })
        .await;
    assert_eq!(applied().await, "docker-ferrol-1-27-v3");
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), "kube-system");
    let gate = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "upgrade-gate", "namespace": "kube-system"}, "data": {"go": "yes"}});
    cms.patch("upgrade-gate", &PatchParams::apply("e2e"), &Patch::Apply(gate)).await.expect("gate");
    daemon
        .eventually("alpha Ready on v4", Duration::from_secs(120), async || {
            applied().await == "docker-ferrol-1-27-v4" && t.ready("alpha").await.is_some_and(|(s, _)| s == "True")
        })
        .await;
    assert_eq!(upgrade().await["phase"], "Done");
    daemon.stop().await;
    let _ = cms.delete("upgrade-gate", &Default::default()).await;
    t.delete().await;
}

/// A workload client offers HTTP/2 first (as client-go does): against the real API server a
/// reconcile's requests in flight together share one connection and one TLS handshake, where
/// HTTP/1.1 opened one connection per request in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_requests_to_the_real_server_go_over_http2() {
    let Some(t) = Tenant::new("http2").await else { return };
    let kubeconfig = kube::config::Kubeconfig::read_from(t.kubeconfig()).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.expect("config");
    // The connections are counted where they are made: a proxy of this test's own in front of
    // the server (the other tests of this process talk to the same server).
    let (proxy, connections) = counting_proxy(config.cluster_url.port_u16().expect("the server's port")).await;
    let host = config.cluster_url.host().expect("the server's host").to_owned();
    let url = format!("https://{host}:{proxy}{}", config.cluster_url.path());
    config.cluster_url = url.parse().expect("proxy url");
    let tls = stacksync::targets::kubernetes::reconcile::workload::TlsConfigs::default();
    let client = stacksync::targets::kubernetes::reconcile::workload::client(&config, &tls).expect("workload client");
    let get = async |client: kube::Client| {
        let request = http::Request::get("/version").body(Vec::new()).expect("request");
        client.send(request.map(kube::client::Body::from)).await.expect("an answer").version()
    };
    // As a sync does: its first request alone (the reachability check), then 8 at once.
    let first = get(client.clone()).await;
    let versions = futures_util::future::join_all((0..8).map(|_| get(client.clone()))).await;
    assert!(std::iter::once(&first).chain(&versions).all(|v| *v == http::Version::HTTP_2), "{first:?} {versions:?}");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1, "9 requests, 8 of them in flight together, over one connection");
}

/// A TCP proxy on a free loopback port to `port` on loopback: its port, and how many
/// connections it accepted. It lives as long as the test's runtime.
async fn counting_proxy(port: u16) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let local = listener.local_addr().expect("addr").port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (local, count)
}

/// `stacksync preview` as the read-only identity of deploy/components/preview (the admin
/// certificate impersonating its ServiceAccount, judged by the real RBAC authorizer): a
/// cluster-stack release that is not published is previewed for a Cluster with get and list
/// only — nothing refused, the ClusterClass judged from its rendered fields (a dry-run is a
/// `patch`, which the identity may not do), nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_preview_identity_previews_a_release_with_get_and_list_only() {
    let Some(t) = Tenant::new("preview").await else { return };
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    for f in ["namespace.yaml", "components/preview/rbac.yaml"] {
        let out = t.kubectl(&["apply", "-f", &deploy.join(f).display().to_string()]);
        assert!(out.status.success(), "kubectl apply -f {f}: {}", String::from_utf8_lossy(&out.stderr));
    }
    t.add_cluster("alpha").await;
    let topology = json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v3", "version": "v1.27.3"}, "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}}}});
    t.clusters().patch("alpha", &PatchParams::default(), &Patch::Merge(topology)).await.expect("class");
    let release = t.dir.path().join("docker-ferrol-1-27-v3");
    for (rel, text) in common::fleet::fixture_files("docker-ferrol-1-27-v3") {
        let path = release.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, text).expect("file");
    }

    let sa = "system:serviceaccount:stacksync-system:stacksync-preview";
    let mut kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.kubeconfig()).expect("kubeconfig")).expect("json");
    kubeconfig["users"][0]["user"]["as"] = json!(sa);
    let as_sa = t.dir.path().join("preview.kubeconfig");
    std::fs::write(&as_sa, kubeconfig.to_string()).expect("write");
    let can = |verb: &str, what: &str| {
        let out = t.kubectl(&["--kubeconfig", &as_sa.display().to_string(), "auth", "can-i", verb, what, "-n", &t.ns]);
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    assert!(can("list", "clusters.cluster.x-k8s.io") && can("get", "clustersyncs.stacksync.io"));
    for (verb, what) in [
        ("patch", "clusters.cluster.x-k8s.io"),
        ("patch", "clusterclasses.cluster.x-k8s.io"),
        ("create", "events.events.k8s.io"),
        ("list", "secrets"),
    ] {
        assert!(!can(verb, what), "the preview identity may {verb} {what}");
    }

    let config = t.stack_config(|s| s.health_timeout("0s")).write();
    let text =
        std::fs::read_to_string(&config).expect("config").replace(&t.kubeconfig().display().to_string(), &as_sa.display().to_string());
    std::fs::write(&config, text).expect("config");
    let out = common::stacksync(&[
        "preview",
        "--config",
        &config.display().to_string(),
        "--release",
        &release.display().to_string(),
        "-o",
        "json",
    ])
    .await;
    common::assert_exit(&out, 1);
    let stderr = common::stderr(&out);
    assert!(!stderr.contains("forbidden") && !stderr.contains("403"), "{stderr}");
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let c = &p["clusters"][0];
    assert_eq!((c["cluster"].as_str(), c["result"].as_str()), (Some(format!("{}/alpha", t.ns).as_str()), Some("changes")), "{p}");
    assert!(c.get("failures").is_none() && p["management"][0].get("failures").is_none(), "{p}");
    let class = p["management"][0]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|o| o["object"] == format!("ClusterClass/{}/docker-ferrol-1-27-v3", t.ns))
        .cloned()
        .unwrap_or_else(|| panic!("the ClusterClass: {p}"));
    assert_eq!((class["change"].as_str(), class["clientSide"].as_bool()), (Some("create"), Some(true)), "{class}");
    // Nothing was written: no ClusterClass, no ClusterSync.
    let classes = t.kubectl(&["get", "clusterclasses", "-n", &t.ns, "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&classes.stdout).trim(), "", "the preview created a ClusterClass");
    assert!(t.cluster_sync("alpha").await.is_none(), "the preview wrote a ClusterSync");
    t.delete().await;
}

/// Bad input on the real server: a Cluster carrying 200 KiB of annotations (the server allows
/// 256 KiB), a kubeconfig Secret whose CA is not a certificate, one whose client certificate
/// expired, and a release with one object the server's schema rejects. Each is said for what it
/// is — the object with the server's message, the Secret by name and never its content — and
/// blocks nothing else: the other objects are applied, the other Clusters synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_the_real_server_is_named_and_blocks_nothing_else() {
    let Some(t) = Tenant::new("badinput").await else { return };
    let bad = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad-${cluster.name}\n  namespace: ${cluster.namespace}\nspec:\n  replicas: three\n  selector:\n    matchLabels: {app: bad}\n  template:\n    metadata:\n      labels: {app: bad}\n    spec:\n      containers:\n        - {name: c, image: registry.example/c:1}\n";
    let cm = |n: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {n}-${{cluster.name}}\n  namespace: ${{cluster.namespace}}\ndata:\n  cluster: ${{cluster.name}}\n"
        )
    };
    t.repo.release("v1.0.0", &[("manifests/a.yaml", &cm("first")), ("manifests/b.yaml", bad), ("manifests/c.yaml", &cm("last"))]);
    for name in ["big", "badca", "expired"] {
        t.add_cluster(name).await;
    }
    // 200 KiB of annotations on the Cluster: read, listed and watched like any other.
    let annotations: serde_json::Map<String, serde_json::Value> =
        (0..4).map(|i| (format!("example.com/blob-{i}"), json!("x".repeat(50 * 1024)))).collect();
    t.clusters()
        .patch("big", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": annotations}})))
        .await
        .expect("annotations");

    // badca: certificate-authority-data that is no certificate.
    let mut kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.kubeconfig()).expect("kubeconfig")).expect("json");
    let good = kubeconfig.clone();
    kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] =
        json!(base64_of(b"-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"));
    put_kubeconfig(&t, "badca", &kubeconfig).await;
    // expired: a client certificate whose validity ended yesterday.
    let dir = t.dir.path().join("expired");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = p\nx509_extensions = v3\n[p]\ncommonName = supplied\n[v3]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\nextendedKeyUsage = clientAuth\n",
    )
    .expect("ca.cnf");
    std::fs::write(dir.join("index.txt"), "").expect("index");
    std::fs::write(dir.join("serial"), "01\n").expect("serial");
    let openssl = |args: &[&str]| common::certs::openssl(&dir, args);
    openssl(&[
        "req",
        "-new",
        "-nodes",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-subj",
        "/CN=expired",
        "-keyout",
        "k.pem",
        "-out",
        "r.csr",
    ]);
    openssl(&[
        "ca",
        "-batch",
        "-config",
        "ca.cnf",
        "-selfsign",
        "-keyfile",
        "k.pem",
        "-in",
        "r.csr",
        "-out",
        "c.pem",
        "-startdate",
        "20250101000000Z",
        "-enddate",
        "20250102000000Z",
    ]);
    let mut kubeconfig = good.clone();
    let user = &mut kubeconfig["users"][0]["user"];
    user["client-certificate-data"] = json!(base64_of(&std::fs::read(dir.join("c.pem")).expect("cert")));
    user["client-key-data"] = json!(base64_of(&std::fs::read(dir.join("k.pem")).expect("key")));
    put_kubeconfig(&t, "expired", &kubeconfig).await;

    let config = t.config(|s| s.health_timeout("0s")).write();
    let started = std::time::Instant::now();
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 1);
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    let log = common::stderr(&o);
    assert!(!log.contains("not a certificate") && !log.contains("BEGIN"), "a Secret's content in the log:\n{log}");

    // big: every object but the rejected one applied; the rejected one named with the server's
    // reason.
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), &t.ns);
    for n in ["first-big", "last-big"] {
        assert!(cms.get_opt(n).await.expect("get").is_some(), "{n} not applied:\n{log}");
    }
    let cs = t.cluster_sync("big").await.expect("ClusterSync of big");
    let ready = condition(&cs, "Ready");
    assert_eq!(ready["status"], "False", "{cs}");
    let entries = cs["status"]["entries"].as_array().cloned().unwrap_or_default();
    let rejected = entries.iter().find(|o| o["name"] == "bad-big").unwrap_or_else(|| panic!("bad-big not in the status: {cs}"));
    assert_eq!(rejected["synced"], false, "{rejected}");
    let message = rejected["message"].as_str().unwrap_or_default();
    assert!(message.contains("replicas") && message.contains("the release needs a change"), "the server's reason: {rejected}");
    // The server answers 500 (kubernetes/kubernetes#139253) but the body fails the same way every
    // time: the Cluster is Stalled, not retried as a passing fault.
    assert_eq!((ready["reason"].as_str(), condition(&cs, "Stalled")["status"].as_str()), (Some("NotSynced"), Some("True")), "{cs}");
    assert_eq!((cs["status"]["synced"].as_u64(), cs["status"]["total"].as_u64()), (Some(2), Some(3)), "{cs}");

    // The two bad kubeconfigs: named by Secret, why said, nothing of their content.
    for (name, why) in [("badca", "certificate"), ("expired", "401")] {
        let cs = t.cluster_sync(name).await.unwrap_or_else(|| panic!("ClusterSync of {name}"));
        let ready = condition(&cs, "Ready");
        assert_eq!(ready["status"], "False", "{cs}");
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("{name}-kubeconfig")) || message.contains(why), "{name}: {message}");
        assert!(message.contains(why), "{name}: {message}");
        assert!(!message.contains("BEGIN") && !message.contains("not a certificate"), "{name}: {message}");
    }
    t.delete().await;
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `<name>-kubeconfig` with `kubeconfig` as its value.
async fn put_kubeconfig(t: &Tenant, name: &str, kubeconfig: &serde_json::Value) {
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some(format!("{name}-kubeconfig"));
    secret.metadata.namespace = Some(t.ns.clone());
    secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig.to_string().into_bytes()))].into());
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(t.client(), &t.ns);
    api.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi").force(), &Patch::Apply(&secret)).await.expect("secret");
}

/// A release tag as long as Git makes one (250 characters: its ref's lock file is a 255-byte
/// file name; a ClusterClass name may be 253) on the real server: applied, its Cluster synced,
/// its StackRelease and the Events about it written (names made from the tag are shortened with
/// a digest where a limit is shorter: the StackRelease's Events add 17 characters, the cache's
/// file names take 255 bytes). An object one character over the object-name limit (254) is
/// refused by name and limit, and blocks nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_as_long_as_git_allows_is_synced_and_a_name_over_253_is_named() {
    let Some(t) = Tenant::new("longname").await else { return };
    let tag = format!("v1.0.0-{}", "a".repeat(250 - "v1.0.0-".len()));
    let over = format!("x{}", "y".repeat(253));
    let objects = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fine-${{cluster.name}}\n  namespace: ${{cluster.namespace}}\ndata:\n  tag: {tag}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {over}\n  namespace: ${{cluster.namespace}}\n"
    );
    t.repo.release(&tag, &[("manifests/objects.yaml", &objects)]);
    t.add_cluster("long").await;
    let config = t.config(|s| s.health_timeout("0s")).write();
    let o = common::run_once(&config).await;
    let log = common::stderr(&o);
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), &t.ns);
    assert!(cms.get_opt("fine-long").await.expect("get").is_some(), "not applied:\n{log}");
    let cs = t.cluster_sync("long").await.unwrap_or_else(|| panic!("no ClusterSync:\n{log}"));
    assert_eq!(cs["status"]["wantedRelease"]["tag"], tag.as_str(), "{cs}");
    // One of its objects was refused: the release is wanted, not recorded as applied (only a
    // release every object of which is synced is).
    assert!(cs["status"]["appliedRelease"].is_null(), "{cs}");
    let entries = cs["status"]["entries"].as_array().cloned().unwrap_or_default();
    let refused =
        entries.iter().find(|e| e["name"] == over.as_str()).unwrap_or_else(|| panic!("the 254-character object is not named: {cs}"));
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains("254") && message.contains("253"), "the limit is said: {refused}");
    assert_eq!((cs["status"]["synced"].as_u64(), cs["status"]["total"].as_u64()), (Some(1), Some(2)), "{cs}");
    // The StackRelease of the tag, and the Event about it.
    let releases: Api<kube::api::DynamicObject> = Api::all_with(t.client(), &common::res("stacksync.io", "v1alpha1", "StackRelease"));
    let list = releases.list(&Default::default()).await.expect("StackReleases");
    let sr =
        list.items.iter().find(|r| r.data["spec"]["tag"] == tag.as_str()).unwrap_or_else(|| panic!("no StackRelease of the tag:\n{log}"));
    let name = sr.metadata.name.clone().unwrap_or_default();
    assert!(name.len() + 17 <= 253, "{name}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(t.client());
    let about = events.list(&Default::default()).await.expect("events");
    assert!(
        about.items.iter().any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())),
        "no Event about StackRelease {name}:\n{log}"
    );
    let _ = releases.delete(&name, &Default::default()).await;
    t.delete().await;
}

/// A chart that generates at render time (issue 55): a CA, a certificate it signs, a password,
/// and a Deployment whose pod template carries a checksum of the CA. Every object's name
/// carries the Cluster's, so two Clusters on one server stay apart.
const GENERATES: &str = r#"{{- $ca := genCA "fixture-ca" 365 }}
{{- $cert := genSignedCert "fixture-server" nil (list "fixture-server") 365 $ca }}
{{- $name := .Values.cluster }}
---
apiVersion: v1
kind: Secret
metadata:
  name: fixture-ca-{{ $name }}
  namespace: {{ .Values.namespace }}
type: kubernetes.io/tls
data:
  tls.crt: {{ $ca.Cert | b64enc }}
  tls.key: {{ $ca.Key | b64enc }}
---
apiVersion: v1
kind: Secret
metadata:
  name: fixture-server-{{ $name }}
  namespace: {{ .Values.namespace }}
type: kubernetes.io/tls
data:
  ca.crt: {{ $ca.Cert | b64enc }}
  tls.crt: {{ $cert.Cert | b64enc }}
  tls.key: {{ $cert.Key | b64enc }}
---
apiVersion: v1
kind: Secret
metadata:
  name: fixture-password-{{ $name }}
  namespace: {{ .Values.namespace }}
stringData:
  password: {{ randAlphaNum 24 | quote }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: fixture-note-{{ $name }}
  namespace: {{ .Values.namespace }}
data:
  note: {{ .Values.note | quote }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fixture-server-{{ $name }}
  namespace: {{ .Values.namespace }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: fixture-server-{{ $name }}}
  template:
    metadata:
      labels: {app: fixture-server-{{ $name }}}
      annotations:
        checksum/ca: {{ $ca.Cert | sha256sum }}
    spec:
      containers:
        - name: server
          image: {{ .Values.image }}
"#;

/// Release `docker-ferrol-1-27-<version>` whose one addon stage is [`GENERATES`] with `image`.
fn publish_generating(t: &Tenant, version: &str, image: &str) {
    let addon = "docker-ferrol-1-27-cluster-addon-v2/generates";
    let mut files = common::fleet::v3_files_as(version, |rel, text| {
        match rel {
        "clusteraddon.yaml" => "apiVersion: clusteraddonconfig.x-k8s.io/v1alpha1\nclusterAddonVersion: clusteraddons.clusterstack.x-k8s.io/v1alpha1\naddonStages:\n  AfterControlPlaneInitialized:\n    - name: generates\n      action: apply\n  BeforeClusterUpgrade:\n    - name: generates\n      action: apply\n".to_owned(),
        _ => text,
    }
    });
    files.push((format!("{addon}/Chart.yaml"), "apiVersion: v2\nname: generates\nversion: v2\n".to_owned()));
    files.push((format!("{addon}/values.yaml"), format!("image: {image}\nnote: none\ncluster: unset\nnamespace: default\n")));
    files.push((
        format!("{addon}/overwrite.yaml"),
        "values: |\n  cluster: \"{{ .Cluster.metadata.name }}\"\n  namespace: \"{{ .Cluster.metadata.namespace }}\"\n  note: \"{{ .Cluster.spec.controlPlaneEndpoint.port }}\"\n".to_owned(),
    ));
    files.push((format!("{addon}/templates/generates.yaml"), GENERATES.to_owned()));
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    t.repo.release(&format!("docker-ferrol-1-27-{version}"), &refs);
}

/// What a Cluster's generated objects hold and whether they were written: each object's
/// resourceVersion (unchanged: not written), the Secrets' data, the Deployment's pod checksum
/// and image.
#[derive(Clone, PartialEq)]
struct Generated {
    versions: Vec<(String, String)>,
    data: Vec<(String, std::collections::BTreeMap<String, k8s_openapi::ByteString>)>,
    checksum: String,
    image: String,
}

/// Values are secrets, even in a test: a failure shows a hash of each.
impl std::fmt::Debug for Generated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::hash::{Hash, Hasher};
        let hashed: Vec<(&str, u64)> = self
            .data
            .iter()
            .map(|(name, data)| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                data.iter().for_each(|(k, v)| (k, &v.0).hash(&mut h));
                (name.as_str(), h.finish())
            })
            .collect();
        write!(f, "versions {:?}, data {hashed:?}, checksum {}, image {}", self.versions, self.checksum, self.image)
    }
}

async fn generated_of(t: &Tenant, cluster: &str) -> Generated {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: Api<Secret> = Api::namespaced(t.client(), &t.ns);
    let (mut versions, mut data) = (Vec::new(), Vec::new());
    for name in ["fixture-ca", "fixture-server", "fixture-password"] {
        let s = secrets.get(&format!("{name}-{cluster}")).await.expect("generated Secret");
        versions.push((name.to_owned(), s.metadata.resource_version.unwrap_or_default()));
        data.push((name.to_owned(), s.data.unwrap_or_default()));
    }
    let deployments: Api<Deployment> = Api::namespaced(t.client(), &t.ns);
    let d = deployments.get(&format!("fixture-server-{cluster}")).await.expect("Deployment");
    versions.push(("deployment".into(), d.metadata.resource_version.clone().unwrap_or_default()));
    let template = d.spec.template;
    let checksum = template.metadata.and_then(|m| m.annotations).unwrap_or_default().get("checksum/ca").cloned().unwrap_or_default();
    let image = template.spec.expect("pod spec").containers[0].image.clone().unwrap_or_default();
    Generated { versions, data, checksum, image }
}

/// `run --once` of `config` with the cache at `cache` (a new directory: a restarted process, a
/// new leader, another replica) and `extra` arguments; exits 0.
async fn pass(config: &common::config::Config, cache: &str, extra: &[&str]) -> std::process::Output {
    let path = config.clone().set("cache", json!({"dir": config.dir().join(cache)})).write();
    let mut args = vec!["run", "--once", "--config", path.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    // The render's choices (real, or stand-ins where the charts generate) are DEBUG lines.
    let o = common::cli(&args, &[("RUST_LOG", "info,stacksync::targets::kubernetes::reconcile::stages=debug")]).await;
    common::assert_exit(&o, 0);
    o
}

/// How many Clusters `o` rendered with stand-ins: on the release applied (`restart`), or on
/// another release or other values.
fn stand_in_renders(o: &std::process::Output, restart: bool) -> usize {
    let line = if restart { "the ClusterSync's record matches" } else { "all of it recorded" };
    common::stderr(o).lines().filter(|l| l.contains("rendered with stand-ins") && l.contains(line)).count()
}

/// Issue 55: what a chart generates stays the Cluster's. Two Clusters get values of their own;
/// a restart on an empty cache, two other replicas, another shard, a values change elsewhere
/// and a new release keep every generated value and the pod checksum (the real server's
/// resourceVersions say nothing was written); a certificate due is rotated once, with its
/// Event, and so is one `stacksync rotate` asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_chart_generates_survives_restarts_and_releases_and_rotates_only_on_purpose() {
    let Some(t) = Tenant::new("generated").await else { return };
    publish_generating(&t, "v3", "registry.example/server:1.0");
    t.add_cluster("alpha").await;
    t.add_cluster("beta").await;
    let config = t.stack_config(|s| s.health_timeout("0s"));
    let o = pass(&config, "cache-a", &[]).await;
    let (alpha, beta) = (generated_of(&t, "alpha").await, generated_of(&t, "beta").await);
    assert!(alpha.data != beta.data, "two Clusters never share a generated value");
    assert_ne!(alpha.checksum, beta.checksum);
    let cs = t.cluster_sync("alpha").await.expect("ClusterSync");
    let lines: Vec<&str> = cs["status"]["generated"].as_array().expect("generated").iter().filter_map(|l| l.as_str()).collect();
    for want in [
        format!("|Secret|{}|fixture-ca-alpha|/data/tls.crt", t.ns),
        format!("|Secret|{}|fixture-ca-alpha|/data/tls.key", t.ns),
        format!("|Secret|{}|fixture-server-alpha|/data/tls.crt", t.ns),
        format!("|Secret|{}|fixture-password-alpha|/stringData/password", t.ns),
        format!("apps|Deployment|{}|fixture-server-alpha|/spec/template/metadata/annotations/checksum~1ca", t.ns),
    ] {
        assert!(lines.contains(&want.as_str()), "{want} in {lines:?}\n{}", common::stderr(&o));
    }
    assert!(!lines.iter().any(|l| l.contains("fixture-note")), "a ConfigMap of plain values is not generated: {lines:?}");
    let rotation = &cs["status"]["generatedRotation"];
    assert!(rotation["renewAt"].as_str().is_some_and(|r| r > "2027"), "{rotation}");
    let rendered_by = format!("helm {}, library renderer", stacksync::render::renderer::HELM_VERSION);
    assert_eq!(cs["status"]["renderedBy"], rendered_by.as_str(), "the status says what rendered the charts");
    // Pointers only: no value in the status.
    let text = cs.to_string();
    for (_, data) in &alpha.data {
        for v in data.values() {
            use base64::Engine as _;
            assert!(!text.contains(&base64::engine::general_purpose::STANDARD.encode(&v.0)), "a value in the status");
        }
    }

    // The same process's cache, a restart on an empty one, two other replicas, another shard:
    // not one write, not one value changed.
    pass(&config, "cache-a", &[]).await;
    // Issue 56: on an empty cache, what the charts generate is rendered as stand-ins (no key).
    let o = pass(&config, "cache-b", &[]).await;
    assert_eq!(stand_in_renders(&o, true), 2, "{}", common::stderr(&o));
    pass(&config, "cache-c", &[]).await;
    for c in ["alpha", "beta"] {
        t.clusters()
            .patch(c, &PatchParams::apply("e2e"), &Patch::Merge(json!({"metadata": {"labels": {"stacksync.io/shard": "blue"}}})))
            .await
            .expect("label");
    }
    pass(&config, "cache-d", &["--shard", "blue"]).await;
    assert_eq!(generated_of(&t, "alpha").await, alpha);
    assert_eq!(generated_of(&t, "beta").await, beta);
    // `stacksync diff` from yet another empty cache (new random values rendered): no change.
    let fresh = config.clone().set("cache", json!({"dir": t.dir.path().join("cache-diff")})).write();
    let o = common::stacksync(&["diff", "--config", fresh.to_str().expect("utf-8")]).await;
    assert_eq!(o.status.code(), Some(0), "generated fields are not changes:\n{}\n{}", common::stdout(&o), common::stderr(&o));

    // A values change elsewhere in the Cluster: its ConfigMap changes, nothing generated does.
    t.clusters()
        .patch("alpha", &PatchParams::default(), &Patch::Merge(json!({"spec": {"controlPlaneEndpoint": {"port": 6444}}})))
        .await
        .expect("port");
    let o = pass(&config, "cache-e", &["--shard", "blue"]).await;
    assert_eq!((stand_in_renders(&o, false), stand_in_renders(&o, true)), (1, 1), "{}", common::stderr(&o));
    let cms: Api<ConfigMap> = Api::namespaced(t.client(), &t.ns);
    assert_eq!(cms.get("fixture-note-alpha").await.expect("note").data.unwrap_or_default()["note"], "6444");
    assert_eq!(generated_of(&t, "alpha").await, alpha);

    // A release that changes the Deployment's image: only the image changes.
    publish_generating(&t, "v4", "registry.example/server:2.0");
    let o = pass(&config, "cache-f", &["--shard", "blue"]).await;
    assert_eq!(stand_in_renders(&o, false), 2, "a new release makes no key either\n{}", common::stderr(&o));
    let moved = generated_of(&t, "alpha").await;
    assert_eq!(t.cluster_sync("alpha").await.expect("cs")["status"]["appliedRelease"]["tag"], "docker-ferrol-1-27-v4");
    assert_eq!((&moved.data, &moved.checksum, moved.image.as_str()), (&alpha.data, &alpha.checksum, "registry.example/server:2.0"));
    assert_eq!(moved.versions[..3], alpha.versions[..3], "the Secrets were not written");
    let alpha = moved;
    let beta = generated_of(&t, "beta").await;

    // alpha's CA is one made 300 days ago for a year: past two thirds of its life. The sync
    // that sees it records when it is due; the next rotates every generated value of alpha once.
    let dir = t.dir.path();
    let openssl = std::process::Command::new("faketime")
        .args(["-f", "-300d", "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
        .args(["-days", "365", "-subj", "/CN=old-ca", "-keyout"])
        .arg(dir.join("old.key"))
        .arg("-out")
        .arg(dir.join("old.crt"))
        .output()
        .expect("faketime openssl (scripts/ensure-programs.sh)");
    assert!(openssl.status.success(), "{}", String::from_utf8_lossy(&openssl.stderr));
    let old = std::fs::read(dir.join("old.crt")).expect("old CA");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(t.client(), &t.ns);
    // As `kubectl patch` would (a hand manager, whose fields stacksync takes back).
    let old_ca = json!({"data": {"tls.crt": base64_of(&old)}});
    let by_hand = PatchParams { field_manager: Some("kubectl-patch".into()), ..PatchParams::default() };
    secrets.patch("fixture-ca-alpha", &by_hand, &Patch::Merge(old_ca)).await.expect("old CA");
    pass(&config, "cache-f", &["--shard", "blue"]).await;
    let due = t.cluster_sync("alpha").await.expect("cs")["status"]["generatedRotation"]["renewAt"].as_str().unwrap_or_default().to_owned();
    assert!(due.as_str() < "2027", "the old CA's renewal is recorded: {due}");
    assert!(generated_of(&t, "alpha").await.data[0].1["tls.crt"].0 == old, "kept until the rotation");
    let o = pass(&config, "cache-f", &["--shard", "blue"]).await;
    let rotated = generated_of(&t, "alpha").await;
    for (i, name) in ["fixture-ca", "fixture-server", "fixture-password"].iter().enumerate() {
        assert!(rotated.data[i].1 != alpha.data[i].1, "{name} rotated\n{}", common::stderr(&o));
    }
    assert_ne!(rotated.checksum, alpha.checksum, "the pods restart with the new CA");
    let g = t.cluster_sync("alpha").await.expect("cs")["status"]["generatedRotation"].clone();
    assert_eq!(g["lastReason"], "CertificateDue", "{g}");
    assert!(g["renewAt"].as_str().is_some_and(|r| r > "2027"), "{g}");
    assert_eq!(generated_of(&t, "beta").await, beta, "beta is not touched");
    pass(&config, "cache-f", &["--shard", "blue"]).await;
    assert_eq!(generated_of(&t, "alpha").await, rotated, "rotated once");
    let events = t.kubectl(&["get", "events", "-n", &t.ns, "--field-selector", "reason=GeneratedRotated", "-o", "json"]);
    let events: serde_json::Value = serde_json::from_slice(&events.stdout).expect("events");
    let notes: Vec<&str> =
        events["items"].as_array().expect("items").iter().filter_map(|e| e["message"].as_str().or(e["note"].as_str())).collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("renewal time") && !notes[0].contains("BEGIN"), "{notes:?}");

    // `stacksync rotate`: beta's values are rotated once, said as Requested.
    let path = config.clone().set("cache", json!({"dir": dir.join("cache-f")})).write();
    let o = common::stacksync(&["rotate", "--config", path.to_str().expect("utf-8"), &format!("{}/beta", t.ns)]).await;
    common::assert_exit(&o, 0);
    pass(&config, "cache-f", &["--shard", "blue"]).await;
    let beta_rotated = generated_of(&t, "beta").await;
    assert!(beta_rotated.data != beta.data, "beta rotated");
    assert_eq!(t.cluster_sync("beta").await.expect("cs")["status"]["generatedRotation"]["lastReason"], "Requested");
    pass(&config, "cache-f", &["--shard", "blue"]).await;
    assert_eq!(generated_of(&t, "beta").await, beta_rotated, "rotated once");

    // Issue 56: a restart on an empty cache renders what the charts generate as stand-ins (no
    // key made) where the ClusterSync's record matches. A stand-in never reaches the cluster:
    // with beta's CA Secret gone, that Secret is not synced on the stand-in pass (said so), and
    // the next pass renders for real and creates it with a real certificate.
    secrets.delete("fixture-ca-beta", &Default::default()).await.expect("delete the CA");
    let path = config.clone().set("cache", json!({"dir": dir.join("cache-g")})).write();
    let o = common::stacksync(&["run", "--once", "--config", path.to_str().expect("utf-8"), "--shard", "blue"]).await;
    assert!(secrets.get_opt("fixture-ca-beta").await.expect("get").is_none(), "no stand-in applied\n{}", common::stderr(&o));
    let cs = t.cluster_sync("beta").await.expect("cs");
    let entry = cs["status"]["entries"].as_array().and_then(|e| e.iter().find(|e| e["name"] == "fixture-ca-beta")).cloned();
    let message = entry.as_ref().and_then(|e| e["message"].as_str()).unwrap_or_default();
    assert!(message.contains("stand-ins") && message.contains("/data/tls.key"), "{entry:?}\n{}", common::stderr(&o));
    assert_eq!(entry.as_ref().map(|e| e["synced"].clone()), Some(json!(false)));
    assert_eq!(generated_of(&t, "alpha").await.data, rotated.data, "alpha's restart wrote nothing generated");
    pass(&config, "cache-g", &["--shard", "blue"]).await;
    let again = secrets.get("fixture-ca-beta").await.expect("re-created");
    let crt = &again.data.unwrap_or_default()["tls.crt"].0;
    let x509 = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().expect("stdin").write_all(crt)?;
            c.wait_with_output()
        })
        .expect("openssl");
    assert!(x509.status.success(), "a real certificate, not a stand-in: {}", String::from_utf8_lossy(crt));
    let beta_now = generated_of(&t, "beta").await;
    assert_eq!(beta_now.data[1..], beta_rotated.data[1..], "the rest of beta's generated values stay");
    t.delete().await;
}
