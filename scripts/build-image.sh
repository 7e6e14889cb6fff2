#!/usr/bin/env bash
# Builds the two container images of the Dockerfile without reaching a container registry, from
# Debian's packages only, reproducibly, each with an SPDX 2.3 SBOM:
#   localhost/stacksync:<version>      distroless-like: the binary's shared libraries (from ldd,
#                                      taken out of Debian's .debs), CA certificates, /etc/passwd
#                                      and /etc/group (root, nonroot 65532), nsswitch.conf,
#                                      services/protocols, licences; no shell
#   localhost/stacksync:<version>-git  Debian bookworm minbase + git, openssh-client,
#                                      ca-certificates (mmdebstrap, from this host's apt sources)
# both with /usr/local/bin/stacksync and /usr/local/bin/stacksync-renderer (the library renderer,
# helm v4.3.2's Go library: scripts/build-renderer.sh --renderer-only, as the Dockerfile builds
# it), user 65532:65532, port 8080, the Dockerfile's entrypoint and command. No helm binary: every
# render runs in the renderer, which is helm v4.3.2 itself; `helm.renderer: process` in the image
# needs a helm added to it (docs/clusterstacks.md).
# <version> is Cargo.toml's workspace version. The images go into the local container storage
# (buildah/skopeo/podman's `containers-storage:`); push one with
#   skopeo copy containers-storage:localhost/stacksync:<version> docker://REGISTRY/stacksync:<version>
#
# Reproducible: the same commit, SOURCE_DATE_EPOCH (default: HEAD's commit time) and package
# versions give the same image digests. Every file of a layer has mtime SOURCE_DATE_EPOCH, owners
# are numeric, entries sorted; the image's created time and history are SOURCE_DATE_EPOCH.
# Debian's versions are whatever this host's apt sources serve when it runs (pin them by pointing
# /etc/apt at snapshot.debian.org).
#
# Usage: scripts/build-image.sh [--binary PATH] [--out DIR] [--oci DIR]
#   --binary PATH  use this stacksync binary instead of building it
#                  (cargo build --profile dist --locked -p stacksync --bin stacksync, in
#                  $CARGO_TARGET_DIR, default target)
#   --out DIR      where the SBOMs go (default $CARGO_TARGET_DIR/image): stacksync-<version>.spdx.json
#                  and stacksync-<version>-git.spdx.json
#   --oci DIR      also export both images into the OCI layout DIR (tags <version>, <version>-git)
# Environment: STORAGE_DRIVER (the containers-storage driver buildah and skopeo use; default: the
#   one storage.conf or the existing storage has, overlay on a stock Debian host. vfs needs no
#   kernel overlay support but is slower and bigger, and a storage made with one driver cannot
#   be opened with another: give vfs its own, e.g. CONTAINERS_STORAGE_CONF=FILE with
#   driver = "vfs" and graphroot = "/var/lib/containers/vfs"), SOURCE_DATE_EPOCH, STACKSYNC_TOOLS_DIR (the renderer
#   there is reused when current), STACKSYNC_IMAGE_CACHE (the .debs, default
#   ~/.cache/stacksync-image), STACKSYNC_SOURCE_URL (the org.opencontainers.image.source label;
#   default: git remote origin's URL, none without one).
# Prints one line per image at the end: `localhost/stacksync:<version> sha256:<digest>`.
#
# Needs root (buildah's storage, mmdebstrap --mode=root, chown), Debian bookworm; installs
# buildah, skopeo and mmdebstrap (plus umoci with --oci, for the test that unpacks it) when
# missing. Takes 2 minutes on 2 cores, 75 s when the .debs are cached (~/.cache/stacksync-image);
# building the binary is extra (the dist profile's LTO build; after a new commit only the
# stacksync crate and its link are rebuilt).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
die() { echo "build-image.sh: $*" >&2; exit 1; }
say() { echo "build-image.sh: $*" >&2; }

