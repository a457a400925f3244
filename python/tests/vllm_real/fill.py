"""fill.py — another tenant's writes into kvact (kvact alone, no vLLM: a second client
process imports it in a fraction of a second)."""
import hashlib

import kvact


def fill_l1(storage, nbytes, tag, obj_bytes=1 << 15, batch=16):
    """nbytes of new objects written through storage: demand eviction makes room by
    evicting what it may. Returns the number of objects written (those reserve_write
    refused are skipped)."""
    layout = kvact.MemoryLayoutDesc([(obj_bytes,)], ["uint8"])
    n, written = nbytes // obj_bytes, 0
    for start in range(0, n, batch):
        keys = [kvact.ObjectKey("other-tenant", 0, 0,
                                hashlib.sha256(b"%s-%d" % (tag.encode(), i)).digest())
                for i in range(start, min(n, start + batch))]
        reserved = storage.reserve_write(keys, layout, mode="new")
        if reserved:
            storage.finish_write(list(reserved))
            written += len(reserved)
    return written
