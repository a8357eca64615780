"""``vkcap extract --segment K`` and ``bisect --extract`` of a graph segment: one segment of a GRAPH ->
COMPUTE -> GRAPH ``dispatch_vgf`` (examples/graph_custom: a 1x1 convolution, a custom shader, a max-pool)
as a scenario of its own, a VGF holding that segment alone, which vkcap and ARM's reference runner both
run, starting from the state right before the segment and writing, byte for byte, what the trace recorded
right after it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.needs import module

from tests.builders import ScenarioBuilder, vkcap
from tests.test_extract import TRACES, assert_reproduces
from vkcore.graphs.vgf import ModuleType, read_vgf

pytestmark = pytest.mark.device

module("vgfpy", "ai-ml-sdk-vgf-library (vgfpy, CPython 3.11) is not installed")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "graph_custom"
MODULES = ["graph_partition_0", "graph_partition_1", "graph_partition_2"]
FRAMES = 3
COMMAND = 3 * (FRAMES - 1) + 1  # the dispatch_vgf of the last frame (per frame: step, dispatch_vgf, boundary)

# x <- 0.75 x + 0.125, in place: each frame's graph sees another x.
STEP = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> X;
void main() {
    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;
    float x;
    tensorReadARM(X, uint[](0, h, w, c), x);
    tensorWriteARM(X, uint[](0, h, w, c), x * 0.75 + 0.125);
}
"""
# The example's hard-swish, scaled by a specialization constant, plus a push constant: substituted for the
# graph's custom shader module.
HARDSWISH = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 0) const float GAIN = 1.0;
layout(push_constant) uniform PC { float bias; } pc;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> X;
layout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;
void main() {
    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;
    float x;
    tensorReadARM(X, uint[](0, h, w, c), x);
    tensorWriteARM(Y, uint[](0, h, w, c), GAIN * (x * clamp(x + 3.0, 0.0, 6.0) / 6.0) + pc.bias);
}
"""
GAIN, BIAS = 0.5, 0.25


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 frames of: step x, the example's graph (its custom shader substituted by HARDSWISH, with push and
    specialization constants) from x to y; recorded with --dispatch-level (a snapshot after each segment)."""
    root = tmp_path_factory.mktemp("segments")
    b = ScenarioBuilder(root / "scenario")
    shutil.copy(EXAMPLE / "graph_custom.vgf", b.root / "graph_custom.vgf")
    b.shader("step", STEP).shader("hs", HARDSWISH)
    b.raw("bias", np.array([BIAS], np.float32))
    b.resources.insert(0, {"graph": {
        "uid": "g", "src": "graph_custom.vgf", "push_constants_size": 4,
        "shader_substitutions": [{"shader_ref": "hs", "target": MODULES[1]}],
        "specialization_constants_map": [{"shader_target": MODULES[1], "specialization_constants": [{"id": 0, "value": GAIN}]}],
    }})
    b.resource("tensor", uid="x", dims=[1, 4, 4, 4], format="VK_FORMAT_R32_SFLOAT", shader_access="readwrite",
               src=b.npy("x.npy", np.load(EXAMPLE / "x.npy")))
    b.resource("tensor", uid="y", dims=[1, 2, 2, 8], format="VK_FORMAT_R32_SFLOAT", shader_access="writeonly", dst="y.npy")
    for f in range(FRAMES):
        b.dispatch("step", [(0, 0, "x")], [4, 4, 4])
        b.commands.append({"dispatch_vgf": {
            "graph_ref": "g", "bindings": [{"set": 0, "id": 0, "resource_ref": "x"}, {"set": 0, "id": 3, "resource_ref": "y"}],
            "push_constants": [{"push_data_ref": "bias", "shader_target": MODULES[1]}]}})
        b.boundary(["y"], f)
    trace = root / "t.vkt"
    proc = vkcap("record", b.save(), "-o", trace, "--output", root / "out", "--dispatch-level", "--checkpoint-every", "2")
    assert proc.returncode == 0, proc.stderr
    return trace


def uids(folder: Path, scenario: str = "scenario.json") -> list[str]:
    return [next(iter(r.values()))["uid"] for r in json.loads((folder / scenario).read_text())["resources"]]


