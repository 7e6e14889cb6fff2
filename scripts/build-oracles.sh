#!/usr/bin/env bash
# Builds the Go oracle of the values-template conformance suite (tests/conformance.rs): Go's
# text/template with sprig 3.2.3's text functions restricted to slim-sprig's set, compiled offline
# from Debian's golang-go and golang-github-masterminds-sprig-dev (GOPATH mode against
# /usr/share/gocode, so no module download). Installs those packages when missing.
# Idempotent: the binary is cached per source hash. Prints the binary's path on its last line.
# Usage: scripts/build-oracles.sh
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

src=tests/conformance/oracle/main.go
gocode=/usr/share/gocode
if ! command -v go >/dev/null 2>&1 || [ ! -d "$gocode/src/github.com/Masterminds/sprig" ]; then
  echo "build-oracles.sh: installing Debian's golang-go and golang-github-masterminds-sprig-dev" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-github-masterminds-sprig-dev >/dev/null
fi

hash=$( (cat "$src"; go version) | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/stacksync-tools/oracle/$hash"
bin="$cache/template-oracle"
if [ ! -x "$bin" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/gopath/src/stacksync-oracle" "$cache"
  cp "$src" "$work/gopath/src/stacksync-oracle/main.go"
  # GOPATH mode resolves sprig's `/v3` imports through Go's minimal module compatibility.
  (cd "$work/gopath/src/stacksync-oracle" &&
    GO111MODULE=off GOFLAGS= GOPROXY=off GOPATH="$work/gopath:$gocode" GOCACHE="$work/cache" \
      go build -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
