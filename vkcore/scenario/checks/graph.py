"""A graph's check: the specialization constant ids of each of its maps are unique."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem
from .shader import unique_constant_ids


def field_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    for m, mapping in enumerate(entry.body.get("specialization_constants_map", ())):
        yield from unique_constant_ids(entry, mapping["specialization_constants"],
                                       ("specialization_constants_map", m, "specialization_constants"))


CHECKS = {"fields": field_problems}
