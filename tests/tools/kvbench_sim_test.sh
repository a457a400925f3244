#!/bin/sh
# kvbench_sim_test.sh KVBENCH — the serving-engine simulation (kvbench with
# no --suite) runs on the embedded default config and without L2, and its
# JSON report holds: hits on the repeated system prompts, no wrong bytes,
# bytes stored = stored chunks x chunk bytes, the L2 tiers' own byte
# counts add up to the L2 totals, the L2 chunks usable as a prefix are
# some of those resident (some resident with an L2 tier, none without), the
# same report is written beside the chart, and the chart is written (the
# hand-drawn one, KVBENCH_CHART=simple; kvbench_report_test checks report.py's),
# the load plan's hits found, used and skipped hold together, and the split
# engine splits.
set -eu
kvbench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0

# field NAME FILE: the number after "NAME": in the report's top level.
field() { sed -n "s/^  \"$1\": \([0-9.eE+-]*\),\{0,1\}$/\1/p" "$2"; }
# tier_sum NAME FILE: the sum of NAME over the entries of "tiers" (0 if none).
tier_sum() {
  sed -n "s/^      \"$1\": \([0-9]*\),\{0,1\}$/\1/p" "$2" | awk '{ s += $1 } END { print s + 0 }'
}

check() { # check NAME CONDITION-DESCRIPTION COMMAND...
  name=$1 what=$2
  shift 2
  if "$@"; then passed=$((passed + 1)); else echo "$name: $what"; failed=$((failed + 1)); fi
}

run() { # run NAME [kvbench options...]
  name=$1
  shift
  out=$dir/$name.out svg=$dir/$name.svg
  if ! KVBENCH_CHART=simple "$kvbench" --model tiny --duration 2 --json --svg "$svg" "$@" > "$out" 2> "$dir/$name.err"; then
    echo "$name: kvbench failed"
    cat "$dir/$name.err"
    failed=$((failed + 1))
    return
  fi
  hit=$(field hit_ratio "$out") wrong=$(field wrong_bytes "$out") errs=$(field errors "$out")
  stored=$(field bytes_stored "$out") chunks=$(field stored_chunks "$out")
  cb=$(field chunk_bytes "$out")
  check "$name" "hit_ratio '$hit' is not > 0" awk -v h="$hit" 'BEGIN { exit !(h > 0) }'
  check "$name" "wrong_bytes '$wrong', errors '$errs'" test "$wrong" = 0 -a "$errs" = 0
  check "$name" "bytes_stored '$stored' != $chunks x $cb" \
    awk -v s="$stored" -v c="$chunks" -v b="$cb" 'BEGIN { exit !(s > 0 && s == c * b) }'
  l2s=$(field l2_bytes_stored "$out") l2l=$(field l2_bytes_loaded "$out")
  ts=$(tier_sum bytes_stored "$out") tl=$(tier_sum bytes_loaded "$out")
  check "$name" "tiers stored $ts, loaded $tl != L2 totals $l2s, $l2l" \
    test "$ts" = "$l2s" -a "$tl" = "$l2l"
  res=$(field l2_resident_chunks "$out") use=$(field l2_usable_chunks "$out")
  check "$name" "l2_usable_chunks '$use' of l2_resident_chunks '$res' ($want_l2)" \
    awk -v r="$res" -v u="$use" -v w="$want_l2" \
    'BEGIN { exit !(u <= r && (w == "some" ? r > 0 : r == 0)) }'
  check "$name" "no chart at $svg" grep -q '</svg>' "$svg"
  check "$name" "$dir/$name.json is not the report on stdout" /usr/bin/python3 -c \
    'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
    "$out" "$dir/$name.json"
  bound=$(field ttft_bound_p50_ms "$out") over=$(field ttft_over_bound "$out")
  check "$name" "ttft_bound_p50_ms '$bound', ttft_over_bound '$over'" \
    awk -v b="$bound" -v o="$over" 'BEGIN { exit !(b > 0 && o > 0) }'
  disks=$(grep -c '"how": "io_uring"' "$out" || true)
  check "$name" "$disks disk bandwidths measured, want $want_disks" test "$disks" = "$want_disks"
  why=$(per_second_problem "$out" "$svg" "${want_engine:-any}")
  check "$name" "per-second series: $why" test -z "$why"
}

