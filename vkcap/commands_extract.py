"""``vkcap extract TRACE --frame F --command I -o DIR``: one dispatch of a trace as a standalone scenario
(see :mod:`replay.extract` for what the folder holds and guarantees)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, add_common: AddFlags, add_device: AddFlags) -> None:
    """Add the ``extract`` subcommand to the ``vkcap`` parser."""
    p = sub.add_parser("extract", help="write one dispatch of one frame as a standalone scenario (a reproducer)")
    p.add_argument("trace", type=Path)
    p.add_argument("--frame", type=int, required=True, metavar="F", help="the frame (as replay and bisect number them)")
    p.add_argument("--command", type=int, required=True, metavar="I",
                   help="the command's index in the scenario's commands (bisect's commands[I])")
    p.add_argument("--segment", type=int, metavar="K",
                   help="only segment K of a graph dispatch (bisect's segment), as a VGF of its own (needs ARM's vgfpy)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="the folder to write: a new or empty one (written once complete)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier extract at DIR (only a folder holding nothing but what vkcap wrote there)")
    add_device(p)
    add_common(p)
    p.set_defaults(handler=cmd_extract)


def extract_options(args: argparse.Namespace) -> Any:
    """The replay options an extract reads its inputs with: the device flags only."""
    from replay.options import ReplayOptions

    return ReplayOptions(trace=args.trace, device=args.device, emulation="off" if args.no_emulation_layers else "auto")


def log_extracted(result: Any) -> None:
    import logging

    from .commands_inspect import size_text

    differ = [u for u, v in result.inputs.items() if v == "differs"]
    logging.getLogger("vkcap").info(
        "wrote %scommands[%d] (%s%s) of frame %d to %s: %d resource(s), %s%s",
        "" if result.segment is None else f"segment {result.segment} of ", result.command, result.kind,
        f" {result.name}" if result.name else "", result.frame, result.folder, len(result.resources),
        size_text(result.bytes), f"; inputs that differ from the recording: {', '.join(differ)}" if differ else "")


def cmd_extract(args: argparse.Namespace) -> int:
    from replay.extract import extract

    from vkcore.errors import UsageError

    if args.frame < 0 or args.command < 0:
        raise UsageError(f"--frame and --command are indices >= 0, got --frame {args.frame} --command {args.command}")
    if args.segment is not None:
        if args.segment < 0:
            raise UsageError(f"--segment is an index >= 0, got --segment {args.segment}")
        from replay.extract_segment import vgf_encoder

        vgf_encoder()  # before any work: without vgfpy, one line that says how to install it
    result = extract(args.trace, args.frame, args.command, args.output, extract_options(args),
                     argv=getattr(args, "argv", []), segment=args.segment, force=args.force)
    log_extracted(result)
    return 0
