"""Codec 2 (PLANES): fixed-width elements split into byte planes, each plane stored raw or as zstd.

Float snapshots barely compress as they are (zstd -3 saves about 8% on float32 data), because every
element's noisy low mantissa bytes sit between its well-behaved sign and exponent bytes. Gathering the
k-th byte of every element into plane k separates the two: the exponent plane shrinks to a few percent,
the noise planes are stored raw without a costly attempt at compressing them, and the whole is both
smaller and several times faster to produce than zstd over the interleaved bytes.

Stored layout (all integers little-endian; docs/trace-format.md is normative)::

    PLANES_HEADER   width w (u8), 7 reserved zero bytes
    w x PLANE_ENTRY stored length (u64), codec (u8: 0 raw, 1 zstd), 7 reserved zero bytes
    w plane bodies  plane k holds byte k of every element, raw_len // w bytes once decoded
    tail            the raw_len % w bytes after the last whole element, raw

This module is pure: no file I/O, no knowledge of traces. :func:`encode` (and :func:`encode_parts`) is
thread-safe given one compressor per thread, and splits planes with the compiled loop of
:mod:`capture.kernels` (no numpy in a recording process); :func:`decode` joins them with its inverse,
and bounds every allocation by the raw length it is told.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Final, Iterable

import zstandard

from capture import kernels

from ..limits import ZSTD_MAX_RATIO
from ..records import Codec as Id
from .raw import CODEC as RAW
from .zstd import CODEC as ZSTD
from .base import Buffer, CodecError, Coding, Decoding, can_hold

PLANES_HEADER: Final = struct.Struct("<B7x")
PLANE_ENTRY: Final = struct.Struct("<QB7x")
WIDTHS: Final = frozenset({2, 4, 8})
PLANE_RAW: Final = 0
PLANE_ZSTD: Final = 1
#: how each plane is stored, by the codec its entry names: raw, or one zstd frame
PART_CODECS: Final = {PLANE_RAW: RAW, PLANE_ZSTD: ZSTD}
#: what a plane whose stored length its codec cannot decode to ``n`` bytes is told
_CANNOT_HOLD: Final = {PLANE_RAW: "plane {k} holds {stored} bytes, expected {n}",
                       PLANE_ZSTD: "plane {k}: a zstd frame of {stored} bytes cannot hold {n} bytes"}

#: bytes of a plane compressed to decide whether the plane is worth compressing at all.
PROBE_BYTES: Final = 4 << 10
#: a plane is stored raw when its probe compresses to more than this share of its size.
RAW_IF_ABOVE: Final = 0.97
#: the planar form is chosen only when its probe is at least this much smaller than the plain one.
PLANAR_GAIN: Final = 0.95


class PlanesError(CodecError):
    """Stored bytes that do not follow the PLANES layout; the message names what is wrong."""


def overhead(width: int) -> int:
    """Bytes the layout adds to the planes' bodies: the header and one entry per plane."""
    return PLANES_HEADER.size + width * PLANE_ENTRY.size


def _planes(view: memoryview, width: int, out: Any) -> list[memoryview]:
    """Room for the ``width`` planes of ``view``'s ``n = len(view) // width`` whole elements: ``n``
    bytes each, in ``out`` when given (a writable buffer of at least ``width * n`` bytes), else new."""
    n = len(view) // width
    room = kernels.new_buffer(width * n) if out is None else memoryview(out).cast("B")
    return [room[k * n : (k + 1) * n] for k in range(width)]


def split(view: memoryview, width: int, out: Any = None) -> list[memoryview]:
    """The ``width`` byte planes of ``view``'s first ``n = len(view) // width`` elements, plane k
    holding byte k of each (bits 8k..8k+7 of the little-endian integer); written into ``out`` (a
    writable buffer of at least ``width * n`` bytes) when given."""
    view = memoryview(view).cast("B")
    planes = _planes(view, width, out)
    for k, plane in enumerate(planes):
        kernels.plane(view, len(plane), width, k, plane)
    return planes


