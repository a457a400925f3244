"""storage.py — kvact.StorageManager: LMCache's StorageManager calls over kva_storage.

Batched calls take lists of ObjectKey; per-key results are returned, never
raised; only a refused call raises KvactError. The manager remembers the
MemoryObjs it handed out so that releasing a lock also makes its objects
refuse new views.
"""
import contextlib
import ctypes
import threading
from dataclasses import dataclass

from ._lib import (MEMCHECK_FIELDS, NODE_STATES, PREFETCH_AS_PLANNED, STATS_FIELDS,
                   TIER_KEYS_FIELDS, Buf, L2NodeStats, L2TierKeys, L2TierStats, Layout, LoadPlan,
                   MemcheckOpts, MemcheckReport, PrefetchOpts, StorageStats, TierHit, TierHits,
                   lib, timeout_ms)
from .errors import KvactError, check
from .keys import key_array
from .layout import MemoryLayoutDesc, layout_of_c
from .memory import MemoryObj
from .prefetch import PrefetchHandle, Reaper

_MODES = {"new": 0, "update": 1, "all": 2}
_REPORT_LEN = 4096
_LAYOUT_SIZE = ctypes.sizeof(Layout)


@dataclass(frozen=True)
class LookupResult:
    """kva_lookup's answer: the contiguous prefix held, in all and tier by tier
    (tiers: {"L1": hits, <l2 tier name>: hits, ...} in lookup order)."""

    total: int
    tiers: dict


@dataclass(frozen=True)
class TierNodes:
    """kva_l2_get_tier_nodes' answer: the tier's servers, each a dict (addr "host:port",
    state "ok" / "failed" / "bypassed", slots, failed_s, outages, failures, failed_cmds),
    and the seconds since the tier read its slot map (None: it has none)."""

    nodes: list
    map_age_s: float = None

    def __iter__(self):  # nodes, map_age_s = sm.tier_nodes(tier)
        return iter((self.nodes, self.map_age_s))


def _node(n):
    return {"addr": n.addr.decode(), "state": NODE_STATES.get(n.state, str(n.state)),
            "slots": n.slots, "failed_s": n.failed_s, "outages": n.outages,
            "failures": n.failures, "failed_cmds": n.failed_cmds}


@dataclass(frozen=True)
class LoadPlanResult:
    """kva_plan_load's answer: what each tier holds (found, a LookupResult), how many keys
    from the first are worth loading (L1 hits included), the keys found but skipped as slower
    than recomputing, per tier ({name: keys}), and the predicted seconds of loading that
    prefix, of recomputing it all, and of the split at split_at (docs/load-plan.md)."""

    found: LookupResult
    worth: int
    skipped: dict
    load_s: float
    recompute_s: float
    split_at: int
    split_s: float
    not_asked: list = ()


_TIER0, _TIER_SIZE, _NAME_LEN = TierHits.tier.offset, ctypes.sizeof(TierHit), TierHit.hits.offset
_TIER_NAMES = {}  # a tier's name field as kvact wrote it -> its str


def _tier_hits(raw, ntiers):
    """{name: hits} of a kva_tier_hits' raw bytes, read without a ctypes object per field."""
    out = {}
    for i in range(min(ntiers, 8)):
        off = _TIER0 + i * _TIER_SIZE
        field = raw[off:off + _NAME_LEN]
        name = _TIER_NAMES.get(field)
        if name is None:
            name = _TIER_NAMES[field] = field.split(b"\0", 1)[0].decode()
        out[name] = int.from_bytes(raw[off + _NAME_LEN:off + _TIER_SIZE], "little")
    return out


def _layout(layout, optional=False):
    """layout's kva_layout (None when optional and absent); TypeError for anything else."""
    if layout is None and optional:
        return None
    if not isinstance(layout, MemoryLayoutDesc):
        raise TypeError("layout must be a kvact.MemoryLayoutDesc, got %r" % type(layout).__name__)
    return layout._c


