#!/bin/sh
# run_fuzz.sh SECONDS [NAME...] — builds the libFuzzer targets
# //tests/fuzz:fuzz_NAME (default: every tests/fuzz/fuzz_NAME.c) and runs
# each for SECONDS over a scratch copy of tests/fuzz/fuzz_corpus/NAME/, one
# after the other. Prints one line per fuzzer with its corpus count at the
# end of its run, and exits non-zero when any found a crash, leak, timeout
# or failed check; the reproducer is left as $TMPDIR/kvact-fuzz-NAME-crash-*
# (rerun it with bazel-bin/tests/fuzz/fuzz_NAME_bin FILE; add it to
# tests/fuzz/fuzz_corpus/NAME/ as regress-* once fixed, so
# fuzz_NAME_corpus_test replays it).
# KVA_FUZZ_KEEP=DIR keeps each grown corpus in DIR/NAME/.
set -eu
secs=${1:-}
case $secs in
  ''|*[!0-9]*) echo "usage: $0 SECONDS [NAME...]" >&2; exit 2 ;;
esac
shift
cd "$(dirname "$0")/../.."
if [ $# -eq 0 ]; then
  set -- $(ls tests/fuzz/fuzz_*.c | sed -n 's|^tests/fuzz/fuzz_\(.*\)\.c$|\1|p' | grep -v '^seeds$')
fi
targets=
for name; do targets="$targets //tests/fuzz:fuzz_$name"; done
bazel build $targets
bin=$(bazel info bazel-bin)/tests/fuzz
tmp=${TMPDIR:-/tmp}
summary=$(mktemp "$tmp/kvact-fuzz-summary.XXXXXX")
work=
trap 'rm -rf "$summary" $work' EXIT INT TERM
failed=0
for name; do
  case $name in # the largest input each format needs
    disk_recover) max_len=16385 ;; # a flag byte and 64 block heads
    disk_super) max_len=128 ;;
    protocol) max_len=16398 ;; # 14 bytes of expectations, a frame up to 16 KiB
    *) max_len=8192 ;;
  esac
  dir=$(mktemp -d "$tmp/kvact-fuzz-$name.XXXXXX")
  work="$work $dir"
  cp tests/fuzz/fuzz_corpus/"$name"/* "$dir/"
  seeds=$(ls "$dir" | wc -l)
  set +e
  "$bin/fuzz_${name}_bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$tmp/kvact-fuzz-$name-" "$dir"
  rc=$?
  set -e
  [ $rc -eq 0 ] || failed=1
  line="fuzz $name: $(ls "$dir" | wc -l) corpus files ($seeds seeds) after ${secs}s, exit $rc"
  echo "$line" | tee -a "$summary"
  if [ -n "${KVA_FUZZ_KEEP:-}" ]; then
    mkdir -p "$KVA_FUZZ_KEEP/$name"
    cp "$dir"/* "$KVA_FUZZ_KEEP/$name/"
  fi
done
echo "== fuzzing summary"
cat "$summary"
exit $failed
