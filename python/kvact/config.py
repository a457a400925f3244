"""config.py — kvact.Config over kva_config: the embedded default, a file, or a dict of settings.

Values go through kva_config_set as text: booleans as true/false, numbers
with str(), strings as they are, and lists or dicts (the "l2" array) as
JSON, which kva_config_set parses for composite values.
"""
import ctypes
import json

from ._lib import lib
from .errors import KvactError

_ERRLEN = 512


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


class Config:
    """A kvact configuration; Config({"l1.size_bytes": 1 << 30}) = the default plus settings."""

    def __init__(self, settings=None, _ptr=None):
        self._ptr = _ptr if _ptr is not None else lib.kva_config_default()
        if not self._ptr:
            raise MemoryError("kva_config_default")
        for path, value in (settings or {}).items():
            self.set(path, value)

    @classmethod
    def from_file(cls, path):
        out = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = lib.kva_config_from_file(str(path).encode(), ctypes.byref(out), err, _ERRLEN)
        if rc != 0:
            raise KvactError(rc, err.value.decode(errors="replace"))
        return cls(_ptr=out.value)

    def set(self, path, value):
        """Sets one dotted path; KvactError(KVA_ECONFIG) and no change when it does not validate."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = lib.kva_config_set_err(self._ptr, path.encode(), _text(value).encode(), err, _ERRLEN)
        if rc != 0:
            raise KvactError(rc, err.value.decode(errors="replace"))
        return self

    def get(self, path):
        """The effective value at a dotted path (int, float, bool or str), or KeyError."""
        for getter, ctype in ((lib.kva_config_get_i64, ctypes.c_int64),
                              (lib.kva_config_get_f64, ctypes.c_double),
                              (lib.kva_config_get_bool, ctypes.c_int),
                              (lib.kva_config_get_str, ctypes.c_char_p)):
            out = ctype()
            if getter(self._ptr, path.encode(), ctypes.byref(out)) == 0:
                return _python_value(getter, out.value)
        raise KeyError(path)

    def close(self):
        if self._ptr:
            lib.kva_config_free(self._ptr)
            self._ptr = None

    def __del__(self):
        self.close()


def _python_value(getter, value):
    if getter is lib.kva_config_get_bool:
        return bool(value)
    if getter is lib.kva_config_get_str:
        return value.decode()
    return value
