"""test_storage_manager_both.py — LMCache's StorageManager tests (its
tests/v1/distributed/test_distributed_storage_manager.py and test_abort_write.py), in
our words, run on LMCache 0.5.6 and on kvact, embedded and through kvactd.

Every case runs on each side (conftest.py); sides.py says how each call maps. Beyond
LMCache's own assertions, each case checks the bytes it reads back and, at its end, that
no lock is left on either side. A case kvact cannot pass yet is marked with what is
missing; one LMCache 0.5.6 cannot pass either says why on its LMCache side.
"""
import pytest
import torch

from sides import pattern

SHAPE, DTYPE = (100, 2, 512), torch.bfloat16      # 200 KiB, LMCache's basic layout
NBYTES = 100 * 2 * 512 * 2
LARGE_SHAPE = (2048, 1024)                         # 8 MiB of float32


def write(sm, idx, layout=None):
    """Writes the objects of indexes idx (pattern(i) each) and finishes them."""
    layout = layout or sm.layout(SHAPE, DTYPE)
    keys = [sm.key(i) for i in idx]
    got = sm.reserve(keys, layout)
    assert set(got) == set(keys)
    for i, key in zip(idx, keys):
        sm.obj_tensor(got[key]).view(torch.uint8).view(-1).copy_(pattern(i, NBYTES))
    sm.finish_write(keys)
    return keys


def prefetched(sm, keys, **kw):
    """submit, then the finished result (sides.Found)."""
    return sm.result(sm.prefetch(keys, sm.layout(SHAPE, DTYPE), **kw))


def assert_reads(sm, keys, idx):
    """The prefetched keys read back as pattern(i) for i in idx (their locks kept)."""
    with sm.read(keys) as objs:
        assert objs is not None and len(objs) == len(keys)
        for i, obj in zip(idx, objs):
            assert torch.equal(sm.obj_bytes(obj)[:NBYTES], pattern(i, NBYTES)), i


# ---- reserve -------------------------------------------------------------------------

def test_reserve_one(storage):
    sm = storage()
    key = sm.key(12345)
    got = sm.reserve([key], sm.layout(SHAPE, DTYPE))
    assert list(got) == [key] and got[key] is not None
    assert sm.obj_bytes(got[key]).numel() >= NBYTES
    sm.finish_write([key])


def test_reserve_several(storage):
    sm = storage()
    keys = [sm.key(i) for i in range(5)]
    got = sm.reserve(keys, sm.layout(SHAPE, DTYPE))
    assert set(got) == set(keys) and all(got[k] is not None for k in keys)
    sm.finish_write(keys)


def test_out_of_memory_in_a_small_l1_reserves_fewer_and_none_empty(storage):
    """Both sides allocate the new keys of one call whole or not at all (LMCache 0.5.6's
    L1Manager frees a partial allocation; kvact.h says so of kva_reserve_write): "fewer"
    is none, and what was reserved before is untouched."""
    sm = storage(l1_mib=64)
    large = sm.layout(LARGE_SHAPE, torch.float32)
    keys = [sm.key(i) for i in range(20)]  # 160 MiB against 64
    assert sm.reserve(keys, large) == {}
    assert sm.l1_used_bytes() == 0
    seven = sm.reserve(keys[:7], large)  # 56 MiB fit
    assert len(seven) == 7
    assert all(obj is not None and sm.obj_bytes(obj).numel() >= 8 << 20
               for obj in seven.values())
    assert sm.reserve(keys[7:9], large) == {}  # one of two would fit: neither is reserved
    assert sm.l1_used_bytes() == 7 * (8 << 20) and sm.write_locked() == 7
    sm.finish_write(keys[:7])  # 7/8 full: past both sides' eviction watermark (0.8),
    assert sm.delete(keys[:7])[1] == 0  # so some may be evicted already; none is locked


def test_empty_key_lists_are_no_ops(storage):
    """LMCache's calls take an empty key list as nothing to do; its own tests call
    finish_write(list(reserved)) whatever was reserved, and an out-of-memory reserve
    returns {}."""
    sm = storage()
    layout = sm.layout(SHAPE, DTYPE)
    assert sm.reserve([], layout) == {}
    sm.finish_write([])
    assert sm.delete([]) == (0, 0)
    assert prefetched(sm, []).prefix == 0
    with sm.read([]) as objs:
        assert objs == []
    sm.finish_read([])


# ---- prefetch and read from L1 ---------------------------------------------------------

def test_prefetch_all(storage):
    sm = storage()
    keys = write(sm, range(5))
    found = prefetched(sm, keys)
    assert found.prefix == 5 and found.found == (0, 1, 2, 3, 4) and found.from_l2 == 0
    sm.finish_read(keys)


