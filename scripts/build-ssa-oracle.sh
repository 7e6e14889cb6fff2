#!/usr/bin/env bash
# Builds scripts/ssa-oracle (server-side apply through structured-merge-diff v6.3.0, the library
# and version kube-apiserver 1.35 implements it with) into "$STACKSYNC_TOOLS_DIR/bin/ssa-oracle"
# (default "$HOME/.cache/stacksync-tools"), as a Go module pinned by scripts/ssa-oracle/go.mod
# and go.sum, from the Go module proxy (Go 1.24 or newer).
# Idempotent: rebuilds only when the source, go.mod or go.sum is newer than the binary. Prints
# the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."

tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin="$tools_dir/bin/ssa-oracle"
src=scripts/ssa-oracle

if [[ -x "$bin" && "$bin" -nt "$src/main.go" && "$bin" -nt "$src/go.mod" && "$bin" -nt "$src/go.sum" ]]; then
    echo "$bin"
    exit 0
fi

command -v go >/dev/null || { echo "build-ssa-oracle.sh: Go is required (1.24 or newer)" >&2; exit 1; }
mkdir -p "$tools_dir/bin"
(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o "$bin.tmp.$$" .)
mv -f "$bin.tmp.$$" "$bin"
echo "$bin"
