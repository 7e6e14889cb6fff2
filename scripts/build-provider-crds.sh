#!/usr/bin/env bash
# Takes the CRDs of the Cluster API providers the SCS cluster stacks name from their Go modules
# (never committed), for tests/scs_stacks.rs and `scripts/corpus.sh capi`: the providers'
# controllers do not run, but their kinds must exist on the management cluster for Cluster API's
# webhooks and topology controller to accept and compute a ClusterClass that references them.
#   kubeadm/     the kubeadm bootstrap and control-plane CRDs, from sigs.k8s.io/cluster-api at
#                the Cluster API version in use (bootstrap/kubeadm and controlplane/kubeadm
#                config/crd/bases)
#   docker/      the Docker provider's, from sigs.k8s.io/cluster-api/test at the same version
#                (infrastructure/docker/config/crd/bases)
#   openstack/   cluster-api-provider-openstack's (config/crd/bases) at $capo_version
# Each directory also gets the kustomization.yaml its CRDs come with: its `labels` /
# `commonLabels` carry the contract labels (`cluster.x-k8s.io/<contract>: <versions>`) that the
# provider's kustomize build adds and Cluster API reads; testkit (`testkit::providers`) adds them
# when it installs the CRDs.
#
# The modules are only downloaded (`go mod download`), never built. Cached per Cluster API
# version under $tools_dir/realkube/providers-<capi version>/; idempotent: does nothing when
# the stamp names the same versions. Needs Go and the Go module proxy.
# The Cluster API version is STACKSYNC_CAPI_VERSION (default v1.14.2, the one
# scripts/build-cluster-api.sh builds by default).
# Prints the directory on its last line.
set -euo pipefail

capi_version=${STACKSYNC_CAPI_VERSION:-v1.14.2}
# The newest cluster-api-provider-openstack the Go module proxy serves (v0.12.0, v0.12.2-4 and
# v0.13.x are refused; v0.11.3 works too).
capo_version=v0.12.1
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
out="$tools_dir/realkube/providers-$capi_version"
stamp="$out/VERSION"
want="cluster-api=$capi_version cluster-api-provider-openstack=$capo_version layout=1"

if [[ -f "$stamp" && "$(cat "$stamp")" = "$want" ]]; then
    echo "$out"
    exit 0
fi

command -v go >/dev/null || { echo "build-provider-crds.sh: Go is required" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
work="$(mktemp -d "$(dirname "$out")/.providers.XXXXXX")"
trap 'rm -rf "$work"' EXIT

module_dir() { # module@version
    local dir
    dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] && [ -d "$dir" ] || { echo "build-provider-crds.sh: the Go module proxy does not serve $1" >&2; exit 1; }
    echo "$dir"
}
take() { # module-dir crd-subdir out-name
    mkdir -p "$work/$3"
    cp "$1/$2"/bases/*.yaml "$work/$3/"
    # Where both kubeadm providers land in one directory, keep each kustomization apart.
    cp "$1/$2/kustomization.yaml" "$work/$3/kustomization-$(echo "$2" | tr / -).yaml"
}

echo "build-provider-crds.sh: provider CRDs for Cluster API $capi_version, OpenStack $capo_version" >&2
capi=$(module_dir "sigs.k8s.io/cluster-api@$capi_version")
take "$capi" bootstrap/kubeadm/config/crd kubeadm
take "$capi" controlplane/kubeadm/config/crd kubeadm
capi_test=$(module_dir "sigs.k8s.io/cluster-api/test@$capi_version")
take "$capi_test" infrastructure/docker/config/crd docker
capo=$(module_dir "sigs.k8s.io/cluster-api-provider-openstack@$capo_version")
take "$capo" config/crd openstack
chmod -R u+w "$work"
echo "$want" > "$work/VERSION"

rm -rf "$out"
mv "$work" "$out"
trap - EXIT
echo "$out"
