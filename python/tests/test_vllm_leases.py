"""test_vllm_leases.py — KvactConnector's lookup leases, in the scripted engine loop.

What get_num_new_matched_tokens counts must still load at start_load_kv:
under vLLM's default kv_load_failure_policy "fail", a block that does not
load fails the request. These cases make the chunks a lookup counted go
away between the lookup and the load, the ways another tenant or an
operator would (L1 filled with other objects, a clear, vLLM's
/reset_prefix_cache), and check that the engine loads every counted
token byte-exact (Engine.step checks the cache after every step) with no
load error; then that a lease never outlives its use. kvact keeps no L2
tier in most cases here: an evicted chunk is then gone, not reloadable.
"""
import logging
import random
import time
from types import SimpleNamespace as NS

import pytest
import torch

import kvact
from kvact.integrations._vllm_base import CacheHitSource
from test_vllm_connector import CT, Engine, keys_of, prompt, settings

L1_BYTES = 1 << 22


def l1_only(**kw):
    cfg = settings()
    assert cfg["l1.size_bytes"] == L1_BYTES
    cfg.update({"l2": [], **kw})
    return cfg


@pytest.fixture
def engine(request):
    extra = getattr(request, "param", {})
    e = Engine(l1_only(), torch.bfloat16, "flash")
    e.sched._leases._lease_s = extra.get("lease_s", e.sched._leases._lease_s)
    yield e
    e.close()


def pins(engine):
    """Pins held in L1, summed over objects (kvact's memcheck report)."""
    report = engine.sm.memcheck_report()
    return sum(int(part.split(" pins")[0].rsplit(" ", 1)[1])
               for part in report.split(";") if " pins)" in part)