def test_prefetch_partial_prefix_releases_the_keys_past_the_gap(storage):
    sm = storage()
    keys = [sm.key(i) for i in range(5)]
    write(sm, [0, 1, 3, 4])
    found = prefetched(sm, keys)
    assert found.prefix == 2 and found.found == (0, 1)
    # keys 3 and 4 were found but are past the gap: no lock of theirs is left
    layout = sm.layout(SHAPE, DTYPE)
    assert sm.rewritable(keys[3], layout) and sm.rewritable(keys[4], layout)
    assert not sm.rewritable(keys[0], layout)
    assert sm.delete(keys[3:]) == (2, 0)
    sm.finish_read(keys[:2])


def test_read_prefetched(storage):
    sm = storage()
    keys = write(sm, range(3))
    assert prefetched(sm, keys).prefix == 3
    assert_reads(sm, keys, range(3))
    sm.finish_read(keys)
    assert sm.delete(keys) == (3, 0)


def test_read_with_a_key_not_prefetched_is_none_and_leaves_no_lock(storage):
    sm = storage()
    keys = write(sm, range(5))
    assert prefetched(sm, keys[1:]).prefix == 4
    with sm.read(keys) as objs:  # keys[0] is in L1 but was not prefetched
        assert objs is None
    # the four read locks the read found were given back with the None
    assert sm.delete(keys[1:]) == (4, 0)


# ---- several readers of one prefetch ---------------------------------------------------

def test_extra_readers_are_released_together(storage):
    sm = storage()
    keys = write(sm, range(3))
    assert prefetched(sm, keys, readers=3).prefix == 3
    sm.finish_read(keys, locks=3)
    assert sm.delete(keys) == (3, 0)


def test_extra_readers_released_in_parts_hold_until_the_last(storage):
    sm = storage()
    keys = write(sm, range(2))
    assert prefetched(sm, keys, readers=4).prefix == 2
    sm.finish_read(keys, locks=2)
    assert sm.delete(keys) == (0, 2)  # two of four locks are still held
    sm.finish_read(keys, locks=2)
    assert sm.delete(keys) == (2, 0)


def test_keys_past_the_gap_are_released_with_all_extra_readers(storage):
    sm = storage()
    keys = [sm.key(i) for i in range(5)]
    write(sm, [0, 1, 3, 4])
    assert prefetched(sm, keys, readers=2).prefix == 2
    assert sm.delete(keys[3:]) == (2, 0)
    sm.finish_read(keys[:2], locks=2)
    assert sm.delete(keys[:2]) == (2, 0)


def test_one_reader_is_the_default(storage):
    sm = storage()
    keys = write(sm, range(3))
    assert prefetched(sm, keys).prefix == 3
    sm.finish_read(keys)  # one release is enough
    assert sm.delete(keys) == (3, 0)


# ---- prefetch through the mock L2 ------------------------------------------------------

def test_prefetch_from_l2_after_clear(storage):
    sm = storage(l2=True)
    keys = write(sm, range(5))
    sm.settle(keys)
    sm.clear()
    assert sm.l1_used_bytes() == 0
    found = prefetched(sm, keys)
    assert found.prefix == 5 and found.from_l2 == 5
    assert_reads(sm, keys, range(5))
    sm.finish_read(keys)


def test_prefetch_mixed_l1_and_l2_fills_the_gaps_from_l2(storage):
    sm = storage(l2=True)
    keys = write(sm, range(5))
    sm.settle(keys)
    assert sm.delete([keys[2], keys[4]]) == (2, 0)  # L1 keeps 0, 1, 3
    found = prefetched(sm, keys)
    assert found.prefix == 5 and found.from_l2 == 2
    assert_reads(sm, keys, range(5))
    sm.finish_read(keys)


def test_prefetch_nothing_in_l2(storage):
    sm = storage(l2=True)
    keys = [sm.key(i) for i in range(3)]
    found = prefetched(sm, keys)
    assert found.prefix == 0 and found.found == () and found.from_l2 == 0


def test_prefetch_l2_partial_prefix(storage):
    sm = storage(l2=True)
    keys = [sm.key(i) for i in range(5)]
    write(sm, [0, 1, 3, 4])
    sm.settle([keys[i] for i in (0, 1, 3, 4)])
    sm.clear()
    assert sm.l1_used_bytes() == 0
    found = prefetched(sm, keys)
    assert found.prefix == 2 and found.found == (0, 1) and found.from_l2 == 2
    assert_reads(sm, keys[:2], range(2))
    assert sm.delete(keys[3:])[1] == 0  # past the gap: not locked, if loaded at all
    sm.finish_read(keys[:2])


def test_l1_prefix_then_l2_continuation(storage):
    sm = storage(l2=True)
    keys = write(sm, range(5))
    sm.settle(keys)
    assert sm.delete(keys[2:]) == (3, 0)  # L1 keeps 0, 1; L2 has all five
    found = prefetched(sm, keys)
    assert found.prefix == 5 and found.from_l2 == 3
    assert_reads(sm, keys, range(5))
    sm.finish_read(keys)


