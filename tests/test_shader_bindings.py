"""The shader decides how each resource is bound: ``vkcap run`` against numpy (and the reference runner
where it runs the scenario), and one line with the binding's JSON path for every binding a shader
contradicts, before the driver sees a pipeline."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import vulkan as vk

from tests.builders import ADD_FLOAT, WRITE_PATTERN, ScenarioBuilder, image_pattern, load_output, vkcap
from tests.reference import assert_same_outputs, reference_runner, run_reference

W, H = 8, 4
IMAGE_RGBA32F = "VK_FORMAT_R32G32B32A32_SFLOAT"

STORE = WRITE_PATTERN
FETCH = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform sampler2D src;
layout(set = 0, binding = 1) buffer O { vec4 o[]; };
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    o[p.y * 8 + p.x] = texelFetch(src, p, 0);
}
"""


def stored() -> np.ndarray:
    return image_pattern(W, H)


def image(b: ScenarioBuilder, uid: str, fmt: str = IMAGE_RGBA32F, **fields: object) -> None:
    b.resources.append({"image": {"uid": uid, "dims": [1, W, H, 1], "format": fmt,
                                  "shader_access": fields.pop("shader_access", "readwrite"), **fields}})


def error_line(scenario: Path, tmp_path: Path) -> str:
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --------------------------------------------------------------------------------------------------------
# what runs, and gives the right numbers
# --------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
@pytest.mark.reference
def test_an_image_written_as_storage_then_sampled(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A ``readwrite`` image is a storage image in one dispatch and a combined image sampler in the
    next, as each shader declares it: the image's usage is the union. The reference runner binds a
    ``readwrite`` image as a combined image sampler in both, a layout the first shader contradicts:
    the validation layer says so (VUID-VkComputePipelineCreateInfo-layout-00703), lavapipe then
    crashes in vkCreateComputePipelines (SIGSEGV) and NVIDIA's driver runs it regardless. Where the
    scenario forces the first binding's descriptor_type, both runners agree byte for byte."""
    builder.shader("store", STORE).shader("fetch", FETCH)
    image(builder, "img")
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.dispatch("store", [(0, 0, "img")], [W, H, 1])
    builder.dispatch("fetch", [(0, 0, "img"), (0, 1, "out")], [W, H, 1])
    plain = builder.save()
    proc = vkcap("run", plain, "--output", tmp_path / "plain")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "plain" / "out.npy", np.float32).reshape(H, W, 4), stored())
    builder.commands[0]["dispatch_compute"]["bindings"][0]["descriptor_type"] = "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE"
    forced = builder.save("forced.json")
    proc = vkcap("run", forced, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    ours = (tmp_path / "ours" / "out.npy").read_bytes()
    assert ours == (tmp_path / "plain" / "out.npy").read_bytes()
    if reference_runner() is not None:
        undefined = run_reference(plain, tmp_path / "ref-plain", validate=True)
        assert "VUID-VkComputePipelineCreateInfo-layout-00703" in undefined.stdout, undefined.stdout[-2000:]
        ref = run_reference(forced, tmp_path / "reference")
        assert ref.returncode == 0, ref.stderr[-2000:]
        assert ours == (tmp_path / "reference" / "out.npy").read_bytes()


@pytest.mark.device
def test_a_declared_binding_the_shader_never_uses_need_not_be_bound(builder: ScenarioBuilder, tmp_path: Path) -> None:
    source = ADD_FLOAT.replace("void main()", "layout(set = 1, binding = 5) buffer Unused { float u[]; };\nvoid main()")
    builder.shader("add", source)
    a, b = np.arange(4, dtype=np.float32), np.full(4, 0.5, dtype=np.float32)
    builder.buffer("a", 16, a).buffer("b", 16, b).buffer("c", 16, dst="c.npy")
    builder.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1])
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "c.npy", np.float32), a + b)


