"""sglang_cpu.py — SGLang's own objects on CPU, built the way SGLang builds them.

Run by the SGLang peer environment's interpreter (run.sh), never by Debian's
python3: python/tests/conftest.py keeps this folder out of the main suite.
SGLang is imported unconditionally: a missing SGLang is a failed set-up, not a
skipped test (DESIGN.md §11).

The host pools are SGLang's real classes (MHATokenToKVPoolHost,
MLATokenToKVPoolHost) over the buffer info of a real device pool
(MHATokenToKVPool, MLATokenToKVPool) made on CPU, as HiCache's pool assembler
makes them; the backend comes from SGLang's StorageBackendFactory ("dynamic",
by module path) and is then handed its host pool (register_mem_pool_host), as
HiCacheController does. Page keys are SGLang's own chained page hashes
(get_hash_str).
"""
import pathlib
import sys
import types

import torch
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # python/tests
from peer_support import kvactd, main_suite_conftest  # noqa: E402,F401  (the suite's)

PAGE = 16  # tokens per page
DEVICE_TOKENS = 256  # a host pool of ratio 2.0 then has 33 pages
MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")  # MLA refuses page_head

# The settings of every embedded runtime here: a small L1, no L2 unless a test says
# (the embedded default is a disk tier in /var/cache), nothing pinned or huge.
KVACT = {"l1.size_bytes": 1 << 24, "l1.hugepages": False, "l1.pinned": False,
         "l1.prefault": False, "runtime.workers": 2, "l2": []}


def mha_host(layout, heads=4, head_dim=32, layers=3, device_tokens=DEVICE_TOKENS):
    dev = MHATokenToKVPool(size=device_tokens, page_size=PAGE, dtype=torch.bfloat16,
                           head_num=heads, head_dim=head_dim, layer_num=layers,
                           device="cpu", enable_memory_saver=False)
    return MHATokenToKVPoolHost(dev._mha_buffer_info(), 2.0, 0, PAGE, layout,
                                pin_memory=False, device="cpu",
                                device_capacity_tokens=device_tokens, start_layer=0,
                                end_layer=layers)


def mla_host(layout, layers=3):
    dev = MLATokenToKVPool(size=DEVICE_TOKENS, page_size=PAGE, dtype=torch.bfloat16,
                           kv_lora_rank=64, qk_rope_head_dim=16, layer_num=layers,
                           device="cpu", enable_memory_saver=False)
    return MLATokenToKVPoolHost(dev._mla_buffer_info(), 2.0, 0, PAGE, layout,
                                pin_memory=False, device="cpu",
                                device_capacity_tokens=DEVICE_TOKENS, start_layer=0,
                                end_layer=layers, target_layer_num=layers)


def storage_config(tp_rank=0, tp_size=1, mla=False, kvact=None, v1=True, extra=None, **kw):
    """HiCacheStorageConfig as HiCacheController makes it for the dynamic backend
    "kvact" (interface_v1 unless v1=False: then SGLang uses the generic get/set)."""
    extra_config = {"backend_name": "kvact", "module_path": "kvact.integrations.sglang",
                    "class_name": "KvactHiCacheStorage",
                    "kvact.config": dict(KVACT, **(kvact or {}))}
    if v1:
        extra_config["interface_v1"] = 1
    extra_config.update(extra or {})
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                attn_cp_rank=0, attn_cp_size=1, is_mla_model=mla,
                                enable_storage_metrics=False,
                                is_page_first_layout=False, model_name="m",
                                extra_config=extra_config, **kw)


def make_backend(host, **config):
    """The backend SGLang's factory makes, with host registered as HiCacheController does."""
    backend = StorageBackendFactory.create_backend("dynamic", storage_config(**config), host)
    backend.register_mem_pool_host(host)
    return backend


def page_keys(n, start=0, seed=0):
    """SGLang's chained page hashes of n pages of tokens (distinct per seed)."""
    tokens = [seed * 1000003 + start * PAGE + i for i in range(n * PAGE)]
    return get_hash_str(tokens, None, page_size=PAGE)


def indices(pages):
    """The host indices of pages (page numbers): page_size token slots per page."""
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE, dtype=torch.int64)
                      for p in pages]) if pages else torch.empty(0, dtype=torch.int64)


def buffer(host):
    """The host pool's whole buffer (MHA: K and V; MLA: the latent cache)."""
    return host.kv_buffer


def fill(host, seed):
    """Random bytes (seeded) in every slot of host's buffer."""
    raw = buffer(host).view(torch.uint8)
    g = torch.Generator().manual_seed(seed)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))
    return host


def zero(host):
    buffer(host).view(torch.uint8).zero_()
    return host


def page(host, p):
    """Page p's bytes, in the order of the pool's page view (a copy)."""
    return host.get_data_page(p * PAGE, flat=False).contiguous().view(torch.uint8).clone()


def snapshot(host):
    return buffer(host).view(torch.uint8).clone()


def controller(backend, host):
    """HiCacheController's page functions (generic and zero-copy), run by SGLang's own code
    on a stand-in for the controller: they read only these three attributes."""
    ctl = types.SimpleNamespace(storage_backend=backend, storage_host_pool=host,
                                page_size=PAGE)
    op = types.SimpleNamespace(request_id="r", is_terminated=lambda: False)
    return types.SimpleNamespace(
        generic_set=lambda keys, idx: HiCacheController._generic_page_set(ctl, keys, idx),
        generic_get=lambda keys, idx: HiCacheController._generic_page_get(ctl, op, keys, idx),
        v1_set=lambda keys, idx: HiCacheController._page_set_zero_copy(ctl, keys, idx),
        v1_get=lambda keys, idx: HiCacheController._page_get_zero_copy(ctl, op, keys, idx))
