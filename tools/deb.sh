#!/usr/bin/env bash
# deb.sh OUTDIR — builds kvact's Debian packages from this tree (as it is,
# committed or not) with dpkg-buildpackage, checks them with lintian, and
# leaves the .deb files in OUTDIR.
#
# The tree is copied to $KVACT_DEB_WORK/kvact-VERSION first (default
# /var/tmp/kvact-deb): dpkg-buildpackage writes its results beside the
# source directory, and a fixed path keeps Bazel's cache for that copy
# from one run to the next. Fails on any lintian error; prints lintian's
# warnings and the packages' sizes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: tools/deb.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(cat "$root/VERSION")
work=${KVACT_DEB_WORK:-/var/tmp/kvact-deb}
src=$work/kvact-$version

echo "deb.sh: copying the tree to $src"
rm -rf "$src" "$work"/*.deb "$work"/*.ddeb "$work"/*.changes "$work"/*.buildinfo
mkdir -p "$src"
tar -C "$root" --exclude-vcs --exclude='./bazel-*' --exclude='*/__pycache__' -cf - . | tar -C "$src" -xf -

echo "deb.sh: dpkg-buildpackage -b -us -uc"
start=$(date +%s)
(cd "$src" && dpkg-buildpackage -b -us -uc)
echo "deb.sh: built in $(($(date +%s) - start)) s"

changes=$(ls "$work"/kvact_"$version"_*.changes)
echo "deb.sh: lintian $(lintian --version | awk '{print $2}')"
rc=0
lint=$(lintian --display-info --pedantic "$changes" 2>&1) || rc=$?
lint=$(echo "$lint" | grep -v '^running with root privileges is not recommended!$' || true)
echo "$lint" | sed '/^$/d; s/^/  /'
echo "deb.sh: lintian tags by level (E error, W warning, I info, P pedantic):" \
  "$(echo "$lint" | grep -oE '^[EWIPX]:' | sort | uniq -c | tr -s ' \n' ' ')"
if [ "$rc" != 0 ] || echo "$lint" | grep -q '^E:'; then
  echo "deb.sh: lintian reports errors (or failed, status $rc)" >&2
  exit 1
fi

rm -f "$out"/*.deb
cp "$work"/*.deb "$out"/
echo "deb.sh: packages in $out"
for d in "$out"/*.deb; do
  printf '  %-48s %8s bytes, installed %6s KiB\n' "$(basename "$d")" "$(stat -c %s "$d")" \
    "$(dpkg-deb -f "$d" Installed-Size)"
done
