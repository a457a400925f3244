"""bench_vllm.py — KvactConnector's cost with vLLM 0.33's own objects on CPU, each figure
against an anchor measured in the same run.

    python/bench/bench_vllm.sh [--quick] [--reps R] [--sizes 1,16,128]
                               [--parts scheduler,worker,eviction] [--json FILE]

What runs: vLLM's Scheduler (the connector made by vLLM's factory inside it), the
worker-side connector that vLLM's ensure_kv_transfer_initialized makes (in a
one-process gloo world, as a CPU worker has), the per-layer caches of vLLM's
allocate_kv_cache (layout LBNHC, bf16) and real Requests (vLLM's sha256 block
hasher), stepped as EngineCore.step drives a uniprocess executor:
Scheduler.schedule(); the worker's connector calls, handle_preemptions first (as
GPUModelRunner.execute_model) and the rest inside vLLM's own
KVConnectorModelRunnerMixin context under set_forward_context (bind, start_load_kv,
per layer wait_for_layer_load and save_kv_layer as the attention layers make them,
wait_for_save, get_transfer_results, get_block_ids_with_load_errors, stats,
events, build_connector_worker_meta, clear; no model runs); then
Scheduler.update_from_output() with a ModelRunnerOutput of one sampled token per
request past its prefill and the connector's KVConnectorOutput. The connector is
reached only through these, so a change to it (a lease taken in
get_num_new_matched_tokens, released through build_connector_worker_meta ->
update_connector_output) is measured without a change here.

Every prompt is 2 * HIT_CHUNKS chunks and one token, distinct per request (vLLM's
own prefix cache never hits); its first HIT_CHUNKS chunks are written into kvact
before the request is added (real bytes, under the keys block_hash_keys gives for
its block hashes), so each lookup finds half the prompt. kvact runs embedded
(the scheduler and worker connectors share one Runtime, as in vLLM's uniprocess
executor), without L2 (l2: []).

1. scheduler: us per step of schedule() + update_from_output() with the connector
   against vLLM's own step without one (the same SchedulerConfig with
   kv_transfer_config=None, the same prompts, in the same rep), for 1, 16 and 128
   requests per step: the admission step (the N lookups, allocations, loads and
   stores planned) and the MAX_TOKENS - 1 decode steps after it, apart (the
   worker's connector calls run between the two, untimed here; stores that
   overlap the step's end run during update_from_output and the next
   schedule(), and share this machine's 2 cores with them).
   kvact's part = with - without; per request = kvact's part / N; share = kvact's
   part / with. A third round per rep (other prompts) times each connector method
   vLLM calls, around the call (~0.3 us of wrapper each). A 2-layer model: the
   scheduler side's cost does not depend on the KV bytes. Medians over reps.
2. worker: a Llama-3-8B shape (32 layers, 8 KV heads of 128: 128 KiB per token;
   --quick: 8 layers). A round admits N requests of max_tokens=2: in the first
   step each loads its HIT_CHUNKS chunks (start_load_kv + wait_for_layer_load of
   every layer) and stores the chunks its prefill completes, from wait_for_save;
   the second (decode) step begins with handle_preemptions, as
   GPUModelRunner.execute_model does, where a connector whose stores overlap the
   step's end waits for those still running (bind_connector_metadata too). The
   store stall is the time the worker is blocked for the stores: wait_for_save
   plus that wait (a connector storing synchronously in wait_for_save: all of it
   there); between the two runs vLLM's own work (update_from_output, schedule()),
   the window the stores can overlap. The anchor, per rep, after the round:
   torch moving the same bytes between the same slots of the same caches and a
   contiguous buffer, layer by layer: index_copy_ (the load's scatter) and
   index_select (the store's gather), on 1 and on torch's default threads, the
   faster counted (torch's 2-thread runs swing widely on a 2-core VM). Medians
   over reps.
3. eviction: N requests per round whose halves are stored; between schedule()
   and the worker's step (start_load_kv) another writer writes 1.5x kvact's L1
   (small here) of other keys through the same storage. Counted, against a
   control run of as many requests without the writer: requests finished with
   FinishReason.ERROR (kv_load_failure_policy "fail"), blocks reported by
   get_block_ids_with_load_errors, tokens recomputed (policy "recompute": tokens
   scheduled beyond the control run's, i.e. the lost hits and the tokens the failing
   step prefilled after them, which vLLM computes again from the first bad block).
   Without a lease the writer evicts the lookups' hits; with one they must stay.

No thresholds: the figures are printed. What is asserted is that the benchmark
ran as described: every lookup found its half, no load error outside part 3's
writer, every request finished, the stores landed.
"""
import argparse
import gc
import inspect
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter, namedtuple

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "vllm_real"))

import vllm_cpu  # noqa: E402  (HF_HUB_OFFLINE & co, then the real vLLM)
import torch  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer import kv_transfer_state  # noqa: E402
from vllm.forward_context import set_forward_context  # noqa: E402
from vllm.v1.engine import FinishReason  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.worker.kv_connector_model_runner_mixin import (  # noqa: E402
    KVConnectorModelRunnerMixin)

import kvact  # noqa: E402
from kvact.integrations.vllm import block_hash_keys  # noqa: E402

