//! Whole-process benchmark: the released binary as a user runs it. One `testkit apiserver` is
//! the management cluster (Cluster API's CRDs and ours), N Clusters there, each with its own
//! `<name>-kubeconfig` Secret pointing at one of W `testkit apiserver` workload clusters (W
//! processes), a Git release of 40 objects per Cluster (a Namespace and 39 ConfigMaps), the
//! Kubernetes target. Cases, for each size:
//!
//! - `run --once` cold, then `run --once` again unchanged (the no-op pass), each under
//!   `/usr/bin/time -v`: wall time, peak RSS, CPU, workload requests (testkit's counters), log
//!   lines at the default level;
//! - `preview` of a next release (one changed ConfigMap per Cluster) from a local directory, on
//!   the synced fleet: wall time as a ratio to the cold pass, peak RSS, requests, writes (zero);
//! - the daemon (`run`) on a fresh fleet: time from start until every ClusterSync is Ready, one
//!   resync after that (its workload requests), peak RSS (`VmHWM`), CPU, open file descriptors,
//!   log lines, and on the management server from start to every Cluster synced: the LIST
//!   requests of ClusterSyncs (the roll-up counts from its watch: a handful, not one per
//!   second) and the write requests per new Cluster (the daemon's `resync` is `30 s + n / 50`,
//!   or `--resync S`: a cold start longer than half of it also counts the first Clusters'
//!   heartbeat status writes, and the case says so; `--no-resync-case` skips the resync case,
//!   which would wait for a long one); with `--soak-secs S` the daemon keeps
//!   running for S more seconds with a short resync and a new release every minute, its RSS and
//!   descriptors sampled (flat memory).
//!
//! `--stack`: instead of those cases, the daemon on N Clusters of the fixture cluster stack of
//! `benches/common/stack.rs` (the SCS openstack stack's shape, 142 objects a Cluster, three
//! RSA-2048 keys a render; the library renderer): its first start on a fresh fleet to every
//! Cluster synced, then a restart on an empty cache (the shipped `emptyDir`, a leader change) to
//! every Cluster synced again, then a new release of the stack for every Cluster (the daemon
//! started again on its cache) — wall time, CPU, peak RSS, writes (`stack_cases`).
//!
//! `--server real`: the management server is a real control plane (`testkit kube`: etcd,
//! kube-apiserver, controllers, kwok; scripts/build-realkube.sh), its requests counted from
//! `apiserver_request_total` (writes to Leases and Nodes, the control plane's own heartbeats, left
//! out); the workload servers stay `testkit apiserver`. `--daemon-only` skips the `run --once`
//! and preview cases.
//!
//! The peer is the raw server-side apply ceiling of one workload server process, measured by
//! `wrk` at 128 connections (as `benches/fleet.rs` measures it) just before the cold pass.
//!
//! Run through `scripts/bench.sh` (`BENCH_PROCESS_SIZES`, default 1000,5000), which passes the
//! binary the container image ships (`cargo build --profile dist`: LTO, one codegen unit) as
//! `--stacksync`; by hand: `cargo bench --bench process -- --testkit T --wrk W --sizes 1000
//! --workloads 4 --stacksync target/dist/stacksync --out F` (without `--stacksync`, the
//! `release` build).
//! Results: docs/performance.md.

#[path = "common/mod.rs"]
mod common;
#[path = "common/stack.rs"]
mod stack;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const OBJECTS: usize = 40;
const NS: &str = "fleet";
const WRK_CONNECTIONS: usize = 128;

