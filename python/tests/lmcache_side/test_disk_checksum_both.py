"""test_disk_checksum_both.py — LMCache's fs adapter checksum tests (its
tests/v1/distributed/test_fs_l2_adapter_checksum.py), in our words, against LMCache
0.5.6's fs adapter and kvact's disk tier, each under its storage manager.

A stored object whose bytes no longer verify must be a miss, never the wrong bytes, and
its room given back; the key can then be stored again. Upstream's fs adapter has an
opt-in crc32 trailer; lmcache 0.5.6's has no checksum at all (no option, no trailer), so
the corruption cases run on kvact's two sides only, and say so.
"""
import pytest
import torch

from sides import pattern
from test_storage_manager_both import DTYPE, NBYTES, SHAPE, assert_reads, prefetched, write

NO_CHECKSUM = ("lmcache 0.5.6's FSL2Adapter keeps no checksum (FSL2AdapterConfig has no "
               "checksum option and writes the payload alone; crc32 came after 0.5.6): a "
               "flipped payload byte is served as a hit with the wrong bytes")


def stored_on_disk_only(sm, idx):
    """Writes the objects of idx, waits for the disk tier to hold them, empties L1."""
    keys = write(sm, idx)
    sm.settle(keys)
    sm.clear()
    assert sm.l1_used_bytes() == 0
    return keys


def test_an_object_round_trips_through_the_disk_tier(storage):
    sm = storage(disk=True)
    keys = stored_on_disk_only(sm, [7])
    assert sm.l2_bytes() >= NBYTES
    found = prefetched(sm, keys)
    assert found.prefix == 1 and found.from_l2 == 1
    assert_reads(sm, keys, [7])
    sm.finish_read(keys)


@pytest.mark.sides(lmcache_lacks=NO_CHECKSUM)
@pytest.mark.parametrize("where", ["payload_first", "payload_last", "header_magic",
                                   "header_checksum"])
def test_a_flipped_bit_is_a_miss_and_frees_the_object(storage, where):
    sm = storage(disk=True)
    keys = stored_on_disk_only(sm, [7])
    sm.corrupt(where, NBYTES)
    found = prefetched(sm, keys)
    assert found.prefix == 0 and found.from_l2 == 0
    assert sm.l2_bytes() == 0  # dropped, not kept for a next miss
    assert prefetched(sm, keys).prefix == 0


@pytest.mark.sides(lmcache_lacks=NO_CHECKSUM)
def test_a_dropped_key_can_be_stored_again(storage):
    sm = storage(disk=True)
    keys = stored_on_disk_only(sm, [7])
    sm.corrupt("payload_first", NBYTES)
    assert prefetched(sm, keys).prefix == 0
    again = stored_on_disk_only(sm, [7])  # the same key, written anew
    assert again == keys and sm.l2_bytes() >= NBYTES
    assert prefetched(sm, keys).prefix == 1
    assert_reads(sm, keys, [7])
    sm.finish_read(keys)


@pytest.mark.sides(kvact_differs="no call deletes a key from an L2 tier: a tier's keys go by "
                   "eviction, and a dropped rewrite is masked by absent marks instead")
def test_disk_usage_returns_to_zero_after_delete(storage):
    sm = storage(disk=True)
    keys = stored_on_disk_only(sm, [7])
    assert sm.l2_bytes() >= NBYTES
    sm.l2_delete(keys)
    assert sm.l2_bytes() == 0
    assert prefetched(sm, keys).prefix == 0
