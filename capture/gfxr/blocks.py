"""The block layer of a GFXReconstruct capture file, read directly (the documented format's facts, our code).

File: a 16-byte header (``GFXR``, version, option count) then that many (key, value) uint32 pairs; option 1
is the compression of blocks (0 none, 1 LZ4, 3 zstd). Then blocks, each a 12-byte header (uint64 body size,
uint32 type) and its body. Blocks are numbered from 0 in file order: the same ``index`` that
``gfxrecon-convert`` prints. Types used here: 4 a function call, 3 a meta command, and either with bit 31
set for its compressed form. A function call's body: uint32 call id, uint64 thread id, (compressed: uint64
uncompressed size), then the parameters. A meta command's body: uint32 id (family << 16 | type), then for
fill-memory (type 2): uint64 thread id, memory id, offset, size, then the bytes (compressed: the rest).

Guarantees: every size is checked against the bytes present and :data:`MAX_BLOCK` before anything is
allocated; a truncated or garbled file is a :class:`CaptureError` naming the block and its file offset,
never an exception from deeper down or an unbounded allocation.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import zstandard

from vkcore.errors import ScenarioError

from .lz4block import LZ4Error, decompress as lz4_decompress

MAGIC = b"GFXR"
MAX_BLOCK = 1 << 30  # one block's body, compressed or not
MAX_OPTIONS = 64
COMPRESSED = 0x80000000
FUNCTION_CALL, META_COMMAND = 4, 3
FILL_MEMORY = 2
CODECS = {0: "none", 1: "lz4", 2: "zlib", 3: "zstd"}


class CaptureError(ScenarioError):
    """The file is not a readable GFXReconstruct capture; the message says where and why."""


@dataclass(frozen=True)
class FillMemory:
    """A host write the capture layer saw into mapped memory (memory is the capture's handle id)."""

    index: int
    memory: int
    offset: int
    data: bytes


@dataclass(frozen=True)
class Blocks:
    """What the importer needs from the binary: each function call's parameter bytes by block index, and
    the fill-memory commands by block index."""

    codec: str
    calls: dict[int, bytes]
    fills: dict[int, FillMemory]
    count: int


def _inflate(codec: str, data: bytes, size: int, where: str) -> bytes:
    if size > MAX_BLOCK:
        raise CaptureError(f"{where}: declares {size} uncompressed bytes (more than {MAX_BLOCK})")
    try:
        if codec == "zstd":
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        elif codec == "lz4":
            out = lz4_decompress(data, size)
        else:
            raise CaptureError(f"{where}: compressed with {codec}, which vkcap cannot read "
                               "(capture with GFXRECON_CAPTURE_COMPRESSION_TYPE=ZSTD, LZ4 or NONE)")
    except (zstandard.ZstdError, LZ4Error) as exc:
        raise CaptureError(f"{where}: cannot decompress: {exc}") from None
    if len(out) != size:
        raise CaptureError(f"{where}: decompressed to {len(out)} bytes, expected {size}")
    return out


def read_blocks(data: bytes) -> Blocks:
    """Every block of the capture ``data`` (the whole file), as :class:`Blocks`."""
    if len(data) < 16 or data[:4] != MAGIC:
        raise CaptureError("not a GFXReconstruct capture (no GFXR header)")
    (options,) = struct.unpack_from("<I", data, 12)
    if options > MAX_OPTIONS or 16 + 8 * options > len(data):
        raise CaptureError(f"header: {options} options do not fit the file")
    settings = dict(struct.iter_unpack("<II", data[16:16 + 8 * options]))
    codec = CODECS.get(settings.get(1, 0), f"codec {settings.get(1)}")
    calls: dict[int, bytes] = {}
    fills: dict[int, FillMemory] = {}
    pos, index = 16 + 8 * options, 0
    while pos < len(data):
        where = f"block {index} (file offset {pos})"
        if pos + 12 > len(data):
            raise CaptureError(f"{where}: truncated header")
        size, kind = struct.unpack_from("<QI", data, pos)
        if size > MAX_BLOCK or pos + 12 + size > len(data):
            raise CaptureError(f"{where}: body of {size} bytes runs past the end of the file (truncated capture?)")
        body = data[pos + 12:pos + 12 + size]
        base, compressed = kind & ~COMPRESSED, bool(kind & COMPRESSED)
        if base == FUNCTION_CALL:
            head = 20 if compressed else 12
            if size < head:
                raise CaptureError(f"{where}: function call block too short")
            params = body[head:]
            if compressed:
                (full,) = struct.unpack_from("<Q", body, 12)
                params = _inflate(codec, params, full, where)
            calls[index] = params
        elif base == META_COMMAND and size >= 4:
            (meta,) = struct.unpack_from("<I", body, 0)
            if meta & 0xFFFF == FILL_MEMORY:
                if size < 36:
                    raise CaptureError(f"{where}: fill-memory command too short")
                _thread, memory, offset, length = struct.unpack_from("<QQQQ", body, 4)
                payload = body[36:]
                payload = _inflate(codec, payload, length, where) if compressed else payload
                if len(payload) != length:
                    raise CaptureError(f"{where}: fill-memory of {length} bytes holds {len(payload)}")
                fills[index] = FillMemory(index, memory, offset, payload)
        pos += 12 + size
        index += 1
    return Blocks(codec, calls, fills, index)


def pointed_bytes(params: bytes, address: object, nbytes: int, element: int = 1) -> bytes | None:
    """The ``nbytes`` bytes of an array parameter, found in a call's ``params`` by the address
    ``gfxrecon-convert`` printed for it (``"0x..."``): an array is encoded as its uint64 address, uint64
    element count, then the data. The first place where the address is followed by the expected count
    (``nbytes // element``) wins. ``None`` when no such place holds the bytes."""
    if not isinstance(address, str) or not address.startswith("0x") or nbytes < 0 or nbytes % element:
        return None
    try:
        value = int(address, 16)
    except ValueError:
        return None
    if value >= 1 << 64:
        return None
    anchor = struct.pack("<QQ", value, nbytes // element)
    found = params.find(anchor)
    if found < 0 or found + 16 + nbytes > len(params):
        return None
    return params[found + 16:found + 16 + nbytes]
