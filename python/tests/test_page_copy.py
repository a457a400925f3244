"""test_page_copy.py — kvact.integrations._page_copy.Runs: a strided view's bytes moved to
and from a contiguous object by memmove are the view's elements in order, for the page
views of SGLang's host layouts and for random views (slices, steps, transposes)."""
import random

import torch

from kvact.integrations._page_copy import Runs


def check(view):
    runs = Runs(view)
    assert runs.fits(view) and runs.nbytes == view.numel() * view.element_size()
    out = torch.empty(view.numel(), dtype=view.dtype)
    runs.into_object(out.data_ptr(), view)
    assert torch.equal(out.view(torch.int16), view.reshape(-1).view(torch.int16))
    back = torch.zeros(view.shape, dtype=view.dtype)
    Runs(back).from_object(out.data_ptr(), back)  # a contiguous view: one run
    assert torch.equal(back.view(torch.int16), view.view(torch.int16))


def bits(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-32768, 32767, shape, dtype=torch.int16, generator=g).view(torch.bfloat16)


def test_the_page_views_of_sglangs_host_layouts():
    L, S, H, D, P = 3, 64, 4, 8, 16
    check(bits((2, L, S, H, D), 1)[:, :, 16:32])                   # layer_first
    check(bits((2, S, L, H, D), 2)[:, 16:32])                      # page_first
    check(bits((2, S // P, L, P, H, D), 3)[:, 1:2])                # page_first_direct
    page_head = bits((2, S // P, H, P, L, D), 4)[:, 2:3]
    check(page_head)
    for group in torch.chunk(page_head, 2, dim=2):                 # heads split in two
        check(group)
    check(bits((L, S, 1, D), 5)[:, 16:32])                         # MLA layer_first


def test_random_views_and_writes_land_only_in_the_view():
    rng = random.Random(11)
    for seed in range(60):
        base = bits(tuple(rng.randint(1, 6) for _ in range(rng.randint(1, 5))), seed)
        view = base
        for axis in range(view.dim()):
            n = view.shape[axis]
            lo = rng.randrange(n)
            view = view.narrow(axis, lo, rng.randint(1, n - lo))
        if view.dim() > 1 and rng.random() < 0.3:
            view = view.transpose(0, view.dim() - 1)
        check(view)
        # from_object into the view leaves the rest of the base as it was
        before = base.clone()
        src = bits((view.numel(),), seed + 1000)
        Runs(view).from_object(src.data_ptr(), view)
        assert torch.equal(view.reshape(-1).view(torch.int16), src.view(torch.int16))
        mask = torch.ones(base.shape, dtype=torch.bool)
        mask_view = mask.as_strided(view.shape, view.stride(),
                                    view.storage_offset() - base.storage_offset())
        mask_view.fill_(False)
        assert torch.equal(base.view(torch.int16)[mask], before.view(torch.int16)[mask])


def test_a_large_batch_moved_by_the_copy_threads_lands_whole():
    from kvact.integrations._page_copy import move
    base = bits((2, 64, 32, 8, 256), 21)                       # 16 MiB: 1 MiB runs
    views = [base[:, i:i + 8] for i in range(0, 64, 8)]        # 8 page_first pages, 16 MiB
    out = torch.empty(sum(v.numel() for v in views), dtype=base.dtype)
    moves, at = [], out.data_ptr()
    for v in views:
        r = Runs(v)
        r.into_object(at, v, moves)
        at += r.nbytes
    assert sum(m[2] for m in moves) >= 16 << 20 and len(moves) == 16
    move(moves)
    assert torch.equal(out.view(torch.int16), torch.cat([v.reshape(-1) for v in views]).view(torch.int16))
    back = torch.zeros_like(base)
    moves, at = [], out.data_ptr()
    for i in range(0, 64, 8):
        v = back[:, i:i + 8]
        Runs(v).from_object(at, v, moves)
        at += Runs(v).nbytes
    move(moves)
    assert torch.equal(back.view(torch.int16), base.view(torch.int16))
