"""test_prefetch_handles.py — a PrefetchHandle under interrupts and garbage collection: a wait
interrupted while the load runs, nothing lost when it is, and a handle dropped before its
result is read giving its hits' read locks back (with one ResourceWarning).

Where a load must still be running, it runs against a kvactd stopped with SIGSTOP: its
reply cannot come before the test continues it, whatever the timing."""
import contextlib
import gc
import os
import signal
import threading
import time
import warnings

import pytest

import kvact
from conftest import clean, kvactd

LAYOUT = kvact.MemoryLayoutDesc(shapes=[(64, 64)], dtypes=["float32"])


def keys_of(n, salt):
    return kvact.chunk_keys("handles", list(range(n * 4)), 4, salt=salt)


def write(sm, keys):
    got = sm.reserve_write(keys, LAYOUT)
    for i, key in enumerate(keys):
        got[key].tensor.fill_(i)
    assert sm.finish_write(keys) == [0] * len(keys)


@contextlib.contextmanager
def sigint_soon():
    """Sends this process one SIGINT from another thread a moment after the block starts
    (the kernel may hand it to any thread; Python runs the handler in the main one). The
    handler raises KeyboardInterrupt while the block runs and ignores a late signal."""
    armed = [True]

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        armed[0] = False
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, old)


# ---- a kvactd to stop ---------------------------------------------------------------------


@pytest.fixture
def daemon():
    """A kvactd: (its socket, its Popen), so that a test can stop and continue it."""
    with kvactd() as sock_proc:
        yield sock_proc


@pytest.fixture
def client(daemon):
    """(a StorageManager connected to the daemon, the daemon's Popen). Its calls wait for a
    stopped daemon (client.timeout_ms) far longer than a test runs."""
    sock, proc = daemon
    with kvact.Runtime({"client.socket": sock, "runtime.workers": 2,
                        "client.timeout_ms": 600000}) as rt:
        for _ in range(1000):
            try:
                rt.storage.stats()
                break
            except kvact.KvactError:  # not connected yet
                time.sleep(0.02)
        yield rt.storage, proc


def all_stopped(pid):
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, task)) as f:
            if f.read().rsplit(")", 1)[1].split()[0] != "T":
                return False
    return True


@contextlib.contextmanager
def stopped(proc):
    """kvactd stopped (every thread of it) for the block: no reply comes meanwhile. A
    guard continues it after 30 s, so that a wait that cannot be interrupted fails the
    test instead of hanging it."""
    done = threading.Event()

    def guard():
        if not done.wait(30):
            proc.send_signal(signal.SIGCONT)

    proc.send_signal(signal.SIGSTOP)
    while not all_stopped(proc.pid):
        time.sleep(0.001)
    g = threading.Thread(target=guard)
    g.start()
    try:
        yield
    finally:
        done.set()
        proc.send_signal(signal.SIGCONT)
        g.join()


# ---- interrupts -------------------------------------------------------------------------


def test_a_wait_is_interrupted_while_the_load_cannot_end(client):
    sm, proc = client
    keys = keys_of(1, "stopped")
    write(sm, keys)
    with stopped(proc):
        h = sm.submit_prefetch_task(keys, LAYOUT)
        with sigint_soon(), pytest.raises(KeyboardInterrupt):
            h.wait()
        assert h.query() is None  # the interrupt came while no reply could
    assert h.wait() == 1          # the next wait returns the hits
    assert h.query() == 1
    sm.finish_read_prefetched(keys)
    assert clean(sm), sm.memcheck_report()


def test_an_interrupted_with_block_keeps_the_interrupt_and_gives_the_hits_back(client):
    sm, proc = client
    keys = keys_of(1, "with")
    write(sm, keys)
    with stopped(proc):
        with sigint_soon(), pytest.raises(KeyboardInterrupt):
            with sm.submit_prefetch_task(keys, LAYOUT) as h:
                h.wait()
    with pytest.raises(ValueError):  # closed by the block's end
        h.wait()
    assert clean(sm), sm.memcheck_report()  # memcheck waits for the load to end


# ---- finalizers ---------------------------------------------------------------------------


def dropped(make_handle):
    """Makes a handle, drops it and collects it: the ResourceWarnings that gave."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        h = make_handle()
        del h
        gc.collect()
    return [w for w in got if issubclass(w.category, ResourceWarning)]


def test_a_dropped_handle_gives_its_hits_back_and_warns_once(sm):
    keys = keys_of(3, "dropped")
    write(sm, keys)
    got = dropped(lambda: sm.submit_prefetch_task(keys, LAYOUT))
    assert len(got) == 1 and "PrefetchHandle" in str(got[0].message)
    assert clean(sm), sm.memcheck_report()


def test_a_handle_dropped_while_loading_gives_its_hits_back_when_the_load_ends(client):
    sm, proc = client
    keys = keys_of(2, "loading")
    write(sm, keys)
    with stopped(proc):
        assert len(dropped(lambda: sm.submit_prefetch_task(keys, LAYOUT))) == 1
    assert clean(sm), sm.memcheck_report()  # memcheck waits for the load to end


def test_a_handle_dropped_after_an_interrupted_wait_gives_its_hits_back(client):
    sm, proc = client
    keys = keys_of(1, "interrupted")
    write(sm, keys)

    def interrupted():
        h = sm.submit_prefetch_task(keys, LAYOUT)
        with sigint_soon(), pytest.raises(KeyboardInterrupt):
            h.wait()
        return h

    with stopped(proc):
        assert len(dropped(interrupted)) == 1
    assert clean(sm), sm.memcheck_report()


def test_a_dropped_handle_whose_result_was_read_leaves_the_hits_to_the_caller(sm):
    keys = keys_of(2, "read")
    write(sm, keys)

    def waited():
        h = sm.submit_prefetch_task(keys, LAYOUT)
        assert h.wait() == 2
        return h

    assert dropped(waited) == []
    assert not sm.memcheck()  # the caller holds the read locks it was told about
    assert sm.finish_read_prefetched(keys) == 2
    assert clean(sm), sm.memcheck_report()


def test_a_closed_handle_gives_its_unread_hits_back_and_refuses_waits(sm):
    keys = keys_of(2, "closed")
    write(sm, keys)

    def closed():
        h = sm.submit_prefetch_task(keys, LAYOUT)
        h.close()
        h.close()  # again: nothing more
        with pytest.raises(ValueError):
            h.wait()
        return h

    assert dropped(closed) == []
    assert clean(sm), sm.memcheck_report()
