"""test_client_mode.py — the package as a client of kvactd: the usage example across two
processes, PagedKVCache store in one process and load in another, and a killed client's
locks given back."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import kvact
from conftest import clean, client, kvactd

LAYOUT = kvact.MemoryLayoutDesc(shapes=[(2, 4, 64)], dtypes=["bfloat16"])


@pytest.fixture
def daemon():
    """A kvactd on a fresh socket (16 MiB L1, one mock tier): yields the socket's path."""
    with kvactd() as (sock, _):
        yield sock


def run_python(code, **kw):
    """Runs code in another Python process with this one's environment."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ),
                          timeout=60, **kw)


def src(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(2, 4, 64, generator=g).to(torch.bfloat16)


WRITER = """
    import sys, time, torch, kvact
    sys.path.insert(0, %r)
    from test_client_mode import LAYOUT, client, src
    rt = client(%r)
    sm = rt.storage
    keys = kvact.chunk_keys("llama3-8b", list(range(64)), chunk_tokens=16)
    reserved = sm.reserve_write(keys, LAYOUT, mode="new")
    for i, key in enumerate(keys):
        reserved[key].tensor.copy_(src(i))
    assert sm.finish_write(keys) == [0] * 4
    rt.close()
"""


def test_one_process_writes_and_another_reads_the_same_bytes(daemon):
    run_python(WRITER % (os.path.dirname(__file__), daemon), check=True)
    with client(daemon) as rt:
        sm = rt.storage
        keys = kvact.chunk_keys("llama3-8b", list(range(64)), chunk_tokens=16)
        assert sm.lookup(keys).tiers["L1"] == 4
        with sm.submit_prefetch_task(keys, LAYOUT) as h:
            hits = h.wait(timeout=10.0)
        assert hits == 4
        with sm.read_prefetched_results(keys, LAYOUT) as objs:
            assert all(torch.equal(o.tensor, src(i)) for i, o in enumerate(objs))
        assert sm.finish_read_prefetched(keys) == 4
        assert clean(sm)


TYPED_WRITER = """
    import sys, kvact
    sys.path.insert(0, %r)
    from test_client_mode import client
    from test_storage import F16, KV2, LAYOUT, write_mixed
    rt = client(%r)
    keys = kvact.chunk_keys("typed", list(range(48)), chunk_tokens=16)
    write_mixed(rt.storage, keys, [F16, LAYOUT, KV2])
    rt.close()
"""


def test_objects_another_process_wrote_read_back_typed_by_their_layout(daemon):
    """Through kvactd as embedded: a read without a layout is typed by each object's own."""
    from test_storage import F16, KV2, assert_typed_as
    run_python(TYPED_WRITER % (os.path.dirname(__file__), daemon), check=True)
    with client(daemon) as rt:
        sm = rt.storage
        keys = kvact.chunk_keys("typed", list(range(48)), chunk_tokens=16)
        assert sm.submit_prefetch_task(keys).wait(10.0) == 3
        with sm.read_prefetched_results(keys) as objs:
            assert objs[0].array[0, 0] == 0 and objs[0].array[1, 2] == 6
            for i, (obj, lay) in enumerate(zip(objs, [F16, LAYOUT, KV2])):
                assert_typed_as(obj, lay, i)
        with sm.read_prefetched_results(keys[:1] + keys_other()) as objs:
            assert objs is None  # a key not prefetched: the read fails, as in-process
        assert sm.finish_read_prefetched(keys) == 2  # the failed read released key 0's lock
        assert clean(sm)


def keys_other():
    return kvact.chunk_keys("typed-other", list(range(16)), chunk_tokens=16)


STORER = """
    import sys, torch, kvact
    sys.path.insert(0, %r)
    from test_client_mode import client
    from test_paged import CT, keys_for, paged, slots_of
    rt = client(%r)
    with kvact.PagedKVCache(rt.storage, paged("flash", torch.bfloat16, 1), chunk_tokens=CT) as kv:
        assert kv.store(keys_for(2, salt="mp"), slots_of(2 * CT, 10)).wait(10.0) == 0
    rt.close()
"""


def test_a_paged_cache_stored_by_one_process_loads_bit_exact_in_another(daemon):
    from test_paged import CT, keys_for, paged, slots_of, token_kv
    run_python(STORER % (os.path.dirname(__file__), daemon), check=True)
    src, dst = paged("flash", torch.bfloat16, 1), paged("flash", torch.bfloat16, 2)
    a, b = slots_of(2 * CT, 10), slots_of(2 * CT, 20)
    keys = keys_for(2, salt="mp")
    with client(daemon) as rt, kvact.PagedKVCache(rt.storage, dst, chunk_tokens=CT) as kv:
        assert rt.storage.submit_prefetch_task(keys, kv.chunk_layout()).wait(10.0) == 2
        assert kv.load(keys, b).wait(10.0) == 0
        for t in range(2 * CT):
            for got, want in zip(token_kv(dst, "flash", int(b[t])),
                                 token_kv(src, "flash", int(a[t]))):
                assert torch.equal(got, want)
        assert clean(rt.storage)


HOLDER = """
    import os, sys, kvact
    sys.path.insert(0, %r)
    from test_client_mode import LAYOUT, client
    rt = client(%r)
    sm = rt.storage
    keys = kvact.chunk_keys("holder", list(range(64)), chunk_tokens=16)
    sm.reserve_write(keys[:2], LAYOUT)               # reservations
    sm.finish_write(keys[:1])
    assert sm.submit_prefetch_task(keys[:1], LAYOUT).wait(10.0) == 1  # a read lock
    assert sm.lookup(keys[:1], pin=True).total == 1  # a pin
    print("held", flush=True)
    sys.stdin.read()                                 # until killed
"""


def test_a_killed_clients_locks_are_given_back(daemon):
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER % (
        os.path.dirname(__file__), daemon))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    assert p.stdout.readline().strip() == "held"
    with client(daemon) as rt:
        sm = rt.storage
        assert not sm.memcheck()
        p.kill()
        p.wait()
        deadline = time.monotonic() + 20
        while not sm.memcheck():
            assert time.monotonic() < deadline, sm.memcheck_report()
            time.sleep(0.05)
        keys = kvact.chunk_keys("holder", list(range(64)), chunk_tokens=16)
        assert sm.lookup(keys[1:2]).total == 0  # the reservation was never readable
        assert sm.lookup(keys[:1]).tiers["L1"] == 1  # the finished object stays
