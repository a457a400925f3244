"""conftest.py — an embedded runtime with a small L1 and one mock L2 tier."""
import pytest

import kvact


def small_config(**extra):
    settings = {"l1.size_bytes": 1 << 24, "l1.hugepages": False, "l1.pinned": False,
                "runtime.workers": 2, "l2": [{"type": "mock", "capacity_bytes": 1 << 26}]}
    settings.update(extra)
    return kvact.Config(settings)


def clean(sm):
    """memcheck() once the store-behind to L2 is done (its copies hold read locks meanwhile)."""
    sm.flush(timeout=10.0)
    return sm.memcheck()


@pytest.fixture
def rt():
    with kvact.Runtime(small_config()) as runtime:
        yield runtime


@pytest.fixture
def sm(rt):
    return rt.storage

# vllm_real/ runs under the vLLM peer environment's interpreter, by its own
# run.sh (//python:vllm_real_test), not under Debian's python3 with the rest.
collect_ignore = ["vllm_real"]
