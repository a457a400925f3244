"""test_lmcache_scenarios.py — LMCache's storage-manager test scenarios (seed 004), in Python:
out of memory, prefix trimming that releases the rest, multi-reader lock counts, the L1+L2
prefix, lookups with pins, freeze and bypass."""
import pytest
import torch

import kvact
from conftest import clean, small_config

SMALL = kvact.MemoryLayoutDesc(shapes=[(4, 256)], dtypes=["float32"])          # 4 KiB
LARGE = kvact.MemoryLayoutDesc(shapes=[(1024, 2048)], dtypes=["float32"])      # 8 MiB


def keys_of(n, salt):
    return kvact.chunk_keys("scenario", list(range(n * 8)), 8, salt=salt)


def fill(i):
    return torch.full((4, 256), float(i))


def write(sm, keys, layout=SMALL):
    got = sm.reserve_write(keys, layout)
    assert set(got) == set(keys)
    for i, key in enumerate(keys):
        if layout is SMALL:
            got[key].tensor.copy_(fill(i))
    assert sm.finish_write(keys) == [0] * len(keys)


def is_free(sm, key):
    """True when key can be write-locked again (mode update), i.e. no reader holds it."""
    got = sm.reserve_write([key], SMALL, mode="update")
    if got:
        sm.finish_write([key])
    return bool(got)


def test_a_batch_larger_than_l1_is_refused_whole_and_leaks_nothing(sm):
    keys = keys_of(3, "oom")  # 24 MiB against a 16 MiB L1
    assert sm.reserve_write(keys, LARGE) == {}
    st = sm.stats()
    assert st["out_of_memory"] == 3 and st["l1_used_bytes"] == 0 and clean(sm)
    assert len(sm.reserve_write(keys[:1], LARGE)) == 1  # what fits still fits
    sm.finish_write(keys[:1])
    assert clean(sm)


def test_a_full_l1_of_evictable_objects_makes_room_for_new_writes(sm):
    old = keys_of(1, "old") + keys_of(1, "old2")
    for key in old:
        write(sm, [key], LARGE)
    sm.flush(timeout=5.0)  # objects being copied to L2 are not evictable meanwhile
    new = keys_of(1, "new")
    assert len(sm.reserve_write(new, LARGE)) == 1  # evicts one of the finished ones
    sm.finish_write(new)
    st = sm.stats()  # made room on demand, or the background eviction had already
    assert st["evicted"] + st["evicted_on_demand"] >= 1 and st["l1_objects"] <= 2
    assert sm.lookup(new).tiers["L1"] == 1 and sm.lookup(old).tiers["L1"] < 2
    assert clean(sm)


def test_prefetch_stops_at_the_first_gap_and_leaves_the_rest_unlocked(sm):
    keys = keys_of(5, "gap")
    write(sm, keys[:2])
    write(sm, keys[3:])
    h = sm.submit_prefetch_task(keys, SMALL)
    assert h.wait(5.0) == 2
    st = sm.stats()
    assert st["l1_read_locked"] == 2 and st["hits"] == 2 and st["misses"] == 3
    assert is_free(sm, keys[3]) and is_free(sm, keys[4])
    assert not is_free(sm, keys[0])
    assert sm.finish_read_prefetched(keys[:2]) == 2 and clean(sm)


def test_extra_readers_hold_one_plus_extra_locks(sm):
    keys = keys_of(2, "readers")
    write(sm, keys)
    assert sm.submit_prefetch_task(keys, SMALL, extra_readers=2).wait(5.0) == 2
    assert sm.finish_read_prefetched(keys, extra_readers=1) == 2  # two of three released
    assert sm.delete(keys) == [5, 5]  # KVA_KEY_LOCKED: one reader left
    assert not sm.memcheck()
    assert sm.finish_read_prefetched(keys) == 2
    assert clean(sm) and sm.delete(keys) == [0, 0]


