"""peer_lmcache.py — LMCache's StorageManager beside kvact's (embedded, and a client of
kvactd): the same sequence of calls, the same L1 size and object sizes, in one run.

    python/bench/peer_lmcache.sh [--reps 5] [--iters 300] [--warmup 30]
        [--parts control,data,mock,disk,redis] [--keys 1,16,64] [--sizes-mib 2,8,32]
        [--round-mib 256] [--l2-object-mib 8] [--l2-round-mib 128] [--l1-mib 1024]
        [--mock-gbps 0,10] [--dir /var/tmp] [--torch-threads N] [--json FILE]

Three sides, open together, each measure run on each in turn, the order rotating every
rep (so a busy moment of the machine falls on all of them):
  lmcache  LMCache's StorageManager on CPU, as python/tests/lmcache_side/sides.py makes it
           (eager L1 of --l1-mib, use_lazy=False, 4 KiB aligned; LRU eviction); its log
           level WARNING (LMCACHE_LOG_LEVEL unless set: at INFO it logs every prefetch)
  kvact    kvact's, embedded (kvact's defaults; the same L1 size and L2 tier)
  kvactd   kvact's, a client of a kvactd of its own ($KVACT_KVACTD) with that L1 and tier
Every object is one bfloat16 tensor of its size (the same MemoryLayoutDesc on every side);
keys are new for each write. Each line names the kvact side (kvact=embedded|kvactd) and
gives LMCache's figure, kvact's and their ratio:

  control-write     reserve_write + finish_write of N new keys (then an untimed delete);
  control-prefetch  submit_prefetch_task, the wait and query (LMCache: wait_prefetch_status
                    + query_prefetch_status and the hit bitmap's leading ones; kvact: the
                    handle's wait()), the read_prefetched_results(keys) block (entered,
                    left; both sides' results typed by what was written),
                    finish_read_prefetched, of N keys resident in L1 — per cycle: key-ops/s
                    (N keys over the rep's time, median over reps; target: kvact >= 10x)
                    and p50/p99 us over every cycle of every rep (p99 target <= 0.1x);
  call              the same cycles call by call: p50/p99 us (where the time goes; no target);
  anchor-c          kvact embedded's same cycles through bare ctypes (key arrays built
                    beforehand), p50/p99 us: its C calls without its Python layer;
  anchor-rtt        a 36-byte frame to a Python process and back over an AF_UNIX socket
                    pair, p50/p99 us: the floor under every call a kvactd client makes;
  data-write/-read  objects of S MiB, --round-mib of them a round: reserve_write of all,
                    torch copy_ of a source tensor into each reserved object's .tensor,
                    finish_write; then prefetch, wait, a copy_ of each read result's .tensor
                    into a destination, finish_read_prefetched — GB/s (median over reps;
                    target >= 1.0x); anchor_gbs: torch copy_ of the same objects, source to
                    destination (the memory's ceiling); every byte read back is checked;
  <tier>-store      the same write of --l2-round-mib of --l2-object-mib objects, then
                    waiting until the L2 tier holds all of them (LMCache: its L2 listener
                    heard each key stored; kvact: flush()) — GB/s (target >= 1.0x);
  <tier>-prefetch   after clear() emptied L1 (checked): submit_prefetch_task + wait of the
                    round's keys, all found in L2 (checked; read back and compared, untimed).
Tiers: mock — LMCache's MockL2Adapter (max_size_gb, mock_bandwidth_gb) against kvact's mock
tier (capacity_bytes, bandwidth_bytes_per_s) at each --mock-gbps (GiB/s as LMCache counts
them; 0 = unlimited on both); disk — LMCache's fs adapter (one file per object, O_DIRECT)
against kvact's disk tier (O_DIRECT, checksummed), both in a fresh folder of --dir; redis —
LMCache's resp adapter (its C++ client, 8 workers) against kvact's redis tier on one
redis-server this script starts on loopback (emptied between reps; anchor_gbs: the best of
redis-benchmark's SET / GET with 1 and 4 clients and the same value size, on that server
after the sides: what the server itself serves on these cores). A tier that cannot be
set up is skipped with its reason. L2 capacities hold every round of the run (nothing is
evicted from L2 while measuring). The run ends with each side's memcheck, then
`suite=lmcache below_target=...` (and the parts skipped).
"""
import argparse
import ctypes
import importlib.metadata
import json
import mmap
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")  # before LMCache is imported

