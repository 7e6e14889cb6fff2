//! stacksync as a controller: the real binary as a daemon against testkit API servers (a
//! management cluster and workload clusters) and releases from a Git repository. Cluster API's
//! part is played by the tests: they create Clusters, flip their readiness, write kubeconfig
//! Secrets, pause and delete Clusters, change their class.

mod common;

use common::fleet::{CM, Env, NS, publish, publish_v3_as, publish_v4_with_upgrade_stages};
use common::{Config, Daemon, Sub, cli, condition, files_under};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fake_apiserver::Stats;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_synced_seconds_after_its_control_plane_and_kubeconfig_are_ready() {
    let env = Env::new(2).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    let config = env.config().write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;

    // Created while the daemon runs, not ready: recorded as such, nothing applied.
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", false).await;
    env.add_kubeconfig("alpha", 0).await;
    daemon
        .eventually("alpha reported not ready", Duration::from_secs(20), async || {
            env.ready_reason("alpha").await.is_some_and(|(_, r)| r == "ControlPlaneNotReady")
        })
        .await;
    // Control plane ready (interval and notReadyRetry are 1h: only the watch can bring this).
    env.set_ready("alpha", true).await;
    let took = daemon
        .eventually("alpha synced", Duration::from_secs(20), async || env.ready_reason("alpha").await.is_some_and(|(s, _)| s == "True"))
        .await;
    eprintln!("alpha Ready {took:?} after its control plane");
    assert_eq!(env.configmap(0, "addon-alpha").await.expect("applied").data.unwrap_or_default()["cluster"], "alpha");

    // Ready but no kubeconfig yet; the Secret appearing triggers the sync.
    env.add_cluster("beta", "docker-ferrol-1-27-v1", true).await;
    daemon
        .eventually("beta waits for its kubeconfig", Duration::from_secs(10), async || {
            env.ready_reason("beta").await.is_some_and(|(_, r)| r == "KubeconfigMissing")
        })
        .await;
    env.add_kubeconfig("beta", 1).await;
    daemon.eventually("beta synced", Duration::from_secs(20), async || env.configmap(1, "addon-beta").await.is_some()).await;

    // The ClusterSync is owned by its Cluster, and goes when the Cluster goes.
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(cs["metadata"]["ownerReferences"][0]["kind"], "Cluster", "{cs}");
    assert!(cs["status"]["lastSyncTime"].is_string(), "{cs}");
    env.clusters().delete("alpha", &DeleteParams::default()).await.expect("delete");
    daemon.eventually("alpha's ClusterSync removed", Duration::from_secs(10), async || env.cluster_sync("alpha").await.is_none()).await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_gets_no_writes_and_reconcile_requests_are_handled_in_seconds() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon.eventually("alpha synced", Duration::from_secs(20), async || env.configmap(0, "addon-alpha").await.is_some()).await;

    // Drift, then `stacksync reconcile`: taken back at once (the log says how soon), not at the
    // next resync (an hour).
    let cms: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    cms.delete("addon-alpha", &DeleteParams::default()).await.expect("delete");
    let o = cli(&["reconcile", "--config", &config.to_string_lossy(), &format!("{NS}/alpha")], &[]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let took =
        daemon.eventually("reconcile on request", Duration::from_secs(20), async || env.configmap(0, "addon-alpha").await.is_some()).await;
    eprintln!("reconcile request handled in {took:?}");
    handled(&env, &daemon, &o.stdout).await;

    // Nothing changed: a reconcile costs the workload cluster one LIST per kind of what it holds
    // (and the `/version` probe), no discovery (remembered since the first sync), no write.
    env.workloads[0].reset_stats();
    reconciled(&env, &daemon, &config).await;
    let stats = env.workloads[0].stats();
    assert_eq!(stats.total_writes(), 0, "{stats:?}");
    assert!(stats.requests.keys().all(|verb| verb == "list"), "only LISTs: {stats:?}");
    assert_eq!(Stats::count(&stats.requests, "list", "configmaps"), 1, "{stats:?}");

    // Paused (as during `clusterctl move`): a reconcile writes nothing to the workload cluster.
    env.patch_cluster("alpha", json!({"spec": {"paused": true}})).await;
    daemon
        .eventually("Paused condition", Duration::from_secs(20), async || {
            env.cluster_sync("alpha").await.is_some_and(|cs| condition(&cs, "Paused")["status"] == "True")
        })
        .await;
    cms.delete("addon-alpha", &DeleteParams::default()).await.expect("delete");
    env.workloads[0].reset_stats();
    reconciled(&env, &daemon, &config).await;
    assert_eq!(env.workloads[0].stats().total_writes(), 0, "a paused Cluster was written to: {:?}", env.workloads[0].stats().writes);
    assert!(env.configmap(0, "addon-alpha").await.is_none());

    // Unpaused: the drift is taken back.
    env.patch_cluster("alpha", json!({"spec": {"paused": false}})).await;
    daemon.eventually("alpha synced again", Duration::from_secs(20), async || env.configmap(0, "addon-alpha").await.is_some()).await;
    daemon.stop().await;
}

/// `stacksync reconcile` of alpha, then waits until alpha's ClusterSync says it handled it.
async fn reconciled(env: &Env, daemon: &Daemon, config: &Path) {
    let o = cli(&["reconcile", "--config", &config.to_string_lossy(), &format!("{NS}/alpha")], &[]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    handled(env, daemon, &o.stdout).await;
}

/// Waits until alpha's ClusterSync records the reconcile request `stacksync reconcile` printed.
async fn handled(env: &Env, daemon: &Daemon, printed: &[u8]) {
    let printed = String::from_utf8_lossy(printed).into_owned();
    daemon
        .eventually("the reconcile request handled", Duration::from_secs(20), async || {
            let cs = env.cluster_sync("alpha").await.unwrap_or_default();
            cs["status"]["lastHandledReconcileAt"].as_str().is_some_and(|at| printed.contains(at))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_github_source_does_not_delay_a_git_subscription() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    let (addr, hole) = common::black_hole().await;
    let api = format!("http://{addr}");
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    // The slow subscription comes first in the file, and covers no Cluster.
    let config = Config::new(env.dir.path())
        .github("slow", "example/slow", &api)
        .git("stacks", &env.repo.file_url())
        .sub(Sub::new("slow", "slow").select("stack", "nobody"))
        .sub(Sub::new("ferrol", "stacks").select("stack", "ferrol"))
        .kubernetes(env.mgmt.kubeconfig())
        .write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("alpha synced despite the hanging source", Duration::from_secs(10), async || {
            env.configmap(0, "addon-alpha").await.is_some()
        })
        .await;
    daemon.stop().await;
    hole.abort();
}

fn stack_config(env: &Env) -> PathBuf {
    env.stack_config(|s| s.set("availableReleases", 1)).write()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_gets_the_release_its_class_names_and_old_classes_stay_while_used() {
    let env = Env::new(3).await;
    publish(&env.repo, "docker-ferrol-1-27-v2");
    publish(&env.repo, "docker-ferrol-1-27-v3");
    for (i, (name, class)) in
        [("alpha", "docker-ferrol-1-27-v2"), ("beta", "docker-ferrol-1-27-v3"), ("gamma", "docker-ferrol-1-27-v2")].into_iter().enumerate()
    {
        env.add_cluster(name, class, true).await;
        env.add_kubeconfig(name, i).await;
    }
    let config = stack_config(&env);
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v2");
    assert_eq!(env.applied_tag("beta").await, "docker-ferrol-1-27-v3");
    // v3 is offered (availableReleases: 1); v2 because Clusters use it.
    assert_eq!(env.cluster_classes().await, ["docker-ferrol-1-27-v2", "docker-ferrol-1-27-v3"]);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(
        (cs["status"]["class"].as_str(), cs["status"]["newestAvailable"].as_str()),
        (Some("docker-ferrol-1-27-v2"), Some("docker-ferrol-1-27-v3")),
        "{cs}"
    );
    // v2's addon ships a CRD that v3's does not.
    let crds = |i: usize| {
        let client = env.workloads[i].client().expect("client");
        async move {
            let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client);
            api.list(&Default::default()).await.expect("crds").items.len()
        }
    };
    assert!(crds(0).await > 0 && crds(1).await == 0);

    // alpha moves to v3: v3's addons; v2's ClusterClass stays, gamma still uses it.
    env.patch_cluster("alpha", json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v3"}}})).await;
    common::assert_exit(&common::run_once(&config).await, 0);
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v3");
    assert_eq!(crds(0).await, 0, "v2's CRD was not pruned on the move to v3");
    assert_eq!(env.cluster_classes().await, ["docker-ferrol-1-27-v2", "docker-ferrol-1-27-v3"]);

    // gamma moves too: nobody uses v2 and it is not offered: pruned.
    env.patch_cluster("gamma", json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v3"}}})).await;
    common::assert_exit(&common::run_once(&config).await, 0);
    assert_eq!(env.cluster_classes().await, ["docker-ferrol-1-27-v3"]);

    // A class naming a release that does not exist: ReleaseNotAvailable, what it has stays.
    env.patch_cluster("beta", json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v9"}}})).await;
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 1);
    assert_eq!(env.ready_reason("beta").await.map(|r| r.1).as_deref(), Some("ReleaseNotAvailable"));
    assert_eq!(env.applied_tag("beta").await, "docker-ferrol-1-27-v3");
}

/// A release's ClusterClass is pruned in every namespace it was applied to, also in a namespace
/// that no process since applied it to: each pass (a new process, as after a restart, or another
/// shard) adds to the StackRelease's `classInventory`, never writes over what it recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_s_cluster_classes_are_pruned_in_namespaces_a_later_process_never_applied() {
    const OTHER: &str = "team-b";
    let env = Env::new(2).await;
    publish(&env.repo, "docker-ferrol-1-27-v2");
    publish(&env.repo, "docker-ferrol-1-27-v3");
    env.add_cluster("alpha", "docker-ferrol-1-27-v2", true).await;
    env.add_kubeconfig("alpha", 0).await;
    // beta in another namespace, with its kubeconfig Secret there.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.mgmt());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHER}});
    namespaces.patch(OTHER, &PatchParams::apply("test"), &Patch::Apply(namespace)).await.expect("namespace");
    let clusters = Api::<DynamicObject>::namespaced_with(env.mgmt(), OTHER, &common::res("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let beta = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "beta", "namespace": OTHER, "labels": {"stack": "ferrol"}},
        "spec": {
            "topology": {"class": "docker-ferrol-1-27-v2", "version": "v1.27.3"},
            "controlPlaneEndpoint": {"host": "beta.example.test", "port": 6443},
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}},
        },
    });
    clusters.patch("beta", &PatchParams::apply("capi"), &Patch::Apply(beta)).await.expect("beta");
    let ready = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "beta"}, "status": {"controlPlaneReady": true}});
    clusters.patch_status("beta", &PatchParams::apply("capi").force(), &Patch::Apply(ready)).await.expect("beta ready");
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some("beta-kubeconfig".into());
    secret.metadata.namespace = Some(OTHER.into());
    let kubeconfig = std::fs::read(env.workloads[1].kubeconfig()).expect("kubeconfig");
    secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(env.mgmt(), OTHER);
    secrets.patch("beta-kubeconfig", &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
    let classes_in = async |ns: &str| {
        let api = Api::<DynamicObject>::namespaced_with(env.mgmt(), ns, &common::res("cluster.x-k8s.io", "v1beta1", "ClusterClass"));
        let mut names: Vec<String> =
            api.list(&Default::default()).await.expect("list").items.into_iter().filter_map(|o| o.metadata.name).collect();
        names.sort();
        names
    };
    let config = stack_config(&env);
    let both: Vec<String> = ["docker-ferrol-1-27-v2", "docker-ferrol-1-27-v3"].map(String::from).to_vec();

    // Both namespaces get v2 (their Clusters' class) and v3 (offered).
    common::assert_exit(&common::run_once(&config).await, 0);
    assert_eq!((classes_in(NS).await, classes_in(OTHER).await), (both.clone(), both.clone()));

    // beta moves to v3. alpha still uses v2, so v2 stays everywhere; this pass applies v2 in
    // team-a only, and records it there.
    env.patch_cluster("alpha", json!({"metadata": {"annotations": {"touched": "1"}}})).await;
    clusters
        .patch("beta", &PatchParams::default(), &Patch::Merge(json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v3"}}})))
        .await
        .expect("move beta");
    // Another writer (a shard) changed the StackRelease between this process's read and its
    // write: the write is refused (409) and made again over what is there now.
    let status = "/stackreleases/ferrol.docker-ferrol-1-27-v2/status";
    env.mgmt.faults().add(fake_apiserver::FaultRule::new().verb("patch").path(status).status(409).times(1));
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    let logs = String::from_utf8_lossy(&o.stderr);
    assert!(!logs.contains("cannot write StackRelease status"), "{logs}");
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v2");
    assert_eq!((classes_in(NS).await, classes_in(OTHER).await), (both.clone(), both.clone()));
    let releases: Api<DynamicObject> = Api::all_with(env.mgmt(), &common::res("stacksync.io", "v1alpha1", "StackRelease"));
    let v2 = releases.get("ferrol.docker-ferrol-1-27-v2").await.expect("v2's StackRelease");
    let recorded: Vec<&str> =
        v2.data["status"]["classInventory"].as_array().expect("classInventory").iter().filter_map(|l| l.as_str()).collect();
    assert!(recorded.iter().any(|l| l.contains(&format!("|{OTHER}|"))), "team-b's v2 ClusterClass is no longer recorded: {recorded:?}");

    // alpha moves too: nobody uses v2 and it is not offered: pruned in both namespaces.
    env.patch_cluster("alpha", json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v3"}}})).await;
    common::assert_exit(&common::run_once(&config).await, 0);
    let v3 = vec!["docker-ferrol-1-27-v3".to_owned()];
    assert_eq!((classes_in(NS).await, classes_in(OTHER).await), (v3.clone(), v3));
    assert!(releases.get_opt("ferrol.docker-ferrol-1-27-v2").await.expect("get").is_none(), "v2's StackRelease stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_directory_that_cannot_be_made_fails_the_pass_with_a_condition() {
    let env = Env::new(1).await;
    publish(&env.repo, "docker-ferrol-1-27-v2");
    env.add_cluster("alpha", "docker-ferrol-1-27-v2", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = stack_config(&env);
    let not_a_dir = env.dir.path().join("file");
    std::fs::write(&not_a_dir, "").expect("file");
    let o = cli(&["run", "--once", "--config", &config.to_string_lossy()], &[("TMPDIR", &not_a_dir.to_string_lossy())]).await;
    common::assert_exit(&o, 1);
    assert!(common::stdout(&o).contains("NOT SYNCED"), "{}", common::stdout(&o));
    assert_eq!(env.ready_reason("alpha").await.map(|r| r.1).as_deref(), Some("WorkDirUnavailable"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clusters_are_reconciled_concurrently() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    for i in 0..50 {
        let name = format!("c{i:02}");
        env.add_cluster(&name, "docker-ferrol-1-27-v1", true).await;
        env.add_kubeconfig(&name, 0).await;
    }
    // Every ClusterSync read is slowed down, as a busy API server would: one at a time, 50 of
    // them take 50 s at least; 25 at a time, a few seconds. The bound below is half the serial
    // time, so a loaded machine does not make this test flaky.
    env.mgmt.faults().add(fake_apiserver::FaultRule::new().verb("get").path("clustersyncs").latency(Duration::from_secs(1)));
    let config = env.config().write();
    let start = Instant::now();
    let o = cli(&["run", "--once", "--concurrency", "25", "--config", &config.to_string_lossy()], &[]).await;
    let took = start.elapsed();
    common::assert_exit(&o, 0);
    assert!(common::stdout(&o).contains("synced: 50/50 clusters ready"), "{}", common::stdout(&o));
    assert!(took < Duration::from_secs(25), "50 Clusters took {took:?}: not concurrent");
    assert!(env.configmap(0, "addon-c49").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_finds_selected_clusters_in_the_management_cluster_and_renders_their_own_release() {
    let env = Env::new(2).await;
    publish(&env.repo, "docker-ferrol-1-27-v2");
    publish(&env.repo, "docker-ferrol-1-27-v3");
    env.add_cluster("alpha", "docker-ferrol-1-27-v2", false).await;
    env.add_cluster("beta", "docker-ferrol-1-27-v3", false).await;
    let config = stack_config(&env);
    let out = env.dir.path().join("preview");
    let o = cli(&["render", "--config", &config.to_string_lossy(), "--out", &out.to_string_lossy()], &[]).await;
    common::assert_exit(&o, 0);
    // v2 is a single addon chart, v3 has stages: each Cluster got its own class's release.
    assert!(
        files_under(&out.join("team-a/alpha")).iter().any(|f| f.ends_with("configmap-cni-config.yaml")),
        "{:?}",
        files_under(&out.join("team-a/alpha"))
    );
    assert_eq!(files_under(&out.join("team-a/beta")), ["cni", "metrics-server"]);
    let classes = files_under(&out.join("team-a/cluster-class"));
    assert!(
        classes.iter().any(|f| f.contains("docker-ferrol-1-27-v2")) && classes.iter().any(|f| f.contains("docker-ferrol-1-27-v3")),
        "{classes:?}"
    );
    let alpha_cni = std::fs::read_dir(out.join("team-a/alpha"))
        .expect("dir")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains("cni-config"))
        .expect("cni");
    let text = std::fs::read_to_string(alpha_cni.path()).expect("read");
    assert!(text.contains("cluster-name: alpha"), "{text}");
    // Nothing was written to the management cluster.
    assert!(env.cluster_sync("alpha").await.is_none());

    // Offline, one Cluster from a file as `clusterctl generate cluster` prints it.
    let file = env.dir.path().join("gamma.yaml");
    std::fs::write(
        &file,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata:\n  name: gamma-md-0\n---\napiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: gamma\n  namespace: team-b\nspec:\n  controlPlaneEndpoint: {host: gamma.example.test, port: 6443}\n  clusterNetwork: {pods: {cidrBlocks: [10.9.0.0/16]}}\n  topology:\n    class: docker-ferrol-1-27-v2\n    version: v1.27.3\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DockerCluster\nmetadata:\n  name: gamma\n",
    )
    .expect("file");
    let out2 = env.dir.path().join("one");
    let o = cli(
        &["render", "--config", &config.to_string_lossy(), "--out", &out2.to_string_lossy(), "--cluster", &file.to_string_lossy()],
        &[],
    )
    .await;
    common::assert_exit(&o, 0);
    let classes = files_under(&out2.join("team-b/cluster-class"));
    assert!(classes.iter().all(|f| !f.contains("v3")) && classes.iter().any(|f| f.contains("docker-ferrol-1-27-v2")), "{classes:?}");
}

const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ccm\n  namespace: kube-system\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: ccm}\n  template:\n    metadata:\n      labels: {app: ccm}\n    spec:\n      containers:\n        - name: ccm\n          image: registry.example/ccm:1.0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_waits_for_health_and_an_unavailable_deployment_becomes_unhealthy() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/deploy.yaml", DEPLOY), ("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config_with(Env::ferrol().health_timeout("4s")).write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    // Applied, not available (testkit runs no Deployment controller): Progressing, naming it.
    daemon
        .eventually("Progressing", Duration::from_secs(15), async || {
            env.cluster_sync("alpha").await.is_some_and(|cs| {
                condition(&cs, "Ready")["reason"] == "Progressing"
                    && condition(&cs, "Reconciling")["status"] == "True"
                    && condition(&cs, "Ready")["message"].as_str().is_some_and(|m| m.contains("Deployment/kube-system/ccm"))
                    && cs["status"]["entries"][0]["health"].as_str().is_some_and(|h| h.starts_with("Progressing"))
            })
        })
        .await;
    // Past healthTimeout: Unhealthy, Stalled.
    daemon
        .eventually("Unhealthy", Duration::from_secs(20), async || {
            env.cluster_sync("alpha")
                .await
                .is_some_and(|cs| condition(&cs, "Ready")["reason"] == "Unhealthy" && condition(&cs, "Stalled")["status"] == "True")
        })
        .await;
    // The Deployment controller's part: the rollout completes. Ready at the next look.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    let live = deployments.get("ccm").await.expect("deployment");
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ccm"}, "status": {
        "observedGeneration": live.metadata.generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}});
    deployments.patch_status("ccm", &PatchParams::apply("deployment-controller").force(), &Patch::Apply(status)).await.expect("status");
    let o = cli(&["reconcile", "--config", &config.to_string_lossy(), &format!("{NS}/alpha")], &[]).await;
    assert!(o.status.success());
    daemon.eventually("Ready", Duration::from_secs(10), async || env.ready_reason("alpha").await.is_some_and(|(s, _)| s == "True")).await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubectl_patch_is_taken_back_and_another_controller_is_a_conflict() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    common::assert_exit(&common::run_once(&config).await, 0);
    let cms: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    // `kubectl patch` of a field stacksync owns: taken back on the next resync.
    let pp = PatchParams { field_manager: Some("kubectl-patch".into()), ..PatchParams::default() };
    cms.patch("addon-alpha", &pp, &Patch::Merge(json!({"data": {"cluster": "patched"}}))).await.expect("patch");
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    assert_eq!(env.configmap(0, "addon-alpha").await.expect("cm").data.unwrap_or_default()["cluster"], "alpha");
    assert!(common::stderr(&o).contains("taken back"), "{}", common::stderr(&o));
    // `kubectl edit`: a whole-object update (PUT) under its own manager; taken back as well.
    let mut edited = cms.get("addon-alpha").await.expect("get");
    edited.data.get_or_insert_with(Default::default).insert("cluster".into(), "edited".into());
    let pp = kube::api::PostParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    cms.replace("addon-alpha", &pp, &edited).await.expect("replace");
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    assert_eq!(env.configmap(0, "addon-alpha").await.expect("cm").data.unwrap_or_default()["cluster"], "alpha");
    assert!(common::stderr(&o).contains("kubectl-edit"), "{}", common::stderr(&o));
    // Another controller's field manager: a conflict, reported.
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-alpha"}, "data": {"cluster": "mine"}});
    cms.patch("addon-alpha", &PatchParams::apply("some-operator").force(), &Patch::Apply(theirs)).await.expect("apply");
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("cs");
    assert!(condition(&cs, "Ready")["message"].as_str().is_some_and(|m| m.contains("some-operator")), "{cs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_values_template_warning_reaches_the_cluster_sync_and_strict_mode_refuses() {
    let env = Env::new(1).await;
    publish(&env.repo, "docker-ferrol-1-27-v2");
    env.add_cluster("alpha", "docker-ferrol-1-27-v2", true).await;
    env.add_kubeconfig("alpha", 0).await;
    // cluster-addon-values.yaml prints `.Cluster.spec.controlPlaneEndpoint.host`: now missing.
    env.patch_cluster("alpha", json!({"spec": {"controlPlaneEndpoint": {"host": null}}})).await;
    let config = stack_config(&env);
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 0);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    let ready = condition(&cs, "Ready");
    assert_eq!(ready["status"], "True", "the SCS operator applies <no value> too: {cs}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("values template warning") && message.contains("controlPlaneEndpoint.host"), "{cs}");
    assert!(common::stderr(&o).contains("<no value>"), "{}", common::stderr(&o));

    // templates: {strict: true}: the same template is an error, the applied release stays.
    let config = env.stack_config(|s| s.set("availableReleases", 1)).set("templates", json!({"strict": true})).write();
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(condition(&cs, "Ready")["reason"], "RenderFailed", "{cs}");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "docker-ferrol-1-27-v2", "{cs}");
}

async fn upgrade_status(env: &Env, name: &str) -> serde_json::Value {
    env.cluster_sync(name).await.unwrap_or_default()["status"]["upgrade"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_stages_run_in_order_wait_for_their_condition_and_resume_after_a_restart() {
    let env = Env::new(1).await;
    publish(&env.repo, "docker-ferrol-1-27-v3");
    publish_v4_with_upgrade_stages(&env.repo);
    env.add_cluster("alpha", "docker-ferrol-1-27-v3", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.stack_config(|s| s.set("availableReleases", 2).set("stageTimeout", "1h")).write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon.eventually("alpha on v3", Duration::from_secs(30), async || env.applied_tag("alpha").await == "docker-ferrol-1-27-v3").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    // As a v3 that had applied it would have left it: labelled with stacksync's owner.
    let legacy = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "legacy-dns", "namespace": "kube-system", "labels": {"stacksync.io/owner": "ferrol.team-a.alpha"}}});
    cms.patch("legacy-dns", &PatchParams::apply("someone"), &Patch::Apply(legacy)).await.expect("legacy-dns");

    // Cluster API's part: the class moves to v4. Stage 1 deletes legacy-dns, stage 2 applies
    // cni and waits for the gate; metrics-server (stage 3) and v4's addons wait.
    env.patch_cluster("alpha", json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v4"}}})).await;
    daemon
        .eventually("waiting at stage 2's post-condition", Duration::from_secs(30), async || {
            let u = upgrade_status(&env, "alpha").await;
            u["stage"] == "cni" && u["phase"] == "PostCondition" && u["stageIndex"] == 1
        })
        .await;
    assert!(env.configmap(0, "legacy-dns").await.is_none(), "the delete stage did not run");
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v3", "{cs}");
    assert!(cs["status"]["message"].as_str().is_some_and(|m| m.contains("`cni`")), "the MESSAGE column shows the stage: {cs}");
    let message = condition(&cs, "Ready")["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("upgrade stage 2/3 `cni` PostCondition") && message.contains("ConfigMap/kube-system/upgrade-gate does not exist"),
        "{message}"
    );
    let since = upgrade_status(&env, "alpha").await["since"].clone();
    daemon.stop().await;

    // A restart resumes at the same stage, with the same start time.
    let daemon = Daemon::start(&config, env.dir.path().join("daemon2.log")).await;
    daemon
        .eventually("resumed at stage 2", Duration::from_secs(30), async || daemon.log().contains("upgrade stage 2/3 `cni` PostCondition"))
        .await;
    assert_eq!(upgrade_status(&env, "alpha").await["since"], since);
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v3");

    // The gate opens (first not yet: `no`, then `yes`): stage 3, then v4's addons.
    let gate = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "upgrade-gate", "namespace": "kube-system"}, "data": {"go": v}});
    cms.patch("upgrade-gate", &PatchParams::apply("test"), &Patch::Apply(gate("no"))).await.expect("gate");
    daemon
        .eventually("the condition is evaluated", Duration::from_secs(30), async || {
            upgrade_status(&env, "alpha").await["waitingFor"].as_str().is_some_and(|w| w.contains("is false"))
        })
        .await;
    cms.patch("upgrade-gate", &PatchParams::apply("test"), &Patch::Apply(gate("yes"))).await.expect("gate");
    daemon.eventually("alpha on v4", Duration::from_secs(30), async || env.applied_tag("alpha").await == "docker-ferrol-1-27-v4").await;
    let u = upgrade_status(&env, "alpha").await;
    assert_eq!(
        (u["phase"].as_str(), u["from"].as_str(), u["to"].as_str()),
        (Some("Done"), Some("docker-ferrol-1-27-v3"), Some("docker-ferrol-1-27-v4")),
        "{u}"
    );
    assert_eq!(env.ready_reason("alpha").await.map(|r| r.0).as_deref(), Some("True"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_stage_waiting_past_its_stage_timeout_is_reported_with_the_stage() {
    let env = Env::new(1).await;
    publish(&env.repo, "docker-ferrol-1-27-v3");
    publish_v4_with_upgrade_stages(&env.repo);
    env.add_cluster("alpha", "docker-ferrol-1-27-v3", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.stack_config(|s| s.set("availableReleases", 2).set("stageTimeout", "1s")).write();
    common::assert_exit(&common::run_once(&config).await, 0);
    env.patch_cluster("alpha", json!({"spec": {"topology": {"class": "docker-ferrol-1-27-v4"}}})).await;
    common::run_once(&config).await;
    assert_eq!(upgrade_status(&env, "alpha").await["stage"], "cni");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let o = common::run_once(&config).await;
    common::assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(condition(&cs, "Ready")["reason"], "UpgradeFailed", "{cs}");
    let message = condition(&cs, "Ready")["message"].as_str().unwrap_or_default();
    assert!(message.contains("upgrade stage 2/3 `cni` PostCondition not done within stageTimeout 1s"), "{message}");
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_gets_its_install_stages_one_by_one_when_one_waits() {
    let env = Env::new(1).await;
    let install = "  AfterControlPlaneInitialized:\n    - name: cni\n      action: apply\n      waitForPreCondition:\n        objects:\n          - {key: gate, apiVersion: v1, kind: ConfigMap, name: install-gate, namespace: kube-system}\n        conditions: has(gate.data.go)\n    - name: metrics-server\n      action: apply\n";
    publish_v3_as(&env.repo, "v5", Some(install), "  BeforeClusterUpgrade: []\n");
    env.add_cluster("alpha", "docker-ferrol-1-27-v5", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = stack_config(&env);
    // `run --once` waits for the stage (up to stageTimeout) as it waits for health.
    let once = tokio::spawn(async move { common::run_once(&config).await });
    common::eventually(
        "an install stage waiting",
        Duration::from_secs(30),
        async || upgrade_status(&env, "alpha").await["stage"] == "cni",
        String::new,
    )
    .await;
    let u = upgrade_status(&env, "alpha").await;
    assert_eq!((u["hook"].as_str(), u["phase"].as_str()), (Some("AfterControlPlaneInitialized"), Some("PreCondition")), "{u}");
    assert!(env.configmap(0, "cni-config").await.is_none(), "cni applied before its pre-condition held");
    let cms: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    let gate = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "install-gate", "namespace": "kube-system"}, "data": {"go": ""}});
    cms.patch("install-gate", &PatchParams::apply("test"), &Patch::Apply(gate)).await.expect("gate");
    common::assert_exit(&once.await.expect("run --once"), 0);
    assert_eq!(env.applied_tag("alpha").await, "docker-ferrol-1-27-v5");
    assert!(env.configmap(0, "cni-config").await.is_some());
    assert_eq!(upgrade_status(&env, "alpha").await["phase"], "Done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_previews_the_cluster_class_in_the_management_cluster_too() {
    let env = Env::new(1).await;
    publish(&env.repo, "docker-ferrol-1-27-v2");
    env.add_cluster("alpha", "docker-ferrol-1-27-v2", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = stack_config(&env);
    common::assert_exit(&common::run_once(&config).await, 0);
    let diff = |config: PathBuf| async move { cli(&["diff", "--config", &config.to_string_lossy()], &[]).await };
    let o = diff(config.clone()).await;
    common::assert_exit(&o, 0);
    assert!(common::stdout(&o).contains("no changes"), "{}", common::stdout(&o));

    // Someone deletes the ClusterClass: the diff shows it coming back, and writes nothing.
    let classes: Api<DynamicObject> = Api::namespaced_with(env.mgmt(), NS, &common::res("cluster.x-k8s.io", "v1beta1", "ClusterClass"));
    classes.delete("docker-ferrol-1-27-v2", &DeleteParams::default()).await.expect("delete");
    let o = diff(config).await;
    common::assert_exit(&o, 1);
    assert!(common::stdout(&o).contains(&format!("create ClusterClass/{NS}/docker-ferrol-1-27-v2")), "{}", common::stdout(&o));
    assert!(env.cluster_classes().await.is_empty(), "diff wrote");
}

/// The release roll-up (each StackRelease's `status.clusters` and Ready) counts from its watch
/// of the ClusterSyncs, not a LIST of all of them per change: while the fleet's ClusterSyncs
/// change for several seconds, the management server sees a constant handful of ClusterSync
/// LISTs (the watches' first lists), not one a second (issue 54: 56 LISTs of 3,000 ClusterSyncs
/// on the way to Ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_rollup_counts_from_its_watch_not_a_list_per_second() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    let names: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    for name in &names {
        env.add_cluster(name, "docker-ferrol-1-27-v1", true).await;
        env.add_kubeconfig(name, 0).await;
    }
    let config = env.config().write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    let releases: Api<DynamicObject> = Api::all_with(env.mgmt(), &common::res("stacksync.io", "v1alpha1", "StackRelease"));
    let ready = async |want: i64| {
        releases.list(&Default::default()).await.is_ok_and(|l| l.items.iter().any(|r| r.data["status"]["clusters"]["ready"] == want))
    };
    daemon.eventually("the roll-up counts every Cluster ready", Duration::from_secs(30), async || ready(6).await).await;
    let lists = || Stats::count(&env.mgmt.stats().requests, "list", "clustersyncs.stacksync.io");
    let before = lists();
    // Six seconds of changes: each Cluster's control plane goes away and comes back in turn,
    // every change a ClusterSync status the roll-up counts (and recounts after its 1 s settle).
    for name in &names {
        env.set_ready(name, false).await;
        daemon.eventually("the roll-up counts one Cluster not ready", Duration::from_secs(20), async || ready(5).await).await;
        env.set_ready(name, true).await;
        daemon.eventually("the roll-up counts every Cluster ready again", Duration::from_secs(20), async || ready(6).await).await;
    }
    let during = lists() - before;
    assert!(during == 0, "the roll-up LISTed ClusterSyncs {during} times while they changed (from start: {before} LISTs)");
    assert!(before <= 4, "{before} LISTs of ClusterSyncs from the start to every Cluster ready: a handful expected");
    assert!(before >= 1, "no LIST of ClusterSyncs counted at all: does the counter name the resource as the watch asks for it?");
    daemon.stop().await;
}
