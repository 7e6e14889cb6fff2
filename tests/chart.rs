//! The Helm chart deploy/chart/stacksync, held to the kustomize base it packages:
//! - with default values the real `helm template` renders exactly the objects the real
//!   `kubectl kustomize deploy/` builds (less the Namespace, which `helm install
//!   --create-namespace` makes; the CRDs carry helm's keep policy), and each optional part the
//!   base with the component it mirrors; what the two share (CRDs, RBAC, Service, alerts,
//!   dashboard) is one file, linked from the chart into deploy/;
//! - `helm lint --strict` and the Kubernetes 1.35 schemas (testkit's API server, strict field
//!   validation) accept what every values file of the chart's `ci/` renders; a wrong value is
//!   refused with its path;
//! - scripts/publish.sh pushes the image and the chart to Debian's `docker-registry` on loopback
//!   and signs both with the real cosign: `cosign verify` passes with the key and fails with
//!   another; `helm install oci://…` on a real control plane (`testkit kube`) creates what the
//!   chart renders; `helm upgrade` to a version whose CRD has a new status field and whose
//!   ClusterRole a new rule writes no ClusterSync or StackRelease (same uid, resourceVersion,
//!   spec and status), `helm rollback` and `helm uninstall` keep them too, and an install made
//!   from install.yaml is adopted by `helm install` as docs/operations.md says;
//! - the daemon itself across `helm upgrade`: run as the chart's ServiceAccount, it syncs two
//!   Clusters under chart N, and after the upgrade to N+1 (new CRD field, new rule) a new process
//!   reconciles them Ready and writes nothing to them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

const NS: &str = "stacksync-system";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart_dir() -> PathBuf {
    repo().join("deploy/chart/stacksync")
}

fn helm() -> Command {
    let mut c = Command::new(common::helm_path());
    // helm's registry login, cache and config stay in the test's own places.
    c.env("HELM_CACHE_HOME", std::env::temp_dir().join("stacksync-chart-test-helm-cache"));
    c
}

fn kubectl_bin() -> PathBuf {
    common::tool("kubectl").expect("kubectl (scripts/install-tools.sh)")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}:\n{}\n{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml).expect("YAML").into_iter().filter(Value::is_object).collect()
}

/// `helm template` of the chart in `stacksync-system` with `args` (`-f FILE`, `--set …`).
fn template(chart: &Path, args: &[&str]) -> Vec<Value> {
    objects(&run(helm().args(["template", "stacksync"]).arg(chart).args(["--namespace", NS]).args(args)))
}

/// `kubectl kustomize` of the base with `components`, as an overlay would include them.
fn kustomize(components: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    // kustomize takes only relative paths: up to `/` from the overlay, then down to deploy/.
    let up = "../".repeat(dir.path().components().count() - 1);
    let deploy = format!("{up}{}", repo().join("deploy").display().to_string().trim_start_matches('/'));
    let components: String = components.iter().map(|c| format!("  - {deploy}/components/{c}\n")).collect();
    std::fs::write(dir.path().join("kustomization.yaml"), format!("resources:\n  - {deploy}\ncomponents:\n{components}")).expect("overlay");
    objects(&run(Command::new(kubectl_bin()).arg("kustomize").arg(dir.path())))
}

fn key(o: &Value) -> String {
    let m = &o["metadata"];
    format!("{}/{}/{}", o["kind"].as_str().unwrap_or(""), m["namespace"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or(""))
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        let k = key(&o);
        assert!(map.insert(k.clone(), o).is_none(), "{k} twice");
    }
    map
}

/// The chart's CRDs carry `helm.sh/resource-policy: keep` (so `helm uninstall` leaves every
/// ClusterSync and StackRelease); the base's do not. The one difference allowed, taken off here.
fn without_keep_policy(mut o: Value) -> Value {
    if o["kind"] == "CustomResourceDefinition" {
        let annotations = o["metadata"]["annotations"].as_object_mut().expect("a CRD of the chart has the keep annotation");
        assert_eq!(annotations.remove("helm.sh/resource-policy"), Some(json!("keep")));
        if annotations.is_empty() {
            o["metadata"].as_object_mut().expect("metadata").remove("annotations");
        }
    }
    o
}

#[test]
fn the_default_chart_renders_the_kustomize_base_and_each_option_its_component() {
    let cases: [(&[&str], &[&str]); 5] = [
        (&[], &[]),
        (&["runtime-hooks"], &["--set", "runtimeHook.enabled=true"]),
        (&["servicemonitor"], &["--set", "monitoring.serviceMonitor.enabled=true"]),
        (
            &["servicemonitor", "monitoring"],
            &["--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true"],
        ),
        (
            &["provider-docker", "provider-openstack", "preview"],
            &["--set", "providers.docker=true,providers.openstack=true,preview.enabled=true"],
        ),
    ];
    for (components, values) in cases {
        let mut base = by_key(kustomize(components));
        let namespace = base.remove(&format!("Namespace//{NS}")).expect("the base makes the Namespace");
        assert_eq!(namespace["metadata"]["name"], NS);
        let chart = by_key(template(&chart_dir(), values).into_iter().map(without_keep_policy).collect());
        let (only_base, only_chart): (Vec<_>, Vec<_>) =
            (base.keys().filter(|k| !chart.contains_key(*k)).collect(), chart.keys().filter(|k| !base.contains_key(*k)).collect());
        assert!(
            only_base.is_empty() && only_chart.is_empty(),
            "{components:?}: only in the base {only_base:?}, only in the chart {only_chart:?}"
        );
        for (k, want) in &base {
            assert_eq!(&chart[k], want, "{components:?} {values:?}: {k} differs from the base's");
        }
    }
}

