//! `stacksync console` in a real browser: Debian's headless chromium, driven over the DevTools
//! protocol on a pipe (`--remote-debugging-pipe`: no port, no websocket; `console/browser.rs`).
//! `console/rollout.rs` follows a rollout the daemon drives on the real Cluster API (two waves
//! across a Kubernetes minor, one Cluster failing within `maxFailures`, one waiting for its
//! maintenance window) and takes the rollout screenshots. The tests here point the console at a
//! real control plane (`testkit kube`, with an audit log) holding Cluster API Clusters and the
//! status resources of such a rollout created directly with the CRDs, carrying hostile strings.
//! What the pages show is read from the DOM; a status change must show within 2 s without a
//! reload; hostile strings must show as text with nothing executed; every request the page makes
//! stays on loopback; the console's own requests (by its User-Agent in the audit log) are reads
//! only. The runs take the screenshots of docs/console.md (into docs/console/ when
//! `STACKSYNC_CONSOLE_SHOTS=docs`).

#[path = "console/browser.rs"]
mod browser;
mod common;
#[path = "console/rollout.rs"]
mod rollout;

use std::path::{Path, PathBuf};
use std::time::Duration;

use browser::{Browser, STEP, axe_core, console, shots_dir};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "fleet";
const OLD: &str = "docker-ferrol-1-33-v3";
const MID: &str = "docker-ferrol-1-34-v2";
const TARGET: &str = "docker-ferrol-1-35-v1";
const RELEASE: &str = "ferrol.docker-ferrol-1-35-v1";
/// In messages, a class and an Event: each must show as these very characters.
const HOSTILE: &str = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>\"'&";

fn api(client: &kube::Client, group: &str, version: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = common::res(group, version, kind);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn apply(api: &Api<DynamicObject>, name: &str, body: Value) {
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&body)).await.unwrap_or_else(|e| panic!("{name}: {e}"));
}

async fn apply_status(api: &Api<DynamicObject>, name: &str, body: Value) {
    api.patch_status(name, &PatchParams::apply("test").force(), &Patch::Apply(&body))
        .await
        .unwrap_or_else(|e| panic!("{name} status: {e}"));
}

fn t(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": "2026-11-23T09:00:00Z"})
}

/// A ClusterSync's status: Ready (or why not), on `applied`.
fn sync_status(applied: &str, ready: Option<(&str, &str)>) -> Value {
    let conditions = match ready {
        None => vec![t("Ready", "True", "Synced", ""), t("Reconciling", "False", "Synced", ""), t("Stalled", "False", "Synced", "")],
        Some(("Progressing", message)) => {
            vec![t("Ready", "False", "Progressing", message), t("Reconciling", "True", "Progressing", message)]
        }
        Some((reason, message)) => vec![t("Ready", "False", reason, message), t("Stalled", "True", reason, message)],
    };
    json!({"synced": 5, "total": 5, "objects": "5/5", "conditions": conditions,
        "message": ready.map(|(_, m)| m).unwrap_or_default(),
        "appliedRelease": {"tag": applied, "version": "v1", "commit": "abc"},
        "wantedRelease": {"tag": applied, "version": "v1", "commit": "abc"},
        "lastSyncTime": "2026-11-23T09:00:00Z",
        "inventory": ["apps|Deployment|kube-system|metrics-server|v1", "|ConfigMap|kube-system|cni-config|v1"],
        "entries": []})
}

/// One Cluster of the fleet: name, class now, version, release applied, Ready (`None`) or why not.
type Member = (&'static str, &'static str, &'static str, &'static str, Option<(&'static str, &'static str)>);

