#!/usr/bin/env bash
# Quickstart: build the example release repository (two cluster-stack releases as Git tags) and
# run one stacksync pass against it with the directory target. No cluster needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work="$here/.work"
git_() { git -c user.name=quickstart -c user.email=quickstart@example.invalid -c commit.gpgsign=false -c tag.gpgsign=false "$@"; }

if [ ! -d "$work/stacks.git" ]; then
  rm -rf "$work/build"
  mkdir -p "$work/build"
  git_ init -q --bare -b main "$work/stacks.git"
  git_ init -q -b main "$work/build"
  for v in v1 v2; do
    rm -rf "$work/build/manifests"
    cp -R "$here/release/$v/manifests" "$work/build/manifests"
    git_ -C "$work/build" add -A
    git_ -C "$work/build" commit -q -m "docker-ferrol-1-27 $v"
    git_ -C "$work/build" tag -a -m "release $v" "docker-ferrol-1-27-$v"
  done
  git_ -C "$work/build" push -q "$work/stacks.git" main --tags
fi

cd "$here/../.."
cargo run --quiet --locked -- run --once --config "$here/stacksync.yaml"
echo
echo "Rendered manifests: $work/out/team-a/alpha/ and $work/out/team-b/beta/"
echo "Status:             $work/out/status/team-a/alpha.yaml"
