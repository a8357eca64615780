"""Storage buffers: the ``buffer`` resource kind.

Buffers live in host-visible, host-cached memory, mapped for their whole life: a ``src`` .npy payload
is read from the file straight into the mapping, and ``dst`` is written from it. Snapshots are GPU
copies into the staging ring (see :mod:`vkcore.resources.base`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import vulkan as vk

from ..device import memory
from ..device.context import VulkanContext
from ..errors import UnsupportedDeviceFeature
from ..scenario.npyio import read_header, write_flat_int8
from .base import DescriptorWrite, MemoryRequirements, OneTimeSubmit
from ..scenario.model import Buffer as BufferSpec
from ..device.sync import AFTER_COPY, BEFORE_COPY, BarrierBatch, memory_barrier

if TYPE_CHECKING:
    from ..shaders.bindings import LayoutBinding

BUFFER_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)


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


def record_buffer_copy(cb: Any, src: Any, src_offset: int, dst: Any, dst_offset: int, size: int) -> None:
    """A whole-range copy with the barriers that make it safe inside a frame: prior writes visible
    to the transfer before, the copy visible to the host and to later commands after."""
    BarrierBatch(memory=[memory_barrier(*BEFORE_COPY)]).record(cb)
    vk.vkCmdCopyBuffer(cb, src, dst, 1, [vk.VkBufferCopy(srcOffset=src_offset, dstOffset=dst_offset, size=size)])
    BarrierBatch(memory=[memory_barrier(*AFTER_COPY)]).record(cb)


def staging_buffer(ctx: Any, size: int) -> tuple[Any, Any]:
    """A host-visible transfer buffer of ``size`` bytes, mapped: (buffer, allocation). Caller frees both."""
    handle, req = create_buffer_handle(ctx, max(size, 4), vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
    alloc = memory.allocate(ctx, req, req.size, host_access=True, what="staging")
    vk.vkBindBufferMemory(ctx.device, handle, alloc.memory, 0)
    return handle, alloc


def free_staging(ctx: Any, handle: Any, alloc: Any) -> None:
    vk.vkDestroyBuffer(ctx.device, handle, None)
    memory.free(ctx, alloc)


@dataclass
class DeviceBuffer:
    """A ``VkBuffer`` bound to (part of) an allocation, with a byte view of its contents."""

    ctx: VulkanContext
    spec: BufferSpec
    handle: Any
    memory_requirements: Any
    allocation: memory.Allocation | None = None
    offset: int = 0
    kind: str = "buffer"

    @classmethod
    def create(cls, ctx: VulkanContext, spec: BufferSpec) -> "DeviceBuffer":
        handle, req = create_buffer_handle(ctx, spec.size)
        return cls(ctx, spec, handle, req)

    @property
    def uid(self) -> str:
        return self.spec.uid

    @property
    def size(self) -> int:
        return self.spec.size

    @property
    def requirements(self) -> MemoryRequirements:
        r = self.memory_requirements
        return MemoryRequirements(r.size, r.alignment, r.memoryTypeBits)

    @property
    def host_access(self) -> bool:
        return True

    def bind(self, allocation: memory.Allocation, offset: int) -> None:
        vk.vkBindBufferMemory(self.ctx.device, self.handle, allocation.memory, offset)
        self.allocation, self.offset = allocation, offset

    @property
    def view(self) -> memoryview:
        assert self.allocation is not None and self.allocation.view is not None
        return self.allocation.view[self.offset : self.offset + self.size]

    @property
    def snapshot_size(self) -> int:
        return self.size

    @property
    def snapshot_alignment(self) -> int:
        """``record_snapshot`` / ``record_restore`` offsets must be multiples of this: any offset will do."""
        return 1

    def meta(self) -> dict[str, Any]:
        return {"kind": "buffer", "size": self.size}

    def descriptor_type(self, descriptor_type_override: str) -> int:
        return vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER

    def check_binding(self, binding: "LayoutBinding") -> None:
        """A uniform buffer must fit the device's uniform range (a storage buffer has no such limit here)."""
        limit = int(self.ctx.limits.maxUniformBufferRange)
        if binding.kind == "uniform_buffer" and self.size > limit:
            raise UnsupportedDeviceFeature(
                f"buffer '{self.uid}' ({self.size} bytes) is bound as a uniform buffer, larger than device "
                f"'{self.ctx.info.name}' allows ({limit} bytes)", place=binding.place,
            )

    def descriptor(self, dst_set: Any, binding: int, lod: int | None, descriptor_type: int) -> DescriptorWrite:
        info = vk.VkDescriptorBufferInfo(buffer=self.handle, offset=0, range=self.size)
        write = vk.VkWriteDescriptorSet(
            dstSet=dst_set, dstBinding=binding, descriptorCount=1, descriptorType=descriptor_type, pBufferInfo=[info]
        )
        return DescriptorWrite(write, [info])

    def record_snapshot(self, cb: Any, staging: Any, offset: int) -> None:
        record_buffer_copy(cb, self.handle, 0, staging, offset, self.size)

    def record_restore(self, cb: Any, staging: Any, offset: int) -> None:
        record_buffer_copy(cb, staging, offset, self.handle, 0, self.size)

    def restore(self, data: bytes | memoryview) -> None:
        """Overwrite the content from the host (the mapping)."""
        self.view[:] = data

    @property
    def mapped(self) -> bool:
        """False in a memory group shared with a resource that needs device-local memory (an image)."""
        return self.allocation is not None and self.allocation.view is not None

    def load_initial(self, src: Path | None, submit: OneTimeSubmit) -> None:
        """Fill from ``src``: straight into the mapping (the resource set zeroed the memory before), or
        through a staging buffer when the buffer's memory is not host-visible (then zeros without ``src``)."""
        if self.mapped:
            if src is not None:
                fill_from_npy(self.view, src)
            return
        staging, alloc = staging_buffer(self.ctx, self.size)
        try:
            assert alloc.view is not None
            alloc.zero(0, self.size)
            if src is not None:
                fill_from_npy(alloc.view[: self.size], src)
            submit(lambda cb: self.record_restore(cb, staging, 0))
        finally:
            free_staging(self.ctx, staging, alloc)

    def content(self, submit: OneTimeSubmit) -> memoryview | bytes:
        """The current bytes: the mapping itself, or a copy read back through staging."""
        if self.mapped:
            return self.view
        staging, alloc = staging_buffer(self.ctx, self.size)
        try:
            submit(lambda cb: self.record_snapshot(cb, staging, 0))
            assert alloc.view is not None
            return bytes(alloc.view[: self.size])
        finally:
            free_staging(self.ctx, staging, alloc)

    def write_dst(self, path: Path, submit: OneTimeSubmit) -> None:
        write_flat_int8(path, self.content(submit))

    def destroy(self) -> None:
        vk.vkDestroyBuffer(self.ctx.device, self.handle, None)


def create_buffer(ctx: VulkanContext, spec: BufferSpec, scenario: Any, created: dict[str, Any],
                  needs: dict[int, str]) -> DeviceBuffer:
    """The buffer kind's factory (:mod:`vkcore.resources.kinds`): a buffer needs nothing of the others."""
    return DeviceBuffer.create(ctx, spec)
