#!/usr/bin/env bash
# Plain manifests: build the example release repository (two releases of a manifest directory as Git tags) and
# run one stacksync pass against it with the directory target. No cluster needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work="$here/.work"
if [ ! -d "$work/stacks.git" ]; then
  mkdir -p "$work"
  "$here/make-repo.sh" "$work/stacks.git"
fi

cd "$here/../.."
cargo run --quiet --locked -- run --once --config "$here/stacksync.yaml"
echo
echo "Rendered manifests: $work/out/team-a/alpha/ and $work/out/team-b/beta/"
echo "Status:             $work/out/status/team-a/alpha.yaml"
