#!/bin/sh
# docs/api_coverage.sh — every KVA_API function of the header is named in
# the API reference.
#
#   docs/api_coverage.sh kvact.h docs/api.md
#
# Lists each function declared with KVA_API in HEADER that DOC does not
# mention (as a whole word) and exits 1 if there is any; 0 when all are
# there, 2 on bad arguments. A declaration may span lines: its name is the
# identifier before the first '(' after KVA_API.
set -u
[ $# -eq 2 ] && [ -r "$1" ] && [ -r "$2" ] || {
  echo "usage: docs/api_coverage.sh HEADER DOC" >&2
  exit 2
}
header=$1 doc=$2
names=$(awk '
  /^[ \t]*KVA_API[ \t]/ { decl = ""; on = 1 }
  on { decl = decl " " $0 }
  on && /[(;]/ {
    on = 0
    sub(/\(.*/, "", decl)
    n = split(decl, w, /[^A-Za-z0-9_]+/)
    for (i = n; i > 0; i--) if (w[i] != "") { print w[i]; break }
  }' "$header" | sort -u)
[ -n "$names" ] || { echo "api_coverage: no KVA_API function in $header" >&2; exit 2; }
missing=0 total=0
for n in $names; do
  total=$((total + 1))
  grep -qw -- "$n" "$doc" || { echo "$n"; missing=$((missing + 1)); }
done
echo "api_coverage: $((total - missing)) of $total KVA_API functions of $header named in $doc" >&2
[ "$missing" -eq 0 ]
