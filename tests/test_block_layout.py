"""The buffer views reflected from SPIR-V (vkcore.shaders.block_layout): offsets and strides as glslang lays
out std140, std430 and scalar blocks, 8/16/64-bit members, matrices and nested structs; and a shader that
writes every field on lavapipe, read back through the reflected dtype, gets each value where the dtype says."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, vkcap
from vkcore.shaders.block_layout import (Array, Matrix, Scalar, Struct, block_at, describe, dtype_of, push_constants, reflect_blocks,
                                         size_of, view_bytes)
from vkcore.shaders.spirv import SpirvError

HEADER = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_scalar_block_layout : require
layout(local_size_x = 1) in;
"""


def compile_glsl(source: str, tmp_path: Path) -> bytes:
    tool = shutil.which("glslangValidator")
    assert tool, "glslangValidator is not installed (apt-get install glslang-tools)"
    src, out = tmp_path / "shader.comp", tmp_path / "shader.spv"
    src.write_text(source)
    subprocess.run([tool, "-V", "--target-env", "vulkan1.3", str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


def offsets(dtype: np.dtype) -> dict[str, int]:
    return {name: dtype.fields[name][1] for name in dtype.names}


BLOCKS = HEADER + """
layout(std140, set = 0, binding = 0) uniform U140 { float a; vec3 v; float arr[3]; mat2 m; int tail; } u;
layout(std430, set = 0, binding = 1) buffer S430 { float a; vec3 v; float arr[3]; mat2 m; int tail; } s;
layout(scalar, set = 0, binding = 2) buffer Scalar { float a; vec3 v; float arr[3]; mat2 m; int tail; } sc;
layout(push_constant) uniform PC { uint n; float scale; } pc;
void main() { s.tail = int(u.a + sc.a + float(pc.n)); }
"""


def test_std140_std430_and_scalar_offsets_are_the_shaders(tmp_path: Path) -> None:
    code = compile_glsl(BLOCKS, tmp_path)
    expected = {  # (offsets of a, v, arr, m, tail; arr stride; matrix stride; size) by the GLSL layout rules
        0: ({"a": 0, "v": 16, "arr": 32, "m": 80, "tail": 112}, 16, 16, 116),
        1: ({"a": 0, "v": 16, "arr": 28, "m": 40, "tail": 56}, 4, 8, 60),
        2: ({"a": 0, "v": 4, "arr": 16, "m": 28, "tail": 44}, 4, 8, 48),
    }
    for binding, (where, array_stride, matrix_stride, size) in expected.items():
        block = block_at(code, 0, binding)
        assert block is not None and block.struct is not None
        members = {m.name: m for m in block.struct.members}
        assert {n: m.offset for n, m in members.items()} == where
        assert isinstance(members["arr"].type, Array) and members["arr"].type.stride == array_stride
        assert isinstance(members["m"].type, Matrix) and members["m"].type.stride == matrix_stride
        assert size_of(block.struct) == size
        dtype = dtype_of(block.struct)
        assert offsets(dtype) == where and dtype.itemsize == size
    assert block_at(code, 0, 0).storage == "uniform" and block_at(code, 0, 1).storage == "storage"  # type: ignore[union-attr]
    pc = push_constants(code)
    assert pc is not None and pc.storage == "push_constant" and (pc.set, pc.binding) == (None, None)
    assert dtype_of(pc.struct) == np.dtype([("n", "<u4"), ("scale", "<f4")])  # type: ignore[arg-type]
    assert describe(block_at(code, 0, 2).struct) == "struct{a: float32, v: float32[3], arr: float32[3], m: float32[2x2], tail: int32}"  # type: ignore[arg-type, union-attr]


PARTICLES = HEADER + """
struct Inner { f16vec2 h; int8_t b; uint64_t big; };
struct Particle { vec2 pos; int id; mat3 m; Inner inner[2]; double d; };
layout(std430, set = 0, binding = 0) buffer Parts { Particle parts[]; };
layout(std430, set = 0, binding = 1) buffer Out { float result[]; };
layout(std430, row_major, set = 0, binding = 2) buffer Rows { mat2x3 mats[]; };
layout(std140, set = 0, binding = 3) buffer Padded { float padded[]; };
void main() {
    for (int i = 0; i < 4; i++) {
        parts[i].pos = vec2(i, i + 0.5);
        parts[i].id = -i;
        parts[i].m = mat3(float(i + 1));
        for (int j = 0; j < 2; j++) {
            parts[i].inner[j].h = f16vec2(float16_t(i), float16_t(j) + float16_t(0.25));
            parts[i].inner[j].b = int8_t(i - 3 * j);
            parts[i].inner[j].big = (uint64_t(1) << 40) + uint64_t(i * 1000 + j);
        }
        parts[i].d = double(i) / 3.0lf;
        result[i] = float(i) * 1.5;
        mats[i] = mat2x3(vec3(i, i + 1, i + 2), vec3(10 * i, 10 * i + 1, 10 * i + 2));
        padded[i] = float(i) + 0.125;
    }
}
"""


@pytest.mark.slow
@pytest.mark.device
def test_a_shader_writes_every_field_where_the_reflected_dtype_reads_it(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The strongest check of a layout: the driver writes each field, numpy reads it through the view."""
    code = compile_glsl(PARTICLES, tmp_path)
    views = {b.binding: b.element_view() for b in reflect_blocks(code)}
    parts_dtype, parts_offset = views[0]  # type: ignore[misc]
    assert parts_offset == 0 and parts_dtype.itemsize == 112
    assert offsets(parts_dtype) == {"pos": 0, "id": 8, "m": 16, "inner": 64, "d": 96}
    assert views[1] == (np.dtype("<f4"), 0)
    sizes = {0: 4 * 112, 1: 16, 2: 4 * 24, 3: 4 * 16}
    builder.shader("fill", PARTICLES)
    for binding, size in sizes.items():
        builder.buffer(f"b{binding}", size, dst=f"b{binding}.npy")
    builder.dispatch("fill", [(0, b, f"b{b}") for b in sizes], [1, 1, 1])
    out = tmp_path / "out"
    done = vkcap("run", builder.save(), "--output", out)
    assert done.returncode == 0, done.stderr

    def read(binding: int) -> np.ndarray:
        dtype, offset = views[binding]  # type: ignore[misc]
        return view_bytes(np.load(out / f"b{binding}.npy"), dtype, offset)

    parts = read(0)
    i = np.arange(4)
    np.testing.assert_array_equal(parts["pos"], np.stack([i, i + 0.5], axis=1).astype(np.float32))
    np.testing.assert_array_equal(parts["id"], -i)
    matrix = parts["m"]["v"]  # mat3 columns are vec3 padded to 16 bytes
    np.testing.assert_array_equal(matrix, np.stack([np.eye(3, dtype=np.float32) * (k + 1) for k in i]))
    inner = parts["inner"]
    j = np.arange(2)
    np.testing.assert_array_equal(inner["h"], np.stack([np.stack([np.full(2, k), j + 0.25], axis=1) for k in i]).astype(np.float16))
    np.testing.assert_array_equal(inner["b"], (i[:, None] - 3 * j[None, :]).astype(np.int8))
    np.testing.assert_array_equal(inner["big"], ((1 << 40) + i[:, None] * 1000 + j[None, :]).astype(np.uint64))
    np.testing.assert_array_equal(parts["d"], i / 3.0)
    np.testing.assert_array_equal(read(1), (i * 1.5).astype(np.float32))
    rows = read(2)  # row-major mat2x3: three rows of two
    assert rows.shape == (4, 3, 2)
    np.testing.assert_array_equal(rows[1], [[1, 10], [2, 11], [3, 12]])
    padded = read(3)
    assert padded.dtype.itemsize == 16
    np.testing.assert_array_equal(padded["v"], (i + 0.125).astype(np.float32))


def test_what_is_not_plain_data_is_opaque_and_bad_modules_are_errors(tmp_path: Path) -> None:
    code = compile_glsl(HEADER + """
layout(set = 0, binding = 0) buffer B { float x[]; } b;
layout(set = 0, binding = 1, r32f) uniform image2D img;
void main() { b.x[0] = imageLoad(img, ivec2(0)).x; }
""", tmp_path)
    blocks = reflect_blocks(code)
    assert [(b.binding, b.text()) for b in blocks] == [(0, "struct{x: float32[]}")]  # the image is no block
    with pytest.raises(SpirvError):
        reflect_blocks(code[:-4] + b"\x00\x00\x07\x00")  # the last instruction claims 7 words: truncated
    assert Scalar("bool", 32).dtype == "uint32" and size_of(Struct("", ())) == 0
    assert view_bytes(b"\x00" * 10, np.dtype("<f4"), 4).shape == (1,)  # a partial element is left out
    assert view_bytes(b"\x00" * 3, np.dtype("<f4")).shape == (0,)
