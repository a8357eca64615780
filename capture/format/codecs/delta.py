"""Codec 3 (DELTA): a blob stored as its difference from one or two earlier blobs of the same length.

Frame-coherent data changes little from one frame to the next: an accumulator adds about the same
amount every frame, a simulation evolves smoothly, an image sequence keeps most of its pixels. The raw
bytes are read as little-endian unsigned integers of ``w`` bytes, and each element is predicted from
the same element of the references:

- DIFF (1 reference ``a``): the prediction is ``a``;
- LINEAR (2 references ``a``, ``b``, ``a`` the more recent): the prediction is ``2a - b``, the next
  step of a straight line through the last two (an accumulator's constant increment, a smooth motion).

The residual element is ``zigzag(x - prediction)`` in ``w``-byte modular arithmetic, so that small
differences of either sign become small numbers (0, -1, 1, -2, ... become 0, 1, 2, 3, ...) whose high
bytes are zero; the ``raw_len % w`` bytes after the last whole element are copied into the residual as
they are. The residual (``raw_len`` bytes) is then stored with one of the whole-blob codecs (raw, one
zstd frame, byte planes), or as SPARSE: a bitmap of its non-zero elements and those elements. A
prediction that is exact for most elements (an accumulator's constant increment, the still parts of
an image) leaves a residual that is mostly zero, which SPARSE stores smaller than zstd does, and
several times faster.

Stored layout (all integers little-endian; docs/trace-format.md section 4.4 is normative)::

    DELTA_HEADER   transform (u8: 1 DIFF, 2 LINEAR), width w (u8: 1, 2, 4, 8),
                   residual codec (u8: 0 raw, 1 zstd, 2 planes, 3 sparse), 5 reserved zero bytes
    references     1 (DIFF) or 2 (LINEAR) content keys, 16 bytes each, most recent first
    residual       the residual's stored bytes under the residual codec

    SPARSE         bitmap entry and values entry: stored length (u64), codec (u8: 0 raw, 1 zstd),
                   7 reserved zero bytes each; the bitmap (bit i, LSB first, set when element i is
                   not zero: ceil(n / 8) bytes once decoded), the non-zero elements in order
                   (w bytes each once decoded), the raw_len % w tail bytes

This module is pure: no file I/O, no knowledge of traces. Encoding and decoding run the compiled loops
of :mod:`capture.kernels` (one pass over memory each, and no numpy in a process that records or reads
traces); residuals are computed in chunks of :data:`CHUNK_BYTES` that a caller may spread over threads.
A residual bound for SPARSE is computed as its bitmap and values in one pass (:func:`compute_sparse`):
the residual itself, mostly zeros, is never written and read back.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Iterable, NamedTuple, Sequence

from capture import kernels

from ..records import Codec as Id
from .base import Buffer, CodecError, Coding, Decoding
from .sparse import RESIDUAL_ID as SPARSE_ID
from .sparse import SparseResidual, sparse_size

DELTA_HEADER: Final = struct.Struct("<BBB5x")
KEY_BYTES: Final = 16
DIFF: Final = 1
LINEAR: Final = 2
#: references each transform takes.
REF_COUNT: Final = {DIFF: 1, LINEAR: 2}
WIDTHS: Final = (1, 2, 4, 8)
#: codecs the residual may be stored with: NONE, ZSTD, PLANES (what capture.format.records.Codec calls
#: them) and SPARSE, which only a residual uses (the codecs whose ``residual_id`` is set).
RAW: Final = 0
SPARSE: Final = SPARSE_ID
INNER_CODECS: Final = frozenset({0, 1, 2, SPARSE})
#: element width the writer uses: 4 bytes (float32, int32), the commonest element of a snapshot.
WIDTH: Final = 4
#: bytes of the residual computed at a time (by one thread, when the caller spreads chunks over threads).
CHUNK_BYTES: Final = 1 << 20
#: bytes from the middle of a blob whose residuals decide between DIFF and LINEAR, and their codec.
PROBE_BYTES: Final = 16 << 10
#: SPARSE is chosen over one zstd frame when its probe is at most 1 / SPARSE_BIAS times as large: it
#: is several times faster, and its fixed overhead weighs more in a probe than in the whole residual.
SPARSE_BIAS: Final = 0.8


class DeltaError(CodecError):
    """Stored bytes that do not follow the DELTA layout; the message names what is wrong."""


class DeltaHeader(NamedTuple):
    transform: int
    width: int
    inner: int  # the residual's codec
    refs: tuple[bytes, ...]  # content keys, most recent first
    size: int  # bytes of the header and the references: the residual's stored bytes follow


@dataclass
class Residual:
    """What a writer needs to store a blob as a delta: the transform, the references' content keys
    and the residual (``raw_len`` bytes, computed by :func:`compute`; or the plain differences, until
    :meth:`finish`, see ``zigzagged``); the residual codec a probe
    chose and that probe's compressed size, over :data:`PROBE_BYTES` (None for a blob too small to
    probe: every codec is then tried). ``release``, when set, gives the residual's buffer back once
    the blob is encoded (no encoding keeps a view of it)."""

    transform: int
    width: int
    refs: tuple[bytes, ...]
    #: the residual (or the plain differences); None when it was computed as its SPARSE parts only
    data: memoryview | None
    inner: int | None = None
    probe: int | None = None
    release: Callable[[], None] | None = None
    #: (plain, planar) sizes of the probe of the whole blob (as TraceWriter._probe measures it), made
    #: with the residual's probe
    whole_probe: tuple[int, int] | None = None
    #: when the choice was made without a probe: what the caller expects the blob's own encoding to
    #: take (e.g. from an earlier snapshot's probe); a delta at most DELTA_SURE of it is kept without
    #: encoding the whole blob
    whole_estimate: int | None = None
    #: whether ``data`` holds the residual, or still the plain differences (``compute(..., zigzag=False)``)
    zigzagged: bool = True
    #: how many of its elements are not zero, when the code that computed it counted them
    nonzero: int | None = None
    #: the residual's SPARSE parts, when it was computed as those (:func:`compute_sparse`) and not as
    #: ``data``
    sparse: SparseResidual | None = None

    #: bytes of the residual (the blob's length)
    size: int = field(init=False)

    def __post_init__(self) -> None:
        if self.data is not None:
            self.size = self.data.nbytes
        elif self.sparse is not None:
            self.size = self.sparse.size
        else:
            raise ValueError("a residual with neither its data nor its SPARSE parts")

    def finish(self) -> None:
        """Make ``data`` the residual (zigzag the differences, in place) unless it is already."""
        if not self.zigzagged:
            zigzag_in_place(self.full(), self.width)
            self.zigzagged = True

    def full(self) -> memoryview:
        """The residual's bytes (the plain differences while not ``zigzagged``): ``data``, decoded from
        the SPARSE parts into a new buffer the first time when it was computed as those only."""
        if self.data is None:
            assert self.sparse is not None  # one of the two: __post_init__
            self.data = self.sparse.decode(self.width)
        return self.data

    def done(self) -> None:
        release, self.release = self.release, None
        if release is not None:
            release()


def header_size(transform: int) -> int:
    return DELTA_HEADER.size + KEY_BYTES * REF_COUNT[transform]


def pack_header(transform: int, width: int, inner: int, refs: Sequence[bytes]) -> bytes:
    if REF_COUNT.get(transform) != len(refs) or width not in WIDTHS or inner not in INNER_CODECS:
        raise ValueError(f"no DELTA header for transform {transform}, width {width}, inner codec {inner}, {len(refs)} references")
    return DELTA_HEADER.pack(transform, width, inner) + b"".join(refs)


def unpack_header(stored: bytes | memoryview) -> DeltaHeader:
    """The header at the start of DELTA stored bytes; :class:`DeltaError` if it is malformed."""
    if len(stored) < DELTA_HEADER.size:
        raise DeltaError(f"DELTA data is {len(stored)} bytes, shorter than its header")
    transform, width, inner = DELTA_HEADER.unpack_from(stored)
    if transform not in REF_COUNT:
        raise DeltaError(f"DELTA transform {transform} is unknown")
    if width not in WIDTHS:
        raise DeltaError(f"DELTA width {width} is not one of {list(WIDTHS)}")
    if inner not in INNER_CODECS:
        raise DeltaError(f"DELTA residual codec {inner} is unknown")
    size = header_size(transform)
    if len(stored) < size:
        raise DeltaError(f"DELTA data is {len(stored)} bytes, shorter than its {REF_COUNT[transform]} reference(s)")
    refs = tuple(bytes(stored[at : at + KEY_BYTES]) for at in range(DELTA_HEADER.size, size, KEY_BYTES))
    return DeltaHeader(transform, width, inner, refs, size)


# --------------------------------------------------------------------------------------------------
# the transform


def _operands(raw: Any, refs: Sequence[Any], transform: int, width: int, keep: Any
              ) -> tuple[memoryview, memoryview, memoryview | None, memoryview | None]:
    """``raw``, its references (the second None for DIFF) and ``keep`` as byte views, checked: the
    transform takes that many references, the width is known, and all have ``raw``'s length."""
    raw = memoryview(raw).cast("B")
    size = len(raw)
    if REF_COUNT.get(transform) != len(refs) or width not in WIDTHS:
        raise ValueError(f"transform {transform} of width {width} takes {REF_COUNT.get(transform)} references, got {len(refs)}")
    if any(memoryview(r).nbytes != size for r in refs) or (keep is not None and memoryview(keep).nbytes != size):
        raise ValueError("a delta's references must have the length of the data")
    b = memoryview(refs[1]).cast("B") if transform == LINEAR else None
    return raw, memoryview(refs[0]).cast("B"), b, None if keep is None else memoryview(keep).cast("B")


