"""test_pages.py — KvactHiCacheStorage loaded by SGLang's own factory, on SGLang's host pools (CPU).

- the factory resolves the module path to KvactHiCacheStorage, a HiCacheStorage;
- in every layout of the MHA and MLA host pools, pages set from some host indices come
  back bit-exact into others (batch_set_v1 / batch_get_v1), nothing else is written;
- batch_exists counts the stored prefix, stopping at the first gap; a get stops there too;
- layouts whose page byte orders agree (layer_first, page_first_direct) share pages, the
  others miss instead of reading bytes in the wrong order;
- the generic path (no interface_v1: HiCacheController's own _generic_page_set/_get over
  flat pages) and the zero-copy path read each other's pages;
- bad arguments raise a ValueError naming the problem and change nothing: no page stored,
  no byte of the host pool written, no lock left (the conftest's memcheck).
"""
import pytest
import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from kvact.integrations.sglang import KvactHiCacheStorage

from sglang_cpu import (MHA_LAYOUTS, MLA_LAYOUTS, fill, indices, mha_host, mla_host, page,
                        page_keys, snapshot, zero, controller)

HOSTS = [("mha", lay) for lay in MHA_LAYOUTS] + [("mla", lay) for lay in MLA_LAYOUTS]


def make_host(kind, layout):
    return mha_host(layout) if kind == "mha" else mla_host(layout)


def test_factory_loads_kvact_by_module_path(backend):
    host = mha_host("layer_first")
    b = backend(host)
    assert type(b) is KvactHiCacheStorage and isinstance(b, HiCacheStorage)
    assert b.mem_pool_host is host


@pytest.mark.parametrize("kind,layout", HOSTS)
def test_pages_come_back_bit_exact_into_other_host_indices(backend, kind, layout):
    host = fill(make_host(kind, layout), seed=1)
    mla = kind == "mla"
    b = backend(host, mla=mla)
    src, dst = [1, 2, 3, 7], [20, 21, 22, 23]
    keys = page_keys(4, seed=hash((kind, layout)) % 1000)
    assert b.batch_set_v1(keys, indices(src)) == [True] * 4
    assert b.batch_exists(keys) == 4
    for p in dst:
        host.get_data_page(p * 16, flat=False).zero_()
    before = snapshot(host)
    assert b.batch_get_v1(keys, indices(dst)) == [True] * 4
    for s, d in zip(src, dst):
        assert torch.equal(page(host, d), page(host, s)), (s, d)
    # only the four destination pages changed
    for p in dst:
        host.get_data_page(p * 16, flat=False).zero_()
    assert torch.equal(snapshot(host), before)


def test_batch_exists_counts_the_prefix_up_to_the_first_gap(backend):
    host = fill(mha_host("page_first"), seed=2)
    b = backend(host)
    keys = page_keys(6, seed=2)
    stored = [0, 1, 2, 4, 5]  # page 3 missing
    assert b.batch_set_v1([keys[i] for i in stored], indices(stored)) == [True] * 5
    assert b.batch_exists(keys) == 3
    assert b.batch_exists(keys[3:]) == 0
    assert b.batch_exists(keys[4:]) == 2
    assert b.batch_exists([]) == 0
    assert b.exists(keys[4]) and not b.exists(keys[3])
    # a get stops at the gap: pages after it are not read into the pool
    dst = [10, 11, 12, 13, 14, 15]
    for p in dst:
        host.get_data_page(p * 16, flat=False).zero_()
    before = snapshot(host)
    assert b.batch_get_v1(keys, indices(dst)) == [True] * 3 + [False] * 3
    for s, d in zip(stored[:3], dst[:3]):
        assert torch.equal(page(host, d), page(host, s))
    for p in dst[:3]:
        host.get_data_page(p * 16, flat=False).zero_()
    assert torch.equal(snapshot(host), before)


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_layouts_of_one_page_order_share_pages_the_others_miss(backend, kind):
    """layer_first and page_first_direct views hold a page in the same byte order (the
    latter adds a page axis of 1); page_first's order differs: a miss, never wrong bytes."""
    mla = kind == "mla"
    first = fill(make_host(kind, "layer_first"), seed=3)
    direct = zero(make_host(kind, "page_first_direct"))
    paged = zero(make_host(kind, "page_first"))
    keys = page_keys(2, seed=30 + mla)
    assert backend(first, mla=mla).batch_set_v1(keys, indices([4, 5])) == [True, True]
    b_direct, b_paged = backend(direct, mla=mla), backend(paged, mla=mla)
    assert b_direct.batch_exists(keys) == 2
    assert b_direct.batch_get_v1(keys, indices([8, 9])) == [True, True]
    assert torch.equal(page(direct, 8).flatten(), page(first, 4).flatten())
    assert torch.equal(page(direct, 9).flatten(), page(first, 5).flatten())
    assert b_paged.batch_exists(keys) == 0
    assert b_paged.batch_get_v1(keys, indices([8, 9])) == [False, False]
    assert not snapshot(paged).any()


