"""What every codec is: the :class:`Codec` protocol, its error, and what encoding and decoding are given.

A codec turns raw bytes into stored bytes and back, and says how far apart their lengths may be. It is
pure: no file I/O, no knowledge of records or of the file it is in. The table of codecs is
:mod:`capture.format.codecs` (``__init__``); docs/trace-format.md, section 4, is normative.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

import zstandard

Buffer = Any  # bytes, bytearray, memoryview: anything a memoryview can be made of


class CodecError(ValueError):
    """Stored bytes that do not follow the codec's layout; the message names what is wrong (no path, no offset)."""


@dataclass(frozen=True)
class Coding:
    """What an encoder is given besides the raw bytes.

    ``compressor(nbytes)`` returns the calling thread's zstd compressor for ``nbytes`` of input (zstd
    contexts are not thread-safe); ``width`` is the element width of byte planes and residuals; ``out``
    a writable scratch buffer of at least the raw length whose views the parts may be (None: a new one);
    ``map_parts`` (e.g. a thread pool's ``map``) may encode independent parts in parallel. ``zigzagged``
    false says a residual still holds plain differences, ``nonzero`` how many of its elements are not
    zero when that was counted (SPARSE uses both)."""

    compressor: Callable[[int], zstandard.ZstdCompressor]
    width: int = 4
    out: Any = None
    map_parts: Callable[..., Iterable[Any]] = map
    zigzagged: bool = True
    nonzero: int | None = None


@dataclass(frozen=True)
class Decoding:
    """What a decoder is given besides the stored bytes: the calling thread's zstd decompressor, the
    element width (a residual's, for SPARSE), and for a DELTA its references decoded (most recent first)
    and the lookup of its residual's codec."""

    dctx: zstandard.ZstdDecompressor
    width: int = 4
    references: Sequence[Buffer] = ()
    residual_codec: Callable[[int], "Codec"] | None = None


class Codec(Protocol):
    """One way of storing raw bytes. ``blob_id`` is its code in a BLOB header (:class:`records.Codec`),
    ``residual_id`` its code as a DELTA's residual codec; None where it may not appear."""

    name: str
    blob_id: int | None
    residual_id: int | None

    def encode(self, view: memoryview, coding: Coding) -> list[Any]:
        """The stored bytes of ``view``, as buffers to be written one after the other; none aliases ``view``
        unless this is the raw codec."""
        ...

    def decode(self, stored: Buffer, raw_len: int, decoding: Decoding) -> bytes | memoryview:
        """The raw bytes of ``stored``, at most ``raw_len`` of them; :class:`CodecError` if ``stored`` is
        not this codec's layout. Never allocates more than ``raw_len`` for the output (plus a part)."""
        ...

    def max_stored_len(self, raw_len: int) -> int:
        """The most stored bytes a conforming writer produces for ``raw_len`` raw bytes."""
        ...

    def max_decoded_len(self, stored_len: int) -> int | None:
        """The most raw bytes ``stored_len`` stored bytes can decode to; None when the stored bytes do
        not bound it (a DELTA decodes to its references' length)."""
        ...


def can_hold(codec: Codec, stored_len: int, raw_len: int) -> bool:
    """Whether ``stored_len`` stored bytes can decode to ``raw_len`` raw bytes with ``codec``: no more
    than its :meth:`~Codec.max_stored_len`, and no less than its :meth:`~Codec.max_decoded_len` allows.
    Readers check this before they allocate anything for the raw bytes."""
    most = codec.max_decoded_len(stored_len)
    return stored_len <= codec.max_stored_len(raw_len) and (most is None or raw_len <= most)
