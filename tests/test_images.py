"""vkcore.resources.images on a real Vulkan device (lavapipe in CI): DeviceImage end to end.

Self-contained: a small harness here (one VulkanContext, allocate + bind, a one-time submitter with a
command pool and a fence, a minimal compute pipeline for GLSL shaders compiled with glslangValidator)
drives :class:`vkcore.resources.images.DeviceImage` without the scenario executor.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from tests.needs import missing
import vulkan as vk

from vkcore.device import memory
from tests.vkharness import Submitter
from vkcore.resources.buffers import create_buffer_handle
from vkcore.device.context import CUSTOM_BORDER_EXT, VulkanContext
from vkcore.errors import DeviceError, ScenarioError, UnsupportedDeviceFeature
from vkcore.resources.formats import FORMATS, dds_formats, format_info
from vkcore.resources.images import DeviceImage, SWAP_MIN_MAG_LIKE_REFERENCE, is_integer_format
from vkcore.resources.imageio import encode_png, read_dds, write_dds, write_png
from vkcore.resources.buffers import free_staging, staging_buffer
from vkcore.scenario.model import Image as ImageSpec
from vkcore.shaders.bindings import LayoutBinding

pytestmark = pytest.mark.device

RNG_SEED = 20240611
STORAGE_IMAGE = vk.VK_DESCRIPTOR_TYPE_STORAGE_IMAGE
COMBINED = vk.VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER
STORAGE_BUFFER = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER


# --------------------------------------------------------------------------------------------------------
# harness
# --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ctx() -> Iterator[VulkanContext]:
    try:
        context = VulkanContext(want_extensions=(CUSTOM_BORDER_EXT,))
    except DeviceError as exc:
        pytest.skip(f"no Vulkan device: {exc}")
    yield context
    context.close()


@pytest.fixture(scope="module")
def submit(ctx: VulkanContext) -> Iterator[Submitter]:
    s = Submitter(ctx)
    yield s
    s.destroy()


class Images:
    """Creates, allocates and binds images for one test; destroys them afterwards."""

    def __init__(self, ctx: VulkanContext, folder: Path) -> None:
        self.ctx, self.folder = ctx, folder
        self.live: list[tuple[DeviceImage, memory.Allocation]] = []

    def spec(self, **fields: Any) -> ImageSpec:
        body = {"uid": "img", "index": 3, "format": "VK_FORMAT_R32_SFLOAT", "dims": (1, 8, 4, 1),
                "shader_access": "readwrite"}
        body.update({k: v for k, v in fields.items() if v is not None})
        body["dims"] = tuple(body["dims"])
        return ImageSpec(**body)

    def create(self, ctx: VulkanContext | None = None, aliased: bool = False, **fields: Any) -> DeviceImage:
        context = ctx or self.ctx
        image = DeviceImage.create(context, self.spec(**fields), self.folder, aliased=aliased)
        req = image.requirements
        alloc = memory.allocate(context, req, req.size, host_access=False, what=image.uid)
        image.bind(alloc, 0)
        self.live.append((image, alloc))
        return image

    def load(self, submit: Submitter, **fields: Any) -> DeviceImage:
        image = self.create(**fields)
        src = fields.get("src")
        image.load_initial(self.folder / src if src else None, submit)
        return image

    def destroy(self) -> None:
        for image, alloc in reversed(self.live):
            image.destroy()
            memory.free(image.ctx, alloc)
        self.live.clear()


@pytest.fixture
def images(ctx: VulkanContext, tmp_path: Path) -> Iterator[Images]:
    made = Images(ctx, tmp_path)
    yield made
    made.destroy()


def snapshot(image: DeviceImage, submit: Submitter, offset: int = 0) -> bytes:
    """``record_snapshot`` into a staging buffer at ``offset``; the bytes it wrote."""
    handle, alloc = staging_buffer(image.ctx, offset + image.snapshot_size)
    try:
        alloc.zero(0, alloc.size)
        submit(lambda cb: image.record_snapshot(cb, handle, offset))
        assert alloc.view is not None
        return bytes(alloc.view[offset: offset + image.snapshot_size])
    finally:
        free_staging(image.ctx, handle, alloc)


def restore(image: DeviceImage, submit: Submitter, data: bytes, offset: int = 0) -> None:
    handle, alloc = staging_buffer(image.ctx, offset + len(data))
    try:
        assert alloc.view is not None
        alloc.view[offset: offset + len(data)] = data
        submit(lambda cb: image.record_restore(cb, handle, offset))
    finally:
        free_staging(image.ctx, handle, alloc)


def levels_of(image: DeviceImage, blob: bytes) -> list[bytes]:
    out, at = [], 0
    for size in image.level_sizes:
        out.append(blob[at: at + size])
        at += size
    assert at == len(blob)
    return out


_SPIRV: dict[str, bytes] = {}


def spirv(source: str, folder: Path) -> bytes:
    key = hashlib.sha256(source.encode()).hexdigest()
    if key not in _SPIRV:
        tool = shutil.which("glslangValidator")
        if tool is None:
            missing("glslangValidator is not installed")
        src, out = folder / f"{key[:12]}.comp", folder / f"{key[:12]}.spv"
        src.write_text(source)
        proc = subprocess.run([tool, "-V", "--target-env", "vulkan1.3", "-o", str(out), str(src)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _SPIRV[key] = out.read_bytes()
    return _SPIRV[key]


class HostBuffer:
    """A host-visible storage buffer for shader results."""

    def __init__(self, ctx: VulkanContext, size: int) -> None:
        self.ctx, self.size = ctx, size
        self.handle, req = create_buffer_handle(ctx, size)
        self.alloc = memory.allocate(ctx, req, req.size, host_access=True, what="results")
        vk.vkBindBufferMemory(ctx.device, self.handle, self.alloc.memory, 0)
        self.alloc.zero(0, size)

    def write(self, dst_set: Any, binding: int) -> Any:
        info = vk.VkDescriptorBufferInfo(buffer=self.handle, offset=0, range=self.size)
        return vk.VkWriteDescriptorSet(dstSet=dst_set, dstBinding=binding, descriptorCount=1,
                                       descriptorType=STORAGE_BUFFER, pBufferInfo=[info]), info

    def array(self, dtype: str) -> np.ndarray:
        assert self.alloc.view is not None
        return np.frombuffer(bytes(self.alloc.view[: self.size]), dtype=dtype)

    def destroy(self) -> None:
        vk.vkDestroyBuffer(self.ctx.device, self.handle, None)
        memory.free(self.ctx, self.alloc)


def dispatch(ctx: VulkanContext, submit: Submitter, source: str, folder: Path,
             bindings: list[tuple[int, Callable[[Any, int], Any]]], groups: tuple[int, int, int] = (1, 1, 1)) -> None:
    """Run a compute shader once. ``bindings``: (descriptor type, write maker(set, binding)) for bindings 0, 1, ..."""
    device = ctx.device
    code = spirv(source, folder)
    layout_bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=t, descriptorCount=1,
                                                       stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
                       for i, (t, _) in enumerate(bindings)]
    set_layout = vk.vkCreateDescriptorSetLayout(device, vk.VkDescriptorSetLayoutCreateInfo(pBindings=layout_bindings), None)
    sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=1) for t, _ in bindings]
    pool = vk.vkCreateDescriptorPool(device, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=sizes), None)
    dset = vk.vkAllocateDescriptorSets(device, vk.VkDescriptorSetAllocateInfo(descriptorPool=pool, pSetLayouts=[set_layout]))[0]
    writes, keep = [], []
    for i, (_, make) in enumerate(bindings):
        made = make(dset, i)
        if isinstance(made, tuple):
            writes.append(made[0])
            keep.append(made[1])
        else:  # a DescriptorWrite
            writes.append(made.write)
            keep.append(made.keepalive)
    vk.vkUpdateDescriptorSets(device, len(writes), writes, 0, None)
    module = vk.vkCreateShaderModule(device, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
    playout = vk.vkCreatePipelineLayout(device, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[set_layout]), None)
    stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName="main")
    pipeline = vk.vkCreateComputePipelines(device, vk.VK_NULL_HANDLE, 1,
                                           [vk.VkComputePipelineCreateInfo(stage=stage, layout=playout)], None)[0]

    def record(cb: Any) -> None:
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
        vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, playout, 0, 1, [dset], 0, None)
        vk.vkCmdDispatch(cb, *groups)
        barrier = vk.VkMemoryBarrier2(srcStageMask=vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT,
                                      srcAccessMask=vk.VK_ACCESS_2_SHADER_WRITE_BIT,
                                      dstStageMask=vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_2_HOST_BIT,
                                      dstAccessMask=vk.VK_ACCESS_2_MEMORY_READ_BIT | vk.VK_ACCESS_2_HOST_READ_BIT)
        vk.vkCmdPipelineBarrier2(cb, vk.VkDependencyInfo(pMemoryBarriers=[barrier]))

    try:
        submit(record)
    finally:
        vk.vkDestroyPipeline(device, pipeline, None)
        vk.vkDestroyPipelineLayout(device, playout, None)
        vk.vkDestroyShaderModule(device, module, None)
        vk.vkDestroyDescriptorPool(device, pool, None)
        vk.vkDestroyDescriptorSetLayout(device, set_layout, None)


def image_binding(image: DeviceImage, kind: int, lod: int | None = None) -> tuple[int, Any]:
    """A binding of ``image`` as the shader declares it (``kind``: a VkDescriptorType)."""
    return kind, lambda dset, i: image.descriptor(dset, i, lod, kind)


def random_texels(name: str, width: int, height: int, rng: np.random.Generator, levels: int = 1) -> list[bytes]:
    """Random file texels of every level (finite floats, so that blits and comparisons are meaningful)."""
    info = format_info(name)
    out = []
    for level in range(levels):
        n = max(width >> level, 1) * max(height >> level, 1)
        if info.dtype in ("<f4", "<f2"):
            data = rng.uniform(-4, 4, n * info.components).astype(info.dtype).tobytes()
        else:
            data = rng.integers(0, 256, n * info.file_bytes, dtype=np.uint8).tobytes()
        out.append(data)
    return out


def device_supports(ctx: VulkanContext, name: str) -> bool:
    info = format_info(name)
    vk_format = vk.VK_FORMAT_D32_SFLOAT if info.is_depth else info.vk_value
    return bool(vk.vkGetPhysicalDeviceFormatProperties(ctx.physical, vk_format).optimalTilingFeatures)


# --------------------------------------------------------------------------------------------------------
# files through the device
# --------------------------------------------------------------------------------------------------------

DDS_WRITABLE = [n for n in dds_formats() if not FORMATS[n].is_depth]
#: formats lavapipe (Mesa 22.3.6) makes no images of: their round trips run on a GPU (marker gpu), skip here
LAVAPIPE_LACKS = {"VK_FORMAT_R8G8B8_SINT", "VK_FORMAT_R8G8B8_SNORM"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.gpu) if n in LAVAPIPE_LACKS else n for n in DDS_WRITABLE])
def test_dds_round_trip_is_byte_identical(name: str, ctx: VulkanContext, submit: Submitter, images: Images,
                                          tmp_path: Path) -> None:
    info = format_info(name)
    width, height = 7, 5
    (data,) = random_texels(name, width, height, np.random.default_rng(RNG_SEED))
    write_dds(tmp_path / "in.dds", width, height, info.dxgi_format, [data])
    if not device_supports(ctx, name):
        with pytest.raises(UnsupportedDeviceFeature, match=f"format {name} cannot be an image with OPTIMAL tiling"):
            images.create(format=name, dims=(1, width, height, 1), src="in.dds")
        pytest.skip(f"{ctx.info.name} has no {name} images")
    image = images.load(submit, format=name, dims=(1, width, height, 1), src="in.dds", dst="out.dds")
    assert image.format is info and image.meta()["format"] == name
    image.write_dst(tmp_path / "out.dds", submit)
    assert (tmp_path / "out.dds").read_bytes() == (tmp_path / "in.dds").read_bytes()


def test_dds_mip_chain_loads_level_by_level_and_writes_level_zero(ctx: VulkanContext, submit: Submitter,
                                                                   images: Images, tmp_path: Path) -> None:
    """A DDS with 3 levels into a 4-level image: levels 0-2 are the file's, level 3 is generated; dst is level 0."""
    levels = random_texels("VK_FORMAT_R32_SFLOAT", 16, 8, np.random.default_rng(RNG_SEED + 1), levels=3)
    write_dds(tmp_path / "in.dds", 16, 8, 41, levels)
    image = images.load(submit, dims=(1, 16, 8, 1), mips=4, src="in.dds")
    got = levels_of(image, snapshot(image, submit))
    assert got[:3] == levels
    level2 = np.frombuffer(levels[2], np.float32).reshape(2, 4)
    expected3 = level2.reshape(1, 2, 2, 2).mean(axis=(1, 3))  # 4x2 -> 2x1: 2x2 boxes
    np.testing.assert_allclose(np.frombuffer(got[3], np.float32).reshape(1, 2), expected3, rtol=2e-7)
    image.write_dst(tmp_path / "out.dds", submit)
    write_dds(tmp_path / "expected.dds", 16, 8, 41, levels[:1])
    assert (tmp_path / "out.dds").read_bytes() == (tmp_path / "expected.dds").read_bytes()


