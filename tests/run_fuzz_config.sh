#!/bin/sh
# run_fuzz_config.sh SECONDS — builds the config libFuzzer target and runs it
# for SECONDS (default 60) over a scratch copy of tests/fuzz_corpus/config/.
# Exits non-zero when the fuzzer finds a crash, leak or assertion; the
# reproducer is left as $TMPDIR/kvact-fuzz-config-crash-* (rerun it with
# bazel-bin/tests/fuzz_config_bin FILE).
set -eu
secs=${1:-60}
case $secs in
  ''|*[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
bazel build //tests:fuzz_config
bin=$(bazel info bazel-bin)/tests/fuzz_config_bin
work=$(mktemp -d "${TMPDIR:-/tmp}/kvact-fuzz-config.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cp tests/fuzz_corpus/config/* "$work/"
set +e
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -print_final_stats=1 -artifact_prefix="${TMPDIR:-/tmp}/kvact-fuzz-config-" "$work"
rc=$?
set -e
echo "run_fuzz_config: $(ls "$work" | wc -l) corpus files after ${secs}s, exit $rc"
exit $rc
