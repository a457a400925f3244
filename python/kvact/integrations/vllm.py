"""vllm.py — KvactConnector: vLLM's v1 KV connector (KVConnectorBase_V1) over kvact.

Load it with
    --kv-transfer-config '{"kv_connector": "KvactConnector",
                           "kv_connector_module_path": "kvact.integrations.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"kvact.config": {...}}}'
Extra config: "kvact.config" (dict of kvact settings) and/or "kvact.config_file"
(a kvact config file; the dict's settings apply on top), "kvact.chunk_tokens"
(default 256, a multiple of vLLM's block_size), "kvact.model" (default the
served model's name), "kvact.salt", "kvact.kv_format" ("flash", the default:
per layer [2, blocks, block_size, heads, head_dim]; or "flashinfer":
[blocks, 2, ...]).

Design. vLLM runs the scheduler-side and the worker-side connector in
different processes; each opens its own kvact.Runtime from the same config,
so in a deployment "client.socket" names one kvactd that both use. Two
connectors of one process with the same config share one Runtime (vLLM's
single-process mode, and the tests).

Scheduler side (keys of kv_rank 0: every TP rank stores the same chunks):
  get_num_new_matched_tokens: sm.lookup over the full chunks of all but the
    request's last token (vLLM must compute at least one token), so the hit
    is a whole number of chunks < num_tokens; returns the hit beyond
    num_computed_tokens (vLLM's own prefix cache). The lookup does not pin:
    vLLM may call this several times and never schedule the request, and a
    pin would then leak. A chunk evicted before the worker's prefetch is
    caught there and reported as a load error, which vLLM recomputes.
  update_state_after_alloc: remembers the tokens to load
    [hit - num_external_tokens, hit) and that the hit's chunks are stored.
  build_connector_meta: per scheduled request, a _LoadSpec (its keys, a slot
    mapping with -1 for the tokens vLLM already holds, the block ids each
    chunk writes) and a _SaveSpec of the full chunks this step completes.
    Only full chunks are stored (as LMCache does by default): kvact stores
    ntokens in ((n-1)*ct, n*ct], and a partial chunk would later shadow the
    full one under its key. A request whose computed tokens went back (a
    load error, a preemption) has its saved-chunk mark lowered with them.
  request_finished: (False, None) — the store is synchronous: wait_for_save
    returns once the bytes are copied out of the paged cache into L1.

Worker side: register_kv_caches wraps the layers, in the dict's order, in one
kvact.PagedKVCache. start_load_kv checks every request's load spec (keys, a
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
are made in wait_for_save (after the forward pass), skipping requests whose
load failed this step: their new tokens were computed over a wrong prefix.
"""
import enum
import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field

import numpy as np

import kvact

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                   KVConnectorMetadata,
                                                                   KVConnectorRole)
except ImportError:  # vLLM absent: just what KvactConnector uses of its base
    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class KVConnectorBase_V1:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._vllm_config, self._role = vllm_config, role
            self._connector_metadata = None

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            assert self._connector_metadata is not None
            return self._connector_metadata

log = logging.getLogger(__name__)


@dataclass
class _LoadSpec:
    """One request's load: chunks [first, first + len(keys)) of its tokens."""

    req_id: str
    keys: list           # ObjectKey of kv_rank 0, one per chunk
    slots: np.ndarray    # int64, chunk_tokens per chunk; -1 where vLLM holds the token
    chunk_blocks: list   # per chunk, the block ids its load writes


@dataclass
class _SaveSpec:
    """One request's store: the full chunks it completes this step."""

    req_id: str
    keys: list
    slots: np.ndarray


@dataclass
class KvactConnectorMetadata(KVConnectorMetadata):
    """What the scheduler side tells the workers for one step."""

    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)


@dataclass
class _Tracked:
    """The scheduler side's view of one scheduled request."""

    request: object       # vLLM's Request: its all_token_ids grow as tokens are sampled
    saved_chunks: int     # chunks [0, saved_chunks) are in kvact (or being stored)
    load: tuple = None    # (keys, first token, end token) to load in the next step
    block_ids: list = field(default_factory=list)


