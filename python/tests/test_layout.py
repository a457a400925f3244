"""test_layout.py — the ctypes mirrors have kvact.h's sizes and offsets (layout_probe.c)."""
import ctypes
import os
import subprocess

import pytest

from kvact import _lib

_PROBE = os.environ.get("KVACT_LAYOUT_PROBE",
                        os.path.join(os.path.dirname(__file__), "..", "..", "bazel-bin",
                                     "python", "layout_probe"))


def _expected():
    if not os.path.exists(_PROBE):
        pytest.fail("layout_probe not built (bazel build //python:layout_probe): a failed "
                    "set-up, not a skip")
    out = subprocess.run([_PROBE], check=True, capture_output=True, text=True).stdout
    return dict((name, int(v)) for name, v in (line.split() for line in out.splitlines()))


def _off(struct, field):
    return getattr(struct, field).offset


def _actual():
    L, T, H, h = _lib.Layout, _lib.LayoutTensor, _lib.TierHits, _lib.TierHit
    S, TS, A, P = _lib.StorageStats, _lib.L2TierStats, _lib.L2Stats, _lib.PagedKV
    LP, TK, N = _lib.LoadPlan, _lib.L2TierKeys, _lib.L2NodeStats
    return {
        "kva_key": ctypes.sizeof(_lib.Key),
        "kva_key.kv_rank": _off(_lib.Key, "kv_rank"),
        "kva_key.group": _off(_lib.Key, "group"),
        "kva_key.hash_len": _off(_lib.Key, "hash_len"),
        "kva_key.hash": _off(_lib.Key, "hash"),
        "kva_layout": ctypes.sizeof(L),
        "kva_layout.tensor": _off(L, "tensor"),
        "kva_layout.tensor[1]": _off(L, "tensor") + ctypes.sizeof(T),
        "kva_layout.tensor[0].shape": _off(L, "tensor") + _off(T, "shape"),
        "kva_layout.tensor[0].dtype": _off(L, "tensor") + _off(T, "dtype"),
        "kva_buf": ctypes.sizeof(_lib.Buf),
        "kva_buf.len": _off(_lib.Buf, "len"),
        "kva_storage_stats": ctypes.sizeof(S),
        "kva_storage_stats.l2_load_failures": _off(S, "l2_load_failures"),
        "kva_storage_stats.l1_pinned": _off(S, "l1_pinned"),
        "kva_storage_stats.l1_numa_node": _off(S, "l1_numa_node"),
        "kva_storage_stats.l2_skipped_slow_keys": _off(S, "l2_skipped_slow_keys"),
        "kva_tier_hits": ctypes.sizeof(H),
        "kva_tier_hits.ntiers": _off(H, "ntiers"),
        "kva_tier_hits.tier": _off(H, "tier"),
        "kva_tier_hits.tier[1]": _off(H, "tier") + ctypes.sizeof(h),
        "kva_tier_hits.tier[0].hits": _off(H, "tier") + _off(h, "hits"),
        "kva_l2_tier_stats": ctypes.sizeof(TS),
        "kva_l2_tier_stats.bypassed": _off(TS, "bypassed"),
        "kva_l2_tier_stats.adapter": _off(TS, "adapter"),
        "kva_l2_tier_stats.adapter.evictions": _off(TS, "adapter") + _off(A, "evictions"),
        "kva_l2_tier_stats.skipped_slow_keys": _off(TS, "skipped_slow_keys"),
        "kva_l2_tier_stats.lookups_skipped": _off(TS, "lookups_skipped"),
        "kva_l2_tier_stats.latency_s": _off(TS, "latency_s"),
        "kva_l2_tier_keys": ctypes.sizeof(TK),
        "kva_l2_tier_keys.dropped": _off(TK, "dropped"),
        "kva_l2_tier_keys.absent_overflowed": _off(TK, "absent_overflowed"),
        "kva_l2_node_stats": ctypes.sizeof(N),
        "kva_l2_node_stats.state": _off(N, "state"),
        "kva_l2_node_stats.slots": _off(N, "slots"),
        "kva_l2_node_stats.failed_s": _off(N, "failed_s"),
        "kva_l2_node_stats.outages": _off(N, "outages"),
        "kva_l2_node_stats.failed_cmds": _off(N, "failed_cmds"),
        "kva_load_plan": ctypes.sizeof(LP),
        "kva_load_plan.worth": _off(LP, "worth"),
        "kva_load_plan.skipped": _off(LP, "skipped"),
        "kva_load_plan.load_s": _off(LP, "load_s"),
        "kva_load_plan.split_s": _off(LP, "split_s"),
        "kva_load_plan.split_at": _off(LP, "split_at"),
        "kva_load_plan.not_asked": _off(LP, "not_asked"),
        "kva_prefetch_opts": ctypes.sizeof(_lib.PrefetchOpts),
        "kva_prefetch_opts.warm": _off(_lib.PrefetchOpts, "warm"),
        "kva_prefetch_opts.sparse": _off(_lib.PrefetchOpts, "sparse"),
        "kva_prefetch_opts.found": _off(_lib.PrefetchOpts, "found"),
        "kva_prefetch_opts.flags": _off(_lib.PrefetchOpts, "flags"),
        "kva_memcheck_opts": ctypes.sizeof(_lib.MemcheckOpts),
        "kva_memcheck_opts.callers_only": _off(_lib.MemcheckOpts, "callers_only"),
        "kva_memcheck_report": ctypes.sizeof(_lib.MemcheckReport),
        "kva_memcheck_report.l2_keys_locked": _off(_lib.MemcheckReport, "l2_keys_locked"),
        "kva_paged_kv": ctypes.sizeof(P),
        "kva_paged_kv.num_layers": _off(P, "num_layers"),
        "kva_paged_kv.head_dim": _off(P, "head_dim"),
        "kva_paged_kv.layers": _off(P, "layers"),
        "kva_paged_kv.block_stride": _off(P, "block_stride"),
        "kva_paged_kv.page_bytes": _off(P, "page_bytes"),
    }


def test_ctypes_structs_match_kvact_h():
    assert _actual() == _expected()
