"""Synchronization: the scenario's access/stage/layout enums as Vulkan values, and barrier recording.

Everything goes through synchronization2 (``vkCmdPipelineBarrier2``), core in Vulkan 1.3.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import vulkan as vk

# VK_ARM_data_graph values (vulkan_core.h 1.4.317+); the `vulkan` package predates them.
PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM = 0x40000000000
ACCESS_2_DATA_GRAPH_READ_BIT_ARM = 0x800000000000
ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM = 0x1000000000000
IMAGE_LAYOUT_TENSOR_ALIASING_ARM = 1000460000

ACCESS: dict[str, int] = {
    "ACCESS_MEMORY_WRITE": vk.VK_ACCESS_2_MEMORY_WRITE_BIT,
    "ACCESS_MEMORY_READ": vk.VK_ACCESS_2_MEMORY_READ_BIT,
    "ACCESS_GRAPH_WRITE": ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM,
    "ACCESS_GRAPH_READ": ACCESS_2_DATA_GRAPH_READ_BIT_ARM,
    "ACCESS_COMPUTE_SHADER_WRITE": vk.VK_ACCESS_2_SHADER_WRITE_BIT,
    "ACCESS_COMPUTE_SHADER_READ": vk.VK_ACCESS_2_SHADER_READ_BIT,
}
STAGE: dict[str, int] = {
    "GRAPH": PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM,
    "COMPUTE": vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT,
    "ALL": vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
}
LAYOUT: dict[str, int] = {
    "IMAGE_LAYOUT_TENSOR_ALIASING": IMAGE_LAYOUT_TENSOR_ALIASING_ARM,
    "IMAGE_LAYOUT_GENERAL": vk.VK_IMAGE_LAYOUT_GENERAL,
    "IMAGE_LAYOUT_UNDEFINED": vk.VK_IMAGE_LAYOUT_UNDEFINED,
}

# The implicit barrier after a dispatch: every earlier write is visible to every later access.
IMPLICIT_SRC_STAGE = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
IMPLICIT_DST_STAGE = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
IMPLICIT_SRC_ACCESS = vk.VK_ACCESS_2_MEMORY_WRITE_BIT
IMPLICIT_DST_ACCESS = vk.VK_ACCESS_2_MEMORY_READ_BIT | vk.VK_ACCESS_2_MEMORY_WRITE_BIT


# (src stage, src access, dst stage, dst access) of the barriers around capture copies and frames.
FULL_BARRIER = (
    vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
    vk.VK_ACCESS_2_MEMORY_WRITE_BIT,
    vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
    vk.VK_ACCESS_2_MEMORY_READ_BIT | vk.VK_ACCESS_2_MEMORY_WRITE_BIT,
)
BEFORE_COPY = (
    vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
    vk.VK_ACCESS_2_MEMORY_WRITE_BIT,
    vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT,
    vk.VK_ACCESS_2_TRANSFER_READ_BIT,
)
AFTER_COPY = (
    vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT,
    vk.VK_ACCESS_2_TRANSFER_WRITE_BIT,
    vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_2_HOST_BIT,
    vk.VK_ACCESS_2_HOST_READ_BIT | vk.VK_ACCESS_2_MEMORY_READ_BIT,
)


def stage_mask(names: Iterable[str]) -> int:
    mask = 0
    for n in names:
        mask |= STAGE[n]
    return mask


@dataclass
class BarrierBatch:
    """Barriers recorded together in one ``vkCmdPipelineBarrier2`` call.

    ``extra_next`` holds chained structures (e.g. a tensor dependency info) that must stay alive until
    the call returns.
    """

    memory: list[Any] = field(default_factory=list)
    buffer: list[Any] = field(default_factory=list)
    image: list[Any] = field(default_factory=list)
    extra_next: Any = None
    keepalive: list[Any] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.memory or self.buffer or self.image or self.extra_next)

    def record(self, cmd: Any) -> None:
        if self.empty():
            return
        info = vk.VkDependencyInfo(
            pNext=self.extra_next if self.extra_next is not None else vk.ffi.NULL,
            pMemoryBarriers=self.memory or None,
            pBufferMemoryBarriers=self.buffer or None,
            pImageMemoryBarriers=self.image or None,
        )
        vk.vkCmdPipelineBarrier2(cmd, info)


def memory_barrier(src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> Any:
    return vk.VkMemoryBarrier2(
        srcStageMask=src_stage, srcAccessMask=src_access, dstStageMask=dst_stage, dstAccessMask=dst_access
    )


def buffer_barrier(buffer: Any, offset: int, size: int, src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> Any:
    return vk.VkBufferMemoryBarrier2(
        srcStageMask=src_stage,
        srcAccessMask=src_access,
        dstStageMask=dst_stage,
        dstAccessMask=dst_access,
        srcQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
        dstQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
        buffer=buffer,
        offset=offset,
        size=size,
    )


def implicit_barrier() -> BarrierBatch:
    """The barrier the spec inserts after a dispatch whose ``implicit_barrier`` is true."""
    return BarrierBatch(memory=[memory_barrier(IMPLICIT_SRC_STAGE, IMPLICIT_SRC_ACCESS, IMPLICIT_DST_STAGE, IMPLICIT_DST_ACCESS)])
