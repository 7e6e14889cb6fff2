//! The admin listener of the real binary: a signed GitHub push of a new tag is applied within
//! seconds while the poll interval is an hour; a bad signature, an oversized body and a replayed
//! delivery trigger nothing (the Git daemon's connection counter shows no fetch); `/metrics` is
//! Prometheus text with the documented series; `/readyz` is 503 until every source was polled.

mod common;

use std::time::{Duration, Instant};

use common::Daemon;
use common::fleet::{Env, NS, SECRET, TOKEN, cm};
use kube::api::Api;
use serde_json::json;

/// A push of `tag`, shaped like GitHub's (trimmed to what is read), for the repository whose
/// clone URL is `url`.
fn push_payload(url: &str, tag: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "ref": format!("refs/tags/{tag}"),
        "created": true, "deleted": false, "forced": false,
        "repository": {"full_name": "example/stacks", "clone_url": url, "html_url": url},
        "pusher": {"name": "octocat"},
    }))
    .expect("json")
}

/// Quiet period that a triggered poll would certainly have used to connect.
const NO_FETCH_WITHIN: Duration = Duration::from_millis(700);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_push_is_applied_within_seconds_and_forged_oversized_or_replayed_deliveries_trigger_nothing() {
    let env = Env::served().await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    env.add_synced_cluster("alpha", 0).await;
    let url = env.repo_url();
    let daemon = Daemon::start(&env.webhooks_config().write(), env.dir.path().join("daemon.log")).await;
    assert_eq!(daemon.get("/healthz").await.0, 200);
    daemon.eventually("v1.0.0 applied", Duration::from_secs(20), async || env.applied("alpha").await == "v1.0.0").await;
    daemon.eventually("ready", Duration::from_secs(30), async || daemon.get("/readyz").await.0 == 200).await;

    // A new tag; the poll interval is an hour, so only a delivery can bring it.
    env.repo.release("v1.1.0", &[("manifests/cm.yaml", &cm("1.1.0"))]);
    let fetches = env.git_daemon().connections();
    let body = push_payload(&url, "v1.1.0");
    let (status, text) = daemon.github("push", "d-forged", &body, "not the secret").await;
    assert_eq!(status, 401, "{text}");
    let mut unsigned = daemon.post("/hooks/github", &[("x-github-event", "push".into())], body.clone()).await;
    assert_eq!(unsigned.0, 401, "{}", unsigned.1);
    let big = vec![b' '; 1024 * 1024 + 1];
    let (status, _) = daemon.github("push", "d-big", &big, SECRET).await;
    assert_eq!(status, 413);
    let (status, _) = daemon.github("push", &"d".repeat(200), &body, SECRET).await;
    assert_eq!(status, 400, "a delivery id too long to remember");
    unsigned = daemon.post("/hooks/generic/stacks", &[("authorization", "Bearer wrong".into())], Vec::new()).await;
    assert_eq!(unsigned.0, 401, "{}", unsigned.1);
    tokio::time::sleep(NO_FETCH_WITHIN).await;
    assert_eq!(env.git_daemon().connections(), fetches, "a refused delivery made a fetch");

    let sent = Instant::now();
    let (status, text) = daemon.github("push", "d-1", &body, SECRET).await;
    assert_eq!(status, 202, "{text}");
    assert!(text.contains("polling stacks"), "{text}");
    daemon.eventually("v1.1.0 applied after the push", Duration::from_secs(20), async || env.applied("alpha").await == "v1.1.0").await;
    eprintln!("push to applied: {:?}", sent.elapsed());

    // The same delivery again: nothing.
    let fetches = env.git_daemon().connections();
    let (status, text) = daemon.github("push", "d-1", &body, SECRET).await;
    assert_eq!((status, text.trim()), (200, "delivery already handled"));
    // Events that announce nothing, and repositories nobody follows.
    let (status, _) = daemon.github("ping", "d-ping", br#"{"zen":"Design for failure."}"#, SECRET).await;
    assert_eq!(status, 200);
    let (status, _) = daemon.github("issues", "d-issue", br#"{"action":"opened"}"#, SECRET).await;
    assert_eq!(status, 202);
    let other = push_payload("https://github.com/example/elsewhere.git", "v9");
    let (status, text) = daemon.github("push", "d-other", &other, SECRET).await;
    assert_eq!((status, text.contains("no source follows")), (202, true), "{text}");
    tokio::time::sleep(NO_FETCH_WITHIN).await;
    assert_eq!(env.git_daemon().connections(), fetches, "a replayed or unmatched delivery made a fetch");

    // The generic hook, for any Git server.
    env.repo.release("v1.2.0", &[("manifests/cm.yaml", &cm("1.2.0"))]);
    let (status, text) = daemon.post("/hooks/generic/stacks", &[("authorization", format!("Bearer {TOKEN}"))], Vec::new()).await;
    assert_eq!(status, 202, "{text}");
    daemon
        .eventually("v1.2.0 applied after the generic hook", Duration::from_secs(20), async || env.applied("alpha").await == "v1.2.0")
        .await;
    let (status, _) = daemon.post("/hooks/generic/nosuch", &[("authorization", format!("Bearer {TOKEN}"))], Vec::new()).await;
    assert_eq!(status, 404);

    // `kubectl describe clustersync alpha` has events: the applies, folded into one series.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.mgmt.client().expect("client"), NS);
    let applied: Vec<_> = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Applied") && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ClusterSync"))
        .collect();
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(applied[0].reporting_controller.as_deref(), Some("stacksync.io/stacksync"));
    assert!(applied[0].regarding.as_ref().and_then(|r| r.uid.as_ref()).is_some(), "{applied:?}");
    assert!(applied[0].series.as_ref().is_some_and(|s| s.count >= 2), "{applied:?}");

    // The metrics of a reconcile are recorded once it returns, a moment after its status write.
    let (status, _) = daemon.get("/metrics").await;
    assert_eq!(status, 200);
    let want = "stacksync_objects_total{subscription=\"ferrol\",action=\"configured\"} 2";
    daemon
        .eventually("the second reconcile's metrics", Duration::from_secs(20), async || daemon.get("/metrics").await.1.contains(want))
        .await;
    let (_, metrics) = daemon.get("/metrics").await;
    check_exposition(&metrics);
    for series in [
        "stacksync_reconciles_total{subscription=\"ferrol\",result=\"ready\",reason=\"Synced\"}",
        "stacksync_reconcile_duration_seconds_count{subscription=\"ferrol\"}",
        "stacksync_objects_total{subscription=\"ferrol\",action=\"created\"} 1",
        "stacksync_objects_total{subscription=\"ferrol\",action=\"configured\"} 2",
        "stacksync_source_polls_total{source=\"stacks\",result=\"success\"} 3",
        "stacksync_source_last_success_timestamp_seconds{source=\"stacks\"}",
        "stacksync_clusters{subscription=\"ferrol\",ready=\"true\"} 1",
        "stacksync_webhook_deliveries_total{hook=\"github\",event=\"push\",result=\"triggered\"} 1",
        "stacksync_webhook_deliveries_total{hook=\"github\",event=\"push\",result=\"replayed\"} 1",
        "stacksync_webhook_deliveries_total{hook=\"github\",event=\"other\",result=\"unauthorized\"} 2",
        "stacksync_webhook_deliveries_total{hook=\"github\",event=\"other\",result=\"too_large\"} 1",
        "stacksync_webhook_deliveries_total{hook=\"generic\",event=\"push\",result=\"triggered\"} 1",
        "stacksync_leader 1",
    ] {
        assert!(metrics.contains(series), "missing {series} in\n{metrics}");
    }
    daemon.stop().await;
}

