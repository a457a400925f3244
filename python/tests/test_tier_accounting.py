"""test_tier_accounting.py — StorageManager.tier_keys and tier_nodes, embedded and as a client
of kvactd: every key written toward a tier accounted for, no servers for a mock tier
(KvactError KVA_ENOTSUP), and a redis tier's one server."""
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import kvact
from conftest import client, kvactd, small_config

ENOTSUP, EINVAL = -7, -1
LAYOUT = kvact.MemoryLayoutDesc(shapes=[(1024,)], dtypes=["uint8"])
OUTCOMES = ["stored", "coalesced", "bypassed", "frozen", "gone", "unavailable", "failed",
            "dropped"]


def write(sm, model, n):
    keys = [kvact.ObjectKey(model, 0, 0, bytes([i + 1]) * 8) for i in range(n)]
    reserved = sm.reserve_write(keys, LAYOUT)
    assert len(reserved) == n
    sm.finish_write(keys)
    return keys


def check_accounting(sm, tier, stored, frozen):
    keys = sm.tier_keys(tier)
    assert set(keys) == set(OUTCOMES) | {"written", "absent_now", "absent_overflowed"}
    assert keys["stored"] == stored and keys["frozen"] == frozen
    assert keys["written"] == sum(keys[o] for o in OUTCOMES) == stored + frozen
    assert keys["absent_now"] == frozen  # their newest version never reached the tier
    assert keys["absent_overflowed"] == 0


def write_some_frozen(sm):
    write(sm, "acct", 5)
    sm.flush(timeout=10.0)
    sm.set_freeze(True)
    write(sm, "acct-frozen", 2)  # never sent: frozen
    sm.flush(timeout=10.0)
    sm.set_freeze(False)


def check_no_servers(sm):
    with pytest.raises(kvact.KvactError) as e:
        sm.tier_nodes("mock0")
    assert e.value.status == ENOTSUP
    with pytest.raises(kvact.KvactError) as e:
        sm.tier_keys("nosuchtier")
    assert e.value.status == EINVAL


def test_embedded_tier_keys_account_for_every_key(sm):
    write_some_frozen(sm)
    check_accounting(sm, "mock0", stored=5, frozen=2)
    check_no_servers(sm)


def test_through_kvactd_tier_keys_are_the_daemons():
    with kvactd() as (sock, _):
        with client(sock) as rt:
            write_some_frozen(rt.storage)
            check_accounting(rt.storage, "mock0", stored=5, frozen=2)
            check_no_servers(rt.storage)
        with client(sock) as rt:  # the daemon's counts, not this process's
            check_accounting(rt.storage, "mock0", stored=5, frozen=2)


# ---- a redis tier ---------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server():
    """A redis-server on a free loopback port (no persistence): yields its port. No
    redis-server installed is a failed set-up, as for the C suites, never a skip."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.fail("no redis-server on PATH (Debian's redis-server package)")
    with tempfile.TemporaryDirectory(prefix="kvpy-redis") as d:
        port = _free_port()
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", d],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                assert proc.poll() is None, "redis-server exited at start"
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert time.monotonic() < deadline, "redis-server did not accept in 10 s"
                time.sleep(0.01)
            yield port
        finally:
            proc.kill()
            proc.wait()


def check_one_server(sm, port):
    nodes, age = sm.tier_nodes("redis0")
    assert age is None  # one server: no slot map
    assert nodes == [{"addr": "127.0.0.1:%d" % port, "state": "ok", "slots": 0, "failed_s": 0.0,
                      "outages": 0, "failures": 0, "failed_cmds": 0}]
    assert sm.tier_nodes("redis0").nodes == nodes
    write(sm, "redis", 3)
    sm.flush(timeout=10.0)
    assert sm.tier_keys("redis0")["stored"] == 3


def redis_l2(port):
    return [{"type": "redis", "addrs": ["127.0.0.1:%d" % port], "timeout_ms": 10000}]


def test_embedded_redis_tier_has_one_server():
    with redis_server() as port:
        with kvact.Runtime(small_config(l2=redis_l2(port))) as rt:
            check_one_server(rt.storage, port)


def test_through_kvactd_redis_tier_has_the_daemons_server():
    import json
    with redis_server() as port:
        with kvactd(l2=json.dumps(redis_l2(port))) as (sock, _):
            with client(sock) as rt:
                check_one_server(rt.storage, port)
