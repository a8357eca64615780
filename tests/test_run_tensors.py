"""Tensor scenarios end to end: ``vkcap run``/``record``/``replay``/``export`` over ARM's emulation layer on
the test device, checked against numpy and, where installed, byte for byte against the reference runner."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, vkcap
from tests.reference import reference_runner, run_reference

DIMS = [2, 3, 4]

ADD = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 3> A;
layout(set = 0, binding = 1) uniform tensorARM<float, 3> B;
layout(set = 0, binding = 2) uniform tensorARM<float, 3> C;
void main() {
    uint i = gl_GlobalInvocationID.x, j = gl_GlobalInvocationID.y, k = gl_GlobalInvocationID.z;
    float a, b;
    tensorReadARM(A, uint[](i, j, k), a);
    tensorReadARM(B, uint[](i, j, k), b);
    tensorWriteARM(C, uint[](i, j, k), a + b * 2.0 + BIAS);
}
"""

# int8: Y = X * 2 - 3, then Z = Y + X (the second dispatch reads what the first wrote: a tensor barrier).
SCALE_I8 = """#version 450
#extension GL_ARM_tensors : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<int8_t, 1> X;
layout(set = 0, binding = 1) uniform tensorARM<int8_t, 1> Y;
void main() {
    uint i = gl_GlobalInvocationID.x;
    int8_t x;
    tensorReadARM(X, uint[](i), x);
    tensorWriteARM(Y, uint[](i), int8_t(int(x) * 2 - 3));
}
"""
SUM_I8 = """#version 450
#extension GL_ARM_tensors : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<int8_t, 1> X;
layout(set = 0, binding = 1) uniform tensorARM<int8_t, 1> Y;
layout(set = 0, binding = 2) uniform tensorARM<int8_t, 1> Z;
void main() {
    uint i = gl_GlobalInvocationID.x;
    int8_t x, y;
    tensorReadARM(X, uint[](i), x);
    tensorReadARM(Y, uint[](i), y);
    tensorWriteARM(Z, uint[](i), int8_t(int(x) + int(y)));
}
"""

