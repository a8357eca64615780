"""``vkcap record``: a scenario run into a trace, with the checks on ``-o`` (never overwrite what is not
a trace, nor a trace of another scenario) and the closing figures."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from vkcore.bounded_numbers import check_number
from vkcore.errors import EXIT_INTERRUPTED, UsageError, VkcapError

from .commands_import import record_capture
from .commands_inspect import size_text, snapshot_figures
from .run_flags import check_run_flags, run_options
from .vulkan_start import TRACE_CODECS, start_vulkan_early

if TYPE_CHECKING:
    from vkcore.scenario.model import Scenario


ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL = -(1 << 17), 22  # zstd's ZSTD_minCLevel() and ZSTD_maxCLevel()


def cmd_record(args: argparse.Namespace) -> int:
    capture = Path(args.scenario or args.scenario_pos or "")
    if capture.suffix.lower() == ".gfxr":  # a GFXReconstruct capture: imported first (vkcap import)

        return record_capture(args, capture, cmd_record)

    check_number("checkpoint_every", args.checkpoint_every, place="--checkpoint-every")
    if not ZSTD_MIN_LEVEL <= args.compression_level <= ZSTD_MAX_LEVEL:
        raise UsageError(f"--compression-level must be between {ZSTD_MIN_LEVEL} and {ZSTD_MAX_LEVEL} (zstd's levels), "
                         f"got {args.compression_level}")
    check_number("compression_threads", args.compression_threads, place="--compression-threads")
    check_number("record_threads", args.record_threads, place="--record-threads")
    check_run_flags(args)
    start_vulkan_early(device=args.device, also=TRACE_CODECS)  # before the imports below, which it overlaps
    run = run_options(args, capture_all=args.capture == "all")
    # lazy: per command; vkcap --help imports this module, not capture.recorder (with msgpack, vulkan, xxhash, zstandard)
    from capture.recorder import RecordOptions, default_trace_path, record

    options = RecordOptions(
        run=run,
        trace=args.trace if args.trace is not None else default_trace_path(run.scenario),
        checkpoint_every=args.checkpoint_every,
        dispatch_level=args.dispatch_level,
        level=args.compression_level,
        threads=args.compression_threads,
        record_threads=args.record_threads,
        fsync=args.fsync,
    )
    scenario, before = (None, None) if run.dry_run else check_trace_target(options.trace, run)
    # lazy: per command; vkcap --help imports this module, not vkcap.progress
    from .progress import FrameProgress

    log = logging.getLogger("vkcap")
    try:
        with FrameProgress.for_terminal("recording frame") as progress:
            result = record(options, getattr(args, "argv", sys.argv), progress.on_event, scenario=scenario)
    except VkcapError as exc:
        if before is not None:
            _say_where_failed_went(exc, options.trace, before)
        raise
    if run.dry_run:
        log.info("dry run: built %d frame(s) on %s; recorded and wrote nothing",
                 len(result.run.plan.frames), result.run.device_name)
        return 0
    log.info("recorded %d frame(s) on %s into %s%s%s", result.frames, result.run.device_name, result.trace,
             " (replaced the trace that was there)" if before is not None and result.frames else "",
             _record_figures(result) if result.frames else "")
    if args.json is not None:
        _write_summary(args.json, result)
    if result.run.interrupted:
        if result.frames:
            log.warning("interrupted: the trace holds the %d frame(s) completed before Ctrl-C", result.frames)
        else:
            log.warning("interrupted before the first frame completed: no trace was written")
        return EXIT_INTERRUPTED
    return 0


FileSignature = tuple[int, int, int, int]  # (device, inode, size, mtime_ns): tells a rewritten file apart


class ExistingTrace(NamedTuple):
    """A trace already at ``record -o``: a failed recording will not replace it but go to ``failed``."""

    failed: Path
    failed_before: FileSignature | None  # what was at ``failed`` before the recording (None: nothing)


def check_trace_target(target: Path, run: Any) -> tuple["Scenario", ExistingTrace | None]:
    """Refuse, before any frame runs, a ``record -o`` target that must not be written (one line naming
    it and ``-o``, exit 2): anything :func:`vkcore.outputs.check_output_target` refuses (a folder, a
    device node, a FIFO, under a file, a read-only folder, an empty path); the scenario itself, a file
    it reads (a ``src``) or a ``dst`` the run writes; an existing file that is not a vkcap trace (it
    does not start with the trace magic). Returns the scenario, loaded for the check (the recording
    uses it instead of loading it again), and where a failed recording would go when a trace already
    exists at ``target`` (see :func:`capture.writer.failed_trace_path`), else None."""
    # lazy: per command; vkcap --help imports this module, not capture.trace_target, capture.writer, vkcore.outputs, vkcore.scenario.load (with msgpack, xxhash, zstandard)
    from capture.writer import failed_trace_path
    from capture.trace_target import clear_partials
    from vkcore.outputs import check_output_target
    from vkcore.scenario.load import load_scenario

    check_output_target(target, place="-o")
    scenario = load_scenario(run.scenario, warn_deprecated=True)
    clash = _scenario_clash(target, scenario, run.output)
    if clash is not None:
        raise UsageError(f"{clash}: refusing to overwrite it with the trace", file=target, place="-o")
    if not os.path.exists(target):
        clear_partials(target)
        return scenario, None
    _check_is_trace(target)
    failed = Path(failed_trace_path(target))
    check_output_target(failed, place="-o")
    clear_partials(target)
    return scenario, ExistingTrace(failed, _signature(failed))


def _scenario_clash(target: Path, scenario: Any, output: Path | None) -> str | None:
    """What ``target`` is to the scenario, when it is the scenario, a ``src`` or a ``dst``, or None."""
    # lazy: per command; vkcap --help imports this module, not vkcore.outputs
    from vkcore.outputs import same_file

    if same_file(target, scenario.path):
        return "is the scenario itself"
    for resource in scenario.resources:
        src = getattr(resource, "src", "")
        if src and same_file(target, scenario.src_path(src)):
            return f"is {resource.place}.src, a file the scenario reads"
        dst = getattr(resource, "dst", "")
        if dst and same_file(target, scenario.dst_path(dst, output)):
            return f"is {resource.place}.dst, a file the run writes"
    return None


def _check_is_trace(path: Path) -> None:
    """Refuse an existing ``path`` that does not start with the trace magic (docs/trace-format.md §3)."""
    # lazy: per command; vkcap --help imports this module, not capture.trace_target (with msgpack, xxhash)
    from capture.trace_target import check_replaceable

    check_replaceable(path, place="-o")


def _signature(path: Path) -> FileSignature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _say_where_failed_went(exc: VkcapError, target: Path, existing: ExistingTrace) -> None:
    """Add to the error of a failed recording that the trace at ``target`` was kept and where the
    recording's complete frames went, when it wrote them (a failure before the first frame writes none)."""
    now = _signature(existing.failed)
    if now is not None and now != existing.failed_before:
        exc.message += f"; {target} was kept, the frames completed before are in {existing.failed}"
        exc.args = (exc.render(),)


def _record_figures(result: Any) -> str:
    """``: X captured, Y stored (Rx), ...`` for the trace just written: the recorder's own tally of the
    frames' snapshots (:mod:`capture.tally`, as ``info`` counts them when it reads the trace); "" when
    the file at the path is no longer that trace (another writer replaced it meanwhile; a trace that
    could not be published raises instead)."""
    try:
        if result.trace.stat().st_size != result.file_bytes:
            return ""
    except OSError:
        return ""
    return f": {snapshot_figures(result.snapshots)}; file {size_text(result.file_bytes)}"


def _write_summary(path: Path, result: Any) -> None:
    """``record --json``: the trace, its frames and sizes, the snapshot totals and the snapshot work's
    throughput (:class:`capture.recorder.Throughput`, with its thread count)."""
    # lazy: per command; vkcap --help imports this module, not vkcore.outputs
    from vkcore.outputs import output_error

    summary = {
        "trace": str(result.trace), "frames": result.frames, "file_bytes": result.file_bytes,
        "snapshots": result.snapshots,
        "throughput": None if result.throughput is None else result.throughput.to_json(),
    }
    try:
        path.write_text(json.dumps(summary, indent=1) + "\n")
    except OSError as exc:
        raise output_error(path, exc) from None
