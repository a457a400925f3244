"""test_bench_vllm.py — python/bench/bench_vllm.py's three parts run on vLLM's own objects
with tiny sizes and give sane figures: the keys it prints, non-negative times, the byte
counts of the shapes, the eviction run's counts adding up. No timing thresholds (the
benchmark itself asserts that every lookup found its half, that no load failed outside
the writer's pressure, that every request finished and the stores landed)."""
import os
import sys

import pytest
from vllm.distributed import parallel_state

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bench"))
import bench_vllm  # noqa: E402

SMALL = bench_vllm.Shape("small", 2, 2, 64, 32)  # 1 KiB per token, 32 KiB chunks


@pytest.fixture(scope="module", autouse=True)
def worker_group():
    """The benchmark makes vLLM's one-process world for its worker connectors; the other
    cases of the suite run without it, so it goes when this module is done."""
    made = not parallel_state.model_parallel_is_initialized()
    yield
    if made and parallel_state.model_parallel_is_initialized():
        bench_vllm.release_worker_group()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return bench_vllm.write_model_dir(str(tmp_path_factory.mktemp("bench_model")), SMALL)


def test_scheduler_part(model_dir, capsys):
    res = bench_vllm.bench_scheduler(model_dir, sizes=(1, 3), reps=1, warmup=0, max_tokens=3,
                                     shape=SMALL)
    assert res["memcheck"] == ""
    for n in (1, 3):
        for phase in ("admission_us", "decode_us"):
            f = res[n][phase]
            assert set(f) == {"vllm", "kvact", "kvact_part", "per_request", "share"}
            assert f["vllm"] > 0 and f["kvact"] > 0
            assert f["per_request"] == pytest.approx(f["kvact_part"] / n)
        calls = res[n]["calls"]
        for m in ("get_num_new_matched_tokens", "update_state_after_alloc",
                  "build_connector_meta", "request_finished"):
            assert calls[m]["calls_per_step"] > 0, m
        # one lookup and one allocation per request, over the round's 3 steps
        assert calls["get_num_new_matched_tokens"]["calls_per_step"] == pytest.approx(n / 3)
        assert calls["build_connector_meta"]["calls_per_step"] == 1
        assert all(c[k] >= 0 for c in calls.values()
                   for k in ("us_per_call", "us_per_step", "admission_us", "decode_us"))
        assert calls["get_num_new_matched_tokens"]["admission_us"] > 0
        assert calls["get_num_new_matched_tokens"]["decode_us"] == 0  # looked up once
        assert res[n]["calls_us_per_step"] > 0 and res[n]["calls_admission_us"] > 0
    bench_vllm.print_scheduler(res, 1, SMALL, 3)
    assert "get_num_new_matched_tokens" in capsys.readouterr().out


def test_worker_part(model_dir, capsys):
    res = bench_vllm.bench_worker(model_dir, sizes=(1, 2), reps=1, warmup=0, shape=SMALL)
    assert res["memcheck"] == ""
    for n in (1, 2):
        f = res[n]
        tokens = n * bench_vllm.HIT_CHUNKS * SMALL.chunk_tokens
        mib = tokens * bench_vllm.token_bytes(SMALL) / 2**20
        assert f["load_mib"] == f["store_mib"] == pytest.approx(mib)
        for k in ("start_load_kv_us", "layer_waits_us", "wait_for_save_us", "load_us",
                  "store_stall_us", "overlap_window_us", "torch_index_copy_us",
                  "torch_index_select_us", "worker_step_us", "next_worker_step_us",
                  "scheduler_step_us", "load_vs_anchor", "stall_vs_anchor"):
            assert f[k] > 0, k
        assert f["other_calls_us"] >= 0 and f["next_step_wait_us"] >= 0
        assert f["load_us"] == pytest.approx(f["start_load_kv_us"] + f["layer_waits_us"])
        assert f["store_stall_us"] == pytest.approx(f["wait_for_save_us"] +
                                                    f["next_step_wait_us"])
    bench_vllm.print_worker(res, 1, SMALL)
    assert "the worker stalls" in capsys.readouterr().out


def test_eviction_part(model_dir, capsys):
    res = bench_vllm.bench_eviction(model_dir, n=2, rounds=1, shape=SMALL)
    hit = bench_vllm.HIT_CHUNKS * SMALL.chunk_tokens
    for policy in ("fail", "recompute"):
        ctl, wr = res[policy]["control"], res[policy]["writer"]
        assert res[policy]["memcheck"] == ""
        assert ctl["requests"] == wr["requests"] == 2
        assert ctl["finished_ok"] == 2 and ctl["finished_error"] == ctl["error_blocks"] == 0
        assert wr["hit_tokens_found"] == 2 * hit  # the lookups found the halves
        assert wr["finished_ok"] + wr["finished_error"] == 2
        assert wr["error_blocks"] >= 0 and wr["writer_keys"] > 0 and wr["evicted"] >= 0
        # a block of a failed load is reported by get_block_ids_with_load_errors
        assert (wr["error_blocks"] > 0) == (wr["finished_error"] > 0 or
                                            (wr["tokens_recomputed"] or 0) > 0)
    assert res["fail"]["writer"]["tokens_recomputed"] is None
    assert res["recompute"]["writer"]["finished_error"] == 0
    assert res["recompute"]["writer"]["tokens_recomputed"] >= 0
    bench_vllm.print_eviction(res)
    assert "recompute" in capsys.readouterr().out
