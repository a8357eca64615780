"""Record defaults that cannot collide, and a replay that says where it started (#36 item 6)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from capture.recorder import default_trace_path
from tests.builders import REPO, vkcap
from vkcap.commands_trace import replay_scope


@pytest.mark.parametrize(("scenario", "trace"), [
    ("examples/heat/scenario.json", "traces/heat.vkt"),
    ("examples/add/scenario.json", "traces/add.vkt"),
    ("scenario.json", None),  # the current folder's name
    ("models/conv.json", "traces/conv.vkt"),
    ("/scenario.json", "traces/scenario.vkt"),  # no folder name to take
])
def test_the_default_trace_is_named_after_the_folder_of_a_scenario_json(scenario: str, trace: str | None) -> None:
    expected = Path(trace) if trace else Path("traces") / f"{Path.cwd().name}.vkt"
    assert default_trace_path(Path(scenario)) == expected


@pytest.mark.slow
@pytest.mark.device
def test_recording_two_examples_without_o_gives_two_traces_and_says_when_it_replaces(tmp_path: Path) -> None:
    """Through the CLI, in a folder holding copies of two examples: heat and add go to traces/heat.vkt and
    traces/add.vkt (they used to share traces/scenario.vkt); recording add again says it replaced it, and
    heat's trace is untouched."""
    for name in ("add", "heat"):
        shutil.copytree(REPO / "examples" / name, tmp_path / "examples" / name)

    def record(name: str) -> str:
        proc = vkcap("record", f"examples/{name}/scenario.json", "--output", f"out/{name}", cwd=tmp_path,
                     env={"PYTHONPATH": str(REPO)})  # this checkout's vkcap, from another folder
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    first = record("add")
    assert "into traces/add.vkt:" in first and "replaced" not in first
    record("heat")
    heat = (tmp_path / "traces" / "heat.vkt").read_bytes()
    again = record("add")
    assert "into traces/add.vkt (replaced the trace that was there): " in again
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["add.vkt", "heat.vkt"]
    assert hashlib.sha256((tmp_path / "traces" / "heat.vkt").read_bytes()).digest() == hashlib.sha256(heat).digest()


@pytest.mark.parametrize(("checkpoint", "executed", "frames", "line"), [
    (47, 3, [50], "replayed frame 50 from checkpoint 47 (the state after frame 47): ran frames 48-50, "
                  "2 of them only to reach frame 50"),
    (-1, 10, list(range(10)), "replayed frames 0-9 from the start of the trace (checkpoint -1): ran frames 0-9"),
    (7, 1, [8], "replayed frame 8 from checkpoint 7 (the state after frame 7): ran frame 8"),
    (15, 9, list(range(20, 25)), "replayed frames 20-24 from checkpoint 15 (the state after frame 15): ran frames "
                                 "16-24, 4 of them only to reach frame 20"),
])
def test_the_replay_scope_line(checkpoint: int, executed: int, frames: list[int], line: str) -> None:
    assert replay_scope(checkpoint, executed, frames) == line


@pytest.mark.device
def test_replay_says_where_it_started(tmp_path: Path) -> None:
    """Through the CLI on the golden heat trace (a checkpoint every 8 frames): frame 50 starts from
    checkpoint 47 and runs 3 frames."""
    proc = vkcap("replay", REPO / "traces" / "heat.vkt", "--frame", "50")
    assert proc.returncode == 0, proc.stderr
    assert ("vkcap: replayed frame 50 from checkpoint 47 (the state after frame 47): ran frames 48-50, 2 of them only "
            "to reach frame 50") in proc.stderr.splitlines()