def compute(raw: Any, refs: Sequence[Any], transform: int, width: int, out: Any = None,
            keep: Any = None, map_chunks: Callable[..., Iterable[Any]] = map,
            zigzag: bool = True) -> memoryview:
    """The residual of ``raw`` against ``refs`` (buffers of ``len(raw)`` bytes, most recent first):
    ``len(raw)`` bytes (``out[:len(raw)]`` when ``out``, a writable buffer, is given; else a new
    buffer), as a writable memoryview of format ``B``. With ``keep`` (a writable buffer of ``len(raw)``
    bytes, which may be the last reference itself: each element of it is read before it is written),
    ``raw`` is copied into it on the way, while in the cache. ``map_chunks`` (e.g. a thread pool's
    ``map``) may compute the chunks in parallel: they are independent. Without ``zigzag`` the elements
    are the plain differences ``x - p``, which :func:`zigzag_in_place` (or :func:`.sparse.encode_sparse`, for
    the values it keeps) turns into the residual later: a recorder computes differences in frame
    order, one frame at a time, and leaves the rest to the threads that encode frames in parallel."""
    return compute_counted(raw, refs, transform, width, out, keep, map_chunks, zigzag)[0]


def compute_counted(raw: Any, refs: Sequence[Any], transform: int, width: int, out: Any = None,
                    keep: Any = None, map_chunks: Callable[..., Iterable[Any]] = map,
                    zigzag: bool = True) -> tuple[memoryview, int]:
    """:func:`compute`, and how many of the residual's whole elements are not zero."""
    raw, a, b, kept = _operands(raw, refs, transform, width, keep)
    size = len(raw)
    n = size // width
    res = (kernels.new_buffer(size) if out is None else memoryview(out).cast("B")[:size])
    step = max(1, CHUNK_BYTES // width) * width

    def chunk(lo: int) -> int:
        hi = min(n * width, lo + step)
        return kernels.residual(raw[lo:hi], a[lo:hi], None if b is None else b[lo:hi], res[lo:hi],
                                None if kept is None else kept[lo:hi], (hi - lo) // width, width, zigzag)

    zeros = sum(map_chunks(chunk, range(0, n * width, step)))
    res[n * width :] = raw[n * width :]
    if kept is not None:
        kept[n * width :] = raw[n * width :]
    return res, n - zeros


def zigzag_in_place(differences: Any, width: int) -> None:
    """Turn the plain differences that ``compute(..., zigzag=False)`` left in ``differences`` (a
    writable buffer) into the residual it would have computed."""
    kernels.zigzag(differences, memoryview(differences).nbytes // width, width)


def compute_sparse(raw: Any, refs: Sequence[Any], transform: int, width: int, out: Any = None,
                   keep: Any = None, map_chunks: Callable[..., Iterable[Any]] = map) -> SparseResidual:
    """:func:`compute`'s residual as its SPARSE parts, in one pass, without the residual itself (a
    mostly zero one is then written and read back by no one): the bitmap in a new buffer, the values
    at the start of ``out`` (a writable buffer of ``len(raw)`` bytes; a new one when not given), which
    the result views. ``keep``, ``map_chunks`` as for :func:`compute`; each chunk's values go after
    its predecessors' once all are done."""
    raw, a, b, kept = _operands(raw, refs, transform, width, keep)
    size = len(raw)
    n = size // width
    values = kernels.new_buffer(size) if out is None else memoryview(out).cast("B")[:size]
    if values.nbytes < size:
        raise ValueError(f"{values.nbytes} bytes of room for the values of {size} bytes of data")
    bits = kernels.new_buffer(-(-n // 8))
    step = max(8, CHUNK_BYTES // width // 8 * 8) * width  # whole bitmap bytes a chunk

    def chunk(lo: int) -> tuple[int, int]:
        hi = min(n * width, lo + step)
        count = kernels.residual_sparse(raw[lo:hi], a[lo:hi], None if b is None else b[lo:hi],
                                        None if kept is None else kept[lo:hi], bits[lo // width // 8 :],
                                        values[lo:hi], (hi - lo) // width, width)
        return lo, count * width

    at = 0
    for lo, length in map_chunks(chunk, range(0, n * width, step)):
        if lo != at:
            values[at : at + length] = values[lo : lo + length]
        at += length
    tail = raw[n * width :].tobytes()
    if kept is not None:
        kept[n * width :] = tail
    return SparseResidual(bits, values[:at], tail, at // width, size)


def restore(residual: Any, refs: Sequence[Any], transform: int, width: int) -> memoryview:
    """The raw bytes whose residual against ``refs`` is ``residual``: the inverse of :func:`compute`,
    as a read-only view of a new buffer. The caller checked the lengths (``refs`` as long as ``residual``)."""
    residual = memoryview(residual).cast("B")
    size = len(residual)
    n = size // width
    raw = kernels.new_buffer(size)
    kernels.restore(residual, refs[0], refs[1] if transform == LINEAR else None, raw, n, width)
    raw[n * width :] = residual[n * width :]
    return raw.toreadonly()


# --------------------------------------------------------------------------------------------------
# choosing


def probe_window(size: int, width: int = WIDTH) -> slice:
    """The bytes of a blob of ``size`` bytes that probes look at: PROBE_BYTES from its middle, on an
    element boundary (the bytes a PLANES probe looks at, too); the whole blob when it is smaller than
    twice that."""
    if size < 2 * PROBE_BYTES:
        return slice(0, size)
    start = (size // 2) // width * width
    return slice(start, start + PROBE_BYTES)


def choose(raw: Any, refs: Sequence[Any], width: int, compress: Callable[[Any], bytes],
           planar_size: Callable[[Any], int] | None) -> tuple[int, int, int]:
    """(transform, residual codec, probe size): the transform (DIFF, or LINEAR when two references are
    given) and residual codec whose residual over the probe window compresses smallest, and that size.
    When a transform leaves at least half of the window's elements zero (the more zeros, the better),
    it is SPARSE (or one zstd frame when clearly smaller); otherwise one zstd frame or PLANES (when
    ``planar_size`` measures it), whichever is smaller, for the transform whose residual is smaller.
    ``compress`` returns one zstd frame of its input."""
    window = probe_window(memoryview(raw).nbytes, width)
    sliced = [memoryview(b).cast("B")[window] for b in (raw, *refs[:2])]
    residuals = []
    for transform in (DIFF, LINEAR)[: min(2, len(refs))]:
        res, nonzero = compute_counted(sliced[0], sliced[1 : 1 + REF_COUNT[transform]], transform, width)
        n = res.nbytes // width
        residuals.append((n - nonzero, n, transform, res))
    zeros, n, transform, res = max(residuals, key=lambda r: r[0])
    if 2 * zeros >= n:
        size, plain = sparse_size(res, width, compress, nonzero=n - zeros), len(compress(res))
        return (transform, SPARSE, size) if SPARSE_BIAS * size <= plain else (transform, 1, plain)
    best: tuple[int, int, int] | None = None
    for _, _, transform, res in residuals:
        candidates = [(len(compress(res)), 1)]
        if planar_size is not None:
            candidates.append((planar_size(res), 2))
        size, inner = min(candidates)
        if best is None or size < best[2]:
            best = (transform, inner, size)
    assert best is not None
    return best


class Delta:
    name: Final = "DELTA"
    blob_id: Final = int(Id.DELTA)
    residual_id: Final = None

    def encode(self, view: memoryview, coding: Coding) -> list[Any]:
        raise TypeError("a DELTA is encoded from its Residual (TraceWriter.residual, then compress_blob)")

    def decode(self, stored: Buffer, raw_len: int, decoding: Decoding) -> bytes | memoryview:
        """The raw bytes: the residual after the header decoded with its codec (``decoding.residual_codec``),
        then restored against ``decoding.references`` (decoded, of ``raw_len`` bytes, in the header's order)."""
        assert decoding.residual_codec is not None
        header = unpack_header(stored)
        body = memoryview(stored)[header.size :]
        residual = decoding.residual_codec(header.inner).decode(body, raw_len, Decoding(decoding.dctx, header.width))
        return restore(residual, decoding.references, header.transform, header.width)

    def max_stored_len(self, raw_len: int) -> int:
        return raw_len  # a writer keeps a delta only when it is smaller than the blob's whole encoding

    def max_decoded_len(self, stored_len: int) -> int | None:
        return None  # a DELTA decodes to its references' length


CODEC: Final = Delta()