/// install.yaml is generated: scripts/release-manifests.sh gives the base's objects, the
/// Namespace included, with the image pinned and nothing else changed; with a component, the
/// base with that component.
#[test]
fn install_yaml_is_the_base_with_the_image_pinned() {
    let image = format!("registry.example/platform/stacksync@sha256:{}", "ab".repeat(32));
    let script = repo().join("scripts/release-manifests.sh");
    let text = run(Command::new(&script).args(["--image", &image]));
    assert!(text.starts_with("# stacksync install.yaml, generated by scripts/release-manifests.sh"), "{}", &text[..80]);
    let mut install = by_key(objects(&text));
    let deployment = install.get_mut(&format!("Deployment/{NS}/stacksync")).expect("Deployment");
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str());
    container["image"] = json!("stacksync:latest");
    assert_eq!(install, by_key(kustomize(&[])));
    let with_docker = by_key(objects(&run(Command::new(&script).args(["--component", "provider-docker"]))));
    assert_eq!(with_docker, by_key(kustomize(&["provider-docker"])));
    let refused = Command::new(&script).args(["--image", "no-tag-or-digest"]).output().expect("run");
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("REPOSITORY@sha256:DIGEST"));
}

/// Every file the chart shares with deploy/ is a link into it (nothing copied by hand), and
/// `helm package` puts the linked content into the package, byte for byte.
#[test]
fn the_chart_links_deploy_files_and_packages_them_resolved() {
    let files = chart_dir().join("files");
    let mut linked = Vec::new();
    let mut stack = vec![files.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("files/") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            assert!(meta.file_type().is_symlink(), "{} is a copy: link it to deploy/ instead", path.display());
            let target = std::fs::canonicalize(&path).expect("resolves");
            let deploy = std::fs::canonicalize(repo().join("deploy")).expect("deploy");
            assert!(target.starts_with(&deploy) && !target.starts_with(deploy.join("chart")), "{} -> {}", path.display(), target.display());
            linked.push((path.strip_prefix(chart_dir()).expect("in the chart").to_path_buf(), target));
        }
    }
    let names: BTreeSet<String> = linked.iter().map(|(p, _)| p.display().to_string()).collect();
    assert!(names.contains("files/crds/stacksync.io.yaml") && names.contains("files/rbac.yaml"), "{names:?}");

    let out = tempfile::tempdir().expect("tempdir");
    run(helm().arg("package").arg(chart_dir()).arg("-d").arg(out.path()));
    let package = out.path().join(format!("stacksync-{}.tgz", env!("CARGO_PKG_VERSION")));
    run(Command::new("tar").arg("-xzf").arg(&package).arg("-C").arg(out.path()));
    for (path, target) in &linked {
        let packaged = std::fs::read(out.path().join("stacksync").join(path)).expect("in the package");
        assert_eq!(packaged, std::fs::read(target).expect("deploy file"), "{} in the package", path.display());
    }
    assert!(!out.path().join("stacksync/ci").exists(), "ci/ is for the tests, not the package");
    // The chart is the release's: its version is the crate's.
    let chart: Value = serde_saphyr::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml")).expect("YAML");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn a_wrong_value_is_refused_with_its_path() {
    for (set, path) in [
        ("replicas=two", "/replicas"),
        ("image.digest=latest", "/image/digest"),
        ("shards[0]=rollout", "/shards/0"),
        ("monitoring.serviceMonitor.enabeld=true", "/monitoring/serviceMonitor"),
        ("cache.persistence.size=lots", "/cache/persistence/size"),
        ("runtimeHook.port=70000", "/runtimeHook/port"),
        ("unknown=1", "unknown"),
        ("leaderElection.enabled=false", "more than one replica needs leaderElection.enabled"),
    ] {
        let out = helm().args(["template", "stacksync"]).arg(chart_dir()).args(["--set", set]).output().expect("helm");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(path), "--set {set}: {stderr}");
    }
}

/// The kinds of other projects' CRDs the chart renders with options on (cert-manager, the
/// Prometheus Operator, Cluster API's runtime extension): their schemas are not among the
/// Kubernetes 1.35 ones, so they are held to deploy/'s components instead (above).
const FOREIGN_KINDS: [&str; 5] = ["Certificate", "Issuer", "ServiceMonitor", "PrometheusRule", "ExtensionConfig"];

