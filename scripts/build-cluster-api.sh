#!/usr/bin/env bash
# Builds the real Cluster API core manager (sigs.k8s.io/cluster-api/core at a pinned version) that
# `testkit kube --cluster-api`, tests/cluster_api.rs and examples/cluster-api run, from the
# wrapper module scripts/realkube/cluster-api (go.mod and go.sum committed: the upstream go.mod
# replaces sigs.k8s.io/cluster-api/api with ./api, which only resolves in a checkout).
# Beside the binary it installs what the manager's kustomize config would install, unrendered:
# the CRDs (core/config/crd/bases) and the webhook configurations (core/config/webhook/
# manifests.yaml); testkit points their service references at the manager's loopback webhook
# server and fills in the CA when it starts Cluster API.
#
# STACKSYNC_CAPI_VERSION picks another release: one with a wrapper module
# scripts/realkube/cluster-api-<version> (today v1.10.10, the last v1beta1-storage release,
# whose manager is the module root package and whose config/ sits at the module root). The
# default is installed into realkube/cluster-api, any other into realkube/cluster-api-<version>,
# where testkit looks for it under the same variable.
#
# Idempotent: does nothing when the stamp names the same version and go.sum. Built into a
# temporary directory and renamed. Needs Go >= 1.26 and the Go module proxy.
# Prints the directory (binary `capi-manager`, `crds/`, `webhooks.yaml`) on its last line.
#
# Cost on a fresh 2-core machine: about 200 MB of modules and ~8 minutes of compiling (it shares
# most of its compiled packages with nothing else: Cluster API 1.14 builds on k8s.io 0.36).
set -euo pipefail
cd "$(dirname "$0")/.."

default_capi_version=v1.14.2
capi_version="${STACKSYNC_CAPI_VERSION:-$default_capi_version}"
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
if [[ "$capi_version" = "$default_capi_version" ]]; then
    capi_module=cluster-api
    out="$tools_dir/realkube/cluster-api"
else
    capi_module="cluster-api-$capi_version"
    out="$tools_dir/realkube/cluster-api-$capi_version"
fi
if [[ ! -f "scripts/realkube/$capi_module/go.mod" ]]; then
    echo "build-cluster-api.sh: STACKSYNC_CAPI_VERSION=$capi_version has no wrapper module" \
        "scripts/realkube/$capi_module (supported: $default_capi_version" \
        "$(cd scripts/realkube && ls -d cluster-api-v* 2>/dev/null | sed 's/^cluster-api-//' | tr '\n' ' '))" >&2
    exit 1
fi
stamp="$out/VERSION"
want="cluster-api=$capi_version $(sha256sum "scripts/realkube/$capi_module/go.sum" | cut -c1-16)"

if [[ -x "$out/capi-manager" && -f "$out/webhooks.yaml" && -d "$out/crds" && -f "$stamp" && "$(cat "$stamp")" = "$want" ]]; then
    echo "$out"
    exit 0
fi

command -v go >/dev/null || { echo "build-cluster-api.sh: Go is required (go 1.26 or newer)" >&2; exit 1; }
mkdir -p "$out"
work="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

cd "scripts/realkube/$capi_module"
# The manager's package is the wrapper's one tool (sigs.k8s.io/cluster-api/core from v1.11 on).
main_package=$(sed -n 's/^tool \(sigs.k8s.io\/cluster-api[^ ]*\)$/\1/p' go.mod)
[[ -n "$main_package" ]] || { echo "build-cluster-api.sh: no tool line in scripts/realkube/$capi_module/go.mod" >&2; exit 1; }
echo "build-cluster-api.sh: building the Cluster API core manager $capi_version" >&2
ldflags="-s -w"
minor=${capi_version#v1.}; minor=${minor%%.*}
for var in gitVersion=$capi_version gitMajor=1 gitMinor=$minor gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
    ldflags+=" -X sigs.k8s.io/cluster-api/version.$var"
done
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$work/capi-manager" "$main_package"
module_dir=$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
config_dir="$module_dir/core/config"
[[ -d "$config_dir" ]] || config_dir="$module_dir/config"
mkdir -p "$work/crds"
cp "$config_dir"/crd/bases/*.yaml "$work/crds/"
cp "$config_dir/webhook/manifests.yaml" "$work/webhooks.yaml"
chmod -R u+w "$work"
cd - >/dev/null

rm -rf "$out/crds"
mv -f "$work/crds" "$out/crds"
mv -f "$work/webhooks.yaml" "$out/webhooks.yaml"
mv -f "$work/capi-manager" "$out/capi-manager"
echo "$want" > "$stamp.tmp.$$" && mv -f "$stamp.tmp.$$" "$stamp"
echo "build-cluster-api.sh: built capi-manager in $(( $(date +%s) - started ))s" >&2
echo "$out"