BLOCK, LAYOUT, SAMPLED = vllm_cpu.BLOCK_SIZE, "LBNHC", 7
HIT_CHUNKS = 2        # chunks of each prompt stored beforehand: half the prompt
MAX_TOKENS = 8        # scheduler part: tokens per request (1 admission + 7 decode steps)
SIZES = (1, 16, 128)  # requests per step

Shape = namedtuple("Shape", "name layers kv_heads head_dim chunk_tokens")
TINY = Shape("tiny (2 layers x 2 KV heads x 64)", 2, 2, 64, 32)
LLAMA_8B = Shape("Llama-3-8B (32 layers x 8 KV heads x 128)", 32, 8, 128, 32)
QUICK_WORKER = Shape("8 layers x 8 KV heads x 128", 8, 8, 128, 32)

SCHEDULER_CALLS = ("get_num_new_matched_tokens", "update_state_after_alloc",
                   "build_connector_meta", "update_connector_output", "request_finished",
                   "get_kv_connector_stats", "take_events", "on_new_request",
                   "get_external_cache_hit_sources", "get_loaded_kv_cache_group_ids",
                   "has_pending_block_frees", "has_pending_push_work")
WORKER_CALLS = ("handle_preemptions", "bind_connector_metadata", "start_load_kv", "wait_for_layer_load",
                "save_kv_layer", "wait_for_save", "get_transfer_results",
                "get_block_ids_with_load_errors", "get_kv_connector_stats",
                "get_kv_connector_kv_cache_events", "build_connector_worker_meta",
                "clear_connector_metadata")


def token_bytes(shape):
    return shape.layers * shape.kv_heads * 2 * shape.head_dim * 2  # K and V, bf16


def prompt_tokens(shape):
    return 2 * HIT_CHUNKS * shape.chunk_tokens + 1


def blocks_per_request(shape, max_tokens):
    return -(-(prompt_tokens(shape) + max_tokens) // BLOCK)


def kvact_settings(l1_bytes):
    """Embedded, no L2; the pool's pages faulted in at start (l1.prefault), as a
    long-running engine's pool has them, so no copy pays a first touch."""
    return {"l1.size_bytes": int(l1_bytes), "l1.hugepages": False, "l1.pinned": False,
            "l1.prefault": True, "runtime.workers": 2, "l2": []}


# ---- vLLM's objects --------------------------------------------------------------------------
def write_model_dir(path, shape):
    """A llama config.json of shape's geometry (vllm_cpu's recipe): nothing else is read."""
    heads = 4 * shape.kv_heads
    return vllm_cpu.write_model_dir(
        path, num_hidden_layers=shape.layers, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, num_attention_heads=heads, hidden_size=heads * shape.head_dim,
        intermediate_size=2 * heads * shape.head_dim, vocab_size=32000)


def layer_names(shape):
    return ["model.layers.%d.self_attn.attn" % i for i in range(shape.layers)]


def make_config(model_dir, max_seqs, max_batched_tokens, extra=None, policy="fail"):
    """vllm_cpu.make_vllm_config with room for max_seqs requests a step; no connector
    when extra is None (vLLM's own step, the anchor)."""
    return vllm_cpu.make_vllm_config(model_dir, layout=LAYOUT, extra=extra,
                                     kv_load_failure_policy=policy, max_num_seqs=max_seqs,
                                     max_num_batched_tokens=max_batched_tokens,
                                     connector=extra is not None)


def make_kv_cache_config(vllm_config, shape, num_blocks):
    return vllm_cpu.make_kv_cache_config(vllm_config, num_blocks=num_blocks,
                                         layers=layer_names(shape), kv_heads=shape.kv_heads,
                                         head_size=shape.head_dim)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_worker_group(vllm_config):
    """vLLM's world of one process (gloo), as a CPU worker makes it before
    ensure_kv_transfer_initialized (which broadcasts over the TP group). True when this
    call made it (release_worker_group then tears it down)."""
    if parallel_state.model_parallel_is_initialized():
        return False
    with set_current_vllm_config(vllm_config):
        parallel_state.init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method="tcp://127.0.0.1:%d" % _free_port())
        parallel_state.ensure_model_parallel_initialized(1, 1)
    return True


def release_worker_group():
    parallel_state.destroy_model_parallel()
    parallel_state.destroy_distributed_environment()


class CallTimer:
    """Times the named methods of one object as vLLM calls them: instance attributes
    wrapping the bound methods, removed by close(). A timed method called inside
    another counts as a call; its time is the outer one's."""

    def __init__(self, obj, names):
        self.obj, self.names = obj, []
        self.ns, self.calls, self._depth = Counter(), Counter(), 0
        self.first_start, self.last_end = {}, {}
        for name in names:
            if inspect.isfunction(getattr(type(obj), name, None)):
                setattr(obj, name, self._wrap(name, getattr(obj, name)))
                self.names.append(name)

    def _wrap(self, name, fn):
        def timed(*args, **kwargs):
            self.calls[name] += 1
            if self._depth:
                return fn(*args, **kwargs)
            self._depth = 1
            t0 = time.perf_counter_ns()
            self.first_start.setdefault(name, t0)
            try:
                return fn(*args, **kwargs)
            finally:
                t1 = time.perf_counter_ns()
                self.ns[name] += t1 - t0
                self.last_end[name] = t1
                self._depth = 0
        return timed

    def take(self):
        """Since the last take: {"ns": {name: ns}, "calls": {name: count}, "first_start":
        {name: perf_counter_ns}, "last_end": {name: perf_counter_ns}}."""
        out = {"ns": dict(self.ns), "calls": dict(self.calls),
               "first_start": self.first_start, "last_end": self.last_end}
        self.ns, self.calls, self.first_start, self.last_end = Counter(), Counter(), {}, {}
        return out

    def close(self):
        for name in self.names:
            self.obj.__dict__.pop(name, None)
        self.names = []


