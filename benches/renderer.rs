//! The library renderer against `helm template` processes, on a fixture stack shaped like the SCS
//! openstack stack (generated here: a multi-stage cluster addon with a CNI-like chart of many
//! templates, a large values file, CRDs and `genCA`/`genSignedCert`, and CSI-, CCM- and
//! metrics-server-like charts, each with a per-Cluster values template over `.Cluster`).
//!
//! Cases:
//! - per Cluster: the four stage charts of one Cluster rendered by stacksync's render path
//!   (`Layout::render_addons`, values templates included) with the library renderer, one Cluster
//!   after the other, against the real `helm template` of the same helm version (the referee,
//!   scripts/build-renderer.sh) run with the same arguments and values files; per chart too, to
//!   show where the time goes;
//! - 1,000 Clusters: every Cluster's addons with the library renderer at `helm.parallelism` (the
//!   number of cores), and the peer's time for the same work measured on a sample of Clusters at
//!   the same parallelism and scaled up; the renderer's peak memory (`VmHWM`) after it; then the
//!   same fleet as `stacksync preview` renders it (every render a probe: no key generated), and
//!   as a restart on an empty cache renders it (a chart that generates rendered once, as a
//!   stand-in: `Helm::with_stand_ins`).
//!
//! By hand: `cargo bench --bench renderer -- [--clusters 1000] [--sample 20] [--out F]`.
//! Results: docs/performance.md ("The library renderer").

#[path = "common/mod.rs"]
mod common;
#[path = "common/stack.rs"]
mod stack;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::json;
use stack::{KUBERNETES, STACK, STAGES, chart, release};
use stacksync::config::HelmConfig;
use stacksync::model::cluster::{ClusterConfig, ClusterObjects};
use stacksync::render::clusterstack::{Addon, Layout};
use stacksync::render::helm::Helm;
use stacksync::render::renderer::HELM_VERSION;

fn tools_dir() -> PathBuf {
    std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/stacksync-tools"))
}

fn cluster(i: usize) -> ClusterConfig {
    ClusterConfig {
        name: format!("c{i:04}"),
        namespace: "fleet".into(),
        values: Default::default(),
        objects: ClusterObjects {
            cluster: Some(json!({"metadata": {"name": format!("c{i:04}")}, "spec": {
                "controlPlaneEndpoint": {"host": format!("10.1.{}.{}", i / 250, i % 250 + 1), "port": 6443},
                "clusterNetwork": {"pods": {"cidrBlocks": [format!("10.{}.0.0/16", 100 + i % 100)]}}}})),
            control_plane: None,
            infra_cluster: None,
        },
    }
}

/// `helm template` of one stage of cluster `c` by the peer, with the values file stacksync wrote.
fn peer_stage(helm: &Path, home: &Path, stage_dir: &Path, values: &Path) -> Duration {
    let t = Instant::now();
    let out = Command::new(helm)
        .args(["template", "--include-crds", "--kube-version", KUBERNETES, "cluster-addon"])
        .arg(stage_dir)
        .args(["--namespace", "kube-system", "-f"])
        .arg(values)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm template");
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    t.elapsed()
}

