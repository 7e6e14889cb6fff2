//! The container image as deploy/ runs it. `scripts/build-image.sh --oci DIR` builds both images
//! (`<version>` and `<version>-git`) from Debian's packages into an OCI layout; this test unpacks
//! them with `umoci` and runs them with `runc` as the Deployment's securityContext says (uid
//! 65532, read-only root filesystem, no capabilities, no privilege escalation) with its volumes
//! as bind mounts (config read-only, cache, tmp, the ServiceAccount token), on the host's
//! loopback network:
//! - `--version` names the build's version and commit; `check-config` accepts deploy/config.yaml;
//! - the daemon, with the Deployment's arguments, against a real control plane as the
//!   ServiceAccount of deploy/ (a TokenRequest token mounted where a Pod finds it, the in-cluster
//!   configuration from `KUBERNETES_SERVICE_HOST`): a Cluster's addons really Available, the next
//!   release rolled out to it in a wave, the release it left pruned; `/readyz` and `/metrics`;
//!   SIGTERM ends it within the Deployment's grace period with the cache intact; its peak memory
//!   inside the Deployment's limit;
//! - nothing it did was refused (no 403 in its log or in the API server's audit log), and the
//!   ClusterRoles grant nothing the run did not use (the audit log against the rules, no
//!   wildcards);
//! - the `-git` image pulls a private repository over SSH with Debian's git and ssh.
//!
//! Without `STACKSYNC_IMAGE_OCI` (scripts/test.sh sets it) the test skips loudly, and fails
//! under CI.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::tail;
use common::fleet::{NS, STACK, publish_v3_on};
use common::{condition, eventually, res};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use testkit::git::{GitDaemon, ReleaseRepo};
use testkit::kube::{Kube, Options};
use testkit::private_git::SshServer;

const V3: &str = "docker-ferrol-1-27-v3";
const V4: &str = "docker-ferrol-1-27-v4";
const SA: &str = "system:serviceaccount:stacksync-system:stacksync";
/// The uid and gid of deploy/deployment.yaml's securityContext (and the image's USER).
const UID: u32 = 65532;

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The OCI layout of `scripts/build-image.sh --oci`; `None` (skip) when the image was not built
/// and this is not CI.
fn image_layout() -> Option<PathBuf> {
    let layout = std::env::var_os("STACKSYNC_IMAGE_OCI").map(PathBuf::from).filter(|p| p.join("index.json").is_file());
    if layout.is_none() {
        assert!(std::env::var_os("CI").is_none(), "the image is not built: scripts/test.sh sets STACKSYNC_IMAGE_OCI");
        eprintln!("SKIPPED: the image is not built (scripts/build-image.sh --oci DIR, then STACKSYNC_IMAGE_OCI=DIR)");
    }
    layout
}

/// A label of the image tagged `tag` in the OCI layout: index -> manifest -> config.
fn image_label(layout: &Path, tag: &str, label: &str) -> String {
    let blob = |digest: &str| -> Value {
        let (algorithm, hex) = digest.split_once(':').expect("digest");
        serde_json::from_slice(&std::fs::read(layout.join("blobs").join(algorithm).join(hex)).expect("blob")).expect("json")
    };
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index.json")).expect("json");
    let manifest = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("no image tagged {tag} in {}", layout.display()));
    let manifest = blob(manifest["digest"].as_str().expect("manifest digest"));
    let config = blob(manifest["config"]["digest"].as_str().expect("config digest"));
    config["config"]["Labels"][label].as_str().unwrap_or_else(|| panic!("the image {tag} has no label {label}")).to_owned()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}\n{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A writable volume of the Pod (an emptyDir): a new directory the container's user owns, as
/// `fsGroup` makes it.
fn volume(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path).expect("volume");
    run(Command::new("chown").arg("-R").arg(format!("{UID}:{UID}")).arg(path));
    path.to_path_buf()
}

/// A bind mount of the container: host path, container path, read-only.
struct Mount {
    host: PathBuf,
    at: &'static str,
    read_only: bool,
}

