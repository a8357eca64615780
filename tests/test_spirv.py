"""SPIR-V reflection of what a shader cannot write, and from it what no command of a scenario can
write (modules compiled from GLSL by the real glslangValidator)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.needs import missing

from vkcore.exec.plan import unwritable_resources
from vkcore.scenario.load import load_scenario
from vkcore.shaders.spirv import reflect

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
        missing("glslangValidator is not installed (apt-get install glslang-tools)")
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


KINDS = """#version 450
layout(local_size_x = 2, local_size_y = 3) in;
layout(set = 0, binding = 0) buffer S { float s[]; };
layout(set = 0, binding = 1) uniform U { vec4 u; };
layout(set = 0, binding = 2, r32ui) uniform uimage2D storage;
layout(set = 0, binding = 3) uniform isampler2D combined;
layout(set = 0, binding = 4) uniform texture2D tex;
layout(set = 0, binding = 5) uniform sampler smp;
layout(set = 1, binding = 0, rgba16f) uniform writeonly imageBuffer texels;
layout(set = 1, binding = 1) uniform sampler2DArray layers;
layout(set = 1, binding = 2) uniform sampler2D many[4];
layout(set = 2, binding = 7) buffer Unused { float never[]; };
void main() {
    s[0] = u.x + float(imageLoad(storage, ivec2(0)).x) + float(texelFetch(combined, ivec2(0), 0).x)
         + texture(sampler2D(tex, smp), vec2(0)).x + texture(layers, vec3(0)).x + texture(many[2], vec2(0)).x;
    imageStore(texels, 0, vec4(1));
}
"""


def test_every_descriptor_kind_with_what_the_shader_declares(tmp_path: Path) -> None:
    r = reflect(compile_glsl(KINDS, tmp_path))
    got = {k: (d.kind, d.count, d.name, d.used, d.image_dim, d.image_format, d.numeric, d.arrayed)
           for k, d in r.descriptors.items()}
    assert got == {
        (0, 0): ("storage_buffer", 1, "S", True, None, None, None, False),
        (0, 1): ("uniform_buffer", 1, "U", True, None, None, None, False),
        (0, 2): ("storage_image", 1, "storage", True, "2D", "R32ui", "uint", False),
        (0, 3): ("combined_image_sampler", 1, "combined", True, "2D", "Unknown", "int", False),
        (0, 4): ("sampled_image", 1, "tex", True, "2D", "Unknown", "float", False),
        (0, 5): ("sampler", 1, "smp", True, None, None, None, False),
        (1, 0): ("storage_texel_buffer", 1, "texels", True, "Buffer", "Rgba16f", "float", False),
        (1, 1): ("combined_image_sampler", 1, "layers", True, "2D", "Unknown", "float", True),
        (1, 2): ("combined_image_sampler", 4, "many", True, "2D", "Unknown", "float", False),
        (2, 7): ("storage_buffer", 1, "Unused", False, None, None, None, False),
    }
    assert r.used_bindings == set(r.descriptors) - {(2, 7)}
    assert r.descriptors[(1, 0)].write_only and not r.descriptors[(0, 2)].write_only
    assert r.entry_points == {"main": "compute"} and r.local_size == (2, 3, 1)
    assert {d.descriptor_type for d in r.descriptors.values()} == {0, 1, 2, 3, 5, 6, 7}
    assert r.descriptors[(0, 2)].text == "a storage image (image2D) 'storage' of format R32ui"
    assert r.descriptors[(1, 2)].text == "a combined image sampler (sampler2D) 'many' (an array of 4)"
