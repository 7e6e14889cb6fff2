//! SCS-shaped cluster stacks on the real Cluster API with the real providers' CRDs (issue 41
//! item 1): stacksync applies stacks whose ClusterClasses reference the OpenStack provider's,
//! the Docker provider's and the kubeadm kinds — `openstack-scs-1-33-v1` and
//! `openstack-scs-1-34-v1` (two Kubernetes minors, one line) and `docker-scs-1-34-v1`
//! (testdata/clusterstack, written for these tests after the shapes of the public
//! SovereignCloudStack/cluster-stacks) — to the management cluster of `testkit::capi`, where the
//! CRDs of cluster-api-provider-openstack, of the Docker provider and of the kubeadm bootstrap
//! and control-plane providers are installed (`testkit::providers`, from their Go modules by
//! scripts/build-provider-crds.sh). Cluster API's webhooks validate each ClusterClass, its
//! ClusterClass controller reconciles it (`VariablesReady`, `RefVersionsUpToDate`), its
//! topology controller computes each Cluster's OpenStackCluster, KubeadmControlPlane and
//! machine templates with the stack's patches, and it holds an upgrade to the next minor until
//! stacksync's `BeforeClusterUpgrade` stages are done. The providers' controllers do not run:
//! `testkit::providers` plays their contracts (the control plane reports its version and
//! replicas, initialized and available).
//!
//! Cluster API objects are written in `cluster.x-k8s.io/v1beta1`, the version the SCS stacks
//! use and every supported Cluster API serves; the kubeadm and Docker kinds in the latest
//! version the running Cluster API's contract names (the chart's `kubeadmAPIVersion` and
//! `dockerAPIVersion`), read from their CRDs' contract labels.
//!
//! `public_cluster_stacks_on_the_real_cluster_api` (ignored; `scripts/corpus.sh capi`) does the
//! same with every stack of a checkout of the public cluster-stacks.

mod common;

use std::time::{Duration, Instant};

use common::capi::{CapiTenant, STEP, applied, hook_calls, open_gate, ready, res, v2_gated_by};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const OS33: &str = "openstack-scs-1-33-v1";
const OS34: &str = "openstack-scs-1-34-v1";
const K33: &str = "v1.33.6";
const K34: &str = "v1.34.2";
const DOCKER: &str = "docker-scs-1-34-v1";
const EXTERNAL_ID: &str = "6c90b4a2-4b6e-4b8e-9f3a-0c1d2e3f4a5b";

/// The Cluster API objects' version in these tests.
const CAPI: &str = "v1beta1";

/// The providers' CRDs installed and their contracts played, once per test binary.
async fn providers() -> Option<&'static Versions> {
    static PROVIDERS: tokio::sync::OnceCell<Option<(testkit::providers::Providers, Versions)>> = tokio::sync::OnceCell::const_new();
    PROVIDERS
        .get_or_init(|| async {
            if !testkit::providers::available() {
                let message =
                    format!("the providers' CRDs are not in {} (scripts/build-provider-crds.sh)", testkit::providers::dir().display());
                assert!(std::env::var_os("CI").is_none(), "{message}; CI must run the SCS stacks tests");
                eprintln!("SKIPPED: {message}");
                return None;
            }
            let env = testkit::capi::shared().await?;
            let client = env.client().await.expect("management client");
            testkit::providers::install(&client).await.expect("install the providers' CRDs");
            let latest = async |group: &str, kind: &str| {
                let found = testkit::providers::latest_api_version(&client, group, kind).await.expect("read the CRD");
                found.unwrap_or_else(|| panic!("no contract label on the CRD of {kind}")).1
            };
            let versions = Versions {
                kubeadm: latest("controlplane.cluster.x-k8s.io", "KubeadmControlPlane").await,
                docker: latest("infrastructure.cluster.x-k8s.io", "DockerCluster").await,
                openstack: latest("infrastructure.cluster.x-k8s.io", "OpenStackCluster").await,
            };
            let player = testkit::providers::Providers::start(env).await.expect("play the providers' contracts");
            Some((player, versions))
        })
        .await
        .as_ref()
        .map(|(_, v)| v)
}

