"""Output targets and bad inputs of ``record``, ``run``, ``info`` and ``export``, on real Vulkan (lavapipe):
every refusal is one line naming the file and the flag or JSON path, exit 2, made before any frame runs,
and leaves the files on disk as they were. Also: a failed recording beside an existing trace, the
partial files a killed recording leaves, and the figures ``info`` and ``record`` print.

Most commands run in-process through ``vkcap.cli.main`` (fast); the hung-shader case needs a subprocess.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from capture.format import kinds
from capture.writer import TraceWriter, failed_trace_path
from tests.builders import ScenarioBuilder, vkcap
from tests.test_timeout import hung_scenario
from vkcap.cli import main
from vkcore.errors import EXIT_BAD_INPUT, EXIT_FAILURE
from vkcore.outputs import OutputTargetError, OutputWriteFailed, output_error, write_atomic

N = 256
DATA = np.arange(N, dtype=np.float32) * 0.5
# q = p and r = p: after the first frame, the snapshots of p, q and r are one blob.
COPY = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer P { float p[]; };
layout(set = 0, binding = 1) writeonly buffer Q { float q[]; };
layout(set = 0, binding = 2) writeonly buffer R { float r[]; };
void main() { uint i = gl_GlobalInvocationID.x; q[i] = p[i]; r[i] = p[i]; }
"""
FRAMES = 3


