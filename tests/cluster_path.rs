//! "Follow one Cluster", measured rather than declared: the files of `src/` a steady-state
//! reconcile of one plain-manifests Cluster runs through, recorded from the running code.
//!
//! The controller runs as the daemon runs it (`targets::kubernetes::run`, one long-lived `Kube`
//! and `Context`); one Cluster is synced, and then a watch event on it causes the reconciles
//! measured. This test binary's allocator takes a backtrace at every allocation made while the
//! measured reconcile runs; every backtrace with the Cluster watch handler
//! (`targets::kubernetes::reconcile::run::reconcile_fn`: the reconcile, its metrics, its backoff
//! bookkeeping) on its stack adds the `src/` files of its frames (inlined ones included: the test
//! profile keeps line tables), except frames the compiler derived (a clone, a serde visitor, a
//! drop). `STACKSYNC_PATH_DETAIL=1` prints the functions and lines that allocate in each file,
//! `STACKSYNC_PATH_STACK=<file>` the first stack through that file. A function that neither allocates nor calls anything that
//! does is not seen: the measure is a lower bound of what a reader must open, which is what a
//! bound is for.

// A global allocator cannot be written without `unsafe`; this test binary is the one allowance
// (Cargo.toml's lint policy).
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use common::fleet::{CM, Env};

/// At most this many files of `src/` on the steady-state path (docs/architecture.md, "Follow one
/// Cluster"): the issue's aim, and what it measures today.
const BOUND: usize = 10;
/// With the workspace's libraries (`crates/`) counted too.
const BOUND_WITH_CRATES: usize = 20;
/// A reconcile that misses the prepare memo: `src/` files, and with `crates/`.
const BOUND_MISS: usize = 17;
const BOUND_MISS_WITH_CRATES: usize = 27;

struct Probe;

static MEASURING: AtomicBool = AtomicBool::new(false);
static STACKS: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while this thread is inside the probe: what the probe itself allocates is not measured.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is passed to the system allocator unchanged; the probe only reads a
// backtrace beside it, guarded against re-entry on its thread.
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.load(Ordering::Relaxed) && !INSIDE.with(Cell::get) {
            INSIDE.with(|i| i.set(true));
            let trace = std::backtrace::Backtrace::force_capture().to_string();
            if trace.contains("run::reconcile_fn") {
                STACKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(trace);
            }
            INSIDE.with(|i| i.set(false));
        }
        // SAFETY: the caller's layout, as it gave it.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the pointer came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Probe = Probe;

/// Frames of code the compiler writes from a `#[derive]` (a clone, a serde visitor, a drop): the
/// file that declares the type is not one a reader follows the reconcile into. The same holds
/// for a value written as text by its `Display` (`release.version.to_string()`): it is counted
/// apart, and printed.
fn derived(symbol: &str) -> bool {
    const DERIVED: [&str; 8] = [
        " as core::clone::Clone>::clone",
        " as core::fmt::Debug>::fmt",
        " as core::cmp::PartialEq>::eq",
        " as core::default::Default>::default",
        " as core::hash::Hash>::hash",
        "core::ptr::drop_in_place<",
        "serde::de::",
        "serde::ser::",
    ];
    DERIVED.iter().any(|d| symbol.contains(d)) || symbol.starts_with("visit_") || symbol.contains("::_::<impl serde")
}

/// What a measure counts besides the product's own `src/` files.
#[derive(Debug, Clone, Copy)]
struct Counting {
    /// Frames in the workspace's libraries (`crates/<name>/src/…`: the applier, gotemplate,
    /// kubeyaml, verify), named `crates/<name>/…`.
    crates: bool,
    /// Frames that only write a value as text (`Display`).
    display: bool,
}

/// The files named by the `at <path>:<line>` lines of the recorded backtraces (`src/`-relative,
/// or `crates/<name>/…` when `counting.crates`), except for frames the compiler derived.
fn files(stacks: &[String], counting: Counting) -> BTreeMap<String, BTreeSet<String>> {
    // Paths are as rustc was given them: relative to the workspace (`./src/…`,
    // `./crates/applier/src/…`), or absolute.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/");
    let mut files = BTreeMap::<String, BTreeSet<String>>::new();
    for stack in stacks {
        // Each frame is a `<n>: <symbol>` line and, for each function inlined into it, more;
        // each symbol is followed by its `at <file>:<line>:<column>` line.
        let mut symbol = "";
        for line in stack.lines().map(str::trim) {
            let Some(at) = line.strip_prefix("at ") else {
                symbol = line.split_once(": ").map_or(line, |(_, s)| s);
                continue;
            };
            let relative = at.strip_prefix("./").or_else(|| at.strip_prefix(root)).unwrap_or(at);
            let file = match relative.strip_prefix("src/") {
                Some(f) => f.to_owned(),
                None if counting.crates && relative.starts_with("crates/") => relative.to_owned(),
                None => continue,
            };
            if !derived(symbol) && (counting.display || !symbol.contains(" as core::fmt::Display>::fmt")) {
                let line = file.split(':').nth(1).unwrap_or("");
                let name = file.split(':').next().unwrap_or(&file).to_owned();
                files.entry(name).or_default().insert(format!("{}:{line}", short(symbol)));
            }
        }
    }
    files
}

