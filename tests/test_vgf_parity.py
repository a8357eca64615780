"""VGF files as ARM's tools write them, through vkcap and ARM's reference runner: byte-identical outputs.

ARM's SDK writes a buffer resource of a VGF with descriptor type 6 (its code names the constant
``DESCRIPTOR_TYPE_STORAGE_BUFFER_EXT = 6``) for buffers its shaders declare as storage buffers, and the
reference binds them as storage buffers. vkcap binds a segment's buffer as the segment's SPIR-V declares
it (the VGF's type is a hint, noted at debug level), and refuses only a real contradiction: a tensor where
the shader has a buffer, a buffer where it has a tensor.

Each model here is written with ARM's VGF library (``vgfpy``) the way ARM's tooling writes compute-only
VGFs: buffer resources of type 6, strides left empty (or packed), compute modules of SPIR-V words or with
no code (a placeholder a scenario substitutes), push constant ranges, specialization constants, alias
groups of intermediates and explicit descriptor set indices. Every scenario runs through ``vkcap run``
and (where installed) the reference, and the outputs are compared with numpy and byte for byte.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from tests.needs import missing, module

from tests.builders import ScenarioBuilder, vkcap
from tests.reference import assert_same_outputs
from vkcore.shaders.compile import tensor_glslc

pytestmark = pytest.mark.device

vgfpy = module("vgfpy", "ai-ml-sdk-vgf-library (vgfpy, CPython 3.11) is not installed")

N = 32
R32_SFLOAT = 100
DESCRIPTOR_TYPE_STORAGE_BUFFER_EXT = 6  # what ARM's SDK writes for a storage buffer
TENSOR_ARM = 1000460000
SHADER_STAGE_COMPUTE = 0x20
X = (np.arange(N, dtype=np.float32) - 7) * np.float32(0.75)


def spirv_words(root: Path, name: str, source: str) -> list[int]:
    path = root / f"{name}.comp"
    path.write_text(source)
    spv = path.with_suffix(".spv")
    if "GL_ARM_tensors" in source:  # Debian's glslang predates the extension: the reference package's glslc
        glslc = tensor_glslc()
        if glslc is None:
            missing("GL_ARM_tensors needs the glslc of ai-ml-sdk-scenario-runner")
        command = [str(glslc), "--stage", "compute", "--input", str(path), "--output", str(spv)]
    else:
        command = ["glslangValidator", "-V", "--target-env", "vulkan1.3", "-o", str(spv), str(path)]
    subprocess.run(command, check=True, capture_output=True)
    return [int(w) for w in np.frombuffer(spv.read_bytes(), np.uint32)]


def glsl(body: str, *, sets: tuple[int, int] = (0, 0), header: str = "", local: str = "local_size_x = 16") -> str:
    """``o[i] = <body>`` with ``x`` at set ``sets[0]`` binding 0 and ``o`` at set ``sets[1]`` binding 1, both
    storage buffers."""
    return f"""#version 450
