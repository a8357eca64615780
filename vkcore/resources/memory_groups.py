"""Memory groups: which resources of a scenario share one allocation (``memory_group``). No Vulkan."""
from __future__ import annotations

from typing import Any

from ..scenario.model import Image, Scenario, Tensor


def group_key(spec: Any) -> str:
    """Which allocation a resource shares: its memory group, otherwise an allocation of its own."""
    return spec.memory_group or f"\0{spec.uid}"


def aliased_image(spec: Tensor, scenario: Scenario) -> Image | None:
    """The image a tensor shares memory with (the same memory group), if any."""
    if spec.memory_group:
        return next((r for r in scenario.resources if isinstance(r, Image) and r.memory_group == spec.memory_group), None)
    return None
