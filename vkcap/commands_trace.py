"""The trace subcommands' parsers (record, info, export, replay, diff, bisect), and the commands that
compare: replay, diff and bisect. ``record`` is in :mod:`vkcap.commands_record`, ``info`` and ``export`` in
:mod:`vkcap.commands_inspect`, the checks of the comparing commands' flags in :mod:`vkcap.compare_flags`."""
from __future__ import annotations

import argparse
import contextlib
import json as _json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from vkcore.errors import UsageError
from vkcore.safe_text import rich_text, shown

from replay.page_scratch import forget_scratch, scratch_folder

from .commands_extract import extract_command, extract_options, log_extracted
from .commands_inspect import cmd_export, cmd_info
from .commands_record import cmd_record
from .compare_flags import add_compare_flags, check_compare_flags, replay_options, shapes, tolerance_policy
from .vulkan_start import TRACE_CODECS, start_vulkan_early

if TYPE_CHECKING:
    from replay.bisect import BisectResult
    from replay.isolate import ProbeServer

AddFlags = Callable[[argparse.ArgumentParser], None]

#: The Vulkan loader's driver variables (``--icd`` sets them; the recording device is looked for without).
LOADER_VARIABLES = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")


def register(sub: Any, add_common: AddFlags, add_run_flags: AddFlags, add_device: AddFlags) -> None:
    """Add the trace subcommands to the ``vkcap`` parser."""
    rec = sub.add_parser("record", help="run a scenario and capture every frame boundary into a trace")
    add_run_flags(rec)
    rec.add_argument("-o", "--trace", type=Path, help="trace file (default: traces/<scenario file's stem>.vkt; for a file called "
                          "scenario.json, traces/<its folder's name>.vkt)")
    rec.add_argument("--capture", choices=("boundary", "all"), default="boundary",
                     help="boundary: what each mark_boundary names; all: that plus every writable resource, at every boundary")
    rec.add_argument("--checkpoint-every", type=int, default=8, metavar="K",
                     help="store the full state every K frames so replay can start near any frame (0: never; default 8)")
    rec.add_argument("--dispatch-level", action="store_true", help="also snapshot what each dispatch writes, after it")
    rec.add_argument("--compression-level", type=int, default=3, metavar="L", help="zstd level (default 3; 1 or negative: faster, larger)")
    rec.add_argument("--compression-threads", type=int, default=-1, metavar="N",
                     help="zstd worker threads for large snapshots (default -1: one per core; 0: none)")
    rec.add_argument("--record-threads", type=int, default=0, metavar="N",
                     help="threads that hash, compare and compress the snapshots (default 0: one per core); "
                          "the trace is the same whatever their number")
    rec.add_argument("--json", type=Path, metavar="FILE",
                     help="write the recording's summary as JSON: frames, sizes, and the snapshot work's "
                          "throughput with its thread count")
    rec.add_argument("--fsync", action="store_true",
                     help="sync the trace to disk before publishing it, so that it also survives a power loss "
                          "(without: it survives the recorder being killed at any moment, not a power loss)")
    add_common(rec)
    rec.add_argument("--frames-per-submit", action="store_true",
                     help="for a GFXReconstruct capture (.gfxr): end a frame at each queue submit that dispatches")
    rec.set_defaults(handler=cmd_record)

    info = sub.add_parser("info", help="what a trace holds: scenario, device, frames, sizes")
    info.add_argument("trace", type=Path)
    info.add_argument("--json", action="store_true", help="print JSON")
    add_common(info)
    info.set_defaults(handler=cmd_info)

    export = sub.add_parser("export", help="write one snapshot of a trace as a file")
    export.add_argument("trace", type=Path)
    export.add_argument("--frame", type=int, required=True, help="frame (position in the recording, from 0)")
    export.add_argument("--resource", required=True, metavar="UID")
    export.add_argument("-o", "--output", type=Path, required=True, help="output file (.npy)")
    export.add_argument("--raw", action="store_true",
                        help="a buffer as its bytes (a flat int8 array, as run writes it), not typed by its shader's view")
    add_common(export)
    export.set_defaults(handler=cmd_export)

    rep = sub.add_parser("replay", help="re-dispatch recorded frames and compare with what was recorded")
    rep.add_argument("trace", type=Path)
    group = rep.add_mutually_exclusive_group()
    group.add_argument("--frame", type=int, help="replay one frame (from the nearest checkpoint)")
    group.add_argument("--frames", metavar="A-B", help="replay frames A to B")
    add_compare_flags(rep)
    rep.add_argument("--replace-shader", action="append", default=[], metavar="UID=FILE",
                     help="replay with another shader (.spv as SPIR-V, else GLSL); repeatable")
    rep.add_argument("--timeout", type=float, metavar="SECONDS", help="give up on a frame that runs longer than this")
    rep.add_argument("--heatmap", type=Path, metavar="DIR", help="write a PNG of |error| for each diverged 2-d+ resource")
    rep.add_argument("--value-maps", action="store_true", help=argparse.SUPPRESS)  # with heatmaps, both sides (--html)
    rep.add_argument("--isolate", action="store_true",
                     help="run the device work in a child process: a driver crash is reported (frame, signal) as a divergence")
    rep.add_argument("--stop-at-first-divergence", action="store_true", help=argparse.SUPPRESS)
    add_device(rep)
    rep.add_argument("--icd", type=Path, metavar="FILE.json", help="replay on this Vulkan driver (sets VK_DRIVER_FILES)")
    add_common(rep)
    rep.set_defaults(handler=cmd_replay)

    dif = sub.add_parser("diff", help="compare two recordings of the same scenario")
    dif.add_argument("trace", type=Path, metavar="A.vkt")
    dif.add_argument("other", type=Path, metavar="B.vkt")
    add_compare_flags(dif)
    add_common(dif)
    dif.set_defaults(handler=cmd_diff)

    bis = sub.add_parser("bisect", help="find the first divergent frame, then the first divergent dispatch")
    bis.add_argument("trace", type=Path)
    add_compare_flags(bis)
    bis.add_argument("--replace-shader", action="append", default=[], metavar="UID=FILE",
                     help="bisect with another shader (the recorded one is then the reference that names the dispatch)")
    bis.add_argument("--no-isolate", dest="isolate", action="store_false",
                     help="run probes in this process (faster; a driver crash then ends the search)")
    bis.add_argument("--exhaustive", action="store_true",
                     help="also replay every segment before the one found: exact even for one-off divergences")
    bis.add_argument("--timeout", type=float, metavar="SECONDS", help="give up on a frame that runs longer than this")
    add_device(bis)
    bis.add_argument("--icd", type=Path, metavar="FILE.json", help="the driver under test (sets VK_DRIVER_FILES)")
    bis.add_argument("--reference-icd", type=Path, metavar="FILE.json",
                     help="a known-good driver: without dispatch-level snapshots, the divergent frame is run "
                          "dispatch by dispatch on both drivers to name the dispatch")
    bis.add_argument("--extract", type=Path, metavar="DIR",
                     help="write the first divergent dispatch as a standalone scenario into DIR (see vkcap extract)")
    bis.add_argument("--force", action="store_true",
                     help="with --extract: replace an earlier extract at DIR (only what vkcap wrote there)")
    add_common(bis)
    bis.set_defaults(handler=cmd_bisect)


