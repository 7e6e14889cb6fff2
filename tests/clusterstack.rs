//! SovereignCloudStack cluster-stack releases, rendered with helm: fixture releases in
//! testdata/clusterstack (a single-chart addon at v2, a multi-stage addon at v3), library-level
//! renders, and end-to-end runs from a Git tag through `run --once` and `render`. Renders run in
//! the library renderer (the default), the tests of the helm binary itself (its version check,
//! its timeout, its invocations) with `helm.renderer: process`.
//!
//! helm comes from scripts/install-tools.sh, the library renderer from scripts/build-renderer.sh;
//! without them these tests fail (they never skip).

mod common;

use std::path::{Path, PathBuf};

use serde_json::json;
use stacksync::config::{HelmConfig, HelmRenderer};
use stacksync::model::cluster::{ClusterConfig, ClusterObjects};
use stacksync::model::version::Version;
use stacksync::release::Release;
use stacksync::render::clusterstack::{Addon, Layout};
use stacksync::render::helm::Helm;
use testkit::git::ReleaseRepo;

use common::config::stack_cluster;
use common::fleet::{fixture_files, publish};
use common::{Config, Sub, assert_exit, files_under, helm_path, run_once, snapshot, status, stdout};

const STACK: &str = "docker-ferrol-1-27";

fn fixture(release: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/clusterstack").join(release)
}

async fn helm() -> Helm {
    let config = HelmConfig { path: Some(helm_path()), ..HelmConfig::default() };
    Helm::locate(&config).await.expect("helm runs")
}

fn release(tag: &str) -> Release {
    Release { source: "stacks".into(), tag: tag.into(), commit: "0".repeat(40), version: Version::from_tag(tag).expect("tag") }
}

/// A cluster with its own name, endpoint and pod CIDR.
fn cluster(ns: &str, name: &str, host: &str, cidr: &str, cp_replicas: Option<u64>) -> ClusterConfig {
    ClusterConfig {
        name: name.into(),
        namespace: ns.into(),
        values: Default::default(),
        objects: ClusterObjects {
            cluster: Some(
                json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": 6443}, "clusterNetwork": {"pods": {"cidrBlocks": [cidr]}}}}),
            ),
            control_plane: cp_replicas.map(|r| json!({"kind": "KubeadmControlPlane", "spec": {"replicas": r}})),
            infra_cluster: None,
        },
    }
}

/// Copies a fixture release into `dir` (to edit it), returning the copy's root.
fn copy_fixture(release: &str, dir: &Path) -> PathBuf {
    let dest = dir.join(release);
    for (rel, text) in fixture_files(release) {
        let p = dest.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    dest
}

fn field<'a>(objects: &'a [stacksync::model::Object], kind: &str, name: &str) -> &'a serde_json::Value {
    &objects.iter().find(|o| o.kind == kind && o.name == name).unwrap_or_else(|| panic!("no {kind}/{name}")).body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_get_their_own_injected_values() {
    let helm = helm().await;
    let work = tempfile::tempdir().expect("tempdir");
    let layout = Layout::load(&fixture("docker-ferrol-1-27-v2"), ".", &release("docker-ferrol-1-27-v2"), work.path()).expect("layout");
    assert!(matches!(layout.addon, Addon::Single { .. }));
    assert_eq!(layout.metadata.kubernetes, "v1.27.3");

    let class = layout.render_cluster_class(&helm, "team-a").await.expect("cluster class");
    let names: Vec<String> = class.iter().map(|o| format!("{}/{}", o.kind, o.name)).collect();
    assert!(names.contains(&"ClusterClass/docker-ferrol-1-27-v2".to_owned()), "{names:?}");
    assert!(names.contains(&"DockerClusterTemplate/docker-ferrol-1-27-v2-cluster".to_owned()), "{names:?}");
    assert!(class.iter().all(|o| o.namespace.as_deref() == Some("team-a") && o.stage.as_deref() == Some("cluster-class")));
    assert_eq!(class[0].chart.as_deref(), Some("docker-ferrol-1-27-cluster-class-v2"));

    let alpha = cluster("team-a", "alpha", "10.0.0.1", "10.10.0.0/16", Some(3));
    let beta = cluster("team-b", "beta", "beta.example.test", "172.16.0.0/12", None);
    for (c, host, cidr, replicas) in [(&alpha, "10.0.0.1", "10.10.0.0/16", 3), (&beta, "beta.example.test", "172.16.0.0/12", 1)] {
        let stages = layout.render_addons(&helm, c, &work.path().join(&c.name)).await.expect("addons");
        assert_eq!(stages.len(), 1);
        assert_eq!(stages[0].name, None);
        let objs = &stages[0].objects;
        let cm = field(objs, "ConfigMap", "cni-config");
        assert_eq!(cm["data"]["cluster-name"], c.name.as_str());
        assert_eq!(cm["data"]["pod-cidr"], cidr);
        assert_eq!(cm["data"]["kube-version"], "v1.27.3", "--kube-version from metadata.yaml");
        let ms = field(objs, "Deployment", "metrics-server");
        assert_eq!(ms["metadata"]["labels"]["domain"], host);
        assert_eq!(ms["spec"]["replicas"], replicas);
        assert_eq!(ms["metadata"]["namespace"], "kube-system");
        assert!(objs.iter().any(|o| o.kind == "CustomResourceDefinition"), "--include-crds");
        let d = objs.iter().find(|o| o.kind == "Deployment").expect("deployment");
        assert_eq!(d.file, "docker-ferrol-1-27-cluster-addon/templates/metrics-server.yaml");
        assert_eq!(d.chart.as_deref(), Some("docker-ferrol-1-27-cluster-addon-v1"));
    }
}

