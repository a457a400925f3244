"""engine_sim.py — vLLM's engine loop on CPU around its real Scheduler, with a "model"
whose KV is a known function of the prefix, so that every byte kvact loads can be
checked.

Engine drives KvactConnector the way vLLM 0.33 does (docs/vllm.md):

- the scheduler side is the connector vLLM's own Scheduler (or AsyncScheduler) makes
  through its factory; the worker side is made by the same factory with the WORKER
  role and registers the per-layer caches of vLLM's own allocator (vllm_cpu);
- a step: Scheduler.schedule(); the worker (Worker.execute: the request bookkeeping of
  vLLM's model runner, V1 or V2 as VllmConfig.use_v2_model_runner makes the Scheduler
  speak, then the connector calls in the order of kv_connector_model_runner_mixin.
  _get_kv_connector_output); Scheduler.update_from_output with a real
  ModelRunnerOutput and KVConnectorOutput (the worker's build_connector_worker_meta
  passed through).
- async scheduling: the batch queue of EngineCore.step_with_batch_queue (2 batches):
  step N+1 is scheduled before step N's output is given back; the worker runs a step
  as soon as it is scheduled, or (slow_worker) only after vLLM scheduled the next one.
  The worker knows the tokens it sampled, the scheduler holds placeholders for them.
- speculative decoding (vLLM's n-gram method needs no draft model): the worker drafts
  k tokens after each step (the first few right, the rest wrong), verifies them in the
  next and writes the KV of every draft; synchronous: the engine hands the drafts to
  Scheduler.update_draft_token_ids after the step (EngineCore.post_step); async: the
  scheduler sends placeholders, the worker uses its own drafts and corrects the
  positions vLLM counted as accepted (gpu_model_runner does it on the device).

The model: the KV of token position p in layer l is kv_values(seed_p)[l], where seed_p
is a chained 64-bit hash of the request's identity (its cache_salt) and of its token ids
0..p, so the right KV is a function of the prefix only; the token it samples after
position p is next_token(seed_p). Two requests with the same identity and the same first
n tokens have the same KV there, whichever engine computed it. A request whose context
holds a wrong token (a failed load) computes wrong KV: its new tokens are written
TAINTed, as a real model's would be, so storing them is caught.

Checks, every step, per layer (after wait_for_layer_load, as attention would read):
- loads: the token slots the scheduler told the worker to load (the tokens between what
  vLLM's own prefix cache had and the external hit that update_state_after_alloc
  received) are poisoned before the connector runs, and after wait_for_layer_load must
  hold the KV of the prefix bit for bit;
- context: every token before the step's first (what attention reads) holds its
  prefix's KV, after this step's writes (a shared block may be recomputed by another
  request of the same step);
- after the step (wait_for_save, and start_load_kv when vLLM calls it after the
  forward): every token of every scheduled request, the new ones included.
A wrong token in a block the worker reported in get_block_ids_with_load_errors is a
load error (counted), and so is one that an earlier step left wrong (its load errors,
its tainted tokens) if vLLM scheduled this step before it saw that one's output; any
other is corruption (Engine.corrupt). Tokens computed at positions the request already
had (computed, loaded or hit) count as recomputed.

Auditor reads back every chunk kvact holds under a request's keys and compares it with
the prefix's KV: what was stored is exactly what a later load gets.
"""
import hashlib
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np
import torch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import RequestStatus

import kvact
from kvact.integrations.vllm import block_hash_keys

import vllm_cpu
from vllm_cpu import BLOCK_SIZE, CHUNK_TOKENS, HEAD_SIZE, KV_HEADS, LAYERS

