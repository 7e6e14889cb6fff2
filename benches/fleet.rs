//! Fleet benchmark: N Clusters × 40 objects (a Namespace and 39 ConfigMaps each), every Cluster
//! reaching one testkit workload API server (its own process, `testkit apiserver`), synced cold
//! and then again unchanged by `apply::ssa::Applier` as the controller runs it (16 Clusters at
//! once, 8 objects of a rank at once, one shared client). Peers on the same server process kind:
//! the real `kubectl apply --server-side` of the same objects in one process, and the raw
//! server-side apply PATCH ceiling measured by `wrk` at 16 connections.
//!
//! Run through `scripts/bench.sh` (it builds testkit and finds kubectl and wrk); by hand:
//! `cargo bench --bench fleet -- --testkit T --kubectl K --wrk W --sizes 100,1000 --out F`.
//! Results: docs/performance.md.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use stacksync::apply::ssa::{Applier, ApplyOptions, Inventory, OWNER_LABEL, Stage, StageAction, owner_label_value};
use stacksync::render::Object;

const OBJECTS: usize = 40;
const CLUSTERS_AT_ONCE: usize = 16;
const WRK_CONNECTIONS: usize = 16;

struct Args {
    testkit: PathBuf,
    kubectl: Option<PathBuf>,
    wrk: Option<PathBuf>,
    sizes: Vec<usize>,
    kubectl_max: usize,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        testkit: PathBuf::from("testkit"),
        kubectl: None,
        wrk: None,
        sizes: vec![100, 1000],
        kubectl_max: 1000,
        out: PathBuf::from("target/bench/results.json"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--testkit" => a.testkit = v().into(),
            "--kubectl" => a.kubectl = Some(v().into()),
            "--wrk" => a.wrk = Some(v().into()),
            "--sizes" => a.sizes = v().split(',').map(|s| s.trim().parse().expect("--sizes: numbers")).collect(),
            "--kubectl-max" => a.kubectl_max = v().parse().expect("--kubectl-max: a number"),
            "--out" => a.out = v().into(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// One `testkit apiserver` process; killed on drop.
struct Server {
    child: Child,
    url: String,
    kubeconfig: PathBuf,
}

impl Server {
    fn start(testkit: &Path, dir: &Path, name: &str) -> Server {
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        let _ = std::fs::remove_file(&kubeconfig);
        let child = Command::new(testkit)
            .args(["apiserver", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .spawn()
            .expect("testkit apiserver starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !kubeconfig.exists() {
            assert!(Instant::now() < deadline, "testkit apiserver wrote no kubeconfig");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
        let v: Value = serde_json::from_str(&text).expect("kubeconfig is JSON");
        let url = v["clusters"][0]["cluster"]["server"].as_str().expect("server url").to_string();
        Server { child, url, kubeconfig }
    }

    fn rss_mib(&self) -> f64 {
        status_kib(&format!("/proc/{}/status", self.child.id()), "VmHWM:") / 1024.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_kib(file: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0.0)
}

/// Resets this process's peak RSS (`VmHWM`), so each size reports its own.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_mib() -> f64 {
    status_kib("/proc/self/status", "VmHWM:") / 1024.0
}

fn owner(i: usize) -> String {
    format!("fleet.c{i:05}")
}

fn cluster_objects(i: usize) -> Vec<Object> {
    let ns = format!("c{i:05}");
    let object = |body: Value| Object {
        api_version: body["apiVersion"].as_str().unwrap_or_default().into(),
        kind: body["kind"].as_str().unwrap_or_default().into(),
        namespace: body["metadata"]["namespace"].as_str().map(Into::into),
        name: body["metadata"]["name"].as_str().unwrap_or_default().into(),
        file: "fleet.yaml".into(),
        line: 1,
        body,
        chart: None,
        stage: None,
    };
    let mut out = vec![object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))];
    out.extend((1..OBJECTS).map(|j| {
        object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{j:02}"), "namespace": ns},
            "data": {"cluster": ns, "index": j.to_string(), "payload": "x".repeat(200)}}))
    }));
    out
}

/// The same objects as kubectl reads them (with the owner label our applier adds).
fn cluster_yaml(i: usize, out: &mut impl Write) {
    for o in cluster_objects(i) {
        let mut body = o.body;
        body["metadata"]["labels"] = json!({ OWNER_LABEL: owner_label_value(&owner(i)) });
        writeln!(out, "---\n{}", serde_json::to_string(&body).expect("json")).expect("write");
    }
}

async fn stats(http: &reqwest::Client, url: &str) -> Value {
    http.get(format!("{url}/_testkit/stats")).send().await.expect("stats").json().await.expect("stats json")
}

fn sum(counts: &Value, verb: Option<&str>) -> u64 {
    let Some(map) = counts.as_object() else { return 0 };
    map.iter()
        .filter(|(v, _)| verb.is_none_or(|w| w == v.as_str()))
        .flat_map(|(_, r)| r.as_object().into_iter().flatten())
        .map(|(_, n)| n.as_u64().unwrap_or(0))
        .sum()
}

struct Sync {
    seconds: f64,
    inventories: Vec<Inventory>,
    not_synced: usize,
}

async fn fleet_sync(client: &kube::Client, n: usize, previous: &[Inventory]) -> Sync {
    let start = Instant::now();
    let results: Vec<(Inventory, usize)> = futures_util::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let prev = previous.get(i).cloned().unwrap_or_default();
            async move {
                let applier = Applier::new(
                    client,
                    ApplyOptions { owner: owner(i), request_timeout: Duration::from_secs(120), ..ApplyOptions::default() },
                );
                let stage = [Stage { name: String::new(), action: StageAction::Apply, objects: cluster_objects(i) }];
                let r = applier.sync(&stage, &prev).await;
                let bad = r.changes.entries.iter().filter(|e| !e.action.is_synced()).count();
                (r.inventory, bad)
            }
        })
        .buffered(CLUSTERS_AT_ONCE)
        .collect()
        .await;
    let seconds = start.elapsed().as_secs_f64();
    let not_synced = results.iter().map(|r| r.1).sum();
    Sync { seconds, inventories: results.into_iter().map(|r| r.0).collect(), not_synced }
}

