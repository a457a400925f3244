#!/bin/sh
# kvbench_report_test.sh KVBENCH REPORT_PY — kvbench's chart is report.py's
# (Debian's python3-matplotlib) over the JSON report written beside it: on
# a short run of the default config, report.py --dump shows one point per
# second of the run on every per-second line (hit ratio by tier, mean TTFT
# with / without kvact / bound, each tier's traffic) at the JSON's values,
# the TTFT ECDFs hold every turn with p50 marked at the report's p50s, the
# measured rates are the probed bandwidths, the per-second tier counts add
# up to the run's, and the SVG (and PNG) are well formed. matplotlib
# missing is a failed set-up (tools/bootstrap.sh installs it), not a skip.
set -eu
kvbench=$1 report=$2
python=/usr/bin/python3 # Debian's: the one python3-matplotlib is for
if ! err=$("$python" -c 'import matplotlib' 2>&1); then
  echo "FAIL: $python cannot import matplotlib ($err): install Debian's python3-matplotlib"
  echo "(apt-get install python3-matplotlib, or tools/bootstrap.sh as root)"
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export MPLCONFIGDIR="$dir/mpl" # matplotlib's font cache, somewhere writable
passed=0 failed=0

check() { # check WHAT COMMAND...
  what=$1
  shift
  if "$@"; then passed=$((passed + 1)); else echo "FAIL: $what"; failed=$((failed + 1)); fi
}

if ! "$kvbench" --model tiny --duration 3 --svg "$dir/r.svg" > "$dir/out" 2> "$dir/err"; then
  echo "FAIL: kvbench failed"
  cat "$dir/err"
  exit 1
fi
check "kvbench did not say it drew with matplotlib: $(tail -1 "$dir/err")" \
  grep -q "chart $dir/r.svg (matplotlib)" "$dir/err"
check "no JSON report beside the chart" test -s "$dir/r.json"
check "the progress line has no last second's figures" grep -q 'last s: hit .* TTFT .* ms' "$dir/err"
"$python" "$report" "$dir/r.json" "$dir/again.svg" --png "$dir/r.png" --dump > "$dir/dump"
check "the PNG is no PNG" sh -c "head -c 8 '$dir/r.png' | grep -q PNG"

why=$("$python" - "$dir/r.json" "$dir/dump" "$dir/r.svg" "$dir/again.svg" <<'PY'
import json, math, sys, xml.etree.ElementTree as ET
r = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
problems = []


def num(v):
    return float("nan") if v is None else float(v)


def close(a, b):
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-9 for x, y in zip(a, b))


def find(panel, pred, what):
    got = [l for l in lines if l["panel"] == panel and pred(l["label"])]
    if len(got) != 1:
        problems.append("%d lines %s in panel %s" % (len(got), what, panel))
    return got[0] if len(got) == 1 else None


def want_line(panel, pred, what, ys):
    l = find(panel, pred, what)
    if l and not close(l["y"], ys):
        problems.append("%s / %s: y %s, the JSON's %s" % (panel, what, l["y"], ys))


sec = r["per_second"]
if len(sec) != math.ceil(r["elapsed_s"]) or len(sec) < 3:
    problems.append("%d seconds in the series for %.3f s" % (len(sec), r["elapsed_s"]))
xs = [s["second"] + 0.5 for s in sec]
for l in lines:  # every per-second line: a point per second, at its middle
    if l["panel"] != "ttft_ecdf" and not l["label"].startswith("measured") and l["x"] != xs:
        problems.append("%s / %s: x %s, want %s" % (l["panel"], l["label"], l["x"], xs))

tiers = [t["name"] for t in r["tiers"]]
if tiers[:1] != ["L1"] or len(tiers) < 2:
    problems.append("tiers %s, want L1 and the default config's disk tier" % tiers)
tier = lambda s, name: next(t for t in s["tiers"] if t["name"] == name)
length = lambda s: min(1.0, r["elapsed_s"] - s["second"])
want_line("hit_ratio", lambda x: x == "all tiers (used)", "all tiers",
          [s["hit_ratio"] for s in sec])
