#!/usr/bin/env bash
# stacksync with the real Cluster API, with nothing running beforehand, in one command:
#   1. builds what is missing (the real Kubernetes control plane and the Cluster API v1.14 core
#      manager from pinned Go modules, kubectl and helm, stacksync and testkit);
#   2. `testkit kube --cluster-api`: a management control plane running Cluster API (its CRDs,
#      webhooks, ClusterTopology and RuntimeSDK on) with testkit's minimal infrastructure and
#      control-plane providers, and a workload control plane the Clusters' kubeconfigs point at;
#   3. a Git release repository with the testkit-ferrol-1-35 cluster stack's v1;
#   4. `stacksync run` with its Runtime SDK hooks listener (TLS from a CA made here) and the
#      ExtensionConfig that tells Cluster API about it;
#   5. a Cluster made from the v1 ClusterClass: Cluster API brings it up, stacksync syncs its
#      addons (Ready for real);
#   6. release v2 and the upgrade (class and version together): Cluster API calls
#      BeforeClusterUpgrade, stacksync holds the upgrade while v2's stages run — the first waits
#      for a gate ConfigMap in the workload cluster, which this script opens after a few calls —
#      then Cluster API upgrades the control plane.
# The last line reports the hook, e.g.
#   upgrade to testkit-ferrol-1-35-v2 held 14.2 s by BeforeClusterUpgrade (3 calls) until 2 stages were done; control plane now v1.35.4
# Everything stays on 127.0.0.1 and is stopped at the end. STACKSYNC_BIN and TESTKIT_BIN (both
# set) skip the cargo build; GATE_AFTER (seconds, default 8) is how long the gate stays closed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work="$here/.work"
rm -rf "$work"
mkdir -p "$work"

