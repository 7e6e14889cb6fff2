#!/usr/bin/env bash
# Installs the Debian packages of the programs named, each only when the program is missing, in
# one apt-get run. The table is scripts/programs.tsv (program -> package); a program the table
# does not list is an error, so every caller says exactly what it runs.
# Usage: scripts/ensure-programs.sh PROGRAM...        (e.g. runc umoci buildah)
#        scripts/ensure-programs.sh --all-debian      (every Debian program of the table)
# Prints nothing when all are there; says which packages it installs otherwise.
set -euo pipefail
cd "$(dirname "$0")"
table=programs.tsv
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Where a Debian package puts a program that is not on PATH (daemons in sbin, helpers in libexec).
found() {
  case "$1" in
    sshd) [ -x /usr/sbin/sshd ] ;;
    lighttpd) [ -x /usr/sbin/lighttpd ] ;;
    git-http-backend) [ -x /usr/lib/git-core/git-http-backend ] ;;
    git) [ -x /usr/bin/git ] && [ -x /usr/lib/git-core/git-daemon ] ;;
    faketime) [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1 ] ;;
    time) [ -x /usr/bin/time ] ;;
    *) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] ;;
  esac
}

package_of() { awk -F'\t' -v p="$1" '$1 == p && $2 ~ /^debian:/ { sub(/^debian:/, "", $2); print $2; exit }' "$table"; }

programs=()
if [ "${1:-}" = --all-debian ]; then
  mapfile -t programs < <(awk -F'\t' '!/^#/ && $2 ~ /^debian:/ { print $1 }' "$table")
else
  programs=("$@")
fi

need=()
for program in "${programs[@]}"; do
  pkg=$(package_of "$program")
  [ -n "$pkg" ] || { echo "ensure-programs.sh: '$program' is not a Debian program of scripts/$table: add it there" >&2; exit 2; }
  found "$program" && continue
  case " ${need[*]-} " in *" $pkg "*) ;; *) need+=("$pkg") ;; esac
done
[ ${#need[@]} -gt 0 ] || exit 0

echo "ensure-programs.sh: installing Debian's ${need[*]}" >&2
as_root apt-get update -qq
# Packages that ship a service (prometheus, lighttpd, docker-registry) must not start one now: the
# tests start their own on loopback. A policy-rc.d (unless one is there) says so for this run.
policy=/usr/sbin/policy-rc.d
if [ -e "$policy" ]; then
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
  as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
  status=0
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null || status=$?
  as_root rm -f "$policy"
  [ "$status" = 0 ] || exit "$status"
fi
for program in "${programs[@]}"; do
  found "$program" || { echo "ensure-programs.sh: $program is still missing after installing $(package_of "$program")" >&2; exit 1; }
done
