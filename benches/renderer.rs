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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::json;
use stacksync::config::HelmConfig;
use stacksync::model::cluster::{ClusterConfig, ClusterObjects};
use stacksync::render::clusterstack::{Addon, Layout};
use stacksync::render::helm::Helm;
use stacksync::render::renderer::HELM_VERSION;

const STACK: &str = "openstack-bench-1-32";
const KUBERNETES: &str = "v1.32.4";
const STAGES: [&str; 4] = ["cni", "csi", "ccm", "metrics-server"];

fn tools_dir() -> PathBuf {
    std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/stacksync-tools"))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A chart of `components` templated ConfigMaps (each over its own block of values, with `keys`
/// settings), a DaemonSet, helpers; `certs` adds a CA and signed certificates as Cilium's Hubble
/// does by default, `crds` CRDs.
fn chart(dir: &Path, name: &str, components: usize, keys: usize, certs: bool, crds: usize) {
    write(&dir.join("Chart.yaml"), &format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\nappVersion: \"1.0.0\"\n"));
    let mut values =
        String::from("cluster:\n  name: default\n  podCidr: 10.0.0.0/16\n  apiHost: \"\"\nimage:\n  registry: quay.io\n  tag: v1.0.0\n");
    for c in 0..components {
        let _ = writeln!(values, "component{c}:\n  enabled: true\n  replicas: {}\n  settings:", 1 + c % 3);
        for k in 0..keys {
            let _ = writeln!(values, "    key-{k}: \"value {c}.{k}\"");
        }
    }
    write(&dir.join("values.yaml"), &values);
    write(
        &dir.join("templates/_helpers.tpl"),
        &format!(
            "{{{{- define \"{name}.fullname\" -}}}}{{{{ printf \"%s-%s\" .Release.Name .Chart.Name | trunc 63 | trimSuffix \"-\" }}}}{{{{- end }}}}\n\
             {{{{- define \"{name}.labels\" -}}}}\napp.kubernetes.io/name: {{{{ .Chart.Name }}}}\napp.kubernetes.io/instance: {{{{ .Release.Name }}}}\nhelm.sh/chart: {{{{ .Chart.Name }}}}-{{{{ .Chart.Version }}}}\n{{{{- end }}}}\n"
        ),
    );
    for c in 0..components {
        write(
            &dir.join(format!("templates/component-{c}.yaml")),
            &format!(
                "{{{{- if .Values.component{c}.enabled }}}}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ include \"{name}.fullname\" . }}}}-c{c}\n  namespace: {{{{ .Release.Namespace }}}}\n  labels:\n    {{{{- include \"{name}.labels\" . | nindent 4 }}}}\ndata:\n  cluster: {{{{ .Values.cluster.name | quote }}}}\n  pod-cidr: {{{{ .Values.cluster.podCidr | quote }}}}\n  replicas: {{{{ .Values.component{c}.replicas | quote }}}}\n  settings.yaml: |\n    {{{{- toYaml .Values.component{c}.settings | nindent 4 }}}}\n  {{{{- range $k, $v := .Values.component{c}.settings }}}}\n  {{{{ $k }}}}: {{{{ $v | quote }}}}\n  {{{{- end }}}}\n{{{{- end }}}}\n"
            ),
        );
    }
    write(
        &dir.join("templates/daemonset.yaml"),
        &format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: {{{{ include \"{name}.fullname\" . }}}}\n  namespace: {{{{ .Release.Namespace }}}}\nspec:\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n      annotations:\n        checksum/config: {{{{ include (print $.Template.BasePath \"/component-0.yaml\") . | sha256sum }}}}\n    spec:\n      containers:\n        - name: {name}\n          image: \"{{{{ .Values.image.registry }}}}/{name}:{{{{ .Values.image.tag }}}}\"\n          env:\n            - {{name: K8S_SERVICE_HOST, value: {{{{ .Values.cluster.apiHost | quote }}}}}}\n"
        ),
    );
    if certs {
        write(
            &dir.join("templates/tls.yaml"),
            "{{- $ca := genCA \"hubble-ca.cilium.io\" 1095 }}\n{{- $server := genSignedCert \"*.default.hubble-grpc.cilium.io\" nil (list \"*.default.hubble-grpc.cilium.io\") 1095 $ca }}\n{{- $relay := genSignedCert \"*.hubble-relay.cilium.io\" nil (list \"*.hubble-relay.cilium.io\") 1095 $ca }}\napiVersion: v1\nkind: Secret\nmetadata:\n  name: hubble-server-certs\n  namespace: {{ .Release.Namespace }}\ntype: kubernetes.io/tls\ndata:\n  ca.crt: {{ $ca.Cert | b64enc }}\n  tls.crt: {{ $server.Cert | b64enc }}\n  tls.key: {{ $server.Key | b64enc }}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: hubble-relay-client-certs\n  namespace: {{ .Release.Namespace }}\ntype: kubernetes.io/tls\ndata:\n  ca.crt: {{ $ca.Cert | b64enc }}\n  tls.crt: {{ $relay.Cert | b64enc }}\n  tls.key: {{ $relay.Key | b64enc }}\n",
        );
    }
    for c in 0..crds {
        write(
            &dir.join(format!("crds/crd-{c}.yaml")),
            &format!(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things{c}.{name}.example.org\nspec:\n  group: {name}.example.org\n  names: {{kind: Thing{c}, plural: things{c}}}\n  scope: Namespaced\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
            ),
        );
    }
    // The per-Cluster values template, as the SCS stacks' overwrite.yaml.
    write(
        &dir.join("overwrite.yaml"),
        "values: |\n  cluster:\n    name: {{ .Cluster.metadata.name }}\n    podCidr: {{ index .Cluster.spec.clusterNetwork.pods.cidrBlocks 0 | quote }}\n    apiHost: {{ .Cluster.spec.controlPlaneEndpoint.host | quote }}\n",
    );
}

/// The release: metadata, a small ClusterClass chart, the four stages (sizes as the SCS openstack
/// stack's: Cilium has about a hundred templates, the others ten to twenty).
fn release(root: &Path) {
    write(
        &root.join("metadata.yaml"),
        &format!(
            "apiVersion: metadata.clusterstack.x-k8s.io/v1alpha1\nversions:\n  clusterStack: v1\n  kubernetes: {KUBERNETES}\n  components:\n    clusterAddon: v1\n"
        ),
    );
    let class = root.join(format!("{STACK}-cluster-class-v1"));
    write(&class.join("Chart.yaml"), &format!("apiVersion: v2\nname: {STACK}-cluster-class\nversion: v1\n"));
    write(&class.join("templates/cc.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cc\n");
    let addon = root.join(format!("{STACK}-cluster-addon-v1"));
    chart(&addon.join("cni"), "cni", 90, 24, true, 8);
    chart(&addon.join("csi"), "csi", 18, 12, false, 2);
    chart(&addon.join("ccm"), "ccm", 10, 10, false, 0);
    chart(&addon.join("metrics-server"), "metrics-server", 8, 8, false, 0);
    let stages: String = STAGES.iter().map(|s| format!("    - name: {s}\n      action: apply\n")).collect();
    write(
        &root.join("clusteraddon.yaml"),
        &format!(
            "apiVersion: clusteraddonconfig.x-k8s.io/v1alpha1\nclusterAddonVersion: clusteraddons.clusterstack.x-k8s.io/v1alpha1\naddonStages:\n  AfterControlPlaneInitialized:\n{stages}"
        ),
    );
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
    println!(
        "{clusters} Clusters as preview renders them (probes, no key generated): {previewed:.1} s, helm template {peer:.1} s: {:.3} ({:.1}x faster)",
        previewed / peer,
        peer / previewed
    );
    cases.push(common::case(
        &format!("renderer: {clusters} Clusters' addons as preview renders them"),
        previewed,
        Some((peer, "helm template (same version), scaled from a sample")),
        "s",
        &machine,
        json!({"parallelism": parallelism, "peer_sample_clusters": peer_clusters.len()}),
    ));

    // The same fleet as a restart on an empty cache renders it (the shipped emptyDir, a leader
    // change): each Cluster's ClusterSync records what its charts generate, so a chart that
    // generates is rendered once, as a stand-in (a probe, no key), the applier keeping the live
    // values (src/targets/kubernetes/reconcile/stages.rs). Before issue 56's third round a
    // restart rendered as a first render does (the fleet case above). The digest check against
    // the record (a hash of the objects) is not in this figure.
    let restarting = helm.without_memo().with_stand_ins();
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
    println!(
        "{clusters} Clusters as a restart renders them (stand-ins, no key generated): {restarted:.1} s, helm template {peer:.1} s: {:.3} ({:.1}x faster); a first render {ours:.1} s",
        restarted / peer,
        peer / restarted
    );
    cases.push(common::case(
        &format!("renderer: {clusters} Clusters' addons as a restart renders them"),
        restarted,
        Some((peer, "helm template (same version), scaled from a sample")),
        "s",
        &machine,
        json!({"parallelism": parallelism, "peer_sample_clusters": peer_clusters.len(), "first_render_s": ours}),
    ));
    common::write(&out, &cases, false);
    println!("results: {}", out.display());
}
