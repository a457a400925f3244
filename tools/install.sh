#!/usr/bin/env bash
# install.sh — installs kvact from this repository: the library, its header
# and pkg-config file, kvactd with its systemd unit, sysusers entry and
# default config, the tools and the man pages. debian/rules installs
# through it, so the Debian packages and a /usr/local install hold the same
# files.
#
#   tools/install.sh [--prefix DIR] [--destdir DIR] [--libdir DIR]
#                    [--sysconfdir DIR] [--unitdir DIR] [--no-build]
#                    [--bazel-bin DIR] [--manifest FILE]
#
#   --prefix DIR      /usr/local by default; bin, sbin, include, lib,
#                     share/man below it
#   --destdir DIR     stage below DIR (packaging); nothing runs from there
#   --libdir DIR      PREFIX/lib by default (Debian: /usr/lib/<triplet>)
#   --sysconfdir DIR  /etc for the prefixes /usr and /usr/local, else
#                     PREFIX/etc; the config goes to SYSCONFDIR/kvact
#   --unitdir DIR     systemd units: /lib/systemd/system for /usr, else
#                     PREFIX/lib/systemd/system
#   --no-build        take what is built (-c opt) instead of building
#   --bazel-bin DIR   where the built files are (default: `bazel info -c
#                     opt bazel-bin`, never the bazel-bin link, which holds
#                     whatever configuration was built last)
#   --manifest FILE   write the installed paths (below DESTDIR) to FILE
#
# Layout (PREFIX=/usr):
#   LIBDIR/libkvact.so.X.Y.Z, libkvact.so.X (SONAME), libkvact.so (link)
#   LIBDIR/pkgconfig/kvact.pc, PREFIX/include/kvact.h
#   PREFIX/sbin/kvactd, UNITDIR/kvactd.service,
#   PREFIX/lib/sysusers.d/kvactd.conf, SYSCONFDIR/kvact/kvactd.msgpack
#   PREFIX/bin/{kvconf,kvinspect,kvbench}; kvbench is a link into
#   PREFIX/lib/kvact/kvbench/, beside kvbench_counted and its chart script,
#   with its anchors in PREFIX/lib/kvact/bench/ (where kvbench looks)
#   PREFIX/share/man/man{1,8}/
# An existing SYSCONFDIR/kvact/kvactd.msgpack is kept (without --destdir):
# it is the operator's. ldconfig runs when installing into / as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(cat "$root/VERSION")
major=${version%%.*}

prefix=/usr/local destdir= libdir= sysconfdir= unitdir= build=1 bin= manifest=
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --libdir) libdir=$2; shift 2 ;;
    --sysconfdir) sysconfdir=$2; shift 2 ;;
    --unitdir) unitdir=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --bazel-bin) bin=$2; shift 2 ;;
    --manifest) manifest=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