/// Issue 55: a chart that generates (a CA, a password) renders twice the first time; the fields
/// that differ are reported; two Clusters with the *same* values never get the same generated
/// value from the memo, while each Cluster's own render is memoised; a chart that names no
/// generator renders once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generating_chart_is_never_shared_between_clusters_with_the_same_values() {
    let helm = helm().await;
    let work = tempfile::tempdir().expect("tempdir");
    let root = copy_fixture("docker-ferrol-1-27-v2", work.path());
    let chart = root.join("docker-ferrol-1-27-cluster-addon-v1/templates/generated.yaml");
    std::fs::write(
        &chart,
        "{{- $ca := genCA \"fixture\" 30 }}\napiVersion: v1\nkind: Secret\nmetadata:\n  name: fixture-ca\ndata:\n  tls.crt: {{ $ca.Cert | b64enc }}\n  static: {{ \"same\" | b64enc }}\nstringData:\n  password: {{ randAlphaNum 16 | quote }}\n",
    )
    .expect("generating template");
    let layout = Layout::load(&root, ".", &release("docker-ferrol-1-27-v2"), work.path()).expect("layout");
    // The same values for both: the same name in two namespaces, the same endpoint and CIDR.
    let alpha = cluster("team-a", "alpha", "10.0.0.1", "10.10.0.0/16", Some(3));
    let twin = cluster("team-b", "alpha", "10.0.0.1", "10.10.0.0/16", Some(3));
    let secret = |stages: &[stacksync::render::clusterstack::RenderedStage]| field(&stages[0].objects, "Secret", "fixture-ca").clone();
    let before = helm.runs();
    let a = layout.render_addons_reporting(&helm, &alpha, &work.path().join("a")).await.expect("alpha").stages;
    assert_eq!(helm.runs() - before, 2, "rendered twice to find what it generates");
    assert_eq!(
        a[0].generated,
        ["|Secret|kube-system|fixture-ca|/data/tls.crt", "|Secret|kube-system|fixture-ca|/stringData/password"],
        "the fields that differ, and only they"
    );
    let t = layout.render_addons_reporting(&helm, &twin, &work.path().join("t")).await.expect("twin").stages;
    assert_ne!(secret(&a)["data"]["tls.crt"], secret(&t)["data"]["tls.crt"], "two Clusters never share a CA");
    assert_ne!(secret(&a)["stringData"], secret(&t)["stringData"], "nor a password");
    assert_eq!(t[0].generated, a[0].generated);
    let runs = helm.runs();
    let again = layout.render_addons_reporting(&helm, &alpha, &work.path().join("a")).await.expect("again").stages;
    assert_eq!(helm.runs(), runs, "a Cluster's own render is memoised");
    assert_eq!(secret(&again), secret(&a));
    assert_eq!(again[0].generated, a[0].generated, "and so are the fields it generates");

    // Without the generator: one render, nothing generated, shared by the twins.
    std::fs::remove_file(&chart).expect("rm");
    let other = Release { commit: "1".repeat(40), ..release("docker-ferrol-1-27-v2") };
    let plain = Layout::load(&root, ".", &other, work.path()).expect("layout");
    let runs = helm.runs();
    let p = plain.render_addons_reporting(&helm, &alpha, &work.path().join("p")).await.expect("plain").stages;
    assert!(p[0].generated.is_empty());
    plain.render_addons_reporting(&helm, &twin, &work.path().join("q")).await.expect("plain twin");
    assert_eq!(helm.runs() - runs, 1, "rendered once, shared by Clusters with the same values");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_stage_addons_render_the_install_stages_in_order() {
    let helm = helm().await;
    let work = tempfile::tempdir().expect("tempdir");
    let layout = Layout::load(&fixture("docker-ferrol-1-27-v3"), ".", &release("docker-ferrol-1-27-v3"), work.path()).expect("layout");
    assert_eq!(layout.install_stages(), [Some("cni"), Some("metrics-server")], "delete stages are not installed");
    let c = cluster("team-a", "gamma", "gamma.example.test", "10.20.0.0/16", None);
    let stages = layout.render_addons(&helm, &c, work.path()).await.expect("addons");
    let names: Vec<Option<&str>> = stages.iter().map(|s| s.name.as_deref()).collect();
    assert_eq!(names, [Some("cni"), Some("metrics-server")]);
    assert_eq!(field(&stages[0].objects, "ConfigMap", "cni-config")["data"]["cluster-name"], "gamma");
    assert_eq!(field(&stages[1].objects, "Deployment", "metrics-server")["metadata"]["labels"]["domain"], "gamma.example.test");
    assert_eq!(stages[1].objects[0].stage.as_deref(), Some("metrics-server"));
    assert_eq!(stages[1].objects[0].chart.as_deref(), Some("docker-ferrol-1-27-cluster-addon-v2/metrics-server"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_template_errors_name_the_file_and_line() {
    let helm = helm().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = cluster("team-a", "alpha", "10.0.0.1", "10.10.0.0/16", None);
    let table = [
        (
            "values: |\n  cni:\n    clusterName: {{ .Cluster.metadata.name | frobnicate }}\n",
            "cluster-addon-values.yaml:3: function `frobnicate` is not defined",
        ),
        (
            "values: |\n  a: 1\n\n  home: {{ env \"HOME\" }}\n",
            "cluster-addon-values.yaml:4: function `env` is not defined (slim-sprig's `env` is not provided: reads the environment",
        ),
        (
            "values: |\n  a: 1\n  b: 2\n  cni:\n    clusterName: {{ .Cluster.spec.topology.class | upper }}\n",
            "cluster-addon-values.yaml:5: error calling upper: invalid value; expected string",
        ),
        (
            "values: |\n  x: {{ index .InfraCluster.spec.loadBalancer.hosts 0 }}\n",
            "cluster-addon-values.yaml:2: error calling index: index of untyped nil",
        ),
    ];
    for (i, (template, want)) in table.iter().enumerate() {
        let root = copy_fixture("docker-ferrol-1-27-v2", &dir.path().join(i.to_string()));
        std::fs::write(root.join("cluster-addon-values.yaml"), template).expect("write");
        let rendered = match Layout::load(&root, ".", &release("docker-ferrol-1-27-v2"), dir.path()) {
            Err(e) => Err(e),
            Ok(layout) => layout.render_addons(&helm, &c, dir.path()).await.map(|_| ()),
        };
        let err = rendered.expect_err(want).to_string();
        assert!(err.starts_with(want), "\n got: {err}\nwant: {want}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_renders_no_value_with_a_warning_and_strict_templates_refuse_it() {
    let helm = helm().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = cluster("team-a", "alpha", "10.0.0.1", "10.10.0.0/16", None);
    let root = copy_fixture("docker-ferrol-1-27-v2", &dir.path().join("r"));
    let template = "values: |\n  cni:\n    clusterName: \"{{ .Cluster.spec.topology.class }}\"\n";
    std::fs::write(root.join("cluster-addon-values.yaml"), template).expect("write");
    let mut layout = Layout::load(&root, ".", &release("docker-ferrol-1-27-v2"), dir.path()).expect("layout");
    let rendered = layout.render_addons_reporting(&helm, &c, dir.path()).await.expect("renders as the operator would");
    // The values file says `clusterName: "<no value>"`, as the operator's would; helm then drops
    // `<no value>` from what the chart's own templates print.
    assert_eq!(field(&rendered.stages[0].objects, "ConfigMap", "cni-config")["data"]["cluster-name"], "");
    let w: Vec<String> = rendered.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("cluster-addon-values.yaml:3: `.Cluster.spec.topology` printed <no value>"), "{w:?}");
    layout.template_options.strict = true;
    let err = layout.render_addons(&helm, &c, dir.path()).await.expect_err("strict").to_string();
    assert!(err.starts_with("cluster-addon-values.yaml:3: `.Cluster.spec.topology` would print <no value>"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_release_is_permanent_and_a_helm_out_of_time_may_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A release in a subdirectory of its tree: errors name its files from the tree, once.
    let tree = dir.path().join("tree");
    let root = copy_fixture("docker-ferrol-1-27-v2", &tree.join("stacks"));
    std::fs::write(root.join("clusteraddon.yaml"), "addonStages:\n  AfterControlPlaneInitialized:\n    - {name: nope, action: apply}\n")
        .expect("write");
    let errs = Layout::load(&tree, "stacks/docker-ferrol-1-27-v2", &release("docker-ferrol-1-27-v2"), dir.path()).expect_err("no chart");
    let want = "stacks/docker-ferrol-1-27-v2/docker-ferrol-1-27-cluster-addon-v1/nope: stage `nope` of clusteraddon.yaml has no chart";
    assert!(errs.to_string().starts_with(want), "\n got: {errs}\nwant: {want}");
    assert_eq!((errs.is_transient(), errs.reason()), (false, "InvalidRelease"), "retried only when the release changes");

    // helm that cannot finish in time: the same render may succeed on a less busy machine.
    let layout = Layout::load(&fixture("docker-ferrol-1-27-v2"), ".", &release("docker-ferrol-1-27-v2"), dir.path()).expect("layout");
    let config = HelmConfig { path: Some(helm_path()), timeout: std::time::Duration::from_nanos(1), ..HelmConfig::default() };
    let slow = Helm::locate(&config).await.expect("helm runs");
    let errs = layout.render_cluster_class(&slow, "team-a").await.expect_err("no helm run finishes within a nanosecond");
    assert_eq!((errs.is_transient(), errs.reason()), (true, "HelmTimeout"), "{errs}");
    assert!(errs.to_string().contains("did not finish within 0s"), "{errs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_releases_are_reported_with_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table: &[(&str, &str, &str)] = &[
        (
            "metadata.yaml",
            "versions:\n  clusterStack: v2\n  components:\n    clusterAddon: v1\n",
            "metadata.yaml:2:3: versions.kubernetes: missing required field",
        ),
        (
            "metadata.yaml",
            "versions:\n  clusterStack: v2\n  kubernetes: v1.28.0\n  components:\n    clusterAddon: v1\n",
            "metadata.yaml:3:15: versions.kubernetes: `v1.28.0` does not match the stack `docker-ferrol-1-27`",
        ),
        (
            "metadata.yaml",
            "versions:\n  clusterStack: v2\n  kubernetes: v1.27.3\n  components:\n    clusterAddon: v9\n",
            "docker-ferrol-1-27-cluster-addon-v9: no cluster-addon chart: expected `docker-ferrol-1-27-cluster-addon-v9.tgz`",
        ),
        (
            "clusteraddon.yaml",
            "addonStages:\n  AfterControlPlaneInitialized:\n    - {name: nope, action: apply}\n",
            "docker-ferrol-1-27-cluster-addon-v1/nope: stage `nope` of clusteraddon.yaml has no chart",
        ),
    ];
    for (i, (file, text, want)) in table.iter().enumerate() {
        let root = copy_fixture("docker-ferrol-1-27-v2", &dir.path().join(i.to_string()));
        std::fs::write(root.join(file), text).expect("write");
        let err = Layout::load(&root, ".", &release("docker-ferrol-1-27-v2"), dir.path()).expect_err(want).to_string();
        assert!(err.starts_with(want), "\n got: {err}\nwant: {want}");
    }
    // An unpacked helm package (as a GitHub source lays out a `.tgz` asset) is found inside.
    let root = copy_fixture("docker-ferrol-1-27-v2", &dir.path().join("wrapped"));
    let class = root.join("docker-ferrol-1-27-cluster-class-v2");
    std::fs::rename(&class, dir.path().join("moved")).expect("move");
    std::fs::create_dir(&class).expect("mkdir");
    std::fs::rename(dir.path().join("moved"), class.join("docker-ferrol-1-27-cluster-class")).expect("wrap");
    let layout = Layout::load(&root, ".", &release("docker-ferrol-1-27-v2"), dir.path()).expect("wrapped chart");
    assert_eq!(layout.cluster_class.name, "docker-ferrol-1-27-cluster-class-v2/docker-ferrol-1-27-cluster-class");

    let err =
        Layout::load(&fixture("docker-ferrol-1-27-v2"), ".", &release("docker-ferrol-1-27-v3"), dir.path()).expect_err("tag mismatch");
    assert!(err.to_string().contains("versions.clusterStack: `v2` (v2) does not match the release tag, which is version v3"), "{err}");
}

/// Packs `dir`'s children (stage charts) into a gzipped tar at `out`.
fn tgz(dir: &Path, out: &Path) {
    let file = std::fs::File::create(out).expect("create tgz");
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::default()));
    builder.append_dir_all(".", dir).expect("append");
    builder.into_inner().expect("tar").finish().expect("gzip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packaged_addon_is_unpacked_once_for_many_clusters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = copy_fixture("docker-ferrol-1-27-v3", dir.path());
    let addon = root.join("docker-ferrol-1-27-cluster-addon-v2");
    tgz(&addon, &root.join("docker-ferrol-1-27-cluster-addon-v2.tgz"));
    std::fs::remove_dir_all(&addon).expect("rm addon dir");
    // The ClusterClass chart as a real `helm package`.
    let class = root.join("docker-ferrol-1-27-cluster-class-v3");
    let out = std::process::Command::new(helm_path()).arg("package").arg(&class).arg("-d").arg(&root).output().expect("helm package");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&class).expect("rm class dir");
    assert!(root.join("docker-ferrol-1-27-cluster-class-v3.tgz").is_file());

    // A helm wrapper that logs every invocation.
    let log = dir.path().join("helm.log");
    let wrapper = dir.path().join("helm-logged");
    common::write_script(&wrapper, &format!("#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n", log.display(), helm_path().display()));
    let helm = Helm::locate(&HelmConfig { renderer: HelmRenderer::Process, path: Some(wrapper), parallelism: 2, ..HelmConfig::default() })
        .await
        .expect("helm");

    let work = dir.path().join("work");
    let layout = Layout::load(&root, ".", &release("docker-ferrol-1-27-v3"), &work).expect("layout");
    assert_eq!(layout.unpacked, ["docker-ferrol-1-27-cluster-addon-v2.tgz"]);
    let class = layout.render_cluster_class(&helm, "team-a").await.expect("class from a package");
    assert!(class.iter().any(|o| o.kind == "ClusterClass" && o.name == "docker-ferrol-1-27-v3"));
    let layout = std::sync::Arc::new(layout);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (layout, helm, work) = (layout.clone(), helm.clone(), work.join(format!("c{i}")));
        tasks.spawn(async move {
            let c = cluster("team-a", &format!("c{i}"), &format!("c{i}.example.test"), "10.0.0.0/16", None);
            layout.render_addons(&helm, &c, &work).await.map(|s| (i, s))
        });
    }
    while let Some(done) = tokio::time::timeout(std::time::Duration::from_secs(120), tasks.join_next()).await.expect("in time") {
        let (i, stages) = done.expect("task").expect("render");
        assert_eq!(field(&stages[1].objects, "Deployment", "metrics-server")["metadata"]["labels"]["domain"], format!("c{i}.example.test"));
    }
    let calls = std::fs::read_to_string(&log).expect("log");
    let stage_charts: std::collections::BTreeSet<&str> = calls
        .lines()
        .filter(|l| l.contains("cluster-addon "))
        .filter_map(|l| l.split(' ').find(|w| w.contains("cluster-addon-v2")))
        .collect();
    let unpacked = work.join("docker-ferrol-1-27-cluster-addon-v2");
    let want: std::collections::BTreeSet<String> =
        ["cni", "metrics-server"].iter().map(|s| unpacked.join(s).display().to_string()).collect();
    assert_eq!(stage_charts.iter().map(|s| (*s).to_owned()).collect::<std::collections::BTreeSet<_>>(), want, "{calls}");
    assert_eq!(calls.lines().filter(|l| l.contains("cluster-addon ")).count(), 12, "two stages for each of six clusters");
}

#[test]
fn a_link_in_a_packaged_addon_is_refused_not_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = copy_fixture("docker-ferrol-1-27-v3", dir.path());
    let addon = root.join("docker-ferrol-1-27-cluster-addon-v2");
    // A template that is a link: unpacking would drop it and helm would render the stage without it.
    std::os::unix::fs::symlink("cni.yaml", addon.join("cni/templates/extra.yaml")).expect("symlink");
    let file = std::fs::File::create(root.join("docker-ferrol-1-27-cluster-addon-v2.tgz")).expect("create tgz");
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::default()));
    builder.follow_symlinks(false);
    builder.append_dir_all(".", &addon).expect("append");
    builder.into_inner().expect("tar").finish().expect("gzip");
    std::fs::remove_dir_all(&addon).expect("rm addon dir");

    let err = Layout::load(&root, ".", &release("docker-ferrol-1-27-v3"), &dir.path().join("work")).expect_err("a link").to_string();
    assert!(err.starts_with("docker-ferrol-1-27-cluster-addon-v2.tgz: entry "), "{err}");
    assert!(err.contains("extra.yaml\" is a link"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_without_kube_version_is_refused_at_start_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (version, ok) in [("v3.5.4+g1b5edb6", false), ("v2.17.0+ga690bad", false), ("v3.6.0+g7f2df64", true), ("v4.0.0+gabc", true)] {
        let fake = dir.path().join(format!("helm-{version}"));
        common::write_script(&fake, &format!("#!/bin/sh\necho {version}\n"));
        let located = Helm::locate(&HelmConfig { renderer: HelmRenderer::Process, path: Some(fake), ..HelmConfig::default() }).await;
        match (located, ok) {
            (Ok(h), true) => assert_eq!(h.version(), version),
            (Err(e), false) => assert!(e.to_string().contains("helm 3.6 or later is needed"), "{version}: {e}"),
            (other, _) => panic!("{version}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_helm_is_killed_at_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    let wrapper = dir.path().join("helm-hangs");
    common::write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\nif [ \"$1\" = version ]; then exec '{}' \"$@\"; fi\necho $$ > '{}'\nexec sleep 60\n",
            helm_path().display(),
            pid_file.display()
        ),
    );
    // (3 s: long enough for the shell to write its pid on a busy machine before it is killed.)
    let config = HelmConfig {
        renderer: HelmRenderer::Process,
        path: Some(wrapper),
        timeout: std::time::Duration::from_secs(3),
        ..HelmConfig::default()
    };
    let helm = Helm::locate(&config).await.expect("helm");
    let started = std::time::Instant::now();
    let err = helm.template("chart-v1", &["x".into()]).await.expect_err("times out");
    assert_eq!(err.to_string(), "helm template chart-v1 did not finish within 3s");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
    // The process is gone (or a zombie about to be reaped), not left running.
    let pid = std::fs::read_to_string(&pid_file).expect("pid").trim().to_owned();
    let state = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = || state().rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'));
    common::eventually("helm gone", std::time::Duration::from_secs(10), async || !running(), || format!("helm {pid}: {}", state())).await;
}

/// A config with one cluster-stack subscription over a Git repository, for three Clusters (beta
/// with its control plane object).
fn stack_config(dir: &Path, url: &str) -> Config {
    let mut beta = stack_cluster("team-a", "beta", "beta.example.test", "10.2.0.0/16");
    beta["controlPlane"] = json!({"spec": {"replicas": 5}});
    let sub = Sub::new("ferrol", "stacks")
        .clusterstack(STACK)
        .version(">=v2")
        .stack_cluster("team-a", "alpha", "alpha.example.test", "10.1.0.0/16")
        .cluster_entry(beta)
        .stack_cluster("team-b", "delta", "delta.example.test", "10.4.0.0/16");
    Config::new(dir).helm(&helm_path()).helm_set("parallelism", 2).git("stacks", url).sub(sub).directory()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_applies_cluster_classes_per_namespace_and_addons_per_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    publish(&repo, "docker-ferrol-1-27-v2");
    let config = stack_config(dir.path(), &repo.file_url()).write();
    let out = dir.path().join("out");

    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("synced: 3/3 clusters ready"), "{}", stdout(&o));
    assert!(common::stderr(&o).contains("helm found"), "{}", common::stderr(&o));
    // ClusterClass objects once per namespace, not per cluster.
    let class_files = files_under(&out.join("team-a/cluster-class"));
    assert_eq!(class_files.len(), 5, "{class_files:?}");
    assert!(class_files.iter().any(|f| f.ends_with("-clusterclass-docker-ferrol-1-27-v2.yaml")), "{class_files:?}");
    assert_eq!(files_under(&out.join("team-b/cluster-class")).len(), 5);
    assert_eq!(files_under(&out.join("team-a")), ["alpha", "beta", "cluster-class"]);
    let beta = std::fs::read_to_string(out.join("team-a/beta/03-deployment-metrics-server.yaml")).expect("beta addon");
    assert!(beta.contains("domain: beta.example.test") && beta.contains("replicas: 5"), "{beta}");
    assert!(beta.starts_with("# Source: docker-ferrol-1-27-cluster-addon/templates/metrics-server.yaml\n"), "{beta}");
    let alpha_cni = std::fs::read_to_string(out.join("team-a/alpha/02-configmap-cni-config.yaml")).expect("alpha cni");
    assert!(alpha_cni.contains("cluster-name: alpha") && alpha_cni.contains("pod-cidr: 10.1.0.0/16"), "{alpha_cni}");
    let st = status(&out, "team-a", "alpha");
    assert_eq!((st["reason"].as_str(), st["total"].as_u64()), (Some("Synced"), Some(8)), "{st}");
    let objects = st["objects"].as_array().expect("objects");
    assert!(objects.iter().any(|o| o["kind"] == "ClusterClass" && o["stage"] == "cluster-class"), "{st}");
    assert!(objects.iter().any(|o| o["kind"] == "Deployment" && o["chart"] == "docker-ferrol-1-27-cluster-addon-v1"), "{st}");

    // Same inputs: byte-identical, nothing rewritten.
    let before = snapshot(&out);
    assert_exit(&run_once(&config).await, 0);
    assert_eq!(snapshot(&out), before, "a second pass rewrote files");

    // v3 switches to a multi-stage addon: stages in their own directories, v2 objects pruned.
    publish(&repo, "docker-ferrol-1-27-v3");
    let o = run_once(&config).await;
    assert_exit(&o, 0);
    assert_eq!(files_under(&out.join("team-a/alpha")), ["cni", "metrics-server"]);
    assert_eq!(files_under(&out.join("team-a/alpha/cni")), ["01-configmap-cni-config.yaml"]);
    let ms = std::fs::read_to_string(out.join("team-b/delta/metrics-server/01-deployment-metrics-server.yaml")).expect("delta ms");
    assert!(ms.contains("domain: delta.example.test"), "{ms}");
    let class_files = files_under(&out.join("team-a/cluster-class"));
    assert!(
        class_files.iter().all(|f| !f.contains("v2")) && class_files.iter().any(|f| f.contains("docker-ferrol-1-27-v3")),
        "{class_files:?}"
    );
    let st = status(&out, "team-b", "delta");
    assert_eq!(st["appliedRelease"]["tag"], "docker-ferrol-1-27-v3");
    assert!(st["objects"].as_array().expect("objects").iter().any(|o| o["stage"] == "metrics-server"), "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_values_template_fails_its_clusters_and_keeps_the_last_good_release() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    publish(&repo, "docker-ferrol-1-27-v2");
    let config = stack_config(dir.path(), &repo.file_url()).write();
    let out = dir.path().join("out");
    assert_exit(&run_once(&config).await, 0);
    let before = snapshot(&out.join("team-a"));

    publish(&repo, "docker-ferrol-1-27-v3");
    repo.write(
        "docker-ferrol-1-27-cluster-addon-v2/cni/overwrite.yaml",
        "values: |\n  clusterName: {{ .Cluster.metadata.name | toToml }}\n",
    );
    repo.commit("broken overwrite");
    repo.move_tag("docker-ferrol-1-27-v3");
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let text = stdout(&o);
    assert!(text.contains("docker-ferrol-1-27-cluster-addon-v2/cni/overwrite.yaml:2: function `toToml` is not defined"), "{text}");
    assert_eq!(snapshot(&out.join("team-a")), before, "the last good release was touched");
    let st = status(&out, "team-a", "alpha");
    assert_eq!((st["reason"].as_str(), st["appliedRelease"]["tag"].as_str()), (Some("RenderFailed"), Some("docker-ferrol-1-27-v2")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_command_writes_cluster_classes_and_one_cluster_offline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    publish(&repo, "docker-ferrol-1-27-v3");
    let config = stack_config(dir.path(), &repo.file_url()).write();
    let cfg = config.to_string_lossy().into_owned();

    let preview = dir.path().join("preview");
    let o = common::stacksync(&["render", "--config", &cfg, "--out", &preview.to_string_lossy()]).await;
    assert_exit(&o, 0);
    assert_eq!(files_under(&preview), ["team-a", "team-b"], "no status directory");
    assert_eq!(files_under(&preview.join("team-a/beta")), ["cni", "metrics-server"]);
    let again = dir.path().join("again");
    assert_exit(&common::stacksync(&["render", "--config", &cfg, "--out", &again.to_string_lossy()]).await, 0);
    for (a, b) in fixture_tree(&preview).iter().zip(fixture_tree(&again)) {
        assert_eq!(a, &b, "render output differs between runs");
    }
    assert!(!dir.path().join("out").exists(), "render wrote to the target");

    // Offline: the source is gone, the cached release renders one cluster from its objects.
    std::fs::remove_dir_all(&repo.bare).expect("remove repo");
    let one = dir.path().join("one");
    let cluster_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/clusterstack/cluster-alpha.yaml");
    let o = common::stacksync(&["render", "--config", &cfg, "--out", &one.to_string_lossy(), "--cluster", &cluster_file.to_string_lossy()])
        .await;
    assert_exit(&o, 0);
    assert_eq!(files_under(&one.join("team-a")), ["alpha", "cluster-class"]);
    let cni = std::fs::read_to_string(one.join("team-a/alpha/cni/01-configmap-cni-config.yaml")).expect("cni");
    assert!(cni.contains("pod-cidr: 10.10.0.0/16"), "the file's Cluster wins over the config's: {cni}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_and_fetch_show_progress_on_a_terminal_and_nothing_in_a_pipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    publish(&repo, "docker-ferrol-1-27-v3");
    let config = stack_config(dir.path(), &repo.file_url()).write();
    let cfg = config.to_string_lossy().into_owned();
    let bin = env!("CARGO_BIN_EXE_stacksync");

    // On a terminal (util-linux's `script` gives the command a pseudo-terminal and copies what
    // it draws): the line says what is counted, done of total.
    let out = dir.path().join("tty");
    let line = format!("{bin} render --config {cfg} --out {}", out.display());
    let run = tokio::process::Command::new("script")
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .output();
    let o = tokio::time::timeout(std::time::Duration::from_secs(120), run).await.expect("in time").expect("script runs");
    let drawn = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{drawn}");
    assert!(drawn.contains("Clusters rendered [") && drawn.contains("/3 "), "a progress line: {drawn:?}");
    assert!(drawn.contains("rendered 3 clusters") || drawn.contains("team-a/alpha"), "then the output: {drawn:?}");

    // In a pipe: exactly what it printed before, no progress.
    let o = common::stacksync(&["render", "--config", &cfg, "--out", &dir.path().join("pipe").to_string_lossy()]).await;
    assert_exit(&o, 0);
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!stdout.contains("rendered [") && !stderr.contains("rendered [") && !stderr.contains('\r'), "{stdout}{stderr}");
    let o = common::stacksync(&["fetch", "--config", &cfg]).await;
    assert!(!String::from_utf8_lossy(&o.stderr).contains("prepared ["), "{o:?}");
}

/// (relative path, bytes) of every file under `dir`, sorted.
fn fixture_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = snapshot(dir)
        .into_iter()
        .map(|(p, _, _)| (p.strip_prefix(dir).expect("prefix").display().to_string(), std::fs::read(&p).expect("read")))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_helm_is_a_start_up_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config =
        stack_config(dir.path(), "file:///nonexistent.git").helm(Path::new("./no-such-helm")).helm_set("renderer", "process").write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let err = common::stderr(&o);
    assert!(err.contains("helm not found: `helm.path`") && err.contains("no-such-helm does not exist"), "{err}");
    assert!(!dir.path().join("cache").exists(), "nothing ran before the start-up check");
}

#[test]
fn config_fields_for_cluster_stacks_are_validated() {
    let base = "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: /c}\nhelm:\n  parallelism: 0\n  timeout: 5x\nsources:\n  - {name: s, git: {url: git://127.0.0.1/s.git}}\nsubscriptions:\n  - name: a\n    source: s\n    format: helmfile\n    clusters:\n      - name: cluster-class\n        cluster: [1]\n  - name: b\n    source: s\n    format: clusterstack\n    clusters:\n      - name: x\n        namespace: n\n        cluster: {metadata: {name: y}}\ntarget: {directory: /o}\n";
    let errs = stacksync::config::Config::parse(Path::new("/etc/s.yaml"), base).expect_err("invalid");
    let text: Vec<String> = errs.0.iter().map(ToString::to_string).collect();
    let want = [
        "/etc/s.yaml:5:16: helm.parallelism: expected a number from 1 to 64, found `0`",
        "/etc/s.yaml:6:12: helm.timeout:",
        "/etc/s.yaml:12:13: subscriptions[0].format: expected `manifests` or `clusterstack`, found `helmfile`",
        "/etc/s.yaml:14:15: subscriptions[0].clusters[0].name: cluster name `cluster-class` is reserved",
        "/etc/s.yaml:15:18: subscriptions[0].clusters[0].cluster: expected a mapping",
        "/etc/s.yaml:18:13: subscriptions[1].format: format `clusterstack` needs `stack`",
        "/etc/s.yaml:22:18: subscriptions[1].clusters[0].cluster.metadata.name: `y` differs from the cluster's name `x`",
    ];
    for w in want {
        assert!(text.iter().any(|t| t.starts_with(w)), "missing {w}\nin:\n{}", text.join("\n"));
    }
    let good = base
        .replace("  parallelism: 0\n  timeout: 5x\n", "  path: bin/helm\n  timeout: 90s\n")
        .replace("format: helmfile", "format: manifests")
        .replace("name: cluster-class\n        cluster: [1]", "name: c1")
        .replace("format: clusterstack\n", "format: clusterstack\n    stack: docker-ferrol-1-27\n")
        .replace("{name: y}", "{name: x, labels: {a: b}}");
    let config = stacksync::config::Config::parse(Path::new("/etc/s.yaml"), &good).expect("valid");
    assert_eq!(config.helm.path.as_deref(), Some(Path::new("/etc/bin/helm")));
    assert_eq!(config.helm.timeout, std::time::Duration::from_secs(90));
    assert_eq!(config.subscriptions[1].path, ".");
    assert_eq!(config.subscriptions[0].path, "manifests");
    assert_eq!(config.subscriptions[1].clusters[0].objects.cluster, Some(json!({"metadata": {"name": "x", "labels": {"a": "b"}}})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_error_fails_only_the_clusters_it_concerns() {
    let helm = helm().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = copy_fixture("docker-ferrol-1-27-v2", dir.path());
    std::fs::write(
        root.join("docker-ferrol-1-27-cluster-addon-v1/templates/broken.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.cni.clusterName | quote\n",
    )
    .expect("write");
    let layout = Layout::load(&root, ".", &release("docker-ferrol-1-27-v2"), dir.path()).expect("layout");
    let c = cluster("team-a", "alpha", "10.0.0.1", "10.10.0.0/16", None);
    let err = layout.render_addons(&helm, &c, dir.path()).await.expect_err("helm fails").to_string();
    assert!(
        err.starts_with(&format!(
            "docker-ferrol-1-27-cluster-addon-v1: helm template docker-ferrol-1-27-cluster-addon-v1 failed (library renderer, helm {}): ",
            stacksync::render::renderer::HELM_VERSION
        )),
        "{err}"
    );
    assert!(err.contains("broken.yaml"), "helm's error names the template: {err}");

    // End to end: one cluster lacks a field its values template needs; the others sync.
    let repo = ReleaseRepo::create(dir.path(), "stacks").expect("repo");
    publish(&repo, "docker-ferrol-1-27-v2");
    let config = stack_config(dir.path(), &repo.file_url()).edit_sub("ferrol", |s| s.cluster("team-b", "epsilon", &[])).write();
    let o = run_once(&config).await;
    assert_exit(&o, 1);
    let text = stdout(&o);
    assert!(text.contains("NOT SYNCED: 3/4 clusters ready"), "{text}");
    // As in Go: line 3 prints `<no value>` (a warning), line 7 indexes it and fails.
    assert!(text.contains("cluster-addon-values.yaml:7: error calling index: index of untyped nil"), "{text}");
    let out = dir.path().join("out");
    assert_eq!(status(&out, "team-b", "delta")["reason"], "Synced");
    assert_eq!(status(&out, "team-b", "epsilon")["reason"], "RenderFailed");
    assert!(!out.join("team-b/epsilon").exists());
}
