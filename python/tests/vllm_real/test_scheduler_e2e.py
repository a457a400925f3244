"""test_scheduler_e2e.py — KvactConnector driven end to end by vLLM 0.33's own Scheduler
and AsyncScheduler on CPU (engine_sim.Engine: the scheduler-side connector from vLLM's
factory inside the Scheduler, a worker-side one over the caches of vLLM's allocator, a
model whose KV is a function of the prefix).

Every test checks, every step: each token the scheduler told the worker to load holds
its prefix's KV bit for bit once wait_for_layer_load returns (the slots are poisoned
first); every token attention reads, and every token after the step, is right unless its
block was reported through get_block_ids_with_load_errors; every request finishes
normally (FINISHED_LENGTH_CAPPED) with the tokens the model gives over the right prefix;
what kvact holds under a request's keys is exactly its prefix's KV (Auditor); kvact holds
no lock afterwards. "Another engine" is a fresh Scheduler and worker over the same kvact
storage (in one process, connectors with the same kvact config share one Runtime).

Modes: sync (Scheduler), async (AsyncScheduler and the engine core's batch queue) and
async-slow (the same, the worker running each step only after vLLM scheduled the next).

test_eviction_between_lookup_and_load_fails_no_request: another tenant's writes, a
forced delete or vLLM's /reset_prefix_cache between schedule() and the worker's
start_load_kv take nothing the lookup counted (its lease pins it), so under
kv_load_failure_policy="fail" (vLLM's default) no request fails. On the connector
before leases (880e5bc) all ten cases failed with FINISHED_ERROR: kvact held 0 (1 for
"suffix") of the 2 chunks B's lookup counted, and the worker reported them as load
errors. Its companion under "recompute" passed then by recomputing them, and now
loads them.
"""
import contextlib
import os
import subprocess
import sys
import textwrap

import pytest

import kvact
import torch

import kvact.integrations._shared as kvact_shared
import kvact.integrations.vllm as kvact_vllm
import vllm_cpu

from engine_sim import Auditor, Engine, prompt
from fill import fill_l1
from vllm_cpu import BLOCK_SIZE, CHUNK_TOKENS, kvact_extra, kvactd, make_kv_cache_config

CT = CHUNK_TOKENS
# sync: Scheduler, EngineCore.step. async: AsyncScheduler, EngineCore.step_with_batch_queue,
# the worker running each step as soon as it is scheduled; async-slow: the worker runs a
# step only after vLLM scheduled the next one (what its lookups see differs).
MODES = pytest.mark.parametrize("mode", ["sync", "async", "async-slow"])
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@pytest.fixture
def engines(vllm_config):
    """engines(num_blocks=64, layout="LBNHC", dtype="bfloat16", mode="sync", **more of
    make_vllm_config's) -> a new Engine (another engine process: its own Scheduler and
    worker). engines.close_all() closes them (so does the end of the test); no kvact
    Runtime may outlive them."""
    made = []

    def make(num_blocks=64, layout="LBNHC", dtype="bfloat16", mode="sync", **kw):
        cfg = vllm_config(layout=layout, dtype=dtype, async_scheduling=mode != "sync", **kw)
        e = Engine(cfg, make_kv_cache_config(cfg, num_blocks=num_blocks, dtype=DTYPES[dtype]),
                   layout, slow_worker=mode == "async-slow")
        made.append(e)
        return e

    def close_all():
        while made:
            made.pop().close()
        assert not kvact_shared._runtimes, "a kvact Runtime outlived its connectors"

    make.close_all = close_all
    yield make
    close_all()


def audit(*engs, layout="LBNHC", dtype="bfloat16"):
    """What kvact holds under every request's keys of engs: ({req id: chunks held},
    [wrong chunks]); asserts no lock is held."""
    requests, salts = {}, {}
    for e in engs:
        requests.update(e.requests)
        salts.update(e.salts)
    a = Auditor(engs[0].config, engs[0].storage, layout, DTYPES[dtype])
    try:
        held, wrong = a.audit(requests, salts)
    finally:
        a.close()
    for e in engs:
        assert e.no_locks_held(), e.storage.memcheck_report(callers_only=True)
    return held, wrong


def partial_stores(e):
    """The stores the connector planned whose slots are not whole chunks (none may be)."""
    return [s for s in e.saves if s[2] != s[1] * CT]


