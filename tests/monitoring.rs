//! deploy/components/monitoring against the real Prometheus (Debian's `prometheus` package, which
//! scripts/test.sh installs): the PrometheusRule passes `promtool check rules` and the unit tests
//! of tests/monitoring/alerts.test.yaml (every alert fires in one test and stays quiet in
//! another; every runbook link names a heading of docs/operations.md), and a Prometheus server
//! scraping the real binary — a cluster-stack fleet with a paused rollout, a Cluster without its
//! kubeconfig, a forged webhook delivery — evaluates every query of the fleet dashboard, and
//! loads the rules, three of which then go off.
//!
//! `STACKSYNC_DASHBOARD_PNG=<file>` also draws the dashboard's panels from that Prometheus into
//! `<file>` with scripts/dashboard-png.py (matplotlib), after `STACKSYNC_DASHBOARD_SECONDS` (default
//! 0) more seconds of activity: that is how docs/operations.md's picture is made.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Daemon;
use common::fleet::{Env, SECRET, STACK, publish_v3_on};
use serde_json::{Value, json};

const PROMTOOL: &str = "/usr/bin/promtool";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// The Prometheus tools come from Debian's package; a bare `cargo test` elsewhere skips.
fn have(program: &str) -> bool {
    let found = Path::new(program).exists();
    assert!(
        found || std::env::var_os("CI").is_none(),
        "{program} is not installed; under CI scripts/test.sh must install it (Debian's prometheus)"
    );
    if !found {
        eprintln!("SKIP: {program} is not installed (scripts/test.sh installs Debian's prometheus)");
    }
    found
}

fn component() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/components/monitoring")
}

fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("read")).expect("YAML")
}

/// The PrometheusRule's groups as a plain rules file (JSON is YAML) in `dir`.
fn write_rules(dir: &Path) -> PathBuf {
    let rule = yaml(&component().join("prometheusrule.yaml"));
    assert_eq!((rule["apiVersion"].as_str(), rule["kind"].as_str()), (Some("monitoring.coreos.com/v1"), Some("PrometheusRule")));
    let path = dir.join("stacksync-rules.yaml");
    std::fs::write(&path, serde_json::json!({"groups": rule["spec"]["groups"]}).to_string()).expect("rules");
    path
}

fn alerts() -> Vec<Value> {
    let rule = yaml(&component().join("prometheusrule.yaml"));
    rule["spec"]["groups"].as_array().expect("groups").iter().flat_map(|g| g["rules"].as_array().expect("rules").clone()).collect()
}

