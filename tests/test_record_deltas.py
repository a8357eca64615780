"""``vkcap record`` stores frame-coherent snapshots as deltas of the previous ones (codec 3): key frames
at checkpoints, bounded chains, exact read-back and replay, damage reported with its frame while the
frames before it (and after the next checkpoint) stay readable; ``--fsync`` (docs/trace-format.md)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capture.format.codecs import delta as D
from capture.format import records as R
from capture.reader import TraceReader
from capture.trace import Trace
from tests.builders import ScenarioBuilder, load_output
from vkcap.cli import main

pytestmark = pytest.mark.device

N = 16 << 10  # floats: a 64 KiB accumulator, large enough to be probed
# acc += inc: after frame s, acc == (s + 1) * inc exactly (integers in float32); field += inc * 1e-4, a
# field of about 100 that changes a little every frame, each element by its own constant amount
SHADER = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer I { float inc[]; };
layout(set = 0, binding = 1) buffer A { float acc[]; };
layout(set = 0, binding = 2) buffer F { float field[]; };
void main() { uint i = gl_GlobalInvocationID.x; acc[i] += inc[i]; field[i] += inc[i] * 1e-4; }
"""
INC = np.random.default_rng(4).integers(1, 1000, N).astype(np.float32)
FIELD0 = (np.sin(np.linspace(0, 40, N, dtype=np.float32)) * 20 + 100).astype(np.float32)
FRAMES = 20


