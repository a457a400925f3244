"""test_peer_bench.py — python/bench/peer_lmcache.py (LMCache's StorageManager beside kvact's)
still runs end to end under the LMCache environment, with tiny sizes: every part, every
line with both sides' figures, a ratio and ok=yes|no, the versions first and the
below_target summary last. No figure is asserted: this is a 2-core shared machine.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                     "peer_lmcache.py")
PAIRS = {  # measure -> the two figures every one of its lines carries
    "control-write": ("lmcache_kops", "kvact_kops"),
    "control-prefetch": ("lmcache_kops", "kvact_kops"),
    "call": ("lmcache_p99_us", "kvact_p99_us"),
    "data-write": ("lmcache_gbs", "kvact_gbs"),
    "data-read": ("lmcache_gbs", "kvact_gbs"),
}
ANCHORS = {"anchor-c", "anchor-rtt"}  # kvact's bare C calls; a raw round trip
for _tier in ("mock", "disk", "redis"):
    PAIRS[_tier + "-store"] = PAIRS[_tier + "-prefetch"] = ("lmcache_gbs", "kvact_gbs")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """(the versions line, the measure lines as dicts, the summary line, the --json file)
    of one tiny run."""
    tmp = tmp_path_factory.mktemp("peer_bench")
    out = tmp / "bench.json"
    res = subprocess.run([sys.executable, BENCH, "--reps", "1", "--iters", "3", "--warmup", "1",
                          "--keys", "1,2", "--sizes-mib", "1", "--round-mib", "2",
                          "--l2-object-mib", "1", "--l2-round-mib", "2", "--l1-mib", "32",
                          "--mock-gbps", "0,10", "--dir", str(tmp), "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    figures = [dict(f.split("=", 1) for f in ln.split()) for ln in lines
               if ln.startswith("measure=")]
    return lines[0], figures, lines[-1], out


def test_versions_come_first(bench):
    versions = dict(f.split("=", 1) for f in bench[0].split())
    assert {"lmcache", "torch", "kvact", "cpus", "l1_mib"} <= set(versions), versions


def test_every_part_printed_both_sides(bench):
    _, figures, summary, _ = bench
    skipped = summary.split(" skipped=")[1]
    expect = set(PAIRS)
    if skipped != "none":  # only the redis part may be skipped, and only without a server
        assert skipped == "redis" and shutil.which("redis-server") is None, summary
        expect -= {"redis-store", "redis-prefetch"}
    assert {f["measure"] for f in figures} - ANCHORS == expect
    assert ANCHORS <= {f["measure"] for f in figures}
    for f in figures:
        if f["measure"] in ANCHORS:
            assert float(f["p50_us"]) >= 0 and float(f["p99_us"]) >= 0, f
            continue
        assert f["kvact"] in ("embedded", "kvactd"), f
        for field in PAIRS[f["measure"]] + ("ratio",) * (f["measure"] != "call"):
            assert float(f[field]) >= 0, f
        assert f["target"] == "none" or f["ok"] in ("yes", "no"), f
    sides = {(f["measure"], f["kvact"]) for f in figures if f["measure"] not in ANCHORS}
    assert sides == {(m, k) for m in expect for k in ("embedded", "kvactd")}


def test_summary_names_the_measures_below_target(bench):
    _, figures, summary, out = bench
    assert summary.startswith("suite=lmcache below_target="), summary
    below = summary.split()[1].split("=", 1)[1]
    failed = [f for f in figures if f.get("ok") == "no" or f.get("p99_ok") == "no"]
    assert (below == "none") == (not failed), summary
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == len(figures)
