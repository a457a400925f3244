"""kvact — Python bindings of libkvact.so (kvact.h), mirroring LMCache's StorageManager.

    import kvact
    with kvact.Runtime(kvact.Config({"l2": [{"type": "mock"}]})) as rt:
        sm = rt.storage
        ...

See python/README.md. Calls go through ctypes.CDLL, which releases the GIL
while each C call runs.
"""
from . import _lib
from .config import Config
from .errors import KvactError
from .keys import ObjectKey, chunk_keys, object_keys
from .layout import MemoryLayoutDesc
from .memory import MemoryObj
from .paged import KVOp, PagedKVCache
from .runtime import Runtime
from .prefetch import PrefetchHandle
from .storage import LookupResult, StorageManager, TierNodes

__all__ = ["Config", "KVOp", "KvactError", "LookupResult", "MemoryLayoutDesc", "MemoryObj",
           "ObjectKey", "PagedKVCache", "PrefetchHandle", "Runtime", "StorageManager",
           "TierNodes", "chunk_keys", "object_keys"]

# the loaded libkvact.so's kva_version(): the package and the library are one release
__version__ = _lib.lib.kva_version().decode()
