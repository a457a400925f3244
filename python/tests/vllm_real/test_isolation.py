"""test_isolation.py — kvact's keys follow vLLM's identity of a block, not only its tokens.

Real Requests (vLLM's sha256 block hasher) against the scheduler-side
KvactConnector that vLLM's Scheduler creates through its factory. A first
request's prompt is stored under the keys the connector plans for it: the
chunks of a real scheduling step's connector metadata (from vLLM's own
Scheduler.schedule where it can schedule the request, else from a
SchedulerOutput built with vLLM's NewRequestData), written into kvact the
way a worker's store would name them (registering vLLM's caches is the KV
layout work of issue 27, not checked here). Then:

- the same tokens with another cache_salt, LoRA adapter, image behind the
  same placeholder tokens, or other prompt embeddings (whose token ids are
  all zeros) find nothing;
- the same tokens and the same identity find the stored chunks;
- the keys are the same in another process (a restart), so a kvactd or a
  disk tier shared by several engines still hits;
- reset_cache (vLLM's /reset_prefix_cache) removes the stored chunks from
  L1, publishes their BlockRemoved, and the lookup then misses; the
  scheduler side's stats count the lookup's hit.
"""
import json
import os
import subprocess
import sys

import pytest
import torch
from vllm.config import KVEventsConfig
from vllm.distributed.kv_events import BlockRemoved
from vllm.lora.request import LoRARequest
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput

import kvact
from kvact.integrations.vllm import block_hash_keys

from vllm_cpu import (BLOCK_SIZE, CHUNK_TOKENS, kvact_extra, make_kv_cache_config,
                      make_request, make_scheduler)

PROMPT = [(i * 7919) % 997 + 3 for i in range(3 * CHUNK_TOKENS + 5)]  # 3 chunks and 5
STORED = 2 * CHUNK_TOKENS  # a step of 64 tokens (max_num_batched_tokens) stores 2 chunks
HIDDEN = 256


def image(identifier):
    """An image behind placeholder tokens 4..19 (chunk 0): only its identifier differs."""
    return [MultiModalFeatureSpec(data=None, modality="image", identifier=identifier,
                                  mm_position=PlaceholderRange(offset=4, length=16))]


def embeds(seed):
    return torch.randn(len(PROMPT), HIDDEN, generator=torch.Generator().manual_seed(seed))


# name -> (the stored request's identity, another identity): keyword arguments of make_request
IDENTITIES = {
    "cache_salt": ({"cache_salt": "tenant-a"}, {"cache_salt": "tenant-b"}),
    "no_cache_salt": ({"cache_salt": "tenant-a"}, {}),
    "lora": ({"lora_request": LoRARequest("adapter-a", 1, "/adapters/a")},
             {"lora_request": LoRARequest("adapter-b", 2, "/adapters/b")}),
    "no_lora": ({"lora_request": LoRARequest("adapter-a", 1, "/adapters/a")}, {}),
    "image": ({"mm_features": image("img-a")}, {"mm_features": image("img-b")}),
    "prompt_embeds": ({"prompt_embeds": embeds(1)}, {"prompt_embeds": embeds(2)}),
}


@pytest.fixture
def scheduler(vllm_config):
    """No L2 tier: every case sees only what it stored (kvact's default has a temporary
    disk tier, which outlives a reset_cache by design)."""
    config = vllm_config(extra=kvact_extra(l2=[]))
    config.kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    sched = make_scheduler(config, make_kv_cache_config(config))
    yield sched
    sched.shutdown()


def write(storage, keys):
    """Stores keys as a worker's store would (the bytes do not matter to a lookup)."""
    layout = kvact.MemoryLayoutDesc([(16,)], ["uint8"])
    reserved = storage.reserve_write(keys, layout, mode="new")
    assert sorted(reserved) == sorted(keys)
    storage.finish_write(list(reserved))


def store_by_scheduling(scheduler, request):
    """vLLM's Scheduler schedules request once; the chunks the metadata says to store
    are written. Returns their keys."""
    scheduler.add_request(request)
    out = scheduler.schedule()
    keys = [k for s in out.kv_connector_metadata.saves for k in s.keys]
    write(scheduler.connector.storage, keys)
    return keys


