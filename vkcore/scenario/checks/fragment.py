"""dispatch_fragment's checks: its bindings, its color attachments or render extent, its push data."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote
from .bindings import binding_problems


def target_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """The pass draws into color attachments (images made for it, the lod one they have) or over a
    render_extent; its push data fits both shaders' push constants."""
    body = entry.body
    refs = body.get("color_attachment_refs", ())
    if not refs and "render_extent" not in body:
        yield entry.place(), "give color_attachment_refs or render_extent: a fragment pass needs an extent to draw over"
    for j, ref in enumerate(refs):
        uid, lod = (ref, 0) if isinstance(ref, str) else (ref["resource_ref"], ref.get("lod", 0))
        image = ctx.target(uid)
        if not image.get("color_attachment", False):
            yield (entry.place("color_attachment_refs", j),
                   f"image {quote(uid)} is not a color attachment: set its color_attachment to true")
        if lod >= image.get("mips", 1):
            yield (entry.place("color_attachment_refs", j, "lod"),
                   f"image {quote(uid)} has {image.get('mips', 1)} mip level(s), so lod must be below that")
    sizes = [ctx.target(body[f]).get("push_constants_size", 0) for f in ("vertex_shader_ref", "fragment_shader_ref")]
    ref = body.get("push_data_ref", "")
    if ref and ctx.npy[ref].nbytes > max(sizes):
        yield entry.place("push_data_ref"), (f"raw_data {quote(ref)} holds {ctx.npy[ref].nbytes} bytes, more than the "
                                             f"shaders' push_constants_size {max(sizes)}")


CHECKS = {"bindings": binding_problems, "fragment_targets": target_problems}
