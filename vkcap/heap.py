"""The process's heap policy: large buffers are reused instead of being returned to the kernel.

By default glibc serves every allocation above its mmap threshold (128 KiB, raised only as large
blocks are freed) with a fresh mapping and unmaps it when freed, so each new multi-MiB buffer (a
blob decoded from a trace, a snapshot compared in numpy) is page-faulted and zeroed again: about
1000 faults, 2-4 ms on the 2-core CI machine, for every 4 MiB. A command that decodes or compares
one buffer per frame pays that every frame. :func:`keep_large_buffers` serves buffers up to
``MMAP_THRESHOLD`` from the heap and keeps up to ``TRIM_THRESHOLD`` of freed heap for reuse.
"""
from __future__ import annotations

import ctypes
import sys

# mallopt(3) parameters (numbers from glibc's malloc.h) and the values this sets, in bytes.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
POLICY = ((M_MMAP_THRESHOLD, 64 << 20), (M_TRIM_THRESHOLD, 128 << 20))


def keep_large_buffers() -> bool:
    """Apply :data:`POLICY` with glibc's ``mallopt``; True when every parameter was accepted. Elsewhere
    (another C library, another system) nothing changes and the result is False. Call it once, early:
    blocks already mapped are not affected."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in POLICY)
