"""``dispatch_fragment``: full-screen draws into color attachments or over a render extent, checked
against numpy, recorded, replayed and bisected like compute dispatches.

ARM's reference runner 0.11 runs passes over a ``render_extent`` (compared byte for byte here) and dies
(SIGSEGV) on every pass into color attachments tried, on lavapipe and on the NVIDIA H100: those are
compared with numpy. ``bindings`` is required, as the specification writes it (no default) and the
reference reads it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, load_output, vkcap
from tests.reference import assert_same_outputs, reference_runner, run_reference

W, H = 8, 4
FULL_SCREEN = """#version 450
void main() {
    vec2 corner = vec2((gl_VertexIndex << 1) & 2, gl_VertexIndex & 2);
    gl_Position = vec4(corner * 2.0 - 1.0, 0.0, 1.0);
}
"""
GRADIENT = """#version 450
layout(location = 0) out vec4 color;
layout(push_constant) uniform P { vec4 tint; } p;
void main() { color = vec4(gl_FragCoord.x / 8.0, gl_FragCoord.y / 4.0, 0.25, 1.0) * p.tint; }
"""


def gradient(tint: np.ndarray, width: int = W, height: int = H) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    rgba = np.stack([(x + 0.5) / 8, (y + 0.5) / 4, np.full_like(x, 0.25), np.ones_like(x)], axis=-1)
    return (rgba * tint).astype(np.float32)


def shaders(b: ScenarioBuilder, fragment: str = GRADIENT, push: int = 16) -> None:
    b.shader("vs", FULL_SCREEN, file="vs.vert", stage="vertex")
    b.shader("fs", fragment, file="fs.frag", stage="fragment", push_constants_size=push)


def target(b: ScenarioBuilder, uid: str = "out", **fields: object) -> None:
    b.resources.append({"image": {"uid": uid, "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                  "shader_access": "readwrite", "color_attachment": True, **fields}})


def draw(b: ScenarioBuilder, **fields: object) -> None:
    b.commands.append({"dispatch_fragment": {"vertex_shader_ref": "vs", "fragment_shader_ref": "fs", "bindings": [],
                                             **fields}})


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.reference
def test_a_fragment_pass_into_a_color_attachment(builder: ScenarioBuilder, tmp_path: Path) -> None:
    tint = np.array([1, 0.5, 2, 1], dtype=np.float32)
    shaders(builder)
    builder.raw("tint", tint)
    target(builder, dst="out.dds")
    draw(builder, color_attachment_refs=["out"], push_data_ref="tint")
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    from vkcore.resources.imageio import read_dds

    got = np.frombuffer(read_dds(tmp_path / "out.dds").levels[0], np.float32).reshape(H, W, 4)
    np.testing.assert_array_equal(got, gradient(tint))
    if reference_runner() is not None:  # README, deliberate differences: the reference dies here
        assert run_reference(builder.root / "scenario.json", tmp_path / "ref").returncode == -11


@pytest.mark.slow
@pytest.mark.device
def test_fragment_pipelines_are_counted_by_the_pipeline_cache(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A graphics pipeline misses on the first cached run (no cache yet: not a failure, even with
    ``--fail-on-pipeline-cache-miss``) and hits on the next; a changed fragment shader then misses and,
    with ``--fail-on-pipeline-cache-miss``, is refused in one line, writing nothing."""
    shaders(builder)
    builder.raw("tint", np.ones(4, np.float32))
    target(builder, dst="out.dds")
    draw(builder, color_attachment_refs=["out"], push_data_ref="tint")
    scenario = builder.save()
    common = ["run", scenario, "--cache-path", tmp_path / "cache", "--fail-on-pipeline-cache-miss"]
    first = vkcap(*common, "--output", tmp_path)
    assert first.returncode == 0 and "pipeline cache: 0 hit(s), 1 miss(es)" in first.stderr, first.stderr
    assert (tmp_path / "cache" / "scenario.cache").is_file()
    second = vkcap(*common, "--output", tmp_path)
    assert second.returncode == 0 and "pipeline cache: 1 hit(s), 0 miss(es)" in second.stderr, second.stderr
    builder.file("fs.frag", GRADIENT.replace("0.25", "0.5"))
    refused = vkcap(*common, "--output", tmp_path / "refused")
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
        "vkcap: error: pipeline cache miss for shaders 'vs' and 'fs' (--fail-on-pipeline-cache-miss)"), refused.stderr
    assert not (tmp_path / "refused" / "out.dds").exists()


