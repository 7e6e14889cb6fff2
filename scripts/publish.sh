#!/usr/bin/env bash
# Publishes a stacksync release to an OCI registry: the image (from the OCI layout of
# scripts/build-image.sh --oci), signed with cosign and with its SPDX SBOM attached as a signed
# attestation; the Helm chart deploy/chart/stacksync (packaged with the image pinned by the
# digest just pushed), pushed with `helm push` and signed; and install.yaml
# (scripts/release-manifests.sh, the same image). Prints what it published, with digests.
#
# Usage: scripts/publish.sh --registry HOST[:PORT][/PATH] [--key cosign.key] [--no-tlog]
#                           [--plain-http] [--image-layout DIR] [--image-tag TAG] [--sbom FILE]
#                           [--version X] [--chart DIR] [--out DIR]
#   --registry      where to push: the image goes to REGISTRY/stacksync:X, the chart to
#                   oci://REGISTRY/charts (REGISTRY/charts/stacksync:X)
#   --key           a cosign private key (`cosign generate-key-pair`; its password in
#                   COSIGN_PASSWORD). Without it cosign signs keyless (Sigstore's Fulcio and Rekor
#                   with the CI's OIDC identity, e.g. GitHub Actions' `id-token: write`)
#   --no-tlog       do not upload the signatures to the Rekor transparency log (key-based only:
#                   an air-gapped registry, the tests); verify with --insecure-ignore-tlog then
#   --plain-http    the registry speaks HTTP (a registry on loopback)
#   --image-layout  the OCI layout (default $CARGO_TARGET_DIR/image/oci, target/image/oci)
#   --image-tag     the image's tag in the layout (default: the version)
#   --sbom          the image's SBOM (default beside the layout: ../stacksync-<tag>.spdx.json)
#   --version       the release's version (default: the chart's, which is Cargo.toml's)
#   --chart         the chart to publish (default deploy/chart/stacksync)
#   --out           where the chart package, install.yaml and digests.txt go (default
#                   $CARGO_TARGET_DIR/release)
# Needs skopeo (installed when missing: scripts/ensure-programs.sh), helm and kubectl (scripts/install-tools.sh), cosign
# (scripts/build-cosign.sh). Verify what it published: docs/operations.md#verifying-a-release.
set -euo pipefail
die() { echo "publish.sh: $*" >&2; exit 2; }
say() { echo "publish.sh: $*" >&2; }

chart="" registry="" key="" tlog=1 plain=0 layout="" image_tag="" sbom="" version="" out=""
target_dir="${CARGO_TARGET_DIR:-target}"
while [ $# -gt 0 ]; do
  case "$1" in
    --registry) registry="${2:?--registry needs HOST[:PORT][/PATH]}"; shift 2 ;;
    --key) key="${2:?--key needs a file}"; shift 2 ;;
    --no-tlog) tlog=0; shift ;;
    --plain-http) plain=1; shift ;;
    --image-layout) layout="${2:?--image-layout needs a directory}"; shift 2 ;;
    --image-tag) image_tag="${2:?--image-tag needs a tag}"; shift 2 ;;
    --sbom) sbom="${2:?--sbom needs a file}"; shift 2 ;;
    --version) version="${2:?--version needs a version}"; shift 2 ;;
    --chart) chart="${2:?--chart needs a directory}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ -n "$registry" ] || die "--registry is required"
