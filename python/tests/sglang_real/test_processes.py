"""test_processes.py — SGLang worker processes sharing one kvactd (sg_child.py each).

- two processes store disjoint pages and read each other's, bit-exact, and a third
  client (this process) reads both;
- a process killed (SIGKILL) while it stores and reads, or right after kvact reserved
  its pages (before finish_write), leaves no lock in the kvactd, and pages it never
  finished are never found.
"""
import os
import signal
import subprocess
import sys
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
