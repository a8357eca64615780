"""Every command kind of today's format in one scenario: each frame runs a compute dispatch, a fragment
pass, a SPIR-V graph, a VGF graph and an optical flow: every output byte for byte the reference's (on
lavapipe and on the H100), recorded, replayed, and a fragment shader replaced from frame 3 on is found
by bisect at that frame and command."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, load_output, vkcap
from tests.reference import assert_same_outputs
from tests.test_fragment import FULL_SCREEN, H, W, draw
from tests.test_optical_flow import optical_flow, pair
from tests.test_run_graphs import DIMS, F32, TOSA
from tests.vkharness import convert_model
from vkcore.graphs.vgf import read_vgf

pytestmark = pytest.mark.device

FRAMES = 5
PER_FRAME = 6  # count, fragment pass, SPIR-V graph, VGF graph, optical flow, boundary
ACCUMULATE = """#version 450
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer N { uint n; };
void main() { ivec2 p = ivec2(gl_FragCoord.xy); a[p.y * 8 + p.x] += float(p.x + p.y) + EXTRA; }
"""


@pytest.fixture(scope="module")
def add_vgf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_model(TOSA / "add.mlir", tmp_path_factory.mktemp("mixed") / "add.vgf")


def mixed_scenario(b: ScenarioBuilder, vgf: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    b.shader("vs", FULL_SCREEN, file="vs.vert", stage="vertex")
    b.shader("fs", ACCUMULATE.replace("EXTRA", "0.0"), file="fs.frag", stage="fragment")
    b.shader("count", "#version 450\nlayout(local_size_x = 1) in;\nlayout(set = 0, binding = 0) buffer N { uint n; };"
                      "\nvoid main() { n += 1u; }\n")
    b.buffer("acc", W * H * 4, np.zeros(W * H, np.float32), dst="acc.npy").buffer("n", 4, np.zeros(1, np.uint32))
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(DIMS).astype(np.float32) for _ in range(2))
    for uid, data in (("x", x), ("y", y)):
        b.resources.append({"tensor": {"uid": uid, "dims": DIMS, "format": F32, "shader_access": "readonly",
                                       "src": b.npy(f"{uid}.npy", data)}})
    for uid in ("from_spirv", "from_vgf"):
        b.resources.append({"tensor": {"uid": uid, "dims": DIMS, "format": F32, "shader_access": "writeonly",
                                       "dst": f"{uid}.npy"}})
    module = read_vgf(vgf).modules[0]
    b.file("graph.spv", module.code)
    b.resources.append({"shader": {"uid": "add_graph", "src": "graph.spv", "type": "SPIR-V", "entry": module.entry_point}})
    shutil.copy(vgf, b.root / "add.vgf")
    b.resources.append({"graph": {"uid": "add_vgf", "src": "add.vgf"}})
    pair(b, 64, 64)
    flow = optical_flow(b, 64, 64, 8)
    tensors = [{"set": 0, "id": i, "resource_ref": uid} for i, uid in enumerate(("x", "y"))]
    for k in range(FRAMES):
        b.dispatch("count", [(0, 0, "n")], [1, 1, 1])
        draw(b, render_extent=[W, H], bindings=[{"set": 0, "id": 0, "resource_ref": "acc"},
                                                {"set": 0, "id": 1, "resource_ref": "n"}])
        b.commands.append({"dispatch_spirv_graph": {"graph_ref": "add_graph", "bindings": [
            *tensors, {"set": 0, "id": 2, "resource_ref": "from_spirv"}]}})
        b.commands.append({"dispatch_graph": {"graph_ref": "add_vgf", "bindings": [
            *tensors, {"set": 0, "id": 2, "resource_ref": "from_vgf"}]}})
        b.commands.append(flow)
        b.boundary(["acc", "from_spirv", "from_vgf", "flow"], k)
    return b.save(), x, y


@pytest.mark.slow
def test_every_kind_recorded_replayed_and_bisected(builder: ScenarioBuilder, tmp_path: Path, add_vgf: Path) -> None:
    scenario, x, y = mixed_scenario(builder, add_vgf)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path, "--checkpoint-every", "2", "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    assert_same_outputs(scenario, tmp_path, tmp_path / "ref", ["acc.npy", "from_spirv.npy", "from_vgf.npy", "flow.dds"])
    rows, cols = np.mgrid[0:H, 0:W]
    np.testing.assert_array_equal(load_output(tmp_path / "acc.npy", np.float32), ((rows + cols) * FRAMES).reshape(-1))
    for name in ("from_spirv", "from_vgf"):
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), x + y)
    replay = vkcap("replay", trace, "--json", tmp_path / "replay.json")
    assert replay.returncode == 0, replay.stderr
    frames = json.loads((tmp_path / "replay.json").read_text())["frames"]
    assert [f["diverged"] for f in frames] == [False] * FRAMES
    changed = builder.file("changed.frag", ACCUMULATE.replace(
        "EXTRA", "((n >= 4u && p.x == 5 && p.y == 2) ? 0.5 : 0.0)"))
    report = tmp_path / "bisect.json"
    proc = vkcap("bisect", trace, "--replace-shader", f"fs={changed}", "--json", report)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert (doc["frame"], doc["command"]) == (3, 3 * PER_FRAME + 1)  # the fragment pass of frame 3
