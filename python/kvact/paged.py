"""paged.py — kvact.PagedKVCache: an engine's per-layer torch KV tensors registered with kvact.

The layers are registered once (kva_kv_register: CPU tensors as the host
device, CUDA tensors as their device); store() gathers the tokens of a
slot mapping out of them into L1 chunk objects, load() scatters
prefetched chunks back, both as a KVOp the engine waits on, whole or layer
by layer. The cache keeps references to the tensors, so their memory lives
as long as the registration.

Formats: "flash" and "flashinfer" are contiguous 5-D layers copied token by
token; "pages" takes vLLM 0.33's per-layer 4-D views [blocks, heads,
block_size, K|V] (strided views of one buffer, in one of vLLM's
KVCacheLayout names) and copies whole pages, one block of one layer, which
is right whatever the attention backend keeps in K|V. A layout whose page
is not one contiguous run (LHBNC, BHLNC: split by heads) is refused at
registration with its name.
"""
import ctypes
import threading

from . import _async
from ._lib import PagedKV, lib, timeout_ms
from .errors import check
from .keys import key_array
from .layout import DTYPES, MemoryLayoutDesc

_FORMATS = {"flash": 0, "flashinfer": 1, "pages": 2}
# vLLM 0.33's KVCacheLayout names: the physical order of (layer, block, head, token, K|V).
_LAYOUTS = ("LBHNC", "LBNHC", "LHBNC", "BLHNC", "BLNHC", "BHLNC")
_DEVICE_HOST = -1
_DTYPE_NAMES = {v[0]: k for k, v in DTYPES.items()}


class KVOp(_async.AwaitableByFd):
    """One store or load in flight: wait() for its status, wait_layer(l), fileno(), await.

    A load refused per key at the call (a key not read-locked: KVA_KEY_NOT_EXIST,
    KVA_KEY_NOT_READABLE) is an op already complete with that status: it wrote
    nothing and released the read locks it was given.
    """

    def __init__(self, ptr, cache, status=None):
        self._ptr, self._cache, self._status = ptr, cache, status
        self._lock = threading.Lock()

    def wait(self, timeout=None):
        """Blocks (GIL released) until the op is complete: its status (0, or a KVA_E* code
        such as KVA_ENOMEM for a store short of room); None after timeout seconds."""
        with self._lock:
            if self._ptr is None:
                return self._status
            status = ctypes.c_int()
            rc = lib.kva_op_wait(self._ptr, timeout_ms(timeout), ctypes.byref(status))
            if rc == -5:  # KVA_ETIMEDOUT: still running
                return None
            check(rc, "kva_op_wait")
            self._ptr, self._status = None, status.value
            self._cache._ops.discard(self)
            return self._status

    def wait_layer(self, layer, timeout=None):
        """True once layer `layer` is in the paged cache (a store's layers land together);
        False after timeout seconds."""
        with self._lock:
            if self._ptr is None:
                return True
            if not 0 <= layer < self._cache.num_layers:
                raise IndexError("layer %d of %d" % (layer, self._cache.num_layers))
            rc = lib.kva_op_wait_layer(self._ptr, layer, timeout_ms(timeout))
            if rc == -5:
                return False
            check(rc, "kva_op_wait_layer")
            return True

    def fileno(self):
        """An eventfd readable once the op is complete (until wait() frees the op)."""
        with self._lock:
            if self._ptr is None:
                raise ValueError("the op is complete and freed; it has no eventfd")
            return lib.kva_op_eventfd(self._ptr)