def report_outputs(args: argparse.Namespace, kind: str, document: dict[str, Any], frames: list[Any],
                   crash: tuple[int | None, str] | None = None, sides: tuple[str, str] | None = None,
                   fingerprints: list[tuple[str, dict[str, Any]]] | None = None,
                   bisect: dict[str, Any] | None = None) -> None:
    """Write every report asked for (``--json``, ``--junit``, ``--html``); a ``crash`` (frame, line) is a
    JUnit failure and a crashed frame on the page; ``sides`` names what was compared in JUnit messages
    (default: recorded and live); ``fingerprints`` head the page, ``bisect`` adds its probes. The page
    is written first: the pictures it embeds from a scratch folder (:func:`html_scratch`) are then
    dropped from the comparisons, so no other report names a file that is about to be removed."""
    # lazy: per command; vkcap --help imports this module, not replay.report
    from replay.report import REPLAY_SIDES, write_json, write_junit

    if getattr(args, "html", None):
        # lazy: per command; vkcap --help imports this module, not replay.html, replay.tolerances (with jinja2, markupsafe)
        from replay.html import write_html
        from replay.tolerances import describe_tolerance

        write_html(args.html, title=f"vkcap {kind}: {args.trace}", fingerprints=fingerprints or [],
                   tolerance=describe_tolerance(tolerance_policy(args)), frames=frames,
                   crashed=None if crash is None else crash[0], bisect=bisect,
                   command_line=getattr(args, "argv", ()), **replaced_items(args, kind, document))
        scratch = getattr(args, "html_scratch", None)
        if scratch is not None:
            forget_scratch(frames, document, scratch)
    if args.json:
        write_json(args.json, document)
    if args.junit:
        write_junit(args.junit, f"vkcap.{kind}", frames, crash=crash, sides=sides or REPLAY_SIDES)


