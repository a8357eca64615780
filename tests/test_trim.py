"""``vkcap trim`` on real Vulkan (lavapipe in CI).

The scenario has 12 frames. Each runs ``acc`` (``acc[i] += i * 0.5``; the replacement ``acc7`` adds 1.0
to ``acc[5]`` in frame 7 only, where the counter it reads is 7), then ``count`` (``counter += 1``), then a
boundary capturing ``acc_buf`` alone: no boundary holds the whole state (``counter`` is never captured),
so the state before a frame that does not follow a checkpoint exists only by replaying. ``TRACE`` is
recorded with checkpoints after frames 3, 7 and 11 and dispatch-level snapshots; ``FULL``, the same
scenario with a checkpoint after every frame, holds every state to compare with. ``OUT`` is frames 5-9 of
TRACE: its initial state (after frame 4) is rebuilt by replaying frame 4 from checkpoint 3.

Commands run in-process through ``vkcap.cli.main``.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from capture.format import kinds
from tests.builders import vkcap
from capture.reader import TraceReader
from capture.writer import TraceWriter
from capture.trace import Trace
from tests.builders import ScenarioBuilder
from vkcap.cli import main

FRAMES = 12
N = 256
FIRST, LAST = 5, 9

ACC = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer C { uint frame; };
layout(set = 0, binding = 1) buffer A { float acc[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    acc[i] += float(i) * 0.5;
}
"""
ACC7 = ACC.replace("acc[i] += float(i) * 0.5;", "acc[i] += float(i) * 0.5;\n    if (i == 5u && frame == 7u) acc[i] += 1.0;")
COUNT = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer C { uint frame; };
void main() { frame += 1u; }
"""


def cli(*args: Any) -> int:
    return main([str(a) for a in args])


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def scenario(root: Path) -> Path:
    b = ScenarioBuilder(root)
    b.shader("acc", ACC).shader("count", COUNT)
    b.buffer("counter", 4, np.zeros(1, np.uint32)).buffer("acc_buf", N * 4)
    for k in range(FRAMES):
        b.dispatch("acc", [(0, 0, "counter"), (0, 1, "acc_buf")], [N // 64])
        b.dispatch("count", [(0, 0, "counter")], [1])
        b.boundary(["acc_buf"], k)
    return b.save()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trim")
    scn = scenario(root / "scenario")
    paths = {"root": root, "trace": root / "trace.vkt", "full": root / "full.vkt", "out": root / "out.vkt",
             "acc7": root / "acc7.comp"}
    assert cli("record", scn, "-o", paths["trace"], "--checkpoint-every", 4, "--dispatch-level") == 0
    assert cli("record", scn, "-o", paths["full"], "--checkpoint-every", 1) == 0
    assert cli("trim", paths["trace"], "--frames", f"{FIRST}-{LAST}", "-o", paths["out"]) == 0
    paths["acc7"].write_text(ACC7)
    return paths


def state(trace: Trace, seq: int) -> dict[str, bytes]:
    """The bytes of checkpoint ``seq`` (-1: the initial state), by uid."""
    return {uid: bytes(trace.blob(key, what=uid)) for uid, key in trace.checkpoints[seq].items()}


def replay_json(trace: Path, tmp_path: Path, *flags: Any) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    code = cli("replay", trace, "--json", out, *flags)
    return code, read_json(out)


def diverged(doc: dict[str, Any]) -> list[int]:
    return [f["frame"] for f in doc["frames"] if f["diverged"]]


@pytest.mark.device
def test_replay_of_the_trimmed_trace_passes_on_frames_a_to_b(traces: dict[str, Path], tmp_path: Path) -> None:
    code, doc = replay_json(traces["out"], tmp_path)
    assert code == 0 and doc["diverged"] is False
    assert [f["frame"] for f in doc["frames"]] == list(range(FIRST, LAST + 1))
    assert [f["frame_id"] for f in doc["frames"]] == list(range(FIRST, LAST + 1))
    assert doc["started_from_checkpoint"] == FIRST - 1 and doc["frames_executed"] == LAST - FIRST + 1
    assert all(d["status"] == "identical" for f in doc["frames"] for d in f["dispatches"]) and doc["frames"][0]["dispatches"]
    # one frame of it seeks from its own checkpoints: 8 from the checkpoint after 7, 6 from the one after 4
    for frame, start in ((8, 7), (6, FIRST - 1)):
        code, doc = replay_json(traces["out"], tmp_path, "--frame", frame)
        assert code == 0 and doc["started_from_checkpoint"] == start and [f["frame"] for f in doc["frames"]] == [frame]


@pytest.mark.device
def test_frames_snapshots_and_checkpoints_are_copied_byte_for_byte(traces: dict[str, Path]) -> None:
    with Trace.open(traces["trace"]) as t, Trace.open(traces["out"]) as o:
        assert [f.seq for f in o.frames] == list(range(FIRST, LAST + 1))
        assert o.complete and o.end == {"kind": "end", "status": "complete", "frames": LAST - FIRST + 1, "error": ""}
        for seq in range(FIRST, LAST + 1):
            a, b = t.frame(seq), o.frame(seq)
            assert (a.pass_index, a.index, a.frame_id, a.snapshots, a.dispatches) == \
                   (b.pass_index, b.index, b.frame_id, b.snapshots, b.dispatches)
            assert len(b.dispatches) == 3  # acc writes acc_buf (and may write counter), count writes counter
            for uid in a.snapshots:
                assert bytes(o.snapshot(seq, uid)) == bytes(t.snapshot(seq, uid))
            for d in a.dispatches:
                assert bytes(o.blob(d.blob, what="")) == bytes(t.blob(d.blob, what=""))
        assert sorted(o.checkpoints) == [-1, FIRST - 1, 7]  # the initial state, the one before 5, TRACE's after 7
        assert state(o, 7) == state(t, 7)
        # the same scenario, fingerprint, embedded files and SPIR-V
        assert (o.scenario_name, o.original_json, o.portable_json) == (t.scenario_name, t.original_json, t.portable_json)
        assert o.fingerprint == t.fingerprint and o.resources == t.resources and o.spirv == t.spirv
        assert {n: o.file_bytes(n) for n in o.files} == {n: t.file_bytes(n) for n in t.files}
        assert {k: v for k, v in o.header.items() if k != "trimmed_from"} == t.header


@pytest.mark.device
def test_initial_state_is_the_state_after_frame_a_minus_1(traces: dict[str, Path], tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """OUT's checkpoint -1 is, byte for byte, what FULL recorded after frame 4 (rebuilt here by a replay,
    since TRACE does not hold it); trimming FULL, which holds it, copies the same bytes. A trim from a
    checkpoint copies it; a trim from frame 0 copies the initial state."""
    with Trace.open(traces["out"]) as o, Trace.open(traces["full"]) as f, Trace.open(traces["trace"]) as t:
        initial = state(o, -1)
        assert initial == state(f, FIRST - 1) and initial == state(o, FIRST - 1)
        assert np.frombuffer(initial["counter"], np.uint32)[0] == FIRST
        assert initial["acc_buf"] == bytes(t.snapshot(FIRST - 1, "acc_buf"))
        assert o.header["trimmed_from"]["state"] == "replayed" and o.header["trimmed_from"]["replayed_from"] == 3
    caplog.set_level(logging.INFO, logger="vkcap")
    copied = tmp_path / "from-full.vkt"
    assert cli("trim", traces["full"], "--frames", f"{FIRST}-{LAST}", "-o", copied) == 0
    with Trace.open(copied) as c, Trace.open(traces["out"]) as o:
        assert c.checkpoints[-1] == o.checkpoints[-1] and c.header["trimmed_from"]["state"] == "checkpoint"
    for frames, expected, seqs, how in (("8", 7, [8], "checkpoint"), ("0-1", -1, [0, 1], "initial"),
                                        ("10-", 9, [10, 11], "replayed")):
        out = tmp_path / f"t{frames}.vkt"
        assert cli("trim", traces["trace"], "--frames", frames, "-o", out) == 0
        with Trace.open(out) as c, Trace.open(traces["full"]) as f:
            assert [x.seq for x in c.frames] == seqs and c.header["trimmed_from"]["state"] == how
            assert state(c, -1) == (state(f, -1) if expected == -1 else state(f, expected))
    assert (f"wrote frame 8 of {traces['trace']} (" in caplog.text
            and f"to {tmp_path / 't8.vkt'} (" in caplog.text and "initial state: copied from the checkpoint after frame 7" in caplog.text)
    code, doc = replay_json(tmp_path / "t10-.vkt", tmp_path)
    assert code == 0 and [x["frame"] for x in doc["frames"]] == [10, 11]


@pytest.mark.device
def test_a_trimmed_trace_gives_the_same_verdicts(traces: dict[str, Path], tmp_path: Path) -> None:
    """The replaced shader makes frame 7 diverge, and every frame after it (acc accumulates): the same
    frames in TRACE's frames 5-9 and in OUT; a tolerance that accepts it passes both. Trimming OUT again
    (from frame 7: replayed from OUT's checkpoint 4) keeps the verdicts and says where it came from."""
    replaced = ("--replace-shader", f"acc={traces['acc7']}", "--dtype", "acc_buf=float32")
    code_t, doc_t = replay_json(traces["trace"], tmp_path, "--frames", f"{FIRST}-{LAST}", *replaced)
    code_o, doc_o = replay_json(traces["out"], tmp_path, *replaced)
    assert code_t == code_o == 1
    assert diverged(doc_t) == diverged(doc_o) == [7, 8, 9]
    first_t, first_o = (next(f for f in d["frames"] if f["diverged"]) for d in (doc_t, doc_o))
    assert first_t == first_o  # the same comparisons, element for element
    assert replay_json(traces["trace"], tmp_path, "--frames", f"{FIRST}-{LAST}", *replaced, "--atol", 1)[0] == 0
    assert replay_json(traces["out"], tmp_path, *replaced, "--atol", 1)[0] == 0
    again = tmp_path / "again.vkt"
    assert cli("trim", traces["out"], "--frames", "7-", "-o", again) == 0
    code, doc = replay_json(again, tmp_path, *replaced)
    assert code == 1 and diverged(doc) == [7, 8, 9] and doc["started_from_checkpoint"] == 6
    with Trace.open(again) as a:
        provenance = a.header["trimmed_from"]
        assert provenance["frames"] == [7, 9] and provenance["replayed_from"] == FIRST - 1
        assert provenance["source_trimmed_from"]["frames"] == [FIRST, LAST]


@pytest.mark.device
def test_out_is_smaller_holds_only_its_blobs_and_says_it_was_trimmed(traces: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import xxhash

    trace, out = traces["trace"], traces["out"]
    assert out.stat().st_size < trace.stat().st_size
    with Trace.open(out) as o:
        named = {k for f in o.frames for k in [*f.snapshots.values(), *(d.blob for d in f.dispatches)]}
        named |= {k for s in o.checkpoints.values() for k in s.values()}
        named |= {key for _, key, _ in o.files.values()} | set(o.spirv.values())
        assert set(o.reader.blob_keys()) == named
        provenance = o.header["trimmed_from"]
    assert provenance["path"] == str(trace.resolve()) and provenance["size"] == trace.stat().st_size
    assert provenance["xxh3_128"] == xxhash.xxh3_128_hexdigest(trace.read_bytes())
    assert provenance["frames"] == [FIRST, LAST] and provenance["argv"][:2] == ["vkcap", "trim"]
    capsys.readouterr()
    assert cli("info", out, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trimmed_from"] == provenance and summary["frame_range"] == [FIRST, LAST]
    assert summary["checkpoints"] == [FIRST - 1, 7] and summary["frames"] == LAST - FIRST + 1
    assert cli("info", out) == 0
    text = capsys.readouterr().out
    assert "frames     5 (5-9) in 1 pass(es)" in text
    assert f"trimmed    frames 5-9 of {trace.resolve()} ({trace.stat().st_size} bytes, xxh3-128 {provenance['xxh3_128']})" in text
    assert "initial state: rebuilt by replaying frame 4 from the state after frame 3 on " in text


def rewrite(source: Path, target: Path, change: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
    """Copy a trace record by record, passing each META body through ``change``."""
    with TraceReader(source) as reader, TraceWriter(target) as writer:
        for key in reader.blob_keys():
            writer.write_prepared(reader.read_prepared(key))
        for _, body in reader.metas():
            kind = body.pop("kind")
            writer.add_meta(kind, change(kind, body))


def damage_meta(trace: Path, kind: str, seq: int) -> int:
    """Flip a byte of the ``kind`` record of frame ``seq``; return its offset."""
    with TraceReader(trace) as reader:
        offset = next(o for o, body in reader.metas(kind) if body["seq"] == seq)
    flip(trace, offset + 40)
    return offset


def flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.device
def test_bad_input_is_one_line_exit_2_and_leaves_out_untouched(traces: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    trace = traces["trace"]
    out = tmp_path / "out.vkt"
    kept = traces["out"].read_bytes()  # an existing trace that a failed trim must not touch
    damaged = {name: tmp_path / f"{name}.vkt" for name in ("frame", "checkpoint", "blob", "trimmed")}
    for path in damaged.values():
        path.write_bytes(trace.read_bytes())
    damaged["trimmed"].write_bytes(traces["out"].read_bytes())
    frame_at = damage_meta(damaged["frame"], kinds.FRAME, 7)
    checkpoint_at = damage_meta(damaged["checkpoint"], kinds.CHECKPOINT, 7)
    damage_meta(damaged["trimmed"], kinds.CHECKPOINT, FIRST - 1)  # its state before its first frame
    with Trace.open(damaged["blob"]) as t:
        key = t.frame(9).snapshots["acc_buf"]
        blob_at = t.reader.blob_offset(key)
    flip(damaged["blob"], blob_at + 64 + 2)
    cases = [
        (trace, "x", out, f"{trace}: --frames x: expected A-B, A- or A (frame numbers, 0 or more)"),
        (trace, "-3", out, f"{trace}: --frames -3: expected A-B, A- or A (frame numbers, 0 or more)"),
        (trace, "5-6-7", out, f"{trace}: --frames 5-6-7: expected A-B, A- or A (frame numbers, 0 or more)"),
        (trace, "9-3", out, f"{trace}: --frames 9-3: the last frame (3) comes before the first (9)"),
        (trace, "5-12", out, f"{trace}: --frames 5-12: frame 12 is not in the trace (it has frames 0-11)"),
        (trace, "12-", out, f"{trace}: --frames 12-: frame 12 is not in the trace (it has frames 0-11)"),
        (trace, "5-9", trace, f"{trace}: -o: is the trace being trimmed ({trace}): write the trimmed trace to another file"),
        (tmp_path / "nope.vkt", "5-9", out, f"{tmp_path / 'nope.vkt'}: no such file"),
        (damaged["frame"], "5-9", out,
         f"{damaged['frame']}: cannot trim frames 5-9: frame 7 is missing (damaged frame record at offset {frame_at} "
         f"(after frame 6): META payload checksum mismatch)"),
        (damaged["checkpoint"], "5-9", out,
         f"{damaged['checkpoint']}: cannot trim frames 5-9: the checkpoint after frame 7 is missing (damaged checkpoint "
         f"record at offset {checkpoint_at} (after frame 6): META payload checksum mismatch)"),
        (damaged["trimmed"], "7-9", out,
         f"{damaged['trimmed']}: cannot rebuild the state before frame 7: the trace starts at frame 5 and its "
         "checkpoint after frame 4 is missing"),
        # found while writing: the partial file goes, OUT stays
        (damaged["blob"], "5-9", out,
         f"{damaged['blob']}: frame 9, resource 'acc_buf': record at offset {blob_at}: blob {key}: payload checksum mismatch"),
    ]
    for source, frames, target, message in cases:
        out.write_bytes(kept)
        before = trace.read_bytes() if target == trace else None
        capsys.readouterr()
        assert cli("trim", source, "--frames", frames, "-o", target) == 2, message
        assert capsys.readouterr().err == f"vkcap: error: {message}\n"
        assert out.read_bytes() == kept
        if before is not None:
            assert trace.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no partial file left
    # the damaged traces still trim where they are intact
    assert cli("trim", damaged["frame"], "--frames", "8-", "-o", out) == 0
    assert cli("trim", damaged["blob"], "--frames", "5-8", "-o", out) == 0


@pytest.mark.device
def test_a_state_the_device_does_not_reproduce_is_refused(traces: dict[str, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A trace whose frame 4 says something this device does not compute (here, frame 3's acc_buf): the
    state before frame 5 cannot be rebuilt faithfully, so nothing is written (exit 1)."""
    lying = tmp_path / "lying.vkt"
    with Trace.open(traces["trace"]) as t:
        frame3 = t.frame(3).snapshots["acc_buf"]

    def change(kind: str, body: dict[str, Any]) -> dict[str, Any]:
        if kind == kinds.FRAME and body["seq"] == 4:
            body["snapshots"]["acc_buf"] = frame3
        return body

    rewrite(traces["trace"], lying, change)
    out = tmp_path / "out.vkt"
    kept = traces["out"].read_bytes()  # a trace: trim replaces nothing else
    out.write_bytes(kept)
    capsys.readouterr()
    assert cli("trim", lying, "--frames", "5-9", "-o", out) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"vkcap: error: {lying}: cannot rebuild the state before frame 5: replaying frame 4 from the "
                          "state after frame 3 on ")
    assert err.endswith("gave a 'acc_buf' different from the recording at frame 4; trim from a frame right after a "
                        "checkpoint (frames 0, 4, 8), or on the device that recorded the trace\n")
    assert out.read_bytes() == kept and not [p for p in os.listdir(tmp_path) if p.startswith(".")]
    assert cli("trim", lying, "--frames", "4-9", "-o", out) == 0  # from a checkpoint: nothing to rebuild


def test_frame_numbers_out_of_bounds_are_one_line(tmp_path: Path) -> None:
    """--frames with a frame of 2**31 or of 5000 digits (more than int() reads) is one line, exit 2."""
    golden = Path(__file__).resolve().parent.parent / "traces" / "add.vkt"
    done = vkcap("trim", golden, "--frames", "2147483648", "-o", tmp_path / "x.vkt")
    assert (done.returncode, done.stderr) == (2, f"vkcap: error: {golden}: --frames 2147483648: must be a whole number >= 0 "
                                              "and below 2**31, got 2147483648\n")
    done = vkcap("trim", golden, "--frames", "0-" + "9" * 5000, "-o", tmp_path / "x.vkt")
    assert done.returncode == 2 and done.stderr.endswith("...: must be a whole number >= 0 and below 2**31, got a number of "
                                                         "5000 digits\n") and done.stderr.count("\n") == 1
    assert not (tmp_path / "x.vkt").exists()
