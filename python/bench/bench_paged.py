"""bench_paged.py — PagedKVCache.store/load bandwidth against torch moving the same bytes.

CPU paged caches: layers x [2, blocks, 16, 8, 128] bfloat16 ("flash"),
a request of `tokens` tokens in a shuffled block table (its slot mapping),
chunks of 256 tokens. store = PagedKVCache.store (gather into L1 chunk
objects) + wait, the keys deleted before each rep; load = prefetch + wait
+ PagedKVCache.load (scatter back) + wait. The anchors move the same
bytes with torch: index_select into / index_copy_ out of a contiguous
buffer, layer by layer (the same gather and scatter), and one copy_ of a
contiguous buffer of the request's size (the upper bound of moving those
bytes at all).
"""
import time

import torch

import kvact

BLOCK, HEADS, HEAD_DIM, CHUNK_TOKENS = 16, 8, 128, 256
MODEL = "bench-paged"


def request_bytes(layers, tokens):
    return layers * 2 * tokens * HEADS * HEAD_DIM * 2  # K and V, bfloat16


def settings(layers, tokens):
    """L1 room for the request's chunks twice over; no L2."""
    return {"l1.size_bytes": 2 * request_bytes(layers, tokens) + (64 << 20),
            "l1.hugepages": False, "l1.pinned": False, "runtime.workers": 2, "l2": []}


def slot_mapping(blocks, tokens, gen):
    """Slots of a request whose blocks are a shuffled choice of the cache's blocks."""
    table = torch.randperm(blocks, generator=gen)[:(tokens + BLOCK - 1) // BLOCK]
    return (table[:, None] * BLOCK + torch.arange(BLOCK)).flatten()[:tokens].contiguous()


def seconds(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Setup:
    """The caches' tensors, the request (keys, slots) and the anchors' buffers."""

    def __init__(self, layers, tokens, blocks):
        if blocks * BLOCK < tokens:
            raise ValueError("%d blocks hold fewer than %d tokens" % (blocks, tokens))
        gen = torch.Generator().manual_seed(17)
        self.layers = [torch.empty(2, blocks, BLOCK, HEADS, HEAD_DIM, dtype=torch.bfloat16)
                       .uniform_(-1, 1, generator=gen) for _ in range(layers)]
        self.slots = slot_mapping(blocks, tokens, gen)
        self.keys = kvact.chunk_keys(MODEL, list(range(tokens)), CHUNK_TOKENS, include_partial=True)
        self.nbytes = request_bytes(layers, tokens)
        self.flat = [t.view(2, blocks * BLOCK, HEADS * HEAD_DIM) for t in self.layers]
        self.gathered = torch.empty(layers, 2, tokens, HEADS * HEAD_DIM, dtype=torch.bfloat16)
        self.other = torch.empty_like(self.gathered)
        self.torch_gather()  # first touch of the anchors' buffers, outside any timing
        self.torch_copy()

    def torch_gather(self):
        for l, t in enumerate(self.flat):
            torch.index_select(t, 1, self.slots, out=self.gathered[l])

    def torch_scatter(self):
        for l, t in enumerate(self.flat):
            t.index_copy_(1, self.slots, self.gathered[l])

    def torch_copy(self):
        self.other.copy_(self.gathered)


def kvact_store(sm, cache, s):
    op = cache.store(s.keys, s.slots)
    assert op.wait() == 0, "store failed"


def kvact_load(sm, cache, s, layout):
    with sm.submit_prefetch_task(s.keys, layout) as h:
        assert h.wait() == len(s.keys), "prefetch missed"
    assert cache.load(s.keys, s.slots).wait() == 0, "load failed"


def check_round_trip(sm, cache, s, layout):
    """A load after zeroing the request's slots puts back the bytes torch gathers."""
    s.torch_gather()
    want = s.gathered.clone()
    for t in s.flat:
        t.index_fill_(1, s.slots, 0)
    kvact_load(sm, cache, s, layout)
    s.torch_gather()
    assert torch.equal(s.gathered.view(torch.int16), want.view(torch.int16)), "load != store"


def rep(s):
    """One rep: {"store_s", "load_s", "torch_gather_s", "torch_scatter_s", "torch_copy_s"}."""
    out = {"torch_gather_s": seconds(s.torch_gather), "torch_scatter_s": seconds(s.torch_scatter),
           "torch_copy_s": seconds(s.torch_copy)}
    with kvact.Runtime(kvact.Config(settings(len(s.layers), len(s.slots)))) as rt:
        sm = rt.storage
        with kvact.PagedKVCache(sm, s.layers, chunk_tokens=CHUNK_TOKENS) as cache:
            layout = cache.chunk_layout()
            kvact_store(sm, cache, s)  # first touch of the pool's pages, untimed
            sm.delete(s.keys)
            out["store_s"] = seconds(lambda: kvact_store(sm, cache, s))
            out["load_s"] = seconds(lambda: kvact_load(sm, cache, s, layout))
            check_round_trip(sm, cache, s, layout)
        assert sm.memcheck(), sm.memcheck_report()
    return out
