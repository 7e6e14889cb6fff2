//! The library renderer (`stacksync-renderer`, helm's Go library in one long-lived process)
//! against its referee, the real `helm template` of the same helm version: fixture charts of our
//! own (tests/fixtures/renderer) that use what the public SCS charts and their upstream charts
//! use, and a seeded generative test of values trees and template shapes. Byte for byte, except
//! what helm makes at random (`genCA`, `genSignedCert`, `genPrivateKey`, `randAlphaNum`), which is
//! compared by shape: the same documents and keys, PEM blocks of the same types, random strings
//! of the same length.
//!
//! Both come from scripts/build-renderer.sh (scripts/test.sh runs it); without them these tests
//! fail (they never skip).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use stacksync::config::HelmConfig;
use stacksync::render::helm::{Error, Helm};
use stacksync::render::renderer::{self, HELM_VERSION, Template};

/// Upper bound of one referee run.
const REFEREE_TIMEOUT: Duration = Duration::from_secs(60);

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/renderer")
}

fn tools_dir() -> PathBuf {
    std::env::var_os("STACKSYNC_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/stacksync-tools"))
}

/// The real helm of the renderer's version.
fn referee() -> PathBuf {
    let path = std::env::var_os("STACKSYNC_HELM_REFEREE")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join(format!("helm-{HELM_VERSION}/helm")));
    assert!(path.is_file(), "the referee helm {} is missing: run scripts/build-renderer.sh", path.display());
    path
}

async fn library() -> Helm {
    match Helm::locate(&HelmConfig::default()).await {
        Ok(h) => h,
        Err(e) => panic!("the library renderer does not start (run scripts/build-renderer.sh): {e}"),
    }
}

fn args(text: &str) -> Vec<OsString> {
    text.split_whitespace().map(OsString::from).collect()
}

/// `helm template ARGS` by the referee: its standard output, or its error message as helm's
/// library says it (helm's CLI adds `Error: ` before it, and after a template's error a hint
/// about `--debug` that the library renderer has no use for).
async fn referee_template(home: &Path, args: &[OsString]) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new(referee());
    cmd.arg("template").args(args).kill_on_drop(true).stdin(std::process::Stdio::null());
    for (var, dir) in [("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")] {
        cmd.env(var, home.join(dir));
    }
    let out = tokio::time::timeout(REFEREE_TIMEOUT, cmd.output()).await.expect("the referee finishes").expect("the referee runs");
    if out.status.success() {
        return Ok(String::from_utf8(out.stdout).expect("UTF-8"));
    }
    let err = String::from_utf8_lossy(&out.stderr);
    // Its warnings come first (slog lines); the error is the last `Error: ` on.
    let err = err.rfind("Error: ").map_or(&*err, |at| &err[at + "Error: ".len()..]);
    Err(renderer::one_line(err.trim_end().trim_end_matches("\n\nUse --debug flag to render out invalid YAML")))
}

async fn library_template(helm: &Helm, args: &[OsString]) -> Result<String, String> {
    match helm.template("fixture", args).await {
        Ok(out) => Ok(out),
        Err(Error::Library(renderer::Error::Render { message, .. })) => Err(message),
        Err(e) => panic!("the library renderer failed other than helm does: {e}"),
    }
}

/// Replaces what helm makes at random by its shape: PEM blocks (as text, or base64 of it) by
/// their types.
fn shape(text: &str) -> String {
    let pem = regex::Regex::new(r"-----BEGIN ([A-Z ]+)-----(?s:.*?)-----END ([A-Z ]+)-----").expect("regex");
    let b64 = regex::Regex::new(r"[A-Za-z0-9+/]{64,}={0,2}").expect("regex");
    let text = b64.replace_all(text, |c: &regex::Captures<'_>| {
        match base64::engine::general_purpose::STANDARD.decode(&c[0]).ok().and_then(|d| String::from_utf8(d).ok()) {
            Some(d) if d.contains("-----BEGIN ") => format!("<base64 of {}>", pem.replace_all(&d, "<PEM $1/$2>")),
            _ => c[0].to_owned(),
        }
    });
    pem.replace_all(&text, "<PEM $1/$2>").into_owned()
}

