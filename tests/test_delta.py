"""Codec 3 (DELTA): exact round trips of the transforms and of SPARSE, the writer's choice (a delta only
when smaller, whole blobs when nothing repeats, bounded chains), and every damaged or hostile delta
refused with the offset of the record at fault while the blobs that do not need it stay readable
(capture/delta.py, docs/trace-format.md section 4.4). No Vulkan involved."""

from __future__ import annotations

import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture.format.codecs import delta as D
from capture.format.codecs import sparse as S
from capture.format import records as R
from capture.format.errors import ContainerError, LimitExceeded, NotATrace, TraceCorrupt, UnsupportedVersion
from capture.reader import TraceReader
from capture.writer import TraceWriter
from tests.test_container import _mutate, _mutation

CCTX = zstandard.ZstdCompressor(level=3, write_content_size=True)
DCTX = zstandard.ZstdDecompressor()
SIZE = 256 << 10  # bytes of a frame: large enough to be probed


def accumulator(frames: int, size: int = SIZE, seed: int = 0) -> list[np.ndarray]:
    """``c += a * b * dt`` frame after frame in float32: every element changes every frame, by the same
    amount, so that the difference through the last two frames is mostly exactly zero."""
    rng = np.random.default_rng(seed)
    n = size // 4
    a, b = rng.standard_normal((2, n), dtype=np.float32)
    c = np.sin(np.linspace(0, 30, n, dtype=np.float32)) + rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
    out = []
    for _ in range(frames):
        c = (c + a * b * np.float32(0.01)).astype(np.float32)
        out.append(c.copy())
    return out


def write_chain(path: Path, frames: list[np.ndarray], key_every: int = 8, **writer: Any) -> list[str]:
    """Store ``frames`` as the recorder does: every ``key_every``-th whole, the others as deltas of the
    one or two before since the last whole one."""
    keys = []
    with TraceWriter(path, **writer) as w:
        for i, frame in enumerate(frames):
            since = i % key_every
            refs = [frames[i - j] for j in (1, 2) if j <= since]
            keys.append(w.put_blob(frame, refs=refs))
    return keys


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


def blob_record(key: bytes, raw_len: int, codec: int, stored: bytes) -> bytes:
    sub = R.pack_blob_header(key, raw_len, codec)
    return R.pack_record_header(R.RecordType.BLOB, len(sub) + len(stored), R.checksum(sub, stored)) + sub + stored


def finished(records: list[bytes]) -> bytes:
    """A finished file of these BLOB records, its index built from them."""
    body = bytearray(R.pack_file_header())
    blobs: dict[bytes, R.BlobEntry] = {}
    for rec in records:
        sub = R.unpack_blob_header(rec[R.RECORD_HEADER.size :])
        blobs.setdefault(sub.key, R.BlobEntry(len(body), len(rec) - 64, sub.raw_len, sub.codec))
        body += rec
    index = R.pack_index([], blobs)
    at = len(body)
    return bytes(body) + R.pack_record_header(R.RecordType.INDEX, len(index), R.checksum(index)) + index + R.pack_trailer(at, R.checksum(index))


def delta_record(raw: bytes, refs: list[bytes], ref_keys: list[bytes], transform: int = D.DIFF) -> bytes:
    """A DELTA record of ``raw`` against ``refs``, its residual stored as one zstd frame (codec 1)."""
    residual = CCTX.compress(D.compute(raw, refs, transform, 4))
    assert len(residual) + D.header_size(transform) < len(raw)
    stored = D.pack_header(transform, 4, 1, ref_keys) + residual
    return blob_record(R.content_key(raw), len(raw), R.Codec.DELTA, stored)


# --------------------------------------------------------------------------------------------------
# the transforms and SPARSE


