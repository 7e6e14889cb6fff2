//! One fidelity case, written once, run against testkit's API server and against the real
//! kube-apiserver 1.35 (`testkit::kube::shared`): the case's own assertions must hold on both,
//! and every answer it recorded must be the same on both once what differs between any two
//! servers (uids, resourceVersions, timestamps, allocated addresses, what the real controllers
//! write) is removed. A difference is a bug in testkit's server that a controller could tell.
//!
//! The real side needs the control plane (scripts/build-realkube.sh): without it the case runs
//! against testkit only and says `SKIPPED` for the real side (under CI `shared` fails instead).
#![allow(dead_code, reason = "each test binary uses a part of the harness")]

/// One test per case: the case against both servers (`cases!(a, b)` in a test binary with a
/// `cases` module holding `async fn a(side: &Side)`, …).
macro_rules! cases {
    ($($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            peers::run(stringify!($case), self::cases::$case).await;
        }
    )*};
}

use std::sync::Mutex;
use std::time::{Duration, Instant};

use fake_apiserver::ApiServer;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

/// How long a case waits for what the real control plane does asynchronously (garbage
/// collection, namespace termination, CRD establishment); testkit does it in the request.
const EVENTUALLY: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One answer, as a controller sees it: status code, `Warning` headers and JSON body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: u16,
    /// Every response header as `name: value` lines, lower-cased.
    pub head: String,
    pub warnings: Vec<String>,
    pub body: Value,
}

/// One server a case runs against, with the case's namespace created on it.
pub struct Side {
    pub name: &'static str,
    client: kube::Client,
    ns: String,
    server: Option<ApiServer>,
    transcript: Mutex<Vec<(String, Answer)>>,
    /// Cluster-scoped objects the case created, deleted after it on the real server.
    created: Mutex<Vec<String>>,
}

impl Side {
    /// The case's namespace, which `{ns}` in paths and bodies stands for.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// testkit's server, for the steps only it can take (compaction, counters); `None` on the
    /// real side.
    pub fn testkit(&self) -> Option<&ApiServer> {
        self.server.as_ref()
    }

    /// Sends one request (`{ns}` replaced in path and body) and records the answer for the
    /// comparison with the other side.
    pub async fn send(&self, method: &str, path: &str, content_type: &str, body: &Value) -> Answer {
        let payload = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        self.send_bytes(method, path, content_type, payload).await
    }

    /// [`Side::send`] with a body sent as it is (e.g. JSON with a duplicate field).
    pub async fn send_bytes(&self, method: &str, path: &str, content_type: &str, payload: Vec<u8>) -> Answer {
        let answer = self.request(method, path, content_type, payload).await;
        self.record(&format!("{method} {path}"), &answer);
        answer
    }

    pub async fn apply(&self, path: &str, manager: &str, obj: &Value) -> Answer {
        let separator = if path.contains('?') { '&' } else { '?' };
        self.send("PATCH", &format!("{path}{separator}fieldManager={manager}"), "application/apply-patch+yaml", obj).await
    }

    /// GET, asserting 200; recorded.
    pub async fn get(&self, path: &str) -> Value {
        let answer = self.send("GET", path, "application/json", &Value::Null).await;
        assert_eq!(answer.code, 200, "{}: GET {path}: {}", self.name, answer.body);
        answer.body
    }

