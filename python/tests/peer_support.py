"""peer_support.py — what the peer suites (vllm_real/, sglang_real/, lmcache_side/) take
from Debian's suite: its conftest.py, loaded under a name of its own, and its kvactd
launcher.

The suites run under their peer environment's interpreter with their own folder as
pytest's rootdir, so python/tests/conftest.py is not theirs; each suite's helper module
puts this folder on sys.path and imports this file.
"""
import contextlib
import importlib.util
import pathlib


def main_suite_conftest():
    """python/tests/conftest.py (Debian's suite's fixtures), under a name of its own."""
    path = pathlib.Path(__file__).resolve().parent / "conftest.py"
    spec = importlib.util.spec_from_file_location("kvact_main_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def kvactd(l1_bytes=1 << 24, l2="[]"):
    """A kvactd on a fresh socket with an L1 of l1_bytes and the L2 tiers l2 (JSON; none
    by default, so what L1 evicts is gone): yields its socket's path. No kvactd is a
    failed set-up, never a skip (python/tests/conftest.py's kvactd; the suites' run.sh
    sets KVACT_KVACTD)."""
    with main_suite_conftest().kvactd(l1_bytes, l2) as (sock, _):
        yield sock