# A buffer and a tensor share memory: the shader reads the tensor's view of bytes a buffer loaded.
TENSOR_TO_BUFFER = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 1> T;
layout(set = 0, binding = 1) buffer O { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; float t; tensorReadARM(T, uint[](i), t); o[i] = t + 1.0; }
"""


def tensor(b: ScenarioBuilder, uid: str, dims: list[int], fmt: str, data: np.ndarray | None = None, **fields: object) -> None:
    body: dict[str, object] = {"uid": uid, "dims": dims, "format": fmt, "shader_access": fields.pop("shader_access", "readwrite"), **fields}
    if data is not None:
        body["src"] = b.npy(f"{uid}.npy", data)
    b.resources.append({"tensor": body})


def add_scenario(b: ScenarioBuilder, bias: str = "0.0") -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(11)
    a = rng.standard_normal(DIMS).astype(np.float32)
    bb = rng.standard_normal(DIMS).astype(np.float32)
    b.shader("add", ADD, build_options=f"-DBIAS={bias}")
    tensor(b, "A", DIMS, "VK_FORMAT_R32_SFLOAT", a, shader_access="readonly")
    tensor(b, "B", DIMS, "VK_FORMAT_R32_SFLOAT", bb, shader_access="readonly")
    tensor(b, "C", DIMS, "VK_FORMAT_R32_SFLOAT", dst="c.npy")
    b.dispatch("add", [(0, 0, "A"), (0, 1, "B"), (0, 2, "C")], DIMS)
    b.boundary(["C"], 0)
    return b.save(), a + bb * np.float32(2)


def assert_same_as_reference(scenario: Path, ours: Path, tmp: Path, names: list[str]) -> None:
    if reference_runner() is None:
        return  # the numpy checks above still ran; the reference ships for Python 3.11 only
    ref = run_reference(scenario, tmp / "reference")
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    for name in names:
        assert (ours / name).read_bytes() == (tmp / "reference" / name).read_bytes(), name


@pytest.mark.slow
@pytest.mark.device
def test_tensor_add(builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario, expected = add_scenario(builder)
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "out" / "c.npy")
    assert out.dtype == np.float32 and out.shape == tuple(DIMS)
    np.testing.assert_array_equal(out, expected)
    assert_same_as_reference(scenario, tmp_path / "out", tmp_path, ["c.npy"])


@pytest.mark.slow
@pytest.mark.device
def test_tensor_barrier_between_dispatches(builder: ScenarioBuilder, tmp_path: Path) -> None:
    x = np.arange(-20, 20, dtype=np.int8)
    builder.shader("scale", SCALE_I8).shader("sum", SUM_I8)
    tensor(builder, "X", [40], "VK_FORMAT_R8_SINT", x, shader_access="readonly")
    tensor(builder, "Y", [40], "VK_FORMAT_R8_SINT")
    tensor(builder, "Z", [40], "VK_FORMAT_R8_SINT", dst="z.npy")
    # The reference runner's lower-case spelling (it refuses the specification's upper case; vkcap takes both).
    builder.resource("tensor_barrier", uid="yb", tensor_resource="Y", src_access="compute_shader_write",
                     dst_access="compute_shader_read", src_stage=["compute"], dst_stage=["compute"])
    builder.dispatch("scale", [(0, 0, "X"), (0, 1, "Y")], [40], implicit_barrier=False)
    builder.barrier(tensor_barrier_refs=["yb"], memory_barrier_refs=[], buffer_barrier_refs=[], image_barrier_refs=[])
    builder.dispatch("sum", [(0, 0, "X"), (0, 1, "Y"), (0, 2, "Z")], [40])
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    expected = (x.astype(np.int32) * 2 - 3 + x).astype(np.int8)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "z.npy"), expected)
    assert_same_as_reference(scenario, tmp_path / "out", tmp_path, ["z.npy"])


@pytest.mark.slow
@pytest.mark.device
def test_buffer_and_tensor_aliased_with_offsets(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A 64-element float tensor at offset 256 of a group whose buffer (offset 0) holds 128 floats:
    the tensor reads the upper half of what the buffer loaded."""
    data = np.arange(128, dtype=np.float32) * 0.5
    builder.shader("read", TENSOR_TO_BUFFER)
    builder.buffer("raw", data.nbytes, data, shader_access="readonly", memory_group={"id": "g", "offset": 0})
    tensor(builder, "view", [64], "VK_FORMAT_R32_SFLOAT", shader_access="readonly", memory_group={"id": "g", "offset": 256})
    builder.buffer("out", 64 * 4, dst="out.npy")
    builder.dispatch("read", [(0, 0, "view"), (0, 1, "out")], [64])
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "out.npy").view(np.float32), data[64:] + 1)
    assert_same_as_reference(scenario, tmp_path / "out", tmp_path, ["out.npy"])


@pytest.mark.slow
@pytest.mark.device
def test_tensor_record_replay_export(builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario, expected = add_scenario(builder)
    trace = tmp_path / "t.vkt"
    assert vkcap("record", scenario, "-o", trace, "--output", tmp_path / "rec").returncode == 0
    info = json.loads(vkcap("info", trace, "--json").stdout)
    assert "VK_LAYER_ML_Tensor_Emulation" in info["fingerprint"]["layers"]
    exported = tmp_path / "c.npy"
    assert vkcap("export", trace, "--frame", "0", "--resource", "C", "-o", exported).returncode == 0
    assert exported.read_bytes() == (tmp_path / "rec" / "c.npy").read_bytes()
    np.testing.assert_array_equal(np.load(exported), expected)
    assert vkcap("replay", trace).returncode == 0
    bad = builder.file("bad.comp", ADD.replace("a + b * 2.0 + BIAS", "a + b * 2.0 + BIAS + ((i == 1u && j == 2u && k == 3u) ? 0.5 : 0.0)"))
    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--replace-shader", f"add={bad}", "--json", report)
    assert proc.returncode == 1
    first = json.loads(report.read_text())["frames"][0]["resources"][0]
    assert (first["uid"], first["dtype"], first["first_index"], first["differing"]) == ("C", "float32", [1, 2, 3], 1)
    assert first["first_live"] == pytest.approx(first["first_recorded"] + 0.5)


def test_tensor_src_with_the_wrong_dtype_is_refused(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("add", ADD, build_options="-DBIAS=0.0")
    tensor(builder, "A", DIMS, "VK_FORMAT_R32_SFLOAT", np.zeros(DIMS, np.float64))
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"vkcap: error: {scenario}: resources[1].tensor.src: ")
    assert proc.stderr.strip().endswith("'A.npy' has 8-byte elements (<f8) but VK_FORMAT_R32_SFLOAT needs 4-byte elements")
