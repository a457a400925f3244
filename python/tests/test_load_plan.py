"""test_load_plan.py — plan_load, report_prefill and submit_prefetch_task(as_planned=True)
through the bindings, against a mock tier at 0.5 GB/s (real time) that kvact has measured
(docs/load-plan.md): worth loading for a slow engine, not for a fast one; in a client of
kvactd the first two answer KVA_ENOTSUP."""
import pytest

import kvact
from conftest import SLOW_TIER, kvactd, measure_tier, prefill_rate, small_config

MODEL = "plan-llm"
CHUNK = 16
LAYOUT = kvact.MemoryLayoutDesc([(CHUNK, 1024)], ["bfloat16"])  # 32 KiB: 65 us at 0.5 GB/s
N = 4
ENOTSUP, EINVAL = -7, -1


def keys_of(n, model=MODEL):
    return [kvact.ObjectKey(model, 0, 0, bytes([i + 1]) * 32) for i in range(n)]


def in_l2_only(sm, keys):
    """keys written, stored in the tier, and gone from L1."""
    sm.finish_write(list(sm.reserve_write(keys, LAYOUT)))
    sm.flush(timeout=10.0)
    sm.clear(force=True)
    assert sm.lookup(keys).tiers == {"L1": 0, "slow": len(keys)}


@pytest.fixture(params=["default"])
def slow(request):
    """The storage of a runtime whose one L2 tier is SLOW_TIER (prefetch_policy: param)."""
    cfg = small_config(l2=[SLOW_TIER], prefetch_policy=request.param)
    with kvact.Runtime(cfg) as rt:
        yield rt.storage


def test_a_tier_not_measured_yet_is_worth_loading_in_full(slow):
    keys = keys_of(N)
    in_l2_only(slow, keys)
    plan = slow.plan_load(keys, LAYOUT)
    assert plan.found.total == N and plan.found.tiers == {"L1": 0, "slow": N}
    assert plan.worth == N and plan.skipped == {"slow": 0}
    assert plan.recompute_s == pytest.approx(N * 256 / 10000)  # config's load_plan.*


def test_a_measured_slow_tier_is_skipped_for_a_fast_engine_and_l1_hits_are_pinned(slow):
    keys = keys_of(N)
    in_l2_only(slow, keys)
    measure_tier(slow, "slow")
    h = slow.submit_prefetch_task(keys[:1], LAYOUT)  # the first chunk back in L1
    assert h.wait() == 1
    slow.finish_read_prefetched(keys[:1])
    prefill_rate(slow, MODEL, 1e12, CHUNK)
    asked = slow.tier_stats("slow")["lookups_skipped"]
    # a prefix engine does not even ask it: nothing there could be worth loading
    plan = slow.plan_load(keys, LAYOUT)
    assert plan.found.tiers == {"L1": 1, "slow": 0} and plan.not_asked == ["slow"]
    assert slow.tier_stats("slow")["lookups_skipped"] == asked + 1
    # with a prefill this fast not even a split could gain from it
    plan = slow.plan_load(keys, LAYOUT, pin=True, can_split=True)
    assert plan.found.tiers == {"L1": 1, "slow": 0} and plan.not_asked == ["slow"]
    assert plan.worth == 1 and plan.skipped == {"slow": 0}
    assert slow.memcheck_details()[1]["caller_pinned"] == 1
    assert slow.unpin(keys[:1]) == 1
    assert slow.memcheck(wait_stores=10.0), slow.memcheck_report()


def test_a_slow_prefill_reported_makes_the_slow_tier_worth_loading(slow):
    keys = keys_of(N)
    in_l2_only(slow, keys)
    measure_tier(slow, "slow")
    prefill_rate(slow, MODEL, 1e12, CHUNK)
    assert slow.plan_load(keys, LAYOUT).worth == 0
    prefill_rate(slow, MODEL, CHUNK / 10.0, CHUNK)  # 10 s a chunk
    plan = slow.plan_load(keys, LAYOUT)
    assert plan.worth == N and plan.skipped == {"slow": 0}
    assert plan.recompute_s == pytest.approx(N * 10.0, rel=1e-3)
    other = keys_of(N, "other-llm")  # rates are per model: another keeps the config's
    in_l2_only(slow, other)
    assert slow.plan_load(other, LAYOUT).recompute_s == pytest.approx(N * 256 / 10000)


def test_report_prefill_refuses_a_zero_count_or_time(slow):
    for tokens, seconds in ((0, 1.0), (16, 0.0)):
        with pytest.raises(kvact.KvactError) as e:
            slow.report_prefill(MODEL, tokens, seconds)
        assert e.value.status == EINVAL


@pytest.mark.parametrize("slow", ["load_or_recompute"], indirect=True)
def test_a_prefetch_as_planned_is_not_judged_again_by_the_policy(slow):
    keys = keys_of(N)
    in_l2_only(slow, keys)
    measure_tier(slow, "slow")
    prefill_rate(slow, MODEL, 1e12, CHUNK)
    assert slow.submit_prefetch_task(keys, LAYOUT).wait() == 0  # judged: too slow to ask
    assert slow.tier_stats("slow")["lookups_skipped"] == 1
    assert slow.submit_prefetch_task(keys, LAYOUT, as_planned=True).wait() == N
    assert slow.tier_stats("slow")["lookups_skipped"] == 1
    assert slow.finish_read_prefetched(keys) == N
    assert slow.memcheck(wait_stores=10.0), slow.memcheck_report()


def test_a_client_of_kvactd_has_no_plan_and_prefetches_as_planned():
    with kvactd() as (sock, _):
        with kvact.Runtime(kvact.Config({"client.socket": sock})) as rt:
            sm, keys = rt.storage, keys_of(N)
            for call in (lambda: sm.plan_load(keys, LAYOUT, pin=True),
                         lambda: sm.report_prefill(MODEL, CHUNK, 1.0)):
                with pytest.raises(kvact.KvactError) as e:
                    call()
                assert e.value.status == ENOTSUP
            sm.finish_write(list(sm.reserve_write(keys, LAYOUT)))
            assert sm.submit_prefetch_task(keys, LAYOUT, as_planned=True).wait() == N
            assert sm.finish_read_prefetched(keys) == N
            assert sm.memcheck(wait_stores=10.0), sm.memcheck_report()
