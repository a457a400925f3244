"""test_tiers.py — KvactHiCacheStorage over a small L1 (8 pages) with a disk tier below.

kvact stores each finished page to the disk tier behind the write; L1 evicts what the
tier holds, and also what it has not begun to store (a best-effort cache: such a page is
lost, never served wrong). So:
- backups at the pace of kvact's stores (each waited for, as a server's prefills space
  SGLang's backups): many more pages than L1 holds all come back bit-exact;
- a burst of backups: each batch is accepted (the backend waits for L1 room when every
  page is still being stored, instead of failing SGLang's backup), and every page later
  found is bit-exact; the ones evicted unstored are misses.
"""
import torch

from sglang_cpu import PAGE, fill, indices, mha_host, page, page_keys, zero

PAGES = 96
L1_PAGES = 8


def tiered(backend, tmp_path, seed):
    src = fill(mha_host("page_first", device_tokens=PAGES * PAGE), seed=seed)
    dst = zero(mha_host("page_first", device_tokens=PAGES * PAGE))
    page_bytes = page(src, 0).numel()
    settings = {"l1.size_bytes": L1_PAGES * page_bytes,
                "l2": [{"type": "disk", "path": str(tmp_path / "kv.bin"),
                        "capacity_bytes": 4 * PAGES * page_bytes}]}
    return backend(src, kvact=settings), src, backend(dst, kvact=settings), dst


def test_pages_evicted_from_a_small_l1_come_back_from_disk(backend, tmp_path):
    writer, src, reader, dst = tiered(backend, tmp_path, seed=90)
    keys = page_keys(PAGES, seed=91)
    for i in range(0, PAGES, 4):
        assert writer.batch_set_v1(keys[i:i + 4], indices(range(i, i + 4))) == [True] * 4, i
        writer._sm.flush(timeout=10.0)
    stats = writer._sm.stats()
    assert stats["l1_objects"] <= L1_PAGES and stats["evicted"] + stats["evicted_on_demand"] \
        >= PAGES - L1_PAGES, stats
    assert reader.batch_exists(keys) == PAGES
    for i in range(0, PAGES, 4):
        assert reader.batch_get_v1(keys[i:i + 4], indices(range(i, i + 4))) == [True] * 4, i
    for p in range(PAGES):
        assert torch.equal(page(dst, p), page(src, p)), p


def test_a_burst_beyond_l1_loses_pages_as_misses_never_wrong_bytes(backend, tmp_path):
    writer, src, reader, dst = tiered(backend, tmp_path, seed=92)
    keys = page_keys(PAGES, seed=93)
    for i in range(0, PAGES, 4):
        assert writer.batch_set_v1(keys[i:i + 4], indices(range(i, i + 4))) == [True] * 4, i
    writer._sm.flush(timeout=10.0)
    found = 0
    for p in range(PAGES):
        if reader.batch_get_v1([keys[p]], indices([p])) == [True]:
            found += 1
            assert torch.equal(page(dst, p), page(src, p)), p
        else:
            assert not page(dst, p).any(), p
    assert found >= L1_PAGES, found
