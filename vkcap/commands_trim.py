"""``vkcap trim TRACE --frames A-B -o OUT``: a self-contained trace of frames A..B of another (see
:mod:`replay.trim` for what it guarantees). A device is used only when the state before frame A must be
rebuilt by replaying the frames before it."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Callable

from .commands_inspect import size_text

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, add_common: AddFlags, add_device: AddFlags) -> None:
    """Add the ``trim`` subcommand to the ``vkcap`` parser."""
    p = sub.add_parser("trim", help="write frames A..B of a trace as a new self-contained trace")
    p.add_argument("trace", type=Path)
    p.add_argument("--frames", required=True, metavar="A-B|A-|A",
                   help="the frames to keep: A to B, A to the last frame, or frame A alone")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.vkt", help="the trimmed trace (written atomically)")
    add_device(p)
    add_common(p)
    p.set_defaults(handler=cmd_trim)


def cmd_trim(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not replay.options, replay.trim (with msgpack, vulkan, xxhash, zstandard)
    from replay.trim import parse_frames, trim_trace
    from replay.options import ReplayOptions

    span = parse_frames(args.frames, args.trace)
    options = ReplayOptions(trace=args.trace, device=args.device, emulation="off" if args.no_emulation_layers else "auto")
    # lazy: per command; vkcap --help imports this module, not vkcap.progress
    from .progress import Activity

    with Activity(f"trim: writing frames {args.frames} of {args.trace.name}"):
        result = trim_trace(args.trace, args.output, span, replay_options=options, argv=getattr(args, "argv", []))
    frames = f"frame {result.first}" if result.first == result.last else f"frames {result.first}-{result.last}"
    logging.getLogger("vkcap").info(
        "wrote %s of %s (%s) to %s (%s, %d blob(s)); initial state: %s", frames, result.source,
        size_text(result.source_bytes), result.out, size_text(result.out_bytes), result.blobs, result.describe_state())
    return 0
