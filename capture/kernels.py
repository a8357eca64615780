"""The codecs' compiled loops (``kernels.c``) on Python buffers, and the buffers they fill.

With these, neither recording nor reading a trace needs numpy: a residual, its SPARSE parts and a
blob's byte planes, and their inverses, are each one pass over memory in C instead of several numpy
passes, and a process that records or replays without finding a difference never pays for importing
numpy (40-60 ms), which only numeric comparison needs.

Every function takes any C-contiguous buffer (bytes, bytearray, memoryview, mmap, a numpy array) without
copying it, calls the library without holding the GIL (cffi releases it) and is thread-safe. The library
is built by ``make setup`` (:mod:`capture.kernels_build`); without it, the first call raises
:class:`KernelsMissing`, which says how to build it.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from vkcore.errors import VkcapError
from vkcore.paths import cache_root

from ._kernels_cdefs import ffi
from .kernels_build import CFLAGS, LIBRARY, SOURCE, compile_library

WIDTHS = (1, 2, 4, 8)


class KernelsMissing(VkcapError):
    """The compiled library is not built (or not loadable on this machine)."""


_lib: Any = None
_lock = threading.Lock()
# uninitialized memory, as numpy.empty gives: pages are first touched by the loop that fills them
_alloc = ffi.new_allocator(should_clear_after_alloc=False)


def _library() -> Any:
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                if sys.byteorder != "little":
                    raise KernelsMissing("the trace format's elements are little-endian; this host is not")
                _lib = ffi.dlopen(str(LIBRARY if LIBRARY.is_file() else _built_in_cache()))
    return _lib


def _built_in_cache() -> Path:
    """The library for an installed vkcap, which has ``kernels.c`` but no ``_kernels.so`` beside it
    (``pip install .``): compiled once into the cache folder, under a name that changes with the source and
    the flags, so an upgrade never loads a stale build. One line naming what to do when no compiler works."""
    try:
        digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:16]
        target = cache_root() / "kernels" / f"_kernels-{digest}.so"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            compile_library(target)
        return target
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelsMissing(f"{LIBRARY} is not built and could not be built into the cache ({exc}); install a C "
                             "compiler (apt-get install gcc), or run `python -m capture.kernels_build`") from None


def new_buffer(nbytes: int) -> memoryview:
    """A writable buffer of ``nbytes`` uninitialized bytes (format ``B``)."""
    return memoryview(ffi.buffer(_alloc("uint8_t[]", max(nbytes, 1)), nbytes))


def _in(data: Any) -> Any:
    return ffi.from_buffer(data)


def _out(data: Any) -> Any:
    return ffi.from_buffer(data, require_writable=True)


def _check_fit(what: str, n: int, width: int, *buffers: Any) -> None:
    """``width`` is an element width and every buffer holds ``n`` elements of it (the loops trust both)."""
    if width not in WIDTHS:
        raise ValueError(f"element width {width} is not one of {list(WIDTHS)}")
    nbytes = n * width
    if any(memoryview(x).nbytes < nbytes for x in buffers):
        raise ValueError(f"{what} of {n} elements of {width} bytes needs {nbytes} bytes in every buffer")


def _check_bits(bits: Any, n: int) -> None:
    """``bits`` holds a bitmap of ``n`` bits."""
    if memoryview(bits).nbytes < -(-n // 8):
        raise ValueError(f"{n} bits need {-(-n // 8)} bytes")


def _check_plane(k: int, n: int, width: int, elements: Any, plane: Any) -> None:
    """Plane ``k`` exists for ``width``-byte elements, ``elements`` holds ``n`` of them and ``plane`` ``n`` bytes."""
    if not 0 <= k < width or width not in WIDTHS:
        raise ValueError(f"no plane {k} of {width}-byte elements")
    if memoryview(elements).nbytes < n * width or memoryview(plane).nbytes < n:
        raise ValueError(f"plane {k} of {n} elements of {width} bytes does not fit the buffers given")


def residual(cur: Any, a: Any, b: Any | None, out: Any, keep: Any | None, n: int, width: int, zigzag: bool) -> int:
    """``out[i] = cur[i] - a[i]`` (``b`` None) or ``cur[i] - (2 a[i] - b[i])``, zigzagged when ``zigzag``,
    for the first ``n`` elements of ``width`` bytes; ``keep[i] = cur[i]`` when ``keep`` is given (it may
    be ``a`` or ``b``). Returns how many ``out[i]`` are zero. Every buffer holds at least ``n`` elements."""
    _check_fit("a residual", n, width, cur, a, out, *(x for x in (b, keep) if x is not None))
    null = ffi.NULL
    zeros: int = _library().vkcap_residual(_in(cur), _in(a), null if b is None else _in(b), _out(out),
                                          null if keep is None else _out(keep), n, width, int(zigzag))
    return zeros


def zigzag(data: Any, n: int, width: int) -> None:
    """Zigzag the first ``n`` elements of ``data`` in place (plain differences to residual elements)."""
    _check_fit("a zigzag", n, width, data)
    _library().vkcap_zigzag(_out(data), n, width)


def zeros(data: Any, n: int, width: int) -> int:
    """How many of the first ``n`` elements of ``data`` are zero."""
    _check_fit("a count", n, width, data)
    count: int = _library().vkcap_zeros(_in(data), n, width)
    return count


def sparse(data: Any, n: int, width: int, zigzag: bool, nonzero: int | None = None) -> tuple[bytearray, bytearray]:
    """SPARSE's bitmap and values of the first ``n`` elements of ``data``: bit i (LSB first) set when
    element i is not zero, and the non-zero elements in order (zigzagged when ``zigzag``). ``nonzero``
    is their number when the caller knows it (else it is counted first)."""
    _check_fit("a SPARSE encoding", n, width, data)
    if nonzero is None:
        nonzero = n - zeros(data, n, width)
    bits, values = bytearray(-(-n // 8)), bytearray(nonzero * width)
    seen = _library().vkcap_sparse(_in(data), n, width, int(zigzag), _out(bits), _out(values), nonzero)
    if seen != nonzero:
        raise ValueError(f"{seen} non-zero elements, {nonzero} expected: the data changed while it was encoded")
    return bits, values


def residual_sparse(cur: Any, a: Any, b: Any | None, keep: Any | None, bits: Any, values: Any, n: int,
                    width: int) -> int:
    """:func:`residual` (zigzagged) and :func:`sparse` of it in one pass, without the residual: bit i of
    ``bits`` (``ceil(n / 8)`` bytes) set when element i of the residual is not zero, those elements
    in order at the start of ``values``, which has room for ``n`` elements (the pass may write past
    the ones it keeps); ``keep[i] = cur[i]`` when ``keep`` is given (it may be ``a`` or ``b``).
    Returns how many elements are not zero: ``values`` holds that many."""
    _check_fit("a SPARSE residual", n, width, cur, a, values, *(x for x in (b, keep) if x is not None))
    _check_bits(bits, n)
    null = ffi.NULL
    count: int = _library().vkcap_residual_sparse(_in(cur), _in(a), null if b is None else _in(b),
                                                 null if keep is None else _out(keep), _out(bits), _out(values),
                                                 n, width)
    return count


def plane(data: Any, n: int, width: int, k: int, out: Any) -> None:
    """Byte plane ``k`` of the first ``n`` elements of ``data`` (byte k of each, bits 8k..8k+7) into
    ``out`` (at least ``n`` bytes)."""
    _check_plane(k, n, width, data, out)
    _library().vkcap_plane(_in(data), n, width, k, _out(out))


# -- decoding ---------------------------------------------------------------------------------------


def restore(z: Any, a: Any, b: Any | None, out: Any, n: int, width: int) -> None:
    """The inverse of a zigzagged :func:`residual`: ``out[i] = unzigzag(z[i]) + a[i]`` (``b`` None) or
    ``+ 2 a[i] - b[i]``, for the first ``n`` elements of ``width`` bytes. ``out`` overlaps no input."""
    _check_fit("a restore", n, width, z, a, out, *(x for x in (b,) if x is not None))
    _library().vkcap_restore(_in(z), _in(a), ffi.NULL if b is None else _in(b), _out(out), n, width)


def unplane(plane: Any, n: int, width: int, k: int, out: Any) -> None:
    """Byte ``k`` of each of the first ``n`` elements of ``width`` bytes in ``out`` from ``plane[i]``:
    the inverse of :func:`plane`. The elements' other bytes are left as they are."""
    _check_plane(k, n, width, out, plane)
    _library().vkcap_unplane(_in(plane), n, width, k, _out(out))


def count_bits(bits: Any, n: int) -> int:
    """How many of the first ``n`` bits of ``bits`` (LSB first) are set."""
    _check_bits(bits, n)
    count: int = _library().vkcap_count_bits(_in(bits), n)
    return count


def unsparse(bits: Any, values: Any, n: int, width: int, out: Any) -> None:
    """The first ``n`` elements of ``width`` bytes into ``out`` from SPARSE's parts: the next of
    ``values`` where bit i of ``bits`` is set, zero elsewhere. ``values`` must hold exactly one element
    per set bit (:func:`count_bits` counts them)."""
    _check_fit("a SPARSE decoding", n, width, out)
    count, extra = divmod(memoryview(values).nbytes, width)
    if memoryview(bits).nbytes < -(-n // 8) or extra:
        raise ValueError(f"SPARSE parts of {n} elements of {width} bytes do not fit the buffers given")
    used = _library().vkcap_unsparse(_in(bits), _in(values), count, n, width, _out(out))
    if used != count:
        raise ValueError(f"{used} bits set for {count} values")