Step = namedtuple("Step", "out kv_out finished sched_ns worker_ns")


class Engine:
    """vLLM's Scheduler and, with a connector, the worker-side connector over vLLM's
    caches, stepped as EngineCore.step drives a uniprocess executor (one at a time with
    a connector: vLLM's worker connector is a process global)."""

    def __init__(self, model_dir, shape, max_seqs, num_blocks, max_tokens, l1_bytes=None,
                 policy="fail", model="bench-vllm"):
        self.shape, self.ct, self.model = shape, shape.chunk_tokens, model
        extra = None if l1_bytes is None else {
            "kvact.config": kvact_settings(l1_bytes), "kvact.chunk_tokens": self.ct,
            "kvact.model": model}
        batched = max_seqs * prompt_tokens(shape)  # every prompt of a step in one step
        self.config = make_config(model_dir, max_seqs, batched, extra, policy)
        self.kv_cache_config = make_kv_cache_config(self.config, shape, num_blocks)
        self.scheduler = vllm_cpu.make_scheduler(self.config, self.kv_cache_config)
        self.worker = self.caches = self.storage = self._paged = None
        self._ids = 0
        self.max_tokens = max_tokens
        if extra is None:
            return
        if kv_transfer_state.has_kv_transfer_group():
            raise RuntimeError("another engine's worker connector is still open")
        init_worker_group(self.config)
        kv_transfer_state.ensure_kv_transfer_initialized(self.config, self.kv_cache_config)
        self.worker = kv_transfer_state.get_kv_transfer_group()
        self.caches = vllm_cpu.make_kv_caches(self.kv_cache_config, LAYOUT)
        self.worker.register_kv_caches(self.caches)
        # The same storage as the connectors' (one Runtime per config in a process); a
        # PagedKVCache of the same caches gives the chunk layout the worker loads.
        self.storage = self.scheduler.connector.storage
        self._paged = kvact.PagedKVCache(self.storage, list(self.caches.values()), "pages",
                                         self.ct, layout=LAYOUT)
        self.chunk_layout = self._paged.chunk_layout()
        self.chunk_bytes = self.chunk_layout.nbytes
        self._pattern = torch.randint(-128, 128, (self.chunk_bytes,), dtype=torch.int8,
                                      generator=torch.Generator().manual_seed(5)).view(torch.uint8)

    def close(self):
        if self._paged is not None:
            self._paged.close()
        self.scheduler.shutdown()
        if self.worker is not None:
            kv_transfer_state.ensure_kv_transfer_shutdown()

    def requests(self, prompts):
        out = []
        for p in prompts:
            self._ids += 1
            out.append(vllm_cpu.make_request("r%d" % self._ids, p, max_tokens=self.max_tokens))
        return out

    def store_hits(self, requests, chunks=HIT_CHUNKS):
        """Writes the first `chunks` chunks of each request into kvact, real bytes under
        the connector's keys, as an earlier engine's store would have left them."""
        keys = [k for r in requests
                for k in block_hash_keys(self.model, r.block_hashes, self.ct, BLOCK)[:chunks]]
        n = write_objects(self.storage, keys, self.chunk_layout, self._pattern)
        assert n == len(keys), "kvact took %d of the %d hit chunks" % (n, len(keys))
        return keys

    def stored_chunks(self, request):
        """How many of request's prompt chunks kvact holds (a contiguous prefix)."""
        keys = block_hash_keys(self.model, request.block_hashes, self.ct, BLOCK)
        return self.storage.lookup(keys).total

    def step(self, before_worker=None):
        s = self.scheduler
        t0 = time.perf_counter_ns()
        out = s.schedule()
        t1 = time.perf_counter_ns()
        if before_worker is not None:
            before_worker(out)
        w0 = time.perf_counter_ns()
        kv_out = self._worker_step(out) if self.worker is not None else None
        w1 = time.perf_counter_ns()
        runner = self._runner_output(out, kv_out)
        t2 = time.perf_counter_ns()
        engine_outputs = s.update_from_output(out, runner)
        t3 = time.perf_counter_ns()
        finished = {o.request_id: o.finish_reason for eco in engine_outputs.values()
                    for o in eco.outputs if o.finish_reason is not None}
        return Step(out, kv_out, finished, (t1 - t0) + (t3 - t2), w1 - w0)

    def _worker_step(self, out):
        """The model runner's connector calls of one step: handle_preemptions first (as
        GPUModelRunner.execute_model makes it, before the step touches a block), then
        vLLM's own context manager around the forward, with the attention layers'
        per-layer calls when tokens are scheduled."""
        self.worker.handle_preemptions(out.kv_connector_metadata)
        with set_forward_context(None, self.config), \
                KVConnectorModelRunnerMixin.maybe_get_kv_connector_output(out) as kv_out:
            if out.total_num_scheduled_tokens > 0:
                for name, cache in self.caches.items():
                    self.worker.wait_for_layer_load(name)
                    self.worker.save_kv_layer(name, cache, None)
        return kv_out

    def _runner_output(self, out, kv_out):
        ids = list(out.num_scheduled_tokens)
        reqs = self.scheduler.requests
        sampled = [[] if reqs[r].is_prefill_chunk else [SAMPLED] for r in ids]
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=sampled, kv_connector_output=kv_out)

    def run(self, requests, before_worker=None, after_step=None, max_steps=10000):
        """Adds requests and steps until all have finished: (steps, {reason: count});
        after_step(step) after each."""
        for r in requests:
            self.scheduler.add_request(r)
        pending, reasons, steps = {r.request_id for r in requests}, Counter(), []
        while pending:
            st = self.step(before_worker)
            for rid, reason in st.finished.items():
                if rid in pending:
                    pending.discard(rid)
                    reasons[reason] += 1
            steps.append(st)
            if after_step is not None:
                after_step(st)
            if len(steps) >= max_steps:
                raise RuntimeError("%d requests unfinished after %d steps" % (len(pending),
                                                                              max_steps))
        return steps, reasons