struct Args {
    testkit: PathBuf,
    stacksync: PathBuf,
    wrk: Option<PathBuf>,
    sizes: Vec<usize>,
    workloads: usize,
    daemon: bool,
    /// Only the daemon's cases.
    daemon_only: bool,
    /// The management server is a real control plane.
    real: bool,
    soak_secs: u64,
    /// The daemon's `resync` (seconds); default from the fleet's size.
    resync: Option<u64>,
    /// Skip the "one resync" case (with a long `--resync`, it would wait for it).
    no_resync_case: bool,
    /// The cluster-stack cases instead (`stack_cases`).
    stack: bool,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        testkit: PathBuf::from("testkit"),
        stacksync: PathBuf::from(env!("CARGO_BIN_EXE_stacksync")),
        wrk: None,
        sizes: vec![1000],
        workloads: 4,
        daemon: true,
        daemon_only: false,
        real: false,
        soak_secs: 0,
        resync: None,
        no_resync_case: false,
        stack: false,
        out: common::out_path(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--testkit" => a.testkit = v().into(),
            "--stacksync" => a.stacksync = v().into(),
            "--wrk" => a.wrk = Some(v().into()),
            "--sizes" => a.sizes = v().split(',').map(|s| s.trim().parse().expect("--sizes: numbers")).collect(),
            "--workloads" => a.workloads = v().parse::<usize>().expect("--workloads: a number").max(1),
            "--no-daemon" => a.daemon = false,
            "--daemon-only" => a.daemon_only = true,
            "--server" => {
                a.real = match v().as_str() {
                    "real" => true,
                    "testkit" => false,
                    other => panic!("--server: real or testkit, not {other}"),
                }
            }
            "--soak-secs" => a.soak_secs = v().parse().expect("--soak-secs: seconds"),
            "--resync" => a.resync = Some(v().parse().expect("--resync: seconds")),
            "--no-resync-case" => a.no_resync_case = true,
            "--stack" => a.stack = true,
            "--out" => a.out = v().into(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// One `testkit apiserver` process, or one `testkit kube` (a real control plane: its
/// components are the process's children); killed on drop.
struct Server {
    child: Child,
    url: String,
    kubeconfig: PathBuf,
    real: bool,
    /// The real server's request counts when they were last reset.
    baseline: std::sync::Mutex<(u64, u64)>,
    /// The same, write requests by `VERB resource[/subresource]`.
    baseline_writes: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Server {
    fn start(testkit: &Path, dir: &Path, name: &str, preload: &[PathBuf], real: bool) -> Server {
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        let _ = std::fs::remove_file(&kubeconfig);
        let mut cmd = Command::new(testkit);
        cmd.args([if real { "kube" } else { "apiserver" }, "--kubeconfig-out"]).arg(&kubeconfig);
        for p in preload {
            cmd.arg("--preload").arg(p);
        }
        let child = cmd.stdout(Stdio::null()).spawn().expect("testkit starts");
        let deadline = Instant::now() + Duration::from_secs(if real { 300 } else { 30 });
        while !kubeconfig.exists() {
            assert!(Instant::now() < deadline, "testkit wrote no kubeconfig");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
        let v: Value = serde_json::from_str(&text).expect("kubeconfig is JSON");
        let url = v["clusters"][0]["cluster"]["server"].as_str().expect("server url").to_string();
        Server { child, url, kubeconfig, real, baseline: std::sync::Mutex::new((0, 0)), baseline_writes: Default::default() }
    }

    async fn client(&self) -> kube::Client {
        let mut config = if self.real {
            let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("client config")
        } else {
            let mut config = kube::Config::new(self.url.parse().expect("url"));
            config.default_namespace = "default".into();
            config
        };
        config.read_timeout = Some(Duration::from_secs(120));
        kube::Client::try_from(config).expect("client")
    }

    /// LIST requests of ClusterSyncs and write requests (create, update, patch, delete; the
    /// real control plane's own Lease and Node heartbeats left out), since the last
    /// [`Server::reset_counts`].
    async fn counts(&self, http: &reqwest::Client) -> (u64, u64) {
        let (lists, writes) = self.totals(http).await;
        let base = *self.baseline.lock().expect("baseline");
        (lists.saturating_sub(base.0), writes.saturating_sub(base.1))
    }

    async fn reset_counts(&self, http: &reqwest::Client) {
        let now = self.totals(http).await;
        *self.baseline.lock().expect("baseline") = now;
        let writes = self.writes_by_resource().await;
        *self.baseline_writes.lock().expect("baseline") = writes;
    }

    /// The real server's write requests since the last [`Server::reset_counts`], by
    /// `VERB resource[/subresource]` (what a figure of writes per Cluster is made of); empty on
    /// testkit's server.
    async fn writes_since_reset(&self) -> std::collections::BTreeMap<String, u64> {
        let base = self.baseline_writes.lock().expect("baseline").clone();
        let mut now = self.writes_by_resource().await;
        for (k, v) in &mut now {
            *v = v.saturating_sub(base.get(k).copied().unwrap_or(0));
        }
        now.retain(|_, v| *v > 0);
        now
    }

    async fn writes_by_resource(&self) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        if !self.real {
            return out;
        }
        let client = self.client().await;
        let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).expect("request")).await.expect("/metrics");
        for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
            let Some((labels, value)) = line.rsplit_once(' ') else { continue };
            let label = |k: &str| labels.split(&format!(",{k}=\"")).nth(1).and_then(|r| r.split('"').next()).unwrap_or_default().to_owned();
            let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
            if ["POST", "PUT", "PATCH", "APPLY", "DELETE"].contains(&verb.as_str()) && !["leases", "nodes"].contains(&resource.as_str()) {
                let key = if sub.is_empty() { format!("{verb} {resource}") } else { format!("{verb} {resource}/{sub}") };
                *out.entry(key).or_insert(0) += value.parse::<f64>().unwrap_or(0.0) as u64;
            }
        }
        out
    }

    /// testkit's counters, or the real server's `apiserver_request_total`, since it started.
    async fn totals(&self, http: &reqwest::Client) -> (u64, u64) {
        const WRITES: [&str; 4] = ["create", "update", "patch", "delete"];
        if !self.real {
            let s = self.stats(http).await;
            let lists = s["requests"]["list"]["clustersyncs.stacksync.io"].as_u64().unwrap_or(0);
            let writes = WRITES.iter().map(|v| sum(&s["requests"], Some(v))).sum();
            return (lists, writes);
        }
        let client = self.client().await;
        let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).expect("request")).await.expect("/metrics");
        let (mut lists, mut writes) = (0, 0);
        for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
            let Some((labels, value)) = line.rsplit_once(' ') else { continue };
            let label = |k: &str| labels.split(&format!("{k}=\"")).nth(1).and_then(|r| r.split('"').next()).unwrap_or_default().to_owned();
            let n = value.parse::<f64>().unwrap_or(0.0) as u64;
            let (verb, resource) = (label("verb"), label("resource"));
            if verb == "LIST" && resource == "clustersyncs" {
                lists += n;
            }
            if ["POST", "PUT", "PATCH", "APPLY", "DELETE"].contains(&verb.as_str()) && !["leases", "nodes"].contains(&resource.as_str()) {
                writes += n;
            }
        }
        (lists, writes)
    }

    async fn stats(&self, http: &reqwest::Client) -> Value {
        http.get(format!("{}/_testkit/stats", self.url)).send().await.expect("stats").json().await.expect("stats json")
    }

    async fn reset_stats(&self, http: &reqwest::Client) {
        http.delete(format!("{}/_testkit/stats", self.url)).send().await.expect("reset stats");
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.real {
            // SIGTERM: testkit kube stops its components and removes its directory.
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A management cluster, W workload clusters and N Clusters with their Secrets.
struct Fleet {
    mgmt: Server,
    workloads: Vec<Server>,
}

fn sum(counts: &Value, verb: Option<&str>) -> u64 {
    let Some(map) = counts.as_object() else { return 0 };
    map.iter()
        .filter(|(v, _)| verb.is_none_or(|w| w == v.as_str()))
        .flat_map(|(_, r)| r.as_object().into_iter().flatten())
        .map(|(_, n)| n.as_u64().unwrap_or(0))
        .sum()
}

impl Fleet {
    /// `class`: each Cluster's `spec.topology.class` (a cluster stack's ClusterClass), with the
    /// pod CIDR and endpoint the stack's values templates read.
    async fn start(a: &Args, dir: &Path, n: usize, real: bool, class: Option<&str>) -> Fleet {
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
        let mgmt = Server::start(&a.testkit, dir, "mgmt", &[fake_apiserver::capi_crds_dir(), crds], real);
        let workloads: Vec<Server> =
            (0..a.workloads).map(|i| Server::start(&a.testkit, dir, &format!("workload-{i}"), &[], false)).collect();
        let client = mgmt.client().await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
        namespaces.create(&PostParams::default(), &ns).await.expect("namespace");
        let kubeconfigs: Vec<Vec<u8>> = workloads.iter().map(|w| std::fs::read(&w.kubeconfig).expect("kubeconfig")).collect();
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
        let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &res);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
        let started = Instant::now();
        futures_util::stream::iter(0..n)
            .map(|i| {
                let (clusters, secrets) = (clusters.clone(), secrets.clone());
                let kubeconfig = kubeconfigs[i % kubeconfigs.len()].clone();
                async move {
                    let name = cluster_name(i);
                    let mut body = json!({
                        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                        "metadata": {"name": name, "namespace": NS, "labels": {"fleet": "bench"}},
                        "spec": {"controlPlaneEndpoint": {"host": format!("{name}.example.test"), "port": 6443}},
                    });
                    if let Some(class) = class {
                        body["spec"]["topology"] = json!({"class": class, "version": stack::KUBERNETES});
                        body["spec"]["clusterNetwork"] = json!({"pods": {"cidrBlocks": [format!("10.{}.0.0/16", 100 + i % 100)]}});
                    }
                    clusters.patch(&name, &PatchParams::apply("capi"), &Patch::Apply(body)).await.expect("cluster");
                    let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": name}, "status": {"controlPlaneReady": true}});
                    clusters.patch_status(&name, &PatchParams::apply("capi").force(), &Patch::Apply(status)).await.expect("status");
                    let mut secret = Secret::default();
                    secret.metadata.name = Some(format!("{name}-kubeconfig"));
                    secret.metadata.namespace = Some(NS.into());
                    secret.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), name.clone())].into());
                    secret.data = Some([("value".to_owned(), k8s_openapi::ByteString(kubeconfig))].into());
                    secrets.create(&PostParams::default(), &secret).await.expect("secret");
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
        println!("  fleet of {n} Clusters created in {:.1} s", started.elapsed().as_secs_f64());
        Fleet { mgmt, workloads }
    }

    /// Moves each of the `n` Clusters to the ClusterClass `class` (a cluster stack's next release).
    async fn move_class(&self, class: &str, n: usize) {
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
        let clusters: Api<DynamicObject> = Api::namespaced_with(self.mgmt.client().await, NS, &res);
        futures_util::stream::iter(0..n)
            .map(|i| {
                let clusters = clusters.clone();
                async move {
                    let patch = json!({"spec": {"topology": {"class": class}}});
                    clusters.patch(&cluster_name(i), &PatchParams::default(), &Patch::Merge(patch)).await.expect("move the class");
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
    }

    async fn reset(&self, http: &reqwest::Client) {
        for w in &self.workloads {
            w.reset_stats(http).await;
        }
    }

    /// Workload requests (all, LISTs, writes) since the last reset, summed over the servers.
    async fn requests(&self, http: &reqwest::Client) -> (u64, u64, u64) {
        let (mut all, mut lists, mut writes) = (0, 0, 0);
        for w in &self.workloads {
            let s = w.stats(http).await;
            all += sum(&s["requests"], None);
            lists += sum(&s["requests"], Some("list"));
            writes += sum(&s["writes"], None);
        }
        (all, lists, writes)
    }

    fn server_cpu(&self) -> f64 {
        self.workloads.iter().map(|w| cpu_seconds(&w.pid())).sum::<f64>() + cpu_seconds(&self.mgmt.pid())
    }

    /// ClusterSyncs whose Ready condition is True.
    async fn ready(&self) -> usize {
        let res = ApiResource::from_gvk(&GroupVersionKind::gvk("stacksync.io", "v1alpha1", "ClusterSync"));
        let api: Api<DynamicObject> = Api::namespaced_with(self.mgmt.client().await, NS, &res);
        let Ok(list) = api.list(&ListParams::default()).await else { return 0 };
        list.items
            .iter()
            .filter(|o| {
                o.data["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
            })
            .count()
    }
}

fn cluster_name(i: usize) -> String {
    format!("c{i:05}")
}

/// The release: a Namespace and 39 ConfigMaps per Cluster, named by `${cluster.name}`; `mark`
/// changes one ConfigMap (a new release that changes one object per Cluster).
fn manifests(mark: &str) -> String {
    let mut text = String::from("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns-${cluster.name}\n");
    let payload = "x".repeat(200);
    for j in 1..OBJECTS {
        let extra = if j == 1 { format!("\n  mark: \"{mark}\"") } else { String::new() };
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{j:02}\n  namespace: ns-${{cluster.name}}\ndata:\n  cluster: ${{cluster.name}}\n  index: \"{j}\"\n  payload: {payload}{extra}\n"
        ));
    }
    text
}

fn config(dir: &Path, repo: &testkit::git::ReleaseRepo, mgmt: &Server, resync: &str, interval: &str) -> PathBuf {
    config_file(dir, "stacksync.yaml", repo, mgmt, resync, interval, "")
}

/// The bench's config at `dir/file`: one Git source, the `fleet` subscription (`extra`: more of
/// its fields, each line indented as they are), the Kubernetes target.
fn config_file(
    dir: &Path,
    file: &str,
    repo: &testkit::git::ReleaseRepo,
    mgmt: &Server,
    resync: &str,
    interval: &str,
    extra: &str,
) -> PathBuf {
    let text = format!(
        "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: {cache}\nsources:\n  - name: stacks\n    git:\n      url: {url}\nsubscriptions:\n  - name: fleet\n    source: stacks\n{extra}    interval: {interval}\n    healthTimeout: 0s\n    clusterSelector:\n      matchLabels: {{fleet: bench}}\ntarget:\n  kubernetes:\n    kubeconfig: {kubeconfig}\n    resync: {resync}\n    requestTimeout: 60s\n",
        cache = dir.join("cache").display(),
        url = repo.file_url(),
        kubeconfig = mgmt.kubeconfig.display(),
    );
    let path = dir.join(file);
    std::fs::write(&path, text).expect("config");
    path
}

/// The management server's `(ClusterSync LISTs, writes)` once its writes have settled: no new
/// write for 2 s (at most 30 s).
async fn settled_counts(fleet: &Fleet, http: &reqwest::Client) -> (u64, u64) {
    let mut settled = fleet.mgmt.counts(http).await;
    let settling = Instant::now();
    while settling.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = fleet.mgmt.counts(http).await;
        if now.1 == settled.1 {
            break;
        }
        settled = now;
    }
    settled
}

/// Stops the daemon: SIGTERM, at most 30 s to exit, then SIGKILL.
async fn stop_daemon(child: &mut Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let stop = Instant::now();
    while matches!(child.try_wait(), Ok(None)) && stop.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What `/usr/bin/time -v` says of a finished process.
struct Timed {
    wall: f64,
    cpu: f64,
    peak_mib: f64,
    log_lines: usize,
    warn_lines: usize,
    ok: bool,
}

fn time_field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_owned()))
}

