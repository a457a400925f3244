"""sg_child.py — one SGLang worker process of test_processes.py: a KvactHiCacheStorage made by
SGLang's factory, a client of the kvactd at SOCK.

  sg_child.py exchange SOCK SEED OTHER   store 4 pages of SEED's keys from host pages
      0..3 of a pool filled with SEED, wait until OTHER's 4 pages are stored, read them
      into pages 10..13 and check them against a pool filled with OTHER: exit 0 if equal
  sg_child.py loop SOCK SEED             store and read pages until killed
  sg_child.py hold SOCK SEED             reserve SEED's pages, say "held", stop there
"""
import sys
import time

import torch

import sglang_cpu
from sglang_cpu import fill, indices, mha_host, page, page_keys


def storage(sock, host):
    # a client: no L1 of its own, every setting of the kvact.config is the socket's
    return sglang_cpu.make_backend(host, extra={"kvact.config": {"client.socket": sock,
                                                                 "runtime.workers": 2}})


def exchange(b, host, seed, other):
    assert b.batch_set_v1(page_keys(4, seed=seed), indices(range(4))) == [True] * 4
    theirs = page_keys(4, seed=other)
    deadline = time.monotonic() + 60
    while b.batch_exists(theirs) < 4:
        assert time.monotonic() < deadline, "the other process's pages never came"
        time.sleep(0.05)
    assert b.batch_get_v1(theirs, indices(range(10, 14))) == [True] * 4
    expected = fill(mha_host("page_first"), seed=other)
    for p in range(4):
        assert torch.equal(page(host, 10 + p), page(expected, p)), p


def loop(b, seed):
    keys = page_keys(64, seed=seed)
    i = 0
    while True:
        batch = keys[(i % 16) * 4:(i % 16) * 4 + 4]
        b.batch_set_v1(batch, indices(range(4)))
        b.batch_get_v1(batch, indices(range(10, 14)))
        i += 1
        if i == 16:
            print("looping", flush=True)


def hold(b, seed):
    def stop(keys):  # SGLang killed between kvact's reserve_write and finish_write
        print("held", flush=True)
        time.sleep(3600)
    b._sm.finish_write = stop
    b.batch_set_v1(page_keys(4, seed=seed), indices(range(4)))


def main(mode, sock, seed, other=None):
    host = fill(mha_host("page_first"), seed=int(seed))
    b = storage(sock, host)
    if mode == "exchange":
        exchange(b, host, int(seed), int(other))
        b.close()
    elif mode == "loop":
        loop(b, int(seed))
    else:
        hold(b, int(seed))


if __name__ == "__main__":
    main(*sys.argv[1:])
