#!/bin/sh
# kvbench_counted_test.sh KVBENCH — the malloc interposer is confined to
# kvbench_counted and the suite list is one list: --help names every suite,
# an unknown suite is refused naming them all, a suite that counts no
# allocations (l2-mock) runs in kvbench itself (even a kvbench alone in a
# folder), a suite that counts them (runtime) prints its mallocs figure
# from kvbench_counted (and "unavailable" from a kvbench alone), and
# kvbench defines no malloc while kvbench_counted does.
set -eu
kvbench=$1
counted=$(dirname "$kvbench")/kvbench_counted
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0
suites="runtime l1 l2-mock disk redis gpu mp all"

check() { # check WHAT-IS-WRONG COMMAND...
  what=$1
  shift
  if "$@"; then passed=$((passed + 1)); else echo "FAIL: $what"; failed=$((failed + 1)); fi
}
has() { grep -q -e "$2" "$1"; } # has FILE PATTERN
lacks() { ! grep -q -e "$2" "$1"; }

"$kvbench" --help > "$dir/help"
line=$(grep -e '--suite NAME  ' "$dir/help" | sed 's/.*--suite NAME//')
for s in $suites; do
  check "--help's --suite line lacks $s: $line" \
    sh -c 'echo "$1" | tr -d " " | tr "|" "\n" | grep -qx "$2"' - "$line" "$s"
done

rc=0
"$kvbench" --suite no-such-suite > /dev/null 2> "$dir/unknown" || rc=$?
check "an unknown suite exits $rc, want 2" test "$rc" = 2
for s in $suites; do
  check "the unknown-suite error lacks $s: $(cat "$dir/unknown")" has "$dir/unknown" "[(, ]$s[,)]"
done

# kvbench alone in a folder: no kvbench_counted beside it or its argv[0]
mkdir "$dir/alone"
cp "$kvbench" "$dir/alone/kvbench"
"$dir/alone/kvbench" --suite l2-mock --quick > "$dir/l2" 2> "$dir/l2.err" || true
check "l2-mock from a lone kvbench did not end its suite" has "$dir/l2" "^suite=l2-mock "
check "l2-mock looked for kvbench_counted: $(cat "$dir/l2.err")" lacks "$dir/l2.err" kvbench_counted

# TSan builds: the runtime suite's anchor (the C++ Actor Framework, not
# built with TSan) trips TSan's reports before any figure; its malloc
# figures are checked in the plain and ASan builds
tsan=0
nm "$kvbench" 2> /dev/null | grep -q '__tsan_init' && tsan=1
if [ "$tsan" = 0 ]; then
"$kvbench" --suite runtime --quick > "$dir/rt" 2> "$dir/rt.err" || true
check "runtime printed no mallocs_per_msg figure: $(grep -m1 mallocs "$dir/rt" || cat "$dir/rt.err")" \
  has "$dir/rt" "^measure=ping-pong mallocs_per_msg=[0-9]"
"$dir/alone/kvbench" --suite runtime --quick --anchors "$(pwd)/tools/bench" \
  > "$dir/rt-alone" 2> "$dir/rt-alone.err" || true
check "a lone kvbench's runtime suite did not say its mallocs are unavailable" \
  has "$dir/rt-alone" "^measure=ping-pong mallocs_per_msg=unavailable"
check "a lone kvbench did not say kvbench_counted is missing" \
  has "$dir/rt-alone.err" "kvbench_counted"
fi

# the definitions of malloc and free: in the symbol table and the dynamic one
defines() { # defines BINARY: the allocation functions it defines
  { nm --defined-only "$1" 2> /dev/null; nm -D --defined-only "$1" 2> /dev/null; } |
    awk '$3 ~ /^(malloc|calloc|realloc|free|posix_memalign|aligned_alloc)$/ { print $3 }' |
    sort -u | tr '\n' ' '
}
own=$(defines "$kvbench")
check "kvbench defines $own" test -z "$own"
# a sanitizer build owns malloc (malloc_count.c counts nothing there): then
# kvbench_counted defines none either; else it defines the interposer's
if nm "$counted" 2> /dev/null | grep -q '__[at]san_init'; then
  check "kvbench_counted defines $(defines "$counted") in a sanitizer build" \
    test -z "$(defines "$counted")"
else
  check "kvbench_counted does not define malloc" sh -c "echo '$(defines "$counted")' | grep -qw malloc"
fi

echo "$passed passed, $failed failed"
test "$failed" = 0