def write_objects(storage, keys, layout, pattern=None, batch=8):
    """Writes keys into kvact (reserve_write mode "new", the bytes of pattern, finish_write),
    batch keys a call; the number written (a full L1 of locked objects refuses the rest)."""
    written = 0
    for i in range(0, len(keys), batch):
        reserved = storage.reserve_write(keys[i:i + batch], layout, mode="new")
        if not reserved:
            continue
        if pattern is not None:
            for obj in reserved.values():
                torch.frombuffer(obj.buffer, dtype=torch.uint8).copy_(pattern)
        written += sum(s == 0 for s in storage.finish_write(list(reserved)))
    return written


class Prompts:
    """Distinct random prompts (tokens 3..vocab: never EOS)."""

    def __init__(self, seed=11):
        self.rng = random.Random(seed)

    def take(self, count, tokens):
        return [[self.rng.randrange(3, 32000) for _ in range(tokens)] for _ in range(count)]


def median(xs):
    return statistics.median(xs) if xs else 0.0


def _check_admission(step, n, hit_tokens):
    new = step.out.scheduled_new_reqs
    assert len(new) == n, "the admission step scheduled %d of %d requests" % (len(new), n)
    got = sorted({r.num_computed_tokens for r in new})
    assert got == [hit_tokens], "admitted with %s computed tokens, expected %d" % (got,
                                                                                   hit_tokens)


# ---- 1. scheduler side -----------------------------------------------------------------------
def bench_scheduler(model_dir, sizes=SIZES, reps=7, warmup=2, max_tokens=MAX_TOKENS,
                    shape=TINY):
    """{n: {"admission_us": {"vllm", "kvact"}, "decode_us": {...}, "calls": {method:
    {"calls_per_step", "us_per_call", "us_per_step"}}, ...}}: medians over reps."""
    n_max = max(sizes)
    blocks = n_max * blocks_per_request(shape, max_tokens) + 16
    per_round = n_max * 2 * HIT_CHUNKS * shape.chunk_tokens * token_bytes(shape)
    plain = Engine(model_dir, shape, n_max, blocks, max_tokens)
    conn = Engine(model_dir, shape, n_max, blocks, max_tokens, l1_bytes=4 * per_round + (32 << 20))
    hit_tokens = HIT_CHUNKS * shape.chunk_tokens
    gen, results = Prompts(), {}
    try:
        for n in sizes:
            rows = []
            for rep in range(warmup + reps):
                prompts = gen.take(n, prompt_tokens(shape))
                row = {}
                for kind in (("vllm", "kvact") if rep % 2 == 0 else ("kvact", "vllm")):
                    gc.collect()
                    if kind == "vllm":
                        steps, reasons = plain.run(plain.requests(prompts))
                        _check_admission(steps[0], n, 0)
                    else:
                        reqs = conn.requests(prompts)
                        conn.store_hits(reqs)
                        steps, reasons = conn.run(reqs)
                        _check_admission(steps[0], n, hit_tokens)
                        assert not any(s.kv_out.invalid_block_ids for s in steps), "load errors"
                    assert reasons == {FinishReason.LENGTH: n}, reasons
                    assert len(steps) == max_tokens, "%d steps" % len(steps)
                    row[kind] = (steps[0].sched_ns / 1e3,
                                 statistics.mean(s.sched_ns for s in steps[1:]) / 1e3
                                 if len(steps) > 1 else 0.0)
                # the connector's methods, timed as vLLM calls them (other prompts)
                reqs = conn.requests(gen.take(n, prompt_tokens(shape)))
                conn.store_hits(reqs)
                gc.collect()
                timer = CallTimer(conn.scheduler.connector, SCHEDULER_CALLS)
                per_step = []
                try:
                    timer.take()
                    steps, _ = conn.run(reqs, after_step=lambda st: per_step.append(
                        timer.take()))
                finally:
                    timer.close()
                row["calls"] = per_step  # the admission step's has add_request's calls too
                row["steps"] = len(steps)
                if rep >= warmup:
                    rows.append(row)
            results[n] = _scheduler_figures(n, rows)
        results["memcheck"] = conn.storage.memcheck_report()
    finally:
        conn.close()
        plain.close()
    return results


