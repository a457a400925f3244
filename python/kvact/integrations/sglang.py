"""sglang.py — KvactHiCacheStorage: SGLang's HiCache storage backend ("L3") over kvact.

Load it with
    python -m sglang.launch_server ... --enable-hierarchical-cache \
        --hicache-storage-backend dynamic \
        --hicache-storage-backend-extra-config '{"backend_name": "kvact",
            "module_path": "kvact.integrations.sglang", "class_name": "KvactHiCacheStorage",
            "interface_v1": 1, "kvact.config": {"client.socket": "/run/kvact/kvact.sock"}}'
"interface_v1": 1 makes SGLang call the zero-copy batch_get_v1 / batch_set_v1 (its
host pool's pages copied straight to and from kvact's pool); without it SGLang uses the
generic get / set on flat page copies. Extra config: "kvact.config" (dict of kvact
settings; {"client.socket": path} to share one kvactd between SGLang's worker processes)
and/or "kvact.config_file", "kvact.model" (default SGLang's model name), "kvact.namespace"
(a tenant's salt: pages stored under one namespace are never found under another).

Design. SGLang's factory makes the backend with (storage_config, kwargs) and then
registers its host KV pool (register_mem_pool_host): the pool's layout, page size, dtype
and geometry are known from then on. One kvact object per page (per page and head group
when SGLang splits heads across heterogeneous TP sizes), its bytes in the order of the
pool's own page view (HostKVCache.get_data_page(i, flat=False), which is also the order
of SGLang's flat pages): a put copies each page view into the object kvact reserved, a
get copies the object into the page view, one copy each way and no staging buffer.
Layouts whose page orders agree share pages (layer_first with page_first_direct); the
others are told apart by the key, so a page written in one order is a miss, never wrong
bytes, in another.

Keys: SGLang's page hashes (get_storage_hash_str: each page's hash chains every token
before it), as kvact ObjectKeys of the model name, a kv_rank (the TP rank; 0 for MLA's
latent pools, which every rank holds whole and only the storage writer stores, but not
for an MLA model's Mamba-state or K/V pools, which are per rank; the head group's rank
when heads are split) and a group that hashes what makes a page's bytes (byte order,
dtype, page size, layers, TP size, PP stage, CP and DCP shard, pool name). A
namespace, from extra_config or per request in extra_info.extra_info["namespace"], is
hashed into every page hash (SGLang's own hashes carry no tenant: sglang #37160).
"""
from __future__ import annotations

import hashlib
import logging
import time
import zlib
from typing import Any, List, Optional

import torch

import kvact
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo, PoolHitPolicy,
                                                  PoolTransfer, PoolTransferResult)
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

from ._page_copy import Runs, move
from ._shared import acquire_runtime, model_name, release_runtime

logger = logging.getLogger(__name__)

# Page byte orders, by the layout's page view: MHA [2, L, P, H, D] (layer_first) is
# [2, 1, L, P, H, D] (page_first_direct); MLA's [L, P, 1, D] likewise.
_ORDERS = {"layer_first": "LP", "page_first_direct": "LP", "page_first": "PL",
           "page_head": "HP"}
_PAGE_WAIT_S = 60.0  # the longest a get waits for kvact to bring pages from L2
_STORE_WAIT_S = 10.0  # the longest a set waits for L1 room from kvact's stores to L2


