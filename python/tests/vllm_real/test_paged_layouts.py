"""test_paged_layouts.py — kvact.PagedKVCache(fmt="pages") over the caches vLLM 0.33's own
allocator makes (allocate_kv_cache), every KVCacheLayout, bf16 and fp16, without the
connector: the layouts whose (layer, block) pages are contiguous round-trip bit for bit
into a fresh allocation (and nothing else of it changes); the others are refused with
their name."""
import pytest
import torch
from vllm.v1.kv_cache_layout import KVCacheLayout

import kvact

from vllm_cpu import BLOCK_SIZE, CHUNK_TOKENS, LAYERS, make_kv_cache_config, make_kv_caches

REQUIRED_LAYOUTS = {"LBNHC", "LBHNC", "BLNHC", "BLHNC"}


@pytest.fixture
def storage():
    cfg = kvact.Config({"l1.size_bytes": 1 << 24, "l1.hugepages": False, "l1.pinned": False,
                        "runtime.workers": 2})
    with kvact.Runtime(cfg) as rt:
        yield rt.storage


def caches(vllm_config, layout, dtype):
    config = vllm_config(layout=layout, dtype=str(dtype).replace("torch.", ""))
    kv = make_kv_caches(make_kv_cache_config(config, dtype=dtype), layout)
    return [kv[name] for name in LAYERS]


def raw_bytes(layers):
    """The backing allocation under the views, as int8."""
    t = layers[0]
    n = t.untyped_storage().nbytes()
    return torch.empty(0, dtype=torch.int8).set_(t.untyped_storage(), 0, (n,))


def slots_of(table, ntokens):
    t = torch.arange(ntokens)
    return torch.tensor(table)[t // BLOCK_SIZE] * BLOCK_SIZE + t % BLOCK_SIZE


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", [m.name for m in KVCacheLayout])
def test_pages_round_trip_on_vllms_own_caches(vllm_config, storage, layout, dtype):
    src, dst = caches(vllm_config, layout, dtype), caches(vllm_config, layout, dtype)
    if layout not in REQUIRED_LAYOUTS:
        with pytest.raises(ValueError, match=layout):
            kvact.PagedKVCache(storage, src, fmt="pages", chunk_tokens=CHUNK_TOKENS)
        return
    src_raw, dst_raw = raw_bytes(src), raw_bytes(dst)
    src_raw.copy_(torch.randint(-128, 128, src_raw.shape, dtype=torch.int8,
                                generator=torch.Generator().manual_seed(7)))
    a, b = [5, 30, 2, 17, 9], [11, 0, 23, 4, 28]
    ntok = 2 * CHUNK_TOKENS + 7  # a partial last chunk of one partial block
    keys = kvact.chunk_keys("tiny", list(range(3 * CHUNK_TOKENS)), CHUNK_TOKENS,
                            salt="%s-%s" % (layout, dtype))
    with kvact.PagedKVCache(storage, src, fmt="pages", chunk_tokens=CHUNK_TOKENS) as ks, \
            kvact.PagedKVCache(storage, dst, fmt="pages", chunk_tokens=CHUNK_TOKENS,
                               layout=layout) as kd:
        assert ks.layout == layout
        assert ks.store(keys, slots_of(a, ntok)).wait(5.0) == 0
        assert storage.submit_prefetch_task(keys, kd.chunk_layout()).wait(5.0) == 3
        assert kd.load(keys, slots_of(b, ntok)).wait(5.0) == 0
    for s, d in zip(src, dst):
        for i in range(len(a)):
            assert torch.equal(d[b[i]].view(torch.int16), s[a[i]].view(torch.int16))
            d[b[i]].view(torch.int16).zero_()  # once the pages are checked, all must be zeros
    assert not dst_raw.any()
