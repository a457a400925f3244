"""conftest.py — fixtures of the real-vLLM suite (helpers in vllm_cpu.py)."""
import pytest

import vllm_cpu


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return vllm_cpu.write_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture
def vllm_config(model_dir):
    """vllm_config(layout=..., dtype=..., extra=..., ...) -> a CPU VllmConfig."""
    return lambda **kw: vllm_cpu.make_vllm_config(model_dir, **kw)