@pytest.mark.slow
@pytest.mark.device
def test_a_uniform_block_is_bound_as_a_uniform_buffer(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("scale", """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform Params { vec4 k; };
layout(set = 0, binding = 1) buffer O { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = o[i] * k.x + k.y; }
""")
    values = np.arange(8, dtype=np.float32)
    builder.buffer("params", 16, np.array([3, 0.25, 0, 0], dtype=np.float32), shader_access="readonly")
    builder.buffer("o", 32, values, dst="o.npy")
    builder.dispatch("scale", [(0, 0, "params"), (0, 1, "o")], [8, 1, 1])
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", builder.save(), "--output", tmp_path, "-o", trace)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "o.npy", np.float32), values * 3 + 0.25)
    layouts = json.loads(vkcap("info", trace, "--json").stdout)["pipeline_layouts"]
    assert layouts == [{"command": 0, "shader": "scale", "stage": "compute", "push_constants_size": 0, "bindings": [
        {"set": 0, "binding": 0, "descriptor_type": "uniform_buffer", "resource": "params", "declared": True},
        {"set": 0, "binding": 1, "descriptor_type": "storage_buffer", "resource": "o", "declared": True}]}]


@pytest.mark.device
def test_a_separate_sampler_and_texture_bound_to_one_image(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``sampler`` takes the image's sampler, ``texture2D`` its view: NEAREST sampling at texel
    centres returns the texels."""
    builder.shader("split", """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform sampler s;
layout(set = 0, binding = 1) uniform texture2D t;
layout(set = 0, binding = 2) buffer O { vec4 o[]; };
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    o[p.y * 8 + p.x] = texture(sampler2D(t, s), (vec2(p) + 0.5) / vec2(8, 4));
}
""")
    builder.shader("store", STORE)
    image(builder, "img")
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.dispatch("store", [(0, 0, "img")], [W, H, 1])
    builder.dispatch("split", [(0, 0, "img"), (0, 1, "img"), (0, 2, "out")], [W, H, 1])
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "out.npy", np.float32).reshape(H, W, 4), stored())


@pytest.mark.slow
@pytest.mark.device
def test_an_unused_shader_without_its_file_is_a_warning(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """As in the reference runner: a shader no command uses is never compiled, so a missing file is
    only worth a warning; both runners write the same output."""
    builder.shader("add", ADD_FLOAT)
    builder.resources.append({"shader": {"uid": "ghost", "src": "missing.comp", "type": "GLSL"}})
    a = np.arange(4, dtype=np.float32)
    builder.buffer("a", 16, a).buffer("b", 16, a).buffer("c", 16, dst="c.npy")
    builder.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1])
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        f"vkcap: {scenario}: resources[1].shader.src: file not found: {builder.root / 'missing.comp'}; no command "
        "uses shader 'ghost', so it is not compiled (as in the reference runner)")
    np.testing.assert_array_equal(load_output(tmp_path / "ours" / "c.npy", np.float32), a + a)
    trace = tmp_path / "t.vkt"
    assert vkcap("record", scenario, "-o", trace, "--output", tmp_path / "rec").returncode == 0
    assert vkcap("replay", trace).returncode == 0
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, ["c.npy"])


@pytest.mark.slow
@pytest.mark.device
def test_push_data_shorter_than_declared_is_zero_padded(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("p", """#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { float x; float y; float z; float w; } p;
layout(set = 0, binding = 0) buffer C { float c[]; };
void main() { c[0] = p.x; c[1] = p.y; c[2] = p.z; c[3] = p.w; }
""", push_constants_size=16)
    builder.raw("push", np.array([1.5, 2.5], dtype=np.float32))
    builder.buffer("c", 16, np.full(4, 7, dtype=np.float32), dst="c.npy")
    builder.dispatch("p", [(0, 0, "c")], [1, 1, 1], push_data_ref="push")
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "ours" / "c.npy", np.float32), [1.5, 2.5, 0, 0])
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, ["c.npy"])


# --------------------------------------------------------------------------------------------------------
# what a shader contradicts: one line, exit 2, before any pipeline
# --------------------------------------------------------------------------------------------------------

READ_BUFFER = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { a[0] += 1.0; }
"""


def contradiction(b: ScenarioBuilder, shader: str, resource: str, binding: dict[str, object]) -> Path:
    """A dispatch of ``shader`` binding ``resource`` at set 0 binding 0 (with ``binding``'s extra fields),
    and buffer 'o' at binding 1 where the shader declares one."""
    b.shader("s", shader)
    image(b, "img")
    b.buffer("buf", 64).buffer("o", 4096)
    b.dispatch("s", [(0, 0, resource), *([(0, 1, "o")] if "binding = 1" in shader else [])], [1, 1, 1])
    b.commands[0]["dispatch_compute"]["bindings"][0].update(binding)
    return b.save()


CONTRADICTIONS = {
    "buffer where an image is declared": (STORE, "buf", {},
        "commands[0].dispatch_compute.bindings[0]: shader 's' declares set 0 binding 0 as a storage image (image2D) "
        "'img' of format Rgba32f, but 'buf' is a buffer"),
    "image where a buffer is declared": (READ_BUFFER, "img", {},
        "commands[0].dispatch_compute.bindings[0]: shader 's' declares set 0 binding 0 as a storage buffer 'A', but "
        "'img' is an image"),
    "descriptor_type against the shader": (FETCH.replace("layout(set = 0, binding = 1) buffer O { vec4 o[]; };", "")
                                           .replace("o[p.y * 8 + p.x] = ", "vec4 v = "), "img",
                                           {"descriptor_type": "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE"},
        "commands[0].dispatch_compute.bindings[0].descriptor_type: descriptor_type VK_DESCRIPTOR_TYPE_STORAGE_IMAGE "
        "contradicts the shader: shader 's' declares set 0 binding 0 as a combined image sampler (sampler2D) 'src'"),
    "descriptor array": ("#version 450\nlayout(local_size_x = 1) in;\nlayout(set = 0, binding = 0) uniform sampler2D "
                         "t[3];\nlayout(set = 0, binding = 1) buffer O { vec4 o; };\nvoid main() { o = texture(t[1], "
                         "vec2(0)); }\n", "img", {},
        "commands[0].dispatch_compute.bindings[0]: shader 's' declares set 0 binding 0 as a combined image sampler "
        "(sampler2D) 't' (an array of 3); a binding binds one resource, so descriptor arrays are not supported"),
    "3-D image": ("#version 450\nlayout(local_size_x = 1) in;\nlayout(set = 0, binding = 0, rgba32f) uniform "
                  "writeonly image3D v;\nvoid main() { imageStore(v, ivec3(0), vec4(1)); }\n", "img", {},
        "commands[0].dispatch_compute.bindings[0]: shader 's' declares set 0 binding 0 as a storage image (image2D) "
        "'v' of format Rgba32f with a 3D image type; image resources are single-layer 2-D images (declare "
        "image2D/sampler2D/texture2D)"),
    "storage format": (STORE.replace("rgba32f", "r32f"), "img", {},
        "commands[0].dispatch_compute.bindings[0]: the shader declares a storage image (image2D) 'img' of format R32f, "
        "which is VK_FORMAT_R32_SFLOAT, but image 'img' is VK_FORMAT_R32G32B32A32_SFLOAT (a storage image's declared "
        "format must match the image's)"),
    "texel type": (FETCH.replace("sampler2D", "usampler2D").replace("vec4 o[]", "uvec4 o[]"), "img", {},
        "commands[0].dispatch_compute.bindings[0]: the shader reads image 'img' as uint texels (a combined image "
        "sampler (sampler2D) 'src'), but its format VK_FORMAT_R32G32B32A32_SFLOAT holds float texels"),
}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_a_binding_that_contradicts_its_shader_is_one_line(builder: ScenarioBuilder, tmp_path: Path, case: str) -> None:
    shader, resource, binding, message = CONTRADICTIONS[case]
    scenario = contradiction(builder, shader, resource, binding)
    assert error_line(scenario, tmp_path) == f"vkcap: error: {scenario}: {message}"


@pytest.mark.device
def test_a_used_binding_left_unbound_is_one_line(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("add", ADD_FLOAT)
    builder.buffer("a", 16).buffer("c", 16)
    builder.dispatch("add", [(0, 0, "a"), (0, 2, "c")], [4, 1, 1])
    scenario = builder.save()
    assert error_line(scenario, tmp_path) == (
        f"vkcap: error: {scenario}: commands[0].dispatch_compute.bindings: shader 'add' uses set 0 binding 1, a "
        "storage buffer 'B', which this command does not bind (it binds: set 0 binding 0, set 0 binding 2)")


@pytest.mark.device
def test_an_entry_point_the_module_lacks_is_one_line(builder: ScenarioBuilder, tmp_path: Path) -> None:
    tool = shutil.which("glslangValidator")
    assert tool is not None, "glslang-tools is a test dependency (the Makefile installs it)"
    src = builder.file("add.comp", ADD_FLOAT)
    subprocess.run([tool, "-V", str(src), "-o", str(builder.root / "add.spv")], check=True, capture_output=True)
    builder.resources.append({"shader": {"uid": "add", "src": "add.spv", "type": "SPIR-V", "entry": "other"}})
    builder.buffer("a", 16).buffer("b", 16).buffer("c", 16)
    builder.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1])
    scenario = builder.save()
    assert error_line(scenario, tmp_path) == (
        f"vkcap: error: {scenario}: resources[0].shader.entry: shader 'add' has no compute entry point 'other' (it "
        "has 'main' (compute))")