@pytest.mark.parametrize("width", D.WIDTHS)
@pytest.mark.parametrize("n", [0, 1, 7, 4096, 65541])
@pytest.mark.parametrize("transform", [D.DIFF, D.LINEAR])
def test_residual_round_trip_for_every_transform_width_and_tail(width: int, n: int, transform: int) -> None:
    rng = np.random.default_rng(n)
    raw, a, b = (rng.integers(0, 256, n, dtype=np.uint8).tobytes() for _ in range(3))
    refs = [a, b][: D.REF_COUNT[transform]]
    residual = D.compute(raw, refs, transform, width)
    assert residual.nbytes == n and residual[n - n % width :].tobytes() == raw[n - n % width :]  # the tail as it is
    restored = D.restore(residual, refs, transform, width)
    assert restored == raw and restored.readonly


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=600), st.sampled_from(D.WIDTHS), st.integers(0, 2**32 - 1))
def test_residual_round_trip_property(raw: bytes, width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(0, 256, len(raw), dtype=np.uint8).tobytes() for _ in range(2))
    for transform, refs in ((D.DIFF, [a]), (D.LINEAR, [a, b])):
        keep = np.frombuffer(bytearray(refs[-1]), np.uint8)  # copied into the last reference, chunk after chunk
        saved = bytes(refs[-1])
        residual = D.compute(raw, [*refs[:-1], keep], transform, width, keep=keep)
        assert keep.tobytes() == raw
        assert D.restore(residual, [*refs[:-1], saved], transform, width) == raw


@pytest.mark.parametrize("width", D.WIDTHS)
def test_differences_zigzagged_later_are_the_residual(width: int) -> None:
    """``compute(..., zigzag=False)`` then ``zigzag_in_place`` (or SPARSE's own zigzag of the elements
    it keeps) gives exactly the residual and the SPARSE bytes that ``compute`` gives in one go."""
    rng = np.random.default_rng(width)
    n = (3 << 20) // 2 + 3  # more than one chunk, and a tail
    a = rng.integers(0, 256, n, dtype=np.uint8)
    raw = a.copy()
    raw[rng.random(n) < 0.05] += np.uint8(7)  # mostly unchanged: SPARSE's case
    whole = D.compute(raw.tobytes(), [a.tobytes()], D.DIFF, width)
    later = D.compute(raw.tobytes(), [a.tobytes()], D.DIFF, width, zigzag=False)
    assert not np.array_equal(whole, later)
    sparse = S.encode_sparse(later, width, CCTX.compress, zigzagged=False)
    assert b"".join(bytes(p) for p in sparse) == b"".join(bytes(p) for p in S.encode_sparse(whole, width, CCTX.compress))
    D.zigzag_in_place(later, width)
    assert np.array_equal(whole, later)


@pytest.mark.slow
@pytest.mark.parametrize("width", D.WIDTHS)
@pytest.mark.parametrize("transform", [D.DIFF, D.LINEAR])
def test_sparse_parts_in_one_pass_are_what_the_residual_encodes_to(width: int, transform: int) -> None:
    """``compute_sparse`` (its chunks in threads, the snapshot kept in the oldest reference) gives the
    SPARSE bytes of ``compute``'s residual, and that residual back when asked."""
    rng = np.random.default_rng(width + transform)
    n = (5 << 20) // 2 + 3  # three chunks, the last short, and a tail
    b = rng.integers(0, 256, n, dtype=np.uint8)
    a = b.copy()
    a[rng.random(n) < 0.3] += np.uint8(1)
    raw = (a if transform == D.DIFF else a + a - b).astype(np.uint8)
    raw[rng.random(n) < 0.02] += np.uint8(9)  # mostly predicted exactly: SPARSE's case
    refs = [a.tobytes(), b.tobytes()][: D.REF_COUNT[transform]]
    residual = D.compute(raw.tobytes(), refs, transform, width)
    keep = bytearray(refs[-1])
    out = bytearray(n)
    with ThreadPoolExecutor(4) as pool:
        parts = D.compute_sparse(raw.tobytes(), [*refs[:-1], keep], transform, width, out, keep, pool.map)
    assert bytes(keep) == raw.tobytes()
    assert parts.nonzero == n // width - int(np.count_nonzero(np.frombuffer(residual[: n // width * width], f"<u{width}") == 0))
    one_pass = S.sparse_parts(parts.bits, parts.values, parts.tail, CCTX.compress)
    assert b"".join(bytes(p) for p in one_pass) == b"".join(bytes(p) for p in S.encode_sparse(residual, width, CCTX.compress))
    assert not any(isinstance(p, memoryview) for p in one_pass)  # nothing views ``out``, which is reused
    assert parts.decode(width).tobytes() == residual.tobytes()
    # a writer that finds SPARSE no smaller stores the residual itself: it is decoded from the parts
    computed = D.Residual(transform, width, (), None, D.SPARSE, sparse=parts)
    assert computed.size == n and computed.full().tobytes() == residual.tobytes()


