"""test_vllm_connector.py — KvactConnector driven by a scripted vLLM engine loop over CPU caches.

The engine makes vLLM's connector calls in vLLM's order each step. Its
"model" writes, for each token it computes, a KV that is a function of the
token prefix and the layer — and a wrong one whenever the cache does not
already hold the right KV of the tokens before it, as attention over a bad
prefix would. After every step the engine checks that the cache holds the
right KV of every request's computed tokens, so a loaded block is
byte-checked against what computing it would have given, and a chunk stored
from a bad prefix shows up when a later request loads it.
"""
import multiprocessing
import pickle
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch

import hashlib

from conftest import kvactd as start_kvactd
from kvact.integrations.vllm import (KvactConnector, KVConnectorRole, _LoadSpec,
                                     block_hash_keys)
from kvact.integrations._vllm_base import BlockRemoved, BlockStored, KvactConnectorStats

BS, CT, LAYERS, HEADS, HEAD_DIM, BLOCKS = 4, 8, 3, 2, 8, 96
MODEL = "fake-llm"
NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]


def expected_kv(tokens, layer, dtype):
    """[2, len(tokens), HEADS, HEAD_DIM]: the KV of each position, a function of its prefix."""
    seeds, h = [], 17
    for tok in tokens:
        h = (h * 1000003 + tok + 1) % (1 << 31)
        seeds.append(h)
    s = torch.tensor(seeds, dtype=torch.float64)[:, None]
    j = torch.arange(2 * HEADS * HEAD_DIM, dtype=torch.float64)
    v = torch.sin(s * 1e-3 + j * 0.37 + layer * 1.3)
    return v.reshape(len(tokens), 2, HEADS, HEAD_DIM).transpose(0, 1).to(dtype)


