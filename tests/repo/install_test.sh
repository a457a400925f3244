#!/bin/bash
# install_test.sh — tools/install.sh as debian/rules runs it (--prefix /usr,
# a multiarch libdir, into a DESTDIR), from the files of this build:
#  - every installed path is claimed by exactly one debian/*.install line
#    or debian/not-installed, and every such line matches an installed
#    path, so the packages and install.sh cannot drift apart;
#  - the library's links follow the SONAME, kvact.pc is right, and a
#    program compiled with `pkg-config --cflags --libs kvact` against the
#    staged tree runs;
#  - the staged config is a valid msgpack config that kvconf accepts.
# Runs in the runfiles tree, whose layout is bazel-bin's (install.sh
# --bazel-bin .).
set -euo pipefail
cd "${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
triplet=x86_64-linux-gnu
tools/install.sh --no-build --bazel-bin . --prefix /usr --libdir /usr/lib/$triplet \
  --sysconfdir /etc --unitdir /lib/systemd/system --destdir "$d/root" --manifest "$d/manifest" > "$d/log"
fail=0

# 1. install.sh <-> debian/*.install
patterns=$(cd debian && for f in *.install not-installed; do
  grep -vE '^(#|$)' "$f" | sed "s|^|$f |"
done)
while read -r path; do
  rel=${path#/}
  owners=$(echo "$patterns" | while read -r file pat; do
    # shellcheck disable=SC2053
    if [[ $rel == $pat ]]; then echo "$file"; fi
  done)
  n=$(echo -n "$owners" | grep -c . || true)
  if [ "$n" != 1 ]; then
    echo "$path: claimed by $n debian files ($(echo $owners))"
    fail=1
  fi
done < "$d/manifest"
while read -r file pat; do
  matched=0
  while read -r path; do
    # shellcheck disable=SC2053
    if [[ ${path#/} == $pat ]]; then matched=1; break; fi
  done < "$d/manifest"
  [ "$matched" = 1 ] || { echo "debian/$file: $pat matches nothing install.sh installs"; fail=1; }
done <<< "$patterns"

# 2. the library's names and pkg-config
lib=$d/root/usr/lib/$triplet
version=$(cat VERSION)
[ "$(readlink "$lib/libkvact.so")" = libkvact.so.0 ] || { echo "libkvact.so does not link to libkvact.so.0"; fail=1; }
[ "$(readlink "$lib/libkvact.so.0")" = "libkvact.so.$version" ] || { echo "libkvact.so.0 is not libkvact.so.$version"; fail=1; }
soname=$(readelf -d "$lib/libkvact.so.$version" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libkvact.so.0 ] || { echo "SONAME is '$soname', not libkvact.so.0"; fail=1; }
# the staged tree as a sysroot; /usr/include and the multiarch libdir are
# system paths pkgconf would drop
export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$d/root
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
[ "$(pkg-config --modversion kvact)" = "$version" ] || { echo "kvact.pc's version is not $version"; fail=1; }
flags=$(pkg-config --cflags --libs kvact)
echo "pkg-config --cflags --libs kvact: $flags"
san=
case $(ldd "$lib/libkvact.so.$version") in
  *libasan*) san=-fsanitize=address,undefined ;;
  *libtsan*) san=-fsanitize=thread ;;
esac
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $san -o "$d/hello" tests/repo/external/hello.c $flags
out=$(LD_LIBRARY_PATH=$lib "$d/hello")
[ "$out" = "hello, kvact (tag 7)" ] || { echo "hello printed: $out"; fail=1; }

# 3. the packaged config
tools/kvconf check "$d/root/etc/kvact/kvactd.msgpack" || { echo "the staged config does not check"; fail=1; }

if [ "$fail" = 0 ]; then
  echo "$(wc -l < "$d/manifest") files installed, each in one package; hello ran: $out"
  echo "1 passed, 0 failed"
fi
exit "$fail"
