"""``vkcap extract TRACE --frame F --command I -o DIR``: one dispatch of a trace as a standalone scenario
(see :mod:`replay.extract` for what the folder holds and guarantees); ``vkcap reproduce DIR``: run such a
folder's scenario and compare its outputs with its ``expected/`` (see :mod:`replay.reproduce`), what
the folder's ``check.sh`` runs."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Callable

from vkcore.errors import UsageError

from .commands_inspect import size_text
from .compare_flags import _pairs

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
    p.add_argument("--replace-shader", action="append", default=[], metavar="UID=FILE",
                   help="the candidate: scenario.json runs this shader (.spv as SPIR-V, else GLSL), "
                        "scenario.recorded.json the recorded one; repeatable")
    add_device(p)
    add_common(p)
    p.set_defaults(handler=cmd_extract)

    r = sub.add_parser("reproduce", help="run an extract's scenario and compare its outputs with its expected/ "
                                         "(what its check.sh runs)")
    r.add_argument("folder", type=Path, metavar="DIR", help="a folder written by extract or bisect --extract")
    r.add_argument("--recorded", action="store_true",
                   help="run scenario.recorded.json (the shaders as recorded) instead of scenario.json")
    r.add_argument("--runner", choices=("vkcap", "reference"),
                   help="who runs the scenario: vkcap (default) or ARM's scenario-runner, with its emulation layers "
                        "(default: $VKCAP_RUNNER, else vkcap)")
    r.add_argument("--output", type=Path, metavar="OUT",
                   help="keep the outputs in OUT (a new or empty folder; default: a temporary folder, removed)")
    r.add_argument("--icd", type=Path, metavar="FILE.json", help="run on this Vulkan driver (sets VK_DRIVER_FILES)")
    add_device(r)
    add_common(r)
    r.set_defaults(handler=cmd_reproduce)


def extract_options(args: argparse.Namespace) -> Any:
    """The replay options an extract reads its inputs with: the device flags only."""
    # lazy: per command; vkcap --help imports this module, not replay.options
    from replay.options import ReplayOptions

    replaced = tuple((uid, Path(p)) for uid, p in _pairs(getattr(args, "replace_shader", []), "--replace-shader"))
    return ReplayOptions(trace=args.trace, device=args.device, emulation="off" if args.no_emulation_layers else "auto",
                         replace_shaders=replaced)


def log_extracted(result: Any) -> None:
    differ = [u for u, v in result.inputs.items() if v == "differs"]
    logging.getLogger("vkcap").info(
        "wrote %scommands[%d] (%s%s) of frame %d to %s: %d resource(s), %s%s",
        "" if result.segment is None else f"segment {result.segment} of ", result.command, result.kind,
        f" {result.name}" if result.name else "", result.frame, result.folder, len(result.resources),
        size_text(result.bytes), f"; inputs that differ from the recording: {', '.join(differ)}" if differ else "")


def extract_command(trace: Path, seq: int, index: int, out: Path, options: Any, divergence: Any = None,
                    argv: list[str] | None = None, segment: int | None = None, *, force: bool = False,
                    place: str = "-o") -> Any:
    """Command ``index`` of frame ``seq`` extracted into ``out`` (:func:`replay.extract.extract`), or only
    its segment ``segment`` (:func:`replay.extract_segment.extract_segment`)."""
    if segment is None:
        # lazy: per command; vkcap --help imports this module, not replay.extract (with msgpack, vulkan, xxhash, zstandard)
        from replay.extract import extract

        return extract(trace, seq, index, out, options, divergence, argv, force=force, place=place)
    # lazy: per command; vkcap --help imports this module, not replay.extract_segment (with flatbuffers, msgpack, numpy, vulkan, xxhash, zstandard)
    from replay.extract_segment import extract_segment

    return extract_segment(trace, seq, index, segment, out, options, divergence, argv, force=force, place=place)


def cmd_extract(args: argparse.Namespace) -> int:
    if args.frame < 0 or args.command < 0:
        raise UsageError(f"--frame and --command are indices >= 0, got --frame {args.frame} --command {args.command}")
    if args.segment is not None:
        if args.segment < 0:
            raise UsageError(f"--segment is an index >= 0, got --segment {args.segment}")
        # lazy: per command; vkcap --help imports this module, not replay.extract_segment, vkcore.output_folders (with flatbuffers, msgpack, numpy, vulkan, xxhash, zstandard)
        from replay.extract_segment import vgf_encoder
        from vkcore.output_folders import check_folder_target

        # the command line's own paths first (as extract checks them), then what --segment needs installed
        check_folder_target(args.output, place="-o", force=args.force, inputs=[args.trace])
        vgf_encoder()  # before any work: without vgfpy, one line that says how to install it
    # lazy: per command; vkcap --help imports this module, not vkcap.progress
    from .progress import Activity

    with Activity(f"extract: frame {args.frame}, command {args.command} of {args.trace.name}"):
        result = extract_command(args.trace, args.frame, args.command, args.output, extract_options(args),
                                 argv=getattr(args, "argv", []), segment=args.segment, force=args.force)
    log_extracted(result)
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not replay.reproduce (with msgpack, numpy, vulkan, xxhash, zstandard)
    from replay.reproduce import reproduce

    runner = args.runner or os.environ.get("VKCAP_RUNNER") or "vkcap"
    if runner not in ("vkcap", "reference"):
        raise UsageError(f"VKCAP_RUNNER={runner!r}: expected vkcap or reference", place="VKCAP_RUNNER")
    return reproduce(args.folder, recorded=args.recorded, runner=runner, output=args.output, device=args.device,
                     icd=args.icd, emulation="off" if args.no_emulation_layers else "auto", validate=args.validate)