class _PoolPages:
    """One registered host pool: its pages' views and the key group of its pages."""

    def __init__(self, pool, name, cfg, split):
        layout = getattr(pool, "layout", None)
        if layout not in _ORDERS:
            raise ValueError("kvact: SGLang host pool %r has layout %r; kvact stores %s"
                             % (name, layout, ", ".join(sorted(_ORDERS))))
        self.pool, self.name = pool, name
        self.page_size = int(pool.page_size)
        self.size = int(pool.size)
        view = pool.get_data_page(0, flat=False)
        self.shape = tuple(view.shape)
        self.dtype = view.dtype
        self.split = split
        # One copy across TP ranks: an MLA model's latent pools (KV, indexer, ...), which
        # every rank holds whole. Not its Mamba state (TP-sharded) nor a K/V pool (an MHA
        # draft or SWA pool: heads per rank), as SGLang's mooncake backend keys them.
        self.replicated = bool(cfg.is_mla_model) and name != "mamba" and \
            not isinstance(pool, MHATokenToKVPoolHost)
        if split > 1:
            head_axis = 2  # page_head: [2, 1, heads, P, L, D]
            if layout != "page_head" or self.shape[head_axis] % split:
                raise ValueError("kvact: splitting heads needs the page_head layout and a "
                                 "head count divisible by %d" % split)
        self.group_shape = self._group_shape()
        nbytes = view.element_size()
        for d in self.group_shape:
            nbytes *= d
        self.layout = kvact.MemoryLayoutDesc(shapes=[(nbytes,)], dtypes=["uint8"])
        self._runs = {}  # (shape, strides) -> Runs
        # The stored part's shape, without its axes of 1: page_first_direct's view is
        # layer_first's with a page axis of 1 (same bytes, same order), and a head group's
        # is the page of a rank whose TP size is tp_lcm_size.
        dims = tuple(d for d in self.group_shape if d != 1)
        ident = "|".join(str(x) for x in (
            "sglang", name, _ORDERS[layout], str(self.dtype), self.page_size, dims,
            cfg.tp_lcm_size if split > 1 else (1 if self.replicated else cfg.tp_size),
            cfg.pp_rank, cfg.pp_size, cfg.attn_cp_rank, cfg.attn_cp_size, cfg.dcp_rank,
            cfg.dcp_size))
        self.group = zlib.crc32(ident.encode())

    def _group_shape(self):
        if self.split == 1:
            return self.shape
        s = list(self.shape)
        s[2] //= self.split
        return tuple(s)

    def page_views(self, host_indices, npages):
        """The page views host_indices names (one page start per page_size indices),
        checked: a ValueError before anything is read or written."""
        if not isinstance(host_indices, torch.Tensor):
            host_indices = torch.as_tensor(host_indices)
        if host_indices.numel() != npages * self.page_size:
            raise ValueError("kvact: %d keys need %d host indices (page size %d), got %d"
                             % (npages, npages * self.page_size, self.page_size,
                                host_indices.numel()))
        starts = host_indices.reshape(-1)[::self.page_size].tolist() if npages else []
        for s in starts:
            if s < 0 or s % self.page_size or s + self.page_size > self.size:
                raise ValueError("kvact: host index %d is not a page start of pool %r "
                                 "(page size %d, %d slots)" % (s, self.name, self.page_size,
                                                               self.size))
        return [self.pool.get_data_page(s, flat=False) for s in starts]

    def flat_view(self, flat):
        """A flat page (SGLang's generic get/set) as a page view."""
        if flat.numel() != _numel(self.shape) or flat.dtype != self.dtype:
            raise ValueError("kvact: a flat page of pool %r has %d %s elements, got %d %s"
                             % (self.name, _numel(self.shape), self.dtype, flat.numel(),
                                flat.dtype))
        return flat.reshape(self.shape)

    def runs(self, part):
        """The runs of a stored part's bytes (_page_copy.Runs), found once per geometry:
        every page of a pool has the same strides (a flat page of the generic path has
        its own)."""
        key = (tuple(part.shape), tuple(part.stride()))
        runs = self._runs.get(key)
        if runs is None:
            runs = self._runs[key] = Runs(part)
            if runs.nbytes != self.layout.nbytes:
                raise ValueError("kvact: a part of pool %r has %d bytes, its objects %d"
                                 % (self.name, runs.nbytes, self.layout.nbytes))
        return runs

    def parts(self, view):
        """The pieces one page is stored as: the page, or its head groups."""
        if self.split == 1:
            return [view]
        return list(torch.chunk(view, self.split, dim=2))


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class KvactHiCacheStorage(HiCacheStorage):
    """SGLang's HiCacheStorage over kvact (see the module docstring for the design)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None, **extra):
        extra_config = dict(storage_config.extra_config or {})
        self.config = storage_config
        self._model = model_name(extra_config.get("kvact.model")
                                 or storage_config.model_name or "sglang")
        self._namespace = str(extra_config.get("kvact.namespace", ""))
        split = 1
        if storage_config.should_split_heads:
            lcm = storage_config.tp_lcm_size or storage_config.tp_size
            if lcm % storage_config.tp_size:
                raise ValueError("kvact: tp_lcm_size %r is not a multiple of tp_size %d"
                                 % (lcm, storage_config.tp_size))
            split = lcm // storage_config.tp_size
        self._split = split
        self._runtime_id, self._runtime = acquire_runtime(extra_config)
        self._sm = self._runtime.storage
        self._pools = {}  # name -> _PoolPages
        self._kv = None
        self._metrics = _Metrics()
        # a host pool handed to the constructor (older factories) counts as registered
        if kwargs is not None and hasattr(kwargs, "get_data_page"):
            self.register_mem_pool_host(kwargs)

    # ---- pools -----------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host):
        pages = _PoolPages(mem_pool_host, "kv", self.config, self._split)  # may refuse it
        self.mem_pool_host = mem_pool_host
        self._kv = self._pools["kv"] = pages

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        name = str(getattr(host_pool_name, "value", host_pool_name))
        pages = _PoolPages(host_pool, name, self.config, 1)  # may refuse it
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        self._pools[name] = pages

    def _pool(self, name="kv"):
        name = str(getattr(name, "value", name))
        pool = self._pools.get(name)
        if pool is None:
            raise RuntimeError("kvact: no SGLang host pool %r registered (register_mem_pool_"
                               "host / register_mem_host_pool_v2 first)" % name)
        return pool

    # ---- keys ------------------------------------------------------------------------
    def _keys(self, keys, pool, extra_info=None):
        """The kvact keys of SGLang page hashes: per page, one per stored part."""
        _check_keys(keys)
        ns = self._namespace
        per_call = getattr(extra_info, "extra_info", None) or {}
        if per_call.get("namespace"):
            ns = "%s/%s" % (ns, per_call["namespace"])
        cfg = self.config
        if self._split > 1 and pool is self._kv:
            ranks = [cfg.tp_rank * self._split + j for j in range(self._split)]
        elif pool.replicated:
            ranks = [cfg.dcp_rank]
        else:
            ranks = [cfg.tp_rank]
        hashes = [_page_hash(k, ns) for k in keys]
        if len(ranks) == 1:
            return kvact.object_keys(self._model, ranks[0], pool.group, hashes)
        per_rank = [kvact.object_keys(self._model, r, pool.group, hashes) for r in ranks]
        return [k for page in zip(*per_rank) for k in page]

    def _writer(self):
        return self.config.is_storage_writer

    # ---- the zero-copy calls ------------------------------------------------------------
    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        pool = self._pool()
        views = pool.page_views(host_indices, len(_check_keys(keys)))
        return self._store(keys, views, pool, extra_info)

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        pool = self._pool()
        views = pool.page_views(host_indices, len(_check_keys(keys)))
        return self._load(keys, views, pool, extra_info)

    def _store(self, keys, views, pool, extra_info):
        okeys = self._keys(keys, pool, extra_info)
        if not keys:
            return []
        try:
            return self._store_keys(keys, okeys, views, pool)
        except kvact.KvactError as e:  # kvactd away, a timeout: these pages fail
            _refused("store", len(keys), e)
            return [False] * len(keys)

    def _store_keys(self, keys, okeys, views, pool):
        if not self._writer() and pool.replicated:
            return [True] * len(keys)  # MLA: the storage writer stores the one copy
        t0 = time.perf_counter()
        parts = [p for v in views for p in pool.parts(v)]
        reserved, present = self._reserve(okeys, pool.layout)
        try:
            moves = []
            for key, part in zip(okeys, parts):
                obj = reserved.get(key)
                if obj is not None:
                    pool.runs(part).into_object(obj.address, part, moves)
            move(moves)
        finally:
            if reserved:
                self._sm.finish_write(list(reserved))
        ok = [key in reserved or key in present for key in okeys]
        per = len(okeys) // len(keys)
        pages = [all(ok[i * per:(i + 1) * per]) for i in range(len(keys))]
        self._metrics.backup(len(keys), _numel(pool.shape) * pool.dtype.itemsize,
                             time.perf_counter() - t0)
        return pages

    def _reserve(self, okeys, layout):
        """reserve_write: (the objects reserved, the keys refused as stored already). Keys
        refused for lack of room are reserved again once kvact's stores to L2 are done: an
        L1 full of pages still being stored cannot evict them yet, and SGLang drops the rest
        of a backup at its first failed batch. Its backup thread can wait."""
        reserved = self._sm.reserve_write(okeys, layout, mode="new")
        present = self._present([k for k in okeys if k not in reserved])
        absent = [k for k in okeys if k not in reserved and k not in present]
        if absent:
            try:
                self._sm.flush(timeout=_STORE_WAIT_S)
            except kvact.KvactError:
                return reserved, present  # still storing: those pages fail, as without the wait
            reserved.update(self._sm.reserve_write(absent, layout, mode="new"))
            present |= self._present([k for k in absent if k not in reserved])
        return reserved, present

    def _present(self, keys):
        """The keys kvact holds: one lookup when they all are, else one per key."""
        if not keys:
            return set()
        if self._sm.lookup(keys).total == len(keys):
            return set(keys)
        return {k for k in keys if self._sm.lookup([k]).total == 1}

    def _load(self, keys, views, pool, extra_info):
        okeys = self._keys(keys, pool, extra_info)
        if not keys:
            return []
        try:
            return self._load_keys(keys, okeys, views, pool)
        except kvact.KvactError as e:  # kvactd away, a timeout: a miss, never an exception
            _refused("load", len(keys), e)  # (SGLang's prefetch I/O thread dies on one)
            return [False] * len(keys)

    def _load_keys(self, keys, okeys, views, pool):
        t0 = time.perf_counter()
        per = len(okeys) // len(keys)
        with self._sm.submit_prefetch_task(okeys, pool.layout) as handle:
            found = handle.wait(timeout=_PAGE_WAIT_S) or 0
        hits = found - found % per  # whole pages only: the head groups of a part page
        if found > hits:            # are given back unread
            self._sm.finish_read_prefetched(okeys[hits:found])
        if hits:
            parts = [p for v in views[:hits // per] for p in pool.parts(v)]
            with self._sm.read_prefetched_results(okeys[:hits], pool.layout) as objs:
                if objs is None:
                    hits = 0
                else:
                    moves = []
                    for obj, part in zip(objs, parts):
                        pool.runs(part).from_object(obj.address, part, moves)
                    move(moves)
            if hits:
                self._sm.finish_read_prefetched(okeys[:hits])
        pages = hits // per
        self._metrics.prefetch(pages, _numel(pool.shape) * pool.dtype.itemsize,
                               time.perf_counter() - t0)
        return [True] * pages + [False] * (len(keys) - pages)

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """The number of leading pages stored (SGLang's prefix rule)."""
        if not keys:
            return 0
        okeys = self._keys(keys, self._pool(), extra_info)
        per = len(okeys) // len(keys)
        try:
            return self._sm.lookup(okeys).total // per
        except kvact.KvactError as e:
            _refused("lookup", len(keys), e)
            return 0

    # ---- the generic calls (flat page copies) ---------------------------------------------
    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> torch.Tensor | None:
        got = self.batch_get([key], [target_location])
        return got[0]

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[torch.Tensor | None]:
        pool = self._pool()
        if target_locations is None or len(target_locations) != len(keys):
            raise ValueError("kvact: batch_get needs one target page per key")
        views = [pool.flat_view(t) for t in target_locations]
        ok = self._load(keys, views, pool, None)
        return [t if done else None for t, done in zip(target_locations, ok)]

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        pool = self._pool()
        if values is None or len(values) != len(keys):
            raise ValueError("kvact: batch_set needs one value (a flat page) per key")
        views = [pool.flat_view(v) for v in values]
        return all(self._store(keys, views, pool, None))

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # ---- the multi-pool calls (v2) ------------------------------------------------------------
    def batch_set_v2(self, transfers: List[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None):
        todo = [(t, self._pool(t.name)) for t in transfers]
        views = [pool.page_views(t.host_indices, len(_check_keys(t.keys or [])))
                 for t, pool in todo]
        return {str(t.name): self._store(list(t.keys or []), v, pool, extra_info)
                for (t, pool), v in zip(todo, views)}

    def batch_get_v2(self, transfers: List[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None):
        todo = [(t, self._pool(t.name)) for t in transfers]
        views = [pool.page_views(t.host_indices, len(_check_keys(t.keys or [])))
                 for t, pool in todo]
        return {str(t.name): self._load(list(t.keys or []), v, pool, extra_info)
                for (t, pool), v in zip(todo, views)}

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[PoolTransfer]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None) -> PoolTransferResult:
        """The KV prefix stored, shrunk to what every extra pool can restore under its hit
        policy (HiCacheStorage.batch_exists_v2's rule)."""
        kv_pages = self.batch_exists(keys, extra_info)
        hits = {"kv": kv_pages} if kv_pages else {}
        restorable = list(range(1, kv_pages + 1))
        for t in pool_transfers or []:
            if not restorable:
                break
            pool = self._pool(t.name)
            try:
                okeys = self._keys(keys[:kv_pages], pool, extra_info)  # one per page
                present = self._present(okeys)
                have = [k in present for k in okeys]
            except kvact.KvactError as e:
                _refused("lookup", kv_pages, e)
                have = [False] * kv_pages
            if t.hit_policy == PoolHitPolicy.ALL_PAGES:
                boundary = have.index(False) if False in have else kv_pages
                ok = set(range(1, boundary + 1))
            elif t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                trailing = max(1, len(t.keys) if t.keys else 1)
                ok = {n for n in range(1, kv_pages + 1)
                      if all(have[max(0, n - trailing):n])}
            else:
                raise ValueError("kvact: pool %r: hit policy %s is not supported"
                                 % (str(t.name), t.hit_policy))
            if ok:
                hits[str(t.name)] = max(ok)
            restorable = [n for n in restorable if n in ok]
        return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)

    # ---- the rest ----------------------------------------------------------------------------
    def clear(self) -> None:
        """Drops what L1 holds (kvact.StorageManager.clear; the L2 tiers keep theirs)."""
        self._sm.clear()

    def get_stats(self):
        return self._metrics.take()

    def close(self):
        if self._runtime is not None:
            self._runtime = self._sm = None
            release_runtime(self._runtime_id)


def _check_keys(keys):
    """keys, when they are a list of SGLang page hashes (non-empty strings); else a
    ValueError, before any host index is looked at."""
    if isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys):
        raise ValueError("kvact: keys must be a list of non-empty strings (SGLang's page "
                         "hashes)")
    return keys