/// `helm lint --strict`, then every rendered object created on testkit's API server with
/// `kubectl apply --server-side --validate=strict`: the Kubernetes 1.35 schemas of the built-in
/// kinds and the chart's own CRDs, unknown fields refused.
#[tokio::test]
async fn lint_and_the_kubernetes_schemas_accept_every_ci_values_file() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci")).expect("ci/").map(|e| e.expect("entry").path()).collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let mut kinds = BTreeSet::new();
    for file in &files {
        let name = file.file_name().expect("name").to_string_lossy().into_owned();
        let lint = run(helm().args(["lint", "--strict"]).arg(chart_dir()).arg("-f").arg(file));
        assert!(lint.contains("0 chart(s) failed"), "{name}: {lint}");
        let rendered = template(&chart_dir(), &["-f", &file.to_string_lossy()]);
        let (foreign, checked): (Vec<Value>, Vec<Value>) =
            rendered.into_iter().partition(|o| FOREIGN_KINDS.contains(&o["kind"].as_str().unwrap_or_default()));
        kinds.extend(checked.iter().map(|o| o["kind"].as_str().unwrap_or_default().to_owned()));
        let server = fake_apiserver::ApiServer::start().await.expect("testkit's API server");
        let kubectl = fake_apiserver::kubectl::Kubectl::for_server(&server).expect("kubectl");
        let ok = |o: fake_apiserver::kubectl::Output, what: &str| {
            assert!(o.success, "{name}: {what}:\n{}{}", o.stdout, o.stderr);
            o.stdout
        };
        ok(kubectl.run(&["create", "namespace", NS], None).await.expect("kubectl"), "create namespace");
        let (crds, rest): (Vec<Value>, Vec<Value>) = checked.into_iter().partition(|o| o["kind"] == "CustomResourceDefinition");
        for batch in [crds, rest] {
            let stream: String = batch.iter().map(|o| format!("---\n{}\n", serde_json::to_string(o).expect("json"))).collect();
            let applied = ok(
                kubectl
                    .run(&["apply", "--server-side", "--validate=strict", "--field-manager=helm", "-f", "-"], Some(&stream))
                    .await
                    .expect("kubectl"),
                "apply",
            );
            assert_eq!(applied.lines().count(), batch.len(), "{name}: {applied}");
        }
        for o in &foreign {
            assert!(FOREIGN_KINDS.contains(&o["kind"].as_str().unwrap_or_default()), "{name}: {}", key(o));
        }
        server.stop().await;
    }
    // The matrix covers every kind the chart makes.
    for kind in [
        "Deployment",
        "StatefulSet",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ConfigMap",
        "Service",
        "CustomResourceDefinition",
        "ClusterRole",
        "Role",
    ] {
        assert!(kinds.contains(kind), "no values file of ci/ renders a {kind}: {kinds:?}");
    }
}

// ---- published, signed, installed, upgraded ------------------------------------------------

/// What the end-to-end test needs beyond helm and kubectl: Debian's docker-registry, skopeo
/// and umoci (scripts/ensure-programs.sh), cosign (scripts/build-cosign.sh), the real control
/// plane (scripts/build-realkube.sh). `None` (skip, loudly) when one is missing outside CI.
fn e2e_prerequisites() -> Option<PathBuf> {
    let mut missing = Vec::new();
    for program in ["/usr/bin/docker-registry", "/usr/bin/skopeo", "/usr/bin/umoci"] {
        if !Path::new(program).is_file() {
            missing.push(program.to_owned());
        }
    }
    let cosign = common::tool("cosign");
    if cosign.is_none() {
        missing.push("cosign (scripts/build-cosign.sh)".into());
    }
    if !testkit::kube::available() {
        missing.push("the real control plane (scripts/build-realkube.sh)".into());
    }
    if !missing.is_empty() {
        assert!(std::env::var_os("CI").is_none(), "missing under CI: {missing:?} (scripts/test.sh installs them)");
        eprintln!("SKIPPED: missing {missing:?}");
        return None;
    }
    cosign
}

/// The image to publish: the OCI layout scripts/test.sh builds (`STACKSYNC_IMAGE_OCI`, tag
/// `<version>`) with its SBOM, else a small image made here with umoci (an empty root
/// filesystem: publishing and signing do not look inside) and a small SPDX document.
fn image_layout(dir: &Path) -> (PathBuf, PathBuf) {
    let version = env!("CARGO_PKG_VERSION");
    if let Some(layout) = std::env::var_os("STACKSYNC_IMAGE_OCI").map(PathBuf::from).filter(|p| p.join("index.json").is_file()) {
        let sbom = layout.join("..").join(format!("stacksync-{version}.spdx.json"));
        if sbom.is_file() {
            return (layout, sbom);
        }
    }
    let layout = dir.join("oci");
    run(Command::new("umoci").arg("init").arg("--layout").arg(&layout));
    run(Command::new("umoci").arg("new").arg("--image").arg(format!("{}:{version}", layout.display())));
    let sbom = dir.join("small.spdx.json");
    let doc = json!({"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT", "name": "stacksync-small", "packages": []});
    std::fs::write(&sbom, doc.to_string()).expect("sbom");
    (layout, sbom)
}

