//! The controller in a hostile environment: a malformed kubeconfig Secret, a kill in the middle
//! of an apply, workload and management API servers that fail or freeze, a release tag that
//! moves. Nothing is reported synced that is not, no Secret content is echoed, nothing hangs.

use std::time::Duration;

use fake_apiserver::FaultRule;
use kube::api::Api;

use crate::common::fleet::{CM, Env, NS};
use crate::common::{Daemon, assert_exit, condition, run_once, stderr, stdout};

const TOKEN: &str = "s3cr3t-t0ken-do-not-echo";

/// `n` ConfigMaps, one per document.
fn many_configmaps(n: usize, value: &str) -> String {
    (0..n)
        .map(|i| {
            format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: kube-system\ndata:\n  v: \"{value}\"\n")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_kubeconfig_secret_was_echoed_into_status() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    // A kubeconfig with a token and broken indentation: a YAML error would quote the line.
    let broken = format!("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {TOKEN}\n   oops: [unclosed\n");
    env.put_kubeconfig("alpha", broken.into_bytes()).await;

    let o = run_once(&env.config().write()).await;
    assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    let text = format!("{cs}{}{}", stdout(&o), stderr(&o));
    assert!(!text.contains(TOKEN), "the token was echoed:\n{text}");
    assert!(!text.contains("oops"), "the Secret's content was quoted:\n{text}");
    let message = condition(&cs, "Ready")["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains(&format!("Secret {NS}/alpha-kubeconfig")) && message.contains("not a valid kubeconfig"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_apply_left_the_old_release_reported_ready() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cms.yaml", &many_configmaps(40, "one"))]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);

    // v2 changes every object; each write takes 5 s, so the apply is under way for half a
    // minute (not over before the kill, however late the test looks).
    env.repo.release("v2.0.0", &[("manifests/cms.yaml", &many_configmaps(40, "two"))]);
    env.workloads[0].faults().add(FaultRule::new().verb("patch").path("/configmaps/").latency(Duration::from_secs(5)));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("the apply of v2 started", Duration::from_secs(60), async || {
            env.cluster_sync("alpha").await.is_some_and(|cs| cs["status"]["wantedRelease"]["tag"] == "v2.0.0")
        })
        .await;
    let mut daemon = daemon;
    daemon.kill().await; // SIGKILL, mid-apply

    // The record says the truth: not Ready, an apply under way, v2 wanted.
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    let ready = condition(&cs, "Ready");
    assert_eq!(ready["status"], "False", "{cs}");
    assert_eq!(ready["reason"], "Progressing", "{cs}");
    assert_eq!(condition(&cs, "Reconciling")["status"], "True", "{cs}");

    // A restart converges, and only then says Ready.
    env.workloads[0].faults().clear();
    assert_exit(&run_once(&config).await, 0);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(condition(&cs, "Ready")["status"], "True", "{cs}");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v2.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_500s_were_reported_stalled() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    env.workloads[0].faults().add(FaultRule::new().path("/configmaps").status(500));
    let o = run_once(&env.config().kubernetes_set("requestTimeout", "3s").write()).await;
    assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(condition(&cs, "Ready")["reason"], "TransientError", "{cs}");
    assert_eq!(condition(&cs, "Reconciling")["status"], "True", "{cs}");
    assert_eq!(condition(&cs, "Stalled")["status"], "False", "{cs}");

    env.workloads[0].faults().clear();
    assert_exit(&run_once(&env.config().write()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_management_api_hung_the_pass() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    // Every request is held for an hour: the API server accepts and never answers.
    env.mgmt.faults().add(FaultRule::new().latency(Duration::from_secs(3600)));
    let started = std::time::Instant::now();
    let o = run_once(&env.config().kubernetes_set("requestTimeout", "2s").write()).await;
    assert_exit(&o, 1);
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    assert!(stderr(&o).contains("timed out") || stdout(&o).contains("timed out"), "{}\n{}", stdout(&o), stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_api_503_reported_nothing_synced() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    env.mgmt.faults().add(FaultRule::new().status(503));
    let started = std::time::Instant::now();
    let o = run_once(&env.config().kubernetes_set("requestTimeout", "2s").write()).await;
    assert_exit(&o, 1);
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    assert!(stdout(&o).contains("503"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("failed with status"), "kube-client's context-free line: {}", stderr(&o));
    assert!(!stdout(&o).contains("1/1 clusters ready"), "{}", stdout(&o));
    assert!(env.workloads[0].stats().total_writes() == 0, "nothing is applied without the management cluster");
    env.mgmt.faults().clear();
    assert_exit(&run_once(&env.config().write()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_left_ready_and_exit_0() {
    let env = Env::new(1).await;
    let original = env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);

    env.repo.write("manifests/cm.yaml", &CM.replace("cluster: ${cluster.name}", "cluster: sneaky"));
    env.repo.commit("rewrite the release");
    env.repo.move_tag("v1.0.0");
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    let ready = condition(&cs, "Ready");
    assert_eq!(ready["reason"], "TagRefused", "{cs}");
    assert!(ready["message"].as_str().is_some_and(|m| m.contains("allowMovedTags")), "{cs}");
    assert_eq!(condition(&cs, "Stalled")["status"], "True", "{cs}");
    assert_eq!(cs["status"]["appliedRelease"]["commit"], original.as_str(), "the verified commit stays applied");
    assert_eq!(env.configmap(0, "addon-alpha").await.unwrap().data.unwrap()["cluster"], "alpha");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cluster_sync_orphaned_objects_silently() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);
    let syncs: Api<stacksync::status::crd::ClusterSync> = Api::namespaced(env.mgmt(), NS);
    syncs.delete("alpha", &Default::default()).await.unwrap();
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("the inventory was lost"), "{}", stderr(&o));
    assert!(stderr(&o).contains("ferrol.team-a.alpha"), "the warning names the owner label value: {}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_watches_and_a_failing_management_api_stopped_the_controller() {
    let env = Env::new(2).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let daemon = Daemon::start(&env.config().kubernetes_set("requestTimeout", "2s").write(), env.dir.path().join("daemon.log")).await;
    daemon
        .eventually("alpha Ready", Duration::from_secs(30), async || env.ready_reason("alpha").await.is_some_and(|(s, _)| s == "True"))
        .await;
    // Every watch is cut, and for a while every request fails.
    env.mgmt.faults().add(FaultRule::new().status(500).times(40));
    env.mgmt.faults().cut_watches();
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.mgmt.faults().clear();
    // The watches come back by themselves: a new Cluster is synced within seconds.
    env.add_cluster("beta", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("beta", 1).await;
    daemon
        .eventually("beta Ready after the watches were cut", Duration::from_secs(30), async || {
            env.ready_reason("beta").await.is_some_and(|(s, _)| s == "True")
        })
        .await;
    daemon.stop().await;
}

/// The apply-started status write of alpha's ClusterSync.
fn status_writes() -> FaultRule {
    FaultRule::new().verb("patch").path("/clustersyncs/alpha/status")
}

/// v1 applied and Ready, v2 published; then `fault` on the ClusterSync's status writes, and a
/// `run --once`: nothing of v2 may be applied, and the ClusterSync keeps saying the truth.
async fn refused_status_write(fault: FaultRule, request_timeout: Option<&str>) {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cms.yaml", &many_configmaps(3, "one"))]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = match request_timeout {
        Some(t) => env.config().kubernetes_set("requestTimeout", t).write(),
        None => env.config().write(),
    };
    assert_exit(&run_once(&config).await, 0);
    let writes = env.workloads[0].stats().total_writes();

    env.repo.release("v2.0.0", &[("manifests/cms.yaml", &many_configmaps(3, "two"))]);
    env.mgmt.faults().add(fault);
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("that the apply of v2.0.0 started") && text.contains("nothing was applied"), "{text}");
    assert_eq!(env.workloads[0].stats().total_writes(), writes, "v2 was applied although its status could not be written");
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0", "{cs}");
    assert_eq!(env.configmap(0, "cm-0").await.unwrap().data.unwrap()["v"], "one");
    assert!(stdout(&o).contains("0/1 clusters ready"), "the summary counts the cluster: {}", stdout(&o));
    // Said where a user looks: a Warning Event on the ClusterSync.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.mgmt(), NS);
    let list = events.list(&Default::default()).await.unwrap();
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("StatusWriteFailed") && e.note.as_deref().is_some_and(|n| n.contains("v2.0.0"))),
        "no StatusWriteFailed event: {:?}",
        list.items.iter().map(|e| (&e.reason, &e.note)).collect::<Vec<_>>()
    );

    // The daemon retries with backoff and counts each refusal in the metrics.
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    let series = "stacksync_reconciles_total{subscription=\"\",result=\"error\",reason=\"WriteProgress\"}";
    daemon.eventually("a WriteProgress error counted", Duration::from_secs(60), async || daemon.metric(series).await >= 2.0).await;
    assert_eq!(env.workloads[0].stats().total_writes(), writes, "the daemon applied v2 although its status could not be written");
    daemon.stop().await;

    // Once the status can be written, v2 goes in and only then is reported.
    env.mgmt.faults().clear();
    assert_exit(&run_once(&config).await, 0);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v2.0.0", "{cs}");
    assert_eq!(env.configmap(0, "cm-0").await.unwrap().data.unwrap()["v"], "two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_write_500_reported_the_old_release_ready_while_the_new_one_ran() {
    refused_status_write(status_writes().status(500), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_write_timeout_reported_the_old_release_ready_while_the_new_one_ran() {
    // Every status write is held past the request timeout.
    refused_status_write(status_writes().latency(Duration::from_secs(3600)), Some("1s")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_status_write_refused_left_the_apply_unrecorded() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cms.yaml", &many_configmaps(3, "one"))]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);

    // The apply-started write lands; the next four status writes are refused: the final write
    // of this reconcile (three tries) and the first try of the next.
    env.repo.release("v2.0.0", &[("manifests/cms.yaml", &many_configmaps(3, "two"))]);
    env.mgmt.faults().add(status_writes().status(500).skip(1).times(4));
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    // Whenever v2's objects are in place, the ClusterSync does not claim v1 is Ready.
    daemon
        .eventually("v2 applied and recorded Ready", Duration::from_secs(60), async || {
            let applied = env.configmap(0, "cm-0").await.and_then(|c| c.data).is_some_and(|d| d["v"] == "two");
            let cs = env.cluster_sync("alpha").await.unwrap_or_default();
            let (ready, tag) = (condition(&cs, "Ready")["status"] == "True", cs["status"]["appliedRelease"]["tag"].clone());
            assert!(!(applied && ready && tag == "v1.0.0"), "v2 runs while the ClusterSync says v1 is Ready: {cs}");
            applied && ready && tag == "v2.0.0"
        })
        .await;
    let log = daemon.log();
    assert!(log.contains("cannot write ClusterSync team-a/alpha"), "the refused final write was not said:\n{log}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_that_no_longer_matches_left_the_release_ready() {
    let env = Env::new(1).await;
    let commit = env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    assert_exit(&run_once(&config).await, 0);

    // A pin added later that the accepted tag does not satisfy.
    let pin = "1".repeat(40);
    let config = env.config().source_set("stacks", "pins", serde_json::json!({"v1.0.0": pin})).write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    let ready = condition(&cs, "Ready");
    assert_eq!(ready["status"], "False", "{cs}");
    assert_eq!(ready["reason"], "PinMismatch", "{cs}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("v1.0.0") && message.contains(&pin) && message.contains(commit.as_str()), "{message}");
    // No silent rollback: what was applied stays.
    assert_eq!(cs["status"]["appliedRelease"]["commit"], commit.as_str(), "{cs}");
    assert_eq!(env.configmap(0, "addon-alpha").await.unwrap().data.unwrap()["cluster"], "alpha");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_for_its_digest_was_retried_forever_and_never_stalled() {
    use testkit::github::{Fault, GithubServer, Route};
    let env = Env::new(1).await;
    let server = GithubServer::start().await.expect("GitHub server");
    let cm2 = CM.replace("addon-", "second-");
    let v1 = vec![("manifests.tar.gz".to_owned(), crate::common::targz(&[("cm.yaml", CM)]))];
    let v2 = vec![("manifests.tar.gz".to_owned(), crate::common::targz(&[("cm.yaml", CM), ("cm2.yaml", &cm2)]))];
    server.add_release("acme/stacks", "v1.0.0", &v1, false, false);
    let clusters = ["alpha", "beta", "gamma"];
    for name in clusters {
        env.add_cluster(name, "docker-ferrol-1-27-v1", true).await;
        env.add_kubeconfig(name, 0).await;
    }
    let config = env.config().github("stacks", "acme/stacks", &server.api_url()).write();
    assert_exit(&run_once(&config).await, 0);

    // v2's asset does not match the digest GitHub publishes for it: a refusal no retry soon can
    // change. Every Cluster says so as Stalled, with the error's own reason, and the release is
    // downloaded once, not once per Cluster.
    server.add_release("acme/stacks", "v2.0.0", &v2, false, false);
    server.fail_next(Route::Storage, Fault::WrongBytes);
    let downloads = || server.count("/storage/");
    let before = downloads();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    for name in clusters {
        let cs = env.cluster_sync(name).await.expect("ClusterSync");
        let (ready, stalled, reconciling) = (condition(&cs, "Ready"), condition(&cs, "Stalled"), condition(&cs, "Reconciling"));
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ReleaseRefused")), "{cs}");
        assert_eq!((stalled["status"].as_str(), stalled["reason"].as_str()), (Some("True"), Some("DigestMismatch")), "{cs}");
        assert_eq!(reconciling["status"], "False", "{cs}");
        assert!(ready["message"].as_str().unwrap_or_default().contains("digest mismatch"), "{cs}");
        // What is in place stays, and is said to be.
        assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0", "{cs}");
    }
    assert_eq!(downloads() - before, 1, "the refused release was downloaded again for another Cluster:\n{}", stdout(&o));
    assert!(env.configmap(0, "second-alpha").await.is_none(), "the refused release was applied");

    // Its input changes (here: a new process; in the daemon a poll, a new config or the
    // resync): tried again, and put in place.
    assert_exit(&run_once(&config).await, 0);
    for name in clusters {
        let cs = env.cluster_sync(name).await.expect("ClusterSync");
        assert_eq!(
            (condition(&cs, "Ready")["status"].as_str(), cs["status"]["appliedRelease"]["tag"].as_str()),
            (Some("True"), Some("v2.0.0"))
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_source_did_not_serve_was_reported_stalled() {
    use testkit::github::{Fault, GithubServer, Route};
    let env = Env::new(1).await;
    let server = GithubServer::start().await.expect("GitHub server");
    let cm2 = CM.replace("addon-", "second-");
    server.add_release("acme/stacks", "v1.0.0", &[("manifests.tar.gz".to_owned(), crate::common::targz(&[("cm.yaml", CM)]))], false, false);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().github("stacks", "acme/stacks", &server.api_url()).write();
    assert_exit(&run_once(&config).await, 0);

    // The storage host answers 503 to every attempt at v2's asset: it may come back by itself,
    // so the Cluster is Reconciling (backoff), never Stalled, and says which error.
    let v2 = [("manifests.tar.gz".to_owned(), crate::common::targz(&[("cm.yaml", CM), ("cm2.yaml", &cm2)]))];
    server.add_release("acme/stacks", "v2.0.0", &v2, false, false);
    for _ in 0..stacksync::source::github::DOWNLOAD_ATTEMPTS {
        server.fail_next(Route::Storage, Fault::Status(503));
    }
    assert_exit(&run_once(&config).await, 1);
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    let (ready, reconciling) = (condition(&cs, "Ready"), condition(&cs, "Reconciling"));
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ReleaseUnavailable")), "{cs}");
    assert_eq!(reconciling["status"], "True", "{cs}");
    assert_ne!(reconciling["reason"], "ReleaseUnavailable", "the Reconciling condition names the error itself: {cs}");
    assert_eq!(condition(&cs, "Stalled")["status"], "False", "{cs}");
    assert_eq!(cs["status"]["appliedRelease"]["tag"], "v1.0.0", "{cs}");

    // It came back: the next pass puts v2 in place.
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(env.cluster_sync("alpha").await.expect("ClusterSync")["status"]["appliedRelease"]["tag"], "v2.0.0");
    server.stop().await;
}