@pytest.mark.parametrize("layout", MHA_LAYOUTS)
def test_generic_and_zero_copy_paths_read_each_others_pages(backend, layout):
    """SGLang without interface_v1 calls batch_set(keys, [get_data_page(i) flat]) and
    batch_get(keys, [dummy flat pages]) then set_from_flat_data_page: run here by
    HiCacheController's own methods."""
    host = fill(mha_host(layout), seed=4)
    v1 = controller(backend(host), host)
    generic = controller(backend(host, v1=False), host)
    a, b = page_keys(3, seed=40), page_keys(3, seed=41)
    assert v1.v1_set(a, indices([0, 1, 2]))
    assert generic.generic_set(b, indices([3, 4, 5]))
    for p in range(10, 16):
        host.get_data_page(p * 16, flat=False).zero_()
    assert generic.generic_get(a, indices([10, 11, 12])) == 3
    assert v1.v1_get(b, indices([13, 14, 15])) == 3
    for s, d in zip(range(6), range(10, 16)):
        assert torch.equal(page(host, d), page(host, s)), (s, d)


def test_an_unknown_layout_is_refused_by_name(backend):
    """SGLang's MLA pools also have page_first_kv_split (DSA models), which needs a DSA
    indexer to build and kvact does not store: a real MHA host pool relabelled so stands in
    for it (the backend reads only .layout to decide)."""
    b = backend(mha_host("layer_first"))
    odd = mha_host("layer_first")
    odd.layout = "page_first_kv_split"
    with pytest.raises(ValueError, match="page_first_kv_split"):
        b.register_mem_pool_host(odd)
    assert b.mem_pool_host is not odd  # the pool registered before stays


def _unchanged(b, host, keys, call):
    """call() raises a ValueError, after which keys are still not stored and no byte of
    host changed."""
    before = snapshot(host)
    with pytest.raises(ValueError) as err:
        call()
    assert b.batch_exists(keys) == 0
    assert torch.equal(snapshot(host), before)
    return str(err.value)


def test_bad_arguments_raise_clear_errors_and_change_nothing(backend):
    host = fill(mha_host("page_head"), seed=5)
    b = backend(host)
    keys = page_keys(3, seed=50)
    pages = host.size // 16
    cases = {
        "need 48 host indices": lambda: b.batch_set_v1(keys, indices([0, 1])),
        "need 48 host indices ": lambda: b.batch_get_v1(keys, indices([0, 1])),
        "is not a page start": lambda: b.batch_set_v1(keys, indices([0, 1, pages])),
        "is not a page start ": lambda: b.batch_get_v1(keys, indices([0, 1, pages])),
        "not a page start  ": lambda: b.batch_set_v1(keys, indices([0, 1, 2]) + 3),
        "not a page start   ": lambda: b.batch_set_v1(keys, indices([0, 1, 2]) - 16),
        "non-empty strings": lambda: b.batch_set_v1(keys[:2] + [""], indices([0, 1, 2])),
        "non-empty strings ": lambda: b.batch_set_v1(keys[0], indices([0])),
        "one value": lambda: b.batch_set(keys, [host.get_data_page(0)]),
        "one target": lambda: b.batch_get(keys, [host.get_dummy_flat_data_page()]),
        "flat page": lambda: b.batch_set(keys, [host.get_data_page(0)[:-1]] * 3),
        "flat page ": lambda: b.batch_get(keys, [torch.zeros(8, dtype=torch.bfloat16)] * 3),
    }
    for expected, call in cases.items():
        assert expected.strip() in _unchanged(b, host, keys, call), expected
    # the pages of a refused call stay storable: the same keys go in afterwards
    assert b.batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    assert b.batch_exists(keys) == 3
    # a refused get of stored keys reads nothing into the pool
    before = snapshot(host)
    with pytest.raises(ValueError):
        b.batch_get_v1(keys, indices([10, 11, pages]))
    assert torch.equal(snapshot(host), before)
