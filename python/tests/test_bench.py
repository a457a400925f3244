"""test_bench.py — bench.py runs end to end (tiny sizes) and prints every row with its fields.

Timing values are not checked, only that each row is there and parses.
"""
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "bench.py")
FIELDS = {
    "call-overhead": {"call", "python_us", "c_us", "added_us", "target", "ok"},
    "call-overhead-parts": {"call", "key_array_us", "ctypes_us", "wrapper_us", "c_gap_us"},
    "paged-store": {"gbs", "anchor", "anchor_gbs", "ratio", "target", "ok", "torch_copy_gbs",
                    "torch_index_gbs", "bytes"},
}
FIELDS["paged-load"] = FIELDS["paged-store"]
NUMBERS = {"python_us", "c_us", "added_us", "key_array_us", "ctypes_us", "wrapper_us", "c_gap_us",
           "gbs",
           "anchor_gbs", "ratio", "torch_copy_gbs", "torch_index_gbs", "bytes"}


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """bench.py's rows (dicts of its fields) and its --json file, from one tiny run."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    res = subprocess.run([sys.executable, BENCH, "--iters", "3", "--reps", "2", "--layers", "2",
                          "--tokens", "300", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1].startswith("suite=python below_target="), lines[-1]
    return [dict(f.split("=", 1) for f in line.split()) for line in lines[:-1]], out, lines[-1]


def test_bench_prints_every_row_with_its_fields(bench):
    rows, _, _ = bench
    calls = [r["call"] for r in rows if r["measure"] == "call-overhead"]
    assert calls == ["lookup64", "prefetch64", "write64"]
    assert [r["call"] for r in rows if r["measure"] == "call-overhead-parts"] == calls
    assert sorted(r["measure"] for r in rows if r["measure"].startswith("paged")) == [
        "paged-load", "paged-store"]
    for r in rows:
        assert set(r) - {"measure"} == FIELDS[r["measure"]], r
        for f in NUMBERS & set(r):
            float(r[f])
        assert r.get("ok", "yes") in ("yes", "no")
    assert all(r["anchor"] in ("torch-copy_", "torch-index") for r in rows if "anchor" in r)
    assert {int(r["bytes"]) for r in rows if "bytes" in r} == {2 * 2 * 300 * 8 * 128 * 2}


def test_bench_ends_with_the_measures_below_target(bench):
    rows, _, summary = bench
    below = [r["measure"] + ("-" + r["call"] if "call" in r else "") for r in rows
             if r.get("ok") == "no"]
    assert summary == "suite=python below_target=" + (",".join(below) or "none")


def test_bench_json_holds_the_rows_and_every_rep(bench):
    rows, path, _ = bench
    data = json.loads(path.read_text())
    assert [r["measure"] for r in data["rows"]] == [r["measure"] for r in rows]
    assert len(data["calls"]) == len(data["paged"]) == 2
