//! The Cluster API runtime hook of the real binary (`run --hooks-addr`), called as Cluster API
//! calls it: POSTed JSON over TLS verified against a CA made by `openssl` for this test. The
//! tests play Cluster API: they move a Cluster's class to the next release, ask
//! `BeforeClusterUpgrade` whether the upgrade may go on, and open the gate a stage waits for.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Daemon;
use common::certs::make_certs;
use common::fleet::{Env, NS, publish, publish_v4_with_upgrade_stages};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const V3: &str = "docker-ferrol-1-27-v3";
const V4: &str = "docker-ferrol-1-27-v4";
const API: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";
const UPGRADE: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclusterupgrade/before-cluster-upgrade";
const INITIALIZED: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/aftercontrolplaneinitialized/after-control-plane-initialized";
const DISCOVERY: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery";

/// A client that trusts only `ca` (as Cluster API trusts only the ExtensionConfig's caBundle).
fn client(ca: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).expect("ca")).expect("ca pem");
    reqwest::Client::builder().tls_certs_only([ca]).timeout(Duration::from_secs(15)).build().expect("client")
}

async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>) -> (u16, Value) {
    let r = client.post(url).header("content-type", "application/json").body(body).send().await.expect("call the hook");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A `BeforeClusterUpgradeRequest` for `cluster`, as Cluster API sends it.
fn upgrade_request(cluster: &Value) -> Vec<u8> {
    let body = json!({
        "apiVersion": API, "kind": "BeforeClusterUpgradeRequest", "settings": {},
        "cluster": cluster, "fromKubernetesVersion": "v1.27.3", "toKubernetesVersion": "v1.27.4",
    });
    serde_json::to_vec(&body).expect("json")
}

async fn cluster(env: &Env, name: &str) -> Value {
    serde_json::to_value(env.clusters().get(name).await.expect("Cluster")).expect("json")
}

async fn start(env: &Env, config: &Path, cert: &Path, key: &Path) -> Daemon {
    Daemon::launch(config, env.dir.path().join("daemon.log")).hooks(cert, key).start().await
}

fn stack_config(env: &Env, stage_timeout: &str) -> PathBuf {
    env.stack_config(|s| s.set("availableReleases", 2).set("stageTimeout", stage_timeout)).write()
}

/// Writes `from` over `to` the way a Secret volume changes: a whole new file, renamed in.
fn replace(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_cluster_upgrade_holds_the_upgrade_until_the_stages_are_done_and_a_rotated_certificate_is_served() {
    let env = Env::new(1).await;
    publish(&env.repo, V3);
    publish_v4_with_upgrade_stages(&env.repo);
    env.add_cluster("alpha", V3, true).await;
    env.add_kubeconfig("alpha", 0).await;
    let certs = env.dir.path().join("certs");
    std::fs::create_dir_all(&certs).expect("certs");
    let (ca, crt, key) = make_certs(&certs, "first", false);
    let (mounted_crt, mounted_key) = (certs.join("tls.crt"), certs.join("tls.key"));
    replace(&crt, &mounted_crt);
    replace(&key, &mounted_key);
    let config = stack_config(&env, "1h");
    let daemon = start(&env, &config, &mounted_crt, &mounted_key).await;
    let base = daemon.hooks_url().await;
    let http = client(&ca);

    // Discovery, as Cluster API asks when it reconciles the ExtensionConfig.
    let discovery = json!({"apiVersion": API, "kind": "DiscoveryRequest"});
    let (status, d) = post(&http, &format!("{base}{DISCOVERY}?timeout=10s"), serde_json::to_vec(&discovery).expect("json")).await;
    assert_eq!((status, d["kind"].as_str(), d["status"].as_str()), (200, Some("DiscoveryResponse"), Some("Success")), "{d}");
    let handlers: Vec<(&str, &str, &str)> = d["handlers"]
        .as_array()
        .expect("handlers")
        .iter()
        .map(|h| {
            (h["name"].as_str().unwrap_or(""), h["requestHook"]["hook"].as_str().unwrap_or(""), h["failurePolicy"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        handlers,
        [
            ("before-cluster-upgrade", "BeforeClusterUpgrade", "Fail"),
            ("after-control-plane-initialized", "AfterControlPlaneInitialized", "Ignore")
        ]
    );
    assert!(d["handlers"].as_array().expect("handlers").iter().all(|h| h["requestHook"]["apiVersion"] == API && h["timeoutSeconds"] == 10));

    daemon.eventually("alpha on v3", Duration::from_secs(60), async || env.applied_tag("alpha").await == V3).await;

    // A Cluster no subscription covers (no `stack` label): not ours, go on.
    let stranger = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "stranger", "namespace": NS}, "spec": {"topology": {"class": V4, "version": "v1.27.4"}}});
    let (status, r) = post(&http, &format!("{base}{UPGRADE}?timeout=10s"), upgrade_request(&stranger)).await;
    assert_eq!((status, r["status"].as_str(), r["retryAfterSeconds"].as_u64()), (200, Some("Success"), Some(0)), "{r}");
    assert!(r["message"].as_str().is_some_and(|m| m.contains("no stacksync subscription covers Cluster team-a/stranger")), "{r}");

    // Malformed requests: 400 with the reason, and the listener goes on serving.
    let (status, r) = post(&http, &format!("{base}{UPGRADE}"), b"{\"apiVersion\": \"hooks.runtime".to_vec()).await;
    assert_eq!(status, 400, "{r}");
    assert!(r["message"].as_str().is_some_and(|m| m.starts_with("BeforeClusterUpgradeRequest: not valid JSON")), "{r}");
    let (status, r) = post(
        &http,
        &format!("{base}{UPGRADE}"),
        serde_json::to_vec(&json!({"apiVersion": API, "kind": "BeforeClusterUpgradeRequest"})).expect("json"),
    )
    .await;
    assert_eq!(status, 400, "{r}");
    assert!(r["message"].as_str().is_some_and(|m| m.contains("missing field `cluster`")), "{r}");
    let (status, _) = post(&http, &format!("{base}{UPGRADE}"), vec![b' '; 1024 * 1024 + 1]).await;
    assert_eq!(status, 413);
    let (status, r) = post(&http, &format!("{base}/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclusterdelete/x"), b"{}".to_vec()).await;
    assert_eq!(status, 404, "{r}");
    // Plain HTTP on the TLS port: the handshake fails, the listener goes on.
    let mut plain = tokio::net::TcpStream::connect(base.trim_start_matches("https://")).await.expect("connect");
    tokio::io::AsyncWriteExt::write_all(&mut plain, b"POST / HTTP/1.1\r\nhost: x\r\n\r\n").await.expect("write");
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut sink)).await;
    assert_eq!(post(&http, &format!("{base}{DISCOVERY}"), b"{}".to_vec()).await.0, 200);

    // Cluster API's part: the class (and version) move to v4; before it touches the control
    // plane it asks the hook, again and again while the answer is "retry".
    env.patch_cluster("alpha", json!({"spec": {"topology": {"class": V4, "version": "v1.27.4"}}})).await;
    let alpha = cluster(&env, "alpha").await;
    let mut last = Value::Null;
    daemon
        .eventually("the hook holds the upgrade at stage 2's post-condition", Duration::from_secs(60), async || {
            let (status, r) = post(&http, &format!("{base}{UPGRADE}?timeout=10s"), upgrade_request(&alpha)).await;
            assert_eq!(status, 200, "{r}");
            assert_eq!((r["apiVersion"].as_str(), r["kind"].as_str()), (Some(API), Some("BeforeClusterUpgradeResponse")), "{r}");
            assert_eq!(r["status"], "Success", "nothing failed yet: {r}");
            assert_eq!(r["retryAfterSeconds"], 10, "the stages are not done: {r}");
            last = r.clone();
            r["message"].as_str().is_some_and(|m| m.contains("stage 2/3 `cni` PostCondition"))
        })
        .await;
    assert!(last["message"].as_str().is_some_and(|m| m.contains("ConfigMap/kube-system/upgrade-gate does not exist")), "{last}");
    assert_eq!(env.applied_tag("alpha").await, V3, "v4's addons wait for the stages");
    // A "retry" asked the controller to look at the Cluster now.
    let cs = env.cluster_sync("alpha").await.expect("ClusterSync");
    assert!(cs["metadata"]["annotations"]["stacksync.io/reconcile-requested-at"].is_string(), "{cs}");

    // The gate opens: the stages finish and the hook lets Cluster API go on, for the v1beta1
    // Cluster and for the same Cluster as v1beta2 shapes it (classRef).
    let cms: Api<ConfigMap> = Api::namespaced(env.workloads[0].client().expect("client"), "kube-system");
    let gate = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "upgrade-gate", "namespace": "kube-system"}, "data": {"go": "yes"}});
    cms.patch("upgrade-gate", &PatchParams::apply("test"), &Patch::Apply(gate)).await.expect("gate");
    let waited = daemon
        .eventually("the hook answers success", Duration::from_secs(60), async || {
            let (_, r) = post(&http, &format!("{base}{UPGRADE}"), upgrade_request(&alpha)).await;
            r["status"] == "Success" && r["retryAfterSeconds"] == 0
        })
        .await;
    eprintln!("gate open to hook success: {waited:?}");
    let mut v1beta2 = alpha.clone();
    v1beta2["apiVersion"] = json!("cluster.x-k8s.io/v1beta2");
    v1beta2["spec"]["topology"] = json!({"classRef": {"name": V4}, "version": "v1.27.4"});
    let (_, r) = post(&http, &format!("{base}{UPGRADE}"), upgrade_request(&v1beta2)).await;
    assert_eq!((r["status"].as_str(), r["retryAfterSeconds"].as_u64()), (Some("Success"), Some(0)), "{r}");
    daemon.eventually("alpha on v4", Duration::from_secs(60), async || env.applied_tag("alpha").await == V4).await;

    // What one call costs Cluster API (a fresh TLS handshake each, as the listener keeps no
    // connection, and one ClusterSync read).
    let mut took = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let (status, _) = post(&http, &format!("{base}{UPGRADE}"), upgrade_request(&alpha)).await;
        took.push(t.elapsed());
        assert_eq!(status, 200);
    }
    took.sort();
    eprintln!("BeforeClusterUpgrade round trip over 20 calls: median {:?}, max {:?}", took[10], took[19]);

    // AfterControlPlaneInitialized never blocks.
    let body = json!({"apiVersion": API, "kind": "AfterControlPlaneInitializedRequest", "cluster": alpha});
    let (status, r) = post(&http, &format!("{base}{INITIALIZED}"), serde_json::to_vec(&body).expect("json")).await;
    assert_eq!(
        (status, r["kind"].as_str(), r["status"].as_str()),
        (200, Some("AfterControlPlaneInitializedResponse"), Some("Success")),
        "{r}"
    );
    assert!(r.get("retryAfterSeconds").is_none(), "{r}");

    // cert-manager rotates the certificate (a new CA here, so the old one no longer verifies):
    // new connections get the new one, without a restart.
    let (ca2, crt2, key2) = make_certs(&certs, "second", true);
    replace(&crt2, &mounted_crt);
    replace(&key2, &mounted_key);
    let http2 = client(&ca2);
    let url = format!("{base}{DISCOVERY}");
    let rotated = daemon
        .eventually("the rotated certificate is served", Duration::from_secs(10), async || {
            http2.post(&url).body("{}").send().await.is_ok_and(|r| r.status() == 200)
        })
        .await;
    eprintln!("rotation picked up after {rotated:?}");
    assert!(http.post(&url).body("{}").send().await.is_err(), "the old certificate is still served");
    assert!(daemon.log().contains("the certificate changed"), "{}", daemon.log());
    // The answers are logged with the Cluster.
    let log = daemon.log();
    assert!(log.lines().any(|l| l.contains("runtime hook") && l.contains("cluster=team-a/alpha") && l.contains("answer=retry")), "{log}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_cluster_upgrade_fails_with_the_stage_when_it_timed_out() {
    let env = Env::new(1).await;
    publish(&env.repo, V3);
    publish_v4_with_upgrade_stages(&env.repo);
    env.add_cluster("alpha", V3, true).await;
    env.add_kubeconfig("alpha", 0).await;
    let (ca, crt, key) = make_certs(env.dir.path(), "hooks", false);
    let daemon = start(&env, &stack_config(&env, "1s"), &crt, &key).await;
    let base = daemon.hooks_url().await;
    let http = client(&ca);
    daemon.eventually("alpha on v3", Duration::from_secs(60), async || env.applied_tag("alpha").await == V3).await;
    env.patch_cluster("alpha", json!({"spec": {"topology": {"class": V4, "version": "v1.27.4"}}})).await;
    let alpha = cluster(&env, "alpha").await;
    let mut last = Value::Null;
    daemon
        .eventually("the hook answers failure", Duration::from_secs(60), async || {
            let (status, r) = post(&http, &format!("{base}{UPGRADE}"), upgrade_request(&alpha)).await;
            assert_eq!(status, 200, "{r}");
            last = r.clone();
            r["status"] == "Failure"
        })
        .await;
    let message = last["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Cluster team-a/alpha")
            && message.contains("upgrade stage 2/3 `cni` PostCondition not done within stageTimeout 1s"),
        "{last}"
    );
    assert_eq!(env.applied_tag("alpha").await, V3);
    daemon.stop().await;
}