binary=""
target_dir="${CARGO_TARGET_DIR:-target}"
out=""
oci=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --oci) oci="${2:?--oci needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
out="${out:-$target_dir/image}"
[ "$(id -u)" = 0 ] || die "run it as root (buildah's storage and mmdebstrap --mode=root need it)"

# The helm version the renderer is built on (scripts/build-renderer.sh's).
helm_version=v4.3.2
suite=bookworm
cache="${STACKSYNC_IMAGE_CACHE:-$HOME/.cache/stacksync-image}"

# The programs it runs (and tests/image.rs after it: umoci unpacks, runc runs), installed when
# missing (scripts/programs.tsv says which package has each).
scripts/ensure-programs.sh buildah skopeo mmdebstrap jq ${oci:+umoci runc}

# The storage driver: STORAGE_DRIVER, else the one containers' storage.conf (or a storage made
# earlier) uses; overlay on this machine. buildah is told it explicitly, skopeo in the reference.
export STORAGE_DRIVER="${STORAGE_DRIVER:-$(command buildah info --format '{{.store.GraphDriverName}}')}"
buildah() { command buildah --storage-driver "$STORAGE_DRIVER" "$@"; }

# --- what is built: version, commit, time -----------------------------------------------------
commit="$(git rev-parse HEAD)"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
source_url="${STACKSYNC_SOURCE_URL:-$(git remote get-url origin 2>/dev/null || true)}"
[ -z "$(git status --porcelain --untracked-files=no)" ] \
  || say "WARNING: the work tree has uncommitted changes; the image is not reproducible from $commit"

