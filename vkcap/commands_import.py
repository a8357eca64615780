"""``vkcap import CAPTURE.gfxr -o DIR``: the compute work of a GFXReconstruct capture as a scenario
(:mod:`capture.gfxr`); ``vkcap record CAPTURE.gfxr`` records it directly (:func:`capture.gfxr.importer.imported_scenario`)."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Callable

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, add_common: AddFlags) -> None:
    """Add the ``import`` subcommand to the ``vkcap`` parser."""
    p = sub.add_parser("import", help="write the compute work of a GFXReconstruct capture (.gfxr) as a scenario")
    p.add_argument("capture", type=Path, metavar="CAPTURE.gfxr")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="folder for scenario.json, its shaders and contents (new or empty)")
    p.add_argument("--frames-per-submit", action="store_true",
                   help="end a frame at each queue submit that dispatches (default: at present and frame-boundary calls)")
    add_common(p)
    p.set_defaults(handler=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not capture.gfxr.importer (with numpy, vulkan, zstandard)
    from capture.gfxr.importer import import_capture

    summary = import_capture(args.capture, args.output, frames_per_submit=args.frames_per_submit)
    log = logging.getLogger("vkcap")
    for line in summary.lines():
        log.info("%s", line)
    log.info("wrote %s", args.output / "scenario.json")
    return 0


def record_capture(args: argparse.Namespace, capture: Path, record: Callable[[argparse.Namespace], int]) -> int:
    """``vkcap record CAPTURE.gfxr``: import into a private temporary folder (removed afterwards, whatever
    happens), then ``record`` that scenario; the trace is named after the capture (``traces/<stem>.vkt``)."""
    # lazy: per command; vkcap --help imports this module, not capture.gfxr.importer (with numpy, vulkan, zstandard)
    from capture.gfxr.importer import imported_scenario

    with imported_scenario(capture, frames_per_submit=args.frames_per_submit) as (scenario, summary):
        for line in summary.lines():
            logging.getLogger("vkcap").info("%s", line)
        args.scenario, args.scenario_pos = str(scenario), None
        if args.trace is None:
            args.trace = Path("traces") / f"{capture.stem}.vkt"
        return record(args)
