#!/usr/bin/env bash
# The corpus of real cluster stacks (not run by CI): renders every provider stack of a local
# checkout of SovereignCloudStack/cluster-stacks with stacksync and with the real helm run the way
# the SCS cluster-stack-operator runs it, and compares the two object by object, each read by the
# real kubectl. Prints a table: stack, what was rendered, objects, identical or the first difference.
#
#   scripts/corpus.sh PATH-TO-cluster-stacks-CHECKOUT
#
# Per stack `providers/<provider>/<name>/` (Kubernetes version from its csctl.yaml):
#  - packages it as csctl does: `helm package` of cluster-class/ renamed
#    `<provider>-<name>-<major>-<minor>-cluster-class` version v1; with clusteraddon.yaml, a .tgz of
#    cluster-addon/ (one directory per stage, plus clusteraddon.yaml), else a `helm package` of
#    cluster-addon/ and cluster-addon-values.yaml; metadata.yaml with clusterStack v1,
#    clusterAddon v1 and the Kubernetes version;
#  - serves the release with testkit's GitHub server (`testkit github`), and renders it with
#    `stacksync render` for two clusters (alpha in team-a, beta in team-b);
#  - renders the reference with helm: `helm template <stack> <class chart> --namespace <ns>`, and per
#    cluster and stage `helm template --include-crds --kube-version <k8s> cluster-addon <chart>
#    --namespace kube-system -f <values>`, the values evaluated by Go's text/template with sprig
#    (scripts/corpus/values.go, the operator's engine);
#  - reads both with `kubectl annotate --local -o json` and compares (scripts/corpus/compare.py).
# Installs Debian's golang-go, sprig and yaml.v3 when missing; helm and kubectl via install-tools.sh.
#
#   scripts/corpus.sh capi PATH-TO-cluster-stacks-CHECKOUT
#
# The Cluster API mode: packages every stack the same way, then runs the ignored test
# `public_cluster_stacks_on_the_real_cluster_api` of tests/scs_stacks.rs on them: stacksync
# applies each release to the real Cluster API (STACKSYNC_CAPI_VERSION, default v1.14.2) on the
# real control plane, with the kubeadm, Docker and OpenStack providers' CRDs installed
# (scripts/build-provider-crds.sh; their controllers do not run, testkit plays their contracts),
# and the test judges each ClusterClass (accepted by the webhooks; `VariablesReady` and
# `RefVersionsUpToDate` True) and a topology Cluster with the class's required variables (its
# infrastructure cluster and control plane computed, `TopologyReconciled` True). Prints a table:
# stack, pass/FAIL, what failed. Needs the Go module proxy the first time (builds what is missing).
set -euo pipefail
mode=render
if [ "${1:-}" = capi ]; then mode=capi; shift; fi
src=$(cd "${1:?usage: scripts/corpus.sh [capi] PATH-TO-cluster-stacks-CHECKOUT}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tdir=${CARGO_TARGET_DIR:-$root/target}
work=${CORPUS_WORK:-$(mktemp -d)}
mkdir -p "$work"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "$mode" = render ] && { ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/github.com/Masterminds/sprig ] || [ ! -d /usr/share/gocode/src/gopkg.in/yaml.v3 ]; }; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev >/dev/null
fi
bin=$("$root/scripts/install-tools.sh" --for quickstart | tail -n 1)
helm="$bin/helm"
kubectl="$bin/kubectl"
if [ "$mode" = render ]; then
(cd "$root" && cargo build --quiet --locked --bin stacksync -p stacksync && cargo build --quiet --locked --bin testkit -p testkit)
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$work/gocache" go build -o "$work/values" "$root/scripts/corpus/values.go"
fi
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"

clusters=("alpha team-a" "beta team-b")
cluster_json() { # name namespace
  printf '{"apiVersion":"cluster.x-k8s.io/v1beta1","kind":"Cluster","metadata":{"name":"%s","namespace":"%s"},"spec":{"controlPlaneEndpoint":{"host":"%s.example.test","port":6443}}}' "$1" "$2" "$1"
}
as_json() { HOME="$work" "$kubectl" annotate --local -R -f "$1" corpus.stacksync.io/read=kubectl -o json; }

rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s |' "$1" "$2" "$3" "$4")"); }
compare() { # stack part helm-yaml stacksync-dir-or-file
  local out n
  if [ ! -s "$3" ] && [ -z "$(find "$4" -name '*.yaml' 2>/dev/null | head -1)" ]; then row "$1" "$2" 0 "identical (no objects)"; return; fi
  as_json "$3" >"$work/h.json" 2>"$work/err" || { row "$1" "$2" "-" "kubectl refuses helm's output: $(head -c 160 "$work/err")"; return; }
  as_json "$4" >"$work/s.json" 2>"$work/err" || { row "$1" "$2" "-" "kubectl refuses stacksync's output: $(head -c 160 "$work/err")"; return; }
  as_json "${3%.yaml}.again.yaml" >"$work/h2.json" 2>/dev/null || echo '{}' >"$work/h2.json"
  out=$(python3 "$root/scripts/corpus/compare.py" "$work/h.json" "$work/s.json" "$work/h2.json") || true
  n=${out#identical }
  if [ "$n" != "$out" ]; then
    case "$n" in *" "*) row "$1" "$2" "${n%% *}" "identical ${n#* }" ;; *) row "$1" "$2" "$n" identical ;; esac
  else
    row "$1" "$2" "-" "${out#DIFF }"
  fi
}

for csctl in "$src"/providers/*/*/csctl.yaml; do
  dir=$(dirname "$csctl")
  name=$(basename "$dir")
  provider=$(basename "$(dirname "$dir")")
  k8s=$(sed -n 's/^ *kubernetesVersion: *//p' "$csctl" | tr -d '"' | head -1)
  minor=$(echo "${k8s#v}" | cut -d. -f1-2 | tr . -)
  stack="$provider-$name-$minor"
  rel="$work/releases/scs/cluster-stacks/$stack-v1"
  build="$work/build/$stack"
  rm -rf "$rel" "$build" "$work/ref/$stack" "$work/out/$stack"
  mkdir -p "$rel" "$build" "$work/ref/$stack"

  # Package as csctl does.
  cp -R "$dir/cluster-class" "$build/$stack-cluster-class"
  sed -i -e "s/^name:.*/name: $stack-cluster-class/" -e "s/^version:.*/version: v1/" "$build/$stack-cluster-class/Chart.yaml"
  "$helm" package "$build/$stack-cluster-class" -d "$rel" >/dev/null
  if [ -f "$dir/clusteraddon.yaml" ]; then
    cp -R "$dir/cluster-addon" "$build/addon"
    cp "$dir/clusteraddon.yaml" "$build/addon/"
    cp "$dir/clusteraddon.yaml" "$rel/"
    tar -czf "$rel/$stack-cluster-addon-v1.tgz" -C "$build/addon" .
    stages=$(python3 -c 'import sys,yaml; d=yaml.safe_load(open(sys.argv[1])); print(" ".join(s["name"] for s in d["addonStages"]["AfterControlPlaneInitialized"] if s.get("action")=="apply"))' "$dir/clusteraddon.yaml")
  else
    cp -R "$dir/cluster-addon" "$build/$stack-cluster-addon"
    sed -i -e "s/^name:.*/name: $stack-cluster-addon/" -e "s/^version:.*/version: v1/" "$build/$stack-cluster-addon/Chart.yaml"
    "$helm" package "$build/$stack-cluster-addon" -d "$rel" >/dev/null
    cp "$dir/cluster-addon-values.yaml" "$rel/"
    stages=""
  fi
  printf 'apiVersion: metadata.clusterstack.x-k8s.io/v1alpha1\nversions:\n  clusterStack: v1\n  kubernetes: %s\n  components:\n    clusterAddon: v1\n' "$k8s" >"$rel/metadata.yaml"
  # The Cluster API mode judges the packaged releases together, after the loop.
  [ "$mode" = capi ] && continue

  # The reference: helm as the operator runs it, twice (what differs between the runs is random).
  twice() { # out-file helm-args...
    local out=$1; shift
    "$helm" template "$@" >"$out" 2>"${out%.yaml}.err" || return 0
    "$helm" template "$@" >"${out%.yaml}.again.yaml" 2>/dev/null || true
  }
  for c in "${clusters[@]}"; do
    set -- $c
    cluster_json "$1" "$2" >"$build/$1.json"
    twice "$work/ref/$stack/$2-cluster-class.yaml" "$stack" "$rel/$stack-cluster-class-v1.tgz" --namespace "$2"
    if [ -z "$stages" ]; then
      "$work/values" "$rel/cluster-addon-values.yaml" "$build/$1.json" >"$build/$1-values.yaml"
      twice "$work/ref/$stack/$1-addon.yaml" --include-crds --kube-version "$k8s" cluster-addon "$rel/$stack-cluster-addon-v1.tgz" \
        --namespace kube-system -f "$build/$1-values.yaml"
    else
      for s in $stages; do
        vals=()
        if [ -f "$build/addon/$s/overwrite.yaml" ]; then
          "$work/values" "$build/addon/$s/overwrite.yaml" "$build/$1.json" >"$build/$1-$s-values.yaml"
          vals=(-f "$build/$1-$s-values.yaml")
        fi
        twice "$work/ref/$stack/$1-$s.yaml" --include-crds --kube-version "$k8s" cluster-addon "$build/addon/$s" --namespace kube-system "${vals[@]}"
      done
    fi
  done

  # stacksync: the release from testkit's GitHub server, `stacksync render`.
  mkdir -p "$work/serve/$stack/scs/cluster-stacks"
  rm -rf "$work/serve/$stack/scs/cluster-stacks/$stack-v1"
  cp -R "$rel" "$work/serve/$stack/scs/cluster-stacks/"
  rm -f "$work/addr"
  "$tdir/debug/testkit" github --releases "$work/serve/$stack" --addr-out "$work/addr" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
  {
    printf 'apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache:\n  dir: %s/cache/%s\nhelm:\n  path: %s\n' "$work" "$stack" "$helm"
    printf 'sources:\n  - name: scs\n    github:\n      repo: scs/cluster-stacks\n      apiUrl: %s\n' "$(cat "$work/addr")"
    printf 'subscriptions:\n  - name: corpus\n    source: scs\n    stack: %s\n    format: clusterstack\n    version: ">=v1"\n    clusters:\n' "$stack"
    for c in "${clusters[@]}"; do
      set -- $c
      printf '      - name: %s\n        namespace: %s\n        cluster: %s\n' "$1" "$2" "$(cat "$build/$1.json")"
    done
    printf 'target:\n  directory: %s/out/%s\n' "$work" "$stack"
  } >"$work/$stack.yaml"
  "$tdir/debug/stacksync" render --config "$work/$stack.yaml" --out "$work/out/$stack" >"$work/$stack.render.log" 2>&1 || true
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true

  for c in "${clusters[@]}"; do
    set -- $c
    if [ -s "$work/ref/$stack/$2-cluster-class.err" ]; then
      row "$stack" "$1: cluster-class" "-" "helm fails: $(head -c 160 "$work/ref/$stack/$2-cluster-class.err" | tr '\n' ' ')"
    else
      compare "$stack" "$1: cluster-class" "$work/ref/$stack/$2-cluster-class.yaml" "$work/out/$stack/$2/cluster-class"
    fi
    for s in ${stages:-addon}; do
      ref="$work/ref/$stack/$1-$s.yaml"
      ours="$work/out/$stack/$2/$1/$s"
      [ -z "$stages" ] && ours="$work/out/$stack/$2/$1"
      if [ -s "${ref%.yaml}.err" ]; then
        why=$(grep -m1 -o 'found in Chart.yaml, but missing in charts/ directory[^$]*' "${ref%.yaml}.err" || head -c 160 "${ref%.yaml}.err" | tr '\n' ' ')
        if grep -q "$s" "$work/$stack.render.log" 2>/dev/null && [ ! -d "$ours" ]; then
          row "$stack" "$1: $s" "-" "both refuse (helm: ${why:0:120})"
        else
          row "$stack" "$1: $s" "-" "helm fails, stacksync renders: ${why:0:120}"
        fi
      else
        compare "$stack" "$1: $s" "$ref" "$ours"
      fi
    done
  done