/// Asserts `got` (the library renderer's) is `want` (the referee's), random parts by shape: a
/// line may differ only as `key: <random>` with the same key and a value of the same length that
/// differs only in letters, digits, `.` and `/` (random strings, UUIDs, bcrypt hashes).
fn assert_same(case: &str, got: &str, want: &str) {
    if got == want {
        return;
    }
    let (got_shape, want_shape) = (shape(got), shape(want));
    let (g, w): (Vec<&str>, Vec<&str>) = (got_shape.lines().collect(), want_shape.lines().collect());
    let random = |a: &str, b: &str| {
        let (Some((ka, va)), Some((kb, vb))) = (a.split_once(": "), b.split_once(": ")) else { return false };
        // Random characters (letters, digits, and bcrypt's `./`) where the two differ.
        let random_char = |c: u8| c.is_ascii_alphanumeric() || c == b'.' || c == b'/';
        ka == kb && va.len() == vb.len() && va.bytes().zip(vb.bytes()).all(|(x, y)| x == y || (random_char(x) && random_char(y)))
    };
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(a == b || random(a, b), "{case}: line {} differs:\n library: {a}\n referee: {b}", i + 1);
    }
    assert_eq!(g.len(), w.len(), "{case}: the library renderer printed {} lines, the referee {}", g.len(), w.len());
    assert!(got.contains("-----BEGIN") == want.contains("-----BEGIN") || got_shape.contains("<"), "{case}: shapes");
}

/// Renders `args` with both and compares; returns the referee's output or error.
async fn differential(helm: &Helm, home: &Path, case: &str, args: &[OsString]) -> Result<String, String> {
    let (got, want) = (library_template(helm, args).await, referee_template(home, args).await);
    match (&got, &want) {
        (Ok(g), Ok(w)) => assert_same(case, g, w),
        // helm lists a schema's violations in an order that varies from run to run.
        (Err(g), Err(w)) if g.starts_with("values don't meet the specifications") => {
            let sorted = |m: &str| {
                let mut lines: Vec<String> = m.split(" | ").map(str::to_owned).collect();
                lines.sort();
                lines
            };
            assert_eq!(sorted(g), sorted(w), "{case}: the errors differ");
        }
        (Err(g), Err(w)) => assert_eq!(g, w, "{case}: the errors differ"),
        _ => panic!("{case}: the library renderer says {got:?}, the referee {want:?}"),
    }
    want
}

#[tokio::test]
async fn the_fixture_charts_render_as_the_referee_renders_them() {
    let helm = library().await;
    assert_eq!(helm.version().split('+').next(), Some(HELM_VERSION));
    let home = tempfile::tempdir().expect("tempdir");
    let dir = fixtures();
    let chart = dir.join("network");
    let values = dir.join("values");
    let c = chart.display();
    let cases = [
        (
            "an addon render as stacksync passes it",
            format!(
                "--include-crds --kube-version v1.32.4 cluster-addon {c} --namespace kube-system -f {}",
                values.join("cluster-7.yaml").display()
            ),
        ),
        ("defaults, no CRDs, helm's default Kubernetes", format!("stack {c} --namespace team-a")),
        ("an old Kubernetes", format!("--kube-version 1.28.2 cluster-addon {c} --namespace kube-system")),
        (
            "two values files, coalesced in order",
            format!(
                "cluster-addon {c} --namespace kube-system -f {} -f {}",
                values.join("cluster-7.yaml").display(),
                values.join("overrides.yaml").display()
            ),
        ),
        ("a schema violation", format!("x {c} --namespace a -f {}", values.join("bad-schema.yaml").display())),
        ("a required value deleted by null", format!("x {c} --namespace a -f {}", values.join("no-cluster-name.yaml").display())),
        ("a Kubernetes older than the chart's kubeVersion", format!("--kube-version v1.27.0 x {c} --namespace a")),
        ("an invalid Kubernetes version", format!("--kube-version one.two x {c} --namespace a")),
        ("a library chart", format!("x {}/charts/common --namespace a", c)),
        ("a missing dependency", format!("x {} --namespace a", dir.join("missing-dependency").display())),
        ("a template error", format!("x {} --namespace a", dir.join("broken").display())),
        ("a values file that is not YAML", format!("x {c} --namespace a -f {}", values.join("not-yaml.txt").display())),
        ("no such chart", format!("x {}/nothing-here --namespace a", dir.display())),
    ];
    for (case, line) in &cases {
        differential(&helm, home.path(), case, &args(line)).await.ok();
    }
    let first = differential(&helm, home.path(), "first", &args(&cases[0].1)).await.expect("renders");
    assert!(first.contains("# Source: network/crds/endpoints.yaml") && first.contains("helm.sh/hook"), "{first}");
    assert_eq!(helm.runs(), cases.len() as u64 + 1, "every render ran in the renderer");
    assert_eq!(helm.library().map(renderer::Renderer::starts), Some(1), "one renderer process for all of them");
}