fn mount(host: &Path, at: &'static str, read_only: bool) -> Mount {
    Mount { host: host.to_path_buf(), at, read_only }
}

/// One image unpacked into a bundle directory, run as many times as asked (each run rewrites
/// the bundle's config.json).
struct Bundle {
    dir: PathBuf,
    /// runc's state directory (`runc --root`), private to the test.
    state: PathBuf,
    /// The image's own process settings (env, user, entrypoint), as umoci wrote them.
    image: Value,
}

impl Bundle {
    fn unpack(layout: &Path, tag: &str, into: &Path) -> Bundle {
        let dir = into.join(format!("bundle-{tag}"));
        run(Command::new("umoci").arg("unpack").arg("--image").arg(format!("{}:{tag}", layout.display())).arg(&dir));
        let image: Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config.json")).expect("json");
        let state = into.join("runc-state");
        std::fs::create_dir_all(&state).expect("state dir");
        Bundle { dir, state, image }
    }

    /// The image's environment (`PATH`, `TMPDIR`, …).
    fn image_env(&self) -> Vec<String> {
        self.image["process"]["env"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    }

    /// Writes config.json for `args` after the entrypoint (or `exec` instead of it) as the
    /// Deployment runs the container.
    fn configure(&self, exec: Option<&str>, args: &[String], env: &[(&str, String)], mounts: &[Mount]) {
        let mut config = self.image.clone();
        let entrypoint = exec.map_or_else(|| self.image["process"]["args"][0].as_str().expect("entrypoint").to_owned(), str::to_owned);
        let mut argv = vec![entrypoint];
        argv.extend(args.iter().cloned());
        let mut envs = self.image_env();
        envs.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        let p = &mut config["process"];
        p["args"] = json!(argv);
        p["env"] = json!(envs);
        p["terminal"] = json!(false);
        p["cwd"] = json!("/");
        // deploy/deployment.yaml: runAsUser/runAsGroup 65532, no privilege escalation, every
        // capability dropped.
        p["user"] = json!({"uid": UID, "gid": UID});
        p["noNewPrivileges"] = json!(true);
        p["capabilities"] = json!({"bounding": [], "effective": [], "permitted": [], "ambient": []});
        if let Some(o) = p.as_object_mut() {
            o.remove("rlimits");
        }
        config["root"] = json!({"path": "rootfs", "readonly": true});
        let ms = config["mounts"].as_array_mut().expect("mounts");
        for m in mounts {
            let mut options = vec!["rbind", "nosuid", "nodev"];
            options.push(if m.read_only { "ro" } else { "rw" });
            ms.push(json!({"destination": m.at, "type": "bind", "source": m.host, "options": options}));
        }
        // The host's network (loopback), as the brief says runc runs here; the other
        // namespaces stay.
        if let Some(ns) = config["linux"]["namespaces"].as_array_mut() {
            ns.retain(|n| n["type"] != "network" && n["type"] != "user");
        }
        if let Some(linux) = config["linux"].as_object_mut() {
            linux.remove("uidMappings");
            linux.remove("gidMappings");
        }
        std::fs::write(self.dir.join("config.json"), serde_json::to_vec_pretty(&config).expect("json")).expect("write config.json");
    }

    fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(&self.state);
        cmd
    }