class PagedKVCache:
    """Per-layer KV tensors registered with kvact: [2, blocks, block_size, heads, head_dim]
    for "flash", [blocks, 2, block_size, heads, head_dim] for "flashinfer", vLLM 0.33's
    [blocks, heads, block_size, K|V] views for "pages". `layout` (pages only) is the vLLM
    layout name the views come from, for messages; without it the name is read from the
    strides. The page of each (layer, block) must be contiguous (LBHNC, LBNHC, BLHNC,
    BLNHC; with one KV head, any layout): others are refused, naming the layout."""

    def __init__(self, sm, layers, fmt="flash", chunk_tokens=256, layout=None):
        layers = list(layers)
        if fmt not in _FORMATS:
            raise ValueError("fmt must be one of %s" % ", ".join(_FORMATS))
        if not isinstance(chunk_tokens, int) or chunk_tokens <= 0:
            raise ValueError("chunk_tokens must be a positive int")
        if layout is not None and (fmt != "pages" or layout not in _LAYOUTS):
            raise ValueError("layout %r: only with fmt 'pages', one of %s" %
                             (layout, ", ".join(_LAYOUTS)))
        self._sm, self.fmt, self.chunk_tokens = sm, fmt, chunk_tokens
        self._layers = _check_layers(layers, fmt)
        first = self._layers[0]
        self.num_layers = len(self._layers)
        self.dtype = str(first.dtype).replace("torch.", "")
        self.layout, block_stride, page_bytes = None, 0, 0
        if fmt == "pages":
            blocks, heads, block_size, head_dim = first.shape
            self.layout, block_stride, page_bytes = _pages(self._layers, layout)
            if chunk_tokens % block_size:
                raise ValueError("chunk_tokens %d is not a multiple of block_size %d" %
                                 (chunk_tokens, block_size))
        else:
            blocks, block_size, heads, head_dim = _geometry(first.shape, fmt)
        self.num_blocks, self.block_size = blocks, block_size
        self.num_heads, self.head_dim = heads, head_dim
        self.block_stride, self.page_bytes = block_stride, page_bytes
        self._ptrs = (ctypes.c_void_p * self.num_layers)(*[t.data_ptr() for t in self._layers])
        d = PagedKV(device=_DEVICE_HOST if first.device.type == "cpu" else first.device.index,
                    format=_FORMATS[fmt], dtype=DTYPES[self.dtype][0],
                    num_layers=self.num_layers, num_blocks=blocks, block_size=block_size,
                    num_heads=heads, head_dim=head_dim, layers=self._ptrs,
                    block_stride=block_stride, page_bytes=page_bytes)
        out = ctypes.c_void_p()
        check(lib.kva_kv_register(sm._ptr, ctypes.byref(d), ctypes.byref(out)), "kva_kv_register")
        self._ptr = out.value
        self._ops = set()

    @property
    def slots(self):
        """Number of token slots: num_blocks * block_size (slot = block * block_size + offset)."""
        return self.num_blocks * self.block_size

    def chunk_layout(self, tokens=None):
        """The MemoryLayoutDesc of a chunk of `tokens` tokens (default chunk_tokens): one
        tensor of the cache's dtype, [2, layers, tokens, heads * head_dim], or for "pages"
        [layers, blocks of the chunk, page elements]."""
        c = lib.kva_kv_chunk_layout(self._live(), tokens or self.chunk_tokens)
        if c.ntensors != 1:
            raise ValueError("no chunk layout for %r tokens" % tokens)
        t = c.tensor[0]
        return MemoryLayoutDesc([tuple(t.shape[:t.ndim])], [_DTYPE_NAMES[t.dtype]])

    def store(self, keys, slot_mapping):
        """Gathers the tokens of slot_mapping into one L1 chunk object per key (keys already
        present are skipped): a KVOp. Token t of the request sits in slot slot_mapping[t].
        "pages": each block's slots in a chunk must be block * block_size + 0, 1, ... or all
        -1 (a KvactError KVA_EINVAL otherwise); a partial last block moves its whole page."""
        return self._copy(lib.kva_kv_store, keys, slot_mapping)

    def load(self, keys, slot_mapping):
        """Scatters prefetched (read-locked) chunks into the slots, layer by layer, then
        releases one read lock of each key: a KVOp."""
        return self._copy(lib.kva_kv_load, keys, slot_mapping)

    def _copy(self, fn, keys, slot_mapping):
        keys = list(keys)
        arr = key_array(keys)
        slots, ntokens = _slot_array(slot_mapping)
        ct = self.chunk_tokens
        if not (len(keys) - 1) * ct < ntokens <= len(keys) * ct:
            raise ValueError("%d keys of %d tokens need %d..%d slots, got %d" %
                             (len(keys), ct, (len(keys) - 1) * ct + 1, len(keys) * ct, ntokens))
        op = ctypes.c_void_p()
        rc = check(fn(self._sm._ptr, self._live(), arr, len(keys), ct, slots, ntokens,
                      ctypes.byref(op)), fn.__name__)
        kop = KVOp(op.value if rc == 0 else None, self, rc)
        if rc == 0:
            self._ops.add(kop)
        return kop

    def _live(self):
        if self._ptr is None:
            raise ValueError("the PagedKVCache was closed")
        return self._ptr

    def close(self):
        """Unregisters (after the ops still copying end); ops not waited for are freed."""
        if self._ptr is not None:
            for op in list(self._ops):
                op.wait()
            lib.kva_kv_unregister(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check_layers(layers, fmt):
    import torch
    if not layers:
        raise ValueError("no layers")
    first = layers[0]
    for i, t in enumerate(layers):
        if not isinstance(t, torch.Tensor):
            raise TypeError("layer %d is a %s, not a torch.Tensor" % (i, type(t).__name__))
        if t.shape != first.shape or t.dtype != first.dtype or t.device != first.device:
            raise ValueError("layer %d: %s %s on %s differs from layer 0's %s %s on %s" %
                             (i, tuple(t.shape), t.dtype, t.device, tuple(first.shape),
                              first.dtype, first.device))
        if t.stride() != first.stride():
            raise ValueError("layer %d: strides %s differ from layer 0's %s" %
                             (i, t.stride(), first.stride()))
        if fmt != "pages" and not t.is_contiguous():
            raise ValueError("layer %d is not contiguous" % i)
    if fmt == "pages" and first.dim() != 4:
        raise ValueError("a pages layer has 4 dimensions [blocks, heads, block_size, K|V] "
                         "(vLLM 0.33), got shape %s" % (tuple(first.shape),))
    if fmt != "pages" and first.dim() != 5:
        raise ValueError("a %s layer has 5 dimensions, got shape %s" % (fmt, tuple(first.shape)))
    name = str(first.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise TypeError("dtype %s is not one of %s" % (first.dtype, ", ".join(DTYPES)))
    if first.device.type not in ("cpu", "cuda"):
        raise ValueError("layers on %s: only cpu and cuda tensors" % first.device)
    return layers


def _layout_name(layers):
    """The vLLM layout name the strides say: L, B, H, N ordered outermost first (L from the
    distance between layer 0 and 1 when the layers are evenly spaced in one buffer, else
    outermost), C last."""
    first, es = layers[0], layers[0].element_size()
    strides = dict(zip("BHN", first.stride()[:3]))
    gaps = {(b.data_ptr() - a.data_ptr()) for a, b in zip(layers, layers[1:])}
    if len(gaps) == 1 and next(iter(gaps)) > 0 and next(iter(gaps)) % es == 0:
        strides["L"] = next(iter(gaps)) // es
    else:
        strides["L"] = float("inf")
    return "".join(sorted("LBHN", key=lambda d: (-strides[d], "LBHN".index(d)))) + "C"


def _page_bytes(t):
    """Bytes of one block's [heads, block_size, K|V] when they are one contiguous run (the
    three dimensions packed in some order), else None."""
    dims = sorted((st, n) for st, n in zip(t.stride()[1:], t.shape[1:]) if n > 1)
    run = 1
    for st, n in dims:
        if st != run:
            return None
        run *= n
    return run * t.element_size()


def _pages(layers, layout):
    """(layout name, block stride, page bytes) of vLLM 4-D layer views; a ValueError naming
    the layout when a (layer, block) page is not contiguous."""
    first = layers[0]
    name = layout or _layout_name(layers)
    page = _page_bytes(first)
    if page is None:
        raise ValueError("KV cache layout %s is not supported: a block's page of one layer "
                         "is split by heads (strides %s of shape %s); kvact copies whole "
                         "pages: use LBNHC, LBHNC, BLNHC or BLHNC" %
                         (name, first.stride(), tuple(first.shape)))
    stride = first.stride()[0] * first.element_size() if first.shape[0] > 1 else page
    if stride < page:
        raise ValueError("KV cache layout %s: blocks %d bytes apart overlap pages of %d" %
                         (name, stride, page))
    return name, stride, page


def _geometry(shape, fmt):
    two = shape[0] if fmt == "flash" else shape[1]
    if two != 2:
        raise ValueError("a %s layer's K/V dimension is %d, not 2 (shape %s)" %
                         (fmt, two, tuple(shape)))
    blocks = shape[1] if fmt == "flash" else shape[0]
    return blocks, shape[2], shape[3], shape[4]


def _slot_array(slot_mapping):
    """(int64 pointer, length) of a 1-D int64 slot mapping: torch (CPU), numpy or a list."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and isinstance(slot_mapping, torch.Tensor):
        if slot_mapping.dtype != torch.int64:
            raise TypeError("slot_mapping must be int64, got %s" % slot_mapping.dtype)
        slot_mapping = slot_mapping.detach().cpu().contiguous().numpy()
    if isinstance(slot_mapping, (list, tuple)):
        n = len(slot_mapping)
        return (ctypes.c_int64 * n)(*slot_mapping), n
    import numpy as np
    if not isinstance(slot_mapping, np.ndarray):
        raise TypeError("slot_mapping must be a torch tensor, numpy array or list")
    if slot_mapping.dtype != np.int64:
        raise TypeError("slot_mapping must be int64, got %s" % slot_mapping.dtype)
    if slot_mapping.ndim != 1:
        raise ValueError("slot_mapping must be 1-D, got shape %s" % (slot_mapping.shape,))
    slot_mapping = np.ascontiguousarray(slot_mapping)
    arr = slot_mapping.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    arr._keep = slot_mapping  # the numpy array outlives the call through the pointer
    return arr, len(slot_mapping)

