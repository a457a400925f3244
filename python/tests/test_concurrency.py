"""test_concurrency.py — awaiting prefetches from asyncio, the GIL released while a call waits,
and many Python threads calling one StorageManager at once."""
import asyncio
import threading
import time

import torch

import kvact
from conftest import clean, small_config

LAYOUT = kvact.MemoryLayoutDesc(shapes=[(64, 64)], dtypes=["float32"])
LATENCY_S = 0.4


def keys_of(n, salt):
    return kvact.chunk_keys("conc", list(range(n * 4)), 4, salt=salt)


def write(sm, keys, base=0.0):
    got = sm.reserve_write(keys, LAYOUT)
    for i, key in enumerate(keys):
        got[key].tensor.fill_(base + i)
    assert sm.finish_write(keys) == [0] * len(keys)


def slow_runtime():
    """A mock tier answering every operation after LATENCY_S."""
    return kvact.Runtime(small_config(l2=[{"type": "mock", "latency_us": int(LATENCY_S * 1e6)}]))


def only_in_l2(sm, keys):
    write(sm, keys)
    sm.flush(timeout=10.0)
    assert sm.clear() == len(keys)


def slow_prefetch(sm, salt):
    """A prefetch of one key that only the slow tier holds: (keys, its handle)."""
    keys = keys_of(1, salt)
    only_in_l2(sm, keys)
    return keys, sm.submit_prefetch_task(keys, LAYOUT)


def test_prefetches_are_awaited_together_from_asyncio():
    with slow_runtime() as rt:
        sm = rt.storage
        groups = [keys_of(2, "aio%d" % g) for g in range(3)]
        for keys in groups:
            only_in_l2(sm, keys)

        async def main():
            handles = [sm.submit_prefetch_task(keys, LAYOUT) for keys in groups]
            pending = [h.query() for h in handles]
            return pending, await asyncio.gather(*handles)

        pending, hits = asyncio.run(main())
        assert pending == [None, None, None]  # the tier had not answered when submitted
        assert hits == [2, 2, 2]
        for keys in groups:
            sm.finish_read_prefetched(keys)
        assert clean(sm)


def test_a_thread_keeps_running_python_while_another_waits_in_kvact():
    with slow_runtime() as rt:
        sm = rt.storage
        keys, h = slow_prefetch(sm, "gil")
        span, stamps = {}, []

        def waiter():
            span["start"] = time.monotonic()
            span["hits"] = h.wait(timeout=30.0)
            span["end"] = time.monotonic()

        t = threading.Thread(target=waiter)
        t.start()
        while t.is_alive():  # pure Python
            stamps.append(time.monotonic())
            for _ in range(1000):
                pass
        t.join()
        assert span["hits"] == 1
        # The tier's latency keeps the waiter inside kva_wait_prefetch for at least
        # LATENCY_S from its start (it enters within a switch interval). Had it held the
        # GIL there, this thread could not have run in the middle of that span.
        assert span["end"] - span["start"] >= LATENCY_S
        lo, hi = span["start"] + LATENCY_S / 4, span["start"] + LATENCY_S * 3 / 4
        assert [s for s in stamps if lo < s < hi]
        sm.finish_read_prefetched(keys)
        assert clean(sm)


def test_many_threads_write_and_read_their_own_keys_at_once(sm):
    errors = []

    def engine(n):
        try:
            for rnd in range(30):
                keys = keys_of(3, "t%d-%d" % (n, rnd))
                write(sm, keys, base=n * 1000 + rnd)
                assert sm.submit_prefetch_task(keys, LAYOUT).wait(10.0) == 3
                with sm.read_prefetched_results(keys, LAYOUT) as objs:
                    for i, obj in enumerate(objs):
                        assert torch.equal(obj.tensor, torch.full((64, 64), n * 1000 + rnd + i))
                assert sm.finish_read_prefetched(keys) == 3
                # forced: the store-behind to L2 may still be copying them
                assert sm.delete(keys, force=True) == [0, 0, 0]
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=engine, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert clean(sm)


def test_one_handle_shared_by_threads_gives_each_the_result():
    with slow_runtime() as rt:
        sm = rt.storage
        keys, h = slow_prefetch(sm, "shared")
        results = []
        threads = [threading.Thread(target=lambda: results.append(h.wait(30.0)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [1, 1, 1, 1]
        sm.finish_read_prefetched(keys)
        assert clean(sm)
