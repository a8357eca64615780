"""``frame_boundary`` (the reference runner's preferred name) and the deprecated ``mark_boundary``: the
same frames, frame ids numbered in order unless given, the reference's deprecation warnings for a
user's scenario (not for a trace's), and outputs byte-identical with the reference runner."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ADD_FLOAT, ScenarioBuilder, load_output, vkcap
from tests.reference import reference_runner, run_reference

pytestmark = pytest.mark.device


def counting(b: ScenarioBuilder, boundary: str, frame_ids: list[int | None]) -> Path:
    """Frame k adds a to c (c accumulates); each frame ends with ``boundary`` naming c."""
    b.shader("add", ADD_FLOAT.replace("c[i] = a[i] + b[i]", "c[i] = c[i] + a[i]"))
    b.buffer("a", 16, np.arange(4, dtype=np.float32)).buffer("b", 16, np.zeros(4, np.float32))
    b.buffer("c", 16, np.zeros(4, np.float32), dst="c.npy")
    for frame_id in frame_ids:
        b.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1])
        body: dict[str, object] = {"resources": ["c"]}
        if frame_id is not None:
            body["frame_id"] = frame_id
        b.commands.append({boundary: body})
    return b.save()


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("boundary, frame_ids, warnings", [
    ("frame_boundary", [None, None, None], []),
    ("mark_boundary", [None, None, None], ["commands[1].mark_boundary: 'mark_boundary' is deprecated; use "
                                           "'frame_boundary' (and 2 more)"]),
    ("frame_boundary", [7, 7, 9], ["commands[1].frame_boundary.frame_id: setting frame ids by hand is deprecated; "
                                   "without them frames are numbered in order (and 2 more)"]),
])
def test_boundaries_frame_ids_and_deprecations(builder: ScenarioBuilder, tmp_path: Path, boundary: str,
                                               frame_ids: list[int | None], warnings: list[str]) -> None:
    scenario = counting(builder, boundary, frame_ids)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[:-1] == [f"vkcap: {scenario}: {w}" for w in warnings]
    np.testing.assert_array_equal(load_output(tmp_path / "ours" / "c.npy", np.float32), np.arange(4) * 3)
    report = tmp_path / "r.json"
    replay = vkcap("replay", trace, "--json", report)
    assert replay.returncode == 0 and "deprecated" not in replay.stderr, replay.stderr
    ids = [f["frame_id"] for f in json.loads(report.read_text())["frames"]]
    assert ids == [k if f is None else f for k, f in enumerate(frame_ids)]
    if reference_runner() is not None:
        ref = run_reference(scenario, tmp_path / "reference")
        assert ref.returncode == 0, ref.stderr[-2000:]
        assert (tmp_path / "ours" / "c.npy").read_bytes() == (tmp_path / "reference" / "c.npy").read_bytes()
        said = [line.split("WARNING: ", 1)[1] for line in (ref.stdout + ref.stderr).splitlines() if "WARNING: " in line]
        assert ("Command 'mark_boundary' is deprecated; use 'frame_boundary' instead." in said) == (boundary == "mark_boundary")
        assert ("Manual setting of frameID is deprecated" in said) == any(f is not None for f in frame_ids)
