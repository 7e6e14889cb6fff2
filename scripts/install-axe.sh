#!/usr/bin/env bash
# Downloads axe-core (Deque's accessibility rules engine, MPL-2.0; the npm package, pinned below
# with the sha512 the registry published for it) into $STACKSYNC_TOOLS_DIR/axe-core (default
# ~/.cache/stacksync-tools/axe-core): axe.min.js, its LICENSE and a VERSION file. A test-only
# dependency, never part of the repository or the binary: tests/console.rs injects it into each
# console page over the DevTools protocol and fails on a serious or critical violation.
#
# Idempotent: does nothing when VERSION already says the pinned version. The tarball is checked
# against the pinned digest before anything is unpacked, and the files are put in place through a
# temporary directory and a rename, so a concurrent run never sees half a file.
# Prints the axe-core directory on its last line.
set -euo pipefail

axe_version=4.14.1
# `npm view axe-core@4.14.1 dist.integrity`, as hex (sha512-FHfa+lmN…udVGtQ==).
axe_sha512=1477dafa598d8d065f273d6af302aa203c02e83131707b7fa648cd41bd3d6b734f8c22a0dab86ee6a6f64b8afbe804b214d36db85a2826965edfb3a0b9d546b5
tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
axe_dir="$tools_dir/axe-core"

if [[ -s "$axe_dir/axe.min.js" && "$(cat "$axe_dir/VERSION" 2>/dev/null)" = "$axe_version" ]]; then
    echo "$axe_dir"
    exit 0
fi

command -v npm >/dev/null || { echo "install-axe.sh: npm is required" >&2; exit 1; }
mkdir -p "$tools_dir"
work="$(mktemp -d "$tools_dir/.axe-core.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "install-axe.sh: downloading axe-core $axe_version" >&2
(cd "$work" && npm pack --silent "axe-core@$axe_version" >/dev/null)
tarball="$work/axe-core-$axe_version.tgz"
got="$(sha512sum "$tarball" | cut -d' ' -f1)"
[[ "$got" = "$axe_sha512" ]] || { echo "install-axe.sh: axe-core-$axe_version.tgz has sha512 $got, expected $axe_sha512" >&2; exit 1; }
tar -xzf "$tarball" -C "$work" package/axe.min.js package/LICENSE
mkdir -p "$work/new"
mv "$work/package/axe.min.js" "$work/package/LICENSE" "$work/new/"
echo "$axe_version" >"$work/new/VERSION"
rm -rf "$axe_dir.old"
if [[ -e "$axe_dir" ]]; then mv "$axe_dir" "$axe_dir.old"; fi
mv "$work/new" "$axe_dir"
rm -rf "$axe_dir.old"
echo "$axe_dir"
