"""test_paged_pages.py — PagedKVCache(fmt="pages") over vLLM 0.33's per-layer 4-D views: the
views built as vLLM's allocate_kv_cache builds them for each KVCacheLayout, store -> load into
fresh caches bit-exact (bf16, fp16) for the layouts whose pages are contiguous, the layout read
from the strides, the split layouts and bad slot runs refused by name."""
import pytest
import torch

import kvact
from conftest import clean

LAYERS, BLOCKS, HEADS, BLOCK, HEAD = 3, 12, 2, 16, 8
C = 2 * HEAD  # K and V fused in the last dimension, as vLLM 0.33 keeps them
CT = 32       # two blocks per chunk
SUPPORTED = ["LBHNC", "LBNHC", "BLHNC", "BLNHC"]
SPLIT = ["LHBNC", "BHLNC"]


def vllm_views(layout, dtype, layers=LAYERS, blocks=BLOCKS, heads=HEADS, block=BLOCK, c=C):
    """(backing int8 buffer, per-layer [B, H, N, C] views) as vLLM 0.33 makes them: a zeroed
    int8 allocation, a 5-D [L, B, H, N, C-bytes] as_strided view packed in the layout's
    physical order (create_kv_cache_views, compute_layout_strides), each layer viewed as the
    spec's dtype."""
    es = torch.empty(0, dtype=dtype).element_size()
    sizes = {"L": layers, "B": blocks, "H": heads, "N": block, "C": c * es}
    strides, run = {}, 1
    for dim in reversed(layout):  # innermost first
        strides[dim] = run
        run *= sizes[dim]
    raw = torch.zeros(run, dtype=torch.int8)
    view5 = torch.as_strided(raw, size=[sizes[d] for d in "LBHNC"],
                             stride=[strides[d] for d in "LBHNC"])
    return raw, [view5[l].view(dtype) for l in range(layers)]


def fill(raw, seed):
    raw.copy_(torch.randint(-128, 128, raw.shape, generator=torch.Generator().manual_seed(seed),
                            dtype=torch.int8))


def bits(t):
    """Same-size integer view: compares NaN payloads bit for bit."""
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.uint8)


def page_bytes_in_memory(view, block, layout):
    """A block's page as the bytes in memory: [H, N, C] permuted to the layout's order."""
    page = view[block]
    if layout.index("N") < layout.index("H"):
        page = page.permute(1, 0, 2)
    return bits(page.contiguous()).reshape(-1)