    /// GETs `path` until `done` holds (at once on testkit, which does in the request what the
    /// real control plane's controllers do shortly after), then records that answer.
    pub async fn eventually(&self, path: &str, done: impl Fn(&Answer) -> bool) -> Answer {
        let deadline = Instant::now() + EVENTUALLY;
        loop {
            let answer = self.request("GET", path, "application/json", Vec::new()).await;
            if done(&answer) {
                self.record(&format!("GET {path} (eventually)"), &answer);
                return answer;
            }
            assert!(Instant::now() < deadline, "{}: GET {path} never got there in {EVENTUALLY:?}; last: {answer:?}", self.name);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Applies a CRD and waits until its resources are served.
    pub async fn crd(&self, crd: &Value) {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        let answer = self.apply(&format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), "m", crd).await;
        assert_eq!(answer.code, 201, "{}: {}", self.name, answer.body);
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let version = crd["spec"]["versions"][0]["name"].as_str().unwrap_or_default();
        let list = format!("/apis/{group}/{version}/{plural}");
        let deadline = Instant::now() + EVENTUALLY;
        while self.request("GET", &list, "application/json", Vec::new()).await.code != 200 {
            assert!(Instant::now() < deadline, "{}: {list} not served in {EVENTUALLY:?}", self.name);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn request(&self, method: &str, path: &str, content_type: &str, payload: Vec<u8>) -> Answer {
        let path = path.replace("{ns}", &self.ns);
        let payload = String::from_utf8_lossy(&payload).replace("{ns}", &self.ns).into_bytes();
        let request = http::Request::builder()
            .method(method)
            .uri(&path)
            .header("content-type", content_type)
            .header("accept", "application/json")
            .body(payload)
            .unwrap();
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.client.send(request.map(kube::client::Body::from)))
            .await
            .unwrap_or_else(|_| panic!("{}: {method} {path} timed out", self.name))
            .unwrap_or_else(|e| panic!("{}: {method} {path}: {e}", self.name));
        let code = response.status().as_u16();
        let head = response
            .headers()
            .iter()
            .map(|(k, v)| format!("{}: {}", k.as_str(), String::from_utf8_lossy(v.as_bytes())).to_lowercase())
            .collect::<Vec<_>>()
            .join("\r\n");
        let warnings = response.headers().get_all("warning").iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let mut body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        // The root CA ConfigMap the real control plane publishes into every namespace is the
        // controllers' (testkit runs none): lists are compared without it.
        if let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) {
            items.retain(|i| i["metadata"]["name"] != "kube-root-ca.crt");
        }
        if code == 201 {
            let at = path.split('?').next().unwrap_or_default();
            let object = match body["metadata"]["name"].as_str() {
                Some(name) if method == "POST" => format!("{at}/{name}"),
                _ => at.to_owned(),
            };
            self.created.lock().unwrap().push(object);
        }
        Answer { code, head, warnings, body }
    }

    fn record(&self, what: &str, answer: &Answer) {
        self.transcript.lock().unwrap().push((what.to_owned(), answer.clone()));
    }
}

/// Runs `case` against testkit's server and, when the control plane is built, against the real
/// one; then compares what the two recorded, answer by answer. `test` names the namespace
/// (`fid-<test>`, cut to a label's 63 characters), which must be unique among the cases.
pub async fn run(test: &str, case: impl AsyncFn(&Side)) {
    run_checked(test, case, None).await;
}

/// [`run`] for a case still known to differ on the real server for `why`: testkit's side must
/// pass; the real side's failure is printed as `KNOWN DIFFERENCE`, and the case fails once the
/// real side passes, so the entry is removed when the difference is fixed.
pub async fn run_known_to_differ(test: &str, case: impl AsyncFn(&Side), why: &str) {
    run_checked(test, case, Some(why)).await;
}

async fn run_checked(test: &str, case: impl AsyncFn(&Side), known: Option<&str>) {
    let mut ns: String = format!("fid-{}", test.replace('_', "-")).chars().take(63).collect();
    while ns.ends_with('-') {
        ns.pop();
    }
    let server = ApiServer::start().await.unwrap();
    let testkit = Side::new("testkit", server.client().unwrap(), &ns, Some(server)).await;
    eprintln!("--- {test}: against testkit's server");
    case(&testkit).await;
    let Some(shared) = testkit::kube::shared().await else {
        eprintln!("SKIPPED: {test} against the real kube-apiserver: the real control plane is not built (scripts/build-realkube.sh)");
        return;
    };
    let real = Side::new("real", shared.client().await.unwrap(), &ns, None).await;
    eprintln!("--- {test}: against the real kube-apiserver");
    let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        case(&real).await;
        let ours = std::mem::take(&mut *testkit.transcript.lock().unwrap());
        let theirs = std::mem::take(&mut *real.transcript.lock().unwrap());
        compare(test, &ours, &theirs);
    }))
    .await;
    real.cleanup().await;
    if let Some(server) = testkit.server {
        server.stop().await;
    }
    match (outcome, known) {
        (Ok(()), None) => {}
        (Err(panic), None) => std::panic::resume_unwind(panic),
        (Err(_), Some(why)) => eprintln!("KNOWN DIFFERENCE: {test} on the real kube-apiserver: {why}"),
        (Ok(()), Some(why)) => panic!("{test} now passes on the real kube-apiserver: remove it from the known differences ({why})"),
    }
}