/// `cosign …` with an empty key password and its state under `home` (never the user's).
fn cosign_cmd(cosign: &Path, home: &Path) -> Command {
    std::fs::create_dir_all(home).expect("cosign home");
    let mut c = Command::new(cosign);
    c.env("COSIGN_PASSWORD", "").env("HOME", home).env("TUF_ROOT", home.join("tuf")).env("SIGSTORE_NO_CACHE", "1").current_dir(home);
    c
}

/// A key pair made by `cosign generate-key-pair` in `home`: (private, public).
fn cosign_keys(cosign: &Path, home: &Path) -> (PathBuf, PathBuf) {
    run(cosign_cmd(cosign, home).arg("generate-key-pair"));
    (home.join("cosign.key"), home.join("cosign.pub"))
}

/// `cosign verify[-attestation] --key PUBLIC REF` as a release's user runs it against a
/// plain-HTTP registry without a transparency log.
fn cosign_verify(cosign: &Path, home: &Path, what: &str, public: &Path, reference: &str, extra: &[&str]) -> Output {
    cosign_cmd(cosign, home)
        .args([what, "--insecure-ignore-tlog=true", "--allow-insecure-registry", "--allow-http-registry", "--key"])
        .arg(public)
        .args(extra)
        .arg(reference)
        .output()
        .expect("cosign")
}

/// What scripts/publish.sh printed (digests.txt): `image`, `chart`, … by their first word.
struct Published(BTreeMap<String, String>);

impl Published {
    fn get(&self, what: &str) -> &str {
        self.0.get(what).unwrap_or_else(|| panic!("publish.sh printed no {what}: {:?}", self.0))
    }
}

fn publish(chart: &Path, registry: &str, key: &Path, image: &(PathBuf, PathBuf), version: &str, out: &Path, home: &Path) -> Published {
    let tools = common::tool("helm").map(|h| h.parent().and_then(Path::parent).expect("tools dir").to_path_buf());
    let mut cmd = Command::new(repo().join("scripts/publish.sh"));
    cmd.args(["--registry", registry, "--no-tlog", "--plain-http", "--version", version, "--image-tag", env!("CARGO_PKG_VERSION")])
        .arg("--key")
        .arg(key)
        .arg("--chart")
        .arg(chart)
        .arg("--image-layout")
        .arg(&image.0)
        .arg("--sbom")
        .arg(&image.1)
        .arg("--out")
        .arg(out)
        .env("COSIGN_PASSWORD", "")
        .env("HOME", home)
        .env("TUF_ROOT", home.join("tuf"));
    if let Some(tools) = tools {
        cmd.env("STACKSYNC_TOOLS_DIR", tools);
    }
    let stdout = run(&mut cmd);
    let printed = std::fs::read_to_string(out.join("digests.txt")).expect("digests.txt");
    assert_eq!(stdout, printed, "it prints what it writes");
    Published(printed.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
}

/// Every field of `want` is in `live` with the same value (the server adds defaults, status and
/// metadata of its own); `Err` names the first path that differs.
fn contains(live: &Value, want: &Value, path: &str) -> Result<(), String> {
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => {
            w.iter().try_for_each(|(k, v)| contains(l.get(k).unwrap_or(&Value::Null), v, &format!("{path}.{k}")))
        }
        (Value::Array(l), Value::Array(w)) if l.len() == w.len() => {
            l.iter().zip(w).enumerate().try_for_each(|(i, (l, w))| contains(l, w, &format!("{path}[{i}]")))
        }
        (l, w) if l == w => Ok(()),
        (l, w) => Err(format!("{path}: {l} on the server, {w} rendered")),
    }
}

/// The real kubectl against one control plane.
struct Kubectl(PathBuf);

impl Kubectl {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(&self.0)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl");
        child.stdin.take().expect("stdin").write_all(stdin.unwrap_or_default().as_bytes()).expect("write stdin");
        child.wait_with_output().expect("kubectl")
    }

    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(&[args, &["-o", "json"]].concat(), None)).expect("JSON")
    }
}

/// The fleet's records: every ClusterSync and StackRelease by kind/namespace/name, with what
/// an upgrade must not touch.
fn fleet(kubectl: &Kubectl) -> BTreeMap<String, Value> {
    let list = kubectl.json(&["get", "clustersyncs.stacksync.io,stackreleases.stacksync.io", "--all-namespaces"]);
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (key(o), json!({"uid": m["uid"], "resourceVersion": m["resourceVersion"], "spec": o["spec"], "status": o["status"]}))
        })
        .collect()
}