fn kubectl_apply(kubectl: &Path, server: &Server, file: &Path, home: &Path) -> f64 {
    let t = Instant::now();
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args(["apply", "--server-side", "--field-manager=kubectl-bench", "-o", "name", "-f"])
        .arg(file)
        .env("HOME", home)
        .stdout(Stdio::null())
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl: {}", String::from_utf8_lossy(&out.stderr));
    t.elapsed().as_secs_f64()
}

const WRK_SCRIPT: &str = r#"-- Server-side apply PATCHes of 1,000 ConfigMaps in turn (created by the first round).
counter = 0
request = function()
  counter = counter + 1
  local name = "wrk-" .. (counter % 1000)
  local body = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"' .. name .. '","namespace":"default","labels":{"stacksync.io/owner":"wrk"}},"data":{"payload":"' .. string.rep("x", 200) .. '"}}'
  return wrk.format("PATCH", "/api/v1/namespaces/default/configmaps/" .. name .. "?fieldManager=wrk&force=true",
    {["Content-Type"] = "application/apply-patch+yaml"}, body)
end
"#;

/// Requests per second of `wrk` PATCHing for `secs` at [`WRK_CONNECTIONS`].
fn wrk(wrk: &Path, server: &Server, dir: &Path, secs: u64) -> (f64, String) {
    let script = dir.join("ssa.lua");
    std::fs::write(&script, WRK_SCRIPT).expect("lua");
    let out = Command::new(wrk)
        .args(["-t", "2", "-c", &WRK_CONNECTIONS.to_string(), "-d", &format!("{secs}s"), "-s"])
        .arg(&script)
        .arg(&server.url)
        .output()
        .expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains("Non-2xx"), "wrk got errors:\n{text}");
    let rps = text.lines().find_map(|l| l.strip_prefix("Requests/sec:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0);
    (rps, text)
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let mem = status_kib("/proc/meminfo", "MemTotal:") / 1024.0 / 1024.0;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    json!({"cpu": cpu, "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), "memory_gib": (mem * 10.0).round() / 10.0, "load_at_start": load, "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = reqwest::Client::new();
    let env = machine();
    let mut cases = Vec::new();
    let mut case = |v: Value| {
        println!(
            "{:<34} {:>7} Clusters {:>8} objects  {:>8.2} s  {:>8.0} obj/s  {}",
            v["case"].as_str().unwrap_or_default(),
            v["clusters"],
            v["objects"],
            v["seconds"].as_f64().unwrap_or(0.0),
            v["objects_per_s"].as_f64().unwrap_or(0.0),
            v["note"].as_str().unwrap_or_default()
        );
        cases.push(v);
    };
    println!("machine: {env}");
    for &n in &a.sizes {
        let objects = n * OBJECTS;
        // The ceiling first, on a fresh server: what one testkit process answers to raw SSA PATCHes.
        let ceiling = a.wrk.as_ref().map(|w| {
            let server = Server::start(&a.testkit, dir.path(), "wrk");
            let _ = wrk(w, &server, dir.path(), 2); // creates the 1,000 objects
            let (rps, _) = wrk(w, &server, dir.path(), 5);
            rps
        });
        if let Some(rps) = ceiling {
            case(json!({"case": "ceiling: raw SSA PATCH (wrk)", "clusters": n, "objects": objects, "seconds": objects as f64 / rps,
                "objects_per_s": rps, "unit": "objects/s", "note": format!("wrk -t2 -c{WRK_CONNECTIONS}, 5 s")}));
        }

        let server = Server::start(&a.testkit, dir.path(), "ours");
        let mut config = kube::Config::new(server.url.parse().expect("url"));
        config.default_namespace = "default".into();
        let client = kube::Client::try_from(config).expect("client");
        reset_peak();
        let cold = fleet_sync(&client, n, &[]).await;
        let cold_rss = peak_mib();
        let s = stats(&http, &server.url).await;
        let ratio = ceiling.map(|c| (objects as f64 / cold.seconds) / c);
        case(json!({"case": "stacksync fleet cold sync", "clusters": n, "objects": objects, "seconds": cold.seconds,
            "objects_per_s": objects as f64 / cold.seconds, "requests": sum(&s["requests"], None), "writes": sum(&s["writes"], None),
            "peak_rss_mib": cold_rss, "not_synced": cold.not_synced, "of_ceiling": ratio, "unit": "s",
            "note": format!("{:.0} MiB peak RSS, {} requests, {:.2} of ceiling", cold_rss, sum(&s["requests"], None), ratio.unwrap_or(0.0))}));
        http.delete(format!("{}/_testkit/stats", server.url)).send().await.expect("reset stats");
        reset_peak();
        let noop = fleet_sync(&client, n, &cold.inventories).await;
        let noop_rss = peak_mib();
        let s = stats(&http, &server.url).await;
        let requests = sum(&s["requests"], None);
        case(json!({"case": "stacksync fleet no-op resync", "clusters": n, "objects": objects, "seconds": noop.seconds,
            "objects_per_s": objects as f64 / noop.seconds, "requests": requests, "lists": sum(&s["requests"], Some("list")),
            "gets": sum(&s["requests"], Some("get")), "patches": sum(&s["requests"], Some("patch")), "writes": sum(&s["writes"], None),
            "requests_per_cluster_kind": requests as f64 / (n as f64 * 2.0), "peak_rss_mib": noop_rss, "not_synced": noop.not_synced, "unit": "s",
            "note": format!("{requests} requests ({} writes), {:.0} MiB peak RSS, server {:.0} MiB", sum(&s["writes"], None), noop_rss, server.rss_mib())}));
        drop(server);

        if let Some(k) = a.kubectl.as_ref().filter(|_| n <= a.kubectl_max) {
            let server = Server::start(&a.testkit, dir.path(), "kubectl");
            let file = dir.path().join(format!("fleet-{n}.yaml"));
            let mut w = std::io::BufWriter::new(std::fs::File::create(&file).expect("yaml"));
            (0..n).for_each(|i| cluster_yaml(i, &mut w));
            drop(w);
            let cold_k = kubectl_apply(k, &server, &file, dir.path());
            case(json!({"case": "kubectl apply --server-side, cold", "clusters": n, "objects": objects, "seconds": cold_k,
                "objects_per_s": objects as f64 / cold_k, "unit": "s", "ours": cold.seconds, "ratio": cold.seconds / cold_k,
                "note": format!("ratio stacksync/kubectl {:.2}", cold.seconds / cold_k)}));
            let noop_k = kubectl_apply(k, &server, &file, dir.path());
            case(json!({"case": "kubectl apply --server-side, again", "clusters": n, "objects": objects, "seconds": noop_k,
                "objects_per_s": objects as f64 / noop_k, "unit": "s", "ours": noop.seconds, "ratio": noop.seconds / noop_k,
                "note": format!("ratio stacksync/kubectl {:.2}", noop.seconds / noop_k)}));
        }
    }
    if let Some(parent) = a.out.parent() {
        std::fs::create_dir_all(parent).expect("out dir");
    }
    let doc = json!({"environment": env, "cases": cases});
    std::fs::write(&a.out, serde_json::to_string_pretty(&doc).expect("json")).expect("results");
    println!("results: {}", a.out.display());
}