def replaced_items(args: argparse.Namespace, kind: str, document: dict[str, Any]) -> dict[str, Any]:
    """What a run changed, for the page's summary (``replaced`` and its ``replaced_label``): each
    ``--replace-shader UID=FILE``, ``--icd`` and ``--reference-icd``, as (what, by) pairs; for a diff, what
    differs between the recordings (embedded files, fingerprint fields)."""
    if kind == "diff":
        items = [("embedded file", str(name)) for name in document.get("file_changes") or ()]
        items += [(str(key), f"{a} → {b}") for key, (a, b) in (document.get("fingerprint_changes") or {}).items()]
        return {"replaced": items, "replaced_label": "A and B differ in"}
    items = []
    for given in getattr(args, "replace_shader", None) or ():
        uid, _, path = str(given).partition("=")
        items.append((f"shader {uid}", path))
    for flag, label in (("icd", "driver (ICD)"), ("reference_icd", "reference driver (ICD)")):
        if getattr(args, flag, None) is not None:
            items.append((label, str(getattr(args, flag))))
    return {"replaced": items}


@contextlib.contextmanager
def html_scratch(args: argparse.Namespace) -> Iterator[None]:
    """``--html``: the comparisons draw both sides and the difference of each diverged 2-d+ resource
    (``args.value_maps``) for the page to show, into ``--heatmap`` or, without it, a temporary folder
    (``args.html_scratch``) that is removed when the block ends, on every exit path (an error, Ctrl-C)."""
    if getattr(args, "html", None):
        args.value_maps = True
        if getattr(args, "heatmap", None) is None:
            with scratch_folder() as scratch:
                args.heatmap = args.html_scratch = scratch
                yield
            return
    yield


def cmd_replay(args: argparse.Namespace) -> int:
    with html_scratch(args):
        return _replay(args)


def _replay(args: argparse.Namespace) -> int:
    log = logging.getLogger("vkcap")
    check_compare_flags(args, [args.trace])  # before Vulkan starts, and before an isolated child does
    # lazy: per command; vkcap --help imports this module, not replay.isolate
    from replay.isolate import in_isolated_child

    if args.isolate and not in_isolated_child():  # a child never isolates again
        return replay_isolated(args, log)
    start_vulkan_early(args.icd, args.device, also=TRACE_CODECS)  # the replay runs in this process
    # lazy: per command; vkcap --help imports this module, not capture.trace (with msgpack, xxhash, zstandard)
    from capture.trace import Trace

    with Trace.open(args.trace) as trace:
        report = replay_and_print(replay_options(args, trace), trace, auto_tolerance=args.tolerance == "auto", log=log)
    report_outputs(args, "replay", replay_document(report), report.frames,
                   fingerprints=[("recorded", report.recorded_device), ("live", report.device)])
    return tell_outcome(report, log)