/// The fleet of the rollout, as the daemon would have written it mid-way through wave 2.
async fn fleet(client: &kube::Client) {
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let body: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns");
    ns.create(&PostParams::default(), &body).await.expect("namespace");
    let clusters = api(client, "cluster.x-k8s.io", "v1beta1", "Cluster", Some(NS));
    let syncs = api(client, "stacksync.io", "v1alpha1", "ClusterSync", Some(NS));
    let fleet: [Member; 6] = [
        ("c01", TARGET, "v1.35.4", TARGET, None),
        ("c02", TARGET, "v1.35.4", TARGET, None),
        ("c03", MID, "v1.34.3", MID, Some(("Progressing", "upgrade stage 1/2 `cni` PostCondition: waiting"))),
        ("c04", OLD, "v1.33.5", OLD, None),
        ("c05", TARGET, "v1.35.4", OLD, Some(("UpgradeFailed", "upgrade stage 2/2 `cni` PostCondition not done within stageTimeout 10m"))),
        ("hostile", OLD, "v1.33.5", OLD, Some(("RenderFailed", HOSTILE))),
    ];
    for (name, class, version, applied, ready) in fleet {
        let labels = if name == "c04" { json!({"zone": "eu"}) } else { json!({"zone": "us"}) };
        apply(
            &clusters,
            name,
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"topology": {"class": class, "version": version}}}),
        )
        .await;
        apply(
            &syncs,
            name,
            json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync",
            "metadata": {"name": name, "namespace": NS}, "spec": {"cluster": name, "subscription": "ferrol"}}),
        )
        .await;
        let mut status = sync_status(applied, ready);
        status["class"] = json!(class);
        apply_status(
            &syncs,
            name,
            json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": name}, "status": status}),
        )
        .await;
    }
    let releases = api(client, "stacksync.io", "v1alpha1", "StackRelease", None);
    for tag in [OLD, MID, TARGET] {
        let name = format!("ferrol.{tag}");
        apply(
            &releases,
            &name,
            json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease",
            "metadata": {"name": name}, "spec": {"subscription": "ferrol", "source": "stacks", "tag": tag}}),
        )
        .await;
        let mut status = json!({"version": "v1", "commit": "abc", "verified": true, "verifiedBy": "git+ssh:SHA256:test", "signedBy": "ssh:SHA256:test",
            "cached": true, "phase": "Applied", "synced": 4, "total": 4, "entries": []});
        if tag == TARGET {
            status["rollout"] = json!({
                "phase": "Progressing", "wave": 2, "waves": 2, "waveSummary": "2/2", "done": 2, "total": 5, "summary": "2/5 (1 failed)",
                "reason": "OutsideWindow", "message": "fleet/c04 waits for its maintenance window",
                "started": "2026-11-23T08:00:00Z", "waveStarted": "2026-11-23T08:30:00Z", "nextWindow": "2030-01-01T22:00:00Z",
                "plan": [
                    {"clusters": ["fleet/c01", "fleet/c02"], "phase": "Done", "done": 2,
                     "movedFrom": [{"cluster": "fleet/c01", "class": MID, "version": "v1.34.3"}, {"cluster": "fleet/c02", "class": MID, "version": "v1.34.3"}]},
                    {"clusters": ["fleet/c03", "fleet/c04", "fleet/c05", "fleet/hostile"], "phase": "Progressing", "done": 0,
                     "awaitingWindow": ["fleet/c04"],
                     "movedFrom": [{"cluster": "fleet/c03", "class": OLD, "version": "v1.33.5"}],
                     "paths": [{"cluster": "fleet/c03", "steps": [MID, TARGET]}]}
                ],
                "failed": [{"cluster": "fleet/c05", "wave": 2, "reason": "ClusterFailed", "message": format!("fleet/c05: UpgradeFailed {HOSTILE}"), "outcome": "LeftAlone"}]
            });
        }
        apply_status(
            &releases,
            &name,
            json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": name}, "status": status}),
        )
        .await;
    }
    for (i, (kind, name, reason, message)) in [
        ("StackRelease", RELEASE, "RolloutStarted", "rollout to docker-ferrol-1-35-v1: 2 waves"),
        ("StackRelease", RELEASE, "RolloutClusterFailed", "fleet/c05 failed within maxFailures"),
        ("ClusterSync", "hostile", "RenderFailed", HOSTILE),
    ]
    .into_iter()
    .enumerate()
    {
        // An Event on a cluster-scoped object lives in `default`, as the API server requires.
        let namespace = if kind == "StackRelease" { None } else { Some(NS) };
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace.unwrap_or("default"));
        let e: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
            "metadata": {"name": format!("e{i}"), "namespace": namespace.unwrap_or("default")},
            "involvedObject": {"apiVersion": "stacksync.io/v1alpha1", "kind": kind, "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": if reason.contains("Failed") { "Warning" } else { "Normal" },
            "firstTimestamp": format!("2026-11-23T08:0{i}:00Z"), "lastTimestamp": format!("2026-11-23T08:0{i}:00Z"), "count": 1,
            "source": {"component": "stacksync"}
        }))
        .expect("event");
        events.create(&PostParams::default(), &e).await.expect("create the event");
    }
}

