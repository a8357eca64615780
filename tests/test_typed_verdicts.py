"""Typed verdicts by default (#34): a replay compares each buffer in the view its shader declares, with no
``--dtype``; ``--dtype UID=bytes`` still compares raw bytes. Through the real CLI on lavapipe."""
from __future__ import annotations

import pytest

import json
from pathlib import Path

import numpy as np

from tests.builders import ScenarioBuilder, vkcap

pytestmark = pytest.mark.device

N = 3 * 1024
ADD = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) buffer Out { float result[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    result[i] = a[i] + b[i]%s;
}
"""
# The same sum moved by 0, 1 or 2 ULP (element i by i %% 3): a positive float's next value is its bits + 1.
MOVED = ADD.replace("result[i] = a[i] + b[i]%s;", "result[i] = uintBitsToFloat(floatBitsToUint(a[i] + b[i]) + i % 3u);")
PARTICLES = """#version 450
layout(local_size_x = 64) in;
struct Particle { vec2 pos; int id; float mass; };
layout(set = 0, binding = 0) buffer Parts { Particle parts[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    parts[i].pos = vec2(float(i) * 0.5 + 1.0, float(i) + 2.0);
    parts[i].id = int(i)%s;
    parts[i].mass = 1.0;
}
"""


def record(builder: ScenarioBuilder, tmp_path: Path, shader: str, buffers: dict[str, np.ndarray | int], out: list[str]) -> Path:
    builder.shader("s", shader)
    for uid, data in buffers.items():
        if isinstance(data, int):
            builder.buffer(uid, data)
        else:
            builder.buffer(uid, data.nbytes, data)
    builder.dispatch("s", [(0, i, uid) for i, uid in enumerate(buffers)], [N // 64, 1, 1])
    builder.boundary(out, 0)
    trace = tmp_path / "t.vkt"
    done = vkcap("record", builder.save(), "-o", trace)
    assert done.returncode == 0, done.stderr
    return trace


def replay_json(tmp_path: Path, trace: Path, *args: str) -> tuple[int, dict]:
    report = tmp_path / "r.json"
    done = vkcap("replay", trace, "--json", report, *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(report.read_text())


def comparison(report: dict, uid: str) -> dict:
    return next(c for f in report["frames"] for c in f["resources"] if c["uid"] == uid)


@pytest.mark.slow
def test_a_float_buffer_is_judged_in_ulp_with_no_dtype(builder: ScenarioBuilder, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.uniform(1, 2, N).astype(np.float32), rng.uniform(1, 2, N).astype(np.float32)
    trace = record(builder, tmp_path, ADD % "", {"a": a, "b": b, "out": 4 * N}, ["out"])
    moved = tmp_path / "moved.comp"
    moved.write_text(MOVED)
    code, report = replay_json(tmp_path, trace, "--replace-shader", f"s={moved}", "--ulp", "4")
    out = comparison(report, "out")
    assert code == 0 and (out["status"], out["dtype"], out["view"]) == ("within tolerance", "float32", "float32[]")
    assert (out["count"], out["differing"], out["beyond_tolerance"], out["max_ulp"]) == (N, 2 * N // 3, 0, 2)
    code, report = replay_json(tmp_path, trace, "--replace-shader", f"s={moved}", "--ulp", "1")
    out = comparison(report, "out")
    assert code == 1 and out["status"] == "DIVERGED" and out["beyond_tolerance"] == N // 3  # exactly the 2-ULP third
    assert out["first_index"] == [2] and out["beyond_max_ulp"] == 2
    # --dtype out=bytes overrides the view: raw bytes again
    code, report = replay_json(tmp_path, trace, "--replace-shader", f"s={moved}", "--ulp", "4", "--dtype", "out=bytes")
    assert code == 1 and comparison(report, "out")["dtype"] == "bytes"


@pytest.mark.slow
def test_a_struct_buffer_is_judged_field_by_field(builder: ScenarioBuilder, tmp_path: Path) -> None:
    trace = record(builder, tmp_path, PARTICLES % "", {"parts": 16 * N}, ["parts"])
    changed = tmp_path / "changed.comp"
    changed.write_text((PARTICLES % " + int(i == 41u)").replace(
        "parts[i].pos = vec2(float(i) * 0.5 + 1.0, float(i) + 2.0);",
        "parts[i].pos = vec2(float(i) * 0.5 + 1.0, uintBitsToFloat(floatBitsToUint(float(i) + 2.0) + uint(i == 7u)));"))
    code, report = replay_json(tmp_path, trace, "--replace-shader", f"s={changed}", "--ulp", "4")
    parts = comparison(report, "parts")
    assert code == 1 and parts["status"] == "DIVERGED"
    assert parts["view"] == "struct{pos: float32[2], id: int32, mass: float32}[]"
    assert (parts["count"], parts["differing"], parts["beyond_tolerance"]) == (4 * N, 2, 1)
    fields = {f["name"]: (f["dtype"], f["shape"], f["status"], f["differing"], f["beyond_tolerance"], f["max_ulp"])
              for f in parts["fields"]}
    assert fields == {"pos": ("float32", [2], "within tolerance", 1, 0, 1), "id": ("int32", [], "DIVERGED", 1, 1, 0),
                      "mass": ("float32", [], "identical", 0, 0, 0)}
    assert parts["first_where"] == "[41].id" and (parts["first_recorded"], parts["first_live"]) == (41, 42)
    done = vkcap("replay", trace, "--replace-shader", f"s={changed}", "--ulp", "4")
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "first at [41].id: recorded 41, live 42" in text
    assert "first 2 beyond the tolerance: [41].id, [7].pos[1]" in text
    assert "field pos (float32): 1 differ, 0 beyond the tolerance, up to 1 ULP; field id (int32): 1 differ, 1 beyond the tolerance" in text
