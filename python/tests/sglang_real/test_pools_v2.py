"""test_pools_v2.py — SGLang's multi-pool calls (v2) and a tenant namespace.

- batch_set_v2 / batch_get_v2 move each pool's pages under that pool's own keys,
  bit-exact; batch_exists_v2 shrinks the KV prefix to what the extra pool can restore
  under ALL_PAGES and TRAILING_PAGES, as hand-computed below;
- a namespace (extra config, or per request in HiCacheStorageExtraInfo) keeps tenants'
  pages apart: one tenant never finds, nor reads, another's.

A real MambaPoolHost needs a Mamba model's cache params; an MHA host pool of another
geometry stands in for it, registered under PoolName.MAMBA: what is tested is the hit
policy and that each pool's pages are keyed apart, which depend only on the name and
the page views.
"""
import pytest
import torch
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorageExtraInfo, PoolHitPolicy,
                                                  PoolName, PoolTransfer)

from sglang_cpu import fill, indices, mha_host, page, page_keys, snapshot, zero


@pytest.fixture
def two_pools(backend):
    kv = fill(mha_host("page_first_direct"), seed=60)
    mamba = fill(mha_host("page_first", heads=1, layers=1), seed=61)
    b = backend(kv)
    b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    return b, kv, mamba


def test_v2_moves_each_pools_pages_bit_exact(two_pools):
    b, kv, mamba = two_pools
    keys = page_keys(3, seed=62)
    out = b.batch_set_v2([PoolTransfer(PoolName.KV, host_indices=indices([0, 1, 2]), keys=keys),
                          PoolTransfer(PoolName.MAMBA, host_indices=indices([4, 5, 6]),
                                       keys=keys)])
    assert out == {"kv": [True] * 3, "mamba": [True] * 3}
    out = b.batch_get_v2([PoolTransfer(PoolName.MAMBA, host_indices=indices([10, 11, 12]),
                                       keys=keys),
                          PoolTransfer(PoolName.KV, host_indices=indices([20, 21, 22]),
                                       keys=keys)])
    assert out == {"mamba": [True] * 3, "kv": [True] * 3}
    for s, d in zip([4, 5, 6], [10, 11, 12]):
        assert torch.equal(page(mamba, d), page(mamba, s))
    for s, d in zip([0, 1, 2], [20, 21, 22]):
        assert torch.equal(page(kv, d), page(kv, s))
    # the v1 calls read the KV pages v2 wrote; a key stored only in one pool is not in the other
    other = page_keys(1, seed=63)
    b.batch_set_v2([PoolTransfer(PoolName.MAMBA, host_indices=indices([7]), keys=other)])
    assert b.batch_exists(keys) == 3 and b.batch_exists(other) == 0
    assert b.batch_get_v1(other, indices([23])) == [False]


def test_a_bad_transfer_refuses_the_whole_v2_call(two_pools):
    b, kv, mamba = two_pools
    keys = page_keys(2, seed=64)
    with pytest.raises(ValueError, match="page start"):
        b.batch_set_v2([PoolTransfer(PoolName.KV, host_indices=indices([0, 1]), keys=keys),
                        PoolTransfer(PoolName.MAMBA, host_indices=indices([0, 99]), keys=keys)])
    assert b.batch_exists(keys) == 0
    with pytest.raises(RuntimeError, match="swa"):
        b.batch_set_v2([PoolTransfer(PoolName.SWA, host_indices=indices([0]), keys=keys[:1])])


def _exists(b, keys, window, policy):
    r = b.batch_exists_v2(keys, [PoolTransfer(PoolName.MAMBA, keys=keys[-window:],
                                              hit_policy=policy)])
    return r.kv_hit_pages, dict(r.extra_pool_hit_pages), r.restorable_prefix_pages


