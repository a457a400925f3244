#!/bin/sh
# readme_schema_test.sh KVCONF README — the configuration reference in
# README.md is the one the schema generates (tools/update_readme.sh).
set -eu
kvconf=$1 readme=$2
want=$(mktemp) have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
"$kvconf" schema --markdown > "$want"
awk '$0 == "<!-- schema:end -->" { p = 0 } p { print } $0 == "<!-- schema:begin -->" { p = 1 }' \
  "$readme" > "$have"
if cmp -s "$want" "$have"; then
  echo "1 passed, 0 failed"
else
  echo "README.md configuration reference is stale: run tools/update_readme.sh"
  diff "$want" "$have" | head -20
  echo "0 passed, 1 failed"
  exit 1
fi