def shared_prefix(engines, **kw):
    """Case 1: A (96 tokens) stores in one engine; B (A's first 64 + its own 40) in
    another loads 64. Returns (e1, e2)."""
    e1 = engines(**kw)
    base = prompt(96, 1)
    e1.add("A", base, max_tokens=4)
    e1.run()
    e1.check()
    e2 = engines(**kw)
    e2.add("B", base[:64] + prompt(40, 2), max_tokens=4)
    e2.run()
    e2.check()
    assert e2.lookups["B"][0] == (0, (64, False))  # no local hit; kvact counts 2 chunks
    assert e2.external["B"] == [64] and e2.loaded_checked["B"] == 64
    assert e2.worker_stats["loaded_tokens"] == 64 and e2.load_error_blocks == 0
    assert not e2.recomputed
    held, wrong = audit(e1, e2, layout=kw.get("layout", "LBNHC"),
                        dtype=kw.get("dtype", "bfloat16"))
    assert not wrong, wrong
    assert held == {"A": [0, 1, 2], "B": [0, 1, 2]}
    assert not partial_stores(e1) and not partial_stores(e2)
    return e1, e2


# ---- 1. a shared prefix, loaded by another engine ------------------------------------
@MODES
def test_shared_prefix_is_loaded_bit_exact_by_another_engine(engines, mode):
    shared_prefix(engines, mode=mode)


_ENGINE_PROCESS = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import vllm_cpu
    from engine_sim import Engine, prompt
    extra = vllm_cpu.kvact_extra()
    extra["kvact.config"] = {"client.socket": sys.argv[3], "runtime.workers": 2}
    cfg = vllm_cpu.make_vllm_config(sys.argv[2], extra=extra)
    e = Engine(cfg, vllm_cpu.make_kv_cache_config(cfg, num_blocks=64), "LBNHC")
    try:
        e.add("A", prompt(96, 1), max_tokens=4)
        e.run()
        e.check()
        e.storage.flush(timeout=10.0)
        print("stored", sorted(e.external.items()), flush=True)
    finally:
        e.close()
