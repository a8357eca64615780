"""Per-stage descriptor limits: how many descriptors of each kind one shader stage may use on a device,
checked when a command's bindings are resolved against its shader (before any pipeline exists)."""
from __future__ import annotations

from ..device.context import VulkanContext
from ..errors import UnsupportedDeviceFeature
from ..scenario.model import Scenario


# Per-stage descriptor limits, by the descriptor kinds (vkcore.shaders.spirv) that count against each.
PER_STAGE: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("storage buffers", "maxPerStageDescriptorStorageBuffers", frozenset({"storage_buffer"})),
    ("uniform buffers", "maxPerStageDescriptorUniformBuffers", frozenset({"uniform_buffer"})),
    ("storage images", "maxPerStageDescriptorStorageImages", frozenset({"storage_image"})),
    ("sampled images", "maxPerStageDescriptorSampledImages", frozenset({"sampled_image", "combined_image_sampler"})),
    ("samplers", "maxPerStageDescriptorSamplers", frozenset({"sampler", "combined_image_sampler"})),
)


def refuse_beyond_stage_limits(ctx: VulkanContext, scenario: Scenario, place: str, kinds: list[str]) -> None:
    """Raise :class:`UnsupportedDeviceFeature` when one command's resolved descriptor ``kinds`` exceed
    a per-stage limit of the device."""
    for what, limit_name, counted in PER_STAGE:
        n, most = sum(k in counted for k in kinds), int(getattr(ctx.limits, limit_name))
        if n > most:
            raise UnsupportedDeviceFeature(f"{n} {what} in one dispatch, more than device '{ctx.info.name}' allows "
                                           f"({limit_name} {most})", file=scenario.path, place=f"{place}.bindings")