layout({local}) in;
layout(set = {sets[0]}, binding = 0) readonly buffer In {{ float x[]; }};
layout(set = {sets[1]}, binding = 1) buffer Out {{ float o[]; }};
{header}
void main() {{ uint i = gl_GlobalInvocationID.x; o[i] = {body}; }}
"""


@dataclass
class ArmVgf:
    """A compute-only VGF, written as ARM's tooling writes one (``vgfpy``, descriptor type 6 buffers)."""

    root: Path
    packed_strides: bool = False  # ARM's tooling leaves a buffer's strides empty
    encoder: Any = field(default_factory=lambda: vgfpy.CreateEncoder(275))
    resources: dict[str, Any] = field(default_factory=dict)

    def buffer(self, name: str, category: str, alias_group: int | None = None,
               descriptor_type: int = DESCRIPTOR_TYPE_STORAGE_BUFFER_EXT) -> None:
        add = {"input": self.encoder.AddInputResource, "output": self.encoder.AddOutputResource,
               "intermediate": self.encoder.AddIntermediateResource}[category]
        self.resources[name] = add(descriptor_type, R32_SFLOAT, [N], [4] if self.packed_strides else [], alias_group)

    def segment(self, name: str, source: str | None, reads: str, writes: str, *, sets: tuple[int, int] | None = None,
                push_bytes: int = 0, groups: int = N // 16) -> None:
        """A compute segment reading ``reads`` at binding 0 and writing ``writes`` at binding 1; ``source``
        ``None`` is a module with no code (a scenario substitutes it); ``sets``: explicit set indices of
        the two bindings (one descriptor set info per set), else one set info with no index (set 0)."""
        if source is not None and source.startswith("glsl:"):  # the module holds its GLSL source
            module = self.encoder.AddModule(vgfpy.ModuleType.Compute, name, "main", vgfpy.ShaderType.Glsl,
                                            source.removeprefix("glsl:"))
        else:
            code = [] if source is None else spirv_words(self.root, name, source)
            module = self.encoder.AddModule(vgfpy.ModuleType.Compute, name, "main", code)
        slot_in = self.encoder.AddBindingSlot(0, self.resources[reads])
        slot_out = self.encoder.AddBindingSlot(1, self.resources[writes])
        if sets is None:
            infos = [self.encoder.AddDescriptorSetInfo([slot_in, slot_out])]
        elif sets[0] == sets[1]:
            infos = [self.encoder.AddDescriptorSetInfo([slot_in, slot_out], sets[0])]
        else:
            infos = [self.encoder.AddDescriptorSetInfo([slot_in], sets[0]),
                     self.encoder.AddDescriptorSetInfo([slot_out], sets[1])]
        ranges = [self.encoder.AddPushConstRange(SHADER_STAGE_COMPUTE, 0, push_bytes)] if push_bytes else []
        self.encoder.AddSegmentInfo(module, name, infos, [slot_in], [slot_out], [], [groups, 1, 1], ranges)

    def save(self, inputs: list[str], outputs: list[str], first_output_binding: int = 1) -> Path:
        self.encoder.AddModelSequenceInputsOutputs(
            [self.encoder.AddBindingSlot(k, self.resources[r]) for k, r in enumerate(inputs)], list(inputs),
            [self.encoder.AddBindingSlot(first_output_binding + k, self.resources[r]) for k, r in enumerate(outputs)],
            list(outputs))
        self.encoder.Finish()
        path = self.root / "model.vgf"
        with open(path, "wb") as f:
            self.encoder.WriteTo(f)
        return path


def scenario(b: ScenarioBuilder, bindings: list[tuple[int, int, str]], outputs: list[str], *,
             graph: dict[str, Any] | None = None, command: dict[str, Any] | None = None) -> Path:
    b.resources.append({"graph": {"uid": "g", "src": "model.vgf", **(graph or {})}})
    b.buffer("x", X.nbytes, X, shader_access="readonly")
    for name in outputs:
        b.buffer(name, N * 4, dst=f"{name}.npy", shader_access="writeonly")
    b.commands.append({"dispatch_vgf": {"graph_ref": "g", "bindings": [
        {"set": s, "id": i, "resource_ref": r} for s, i, r in bindings], **(command or {})}})
    return b.save()


def run_both(path: Path, tmp_path: Path, outputs: list[str]) -> dict[str, np.ndarray]:
    """vkcap's outputs (exit 0), byte-identical to the reference's where it is installed."""
    proc = vkcap("run", path, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    assert_same_outputs(path, tmp_path / "ours", tmp_path, [f"{o}.npy" for o in outputs])
    return {o: np.load(tmp_path / "ours" / f"{o}.npy").view(np.float32) for o in outputs}


# --- the differential cases: (build the VGF and scenario, expected outputs) -------------------------------

def chain(b: ScenarioBuilder, packed: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """in -> double -> (intermediate) -> add one -> out."""
    m = ArmVgf(b.root, packed_strides=packed)
    m.buffer("in", "input")
    m.buffer("mid", "intermediate")
    m.buffer("out", "output")
    m.segment("double", glsl("x[i] * 2.0"), "in", "mid")
    m.segment("add_one", glsl("x[i] + 1.0"), "mid", "out")
    m.save(["in"], ["out"])
    return scenario(b, [(0, 0, "x"), (0, 1, "y")], ["y"]), {"y": X * 2 + 1}


def substitution(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """A module with no code, substituted by a scenario shader on the command (where the reference reads it)."""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("out", "output")
    m.segment("add_one", None, "in", "out")
    m.save(["in"], ["out"])
    b.shader("triple", glsl("x[i] * 3.0"))
    path = scenario(b, [(0, 0, "x"), (0, 1, "y")], ["y"],
                    command={"shader_substitutions": [{"shader_ref": "triple", "target": "add_one"}]})
    return path, {"y": X * 3}


def substitution_of_code(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """A substitution replaces a module that has code of its own; the other segment runs its own. (The
    reference substitutes placeholders only: "Could not perform shader substitution".)"""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("mid", "intermediate")
    m.buffer("out", "output")
    m.segment("first", glsl("x[i] - 5.0"), "in", "mid")
    m.segment("second", glsl("x[i] * 100.0"), "mid", "out")
    m.save(["in"], ["out"])
    b.shader("halve", glsl("x[i] * 0.5"))
    path = scenario(b, [(0, 0, "x"), (0, 1, "y")], ["y"],
                    command={"shader_substitutions": [{"shader_ref": "halve", "target": "second"}]})
    return path, {"y": (X - 5) * np.float32(0.5)}


def glsl_modules(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """Modules that hold GLSL source (each runner compiles it), one of them ``coherent volatile`` (glslang
    repeats its Coherent decorations: vkcap drops the repeats, as it does for a scenario's GLSL)."""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("mid", "intermediate")
    m.buffer("out", "output")
    m.segment("square", "glsl:" + glsl("x[i] * x[i]"), "in", "mid")
    m.segment("negate", "glsl:" + glsl("-x[i]").replace("buffer Out", "coherent volatile buffer Out"), "mid", "out")
    m.save(["in"], ["out"])
    return scenario(b, [(0, 0, "x"), (0, 1, "y")], ["y"]), {"y": -(X * X)}


def push_constants(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """A segment with a push constant range of 8 bytes; the scenario gives the data by module name."""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("out", "output")
    m.segment("affine", glsl("x[i] * pc.scale + pc.bias",
                             header="layout(push_constant) uniform PC { float scale; float bias; } pc;"),
              "in", "out", push_bytes=8)
    m.save(["in"], ["out"])
    b.raw("pc", np.array([-2.5, 0.25], np.float32))
    path = scenario(b, [(0, 0, "x"), (0, 1, "y")], ["y"], graph={"push_constants_size": 8},
                    command={"push_constants": [{"push_data_ref": "pc", "shader_target": "affine"}]})
    return path, {"y": X * np.float32(-2.5) + np.float32(0.25)}


def specialization(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """Specialization constants by module name: a factor (id 0) and the workgroup size (id 1)."""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("out", "output")
    m.segment("scale", glsl("x[i] * K", header="layout(constant_id = 0) const float K = 1.0;",
                            local="local_size_x_id = 1"), "in", "out", groups=N // 8)
    m.save(["in"], ["out"])
    path = scenario(b, [(0, 0, "x"), (0, 1, "y")], ["y"], graph={"specialization_constants_map": [
        {"shader_target": "scale", "specialization_constants": [{"id": 0, "value": 1.5}, {"id": 1, "value": 8}]}]})
    return path, {"y": X * np.float32(1.5)}


def alias_group(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """Two intermediates of one alias group, the first dead before the second is written."""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("m1", "intermediate", alias_group=0)
    m.buffer("m2", "intermediate", alias_group=0)
    m.buffer("out1", "output")
    m.buffer("out2", "output")
    m.segment("double", glsl("x[i] * 2.0"), "in", "m1")
    m.segment("add_one", glsl("x[i] + 1.0"), "m1", "out1")
    m.segment("triple", glsl("x[i] * 3.0"), "in", "m2")
    m.segment("sub_one", glsl("x[i] - 1.0"), "m2", "out2")
    m.save(["in"], ["out1", "out2"])
    path = scenario(b, [(0, 0, "x"), (0, 1, "y1"), (0, 2, "y2")], ["y1", "y2"])
    return path, {"y1": X * 2 + 1, "y2": X * 3 - 1}


def explicit_sets(b: ScenarioBuilder, _: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """Explicit descriptor set indices: the input in set 1 and the output in set 2 of one segment."""
    m = ArmVgf(b.root)
    m.buffer("in", "input")
    m.buffer("out", "output")
    m.segment("negate", glsl("-x[i]", sets=(1, 2)), "in", "out", sets=(1, 2))
    m.save(["in"], ["out"])
    return scenario(b, [(1, 0, "x"), (2, 1, "y")], ["y"]), {"y": -X}


def everything(b: ScenarioBuilder, packed: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """All of it in one model: an alias group of intermediates, an explicit set, push constants (sized by
    the VGF's range), specialization constants by module name, and substitutions. Where a command gives
    substitutions the reference substitutes every compute module (one with no target is "Could not
    perform shader substitution"), so each module here has one: the placeholder, and two modules with
    code of their own (replaced by the same GLSL)."""
    m = ArmVgf(b.root, packed_strides=packed)
    m.buffer("in", "input")
    m.buffer("m1", "intermediate", alias_group=3)
    m.buffer("m2", "intermediate", alias_group=3)
    m.buffer("out", "output")
    shift = glsl("x[i] + pc.d", header="layout(push_constant) uniform PC { float d; } pc;")
    scale = glsl("x[i] * K", sets=(2, 2), header="layout(constant_id = 0) const float K = 1.0;")
    m.segment("stub", None, "in", "m1")
    m.segment("shift", shift, "m1", "m2", push_bytes=4)
    m.segment("scale", scale, "m2", "out", sets=(2, 2))
    m.save(["in"], ["out"])
    b.shader("square", glsl("x[i] * x[i]"))
    b.shader("shift_again", shift, push_constants_size=4)
    b.shader("scale_again", scale)
    b.raw("pc", np.array([-3.0], np.float32))
    path = scenario(b, [(0, 0, "x"), (2, 1, "y")], ["y"], graph={
        "specialization_constants_map": [{"shader_target": "scale", "specialization_constants": [{"id": 0, "value": 0.5}]}],
    }, command={"shader_substitutions": [{"shader_ref": "square", "target": "stub"},
                                         {"shader_ref": "shift_again", "target": "shift"},
                                         {"shader_ref": "scale_again", "target": "scale"}],
                "push_constants": [{"push_data_ref": "pc", "shader_target": "shift"}]})
    return path, {"y": (X * X - 3) * np.float32(0.5)}


CASES: dict[str, Callable[[ScenarioBuilder, bool], tuple[Path, dict[str, np.ndarray]]]] = {
    "chain": chain, "substitution": substitution, "glsl_modules": glsl_modules,
    "push_constants": push_constants, "specialization": specialization, "alias_group": alias_group,
    "explicit_sets": explicit_sets, "everything": everything,
}


# ARM's tooling leaves a buffer's strides empty; packed strides (as other writers give them) on two models.
@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("case, packed", [(c, False) for c in sorted(CASES)] + [("chain", True), ("everything", True)])
def test_arm_written_vgf_runs_as_the_reference_runs_it(builder: ScenarioBuilder, tmp_path: Path, case: str,
                                                        packed: bool) -> None:
    path, expected = CASES[case](builder, packed)
    got = run_both(path, tmp_path, list(expected))
    for name, values in expected.items():
        np.testing.assert_array_equal(got[name], values)


@pytest.mark.slow
def test_a_substitution_may_replace_a_module_with_code(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """vkcap substitutes a module that has code (the reference only a placeholder): a deliberate difference."""
    path, expected = substitution_of_code(builder, False)
    proc = vkcap("run", path, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "y.npy").view(np.float32), expected["y"])


@pytest.mark.slow
def test_the_shader_decides_with_a_debug_note(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """At debug level, one note per binding whose VGF type the shader overrides; nothing at info level."""
    path, _ = chain(builder, False)
    proc = vkcap("run", path, "--output", tmp_path / "ours", "--log-level", "debug")
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in (proc.stdout + proc.stderr).splitlines() if "as the shader declares it" in line]
    assert len(notes) == 4, notes  # two segments, two bindings each
    assert "set 0 binding 0 is bound as VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, as the shader declares it (the VGF's " \
           "resource 0 says VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER)" in notes[0]
    quiet = vkcap("run", path, "--output", tmp_path / "quiet")
    assert (quiet.returncode, "as the shader declares it" in quiet.stdout + quiet.stderr) == (0, False)


def _one_segment_vgf(b: ScenarioBuilder, source: str, in_type: int, in_dims: int = N) -> Path:
    m = ArmVgf(b.root)
    m.resources["in"] = m.encoder.AddInputResource(in_type, R32_SFLOAT, [in_dims], [], None)
    m.buffer("out", "output")
    m.segment("mix", source, "in", "out")
    return m.save(["in"], ["out"])


TENSOR_READER = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 16) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 1> X;
layout(set = 0, binding = 1) buffer Out { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; float v; tensorReadARM(X, uint[](i), v); o[i] = v; }
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["a tensor where the shader has a buffer", "a buffer where the shader has a tensor"])
def test_a_real_contradiction_is_one_line(builder: ScenarioBuilder, tmp_path: Path, case: str) -> None:
    if case == "a tensor where the shader has a buffer":
        _one_segment_vgf(builder, glsl("x[i]"), TENSOR_ARM)
        builder.resources.append({"tensor": {"uid": "x", "dims": [N], "format": "VK_FORMAT_R32_SFLOAT",
                                             "src": builder.npy("xt.npy", X), "shader_access": "readonly"}})
        builder.resources.insert(0, {"graph": {"uid": "g", "src": "model.vgf"}})
        builder.buffer("y", N * 4, dst="y.npy", shader_access="writeonly")
        builder.commands.append({"dispatch_vgf": {"graph_ref": "g", "bindings": [
            {"set": 0, "id": 0, "resource_ref": "x"}, {"set": 0, "id": 1, "resource_ref": "y"}]}})
        path = builder.save()
        message = ("resources[0].graph: shader module 'mix' (segment 'mix') of graph 'g' declares set 0 binding 0 as a "
                   "storage buffer, but segment 'mix' gives it a tensor (resource 0)")
    else:
        _one_segment_vgf(builder, TENSOR_READER, DESCRIPTOR_TYPE_STORAGE_BUFFER_EXT)
        path = scenario(builder, [(0, 0, "x"), (0, 1, "y")], ["y"])
        message = ("resources[0].graph: shader module 'mix' (segment 'mix') of graph 'g' does not match the VGF: the "
                   "shader uses tensor set 0 binding 0 (tensor<? float32>) but segment 'mix' gives it a buffer (resource 0)")
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in builder.root.iterdir())
    proc = vkcap("run", path, "--output", tmp_path / "out")
    assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {path}: {message}")
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in builder.root.iterdir()) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_a_vgf_buffer_where_the_scenario_gives_a_tensor_names_the_binding(builder: ScenarioBuilder,
                                                                          tmp_path: Path) -> None:
    _one_segment_vgf(builder, glsl("x[i]"), DESCRIPTOR_TYPE_STORAGE_BUFFER_EXT)
    path = scenario(builder, [(0, 0, "x"), (0, 1, "y")], ["y"])
    doc = json.loads(path.read_text())
    doc["resources"][1] = {"tensor": {"uid": "x", "dims": [N], "format": "VK_FORMAT_R32_SFLOAT",
                                      "src": builder.npy("xt.npy", X), "shader_access": "readonly"}}
    path.write_text(json.dumps(doc))
    proc = vkcap("run", path, "--output", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"vkcap: error: {path}: commands[0].dispatch_vgf.bindings[0].resource_ref: "
                                          "'x' is a tensor, but graph 'g' input 'in' (binding 0) is a buffer (VK_FORMAT_R32_SFLOAT [32])")


@pytest.mark.slow
def test_a_recording_of_an_arm_written_vgf_replays_identical(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """With --dispatch-level, each segment's output (the type-6 intermediate too) is a snapshot; the trace
    replays identical, binding as the recording did."""
    path, _ = chain(builder, False)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", path, "-o", trace, "--output", tmp_path / "out", "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    replay = vkcap("replay", trace, "--json", tmp_path / "r.json")
    assert replay.returncode == 0, replay.stderr
    frame = json.loads((tmp_path / "r.json").read_text())["frames"][0]
    assert [d["status"] for d in frame["dispatches"]] == ["identical", "identical"], frame["dispatches"]
