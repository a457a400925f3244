"""sides.py — the two storage managers the suite judges, behind one thin adapter each:
LMCache's StorageManager (lmcache 0.5.6, on CPU) and kvact's (embedded, or a client of
kvactd).

Run by the LMCache peer environment's interpreter (run.sh), never by Debian's python3:
python/tests/conftest.py keeps this folder out of the main suite. LMCache is imported
unconditionally: a missing LMCache is a failed set-up, not a skipped test.

Each adapter maps the suite's calls onto its manager's own, as a user of it would
write them, and absorbs only what differs in shape, not in behaviour:

  suite call                 LMCache 0.5.6                          kvact
  prefetch(keys, layout,     submit_prefetch_task(PrefetchTaskSpec  submit_prefetch_task(keys,
    readers, policy, lock)     ([GroupedObjectKeys(keys, 0,           layout, extra_readers=
                               layout)], num_kv_readers=readers,      readers - 1)
                               fetching_policy, lock_mode))
  result(handle)             wait_prefetch_status, then             handle.wait(): the prefix
                               query_prefetch_status: a bitmap        count
  finish_read(keys, locks)   finish_read_prefetched(keys,           finish_read_prefetched(keys,
                               read_locks=locks)                      extra_readers=locks - 1)
  delete(keys, force)        delete_l1_keys: (deleted, skipped)     delete: per-key statuses,
                                                                      counted as (0, KEY_LOCKED)
  read(keys)                 read_prefetched_results(keys)          read_prefetched_results(keys):
                                                                      no layout, as LMCache's call
  rewritable(key, layout)    its L1 manager's object state:         reserve_write(mode="update")
                               resident, neither lock held            works (then finished)
  settle(keys)               poll: its L2 listener heard keys       flush(): the L1->L2 stores
                               stored, their read locks given back    queued so far are done
  l2_bytes(), l2_delete      the adapters' get_usage(), delete()    tier_stats()["adapter"];
                                                                      no delete (raises)
  corrupt(where)             flips a bit of the fs adapter's file   flips a bit of the disk
                                                                      tier's slot

What one side cannot do at all is not emulated: the call raises, and the case says
so (pytest.mark.sides in conftest.py).
"""
import contextlib
import json
import os
import pathlib
import time
from dataclasses import dataclass

import torch
from lmcache.v1.distributed.api import (GroupedObjectKeys, MemoryLayoutDesc, ObjectKey,
                                        PrefetchLockMode, PrefetchTaskSpec)
from lmcache.v1.distributed.config import (EvictionConfig, L1ManagerConfig,
                                           L1MemoryManagerConfig, StorageManagerConfig)
from lmcache.v1.distributed.internal_api import L2AdapterListener
from lmcache.v1.distributed.l2_adapters.config import L2AdaptersConfig
from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import FSL2AdapterConfig
from lmcache.v1.distributed.l2_adapters.mock_l2_adapter import MockL2AdapterConfig
from lmcache.v1.distributed.storage_manager import StorageManager

import kvact

KEY_LOCKED = 5   # kvact.h KVA_KEY_LOCKED
MODEL = "test_model"
MIB = 1 << 20
DISK_BYTES = 16 * MIB  # kvact's disk tier file (LMCache's fs adapter is unbounded)
# Where a byte is flipped in a stored object (test_disk_checksum_both.py): kvact's disk
# slot is a 4 KiB header block (l2/adapters/object_header.h: magic at 0, its own
# checksum at 160) then the payload; LMCache's fs file is the payload alone.
SLOT_MAGIC, HEADER_BLOCK = b"KVASLOT1", 4096
HEADER_AT = {"header_magic": 0, "header_checksum": 160}


@dataclass(frozen=True)
class Found:
    """A finished prefetch: the contiguous prefix held, every index held (the prefix
    itself unless the policy was sparse), and how many of them came from L2."""

    prefix: int
    found: tuple
    from_l2: int


def pattern(i, nbytes):
    """The bytes object i is written with: distinct per object and per position."""
    return (torch.arange(nbytes, dtype=torch.int64) * (2 * i + 1) + i).to(torch.uint8)


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("%s not reached in %.0f s" % (what, timeout))
        time.sleep(0.01)


