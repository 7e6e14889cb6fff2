#!/usr/bin/env bash
# Builds the example release repository: a bare Git repository at $1 whose tags
# docker-ferrol-1-27-v1 and -v2 hold examples/quickstart/release/v1 and v2. Used by the examples.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$1
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
git_() { git -c user.name=example -c user.email=example@example.invalid -c commit.gpgsign=false -c tag.gpgsign=false "$@"; }
git_ init -q --bare -b main "$dest"
git_ init -q -b main "$build"
for v in v1 v2; do
  rm -rf "$build/manifests"
  cp -R "$here/release/$v/manifests" "$build/manifests"
  git_ -C "$build" add -A
  git_ -C "$build" commit -q -m "docker-ferrol-1-27 $v"
  git_ -C "$build" tag -a -m "release $v" "docker-ferrol-1-27-$v"
done
git_ -C "$build" push -q "$dest" main --tags
