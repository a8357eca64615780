"""All data resources of a scenario (buffers, images, tensors), created and bound.

Creation is two-phase so that a ``memory_group`` aliases members of any kind on one allocation: each
resource reports its memory requirements, the group's allocation is sized for the largest member at
its offset and made of a memory type every member accepts, then each member is bound at its offset.
A group is host-visible (and mapped) when all its members want host access.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, cast

import vulkan as vk

from ..device import memory
from ..device.context import VulkanContext
from ..errors import ScenarioError, UnsupportedDeviceFeature
from ..resources.base import DeviceResource, MemoryRequirements, OneTimeSubmit
from ..scenario import reference_phrases as phrases
from ..scenario.model import Buffer, Image, Resource, Scenario, Tensor

# kind -> factory(ctx, spec, scenario, already created resources, binding needs) -> DeviceResource. The
# binding needs map a usage flag the commands need to the JSON path of the first binding that needs it.
Factory = Callable[[VulkanContext, Any, Scenario, dict[str, DeviceResource], dict[int, str]], DeviceResource]


def group_key(spec: Any) -> str:
    """Which allocation a resource shares: its memory group, otherwise an allocation of its own."""
    return spec.memory_group or f"\0{spec.uid}"


def aliased_image(spec: Tensor, scenario: Scenario) -> Image | None:
    """The image a tensor shares memory with (the same memory group), if any."""
    if spec.memory_group:
        return next((r for r in scenario.resources if isinstance(r, Image) and r.memory_group == spec.memory_group), None)
    return None


def _buffer_factory(ctx: VulkanContext, spec: Buffer, scenario: Scenario, created: dict[str, DeviceResource],
                    needs: dict[int, str]) -> DeviceResource:
    from ..resources.buffers import DeviceBuffer

    return DeviceBuffer.create(ctx, spec)  # noqa: ARG001


def _tensor_factory(ctx: VulkanContext, spec: Tensor, scenario: Scenario, created: dict[str, DeviceResource],
                    needs: dict[int, str]) -> DeviceResource:
    """A tensor; one that aliases an image shares its tiling and, when LINEAR, lays its elements out
    like the image's memory: strides from the image's row pitch (dims NHWC or HWC)."""
    from ..device.arm_ffi import TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM
    from ..graphs.dispatch import DATA_GRAPH_USAGE, graph_bound_tensors
    from ..resources.tensor_resources import TensorResource
    from ..resources.tensors import TensorApi

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
    from ..commands import kind_of

    return {b.resource_ref for cmd in scenario.commands if kind_of(cmd).shaders(cmd) for b in kind_of(cmd).bindings(cmd)}


def check_tensor_format(api: Any, spec: Tensor, *, shader_bound: bool = True) -> None:
    """Refuse, before any Vulkan object exists, a tensor format this device cannot use with the
    tensor's tiling: in shaders where a shader binds it, else for the copies that load and read it
    (the emulation layer would accept it and fail later, or crash). On lavapipe's emulation layer,
    bfloat16 and float8 tensors have no shader support but do copy."""
    from ..device.arm_ffi import FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM
    from ..errors import UnsupportedDeviceFeature
    from ..resources.formats import format_info

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
                if isinstance(r, DATA_KINDS) and r.memory_group == spec.memory_group and r.uid in created
                and r.uid not in (spec.uid, image.uid)), default=0)


def image_strides(image: Any, spec: Tensor, others_end: int = 0) -> tuple[int, ...]:
    """Byte strides (outermost first) that put a tensor's [N,] H, W, C elements where a LINEAR image
    keeps its texels. The tensor covers rows of the image: all of them, or (as the reference allows) H
    rows of W texels from where its memory-group offset falls, which may be inside a row; checks that
    the dims describe rows of the image and that the tensor lies within it, or (as the reference runs it)
    reaches past the image only into memory another member of the group holds (``others_end``: where the
    furthest of them ends, from the group's start), whose bytes are defined."""
    from ..resources.formats import format_info

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


def _image_factory(ctx: VulkanContext, spec: Image, scenario: Scenario, created: dict[str, DeviceResource],
                   needs: dict[int, str]) -> DeviceResource:
    from ..resources.images import DeviceImage

    aliased = any(isinstance(r, Tensor) and aliased_image(r, scenario) == spec for r in scenario.resources)
    return DeviceImage.create(ctx, spec, scenario.base_dir, aliased=aliased, needs=needs)


FACTORIES: dict[type[Resource], Factory] = {Buffer: _buffer_factory, Tensor: _tensor_factory, Image: _image_factory}
DATA_KINDS = (Buffer, Image, Tensor)


class ResourceSet:
    """The scenario's data resources by uid; ``destroy`` releases resources and allocations."""

    def __init__(self, ctx: VulkanContext, scenario: Scenario, factories: dict[type[Resource], Factory] | None = None,
                 image_usage: dict[str, dict[int, str]] | None = None) -> None:
        """``image_usage``: what the commands' bindings need of each image (see
        :func:`vkcore.shaders.bindings.image_usage_needs`); an image not in it is bound by no command."""
        self.ctx = ctx
        self.scenario = scenario
        self.resources: dict[str, DeviceResource] = {}
        self._allocations: list[memory.Allocation] = []
        table = factories or FACTORIES
        groups: dict[str, list[tuple[Any, DeviceResource]]] = {}
        specs = [s for s in scenario.resources if isinstance(s, DATA_KINDS)]
        try:
            # Tensors last: one that aliases an image is laid out after the image.
            for spec in sorted(specs, key=lambda s: isinstance(s, Tensor)):
                try:
                    resource = table[type(spec)](ctx, spec, scenario, self.resources, (image_usage or {}).get(spec.uid, {}))
                except (ScenarioError, UnsupportedDeviceFeature) as exc:
                    if isinstance(exc, ScenarioError) or exc.place:  # a JSON path belongs with the scenario's file
                        exc.file = exc.file or str(scenario.path)
                    raise
                self.resources[spec.uid] = resource
                groups.setdefault(group_key(spec), []).append((spec, resource))
            for members in groups.values():
                self._bind_group(members)
        except BaseException:
            self.destroy()
            raise

    def _bind_group(self, members: list[tuple[Any, DeviceResource]]) -> None:
        type_bits, size = ~0, 0
        for spec, resource in members:
            req = resource.requirements
            offset = getattr(spec, "memory_offset", 0)
            if offset % req.alignment:
                raise ScenarioError(
                    f"offset {offset} is not a multiple of this device's alignment {req.alignment} for this {spec.KIND}",
                    file=self.scenario.path, place=f"{spec.place}.memory_group.offset",
                )
            type_bits &= req.memoryTypeBits
            size = max(size, offset + req.size)
        host = all(r.host_access for _, r in members)
        first = members[0][0]
        what = first.uid if len(members) == 1 else f"memory group '{first.memory_group}'"
        if not type_bits & 0xFFFFFFFF:
            raise ScenarioError(f"the members of {what} accept no common memory type on this device", file=self.scenario.path,
                                place=first.place)
        alloc = memory.allocate(self.ctx, MemoryRequirements(size, 1, type_bits & 0xFFFFFFFF), size, host_access=host, what=what)
        self._allocations.append(alloc)
        for spec, resource in members:
            resource.bind(alloc, getattr(spec, "memory_offset", 0))

    def __getitem__(self, uid: str) -> DeviceResource:
        return self.resources[uid]

    def __contains__(self, uid: str) -> bool:
        return uid in self.resources

    def __iter__(self) -> Iterator[DeviceResource]:
        return iter(self.resources.values())

    def of_kind(self, kind: str) -> list[DeviceResource]:
        return [r for r in self.resources.values() if r.kind == kind]

    def load_initial(self, submit: OneTimeSubmit, timer: Any = None) -> None:
        """Initial contents: every mapped allocation zeroed once (fresh memory holds leftovers), then
        resources without ``src``, then those with one, so that in a memory group the one member with
        a source is not overwritten by its aliases."""
        for alloc in self._allocations:
            if alloc.view is not None:
                alloc.zero(0, alloc.size)
        specs = [cast("Buffer | Image | Tensor", self.scenario.by_uid[uid]) for uid in self.resources]
        for spec in sorted(specs, key=lambda s: bool(getattr(s, "src", ""))):
            src = self.scenario.src_path(spec.src) if getattr(spec, "src", "") else None
            if timer is not None and src is not None:
                with timer.measure("Scenario Setup", f"Load Resource: {spec.uid}"):
                    self.resources[spec.uid].load_initial(src, submit)
            else:
                self.resources[spec.uid].load_initial(src, submit)

    def outputs(self, output_dir: Path | None) -> Iterable[tuple[DeviceResource, Path]]:
        for uid, resource in self.resources.items():
            dst = getattr(self.scenario.by_uid[uid], "dst", "")
            if dst:
                yield resource, self.scenario.dst_path(dst, output_dir)

    def destroy(self) -> None:
        for r in self.resources.values():
            r.destroy()
        for a in self._allocations:
            memory.free(self.ctx, a)
        self.resources.clear()
        self._allocations.clear()