#[tokio::test]
async fn a_packaged_chart_and_a_chart_rewritten_in_place_render_as_the_referee_renders_them() {
    let helm = library().await;
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    // The chart as `helm package` makes it.
    let out = std::process::Command::new(referee())
        .arg("package")
        .arg(fixtures().join("network"))
        .arg("-d")
        .arg(work.path())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .output()
        .expect("helm package");
    assert!(out.status.success(), "helm package: {}", String::from_utf8_lossy(&out.stderr));
    let tgz = work.path().join("network-1.4.2.tgz");
    differential(&helm, home.path(), "a .tgz", &args(&format!("--include-crds p {} --namespace n", tgz.display()))).await.expect("renders");

    // A chart changed under the same path is loaded again, not answered from the cache.
    let chart = work.path().join("small");
    std::fs::create_dir_all(chart.join("templates")).expect("mkdir");
    std::fs::write(chart.join("Chart.yaml"), "apiVersion: v2\nname: small\nversion: 0.1.0\n").expect("write");
    let template = chart.join("templates/cm.yaml");
    let line = format!("s {} --namespace n", chart.display());
    for round in 0..3 {
        std::fs::write(&template, format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: round-{round}\n")).expect("write");
        let out = differential(&helm, home.path(), &format!("round {round}"), &args(&line)).await.expect("renders");
        assert!(out.contains(&format!("round-{round}")), "{out}");
    }
}

#[tokio::test]
async fn a_collected_release_s_charts_are_dropped_and_a_slow_or_dead_renderer_is_restarted() {
    let helm = library().await;
    let library = helm.library().expect("the library renderer").clone();
    let chart = fixtures().join("network");
    let template = Template::from_args(&args(&format!("r {} --namespace n", chart.display()))).expect("arguments");
    library.render("release-a", "network", &template, Duration::from_secs(60)).await.expect("renders");
    assert_eq!(library.retain(&["release-a".to_owned()]).await, Some(0), "its release is kept: so is the chart");
    assert_eq!(library.retain(&[]).await, Some(1), "its release is gone: so is the chart");

    // A render that cannot finish in time: the renderer is killed, the error is transient, and
    // the next render starts a new renderer.
    let work = tempfile::tempdir().expect("tempdir");
    let slow = work.path().join("slow");
    std::fs::create_dir_all(slow.join("templates")).expect("mkdir");
    std::fs::write(slow.join("Chart.yaml"), "apiVersion: v2\nname: slow\nversion: 0.1.0\n").expect("write");
    std::fs::write(slow.join("templates/loop.yaml"), "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}").expect("write");
    let slow_template = Template::from_args(&args(&format!("r {} --namespace n", slow.display()))).expect("arguments");
    let started = std::time::Instant::now();
    let err = library.render("", "slow", &slow_template, Duration::from_secs(1)).await.expect_err("times out");
    assert!(started.elapsed() < Duration::from_secs(10), "the deadline holds: {:?}", started.elapsed());
    assert!(matches!(err, renderer::Error::Timeout { .. }) && err.is_transient(), "{err}");
    assert_eq!(err.to_string(), "helm template slow did not finish within 1s (library renderer)");
    library.render("", "network", &template, Duration::from_secs(60)).await.expect("renders after the restart");
    assert_eq!(library.starts(), 2);

    // A renderer that dies (an out-of-memory kill): the render that meets it fails as transient,
    // the next one starts a new renderer.
    let pid = library.pid().await.expect("a renderer runs");
    let killed = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill");
    assert!(killed.success());
    if let Err(e) = library.render("", "network", &template, Duration::from_secs(60)).await {
        assert!(matches!(e, renderer::Error::Crashed { .. }) && e.is_transient(), "{e}");
    }
    library.render("", "network", &template, Duration::from_secs(60)).await.expect("renders after the crash");
    assert_eq!(library.starts(), 3);

    // What the library renderer does not take is refused by name, not rendered differently.
    let err = helm.template("network", &args(&format!("r {} --set a=b", chart.display()))).await.expect_err("refused");
    assert_eq!(err.reason(), "RendererRefused");
    assert!(err.to_string().contains("`--set`") && err.to_string().contains("helm.renderer: process"), "{err}");
}

#[tokio::test]
async fn a_missing_renderer_is_said_with_what_to_do() {
    let config = HelmConfig { renderer_path: Some("/nonexistent/stacksync-renderer".into()), ..HelmConfig::default() };
    let err = Helm::locate(&config).await.expect_err("missing");
    assert_eq!((err.reason(), err.is_transient()), ("RendererNotFound", false));
    let text = err.to_string();
    assert!(
        text.contains("`helm.rendererPath` /nonexistent/stacksync-renderer does not exist")
            && text.contains("scripts/build-renderer.sh")
            && text.contains("helm.renderer: process"),
        "{text}"
    );
}

#[test]
fn the_renderer_is_chosen_in_the_config() {
    let config = |helm: &str| {
        format!(
            "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {{dir: /c}}\nhelm:\n{helm}sources:\n  - {{name: s, git: {{url: git://127.0.0.1/s.git}}}}\nsubscriptions: []\ntarget: {{directory: /o}}\n"
        )
    };
    let parsed =
        stacksync::config::Config::parse(Path::new("/etc/s.yaml"), &config("  renderer: process\n  rendererPath: bin/r\n")).expect("valid");
    assert_eq!(parsed.helm.renderer, stacksync::config::HelmRenderer::Process);
    assert_eq!(parsed.helm.renderer_path.as_deref(), Some(Path::new("/etc/bin/r")));
    let default = stacksync::config::Config::parse(Path::new("/etc/s.yaml"), &config("  timeout: 30s\n")).expect("valid");
    assert_eq!(default.helm.renderer, stacksync::config::HelmRenderer::Library);
    let errs = stacksync::config::Config::parse(Path::new("/etc/s.yaml"), &config("  renderer: fast\n")).expect_err("invalid");
    let text: Vec<String> = errs.0.iter().map(ToString::to_string).collect();
    assert_eq!(text, ["/etc/s.yaml:5:13: helm.renderer: expected `library` or `process`, found `fast`"]);
}

/// A small deterministic generator (xorshift64*), so that a failing case is found again by its
/// seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KEYS: &[&str] = &["a", "b", "name", "enabled", "global", "list", "x-y", "port", "nested", "CamelCase"];
const SCALARS: &[&str] = &[
    "1",
    "0",
    "-3",
    "1.5",
    "1e3",
    "007",
    "0x1F",
    "true",
    "false",
    "yes",
    "no",
    "on",
    "~",
    "null",
    "\"\"",
    "\"a: b\"",
    "plain text",
    "\"#not a comment\"",
    "'single'",
    "\"ünï\"",
    "\"line\\nbreak\"",
    "[]",
    "{}",
    "[1, two, 3.0]",
];

/// A random YAML values tree `depth` levels deep, indented by `indent`.
fn values_tree(rng: &mut Rng, depth: usize, indent: usize) -> String {
    let mut out = String::new();
    let pad = " ".repeat(indent);
    let mut keys: Vec<&str> = (0..1 + rng.below(4)).map(|_| rng.pick(KEYS)).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        match rng.below(if depth == 0 { 2 } else { 5 }) {
            0 | 1 => out.push_str(&format!("{pad}{key}: {}\n", rng.pick(SCALARS))),
            2 => {
                out.push_str(&format!("{pad}{key}:\n"));
                for _ in 0..1 + rng.below(3) {
                    out.push_str(&format!("{pad}  - {}\n", rng.pick(SCALARS)));
                }
            }
            _ => out.push_str(&format!("{pad}{key}:\n{}", values_tree(rng, depth - 1, indent + 2))),
        }
    }
    out
}

