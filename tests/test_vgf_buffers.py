"""VGF compute segments over buffers: storage and uniform buffer inputs and outputs (VGF descriptor types
7 and 6, as the reference runner maps them), buffer intermediates, alias groups, explicit descriptor set
indices. The VGF files are written with ARM's VGF library (``vgfpy``), since the model converter makes
only tensor graphs; each scenario runs through vkcap and, byte for byte, ARM's reference runner, and
against numpy."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.needs import module

from tests.builders import ScenarioBuilder, vkcap
from tests.reference import assert_same_outputs, reference_runner, run_reference

pytestmark = pytest.mark.device

vgfpy = module("vgfpy", "ai-ml-sdk-vgf-library (vgfpy, CPython 3.11) is not installed")

N = 16
R32_SFLOAT = 100
STORAGE, UNIFORM = 7, 6


def spirv(root: Path, name: str, source: str) -> list[int]:
    path = root / f"{name}.comp"
    path.write_text(source)
    subprocess.run(["glslangValidator", "-V", "--target-env", "vulkan1.3", "-o", str(path.with_suffix(".spv")), str(path)],
                   check=True, capture_output=True)
    return [int(w) for w in np.frombuffer(path.with_suffix(".spv").read_bytes(), np.uint32)]


def shader(op: str, *, set_index: int = 0, uniform: bool = False) -> str:
    """``o[i] = <op of x[i]>`` over binding 0 (in) and 1 (out) of ``set_index``; with ``uniform``, binding
    2 is a uniform block ``u`` (a vec4) the op may use."""
    extra = f"layout(set = {set_index}, binding = 2) uniform U {{ vec4 u; }};\n" if uniform else ""
    return f"""#version 450
