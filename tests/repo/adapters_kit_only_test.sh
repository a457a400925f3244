#!/usr/bin/env bash
# adapters_kit_only_test.sh — the built-in adapters are written as a
# plug-in is: each file under l2/adapters/ (the runfiles' working
# directory holds them as data) includes kvact.h, system headers (<...>),
# its own folder's headers and l2/adapters/object_header.h, nothing else.
# builtin.c is the library's glue (it names the adapters for the
# registry), not an adapter, and is skipped. Their BUILD targets depend on
# //:kvact_h only, so the sandbox refuses an internal header anyway; this
# keeps the rule when a BUILD file changes.
set -euo pipefail
fail=0 files=0
while IFS= read -r f; do
  files=$((files + 1))
  [ "$f" = l2/adapters/builtin.c ] && continue
  dir=$(dirname "$f")
  while IFS= read -r inc; do
    case "$inc" in
    kvact.h | l2/adapters/object_header.h) ;;
    "$dir"/*) [ "$(dirname "$inc")" = "$dir" ] || { echo "$f: includes $inc"; fail=1; } ;;
    *) echo "$f: includes $inc"; fail=1 ;;
    esac
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find l2/adapters -name '*.[ch]' | sort)
if [ "$files" -lt 20 ]; then
  echo "only $files adapter files found: the data is missing"
  fail=1
fi
if [ "$fail" = 0 ]; then
  echo "$files files, each including kvact.h, system headers and its own folder's only"
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