def replay_and_print(options: Any, trace: Any, *, auto_tolerance: bool, log: Any) -> Any:  # -> ReplayReport
    """The replay of ``options`` (its tolerances measured first with ``auto_tolerance``) on ``trace``
    (open), its frames printed as a table: ``vkcap replay``'s, in process or in an isolated child
    (:mod:`vkcap.replay_child`)."""
    # lazy: per command; vkcap --help imports this module, not replay.replayer, replay.report, vkcap.progress (with msgpack, vulkan, xxhash, zstandard)
    from replay.replayer import replay, target_frames
    from replay.report import print_frames

    from .progress import Activity

    if auto_tolerance:
        # lazy: per command; vkcap --help imports this module, not replay.auto (with msgpack, numpy, vulkan, xxhash, zstandard)
        from replay.auto import auto_tolerances

        options = auto_tolerances(options, log, opened=trace)
    name = options.trace.name
    with Activity(f"replaying {name}", len(target_frames(trace, options.first, options.last))) as progress:
        report = replay(options, opened=trace,
                        on_frame=lambda f: progress.advance(description=f"replaying {name}: frame {f.seq}"))
    print_frames(report.frames)
    return report


def replay_document(report: Any) -> dict[str, Any]:
    """The report document of a replay (what ``--json`` writes)."""
    # lazy: per command; vkcap --help imports this module, not replay.report
    from replay.report import frames_document

    return {
        "trace": str(report.trace),
        "device": report.device,
        "recorded_device": report.recorded_device,
        "started_from_checkpoint": report.started_from_checkpoint,
        "frames_executed": report.executed,
        "diverged": report.diverged,
        "frames": frames_document(report.frames),
    }


def tell_outcome(report: Any, log: Any) -> int:
    """Log what a replay ran and found; its exit code (1: a frame diverged)."""
    # lazy: per command; vkcap --help imports this module, not replay.report
    from replay.report import comparison_line

    first = report.first_divergence
    compared = len(report.frames)
    if report.frames:
        log.info("%s", replay_scope(report.started_from_checkpoint, report.executed, [f.seq for f in report.frames]))
    if first is None:
        uuid = str(report.device.get("device_uuid") or "")[:8]  # the live device's: identical GPUs told apart
        log.info("%d frame(s) replayed on %s%s: all within tolerance", compared, report.device.get("device_name"),
                 f" [{uuid}]" if uuid else "")
        return 0
    bad = [c for c in first.comparisons if c.diverged] + [c for _, c in first.dispatches if c.diverged]
    log.warning("first divergence at frame %d (frame_id %d): %s", first.seq, first.frame_id, comparison_line(bad[0]))
    log.warning("%d of %d frame(s) diverged", sum(f.diverged for f in report.frames), compared)
    return 1


def replay_scope(checkpoint: int, executed: int, compared: list[int]) -> str:
    """Where a replay started and what it ran, e.g. ``replayed frame 50 from checkpoint 47 (the state
    after frame 47): ran frames 48-50, 2 of them only to reach frame 50``."""
    first, last = min(compared), max(compared)
    what = f"frame {first}" if first == last else f"frames {first}-{last}"
    start = ("from the start of the trace (checkpoint -1)" if checkpoint < 0
             else f"from checkpoint {checkpoint} (the state after frame {checkpoint})")
    ran = checkpoint + 1, checkpoint + executed
    ran_text = f"frame {ran[0]}" if ran[0] == ran[1] else f"frames {ran[0]}-{ran[1]}"
    reach = first - ran[0]
    return (f"replayed {what} {start}: ran {ran_text}" +
            (f", {reach} of them only to reach frame {first}" if reach > 0 else ""))


def cmd_diff(args: argparse.Namespace) -> int:
    args.heatmap = None  # diff has no --heatmap: with --html, the pictures go to a scratch folder
    with html_scratch(args):
        return _diff(args)


