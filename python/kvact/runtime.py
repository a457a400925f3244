"""runtime.py — kvact.Runtime: kva_runtime_start/shutdown as a context manager."""
import ctypes

from ._lib import lib
from .config import Config
from .errors import check
from .storage import StorageManager


class Runtime:
    """A running kvact (embedded, or a client of kvactd with {"client.socket": path})."""

    def __init__(self, config=None):
        if isinstance(config, dict):
            config = Config(config)
        out = ctypes.c_void_p()
        check(lib.kva_runtime_start(config._ptr if config else None, ctypes.byref(out)),
              "kva_runtime_start")
        self._ptr = out.value
        sp = lib.kva_storage_of(self._ptr)
        self.storage = StorageManager(sp, self) if sp else None

    def close(self):
        """Shuts the runtime down; MemoryObjs still held refuse views from then on."""
        if self._ptr:
            if self.storage is not None:
                self.storage._invalidate_all()
            lib.kva_runtime_shutdown(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
