#!/usr/bin/env bash
# Quickstart: the main job, no cluster needed. Builds a small cluster-stack release repository of
# our own (two releases as Git tags: a ClusterClass chart with its templates, a multi-stage addon
# with clusteraddon.yaml and overwrite.yaml values templates over .Cluster), installs helm when it
# is missing (`scripts/install-tools.sh --for quickstart`: helm only, no Kubernetes), and runs one stacksync pass with the
# directory target: the ClusterClass once per namespace, the addons per cluster, stage by stage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# STACKSYNC_ROOT and STACKSYNC_BIN let the CI test run a copy of this directory with the built binary.
root=${STACKSYNC_ROOT:-$(cd "$here/../.." && pwd)}
work="$here/.work"
rm -rf "$work"
mkdir -p "$work"
"$here/make-repo.sh" "$work/stacks.git"

# stacksync renders cluster stacks with the real helm (`helm template`), as the SCS operator does.
bin=$("$root/scripts/install-tools.sh" --for quickstart | tail -n 1)
export PATH="$bin:$PATH"

if [ -n "${STACKSYNC_BIN:-}" ]; then
  "$STACKSYNC_BIN" run --once --config "$here/stacksync.yaml"
else
  (cd "$root" && cargo run --quiet --locked --bin stacksync -- run --once --config "$here/stacksync.yaml")
fi
echo
echo "Rendered (ClusterClass per namespace, addons per cluster and stage):"
(cd "$work/out" && find . -name '*.yaml' ! -path './status/*' | sort | sed 's|^\./|  |')
echo
echo "\$ cat $work/out/team-a/alpha/cni/01-configmap-cni-config.yaml"
cat "$work/out/team-a/alpha/cni/01-configmap-cni-config.yaml"
echo
echo "Status: $work/out/status/team-a/alpha.yaml"