""")


def test_shared_prefix_across_engine_processes_through_one_kvactd(engines, model_dir):
    """Engine 1 (its Scheduler and worker) in a process of its own stores A through a
    kvactd; engine 2 in this process, another client of it, loads A's first 64 tokens
    for B bit-exact."""
    with kvactd(l1_bytes=1 << 24) as sock:
        try:
            child = subprocess.run([sys.executable, "-c", _ENGINE_PROCESS, HERE, model_dir,
                                    sock], capture_output=True, text=True, timeout=300)
            assert child.returncode == 0, child.stderr[-3000:]
            assert "stored [('A', [0])]" in child.stdout, child.stdout
            extra = kvact_extra()
            extra["kvact.config"] = {"client.socket": sock, "runtime.workers": 2}
            e2 = engines(extra=extra)
            e2.add("B", prompt(96, 1)[:64] + prompt(40, 2), max_tokens=4)
            e2.run()
            e2.check()
            assert e2.lookups["B"][0] == (0, (64, False))
            assert e2.external["B"] == [64] and e2.loaded_checked["B"] == 64
            held, wrong = audit(e2)
            assert not wrong and held == {"B": [0, 1, 2]}, (held, wrong)
        finally:
            engines.close_all()


# ---- 2. chunked prefill ----------------------------------------------------------------
@MODES
def test_chunked_prefill_stores_whole_chunks_that_a_later_request_loads(engines,
                                                                       mode):
    """A (200 tokens) prefills in steps of 64 (max_num_batched_tokens); C (150) starts in
    A's last prefill step, so its steps end inside chunks (56, 119, 150). Only whole,
    computed chunks are stored; another engine's B and D load them, and G loads 64
    tokens before a prefill of its own 150 over three steps (stored as it goes)."""
    e1 = engines(mode=mode)
    a, c = prompt(200, 3), prompt(150, 4)
    e1.add("A", a, max_tokens=8)
    e1.add("C", c, max_tokens=8)
    e1.run()
    e1.check()
    assert not partial_stores(e1), partial_stores(e1)
    e2 = engines(mode=mode)
    e2.add("B", a[:192] + prompt(20, 5), max_tokens=4)
    e2.add("D", c[:140] + prompt(30, 6), max_tokens=4)
    e2.run()
    e2.check()
    assert e2.external == {"B": [192], "D": [128]}
    assert e2.loaded_checked == {"B": 192, "D": 128}
    e3 = engines(mode=mode)
    e3.add("G", a[:64] + prompt(150, 7), max_tokens=4)
    e3.run()
    e3.check()
    assert e3.external == {"G": [64]} and e3.loaded_checked == {"G": 64}
    assert not partial_stores(e3), partial_stores(e3)
    held, wrong = audit(e1, e2, e3)
    assert not wrong, wrong
    # A: 207 tokens computed (6 whole chunks); C: 157 (4); G: 217 (6)
    assert held["A"] == list(range(6)) and held["C"] == list(range(4))
    assert held["G"] == list(range(6))


@MODES
def test_two_requests_with_one_prefix_in_one_step(engines, mode):
    """B1 and B2 share A's 64 stored tokens and are admitted in the same step: B1 loads
    them; vLLM's own prefix cache gives B2 the blocks B1 is loading (nothing external),
    which must hold the prefix's KV when B2's attention reads them."""
    e1 = engines(mode=mode)
    base = prompt(96, 8)
    e1.add("A", base, max_tokens=2)
    e1.run()
    e2 = engines(mode=mode)
    e2.add("B1", base[:64] + prompt(10, 9), max_tokens=4)
    e2.add("B2", base[:64] + prompt(12, 10), max_tokens=4)
    e2.run()
    e1.check()
    e2.check()
    assert e2.external == {"B1": [64], "B2": [0]}, e2.external
    assert e2.lookups["B2"] == [(64, (0, False))]
    assert e2.loaded_checked == {"B1": 64}
    held, wrong = audit(e1, e2)
    assert not wrong, wrong


# ---- 3. vLLM's own prefix cache holds part of the hit ---------------------------------
@MODES
def test_only_the_tokens_beyond_vllms_own_prefix_cache_are_loaded(engines, mode):
    """Another engine stored P[:96]; this engine's prefix cache holds P[:48] (3 blocks:
    1.5 chunks) from A (which loaded chunk 0 and computed the rest). B = P[:96] + tail:
    vLLM hits 48 locally, kvact 96: 48 tokens are loaded (half of chunk 1 and chunk 2)
    and vLLM's own 48 stay as they are."""
    p = prompt(96, 7)
    other = engines(mode=mode)
    other.add("C", p + prompt(10, 8), max_tokens=4)
    other.run()
    e = engines(mode=mode)
    e.add("A", p[:48] + prompt(5, 9), max_tokens=2)
    e.run()
    e.add("B", p + prompt(20, 10), max_tokens=4)
    e.run()
    other.check()
    e.check()
    assert e.lookups == {"A": [(0, (32, False))], "B": [(48, (48, False))]}
    assert e.external == {"A": [32], "B": [48]}
    assert e.loaded_checked == {"A": 32, "B": 48}
    assert e.worker_stats["loaded_tokens"] == 32 + 48  # none of vLLM's own 48 is written
    held, wrong = audit(other, e)
    assert not wrong, wrong


# ---- 4. the last token is computed; partial chunks are never stored --------------------
@MODES
def test_the_last_token_is_always_computed_and_partial_chunks_are_not_stored(
        engines, mode):
    e1 = engines(mode=mode)
    a = prompt(96, 11)  # 3 whole chunks: all stored once A has run
    e1.add("A", a, max_tokens=4)
    # 100 prompt tokens + 28 sampled: token 127 is sampled but never computed, so
    # chunk 3's block hashes exist while its KV is not whole
    e1.add("D", prompt(100, 12), max_tokens=28)
    e1.add("E", prompt(100, 13), max_tokens=29)  # computes token 127: chunk 3 is whole
    e1.run()
    e1.check()
    assert not partial_stores(e1), partial_stores(e1)
    held, wrong = audit(e1)
    assert not wrong, wrong
    assert held["A"] == [0, 1, 2] and held["D"] == [0, 1, 2]
    if mode == "sync":
        assert held["E"] == [0, 1, 2, 3]
    else:  # E's last block hash arrives with its last step: it finishes before a store
        assert held["E"] in ([0, 1, 2], [0, 1, 2, 3])
    e2 = engines(mode=mode)
    e2.add("B", a, max_tokens=4)  # all 96 tokens stored: the hit stops at 64
    e2.run()
    e2.check()
    assert e2.lookups["B"] == [(0, (64, False))] and e2.loaded_checked["B"] == 64
    # in A's engine, vLLM's own cache hits 80 (5 blocks, not the last token): nothing new
    e1.add("B2", a, max_tokens=4)
    e1.run()
    e1.check()
    assert e1.lookups["B2"] == [(80, (0, False))] and "B2" not in e1.loaded_checked