/// The eu Clusters' maintenance window: one hour a day, opening twelve hours after the hour the
/// test starts in, so it is closed while the test runs whatever the time of day (a fixed hour
/// made the page show it open, with no "next opens", when the test ran inside it).
fn window_schedule() -> &'static str {
    use chrono::Timelike as _;
    static SCHEDULE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SCHEDULE.get_or_init(|| format!("0 {} * * *", (chrono::Utc::now().hour() + 12) % 24))
}

fn config(dir: &Path, kubeconfig: &Path) -> PathBuf {
    let rollout = json!({"waves": [{"clusters": 2}, {"percent": 100}], "maxFailures": 1,
        "windows": [{"schedule": window_schedule(), "duration": "1h", "timeZone": "UTC", "clusterSelector": {"matchLabels": {"zone": "eu"}}}]});
    common::Config::new(dir)
        .git("stacks", "file:///nonexistent/stacks")
        .sub(common::Sub::new("ferrol", "stacks").clusterstack("docker-ferrol-1-35").select("stack", "ferrol").set("rollout", rollout))
        .kubernetes(kubeconfig)
        .write()
}

const PREVIEW: &str = r#"{"apiVersion":"stacksync.io/v1alpha1","kind":"FleetPreview","subscription":"ferrol",
  "release":{"tag":"docker-ferrol-1-35-v2","source":"stacks","revision":"sha256:0123","origin":"local","kubernetes":"v1.35.4"},
  "summary":{"clusters":2,"changed":1,"unchanged":1,"unjudged":0,"restarts":1,"kubernetesUpgrades":0},
  "management":[],
  "clusters":[{"cluster":"fleet/c01","result":"changes","applied":"docker-ferrol-1-35-v1",
     "stages":[{"hook":"BeforeClusterUpgrade","name":"cni","action":"apply"}],
     "changes":[{"object":"Deployment/kube-system/metrics-server","apiVersion":"apps/v1","change":"update","fields":[".spec.template.spec.containers[0].image"],"restarts":true}],
     "restarts":["Deployment/kube-system/metrics-server"],"wave":1},
   {"cluster":"fleet/c02","result":"unchanged","changes":[],"wave":2}],
  "waves":[["fleet/c01"],["fleet/c02"]]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_rollout_live_escapes_what_it_shows_and_only_reads() {
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kube = testkit::kube::Kube::start(testkit::kube::Options {
        preload: vec![root.join("testdata/crds"), root.join("deploy/crds")],
        audit: true,
        ..Default::default()
    })
    .await
    .expect("a real control plane");
    let client = kube.client().await.expect("client");
    fleet(&client).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let config = config(tmp.path(), kube.kubeconfig());
    let preview = tmp.path().join("preview.json");
    std::fs::write(&preview, PREVIEW).expect("preview");
    let args = ["--listen", "127.0.0.1:0", "--config", config.to_str().expect("utf-8"), "--preview", preview.to_str().expect("utf-8")];
    let mut running = console(&args).await;
    let base = running.url.clone();
    let shots = shots_dir(tmp.path());
    let mut b = Browser::start().await;
    let axe = axe_core();
    // Serious and critical accessibility violations of every page, light and dark.
    let mut a11y = Vec::new();

    // Fleet: the counts, every Cluster, the hostile strings as text.
    b.goto(&base).await;
    b.until("six Clusters listed", "document.querySelectorAll('#fleet tbody tr').length === 6", STEP).await;
    assert_eq!(b.text("a.tile[data-state=Ready] .n").await, "3");
    assert_eq!(b.text("a.tile[data-state=Failed] .n").await, "2");
    assert_eq!(b.text("a.tile[data-state=Progressing] .n").await, "1");
    assert_eq!(b.text("#fleet tr[data-cluster='fleet/hostile'] td.problem").await, HOSTILE);
    assert_eq!(b.text("#fleet tr[data-cluster='fleet/c04'] td:last-child").await, format!("{RELEASE} 2/2"));
    assert_eq!(
        b.eval("window.__pwned === undefined && document.querySelectorAll('main img, main script').length === 0").await,
        json!(true)
    );
    b.screenshot(&shots.join("fleet.png")).await;
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "Fleet").await);
    }
    // The keyboard: from the top, Tab reaches the skip link, the navigation, the filter, the
    // sort links, the Clusters, their rollout and the next page; Enter on the skip link moves
    // the focus to the content.
    b.goto(&format!("{base}?per=2")).await;
    b.tab_reaches(
        "Fleet",
        &[
            "a.skip",
            "header nav a[href='/rollouts']",
            "a.tile",
            "input[name=q]",
            "select[name=state]",
            "form.filter button",
            "#fleet th a",
            "#fleet td a[href^='/clusters/']",
            "#fleet td a[href^='/rollouts/']",
            "nav.pages a[rel=next]",
        ],
        60,
    )
    .await;
    b.goto(&format!("{base}?per=2")).await;
    b.key("Tab", 9, None).await;
    assert_eq!(b.eval("document.activeElement.className").await, json!("skip"), "the first Tab goes to the skip link");
    b.key("Enter", 13, Some("\r")).await;
    b.until("the skip link moved the focus to the content", "document.activeElement === document.getElementById('content')", STEP).await;
    // Filtered and sorted by the query: the failed ones, by name, descending.
    b.goto(&format!("{base}?state=Failed&sort=name&desc=1")).await;
    assert_eq!(
        b.eval("[...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.cluster).join(' ')").await,
        json!("fleet/hostile fleet/c05")
    );

    // The list of rollouts, each a link reached by Tab.
    b.goto(&format!("{base}rollouts")).await;
    assert!(b.text("#rollouts").await.contains(RELEASE));
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "Rollouts").await);
    }
    b.tab_reaches("Rollouts", &[&format!("#rollouts a[href='/rollouts/{RELEASE}']")], 20).await;

    // The rollout: cells, the path's steps, the budget, the next window, the commands.
    b.goto(&format!("{base}rollouts/{RELEASE}")).await;
    let cells = b
        .eval("Object.fromEntries([...document.querySelectorAll('li.cell[data-cluster]')].map(c => [c.dataset.cluster, c.dataset.cell]))")
        .await;
    assert_eq!(
        cells,
        json!({"fleet/c01": "done", "fleet/c02": "done", "fleet/c03": "upgrading, step 1/2", "fleet/c04": "waits for a window",
        "fleet/c05": "failed: LeftAlone", "fleet/hostile": "upgrading"})
    );
    assert!(
        b.text("li.cell[data-cluster='fleet/c04']").await.contains("next opens 20"),
        "{}",
        b.text("li.cell[data-cluster='fleet/c04']").await
    );
    let steps = b
        .eval("[...document.querySelectorAll(\".path[data-cluster='fleet/c03'] li.step\")].map(s => s.dataset.step + ':' + s.className)")
        .await;
    assert_eq!(steps, json!([format!("{OLD}:step from"), format!("{MID}:step current"), format!("{TARGET}:step next")]));
    assert_eq!(b.text("#budget-used").await, "1 of 1 used");
    assert_eq!(b.text("#next-window").await, "2030-01-01T22:00:00Z");
    assert!(b.text("#window").await.contains(window_schedule()));
    assert_eq!(b.text("#cmd-pause").await, format!("stacksync rollout pause --config {} ferrol", config.display()));
    assert!(b.text("#failed-clusters").await.contains(HOSTILE));
    assert!(b.text("main").await.contains("RolloutClusterFailed"), "the rollout's history, from its Events");
    // Its screenshots (light and dark) come from the daemon-driven rollout (rollout.rs).
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "a rollout").await);
    }
    // Each cell, the path's Cluster, the copy buttons and the failed Clusters by Tab.
    b.tab_reaches(
        "a rollout",
        &["li.cell a[href='/clusters/fleet/c04']", ".path a[href='/clusters/fleet/c03']", "button.copy", "#failed-clusters a"],
        60,
    )
    .await;

    // A Cluster: conditions, objects, Events, the release's signer; hostile text stays text.
    b.goto(&format!("{base}clusters/{NS}/hostile")).await;
    assert_eq!(b.text("tr[data-condition=Ready] td:nth-child(4)").await, HOSTILE);
    assert!(b.text("#objects-table").await.contains("metrics-server"));
    assert!(b.text("main").await.contains("RenderFailed"));
    assert_eq!(
        b.eval("window.__pwned === undefined && document.querySelectorAll('main img, main script').length === 0").await,
        json!(true)
    );
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "a failed Cluster").await);
    }
    b.goto(&format!("{base}clusters/{NS}/c03")).await;
    assert_eq!(b.text("#verified-by").await, "git+ssh:SHA256:test");
    b.screenshot(&shots.join("cluster.png")).await;
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "Cluster").await);
    }

    // Releases and the preview.
    b.goto(&format!("{base}releases")).await;
    assert_eq!(b.text(&format!("tr[data-release='ferrol.{OLD}'] td[data-running]")).await, "3", "c04, c05 and hostile run it");
    b.screenshot(&shots.join("releases.png")).await;
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "Releases").await);
        // The check is not blind: grey text on white, added to the page (through the CSS
        // object model, which the page's policy allows a script), is a serious violation.
        b.eval(
            "(() => { const p = document.createElement('p'); p.id = 'axe-canary'; p.textContent = 'low contrast'; \
                p.style.color = '#c0c0c0'; document.getElementById('content').append(p); return true; })()",
        )
        .await;
        let canary = b.violations(axe, "Releases with a canary").await;
        assert!(canary.iter().any(|v| v.contains("color-contrast") && v.contains("#axe-canary")), "axe-core missed the canary: {canary:?}");
        b.eval("document.getElementById('axe-canary').remove() || true").await;
    }
    b.goto(&format!("{base}preview")).await;
    assert!(b.text("#preview-summary").await.starts_with("2 Clusters: 1 change"));
    b.screenshot(&shots.join("preview.png")).await;
    if let Some(axe) = &axe {
        a11y.extend(b.violations(axe, "Preview").await);
    }
    assert!(a11y.is_empty(), "axe-core's serious and critical violations:\n  {}", a11y.join("\n  "));

    // Live: a status change shows within 2 s, without a reload.
    b.goto(&base).await;
    b.until("the event stream is open", "document.body.dataset.connection === 'live'", STEP).await;
    b.eval("window.__stay = 1").await;
    // A keyboard user on c02's link keeps the focus there through the update.
    b.eval("document.querySelector(\"#fleet tr[data-cluster='fleet/c02'] a\").focus() || true").await;
    let syncs = api(&client, "stacksync.io", "v1alpha1", "ClusterSync", Some(NS));
    let mut status = sync_status(TARGET, Some(("Unhealthy", "Deployment/kube-system/ccm: 0/1 replicas available")));
    status["class"] = json!(TARGET);
    apply_status(
        &syncs,
        "c01",
        json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": "c01"}, "status": status}),
    )
    .await;
    let took = b
        .until(
            "c01 shown Failed",
            "document.querySelector(\"#fleet tr[data-cluster='fleet/c01']\").dataset.state === 'Failed'",
            Duration::from_secs(2),
        )
        .await;
    assert_eq!(b.eval("window.__stay === 1 && performance.getEntriesByType('navigation').length === 1").await, json!(true), "not reloaded");
    eprintln!("the change showed after {took:?}");
    assert_eq!(b.eval("document.activeElement.getAttribute('href')").await, json!("/clusters/fleet/c02"), "the focus stayed put");

    // A lost connection says so, and the page recovers when the console is back.
    let port = base.trim_end_matches('/').rsplit(':').next().expect("port").to_owned();
    running.child.start_kill().expect("stop the console");
    let _ = running.child.wait().await;
    b.until(
        "the banner says the connection is lost",
        "!document.getElementById('banner').hidden && document.body.dataset.connection === 'lost'",
        STEP,
    )
    .await;
    b.screenshot(&shots.join("lost.png")).await;
    if let Some(axe) = &axe {
        let lost = b.violations(axe, "Fleet, connection lost").await;
        assert!(lost.is_empty(), "axe-core's serious and critical violations:\n  {}", lost.join("\n  "));
    }
    let listen = format!("127.0.0.1:{port}");
    let again = ["--listen", listen.as_str(), "--config", args[3], "--preview", args[5]];
    let _running = console(&again).await;
    b.until(
        "the banner goes once the console is back",
        "document.getElementById('banner').hidden && document.body.dataset.connection === 'live'",
        STEP,
    )
    .await;

    // Nothing left loopback, nothing threw.
    b.assert_stayed_on(&base);
    b.close().await;

    // The console only read: its requests in the audit log are get, list and watch.
    let log = std::fs::read_to_string(kube.audit_log()).expect("audit log");
    let mine: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["userAgent"].as_str().is_some_and(|ua| ua.starts_with("stacksync-console/")))
        .collect();
    assert!(mine.len() > 5, "the console's requests are in the audit log");
    let writes: Vec<String> = mine
        .iter()
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(writes.is_empty(), "the console wrote: {writes:?}");
    assert!(!mine.iter().any(|e| e["objectRef"]["resource"] == "secrets"), "the console never reads Secrets");
}

