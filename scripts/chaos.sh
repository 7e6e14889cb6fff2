#!/usr/bin/env bash
# The fault suites on the real servers, run several times in a row (issue 42's "green twice in a
# row"): every test file named chaos_*.rs, each run RUNS times (default 2), one file after the
# other, its cases side by side as CI runs them. Prints a table: suite, case, each run's result,
# and each run's wall time; exits 1 when any case failed in any run.
#
#   scripts/chaos.sh [RUNS]
#
# Installs what the tests need first (scripts/install-tools.sh --for tests: the real control
# plane and Cluster API); the logs of every run are kept in $CHAOS_WORK (default: a new temporary
# directory, printed at the end). CI runs the same suites once, as part of scripts/test.sh.
set -euo pipefail
runs=${1:-2}
case "$runs" in '' | *[!0-9]*) echo "chaos.sh: RUNS must be a number, not '$runs'" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=${CHAOS_WORK:-$(mktemp -d)}
mkdir -p "$work"

tools_bin=$(scripts/install-tools.sh --for tests | tail -n 1)
export PATH="$tools_bin:$PATH"

suites=()
for f in tests/chaos_*.rs; do suites+=("$(basename "$f" .rs)"); done
[ "${#suites[@]}" -gt 0 ] || { echo "chaos.sh: no tests/chaos_*.rs" >&2; exit 2; }
args=()
for s in "${suites[@]}"; do args+=(--test "$s"); done
cargo build --locked -p stacksync "${args[@]}" >&2

status=0
declare -A result
declare -A took
for run in $(seq "$runs"); do
    for s in "${suites[@]}"; do
        log="$work/$s.$run.log"
        start=$(date +%s)
        cargo test --locked -p stacksync --test "$s" >"$log" 2>&1 || status=1
        took["$s.$run"]=$(( $(date +%s) - start ))
        while read -r _ name _ verdict; do
            result["$s::$name.$run"]=$verdict
        done < <(grep -E '^test [a-z_0-9]+ \.\.\. (ok|FAILED|ignored)$' "$log")
    done
done

printf '%-14s %-95s' suite case
for run in $(seq "$runs"); do printf ' %-7s' "run $run"; done
printf '\n'
for key in $(printf '%s\n' "${!result[@]}" | sed 's/\.[0-9]*$//' | sort -u); do
    suite=${key%%::*}
    printf '%-14s %-95s' "$suite" "${key#*::}"
    for run in $(seq "$runs"); do printf ' %-7s' "${result[$key.$run]:-missing}"; done
    printf '\n'
done
for s in "${suites[@]}"; do
    printf '%-14s %-95s' "$s" "(wall time, s)"
    for run in $(seq "$runs"); do printf ' %-7s' "${took[$s.$run]}"; done
    printf '\n'
done
echo "logs: $work" >&2
exit "$status"
