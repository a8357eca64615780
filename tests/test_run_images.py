"""Image scenarios end to end through ``vkcap run``/``record``/``replay``/``export``, checked against numpy.

(Dispatches that bind images are compared with the reference runner, byte for byte, in
``test_reference_image_bindings.py``; here, loading and writing images without a dispatch are.)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.needs import missing

from tests.builders import WRITE_PATTERN, ScenarioBuilder, image_pattern, load_output, vkcap
from tests.reference import assert_same_outputs, reference_runner, run_reference
from vkcore.resources.imageio import read_dds, write_dds

pytestmark = pytest.mark.device

W, H = 8, 4


# texelFetch of every texel of an RGBA8 input, written to a buffer as floats.
READ_IMAGE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform sampler2D src;
layout(set = 0, binding = 1) buffer O { vec4 o[]; };
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    o[p.y * WIDTH + p.x] = texelFetch(src, p, LOD);
}
"""


def image(b: ScenarioBuilder, uid: str, fmt: str, **fields: object) -> None:
    b.resources.append({"image": {"uid": uid, "dims": [1, W, H, 1], "format": fmt,
                                  "shader_access": fields.pop("shader_access", "readwrite"), **fields}})


def write_scenario(b: ScenarioBuilder) -> Path:
    b.shader("write", WRITE_PATTERN)
    image(b, "img", "VK_FORMAT_R32G32B32A32_SFLOAT", dst="img.dds", shader_access="writeonly")
    b.dispatch("write", [(0, 0, "img")], [W, H])
    b.boundary(["img"], 0)
    return b.save()


def expected_written() -> np.ndarray:
    return image_pattern(W, H)


