"""test_processes.py — SGLang worker processes sharing one kvactd (sg_child.py each).

- two processes store disjoint pages and read each other's, bit-exact, and a third
  client (this process) reads both;
- a process killed (SIGKILL) while it stores and reads, or right after kvact reserved
  its pages (before finish_write), leaves no lock in the kvactd, and pages it never
  finished are never found;
- with no kvactd on its socket, every call is a miss or a failed page, never an
  exception (SGLang's prefetch I/O thread stops at its first exception), and once a
  kvactd serves the socket the same backend stores and reads.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import kvact
import sglang_cpu
from sglang_cpu import fill, indices, mha_host, page, page_keys, zero

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def sock():
    with sglang_cpu.kvactd(l1_bytes=1 << 24) as path:
        yield path


def child(*args, **kw):
    """sg_child.py in the SGLang environment's interpreter, importing this kvact."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kvact.__file__)))
    return subprocess.Popen([sys.executable, os.path.join(HERE, "sg_child.py")] +
                            [str(a) for a in args], cwd=HERE, env=env, **kw)


def fresh_client_memcheck(sock, timeout=10.0):
    """A new client's view of the kvactd's locks, once they are all given back (or the
    report at the deadline)."""
    with kvact.Runtime({"client.socket": sock, "runtime.workers": 2}) as rt:
        deadline = time.monotonic() + timeout
        while True:
            report = rt.storage.memcheck_report()
            if report == "" or time.monotonic() > deadline:
                return report
            time.sleep(0.1)


def test_processes_read_each_others_pages_through_kvactd(sock, backend):
    procs = [child("exchange", sock, 80, 81), child("exchange", sock, 81, 80)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    host = zero(mha_host("page_first"))
    b = backend(host, extra={"kvact.config": {"client.socket": sock, "runtime.workers": 2}})
    for i, seed in enumerate((80, 81)):
        dst = range(4 * i, 4 * i + 4)
        assert b.batch_get_v1(page_keys(4, seed=seed), indices(dst)) == [True] * 4
        want = fill(mha_host("page_first"), seed=seed)
        for p, d in enumerate(dst):
            assert torch.equal(page(host, d), page(want, p))
    assert fresh_client_memcheck(sock) == ""


def test_a_killed_process_leaves_no_lock(sock):
    looping = child("loop", sock, 82, stdout=subprocess.PIPE, text=True)
    holding = child("hold", sock, 83, stdout=subprocess.PIPE, text=True)
    try:
        assert looping.stdout.readline().strip() == "looping"
        assert holding.stdout.readline().strip() == "held"
        assert fresh_client_memcheck(sock, timeout=0) != ""  # the held pages are locked
    finally:
        for p in (looping, holding):
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
    assert fresh_client_memcheck(sock) == ""
    host = mha_host("page_first")
    b = sglang_cpu.make_backend(host, extra={"kvact.config": {"client.socket": sock,
                                                              "runtime.workers": 2}})
    try:
        assert b.batch_exists(page_keys(4, seed=83)) == 0  # reserved, never finished
    finally:
        b.close()


def test_no_kvactd_means_misses_not_exceptions_and_a_daemon_later_serves():
    host = mha_host("page_first")
    fill(host, 5)
    # under /tmp: a socket path has at most 107 bytes, and bazel's test tmpdir is longer
    folder = tempfile.mkdtemp(prefix="kvsg-", dir="/tmp")
    path = os.path.join(folder, "kvactd.sock")
    b = sglang_cpu.make_backend(host, kvact={"client.socket": path, "client.timeout_ms": 200})
    try:
        keys = page_keys(3, seed=41)
        assert b.batch_set_v1(keys, indices([0, 1, 2])) == [False] * 3
        assert b.batch_exists(keys) == 0
        before = page(host, 4).clone()
        assert b.batch_get_v1(keys, indices([4, 5, 6])) == [False] * 3
        assert torch.equal(page(host, 4), before)  # a miss writes nothing
        assert b.batch_get([keys[0]], [host.get_dummy_flat_data_page()]) == [None]
        assert b.batch_set([keys[0]], [host.get_data_page(0)]) is False
        daemon = subprocess.Popen([os.environ["KVACT_KVACTD"], "--quiet", "-o",
                                   "server.socket=" + path, "-o", "l1.size_bytes=16777216",
                                   "-o", "l2=[]"])
        try:
            deadline = time.monotonic() + 20
            while b.batch_set_v1(keys, indices([0, 1, 2])) != [True] * 3:
                assert time.monotonic() < deadline, "the backend never reached the kvactd"
                time.sleep(0.05)
            assert b.batch_get_v1(keys, indices([4, 5, 6])) == [True] * 3
            for src, dst in ((0, 4), (1, 5), (2, 6)):
                assert torch.equal(page(host, dst), page(host, src))
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=30) == 0
    finally:
        b.close()
        shutil.rmtree(folder, ignore_errors=True)
