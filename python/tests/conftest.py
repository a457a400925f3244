"""conftest.py — an embedded runtime with a small L1 and one mock L2 tier, and a kvactd
for the client-mode suites."""
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import kvact

# $KVACT_KVACTD (set by pytest_test.sh under bazel), else the checkout's bazel-bin
KVACTD = os.environ.get("KVACT_KVACTD") or str(pathlib.Path(__file__).parents[2] /
                                                "bazel-bin" / "tools" / "kvactd")


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

# A mock L2 tier at 0.5 GB/s (real time): slower to load from than a fast engine computes.
SLOW_TIER = {"type": "mock", "name": "slow", "capacity_bytes": 1 << 26,
             "bandwidth_bytes_per_s": 500000000}


def measure_tier(sm, tier, rounds=64):
    """Stores 1 MiB objects through `tier` until its meter has a rate: it needs 20 ms of
    busy time (docs/load-plan.md), about 10 of them at 0.5 GB/s. L1 needs 1 MiB free."""
    layout = kvact.MemoryLayoutDesc([(1 << 20,)], ["uint8"])
    for _ in range(rounds):
        if sm.tier_stats(tier)["bytes_per_s"] > 0:
            return
        key = kvact.ObjectKey("meter-warmup", 0, 0, os.urandom(32))
        sm.finish_write(list(sm.reserve_write([key], layout)))
        sm.flush(timeout=10.0)
    raise AssertionError("tier %s not measured after %d MiB stored" % (tier, rounds))


def prefill_rate(sm, model, tokens_per_s, chunk_tokens):
    """Reports prefills at tokens_per_s until kvact's average for model is that rate
    (whatever was reported before: each report weighs 0.3)."""
    for _ in range(100):
        sm.report_prefill(model, 1000000, 1e6 / tokens_per_s, chunk_tokens)


def client(sock):
    """A client runtime of the kvactd on sock whose connection is up (the first call
    succeeds)."""
    rt = kvact.Runtime({"client.socket": sock, "runtime.workers": 2})
    deadline = time.monotonic() + 20
    while True:
        try:
            rt.storage.stats()
            return rt
        except kvact.KvactError:
            assert time.monotonic() < deadline, "no connection to kvactd"
            time.sleep(0.02)


@contextlib.contextmanager
def kvactd(l1_bytes=1 << 24, l2='[{"type":"mock"}]', opts=()):
    """A kvactd on a fresh socket (the L2 tiers l2, JSON: one mock tier unless told; more
    settings in opts, "key=value"), accepting: yields (its socket, its Popen); at the end
    continued (a test may have stopped it) and stopped, exit 0 asserted. No kvactd built is
    a failed set-up, never a skip."""
    if not os.access(KVACTD, os.X_OK):
        pytest.fail("no kvactd at %s: bazel build //tools:kvactd, or set KVACT_KVACTD" % KVACTD)
    with tempfile.TemporaryDirectory(prefix="kvpy", dir="/tmp") as d:  # fits sun_path
        sock = os.path.join(d, "kvact.sock")
        opts = ["server.socket=" + sock, "l1.size_bytes=%d" % l1_bytes, "l1.hugepages=false",
                "l1.prefault=false", "l1.pinned=false", "l2=" + l2] + list(opts)
        proc = subprocess.Popen([KVACTD, "--quiet"] + [a for o in opts for a in ("-o", o)])
        try:
            _wait_accepting(sock, proc)
            yield sock, proc
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            assert proc.wait(timeout=30) == 0


def _wait_accepting(sock, proc):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, "kvactd exited at start"
        with socket.socket(socket.AF_UNIX) as s:
            if s.connect_ex(sock) == 0:
                return
        time.sleep(0.005)
    raise AssertionError("kvactd did not accept in 20 s")


# vllm_real/, sglang_real/ and lmcache_side/ run under their peer environments'
# interpreters, by their own run.sh (//python:vllm_real_test,
# //python:sglang_real_test, //python:lmcache_side_test), not under Debian's
# python3 with the rest.
collect_ignore = ["vllm_real", "sglang_real", "lmcache_side"]
