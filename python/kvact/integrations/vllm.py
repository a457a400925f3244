"""vllm.py — KvactConnector: vLLM's v1 KV connector (KVConnectorBase_V1) over kvact.

Load it with
    --kv-transfer-config '{"kv_connector": "KvactConnector",
                           "kv_connector_module_path": "kvact.integrations.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"kvact.config": {...}}}'
Extra config: "kvact.config" (dict of kvact settings) and/or "kvact.config_file"
(a kvact config file; the dict's settings apply on top), "kvact.chunk_tokens"
(default 256, a multiple of vLLM's block_size), "kvact.model" (default the
served model's name), "kvact.salt", "kvact.lease_ms" (default 10000: how
long a lookup's lease waits for vLLM to schedule its request),
"kvact.reset_tracked_chunks" (default 262144: the newest chunks stored that
reset_cache deletes), "kvact.plan_loads" (default true: the lookup counts only
what the load plan judges worth loading, and the workers measure the prefill
rate it assumes; false: every hit counts, nothing is measured),
"kvact.kv_format" (for 5-D caches of older vLLMs: "flash", the default, per
layer [2, blocks, block_size, heads, head_dim]; or "flashinfer": [blocks, 2,
...]; vLLM 0.33's 4-D per-layer views are always "pages" in the layout
cache_config.kv_cache_layout names).

Design. vLLM runs the scheduler-side and the worker-side connector in
different processes; each opens its own kvact.Runtime from the same config,
so in a deployment "client.socket" names one kvactd that both use. Two
connectors of one process with the same config share one Runtime (vLLM's
single-process mode, and the tests). With vLLM importable the class
subclasses vLLM's KVConnectorBase_V1 with its exact signatures; without it,
the stand-ins of _vllm_base.py.

Keys: chunk i of a request is keyed by vLLM's block hash of its last block,
request.block_hashes[(i + 1) * chunk_tokens / hash_block_size - 1] (a chained
hash of every token before it and of the request's cache_salt, LoRA adapter,
multimodal inputs and prompt embeddings), beside the model name and the TP
rank; "kvact.salt", when set, is hashed in too. vLLM's sha256 hashes are
the same in every process and restart; its xxhash ones only under a fixed
PYTHONHASHSEED. A chunk whose block hashes vLLM has not made yet is neither
looked up nor stored until it has them.

Scheduler side (keys of kv_rank 0: every TP rank stores the same chunks):
  get_num_new_matched_tokens: looks up the full chunks of all but the
    request's last token (vLLM must compute at least one token) under a
    lease (_vllm_leases.py): what it counts is pinned in L1 for every TP rank
    until the workers have loaded it, so an eviction, another tenant's
    traffic, reset_cache or an L2 tier failing between the lookup and the load
    cannot turn into a load error (a failed request under vLLM's default
    kv_load_failure_policy "fail"). An L2 hit is brought into L1 first: the
    answer is None ("ask again", the request waits a step) meanwhile. Only
    the hits worth loading count (kva_plan_load: an L2 hit slower to load
    than to compute is left to vLLM to compute). Returns the hit beyond
    num_computed_tokens (vLLM's own prefix cache).
  update_state_after_alloc: the load is [num_computed_tokens,
    num_computed_tokens + num_external_tokens) (vLLM may allocate fewer tokens
    than counted, never more); the lease keeps only those chunks.
  build_connector_meta: per scheduled request, a _LoadSpec (its keys, a slot
    mapping with -1 for the tokens vLLM already holds, the block ids each
    chunk writes) and a _SaveSpec of the full chunks this step completes.
    Only full chunks are stored (as LMCache does by default): kvact stores
    ntokens in ((n-1)*ct, n*ct], and a partial chunk would later shadow the
    full one under its key. A request whose computed tokens went back (a
    load error, a preemption) has its saved-chunk mark lowered with them.
  request_finished: (False, None), and the request's lease goes. The stores
    of a step have read their blocks before the next step writes any
    (handle_preemptions waits for them), so vLLM may free blocks at once.
  update_connector_output: the workers' KvactWorkerMeta: loads done (their
    leases go once every TP rank reported), once the chunk layout, which
    bringing L2 hits into L1 needs, and a step's prefill time (reported to
    kvact: kva_report_prefill).
  reset_cache (/reset_prefix_cache): a forced delete from L1 of the chunks
    this scheduler planned to store (the newest kvact.reset_tracked_chunks),
    all TP ranks; L2 keeps its copies.
  take_events: BlockStored of the chunks every worker stored (the workers'
    get_kv_connector_kv_cache_events), BlockRemoved of reset_cache's; only
    with kv_events_config.enable_kv_cache_events. Evictions are not reported.
  get_kv_connector_stats (both sides): KvactConnectorStats, since the last call.

Worker side: register_kv_caches wraps the layers, in the dict's order, in one
kvact.PagedKVCache. bind_connector_metadata starts the step (vLLM calls
start_load_kv after the forward on steps without synchronous loads).
start_load_kv checks every request's load spec (keys, a
slot mapping of their length, their block ids: a ValueError naming the
request, before anything is taken), submits every request's prefetch,
waits, and starts kv.load of the hit prefix; wait_for_layer_load waits for
that layer of each load. Chunks the prefetch did not find (evicted, an L2
tier failing) and loads whose op failed are load errors: their blocks go to
get_block_ids_with_load_errors and never count as loaded; kvact has released
their read locks. Whatever exception leaves start_load_kv, the step first
gives back every read lock it took (the hits no load took, read or not; the
started loads release theirs, and are waited for) and reports every block
it was to load as a load error. kvact's store gathers all layers at once, so the stores
start in wait_for_save (after the forward pass), skipping requests whose
load failed this step (their new tokens were computed over a wrong prefix),
and run while vLLM samples and schedules; the next step's handle_preemptions,
vLLM's first call of a step, before it zeroes, copies or overwrites a block,
waits for them. build_connector_worker_meta reports the step's loads. A step
with no load and at least chunk_tokens tokens to compute is timed from
bind_connector_metadata to wait_for_save (after a device sync) and reported
with them: the prefill rate the load plan assumes (the slowest TP rank's).
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import kvact

from ._vllm_base import (MEDIUM, BlockRemoved, BlockStored, CacheHitSource,
                         KVConnectorBase_V1, KVConnectorKVEvents, KVConnectorMetadata,
                         KVConnectorRole, KVConnectorStats, KVConnectorWorkerMetadata,
                         KvactConnectorStats, KvactKVEvents, KvactWorkerMeta,
                         maybe_convert_block_hash)
from ._shared import acquire_runtime, flag, model_name, release_runtime
from ._vllm_leases import LeaseTable

if TYPE_CHECKING:  # the names of the base's annotations, for readers and type checkers
    import torch
    from vllm.config import VllmConfig
    from vllm.distributed.kv_events import KVCacheEvent
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

log = logging.getLogger(__name__)

_ENOTSUP = -7  # KVA_ENOTSUP: no load plan or prefill report in a client of kvactd


@dataclass
class _LoadSpec:
    """One request's load: chunks [first, first + len(keys)) of its tokens."""

    req_id: str
    keys: list           # ObjectKey of kv_rank 0, one per chunk
    slots: np.ndarray    # int64, chunk_tokens per chunk; -1 where vLLM holds the token
    chunk_blocks: list   # per chunk, the block ids its load writes
    epoch: int = 0       # the request's epoch (_Tracked.epoch)


