"""test_keys.py — ObjectKey's packed kva_key bytes and cached hash stay true to its fields."""
import ctypes
import pickle
import subprocess
import random
import sys

import pytest

import kvact
from kvact._lib import Key
from kvact.keys import key_array


def filled(key):
    """The kva_key of key, filled field by field."""
    k = Key()
    k.model, k.kv_rank, k.group = key.model_name.encode(), key.kv_rank, key.group
    k.hash_len = len(key.chunk_hash)
    ctypes.memmove(k.hash, key.chunk_hash, len(key.chunk_hash))
    return bytes(k)


def test_key_array_holds_each_keys_fields():
    keys = kvact.chunk_keys("m", list(range(1024)), 256, kv_rank=3) + [
        kvact.ObjectKey("other", 1 << 31, 7, b"\xff" * 32)]
    arr, size = key_array(keys), ctypes.sizeof(Key)
    items = [arr[i * size:(i + 1) * size] for i in range(len(keys))]
    assert len(arr) == len(keys) * size and items == [filled(k) for k in keys]
    assert [kvact.ObjectKey._from_c(Key.from_buffer_copy(b)) for b in items] == keys


def test_key_array_refuses_what_is_not_a_key():
    with pytest.raises(TypeError):
        key_array([kvact.ObjectKey("m", 0, 0, b"\x01"), ("m", 0, 0, b"\x01")])
    with pytest.raises(ValueError):
        key_array([])


def test_a_bytearray_hash_is_frozen_into_bytes():
    raw = bytearray(b"\x01\x02")
    key = kvact.ObjectKey("m", 0, 0, raw)
    raw[0] = 9
    assert key.chunk_hash == b"\x01\x02" and key == kvact.ObjectKey("m", 0, 0, b"\x01\x02")
    assert hash(key) == hash(kvact.ObjectKey("m", 0, 0, b"\x01\x02"))


def test_a_key_pickled_to_another_process_hashes_there_as_its_own():
    key = kvact.ObjectKey("model", 1, 2, b"\x05" * 16)
    code = ("import pickle, sys, kvact; k = pickle.loads(sys.stdin.buffer.read()); "
            "print(k in {kvact.ObjectKey('model', 1, 2, bytes([5]) * 16): 1})")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(key),
                         capture_output=True, check=True).stdout
    assert out.strip() == b"True"
    assert pickle.loads(pickle.dumps(key)) == key


def test_keys_from_kvact_equal_keys_made_from_their_fields():
    for key in kvact.chunk_keys("llama", list(range(4096)), 256, kv_rank=3, salt="s"):
        twin = kvact.ObjectKey(key.model_name, key.kv_rank, key.group, key.chunk_hash)
        assert key == twin and hash(key) == hash(twin) and len({key, twin}) == 1
        assert key.kv_rank == 3 and key._replace(kv_rank=4).kv_rank == 4
        assert key._replace(kv_rank=4) != key
    with pytest.raises(ValueError):
        kvact.ObjectKey("m", -1, 0, b"\x01")
    with pytest.raises(ValueError):
        kvact.ObjectKey("m", 0, "0", b"\x01")
    with pytest.raises(AttributeError):
        kvact.ObjectKey("m", 0, 0, b"\x01").kv_rank = 2


def test_object_keys_are_the_keys_objectkey_makes():
    rng = random.Random(5)
    for lengths in ([32] * 9, [1, 7, 32, 16, 31]):  # the template path, and mixed lengths
        hashes = [bytes(rng.randrange(256) for _ in range(n)) for n in lengths]
        made = kvact.object_keys("llama3-8b", 7, 0xfffffffe, hashes)
        assert made == [kvact.ObjectKey("llama3-8b", 7, 0xfffffffe, h) for h in hashes]
        assert all(type(k) is kvact.ObjectKey and k.chunk_hash == h for k, h in zip(made, hashes))
    assert kvact.object_keys("m", 0, 0, []) == []
    for bad in ([b""], [bytes(33)], [bytes(32), bytes(40)]):
        with pytest.raises(ValueError):
            kvact.object_keys("m", 0, 0, bad)
    for model, rank in (("m@x", 0), ("", 0), ("m", -1), ("m", 1 << 32)):
        with pytest.raises(ValueError):
            kvact.object_keys(model, rank, 0, [bytes(32)])
