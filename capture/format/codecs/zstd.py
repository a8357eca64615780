"""Codec 1 (ZSTD): the raw bytes as one zstd frame, decoded with its output bounded. Each zstd plane
of codec 2 and each zstd part of a SPARSE residual is such a frame too (docs/trace-format.md, section
8.2, step 3). Pure: no file I/O, no numpy."""
from __future__ import annotations

from typing import Any, Final

import zstandard

from ..limits import ZSTD_MAX_RATIO, zstd_can_hold
from ..records import Codec as Id
from .base import Buffer, CodecError, Coding, Decoding


class FrameError(CodecError):
    """The bytes are not one zstd frame of the expected size; the message says what is wrong."""


def inflate(frame: bytes | memoryview, size: int, dctx: zstandard.ZstdDecompressor) -> bytes:
    """The bytes of ``frame``, which must be a single zstd frame of at most ``size`` bytes: a frame that
    declares another content size is refused before anything is allocated for it, and the output is
    bounded by ``size``. A frame too short to expand to ``size`` bytes (``limits.ZSTD_MAX_RATIO``) is
    refused before anything is allocated too. Callers check that exactly ``size`` bytes came out."""
    if not zstd_can_hold(len(frame), size):
        raise FrameError(f"a zstd frame of {len(frame)} bytes cannot hold {size} bytes")
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise FrameError(f"bad zstd frame header: {exc}") from None
    if declared not in (-1, size):  # zstandard would allocate the declared size: refuse first
        raise FrameError(f"zstd frame declares {declared} bytes, expected {size}")
    try:
        return dctx.decompress(frame, max_output_size=size, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise FrameError(f"zstd decompression failed: {exc}") from None


class Zstd:
    name: Final = "ZSTD"
    blob_id: Final = int(Id.ZSTD)
    residual_id: Final = int(Id.ZSTD)

    def encode(self, view: memoryview, coding: Coding) -> list[Any]:
        return [coding.compressor(len(view)).compress(view)]

    def decode(self, stored: Buffer, raw_len: int, decoding: Decoding) -> bytes | memoryview:
        return inflate(stored, raw_len, decoding.dctx)

    def max_stored_len(self, raw_len: int) -> int:
        return raw_len + (raw_len >> 8) + 1024  # >= ZSTD_COMPRESSBOUND(raw_len)

    def max_decoded_len(self, stored_len: int) -> int | None:
        return stored_len * ZSTD_MAX_RATIO


CODEC: Final = Zstd()