class Model:
    """The paged caches and a fake forward pass over them."""

    def __init__(self, dtype, fmt):
        self.dtype, self.fmt = dtype, fmt
        shape = (2, BLOCKS, BS, HEADS, HEAD_DIM) if fmt == "flash" else (BLOCKS, 2, BS, HEADS, HEAD_DIM)
        self.layers = [torch.zeros(shape, dtype=dtype) for _ in range(LAYERS)]
        self.computed = {}  # req id -> tokens the model computed

    def _view(self, layer, block_ids, start, end):
        kv = self.layers[layer] if self.fmt == "flash" else self.layers[layer].transpose(0, 1)
        t = torch.arange(start, end)
        return kv, torch.tensor(block_ids, dtype=torch.long)[t // BS], t % BS

    def read(self, layer, req, end):
        kv, b, o = self._view(layer, req.block_ids, 0, end)
        return kv[:, b, o]

    def compute(self, layer, req, start, end):
        """Writes the KV of tokens [start, end) of req at `layer`: right only if the cache
        holds the right KV of tokens [0, start)."""
        want = expected_kv(req.all_token_ids[:end], layer, self.dtype)
        ok = torch.equal(self.read(layer, req, start), want[:, :start])
        kv, b, o = self._view(layer, req.block_ids, start, end)
        kv[:, b, o] = want[:, start:] if ok else want[:, start:] + 1
        if layer == 0:
            self.computed[req.request_id] = self.computed.get(req.request_id, 0) + end - start

    def fill(self, req, end):
        """Tokens [0, end) as vLLM's prefix cache would hold them (not computed here)."""
        for layer in range(LAYERS):
            kv, b, o = self._view(layer, req.block_ids, 0, end)
            kv[:, b, o] = expected_kv(req.all_token_ids[:end], layer, self.dtype)

    def holds(self, req, end):
        return all(torch.equal(self.read(l, req, end),
                               expected_kv(req.all_token_ids[:end], l, self.dtype))
                   for l in range(LAYERS))

    def scribble(self, block_ids):
        """Freed blocks get other data, as when another request reuses them."""
        for layer in self.layers:
            if self.fmt == "flash":
                layer[:, block_ids] = 7
            else:
                layer[block_ids] = 7


def block_hashes(tokens):
    """vLLM's Request.block_hashes, reduced: one SHA-256 per full block, chained."""
    out, parent = [], b"none"
    for b in range(len(tokens) // BS):
        parent = hashlib.sha256(parent + repr(tokens[b * BS:(b + 1) * BS]).encode()).digest()
        out.append(parent)
    return out


class Request:
    """The fields of vLLM's Request the connector reads, and the engine's bookkeeping."""

    def __init__(self, req_id, prompt, max_tokens):
        self.request_id, self.prompt_token_ids = req_id, list(prompt)
        self.all_token_ids = list(prompt)
        self.max_tokens, self.num_computed_tokens, self.block_ids = max_tokens, 0, []
        self.preempted, self.local_hit = False, 0

    @property
    def num_tokens(self):
        return len(self.all_token_ids)

    @property
    def block_hashes(self):
        return block_hashes(self.all_token_ids)


class WorkerSide:
    """vLLM's model runner: the paged caches, the fake model and the worker-side connector."""

    def __init__(self, cfg, dtype, fmt):
        self.model = Model(dtype, fmt)
        self.conn = KvactConnector(cfg, KVConnectorRole.WORKER, None)
        self.conn.register_kv_caches(dict(zip(NAMES, self.model.layers)))

    def execute(self, meta, batch, finished):
        """One forward pass of batch [(request, tokens scheduled)] given the pickled
        metadata: the block ids that failed to load, the step's stats, events and worker
        metadata (the loads it ran, for the scheduler side's leases)."""
        w = self.conn
        w.bind_connector_metadata(pickle.loads(meta))
        w.start_load_kv(NS())
        for layer, name in enumerate(NAMES):
            w.wait_for_layer_load(name)
            for req, n in batch:
                self.model.compute(layer, req, req.num_computed_tokens, req.num_computed_tokens + n)
            w.save_kv_layer(name, self.model.layers[layer], None)
        w.wait_for_save()
        assert w.get_finished(finished) == (None, None)
        errors = w.get_block_ids_with_load_errors()
        stats, events = w.get_kv_connector_stats(), w.get_kv_connector_kv_cache_events()
        done = w.build_connector_worker_meta()
        w.clear_connector_metadata()
        return errors, stats, events, done

    def settle(self):
        """vLLM's first connector call of a step (handle_preemptions): the stores the
        last step started have ended."""
        self.conn.handle_preemptions(None)

    def wrong(self, reqs):
        """The requests whose computed tokens the cache does not hold right."""
        return [r.request_id for r in reqs if not self.model.holds(r, r.num_computed_tokens)]

    def fill(self, req, end):
        self.model.fill(req, end)

    def scribble(self, block_ids):
        self.model.scribble(block_ids)

    def computed(self):
        return dict(self.model.computed)

    def close(self):
        self.conn.shutdown()


def _serve(pipe, cfg, dtype, fmt):
    side = WorkerSide(cfg, dtype, fmt)
    while True:
        name, args = pipe.recv()
        try:
            pipe.send((True, getattr(side, name)(*args)))
        except Exception as e:  # raised again in the engine's process
            pipe.send((False, e))
        if name == "close":
            return


class RemoteWorkerSide:
    """A WorkerSide in a spawned process of its own (as vLLM's workers are), over a pipe."""

    def __init__(self, cfg, dtype, fmt):
        ctx = multiprocessing.get_context("spawn")
        self._pipe, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, cfg, dtype, fmt), daemon=True)
        self._proc.start()

    def __getattr__(self, name):
        def call(*args):
            self._pipe.send((name, args))
            ok, value = self._pipe.recv()
            if not ok:
                raise value
            return value
        return call

    def close(self):
        self.__getattr__("close")()
        self._proc.join()