/// Templates over `.Values` at random paths, in the shapes charts use.
fn template_shapes(rng: &mut Rng) -> String {
    // `.Values` is helm's own map type, which sprig's `dig` does not take: a plain copy.
    let mut out = String::from("{{- $v := fromYaml (toYaml .Values) }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fuzz\ndata:\n");
    for i in 0..6 {
        let path: Vec<&str> = (0..1 + rng.below(2)).map(|_| rng.pick(&["a", "b", "name", "nested", "list", "port"])).collect();
        let dotted = path.join(".");
        // A value at one or two levels, the first level only when it is a map (`dig` fails on
        // anything else).
        let get = match path.as_slice() {
            [k1, k2] => format!("(dig {k2:?} nil (ternary (index $v {k1:?}) dict (kindIs \"map\" (index $v {k1:?}))))"),
            _ => format!("(dig {:?} nil $v)", path[0]),
        };
        let shape = match rng.below(7) {
            0 => format!("{get} | toJson | quote"),
            1 => format!("{get} | default \"none\" | toString | quote"),
            2 => format!("{get} | toYaml | quote"),
            3 => format!("(kindOf {get}) | quote"),
            4 => format!("(printf \"%v\" {get}) | quote"),
            5 => format!("(tpl (toYaml {get}) .) | quote"),
            _ => format!("(include \"fuzz.walk\" {get}) | quote"),
        };
        out.push_str(&format!("  v{i}-{}: {{{{ {shape} }}}}\n", dotted.replace('.', "-")));
    }
    out.push_str("  all: {{ toJson .Values | quote }}\n");
    out
}

