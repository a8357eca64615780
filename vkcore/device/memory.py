"""Device memory allocations and host mappings.

An :class:`Allocation` is one ``VkDeviceMemory``. When it is host-visible it is mapped once, for its
whole life, and exposes a writable ``memoryview`` over the mapping: inputs are read from files straight
into it and outputs written from it, with no intermediate copy.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import vulkan as vk

from .context import VulkanContext
from ..errors import DeviceError

HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
HOST_COHERENT = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
HOST_CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
DEVICE_LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT


@dataclass
class Allocation:
    memory: Any
    size: int
    type_index: int
    flags: int
    view: memoryview | None = None  # the whole mapping when host-visible
    address: int = 0  # host address of the mapping

    def zero(self, offset: int, size: int) -> None:
        """Fill ``size`` bytes of the mapping from ``offset`` with zeros."""
        assert self.view is not None and 0 <= offset and offset + size <= self.size
        ctypes.memset(self.address + offset, 0, size)

    @property
    def host_visible(self) -> bool:
        return bool(self.flags & HOST_VISIBLE)

    @property
    def host_cached(self) -> bool:
        return bool(self.flags & HOST_CACHED)


def can_map(ctx: VulkanContext, memory_type_bits: int) -> bool:
    """Whether any memory type of ``memory_type_bits`` is host-visible and coherent (what ``host_access`` needs)."""
    mp = ctx.memory_properties
    wanted = HOST_VISIBLE | HOST_COHERENT
    return any(memory_type_bits & (1 << i) and mp.memoryTypes[i].propertyFlags & wanted == wanted
               for i in range(mp.memoryTypeCount))


def allocate(ctx: VulkanContext, requirements: Any, size: int, *, host_access: bool, what: str) -> Allocation:
    """Allocate ``size`` bytes for ``requirements``; map it when ``host_access`` (host-visible, coherent).

    Prefers device-local memory that is also host-cached (integrated GPUs, CPU drivers), then
    host-visible + cached, then any host-visible. Falls back to the next candidate type when an
    allocation fails (e.g. a small resizable-BAR heap). Raises :class:`DeviceError` naming ``what``.
    """
    bits = requirements.memoryTypeBits
    mp = ctx.memory_properties
    if host_access:
        required = HOST_VISIBLE | HOST_COHERENT
        orders: tuple[int, ...] = (DEVICE_LOCAL | HOST_CACHED, HOST_CACHED, DEVICE_LOCAL, 0)
    else:
        required = 0
        orders = (DEVICE_LOCAL, 0)
    tried: list[int] = []
    for preferred in orders:
        for i in range(mp.memoryTypeCount):
            flags = mp.memoryTypes[i].propertyFlags
            if i in tried or not bits & (1 << i) or (flags & (required | preferred)) != (required | preferred):
                continue
            tried.append(i)
            info = vk.VkMemoryAllocateInfo(allocationSize=size, memoryTypeIndex=i)
            try:
                memory = vk.vkAllocateMemory(ctx.device, info, None)
            except (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory):
                continue
            alloc = Allocation(memory, size, i, flags)
            if host_access:
                alloc.view, alloc.address = map_whole(ctx, memory, size)
            return alloc
    raise DeviceError(f"cannot allocate {size} bytes of {'host-visible ' if host_access else ''}memory for {what}")


def map_whole(ctx: VulkanContext, memory: Any, size: int) -> tuple[memoryview, int]:
    """Map ``memory``; return a writable byte view of it (valid until the memory is freed) and its address."""
    pp = vk.ffi.new("void **")
    result = vk.lib.vkMapMemory(ctx.device, memory, 0, size, 0, pp)
    if result != vk.VK_SUCCESS:
        raise DeviceError(f"vkMapMemory failed ({result})")
    return memoryview(vk.ffi.buffer(pp[0], size)).cast("B"), int(vk.ffi.cast("uintptr_t", pp[0]))


def free(ctx: VulkanContext, alloc: Allocation) -> None:
    if alloc.view is not None:
        alloc.view.release()
        alloc.view = None
        vk.vkUnmapMemory(ctx.device, alloc.memory)
    vk.vkFreeMemory(ctx.device, alloc.memory, None)