done

if [ "$mode" = capi ]; then
  "$root/scripts/install-tools.sh" --for cluster-api >/dev/null
  log="$work/capi.log"
  (cd "$root" && STACKSYNC_SCS_RELEASES="$work/releases/scs/cluster-stacks" STACKSYNC_HELM="$helm" \
    cargo test --quiet --locked --test scs_stacks -- --ignored --exact public_cluster_stacks_on_the_real_cluster_api --nocapture) >"$log" 2>&1 || true
  echo "cluster-stacks checkout: $src ($(git -C "$src" rev-parse HEAD 2>/dev/null || echo 'not a git checkout'))"
  echo "Cluster API ${STACKSYNC_CAPI_VERSION:-v1.14.2} with the kubeadm, Docker and OpenStack providers' CRDs ($(sed -n 's/.*cluster-api-provider-openstack=\([^ ]*\).*/OpenStack \1/p' "$("$root/scripts/build-provider-crds.sh" 2>/dev/null | tail -n 1)/VERSION"))"
  echo
  echo "| stack | result | detail |"
  echo "|---|---|---|"
  grep '^CORPUS | ' "$log" | sed 's/^CORPUS | /| /; s/$/ |/' || echo "| (no result) | FAIL | see $log |"
  echo
  echo "log: $log"
  exit 0
fi

echo "cluster-stacks checkout: $src ($(git -C "$src" rev-parse HEAD 2>/dev/null || echo 'not a git checkout'))"
echo
echo "| stack | rendered | objects | result |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "work directory: $work"