def cli(*args: Any) -> int:
    return main([str(a) for a in args])


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a failed command printed on stderr (asserting there is exactly one)."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def copy_scenario(b: ScenarioBuilder) -> Path:
    """p (input, readonly) copied to q and r (outputs q.npy, r.npy), captured at FRAMES boundaries."""
    b.shader("copy", COPY).buffer("p", DATA.nbytes, DATA, shader_access="readonly")
    b.buffer("q", DATA.nbytes, dst="q.npy", shader_access="writeonly")
    b.buffer("r", DATA.nbytes, dst="r.npy", shader_access="writeonly")
    for k in range(FRAMES):
        b.dispatch("copy", [(0, 0, "p"), (0, 1, "q"), (0, 2, "r")], [N // 64]).boundary(["p", "q", "r"], k)
    return b.save()


def listing(folder: Path) -> list[str]:
    """Every name in ``folder`` (hidden partial and temporary files included), sorted."""
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def scenario(builder: ScenarioBuilder) -> Path:
    return copy_scenario(builder)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One recording of the copy scenario, with dispatch-level snapshots, shared by the read-only tests."""
    root = tmp_path_factory.mktemp("recorded")
    trace = root / "copy.vkt"
    assert cli("record", copy_scenario(ScenarioBuilder(root / "s")), "-o", trace, "--output", root / "out",
               "--dispatch-level", "--checkpoint-every", 2) == 0
    return trace


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(a folder nothing can be created in, the reason vkcap gives): a read-only tmpfs as root, a
    folder without write permission otherwise."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder, "permission denied"
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield folder, "read-only file system"
    finally:
        subprocess.run(["umount", str(folder)], check=True)


# --------------------------------------------------------------------------------------------------
# 1. device nodes and FIFOs are never replaced


@pytest.mark.device
def test_record_export_and_run_refuse_a_fifo(scenario: Path, recorded: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    before = listing(tmp_path)
    assert cli("record", scenario, "-o", fifo, "--output", out) == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {fifo}: -o: is a FIFO, not a regular file: refusing to replace it"
    assert cli("export", recorded, "--frame", 0, "--resource", "q", "-o", fifo) == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {fifo}: -o: is a FIFO, not a regular file: refusing to replace it"
    assert cli("run", scenario, "--output", out, "--profiling-dump-path", fifo) == EXIT_BAD_INPUT
    assert error_line(capsys) == (f"vkcap: error: {fifo}: --profiling-dump-path: Unable to open profiling data file for "
                                  "writing: is a FIFO, not a regular file: refusing to replace it")  # the reference's phrase first
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and listing(tmp_path) == before  # no output, no partial


def test_a_device_node_is_never_replaced(scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    assert cli("record", scenario, "-o", node, "--output", tmp_path / "out") == EXIT_BAD_INPUT
    assert error_line(capsys) == (f"vkcap: error: {node}: -o: is a character device, not a regular file: "
                                  "refusing to replace it")
    assert stat.S_ISCHR(os.stat(node).st_mode) and listing(tmp_path) == ["null", "scenario"]


def test_every_atomic_writer_checks_its_target(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputTargetError, match="is a FIFO, not a regular file") as caught:
        write_atomic(fifo, [b"x"])
    assert caught.value.exit_code == EXIT_BAD_INPUT and isinstance(caught.value, OSError)
    with pytest.raises(OutputTargetError, match="is a FIFO, not a regular file"):
        TraceWriter(fifo)
    with pytest.raises(OutputTargetError, match="is a folder, not a file"):
        TraceWriter(tmp_path)
    assert listing(tmp_path) == ["fifo"]


# --------------------------------------------------------------------------------------------------
# 2. what record -o must not overwrite


def test_record_refuses_the_scenario_its_inputs_and_outputs(scenario: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    folder = scenario.parent
    out = tmp_path / "out"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    cases = [
        (scenario, "is the scenario itself"),
        (folder / "p.npy", "is resources[1].buffer.src, a file the scenario reads"),
        (out / "q.npy", "is resources[2].buffer.dst, a file the run writes"),
    ]
    for target, why in cases:
        assert cli("record", scenario, "-o", target, "--output", out) == EXIT_BAD_INPUT
        assert error_line(capsys) == f"vkcap: error: {target}: -o: {why}: refusing to overwrite it with the trace"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not out.exists()  # no frame ran


def test_record_refuses_an_existing_file_that_is_not_a_trace(scenario: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert cli("record", scenario, "-o", notes, "--output", tmp_path / "out") == EXIT_BAD_INPUT
    assert error_line(capsys) == (f"vkcap: error: {notes}: -o: exists and is not a vkcap trace: refusing to "
                                  "replace it (delete it, or choose another name)")
    assert notes.read_text() == "my notes\n" and listing(tmp_path) == ["notes.txt", "scenario"]


def test_record_refuses_a_folder_and_an_empty_path_before_running(scenario: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "adir"
    folder.mkdir()
    out = tmp_path / "out"
    assert cli("record", scenario, "-o", folder, "--output", out) == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {folder}: -o: is a folder, not a file"
    monkeypatch.chdir(folder)
    assert cli("record", scenario, "-o", "", "--output", out) == EXIT_BAD_INPUT
    assert error_line(capsys) == "vkcap: error: .: -o: is a folder (the current folder), not a file"
    assert listing(folder) == [] and not out.exists()


@pytest.mark.slow
@pytest.mark.device
def test_a_failed_recording_goes_beside_an_existing_trace(builder: ScenarioBuilder, tmp_path: Path) -> None:
    hung = hung_scenario(builder)
    trace = tmp_path / "t.vkt"
    good = tmp_path / "good.vkt"
    assert cli("record", _first_frames(hung), "-o", good, "--output", tmp_path / "o1") == 0
    shutil.copy(good, trace)
    kept = trace.read_bytes()
    proc = vkcap("record", hung, "-o", trace, "--timeout", "0.5", "--output", tmp_path / "o2", timeout=120)
    assert proc.returncode == EXIT_FAILURE, proc.stderr
    failed = tmp_path / "t.failed.vkt"
    assert proc.stderr.strip().splitlines()[-1] == (
        "vkcap: error: frame 3 did not finish within 0.5 s (--timeout): a hung or very slow shader; the frames "
        f"before it completed; {trace} was kept, the frames completed before are in {failed}")
    assert trace.read_bytes() == kept
    info = json.loads(vkcap("info", failed, "--json").stdout)
    assert (info["frames"], info["status"]) == (3, "failed")
    assert sorted(p.name for p in tmp_path.glob("*.vkt")) == ["good.vkt", "t.failed.vkt", "t.vkt"]
    assert not list(tmp_path.glob(".*.partial"))


def _first_frames(hung: Path) -> Path:
    """The hung scenario without its hung frame: a good recording of the same frames."""
    document = json.loads(hung.read_text())
    document["commands"] = document["commands"][:6]
    path = hung.parent / "first_frames.json"
    path.write_text(json.dumps(document))
    return path


def test_trace_writer_publishes_a_failed_trace_beside_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "t.vkt"
    target.write_bytes(b"old")
    with TraceWriter(target) as w:
        w.add_meta(kinds.END, {"status": "failed", "frames": 0, "error": "x"})
        w.close(keep_existing=True)
    assert target.read_bytes() == b"old" and w.published_path == str(tmp_path / "t.failed.vkt")
    with TraceWriter(target) as w:
        w.add_meta(kinds.END, {"status": "complete", "frames": 0, "error": ""})
    assert target.read_bytes()[:8] == b"VKCAPTRC" and w.published_path == str(target)
    assert failed_trace_path("a/t") == os.path.abspath("a/t.failed")


# --------------------------------------------------------------------------------------------------
# 3. what used to be "internal error"


@pytest.mark.device
def test_record_dry_run_builds_and_writes_nothing(scenario: Path, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vkcap")
    assert cli("record", scenario, "--dry-run", "-o", tmp_path / "t.vkt", "--output", tmp_path / "out") == 0
    assert "dry run: built 3 frame(s) on " in caplog.text and "recorded and wrote nothing" in caplog.text
    assert listing(tmp_path) == ["scenario"]


@pytest.mark.device
def test_outputs_under_a_file_are_refused(scenario: Path, recorded: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    file = scenario.parent / "p.npy"
    assert cli("run", scenario, "--output", file) == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {file}: --output: is a file, not a folder"
    assert cli("record", scenario, "-o", file / "t.vkt", "--output", tmp_path / "out") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {file / 't.vkt'}: -o: {file} is a file, not a folder"
    assert cli("export", recorded, "--frame", 0, "--resource", "q", "-o", file / "e.npy") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {file / 'e.npy'}: -o: {file} is a file, not a folder"
    assert listing(tmp_path) == ["scenario"]


@pytest.mark.device
def test_read_only_folders_are_refused_up_front(scenario: Path, recorded: Path, tmp_path: Path,
                                                read_only_folder: tuple[Path, str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder, why = read_only_folder
    assert cli("record", scenario, "-o", folder / "t.vkt", "--output", tmp_path / "out") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {folder / 't.vkt'}: -o: cannot write into {folder}: {why}"
    assert cli("export", recorded, "--frame", 0, "--resource", "q", "-o", folder / "e.npy") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {folder / 'e.npy'}: -o: cannot write into {folder}: {why}"
    assert cli("run", scenario, "--output", folder / "sub") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {folder / 'sub'}: --output: cannot write into {folder}: {why}"
    assert listing(folder) == [] and not (tmp_path / "out").exists()


def test_a_late_os_error_is_one_line_naming_the_path() -> None:
    """What a write meets after the checks (the folder turned read-only, the disk filled up)."""
    refused = output_error("x/t.npy", OSError(errno.EROFS, "Read-only file system"))
    assert isinstance(refused, OutputTargetError) and refused.exit_code == EXIT_BAD_INPUT
    assert refused.render() == "x/t.npy: cannot write: Read-only file system"
    full = output_error("x/t.npy", OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(full, OutputWriteFailed) and full.exit_code == EXIT_FAILURE
    assert full.render() == "x/t.npy: cannot write: No space left on device" and full.errno == errno.ENOSPC


def test_a_dst_resolving_to_a_folder_is_refused_before_running(builder: ScenarioBuilder, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    copy_scenario(builder)
    builder.resources[3]["buffer"]["dst"] = "."
    path = builder.save()
    out = tmp_path / "out"
    out.mkdir()
    for command in (("run", path, "--output", out), ("record", path, "--output", out, "-o", tmp_path / "t.vkt")):
        assert cli(*command) == EXIT_BAD_INPUT
        assert error_line(capsys) == (f"vkcap: error: {path}: resources[3].buffer.dst: {out}: "
                                      "is a folder, not a file")
    assert listing(out) == [] and not (tmp_path / "t.vkt").exists()  # q.npy would be written first


def test_a_5000_digit_size_is_a_json_path_error(builder: ScenarioBuilder, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_scenario(builder)
    path.write_text(path.read_text().replace(f'"size": {DATA.nbytes}', '"size": 1' + "0" * 5000, 1))
    for command in (("run", path, "--output", tmp_path / "out"), ("record", path, "-o", tmp_path / "t.vkt")):
        assert cli(*command) == EXIT_BAD_INPUT
        assert error_line(capsys) == (f"vkcap: error: {path}: resources[1].buffer.size: an integer of 5001 digits "
                                      "is far out of range")
    assert listing(tmp_path) == ["scenario"]


# --------------------------------------------------------------------------------------------------
# 4. a recording cut short


@pytest.mark.device
def test_a_missing_trace_names_the_partial_files_beside_it(recorded: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    partial = tmp_path / ".killed.vkt.1234.ab12cd.partial"
    shutil.copy(recorded, partial)  # what a kill -9 leaves: the records written so far
    monkeypatch.chdir(tmp_path)
    message = ("no such file; a recording cut short left .killed.vkt.1234.ab12cd.partial: vkcap "
               "info/export/replay read it as it is")
    assert cli("info", "killed.vkt") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: killed.vkt: {message}"
    assert cli("export", "killed.vkt", "--frame", 0, "--resource", "q", "-o", "e.npy") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: killed.vkt: {message}"
    assert cli("info", partial.name, "--json") == 0
    assert cli("info", "other.vkt") == EXIT_BAD_INPUT
    assert error_line(capsys) == "vkcap: error: other.vkt: no such file"


# --------------------------------------------------------------------------------------------------
# 5. info's figures, and record's


@pytest.mark.device
def test_shared_blobs_count_for_each_resource_and_record_agrees_with_info(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vkcap")
    trace = tmp_path / "t.vkt"
    assert cli("record", scenario, "-o", trace, "--output", tmp_path / "out", "--checkpoint-every", 0) == 0
    summary = json.loads(_info(trace, capsys, "--json"))
    rows = summary["resources"]
    assert list(rows) == ["p", "q", "r"]
    stored = rows["p"]["stored_bytes"]
    for row in rows.values():  # one distinct content each, the same blob for all three
        assert (row["snapshots"], row["dispatch_snapshots"], row["unique"], row["raw_bytes"], row["stored_bytes"]) == (
            FRAMES, 0, 1, FRAMES * DATA.nbytes, stored)
        assert row["ratio"] == FRAMES * DATA.nbytes / stored
    raw = 3 * FRAMES * DATA.nbytes
    assert (summary["snapshot_raw_bytes"], summary["snapshot_stored_bytes"], summary["dedup_saved_bytes"]) == (
        raw, stored, raw - DATA.nbytes)
    assert summary["ratio"] == raw / stored and "compression_ratio" not in summary
    assert summary["initial_state"] is True and summary["checkpoints"] == []
    kib = f"{stored} B" if stored < 1024 else f"{stored / 1024:.1f} KiB"
    figures = (f"{raw / 1024:.1f} KiB captured, {kib} stored ({raw / stored:.1f}x), deduplication saved "
               f"{(raw - DATA.nbytes) / 1024:.1f} KiB")
    recorded_line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("recorded "))
    assert recorded_line.endswith(f" into {trace}: {figures}; file {trace.stat().st_size / 1024:.1f} KiB")
    text = _info(trace, capsys)
    assert f"snapshots: {figures}\n" in text and "inf" not in text


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("example, extra", [
    ("heat", {}),  # deltas and key frames
    ("heat", {"dispatch_level": True, "checkpoint_every": 3}),
    ("add", {"checkpoint_every": 0}),  # unwritable inputs named by the initial state's blobs
])
def test_records_own_tally_is_what_info_reads_back(example: str, extra: dict[str, Any], tmp_path: Path) -> None:
    """``record``'s closing figures come from its own tally of the frames it wrote (reading a trace
    back took 49 ms for 1000 frames); they are exactly the totals ``info`` computes from the file."""
    from capture.recorder import RecordOptions, record
    from vkcap.commands_inspect import trace_summary
    from vkcore.exec.runner import RunOptions

    repo = Path(__file__).resolve().parent.parent
    run = RunOptions(repo / "examples" / example / "scenario.json", output=tmp_path / "out", repeat=2)
    result = record(RecordOptions(run=run, trace=tmp_path / "t.vkt", **extra), [])
    summary = trace_summary(tmp_path / "t.vkt")
    assert result.snapshots == {k: summary[k] for k in result.snapshots}
    assert set(result.snapshots) == {"snapshot_raw_bytes", "snapshot_stored_bytes", "ratio", "dedup_saved_bytes",
                                     "snapshot_deltas"}
    assert result.snapshots["snapshot_raw_bytes"] > 0 and result.file_bytes == summary["file_bytes"]
    if example == "heat" and not extra:
        assert result.snapshots["snapshot_deltas"] > 0


@pytest.mark.device
def test_info_text_shows_checkpoints_and_dispatch_level(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _info(recorded, capsys)
    assert f"frames     {FRAMES} in 1 pass(es); checkpoints at initial state, 1; dispatch-level snapshots: yes\n" in text
    summary = json.loads(_info(recorded, capsys, "--json"))
    q = summary["resources"]["q"]
    assert (q["snapshots"], q["dispatch_snapshots"], q["unique"]) == (2 * FRAMES, FRAMES, 1)
    assert summary["dispatch_level"] is True


def _info(trace: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    capsys.readouterr()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"  # rich wraps at the terminal's width
    try:
        assert cli("info", trace, *flags) == 0
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# 6. export's messages name the flag and the file


@pytest.mark.device
def test_export_messages_name_the_flag_and_the_file(recorded: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e.npy"
    assert cli("export", recorded, "--frame", 15, "--resource", "q", "-o", out) == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {recorded}: --frame: no frame 15 in this trace (frames: 0-2)"
    assert cli("export", recorded, "--frame", 0, "--resource", "nope", "-o", out) == EXIT_BAD_INPUT
    assert error_line(capsys) == (f"vkcap: error: {recorded}: --resource: 'nope' is not a resource of this trace "
                                  "(its resources: p, q, r)")
    assert cli("export", recorded, "--frame", 0, "--resource", "q", "-o", tmp_path) == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {tmp_path}: -o: is a folder, not a file"
    assert cli("export", recorded, "--frame", 0, "--resource", "q", "-o", tmp_path / "e.txt") == EXIT_BAD_INPUT
    assert error_line(capsys) == f"vkcap: error: {tmp_path / 'e.txt'}: -o: a buffer exports as .npy"
    assert listing(tmp_path) == []


def test_timeout_error_names_the_flag(scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("record", scenario, "--timeout", 0, "-o", tmp_path / "t.vkt") == EXIT_BAD_INPUT
    assert error_line(capsys) == "vkcap: error: --timeout: must be a number of seconds > 0 and at most 604800 (7 days), got 0.0"
