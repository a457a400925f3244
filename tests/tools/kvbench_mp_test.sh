#!/bin/sh
# kvbench_mp_test.sh KVBENCH — kvbench --suite mp runs its anchors (raw
# AF_UNIX and ZeroMQ round trips between forked processes, batched round
# trips from 1, 2 and 4 clients) and prints each figure, positive, with
# p99 no lower than p50.
set -eu
kvbench=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$kvbench" --suite mp --quick --mp-iters 500 > "$out"
failed=0
# line MEASURE ANCHOR FIELD: the value of FIELD on the line of MEASURE, ANCHOR.
line() { grep "^measure=$1 .*anchor=$2" "$out" | sed -n "s/.* $3=\([0-9.e+]*\) .*/\1/p"; }
positive() { # positive WHAT VALUE
  if ! awk -v v="$2" 'BEGIN { exit !(v + 0 > 0) }'; then
    echo "$1: want a positive figure, got '$2'"
    failed=1
  fi
}
for a in unix-stream zmq-reqrep-ipc; do
  for f in p50_us p99_us rate; do positive "rtt-1key $a $f" "$(line rtt-1key $a $f)"; done
  p50=$(line rtt-1key $a p50_us) p99=$(line rtt-1key $a p99_us)
  if ! awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(b + 0 >= a + 0) }'; then
    echo "rtt-1key $a: p99 $p99 below p50 $p50"
    failed=1
  fi
done
for c in 1 2 4; do
  positive "batch64-${c}client" \
    "$(sed -n "s/^measure=batch64-${c}client anchor=unix-stream:\([0-9.e+]*\) .*/\1/p" "$out")"
done
[ "$failed" = 0 ] || { cat "$out"; exit 1; }
echo "kvbench --suite mp: all figures present"