def test_small_differences_of_either_sign_become_small_numbers() -> None:
    prev = np.arange(1000, 2000, dtype=np.int32)
    cur = prev + np.tile(np.array([0, 1, -1, 2, -2], np.int32), 200)
    residual = np.frombuffer(D.compute(cur.tobytes(), [prev.tobytes()], D.DIFF, 4), np.uint32)
    assert residual[:5].tolist() == [0, 2, 1, 4, 3]  # zigzag: 0, 1, -1, 2, -2 -> 0, 2, 1, 4, 3
    older = prev - 3
    linear = D.compute((prev + 3).tobytes(), [prev.tobytes(), older.tobytes()], D.LINEAR, 4)
    assert not np.frombuffer(linear, np.uint8).any()  # a constant step is predicted exactly


@pytest.mark.parametrize("density", [0.0, 0.01, 0.3, 1.0])
@pytest.mark.parametrize("n", [0, 5, 4099])
def test_sparse_round_trip(density: float, n: int) -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(1, 2**32, n, dtype=np.uint32) * (rng.random(n) < density)
    residual = values.tobytes() + b"xy"  # and a tail
    stored = b"".join(bytes(p) for p in S.encode_sparse(residual, 4, CCTX.compress))
    assert S.decode_sparse(stored, len(residual), 4, DCTX).tobytes() == residual
    assert S.sparse_size(residual, 4, CCTX.compress) == len(stored)


def sparse(entries: list[tuple[int, int]], body: bytes) -> bytes:
    return b"".join(S.SPARSE_ENTRY.pack(*e) for e in entries) + body


@pytest.mark.parametrize(
    "stored, raw_len, message",
    [
        (b"\x00" * 10, 8, "shorter than its 32-byte entries"),
        (sparse([(1, 2), (0, 0)], b"\x01"), 8, "SPARSE bitmap codec 2 is unknown"),
        (sparse([(1, 0), (9, 0)], b"\x01"), 8, "SPARSE values declares 9 bytes, more than remain"),
        (sparse([(1, 0), (4, 0)], b"\x01abcdXY"), 8, "SPARSE data ends with 2 tail bytes, expected 0"),
        (sparse([(2, 0), (4, 0)], b"\x01\x00abcd"), 8, "SPARSE bitmap holds 2 bytes, expected 1"),
        (sparse([(1, 0), (4, 0)], b"\x05abcd"), 8, "bits set beyond its last element"),
        (sparse([(1, 0), (4, 0)], b"\x03abcd"), 8, "SPARSE values holds 4 bytes, expected 8"),
        (sparse([(1, 0), (5, 1)], b"\x01\x28\xb5\x2f\xfd\x00"), 8, "SPARSE values: bad zstd frame header"),
    ],
)
def test_malformed_sparse_layouts_are_refused_by_name(stored: bytes, raw_len: int, message: str) -> None:
    with pytest.raises(S.SparseError, match=message):
        S.decode_sparse(stored, raw_len, 4, DCTX)


@pytest.mark.parametrize(
    "stored, message",
    [
        (b"\x01\x04", "shorter than its header"),
        (bytes([9, 4, 0]) + bytes(5), "DELTA transform 9 is unknown"),
        (bytes([1, 3, 0]) + bytes(5), r"DELTA width 3 is not one of \[1, 2, 4, 8\]"),
        (bytes([1, 4, 7]) + bytes(5), "DELTA residual codec 7 is unknown"),
        (bytes([2, 4, 0]) + bytes(5 + 16), r"shorter than its 2 reference\(s\)"),
    ],
)
def test_malformed_delta_headers_are_refused_by_name(stored: bytes, message: str) -> None:
    with pytest.raises(D.DeltaError, match=message):
        D.unpack_header(stored)


def test_header_layout_matches_the_documented_sizes() -> None:
    assert D.DELTA_HEADER.size == 8 and D.header_size(D.DIFF) == 24 and D.header_size(D.LINEAR) == 40
    refs = [b"a" * 16, b"b" * 16]
    packed = D.pack_header(D.LINEAR, 4, D.SPARSE, refs)
    assert packed == bytes([2, 4, 3, 0, 0, 0, 0, 0]) + b"a" * 16 + b"b" * 16
    assert D.unpack_header(packed + b"residual") == D.DeltaHeader(D.LINEAR, 4, D.SPARSE, tuple(refs), 40)


