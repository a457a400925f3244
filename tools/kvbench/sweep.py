#!/usr/bin/python3
"""Issue 30's targets over kvbench's simulation: each configuration run on
several seeds, the medians of TTFT p50 and p99 with kvact, without it and
its bound, hits found and used, and whether each target holds:

  p50 and p99 with kvact <= without (never slower than recomputing)
  p50 with kvact <= 1.25 x the bound's p50

Runs with Debian's /usr/bin/python3 (the standard library only). A Redis
configuration starts its own redis-server on a free local port (maxmemory
2 GiB, no persistence) and stops it after.

  tools/kvbench/sweep.py --kvbench bazel-bin/tools/kvbench/kvbench [--seeds 1,2,3]
      [--duration 30] [--only NAME] [--markdown]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = [
    ("default (1 GiB disk)", None),
    ("8 GiB disk", '[{"type":"disk","capacity_bytes":8589934592}]'),
    ("slow mock (0.5 GB/s)",
     '[{"type":"mock","capacity_bytes":2147483648,"bandwidth_bytes_per_s":500000000}]'),
    ("redis", '[{"type":"redis","addrs":["127.0.0.1:PORT"]}]'),
]
BOUND_TARGET = 1.25


def pct(sorted_values, p):
    """kvbench's own percentile (sim_pct): the nearest rank."""
    if not sorted_values:
        return 0.0
    i = int(p / 100 * (len(sorted_values) - 1) + 0.5)
    return sorted_values[min(i, len(sorted_values) - 1)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A throwaway redis-server for one configuration."""

    def __init__(self):
        exe = shutil.which("redis-server")
        if not exe:
            sys.exit("sweep: redis-server is not installed (tools/bootstrap.sh installs it)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="kvbench-sweep-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--maxmemory", "2gb", "--maxmemory-policy", "allkeys-lru",
             "--dir", self.dir, "--proto-max-bulk-len", "1gb"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        sys.exit("sweep: redis-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def run(kvbench, l2, seed, duration, extra):
    out = tempfile.mkdtemp(prefix="kvbench-sweep-")
    cmd = [kvbench, "--duration", str(duration), "--seed", str(seed), "--json",
           "--svg", os.path.join(out, "chart.svg")] + extra
    if l2:
        cmd += ["-o", "l2=" + l2]
    env = dict(os.environ, KVBENCH_CHART="simple")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       check=False)
    shutil.rmtree(out, ignore_errors=True)
    if p.returncode != 0:
        sys.exit(f"sweep: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def figures(j):
    s = j["ttft_samples_ms"]
    w, b, bd = (sorted(s[k]) for k in ("with_kvact", "without_kvact", "bound"))
    tiers = {t["name"]: (t.get("found_chunks", t["hit_chunks"]), t["hit_chunks"],
                         t.get("skipped_chunks", 0)) for t in j["tiers"]}
    return {
        "p50": pct(w, 50), "p99": pct(w, 99), "p50_without": pct(b, 50), "p99_without": pct(b, 99),
        "p50_bound": pct(bd, 50), "p99_bound": pct(bd, 99), "chunks": j["chunks"],
        "found": j.get("found_chunks", j["hit_chunks"]), "used": j["hit_chunks"],
        "split_turns": j.get("split_turns", 0), "turns": j["requests"], "tiers": tiers,
        "p50_bound_shared": j.get("ttft_bound_shared_p50_ms", 0), "plan_p99": j.get("plan_p99_ms", 0),
        "wrong_bytes": j["wrong_bytes"], "errors": j["errors"],
    }


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def summarize(name, runs):
    m = {k: median(runs, k) for k in ("p50", "p99", "p50_without", "p99_without", "p50_bound",
                                       "p99_bound", "chunks", "found", "used", "split_turns",
                                       "turns", "p50_bound_shared", "plan_p99")}
    m["name"] = name
    m["wrong_bytes"] = sum(r["wrong_bytes"] for r in runs)
    m["errors"] = sum(r["errors"] for r in runs)
    m["ok_p50"] = m["p50"] <= m["p50_without"]
    m["ok_p99"] = m["p99"] <= m["p99_without"]
    m["over_bound"] = m["p50"] / m["p50_bound"] if m["p50_bound"] else 0
    m["ok_bound"] = m["over_bound"] <= BOUND_TARGET
    m["over_shared"] = m["p50"] / m["p50_bound_shared"] if m["p50_bound_shared"] else 0
    m["runs"] = runs
    return m


def line(m):
    return (f"config={m['name']!r} seeds={len(m['runs'])} "
            f"p50_ms={m['p50']:.1f} p50_without_ms={m['p50_without']:.1f} "
            f"p50_bound_ms={m['p50_bound']:.1f} over_bound={m['over_bound']:.2f} "
            f"p50_bound_shared_ms={m['p50_bound_shared']:.1f} over_shared={m['over_shared']:.2f} "
            f"plan_p99_ms={m['plan_p99']:.1f} "
            f"p99_ms={m['p99']:.1f} p99_without_ms={m['p99_without']:.1f} "
            f"found={m['found'] / m['chunks']:.1%} used={m['used'] / m['chunks']:.1%} "
            f"split_turns={m['split_turns']:.0f}/{m['turns']:.0f} "
            f"wrong_bytes={m['wrong_bytes']} errors={m['errors']} "
            f"ok_p50={'yes' if m['ok_p50'] else 'no'} ok_p99={'yes' if m['ok_p99'] else 'no'} "
            f"ok_bound={'yes' if m['ok_bound'] else 'no'}")


def markdown(ms):
    rows = ["| config | hits found / used | TTFT p50 with / without / bound | measured/bound "
            "| bound at the rates loads got (ratio) | TTFT p99 with / without |",
            "|---|---|---|---|---|---|"]
    for m in ms:
        ok = lambda b: "met" if b else "not met"
        rows.append(
            f"| {m['name']} | {m['found'] / m['chunks']:.0%} / {m['used'] / m['chunks']:.0%} "
            f"| {m['p50']:.0f} / {m['p50_without']:.0f} / {m['p50_bound']:.0f} ms "
            f"| {m['over_bound']:.2f} ({ok(m['ok_bound'])}) "
            f"| {m['p50_bound_shared']:.0f} ms ({m['over_shared']:.2f}) "
            f"| {m['p99']:.0f} / {m['p99_without']:.0f} ms ({ok(m['ok_p99'])}) |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvbench", default="bazel-bin/tools/kvbench/kvbench")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--only", help="run only the configurations whose name contains this")
    ap.add_argument("--markdown", action="store_true", help="also print the README's table")
    ap.add_argument("extra", nargs="*", help="more kvbench arguments (after --)")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    results = []
    for name, l2 in CONFIGS:
        if a.only and a.only not in name:
            continue
        server = Redis() if l2 and "PORT" in l2 else None
        try:
            cfg = l2.replace("PORT", str(server.port)) if server else l2
            runs = [figures(run(a.kvbench, cfg, s, a.duration, a.extra)) for s in seeds]
        finally:
            if server:
                server.stop()
        m = summarize(name, runs)
        results.append(m)
        print(line(m), flush=True)
    if a.markdown:
        print(markdown(results))
    bad = [m for m in results if not (m["ok_p50"] and m["ok_p99"] and m["ok_bound"])]
    print(f"suite=sweep configs={len(results)} below_target="
          f"{','.join(m['name'] for m in bad) or 'none'}")
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