# ---- 5. preemption -------------------------------------------------------------------
RUNNERS = pytest.mark.parametrize("runner", ["v1", "v2"])


@pytest.fixture
def runner_env(monkeypatch, runner):
    """vLLM's model runner V1 or V2 (VLLM_USE_V2_MODEL_RUNNER): the Scheduler hands a
    resumed request to V1 as a cached one (resumed_req_ids, new block ids), to V2 as a
    new one (all its tokens in prefill_token_ids)."""
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1" if runner == "v2" else "0")
    return runner


@MODES
@RUNNERS
def test_preempted_requests_resume_into_new_blocks_bit_exact(engines, runner_env,
                                                             mode):
    """16 blocks for 4 requests of 40 + 60 tokens: vLLM preempts during decode; a
    resumed request whose blocks vLLM's prefix cache gave away loads what it had stored
    (its prompt and its first outputs) into new blocks."""
    e = engines(num_blocks=16, mode=mode)
    assert e.v2_runner == (runner_env == "v2")
    for i in range(4):
        e.add("R%d" % i, prompt(40, 20 + i), max_tokens=60)
    e.run()
    e.check()
    assert e.preempted > 0
    resumed = {r: ext[1:] for r, ext in e.external.items() if len(ext) > 1}
    assert any(x > 0 for ext in resumed.values() for x in ext), e.external
    assert sum(e.loaded_checked.values()) == sum(x for ext in e.external.values() for x in ext)
    held, wrong = audit(e)
    assert not wrong, wrong


@MODES
def test_a_prefix_cache_reset_that_preempts_everything_resumes_from_kvact(engines,
                                                                          mode):
    """vLLM's reset_prefix_cache(reset_running_requests=True) preempts every running
    request and empties vLLM's own prefix cache: they resume from what kvact holds."""
    e = engines(mode=mode)
    for i in range(2):
        e.add("R%d" % i, prompt(70, 25 + i), max_tokens=40)
    for _ in range(12):  # both prefilled, some decode steps
        e.step()
    # With a batch in flight, vLLM 0.33 raises RuntimeError here: async scheduling with a
    # KV connector defers freeing blocks until the in-flight step's output
    # (Scheduler.defer_block_free), so they cannot be reset yet. Between batches it works.
    e.drain()
    assert e.scheduler.reset_prefix_cache(reset_running_requests=True) is True
    e.run()
    e.check()
    assert all(len(ext) == 2 and ext[1] >= 64 for ext in e.external.values()), e.external
    held, wrong = audit(e)
    assert not wrong, wrong


# ---- 6. eviction between the lookup and the load ---------------------------------------
SMALL_L1 = 2 << 20  # 64 chunks of 32 KiB
HERE = os.path.dirname(os.path.abspath(__file__))

# How the counted chunks leave kvact between schedule() (which looked them up) and the
# worker's start_load_kv:
# - "tenant": another user of the same embedded kvact (a small L1, no L2) writes twice
#   L1's size of new objects; demand eviction makes room;
# - "kvactd": the engines are clients of one kvactd (small L1, no L2); a second client
#   process writes twice its L1;
# - "suffix": a forced delete of the second of the 2 chunks (kvact evicts a request's
#   suffix before its prefix); before leases the first loaded, the second failed;
#   pinned, it is refused (KVA_KEY_LOCKED, docs/invariants.md I-L1-12);
# - "reset": vLLM's /reset_prefix_cache with reset_connector=True, on the scheduler that
#   stored the chunks. Only with async scheduling: the engine core runs utility calls
#   between steps, and only its batch queue leaves a step scheduled but not yet run.
VARIANTS = [(v, m) for v in ("tenant", "kvactd") for m in ("sync", "async", "async-slow")] + \
    [("suffix", "sync"), ("suffix", "async"), ("reset", "async"), ("reset", "async-slow")]