    /// Runs to the end; (exit code, stdout, stderr).
    fn run_to_end(&self, id: &str) -> (i32, String, String) {
        let out = self.runc().arg("run").arg("--bundle").arg(&self.dir).arg(id).stdin(Stdio::null()).output().expect("runc run");
        let _ = self.runc().args(["delete", "--force", id]).output();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Starts the container in the background; its stdout and stderr go to `log`.
    fn start(&self, id: &str, log: &Path) -> Container {
        let file = std::fs::File::create(log).expect("log");
        let child = self
            .runc()
            .arg("run")
            .arg("--bundle")
            .arg(&self.dir)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("runc run");
        Container { id: id.to_owned(), state: self.state.clone(), child: Some(child), log: log.to_path_buf() }
    }
}

/// A running container; killed and deleted when dropped.
struct Container {
    id: String,
    state: PathBuf,
    child: Option<std::process::Child>,
    log: PathBuf,
}

impl Container {
    fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(&self.state);
        cmd
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The container's first process on the host, from `runc state`.
    fn pid(&self) -> Option<u32> {
        let out = self.runc().args(["state", &self.id]).output().ok()?;
        let state: Value = serde_json::from_slice(&out.stdout).ok()?;
        state["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
    }

    /// What the kubelet does at a Pod's deletion: SIGTERM, then the grace period; how long the
    /// container took to exit and its exit code.
    async fn terminate(&mut self, grace: Duration) -> (Duration, Option<i32>) {
        let started = Instant::now();
        let _ = self.runc().args(["kill", &self.id, "TERM"]).output();
        let mut child = self.child.take().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let _ = self.runc().args(["delete", "--force", &self.id]).output();
                return (started.elapsed(), status.code());
            }
            if started.elapsed() > grace {
                let _ = self.runc().args(["kill", &self.id, "KILL"]).output();
                let _ = child.wait();
                let _ = self.runc().args(["delete", "--force", &self.id]).output();
                return (started.elapsed(), None);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = self.runc().args(["kill", &self.id, "KILL"]).output();
            let _ = child.wait();
            let _ = self.runc().args(["delete", "--force", &self.id]).output();
        }
    }
}

/// Peak resident memory (`VmHWM`) and CPU seconds (user + system) of a host process.
fn usage(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((kib * 1024, ticks / 100.0))
}

/// `256Mi`, `1Gi` as bytes.
fn quantity(q: &str) -> u64 {
    let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = n.parse().expect("quantity");
    n * match unit {
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "" => 1,
        other => panic!("unit {other}"),
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let bin = fake_apiserver::kubectl::tools_bin_dir().join("kubectl");
    run(Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args))
}

/// The YAML documents of a deploy/ file (or of `kubectl kustomize` output) as JSON.
fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text).expect("YAML").into_iter().filter(|v| !v.is_null()).collect()
}

/// What the test plays of Cluster API for a Cluster: a KubeadmControlPlane and a DockerCluster
/// it references, the control plane at `version`, the Cluster available.
async fn report(client: &kube::Client, name: &str, version: &str) {
    let kcps: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &res("controlplane.cluster.x-k8s.io", "v1beta1", "KubeadmControlPlane"));
    let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "metadata": {"name": name}, "status": {"version": version}});
    kcps.patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(kcp)).await.expect("kcp status");
    let t = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": "2026-11-23T00:00:00Z"});
    let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name},
        "status": {"controlPlaneReady": true, "conditions": [t("Ready"), t("ControlPlaneReady"), t("Available")]}});
    clusters(client).patch_status(name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
}

fn clusters(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &res("cluster.x-k8s.io", "v1beta1", "Cluster"))
}

/// A Cluster of class [`V3`] as Cluster API would have it: its control plane (and the
/// infrastructure cluster its values templates read) and its kubeconfig Secret, which points
/// back at the same server (the addons go there, written with the Secret's credentials).
async fn add_cluster(kube: &Kube, client: &kube::Client, name: &str) {
    let apply = |group: &str, kind: &str, body: Value| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res(group, "v1beta1", kind));
        let name = body["metadata"]["name"].as_str().expect("name").to_owned();
        async move { api.patch(&name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("apply") }
    };
    apply("infrastructure.cluster.x-k8s.io", "DockerCluster", json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerCluster", "metadata": {"name": name, "namespace": NS}, "spec": {}})).await;
    apply("controlplane.cluster.x-k8s.io", "KubeadmControlPlane", json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "metadata": {"name": name, "namespace": NS}, "spec": {"version": "v1.27.3"}})).await;
    apply(
        "cluster.x-k8s.io",
        "Cluster",
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": {"stack": "ferrol"}},
            "spec": {
                "topology": {"class": V3, "version": "v1.27.3"},
                "controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}},
                "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": name},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerCluster", "name": name},
            },
        }),
    )
    .await;
    report(client, name, "v1.27.3").await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), NS);
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some(format!("{name}-kubeconfig"));
    secret.metadata.namespace = Some(NS.into());
    let kubeconfig = std::fs::read(kube.kubeconfig()).expect("kubeconfig");
    secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
    secrets.patch(&format!("{name}-kubeconfig"), &PatchParams::apply("capi"), &Patch::Apply(&secret)).await.expect("secret");
}