/// CPU seconds (user and system) a process has used: `self` or a pid, from `/proc`.
fn cpu_s(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds of this process and of the library renderer so far.
async fn cpu_split(helm: &Helm) -> (f64, f64) {
    let renderer = match helm.library() {
        Some(r) => r.pid().await.map_or(0.0, |p| cpu_s(&p.to_string())),
        None => 0.0,
    };
    (cpu_s("self"), renderer)
}

fn vm_hwm_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

#[tokio::main]
async fn main() {
    let mut clusters = 1000;
    let mut sample = 20;
    let mut out = common::out_path();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--clusters" => clusters = it.next().and_then(|v| v.parse().ok()).expect("--clusters N"),
            "--sample" => sample = it.next().and_then(|v| v.parse().ok()).expect("--sample N"),
            "--out" => out = it.next().map(PathBuf::from).expect("--out FILE"),
            _ => {} // cargo bench passes --bench
        }
    }
    let referee = tools_dir().join(format!("helm-{HELM_VERSION}/helm"));
    assert!(referee.is_file(), "the referee {} is missing: run scripts/build-renderer.sh", referee.display());
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("release");
    release(&root);
    let rel = stacksync::release::Release {
        source: "stacks".into(),
        tag: format!("{STACK}-v1"),
        commit: "0".repeat(40),
        version: stacksync::model::version::Version::from_tag(&format!("{STACK}-v1")).expect("tag"),
    };
    let work = dir.path().join("work");
    let layout = Layout::load(&root, ".", &rel, &work).expect("the fixture release");
    let Addon::Staged { stages, .. } = &layout.addon else { panic!("a staged addon") };
    let config = HelmConfig::default();
    let parallelism = config.parallelism;
    let helm = Helm::locate(&config).await.expect("the library renderer (scripts/build-renderer.sh)");
    let machine = common::machine(&[("helm", referee.as_path())]);
    let home = dir.path().join("helm-home");
    let values_of = |c: &ClusterConfig, stage: &str| work.join("values").join(&c.namespace).join(&c.name).join(format!("{stage}.yaml"));
    let mut cases = Vec::new();

    // Warm-up: the renderer loads each chart once (what the first Cluster of a release pays).
    let t = Instant::now();
    layout.render_addons(&helm, &cluster(99_999), &work).await.expect("render");
    let first = t.elapsed();

    // Per Cluster, one after the other: ours, then the peer on the same values files.
    let sampled: Vec<ClusterConfig> = (0..sample).map(cluster).collect();
    let t = Instant::now();
    let mut objects = 0;
    for c in &sampled {
        objects += layout.render_addons(&helm, c, &work).await.expect("render").iter().map(|s| s.objects.len()).sum::<usize>();
    }
    let ours = t.elapsed().as_secs_f64() / sample as f64;
    let mut per_chart_peer = [Duration::ZERO; 4];
    for c in &sampled {
        for (i, stage) in STAGES.iter().enumerate() {
            per_chart_peer[i] += peer_stage(&referee, &home, &stages[*stage].chart.path, &values_of(c, stage));
        }
    }
    let peer = per_chart_peer.iter().sum::<Duration>().as_secs_f64() / sample as f64;
    println!(
        "per Cluster (4 charts, {} objects): library renderer {:.1} ms, helm template {:.1} ms: {:.3} of the peer ({:.1}x faster); first Cluster (charts loaded) {:.0} ms",
        objects / sample,
        ours * 1e3,
        peer * 1e3,
        ours / peer,
        peer / ours,
        first.as_secs_f64() * 1e3
    );
    cases.push(common::case(
        "renderer: per Cluster, 4 charts (SCS openstack-shaped)",
        ours,
        Some((peer, "helm template (same version), a process per chart")),
        "s",
        &machine,
        json!({"clusters": sample, "objects_per_cluster": objects / sample, "first_cluster_s": first.as_secs_f64()}),
    ));

    // Per chart: where the time goes.
    for (i, stage) in STAGES.iter().enumerate() {
        let chart = &stages[*stage].chart;
        let t = Instant::now();
        for c in &sampled {
            let args: Vec<std::ffi::OsString> = vec![
                "--include-crds".into(),
                "--kube-version".into(),
                KUBERNETES.into(),
                "cluster-addon".into(),
                chart.path.clone().into(),
                "--namespace".into(),
                "kube-system".into(),
                "-f".into(),
                values_of(c, stage).into(),
            ];
            helm.template(&chart.name, &args).await.expect("render");
        }
        let ours = t.elapsed().as_secs_f64() / sample as f64;
        let peer = per_chart_peer[i].as_secs_f64() / sample as f64;
        println!("  {stage:<15} library renderer {:>6.1} ms, helm template {:>6.1} ms: {:.3}", ours * 1e3, peer * 1e3, ours / peer);
        cases.push(common::case(
            &format!("renderer: one render of {stage}"),
            ours,
            Some((peer, "helm template (same version)")),
            "s",
            &machine,
            json!({}),
        ));
    }

    // The CNI chart without its certificates: what its three RSA keys (genCA, genSignedCert)
    // cost, which no renderer avoids.
    let plain = dir.path().join("cni-without-certificates");
    chart(&plain, "cni", 90, 24, false, 8);
    let values = values_of(&sampled[0], "cni");
    let args: Vec<std::ffi::OsString> = vec![
        "--include-crds".into(),
        "--kube-version".into(),
        KUBERNETES.into(),
        "cluster-addon".into(),
        plain.clone().into(),
        "--namespace".into(),
        "kube-system".into(),
        "-f".into(),
        values.clone().into(),
    ];
    helm.template("cni", &args).await.expect("render");
    let t = Instant::now();
    for _ in 0..sample {
        helm.template("cni", &args).await.expect("render");
    }
    let ours = t.elapsed().as_secs_f64() / sample as f64;
    let peer = (0..sample).map(|_| peer_stage(&referee, &home, &plain, &values)).sum::<Duration>().as_secs_f64() / sample as f64;
    println!(
        "  cni without its 3 RSA keys: library renderer {:>6.1} ms, helm template {:>6.1} ms: {:.3}",
        ours * 1e3,
        peer * 1e3,
        ours / peer
    );
    cases.push(common::case(
        "renderer: one render of cni without its certificates",
        ours,
        Some((peer, "helm template (same version)")),
        "s",
        &machine,
        json!({}),
    ));

    // The fleet: every Cluster's addons at helm.parallelism, and the peer at the same parallelism
    // on a sample, scaled up.
    let fleet: Vec<ClusterConfig> = (1000..1000 + clusters).map(cluster).collect();
    let t = Instant::now();
    let done = futures_util::stream::iter(fleet.iter().map(|c| {
        let (helm, layout, work) = (&helm, &layout, &work);
        async move { layout.render_addons(helm, c, work).await.expect("render").len() }
    }))
    .buffer_unordered(parallelism)
    .collect::<Vec<_>>()
    .await;
    let ours = t.elapsed().as_secs_f64();
    assert_eq!(done.len(), clusters);
    let hwm = match helm.library() {
        Some(r) => r.pid().await.map_or(0.0, vm_hwm_mib),
        None => 0.0,
    };
    let peer_clusters = &fleet[..sample.min(clusters)];
    let t = Instant::now();
    std::thread::scope(|s| {
        for part in peer_clusters.chunks(peer_clusters.len().div_ceil(parallelism)) {
            let (referee, home, stages, values_of) = (&referee, &home, stages, &values_of);
            s.spawn(move || {
                for c in part {
                    for stage in STAGES {
                        peer_stage(referee, home, &stages[stage].chart.path, &values_of(c, stage));
                    }
                }
            });
        }
    });
    let peer = t.elapsed().as_secs_f64() * clusters as f64 / peer_clusters.len() as f64;
    println!(
        "{clusters} Clusters at parallelism {parallelism}: library renderer {ours:.1} s, helm template {peer:.1} s (from {} Clusters, scaled): {:.3} ({:.1}x faster); renderer peak RSS {hwm:.0} MiB",
        peer_clusters.len(),
        ours / peer,
        peer / ours
    );
    cases.push(common::case(
        &format!("renderer: {clusters} Clusters' addons (4 charts each)"),
        ours,
        Some((peer, "helm template (same version), scaled from a sample")),
        "s",
        &machine,
        json!({"parallelism": parallelism, "peer_sample_clusters": peer_clusters.len(), "renderer_vm_hwm_mib": hwm}),
    ));

    // The same fleet as `stacksync preview` renders it: every render a probe (no key generated:
    // a preview applies nothing and keeps each generated field's live value), the generated
    // fields still found by comparing two. The peer is the same helm template figure: what a
    // preview that ran helm per chart would cost.
    let probing = helm.probes_only();
    let cpu0 = cpu_split(&helm).await;
    let t = Instant::now();
    let done = futures_util::stream::iter(fleet.iter().map(|c| {
        let (helm, layout, work) = (&probing, &layout, &work);
        async move { layout.render_addons(helm, c, work).await.expect("render").len() }
    }))
    .buffer_unordered(parallelism)
    .collect::<Vec<_>>()
    .await;
    let previewed = t.elapsed().as_secs_f64();
    assert_eq!(done.len(), clusters);
    let cpu = cpu_split(&helm).await;
    let (preview_ours_cpu, preview_renderer_cpu) = (cpu.0 - cpu0.0, cpu.1 - cpu0.1);
    println!(
        "{clusters} Clusters as preview renders them (probes, no key generated): {previewed:.1} s, helm template {peer:.1} s: {:.3} ({:.1}x faster); CPU: stacksync {preview_ours_cpu:.1} s, renderer {preview_renderer_cpu:.1} s",
        previewed / peer,
        peer / previewed
    );
    cases.push(common::case(
        &format!("renderer: {clusters} Clusters' addons as preview renders them"),
        previewed,
        Some((peer, "helm template (same version), scaled from a sample")),
        "s",
        &machine,
        json!({"parallelism": parallelism, "peer_sample_clusters": peer_clusters.len(), "stacksync_cpu_s": preview_ours_cpu, "renderer_cpu_s": preview_renderer_cpu}),
    ));

    // The same fleet as a restart on an empty cache renders it (the shipped emptyDir, a leader
    // change): each Cluster's ClusterSync records what its charts generate, so a chart that
    // generates is rendered once, as a stand-in (a probe, no key), the applier keeping the live
    // values (src/targets/kubernetes/reconcile/stages.rs). Before issue 56's third round a
    // restart rendered as a first render does (the fleet case above). The digest check against
    // the record (a hash of the objects) is not in this figure.
    let restarting = helm.without_memo().with_stand_ins();
    let cpu0 = cpu_split(&helm).await;
    let t = Instant::now();
    let done = futures_util::stream::iter(fleet.iter().map(|c| {
        let (helm, layout, work) = (&restarting, &layout, &work);
        async move { layout.render_addons(helm, c, work).await.expect("render").iter().filter(|s| s.stand_ins).count() }
    }))
    .buffer_unordered(parallelism)
    .collect::<Vec<_>>()
    .await;
    let restarted = t.elapsed().as_secs_f64();
    assert!(done.len() == clusters && done.iter().all(|n| *n == 1), "the CNI chart of every Cluster is a stand-in");
    let cpu = cpu_split(&helm).await;
    let (restart_ours_cpu, restart_renderer_cpu) = (cpu.0 - cpu0.0, cpu.1 - cpu0.1);
    println!(
        "{clusters} Clusters as a restart renders them (stand-ins, no key generated): {restarted:.1} s, helm template {peer:.1} s: {:.3} ({:.1}x faster); a first render {ours:.1} s; CPU: stacksync {restart_ours_cpu:.1} s, renderer {restart_renderer_cpu:.1} s",
        restarted / peer,
        peer / restarted
    );
    cases.push(common::case(
        &format!("renderer: {clusters} Clusters' addons as a restart renders them"),
        restarted,
        Some((peer, "helm template (same version), scaled from a sample")),
        "s",
        &machine,
        json!({"parallelism": parallelism, "peer_sample_clusters": peer_clusters.len(), "first_render_s": ours, "stacksync_cpu_s": restart_ours_cpu, "renderer_cpu_s": restart_renderer_cpu}),
    ));
    common::write(&out, &cases, false);
    println!("results: {}", out.display());
}
