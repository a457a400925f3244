"""gpu_paged_check.py — PagedKVCache over torch CUDA tensors, run by tools/gpu_check.sh on a
GPU machine (issue 33): for the "flash" format and for vLLM 0.33's page layouts, store -> load
into a fresh CUDA cache, compared bit for bit with the source; prints one line per case and
exits non-zero on a mismatch. Needs KVACT_LIB (libkvact.so) and KVACT_CUDA_LIB."""
import os
import sys
import time

import torch

import kvact

DEV = os.environ.get("KVACT_CHECK_DEVICE", "cuda")  # "cpu": the same trips on the host device
LAYERS, BLOCKS, HEADS, BLOCK, HEAD, CT = 8, 256, 8, 16, 128, 256


def page_views(layout, dtype):
    """(raw int8 buffer, per-layer [B, H, N, 2*HEAD] views) as vLLM 0.33 allocates them."""
    es = torch.empty(0, dtype=dtype).element_size()
    sizes = {"L": LAYERS, "B": BLOCKS, "H": HEADS, "N": BLOCK, "C": 2 * HEAD * es}
    strides, run = {}, 1
    for dim in reversed(layout):
        strides[dim] = run
        run *= sizes[dim]
    raw = torch.zeros(run, dtype=torch.int8, device=DEV)
    v5 = torch.as_strided(raw, [sizes[d] for d in "LBHNC"], [strides[d] for d in "LBHNC"])
    return raw, [v5[l].view(dtype) for l in range(LAYERS)]


def flash_views(dtype):
    layers = [torch.zeros(2, BLOCKS, BLOCK, HEADS, HEAD, dtype=dtype, device=DEV)
              for _ in range(LAYERS)]
    return layers, layers


def fill(raws, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    for r in raws if isinstance(raws, list) else [raws]:
        r.view(torch.int8).copy_(torch.randint(-128, 128, r.view(torch.int8).shape, generator=g,
                                               device=DEV, dtype=torch.int8))


def trip(sm, name, make, fmt, dtype, seed):
    src_raw, src = make(dtype)
    dst_raw, dst = make(dtype)
    fill(src_raw, seed)
    nchunks = 4
    ntok = nchunks * CT - 7
    perm_a = torch.randperm(BLOCKS)[:ntok // BLOCK + 1]
    perm_b = torch.randperm(BLOCKS)[:ntok // BLOCK + 1]
    t = torch.arange(ntok)
    slots_a = perm_a[t // BLOCK] * BLOCK + t % BLOCK
    slots_b = perm_b[t // BLOCK] * BLOCK + t % BLOCK
    keys = kvact.chunk_keys("gpu-check", list(range(nchunks * CT)), CT, salt="%s-%s" % (name, dtype))
    kw = {"chunk_tokens": CT} if fmt == "pages" else {}
    t0 = time.perf_counter()
    with kvact.PagedKVCache(sm, src, fmt=fmt, **kw) as ks, \
            kvact.PagedKVCache(sm, dst, fmt=fmt, **kw) as kd:
        assert ks.store(keys, slots_a).wait(10.0) == 0, "store"
        assert sm.submit_prefetch_task(keys, kd.chunk_layout()).wait(10.0) == nchunks
        op = kd.load(keys, slots_b)  # takes over the prefetch's read locks
        assert op.wait(10.0) == 0, "load"
    if DEV == "cuda":
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    ok = True
    for l in range(LAYERS):
        s, d = src[l], dst[l]
        if fmt == "pages":  # whole pages move: block perm_a[i] -> perm_b[i]
            ok &= torch.equal(d[perm_b].view(torch.int8), s[perm_a].view(torch.int8))
        else:  # tokens move: slot a -> slot b, K and V
            sf = s.view(2, BLOCKS * BLOCK, HEADS, HEAD).view(torch.int16)
            df = d.view(2, BLOCKS * BLOCK, HEADS, HEAD).view(torch.int16)
            ok &= torch.equal(df[:, slots_b], sf[:, slots_a])
    print("%-8s %-9s %s: %s (%.1f ms, store+prefetch+load)" %
          (fmt, name, dtype, "bit-exact" if ok else "MISMATCH", ms))
    return ok


def main():
    print(torch.cuda.get_device_name(0) if DEV == "cuda" else "host", "torch", torch.__version__)
    cfg = kvact.Config({"l1.size_bytes": 2 << 30, "l1.pinned": DEV == "cuda", "l1.hugepages": False,
                        "l2": []})
    ok = True
    with kvact.Runtime(cfg) as rt:
        sm = rt.storage
        for dtype in (torch.bfloat16, torch.float16):
            ok &= trip(sm, "5-D", flash_views, "flash", dtype, 1)
            for layout in ("LBHNC", "LBNHC", "BLHNC", "BLNHC"):
                ok &= trip(sm, layout, lambda dt, lo=layout: page_views(lo, dt), "pages", dtype, 2)
        ok &= sm.memcheck(wait_stores=5.0)
    print("paged cuda check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
