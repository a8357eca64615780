"""``import_capture(capture, folder)``: the one entry point, reading, modelling and writing."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from vkcore.errors import VkcapError

from .model import Model
from .reader import read_capture
from .to_scenario import Summary, write_scenario


def is_capture(path: Path) -> bool:
    """Whether ``path`` names a GFXReconstruct capture (by its ``.gfxr`` suffix)."""
    return Path(path).suffix.lower() == ".gfxr"


def import_capture(capture: Path, folder: Path, *, frames_per_submit: bool = False) -> Summary:
    """Write the compute work of ``capture`` as a scenario in ``folder`` (new or empty); returns what it did."""
    try:
        model = Model(read_capture(Path(capture)), frames_per_submit=frames_per_submit).run()
    except VkcapError as exc:
        raise type(exc)(exc.message, file=capture, place=exc.place) from None
    return write_scenario(model, Path(folder))


@contextmanager
def imported_scenario(capture: Path, *, frames_per_submit: bool = False) -> Iterator[tuple[Path, Summary]]:
    """The capture imported into a private temporary folder, removed on leaving, whatever happens."""
    scratch = Path(tempfile.mkdtemp(prefix="vkcap-import-"))
    try:
        folder = scratch / Path(capture).stem.replace(".", "_")[:64]
        summary = import_capture(capture, folder, frames_per_submit=frames_per_submit)
        yield folder / "scenario.json", summary
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
