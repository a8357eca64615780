"""A buffer's check: its src holds exactly ``size`` bytes."""
from __future__ import annotations

from typing import Iterator

from .. import reference_phrases as phrases
from ..checking import CheckContext, Entry, Problem, quote


def payload_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    header = ctx.npy.get(entry.body["uid"])
    if header is not None and header.nbytes != entry.body["size"]:
        yield entry.place("size"), (f"{phrases.SIZE_MISMATCH}: {entry.body['size']} bytes, but src "
                                    f"{quote(entry.body['src'])} holds {header.nbytes} bytes of data (they must be equal)")


CHECKS = {"payloads": payload_problems}
