#!/usr/bin/env bash
# The benchmark command (the README's third; not part of CI's test step): builds in release mode
# and runs every benchmark against its peer on this machine.
#   - benches/fleet.rs: N Clusters x 40 objects cold and no-op against one testkit API server
#     process, vs the real kubectl and vs the raw server-side apply ceiling measured with wrk;
#     prints a table and writes target/bench/results.json (BENCH_OUT overrides). Then the same
#     cases on a real control plane (`testkit kube`: etcd, kube-apiserver, controllers, kwok;
#     built by scripts/build-realkube.sh), the ceiling measured by wrk on that same real server,
#     for BENCH_REAL_SIZES (default 100,1000; empty skips them).
#   - benches/process.rs: the whole binary as a user runs it (built with the image's `dist`
#     profile), for BENCH_PROCESS_SIZES (default 1000,5000; empty skips them) Clusters x 40
#     objects, each Cluster with its own kubeconfig Secret on a testkit management server,
#     BENCH_PROCESS_WORKLOADS (default 4) testkit workload
#     servers: `run --once` cold and no-op under /usr/bin/time -v, and the daemon until every
#     ClusterSync is Ready then one resync (wall time, peak RSS, CPU, workload requests, log
#     lines), next to the wrk SSA ceiling of one workload server; BENCH_SOAK_SECS (default 0)
#     keeps the daemon running that long with resyncs and a release a minute, RSS and open
#     descriptors sampled.
#   - benches/peers.rs: asset verify/download, git clone/poll/incremental fetch, 300-object apply,
#     cluster-stack render for 500 Clusters vs 500 `helm template` runs.
#   - benches/renderer.rs: the library renderer on an SCS-openstack-shaped stack (4 charts per
#     Cluster, a CNI chart with many templates and genCA) vs `helm template` of the same helm
#     version (the referee, scripts/build-renderer.sh): per Cluster, per chart, and
#     BENCH_RENDER_CLUSTERS (default 1000) Clusters at helm.parallelism.
#   - benches/signatures.rs: verifying 100 SSH- and 100 OpenPGP-signed tags vs `git verify-tag`
#     (Debian's ssh-keygen and gpg).
#   - tests/admin.rs push_to_applied_latency (an ignored test): webhook push-to-applied p50/p99.
#   - with BENCH_FUZZ_TEMPLATES=COUNT: a long run of the values-template fuzzer against Go
#     (scripts/fuzz-templates.sh, seed BENCH_FUZZ_SEED, default 1): agreement per seed.
# Every case lands in target/bench/results.json (BENCH_OUT) with ours, peer, ratio, unit and the
# environment (nproc, load average, tool versions).
# BENCH_SIZES (default 100,1000,5000) chooses the fleet sizes; kubectl runs up to
# BENCH_KUBECTL_MAX Clusters (default 1000: kubectl applies one object at a time); BENCH_REPEAT
# (default 3) pairs of ceiling and cold sync per size, the median pair reported.
# Results and what bounds them: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

scripts/ensure-programs.sh wrk time curl git ssh-keygen gpg
tools="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
if [ ! -x "$tools/bin/kubectl" ]; then
  scripts/install-tools.sh --for tests
fi
target="${CARGO_TARGET_DIR:-target}"
out="$(pwd)/${BENCH_OUT:-target/bench/results.json}"
case "${BENCH_OUT:-}" in /*) out="$BENCH_OUT" ;; esac
export BENCH_OUT="$out"

cargo build --release --locked -p testkit --bin testkit
cargo bench --locked --bench fleet -- \
  --testkit "$target/release/testkit" \
  --kubectl "$tools/bin/kubectl" \
  --wrk "$(command -v wrk)" \
  --sizes "${BENCH_SIZES:-100,1000,5000}" \
  --kubectl-max "${BENCH_KUBECTL_MAX:-1000}" \
  --repeat "${BENCH_REPEAT:-3}" \
  --out "$out"
process_sizes="${BENCH_PROCESS_SIZES-1000,5000}"
if [ -n "$process_sizes" ]; then
  # The binary users run: the container image's `dist` profile (LTO, one codegen unit).
  cargo build --locked --profile dist --bin stacksync
  cargo bench --locked --bench process -- \
    --testkit "$target/release/testkit" \
    --stacksync "$target/dist/stacksync" \
    --wrk "$(command -v wrk)" \
    --sizes "$process_sizes" \
    --workloads "${BENCH_PROCESS_WORKLOADS:-4}" \
    --soak-secs "${BENCH_SOAK_SECS:-0}" \
    --out "$out"
fi
real_sizes="${BENCH_REAL_SIZES-100,1000}"
if [ -n "$real_sizes" ]; then
  scripts/build-realkube.sh >/dev/null
  cargo bench --locked --bench fleet -- \
    --server real \
    --testkit "$target/release/testkit" \
    --kubectl "$tools/bin/kubectl" \
    --wrk "$(command -v wrk)" \
    --sizes "$real_sizes" \
    --kubectl-max "${BENCH_KUBECTL_MAX:-1000}" \
    --repeat "${BENCH_REAL_REPEAT:-1}" \
    --out "$out"
fi
if [ -z "${BENCH_FLEET_ONLY:-}" ]; then
  PATH="$tools/bin:$PATH" cargo bench --locked --bench peers
  PATH="$tools/bin:$PATH" cargo bench --locked --bench signatures
  scripts/build-renderer.sh >/dev/null
  cargo bench --locked --bench renderer -- --clusters "${BENCH_RENDER_CLUSTERS:-1000}" --out "$out"
  PATH="$tools/bin:$PATH" cargo test --release --locked --test admin push_to_applied_latency -- --ignored --nocapture
fi
if [ -n "${BENCH_FUZZ_TEMPLATES:-}" ]; then
  scripts/fuzz-templates.sh "${BENCH_FUZZ_SEED:-1}" "$BENCH_FUZZ_TEMPLATES"
fi
echo "results: $out"