/// Clusters the daemon's log says are synced and Ready (`synced: … ready=true`).
fn synced_clusters(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let names: std::collections::HashSet<&str> = text
        .lines()
        .filter(|l| l.contains("synced: ") && l.contains("ready=true"))
        .filter_map(|l| l.split("cluster=").nth(1)?.split([' ', '}']).next())
        .collect();
    names.len()
}

fn count_lines(log: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    (text.lines().count(), text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).count())
}

/// `stacksync <args>` under `/usr/bin/time -v`, its output to `stdout` and `stderr`: its exit
/// status and [`Timed`] without the log's counts.
fn timed(a: &Args, args: &[&std::ffi::OsStr], stdout: Stdio, stderr: Stdio, time: &Path) -> (std::process::ExitStatus, Timed) {
    let started = Instant::now();
    let status = Command::new("/usr/bin/time")
        .arg("-v")
        .arg("-o")
        .arg(time)
        .arg(&a.stacksync)
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .expect("stacksync runs");
    let wall = started.elapsed().as_secs_f64();
    let t = std::fs::read_to_string(time).unwrap_or_default();
    let secs = |n: &str| time_field(&t, n).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let peak_kib = time_field(&t, "Maximum resident set size (kbytes):").and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu = secs("User time (seconds):") + secs("System time (seconds):");
    (status, Timed { wall, cpu, peak_mib: peak_kib / 1024.0, log_lines: 0, warn_lines: 0, ok: status.success() })
}

