//! The test's browser: headless chromium over the DevTools protocol on a pipe, `stacksync
//! console` as a child process, axe-core, and where the screenshots go.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
/// What a page step may take at most (a hang fails the test, not CI).
pub const STEP: Duration = Duration::from_secs(20);

/// Headless chromium with one page, spoken to over `--remote-debugging-pipe` (fd 3 in, fd 4
/// out, messages ended by NUL), the shell doing the descriptor plumbing.
pub struct Browser {
    child: tokio::process::Child,
    input: tokio::process::ChildStdin,
    output: BufReader<tokio::process::ChildStdout>,
    session: String,
    next: u64,
    /// Every URL the page asked for (`Network.requestWillBeSent`).
    requests: Vec<String>,
    /// Exceptions thrown in the page and console errors.
    errors: Vec<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let command = format!(
            "exec chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
             --disable-sync --no-first-run --disable-default-apps --user-data-dir={} --remote-debugging-pipe 3<&0 4>&1 0</dev/null 1>&2",
            profile.path().display()
        );
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", &command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium (scripts/ensure-programs.sh chromium)");
        let input = child.stdin.take().expect("stdin");
        let output = BufReader::new(child.stdout.take().expect("stdout"));
        let mut b =
            Browser { child, input, output, session: String::new(), next: 0, requests: Vec::new(), errors: Vec::new(), _profile: profile };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"})).await;
        let attached = b.call(None, "Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true})).await;
        b.session = attached["sessionId"].as_str().expect("a session").to_owned();
        for domain in ["Page.enable", "Network.enable", "Runtime.enable"] {
            b.page(domain, json!({})).await;
        }
        b.page("Emulation.setDeviceMetricsOverride", json!({"width": 1280, "height": 860, "deviceScaleFactor": 1, "mobile": false})).await;
        b
    }

    async fn call(&mut self, session: Option<String>, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.input.write_all(&bytes).await.expect("write to chromium");
        let answer = tokio::time::timeout(STEP, async {
            loop {
                let mut frame = Vec::new();
                let n = self.output.read_until(0, &mut frame).await.expect("read from chromium");
                assert!(n > 0, "chromium closed its pipe");
                frame.pop();
                let m: Value = serde_json::from_slice(&frame).expect("a DevTools message");
                match m["method"].as_str() {
                    Some("Network.requestWillBeSent") => {
                        self.requests.push(m["params"]["request"]["url"].as_str().unwrap_or_default().to_owned())
                    }
                    Some("Runtime.exceptionThrown") => self.errors.push(m["params"]["exceptionDetails"].to_string()),
                    Some("Runtime.consoleAPICalled") if m["params"]["type"] == "error" => self.errors.push(m["params"]["args"].to_string()),
                    _ => {}
                }
                if m["id"] == id {
                    return m;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("chromium did not answer {method} within {STEP:?}"));
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    pub async fn page(&mut self, method: &str, params: Value) -> Value {
        let session = Some(self.session.clone());
        self.call(session, method, params).await
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let r = self.page("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true})).await;
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is `true`; how long that took.
    pub async fn until(&mut self, what: &str, expression: &str, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            if self.eval(expression).await == json!(true) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{what}: not within {within:?}; the page says:\n{}",
                self.eval("document.body.innerText").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn goto(&mut self, url: &str) {
        self.page("Page.navigate", json!({"url": url})).await;
        self.until(url, &format!("location.href === {} && document.readyState === 'complete'", json!(url)), STEP).await;
    }

    pub async fn text(&mut self, selector: &str) -> String {
        let v = self.eval(&format!("(document.querySelector({}) || {{}}).textContent", json!(selector))).await;
        v.as_str().unwrap_or_else(|| panic!("no {selector} on the page")).to_owned()
    }

    pub async fn screenshot(&mut self, path: &Path) {
        let shot = self.page("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": false})).await;
        let png = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().expect("data")).expect("base64");
        std::fs::write(path, png).expect("write the screenshot");
    }

    /// axe-core's serious and critical violations on the page as it is now, in the light and
    /// then the dark theme (one line per rule and element); axe is injected with
    /// `Runtime.evaluate`, which the page's Content-Security-Policy does not govern. The minor
    /// and moderate ones are printed, not failed on.
    pub async fn violations(&mut self, axe: &str, page: &str) -> Vec<String> {
        let mut serious = Vec::new();
        for scheme in ["light", "dark"] {
            self.page("Emulation.setEmulatedMedia", json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]})).await;
            if self.eval("typeof window.axe === 'object'").await != json!(true) {
                let r = self.page("Runtime.evaluate", json!({"expression": axe})).await;
                assert!(r.get("exceptionDetails").is_none(), "injecting axe-core: {}", r["exceptionDetails"]);
            }
            let r = self.eval(AXE_RUN).await;
            assert!(r["passes"].as_u64().unwrap_or(0) > 10, "axe-core ran no rules on {page}: {r}");
            eprintln!("axe-core {}: {page} ({scheme}): {} rules passed", r["version"], r["passes"]);
            // What axe cannot decide, but for the state marks (✓ ✗ ↻: aria-hidden, their word next
            // to them), one element per rule.
            for v in r["incomplete"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !v.contains("only non-text characters") {
                    eprintln!("axe-core, to review by eye: {page} ({scheme}): {v}");
                }
            }
            for v in r["violations"].as_array().into_iter().flatten() {
                let line = format!("{page} ({scheme}): {}", v.as_str().unwrap_or_default());
                if line.contains("[serious]") || line.contains("[critical]") {
                    serious.push(line);
                } else {
                    eprintln!("axe-core, not failed on: {line}");
                }
            }
        }
        self.page("Emulation.setEmulatedMedia", json!({"features": [{"name": "prefers-color-scheme", "value": "light"}]})).await;
        serious
    }

    /// Presses Tab (a real key event, `Input.dispatchKeyEvent`) until each of `wanted` (CSS
    /// selectors) has had the focus, at most `max` times; asserts each did, and that every
    /// element the focus went to showed a focus ring.
    pub async fn tab_reaches(&mut self, page: &str, wanted: &[&str], max: usize) {
        let probe = format!(
            "(() => {{ const a = document.activeElement; if (!a || a === document.body) return null; \
             const s = getComputedStyle(a); \
             return {{ what: a.outerHTML.slice(0, 100), ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2, \
             matches: {}.filter(w => a.matches(w)) }}; }})()",
            json!(wanted)
        );
        let mut reached = std::collections::BTreeSet::new();
        let mut order = Vec::new();
        for _ in 0..max {
            self.key("Tab", 9, None).await;
            let focused = self.eval(&probe).await;
            if focused.is_null() {
                // Past the last control the focus leaves the page (for the browser's own).
                break;
            }
            let what = focused["what"].as_str().unwrap_or_default().to_owned();
            assert_eq!(focused["ring"], json!(true), "{page}: no focus ring on {what}");
            for m in focused["matches"].as_array().into_iter().flatten() {
                reached.insert(m.as_str().unwrap_or_default().to_owned());
            }
            order.push(what);
            if reached.len() == wanted.len() {
                return;
            }
        }
        let missed: Vec<&&str> = wanted.iter().filter(|w| !reached.contains(**w)).collect();
        panic!("{page}: Tab never reached {missed:?} in {max} presses; it went to:\n  {}", order.join("\n  "));
    }

    /// One key pressed and released, as a keyboard sends it.
    pub async fn key(&mut self, key: &str, code: u32, text: Option<&str>) {
        let mut down = json!({"type": "keyDown", "key": key, "code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code});
        if let Some(t) = text {
            down["text"] = json!(t);
        }
        self.page("Input.dispatchKeyEvent", down).await;
        self.page(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}),
        )
        .await;
    }

    /// Asserts that every request the page made went to the console at `base` (or stayed in
    /// the browser), and that nothing threw in the page.
    pub fn assert_stayed_on(&self, base: &str) {
        let origin = base.trim_end_matches('/');
        let away: Vec<&String> =
            self.requests.iter().filter(|u| !(u.starts_with(origin) || u.starts_with("about:") || u.starts_with("data:"))).collect();
        assert!(away.is_empty(), "requests that left the console: {away:?}");
        assert!(self.errors.is_empty(), "errors in the page: {:?}", self.errors);
    }

    pub async fn close(mut self) {
        let _ = self.call(None, "Browser.close", json!({})).await;
        let _ = tokio::time::timeout(STEP, self.child.wait()).await;
    }
}