def store_by_hand(connector, request):
    """The connector's calls of one step that schedules request's first STORED tokens,
    with a SchedulerOutput of vLLM's classes (for requests vLLM's CPU Scheduler cannot
    schedule here: images need an encoder budget, embeddings a model that takes them)."""
    assert connector.get_num_new_matched_tokens(request, 0) == (0, False)
    connector.update_state_after_alloc(request, None, 0)
    out = SchedulerOutput.make_empty()
    blocks = list(range(STORED // BLOCK_SIZE))
    out.scheduled_new_reqs = [NewRequestData.from_request(request, (blocks,))]
    out.num_scheduled_tokens = {request.request_id: STORED}
    out.total_num_scheduled_tokens = STORED
    keys = [k for s in connector.build_connector_meta(out).saves for k in s.keys]
    write(connector.storage, keys)
    return keys


def store(scheduler, request, name):
    if name in ("image", "prompt_embeds"):
        return store_by_hand(scheduler.connector, request)
    return store_by_scheduling(scheduler, request)


def hit(connector, request):
    tokens, load_async = connector.get_num_new_matched_tokens(request, 0)
    assert load_async is False
    return tokens


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_same_tokens_with_another_identity_do_not_hit(scheduler, name):
    stored_as, other = IDENTITIES[name]
    keys = store(scheduler, make_request("stored", PROMPT, **stored_as), name)
    assert len(keys) == STORED // CHUNK_TOKENS
    assert hit(scheduler.connector, make_request("other", PROMPT, **other)) == 0


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_same_tokens_with_the_same_identity_hit(scheduler, name):
    stored_as, _ = IDENTITIES[name]
    store(scheduler, make_request("stored", PROMPT, **stored_as), name)
    assert hit(scheduler.connector, make_request("again", PROMPT, **stored_as)) == STORED


def test_keys_are_the_same_in_another_process():
    """vLLM's sha256 block hashes come from a fixed seed: another process (an engine
    restarted, or another one sharing a kvactd) computes the same kvact keys."""
    request = make_request("r", PROMPT, cache_salt="tenant-a")
    here = block_hash_keys("tiny-llama", request.block_hashes, CHUNK_TOKENS, BLOCK_SIZE)
    code = ("import vllm_cpu; from kvact.integrations.vllm import block_hash_keys; "
            "import json, sys; r = vllm_cpu.make_request('r', json.loads(sys.argv[1]), "
            "cache_salt='tenant-a'); print(json.dumps([k.hex() for k in block_hash_keys("
            "'tiny-llama', r.block_hashes, %d, %d)]))" % (CHUNK_TOKENS, BLOCK_SIZE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    env.pop("PYTHONHASHSEED", None)
    out = subprocess.run([sys.executable, "-c", code, json.dumps(PROMPT)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [k.hex() for k in here]


def test_reset_cache_removes_what_this_engine_stored(scheduler):
    conn = scheduler.connector
    keys = store(scheduler, make_request("stored", PROMPT, cache_salt="s"), "cache_salt")
    request = make_request("again", PROMPT, cache_salt="s")
    assert hit(conn, request) == STORED
    conn.update_state_after_alloc(request, None, STORED)
    stats = conn.get_kv_connector_stats()
    # two admissions looked up: "stored" (scheduled, no hit) and "again"
    assert stats.reduce()["hit_tokens"] == STORED and stats.reduce()["lookups"] == 2
    assert conn.get_kv_connector_stats() is None  # reported once
    conn.take_events()
    assert scheduler.reset_connector_cache() is True  # what /reset_prefix_cache calls
    # "again" is to load them: they stay until it has, but count as misses meanwhile
    assert conn.storage.lookup(keys).total == len(keys)
    assert hit(conn, make_request("after", PROMPT, cache_salt="s")) == 0
    conn.request_finished(request, [])
    assert conn.storage.lookup(keys).total == 0
    (removed,) = conn.take_events()
    assert isinstance(removed, BlockRemoved)
    assert removed.block_hashes == [maybe_convert_block_hash(h)  # as vLLM's own events
                                    for h in request.block_hashes[:STORED // BLOCK_SIZE]]