# --------------------------------------------------------------------------------------------------
# the writer's choice


def test_frame_coherent_snapshots_are_stored_as_small_deltas_and_read_back_exactly(tmp_path: Path) -> None:
    frames = accumulator(20)
    keys = write_chain(tmp_path / "d.vkt", frames)
    plain = write_chain(tmp_path / "w.vkt", frames, key_every=1)
    assert keys == plain  # content keys are of the raw bytes
    with TraceReader(tmp_path / "d.vkt") as r, TraceReader(tmp_path / "w.vkt") as whole:
        codecs = [r.blob_info(k).codec for k in keys]
        assert [i for i, c in enumerate(codecs) if c != R.Codec.DELTA] == [0, 8, 16]
        linear = [D.unpack_header(r.read_prepared(k).data[0]) for k in keys[2:8]]
        assert all(h.transform == D.LINEAR and h.inner == D.SPARSE for h in linear)
        assert D.unpack_header(r.read_prepared(keys[1]).data[0]).transform == D.DIFF  # one reference only
        stored = sum(r.blob_info(k).stored_len for k in keys)
        assert stored < 0.35 * sum(whole.blob_info(k).stored_len for k in keys)
        assert all(r.blob_info(k).stored_len < 0.1 * SIZE for k in keys[2:8])
        order = np.random.default_rng(1).permutation(len(keys))
        for i in order:  # any order, with and without decoded references kept
            assert r.read_blob(keys[i]) == frames[i].tobytes()
    with TraceReader(tmp_path / "d.vkt", delta_cache_bytes=0) as r:
        for i in order:
            assert r.read_blob(keys[i]) == frames[i].tobytes()
            assert xxhash.xxh3_128_hexdigest(r.read_blob(keys[i])) == keys[i]


