"""test_ranks.py — KvactHiCacheStorage across SGLang's tensor-parallel ranks (one kvact, as ranks
sharing a kvactd see it; here one process, so one embedded runtime).

- MHA: tp_rank 0 and 1 hold different heads, so the same page hashes are different pages;
- MLA: every rank holds the whole latent cache, so only the storage writer (rank 0)
  stores and every rank reads that one copy;
- heads split across TP sizes (tp_lcm_size, page_head): a tp_size 1 writer stores each
  page as two head groups; each rank of tp_size 2 reads its half, bit-exact;
- an MLA model's Mamba-state pool (v2) is TP-sharded: every rank stores its own.
"""
import torch
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

from sglang_cpu import PAGE, fill, indices, mha_host, mla_host, page, page_keys, zero


def test_mha_tp_ranks_keep_separate_pages(backend):
    hosts = [fill(mha_host("page_first", heads=2), seed=10 + r) for r in range(2)]
    ranks = [backend(h, tp_rank=r, tp_size=2) for r, h in enumerate(hosts)]
    keys, only0 = page_keys(3, seed=11), page_keys(2, seed=12)
    for b in ranks:
        assert b.batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    assert ranks[0].batch_set_v1(only0, indices([3, 4])) == [True] * 2
    for r, (b, h) in enumerate(zip(ranks, hosts)):
        assert b.batch_get_v1(keys, indices([10, 11, 12])) == [True] * 3
        for s, d in zip([0, 1, 2], [10, 11, 12]):
            assert torch.equal(page(h, d), page(h, s)), (r, s)
    assert ranks[1].batch_exists(only0) == 0
    assert ranks[1].batch_get_v1(only0, indices([13, 14])) == [False, False]


def test_mla_stores_one_copy_that_every_rank_reads(backend):
    hosts = [fill(mla_host("page_first_direct"), seed=20 + r) for r in range(2)]
    ranks = [backend(h, tp_rank=r, tp_size=2, mla=True) for r, h in enumerate(hosts)]
    keys, only1 = page_keys(3, seed=21), page_keys(2, seed=22)
    # rank 1 is no storage writer: it says done and stores nothing
    assert ranks[1].batch_set_v1(only1, indices([0, 1])) == [True, True]
    assert ranks[0].batch_exists(only1) == ranks[1].batch_exists(only1) == 0
    assert ranks[0].batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    assert ranks[1].batch_exists(keys) == 3
    assert ranks[1].batch_get_v1(keys, indices([10, 11, 12])) == [True] * 3
    for s, d in zip([0, 1, 2], [10, 11, 12]):
        assert torch.equal(page(hosts[1], d), page(hosts[0], s))


def test_split_heads_rank_halves_are_read_by_the_wider_tp(backend):
    """SGLang's HiCacheController: tp_lcm_size 2 over page_head makes a tp_size 1 rank split
    its heads (should_split_heads); a tp_size 2 rank has tp_lcm_size == tp_size, so it does
    not split, and holds half the heads."""
    writer_host = fill(mha_host("page_head", heads=4), seed=30)
    writer = backend(writer_host, tp_size=1, tp_lcm_size=2, should_split_heads=True)
    keys = page_keys(3, seed=31)
    assert writer.batch_set_v1(keys, indices([1, 2, 3])) == [True] * 3
    for r in range(2):
        host = zero(mha_host("page_head", heads=2))
        reader = backend(host, tp_rank=r, tp_size=2, tp_lcm_size=2)
        assert reader.batch_exists(keys) == 3
        assert reader.batch_get_v1(keys, indices([5, 6, 7])) == [True] * 3
        for s, d in zip([1, 2, 3], [5, 6, 7]):
            want = writer_host.get_data_page(s * PAGE, flat=False)[:, :, 2 * r:2 * r + 2]
            got = host.get_data_page(d * PAGE, flat=False)
            assert torch.equal(got.contiguous().view(torch.uint8),
                               want.contiguous().view(torch.uint8)), (r, s)
    # and the writer reads its pages whole again
    assert writer.batch_get_v1(keys, indices([10, 11, 12])) == [True] * 3
    for s, d in zip([1, 2, 3], [10, 11, 12]):
        assert torch.equal(page(writer_host, d), page(writer_host, s))


def test_an_mla_models_mamba_pool_is_stored_per_rank(backend):
    """Mamba state is TP-sharded even when the model's MLA KV is replicated (as SGLang's
    mooncake and seaweedfs backends key it). An MHA host pool stands in for MambaPoolHost
    (which needs a Mamba model's cache params): what is tested is whose pages they are."""
    ranks, states = [], []
    for r in range(2):
        b = backend(fill(mla_host("layer_first"), seed=40 + r), tp_rank=r, tp_size=2,
                    mla=True)
        states.append(fill(mha_host("page_first", heads=1, layers=1), seed=42 + r))
        b.register_mem_host_pool_v2(states[-1], PoolName.MAMBA)
        ranks.append(b)
    keys = page_keys(2, seed=44)
    for b in ranks:
        out = b.batch_set_v2([PoolTransfer(PoolName.MAMBA, host_indices=indices([0, 1]),
                                           keys=keys)])
        assert out == {"mamba": [True, True]}
    for b, h in zip(ranks, states):
        out = b.batch_get_v2([PoolTransfer(PoolName.MAMBA, host_indices=indices([8, 9]),
                                           keys=keys)])
        assert out == {"mamba": [True, True]}
        assert torch.equal(page(h, 8), page(h, 0)) and torch.equal(page(h, 9), page(h, 1))