def _device_features() -> tuple[str, int, int]:
    """The default device's name, D32_SFLOAT optimal-tiling features (what a D32_SFLOAT_S8_UINT image is
    created as) and shaderStorageImageReadWithoutFormat."""
    instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
        pApplicationInfo=vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))), None)
    try:
        physical = vk.vkEnumeratePhysicalDevices(instance)[0]
        name = vk.vkGetPhysicalDeviceProperties(physical).deviceName
        depth = vk.vkGetPhysicalDeviceFormatProperties(physical, vk.VK_FORMAT_D32_SFLOAT).optimalTilingFeatures
        return name, int(depth), int(vk.vkGetPhysicalDeviceFeatures(physical).shaderStorageImageReadWithoutFormat)
    finally:
        vk.vkDestroyInstance(instance, None)


@pytest.mark.device
def test_a_storage_binding_of_a_format_the_device_cannot_store(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The error names the binding, the format and the device (lavapipe cannot store depth; NVIDIA can)."""
    builder.shader("s", STORE.replace("layout(set = 0, binding = 0, rgba32f)", "layout(set = 0, binding = 0)"))
    image(builder, "img", "VK_FORMAT_D32_SFLOAT_S8_UINT")
    builder.dispatch("s", [(0, 0, "img")], [W, H, 1])
    scenario = builder.save()
    name, features, _ = _device_features()
    if features & vk.VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT:
        assert vkcap("run", scenario, "--output", tmp_path).returncode == 0
        return
    assert error_line(scenario, tmp_path) == (
        f"vkcap: error: {scenario}: commands[0].dispatch_compute.bindings[0]: image 'img' is bound here as a storage "
        f"image, but format VK_FORMAT_D32_SFLOAT_S8_UINT cannot be a storage image with OPTIMAL tiling on device "
        f"'{name}'")


@pytest.mark.device
def test_a_capability_the_device_lacks(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """imageLoad from an image2D without a format needs shaderStorageImageReadWithoutFormat (lavapipe
    22.3 lacks it; NVIDIA has it, and the texels come back)."""
    builder.shader("s", """#version 450
#extension GL_EXT_shader_image_load_formatted : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform image2D img;
layout(set = 0, binding = 1) buffer O { vec4 o[]; };
void main() { ivec2 p = ivec2(gl_GlobalInvocationID.xy); o[p.y * 8 + p.x] = imageLoad(img, p); }
""").shader("store", STORE)
    image(builder, "img")
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.dispatch("store", [(0, 0, "img")], [W, H, 1]).dispatch("s", [(0, 0, "img"), (0, 1, "out")], [W, H, 1])
    scenario = builder.save()
    name, _, read_without_format = _device_features()
    if read_without_format:
        assert vkcap("run", scenario, "--output", tmp_path).returncode == 0
        np.testing.assert_array_equal(load_output(tmp_path / "out.npy", np.float32).reshape(H, W, 4), stored())
        return
    assert error_line(scenario, tmp_path) == (
        f"vkcap: error: {scenario}: resources[0].shader: shader 's' declares the SPIR-V capability "
        f"StorageImageReadWithoutFormat, which needs shaderStorageImageReadWithoutFormat, a feature device '{name}' lacks")


@pytest.mark.slow
@pytest.mark.device
def test_a_trace_needing_a_storage_format_this_device_lacks(tmp_path: Path) -> None:
    """``tests/data/depth_storage/recorded_on_h100.vkt`` was recorded on an NVIDIA H100, which stores to
    D32_SFLOAT images. A device that cannot (lavapipe) refuses its replay in one line naming the trace,
    the binding, the format and itself; one that can replays it within tolerance."""
    trace = Path(__file__).parent / "data" / "depth_storage" / "recorded_on_h100.vkt"
    info = json.loads(vkcap("info", trace, "--json").stdout)
    assert info["fingerprint"]["device_name"] == "NVIDIA H100 80GB HBM3"
    assert info["pipeline_layouts"][0]["bindings"] == [
        {"set": 0, "binding": 0, "descriptor_type": "storage_image", "resource": "depth", "declared": True,
         "image_format": "Unknown"}]
    name, depth_features, _ = _device_features()
    proc = vkcap("replay", trace)
    if depth_features & vk.VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT:
        assert proc.returncode == 0, proc.stderr
        return
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"vkcap: error: {trace}: commands[0].dispatch_compute.bindings[0]: image 'depth' is bound here as a storage "
        f"image, but format VK_FORMAT_D32_SFLOAT_S8_UINT cannot be a storage image with OPTIMAL tiling on device '{name}'"))


@pytest.mark.device
def test_per_stage_descriptor_limits_count_what_the_shader_declares(tmp_path: Path) -> None:
    """The device's per-stage limits are checked against the resolved descriptor kinds (a combined image
    sampler counts as a sampled image and as a sampler), with the command's JSON path."""
    from vkcore.device.context import VulkanContext
    from vkcore.errors import UnsupportedDeviceFeature
    from vkcore.commands.stage_limits import refuse_beyond_stage_limits
    from vkcore.scenario.load import load_scenario

    scenario = load_scenario(ScenarioBuilder(tmp_path / "s").buffer("b", 4).save())
    with VulkanContext() as ctx:
        samplers = int(ctx.limits.maxPerStageDescriptorSamplers)
        refuse_beyond_stage_limits(ctx, scenario, "commands[0].dispatch_compute", ["sampler"] * samplers)
        with pytest.raises(UnsupportedDeviceFeature) as err:
            refuse_beyond_stage_limits(ctx, scenario, "commands[0].dispatch_compute",
                                       ["combined_image_sampler"] + ["sampler"] * samplers)
        assert err.value.place == "commands[0].dispatch_compute.bindings"
        assert err.value.message == (f"{samplers + 1} samplers in one dispatch, more than device '{ctx.info.name}' "
                                     f"allows (maxPerStageDescriptorSamplers {samplers})")


