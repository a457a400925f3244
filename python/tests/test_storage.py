"""test_storage.py — docs/api.md's Python example end to end, views, errors and bad arguments."""
import numpy as np
import pytest
import torch

import kvact
from conftest import clean

LAYOUT = kvact.MemoryLayoutDesc(shapes=[(2, 4, 64)], dtypes=["bfloat16"])


def keys_of(n, salt=""):
    return kvact.chunk_keys("llama3-8b", list(range(n * 16)), chunk_tokens=16, salt=salt)


def write(sm, keys, fill):
    reserved = sm.reserve_write(keys, LAYOUT, mode="new")
    for i, obj in enumerate(reserved.values()):
        obj.tensor.copy_(fill(i))
    assert sm.finish_write(list(reserved)) == [0] * len(reserved)
    return reserved


def src(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(2, 4, 64, generator=g).to(torch.bfloat16)


def test_usage_example_round_trips_bytes_through_torch_and_numpy(sm):
    keys = keys_of(4)
    assert len(write(sm, keys, src)) == 4
    handle = sm.submit_prefetch_task(keys, LAYOUT)
    hits = handle.wait(timeout=5.0)
    assert hits == 4 and sm.query_prefetch_status(handle) == 4
    with sm.read_prefetched_results(keys[:hits], LAYOUT) as objs:
        for i, obj in enumerate(objs):
            assert obj.key == keys[i]
            assert torch.equal(obj.tensor, src(i))
            assert obj.array.tobytes() == src(i).view(torch.int16).numpy().tobytes()
            assert bytes(obj.buffer[:LAYOUT.nbytes]) == obj.array.tobytes()
    assert sm.finish_read_prefetched(keys[:hits]) == 4
    sm.flush(timeout=5.0)
    assert clean(sm)


# Three layouts written side by side: LAYOUT, a [3, 4] float16, and a K/V pair of float32
# with a scale tensor.
F16 = kvact.MemoryLayoutDesc(shapes=[(3, 4)], dtypes=["float16"])
KV2 = kvact.MemoryLayoutDesc(shapes=[(2, 8), (4,)], dtypes=["float32", "float32"])


def fill_typed(obj, i):
    """Writes object i through views of its own layout: tensor t holds i * 100 + t + its
    element index."""
    for t, a in enumerate(obj.arrays):
        if a.dtype == np.uint16:  # bfloat16 bits: through torch
            obj.tensors[t].copy_(torch.arange(a.size).reshape(a.shape) + i * 100 + t)
        else:
            a[...] = np.arange(a.size).reshape(a.shape) + i * 100 + t


def write_mixed(sm, keys, layouts):
    addresses = {}
    for key, lay in zip(keys, layouts):
        obj = sm.reserve_write([key], lay)[key]
        fill_typed(obj, keys.index(key))
        addresses[key] = obj.address
        assert sm.finish_write([key]) == [0]
    return addresses


def assert_typed_as(obj, lay, i):
    """obj is viewed as lay, with the values fill_typed(i) wrote."""
    assert obj.layout.shapes == lay.shapes and obj.layout.dtypes == lay.dtypes
    for t, (a, x) in enumerate(zip(obj.arrays, obj.tensors)):
        assert a.shape == lay.shapes[t] and tuple(x.shape) == lay.shapes[t]
        assert str(x.dtype) == "torch." + lay.dtypes[t]
        want = torch.arange(a.size).reshape(a.shape) + i * 100 + t
        assert torch.equal(x.float(), want.to(x.dtype).float())


def test_a_read_without_a_layout_is_typed_by_the_one_written_with(sm):
    """LMCache's read_prefetched_results: each object has the shape and dtype it was
    written with; several layouts in one read; still views of the pool."""
    keys = keys_of(4, salt="typed")
    lays = [F16, LAYOUT, KV2, F16]
    addresses = write_mixed(sm, keys, lays)
    assert sm.submit_prefetch_task(keys).wait(5.0) == 4
    with sm.read_prefetched_results(keys) as objs:
        assert objs[0].array[0, 0] == 0 and objs[0].array[2, 3] == 11
        assert objs[0].array.dtype == np.float16 and objs[0].tensor.shape == (3, 4)
        for i, (obj, lay) in enumerate(zip(objs, lays)):
            assert_typed_as(obj, lay, i)
            assert obj.address == addresses[keys[i]]  # the pool's block, not a copy
            assert obj.arrays[0].ctypes.data == obj.address
        assert objs[0].layout is objs[3].layout  # one description per layout
        objs[0].array[0, 0] = 42  # writes the pool
        assert np.frombuffer(objs[0].buffer[:2], np.float16)[0] == 42
        with pytest.raises(ValueError):  # two tensors: .arrays, as for a written object
            objs[2].array
    assert sm.finish_read_prefetched(keys) == 4
    assert clean(sm)


def test_a_read_with_a_layout_views_every_object_through_it(sm):
    keys = keys_of(2, salt="flat")
    write_mixed(sm, keys, [F16, F16])
    flat = kvact.MemoryLayoutDesc(shapes=[(F16.nbytes,)], dtypes=["uint8"])
    assert sm.submit_prefetch_task(keys).wait(5.0) == 2
    with sm.read_prefetched_results(keys, flat) as objs:
        assert [o.layout for o in objs] == [flat, flat]
        assert objs[1].array.shape == (24,) and objs[1].array.dtype == np.uint8
    with sm.read_prefetched_results(keys) as objs:  # the same objects, typed
        assert objs[1].array.shape == (3, 4)
    assert sm.finish_read_prefetched(keys) == 2
    with sm.read_prefetched_results(keys) as objs:  # not prefetched any more
        assert objs is None
    assert clean(sm)


def test_objects_loaded_from_a_tier_are_typed_by_the_prefetchs_layout(sm):
    keys = keys_of(2, salt="typed-l2")
    write_mixed(sm, keys, [F16, F16])
    sm.flush(timeout=5.0)
    assert sm.clear() == 2
    assert sm.submit_prefetch_task(keys, F16).wait(5.0) == 2
    with sm.read_prefetched_results(keys) as objs:
        for i, obj in enumerate(objs):
            assert_typed_as(obj, F16, i)
    sm.finish_read_prefetched(keys)
    assert clean(sm)


def test_views_are_the_pool_not_copies(sm):
    key = keys_of(1)[0]
    obj = sm.reserve_write([key], LAYOUT)[key]
    obj.array[...] = 7
    assert obj.tensor.view(torch.int16).unique().tolist() == [7]
    obj.buffer[0] = 9
    assert obj.array.reshape(-1)[0] == 9
    sm.finish_write([key])


def test_released_objects_refuse_views(sm):
    key = keys_of(1)[0]
    obj = sm.reserve_write([key], LAYOUT)[key]
    sm.finish_write([key])
    with pytest.raises(ValueError):
        obj.buffer
    h = sm.submit_prefetch_task([key], LAYOUT)
    assert h.wait(5.0) == 1
    with sm.read_prefetched_results([key], LAYOUT) as objs:
        pass
    with pytest.raises(ValueError):
        objs[0].array
    sm.finish_read_prefetched([key])


def test_l1_miss_is_loaded_from_the_mock_tier_byte_exact(sm):
    keys = keys_of(3, salt="l2")
    write(sm, keys, src)
    sm.flush(timeout=5.0)
    assert sm.clear() == 3 and sm.stats()["l1_objects"] == 0
    h = sm.submit_prefetch_task(keys, LAYOUT)
    assert h.wait(5.0) == 3
    with sm.read_prefetched_results(keys, LAYOUT) as objs:
        assert all(torch.equal(o.tensor, src(i)) for i, o in enumerate(objs))
    sm.finish_read_prefetched(keys)
    assert sm.stats()["l2_loaded_keys"] == 3


def test_per_key_results_are_returned_not_raised(sm):
    keys = keys_of(2)
    write(sm, keys, src)
    assert sm.reserve_write(keys, LAYOUT, mode="new") == {}  # both exist: not writable
    sm.flush(timeout=10.0)  # the store-behind's read locks would make the delete KVA_KEY_LOCKED
    assert sm.delete(keys[:1]) == [0]
    assert sm.delete(keys[:1]) == [1]  # KVA_KEY_NOT_EXIST
    with sm.read_prefetched_results(keys[:1], LAYOUT) as objs:
        assert objs is None
    assert sm.touch(keys[1:]) == 1


def test_object_keys_hash_and_compare_by_value():
    a = kvact.ObjectKey("m", 0, 0, b"\x01\x02")
    assert a == kvact.ObjectKey("m", 0, 0, b"\x01\x02") and len({a, a}) == 1
    assert a != kvact.ObjectKey("m", 1, 0, b"\x01\x02")
    assert kvact.chunk_keys("m", list(range(64)), 16) == kvact.chunk_keys("m", list(range(64)), 16)


def test_errors_raise_kvact_error_with_status():
    with pytest.raises(kvact.KvactError) as e:
        kvact.Config({"l1.size_bytez": 1})
    assert e.value.status == -2 and "size_bytez" in str(e.value)
    with pytest.raises(kvact.KvactError) as e:
        kvact.Config.from_file("/nonexistent/kvact.conf")
    assert e.value.status < 0


def test_a_result_read_twice_is_kept_and_its_fd_is_gone(sm):
    keys = keys_of(1)
    write(sm, keys, src)
    h = sm.submit_prefetch_task(keys)
    assert h.fileno() >= 0
    assert h.wait() == 1 and h.wait() == 1
    with pytest.raises(ValueError):
        h.fileno()
    sm.finish_read_prefetched(keys)


@pytest.mark.parametrize("shapes,dtypes", [
    ([(2, 2)], ["bfloat17"]),             # unknown dtype name
    ([(2, 2)], ["uint8", "uint8"]),       # as many dtypes as shapes
    ([(1 << 62, 1 << 62)], ["float32"]),  # size overflows
    ([(1,)] * 5, ["uint8"] * 5),          # at most 4 tensors
    ([(1,) * 7], ["uint8"]),              # at most 6 dimensions
])
def test_bad_layouts_raise_value_error(shapes, dtypes):
    with pytest.raises(ValueError):
        kvact.MemoryLayoutDesc(shapes=shapes, dtypes=dtypes)


def test_abort_write_gives_the_reservation_back(sm):
    keys = keys_of(3)
    objs = sm.reserve_write(keys, LAYOUT)
    assert len(objs) == 3
    assert sm.abort_write(keys + keys_of(4)[3:]) == [0, 0, 0, 1]  # the 4th: KVA_KEY_NOT_EXIST
    assert sm.stats()["l1_write_locked"] == 0 and sm.stats()["l1_objects"] == 0
    with pytest.raises(ValueError):  # the views are gone with the reservation
        objs[keys[0]].array
    assert sm.submit_prefetch_task(keys, LAYOUT).wait() == 0  # never readable
    assert len(sm.reserve_write(keys, LAYOUT)) == 3  # reservable as new again
    sm.finish_write(keys)
    assert sm.abort_write(keys[:1]) == [4]  # ready, not write-locked: KVA_KEY_WRONG_STATE
    sm.flush()
    assert sm.stats()["l2_stored_keys"] == 3  # the finished ones; the aborted never reached L2
    assert clean(sm)


def test_warm_prefetch_leaves_nothing_to_release(sm):
    keys = keys_of(4)
    for k, obj in sm.reserve_write(keys, LAYOUT).items():
        obj.array[:] = 1
    sm.finish_write(keys)
    assert sm.submit_prefetch_task(keys, LAYOUT, extra_readers=1, mode="warm").wait() == 4
    assert sm.stats()["l1_read_locked"] == 0
    h = sm.submit_prefetch_task(keys, LAYOUT, mode="warm")
    h.close()  # closed before its result was read: nothing is given back twice
    sm.flush()
    assert sm.stats()["l1_objects"] == 4
    with pytest.raises(kvact.KvactError):  # not built yet (issue 36)
        sm.submit_prefetch_task(keys, LAYOUT, trim="sparse")
    with pytest.raises(ValueError):
        sm.submit_prefetch_task(keys, LAYOUT, mode="cold")
    assert clean(sm)


def test_delete_gives_per_key_statuses_and_lmcache_counts(sm):
    keys = keys_of(4)
    sm.reserve_write(keys[:3], LAYOUT)
    sm.finish_write(keys[:2])  # key 2 stays write-locked
    sm.flush(timeout=10.0)  # the store-behind's read locks on keys 0 and 1 are given back
    got = sm.delete(keys)
    assert got == [0, 0, 5, 1]  # removed, removed, locked (skipped), no such key
    assert got.counts == (2, 1) and got.deleted == 2 and got.skipped == 1
    assert sm.delete(keys[2:3], force=True).counts == (1, 0)
    assert sm.finish_write(keys[2:3]) == [1]  # forced away under its writer
    assert sm.delete([]).counts == (0, 0)
    assert clean(sm)


def test_empty_key_lists_are_nothing_to_do(sm):
    """As LMCache takes them: an out-of-memory reserve returns {}, and its callers pass
    what it reserved on to finish_write whatever it was."""
    assert sm.reserve_write([], LAYOUT) == {}
    assert sm.finish_write([]) == []
    assert sm.delete([]) == [] and sm.touch([]) == 0
    h = sm.submit_prefetch_task([], LAYOUT)
    assert h.query() == 0
    with sm.read_prefetched_results([], LAYOUT) as objs:
        assert objs == []
    assert sm.finish_read_prefetched([]) == 0
    with sm.submit_prefetch_task([]) as h2:
        pass
    assert h2.wait() == 0
    with pytest.raises(ValueError):  # still checked when there are no keys
        sm.reserve_write([], LAYOUT, mode="sometimes")
    assert sm.memcheck()


def test_bad_arguments_raise_and_change_nothing(sm):
    with pytest.raises(ValueError):
        sm.reserve_write(keys_of(1), LAYOUT, mode="sometimes")
    with pytest.raises(TypeError):
        sm.finish_write(["not a key"])
    with pytest.raises(ValueError):
        kvact.ObjectKey("a@b", 0, 0, b"\x01")
    with pytest.raises(ValueError):
        kvact.ObjectKey("m", 0, 0, b"")
    with pytest.raises(TypeError):
        sm.reserve_write(keys_of(1), None)
    with pytest.raises(TypeError):
        sm.submit_prefetch_task(keys_of(1), layout=[(2, 2)])
    for bad in (-1, 128, 1.5):
        with pytest.raises(ValueError):
            sm.submit_prefetch_task(keys_of(1), LAYOUT, extra_readers=bad)
        with pytest.raises(ValueError):
            sm.finish_read_prefetched(keys_of(1), extra_readers=bad)
    with pytest.raises(TypeError):
        sm.lookup("abc")
    with pytest.raises(kvact.KvactError):
        sm.l2_contains("nosuchtier", keys_of(1)[0])
    assert sm.stats()["reserved"] == 0 and clean(sm)


def test_multi_tensor_layout_views_each_tensor(sm):
    lay = kvact.MemoryLayoutDesc(shapes=[(3,), (5, 2)], dtypes=["uint8", "float32"])
    key = keys_of(1, salt="multi")[0]
    obj = sm.reserve_write([key], lay)[key]
    a, b = obj.arrays
    a[:] = [1, 2, 3]
    b[:] = np.arange(10, dtype=np.float32).reshape(5, 2)
    assert obj.tensors[1].sum().item() == 45.0 and bytes(obj.buffer[:3]) == b"\x01\x02\x03"
    assert bytes(obj.buffer[64:68]) == np.float32(0).tobytes()
    with pytest.raises(ValueError):
        obj.tensor
    sm.finish_write([key])


def test_memcheck_tells_the_store_behind_from_the_callers():
    """A slow tier: the store of a finished write holds its read lock until the tier
    answers. memcheck says whose it is, callers_only leaves it out, wait_stores waits."""
    from conftest import small_config
    cfg = small_config(l2=[{"type": "mock", "capacity_bytes": 1 << 26, "latency_us": 500000}])
    with kvact.Runtime(cfg) as rt:
        sm = rt.storage
        keys = keys_of(1, salt="memcheck")
        write(sm, keys, src)
        report, counts = sm.memcheck_details()
        while counts["store_read_locked"] == 0 and sm.stats()["l2_store_tasks"] == 0:
            report, counts = sm.memcheck_details()  # until its store has locked it (or is done)
        assert sm.memcheck(callers_only=True)
        if counts["store_read_locked"]:  # seen while the store held it
            assert "store-behind" in report, report
            assert counts["caller_read_locked"] == counts["caller_write_locked"] == 0
        handle = sm.submit_prefetch_task(keys, LAYOUT)
        assert handle.wait(timeout=5.0) == 1
        report, counts = sm.memcheck_details(callers_only=True)
        assert report and counts["caller_read_locked"] == 1  # a caller's lock always counts
        assert sm.finish_read_prefetched(keys) == 1
        assert sm.memcheck(wait_stores=None)
        assert sm.memcheck_details()[1] == dict.fromkeys(counts, 0)
