#!/usr/bin/env bash
# Builds the Go oracle of the values-template conformance suite and fuzzer of the gotemplate crate
# (crates/gotemplate/tests/conformance.rs, crates/gotemplate/tests/template_fuzz): Go 1.26's
# text/template with github.com/go-task/slim-sprig/v3's TxtFuncMap, the function map the SCS
# cluster-stack-operator gives its values templates. It is a Go module
# (crates/gotemplate/tests/conformance/oracle: go.mod and go.sum pin slim-sprig v3.0.0 and its checksums),
# built with -mod=readonly, so the module proxy serves exactly the pinned, checksummed sources.
# Needs Go >= 1.26 on PATH or in /usr/local/go (GOTOOLCHAIN=local: never a downloaded toolchain).
# Idempotent: the binary is cached in the tools dir ($STACKSYNC_TOOLS_DIR, default
# $HOME/.cache/stacksync-tools) per hash of the sources and the Go version; a cached one is reused.
# Prints the binary's path on its last line (what STACKSYNC_TEMPLATE_ORACLE is set to).
# Usage: scripts/build-oracles.sh
set -euo pipefail
cd "$(dirname "$0")/.."

src=crates/gotemplate/tests/conformance/oracle
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"

go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; }
go=""
for candidate in "$(command -v go || true)" /usr/local/go/bin/go; do
  if [ -n "$candidate" ] && go_ok "$candidate"; then
    go=$candidate
    break
  fi
done
if [ -z "$go" ]; then
  echo "build-oracles.sh: needs Go 1.26 or newer (on PATH or /usr/local/go/bin/go); found: $(go version 2>/dev/null || echo none)" >&2
  exit 1
fi

hash=$( (cat "$src/main.go" "$src/go.mod" "$src/go.sum"; GOTOOLCHAIN=local "$go" version) | sha256sum | cut -c1-16)
dir="$tools_dir/template-oracle/$hash"
bin="$dir/template-oracle"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  (cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$go" build -trimpath -o "$bin.tmp.$$" .)
  mv -f "$bin.tmp.$$" "$bin"
fi
echo "$bin"
