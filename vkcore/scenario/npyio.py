"""Reading and writing ``.npy`` files the way the reference runner does.

Reading never loads the payload: :func:`read_header` returns where the raw bytes are, so inputs can be
copied (or memory-mapped) straight into host-visible Vulkan memory. Writing produces byte-identical
files to ARM's ``scenario-runner`` (format 1.0, its compact header spelling, 16-byte alignment) and is
atomic: the data goes to a temporary name in the same folder, then is renamed over the destination.
"""
from __future__ import annotations

import ast
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..outputs import write_atomic

MAGIC = b"\x93NUMPY"
# Plain dtype strings ("<f4", "|u1", "<U8"): byte order, kind, size. Others go through numpy.
SIMPLE_DESCR = re.compile(r"^[<>|=]?([biufcmMSUV?])(\d+)$")
BYTES_PER_UNIT = {"U": 4}  # "<U8" is 8 characters of 4 bytes
MAX_HEADER = 1 << 20  # a header larger than this is not a real .npy file


class NpyFormatError(ValueError):
    """The file is not a readable ``.npy`` file; the message says why."""


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header declares and where its payload starts."""

    descr: str
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset: int
    file_size: int

    @property
    def itemsize(self) -> int:
        return descr_itemsize(self.descr)

    @property
    def count(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize


def read_header(path: str | Path) -> NpyHeader:
    """Parse the header of ``path`` without reading the payload.

    Guarantees: the header is parsed with ``ast.literal_eval`` (never ``eval``), its dtype is a plain
    (non-object) numpy dtype, and the file is at least as long as the payload the header declares.
    Raises :class:`NpyFormatError` with a reason otherwise.
    """
    with open(path, "rb") as f:
        lead = f.read(10)
        if len(lead) < 10 or lead[:6] != MAGIC:
            raise NpyFormatError("not a .npy file (bad magic)")
        major = lead[6]
        if major == 1:
            (hlen,) = struct.unpack("<H", lead[8:10])
            start = 10
        elif major in (2, 3):
            rest = f.read(2)
            if len(rest) < 2:
                raise NpyFormatError("truncated .npy header")
            (hlen,) = struct.unpack("<I", lead[8:10] + rest)
            start = 12
        else:
            raise NpyFormatError(f"unsupported .npy format version {major}.{lead[7]}")
        if hlen > MAX_HEADER:
            raise NpyFormatError("implausibly large .npy header")
        raw = f.read(hlen)
        if len(raw) < hlen:
            raise NpyFormatError("truncated .npy header")
        size = os.fstat(f.fileno()).st_size
    try:
        meta = ast.literal_eval(raw.decode("latin1" if major < 3 else "utf8"))
        descr, fortran, shape = meta["descr"], bool(meta["fortran_order"]), tuple(int(d) for d in meta["shape"])
        if not (isinstance(descr, str) and SIMPLE_DESCR.match(descr)):
            descr = _numpy_descr(descr)
    except NpyFormatError:
        raise
    except Exception as exc:  # literal_eval/dtype raise many kinds; all mean "bad header"
        raise NpyFormatError(f"unreadable .npy header ({exc})") from None
    if any(d < 0 for d in shape):
        raise NpyFormatError("negative dimension in .npy header")
    header = NpyHeader(descr, fortran, shape, start + hlen, size)
    if size - header.data_offset < header.nbytes:
        raise NpyFormatError(
            f"truncated .npy payload: header declares {header.nbytes} bytes, file holds {size - header.data_offset}"
        )
    return header


def descr_itemsize(descr: str) -> int:
    """Bytes per element of a dtype string, without importing numpy for the plain ones."""
    m = SIMPLE_DESCR.match(descr)
    if m:
        return int(m.group(2)) * BYTES_PER_UNIT.get(m.group(1), 1)
    # lazy: vkcap run imports this module, not numpy
    import numpy as np

    return np.dtype(descr).itemsize


def _numpy_descr(descr: object) -> str:
    """Validate a non-plain (e.g. structured) descr with numpy; refuse object dtypes."""
    # lazy: vkcap run imports this module, not numpy
    import numpy as np

    dtype = np.dtype(descr)  # type: ignore[call-overload]
    if dtype.hasobject:
        raise NpyFormatError("object arrays are not allowed in .npy inputs")
    return dtype.str if dtype.names is None else str(dtype.descr)


def reference_header(descr: str, shape: Iterable[int]) -> bytes:
    """The header bytes the reference runner writes for an array of ``descr`` and ``shape``."""
    dims = tuple(int(d) for d in shape)
    shape_txt = f"({dims[0]},)" if len(dims) == 1 else "(" + ", ".join(str(d) for d in dims) + ")"
    text = "{'descr': '" + descr + "','fortran_order': False,'shape': " + shape_txt + "}"
    body = text.encode("latin1")
    total = len(MAGIC) + 2 + 2 + len(body) + 1
    pad = 16 - total % 16  # the reference pads with 1 to 16 spaces, never 0
    body = body + b" " * pad + b"\n"
    return MAGIC + b"\x01\x00" + struct.pack("<H", len(body)) + body


def write_flat_int8(path: str | Path, payload: bytes | memoryview) -> None:
    """Write raw bytes as a flat int8 array, exactly as the reference runner writes buffer outputs."""
    n = len(payload)
    write_atomic(path, (reference_header("|i1", (n,)), payload))


def write_typed(path: str | Path, descr: str, shape: Iterable[int], payload: bytes | memoryview) -> None:
    """Write raw bytes as an array of ``descr`` and ``shape`` with the reference runner's header."""
    write_atomic(path, (reference_header(descr, shape), payload))
