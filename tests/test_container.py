"""Tests of the generic .vkt container (capture.writer, capture.reader, capture.format.records): no Vulkan involved."""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture.format import records as R
from capture.format.errors import ContainerError, LimitExceeded, NotATrace, TraceCorrupt, UnsupportedVersion
from capture.reader import TraceReader
from capture.writer import TraceWriter, blob_key
from tests.readlog import ReadLog

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


# --------------------------------------------------------------------------------------------------
# helpers


def build_sample(path: Path) -> dict[str, Any]:
    """A small finished trace with metas and blobs interleaved; returns what was written and where."""
    rng = np.random.default_rng(1)
    items: list[tuple[str, int, Any]] = []  # (what, offset, value)
    with TraceWriter(path) as w:
        items.append(("meta", w.add_meta("header", {"version": 1, "name": "sample"}), None))
        blobs: dict[str, bytes] = {}
        for i in range(4):
            data = rng.integers(0, 4, size=300 + 50 * i, dtype=np.uint8).tobytes()  # compressible
            key = w.put_blob(data)
            blobs[key] = data
            items.append(("blob", -1, key))
            items.append(("meta", w.add_meta("frame", {"index": i, "snapshots": {"out": key}}), i))
        incompressible = rng.bytes(200)
        key = w.put_blob(incompressible)
        blobs[key] = incompressible
        items.append(("blob", -1, key))
        w.put_blob(incompressible)  # duplicate: no record
        items.append(("meta", w.add_meta("end", {}), None))
    with TraceReader(path) as r:
        assert not r.recovered
        items = [(what, r.blob_offset(v) if what == "blob" else off, v) for what, off, v in items]
        data = path.read_bytes()
        index_offset = R.TRAILER_PAYLOAD.unpack_from(data, len(data) - R.TRAILER_PAYLOAD.size)[0]
    return {"items": items, "blobs": blobs, "data": data, "index_offset": index_offset}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_sample(tmp_path_factory.mktemp("sample") / "sample.vkt")


def read_everything(r: TraceReader) -> tuple[list[tuple[int, dict]], dict[str, bytes]]:
    """Read every META and blob the reader lists (used to prove everything listed is readable)."""
    return r.metas(), {k: r.read_blob(k) for k in r.blob_keys()}


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


# --------------------------------------------------------------------------------------------------
# round trip


def test_round_trip_metas_and_blobs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    payloads: list[Any] = [
        rng.bytes(100_000),  # incompressible -> raw
        bytes(100_000),  # compressible -> zstd
        np.sin(np.arange(50_000, dtype=np.float32)).reshape(250, 200),
        np.arange(1000, dtype=np.int64)[::3],  # not contiguous: stored as its contiguous copy
        memoryview(np.linspace(0, 1, 777, dtype=np.float64)),  # type: ignore[arg-type]  # non-byte format
        bytearray(b"abc" * 1000),
        b"tiny",  # below min_compress
        b"",
    ]
    meta_bodies: list[dict[str, Any]] = [
        {"a": 1, "nested": {"list": [1, 2.5, "x", None, True], "bin": b"\x00\xff"}, "unicode": "é✓"},
        {"big": list(range(1000))},
        {},
    ]
    path = tmp_path / "t.vkt"
    with TraceWriter(path) as w:
        assert not path.exists() and Path(w.partial_path).exists()
        assert Path(w.partial_path).parent == tmp_path and Path(w.partial_path).name.startswith(".t.vkt.")
        keys = [w.put_blob(p) for p in payloads]
        offsets = [w.add_meta(f"kind{i % 2}", body) for i, body in enumerate(meta_bodies)]
        stats = w.stats
    expected = [np.ascontiguousarray(p).tobytes() if isinstance(p, np.ndarray) else bytes(p) for p in payloads]
    assert keys == [xxhash.xxh3_128_hexdigest(e) for e in expected] == [blob_key(p) for p in payloads]
    assert stats.blob_count == len(payloads) and stats.raw_bytes == sum(map(len, expected))
    assert stats.stored_bytes < stats.raw_bytes
    assert not Path(w.partial_path).exists()
    with TraceReader(path) as r:
        assert not r.recovered and r.recovery_note == "" and r.version == (R.FORMAT_MAJOR, R.FORMAT_MINOR)
        for key, e in zip(keys, expected, strict=True):
            assert r.has_blob(key) and r.read_blob(key) == e
            assert r.blob_info(key).raw_len == len(e)
        assert r.blob_info(keys[0]).codec == R.Codec.NONE and r.blob_info(keys[0]).stored_len == 100_000
        assert r.blob_info(keys[1]).codec == R.Codec.ZSTD and r.blob_info(keys[1]).stored_len < 1000
        assert r.blob_info(keys[6]).codec == R.Codec.NONE
        assert [o for o, _ in r.metas()] == offsets
        assert [b for _, b in r.metas()] == [{"kind": f"kind{i % 2}", **b} for i, b in enumerate(meta_bodies)]
        assert [o for o, _ in r.metas("kind1")] == [offsets[1]]
        assert not r.has_blob("0" * 32)
        with pytest.raises(KeyError):
            r.read_blob("0" * 32)