/// The API versions Cluster API reads the providers' kinds in.
#[derive(Debug, Clone)]
struct Versions {
    kubeadm: String,
    docker: String,
    openstack: String,
}

/// A tenant of the shared Cluster API with the providers in place; `None` when not built.
async fn tenant(test: &str) -> Option<(CapiTenant, &'static Versions)> {
    let versions = providers().await?;
    Some((CapiTenant::new(test).await?, versions))
}

/// Fixture release `release` with the chart's API versions set to the running Cluster API's.
fn publish(t: &CapiTenant, versions: &Versions, release: &str, edit: impl Fn(&str, String) -> String) {
    t.publish(release, |path, text| {
        let text = if path.ends_with("cluster-class-v1/values.yaml") {
            text.replace("kubeadmAPIVersion: v1beta2", &format!("kubeadmAPIVersion: {}", versions.kubeadm))
                .replace("dockerAPIVersion: v1beta2", &format!("dockerAPIVersion: {}", versions.docker))
        } else {
            text
        };
        edit(path, text)
    });
}

fn api(t: &CapiTenant, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(t.client(), &t.ns, &res(group, version, kind))
}

fn clusters(t: &CapiTenant) -> Api<DynamicObject> {
    api(t, "cluster.x-k8s.io", CAPI, "Cluster")
}

fn json_of(o: DynamicObject) -> Value {
    serde_json::to_value(o).expect("json")
}

/// A topology Cluster (v1beta1) of this tenant on `class` at `version`, one control-plane
/// replica, a machine deployment `md-0` of class `default-worker` with no replicas (no
/// Machines: nothing would boot them), and `variables`.
async fn add_cluster(t: &CapiTenant, name: &str, class: &str, version: &str, variables: Value) {
    let body = json!({
        "apiVersion": format!("cluster.x-k8s.io/{CAPI}"), "kind": "Cluster",
        "metadata": {"name": name, "namespace": t.ns, "labels": {"e2e": t.ns}},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}},
            "topology": {
                "class": class, "version": version, "controlPlane": {"replicas": 1},
                "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 0}]},
                "variables": variables,
            },
        },
    });
    clusters(t).create(&PostParams::default(), &serde_json::from_value(body).expect("Cluster")).await.expect("create the Cluster");
}

/// The objects of `kind` the topology controller made for Cluster `cluster`.
async fn owned(t: &CapiTenant, group: &str, version: &str, kind: &str, cluster: &str) -> Vec<Value> {
    let lp = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
    api(t, group, version, kind).list(&lp).await.expect("list").items.into_iter().map(json_of).collect()
}

async fn control_plane(t: &CapiTenant, v: &Versions, cluster: &str) -> Option<Value> {
    owned(t, "controlplane.cluster.x-k8s.io", &v.kubeadm, "KubeadmControlPlane", cluster).await.into_iter().next()
}

/// A condition of `type_` among `obj`'s conditions, in either place Cluster API puts it on a
/// v1beta1 object: `status.conditions` (its v1beta1 conditions) or `status.v1beta2.conditions`
/// (the newer ones, on v1beta1 objects of Cluster API v1.9 and later). `(status, reason,
/// message)`, the first found.
fn condition(obj: &Value, types: &[&str]) -> (String, String, String) {
    let lists = [&obj["status"]["conditions"], &obj["status"]["v1beta2"]["conditions"]];
    for list in lists {
        for c in list.as_array().into_iter().flatten() {
            if types.iter().any(|t| c["type"] == *t) {
                let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                return (s("status"), s("reason"), s("message"));
            }
        }
    }
    Default::default()
}

async fn class(t: &CapiTenant, name: &str) -> Value {
    let cc = api(t, "cluster.x-k8s.io", CAPI, "ClusterClass").get_opt(name).await.expect("get ClusterClass");
    cc.map(json_of).unwrap_or(Value::Null)
}