def _diff(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not capture.trace, replay.diff, replay.reading, replay.report (with msgpack, numpy, xxhash, zstandard)
    from capture.trace import Trace
    from replay.diff import diff_traces
    from replay.reading import warn_bytes_tolerances
    from replay.report import DIFF_SIDES, comparison_line, frames_document, print_frames

    log = logging.getLogger("vkcap")
    if args.tolerance == "auto":
        raise UsageError("--tolerance auto needs a replay; diff compares two recordings as they are")
    check_compare_flags(args, [args.trace, args.other])
    with Trace.open(args.trace) as a, Trace.open(args.other) as b:
        policy = tolerance_policy(args, a.resources)
        warn_bytes_tolerances(a, policy)
        # lazy: per command; vkcap --help imports this module, not vkcap.progress
        from .progress import Activity

        with Activity(f"diff: comparing {args.trace.name} with {args.other.name}") as progress:
            report = diff_traces(a, b, policy, shapes(args, a.resources, policy), pictures=args.heatmap,
                                 on_frame=lambda seq, total: progress.update(
                                     description=f"diff: frame {seq}", completed=progress.completed + 1, total=total))
    for key, (va, vb) in report.fingerprint_changes.items():
        log.info("fingerprint %s: %s -> %s", key, va, vb)
    for name in report.file_changes:
        log.info("embedded file differs: %s", name)
    print_frames(report.frames, title=f"diff: A = {rich_text(args.trace)}, B = {rich_text(args.other)}")
    document = {
        "a": str(args.trace), "b": str(args.other), "diverged": report.diverged,
        "fingerprint_changes": {k: list(v) for k, v in report.fingerprint_changes.items()},
        "file_changes": report.file_changes, "only_in_a": report.only_in_a, "only_in_b": report.only_in_b,
        "frames": frames_document(report.frames),
    }
    report_outputs(args, "diff", document, report.frames, sides=DIFF_SIDES,
                   fingerprints=[("A", a.fingerprint), ("B", b.fingerprint)])
    if report.only_in_a or report.only_in_b:
        log.warning("frames only in A: %s; only in B: %s", report.only_in_a or "none", report.only_in_b or "none")
    first = next((f for f in report.frames if f.diverged), None)
    if first is None and not report.diverged:
        log.info("%d frame(s) compared: all within tolerance", len(report.frames))
        return 0
    if first is not None:
        bad = next(c for c in first.comparisons if c.diverged)
        log.warning("first divergence at frame %d: %s", first.seq, comparison_line(bad, DIFF_SIDES))
    return 1


def cmd_bisect(args: argparse.Namespace) -> int:
    args.heatmap = None  # bisect has no --heatmap: with --html, its probes draw into a scratch folder
    with html_scratch(args):
        if not args.isolate:
            return _bisect(args, None)
        # lazy: per command; vkcap --help imports this module, not replay.isolate
        from replay.isolate import ProbeServer

        # The probes' child starts first, so its start-up (Python, its modules) overlaps this process's
        # own imports and checks; a bad trace or flag ends it with this process.
        with ProbeServer() as server:
            server.start()
            return _bisect(args, server)


def _bisect(args: argparse.Namespace, server: "ProbeServer | None") -> int:
    # lazy: per command; vkcap --help imports this module, not vkcore.device.driver
    from vkcore.device.driver import use_driver

    check_compare_flags(args, [args.trace])  # --reference-icd's manifest too
    if args.extract is not None:  # a folder that must not be written is refused before the search
        # lazy: per command; vkcap --help imports this module, not vkcore.output_folders
        from vkcore.output_folders import check_folder_target

        check_folder_target(args.extract, place="--extract", force=args.force, inputs=[args.trace])

    loader_env = {k: os.environ.get(k) for k in LOADER_VARIABLES}  # the recording device is looked for with these
    use_driver(args.icd)
    if server is None:  # the probes run here: let the driver start while the modules load

        start_vulkan_early(device=args.device, also=TRACE_CODECS)
    # lazy: per command; vkcap --help imports this module, not capture.trace, replay.bisect, replay.report (with msgpack, xxhash, zstandard)
    from capture.trace import Trace
    from replay.bisect import Span, bisect_trace, dispatch_name
    from replay.report import comparison_line

    log = logging.getLogger("vkcap")
    args.frame = args.frames = None
    with Trace.open(args.trace) as trace:
        options = replay_options(args, trace)
        if args.tolerance == "auto":
            # lazy: per command; vkcap --help imports this module, not replay.auto (with msgpack, numpy, vulkan, xxhash, zstandard)
            from replay.auto import auto_tolerances

            options = auto_tolerances(options, log, opened=trace)

        # lazy: per command; vkcap --help imports this module, not vkcap.progress
        from .progress import Activity, frames_text

        def on_probe(span: Span, diverged: bool) -> None:
            what = (f"frames {span.first}-{span.last}" if span.whole
                    else f"frame {span.last} alone, from the state recorded after frame {span.start}")
            log.info("segment %d (%s): %s", span.segment, what, "DIVERGED" if diverged else "ok")

        with Activity("bisect: starting") as progress:
            def on_probe_start(span: Span) -> None:
                progress.advance(description=f"bisect: probe {progress.completed + 1}, {frames_text(span.first, span.last)}")

            result = bisect_trace(trace, options, on_probe=on_probe, exhaustive=args.exhaustive,
                                  reference_icd=args.reference_icd, probe_server=server, loader_env=loader_env,
                                  on_probe_start=on_probe_start)
        document: dict[str, Any] = {
            "trace": str(args.trace), "segments": result.segments, "replays": result.replays,
            "probes": [{"segment": p.segment, "frames": [p.first, p.last], "from_state_after": p.start, "diverged": d}
                       for p, d in result.probes],
            "frames_executed_at_most": result.frames_executed, "fallback_scan": result.fallback_scan,
            "exhaustive": result.exhaustive, "child_processes": result.child_processes,
        }
        if result.crash:
            document.update({"diverged": True, "crashed": True, "frame": result.crash_frame, "crash": result.crash})
            report_outputs(args, "bisect", document, [], crash=(result.crash_frame, result.crash),
                           fingerprints=[("recorded", trace.fingerprint)], bisect=document)
            print(f"first divergence: {shown(result.crash)}")
            print(f"search: {search_size(result)} in {result.child_processes} child process(es), a new one after a crash")
            return 1
        if result.frame is None:
            log.info("no divergence found in %s", search_size(result))
            document["diverged"] = False
            report_outputs(args, "bisect", document, [], fingerprints=[("recorded", trace.fingerprint)], bisect=document)
            return 0
        name = dispatch_name(_json.loads(trace.portable_json), result.command) if result.command is not None else None
    extras = result.dispatch_comparison.extras if result.dispatch_comparison is not None else {}
    document.update({
        "diverged": True, "frame": result.frame.seq, "frame_id": result.frame.frame_id,
        "command": result.command, "dispatch": name, "found_by": result.found_by or None,
        "unnamed": result.unnamed or None, "segment": extras.get("segment"), "module": extras.get("module"),
        "resource": result.resource.as_dict() if result.resource else None,
    })
    report_outputs(args, "bisect", document, [result.frame], fingerprints=[("recorded", trace.fingerprint)],
                   bisect={**document, "command_name": name or ""})
    print(f"first divergent frame: {result.frame.seq} (frame_id {result.frame.frame_id})")
    segment = ""
    if result.command is not None:
        via = f", found by {result.found_by}" if result.found_by else ""
        segment = f", segment {extras['segment']} (module {extras['module']})" if "segment" in extras else ""
        print(f"first divergent dispatch: commands[{result.command}] ({shown(name)}){shown(segment)}{shown(via)}")
    else:
        why = result.unnamed or "the trace has no dispatch-level snapshots of this frame"
        print(f"first divergent dispatch: unknown: {shown(why)}; record with --dispatch-level "
              "(or give --replace-shader or --reference-icd) to name it")
    if result.resource is not None:
        print(shown(comparison_line(result.resource)))
    if args.extract is not None:
        _extract_divergence(args, result, trace.fingerprint, options, segment.removeprefix(", "), extras.get("segment"))
    how = ("binary search found nothing; scanned in order" if result.fallback_scan
           else "every earlier segment checked" if result.exhaustive
           else "binary search, assuming the divergence persists; --exhaustive checks every earlier segment")
    print(f"search: {search_size(result)} ({how})")
    return 1


def _extract_divergence(args: argparse.Namespace, result: "BisectResult", recorded: dict[str, Any], options: Any,
                        segment: str, segment_index: int | None = None) -> None:
    """``bisect --extract DIR``: the first divergent dispatch as a standalone scenario, its README saying
    how it diverged; where bisect named a segment of a graph dispatch, that segment alone (the whole
    dispatch, and a warning saying why, without ARM's vgfpy); without a dispatch named, nothing is written
    (and the log says why)."""
    # lazy: per command; vkcap --help imports this module, not replay.extract, replay.report (with msgpack, vulkan, xxhash, zstandard)
    from replay.extract import Divergence
    from replay.report import comparison_line

    log = logging.getLogger("vkcap")
    if result.command is None or result.frame is None:
        log.warning("--extract %s: no dispatch named, nothing extracted", args.extract)
        return
    if segment_index is not None:
        # lazy: per command; vkcap --help imports this module, not replay.extract_segment (with flatbuffers, msgpack, numpy, vulkan, xxhash, zstandard)
        from replay.extract_segment import INSTALL, has_vgf_encoder

        if not has_vgf_encoder():
            log.warning("--extract %s: extracting the whole graph dispatch, not segment %d alone, which needs ARM's "
                        "vgfpy: %s", args.extract, segment_index, INSTALL)
            segment_index = None
    compared = result.dispatch_comparison or result.resource
    line = comparison_line(compared) if compared is not None else "diverged"
    divergence = Divergence(line, recorded, {}, options.replace_shaders, segment, result.found_by,
                            result.reference_outputs, result.reference_side)
    # The extract compares as this bisect did (tolerances, dtypes) and holds the candidate's shaders.
    extracting = replace(extract_options(args), tolerances=options.tolerances, dtypes=options.dtypes,
                         replace_shaders=options.replace_shaders)
    log_extracted(extract_command(args.trace, result.frame.seq, result.command, args.extract, extracting,
                                  divergence, argv=getattr(args, "argv", []), segment=segment_index,
                                  place="--extract", force=args.force))


def search_size(result: "BisectResult") -> str:
    """How much a bisection replayed, e.g. ``4 replay(s), 8 frame(s) at most, over 13 segment(s)``."""
    return (f"{result.replays} replay(s), {result.frames_executed} frame(s) at most, "
            f"over {result.segments} segment(s)")


def replay_isolated(args: argparse.Namespace, log: Any) -> int:
    """``replay --isolate``: the same replay in a child; a crash is a finding (exit 1), never a lost run.

    Every report asked for is written here, from the child's report or of the crash (JUnit: a failing
    ``driver crash`` case); bad input (the child exits 2) raises the child's error line and writes none."""
    # lazy: per command; vkcap --help imports this module, not replay.isolate, replay.report, vkcap.progress
    from replay.isolate import run_child
    from replay.report import frames_from_document

    from .progress import Activity

    options = replay_options(args)  # checked against the trace here: bad input ends the command before a child starts
    with Activity(f"replaying {args.trace.name} in a child process (--isolate)"):
        outcome = run_child(options, auto_tolerance=args.tolerance == "auto")
    if outcome.report is not None:
        report_outputs(args, "replay", outcome.report, frames_from_document(outcome.report["frames"]),
                       fingerprints=[("recorded", outcome.report.get("recorded_device") or {}),
                                     ("live", outcome.report.get("device") or {})])
        return outcome.returncode
    line = outcome.crash_line()
    log.error("%s", line)
    report_outputs(args, "replay", {"trace": str(args.trace), **outcome.crash_document()}, [],
                   crash=(outcome.crashed_frame, line))
    return 1