@dataclass
class _SaveSpec:
    """One request's store: the full chunks it completes this step."""

    req_id: str
    keys: list
    slots: np.ndarray
    events: list = field(default_factory=list)  # BlockStored per chunk, when events are on
    epoch: int = 0       # the request's epoch (_Tracked.epoch)


@dataclass
class KvactConnectorMetadata(KVConnectorMetadata):
    """What the scheduler side tells the workers for one step."""

    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    compute_tokens: int = 0  # tokens the step computes, all requests together


@dataclass
class _Tracked:
    """The scheduler side's view of one scheduled request."""

    request: object       # vLLM's Request: its all_token_ids grow as tokens are sampled
    saved_chunks: int     # chunks [0, saved_chunks) are in kvact (or being stored)
    load: tuple = None    # (keys, first token, end token) to load in the next step
    block_ids: list = field(default_factory=list)
    epoch: int = 0        # bumped when vLLM takes computed tokens back (a load error, a
    #                       preemption, rejected drafts): a worker that saw a load of
    #                       epoch e fail stores nothing more of epoch e, whose tokens
    #                       were computed over the prefix that did not load
    computed: int = 0     # the computed tokens after the last step planned


# ---- the connector ------------------------------------------------------------------------
class KvactConnector(KVConnectorBase_V1):
    """vLLM's KV connector over kvact (see the module docstring for the design)."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole,
                 kv_cache_config: KVCacheConfig):
        super().__init__(vllm_config, role, kv_cache_config)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        self._block_size = vllm_config.cache_config.block_size
        self._hash_block_size = (getattr(kv_cache_config, "hash_block_size", None)
                                 or self._block_size)
        self._chunk_tokens = int(extra.get("kvact.chunk_tokens", 256))
        if (self._chunk_tokens <= 0 or self._chunk_tokens % self._block_size
                or self._chunk_tokens % self._hash_block_size):
            raise ValueError("kvact.chunk_tokens %d is not a multiple of block_size %d" %
                             (self._chunk_tokens, self._block_size))
        self._model = model_name(extra.get("kvact.model", vllm_config.model_config.model))
        self._lease_s = float(extra.get("kvact.lease_ms", 10000)) / 1000.0
        if not self._lease_s > 0:
            raise ValueError("kvact.lease_ms must be > 0, got %r" % extra.get("kvact.lease_ms"))
        self._salt = extra.get("kvact.salt", "")
        self._plan_loads = flag(extra.get("kvact.plan_loads", True))
        self._reporting = self._plan_loads  # scheduler: off once kvact refuses (a client)
        self._fmt = extra.get("kvact.kv_format", "flash")
        events = getattr(vllm_config, "kv_events_config", None)
        self._events_on = bool(events and events.enable_kv_cache_events)
        parallel = getattr(vllm_config, "parallel_config", None)
        self._tp = getattr(parallel, "tensor_parallel_size", 1) or 1
        self._runtime_id, runtime = acquire_runtime(extra)
        self.storage = runtime.storage
        self._is_scheduler = role == KVConnectorRole.SCHEDULER
        self._tracked, self._lookups = {}, {}        # scheduler side
        self._stored = {}   # scheduler: key -> its blocks' hashes (events on), oldest first
        self._stored_cap = int(extra.get("kvact.reset_tracked_chunks", 1 << 18))
        self._kv, self._layer_index, self._chunk_bytes = None, {}, 0  # worker side
        self._layout_sent = False
        self._step_t0 = None  # worker: perf_counter_ns at bind of a step timed as a prefill
        self._prefill = None  # worker: (tokens, ns) of this step, for the scheduler
        self._tainted = {}  # worker: req id -> the epoch of its last failed load
        self._saving = []   # (SaveSpec, KVOp) started, not yet accounted for
        self._events = []   # events not yet taken (both sides)
        self._stats = KvactConnectorStats()
        self._rank = 0 if self._is_scheduler else _tp_rank()
        self._leases = LeaseTable(
            self.storage, self._tp, self._lease_s, _rank_keys,
            lambda: self._stats.add("lease_expiries", 1), plan=self._plan_loads,
            on_skip=lambda n: self._stats.add("skipped_slow_tokens", n * self._chunk_tokens))
        self._reset_step()

    # ---- what vLLM reads of the class ---------------------------------------------------
    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        """True: wait_for_layer_load waits on the host per layer, which a captured CUDA
        graph would skip on replay; vLLM then captures the graph in pieces between layers."""
        return True

    @property
    def requires_kv_delivery(self) -> bool:
        """False: kvact is a best-effort cache. A save a preemption drops is a later miss,
        not a lost hand-off, so vLLM need not recompute the preempted request."""
        return False

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None
                                 ) -> KVConnectorStats | None:
        return None if data is None else KvactConnectorStats(data=dict(data))

    # ---- scheduler side ---------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        keys = self._request_keys(request, request.num_tokens - 1)
        chunks = self._leases.lookup(request.request_id, keys)
        if chunks is None:  # an L2 hit is coming into L1: ask again next step
            return None, False
        hit = chunks * self._chunk_tokens
        self._lookups[request.request_id] = (keys, hit, num_computed_tokens)
        return max(0, hit - num_computed_tokens), False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int):
        rid, ct = request.request_id, self._chunk_tokens
        looked_up = self._lookups.pop(rid, None)
        keys, hit, start = looked_up or ([], 0, 0)
        if num_external_tokens > 0 and start + num_external_tokens > hit:  # past the lease
            self._leases.release(rid)
            raise ValueError("kvact: request %r: %d external tokens to load after %d, but %s" % (
                rid, num_external_tokens, start,
                "its lookup found %d" % hit if looked_up else
                "get_num_new_matched_tokens did not look it up"))
        t = _Tracked(request, saved_chunks=hit // ct)
        old = self._tracked.get(rid)
        if old is not None:  # admitted again (a preemption): what it computed is gone
            t.epoch = old.epoch + 1
        if num_external_tokens > 0:
            # vLLM computes from start + num_external_tokens on: it may have allocated
            # fewer tokens than counted (a block-aligned or capped hit), never more
            end = start + num_external_tokens
            t.load = (keys, start, end)
            self._leases.commit(rid, start // ct, -(-end // ct))
        else:
            self._leases.release(rid)
        self._tracked[rid] = t
        self._stats.add("lookups", 1 if looked_up else 0)
        self._stats.add("hit_tokens", num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = KvactConnectorMetadata()
        self._leases.expire()
        for req_id in getattr(scheduler_output, "finished_req_ids", ()):
            self._tracked.pop(req_id, None)
        scheduled = scheduler_output.num_scheduled_tokens
        meta.compute_tokens = sum(scheduled.values())
        for new in scheduler_output.scheduled_new_reqs:
            t = self._tracked.get(new.req_id)
            if t is not None:
                t.block_ids = _group0(new.block_ids)
                self._plan(meta, new.req_id, t, new.num_computed_tokens + scheduled[new.req_id])
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            t = self._tracked.get(req_id)
            if t is None:
                continue
            new_blocks = _group0(cached.new_block_ids[i])
            t.block_ids = new_blocks if _resumed(cached, i, req_id) else t.block_ids + new_blocks
            computed = cached.num_computed_tokens[i]
            if computed < t.computed:  # vLLM took tokens back (see _Tracked.epoch)
                t.epoch += 1
            t.saved_chunks = min(t.saved_chunks, computed // self._chunk_tokens)
            self._plan(meta, req_id, t, computed + scheduled[req_id])
        return meta

    def update_connector_output(self, connector_output: KVConnectorOutput):
        """Gives back the leases of the loads every worker finished; keeps the workers'
        events of this step (those every worker reported)."""
        done = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(done, KvactWorkerMeta):
            for req_id, workers in done.loaded.items():
                self._leases.loaded(req_id, workers)
            if done.layout is not None and self._leases.layout is None:
                self._leases.layout = kvact.MemoryLayoutDesc(*done.layout)
            if done.prefill is not None and self._reporting:
                self._report_prefill(*done.prefill)
        events = getattr(connector_output, "kv_cache_events", None)
        if isinstance(events, KvactKVEvents):
            self._events.extend(events.aggregate().get_all_events())

    def _report_prefill(self, tokens, ns):
        """A step's prefill time, to the rate kvact's load plan assumes for this model.
        A client of kvactd cannot report (KVA_ENOTSUP: kvactd's configured rate holds)."""
        try:
            self.storage.report_prefill(self._model, tokens, ns / 1e9, self._chunk_tokens)
        except kvact.KvactError as e:
            if e.status == _ENOTSUP:
                self._reporting = False  # the workers' next reports are not read
            else:
                log.warning("kvact: prefill report refused: %s", e)

    def request_finished(self, request: Request, block_ids: list[int]
                         ) -> tuple[bool, dict[str, Any] | None]:
        self._tracked.pop(request.request_id, None)
        self._lookups.pop(request.request_id, None)
        self._leases.release(request.request_id)
        return False, None

    def get_external_cache_hit_sources(self, request: Request, num_external_tokens: int
                                       ) -> dict[CacheHitSource, int]:
        """Every chunk kvact counts is in its L1 (host memory) when loaded; those a lease
        brought in from an L2 tier for the load are counted as that tier's (DISK for a
        tier whose name says disk or nvme, else EXTERNAL_UNSPECIFIED)."""
        if num_external_tokens <= 0:
            return {}
        lease, t = self._leases.get(request.request_id), self._tracked.get(request.request_id)
        from_l2 = 0
        if lease is not None and lease.from_l2 and t is not None and t.load is not None:
            ct, (_, start, end) = self._chunk_tokens, t.load
            a, b = lease.l2_lo * ct, (lease.l2_lo + lease.from_l2) * ct
            from_l2 = max(0, min(b, end) - max(a, start))
        out = {}
        if num_external_tokens > from_l2:
            out[CacheHitSource.HOST] = num_external_tokens - from_l2
        if from_l2:
            out[_hit_source(lease.l2_tier)] = from_l2
        return out

    def take_events(self) -> Iterable[KVCacheEvent]:
        events, self._events = self._events, []
        return events

    def reset_cache(self) -> bool | None:
        """vLLM's /reset_prefix_cache: a forced delete from L1 of every chunk this
        scheduler had stored (all TP ranks' keys), readers keeping what they hold. Their
        copies in L2 tiers stay (a later lookup may find them there); chunks other
        engines or an earlier run of this one stored stay too. False when kvact refuses."""
        leased = self._leases.leased_keys()
        kept = [k for k in self._stored if k in leased]  # deleted when their leases go
        self._leases.doom(kept)
        keys = [k for k in self._stored if k not in leased]
        ranked = [k for r in range(self._tp) for k in _rank_keys(keys, r)]
        try:
            status = self.storage.delete(ranked, force=True) if ranked else []
        except kvact.KvactError as e:
            log.warning("kvact reset_cache: the delete was refused: %s", e)
            return False
        removed = [k for k, s in zip(keys, status) if s == 0]
        if self._events_on and (removed or kept):  # kept ones no longer hit: gone for routers
            self._events.append(BlockRemoved(
                block_hashes=[h for k in removed + kept for h in self._stored[k]],
                medium=MEDIUM))
        log.info("kvact reset_cache: removed %d of the %d chunks this engine stored from "
                 "L1 (forced, %d TP rank(s)); %d more go when the requests that will load "
                 "them have (they count as misses meanwhile); L2 tiers keep their copies",
                 len(removed), len(keys), self._tp, len(kept))
        self._stored.clear()
        return True

    def _plan(self, meta, req_id, t, computed_after):
        """Adds req_id's load (if one is pending) and the store of the full chunks whose
        tokens are all computed once this step is done and whose block hashes vLLM has
        (a chunk's hashes may lag its tokens: it is stored in a later step)."""
        ct = self._chunk_tokens
        t.computed = computed_after
        if t.load is not None:
            keys, start, end = t.load
            spec = self._load_spec(req_id, t.block_ids, keys, start, end)
            spec.epoch = t.epoch
            meta.loads.append(spec)
            t.load = None
        hashes = t.request.block_hashes
        full = min(computed_after // ct, len(hashes) * self._hash_block_size // ct)
        if full > t.saved_chunks:
            first, per = t.saved_chunks, ct // self._hash_block_size
            keys = self._chunk_keys(hashes, first, full)
            slots = self._slots(t.block_ids, first * ct, full * ct)
            for c, key in enumerate(keys, first):
                self._track_stored(key, hashes[c * per:(c + 1) * per])
            events = self._stored_events(t.request, first, full) if self._events_on else []
            meta.saves.append(_SaveSpec(req_id, keys, slots, events, t.epoch))
            t.saved_chunks = full

    def _track_stored(self, key, hashes):
        """Remembers a chunk for reset_cache: the newest kvact.reset_tracked_chunks of
        them (older ones have most likely left L1 by then)."""
        self._stored[key] = [maybe_convert_block_hash(h) for h in hashes] \
            if self._events_on else None
        if len(self._stored) > self._stored_cap:
            del self._stored[next(iter(self._stored))]

    def _stored_events(self, request, first, last):
        """BlockStored of chunks [first, last) of request, in vLLM's blocks of hashing."""
        ct, hbs, hashes = self._chunk_tokens, self._hash_block_size, request.block_hashes
        lora = getattr(request, "lora_request", None)
        out = []
        for c in range(first, last):
            a, b = c * ct // hbs, (c + 1) * ct // hbs
            out.append(BlockStored(
                block_hashes=[maybe_convert_block_hash(h) for h in hashes[a:b]],
                parent_block_hash=maybe_convert_block_hash(hashes[a - 1]) if a else None,
                token_ids=list(request.all_token_ids[c * ct:(c + 1) * ct]), block_size=hbs,
                lora_id=lora.lora_int_id if lora else None, medium=MEDIUM,
                lora_name=lora.lora_name if lora else None))
        return out

    def _load_spec(self, req_id, block_ids, keys, start, end):
        """Tokens [start, end) to load: chunks first..last, whole chunk objects. Slots
        before start (vLLM holds them) and past the block of end - 1 (a hit vLLM cut
        short: it computes them) are -1; the rest of end's block is loaded, the same
        prefix's KV that vLLM then computes over (a page moves whole)."""
        ct, bs = self._chunk_tokens, self._block_size
        first, last = start // ct, -(-end // ct)
        stop = min(-(-end // bs) * bs, last * ct)
        slots = np.full(last * ct - first * ct, -1, dtype=np.int64)
        slots[:stop - first * ct] = self._slots(block_ids, first * ct, stop)
        slots[:start - first * ct] = -1
        chunk_blocks = [block_ids[max(c * ct, start) // bs:-(-min((c + 1) * ct, end) // bs)]
                        for c in range(first, last)]
        return _LoadSpec(req_id, keys[first:last], slots, chunk_blocks)

    def _slots(self, block_ids, start, end):
        tok = np.arange(start, end, dtype=np.int64)
        blocks = np.asarray(block_ids, dtype=np.int64)
        return blocks[tok // self._block_size] * self._block_size + tok % self._block_size

    def _request_keys(self, request, tokens):
        """Keys of the full chunks of request's first `tokens` tokens that vLLM has
        block hashes of."""
        n = min(tokens, len(request.block_hashes) * self._hash_block_size)
        return self._chunk_keys(request.block_hashes, 0, n // self._chunk_tokens)

    def _chunk_keys(self, hashes, first, last):
        per = self._chunk_tokens // self._hash_block_size
        return [kvact.ObjectKey(self._model, 0, 0, _key_hash(hashes[(c + 1) * per - 1],
                                                             self._salt))
                for c in range(first, last)]

    # ---- worker side --------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        names = list(kv_caches)
        self._first_layer = kv_caches[names[0]]
        self._layer_index = {name: i for i, name in enumerate(names)}
        layers = [kv_caches[n] for n in names]
        if layers[0].dim() == 4:  # vLLM 0.33's per-layer [blocks, heads, block, K|V] views
            cache = getattr(self._vllm_config, "cache_config", None)
            self._kv = kvact.PagedKVCache(self.storage, layers, "pages", self._chunk_tokens,
                                          layout=_layout_name(cache))
        else:
            self._kv = kvact.PagedKVCache(self.storage, layers, self._fmt, self._chunk_tokens)
        self._chunk_bytes = self._kv.chunk_layout().nbytes

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata):
        """The first call of a step, before vLLM zeroes, copies or overwrites any block:
        the previous step's stores have read their blocks when it returns."""
        self._collect_saves(block=True)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """The step starts here: vLLM calls start_load_kv after the forward on steps
        without synchronous loads, too late to reset the step's state. (The previous
        step's stores are waited for here too, for a model runner that does not call
        handle_preemptions.)"""
        self._collect_saves(block=True)
        super().bind_connector_metadata(connector_metadata)
        self._reset_step()
        meta = connector_metadata
        if (self._plan_loads and self._kv is not None and not getattr(meta, "loads", True)
                and getattr(meta, "compute_tokens", 0) >= self._chunk_tokens):
            self._step_t0 = time.perf_counter_ns()  # a step that only computes: timed

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for spec in meta.loads:  # before anything is taken
            self._check_load(spec)
        layout = self._kv.chunk_layout() if meta.loads else None
        step = []  # [spec, its prefetch handle, whether a load op took its hits]
        try:
            for spec in meta.loads:
                step.append([spec, self._prefetch(spec, layout), False])
            for entry in step:
                spec, handle, _ = entry
                hits = _hits(handle)
                if hits < len(spec.keys):
                    self._fail(spec, hits, len(spec.keys))
                if hits > 0:
                    entry[2] = True  # set first: a doubt leaks a lock, never frees another's
                    self._start_load(spec, hits)
        except BaseException:
            self._give_back(step)
            raise

    def wait_for_layer_load(self, layer_name: str) -> None:
        layer = self._layer_index.get(layer_name)
        if layer is not None:
            for _, _, op in self._loads:
                op.wait_layer(layer)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: AttentionMetadata, **kwargs: Any) -> None:
        """Nothing per layer: kvact's store gathers all layers in one op (wait_for_save)."""

    def wait_for_save(self):
        """Starts the step's stores and returns: they gather the blocks while vLLM samples,
        reports and schedules, and are waited for at the next step's first call
        (handle_preemptions), before any block is written again."""
        self._finish_loads()
        meta = self._get_connector_metadata()
        saves = [s for s in meta.saves if s.req_id not in self._failed
                 and self._tainted.get(s.req_id) != s.epoch]
        if self._step_t0 is not None:  # the forward is done when the device is
            _sync_device(self._first_layer)
            self._prefill = (meta.compute_tokens, time.perf_counter_ns() - self._step_t0)
            self._step_t0 = None
        elif saves:
            _sync_device(self._first_layer)
        if not saves:
            return
        for spec in saves:
            self._saving.append((spec, self._kv.store(self._ranked(spec.keys), spec.slots)))

    def _collect_saves(self, block):
        """Accounts for the stores that ended (all of them with block): stats, events."""
        pending = []
        for spec, op in self._saving:
            status = op.wait() if block else op.wait(0)
            if status is None:
                pending.append((spec, op))
            elif status != 0:  # best effort: a chunk not stored is a later miss
                log.warning("kvact store of %s: status %d", spec.req_id, status)
            else:
                self._stats.add("stored_tokens", len(spec.keys) * self._chunk_tokens)
                self._stats.add("stored_bytes", len(spec.keys) * self._chunk_bytes)
                self._events.extend(spec.events)
        self._saving = pending

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        """The requests whose loads this step ran (done or failed: wait_for_save waited
        for them): the scheduler side gives their lookup leases back."""
        meta = self._connector_metadata
        loads = getattr(meta, "loads", None) or ()
        layout = None
        if not self._layout_sent and self._kv is not None:
            desc = self._kv.chunk_layout()
            layout, self._layout_sent = (desc.shapes, desc.dtypes), True
        prefill, self._prefill = self._prefill, None
        if not loads and layout is None and prefill is None:
            return None
        return KvactWorkerMeta({spec.req_id: 1 for spec in loads}, layout, prefill)

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[set[str] | None, set[str] | None]:
        for req_id in finished_req_ids:
            self._tainted.pop(req_id, None)
        return None, None  # nothing is asynchronous across steps

    def get_block_ids_with_load_errors(self) -> set[int]:
        self._finish_loads()
        errors, self._errors = self._errors, set()
        self._stats.add("load_error_blocks", len(errors))
        self._stats.add("load_error_requests", len(self._failed))
        return errors

    def get_kv_connector_kv_cache_events(self) -> KVConnectorKVEvents | None:
        # the stores that ended were collected by get_kv_connector_stats, called just before
        if not self._events:
            return None
        events = KvactKVEvents(num_workers=1)
        events.add_events(self._events)
        self._events = []
        return events

    # ---- both sides ---------------------------------------------------------------------
    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        self._collect_saves(block=False)
        if self._stats.is_empty():
            return None
        stats, self._stats = self._stats, KvactConnectorStats()
        return stats

    def shutdown(self):
        self._leases.close()
        self._collect_saves(block=True)
        if self._kv is not None:
            self._kv.close()
            self._kv = None
        if self._runtime_id is not None:
            release_runtime(self._runtime_id)
            self._runtime_id = None

    def _reset_step(self):
        self._step_t0 = self._prefill = None
        self._loads = []      # (spec, hits, KVOp) started this step
        self._errors = set()  # block ids that failed to load this step
        self._failed = set()  # req ids with a load error this step

    def _prefetch(self, spec, layout):
        try:
            return self.storage.submit_prefetch_task(self._ranked(spec.keys), layout)
        except kvact.KvactError as e:
            log.warning("kvact prefetch of %s refused: %s", spec.req_id, e)
            return None

    def _check_load(self, spec):
        """A load spec kvact can run, else a ValueError naming its request."""
        n, ct, slots = len(spec.keys), self._chunk_tokens, spec.slots
        problem = None
        if n == 0:
            problem = "no chunks to load (a load planned without a lookup?)"
        elif not isinstance(slots, np.ndarray) or slots.dtype != np.int64 or slots.ndim != 1:
            problem = "the slot mapping is not a 1-D int64 array"
        elif not (n - 1) * ct < len(slots) <= n * ct:
            problem = "%d chunks of %d tokens need %d..%d slots, got %d" % (
                n, ct, (n - 1) * ct + 1, n * ct, len(slots))
        elif len(spec.chunk_blocks) != n:
            problem = "%d chunks but block ids for %d" % (n, len(spec.chunk_blocks))
        if problem:
            raise ValueError("kvact: load of request %r: %s" % (spec.req_id, problem))

    def _give_back(self, step):
        """A step that raised gives back what it took: the hits no load op took (read or
        not: the handle knows), and the loads' locks, which they release as they end.
        Nothing it was to load counts as loaded."""
        for spec, handle, loading in step:
            if handle is not None and not loading:
                handle._give_back_hits()
        try:
            self._finish_loads()
        except kvact.KvactError as e:  # the exception in flight is the one to raise
            log.warning("kvact: a load of the failed step: %s", e)
        for spec, _, _ in step:
            self._fail(spec, 0, len(spec.keys))

    def _start_load(self, spec, hits):
        keys = self._ranked(spec.keys[:hits])
        try:
            op = self._kv.load(keys, spec.slots[:hits * self._chunk_tokens])
        except kvact.KvactError as e:  # kvact released the chunks' read locks
            log.warning("kvact load of %s refused: %s", spec.req_id, e)
            self._fail(spec, 0, hits)
            return
        except Exception:  # raised before the copy was asked for: the locks are still ours
            self.storage.finish_read_prefetched(keys)
            raise
        self._loads.append((spec, hits, op))

    def _finish_loads(self):
        for spec, hits, op in self._loads:
            status = op.wait()
            if status != 0:
                log.warning("kvact load of %s: status %d", spec.req_id, status)
                self._fail(spec, 0, hits)
                continue
            self._stats.add("loaded_tokens", int((spec.slots[:hits * self._chunk_tokens] >= 0).sum()))
            self._stats.add("loaded_bytes", hits * self._chunk_bytes)
        self._loads = []

    def _fail(self, spec, first, last):
        """Chunks [first, last) of spec did not load: their blocks are load errors."""
        self._failed.add(spec.req_id)
        self._tainted[spec.req_id] = spec.epoch
        for blocks in spec.chunk_blocks[first:last]:
            self._errors.update(blocks)

    def _ranked(self, keys):
        return _rank_keys(keys, self._rank)


def _rank_keys(keys, rank):
    """keys (of kv_rank 0) as TP rank `rank` stores them."""
    return keys if rank == 0 else [k._replace(kv_rank=rank) for k in keys]


def _hit_source(tier):
    """vLLM's label of hits an L2 tier named `tier` supplied."""
    name = (tier or "").lower()
    if "disk" in name or "nvme" in name or "ssd" in name:
        return CacheHitSource.DISK
    return CacheHitSource.EXTERNAL_UNSPECIFIED


def _hits(handle):
    if handle is None:
        return 0
    try:
        return handle.wait()
    except kvact.KvactError as e:
        log.warning("kvact prefetch failed: %s", e)
        return 0


def _group0(block_ids):
    """The block ids of KV cache group 0: vLLM passes tuple[list[int], ...] (or, before
    0.9, a flat list; None for no new blocks)."""
    if not block_ids:
        return []
    return list(block_ids[0]) if isinstance(block_ids[0], (list, tuple)) else list(block_ids)


def _resumed(cached, i, req_id):
    """Whether cached request i resumes from preemption (its block ids are then all new)."""
    if hasattr(cached, "resumed_req_ids"):
        return req_id in cached.resumed_req_ids
    return bool(cached.resumed_from_preemption[i])


def block_hash_keys(model, block_hashes, chunk_tokens, hash_block_size, kv_rank=0, salt=""):
    """The kvact keys of the full chunks that block_hashes (vLLM's Request.block_hashes,
    one per hash_block_size tokens) cover: chunk i's hash is that of its last block, which
    vLLM chains over every block before it and the request's identity (cache_salt, LoRA,
    multimodal inputs, prompt embeddings)."""
    per = chunk_tokens // hash_block_size
    return [kvact.ObjectKey(model_name(model), kv_rank, 0,
                            _key_hash(block_hashes[(i + 1) * per - 1], salt))
            for i in range(len(block_hashes) // per)]


def _key_hash(block_hash, salt):
    """A kva_key hash (1..32 bytes) of a vLLM block hash: the hash itself (sha256's 32
    bytes, xxhash's 8 or 16), or its SHA-256 when kvact.salt is set or it is longer."""
    raw = bytes(block_hash)
    if salt or not 0 < len(raw) <= 32:
        return hashlib.sha256(salt.encode() + b"\0" + raw).digest()
    return raw


def _layout_name(cache_config):
    """vLLM's kv_cache_layout as PagedKVCache names it ("LBHNC", ...), or None: then the
    layout is read from the tensors' strides."""
    layout = getattr(cache_config, "kv_cache_layout", None)
    name = getattr(layout, "name", layout)
    return name if isinstance(name, str) and len(name) == 5 else None


def _tp_rank():
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return get_tensor_model_parallel_rank()
    except (ImportError, AssertionError):  # no vLLM, or no TP group (one rank)
        return 0


def _sync_device(layer):
    """Waits for the engine's stream on CUDA: the stores read what the forward wrote."""
    if layer.is_cuda:
        import torch
        torch.cuda.current_stream(layer.device).synchronize()
