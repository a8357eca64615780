"""A hung (here: very slow) shader: ``--timeout`` stops the run with one clear error, and a recording keeps every frame
completed before the hung one. Run in subprocesses: the hung GPU work is left to the process's exit."""
from __future__ import annotations

import pytest

import json
import time
from pathlib import Path

import numpy as np

from tests.builders import ScenarioBuilder, vkcap

pytestmark = pytest.mark.device

ACCUMULATE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint acc[]; };
void main() { acc[gl_GlobalInvocationID.x] += 1u; }
"""
# Hours of work for a CPU driver: 2**34 invocations (lavapipe ends any loop after 65535 iterations, so the
# time comes from the dispatch's size); the atomics keep the work from being optimised away. glslang decorates
# a "coherent volatile" block's members Coherent twice: vkcap drops the repeats from what it compiles
# (test_spin_runs_where_it_is_not_hung).
SPIN = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) coherent volatile buffer F { uint flag; uint counter; };
void main() { for (uint i = 0u; i < 64u && atomicAdd(flag, 0u) == 0u; i++) { atomicAdd(counter, 1u); } }
"""


def hung_scenario(b: ScenarioBuilder) -> Path:
    b.shader("acc", ACCUMULATE).shader("spin", SPIN)
    b.buffer("acc_buf", 64, np.zeros(16, np.uint32)).buffer("flags", 8, np.zeros(2, np.uint32))
    for f in range(3):
        b.dispatch("acc", [(0, 0, "acc_buf")], [16]).boundary(["acc_buf"], f)
    b.dispatch("spin", [(0, 0, "flags")], [65535, 65535, 4]).boundary(["acc_buf"], 3)
    return b.save()


@pytest.mark.slow
def test_hung_shader_times_out_and_the_recording_keeps_earlier_frames(builder: ScenarioBuilder, tmp_path: Path) -> None:
    trace = tmp_path / "t.vkt"
    t0 = time.monotonic()
    proc = vkcap("record", hung_scenario(builder), "-o", trace, "--timeout", "2", timeout=120)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "vkcap: error: frame 3 did not finish within 2 s (--timeout): a hung or very slow shader; "
        "the frames before it completed"
    )
    info = json.loads(vkcap("info", trace, "--json").stdout)
    assert (info["frames"], info["status"], info["recovered"]) == (3, "failed", False)
    exported = tmp_path / "f2.npy"
    assert vkcap("export", trace, "--frame", "2", "--resource", "acc_buf", "-o", exported).returncode == 0
    np.testing.assert_array_equal(np.load(exported).view(np.uint32), np.full(16, 3, np.uint32))


@pytest.mark.slow
def test_hung_shader_times_out_in_run(builder: ScenarioBuilder, tmp_path: Path) -> None:
    proc = vkcap("run", hung_scenario(builder), "--output", tmp_path, "--timeout", "1", timeout=120)
    assert proc.returncode == 1
    assert "frame 3 did not finish within 1 s (--timeout)" in proc.stderr
    assert not list(tmp_path.glob("*.npy"))


@pytest.mark.slow
def test_spin_runs_where_it_is_not_hung(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """SPIN as ARM's reference runs it (``coherent volatile``, valid GLSL): with its flag already set, each
    invocation adds nothing and leaves at once; the recording replays identical (its stored module, the
    one that ran, is valid SPIR-V as stored)."""
    builder.shader("spin", SPIN).buffer("flags", 8, np.array([1, 7], np.uint32), dst="flags.npy")
    builder.dispatch("spin", [(0, 0, "flags")], [4]).boundary(["flags"], 0)
    trace = tmp_path / "spin.vkt"
    proc = vkcap("record", builder.save(), "-o", trace, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "out" / "flags.npy").view(np.uint32).tolist() == [1, 7]
    replay = vkcap("replay", trace)
    assert replay.returncode == 0, replay.stderr
