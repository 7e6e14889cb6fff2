#!/usr/bin/env bash
# The Kubernetes target without a real cluster: starts two of testkit's loopback API servers
# (a management cluster with the Cluster API and stacksync CRDs, and a workload cluster), creates
# a Cluster and its `<cluster>-kubeconfig` Secret with the real kubectl, runs one stacksync pass
# and shows the result with kubectl. Everything stays on 127.0.0.1 and is stopped at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work="$here/.work"
rm -rf "$work"
mkdir -p "$work"

cd "$root"
bin=$(scripts/install-tools.sh | tail -n 1)
kubectl="$bin/kubectl"
cargo build --quiet --locked --bin stacksync -p stacksync
cargo build --quiet --locked --bin testkit -p testkit
# Where cargo put them (CARGO_TARGET_DIR is honoured).
out="${CARGO_TARGET_DIR:-$root/target}/debug"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$out/testkit" apiserver --kubeconfig-out "$work/mgmt.kubeconfig" --preload testdata/crds --preload deploy/crds >/dev/null &
pids+=($!)
"$out/testkit" apiserver --kubeconfig-out "$work/workload.kubeconfig" >/dev/null &
pids+=($!)
for f in mgmt workload; do
  for _ in $(seq 100); do [ -s "$work/$f.kubeconfig" ] && break; sleep 0.1; done
done
mgmt() { HOME="$work" "$kubectl" --kubeconfig "$work/mgmt.kubeconfig" "$@"; }
workload() { HOME="$work" "$kubectl" --kubeconfig "$work/workload.kubeconfig" "$@"; }

# What a Cluster API provider would have done: a Cluster, ready, with its kubeconfig Secret.
mgmt apply --server-side -f "$here/cluster.yaml" >/dev/null
mgmt patch cluster alpha -n team-a --subresource=status --type=merge -p '{"status":{"controlPlaneReady":true}}' >/dev/null
mgmt create secret generic alpha-kubeconfig -n team-a --from-file=value="$work/workload.kubeconfig" >/dev/null

# The release repository: the plain-manifests example's two releases as Git tags.
"$root/examples/manifests/make-repo.sh" "$work/stacks.git"

status=0
"$out/stacksync" run --once --config "$here/stacksync.yaml" || status=$?
echo
echo "\$ kubectl get clustersyncs -n team-a          (management cluster)"
mgmt get clustersyncs -n team-a
echo
echo "\$ kubectl get stackreleases                    (management cluster)"
mgmt get stackreleases
echo
echo "\$ kubectl get configmaps,deployments -n kube-system -l stacksync.io/owner   (workload cluster)"
workload get configmaps,deployments -n kube-system -l stacksync.io/owner
exit "$status"
