"""errors.py — KvactError: a call-level KVA_E* status raised with the library's message."""
from ._lib import lib


class KvactError(Exception):
    """A kvact call refused (negative KVA_* status in .status)."""

    def __init__(self, status, detail=""):
        self.status = status
        msg = lib.kva_strerror(status).decode()
        super().__init__("%s (%d)%s" % (msg, status, ": " + detail if detail else ""))


def check(rc, detail=""):
    """Returns rc when it is not negative, else raises KvactError."""
    if rc < 0:
        raise KvactError(rc, detail)
    return rc
