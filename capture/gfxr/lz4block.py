"""LZ4 block decompression (the raw block format, no frame), for captures GFXReconstruct compressed with
LZ4, its default. Written from the LZ4 block format description: a sequence is a token (literal length
high nibble, match length low nibble, 15 meaning more length bytes follow), the literals, a 2-byte
little-endian offset and the match (length + 4), copied byte by byte as it may overlap itself. The last
sequence has literals only. The output is bounded by ``size``; anything malformed is an :class:`LZ4Error`."""
from __future__ import annotations


class LZ4Error(ValueError):
    """The bytes are not one LZ4 block of the expected size."""


def _length(src: bytes, pos: int, base: int) -> tuple[int, int]:
    if base != 15:
        return base, pos
    while True:
        if pos >= len(src):
            raise LZ4Error("length runs past the end")
        byte = src[pos]
        pos += 1
        base += byte
        if byte != 255:
            return base, pos


def decompress(src: bytes, size: int) -> bytes:
    """The ``size`` bytes that the LZ4 block ``src`` holds."""
    out = bytearray()
    pos = 0
    while pos < len(src):
        token = src[pos]
        pos += 1
        literals, pos = _length(src, pos, token >> 4)
        if pos + literals > len(src) or len(out) + literals > size:
            raise LZ4Error("literals run past the end")
        out += src[pos:pos + literals]
        pos += literals
        if pos >= len(src):
            break
        if pos + 2 > len(src):
            raise LZ4Error("truncated match offset")
        offset = src[pos] | src[pos + 1] << 8
        pos += 2
        match, pos = _length(src, pos, token & 15)
        match += 4
        if offset == 0 or offset > len(out) or len(out) + match > size:
            raise LZ4Error("bad match")
        start = len(out) - offset
        if offset >= match:
            out += out[start:start + match]
        else:
            for k in range(match):
                out.append(out[start + k])
    if len(out) != size:
        raise LZ4Error(f"{len(out)} bytes, expected {size}")
    return bytes(out)