/// `stacksync console` running, and its URL.
pub struct Console {
    pub child: tokio::process::Child,
    pub url: String,
}

pub async fn console(args: &[&str]) -> Console {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stacksync"))
        .arg("console")
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run stacksync console");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let read = tokio::time::timeout(STEP, out.read_line(&mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        let mut err = String::new();
        let _ = child.stderr.take().expect("stderr").read_to_string(&mut err).await;
        panic!("the console printed no URL: {line:?}\n{err}");
    }
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).expect("a URL").to_owned();
    Console { child, url }
}

pub fn shots_dir(tmp: &Path) -> PathBuf {
    if std::env::var("STACKSYNC_CONSOLE_SHOTS").as_deref() == Ok("docs") {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console");
        std::fs::create_dir_all(&dir).expect("docs/console");
        dir
    } else {
        tmp.to_path_buf()
    }
}

/// axe-core over the whole page: the violations as `rule [impact] help: element — why`, and how
/// many rules passed (proof that it ran).
const AXE_RUN: &str = "axe.run(document, { resultTypes: ['violations'] }).then(r => ({ version: axe.version, passes: r.passes.length, \
    incomplete: r.incomplete.flatMap(v => v.nodes.map(n => `${v.id} [${v.impact}] ${n.target.join(' ')} — ${n.failureSummary}`)), violations: r.violations.flatMap(v => v.nodes.map(n => `${v.id} [${v.impact}] ${v.help}: ${n.target.join(' ')} — ${n.failureSummary}`)) }))";

/// axe-core's `axe.min.js`, which scripts/install-axe.sh puts in `$STACKSYNC_TOOLS_DIR/axe-core`
/// (a test-only download, never in the repository). Missing, the accessibility checks skip
/// loudly, except under CI, where they fail.
pub fn axe_core() -> Option<String> {
    let dir = fake_apiserver::kubectl::tools_bin_dir().parent().map(|d| d.join("axe-core"));
    let source = dir.as_ref().and_then(|d| std::fs::read_to_string(d.join("axe.min.js")).ok());
    if source.is_none() {
        assert!(std::env::var_os("CI").is_none(), "axe-core is not installed (scripts/install-axe.sh)");
        eprintln!("SKIPPED: the accessibility checks: axe-core is not installed (scripts/install-axe.sh)");
    }
    source
}