def slots_for(table, ntokens):
    """Token t in block table[t // BLOCK] (-1: the whole block skipped)."""
    t = torch.arange(ntokens)
    blocks = torch.tensor(table)[t // BLOCK]
    return torch.where(blocks < 0, torch.tensor(-1), blocks * BLOCK + t % BLOCK)


def keys_for(n, salt):
    return kvact.chunk_keys("pages", list(range(n * CT)), CT, salt=salt)


@pytest.mark.parametrize("layout,strides", [
    ("LBNHC", (4096, 128, 256, 1)), ("LBHNC", (4096, 2048, 128, 1)),
    ("BLNHC", (8192, 128, 256, 1)), ("BLHNC", (8192, 2048, 128, 1)),
    ("LHBNC", (2048, 65536, 128, 1)), ("BHLNC", (8192, 4096, 128, 1)),
])
def test_the_views_have_vllms_strides(layout, strides):
    """docs/vllm.md's table: 2 layers, 2 KV heads of 64, block 16, bf16, 32 blocks."""
    _, views = vllm_views(layout, torch.bfloat16, layers=2, blocks=32, heads=2, block=16, c=128)
    assert all(v.shape == (32, 2, 16, 128) and v.stride() == strides for v in views)


@pytest.mark.parametrize("layout", SUPPORTED)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pages_store_then_load_into_a_fresh_cache_is_bit_exact(sm, layout, dtype):
    src_raw, src = vllm_views(layout, dtype)
    fill(src_raw, 1)
    dst_raw, dst = vllm_views(layout, dtype)
    ntok = 3 * CT - 5  # a partial last chunk, its last block partial: its whole page moves
    a = [7, 2, 11, 0, 5, 9]
    b = [3, 10, 1, 8, 6, 4]
    keys = keys_for(3, salt="%s-%s" % (layout, dtype))
    with kvact.PagedKVCache(sm, src, fmt="pages", chunk_tokens=CT) as ks, \
            kvact.PagedKVCache(sm, dst, fmt="pages", chunk_tokens=CT) as kd:
        assert ks.layout == layout and kd.layout == layout
        assert ks.store(keys, slots_for(a, ntok)).wait(5.0) == 0
        assert sm.submit_prefetch_task(keys, kd.chunk_layout()).wait(5.0) == 3
        with sm.read_prefetched_results(keys, kd.chunk_layout()) as objs:
            for c, obj in enumerate(objs[:2]):  # full chunks: [layers, 2 pages, page]
                chunk = bits(obj.tensor)
                assert chunk.shape == (LAYERS, 2, HEADS * BLOCK * C)
                for l in range(LAYERS):
                    for p in range(2):
                        want = page_bytes_in_memory(src[l], a[2 * c + p], layout)
                        assert torch.equal(chunk[l, p], want)
        op = kd.load(keys, slots_for(b, ntok))
        assert all(op.wait_layer(l, 5.0) for l in range(LAYERS))
        assert op.wait(5.0) == 0
    want_raw, want = vllm_views(layout, dtype)
    for l in range(LAYERS):
        for i in range(len(a)):
            bits(want[l])[b[i]] = bits(src[l])[a[i]]
    assert torch.equal(dst_raw, want_raw)  # the pages, and not one byte more
    assert clean(sm)


@pytest.mark.parametrize("layout", SUPPORTED)
def test_the_layout_and_geometry_come_from_the_strides(sm, layout):
    _, views = vllm_views(layout, torch.bfloat16)
    page = HEADS * BLOCK * C * 2
    with kvact.PagedKVCache(sm, views, fmt="pages", chunk_tokens=CT) as kv:
        assert kv.layout == layout and kv.page_bytes == page
        assert kv.block_stride == (page if layout[0] == "L" else LAYERS * page)
        assert (kv.num_blocks, kv.num_heads, kv.block_size, kv.head_dim) == (BLOCKS, HEADS,
                                                                             BLOCK, C)
        assert kv.chunk_layout().shapes == [(LAYERS, 2, page // 2)]
        assert kv.chunk_layout(17).shapes == [(LAYERS, 2, page // 2)]


def test_a_skipped_block_is_stored_as_zeros_and_not_written_on_load(sm):
    src_raw, src = vllm_views("BLNHC", torch.float16)
    fill(src_raw, 2)
    dst_raw, dst = vllm_views("BLNHC", torch.float16)
    fill(dst_raw, 3)
    before = dst_raw.clone()
    keys = keys_for(1, salt="skip")
    with kvact.PagedKVCache(sm, src, fmt="pages", chunk_tokens=CT) as ks, \
            kvact.PagedKVCache(sm, dst, fmt="pages", chunk_tokens=CT) as kd:
        assert ks.store(keys, slots_for([-1, 4], CT)).wait(5.0) == 0
        sm.submit_prefetch_task(keys, kd.chunk_layout()).wait(5.0)
        with sm.read_prefetched_results(keys, kd.chunk_layout()) as objs:
            assert not objs[0].tensor[:, 0].view(torch.int16).any()
        assert kd.load(keys, slots_for([-1, 9], CT)).wait(5.0) == 0  # vLLM holds block 0
    for l in range(LAYERS):
        assert torch.equal(bits(dst[l])[9], bits(src[l])[4])
    changed = (dst_raw != before).nonzero().view(-1)  # blocks-first: block 9 holds every layer
    page = HEADS * BLOCK * C * 2
    assert changed.numel() > 0 and all(9 * LAYERS * page <= int(i) < 10 * LAYERS * page
                                       for i in changed)
    assert clean(sm)


@pytest.mark.parametrize("layout", SPLIT)
@pytest.mark.parametrize("named", [False, True])
def test_a_layout_whose_pages_are_split_is_refused_by_name(sm, layout, named):
    _, views = vllm_views(layout, torch.bfloat16)
    with pytest.raises(ValueError, match=layout):
        kvact.PagedKVCache(sm, views, fmt="pages", chunk_tokens=CT,
                           layout=layout if named else None)
    assert clean(sm)


@pytest.mark.parametrize("slots,why", [
    (torch.arange(1, CT + 1), "a run that does not start a block"),
    (torch.cat([torch.arange(16, 32), torch.arange(0, 16).flip(0)]), "a block out of order"),
    (torch.cat([torch.arange(0, 8), torch.arange(40, 48), torch.arange(16, 32)]), "two halves"),
    (torch.cat([torch.full((15,), -1), torch.arange(15, 32)]), "a block partly skipped"),
])
def test_slot_runs_that_are_not_whole_blocks_are_refused(sm, slots, why):
    _, views = vllm_views("LBNHC", torch.bfloat16)
    with kvact.PagedKVCache(sm, views, fmt="pages", chunk_tokens=CT) as kv:
        with pytest.raises(kvact.KvactError):
            kv.store(keys_for(1, salt="runs"), slots)
        with pytest.raises(kvact.KvactError):
            kv.load(keys_for(1, salt="runs"), slots)
    st = sm.stats()
    assert st["l1_objects"] == 0 and st["reserved"] == 0 and clean(sm), why


def test_bad_pages_arguments_are_refused(sm):
    _, views = vllm_views("LBNHC", torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of block_size"):
        kvact.PagedKVCache(sm, views, fmt="pages", chunk_tokens=24)
    with pytest.raises(ValueError, match="4 dimensions"):
        kvact.PagedKVCache(sm, [v[None] for v in views], fmt="pages", chunk_tokens=CT)
    with pytest.raises(ValueError, match="layout"):
        kvact.PagedKVCache(sm, views, fmt="pages", chunk_tokens=CT, layout="NHD")
    with pytest.raises(ValueError, match="layout"):
        kvact.PagedKVCache(sm, views, fmt="flash", chunk_tokens=CT, layout="LBNHC")
    _, other = vllm_views("BLNHC", torch.bfloat16)
    with pytest.raises(ValueError, match="strides"):
        kvact.PagedKVCache(sm, [views[0], other[1]], fmt="pages", chunk_tokens=CT)
    assert clean(sm)
