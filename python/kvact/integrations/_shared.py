"""_shared.py — what the engine integrations (vllm.py, sglang.py) share: one kvact.Runtime
per config in a process, the config they are given, and the model-name rule of a key.

An engine may make several connectors or backends in one process (vLLM's single-process
mode, SGLang's attach/detach, tests): those with the same config share one Runtime, which
the last one to go closes.
"""
import hashlib
import json
import threading

import kvact

_runtimes = {}  # config identity -> [kvact.Runtime, users]
_runtimes_lock = threading.Lock()


def acquire_runtime(extra):
    """The Runtime of extra's "kvact.config_file" / "kvact.config" (made on first use) and
    the identity to release it by."""
    ident = json.dumps([extra.get("kvact.config_file"), extra.get("kvact.config", {})],
                       sort_keys=True)
    with _runtimes_lock:
        entry = _runtimes.get(ident)
        if entry is None:
            entry = _runtimes[ident] = [kvact.Runtime(config_of(extra)), 0]
        entry[1] += 1
        return ident, entry[0]


def release_runtime(ident):
    with _runtimes_lock:
        entry = _runtimes[ident]
        entry[1] -= 1
        if entry[1] == 0:
            del _runtimes[ident]
            entry[0].close()


def config_of(extra):
    """kvact settings: the file "kvact.config_file" names (else the default), then the
    dict "kvact.config" on top."""
    path = extra.get("kvact.config_file")
    cfg = kvact.Config.from_file(path) if path else kvact.Config()
    settings = extra.get("kvact.config", {})
    if not isinstance(settings, dict):
        raise ValueError("kvact.config must be a dict of kvact settings, got %r" % (settings,))
    for key, value in settings.items():
        cfg.set(key, value)
    return cfg


def model_name(name):
    """name when it is a valid kvact model name (1..63 bytes, no '@'), else a digest of it."""
    raw = str(name).encode()
    if 0 < len(raw) <= 63 and b"@" not in raw and b"\0" not in raw:
        return str(name)
    return "m-" + hashlib.sha256(raw).hexdigest()[:40]


def flag(value):
    """An extra-config boolean: JSON's true/false, or a string ("false", "0", "off", "no")."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "off", "no", "")
    return bool(value)