# Paths given are the caller's; the defaults are the repository's.
abs() { case "$1" in /*|"") echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
chart=$(abs "$chart") key=$(abs "$key") layout=$(abs "$layout") sbom=$(abs "$sbom") out=$(abs "$out")
cd "$(dirname "$0")/.."
chart="${chart:-deploy/chart/stacksync}"
registry="${registry%/}"
[ -n "$key" ] || [ "$tlog" = 1 ] || die "--no-tlog needs --key (keyless signing is recorded in Rekor)"
[ -z "$key" ] || [ -f "$key" ] || die "no key file $key"

[ -f "$chart/Chart.yaml" ] || die "no chart at $chart"
[ -n "$version" ] || version=$(sed -n 's/^version: *//p' "$chart/Chart.yaml")
layout="${layout:-$target_dir/image/oci}"
image_tag="${image_tag:-$version}"
sbom="${sbom:-$layout/../stacksync-$image_tag.spdx.json}"
out="${out:-$target_dir/release}"
[ -f "$layout/index.json" ] || die "no OCI layout at $layout (scripts/build-image.sh --oci $layout)"
[ -f "$sbom" ] || die "no SBOM at $sbom (scripts/build-image.sh writes it; --sbom FILE)"

tools="${STACKSYNC_TOOLS_DIR:-$HOME/.cache/stacksync-tools}"
helm="$tools/bin/helm" cosign="$tools/bin/cosign"
[ -x "$helm" ] || die "helm is missing: scripts/install-tools.sh --for quickstart"
[ -x "$cosign" ] || die "cosign is missing: scripts/build-cosign.sh"
scripts/ensure-programs.sh skopeo sha256sum

skopeo_tls=() helm_http=() cosign_http=()
if [ "$plain" = 1 ]; then
  skopeo_tls=(--dest-tls-verify=false) helm_http=(--plain-http) cosign_http=(--allow-insecure-registry --allow-http-registry)
fi
sign_args=(--yes "${cosign_http[@]}")
[ -z "$key" ] || sign_args+=(--key "$key")
[ "$tlog" = 1 ] || sign_args+=(--tlog-upload=false)

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The image, as built: --preserve-digests refuses any conversion, so the digest pushed is
#    the layout's (the reproducible build's).
image_repo="$registry/stacksync"
say "pushing the image $image_repo:$version"
skopeo copy --quiet --preserve-digests "${skopeo_tls[@]}" --digestfile "$work/image.digest" \
  "oci:$layout:$image_tag" "docker://$image_repo:$version"
image_digest=$(cat "$work/image.digest")
image_ref="$image_repo@$image_digest"

# 2. Signed, and the SBOM attached as a signed in-toto attestation (`cosign verify-attestation
#    --type spdxjson`): a signature says who built it, the attestation what is in it.
say "signing $image_ref and attesting its SBOM"
"$cosign" sign "${sign_args[@]}" "$image_ref" >&2
"$cosign" attest "${sign_args[@]}" --type spdxjson --predicate "$sbom" "$image_ref" >&2

# 3. The chart, pinned to that image: a copy with the links into deploy/ resolved and the image
#    values set, packaged and pushed.
cp -RL "$chart" "$work/stacksync"
rm -rf "$work/stacksync/ci"
values="$work/stacksync/values.yaml"
grep -q '^  repository: stacksync$' "$values" && grep -q '^  digest: ""$' "$values" \
  || die "$chart/values.yaml: image.repository / image.digest are not where this script sets them"
sed -i -e "s|^  repository: stacksync\$|  repository: $image_repo|" -e "s|^  digest: \"\"\$|  digest: $image_digest|" "$values"
"$helm" template stacksync "$work/stacksync" > "$work/rendered.yaml" 2>/dev/null
grep -q "image: $image_ref\$" "$work/rendered.yaml" || die "the packaged chart does not run $image_ref"
"$helm" package "$work/stacksync" --version "$version" --app-version "$version" -d "$out" >&2
package="$out/stacksync-$version.tgz"
say "pushing the chart oci://$registry/charts/stacksync:$version"
"$helm" push "$package" "oci://$registry/charts" "${helm_http[@]}" 2>&1 | tee "$work/push.log" >&2
chart_digest=$(sed -n 's/^Digest: *//p' "$work/push.log")
[ -n "$chart_digest" ] || die "helm push printed no digest"
chart_ref="$registry/charts/stacksync@$chart_digest"
say "signing $chart_ref"
"$cosign" sign "${sign_args[@]}" "$chart_ref" >&2

# 4. install.yaml with the same image.
scripts/release-manifests.sh --image "$image_ref" --out "$out/install.yaml"

{
  echo "version $version"
  echo "image $image_ref"
  echo "chart $chart_ref"
  echo "chart-install helm install stacksync oci://$registry/charts/stacksync --version $version --namespace stacksync-system --create-namespace"
  echo "install.yaml $out/install.yaml sha256:$(sha256sum "$out/install.yaml" | cut -d' ' -f1)"
} | tee "$out/digests.txt"