layout(local_size_x = {N}) in;
layout(set = {set_index}, binding = 0) readonly buffer I {{ float x[]; }};
layout(set = {set_index}, binding = 1) buffer O {{ float o[]; }};
{extra}void main() {{ uint i = gl_GlobalInvocationID.x; o[i] = {op}; }}
"""


@dataclass
class Model:
    """A VGF of compute segments, each ``(name, GLSL, in, out[, uniform])`` over named buffers."""

    root: Path
    encoder: Any = field(default_factory=lambda: vgfpy.CreateEncoder(275))
    resources: dict[str, Any] = field(default_factory=dict)

    def buffer(self, name: str, category: str, descriptor_type: int = STORAGE, size: int = N,
               alias_group: int | None = None) -> None:
        add = {"input": self.encoder.AddInputResource, "output": self.encoder.AddOutputResource,
               "intermediate": self.encoder.AddIntermediateResource}[category]
        self.resources[name] = add(descriptor_type, R32_SFLOAT, [size], [4], alias_group)

    def segment(self, name: str, source: str, inputs: list[str], output: str, set_index: int | None = None) -> None:
        module = self.encoder.AddModule(vgfpy.ModuleType.Compute, name, "main", spirv(self.root, name, source))
        slots = [self.encoder.AddBindingSlot(k, self.resources[r]) for k, r in enumerate([inputs[0], output, *inputs[1:]])]
        ds = (self.encoder.AddDescriptorSetInfo(slots) if set_index is None else
              self.encoder.AddDescriptorSetInfo(slots, set_index))
        self.encoder.AddSegmentInfo(module, name, [ds], [slots[0], *slots[2:]], [slots[1]], [], [1, 1, 1])

    def save(self, inputs: list[tuple[int, str]], outputs: list[tuple[int, str]]) -> Path:
        self.encoder.AddModelSequenceInputsOutputs(
            [self.encoder.AddBindingSlot(k, self.resources[r]) for k, r in inputs], [r for _, r in inputs],
            [self.encoder.AddBindingSlot(k, self.resources[r]) for k, r in outputs], [r for _, r in outputs])
        self.encoder.Finish()
        path = self.root / "model.vgf"
        with open(path, "wb") as f:
            self.encoder.WriteTo(f)
        return path


def scenario(b: ScenarioBuilder, x: np.ndarray, bindings: list[tuple[int, int, str]], outputs: list[str],
             extra: list[dict[str, Any]] = ()) -> Path:  # type: ignore[assignment]
    b.resources.append({"graph": {"uid": "g", "src": "model.vgf"}})
    b.buffer("x", x.nbytes, x, shader_access="readonly")
    for name in outputs:
        b.buffer(name, N * 4, dst=f"{name}.npy", shader_access="writeonly")
    b.resources += list(extra)
    b.commands.append({"dispatch_vgf": {"graph_ref": "g", "bindings": [
        {"set": s, "id": i, "resource_ref": r} for s, i, r in bindings]}})
    return b.save()


def run_both(scenario_path: Path, tmp_path: Path, outputs: list[str]) -> dict[str, np.ndarray]:
    proc = vkcap("run", scenario_path, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    names = [f"{o}.npy" for o in outputs]
    assert_same_outputs(scenario_path, tmp_path / "ours", tmp_path, names)
    return {o: np.load(tmp_path / "ours" / f"{o}.npy").view(np.float32) for o in outputs}


X = np.arange(N, dtype=np.float32) - 4


def double_then_increment(root: Path) -> Path:
    """in -> double -> (intermediate buffer) -> increment -> out."""
    m = Model(root)
    m.buffer("in", "input")
    m.buffer("mid", "intermediate")
    m.buffer("out", "output")
    m.segment("double", shader("x[i] * 2.0"), ["in"], "mid")
    m.segment("inc", shader("x[i] + 1.0"), ["mid"], "out")
    return m.save([(0, "in")], [(1, "out")])


@pytest.mark.slow
@pytest.mark.reference
def test_a_chain_of_compute_segments_over_storage_buffers(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """in -> double -> (intermediate buffer) -> increment -> out."""
    double_then_increment(builder.root)
    got = run_both(scenario(builder, X, [(0, 0, "x"), (0, 1, "y")], ["y"]), tmp_path, ["y"])
    np.testing.assert_array_equal(got["y"], X * 2 + 1)


@pytest.mark.slow
@pytest.mark.reference
def test_a_uniform_buffer_input(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A model input of descriptor type 6 is bound as a uniform buffer, as the shader declares it. The
    reference binds it as a storage buffer: its pipeline layout contradicts the shader (the validation
    layer names VUID-VkComputePipelineCreateInfo-layout-00703) and lavapipe writes zeros."""
    m = Model(builder.root)
    m.buffer("in", "input")
    m.buffer("scale", "input", UNIFORM, size=4)
    m.buffer("out", "output")
    m.segment("scale", shader("x[i] * u.x + u.y", uniform=True), ["in", "scale"], "out")
    m.save([(0, "in"), (2, "scale")], [(1, "out")])
    u = np.array([3, 0.5, 0, 0], np.float32)
    path = scenario(builder, X, [(0, 0, "x"), (0, 1, "y"), (0, 2, "u")], ["y"],
                    [{"buffer": {"uid": "u", "size": 16, "src": builder.npy("u.npy", u), "shader_access": "readonly"}}])
    proc = vkcap("run", path, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "y.npy").view(np.float32), X * 3 + 0.5)
    if reference_runner() is not None:  # a deliberate difference (README): the reference's layout is invalid
        ref = run_reference(path, tmp_path / "reference", validate=True)
        assert "VUID-VkComputePipelineCreateInfo-layout-00703" in ref.stdout + ref.stderr
        assert "uses type VK_DESCRIPTOR_TYPE_STORAGE_BUFFER but expected VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER" in (
            ref.stdout + ref.stderr)


