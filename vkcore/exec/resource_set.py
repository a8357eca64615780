"""All data resources of a scenario (buffers, images, tensors), created and bound.

Creation is two-phase so that a ``memory_group`` aliases members of any kind on one allocation: each
resource reports its memory requirements, the group's allocation is sized for the largest member at
its offset and made of a memory type every member accepts, then each member is bound at its offset.
A group is host-visible (and mapped) when all its members want host access.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, cast

from ..device import memory
from ..device.context import VulkanContext
from ..errors import ScenarioError, UnsupportedDeviceFeature
from ..resources.base import DeviceResource, MemoryRequirements, OneTimeSubmit
from ..resources.kinds import creation_order, data_resources, resource_kind
from ..resources.memory_groups import group_key
from ..scenario.model import Buffer, Image, Resource, Scenario, Tensor

# A resource kind's factory (vkcore.resources.kinds): (ctx, spec, scenario, already created resources, binding
# needs) -> DeviceResource. The binding needs map a usage flag the commands need to the JSON path of the first
# binding that needs it.
Factory = Callable[[VulkanContext, Any, Scenario, dict[str, DeviceResource], dict[int, str]], DeviceResource]


class ResourceSet:
    """The scenario's data resources by uid; ``destroy`` releases resources and allocations."""

    def __init__(self, ctx: VulkanContext, scenario: Scenario, factories: dict[type[Resource], Factory] | None = None,
                 image_usage: dict[str, dict[int, str]] | None = None) -> None:
        """``factories``: a factory to use instead of its kind's, by model class (tests); ``image_usage``: what
        the commands' bindings need of each image (see :func:`vkcore.shaders.bindings.image_usage_needs`); an
        image not in it is bound by no command."""
        self.ctx = ctx
        self.scenario = scenario
        self.resources: dict[str, DeviceResource] = {}
        self._allocations: list[memory.Allocation] = []
        instead = factories or {}
        groups: dict[str, list[tuple[Any, DeviceResource]]] = {}
        specs = data_resources(scenario.resources)
        try:
            for spec in creation_order(specs):  # a tensor that aliases an image is laid out after the image
                try:
                    factory = instead.get(type(spec)) or resource_kind(spec).make()
                    resource = factory(ctx, spec, scenario, self.resources, (image_usage or {}).get(spec.uid, {}))
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
            offset = spec.memory_offset
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
            resource.bind(alloc, spec.memory_offset)

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
        for spec in sorted(specs, key=lambda s: bool(s.src)):
            src = self.scenario.src_path(spec.src) if spec.src else None
            if timer is not None and src is not None:
                with timer.measure("Scenario Setup", f"Load Resource: {spec.uid}"):
                    self.resources[spec.uid].load_initial(src, submit)
            else:
                self.resources[spec.uid].load_initial(src, submit)

    def outputs(self, output_dir: Path | None) -> Iterable[tuple[DeviceResource, Path]]:
        for uid, resource in self.resources.items():
            dst = cast("Buffer | Image | Tensor", self.scenario.by_uid[uid]).dst
            if dst:
                yield resource, self.scenario.dst_path(dst, output_dir)

    def destroy(self) -> None:
        for r in self.resources.values():
            r.destroy()
        for a in self._allocations:
            memory.free(self.ctx, a)
        self.resources.clear()
        self._allocations.clear()