/// `stacksync run --once` under `/usr/bin/time -v`.
fn run_once(a: &Args, config: &Path, dir: &Path, name: &str) -> Timed {
    let (log, time) = (dir.join(format!("{name}.log")), dir.join(format!("{name}.time")));
    let args = ["run".as_ref(), "--once".as_ref(), "--config".as_ref(), config.as_os_str()];
    let (status, timed) = timed(a, &args, Stdio::null(), std::fs::File::create(&log).expect("log").into(), &time);
    let (log_lines, warn_lines) = count_lines(&log);
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        println!("  {name}: exit {status}; last lines:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    Timed { log_lines, warn_lines, ..timed }
}

/// `stacksync preview --release DIR --tag v2.0.0 -o json` under `/usr/bin/time -v`; `ok` is
/// its exit code being 1 (changes, every Cluster judged). The JSON it printed.
fn preview(a: &Args, config: &Path, release: &Path, dir: &Path) -> (Timed, Value) {
    let (out, time) = (dir.join("preview.json"), dir.join("preview.time"));
    let args = [
        "preview".as_ref(),
        "--tag".as_ref(),
        "v2.0.0".as_ref(),
        "-o".as_ref(),
        "json".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--release".as_ref(),
        release.as_os_str(),
    ];
    let (status, timed) = timed(a, &args, std::fs::File::create(&out).expect("out").into(), Stdio::null(), &time);
    let json: Value = serde_json::from_slice(&std::fs::read(&out).unwrap_or_default()).unwrap_or(Value::Null);
    if status.code() != Some(1) {
        println!("  preview: exit {status}; summary {}", json["summary"]);
    }
    (Timed { ok: status.code() == Some(1), ..timed }, json)
}

fn status_kib(pid: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0.0)
}

fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

const WRK_SCRIPT: &str = r#"-- Server-side apply PATCHes of 1,000 ConfigMaps in turn (created by the first round).
counter = 0
request = function()
  counter = counter + 1
  local name = "wrk-" .. (counter % 1000)
  local body = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"' .. name .. '","namespace":"default","labels":{"stacksync.io/owner":"wrk"}},"data":{"payload":"' .. string.rep("x", 200) .. '"}}'
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Content-Type"] = "application/apply-patch+yaml"
  return wrk.format("PATCH", "/api/v1/namespaces/default/configmaps/" .. name .. "?fieldManager=wrk&force=true", headers, body)
end
"#;

/// The raw SSA PATCH rate of a fresh workload server under `wrk` (as `benches/fleet.rs`).
fn ceiling(w: &Path, testkit: &Path, dir: &Path) -> f64 {
    let server = Server::start(testkit, dir, "wrk", &[], false);
    let script = dir.join("ssa.lua");
    std::fs::write(&script, WRK_SCRIPT).expect("lua");
    let run = |secs: u64| {
        let out = Command::new(w)
            .args(["-t", "2", "-c", &WRK_CONNECTIONS.to_string(), "-d", &format!("{secs}s"), "-s"])
            .arg(&script)
            .arg(&server.url)
            .output()
            .expect("wrk runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find_map(|l| l.strip_prefix("Requests/sec:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
    };
    let _ = run(2);
    run(5)
}

fn print(v: &Value) {
    let num = |k: &str| v[k].as_f64().map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"));
    println!(
        "{:<52} {:>6} Clusters  ours {:>9} {:<9} peer {:>9}  ratio {:>5}  {}",
        v["case"].as_str().unwrap_or_default(),
        v["clusters"],
        num("ours"),
        v["unit"].as_str().unwrap_or_default(),
        num("peer"),
        num("ratio"),
        v["note"].as_str().unwrap_or_default()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let http = reqwest::Client::new();
    let mut tools: Vec<(&str, &Path)> = vec![("stacksync", &a.stacksync)];
    if let Some(w) = &a.wrk {
        tools.push(("wrk", w));
    }
    let env = common::machine(&tools);
    println!("machine: {env}");
    let mut cases = Vec::new();
    let mut case = |v: Value| {
        print(&v);
        cases.push(v);
    };
    for &n in a.sizes.iter().filter(|_| a.stack) {
        stack_cases(&a, n, &env, &mut case).await;
    }
    for &n in a.sizes.iter().filter(|_| !a.stack) {
        let objects = n * OBJECTS;
        let base = json!({"bench": "process", "clusters": n, "objects": objects, "workload_servers": a.workloads});
        let with = |extra: Value| {
            let mut b = base.clone();
            if let (Some(b), Value::Object(e)) = (b.as_object_mut(), extra) {
                b.extend(e);
            }
            b
        };

        // run --once: cold, then unchanged; preview.
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
        repo.release("v1.0.0", &[("manifests/fleet.yaml", &manifests("1"))]);
        if !a.daemon_only {
            let ceiling = a.wrk.as_ref().map(|w| ceiling(w, &a.testkit, dir.path()));
            let fleet = Fleet::start(&a, dir.path(), n, a.real, None).await;
            let cfg = config(dir.path(), &repo, &fleet.mgmt, "10m", "1h");
            fleet.reset(&http).await;
            let cpu0 = fleet.server_cpu();
            let cold = run_once(&a, &cfg, dir.path(), "once-cold");
            let server_cpu = fleet.server_cpu() - cpu0;
            let (requests, _, writes) = fleet.requests(&http).await;
            let rate = objects as f64 / cold.wall;
            let ready = fleet.ready().await;
            case(common::case(
                "process run --once cold vs raw SSA PATCH ceiling",
                rate,
                ceiling.map(|c| (c, "wrk -t2 -c128 on one workload server, 5 s")),
                "objects/s",
                &env,
                with(json!({"seconds": cold.wall, "peak_rss_mib": cold.peak_mib, "cpu_s": cold.cpu, "servers_cpu_s": server_cpu,
                    "workload_requests": requests, "writes": writes, "log_lines": cold.log_lines, "warn_lines": cold.warn_lines,
                    "ready": ready, "exit_ok": cold.ok,
                    "note": format!("{:.1} s, {rate:.0} obj/s, {:.0} MiB peak, CPU {:.1} s, {requests} requests, {} log lines, {ready}/{n} Ready",
                        cold.wall, cold.peak_mib, cold.cpu, cold.log_lines)})),
            ));
            fleet.reset(&http).await;
            let noop = run_once(&a, &cfg, dir.path(), "once-noop");
            let (requests, lists, writes) = fleet.requests(&http).await;
            let per = requests as f64 / (n as f64 * 2.0);
            case(common::case(
                "process run --once no-op: requests per (Cluster, kind)",
                per,
                Some((1.0, "one LIST per Cluster and kind")),
                "requests",
                &env,
                with(json!({"seconds": noop.wall, "peak_rss_mib": noop.peak_mib, "cpu_s": noop.cpu, "workload_requests": requests,
                    "lists": lists, "writes": writes, "log_lines": noop.log_lines, "warn_lines": noop.warn_lines, "exit_ok": noop.ok,
                    "note": format!("{:.1} s, {:.0} MiB peak, CPU {:.1} s, {requests} requests ({lists} LISTs, {writes} writes), {} log lines",
                        noop.wall, noop.peak_mib, noop.cpu, noop.log_lines)})),
            ));
            // preview: the next release from a local directory, judged on the whole fleet.
            let next = dir.path().join("next");
            std::fs::create_dir_all(next.join("manifests")).expect("next");
            std::fs::write(next.join("manifests/fleet.yaml"), manifests("2")).expect("next release");
            fleet.reset(&http).await;
            fleet.mgmt.reset_stats(&http).await;
            let (p, previewed) = preview(&a, &cfg, &next, dir.path());
            let (requests, _, writes) = fleet.requests(&http).await;
            let mgmt_writes = sum(&fleet.mgmt.stats(&http).await["writes"], None);
            let changed = previewed["summary"]["changed"].as_u64().unwrap_or(0);
            case(common::case(
                "process preview of a next release vs run --once cold",
                p.wall,
                Some((cold.wall, "run --once cold of the same fleet")),
                "seconds",
                &env,
                with(json!({"seconds": p.wall, "peak_rss_mib": p.peak_mib, "cpu_s": p.cpu, "workload_requests": requests,
                    "writes": writes + mgmt_writes, "changed_clusters": changed, "exit_code_1": p.ok,
                    "note": format!("{:.1} s ({:.2}x the cold pass), {:.0} MiB peak, CPU {:.1} s, {requests} requests, {} writes, {changed}/{n} Clusters change",
                        p.wall, p.wall / cold.wall, p.peak_mib, p.cpu, writes + mgmt_writes)})),
            ));
            drop(fleet);
        }

        if a.daemon {
            // The daemon on a fresh fleet: start to every ClusterSync Ready, then one resync.
            // Longer than the cold sync takes to spread, so the one resync measured is whole and
            // alone (every Cluster comes back `resync` after its own reconcile).
            let resync = match (a.resync, a.soak_secs) {
                (Some(r), _) => r,
                (None, 0) => 30 + n as u64 * OBJECTS as u64 / 2000,
                (None, _) => 30,
            };
            let fleet = Fleet::start(&a, dir.path(), n, a.real, None).await;
            let _ = std::fs::remove_dir_all(dir.path().join("cache"));
            let interval = if a.soak_secs > 0 { "20s" } else { "1h" };
            let cfg = config(dir.path(), &repo, &fleet.mgmt, &format!("{resync}s"), interval);
            fleet.reset(&http).await;
            fleet.mgmt.reset_counts(&http).await;
            let log = dir.path().join("daemon.log");
            let started = Instant::now();
            let mut child = Command::new(&a.stacksync)
                .args(["run", "--admin-addr", "127.0.0.1:0", "--config"])
                .arg(&cfg)
                .env("NO_COLOR", "1")
                .env_remove("RUST_LOG")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log"))
                .spawn()
                .expect("daemon");
            let pid = child.id().to_string();
            // Every Cluster synced: told by the daemon's one INFO line per Cluster and pass
            // (`synced: … ready=true`), read from its log — listing every ClusterSync twice a
            // second would load the management server more than the daemon does. Confirmed with
            // the API server after.
            let deadline = Duration::from_secs(60 + n as u64 / 10);
            let mut synced = None;
            while started.elapsed() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if synced_clusters(&log) >= n {
                    synced = Some(started.elapsed().as_secs_f64());
                    break;
                }
            }
            // Counted before the bench lists ClusterSyncs itself, once the writes that follow
            // the last `synced` line (its status, its Event, the roll-up) have landed: no new
            // write for 2 s (at most 30 s).
            let (syncs_listed, mgmt_writes) = settled_counts(&fleet, &http).await;
            let writes_by_resource = fleet.mgmt.writes_since_reset().await;
            let ready = fleet.ready().await;
            let cold_peak = status_kib(&pid, "VmHWM:") / 1024.0;
            let cold_cpu = cpu_seconds(&pid);
            let (cold_requests, _, _) = fleet.requests(&http).await;
            let (cold_lines, _) = count_lines(&log);
            // One resync: every Cluster is looked at again `resync` after its reconcile.
            fleet.reset(&http).await;
            let lines_before = cold_lines;
            let mut last = (0, 0, 0);
            let waited = Instant::now();
            while !a.no_resync_case && waited.elapsed() < Duration::from_secs(resync * 2) {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let now = fleet.requests(&http).await;
                if now.1 >= (n * 2) as u64 && now == last {
                    break;
                }
                last = now;
            }
            let (requests, lists, writes) = fleet.requests(&http).await;
            let (lines_after, warn_lines) = count_lines(&log);
            let rss_now = status_kib(&pid, "VmRSS:") / 1024.0;
            let peak = status_kib(&pid, "VmHWM:") / 1024.0;
            let open = fds(&pid);
            let seconds = synced.unwrap_or(f64::NAN);
            case(common::case(
                "process daemon start to every Cluster synced",
                seconds,
                None,
                "s",
                &env,
                with(json!({"seconds": seconds, "objects_per_s": objects as f64 / seconds, "peak_rss_mib": cold_peak, "cpu_s": cold_cpu,
                    "workload_requests": cold_requests, "log_lines": cold_lines, "ready": ready,
                    "note": format!("{seconds:.1} s, {:.0} obj/s, {cold_peak:.0} MiB peak, CPU {cold_cpu:.1} s, {cold_requests} requests, {cold_lines} log lines",
                        objects as f64 / seconds)})),
            ));
            let per_cluster = mgmt_writes as f64 / n as f64;
            let on = if a.real { "real" } else { "testkit" };
            // A synced Cluster's status is written again when its `lastSyncTime` is half a resync
            // old (the heartbeat, docs/status.md): a cold start longer than that counts
            // heartbeats of the first Clusters too, which are not the cost of a new Cluster.
            let heartbeats = seconds.is_nan() || seconds > resync as f64 / 2.0;
            let counted = if heartbeats {
                format!(
                    " (includes heartbeat status writes: the cold start outlasted half the resync of {resync} s; pass a longer --resync)"
                )
            } else {
                String::new()
            };
            case(common::case(
                "process daemon start to every Cluster synced: management writes per new Cluster",
                per_cluster,
                Some((3.0, "goal: at most 3")),
                "writes",
                &env,
                with(
                    json!({"management_server": on, "management_writes": mgmt_writes, "management_writes_by_resource": writes_by_resource, "clustersync_lists": syncs_listed, "seconds": seconds,
                    "resync_s": resync, "includes_heartbeats": heartbeats,
                    "note": format!("{on} management server: {mgmt_writes} write requests ({per_cluster:.2} per Cluster), {syncs_listed} LISTs of ClusterSyncs in {seconds:.1} s{counted}")}),
                ),
            ));
            let per = requests as f64 / (n as f64 * 2.0);
            if !a.no_resync_case {
                case(common::case(
                    "process daemon one resync: requests per (Cluster, kind)",
                    per,
                    Some((1.0, "one LIST per Cluster and kind")),
                    "requests",
                    &env,
                    with(json!({"workload_requests": requests, "lists": lists, "writes": writes, "peak_rss_mib": peak, "rss_mib": rss_now,
                    "open_fds": open, "log_lines": lines_after - lines_before, "warn_lines": warn_lines,
                    "note": format!("{requests} requests ({lists} LISTs, {writes} writes), RSS {rss_now:.0} MiB (peak {peak:.0}), {open} fds, {} log lines",
                        lines_after - lines_before)})),
                ));
            }
            if a.soak_secs > 0 {
                // Resyncs every 30 s and a new release every minute; RSS and descriptors sampled.
                let mut samples = Vec::new();
                fleet.reset(&http).await;
                let soak = Instant::now();
                let mut release = 1;
                let mut next_release = Instant::now() + Duration::from_secs(60);
                while soak.elapsed() < Duration::from_secs(a.soak_secs) {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    if Instant::now() >= next_release {
                        release += 1;
                        repo.release(&format!("v1.0.{release}"), &[("manifests/fleet.yaml", &manifests(&release.to_string()))]);
                        // The soak's subscription polls every 20 s: the release lands at the next poll.
                        next_release += Duration::from_secs(60);
                    }
                    samples.push(json!({"t": soak.elapsed().as_secs(), "rss_mib": status_kib(&pid, "VmRSS:") / 1024.0, "fds": fds(&pid)}));
                }
                // The releases landed: one ConfigMap per Cluster and release written.
                let (soak_requests, _, soak_writes) = fleet.requests(&http).await;
                let rss: Vec<f64> = samples.iter().filter_map(|s| s["rss_mib"].as_f64()).collect();
                let first = rss.first().copied().unwrap_or_default();
                let last = rss.last().copied().unwrap_or_default();
                let max = rss.iter().copied().fold(0.0, f64::max);
                case(common::case(
                    "process daemon soak: RSS last vs first sample",
                    last,
                    Some((first, "RSS at the soak's start")),
                    "MiB",
                    &env,
                    with(json!({"soak_s": a.soak_secs, "releases": release, "max_rss_mib": max, "samples": samples,
                        "workload_requests": soak_requests, "writes": soak_writes,
                        "note": format!("{first:.0} -> {last:.0} MiB (max {max:.0}) over {} s, {release} releases, {soak_requests} requests, {soak_writes} writes", a.soak_secs)})),
                ));
            }
            stop_daemon(&mut child).await;
            drop(fleet);
        }
    }
    common::write(&a.out, &cases, false);
    println!("results: {}", a.out.display());
}

/// The config of the cluster-stack cases: the fixture stack's releases from `repo`.
fn stack_config(dir: &Path, repo: &testkit::git::ReleaseRepo, mgmt: &Server) -> PathBuf {
    let extra = format!("    stack: {}\n    format: clusterstack\n", stack::STACK);
    config_file(dir, "stacksync-stack.yaml", repo, mgmt, "1h", "1h", &extra)
}

/// What one start of the daemon did until every Cluster was synced.
struct Started {
    seconds: f64,
    /// The daemon's and the library renderer's.
    cpu: f64,
    renderer_cpu: f64,
    peak_mib: f64,
    workload_writes: u64,
    mgmt_writes: u64,
}

/// Starts the daemon on `cfg` (its log to `log`), waits until every one of `n` Clusters is
/// synced (its log's `synced: … ready=true` lines) and the management server's writes settled,
/// then stops it.
async fn start_until_synced(a: &Args, fleet: &Fleet, http: &reqwest::Client, cfg: &Path, log: &Path, n: usize) -> Started {
    fleet.reset(http).await;
    fleet.mgmt.reset_counts(http).await;
    let started = Instant::now();
    let renderer = std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/stacksync-tools"))
        .join("bin/stacksync-renderer");
    let mut child = Command::new(&a.stacksync)
        .args(["run", "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(cfg)
        .env("NO_COLOR", "1")
        .env("STACKSYNC_RENDERER", renderer)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("daemon");
    let pid = child.id().to_string();
    let deadline = Duration::from_secs(300 + n as u64);
    let mut seconds = f64::NAN;
    while started.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if synced_clusters(log) >= n {
            seconds = started.elapsed().as_secs_f64();
            break;
        }
    }
    let settled = settled_counts(fleet, http).await;
    // The daemon's CPU and its children's (the library renderer), read before they exit.
    let children: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children")).unwrap_or_default().split_whitespace().map(str::to_owned).collect::<Vec<_>>()
        })
        .collect();
    let renderer_cpu: f64 = children.iter().map(|c| cpu_seconds(c)).sum();
    let (cpu, peak_mib) = (cpu_seconds(&pid) + renderer_cpu, status_kib(&pid, "VmHWM:") / 1024.0);
    let (_, _, workload_writes) = fleet.requests(http).await;
    stop_daemon(&mut child).await;
    if seconds.is_nan() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        println!("  not every Cluster synced; last lines:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    Started { seconds, cpu, renderer_cpu, peak_mib, workload_writes, mgmt_writes: settled.1 }
}

/// `--stack`: the daemon on N Clusters of the fixture stack of benches/common/stack.rs (the SCS
/// openstack stack's shape: four charts, 142 objects a Cluster, the CNI chart making three
/// RSA-2048 keys per render), the library renderer. Its first start on a fresh fleet (every
/// Cluster rendered for the first time, its keys made), then a restart on an empty cache (the
/// shipped `emptyDir`, a leader change): what the charts generate is rendered as stand-ins
/// where each ClusterSync's record matches, so no key is made and nothing is written.
async fn stack_cases(a: &Args, n: usize, env: &Value, case: &mut impl FnMut(Value)) {
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("release");
    stack::release(&root);
    stack::names_per_cluster(&root);
    let files = stack::files(&root);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let repo = testkit::git::ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    let tag = format!("{}-v1", stack::STACK);
    repo.release(&tag, &files);
    let fleet = Fleet::start(a, dir.path(), n, a.real, Some(&tag)).await;
    let cfg = stack_config(dir.path(), &repo, &fleet.mgmt);
    let base = json!({"bench": "process", "clusters": n, "workload_servers": a.workloads, "stack": tag});
    let with = |extra: Value| {
        let mut b = base.clone();
        if let (Some(b), Value::Object(e)) = (b.as_object_mut(), extra) {
            b.extend(e);
        }
        b
    };
    let first = start_until_synced(a, &fleet, &http, &cfg, &dir.path().join("stack-first.log"), n).await;
    let _ = std::fs::remove_dir_all(dir.path().join("cache"));
    let again = start_until_synced(a, &fleet, &http, &cfg, &dir.path().join("stack-restart.log"), n).await;
    // A new release for the whole fleet: v2 of the stack (its ClusterClass and addon versions
    // bumped, every chart's image tag changed: four DaemonSets a Cluster change), every
    // Cluster's class moved to it, the daemon started on the cache it left.
    let v2: Vec<(String, String)> = stack::files(&root)
        .into_iter()
        .map(|(p, t)| {
            let p = p.replace("-cluster-class-v1", "-cluster-class-v2").replace("-cluster-addon-v1", "-cluster-addon-v2");
            let t = match p.as_str() {
                "metadata.yaml" => t.replace("clusterStack: v1", "clusterStack: v2").replace("clusterAddon: v1", "clusterAddon: v2"),
                _ if p.contains("-cluster-class-v2/Chart.yaml") => t.replace("version: v1", "version: v2"),
                _ if p.ends_with("/values.yaml") => t.replace("tag: v1.0.0", "tag: v1.1.0"),
                _ => t,
            };
            (p, t)
        })
        .collect();
    for old in ["cluster-class", "cluster-addon"] {
        repo.git(&["rm", "-r", "-q", "--", &format!("{}-{old}-v1", stack::STACK)]).expect("git rm the v1 charts");
    }
    let v2_files: Vec<(&str, &str)> = v2.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let tag2 = format!("{}-v2", stack::STACK);
    repo.release(&tag2, &v2_files);
    fleet.move_class(&tag2, n).await;
    let moved = start_until_synced(a, &fleet, &http, &cfg, &dir.path().join("stack-release.log"), n).await;
    for log in ["stack-first.log", "stack-restart.log", "stack-release.log"] {
        let text = std::fs::read_to_string(dir.path().join(log)).unwrap_or_default();
        let sample: Vec<&str> = text.lines().filter(|l| l.contains("synced: ")).take(2).collect();
        println!("  {log}: {}", sample.join("\n    "));
    }
    let note = |s: &Started| {
        format!(
            "{:.1} s, CPU {:.1} s (renderer {:.1} s), {:.0} MiB peak, {} workload writes, {} management writes",
            s.seconds, s.cpu, s.renderer_cpu, s.peak_mib, s.workload_writes, s.mgmt_writes
        )
    };
    let fields = |s: &Started| json!({"seconds": s.seconds, "cpu_s": s.cpu, "renderer_cpu_s": s.renderer_cpu, "peak_rss_mib": s.peak_mib, "workload_writes": s.workload_writes, "management_writes": s.mgmt_writes});
    case(common::case(
        "process daemon on the fixture stack: first start to every Cluster synced",
        first.seconds,
        None,
        "s",
        env,
        with(json!({"first": fields(&first), "note": note(&first)})),
    ));
    case(common::case(
        "process daemon on the fixture stack: restart on an empty cache to every Cluster synced",
        again.seconds,
        Some((first.seconds, "the first start of the same fleet")),
        "s",
        env,
        with(json!({"restart": fields(&again), "note": note(&again)})),
    ));
    case(common::case(
        "process daemon on the fixture stack: a new release for every Cluster, to every Cluster synced",
        moved.seconds,
        Some((first.seconds, "the first start of the same fleet")),
        "s",
        env,
        with(json!({"release": fields(&moved), "note": note(&moved)})),
    ));
}
