"""test_paged.py — PagedKVCache: store/load round trips bit-exact per format and dtype, layer
waits, awaitable ops, and every bad argument refused without a change."""
import asyncio

import numpy as np
import pytest
import torch

import kvact
from conftest import clean

LAYERS, BLOCKS, BLOCK, HEADS, DIM, CT = 3, 12, 8, 2, 16, 16


def paged(fmt, dtype, seed):
    """LAYERS tensors of the format's shape filled with seeded bits of dtype."""
    shape = (2, BLOCKS, BLOCK, HEADS, DIM) if fmt == "flash" else (BLOCKS, 2, BLOCK, HEADS, DIM)
    g = torch.Generator().manual_seed(seed)
    nbytes = torch.empty(0, dtype=dtype).element_size()
    out = []
    for _ in range(LAYERS):
        bits = torch.randint(0, 256, (int(np.prod(shape)) * nbytes,), generator=g,
                             dtype=torch.uint8)
        out.append(bits.view(dtype).reshape(shape).clone())
    return out


def token_kv(layers, fmt, slot):
    """K and V of one slot, every layer: what must move bit for bit."""
    b, o = divmod(slot, BLOCK)
    if fmt == "flash":
        return [l[:, b, o].view(torch.uint8) for l in layers]
    return [l[b, :, o].view(torch.uint8) for l in layers]


def slots_of(ntokens, seed):
    """A shuffled block table: token t lives in slot table[t // BLOCK] * BLOCK + t % BLOCK."""
    table = torch.randperm(BLOCKS, generator=torch.Generator().manual_seed(seed))
    t = torch.arange(ntokens)
    return table[t // BLOCK] * BLOCK + t % BLOCK


def keys_for(n, salt):
    return kvact.chunk_keys("paged", list(range(n * CT)), CT, salt=salt)


def prefetch(sm, kv, keys):
    assert sm.submit_prefetch_task(keys, kv.chunk_layout()).wait(5.0) == len(keys)


@pytest.mark.parametrize("fmt", ["flash", "flashinfer"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.uint8])
def test_store_then_load_into_other_slots_is_bit_exact(sm, fmt, dtype):
    src, dst = paged(fmt, dtype, 1), paged(fmt, dtype, 2)
    ntok = 3 * CT - 5  # a partial last chunk
    keys = keys_for(3, salt="%s-%s" % (fmt, dtype))
    a, b = slots_of(ntok, 10), slots_of(ntok, 20)
    with kvact.PagedKVCache(sm, src, fmt=fmt, chunk_tokens=CT) as ks, \
            kvact.PagedKVCache(sm, dst, fmt=fmt, chunk_tokens=CT) as kd:
        assert ks.store(keys, a).wait(5.0) == 0
        untouched = [l.clone() for l in dst]
        prefetch(sm, kd, keys)
        op = kd.load(keys, b)
        assert all(op.wait_layer(l, 5.0) for l in range(LAYERS))
        assert op.wait(5.0) == 0
    for t in range(ntok):
        for got, want in zip(token_kv(dst, fmt, int(b[t])), token_kv(src, fmt, int(a[t]))):
            assert torch.equal(got, want)
    written = set(int(s) for s in b)
    for slot in set(range(BLOCKS * BLOCK)) - written:  # nothing else of dst changed
        for got, was in zip(token_kv(dst, fmt, slot), token_kv(untouched, fmt, slot)):
            assert torch.equal(got, was)
    assert clean(sm)


def test_a_skipped_slot_is_stored_as_zeros_and_not_written_on_load(sm):
    src, dst = paged("flash", torch.float16, 3), paged("flash", torch.float16, 4)
    keys = keys_for(1, salt="skip")
    a = slots_of(CT, 1)
    a[5] = -1
    with kvact.PagedKVCache(sm, src, chunk_tokens=CT) as ks, \
            kvact.PagedKVCache(sm, dst, chunk_tokens=CT) as kd:
        assert ks.store(keys, a).wait(5.0) == 0
        prefetch(sm, kd, keys)
        with sm.read_prefetched_results(keys, kd.chunk_layout()) as objs:
            chunk = objs[0].tensor  # [2, layers, tokens, heads * dim]
            assert not chunk[:, :, 5].any() and chunk[:, :, 4].any()
        b = slots_of(CT, 2)
        before = token_kv(dst, "flash", int(b[5]))
        b[5] = -1
        assert kd.load(keys, b).wait(5.0) == 0  # releases the prefetch's lock
    assert all(torch.equal(x, y) for x, y in zip(token_kv(dst, "flash", int(slots_of(CT, 2)[5])),
                                                before))
    assert clean(sm)


def test_chunk_layout_is_two_layers_tokens_features(sm):
    with kvact.PagedKVCache(sm, paged("flash", torch.bfloat16, 0), chunk_tokens=CT) as kv:
        lay = kv.chunk_layout()
        assert lay.shapes == [(2, LAYERS, CT, HEADS * DIM)] and lay.dtypes == ["bfloat16"]
        assert kv.chunk_layout(5).shapes == [(2, LAYERS, 5, HEADS * DIM)]
        assert kv.slots == BLOCKS * BLOCK


def test_ops_are_awaitable(sm):
    src = paged("flash", torch.bfloat16, 5)
    keys = keys_for(2, salt="await")

    async def main(kv):
        status = await kv.store(keys, slots_of(2 * CT, 3))
        hits = await sm.submit_prefetch_task(keys, kv.chunk_layout())
        loaded = await kv.load(keys, slots_of(2 * CT, 4))
        return status, hits, loaded

    with kvact.PagedKVCache(sm, src, chunk_tokens=CT) as kv:
        assert asyncio.run(main(kv)) == (0, 2, 0)
    assert clean(sm)


def test_loading_keys_not_prefetched_fails_and_writes_nothing(sm):
    dst = paged("flash", torch.float32, 6)
    before = [l.clone() for l in dst]
    with kvact.PagedKVCache(sm, dst, chunk_tokens=CT) as kv:
        assert kv.load(keys_for(1, salt="never"), slots_of(CT, 1)).wait(5.0) == 1  # NOT_EXIST
    assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(dst, before))
    assert clean(sm)


