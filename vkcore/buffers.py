"""Storage buffers and the memory groups that alias them on one allocation.

Buffers live in host-visible, host-cached memory, mapped for their whole life: a ``src`` .npy payload
is read from the file straight into the mapping, and ``dst`` is written from it. Buffers of one
``memory_group`` are bound at offset 0 of a single allocation sized for the largest member, so they
alias exactly as the reference runner's do.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import vulkan as vk

from . import memory
from .device import VulkanContext
from .errors import ScenarioError
from .npyio import read_header
from .scenario import Buffer as BufferSpec

BUFFER_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)


@dataclass
class DeviceBuffer:
    """A ``VkBuffer`` bound to (part of) an allocation, with a byte view of its contents."""

    uid: str
    handle: Any
    size: int
    allocation: memory.Allocation
    offset: int = 0

    @property
    def view(self) -> memoryview:
        assert self.allocation.view is not None
        return self.allocation.view[self.offset : self.offset + self.size]


def create_buffer_handle(ctx: VulkanContext, size: int, usage: int = BUFFER_USAGE) -> tuple[Any, Any]:
    handle = vk.vkCreateBuffer(ctx.device, vk.VkBufferCreateInfo(size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
    return handle, vk.vkGetBufferMemoryRequirements(ctx.device, handle)


def fill_from_npy(view: memoryview, path: Path) -> int:
    """Copy the payload of the .npy file at ``path`` into ``view`` (which must be large enough).

    Reads with ``readinto`` directly into the view: no intermediate array. Returns the bytes copied.
    """
    header = read_header(path)
    n = header.nbytes
    with open(path, "rb", buffering=0) as f:
        f.seek(header.data_offset)
        done = 0
        target = view[:n]
        while done < n:
            got = f.readinto(target[done:])
            if not got:
                raise OSError(f"{path}: unexpected end of file")
            done += got
    return n


class BufferSet:
    """All buffers of a scenario, created and bound, grouped by memory group."""

    def __init__(self, ctx: VulkanContext, specs: Iterable[BufferSpec]) -> None:
        self.ctx = ctx
        self.buffers: dict[str, DeviceBuffer] = {}
        self._allocations: list[memory.Allocation] = []
        groups: dict[str, list[BufferSpec]] = {}
        for spec in specs:
            groups.setdefault(spec.memory_group or f"\0{spec.uid}", []).append(spec)
        for members in groups.values():
            self._create_group(members)

    def _create_group(self, members: list[BufferSpec]) -> None:
        handles = [(spec, *create_buffer_handle(self.ctx, spec.size)) for spec in members]
        type_bits = ~0
        size = 0
        for spec, handle, req in handles:
            if spec.memory_offset % req.alignment:
                for _, h, _ in handles:
                    vk.vkDestroyBuffer(self.ctx.device, h, None)
                raise ScenarioError(
                    f"offset {spec.memory_offset} is not a multiple of this device's buffer alignment {req.alignment}",
                    place=f"{spec.place}.memory_group.offset",
                )
            type_bits &= req.memoryTypeBits
            size = max(size, spec.memory_offset + req.size)
        req = vk.VkMemoryRequirements(size=size, alignment=1, memoryTypeBits=type_bits & 0xFFFFFFFF)
        what = members[0].uid if len(members) == 1 else f"memory group '{members[0].memory_group}'"
        alloc = memory.allocate(self.ctx, req, size, host_access=True, what=what)
        self._allocations.append(alloc)
        for spec, handle, _ in handles:
            vk.vkBindBufferMemory(self.ctx.device, handle, alloc.memory, spec.memory_offset)
            self.buffers[spec.uid] = DeviceBuffer(spec.uid, handle, spec.size, alloc, spec.memory_offset)

    def __getitem__(self, uid: str) -> DeviceBuffer:
        return self.buffers[uid]

    def __contains__(self, uid: str) -> bool:
        return uid in self.buffers

    def destroy(self) -> None:
        for b in self.buffers.values():
            vk.vkDestroyBuffer(self.ctx.device, b.handle, None)
        for a in self._allocations:
            memory.free(self.ctx, a)
        self.buffers.clear()
        self._allocations.clear()
