"""Every check of a command's bindings against the scenario and against its shader, in one place.

- :func:`binding_problems` (the ``bindings`` phase of validation, before any device or SPIR-V): each
  (set, id) bound at most once, an image bound at a lod below its mip count.
- :func:`descriptor_kind` and :func:`unbound_problem` (when a pipeline layout is resolved from the
  shader's reflection, :func:`vkcore.shaders.bindings.resolve_bindings`): what each binding is bound as,
  refusing a resource the shader cannot take there, a ``descriptor_type`` that contradicts it, descriptor
  arrays, image shapes other than single-layer 2-D, and a binding the shader uses that the command leaves
  out. ``declared`` is the shader's declaration (:class:`vkcore.shaders.spirv.DeclaredDescriptor`), read
  by attribute only.

What depends on the device (usage, formats, limits) is each device resource's ``check_binding``, asked
by :func:`vkcore.commands.descriptors.check_bindings`. Nothing here imports Vulkan.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

from ...errors import ScenarioError, json_path
from .. import reference_phrases as phrases
from ..checking import CheckContext, Entry, Problem, quote
from ..model import AUTO, IMAGE_DEFAULT_BY_ACCESS, OPTICAL_FLOW_ROLES, OVERRIDES, Binding, Image, Resource


def bindings_of(body: dict[str, Any]) -> list[tuple[str | int, dict[str, Any]]]:
    """A command's bindings with their keys: list positions, or roles (dispatch_optical_flow's object)."""
    bindings = body.get("bindings", ())
    if isinstance(bindings, dict):
        return [(role, bindings[role]) for role in OPTICAL_FLOW_ROLES if bindings.get(role)]
    return list(enumerate(bindings))


def binding_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """Each (set, id) at most once per command; an image's lod below its mip count."""
    seen: dict[tuple[int, int], str | int] = {}
    for j, binding in bindings_of(entry.body):
        key = (binding["set"], binding["id"])
        if key in seen:
            yield entry.place("bindings", j), (f"binding set {key[0]}, id {key[1]} used twice ({json_path('bindings', seen[key])} "
                                               f"and {json_path('bindings', j)})")
        seen[key] = j
        target = ctx.by_uid[binding["resource_ref"]]
        lod = binding.get("lod", 0)
        mips = target.body.get("mips", 1)
        if target.kind == "image" and lod >= mips:
            yield entry.place("bindings", j, "lod"), (
                f"{phrases.LOD_BEYOND_MIPS}: image {quote(target.body['uid'])} has {mips} mip "
                f"level{'s' if mips != 1 else ''}, so lod must be below {mips}, got {lod}")


def descriptor_kind(path: Any, resource: Resource, b: Binding, declared: Any, shader_uid: str, where: str) -> str:
    """What binding ``b`` (at JSON path ``where``) of ``resource`` is bound as, for a shader that declares
    it as ``declared`` (``None``: not declared, or unreadable SPIR-V: the reference runner's defaults).
    Raises :class:`ScenarioError` (``file`` = ``path``) for a binding the shader or the scenario forbids."""
    override = OVERRIDES.get(b.descriptor_type or AUTO, "?")
    if override == "?":
        raise ScenarioError(f"unknown descriptor_type {b.descriptor_type!r} ({', '.join(OVERRIDES)})",
                            file=path, place=f"{where}.descriptor_type")
    allowed = resource.DESCRIPTORS
    what = f"'{resource.uid}' is {'an' if resource.KIND[0] in 'aeiou' else 'a'} {resource.KIND}"
    if not allowed:
        raise ScenarioError(f"{what}, which cannot be bound to a descriptor", file=path, place=where)
    if override is not None and override not in allowed:
        raise ScenarioError(f"descriptor_type {b.descriptor_type} cannot bind {what}", file=path,
                            place=f"{where}.descriptor_type")
    d = declared
    if d is None:
        if override is not None:
            return override
        if isinstance(resource, Image):
            return IMAGE_DEFAULT_BY_ACCESS.get(resource.shader_access, "combined_image_sampler")
        return allowed[0]
    shader = f"shader '{shader_uid}' declares set {b.set} binding {b.id} as {d.text}"
    if d.kind not in allowed:
        raise ScenarioError(f"{shader}, but {what}", file=path, place=where)
    if override is not None and override != d.kind:
        raise ScenarioError(f"descriptor_type {b.descriptor_type} contradicts the shader: {shader}",
                            file=path, place=f"{where}.descriptor_type")
    if d.count != 1:
        raise ScenarioError(f"{shader}; a binding binds one resource, so descriptor arrays are not supported",
                            file=path, place=where)
    if d.image_dim is not None and (d.image_dim != "2D" or d.arrayed or d.multisampled):
        shape = " ".join(filter(None, [d.image_dim, "arrayed" if d.arrayed else "", "multisampled" if d.multisampled else ""]))
        raise ScenarioError(f"{shader} with a {shape} image type; image resources are single-layer 2-D images "
                            "(declare image2D/sampler2D/texture2D)", file=path, place=where)
    return d.kind


def unbound_problem(place: str, bindings: Sequence[Binding], shader_uid: str, reflection: Any) -> Problem | None:
    """The first (set, binding) the shader uses (``reflection.used_bindings``, described by
    ``reflection.descriptors``) that the command at ``place`` does not bind, or None."""
    if reflection is None:
        return None
    bound = {(b.set, b.id) for b in bindings}
    missing = sorted(k for k in reflection.used_bindings if k not in bound)
    if not missing:
        return None
    s, i = missing[0]
    given = ", ".join(f"set {bs} binding {bi}" for bs, bi in sorted(bound)) or "none"
    also = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return f"{place}.bindings", (f"shader '{shader_uid}' uses set {s} binding {i}, {reflection.descriptors[(s, i)].text}{also}, "
                                 f"which this command does not bind (it binds: {given})")


#: What a command kind whose only own checks are its bindings' names (dispatch_graph).
CHECKS = {"bindings": binding_problems}