fn run(program: &str, args: &[&str], dir: &Path) -> String {
    let out = std::process::Command::new(program).args(args).current_dir(dir).output().expect("run");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{program} {args:?}:\n{text}");
    text
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_severity_annotations_and_a_runbook_section() {
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md")).expect("docs");
    let anchors: BTreeSet<String> = docs.lines().filter_map(|l| l.strip_prefix('#')).map(|h| anchor(h.trim_start_matches('#'))).collect();
    let alerts = alerts();
    assert!(alerts.len() >= 12, "{alerts:?}");
    for a in &alerts {
        let name = a["alert"].as_str().expect("alert name");
        assert!(["critical", "warning", "info"].contains(&a["labels"]["severity"].as_str().unwrap_or_default()), "{name}: severity");
        for key in ["summary", "description"] {
            assert!(a["annotations"][key].as_str().is_some_and(|s| !s.is_empty()), "{name}: no {key}");
        }
        let url = a["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let (file, section) = url.split_once('#').unwrap_or_else(|| panic!("{name}: runbook_url {url:?} has no #section"));
        assert_eq!(file, "docs/operations.md", "{name}");
        assert_eq!(section, name.to_lowercase(), "{name}: the section is named after the alert");
        assert!(anchors.contains(section), "{name}: docs/operations.md has no heading for #{section}");
    }
}

#[test]
fn the_rules_pass_promtool_and_every_alert_fires_in_one_test_and_stays_quiet_in_another() {
    if !have(PROMTOOL) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    write_rules(dir.path());
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/monitoring/alerts.test.yaml");
    std::fs::copy(&tests, dir.path().join("alerts.test.yaml")).expect("copy");
    let checked = run(PROMTOOL, &["check", "rules", "stacksync-rules.yaml"], dir.path());
    assert!(checked.contains(&format!("SUCCESS: {} rules found", alerts().len())), "{checked}");
    let tested = run(PROMTOOL, &["test", "rules", "alerts.test.yaml"], dir.path());
    assert!(tested.contains("SUCCESS"), "{tested}");

    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for t in yaml(&tests)["tests"].as_array().expect("tests") {
        for a in t["alert_rule_test"].as_array().expect("alert_rule_test") {
            let name = a["alertname"].as_str().expect("alertname").to_owned();
            let n = a["exp_alerts"].as_array().map_or(0, Vec::len);
            let set = if n > 0 { &mut fires } else { &mut quiet };
            set.insert(name);
        }
    }
    for a in alerts() {
        let name = a["alert"].as_str().expect("name");
        assert!(fires.contains(name), "no test where {name} fires");
        assert!(quiet.contains(name), "no test where {name} stays quiet");
    }
}

/// Debian's Prometheus server on a free loopback port, its storage in a temp dir; killed when
/// dropped.
struct Prometheus {
    _child: tokio::process::Child,
    base: String,
    log: PathBuf,
}

impl Prometheus {
    /// Scrapes `target` (host:port) every 2 s, with 2 s to answer (a busy machine must not
    /// read as `up == 0`), as job `stacksync` with the labels a ServiceMonitor adds, and
    /// evaluates the rules in `rules` every second.
    async fn start(dir: &Path, target: &str, rules: &Path) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 1s\nrule_files: ['{}']\nscrape_configs:\n  - job_name: stacksync\n    static_configs:\n      - targets: ['{target}']\n        labels: {{namespace: stacksync-system, pod: stacksync-0}}\n",
                rules.display()
            ),
        )
        .expect("config");
        // Prometheus takes a port, not 0: ask the kernel for a free one and hand it over.
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let log = dir.join("prometheus.log");
        let child = tokio::process::Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus");
        let p = Prometheus { _child: child, base: format!("http://127.0.0.1:{port}"), log };
        p.eventually("Prometheus ready", Duration::from_secs(30), async || {
            reqwest::get(format!("{}/-/ready", p.base)).await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        p
    }

    async fn eventually(&self, what: &str, within: Duration, cond: impl AsyncFnMut() -> bool) {
        common::eventually(what, within, cond, || format!("Prometheus log:\n{}", std::fs::read_to_string(&self.log).unwrap_or_default()))
            .await;
    }

    /// `GET /api/v1/<path>`; the `data` of a successful answer, or the error it reported.
    async fn api(&self, path: &str) -> Result<Value, String> {
        let r = reqwest::get(format!("{}/api/v1/{path}", self.base)).await.map_err(|e| e.to_string())?;
        let body: Value = r.json().await.map_err(|e| e.to_string())?;
        match body["status"].as_str() {
            Some("success") => Ok(body["data"].clone()),
            _ => Err(format!("{}: {}", body["errorType"], body["error"])),
        }
    }

    /// The series an instant query returns.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("query?query={}", encode(expr))).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A panel query as Grafana would send it: the variables replaced (`$namespace` and
/// `$subscription` by `values`), the interval macros by durations that fit a 1 s scrape.
fn substitute(expr: &str, values: (&str, &str)) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "5s")
        .replace("$__range", "5m")
        .replace("$namespace", values.0)
        .replace("$subscription", values.1)
}

/// Panels whose series this fleet cannot have: no GitHub source, no runtime hook listener.
const MAY_BE_EMPTY: [&str; 2] = ["GitHub API quota left", "Runtime hook calls"];

/// The fleet dashboard's queries: (panel title, refId, expr).
fn dashboard_queries() -> Vec<(String, String, String)> {
    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(component().join("stacksync-fleet.json")).expect("dashboard")).expect("JSON");
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            out.push((title, t["refId"].as_str().unwrap_or_default().to_owned(), t["expr"].as_str().expect("expr").to_owned()));
        }
    }
    out
}