/// Waits until ClusterClass `name` is reconciled at its generation with its variables ready and
/// its template references up to date; returns it.
async fn class_accepted(t: &CapiTenant, daemon: &common::Daemon, name: &str) -> Value {
    let mut last = Value::Null;
    t.eventually(daemon, &format!("ClusterClass {name} accepted and reconciled by Cluster API"), STEP, async || {
        last = class(t, name).await;
        let current = last["status"]["observedGeneration"].as_i64().is_some()
            && last["status"]["observedGeneration"] == last["metadata"]["generation"];
        current
            && condition(&last, &["VariablesReady", "VariablesReconciled"]).0 == "True"
            && condition(&last, &["RefVersionsUpToDate"]).0 == "True"
    })
    .await;
    last
}

/// Waits until Cluster `name` runs `version` on `class`: the control plane reports it, and its
/// ClusterSync is Ready with `class` applied.
async fn wait_up(t: &CapiTenant, v: &Versions, daemon: &common::Daemon, name: &str, class: &str, version: &str) {
    t.eventually(daemon, &format!("{name} up on {class} at {version}"), STEP, async || {
        let cp = control_plane(t, v, name).await.unwrap_or_default();
        let cs = t.cluster_sync(name).await;
        cp["status"]["version"] == version && applied(&cs) == class && ready(&cs)
    })
    .await;
}

/// The OpenStackMachineTemplates of Cluster `cluster`: (control plane's, machine deployment
/// md-0's), told apart by the label the topology controller puts on a machine deployment's.
async fn machine_templates(t: &CapiTenant, v: &Versions, kind: &str, cluster: &str) -> (Vec<Value>, Vec<Value>) {
    let group_version = if kind.starts_with("OpenStack") { &v.openstack } else { &v.docker };
    let all = owned(t, "infrastructure.cluster.x-k8s.io", group_version, kind, cluster).await;
    all.into_iter().partition(|m| m["metadata"]["labels"]["topology.cluster.x-k8s.io/deployment-name"].is_null())
}

