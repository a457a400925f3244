"""conftest.py — fixtures of the real-SGLang suite (helpers in sglang_cpu.py)."""
import pytest

import sglang_cpu


@pytest.fixture
def backend():
    """backend(host, **storage_config) -> a KvactHiCacheStorage made by SGLang's factory with host
    registered. At the end of the test every runtime they use must pass memcheck (no lock
    left by any call, whatever it raised), then they are closed."""
    made = []

    def make(host, **config):
        made.append(sglang_cpu.make_backend(host, **config))
        return made[-1]

    yield make
    try:
        for sm in {id(b._sm): b._sm for b in made}.values():
            assert sm.memcheck_report(wait_stores=10.0) == ""
    finally:
        for b in made:
            b.close()
