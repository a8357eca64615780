"""The scratch folder of an HTML page's pictures: a replay asked for a page draws both sides and the
difference of each diverged 2-d+ resource into a temporary folder; the page embeds them, and the folder
goes when the command ends, on every exit path (an error, Ctrl-C)."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

#: The extras of a comparison that name a picture file (replay.heatmap.draw_comparison).
PICTURE_KEYS = ("heatmap", "recorded_map", "live_map", "difference_map")


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """A new private folder in the temporary folder, removed when the block ends."""
    # named before it is made: a Ctrl-C right after the folder exists still finds it to remove
    scratch = Path(tempfile.gettempdir()) / f"vkcap-html-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        scratch.mkdir(mode=0o700)
        yield scratch
    finally:
        # after Ctrl-C a compare thread may still be drawing into it for a moment: try again for up to 2 s
        for _ in range(100):
            shutil.rmtree(scratch, ignore_errors=True)
            if not scratch.exists():
                break
            time.sleep(0.02)


def forget_scratch(frames: list[Any], document: dict[str, Any], scratch: Path) -> None:
    """Drop from ``frames``' comparisons, and from ``document``'s frames, every picture path inside
    ``scratch`` (the page holds the pictures; the folder goes when the command ends)."""
    def inside(value: Any) -> bool:
        return isinstance(value, str) and Path(value).parent == scratch

    entries: list[dict[str, Any]] = [c.extras for f in frames for c in [*f.comparisons, *(c for _, c in f.dispatches)]]
    entries += [e for f in document.get("frames") or () for e in [*(f.get("resources") or ()), *(f.get("dispatches") or ())]]
    for entry in entries:
        for key in PICTURE_KEYS:
            if inside(entry.get(key)):
                del entry[key]
