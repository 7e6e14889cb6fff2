#!/usr/bin/env bash
# The Kubernetes target on real Kubernetes, with nothing running beforehand: starts two real
# control planes with `testkit kube` (etcd, kube-apiserver, controller-manager, scheduler and kwok
# for fake Nodes, built from pinned Go modules by scripts/build-realkube.sh when missing): a
# management cluster with the Cluster API and stacksync CRDs, and a workload cluster. Creates a
# Cluster and its `<cluster>-kubeconfig` Secret with the real kubectl, runs one stacksync pass
# (which waits until the addons' Deployment is really Available) and shows the result with
# kubectl. Everything stays on 127.0.0.1 and is stopped at the end.
# STACKSYNC_EXAMPLE_SERVER=testkit uses testkit's own loopback API servers instead (no Go build;
# its Deployments never become available, so health checks are turned off then).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work="$here/.work"
rm -rf "$work"
mkdir -p "$work"

cd "$root"
bin=$(scripts/install-tools.sh --for kubernetes | tail -n 1)
kubectl="$bin/kubectl"
# Where cargo puts them (CARGO_TARGET_DIR is honoured); STACKSYNC_BIN and TESTKIT_BIN (both
# set: the test suite runs this with the binaries under test) skip the build.
if [ -n "${STACKSYNC_BIN:-}" ] && [ -n "${TESTKIT_BIN:-}" ]; then
  stacksync="$STACKSYNC_BIN"
  testkit="$TESTKIT_BIN"
else
  cargo build --quiet --locked --bin stacksync -p stacksync
  cargo build --quiet --locked --bin testkit -p testkit
  out="${CARGO_TARGET_DIR:-$root/target}/debug"
  stacksync="$out/stacksync"
  testkit="$out/testkit"
fi

server="${STACKSYNC_EXAMPLE_SERVER:-real}"
config="$here/stacksync.yaml"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
if [ "$server" = real ]; then
  echo "starting two real control planes (testkit kube) ..."
  "$testkit" kube --kubeconfig-out "$work/mgmt.kubeconfig" --preload testdata/crds --preload deploy/crds >"$work/mgmt.log" 2>&1 &
  pids+=($!)
  "$testkit" kube --kubeconfig-out "$work/workload.kubeconfig" >"$work/workload.log" 2>&1 &
  pids+=($!)
  wait_s=240
else
  "$testkit" apiserver --kubeconfig-out "$work/mgmt.kubeconfig" --preload testdata/crds --preload deploy/crds >/dev/null &
  pids+=($!)
  "$testkit" apiserver --kubeconfig-out "$work/workload.kubeconfig" >/dev/null &
  pids+=($!)
  wait_s=10
  # testkit's server runs no controllers: turn health checks off.
  sed 's/^    # healthTimeout: 0s$/    healthTimeout: 0s/' "$here/stacksync.yaml" > "$work/stacksync.yaml"
  config="$work/stacksync.yaml"
fi
for f in mgmt workload; do
  for _ in $(seq $((wait_s * 10))); do [ -s "$work/$f.kubeconfig" ] && break; sleep 0.1; done
  if [ ! -s "$work/$f.kubeconfig" ]; then
    echo "the $f cluster did not start:" >&2
    cat "$work/$f.log" >&2 2>/dev/null || true
    exit 1
  fi
done
if [ "$server" = real ]; then head -n 1 "$work/mgmt.log"; head -n 1 "$work/workload.log"; fi
mgmt() { HOME="$work" "$kubectl" --kubeconfig "$work/mgmt.kubeconfig" "$@"; }
workload() { HOME="$work" "$kubectl" --kubeconfig "$work/workload.kubeconfig" "$@"; }

# What a Cluster API provider would have done: a Cluster, ready, with its kubeconfig Secret.
mgmt apply --server-side -f "$here/cluster.yaml" >/dev/null
mgmt patch cluster alpha -n team-a --subresource=status --type=merge -p '{"status":{"controlPlaneReady":true}}' >/dev/null
mgmt create secret generic alpha-kubeconfig -n team-a --from-file=value="$work/workload.kubeconfig" >/dev/null

# The release repository: the plain-manifests example's two releases as Git tags.
"$root/examples/manifests/make-repo.sh" "$work/stacks.git"

status=0
"$stacksync" run --once --config "$config" || status=$?
echo
echo "\$ kubectl get clustersyncs -n team-a          (management cluster)"
mgmt get clustersyncs -n team-a
echo
echo "\$ kubectl get stackreleases                    (management cluster)"
mgmt get stackreleases
echo
echo "\$ kubectl get configmaps,deployments -n kube-system -l stacksync.io/owner   (workload cluster)"
workload get configmaps,deployments -n kube-system -l stacksync.io/owner
if [ "$server" = real ]; then
  echo
  echo "\$ kubectl get pods -n kube-system -o wide      (workload cluster: kwok runs them)"
  workload get pods -n kube-system -o wide
fi
exit "$status"