@pytest.mark.slow
@pytest.mark.reference
def test_intermediates_in_one_alias_group_share_memory(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Two intermediates of one alias group, the first dead before the second is written: both results
    come out right (and identical to the reference's)."""
    m = Model(builder.root)
    m.buffer("in", "input")
    m.buffer("m1", "intermediate", alias_group=0)
    m.buffer("m2", "intermediate", alias_group=0)
    m.buffer("out1", "output")
    m.buffer("out2", "output")
    m.segment("double", shader("x[i] * 2.0"), ["in"], "m1")
    m.segment("inc", shader("x[i] + 1.0"), ["m1"], "out1")
    m.segment("triple", shader("x[i] * 3.0"), ["in"], "m2")
    m.segment("dec", shader("x[i] - 1.0"), ["m2"], "out2")
    m.save([(0, "in")], [(1, "out1"), (2, "out2")])
    path = scenario(builder, X, [(0, 0, "x"), (0, 1, "y1"), (0, 2, "y2")], ["y1", "y2"])
    got = run_both(path, tmp_path, ["y1", "y2"])
    np.testing.assert_array_equal(got["y1"], X * 2 + 1)
    np.testing.assert_array_equal(got["y2"], X * 3 - 1)


@pytest.mark.slow
@pytest.mark.reference
def test_explicit_descriptor_set_indices(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A segment whose descriptor set info names set 2: the shader and the scenario use set 2."""
    m = Model(builder.root)
    m.buffer("in", "input")
    m.buffer("out", "output")
    m.segment("negate", shader("-x[i]", set_index=2), ["in"], "out", set_index=2)
    m.save([(0, "in")], [(1, "out")])
    got = run_both(scenario(builder, X, [(2, 0, "x"), (2, 1, "y")], ["y"]), tmp_path, ["y"])
    np.testing.assert_array_equal(got["y"], -X)


@pytest.mark.slow
def test_buffer_intermediates_are_snapshotted_and_replayed(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """With --dispatch-level, each segment's output (the intermediate buffer too) is a snapshot, and the
    trace replays identical."""
    double_then_increment(builder.root)
    path = scenario(builder, X, [(0, 0, "x"), (0, 1, "y")], ["y"])
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", path, "-o", trace, "--output", tmp_path, "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    replay = vkcap("replay", trace, "--json", tmp_path / "r.json")
    assert replay.returncode == 0, replay.stderr
    frame = json.loads((tmp_path / "r.json").read_text())["frames"][0]
    assert [(d["status"]) for d in frame["dispatches"]] == ["identical", "identical"], frame["dispatches"]


@pytest.mark.slow
@pytest.mark.parametrize("case, message", [
    ("a tensor for a buffer",
     "commands[0].dispatch_vgf.bindings[0].resource_ref: 'x' is a tensor, but graph 'g' input 'in' (binding 0) is a "
     "buffer (VK_FORMAT_R32_SFLOAT [16])"),
    ("a buffer too small",
     "commands[0].dispatch_vgf.bindings[1]: buffer 'y' holds 32 bytes but graph 'g' output 'out' (binding 1) is a "
     "buffer of 64 bytes"),
])
def test_bad_buffer_bindings_are_one_line(builder: ScenarioBuilder, tmp_path: Path, case: str, message: str) -> None:
    m = Model(builder.root)
    m.buffer("in", "input")
    m.buffer("out", "output")
    m.segment("negate", shader("-x[i]"), ["in"], "out")
    m.save([(0, "in")], [(1, "out")])
    path = scenario(builder, X, [(0, 0, "x"), (0, 1, "y")], ["y"])
    doc = json.loads(path.read_text())
    if case == "a tensor for a buffer":
        doc["resources"][1] = {"tensor": {"uid": "x", "dims": [N], "format": "VK_FORMAT_R32_SFLOAT",
                                          "src": builder.npy("xt.npy", X), "shader_access": "readonly"}}
    else:
        doc["resources"][2]["buffer"]["size"] = 32
    path.write_text(json.dumps(doc))
    proc = vkcap("run", path, "--output", tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {path}: {message}")
