"""bench_sglang.py — kvact as SGLang's HiCache storage backend, beside SGLang's own file
backend and a plain copy, with SGLang 0.5.23's own host pool on CPU, in one run.

    python/bench/bench_sglang.sh [--pages 64] [--reps 5] [--layouts page_first,...]
                                 [--file-dir /dev/shm/...] [--json FILE]

A llama3-8b-sized page: 32 layers, 8 KV heads of 128, bf16, 64 tokens a page: 8 MiB of
K and V per page and TP rank. One real MHATokenToKVPoolHost per layout holds 2 * pages
pages (sources and destinations, filled with random bytes). Each rep stores `pages` new
pages (fresh page hashes) and gets them back into the other half of the pool, the way
SGLang's cache controller calls each backend:

- kvact, zero copy ("interface_v1": 1): batch_set_v1 / batch_get_v1 with the pages' host
  indices; kvact copies each page view straight to and from its L1 pool. Embedded, L1
  2 GiB, no L2 tier. Then batch_exists of the 64 keys (us per call).
- HiCacheFile, SGLang's own file backend, at its best: its directory on tmpfs
  (/dev/shm: no disk under it), through the generic path the controller takes for it
  (get_data_page flat copies then batch_set; batch_get into dummy flat pages then
  set_from_flat_data_page). Its batch_exists likewise.
- anchor: torch's copy of the same pages from the source to the destination half of
  the pool (each page view once): the memory-speed ceiling of any copy in and out.

GB/s = pages * 8 MiB / median seconds over reps (the store and the get apart); the
pages are checked bit for bit after every get (a wrong byte stops the run).
- Mooncake (with --mooncake HOST:PORT, which bench_sglang.sh gives when the mooncake
  environment is there): SGLang's own MooncakeStore, zero copy too (batch_set_v1 /
  batch_get_v1 of each page's K and V), over TCP on one host, so its store is this
  process's memory (Mooncake copies with memcpy then). Not for layer_first, which
  MooncakeStore refuses.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import torch

LAYERS, HEADS, HEAD_DIM, PAGE = 32, 8, 128, 64
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")


def host_pool(layout, pages):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    tokens = 2 * pages * PAGE
    dev = MHATokenToKVPool(size=PAGE, page_size=PAGE, dtype=torch.bfloat16, head_num=HEADS,
                           head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                           enable_memory_saver=False)
    host = MHATokenToKVPoolHost(dev._mha_buffer_info(), 1.0, 0, PAGE, layout, pin_memory=False,
                                device="cpu", device_capacity_tokens=PAGE, start_layer=0,
                                end_layer=LAYERS, host_token_capacity=tokens)
    g = torch.Generator().manual_seed(7)
    flat = host.kv_buffer.view(-1).view(torch.int16)
    flat.copy_(torch.randint(-32768, 32767, flat.shape, dtype=torch.int16, generator=g))
    return host


def storage_config(extra):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    return HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                                is_page_first_layout=False, model_name="llama3-8b",
                                extra_config=extra)


def make_kvact(host):
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    extra = {"backend_name": "kvact", "module_path": "kvact.integrations.sglang",
             "class_name": "KvactHiCacheStorage", "interface_v1": 1,
             "kvact.config": {"l1.size_bytes": 2 << 30, "l2": []}}
    b = StorageBackendFactory.create_backend("dynamic", storage_config(extra), host)
    b.register_mem_pool_host(host)
    return b


def make_mooncake(host, master, pages, reps):
    """SGLang's own MooncakeStore against the mooncake_master at master (bench_sglang.sh
    starts one in a network namespace of its own), TCP on one host: its store is this
    process's memory, sized for every page of the run (its objects cannot be evicted
    within their lease)."""
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
    extra = {"master_server_address": master, "metadata_server": "P2PHANDSHAKE",
             "protocol": "tcp", "device_name": "", "local_hostname": "127.0.0.1",
             "global_segment_size": (reps + 2) * pages * page_bytes(), "check_server": False}
    b = MooncakeStore(storage_config(extra), host)
    b.register_mem_pool_host(host)
    return b


def page_bytes():
    return 2 * LAYERS * PAGE * HEADS * HEAD_DIM * 2


def make_file(host, directory):
    from sglang.srt.mem_cache.hicache_storage import HiCacheFile
    b = HiCacheFile(storage_config({"file_storage_path": directory}))
    b.register_mem_pool_host(host)
    return b


def indices(first_page, pages):
    return torch.arange(first_page * PAGE, (first_page + pages) * PAGE, dtype=torch.int64)


def same(host, pages):
    """Every destination page equals its source, bit for bit (as int16: random bits hold
    NaNs, which are never equal as bf16)."""
    return all(torch.equal(host.get_data_page(i * PAGE, flat=False).view(torch.int16),
                           host.get_data_page((pages + i) * PAGE, flat=False).view(torch.int16))
               for i in range(pages))


def clear_dst(host, pages):
    for i in range(pages):
        host.get_data_page((pages + i) * PAGE, flat=False).zero_()


def v1_round(b, host, pages):
    keys = [uuid.uuid4().hex * 2 for _ in range(pages)]
    t0 = time.perf_counter()
    ok = b.batch_set_v1(keys, indices(0, pages))
    t1 = time.perf_counter()
    got = b.batch_get_v1(keys, indices(pages, pages))
    t2 = time.perf_counter()
    n = 200
    t3 = time.perf_counter()
    for _ in range(n):
        hit = b.batch_exists(keys)
    t4 = time.perf_counter()
    assert all(ok) and all(got) and hit == pages, (ok, got, hit)
    return t1 - t0, t2 - t1, (t4 - t3) / n


def file_round(b, host, pages):
    keys = [uuid.uuid4().hex * 2 for _ in range(pages)]
    t0 = time.perf_counter()  # the controller's _generic_page_set
    data = [host.get_data_page(i * PAGE) for i in range(pages)]
    ok = b.batch_set(keys, data)
    t1 = time.perf_counter()  # the controller's _generic_page_get
    dummies = [host.get_dummy_flat_data_page() for _ in keys]
    got = b.batch_get(keys, dummies)
    for i, page in enumerate(got):
        host.set_from_flat_data_page((pages + i) * PAGE, page)
    t2 = time.perf_counter()
    n = 20
    t3 = time.perf_counter()
    for _ in range(n):
        hit = b.batch_exists(keys)
    t4 = time.perf_counter()
    assert ok and all(p is not None for p in got) and hit == pages
    return t1 - t0, t2 - t1, (t4 - t3) / n


def anchor_round(host, pages):
    t0 = time.perf_counter()
    for i in range(pages):
        host.get_data_page((pages + i) * PAGE, flat=False).copy_(
            host.get_data_page(i * PAGE, flat=False))
    t1 = time.perf_counter()
    return t1 - t0, t1 - t0, 0.0


def run(args):
    rows = []
    for layout in args.layouts:
        host = host_pool(layout, args.pages)
        kv = make_kvact(host)
        fdir = tempfile.mkdtemp(prefix="hicache-", dir=args.file_dir)
        fb = make_file(host, fdir)
        mc = None
        if args.mooncake and layout != "layer_first":  # MooncakeStore refuses layer_first
            mc = make_mooncake(host, args.mooncake, args.pages, args.reps)
        runs = [("kvact v1", lambda: v1_round(kv, host, args.pages), kv.clear),
                ("HiCacheFile", lambda: file_round(fb, host, args.pages), fb.clear),
                ("copy anchor", lambda: anchor_round(host, args.pages), None)]
        if mc is not None:
            runs.insert(2, ("Mooncake v1", lambda: v1_round(mc, host, args.pages), None))
        try:
            for name, fn, reset in runs:
                times = []
                for rep in range(args.reps + 1):  # the first warms up
                    clear_dst(host, args.pages)
                    t = fn()
                    if not same(host, args.pages):
                        sys.exit("%s %s: a page read back differs" % (name, layout))
                    if reset:
                        reset()
                    if rep:
                        times.append(t)
                set_s = statistics.median(t[0] for t in times)
                get_s = statistics.median(t[1] for t in times)
                ex_s = statistics.median(t[2] for t in times)
                rows.append({"layout": layout, "backend": name,
                             "set_GBps": args.pages * page_bytes() / set_s / 1e9,
                             "get_GBps": args.pages * page_bytes() / get_s / 1e9,
                             "exists_us": ex_s * 1e6})
        finally:
            kv.close()
            if mc is not None:
                mc.close()
            shutil.rmtree(fdir, ignore_errors=True)
        del host
    print("%d pages of %.0f MiB (llama3-8b: %d layers, %d KV heads of %d, bf16, %d tokens), "
          "median of %d reps" % (args.pages, page_bytes() / 2**20, LAYERS, HEADS, HEAD_DIM, PAGE,
                                 args.reps))
    print("%-18s %-12s %9s %9s %14s" % ("layout", "backend", "set GB/s", "get GB/s",
                                        "exists us/64"))
    for r in rows:
        print("%-18s %-12s %9.2f %9.2f %14s" % (
            r["layout"], r["backend"], r["set_GBps"], r["get_GBps"],
            "%.1f" % r["exists_us"] if r["exists_us"] else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pages", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--file-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    p.add_argument("--mooncake", default=os.environ.get("MOONCAKE_MASTER"),
                   help="host:port of a mooncake_master: adds SGLang's MooncakeStore")
    p.add_argument("--json")
    args = p.parse_args()
    args.layouts = [x for x in args.layouts.split(",") if x]
    for x in args.layouts:
        if x not in LAYOUTS:
            p.error("unknown layout %r (one of %s)" % (x, ", ".join(LAYOUTS)))
    if args.pages < 1 or args.reps < 1:
        p.error("--pages and --reps must be positive")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    run(args)


if __name__ == "__main__":
    main()