/// `stacksync run --console-addr`: the daemon serves the same console, read-only, with its own
/// credentials, on a loopback address only (reached in a pod with `kubectl port-forward`); an
/// address that is not loopback is refused before anything starts; SIGTERM still stops the
/// daemon at once with the console serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_the_console_read_only_on_loopback_only() {
    if !testkit::kube::available() {
        assert!(std::env::var_os("CI").is_none(), "the real control plane is not built (scripts/build-realkube.sh)");
        eprintln!("SKIPPED: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kube = testkit::kube::Kube::start(testkit::kube::Options {
        preload: vec![root.join("testdata/crds"), root.join("deploy/crds")],
        audit: true,
        ..Default::default()
    })
    .await
    .expect("a real control plane");
    let client = kube.client().await.expect("client");
    fleet(&client).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let config = config(tmp.path(), kube.kubeconfig());

    let refused = tokio::time::timeout(
        STEP,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
            .args(["run", "--admin-addr", "0", "--console-addr", "0.0.0.0:7654", "--config"])
            .arg(&config)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("refused at once")
    .expect("run stacksync");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("not a loopback address"), "{said}");

    let helm = common::helm_path();
    let daemon = common::daemon::Daemon::launch(&config, tmp.path().join("daemon.log"))
        .args(&["--console-addr", "127.0.0.1:0"])
        .env("STACKSYNC_HELM", helm.to_str().expect("utf-8"))
        .start()
        .await;
    let mut addr = String::new();
    daemon
        .eventually("the console listener", STEP, async || {
            let log = daemon.log();
            let line = log.split_inclusive('\n').find(|l| l.ends_with('\n') && l.contains("console listener"));
            addr = line.and_then(|l| l.split("addr=").nth(1)).and_then(|a| a.split_whitespace().next()).unwrap_or_default().to_owned();
            !addr.is_empty()
        })
        .await;
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let http = reqwest::Client::builder().no_proxy().timeout(STEP).build().expect("http client");
    let mut page = String::new();
    daemon
        .eventually("the Fleet page lists the Clusters", STEP, async || {
            let Ok(r) = http.get(format!("http://{addr}/")).send().await else { return false };
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["content-security-policy"], stacksync::console::CSP);
            page = r.text().await.unwrap_or_default();
            page.contains("data-cluster=\"fleet/c05\"")
        })
        .await;
    assert!(page.contains("read-only"), "{page}");
    // What the daemon's console asked the API server (its own User-Agent): reads only.
    let log = std::fs::read_to_string(kube.audit_log()).expect("audit log");
    let verbs: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["userAgent"].as_str().is_some_and(|ua| ua.starts_with("stacksync-console/")))
        .map(|e| format!("{} {}", e["verb"].as_str().unwrap_or_default(), e["requestURI"].as_str().unwrap_or_default()))
        .collect();
    assert!(!verbs.is_empty(), "the daemon's console read the cluster");
    assert!(verbs.iter().all(|v| v.starts_with("get ") || v.starts_with("list ") || v.starts_with("watch ")), "{verbs:?}");
    assert!(!verbs.iter().any(|v| v.contains("/secrets")), "{verbs:?}");
    daemon.stop().await;
}
