#!/usr/bin/env bash
# The compatibility matrix: stacksync's end-to-end cases on every supported Cluster API release
# and Kubernetes minor, each on the real thing (docs/compatibility.md publishes the last table).
#
#   Cluster API rows (tests/cluster_api.rs), one per Cluster API release x Kubernetes release of
#   the management and workload control planes:
#     new-cluster+upgrade-held   a new Cluster synced; its upgrade held by BeforeClusterUpgrade
#                                until the stages are done, then released
#     wave-rollout               a rollout in waves carried out by the topology controller
#     rollout-stops              a two-wave rollout stopping at a control plane that fails
#     pause                      a paused Cluster left alone by Cluster API and stacksync
#   SCS stacks rows (tests/scs_stacks.rs), one per Cluster API row, with the providers' real CRDs
#   (scripts/build-provider-crds.sh for that Cluster API release):
#     openstack-scs              an openstack-scs-like stack accepted, computed with its patches,
#                                its next Kubernetes minor held by BeforeClusterUpgrade
#     docker-scs                 a docker-like stack accepted and computed with its patches
#     refused-class              a ClusterClass the webhooks refuse: StackRelease Failed and the
#                                Cluster's ClusterSync NotSynced, both naming the object
#   Kubernetes rows (tests/real_kube.rs), one per Kubernetes release:
#     apply+health               a ClusterSync Ready because its Deployment became Available
#     not-ready                  a Deployment that cannot become available is not reported Ready
#     drift+prune                drift taken back, what a release dropped pruned
#     status+events              a new Cluster synced, kubectl's columns and Events, GC
#
# Builds what is missing first (scripts/build-realkube.sh, scripts/build-cluster-api.sh per
# version: see docs/testing.md for what a cold build costs), then runs each case in a process of
# its own (its seconds include starting the control planes and Cluster API, 20-60 s), one at a
# time, and prints the table: version x case -> pass/FAIL (seconds). A failing case's output is
# kept in $STACKSYNC_COMPAT_LOGS (default target/compat/). Exits non-zero when a case failed.
#
# Usage: scripts/compat.sh [--capi "v1.10.10 v1.14.2"] [--kube "v1.33.13 v1.35.4"] [--corners]
#                          [--together]
#   --corners   Cluster API rows only for the oldest (first versions) and newest (last) corner
#   --together  each row's cases in one process, side by side on one environment (what CI runs:
#               faster; a case's seconds are then the row's)
set -euo pipefail
cd "$(dirname "$0")/.."

capi_versions="v1.10.10 v1.14.2"
kube_versions="v1.33.13 v1.35.4"
corners=0
together=0
while [ $# -gt 0 ]; do
    case "$1" in
        --capi) capi_versions="$2"; shift ;;
        --kube) kube_versions="$2"; shift ;;
        --corners) corners=1 ;;
        --together) together=1 ;;
        -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compat.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

capi_cases=(
    "new-cluster+upgrade-held=cluster_api_accepts_our_class_syncs_its_clusters_and_holds_an_upgrade_until_the_stages_are_done"
    "wave-rollout=a_wave_rollout_moves_six_clusters_through_the_real_topology_controller"
    "rollout-stops=a_rollout_stops_at_a_cluster_whose_control_plane_does_not_become_available"
    "pause=a_paused_cluster_is_left_alone_by_cluster_api_and_by_stacksync"
)
scs_cases=(
    "openstack-scs=an_openstack_scs_stack_is_accepted_computed_with_its_patches_and_its_next_minor_held_by_the_hook"
    "docker-scs=a_docker_scs_stack_is_accepted_and_computed_with_its_patches"
    "refused-class=a_cluster_class_the_webhooks_refuse_shows_as_not_synced_naming_the_object"
)
kube_cases=(
    "apply+health=a_cluster_sync_is_ready_because_its_deployment_really_became_available"
    "not-ready=a_deployment_that_cannot_become_available_is_not_reported_ready"
    "drift+prune=drift_is_taken_back_and_what_a_release_dropped_is_pruned_on_the_real_server"
    "status+events=the_daemon_syncs_a_new_cluster_its_events_show_in_kubectl_and_gc_removes_its_cluster_sync"
)

read -r -a kubes <<<"$kube_versions"
read -r -a capis <<<"$capi_versions"
rows=() # "capi kube" pairs for the Cluster API rows
if [ "$corners" = 1 ]; then
    rows+=("${capis[0]} ${kubes[0]}")
    [ "${#capis[@]}" -gt 1 ] || [ "${#kubes[@]}" -gt 1 ] && rows+=("${capis[-1]} ${kubes[-1]}")
else
    for c in "${capis[@]}"; do for k in "${kubes[@]}"; do rows+=("$c $k"); done; done
fi

# What the rows need, built when missing (each script returns at once when it is there).
for k in "${kubes[@]}"; do STACKSYNC_KUBE_VERSION="$k" scripts/build-realkube.sh >/dev/null; done
for c in "${capis[@]}"; do
    STACKSYNC_CAPI_VERSION="$c" scripts/build-cluster-api.sh >/dev/null
    STACKSYNC_CAPI_VERSION="$c" scripts/build-provider-crds.sh >/dev/null
done
tools_bin=$(scripts/install-tools.sh --for tests | tail -n 1)
export PATH="$tools_bin:$PATH"

