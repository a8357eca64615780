"""Pipeline layouts the shader agrees with: each binding's descriptor type comes from the SPIR-V.

A layout that differs from its shader is undefined behaviour (lavapipe dies inside
``vkCreateComputePipelines``). :func:`resolve_bindings` takes a command's scenario bindings and the
shader's :class:`~vkcore.shaders.spirv.Reflection` and returns one :class:`LayoutBinding` per binding, with
the descriptor type the shader declares, or raises :class:`ScenarioError` naming the binding's JSON
path and what the shader declares. The checks are :mod:`vkcore.scenario.checks.bindings`' (every check
of a binding against the scenario and its shader is there). It refuses, before any Vulkan call:

- a binding the shader uses that the command does not bind;
- a resource whose kind cannot be what the shader declares (a buffer where it wants an image);
- a ``descriptor_type`` that contradicts the shader;
- image bindings the scenario's 2-D, single-layer images cannot serve (3-D, arrayed, multisampled
  declarations), descriptor arrays (a binding binds one resource) and texel buffers (a buffer has no
  format to view it with).

Where the shader does not declare a binding (or its SPIR-V cannot be read), the descriptor type
follows the reference runner: ``descriptor_type`` when given, else a buffer is a storage buffer, a
tensor a tensor, an image ``readonly``/``readwrite`` a combined image sampler and ``writeonly``/
``image_read`` a storage image. What depends on the device or on an image's effective format (a DDS
source may change it) is checked when the descriptor is written (:mod:`vkcore.resources.images`).
Nothing here imports ``vulkan``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import ScenarioError
from ..scenario.checks.bindings import descriptor_kind, unbound_problem
from ..scenario.model import Binding, Scenario
from .spirv import DESCRIPTOR_TYPES, KIND_OF_DESCRIPTOR_TYPE, KIND_TEXT, DeclaredDescriptor, Reflection

# Image usage each image descriptor kind needs (VkImageUsageFlagBits).
USAGE_SAMPLED, USAGE_STORAGE = 0x4, 0x8
IMAGE_USAGE = {"combined_image_sampler": USAGE_SAMPLED, "sampled_image": USAGE_SAMPLED, "storage_image": USAGE_STORAGE,
               "sampler": 0}


@dataclass(frozen=True)
class LayoutBinding:
    """One descriptor of a pipeline layout, resolved: where it is, what type, what is bound there."""

    set: int
    binding: int
    kind: str  # a key of spirv.DESCRIPTOR_TYPES
    resource: str
    lod: int | None
    place: str  # the JSON path of the scenario binding
    declared: DeclaredDescriptor | None  # None: the shader does not declare it (or could not be read)

    @property
    def descriptor_type(self) -> int:
        return DESCRIPTOR_TYPES[self.kind]

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for traces and reports."""
        out: dict[str, Any] = {"set": self.set, "binding": self.binding, "descriptor_type": self.kind,
                               "resource": self.resource, "declared": self.declared is not None}
        if self.lod is not None:
            out["lod"] = self.lod
        if self.declared is not None and self.declared.image_format:
            out["image_format"] = self.declared.image_format
        return out


def signature(layout: Iterable[LayoutBinding]) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    """Set -> ((binding, VkDescriptorType), ...), sorted: what makes two pipeline layouts equal."""
    by_set: dict[int, list[tuple[int, int]]] = {}
    for b in layout:
        by_set.setdefault(b.set, []).append((b.binding, b.descriptor_type))
    return tuple(sorted((s, tuple(sorted(v))) for s, v in by_set.items()))


def resolve_bindings(scenario: Scenario, place: str, bindings: tuple[Binding, ...], shader_uid: str,
                     reflection: Reflection | None) -> tuple[LayoutBinding, ...]:
    """The layout of one command's ``bindings`` (at JSON path ``place``) for a shader with
    ``reflection`` (``None``: unreadable SPIR-V, only the scenario decides). The checks are
    :mod:`vkcore.scenario.checks.bindings`'."""
    declared = reflection.descriptors if reflection is not None else {}
    out = []
    for n, b in enumerate(bindings):
        where = f"{place}.bindings[{n}]"
        d = declared.get((b.set, b.id))
        kind = descriptor_kind(scenario.path, scenario.by_uid[b.resource_ref], b, d, shader_uid, where)
        out.append(LayoutBinding(b.set, b.id, kind, b.resource_ref, b.lod, where, d))
    problem = unbound_problem(place, bindings, shader_uid, reflection)
    if problem is not None:
        raise ScenarioError(problem[1], file=scenario.path, place=problem[0])
    return tuple(out)


def image_usage_needs(layouts: Iterable[LayoutBinding]) -> dict[str, dict[int, str]]:
    """Image uid -> {VkImageUsageFlagBits: the first binding's JSON path that needs it}: the union of
    how every command binds each image, for its creation."""
    needs: dict[str, dict[int, str]] = {}
    for b in layouts:
        usage = IMAGE_USAGE.get(b.kind, 0)
        if usage:
            needs.setdefault(b.resource, {}).setdefault(usage, b.place)
    return needs


def kind_text(descriptor_type: int) -> str:
    """How messages name a VkDescriptorType."""
    kind = KIND_OF_DESCRIPTOR_TYPE.get(descriptor_type)
    return KIND_TEXT[kind] if kind else f"descriptor type {descriptor_type}"
