"""_lib.py — finds and loads libkvact.so and mirrors kvact.h's structs in ctypes.

Search order: $KVACT_LIB; libkvact.so next to this package (where a wheel
or `pip install` puts it); the repository's bazel-bin/libkvact.so (`bazel
build //:libkvact.so`), only when this package is the one in a source tree;
then the system's libkvact.so.0 (a Debian libkvact0, or LD_LIBRARY_PATH) by
its soname, and what ctypes.util.find_library("kvact") names. A file found
by path that fails to load is an error, not a reason to try the next one:
falling through to another build would hide it. The ImportError lists every
place tried.

The library is loaded with ctypes.CDLL, not PyDLL: every foreign call
releases the GIL for its duration, so a Python thread blocked in
kva_wait_prefetch lets the others run, and many threads may call at once
(kvact.h makes every storage call thread-safe).
"""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_int32,
                    c_int64, c_size_t, c_uint, c_uint8, c_uint32, c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))
SONAME = "libkvact.so.0"  # the ABI these prototypes mirror


def _source_tree():
    """The repository root when this package is python/kvact of a checkout, else None."""
    root = os.path.normpath(os.path.join(_HERE, "..", ".."))
    markers = ("WORKSPACE", "kvact.h", os.path.join("python", "setup.py"))
    return root if all(os.path.exists(os.path.join(root, m)) for m in markers) else None


def _paths():
    """Files looked for by path, in order."""
    env = os.environ.get("KVACT_LIB")
    if env:
        yield env
    yield os.path.join(_HERE, "libkvact.so")
    root = _source_tree()
    if root:
        yield os.path.join(root, "bazel-bin", "libkvact.so")


def _system_names():
    """Names handed to dlopen's own search (ld.so.cache, LD_LIBRARY_PATH)."""
    yield SONAME
    found = ctypes.util.find_library("kvact")
    if found and found != SONAME:
        yield found


def _load():
    tried = []
    for path in _paths():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(os.path.abspath(path))
            except OSError as e:
                raise ImportError("libkvact.so at %s does not load: %s" % (path, e)) from e
        tried.append(path + " (no such file)")
    for name in _system_names():
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    raise ImportError("libkvact.so not found; tried: %s. Set KVACT_LIB, install the kvact "
                      "wheel (tools/wheel.sh) or libkvact0, or run `bazel build "
                      "//:libkvact.so`" % "; ".join(tried))


# ---- kvact.h's structs, field for field ------------------------------------

class Key(Structure):
    _fields_ = [("model", c_char * 64), ("kv_rank", c_uint32), ("group", c_uint32),
                ("hash_len", c_uint8), ("hash", c_uint8 * 32)]


class LayoutTensor(Structure):
    _fields_ = [("ndim", c_uint32), ("shape", c_uint64 * 6), ("dtype", c_int)]


class Layout(Structure):
    _fields_ = [("ntensors", c_uint32), ("tensor", LayoutTensor * 4)]


class Buf(Structure):
    _fields_ = [("ptr", c_void_p), ("len", c_size_t)]


STATS_FIELDS = [
    "l1_capacity_bytes", "l1_used_bytes", "l1_objects",
    "l1_write_locked", "l1_read_locked", "l1_temporary",
    "reserved", "finished", "hits", "misses", "evicted", "evicted_on_demand", "out_of_memory",
    "l2_store_tasks", "l2_stored_keys", "l2_store_failures", "l2_store_skipped",
    "l2_prefetches", "l2_loaded_keys", "l2_load_failures",
]


class StorageStats(Structure):
    _fields_ = [(f, c_uint64) for f in STATS_FIELDS] + [("l1_pinned", c_int),
                                                         ("l1_numa_node", c_int),
                                                         ("l2_skipped_slow_keys", c_uint64)]


class TierHit(Structure):
    _fields_ = [("name", c_char * 32), ("hits", c_size_t)]


class TierHits(Structure):
    _fields_ = [("total", c_size_t), ("ntiers", c_uint32), ("tier", TierHit * 8)]


class L2Stats(Structure):
    _fields_ = [(f, c_uint64) for f in ("objects", "bytes", "capacity_bytes", "keys_locked",
                                        "stores", "store_failures", "loads", "load_failures",
                                        "lookups", "evictions")]


