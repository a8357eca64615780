"""dispatch_spirv_graph's checks (dispatch_data_graph is its other name): its bindings, and a graph
given as SPIR-V (GLSL cannot hold a graph)."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote
from .bindings import binding_problems


def graph_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    shader = ctx.target(entry.body["graph_ref"])
    if shader.get("type") != "SPIR-V":
        yield (entry.place("graph_ref"),
               f"shader {quote(shader['uid'])} is {shader.get('type')}; a SPIR-V graph must be given as SPIR-V")


CHECKS = {"bindings": binding_problems, "spirv_graphs": graph_problems}
