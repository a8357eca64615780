"""Device and host limits, checked before anything is allocated.

A scenario that declares more than the device or the host can hold is refused with one line naming
the resource (its JSON place) and the limit, instead of failing inside the driver (or, with ARM's
emulation layer, aborting the process).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from ..device.context import VulkanContext
from . import kind_of
from ..errors import UnsupportedDeviceFeature
from ..resources.kinds import format_bytes, resource_kind
from ..scenario.model import Scenario


MAX_BINDING = 65535  # binding numbers vkcap accepts (no Vulkan limit; drivers allocate up to the highest)


@dataclass(frozen=True)
class Limit:
    """One violated limit: where, and what."""

    place: str
    message: str


def host_memory_bytes() -> int:
    """Physical memory of this machine (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def device_heap_bytes(ctx: VulkanContext) -> int:
    """The largest memory heap of the device."""
    mp = ctx.memory_properties
    return max((int(mp.memoryHeaps[i].size) for i in range(mp.memoryHeapCount)), default=0)


def check_limits(ctx: VulkanContext, scenario: Scenario) -> list[Limit]:
    """Every limit the scenario exceeds on this device and host (empty when it fits)."""
    limits = ctx.limits
    heap = device_heap_bytes(ctx)
    host = host_memory_bytes()
    problems: list[Limit] = []
    total = 0
    for r in scenario.resources:
        demand = resource_kind(r).demand(limits, r)
        problems += [Limit(place, message) for place, message in demand.problems]
        if demand.bytes is None:  # beyond what sizes express: said above, left out of the totals
            continue
        if heap and demand.bytes > heap:
            problems.append(Limit(r.place, f"needs {format_bytes(demand.bytes)}, more than this device's largest memory heap "
                                  f"({format_bytes(heap)})"))
        total += demand.bytes
    if host and total > host:
        problems.append(Limit("resources", f"the resources need {format_bytes(total)}, more than this machine's memory ({format_bytes(host)})"))
    for cmd in scenario.commands:
        kind = kind_of(cmd)
        problems += [Limit(place, message) for place, message in kind.limit_problems(limits, cmd)]
        if not kind.shaders(cmd):  # a graph's bindings are checked against its VGF
            continue
        for j, b in enumerate(kind.bindings(cmd)):
            if b.id > MAX_BINDING:
                problems.append(Limit(f"{cmd.place}.bindings[{j}].id", f"binding {b.id} is beyond {MAX_BINDING}: drivers "
                                      "size descriptor set layouts by the highest binding number"))
        sets = {b.set for b in kind.bindings(cmd)}
        if sets and max(sets) >= limits.maxBoundDescriptorSets:
            problems.append(Limit(f"{cmd.place}.bindings", f"descriptor set {max(sets)} is beyond this device's "
                                  f"{int(limits.maxBoundDescriptorSets)} bound sets"))
    return problems


def refuse_beyond_limits(ctx: VulkanContext, scenario: Scenario) -> None:
    """Raise one :class:`UnsupportedDeviceFeature` (exit 2) for the first limit exceeded."""
    problems = check_limits(ctx, scenario)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UnsupportedDeviceFeature(first.message + more, file=scenario.path, place=first.place)