/// A frame's symbol without its crate path and hash: `Kube::reconcile::{{closure}}`.
fn short(symbol: &str) -> String {
    let symbol = symbol.rsplit_once("::h").filter(|(_, h)| h.len() == 16).map_or(symbol, |(s, _)| s);
    symbol.replace("stacksync::", "").replace("{{closure}}", "{closure}")
}

/// How many reconciles the daemon has finished, by the metrics it publishes.
fn reconciles() -> u64 {
    let text = stacksync::telemetry::metrics().encode();
    text.lines()
        .filter(|l| l.starts_with("stacksync_reconcile_duration_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits until `done` holds, polling every 50 ms for two minutes at most.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..2400 {
        if done().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_reconcile_of_one_cluster_runs_through_a_bounded_number_of_files() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    // References as Cluster API writes them: a manifests release reads neither.
    let refs = serde_json::json!({"spec": {
        "controlPlaneRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "alpha-control-plane"},
        "infrastructureRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "alpha-infrastructure"},
    }});
    env.patch_cluster("alpha", refs).await;
    let config = env.config().write();
    let ctx = stacksync::controller::Context::new(stacksync::config::Config::load(&config).expect("config")).expect("context");
    // What the daemon's poller does first; the controller then watches the Clusters.
    assert!(ctx.poll_all().await.is_empty(), "the source polls");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(stacksync::targets::kubernetes::run(ctx.clone(), 4, None, async move {
        let _ = stopped.await;
    }));

    // The first apply, then quiet: no reconcile for a second.
    until("the first sync", async || env.applied("alpha").await == "v1.0.0").await;
    let mut last = reconciles();
    until("a quiet daemon", async || {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = reconciles();
        std::mem::replace(&mut last, now) == now
    })
    .await;

    // Watch events on the Cluster: the first reconcile after the apply finds what the apply
    // recorded (the release the subscription adopted); the one after that is the steady
    // state, measured. Then one that misses the prepare memo, as a resync more than
    // `PREPARED_FOR` (60 s) after the last prepare does: the release selected and prepared again.
    let mut measured = Vec::new();
    for (touch, measure, forget) in [("1", false, false), ("2", true, false), ("3", true, true)] {
        if forget {
            ctx.forget_answers();
        }
        let before = reconciles();
        env.mgmt.reset_stats();
        MEASURING.store(measure, Ordering::SeqCst);
        env.patch_cluster("alpha", serde_json::json!({"metadata": {"annotations": {"example.test/touched": touch}}})).await;
        until("the reconcile the watch event caused", async || reconciles() > before).await;
        MEASURING.store(false, Ordering::SeqCst);
        if measure {
            measured.push(std::mem::take(&mut *STACKS.lock().expect("stacks")));
        }
        if touch == "2" {
            let requests = env.mgmt.stats().requests;
            println!("the management requests of that reconcile (and of the watch event's patch): {requests:?}");
            assert!(
                !requests.values().any(|by| by.keys().any(|r| r.starts_with("configmaps"))),
                "a referenced object was read: {requests:?}"
            );
        }
    }
    assert_eq!(env.applied("alpha").await, "v1.0.0");
    let _ = stop.send(());
    daemon.await.expect("daemon task").expect("daemon");

    let detail = std::env::var_os("STACKSYNC_PATH_DETAIL").is_some();
    let listed = |path: &BTreeMap<String, BTreeSet<String>>| {
        path.iter()
            .map(|(f, at)| {
                if detail { format!("  {f}\n{}", at.iter().map(|a| format!("      {a}\n")).collect::<String>()) } else { format!("  {f}") }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (stacks, (what, bound, bound_with_crates)) in
        measured.iter().zip([("steady-state", BOUND, BOUND_WITH_CRATES), ("memo-missing", BOUND_MISS, BOUND_MISS_WITH_CRATES)])
    {
        assert!(!stacks.is_empty(), "no backtrace went through the reconcile: is the test built without line tables?");
        if let Ok(want) = std::env::var("STACKSYNC_PATH_STACK") {
            for s in stacks.iter().filter(|s| s.contains(&want)).take(1) {
                let ours: Vec<&str> = s.lines().map(str::trim).filter(|l| l.contains("src/") || l.contains("stacksync::")).collect();
                println!("{}", ours.join("\n"));
            }
        }
        let path = files(stacks, Counting { crates: false, display: false });
        let with_crates = files(stacks, Counting { crates: true, display: false });
        let everything = files(stacks, Counting { crates: true, display: true });
        let displayed: Vec<&String> = everything.keys().filter(|f| !with_crates.contains_key(*f)).collect();
        let crates: Vec<&String> = with_crates.keys().filter(|f| f.starts_with("crates/")).collect();
        println!(
            "the {what} path of one Cluster, {} allocations: {} files of src/, {} with crates/, {} with Display frames\n{}",
            stacks.len(),
            path.len(),
            with_crates.len(),
            everything.len(),
            listed(&path)
        );
        println!("  crates/ files: {crates:?}\n  files entered only to write a value as text (Display): {displayed:?}");
        assert!(
            path.len() <= bound,
            "one Cluster's {what} reconcile runs through {} files of src/, more than {bound}:\n{}",
            path.len(),
            listed(&path)
        );
        assert!(
            with_crates.len() <= bound_with_crates,
            "one Cluster's {what} reconcile runs through {} files of src/ and crates/, more than {bound_with_crates}:\n{}",
            with_crates.len(),
            listed(&with_crates)
        );
    }
}
