#!/usr/bin/env bash
# deploy/runtime_packages.sh BINARY...
# Prints, one per line, the distribution packages that own the shared libraries BINARY... load,
# so a runtime image can install exactly those (by apt, so they keep receiving security updates)
# instead of a hand-kept list of names that differ between Debian and Ubuntu releases
# (libgrpc++1.51 on Debian 12 is libgrpc++1.51t64 on Ubuntu 24.04). Libraries outside the
# package database (libsampan.so itself, the CUDA toolkit under /usr/local, which the CUDA runtime
# image already carries) are skipped. Fails when a library cannot be resolved at all.
set -euo pipefail
(($#)) || { echo "usage: $0 BINARY..." >&2; exit 2; }

libs=$(ldd "$@" | awk '/=> not found/ { print "MISSING " $1; next } $2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
if grep -q '^MISSING ' <<<"$libs"; then
  echo "runtime_packages: unresolved libraries:" >&2
  grep '^MISSING ' <<<"$libs" >&2
  exit 1
fi
for lib in $libs; do
  case "$lib" in /usr/local/* | */libsampan.so*) continue ;; esac
  # ldd reports /lib/... paths while dpkg records /usr/lib/... (merged /usr): resolve first.
  real=$(readlink -f "$lib")
  owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)
  if [ -z "$owner" ]; then
    echo "runtime_packages: no package owns $lib ($real)" >&2
    exit 1
  fi
  echo "${owner%%: *}"
done | tr ', ' '\n\n' | sed '/^$/d' | sort -u
