"""test_factory.py — KvactConnector loaded by vLLM's own KVConnectorFactory, on CPU.

As a deployment loads it (kv_connector "KvactConnector",
kv_connector_module_path "kvact.integrations.vllm", kv_role "kv_both"), in a
VllmConfig built the way vLLM's tests build one (vllm_cpu.py):

- the factory resolves the module path to KvactConnector;
- vLLM's real Scheduler creates the scheduler-side connector through the
  factory and runs a step with a real Request; the connector's answers have
  the types the base class declares;
- a worker-side connector created through the factory registers the caches
  vLLM's own allocator makes, in every layout vLLM's KVCacheLayout names
  (the list comes from the installed vLLM): accepted, or refused with a
  ValueError that names the layout; the layouts issue 27 lists must be
  accepted;
- the flags vLLM reads from a connector: requires_kv_delivery False (kvact
  is a best-effort cache), requires_piecewise_for_cudagraph True (per-layer
  waits cannot be captured in CUDA graphs).
"""
import pytest
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorMetadata,
                                                               KVConnectorRole)
from vllm.v1.kv_cache_layout import KVCacheLayout

from kvact.integrations.vllm import KvactConnector

from vllm_cpu import (CHUNK_TOKENS, make_kv_cache_config, make_kv_caches, make_request,
                      make_scheduler)

# Per-layer NHD and HND, blocks-first across layers: must be accepted (issue 27).
REQUIRED_LAYOUTS = {"LBNHC", "LBHNC", "BLNHC", "BLHNC"}


@pytest.fixture
def scheduler(vllm_config):
    config = vllm_config()
    sched = make_scheduler(config, make_kv_cache_config(config))
    yield sched
    sched.shutdown()


def test_factory_resolves_the_module_path(vllm_config):
    config = vllm_config()
    assert KVConnectorFactory.get_connector_class(config.kv_transfer_config) is KvactConnector


def test_scheduler_creates_kvact_through_the_factory(scheduler):
    assert isinstance(scheduler.connector, KvactConnector)
    assert scheduler.connector.role == KVConnectorRole.SCHEDULER
    scheduler.add_request(make_request("r0", range(3 * CHUNK_TOKENS)))
    out = scheduler.schedule()
    assert out.num_scheduled_tokens["r0"] > 0
    assert isinstance(out.kv_connector_metadata, KVConnectorMetadata)


def test_scheduler_side_answers_have_the_declared_types(scheduler):
    request = make_request("r1", range(3 * CHUNK_TOKENS))
    tokens, load_async = scheduler.connector.get_num_new_matched_tokens(request, 0)
    assert tokens is None or type(tokens) is int, type(tokens)
    assert type(load_async) is bool
    delay_free, params = scheduler.connector.request_finished(request, [])
    assert type(delay_free) is bool
    assert params is None or isinstance(params, dict)


def test_requires_kv_delivery_is_false(scheduler):
    """kv_both makes vLLM's default True: a preempted request's save would then be
    treated as a hand-off that must arrive (recomputed instead)."""
    assert scheduler.connector.requires_kv_delivery is False


def test_requires_piecewise_for_cudagraph(vllm_config):
    extra = vllm_config().kv_transfer_config.kv_connector_extra_config
    assert KvactConnector.requires_piecewise_for_cudagraph(extra) is True


@pytest.mark.parametrize("layout", [m.name for m in KVCacheLayout])
def test_worker_registers_the_caches_vllm_allocates(vllm_config, layout):
    config = vllm_config(layout=layout)
    kv_cache_config = make_kv_cache_config(config)
    caches = make_kv_caches(kv_cache_config, layout)
    worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER,
                                                 kv_cache_config)
    try:
        assert isinstance(worker, KvactConnector)
        shape = tuple(next(iter(caches.values())).shape)
        try:
            worker.register_kv_caches(caches)
        except ValueError as e:
            assert layout in str(e), "%s (%s) refused without naming it: %s" % (
                layout, shape, e)
            assert layout not in REQUIRED_LAYOUTS, "%s (%s) refused: %s" % (layout, shape, e)
    finally:
        worker.shutdown()
