#!/usr/bin/env bash
# Quickstart: the main job, no cluster needed. Builds a small cluster-stack release repository of
# our own (two releases as Git tags: a ClusterClass chart with its templates, a multi-stage addon
# with clusteraddon.yaml and overwrite.yaml values templates over .Cluster), installs helm and the
# library renderer when missing (`scripts/install-tools.sh --for quickstart`: no Kubernetes), and runs one
# stacksync pass with the directory target: the ClusterClass once per namespace, the addons per
# cluster, stage by stage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# STACKSYNC_ROOT and STACKSYNC_BIN let the CI test run a copy of this directory with the built binary.
root=${STACKSYNC_ROOT:-$(cd "$here/../.." && pwd)}
work="$here/.work"
rm -rf "$work"
mkdir -p "$work"
# stacksync renders cluster stacks with helm's own library (stacksync-renderer, helm v4.3.2: built
# from the Go module proxy the first time, about 2.5 min on 2 cores), byte for byte as `helm
# template` does. Built (when missing) while the release repository is made and the binary is built.
"$root/scripts/install-tools.sh" --for quickstart >"$work/install-tools.out" 2>"$work/install-tools.log" &
tools=$!
"$here/make-repo.sh" "$work/stacks.git"

stacksync=${STACKSYNC_BIN:-}
if [ -z "$stacksync" ]; then
  # A first build compiles every crate once: incremental compilation's bookkeeping and the line
  # tables the tests' backtraces use only slow that down (about 12 s of the crate's 45 on 2
  # cores). The dependencies are built as the tests build them, so only stacksync's own crate
  # is compiled again when the tests run.
  (cd "$root" && CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-false}" \
    cargo build --quiet --locked --bin stacksync)
  target=${CARGO_TARGET_DIR:-target}
  case "$target" in /*) ;; *) target="$root/$target" ;; esac
  stacksync="$target/debug/stacksync"
fi
if ! wait "$tools"; then
  cat "$work/install-tools.log" >&2
  echo "quickstart: scripts/install-tools.sh --for quickstart failed" >&2
  exit 1
fi
PATH="$(tail -n 1 "$work/install-tools.out"):$PATH"
export PATH
"$stacksync" run --once --config "$here/stacksync.yaml"
echo
echo "Rendered (ClusterClass per namespace, addons per cluster and stage):"
(cd "$work/out" && find . -name '*.yaml' ! -path './status/*' | sort | sed 's|^\./|  |')
echo
echo "\$ cat $work/out/team-a/alpha/cni/01-configmap-cni-config.yaml"
cat "$work/out/team-a/alpha/cni/01-configmap-cni-config.yaml"
echo
echo "Status: $work/out/status/team-a/alpha.yaml"
