#!/bin/sh
# kvbench_clients_test.sh KVBENCH — kvbench --clients 2: the simulation as
# two engine processes against the kvactd kvbench starts, then as two
# embedded instances with half the budget each. Both rows print with hit
# ratios in [0, 1], a positive TTFT p50 <= p99, requests, no wrong bytes,
# no errors, no failed process; the summary line holds both modes; each
# embedded instance had its own disk file of half the capacity; the
# daemon's socket is gone at the end.
set -eu
kvbench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0

check() { # check WHAT COMMAND...
  what=$1
  shift
  if "$@"; then passed=$((passed + 1)); else echo "FAIL: $what"; failed=$((failed + 1)); fi
}

# value NAME LINE: the number after NAME= in LINE.
value() { echo "$2" | sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

disk="{\"type\":\"disk\",\"path\":\"$dir/disk\",\"capacity_bytes\":67108864,\"o_direct\":false}"
"$kvbench" --clients 2 --duration 2 --model tiny --conversations 4 \
  -o l1.size_bytes=33554432 -o l1.prefault=false -o "l2=[$disk]" \
  > "$dir/out" 2> "$dir/err" &
pid=$!
rc=0
wait "$pid" || rc=$?
check "kvbench exited $rc: $(cat "$dir/err")" test "$rc" = 0
cat "$dir/out"

for mode in kvactd embedded; do
  row=$(grep "^clients=2  mode=$mode " "$dir/out" || true)
  check "no $mode row" test -n "$row"
  hit=$(value hit_ratio "$row") p50=$(value ttft_p50_ms "$row") p99=$(value ttft_p99_ms "$row")
  req=$(value requests "$row")
  check "$mode: hit_ratio '$hit' not in [0,1]" \
    awk -v h="$hit" 'BEGIN { exit !(h != "" && h >= 0 && h <= 1) }'
  check "$mode: ttft p50 '$p50', p99 '$p99' not 0 < p50 <= p99" \
    awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(a != "" && a > 0 && a <= b) }'
  check "$mode: requests '$req' not > 0" awk -v r="$req" 'BEGIN { exit !(r > 0) }'
  check "$mode: wrong bytes, errors or failed processes" \
    sh -c "echo '$row' | grep -q 'wrong_bytes=0  errors=0  failed_processes=0'"
done
sum=$(grep '^measure=sim-clients N=2 ' "$dir/out" || true)
for f in hit_ratio_kvactd hit_ratio_embedded ttft_p50_kvactd ttft_p50_embedded; do
  check "summary has no $f" test -n "$(value "$f" " $sum")"
done
for i in 0 1; do
  size=$(stat -c %s "$dir/disk.$i" 2>/dev/null || echo none)
  check "embedded instance $i's disk file: size $size, not half of 67108864" test "$size" = 33554432
done
check "the daemon's socket is left" test ! -e "/tmp/kvbench-sim-$pid.sock"

# a bad config is refused before anything is forked
check "-o bad accepted" sh -c "! '$kvbench' --clients 2 --model tiny -o nosuch.key=1 2>/dev/null"
check "--clients above --conversations accepted" \
  sh -c "! '$kvbench' --clients 3 --conversations 2 --model tiny 2>/dev/null"
echo "$passed passed, $failed failed"
test "$failed" = 0
