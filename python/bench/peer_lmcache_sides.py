"""peer_lmcache_sides.py — the three sides peer_lmcache.py measures, each behind the same few
calls: LMCache's StorageManager (CPU, as python/tests/lmcache_side/sides.py makes it) and
kvact's, embedded or a client of a kvactd of its own; and the redis-server the redis part
shares between them.

  side call                LMCache 0.5.6                          kvact
  reserve(keys, layout)    reserve_write                          reserve_write
  finish_write(keys)       finish_write                           finish_write
  prefetch(keys, layout)   submit_prefetch_task(PrefetchTaskSpec  submit_prefetch_task(keys,
                             ([GroupedObjectKeys(keys, 0, layout)]))  layout)
  wait(handle)             wait_prefetch_status, then             handle.wait(): the prefix
                             query_prefetch_status: the hit         count
                             bitmap's leading ones
  read(keys)               read_prefetched_results(keys)          read_prefetched_results(keys):
                             (typed by what was written)            the same (kva_read_prefetched_
                                                                      layouts)
  finish_read(keys)        finish_read_prefetched                 finish_read_prefetched
  delete(keys), clear()    delete_l1_keys, clear                  delete, clear
  settle(keys)             its L2 listener heard every key        flush()
                             stored
  quiesce()                its store controller's read locks      memcheck(wait_stores): the
                             given back                             stores' locks given back

Imported after LMCACHE_LOG_LEVEL is set (peer_lmcache.py sets it).
"""
import contextlib
import os
import socket
import subprocess
import tempfile
import threading
import time

import torch
from lmcache.v1.distributed.api import (GroupedObjectKeys, MemoryLayoutDesc, ObjectKey,
                                        PrefetchTaskSpec)
from lmcache.v1.distributed.config import (EvictionConfig, L1ManagerConfig,
                                           L1MemoryManagerConfig, StorageManagerConfig)
from lmcache.v1.distributed.internal_api import L2AdapterListener
from lmcache.v1.distributed.l2_adapters.config import L2AdaptersConfig
from lmcache.v1.distributed.storage_manager import StorageManager

import kvact
from kvact.config import _text

MIB = 1 << 20
WAIT_S = 60.0  # the longest any wait of the benchmark may take


class SetupError(Exception):
    """A side, or what its L2 tier needs, could not be set up: the part is skipped."""


class _Stored(L2AdapterListener):
    """The keys LMCache's L2 adapters said they stored; wait() until some are."""

    def __init__(self):
        self.keys, self.cond = set(), threading.Condition()

    def on_l2_keys_stored(self, keys, sizes):
        with self.cond:
            self.keys.update(keys)
            self.cond.notify_all()

    def on_l2_keys_accessed(self, keys):
        pass

    def on_l2_keys_deleted(self, keys):
        with self.cond:
            self.keys.difference_update(keys)

    def wait(self, keys):
        with self.cond:
            if not self.cond.wait_for(lambda: self.keys.issuperset(keys), WAIT_S):
                raise SystemExit("lmcache: its L2 did not store every key in %.0f s" % WAIT_S)


