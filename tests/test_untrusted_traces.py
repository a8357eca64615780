"""Traces from strangers (issue #33, items 4 and 6 for traces): a trace ends at its own TRAILER, damage is
reported and never judged as a pass, every declared size is bounded before anything is allocated, and
special files are refused. Each hostile case asserts the exact exit code, the one-line message and that
nothing beside the output changed.

Corpus (cases per class): concatenations and appended data 40 generated + 1 fixed; damaged records 3
fixed (FRAME, blob, essential) through info, replay, diff and suite (and under a flaky expectation),
forged frame numbers 2; bounded resources: a real export bomb (2 GiB) and plane bomb (3 GiB), 2 blob
and 3 plane tables that cannot hold what they declare, 3 metadata bombs, msgpack nesting 4 depths and
JSON nesting 2, with peak RSS measured for 7; hostile resource descriptions 8 and META values 60
generated; special files 4 kinds x 7 commands; byte-level corruption 120 generated (flips,
truncations, appended bytes, concatenations, forged lengths) through info, export and diff, and 40
through replay, in process, plus one forged trace through every command's CLI.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import struct
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import xxhash
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture.format import limits
from capture.format import records as R
from capture.format.errors import TraceCorrupt
from capture.reader import TraceReader
from tests.builders import ADD_FLOAT, REPO, ScenarioBuilder, vkcap
from vkcap.cli import main

FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
MiB = 1 << 20


# ------------------------------------------------------------------------------------------------
# Helpers


def record_trace(root: Path, name: str, offset: float) -> Path:
    """A 3-frame trace of c = a + b with b = ``offset``, a checkpoint after every frame."""
    b = ScenarioBuilder(root / name)
    b.shader("add", ADD_FLOAT)
    b.buffer("a", 64, np.arange(16, dtype=np.float32), shader_access="readonly")
    b.buffer("b", 64, np.full(16, offset, np.float32), shader_access="readonly")
    b.buffer("c", 64)
    for k in range(3):
        b.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [16]).boundary(["c"], k)
    trace = root / f"{name}.vkt"
    proc = vkcap("record", b.save(), "-o", trace, "--checkpoint-every", "1")
    assert proc.returncode == 0, proc.stderr
    return trace


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("untrusted")
    return {"a": record_trace(root, "a", 1.0), "b": record_trace(root, "b", 100.0)}


def cli(*args: str | Path) -> tuple[int, str, str]:
    """``vkcap ARGS`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def one_line_error(err: str) -> str:
    """The one error line of a refusal, after checking there is exactly one and no traceback."""
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("vkcap: error: ")]
    assert len(lines) == 1, err
    return lines[0]


def folder_state(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``folder``: size, mtime and content hash."""
    state = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            st_ = path.stat()
            state[str(path.relative_to(folder))] = (st_.st_size, st_.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return state


def records_of(source: Path | bytes) -> tuple[list[tuple[int, bytes]], dict[int, str]]:
    """The META and BLOB records of a finished trace in file order, as (type, payload); and the kind of
    each META by its position in that list."""
    data = source.read_bytes() if isinstance(source, Path) else source
    out, kinds_at = [], {}
    with TraceReader(io.BytesIO(data)) as r:
        metas = dict(r.meta_index())
        pos = R.FILE_HEADER.size
        while pos < r.size:
            h = R.unpack_record_header(data[pos : pos + R.RECORD_HEADER.size])
            end = pos + R.RECORD_HEADER.size + h.payload_len
            if h.rtype in (R.RecordType.META, R.RecordType.BLOB):
                if pos in metas:
                    kinds_at[len(out)] = metas[pos]
                out.append((h.rtype, data[pos + R.RECORD_HEADER.size : end]))
            pos = end
    return out, kinds_at


def forge(records: list[tuple[int, bytes]], kinds_at: dict[int, str] | None = None) -> bytes:
    """A finished trace of these (type, payload) records, its INDEX and TRAILER computed from them: a
    file whose every checksum is right, whatever the payloads declare. The kind of each META is
    ``kinds_at``'s (by position), else its payload's."""
    out = bytearray(R.pack_file_header())
    metas, blobs = [], {}
    for i, (rtype, payload) in enumerate(records):
        at = len(out)
        out += R.pack_record_header(rtype, len(payload), R.checksum(payload)) + payload
        if rtype == R.RecordType.META:
            kind = (kinds_at or {}).get(i) or msgpack.unpackb(payload, strict_map_key=False)["kind"]
            metas.append((at, kind))
        else:
            key, raw_len, codec = R.BLOB_HEADER.unpack_from(payload)
            blobs.setdefault(key, R.BlobEntry(at, len(payload) - R.BLOB_HEADER.size, raw_len, codec))
    index = R.pack_index(metas, blobs)
    at = len(out)
    out += R.pack_record_header(R.RecordType.INDEX, len(index), R.checksum(index)) + index
    out += R.pack_trailer(at, R.checksum(index))
    return bytes(out)


def frame_snapshot_of(records: list[tuple[int, bytes]], kinds_at: dict[int, str], seq: int, uid: str) -> tuple[int, bytes]:
    """(position, key) of frame ``seq``'s snapshot of ``uid`` among ``records``."""
    for i, kind in kinds_at.items():
        body = msgpack.unpackb(records[i][1])
        if kind == "frame" and body["seq"] == seq:
            key = bytes.fromhex(body["snapshots"][uid])
            return next(j for j, (t, p) in enumerate(records) if t == R.RecordType.BLOB and p[:16] == key), key
    raise AssertionError(f"no frame {seq}")


def with_blob(records: list[tuple[int, bytes]], at: int, key: bytes, raw_len: int, codec: int, stored: bytes) -> list[tuple[int, bytes]]:
    """``records`` with the blob at position ``at`` replaced by one declaring ``raw_len`` and ``codec``."""
    out = list(records)
    out[at] = (R.RecordType.BLOB, R.pack_blob_header(key, raw_len, codec) + stored)
    return out


def with_frame_snapshot(records: list[tuple[int, bytes]], kinds_at: dict[int, str], seq: int, uid: str,
                        key: bytes) -> list[tuple[int, bytes]]:
    """``records`` (changed in place, and returned) with frame ``seq``'s snapshot of ``uid`` naming blob ``key``."""
    for i, kind in kinds_at.items():
        body = msgpack.unpackb(records[i][1])
        if kind == "frame" and body["seq"] == seq:
            body["snapshots"][uid] = key.hex()
            records[i] = (R.RecordType.META, R.pack_msgpack(body))
    return records


def peak_rss_mib(*args: str | Path, stdout: list[str] | None = None) -> tuple[int, str, float]:
    """Run ``vkcap ARGS`` in a child of a child: (exit code, stderr, the child's peak RSS in MiB); its
    standard output is appended to ``stdout`` when given."""
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "sys.stderr.write(p.stderr); print(p.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
             "sys.exit(p.returncode)")
    proc = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "vkcap", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    out, rss = proc.stdout.rstrip("\n").rsplit("\n", 1)
    if stdout is not None:
        stdout.append(out)
    return proc.returncode, proc.stderr, int(rss) / 1024


# ------------------------------------------------------------------------------------------------
# 1. A trace's end is its own trailer


@pytest.mark.slow
@pytest.mark.device
def test_a_concatenation_is_read_up_to_the_first_trailer_and_reported(traces: dict[str, Path], tmp_path: Path) -> None:
    a, b = traces["a"].read_bytes(), traces["b"].read_bytes()
    cat = tmp_path / "cat.vkt"
    cat.write_bytes(a + b[R.FILE_HEADER.size :])  # cat a.vkt; tail -c +17 b.vkt
    code, out, err = cli("info", cat, "--json")
    info = json.loads(out)
    assert code == 0 and info["frames"] == 3 and not info["recovered"] and not info["intact"]
    assert info["bytes_after_trailer"] == len(b) - R.FILE_HEADER.size
    assert f"the {len(b) - 16} bytes after it (appended data, or another trace) are not read" in info["trailer_note"]
    code, out, _ = cli("info", cat)
    assert code == 0 and "appended   the trace ends at its TRAILER" in out
    # export returns the first trace's data, never the second's, and warns
    proc = vkcap("export", cat, "--frame", "0", "--resource", "c", "-o", tmp_path / "from_cat.npy")
    assert proc.returncode == 0 and proc.stderr == f"vkcap: {cat}: {info['trailer_note']}\n", proc.stderr
    code, _, err = cli("export", traces["a"], "--frame", "0", "--resource", "c", "-o", tmp_path / "from_a.npy")
    assert code == 0, err
    assert np.load(tmp_path / "from_cat.npy").tobytes() == np.load(tmp_path / "from_a.npy").tobytes()
    assert np.load(tmp_path / "from_cat.npy").view(np.float32)[0] == 1.0  # a's b = 1, not b's 100


@pytest.mark.device
@settings(FUZZ, max_examples=40)
@given(tail=st.one_of(st.binary(max_size=300), st.sampled_from(["records", "trailer", "header"])))
def test_no_appended_bytes_change_what_a_trace_holds(traces: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
                                                    tail: bytes | str) -> None:
    """Whatever follows a trace (random bytes, another trace's records, a forged trailer pointing back
    into the file, a second file header), the reader sees the trace as it was and counts the rest."""
    good = traces["a"].read_bytes()
    other = traces["b"].read_bytes()
    if tail == "records":
        tail = other[R.FILE_HEADER.size :]
    elif tail == "trailer":
        with TraceReader(traces["a"]) as r:
            index_at = max(o for o, _ in r.meta_index())
        tail = other[16:200] + R.pack_trailer(index_at, 0)
    elif tail == "header":
        tail = other
    assert isinstance(tail, bytes)
    with TraceReader(io.BytesIO(good)) as r:
        expected = (r.meta_index(), r.blob_keys())
    with TraceReader(io.BytesIO(good + tail)) as r:
        assert (r.meta_index(), r.blob_keys()) == expected
        assert r.bytes_after_trailer == len(tail)
        assert not r.recovered and (not tail or "not read" in r.trailer_note)


# ------------------------------------------------------------------------------------------------
# 2. Damage is reported, and never judged as a pass


def damaged_copy(source: Path, target: Path, *, kind: str | None = None, seq: int | None = None, blob_of: str | None = None) -> int:
    """Copy ``source`` to ``target`` with one byte of a record's payload flipped: the ``kind`` META of
    frame ``seq``, or the blob of frame ``seq``'s snapshot of ``blob_of``. Returns the record's offset."""
    with TraceReader(source) as r:
        if blob_of is not None:
            body = next(b for _, b in r.metas("frame") if b["seq"] == seq)
            offset = r.blob_offset(body["snapshots"][blob_of])
        else:
            offset = next(o for o, b in r.metas(kind) if b.get("seq") == seq)
    data = bytearray(source.read_bytes())
    data[offset + R.RECORD_HEADER.size + R.BLOB_HEADER.size + 2] ^= 0xFF
    target.write_bytes(bytes(data))
    return offset


@pytest.mark.device
def test_info_reports_every_damaged_record(traces: dict[str, Path], tmp_path: Path) -> None:
    frame = tmp_path / "frame.vkt"
    frame_at = damaged_copy(traces["b"], frame, kind="frame", seq=1)
    code, out, _ = cli("info", frame, "--json")
    info = json.loads(out)
    assert code == 0 and info["status"] == "complete" and not info["intact"]
    assert info["corrupt_records"] == [{"offset": frame_at, "type": "META", "kind": "frame", "frames": [1],
                                        "reason": "payload checksum mismatch"}]
    assert info["lost_frames"] == [1]
    code, out, _ = cli("info", frame)
    assert f"damaged    META record at offset {frame_at} (frame, frame 1): payload checksum mismatch" in out
    assert "lost       frame 1: not in the trace" in out
    blob = tmp_path / "blob.vkt"
    blob_at = damaged_copy(traces["b"], blob, seq=2, blob_of="c")
    code, out, _ = cli("info", blob, "--json")
    info = json.loads(out)
    assert code == 0 and info["lost_frames"] == [] and not info["intact"]
    assert info["corrupt_records"] == [{"offset": blob_at, "type": "BLOB", "kind": "blob", "frames": [0, 1, 2],
                                        "reason": "payload checksum mismatch"}]
    code, out, _ = cli("info", traces["b"], "--json")
    assert json.loads(out)["intact"] and json.loads(out)["corrupt_records"] == []


@pytest.mark.slow
@pytest.mark.device
def test_replay_diff_and_suite_fail_naming_the_frames_not_judged(traces: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "suite" / "frame.vkt"
    bad.parent.mkdir()
    damaged_copy(traces["b"], bad, kind="frame", seq=1)
    before = folder_state(tmp_path)
    proc = vkcap("replay", bad)
    assert proc.returncode == 1, proc.stderr
    assert one_line_error(proc.stderr).endswith(
        f"{bad}: frame 1 not judged: damaged records in the trace; of the 2 frame(s) replayed: all within tolerance")
    proc = vkcap("replay", bad, "--frames", "2-2")  # frame 1 is not asked for: judged as usual
    assert proc.returncode == 0, proc.stderr
    for pair in ((traces["b"], bad), (bad, traces["b"])):
        proc = vkcap("diff", *pair)
        assert proc.returncode == 1, proc.stderr
        assert one_line_error(proc.stderr).endswith(f"{bad}: frame 1 not judged: damaged records in the trace; "
                                                    "of the 2 frame(s) compared: all within tolerance")
    proc = vkcap("bisect", bad)  # a lost frame may hold the first divergence: never a pass
    assert proc.returncode == 1, proc.stderr
    assert one_line_error(proc.stderr).endswith(f"{bad}: frame 1 not judged: damaged records in the trace; "
                                                "bisect needs every frame (replay judges the others)")
    assert folder_state(tmp_path) == before
    proc = vkcap("suite", "run", bad.parent, "--json", tmp_path / "r.json")
    assert proc.returncode == 1, proc.stderr
    [result] = json.loads((tmp_path / "r.json").read_text())["results"]
    assert result["status"] == "fail" and "frame 1 not judged: damaged records in the trace" in json.dumps(result)
    # a trace expected to be flaky is excused a divergence, not frames it could not judge
    (bad.parent / "suite.toml").write_text('[[traces]]\npath = "frame.vkt"\n[[traces.expect]]\ndevice = "*"\n'
                                           'status = "flaky"\nreason = "known"\n')
    proc = vkcap("suite", "run", bad.parent / "suite.toml", "--json", tmp_path / "r2.json")
    assert proc.returncode == 1, proc.stderr
    [result] = json.loads((tmp_path / "r2.json").read_text())["results"]
    assert result["status"] == "fail" and result["expected"] == "flaky", result


@pytest.mark.device
def test_a_forged_frame_number_is_a_damaged_frame_never_an_endless_replay(traces: dict[str, Path], tmp_path: Path) -> None:
    """Frames are numbered from the first with one FRAME record each: a number beyond them (a replay
    would execute every frame up to it) or repeated is a damaged record, its frame lost."""
    records, kinds_at = records_of(traces["a"])
    frames = [i for i, k in kinds_at.items() if k == "frame"]
    for name, seq in (("far", 1 << 40), ("repeated", 1)):
        body = msgpack.unpackb(records[frames[2]][1])
        body["seq"] = seq
        forged = list(records)
        forged[frames[2]] = (R.RecordType.META, R.pack_msgpack(body))
        bad = tmp_path / f"{name}.vkt"
        bad.write_bytes(forge(forged, kinds_at))
        code, out, _ = cli("info", bad, "--json")
        info = json.loads(out)
        why = f"frame number {seq} is outside the trace's 3 frames from 0" if seq > 2 else "frame number 1 is repeated"
        assert code == 0 and info["lost_frames"] == [2] and info["frames"] == 2
        assert [(c["kind"], c["frames"], c["reason"]) for c in info["corrupt_records"]] == [("frame", [2], why)]
    proc = vkcap("replay", tmp_path / "far.vkt", timeout=120)
    assert proc.returncode == 1 and one_line_error(proc.stderr).endswith("frame 2 not judged: damaged records in the trace; "
                                                                          "of the 2 frame(s) replayed: all within tolerance")


@pytest.mark.device
@pytest.mark.parametrize("description, place", [
    ({"kind": "tensor", "size": 64, "dims": [1 << 62], "format": "VK_FORMAT_R32_SFLOAT"}, "dims"),
    ({"kind": "tensor", "size": 64, "dims": [4, 8], "format": "VK_FORMAT_R32_SFLOAT"}, "dims"),
    ({"kind": "tensor", "size": 64, "dims": "x", "format": 5}, "format"),
    ({"kind": "tensor", "size": 64, "dims": [16], "format": "VK_FORMAT_BC1_RGB_UNORM_BLOCK"}, "format"),
    ({"kind": "image", "size": 64, "dims": [4, 4], "format": "VK_FORMAT_R8_UNORM"}, "dims"),
    ({"kind": "image", "size": 64, "dims": [1, 4, 4], "format": "VK_FORMAT_R32_SFLOAT", "texel_bytes": 0}, "texel_bytes"),
    ({"kind": "image", "size": 64, "dims": [1, 8, 8], "format": "VK_FORMAT_R32_SFLOAT"}, "dims"),
    ({"kind": "image", "size": -1, "dims": [1, 4, 4], "format": "VK_FORMAT_R8_UNORM"}, "size"),
])
def test_a_resource_description_that_cannot_shape_its_export_is_refused(traces: dict[str, Path], tmp_path: Path,
                                                                         description: dict[str, Any], place: str) -> None:
    records, kinds_at = records_of(traces["a"])
    at = next(i for i, k in kinds_at.items() if k == "resources")
    body = msgpack.unpackb(records[at][1])
    body["resources"]["c"] = description
    records[at] = (R.RecordType.META, R.pack_msgpack(body))
    bad = tmp_path / "bad.vkt"
    bad.write_bytes(forge(records, kinds_at))
    code, _, err = cli("export", bad, "--frame", "0", "--resource", "c", "-o", tmp_path / "x.npy")
    assert code == 2
    line = one_line_error(err)
    assert line.startswith(f"vkcap: error: {bad}: resources.c.{place}: ") and \
        line.endswith("the trace's description of resource 'c' is malformed"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.vkt"]


@pytest.mark.device
def test_an_essential_record_damaged_is_a_refusal(traces: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.vkt"
    at = damaged_copy(traces["a"], bad, kind="scenario", seq=None)
    for args in (("info", bad), ("export", bad, "--frame", "0", "--resource", "c", "-o", tmp_path / "x.npy")):
        code, _, err = cli(*args)
        assert code == 2
        assert one_line_error(err).endswith(f"damaged scenario record at offset {at} (before the first frame): "
                                            "META payload checksum mismatch; the trace cannot be read without it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.vkt"]


# ------------------------------------------------------------------------------------------------
# 3. Bounded resources


def rle_frame(size: int) -> bytes:
    """A zstd frame of ``size`` zero bytes made of RLE blocks, with its content size: the most a frame
    can expand (4 bytes per 128 KiB)."""
    return zstandard.ZstdCompressor(level=1, write_content_size=True).compress(bytes(size))


def zeros_blob(size: int) -> tuple[bytes, bytes]:
    """(content key, one zstd frame with its content size) of ``size`` zero bytes, made 64 MiB at a time:
    a frame that really decodes to ``size`` bytes, at zstd's largest ratio."""
    chunk = bytes(64 << 20)
    packer = zstandard.ZstdCompressor(level=1).compressobj(size=size)
    parts, h = [], xxhash.xxh3_128()
    for _ in range(size // len(chunk)):
        parts.append(packer.compress(chunk))
        h.update(chunk)
    return h.digest(), b"".join([*parts, packer.flush()])


@pytest.mark.device
def test_an_export_bomb_is_refused_before_it_is_decoded(traces: dict[str, Path], tmp_path: Path) -> None:
    """A 64-byte resource's snapshot stored as a real 2 GiB of zeros (a 64 KiB zstd frame, its key
    right): refused from the declared sizes, never inflated (before: the 2 GiB were decoded first)."""
    records, kinds_at = records_of(traces["a"])
    at, _ = frame_snapshot_of(records, kinds_at, 0, "c")
    size = 2 << 30
    key, frame = zeros_blob(size)
    records = with_frame_snapshot(with_blob(records, at, key, size, R.Codec.ZSTD, frame), kinds_at, 0, "c", key)
    bomb = tmp_path / "bomb.vkt"
    bomb.write_bytes(forge(records, kinds_at))
    assert bomb.stat().st_size < 100_000
    code, err, rss = peak_rss_mib("export", bomb, "--frame", "0", "--resource", "c", "-o", tmp_path / "x.npy")
    assert code == 2 and rss < 300, (rss, err)
    assert one_line_error(err).endswith(f"frame 0, resource 'c': snapshot is {size} bytes, resource is 64")
    assert not (tmp_path / "x.npy").exists()


@pytest.mark.slow
@pytest.mark.device
def test_blobs_that_cannot_hold_what_they_declare_are_refused_before_allocating(traces: dict[str, Path], tmp_path: Path) -> None:
    """Declared raw lengths beyond what zstd can expand the stored bytes to, for a whole-blob frame, a
    plane bomb (entries declaring huge planes), and a frame whose header declares another size."""
    records, kinds_at = records_of(traces["a"])
    at, key = frame_snapshot_of(records, kinds_at, 0, "c")
    n = 1 << 30
    planes = struct.pack("<B7x", 4) + b"".join(struct.pack("<QB7x", 9, 1) for _ in range(4)) + rle_frame(4)[:9] * 4
    cases = {
        "zstd": (R.Codec.ZSTD, rle_frame(64), 3 << 30, "stored length"),
        "planes": (R.Codec.PLANES, planes, 4 * n, "stored length"),
    }
    for name, (codec, stored, raw_len, phrase) in cases.items():
        path = tmp_path / f"{name}.vkt"
        path.write_bytes(forge(with_blob(records, at, key, raw_len, codec, stored)))
        with TraceReader(path) as r:
            with pytest.raises(TraceCorrupt, match=f"{phrase} {len(stored)} is impossible for raw length {raw_len}"):
                r.read_blob(key)
    assert "stored length 108 is impossible" in vkcap("info", tmp_path / "planes.vkt").stdout
    # a real plane bomb through the CLI, its memory measured: 4 planes, each a zstd frame that decodes
    # to 768 MiB of zeros, 3 GiB in all, its key right (before: 3 GiB allocated and decoded)
    n = 768 << 20
    _, plane = zeros_blob(n)
    whole = xxhash.xxh3_128()
    for _ in range(4 * n // (64 << 20)):
        whole.update(bytes(64 << 20))
    key = whole.digest()
    stored = struct.pack("<B7x", 4) + b"".join(struct.pack("<QB7x", len(plane), 1) for _ in range(4)) + plane * 4
    bomb = with_frame_snapshot(with_blob(records, at, key, 4 * n, R.Codec.PLANES, stored), kinds_at, 0, "c", key)
    path = tmp_path / "plane_bomb.vkt"
    path.write_bytes(forge(bomb, kinds_at))
    assert path.stat().st_size < 200_000
    code, err, rss = peak_rss_mib("info", path, "--json")
    assert code == 0 and rss < 300, (rss, err)
    code, err, rss = peak_rss_mib("export", path, "--frame", "0", "--resource", "c", "-o", tmp_path / "x.npy")
    assert code == 2 and rss < 300, (rss, err)
    assert one_line_error(err).endswith(f"frame 0, resource 'c': snapshot is {4 * n} bytes, resource is 64")


def test_planes_declaring_more_than_they_hold_are_refused_before_the_raw_buffer(tmp_path: Path) -> None:
    """The plane entries are all checked before the raw buffer is allocated: plane lengths that do not
    add up, a zstd plane too short for its plane, a raw plane of the wrong size."""
    from capture.format.codecs import planes

    dctx = zstandard.ZstdDecompressor()
    head = struct.pack("<B7x", 4)
    cases = {
        "more than remain": head + b"".join(struct.pack("<QB7x", 1 << 40, 1) for _ in range(4)),
        "cannot hold": head + b"".join(struct.pack("<QB7x", 9, 1) for _ in range(4)) + bytes(36),
        "expected": head + b"".join(struct.pack("<QB7x", 5, 0) for _ in range(4)) + bytes(20),
    }
    import tracemalloc

    for phrase, stored in cases.items():
        tracemalloc.start()
        try:
            with pytest.raises(planes.PlanesError, match=phrase):
                planes.decode(stored, 4 << 30, dctx)
            assert tracemalloc.get_traced_memory()[1] < MiB
        finally:
            tracemalloc.stop()


def meta_payload(kind: str, value: Any) -> bytes:
    return R.pack_msgpack({"kind": kind, "value": value})


@pytest.mark.slow
@pytest.mark.device
def test_a_metadata_bomb_is_refused_within_bounded_memory(traces: dict[str, Path], tmp_path: Path) -> None:
    """A FINGERPRINT record of 15 MiB of empty arrays (each a 1-byte item that Python holds in 64), in
    arrays of a million, or in one array: the item budget stops it; the record is reported as damaged,
    the rest of the trace read. A META larger than the cap is refused from its header, unread."""
    records, kinds_at = records_of(traces["a"])
    at = next(i for i, k in kinds_at.items() if k == "fingerprint")
    head = b"\x82\xa4kind\xabfingerprint\xa5value"
    million = b"\xdd" + struct.pack(">I", 1 << 20) + b"\x90" * (1 << 20)
    n = 15 * MiB
    bombs = {"nested": (head + b"\x9f" + million * 15, "msgpack holds too many items"),
             "flat": (head + b"\xdd" + struct.pack(">I", n) + b"\x90" * n,
                      f"invalid msgpack: ValueError: {n} exceeds max_array_len({limits.MAX_META_ITEMS})"),
             "large": (head + bytes(limits.MAX_META_BYTES),
                       f"META of {len(head) + limits.MAX_META_BYTES} bytes exceeds max_meta_bytes={limits.MAX_META_BYTES}")}
    for name, (payload, reason) in bombs.items():
        records[at] = (R.RecordType.META, payload)
        bomb = tmp_path / f"{name}.vkt"
        bomb.write_bytes(forge(records, kinds_at))
        out: list[str] = []
        code, err, rss = peak_rss_mib("info", bomb, "--json", stdout=out)
        assert code == 0 and rss < 300, (name, rss, err)
        assert [(c["kind"], c["reason"]) for c in json.loads(out[0])["corrupt_records"]] == [("fingerprint", reason)]


@pytest.mark.device
def test_deep_nesting_is_one_line_never_a_recursion_error(traces: dict[str, Path], tmp_path: Path) -> None:
    records, kinds_at = records_of(traces["a"])
    fp_at = next(i for i, k in kinds_at.items() if k == "fingerprint")
    sc_at = next(i for i, k in kinds_at.items() if k == "scenario")
    deep_fp = tmp_path / "fp.vkt"
    for depth, reason in ((65, "msgpack nests deeper than 64 levels"), (1000, "msgpack nests deeper than 64 levels"),
                          (100_000, "invalid msgpack: StackError: ")):
        fp = list(records)
        fp[fp_at] = (R.RecordType.META, b"\x82\xa4kind\xabfingerprint\xa5value" + b"\x91" * (depth - 1) + b"\xc0")
        deep_fp.write_bytes(forge(fp, kinds_at))
        for args in (("info", deep_fp, "--json"), ("info", deep_fp)):
            code, out, err = cli(*args)
            assert code == 0, err
        code, out, err = cli("info", deep_fp, "--json")
        assert json.loads(out)["corrupt_records"] == [
            {"offset": json.loads(out)["corrupt_records"][0]["offset"], "type": "META", "kind": "fingerprint", "frames": [],
             "reason": reason}]
    fp[fp_at] = (R.RecordType.META, b"\x82\xa4kind\xabfingerprint\xa5value" + b"\x91" * 63 + b"\xc0")  # 64: read
    deep_fp.write_bytes(forge(fp, kinds_at))
    code, out, err = cli("info", deep_fp, "--json")
    assert code == 0 and json.loads(out)["intact"], err
    body = msgpack.unpackb(records[sc_at][1])
    for depth, name in ((100_000, "json.vkt"), (65, "json65.vkt")):
        sc = list(records)
        sc[sc_at] = (R.RecordType.META, R.pack_msgpack({**body, "portable": "[" * depth + "]" * depth}))
        (tmp_path / name).write_bytes(forge(sc))
        for args in (("info", tmp_path / name), ("export", tmp_path / name, "--frame", "0", "--resource", "c", "-o", tmp_path / "x.npy")):
            code, _, err = cli(*args)
            assert code == 2
            assert one_line_error(err).endswith("its scenario JSON nests deeper than 64 levels; the trace cannot be read without it")
    proc = vkcap("replay", tmp_path / "json.vkt")
    assert proc.returncode == 2 and "nests deeper than 64 levels" in one_line_error(proc.stderr)


def test_the_caps_are_one_table_listed_in_the_format_spec() -> None:
    spec = (REPO / "docs" / "trace-format.md").read_text()
    caps = [name for name in vars(limits) if name.isupper() and not name.startswith("_")]
    assert len(caps) >= 9
    for name in caps:
        assert f"`{name}`" in spec, name


# ------------------------------------------------------------------------------------------------
# 4. Special files


@pytest.mark.slow
@pytest.mark.device
def test_special_files_are_refused_by_every_command_at_once(traces: dict[str, Path], tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.vkt"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.vkt"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    specials = {fifo: "is a FIFO, not a trace file", Path("/dev/zero"): "is a device, not a trace file",
                sock_path: "is a socket, not a trace file", Path("/proc/self/status"): "not a vkcap trace"}
    commands = {
        "info": lambda t: ("info", t),
        "export": lambda t: ("export", t, "--frame", "0", "--resource", "c", "-o", tmp_path / "x.npy"),
        "replay": lambda t: ("replay", t),
        "diff": lambda t: ("diff", traces["a"], t),
        "bisect": lambda t: ("bisect", t),
        "trim": lambda t: ("trim", t, "--frames", "0-1", "-o", tmp_path / "out.vkt"),
        "extract": lambda t: ("extract", t, "--frame", "0", "--command", "0", "-o", tmp_path / "out"),
    }
    before = folder_state(tmp_path)
    # a FIFO could hang a command: those run as children, with a time limit; the rest in this process
    runs = {c: subprocess.Popen([sys.executable, "-m", "vkcap", *map(str, make(fifo))], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for c, make in commands.items()}
    try:
        for t in specials:
            for c, make in commands.items():
                if t == fifo:
                    err = runs[c].communicate(timeout=60)[1]
                    code = runs[c].returncode
                else:
                    code, _, err = cli(*make(t))
                assert code == 2, (t, c, err)
                line = one_line_error(err)
                assert str(t) in line and specials[t] in line, (c, line)
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
        sock.close()
    assert folder_state(tmp_path) == before


# ------------------------------------------------------------------------------------------------
# 5. No internal error on any byte-level corruption


def mutations(good: bytes, other: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    """Bit flips, truncations, appended bytes, concatenations and forged huge lengths (with every
    checksum recomputed, so the reader has to check the lengths themselves: such a file is not
    damaged, only lying, and what it declares is refused when read)."""
    n = len(good)
    flip = st.tuples(st.integers(0, n - 1), st.integers(1, 255)).map(lambda p: good[: p[0]] + bytes([good[p[0]] ^ p[1]]) + good[p[0] + 1 :])
    cut = st.integers(0, n - 1).map(lambda at: good[:at])
    append = st.binary(min_size=1, max_size=200).map(lambda tail: good + tail)
    cat = st.integers(0, len(other)).map(lambda at: good + other[at:])
    return st.one_of(st.tuples(st.just("damaged"), st.one_of(flip, cut, append, cat)),
                     st.tuples(st.just("forged"), forged_lengths(good)))


def forged_lengths(good: bytes) -> st.SearchStrategy[bytes]:
    records, _ = records_of(good)
    blobs = [i for i, (t, _) in enumerate(records) if t == R.RecordType.BLOB]
    huge = st.sampled_from([0, 1, 63, 64, 1 << 20, 1 << 31, 1 << 32, (1 << 62), (1 << 64) - 1])

    @st.composite
    def forged(draw: Any) -> bytes:
        recs = list(records)
        i = draw(st.sampled_from(blobs))
        payload = bytearray(recs[i][1])
        field = draw(st.sampled_from(["raw_len", "codec", "plane", "stored"]))
        value = draw(huge)
        if field == "raw_len":
            struct.pack_into("<Q", payload, 16, value)
        elif field == "codec":
            payload[24] = draw(st.integers(0, 4))
        elif field == "plane" and len(payload) >= 32 + 8 + 16:
            struct.pack_into("<Q", payload, 32 + 8 + 16 * draw(st.integers(0, 1)), value)
        else:
            payload = payload[: 32 + min(value, len(payload) - 32)]
        recs[i] = (R.RecordType.BLOB, bytes(payload))
        return forge(recs)

    return forged()


@pytest.mark.slow
@pytest.mark.device
def test_corrupted_traces_read_or_fail_in_one_line(traces: dict[str, Path], tmp_path: Path) -> None:
    """In process, through the CLI's own entry point: info --json and export of every kind of
    corruption end in exit 0 (damage named in the report when the file differs where it is checked)
    or exit 2 with one line, never a traceback; diff against the good trace ends in 0, 1 or 2, and
    never 0 when a frame was lost."""
    good, other = traces["a"].read_bytes(), traces["b"].read_bytes()
    bad = tmp_path / "bad.vkt"
    out = tmp_path / "out" / "x.npy"
    out.parent.mkdir()

    @settings(FUZZ, max_examples=120)
    @given(mutations(good, other))
    def check(mutation: tuple[str, bytes]) -> None:
        how, data = mutation
        bad.write_bytes(data)
        code, stdout, err = cli("info", bad, "--json")
        assert code in (0, 2), err
        if code == 2:
            one_line_error(err)
        elif how == "damaged":  # every damage shows in the report (a change to the header's version and
            info = json.loads(stdout)  # flags aside, which readers do not check)
            changed = [i for i, (x, y) in enumerate(zip(data, good)) if x != y]
            unchecked = len(data) == len(good) and all(8 <= i < 16 for i in changed)
            assert unchecked or not info["intact"] or info["recovered"] or info["status"] != "complete", info
        lost = code == 0 and bool(json.loads(stdout)["lost_frames"])
        code, _, err = cli("export", bad, "--frame", "2", "--resource", "c", "-o", out)
        assert code in (0, 2), err
        if code == 2:
            one_line_error(err)
            assert not out.exists()
        else:
            assert np.load(out).view(np.float32)[0] == 1.0  # never the other trace's data
            out.unlink()
        code, _, err = cli("diff", traces["a"], bad)
        assert code in (0, 1, 2) and not (lost and code == 0), err
        if code == 2 or "not judged" in err:
            one_line_error(err)
        assert "Traceback" not in err and "internal error" not in err, err

    check()


@pytest.mark.slow
@pytest.mark.device
def test_each_command_meets_a_corrupted_trace_in_one_line(traces: dict[str, Path], tmp_path: Path) -> None:
    """One forged trace (input a's blob declaring 2**62 bytes) through every command that reads traces,
    in real subprocesses: exit 2 with one line where the blob is needed (replay writes a.npy, trim
    copies it); exit 0 where it is not (export and diff read frame 1's c; info reports the record);
    nothing beside the outputs changed."""
    records, kinds_at = records_of(traces["a"])
    with TraceReader(traces["a"]) as r:
        key = bytes.fromhex(next(b for _, b in r.metas("file") if b["name"] == "a.npy")["blob"])
    at = next(j for j, (t, p) in enumerate(records) if t == R.RecordType.BLOB and p[:16] == key)
    payload = bytearray(records[at][1])
    struct.pack_into("<Q", payload, 16, 1 << 62)
    records[at] = (R.RecordType.BLOB, bytes(payload))
    bad = tmp_path / "bad.vkt"
    bad.write_bytes(forge(records))
    before = folder_state(tmp_path)
    for args in (("replay", bad), ("trim", bad, "--frames", "1-1", "-o", tmp_path / "t.vkt")):
        proc = vkcap(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        line = one_line_error(proc.stderr)
        assert line.endswith((f"is impossible for raw length {1 << 62}", f"raw length {1 << 62} exceeds max_blob_bytes={4 << 30}",
                              f"'a.npy' is {(1 << 62) + 128} bytes, the trace says 192")), line
    assert folder_state(tmp_path) == before
    proc = vkcap("info", bad)
    assert proc.returncode == 0 and f"damaged    BLOB record at offset" in proc.stdout, proc.stderr
    assert f"is impossible for raw length {1 << 62}" in proc.stdout
    for args in (("export", bad, "--frame", "1", "--resource", "c", "-o", tmp_path / "x.npy"), ("diff", traces["a"], bad)):
        proc = vkcap(*args)
        assert proc.returncode == 0, (args, proc.stderr)


LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=8), st.binary(max_size=8), st.sampled_from(["[/x]", "[red]x", "c", "a.npy", "0" * 32]))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=8)


@pytest.mark.slow
@pytest.mark.device
def test_hostile_metadata_values_are_reported_never_an_internal_error(traces: dict[str, Path], tmp_path: Path) -> None:
    """Every META of a trace with one value replaced by any msgpack value (bytes, huge integers, NaN,
    markup, nested containers) or a key added: info (text and --json) and export end in exit 0 or one
    line with exit 2, and --json is valid JSON."""
    records, kinds_at = records_of(traces["a"])
    metas = sorted(kinds_at)
    bad = tmp_path / "bad.vkt"
    out = tmp_path / "out" / "x.npy"
    out.parent.mkdir()

    @settings(FUZZ, max_examples=60)
    @given(st.sampled_from(metas), st.one_of(st.none(), st.text(max_size=12)), VALUES, st.data())
    def check(at: int, added: str | None, value: Any, data: Any) -> None:
        body = msgpack.unpackb(records[at][1])
        if added is None:
            key = data.draw(st.sampled_from(sorted(k for k in body if k != "kind") or ["extra"]))
        else:
            key = added or "extra"
        if key == "kind":
            key = "extra"
        body[key] = value
        forged = list(records)
        forged[at] = (R.RecordType.META, R.pack_msgpack(body))
        bad.write_bytes(forge(forged, kinds_at))
        for args in (("info", bad, "--json"), ("info", bad), ("export", bad, "--frame", "1", "--resource", "c", "-o", out)):
            code, stdout, err = cli(*args)
            assert code in (0, 2), (args, err)
            if code == 2:
                one_line_error(err)
            elif args[-1] == "--json":
                json.loads(stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
            assert "Traceback" not in err and "internal error" not in err, err
        if out.exists():
            out.unlink()

    check()


@pytest.mark.slow
@pytest.mark.device
def test_corrupted_traces_replay_or_fail_and_lost_frames_never_pass(traces: dict[str, Path], tmp_path: Path) -> None:
    """Replay (in this process, through the CLI's entry point) of flipped, cut, extended and forged
    traces: exit 0, 1 (a judged failure) or 2 with one line, never a traceback; and a trace that lost
    a frame to damage never passes."""
    good, other = traces["a"].read_bytes(), traces["b"].read_bytes()
    bad = tmp_path / "bad.vkt"

    seen = {0: 0, 1: 0, 2: 0}

    with TraceReader(traces["a"]) as r:  # flips inside FRAME records too: the frames they lose
        frame_bytes = [i for o, _ in r.meta_index("frame") for i in range(o, o + 80)]
    frame_flip = st.tuples(st.just("damaged"), st.tuples(st.sampled_from(frame_bytes), st.integers(1, 255)).map(
        lambda p: good[: p[0]] + bytes([good[p[0]] ^ p[1]]) + good[p[0] + 1 :]))

    @settings(FUZZ, max_examples=40)
    @given(st.one_of(mutations(good, other), frame_flip))
    def check(mutation: tuple[str, bytes]) -> None:
        bad.write_bytes(mutation[1])
        code, stdout, err = cli("info", bad, "--json")
        lost = code == 0 and bool(json.loads(stdout)["lost_frames"])
        code, _, err = cli("replay", bad)
        assert code in (0, 1, 2), err
        assert "Traceback" not in err and "internal error" not in err, err
        if code != 0:
            one_line_error(err)
        assert not (lost and code == 0), err
        seen[code] += 1

    check()
    assert all(seen.values()), seen  # the corpus reaches each outcome
