"""Resource kinds: one :class:`ResourceKind` per kind of scenario resource, in one table.

The session, the planner, the limits check, the runner and replay ask the kind of a resource what it is;
none of them branches on resource types. A kind says:

- ``model``: its class in :mod:`vkcore.scenario.model` (its JSON key is ``model.KIND``);
- ``holds_data`` (the model's ``HOLDS_DATA``): a device resource with memory (buffer, image, tensor): made
  by ``factory``, bound in a memory group, captured at boundaries, and restored by a replay from the
  trace's initial checkpoint instead of read from its ``src``;
- ``factory``: ``(module, function)`` of what makes its device resource (see
  :data:`vkcore.exec.resource_set.Factory`), imported the first time one is made, so that scenarios and
  processes that make none do not pay for the module;
- ``src`` (the model's ``SRC``): what its ``src`` names: ``"npy"`` (a .npy file), ``"file"`` (any file) or
  ``None`` (no src);
- ``demand``: what one resource asks of the device's limits (:class:`Demand`);
- ``needs``: the optional device features one resource needs (:data:`FEATURES`);
- ``creation_rank``: resources are made in rank order (scenario order within a rank): a kind that may lay
  itself out over another's memory ranks after it;
- ``aliases_images``: its memory may be an image's (a memory group shared with one); such an image is
  made for aliasing (see :func:`vkcore.resources.images.create_image`);
- ``checks``: its validation checks by phase, from the module of :mod:`vkcore.scenario.checks` its model
  names (``model.CHECKS``); validation, below this layer, finds them through the model.

Importing this module imports no Vulkan (validation uses it).
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..scenario.checking import Check, checks_of
from ..scenario.model import (Barrier, Buffer, BufferBarrier, Graph, GraphConstant, Image, ImageBarrier, MemoryBarrier,
                              RawData, Resource, Shader, Tensor, TensorBarrier)

#: The optional device features a resource or a command can need (the runner enables the extension of each).
TENSORS, DATA_GRAPH, CUSTOM_BORDER_COLOR, OPTICAL_FLOW = "tensors", "data_graph", "custom_border_color", "optical_flow"
FEATURES = (TENSORS, DATA_GRAPH, CUSTOM_BORDER_COLOR, OPTICAL_FLOW)


@dataclass(frozen=True)
class Demand:
    """What one resource asks of the device: ``problems`` (JSON path, what is wrong) for each limit it
    exceeds, and ``bytes`` of device memory at most (``None``: beyond what sizes can express; it is then
    left out of the memory totals)."""

    problems: tuple[tuple[str, str], ...] = ()
    bytes: int | None = 0


def format_bytes(n: int) -> str:
    """``1.5 MiB``: a size for messages."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _no_demand(limits: Any, spec: Any) -> Demand:
    return Demand()


def _buffer_demand(limits: Any, spec: Buffer) -> Demand:
    problems = []
    if spec.size > limits.maxStorageBufferRange:
        problems.append((f"{spec.place}.size", f"{format_bytes(spec.size)} exceeds this device's largest storage buffer "
                         f"(maxStorageBufferRange {format_bytes(int(limits.maxStorageBufferRange))})"))
    return Demand(tuple(problems), spec.size)


def _image_demand(limits: Any, spec: Image) -> Demand:
    width, height = (spec.dims[1], spec.dims[2]) if len(spec.dims) == 4 else (0, 0)
    problems = []
    if max(width, height) > limits.maxImageDimension2D:
        problems.append((f"{spec.place}.dims", f"{width}x{height} exceeds this device's largest 2-D image "
                         f"(maxImageDimension2D {int(limits.maxImageDimension2D)})"))
    return Demand(tuple(problems), width * height * 16)


def _tensor_demand(limits: Any, spec: Tensor) -> Demand:
    elements = math.prod(spec.dims)
    if elements >= 1 << 63:
        return Demand(((f"{spec.place}.dims", f"dims {list(spec.dims)} hold {elements} elements, more than 64-bit sizes "
                        "can express"),), None)
    return Demand((), elements * 8)


def _push_constant_demand(limits: Any, spec: Shader | Graph) -> Demand:
    push = spec.push_constants_size
    if push > limits.maxPushConstantsSize:
        return Demand(((f"{spec.place}.push_constants_size", f"{push} bytes exceed this device's push constant "
                        f"space (maxPushConstantsSize {int(limits.maxPushConstantsSize)})"),))
    return Demand()


