#!/bin/sh
# update_readme.sh — rewrites the generated documentation:
#   config/SCHEMA.md and README.md's schema section: the configuration
#     reference (kvconf schema --markdown: the schema table, with the
#     adapter types and policies the registries hold)
#   README.md's bench section: the latest kvbench figures, from a saved
#     kvbench output file
# usage: tools/update_readme.sh [BENCH_OUTPUT]
set -eu
cd "$(dirname "$0")/.."
bazel build //tools:kvconf >/dev/null 2>&1
schema=$(mktemp)
trap 'rm -f "$schema" README.md.new' EXIT
"$(bazel info bazel-bin 2>/dev/null)/tools/kvconf" schema --markdown > "$schema"
replace() { # replace MARKER FILE: put FILE between <!-- MARKER:begin/end -->
  awk -v m="$1" -v f="$2" '
    $0 == "<!-- " m ":begin -->" { print; while ((getline l < f) > 0) print l; skip = 1; next }
    $0 == "<!-- " m ":end -->" { skip = 0 }
    !skip { print }' README.md > README.md.new
  mv README.md.new README.md
}
cp "$schema" config/SCHEMA.md
replace schema "$schema"
if [ $# -ge 1 ]; then
  bench=$(mktemp)
  { echo '```'; grep -E '^(suite|measure)=' "$1"; echo '```'; } > "$bench"
  replace bench "$bench"
  rm -f "$bench"
fi
echo "config/SCHEMA.md and README.md updated"