cd "$root"
bin=$(scripts/install-tools.sh --for cluster-api | tail -n 1)
export PATH="$bin:$PATH"
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

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }
mgmt() { HOME="$work" kubectl --kubeconfig "$work/mgmt.kubeconfig" "$@"; }
workload() { HOME="$work" kubectl --kubeconfig "$work/workload.kubeconfig" "$@"; }
# wait_for <seconds> <what> <command...>: polls the command every 0.5 s.
wait_for() {
  local limit=$1 what=$2; shift 2
  for _ in $(seq $((limit * 2))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "run.sh: $what did not happen within ${limit}s; stacksync's log ends with:" >&2
  tail -n 30 "$work/stacksync.log" >&2 || true
  exit 1
}

step "starting Cluster API on two real control planes (testkit kube --cluster-api)"
"$testkit" kube --cluster-api --kubeconfig-out "$work/mgmt.kubeconfig" --workload-kubeconfig-out "$work/workload.kubeconfig" \
  --preload deploy/crds >"$work/testkit.log" 2>&1 &
pids+=($!)
for _ in $(seq 3600); do [ -s "$work/mgmt.kubeconfig" ] && break; kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$work/mgmt.kubeconfig" ]; then echo "testkit kube --cluster-api did not start:" >&2; cat "$work/testkit.log" >&2; exit 1; fi
head -n 1 "$work/testkit.log"
mgmt create namespace team-a >/dev/null

step "the release repository: testkit-ferrol-1-35-v1"
git_() { git -c user.name=example -c user.email=example@example.invalid -c commit.gpgsign=false -c tag.gpgsign=false "$@"; }
git_ init -q --bare -b main "$work/stacks.git"
git_ init -q -b main "$work/build"
publish() { # publish <release>
  rm -rf "$work/build/"*
  cp -R "testdata/clusterstack/$1/." "$work/build/"
  git_ -C "$work/build" add -A
  git_ -C "$work/build" commit -q -m "$1"
  git_ -C "$work/build" tag -a -m "release $1" "$1"
  git_ -C "$work/build" push -q "$work/stacks.git" main --tags
}
publish testkit-ferrol-1-35-v1

step "stacksync run, with the Runtime SDK hooks listener on TLS"
(
  cd "$work"
  openssl req -x509 -nodes -days 1 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=stacksync example CA" \
    -keyout ca.key -out ca.crt -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=stacksync-hooks" -keyout tls.key -out tls.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > tls.ext
  openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile tls.ext -out tls.crt 2>/dev/null
)
NO_COLOR=1 "$stacksync" run --config "$here/stacksync.yaml" --admin-addr 127.0.0.1:0 \
  --hooks-addr 127.0.0.1:0 --hooks-cert-file "$work/tls.crt" --hooks-key-file "$work/tls.key" >"$work/stacksync.log" 2>&1 &
pids+=($!)
hooks_addr() { grep -m1 'hooks listener' "$work/stacksync.log" | sed -n 's/.*addr=\([^ ]*\).*/\1/p'; }
has_hooks_addr() { test -n "$(hooks_addr)"; }
wait_for 30 "the hooks listener" has_hooks_addr
sed -e "s|HOOKS_URL|https://$(hooks_addr)|" -e "s|CA_BUNDLE|$(base64 -w0 "$work/ca.crt")|" "$here/extension-config.yaml" | mgmt apply -f - >/dev/null
wait_for 60 "Cluster API discovering the extension" \
  sh -c "HOME='$work' kubectl --kubeconfig '$work/mgmt.kubeconfig' get extensionconfig stacksync -o jsonpath='{.status.handlers[*].name}' | grep -q before-cluster-upgrade"
echo "\$ kubectl get extensionconfig stacksync -o jsonpath='{.status.handlers[*].name}'"
mgmt get extensionconfig stacksync -o jsonpath='{.status.handlers[*].name}'; echo

step "a Cluster naming the v1 ClusterClass"
# Cluster API accepts it before the class exists (with a warning); stacksync then puts the
# subscription's ClusterClasses into its namespace, and Cluster API makes its topology from it.
echo "\$ kubectl apply -f examples/cluster-api/cluster.yaml"
mgmt apply -f "$here/cluster.yaml"
wait_for 120 "the v1 ClusterClass" mgmt get clusterclass testkit-ferrol-1-35-v1 -n team-a
echo "\$ kubectl get clusterclasses -n team-a"
mgmt get clusterclasses -n team-a
wait_for 180 "the Cluster's ClusterSync Ready" mgmt wait --for=condition=Ready clustersync/alpha -n team-a --timeout=1s
echo "\$ kubectl get clusters,testkitcontrolplanes -n team-a"
mgmt get clusters,testkitcontrolplanes -n team-a
echo "\$ kubectl get clustersyncs -n team-a"
mgmt get clustersyncs -n team-a
echo "\$ kubectl get deployments,configmaps -n team-a-alpha      (workload cluster)"
workload get deployments,configmaps -n team-a-alpha

step "release v2, and the upgrade: class and version together"
publish testkit-ferrol-1-35-v2
wait_for 120 "the v2 ClusterClass" mgmt get clusterclass testkit-ferrol-1-35-v2 -n team-a
# Cluster API lets a Cluster move to a class only once its controller reconciled it.
wait_for 120 "the v2 ClusterClass reconciled by Cluster API" \
  mgmt wait --for=condition=VariablesReady clusterclass/testkit-ferrol-1-35-v2 -n team-a --timeout=1s
calls() { grep 'runtime hook' "$work/stacksync.log" | grep 'hook=BeforeClusterUpgrade' | grep -c 'cluster=team-a/alpha' || true; }
started=$(date +%s.%N)
echo "\$ kubectl patch cluster alpha -n team-a --type merge -p '{\"spec\":{\"topology\":{\"classRef\":{\"name\":\"testkit-ferrol-1-35-v2\"},\"version\":\"v1.35.4\"}}}'"
mgmt patch cluster alpha -n team-a --type merge -p '{"spec":{"topology":{"classRef":{"name":"testkit-ferrol-1-35-v2"},"version":"v1.35.4"}}}'
called() { test "$(calls)" -ge 1; }
wait_for 60 "the first BeforeClusterUpgrade call" called
blocking() {
  mgmt get cluster alpha -n team-a -o jsonpath='{.status.conditions[?(@.type=="TopologyReconciled")].message}' |
    grep -q 'hooks are blocking upgrade'
}
wait_for 60 "Cluster API saying the hook holds the upgrade" blocking
sleep "${GATE_AFTER:-8}"
echo "\$ kubectl get cluster alpha -n team-a -o jsonpath='{.status.conditions[?(@.type==\"TopologyReconciled\")].message}'"
mgmt get cluster alpha -n team-a -o jsonpath='{.status.conditions[?(@.type=="TopologyReconciled")].message}'; echo
echo "\$ kubectl get testkitcontrolplanes -n team-a    (still v1.35.0: held)"
mgmt get testkitcontrolplanes -n team-a
echo "\$ kubectl get clustersyncs -n team-a"
mgmt get clustersyncs -n team-a
echo "\$ kubectl create configmap upgrade-gate -n kube-system --from-literal=go=yes      (workload cluster: the platform team's go)"
workload create configmap upgrade-gate -n kube-system --from-literal=go=yes >/dev/null
cp_version() { mgmt get testkitcontrolplanes -n team-a -o jsonpath='{.items[0].spec.version}'; }
upgraded() { test "$(cp_version)" = v1.35.4; }
wait_for 120 "the control plane upgraded" upgraded
released=$(date +%s.%N)
wait_for 120 "the ClusterSync Ready on v2" sh -c "HOME='$work' kubectl --kubeconfig '$work/mgmt.kubeconfig' get clustersync alpha -n team-a -o jsonpath='{.status.appliedRelease.tag}' | grep -qx testkit-ferrol-1-35-v2"
mgmt wait --for=condition=Ready clustersync/alpha -n team-a --timeout=120s >/dev/null
echo "\$ kubectl get clusters,testkitcontrolplanes,clustersyncs -n team-a"
mgmt get clusters,testkitcontrolplanes,clustersyncs -n team-a
stages=$(grep -c '    - name:' <(sed -n '/BeforeClusterUpgrade:/,$p' testdata/clusterstack/testkit-ferrol-1-35-v2/clusteraddon.yaml))
echo
held=$(awk -v a="$started" -v b="$released" 'BEGIN { printf "%.1f", b - a }')
echo "upgrade to testkit-ferrol-1-35-v2 held $held s by BeforeClusterUpgrade ($(calls) calls) until $stages stages were done; control plane now $(cp_version)"