def _no_needs(spec: Any) -> frozenset[str]:
    return frozenset()


def _image_needs(spec: Image) -> frozenset[str]:
    return frozenset({CUSTOM_BORDER_COLOR}) if spec.border_color.endswith("_CUSTOM_EXT") else frozenset()


def _barrier_needs(spec: Barrier) -> frozenset[str]:
    return frozenset({DATA_GRAPH}) if spec.syncs_graphs else frozenset()


@dataclass(frozen=True)
class ResourceKind:
    """What vkcap needs to know of one kind of resource; ``spec`` is always of :attr:`model`."""

    model: type[Resource]
    factory: tuple[str, str] | None = None
    demand: Callable[[Any, Any], Demand] = _no_demand
    needs: Callable[[Any], frozenset[str]] = _no_needs
    creation_rank: int = 0
    aliases_images: bool = False

    @property
    def name(self) -> str:
        """The kind's JSON key in ``resources`` (``buffer``, ``image``, ...)."""
        return self.model.KIND

    @property
    def holds_data(self) -> bool:
        """Device memory: made by its factory, bound by commands, captured at boundaries (the model says)."""
        return self.model.HOLDS_DATA

    @property
    def src(self) -> str | None:
        """What its ``src`` names: ``"npy"``, ``"file"`` or ``None`` (the model says)."""
        return self.model.SRC

    @property
    def checks(self) -> Mapping[str, Check]:
        """Its validation checks by phase (:mod:`vkcore.scenario.checking`)."""
        return checks_of(self.model)

    @property
    def restorable(self) -> bool:
        """A replay restores its initial state from the trace's checkpoint instead of reading ``src``."""
        return self.holds_data

    def make(self) -> Callable[..., Any]:
        """Its factory, imported on first use (only kinds that hold data have one)."""
        assert self.factory is not None, self.name
        module, function = self.factory
        return getattr(importlib.import_module(module), function)


_ALWAYS_TENSORS: Callable[[Any], frozenset[str]] = lambda spec: frozenset({TENSORS})  # noqa: E731
_ALWAYS_GRAPHS: Callable[[Any], frozenset[str]] = lambda spec: frozenset({DATA_GRAPH})  # noqa: E731

#: Every resource kind, by model class, in the order the schema lists them.
KINDS: dict[type[Resource], ResourceKind] = {k.model: k for k in (
    ResourceKind(Buffer, factory=("vkcore.resources.buffers", "create_buffer"), demand=_buffer_demand),
    ResourceKind(Image, factory=("vkcore.resources.images", "create_image"),
                 demand=_image_demand, needs=_image_needs),
    ResourceKind(Tensor, factory=("vkcore.exec.tensor_factory", "create_tensor"),
                 demand=_tensor_demand, needs=_ALWAYS_TENSORS, creation_rank=1, aliases_images=True),
    ResourceKind(RawData),
    ResourceKind(Shader, demand=_push_constant_demand),
    ResourceKind(Graph, demand=_push_constant_demand, needs=_ALWAYS_GRAPHS),
    ResourceKind(GraphConstant, needs=_ALWAYS_GRAPHS),
    ResourceKind(MemoryBarrier, needs=_barrier_needs),
    ResourceKind(BufferBarrier, needs=_barrier_needs),
    ResourceKind(ImageBarrier, needs=_barrier_needs),
    ResourceKind(TensorBarrier, needs=_barrier_needs),
)}
#: The same kinds by JSON key.
BY_NAME: dict[str, ResourceKind] = {k.name: k for k in KINDS.values()}
#: JSON keys of the kinds that hold data: what a command binds and a boundary captures.
DATA_KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS.values() if k.holds_data)


def resource_kind(spec: Any) -> ResourceKind:
    """The kind of a scenario resource."""
    return KINDS[type(spec)]


def holds_data(spec: Any) -> bool:
    """Whether ``spec`` is a resource with device memory (a buffer, image or tensor)."""
    return KINDS[type(spec)].holds_data


def data_resources(resources: Iterable[Any]) -> list[Any]:
    """The resources that hold data, in the order given."""
    return [r for r in resources if holds_data(r)]


def creation_order(resources: Iterable[Any]) -> list[Any]:
    """``resources`` in the order they are made: by their kinds' ``creation_rank``, else as given."""
    return sorted(resources, key=lambda r: KINDS[type(r)].creation_rank)
