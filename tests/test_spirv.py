"""SPIR-V reflection of what a shader cannot write, and from it what no command of a scenario can
write (modules compiled from GLSL by the real glslangValidator)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from vkcore.plan import unwritable_resources
from vkcore.scenario import load_scenario
from vkcore.spirv import reflect

EVERY_KIND = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { float b[]; };
layout(set = 0, binding = 2) uniform U { float u; };
layout(set = 0, binding = 3, r32f) readonly uniform image2D ri;
layout(set = 0, binding = 4, r32f) uniform image2D wi;
layout(set = 0, binding = 5) uniform sampler2D s;
layout(set = 1, binding = 0) readonly buffer C { float x; float c[]; };
layout(set = 1, binding = 1) buffer D { readonly float x; float c[]; } d;
layout(set = 1, binding = 2) writeonly buffer E { float e[]; };
layout(set = 1, binding = 3) readonly buffer F { float f[]; } fs[2];
void main() {
    b[0] = a[0] + u + imageLoad(ri, ivec2(0)).x + texture(s, vec2(0)).x + x + c[0] + d.x + fs[1].f[0];
    imageStore(wi, ivec2(0), vec4(1));
    d.c[0] = 1.0;
    e[0] = 1.0;
}
"""


def compile_glsl(source: str, tmp_path: Path) -> bytes:
    tool = shutil.which("glslangValidator")
    if tool is None:
        pytest.skip("glslangValidator is not installed (apt-get install glslang-tools)")
    src, out = tmp_path / "shader.comp", tmp_path / "shader.spv"
    src.write_text(source)
    subprocess.run([tool, "-V", str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


def test_read_only_descriptors_of_every_kind(tmp_path: Path) -> None:
    r = reflect(compile_glsl(EVERY_KIND, tmp_path))
    assert r.bindings == {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 0), (1, 1), (1, 2), (1, 3)}
    # readonly block, uniform block, readonly image, sampler, all-readonly members, array of readonly
    # blocks; not: a plain or writeonly block, a storage image, a block with one writable member
    assert r.read_only == {(0, 0), (0, 2), (0, 3), (0, 5), (1, 0), (1, 3)}


def _scenario(tmp_path: Path, resources: list[dict], commands: list[dict]) -> Path:
    (tmp_path / "read.comp").write_text("#version 450\nvoid main() {}\n")
    doc = {"resources": [{"shader": {"uid": "read", "src": "read.comp", "type": "GLSL"}}, *resources],
           "commands": commands}
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc))
    return path


def _dispatch(*uids: str) -> dict:
    return {"dispatch_compute": {"shader_ref": "read", "rangeND": [1, 1, 1],
                                 "bindings": [{"set": 0, "id": i, "resource_ref": u} for i, u in enumerate(uids)]}}


def test_unwritable_resources_follow_the_shader_not_the_declared_access(tmp_path: Path) -> None:
    """Binding 0 is read-only in the shader: what is bound there only is unwritable, whatever its
    declared access; binding 1 is writable, even for a resource declared ``readonly``; memory
    shared with another resource, or bound to a graph, may always change."""
    buf = lambda uid, **extra: {"buffer": {"uid": uid, "size": 64, "shader_access": "readwrite", **extra}}  # noqa: E731
    path = _scenario(tmp_path, [
        buf("declared_rw"), buf("declared_ro", shader_access="readonly"), buf("both"), buf("unbound"),
        buf("grouped", memory_group={"id": "g"}),
    ], [_dispatch("declared_rw", "declared_ro"), _dispatch("both", "both"), _dispatch("grouped")])
    scenario = load_scenario(path)
    assert unwritable_resources(scenario, {"read": {(0, 0)}}) == {"declared_rw", "unbound"}
    # a shader without reflection (not SPIR-V we could read) writes all it binds
    assert unwritable_resources(scenario, {}) == {"unbound"}
