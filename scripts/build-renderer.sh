#!/usr/bin/env bash
# Builds stacksync's library renderer and its referee, both on helm v4.3.2 from the Go module proxy:
#   - stacksync-renderer (renderer/: a Go module of ours whose go.mod/go.sum pin helm.sh/helm/v4
#     v4.3.2 and everything it brings, built with -mod=readonly) into $STACKSYNC_TOOLS_DIR/bin
#     (default ~/.cache/stacksync-tools/bin): the long-lived process stacksync renders charts
#     with (src/render/renderer.rs);
#   - the referee, the real helm CLI of the same version (`go install
#     helm.sh/helm/v4/cmd/helm@v4.3.2`), into $STACKSYNC_TOOLS_DIR/helm-v4.3.2/helm: what
#     tests/renderer.rs and benches/renderer.rs compare the renderer with. Not the `helm` that
#     scripts/install-tools.sh puts in bin/ (helm 4.1 from npm, in seconds: `helm package`,
#     `helm install` of stacksync's own chart, `helm.renderer: process` in the tests).
# Both are linked with the version flags of helm's Makefile (version v4.3.2, no build metadata, tree
# clean; the module proxy has no Git commit to name, so none is set), so both say `v4.3.2` to
# `helm version --short` and to a template's `.Capabilities.HelmVersion`.
#
# Usage: scripts/build-renderer.sh [--renderer-only | --referee-only]
# Idempotent: the renderer is rebuilt only when its sources or the Go version change (a stamp of
# their hash beside it), the referee only when it does not report v4.3.2. Built into a temporary
# name and renamed into place, so a concurrent run never sees half a binary. Uses the shared
# GOCACHE/GOMODCACHE (`go env`). Needs Go 1.26 or newer (GOTOOLCHAIN=local: never a downloaded
# toolchain). Cost on a fresh 2-core machine: about 250 MB of modules and 2.5 minutes of
# compiling for each binary (the second shares most of the first's compiled packages).
# Prints the bin directory (where stacksync-renderer is) on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

helm_version=v4.3.2
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin_dir="$tools_dir/bin"
referee_dir="$tools_dir/helm-$helm_version"
src=renderer

want_renderer=1 want_referee=1
case "${1:-}" in
  "") ;;
  --renderer-only) want_referee=0 ;;
  --referee-only) want_renderer=0 ;;
  *) echo "build-renderer.sh: unknown argument '$1' (usage: [--renderer-only | --referee-only])" >&2; exit 2 ;;
esac

go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; }
go=""
for candidate in "$(command -v go || true)" /usr/local/go/bin/go; do
  if [ -n "$candidate" ] && go_ok "$candidate"; then
    go=$candidate
    break
  fi
done
if [ -z "$go" ]; then
  echo "build-renderer.sh: needs Go 1.26 or newer (on PATH or /usr/local/go/bin/go); found: $(go version 2>/dev/null || echo none)" >&2
  exit 1
fi

# The version flags of helm's Makefile, for a tagged build.
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

mkdir -p "$bin_dir"
if [ "$want_renderer" = 1 ]; then
  hash=$( (cat "$src"/*.go "$src/go.mod" "$src/go.sum"; echo "$ldflags"; GOTOOLCHAIN=local "$go" version) | sha256sum | cut -c1-16)
  stamp="$bin_dir/.stacksync-renderer.hash"
  if [[ ! -x "$bin_dir/stacksync-renderer" || "$(cat "$stamp" 2>/dev/null)" != "$hash" ]]; then
    echo "build-renderer.sh: building stacksync-renderer on helm $helm_version" >&2
    tmp="$bin_dir/.stacksync-renderer.tmp.$$"
    (cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$tmp" .)
    got=$("$tmp" --version)
    [ "$got" = "$helm_version" ] || { rm -f "$tmp"; echo "build-renderer.sh: the renderer says helm $got, not $helm_version" >&2; exit 1; }
    mv -f "$tmp" "$bin_dir/stacksync-renderer"
    echo "$hash" >"$stamp"
  fi
fi

if [ "$want_referee" = 1 ]; then
  if ! { [ -x "$referee_dir/helm" ] && [ "$("$referee_dir/helm" version --short 2>/dev/null)" = "$helm_version" ]; }; then
    echo "build-renderer.sh: building the referee, helm $helm_version" >&2
    mkdir -p "$referee_dir"
    work="$(mktemp -d "$referee_dir/.helm.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    # `go install pkg@version` builds exactly the module's own go.mod/go.sum (no local edits).
    GOTOOLCHAIN=local GOBIN="$work" CGO_ENABLED=0 "$go" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v4/cmd/helm@$helm_version"
    got=$("$work/helm" version --short)
    [ "$got" = "$helm_version" ] || { echo "build-renderer.sh: the referee says $got, not $helm_version" >&2; exit 1; }
    mv -f "$work/helm" "$referee_dir/helm"
  fi
fi
echo "$bin_dir"