def test_a_compute_dispatch_of_a_shader_of_another_stage(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``stage`` decides how GLSL is compiled (a vertex shader compiles as one) and what may run it."""
    builder.shader("vs", "#version 450\nvoid main() { gl_Position = vec4(0.0); }\n", file="vs.vert", stage="vertex")
    builder.buffer("b", 16)
    builder.dispatch("vs", [(0, 0, "b")], [1, 1, 1])
    scenario = builder.save()
    assert error_line(scenario, tmp_path) == (
        f"vkcap: error: {scenario}: commands[0].dispatch_compute.shader_ref: shader 'vs' is a vertex shader; "
        "dispatch_compute needs a compute shader here")


def test_glsl_is_compiled_for_its_stage(builder: ScenarioBuilder) -> None:
    from vkcore.scenario.load import load_scenario
    from vkcore.shaders.compile import load_shader
    from vkcore.shaders.spirv import reflect

    builder.shader("vs", "#version 450\nvoid main() { gl_Position = vec4(float(gl_VertexIndex)); }\n", file="vs.vert",
                   stage="vertex")
    builder.shader("fs", "#version 450\nlayout(location = 0) out vec4 c;\nvoid main() { c = vec4(1.0); }\n",
                   file="fs.frag", stage="fragment")
    scenario = load_scenario(builder.save())
    models = [reflect(load_shader(scenario, spec).code).entry_points for spec in scenario.resources[:2]]  # type: ignore[arg-type]
    assert models == [{"main": "vertex"}, {"main": "fragment"}]


@pytest.mark.slow
@pytest.mark.device
def test_color_attachment_images(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``color_attachment`` adds the usage (the image still loads and writes as before); a format that
    cannot be one is refused at that field, naming the device."""
    values = np.random.default_rng(3).random((H, W, 4), dtype=np.float32)
    from vkcore.resources.imageio import write_dds

    write_dds(builder.root / "in.dds", W, H, 2, [values.tobytes()])
    image(builder, "img", src="in.dds", dst="out.dds", color_attachment=True)
    loaded = builder.save()
    proc = vkcap("run", loaded, "--output", tmp_path / "ok")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ok" / "out.dds").read_bytes() == (builder.root / "in.dds").read_bytes()
    assert_same_outputs(loaded, tmp_path / "ok", tmp_path, ["out.dds"])
    builder.resources[0]["image"].update(format="VK_FORMAT_D32_SFLOAT_S8_UINT", src="", dst="")
    scenario = builder.save()
    name = _device_features()[0]
    assert error_line(scenario, tmp_path) == (
        f"vkcap: error: {scenario}: resources[0].image.color_attachment: format VK_FORMAT_D32_SFLOAT_S8_UINT cannot be "
        f"a color attachment with OPTIMAL tiling on device '{name}'")