EVICTIONS = pytest.mark.parametrize("variant,mode", VARIANTS,
                                    ids=["%s-%s" % vm for vm in VARIANTS])


def fill_from_another_process(sock, nbytes):
    """fill_l1 in another client process of the kvactd at sock (kvact alone: no vLLM
    to import). Returns the number of objects it wrote."""
    code = textwrap.dedent("""
        import sys, time, kvact
        sys.path.insert(0, %r)
        from fill import fill_l1
        rt = kvact.Runtime({"client.socket": %r, "runtime.workers": 2})
        deadline = time.monotonic() + 20
        while True:
            try:
                rt.storage.stats()
                break
            except kvact.KvactError:
                assert time.monotonic() < deadline, "no connection to kvactd"
                time.sleep(0.02)
        print(fill_l1(rt.storage, %d, "process"))
        rt.close()
        """) % (HERE, sock, nbytes)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


@contextlib.contextmanager
def eviction_storage(variant, engines):
    """The kvact config of the variant: a kvactd's socket (stopped after every engine
    is closed), else an embedded kvact with a small L1 and no L2."""
    if variant != "kvactd":
        yield {"l2": [], "l1.size_bytes": SMALL_L1, "l1.hugepages": False,
               "l1.pinned": False, "runtime.workers": 2}, None
        return
    with kvactd(l1_bytes=SMALL_L1) as sock:
        try:
            yield {"client.socket": sock, "runtime.workers": 2}, sock
        finally:
            engines.close_all()


def eviction_case(engines, variant, policy, mode, kvact_config, sock):
    """A stores 96 tokens; B (A's first 64 + its own 40) is admitted with a 64-token hit
    of 2 chunks; the variant evicts them before the worker's step. Returns the engine
    that ran B and a line saying what the eviction did."""
    extra = kvact_extra()
    extra["kvact.config"] = kvact_config
    kw = dict(extra=extra, kv_load_failure_policy=policy, mode=mode)
    e1 = engines(**kw)
    base = prompt(96, 30)
    e1.add("A", base, max_tokens=4)
    e1.run()
    e1.check()
    if variant == "reset":
        # the reset must be on the scheduler that stored the chunks (reset_cache deletes
        # what it stored), and vLLM's own prefix cache must not hold A: reset that first
        assert e1.scheduler.reset_prefix_cache() is True
        e2 = e1
    else:
        e2 = engines(**kw)
    done = []

    def evict(engine, so):
        if done or engine._admitted.get("B", 0) == 0:
            return
        keys = kvact_vllm.block_hash_keys("tiny-llama", engine.requests["B"].block_hashes[:4],
                                          CT, BLOCK_SIZE)
        if variant == "tenant":
            what = "%d objects written" % fill_l1(engine.storage, 2 * SMALL_L1, "tenant")
        elif variant == "suffix":
            what = "the second chunk deleted: %s" % engine.storage.delete(keys[1:], force=True)
        elif variant == "kvactd":
            what = "%d objects written by another process" % fill_from_another_process(
                sock, 2 * SMALL_L1)
        else:  # B holds blocks: vLLM's own reset fails, after calling reset_cache
            what = "reset_prefix_cache returned %s" % engine.scheduler.reset_prefix_cache(
                reset_connector=True)
        done.append("%s; kvact then held %d of the 2 chunks B's lookup counted" % (
            what, engine.storage.lookup(keys).total))

    e2.after_schedule.append(evict)
    e2.add("B", base[:64] + prompt(40, 31), max_tokens=4)
    e2.run()
    assert done, "B was never admitted with an external hit: %s" % e2.lookups
    assert e2.external["B"][0] == 64
    e2.check(normal_finish=False)  # no wrong byte outside a reported load error
    held, wrong = audit(*{e1, e2})  # nothing computed over the failed load was stored
    assert not wrong, wrong
    return e2, done[0]