def probe(view: memoryview, width: int, cctx: zstandard.ZstdCompressor, planar: bool = True) -> tuple[int, int] | None:
    """(plain, planar): the compressed sizes of ``PROBE_BYTES * width`` bytes from the middle of
    ``view`` as they are and as byte planes (each plane raw or compressed, whichever is smaller; the
    plain size again when ``planar`` is false); None when ``view`` is shorter than twice the probe."""
    size = PROBE_BYTES * width
    if len(view) < 2 * size:
        return None
    start = (len(view) // 2) // width * width
    window = view[start : start + size]
    plain = len(cctx.compress(window))
    if not planar:
        return plain, plain
    return plain, planar_size(window, width, cctx)


def planar_size(window: Any, width: int, cctx: zstandard.ZstdCompressor) -> int:
    """Bytes the planes of ``window`` (a buffer) take, each stored raw or compressed, whichever is
    smaller (the entries and the tail not counted): what :func:`probe` measures of its window."""
    total: int = sum(_plane_cost(p, cctx) for p in split(memoryview(window).cast("B"), width))
    return total


def prefers_planes(view: memoryview, width: int, cctx: zstandard.ZstdCompressor) -> bool:
    """Whether a probe from the middle of ``view`` compresses clearly better as planes than as is."""
    sizes = probe(view, width, cctx)
    return sizes is not None and sizes[1] < PLANAR_GAIN * sizes[0]


def _plane_cost(plane: memoryview, cctx: zstandard.ZstdCompressor) -> int:
    return min(len(plane), len(cctx.compress(plane)))


def encode_parts(
    view: memoryview,
    width: int,
    compressor: Callable[[int], zstandard.ZstdCompressor],
    out: Any = None,
    map_planes: Callable[..., Iterable[tuple[int, Any]]] = map,
) -> list[Any]:
    """The PLANES encoding of ``view`` as a list of buffers to be written one after the other: every
    plane zstd-compressed unless a probe of it shows it would not shrink (then it is stored raw).
    The planes are split into ``out`` (a writable buffer of at least ``len(view)`` bytes; a new one when
    None) and raw planes are returned as views of it, so ``out`` must stay untouched until the parts
    are written; no part aliases ``view``, which the caller may reuse at once. Not copying raw planes
    out, nor joining the parts, saves copies of the data made while holding the GIL.

    ``compressor(nbytes)`` returns the compressor for ``nbytes`` of input *of the calling thread*
    (zstd contexts are not thread-safe). ``map_planes`` (e.g. a thread pool's ``map``) may encode
    the planes in parallel: they are independent, and shifting and zstd release the GIL."""
    if width not in WIDTHS:
        raise ValueError(f"plane width {width} is not one of {sorted(WIDTHS)}")
    view = memoryview(view).cast("B")
    planes = _planes(view, width, out)
    n = len(view) // width

    def one_plane(k: int) -> tuple[int, Any]:
        plane = planes[k]
        kernels.plane(view, n, width, k, plane)
        probe = plane[:PROBE_BYTES]
        if len(compressor(len(probe)).compress(probe)) <= RAW_IF_ABOVE * len(probe):
            packed = compressor(len(plane)).compress(plane)
            if len(packed) < len(plane):
                return PLANE_ZSTD, packed
        return PLANE_RAW, plane

    coded = list(map_planes(one_plane, range(width)))
    entries = [PLANES_HEADER.pack(width), *(PLANE_ENTRY.pack(len(body), codec) for codec, body in coded)]
    return [b"".join(entries), *(body for _, body in coded), view[n * width :].tobytes()]


def encode(view: memoryview, width: int, compressor: Callable[[int], zstandard.ZstdCompressor]) -> bytes:
    """The PLANES encoding of ``view`` in one ``bytes``, planes one after the other (see :func:`encode_parts`)."""
    return b"".join(encode_parts(view, width, compressor))


def decode(stored: bytes | memoryview, raw_len: int, dctx: zstandard.ZstdDecompressor) -> memoryview:
    """The raw bytes of a PLANES encoding of ``raw_len`` bytes, as a read-only view of a buffer of
    their own; :class:`PlanesError` if ``stored`` is not exactly such an encoding. Never allocates
    more than ``raw_len`` plus one plane. (A view, not ``bytes``: copying a large result into a new
    ``bytes`` object would cost more than the whole decoding.)"""
    if len(stored) < PLANES_HEADER.size:
        raise PlanesError(f"PLANES data is {len(stored)} bytes, shorter than its header")
    (width,) = PLANES_HEADER.unpack_from(stored)
    if width not in WIDTHS:
        raise PlanesError(f"PLANES width {width} is not one of {sorted(WIDTHS)}")
    n, tail_len = divmod(raw_len, width)
    pos = overhead(width)
    if len(stored) < pos:
        raise PlanesError(f"PLANES data is {len(stored)} bytes, shorter than its {width} plane entries")
    bodies = _plane_bodies(stored, width, n, tail_len)
    raw = kernels.new_buffer(raw_len)  # only once every declared length is known to add up
    decoding = Decoding(dctx, width)
    for k, (codec, body) in enumerate(bodies):
        try:
            plane = PART_CODECS[codec].decode(body, n, decoding)
        except CodecError as exc:
            raise PlanesError(f"plane {k}: {exc}") from None
        if len(plane) != n:
            raise PlanesError(f"plane {k} holds {len(plane)} bytes, expected {n}")
        kernels.unplane(plane, n, width, k, raw)
    pos = len(stored) - tail_len
    raw[n * width :] = memoryview(stored)[pos:]
    return raw.toreadonly()


def _plane_bodies(stored: bytes | memoryview, width: int, n: int, tail_len: int) -> list[tuple[int, memoryview]]:
    """(codec, stored bytes) of each of the ``width`` planes of ``n`` bytes, after checking every
    entry: a known codec, a raw plane of exactly ``n`` bytes, a zstd plane that can expand to ``n``
    (``limits.ZSTD_MAX_RATIO``), and the planes and the ``tail_len``-byte tail filling ``stored``."""
    pos = overhead(width)
    bodies = []
    for k in range(width):
        stored_len, codec = PLANE_ENTRY.unpack_from(stored, PLANES_HEADER.size + k * PLANE_ENTRY.size)
        if stored_len > len(stored) - pos:
            raise PlanesError(f"plane {k} declares {stored_len} bytes, more than remain")
        part = PART_CODECS.get(codec)
        if part is None:
            raise PlanesError(f"plane {k} codec {codec} is unknown")
        if not can_hold(part, stored_len, n):
            raise PlanesError(_CANNOT_HOLD[codec].format(k=k, stored=stored_len, n=n))
        bodies.append((codec, memoryview(stored)[pos : pos + stored_len]))
        pos += stored_len
    if len(stored) - pos != tail_len:
        raise PlanesError(f"PLANES data ends with {len(stored) - pos} tail bytes, expected {tail_len}")
    return bodies


class Planes:
    name: Final = "PLANES"
    blob_id: Final = int(Id.PLANES)
    residual_id: Final = int(Id.PLANES)

    def encode(self, view: memoryview, coding: Coding) -> list[Any]:
        return encode_parts(view, coding.width, coding.compressor, coding.out, coding.map_parts)

    def decode(self, stored: Buffer, raw_len: int, decoding: Decoding) -> bytes | memoryview:
        return decode(stored, raw_len, decoding.dctx)

    def max_stored_len(self, raw_len: int) -> int:
        return raw_len  # a writer keeps planes only when they are smaller than the raw bytes

    def max_decoded_len(self, stored_len: int) -> int | None:
        return stored_len * ZSTD_MAX_RATIO  # planes are zstd frames and raw bytes


CODEC: Final = Planes()
