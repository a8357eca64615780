"""Codec 2 (byte planes): exact round trips, the writer's choice of codec, and every malformed layout
refused with a message naming what is wrong (capture/planes.py, docs/trace-format.md section 4.4)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from capture.format.codecs import planes
from capture.format import records as R
from capture.format.errors import TraceCorrupt
from capture.reader import TraceReader
from capture.writer import TraceWriter

CCTX = zstandard.ZstdCompressor(level=3, write_content_size=True)
DCTX = zstandard.ZstdDecompressor()


def SAME(nbytes: int) -> zstandard.ZstdCompressor:
    """One compressor for every input (single-threaded tests)."""
    return CCTX


def smooth_floats(n: int, seed: int = 0) -> np.ndarray:
    """float32 like a snapshot: a smooth field plus a little noise (sign and exponent repeat a lot)."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 20, n, dtype=np.float32)
    return (np.sin(x) * 3 + rng.normal(0, 0.01, n)).astype(np.float32)


@pytest.mark.parametrize("width", [2, 4, 8])
@pytest.mark.parametrize("n", [0, 1, 7, 4096, 65541])
def test_round_trip_is_exact_for_every_width_and_tail(width: int, n: int) -> None:
    raw = smooth_floats(n // 4 + 1).tobytes()[:n]
    stored = planes.encode(memoryview(raw), width, SAME)
    decoded = planes.decode(stored, len(raw), DCTX)
    assert decoded == raw and decoded.readonly and decoded.nbytes == n  # a read-only view, no extra copy
    assert len(stored) >= planes.overhead(width) + n % width


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([2, 4, 8]))
def test_round_trip_property(raw: bytes, width: int) -> None:
    assert planes.decode(planes.encode(memoryview(raw), width, SAME), len(raw), DCTX) == raw