@EVICTIONS
def test_eviction_between_lookup_and_load_fails_no_request(engines, variant,
                                                           mode):
    """kv_load_failure_policy "fail" (vLLM's default): what get_num_new_matched_tokens
    counted must still load when the worker runs, whatever another tenant writes or a
    reset deletes meanwhile (the lookup's lease pins it)."""
    with eviction_storage(variant, engines) as (config, sock):
        e, evicted = eviction_case(engines, variant, "fail", mode, config, sock)
        assert e.errors() == [], (
            "requests finished with FINISHED_ERROR: %s. After B's admission (a lookup hit "
            "of 64 tokens): %s; the worker reported %d load error block(s) (%d tokens)" % (
                e.errors(), evicted, e.load_error_blocks, e.load_error_tokens))
        e.check()
        assert e.loaded_checked["B"] == 64 and not e.recomputed


@EVICTIONS
def test_eviction_between_lookup_and_load_is_recomputed(engines, variant, mode):
    """kv_load_failure_policy "recompute": no request fails and no wrong byte is used;
    what did not load would be recomputed (before leases all of it; now nothing)."""
    with eviction_storage(variant, engines) as (config, sock):
        e, evicted = eviction_case(engines, variant, "recompute", mode, config,
                                   sock)
        # With async scheduling, vLLM 0.33 delivers the output of the step it had
        # scheduled before it saw the load error (sampled after a token it then
        # discards): B's tokens are then not the model's continuation of its prompt.
        # That is vLLM's, not kvact's, so the tokens are checked only without it.
        e.check(outputs=not (mode != "sync" and e.load_error_blocks))
        loaded = e.loaded_checked.get("B", 0)
        assert loaded + e.load_error_tokens == 64
        if variant == "suffix":  # the first chunk is there: it loads
            assert loaded >= 32
        if e.load_error_blocks:  # what failed to load was computed again
            assert e.recomputed.get("B", 0) >= e.load_error_tokens
        print("%s: loaded %d, load errors %d blocks (%d tokens), recomputed %s" % (
            evicted, loaded, e.load_error_blocks, e.load_error_tokens, e.recomputed))


@MODES
def test_an_l2_tier_failing_costs_its_hits_not_a_request(engines, mode):
    """A's chunks are only in an L2 tier whose loads fail (a mock tier with
    fail_load_rate 1). The lookup's lease brings L2 hits into L1 before it counts them:
    the failing tier counts nothing, B computes everything, and under vLLM's default
    policy "fail" nothing fails."""
    extra = kvact_extra(l2=[{"type": "mock", "fail_load_rate": 1.0}],
                        **{"l1.size_bytes": SMALL_L1})
    e1 = engines(mode=mode, extra=extra)
    base = prompt(96, 32)
    e1.add("A", base, max_tokens=4)
    e1.run()
    e1.check()
    e1.storage.flush(timeout=10.0)  # A's chunks are in L2 ...
    assert fill_l1(e1.storage, 2 * SMALL_L1, "tenant") > 0  # ... and only there
    e2 = engines(mode=mode, extra=extra)
    e2.add("B", base[:64] + prompt(100, 33), max_tokens=4)
    e2.run()
    # the worker's first step sent the chunk layout: the lookup waits for L2, then
    # counts nothing
    assert e2.lookups["B"][-1] == (0, (0, False)) and e2.load_error_blocks == 0
    e2.check()
    held, wrong = audit(e1, e2)
    assert not wrong, wrong


def _first_chunk_only_in_l1(e, keys):
    """Every chunk of keys in the slow tier, only the first also in L1 (brought in as
    planned: the load_or_recompute policy would judge the tier too slow for it)."""
    e.storage.flush(timeout=10.0)
    e.storage.clear(force=True)
    handle = e.storage.submit_prefetch_task(keys[:1], e.conn._leases.layout, as_planned=True)
    assert handle.wait() == 1
    e.storage.finish_read_prefetched(keys[:1])
    assert e.storage.lookup(keys).tiers == {"L1": 1, "slow": len(keys) - 1}


