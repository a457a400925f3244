#!/bin/sh
# kvbench_mp_test.sh KVBENCH — kvbench --suite mp runs its anchors (raw
# AF_UNIX and ZeroMQ round trips between forked processes, batched round
# trips from 1, 2 and 4 clients) and kvact's own figures (a daemon child
# and client processes: single-key prefetch round trips, 64-key lookups
# from 1, 2 and 4 clients, the write+read cycle of 8 and 32 MiB against
# the same cycle in-process), prints each figure, positive, with p99 no
# lower than p50 and every target line's verdict, ends with the line naming
# the measures below target, and leaves no socket.
set -eu
kvbench=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$kvbench" --suite mp --quick --mp-iters 500 > "$out" &
pid=$! # its daemon's socket: /tmp/kvbench-mp-$pid.sock
wait $pid
failed=0
# line MEASURE ANCHOR FIELD: the value of FIELD on the line of MEASURE, ANCHOR.
line() { grep "^measure=$1 .*anchor=$2" "$out" | sed -n "s/.* $3=\([0-9.e+]*\).*/\1/p"; }
positive() { # positive WHAT VALUE
  if ! awk -v v="$2" 'BEGIN { exit !(v + 0 > 0) }'; then
    echo "$1: want a positive figure, got '$2'"
    failed=1
  fi
}
verdicts() { # verdicts MEASURE N: N targets on its line, each with its ok=yes or ok=no
  n=$(grep "^measure=$1 " "$out" |
    grep -o ' \([a-z_]*_\)\{0,1\}target=[<>]=[0-9.e+-]* \([a-z_]*_\)\{0,1\}ok=\(yes\|no\)' | wc -l)
  if [ "$n" != "$2" ]; then
    echo "$1: want $2 targets with their verdicts, got $n"
    failed=1
  fi
}
for a in unix-stream zmq-reqrep-ipc kvact; do
  for f in p50_us p99_us rate; do positive "rtt-1key $a $f" "$(line rtt-1key $a $f)"; done
  p50=$(line rtt-1key $a p50_us) p99=$(line rtt-1key $a p99_us)
  if ! awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(b + 0 >= a + 0) }'; then
    echo "rtt-1key $a: p99 $p99 below p50 $p50"
    failed=1
  fi
done
for f in release_p50_us release_p99_us ratio_raw ratio_zmq; do
  positive "rtt-1key kvact $f" "$(line rtt-1key kvact $f)"
done
verdicts rtt-1key 3
for c in 1 2 4; do
  m=batch64-${c}client
  positive "$m unix-stream" "$(sed -n "s/^measure=$m .*anchor=unix-stream:\([0-9.e+]*\) .*/\1/p" "$out")"
  for f in kvact ratio touch; do positive "$m $f" "$(line $m unix-stream $f)"; done
  verdicts $m 1
done
for z in 8 32; do
  m=cycle-${z}MiB
  positive "$m in-process" "$(sed -n "s/^measure=$m .*anchor=in-process:\([0-9.e+]*\) .*/\1/p" "$out")"
  for f in kvact ratio; do positive "$m $f" "$(line $m in-process $f)"; done
  verdicts $m 1
done
# the suite's last line names what is below target: "none" exactly when
# no line says ok=no
summary=$(sed -n 's/^suite=mp below_target=\(.*\)$/\1/p' "$out")
if [ -z "$summary" ]; then
  echo "no suite=mp below_target= line"
  failed=1
elif grep -q 'ok=no' "$out" && [ "$summary" = none ] || ! grep -q 'ok=no' "$out" && [ "$summary" != none ]; then
  echo "below_target=$summary disagrees with the lines' verdicts"
  failed=1
fi
if [ -e /tmp/kvbench-mp-$pid.sock ]; then
  echo "the daemon's socket /tmp/kvbench-mp-$pid.sock is left"
  failed=1
fi
[ "$failed" = 0 ] || { cat "$out"; exit 1; }
echo "kvbench --suite mp: all figures present"
