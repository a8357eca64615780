"""Descriptor pools and sets for commands whose layouts the shaders decide (compute and fragment)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import vulkan as vk

from ..shader_bindings import LayoutBinding

if TYPE_CHECKING:
    from ..session import Session


def create_pool(session: "Session", commands: list[Any]) -> Any:
    """One descriptor pool sized for every set of ``commands`` (by their resolved layouts), owned by the
    session (``session.descriptor_pools``); ``None`` when they bind nothing."""
    counts: dict[int, int] = {}
    total_sets = 0
    for cmd in commands:
        total_sets += len({b.set for b in cmd.bindings})
        for lb in session.layouts[cmd.index]:
            counts[lb.descriptor_type] = counts.get(lb.descriptor_type, 0) + 1
    if not total_sets:
        return None
    sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=n) for t, n in counts.items()]
    pool = vk.vkCreateDescriptorPool(session.ctx.device, vk.VkDescriptorPoolCreateInfo(maxSets=total_sets, pPoolSizes=sizes),
                                     None)
    session.descriptor_pools.append(pool)
    return pool


def allocate_sets(session: "Session", pool: Any, cmd: Any, set_layouts: dict[int, Any],
                  layout: tuple[LayoutBinding, ...]) -> dict[int, Any]:
    """The sets ``cmd`` binds, allocated from ``pool`` and written with its resolved ``layout``."""
    used = sorted({b.set for b in cmd.bindings})
    if not used:
        return {}
    assert session.resources is not None
    handles = vk.vkAllocateDescriptorSets(session.ctx.device, vk.VkDescriptorSetAllocateInfo(
        descriptorPool=pool, pSetLayouts=[set_layouts[s] for s in used]))
    sets = dict(zip(used, handles))
    parts = [session.resources[b.resource].descriptor(sets[b.set], b.binding, b.lod, b.descriptor_type) for b in layout]
    writes = [p.write for p in parts]
    vk.vkUpdateDescriptorSets(session.ctx.device, len(writes), writes, 0, None)
    return sets