/// Every line is a comment (`# TYPE`, `# HELP`, `# UNIT`, `# EOF`) or `name{labels} value`
/// with a float value: what Prometheus's text parser needs.
fn check_exposition(text: &str) {
    assert!(text.ends_with("# EOF\n"), "no # EOF terminator");
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(["# TYPE ", "# HELP ", "# UNIT ", "# EOF"].iter().any(|p| line.starts_with(p)), "bad comment: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        assert!(value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value), "bad value in {line}");
        let name = series.split('{').next().unwrap_or_default();
        assert!(name.starts_with("stacksync_") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad name in {line}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "bad labels in {line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_every_source_was_polled() {
    let env = Env::served().await;
    // A Git server that accepts and never answers: the first poll does not finish.
    let (addr, hole) = common::black_hole().await;
    let url = format!("git://{addr}/stacks.git");
    let config = env.webhooks_config().source_set("stacks", "url", url).write();
    let daemon = Daemon::start(&config, env.dir.path().join("daemon.log")).await;
    daemon.eventually("alive", Duration::from_secs(30), async || daemon.get("/healthz").await.0 == 200).await;
    let (status, text) = daemon.get("/readyz").await;
    assert_eq!((status, text.trim()), (503, "sources not polled yet: stacks"));
    let (status, _) = daemon.get("/nosuch").await;
    assert_eq!(status, 404);
    daemon.stop().await;
    hole.abort();
}

/// Push-to-applied latency over 50 signed pushes on loopback (a benchmark, not a test):
/// `cargo nextest run --test admin --run-ignored only -E 'test(latency)' --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints p50/p99 of push-to-applied latency"]
async fn push_to_applied_latency() {
    let env = Env::served().await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", &cm("1.0.0"))]);
    env.add_synced_cluster("alpha", 0).await;
    let url = env.repo_url();
    let daemon = Daemon::start(&env.webhooks_config().write(), env.dir.path().join("daemon.log")).await;
    daemon.eventually("v1.0.0 applied", Duration::from_secs(20), async || env.applied("alpha").await == "v1.0.0").await;
    let mut took = Vec::new();
    for i in 1..=50 {
        let tag = format!("v1.{i}.0");
        env.repo.release(&tag, &[("manifests/cm.yaml", &cm(&tag))]);
        let sent = Instant::now();
        let (status, _) = daemon.github("push", &format!("d-{i}"), &push_payload(&url, &tag), SECRET).await;
        assert_eq!(status, 202);
        daemon.eventually(&tag, Duration::from_secs(10), async || env.applied("alpha").await == tag).await;
        took.push(sent.elapsed());
    }
    took.sort();
    let p = |q: f64| took[((took.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!("push-to-applied over {} pushes: p50 {:?}, p99 {:?}, max {:?}", took.len(), p(0.50), p(0.99), took[took.len() - 1]);
    daemon.stop().await;
    // scripts/bench.sh sets BENCH_OUT: the numbers join the other benchmarks' results. No peer:
    // without the webhook only the next poll (an hour apart here) would bring the tag.
    if let Some(out) = std::env::var_os("BENCH_OUT") {
        let mut doc: serde_json::Value = std::fs::read_to_string(&out)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| serde_json::json!({"cases": []}));
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        for (q, name) in [(0.50, "p50"), (0.99, "p99")] {
            let ours = p(q).as_secs_f64() * 1e3;
            let case = serde_json::json!({"bench": "latency", "case": format!("webhook push-to-applied {name}"), "ours": ours,
                "peer": null, "peer_name": null, "ratio": null, "unit": "ms", "pushes": took.len(),
                "environment": {"nproc": nproc, "loadavg": load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
                    "versions": {"stacksync": env!("CARGO_PKG_VERSION"), "git": "git daemon (testkit)"}}});
            if let Some(cases) = doc["cases"].as_array_mut() {
                cases.push(case);
            }
        }
        std::fs::write(&out, serde_json::to_string_pretty(&doc).expect("json")).expect("results");
    }
}