class _StoredKeys(L2AdapterListener):
    """The keys LMCache's L2 adapters said they stored (and have not deleted since)."""

    def __init__(self):
        self.keys = set()

    def on_l2_keys_stored(self, keys, sizes):
        self.keys.update(keys)

    def on_l2_keys_accessed(self, keys):
        pass

    def on_l2_keys_deleted(self, keys):
        self.keys.difference_update(keys)


class LMCacheSide:
    """LMCache's StorageManager on CPU: eager L1 (use_lazy=False: the lazy allocator
    pins memory), LRU eviction, and one L2 adapter or none: l2 "mock" is its
    MockL2Adapter (10 MB at 10 GB/s, as its own tests configure it), l2 "disk" its
    FSL2Adapter (one file per object) in the folder disk."""

    name = "lmcache"

    def __init__(self, l1_bytes, l2, disk=None):
        memory = L1MemoryManagerConfig(size_in_bytes=l1_bytes, use_lazy=False,
                                       init_size_in_bytes=l1_bytes, align_bytes=0x1000)
        self.disk = disk
        adapters = []
        if l2 == "mock":
            adapters = [MockL2AdapterConfig(max_size_gb=0.01, mock_bandwidth_gb=10.0)]
        elif l2 == "disk":
            adapters = [FSL2AdapterConfig(base_path=str(disk))]
        self.sm = StorageManager(StorageManagerConfig(
            l1_manager_config=L1ManagerConfig(memory_config=memory, write_ttl_seconds=600,
                                              read_ttl_seconds=300),
            eviction_config=EvictionConfig(eviction_policy="LRU"),
            l2_adapter_config=L2AdaptersConfig(adapters=adapters)))
        self.stored = _StoredKeys()
        self.sm.register_l2_listener(self.stored)

    def key(self, i):
        return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i), model_name=MODEL, kv_rank=0)

    def layout(self, shape, dtype):
        return MemoryLayoutDesc(shapes=[torch.Size(shape)], dtypes=[dtype])

    # ---- write path
    def reserve(self, keys, layout):
        return self.sm.reserve_write(keys, layout)

    def finish_write(self, keys):
        self.sm.finish_write(keys)

    def abort_write(self, keys):
        return self.sm.abort_write(keys)  # not in 0.5.6: AttributeError

    def rewritable(self, key, layout):
        """Whether key is resident and unlocked. LMCache 0.5.6 has no update mode (a
        resident key is never reservable), so this reads what kvact's update mode asks
        for from its L1 manager's state."""
        state = self.sm._l1_manager.get_object_state(key)
        return state is not None and not state.read_lock.is_locked() and \
            not state.write_lock.is_locked()

    # ---- read path
    def prefetch(self, keys, layout, readers=1, policy="prefix", lock=True):
        row = GroupedObjectKeys(keys=keys, object_group_id=0, layout_desc=layout)
        spec = PrefetchTaskSpec(key_groups=[row], num_kv_readers=readers,
                                fetching_policy={"prefix": "prefix", "sparse": "full"}[policy],
                                lock_mode=PrefetchLockMode.LOCK if lock else
                                PrefetchLockMode.NO_LOCK)
        return self.sm.submit_prefetch_task(spec)

    def result(self, handle, timeout=10.0):
        assert self.sm.wait_prefetch_status(handle, timeout), "prefetch not done in time"
        res = self.sm.query_prefetch_status(handle)
        hits = res.hit_cells[0]
        return Found(hits.count_leading_ones(), tuple(hits.get_indices_list()),
                     res.l2_hit_count)

    def read(self, keys):
        return self.sm.read_prefetched_results(keys)

    def finish_read(self, keys, locks=1):
        self.sm.finish_read_prefetched(keys, read_locks=locks)

    @staticmethod
    def obj_bytes(obj):
        return torch.frombuffer(bytearray(obj.byte_array), dtype=torch.uint8)

    @staticmethod
    def obj_tensor(obj):
        return obj.tensor

    # ---- maintenance
    def delete(self, keys, force=False):
        return self.sm.delete_l1_keys(keys, force=force)

    def clear(self):
        self.sm.clear()

    def l1_used_bytes(self):
        return self.sm.get_l1_usage()[0]

    def write_locked(self):
        """Objects reserved for writing and not finished (LMCache: staging objects)."""
        return self.sm.report_status()["l1_manager"]["staging_object_count"]

    def settle(self, keys=()):
        """Waits until the L2 adapter said it stored keys, then until its store
        controller gave back the read locks it took on them to copy them (the store
        controller's own counters are updated by its thread: an idle one may not have
        seen the keys yet)."""
        wait_until(lambda: self.stored.keys.issuperset(keys), what="keys stored in LMCache's L2")

        def unlocked():
            states = [self.sm._l1_manager.get_object_state(k) for k in keys]
            return not any(s and s.read_lock.is_locked() for s in states)
        wait_until(unlocked, what="LMCache's store controller's read locks given back")

    # ---- the L2 tier itself
    def l2_bytes(self):
        return sum(a.get_usage().total_bytes_used for _, a in self.sm.l2_adapters())

    def l2_delete(self, keys):
        for _, adapter in self.sm.l2_adapters():
            adapter.delete(keys)

    def corrupt(self, where, nbytes):
        """Flips one bit of the one object file of the fs adapter. 0.5.6 writes the
        payload alone (no header, no trailer): only payload positions exist."""
        if where not in ("payload_first", "payload_last"):
            raise NotImplementedError("lmcache 0.5.6's fs adapter writes no header or trailer")
        files = list(pathlib.Path(self.disk).glob("*.data"))
        assert len(files) == 1, files
        _flip(files[0], 0 if where == "payload_first" else nbytes - 1)

    def locks_left(self, timeout=10.0):
        """"" when no lock is held and the L1 accounting checks, else what is held
        (after up to timeout seconds for the store controller to give its locks back)."""
        def held():
            st = self.sm.report_status()["l1_manager"]
            out = {f: st[f] for f in ("read_locked_count", "write_locked_count",
                                      "staging_object_count") if st[f]}
            if not self.sm.memcheck():
                out["memcheck"] = False
            return out
        deadline = time.monotonic() + timeout
        while held() and time.monotonic() < deadline:
            time.sleep(0.01)
        return repr(held()) if held() else ""

    def close(self):
        self.sm.close()