def cli(*args: Any) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = ScenarioBuilder(tmp_path_factory.mktemp("deltas") / "scenario")
    b.shader("step", SHADER).buffer("inc", INC.nbytes, INC, shader_access="readonly")
    b.buffer("acc", INC.nbytes).buffer("field", FIELD0.nbytes, FIELD0)
    for k in range(FRAMES):
        b.dispatch("step", [(0, 0, "inc"), (0, 1, "acc"), (0, 2, "field")], [N // 64])
        b.boundary(["acc", "field"], k)
    return b.save()


@pytest.fixture(scope="module")
def trace(scenario: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.vkt"
    assert cli("record", scenario, "-o", path) == 0
    return path


def expected(seq: int) -> dict[str, np.ndarray]:
    field = FIELD0.copy()
    for _ in range(seq + 1):
        field = (field + INC * np.float32(1e-4)).astype(np.float32)
    return {"acc": (seq + 1) * INC, "field": field}


def delta_closure(reader: TraceReader, key: str) -> set[str]:
    """The DELTA blobs that decoding ``key`` decodes (read from their headers)."""
    seen: set[str] = set()
    todo = [key]
    while todo:
        k = todo.pop()
        if k in seen or reader.blob_info(k).codec != R.Codec.DELTA:
            continue
        seen.add(k)
        todo += [r.hex() for r in D.unpack_header(reader.read_prepared(k).data[0]).refs]
    return seen


def test_snapshots_are_deltas_between_key_frames_at_checkpoints(trace: Path) -> None:
    with Trace.open(trace) as t:
        assert sorted(t.checkpoints) == [-1, 7, 15]
        by_frame = {f.seq: f.snapshots for f in t.frames}
        for uid in ("acc", "field"):
            codecs = [t.reader.blob_info(by_frame[s][uid]).codec for s in range(FRAMES)]
            whole = [s for s, c in enumerate(codecs) if c != R.Codec.DELTA]
            # key frames at checkpoints; LINEAR deltas from the third frame after one; the first
            # frame(s) after a checkpoint, a difference from one frame only, may be smaller whole
            assert {7, 15} <= set(whole) <= {0, 1, 7, 8, 15, 16}, (uid, codecs)
            for s in range(FRAMES):  # decoding a frame decodes the deltas since the last whole one, no more
                last = max(q for q in [-1, *whole] if q <= s)
                frames_since = {by_frame[q][uid] for q in range(last + 1, s + 1)}
                assert delta_closure(t.reader, by_frame[s][uid]) == frames_since, (uid, s)
        field = [t.reader.blob_info(by_frame[s]["field"]) for s in range(FRAMES)]
        assert all(i.stored_len < i.raw_len // 10 for s, i in enumerate(field) if s not in (0, 7, 8, 15, 16))
        for s in range(FRAMES):
            for uid, want in expected(s).items():
                np.testing.assert_array_equal(np.frombuffer(t.snapshot(s, uid), np.float32), want)


def test_recording_never_imports_numpy(scenario: Path, tmp_path: Path) -> None:
    """The encoders run on the compiled loops (capture/kernels.c): a recording whose snapshots are
    stored as LINEAR deltas, SPARSE residuals and byte planes loads no numpy, which costs a recording
    about 50 ms on the 2-core machine."""
    import subprocess
    import sys

    path = tmp_path / "t.vkt"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "vkcap", "record", str(scenario), "-o", str(path)],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "capture.kernels" in imported and "numpy" not in imported
    with Trace.open(path) as t:
        by_frame = {f.seq: f.snapshots for f in t.frames}
        inner = {D.unpack_header(t.reader.read_prepared(by_frame[s][uid]).data[0])[:3] for uid in ("acc", "field")
                 for s in range(FRAMES) if t.reader.blob_info(by_frame[s][uid]).codec == R.Codec.DELTA}
        assert {(D.LINEAR, 4, D.SPARSE), (D.LINEAR, 4, R.Codec.ZSTD)} <= inner
        for s in range(FRAMES):
            for uid, want in expected(s).items():
                np.testing.assert_array_equal(np.frombuffer(t.snapshot(s, uid), np.float32), want)


def test_info_counts_the_snapshots_stored_as_deltas(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vkcap.commands_inspect import trace_summary

    summary = trace_summary(trace)
    with Trace.open(trace) as t:
        deltas = {uid: sum(t.reader.blob_info(f.snapshots[uid]).codec == R.Codec.DELTA for f in t.frames)
                  for uid in ("acc", "field")}
    assert all(n >= FRAMES - 6 for n in deltas.values()), deltas  # all but the key frames and their next ones
    assert {uid: summary["resources"][uid]["deltas"] for uid in deltas} == deltas
    assert summary["snapshot_deltas"] == sum(deltas.values())
    capsys.readouterr()
    assert cli("info", trace) == 0
    out = capsys.readouterr().out
    assert f", {sum(deltas.values())} stored as deltas\n" in out
    assert [line.split("│")[4].strip() for line in out.splitlines() if line.startswith(("│ acc ", "│ field "))] == [
        str(deltas["acc"]), str(deltas["field"])]


def test_replay_and_export_read_deltas(trace: Path, tmp_path: Path) -> None:
    assert cli("replay", trace) == 0
    assert cli("replay", trace, "--frame", FRAMES - 1) == 0
    for s in (0, 6, 12, FRAMES - 1):
        assert cli("export", trace, "--frame", s, "--resource", "field", "-o", tmp_path / f"f{s}.npy", "--raw") == 0
        np.testing.assert_array_equal(load_output(tmp_path / f"f{s}.npy", np.float32), expected(s)["field"])


def test_a_damaged_delta_costs_the_frames_that_need_it_and_names_them(trace: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    damaged = tmp_path / "damaged.vkt"
    data = bytearray(trace.read_bytes())
    with Trace.open(trace) as t:
        key = t.frame(10).snapshots["acc"]
        offset, stored = t.reader.blob_offset(key), t.reader.blob_info(key).stored_len
        assert t.reader.blob_info(key).codec == R.Codec.DELTA
    data[offset + 64 + stored // 2] ^= 0x40
    damaged.write_bytes(bytes(data))
    for s in (9, 10, 12, 16):
        capsys.readouterr()
        code = cli("export", damaged, "--frame", s, "--resource", "acc", "-o", tmp_path / f"a{s}.npy")
        err = capsys.readouterr().err
        if s in (10, 12):  # 12 is decoded through 10
            assert code == 2 and len(err.strip().splitlines()) == 1, err
            assert f"frame {s}, resource 'acc'" in err and f"record at offset {offset}" in err, err
            if s == 12:
                assert "needed to decode blob" in err, err
        else:  # before it, and after the next checkpoint
            assert code == 0, err
            np.testing.assert_array_equal(np.load(tmp_path / f"a{s}.npy"), expected(s)["acc"])  # typed: float32[]


def test_the_same_recording_stores_the_same_blobs_whatever_the_threads(scenario: Path, trace: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.vkt"
    assert cli("record", scenario, "-o", again, "--compression-threads", "0") == 0
    with TraceReader(trace) as a, TraceReader(again) as b:
        assert a.blob_keys() == b.blob_keys()
        assert all(a.read_prepared(k).data == b.read_prepared(k).data for k in a.blob_keys())


@pytest.mark.parametrize("flags, syncs", [((), False), (("--fsync",), True)])
def test_fsync_only_when_asked(scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               flags: tuple[str, ...], syncs: bool) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    path = tmp_path / "t.vkt"
    assert cli("record", scenario, "-o", path, *flags) == 0
    assert bool(synced) == syncs
    with Trace.open(path) as t:
        assert t.complete and not t.recovered and len(t.frames) == FRAMES


def test_trim_copies_deltas_whose_references_it_holds_and_stores_the_others_whole(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "trimmed.vkt"
    assert cli("trim", trace, "--frames", "10-13", "-o", out) == 0
    with Trace.open(out) as t, Trace.open(trace) as source:
        assert [f.seq for f in t.frames] == [10, 11, 12, 13]
        first = t.frame(10).snapshots["field"]
        assert t.reader.blob_info(first).codec != R.Codec.DELTA  # its references are not in OUT
        later = [t.reader.blob_info(t.frame(s).snapshots["field"]) for s in (12, 13)]
        assert all(i.codec == R.Codec.DELTA for i in later)
        for s in range(10, 14):
            for uid, want in expected(s).items():
                assert t.frame(s).snapshots[uid] == source.frame(s).snapshots[uid]
                np.testing.assert_array_equal(np.frombuffer(t.snapshot(s, uid), np.float32), want)
    assert cli("replay", out) == 0


def test_reading_every_snapshot_back_never_imports_numpy(trace: Path, tmp_path: Path) -> None:
    """Decoding runs on the compiled loops too (capture/kernels.c): a process that reads back byte planes,
    LINEAR deltas and SPARSE residuals loads no numpy, and what it reads is what numpy computes here."""
    import subprocess
    import sys

    with Trace.open(trace) as t:
        keys = [t.frames[s].snapshots[uid] for s in range(FRAMES) for uid in ("acc", "field")]
        codecs = {t.reader.blob_info(k).codec for k in keys}
        inner = {D.unpack_header(t.reader.read_prepared(k).data[0])[2] for k in keys
                 if t.reader.blob_info(k).codec == R.Codec.DELTA}
    assert {R.Codec.PLANES, R.Codec.DELTA} <= codecs and {D.SPARSE, R.Codec.ZSTD} <= inner
    out = tmp_path / "snapshots.bin"
    read_all = ("import sys; from capture.trace import Trace\n"
                "with Trace.open(sys.argv[1]) as t, open(sys.argv[2], 'wb') as out:\n"
                f"    [out.write(t.snapshot(s, uid)) for s in range({FRAMES}) for uid in ('acc', 'field')]\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", read_all, str(trace), str(out)],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "capture.kernels" in imported and "numpy" not in imported
    got = np.frombuffer(out.read_bytes(), np.float32).reshape(FRAMES, 2, N)
    for s in range(FRAMES):
        np.testing.assert_array_equal(got[s, 0], expected(s)["acc"])
        np.testing.assert_array_equal(got[s, 1], expected(s)["field"])