if any("found_chunks" in s for s in sec):  # the load plan's: found, some not used
    want_line("hit_ratio", lambda x: x == "all tiers (found)", "all tiers found",
              [s["found_chunks"] / s["chunks"] if s["chunks"] else 0 for s in sec])
for label, key in (("with kvact", "ttft_mean_ms"), ("without kvact", "ttft_mean_ms_without_kvact"),
                   ("bound", "ttft_mean_ms_bound")):
    want_line("ttft", lambda x: x == label, label, [num(s[key]) for s in sec])
probe = {b["tier"]: b["gb_per_s"] for b in r["bound_bandwidths"]}
for name in tiers:
    want_line("hit_ratio", lambda x: x == name + " (used)", name,
              [tier(s, name)["hit_ratio"] for s in sec])
    if any("found_chunks" in tier(s, name) for s in sec):
        want_line("hit_ratio", lambda x: x == name + " (found)", name + " found",
                  [tier(s, name)["found_chunks"] / s["chunks"] if s["chunks"] else 0
                   for s in sec])
    p = "traffic:" + name
    rd = [tier(s, name)["bytes_read"] / length(s) / 1e9 for s in sec]
    wr = [tier(s, name)["bytes_written"] / length(s) / 1e9 for s in sec]
    want_line(p, lambda x: x.startswith("read ") and x != "read + written", "read", rd)
    want_line(p, lambda x: x.startswith("written "), "written", wr)
    rate = find(p, lambda x: x.startswith("measured"), "measured rate")
    bw = probe.get("copy" if name == "L1" else name)
    if rate and not close(rate["y"], [bw, bw]):
        problems.append("%s: measured rate %s, probed %s GB/s" % (p, rate["y"], bw))
    total = next(t for t in r["tiers"] if t["name"] == name)
    if sum(tier(s, name)["hit_chunks"] for s in sec) != total["hit_chunks"]:
        problems.append("%s: per-second hit_chunks do not add up to the run's" % name)
    read = sum(tier(s, name)["bytes_read"] for s in sec)
    written = sum(tier(s, name)["bytes_written"] for s in sec)
    if name == "L1":  # every hit is copied out of L1; every stored chunk into it
        ok = read == r["hit_chunks"] * r["chunk_bytes"] and written == r["bytes_stored"]
    else:  # the flush after the run stores more
        ok = read == total["bytes_loaded"] and written <= total["bytes_stored"]
    if not ok:
        problems.append("%s: per-second bytes read %d, written %d against the run's" %
                        (name, read, written))

samples = r["ttft_samples_ms"]
for label, key, p50 in (("with kvact", "with_kvact", "ttft_p50_ms"),
                        ("without kvact", "without_kvact", "ttft_p50_ms_without_kvact"),
                        ("bound", "bound", "ttft_bound_p50_ms")):
    v, n = samples[key], r["requests"]
    l = find("ttft_ecdf", lambda x: x.startswith(label + ":"), label)
    if len(v) != n:
        problems.append("%d %s samples for %d turns" % (len(v), key, n))
    if l and (l["x"] != sorted(v) or not close(l["y"], [(i + 1) / n for i in range(n)])):
        problems.append("the %s ECDF is not its %d samples" % (label, n))
    m = find("ttft_ecdf", lambda x: x == "_p50 " + label, "p50 " + label)
    if m and not close(m["x"], [r[p50]] * 2):
        problems.append("p50 %s drawn at %s, the report's %s" % (label, m["x"][0], r[p50]))
    find("ttft_ecdf", lambda x: x == "_p99 " + label, "p99 " + label)

for svg in sys.argv[3:]:
    try:
        root = ET.parse(svg).getroot()
        if not root.tag.endswith("svg") or "matplotlib" not in open(svg).read().lower():
            problems.append("%s is not matplotlib's SVG" % svg)
    except ET.ParseError as e:
        problems.append("%s: %s" % (svg, e))
print("; ".join(problems))
PY
)
check "report: $why" test -z "$why"
echo "$passed passed, $failed failed"
test "$failed" = 0
