#!/usr/bin/env bash
# Builds the quickstart's release repository: a bare Git repository at $1 whose tags
# docker-ferrol-1-27-v1 and docker-ferrol-1-27-v2 are cluster-stack releases made from ./stack,
# laid out as SovereignCloudStack's csctl lays out a release (charts as directories):
#   metadata.yaml                                  versions of the stack, addons and Kubernetes
#   docker-ferrol-1-27-cluster-class-<v>/          the ClusterClass chart (Chart.yaml version <v>)
#   docker-ferrol-1-27-cluster-addon-<v>/<stage>/  one chart per addon stage, with overwrite.yaml
#   clusteraddon.yaml                              the stages per lifecycle hook
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$1
stack=docker-ferrol-1-27
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
git_() { git -c user.name=example -c user.email=example@example.invalid -c commit.gpgsign=false -c tag.gpgsign=false "$@"; }
git_ init -q --bare -b main "$dest"
git_ init -q -b main "$build"
for v in v1 v2; do
  find "$build" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
  cp -R "$here/stack/cluster-class" "$build/$stack-cluster-class-$v"
  cp -R "$here/stack/cluster-addon" "$build/$stack-cluster-addon-$v"
  sed -i "s/^version: .*/version: $v/" "$build/$stack-cluster-class-$v/Chart.yaml" "$build/$stack-cluster-addon-$v"/*/Chart.yaml
  cp "$here/stack/clusteraddon.yaml" "$build/"
  printf 'apiVersion: metadata.clusterstack.x-k8s.io/v1alpha1\nversions:\n  clusterStack: %s\n  kubernetes: v1.27.3\n  components:\n    clusterAddon: %s\n' "$v" "$v" >"$build/metadata.yaml"
  git_ -C "$build" add -A
  git_ -C "$build" commit -q -m "$stack $v"
  git_ -C "$build" tag -a -m "release $v" "$stack-$v"
done
git_ -C "$build" push -q "$dest" main --tags