_last_refusal = [0.0]


def _refused(what, pages, error):
    """kvact could not serve a call (kvactd away, a timeout): said at most once a second,
    as SGLang calls again for every batch."""
    now = time.monotonic()
    if now - _last_refusal[0] >= 1.0:
        _last_refusal[0] = now
        logger.warning("kvact: %s of %d pages not done: %s", what, pages, error)


def _page_hash(key, namespace):
    """A kva_key hash (32 bytes) of an SGLang page hash: the hash itself when it is
    SHA-256's 64 hex digits and no namespace is set, else SHA-256 over both."""
    if not namespace and len(key) == 64:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(namespace.encode() + b"\0" + key.encode()).digest()


class _Metrics:
    """SGLang's StorageMetrics: pages and GB/s per prefetch and backup since last taken."""

    def __init__(self):
        self.prefetch_pgs, self.backup_pgs = [], []
        self.prefetch_bandwidth, self.backup_bandwidth = [], []

    def prefetch(self, pages, page_bytes, seconds):
        self.prefetch_pgs.append(pages)
        self.prefetch_bandwidth.append(pages * page_bytes / max(seconds, 1e-9) / 1e9)

    def backup(self, pages, page_bytes, seconds):
        self.backup_pgs.append(pages)
        self.backup_bandwidth.append(pages * page_bytes / max(seconds, 1e-9) / 1e9)

    def take(self):
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except ImportError:
            return None
        m = StorageMetrics()
        m.prefetch_pgs.extend(self.prefetch_pgs)
        m.backup_pgs.extend(self.backup_pgs)
        m.prefetch_bandwidth.extend(self.prefetch_bandwidth)
        m.backup_bandwidth.extend(self.backup_bandwidth)
        self.__init__()
        return m


# The name this backend had while it was built (README launch lines of that time).
KvactStorage = KvactHiCacheStorage
