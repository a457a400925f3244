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
  settle(keys)               poll: keys in the L2 adapter, the      flush(): the L1->L2 stores
                               store controller idle                  queued so far are done

What one side cannot do at all is not emulated: the call raises, and the case says
so (pytest.mark.sides in conftest.py).
"""
import contextlib
import time
from dataclasses import dataclass

import torch
from lmcache.v1.distributed.api import (GroupedObjectKeys, MemoryLayoutDesc, ObjectKey,
                                        PrefetchLockMode, PrefetchTaskSpec)
from lmcache.v1.distributed.config import (EvictionConfig, L1ManagerConfig,
                                           L1MemoryManagerConfig, StorageManagerConfig)
from lmcache.v1.distributed.l2_adapters.config import L2AdaptersConfig
from lmcache.v1.distributed.l2_adapters.mock_l2_adapter import MockL2AdapterConfig
from lmcache.v1.distributed.storage_manager import StorageManager

import kvact

KEY_LOCKED = 5   # kvact.h KVA_KEY_LOCKED
MODEL = "test_model"
MIB = 1 << 20


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


class LMCacheSide:
    """LMCache's StorageManager on CPU: eager L1 (use_lazy=False: the lazy allocator
    pins memory), LRU eviction, and with l2 its MockL2Adapter (10 MB at 10 GB/s, as its
    own tests configure it)."""

    name = "lmcache"

    def __init__(self, l1_bytes, l2):
        memory = L1MemoryManagerConfig(size_in_bytes=l1_bytes, use_lazy=False,
                                       init_size_in_bytes=l1_bytes, align_bytes=0x1000)
        adapters = [MockL2AdapterConfig(max_size_gb=0.01, mock_bandwidth_gb=10.0)] if l2 else []
        self.sm = StorageManager(StorageManagerConfig(
            l1_manager_config=L1ManagerConfig(memory_config=memory, write_ttl_seconds=600,
                                              read_ttl_seconds=300),
            eviction_config=EvictionConfig(eviction_policy="LRU"),
            l2_adapter_config=L2AdaptersConfig(adapters=adapters)))

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
        """Waits until keys are in the L2 adapter and the store controller is idle (its
        read locks on the objects it copies given back)."""
        adapters = [a for _, a in self.sm.l2_adapters()]
        wait_until(lambda: all(a.debug_has_key(k) for a in adapters for k in keys),
                   what="keys stored in LMCache's mock L2")

        def idle():
            st = self.sm.report_status()["store_controller"]
            return st["pending_keys_count"] == 0 and st["in_flight_task_count"] == 0
        wait_until(idle, what="LMCache's store controller idle")

    def locks_left(self):
        """"" when no lock is held and the L1 accounting checks, else what is held."""
        self.settle()
        st = self.sm.report_status()["l1_manager"]
        held = {f: st[f] for f in ("read_locked_count", "write_locked_count",
                                   "staging_object_count") if st[f]}
        if not self.sm.memcheck():
            held["memcheck"] = False
        return "" if not held else repr(held)

    def close(self):
        self.sm.close()


class KvactSide:
    """kvact's StorageManager: embedded (its own runtime, L1 of l1_bytes, with l2 one
    mock tier), or a client of the kvactd at socket (which has that L1 and tier)."""

    def __init__(self, l1_bytes, l2, socket=None):
        if socket is None:
            self.name = "kvact"
            tiers = [{"type": "mock", "capacity_bytes": 1 << 26}] if l2 else []
            self.rt = kvact.Runtime({"l1.size_bytes": l1_bytes, "l1.hugepages": False,
                                     "l1.pinned": False, "l1.prefault": False,
                                     "runtime.workers": 2, "l2": tiers})
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
        return self.sm.abort_write(keys)  # not built yet (issue 36): AttributeError

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
        if not lock:
            raise NotImplementedError("kvact has no warm (unlocked) prefetch (issue 36)")
        loaded = self.sm.stats()["l2_loaded_keys"]
        return loaded, self.sm.submit_prefetch_task(keys, layout, extra_readers=readers - 1)

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
        status = self.sm.delete(keys, force=force)
        return status.count(0), status.count(KEY_LOCKED)

    def clear(self):
        self.sm.clear()

    def l1_used_bytes(self):
        return self.sm.stats()["l1_used_bytes"]

    def write_locked(self):
        return self.sm.stats()["l1_write_locked"]

    def settle(self, keys=()):
        self.sm.flush(timeout=10.0)

    def locks_left(self):
        return self.sm.memcheck_report(wait_stores=10.0)

    def close(self):
        self.rt.close()


@contextlib.contextmanager
def opened(side, l1_bytes, l2, kvactd):
    """The storage manager of side ("lmcache", "kvact" or "kvactd"), closed at the end;
    kvactd(l1_bytes, l2_json) is peer_support.kvactd."""
    if side == "lmcache":
        sm = LMCacheSide(l1_bytes, l2)
        try:
            yield sm
        finally:
            sm.close()
    elif side == "kvact":
        sm = KvactSide(l1_bytes, l2)
        try:
            yield sm
        finally:
            sm.close()
    else:
        with kvactd(l1_bytes, '[{"type":"mock"}]' if l2 else "[]") as sock:
            sm = KvactSide(l1_bytes, l2, socket=sock)
            try:
                yield sm
            finally:
                sm.close()