def hardswish(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return x * np.clip(x + np.float32(3), 0, 6).astype(np.float32) / np.float32(6)


# segment -> (the extract's resources, where its inputs come from)
SEGMENTS: dict[int, tuple[list[str], dict[str, str]]] = {
    0: (["g", "x", "g_intermediate_2"], {"x": "matches", "g_intermediate_2": "zeros"}),
    1: (["g", "g_intermediate_2", "g_intermediate_3", "bias"], {"g_intermediate_2": "matches", "g_intermediate_3": "unrecorded"}),
    2: (["g", "g_intermediate_3", "y"], {"g_intermediate_3": "matches", "y": "unrecorded"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("segment", sorted(SEGMENTS))
def test_each_segment_extracts_alone_and_reproduces(recorded: Path, segment: int, tmp_path: Path) -> None:
    """Segment K of the last frame's graph: a VGF of that segment alone (its module, the resources it
    binds, the graph's constant with its id), a scenario of only the tensors it binds (the intermediates
    as tensors), its inputs as the replay left them after segment K - 1 (checked against the recording),
    and both runners write what the recording holds after segment K."""
    out = tmp_path / "seg"
    proc = vkcap("extract", recorded, "--frame", str(FRAMES - 1), "--command", str(COMMAND), "--segment", str(segment), "-o", out)
    assert proc.returncode == 0, proc.stderr
    resources, inputs = SEGMENTS[segment]
    assert uids(out) == resources
    meta = json.loads((out / "vkcap.json").read_text())
    assert meta["inputs"] == inputs
    written = {0: "g_intermediate_2", 1: "g_intermediate_3", 2: "y"}[segment]
    assert meta["expected"] == {written: f"the snapshot after segment {segment} of commands[{COMMAND}]"}
    assert (meta["segment"]["index"], meta["segment"]["module"]) == (segment, MODULES[segment])
    assert_reproduces(out, tmp_path)

    scenario = json.loads((out / "scenario.json").read_text())
    (command,) = scenario["commands"]
    assert list(command) == ["dispatch_vgf"] and "shader_substitutions" not in json.dumps(scenario)
    vgf = read_vgf(out / "files" / f"graph_custom.segment{segment}.vgf")
    original = read_vgf(EXAMPLE / "graph_custom.vgf")
    (seg,) = vgf.segments
    was = original.segments[segment]
    assert (seg.name, seg.type, vgf.module_of(seg).name) == (was.name, was.type, MODULES[segment])
    assert [[(b.binding, vgf.resources[b.resource_index].shape) for b in d.bindings] for d in seg.descriptor_sets] == [
        [(b.binding, original.resources[b.resource_index].shape) for b in d.bindings] for d in was.descriptor_sets]
    if seg.type is ModuleType.GRAPH:  # the data graph module as it was, its constants with their ids
        assert vgf.module_of(seg).code == original.module_of(was).code
        assert [(c.graph_constant_ids, c.read()) for c in vgf.constants] == [
            (original.constants[cb.constant_index].graph_constant_ids, original.constants[cb.constant_index].read())
            for cb in was.constant_bindings]
        return
    # the compute segment: the substituted shader's SPIR-V in the VGF, its constants in the scenario
    assert seg.dispatch_shape == was.dispatch_shape and vgf.constants == ()
    graph = scenario["resources"][0]["graph"]
    assert graph == {"uid": "g", "src": "files/graph_custom.segment1.vgf", "push_constants_size": 4,
                     "specialization_constants_map": [{"shader_target": MODULES[1],
                                                       "specialization_constants": [{"id": 0, "value": GAIN}]}]}
    assert command["dispatch_vgf"]["push_constants"] == [{"push_data_ref": "bias", "shader_target": MODULES[1]}]
    assert (out / "shaders" / "source" / "hs.comp").read_text() == HARDSWISH
    x = np.load(out / "inputs" / "g_intermediate_2.npy")
    np.testing.assert_allclose(np.load(out / "expected" / "g_intermediate_3.npy"),
                               np.float32(GAIN) * hardswish(x) + np.float32(BIAS), rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_a_glsl_module_runs_as_vkcap_compiled_it(tmp_path: Path) -> None:
    """The example as it is (its custom shader is GLSL in the VGF; the frame's first dispatch): segment 1
    carries the SPIR-V vkcap compiled, its source beside it, and reproduces the recording."""
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", EXAMPLE / "scenario.json", "-o", trace, "--output", tmp_path / "rec", "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "seg"
    proc = vkcap("extract", trace, "--frame", "0", "--command", "0", "--segment", "1", "-o", out)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "vkcap.json").read_text())
    assert meta["segment"]["code"] == "the module's GLSL, compiled to SPIR-V as vkcap compiles it"
    assert meta["segment"]["intermediates"] == {"graph_custom_intermediate_2": "graph_custom/intermediate_2",
                                                "graph_custom_intermediate_3": "graph_custom/intermediate_3"}
    assert (out / "shaders" / "source" / f"{MODULES[1]}.comp").read_text() == read_vgf(
        EXAMPLE / "graph_custom.vgf").modules[1].code
    assert assert_reproduces(out, tmp_path) == {
        "graph_custom_intermediate_3": "the snapshot after segment 1 of commands[0]"}
    readme = (out / "README.md").read_text()
    assert readme.startswith(f"# segment 1 ({MODULES[1]}) of commands[0] of frame 0 of t.vkt")
    # the example's golden trace has no snapshots between segments: the last segment's output is the
    # frame's boundary snapshot, its input read from a replay
    out = tmp_path / "golden"
    proc = vkcap("extract", TRACES / "graph_custom.vkt", "--frame", "0", "--command", "0", "--segment", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "vkcap.json").read_text())["inputs"] == {"graph_custom_intermediate_3": "unrecorded",
                                                                       "y": "unrecorded"}
    assert assert_reproduces(out, tmp_path / "golden-runs") == {
        "y": "the boundary snapshot of frame 0 (no later command of the frame writes it)"}


@pytest.mark.slow
def test_bisect_extracts_the_divergent_segment(recorded: Path, tmp_path: Path) -> None:
    """bisect with the substituted shader replaced names segment 1 of the first graph dispatch and
    extracts that segment: scenario.recorded.json reproduces the recording, and scenario.json, the
    replacement substituted for the module on its command, shows the divergence bisect reported, in the
    same elements."""
    changed = tmp_path / "changed.comp"
    changed.write_text(HARDSWISH.replace("+ pc.bias);", "+ pc.bias + ((h == 1u && w == 2u && c == 5u) ? 0.5 : 0.0));"))
    out = tmp_path / "bug"
    report = tmp_path / "bisect.json"
    proc = vkcap("bisect", recorded, "--no-isolate", "--replace-shader", f"hs={changed}", "--json", report, "--extract", out)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert (doc["frame"], doc["command"], doc["segment"], doc["module"]) == (0, 1, 1, MODULES[1])
    meta = json.loads((out / "vkcap.json").read_text())
    assert (meta["frame"], meta["command"], meta["segment"]["index"]) == (0, 1, 1)
    assert meta["divergence"]["segment"] == f"segment 1 (module {MODULES[1]})"
    assert meta["divergence"]["replaced_shaders"] == {"hs": str(changed)}
    assert uids(out, "scenario.recorded.json") == SEGMENTS[1][0] and uids(out) == [*SEGMENTS[1][0], "hs"]
    readme = (out / "README.md").read_text()
    assert "## The divergence" in readme and f"for module `{MODULES[1]}` on its `dispatch_vgf`" in readme
    assert_reproduces(out, tmp_path, "scenario.recorded.json")
    # scenario.json substitutes the replacement for the module: the elements bisect found differ, only those
    proc = vkcap("run", out / "scenario.json", "--output", tmp_path / "changed")
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "changed" / "g_intermediate_3.npy")
    want = np.load(out / "expected" / "g_intermediate_3.npy")
    assert np.argwhere(got != want).tolist() == [[0, 1, 2, 5]] and doc["resource"]["differing"] == 1


@pytest.mark.slow
def test_bad_segment_requests_are_one_line(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "x"
    frame = ["--frame", str(FRAMES - 1)]
    cases = [
        ([*frame, "--command", str(COMMAND - 1), "--segment", "0"],
         f"vkcap: error: {recorded}: --segment 0: commands[{COMMAND - 1}] is a dispatch_compute, not a graph dispatch "
         "(dispatch_graph or dispatch_vgf): it has no segments"),
        ([*frame, "--command", str(COMMAND), "--segment", "3"],
         f"vkcap: error: {recorded}: --segment 3: graph 'g' of commands[{COMMAND}] has segments 0 to 2: "
         "0 graph_partition_0 (GRAPH), 1 graph_partition_1 (COMPUTE), 2 graph_partition_2 (GRAPH)"),
        ([*frame, "--command", str(COMMAND), "--segment", "-1"], "vkcap: error: --segment is an index >= 0, got --segment -1"),
    ]
    for flags, line in cases:
        proc = vkcap("extract", recorded, *flags, "-o", out)
        assert (proc.returncode, proc.stderr.strip()) == (2, line), flags
        assert not out.exists()
    # without ARM's VGF library: one line saying how to install it
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "vgfpy.py").write_text("raise ImportError('vgfpy hidden by the test')\n")
    proc = vkcap("extract", recorded, *frame, "--command", str(COMMAND), "--segment", "1", "-o", out,
                 env={"PYTHONPATH": str(stub)})
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        "vkcap: error: --segment writes the segment as a VGF with ARM's vgfpy, which is not installed: pip install "
        "ai-ml-sdk-vgf-library (ARM's VGF library, CPython 3.11; or pip install 'vkcap[vgf]')"))
    assert not out.exists()