def _layouts_of(layouts, n):
    """The MemoryLayoutDesc of each of n kva_layouts a read gave back: one compare of all
    the bytes when they are all alike, as a read's usually are, else one per key."""
    raw = bytes(layouts)
    first = raw[:_LAYOUT_SIZE]
    if raw == first * n:
        return [layout_of_c(first)] * n
    out, last, desc = [], None, None
    for i in range(0, n * _LAYOUT_SIZE, _LAYOUT_SIZE):
        one = raw[i:i + _LAYOUT_SIZE]
        if one != last:
            last, desc = one, layout_of_c(one)
        out.append(desc)
    return out


def _readers(extra_readers):
    if not isinstance(extra_readers, int) or not 0 <= extra_readers <= 127:
        raise ValueError("extra_readers must be an int in 0..127, got %r" % (extra_readers,))
    return extra_readers


class DeleteStatuses(list):
    """delete()'s per-key statuses (0 = removed, 5 = KVA_KEY_LOCKED: skipped, 1 =
    KVA_KEY_NOT_EXIST), with LMCache's counts beside them: `deleted`, `skipped`, and
    `counts` = (deleted, skipped) as LMCache's delete returns them."""

    __slots__ = ()

    @property
    def deleted(self):
        return self.count(0)

    @property
    def skipped(self):
        return self.count(5)  # KVA_KEY_LOCKED

    @property
    def counts(self):
        return self.deleted, self.skipped