@pytest.mark.parametrize("with_out", [True, False], ids=["given-buffer", "own-buffer"])
def test_parts_do_not_alias_the_input_and_raw_planes_are_views_of_the_plane_buffer(with_out: bool) -> None:
    """The parts of an encoding stay valid when the caller overwrites its input (as a recorder reuses
    its staging slot for the next frame), and join to :func:`encode`; raw planes are not copied: they
    are views of the plane buffer (``out`` when given), which must outlive them."""
    raw = bytearray(smooth_floats(1 << 15).tobytes() + b"tail!")
    expected = planes.encode(memoryview(bytes(raw)), 4, SAME)
    out = np.empty(len(raw), np.uint8) if with_out else None
    parts = planes.encode_parts(memoryview(raw), 4, SAME, out)
    original = bytes(raw)
    raw[:] = bytes(len(raw))
    joined = b"".join(parts)
    assert joined == expected and planes.decode(joined, len(original), DCTX) == original
    raw_planes = [p for p in parts if isinstance(p, memoryview) and p.nbytes == len(original) // 4]
    assert raw_planes, "smooth floats have noise planes stored raw"
    if out is not None:
        before = [bytes(p) for p in raw_planes]
        out[:] = 0xFF  # the plane buffer reused too early: the raw planes change with it
        assert all(bytes(p) != b for p, b in zip(raw_planes, before))


def test_planes_hold_the_kth_byte_of_each_element_and_noise_is_stored_raw() -> None:
    values = smooth_floats(1 << 16)
    stored = planes.encode(memoryview(values.tobytes()), 4, SAME)
    entries = [planes.PLANE_ENTRY.unpack_from(stored, 8 + 16 * k) for k in range(4)]
    assert stored[0] == 4
    # the low mantissa byte is noise: stored raw and verbatim; the sign/exponent byte compresses
    low_len, low_codec = entries[0]
    assert (low_len, low_codec) == (1 << 16, planes.PLANE_RAW)
    assert stored[planes.overhead(4) : planes.overhead(4) + low_len] == values.view(np.uint8)[0::4].tobytes()
    top_len, top_codec = entries[3]
    assert top_codec == planes.PLANE_ZSTD and top_len < (1 << 16) // 10
    start = planes.overhead(4) + sum(length for length, _ in entries[:3])
    assert DCTX.decompress(stored[start : start + top_len]) == values.view(np.uint8)[3::4].tobytes()


def test_writer_stores_float_snapshots_as_planes_smaller_than_one_zstd_frame(tmp_path: Path) -> None:
    values = smooth_floats(1 << 18).tobytes()
    text = b"".join(b"frame %6d: everything nominal\n" % i for i in range(1 << 14))  # no element structure
    with TraceWriter(tmp_path / "t.vkt") as w:
        k_float, k_text = w.put_blob(values), w.put_blob(text)
    with TraceReader(tmp_path / "t.vkt") as r:
        assert r.version == (R.FORMAT_MAJOR, R.FORMAT_MINOR)
        info = r.blob_info(k_float)
        assert info.codec == R.Codec.PLANES
        assert info.stored_len < 0.92 * len(CCTX.compress(values))  # 0.90 on this data
        assert r.read_blob(k_float) == values
        assert r.blob_info(k_text).codec == R.Codec.ZSTD and r.read_blob(k_text) == text


@pytest.mark.slow
def test_large_blobs_encode_their_planes_in_parallel_threads_and_round_trip(tmp_path: Path) -> None:
    """A writer allowed threads encodes the planes of a blob >= 4 MiB in a pool, each plane with its
    own thread's compressor (a shared zstd context would fail or corrupt); several such blobs are
    compressed at once, as recording does."""
    from concurrent.futures import ThreadPoolExecutor

    blobs = [smooth_floats(3 << 20, seed).tobytes() for seed in range(4)]  # 12 MiB each
    with TraceWriter(tmp_path / "t.vkt", threads=-1) as w:
        with ThreadPoolExecutor(4) as pool:
            keys = [w.write_prepared(p) for p in pool.map(w.compress_blob, blobs)]
        assert w._plane_pool is not None  # the planes did run in the writer's pool
    with TraceReader(tmp_path / "t.vkt") as r:
        for key, raw in zip(keys, blobs):
            assert r.blob_info(key).codec == R.Codec.PLANES and r.read_blob(key) == raw


def test_writer_without_planes_writes_zstd_frames(tmp_path: Path) -> None:
    values = smooth_floats(1 << 16).tobytes()
    with TraceWriter(tmp_path / "t.vkt", planes=False) as w:
        key = w.put_blob(values)
    with TraceReader(tmp_path / "t.vkt") as r:
        assert r.blob_info(key).codec == R.Codec.ZSTD and r.read_blob(key) == values


def layout(width: int, entries: list[tuple[int, int]], bodies: bytes) -> bytes:
    return planes.PLANES_HEADER.pack(width) + b"".join(planes.PLANE_ENTRY.pack(*e) for e in entries) + bodies


@pytest.mark.parametrize(
    "stored, raw_len, message",
    [
        (b"\x04\x00", 8, "PLANES data is 2 bytes, shorter than its header"),
        (layout(3, [], b""), 9, r"PLANES width 3 is not one of \[2, 4, 8\]"),
        (planes.PLANES_HEADER.pack(2) + b"\x00" * 16, 4, "PLANES data is 24 bytes, shorter than its 2 plane entries"),
        (layout(2, [(99, 0), (2, 0)], b"abcd"), 4, "plane 0 declares 99 bytes, more than remain"),
        (layout(2, [(2, 5), (2, 0)], b"abcd"), 4, "plane 0 codec 5 is unknown"),
        (layout(2, [(1, 0), (3, 0)], b"abcd"), 4, "plane 0 holds 1 bytes, expected 2"),
        (layout(2, [(2, 0), (2, 0)], b"abcdXY"), 4, "PLANES data ends with 2 tail bytes, expected 0"),
        (layout(2, [(2, 0), (2, 0)], b"abcd"), 5, "PLANES data ends with 0 tail bytes, expected 1"),
        (layout(2, [(len(CCTX.compress(b"abc")), 1), (2, 0)], CCTX.compress(b"abc") + b"cd"), 4,
         "plane 0: zstd frame declares 3 bytes, expected 2"),
        (layout(2, [(5, 1), (2, 0)], b"\x28\xb5\x2f\xfd\x00cd"), 4, "plane 0: bad zstd frame header"),
    ],
)
def test_malformed_layouts_are_refused_by_name(stored: bytes, raw_len: int, message: str) -> None:
    with pytest.raises(planes.PlanesError, match=message):
        planes.decode(stored, raw_len, DCTX)


def test_reader_reports_a_damaged_plane_as_corrupt_with_its_offset(tmp_path: Path) -> None:
    """A plane whose bytes were changed but whose checksums were recomputed (a buggy writer): the
    decoded bytes no longer match the content key, and the reader says which record."""
    values = smooth_floats(1 << 16).tobytes()
    with TraceWriter(tmp_path / "t.vkt") as w:
        key = w.put_blob(values)
    with TraceReader(tmp_path / "t.vkt") as r:
        offset, info = r.blob_offset(key), r.blob_info(key)
    data = bytearray((tmp_path / "t.vkt").read_bytes())
    body = offset + R.RECORD_HEADER.size + R.BLOB_HEADER.size
    data[body + planes.overhead(4)] ^= 1  # first byte of plane 0 (stored raw)
    header = R.unpack_record_header(bytes(data[offset : offset + R.RECORD_HEADER.size]))
    payload = bytes(data[offset + R.RECORD_HEADER.size : body + info.stored_len])
    data[offset : offset + R.RECORD_HEADER.size] = R.pack_record_header(header.rtype, header.payload_len, R.checksum(payload))
    with TraceReader(io.BytesIO(bytes(data))) as r:
        with pytest.raises(TraceCorrupt, match=f"offset {offset}.*decoded data does not match its content key"):
            r.read_blob(key)


def test_plane_entry_layout_matches_the_documented_sizes() -> None:
    assert planes.PLANES_HEADER.size == 8 and planes.PLANE_ENTRY.size == 16
    assert planes.overhead(4) == 8 + 16 * 4
    assert struct.calcsize("<B7x") == 8