const FUZZ_HELPERS: &str = r#"{{- define "fuzz.walk" -}}
{{- if kindIs "map" . -}}{{- range $k, $v := . }}[{{ $k }}={{ include "fuzz.walk" $v }}]{{ end -}}
{{- else if kindIs "slice" . -}}{{- range . }}({{ include "fuzz.walk" . }}){{ end -}}
{{- else -}}{{ . }}{{- end -}}
{{- end -}}
"#;

/// Writes a fuzz chart: random defaults and templates, a subchart under two aliases with
/// conditions, and a template of the subchart's values (coalesced with the parent's and globals).
fn fuzz_chart(rng: &mut Rng, dir: &Path) {
    let sub = dir.join("charts/part");
    std::fs::create_dir_all(dir.join("templates")).expect("mkdir");
    std::fs::create_dir_all(sub.join("templates")).expect("mkdir");
    let chart = "apiVersion: v2\nname: fuzz\nversion: 0.1.0\ndependencies:\n  - {name: part, version: 0.1.0, alias: one, condition: one.enabled}\n  - {name: part, version: 0.1.0, alias: two, condition: two.enabled}\n";
    std::fs::write(dir.join("Chart.yaml"), chart).expect("write");
    std::fs::write(dir.join("values.yaml"), values_tree(rng, 3, 0)).expect("write");
    std::fs::write(dir.join("templates/_helpers.tpl"), FUZZ_HELPERS).expect("write");
    std::fs::write(dir.join("templates/shapes.yaml"), template_shapes(rng)).expect("write");
    std::fs::write(sub.join("Chart.yaml"), "apiVersion: v2\nname: part\nversion: 0.1.0\n").expect("write");
    std::fs::write(sub.join("values.yaml"), values_tree(rng, 2, 0)).expect("write");
    std::fs::write(
        sub.join("templates/values.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Chart.Name }}\ndata:\n  values: {{ toJson .Values | quote }}\n",
    )
    .expect("write");
}

#[tokio::test]
async fn generated_values_and_templates_render_as_the_referee_renders_them() {
    const CHARTS: usize = 4;
    const CASES: usize = 48;
    let seed = std::env::var("STACKSYNC_RENDERER_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_57AC_u64);
    let mut rng = Rng(seed);
    let helm = library().await;
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    for c in 0..CHARTS {
        fuzz_chart(&mut rng, &work.path().join(format!("chart-{c}")));
    }
    let started = std::time::Instant::now();
    let mut rendered = 0;
    // Each chart rendered again and again with other values: what one render changes of a
    // cached chart must not leak into the next.
    for case in 0..CASES {
        let chart = work.path().join(format!("chart-{}", rng.below(CHARTS)));
        let file = work.path().join(format!("values-{case}.yaml"));
        let mut values = values_tree(&mut rng, 3, 0);
        for alias in ["one", "two"] {
            match rng.below(3) {
                0 => values.push_str(&format!("{alias}:\n  enabled: {}\n  a: null\n", rng.below(2) == 0)),
                1 => values.push_str(&format!("{alias}:\n{}", values_tree(&mut rng, 1, 2))),
                _ => {}
            }
        }
        if rng.below(2) == 0 {
            values.push_str(&format!("global:\n{}", values_tree(&mut rng, 1, 2)));
        }
        std::fs::write(&file, &values).expect("write");
        let line = format!("f{case} {} --namespace ns -f {}", chart.display(), file.display());
        let case = format!("seed {seed:#x} case {case}, values:\n{values}");
        let r = differential(&helm, home.path(), &case, &args(&line)).await;
        if std::env::var_os("STACKSYNC_RENDERER_DEBUG").is_some() {
            eprintln!("{case}: {r:?}");
        }
        rendered += usize::from(r.is_ok());
        assert!(started.elapsed() < Duration::from_secs(240), "bounded time");
    }
    assert!(rendered >= CASES / 2, "only {rendered} of {CASES} cases rendered: the generator makes too many broken charts");
    // Several renders in flight on the one renderer at once answer each its own.
    let chart = work.path().join("chart-0");
    let line = args(&format!("many {} --namespace ns", chart.display()));
    let want = referee_template(home.path(), &line).await;
    let renders = (0..8).map(|_| library_template(&helm, &line));
    for got in futures_util::future::join_all(renders).await {
        assert_eq!(got, want);
    }
}

/// The fields two renders of the same arguments differ in, as `kind/name pointer` lines
/// (documents paired in order: the same chart and values print them in the same order).
fn differing(a: &str, b: &str) -> std::collections::BTreeSet<String> {
    let (a, b) = (kubeyaml::values(a).expect("YAML"), kubeyaml::values(b).expect("YAML"));
    assert_eq!(a.len(), b.len(), "both renders print the same documents");
    let mut out = std::collections::BTreeSet::new();
    for (x, y) in a.iter().zip(&b) {
        let id = format!("{}/{}", x["kind"].as_str().unwrap_or_default(), x["metadata"]["name"].as_str().unwrap_or_default());
        assert_eq!(id, format!("{}/{}", y["kind"].as_str().unwrap_or_default(), y["metadata"]["name"].as_str().unwrap_or_default()));
        out.extend(applier::ssa::generated_fields(x, y).into_iter().map(|p| format!("{id} {p}")));
    }
    out
}

#[tokio::test]
async fn a_probe_render_differs_from_a_real_one_exactly_where_two_real_renders_do() {
    let helm = library().await;
    assert!(helm.probes());
    let home = tempfile::tempdir().expect("tempdir");
    let dir = fixtures();
    let cases = [
        format!("--include-crds --kube-version v1.32.4 cluster-addon {} --namespace kube-system", dir.join("generators").display()),
        format!(
            "--include-crds --kube-version v1.32.4 cluster-addon {} --namespace kube-system -f {}",
            dir.join("network").display(),
            dir.join("values/cluster-7.yaml").display()
        ),
    ];
    for line in &cases {
        let args = args(line);
        let real = differential(&helm, home.path(), line, &args).await.expect("renders");
        let again = library_template(&helm, &args).await.expect("renders");
        let probe = helm.probe_in("fixture", "fixture", &args).await.expect("the library renderer probes").expect("the probe renders");
        let by_two_real = differing(&real, &again);
        assert!(!by_two_real.is_empty(), "{line}: the fixture generates");
        assert_eq!(differing(&real, &probe), by_two_real, "{line}: the probe finds the fields two real renders find");
        assert!(!probe.contains("BEGIN CERTIFICATE-----\nMII"), "{line}: a probe generates no certificate:\n{probe}");
    }
    let generators = differing(
        &library_template(&helm, &args(&cases[0])).await.expect("renders"),
        &library_template(&helm, &args(&cases[0])).await.expect("renders"),
    );
    for field in [
        "Secret/webhook-serving /data/ca.crt",
        "Secret/webhook-serving /data/tls.key",
        "ValidatingWebhookConfiguration/webhook /webhooks/0/clientConfig/caBundle",
        "Deployment/webhook /spec/template/metadata/annotations/checksum~1ca",
        "Secret/keys /stringData/bcrypt",
        "Secret/keys /stringData/htpasswd",
        "Secret/keys /stringData/leaf.crt",
        "Secret/keys /stringData/token",
    ] {
        assert!(generators.contains(field), "{field} is generated: {generators:?}");
    }
    for fixed in ["Deployment/webhook /spec/template/metadata/annotations/checksum~1values", "Secret/keys /stringData/user"] {
        assert!(!generators.iter().any(|g| g.starts_with(fixed)), "{fixed} is not generated: {generators:?}");
    }

    // A template that reads a generated certificate back cannot run on a probe's stand-ins: the
    // probe fails (and stacksync renders for real twice instead), the real render does not.
    let reads_back = args(&format!("x {} --namespace a", dir.join("reads-back").display()));
    differential(&helm, home.path(), "reads back", &reads_back).await.expect("renders");
    let probe = helm.probe_in("fixture", "fixture", &reads_back).await.expect("the library renderer probes");
    assert!(
        matches!(&probe, Err(Error::Library(renderer::Error::Render { message, .. })) if message.contains("buildCustomCert")),
        "{probe:?}"
    );

    // `stacksync preview`'s helm renders every chart as a probe, and keeps its renders apart.
    let previewing = helm.probes_only();
    let probed = previewing.template("fixture", &args(&cases[0])).await.expect("renders");
    assert!(probed.contains("kind: ValidatingWebhookConfiguration") && !probed.contains("BEGIN CERTIFICATE-----\nMII"), "{probed}");
    let key = stacksync::render::helm::MemoKey::of([b"generators".as_slice()]);
    previewing.remember("g", &key, &std::sync::Arc::from(probed.as_str()));
    assert!(previewing.recall("g", &key).is_some() && helm.recall("g", &key).is_none(), "a probe is never a real render's memo");

    // The helm binary has no probe.
    let process = HelmConfig { renderer: stacksync::config::HelmRenderer::Process, path: Some(referee()), ..HelmConfig::default() };
    let process = Helm::locate(&process).await.expect("the referee as helm");
    assert!(!process.probes() && process.probe_in("g", "c", &reads_back).await.is_none());
}