async fn scrape(base: &str) -> String {
    reqwest::get(format!("{base}/metrics")).await.expect("GET /metrics").text().await.expect("body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_evaluates_on_prometheus_scraping_stacksync() {
    if !have(PROMETHEUS) {
        return;
    }
    let env = Env::new(4).await;
    let client = reqwest::Client::new();
    publish_v3_on(&env.repo, "v3", "v1.27.3", &[]);
    let secret = env.dir.path().join("github-secret");
    std::fs::write(&secret, SECRET).expect("secret");
    let rollout = json!({"waves": [{"clusters": 1}, {"percent": 100}], "waveTimeout": "2s", "checkInterval": "250ms"});
    let config = env
        .stack_config(|s| s.interval("1s").set("availableReleases", 2).set("rollout", rollout))
        .set("webhooks", json!({"github": {"secretFile": secret}}))
        .write();
    let daemon = Daemon::start_with(&config, env.dir.path().join("daemon.log"), &["--leader-elect"]).await;
    let base = daemon.admin_url().to_owned();
    let addr = base.trim_start_matches("http://").to_owned();
    // Prometheus scrapes from the start, before there are Clusters: the fleet's first sync is in
    // its data (and the picture).
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = write_rules(dir.path());
    let prometheus = Prometheus::start(dir.path(), &addr, &rules).await;
    prometheus
        .eventually("a scrape of stacksync", Duration::from_secs(30), async || {
            prometheus.query("up{job=\"stacksync\"} == 1").await.is_ok_and(|r| !r.is_empty())
        })
        .await;
    // Three Clusters on v3 with their workload clusters, and one whose kubeconfig does not come
    // (its workload cluster is the fourth: only the picture's run gives it, half-way).
    for i in 0..3 {
        let name = format!("c{i:02}");
        env.add_cluster(&name, &format!("{STACK}-v3"), true).await;
        env.add_kubeconfig(&name, i).await;
    }
    env.add_cluster("lost", &format!("{STACK}-v3"), true).await;
    daemon
        .eventually("the fleet on v3", Duration::from_secs(60), async || {
            let mut ready = 0;
            for i in 0..3 {
                ready += usize::from(env.ready_reason(&format!("c{i:02}")).await.is_some_and(|(s, _)| s == "True"));
            }
            ready == 3
        })
        .await;

    // v4: the rollout moves one Cluster, which Cluster API (not played here) never upgrades, so
    // the wave times out and the rollout pauses.
    publish_v3_on(&env.repo, "v4", "v1.27.5", &[]);
    daemon
        .eventually("the rollout paused", Duration::from_secs(60), async || {
            scrape(&base).await.contains("stacksync_rollout_pause_reason{subscription=\"ferrol\",reason=\"WaveTimeout\"} 1")
        })
        .await;
    // Enough scrapes for a rate over a minute: five, after the target is up.
    prometheus
        .eventually("five scrapes of stacksync", Duration::from_secs(60), async || {
            prometheus
                .query("count_over_time(up{job=\"stacksync\"}[1m])")
                .await
                .is_ok_and(|r| r.first().and_then(|s| s["value"][1].as_str()).and_then(|v| v.parse::<f64>().ok()).is_some_and(|n| n >= 5.0))
        })
        .await;
    let up = prometheus.query("up{job=\"stacksync\"}").await.expect("up");
    assert_eq!(up.first().map(|s| s["value"][1].clone()), Some(Value::from("1")), "{up:?}");
    // A forged delivery and a signed ping, once Prometheus has seen the counters at 0.
    for (secret, delivery) in [("not the secret", "d-forged"), (SECRET, "d-ping")] {
        let body = br#"{"zen":"Keep it logically awesome."}"#;
        let r = client
            .post(format!("{base}/hooks/github"))
            .header("x-github-event", "ping")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", common::daemon::sign(secret, body))
            .body(body.to_vec())
            .send()
            .await
            .expect("POST");
        assert!(r.status().is_client_error() == (delivery == "d-forged"), "{delivery}: {}", r.status());
    }

    prometheus
        .eventually("the deliveries scraped", Duration::from_secs(30), async || {
            prometheus
                .query("stacksync_webhook_deliveries_total{result=\"unauthorized\",hook=\"github\"} > 0")
                .await
                .is_ok_and(|r| !r.is_empty())
        })
        .await;

    // The template variables' values, as Grafana asks for them.
    let namespaces = prometheus.api("label/namespace/values?match[]=stacksync_leader").await.expect("namespaces");
    assert_eq!(namespaces, serde_json::json!(["stacksync-system"]));
    let subscriptions = prometheus
        .api(&format!("label/subscription/values?match[]={}", encode("stacksync_reconcile_duration_seconds_count{namespace=~\".*\"}")))
        .await
        .expect("subscriptions");
    assert_eq!(subscriptions, serde_json::json!(["ferrol"]));

    let queries = dashboard_queries();
    assert!(queries.len() >= 25, "{queries:?}");
    let mut failures = Vec::new();
    for values in [(".*", ".*"), ("stacksync-system", "ferrol")] {
        for (title, ref_id, expr) in &queries {
            let q = substitute(expr, values);
            assert!(!q.contains('$'), "{title}/{ref_id}: a variable is left in {q}");
            match prometheus.query(&q).await {
                Err(e) => failures.push(format!("{title}/{ref_id} {values:?}: {e}\n    {q}")),
                Ok(series) if series.is_empty() && !MAY_BE_EMPTY.contains(&title.as_str()) => {
                    failures.push(format!("{title}/{ref_id} {values:?}: no series\n    {q}"));
                }
                Ok(_) => {}
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} dashboard queries failed:\n{}\n/metrics:\n{}",
        failures.len(),
        failures.join("\n"),
        scrape(&base).await
    );

    // The rules load, and those this fleet breaks go off (pending while their `for` runs).
    let groups = prometheus.api("rules").await.expect("rules");
    let rules: Vec<&Value> =
        groups["groups"].as_array().expect("groups").iter().flat_map(|g| g["rules"].as_array().expect("rules")).collect();
    assert_eq!(rules.len(), alerts().len());
    assert!(rules.iter().all(|r| r["health"] == "ok"), "{rules:?}");
    let expected = ["StacksyncClustersNotReady", "StacksyncRolloutWaveTimedOut", "StacksyncWebhookRefused"];
    let mut active = BTreeSet::new();
    prometheus
        .eventually(&format!("the alerts {expected:?} active"), Duration::from_secs(30), async || {
            let data = prometheus.api("alerts").await.expect("alerts");
            let names = data["alerts"].as_array().into_iter().flatten().filter_map(|a| a["labels"]["alertname"].as_str());
            active = names.map(str::to_owned).collect();
            expected.iter().all(|a| active.contains(*a))
        })
        .await;
    for quiet in ["StacksyncNoLeader", "StacksyncMultipleLeaders", "StacksyncDown", "StacksyncSourceNotPolled"] {
        assert!(!active.contains(quiet), "{quiet} is active: {active:?}");
    }

    if let Some(png) = std::env::var_os("STACKSYNC_DASHBOARD_PNG") {
        let seconds: u64 = std::env::var("STACKSYNC_DASHBOARD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        let (begin, until) = (Instant::now(), Instant::now() + Duration::from_secs(seconds));
        // Some traffic while the picture's time range fills: a signed ping now and then, and the
        // lost Cluster's kubeconfig half-way.
        let (mut n, mut found) = (0, false);
        while Instant::now() < until {
            if !found && begin.elapsed() > Duration::from_secs(seconds / 2) {
                env.add_kubeconfig("lost", 3).await;
                found = true;
            }
            n += 1;
            let body = br#"{"zen":"Half measures are as bad as nothing at all."}"#;
            let _ = client
                .post(format!("{base}/hooks/github"))
                .header("x-github-event", "ping")
                .header("x-github-delivery", format!("d-{n}"))
                .header("x-hub-signature-256", common::daemon::sign(SECRET, body))
                .body(body.to_vec())
                .send()
                .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dashboard-png.py");
        let out = tokio::process::Command::new("python3")
            .arg(&script)
            .arg("--prometheus")
            .arg(&prometheus.base)
            .arg("--dashboard")
            .arg(component().join("stacksync-fleet.json"))
            .arg("--out")
            .arg(&png)
            .output()
            .await
            .expect("python3");
        assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    drop(prometheus);
    daemon.stop().await;
}