def fill_l1(engine, seed):
    """Writes other objects, twice L1's size of them: demand eviction takes every
    unlocked, unpinned object on the way (another tenant's traffic)."""
    layout = engine.w.conn._kv.chunk_layout()
    rng = random.Random(seed)
    for _ in range(2 * L1_BYTES // layout.nbytes // 16 + 1):
        keys = [kvact.ObjectKey("other-tenant", 0, 0, rng.randbytes(32)) for _ in range(16)]
        got = engine.sm.reserve_write(keys, layout)
        assert len(got) == len(keys)
        engine.sm.finish_write(list(got))


def stored_a(engine, seed=41):
    base = prompt(29, seed)
    engine.add("A", base)
    engine.run()
    engine.sm.flush(timeout=10.0)
    return base


@pytest.mark.parametrize("evict", ["fill", "clear"])
def test_what_the_lookup_counted_loads_after_l1_was_emptied(engine, evict):
    base = stored_a(engine)
    keys = keys_of(base)

    def evict_counted(meta):
        assert [spec.req_id for spec in meta.loads] == ["B"]
        if evict == "fill":
            fill_l1(engine, 7)
        else:
            engine.sm.clear()  # not forced: locked and pinned objects stay
        assert engine.sm.lookup(keys).total == 3  # the lease kept them

    engine.after_schedule = evict_counted
    engine.add("B", base)
    engine.step()
    engine.after_schedule = None
    engine.run()
    assert engine.matched["B"] == [3 * CT]
    assert not any(engine.load_errors)
    assert engine.stats.reduce()["load_error_requests"] == 0
    assert pins(engine) == 0
    assert engine.sm.memcheck(wait_stores=10.0), engine.sm.memcheck_report()


def test_asking_again_for_the_same_request_pins_once(engine):
    base = stored_a(engine)
    b = engine.add("B", base)
    for _ in range(5):
        assert engine.sched.get_num_new_matched_tokens(b, 0) == (3 * CT, False)
    assert pins(engine) == 3
    assert engine.sched.request_finished(b, []) == (False, None)
    assert pins(engine) == 0


def test_a_grown_request_takes_a_new_lease_before_giving_the_old_back(engine):
    base = stored_a(engine)
    b = engine.add("B", base[:CT * 2 + 1])
    assert engine.sched.get_num_new_matched_tokens(b, 0) == (2 * CT, False)
    assert pins(engine) == 2
    b.all_token_ids = list(base)
    assert engine.sched.get_num_new_matched_tokens(b, 0) == (3 * CT, False)
    assert pins(engine) == 3
    engine.sched.request_finished(b, [])
    assert pins(engine) == 0


def test_an_allocation_of_fewer_tokens_gives_the_rest_back(engine):
    base = stored_a(engine)
    b = engine.add("B", base)
    assert engine.sched.get_num_new_matched_tokens(b, 0) == (3 * CT, False)
    engine.sched.update_state_after_alloc(b, NS(), CT)  # vLLM loads only the first chunk
    assert pins(engine) == 1
    engine.sched.request_finished(b, [])
    assert pins(engine) == 0
    c = engine.add("C", base)
    assert engine.sched.get_num_new_matched_tokens(c, 0) == (3 * CT, False)
    engine.sched.update_state_after_alloc(c, NS(), 0)  # vLLM loads nothing
    assert pins(engine) == 0
    engine.sched.request_finished(c, [])


def test_a_load_of_a_trimmed_hit_writes_only_what_vllm_allocated(engine):
    """vLLM may cut the hit at its end (a block-aligned or capped hit): the load covers
    tokens [computed, computed + allocated), the rest is vLLM's to compute."""
    base = stored_a(engine)
    b = engine.add("B", base)
    orig = engine.sched.get_num_new_matched_tokens

    def trimmed_lookup(req, computed):
        ext, is_async = orig(req, computed)
        return (ext - CT // 2 if req is b and ext else ext), is_async

    engine.sched.get_num_new_matched_tokens = trimmed_lookup
    engine.run()
    assert engine.matched["B"] == [3 * CT - CT // 2]
    assert not any(engine.load_errors) and pins(engine) == 0
    assert engine.done["B"] == engine.done["A"]


@pytest.mark.parametrize("engine", [{"lease_s": 0.05}], indirect=True)
def test_a_lease_vllm_never_uses_expires_once_counted_and_logged(engine, caplog):
    base = stored_a(engine)
    b = engine.add("B", base)
    c = engine.add("C", base)
    engine.waiting.clear()
    assert engine.sched.get_num_new_matched_tokens(b, 0) == (3 * CT, False)
    assert engine.sched.get_num_new_matched_tokens(c, 0) == (3 * CT, False)
    assert pins(engine) == 6
    time.sleep(0.1)
    with caplog.at_level(logging.WARNING, logger="kvact.integrations.vllm"):
        engine.sched.build_connector_meta(NS(finished_req_ids=set(), num_scheduled_tokens={},
                                             scheduled_new_reqs=[],
                                             scheduled_cached_reqs=NS(req_ids=[])))
    assert pins(engine) == 0
    assert engine.sched.get_kv_connector_stats().reduce()["lease_expiries"] == 2
    assert len([r for r in caplog.records if "expired" in r.getMessage()]) == 1


def test_reset_cache_spares_what_a_lease_holds_until_the_load_read_it(engine):
    base = stored_a(engine)
    other = prompt(17, 43)
    engine.add("D", other)
    engine.run()
    keys = keys_of(base)

    def reset(meta):
        assert engine.sched.reset_cache() is True
        assert engine.sm.lookup(keys).total == 3           # B's load still comes
        assert engine.sm.lookup(keys_of(other)).total == 0  # D's chunks went at once

    engine.after_schedule = reset
    engine.add("B", base)
    engine.step()
    engine.after_schedule = None
    engine.run()
    assert engine.matched["B"] == [3 * CT] and not any(engine.load_errors)
    assert engine.sm.lookup(keys).total == 0  # deleted once the load had read them
    assert pins(engine) == 0


def test_an_l2_hit_is_brought_into_l1_before_it_is_counted():
    e = Engine(settings(), torch.bfloat16, "flash")  # a mock L2 tier
    try:
        base = stored_a(e)
        keys = keys_of(base)
        assert e.sm.clear(force=True) >= 3  # only the mock tier holds A's chunks now
        assert e.sm.lookup(keys).tiers["L1"] == 0 and e.sm.lookup(keys).total == 3
        b = e.add("B", base)
        e.waiting.clear()
        assert e.sched.get_num_new_matched_tokens(b, 0) == (None, False)  # coming into L1
        for _ in range(200):
            ext, _ = e.sched.get_num_new_matched_tokens(b, 0)
            if ext is not None:
                break
            time.sleep(0.01)
        assert ext == 3 * CT
        assert e.sm.lookup(keys).tiers["L1"] == 3 and pins(e) == 3
        e.sched.update_state_after_alloc(b, NS(), ext)
        sources = e.sched.get_external_cache_hit_sources(b, ext)
        assert sum(sources.values()) == ext and CacheHitSource.HOST not in sources
        e.sched.request_finished(b, [])
        assert pins(e) == 0
        assert e.sm.memcheck(wait_stores=10.0), e.sm.memcheck_report()
    finally:
        e.close()


_SCHEDULER_PROCESS = r'''
import sys, time
sys.path.insert(0, sys.argv[2])
from types import SimpleNamespace as NS
from kvact.integrations.vllm import KvactConnector, KVConnectorRole
from test_vllm_connector import BS, CT, MODEL, Request, prompt
extra = {"kvact.config": {"client.socket": sys.argv[1]}, "kvact.chunk_tokens": CT,
         "kvact.model": MODEL}
cfg = NS(kv_transfer_config=NS(kv_connector_extra_config=extra),
         cache_config=NS(block_size=BS), model_config=NS(model=MODEL),
         kv_events_config=None)
sched = KvactConnector(cfg, KVConnectorRole.SCHEDULER, None)
print(sched.get_num_new_matched_tokens(Request("B", prompt(29, 41), 3), 0)[0], flush=True)
time.sleep(600)
'''


def test_a_scheduler_process_that_dies_loses_its_leases_with_its_kvactd_connection(tmp_path):
    """In a client of kvactd the pins are the connection's: SIGKILL the scheduler's
    process in the middle of a lease, and kvactd holds nothing of it."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import kvactd
    with kvactd(l1_bytes=L1_BYTES) as (sock, _):
        e = Engine({"client.socket": sock}, torch.bfloat16, "flash", remote=True)
        try:
            base = stored_a(e)
            assert e.sm.memcheck(wait_stores=10.0), e.sm.memcheck_report()
            here = os.path.dirname(os.path.abspath(__file__))
            child = subprocess.Popen([sys.executable, "-c", _SCHEDULER_PROCESS, sock, here],
                                     stdout=subprocess.PIPE, text=True)
            try:
                assert child.stdout.readline().strip() == str(3 * CT)  # leased
                assert pins(e) == 3
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
            finally:
                child.kill()
                child.wait()
            for _ in range(500):  # kvactd sees the connection close
                if pins(e) == 0:
                    break
                time.sleep(0.01)
            assert pins(e) == 0
            assert e.sm.lookup(keys_of(base)).total == 3
            assert e.sm.memcheck(wait_stores=10.0), e.sm.memcheck_report()
        finally:
            e.close()


def test_with_two_tp_ranks_a_lease_counts_what_both_hold_and_pins_both():
    """Every TP rank stores its own key of a chunk (kv_rank); the scheduler's lease
    counts the prefix every rank holds and pins each rank's copy of it."""
    from kvact.integrations.vllm import KvactConnector, KVConnectorRole, _rank_keys
    e = Engine(l1_only(), torch.bfloat16, "flash")
    try:
        base = stored_a(e)              # rank 0's chunks, by the engine's worker
        keys = keys_of(base)
        layout = e.w.conn._kv.chunk_layout()
        extra = {"kvact.config": l1_only(), "kvact.chunk_tokens": CT, "kvact.model": "fake-llm"}
        cfg = NS(kv_transfer_config=NS(kv_connector_extra_config=extra),
                 cache_config=NS(block_size=4), model_config=NS(model="fake-llm"),
                 kv_events_config=None, parallel_config=NS(tensor_parallel_size=2))
        sched = KvactConnector(cfg, KVConnectorRole.SCHEDULER, None)
        try:
            b = e.add("B", base)
            e.waiting.clear()
            assert sched.get_num_new_matched_tokens(b, 0) == (0, False)  # rank 1: nothing
            sched.request_finished(b, [])
            rank1 = _rank_keys(keys[:2], 1)  # rank 1 stores 2 of the 3 chunks
            got = e.sm.reserve_write(rank1, layout)
            e.sm.finish_write(list(got))
            c = e.add("C", base)
            e.waiting.clear()
            assert sched.get_num_new_matched_tokens(c, 0) == (2 * CT, False)
            assert pins(e) == 4  # chunks 0 and 1 of both ranks; rank 0's third went back
            sched.request_finished(c, [])
            assert pins(e) == 0
        finally:
            sched.shutdown()
        assert e.sm.memcheck(wait_stores=10.0), e.sm.memcheck_report()
    finally:
        e.close()


# ---- the load plan: only what is worth loading is counted (issue 30) ---------------------
def slow_tier_settings():
    """One mock tier at 0.5 GB/s, the prefetch policy judging what is worth loading."""
    from conftest import SLOW_TIER
    cfg = settings(**{k: v for k, v in SLOW_TIER.items() if k != "type"})
    cfg["prefetch_policy"] = "load_or_recompute"
    return cfg


def first_chunk_only_in_l1(e, keys):
    """Every chunk of keys in the tier, only the first also in L1 (brought in as planned:
    the policy would not judge a 0.5 GB/s tier worth it)."""
    e.sm.flush(timeout=10.0)
    e.sm.clear(force=True)
    h = e.sm.submit_prefetch_task(keys[:1], e.sched._leases.layout, as_planned=True)
    assert h.wait() == 1
    e.sm.finish_read_prefetched(keys[:1])
    assert e.sm.lookup(keys).tiers == {"L1": 1, "slow": len(keys) - 1}


def matched_when_warm(e, req):
    """get_num_new_matched_tokens until the lease has brought its L2 hits into L1."""
    for _ in range(500):
        ext, _ = e.sched.get_num_new_matched_tokens(req, 0)
        if ext is not None:
            return ext
        time.sleep(0.01)
    raise AssertionError("the lease's L2 hits never came into L1")


def test_a_tier_slower_than_the_prefill_counts_only_the_l1_hits_until_a_slow_prefill():
    from conftest import measure_tier, prefill_rate
    e = Engine(slow_tier_settings(), torch.bfloat16, "flash")
    try:
        base = stored_a(e)
        keys = keys_of(base)
        measure_tier(e.sm, "slow")
        first_chunk_only_in_l1(e, keys)
        prefill_rate(e.sm, "fake-llm", 1e12, CT)  # computing beats a 0.5 GB/s tier
        e.add("B", base)
        e.run()
        assert e.matched["B"] == [CT] and not any(e.load_errors)
        # the slow tier is not even asked (nothing there could be worth loading)
        assert e.stats.reduce()["skipped_slow_tokens"] == 0
        assert e.sm.tier_stats("slow")["lookups_skipped"] >= 1
        assert e.done["B"] == e.done["A"] and pins(e) == 0

        first_chunk_only_in_l1(e, keys)
        prefill_rate(e.sm, "fake-llm", CT / 10.0, CT)  # 10 s a chunk: loading wins
        c = e.add("C", base)
        assert e.sched.get_num_new_matched_tokens(c, 0) == (None, False)  # warming
        assert matched_when_warm(e, c) == 3 * CT
        e.run()
        assert e.matched["C"] == [3 * CT] and not any(e.load_errors)
        assert e.stats.reduce()["skipped_slow_tokens"] == 0
        assert e.done["C"] == e.done["A"] and pins(e) == 0
        assert e.sm.memcheck(wait_stores=10.0), e.sm.memcheck_report()
    finally:
        e.close()


@pytest.mark.parametrize("plan_loads", [True, False])
def test_the_worker_times_a_prefill_and_the_scheduler_reports_it(plan_loads):
    """A step that only computes is timed on the worker; the scheduler reports it to
    kvact, whose plan then knows the model's rate (none configured here). With
    kvact.plan_loads false nothing is timed or reported."""
    cfg = settings()
    cfg["load_plan.prefill_tokens_per_s"] = 0  # unknown until an engine reports
    e = Engine(cfg, extra={"kvact.plan_loads": plan_loads})
    try:
        base = stored_a(e)  # A computes its 29 tokens in one step, no load: timed
        e.sm.clear(force=True)  # in the tier only: the plan predicts its recompute
        plan = e.sm.plan_load(keys_of(base), e.sched._leases.layout)
        assert plan.found.total == 3
        assert (plan.recompute_s > 0) is plan_loads
    finally:
        e.close()


@pytest.mark.parametrize("value, on", [(True, True), (False, False), ("false", False),
                                       ("0", False), ("true", True)])
def test_plan_loads_option_is_read(value, on):
    from kvact.integrations.vllm import KvactConnector, KVConnectorRole
    extra = {"kvact.config": l1_only(), "kvact.chunk_tokens": CT, "kvact.model": "fake-llm",
             "kvact.plan_loads": value}
    cfg = NS(kv_transfer_config=NS(kv_connector_extra_config=extra),
             cache_config=NS(block_size=4), model_config=NS(model="fake-llm"),
             kv_events_config=None)
    sched = KvactConnector(cfg, KVConnectorRole.SCHEDULER, None)
    try:
        assert sched._plan_loads is on and sched._leases._plan is on
    finally:
        sched.shutdown()


def test_a_client_of_kvactd_falls_back_to_a_lookup_and_kvactd_trims_the_warm_up():
    """kva_plan_load and kva_report_prefill answer KVA_ENOTSUP in a client: the lease
    looks up, and kvactd's load_or_recompute policy cuts the warm-up prefetch to what is
    worth loading at its configured prefill rate (here too fast for its slow tier)."""
    import json

    from conftest import SLOW_TIER, kvactd, measure_tier
    opts = ["prefetch_policy=load_or_recompute", "load_plan.prefill_tokens_per_s=1e9",
            "load_plan.chunk_tokens=%d" % CT]
    with kvactd(l1_bytes=L1_BYTES, l2=json.dumps([SLOW_TIER]), opts=opts) as (sock, _):
        e = Engine({"client.socket": sock}, torch.bfloat16, "flash", remote=True)
        try:
            base = stored_a(e)  # the scheduler's prefill reports are refused, quietly
            keys = keys_of(base)
            b = e.add("B", base)
            e.sm.flush(timeout=10.0)
            e.sm.clear(force=True)  # the tier is not measured yet: the warm-up loads all
            assert e.sched.get_num_new_matched_tokens(b, 0) == (None, False)
            assert matched_when_warm(e, b) == 3 * CT
            e.run()
            assert e.matched["B"] == [3 * CT] and not any(e.load_errors)
            assert e.sched._leases._plan is False and e.sched._reporting is False

            measure_tier(e.sm, "slow")
            first_chunk_only_in_l1(e, keys)
            c = e.add("C", base)
            assert e.sched.get_num_new_matched_tokens(c, 0) == (None, False)
            assert matched_when_warm(e, c) == CT  # kvactd skipped the slow chunks
            assert e.sm.tier_stats("slow")["lookups_skipped"] >= 1  # not even asked
            e.run()
            assert e.matched["C"] == [CT] and not any(e.load_errors)
            assert pins(e) == 0
            assert e.sm.memcheck(wait_stores=10.0), e.sm.memcheck_report()
        finally:
            e.close()


def test_the_slowest_tp_ranks_prefill_time_is_the_one_reported():
    from kvact.integrations._vllm_base import KvactWorkerMeta
    a = KvactWorkerMeta({"A": 1}, None, (64, 100))
    b, c = KvactWorkerMeta({"A": 1}, None, (64, 300)), KvactWorkerMeta({"A": 1})
    assert a.aggregate(c).aggregate(b).prefill == (64, 300)
    assert c.aggregate(KvactWorkerMeta(prefill=(64, 5))).prefill == (64, 5)
    assert a.loaded["A"] == 3