@MODES
def test_a_tier_slower_than_the_prefill_is_not_counted(engines, mode):
    """A's chunks are in a 0.5 GB/s mock tier, only its first also in L1 (issue 30). With
    the engine computing faster than the tier delivers, vLLM's Scheduler in another
    engine is told of the L1 hit only, and B computes the rest; once the engine reports a
    slow prefill, C (the same prefix, a third engine) waits for the tier's chunk to come
    into L1 and loads both. (Each engine first runs a request of its own: its worker's
    first step tells the scheduler side the chunk layout, which the plan needs.)"""
    main = vllm_cpu.main_suite_conftest()
    extra = kvact_extra(l2=[main.SLOW_TIER], prefetch_policy="load_or_recompute")

    def engine(seed):
        e = engines(mode=mode, extra=extra)
        e.add("W", prompt(40, seed), max_tokens=2)
        e.run()
        e.drain()
        return e

    e1 = engine(90)
    base = prompt(96, 32)
    e1.add("A", base, max_tokens=4)
    e1.run()
    e1.check()
    e1.drain()
    keys = kvact_vllm.block_hash_keys("tiny-llama", e1.requests["A"].block_hashes, CT,
                                      BLOCK_SIZE)[:2]
    main.measure_tier(e1.storage, "slow")
    e2, e3 = engine(91), engine(92)
    _first_chunk_only_in_l1(e2, keys)
    main.prefill_rate(e2.storage, "tiny-llama", 1e12, CT)  # computing beats the tier
    e2.add("B", base[:64] + prompt(100, 33), max_tokens=4)
    e2.run()
    assert e2.lookups["B"] == [(0, (CT, False))]  # chunk 0 only: chunk 1 was skipped
    assert e2.external["B"] == [CT] and e2.loaded_checked["B"] == CT
    e2.check()
    e2.drain()
    _first_chunk_only_in_l1(e3, keys)
    main.prefill_rate(e3.storage, "tiny-llama", CT / 10.0, CT)  # 10 s a chunk
    e3.add("C", base[:64] + prompt(100, 34), max_tokens=4)
    e3.run()
    assert e3.lookups["C"][0] == (0, (None, False))  # chunk 1 coming into L1
    assert e3.lookups["C"][-1] == (0, (2 * CT, False))
    assert e3.external["C"] == [2 * CT] and e3.loaded_checked["C"] == 2 * CT
    assert e3.load_error_blocks == 0
    e3.check()
    held, wrong = audit(e1, e2, e3)
    assert not wrong, wrong


def _failing_loads(conn):
    """Makes every load of a worker connector fail as kvact fails one it refuses (the read
    locks given back, a KvactError): a copy that fails, which no lease prevents."""
    def load(keys, slots):
        conn.storage.finish_read_prefetched(keys)
        raise kvact.KvactError(-1, "kva_kv_load (injected)")
    conn._kv.load = load


@MODES
@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_nothing_computed_over_a_failed_load_is_stored(engines, mode, policy):
    """B (A's first 64 + its own 100) is admitted with a 64-token hit; its load fails
    (injected: the copy fails). The tokens B computed over the failed prefix are wrong
    (TAINTed) and must never be stored: with async scheduling vLLM has already
    scheduled B's next prefill step (128..164, completing chunk 4) when it learns of
    the failure. Under "fail" B ends with FINISHED_ERROR (right: its KV could not be
    loaded); under "recompute" it finishes normally."""
    e1 = engines(mode=mode)
    base = prompt(96, 32)
    e1.add("A", base, max_tokens=4)
    e1.run()
    e1.check()
    e2 = engines(mode=mode, kv_load_failure_policy=policy)
    _failing_loads(e2.worker.conn)
    e2.add("B", base[:64] + prompt(100, 33), max_tokens=4)
    e2.run()
    assert e2.lookups["B"][0] == (0, (64, False)) and e2.load_error_blocks == 4
    e2.check(normal_finish=policy == "recompute",
             outputs=mode == "sync")  # vLLM's async recompute: see the eviction case
    if policy == "fail":
        assert e2.errors() == ["B"]
    held, wrong = audit(e1, e2)
    assert not wrong, "chunks computed over a failed load were stored: %s" % wrong


# ---- 7. isolation through the Scheduler ------------------------------------------------
@MODES
def test_cache_salt_isolates_end_to_end(engines, mode):
    e1 = engines(mode=mode)
    p = prompt(96, 40)
    e1.add("A", p, max_tokens=4, cache_salt="tenant-a")
    e1.run()
    e2 = engines(mode=mode)
    e2.add("other-salt", p, max_tokens=4, cache_salt="tenant-b")
    e2.add("no-salt", p, max_tokens=4)
    e2.run()
    e2.add("same-salt", p, max_tokens=4, cache_salt="tenant-a")
    e2.run()
    e1.check()
    e2.check()
    assert e2.external == {"other-salt": [0], "no-salt": [0], "same-salt": [64]}
    assert e2.loaded_checked == {"same-salt": 64}
    held, wrong = audit(e1, e2)
    assert not wrong, wrong


