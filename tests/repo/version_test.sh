#!/bin/sh
# version_test.sh VERSION KVACT_H PYPROJECT CHANGELOG BINARY... — one
# version everywhere (the VERSION file is the source): kvact.h's
# KVA_VERSION_* macros, python/pyproject.toml, CHANGELOG.md's top entry and,
# once it exists, debian/changelog's top entry; and every binary answers
# `--version` with "<name> <version> (libkvact <version>)" and `--help`
# with a usage that lists --version, both exiting 0.
#
# Releasing 0.3.0: change VERSION, the four macros, pyproject.toml, add a
# CHANGELOG entry (and a debian/changelog one); this test says what is left.
set -eu
version_file=$1 hdr=$2 pyproject=$3 changelog=$4
shift 4
fail=0
bad() {
  echo "$*"
  fail=1
}

v=$(cat "$version_file")
echo "$v" | grep -qxE '[0-9]+\.[0-9]+\.[0-9]+' || bad "VERSION: \"$v\" is not MAJOR.MINOR.PATCH"
major=${v%%.*} rest=${v#*.}
minor=${rest%%.*} patch=${rest#*.}

macro() { awk -v m="$1" '$1 == "#define" && $2 == m { print $3 }' "$hdr"; }
[ "$(macro KVA_VERSION_MAJOR)" = "$major" ] || bad "kvact.h: KVA_VERSION_MAJOR is not $major"
[ "$(macro KVA_VERSION_MINOR)" = "$minor" ] || bad "kvact.h: KVA_VERSION_MINOR is not $minor"
[ "$(macro KVA_VERSION_PATCH)" = "$patch" ] || bad "kvact.h: KVA_VERSION_PATCH is not $patch"
[ "$(macro KVA_VERSION_STRING)" = "\"$v\"" ] || bad "kvact.h: KVA_VERSION_STRING is not \"$v\""

py=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$pyproject")
[ "$py" = "$v" ] || bad "pyproject.toml: version \"$py\", VERSION says $v"
top=$(sed -n 's/^## \[\([^]]*\)\].*/\1/p' "$changelog" | head -1)
[ "$top" = "$v" ] || bad "CHANGELOG.md: top entry [$top], VERSION says $v"
# debian/ is the packaging's (3.0 native: no Debian revision expected)
deb="$(dirname "$version_file")/debian/changelog"
if [ -f "$deb" ]; then
  dv=$(head -1 "$deb" | sed -n 's/^[^ ]* (\([^)]*\)).*/\1/p')
  [ "$dv" = "$v" ] || bad "debian/changelog: top entry ($dv), VERSION says $v"
fi

for bin in "$@"; do
  name=$(basename "$bin")
  out=$("$bin" --version) || bad "$name --version: exit status $?"
  [ "$out" = "$name $v (libkvact $v)" ] ||
    bad "$name --version: \"$out\", want \"$name $v (libkvact $v)\""
  help=$("$bin" --help) || bad "$name --help: exit status $?"
  echo "$help" | grep -q -- '--version' || bad "$name --help: the usage does not list --version"
done

if [ "$fail" = 0 ]; then
  echo "version $v everywhere; $# binaries answer --version and --help"
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
