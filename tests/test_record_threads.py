"""The snapshot work of a recording spread over threads (``--record-threads``): the trace's bytes do not
depend on how many threads did it, and the recording reports its throughput with their number."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capture.recorder import RecordOptions, record
from tests.builders import ScenarioBuilder
from vkcap.cli import main
from vkcore.exec.runner import RunOptions

BIG = 1 << 20  # floats: a 4 MiB field, large enough for parallel planes and residual chunks
SMALL = 64 << 10  # floats: a 256 KiB counter that changes in one element of 64 (a SPARSE residual)
FRAMES = 12
# field += inc * 1e-4 (every element changes a little: LINEAR residuals, planes); counter[i] += 1 for
# one element of 64 (mostly zero residuals: SPARSE); noise replaced by a hash of itself (no delta pays)
SHADER = """#version 450
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer I { float inc[]; };
layout(set = 0, binding = 1) buffer F { float field[]; };
layout(set = 0, binding = 2) buffer C { uint counter[]; };
layout(set = 0, binding = 3) buffer N { uint noise[]; };
void main() {
    uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x) + gl_GlobalInvocationID.x;
    if (i < uint(field.length())) field[i] += inc[i] * 1e-4;
    if (i < uint(counter.length()) && i % 64u == 0u) counter[i] += 1u;
    if (i < uint(noise.length())) { uint x = noise[i] * 2654435761u + i; x ^= x << 13; x ^= x >> 17; noise[i] = x; }
}
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = ScenarioBuilder(tmp_path_factory.mktemp("threads"))
    rng = np.random.default_rng(39)
    b.shader("step", SHADER)
    b.buffer("inc", BIG * 4, rng.uniform(0, 1, BIG).astype(np.float32), shader_access="readonly")
    b.buffer("field", BIG * 4, (np.sin(np.linspace(0, 60, BIG, dtype=np.float32)) * 20 + 100).astype(np.float32))
    b.buffer("counter", SMALL * 4, np.zeros(SMALL, np.uint32))
    b.buffer("noise", SMALL * 4, rng.integers(0, 1 << 32, SMALL, dtype=np.uint32))
    groups = BIG // 256
    for frame in range(FRAMES):
        b.dispatch("step", [(0, 0, "inc"), (0, 1, "field"), (0, 2, "counter"), (0, 3, "noise")],
                   [1024, groups // 1024, 1])
        b.boundary(["field", "counter", "noise"] if frame % 3 else ["field", "counter"], frame)
    return b.save()


@pytest.mark.slow
def test_a_trace_has_the_same_bytes_whatever_the_number_of_record_threads(scenario: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # the header's creation time
    traces = {}
    for threads in (1, 2, 8):
        trace = tmp_path / f"t{threads}.vkt"
        options = RecordOptions(run=RunOptions(scenario, output=tmp_path / "out"), trace=trace,
                                checkpoint_every=5, record_threads=threads)
        result = record(options, ["vkcap", "record"])
        assert result.frames == FRAMES
        assert result.throughput is not None and result.throughput.threads == threads
        traces[threads] = trace.read_bytes()
    assert len(traces[1]) > 4 * BIG  # several MiB: the initial state and the frames' snapshots
    assert traces[2] == traces[1]
    assert traces[8] == traces[1]


def test_record_json_reports_the_throughput_and_its_thread_count(scenario: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    assert main(["record", str(scenario), "-o", str(tmp_path / "t.vkt"), "--output", str(tmp_path / "out"),
                 "--record-threads", "3", "--json", str(summary)]) == 0
    doc = json.loads(summary.read_text())
    assert doc["frames"] == FRAMES and doc["file_bytes"] == (tmp_path / "t.vkt").stat().st_size
    rate = doc["throughput"]
    assert rate["threads"] == 3
    # every boundary's snapshots (field, counter; noise every third frame but the first of three)
    captured = FRAMES * (BIG + SMALL) * 4 + sum(1 for f in range(FRAMES) if f % 3) * SMALL * 4
    assert rate["captured_bytes"] == captured
    assert 0 < rate["changed_bytes"] <= captured
    assert rate["seconds"] > 0 and rate["captured_gb_s"] == pytest.approx(captured / rate["seconds"] / 1e9)
