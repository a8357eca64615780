"""The byte layout of the .vkt container: constants, struct layouts and pure (de)serializers.

This module does no file I/O and knows nothing about Vulkan or frames. It turns record fields into
bytes and back, and checks every field it decodes. docs/trace-format.md is the normative description;
the tables here must agree with it.

Guarantees:
- every integer is little-endian and every layout below has a fixed size;
- every ``unpack_*`` function either returns checked values or raises :class:`LayoutError` whose message
  names the field that is wrong (callers add the file path and the offset);
- msgpack is decoded with explicit size limits, string map keys only and no extension types: decoding
  never allocates more than a small multiple of the input's size and never runs code.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Final, NamedTuple

import msgpack
import xxhash

from . import limits

# --------------------------------------------------------------------------------------------------
# Constants (data, not code: docs/trace-format.md lists the same values).

MAGIC: Final = b"VKCAPTRC"
TRAILER_MAGIC: Final = b"VKCAPEND"
FORMAT_MAJOR: Final = 3
FORMAT_MINOR: Final = 0
#: majors this reader decodes: 1 (codecs NONE and ZSTD), 2 (adds PLANES) and 3 (adds DELTA).
READABLE_MAJORS: Final = frozenset({1, 2, 3})

#: file header: magic, major, minor, header flags (0; readers ignore them).
FILE_HEADER: Final = struct.Struct("<8sHHI")
#: record header: type, flags, reserved, payload length, payload xxh3_64, header xxh3_64.
RECORD_HEADER: Final = struct.Struct("<HHIQQQ")
#: the first 24 bytes of a record header: what the header checksum covers.
_RECORD_HEADER_BODY: Final = struct.Struct("<HHIQQ")
#: BLOB payload prefix: xxh3_128 digest of the raw data, raw length, codec, 7 reserved zero bytes.
BLOB_HEADER: Final = struct.Struct("<16sQB7x")
#: TRAILER payload: offset of the INDEX record, xxh3_64 of the INDEX payload, end magic.
TRAILER_PAYLOAD: Final = struct.Struct("<QQ8s")
#: a TRAILER record, header included, always has this size and ends the file.
TRAILER_SIZE: Final = RECORD_HEADER.size + TRAILER_PAYLOAD.size

KEY_BYTES: Final = 16
#: the most DELTA blobs that decoding one blob may decode: the blob itself when it is a delta, its
#: references, theirs, and so on (its *delta closure*). Writers never exceed it; readers refuse more.
DELTA_MAX_BLOBS: Final = limits.DELTA_MAX_BLOBS
#: the largest payload a record header may declare (2**62): larger values are corruption.
MAX_PAYLOAD_LEN: Final = limits.MAX_PAYLOAD_LEN


class RecordType(enum.IntEnum):
    """Record type codes (u16). Readers skip intact records of a type they do not know."""

    META = 1
    BLOB = 2
    INDEX = 3
    TRAILER = 4


class Codec(enum.IntEnum):
    """How a BLOB's stored bytes encode its raw bytes (u8): the ids of :mod:`capture.format.codecs`' table."""

    NONE = 0
    ZSTD = 1
    PLANES = 2  # byte planes, each raw or zstd (codecs/planes.py); format major 2
    DELTA = 3  # a residual against earlier blobs, stored as NONE, ZSTD, PLANES or SPARSE (codecs/delta.py); major 3


class LayoutError(ValueError):
    """Bytes do not follow the layout. The message names the field; it has no path or offset."""


# --------------------------------------------------------------------------------------------------
# Checksums and keys.


def checksum(*parts: Any) -> int:
    """xxh3_64 (seed 0) of the concatenation of ``parts`` (bytes-like), without concatenating them."""
    if len(parts) == 1:
        return xxhash.xxh3_64_intdigest(parts[0])
    h = xxhash.xxh3_64()
    for part in parts:
        h.update(part)
    return h.intdigest()


def content_key(data: Any) -> bytes:
    """The 16-byte content key of raw data: the xxh3_128 digest (seed 0, canonical big-endian bytes).

    Its ``.hex()`` is the key's text form, the same string ``xxhash.xxh3_128_hexdigest`` gives.
    """
    return xxhash.xxh3_128_digest(data)


def file_content_key(path: Any, offset: int = 0, chunk: int = 1 << 20) -> bytes:
    """:func:`content_key` of the bytes of file ``path`` from ``offset`` to its end, read ``chunk``
    bytes at a time into one buffer: the file is never held in memory."""
    h = xxhash.xxh3_128()
    buffer = bytearray(chunk)
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        while n := f.readinto(buffer):
            h.update(memoryview(buffer)[:n])
    return h.digest()


def key_bytes(key: str | bytes) -> bytes:
    """Normalise a content key given as 32 hex characters or 16 bytes; ValueError otherwise."""
    if isinstance(key, str):
        if len(key) != 2 * KEY_BYTES:
            raise ValueError(f"a blob key has {2 * KEY_BYTES} hex digits, got {key!r}")
        try:
            return bytes.fromhex(key)
        except ValueError:
            raise ValueError(f"a blob key is hexadecimal, got {key!r}") from None
    if isinstance(key, (bytes, bytearray, memoryview)) and len(key) == KEY_BYTES:
        return bytes(key)
    raise ValueError(f"a blob key is 32 hex digits or 16 bytes, got {key!r}")


# --------------------------------------------------------------------------------------------------
# File header.


class FileHeader(NamedTuple):
    major: int
    minor: int
    flags: int


def pack_file_header(major: int = FORMAT_MAJOR, minor: int = FORMAT_MINOR) -> bytes:
    """The 16 bytes every trace starts with."""
    return FILE_HEADER.pack(MAGIC, major, minor, 0)


def unpack_file_header(data: bytes) -> FileHeader:
    """Decode the file header; LayoutError if ``data`` is short or the magic is wrong.

    The version is returned as found: whether it is supported is the caller's decision.
    """
    if len(data) < FILE_HEADER.size:
        raise LayoutError(f"file is {len(data)} bytes, shorter than the {FILE_HEADER.size}-byte header")
    magic, major, minor, flags = FILE_HEADER.unpack_from(data)
    if magic != MAGIC:
        raise LayoutError(f"magic is {magic!r}, expected {MAGIC!r}")
    return FileHeader(major, minor, flags)


# --------------------------------------------------------------------------------------------------
# Record header.


class RecordHeader(NamedTuple):
    rtype: int
    flags: int
    payload_len: int
    payload_checksum: int


def pack_record_header(rtype: int, payload_len: int, payload_checksum: int, flags: int = 0) -> bytes:
    """A 32-byte record header whose last 8 bytes are the xxh3_64 of its first 24."""
    body = _RECORD_HEADER_BODY.pack(rtype, flags, 0, payload_len, payload_checksum)
    return body + xxhash.xxh3_64_intdigest(body).to_bytes(8, "little")


def unpack_record_header(data: bytes) -> RecordHeader:
    """Decode and verify a record header (first 32 bytes of ``data``).

    Raises LayoutError if it is short, its own checksum does not match, or it declares a payload longer
    than MAX_PAYLOAD_LEN. The payload length is *not* checked against any file size here.
    """
    if len(data) < RECORD_HEADER.size:
        raise LayoutError(f"record header is {len(data)} bytes, expected {RECORD_HEADER.size}")
    rtype, flags, _reserved, payload_len, payload_sum, header_sum = RECORD_HEADER.unpack_from(data)
    if xxhash.xxh3_64_intdigest(memoryview(data)[: _RECORD_HEADER_BODY.size]) != header_sum:
        raise LayoutError("record header checksum mismatch")
    if payload_len > MAX_PAYLOAD_LEN:
        raise LayoutError(f"record header declares an impossible payload length {payload_len}")
    return RecordHeader(rtype, flags, payload_len, payload_sum)


# --------------------------------------------------------------------------------------------------
# BLOB payload prefix.


class BlobHeader(NamedTuple):
    key: bytes
    raw_len: int
    codec: int


def pack_blob_header(key: bytes, raw_len: int, codec: int) -> bytes:
    """The 32 bytes at the start of a BLOB payload."""
    return BLOB_HEADER.pack(key, raw_len, codec)


def unpack_blob_header(data: bytes) -> BlobHeader:
    """Decode a BLOB payload prefix; LayoutError if short or the codec is unknown."""
    if len(data) < BLOB_HEADER.size:
        raise LayoutError(f"BLOB payload is {len(data)} bytes, shorter than its {BLOB_HEADER.size}-byte header")
    key, raw_len, codec = BLOB_HEADER.unpack_from(data)
    if codec not in _CODECS:
        raise LayoutError(f"BLOB codec {codec} is unknown")
    return BlobHeader(key, raw_len, codec)


_CODECS: Final = frozenset(int(c) for c in Codec)


# --------------------------------------------------------------------------------------------------
# TRAILER record.


class Trailer(NamedTuple):
    index_offset: int
    index_checksum: int


def pack_trailer(index_offset: int, index_checksum: int) -> bytes:
    """The complete TRAILER record (header + payload), TRAILER_SIZE bytes ending in TRAILER_MAGIC."""
    payload = TRAILER_PAYLOAD.pack(index_offset, index_checksum, TRAILER_MAGIC)
    return pack_record_header(RecordType.TRAILER, len(payload), checksum(payload)) + payload


def unpack_trailer(data: bytes) -> Trailer:
    """Decode and verify a complete TRAILER record (exactly TRAILER_SIZE bytes); LayoutError otherwise."""
    if len(data) != TRAILER_SIZE:
        raise LayoutError(f"trailer is {len(data)} bytes, expected {TRAILER_SIZE}")
    if data[-len(TRAILER_MAGIC) :] != TRAILER_MAGIC:
        raise LayoutError("file does not end with the trailer magic")
    header = unpack_record_header(data)
    payload = data[RECORD_HEADER.size :]
    if header.rtype != RecordType.TRAILER or header.payload_len != TRAILER_PAYLOAD.size:
        raise LayoutError("last record is not a TRAILER")
    if checksum(payload) != header.payload_checksum:
        raise LayoutError("trailer payload checksum mismatch")
    index_offset, index_checksum, _magic = TRAILER_PAYLOAD.unpack(payload)
    return Trailer(index_offset, index_checksum)


# --------------------------------------------------------------------------------------------------
# msgpack (META and INDEX payloads).


def _no_ext(code: int, data: bytes) -> Any:
    raise LayoutError(f"msgpack extension type {code} is not allowed")


def pack_msgpack(obj: Any) -> bytes:
    """msgpack with the bin type (bytes stay bytes, str stays str); TypeError for unsupported objects."""
    packed: bytes = msgpack.packb(obj, use_bin_type=True, strict_types=False, datetime=False)
    return packed


class _ItemBudget:
    """Counts the arrays and maps msgpack builds and their elements (its hooks see each once built) and
    stops the decoding once they exceed ``items``: with each array and map limited to ``items`` before
    it is allocated, no more than about twice ``items`` objects are ever held."""

    def __init__(self, items: int) -> None:
        self.left = items

    def _spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise LayoutError("msgpack holds too many items")

    def array(self, items: list[Any]) -> list[Any]:
        self._spend(1 + len(items))
        return items

    def map(self, items: dict[Any, Any]) -> dict[Any, Any]:
        self._spend(1 + 2 * len(items))
        return items


def unpack_msgpack(data: bytes, *, max_items: int | None = None, max_depth: int | None = limits.MAX_NESTING) -> Any:
    """Decode one msgpack object that must fill ``data`` exactly.

    ``data`` is already in memory and its length was checked by the caller (which is what Unpacker's
    ``max_buffer_size`` would bound). Limits: no string, bytes, array or map may claim more
    elements/bytes than ``data`` holds, nor an array or map more than ``max_items`` elements (default:
    ``len(data)``), nor all of them and their elements together more than twice that; arrays and maps nest at most
    ``max_depth`` deep (None: unchecked, for a caller that walks the result without recursion); map
    keys must be str or bytes; extension types are refused. Any failure is a LayoutError.
    """
    n = len(data)
    items = n if max_items is None else min(n, max_items)
    budget = _ItemBudget(2 * items)  # an array or map and each element take at least a byte each
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            ext_hook=_no_ext,
            list_hook=budget.array,
            object_hook=budget.map,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=items,
            max_map_len=items // 2,
            max_ext_len=n,
        )
    except LayoutError:
        raise
    except Exception as exc:  # msgpack raises many types (ExtraData, FormatError, ValueError, TypeError...)
        raise LayoutError(f"invalid msgpack: {type(exc).__name__}: {exc}") from None
    if max_depth is not None:
        try:
            limits.check_nesting(obj, max_depth)
        except limits.NestingTooDeep as exc:
            raise LayoutError(f"msgpack {exc}") from None
    return obj


def unpack_meta(data: bytes, max_items: int = limits.MAX_META_ITEMS) -> dict[str, Any]:
    """Decode a META payload: a msgpack map whose ``kind`` key is a str, of at most ``max_items``
    elements nested at most ``limits.MAX_NESTING`` deep."""
    obj = unpack_msgpack(data, max_items=max_items)
    if not isinstance(obj, dict):
        raise LayoutError(f"META payload is a {type(obj).__name__}, expected a map")
    if not isinstance(obj.get("kind"), str):
        raise LayoutError("META payload has no string 'kind'")
    return obj


# --------------------------------------------------------------------------------------------------
# INDEX payload.


class BlobEntry(NamedTuple):
    """Where a blob lives: its record's offset, the stored data length, the raw length, the codec."""

    offset: int
    stored_len: int
    raw_len: int
    codec: int