class L2TierStats(Structure):
    _fields_ = [("stored_keys", c_uint64), ("stored_bytes", c_uint64), ("loaded_keys", c_uint64),
                ("loaded_bytes", c_uint64), ("bypassed", c_int), ("adapter", L2Stats),
                ("skipped_slow_keys", c_uint64), ("queued_bytes", c_uint64),
                ("bytes_per_s", c_double), ("latency_s", c_double),
                ("lookups_skipped", c_uint64)]


TIER_KEYS_FIELDS = ["written", "stored", "coalesced", "bypassed", "frozen", "gone",
                    "unavailable", "failed", "dropped", "absent_now", "absent_overflowed"]


class L2TierKeys(Structure):
    _fields_ = [(f, c_uint64) for f in TIER_KEYS_FIELDS]


NODE_STATES = {0: "ok", 1: "failed", 2: "bypassed"}  # KVA_L2_NODE_*


class L2NodeStats(Structure):
    _fields_ = [("addr", c_char * 272), ("state", c_int), ("slots", c_uint32),
                ("failed_s", c_double), ("outages", c_uint64), ("failures", c_uint64),
                ("failed_cmds", c_uint64)]


class LoadPlan(Structure):
    _fields_ = [("found", TierHits), ("worth", c_size_t), ("skipped", c_size_t * 8),
                ("load_s", c_double), ("recompute_s", c_double), ("split_s", c_double),
                ("split_at", c_size_t), ("not_asked", c_uint32)]


class PrefetchOpts(Structure):
    _fields_ = [("extra_readers", c_uint32), ("warm", c_int), ("sparse", c_int),
                ("found", POINTER(c_uint8)), ("flags", c_uint32)]


PREFETCH_AS_PLANNED = 1  # KVA_PREFETCH_AS_PLANNED


class MemcheckOpts(Structure):
    _fields_ = [("wait_stores_ms", c_int), ("callers_only", c_int)]


MEMCHECK_FIELDS = ["caller_write_locked", "caller_read_locked", "caller_pinned",
                   "store_read_locked", "l2_keys_locked"]


class MemcheckReport(Structure):
    _fields_ = [(f, c_uint64) for f in MEMCHECK_FIELDS]


class PagedKV(Structure):
    _fields_ = [("device", c_int), ("format", c_int), ("dtype", c_int), ("num_layers", c_uint32),
                ("num_blocks", c_uint32), ("block_size", c_uint32), ("num_heads", c_uint32),
                ("head_dim", c_uint32), ("layers", POINTER(c_void_p)),
                ("block_stride", c_uint64), ("page_bytes", c_uint64)]


# ---- prototypes --------------------------------------------------------------

