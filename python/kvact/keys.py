"""keys.py — kvact.ObjectKey (hashable, compares by value) and chunk_keys over kva_chunk_keys.

An ObjectKey is its kva_key's bytes: a bytes subclass holding the packed
struct, made once when the key is. So a batched call's kva_key[] is one C
join of the keys (key_array), and hashing and comparing keys in dicts are
bytes' own, in C. Equal fields are equal bytes (the struct's unused bytes
are zero), so keys compare by value; the fields are read back from the
bytes when asked for.
"""
import ctypes

from ._lib import Key, lib

KEY_BYTES = ctypes.sizeof(Key)
_RANK, _GROUP, _HLEN, _HASH = Key.kv_rank.offset, Key.group.offset, Key.hash_len.offset, \
    Key.hash.offset


class ObjectKey(bytes):
    """One object's key: LMCache's ObjectKey(model_name, kv_rank, group, chunk_hash)."""

    __slots__ = ()

    def __new__(cls, model_name, kv_rank, group, chunk_hash):
        model = model_name.encode()
        if not model or len(model) > 63 or b"@" in model or b"\0" in model:
            raise ValueError("model_name must be 1..63 bytes without '@': %r" % model_name)
        chunk_hash = bytes(chunk_hash)
        if not 1 <= len(chunk_hash) <= 32:
            raise ValueError("chunk_hash must be 1..32 bytes, got %d" % len(chunk_hash))
        for name, v in (("kv_rank", kv_rank), ("group", group)):
            if not isinstance(v, int) or not 0 <= v < 1 << 32:
                raise ValueError("%s must be an int of 32 bits, got %r" % (name, v))
        k = Key(model=model, kv_rank=kv_rank, group=group, hash_len=len(chunk_hash))
        ctypes.memmove(k.hash, chunk_hash, len(chunk_hash))
        return bytes.__new__(cls, bytes(k))

    @property
    def model_name(self):
        return bytes.__getitem__(self, slice(0, _RANK)).split(b"\0", 1)[0].decode()

    @property
    def kv_rank(self):
        return int.from_bytes(bytes.__getitem__(self, slice(_RANK, _RANK + 4)), "little")

    @property
    def group(self):
        return int.from_bytes(bytes.__getitem__(self, slice(_GROUP, _GROUP + 4)), "little")

    @property
    def chunk_hash(self):
        n = bytes.__getitem__(self, _HLEN)
        return bytes.__getitem__(self, slice(_HASH, _HASH + n))

    def _replace(self, **fields):
        """A copy with some fields changed, e.g. key._replace(kv_rank=1) (as a namedtuple's)."""
        now = dict(model_name=self.model_name, kv_rank=self.kv_rank, group=self.group,
                   chunk_hash=self.chunk_hash)
        now.update(fields)
        return ObjectKey(**now)

    def __reduce__(self):
        return ObjectKey, (self.model_name, self.kv_rank, self.group, self.chunk_hash)

    def __repr__(self):
        return "ObjectKey(model_name=%r, kv_rank=%d, group=%d, chunk_hash=%r)" % (
            self.model_name, self.kv_rank, self.group, self.chunk_hash)

    __str__ = __repr__

    @classmethod
    def _from_c(cls, k):
        """The key kvact wrote into k (a Key it checked)."""
        return bytes.__new__(cls, bytes(k))


def object_keys(model_name, kv_rank, group, chunk_hashes):
    """[ObjectKey(model_name, kv_rank, group, h) for h in chunk_hashes], the fields checked
    once: each key is a template's bytes with its hash spliced in (a bytes join per key,
    not a ctypes struct)."""
    first = ObjectKey(model_name, kv_rank, group, b"\0")  # checks the shared fields
    head = bytes.__getitem__(first, slice(0, _HLEN))
    hashes = [bytes(h) for h in chunk_hashes]
    bad = next((h for h in hashes if not 1 <= len(h) <= 32), None)
    if bad is not None:
        raise ValueError("chunk_hash must be 1..32 bytes, got %d" % len(bad))
    new, free = bytes.__new__, KEY_BYTES - _HLEN - 1  # the length byte, the hash, zeros
    if all(len(h) == 32 for h in hashes):  # SHA-256 hashes: one template for all
        pre, pad = head + b"\x20", bytes(free - 32)
        return [new(ObjectKey, pre + h + pad) for h in hashes]
    return [new(ObjectKey, head + bytes((len(h),)) + h + bytes(free - len(h))) for h in hashes]


def key_array(keys):
    """The kva_key[] of keys (a non-empty list of ObjectKey) as bytes, passed to C as a
    const kva_key * without a copy: the keys joined."""
    keys = keys if isinstance(keys, list) else list(keys)
    if not keys:
        raise ValueError("an empty key list")
    try:
        data = b"".join(keys)
    except TypeError:
        data = b""
    if len(data) != len(keys) * KEY_BYTES:  # kvact checks every key it is given as well
        bad = next((k for k in keys if not isinstance(k, ObjectKey)), keys[0])
        raise TypeError("keys must be kvact.ObjectKey, got %r" % type(bad).__name__)
    return data


def chunk_keys(model, tokens, chunk_tokens, kv_rank=0, salt="", include_partial=False):
    """Prefix-chained keys of tokens, one per chunk of chunk_tokens (list[ObjectKey])."""
    if chunk_tokens <= 0:
        raise ValueError("chunk_tokens must be positive")
    toks = (ctypes.c_int32 * len(tokens))(*tokens)
    cap = len(tokens) // chunk_tokens + 1
    out = (Key * cap)()
    n = lib.kva_chunk_keys(model.encode(), kv_rank, salt.encode() if salt else None, toks,
                           len(tokens), chunk_tokens, int(include_partial), out, cap)
    return [ObjectKey._from_c(out[i]) for i in range(n)]