/// The value of `flag` in kubeadm extra arguments (a map in v1beta1, a list in v1beta2).
fn extra_arg(args: &Value, flag: &str) -> Option<String> {
    if let Some(list) = args.as_array() {
        list.iter().find(|a| a["name"] == flag).and_then(|a| a["value"].as_str()).map(str::to_owned)
    } else {
        args[flag].as_str().map(str::to_owned)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openstack_scs_stack_is_accepted_computed_with_its_patches_and_its_next_minor_held_by_the_hook() {
    let Some((t, v)) = tenant("openstack").await else { return };
    let gate = format!("gate-{}", t.ns);
    publish(&t, v, OS33, |_, text| text);
    let line = |s: common::Sub| s.stack("openstack-scs").set("kubernetes", ">=1.33, <1.35").set("availableReleases", 2);
    let daemon = t.start(&t.config(|s| line(s).set("stageTimeout", "10m")).write(), &[]).await;

    let started = Instant::now();
    let variables = json!([
        {"name": "external_id", "value": EXTERNAL_ID},
        {"name": "certSANs", "value": ["api.c1.example.test"]},
        {"name": "oidc_config", "value": {"issuer_url": "https://dex.example.test", "client_id": "kubectl"}},
    ]);
    add_cluster(&t, "c1", OS33, K33, variables).await;
    let cc = class_accepted(&t, &daemon, OS33).await;
    let accepted = started.elapsed();
    // Cluster API defaulted and resolved the class's variables (status.variables).
    let names: Vec<&str> = cc["status"]["variables"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    assert!(names.contains(&"external_id") && names.contains(&"oidc_config"), "{cc}");

    // The topology controller's objects, with the stack's patches applied.
    t.eventually(&daemon, "the OpenStackCluster, the control plane and the machine templates computed", STEP, async || {
        let (cp_templates, worker_templates) = machine_templates(&t, v, "OpenStackMachineTemplate", "c1").await;
        !owned(&t, "infrastructure.cluster.x-k8s.io", &v.openstack, "OpenStackCluster", "c1").await.is_empty()
            && control_plane(&t, v, "c1").await.is_some()
            && !cp_templates.is_empty()
            && !worker_templates.is_empty()
    })
    .await;
    let computed = started.elapsed();
    let osc = owned(&t, "infrastructure.cluster.x-k8s.io", &v.openstack, "OpenStackCluster", "c1").await.remove(0);
    let spec = &osc["spec"];
    assert_eq!(spec["externalNetwork"]["id"], EXTERNAL_ID, "the required variable, patched in: {osc}");
    assert_eq!(spec["apiServerLoadBalancer"], json!({"enabled": true, "provider": "amphora"}), "the default's enabledIf patch: {osc}");
    assert_eq!(
        spec["managedSubnets"],
        json!([{"cidr": "10.8.0.0/20", "dnsNameservers": ["9.9.9.9", "149.112.112.112"]}]),
        "a template patch from two defaults: {osc}"
    );
    assert_eq!(spec["identityRef"], json!({"cloudName": "openstack", "name": "openstack"}), "the template's own fields: {osc}");
    let cp = control_plane(&t, v, "c1").await.expect("control plane");
    assert_eq!(cp["spec"]["version"], K33);
    let cluster_config = &cp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"];
    assert_eq!(cluster_config["apiServer"]["certSANs"], json!(["api.c1.example.test"]), "{cp}");
    let args = &cluster_config["apiServer"]["extraArgs"];
    assert_eq!(extra_arg(args, "oidc-issuer-url").as_deref(), Some("https://dex.example.test"), "{cp}");
    assert_eq!(extra_arg(args, "oidc-username-claim").as_deref(), Some("preferred_username"), "a default inside an object variable: {cp}");
    assert_eq!(extra_arg(args, "cloud-provider").as_deref(), Some("external"), "{cp}");
    let (cp_templates, worker_templates) = machine_templates(&t, v, "OpenStackMachineTemplate", "c1").await;
    let cpt = &cp_templates[0]["spec"]["template"]["spec"];
    assert_eq!(
        (cpt["flavor"].as_str(), cpt["image"]["filter"]["name"].as_str()),
        (Some("SCS-2V-4-20s"), Some("ubuntu-capi-image-v1.33.6")),
        "{cpt}"
    );
    assert!(cpt["rootVolume"].is_null() && cpt["sshKeyName"].is_null(), "patches of the worker or disabled by enabledIf: {cpt}");
    let wt = &worker_templates[0]["spec"]["template"]["spec"];
    assert_eq!((wt["flavor"].as_str(), wt["rootVolume"]["sizeGiB"].as_i64()), (Some("SCS-2V-4"), Some(25)), "{wt}");
    assert_eq!(wt["image"]["filter"]["name"], "ubuntu-capi-image-v1.33.6", "{wt}");

    // Up: the control plane (played) reports it, stacksync applied the addons.
    wait_up(&t, v, &daemon, "c1", OS33, K33).await;
    let up = started.elapsed();
    let ns = t.addon_namespace("c1");
    let cms: Api<ConfigMap> = Api::namespaced(t.workload(), &ns);
    let cloud = cms.get("cloud-config").await.expect("the ccm stage's cloud-config");
    let conf = cloud.data.unwrap_or_default().get("cloud.conf").cloned().unwrap_or_default();
    assert!(conf.contains(&format!("floating-network-id = {EXTERNAL_ID}")), "the addon values from the Cluster's variables: {conf}");
    let deployments: Api<Deployment> = Api::namespaced(t.workload(), &ns);
    t.eventually(&daemon, "the csi Deployment available", STEP, async || {
        let d = deployments.get_opt("csi-cinder-controllerplugin").await.ok().flatten();
        d.and_then(|d| d.status).and_then(|s| s.available_replicas).unwrap_or(0) >= 1
    })
    .await;

    // The next minor: the 1.34 family's release, held by BeforeClusterUpgrade until its stages
    // (one waits for the platform team's gate) are done.
    publish(&t, v, OS34, v2_gated_by(&gate));
    class_accepted(&t, &daemon, OS34).await;
    let requested = Instant::now();
    let patch = json!({"spec": {"topology": {"class": OS34, "version": K34}}});
    clusters(&t).patch("c1", &PatchParams::default(), &Patch::Merge(patch)).await.expect("move c1 to the next minor");
    let key = format!("{}/c1", t.ns);
    t.eventually(&daemon, "the upgrade held by BeforeClusterUpgrade", STEP, async || {
        hook_calls(&daemon, "BeforeClusterUpgrade", &key) >= 2
            && t.cluster_sync("c1").await["status"]["upgrade"]["waitingFor"].as_str().is_some_and(|w| w.contains(&gate))
    })
    .await;
    t.eventually(&daemon, "the Cluster's TopologyReconciled names the blocking hook", STEP, async || {
        let cluster = json_of(clusters(&t).get("c1").await.expect("Cluster"));
        let (status, _, message) = condition(&cluster, &["TopologyReconciled"]);
        status == "False" && message.contains("BeforeClusterUpgrade") && message.contains(&gate)
    })
    .await;
    let cp = control_plane(&t, v, "c1").await.expect("control plane");
    assert_eq!(cp["spec"]["version"], K33, "Cluster API must not move the control plane while the hook says retry: {cp}");
    // Stage 1 (`cni`) of the 1.34 release is applied, its post-condition waits for the gate.
    let cilium = cms.get("cilium-config").await.expect("cilium-config");
    assert_eq!(
        cilium.data.unwrap_or_default().get("mtu").map(String::as_str),
        Some("1400"),
        "the 1.34 release's cni stage, applied before the gate"
    );

    open_gate(&t, &gate).await;
    let mut released = Duration::ZERO;
    t.eventually(&daemon, "the control plane moved to the next minor", STEP, async || {
        let moved = control_plane(&t, v, "c1").await.is_some_and(|cp| cp["spec"]["version"] == K34);
        if moved && released.is_zero() {
            released = requested.elapsed();
        }
        moved
    })
    .await;
    wait_up(&t, v, &daemon, "c1", OS34, K34).await;
    // The new release's templates, patched for the new version.
    t.eventually(&daemon, "the control plane's machine template rotated to the new image", STEP, async || {
        let (cp_templates, _) = machine_templates(&t, v, "OpenStackMachineTemplate", "c1").await;
        cp_templates.iter().any(|m| m["spec"]["template"]["spec"]["image"]["filter"]["name"] == "ubuntu-capi-image-v1.34.2")
    })
    .await;
    let calls = hook_calls(&daemon, "BeforeClusterUpgrade", &key);
    eprintln!(
        "RESULT: openstack-scs ClusterClass accepted and reconciled {:.1}s after the Cluster, topology computed at {:.1}s, up at {:.1}s; \
         1.33 -> 1.34 held {:.1}s by BeforeClusterUpgrade ({calls} calls) until the gate opened (Cluster API {}, kubeadm {}, OpenStack {})",
        accepted.as_secs_f64(),
        computed.as_secs_f64(),
        up.as_secs_f64(),
        released.as_secs_f64(),
        testkit::providers::capi_version(),
        v.kubeadm,
        v.openstack,
    );
    daemon.stop().await;
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_scs_stack_is_accepted_and_computed_with_its_patches() {
    let Some((t, v)) = tenant("docker").await else { return };
    publish(&t, v, DOCKER, |_, text| text);
    let daemon = t.start(&t.config(|s| s.stack("docker-scs-1-34")).write(), &[]).await;
    add_cluster(&t, "d1", DOCKER, K34, json!([{"name": "imageRepository", "value": "registry.example.test/k8s"}])).await;
    class_accepted(&t, &daemon, DOCKER).await;
    t.eventually(&daemon, "the DockerCluster, the control plane and the machine templates computed", STEP, async || {
        let (cp_templates, worker_templates) = machine_templates(&t, v, "DockerMachineTemplate", "d1").await;
        !owned(&t, "infrastructure.cluster.x-k8s.io", &v.docker, "DockerCluster", "d1").await.is_empty()
            && control_plane(&t, v, "d1").await.is_some()
            && !cp_templates.is_empty()
            && !worker_templates.is_empty()
    })
    .await;
    let cp = control_plane(&t, v, "d1").await.expect("control plane");
    assert_eq!(cp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["imageRepository"], "registry.example.test/k8s", "{cp}");
    let (cp_templates, worker_templates) = machine_templates(&t, v, "DockerMachineTemplate", "d1").await;
    for m in cp_templates.iter().chain(&worker_templates) {
        assert_eq!(m["spec"]["template"]["spec"]["customImage"], "kindest/node:v1.34.2", "the version's node image: {m}");
    }
    wait_up(&t, v, &daemon, "d1", DOCKER, K34).await;
    let cms: Api<ConfigMap> = Api::namespaced(t.workload(), &t.addon_namespace("d1"));
    let cni = cms.get("cilium-config").await.expect("the cni stage");
    assert_eq!(cni.data.unwrap_or_default().get("cluster-name").map(String::as_str), Some("d1"));
    daemon.stop().await;
    t.delete().await;
}

/// A ClusterClass Cluster API's webhook refuses (a patch reading a variable the class does not
/// define) is not applied, and the release's StackRelease says so: `Failed`, its entry naming
/// the object and quoting the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_class_the_webhooks_refuse_shows_as_not_synced_naming_the_object() {
    let Some((t, v)) = tenant("refused").await else { return };
    publish(&t, v, DOCKER, |path, text| {
        if path.ends_with("templates/cluster-class.yaml") {
            text.replace("variable: imageRepository", "variable: image_repository")
        } else {
            text
        }
    });
    let daemon = t.start(&t.config(|s| s.stack("docker-scs-1-34")).write(), &[]).await;
    // Cluster API accepts a Cluster whose class does not exist yet (with a warning).
    add_cluster(&t, "r1", DOCKER, K34, json!([{"name": "imageRepository", "value": ""}])).await;
    let mut last = Value::Null;
    t.eventually(&daemon, "the StackRelease Failed, naming the refused ClusterClass", STEP, async || {
        last = stack_release(&t, DOCKER).await;
        let named = last["status"]["entries"].as_array().into_iter().flatten().any(|e| {
            e["kind"] == "ClusterClass"
                && e["name"] == DOCKER
                && e["namespace"] == t.ns.as_str()
                && e["synced"] == false
                && e["action"] == "Failed"
                && e["message"].as_str().is_some_and(|m| m.contains("denied the request") && m.contains("image_repository"))
        });
        last["status"]["phase"] == "Failed" && named
    })
    .await;
    assert!(class(&t, DOCKER).await.is_null(), "the refused ClusterClass is not there");
    // The Cluster's own status says why its control plane is not coming, naming the object.
    let mut cs = Value::Null;
    t.eventually(&daemon, "the ClusterSync NotSynced, naming the refused ClusterClass", STEP, async || {
        cs = t.cluster_sync("r1").await;
        let (status, reason, message) = condition(&cs, &["Ready"]);
        status == "False"
            && reason == "NotSynced"
            && message.contains(&format!("ClusterClass/{}/{DOCKER}", t.ns))
            && message.contains("image_repository")
    })
    .await;
    eprintln!("RESULT: a refused ClusterClass: StackRelease {}; ClusterSync {}", last["status"]["entries"], condition(&cs, &["Ready"]).2);
    daemon.stop().await;
    t.delete().await;
}

/// The StackRelease of this tenant's subscription for `tag`.
async fn stack_release(t: &CapiTenant, tag: &str) -> Value {
    let api: Api<DynamicObject> = Api::all_with(t.client(), &res("stacksync.io", "v1alpha1", "StackRelease"));
    let list = api.list(&Default::default()).await.expect("StackReleases");
    list.items.into_iter().map(json_of).find(|r| r["spec"]["subscription"] == t.ns.as_str() && r["spec"]["tag"] == tag).unwrap_or_default()
}

/// `scripts/corpus.sh capi`: every release under `$STACKSYNC_SCS_RELEASES` (`<stack>-v1/`, as
/// corpus.sh packages each stack of a checkout of the public SovereignCloudStack/cluster-stacks)
/// published to a Git repository of its own, applied by stacksync to the real Cluster API with
/// the providers' CRDs, and judged: the ClusterClass applied, accepted and reconciled
/// (`VariablesReady`, `RefVersionsUpToDate`), a topology Cluster with the class's required
/// variables (values from each variable's example, default, or type) computed (its
/// infrastructure cluster and control plane made, `TopologyReconciled`). Prints one
/// `CORPUS | stack | result | detail` line per stack; fails when a stack does not pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a checkout of the public cluster-stacks packaged by scripts/corpus.sh capi"]
async fn public_cluster_stacks_on_the_real_cluster_api() {
    let Some(root) = std::env::var_os("STACKSYNC_SCS_RELEASES").map(std::path::PathBuf::from) else {
        panic!("STACKSYNC_SCS_RELEASES: the directory of packaged releases (scripts/corpus.sh capi)");
    };
    let mut releases: Vec<std::path::PathBuf> =
        std::fs::read_dir(&root).expect("the releases directory").flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    releases.sort();
    let mut failed = Vec::new();
    for release in releases {
        let tag = release.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let (result, detail) = match corpus_stack(&release, &tag).await {
            Ok(detail) => ("pass", detail),
            Err(detail) => {
                failed.push(tag.clone());
                ("FAIL", detail)
            }
        };
        println!("CORPUS | {tag} | {result} | {}", detail.replace('\n', " "));
    }
    assert!(failed.is_empty(), "stacks that did not pass: {failed:?}");
}

/// One public stack through the real Cluster API; `Err` says what failed.
async fn corpus_stack(release: &std::path::Path, tag: &str) -> Result<String, String> {
    let Some((t, _)) = tenant(tag).await else { return Err("Cluster API or the providers' CRDs are not built".into()) };
    let stack = tag.rsplit_once("-v").map_or(tag, |(s, _)| s).to_owned();
    let metadata = std::fs::read_to_string(release.join("metadata.yaml")).map_err(|e| format!("metadata.yaml: {e}"))?;
    let kubernetes = metadata
        .lines()
        .find_map(|l| l.trim().strip_prefix("kubernetes:"))
        .map(|k| k.trim().trim_matches('"').to_owned())
        .ok_or("metadata.yaml names no Kubernetes version")?;
    // The release's files as they are (charts packaged as .tgz): committed from its directory.
    let _ = t.repo.git(&["rm", "-rq", "--ignore-unmatch", "."]);
    let work_tree = format!("--work-tree={}", release.display());
    t.repo.git(&[&work_tree, "add", "-A", "."]).map_err(|e| format!("git add: {e}"))?;
    t.repo.git(&["commit", "-qm", tag]).map_err(|e| format!("git commit: {e}"))?;
    t.repo.git(&["push", "-q", "origin", "main"]).map_err(|e| format!("git push: {e}"))?;
    t.repo.tag(tag);
    let daemon = t.start(&t.config(|s| s.stack(&stack)).write(), &[]).await;
    let outcome = corpus_judge(&t, tag, &kubernetes).await;
    daemon.stop().await;
    t.delete().await;
    outcome
}

async fn corpus_judge(t: &CapiTenant, tag: &str, kubernetes: &str) -> Result<String, String> {
    let within = |d: Duration| async move { tokio::time::sleep(d).await };
    add_cluster(t, "c1", tag, kubernetes, json!([])).await;
    // Applied by stacksync (or refused: the StackRelease says why).
    let deadline = Instant::now() + STEP;
    let cc = loop {
        let cc = class(t, tag).await;
        if !cc.is_null() {
            break cc;
        }
        let sr = stack_release(t, tag).await;
        if sr["status"]["phase"] == "Failed" || Instant::now() > deadline {
            let entries = sr["status"]["entries"].to_string();
            return Err(format!("ClusterClass not applied: StackRelease {} {entries}", sr["status"]["phase"]));
        }
        within(Duration::from_millis(500)).await;
    };
    // The class's required variables, with values its schema suggests.
    let required: Vec<Value> = cc["spec"]["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|var| var["required"] == true)
        .map(|var| json!({"name": var["name"], "value": sample(&var["schema"]["openAPIV3Schema"])}))
        .collect();
    let names: Vec<String> = required.iter().filter_map(|r| r["name"].as_str().map(str::to_owned)).collect();
    if !required.is_empty() {
        let patch = json!({"spec": {"topology": {"variables": required}}});
        clusters(t)
            .patch("c1", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| format!("setting the required variables: {e}"))?;
    }
    // Reconciled by Cluster API at its generation.
    let deadline = Instant::now() + STEP;
    let cc = loop {
        let cc = class(t, tag).await;
        if cc["status"]["observedGeneration"].as_i64().is_some() && cc["status"]["observedGeneration"] == cc["metadata"]["generation"] {
            break cc;
        }
        if Instant::now() > deadline {
            return Err(format!("ClusterClass not reconciled: {}", cc["status"]));
        }
        within(Duration::from_millis(500)).await;
    };
    // Each check said, passed or not: the detail of a failing stack shows what did work too.
    let mut said = vec!["ClusterClass accepted by the webhooks".to_owned()];
    let mut passed = true;
    for types in [&["VariablesReady", "VariablesReconciled"][..], &["RefVersionsUpToDate"][..]] {
        let (status, reason, message) = condition(&cc, types);
        passed &= status == "True";
        said.push(if status == "True" { format!("{} True", types[0]) } else { format!("{} {status} ({reason}): {message}", types[0]) });
    }
    // The topology: the Cluster's infrastructure cluster and control plane made by Cluster API.
    let deadline = Instant::now() + STEP;
    loop {
        let cluster = json_of(clusters(t).get("c1").await.map_err(|e| format!("reading the Cluster: {e}"))?);
        let refs = (cluster["spec"]["infrastructureRef"]["kind"].as_str(), cluster["spec"]["controlPlaneRef"]["kind"].as_str());
        let (status, reason, message) = condition(&cluster, &["TopologyReconciled"]);
        if let (Some(infra), Some(cp), "True") = (refs.0, refs.1, status.as_str()) {
            said.push(format!("topology computed ({infra}, {cp} at {kubernetes})"));
            break;
        }
        if Instant::now() > deadline {
            passed = false;
            said.push(format!("topology not computed: TopologyReconciled {status} ({reason}): {message}"));
            break;
        }
        within(Duration::from_millis(500)).await;
    }
    said.push(format!("required variables: {}", if names.is_empty() { "none".to_owned() } else { names.join(", ") }));
    if passed { Ok(said.join("; ")) } else { Err(said.join("; ")) }
}

/// A value an OpenAPI schema accepts: its example, its default, else one of its type.
fn sample(schema: &Value) -> Value {
    if !schema["example"].is_null() {
        return schema["example"].clone();
    }
    if !schema["default"].is_null() {
        return schema["default"].clone();
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("integer") | Some("number") => schema["minimum"].as_i64().map_or(json!(1), |m| json!(m)),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        Some("object") => {
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            let fields: serde_json::Map<String, Value> =
                required.iter().filter_map(|r| r.as_str()).map(|r| (r.to_owned(), sample(&schema["properties"][r]))).collect();
            Value::Object(fields)
        }
        _ if schema["format"] == "uuid" || schema["format"] == "uuid4" => json!(EXTERNAL_ID),
        _ => json!("corpus"),
    }
}
