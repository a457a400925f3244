"""keys.py — kvact.ObjectKey (hashable, compares by value) and chunk_keys over kva_chunk_keys."""
import ctypes
from dataclasses import dataclass

from ._lib import Key, lib


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

    def _fill(self, k):
        k.model = self.model_name.encode()
        k.kv_rank = self.kv_rank
        k.group = self.group
        k.hash_len = len(self.chunk_hash)
        ctypes.memmove(k.hash, self.chunk_hash, len(self.chunk_hash))

    @classmethod
    def _from_c(cls, k):
        return cls(k.model.decode(), k.kv_rank, k.group, bytes(k.hash[:k.hash_len]))


def key_array(keys):
    """A kva_key[] holding keys (a non-empty list of ObjectKey)."""
    keys = list(keys)
    if not keys:
        raise ValueError("an empty key list")
    arr = (Key * len(keys))()
    for i, key in enumerate(keys):
        if not isinstance(key, ObjectKey):
            raise TypeError("keys must be kvact.ObjectKey, got %r" % type(key).__name__)
        key._fill(arr[i])
    return arr


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