async fn object(client: &kube::Client, group: &str, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let r = res(group, "v1alpha1", kind);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &r),
        None => Api::all_with(client.clone(), &r),
    };
    api.get_opt(name).await.expect("get").map(|o| serde_json::to_value(o).expect("json"))
}

async fn cluster_sync(client: &kube::Client, name: &str) -> Value {
    object(client, "stacksync.io", "ClusterSync", Some(NS), name).await.unwrap_or_default()
}

/// (verb, group, resource[/subresource]) of every request the ServiceAccount made, and those
/// refused.
fn audited(log: &Path) -> (BTreeSet<(String, String, String)>, Vec<String>) {
    let text = std::fs::read_to_string(log).expect("audit log");
    let mut used = BTreeSet::new();
    let mut refused = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else { continue };
        if e["user"]["username"] != SA {
            continue;
        }
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
        let r = &e["objectRef"];
        let Some(resource) = r["resource"].as_str() else { continue };
        let resource = match r["subresource"].as_str() {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        };
        let group = r["apiGroup"].as_str().unwrap_or_default().to_owned();
        let verb = e["verb"].as_str().unwrap_or_default().to_owned();
        if code == 403 {
            refused.push(format!("{verb} {group}/{resource} {}: {}", r["name"].as_str().unwrap_or(""), e["responseStatus"]["message"]));
            continue;
        }
        // A server-side apply that creates the object is authorized as `create` too (one
        // audit event, verb `patch`, answered 201).
        if verb == "patch" && code == 201 {
            used.insert(("create".to_owned(), group.clone(), resource.clone()));
        }
        used.insert((verb, group, resource));
    }
    (used, refused)
}