def test_each_reader_sees_the_bytes_while_another_still_holds_them(sm):
    keys = keys_of(3, "multi")
    write(sm, keys)
    sm.flush(timeout=10.0)  # only the readers' locks from here on
    handles = [sm.submit_prefetch_task(keys, SMALL) for _ in range(3)]
    assert [h.wait(5.0) for h in handles] == [3, 3, 3]
    for reader in range(3):
        with sm.read_prefetched_results(keys, SMALL) as objs:
            assert all(torch.equal(o.tensor, fill(i)) for i, o in enumerate(objs))
        assert sm.finish_read_prefetched(keys) == 3
        assert sm.memcheck() == (reader == 2)


def test_the_prefix_spans_l1_then_l2_and_is_served_byte_exact(sm):
    keys = keys_of(4, "l1l2")
    write(sm, keys)
    sm.flush(timeout=5.0)
    assert sm.delete(keys[2:]) == [0, 0]  # L1 keeps 0..1, the mock tier has all four
    hits = sm.lookup(keys)
    assert hits.total == 4 and hits.tiers == {"L1": 2, "mock0": 2}
    assert sm.l2_contains("mock0", keys[3])
    assert sm.submit_prefetch_task(keys, SMALL).wait(5.0) == 4
    with sm.read_prefetched_results(keys, SMALL) as objs:
        assert all(torch.equal(o.tensor, fill(i)) for i, o in enumerate(objs))
    assert sm.finish_read_prefetched(keys) == 4
    assert sm.tier_stats("mock0")["loaded_keys"] == 2 and clean(sm)


def test_a_pinned_prefix_survives_clear_until_unpinned(sm):
    keys = keys_of(2, "pin")
    write(sm, keys)
    assert sm.lookup(keys, pin=True).tiers["L1"] == 2
    assert sm.clear() == 0 and sm.lookup(keys).tiers["L1"] == 2
    assert not sm.memcheck()
    assert sm.unpin(keys) == 2 and clean(sm)
    assert sm.clear() == 2 and sm.lookup(keys).tiers["L1"] == 0


def test_freeze_and_bypass_keep_l2_out():
    with kvact.Runtime(small_config()) as rt:
        sm = rt.storage
        keys = keys_of(2, "freeze")
        sm.set_freeze(True)
        write(sm, keys)
        sm.flush(timeout=5.0)
        assert not sm.l2_contains("mock0", keys[0])
        sm.set_freeze(False)
        sm.set_tier_bypass("mock0", True)
        assert sm.tier_bypassed("mock0") and sm.tier_stats("mock0")["bypassed"]
        more = keys_of(2, "bypass")
        write(sm, more)
        sm.flush(timeout=5.0)
        assert not sm.l2_contains("mock0", more[0])
        sm.set_tier_bypass("mock0", False)
        assert not sm.tier_bypassed("mock0")
        with pytest.raises(kvact.KvactError):
            sm.set_tier_bypass("L1", True)
        with pytest.raises(kvact.KvactError):
            sm.tier_stats("nosuchtier")
        assert clean(sm)


def test_a_forced_delete_and_rewrite_never_serves_the_old_bytes(sm):
    key = keys_of(1, "rewrite")
    write(sm, key)
    sm.set_freeze(True)  # keep the mock tier's copy out of the later prefetch
    assert sm.submit_prefetch_task(key, SMALL).wait(5.0) == 1
    assert sm.delete(key, force=True) == [0]
    assert sm.lookup(key).total == 0
    assert sm.reserve_write(key, SMALL) == {}  # not writable while the old reader holds it
    with sm.read_prefetched_results(key, SMALL) as objs:
        assert torch.equal(objs[0].tensor, fill(0))  # the reader keeps its bytes
    assert sm.finish_read_prefetched(key) == 1
    got = sm.reserve_write(key, SMALL)
    got[key[0]].tensor.fill_(42.0)
    sm.finish_write(key)
    assert sm.submit_prefetch_task(key, SMALL).wait(5.0) == 1
    with sm.read_prefetched_results(key, SMALL) as objs:
        assert torch.equal(objs[0].tensor, torch.full((4, 256), 42.0))
    sm.finish_read_prefetched(key)
    assert clean(sm)
