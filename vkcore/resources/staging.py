"""Frame-boundary captures: what to copy where, and the host-visible staging ring that receives it.

At the end of a frame (and, at dispatch level, after each dispatch) the captured resources are copied
into one staging *slot* inside the frame's own submission. The ring has at least two slots, so the GPU
runs frame N+1 while the host reads frame N's slot; a slot is reused only after its consumer returned,
which bounds the memory in flight to ``slots x slot_size`` however long the run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import vulkan as vk

from ..device import memory
from .buffers import create_buffer_handle
from ..device.context import VulkanContext

STAGING_USAGE = vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT


@dataclass(frozen=True)
class CaptureItem:
    """One resource copied into a slot: after dispatch ``after_command`` (a command index), or at the
    frame's end when ``after_command`` is None."""

    uid: str
    offset: int
    size: int
    after_command: int | None = None
    segment: int | None = None  # within a dispatch_graph: after this segment (None: after the command)


@dataclass(frozen=True)
class CaptureLayout:
    """Every copy of one frame, with offsets inside a slot."""

    items: tuple[CaptureItem, ...]

    @property
    def size(self) -> int:
        return max((i.offset + i.size for i in self.items), default=0)

    def at(self, after_command: int | None, segment: int | None = None) -> tuple[CaptureItem, ...]:
        return tuple(i for i in self.items if i.after_command == after_command and i.segment == segment)


def build_layout(entries: list[tuple[Any, ...]], alignment: int = 256,
                 align_of: dict[str, int] | None = None) -> CaptureLayout:
    """Pack ``(uid, size, after_command[, segment])`` entries into a slot: each offset a multiple of
    ``alignment`` and of the resource's own copy alignment (``align_of``, e.g. 12 for 3-byte texels)."""
    items, offset = [], 0
    for uid, size, after, *rest in entries:
        step = math.lcm(alignment, (align_of or {}).get(uid, 1))
        offset = -(-offset // step) * step
        items.append(CaptureItem(uid, offset, size, after, rest[0] if rest else None))
        offset += size
    return CaptureLayout(tuple(items))


@dataclass
class StagingSlot:
    index: int
    buffer: Any = None
    allocation: memory.Allocation | None = None
    size: int = 0

    def view(self, item: CaptureItem) -> memoryview:
        assert self.allocation is not None and self.allocation.view is not None
        return self.allocation.view[item.offset : item.offset + item.size]


@dataclass
class StagingRing:
    """``slots`` host-visible, host-cached buffers of ``slot_size`` bytes each (none when size is 0)."""

    ctx: VulkanContext
    slots: list[StagingSlot] = field(default_factory=list)

    @classmethod
    def create(cls, ctx: VulkanContext, count: int, slot_size: int) -> "StagingRing":
        ring = cls(ctx)
        for i in range(count):
            slot = StagingSlot(i)
            if slot_size:
                slot.buffer, req = create_buffer_handle(ctx, slot_size, STAGING_USAGE)
                slot.allocation = memory.allocate(ctx, req, req.size, host_access=True, what="capture staging")
                vk.vkBindBufferMemory(ctx.device, slot.buffer, slot.allocation.memory, 0)
                slot.size = slot_size
            ring.slots.append(slot)
        return ring

    @property
    def bytes_reserved(self) -> int:
        return sum(s.size for s in self.slots)

    def destroy(self) -> None:
        for s in self.slots:
            if s.buffer is not None:
                vk.vkDestroyBuffer(self.ctx.device, s.buffer, None)
            if s.allocation is not None:
                memory.free(self.ctx, s.allocation)
        self.slots.clear()