def test_dds_source_replaces_the_format_with_a_warning(submit: Submitter, images: Images, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    data = np.arange(8 * 4 * 4, dtype=np.uint8).tobytes()
    write_dds(tmp_path / "in.dds", 8, 4, format_info("R8G8B8A8_UNORM").dxgi_format, [data])
    with caplog.at_level("WARNING", logger="vkcap.images"):
        image = images.load(submit, format="VK_FORMAT_R32_SFLOAT", src="in.dds")
    assert image.format.name == "VK_FORMAT_R8G8B8A8_UNORM" and image.vk_format == vk.VK_FORMAT_R8G8B8A8_UNORM
    assert image.warnings == ["image 'img': in.dds holds VK_FORMAT_R8G8B8A8_UNORM, which replaces the scenario's "
                              "format VK_FORMAT_R32_SFLOAT (as in the reference runner)"]
    assert image.warnings[0] in caplog.text
    assert snapshot(image, submit) == data


def test_depth_stencil_dds_loads_depth_only(submit: Submitter, images: Images, tmp_path: Path) -> None:
    texels = np.zeros((4, 8, 2), np.uint32)
    depth = np.linspace(0, 1, 32, dtype=np.float32).reshape(4, 8)
    texels[..., 0] = depth.view(np.uint32)
    texels[1, 2, 1] = 9  # a stencil byte
    write_dds(tmp_path / "in.dds", 8, 4, 20, [texels.tobytes()])
    image = images.load(submit, format="VK_FORMAT_D32_SFLOAT_S8_UINT", src="in.dds")
    assert image.vk_format == vk.VK_FORMAT_D32_SFLOAT and image.texel_bytes == 4 and image.snapshot_size == 128
    assert image.warnings == ["image 'img': in.dds: ignoring stencil data (the image holds depth only)"]
    assert snapshot(image, submit) == depth.tobytes()
    assert image.meta() == {"kind": "image", "format": "VK_FORMAT_D32_SFLOAT_S8_UINT", "dims": [1, 8, 4, 1],
                            "mips": 1, "size": 128, "tiling": "OPTIMAL", "texel_bytes": 4}


def test_png_round_trip_is_byte_identical(submit: Submitter, images: Images, tmp_path: Path) -> None:
    rgba = np.random.default_rng(RNG_SEED + 2).integers(0, 256, (6, 16, 4), dtype=np.uint8)
    rgba[:, :8] = 40  # some runs, so that the encoder's matches matter
    write_png(tmp_path / "in.png", 16, 6, rgba)
    image = images.load(submit, format="VK_FORMAT_R8G8B8A8_UNORM", dims=(1, 16, 6, 1), src="in.png", dst="out.png")
    assert snapshot(image, submit) == rgba.tobytes()
    image.write_dst(tmp_path / "out.png", submit)
    assert (tmp_path / "out.png").read_bytes() == (tmp_path / "in.png").read_bytes() == encode_png(16, 6, rgba)


def test_png_source_makes_an_rgba8_image(submit: Submitter, images: Images, tmp_path: Path) -> None:
    """Measured with the reference: an R32_SFLOAT image with a PNG src becomes R8G8B8A8_UNORM."""
    rgba = np.arange(8 * 4 * 4, dtype=np.uint8).reshape(4, 8, 4)
    write_png(tmp_path / "in.png", 8, 4, rgba)
    image = images.load(submit, format="VK_FORMAT_R32_SFLOAT", src="in.png", dst="out.dds")
    assert image.format.name == "VK_FORMAT_R8G8B8A8_UNORM"
    assert "a PNG source makes the image VK_FORMAT_R8G8B8A8_UNORM" in image.warnings[0]
    image.write_dst(tmp_path / "out.dds", submit)
    assert read_dds(tmp_path / "out.dds").dxgi_format == 28 and read_dds(tmp_path / "out.dds").levels == [rgba.tobytes()]


@pytest.mark.parametrize("name, dtype", [("VK_FORMAT_R32_SFLOAT", np.float32), ("VK_FORMAT_R8G8B8A8_UNORM", np.uint8),
                                         ("VK_FORMAT_R16G16_SFLOAT", np.float16),
                                         ("VK_FORMAT_D32_SFLOAT_S8_UINT", np.float32)])
def test_npy_source_is_nhwc(name: str, dtype: Any, submit: Submitter, images: Images, tmp_path: Path) -> None:
    info = format_info(name)
    arr = (np.arange(5 * 3 * info.components) % 200 / (200 if dtype != np.uint8 else 1)).astype(dtype)
    arr = arr.reshape(1, 3, 5, info.components)  # (1, H, W, C) for dims [1, W=5, H=3, 1]
    np.save(tmp_path / "in.npy", arr)
    image = images.load(submit, format=name, dims=(1, 5, 3, 1), src="in.npy")
    assert snapshot(image, submit) == arr.tobytes()


def test_no_source_is_zeros_on_every_level(submit: Submitter, images: Images) -> None:
    image = images.load(submit, format="VK_FORMAT_R16G16B16A16_SFLOAT", dims=(1, 8, 8, 1), mips=4)
    blob = snapshot(image, submit)
    assert len(blob) == 8 * (64 + 16 + 4 + 1) and not any(blob)
    depth = images.load(submit, uid="depth", format="VK_FORMAT_D32_SFLOAT_S8_UINT", dims=(1, 4, 4, 1), mips=3)
    assert snapshot(depth, submit) == bytes(4 * (16 + 4 + 1))


# --------------------------------------------------------------------------------------------------------
# mips, snapshots, restores
# --------------------------------------------------------------------------------------------------------

def box(level: np.ndarray) -> np.ndarray:
    """2x2 box filter of an (H, W, C) array with even sides (a side of 1 stays 1)."""
    h, w, c = level.shape
    out = level.astype(np.float64)
    if h > 1:
        out = out.reshape(h // 2, 2, w, c).mean(axis=1)
    if w > 1:
        out = out.reshape(out.shape[0], w // 2, 2, c).mean(axis=2)
    return out


@pytest.mark.parametrize("name", ["VK_FORMAT_R32_SFLOAT", "VK_FORMAT_R8G8B8A8_UNORM", "VK_FORMAT_R16G16B16A16_SFLOAT"])
def test_generated_mips_are_2x2_box_filters(name: str, submit: Submitter, images: Images, tmp_path: Path) -> None:
    info = format_info(name)
    rng = np.random.default_rng(RNG_SEED + 3)
    (data,) = random_texels(name, 16, 8, rng)
    if info.dtype == "<f4":
        data = rng.uniform(0.5, 4, 16 * 8).astype(np.float32).tobytes()  # one sign: ULPs are integers apart
    write_dds(tmp_path / "in.dds", 16, 8, info.dxgi_format, [data])
    image = images.load(submit, format=name, dims=(1, 16, 8, 1), mips=5, src="in.dds")
    assert image.blit_filter == vk.VK_FILTER_LINEAR
    got = levels_of(image, snapshot(image, submit))
    assert got[0] == data
    dtype = np.dtype(info.dtype)
    for level in range(1, 5):
        w, h = image.level_extent(level)
        prev = np.frombuffer(got[level - 1], dtype).reshape(max(8 >> (level - 1), 1), max(16 >> (level - 1), 1), -1)
        this = np.frombuffer(got[level], dtype).reshape(h, w, -1)
        expected = box(prev)
        if dtype == np.uint8:  # UNORM: 1 LSB
            assert np.abs(this.astype(np.int32) - np.rint(expected)).max() <= 1, level
        elif dtype == np.float32:  # 1 ULP
            ulps = np.abs(this.view(np.int32).astype(np.int64) - expected.astype(np.float32).view(np.int32))
            assert ulps.max() <= 1, (level, ulps.max())
        else:  # float16: 1 ULP of the result
            ulps = np.abs(this.view(np.int16).astype(np.int64) - expected.astype(np.float16).view(np.int16))
            assert ulps.max() <= 1, (level, ulps.max())


def test_integer_mips_are_nearest(submit: Submitter, images: Images, tmp_path: Path) -> None:
    """Integer formats cannot be filtered: each generated texel is one of its 2x2 block's texels."""
    rng = np.random.default_rng(RNG_SEED + 4)
    data = rng.integers(-128, 128, (8, 8, 4), dtype=np.int8)
    write_dds(tmp_path / "in.dds", 8, 8, format_info("R8G8B8A8_SINT").dxgi_format, [data.tobytes()])
    image = images.load(submit, format="VK_FORMAT_R8G8B8A8_SINT", dims=(1, 8, 8, 1), mips=2, src="in.dds")
    assert image.blit_filter == vk.VK_FILTER_NEAREST and is_integer_format(image.format)
    level1 = np.frombuffer(levels_of(image, snapshot(image, submit))[1], np.int8).reshape(4, 4, 4)
    for y in range(4):
        for x in range(4):
            block = data[2 * y: 2 * y + 2, 2 * x: 2 * x + 2].reshape(4, 4)
            assert any((level1[y, x] == t).all() for t in block), (y, x)


def test_format_without_blits_cannot_generate_mips(ctx: VulkanContext, images: Images, tmp_path: Path) -> None:
    name = "VK_FORMAT_B10G11R11_UFLOAT_PACK32"
    props = vk.vkGetPhysicalDeviceFormatProperties(ctx.physical, vk.VK_FORMAT_B10G11R11_UFLOAT_PACK32)
    if props.optimalTilingFeatures & vk.VK_FORMAT_FEATURE_BLIT_DST_BIT:
        pytest.skip("this device blits into B10G11R11")
    write_dds(tmp_path / "in.dds", 8, 8, format_info(name).dxgi_format, [bytes(8 * 8 * 4)])
    with pytest.raises(UnsupportedDeviceFeature) as err:
        images.create(format=name, dims=(1, 8, 8, 1), mips=2, src="in.dds")
    assert err.value.message == f"format {name} cannot generate mip levels on this device (no blit support with OPTIMAL tiling)"
    assert err.value.place == "resources[3].image.mips"
    images.create(format=name, dims=(1, 8, 8, 1), mips=2)  # no source: cleared, nothing to generate


def test_snapshot_holds_every_level_in_order_and_restore_inverts_it(submit: Submitter, images: Images,
                                                                    tmp_path: Path) -> None:
    rng = np.random.default_rng(RNG_SEED + 5)
    levels = random_texels("VK_FORMAT_R8G8B8A8_UNORM", 12, 6, rng, levels=3)
    write_dds(tmp_path / "in.dds", 12, 6, 28, levels)
    image = images.load(submit, format="VK_FORMAT_R8G8B8A8_UNORM", dims=(1, 12, 6, 1), mips=3, src="in.dds")
    assert image.level_sizes == [12 * 6 * 4, 6 * 3 * 4, 3 * 1 * 4] and image.snapshot_size == sum(image.level_sizes)
    assert image.meta() == {"kind": "image", "format": "VK_FORMAT_R8G8B8A8_UNORM", "dims": [1, 12, 6, 1], "mips": 3,
                            "size": image.snapshot_size, "tiling": "OPTIMAL", "texel_bytes": 4}
    assert snapshot(image, submit, offset=256) == b"".join(levels)
    other = rng.integers(0, 256, image.snapshot_size, dtype=np.uint8).tobytes()
    restore(image, submit, other, offset=64)
    assert snapshot(image, submit) == other
    with pytest.raises(DeviceError, match="staging offset 2 is not a multiple of 4"):
        snapshot(image, submit, offset=2)


def test_linear_image_round_trips_and_reports_its_row_pitch(submit: Submitter, images: Images, tmp_path: Path) -> None:
    data = np.arange(5 * 3, dtype=np.float32)
    np.save(tmp_path / "in.npy", data.reshape(1, 3, 5, 1))
    image = images.load(submit, dims=(1, 5, 3, 1), tiling="LINEAR", src="in.npy")
    assert image.meta()["tiling"] == "LINEAR"
    assert image.row_pitch() >= 5 * 4
    assert snapshot(image, submit) == data.tobytes()
    optimal = images.create(uid="opt")
    with pytest.raises(DeviceError, match="has OPTIMAL tiling"):
        optimal.row_pitch()


# --------------------------------------------------------------------------------------------------------
# shaders
# --------------------------------------------------------------------------------------------------------

STORE = """
#version 450
layout(local_size_x = 4, local_size_y = 4) in;
layout(set = 0, binding = 0, r32f) uniform writeonly image2D img;
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    ivec2 size = imageSize(img);
    if (p.x < size.x && p.y < size.y) imageStore(img, p, vec4(float(p.y * 100 + p.x) + 0.5 + float(size.x) * 1000.0));
}
"""


def stored(width: int, height: int) -> bytes:
    y, x = np.mgrid[0:height, 0:width]
    return (y * 100 + x + 0.5 + width * 1000.0).astype(np.float32).tobytes()


def test_shader_writes_a_storage_image(ctx: VulkanContext, submit: Submitter, images: Images, tmp_path: Path) -> None:
    image = images.load(submit, dims=(1, 8, 4, 1), shader_access="writeonly")
    dispatch(ctx, submit, STORE, tmp_path, [image_binding(image, STORAGE_IMAGE)], (2, 1, 1))
    assert snapshot(image, submit) == stored(8, 4)


def test_binding_a_single_lod(ctx: VulkanContext, submit: Submitter, images: Images, tmp_path: Path) -> None:
    """A storage binding with lod 1 writes level 1 only; a sampled binding with lod 1 sees level 1 as its level 0."""
    image = images.load(submit, dims=(1, 8, 4, 1), mips=3, shader_access="readwrite", src=None)
    dispatch(ctx, submit, STORE, tmp_path, [image_binding(image, STORAGE_IMAGE, lod=1)], (1, 1, 1))
    got = levels_of(image, snapshot(image, submit))
    assert got[0] == bytes(8 * 4 * 4) and got[1] == stored(4, 2) and got[2] == bytes(2 * 1 * 4)

    sampled = images.load(submit, uid="s", dims=(1, 8, 4, 1), mips=3, shader_access="image_read")
    restore(sampled, submit, b"".join(got))
    out = HostBuffer(images.ctx, 16 * 2)
    try:
        source = sample_source("vec2[](vec2(0.125, 0.25), vec2(0.875, 0.75))", 2)
        dispatch(ctx, submit, source, tmp_path, [image_binding(sampled, COMBINED, lod=1), (STORAGE_BUFFER, out.write)])
        texel = np.frombuffer(stored(4, 2), np.float32).reshape(2, 4)
        assert out.array("<f4").reshape(2, 4)[:, 0].tolist() == [texel[0, 0], texel[1, 3]]
        with pytest.raises(ScenarioError, match="MipMaps configured: 3, lod index requested: 3"):
            sampled.descriptor(None, 0, 3, COMBINED)
    finally:
        out.destroy()


SAMPLE = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform $Psampler2D img;
layout(set = 0, binding = 1) buffer Out { $Pvec4 o[]; };
const vec2 uv[$N] = $UV;
void main() { for (int i = 0; i < $N; i++) o[i] = textureLod(img, uv[i], 0.0); }
"""


def sample_source(uv: str, n: int, integer: bool = False) -> str:
    return SAMPLE.replace("$P", "i" if integer else "").replace("$UV", uv).replace("$N", str(n))
OUTSIDE = "vec2[](vec2(-0.5, -0.5), vec2(1.5, 0.5), vec2(0.5, 2.0), vec2(0.125, 0.125))"  # 3 outside, 1 inside


def sample_border(ctx: VulkanContext, submit: Submitter, images: Images, folder: Path, name: str, color: str,
                  custom: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """(values sampled at 3 points outside the image, the value inside) with CLAMP_BORDER and ``color``."""
    integer = is_integer_format(format_info(name))
    dtype = np.int8 if integer else np.float32
    data = (np.arange(4 * 4 * 4) % 50 + 1).astype(dtype)
    np.save(folder / "in.npy", data.reshape(1, 4, 4, 4))
    image = images.load(submit, uid=color, format=name, dims=(1, 4, 4, 1), shader_access="image_read", src="in.npy",
                        border_address_mode="CLAMP_BORDER", border_color=color, custom_border_color=custom)
    out = HostBuffer(ctx, 16 * 4)
    try:
        source = sample_source(OUTSIDE, 4, integer)
        dispatch(ctx, submit, source, folder, [image_binding(image, COMBINED), (STORAGE_BUFFER, out.write)])
        values = out.array("<i4" if integer else "<f4").reshape(4, 4)
    finally:
        out.destroy()
    assert values[3].tolist() == data.reshape(4, 4, 4)[0, 0].tolist()  # inside: texel (0, 0)
    return values[:3], values[3]


@pytest.mark.parametrize("color, expected", [
    ("FLOAT_TRANSPARENT_BLACK", (0, 0, 0, 0)), ("FLOAT_OPAQUE_BLACK", (0, 0, 0, 1)), ("FLOAT_OPAQUE_WHITE", (1, 1, 1, 1)),
])
def test_float_border_colors(color: str, expected: tuple, ctx: VulkanContext, submit: Submitter, images: Images,
                             tmp_path: Path) -> None:
    outside, _ = sample_border(ctx, submit, images, tmp_path, "VK_FORMAT_R32G32B32A32_SFLOAT", color)
    assert outside.tolist() == [list(map(float, expected))] * 3


@pytest.mark.parametrize("color, expected", [
    ("INT_TRANSPARENT_BLACK", (0, 0, 0, 0)), ("INT_OPAQUE_BLACK", (0, 0, 0, 1)), ("INT_OPAQUE_WHITE", (1, 1, 1, 1)),
])
def test_int_border_colors(color: str, expected: tuple, ctx: VulkanContext, submit: Submitter, images: Images,
                           tmp_path: Path) -> None:
    outside, _ = sample_border(ctx, submit, images, tmp_path, "VK_FORMAT_R8G8B8A8_SINT", color)
    assert outside.tolist() == [list(expected)] * 3


@pytest.mark.parametrize("name, color, custom", [
    ("VK_FORMAT_R32G32B32A32_SFLOAT", "FLOAT_CUSTOM_EXT", (0.25, -0.5, 0.75, 2.0)),
    ("VK_FORMAT_R8G8B8A8_SINT", "INT_CUSTOM_EXT", (-3, 7, 100, -100)),
])
def test_custom_border_colors(name: str, color: str, custom: tuple, ctx: VulkanContext, submit: Submitter,
                              images: Images, tmp_path: Path) -> None:
    if not ctx.has_extension(CUSTOM_BORDER_EXT):
        with pytest.raises(UnsupportedDeviceFeature) as err:
            images.create(format=name, border_color=color, custom_border_color=custom)
        assert err.value.message == (f"image 'img': border_color {color} needs {CUSTOM_BORDER_EXT}, which is not "
                                     f"enabled on device '{ctx.info.name}'")
        return
    outside, _ = sample_border(ctx, submit, images, tmp_path, name, color, custom)
    assert outside.tolist() == [list(custom)] * 3


def test_custom_border_color_without_the_extension_is_refused(images: Images) -> None:
    plain = VulkanContext()
    try:
        assert not plain.has_extension(CUSTOM_BORDER_EXT)
        with pytest.raises(UnsupportedDeviceFeature) as err:
            DeviceImage.create(plain, images.spec(border_color="FLOAT_CUSTOM_EXT", custom_border_color=(1, 0, 0, 1)),
                               images.folder)
        assert err.value.message == (f"image 'img': border_color FLOAT_CUSTOM_EXT needs {CUSTOM_BORDER_EXT}, which is "
                                     f"not enabled on device '{plain.info.name}'")
        assert err.value.place == "resources[3].image.border_color"
    finally:
        plain.close()


@pytest.mark.parametrize("mag_filter, expected", [("LINEAR", 4.0), ("NEAREST", 8.0)])
def test_sampler_filters_follow_the_specification(ctx: VulkanContext, submit: Submitter, images: Images,
                                                  tmp_path: Path, mag_filter: str, expected: float) -> None:
    """mag_filter is the magnification filter, as the specification says (the reference runner swaps
    min and mag; where text and reference disagree on a field's meaning, the text wins)."""
    assert not SWAP_MIN_MAG_LIKE_REFERENCE
    row = np.array([0, 8, 16, 24], np.float32)
    np.save(tmp_path / "in.npy", np.tile(row, (4, 1)).reshape(1, 4, 4, 1))
    other = "NEAREST" if mag_filter == "LINEAR" else "LINEAR"
    image = images.load(submit, dims=(1, 4, 4, 1), shader_access="image_read", src="in.npy",
                        min_filter=other, mag_filter=mag_filter)
    out = HostBuffer(ctx, 16)
    try:
        source = sample_source("vec2[](vec2(0.25, 0.5))", 1)  # a magnified lookup between texels 0 and 8
        dispatch(ctx, submit, source, tmp_path, [image_binding(image, COMBINED), (STORAGE_BUFFER, out.write)])
        assert out.array("<f4")[0] == expected
    finally:
        out.destroy()


def test_descriptor_types_where_no_shader_tells_follow_the_reference(images: Images) -> None:
    """The reference runner's mapping (measured): readonly and readwrite images are combined image
    samplers, writeonly and image_read ones storage images; VK_DESCRIPTOR_TYPE_STORAGE_IMAGE forces storage."""
    for access, want in (("readonly", COMBINED), ("readwrite", COMBINED), ("writeonly", STORAGE_IMAGE),
                         ("image_read", STORAGE_IMAGE)):
        assert images.create(uid=access, shader_access=access).descriptor_type("VK_DESCRIPTOR_TYPE_AUTO") == want
    forced = images.create(uid="forced", shader_access="readonly")
    assert forced.descriptor_type("VK_DESCRIPTOR_TYPE_STORAGE_IMAGE") == STORAGE_IMAGE
    write = forced.descriptor(None, 2, None, COMBINED)
    assert write.write.descriptorType == COMBINED and write.write.dstBinding == 2
    assert write.keepalive[0].imageLayout == vk.VK_IMAGE_LAYOUT_GENERAL and write.keepalive[0].sampler == forced.sampler


def test_check_binding_refuses_what_the_format_cannot_serve_on_this_device(ctx: VulkanContext, images: Images) -> None:
    place = "commands[0].dispatch_compute.bindings[0]"
    depth = images.create(uid="depth", format="VK_FORMAT_D32_SFLOAT_S8_UINT")
    storage = LayoutBinding(0, 0, "storage_image", "depth", None, place, None)
    features = vk.vkGetPhysicalDeviceFormatProperties(ctx.physical, vk.VK_FORMAT_D32_SFLOAT).optimalTilingFeatures
    if features & vk.VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT:  # NVIDIA: yes; lavapipe: no
        depth.check_binding(storage)
    else:
        assert not depth.can_store
        with pytest.raises(UnsupportedDeviceFeature) as err:
            depth.check_binding(storage)
        assert (err.value.place, err.value.message) == (place, (
            f"image 'depth': format VK_FORMAT_D32_SFLOAT_S8_UINT cannot be a storage image on device '{ctx.info.name}'"))
    ints = images.create(uid="ints", format="VK_FORMAT_R32_UINT", shader_access="image_read", mag_filter="LINEAR")
    with pytest.raises(UnsupportedDeviceFeature, match="cannot be sampled with a LINEAR filter on device"):
        ints.check_binding(LayoutBinding(0, 0, "combined_image_sampler", "ints", None, place, None))


# --------------------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------------------

def scenario_error(images: Images, **fields: Any) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        images.create(**fields)
    assert err.value.exit_code == 2
    return err.value


def test_dims_not_matching_the_file(images: Images, tmp_path: Path) -> None:
    write_dds(tmp_path / "in.dds", 5, 3, 41, [bytes(60)])
    err = scenario_error(images, dims=(1, 3, 5, 1), src="in.dds")
    assert err.message == f"{tmp_path / 'in.dds'}: DDS image height does not match that in the scenario file: 3 vs 5"
    assert err.place == "resources[3].image.src"
    write_png(tmp_path / "in.png", 4, 4, bytes(64))
    image = images.create(format="VK_FORMAT_R8G8B8A8_UNORM", dims=(1, 4, 2, 1), src="in.png")
    with pytest.raises(ScenarioError) as png_err:
        image.load_initial(tmp_path / "in.png", lambda record: None)
    assert png_err.value.message == f"{tmp_path / 'in.png'}: PNG is 4x4, the scenario expects 4x2"
    assert png_err.value.place == "resources[3].image.src"
    np.save(tmp_path / "in.npy", np.zeros((1, 4, 2, 1), np.float32))  # (1, H, W, C) the wrong way round
    npy_err = scenario_error(images, uid="n", dims=(1, 4, 2, 1), src="in.npy")  # the header is read at creation
    assert npy_err.message == (f"{tmp_path / 'in.npy'}: shape (1, 4, 2, 1) does not match the image: expected "
                                     "(1, 2, 4, 1) (1, H, W, C)")


def test_too_many_mips(images: Images) -> None:
    err = scenario_error(images, dims=(1, 8, 4, 1), mips=5)
    assert err.message == "too many mips: 5 for a 8x4 image, at most 4 (floor(log2(max(W, H))) + 1)"
    assert err.place == "resources[3].image.mips"
    assert scenario_error(images, mips=2, aliased=True).message == "A mipped image cannot be aliased"


def test_dds_with_more_levels_than_the_image(images: Images, tmp_path: Path) -> None:
    write_dds(tmp_path / "in.dds", 8, 4, 41, random_texels("VK_FORMAT_R32_SFLOAT", 8, 4, np.random.default_rng(1), 3))
    err = scenario_error(images, mips=2, src="in.dds")
    assert err.message == ("in.dds holds 3 mip levels, more than the image's mips (2); the reference refuses it too "
                           "(\"mipLevels must be between 1 and 2\")")


def test_png_for_a_format_other_than_rgba8(images: Images) -> None:
    err = scenario_error(images, format="VK_FORMAT_R32_SFLOAT", dst="out.png")
    assert err.message == "PNG export supports only VK_FORMAT_R8G8B8A8_UNORM: out.png is for a VK_FORMAT_R32_SFLOAT image"
    assert err.place == "resources[3].image.dst"


def test_other_bad_inputs(images: Images, tmp_path: Path) -> None:
    err = scenario_error(images, dims=(1, 4, 4, 2))
    assert err.message == ("image dims must be [1, W, H, 1] (dims[1] is the width, dims[2] the height), got "
                           "[1, 4, 4, 2]: 3-D and array images are not supported")
    assert err.place == "resources[3].image.dims"
    assert scenario_error(images, src="in.bmp").message == "Unsupported image source file type for in.bmp (.dds, .png or .npy)"
    assert scenario_error(images, dst="out.npy").message == ("Unsupported image destination format: out.npy (images are "
                                                             "written as .dds or .png)")
    assert scenario_error(images, format="VK_FORMAT_D32_SFLOAT_S8_UINT", dst="d.dds").message == (
        "d.dds: VK_FORMAT_D32_SFLOAT (a D32_SFLOAT_S8_UINT image holds depth only) cannot be written as DDS, "
        "as in the reference runner")
    assert scenario_error(images, format="VK_FORMAT_R8_UINT", dst="u.dds").message == (
        "u.dds: VK_FORMAT_R8_UINT cannot be written as DDS, as in the reference runner")