def test_add_meta_rejects_unreadable_bodies(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "t.vkt") as w:
        size = w.stats.file_bytes
        with pytest.raises(ValueError):
            w.add_meta("x", {"kind": "y"})
        with pytest.raises(ValueError):
            w.add_meta("x", {"m": {1: 2}})  # int map keys are refused by readers
        with pytest.raises(TypeError):
            w.add_meta("x", {"o": object()})
        assert w.stats.file_bytes == size


def test_parallel_compress_then_write(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    chunks = [rng.integers(0, 8, size=200_000, dtype=np.uint8) for _ in range(8)]
    with TraceWriter(tmp_path / "t.vkt", threads=2) as w:
        prepared: list[Any] = [None] * len(chunks)

        def work(i: int) -> None:
            prepared[i] = w.compress_blob(chunks[i])

        workers = [threading.Thread(target=work, args=(i,)) for i in range(len(chunks))]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        keys = [w.write_prepared(p) for p in prepared]
        assert w.compress_blob(chunks[0]).data is None  # already stored: compression skipped
        buf = bytearray(rng.bytes(1000))
        raw = w.compress_blob(buf)
        buf[:] = bytes(1000)  # the prepared blob does not alias the caller's buffer
        keys.append(w.write_prepared(raw))
    with TraceReader(tmp_path / "t.vkt") as r:
        assert [r.read_blob(k) for k in keys[:-1]] == [c.tobytes() for c in chunks]
        assert xxhash.xxh3_128_hexdigest(r.read_blob(keys[-1])) == keys[-1]


def test_plane_buffers_are_lent_to_one_blob_at_a_time_and_reused_once_written(tmp_path: Path) -> None:
    """Byte-plane blobs split into a buffer the writer lends and takes back when the blob is written;
    the next blob of that size reuses it. A buffer is never lent twice at once: writing the same
    prepared blob again (a duplicate) does not give it back a second time."""
    frames = [np.sin(np.arange(256 * 1024, dtype=np.float32) / 300 + k).astype(np.float32) for k in range(4)]
    with TraceWriter(tmp_path / "t.vkt") as w:
        first, second = w.compress_blob(frames[0]), w.compress_blob(frames[1])
        assert first.codec == second.codec == R.Codec.PLANES and first.lease is not None and second.lease is not None
        assert first.lease._buffer is not second.lease._buffer  # both in flight: two buffers
        lent = first.lease._buffer
        keys = [w.write_prepared(first)]
        w.write_prepared(first)  # a duplicate: counted, the buffer is not given back again
        third = w.compress_blob(frames[2])
        assert third.lease is not None and third.lease._buffer is lent  # reused once written
        fourth = w.compress_blob(frames[3])
        assert fourth.lease is not None and fourth.lease._buffer is not lent
        keys += [w.write_prepared(p) for p in (second, third, fourth)]
        assert w.stats.dedup_count == 1
    with TraceReader(tmp_path / "t.vkt") as r:
        assert [r.read_blob(k) for k in keys] == [f.tobytes() for f in frames]


def test_large_blob_uses_worker_threads(tmp_path: Path) -> None:
    data = np.sin(np.arange(2 * MiB, dtype=np.float32) / 100)  # 8 MiB, over the multithreading threshold
    with TraceWriter(tmp_path / "t.vkt", threads=2) as w:
        key = w.put_blob(data)
    with TraceReader(tmp_path / "t.vkt") as r:
        assert r.read_blob(key) == data.tobytes()


# --------------------------------------------------------------------------------------------------
# dedup and seeking


def test_dedup_50_identical_blobs(tmp_path: Path) -> None:
    blob = np.random.default_rng(5).bytes(MiB)  # incompressible: stored raw, 1 MiB
    path = tmp_path / "t.vkt"
    with TraceWriter(path) as w:
        keys = {w.put_blob(blob) for _ in range(50)}
        stats = w.stats
    assert len(keys) == 1
    assert stats.blob_count == 1 and stats.dedup_count == 49 and stats.dedup_bytes == 49 * MiB
    assert MiB < path.stat().st_size < MiB + 4096


def test_read_blob_reads_only_that_record(sample: dict[str, Any]) -> None:
    f = ReadLog(io.BytesIO(sample["data"]))
    r = TraceReader(f)
    assert not r.recovered
    # opening reads the file header, the trailer and the index: O(1) records, no payloads
    index_len = len(sample["data"]) - sample["index_offset"] - R.TRAILER_SIZE
    assert f.bytes_read() <= R.FILE_HEADER.size + R.TRAILER_SIZE + index_len
    for key, data in sample["blobs"].items():
        f.reads.clear()
        assert r.read_blob(key) == data
        start = r.blob_offset(key)
        end = start + 64 + r.blob_info(key).stored_len
        assert f.bytes_read() == end - start
        assert all(start <= off and off + n <= end for off, n in f.reads)
    meta_off = r.meta_index("end")[0][0]
    f.reads.clear()
    r.read_meta(meta_off)
    assert all(off >= meta_off for off, _ in f.reads) and f.bytes_read() < 64


# --------------------------------------------------------------------------------------------------
# crash safety and recovery


def _record_starts(sample: dict[str, Any]) -> list[int]:
    data = sample["data"]
    starts = sorted(off for _, off, _ in sample["items"])
    return starts + [sample["index_offset"], len(data) - R.TRAILER_SIZE, len(data)]


def test_truncation_at_every_boundary_and_mid_record(sample: dict[str, Any]) -> None:
    data = sample["data"]
    starts = _record_starts(sample)
    ends = dict(zip(starts[:-1], starts[1:], strict=True))  # record start -> record end
    cuts = {c for s in starts for c in (s, s + 1, s + 31, s + 32, s + 33, s + 63, s + 64, s + 70)}
    cuts |= {(a + b) // 2 for a, b in zip(starts[:-1], starts[1:], strict=True)}
    cuts = {c for c in cuts if R.FILE_HEADER.size <= c <= len(data)}
    assert len(cuts) > 50
    for cut in sorted(cuts):
        r = TraceReader(io.BytesIO(data[:cut]))
        if cut == len(data):
            assert not r.recovered
            continue
        assert r.recovered and "trailing bytes ignored" in r.recovery_note and not r.corrupt_records
        complete = [(what, off, v) for what, off, v in sample["items"] if ends[off] <= cut]
        metas, blobs = read_everything(r)
        assert [off for off, _ in metas] == [off for what, off, _ in complete if what == "meta"]
        assert set(blobs) == {v for what, _, v in complete if what == "blob"}
        assert all(blobs[k] == sample["blobs"][k] for k in blobs)
        last = max((off for _, off, _ in complete), default=None)
        if last is not None and cut < sample["index_offset"]:
            assert f"last complete record at offset {last}" in r.recovery_note
    for cut in range(R.FILE_HEADER.size):
        with pytest.raises(NotATrace):
            TraceReader(io.BytesIO(data[:cut]))


def test_partial_file_is_readable_while_writing(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "t.vkt") as w:
        key = w.put_blob(b"x" * 1000)
        off = w.add_meta("frame", {"i": 0})
        with TraceReader(w.partial_path) as r:
            assert r.recovered and r.read_blob(key) == b"x" * 1000 and r.metas() == [(off, {"kind": "frame", "i": 0})]
            assert "0 trailing bytes ignored" in r.recovery_note


def test_sync_in_another_thread_while_appending_then_releasing_the_cache(tmp_path: Path) -> None:
    """``sync(release_cache=True)`` runs beside the appending thread (as the recorder's sync thread
    does) and leaves every record readable: the dropped pages come back from disk."""
    rng = np.random.default_rng(11)
    blobs = [rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes() for _ in range(12)]
    with TraceWriter(tmp_path / "t.vkt") as w:
        keys = []
        for i, blob in enumerate(blobs):
            keys.append(w.put_blob(blob))
            if i % 3 == 0:
                syncer = threading.Thread(target=w.sync, kwargs={"release_cache": True})
                syncer.start()
                w.add_meta("note", {"i": i})
                syncer.join()
    with TraceReader(tmp_path / "t.vkt") as r:
        assert [bytes(r.read_blob(k)) for k in keys] == blobs
        assert [m["i"] for _, m in r.metas() if m["kind"] == "note"] == [0, 3, 6, 9]


def test_kill_9_leaves_complete_records_readable(tmp_path: Path) -> None:
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from capture.writer import TraceWriter
w = TraceWriter({str(tmp_path / "k.vkt")!r})
for i in range(20):
    w.put_blob(bytes([i]) * 10000)
    w.add_meta('frame', {{'i': i}})
print(w.partial_path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    partial = proc.stdout.strip()
    assert not (tmp_path / "k.vkt").exists()
    with TraceReader(partial) as r:
        assert r.recovered
        assert [b["i"] for _, b in r.metas("frame")] == list(range(20))
        assert sorted(r.read_blob(k)[0] for k in r.blob_keys()) == list(range(20))


def test_flipped_byte_in_blob_payload(sample: dict[str, Any]) -> None:
    data = sample["data"]
    keys = list(sample["blobs"])
    victim = keys[2]
    with TraceReader(io.BytesIO(data)) as r0:
        at = r0.blob_offset(victim)
        stored = r0.blob_info(victim).stored_len
    bad = flip(data, at + 64 + stored // 2)
    r = TraceReader(io.BytesIO(bad))
    assert not r.recovered
    with pytest.raises(TraceCorrupt) as err:
        r.read_blob(victim)
    assert f"offset {at}" in str(err.value) and victim in str(err.value)
    assert err.value.offset == at and err.value.key == victim
    for k in keys:
        if k != victim:
            assert r.read_blob(k) == sample["blobs"][k]
    # the same damage found by a recovery scan (no trailer): the record is skipped, the rest kept
    r = TraceReader(io.BytesIO(bad[: sample["index_offset"]]))
    assert r.recovered and r.corrupt_records == [(at, R.RecordType.BLOB)]
    assert not r.has_blob(victim) and len(r.blob_keys()) == len(keys) - 1
    metas, _ = read_everything(r)
    assert len(metas) == sum(1 for what, _, _ in sample["items"] if what == "meta")


def test_flipped_byte_in_blob_or_record_header(sample: dict[str, Any]) -> None:
    data = sample["data"]
    victim = list(sample["blobs"])[1]
    at = dict((v, off) for what, off, v in sample["items"] if what == "blob")[victim]
    for pos in (at + 3, at + 10, at + 40, at + 50):  # record header fields, blob key, raw length
        r = TraceReader(io.BytesIO(flip(data, pos)))
        with pytest.raises(TraceCorrupt, match=f"offset {at}"):
            r.read_blob(victim)


def test_flipped_byte_in_meta(sample: dict[str, Any]) -> None:
    data = sample["data"]
    metas = [off for what, off, _ in sample["items"] if what == "meta"]
    r = TraceReader(io.BytesIO(flip(data, metas[1] + 40)))
    assert not r.recovered
    with pytest.raises(TraceCorrupt, match=f"offset {metas[1]}"):
        r.metas()
    assert r.read_meta(metas[2])["kind"] == "frame"
    # a broken record header stops a recovery scan there
    r = TraceReader(io.BytesIO(flip(data, metas[1] + 5)[: sample["index_offset"]]))
    assert r.recovered and f"stopped at offset {metas[1]}" in r.recovery_note
    assert [off for off, _ in r.metas()] == [metas[0]]


def test_flipped_byte_in_index_falls_back_to_recovery(sample: dict[str, Any]) -> None:
    data = sample["data"]
    at = sample["index_offset"]
    for pos in (at + 40, at + 5, len(data) - 20):  # index payload, index header, trailer
        r = TraceReader(io.BytesIO(flip(data, pos)))
        assert r.recovered, pos
        metas, blobs = read_everything(r)
        assert len(metas) == sum(1 for what, _, _ in sample["items"] if what == "meta")
        assert blobs == sample["blobs"]


# --------------------------------------------------------------------------------------------------
# files from strangers


@pytest.mark.parametrize(
    "content",
    [b"", b"VKCAP", b"hello world, this is not a trace at all", random.Random(4).randbytes(4096), b"VKCAPEND" * 20],
    ids=["empty", "magic-prefix", "text", "random-4k", "trailer-magic-only"],
)
def test_not_a_trace(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.vkt"
    path.write_bytes(content)
    with pytest.raises(NotATrace, match=str(path)):
        TraceReader(path)


def test_unsupported_version(sample: dict[str, Any]) -> None:
    data = bytearray(sample["data"])
    data[8:10] = (4).to_bytes(2, "little")
    with pytest.raises(UnsupportedVersion, match=r"version 4\.0 is not supported \(this reader reads 1\.x, 2\.x and 3\.x\)") as err:
        TraceReader(io.BytesIO(bytes(data)))
    assert err.value.version == (4, 0)
    data[10:12] = (7).to_bytes(2, "little")  # a newer minor version stays readable
    for major in (1, 2, 3):  # majors 1 (before codec PLANES) and 2 (before codec DELTA) are still read
        data[8:10] = major.to_bytes(2, "little")
        r = TraceReader(io.BytesIO(bytes(data)))
        assert r.version == (major, 7) and read_everything(r)[1] == sample["blobs"]


@pytest.mark.slow
@pytest.mark.parametrize("count", [0, 1, 15, 16, 70_000])  # msgpack's array headers change at 16 and 65,536
def test_the_index_packed_entry_by_entry_is_the_documented_map(count: int) -> None:
    """INDEX is ``{"metas": [[offset, kind]...], "blobs": [[key, offset, stored, raw, codec]...]}``
    (docs/trace-format.md), packed without building a list per entry: the same bytes, which decode back."""
    metas = [(64 + 100 * i, ("FRAME", "CHECKPOINT", "X-NEW")[i % 3]) for i in range(count)]
    blobs = {i.to_bytes(16, "big"): R.BlobEntry(64 + 7 * i, i, 2 ** 33 + i, i % 5) for i in range(count)}
    packed = R.pack_index(metas, blobs)
    assert packed == R.pack_msgpack({"metas": [[o, k] for o, k in metas],
                                     "blobs": [[k, e.offset, e.stored_len, e.raw_len, e.codec] for k, e in blobs.items()]})
    assert R.unpack_msgpack(packed) == {"metas": [[o, k] for o, k in metas],
                                        "blobs": [[k, e.offset, e.stored_len, e.raw_len, e.codec] for k, e in blobs.items()]}


def _finished(records: list[bytes], blobs: dict[bytes, R.BlobEntry], metas: list[tuple[int, str]]) -> bytes:
    """Assemble a finished file by hand from complete records (for hostile inputs)."""
    body = R.pack_file_header() + b"".join(records)
    index = R.pack_index(metas, blobs)
    at = len(body)
    return (
        body
        + R.pack_record_header(R.RecordType.INDEX, len(index), R.checksum(index))
        + index
        + R.pack_trailer(at, R.checksum(index))
    )


def _blob_record(key: bytes, raw_len: int, codec: int, stored: bytes) -> bytes:
    sub = R.pack_blob_header(key, raw_len, codec)
    return R.pack_record_header(R.RecordType.BLOB, len(sub) + len(stored), R.checksum(sub, stored)) + sub + stored


def test_huge_declared_lengths_do_not_allocate() -> None:
    import zstandard

    bomb = zstandard.ZstdCompressor().compress(bytes(64 * MiB))  # ~2 KiB declaring 64 MiB
    tracemalloc.start()
    try:
        # a record header declaring a 2**60-byte payload: incomplete, nothing allocated
        huge = R.pack_file_header() + R.pack_record_header(R.RecordType.BLOB, 2**60, 0) + b"\0" * 100
        r = TraceReader(io.BytesIO(huge))
        assert r.recovered and r.blob_keys() == [] and "declares 1152921504606846976" in r.recovery_note
        # an indexed blob claiming 2**60 raw bytes (its zstd frame says 1000)
        frame = bytearray(zstandard.ZstdCompressor().compress(b"a" * 1000))
        key = R.content_key(b"a" * 1000)
        rec = _blob_record(key, 2**60, R.Codec.ZSTD, bytes(frame))
        data = _finished([rec], {key: R.BlobEntry(16, len(frame), 2**60, 1)}, [])
        r = TraceReader(io.BytesIO(data))
        assert not r.recovered
        with pytest.raises(LimitExceeded, match="max_blob_bytes"):
            r.read_blob(key)
        r = TraceReader(io.BytesIO(data), max_blob_bytes=2**62)  # 19 bytes of zstd cannot hold 2**60
        with pytest.raises(TraceCorrupt, match="stored length 19 is impossible for raw length"):
            r.read_blob(key)
        # a frame whose header declares far more than the record's raw length
        rec = _blob_record(key, 4096, R.Codec.ZSTD, bomb)
        r = TraceReader(io.BytesIO(_finished([rec], {key: R.BlobEntry(16, len(bomb), 4096, 1)}, [])))
        with pytest.raises(TraceCorrupt, match="declares"):
            r.read_blob(key)
        # a META claiming 2**60 bytes through a valid index
        meta = R.pack_record_header(R.RecordType.META, 2**60, 0)
        r = TraceReader(io.BytesIO(_finished([meta], {}, [(16, "x")])))
        with pytest.raises(TraceCorrupt):
            r.metas()
        # an index entry pointing past the end: the index is refused, recovery takes over
        r = TraceReader(io.BytesIO(_finished([], {key: R.BlobEntry(16, 2**60, 2**60, 1)}, [])))
        assert r.recovered and "INDEX" in r.recovery_note
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB


# --------------------------------------------------------------------------------------------------
# writers: atomicity, abort


def test_two_writers_same_path_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "t.vkt"
    a, b = TraceWriter(path), TraceWriter(path)
    assert a.partial_path != b.partial_path
    for i in range(10):
        a.add_meta("a", {"i": i})
        b.add_meta("b", {"i": i})
        a.put_blob(bytes([1, i]) * 500)
        b.put_blob(bytes([2, i]) * 500)
    a.close()
    with TraceReader(path) as r:
        assert {b["kind"] for _, b in r.metas()} == {"a"}
    b.close()  # last rename wins
    with TraceReader(path) as r:
        assert not r.recovered and {b["kind"] for _, b in r.metas()} == {"b"} and len(r.blob_keys()) == 10
    assert sorted(os.listdir(tmp_path)) == ["t.vkt"]


def test_two_writers_in_threads(tmp_path: Path) -> None:
    path = tmp_path / "t.vkt"

    def write(tag: str) -> None:
        with TraceWriter(path) as w:
            for i in range(50):
                w.put_blob(f"{tag}{i}".encode() * 100)
                w.add_meta(tag, {"i": i})

    threads = [threading.Thread(target=write, args=(t,)) for t in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with TraceReader(path) as r:
        assert not r.recovered
        kinds = {b["kind"] for _, b in r.metas()}
        assert kinds in ({"x"}, {"y"}) and len(r.metas()) == 50
        read_everything(r)
    assert sorted(os.listdir(tmp_path)) == ["t.vkt"]


def test_abort_and_context_manager(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "a.vkt")
    w.put_blob(b"data" * 100)
    w.abort()
    w.abort()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError):
        w.put_blob(b"more")
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "b.vkt") as w:
            w.add_meta("x", {})
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "c.vkt", finalize_on_error=True) as w:
            w.add_meta("x", {"n": 1})
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == ["c.vkt"]
    with TraceReader(tmp_path / "c.vkt") as r:
        assert not r.recovered and r.metas() == [(16, {"kind": "x", "n": 1})]


# --------------------------------------------------------------------------------------------------
# fuzzing: any damage gives one of the three errors (or a readable file), never anything else


_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(1, 64)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 64)),
    st.tuples(st.just("u64"), st.integers(0, 10**6), st.integers(0, 2**64 - 1)),
)