# ---- 8. speculative decoding -------------------------------------------------------------
@MODES
def test_speculative_decoding_stores_no_rejected_draft(engines, mode):
    """vLLM's n-gram speculative decoding (no draft model: it builds on CPU): the worker
    drafts 3 tokens per step, some right, some wrong, writes the KV of all of them, and
    vLLM rolls the rejected ones back (with async scheduling, one step late: the worker
    corrects the positions vLLM counted as accepted, as gpu_model_runner does). Chunks
    stored across decode steps hold only accepted tokens' KV; another engine loads them
    bit-exact."""
    e1 = engines(num_speculative_tokens=3, mode=mode)
    e1.add("A", prompt(40, 50), max_tokens=90)
    e1.run()
    e1.check()
    a = e1.requests["A"]
    assert len(a.all_token_ids) == 130
    assert 0 < e1.accepted < e1.drafted, (e1.accepted, e1.drafted)
    assert e1.recomputed.get("A", 0) > 0  # rejected drafts' positions computed again
    held, wrong = audit(e1)
    assert not wrong, wrong
    # 129 positions computed: chunks 0..2 were whole long before the end; chunk 3's
    # last block hash arrives with the last steps, which may end the request first
    assert held["A"][:3] == [0, 1, 2] and held["A"] in ([0, 1, 2], [0, 1, 2, 3]), held
    e2 = engines(num_speculative_tokens=3, mode=mode)
    e2.add("B", list(a.all_token_ids[:120]), max_tokens=4)
    e2.run()
    e2.check()
    assert e2.external["B"] == [96] and e2.loaded_checked["B"] == 96


# ---- 9. every layout vLLM may choose, bf16 and fp16 --------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC", "BLNHC", "BLHNC"])
def test_shared_prefix_in_every_layout(engines, layout, dtype):
    shared_prefix(engines, layout=layout, dtype=dtype)


@pytest.mark.parametrize("layout", ["LHBNC", "BHLNC"])
def test_layouts_split_per_head_are_refused_by_name(engines, layout):
    with pytest.raises(ValueError, match=layout):
        engines(layout=layout)


# ---- the checks can fail ---------------------------------------------------------------
def test_a_load_that_writes_nothing_is_caught(engines, monkeypatch):
    e1 = engines()
    base = prompt(96, 60)
    e1.add("A", base, max_tokens=2)
    e1.run()
    e2 = engines()
    monkeypatch.setattr(e2.worker.conn, "wait_for_layer_load", lambda name: None)
    monkeypatch.setattr(e2.worker.conn, "start_load_kv", lambda ctx, **kw: None)
    e2.add("B", base[:64] + prompt(8, 61), max_tokens=2)
    e2.run()
    assert any("request B, load" in c for c in e2.corrupt), e2.corrupt
    with pytest.raises(AssertionError, match="wrong KV"):
        e2.check()
    monkeypatch.undo()


def test_a_wrong_stored_chunk_is_caught(engines):
    e1 = engines()
    e1.add("A", prompt(96, 62), max_tokens=2)
    e1.run()
    key = kvact_vllm.block_hash_keys("tiny-llama", e1.requests["A"].block_hashes, CT,
                                     BLOCK_SIZE)[1]
    a = Auditor(e1.config, e1.storage)
    try:
        layout = a.kv.chunk_layout()
        assert e1.storage.delete([key], force=True) == [0]
        reserved = e1.storage.reserve_write([key], layout, mode="new")
        for t in reserved[key].tensors if hasattr(reserved[key], "tensors") else \
                [reserved[key].tensor]:
            t.view(torch.uint8).fill_(7)
        e1.storage.finish_write([key])
    finally:
        a.close()
    held, wrong = audit(e1)
    assert held["A"] == [0, 1, 2] and len(wrong) == 1 and "A chunk 1" in wrong[0], wrong