class Engine:
    """vLLM's scheduler and model runner, reduced to the connector's calls in their order."""

    def __init__(self, kvact_settings, dtype=torch.bfloat16, fmt="flash", budget=40,
                 remote=False, extra=None):
        extra = {"kvact.config": kvact_settings, "kvact.chunk_tokens": CT,
                 "kvact.model": MODEL, "kvact.kv_format": fmt, **(extra or {})}
        cfg = NS(kv_transfer_config=NS(kv_connector_extra_config=extra),
                 cache_config=NS(block_size=BS), model_config=NS(model=MODEL),
                 kv_events_config=NS(enable_kv_cache_events=True))
        self.sched = KvactConnector(cfg, KVConnectorRole.SCHEDULER, None)
        self.w = (RemoteWorkerSide if remote else WorkerSide)(cfg, dtype, fmt)
        self.sm, self.budget = self.sched.storage, budget
        self.free = list(range(BLOCKS))
        self.waiting, self.running, self.finished = [], [], []
        self.matched, self.load_errors, self.done, self.metas = {}, [], {}, []
        self.events, self.stats = [], KvactConnectorStats()  # as vLLM's scheduler gathers them
        self.after_schedule = None  # called with the step's metadata before the worker runs

    def add(self, req_id, prompt, max_tokens=3, local_hit=0):
        """local_hit: tokens (whole blocks) vLLM's own prefix cache is to hold at admission."""
        req = Request(req_id, prompt, max_tokens)
        req.local_hit = local_hit
        self.waiting.append(req)
        return req

    def preempt(self, req_id):
        req = next(r for r in self.running if r.request_id == req_id)
        self.running.remove(req)
        self._free(req)
        req.num_computed_tokens, req.preempted = 0, True
        self.waiting.insert(0, req)

    def run(self, max_steps=100):
        for _ in range(max_steps):
            if not (self.waiting or self.running):
                self.w.settle()  # the next step's first call: the last stores have ended
                return
            self.step()
        raise AssertionError("requests still running after %d steps" % max_steps)

    def step(self):
        out = self._schedule()
        meta = self.sched.build_connector_meta(out)
        self.metas.append(meta)
        if self.after_schedule is not None:
            self.after_schedule(meta)
        reqs = {r.request_id: r for r in self.running}
        batch = [(reqs[i], n) for i, n in out.num_scheduled_tokens.items()]
        errors, stats, events, done = self.w.execute(pickle.dumps(meta), batch,
                                                     out.finished_req_ids)
        self.load_errors.append(errors)
        self.sched.update_connector_output(NS(kv_cache_events=events,
                                              kv_connector_worker_meta=done))
        self.events += self.sched.take_events()
        for s in (stats, self.sched.get_kv_connector_stats()):
            if s is not None:
                self.stats.aggregate(s)
        self._update(out, errors)
        assert self.w.wrong(self.running) == []

    @property
    def computed(self):
        """req id -> tokens the model computed."""
        return self.w.computed()

    # ---- scheduler ----------------------------------------------------------------------
    def _schedule(self):
        left, scheduled = self.budget, {}
        cached = NS(req_ids=[], resumed_from_preemption=[], new_token_ids=[], new_block_ids=[],
                    num_computed_tokens=[])
        for req in self.running:
            n = min(req.num_tokens - req.num_computed_tokens, left)
            if n > 0:
                new_blocks = self._grow(req, req.num_computed_tokens + n)
                self._add_cached(cached, req, new_blocks, False)
                scheduled[req.request_id], left = n, left - n
        new_reqs, skipped = [], []
        while self.waiting and left > 0:
            req = self.waiting[0]
            local = 0 if req.preempted else req.local_hit
            self._grow(req, local)
            self.w.fill(req, local)
            ext, is_async = self.sched.get_num_new_matched_tokens(req, local)
            if ext is None:  # kvact brings an L2 hit into L1: vLLM asks again next step
                self._free(req)
                skipped.append(self.waiting.pop(0))
                continue
            assert not is_async and (ext == 0 or (local + ext) % BS == 0)
            assert local + ext < req.num_tokens
            req.num_computed_tokens = local + ext
            n = min(req.num_tokens - req.num_computed_tokens, left)
            self._grow(req, req.num_computed_tokens + n)
            self.sched.update_state_after_alloc(req, NS(get_block_ids=lambda r=req: (r.block_ids,)), ext)
            self.matched.setdefault(req.request_id, []).append(ext)
            if req.preempted:
                self._add_cached(cached, req, req.block_ids, True)
            else:
                new_reqs.append(NS(req_id=req.request_id, prompt_token_ids=req.prompt_token_ids,
                                   block_ids=(list(req.block_ids),),
                                   num_computed_tokens=req.num_computed_tokens))
            scheduled[req.request_id], left = n, left - n
            self.running.append(self.waiting.pop(0))
        self.waiting[:0] = skipped
        finished, self.finished = self.finished, []
        return NS(scheduled_new_reqs=new_reqs, scheduled_cached_reqs=cached,
                  num_scheduled_tokens=scheduled, finished_req_ids=set(finished))

    def _add_cached(self, cached, req, new_blocks, resumed):
        cached.req_ids.append(req.request_id)
        cached.resumed_from_preemption.append(resumed)
        cached.new_token_ids.append([])
        cached.new_block_ids.append((list(new_blocks),) if new_blocks else None)
        cached.num_computed_tokens.append(req.num_computed_tokens)

    def _grow(self, req, tokens):
        need = -(-tokens // BS) - len(req.block_ids)
        new = [self.free.pop(0) for _ in range(max(0, need))]
        req.block_ids += new
        return new

    def _free(self, req):
        self.w.scribble(req.block_ids)
        self.free += req.block_ids
        req.block_ids = []

    def _update(self, out, errors):
        for req in list(self.running):
            n = out.num_scheduled_tokens.get(req.request_id, 0)
            bad = [i for i, b in enumerate(req.block_ids) if b in errors]
            if bad:  # vLLM: recompute from the first block that failed to load
                req.num_computed_tokens = min(req.num_computed_tokens, bad[0] * BS)
                continue
            req.num_computed_tokens += n
            if n and req.num_computed_tokens == req.num_tokens:
                self._sample(req)

    def _sample(self, req):
        req.all_token_ids.append((sum(req.all_token_ids) * 31 + 7) % 1000)
        if req.num_tokens - len(req.prompt_token_ids) == req.max_tokens:
            assert self.sched.request_finished(req, list(req.block_ids)) == (False, None)
            self.running.remove(req)
            self.done[req.request_id] = list(req.all_token_ids)
            self._free(req)
            self.finished.append(req.request_id)

    def close(self):
        self.w.close()
        self.sched.shutdown()


def settings(**l2):
    mock = {"type": "mock", "capacity_bytes": 1 << 24}
    mock.update(l2)
    return {"l1.size_bytes": 1 << 22, "l1.hugepages": False, "l1.pinned": False,
            "runtime.workers": 2, "l2": [mock]}


def prompt(n, seed):
    return [(seed * 7919 + i * 104729) % 1000 for i in range(n)]


def keys_of(tokens):
    return block_hash_keys(MODEL, block_hashes(tokens), CT, BS)


@pytest.fixture
def kvactd():
    """A kvactd with a mock tier (conftest.kvactd): its socket."""
    with start_kvactd(l1_bytes=4194304) as (sock, _):
        yield sock


@pytest.fixture
def engine(request):
    dtype, fmt, extra = getattr(request, "param", (torch.bfloat16, "flash", {}))
    e = Engine(settings(**extra), dtype, fmt)
    yield e
    e.close()


@pytest.mark.parametrize("engine", [(torch.bfloat16, "flash", {}), (torch.float16, "flash", {}),
                                    (torch.float16, "flashinfer", {})], indirect=True)
def test_shared_prefixes_are_loaded_byte_exact(engine):
    check_shared_prefixes(engine)


def check_shared_prefixes(engine):
    base = prompt(29, 1)  # 3 full chunks and 5 tokens
    engine.add("A", base)
    engine.add("D", prompt(13, 2))
    engine.run()
    engine.add("B", base[:24] + prompt(10, 3))  # A's first 3 chunks, then its own tokens
    engine.add("C", base)                       # all of A's prompt
    engine.run()
    assert engine.matched == {"A": [0], "D": [0], "B": [24], "C": [24]}
    # B and C computed only what was not loaded: the rest of the prompt and the samples
    assert engine.computed["B"] == 34 - 24 + 2 and engine.computed["C"] == 29 - 24 + 2
    assert not any(engine.load_errors)
    assert engine.done["C"] == engine.done["A"]
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_stores_loads_and_resets_are_reported_as_events_and_stats(engine):
    base = prompt(29, 12)
    engine.add("A", base)
    engine.run()
    stored = [e for e in engine.events if isinstance(e, BlockStored)]
    hashes = block_hashes(base)
    assert [e.block_hashes for e in stored] == [hashes[c * 2:c * 2 + 2] for c in range(3)]
    assert [e.token_ids for e in stored] == [base[c * CT:(c + 1) * CT] for c in range(3)]
    assert stored[1].parent_block_hash == hashes[1] and stored[0].parent_block_hash is None
    engine.add("B", base)
    engine.run()
    chunk_bytes = engine.w.conn._kv.chunk_layout().nbytes
    assert engine.stats.reduce() == {
        "lookups": 2, "hit_tokens": 24, "lease_expiries": 0, "skipped_slow_tokens": 0,
        "loaded_tokens": 24, "loaded_bytes": 3 * chunk_bytes,
        "stored_tokens": 3 * CT, "stored_bytes": 3 * chunk_bytes, "load_error_blocks": 0,
        "load_error_requests": 0}
    engine.sm.flush(timeout=10.0)  # the chunks reach the L2 tier too
    assert engine.sched.reset_cache() is True
    found = engine.sm.lookup(keys_of(base))  # gone from L1; the L2 tier keeps its copies
    assert found.tiers["L1"] == 0 and found.total == 3
    (removed,) = engine.sched.take_events()
    assert isinstance(removed, BlockRemoved) and removed.block_hashes == hashes[:6]
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_the_last_token_is_always_computed(engine):
    base = prompt(24, 4)  # exactly 3 chunks
    engine.add("A", base)
    engine.run()
    engine.add("B", base)
    engine.run()
    # A stored 3 chunks, but B may load only 2: its last token (23) must be computed
    assert engine.matched["B"] == [16]
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_chunked_prefill_stores_chunks_as_they_complete(engine):
    engine.budget = 6  # not a multiple of the chunk: a chunk completes across steps
    engine.add("A", prompt(27, 5))
    engine.run(max_steps=200)
    keys = keys_of(prompt(27, 5))
    assert engine.sm.lookup(keys).total == 3
    engine.add("B", prompt(27, 5))
    engine.run(max_steps=200)
    assert engine.matched["B"] == [24] and not any(engine.load_errors)
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_a_preempted_request_reloads_its_chunks(engine):
    a = engine.add("A", prompt(30, 6), max_tokens=6)
    while a.num_tokens < 33:  # prompt done, 3 tokens sampled: 4 full chunks computed
        engine.step()
    engine.preempt("A")       # its blocks are freed and overwritten
    engine.run()
    assert engine.matched["A"] == [0, 32]  # the 4th chunk holds two of its own samples
    # computed: the prompt and tokens 30, 31 before; after the reload only tokens 32..34
    assert engine.computed["A"] == 32 + 3
    assert not any(engine.load_errors)
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


@pytest.mark.parametrize("engine", [(torch.bfloat16, "flash", {"fail_load_rate": 1.0})],
                         indirect=True)
def test_an_l2_tier_failing_to_load_costs_its_hits_not_the_request(engine):
    """The lookup's lease brings L2 hits into L1 before it counts them: a tier that fails
    that load counts nothing, so vLLM never schedules a load that would fail (under
    vLLM's default kv_load_failure_policy "fail", a failed request)."""
    base = prompt(29, 7)
    keys = keys_of(base)
    engine.add("A", base)
    engine.run()
    engine.sm.flush(timeout=10.0)
    assert engine.sm.delete(keys[1:3]) == [0, 0]  # chunk 0 stays in L1, 1 and 2 only in L2
    assert engine.sm.lookup(keys).total == 3
    own = base[:24] + prompt(12, 9)  # A's 3 chunks, then a 4th
    engine.add("B", own)
    engine.run()
    assert engine.matched["B"] == [CT]  # chunk 0, from L1; chunks 1, 2 failed to come in
    assert not any(engine.load_errors)
    engine.add("C", own)  # B stored chunks 1..3 again
    engine.run()
    assert engine.matched["C"] == [32] and engine.done["C"] == engine.done["B"]
    assert not any(engine.load_errors)
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_several_requests_in_one_batch_share_and_store(engine):
    engine.budget = 200
    common = prompt(16, 8)
    for i in range(4):
        engine.add("R%d" % i, common + prompt(9 + i, 20 + i))
    engine.run()
    # all four were admitted in one step, before any chunk was stored: no hits
    assert all(m == [0] for m in engine.matched.values())
    engine.add("S", common + prompt(9, 20))  # R0's prompt
    engine.add("T", common + prompt(9, 99))  # only the common chunks
    engine.run()
    assert engine.matched["S"] == [24] and engine.matched["T"] == [16]
    assert engine.done["S"] == engine.done["R0"]
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_tokens_in_vllms_own_prefix_cache_are_not_loaded(engine):
    base = prompt(29, 10)
    engine.add("A", base)
    engine.run()
    b = engine.add("B", base, local_hit=4)  # half of chunk 0 in vLLM's cache: 20 to load
    engine.step()
    (load,) = engine.metas[-1].loads
    slots = [b.block_ids[t // BS] * BS + t % BS for t in range(24)]
    assert list(load.slots) == [-1] * 4 + slots[4:]  # the worker does not write vLLM's tokens
    engine.run()
    assert engine.matched["B"] == [20] and engine.computed["B"] == 29 - 24 + 2
    assert not any(engine.load_errors)
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    assert engine.sm.memcheck(), engine.sm.memcheck_report()


def test_scheduler_and_worker_processes_share_one_kvactd(kvactd):
    engine = Engine({"client.socket": kvactd}, remote=True)
    try:
        check_shared_prefixes(engine)
        a = engine.add("P", prompt(30, 11), max_tokens=6)
        while a.num_tokens < 33:
            engine.step()
        engine.preempt("P")
        engine.run()
        assert engine.matched["P"] == [0, 32] and engine.computed["P"] == 32 + 3
        engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
        assert engine.sm.memcheck(), engine.sm.memcheck_report()
    finally:
        engine.close()


# ---- malformed scheduler input: a clear error, and every lock of the step given back ----


def two_loads(engine, seed):
    """Stores a prompt, then schedules B (all of its chunks) and C (its first two): the
    step's metadata, not yet given to the worker."""
    base = prompt(29, seed)
    engine.add("A", base)
    engine.run()
    engine.add("B", base)
    engine.add("C", base[:16] + prompt(9, seed + 1))
    meta = engine.sched.build_connector_meta(engine._schedule())
    assert [spec.req_id for spec in meta.loads] == ["B", "C"]
    return meta


def start_load(engine, meta):
    """The worker's start_load_kv of meta; the step's end then hands the worker
    metadata to the scheduler side (which gives the step's lookup leases back), raised
    or not."""
    w = engine.w.conn
    w.bind_connector_metadata(meta)
    try:
        w.start_load_kv(NS())
    finally:
        w.wait_for_save()
        done = w.build_connector_worker_meta()
        w.clear_connector_metadata()
        engine.sched.update_connector_output(NS(kv_cache_events=None,
                                                kv_connector_worker_meta=done))
        w.handle_preemptions(None)  # the next step's first call: the stores have ended


def no_lock_held(engine):
    engine.sm.flush(timeout=10.0)  # the store-behind's copies hold read locks
    return engine.sm.memcheck()


def test_a_short_slot_mapping_is_refused_naming_the_request_and_leaves_no_lock(engine):
    meta = two_loads(engine, 30)
    meta.loads[0].slots = meta.loads[0].slots[:5]
    with pytest.raises(ValueError, match="request 'B'"):
        start_load(engine, meta)
    assert no_lock_held(engine), engine.sm.memcheck_report()


def test_a_load_without_keys_is_refused_naming_the_request_and_leaves_no_lock(engine):
    meta = two_loads(engine, 32)
    meta.loads.append(_LoadSpec("X", [], np.zeros(0, dtype=np.int64), []))
    with pytest.raises(ValueError, match="request 'X'"):
        start_load(engine, meta)
    assert no_lock_held(engine), engine.sm.memcheck_report()


def test_a_load_without_a_lookup_is_refused_by_the_scheduler_naming_the_request(engine):
    req = Request("Z", prompt(20, 34), 3)
    blocks = NS(get_block_ids=lambda: ([0, 1, 2, 3, 4],))
    with pytest.raises(ValueError, match="request 'Z'"):
        engine.sched.update_state_after_alloc(req, blocks, 8)


def test_a_step_whose_load_raises_gives_back_every_lock_it_took(engine, monkeypatch):
    meta = two_loads(engine, 36)
    kv = engine.w.conn._kv

    def load(keys, slots):
        raise RuntimeError("a copy that could not start")

    monkeypatch.setattr(kv, "load", load)
    with pytest.raises(RuntimeError):
        start_load(engine, meta)
    monkeypatch.undo()
    assert no_lock_held(engine), engine.sm.memcheck_report()
    blocks = {b for spec in meta.loads for blocks in spec.chunk_blocks for b in blocks}
    assert engine.w.conn.get_block_ids_with_load_errors() == blocks  # none counts as loaded