def test_data_that_does_not_repeat_is_stored_exactly_as_without_deltas(tmp_path: Path) -> None:
    """Noise frames (nothing in common with the one before) with references offered: every blob is
    stored whole, with the same stored bytes as a writer that was offered none; never larger."""
    rng = np.random.default_rng(3)
    floats = [rng.standard_normal(SIZE // 4, dtype=np.float32) for _ in range(6)]
    small = [rng.integers(0, 256, 8000, dtype=np.uint8) for _ in range(4)]  # below the probes' size
    for frames in (floats, small):
        keys = write_chain(tmp_path / "d.vkt", frames)
        write_chain(tmp_path / "w.vkt", frames, key_every=1)
        with TraceReader(tmp_path / "d.vkt") as r, TraceReader(tmp_path / "w.vkt") as w:
            for k in keys:
                assert r.blob_info(k).codec != R.Codec.DELTA
                assert r.read_prepared(k).data == w.read_prepared(k).data
        assert (tmp_path / "d.vkt").stat().st_size == (tmp_path / "w.vkt").stat().st_size


@pytest.mark.parametrize("kind", ["identical-but-one", "small"])
def test_a_delta_is_kept_only_when_smaller_than_the_whole_blob(tmp_path: Path, kind: str) -> None:
    """A small blob (no probes: both encodings are made) and a large one whose reference differs
    where it matters: each ends up no larger than its whole encoding."""
    rng = np.random.default_rng(5)
    if kind == "small":
        base = rng.standard_normal(2048, dtype=np.float32)
        frames = [base, base + np.float32(1e-3)]
    else:
        base = np.zeros(SIZE // 4, np.float32)
        frames = [rng.standard_normal(SIZE // 4, dtype=np.float32), base]  # zeros compress better alone
    keys = write_chain(tmp_path / "d.vkt", frames)
    write_chain(tmp_path / "w.vkt", frames, key_every=1)
    with TraceReader(tmp_path / "d.vkt") as r, TraceReader(tmp_path / "w.vkt") as w:
        assert r.blob_info(keys[1]).stored_len <= w.blob_info(keys[1]).stored_len
        assert r.read_blob(keys[1]) == frames[1].tobytes()
        if kind == "identical-but-one":
            assert r.blob_info(keys[1]).codec != R.Codec.DELTA


def test_a_residual_sparse_only_where_it_was_probed_is_stored_right(tmp_path: Path) -> None:
    """The probe (the middle of the blob) finds the LINEAR prediction mostly exact, so the residual is
    computed as SPARSE parts only; elsewhere it is noise: the delta is compared with the whole blob,
    the smaller is stored, and it reads back exactly."""
    rng = np.random.default_rng(11)
    older, last = rng.integers(0, 2**32, (2, SIZE // 4), dtype=np.uint32)
    with np.errstate(over="ignore"):
        frame = last + last - older
    window = D.probe_window(SIZE)
    noise = rng.integers(0, 2**32, SIZE // 4, dtype=np.uint32)
    probed = slice(window.start // 4, window.stop // 4)
    noise[probed] = frame[probed] + (rng.random(probed.stop - probed.start) < 0.03) * np.uint32(12345)
    with TraceWriter(tmp_path / "t.vkt") as w:
        keys = [w.put_blob(older), w.put_blob(last, refs=[older]), w.put_blob(noise, refs=[last, older])]
    with TraceReader(tmp_path / "t.vkt") as r:
        assert r.read_blob(keys[2]) == noise.tobytes()
        assert r.blob_info(keys[2]).stored_len <= SIZE


def test_the_same_frames_give_the_same_bytes_whatever_the_threads(tmp_path: Path) -> None:
    frames = accumulator(10, size=5 << 20)  # large enough for the residual and the planes to be split in threads
    write_chain(tmp_path / "a.vkt", frames, threads=0)
    write_chain(tmp_path / "b.vkt", frames, threads=4)
    assert (tmp_path / "a.vkt").read_bytes() == (tmp_path / "b.vkt").read_bytes()


def test_the_writer_bounds_chains_and_needs_references_in_the_file(tmp_path: Path) -> None:
    frames = accumulator(R.DELTA_MAX_BLOBS + 3, size=8 << 10)
    with TraceWriter(tmp_path / "t.vkt") as w:
        residual = w.residual(frames[1], [(R.content_key(frames[0]), frames[0])])
        prepared = w.compress_blob(frames[1], delta=residual)
        assert prepared.codec == R.Codec.DELTA and prepared.refs == (R.content_key(frames[0]),)
        with pytest.raises(ValueError, match="is not in the trace"):
            w.write_prepared(prepared)  # its reference was never written
        keys = [w.put_blob(frames[0])]
        for i in range(1, len(frames)):  # put_blob stores whole what cannot be a delta
            keys.append(w.put_blob(frames[i], refs=[frames[i - 1]]))
        depths = [w.delta_blobs(k) for k in keys]
    assert max(depths) == R.DELTA_MAX_BLOBS and depths[R.DELTA_MAX_BLOBS + 1] == 0  # a new chain starts whole
    with TraceReader(tmp_path / "t.vkt") as r:
        assert [r.read_blob(k) for k in keys] == [f.tobytes() for f in frames]


def test_copying_deltas_between_traces_keeps_them_when_their_references_are_there(tmp_path: Path) -> None:
    frames = accumulator(6)
    keys = write_chain(tmp_path / "src.vkt", frames)
    with TraceReader(tmp_path / "src.vkt") as r:
        with TraceWriter(tmp_path / "all.vkt") as w:
            for k in keys:  # in file order: references first
                w.write_prepared(r.read_prepared(k))
        with TraceWriter(tmp_path / "tail.vkt") as w:
            for k in keys[3:]:  # frames 3 and 4 refer to frame 2, not copied: they are stored whole
                w.write_prepared(r.read_prepared(k))
    assert (tmp_path / "all.vkt").read_bytes() == (tmp_path / "src.vkt").read_bytes()
    with TraceReader(tmp_path / "tail.vkt") as t:
        assert [t.blob_info(k).codec == R.Codec.DELTA for k in keys[3:]] == [False, False, True]
        assert [t.read_blob(k) for k in keys[3:]] == [f.tobytes() for f in frames[3:]]


def test_unfinished_files_keep_their_deltas_readable(tmp_path: Path) -> None:
    frames = accumulator(5)
    keys = write_chain(tmp_path / "t.vkt", frames)
    data = (tmp_path / "t.vkt").read_bytes()
    with TraceReader(io.BytesIO(data)) as r:
        index_at = min(r.blob_offset(keys[-1]) + 64 + r.blob_info(keys[-1]).stored_len, len(data))
    with TraceReader(io.BytesIO(data[:index_at])) as r:  # no index, no trailer: a recovery scan
        assert r.recovered and [r.read_blob(k) for k in keys] == [f.tobytes() for f in frames]


# --------------------------------------------------------------------------------------------------
# damage


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("chain") / "t.vkt"
    frames = accumulator(12)
    keys = write_chain(path, frames)
    with TraceReader(path) as r:
        offsets = [r.blob_offset(k) for k in keys]
        stored = [r.blob_info(k).stored_len for k in keys]
    return {"frames": frames, "keys": keys, "offsets": offsets, "stored": stored, "data": path.read_bytes()}


@pytest.mark.parametrize("victim", [0, 4], ids=["key-frame", "delta"])
def test_a_damaged_blob_is_named_by_every_delta_that_needs_it_and_the_others_stay_readable(
        chain: dict[str, Any], victim: int) -> None:
    keys, offsets = chain["keys"], chain["offsets"]
    at = offsets[victim]
    bad = flip(chain["data"], at + 64 + chain["stored"][victim] - 3)
    for cache in (0, 64 << 20):
        r = TraceReader(io.BytesIO(bad), delta_cache_bytes=cache)
        for i, key in enumerate(keys):
            if i < victim or i >= 8:  # before it, or in the next chain
                assert r.read_blob(key) == chain["frames"][i].tobytes()
            elif i == victim:
                with pytest.raises(TraceCorrupt, match="payload checksum mismatch$") as err:
                    r.read_blob(key)
                assert err.value.offset == at and err.value.key == keys[victim]
            else:
                with pytest.raises(TraceCorrupt) as err:
                    r.read_blob(key)
                assert err.value.offset == at and err.value.key == keys[victim]  # the damaged one, by offset and key
                assert f"needed to decode blob {key} at offset {offsets[i]}" in str(err.value)


def test_a_delta_whose_bytes_decode_to_other_data_is_refused(chain: dict[str, Any]) -> None:
    """Its checksums recomputed (a buggy writer): the decoded bytes no longer match the content key."""
    keys, offsets = chain["keys"], chain["offsets"]
    data = bytearray(chain["data"])
    at, stored = offsets[5], chain["stored"][5]
    body = at + 64
    data[body + stored - 1] ^= 0x01  # the last byte of the SPARSE tail or values: decodes, differently
    header = R.unpack_record_header(bytes(data[at : at + 32]))
    data[at : at + 32] = R.pack_record_header(header.rtype, header.payload_len, R.checksum(bytes(data[at + 32 : body + stored])))
    r = TraceReader(io.BytesIO(bytes(data)))
    with pytest.raises(TraceCorrupt, match=f"offset {at}.*(decoded data does not match its content key|SPARSE)"):
        r.read_blob(keys[5])
    assert r.read_blob(keys[4]) == chain["frames"][4].tobytes()


def test_references_must_be_earlier_blobs_of_the_same_length(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    a, b = (rng.integers(0, 4, 8192, dtype=np.uint8).tobytes() for _ in range(2))
    ka, kb = R.content_key(a), R.content_key(b)
    whole_a = blob_record(ka, len(a), R.Codec.NONE, a)
    # b refers to a, stored after it: fine
    r = TraceReader(io.BytesIO(finished([whole_a, delta_record(b, [a], [ka])])))
    assert r.read_blob(kb) == b
    cases = {
        "a later blob": ([delta_record(b, [a], [ka]), whole_a], "is not stored before it"),
        "itself": ([blob_record(kb, len(b), R.Codec.DELTA, D.pack_header(D.DIFF, 4, 1, [kb]) + CCTX.compress(bytes(len(b))))],
                   "is not stored before it"),
        "a missing blob": ([delta_record(b, [a], [ka])], f"its delta reference {ka.hex()} is not in the trace"),
        "another length": ([blob_record(ka, 100, R.Codec.NONE, a[:100]), delta_record(b, [a], [ka])], "holds 100 bytes, not 8192"),
    }
    for what, (records, message) in cases.items():
        r = TraceReader(io.BytesIO(finished(records)))
        with pytest.raises(TraceCorrupt, match=message) as err:
            r.read_blob(kb)
        assert err.value.offset == r.blob_offset(kb), what


def test_a_cycle_of_deltas_is_refused(tmp_path: Path) -> None:
    """a and b refer to each other: one of them always refers to a later blob."""
    rng = np.random.default_rng(10)
    a, b = (rng.integers(0, 4, 8192, dtype=np.uint8).tobytes() for _ in range(2))
    ka, kb = R.content_key(a), R.content_key(b)
    data = finished([delta_record(a, [b], [kb]), delta_record(b, [a], [ka])])
    r = TraceReader(io.BytesIO(data))
    for key in (ka, kb):
        with pytest.raises(TraceCorrupt, match="is not stored before it") as err:
            r.read_blob(key)
        assert err.value.offset == r.blob_offset(ka)  # a, whose reference comes after it


def test_chains_longer_than_the_limit_are_refused_with_the_offset(tmp_path: Path) -> None:
    frames = [f.tobytes() for f in accumulator(R.DELTA_MAX_BLOBS + 2, size=8 << 10)]
    keys = [R.content_key(f) for f in frames]
    records = [blob_record(keys[0], len(frames[0]), R.Codec.NONE, frames[0])]
    records += [delta_record(frames[i], [frames[i - 1]], [keys[i - 1]]) for i in range(1, len(frames))]
    r = TraceReader(io.BytesIO(finished(records)))
    assert r.read_blob(keys[R.DELTA_MAX_BLOBS]) == frames[R.DELTA_MAX_BLOBS]  # exactly the limit
    last = keys[R.DELTA_MAX_BLOBS + 1]
    with pytest.raises(TraceCorrupt, match=f"needs more than {R.DELTA_MAX_BLOBS} delta blobs") as err:
        r.read_blob(last)
    assert err.value.offset == r.blob_offset(last) and isinstance(err.value, ContainerError)


def test_huge_declared_residuals_do_not_allocate(tmp_path: Path) -> None:
    """A DELTA whose zstd residual declares far more than the blob's raw length is refused before
    inflating; a raw length over max_blob_bytes is refused before reading."""
    import tracemalloc

    a = bytes(8192)
    ka = R.content_key(a)
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    b = bytes([1]) * 8192
    kb = R.content_key(b)
    data = finished([blob_record(ka, len(a), R.Codec.NONE, a),
                     blob_record(kb, len(b), R.Codec.DELTA, D.pack_header(D.DIFF, 4, 1, [ka]) + bomb)])
    tracemalloc.start()
    try:
        r = TraceReader(io.BytesIO(data))
        with pytest.raises(TraceCorrupt, match="declares"):
            r.read_blob(kb)
        r = TraceReader(io.BytesIO(data), max_blob_bytes=4096)
        with pytest.raises(LimitExceeded):
            r.read_blob(kb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_an_older_reader_refuses_the_format_instead_of_misreading_it(chain: dict[str, Any]) -> None:
    """A 3.x file tells a reader of majors 1 and 2 that it cannot read it (as this one says of 4.x)."""
    assert chain["data"][8:12] == bytes([3, 0, 0, 0]) and R.FORMAT_MAJOR == 3
    data = bytearray(chain["data"])
    data[8:10] = (4).to_bytes(2, "little")
    with pytest.raises(UnsupportedVersion, match="version 4.0 is not supported"):
        TraceReader(io.BytesIO(bytes(data)))


@settings(max_examples=60, deadline=3000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(_mutation, min_size=1, max_size=4))
def test_random_mutations_of_deltas_only_raise_trace_errors(chain: dict[str, Any], mutations: list[tuple[str, int, int]]) -> None:
    data = _mutate(chain["data"], mutations)
    try:
        r = TraceReader(io.BytesIO(data), max_blob_bytes=4 << 20, delta_cache_bytes=1 << 20)
    except (NotATrace, UnsupportedVersion, TraceCorrupt):
        return
    for key in r.blob_keys():
        try:
            assert xxhash.xxh3_128_hexdigest(r.read_blob(key)) == key
        except TraceCorrupt:
            pass


def test_the_fsync_option_syncs_before_the_rename_and_only_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    with TraceWriter(tmp_path / "fast.vkt") as w:
        w.put_blob(b"x" * 1000)
    assert synced == [] and (tmp_path / "fast.vkt").is_file()
    with TraceWriter(tmp_path / "durable.vkt", fsync=True) as w:
        w.put_blob(b"x" * 1000)
    assert len(synced) == 2  # the file, then its folder
    for name in ("fast.vkt", "durable.vkt"):
        with TraceReader(tmp_path / name) as r:
            assert not r.recovered and [bytes(r.read_blob(k)) for k in r.blob_keys()] == [b"x" * 1000]