_P = c_void_p  # opaque handles: kva_config*, kva_runtime*, kva_storage*, kva_prefetch*
_K = POINTER(Key)  # a kva_key[] kvact writes (kva_chunk_keys)
_KS = c_char_p     # a const kva_key[] kvact reads: the keys' packed bytes (keys.key_array)
_L = POINTER(Layout)
_PROTOTYPES = {
    "kva_strerror": (c_char_p, [c_int]),
    "kva_version": (c_char_p, []),
    "kva_config_default": (_P, []),
    "kva_config_from_file": (c_int, [c_char_p, POINTER(_P), c_char_p, c_size_t]),
    "kva_config_set_err": (c_int, [_P, c_char_p, c_char_p, c_char_p, c_size_t]),
    "kva_config_free": (None, [_P]),
    "kva_config_get_i64": (c_int, [_P, c_char_p, POINTER(c_int64)]),
    "kva_config_get_f64": (c_int, [_P, c_char_p, POINTER(c_double)]),
    "kva_config_get_bool": (c_int, [_P, c_char_p, POINTER(c_int)]),
    "kva_config_get_str": (c_int, [_P, c_char_p, POINTER(c_char_p)]),
    "kva_runtime_start": (c_int, [_P, POINTER(_P)]),
    "kva_runtime_shutdown": (None, [_P]),
    "kva_storage_of": (_P, [_P]),
    "kva_layout_bytes": (c_size_t, [_L]),
    "kva_reserve_write": (c_int, [_P, _KS, c_size_t, _L, c_int, POINTER(Buf), POINTER(c_int)]),
    "kva_finish_write": (c_int, [_P, _KS, c_size_t, POINTER(c_int)]),
    "kva_abort_write": (c_int, [_P, _KS, c_size_t, POINTER(c_int)]),
    "kva_delete": (c_int, [_P, _KS, c_size_t, c_int, POINTER(c_int)]),
    "kva_submit_prefetch": (c_int, [_P, _KS, c_size_t, _L, c_uint32, POINTER(_P)]),
    "kva_submit_prefetch_opts": (c_int, [_P, _KS, c_size_t, _L, POINTER(PrefetchOpts),
                                         POINTER(_P)]),
    "kva_submit_prefetch_with": (c_int, [_P, _KS, c_size_t, _L, POINTER(PrefetchOpts),
                                         POINTER(_P)]),
    "kva_query_prefetch": (c_int, [_P, _P, POINTER(c_size_t)]),
    "kva_wait_prefetch": (c_int, [_P, _P, c_int, POINTER(c_size_t)]),
    "kva_prefetch_eventfd": (c_int, [_P]),
    "kva_read_prefetched": (c_int, [_P, _KS, c_size_t, POINTER(Buf)]),
    "kva_read_prefetched_layouts": (c_int, [_P, _KS, c_size_t, POINTER(Buf), POINTER(Layout)]),
    "kva_finish_read_prefetched": (c_int, [_P, _KS, c_size_t, c_uint32]),
    "kva_touch": (c_int, [_P, _KS, c_size_t]),
    "kva_clear": (c_int, [_P, c_int]),
    "kva_memcheck": (c_int, [_P, c_char_p, c_size_t]),
    "kva_memcheck_with": (c_int, [_P, POINTER(MemcheckOpts), POINTER(MemcheckReport), c_char_p,
                                  c_size_t]),
    "kva_storage_get_stats": (c_int, [_P, POINTER(StorageStats)]),
    "kva_flush": (c_int, [_P, c_int]),
    "kva_lookup": (c_int, [_P, _KS, c_size_t, c_int, POINTER(TierHits)]),
    "kva_plan_load": (c_int, [_P, _KS, c_size_t, _L, c_uint, POINTER(LoadPlan)]),
    "kva_report_prefill": (c_int, [_P, c_char_p, c_uint32, c_uint64, c_uint64]),
    "kva_unpin": (c_int, [_P, _KS, c_size_t]),
    "kva_set_freeze": (c_int, [_P, c_int]),
    "kva_set_tier_bypass": (c_int, [_P, c_char_p, c_int]),
    "kva_tier_bypassed": (c_int, [_P, c_char_p]),
    "kva_l2_contains": (c_int, [_P, c_char_p, _KS]),
    "kva_l2_get_tier_stats": (c_int, [_P, c_char_p, POINTER(L2TierStats)]),
    "kva_l2_get_tier_keys": (c_int, [_P, c_char_p, POINTER(L2TierKeys)]),
    "kva_l2_get_tier_nodes": (c_int, [_P, c_char_p, POINTER(L2NodeStats), c_size_t,
                                      POINTER(c_size_t), POINTER(c_double)]),
    "kva_kv_register": (c_int, [_P, POINTER(PagedKV), POINTER(_P)]),
    "kva_kv_unregister": (None, [_P]),
    "kva_kv_chunk_layout": (Layout, [_P, c_uint32]),
    "kva_kv_store": (c_int, [_P, _P, _KS, c_size_t, c_uint32, POINTER(c_int64), c_size_t,
                             POINTER(_P)]),
    "kva_kv_load": (c_int, [_P, _P, _KS, c_size_t, c_uint32, POINTER(c_int64), c_size_t,
                            POINTER(_P)]),
    "kva_op_wait": (c_int, [_P, c_int, POINTER(c_int)]),
    "kva_op_wait_layer": (c_int, [_P, c_uint32, c_int]),
    "kva_op_eventfd": (c_int, [_P]),
    "kva_chunk_keys": (c_size_t, [c_char_p, c_uint32, c_char_p, POINTER(c_int32), c_size_t,
                                  c_uint32, c_int, _K, c_size_t]),
}


def timeout_ms(timeout):
    """A timeout in seconds (None: forever) as kvact's milliseconds (< 0: forever)."""
    return -1 if timeout is None else max(0, int(timeout * 1000))


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _declare(_load())