# The test binaries, built once (the daemon binary too: the tests run it).
cargo build --locked -p stacksync --bin stacksync >&2
test_binary() {
    cargo test --locked --test "$1" --no-run 2>&1 | sed -n "s|.*Executable tests/$1.rs (\(.*\))|\1|p" | tail -n 1
}
capi_bin=$(test_binary cluster_api)
kube_bin=$(test_binary real_kube)
scs_bin=$(test_binary scs_stacks)
[ -x "$capi_bin" ] && [ -x "$kube_bin" ] && [ -x "$scs_bin" ] || { echo "compat.sh: could not build the test binaries" >&2; exit 1; }

logs="${STACKSYNC_COMPAT_LOGS:-${CARGO_TARGET_DIR:-target}/compat}"
mkdir -p "$logs"
table=()
failed=0
run_case() { # run_case <row label> <binary> <case label> <test name> (env set by the caller)
    local started seconds result log="$logs/$1-$3.log"
    log="${log//+/-}"
    started=$(date +%s)
    if CI=1 timeout 1200 "$2" --exact "$4" --test-threads=1 >"$log" 2>&1 && grep -q "test result: ok. 1 passed" "$log"; then
        result=pass
        rm -f "$log"
    else
        result=FAIL
        failed=1
    fi
    seconds=$(( $(date +%s) - started ))
    echo "compat.sh: $1 $3: $result (${seconds}s)${log:+$([ "$result" = FAIL ] && echo " see $log")}" >&2
    table+=("$1|$3|$result|$seconds")
}

run_row() { # run_row <row label> <binary> <cases...>: all in one process
    local label="$1" bin="$2"; shift 2
    local started seconds names=() log="$logs/$1.log" case result row_failed=0
    log="${log//+/-}"
    for case in "$@"; do names+=("${case#*=}"); done
    started=$(date +%s)
    CI=1 timeout 1800 "$bin" --exact "${names[@]}" >"$log" 2>&1 || true
    seconds=$(( $(date +%s) - started ))
    for case in "$@"; do
        if grep -q "^test ${case#*=} \.\.\. ok$" "$log"; then result=pass; else result=FAIL; failed=1 row_failed=1; fi
        echo "compat.sh: $label ${case%%=*}: $result" >&2
        table+=("$label|${case%%=*}|$result|$seconds")
    done
    if [ "$row_failed" = 0 ]; then rm -f "$log"; else echo "compat.sh: output in $log" >&2; fi
}

if [ "$together" = 1 ]; then
    for row in "${rows[@]}"; do
        read -r c k <<<"$row"
        STACKSYNC_CAPI_VERSION="$c" STACKSYNC_KUBE_VERSION="$k" run_row "capi-$c+kube-$k" "$capi_bin" "${capi_cases[@]}"
        STACKSYNC_CAPI_VERSION="$c" STACKSYNC_KUBE_VERSION="$k" run_row "scs-$c+kube-$k" "$scs_bin" "${scs_cases[@]}"
    done
    for k in "${kubes[@]}"; do
        STACKSYNC_KUBE_VERSION="$k" run_row "kube-$k" "$kube_bin" "${kube_cases[@]}"
    done
    rows=() kubes=()
fi

for row in "${rows[@]+"${rows[@]}"}"; do
    read -r c k <<<"$row"
    for case in "${capi_cases[@]}"; do
        STACKSYNC_CAPI_VERSION="$c" STACKSYNC_KUBE_VERSION="$k" run_case "capi-$c+kube-$k" "$capi_bin" "${case%%=*}" "${case#*=}"
    done
    for case in "${scs_cases[@]}"; do
        STACKSYNC_CAPI_VERSION="$c" STACKSYNC_KUBE_VERSION="$k" run_case "scs-$c+kube-$k" "$scs_bin" "${case%%=*}" "${case#*=}"
    done
done
for k in "${kubes[@]+"${kubes[@]}"}"; do
    for case in "${kube_cases[@]}"; do
        STACKSYNC_KUBE_VERSION="$k" run_case "kube-$k" "$kube_bin" "${case%%=*}" "${case#*=}"
    done
done

# The table: one line per row, one column per case.
print_table() { # print_table <row prefix> <first column's title> <cases...>
    local prefix="$1" title="$2"; shift 2
    local header="| ${title} |" rule="|---|" r
    for case in "$@"; do header+=" ${case%%=*} |"; rule+="---|"; done
    echo "$header"; echo "$rule"
    local seen=()
    for entry in "${table[@]}"; do
        r="${entry%%|*}"
        [[ "$r" = "$prefix"* ]] || continue
        [[ " ${seen[*]} " = *" $r "* ]] && continue
        seen+=("$r")
        local name="${r#"$prefix"}"
        local line="| ${name/+kube-/ on Kubernetes } |"
        for case in "$@"; do
            local cell="-"
            for e in "${table[@]}"; do
                IFS='|' read -r er ec eres esec <<<"$e"
                [ "$er" = "$r" ] && [ "$ec" = "${case%%=*}" ] && cell="$eres (${esec}s)"
            done
            line+=" $cell |"
        done
        echo "$line"
    done
}
echo
print_table "capi-" "Cluster API (tests/cluster_api.rs)" "${capi_cases[@]}"
echo
print_table "scs-" "Cluster API, SCS stacks (tests/scs_stacks.rs)" "${scs_cases[@]}"
echo
print_table "kube-" "Kubernetes (tests/real_kube.rs)" "${kube_cases[@]}"
exit "$failed"
