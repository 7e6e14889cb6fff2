//! The daemon under test: the real binary, `stacksync run` with its admin listener on a free
//! loopback port, its log in a file; and the one waiting helper every test polls with.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};

/// How often [`eventually`] asks.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a started daemon may take to say where its admin listener is.
pub const STARTUP: Duration = Duration::from_secs(30);
/// How long SIGTERM may take to stop it.
pub const SHUTDOWN: Duration = Duration::from_secs(40);
/// What the daemon logs at: INFO, and the controller's per-Cluster decisions.
pub const RUST_LOG: &str = "info,stacksync::targets::kubernetes::reconcile::run=debug";

/// Polls `cond` every [`POLL`] for at most `within`; fails with `what` and `context()` (a log)
/// when it does not hold in time. Returns how long it took.
pub async fn eventually(what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool, context: impl Fn() -> String) -> Duration {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < within, "{what}: not within {within:?}\n{}", context());
        tokio::time::sleep(POLL).await;
    }
    start.elapsed()
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How to start the daemon: [`Daemon::launch`], then `.start()`.
pub struct Launch {
    config: PathBuf,
    log: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    memory_cap_kib: Option<u64>,
    tmpfs: Vec<(PathBuf, u64)>,
    once: bool,
}

impl Launch {
    /// Extra arguments after `run --config FILE`.
    pub fn args(mut self, args: &[&str]) -> Launch {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// The Cluster API runtime hooks listener on a free port, serving `cert` and `key`.
    pub fn hooks(self, cert: &Path, key: &Path) -> Launch {
        let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
        self.args(&["--hooks-addr", "127.0.0.1:0", "--hooks-cert-file", &cert, "--hooks-key-file", &key])
    }

    pub fn env(mut self, key: &str, value: &str) -> Launch {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Under `ulimit -v`, so a memory regression fails the test rather than the machine.
    pub fn memory_cap_kib(mut self, kib: u64) -> Launch {
        self.memory_cap_kib = Some(kib);
        self
    }

    /// In a mount namespace of its own (`unshare --mount`, so root) with a tmpfs of `kib` KiB
    /// mounted at `dir`: a volume only the daemon sees, that really fills. The test reaches it
    /// through `/proc/<pid>/root` and remounts it with `nsenter` (tests/chaos_volume.rs).
    pub fn tmpfs(mut self, dir: &Path, kib: u64) -> Launch {
        self.tmpfs.push((dir.to_path_buf(), kib));
        self
    }

    /// `run --once` instead of the daemon: no admin listener, nothing waited for.
    pub fn once(mut self) -> Launch {
        self.once = true;
        self
    }

    /// Spawns it; unless `once`, returns when its admin listener is up (at most [`STARTUP`]).
    pub async fn start(self) -> Daemon {
        let bin = env!("CARGO_BIN_EXE_stacksync");
        let mut args: Vec<String> = vec!["run".into()];
        if self.once {
            args.push("--once".into());
        } else {
            args.extend(["--admin-addr".into(), "127.0.0.1:0".into()]);
        }
        args.extend(["--config".into(), self.config.to_string_lossy().into_owned()]);
        args.extend(self.args);
        // Shell steps before the binary replaces the shell (same pid: `unshare` without
        // `--fork` execs `sh`, which execs stacksync).
        let mut steps: Vec<String> = self
            .tmpfs
            .iter()
            .map(|(dir, kib)| format!("mkdir -p '{0}' && mount -t tmpfs -o size={kib}k stacksync-test '{0}'", dir.display()))
            .collect();
        steps.extend(self.memory_cap_kib.map(|kib| format!("ulimit -v {kib}")));
        let mut cmd = match (steps.is_empty(), self.tmpfs.is_empty()) {
            (true, _) => tokio::process::Command::new(bin),
            (false, no_mounts) => {
                let script = format!("{} && exec \"$0\" \"$@\"", steps.join(" && "));
                let mut c = tokio::process::Command::new(if no_mounts { "sh" } else { "unshare" });
                if !no_mounts {
                    c.args(["--mount", "--propagation", "private", "--", "sh"]);
                }
                c.arg("-c").arg(script).arg(bin);
                c
            }
        };
        cmd.args(&args).env("NO_COLOR", "1").env("RUST_LOG", RUST_LOG);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let log = std::fs::File::create(&self.log).unwrap_or_else(|e| panic!("log {}: {e}", self.log.display()));
        let out = log.try_clone().expect("log");
        let child = cmd.stdout(out).stderr(log).kill_on_drop(true).spawn().expect("spawn stacksync");
        let mut daemon = Daemon { child, log: self.log, admin: String::new() };
        if !self.once {
            let mut addr = String::new();
            daemon
                .eventually("the admin listener", STARTUP, async || {
                    addr = daemon.logged_addr("admin listener").unwrap_or_default();
                    !addr.is_empty()
                })
                .await;
            daemon.admin = format!("http://{addr}");
        }
        daemon
    }
}

/// The running daemon; killed when dropped, stopped with SIGTERM by [`Daemon::stop`].
pub struct Daemon {
    pub child: tokio::process::Child,
    pub log: PathBuf,
    admin: String,
}

impl Daemon {
    /// `stacksync run --config FILE`, its log (stdout and stderr) in `log`.
    pub fn launch(config: &Path, log: PathBuf) -> Launch {
        Launch {
            config: config.to_path_buf(),
            log,
            args: Vec::new(),
            env: Vec::new(),
            memory_cap_kib: None,
            tmpfs: Vec::new(),
            once: false,
        }
    }

    /// Starts the daemon; returns once its admin listener is up.
    pub async fn start(config: &Path, log: PathBuf) -> Daemon {
        Daemon::launch(config, log).start().await
    }

    /// [`Daemon::start`] with extra arguments.
    pub async fn start_with(config: &Path, log: PathBuf, extra: &[&str]) -> Daemon {
        Daemon::launch(config, log).args(extra).start().await
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_has(&self, needle: &str) -> bool {
        self.log().contains(needle)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the daemon runs")
    }

    /// `http://127.0.0.1:<port>` of the admin listener.
    pub fn admin_url(&self) -> &str {
        &self.admin
    }

    /// The `addr=` of the first whole log line (its line break written) that contains
    /// `listener`: a line read while it is being written could end inside the address.
    fn logged_addr(&self, listener: &str) -> Option<String> {
        let log = self.log();
        let line = log.split_inclusive('\n').find(|l| l.ends_with('\n') && l.contains(listener))?;
        Some(line.split("addr=").nth(1)?.split_whitespace().next()?.to_owned())
    }

    /// [`eventually`], failing with the daemon's log.
    pub async fn eventually(&self, what: &str, within: Duration, cond: impl AsyncFnMut() -> bool) -> Duration {
        eventually(what, within, cond, || format!("log:\n{}", self.log())).await
    }

    /// Waits until the log says `needle`.
    pub async fn logged(&self, needle: &str, within: Duration) -> Duration {
        self.eventually(&format!("the log line {needle:?}"), within, async || self.log_has(needle)).await
    }

    /// The hooks listener's `https://127.0.0.1:<port>` (`--hooks-addr`), from its log line.
    pub async fn hooks_url(&self) -> String {
        let mut addr = String::new();
        self.eventually("the hooks listener", STARTUP, async || {
            addr = self.logged_addr("hooks listener").unwrap_or_default();
            !addr.is_empty()
        })
        .await;
        format!("https://{addr}")
    }

    /// `GET` on the admin listener: status and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = http().get(format!("{}{path}", self.admin)).send().await.expect("GET");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    /// `POST` on the admin listener.
    pub async fn post(&self, path: &str, headers: &[(&str, String)], body: Vec<u8>) -> (u16, String) {
        let mut req = http().post(format!("{}{path}", self.admin)).body(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let r = req.send().await.expect("POST");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    /// A GitHub webhook delivery signed with `secret`.
    pub async fn github(&self, event: &str, delivery: &str, body: &[u8], secret: &str) -> (u16, String) {
        let headers = [
            ("x-github-event", event.to_owned()),
            ("x-github-delivery", delivery.to_owned()),
            ("x-hub-signature-256", sign(secret, body)),
            ("content-type", "application/json".to_owned()),
        ];
        self.post("/hooks/github", &headers, body.to_vec()).await
    }

    /// The value of a series in `/metrics` (0 when absent).
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the process to end by itself (`run --once`), at most `within`.
    pub async fn wait(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait()).await.expect("stacksync ended in time").expect("wait")
    }

    /// SIGKILL: no chance to clean up.
    pub async fn kill(&mut self) -> ExitStatus {
        self.child.start_kill().expect("kill");
        self.wait(SHUTDOWN).await
    }

    /// SIGTERM; asserts a clean exit (0) within [`SHUTDOWN`].
    pub async fn stop(mut self) {
        let pid = self.pid().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        let status = self.wait(SHUTDOWN).await;
        assert_eq!(status.code(), Some(0), "log:\n{}", self.log());
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("http client")
}

/// GitHub's `x-hub-signature-256` of `body`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}
