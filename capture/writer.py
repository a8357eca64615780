"""Writing a .vkt trace: an append-only file of checksummed records, with an index at the end.

:class:`TraceWriter` stores META records (msgpack maps with a ``kind``), content-addressed BLOB records
(raw, zstd, byte planes, or a delta against earlier blobs: the codecs of :mod:`capture.format.codecs`),
and at close an INDEX plus a fixed-size TRAILER. It knows nothing of Vulkan, frames or snapshots. The
byte layout lives in :mod:`capture.format.records`; docs/trace-format.md is its spec.

Guarantees, in short: the writer appends to a private ``.partial`` file next to the target and writes
each record completely (``pwritev``, retried on short writes, no user-space buffer) before the call that
adds it returns. A process killed at any point leaves a partial file whose complete records are all
readable (:mod:`capture.reader` recovers them). ``close()`` appends the INDEX and the TRAILER and renames
atomically onto the target: readers of the target see either the old file or the complete new one, never
a mixture, and two writers of one target never interleave. Surviving a power loss as well takes
``fsync=True`` (the file is then synced before the rename, and its folder after it).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import zstandard

from vkcore.outputs import check_output_target, output_error, replace_file

from .format import codecs
from .format import records as R
from .format.codecs import Coding, planes
from .format.codecs import delta as D
from .format.codecs import sparse as S
from .format.records import BlobEntry, BlobInfo, Codec, LayoutError, RecordType
from .kernels import new_buffer

if TYPE_CHECKING:
    from .format.codecs.delta import Residual

__all__ = ["TraceWriter", "PreparedBlob", "WriterStats", "BlobBuffers", "blob_key", "failed_trace_path",
           "MT_COMPRESS_MIN_BYTES"]

#: blobs (or planes) at least this large are compressed with zstd's worker threads when ``threads`` != 0.
#: zstd gives each worker a job of 8 MiB at level 3: a smaller input gains nothing from them, and
#: blobs are compressed several at a time anyway.
MT_COMPRESS_MIN_BYTES: Final = 16 << 20
#: blobs at least this large have their planes encoded in parallel threads when ``threads`` != 0.
PARALLEL_PLANES_MIN_BYTES: Final = 4 << 20
#: blobs at least this large are tried as byte planes (codec PLANES) when the writer allows it.
PLANES_MIN_BYTES: Final = 64 << 10
#: element width of the planes: 4 bytes (float32, int32), the commonest element of a snapshot.
PLANE_WIDTH: Final = 4
#: blob-sized buffers (planes of written blobs, a recorder's residuals) kept for reuse, at most this
#: many bytes in all.
BLOB_BUFFERS_KEEP_BYTES: Final = 256 << 20
#: a delta is kept without encoding the whole blob too when a probe of its residual compresses to at
#: most this share of the probe of the whole blob (and the encoded delta is not larger than the whole
#: blob's size estimated from its probe); between this and 1.0 both are encoded and the smaller kept.
DELTA_SURE: Final = 0.8
#: blobs smaller than this are never stored as deltas (nothing to gain against their headers).
DELTA_MIN_BYTES: Final = 4 << 10
#: a delta's residual is compressed this many zstd levels below the writer's level (1 at the default 3).
DELTA_LEVEL_STEP: Final = 2
_ZSTD_MIN_LEVEL: Final = -(1 << 17)

_IOV_MAX: Final = 512

StrPath = str | os.PathLike[str]
Buffer = Any  # bytes, bytearray, memoryview or a numpy array (numpy is imported only when one is given)


def _byte_view(data: Buffer) -> memoryview:
    """A flat, C-contiguous, unsigned-byte view of ``data``; copies only if ``data`` is not contiguous.

    numpy arrays are viewed as their raw bytes in memory order (dtype and shape are the caller's to
    record); object arrays are refused.
    """
    if type(data).__module__ == "numpy" and hasattr(data, "dtype"):
        # lazy: vkcap replay imports this module, not numpy
        import numpy as np

        if data.dtype.hasobject:
            raise TypeError("cannot store a numpy array of Python objects")
        arr = data if data.flags.c_contiguous else np.ascontiguousarray(data)
        return memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    view = memoryview(data)
    if view.format == "B" and view.ndim == 1 and view.c_contiguous:
        return view
    if view.c_contiguous:
        try:
            return view.cast("B")
        except (TypeError, ValueError):
            pass
    return memoryview(view.tobytes())


def blob_key(data: Buffer) -> str:
    """The content key (32 hex digits of xxh3_128) that :meth:`TraceWriter.put_blob` returns for ``data``."""
    return R.content_key(_byte_view(data)).hex()


def _pwrite_all(fd: int, offset: int, parts: Sequence[Any]) -> None:
    """Write all ``parts`` contiguously at ``offset``, looping over short writes. No user-space buffer."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    if not hasattr(os, "pwritev"):  # pragma: no cover - non-Linux fallback
        os.lseek(fd, offset, os.SEEK_SET)
        for v in views:
            while len(v):
                v = v[os.write(fd, v) :]
        return
    while views:
        n = os.pwritev(fd, views[:_IOV_MAX], offset)
        if n <= 0:
            raise OSError(f"pwritev wrote {n} bytes")
        offset += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]