work="$(mktemp -d "${TMPDIR:-/tmp}/stacksync-image.XXXXXX")"
containers=()
cleanup() {
  for c in "${containers[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$out" "$cache/debs"

# The crates compiled in (for the SBOM), and the version.
host="$(rustc -vV | sed -n 's/^host: //p')"
cargo metadata --format-version 1 --locked --filter-platform "$host" > "$work/metadata.json"
version="$(jq -r '.packages[] | select(.name == "stacksync") | .version' "$work/metadata.json")"
description="$(jq -r '.packages[] | select(.name == "stacksync") | .description' "$work/metadata.json")"
license="$(jq -r '.packages[] | select(.name == "stacksync") | .license' "$work/metadata.json")"
image="localhost/stacksync:$version"

# --- the binary ----------------------------------------------------------------------------------
if [ -z "$binary" ]; then
  # The build date --version prints comes from SOURCE_DATE_EPOCH as a date, handed to build.rs
  # as STACKSYNC_BUILD_DATE: the C crates' build scripts (aws-lc-sys, mimalloc, …) rebuild
  # whenever SOURCE_DATE_EPOCH changes, i.e. at every commit, and their output does not
  # depend on it.
  build_date="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)"
  say "building the binary (cargo build --profile dist, build date $build_date)"
  env -u SOURCE_DATE_EPOCH STACKSYNC_BUILD_DATE="$build_date" cargo build --profile dist --locked -p stacksync --bin stacksync
  binary="$target_dir/dist/stacksync"
fi
[ -x "$binary" ] || die "no binary at $binary"
"$binary" --version >&2
# The image's revision is the commit the binary was built from (its --version says it), not
# HEAD now: a commit that lands between the binary's build and this script moves HEAD only.
built="$("$binary" --version | sed -n 's/.*(commit \([0-9a-f]\{7,40\}\).*/\1/p')"
if [ -n "$built" ] && full="$(git rev-parse --verify --quiet "$built^{commit}")"; then
  [ "$full" = "$commit" ] || say "the binary was built from $built, HEAD is now ${commit:0:12}: the image says $built"
  commit="$full"
fi

# --- the library renderer ------------------------------------------------------------------------
# Built from renderer/ (its go.sum pins helm and everything it brings) when missing or stale; a
# -trimpath build of the same sources with the same Go is the same binary.
renderer="$(scripts/build-renderer.sh --renderer-only | tail -n 1)/stacksync-renderer"
[ "$("$renderer" --version)" = "$helm_version" ] || die "$renderer does not render as helm $helm_version"
renderer_sha256="$(sha256sum "$renderer" | cut -d' ' -f1)"
# The Go modules linked into it, for the SBOM (its build information; Go is there: it built it).
go_bin="$(command -v go || echo /usr/local/go/bin/go)"
GOTOOLCHAIN=local "$go_bin" version -m "$renderer" > "$work/renderer-modules.txt"

# Writes a layer tarball of directory $1 to $2: sorted, numeric owners, every mtime
# SOURCE_DATE_EPOCH, no atime/ctime.
layer_tar() {
  tar -C "$1" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --format=pax \
    --pax-option='exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime' -cf "$2" .
}

# The files both images add: the binary, the renderer, a home for nonroot.
add_common() {
  local root="$1"
  install -d -m 0755 "$root/usr/local/bin"
  install -m 0755 "$binary" "$root/usr/local/bin/stacksync"
  install -m 0755 "$renderer" "$root/usr/local/bin/stacksync-renderer"
  install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
}

# --- the default image's root: only the files needed, out of Debian's .debs ------------------------
# Package, version, architecture, .deb SHA-256 of each image's Debian packages, for the SBOM.
: > "$work/debs-default.tsv"
: > "$work/debs-git.tsv"

# Fetches a package's .deb (the candidate version of this host's apt sources) into the cache and
# extracts it to $work/x/<package>; records it.
fetch_deb() {
  local pkg="$1" ver arch deb
  ver="$(apt-cache policy "$pkg" | sed -n 's/^  Candidate: //p')"
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no candidate version of $pkg (apt-get update?)"
  arch="$(apt-cache show "$pkg=$ver" | sed -n 's/^Architecture: //p' | head -n1)"
  deb="$cache/debs/${pkg}_${ver//:/%3a}_${arch}.deb"
  if [ ! -f "$deb" ]; then
    (cd "$cache/debs" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$ver") \
      || die "could not download $pkg=$ver"
  fi
  mkdir -p "$work/x/$pkg"
  dpkg-deb -x "$deb" "$work/x/$pkg"
  printf '%s\t%s\t%s\t%s\n' "$pkg" "$ver" "$arch" "$(sha256sum "$deb" | cut -d' ' -f1)" >> "$work/debs-default.tsv"
}

# Copies path $2 from extracted package $1 into root $3, keeping symlinks (and their targets).
copy_from() {
  local pkg="$1" path="$2" root="$3" src="$work/x/$1$2" link
  if [ ! -e "$src" ] && [ ! -L "$src" ]; then
    case "$path" in /usr/*) path="${path#/usr}" ;; *) path="/usr$path" ;; esac # usrmerge alias
    src="$work/x/$pkg$path"
  fi
  [ -e "$src" ] || [ -L "$src" ] || die "$2 is not in $pkg's .deb"
  mkdir -p "$root$(dirname "$path")"
  cp -a "$src" "$root$path"
  if [ -L "$src" ]; then
    link="$(readlink "$src")"
    case "$link" in /*) ;; *) link="$(dirname "$path")/$link" ;; esac
    [ -e "$root$link" ] || copy_from "$pkg" "$link" "$root"
  fi
}

say "assembling the default image's root from Debian's .debs"
root="$work/root-default"
mkdir -p "$root"
# The shared libraries the binary needs (ldd: the loader and libraries, from this host's Debian
# packages) and which packages ship them.
declare -A libs_of=()
while read -r lib; do
  owner="$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")")" || die "no package ships $lib"
  pkg="${owner%%:*}"
  libs_of[$pkg]+=" $lib"
done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
mapfile -t packages < <(printf '%s\n' ca-certificates netbase "${!libs_of[@]}" | LC_ALL=C sort -u)
for pkg in "${packages[@]}"; do
  fetch_deb "$pkg"
  for lib in ${libs_of[$pkg]:-}; do copy_from "$pkg" "$lib" "$root"; done
  # Licences: the copyright file (libgcc-s1's doc directory is a symlink to gcc-12-base's).
  doc="$work/x/$pkg/usr/share/doc/$pkg"
  if [ -L "$doc" ]; then
    base="$(readlink "$doc")"
    fetch_deb "$base"
    mkdir -p "$root/usr/share/doc"
    cp -a "$doc" "$root/usr/share/doc/$pkg"
    copy_from "$base" "/usr/share/doc/$base/copyright" "$root"
  else
    copy_from "$pkg" "/usr/share/doc/$pkg/copyright" "$root"
  fi
done
copy_from netbase /etc/services "$root"
copy_from netbase /etc/protocols "$root"
# /etc/ssl/certs/ca-certificates.crt as update-ca-certificates makes it: every certificate of
# /usr/share/ca-certificates (which ca-certificates' postinst enables by default), in C sort order.
install -d -m 0755 "$root/etc/ssl/certs"
(cd "$work/x/ca-certificates/usr/share/ca-certificates" \
  && find . -type f -name '*.crt' -printf '%P\n' | LC_ALL=C sort | while read -r crt; do
       sed -e '$a\' "$crt"
     done) > "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
printf '%s\n' 'passwd: files' 'group: files' 'shadow: files' 'hosts: files dns' 'networks: files' \
  'protocols: files' 'services: files' > "$root/etc/nsswitch.conf"
install -d -m 0700 "$root/root"
install -d -m 1777 "$root/tmp"
add_common "$root"
chmod 0644 "$root"/etc/{passwd,group,nsswitch.conf,ssl/certs/ca-certificates.crt}
[ ! -e "$root/bin/sh" ] || die "the default image must not have a shell"
layer_tar "$root" "$work/default.tar"

# --- the -git image's root: Debian minbase with git and openssh-client ---------------------------
say "assembling the -git image's root (mmdebstrap $suite minbase + git openssh-client ca-certificates)"
root="$work/root-git"
mkdir -p "$cache/apt"
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -q '^[^#]' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || die "no apt sources in /etc/apt"
# The .debs are kept in $cache/apt between runs: in before apt downloads, out once the essential
# packages are extracted (mmdebstrap deletes their .debs after installing them) and at the end.
mmdebstrap --quiet --mode=root --variant=minbase --include=git,openssh-client,ca-certificates \
  --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
  --setup-hook="sync-in '$cache/apt' /var/cache/apt/archives/" \
  --extract-hook="sync-out /var/cache/apt/archives '$cache/apt'" \
  --customize-hook="sync-out /var/cache/apt/archives '$cache/apt'" \
  "$suite" "$root" "${sources[@]}"
dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package}\t${Version}\t${Architecture}\n' | LC_ALL=C sort |
  while IFS=$'\t' read -r pkg ver arch; do
    deb="$cache/apt/${pkg}_${ver//:/%3a}_${arch}.deb"
    [ -f "$deb" ] || die "no .deb for $pkg $ver in $cache/apt"
    printf '%s\t%s\t%s\t%s\n' "$pkg" "$ver" "$arch" "$(sha256sum "$deb" | cut -d' ' -f1)"
  done > "$work/debs-git.tsv"
# What the build leaves that an image should not have: this host's name and resolver, apt's
# lists and caches, backup files.
rm -rf "$root"/etc/hostname "$root"/etc/resolv.conf "$root"/var/lib/apt/lists/* \
  "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
  "$root"/var/cache/ldconfig/aux-cache "$root"/var/log/apt/* "$root"/var/log/*.log
echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin' >> "$root/etc/passwd"
echo 'nonroot:x:65532:' >> "$root/etc/group"
echo 'nonroot:*:0:0:99999:7:::' >> "$root/etc/shadow"
add_common "$root"
layer_tar "$root" "$work/git.tar"

# --- the images ------------------------------------------------------------------------------------
# One layer each: `buildah add` extracts the tarball (owners and modes as in it), the commit's
# --timestamp sets the image's created time, its history and every file's mtime.
commit_image() { # tag layer-tarball flavour extra-config-args...
  local tag="$1" tar="$2" what="$3" ctr
  shift 3
  ctr="$(buildah from --quiet scratch)"
  containers+=("$ctr")
  buildah add --quiet "$ctr" "$tar" / >/dev/null
  buildah config --os linux --arch "$(dpkg --print-architecture)" \
    --user 65532:65532 --workingdir / \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env TMPDIR=/tmp "$@" \
    --port 8080 \
    --entrypoint '["/usr/local/bin/stacksync"]' \
    --cmd '["run", "--config", "/etc/stacksync/stacksync.yaml", "--log-format", "json", "--leader-elect"]' \
    --label "org.opencontainers.image.title=stacksync" \
    --label "org.opencontainers.image.description=$description" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$commit" \
    --label "org.opencontainers.image.created=$created" \
    --label "org.opencontainers.image.licenses=$license" \
    ${source_url:+--label "org.opencontainers.image.source=$source_url"} \
    --created-by "scripts/build-image.sh ($what): stacksync $version ($commit), renders as helm $helm_version" \
    "$ctr"
  buildah commit --quiet --rm --identity-label=false --timestamp "$SOURCE_DATE_EPOCH" "$ctr" "$tag" >/dev/null
  containers=("${containers[@]/$ctr}")
}

store="containers-storage:[$STORAGE_DRIVER@$(buildah info --format '{{.store.GraphRoot}}')+$(buildah info --format '{{.store.RunRoot}}')]"
# The images the two tags name now: a new commit moves the tags, and the images they leave
# untagged (about 300 MB each) are removed below, by their own IDs, and nothing else.
image_id() { buildah images --noheading --no-trunc --format '{{.ID}}' "$1" 2>/dev/null | head -n 1 || true; }
# How many names (tags) the image with this ID has; nothing when there is no such image.
image_names() { buildah images --json --no-trunc 2>/dev/null | jq -r --arg id "$1" '.[] | select(.id == $id) | (.names // []) | length' || true; }
replaced=("$(image_id "$image")" "$(image_id "$image-git")")
say "committing $image and $image-git ($store)"
commit_image "$image" "$work/default.tar" "Debian $suite packages: ${packages[*]}"
commit_image "$image-git" "$work/git.tar" "Debian $suite minbase, git, openssh-client, ca-certificates" --env HOME=/tmp
for old in "${replaced[@]}"; do
  [ -n "$old" ] || continue
  # Still tagged (the same build again gives the same image): kept.
  if [ "$(image_names "$old")" = 0 ]; then
    if buildah rmi "$old" >/dev/null 2>&1; then say "removed the replaced image $(printf %.12s "${old#sha256:}")"; else say "could not remove the replaced image $(printf %.12s "${old#sha256:}")"; fi
  fi
done

# --- SBOMs -------------------------------------------------------------------------------------------
for flavour in default git; do
  suffix=""; [ "$flavour" = git ] && suffix="-git"
  python3 scripts/image-sbom.py --metadata "$work/metadata.json" --lock Cargo.lock \
    --debs "$work/debs-$flavour.tsv" --image "$image$suffix" --version "$version" --commit "$commit" \
    --created "$created" --helm-version "$helm_version" --renderer-sha256 "$renderer_sha256" \
    --renderer-modules "$work/renderer-modules.txt" ${source_url:+--source "$source_url"} \
    > "$out/stacksync-$version$suffix.spdx.json"
done
say "SBOMs: $out/stacksync-$version.spdx.json $out/stacksync-$version-git.spdx.json"

if [ -n "$oci" ]; then
  for tag in "$version" "$version-git"; do
    skopeo copy --quiet "${store}localhost/stacksync:$tag" "oci:$oci:$tag"
  done
  say "OCI layout: $oci (tags $version, $version-git)"
fi

for tag in "$image" "$image-git"; do
  echo "$tag $(skopeo inspect --format '{{.Digest}}' "$store$tag")"
done