def bad_layers():
    good = paged("flash", torch.bfloat16, 0)
    return [
        ([], ValueError),                                               # no layers
        ([np.zeros((2, 4, 8, 2, 16))], TypeError),                      # not torch
        ([good[0], good[1][:, :6].contiguous()], ValueError),           # shapes differ
        ([good[0], good[1].to(torch.float16)], ValueError),             # dtypes differ
        ([good[0].transpose(3, 4)], ValueError),                        # not contiguous
        ([good[0][0]], ValueError),                                     # 4 dimensions
        ([torch.zeros(3, 4, 8, 2, 16)], ValueError),                    # K/V dim is not 2
        ([torch.zeros(2, 4, 8, 2, 16, dtype=torch.int32)], TypeError),  # dtype kvact lacks
    ]


@pytest.mark.parametrize("layers,exc", bad_layers())
def test_bad_layers_are_refused(sm, layers, exc):
    with pytest.raises(exc):
        kvact.PagedKVCache(sm, layers)
    assert clean(sm)


def test_bad_format_and_chunk_size_are_refused(sm):
    layers = paged("flash", torch.bfloat16, 0)
    with pytest.raises(ValueError):
        kvact.PagedKVCache(sm, layers, fmt="paged")
    with pytest.raises(ValueError):
        kvact.PagedKVCache(sm, layers, chunk_tokens=0)


@pytest.mark.parametrize("slots,exc", [
    (torch.arange(CT, dtype=torch.int32), TypeError),           # int32
    (np.arange(CT, dtype=np.float64), TypeError),               # float
    (torch.arange(CT + 1), ValueError),                         # too many for one key
    (torch.arange(0), ValueError),                              # none
    (torch.arange(CT).reshape(2, CT // 2), ValueError),         # 2-D
    ("0123", TypeError),                                        # not an array
    (torch.full((CT,), BLOCKS * BLOCK), kvact.KvactError),      # a slot past the cache
    (torch.full((CT,), -2), kvact.KvactError),                  # below -1
])
def test_bad_slot_mappings_are_refused_and_change_nothing(sm, slots, exc):
    src = paged("flash", torch.bfloat16, 7)
    keys = keys_for(1, salt="bad-slots")
    with kvact.PagedKVCache(sm, src, chunk_tokens=CT) as kv:
        with pytest.raises(exc):
            kv.store(keys, slots)
    st = sm.stats()
    assert st["l1_objects"] == 0 and st["reserved"] == 0 and clean(sm)


def test_a_closed_cache_refuses_calls_and_waits_its_ops(sm):
    src = paged("flash", torch.bfloat16, 8)
    kv = kvact.PagedKVCache(sm, src, chunk_tokens=CT)
    op = kv.store(keys_for(1, salt="closed"), slots_of(CT, 1))
    kv.close()
    assert op.wait() == 0  # close waited for it
    with pytest.raises(ValueError):
        kv.store(keys_for(1, salt="closed2"), slots_of(CT, 1))
    assert clean(sm)


def test_a_layer_out_of_range_is_refused(sm):
    with kvact.PagedKVCache(sm, paged("flash", torch.bfloat16, 9), chunk_tokens=CT) as kv:
        op = kv.store(keys_for(1, salt="layer"), slots_of(CT, 1))
        with pytest.raises(IndexError):
            op.wait_layer(LAYERS)
        assert op.wait() == 0
