"""_vllm_base.py — what KvactConnector takes from vLLM, or stand-ins when vLLM is absent.

With vLLM importable (0.33: the peer environment, a deployment) these are
vLLM's own classes: KVConnectorBase_V1 and its metadata/role types, the KV
cache events (BlockStored, BlockRemoved, KVConnectorKVEvents) and
KVConnectorStats. Without it (Debian's python3, which runs the scripted
suite) they are small stand-ins with the same names, fields and the calls
kvact.integrations.vllm makes of them, so the module still imports; nothing
else of vLLM's is imitated.

KvactConnectorStats and KvactKVEvents, defined here over either base, are
kvact's: the counters vLLM aggregates across workers and logs, and the
events it publishes to KV-aware routers.
"""
from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                   KVConnectorMetadata,
                                                                   KVConnectorRole,
                                                                   KVConnectorWorkerMetadata)
    from vllm.v1.metrics.cache_hit_source import CacheHitSource
    HAVE_VLLM = True
except ImportError:  # vLLM absent: just what KvactConnector uses of its base
    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class KVConnectorWorkerMetadata:
        pass

    class CacheHitSource(str, enum.Enum):
        HOST = "host"
        DISK = "disk"
        EXTERNAL_UNSPECIFIED = "external_unspecified"

    class KVConnectorBase_V1:
        """The real base's constructor and metadata binding; the rest is kvact's."""

        def __init__(self, vllm_config, role, kv_cache_config):
            if vllm_config.kv_transfer_config is None:
                raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
            self._vllm_config, self._role = vllm_config, role
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._kv_cache_config = kv_cache_config
            self._connector_metadata = None

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            assert self._connector_metadata is not None
            return self._connector_metadata

if HAVE_VLLM:
    from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVConnectorKVEvents
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
else:
    @dataclass
    class BlockStored:
        block_hashes: list
        parent_block_hash: Any
        token_ids: list
        block_size: int
        lora_id: Any
        medium: Any
        lora_name: Any

        def __hash__(self):
            return hash((tuple(self.block_hashes), self.parent_block_hash,
                         tuple(self.token_ids), self.block_size, self.lora_id, self.medium,
                         self.lora_name))

    @dataclass
    class BlockRemoved:
        block_hashes: list
        medium: Any

        def __hash__(self):
            return hash((tuple(self.block_hashes), self.medium))

    class KVConnectorKVEvents:
        pass

    @dataclass
    class KVConnectorStats:
        data: dict = field(default_factory=dict)

    def maybe_convert_block_hash(hash_bytes):
        return hash_bytes

# kvact's L1 is host memory (vLLM's kv_events.MEDIUM_CPU).
MEDIUM = "CPU"

# The counters, all sums: what a scheduler or worker connector counted since it last
# reported (get_kv_connector_stats).
STAT_NAMES = ("lookups", "hit_tokens", "lease_expiries", "skipped_slow_tokens", "loaded_tokens",
              "loaded_bytes", "stored_tokens", "stored_bytes", "load_error_blocks",
              "load_error_requests")


@dataclass
class KvactConnectorStats(KVConnectorStats):
    """kvact's counters in vLLM's stats: sums across workers and steps.

    Scheduler side: lookups (requests admitted with a kvact lookup), hit_tokens
    (tokens vLLM was told to load), lease_expiries (lookup leases given back
    because vLLM did not schedule their request in time), skipped_slow_tokens (tokens
    found in an L2 tier but not counted: the load plan judged them slower to load than
    to compute). Worker side: loaded_tokens/bytes (what the
    loads wrote into the paged cache / read from kvact), stored_tokens/bytes
    (the full chunks handed to kvact's store; kvact skips keys it already
    holds), load_error_blocks/requests (blocks reported through
    get_block_ids_with_load_errors)."""

    data: dict = field(default_factory=lambda: dict.fromkeys(STAT_NAMES, 0))

    def reset(self):
        self.data = dict.fromkeys(STAT_NAMES, 0)

    def add(self, name, n):
        self.data[name] = self.data.get(name, 0) + n

    def aggregate(self, other):
        for name, n in other.data.items():
            self.add(name, n)
        return self

    def reduce(self):
        return {name: self.data.get(name, 0) for name in STAT_NAMES}

    def is_empty(self):
        return not any(self.data.values())


class KvactKVEvents(KVConnectorKVEvents):
    """The events of one or more workers (vLLM's KVConnectorKVEvents). Every TP rank
    stores the same chunks, so aggregate() keeps the events all workers reported (as
    LMCache's connector does): a chunk some rank failed to store is not announced."""

    def __init__(self, num_workers=1):
        self._counts, self._workers = Counter(), num_workers

    def add_events(self, events):
        self._counts.update(events)

    def aggregate(self):
        common = [e for e, n in self._counts.items() if n >= self._workers]
        self._counts = Counter(common)
        self._workers = 1
        return self

    def increment_workers(self, count=1):
        self._workers += count

    def get_all_events(self):
        return list(self._counts.elements())

    def get_number_of_workers(self):
        return self._workers

    def clear_events(self):
        self._counts.clear()
        self._workers = 1

    def __repr__(self):
        return "<KvactKVEvents %d events, %d workers>" % (sum(self._counts.values()),
                                                          self._workers)


class KvactWorkerMeta(KVConnectorWorkerMetadata):
    """What the workers tell the scheduler side after a step: the requests whose loads
    ended (done or failed), with how many workers say so (the scheduler side gives their
    lookup leases back once every TP rank has); once, the chunk layout of the worker's
    paged cache ((shapes, dtypes): what bringing an L2 hit into L1 needs); and, for a
    step that only computed, (tokens, ns) it took (the slowest TP rank's), which refines
    the prefill rate the load plan assumes."""

    def __init__(self, loaded=None, layout=None, prefill=None):
        self.loaded = Counter(loaded or {})
        self.layout = layout
        self.prefill = prefill

    def aggregate(self, other):
        if isinstance(other, KvactWorkerMeta):
            self.loaded.update(other.loaded)
            self.layout = self.layout or other.layout
            if self.prefill is None or (other.prefill is not None
                                        and other.prefill[1] > self.prefill[1]):
                self.prefill = other.prefill
        return self
