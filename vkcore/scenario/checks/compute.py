"""dispatch_compute's checks: its bindings, and its push data against its shader's push constants."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote
from .bindings import binding_problems


def push_constant_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """Push data present exactly when the shader declares push constants, at most that size."""
    body = entry.body
    shader = ctx.target(body["shader_ref"])
    size = shader.get("push_constants_size", 0)
    ref = body.get("push_data_ref", "")
    name = quote(shader["uid"])
    if size > 0 and not ref:
        yield entry.place(), f"shader {name} has push_constants_size {size} but no push_data_ref is given"
    if size == 0 and ref:
        yield entry.place("push_data_ref"), f"shader {name} declares no push constants (push_constants_size 0)"
    if ref:
        header = ctx.npy[ref]
        if header.nbytes > size:
            src = ctx.target(ref)["src"]
            yield entry.place("push_data_ref"), (
                f"raw_data {quote(ref)} holds {header.nbytes} bytes ({src}), more than the push_constants_size {size} "
                f"of shader {name} (shorter data is zero-padded, longer is refused)")


CHECKS = {"bindings": binding_problems, "push_constants": push_constant_problems}
