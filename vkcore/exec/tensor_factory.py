"""How the session makes a ``tensor`` resource (the tensor kind's factory, :mod:`vkcore.resources.kinds`).
It lives with the session, not in :mod:`vkcore.resources`, because it asks the commands (a layer above
resources) how they bind the tensor.

A tensor that aliases an image (one ``memory_group``) shares its tiling and, when LINEAR, lays its
elements out like the image's memory; a tensor a data graph binds gets DATA_GRAPH usage; its format is
checked against the device before any Vulkan object exists.
"""
from __future__ import annotations

from typing import Any

import vulkan as vk

from ..commands import kind_of
from ..device.arm_ffi import FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM, TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM
from ..device.context import VulkanContext
from ..errors import ScenarioError, UnsupportedDeviceFeature
from ..graphs.dispatch import DATA_GRAPH_USAGE, graph_bound_tensors
from ..scenario import reference_phrases as phrases
from ..scenario.model import Image, Scenario, Tensor
from ..resources.base import DeviceResource
from ..resources.formats import format_info
from ..resources.kinds import holds_data
from ..resources.memory_groups import aliased_image
from ..resources.tensor_resources import TensorResource
from ..resources.tensors import TensorApi


def create_tensor(ctx: VulkanContext, spec: Tensor, scenario: Scenario, created: dict[str, DeviceResource],
                  needs: dict[int, str]) -> DeviceResource:
    """A tensor; one that aliases an image shares its tiling and, when LINEAR, lays its elements out
    like the image's memory: strides from the image's row pitch (dims NHWC or HWC)."""
    api = TensorApi.load(ctx)
    check_tensor_format(api, spec, shader_bound=spec.uid in shader_bound_resources(scenario))
    image_spec = aliased_image(spec, scenario)
    strides, extra = None, 0
    if image_spec is not None:
        image = created[image_spec.uid]
        tiling = "LINEAR" if getattr(image, "tiling", None) == vk.VK_IMAGE_TILING_LINEAR else "OPTIMAL"
        mine = (spec.tiling or "LINEAR").upper()
        if tiling and tiling != mine:
            raise ScenarioError(f"{phrases.ALIAS_TILING}: tensor '{spec.uid}' is {mine} but the image '{image_spec.uid}' it "
                                f"aliases is {tiling}", place=f"{spec.place}.tiling")
        extra = TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM
        if mine == "LINEAR":
            strides = image_strides(image, spec, group_end(spec, scenario, created, image_spec))
    if spec.uid in graph_bound_tensors(scenario):
        extra |= DATA_GRAPH_USAGE  # a dispatch_graph binds it
    return TensorResource.create(ctx, api, spec, strides, extra_usage=extra)


FORMAT_FEATURE_2_TRANSFER = 0x4000 | 0x8000  # VK_FORMAT_FEATURE_2_TRANSFER_SRC_BIT | _DST_BIT


def shader_bound_resources(scenario: Scenario) -> set[str]:
    """Uids a shader binds (a compute or fragment dispatch; a graph's bindings are not shaders')."""
    return {b.resource_ref for cmd in scenario.commands if kind_of(cmd).shaders(cmd) for b in kind_of(cmd).bindings(cmd)}


def check_tensor_format(api: Any, spec: Tensor, *, shader_bound: bool = True) -> None:
    """Refuse, before any Vulkan object exists, a tensor format this device cannot use with the
    tensor's tiling: in shaders where a shader binds it, else for the copies that load and read it
    (the emulation layer would accept it and fail later, or crash). On lavapipe's emulation layer,
    bfloat16 and float8 tensors have no shader support but do copy."""
    try:
        vk_format = format_info(spec.format).vk_value
    except KeyError:
        return  # the tensor resource reports unknown formats with their place
    tiling = (spec.tiling or "LINEAR").upper()
    optimal, linear = api.format_features(vk_format)
    features = linear if tiling == "LINEAR" else optimal
    needed, use = ((FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM, "in shaders") if shader_bound
                   else (FORMAT_FEATURE_2_TRANSFER, "for transfers"))
    if features & needed != needed:
        raise UnsupportedDeviceFeature(
            f"this device cannot use {spec.format} tensors with {tiling} tiling {use}", place=f"{spec.place}.format"
        )


def group_end(spec: Tensor, scenario: Scenario, created: dict[str, DeviceResource], image: Image) -> int:
    """Where the memory of ``spec``'s group ends for what is not the tensor nor its image: the largest
    ``offset + size`` of the group's other members created so far (0 when there are none)."""
    return max((getattr(r, "memory_offset", 0) + created[r.uid].requirements.size for r in scenario.resources
                if holds_data(r) and r.memory_group == spec.memory_group and r.uid in created
                and r.uid not in (spec.uid, image.uid)), default=0)


def image_strides(image: Any, spec: Tensor, others_end: int = 0) -> tuple[int, ...]:
    """Byte strides (outermost first) that put a tensor's [N,] H, W, C elements where a LINEAR image
    keeps its texels. The tensor covers rows of the image: all of them, or (as the reference allows) H
    rows of W texels from where its memory-group offset falls, which may be inside a row; checks that
    the dims describe rows of the image and that the tensor lies within it, or (as the reference runs it)
    reaches past the image only into memory another member of the group holds (``others_end``: where the
    furthest of them ends, from the group's start), whose bytes are defined."""
    fmt = format_info(spec.format)
    element = fmt.block_bytes
    dims = list(spec.dims)
    pitch = image.row_pitch()
    start = spec.memory_offset - image.spec.memory_offset
    expected = [image.height, image.width, image.texel_bytes // element]
    rows = dims[-3] if len(dims) in (3, 4) else 0
    if (len(dims) not in (3, 4) or dims[-2:] != expected[1:] or (len(dims) == 4 and dims[0] != 1)
            or not 1 <= rows <= image.height):
        innermost = (f"{phrases.ALIAS_INNERMOST}: {dims[-1]}, must match number of components of image: {expected[2]}; "
                     if dims and dims[-1] != expected[2] else "")
        raise ScenarioError(
            f"{innermost}tensor dims {dims} do not describe the image '{image.uid}' it aliases: expected [1, H, {expected[1]}, "
            f"{expected[2]}] (N, H, W, C) with H at most {expected[0]}, for a {image.width}x{image.height} "
            f"{image.format.name} image", place=f"{spec.place}.dims",
        )
    end = start + (rows - 1) * pitch + image.width * image.texel_bytes
    if start < 0 or (end > image.height * pitch and image.spec.memory_offset + end > others_end):
        raise ScenarioError(
            f"tensor '{spec.uid}' starts {start} bytes into the image '{image.uid}' it aliases and covers {rows} "
            f"row(s) of {pitch} bytes: it must lie within the image's {image.height} rows, or within another member "
            f"of memory group '{spec.memory_group}'", place=f"{spec.place}.memory_group.offset",
        )
    strides = (pitch, image.texel_bytes, element)
    return ((rows * pitch,) + strides) if len(dims) == 4 else strides