@pytest.mark.slow
def test_storage_image_written_to_dds(builder: ScenarioBuilder, tmp_path: Path) -> None:
    proc = vkcap("run", write_scenario(builder), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    dds = read_dds(tmp_path / "img.dds")
    assert (dds.width, dds.height, dds.mip_levels) == (W, H, 1)
    np.testing.assert_array_equal(np.frombuffer(dds.levels[0], np.float32).reshape(H, W, 4), expected_written())


@pytest.mark.slow
def test_dds_input_sampled_by_a_shader(builder: ScenarioBuilder, tmp_path: Path) -> None:
    rgba = np.random.default_rng(5).integers(0, 256, (H, W, 4), dtype=np.uint8)
    write_dds(builder.root / "in.dds", W, H, 28, [rgba.tobytes()])  # DXGI_FORMAT_R8G8B8A8_UNORM
    builder.shader("read", READ_IMAGE, build_options=f"-DWIDTH={W} -DLOD=0")
    image(builder, "src", "VK_FORMAT_R8G8B8A8_UNORM", src="in.dds", shader_access="image_read")
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.dispatch("read", [(0, 0, "src"), (0, 1, "out")], [W, H])
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = load_output(tmp_path / "out.npy", np.float32).reshape(H, W, 4)
    np.testing.assert_allclose(got, rgba.astype(np.float32) / 255, atol=1e-6)


@pytest.mark.slow
def test_recorded_initial_state_of_a_sampled_image_and_a_buffer(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The initial state (checkpoint -1) comes back from the device in one submission for the image
    and from the mapping for the buffer; the image, which its shader only samples, is never read
    back again: every frame names its initial blob."""
    from capture.trace import Trace

    rgba = np.random.default_rng(6).integers(0, 256, (H, W, 4), dtype=np.uint8)
    write_dds(builder.root / "in.dds", W, H, 28, [rgba.tobytes()])
    start = np.arange(W * H * 4, dtype=np.float32)
    builder.shader("read", READ_IMAGE, build_options=f"-DWIDTH={W} -DLOD=0")
    image(builder, "src", "VK_FORMAT_R8G8B8A8_UNORM", src="in.dds", shader_access="image_read")
    builder.buffer("out", W * H * 16, start)
    for k in range(3):
        builder.dispatch("read", [(0, 0, "src"), (0, 1, "out")], [W, H]).boundary(["src", "out"], k)
    trace_path = tmp_path / "t.vkt"
    proc = vkcap("record", builder.save(), "-o", trace_path)
    assert proc.returncode == 0, proc.stderr
    with Trace.open(trace_path) as trace:
        initial = trace.checkpoints[-1]
        np.testing.assert_array_equal(np.frombuffer(trace.blob(initial["src"], what="initial src"), np.uint8).reshape(H, W, 4), rgba)
        np.testing.assert_array_equal(np.frombuffer(trace.blob(initial["out"], what="initial out"), np.float32), start)
        assert [f.snapshots["src"] for f in trace.frames] == [initial["src"]] * 3
        got = np.frombuffer(trace.snapshot(2, "out"), np.float32).reshape(H, W, 4)
        np.testing.assert_allclose(got, rgba.astype(np.float32) / 255, atol=1e-6)


@pytest.mark.slow
def test_generated_mip_level_sampled(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Level 1 is generated with a linear blit: each texel the mean of a 2x2 block of level 0."""
    values = np.random.default_rng(6).random((H, W, 4), dtype=np.float32)
    write_dds(builder.root / "in.dds", W, H, 2, [values.tobytes()])  # DXGI_FORMAT_R32G32B32A32_FLOAT
    builder.shader("read", READ_IMAGE, build_options=f"-DWIDTH={W // 2} -DLOD=1")
    image(builder, "src", "VK_FORMAT_R32G32B32A32_SFLOAT", src="in.dds", mips=2, shader_access="image_read")
    builder.buffer("out", (W // 2) * (H // 2) * 16, dst="out.npy")
    builder.dispatch("read", [(0, 0, "src"), (0, 1, "out")], [W // 2, H // 2])
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    box = values.reshape(H // 2, 2, W // 2, 2, 4).mean(axis=(1, 3))
    np.testing.assert_allclose(load_output(tmp_path / "out.npy", np.float32).reshape(H // 2, W // 2, 4), box, rtol=1e-6)


@pytest.mark.slow
def test_image_record_replay_export(builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario = write_scenario(builder)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path / "rec")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(vkcap("info", trace, "--json").stdout)
    assert info["resources"]["img"]["raw_bytes"] == W * H * 16
    exported = tmp_path / "frame0.dds"
    assert vkcap("export", trace, "--frame", "0", "--resource", "img", "-o", exported).returncode == 0
    assert exported.read_bytes() == (tmp_path / "rec" / "img.dds").read_bytes()
    as_npy = tmp_path / "frame0.npy"
    assert vkcap("export", trace, "--frame", "0", "--resource", "img", "-o", as_npy).returncode == 0
    np.testing.assert_array_equal(np.load(as_npy)[0], expected_written())
    assert vkcap("replay", trace).returncode == 0
    bad = builder.file("bad.comp", WRITE_PATTERN.replace("p.x * 10 + p.y", "p.x * 10 + p.y + ((p.x == 5 && p.y == 2) ? 0.25 : 0.0)"))
    report = tmp_path / "r.json"
    heatmaps = tmp_path / "heat"
    proc = vkcap("replay", trace, "--replace-shader", f"write={bad}", "--json", report, "--heatmap", heatmaps)
    assert proc.returncode == 1
    first = json.loads(report.read_text())["frames"][0]["resources"][0]
    assert (first["uid"], first["dtype"], first["differing"], first["max_abs"]) == ("img", "float32", 1, 0.25)
    assert [p.name for p in heatmaps.iterdir()] == ["frame00000-img.png"]
    assert first["first_index"] == [2, 5, 2]  # (row, column, component) of level 0


@pytest.mark.slow
@pytest.mark.parametrize("dxgi, fmt, texel", [(28, "VK_FORMAT_R8G8B8A8_UNORM", 4), (41, "VK_FORMAT_R32_SFLOAT", 4),
                                               (10, "VK_FORMAT_R16G16B16A16_SFLOAT", 8)])
def test_image_src_to_dst_matches_the_reference(builder: ScenarioBuilder, tmp_path: Path, dxgi: int, fmt: str, texel: int) -> None:
    """A DDS loaded into an image and written back (no dispatch): byte-identical to the reference runner."""
    data = np.random.default_rng(dxgi).integers(0, 256, W * H * texel, dtype=np.uint8)
    if "SFLOAT" in fmt:  # finite floats only
        data = (np.random.default_rng(dxgi).random(W * H * texel // (2 if "R16" in fmt else 4)).astype(
            np.float16 if "R16" in fmt else np.float32)).view(np.uint8)
    write_dds(builder.root / "in.dds", W, H, dxgi, [data.tobytes()])
    image(builder, "img", fmt, src="in.dds", dst="out.dds", shader_access="readonly")
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ours" / "out.dds").read_bytes() == (builder.root / "in.dds").read_bytes()
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, ["out.dds"])


@pytest.mark.slow
@pytest.mark.reference
def test_image_dispatches_match_the_reference(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A storage image written by a shader (a ``writeonly`` image, which the reference also binds as a
    storage image), byte for byte against the reference runner."""
    if reference_runner() is None:
        missing("ai-ml-sdk-scenario-runner is not installed (it ships for Python 3.11 only)")
    scenario = write_scenario(builder)
    ref = run_reference(scenario, tmp_path / "reference")
    assert ref.returncode == 0, ref.stderr[-2000:]
    ours = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert ours.returncode == 0, ours.stderr
    assert (tmp_path / "ours" / "img.dds").read_bytes() == (tmp_path / "reference" / "img.dds").read_bytes()
