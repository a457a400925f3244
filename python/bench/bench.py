"""bench.py — kvact's Python benchmark, each figure against its anchor measured in the same run.

    /usr/bin/python3 python/bench/bench.py [--iters N] [--reps R] [--json FILE]
                                          [--layers L] [--tokens T] [--blocks B]

Reps alternate the two measures and report medians over the reps:
  measure=call-overhead        a 64-key call from Python against the same call
                               from C (bench_calls.py; target: at most 10 us added)
  measure=call-overhead-parts  where the added time goes: key_array() builds,
                               the bare ctypes calls, the rest of the wrapper;
                               c_gap_us: the C call after a 20 us pause (the
                               worker's wake-up, which any gap between calls costs)
  measure=paged-store / -load  PagedKVCache.store/load against torch moving the
                               same bytes (bench_paged.py; target: >= 0.9 of the
                               best torch way)
The C anchor is $KVACT_CALL_ANCHOR, else bazel-bin/python/call_anchor
(`bazel build -c opt //:libkvact.so //python:call_anchor`).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bench_calls  # noqa: E402  (after the package's folder is on the path)
import bench_paged  # noqa: E402

CALL_TARGET_US, PAGED_TARGET = 10.0, 0.9


def median_of(reps, field):
    return statistics.median(r[field] for r in reps)


def call_lines(reps):
    """One call-overhead and one call-overhead-parts row per call (medians over reps)."""
    rows = []
    for call in reps[0]:
        rs = [r[call] for r in reps]
        py, c, raw, gap = (median_of(rs, f) for f in ("python_us", "c_us", "ctypes_us",
                                                      "c_gap_us"))
        added = statistics.median(r["python_us"] - r["c_us"] for r in rs)
        keys = median_of(rs, "key_array_us")
        rows.append({"measure": "call-overhead", "call": call, "python_us": py, "c_us": c,
                     "added_us": added, "target": "<=%g" % CALL_TARGET_US,
                     "ok": _yes(added <= CALL_TARGET_US)})
        rows.append({"measure": "call-overhead-parts", "call": call, "key_array_us": keys,
                     "ctypes_us": raw - c, "wrapper_us": py - raw - keys, "c_gap_us": gap})
    return rows


def paged_lines(reps, nbytes):
    """paged-store and paged-load rows: GB/s against the best torch anchor (medians)."""
    gbs = {f: statistics.median(nbytes / r[f] / 1e9 for r in reps) for f in reps[0]}
    rows = []
    for op, index in (("store", "torch_gather_s"), ("load", "torch_scatter_s")):
        anchors = {"torch-copy_": gbs["torch_copy_s"], "torch-index": gbs[index]}
        best = max(anchors, key=anchors.get)
        ratio = gbs[op + "_s"] / anchors[best]
        rows.append({"measure": "paged-" + op, "gbs": gbs[op + "_s"], "anchor": best,
                     "anchor_gbs": anchors[best], "ratio": ratio,
                     "target": ">=%g" % PAGED_TARGET, "ok": _yes(ratio >= PAGED_TARGET),
                     "torch_copy_gbs": anchors["torch-copy_"],
                     "torch_index_gbs": anchors["torch-index"], "bytes": nbytes})
    return rows


def _yes(flag):
    return "yes" if flag else "no"


def line(row):
    return " ".join("%s=%s" % (k, "%.3f" % v if isinstance(v, float) else v)
                    for k, v in row.items())


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=2000, help="calls timed per call and rep")
    p.add_argument("--reps", type=int, default=5, help="reps of both measures, alternating")
    p.add_argument("--json", help="also write the rows and every rep's figures here")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--tokens", type=int, default=4096, help="tokens of the paged request")
    p.add_argument("--blocks", type=int, default=0,
                   help="blocks of each paged layer (default: the request's + 25%%)")
    args = p.parse_args(argv)
    if args.iters < 1 or args.reps < 1 or args.layers < 1 or args.tokens < 1:
        p.error("--iters, --reps, --layers and --tokens must be positive")
    args.blocks = args.blocks or (args.tokens // bench_paged.BLOCK + 1) * 5 // 4
    return args


def main(argv=None):
    args = parse_args(argv)
    setup = bench_paged.Setup(args.layers, args.tokens, args.blocks)
    calls, paged = [], []
    for _ in range(args.reps):
        calls.append(bench_calls.rep(args.iters))
        paged.append(bench_paged.rep(setup))
    rows = call_lines(calls) + paged_lines(paged, setup.nbytes)
    for row in rows:
        print(line(row), flush=True)
    # as every kvbench suite ends: the measures below their target
    below = [r["measure"] + ("-" + r["call"] if "call" in r else "") for r in rows
             if r.get("ok") == "no"]
    print("suite=python below_target=%s" % (",".join(below) or "none"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "calls": calls, "paged": paged}, f,
                      indent=1)


if __name__ == "__main__":
    main()
