//! "Follow one Cluster", measured rather than declared: the files of `src/` a steady-state
//! reconcile of one plain-manifests Cluster runs through, recorded from the running code.
//!
//! This test binary's allocator takes a backtrace at every allocation made while the measured
//! pass runs; every backtrace with the per-Cluster reconcile (`targets/kubernetes/reconcile.rs`) on its
//! stack adds the `src/` files of its frames (inlined ones included: the test profile keeps line tables). A
//! function that neither allocates nor calls anything that does is not seen — the measure is a
//! lower bound of what a reader must open, which is what a bound is for. The pass is the
//! library's `kubernetes::pass` (a second one, so nothing is written: the steady state); the
//! watch-driven daemon calls the same `reconcile`.

// A global allocator cannot be written without `unsafe`; this test binary is the one allowance
// (Cargo.toml's lint policy).
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use common::fleet::{CM, Env};

/// At most this many files of `src/` on the path (docs/architecture.md, "Follow one Cluster"): what
/// it measures today, so the path cannot grow unnoticed; the aim is 10.
const BOUND: usize = 41;

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
            if trace.contains("/reconcile.rs:") {
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

/// The `src/`-relative files named by `at <path>:<line>` lines of the recorded backtraces.
fn files(stacks: &[String]) -> BTreeSet<String> {
    // Paths are as rustc was given them: relative to the package (`./src/…`), or absolute.
    let absolute = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");
    stacks
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| l.trim().strip_prefix("at "))
        .filter_map(|at| at.strip_prefix("./src/").or_else(|| at.strip_prefix(absolute)))
        .filter_map(|at| at.split(':').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_reconcile_of_one_cluster_runs_through_a_bounded_number_of_files() {
    let env = Env::new(1).await;
    env.repo.release("v1.0.0", &[("manifests/cm.yaml", CM)]);
    env.add_cluster("alpha", "docker-ferrol-1-27-v1", true).await;
    env.add_kubeconfig("alpha", 0).await;
    let config = env.config().write();
    let ctx = stacksync::controller::Context::new(stacksync::config::Config::load(&config).expect("config")).expect("context");
    let first = stacksync::targets::kubernetes::pass(ctx.clone(), 1).await;
    assert!(first.clusters.len() == 1 && first.clusters[0].status.ready, "{:?}", first.failures);

    MEASURING.store(true, Ordering::SeqCst);
    let steady = stacksync::targets::kubernetes::pass(ctx.clone(), 1).await;
    MEASURING.store(false, Ordering::SeqCst);
    assert!(steady.clusters.len() == 1 && steady.clusters[0].status.ready, "{:?}", steady.failures);

    let stacks = std::mem::take(&mut *STACKS.lock().expect("stacks"));
    assert!(!stacks.is_empty(), "no backtrace went through the reconcile: is the test built without line tables?");
    let path = files(&stacks);
    let listed = path.iter().map(|f| format!("  {f}")).collect::<Vec<_>>().join("\n");
    println!("the steady-state path of one Cluster, {} files of src/:\n{listed}", path.len());
    assert!(path.len() <= BOUND, "one Cluster's reconcile runs through {} files of src/, more than {BOUND}:\n{listed}", path.len());
}
