"""test_serve_flags.py — the README's `vllm serve --kv-transfer-config` values, as vLLM reads them.

Each JSON value the README's vLLM section gives is parsed the way vLLM's CLI
parses `--kv-transfer-config` (json.loads, then KVTransferConfig(**value)),
built into a CPU VllmConfig, and the connector is made from it by vLLM's
KVConnectorFactory. Only sizes and paths are scaled to the test (a 64 MiB
L1, a disk tier in the test's directory, a kvactd on a socket of its own).
"""
import json
import pathlib
import re

import kvact
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

import vllm_cpu

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def serve_flags():
    """The --kv-transfer-config values of the README's `vllm serve` lines, in order."""
    text = README.read_text()
    section = text[text.index("\n## vLLM\n"):]
    section = section[:section.index("\n## ", 1)]
    values = re.findall(r"vllm serve MODEL --kv-transfer-config '([^']+)'", section)
    assert len(values) == 2, "the README's vLLM section lost a vllm serve line"
    return [json.loads(v) for v in values]


def make(model_dir, value):
    transfer = KVTransferConfig(**value)
    config = vllm_cpu.make_vllm_config(model_dir)
    config.kv_transfer_config = transfer
    kv_cache_config = vllm_cpu.make_kv_cache_config(config)
    return KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER,
                                               kv_cache_config)


def test_the_embedded_flags_load_the_connector(model_dir, tmp_path):
    value = serve_flags()[0]
    assert value["kv_connector_module_path"] == "kvact.integrations.vllm"
    assert value["kv_role"] == "kv_both"
    cfg = value["kv_connector_extra_config"]["kvact.config"]
    cfg["l1.size_bytes"] = 1 << 26          # the README's 64 GiB, scaled to the test
    cfg["l1.hugepages"] = cfg["l1.pinned"] = False
    cfg["l2"][0]["path"] = str(tmp_path / "kv.bin")
    cfg["l2"][0]["capacity_bytes"] = 1 << 24
    conn = make(model_dir, value)
    try:
        assert type(conn).__name__ == "KvactConnector"
        assert conn._chunk_tokens == 256
        probe = kvact.ObjectKey("probe", 0, 0, b"\1" * 32)
        assert list(conn.storage.lookup([probe]).tiers) == ["L1", "disk0"]
    finally:
        conn.shutdown()


def test_the_kvactd_flags_load_the_connector_as_a_client(model_dir):
    value = serve_flags()[1]
    assert value["kv_connector_extra_config"]["kvact.config"] == {
        "client.socket": "/run/kvact.sock"}
    with vllm_cpu.kvactd() as sock:
        value["kv_connector_extra_config"]["kvact.config"]["client.socket"] = sock
        conn = make(model_dir, value)
        try:
            assert conn.storage.stats()["l1_capacity_bytes"] > 0
        finally:
            conn.shutdown()
