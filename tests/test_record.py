"""``vkcap record`` / ``info`` / ``export`` on real Vulkan (lavapipe in CI): every snapshot read back is
checked against numpy; deduplication, seeking, crash recovery (a real ``kill -9``), corruption, Ctrl-C,
hostile file names and bad scenarios.

Recording runs in-process through ``vkcap.cli.main`` (fast); the signal tests need a subprocess.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from capture.format import kinds
from capture.reader import TraceReader
from capture.writer import TraceWriter
from capture.embed import check_trace_name, safe_join
from capture.recorder import InterruptHandler
from capture.trace import Trace
from tests.builders import REPO, ScenarioBuilder, load_output, vkcap
from tests.readlog import ReadLog
from vkcap.cli import main
from vkcore.errors import TraceError
from vkcore.exec.executor import StopRequest

MiB = 1 << 20
N = 256  # floats per small buffer

# acc += inc: after the (s+1)-th execution acc == (s+1) * inc, exactly (small integers in float32).
ACCUMULATE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer I { float inc[]; };
layout(set = 0, binding = 1) buffer A { float acc[]; };
void main() { uint i = gl_GlobalInvocationID.x; acc[i] += inc[i]; }
"""
# out = 2 * acc + 1
DOUBLE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float acc[]; };
layout(set = 0, binding = 1) buffer O { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = 2.0 * acc[i] + 1.0; }
"""
INC = (np.arange(N, dtype=np.float32) % 7) + 1


# --------------------------------------------------------------------------------------------------
# helpers


def cli(*args: Any) -> int:
    return main([str(a) for a in args])


def record_ok(scenario: Path, trace: Path, *flags: Any) -> None:
    assert cli("record", scenario, "-o", trace, *flags) == 0
    assert trace.is_file()


def info_json(trace: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli("info", trace, "--json") == 0
    return json.loads(capsys.readouterr().out)


def export(trace: Path, frame: int, uid: str, out: Path) -> np.ndarray:
    assert cli("export", trace, "--frame", frame, "--resource", uid, "-o", out, "--raw") == 0  # bytes, as run writes them
    return load_output(out, np.float32)


def snap(trace: Trace, seq: int, uid: str, dtype: Any = np.float32) -> np.ndarray:
    return np.frombuffer(trace.snapshot(seq, uid), dtype=dtype)


def accumulate_scenario(b: ScenarioBuilder, frames: int, *, double: bool = False, capture: tuple[str, ...] = ("acc",)) -> Path:
    """``frames`` frames, each ``acc += inc`` (then ``out = 2 acc + 1`` if ``double``) and a boundary."""
    b.shader("accumulate", ACCUMULATE).buffer("inc", INC.nbytes, INC, shader_access="readonly").buffer("acc", INC.nbytes)
    if double:
        b.shader("double", DOUBLE).buffer("out", INC.nbytes)
    for k in range(frames):
        b.dispatch("accumulate", [(0, 0, "inc"), (0, 1, "acc")], [N // 64])
        if double:
            b.dispatch("double", [(0, 0, "acc"), (0, 1, "out")], [N // 64])
        b.boundary(list(capture), 100 + k)
    return b.save()


def partial_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.partial"))


# --------------------------------------------------------------------------------------------------
# round trip: every snapshot equals what the GPU computed


@pytest.mark.device
def test_round_trip_repeat_and_checkpoints(builder: ScenarioBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames, repeat = 4, 3
    trace_path = tmp_path / "t" / "acc.vkt"  # the folder does not exist yet: record creates it
    record_ok(accumulate_scenario(builder, frames), trace_path, "--repeat", repeat, "--checkpoint-every", 5)
    with Trace.open(trace_path) as trace:
        assert trace.complete and not trace.recovered
        assert [f.seq for f in trace.frames] == list(range(frames * repeat))
        assert [f.pass_index for f in trace.frames] == [s // frames for s in range(frames * repeat)]
        assert [f.index for f in trace.frames] == [s % frames for s in range(frames * repeat)]
        assert [f.frame_id for f in trace.frames] == [100 + s % frames for s in range(frames * repeat)]
        for f in trace.frames:  # state carries over between passes: --repeat N is N passes in a row
            assert set(f.snapshots) == {"acc"}
            np.testing.assert_array_equal(snap(trace, f.seq, "acc"), (f.seq + 1) * INC)
        # checkpoint -1 is the initial state; checkpoints every 5 frames hold the state after that frame
        assert sorted(trace.checkpoints) == [-1, 4, 9]
        initial = trace.checkpoints[-1]
        np.testing.assert_array_equal(np.frombuffer(trace.blob(initial["inc"], what="inc"), np.float32), INC)
        np.testing.assert_array_equal(np.frombuffer(trace.blob(initial["acc"], what="acc"), np.float32), np.zeros(N, np.float32))
        for seq in (4, 9):
            state = trace.checkpoints[seq]
            assert state["acc"] == trace.frame(seq).snapshots["acc"]
            np.testing.assert_array_equal(np.frombuffer(trace.blob(state["acc"], what="acc"), np.float32), (seq + 1) * INC)
            np.testing.assert_array_equal(np.frombuffer(trace.blob(state["inc"], what="inc"), np.float32), INC)
        assert trace.nearest_checkpoint(0) == -1 and trace.nearest_checkpoint(10) == 9
        # the trace is self-contained: shader source, SPIR-V and the input file are inside
        assert set(trace.files) == {"accumulate.comp", "inc.npy"}
        assert trace.blob(trace.files["accumulate.comp"][1], what="shader").decode() == ACCUMULATE
        assert set(trace.spirv) == {"accumulate"}
    # export through the command line, first and last frame
    np.testing.assert_array_equal(export(trace_path, 0, "acc", tmp_path / "f0.npy"), INC)
    np.testing.assert_array_equal(export(trace_path, 11, "acc", tmp_path / "f11.npy"), 12 * INC)
    summary = info_json(trace_path, capsys)
    assert summary["frames"] == 12 and summary["passes"] == 3 and summary["status"] == "complete"
    assert summary["recovered"] is False and summary["checkpoints"] == [4, 9]
    acc = summary["resources"]["acc"]
    assert (acc["snapshots"], acc["unique"], acc["raw_bytes"]) == (12, 12, 12 * INC.nbytes)
    assert 0 < acc["stored_bytes"] < acc["raw_bytes"]


@pytest.mark.device
@pytest.mark.parametrize("capture_all", [False, True], ids=["boundary", "all"])
def test_capture_all(builder: ScenarioBuilder, tmp_path: Path, capture_all: bool) -> None:
    scenario = accumulate_scenario(builder, 3, double=True, capture=("out", "inc"))
    trace_path = tmp_path / "x.vkt"
    record_ok(scenario, trace_path, *(["--capture", "all"] if capture_all else []))
    with Trace.open(trace_path) as trace:
        assert len(trace.frames) == 3
        for f in trace.frames:
            # --capture all: what the boundary names (here also the readonly input) plus every resource
            # a dispatch writes, at every boundary
            assert set(f.snapshots) == ({"acc", "out", "inc"} if capture_all else {"out", "inc"})
            acc = (f.seq + 1) * INC
            np.testing.assert_array_equal(snap(trace, f.seq, "out"), 2 * acc + 1)
            np.testing.assert_array_equal(snap(trace, f.seq, "inc"), INC)
            if capture_all:
                np.testing.assert_array_equal(snap(trace, f.seq, "acc"), acc)
        assert trace.header["capture_all"] is capture_all


@pytest.mark.device
def test_dispatch_level_with_checkpoints(builder: ScenarioBuilder, tmp_path: Path) -> None:
    frames = 3
    scenario = accumulate_scenario(builder, frames, double=True, capture=("out",))
    trace_path = tmp_path / "d.vkt"
    record_ok(scenario, trace_path, "--dispatch-level", "--checkpoint-every", 1)
    with Trace.open(trace_path) as trace:
        assert trace.header["dispatch_level"] is True
        assert sorted(trace.checkpoints) == [-1, *range(frames)]
        for f in trace.frames:
            acc = (f.seq + 1) * INC
            first, second = 3 * f.index, 3 * f.index + 1  # command indexes: accumulate, double, boundary
            # a snapshot of what each dispatch may write (bound with an access other than readonly), after it
            assert sorted((d.command, d.uid) for d in f.dispatches) == [(first, "acc"), (second, "acc"), (second, "out")]
            for d in f.dispatches:
                got = np.frombuffer(trace.blob(d.blob, what=f"{d.uid} after {d.command}"), np.float32)
                np.testing.assert_array_equal(got, acc if d.uid == "acc" else 2 * acc + 1)
            np.testing.assert_array_equal(snap(trace, f.seq, "out"), 2 * acc + 1)
            # the checkpoint after this frame equals the frame's state
            state = trace.checkpoints[f.seq]
            assert set(state) == {"inc", "acc", "out"}
            assert state["out"] == f.snapshots["out"]
            expected = {"inc": INC, "acc": acc, "out": 2 * acc + 1}
            for uid, key in state.items():
                np.testing.assert_array_equal(np.frombuffer(trace.blob(key, what=uid), np.float32), expected[uid])


# --------------------------------------------------------------------------------------------------
# deduplication

HASH_FILL = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { uint big[]; };
uint hash(uint x) { x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16; return x; }
void main() { uint i = gl_GlobalInvocationID.x; big[i] = hash(i * 2654435761u + 12345u); }
"""
SUM_UINT = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer I { uint big[]; };
layout(set = 0, binding = 1) buffer A { uint acc[]; };
void main() { uint i = gl_GlobalInvocationID.x; acc[i] += big[i]; }
"""


def _hash_fill(n: int) -> np.ndarray:
    x = (np.arange(n, dtype=np.uint64) * 2654435761 + 12345) & 0xFFFFFFFF
    for shift, mul in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
        x ^= x >> shift
        if mul is not None:
            x = (x * mul) & 0xFFFFFFFF
    return x.astype(np.uint32)


@pytest.mark.device
def test_unchanged_random_resource_is_stored_once(builder: ScenarioBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1 MiB of incompressible data, written once by the GPU and unchanged for 49 more boundaries:
    50 MiB of snapshots, stored once (no input file in the trace, so the file itself stays < 2 MiB)."""
    words = MiB // 4
    builder.shader("fill", HASH_FILL).shader("sum", SUM_UINT).buffer("big", MiB).buffer("acc", 1024)
    builder.dispatch("fill", [(0, 0, "big")], [words // 64])
    for k in range(50):
        builder.dispatch("sum", [(0, 0, "big"), (0, 1, "acc")], [256 // 64])
        builder.boundary(["big", "acc"], k)
    trace_path = tmp_path / "dedup.vkt"
    record_ok(builder.save(), trace_path, "--checkpoint-every", 0)
    assert trace_path.stat().st_size < 2 * MiB
    summary = info_json(trace_path, capsys)
    big = summary["resources"]["big"]
    assert big["snapshots"] == 50 and big["unique"] == 1 and big["raw_bytes"] == 50 * MiB
    assert MiB * 0.99 < big["stored_bytes"] <= MiB  # incompressible: stored raw, once
    assert summary["resources"]["acc"]["unique"] == 50
    with Trace.open(trace_path) as trace:
        expected = _hash_fill(words)
        np.testing.assert_array_equal(snap(trace, 0, "big", np.uint32), expected)
        np.testing.assert_array_equal(snap(trace, 49, "big", np.uint32), expected)
        np.testing.assert_array_equal(snap(trace, 49, "acc", np.uint32), (expected[:256].astype(np.uint64) * 50 % 2**32).astype(np.uint32))


def _readonly_input_trace(builder: ScenarioBuilder, tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = np.random.default_rng(7).integers(0, 2**32, size=MiB // 4, dtype=np.uint32)
    builder.shader("sum", SUM_UINT).buffer("big", MiB, data, shader_access="readonly").buffer("acc", 1024)
    for k in range(50):
        builder.dispatch("sum", [(0, 0, "big"), (0, 1, "acc")], [256 // 64])
        builder.boundary(["big", "acc"], k)
    trace_path = tmp_path / "dedup.vkt"
    record_ok(builder.save(), trace_path, "--checkpoint-every", 0)
    return trace_path, data


@pytest.mark.device
def test_embedded_files_are_their_sources_byte_for_byte(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Every embedded file reads back as its source's bytes: .npy inputs whose payloads are buffers'
    initial states (one blob serves both; the file is only hashed), one whose payload is no resource's
    initial state (raw data: the payload is stored on its own), a .npy with bytes after its payload
    (stored whole) and the shader source."""
    builder.shader("accumulate", ACCUMULATE).buffer("inc", 4 * N, INC, shader_access="readonly")
    builder.buffer("acc", 4 * N, np.arange(N, dtype=np.float32) * 3).raw("plain", np.arange(16, dtype=np.int32))
    for k in range(3):
        builder.dispatch("accumulate", [(0, 0, "inc"), (0, 1, "acc")], [N // 64])
        builder.boundary(["acc"], k)
    trailing = builder.root / "trailing.npy"
    np.save(trailing, np.ones(N, np.float32))
    trailing.write_bytes(trailing.read_bytes() + b"tail")
    builder.resources.append({"raw_data": {"uid": "extra", "src": "trailing.npy"}})
    trace_path = tmp_path / "files.vkt"
    record_ok(builder.save(), trace_path, "--checkpoint-every", 0)
    with Trace.open(trace_path) as trace:
        assert set(trace.files) == {"accumulate.comp", "inc.npy", "acc.npy", "plain.npy", "trailing.npy"}
        for name in trace.files:
            assert trace.file_bytes(name) == (builder.root / name).read_bytes(), name
        initial = trace.checkpoints[-1]
        assert trace.files["inc.npy"][1] == initial["inc"] and trace.files["acc.npy"][1] == initial["acc"]
        assert trace.files["plain.npy"][1] not in initial.values() and "plain.npy" in trace.npy_headers
        assert "trailing.npy" not in trace.npy_headers  # stored whole


def test_the_portable_scenario_renames_the_files_and_leaves_the_scenario_as_it_was(builder: ScenarioBuilder) -> None:
    """``portable_scenario`` copies only the resources' entries it renames: the loaded scenario's
    document is unchanged, and the rest (the commands) is the same data."""
    from capture.embed import portable_scenario
    from vkcore.scenario.load import load_scenario

    builder.shader("accumulate", ACCUMULATE).buffer("inc", 4 * N, INC, shader_access="readonly")
    builder.buffer("acc", 4 * N, np.arange(N, dtype=np.float32))
    builder.dispatch("accumulate", [(0, 0, "inc"), (0, 1, "acc")], [N // 64]).boundary(["acc"], 0)
    path = builder.save()
    document = json.loads(path.read_text())
    for item in document["resources"]:  # an absolute path, which the trace names by the file's name
        for body in item.values():
            if body["uid"] == "inc":
                body["src"] = str(builder.root / body["src"])
    path.write_text(json.dumps(document))
    scenario = load_scenario(path)
    before = json.dumps(scenario.document, sort_keys=True)
    portable, files = portable_scenario(scenario, {})
    assert json.dumps(scenario.document, sort_keys=True) == before
    assert portable["commands"] == scenario.document["commands"]
    def sources(document: dict[str, Any]) -> dict[str, str]:
        return {body["uid"]: body["src"] for item in document["resources"] for body in item.values() if "src" in body}

    assert sorted(sources(portable).values()) == sorted(f.name for f in files) == ["acc.npy", "accumulate.comp", "inc.npy"]
    assert sources(portable).keys() == sources(scenario.document).keys() == {"accumulate", "inc", "acc"}
    assert Path(sources(scenario.document)["inc"]).is_absolute() and sources(portable)["inc"] == "inc.npy"
    assert {k: v for k, v in portable.items() if k != "resources"} == {k: v for k, v in scenario.document.items()
                                                                      if k != "resources"}


def test_the_header_names_the_platform_as_python_does_without_starting_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``platform.platform()`` runs ``uname -p`` in a child process and scans the interpreter's binary
    for the C library's version: 2-12 ms before a recording's first frame. The trace header's
    ``platform`` is the same string here, made from ``uname()`` and ``confstr`` alone."""
    import platform
    import subprocess

    from capture.recorder import _platform

    expected = platform.platform()
    monkeypatch.setattr(platform, "_uname_cache", None)
    monkeypatch.setattr(platform, "_platform_cache", {})

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a child process: {args}")

    monkeypatch.setattr(subprocess, "check_output", no_process)
    monkeypatch.setattr(platform, "libc_ver", no_process)
    assert _platform() == expected


@pytest.mark.device
def test_readonly_input_snapshots_stored_once(builder: ScenarioBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 1 MiB readonly buffer of random data captured at 50 boundaries: its 50 MiB of snapshots cost
    1 MiB. (The embedded input .npy shares its payload blob with the initial state.)"""
    trace_path, data = _readonly_input_trace(builder, tmp_path)
    summary = info_json(trace_path, capsys)
    big = summary["resources"]["big"]
    assert big["snapshots"] == 50 and big["unique"] == 1 and big["raw_bytes"] == 50 * MiB
    assert big["stored_bytes"] <= MiB
    assert summary["dedup_saved_bytes"] >= 49 * MiB
    embedded = summary["files"]["big.npy"]["size"]
    acc = summary["resources"]["acc"]["stored_bytes"]  # 50 different 1 KiB sums: about 50 KiB
    # one copy of the snapshot + the embedded input + the accumulator + metadata
    assert trace_path.stat().st_size < MiB + embedded + acc + 64 * 1024
    with Trace.open(trace_path) as trace:
        assert trace.checkpoints[-1]["big"] == trace.frame(0).snapshots["big"] == trace.frame(49).snapshots["big"]
        np.testing.assert_array_equal(snap(trace, 49, "big", np.uint32), data)


@pytest.mark.device
def test_readonly_input_whole_trace_under_2mib(builder: ScenarioBuilder, tmp_path: Path) -> None:
    trace_path, _ = _readonly_input_trace(builder, tmp_path)
    assert trace_path.stat().st_size < 2 * MiB


# acc += inc; noted += 1. ``inc`` is readonly in the shader; ``noted`` is written although the
# scenario below declares it readonly (the declaration is advice, the shader decides).
ACCUMULATE_AND_COUNT = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer I { float inc[]; };
layout(set = 0, binding = 1) buffer A { float acc[]; };
layout(set = 0, binding = 2) buffer N { float noted[]; };
void main() { uint i = gl_GlobalInvocationID.x; acc[i] += inc[i]; noted[i] += 1.0; }
"""


@pytest.mark.device
def test_what_no_shader_can_write_is_named_not_read_back(
    builder: ScenarioBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inc`` (declared readwrite, readonly in the shader) is never copied back from the device: its
    snapshots and checkpoint entries name its initial blob, and read back as its initial content.
    ``noted`` (declared readonly, written by the shader) is captured like any written resource."""
    from vkcore.exec.session import Session

    copied: set[str] = set()
    record_copies = Session._record_copies

    def spy(self: Session, cb: Any, items: Any, slot: Any) -> None:
        copied.update(i.uid for i in items)
        record_copies(self, cb, items, slot)

    monkeypatch.setattr(Session, "_record_copies", spy)
    zeros = np.zeros(N, np.float32)
    builder.shader("step", ACCUMULATE_AND_COUNT).buffer("inc", INC.nbytes, INC, shader_access="readwrite")
    builder.buffer("acc", INC.nbytes).buffer("noted", INC.nbytes, zeros, shader_access="readonly")
    for k in range(6):
        builder.dispatch("step", [(0, 0, "inc"), (0, 1, "acc"), (0, 2, "noted")], [N // 64])
        builder.boundary(["inc", "acc", "noted"], k)
    trace_path = tmp_path / "unwritable.vkt"
    record_ok(builder.save(), trace_path, "--checkpoint-every", 3)
    assert copied == {"acc", "noted"}
    with Trace.open(trace_path) as trace:
        initial = trace.checkpoints[-1]["inc"]
        assert {f.snapshots["inc"] for f in trace.frames} == {initial}
        assert {trace.checkpoints[s]["inc"] for s in (2, 5)} == {initial}
        for f in trace.frames:
            np.testing.assert_array_equal(snap(trace, f.seq, "inc"), INC)
            np.testing.assert_array_equal(snap(trace, f.seq, "acc"), (f.seq + 1) * INC)
            np.testing.assert_array_equal(snap(trace, f.seq, "noted"), zeros + f.seq + 1)


@pytest.mark.slow
@pytest.mark.device
def test_a_large_unwritable_input_outlasting_the_frames_is_recorded_whole(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The preamble reads an unwritable buffer straight from its mapping while the frames run. With
    one short frame and 48 MiB of incompressible input the frames end long before the preamble is
    written: the session must stay open until it is (else the mapping is gone under the reader)."""
    words = 12 << 20
    data = np.random.default_rng(8).integers(0, 2**32, words, dtype=np.uint32)
    builder.shader("sum", SUM_UINT).buffer("big", data.nbytes, data, shader_access="readonly").buffer("acc", 1024)
    builder.dispatch("sum", [(0, 0, "big"), (0, 1, "acc")], [256 // 64]).boundary(["big", "acc"], 0)
    trace_path = tmp_path / "big.vkt"
    proc = vkcap("record", builder.save(), "-o", trace_path, "--checkpoint-every", 0)
    assert proc.returncode == 0, proc.stderr
    with Trace.open(trace_path) as trace:
        assert trace.frame(0).snapshots["big"] == trace.checkpoints[-1]["big"]
        np.testing.assert_array_equal(snap(trace, 0, "big", np.uint32), data)
        np.testing.assert_array_equal(snap(trace, 0, "acc", np.uint32), data[:256])  # acc starts at zero


@pytest.mark.device
def test_the_trace_is_finished_while_the_device_closes(builder: ScenarioBuilder, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the run has queued its last frame, the writer finishes the trace (END record, index, fsync,
    rename) in parallel with the session's and the device's teardown: here the device's close waits
    until the finished trace is at its path, which would never happen if finishing came after it."""
    from vkcore.device import context as device

    trace_path = tmp_path / "t.vkt"
    close = device.VulkanContext.close
    seen: list[bool] = []

    def close_once_finished(ctx: Any) -> None:
        deadline = time.monotonic() + 20
        while not trace_path.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        seen.append(trace_path.exists() and not partial_files(tmp_path))
        close(ctx)

    monkeypatch.setattr(device.VulkanContext, "close", close_once_finished)
    record_ok(accumulate_scenario(builder, 5), trace_path, "--checkpoint-every", 2)
    assert seen == [True]
    with Trace.open(trace_path) as trace:
        assert [f.seq for f in trace.frames] == list(range(5)) and not trace.recovered
        assert trace.end == {"kind": "end", "status": "complete", "frames": 5, "error": ""}
        np.testing.assert_array_equal(snap(trace, 4, "acc"), INC * 5)


# --------------------------------------------------------------------------------------------------
# seeking: a frame's snapshot reads only its own blob


@pytest.mark.device
def test_seek_reads_only_the_frame_asked_for(builder: ScenarioBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace_path = tmp_path / "seek.vkt"
    record_ok(accumulate_scenario(builder, 10), trace_path, "--checkpoint-every", 0)
    logs: list[ReadLog] = []

    def logging_reader(path: Path, **kw: Any) -> TraceReader:
        logs.append(ReadLog(open(path, "rb", buffering=0)))
        return TraceReader(logs[-1], **kw)

    monkeypatch.setattr("capture.trace.TraceReader", logging_reader)
    with Trace.open(trace_path) as trace:
        log = logs[0]
        reader = trace.reader
        blob_ranges = {}
        for key in reader.blob_keys():
            start = reader.blob_offset(key)
            blob_ranges[key] = (start, start + 64 + reader.blob_info(key).stored_len)
        # opening reads the file header, trailer, index and META records: no blob payload
        for at, n in log.reads:
            for start, end in blob_ranges.values():
                assert at + n <= start or at >= end, f"open read ({at}, {n}) touches the blob record at {start}"
        for seq in (7, 2):
            log.reads.clear()
            data = snap(trace, seq, "acc")
            np.testing.assert_array_equal(data, (seq + 1) * INC)
            start, end = blob_ranges[trace.frame(seq).snapshots["acc"]]
            assert log.reads, "nothing was read"
            for at, n in log.reads:
                assert start <= at and at + n <= end, f"frame {seq}: read ({at}, {n}) outside its blob [{start}, {end})"
            assert sum(n for _, n in log.reads) == end - start  # each byte of the record once, nothing else
    log.close()


# --------------------------------------------------------------------------------------------------
# crash safety: a real kill -9, and corruption


def _start_recording(scenario: Path, trace_path: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vkcap", "record", str(scenario), "-o", str(trace_path), *flags],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_for_frames(proc: subprocess.Popen[str], folder: Path, frames: int, timeout: float = 60) -> Path:
    """Poll the partial file until it holds at least ``frames`` complete frame records."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the recording ended early ({proc.returncode}): {proc.communicate()[1]}"
        for p in partial_files(folder):
            try:
                with TraceReader(p) as r:
                    if len(r.meta_index(kinds.FRAME)) >= frames:
                        return p
            except Exception:  # the file is being written: too early to read, try again
                pass
        time.sleep(0.05)
    raise AssertionError(f"no partial trace with {frames} frames after {timeout} s")


@pytest.fixture
def long_scenario(builder: ScenarioBuilder) -> Path:
    return accumulate_scenario(builder, 4)  # with --repeat 20000: 80000 frames, far more than the test waits for


@pytest.mark.slow
@pytest.mark.device
def test_kill_9_leaves_a_recoverable_trace(long_scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    trace_path = folder / "long.vkt"
    proc = _start_recording(long_scenario, trace_path, "--repeat", "20000", "--checkpoint-every", "16")
    try:
        partial = _wait_for_frames(proc, folder, 5)
        time.sleep(0.2)  # let it run on, so the kill lands mid-stream
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert not trace_path.exists()  # nothing was published at the target
    assert partial_files(folder) == [partial]
    summary = info_json(partial, capsys)
    assert summary["recovered"] is True and summary["status"] == "unfinished"
    assert summary["recovery_note"]
    frames = summary["frames"]
    assert frames >= 5
    with Trace.open(partial) as trace:
        assert [f.seq for f in trace.frames] == list(range(frames))
        for seq in sorted({0, frames // 2, frames - 1}):
            np.testing.assert_array_equal(snap(trace, seq, "acc"), (seq + 1) * INC)
    np.testing.assert_array_equal(export(partial, frames - 1, "acc", tmp_path / "last.npy"), frames * INC)


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("small")
    trace_path = root / "small.vkt"
    record_ok(accumulate_scenario(ScenarioBuilder(root / "scenario"), 4), trace_path, "--checkpoint-every", 0)
    return trace_path


@pytest.mark.device
@pytest.mark.parametrize("where", ["record-header", "blob-header", "payload", "last-byte"])
def test_flipped_byte_in_one_frame(small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    trace_path = tmp_path / "flipped.vkt"
    shutil.copy(small_trace, trace_path)
    victim = 2
    with Trace.open(trace_path) as trace:
        key = trace.frame(victim).snapshots["acc"]
        assert all(f.snapshots["acc"] != key for f in trace.frames if f.seq != victim)
        offset = trace.reader.blob_offset(key)
        stored = trace.reader.blob_info(key).stored_len
    at = offset + {"record-header": 10, "blob-header": 32 + 3, "payload": 64 + stored // 2, "last-byte": 64 + stored - 1}[where]
    with open(trace_path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x40]))
    capsys.readouterr()
    assert cli("export", trace_path, "--frame", victim, "--resource", "acc", "-o", tmp_path / "bad.npy") == 2
    err = capsys.readouterr().err
    assert f"frame {victim}" in err and f"offset {offset}" in err, err
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    assert err.count(str(trace_path)) == 1, err  # the file is named once
    assert not (tmp_path / "bad.npy").exists()
    for seq in (0, 1, 3):
        np.testing.assert_array_equal(export(trace_path, seq, "acc", tmp_path / f"ok{seq}.npy"), (seq + 1) * INC)
    summary = info_json(trace_path, capsys)  # info reads no payload: it still works
    assert summary["frames"] == 4 and summary["status"] == "complete" and summary["recovered"] is False


def _flip_meta(source: Path, target: Path, kind: str, nth: int = 0) -> int:
    """Copy ``source`` to ``target`` with one byte flipped in the payload of its ``nth`` META record
    of ``kind``; return that record's offset."""
    shutil.copy(source, target)
    with TraceReader(target) as reader:
        offset = reader.meta_index(kind)[nth][0]
    with open(target, "r+b") as f:
        f.seek(offset + 32 + 2)  # inside the msgpack payload, after the record header
        byte = f.read(1)[0]
        f.seek(offset + 32 + 2)
        f.write(bytes([byte ^ 0x40]))
    return offset


@pytest.mark.device
def test_a_damaged_frame_record_costs_that_frame_only(small_trace: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    trace_path = tmp_path / "meta.vkt"
    offset = _flip_meta(small_trace, trace_path, kinds.FRAME, 2)
    for seq in (0, 1, 3):
        np.testing.assert_array_equal(export(trace_path, seq, "acc", tmp_path / f"ok{seq}.npy"), (seq + 1) * INC)
    capsys.readouterr()
    assert cli("export", trace_path, "--frame", 2, "--resource", "acc", "-o", tmp_path / "lost.npy") == 2
    assert capsys.readouterr().err == (
        f"vkcap: error: {trace_path}: --frame: no frame 2 in this trace (frames: 0-1, 3); damaged frame record at offset "
        f"{offset} (after frame 1): META payload checksum mismatch\n")
    with Trace.open(trace_path) as trace:
        assert [(d.kind, d.offset, d.after_frame) for d in trace.damaged] == [(kinds.FRAME, offset, 1)]


@pytest.mark.device
@pytest.mark.parametrize("kind", [kinds.HEADER, kinds.SCENARIO, kinds.RESOURCES])
def test_a_damaged_essential_record_is_named(small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             kind: str) -> None:
    trace_path = tmp_path / "meta.vkt"
    offset = _flip_meta(small_trace, trace_path, kind)
    capsys.readouterr()
    assert cli("info", trace_path) == 2
    assert capsys.readouterr().err == (
        f"vkcap: error: {trace_path}: damaged {kind} record at offset {offset} (before the first frame): META payload "
        "checksum mismatch; the trace cannot be read without it\n")


@pytest.mark.device
@pytest.mark.parametrize("kind, purpose", [(kinds.FILE, "rebuild the scenario to replay it"),
                                           (kinds.CHECKPOINT, "restore the initial state")])
def test_replay_names_the_damaged_record_it_needs(small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  kind: str, purpose: str) -> None:
    trace_path = tmp_path / "meta.vkt"
    offset = _flip_meta(small_trace, trace_path, kind)
    np.testing.assert_array_equal(export(trace_path, 3, "acc", tmp_path / "ok.npy"), 4 * INC)  # frames stay readable
    capsys.readouterr()
    assert cli("replay", trace_path) == 2
    assert capsys.readouterr().err.endswith(
        f"vkcap: error: {trace_path}: cannot {purpose}: damaged {kind} record at offset {offset} (before the first "
        "frame): META payload checksum mismatch\n")


# --------------------------------------------------------------------------------------------------
# Ctrl-C


def _interrupt_recording(scenario: Path, folder: Path, presses: int, gap_s: float = 0.02) -> tuple[Path, int, str]:
    """Record ``scenario`` into ``folder/long.vkt``, press Ctrl-C ``presses`` times ``gap_s`` apart once
    5 frames are written; return (the trace path, the exit code, stderr)."""
    folder.mkdir()
    trace_path = folder / "long.vkt"
    proc = _start_recording(scenario, trace_path, "--repeat", "20000")
    try:
        _wait_for_frames(proc, folder, 5)
        for press in range(presses):
            if press:
                time.sleep(gap_s)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return trace_path, proc.returncode, err


@pytest.mark.device
def test_ctrl_c_closes_the_trace(long_scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "traces"
    trace_path, code, err = _interrupt_recording(long_scenario, folder, 1)
    assert code == 130, err
    assert "interrupted" in err
    assert trace_path.is_file() and partial_files(folder) == []  # renamed onto the target, nothing left over
    summary = info_json(trace_path, capsys)
    assert summary["status"] == "interrupted" and summary["recovered"] is False
    frames = summary["frames"]
    assert 5 <= frames < 80000
    with Trace.open(trace_path) as trace:
        assert trace.end is not None and trace.end["frames"] == frames
        assert [f.seq for f in trace.frames] == list(range(frames))
        for f in trace.frames:  # every frame is readable and right
            np.testing.assert_array_equal(snap(trace, f.seq, "acc"), (f.seq + 1) * INC)
    np.testing.assert_array_equal(export(trace_path, frames - 1, "acc", tmp_path / "last.npy"), frames * INC)


@pytest.mark.device
def test_a_double_ctrl_c_still_closes_the_trace(long_scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two presses 20 ms apart are one request: the trace is finished and renamed into place (the
    second used to abort and leave the frames in the hidden partial file)."""
    folder = tmp_path / "traces"
    trace_path, code, err = _interrupt_recording(long_scenario, folder, 2)
    assert code == 130, err
    assert "Traceback" not in err and "Warning" not in err, err
    assert trace_path.is_file() and partial_files(folder) == []
    summary = info_json(trace_path, capsys)
    assert summary["status"] == "interrupted" and summary["recovered"] is False and summary["frames"] >= 5


def test_a_second_ctrl_c_after_the_grace_period_aborts() -> None:
    stop = StopRequest()
    handler = InterruptHandler(stop, grace_s=0.05)
    handler._handle(signal.SIGINT, None)
    assert stop.requested
    handler._handle(signal.SIGINT, None)  # within the grace period: the same request
    time.sleep(0.06)
    with pytest.raises(KeyboardInterrupt):
        handler._handle(signal.SIGINT, None)


# --------------------------------------------------------------------------------------------------
# hostile traces: file names that escape the output folder


def _trace_with_file_named(path: Path, name: str) -> Path:
    """A trace written with TraceWriter directly, with the recorder's META kinds and one ``file`` record."""
    with TraceWriter(path) as w:
        w.add_meta(kinds.HEADER, {"schema": 1, "vkcap_version": "0.1.0", "argv": [], "checkpoint_every": 0})
        portable = {"resources": [{"buffer": {"uid": "x", "size": 16, "src": name}}], "commands": []}
        w.add_meta(kinds.SCENARIO, {"name": "evil.json", "original": json.dumps(portable), "portable": json.dumps(portable)})
        blob = w.put_blob(b"pwned\n")
        w.add_meta(kinds.FILE, {"name": name, "role": "input", "blob": blob, "size": 6})
        w.add_meta(kinds.FINGERPRINT, {"device_name": "none"})
        w.add_meta(kinds.RESOURCES, {"resources": {"x": {"kind": "buffer", "size": 16}}})
        w.add_meta(kinds.CHECKPOINT, {"seq": -1, "state": {"x": w.put_blob(bytes(16))}})
        w.add_meta(kinds.END, {"status": "complete", "frames": 0, "error": ""})
    return path


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/x", "a/../../evil.txt", "inputs/../../evil.txt"])
def test_trace_naming_a_path_outside_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    trace_path = _trace_with_file_named(tmp_path / "evil.vkt", name)
    with pytest.raises(TraceError, match="unsafe file name"):
        Trace.open(trace_path)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TraceError, match="unsafe file name"):
        safe_join(out, name)
    capsys.readouterr()
    assert cli("info", trace_path) == 2
    assert "unsafe file name" in capsys.readouterr().err
    assert not (tmp_path / "evil.txt").exists() and not Path("/etc/x").exists()


def test_a_safe_name_opens(tmp_path: Path) -> None:
    """The crafted trace itself is well formed: with a good name it opens (so the refusals above are about the name)."""
    with Trace.open(_trace_with_file_named(tmp_path / "ok.vkt", "inputs/x.npy")) as trace:
        assert trace.files["inputs/x.npy"][0] == "input"
    assert safe_join(tmp_path, "inputs/x.npy") == (tmp_path / "inputs" / "x.npy").resolve()


GOOD_NAMES = ["a.comp", "x.npy", "sub/dir/x.npy", "external/0/inc.glsl", "..hidden", "a..b", "dir.d/..x", "name with space.npy"]
BAD_NAMES = [
    "", "..", "../x", "../../etc/passwd", "a/../b", "a/../../b", "/etc/x", "/", "//x",
    "./a", "a/./b", "a//b", "a/", "a/..", "a\\b", "..\\x", "C:\\x", "a\0b",
]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_check_trace_name_accepts(name: str) -> None:
    assert check_trace_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_check_trace_name_refuses(name: str) -> None:
    with pytest.raises(TraceError, match="unsafe file name"):
        check_trace_name(name)


def test_check_trace_name_refuses_dot() -> None:
    with pytest.raises(TraceError, match="unsafe file name"):
        check_trace_name(".")


@pytest.mark.parametrize("value", [None, 3, b"x"])
def test_check_trace_name_refuses_non_strings(value: Any) -> None:
    with pytest.raises(TraceError, match="unsafe file name"):
        check_trace_name(value)


def test_safe_join_refuses_a_symlink_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)  # a name that looks inside but resolves outside
    with pytest.raises(TraceError, match="unsafe file name"):
        safe_join(root, "link/evil.txt")


# --------------------------------------------------------------------------------------------------
# bad input writes nothing


def _bad_scenario(builder: ScenarioBuilder, problem: str) -> Path:
    builder.shader("accumulate", ACCUMULATE if problem != "bad-glsl" else ACCUMULATE.replace("+=", "+=="))
    builder.buffer("inc", INC.nbytes, INC, shader_access="readonly").buffer("acc", INC.nbytes)
    if problem == "duplicate-uid":
        builder.buffer("acc", INC.nbytes)
    builder.dispatch("accumulate", [(0, 0, "inc"), (0, 1, "acc")], [N // 64]).boundary(["acc"], 0)
    scenario = builder.save()
    if problem == "missing-src":
        (builder.root / "inc.npy").unlink()
    return scenario


@pytest.mark.device
@pytest.mark.parametrize("problem", ["duplicate-uid", "missing-src", "bad-glsl"])
def test_bad_scenario_exits_2_and_writes_no_trace(builder: ScenarioBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str) -> None:
    scenario = _bad_scenario(builder, problem)
    folder = tmp_path / "traces"
    folder.mkdir()
    capsys.readouterr()
    code = cli("record", scenario, "-o", folder / "bad.vkt")
    err = capsys.readouterr().err
    assert list(folder.iterdir()) == []  # no trace, no partial file
    assert code == 2, err
    assert err.startswith("vkcap: error: ") and len(err.strip().splitlines()) == 1, err


SHUFFLE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer S { uint s[]; };
void main() {  // xorshift32 on every element: new, incompressible data every frame
    uint i = gl_GlobalInvocationID.x;
    uint x = s[i];
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    s[i] = x;
}
"""


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (a full disk is simulated with it); the
    test is skipped where this process may not mount."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("needs root and mount to create a small tmpfs (a full disk is simulated with it)")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


def record_incompressible_onto(builder: ScenarioBuilder, disk: Path, frames: int, seed: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Record ``frames`` frames of 64 KiB of incompressible, changing data into ``disk``/t.vkt."""
    data = np.random.default_rng(seed).integers(0, 2**32, 16384, dtype=np.uint32)
    builder.shader("shuffle", SHUFFLE).buffer("state", data.nbytes, data)
    for f in range(frames):
        builder.dispatch("shuffle", [(0, 0, "state")], [data.size // 64]).boundary(["state"], f)
    trace = disk / "t.vkt"
    proc = vkcap("record", builder.save(), "-o", trace)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc, trace


@pytest.mark.slow
@pytest.mark.device
def test_full_disk_keeps_the_complete_frames(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A disk that fills up mid-recording: one clear error, exit 1, and a valid trace holding the
    frames completed before, marked failed with the reason."""
    with small_disk(tmp_path / "small", "200k") as disk:
        proc, trace = record_incompressible_onto(builder, disk, 20, seed=3)
        message = proc.stderr.strip().splitlines()[-1]
        assert message.startswith(f"vkcap: error: {trace}: cannot write the trace (No space left on device) at frame ")
        info = json.loads(vkcap("info", trace, "--json").stdout)
        assert info["status"] == "failed" and info["frames"] >= 1 and "No space left" in info["error"]
        assert not info["recovered"]


@pytest.mark.device
def test_full_disk_before_the_first_frame_leaves_nothing(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The preamble (written while the first frames run) does not fit: one clear error, exit 1, and
    neither a trace nor a partial file."""
    with small_disk(tmp_path / "tiny", "32k") as disk:
        proc, trace = record_incompressible_onto(builder, disk, 3, seed=4)
        assert proc.stderr.strip().splitlines()[-1] == (
            f"vkcap: error: {trace}: cannot write the trace (No space left on device) before its first frame")
        assert sorted(p.name for p in disk.iterdir()) == []


@pytest.mark.device
def test_a_trace_that_cannot_be_published_fails_and_names_the_file_holding_its_frames(
        builder: ScenarioBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The very last step fails (the rename onto the target path; a full disk at the index fails the
    same way): exit 1 and one line naming the partial file, which holds every frame; nothing at the
    target path. Before, this was logged and the recording reported success."""
    scenario = accumulate_scenario(builder, 4)
    trace = tmp_path / "out" / "t.vkt"
    rename = os.replace

    def refuse_publishing(src: Any, dst: Any, **kwargs: Any) -> None:
        if os.fspath(src).endswith(".partial"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", refuse_publishing)
    capsys.readouterr()
    assert cli("record", scenario, "-o", trace) == 1
    monkeypatch.undo()
    partial, = partial_files(trace.parent)
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"vkcap: error: {trace}: could not finish the trace (No space left on device); its 4 complete frame(s) "
        f"are in {partial} (vkcap info reads it)")
    assert not trace.exists()
    with Trace.open(partial) as t:
        assert [f.seq for f in t.frames] == [0, 1, 2, 3]
        expected = np.cumsum(np.tile(INC, (4, 1)), axis=0, dtype=np.float32)
        for seq in range(4):
            np.testing.assert_array_equal(snap(t, seq, "acc"), expected[seq])


@pytest.mark.device
def test_compression_flags_choose_the_zstd_level_and_refuse_what_zstd_cannot_do(
        builder: ScenarioBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = accumulate_scenario(builder, 6)
    traces = {level: tmp_path / f"level{level}.vkt" for level in (-5, 19)}
    for level, path in traces.items():
        record_ok(scenario, path, "--compression-level", level, "--compression-threads", 0)
    with Trace.open(traces[-5]) as fast, Trace.open(traces[19]) as small:
        assert [f.seq for f in fast.frames] == [f.seq for f in small.frames] == list(range(6))
        for f in fast.frames:  # the same snapshots, whatever the level
            assert fast.snapshot(f.seq, "acc") == small.snapshot(f.seq, "acc")
        def stored(t: Trace) -> int:
            return sum(t.reader.blob_info(k).stored_len for k in t.reader.blob_keys())
        assert stored(small) < stored(fast)
    bad = tmp_path / "bad.vkt"
    for flags, message in (
        (("--compression-level", "23"), "--compression-level must be between -131072 and 22 (zstd's levels), got 23"),
        (("--compression-threads", "-2"), "--compression-threads: must be -1 (one per core), 0 (none) or a whole number up to 256, got -2"),
    ):
        capsys.readouterr()
        assert cli("record", scenario, "-o", bad, *flags) == 2
        assert capsys.readouterr().err.strip() == f"vkcap: error: {message}"
        assert not bad.exists()