def test_batch_exists_v2_follows_each_hit_policy(two_pools):
    b, kv, mamba = two_pools
    keys = page_keys(6, seed=65)
    assert b.batch_set_v1(keys, indices(range(6))) == [True] * 6
    have = [1, 3, 4, 5]  # Mamba state at pages 1, 3, 4, 5 (0-based)
    b.batch_set_v2([PoolTransfer(PoolName.MAMBA, host_indices=indices(have),
                                 keys=[keys[i] for i in have])])
    T, A = PoolHitPolicy.TRAILING_PAGES, PoolHitPolicy.ALL_PAGES
    # prefix n is restorable when the window of pages [n - w, n) all have state:
    # w=1: n in {2, 4, 5, 6}; w=2: n in {5, 6}; ALL_PAGES: page 0 is missing, none
    assert _exists(b, keys, 1, T) == (6, {"kv": 6, "mamba": 6}, [2, 4, 5, 6])
    assert _exists(b, keys, 2, T) == (6, {"kv": 6, "mamba": 6}, [5, 6])
    assert _exists(b, keys, 1, A) == (0, {"kv": 6}, [])
    # over the first 4 KV pages only: w=2 leaves none, w=1 leaves {2, 4}
    assert _exists(b, keys[:4], 2, T) == (0, {"kv": 4}, [])
    assert _exists(b, keys[:4], 1, T) == (4, {"kv": 4, "mamba": 4}, [2, 4])
    # ALL_PAGES over pages whose state starts at page 0: stops at the first gap
    more = page_keys(4, seed=66)
    b.batch_set_v1(more, indices(range(4)))
    b.batch_set_v2([PoolTransfer(PoolName.MAMBA, host_indices=indices([0, 1, 3]),
                                 keys=[more[0], more[1], more[3]])])
    assert _exists(b, more, 1, A) == (2, {"kv": 4, "mamba": 2}, [1, 2])
    # no KV: nothing, whatever the pools hold
    assert _exists(b, page_keys(2, seed=67), 1, T) == (0, {}, [])


def test_namespaces_keep_tenants_apart(backend):
    a_host, b_host = fill(mha_host("layer_first"), seed=70), fill(mha_host("layer_first"), seed=71)
    a = backend(a_host, extra={"kvact.namespace": "tenant-a"})
    b = backend(b_host, extra={"kvact.namespace": "tenant-b"})
    keys = page_keys(2, seed=72)
    assert a.batch_set_v1(keys, indices([0, 1])) == [True, True]
    assert b.batch_exists(keys) == 0
    zero(b_host)
    assert b.batch_get_v1(keys, indices([5, 6])) == [False, False]
    assert not snapshot(b_host).any()
    fill(b_host, seed=71)
    assert b.batch_set_v1(keys, indices([0, 1])) == [True, True]
    for t, h in ((a, a_host), (b, b_host)):
        assert t.batch_get_v1(keys, indices([5, 6])) == [True, True]
        assert torch.equal(page(h, 5), page(h, 0)) and torch.equal(page(h, 6), page(h, 1))


def test_a_requests_namespace_keeps_its_pages_apart(backend):
    host = fill(mha_host("page_head"), seed=73)
    b = backend(host)
    t1 = HiCacheStorageExtraInfo(extra_info={"namespace": "t1"})
    t2 = HiCacheStorageExtraInfo(extra_info={"namespace": "t2"})
    keys = page_keys(3, seed=74)
    assert b.batch_set_v1(keys, indices([0, 1, 2]), t1) == [True] * 3
    assert b.batch_exists(keys, t1) == 3
    assert b.batch_exists(keys) == 0 and b.batch_exists(keys, t2) == 0
    assert b.batch_get_v1(keys, indices([10, 11, 12]), t2) == [False] * 3
    assert b.batch_get_v1(keys, indices([10, 11, 12]), t1) == [True] * 3
    for s, d in zip([0, 1, 2], [10, 11, 12]):
        assert torch.equal(page(host, d), page(host, s))