MODEL = "tiny-llama"  # vllm_cpu.kvact_extra's kvact.model
POISON = 0x7BAD  # int16 written where a load must write; never a value kv_values gives
TAINT = np.int16(0x5A5A)  # XORed into the KV a request computes over a wrong context
_VALUES = len(LAYERS) * KV_HEADS * 2 * HEAD_SIZE
_IDX = (np.arange(_VALUES, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)


# ---- the model's KV: a function of the prefix ------------------------------------------
def identity_seed(cache_salt):
    return _h(b"identity\0" + repr(cache_salt).encode())


def _h(data):
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def chain(seed, tokens):
    """The seeds of positions 0.. of tokens after a prefix whose last seed is seed."""
    out = []
    for t in tokens:
        seed = _h(seed.to_bytes(8, "little") + int(t).to_bytes(8, "little", signed=True))
        out.append(seed)
    return out


def kv_values(seeds):
    """[T, layers, heads, head_size * 2] int16: the KV bits of positions with these seeds
    (splitmix64 over the value's index; never POISON)."""
    x = np.asarray(seeds, dtype=np.uint64)[:, None] + _IDX[None, :]
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    v = (x >> np.uint64(48)).astype(np.uint16)
    v[v == POISON] ^= 1
    return v.view(np.int16).reshape(len(seeds), len(LAYERS), KV_HEADS, 2 * HEAD_SIZE)


def next_token(seed):
    """The token the model samples after a position: 3..999, never EOS (2)."""
    return 3 + seed % 997


def continuation(seed, n):
    """The n tokens the model generates after a position whose seed is seed."""
    out = []
    for _ in range(n):
        t = next_token(seed)
        out.append(t)
        (seed,) = chain(seed, [t])
    return out


# ---- the worker -----------------------------------------------------------------------
@dataclass
class _WReq:
    """The worker's state of one request (gpu_model_runner's CachedRequestState)."""

    req_id: str
    prompt: list
    salt: object
    block_ids: list
    outputs: list = field(default_factory=list)
    seeds: list = field(default_factory=list)   # of prompt + outputs

    def __post_init__(self):
        self.seeds = chain(identity_seed(self.salt), self.prompt)

    @property
    def tokens(self):
        return self.prompt + self.outputs

    def append(self, tokens):
        self.outputs += tokens
        self.seeds += chain(self.seeds[-1], tokens)

    def truncate_outputs(self, n):
        del self.outputs[n:]
        del self.seeds[len(self.prompt) + n:]

    def inputs(self, end, drafts):
        """Tokens 0..end-1 and drafts after them, with their seeds."""
        seeds = self.seeds[:end] + chain(self.seeds[end - 1], drafts) if drafts \
            else self.seeds[:end]
        return self.tokens[:end] + list(drafts), seeds


class Worker:
    """One TP rank's model runner: its KvactConnector (the factory's, WORKER role) over
    the per-layer caches vLLM's allocator makes for the layout."""

    def __init__(self, engine, vllm_config, kv_cache_config, layout):
        self.engine = engine
        self.caches = vllm_cpu.make_kv_caches(kv_cache_config, layout)
        self.kv16 = {name: self.caches[name].view(torch.int16) for name in LAYERS}
        self.conn = KVConnectorFactory.create_connector(vllm_config, KVConnectorRole.WORKER,
                                                        kv_cache_config)
        try:
            self.conn.register_kv_caches(self.caches)
        except BaseException:
            self.conn.shutdown()
            raise
        self.reqs = {}
        self.drafts = {}  # req id -> the drafts proposed after its last step
        self.rejected = {}  # req id -> (step, drafts its last step rejected)

    def close(self):
        self.conn.shutdown()

    # slots of positions in a request's blocks
    @staticmethod
    def slots(block_ids, positions):
        p = np.asarray(positions, dtype=np.int64)
        return np.asarray(block_ids, dtype=np.int64)[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE

    def read(self, layer, slots):
        s = torch.from_numpy(slots)
        return self.kv16[LAYERS[layer]][s // BLOCK_SIZE, :, s % BLOCK_SIZE, :].numpy()

    def write(self, layer, slots, values):
        s = torch.from_numpy(slots)
        self.kv16[LAYERS[layer]][s // BLOCK_SIZE, :, s % BLOCK_SIZE, :] = torch.from_numpy(
            np.ascontiguousarray(values))

    def _update_states(self, so):
        """The model runner's request bookkeeping: gpu_model_runner._update_states (V1),
        or gpu/model_runner.py's finish_requests, add_requests, update_requests (V2,
        which drops a preempted request and gets it back as a new one with all its
        tokens in prefill_token_ids); vLLM's Scheduler picks the form by
        VllmConfig.use_v2_model_runner."""
        gone = set(so.finished_req_ids)
        if self.engine.v2_runner:
            gone |= set(so.preempted_req_ids or ())
        for req_id in gone:
            self.reqs.pop(req_id, None)
            self.drafts.pop(req_id, None)
        if so.new_block_ids_to_zero:
            b = torch.tensor(so.new_block_ids_to_zero)
            for name in LAYERS:
                self.kv16[name][b] = 0
        assert not so.kv_cache_block_copies, "kv_cache_block_copies: not simulated"
        for new in so.scheduled_new_reqs:
            (blocks,) = new.block_ids
            assert new.req_id not in self.reqs, "%s is new but the worker has it" % new.req_id
            w = _WReq(new.req_id, list(new.prompt_token_ids), self.engine.salts[new.req_id],
                      list(blocks))
            if new.prefill_token_ids is not None:  # V2: all its tokens (a resumed request's)
                w.append(list(new.prefill_token_ids[len(w.prompt):]))
            self.reqs[new.req_id] = w
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            w = self.reqs[req_id]
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                (blocks,) = new_blocks
                w.block_ids = list(blocks)
            elif new_blocks is not None:
                w.block_ids += list(new_blocks[0])
            n_out = cached.num_output_tokens[i]
            if n_out < len(w.outputs):  # outputs vLLM discarded (a failed load, a rollback)
                w.truncate_outputs(n_out)
            if req_id in cached.all_token_ids:  # V1: the scheduler's tokens; ours must agree
                theirs = list(cached.all_token_ids[req_id])
                assert w.tokens[:len(theirs)] == theirs, \
                    "worker and scheduler disagree on the tokens of %s" % req_id

    def execute(self, so, loads, step, seen):
        """Step number step. loads: {req id: external tokens} that
        update_state_after_alloc got for the requests this step admits; seen: the steps
        whose output vLLM had when it scheduled this one. Returns a ModelRunnerOutput
        and the drafts for the next step."""
        eng = self.engine
        self._update_states(so)
        conn, nl = self.conn, len(LAYERS)
        cached = so.scheduled_cached_reqs
        computed = {n.req_id: n.num_computed_tokens for n in so.scheduled_new_reqs}
        computed.update(zip(cached.req_ids, cached.num_computed_tokens))
        # Async scheduling with drafts: vLLM counted the drafts of the step before as
        # accepted (it had not seen its output); the runner corrects the positions on
        # the device by what that step rejected (gpu_model_runner's prev_num_draft_len).
        for req_id, (at, rejected) in list(self.rejected.items()):
            if at not in seen and req_id in computed and req_id in cached.req_ids:
                computed[req_id] -= rejected

        # per request: the input tokens and their seeds, the positions computed
        plan = {}
        for req_id, n in so.num_scheduled_tokens.items():
            w, nc = self.reqs[req_id], computed[req_id]
            spec = list(so.scheduled_spec_decode_tokens.get(req_id, ()))
            if spec and all(t == -1 for t in spec):  # async: the worker's own drafts
                spec = self.drafts.get(req_id, [])[:len(spec)]
            n_real = n - len(spec)
            assert nc + n_real <= len(w.tokens), \
                "%s: positions up to %d scheduled, the worker knows %d tokens" % (
                    req_id, nc + n_real, len(w.tokens))
            tokens, seeds = w.inputs(nc + n_real, spec)
            plan[req_id] = (w, nc, n, tokens, seeds, len(spec))

        # the loads of this step: [nc - external, nc), poisoned before the connector runs
        load_ranges = {}
        for req_id, ext in loads.items():
            w, nc = self.reqs[req_id], computed[req_id]
            pos = np.arange(nc - ext, nc)
            load_ranges[req_id] = (pos, self.slots(w.block_ids, pos))
            poison = np.full((ext, KV_HEADS, 2 * HEAD_SIZE), POISON, dtype=np.int16)
            for layer in range(nl):
                self.write(layer, load_ranges[req_id][1], poison)

        if eng.v2_runner:  # gpu/kv_connector.py ActiveKVConnector.pre_forward
            conn.handle_preemptions(so.kv_connector_metadata)
        conn.bind_connector_metadata(so.kv_connector_metadata)
        if so.has_sync_kv_loads:
            conn.start_load_kv(None)
        wrong = []  # (req id, what, layer, positions, slots)
        # A request whose context holds a wrong token computes wrong KV (a real model
        # would): its new tokens are written TAINTed. Slots this step writes anew do not
        # count (a shared block another request recomputes).
        written = set()
        for w, nc, n, tokens, seeds, _ in plan.values():
            written.update(self.slots(w.block_ids, np.arange(nc, nc + n)).tolist())
        tainted = set()
        for layer, name in enumerate(LAYERS):
            conn.wait_for_layer_load(name)
            for req_id, (pos, slots) in load_ranges.items():
                exp = kv_values([plan[req_id][4][p] for p in pos])[:, layer]
                bad = (self.read(layer, slots) != exp).any(axis=(1, 2))
                if bad.any():
                    wrong.append((req_id, "load", layer, pos[bad], slots[bad]))
                if layer == 0:
                    eng.loaded_checked[req_id] = eng.loaded_checked.get(req_id, 0) + \
                        int((~bad).sum())
            for req_id, (w, nc, n, tokens, seeds, _) in plan.items():
                if nc and req_id not in tainted:
                    slots = self._wrong_slots(layer, w, np.arange(nc), seeds)
                    if set(slots.tolist()) - written:
                        tainted.add(req_id)
            for req_id, (w, nc, n, tokens, seeds, _) in plan.items():
                values = kv_values(seeds[nc:nc + n])[:, layer]
                self.write(layer, self.slots(w.block_ids, np.arange(nc, nc + n)),
                           values ^ TAINT if req_id in tainted else values)
            for req_id, (w, nc, n, tokens, seeds, _) in plan.items():
                if nc:
                    self._check(wrong, req_id, "context", layer, w, np.arange(nc), seeds)
            conn.save_kv_layer(name, self.caches[name], None)
        eng.tainted_steps += len(tainted)

        sampled, drafts = self._sample(plan, step)
        if eng.v2_runner:
            conn.finish_forward()
        if not so.has_sync_kv_loads:
            conn.start_load_kv(None)
        conn.wait_for_save()
        results = conn.get_transfer_results(so.finished_req_ids)
        invalid = conn.get_block_ids_with_load_errors()
        stats = conn.get_kv_connector_stats()
        if stats is not None:
            eng.worker_stats.update(stats.reduce())
        events = conn.get_kv_connector_kv_cache_events()
        worker_meta = conn.build_connector_worker_meta()
        conn.clear_connector_metadata()

        for req_id, (w, nc, n, tokens, seeds, _) in plan.items():
            end = nc if req_id in tainted else nc + n  # tainted tokens: wrong, as computed
            for layer in range(nl):
                if end:
                    self._check(wrong, req_id, "after the step", layer, w, np.arange(end),
                                seeds)
        tainted_slots = set()
        for req_id in tainted:
            w, nc, n = plan[req_id][:3]
            tainted_slots.update(self.slots(w.block_ids, np.arange(nc, nc + n)).tolist())
        eng.account(step, seen, plan, wrong, invalid, tainted_slots)

        req_ids = list(so.num_scheduled_tokens)
        out = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[sampled[r] for r in req_ids],
            kv_connector_output=KVConnectorOutput(
                finished_sending=results.finished_sending or None,
                finished_recving=results.finished_recving or None,
                failed_recving=results.failed_recving,
                kv_connector_stats=stats, kv_cache_events=events,
                kv_connector_worker_meta=worker_meta, invalid_block_ids=invalid))
        return out, drafts

    def _wrong(self, layer, w, pos, seeds):
        slots = self.slots(w.block_ids, pos)
        exp = kv_values([seeds[p] for p in pos])[:, layer]
        return slots, (self.read(layer, slots) != exp).any(axis=(1, 2))

    def _wrong_slots(self, layer, w, pos, seeds):
        slots, bad = self._wrong(layer, w, pos, seeds)
        return slots[bad]

    def _check(self, wrong, req_id, what, layer, w, pos, seeds):
        slots, bad = self._wrong(layer, w, pos, seeds)
        if bad.any():
            wrong.append((req_id, what, layer, pos[bad], slots[bad]))

    def _sample(self, plan, step):
        """Tokens sampled per request (none for a chunk of a prefill), drafts verified;
        then the drafts for the next step (speculative decoding: the first few right, the
        rest wrong, how many a function of the prefix)."""
        k = self.engine.spec_tokens
        sampled, drafts = {}, {}
        for req_id, (w, nc, n, tokens, seeds, n_spec) in plan.items():
            last = nc + n - n_spec - 1  # the last real token's position
            if last + 1 < len(w.tokens):  # a prefill chunk: vLLM discards its sample
                sampled[req_id] = []
                continue
            out = [next_token(seeds[last])]
            for j in range(1, n_spec + 1):  # the draft at last + j: accepted if predicted
                if tokens[last + j] != out[-1]:
                    break
                out.append(next_token(seeds[last + j]))
            sampled[req_id] = out
            self.rejected[req_id] = (step, n_spec + 1 - len(out))
            self.engine.drafted += n_spec
            self.engine.accepted += len(out) - 1
            w.append(out)
            if k:
                true = continuation(w.seeds[-1], k)
                right = w.seeds[-1] % (k + 1)
                drafts[req_id] = true[:right] + [3 + (t - 3 + 1) % 997 for t in true[right:]]
        self.drafts = drafts
        return sampled, drafts


# ---- the engine -----------------------------------------------------------------------
class _WorkerStep:
    """One scheduled step for the worker: runs it the first time it is called."""

    def __init__(self, worker, so, loads, step, seen):
        self.args, self.step, self.result = (so, loads, step, seen), step, None
        self.worker = worker

    def __call__(self):
        if self.result is None:
            self.result = self.worker.execute(*self.args)
        return self.result


class Engine:
    """vLLM's engine core around one Scheduler (its connector from vLLM's factory) and one
    Worker. after_schedule: callables (engine, scheduler_output) run between schedule()
    and the worker's step (another tenant evicting, a reset)."""

    def __init__(self, vllm_config, kv_cache_config, layout="LBNHC", slow_worker=False):
        self.config = vllm_config
        self.scheduler = vllm_cpu.make_scheduler(vllm_config, kv_cache_config)
        self.conn = self.scheduler.connector
        self.storage = self.conn.storage
        self.async_scheduling = vllm_config.scheduler_config.async_scheduling
        self.slow_worker = slow_worker
        self.spec_tokens = vllm_config.num_speculative_tokens or 0
        self.v2_runner = self.scheduler.use_v2_model_runner
        self.requests, self.salts = {}, {}
        self.lookups = {}       # req id -> [(vLLM's local hit, the connector's answer)]
        self.external = {}      # req id -> [external tokens at each admission]
        self._admitted = {}     # this schedule()'s admissions: req id -> external tokens
        self.loaded_checked = {}  # req id -> loaded tokens found bit-exact
        self.load_error_blocks = 0
        self.load_error_tokens = 0
        self.recomputed = {}    # req id -> tokens computed again
        self._had = {}          # req id -> positions it had (computed, hit or loaded)
        self._damage = {}       # step -> slots it left wrong (load errors, tainted)
        self.corrupt = []       # wrong tokens outside any reported load error
        self.saves = []         # (req id, chunks, slots) of the metadata's stores
        self.worker_stats = Counter()  # the worker connector's KvactConnectorStats, summed
        self.steps = self.preempted = 0
        self.after_schedule = []
        self._queue = deque()
        self._seen = set()      # steps whose output the scheduler has had
        self.drafted = self.accepted = 0  # speculative tokens scheduled, accepted
        self.tainted_steps = 0  # (request, step)s computed over a wrong context
        self._hook()
        try:
            self.worker = Worker(self, vllm_config, kv_cache_config, layout)
        except BaseException:
            self.scheduler.shutdown()
            raise

    def _hook(self):
        """Records what vLLM's Scheduler asks and tells the connector (and passes it on)."""
        conn = self.conn
        lookup, alloc = conn.get_num_new_matched_tokens, conn.update_state_after_alloc

        def get_num_new_matched_tokens(request, num_computed_tokens):
            got = lookup(request, num_computed_tokens)
            self.lookups.setdefault(request.request_id, []).append((num_computed_tokens, got))
            return got

        def update_state_after_alloc(request, blocks, num_external_tokens):
            self._admitted[request.request_id] = num_external_tokens
            self.external.setdefault(request.request_id, []).append(num_external_tokens)
            return alloc(request, blocks, num_external_tokens)

        conn.get_num_new_matched_tokens = get_num_new_matched_tokens
        conn.update_state_after_alloc = update_state_after_alloc

    def add(self, req_id, tokens, max_tokens=4, cache_salt=None):
        request = vllm_cpu.make_request(req_id, tokens, max_tokens=max_tokens,
                                        cache_salt=cache_salt)
        self.requests[req_id], self.salts[req_id] = request, cache_salt
        self.scheduler.add_request(request)
        return request

    # -- the loop
    def run(self, max_steps=2000):
        for _ in range(max_steps):
            if not self.scheduler.has_requests() and not self._queue:
                self.settle()
                return
            self.step()
        raise AssertionError("still running after %d steps" % max_steps)

    def settle(self):
        """What the worker's next step would do first (handle_preemptions): the stores
        the last step started have ended, so kvact holds them and no lock of them."""
        self.worker.conn.handle_preemptions(None)

    def step(self):
        if not self.async_scheduling:
            so, run = self._schedule()
            out, drafts = run()
            self.scheduler.update_from_output(so, out)
            self._seen.add(run.step)
            if self.spec_tokens and so.total_num_scheduled_tokens:  # EngineCore.post_step
                self.scheduler.update_draft_token_ids(
                    DraftTokenIds(list(drafts), list(drafts.values())))
            return
        # EngineCore.step_with_batch_queue, a queue of 2 batches. The worker runs a step
        # as soon as it is scheduled, or (slow_worker) only once vLLM waits for its
        # output, after it scheduled the next one.
        if self.scheduler.has_requests():
            so, run = self._schedule()
            if not self.slow_worker:
                run()
            self._queue.appendleft((so, run))
            if len(self._queue) < 2 and (so.total_num_scheduled_tokens > 0
                                         or self.scheduler.has_requests()):
                return
        elif not self._queue:
            return
        self._update(*self._queue.pop())

    def _update(self, so, run):
        out, _ = run()
        self.scheduler.update_from_output(so, out)
        self._seen.add(run.step)

    def drain(self):
        """Gives the scheduler the outputs of the batches in flight (async scheduling):
        the engine between steps with nothing in flight."""
        while self._queue:
            self._update(*self._queue.pop())

    def _schedule(self):
        """schedule(), then the after_schedule hooks. Returns the output and the worker's
        step to run (once; later calls return its result)."""
        self._admitted = {}
        so = self.scheduler.schedule()
        self.steps += 1
        self.preempted += len(so.preempted_req_ids or ())
        loads = {r: n for r, n in self._admitted.items() if n > 0}
        assert set(loads) <= set(so.num_scheduled_tokens), "a load for a request not scheduled"
        for s in so.kv_connector_metadata.saves:
            self.saves.append((s.req_id, len(s.keys), len(s.slots)))
        for hook in self.after_schedule:
            hook(self, so)
        return so, _WorkerStep(self.worker, so, loads, self.steps, set(self._seen))

    # -- bookkeeping
    def account(self, step, seen, plan, wrong, invalid, tainted):
        """Sorts step's wrong tokens. In a block the worker reported as a load error this
        step they are load errors. So are the blocks of load errors, and the tokens
        computed over them (tainted slots), of the steps before whose output vLLM had not
        seen when it scheduled this one (async scheduling: it could not know). Any other
        wrong token is corruption."""
        damaged = {b * BLOCK_SIZE + i for b in invalid for i in range(BLOCK_SIZE)}
        excused = set(damaged)
        for s, slots in list(self._damage.items()):
            if s in seen:
                del self._damage[s]
            else:
                excused |= slots
        for req_id, what, layer, pos, slots in wrong:
            if set(slots.tolist()) <= excused:
                if what == "load" and layer == 0:
                    self.load_error_tokens += len(pos)
                continue
            bad = sorted({s // BLOCK_SIZE for s in slots.tolist() if s not in excused})
            self.corrupt.append("step %d: request %s, %s, layer %d: %d wrong token(s) at "
                                "positions %s (blocks %s; load errors reported: %s)" % (
                                    step, req_id, what, layer, len(pos), _ranges(pos), bad,
                                    sorted(invalid)))
        self.load_error_blocks += len(invalid)
        self._damage[step] = damaged | tainted
        for req_id, (w, nc, n, tokens, seeds, n_spec) in plan.items():
            had = self._had.get(req_id, 0)
            if nc < had:
                self.recomputed[req_id] = self.recomputed.get(req_id, 0) + min(had, nc + n) - nc
            self._had[req_id] = max(had, nc + n)

    def finished(self):
        """{req id: status name} of the requests added."""
        return {r: RequestStatus(q.status).name for r, q in self.requests.items()}

    def errors(self):
        return sorted(r for r, s in self.finished().items() if s == "FINISHED_ERROR")

    def check(self, normal_finish=True, outputs=True):
        """Nothing corrupt; every request finished normally (normal_finish) with the
        tokens the model gives over its prompt (outputs)."""
        assert not self.corrupt, "wrong KV outside any reported load error:\n  " + \
            "\n  ".join(self.corrupt[:20])
        if not normal_finish:
            return
        status = self.finished()
        assert all(s in ("FINISHED_LENGTH_CAPPED", "FINISHED_STOPPED") for s in status.values()), \
            "requests that did not finish normally: %s (load error blocks %d, recomputed %s)" % (
                {r: s for r, s in status.items()
                 if s not in ("FINISHED_LENGTH_CAPPED", "FINISHED_STOPPED")},
                self.load_error_blocks, self.recomputed)
        for req_id, request in self.requests.items() if outputs else ():
            prompt = list(request.prompt_token_ids)
            (seed,) = chain(identity_seed(self.salts[req_id]), prompt)[-1:]
            want = continuation(seed, len(request.output_token_ids))
            assert list(request.output_token_ids) == want, "%s sampled %s, the model says %s" % (
                req_id, list(request.output_token_ids), want)

    def no_locks_held(self):
        """kvact holds no lock of this engine's (the store-behind's finished first)."""
        self.storage.flush(timeout=10.0)
        return self.storage.memcheck(callers_only=True)

    def close(self):
        try:
            self.worker.close()
        finally:
            self.scheduler.shutdown()


def _ranges(pos):
    pos = sorted(int(p) for p in pos)
    out, start = [], pos[0]
    for a, b in zip(pos, pos[1:] + [None]):
        if b != a + 1:
            out.append("%d" % start if start == a else "%d..%d" % (start, a))
            start = b
    return ",".join(out)


# ---- reading back what kvact holds ------------------------------------------------------
class Auditor:
    """Reads chunks back from kvact into a scratch allocation of the same layout (vLLM's
    allocator, kvact's PagedKVCache) and compares them with the prefix's KV."""

    def __init__(self, vllm_config, storage, layout="LBNHC", dtype=torch.bfloat16):
        kcc = vllm_cpu.make_kv_cache_config(vllm_config, num_blocks=CHUNK_TOKENS // BLOCK_SIZE,
                                            dtype=dtype)
        self.storage = storage
        self.caches = vllm_cpu.make_kv_caches(kcc, layout)
        self.layers = [self.caches[n] for n in LAYERS]
        self.kv = kvact.PagedKVCache(storage, self.layers, "pages", CHUNK_TOKENS, layout=layout)
        self.slots = np.arange(CHUNK_TOKENS, dtype=np.int64)

    def close(self):
        self.kv.close()

    def chunks(self, request, salt):
        """[(chunk index, key, expected KV [ct, L, H, C])] of request's full chunks."""
        keys = block_hash_keys(MODEL, request.block_hashes, CHUNK_TOKENS, BLOCK_SIZE)
        seeds = chain(identity_seed(salt), request.all_token_ids)
        return [(c, key, kv_values(seeds[c * CHUNK_TOKENS:(c + 1) * CHUNK_TOKENS]))
                for c, key in enumerate(keys)]

    def read(self, key):
        """The chunk under key as [ct, L, H, C] int16, or None when kvact has none."""
        if self.storage.lookup([key]).total == 0:
            return None
        handle = self.storage.submit_prefetch_task([key], self.kv.chunk_layout())
        if handle.wait() != 1:
            return None
        for t in self.layers:
            t.view(torch.int16).fill_(POISON)
        assert self.kv.load([key], self.slots).wait(10.0) == 0
        s = torch.from_numpy(self.slots)
        return np.stack([t.view(torch.int16)[s // BLOCK_SIZE, :, s % BLOCK_SIZE, :].numpy()
                         for t in self.layers], axis=1)

    def audit(self, requests, salts):
        """{req id: [chunk indexes held]} and a list of wrong chunks (what kvact would
        load that is not the prefix's KV)."""
        held, wrong = {}, []
        for req_id, request in requests.items():
            held[req_id] = []
            for c, key, want in self.chunks(request, salts[req_id]):
                got = self.read(key)
                if got is None:
                    continue
                held[req_id].append(c)
                bad = (got != want).any(axis=(1, 2, 3))
                if bad.any():
                    wrong.append("%s chunk %d: %d of %d tokens wrong (positions %s)" % (
                        req_id, c, int(bad.sum()), CHUNK_TOKENS,
                        _ranges(np.nonzero(bad)[0] + c * CHUNK_TOKENS)))
        return held, wrong


def prompt(n, seed):
    """n token ids of 3..999 (never EOS), a function of seed."""
    return [3 + (seed * 7919 + i * 104729 + (i * i) % 613) % 997 for i in range(n)]

