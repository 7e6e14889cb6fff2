//! The YAML reader against the real peers: a fixture chart holding each construct real
//! charts use (testdata/constructs) is rendered by the real helm, and the same bytes are
//! read by the real kubectl (`annotate --local -o json`, no server) and by `kubeyaml`; the objects
//! must be equal. Texts kubectl refuses must be refused too, at the same line.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

const ANNOTATION: &str = "stacksync.io/read-by";

/// Where scripts/install-tools.sh installs kubectl and helm: `$STACKSYNC_TOOLS_DIR/bin`, by default
/// `$HOME/.cache/stacksync-tools/bin` (as testkit's `tools_bin_dir`, which this leaf crate does
/// not depend on: testkit brings the whole Kubernetes client).
fn tools_bin_dir() -> PathBuf {
    match std::env::var_os("STACKSYNC_TOOLS_DIR") {
        Some(dir) => PathBuf::from(dir).join("bin"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache").join("stacksync-tools").join("bin"),
    }
}

fn tool(name: &str) -> PathBuf {
    let path = tools_bin_dir().join(name);
    assert!(path.is_file(), "{name} not found at {}: run scripts/install-tools.sh (scripts/test.sh does)", path.display());
    path
}

/// Runs `program args` with `stdin`, bounded in time; returns (success, stdout, stderr).
async fn run(program: &Path, args: &[&str], stdin: &[u8], home: &Path) -> (bool, Vec<u8>, String) {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("HOME", home)
        .env("KUBECONFIG", home.join("none"))
        .env("HELM_CACHE_HOME", home.join("helm-cache"))
        .env("HELM_CONFIG_HOME", home.join("helm-config"))
        .env("HELM_DATA_HOME", home.join("helm-data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).await.expect("write stdin");
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.expect("in time").expect("runs");
    (out.status.success(), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// What kubectl reads from `text`: one JSON object per object, our annotation removed.
async fn kubectl_reads(text: &[u8], home: &Path) -> Result<Vec<Value>, String> {
    let annotate = format!("{ANNOTATION}=kubectl");
    let (ok, out, err) = run(&tool("kubectl"), &["annotate", "--local", "-f", "-", &annotate, "-o", "json"], text, home).await;
    if !ok {
        return Err(err);
    }
    let mut objects = Vec::new();
    for doc in serde_json::Deserializer::from_slice(&out).into_iter::<Value>() {
        let mut doc = doc.expect("kubectl prints JSON");
        let is_list = doc["kind"] == "List";
        let items = match doc.get_mut("items") {
            Some(Value::Array(items)) if is_list => std::mem::take(items),
            _ => vec![doc],
        };
        for mut o in items {
            let annotations = o["metadata"]["annotations"].as_object_mut().expect("annotated");
            annotations.remove(ANNOTATION);
            if annotations.is_empty() {
                o["metadata"].as_object_mut().expect("metadata").remove("annotations");
            }
            objects.push(o);
        }
    }
    Ok(objects)
}

/// What stacksync reads from `text`: the non-null documents as JSON, and the warnings.
fn stacksync_reads(text: &str) -> Result<(Vec<Value>, Vec<kubeyaml::Warning>), kubeyaml::SyntaxError> {
    let mut objects = Vec::new();
    let mut warnings = Vec::new();
    for doc in kubeyaml::documents(text)? {
        warnings.extend(doc.warnings);
        if let Some(root) = doc.root {
            let v = root.to_json()?;
            if !v.is_null() {
                objects.push(v);
            }
        }
    }
    Ok((objects, warnings))
}

fn by_name(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]));
    objects
}

#[tokio::test]
async fn helm_output_of_every_construct_reads_as_kubectl_reads_it() {
    let home = tempfile::tempdir().expect("tempdir");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/constructs");
    let chart = chart.to_str().expect("utf-8 path");
    let (ok, rendered, err) = run(&tool("helm"), &["template", "t", chart, "--namespace", "team-a"], b"", home.path()).await;
    assert!(ok, "helm template: {err}");
    let text = String::from_utf8(rendered.clone()).expect("utf-8");

    let theirs = by_name(kubectl_reads(&rendered, home.path()).await.expect("kubectl reads helm's output"));
    let (ours, warnings) = stacksync_reads(&text).expect("stacksync reads helm's output");
    let ours = by_name(ours);
    assert_eq!(ours.len(), 6, "{ours:#?}");
    for (a, b) in theirs.iter().zip(&ours) {
        assert_eq!(a, b, "kubectl (left) and stacksync (right) differ");
    }
    assert_eq!(theirs.len(), ours.len());

    // The repeated keys are reported at their lines of helm's output, never silently.
    let line_of = |needle: &str, nth: usize| text.lines().enumerate().filter(|(_, l)| l.trim() == needle).nth(nth).map(|(i, _)| i + 1);
    let repeated: Vec<usize> = warnings.iter().map(|w| w.line).collect();
    let want =
        [line_of("name: t-reader", 1), line_of("name: t-reader", 2), line_of("verbs: [get, list, watch]", 0), line_of("on: second", 0)];
    assert_eq!(repeated.iter().map(|&l| Some(l)).collect::<Vec<_>>(), want, "{warnings:?}");
}

#[tokio::test]
async fn what_kubectl_refuses_is_refused_at_the_same_line() {
    let home = tempfile::tempdir().expect("tempdir");
    let head = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n";
    let cases: &[(&str, usize)] = &[
        ("data:\n\ta: b\n", 6),        // a tab as indentation
        ("data:\n  a: \"open\n", 7),   // an unclosed quote
        ("data:\n  a: [1, 2\n", 7),    // an unclosed flow sequence
        ("---   foo\n", 5),            // text after a separator
        ("spec:\n  x: .inf\n", 6),     // JSON has no infinity
        ("spec:\n  ~: a\n", 6),        // a null key
        ("spec:\n  a: *nowhere\n", 6), // an unknown anchor
        ("spec:\n  a: 1\n b: 2\n", 7), // bad indentation
        ("spec:\n  <<: [1, 2]\n", 6),  // merging a non-map
    ];
    for (tail, line) in cases {
        let text = format!("{head}{tail}");
        let kubectl = kubectl_reads(text.as_bytes(), home.path()).await;
        assert!(kubectl.is_err(), "kubectl accepts {text:?}: {kubectl:?}");
        let e = stacksync_reads(&text).expect_err(&text);
        assert_eq!(e.mark.line, *line, "{text:?}: {e}");
    }
}