/// A ClusterSync of a synced Cluster, one of an adopted Cluster still held, one suspended, and
/// a StackRelease whose rollout is in its second wave: written as stacksync writes them (spec,
/// then the status subresource).
fn make_fleet(kubectl: &Kubectl) {
    kubectl.ok(&["create", "namespace", "fleet"], None);
    let release = json!({"commit": "0123456789abcdef0123456789abcdef01234567", "tag": "docker-ferrol-1-27-v3", "version": "v3"});
    let ready = |reason: &str, status: &str| json!([{"type": "Ready", "status": status, "reason": reason, "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"}]);
    let syncs = [
        (
            "alpha",
            json!({"synced": 40, "total": 40, "appliedRelease": release, "conditions": ready("Synced", "True"), "inventory": ["apps|Deployment|kube-system|cni"], "generated": ["|Secret|kube-system|ca|/data/ca.crt"]}),
        ),
        (
            "beta",
            json!({"synced": 0, "total": 40, "adopted": "cluster-stack-operator 2026-11-23T09:00:00Z", "conditions": ready("Adopted", "False")}),
        ),
        ("gamma", json!({"synced": 40, "total": 40, "appliedRelease": release, "conditions": ready("Suspended", "True")})),
    ];
    for (name, status) in syncs {
        let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "ClusterSync", "metadata": {"name": name, "namespace": "fleet"}, "spec": {"cluster": name, "subscription": "docker-ferrol"}});
        kubectl.ok(&["apply", "--server-side", "--field-manager=stacksync", "-f", "-"], Some(&body.to_string()));
        kubectl.ok(
            &[
                "patch",
                "clustersync",
                name,
                "-n",
                "fleet",
                "--subresource=status",
                "--type=merge",
                "-p",
                &json!({"status": status}).to_string(),
            ],
            None,
        );
    }
    let body = json!({"apiVersion": "stacksync.io/v1alpha1", "kind": "StackRelease", "metadata": {"name": "docker-ferrol-1-27-v4"}, "spec": {"source": "stacks", "subscription": "docker-ferrol", "tag": "docker-ferrol-1-27-v4"}});
    kubectl.ok(&["apply", "--server-side", "--field-manager=stacksync", "-f", "-"], Some(&body.to_string()));
    let status = json!({"status": {"cached": true, "commit": "89abcdef0123456789abcdef0123456789abcdef", "phase": "Available", "synced": 1, "total": 3, "verified": true, "version": "v4",
        "rollout": {"phase": "Running", "started": "2026-11-23T10:00:00Z", "wave": 2, "waves": 2, "done": 1, "total": 3, "summary": "wave 2 of 2: 1 of 3 Clusters done", "waveSummary": "1 of 2 moving",
            "plan": [{"phase": "Done", "clusters": ["fleet/alpha"]}, {"phase": "Running", "clusters": ["fleet/beta", "fleet/gamma"]}]}}});
    kubectl
        .ok(&["patch", "stackrelease", "docker-ferrol-1-27-v4", "--subresource=status", "--type=merge", "-p", &status.to_string()], None);
}

/// Chart version N+1: deploy/'s chart with a new ClusterSync status field in its CRD and a new
/// rule in its ClusterRole (the shared files copied, then changed: JSON is YAML).
fn next_chart(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("dir");
    let chart = dir.join("stacksync");
    run(Command::new("cp").arg("-RL").arg(chart_dir()).arg(&chart));
    let rewrite = |file: &str, change: &dyn Fn(&mut Value)| {
        let path = chart.join(file);
        let mut docs = objects(&std::fs::read_to_string(&path).expect("chart file"));
        docs.iter_mut().for_each(change);
        std::fs::write(&path, docs.iter().map(|d| format!("---\n{d}\n")).collect::<String>()).expect("write");
    };
    rewrite("files/crds/stacksync.io.yaml", &|crd| {
        if crd["metadata"]["name"] == "clustersyncs.stacksync.io" {
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["upgradeNote"] =
                json!({"type": "string", "description": "A field chart version N+1 adds."});
        }
    });
    rewrite("files/rbac.yaml", &|o| {
        if o["kind"] == "ClusterRole" {
            o["rules"]
                .as_array_mut()
                .expect("rules")
                .push(json!({"apiGroups": ["cluster.x-k8s.io"], "resources": ["machinedeployments"], "verbs": ["get", "list"]}));
        }
    });
    chart
}

fn next_version(version: &str) -> String {
    let (head, patch) = version.rsplit_once('.').expect("x.y.z");
    format!("{head}.{}", patch.parse::<u32>().expect("patch") + 1)
}

fn clustersync_schema(kubectl: &Kubectl) -> Value {
    kubectl.json(&["get", "crd", "clustersyncs.stacksync.io"])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"].clone()
}

fn clusterrole_rules(kubectl: &Kubectl) -> String {
    kubectl.json(&["get", "clusterrole", "stacksync"])["rules"].to_string()
}