# per_second_problem JSON SVG ENGINE: "" when the report's per_second series
# has one entry per second begun (ceil(elapsed_s)), sums to the run's
# totals, the load plan's counts hold together (used <= found, the tiers add
# up; split turns only, and some, with ENGINE split), and the chart draws
# one point per second that had a turn, at the series' hit ratios; else
# what is wrong. Debian's python3 reads the JSON.
per_second_problem() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, math, re, sys
r = json.load(open(sys.argv[1]))
svg = open(sys.argv[2]).read()
sec = r["per_second"]
problems = []
if len(sec) != math.ceil(r["elapsed_s"]):
    problems.append("%d entries for %.3f s" % (len(sec), r["elapsed_s"]))
if [s["second"] for s in sec] != list(range(len(sec))):
    problems.append("seconds not 0..n-1")
for name, total in (("turns", "requests"), ("chunks", "chunks"), ("hit_chunks", "hit_chunks"),
                    ("found_chunks", "found_chunks")):
    if sum(s[name] for s in sec) != r[total]:
        problems.append("%s sum %d != %s %d" % (name, sum(s[name] for s in sec), total, r[total]))
# the load plan's accounting: used <= found, per tier and in all; the tiers
# add up; what was skipped was found
tiers = r["tiers"]
if r["hit_chunks"] > r["found_chunks"] or r["found_chunks"] > r["chunks"]:
    problems.append("used %d, found %d of %d chunks" % (r["hit_chunks"], r["found_chunks"],
                                                       r["chunks"]))
for key, total in (("hit_chunks", "hit_chunks"), ("found_chunks", "found_chunks"),
                   ("skipped_chunks", "skipped_chunks")):
    if sum(t[key] for t in tiers) != r[total]:
        problems.append("tiers' %s sum %d != %d" % (key, sum(t[key] for t in tiers), r[total]))
for t in tiers:
    if t["hit_chunks"] > t["found_chunks"] or t["skipped_chunks"] > t["found_chunks"]:
        problems.append("%s: used %d, skipped %d of %d found" % (t["name"], t["hit_chunks"],
                                                                t["skipped_chunks"],
                                                                t["found_chunks"]))
for s in sec:
    if sum(t["found_chunks"] for t in s["tiers"]) != s["found_chunks"]:
        problems.append("second %d: the tiers' found chunks do not add up" % s["second"])
want_split = sys.argv[3] == "split"
if want_split != (r["split_turns"] > 0) or (want_split and not r["split_computed_chunks"]):
    problems.append("engine %s: %d split turns, %d chunks computed in front" %
                    (r["engine"], r["split_turns"], r["split_computed_chunks"]))
lines = re.findall(r'<polyline[^>]*points="([^"]*)"', svg)
with_turns = [s for s in sec if s["turns"]]
if len(lines) != 3 or any(len(l.split()) != len(with_turns) for l in lines):
    problems.append("chart lines of %s points, want %d" % ([len(l.split()) for l in lines],
                                                          len(with_turns)))
else:  # the hit ratio line: y = 320 - 280 * ratio (sim_write_svg's plot area)
    ys = [float(p.split(",")[1]) for p in lines[0].split()]
    if any(abs(y - (320 - 280 * s["hit_ratio"])) > 0.06 for y, s in zip(ys, with_turns)):
        problems.append("the chart's hit ratios differ from the series'")
print("; ".join(problems))
PY
}

want_l2=some want_disks=1 run default_config
want_l2=none want_disks=0 run no_l2 -o 'l2=[]' --threads 3 --conversations 5
# a slow tier (10 MB/s: a tiny chunk about as slow to load as to compute)
# and the split engine: the front of each found prefix computed while its
# back loads (a small L1, so that most of a found prefix lies in the tier)
want_l2=some want_disks=0 want_engine=split run split --engine split \
  -o 'l2=[{"type":"mock","bandwidth_bytes_per_s":10000000}]' -o l1.size_bytes=4194304
echo "$passed passed, $failed failed"
test "$failed" = 0
