"""Reading a .vkt trace: through its index when it is complete, by a recovery scan when it is not.

:class:`TraceReader` opens a finished file in O(1) file reads through its trailer, or recovers an
unfinished or damaged one by scanning; it checks every length against the file size before it allocates,
bounds every decompression by the declared raw length and ``max_blob_bytes`` (the codecs of
:mod:`capture.format.codecs`), verifies checksums and content keys, and never unpickles or evaluates
anything. A damaged file raises only :class:`NotATrace`, :class:`UnsupportedVersion` or
:class:`TraceCorrupt` (all :class:`ContainerError`, of :mod:`capture.format.errors`). The byte layout
lives in :mod:`capture.format.records`; docs/trace-format.md is its spec.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from typing import Any, Final, NamedTuple, Protocol

import xxhash
import zstandard

from vkcore import paths

from .format import codecs, limits
from .format import records as R
from .format.codecs import CodecError
from .format.codecs import delta as D
from .format.errors import ContainerError, LimitExceeded, NotARegularFile, NotATrace, TraceCorrupt, UnsupportedVersion
from .format.records import BlobEntry, BlobInfo, Codec, LayoutError, RecordType
from .writer import PreparedBlob

__all__ = ["TraceReader", "RecordDamage", "open_trace_file", "DEFAULT_MAX_BLOB_BYTES", "DEFAULT_MAX_META_BYTES",
           "DEFAULT_MAX_INDEX_BYTES"]

#: decoded blobs a reader keeps for the deltas read next (the frames after a frame refer to it).
DEFAULT_DELTA_CACHE_BYTES: Final = 64 << 20
#: reader limits (constructor arguments override them): the table of capture/format/limits.py.
DEFAULT_MAX_BLOB_BYTES: Final = limits.MAX_BLOB_BYTES
DEFAULT_MAX_META_BYTES: Final = limits.MAX_META_BYTES
DEFAULT_MAX_INDEX_BYTES: Final = limits.MAX_INDEX_BYTES
_MAX_WINDOW_SIZE: Final = limits.ZSTD_MAX_WINDOW
#: chunk size when a recovery scan hashes a payload it does not keep.
_SCAN_CHUNK: Final = 4 << 20

StrPath = str | os.PathLike[str]


class ReadableFile(Protocol):
    """What TraceReader needs of a file object: binary ``seek`` and ``read`` (``close`` is not used)."""

    def seek(self, offset: int, whence: int = ..., /) -> int: ...

    def read(self, size: int = ..., /) -> bytes | None: ...


def open_trace_file(path: str) -> Any:
    """``path`` opened for reading, unbuffered, when it is a regular file (:func:`vkcore.paths.open_regular`:
    never blocking on a FIFO, checked on the open descriptor); :class:`NotARegularFile` naming what it is
    otherwise (a FIFO, a device such as /dev/zero, a socket, a folder). /proc files are regular files of
    size 0: they read as a file too short to be a trace (NotATrace). Other OSErrors of the open propagate."""
    try:
        fd, _ = paths.open_regular(path)
    except IsADirectoryError:
        raise NotARegularFile("is a folder, not a trace file", path=path) from None
    except paths.NotARegularFile as exc:
        kind = "a device" if exc.kind.endswith(" device") else exc.kind
        raise NotARegularFile(f"is {kind}, not a trace file", path=path) from None
    return os.fdopen(fd, "rb", buffering=0)


# ==================================================================================================
# Reader


class RecordDamage(NamedTuple):
    """A record found damaged by :meth:`TraceReader.damaged_records`: where, of which type, what it
    holds as far as the index says (a META's kind, a blob's key; "" when unknown) and why."""

    offset: int
    rtype: int
    what: str
    reason: str


class _IndexUnusable(Exception):
    """Internal: the trailer or index cannot be used; the message says why (goes into recovery_note)."""


class TraceReader:
    """Read a trace: through its index when it is complete, by a recovery scan when it is not.

    ``source`` is a path or a readable, seekable binary file object (not closed by :meth:`close` unless
    this reader opened it). After construction:

    - ``recovered`` is False when the trailer and index were valid, True when records were found by a
      scan; ``recovery_note`` says why and what was found ("" when not recovered);
    - ``corrupt_records`` lists (offset, type) of records skipped by a scan because their header was
      intact but their payload was not (:meth:`damaged_records` finds them in a file opened through
      its index too);
    - ``end`` is where the trace ends: after its TRAILER, which is its own end even when more bytes
      follow (appended data, a second trace concatenated to it: :attr:`bytes_after_trailer` counts
      them, ``trailer_note`` says so, and nothing after the trailer is ever read); the file's size
      when it has no trailer;
    - ``version`` is the file's (major, minor).

    Reading a blob or a META reads only that record's bytes, and for a DELTA blob those of the blobs
    it refers to (at most ``DELTA_MAX_BLOBS`` deltas and what they refer to). Each read verifies the
    record header, the payload checksum and, for blobs, the xxh3_128 of the decompressed data; a
    damaged record raises :class:`TraceCorrupt` naming the file, the record offset and the blob key
    (for a damaged reference of a delta: the reference's, and the delta that needed it), and other
    records stay readable. Blobs decoded as references of deltas, and deltas, are kept (at most
    ``delta_cache_bytes``) for the deltas read next. Reads are serialised by a lock, so one reader may
    be shared between threads.
    """

    def __init__(
        self,
        source: StrPath | ReadableFile,
        *,
        max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        max_meta_bytes: int = DEFAULT_MAX_META_BYTES,
        max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES,
        delta_cache_bytes: int = DEFAULT_DELTA_CACHE_BYTES,
    ) -> None:
        self.max_blob_bytes = max_blob_bytes
        self.delta_cache_bytes = delta_cache_bytes
        self._cache: OrderedDict[bytes, tuple[bytes | memoryview, frozenset[bytes]]] = OrderedDict()
        self._cache_size = 0
        self._cache_lock = threading.Lock()
        self.max_meta_bytes = max_meta_bytes
        self.max_index_bytes = max_index_bytes
        if isinstance(source, (str, os.PathLike)):
            self.path: str = os.fspath(source)
            self._f: ReadableFile = open_trace_file(self.path)
            self._owns_file = True
        else:
            self.path = str(getattr(source, "name", "<stream>"))
            self._f = source
            self._owns_file = False
        self._lock = threading.Lock()
        self._local = threading.local()
        self.recovered = False
        self.recovery_note = ""
        self.trailer_note = ""
        self.end = 0
        self.corrupt_records: list[tuple[int, int]] = []
        self._metas: list[tuple[int, str]] = []
        self._meta_kinds: dict[int, str] = {}
        self._blobs: dict[bytes, BlobEntry] = {}
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file if this reader opened it. Idempotent."""
        if self._owns_file:
            self._f.close()  # type: ignore[attr-defined]

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw reads ---------------------------------------------------------------------------------

    def _read_at(self, offset: int, n: int) -> bytes:
        """Exactly ``n`` bytes at ``offset`` (callers checked the range against the file size)."""
        with self._lock:
            self._f.seek(offset)
            data = self._f.read(n)
            if data is None:
                data = b""
            while len(data) < n:  # short reads from pipes/odd file objects
                more = self._f.read(n - len(data))
                if not more:
                    raise TraceCorrupt(f"file ended after {len(data)} of {n} bytes", path=self.path, offset=offset)
                data += more
        return data

    def _corrupt(self, message: str, offset: int | None, key: bytes | None = None) -> TraceCorrupt:
        return TraceCorrupt(message, path=self.path, offset=offset, key=key.hex() if key is not None else None)

    # -- opening -----------------------------------------------------------------------------------

    def _open(self) -> None:
        with self._lock:  # a file this reader opened is regular: its size is fstat's (/proc files say 0)
            self.size = os.fstat(self._f.fileno()).st_size if self._owns_file else self._f.seek(0, os.SEEK_END)  # type: ignore[attr-defined]
        head = self._read_at(0, min(self.size, R.FILE_HEADER.size))
        try:
            header = R.unpack_file_header(head)
        except LayoutError as exc:
            raise NotATrace(f"not a vkcap trace: {exc}", path=self.path) from None
        self.version: tuple[int, int] = (header.major, header.minor)
        if header.major not in R.READABLE_MAJORS:
            majors = [f"{m}.x" for m in sorted(R.READABLE_MAJORS)]
            readable = " and ".join([", ".join(majors[:-1]), majors[-1]] if len(majors) > 1 else majors)
            raise UnsupportedVersion(
                f"trace format version {header.major}.{header.minor} is not supported "
                f"(this reader reads {readable})",
                path=self.path,
                version=self.version,
            )
        self.end = self.size
        try:
            self._open_by_index(self.size)
        except _IndexUnusable as why:
            self._recover(str(why))

    @property
    def bytes_after_trailer(self) -> int:
        """Bytes of the file after the trace's TRAILER (0 for a file that ends with it, or has none)."""
        return self.size - self.end

    def _open_by_index(self, end: int) -> None:
        """Use the trailer ending at ``end`` and its INDEX; raise _IndexUnusable with a reason if
        either is not valid."""
        tail_at = end - R.TRAILER_SIZE
        if tail_at < R.FILE_HEADER.size + R.RECORD_HEADER.size:
            raise _IndexUnusable("no trailer")
        try:
            trailer = R.unpack_trailer(self._read_at(tail_at, R.TRAILER_SIZE))
        except LayoutError as exc:
            raise _IndexUnusable(f"no valid trailer ({exc})") from None
        at = trailer.index_offset
        if not R.FILE_HEADER.size <= at <= tail_at - R.RECORD_HEADER.size:
            raise _IndexUnusable(f"trailer points outside the file (index offset {at})")
        try:
            header = R.unpack_record_header(self._read_at(at, R.RECORD_HEADER.size))
        except LayoutError as exc:
            raise _IndexUnusable(f"bad INDEX record at offset {at} ({exc})") from None
        if header.rtype != RecordType.INDEX or at + R.RECORD_HEADER.size + header.payload_len != tail_at:
            raise _IndexUnusable(f"trailer does not point to an INDEX record (offset {at})")
        if header.payload_len > self.max_index_bytes:
            raise _IndexUnusable(f"INDEX of {header.payload_len} bytes exceeds max_index_bytes={self.max_index_bytes}")
        payload = self._read_at(at + R.RECORD_HEADER.size, header.payload_len)
        actual = R.checksum(payload)
        if actual != header.payload_checksum or actual != trailer.index_checksum:
            raise _IndexUnusable(f"INDEX checksum mismatch at offset {at}")
        try:
            index = R.unpack_index(payload, data_end=at)
        except LayoutError as exc:
            raise _IndexUnusable(f"INDEX at offset {at} is invalid ({exc})") from None
        self._metas = index.metas
        self._meta_kinds = dict(index.metas)
        self._blobs = index.blobs

    def _recover(self, reason: str) -> None:
        """Scan records from the start; keep every complete, intact one; stop at the first broken header,
        or after the first intact TRAILER: the end of the trace, whatever follows it.

        A record whose header is intact but whose payload checksum (or structure) fails is listed in
        ``corrupt_records`` and skipped using its length. A record that runs past the end of the file is
        incomplete: the scan stops there and the rest is reported as trailing bytes. A TRAILER whose
        INDEX is valid opens the trace through that index (``recovered`` stays false); the bytes after
        it are reported in ``trailer_note``.
        """
        trailer_end = self._scan(reason)
        if trailer_end is None:
            return
        self.end = trailer_end
        self.trailer_note = (f"the trace ends at its TRAILER (offset {trailer_end - R.TRAILER_SIZE}); the "
                             f"{self.size - trailer_end} bytes after it (appended data, or another trace) are not read")
        scanned = (self._metas, self._blobs, self.corrupt_records, self.recovery_note)
        self._metas, self._blobs, self.corrupt_records = [], {}, []
        try:
            self._open_by_index(trailer_end)
        except _IndexUnusable:
            self._metas, self._blobs, self.corrupt_records, self.recovery_note = scanned
            self._meta_kinds = dict(self._metas)
            return
        self.recovered = False
        self.recovery_note = ""

    def _scan(self, reason: str) -> int | None:
        """The recovery scan of :meth:`_recover`; returns where the first intact TRAILER ends, if any."""
        self.recovered = True
        trailer_end: int | None = None
        pos = R.FILE_HEADER.size
        good = 0
        unknown = 0
        last_good: int | None = None
        stop = ""
        while pos < self.size:
            if pos + R.RECORD_HEADER.size > self.size:
                stop = f"incomplete record header at offset {pos}"
                break
            try:
                header = R.unpack_record_header(self._read_at(pos, R.RECORD_HEADER.size))
            except LayoutError as exc:
                stop = f"stopped at offset {pos}: {exc}"
                break
            end = pos + R.RECORD_HEADER.size + header.payload_len
            if end > self.size:
                stop = f"incomplete record at offset {pos} (declares {header.payload_len} payload bytes)"
                break
            if header.rtype == RecordType.TRAILER and self._is_trailer(pos, header):
                trailer_end = pos = end
                stop = f"stopped after the TRAILER at offset {end - R.TRAILER_SIZE}: the end of the trace"
                break
            status = self._scan_record(pos, header)
            if status == "ok":
                good += 1
                last_good = pos
            elif status == "unknown":
                unknown += 1
                last_good = pos
            else:
                self.corrupt_records.append((pos, header.rtype))
            pos = end
        self._meta_kinds = dict(self._metas)
        parts = [
            f"{reason}: recovered {good} records ({len(self._metas)} META, {len(self._blobs)} BLOB)",
            f"last complete record at offset {last_good}" if last_good is not None else "no complete record",
            f"{self.size - pos} trailing bytes ignored",
        ]
        if self.corrupt_records:
            parts.append(
                f"{len(self.corrupt_records)} corrupt records skipped at offsets {[o for o, _ in self.corrupt_records]}"
            )
        if unknown:
            parts.append(f"{unknown} records of other types skipped")
        if stop:
            parts.append(stop)
        self.recovery_note = "; ".join(parts)
        return trailer_end

    def _is_trailer(self, pos: int, header: R.RecordHeader) -> bool:
        """Whether the record at ``pos`` (whose header is intact) is a complete, intact TRAILER."""
        if header.payload_len != R.TRAILER_PAYLOAD.size:
            return False
        try:
            R.unpack_trailer(self._read_at(pos, R.TRAILER_SIZE))
        except LayoutError:
            return False
        return True

    def _scan_record(self, pos: int, header: R.RecordHeader) -> str:
        """Check one record found by a scan and register it. Returns "ok", "unknown" or "corrupt"."""
        body_at = pos + R.RECORD_HEADER.size
        n = header.payload_len
        if header.rtype == RecordType.META:
            if n > self.max_meta_bytes:
                return "corrupt"
            payload = self._read_at(body_at, n)
            if R.checksum(payload) != header.payload_checksum:
                return "corrupt"
            try:
                kind = R.unpack_meta(payload)["kind"]
            except LayoutError:
                return "corrupt"
            self._metas.append((pos, kind))
            return "ok"
        if header.rtype == RecordType.BLOB:
            if n < R.BLOB_HEADER.size:
                return "corrupt"
            sub_bytes = self._read_at(body_at, R.BLOB_HEADER.size)
            if self._hash_range(body_at, n, first=sub_bytes) != header.payload_checksum:
                return "corrupt"
            try:
                sub = R.unpack_blob_header(sub_bytes)
            except LayoutError:
                return "corrupt"
            stored = n - R.BLOB_HEADER.size
            if not codecs.fits(stored, sub.raw_len, sub.codec):
                return "corrupt"
            self._blobs.setdefault(sub.key, BlobEntry(pos, stored, sub.raw_len, sub.codec))
            return "ok"
        # INDEX / TRAILER of an earlier close, or a type from a newer minor version: verify and skip.
        if self._hash_range(body_at, n) != header.payload_checksum:
            return "corrupt"
        return "unknown"

    def _hash_range(self, offset: int, n: int, first: bytes = b"") -> int:
        """xxh3_64 of ``n`` file bytes at ``offset``, reading in bounded chunks (``first`` = bytes already read)."""
        h = xxhash.xxh3_64(first)
        pos, end = offset + len(first), offset + n
        while pos < end:
            chunk = self._read_at(pos, min(_SCAN_CHUNK, end - pos))
            h.update(chunk)
            pos += len(chunk)
        return h.intdigest()

    # -- verification ------------------------------------------------------------------------------

    def damaged_records(self) -> list[RecordDamage]:
        """Every damaged record of the trace, in file order: those a recovery scan skipped, and each
        META and BLOB the index (or the scan) lists whose record header, payload checksum or declared
        lengths are wrong. Reads every record once, hashing payloads in bounded chunks; decodes
        nothing (a blob that passes here may still fail to decode: :meth:`read_blob` says so)."""
        found = [RecordDamage(offset, rtype, "", "header intact but payload damaged (skipped by the scan)")
                 for offset, rtype in self.corrupt_records]
        for offset, kind in self._metas:
            why = self._record_damage(offset, RecordType.META, None)
            if why:
                found.append(RecordDamage(offset, RecordType.META, kind, why))
        for key, e in self._blobs.items():
            why = self._record_damage(e.offset, RecordType.BLOB, e)
            if why:
                found.append(RecordDamage(e.offset, RecordType.BLOB, key.hex(), why))
        return sorted(found)

    def _record_damage(self, offset: int, rtype: int, e: BlobEntry | None) -> str:
        """Why the record at ``offset`` is damaged ("" when it is not): see :meth:`damaged_records`."""
        try:
            header = R.unpack_record_header(self._read_at(offset, R.RECORD_HEADER.size))
        except (LayoutError, TraceCorrupt) as exc:
            return exc.detail if isinstance(exc, ContainerError) else str(exc)
        if header.rtype != rtype:
            return f"record type {header.rtype}, expected {RecordType(rtype).name}"
        if offset + R.RECORD_HEADER.size + header.payload_len > self.end:
            return f"its {header.payload_len} payload bytes run past the end of the trace"
        if e is None and header.payload_len > self.max_meta_bytes:
            return f"META of {header.payload_len} bytes exceeds max_meta_bytes={self.max_meta_bytes}"
        if e is not None:
            if header.payload_len != R.BLOB_HEADER.size + e.stored_len:
                return "record header does not match the index"
            if not codecs.fits(e.stored_len, e.raw_len, e.codec):
                return f"stored length {e.stored_len} is impossible for raw length {e.raw_len}"
        if self._hash_range(offset + R.RECORD_HEADER.size, header.payload_len) != header.payload_checksum:
            return "payload checksum mismatch"
        return ""

    # -- metas -------------------------------------------------------------------------------------

    def meta_index(self, kind: str | None = None) -> list[tuple[int, str]]:
        """(offset, kind) of every META record (of ``kind``, if given) in file order; reads nothing."""
        return [(off, k) for off, k in self._metas if kind is None or k == kind]

    def metas(self, kind: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """(offset, body) of every META record (of ``kind``, if given) in file order.

        Each body is a fresh dict including its ``kind``. Reads only the META records asked for; raises
        TraceCorrupt at the first damaged one (use :meth:`meta_index` + :meth:`read_meta` to skip it).
        """
        return [(off, self.read_meta(off)) for off, _ in self.meta_index(kind)]

    def read_meta(self, offset: int) -> dict[str, Any]:
        """The body of the META record at ``offset`` (an offset from :meth:`meta_index`; KeyError otherwise).

        Verifies the record header, the payload checksum, the msgpack structure and that the record's
        ``kind`` is the one the index lists; TraceCorrupt otherwise.
        """
        expected_kind = self._meta_kinds.get(offset)
        if expected_kind is None:
            raise KeyError(f"no META record at offset {offset} in {self.path}")
        try:
            header = R.unpack_record_header(self._read_at(offset, R.RECORD_HEADER.size))
        except LayoutError as exc:
            raise self._corrupt(str(exc), offset) from None
        if header.rtype != RecordType.META:
            raise self._corrupt(f"expected a META record, found type {header.rtype}", offset)
        if header.payload_len > self.max_meta_bytes:
            raise LimitExceeded(
                f"META of {header.payload_len} bytes exceeds max_meta_bytes={self.max_meta_bytes}",
                path=self.path,
                offset=offset,
            )
        if offset + R.RECORD_HEADER.size + header.payload_len > self.size:
            raise self._corrupt("META record runs past the end of the file", offset)
        payload = self._read_at(offset + R.RECORD_HEADER.size, header.payload_len)
        if R.checksum(payload) != header.payload_checksum:
            raise self._corrupt("META payload checksum mismatch", offset)
        try:
            body = R.unpack_meta(payload)
        except LayoutError as exc:
            raise self._corrupt(str(exc), offset) from None
        if body["kind"] != expected_kind:
            raise self._corrupt(f"META kind {body['kind']!r} does not match the index ({expected_kind!r})", offset)
        return body

    # -- blobs -------------------------------------------------------------------------------------

    def blob_keys(self) -> list[str]:
        """Keys of every blob, in file order."""
        return [k.hex() for k in self._blobs]

    def has_blob(self, key: str | bytes) -> bool:
        """Whether the trace holds a blob with this key (ValueError for a malformed key)."""
        return R.key_bytes(key) in self._blobs

    def blob_info(self, key: str | bytes) -> BlobInfo:
        """(stored_len, raw_len, codec) of a blob, from the index; reads nothing. KeyError if absent."""
        e = self._entry(key)
        return BlobInfo(e.stored_len, e.raw_len, e.codec)

    def blob_offset(self, key: str | bytes) -> int:
        """File offset of the blob's record. KeyError if absent."""
        return self._entry(key).offset

    def _entry(self, key: str | bytes) -> BlobEntry:
        k = R.key_bytes(key)
        try:
            return self._blobs[k]
        except KeyError:
            raise KeyError(f"no blob {k.hex()} in {self.path}") from None

    def read_blob(self, key: str | bytes) -> bytes | memoryview:
        """The raw bytes of a blob, verified (a read-only view for a blob stored as byte planes or as a
        delta). Reads only this blob's record (64 header bytes + its data), and for a delta the records
        of the blobs it needs that this reader does not keep decoded already.

        Raises KeyError if absent, LimitExceeded if its raw length exceeds ``max_blob_bytes``, and
        TraceCorrupt (naming the record offset and the key) if anything about the record is wrong (or
        about a blob a delta needs: then that blob's offset and key). Never allocates more than
        ``raw_len`` bytes for the output (plus the stored bytes), and for a delta a few more blobs of
        that length while its references are decoded.
        """
        k = R.key_bytes(key)
        cached = self._cache_get(k)  # decoded and verified for an earlier delta
        if cached is not None:
            return cached[0]
        return self._read_verified(k)[3]

    def read_stored(self, key: str | bytes) -> bytes:
        """Blob ``key``'s payload as stored in the file (encoded, not decoded), its checksum verified."""
        k = R.key_bytes(key)
        return bytes(self._read_stored(k, self._entry(k))[0])

    def read_prepared(self, key: str | bytes) -> PreparedBlob:
        """Blob ``key`` as it is stored (its codec and stored bytes), ready for another file's
        :meth:`TraceWriter.write_prepared`: copying blobs between traces this way compresses nothing
        again. Verified as :meth:`read_blob` verifies it (record header, payload checksum, then decoded
        and checked against its content key), with the same errors; a damaged blob is never copied.
        A DELTA blob carries its raw bytes too, for a writer that lacks its references to store it
        whole instead."""
        k = R.key_bytes(key)
        e, stored, payload_checksum, raw = self._read_verified(k)
        if e.codec != Codec.DELTA:
            return PreparedBlob(k.hex(), e.raw_len, e.codec, (stored,), payload_checksum)
        refs = D.unpack_header(stored).refs
        return PreparedBlob(k.hex(), e.raw_len, e.codec, (stored,), payload_checksum, refs=refs, raw=raw)

    def _read_verified(self, k: bytes) -> tuple[BlobEntry, bytes, int, bytes | memoryview]:
        """(index entry, stored bytes, payload checksum, raw bytes) of blob ``k``: the record checked
        against the index, its payload checksum verified, decoded and checked against its key."""
        e = self._entry(k)
        stored, payload_checksum = self._read_stored(k, e)
        raw: bytes | memoryview
        if e.codec == Codec.DELTA:
            raw = self._decode_delta(k, e, stored)  # checked against its key there
        else:
            raw = self._decode(stored, e, k)
            self._check_key(raw, e, k)
        return e, stored, payload_checksum, raw

    def _check_key(self, raw: bytes | memoryview, e: BlobEntry, k: bytes, needed_by: str = "") -> None:
        if len(raw) != e.raw_len or R.content_key(raw) != k:
            raise self._corrupt(f"decoded data does not match its content key{needed_by}", e.offset, k)

    def _read_stored(self, k: bytes, e: BlobEntry, needed_by: str = "") -> tuple[bytes, int]:
        """(stored bytes, payload checksum) of blob ``k`` at its index entry ``e``: its limits, record
        header and blob header checked against the index, its payload checksum verified."""
        if e.raw_len > self.max_blob_bytes:
            raise LimitExceeded(
                f"raw length {e.raw_len} exceeds max_blob_bytes={self.max_blob_bytes}{needed_by}",
                path=self.path,
                offset=e.offset,
                key=k.hex(),
            )
        if not codecs.fits(e.stored_len, e.raw_len, e.codec):
            raise self._corrupt(f"stored length {e.stored_len} is impossible for raw length {e.raw_len}{needed_by}",
                                e.offset, k)
        head = self._read_at(e.offset, R.RECORD_HEADER.size + R.BLOB_HEADER.size)
        try:
            header = R.unpack_record_header(head)
            sub = R.unpack_blob_header(head[R.RECORD_HEADER.size :])
        except LayoutError as exc:
            raise self._corrupt(f"{exc}{needed_by}", e.offset, k) from None
        if header.rtype != RecordType.BLOB or header.payload_len != R.BLOB_HEADER.size + e.stored_len:
            raise self._corrupt(f"record header does not match the index{needed_by}", e.offset, k)
        if sub != (k, e.raw_len, e.codec):
            raise self._corrupt(f"blob header does not match the index{needed_by}", e.offset, k)
        stored = self._read_at(e.offset + len(head), e.stored_len)
        if R.checksum(head[R.RECORD_HEADER.size :], stored) != header.payload_checksum:
            raise self._corrupt(f"payload checksum mismatch{needed_by}", e.offset, k)
        return stored, header.payload_checksum

    def _decode(self, stored: bytes | memoryview, e: BlobEntry, k: bytes, residual: Any = None,
                needed_by: str = "") -> bytes | memoryview:
        """Undo the codec (``e.codec``, or for a DELTA's residual the one its header ``residual`` names)
        with the output bounded by ``e.raw_len``."""
        codec = codecs.blob(e.codec) if residual is None else codecs.residual(residual.inner)
        width = D.WIDTH if residual is None else residual.width
        try:
            return codec.decode(stored, e.raw_len, codecs.Decoding(self._dctx(), width))
        except CodecError as exc:
            raise self._corrupt(f"{exc}{needed_by}", e.offset, k) from None

    def _dctx(self) -> zstandard.ZstdDecompressor:
        """This thread's zstd decompressor (contexts are not thread-safe)."""
        dctx = getattr(self._local, "dctx", None)
        if dctx is None:
            dctx = self._local.dctx = zstandard.ZstdDecompressor(max_window_size=_MAX_WINDOW_SIZE)
        return dctx

    # -- deltas ------------------------------------------------------------------------------------

    def _delta_header(self, stored: bytes | memoryview, e: BlobEntry, k: bytes, needed_by: str = "") -> Any:
        """The DELTA header of blob ``k`` (stored bytes ``stored``) with its references checked: each in
        the file, stored before it, and of its raw length."""
        try:
            header = D.unpack_header(stored)
        except D.DeltaError as exc:
            raise self._corrupt(f"{exc}{needed_by}", e.offset, k) from None
        for ref in header.refs:
            entry = self._blobs.get(ref)
            if entry is None:
                raise self._corrupt(f"its delta reference {ref.hex()} is not in the trace{needed_by}", e.offset, k)
            if entry.offset >= e.offset:
                raise self._corrupt(f"its delta reference {ref.hex()} is not stored before it (offset {entry.offset}): "
                                    f"a delta may only refer to earlier blobs{needed_by}", e.offset, k)
            if entry.raw_len != e.raw_len:
                raise self._corrupt(f"its delta reference {ref.hex()} holds {entry.raw_len} bytes, not {e.raw_len}{needed_by}",
                                    e.offset, k)
        return header

    def _decode_delta(self, k: bytes, e: BlobEntry, stored: bytes) -> memoryview:
        """The raw bytes of DELTA blob ``k``, checked against its key: its references decoded first
        (:meth:`_delta_plan`), one at a time, each kept only while a later one needs it."""
        header = self._delta_header(stored, e, k)
        values, closures, order, refs_of = self._delta_plan(k, e, header.refs)
        uses = Counter(r for key in order for r in refs_of.get(key, ()))
        uses.update(header.refs)
        needed_by = f" (needed to decode blob {k.hex()} at offset {e.offset})"
        for key in order:
            entry = self._blobs[key]
            node_stored, _ = self._read_stored(key, entry, needed_by)
            if entry.codec == Codec.DELTA:
                node_header = self._delta_header(node_stored, entry, key, needed_by)
                residual = self._decode_residual(node_stored, node_header, entry, key, needed_by)
                raw: bytes | memoryview = D.restore(residual, [values[r] for r in node_header.refs],
                                                        node_header.transform, node_header.width)
                closures[key] = frozenset({key}).union(*(closures[r] for r in node_header.refs))
                for r in node_header.refs:
                    uses[r] -= 1
                    if uses[r] == 0:
                        del values[r]
            else:
                raw = self._decode(node_stored, entry, key, needed_by=needed_by)
                closures[key] = frozenset()
            self._check_key(raw, entry, key, needed_by)
            values[key] = raw
            self._cache_put(key, raw, closures[key])
        residual = self._decode_residual(stored, header, e, k)
        raw = D.restore(residual, [values[r] for r in header.refs], header.transform, header.width)
        self._check_key(raw, e, k)
        self._cache_put(k, raw, frozenset({k}).union(*(closures[r] for r in header.refs)))
        return raw

    def _delta_plan(self, k: bytes, e: BlobEntry, refs: tuple[bytes, ...]) -> tuple[
            dict[bytes, bytes | memoryview], dict[bytes, frozenset[bytes]], list[bytes], dict[bytes, tuple[bytes, ...]]]:
        """What decoding DELTA blob ``k`` (references ``refs``) needs: (the blobs it needs that this
        reader keeps decoded, with their delta closures; the others, in an order where each comes
        after its references; the references of each delta among them). Reads only the headers of
        the deltas (verifying their checksums). Refuses a cycle, and a delta closure (``k``, the
        deltas it needs, those they need...) of more than ``DELTA_MAX_BLOBS`` deltas, whichever
        blobs this reader keeps decoded: the same file reads the same in any order."""
        values: dict[bytes, bytes | memoryview] = {}
        closures: dict[bytes, frozenset[bytes]] = {}
        order: list[bytes] = []
        refs_of: dict[bytes, tuple[bytes, ...]] = {}
        visiting = {k}
        done: set[bytes] = set()
        closure = {k}
        needed_by = f" (needed to decode blob {k.hex()} at offset {e.offset})"

        def grow(more: Any) -> None:
            closure.update(more)
            if len(closure) > R.DELTA_MAX_BLOBS:
                raise self._corrupt(f"decoding it needs more than {R.DELTA_MAX_BLOBS} delta blobs, the limit", e.offset, k)

        def visit(key: bytes, parent: bytes) -> None:
            if key in done:
                return
            if key in visiting:
                p = self._blobs[parent]
                raise self._corrupt(f"its delta reference {key.hex()} refers back to it (a cycle){needed_by}", p.offset, parent)
            cached = self._cache_get(key)
            if cached is not None:
                values[key], closures[key] = cached
                grow(cached[1])
                done.add(key)
                return
            entry = self._blobs[key]  # present: checked with the header that names it
            if entry.codec == Codec.DELTA:
                grow((key,))
                head = self._read_delta_head(key, entry, needed_by)
                header = self._delta_header(head, entry, key, needed_by)
                visiting.add(key)
                for ref in header.refs:
                    visit(ref, key)
                visiting.discard(key)
                refs_of[key] = header.refs
            done.add(key)
            order.append(key)

        for ref in refs:
            visit(ref, k)
        return values, closures, order, refs_of

    def _decode_residual(self, stored: bytes, header: Any, e: BlobEntry, k: bytes, needed_by: str = "") -> Any:
        """The residual (``e.raw_len`` bytes) that DELTA stored bytes hold after their header."""
        return self._decode(memoryview(stored)[header.size :], e, k, header, needed_by)

    def _read_delta_head(self, key: bytes, e: BlobEntry, needed_by: str) -> bytes:
        """The first bytes of DELTA blob ``key``'s stored data (its header and references), after its
        record header is checked and its payload checksum verified (in bounded chunks)."""
        if not codecs.fits(e.stored_len, e.raw_len, e.codec):
            raise self._corrupt(f"stored length {e.stored_len} is impossible for raw length {e.raw_len}{needed_by}",
                                e.offset, key)
        size = min(e.stored_len, D.header_size(D.LINEAR))
        head = self._read_at(e.offset, R.RECORD_HEADER.size + R.BLOB_HEADER.size + size)
        try:
            header = R.unpack_record_header(head)
            sub = R.unpack_blob_header(head[R.RECORD_HEADER.size :])
        except LayoutError as exc:
            raise self._corrupt(f"{exc}{needed_by}", e.offset, key) from None
        body_at = e.offset + R.RECORD_HEADER.size
        if header.rtype != RecordType.BLOB or header.payload_len != R.BLOB_HEADER.size + e.stored_len:
            raise self._corrupt(f"record header does not match the index{needed_by}", e.offset, key)
        if sub != (key, e.raw_len, e.codec):
            raise self._corrupt(f"blob header does not match the index{needed_by}", e.offset, key)
        if self._hash_range(body_at, header.payload_len) != header.payload_checksum:
            raise self._corrupt(f"payload checksum mismatch{needed_by}", e.offset, key)
        return head[R.RECORD_HEADER.size + R.BLOB_HEADER.size :]

    def _cache_get(self, key: bytes) -> tuple[bytes | memoryview, frozenset[bytes]] | None:
        """(raw bytes, delta closure) of a blob kept decoded, or None."""
        with self._cache_lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
            return found

    def _cache_put(self, key: bytes, raw: bytes | memoryview, closure: frozenset[bytes]) -> None:
        """Keep ``raw`` (immutable: bytes or a read-only view), verified, and its delta closure (the
        deltas decoding it decodes) for later deltas, the least recently used leaving first; blobs
        larger than a quarter of the budget are not kept."""
        size = len(raw)
        if size > self.delta_cache_bytes // 4:
            return
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return
            self._cache[key] = (raw, closure)
            self._cache_size += size
            while self._cache_size > self.delta_cache_bytes:
                _, (old, _) = self._cache.popitem(last=False)
                self._cache_size -= len(old)