class StorageManager:
    """The runtime's storage (rt.storage); every call is thread-safe and releases the GIL."""

    def __init__(self, ptr, runtime):
        self._ptr, self._runtime = ptr, runtime
        self._lock = threading.Lock()
        self._writes = {}  # ObjectKey -> MemoryObj, write-locked by this manager
        self._reads = {}   # ObjectKey -> [MemoryObj], from read_prefetched_results
        self._reaper = Reaper()  # gives back the locks of handles closed while loading
        self._closed = False     # the runtime shut down: no call may reach C

    # ---- write path -----------------------------------------------------------
    def reserve_write(self, keys, layout, mode="new"):
        """Write-locks keys: {key: MemoryObj} for those reserved (the others failed)."""
        if mode not in _MODES:
            raise ValueError("mode must be one of %s" % ", ".join(_MODES))
        keys = list(keys)
        if not keys:  # nothing to do, as LMCache takes it (an empty reserve, say)
            _layout(layout)
            return {}
        arr = key_array(keys)
        bufs, status = (Buf * len(keys))(), (ctypes.c_int * len(keys))()
        check(lib.kva_reserve_write(self._ptr, arr, len(keys), _layout(layout), _MODES[mode],
                                    bufs, status))
        words = memoryview(bufs).cast("B").cast("Q").tolist()  # ptr, len of each key
        out = {}
        for i, st in enumerate(memoryview(status).cast("B").cast("i").tolist()):
            if st == 0:
                key = keys[i]
                out[key] = MemoryObj(key, layout, words[2 * i], words[2 * i + 1])
        with self._lock:
            self._writes.update(out)
        return out

    def finish_write(self, keys):
        """Write-locked -> ready; a list of per-key statuses (0 = done)."""
        keys = list(keys)
        if not keys:
            return []
        arr = key_array(keys)
        status = (ctypes.c_int * len(keys))()
        check(lib.kva_finish_write(self._ptr, arr, len(keys), status))
        self._release_writes(keys)
        return memoryview(status).cast("B").cast("i").tolist()

    def abort_write(self, keys):
        """Gives write reservations back unwritten (LMCache's abort_write): each object is
        removed at once, never readable, never stored; the key can be reserved as new
        again. A list of per-key statuses (0 = aborted)."""
        keys = list(keys)
        if not keys:
            return []
        arr = key_array(keys)
        status = (ctypes.c_int * len(keys))()
        check(lib.kva_abort_write(self._ptr, arr, len(keys), status))
        self._release_writes(keys)
        return memoryview(status).cast("B").cast("i").tolist()

    def _release_writes(self, keys):
        with self._lock:
            pop = self._writes.pop
            for key in keys:
                obj = pop(key, None)
                if obj is not None:
                    obj._valid = False

    # ---- read path ------------------------------------------------------------
    def submit_prefetch_task(self, keys, layout=None, extra_readers=0, as_planned=False,
                             mode="default", trim="prefix"):
        """Read-locks the L1 prefix of keys and loads the rest from L2: a PrefetchHandle.
        as_planned=True: the caller judged these keys worth loading already (plan_load), so
        the load_or_recompute policy does not judge them again (KVA_PREFETCH_AS_PLANNED).
        mode="warm" (LMCache's NO_LOCK prefetch): the keys are brought into L1 and counted,
        but no lock is left: nothing to read or release afterwards. trim="sparse" (every
        key found, not only the prefix) is not built yet: KvactError -7."""
        if mode not in ("default", "warm"):
            raise ValueError("mode must be \"default\" or \"warm\", got %r" % (mode,))
        if trim not in ("prefix", "sparse"):
            raise ValueError("trim must be \"prefix\" or \"sparse\", got %r" % (trim,))
        warm = mode == "warm"
        keys = list(keys)
        readers = _readers(extra_readers)
        if not keys:  # done at once, no hit: nothing reaches C
            _layout(layout, optional=True)
            return PrefetchHandle.done(self, readers)
        arr = key_array(keys)
        opts = PrefetchOpts(extra_readers=readers, warm=int(warm), sparse=int(trim == "sparse"),
                            flags=PREFETCH_AS_PLANNED if as_planned else 0)
        h = ctypes.c_void_p()
        self._reaper.start()  # here, not in a finalizer: starting a thread takes locks
        check(lib.kva_submit_prefetch_opts(self._ptr, arr, len(keys),
                                           _layout(layout, optional=True), ctypes.byref(opts),
                                           ctypes.byref(h)))
        handle = PrefetchHandle(self, h.value, arr, readers)
        handle._st.warm = bool(warm)  # C gives the hits back itself as it hands the result
        return handle

    def query_prefetch_status(self, handle):
        """Hits when the prefetch is done, None while it runs."""
        return handle.query()

    @contextlib.contextmanager
    def read_prefetched_results(self, keys, layout=None):
        """Yields [MemoryObj] for prefetched keys ([] for none), or None when one is missing.

        Without a layout each object is typed by its own, the one it was
        written with (as LMCache's read results: .array, .tensor and .layout
        have its shapes and dtypes; several layouts in one read are fine);
        with one, every object is viewed through it. Views of the pool
        either way, never copies.

        None: kvact already released one read lock of each of these keys;
        do not call finish_read_prefetched for them. The objects refuse
        views after the block; finish_read_prefetched releases the locks.
        """
        keys = list(keys)
        _layout(layout, optional=True)
        objs = self._read(keys, layout) if keys else []
        try:
            yield objs
        finally:
            for obj in objs or ():
                obj._release()

    def _read(self, keys, layout):
        n = len(keys)
        bufs = (Buf * n)()
        if layout is None:
            layouts = (Layout * n)()
            rc = lib.kva_read_prefetched_layouts(self._ptr, key_array(keys), n, bufs, layouts)
        else:
            rc = lib.kva_read_prefetched(self._ptr, key_array(keys), n, bufs)
        if rc > 0:
            return None
        check(rc)
        descs = _layouts_of(layouts, n) if layout is None else [layout] * n
        words = memoryview(bufs).cast("B").cast("Q").tolist()  # ptr, len of each key
        objs = [MemoryObj(k, descs[i], words[2 * i], words[2 * i + 1])
                for i, k in enumerate(keys)]
        with self._lock:
            for obj in objs:
                self._reads.setdefault(obj.key, []).append(obj)
        return objs

    def finish_read_prefetched(self, keys, extra_readers=0):
        """Releases 1 + extra_readers read locks of each key; the number of keys released."""
        keys = list(keys)
        if not keys:
            return 0
        n = check(lib.kva_finish_read_prefetched(self._ptr, key_array(keys), len(keys),
                                                 _readers(extra_readers)))
        with self._lock:
            for key in keys if self._reads else ():  # no per-key pops when nothing is held
                for obj in self._reads.pop(key, ()):
                    obj._release()
        return n

    # ---- maintenance ------------------------------------------------------------
    def delete(self, keys, force=False):
        """Removes objects: per-key statuses (KVA_KEY_LOCKED for a locked one unless force),
        a DeleteStatuses list whose .counts are LMCache's (deleted, skipped)."""
        keys = list(keys)
        if not keys:
            return DeleteStatuses()
        status = (ctypes.c_int * len(keys))()
        check(lib.kva_delete(self._ptr, key_array(keys), len(keys), int(force), status))
        return DeleteStatuses(status)

    def touch(self, keys):
        keys = list(keys)
        if not keys:
            return 0
        return check(lib.kva_touch(self._ptr, key_array(keys), len(keys)))

    def clear(self, force=False):
        """Removes L1's objects; the number removed."""
        return check(lib.kva_clear(self._ptr, int(force)))

    def flush(self, timeout=None):
        """Waits until every L1->L2 store queued before the call is done (GIL released)."""
        check(lib.kva_flush(self._ptr, timeout_ms(timeout)), "flush")

    def memcheck(self, wait_stores=0.0, callers_only=False):
        """True when no lock is held and the pool's accounting is consistent.

        wait_stores: first wait up to this many seconds (None: as long as it
        takes) for the L1->L2 stores queued so far, whose read locks are
        kvact's own store-behind; callers_only=True: those locks do not count.
        """
        return self.memcheck_report(wait_stores, callers_only) == ""

    def memcheck_report(self, wait_stores=0.0, callers_only=False):
        """"" when memcheck passes, else kvact's report of the first locked objects
        (it tells the store-behind's read locks from the callers')."""
        return self.memcheck_details(wait_stores, callers_only)[0]

    def memcheck_details(self, wait_stores=0.0, callers_only=False):
        """(report, counts): memcheck_report's text and the locked objects counted by
        holder, {"caller_write_locked", "caller_read_locked", "caller_pinned",
        "store_read_locked", "l2_keys_locked"}. Waits first for the loads of handles
        closed or collected unread, whose locks kvact gives back when they end."""
        self._reaper.drain()
        report = ctypes.create_string_buffer(_REPORT_LEN)
        wait_ms = 0 if wait_stores == 0 else timeout_ms(wait_stores) or 1
        opts = MemcheckOpts(wait_ms, int(callers_only))
        out = MemcheckReport()
        rc = lib.kva_memcheck_with(self._ptr, ctypes.byref(opts), ctypes.byref(out), report,
                                   _REPORT_LEN)
        counts = {f: getattr(out, f) for f in MEMCHECK_FIELDS}
        if rc == 0:
            return "", counts
        if rc != -3:  # KVA_EIO is the report; anything else is a refused call
            raise KvactError(rc, "memcheck")
        return report.value.decode(errors="replace") or "memcheck failed", counts

    def stats(self):
        """kva_storage_stats as a dict."""
        s = StorageStats()
        check(lib.kva_storage_get_stats(self._ptr, ctypes.byref(s)))
        out = {f: getattr(s, f) for f in STATS_FIELDS}
        out["l1_pinned"], out["l1_numa_node"] = bool(s.l1_pinned), s.l1_numa_node
        out["l2_skipped_slow_keys"] = s.l2_skipped_slow_keys
        return out

    # ---- lookups, pins, tiers -------------------------------------------------
    def lookup(self, keys, pin=False):
        """The contiguous prefix of keys held, per tier (a LookupResult); pin=True keeps
        the L1 hits from eviction until unpin."""
        keys = keys if isinstance(keys, list) else list(keys)
        out = TierHits()
        check(lib.kva_lookup(self._ptr, key_array(keys), len(keys), int(pin), ctypes.byref(out)))
        return LookupResult(out.total, _tier_hits(bytes(out), out.ntiers))

    def plan_load(self, keys, layout, pin=False, can_split=False):
        """kva_lookup, then how much of the found prefix is worth loading rather than
        recomputing (a LoadPlanResult); pin as lookup's; can_split: the engine can compute
        the front while the back loads (KVA_PLAN_SPLIT). A tier whose lookup cannot pay is
        not asked (in not_asked). In-process storages only."""
        keys = keys if isinstance(keys, list) else list(keys)
        out = LoadPlan()
        flags = (1 if pin else 0) | (2 if can_split else 0)
        check(lib.kva_plan_load(self._ptr, key_array(keys), len(keys), _layout(layout), flags,
                                ctypes.byref(out)))
        tiers = _tier_hits(bytes(out.found), out.found.ntiers)
        skipped = {name: out.skipped[i] for i, name in enumerate(tiers) if i > 0}
        not_asked = [name for i, name in enumerate(tiers) if out.not_asked >> i & 1]
        return LoadPlanResult(LookupResult(out.found.total, tiers), out.worth, skipped,
                              out.load_s, out.recompute_s, out.split_at, out.split_s, not_asked)

    def report_prefill(self, model, tokens, seconds, chunk_tokens=0):
        """An engine of `model` computed a prefill of `tokens` in `seconds`: refines the
        rate the load plan assumes (kva_report_prefill). In-process storages only."""
        ns = int(seconds * 1e9)
        check(lib.kva_report_prefill(self._ptr, model.encode(), int(chunk_tokens), int(tokens),
                                     ns), "report_prefill")

    def unpin(self, keys):
        """Drops one pin of each key: the number of keys unpinned."""
        keys = list(keys)
        return check(lib.kva_unpin(self._ptr, key_array(keys), len(keys)))

    def set_freeze(self, on):
        """Frozen: nothing is stored to L2 and prefetches do not consult it."""
        check(lib.kva_set_freeze(self._ptr, int(bool(on))))

    def set_tier_bypass(self, tier, on):
        """Skips the L2 tier `tier` for store, lookup and load until turned off."""
        check(lib.kva_set_tier_bypass(self._ptr, tier.encode(), int(bool(on))), tier)

    def tier_bypassed(self, tier):
        """Whether `tier` is bypassed (manually, or automatically after failures)."""
        return bool(check(lib.kva_tier_bypassed(self._ptr, tier.encode()), tier))

    def l2_contains(self, tier, key):
        """Whether the L2 tier `tier` holds key."""
        return bool(check(lib.kva_l2_contains(self._ptr, tier.encode(), key_array([key])), tier))

    def tier_stats(self, tier):
        """kva_l2_get_tier_stats as a dict (the adapter's own counters under "adapter")."""
        s = L2TierStats()
        check(lib.kva_l2_get_tier_stats(self._ptr, tier.encode(), ctypes.byref(s)), tier)
        out = {f: getattr(s, f) for f, _ in L2TierStats._fields_ if f != "adapter"}
        out["bypassed"] = bool(s.bypassed)
        out["adapter"] = {f: getattr(s.adapter, f) for f, _ in s.adapter._fields_}
        return out

    def tier_keys(self, tier):
        """kva_l2_get_tier_keys as a dict: what became of every key written toward `tier`
        (once flushed, written = stored + coalesced + bypassed + frozen + gone + unavailable
        + failed + dropped) and absent_now, absent_overflowed."""
        k = L2TierKeys()
        check(lib.kva_l2_get_tier_keys(self._ptr, tier.encode(), ctypes.byref(k)), tier)
        return {f: getattr(k, f) for f in TIER_KEYS_FIELDS}

    def tier_nodes(self, tier):
        """kva_l2_get_tier_nodes as a TierNodes(nodes, map_age_s): the servers of `tier` (a
        Redis Cluster's nodes, a single redis server). KvactError KVA_ENOTSUP (-7) for a tier
        of no servers (mock, disk); through kvactd, at most 1024 of them."""
        n, age, cap = ctypes.c_size_t(0), ctypes.c_double(-1), 16
        while True:
            arr = (L2NodeStats * cap)()
            check(lib.kva_l2_get_tier_nodes(self._ptr, tier.encode(), arr, cap, ctypes.byref(n),
                                            ctypes.byref(age)), tier)
            if n.value <= cap:
                break
            cap = n.value  # servers were met since: room for them all
        # an entry a client's daemon did not send (past 1024) has no address
        nodes = [_node(arr[i]) for i in range(n.value) if arr[i].addr]
        return TierNodes(nodes, age.value if age.value >= 0 else None)

    def close(self):
        """LMCache's close(): shuts the owning runtime down."""
        self._runtime.close()

    def _invalidate_all(self):
        """The runtime is shutting down (which frees every lock): nothing reaches C after."""
        self._closed = True
        self._reaper.stop()
        with self._lock:
            for obj in self._writes.values():
                obj._release()
            for objs in self._reads.values():
                for obj in objs:
                    obj._release()
            self._writes.clear()
            self._reads.clear()