class LMCacheSide:
    """LMCache's StorageManager; l2: None or one adapter config."""

    name, label = "lmcache", "lmcache"

    def __init__(self, l1_bytes, l2):
        memory = L1MemoryManagerConfig(size_in_bytes=l1_bytes, use_lazy=False,
                                       init_size_in_bytes=l1_bytes, align_bytes=0x1000)
        self.sm = StorageManager(StorageManagerConfig(
            l1_manager_config=L1ManagerConfig(memory_config=memory),
            eviction_config=EvictionConfig(eviction_policy="LRU"),
            l2_adapter_config=L2AdaptersConfig(adapters=[l2] if l2 else [])))
        self.stored = _Stored()
        self.sm.register_l2_listener(self.stored)
        self.reserve, self.finish_write = self.sm.reserve_write, self.sm.finish_write
        self.read, self.clear = self.sm.read_prefetched_results, self.sm.clear
        self.finish_read = self.sm.finish_read_prefetched

    @staticmethod
    def key(i):
        return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i), model_name="bench", kv_rank=0)

    @staticmethod
    def layout(nbytes):
        return MemoryLayoutDesc(shapes=[torch.Size([nbytes // 2])], dtypes=[torch.bfloat16])

    def prefetch(self, keys, layout):
        row = GroupedObjectKeys(keys=keys, object_group_id=0, layout_desc=layout)
        return self.sm.submit_prefetch_task(PrefetchTaskSpec(key_groups=[row]))

    def wait(self, handle):
        """The hits of a prefetch: the leading ones of its hit bitmap."""
        if not self.sm.wait_prefetch_status(handle, WAIT_S):
            raise SystemExit("lmcache: a prefetch took over %.0f s" % WAIT_S)
        return self.sm.query_prefetch_status(handle).hit_cells[0].count_leading_ones()

    def delete(self, keys):
        self.sm.delete_l1_keys(keys)

    def settle(self, keys):
        self.stored.wait(keys)

    def quiesce(self):
        """Waits until the store controller gave back the read locks it copied under."""
        wait_for(lambda: self.sm.report_status()["l1_manager"]["read_locked_count"] == 0,
                 "lmcache's store locks given back")

    def l1_used(self):
        return self.sm.get_l1_usage()[0]

    def memcheck(self):
        self.quiesce()
        return "" if self.sm.memcheck() else "memcheck failed"

    def close(self):
        self.sm.close()


class KvactSide:
    """kvact's StorageManager, embedded (socket None) or a client of the kvactd at socket."""

    def __init__(self, settings, socket=None):
        self.name = "kvactd" if socket else "kvact"
        self.label = "kvactd" if socket else "embedded"
        self.rt = kvact.Runtime({"client.socket": socket} if socket else settings)
        if socket:
            wait_for(self._connected, "a connection to kvactd")
        sm = self.sm = self.rt.storage
        self.reserve, self.finish_write = sm.reserve_write, sm.finish_write
        self.read, self.finish_read = sm.read_prefetched_results, sm.finish_read_prefetched
        self.delete, self.clear = sm.delete, sm.clear

    def _connected(self):
        try:
            self.rt.storage.stats()
            return True
        except kvact.KvactError:
            return False

    @staticmethod
    def key(i):
        return kvact.ObjectKey("bench", 0, 0, i.to_bytes(8, "big"))

    @staticmethod
    def layout(nbytes):
        return kvact.MemoryLayoutDesc(shapes=[(nbytes // 2,)], dtypes=["bfloat16"])

    def prefetch(self, keys, layout):
        return self.sm.submit_prefetch_task(keys, layout)

    @staticmethod
    def wait(handle):
        hits = handle.wait(WAIT_S)
        if hits is None:
            raise SystemExit("kvact: a prefetch took over %.0f s" % WAIT_S)
        return hits

    def settle(self, keys):
        self.sm.flush(timeout=WAIT_S)

    def quiesce(self):
        self.sm.memcheck(wait_stores=WAIT_S)

    def l1_used(self):
        return self.sm.stats()["l1_used_bytes"]

    def memcheck(self):
        return self.sm.memcheck_report(wait_stores=WAIT_S)

    def close(self):
        self.rt.close()


def wait_for(predicate, what):
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("no %s in %.0f s" % (what, WAIT_S))
        time.sleep(0.001)


@contextlib.contextmanager
def kvactd(settings):
    """A kvactd ($KVACT_KVACTD) with settings on a fresh socket: yields the socket."""
    path = os.environ.get("KVACT_KVACTD") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "bazel-bin", "tools", "kvactd")
    if not os.access(path, os.X_OK):
        raise SystemExit("no kvactd at %s: bazel build -c opt //tools:kvactd, or set "
                         "KVACT_KVACTD" % path)
    with tempfile.TemporaryDirectory(prefix="kvlmb", dir="/tmp") as d:  # fits sun_path
        sock = os.path.join(d, "kvact.sock")
        opts = ["server.socket=" + sock] + ["%s=%s" % (k, _text(v)) for k, v in settings.items()]
        proc = subprocess.Popen([path, "--quiet"] + [a for o in opts for a in ("-o", o)])
        try:
            wait_for(lambda: proc.poll() is not None or _accepting(sock), "kvactd accepting")
            if proc.poll() is not None:
                raise SetupError("kvactd exited at start (%d)" % proc.returncode)
            yield sock
        finally:
            proc.terminate()
            proc.wait(timeout=WAIT_S)


def _accepting(path):
    with socket.socket(socket.AF_UNIX) as s:
        return s.connect_ex(path) == 0


@contextlib.contextmanager
def sides(args, lmcache_l2, kvact_l2=lambda name: None):
    """The three sides with an L1 of --l1-mib and an L2 tier: LMCache's adapter config
    lmcache_l2, kvact's tier kvact_l2("kvact" or "kvactd") (None: no tier), each side with
    its Keys; a failure to make one is a SetupError."""
    def settings(name):
        tier = kvact_l2(name)
        return {"l1.size_bytes": args.l1_mib * MIB, "l2": [tier] if tier else []}
    with contextlib.ExitStack() as stack:
        try:
            made = [LMCacheSide(args.l1_mib * MIB, lmcache_l2)]
            stack.callback(made[0].close)
            made.append(KvactSide(settings("kvact")))
            stack.callback(made[1].close)
            sock = stack.enter_context(kvactd(settings("kvactd")))
            made.append(KvactSide(None, socket=sock))
            stack.callback(made[2].close)
        except (RuntimeError, ValueError, OSError, kvact.KvactError) as e:
            raise SetupError("%s: %s" % (type(e).__name__, e)) from e
        for side in made:
            side.keys = Keys(side)
        yield made
        for side in made:
            report = side.memcheck()
            if report:
                raise SystemExit("%s: %s" % (side.name, report))


class KeyList(list):
    """Keys taken together; first: the number of the first."""

    first = 0


class Keys:
    """Fresh keys for a side: never the same twice in a run."""

    def __init__(self, side):
        self.side, self.next = side, 0

    def take(self, n):
        out = KeyList(self.side.key(self.next + i) for i in range(n))
        out.first, self.next = self.next, self.next + n
        return out


@contextlib.contextmanager
def redis_server(path):
    """A redis-server of its own on a free loopback port, no persistence: yields the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="peer-lmcache-redis-") as d:
        proc = subprocess.Popen([path, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", d, "--loglevel", "warning"],
                                stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: proc.poll() is not None or _pong(port), "redis-server answering")
            if proc.poll() is not None:
                raise SetupError("redis-server exited at start (%d)" % proc.returncode)
            yield port
        finally:
            proc.terminate()
            proc.wait(timeout=WAIT_S)


def _pong(port):
    try:
        return redis_command(port, "PING") == b"+PONG"
    except OSError:
        return False


def redis_command(port, *words):
    """One command in RESP, its reply's first line."""
    msg = b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode())
                                             for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        s.sendall(msg)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.strip()