case $prefix in /*) ;; *) echo "install.sh: --prefix must be absolute: $prefix" >&2; exit 2 ;; esac
prefix=${prefix%/}
: "${libdir:=$prefix/lib}"
case $prefix in
  /usr | /usr/local) : "${sysconfdir:=/etc}" ;;
  *) : "${sysconfdir:=$prefix/etc}" ;;
esac
if [ -z "$unitdir" ]; then
  if [ "$prefix" = /usr ]; then unitdir=/lib/systemd/system; else unitdir=$prefix/lib/systemd/system; fi
fi

targets=(//:libkvact.so //tools:kvactd //tools:kvconf //tools:kvinspect //tools:kvbench)
if [ "$build" = 1 ]; then
  (cd "$root" && bazel build -c opt ${KVACT_BAZEL_FLAGS:-} "${targets[@]}")
fi
[ -n "$bin" ] || bin=$(cd "$root" && bazel info -c opt ${KVACT_BAZEL_FLAGS:-} bazel-bin 2>/dev/null)
for f in libkvact.so tools/kvactd tools/kvconf tools/kvinspect tools/kvbench/kvbench \
  tools/kvbench/kvbench_counted tools/kvbench/kvbench_report.py tools/bench/caf_bench \
  tools/bench/ring_anchor; do
  [ -e "$bin/$f" ] || { echo "install.sh: $bin/$f is not built (bazel build -c opt ${targets[*]})" >&2; exit 1; }
done

installed=()
put() { # MODE SRC DEST: DEST below DESTDIR
  install -D -m "$1" "$2" "$destdir$3"
  installed+=("$3")
  echo "  $3"
}
link() { # TARGET NAME
  mkdir -p "$(dirname "$destdir$2")"
  ln -sfn "$1" "$destdir$2"
  installed+=("$2")
  echo "  $2 -> $1"
}
render() { # SRC DEST MODE: @PREFIX@ and friends substituted
  local tmp
  tmp=$(mktemp)
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@INCLUDEDIR@|$prefix/include|g" \
    -e "s|@SBINDIR@|$prefix/sbin|g" -e "s|@SYSCONFDIR@|$sysconfdir|g" -e "s|@VERSION@|$version|g" \
    "$1" > "$tmp"
  put "$3" "$tmp" "$2"
  rm -f "$tmp"
}

echo "install.sh: kvact $version into ${destdir:-/} (prefix $prefix)"
# the library under its full version, the SONAME link the loader follows,
# and the link the linker's -lkvact finds
put 0644 "$bin/libkvact.so" "$libdir/libkvact.so.$version"
link "libkvact.so.$version" "$libdir/libkvact.so.$major"
link "libkvact.so.$major" "$libdir/libkvact.so"
put 0644 "$root/kvact.h" "$prefix/include/kvact.h"
render "$root/packaging/kvact.pc.in" "$libdir/pkgconfig/kvact.pc" 0644

put 0755 "$bin/tools/kvactd" "$prefix/sbin/kvactd"
render "$root/packaging/kvactd.service.in" "$unitdir/kvactd.service" 0644
put 0644 "$root/packaging/kvactd.sysusers" "$prefix/lib/sysusers.d/kvactd.conf"
conf=$sysconfdir/kvact/kvactd.msgpack
if [ -z "$destdir" ] && [ -e "$conf" ]; then
  echo "  $conf kept (yours; the packaged default is packaging/kvactd.json)"
else
  tmp=$(mktemp)
  "$bin/tools/kvconf" encode "$root/packaging/kvactd.json" "$tmp" >/dev/null
  put 0644 "$tmp" "$conf"
  rm -f "$tmp"
fi

put 0755 "$bin/tools/kvconf" "$prefix/bin/kvconf"
put 0755 "$bin/tools/kvinspect" "$prefix/bin/kvinspect"
pkglib=$prefix/lib/kvact
put 0755 "$bin/tools/kvbench/kvbench" "$pkglib/kvbench/kvbench"
put 0755 "$bin/tools/kvbench/kvbench_counted" "$pkglib/kvbench/kvbench_counted"
put 0644 "$bin/tools/kvbench/kvbench_report.py" "$pkglib/kvbench/kvbench_report.py"
put 0755 "$bin/tools/bench/caf_bench" "$pkglib/bench/caf_bench"
put 0755 "$bin/tools/bench/ring_anchor" "$pkglib/bench/ring_anchor"
link "../lib/kvact/kvbench/kvbench" "$prefix/bin/kvbench"

for page in "$root"/docs/man/*.[18]; do
  put 0644 "$page" "$prefix/share/man/man${page##*.}/$(basename "$page")"
done

if [ -n "$manifest" ]; then printf '%s\n' "${installed[@]}" | sort > "$manifest"; fi
if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi
echo "install.sh: ${#installed[@]} files"
if [ -z "$destdir" ] && [ "$prefix" != /usr ]; then
  echo "install.sh: systemd-sysusers reads /usr/lib/sysusers.d only: run" \
    "\`systemd-sysusers $prefix/lib/sysusers.d/kvactd.conf\` to create the kvact user"
fi
