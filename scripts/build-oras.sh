#!/usr/bin/env bash
# Builds the real `oras` (oras.land/oras, pinned below) from the Go module proxy into
# $STACKSYNC_TOOLS_DIR/bin (default ~/.cache/stacksync-tools/bin). tests/preview.rs pushes a
# cluster-stack release with it into an OCI image layout (`oras push --oci-layout`), as a release
# pipeline would, and previews that layout.
#
# Idempotent: does nothing when the installed binary reports the pinned version. Built into a
# temporary directory and renamed into place, so a concurrent run never sees half a binary.
# Uses the shared GOCACHE/GOMODCACHE (`go env`). Prints the bin directory on its last line.
set -euo pipefail

oras_version=v1.3.6
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin_dir="$tools_dir/bin"

if [[ -x "$bin_dir/oras" ]] && "$bin_dir/oras" version 2>/dev/null | grep -q "Version:.*${oras_version#v}"; then
    echo "$bin_dir"
    exit 0
fi

command -v go >/dev/null || { echo "build-oras.sh: Go is required" >&2; exit 1; }
mkdir -p "$bin_dir"
work="$(mktemp -d "$bin_dir/.oras.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "build-oras.sh: building oras $oras_version" >&2
# The version `oras version` prints is set the way oras's Makefile does.
GOBIN="$work" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X oras.land/oras/internal/version.Version=${oras_version#v} -X oras.land/oras/internal/version.BuildMetadata=" \
    "oras.land/oras/cmd/oras@$oras_version"
mv -f "$work/oras" "$bin_dir/oras"
echo "$bin_dir"
