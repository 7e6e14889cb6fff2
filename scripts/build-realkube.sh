#!/usr/bin/env bash
# Builds the real Kubernetes control plane that `testkit kube` runs, from pinned Go modules:
# kube-apiserver, kube-controller-manager and kube-scheduler (k8s.io/kubernetes, by default
# v1.35.4), etcd (go.etcd.io/etcd/server/v3 v3.6.5) and kwok (sigs.k8s.io/kwok v0.7.0, fake
# kubelets). Each comes from a small wrapper module under scripts/realkube/ (go.mod and go.sum
# committed: the upstream go.mod files replace their sibling modules with paths that only resolve
# in a checkout).
#
# STACKSYNC_KUBE_VERSION picks another Kubernetes release: one that has a wrapper module
# scripts/realkube/kubernetes-<version> (today v1.33.13, the oldest supported minor). The default
# version is built into realkube/bin, any other into realkube/kubernetes-<version>/bin (the same
# five binaries; etcd and kwok are the same versions, relinked from the warm Go cache in seconds),
# which is where testkit looks for it under the same variable.
#
# Idempotent: does nothing when the stamp file names the same versions and every binary is there.
# Binaries are built into a temporary directory and renamed into place, so a concurrent run never
# sees half a binary. Needs Go >= 1.25 and the Go module proxy (GOPROXY as configured).
# Prints the bin directory on its last line.
#
# Cost on a fresh 2-core machine: about 450 MB of modules downloaded once (into GOMODCACHE) and
# about 12 minutes of compiling (into GOCACHE); a rebuild with a warm GOCACHE takes about a minute.
# Another Kubernetes minor shares little compiled code with the default one: see docs/testing.md
# for its cold and warm cost.
# Usage: [STACKSYNC_KUBE_VERSION=v1.33.13] scripts/build-realkube.sh
set -euo pipefail
cd "$(dirname "$0")/.."

default_kube_version=v1.35.4
kube_version="${STACKSYNC_KUBE_VERSION:-$default_kube_version}"
etcd_version=v3.6.5
kwok_version=v0.7.0
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
if [[ "$kube_version" = "$default_kube_version" ]]; then
    kube_module=kubernetes
    bin_dir="$tools_dir/realkube/bin"
else
    kube_module="kubernetes-$kube_version"
    bin_dir="$tools_dir/realkube/kubernetes-$kube_version/bin"
fi
if [[ ! -f "scripts/realkube/$kube_module/go.mod" ]]; then
    echo "build-realkube.sh: STACKSYNC_KUBE_VERSION=$kube_version has no wrapper module" \
        "scripts/realkube/$kube_module (supported: $default_kube_version" \
        "$(cd scripts/realkube && ls -d kubernetes-v* 2>/dev/null | sed 's/^kubernetes-//' | tr '\n' ' '))" >&2
    exit 1
fi
stamp="$bin_dir/VERSIONS"
sums=$(sha256sum "scripts/realkube/$kube_module/go.sum" scripts/realkube/etcd/go.sum scripts/realkube/kwok/go.sum | sha256sum | cut -c1-16)
want="kubernetes=$kube_version etcd=$etcd_version kwok=$kwok_version $sums"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

complete=1
for b in "${binaries[@]}"; do [[ -x "$bin_dir/$b" ]] || complete=0; done
if [[ $complete = 1 && -f "$stamp" && "$(cat "$stamp")" = "$want" ]]; then
    echo "$bin_dir"
    exit 0
fi

command -v go >/dev/null || { echo "build-realkube.sh: Go is required (go 1.25 or newer)" >&2; exit 1; }
mkdir -p "$bin_dir"
work="$(mktemp -d "$bin_dir/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

# /version must answer a real release: Cluster API refuses v0.0.0-master.
minor=${kube_version#v1.}; minor=${minor%%.*}
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # build <wrapper dir> <output name> <package> <ldflags>
    echo "build-realkube.sh: building $2 ($3)" >&2
    (cd "scripts/realkube/$1" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$4" -o "$work/$2" "$3")
}
build "$kube_module" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build "$kube_module" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build "$kube_module" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version"

for b in "${binaries[@]}"; do mv -f "$work/$b" "$bin_dir/$b"; done
echo "$want" > "$stamp.tmp.$$" && mv -f "$stamp.tmp.$$" "$stamp"
echo "build-realkube.sh: built ${binaries[*]} in $(( $(date +%s) - started ))s" >&2
echo "$bin_dir"
