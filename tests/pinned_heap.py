"""A child-process "step" for the heap-trim tests: like a chunked plan's small tensors, it touches 8 MiB of heap
blocks under the 128 KiB mmap threshold and frees them again; a small block allocated after the first batch pins them
below the heap's top, so glibc never trims them by itself (what ORT's per-node bookkeeping does to the tensors around
it). The first call grows the heap; later calls reuse its free pages. Prepend to a script that measures ``step()``."""
from __future__ import annotations

import textwrap

PINNED_HEAP_STEP = textwrap.dedent("""
    import ctypes, json, sys
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    pin = []
    def step():
        blocks = [libc.malloc(32 << 10) for _ in range(256 if pin else 257)]
        for b in blocks:
            ctypes.memset(b, 1, 32 << 10)
        if not pin:
            pin.append(blocks.pop())  # the last block, carved from the heap's top: stays allocated
        for b in blocks:
            libc.free(b)
        return 1.0
""")
