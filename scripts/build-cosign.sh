#!/usr/bin/env bash
# Builds the real `cosign` (github.com/sigstore/cosign/v2, pinned below) from the Go module proxy
# into $STACKSYNC_TOOLS_DIR/bin (default ~/.cache/stacksync-tools/bin). The signed-release tests
# sign OCI artifacts (`cosign sign`, the `sha256-<digest>.sig` tag) and release assets
# (`cosign sign-blob`) with it, offline: keys from `cosign generate-key-pair`, no transparency log.
#
# Idempotent: does nothing when the installed binary reports the pinned version. Built into a
# temporary directory and renamed into place, so a concurrent run never sees half a binary.
# Uses the shared GOCACHE/GOMODCACHE (`go env`), so a rebuild costs little.
# Cost on a fresh 2-core machine: about 300 MB of modules and several minutes of compiling.
# Prints the bin directory on its last line.
set -euo pipefail

cosign_version=v2.4.0
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin_dir="$tools_dir/bin"

if [[ -x "$bin_dir/cosign" ]] && "$bin_dir/cosign" version 2>/dev/null | grep -q "GitVersion:.*${cosign_version#v}"; then
    echo "$bin_dir"
    exit 0
fi

command -v go >/dev/null || { echo "build-cosign.sh: Go is required (go 1.22 or newer)" >&2; exit 1; }
mkdir -p "$bin_dir"
work="$(mktemp -d "$bin_dir/.cosign.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "build-cosign.sh: building cosign $cosign_version" >&2
# `go install pkg@version` builds exactly the module's own go.mod/go.sum (no local edits).
# The version string `cosign version` prints is set the way cosign's Makefile does.
GOBIN="$work" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$cosign_version" \
    "github.com/sigstore/cosign/v2/cmd/cosign@$cosign_version"
mv -f "$work/cosign" "$bin_dir/cosign"
echo "$bin_dir"