#[tokio::test]
async fn a_signed_chart_from_the_registry_installs_upgrades_and_rolls_back_keeping_every_clustersync() {
    let Some(cosign) = e2e_prerequisites() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let registry = testkit::registry::Registry::start(&dir.path().join("registry"), testkit::registry::Auth::None).await.expect("registry");
    let prefix = format!("{}/platform", registry.host());
    let image = image_layout(dir.path());
    let (private, public) = cosign_keys(&cosign, &dir.path().join("keys"));
    let (_, other_public) = cosign_keys(&cosign, &dir.path().join("other-keys"));
    let version = env!("CARGO_PKG_VERSION");

    // Published: the image and the chart pushed, signed, the SBOM attested.
    let started = std::time::Instant::now();
    let v1 = publish(&chart_dir(), &prefix, &private, &image, version, &dir.path().join("out-1"), &home);
    eprintln!("published {} and {} in {:.1?}", v1.get("image"), v1.get("chart"), started.elapsed());
    assert!(v1.get("image").starts_with(&format!("{prefix}/stacksync@sha256:")));
    for reference in [v1.get("image"), v1.get("chart")] {
        let good = cosign_verify(&cosign, &home, "verify", &public, reference, &[]);
        assert!(good.status.success(), "{reference}: {}", String::from_utf8_lossy(&good.stderr));
        let bad = cosign_verify(&cosign, &home, "verify", &other_public, reference, &[]);
        assert!(
            !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("no matching signatures"),
            "{reference} with another key: {}",
            String::from_utf8_lossy(&bad.stderr)
        );
    }
    let attested = cosign_verify(&cosign, &home, "verify-attestation", &public, v1.get("image"), &["--type", "spdxjson"]);
    assert!(attested.status.success(), "{}", String::from_utf8_lossy(&attested.stderr));
    let envelope: Value =
        serde_json::from_slice(attested.stdout.split(|b| *b == b'\n').next().expect("one attestation")).expect("envelope");
    use base64::Engine as _;
    let statement: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD.decode(envelope["payload"].as_str().expect("payload")).expect("base64"),
    )
    .expect("statement");
    let sbom: Value = serde_json::from_slice(&std::fs::read(&image.1).expect("sbom")).expect("SBOM JSON");
    assert_eq!(statement["predicate"]["name"], sbom["name"], "the attested SBOM is the image's");
    // install.yaml runs the same image.
    let install_yaml = std::fs::read_to_string(dir.path().join("out-1/install.yaml")).expect("install.yaml");
    assert!(install_yaml.contains(&format!("image: {}\n", v1.get("image"))), "install.yaml runs another image");

    // Installed from the registry on a real control plane: everything the release renders is
    // there as rendered.
    let kube = testkit::kube::Kube::start(testkit::kube::Options::default()).await.expect("the real control plane");
    let kubeconfig = kube.kubeconfig().to_path_buf();
    let kubectl = Kubectl(kubeconfig.clone());
    let oci = format!("oci://{prefix}/charts/stacksync");
    let helm_kube =
        |args: &[&str]| run(helm().args(args).arg("--kubeconfig").arg(&kubeconfig).args(["--namespace", NS]).env("HOME", &home));
    helm_kube(&["install", "stacksync", &oci, "--version", version, "--plain-http", "--create-namespace", "--wait", "--timeout", "3m"]);
    let manifest = objects(&helm_kube(&["get", "manifest", "stacksync"]));
    assert_eq!(
        by_key(manifest.clone()).keys().cloned().collect::<Vec<_>>(),
        by_key(template(&chart_dir(), &["--set", &format!("image.repository={prefix}/stacksync")])).keys().cloned().collect::<Vec<_>>(),
        "the published chart renders what deploy/chart renders"
    );
    let stream: String = manifest.iter().map(|o| format!("---\n{o}\n")).collect();
    let live = serde_json::from_str::<Value>(&kubectl.ok(&["get", "-f", "-", "-o", "json"], Some(&stream))).expect("JSON");
    let live = by_key(live["items"].as_array().expect("items").clone());
    for want in &manifest {
        let k = key(want);
        let got = live.get(&k).unwrap_or_else(|| panic!("{k} is not on the server"));
        contains(got, want, &k).unwrap_or_else(|e| panic!("{e}"));
    }
    let deployment = &live[&format!("Deployment/{NS}/stacksync")];
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], v1.get("image"));
    assert_eq!(deployment["status"]["readyReplicas"], 2, "helm --wait waited for both replicas");

    // A fleet: synced, adopted and suspended Clusters' records, a rollout in its second wave.
    make_fleet(&kubectl);
    let before = fleet(&kubectl);
    assert_eq!(before.len(), 4, "{before:?}");
    assert!(clustersync_schema(&kubectl).get("upgradeNote").is_none());

    // N+1: a new status field and a new RBAC rule, published and signed the same way.
    let next = next_version(version);
    let v2 = publish(&next_chart(&dir.path().join("next")), &prefix, &private, &image, &next, &dir.path().join("out-2"), &home);
    assert!(cosign_verify(&cosign, &home, "verify", &public, v2.get("chart"), &[]).status.success());
    helm_kube(&["upgrade", "stacksync", &oci, "--version", &next, "--plain-http", "--wait", "--timeout", "3m"]);
    assert_eq!(fleet(&kubectl), before, "the upgrade wrote no ClusterSync or StackRelease (same uid, resourceVersion, spec, status)");
    assert_eq!(clustersync_schema(&kubectl)["upgradeNote"]["type"], "string", "the upgrade brought the CRD's new field");
    assert!(clusterrole_rules(&kubectl).contains("machinedeployments"), "the upgrade brought the new rule");
    // The new field is stored (not pruned) once the new CRD is there.
    kubectl.ok(
        &[
            "patch",
            "clustersync",
            "alpha",
            "-n",
            "fleet",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"upgradeNote":"kept"}}"#,
        ],
        None,
    );
    assert_eq!(kubectl.json(&["get", "clustersync", "alpha", "-n", "fleet"])["status"]["upgradeNote"], "kept");

    // Rolled back to N: the CRD and the ClusterRole are N's again, the records are still there.
    helm_kube(&["rollback", "stacksync", "1", "--wait", "--timeout", "3m"]);
    assert!(clustersync_schema(&kubectl).get("upgradeNote").is_none(), "the rollback restored N's CRD");
    assert!(!clusterrole_rules(&kubectl).contains("machinedeployments"), "the rollback restored N's rules");
    let after = fleet(&kubectl);
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for (k, was) in &before {
        let now = &after[k];
        assert_eq!((&now["uid"], &now["spec"]), (&was["uid"], &was["spec"]), "{k}");
        let mut status = now["status"].clone();
        // N's schema no longer has the field: the server prunes it when it reads the object.
        if let Some(s) = status.as_object_mut() {
            s.remove("upgradeNote");
        }
        assert_eq!(status, was["status"], "{k}: status after the rollback");
    }
    let history = helm_kube(&["history", "stacksync"]);
    assert_eq!(history.lines().filter(|l| l.contains("deployed")).count(), 1, "{history}");

    // Uninstalled: the CRDs stay (keep policy), and with them every record.
    helm_kube(&["uninstall", "stacksync", "--wait"]);
    assert!(kubectl.run(&["get", "deployment", "stacksync", "-n", NS], None).status.code() == Some(1), "the Deployment is gone");
    assert_eq!(fleet(&kubectl).keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "uninstall kept the CRDs and the records");

    // Moved the other way and back, as docs/operations.md says: install.yaml applied, then
    // taken over by a helm release without a delete (helm 4's --take-ownership; --force-conflicts
    // because kubectl's server-side apply owns the fields too).
    let install = dir.path().join("out-1/install.yaml");
    kubectl.ok(&["apply", "--server-side", "--force-conflicts", "-f", &install.to_string_lossy()], None);
    let uid = kubectl.json(&["get", "deployment", "stacksync", "-n", NS])["metadata"]["uid"].clone();
    let refused = helm()
        .args(["install", "stacksync", &oci, "--version", version, "--plain-http", "--namespace", NS, "--kubeconfig"])
        .arg(&kubeconfig)
        .env("HOME", &home)
        .output()
        .expect("helm");
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("exists and cannot be imported"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    helm_kube(&[
        "install",
        "stacksync",
        &oci,
        "--version",
        version,
        "--plain-http",
        "--take-ownership",
        "--force-conflicts",
        "--wait",
        "--timeout",
        "3m",
    ]);
    assert_eq!(kubectl.json(&["get", "deployment", "stacksync", "-n", NS])["metadata"]["uid"], uid, "adopted, not recreated");
    assert_eq!(fleet(&kubectl).keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    // And back to install.yaml: helm forgets the release (its Secrets), its objects stay.
    kubectl.ok(&["delete", "secret", "-n", NS, "-l", "owner=helm,name=stacksync"], None);
    assert_eq!(helm_kube(&["list", "--short"]).trim(), "", "helm forgot the release");
    kubectl.ok(&["apply", "--server-side", "--force-conflicts", "-f", &install.to_string_lossy()], None);
    assert_eq!(kubectl.json(&["get", "deployment", "stacksync", "-n", NS])["metadata"]["uid"], uid, "kept, not recreated");

    kube.stop();
    registry.stop().await;
}

/// A ConfigMap and a Deployment per Cluster, in the Cluster's own namespace (its workload
/// cluster is the same real server); kwok runs the Deployment's pod.
const ADDONS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addon-${cluster.name}\n  namespace: ${cluster.namespace}\ndata:\n  cluster: ${cluster.name}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ccm-${cluster.name}\n  namespace: ${cluster.namespace}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: ccm-${cluster.name}}\n  template:\n    metadata:\n      labels: {app: ccm-${cluster.name}}\n    spec:\n      containers:\n        - name: ccm\n          image: registry.example/ccm:1.0\n";