class BlobInfo(NamedTuple):
    """What the index says of a blob, without reading it."""

    stored_len: int
    raw_len: int
    codec: int


class IndexData(NamedTuple):
    metas: list[tuple[int, str]]
    blobs: dict[bytes, BlobEntry]


def pack_index(metas: list[tuple[int, str]], blobs: dict[bytes, BlobEntry]) -> bytes:
    """The INDEX payload: ``{"metas": [[offset, kind]...], "blobs": [[key, offset, stored, raw, codec]...]}``,
    the bytes :func:`pack_msgpack` gives for that map, packed entry by entry: a long recording's close
    does not build a list per entry first (10,000 frames made 20,000 of them, about 9 MB at once)."""
    packer = msgpack.Packer(use_bin_type=True, strict_types=False, datetime=False, autoreset=False)
    packer.pack_map_header(2)
    packer.pack("metas")
    packer.pack_array_header(len(metas))
    for off, kind in metas:
        packer.pack_array_header(2)
        packer.pack(off)
        packer.pack(kind)
    packer.pack("blobs")
    packer.pack_array_header(len(blobs))
    for key, e in blobs.items():
        packer.pack_array_header(5)
        for value in (key, e.offset, e.stored_len, e.raw_len, e.codec):
            packer.pack(value)
    packed: bytes = packer.bytes()
    return packed