# ---- delete ----------------------------------------------------------------------------

def test_delete_counts_deleted_keys_and_ignores_missing_ones(storage):
    sm = storage()
    resident, missing = write(sm, [1])[0], sm.key(2)
    assert sm.delete([resident, missing]) == (1, 0)
    assert sm.delete([resident]) == (0, 0)
    assert prefetched(sm, [resident]).prefix == 0


def test_a_write_locked_key_is_skipped_without_force_and_removed_with_it(storage):
    sm = storage()
    key = sm.key(1)
    assert len(sm.reserve([key], sm.layout(SHAPE, DTYPE))) == 1
    assert sm.delete([key]) == (0, 1)
    assert sm.write_locked() == 1  # the reservation survived
    assert sm.delete([key], force=True) == (1, 0)
    assert sm.delete([key]) == (0, 0)
    assert prefetched(sm, [key]).prefix == 0
    sm.finish_write([key])  # the writer finishing late publishes nothing
    assert sm.write_locked() == 0
    assert prefetched(sm, [key]).prefix == 0


def test_a_read_locked_key_is_skipped_without_force_and_removed_with_it(storage):
    sm = storage()
    key = write(sm, [1])[0]
    assert prefetched(sm, [key]).prefix == 1
    assert sm.delete([key]) == (0, 1)
    assert sm.delete([key], force=True) == (1, 0)
    assert sm.delete([key]) == (0, 0)
    sm.finish_read([key])  # the reader letting go of a deleted key
    assert prefetched(sm, [key]).prefix == 0


# ---- what LMCache defines and kvact does not have yet ---------------------------------

@pytest.mark.sides(lmcache_lacks="lmcache 0.5.6's StorageManager has no abort_write (upstream "
                   "added it after 0.5.6, with tests/v1/distributed/test_abort_write.py): "
                   "AttributeError")
def test_abort_write_gives_the_reservation_back(storage):
    sm = storage()
    layout = sm.layout(SHAPE, DTYPE)
    keys = [sm.key(i) for i in range(3)]
    assert len(sm.reserve(keys, layout)) == 3
    assert sm.write_locked() == 3
    sm.abort_write(keys)
    assert sm.write_locked() == 0 and sm.l1_used_bytes() == 0
    assert prefetched(sm, keys).prefix == 0  # never readable
    assert len(sm.reserve(keys, layout)) == 3  # reservable as new again
    sm.abort_write(keys)
    assert sm.write_locked() == 0


def test_warm_prefetch_brings_l2_keys_into_l1_without_locking_them(storage):
    sm = storage(l2=True)
    keys = write(sm, range(3))
    sm.settle(keys)
    sm.clear()
    found = prefetched(sm, keys, lock=False)
    assert found.prefix == 3 and found.from_l2 == 3
    assert sm.l1_used_bytes() == 3 * NBYTES
    assert sm.delete(keys) == (3, 0)  # resident, and nothing to release


@pytest.mark.sides(kvact_missing="the SPARSE prefetch")
def test_sparse_prefetch_locks_every_found_key_in_l1(storage):
    sm = storage()
    keys = [sm.key(i) for i in range(5)]
    found_keys = write(sm, [0, 1, 3, 4])
    assert prefetched(sm, keys, policy="sparse").found == (0, 1, 3, 4)
    assert sm.delete(found_keys) == (0, 4)
    assert_reads(sm, found_keys, [0, 1, 3, 4])
    sm.finish_read(found_keys)
    assert sm.delete(found_keys) == (4, 0)


@pytest.mark.sides(kvact_missing="the SPARSE prefetch")
def test_sparse_prefetch_loads_every_found_key_from_l2(storage):
    sm = storage(l2=True)
    keys = [sm.key(i) for i in range(5)]
    found_keys = write(sm, [0, 1, 3, 4])
    sm.settle(found_keys)
    sm.clear()
    found = prefetched(sm, keys, policy="sparse")
    assert found.found == (0, 1, 3, 4) and found.from_l2 == 4
    assert_reads(sm, found_keys, [0, 1, 3, 4])
    sm.finish_read(found_keys)


def test_read_results_are_typed_by_the_layout_they_were_written_with(storage):
    sm = storage()
    keys = write(sm, range(2))
    assert prefetched(sm, keys).prefix == 2
    try:
        with sm.read(keys) as objs:
            for i, obj in enumerate(objs):
                t = sm.obj_tensor(obj)
                assert tuple(t.shape) == SHAPE and t.dtype == DTYPE
                assert torch.equal(t.view(torch.uint8).view(-1), pattern(i, NBYTES))
    finally:
        sm.finish_read(keys)
