"""test_serve_flags.py — the `python -m sglang.launch_server` lines of README.md's SGLang
section, as they are written there: SGLang's own argument parser accepts them, SGLang's
own parser of the extra config reads it, kvact accepts its settings, and SGLang's factory
makes the backend from it (the embedded line with its L1 and disk tier swapped for small
ones: a 64 GiB pool and a 1 TiB file are not this test's to make)."""
import argparse
import os
import shlex

from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.server_args import ServerArgs

import kvact.integrations._shared as shared
import sglang_cpu

README = os.path.join(os.path.dirname(__file__), "..", "..", "..", "README.md")


def readme_lines():
    with open(README) as f:
        text = f.read()
    section = text[text.index("\n## SGLang\n"):]
    section = section[:section.index("\n## ", 1)]
    return [line.strip() for line in section.splitlines()
            if line.strip().startswith("python -m sglang.launch_server ")]


def test_the_readme_flags_make_the_backend_through_sglangs_own_parsers():
    lines = readme_lines()
    assert len(lines) == 2, lines  # embedded, and with kvactd
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    sockets = []
    for line in lines:
        args = parser.parse_args(shlex.split(line)[3:])
        assert args.enable_hierarchical_cache and args.hicache_storage_backend == "dynamic"
        assert args.hicache_mem_layout in sglang_cpu.MHA_LAYOUTS
        extra = HybridCacheController.parse_storage_backend_extra_config(
            args.hicache_storage_backend_extra_config)[0]
        assert (extra["module_path"], extra["class_name"], extra["interface_v1"]) == (
            "kvact.integrations.sglang", "KvactHiCacheStorage", 1)
        shared.config_of(extra)  # kvact validates every setting as it is set
        settings = extra["kvact.config"]
        sockets.append(settings.get("client.socket"))
        if "client.socket" not in settings:  # the embedded line: a small pool, no file
            extra = dict(extra, **{"kvact.config": sglang_cpu.KVACT})
        host = sglang_cpu.mha_host(args.hicache_mem_layout)
        cfg = sglang_cpu.storage_config(tp_size=args.tp_size, tp_rank=args.tp_size - 1)
        cfg.extra_config = extra
        backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
        try:
            backend.register_mem_pool_host(host)
            assert type(backend).__name__ == "KvactHiCacheStorage"
            if "client.socket" not in extra["kvact.config"]:
                keys = sglang_cpu.page_keys(2)
                assert backend.batch_set_v1(keys, sglang_cpu.indices([0, 1])) == [True, True]
                assert backend.batch_exists(keys) == 2
        finally:
            backend.close()
    assert sockets == [None, "/run/kvact/kvact.sock"]  # the packaged kvactd's socket