def _is_uint(v: Any) -> bool:
    return type(v) is int and v >= 0


def unpack_index(data: bytes, data_end: int) -> IndexData:
    """Decode an INDEX payload and check every entry against ``data_end`` (the INDEX record's offset).

    Checks: META offsets strictly increase and leave room for a record header before ``data_end``; every
    blob entry's record (header + blob header + stored bytes) ends at or before ``data_end``; keys are 16
    bytes and unique; codecs are known. Unknown top-level keys are ignored (minor-version additions).
    """
    # Every META record takes at least 33 bytes before the INDEX and every BLOB 64: the entries, of 2
    # and 5 elements (a few more in a later minor version), can be no more.
    records = data_end // (RECORD_HEADER.size + 1)
    obj = unpack_msgpack(data, max_items=10 * records + 64, max_depth=None)
    if not isinstance(obj, dict) or not isinstance(obj.get("metas"), list) or not isinstance(obj.get("blobs"), list):
        raise LayoutError("INDEX payload lacks the 'metas' and 'blobs' arrays")
    first = FILE_HEADER.size
    metas: list[tuple[int, str]] = []
    last = first - 1
    for item in obj["metas"]:
        if not (isinstance(item, list) and len(item) >= 2 and _is_uint(item[0]) and isinstance(item[1], str)):
            raise LayoutError("INDEX META entry is not [offset, kind]")
        off = item[0]
        if off <= last or off + RECORD_HEADER.size > data_end:
            raise LayoutError(f"INDEX META offset {off} is out of order or out of range")
        metas.append((off, item[1]))
        last = off
    blobs: dict[bytes, BlobEntry] = {}
    overhead = RECORD_HEADER.size + BLOB_HEADER.size
    for item in obj["blobs"]:
        if not (
            isinstance(item, list)
            and len(item) >= 5
            and isinstance(item[0], bytes)
            and all(_is_uint(v) for v in item[1:5])
        ):
            raise LayoutError("INDEX BLOB entry is not [key, offset, stored_len, raw_len, codec]")
        key, off, stored, raw, codec = item[:5]
        if len(key) != KEY_BYTES or key in blobs:
            raise LayoutError(f"INDEX BLOB key {key.hex()} is malformed or repeated")
        if off < first or off + overhead + stored > data_end or codec not in _CODECS:
            raise LayoutError(f"INDEX BLOB entry for {key.hex()} is out of range")
        blobs[key] = BlobEntry(off, stored, raw, codec)
    return IndexData(metas, blobs)
