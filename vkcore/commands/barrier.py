"""``dispatch_barrier``: the memory, buffer, image and tensor barriers it names, as one dependency."""
from __future__ import annotations

from typing import Any

import vulkan as vk

from ..resources.buffers import DeviceBuffer
from ..scenario.model import BufferBarrier, DispatchBarrier, ImageBarrier, MemoryBarrier, TensorBarrier
from ..device.sync import ACCESS, LAYOUT, BarrierBatch, buffer_barrier, memory_barrier, stage_mask
from .base import AfterSegment, NoDeviceWork
from .context import CommandContext


class BarrierKind(NoDeviceWork):
    command_type: type = DispatchBarrier

    def record(self, session: CommandContext, cb: Any, cmd: DispatchBarrier, after_segment: AfterSegment | None) -> None:
        barrier_batch(session, cmd).record(cb)


def barrier_batch(session: CommandContext, cmd: DispatchBarrier) -> BarrierBatch:
    """One batch of every barrier ``cmd`` names. An image barrier to a new layout sets the image's
    :attr:`~vkcore.resources.images.DeviceImage.layout`, which later copies of it start from."""
    scenario, resources = session.scenario, session.resources
    assert resources is not None
    batch = BarrierBatch()
    for uid in cmd.memory_barrier_refs:
        b = scenario.by_uid[uid]
        assert isinstance(b, MemoryBarrier)
        batch.memory.append(
            memory_barrier(stage_mask(b.src_stage), ACCESS[b.src_access], stage_mask(b.dst_stage), ACCESS[b.dst_access])
        )
    for uid in cmd.buffer_barrier_refs:
        bb = scenario.by_uid[uid]
        assert isinstance(bb, BufferBarrier)
        buf = resources[bb.buffer_resource]
        assert isinstance(buf, DeviceBuffer)
        batch.buffer.append(
            buffer_barrier(
                buf.handle, bb.offset, bb.size,
                stage_mask(bb.src_stage), ACCESS[bb.src_access], stage_mask(bb.dst_stage), ACCESS[bb.dst_access],
            )
        )
    for uid in cmd.image_barrier_refs:
        ib = scenario.by_uid[uid]
        assert isinstance(ib, ImageBarrier)
        image = resources[ib.image_resource]
        r = ib.subresource_range
        old, new = LAYOUT[ib.old_layout], LAYOUT[ib.new_layout]
        batch.image.append(image._barrier(  # type: ignore[attr-defined]
            stage_mask(ib.src_stage), ACCESS[ib.src_access], stage_mask(ib.dst_stage), ACCESS[ib.dst_access],
            old, new, r.base_mip_level, r.level_count))
        if new != vk.VK_IMAGE_LAYOUT_UNDEFINED:
            image.layout = new  # type: ignore[attr-defined]  # later copies of this image start from it
    tensor_barriers = []
    for uid in cmd.tensor_barrier_refs:
        t = scenario.by_uid[uid]
        assert isinstance(t, TensorBarrier)
        resource = resources[t.tensor_resource]
        tensor_barriers.append(resource.barrier(  # type: ignore[attr-defined]
            stage_mask(t.src_stage), ACCESS[t.src_access], stage_mask(t.dst_stage), ACCESS[t.dst_access]))
    if tensor_barriers:
        # lazy: vkcap run imports this module, not vkcore.resources.tensors
        from ..resources.tensors import tensor_dependency

        chained = tensor_dependency(tensor_barriers)
        batch.extra_next = chained.value
        batch.keepalive += [chained, *chained.keep]
    return batch
