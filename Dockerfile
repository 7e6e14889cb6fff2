# syntax=docker/dockerfile:1
# Build: docker build -t stacksync .
#
# Base images: pin them by digest for a release build, e.g.
#   docker build --build-arg RUST_IMAGE=rust:1.95-bookworm@sha256:<digest> \
#                --build-arg RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:<digest> .
# (`docker buildx imagetools inspect <image>` prints the digest.)
ARG RUST_IMAGE=rust:1.95-bookworm
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# --- dependencies first: this layer is rebuilt only when Cargo.toml or Cargo.lock change ---
FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY testkit/Cargo.toml testkit/Cargo.toml
COPY crates/applier/Cargo.toml crates/applier/Cargo.toml
COPY crates/fake-apiserver/Cargo.toml crates/fake-apiserver/Cargo.toml
COPY crates/gotemplate/Cargo.toml crates/gotemplate/Cargo.toml
COPY crates/kubeyaml/Cargo.toml crates/kubeyaml/Cargo.toml
COPY crates/verify/Cargo.toml crates/verify/Cargo.toml
# Every workspace member and every target Cargo.toml declares must exist for the manifest to load.
RUN mkdir -p src testkit/src/bin benches crates/applier/src crates/fake-apiserver/src crates/gotemplate/src crates/kubeyaml/src crates/verify/src \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && for b in peers fleet signatures process console renderer; do echo 'fn main() {}' > benches/$b.rs; done \
 && touch testkit/src/lib.rs && echo 'fn main() {}' > testkit/src/bin/testkit.rs \
 && touch crates/applier/src/lib.rs crates/fake-apiserver/src/lib.rs crates/gotemplate/src/lib.rs crates/kubeyaml/src/lib.rs crates/verify/src/lib.rs \
 && echo 'fn main() {}' > build.rs \
 && cargo build --profile dist --locked -p stacksync \
 && rm -rf src benches testkit/src crates/*/src build.rs
# --- then the crate itself ---
COPY . .
# build.rs reads the commit from .git when present, else from these (docker build --build-arg).
ARG STACKSYNC_COMMIT=unknown
ARG STACKSYNC_BUILD_DATE=unknown
ENV STACKSYNC_COMMIT=${STACKSYNC_COMMIT} STACKSYNC_BUILD_DATE=${STACKSYNC_BUILD_DATE}
RUN touch src/main.rs src/lib.rs crates/*/src/lib.rs && cargo build --profile dist --locked -p stacksync --bin stacksync \
 && ./target/dist/stacksync --version

# --- the library renderer: helm v4.3.2's Go library in one long-lived process (renderer/, whose
# go.sum pins every module), as scripts/build-renderer.sh builds it ---
FROM ${GO_IMAGE} AS renderer
WORKDIR /renderer
COPY renderer/ ./
RUN GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2 -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
      -o /renderer/stacksync-renderer . \
 && test "$(/renderer/stacksync-renderer --version)" = v4.3.2

# --- runtime with Git: for `http(s)://`, `ssh://` and `file://` Git sources (private ones
# included), which run Debian's git (and ssh, through /bin/sh). Build it with
#   docker build --target runtime-git -t stacksync:git .
FROM debian:bookworm-slim AS runtime-git
# ssh refuses to run for a uid without a passwd entry ("No user exists for uid 65532").
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /src/target/dist/stacksync /usr/local/bin/stacksync
COPY --from=renderer /renderer/stacksync-renderer /usr/local/bin/stacksync-renderer
USER 65532:65532
ENV TMPDIR=/tmp HOME=/tmp
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/stacksync"]
CMD ["run", "--config", "/etc/stacksync/stacksync.yaml", "--log-format", "json", "--leader-elect"]

# --- runtime: distroless (glibc, CA certificates, no shell), non-root; the default target ---
# No git: `git://` and GitHub sources are pure Rust; `file://`, `http(s)://` and `ssh://` Git
# sources need git (the `runtime-git` target above).
FROM ${RUNTIME_IMAGE}
COPY --from=build /src/target/dist/stacksync /usr/local/bin/stacksync
COPY --from=renderer /renderer/stacksync-renderer /usr/local/bin/stacksync-renderer
USER 65532:65532
ENV TMPDIR=/tmp
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/stacksync"]
CMD ["run", "--config", "/etc/stacksync/stacksync.yaml", "--log-format", "json", "--leader-elect"]