import torch  # noqa: E402
from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import FSL2AdapterConfig  # noqa: E402
from lmcache.v1.distributed.l2_adapters.mock_l2_adapter import MockL2AdapterConfig  # noqa: E402
from lmcache.v1.distributed.l2_adapters.resp_l2_adapter import RESPL2AdapterConfig  # noqa: E402

import kvact  # noqa: E402
from kvact._lib import Buf, Layout, lib  # noqa: E402  (the bare C anchor, as bench_calls.py)
from kvact.keys import key_array  # noqa: E402
from peer_lmcache_sides import (MIB, SetupError, redis_command, redis_server,  # noqa: E402
                                sides)

GIB = 1 << 30
KOPS_TARGET, P99_TARGET, GBS_TARGET = 10.0, 0.1, 1.0
CONTROL_OBJECT = 64 << 10   # bytes of each control-plane object
now = time.perf_counter_ns


# ---- the measures ------------------------------------------------------------------

def control_write(side, keys, layout, n, iters):
    """(reserve_write ns, finish_write ns) of each cycle."""
    out = []
    for _ in range(iters):
        ks = keys.take(n)
        t0 = now()
        got = side.reserve(ks, layout)
        t1 = now()
        side.finish_write(ks)
        t2 = now()
        if len(got) != n:
            raise SystemExit("%s: reserved %d of %d keys" % (side.name, len(got), n))
        side.delete(ks)
        out.append((t1 - t0, t2 - t1))
    return out


def control_prefetch(side, keys, layout, n, iters):
    """(submit, wait, read block, finish_read) ns of each cycle over n resident keys."""
    ks = keys.take(n)
    side.reserve(ks, layout)
    side.finish_write(ks)
    out = []
    for _ in range(iters):
        t0 = now()
        h = side.prefetch(ks, layout)
        t1 = now()
        hits = side.wait(h)
        t2 = now()
        with side.read(ks) as objs:
            found = len(objs) if objs is not None else -1
        t3 = now()
        side.finish_read(ks)
        t4 = now()
        if hits != n or found != n:
            raise SystemExit("%s: prefetch found %d, read %d of %d" % (side.name, hits, found, n))
        out.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3))
    side.delete(ks)
    return out


def write_objects(side, ks, layout, src):
    got = side.reserve(ks, layout)
    if len(got) != len(ks):
        raise SystemExit("%s: reserved %d of %d objects" % (side.name, len(got), len(ks)))
    for k, s in zip(ks, src):
        got[k].tensor.copy_(s)
    side.finish_write(ks)


def read_objects(side, ks, layout, dst):
    """Prefetches ks, copies each into dst, releases: the hits."""
    hits = side.wait(side.prefetch(ks, layout))
    read_into(side, ks[:hits], dst)
    return hits


def read_into(side, ks, dst):
    """Reads the prefetched ks, copies each into dst, releases them."""
    with side.read(ks) as objs:
        if objs is None:
            raise SystemExit("%s: a prefetched object was not readable" % side.name)
        for o, d in zip(objs, dst):
            d.copy_(o.tensor)
    side.finish_read(ks)


def stamp(src, dst, ks):
    """Makes this round's sources differ from every other round's (their first element is
    the round's first key number) and clears the destinations: a stale object is caught."""
    src.view(torch.int16)[:, 0] = ks.first & 0x7fff
    dst.zero_()


def data_round(side, keys, layout, src, dst):
    """(write ns, read ns) of one round of len(src) objects, every byte checked."""
    ks = keys.take(len(src))
    stamp(src, dst, ks)
    t0 = now()
    write_objects(side, ks, layout, src)
    t1 = now()
    hits = read_objects(side, ks, layout, dst)
    t2 = now()
    check(side, hits, ks, src, dst)
    side.delete(ks)
    return t1 - t0, t2 - t1


def l2_round(side, keys, layout, src, dst):
    """(store ns, prefetch-from-L2 ns) of one round: written, settled in L2, L1 cleared,
    prefetched back (then read and checked, untimed)."""
    ks = keys.take(len(src))
    stamp(src, dst, ks)
    t0 = now()
    write_objects(side, ks, layout, src)
    side.settle(ks)
    t1 = now()
    side.quiesce()
    side.clear()
    if side.l1_used():
        raise SystemExit("%s: L1 holds %d bytes after clear()" % (side.name, side.l1_used()))
    t2 = now()
    hits = side.wait(side.prefetch(ks, layout))
    t3 = now()
    if hits != len(ks):
        raise SystemExit("%s: %d of %d objects found in L2" % (side.name, hits, len(ks)))
    read_into(side, ks, dst)
    check(side, hits, ks, src, dst)
    side.delete(ks)
    return t1 - t0, t3 - t2