def _scheduler_figures(n, rows):
    out = {}
    for phase, i in (("admission_us", 0), ("decode_us", 1)):
        v, k = median([r["vllm"][i] for r in rows]), median([r["kvact"][i] for r in rows])
        part = median([r["kvact"][i] - r["vllm"][i] for r in rows])
        out[phase] = {"vllm": v, "kvact": k, "kvact_part": part, "per_request": part / n,
                      "share": part / k if k else 0.0}
    names = sorted({m for r in rows for st in r["calls"] for m in st["calls"]})
    calls = {}
    for m in names:
        ns = [sum(st["ns"].get(m, 0) for st in r["calls"]) for r in rows]
        cnt = [sum(st["calls"].get(m, 0) for st in r["calls"]) for r in rows]
        steps = [r["steps"] for r in rows]
        admission = [r["calls"][0]["ns"].get(m, 0) / 1e3 for r in rows]
        decode = [statistics.mean(st["ns"].get(m, 0) for st in r["calls"][1:]) / 1e3
                  if len(r["calls"]) > 1 else 0.0 for r in rows]
        calls[m] = {"calls_per_step": median([c / s for c, s in zip(cnt, steps)]),
                    "us_per_call": median([t / c / 1e3 for t, c in zip(ns, cnt) if c]),
                    "us_per_step": median([t / s / 1e3 for t, s in zip(ns, steps)]),
                    "admission_us": median(admission), "decode_us": median(decode)}
    out["calls"] = calls
    for k in ("us_per_step", "admission_us", "decode_us"):
        out["calls_" + k] = sum(c[k] for c in calls.values())
    return out


# ---- 2. worker side --------------------------------------------------------------------------
def _rows(cache):
    """A [blocks, heads, block, K|V] LBNHC view as [slots, heads * (K|V)] rows (no copy)."""
    b, h, nb, c = cache.shape
    rows = cache.permute(0, 2, 1, 3).view(b * nb, h * c)
    assert rows.data_ptr() == cache.data_ptr()
    return rows