/// (verb, group, resource) every rule of these ClusterRoles and Roles grants.
fn granted(roles: &[Value]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for role in roles.iter().filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role") {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
            };
            for g in list("apiGroups") {
                for r in list("resources") {
                    for v in list("verbs") {
                        assert!(
                            g != "*" && r != "*" && v != "*",
                            "{}/{} grants a wildcard: {rule}",
                            role["kind"],
                            role["metadata"]["name"]
                        );
                        out.insert((v.clone(), g.clone(), r.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The stacksync.yaml of deploy/config.yaml's ConfigMap.
fn deploy_config() -> String {
    let text = std::fs::read_to_string(repo_root().join("deploy/config.yaml")).expect("deploy/config.yaml");
    let cm = documents(&text).into_iter().find(|d| d["kind"] == "ConfigMap").expect("ConfigMap");
    cm["data"]["stacksync.yaml"].as_str().expect("stacksync.yaml").to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

async fn http_get(url: &str) -> (u16, String) {
    match reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client").get(url).send().await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_deploy_runs_it_under_its_service_account() {
    let Some(layout) = image_layout() else { return };
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    let bundle = Bundle::unpack(&layout, version(), work);
    let id = |what: &str| format!("stacksync-test-{}-{what}", std::process::id());

    // The image's user and environment are what the Deployment expects.
    assert_eq!(bundle.image["process"]["user"]["uid"], UID, "the image's USER: {}", bundle.image["process"]);
    assert!(bundle.image_env().iter().any(|e| e == "TMPDIR=/tmp"), "{:?}", bundle.image_env());
    assert!(!bundle.dir.join("rootfs/bin/sh").exists() && !bundle.dir.join("rootfs/usr/bin/sh").exists(), "the default image has a shell");

    // `--version`: the build's version and commit.
    bundle.configure(None, &["--version".into()], &[], &[]);
    let (code, stdout, stderr) = bundle.run_to_end(&id("version"));
    assert_eq!(code, 0, "--version: {stdout}{stderr}");
    // The commit the image (and the binary in it) was built from, as the image's revision label
    // says: not the checkout's HEAD now, which moves when a commit lands during the run.
    let built = image_label(&layout, version(), "org.opencontainers.image.revision");
    let built = &built[..built.len().min(12)];
    assert!(stdout.contains(version()) && stdout.contains(built), "--version says {stdout:?}, want {} and {built}", version());

    // `check-config` on the ConfigMap deploy/ ships, mounted where the Deployment mounts it.
    let config_dir = work.join("config");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    std::fs::write(config_dir.join("stacksync.yaml"), deploy_config()).expect("config");
    bundle.configure(
        None,
        &["check-config".into(), "/etc/stacksync/stacksync.yaml".into()],
        &[],
        &[mount(&config_dir, "/etc/stacksync", true)],
    );
    let (code, stdout, stderr) = bundle.run_to_end(&id("check"));
    assert_eq!(code, 0, "check-config deploy/config.yaml: {stdout}{stderr}");

    // The management cluster: real, audited, with Cluster API's CRDs and ours, deploy/'s
    // namespace, ServiceAccount and RBAC (with the Docker provider's component, for this
    // stack's templates).
    let crds = vec![fake_apiserver::capi_crds_dir(), repo_root().join("deploy/crds")];
    let kube = Kube::start(Options { preload: crds, audit: true, ..Options::default() }).await.expect("real control plane");
    let admin = kube.kubeconfig().to_path_buf();
    let client = kube.client().await.expect("client");
    let rbac_files = ["deploy/rbac.yaml", "deploy/components/provider-docker/rbac.yaml"];
    kubectl(&admin, &["apply", "-f", &repo_root().join("deploy/namespace.yaml").to_string_lossy()]);
    let mut roles = Vec::new();
    for f in rbac_files {
        let path = repo_root().join(f);
        kubectl(&admin, &["apply", "-f", &path.to_string_lossy()]);
        roles.extend(documents(&std::fs::read_to_string(&path).expect("rbac")));
    }
    kubectl(&admin, &["create", "namespace", NS]);
    let token = kubectl(&admin, &["create", "token", "stacksync", "-n", "stacksync-system", "--duration=2h"]);
    let sa_dir = work.join("serviceaccount");
    std::fs::create_dir_all(&sa_dir).expect("sa dir");
    std::fs::write(sa_dir.join("token"), token.trim()).expect("token");
    std::fs::copy(kube.ca_cert(), sa_dir.join("ca.crt")).expect("ca");
    std::fs::write(sa_dir.join("namespace"), "stacksync-system").expect("namespace");

    // The release repository over git:// (pure Rust: the default image has no git), v3 released.
    let repos = work.join("repos");
    std::fs::create_dir_all(&repos).expect("repos");
    let repo = ReleaseRepo::create(&repos, "stacks").expect("repo");
    publish_v3_on(&repo, "v3", "v1.27.3", &[]);
    let git = GitDaemon::start(&repos).await.expect("git daemon");
    add_cluster(&kube, &client, "c00").await;

    // The config: deploy/config.yaml's shape, its source this repository, a one-wave rollout,
    // one release offered (the one a Cluster leaves is pruned).
    let mut config: Value = serde_saphyr::from_str(&deploy_config()).expect("deploy config");
    config["sources"] = json!([{"name": "stacks", "git": {"url": git.url("stacks.git")}}]);
    config["subscriptions"] = json!([{
        "name": "ferrol", "source": "stacks", "stack": STACK, "format": "clusterstack", "interval": "1s",
        "availableReleases": 1,
        "clusterSelector": {"matchLabels": {"stack": "ferrol"}},
        "rollout": {"waves": [{"percent": 100}], "waveTimeout": "1h", "checkInterval": "1s"},
    }]);
    if let Some(o) = config.as_object_mut() {
        o.remove("webhooks");
    }
    std::fs::write(config_dir.join("stacksync.yaml"), serde_json::to_string_pretty(&config).expect("json")).expect("config");

    // The Deployment's container: its arguments (the admin port moved to a free one: the host's
    // network is shared), env and volumes.
    let deployment = documents(&std::fs::read_to_string(repo_root().join("deploy/deployment.yaml")).expect("deployment"));
    let pod = &deployment[0]["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let port = free_port();
    let args: Vec<String> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .map(|a| if a.starts_with("--admin-addr=") { format!("--admin-addr=127.0.0.1:{port}") } else { a.to_owned() })
        .collect();
    let (cache, tmp) = (volume(&work.join("cache")), volume(&work.join("tmp")));
    let api_port = kube.url().rsplit(':').next().expect("port").to_owned();
    let env = [
        ("POD_NAME", "stacksync-7d9f-abcde".to_owned()),
        ("TMPDIR", "/tmp".to_owned()),
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_owned()),
        ("KUBERNETES_SERVICE_PORT", api_port),
        ("RUST_LOG", "info".to_owned()),
    ];
    let mounts = [
        mount(&config_dir, "/etc/stacksync", true),
        mount(&cache, "/var/cache/stacksync", false),
        mount(&tmp, "/tmp", false),
        mount(&sa_dir, "/var/run/secrets/kubernetes.io/serviceaccount", true),
    ];
    bundle.configure(None, &args, &env, &mounts);
    let started = Instant::now();
    let daemon_log = work.join("daemon.log");
    let mut daemon = bundle.start(&id("daemon"), &daemon_log);
    let log = || format!("container log:\n{}", tail(&std::fs::read_to_string(&daemon_log).unwrap_or_default(), 60));

    // The Cluster's addons applied and really Available (the real Deployment controller, kwok).
    eventually(
        "c00 Ready on v3",
        Duration::from_secs(180),
        async || {
            let cs = cluster_sync(&client, "c00").await;
            condition(&cs, "Ready")["status"] == "True" && cs["status"]["appliedRelease"]["tag"] == V3
        },
        log,
    )
    .await;
    let synced_in = started.elapsed();
    let ready = http_get(&format!("http://127.0.0.1:{port}/readyz")).await;
    assert_eq!(ready.0, 200, "/readyz: {ready:?}");
    let metrics = http_get(&format!("http://127.0.0.1:{port}/metrics")).await;
    assert!(metrics.0 == 200 && metrics.1.contains("stacksync_"), "/metrics: {}", metrics.0);

    // The next release: rolled out in a wave (the Cluster's class moved), Cluster API's part
    // played, the new release's addons applied; the release the Cluster left is pruned.
    publish_v3_on(&repo, "v4", "v1.27.3", &[]);
    eventually(
        "the rollout moves c00 to v4",
        Duration::from_secs(120),
        async || clusters(&client).get("c00").await.expect("cluster").data["spec"]["topology"]["class"] == V4,
        log,
    )
    .await;
    report(&client, "c00", "v1.27.3").await;
    let seen = std::sync::Mutex::new(String::new());
    eventually(
        "c00 Ready on v4, v3's ClusterClass and StackRelease pruned",
        Duration::from_secs(180),
        async || {
            let cs = cluster_sync(&client, "c00").await;
            let classes: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res("cluster.x-k8s.io", "v1beta1", "ClusterClass"));
            let v3_class = classes.get_opt(V3).await.expect("get").is_some();
            let v3_release = object(&client, "stacksync.io", "StackRelease", None, &format!("ferrol.{V3}")).await;
            *seen.lock().expect("lock") =
                format!("ClusterSync: {}\nv3 ClusterClass: {v3_class}\nv3 StackRelease: {v3_release:?}", cs["status"]);
            condition(&cs, "Ready")["status"] == "True" && cs["status"]["appliedRelease"]["tag"] == V4 && !v3_class && v3_release.is_none()
        },
        || format!("{}\n{}", seen.lock().expect("lock"), log()),
    )
    .await;

    // Inside the Deployment's resources.
    let pid = daemon.pid().expect("the container's pid");
    let (peak, cpu) = usage(pid).expect("usage");
    let limits = &c["resources"];
    let limit = quantity(limits["limits"]["memory"].as_str().expect("memory limit"));
    let request = quantity(limits["requests"]["memory"].as_str().expect("memory request"));
    let wall = started.elapsed().as_secs_f64();
    eprintln!(
        "image: synced in {synced_in:?}; peak RSS {} MiB (request {} MiB, limit {} MiB); CPU {cpu:.1} s in {wall:.0} s ({:.0}m average)",
        peak >> 20,
        request >> 20,
        limit >> 20,
        cpu * 1000.0 / wall
    );
    assert!(peak < request, "peak RSS {peak} above the Deployment's memory request {request}");

    // SIGTERM: out within the grace period, cleanly, the cache intact.
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().expect("grace period"));
    let (took, code) = daemon.terminate(grace).await;
    assert_eq!(code, Some(0), "after SIGTERM ({took:?}): {}", log());
    assert!(took < grace, "SIGTERM took {took:?}, grace {grace:?}");
    let index: Value = serde_json::from_slice(&std::fs::read(cache.join("index.json")).expect("the cache's index")).expect("index JSON");
    assert!(index.is_object(), "{index}");
    let leftovers: Vec<String> = common::files_under(&cache).into_iter().filter(|f| f.contains(".tmp")).collect();
    assert!(leftovers.is_empty(), "temporary files left in the cache: {leftovers:?}");

    // Nothing refused: not in the log, not in the audit log.
    let text = daemon.log();
    assert!(!text.contains("forbidden") && !text.contains(" 403"), "refused:\n{}", tail(&text, 40));
    let (used, refused) = audited(&kube.audit_log());
    assert!(refused.is_empty(), "the API server refused the ServiceAccount:\n{}", refused.join("\n"));
    // Nothing granted that the run did not use, but what a run this short cannot show (each
    // with the reason it stays).
    let not_in_this_run: BTreeMap<(&str, &str, &str), &str> = [
        (
            ("get", "cluster.x-k8s.io", "clusters"),
            "a sharded daemon asks for a Cluster that left its watch; `run --once` for those it waits on",
        ),
        (
            ("delete", "stacksync.io", "clustersyncs"),
            "the ClusterSync of a Cluster deleted while stacksync was down, or one no subscription selects",
        ),
        (("list", "", "events"), "the console in the daemon (`run --console-addr`) shows Events; this run serves no console"),
        (("watch", "", "events"), "the console in the daemon (`run --console-addr`) shows Events; this run serves no console"),
    ]
    .into_iter()
    .collect();
    let mut unused = Vec::new();
    for (verb, group, resource) in granted(&roles) {
        let seen = used.contains(&(verb.clone(), group.clone(), resource.clone()));
        if !seen && !not_in_this_run.contains_key(&(verb.as_str(), group.as_str(), resource.as_str())) {
            unused.push(format!("{verb} {group}/{resource}"));
        }
    }
    assert!(unused.is_empty(), "granted but not used by a whole sync, rollout and prune:\n{}\nused: {used:#?}", unused.join("\n"));
    let can_i = kubectl(&admin, &["auth", "can-i", "--list", "--as", SA, "-n", NS]);
    for line in can_i.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(!cols.first().is_some_and(|r| r.starts_with("*.")), "a wildcard grant: {line}");
        assert!(!line.contains("[*]"), "a wildcard grant: {line}");
    }
    drop(git);

    // The -git image: a private repository over SSH (Debian's git and ssh), key and known_hosts
    // mounted as a Secret is (readable by all), one pass into a directory.
    assert!(Path::new("/usr/sbin/sshd").is_file(), "Debian's openssh-server is not installed (scripts/test.sh installs it)");
    let git_bundle = Bundle::unpack(&layout, &format!("{}-git", version()), work);
    let served = work.join("served");
    std::fs::create_dir_all(&served).expect("served");
    let private = ReleaseRepo::create(&served, "private").expect("repo");
    private.release("v1.0.0", &[("manifests/addons.yaml", &common::configmap("addons", ""))]);
    let ssh = SshServer::start(&work.join("ssh")).await.expect("sshd");
    let secret = work.join("ssh-secret");
    std::fs::create_dir_all(&secret).expect("secret dir");
    std::fs::copy(ssh.client_key(), secret.join("identity")).expect("key");
    std::fs::copy(ssh.known_hosts(true).expect("known_hosts"), secret.join("known_hosts")).expect("known_hosts");
    for f in ["identity", "known_hosts"] {
        std::fs::set_permissions(secret.join(f), <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o644))
            .expect("chmod");
    }
    let git_config_dir = work.join("git-config");
    std::fs::create_dir_all(&git_config_dir).expect("dir");
    let ssh_auth =
        json!({"ssh": {"privateKey": {"file": "/etc/stacksync-ssh/identity"}, "knownHosts": {"file": "/etc/stacksync-ssh/known_hosts"}}});
    common::Config::new(&git_config_dir)
        .git("private", &ssh.url(&private.bare))
        .source_set("private", "auth", ssh_auth)
        .sub(common::alpha("private").version("*"))
        .set("cache", json!({"dir": "/var/cache/stacksync"}))
        .set("target", json!({"directory": "/var/cache/stacksync/out"}))
        .write();
    let (git_cache, git_tmp) = (volume(&work.join("git-cache")), volume(&work.join("git-tmp")));
    git_bundle.configure(
        None,
        &["run".into(), "--once".into(), "--config=/etc/stacksync/stacksync.yaml".into()],
        &[("TMPDIR", "/tmp".to_owned())],
        &[
            mount(&git_config_dir, "/etc/stacksync", true),
            mount(&secret, "/etc/stacksync-ssh", true),
            mount(&git_cache, "/var/cache/stacksync", false),
            mount(&git_tmp, "/tmp", false),
        ],
    );
    let (code, stdout, stderr) = git_bundle.run_to_end(&id("git"));
    assert_eq!(code, 0, "the -git image over SSH: {stdout}{stderr}");
    let written = common::files_under(&git_cache.join("out/team-a/alpha"));
    assert!(!written.is_empty(), "nothing written for team-a/alpha:\n{stderr}");
    ssh.stop().await;
    kube.stop();
}

/// The Dockerfile (for those who build with docker) builds the dependencies first from the
/// workspace's manifests alone: every member's `Cargo.toml` must be copied and its `src/lib.rs`
/// stubbed, or `docker build` fails at "failed to load manifest for workspace member". Read
/// from the root `Cargo.toml`, so a new crate cannot be forgotten there.
#[test]
fn the_dockerfile_copies_every_workspace_member() {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest.lines().find_map(|l| l.strip_prefix("members = [")).expect("a `members = [...]` line in Cargo.toml");
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).expect("Dockerfile");
    let members: Vec<&str> = members.trim_end_matches(']').split(',').map(|m| m.trim().trim_matches('"')).filter(|m| *m != ".").collect();
    assert!(members.len() >= 5, "members read from Cargo.toml: {members:?}");
    for m in members {
        let copy = format!("COPY {m}/Cargo.toml {m}/Cargo.toml");
        assert!(dockerfile.contains(&copy), "Dockerfile: no `{copy}` for workspace member {m}");
        assert!(dockerfile.contains(&format!("{m}/src")), "Dockerfile: workspace member {m}'s src/ is not stubbed");
    }
}