def kvact_tiers(l2, disk=None):
    """kvact's l2 setting for l2 None, "mock" (64 MiB) or "disk" (a 16 MiB file in the
    folder disk)."""
    return {None: [], "mock": [{"type": "mock", "capacity_bytes": 1 << 26}],
            "disk": [{"type": "disk", "path": str(disk) + "/kv.bin",
                      "capacity_bytes": DISK_BYTES}]}[l2]


class KvactSide:
    """kvact's StorageManager: embedded (its own runtime, L1 of l1_bytes, the L2 tier
    kvact_tiers names), or a client of the kvactd at socket (which has that L1 and tier)."""

    def __init__(self, l1_bytes, l2, disk=None, socket=None):
        self.disk, self.tier = disk, {None: None, "mock": "mock0", "disk": "disk0"}[l2]
        if socket is None:
            self.name = "kvact"
            self.rt = kvact.Runtime({"l1.size_bytes": l1_bytes, "l1.hugepages": False,
                                     "l1.pinned": False, "l1.prefault": False,
                                     "runtime.workers": 2, "l2": kvact_tiers(l2, disk)})
        else:
            self.name = "kvactd"
            self.rt = kvact.Runtime({"client.socket": socket, "runtime.workers": 2})
            wait_until(self._connected, 20.0, "a connection to kvactd")
        self.sm = self.rt.storage

    def _connected(self):
        try:
            self.rt.storage.stats()
            return True
        except kvact.KvactError:
            return False

    def key(self, i):
        return kvact.ObjectKey(MODEL, 0, 0, i.to_bytes(4, "big"))

    def layout(self, shape, dtype):
        return kvact.MemoryLayoutDesc(shapes=[tuple(shape)], dtypes=[str(dtype)])

    # ---- write path
    def reserve(self, keys, layout):
        return self.sm.reserve_write(keys, layout)

    def finish_write(self, keys):
        self.sm.finish_write(keys)

    def abort_write(self, keys):
        return self.sm.abort_write(keys)

    def rewritable(self, key, layout):
        """Whether key is resident and unlocked: a reserve in mode "update" works."""
        got = self.sm.reserve_write([key], layout, mode="update")
        if got:
            self.sm.finish_write([key])
        return bool(got)

    # ---- read path
    def prefetch(self, keys, layout, readers=1, policy="prefix", lock=True):
        if policy != "prefix":
            raise NotImplementedError("kvact has no sparse prefetch (issue 36)")
        loaded = self.sm.stats()["l2_loaded_keys"]
        return loaded, self.sm.submit_prefetch_task(keys, layout, extra_readers=readers - 1,
                                                     mode="default" if lock else "warm")

    def result(self, handle, timeout=10.0):
        loaded, h = handle
        hits = h.wait(timeout)
        assert hits is not None, "prefetch not done in time"
        return Found(hits, tuple(range(hits)), self.sm.stats()["l2_loaded_keys"] - loaded)

    def read(self, keys):
        return self.sm.read_prefetched_results(keys)

    def finish_read(self, keys, locks=1):
        self.sm.finish_read_prefetched(keys, extra_readers=locks - 1)

    @staticmethod
    def obj_bytes(obj):
        return torch.frombuffer(bytearray(obj.buffer), dtype=torch.uint8)

    @staticmethod
    def obj_tensor(obj):
        return obj.tensor

    # ---- maintenance
    def delete(self, keys, force=False):
        return self.sm.delete(keys, force=force).counts  # LMCache's (deleted, skipped)

    def clear(self):
        self.sm.clear()

    def l1_used_bytes(self):
        return self.sm.stats()["l1_used_bytes"]

    def write_locked(self):
        return self.sm.stats()["l1_write_locked"]

    def settle(self, keys=()):
        self.sm.flush(timeout=10.0)

    # ---- the L2 tier itself
    def l2_bytes(self):
        return self.sm.tier_stats(self.tier)["adapter"]["bytes"]

    def l2_delete(self, keys):
        raise NotImplementedError("kvact has no call that deletes a key from an L2 tier")

    def corrupt(self, where, nbytes):
        """Flips one bit of the one object slot in the disk tier's file."""
        path = pathlib.Path(self.disk) / "kv.bin"
        data = path.read_bytes()
        slot = data.find(SLOT_MAGIC)
        assert slot >= 0 and data.count(SLOT_MAGIC) == 1, "not one object header in the file"
        payload = slot + HEADER_BLOCK
        _flip(path, {"payload_first": payload, "payload_last": payload + nbytes - 1,
                     **{k: slot + v for k, v in HEADER_AT.items()}}[where])

    def locks_left(self):
        return self.sm.memcheck_report(wait_stores=10.0)

    def close(self):
        self.rt.close()


def _flip(path, offset):
    """Flips the low bit of the byte at offset of the file, on the device (fsync)."""
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([byte[0] ^ 1]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def opened(side, l1_bytes, l2, kvactd, disk=None):
    """The storage manager of side ("lmcache", "kvact" or "kvactd"), closed at the end;
    l2: None, "mock" or "disk" (in the folder disk); kvactd(l1_bytes, l2_json) is
    peer_support.kvactd."""
    if side == "lmcache":
        sm = LMCacheSide(l1_bytes, l2, disk)
    elif side == "kvact":
        sm = KvactSide(l1_bytes, l2, disk)
    if side != "kvactd":
        try:
            yield sm
        finally:
            sm.close()
        return
    with kvactd(l1_bytes, json.dumps(kvact_tiers(l2, disk))) as sock:
        sm = KvactSide(l1_bytes, l2, disk, socket=sock)
        try:
            yield sm
        finally:
            sm.close()
