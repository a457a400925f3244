"""keys.py — kvact.ObjectKey (hashable, compares by value) and chunk_keys over kva_chunk_keys.

An ObjectKey is frozen, so it packs its kva_key bytes and its hash once,
when it is made: a batched call's kva_key[] is then one join of those
bytes (key_array), not a field-by-field fill of every key at every call.
"""
import ctypes
import operator
from dataclasses import dataclass

from ._lib import Key, lib

_KEY_BYTES = ctypes.sizeof(Key)
_PACKED = operator.attrgetter("_kva_key")


@dataclass(frozen=True)
class ObjectKey:
    """One object's key: LMCache's ObjectKey(model_name, kv_rank, group, chunk_hash)."""

    model_name: str
    kv_rank: int
    group: int
    chunk_hash: bytes

    def __post_init__(self):
        model = self.model_name.encode()
        if not model or len(model) > 63 or b"@" in model or b"\0" in model:
            raise ValueError("model_name must be 1..63 bytes without '@': %r" % self.model_name)
        if not 1 <= len(self.chunk_hash) <= 32:
            raise ValueError("chunk_hash must be 1..32 bytes, got %d" % len(self.chunk_hash))
        for name in ("kv_rank", "group"):
            if not 0 <= getattr(self, name) < 1 << 32:
                raise ValueError("%s must fit in 32 bits" % name)
        # bytes, not a bytearray: the hash below must not change under the key
        object.__setattr__(self, "chunk_hash", bytes(self.chunk_hash))
        object.__setattr__(self, "_kva_key", self._pack(model))
        object.__setattr__(self, "_hash", hash((self.model_name, self.kv_rank, self.group,
                                                self.chunk_hash)))

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        # made again, not copied: str hashes differ from one process to the next
        return type(self), (self.model_name, self.kv_rank, self.group, self.chunk_hash)

    def _pack(self, model):
        k = Key(model=model, kv_rank=self.kv_rank, group=self.group,
                hash_len=len(self.chunk_hash))
        ctypes.memmove(k.hash, self.chunk_hash, len(self.chunk_hash))
        return bytes(k)

    @classmethod
    def _from_c(cls, k):
        return cls(k.model.decode(), k.kv_rank, k.group, bytes(k.hash[:k.hash_len]))


def key_array(keys):
    """The kva_key[] of keys (a non-empty list of ObjectKey) as bytes: their packed bytes
    joined, passed to C as a const kva_key * without a copy."""
    keys = keys if isinstance(keys, list) else list(keys)
    if not keys:
        raise ValueError("an empty key list")
    try:
        data = b"".join(map(_PACKED, keys))
    except (AttributeError, TypeError):
        data = b""
    if len(data) != len(keys) * _KEY_BYTES:
        bad = next(k for k in keys if not isinstance(k, ObjectKey))
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