@pytest.mark.slow
@pytest.mark.device
def test_a_fragment_pass_over_a_render_extent_reads_and_writes_through_bindings(builder: ScenarioBuilder,
                                                                                  tmp_path: Path) -> None:
    """No attachment: the fragment shader samples an image and writes a storage buffer, one fragment per texel;
    byte for byte the reference's."""
    shaders(builder, """#version 450
layout(set = 0, binding = 0) uniform sampler2D src;
layout(set = 0, binding = 1) buffer O { vec4 o[]; };
void main() { ivec2 p = ivec2(gl_FragCoord.xy); o[p.y * 8 + p.x] = texelFetch(src, p, 0) * 2.0; }
""", push=0)
    values = np.random.default_rng(11).random((H, W, 4), dtype=np.float32)
    from vkcore.resources.imageio import write_dds

    write_dds(builder.root / "in.dds", W, H, 2, [values.tobytes()])
    builder.resources.append({"image": {"uid": "src", "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                        "shader_access": "readonly", "src": "in.dds"}})
    builder.buffer("o", W * H * 16, dst="o.npy")
    draw(builder, render_extent=[W, H], bindings=[{"set": 0, "id": 0, "resource_ref": "src"},
                                                  {"set": 0, "id": 1, "resource_ref": "o"}])
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_same_outputs(scenario, tmp_path, tmp_path / "ref", ["o.npy"])
    np.testing.assert_array_equal(load_output(tmp_path / "o.npy", np.float32).reshape(H, W, 4), values * 2)


@pytest.mark.slow
@pytest.mark.device
def test_a_fragment_pass_into_one_mip_level(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``{resource_ref, lod}`` renders into that level only, at its extent; the trace holds both levels."""
    from capture.trace import Trace

    tint = np.ones(4, np.float32)
    shaders(builder)
    builder.raw("tint", tint)
    target(builder, mips=2)
    draw(builder, color_attachment_refs=[{"resource_ref": "out", "lod": 1}], push_data_ref="tint")
    builder.boundary(["out"], 0)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", builder.save(), "-o", trace)
    assert proc.returncode == 0, proc.stderr
    with Trace.open(trace) as t:
        levels = np.frombuffer(t.snapshot(0, "out"), np.float32)
    np.testing.assert_array_equal(levels[: W * H * 4], 0)
    np.testing.assert_array_equal(levels[W * H * 4:].reshape(H // 2, W // 2, 4), gradient(tint, W // 2, H // 2))


@pytest.mark.slow
@pytest.mark.device
def test_record_replay_and_bisect_find_a_replaced_fragment_shader(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Six frames, each a compute dispatch then a fragment pass accumulating into a buffer; a fragment
    shader replaced by one that differs for one texel from frame 3 on is found at that frame and command."""
    accumulate = """#version 450
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer N { uint n; };
void main() { ivec2 p = ivec2(gl_FragCoord.xy); a[p.y * 8 + p.x] += float(p.x + p.y) + EXTRA; }
"""
    builder.shader("vs", FULL_SCREEN, file="vs.vert", stage="vertex")
    builder.shader("fs", accumulate.replace("EXTRA", "0.0"), file="fs.frag", stage="fragment")
    builder.shader("count", "#version 450\nlayout(local_size_x = 1) in;\nlayout(set = 0, binding = 0) buffer N { uint n; };"
                            "\nvoid main() { n += 1u; }\n")
    builder.buffer("a", W * H * 4, np.zeros(W * H, np.float32), dst="a.npy").buffer("n", 4, np.zeros(1, np.uint32))
    for k in range(6):
        builder.dispatch("count", [(0, 0, "n")], [1, 1, 1])
        draw(builder, render_extent=[W, H], bindings=[{"set": 0, "id": 0, "resource_ref": "a"},
                                                      {"set": 0, "id": 1, "resource_ref": "n"}])
        builder.boundary(["a"], k)
    scenario = builder.save()
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path, "--checkpoint-every", "2", "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    assert_same_outputs(scenario, tmp_path, tmp_path / "ref", ["a.npy"])
    y, x = np.mgrid[0:H, 0:W]
    np.testing.assert_array_equal(load_output(tmp_path / "a.npy", np.float32), ((x + y) * 6).reshape(-1))
    assert vkcap("replay", trace).returncode == 0
    changed = builder.file("changed.frag", accumulate.replace(
        "EXTRA", "((n >= 4u && p.x == 5 && p.y == 2) ? 0.5 : 0.0)"))
    report = tmp_path / "bisect.json"
    proc = vkcap("bisect", trace, "--replace-shader", f"fs={changed}", "--json", report)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert (doc["frame"], doc["command"]) == (3, 10)  # frame 3: commands 9 (count), 10 (the pass), 11 (boundary)


@pytest.mark.slow
@pytest.mark.parametrize("change, message", [
    (lambda b: b.commands[0]["dispatch_fragment"].pop("color_attachment_refs"),
     "commands[0].dispatch_fragment: give color_attachment_refs or render_extent: a fragment pass needs an extent to "
     "draw over"),
    (lambda b: b.resources[3]["image"].pop("color_attachment"),
     "commands[0].dispatch_fragment.color_attachment_refs[0]: image 'out' is not a color attachment: set its "
     "color_attachment to true"),
    (lambda b: b.commands[0]["dispatch_fragment"].update(fragment_shader_ref="vs"),
     "commands[0].dispatch_fragment.fragment_shader_ref: shader 'vs' is a vertex shader; dispatch_fragment needs a "
     "fragment shader here"),
])
def test_bad_fragment_passes_are_one_line(builder: ScenarioBuilder, tmp_path: Path, change: object, message: str) -> None:
    shaders(builder)
    builder.raw("tint", np.ones(4, np.float32))
    target(builder)
    draw(builder, color_attachment_refs=["out"], push_data_ref="tint")
    change(builder)  # type: ignore[operator]
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {scenario}: {message}")


@pytest.mark.device
def test_a_render_extent_beyond_the_device(builder: ScenarioBuilder, tmp_path: Path) -> None:
    shaders(builder, "#version 450\nvoid main() {}\n", push=0)
    draw(builder, render_extent=[1 << 20, 4])
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(
        f"vkcap: error: {scenario}: commands[0].dispatch_fragment.render_extent[0]: 1048576 exceeds this device's "
        "maxFramebufferWidth ("), proc.stderr
