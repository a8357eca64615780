"""All data resources of a scenario (buffers, images, tensors), created and bound.

Creation is two-phase so that a ``memory_group`` aliases members of any kind on one allocation: each
resource reports its memory requirements, the group's allocation is sized for the largest member at
its offset and made of a memory type every member accepts, then each member is bound at its offset.
A group is host-visible (and mapped) when all its members want host access.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from . import memory
from .device import VulkanContext
from .errors import ScenarioError
from .resources import DeviceResource, MemoryRequirements, OneTimeSubmit
from .scenario import Buffer, Image, Resource, Scenario, Tensor

# kind -> factory(ctx, spec, scenario) -> DeviceResource; image and tensor factories register here.
Factory = Callable[[VulkanContext, Any, Scenario], DeviceResource]


def _buffer_factory(ctx: VulkanContext, spec: Buffer, scenario: Scenario) -> DeviceResource:
    from .buffers import DeviceBuffer

    return DeviceBuffer.create(ctx, spec)


def _tensor_factory(ctx: VulkanContext, spec: Tensor, scenario: Scenario) -> DeviceResource:
    from .tensor_resources import TensorResource
    from .tensors import TensorApi

    return TensorResource.create(ctx, TensorApi.load(ctx), spec)


def _image_factory(ctx: VulkanContext, spec: Image, scenario: Scenario) -> DeviceResource:
    from .images import DeviceImage

    aliased = bool(spec.memory_group) or any(isinstance(r, Tensor) and r.alias_target == spec.uid for r in scenario.resources)
    return DeviceImage.create(ctx, spec, scenario.base_dir, aliased=aliased)


FACTORIES: dict[type[Resource], Factory] = {Buffer: _buffer_factory, Tensor: _tensor_factory, Image: _image_factory}
DATA_KINDS = (Buffer, Image, Tensor)


class ResourceSet:
    """The scenario's data resources by uid; ``destroy`` releases resources and allocations."""

    def __init__(self, ctx: VulkanContext, scenario: Scenario, factories: dict[type[Resource], Factory] | None = None) -> None:
        self.ctx = ctx
        self.scenario = scenario
        self.resources: dict[str, DeviceResource] = {}
        self._allocations: list[memory.Allocation] = []
        table = factories or FACTORIES
        groups: dict[str, list[tuple[Any, DeviceResource]]] = {}
        try:
            for spec in scenario.resources:
                if isinstance(spec, DATA_KINDS):
                    try:
                        resource = table[type(spec)](ctx, spec, scenario)
                    except ScenarioError as exc:
                        exc.file = exc.file or str(scenario.path)
                        raise
                    self.resources[spec.uid] = resource
                    key = getattr(spec, "memory_group", "") or f"\0{spec.uid}"
                    groups.setdefault(key, []).append((spec, resource))
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
        specs = [self.scenario.by_uid[uid] for uid in self.resources]
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