def _size_of(parts: Sequence[Any]) -> int:
    """Bytes in buffers written one after the other."""
    return sum(memoryview(p).nbytes for p in parts)


def failed_trace_path(path: StrPath) -> str:
    """Where a failed recording goes when a file already exists at ``path``: ``NAME.failed.vkt``
    beside it (``t.vkt`` -> ``t.failed.vkt``; ``t`` -> ``t.failed``)."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    stem, dot, suffix = name.rpartition(".")
    failed = f"{stem}.failed.{suffix}" if dot and stem else f"{name}.failed"
    return os.path.join(folder, failed)


def _create_partial(target: str, partial: str) -> int:
    """Check ``target`` (see :func:`vkcore.outputs.check_output_target`), then create and open the new
    ``partial`` file beside it. Every failure is a one-line error naming ``target``, and an OSError."""
    check_output_target(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        return os.open(partial, flags, 0o666)
    except OSError as exc:
        raise output_error(target, exc) from None


def _fsync_dir(path: str) -> None:
    """fsync a directory so a rename in it is durable; best effort (not possible on every platform)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ==================================================================================================
# Writer


class BlobBuffers:
    """Free blob-sized buffers (writable memoryviews), for the next blobs of the same size: their planes, a
    recorder's residuals. A fresh buffer faults in a page per 4 KiB as it is first written (about 9 us
    each on the VMs we measured), and copying the raw planes out of a reused one held the GIL; either
    way, compressing threads queued behind each other. Thread-safe; keeps at most ``keep_bytes``."""

    def __init__(self, keep_bytes: int) -> None:
        self.keep_bytes = keep_bytes
        self._free: dict[int, list[Any]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> Any:
        with self._lock:
            free = self._free.get(nbytes)
            if free:
                self._bytes -= nbytes
                return free.pop()

        return new_buffer(nbytes)

    def give(self, buffer: Any) -> None:
        with self._lock:
            if self._bytes + buffer.nbytes <= self.keep_bytes:
                self._free.setdefault(buffer.nbytes, []).append(buffer)
                self._bytes += buffer.nbytes


class _Lease:
    """A plane buffer lent to one prepared blob, given back (once) when the blob is written."""

    __slots__ = ("_buffers", "_buffer")

    def __init__(self, buffers: BlobBuffers, buffer: Any) -> None:
        self._buffers, self._buffer = buffers, buffer

    def release(self) -> None:
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            self._buffers.give(buffer)


@dataclass(frozen=True)
class PreparedBlob:
    """A blob hashed and compressed, ready to be appended by :meth:`TraceWriter.write_prepared`.

    ``data`` is the stored data as parts written one after the other (never joined: that would copy
    them). No part aliases the caller's buffer once :meth:`TraceWriter.compress_blob` returns, so the
    caller may reuse its buffer at once. Raw byte planes are views of a plane buffer the writer lends
    (``lease``) and takes back when the blob is written: ``data`` must not be read after
    :meth:`TraceWriter.write_prepared`. ``data is None`` means compression was skipped because the
    writer already stored this key.
    """

    key: str
    raw_len: int
    codec: int
    data: tuple[Any, ...] | None
    payload_checksum: int
    lease: _Lease | None = field(default=None, compare=False, repr=False)
    #: the content keys a DELTA blob refers to (empty for the other codecs)
    refs: tuple[bytes, ...] = ()
    #: the raw bytes of a DELTA blob read from another trace (:meth:`TraceReader.read_prepared`), for
    #: a writer that lacks its references to store it whole instead
    raw: Any = field(default=None, compare=False, repr=False)

    @property
    def stored_len(self) -> int:
        """Bytes the blob's data occupies in the file (its record adds 64 bytes of headers)."""
        return 0 if self.data is None else _size_of(self.data)


@dataclass(frozen=True)
class WriterStats:
    """Counters of a :class:`TraceWriter` (a snapshot; sizes in bytes)."""

    blob_count: int = 0  # unique blobs written
    raw_bytes: int = 0  # uncompressed size of the unique blobs written
    stored_bytes: int = 0  # their stored (compressed or raw) data size, record headers excluded
    dedup_count: int = 0  # put_blob/write_prepared calls whose key was already stored
    dedup_bytes: int = 0  # uncompressed bytes those calls did not write
    delta_count: int = 0  # unique blobs stored as deltas (codec DELTA)
    meta_count: int = 0
    file_bytes: int = 0  # bytes written to the file so far, all headers included


class TraceWriter:
    """Append records to a new trace at ``path``, atomically published by :meth:`close`.

    Records go to ``partial_path`` (``.<name>.<pid>.<random>.partial`` in the target's folder), each
    written completely (no user-space buffer) before the adding call returns, so a crash leaves a
    partial file readable up to its last complete record. ``close()`` writes INDEX + TRAILER and
    renames onto ``path`` (the last writer to close wins; writers never share a file); with ``fsync``
    it syncs the file first and the folder after, so that the trace also survives a power loss.
    ``abort()`` deletes the partial file.

    As a context manager: a clean exit closes; an exception (including cancellation) aborts, unless
    ``finalize_on_error=True``, in which case the trace is closed (finalized and renamed) with what was
    written so far and the exception still propagates.

    Threads: :meth:`compress_blob` is pure and thread-safe (hashing and zstd release the GIL, so it can
    run in parallel worker threads; each thread reuses its own compressor). :meth:`write_prepared`,
    :meth:`put_blob`, :meth:`add_meta`, :meth:`close` and :meth:`abort` serialise on an internal lock,
    so they may be called from any thread, but only one appends at a time; the intended use is a single
    writer thread fed by parallel ``compress_blob`` workers. ``put_blob`` compresses in the calling
    thread with that thread's compressor (one reused ZstdCompressor per thread and size class).

    Deltas: given a :class:`capture.format.codecs.delta.Residual` (see :meth:`residual`), :meth:`compress_blob`
    stores a blob as its difference from earlier blobs when that is smaller than the blob's own
    encoding. Its references must be in the file when it is written (written first, in the same
    thread), and decoding it may not need more than ``DELTA_MAX_BLOBS`` deltas: :meth:`write_prepared`
    checks both.
    """

    def __init__(
        self,
        path: StrPath,
        *,
        level: int = 3,
        threads: int = 0,
        min_compress: int = 64,
        planes: bool = True,
        finalize_on_error: bool = False,
        fsync: bool = False,
        workers: int = 0,
    ) -> None:
        self.path: str = os.path.abspath(os.fspath(path))
        self.fsync = fsync
        self.level = level
        self.threads = threads
        self.min_compress = min_compress
        self.planes = planes
        self._plane_pool: ThreadPoolExecutor | None = None
        #: threads that encode the planes (and compute the residual chunks) of large blobs, at most
        #: (0: as many as the cores, and never fewer than the planes); never changes the bytes
        self.workers = workers if workers > 0 else max(PLANE_WIDTH, os.cpu_count() or 1)
        #: blob-sized scratch buffers: the planes of blobs being written, and a recorder's residuals (one
        #: pool, so that the buffers of the initial state's planes serve the frames' residuals after it)
        self.blob_buffers = BlobBuffers(BLOB_BUFFERS_KEEP_BYTES)
        self.finalize_on_error = finalize_on_error
        zstandard.ZstdCompressor(level=level)  # validate the level now, not in a worker thread
        folder, name = os.path.split(self.path)
        self.partial_path: str = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(6).hex()}.partial")
        self.published_path: str | None = None  # where close() put the trace (see _publish_target)
        self._fd: int | None = _create_partial(self.path, self.partial_path)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._metas: list[tuple[int, str]] = []
        self._blobs: dict[bytes, BlobEntry] = {}
        self._refs: dict[bytes, tuple[bytes, ...]] = {}  # the references of every DELTA blob written
        self._stats = WriterStats()
        self._pos = 0
        self.closed = False
        try:
            self._append_raw(R.pack_file_header())
        except BaseException:
            self.abort()
            raise

    # -- context manager ---------------------------------------------------------------------------

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None or self.finalize_on_error:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        """A writer dropped unclosed behaves like a crash: its fd is closed, its partial file stays."""
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
                warnings.warn(
                    f"TraceWriter for {self.path} was not closed; left {self.partial_path}",
                    ResourceWarning,
                    stacklevel=1,
                )
            except Exception:
                pass

    # -- state -------------------------------------------------------------------------------------

    @property
    def stats(self) -> WriterStats:
        """A snapshot of the counters."""
        with self._lock:
            return replace(self._stats, file_bytes=self._pos)

    def has_blob(self, key: str | bytes) -> bool:
        """Whether a blob with this content key is already stored in this file."""
        return R.key_bytes(key) in self._blobs

    def blob_info(self, key: str | bytes) -> BlobInfo:
        """(stored_len, raw_len, codec) of a blob written to this file, as a reader's index will say.
        KeyError if absent."""
        e = self._blobs[R.key_bytes(key)]
        return BlobInfo(e.stored_len, e.raw_len, e.codec)

    def _check_open(self) -> int:
        if self._fd is None:
            raise ValueError(f"trace writer for {self.path} is closed")
        return self._fd

    def _append_raw(self, *parts: Any) -> int:
        """Append bytes at the end (lock held or not needed); on failure cut the file back. Returns the offset."""
        fd = self._check_open()
        offset = self._pos
        try:
            _pwrite_all(fd, offset, parts)
        except BaseException:
            try:  # leave no partial record behind, so later records stay reachable by a scan
                os.ftruncate(fd, offset)
            except OSError:
                pass
            raise
        self._pos = offset + _size_of(parts)
        return offset

    def _append_record(self, rtype: int, payload_checksum: int, *payload_parts: Any) -> int:
        """Append one record (header + payload parts); the lock must be held."""
        payload_len = _size_of(payload_parts)
        header = R.pack_record_header(rtype, payload_len, payload_checksum)
        return self._append_raw(header, *payload_parts)

    # -- blobs -------------------------------------------------------------------------------------

    def _compressor(self, nbytes: int) -> zstandard.ZstdCompressor:
        """This thread's reusable compressor for a blob of ``nbytes`` (multithreaded for large blobs)."""
        return self._cctx(nbytes, self.level, "")

    def _residual_compressor(self, nbytes: int) -> zstandard.ZstdCompressor:
        """This thread's reusable compressor for ``nbytes`` of a delta's residual: ``DELTA_LEVEL_STEP``
        levels below the writer's. A residual is mostly low bytes and noise: zstd's higher levels search
        it for matches it does not have (a smooth simulation's residual planes took 3.6x longer at level
        3 than at 1 for 17% fewer bytes)."""
        return self._cctx(nbytes, max(self.level - DELTA_LEVEL_STEP, _ZSTD_MIN_LEVEL), "residual-")

    def _cctx(self, nbytes: int, level: int, kind: str) -> zstandard.ZstdCompressor:
        big = self.threads != 0 and nbytes >= MT_COMPRESS_MIN_BYTES
        attr = kind + ("big" if big else "small")
        cctx = getattr(self._local, attr, None)
        if cctx is None:
            cctx = zstandard.ZstdCompressor(
                level=level, threads=self.threads if big else 0, write_content_size=True, write_checksum=False
            )
            setattr(self._local, attr, cctx)
        return cctx

    def compress_blob(self, data: Buffer, *, skip_if_stored: bool = True, key: bytes | None = None,
                      delta: Residual | None = None) -> PreparedBlob:
        """Hash and compress ``data`` without touching the file. Thread-safe; releases the GIL.

        Stores byte planes or one zstd frame at the writer's level (see ``_encode``) unless ``data`` is
        shorter than ``min_compress`` or the encoding would not be smaller, in which case the raw bytes
        are kept (codec NONE; copied unless ``data``
        is ``bytes``, so the result never aliases a mutable buffer). With ``skip_if_stored`` and a key
        this writer already holds, compression is skipped (``data`` of the result is None). ``key`` is
        ``data``'s content key when the caller has computed it already (it is not checked).

        With ``delta`` (``data``'s residual against earlier blobs, from :meth:`residual`), the blob is
        stored as a DELTA when that is smaller than its own encoding (see ``_encode_or_delta``); the
        result never keeps a view of the residual, whose buffer the caller may reuse at once.
        """
        return self._prepare(_byte_view(data), skip_if_stored=skip_if_stored, copy_raw=not isinstance(data, bytes),
                             key=key, delta=delta)

    def residual(self, data: Buffer, refs: Sequence[tuple[bytes, Buffer]], out: Any = None, keep: Any = None,
                 choice: tuple[int, int] | None = None) -> Residual:
        """``data``'s residual against ``refs`` (content key, bytes) of earlier blobs of its length, most
        recent first, for :meth:`compress_blob`: DIFF against the first, or LINEAR against the first
        two, and the residual's codec, as a probe of each says compresses smallest
        (``capture/format/codecs/delta.py``), or as ``choice`` (transform, residual codec) says, without a probe;
        in ``out`` (a writable buffer of at least ``len(data)`` bytes) when given. With ``keep`` (a writable
        array of ``len(data)`` bytes, possibly the second reference's own), ``data`` is copied into it
        on the way. Thread-safe; releases the GIL."""
        view = _byte_view(data)
        buffers = [_byte_view(b) for _, b in refs[:2]]
        probe: int | None = None
        whole_probe = None
        if choice is not None and len(buffers) >= D.REF_COUNT[choice[0]]:
            transform, inner = choice
        else:
            cctx = self._residual_compressor(0)
            planar = (lambda window: planes.planar_size(window, PLANE_WIDTH, cctx)) if self.planes else None
            transform, inner, probe = D.choose(view, buffers, D.WIDTH, cctx.compress, planar)
            whole_probe = self._probe(view)
            if whole_probe is None:
                probe = None  # a small blob: its window is not the one _probe compresses
        used = D.REF_COUNT[transform]
        keys = tuple(R.key_bytes(k) for k, _ in refs[:used])
        if inner == D.SPARSE:
            # the SPARSE parts in one pass: the residual itself is never written
            parts = D.compute_sparse(view, buffers[:used], transform, D.WIDTH, out, keep,
                                         self._plane_map(len(view)))
            return D.Residual(transform, D.WIDTH, keys, None, inner, probe, whole_probe=whole_probe,
                                  nonzero=parts.nonzero, sparse=parts)
        # a residual computed in one thread is the differences only: the zigzag (three more passes over
        # the data) is left to compress_blob, which a recorder runs for several frames in parallel, where
        # this runs for one at a time; one computed in chunks over the plane threads is zigzagged in the
        # same pass (the same bytes either way)
        chunks = self._plane_map(len(view))
        zigzag = chunks is not map
        residual, nonzero = D.compute_counted(view, buffers[:used], transform, D.WIDTH, out, keep, chunks,
                                              zigzag=zigzag)
        return D.Residual(transform, D.WIDTH, keys, residual, inner, probe, whole_probe=whole_probe,
                          zigzagged=zigzag, nonzero=nonzero)

    def _prepare(self, view: memoryview, *, skip_if_stored: bool, copy_raw: bool, key: bytes | None = None,
                 delta: Residual | None = None) -> PreparedBlob:
        key = R.content_key(view) if key is None else key
        raw_len = len(view)
        if skip_if_stored and key in self._blobs:
            return PreparedBlob(key.hex(), raw_len, Codec.NONE, None, 0)
        codec, parts, lease = Codec.NONE, (view,), None  # type: Codec, tuple[Any, ...], _Lease | None
        refs: tuple[bytes, ...] = ()
        if raw_len >= self.min_compress:
            if delta is not None and raw_len >= DELTA_MIN_BYTES and key not in delta.refs:
                codec, parts, lease, refs = self._encode_or_delta(view, delta)
            else:
                codec, parts, lease = self._encode(view)
        if codec == Codec.NONE and copy_raw:
            parts = (view.tobytes(),)
        sub = R.pack_blob_header(key, raw_len, codec)
        return PreparedBlob(key.hex(), raw_len, int(codec), parts, R.checksum(sub, *parts), lease, refs)

    def _probe(self, view: memoryview) -> tuple[int, int] | None:
        """(plain, planar) compressed sizes of a probe from the middle of ``view`` (planar: as 4-byte
        planes, or the plain size when the writer stores no planes); None for a view too small to probe."""
        if len(view) < PLANES_MIN_BYTES:
            return None
        return planes.probe(view, PLANE_WIDTH, self._compressor(0), planar=self.planes)

    def _encode_or_delta(self, view: memoryview, residual: Residual) -> tuple[Codec, tuple[Any, ...], _Lease | None, tuple[bytes, ...]]:
        """The smaller of ``view``'s own encoding (``_encode``) and its delta (a DELTA header, then the
        residual's encoding), with the references of the delta when it is chosen. A large blob is
        probed (``_probe``: the same bytes the residual's probe compressed): when the residual's probe
        is not smaller, only the whole blob is encoded, as without a residual; when it is at most
        ``DELTA_SURE`` of it, only the delta is, unless it comes out larger than the whole blob's
        probe predicts for the whole blob; otherwise both are encoded and the smaller is kept. A
        residual chosen without a probe is encoded first, and kept when it is at most ``DELTA_SURE``
        of its ``whole_estimate``. A small blob is always encoded both ways."""
        if residual.size != len(view):
            raise ValueError(f"a residual of {residual.size} bytes for a blob of {len(view)}")
        encoded: tuple[int, tuple[Any, ...], _Lease | None] | None = None
        if residual.probe is None and residual.whole_estimate is not None:
            encoded = self._encode_residual(residual)
            if D.header_size(residual.transform) + _size_of(encoded[1]) <= DELTA_SURE * residual.whole_estimate:
                return self._delta_parts(encoded, residual)
        whole_probe = residual.whole_probe if residual.whole_probe is not None else self._probe(view)
        if encoded is None and whole_probe is not None and residual.probe is not None:
            whole_best = min(whole_probe)
            if residual.probe >= whole_best:
                return (*self._encode(view, whole_probe), ())
            if residual.probe <= DELTA_SURE * whole_best:
                encoded = self._encode_residual(residual)
                window = D.PROBE_BYTES  # the bytes both probes compressed
                if D.header_size(residual.transform) + _size_of(encoded[1]) <= len(view) * whole_best / window:
                    return self._delta_parts(encoded, residual)
        whole = self._encode(view, whole_probe)
        if encoded is None:
            encoded = self._encode_residual(residual)
        if D.header_size(residual.transform) + _size_of(encoded[1]) < _size_of(whole[1]):
            if whole[2] is not None:
                whole[2].release()
            return self._delta_parts(encoded, residual)
        if encoded[2] is not None:
            encoded[2].release()
        return (*whole, ())

    def _encode_residual(self, residual: Residual) -> tuple[int, tuple[Any, ...], _Lease | None]:
        """(residual codec, stored parts, plane buffer lease) of a residual: the codec its probe chose
        (all of them, the smallest kept, for a residual too small to probe). Never a view of its data."""
        def sparse() -> tuple[int, tuple[Any, ...], _Lease | None]:
            compress = self._residual_compressor(residual.size).compress
            if residual.sparse is not None:  # computed as its parts: nothing left but their compression
                s = residual.sparse
                return D.SPARSE, tuple(S.sparse_parts(s.bits, s.values, s.tail, compress)), None
            coding = Coding(self._residual_compressor, residual.width, zigzagged=residual.zigzagged,
                            nonzero=residual.nonzero)
            return D.SPARSE, tuple(codecs.residual(D.SPARSE).encode(residual.full(), coding)), None

        if residual.inner != D.SPARSE:
            residual.finish()  # (SPARSE zigzags only the elements it keeps)
        if residual.inner == D.SPARSE:
            found = sparse()
        elif residual.inner in (Codec.ZSTD, Codec.PLANES):
            found = self._encode(_byte_view(residual.full()), codec=Codec(residual.inner),
                                 compressor=self._residual_compressor)
        else:
            found, other = self._encode(_byte_view(residual.full()), compressor=self._residual_compressor), sparse()
            if _size_of(other[1]) < _size_of(found[1]):
                if found[2] is not None:
                    found[2].release()
                found = other
        if _size_of(found[1]) >= residual.size or found[0] == Codec.NONE:
            if found[2] is not None:
                found[2].release()
            residual.finish()
            return Codec.NONE, (residual.full().tobytes(),), None
        return found

    @staticmethod
    def _delta_parts(encoded: tuple[int, tuple[Any, ...], _Lease | None], residual: Residual
                     ) -> tuple[Codec, tuple[Any, ...], _Lease | None, tuple[bytes, ...]]:
        """The stored parts of a DELTA blob: its header, then the residual's encoding."""
        inner, parts, lease = encoded
        header = D.pack_header(residual.transform, residual.width, int(inner), residual.refs)
        return Codec.DELTA, (header, *parts), lease, residual.refs

    def _encode(self, view: memoryview, probe: tuple[int, int] | None = None, codec: Codec | None = None,
                compressor: Any = None) -> tuple[Codec, tuple[Any, ...], _Lease | None]:
        """The smallest of the codecs tried, as the parts of its stored data (and the lease of the
        plane buffer they view): byte planes when a probe (``probe``, when the caller made it already)
        says the data is made of elements (floats) whose planes compress better apart, else one zstd
        frame (``codec`` ZSTD or PLANES: that one, without a probe); the raw ``view`` when neither is
        smaller than the data. ``compressor`` (``_compressor`` by default) gives this thread's
        compressor for a number of bytes."""
        compressor = self._compressor if compressor is None else compressor
        if self.planes and len(view) >= PLANES_MIN_BYTES and codec != Codec.ZSTD:
            if probe is None and codec is None:
                probe = planes.probe(view, PLANE_WIDTH, compressor(0))
            if codec == Codec.PLANES or (probe is not None and probe[1] < planes.PLANAR_GAIN * probe[0]):
                buffer = self.blob_buffers.take(len(view))
                coding = Coding(compressor, PLANE_WIDTH, buffer, self._plane_map(len(view)))
                parts = codecs.blob(Codec.PLANES).encode(view, coding)
                if _size_of(parts) < len(view):
                    return Codec.PLANES, tuple(parts), _Lease(self.blob_buffers, buffer)
                self.blob_buffers.give(buffer)
                return Codec.NONE, (view,), None
        frame = codecs.blob(Codec.ZSTD).encode(view, Coding(compressor))
        return (Codec.ZSTD, tuple(frame), None) if _size_of(frame) < len(view) else (Codec.NONE, (view,), None)

    def _plane_map(self, nbytes: int) -> Any:
        """How to run the planes of a blob: in parallel threads for a large blob when the writer may
        use threads (as zstd's workers would), else one after the other."""
        if self.threads == 0 or nbytes < PARALLEL_PLANES_MIN_BYTES:
            return map
        with self._lock:
            if self._plane_pool is None:
                # one pool for all blobs, which are compressed several at a time: room for all cores
                self._plane_pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="vkcap-planes")
        return self._plane_pool.map

    def write_prepared(self, prepared: PreparedBlob) -> str:
        """Append a prepared blob unless its key is already stored (then only count the duplicate).

        Returns the key. Once this returns, the record is completely in the file (kill-safe), and the
        plane buffer ``prepared`` borrowed is taken back.

        A DELTA blob is appended only when its references are in this file already, with its length,
        and decoding it needs at most ``DELTA_MAX_BLOBS`` deltas. Otherwise one read from another
        trace (which carries its raw bytes) is stored whole instead, and any other raises ValueError.
        """
        try:
            return self._write_prepared(prepared)
        finally:
            if prepared.lease is not None:
                prepared.lease.release()

    def _write_prepared(self, prepared: PreparedBlob) -> str:
        key = bytes.fromhex(prepared.key)
        with self._lock:
            self._check_open()
            if key in self._blobs:
                s = self._stats
                self._stats = replace(s, dedup_count=s.dedup_count + 1, dedup_bytes=s.dedup_bytes + prepared.raw_len)
                return prepared.key
            if prepared.data is None:
                raise ValueError(f"blob {prepared.key} was prepared without data for another writer")
            problem = self._delta_problem(key, prepared) if prepared.codec == Codec.DELTA else None
            if problem is None:
                self._append_blob(key, prepared)
                return prepared.key
        if prepared.raw is None:
            raise ValueError(f"blob {prepared.key} cannot be stored as a delta: {problem}")
        # encoded outside the lock, which encoding large planes takes
        return self.write_prepared(self._prepare(_byte_view(prepared.raw), skip_if_stored=False, copy_raw=False, key=key))

    def _append_blob(self, key: bytes, prepared: PreparedBlob) -> None:
        """Append the BLOB record of ``prepared`` and register it (the lock is held)."""
        assert prepared.data is not None
        sub = R.pack_blob_header(key, prepared.raw_len, prepared.codec)
        offset = self._append_record(RecordType.BLOB, prepared.payload_checksum, sub, *prepared.data)
        stored_len = prepared.stored_len
        self._blobs[key] = BlobEntry(offset, stored_len, prepared.raw_len, prepared.codec)
        delta = prepared.codec == Codec.DELTA
        if delta:
            self._refs[key] = prepared.refs
        s = self._stats
        self._stats = replace(
            s,
            blob_count=s.blob_count + 1,
            raw_bytes=s.raw_bytes + prepared.raw_len,
            stored_bytes=s.stored_bytes + stored_len,
            delta_count=s.delta_count + delta,
        )

    def _delta_problem(self, key: bytes, prepared: PreparedBlob) -> str | None:
        """Why the DELTA blob ``prepared`` cannot be appended now, or None: a reference missing from
        the file or of another length, or a delta closure of more than DELTA_MAX_BLOBS deltas."""
        for ref in prepared.refs:
            entry = self._blobs.get(ref)
            if entry is None or ref == key:
                return f"its reference {ref.hex()} is not in the trace"
            if entry.raw_len != prepared.raw_len:
                return f"its reference {ref.hex()} holds {entry.raw_len} bytes, not {prepared.raw_len}"
        deltas, seen, todo = 1, set(), list(prepared.refs)
        while todo:
            ref = todo.pop()
            if ref in seen:
                continue
            seen.add(ref)
            refs = self._refs.get(ref)
            if refs is not None:
                deltas += 1
                if deltas > R.DELTA_MAX_BLOBS:
                    return f"decoding it would decode more than {R.DELTA_MAX_BLOBS} deltas"
                todo.extend(refs)
        return None

    def delta_blobs(self, key: str | bytes) -> int:
        """How many DELTA blobs decoding blob ``key`` of this file decodes (0 for a blob stored whole);
        KeyError if it is not in the file."""
        k = R.key_bytes(key)
        if k not in self._blobs:
            raise KeyError(f"no blob {k.hex()} in {self.partial_path}")
        seen: set[bytes] = set()
        todo = [k]
        while todo:
            ref = todo.pop()
            if ref not in seen and ref in self._refs:
                seen.add(ref)
                todo.extend(self._refs[ref])
        return len(seen)

    def put_blob(self, data: Buffer, *, refs: Sequence[Buffer] = ()) -> str:
        """Store ``data`` once under its content key (32 hex digits of xxh3_128) and return the key.

        Accepts bytes, bytearray, memoryview or a numpy array (its raw bytes, no copy if contiguous).
        A key already stored costs one hash and nothing in the file. Equivalent to
        ``write_prepared(compress_blob(data))`` without the defensive copy.

        ``refs``: earlier blobs of this file (their bytes, the most recent first) that ``data`` may be
        stored as a delta of, when they have its length and that is smaller (see :meth:`residual`).
        """
        self._check_open()
        view = _byte_view(data)
        residual = None
        if refs and len(view) >= DELTA_MIN_BYTES:
            views = [_byte_view(r) for r in refs[:2]]
            keyed = [(R.content_key(v), v) for v in views]
            usable: list[tuple[bytes, Buffer]] = []
            for k, v in keyed:  # a prefix of them: LINEAR needs both
                if len(v) != len(view) or k not in self._blobs:
                    break
                usable.append((k, v))
            if usable:
                residual = self.residual(view, usable)
        prepared = self._prepare(view, skip_if_stored=True, copy_raw=False, delta=residual)
        if prepared.codec == Codec.DELTA:
            prepared = replace(prepared, raw=view)  # stored whole if the delta cannot be
        return self.write_prepared(prepared)

    # -- metadata ----------------------------------------------------------------------------------

    def add_meta(self, kind: str, body: dict[str, Any]) -> int:
        """Append a META record ``{"kind": kind, **body}`` and return its offset.

        ``body`` must be msgpack-serialisable with str keys at every level of maps (what a reader accepts)
        and must not contain ``"kind"``; tuples become lists. Raises TypeError/ValueError otherwise,
        before anything is written.
        """
        if not isinstance(kind, str) or not kind:
            raise ValueError("META kind must be a non-empty str")
        if "kind" in body:
            raise ValueError("META body must not contain the key 'kind' (it is the record's kind)")
        payload = R.pack_msgpack({"kind": kind, **body})
        try:
            R.unpack_meta(payload)
        except LayoutError as exc:
            raise ValueError(f"META body would not be readable back: {exc}") from None
        with self._lock:
            self._check_open()
            offset = self._append_record(RecordType.META, R.checksum(payload), payload)
            self._metas.append((offset, kind))
            self._stats = replace(self._stats, meta_count=self._stats.meta_count + 1)
        return offset

    # -- finishing ---------------------------------------------------------------------------------

    def release_cache(self) -> None:
        """Ask the kernel to drop the file's written pages from the page cache, without syncing: it
        starts writing dirty pages back (it does not wait for them) and drops the clean ones, which a
        later call then finds written. A recorder that calls this every few MiB reuses a few recently
        freed pages instead of filling memory with the whole trace (see :meth:`sync`)."""
        with self._lock:
            fd, end = self._check_open(), self._pos
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, end, os.POSIX_FADV_DONTNEED)

    def sync(self, *, release_cache: bool = False) -> None:
        """fsync what was written so far (records survive a power loss, not just a process kill).

        Does not hold the writer's lock while the disk works: another thread may append records
        meanwhile (they may or may not be included). The caller must not close the writer before
        this returns.

        With ``release_cache``, the synced bytes then leave the page cache (they are on disk, and a
        recorder does not read them back). A long recording then reuses a few recently freed pages
        instead of filling memory with the whole trace: on the VMs we measured, writing into pages
        the kernel had not used for a few seconds cost 2.6 ms/MiB of CPU, against 0.6 ms/MiB when
        the cache was released every 32 MiB."""
        with self._lock:
            fd, end = self._check_open(), self._pos
        os.fsync(fd)
        if release_cache and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, end, os.POSIX_FADV_DONTNEED)

    def close(self, *, keep_existing: bool = False) -> None:
        """Write INDEX and TRAILER and atomically rename the partial file onto ``path``
        (``published_path`` then says where it went). With ``fsync``, the file is synced before the
        rename and its folder after it, so that a power loss leaves the old file or the new one;
        without, a power loss soon after may leave a truncated or empty file (a process killed at
        any moment never does).

        With ``keep_existing`` (a failed recording) the trace never replaces a file at ``path``: when
        one exists it is published beside it as :func:`failed_trace_path` (``NAME.failed.vkt``,
        atomically too) and the file at ``path`` is untouched. A target that became a folder, device node or FIFO since the
        writer started is refused (:class:`vkcore.outputs.OutputTargetError`, an OSError).

        Idempotent. If it fails, the partial file is left in place (recoverable by a reader) and the
        exception propagates; call :meth:`abort` to delete it.
        """
        with self._lock:
            if self.closed:
                return
            fd = self._check_open()
            index = R.pack_index(self._metas, self._blobs)
            index_sum = R.checksum(index)
            index_offset = self._append_record(RecordType.INDEX, index_sum, index)
            self._append_raw(R.pack_trailer(index_offset, index_sum))
            if self.fsync:
                os.fsync(fd)
            os.close(fd)
            self._fd = None
            target = self._publish_target(keep_existing)
            replace_file(self.partial_path, target)
            self.published_path = target
            self.closed = True
        if self.fsync:
            _fsync_dir(os.path.dirname(self.path))

    def _publish_target(self, keep_existing: bool) -> str:
        """Where :meth:`close` renames the trace: ``path``, or beside it when ``keep_existing`` and a
        file is there; checked like any output target."""
        target = self.path
        if keep_existing and os.path.lexists(target):
            target = failed_trace_path(target)
        check_output_target(target)
        return target

    def release(self) -> None:
        """Close the file but keep the partial file, for a reader to recover (after a failed
        :meth:`close`, e.g. on a full disk). Idempotent."""
        with self._lock:
            self.closed = True
            self._close_fd()

    def abort(self) -> None:
        """Close and delete the partial file; the target path is untouched. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._close_fd()
            try:
                os.unlink(self.partial_path)
            except FileNotFoundError:
                pass

    def _close_fd(self) -> None:
        """Close the partial file's descriptor if it is open; it is forgotten even if closing fails
        (the caller holds the lock). The plane threads, if any, are let go too."""
        pool, self._plane_pool = self._plane_pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