/// What a synced fleet is on the server: each workload object's resourceVersion and each
/// ClusterSync's record of what it applied.
async fn synced_state(t: &common::real::Tenant, clusters: &[&str]) -> BTreeMap<String, Value> {
    let kubectl = Kubectl(t.kubeconfig());
    let mut state = BTreeMap::new();
    for c in clusters {
        for (kind, name) in [("configmap", format!("addon-{c}")), ("deployment", format!("ccm-{c}"))] {
            let o = kubectl.json(&["get", kind, &name, "-n", &t.ns]);
            state.insert(
                format!("{kind}/{name}"),
                json!({"resourceVersion": o["metadata"]["resourceVersion"], "generation": o["metadata"]["generation"]}),
            );
        }
        let cs = t.cluster_sync(c).await.expect("ClusterSync");
        let s = &cs["status"];
        state.insert(format!("clustersync/{c}"), json!({"uid": cs["metadata"]["uid"], "appliedRelease": s["appliedRelease"], "inventory": s["inventory"], "objects": s["objects"]}));
    }
    state
}

/// The daemon itself across `helm upgrade`: chart N installed (taking over the CRDs the shared
/// control plane was started with), the daemon running as the chart's ServiceAccount
/// (impersonated: the real RBAC authorizer judges the chart's rules) syncs two Clusters and is
/// stopped, as a rolling update stops the old Pod; chart N+1 (a new CRD field, a new rule) is
/// applied with `helm upgrade`, and the daemon started again, as the new Pod, under N+1's rules:
/// it reconciles both Clusters Ready and writes nothing to them (every workload object's
/// resourceVersion kept, every object `unchanged`, the ClusterSyncs' applied release and
/// inventory kept), and nothing it does is forbidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_after_helm_upgrade_writes_nothing_to_a_synced_fleet() {
    let Some(t) = common::real::Tenant::new("chartupgrade").await else { return };
    let kubeconfig = t.kubeconfig();
    let helm_kube = |args: &[&str]| run(helm().args(args).arg("--kubeconfig").arg(&kubeconfig).args(["--namespace", NS]));
    let chart = chart_dir().display().to_string();
    helm_kube(&[
        "install",
        "stacksync",
        &chart,
        "--create-namespace",
        "--take-ownership",
        "--force-conflicts",
        "--wait",
        "--timeout",
        "3m",
    ]);

    let mut as_sa: Value = serde_json::from_str(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig")).expect("JSON kubeconfig");
    as_sa["users"][0]["user"]["as"] = json!(format!("system:serviceaccount:{NS}:stacksync"));
    let as_sa_file = t.dir.path().join("serviceaccount.kubeconfig");
    std::fs::write(&as_sa_file, as_sa.to_string()).expect("write");
    t.repo.release("v1.0.0", &[("manifests/addons.yaml", ADDONS)]);
    let clusters = ["alpha", "beta"];
    for c in clusters {
        t.add_cluster(c).await;
    }
    let config = t.config(|s| s.health_timeout("2m")).write();
    let text =
        std::fs::read_to_string(&config).expect("config").replace(&kubeconfig.display().to_string(), &as_sa_file.display().to_string());
    std::fs::write(&config, text).expect("config");
    let ready = async || {
        let mut all = true;
        for c in clusters {
            all &= t.ready(c).await.is_some_and(|(s, _)| s == "True");
        }
        all
    };
    let daemon = common::Daemon::start(&config, t.dir.path().join("n.log")).await;
    daemon.eventually("both Clusters Ready under chart N", std::time::Duration::from_secs(120), ready).await;
    let before = synced_state(&t, &clusters).await;
    assert!(!daemon.log().contains("forbidden"), "{}", daemon.log());
    daemon.stop().await;

    // The CRDs' fields are still co-owned by the manager that applied them first (testkit's, as
    // `kubectl apply --server-side` would be): changing them needs --force-conflicts, as
    // docs/operations.md says for a release that took over an install.
    let next = next_chart(&t.dir.path().join("next"));
    helm_kube(&[
        "upgrade",
        "stacksync",
        &next.display().to_string(),
        "--version",
        &next_version(env!("CARGO_PKG_VERSION")),
        "--force-conflicts",
        "--wait",
        "--timeout",
        "3m",
    ]);
    assert!(clusterrole_rules(&Kubectl(kubeconfig.clone())).contains("machinedeployments"), "chart N+1's rules are in place");

    let daemon = common::Daemon::start(&config, t.dir.path().join("n1.log")).await;
    let reconciled = format!("stacksync_reconciles_total{{subscription=\"{}\",result=\"ready\",reason=\"Synced\"}}", t.ns);
    daemon
        .eventually("both Clusters reconciled Ready by the new process", std::time::Duration::from_secs(120), async || {
            daemon.metric(&reconciled).await >= clusters.len() as f64
        })
        .await;
    assert_eq!(synced_state(&t, &clusters).await, before, "the new process wrote to the fleet");
    let objects = |action: &str| format!("stacksync_objects_total{{subscription=\"{}\",action=\"{action}\"}}", t.ns);
    assert!(daemon.metric(&objects("unchanged")).await >= 4.0, "{}", daemon.log());
    for action in ["created", "configured", "pruned", "failed"] {
        assert_eq!(daemon.metric(&objects(action)).await, 0.0, "{action} after the upgrade:\n{}", daemon.log());
    }
    assert!(!daemon.log().contains("forbidden"), "{}", daemon.log());
    daemon.stop().await;
    helm_kube(&["uninstall", "stacksync", "--wait"]);
    t.delete().await;
}
