"""vllm_cpu.py — vLLM's own objects on CPU, built the way vLLM's tests build them.

Run by the vLLM peer environment's interpreter (run.sh), never by Debian's
python3: python/tests/conftest.py keeps this folder out of the main suite.
vLLM is imported unconditionally: a missing vLLM is a failed set-up, not a
skipped test (DESIGN.md §11).

The recipe is vLLM's tests/v1/kv_connector/unit/utils.py (create_vllm_config,
create_scheduler, create_request): a VllmConfig with DeviceConfig("cpu") over
a local model directory that holds only a small config.json (no weights, no
tokenizer, nothing fetched), kv_role "kv_both", the KV cache layout pre-set
on cache_config as the engine core would resolve it. The KVCacheConfig and
the per-layer caches come from vLLM's own planner and allocator
(get_kv_cache_config_from_groups, allocate_kv_cache), so their shapes and
strides are the ones a real worker hands to register_kv_caches.
"""
import json
import os
import pathlib
import sys

for _name, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                      "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}.items():
    os.environ.setdefault(_name, _value)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # python/tests
from peer_support import kvactd, main_suite_conftest  # noqa: E402,F401  (the suite's)
import torch  # noqa: E402
import vllm  # noqa: E402,F401  (the real one: see the docstring)
from vllm import SamplingParams  # noqa: E402
from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig,  # noqa: E402
                         ModelConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig,
                         VllmConfig)
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker.utils import allocate_kv_cache  # noqa: E402

MODULE = "kvact.integrations.vllm"
CONNECTOR = "KvactConnector"
LAYERS = ["model.layers.%d.self_attn.attn" % i for i in range(2)]
BLOCK_SIZE, KV_HEADS, HEAD_SIZE, CHUNK_TOKENS = 16, 2, 64, 32
EOS = 2

# A llama of 2 layers, 2 KV heads of 64: only what ModelConfig reads.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_SIZE, "num_hidden_layers": len(LAYERS), "vocab_size": 1000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
}


def kvact_extra(**settings):
    """kv_connector_extra_config: an embedded kvact with a small L1."""
    cfg = {"l1.size_bytes": 1 << 26, "l1.hugepages": False, "l1.pinned": False,
           "runtime.workers": 2}
    cfg.update(settings)
    return {"kvact.config": cfg, "kvact.chunk_tokens": CHUNK_TOKENS, "kvact.model": "tiny-llama"}


def write_model_dir(path, **config):
    """path/config.json and nothing else (MODEL_CONFIG, with config's keys changed):
    ModelConfig reads it, nothing is fetched. path as a str."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(dict(MODEL_CONFIG, **config)))
    return str(path)


def make_vllm_config(model_dir, layout="LBNHC", dtype="bfloat16", extra=None,
                     kv_load_failure_policy="fail", async_scheduling=False,
                     num_speculative_tokens=0, max_num_seqs=16, max_num_batched_tokens=64,
                     connector=True):
    """vLLM's create_vllm_config with KvactConnector loaded by module path (none without
    connector: vLLM's own engine). With num_speculative_tokens, vLLM's n-gram speculative
    decoding (no draft model)."""
    model = ModelConfig(model=model_dir, dtype=dtype, seed=42, skip_tokenizer_init=True)
    sched = SchedulerConfig(max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=max_num_batched_tokens, max_model_len=4096,
                            enable_chunked_prefill=True,
                            is_encoder_decoder=model.is_encoder_decoder,
                            async_scheduling=async_scheduling)
    cache = CacheConfig(block_size=BLOCK_SIZE, gpu_memory_utilization=0.9,
                        cache_dtype="auto", enable_prefix_caching=True)
    cache.kv_cache_layout = layout  # as the engine core resolves it, before connectors
    transfer = None if not connector else KVTransferConfig(
        kv_connector=CONNECTOR, kv_connector_module_path=MODULE, kv_role="kv_both",
        kv_connector_extra_config=extra or kvact_extra(),
        kv_load_failure_policy=kv_load_failure_policy)
    spec = None
    if num_speculative_tokens:
        spec = SpeculativeConfig(method="ngram", num_speculative_tokens=num_speculative_tokens,
                                 prompt_lookup_max=3, prompt_lookup_min=2,
                                 target_model_config=model,
                                 target_parallel_config=ParallelConfig())
    return VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                      kv_transfer_config=transfer, device_config=DeviceConfig("cpu"),
                      speculative_config=spec)


def make_kv_cache_config(vllm_config, num_blocks=32, dtype=torch.bfloat16, layers=LAYERS,
                         kv_heads=KV_HEADS, head_size=HEAD_SIZE):
    """vLLM's planner over one full-attention group of layers, in the config's layout."""
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=kv_heads,
                             head_size=head_size, dtype=dtype)
    groups = [KVCacheGroupSpec(list(layers), spec)]
    memory = num_blocks * len(layers) * spec.page_size_bytes
    return get_kv_cache_config_from_groups(vllm_config, groups, memory)


def make_kv_caches(kv_cache_config, layout):
    """{layer name: tensor} as a CPU worker allocates them: 4-D [B, H, N, K|V] views."""
    return allocate_kv_cache(kv_cache_config, torch.device("cpu"), KVCacheLayout[layout])


def make_scheduler(vllm_config, kv_cache_config):
    """vLLM's create_scheduler: the connector comes from KVConnectorFactory inside it."""
    vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
    cls = AsyncScheduler if vllm_config.scheduler_config.async_scheduling else Scheduler
    return cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config, log_stats=True,
               structured_output_manager=StructuredOutputManager(vllm_config),
               block_size=BLOCK_SIZE)


_none_hash_ready = False


def make_request(req_id, tokens, max_tokens=4, cache_salt=None, lora_request=None,
                 mm_features=None, prompt_embeds=None):
    """vLLM's create_request: a real Request with vLLM's sha256 block hasher. With
    prompt_embeds (a [tokens, hidden] tensor) the request has no token ids, as vLLM's
    requests built from embeddings: tokens gives only their number."""
    global _none_hash_ready
    if not _none_hash_ready:
        init_none_hash(sha256)
        _none_hash_ready = True
    params = SamplingParams(max_tokens=max_tokens)
    params.update_from_generation_config({}, EOS)
    return Request(request_id=req_id,
                   prompt_token_ids=None if prompt_embeds is not None else list(tokens),
                   prompt_embeds=prompt_embeds, sampling_params=params, pooling_params=None,
                   mm_features=mm_features, lora_request=lora_request, cache_salt=cache_salt,
                   block_hasher=get_request_block_hasher(BLOCK_SIZE, sha256))