def _slots(block_ids, start, end):
    tok = torch.arange(start, end)
    return torch.tensor(block_ids, dtype=torch.int64)[tok // BLOCK] * BLOCK + tok % BLOCK


def _step_slots(out, ct):
    """The slots the connector loads and stores in an admission step, from vLLM's
    scheduler output: the tokens each request's lookup found, and the full chunks its
    prefill completes beyond them."""
    load, store = [], []
    for new in out.scheduled_new_reqs:
        blocks, hit = list(new.block_ids[0]), new.num_computed_tokens
        full = (hit + out.num_scheduled_tokens[new.req_id]) // ct
        load.append(_slots(blocks, 0, hit))
        store.append(_slots(blocks, hit, full * ct))
    return torch.cat(load), torch.cat(store)


def torch_moves(rows, src, dst, load_slots, store_slots, threads):
    """{"index_copy", "index_select"}: us torch takes to move the load's and the store's
    bytes between the slots and a contiguous buffer, layer by layer, on `threads`
    threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0 = time.perf_counter_ns()
        for layer, name in enumerate(rows):
            rows[name].index_copy_(0, load_slots, src[layer, :len(load_slots)])
        t1 = time.perf_counter_ns()
        for layer, name in enumerate(rows):
            torch.index_select(rows[name], 0, store_slots, out=dst[layer, :len(store_slots)])
        t2 = time.perf_counter_ns()
    finally:
        torch.set_num_threads(before)
    return {"index_copy": (t1 - t0) / 1e3, "index_select": (t2 - t1) / 1e3}


def bench_worker(model_dir, sizes=SIZES, reps=5, warmup=1, shape=LLAMA_8B):
    """{n: {"load_mib", "store_mib", "start_load_kv_us", "layer_waits_us", "load_us",
    "torch_index_copy_us", "wait_for_save_us", "next_step_wait_us", "store_stall_us",
    "overlap_window_us", "torch_index_select_us", "worker_step_us", ...}}: medians over
    reps. A round is N requests of max_tokens=2: the admission step (loads, stores
    started in wait_for_save) and a decode step, whose first connector calls
    (handle_preemptions, bind_connector_metadata) wait for stores still running."""
    n_max, ct = max(sizes), shape.chunk_tokens
    chunk = ct * token_bytes(shape)
    per_round = n_max * 2 * HIT_CHUNKS * chunk
    blocks = n_max * blocks_per_request(shape, 2) + 16
    eng = Engine(model_dir, shape, n_max, blocks, 2, l1_bytes=1.5 * per_round + (64 << 20))
    hit_tokens = HIT_CHUNKS * ct
    row_width = shape.kv_heads * 2 * shape.head_dim
    rows = {name: _rows(c) for name, c in eng.caches.items()}
    most = n_max * HIT_CHUNKS * ct
    src = torch.empty(shape.layers, most, row_width, dtype=torch.bfloat16).uniform_(-1, 1)
    dst = torch.zeros_like(src)  # touched: no first-touch fault in the timed gather
    gen, results = Prompts(7), {}
    anchor_threads = sorted({1, torch.get_num_threads()})
    timer = CallTimer(eng.worker, WORKER_CALLS)
    try:
        for n in sizes:
            figs = []
            for rep in range(warmup + reps):
                reqs = eng.requests(gen.take(n, prompt_tokens(shape)))
                eng.store_hits(reqs)
                gc.collect()
                timer.take()
                per_step = []
                steps, reasons = eng.run(reqs, after_step=lambda st: per_step.append(
                    timer.take()))
                assert len(steps) == 2 and reasons == {FinishReason.LENGTH: n}, reasons
                admit, decode = per_step
                _check_admission(steps[0], n, hit_tokens)
                assert not any(st.kv_out.invalid_block_ids for st in steps), \
                    "load errors without pressure"
                assert admit["calls"].get("wait_for_layer_load") == shape.layers
                stored = [eng.stored_chunks(r) for r in reqs]
                assert stored == [2 * HIT_CHUNKS] * n, "stores missing: %s" % stored
                load_slots, store_slots = _step_slots(steps[0].out, ct)
                assert len(load_slots) == n * hit_tokens and len(store_slots) == n * hit_tokens
                anchor = {t: torch_moves(rows, src, dst, load_slots, store_slots, t)
                          for t in anchor_threads}
                us, us2 = ({k: v / 1e3 for k, v in d["ns"].items()} for d in (admit, decode))
                f = {"start_load_kv_us": us.get("start_load_kv", 0.0),
                     "layer_waits_us": us.get("wait_for_layer_load", 0.0),
                     "wait_for_save_us": us.get("wait_for_save", 0.0),
                     "next_step_wait_us": us2.get("handle_preemptions", 0.0) +
                     us2.get("bind_connector_metadata", 0.0),
                     "overlap_window_us": (decode["first_start"]["handle_preemptions"] -
                                           admit["last_end"]["wait_for_save"]) / 1e3,
                     "anchor": anchor,
                     "worker_step_us": steps[0].worker_ns / 1e3,
                     "next_worker_step_us": steps[1].worker_ns / 1e3,
                     "scheduler_step_us": steps[0].sched_ns / 1e3}
                f["load_us"] = f["start_load_kv_us"] + f["layer_waits_us"]
                f["store_stall_us"] = f["wait_for_save_us"] + f["next_step_wait_us"]
                f["other_calls_us"] = sum(us.values()) - f["load_us"] - f["wait_for_save_us"]
                if rep >= warmup:
                    figs.append(f)
            byte = n * hit_tokens * token_bytes(shape)
            res = {k: median([f[k] for f in figs]) for k in figs[0] if k != "anchor"}
            # the anchor: torch's faster way (the thread count that was), medians over reps
            for op in ("index_copy", "index_select"):
                by_threads = {t: median([f["anchor"][t][op] for f in figs])
                              for t in anchor_threads}
                best = min(by_threads, key=by_threads.get)
                res["torch_%s_us" % op] = by_threads[best]
                res["torch_%s_threads" % op] = best
                res["torch_%s_us_by_threads" % op] = by_threads
                for f in figs:
                    f["torch_%s_us" % op] = f["anchor"][best][op]
            res.update(load_mib=byte / 2**20, store_mib=byte / 2**20,
                       load_vs_anchor=median([f["load_us"] / f["torch_index_copy_us"]
                                              for f in figs]),
                       stall_vs_anchor=median([f["store_stall_us"] / f["torch_index_select_us"]
                                               for f in figs]))
            results[n] = res
        results["memcheck"] = eng.storage.memcheck_report()
    finally:
        timer.close()
        eng.close()
    return results


# ---- 3. eviction pressure --------------------------------------------------------------------
def bench_eviction(model_dir, n=16, rounds=4, shape=TINY):
    """{policy: {"control": counts, "writer": counts}} where counts = {"requests",
    "finished_error", "finished_ok", "error_blocks", "hit_tokens_found",
    "tokens_scheduled", "tokens_recomputed", "evicted", "writer_keys", ...}."""
    chunk = shape.chunk_tokens * token_bytes(shape)
    l1 = 4 * n * 2 * HIT_CHUNKS * chunk  # room for 4 rounds' hits and stores
    blocks = n * blocks_per_request(shape, MAX_TOKENS) * 2 + 16
    gen, results, other = Prompts(3), {}, [0]
    for policy in ("fail", "recompute"):
        eng = Engine(model_dir, shape, n, blocks, MAX_TOKENS, l1_bytes=l1, policy=policy,
                     model="bench-evict-" + policy)
        try:
            sm = eng.storage

            def writer(out, counts):
                if not out.has_sync_kv_loads:
                    return
                n_keys = int(1.5 * l1) // eng.chunk_bytes + 1
                keys = [kvact.ObjectKey("bench-other-writer", 0, 0,
                                        (other[0] + i).to_bytes(8, "little"))
                        for i in range(n_keys)]
                other[0] += n_keys
                written = write_objects(sm, keys, eng.chunk_layout)
                counts["writer_keys"] += written
                counts["writer_refused"] += n_keys - written

            res = {}
            for mode in ("control", "writer"):
                c = Counter(requests=0, finished_error=0, finished_ok=0, error_blocks=0,
                            hit_tokens_found=0, tokens_scheduled=0, writer_keys=0,
                            writer_refused=0)
                evicted0 = sm.stats()["evicted"]
                hook = (lambda out: writer(out, c)) if mode == "writer" else None
                for _ in range(rounds):
                    reqs = eng.requests(gen.take(n, prompt_tokens(shape)))
                    eng.store_hits(reqs)
                    steps, reasons = eng.run(reqs, before_worker=hook)
                    c["requests"] += n
                    c["finished_error"] += reasons.get(FinishReason.ERROR, 0)
                    c["finished_ok"] += reasons.get(FinishReason.LENGTH, 0)
                    c["error_blocks"] += sum(len(s.kv_out.invalid_block_ids) for s in steps)
                    c["hit_tokens_found"] += sum(r.num_computed_tokens
                                                 for r in steps[0].out.scheduled_new_reqs)
                    c["tokens_scheduled"] += sum(s.out.total_num_scheduled_tokens for s in steps)
                c["evicted"] = sm.stats()["evicted"] - evicted0
                res[mode] = dict(c)
            ctl, wr = res["control"], res["writer"]
            assert ctl["finished_error"] == 0 and ctl["error_blocks"] == 0, ctl
            assert ctl["hit_tokens_found"] == ctl["requests"] * HIT_CHUNKS * shape.chunk_tokens
            assert ctl["finished_ok"] == ctl["requests"] and \
                wr["finished_ok"] + wr["finished_error"] == wr["requests"], res
            wr["tokens_recomputed"] = (wr["tokens_scheduled"] - ctl["tokens_scheduled"]
                                       if policy == "recompute" else None)
            ctl["tokens_recomputed"] = 0
            res["memcheck"] = sm.memcheck_report()
            results[policy] = res
        finally:
            eng.close()
    results["l1_bytes"], results["chunk_bytes"], results["n"] = l1, chunk, n
    return results


# ---- printing --------------------------------------------------------------------------------
def print_scheduler(res, reps, shape=TINY, max_tokens=MAX_TOKENS):
    print("\n== 1. scheduler side: Scheduler.schedule() + update_from_output(), us per step "
          "(median of %d reps)" % reps)
    print("   model %s; prompts of %d tokens, %d stored in kvact (chunks of %d); %d tokens "
          "per request: 1 admission step, %d decode steps" % (
              shape.name, prompt_tokens(shape), HIT_CHUNKS * shape.chunk_tokens,
              shape.chunk_tokens, max_tokens, max_tokens - 1))
    print("   anchor: the same SchedulerConfig with kv_transfer_config=None, the same prompts")
    print("%5s  %-9s  %11s  %11s  %12s  %12s  %6s" % ("reqs", "step", "vLLM alone",
                                                      "with kvact", "kvact's part",
                                                      "per request", "share"))
    for n in (k for k in res if isinstance(k, int)):
        for phase in ("admission_us", "decode_us"):
            f = res[n][phase]
            print("%5d  %-9s  %11.1f  %11.1f  %12.1f  %12.2f  %5.1f%%" % (
                n, phase.split("_")[0], f["vllm"], f["kvact"], f["kvact_part"],
                f["per_request"], 100 * f["share"]))
    print("\n   the connector's calls, timed around each call as vLLM makes it (us): per call, "
          "in the admission step, per decode step, per request and step over the round's "
          "%d steps" % max_tokens)
    print("%5s  %-30s  %10s  %8s  %10s  %10s  %11s" % (
        "reqs", "method", "calls/step", "us/call", "admission", "decode", "us/req/step"))
    for n in (k for k in res if isinstance(k, int)):
        for m, c in res[n]["calls"].items():
            print("%5d  %-30s  %10.2f  %8.2f  %10.1f  %10.1f  %11.2f" % (
                n, m, c["calls_per_step"], c["us_per_call"], c["admission_us"],
                c["decode_us"], c["us_per_step"] / n))
        print("%5d  %-30s  %10s  %8s  %10.1f  %10.1f  %11.2f" % (
            n, "all", "", "", res[n]["calls_admission_us"], res[n]["calls_decode_us"],
            res[n]["calls_us_per_step"] / n))
    print("   locks left in kvact: %s" % (res["memcheck"] or "none"))


def print_worker(res, reps, shape):
    print("\n== 2. worker side: N requests admitted in one step, each loading %d tokens and "
          "storing %d, us (median of %d reps)" % (
              HIT_CHUNKS * shape.chunk_tokens, HIT_CHUNKS * shape.chunk_tokens, reps))
    print("   model %s, bf16, %s: %d KiB per token; chunks of %d tokens (%.1f MiB)" % (
        shape.name, LAYOUT, token_bytes(shape) // 1024, shape.chunk_tokens,
        shape.chunk_tokens * token_bytes(shape) / 2**20))
    print("   anchor: torch moving the same bytes between the same slots and a buffer, per "
          "layer (index_copy_ = the load's scatter, index_select = the store's gather)")
    print("   load = start_load_kv + wait_for_layer_load of every layer; store stall = "
          "wait_for_save + the next step's wait for stores still running (handle_preemptions "
          "+ bind_connector_metadata), the next step starting %s" % "after vLLM's "
          "update_from_output and schedule()")
    print("   (MiB: loaded, and as many stored; x: kvact / torch; torch's faster of 1 and %d "
          "threads)" % torch.get_num_threads())
    print("%5s  %7s  %13s  %11s  %9s  %11s  %5s | %13s  %10s  %11s  %12s  %5s" % (
        "reqs", "MiB", "start_load_kv", "layer waits", "load", "index_copy_", "x",
        "wait_for_save", "next waits", "store stall", "index_select", "x"))
    for n in (k for k in res if isinstance(k, int)):
        f = res[n]
        print("%5d  %7.1f  %13.1f  %11.1f  %9.1f  %11.1f  %5.2f | %13.1f  %10.1f  %11.1f  "
              "%12.1f  %5.2f" % (
                  n, f["load_mib"], f["start_load_kv_us"], f["layer_waits_us"], f["load_us"],
                  f["torch_index_copy_us"], f["load_vs_anchor"], f["wait_for_save_us"],
                  f["next_step_wait_us"], f["store_stall_us"], f["torch_index_select_us"],
                  f["stall_vs_anchor"]))
    for n in (k for k in res if isinstance(k, int)):
        f = res[n]
        print("   %d reqs: %.1f MiB stored; the worker stalls %.1f ms for it (%.1f in "
              "wait_for_save, %.1f in the next step's first calls; torch gathers it in %.1f "
              "ms, %.2f GB/s); vLLM's own work between the two took %.1f ms. The load %.1f ms, "
              "%.2f GB/s (torch's scatter %.2f GB/s)." % (
                  n, f["store_mib"], f["store_stall_us"] / 1e3, f["wait_for_save_us"] / 1e3,
                  f["next_step_wait_us"] / 1e3, f["torch_index_select_us"] / 1e3,
                  _gbs(f["store_mib"], f["torch_index_select_us"]),
                  f["overlap_window_us"] / 1e3, f["load_us"] / 1e3,
                  _gbs(f["load_mib"], f["load_us"]),
                  _gbs(f["load_mib"], f["torch_index_copy_us"])))
    print("   locks left in kvact: %s" % (res["memcheck"] or "none"))


def _gbs(mib, us):
    return mib * 2**20 / (us * 1e3) if us else 0.0


def print_eviction(res, shape=TINY):
    print("\n== 3. eviction pressure: %d requests a round; between schedule() and the "
          "worker's start_load_kv another writer writes 1.5x L1 (%.1f MiB; chunks of %.0f "
          "KiB) of other keys" % (res["n"], res["l1_bytes"] / 2**20, res["chunk_bytes"] / 1024))
    print("%-10s  %-8s  %8s  %12s  %11s  %12s  %10s  %10s  %11s  %8s" % (
        "policy", "run", "requests", "hit tokens", "finished ok", "finished err",
        "err blocks", "scheduled", "recomputed", "evicted"))
    for policy in ("fail", "recompute"):
        for mode in ("control", "writer"):
            c = res[policy][mode]
            rec = "-" if c["tokens_recomputed"] is None else str(c["tokens_recomputed"])
            print("%-10s  %-8s  %8d  %12d  %11d  %12d  %10d  %10d  %11s  %8d" % (
                policy, mode, c["requests"], c["hit_tokens_found"], c["finished_ok"],
                c["finished_error"], c["error_blocks"], c["tokens_scheduled"], rec,
                c["evicted"]))
        print("%-10s  locks left in kvact: %s" % (policy, res[policy]["memcheck"] or "none"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer reps, an 8-layer worker model")
    ap.add_argument("--reps", type=int, help="reps per size (default 7 scheduler, 5 worker)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="requests per step, comma-separated")
    ap.add_argument("--parts", default="scheduler,worker,eviction")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    parts = set(args.parts.split(","))
    sched_reps = args.reps or (3 if args.quick else 7)
    worker_reps = args.reps or (3 if args.quick else 5)
    worker_shape = QUICK_WORKER if args.quick else LLAMA_8B
    t0 = time.time()
    out = {}
    made_group = False
    with tempfile.TemporaryDirectory(prefix="bench_vllm.") as tmp:
        try:
            if "scheduler" in parts:
                made_group = made_group or not parallel_state.model_parallel_is_initialized()
                out["scheduler"] = bench_scheduler(write_model_dir(os.path.join(tmp, "tiny"), TINY),
                                                   sizes, sched_reps, 1 if args.quick else 2)
                print_scheduler(out["scheduler"], sched_reps)
            if "worker" in parts:
                made_group = made_group or not parallel_state.model_parallel_is_initialized()
                out["worker"] = bench_worker(
                    write_model_dir(os.path.join(tmp, "worker"), worker_shape), sizes,
                    worker_reps, 1, worker_shape)
                print_worker(out["worker"], worker_reps, worker_shape)
            if "eviction" in parts:
                made_group = made_group or not parallel_state.model_parallel_is_initialized()
                out["eviction"] = bench_eviction(
                    write_model_dir(os.path.join(tmp, "tiny"), TINY),
                    rounds=2 if args.quick else 4)
                print_eviction(out["eviction"])
        finally:
            if made_group and parallel_state.model_parallel_is_initialized():
                release_worker_group()
    print("\n(%.0f s, torch threads %d, vLLM %s)" % (time.time() - t0, torch.get_num_threads(),
                                                    __import__("vllm").__version__))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
