"""Device and host limits, checked before anything is allocated.

A scenario that declares more than the device or the host can hold is refused with one line naming
the resource (its JSON place) and the limit, instead of failing inside the driver (or, with ARM's
emulation layer, aborting the process).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from ..device.context import VulkanContext
from . import kind_of
from ..errors import UnsupportedDeviceFeature
from ..scenario.model import Buffer, Image, Scenario, Tensor


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


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def check_limits(ctx: VulkanContext, scenario: Scenario) -> list[Limit]:
    """Every limit the scenario exceeds on this device and host (empty when it fits)."""
    limits = ctx.limits
    heap = device_heap_bytes(ctx)
    host = host_memory_bytes()
    problems: list[Limit] = []
    total = 0
    for r in scenario.resources:
        size = 0
        if isinstance(r, Buffer):
            size = r.size
            if size > limits.maxStorageBufferRange:
                problems.append(Limit(f"{r.place}.size", f"{_fmt(size)} exceeds this device's largest storage buffer "
                                      f"(maxStorageBufferRange {_fmt(int(limits.maxStorageBufferRange))})"))
        elif isinstance(r, Image):
            width, height = (r.dims[1], r.dims[2]) if len(r.dims) == 4 else (0, 0)
            if max(width, height) > limits.maxImageDimension2D:
                problems.append(Limit(f"{r.place}.dims", f"{width}x{height} exceeds this device's largest 2-D image "
                                      f"(maxImageDimension2D {int(limits.maxImageDimension2D)})"))
            size = width * height * 16
        elif isinstance(r, Tensor):
            elements = math.prod(r.dims)
            if elements >= 1 << 63:
                problems.append(Limit(f"{r.place}.dims", f"dims {list(r.dims)} hold {elements} elements, more than "
                                      "64-bit sizes can express"))
                continue
            size = elements * 8
        push = getattr(r, "push_constants_size", 0)
        if push > limits.maxPushConstantsSize:
            problems.append(Limit(f"{r.place}.push_constants_size", f"{push} bytes exceed this device's push constant "
                                  f"space (maxPushConstantsSize {int(limits.maxPushConstantsSize)})"))
        if heap and size > heap:
            problems.append(Limit(r.place, f"needs {_fmt(size)}, more than this device's largest memory heap ({_fmt(heap)})"))
        total += size
    if host and total > host:
        problems.append(Limit("resources", f"the resources need {_fmt(total)}, more than this machine's memory ({_fmt(host)})"))
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