def _mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, pos, arg in mutations:
        pos %= max(1, len(buf))
        if op == "flip" and buf:
            buf[pos] ^= arg
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = bytes((pos * 7 + i) & 0xFF for i in range(arg))
        elif op == "delete":
            del buf[pos : pos + arg]
        elif op == "u64":
            buf[pos : pos + 8] = arg.to_bytes(8, "little")
    return bytes(buf)


@settings(
    max_examples=50,
    deadline=2000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(mutations=st.lists(_mutation, min_size=1, max_size=4))
def test_random_mutations_only_raise_trace_errors(
    sample: dict[str, Any], mutations: list[tuple[str, int, int]]
) -> None:
    data = _mutate(sample["data"], mutations)
    try:
        r = TraceReader(io.BytesIO(data), max_blob_bytes=MiB)
    except (NotATrace, UnsupportedVersion, TraceCorrupt):
        return
    for off, _ in r.meta_index():
        try:
            assert isinstance(r.read_meta(off)["kind"], str)
        except TraceCorrupt:
            pass
    for key in r.blob_keys():
        try:
            assert xxhash.xxh3_128_hexdigest(r.read_blob(key)) == key
        except TraceCorrupt:
            pass
    assert isinstance(r.recovery_note, str)


def test_error_types_share_a_base() -> None:
    for cls in (NotATrace, UnsupportedVersion, TraceCorrupt, LimitExceeded):
        assert issubclass(cls, ContainerError)
    e = TraceCorrupt("payload checksum mismatch", path="/x.vkt", offset=123, key="ab" * 16)
    assert str(e) == f"/x.vkt: record at offset 123: blob {'ab' * 16}: payload checksum mismatch"


def test_file_content_key_is_the_content_key_of_the_bytes_from_the_offset(tmp_path: Path) -> None:
    data = bytes(random.Random(5).getrandbits(8) for _ in range(10_000))
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    for offset in (0, 7, 4096, len(data)):
        for chunk in (1000, 1 << 20):  # several reads, and one
            assert R.file_content_key(path, offset, chunk) == R.content_key(data[offset:])
