//! What every benchmark writes: cases of `target/bench/results.json` (or `--out` / `BENCH_OUT`),
//! each with `ours`, `peer`, `ratio` (ours ÷ peer), `unit` and the environment it ran in (cores,
//! load average at the time, tool versions), so one file holds a whole `scripts/bench.sh` run.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// Where results go: `BENCH_OUT`, else `target/bench/results.json`.
pub fn out_path() -> PathBuf {
    std::env::var_os("BENCH_OUT").map_or_else(|| PathBuf::from("target/bench/results.json"), PathBuf::from)
}

fn first_line(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = if out.stdout.is_empty() { out.stderr } else { out.stdout };
    String::from_utf8_lossy(&text).lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
}

fn proc_kib(file: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0.0)
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The machine and the versions of the peers found (`tools`: name and path of each).
pub fn machine(tools: &[(&str, &Path)]) -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let mem = proc_kib("/proc/meminfo", "MemTotal:") / 1024.0 / 1024.0;
    let mut versions = serde_json::Map::new();
    versions.insert("stacksync".into(), json!(env!("CARGO_PKG_VERSION")));
    for (name, path) in tools {
        let args: &[&str] = match *name {
            "kubectl" => &["version", "--client"],
            "helm" => &["version", "--short"],
            "wrk" => &["-v"],
            _ => &["--version"],
        };
        if let Some(v) = first_line(path, args) {
            versions.insert((*name).into(), json!(v));
        }
    }
    json!({
        "cpu": cpu,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "memory_gib": (mem * 10.0).round() / 10.0,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "versions": versions,
    })
}

/// One case: `ours` against `peer` in `unit`; `extra` fields are merged in. The environment is
/// the machine's plus the load average now.
pub fn case(name: &str, ours: f64, peer: Option<(f64, &str)>, unit: &str, machine: &Value, extra: Value) -> Value {
    let mut env = machine.clone();
    env["loadavg"] = json!(loadavg());
    let mut v = json!({
        "case": name,
        "ours": ours,
        "peer": peer.map(|p| p.0),
        "peer_name": peer.map(|p| p.1),
        "ratio": peer.map(|p| ours / p.0),
        "unit": unit,
        "environment": env,
    });
    if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
        v.extend(extra);
    }
    v
}

/// Appends `cases` to the results file (`fresh`: starts it anew).
pub fn write(out: &Path, cases: &[Value], fresh: bool) {
    let mut doc: Value = if fresh {
        json!({"cases": []})
    } else {
        std::fs::read_to_string(out).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_else(|| json!({"cases": []}))
    };
    if let Some(list) = doc["cases"].as_array_mut() {
        list.extend(cases.iter().cloned());
    }
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).expect("results dir");
    }
    std::fs::write(out, serde_json::to_string_pretty(&doc).expect("json")).expect("results");
}