def check(side, hits, ks, src, dst):
    if hits != len(ks):
        raise SystemExit("%s: %d of %d objects found" % (side.name, hits, len(ks)))
    if not torch.equal(src.view(torch.int16), dst.view(torch.int16)):
        raise SystemExit("%s: an object read back differs from what was written" % side.name)


def anchor_round(src, dst):
    t0 = now()
    for s, d in zip(src, dst):
        d.copy_(s)
    return now() - t0


# ---- running and reporting ---------------------------------------------------------

def rotate(items, rep):
    k = rep % len(items)
    return items[k:] + items[:k]


def buffers(nobjects, nbytes):
    """Source (random bits) and destination: nobjects bfloat16 rows of nbytes each."""
    g = torch.Generator().manual_seed(7)
    src = torch.randint(-32768, 32767, (nobjects, nbytes // 2), dtype=torch.int16, generator=g)
    return src.view(torch.bfloat16), torch.zeros(nobjects, nbytes // 2, dtype=torch.bfloat16)


def run_control(args, made, rows, raw):
    embedded = next(s for s in made if s.name == "kvact")
    for n in args.keys:
        for kind, fn, calls in (("write", control_write, ("reserve_write", "finish_write")),
                                ("prefetch", control_prefetch, ("submit_prefetch_task",
                                                                "wait", "read_block",
                                                                "finish_read_prefetched"))):
            got = {s.name: [] for s in made}
            bare = []
            for rep in range(args.reps):
                for side in rotate(made, rep):
                    layout = side.layout(CONTROL_OBJECT)
                    fn(side, side.keys, layout, n, args.warmup)
                    got[side.name].append(fn(side, side.keys, layout, n, args.iters))
                bare += BARE[kind](embedded, embedded.layout(CONTROL_OBJECT), n, args.iters)
            raw["control-%s-%d" % (kind, n)] = dict(got, bare_c=bare)
            rows += control_rows(kind, n, calls, got)
            rows.append(row("anchor-c", "embedded", cycle=kind, keys=n, p50_us=pct(bare, 50),
                            p99_us=pct(bare, 99), target="none"))


def bare_write(side, layout, n, iters):
    """The write cycle's two C calls through bare ctypes, key arrays built beforehand:
    what kvact's control plane costs without its Python layer (us per cycle)."""
    s, c_layout, out = side.sm._ptr, layout._c, []
    bufs, status = (Buf * n)(), (ctypes.c_int * n)()
    for _ in range(iters):
        ks = side.keys.take(n)
        arr = key_array(ks)
        t0 = now()
        lib.kva_reserve_write(s, arr, n, c_layout, 0, bufs, status)
        lib.kva_finish_write(s, arr, n, status)
        out.append((now() - t0) / 1e3)
        side.delete(ks)
    return out


def bare_prefetch(side, layout, n, iters):
    """The prefetch cycle's four C calls (submit, wait, the read that also gives each
    object's layout, finish) through bare ctypes."""
    ks = side.keys.take(n)
    side.reserve(ks, layout)
    side.finish_write(ks)
    s, arr, c_layout, out = side.sm._ptr, key_array(ks), layout._c, []
    h, hits, bufs, layouts = ctypes.c_void_p(), ctypes.c_size_t(), (Buf * n)(), (Layout * n)()
    for _ in range(iters):
        t0 = now()
        lib.kva_submit_prefetch(s, arr, n, c_layout, 0, ctypes.byref(h))
        lib.kva_wait_prefetch(s, h, -1, ctypes.byref(hits))
        lib.kva_read_prefetched_layouts(s, arr, n, bufs, layouts)
        lib.kva_finish_read_prefetched(s, arr, n, 0)
        out.append((now() - t0) / 1e3)
        if hits.value != n:
            raise SystemExit("kvact: a bare prefetch found %d of %d" % (hits.value, n))
    side.delete(ks)
    return out


BARE = {"write": bare_write, "prefetch": bare_prefetch}


ECHO = """import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    b = s.recv(64)
    if not b:
        break
    s.sendall(b)
"""


def run_rtt_anchor(args, rows, raw):
    """The floor of a call to another process from Python: a 36-byte frame to a Python
    process at the other end of an AF_UNIX socket pair and back (every kvactd call is at
    least one such round trip), as many times as a control block."""
    a, b = socket.socketpair()
    echo = subprocess.Popen([sys.executable, "-c", ECHO, str(b.fileno())], pass_fds=[b.fileno()])
    b.close()
    frame, out = bytes(36), []
    try:
        for i in range(args.reps * args.iters + args.warmup):
            t0 = now()
            a.sendall(frame)
            a.recv(64)
            if i >= args.warmup:
                out.append((now() - t0) / 1e3)
    finally:
        a.close()
        echo.wait(timeout=60)
    raw["anchor-rtt"] = out
    rows.append(row("anchor-rtt", "kvactd", p50_us=pct(out, 50), p99_us=pct(out, 99),
                    target="none"))


def cycle_figures(reps, n):
    cycles = [sum(c) / 1e3 for rep in reps for c in rep]
    kops = statistics.median(n * len(rep) / (sum(map(sum, rep)) / 1e9) / 1e3 for rep in reps)
    return kops, pct(cycles, 50), pct(cycles, 99)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def control_rows(kind, n, calls, got):
    rows = []
    lk, lp50, lp99 = cycle_figures(got["lmcache"], n)
    for name, label in (("kvact", "embedded"), ("kvactd", "kvactd")):
        k, p50, p99 = cycle_figures(got[name], n)
        rows.append(row("control-" + kind, label, keys=n, lmcache_kops=lk, kvact_kops=k,
                        ratio=k / lk, target=">=%g" % KOPS_TARGET,
                        ok=k / lk >= KOPS_TARGET, lmcache_p50_us=lp50, kvact_p50_us=p50,
                        lmcache_p99_us=lp99, kvact_p99_us=p99, p99_ratio=p99 / lp99,
                        p99_target="<=%g" % P99_TARGET, p99_ok=p99 / lp99 <= P99_TARGET))
    for i, call in enumerate(calls):
        lc = [c[i] / 1e3 for rep in got["lmcache"] for c in rep]
        for name, label in (("kvact", "embedded"), ("kvactd", "kvactd")):
            kc = [c[i] / 1e3 for rep in got[name] for c in rep]
            rows.append(row("call", label, call=call, keys=n, lmcache_p50_us=pct(lc, 50),
                            kvact_p50_us=pct(kc, 50), lmcache_p99_us=pct(lc, 99),
                            kvact_p99_us=pct(kc, 99), p99_ratio=pct(kc, 99) / pct(lc, 99),
                            target="none"))
    return rows


def run_data(args, made, rows, raw):
    for mib in args.sizes_mib:
        nbytes, count = mib * MIB, max(1, args.round_mib // mib)
        src, dst = buffers(count, nbytes)
        got = {s.name: [] for s in made}
        anchor = []
        for rep in range(args.reps + 1):  # the first warms every side up
            for side in rotate(made, rep):
                t = data_round(side, side.keys, side.layout(nbytes), src, dst)
                if rep:
                    got[side.name].append(t)
            if rep:
                anchor.append(anchor_round(src, dst))
        raw["data-%d" % mib] = {"sides": got, "anchor": anchor}
        total = count * nbytes
        anchor_gbs = statistics.median(total / t for t in anchor)
        for i, op in enumerate(("write", "read")):
            rows += gbs_rows("data-" + op, got, i, total, mib=mib, anchor_gbs=anchor_gbs)
        del src, dst


def gbs_rows(measure, got, i, total, **fields):
    """One row per kvact side: GB/s of field i of each rep's times (median over reps)."""
    def gbs(name):
        return statistics.median(total / t[i] for t in got[name])
    lg, rows = gbs("lmcache"), []
    for name, label in (("kvact", "embedded"), ("kvactd", "kvactd")):
        g = gbs(name)
        rows.append(row(measure, label, **fields, lmcache_gbs=lg, kvact_gbs=g, ratio=g / lg,
                        target=">=%g" % GBS_TARGET, ok=g / lg >= GBS_TARGET))
    return rows


def run_l2(args, made, rows, raw, tier, between=None, anchor=None, **fields):
    """<tier>-store and <tier>-prefetch rows; anchor(nbytes, count), when given, measures
    a reference point of the tier itself after the sides ({"store": GB/s, "prefetch":
    GB/s}, printed as anchor_gbs)."""
    nbytes = args.l2_object_mib * MIB
    count = max(1, args.l2_round_mib // args.l2_object_mib)
    src, dst = buffers(count, nbytes)
    got = {s.name: [] for s in made}
    for rep in range(args.reps + 1):  # the first warms every side up
        for side in rotate(made, rep):
            if between:
                between()
            t = l2_round(side, side.keys, side.layout(nbytes), src, dst)
            if rep:
                got[side.name].append(t)
    raw["-".join([tier] + [str(v) for v in fields.values()])] = got
    ceiling = anchor(nbytes, count) if anchor else {}
    for i, op in enumerate(("store", "prefetch")):
        extra = dict(fields, anchor_gbs=ceiling[op]) if op in ceiling else fields
        rows += gbs_rows("%s-%s" % (tier, op), got, i, count * nbytes, mib=args.l2_object_mib,
                         **extra)


def l2_bytes(args):
    """What an L2 tier must hold: every round of the run, warm-up included, plus slack."""
    count = max(1, args.l2_round_mib // args.l2_object_mib)
    return (args.reps + 1) * count * (args.l2_object_mib * MIB + 8192) + 64 * MIB


def row(measure, kvact_side, **fields):
    out = {"measure": measure, "kvact": kvact_side}
    out.update({k: ("yes" if v else "no") if isinstance(v, bool) else v
                for k, v in fields.items()})
    return out


def fmt(v):
    if isinstance(v, float):
        return "%.0f" % v if abs(v) >= 1000 else "%.4g" % v
    return str(v)


def line(r):
    return " ".join("%s=%s" % (k, fmt(v)) for k, v in r.items())


def below(r):
    name = "-".join(str(r[k]) for k in ("measure", "keys", "mib", "gbps", "kvact") if k in r)
    out = [name] if r.get("ok") == "no" else []
    return out + ([name + "-p99"] if r.get("p99_ok") == "no" else [])


# ---- the parts ---------------------------------------------------------------------

def part_control_data(args, rows, raw, skipped):
    with sides(args, None) as made:
        if "control" in args.parts:
            run_control(args, made, rows, raw)
            run_rtt_anchor(args, rows, raw)
        if "data" in args.parts:
            run_data(args, made, rows, raw)


def part_mock(args, rows, raw, skipped):
    cap = l2_bytes(args)
    for gbps in args.mock_gbps:
        lm = MockL2AdapterConfig(max_size_gb=cap / GIB, mock_bandwidth_gb=gbps)  # 0: no delay
        kv = {"type": "mock", "capacity_bytes": cap, "bandwidth_bytes_per_s": int(gbps * GIB)}
        with sides(args, lm, lambda name: kv) as made:
            run_l2(args, made, rows, raw, "mock", gbps="%g" % gbps if gbps else "unlimited")


def part_disk(args, rows, raw, skipped):
    d = tempfile.mkdtemp(prefix="peer-lmcache-", dir=args.dir)
    try:
        why = o_direct_refused(d)
        if why:  # LMCache's fs adapter would fail every store (kvact's falls back)
            skipped.append(("disk", "no O_DIRECT in %s (%s)" % (args.dir, why)))
            return
        lm = FSL2AdapterConfig(base_path=os.path.join(d, "lmcache"), use_odirect=True)

        def kv(name):  # a file each: a disk tier is opened by one runtime at a time
            return {"type": "disk", "path": os.path.join(d, name + ".bin"),
                    "capacity_bytes": l2_bytes(args)}
        with sides(args, lm, kv) as made:
            run_l2(args, made, rows, raw, "disk")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def o_direct_refused(folder):
    """Why a 4 KiB O_DIRECT write in folder fails ("" when it works)."""
    path = os.path.join(folder, "o_direct_probe")
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        try:
            with mmap.mmap(-1, 4096) as block:  # page-aligned
                os.write(fd, block)
        finally:
            os.close(fd)
        return ""
    except OSError as e:
        return e.strerror
    finally:
        if os.path.exists(path):
            os.unlink(path)


def part_redis(args, rows, raw, skipped):
    server = shutil.which("redis-server")
    if not server:
        skipped.append(("redis", "no redis-server on PATH"))
        return
    with redis_server(server) as port:
        lm = RESPL2AdapterConfig(host="127.0.0.1", port=port)
        kv = {"type": "redis", "addrs": ["127.0.0.1:%d" % port]}
        with sides(args, lm, lambda name: dict(kv, namespace=name)) as made:
            run_l2(args, made, rows, raw, "redis", between=lambda: redis_command(port, "FLUSHALL"),
                   anchor=lambda nbytes, count: redis_benchmark(port, nbytes, count, args.reps))


def redis_benchmark(port, nbytes, count, reps):
    """redis-benchmark's best SET and GET points on the same server with values of nbytes
    (1 and 4 clients, count * reps requests each): {"store": GB/s, "prefetch": GB/s}, or
    {} without redis-benchmark."""
    tool = shutil.which("redis-benchmark")
    if not tool:
        return {}
    best = {"store": 0.0, "prefetch": 0.0}
    for clients in (1, 4):
        redis_command(port, "FLUSHALL")
        out = subprocess.run([tool, "-p", str(port), "-t", "set,get", "-d", str(nbytes),
                              "-n", str(count * reps), "-c", str(clients), "--csv"],
                             capture_output=True, text=True, timeout=600).stdout
        for ln in out.splitlines():
            test, rps = (ln.split(",") + ["", ""])[:2]
            op = {'"SET"': "store", '"GET"': "prefetch"}.get(test)
            if op:
                best[op] = max(best[op], float(rps.strip('"')) * nbytes / 1e9)
    return best


PARTS = {"control": part_control_data, "data": part_control_data, "mock": part_mock,
         "disk": part_disk, "redis": part_redis}


def versions(args):
    out = {"lmcache": importlib.metadata.version("lmcache"), "torch": torch.__version__,
           "kvact": kvact.__version__, "python": platform.python_version(),
           "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "l1_mib": args.l1_mib, "reps": args.reps,
           "iters": args.iters, "control_object_kib": CONTROL_OBJECT >> 10,
           "load": load()}
    server = shutil.which("redis-server")
    if server and "redis" in args.parts:
        v = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
        out["redis"] = next((w[2:] for w in v.split() if w.startswith("v=")), "?")
    return out


def load():
    return ",".join("%.2f" % x for x in os.getloadavg())


def run(args):
    print(line(versions(args)), flush=True)
    rows, raw, skipped = [], {}, []
    done = set()
    for part in args.parts:
        fn = PARTS[part]
        if fn in done:
            continue
        done.add(fn)
        first = len(rows)
        try:
            fn(args, rows, raw, skipped)
        except SetupError as e:
            skipped.append((part, str(e)))
        for r in rows[first:]:
            print(line(r), flush=True)
    print("# load average at the end: %s" % load(), flush=True)
    for part, why in skipped:
        print("# skipped part=%s: %s" % (part, why), flush=True)
    below_list = [b for r in rows for b in below(r)]
    print("suite=lmcache below_target=%s skipped=%s" % (
        ",".join(below_list) or "none", ",".join(p for p, _ in skipped) or "none"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "raw_ns": raw,
                       "skipped": skipped}, f, indent=1, default=str)


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--iters", type=int, default=300, help="timed cycles per rep and side")
    p.add_argument("--warmup", type=int, default=30, help="untimed cycles before each block")
    p.add_argument("--parts", default="control,data,mock,disk,redis")
    p.add_argument("--keys", type=int_list, default=[1, 16, 64])
    p.add_argument("--sizes-mib", type=int_list, default=[2, 8, 32])
    p.add_argument("--round-mib", type=int, default=256, help="MiB written per data round")
    p.add_argument("--l2-object-mib", type=int, default=8)
    p.add_argument("--l2-round-mib", type=int, default=128)
    p.add_argument("--l1-mib", type=int, default=1024)
    p.add_argument("--mock-gbps", type=lambda t: [float(x) for x in t.split(",") if x],
                   default=[0.0, 10.0], help="mock bandwidths, GiB/s; 0 = unlimited")
    p.add_argument("--dir", default="/var/tmp", help="where the disk tiers go")
    p.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1,
                   help="torch's threads (the copies on every side, and LMCache's mock "
                   "adapter's); default: one per CPU")
    p.add_argument("--json")
    args = p.parse_args(argv)
    args.parts = [x for x in args.parts.split(",") if x]
    for x in args.parts:
        if x not in PARTS:
            p.error("unknown part %r (one of %s)" % (x, ", ".join(PARTS)))
    if min([args.reps, args.iters, args.round_mib, args.l2_object_mib, args.l2_round_mib,
            args.l1_mib, args.torch_threads] + args.keys + args.sizes_mib) < 1 or args.warmup < 0:
        p.error("sizes, counts and reps must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    run(args)


if __name__ == "__main__":
    sys.exit(main())
