#!/usr/bin/env bash
# Builds scripts/ssa-oracle (server-side apply through structured-merge-diff 4.1.2, the library
# kube-apiserver implements it with) into "$STACKSYNC_TOOLS_DIR/bin/ssa-oracle" (default
# "$HOME/.cache/stacksync-tools"), offline, from Debian's golang-go and
# golang-k8s-sigs-structured-merge-diff-dev (installed when missing). Debian installs the library
# without the /v4 its imports use: a private GOPATH with a symlink bridges that.
# Idempotent: rebuilds only when the source is newer than the binary. Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin="$tools_dir/bin/ssa-oracle"
src="$PWD/scripts/ssa-oracle/main.go"
smd=/usr/share/gocode/src/sigs.k8s.io/structured-merge-diff

if [[ -x "$bin" && "$bin" -nt "$src" ]]; then
    echo "$bin"
    exit 0
fi

if ! command -v go >/dev/null || [[ ! -d "$smd/merge" ]]; then
    echo "build-ssa-oracle.sh: installing Debian's golang-go and golang-k8s-sigs-structured-merge-diff-dev" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-k8s-sigs-structured-merge-diff-dev >/dev/null
fi

gopath="$tools_dir/ssa-oracle-gopath"
mkdir -p "$gopath/src/sigs.k8s.io/structured-merge-diff" "$gopath/src/ssa-oracle" "$tools_dir/bin"
ln -sfn "$smd" "$gopath/src/sigs.k8s.io/structured-merge-diff/v4"
cp "$src" "$gopath/src/ssa-oracle/main.go"
GOPATH="$gopath:/usr/share/gocode" GO111MODULE=off GOCACHE="$tools_dir/ssa-oracle-gocache" \
    go build -o "$bin.tmp" ssa-oracle
mv -f "$bin.tmp" "$bin"
echo "$bin"