# ---- runtimes shared by the connectors of one process -----------------------------------
_runtimes = {}  # config identity -> [kvact.Runtime, connectors using it]
_runtimes_lock = threading.Lock()


def _acquire_runtime(extra):
    ident = json.dumps([extra.get("kvact.config_file"), extra.get("kvact.config", {})],
                       sort_keys=True)
    with _runtimes_lock:
        entry = _runtimes.get(ident)
        if entry is None:
            entry = _runtimes[ident] = [kvact.Runtime(_config(extra)), 0]
        entry[1] += 1
        return ident, entry[0]


def _release_runtime(ident):
    with _runtimes_lock:
        entry = _runtimes[ident]
        entry[1] -= 1
        if entry[1] == 0:
            del _runtimes[ident]
            entry[0].close()


def _config(extra):
    path = extra.get("kvact.config_file")
    cfg = kvact.Config.from_file(path) if path else kvact.Config()
    for key, value in extra.get("kvact.config", {}).items():
        cfg.set(key, value)
    return cfg


# ---- the connector ------------------------------------------------------------------------
class KvactConnector(KVConnectorBase_V1):
    """vLLM's KV connector over kvact (see the module docstring for the design)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        if kv_cache_config is None:
            super().__init__(vllm_config, role)  # vLLM before kv_cache_config was passed
        else:
            super().__init__(vllm_config, role, kv_cache_config)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        self._block_size = vllm_config.cache_config.block_size
        self._chunk_tokens = int(extra.get("kvact.chunk_tokens", 256))
        if self._chunk_tokens <= 0 or self._chunk_tokens % self._block_size:
            raise ValueError("kvact.chunk_tokens %d is not a multiple of block_size %d" %
                             (self._chunk_tokens, self._block_size))
        self._model = _model_name(extra.get("kvact.model", vllm_config.model_config.model))
        self._salt = extra.get("kvact.salt", "")
        self._fmt = extra.get("kvact.kv_format", "flash")
        self._runtime_id, runtime = _acquire_runtime(extra)
        self.storage = runtime.storage
        self._is_scheduler = role == KVConnectorRole.SCHEDULER
        self._tracked, self._lookups = {}, {}        # scheduler side
        self._kv, self._layer_index = None, {}       # worker side
        self._rank = 0 if self._is_scheduler else _tp_rank()
        self._reset_step()

    # ---- scheduler side ---------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens = list(request.all_token_ids)[:request.num_tokens - 1]
        keys = self._keys(tokens)
        hit = self.storage.lookup(keys).total * self._chunk_tokens if keys else 0
        self._lookups[request.request_id] = (keys, hit)
        return max(0, hit - num_computed_tokens), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        looked_up = self._lookups.pop(request.request_id, None)
        keys, hit = looked_up or ([], 0)
        if num_external_tokens > hit:  # the load would start before the request's token 0
            raise ValueError("kvact: request %r: %d external tokens to load, but %s" % (
                request.request_id, num_external_tokens,
                "its lookup found %d" % hit if looked_up else
                "get_num_new_matched_tokens did not look it up"))
        t = _Tracked(request, saved_chunks=hit // self._chunk_tokens)
        if num_external_tokens > 0:
            t.load = (keys, hit - num_external_tokens, hit)
        self._tracked[request.request_id] = t

    def build_connector_meta(self, scheduler_output):
        meta = KvactConnectorMetadata()
        for req_id in getattr(scheduler_output, "finished_req_ids", ()):
            self._tracked.pop(req_id, None)
        scheduled = scheduler_output.num_scheduled_tokens
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
            t.saved_chunks = min(t.saved_chunks, computed // self._chunk_tokens)
            self._plan(meta, req_id, t, computed + scheduled[req_id])
        return meta

    def request_finished(self, request, block_ids):
        self._tracked.pop(request.request_id, None)
        self._lookups.pop(request.request_id, None)
        return False, None

    def _plan(self, meta, req_id, t, computed_after):
        """Adds req_id's load (if one is pending) and the store of the full chunks whose
        tokens are all computed once this step is done."""
        ct = self._chunk_tokens
        if t.load is not None:
            keys, start, end = t.load
            meta.loads.append(self._load_spec(req_id, t.block_ids, keys, start, end))
            t.load = None
        full = computed_after // ct
        if full > t.saved_chunks:
            keys = self._keys(list(t.request.all_token_ids)[:full * ct])
            slots = self._slots(t.block_ids, t.saved_chunks * ct, full * ct)
            meta.saves.append(_SaveSpec(req_id, keys[t.saved_chunks:], slots))
            t.saved_chunks = full

    def _load_spec(self, req_id, block_ids, keys, start, end):
        ct, bs = self._chunk_tokens, self._block_size
        first, last = start // ct, end // ct
        slots = self._slots(block_ids, first * ct, end)
        slots[:start - first * ct] = -1
        chunk_blocks = [block_ids[max(c * ct, start) // bs:(c + 1) * ct // bs]
                        for c in range(first, last)]
        return _LoadSpec(req_id, keys[first:last], slots, chunk_blocks)

    def _slots(self, block_ids, start, end):
        tok = np.arange(start, end, dtype=np.int64)
        blocks = np.asarray(block_ids, dtype=np.int64)
        return blocks[tok // self._block_size] * self._block_size + tok % self._block_size

    def _keys(self, tokens):
        return kvact.chunk_keys(self._model, tokens, self._chunk_tokens, 0, self._salt)

    # ---- worker side --------------------------------------------------------------------
    def register_kv_caches(self, kv_caches):
        names = list(kv_caches)
        self._first_layer = kv_caches[names[0]]
        self._layer_index = {name: i for i, name in enumerate(names)}
        self._kv = kvact.PagedKVCache(self.storage, [kv_caches[n] for n in names], self._fmt,
                                      self._chunk_tokens)

    def start_load_kv(self, forward_context, **kwargs):
        self._reset_step()
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

    def wait_for_layer_load(self, layer_name):
        layer = self._layer_index.get(layer_name)
        if layer is not None:
            for _, _, op in self._loads:
                op.wait_layer(layer)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Nothing per layer: kvact's store gathers all layers in one op (wait_for_save)."""

    def wait_for_save(self):
        self._finish_loads()
        meta = self._get_connector_metadata()
        saves = [s for s in meta.saves if s.req_id not in self._failed]
        if not saves:
            return
        _sync_device(self._first_layer)
        ops = [self._kv.store(self._ranked(s.keys), s.slots) for s in saves]
        for spec, op in zip(saves, ops):
            status = op.wait()
            if status != 0:  # best effort: a chunk not stored is a later miss
                log.warning("kvact store of %s: status %d", spec.req_id, status)

    def get_finished(self, finished_req_ids):
        return None, None  # nothing is asynchronous across steps

    def get_block_ids_with_load_errors(self):
        self._finish_loads()
        errors, self._errors = self._errors, set()
        return errors

    def shutdown(self):
        if self._kv is not None:
            self._kv.close()
            self._kv = None
        if self._runtime_id is not None:
            _release_runtime(self._runtime_id)
            self._runtime_id = None

    def _reset_step(self):
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
        self._loads = []

    def _fail(self, spec, first, last):
        """Chunks [first, last) of spec did not load: their blocks are load errors."""
        self._failed.add(spec.req_id)
        for blocks in spec.chunk_blocks[first:last]:
            self._errors.update(blocks)

    def _ranked(self, keys):
        return keys if self._rank == 0 else [k._replace(kv_rank=self._rank) for k in keys]


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


def _tp_rank():
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return get_tensor_model_parallel_rank()
    except (ImportError, AssertionError):  # no vLLM, or no TP group (one rank)
        return 0


def _model_name(name):
    """name when it is a valid kvact model name (1..63 bytes, no '@'), else a digest of it."""
    raw = str(name).encode()
    if 0 < len(raw) <= 63 and b"@" not in raw and b"\0" not in raw:
        return str(name)
    return "m-" + hashlib.sha256(raw).hexdigest()[:40]


def _sync_device(layer):
    """Waits for the engine's stream on CUDA: the stores read what the forward wrote."""
    if layer.is_cuda:
        import torch
        torch.cuda.current_stream(layer.device).synchronize()