impl Side {
    async fn new(name: &'static str, client: kube::Client, ns: &str, server: Option<ApiServer>) -> Side {
        let side = Side { name, client, ns: ns.to_owned(), server, transcript: Mutex::new(Vec::new()), created: Mutex::new(Vec::new()) };
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let answer = side.request("POST", "/api/v1/namespaces", "application/json", namespace.to_string().into_bytes()).await;
        assert_eq!(answer.code, 201, "{name}: creating namespace {ns}: {}", answer.body);
        side.created.lock().unwrap().clear();
        side
    }

    async fn cleanup(self) {
        let created = std::mem::take(&mut *self.created.lock().unwrap());
        // What the case created outside its namespace (CRDs, StorageClasses, namespaces) goes
        // with it; the real control plane is shared by every case of the binary.
        for path in created.iter().rev() {
            let _ = self.request("DELETE", path, "application/json", Vec::new()).await;
        }
        let _ = self.request("DELETE", &format!("/api/v1/namespaces/{}", self.ns), "application/json", Vec::new()).await;
    }
}

/// Asserts that both sides recorded the same answers.
fn compare(test: &str, ours: &[(String, Answer)], theirs: &[(String, Answer)]) {
    let mut report = Vec::new();
    for (i, ((what, a), (_, b))) in ours.iter().zip(theirs).enumerate() {
        let (x, y) = (normalise(&a.body), normalise(&b.body));
        let mut differences = diff("", &x, &y);
        if a.code != b.code {
            differences.insert(0, format!("status code: {} | {}", a.code, b.code));
        }
        if a.warnings != b.warnings {
            differences.push(format!("warnings: {:?} | {:?}", a.warnings, b.warnings));
        }
        if !differences.is_empty() {
            report.push(format!("#{i} {what} (path: testkit | real):\n  {}\n  testkit: {x}\n  real: {y}", differences.join("\n  ")));
        }
    }
    if ours.len() != theirs.len() {
        report.push(format!("testkit recorded {} answers and the real server {}", ours.len(), theirs.len()));
    }
    assert!(report.is_empty(), "{test}: testkit's server and the real kube-apiserver differ:\n{}", report.join("\n"));
}

/// Field managers of the real control plane's own controllers.
const CONTROLLERS: [&str; 2] = ["kube-controller-manager", "kube-scheduler"];

/// Removes what legitimately differs between two servers (identity, versions, times, generated
/// names and addresses) and keeps everything a controller reads.
pub fn normalise(v: &Value) -> Value {
    let mut v = v.clone();
    strip(&mut v);
    v
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "time",
                "lastTransitionTime",
                "lastUpdateTime",
                "clusterIP",
                "continue",
            ] {
                if map.get(key).is_some_and(|x| x.is_string()) {
                    map.insert(key.into(), json!("<varies>"));
                }
            }
            if map.get("clusterIPs").is_some_and(Value::is_array) {
                map.insert("clusterIPs".into(), json!("<varies>"));
            }
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                // A list's remaining count is server-private.
                meta.remove("remainingItemCount");
                // What the real controllers write (testkit runs none): their managedFields
                // entries and the Deployment controller's revision annotation.
                if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
                    entries.retain(|e| !CONTROLLERS.contains(&e["manager"].as_str().unwrap_or_default()));
                }
                if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
                    annotations.remove("deployment.kubernetes.io/revision");
                    if annotations.is_empty() {
                        meta.remove("annotations");
                    }
                }
            }
            // A workload's status is the controllers' (compared on its own where it matters).
            let workload = ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"];
            if map.get("kind").and_then(Value::as_str).is_some_and(|k| workload.contains(&k)) && map.contains_key("status") {
                map.insert("status".into(), json!("<controllers>"));
            }
            // Owner references are keyed by uid in managedFields.
            let keyed: Vec<String> = map.keys().filter(|k| k.starts_with(r#"k:{"uid":"#)).cloned().collect();
            for key in keyed {
                if let Some(value) = map.remove(&key) {
                    map.insert(r#"k:{"uid":"<varies>"}"#.into(), value);
                }
            }
            for (_, child) in map.iter_mut() {
                strip(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Paths where `a` and `b` differ, one line each.
pub fn diff(path: &str, a: &Value, b: &Value) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            // An explicit `null` is not an absent key: a real server omits empty fields.
            let absent = json!("<absent>");
            keys.into_iter().flat_map(|k| diff(&format!("{path}/{k}"), x.get(k).unwrap_or(&absent), y.get(k).unwrap_or(&absent))).collect()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().flat_map(|(i, (p, q))| diff(&format!("{path}/{i}"), p, q)).collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![format!("{path}: {a} | {b}")],
    }
}
