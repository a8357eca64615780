"""A buffer_barrier's check: its range stays inside its buffer."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote


def range_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    buffer = ctx.target(entry.body["buffer_resource"])
    offset, size = entry.body.get("offset", 0), entry.body["size"]
    if offset + size > buffer["size"]:
        yield entry.place(), (f"offset {offset} + size {size} = {offset + size} exceeds the {buffer['size']} bytes of "
                              f"buffer {quote(buffer['uid'])}")


CHECKS = {"barrier_ranges": range_problems}
