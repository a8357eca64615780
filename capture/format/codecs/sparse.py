"""Residual codec 3 (SPARSE): a DELTA's residual that is mostly zero, stored as the bitmap of its
non-zero elements and those elements. Only a residual uses it (docs/trace-format.md section 4.4)::

    SPARSE         bitmap entry and values entry: stored length (u64), codec (u8: 0 raw, 1 zstd),
                   7 reserved zero bytes each; the bitmap (bit i, LSB first, set when element i is
                   not zero: ceil(n / 8) bytes once decoded), the non-zero elements in order
                   (w bytes each once decoded), the raw_len % w tail bytes

Pure: no file I/O. The loops are :mod:`capture.kernels`' (no numpy).
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Final, NamedTuple

from capture import kernels

from .raw import CODEC as RAW
from .zstd import CODEC as ZSTD
from .base import Buffer, CodecError, Coding, Decoding, can_hold

#: SPARSE's code as a DELTA's residual codec (it is no blob codec)
RESIDUAL_ID: Final = 3
#: SPARSE's two entries (as PLANES' plane entries): stored length, codec (0 raw, 1 zstd), reserved.
SPARSE_ENTRY: Final = struct.Struct("<QB7x")
#: how the bitmap and the values are each stored, by the codec their entry names: raw, or one zstd frame
PART_CODECS: Final = {0: RAW, 1: ZSTD}
SPARSE_PART_CODECS: Final = frozenset(PART_CODECS)
#: what a part whose stored length its codec cannot decode to its size is told
_CANNOT_HOLD: Final = {0: "SPARSE {what} holds {stored} bytes, expected {n}",
                       1: "SPARSE {what}: a zstd frame of {stored} bytes cannot hold {n} bytes"}


class SparseError(CodecError):
    """Stored bytes that do not follow the SPARSE layout; the message names what is wrong."""


class SparseResidual(NamedTuple):
    """A residual of ``size`` bytes as SPARSE stores it, before compression: the bitmap of its non-zero
    elements, those elements (``nonzero`` of them, zigzagged), and the ``size % width`` tail bytes."""

    bits: Any
    values: bytes | memoryview
    tail: bytes
    nonzero: int
    size: int

    def decode(self, width: int) -> memoryview:
        """The residual itself, into a new buffer."""
        n = self.size // width
        out = kernels.new_buffer(self.size)
        kernels.unsparse(self.bits, self.values, n, width, out)
        out[n * width :] = self.tail
        return out


def encode_sparse(residual: Any, width: int, compress: Callable[[Any], bytes], zigzagged: bool = True,
                  nonzero: int | None = None) -> list[Any]:
    """The SPARSE encoding of ``residual`` as buffers to write one after the other: its entries, the
    bitmap of its non-zero elements, those elements, the tail; each of the first two compressed by
    ``compress`` (one zstd frame of its input) unless that is not smaller. No part aliases ``residual``.
    With ``zigzagged`` false, ``residual`` holds plain differences (``compute(..., zigzag=False)``):
    their non-zero elements are the residual's (zigzag keeps zero at zero), and only those are turned
    into residual elements. ``nonzero``: how many elements are not zero, when the caller counted them."""
    view = memoryview(residual).cast("B")
    n = len(view) // width
    bits, values = kernels.sparse(view, n, width, zigzag=not zigzagged, nonzero=nonzero)
    return sparse_parts(bits, values, view[n * width :].tobytes(), compress)


def sparse_parts(bits: Any, values: Any, tail: bytes, compress: Callable[[Any], bytes]) -> list[Any]:
    """SPARSE's stored parts from its bitmap, values and tail (:func:`encode_sparse`); a part stored
    raw is copied when it is a view, so that none aliases a buffer its caller reuses."""
    parts: list[tuple[int, Any]] = []
    for body in (bits, values):
        length = memoryview(body).nbytes
        packed = compress(body) if length else b""
        if len(packed) < length:
            parts.append((1, packed))
        else:
            parts.append((0, bytes(body) if isinstance(body, memoryview) else body))
    entries = b"".join(SPARSE_ENTRY.pack(memoryview(body).nbytes, codec) for codec, body in parts)
    return [entries, *(body for _, body in parts), tail]


def sparse_size(residual: Any, width: int, compress: Callable[[Any], bytes], nonzero: int | None = None) -> int:
    """Bytes :func:`encode_sparse` stores for ``residual``."""
    return sum(memoryview(p).nbytes for p in encode_sparse(residual, width, compress, nonzero=nonzero))


def decode_sparse(stored: bytes | memoryview, raw_len: int, width: int, dctx: Any) -> memoryview:
    """The residual of ``raw_len`` bytes that SPARSE ``stored`` encodes, elements of ``width`` bytes;
    :class:`SparseError` unless ``stored`` is exactly such an encoding. Allocates ``raw_len`` bytes and
    the stored parts decoded (each bounded before it is inflated)."""
    n, tail = divmod(raw_len, width)
    nbits = -(-n // 8)
    head = 2 * SPARSE_ENTRY.size
    if len(stored) < head:
        raise SparseError(f"SPARSE data is {len(stored)} bytes, shorter than its {head}-byte entries")
    view = memoryview(stored).cast("B")
    pos = head
    bodies: list[tuple[int, memoryview]] = []
    for i in range(2):
        length, codec = SPARSE_ENTRY.unpack_from(view, i * SPARSE_ENTRY.size)
        if codec not in SPARSE_PART_CODECS:
            raise SparseError(f"SPARSE {('bitmap', 'values')[i]} codec {codec} is unknown")
        if length > len(view) - pos:
            raise SparseError(f"SPARSE {('bitmap', 'values')[i]} declares {length} bytes, more than remain")
        bodies.append((codec, view[pos : pos + length]))
        pos += length
    if len(view) - pos != tail:
        raise SparseError(f"SPARSE data ends with {len(view) - pos} tail bytes, expected {tail}")
    bits = _part(bodies[0], nbits, "bitmap", dctx)
    if n % 8 and bits[-1] >> (n % 8):
        raise SparseError("SPARSE bitmap has bits set beyond its last element")
    nonzero = kernels.count_bits(bits, n)
    values = _part(bodies[1], nonzero * width, "values", dctx)
    return SparseResidual(bits, values, view[pos:].tobytes(), nonzero, raw_len).decode(width)


def _part(part: tuple[int, memoryview], size: int, what: str, dctx: Any) -> bytes | memoryview:
    codec, body = part
    decoder = PART_CODECS[codec]  # known: checked with its entry
    if not can_hold(decoder, len(body), size):
        raise SparseError(_CANNOT_HOLD[codec].format(what=what, stored=len(body), n=size))
    try:
        data = decoder.decode(body, size, Decoding(dctx))
    except CodecError as exc:
        raise SparseError(f"SPARSE {what}: {exc}") from None
    if len(data) != size:
        raise SparseError(f"SPARSE {what} holds {len(data)} bytes, expected {size}")
    return data


class Sparse:
    name: Final = "SPARSE"
    blob_id: Final = None
    residual_id: Final = RESIDUAL_ID

    def encode(self, view: memoryview, coding: Coding) -> list[Any]:
        return encode_sparse(view, coding.width, coding.compressor(len(view)).compress, coding.zigzagged,
                             coding.nonzero)

    def decode(self, stored: Buffer, raw_len: int, decoding: Decoding) -> bytes | memoryview:
        return decode_sparse(stored, raw_len, decoding.width, decoding.dctx)

    def max_stored_len(self, raw_len: int) -> int:
        return raw_len  # a writer keeps a residual's encoding only when it is smaller than the residual

    def max_decoded_len(self, stored_len: int) -> int | None:
        return None  # a zstd bitmap of a few bytes may stand for any number of zero elements


CODEC: Final = Sparse()
