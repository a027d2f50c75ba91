"""Host arrays that jax's CPU client places without copying them.

Placed on the CPU, a numpy array that is C-contiguous and starts on an `ALIGNMENT`
boundary is not copied: its memory becomes the device buffer (jax keeps the array
alive). `jaxattn.load` builds every params leaf so (`placeable`) where jax places on
the CPU, and the scanned layer loop stacks into such buffers (`aligned_empty`), so that
the host holds the weights once, not twice, while placing them. On a GPU/TPU placement
copies either way, and the leaves are left as they are.
"""

from __future__ import annotations

import mmap

import numpy as np

# The alignment at which jax's CPU client takes a numpy array's memory as the device
# buffer instead of copying it (measured, jax 0.10: 64 aliases, 32 and 16 copy); a
# non-C-contiguous array (a transposed view) is copied whatever its address.
ALIGNMENT = 64
TILE = 256  # `placeable`'s tile for copying a transposed view
# From this size an array is a mapping of its own (page-aligned): malloc would put the
# many mid-sized weights (up to 32 MiB) on its heap, whose freed middle it keeps, so
# their memory outlived a scanned load's per-layer weights (+390 MiB for Llama-1B).
MAPPED = 1 << 20


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `ALIGNMENT` boundary
    (numpy's own allocations are 16-byte aligned)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes >= MAPPED:  # its own pages, given back to the system when let go; private
        # (copied on a fork's write, as numpy's heap is), not the default shared mapping
        return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype).reshape(shape)
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def placeable(a) -> np.ndarray:
    """`a` as a C-contiguous, `ALIGNMENT`-aligned array: itself where it is one already,
    else a copy. Placed on the CPU such an array is not copied: the device buffer is its
    memory (`jaxattn.load` holds the weights once, not twice, while placing them). Where
    jax places on a GPU/TPU (`places_on_cpu`), placement copies either way: `a` as it is
    (a copy here would only add to the load's time)."""
    a = np.asarray(a)
    if a.flags.c_contiguous and a.ctypes.data % ALIGNMENT == 0 or not places_on_cpu():
        return a
    out = aligned_empty(a.shape, a.dtype)
    if a.ndim < 2 or a.flags.c_contiguous:
        out[...] = a
        return out
    # A transposed view copied tile by tile (its reads strided a tile's width, not a whole
    # row's): ~2x faster than one assignment (0.13 -> 0.06 s for a [2048, 8192] kernel).
    rows, cols = a.shape[-2:]
    for i in range(0, rows, TILE):
        for j in range(0, cols, TILE):
            out[..., i : i + TILE, j : j + TILE] = a[..., i : i + TILE, j : j + TILE]
    return out


def places_on_cpu() -> bool:
    """Whether jax's default backend, where `jaxattn.load` places weights unless given
    other devices, is the CPU."""
    import jax

    return jax.default_backend() == "cpu"
