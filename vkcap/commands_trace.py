"""Trace subcommands: record, info, export (replay, diff and bisect join them as they land)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from vkcore.errors import EXIT_INTERRUPTED, UsageError

if TYPE_CHECKING:
    from replay.bisect import BisectResult
    from replay.isolate import ProbeServer

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, add_common: AddFlags, add_run_flags: AddFlags, add_device: AddFlags) -> None:
    """Add the trace subcommands to the ``vkcap`` parser."""
    rec = sub.add_parser("record", help="run a scenario and capture every frame boundary into a trace")
    add_run_flags(rec)
    rec.add_argument("-o", "--trace", type=Path, help="trace file (default: traces/<scenario>.vkt)")
    rec.add_argument("--capture", choices=("boundary", "all"), default="boundary",
                     help="boundary: what each mark_boundary names; all: that plus every writable resource, at every boundary")
    rec.add_argument("--checkpoint-every", type=int, default=8, metavar="K",
                     help="store the full state every K frames so replay can start near any frame (0: never; default 8)")
    rec.add_argument("--dispatch-level", action="store_true", help="also snapshot what each dispatch writes, after it")
    rec.add_argument("--compression-level", type=int, default=3, metavar="L", help="zstd level (default 3; 1 or negative: faster, larger)")
    rec.add_argument("--compression-threads", type=int, default=-1, metavar="N",
                     help="zstd worker threads for large snapshots (default -1: one per core; 0: none)")
    add_common(rec)
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
    rep.add_argument("--isolate", action="store_true",
                     help="run the device work in a child process: a driver crash is reported (frame, signal) as a divergence")
    rep.add_argument("--progress-file", type=Path, help=argparse.SUPPRESS)  # written by an isolated child
    rep.add_argument("--stop-at-first-divergence", action="store_true", help=argparse.SUPPRESS)
    rep.add_argument("--serve-probes", action="store_true", help=argparse.SUPPRESS)  # an isolated bisect's child
    rep.add_argument("--probe-fd", type=int, help=argparse.SUPPRESS)
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
    bis.add_argument("--replace-shader", action="append", default=[], metavar="UID=FILE", help="bisect with another shader")
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
    add_common(bis)
    bis.set_defaults(handler=cmd_bisect)


def add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--atol", type=float, help="absolute tolerance")
    p.add_argument("--rtol", type=float, help="relative tolerance")
    p.add_argument("--ulp", type=int, help="tolerance in units in the last place (floats)")
    p.add_argument("--tolerance", metavar="FILE.toml|auto", help="per-resource tolerances (TOML), or 'auto'")
    p.add_argument("--dtype", action="append", default=[], metavar="UID=TYPE", help="read a buffer as TYPE (e.g. float32)")
    p.add_argument("--shape", action="append", default=[], metavar="UID=HxW", help="the shape of a raw buffer (for indices and heatmaps)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write the results as JUnit XML")


ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL = -(1 << 17), 22  # zstd's ZSTD_minCLevel() and ZSTD_maxCLevel()


def cmd_record(args: argparse.Namespace) -> int:
    import logging

    from .cli import check_run_flags, run_options, start_vulkan_early

    if args.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be 0 or more, got {args.checkpoint_every}")
    if not ZSTD_MIN_LEVEL <= args.compression_level <= ZSTD_MAX_LEVEL:
        raise UsageError(f"--compression-level must be between {ZSTD_MIN_LEVEL} and {ZSTD_MAX_LEVEL} (zstd's levels), "
                         f"got {args.compression_level}")
    if args.compression_threads < -1:
        raise UsageError(f"--compression-threads must be -1 (one per core), 0 (none) or more, got {args.compression_threads}")
    check_run_flags(args)
    start_vulkan_early(device=args.device)  # before the imports below, which it overlaps
    run = run_options(args, capture_all=args.capture == "all")
    from capture.recorder import RecordOptions, default_trace_path, record

    options = RecordOptions(
        run=run,
        trace=args.trace or default_trace_path(run.scenario),
        checkpoint_every=args.checkpoint_every,
        dispatch_level=args.dispatch_level,
        level=args.compression_level,
        threads=args.compression_threads,
    )
    from .progress import FrameProgress

    with FrameProgress.for_terminal() as progress:
        result = record(options, getattr(args, "argv", sys.argv), progress.on_event)
    log = logging.getLogger("vkcap")
    ratio = result.raw_bytes / result.file_bytes if result.file_bytes else 0.0
    log.info(
        "recorded %d frame(s) on %s into %s: %s captured, %s on disk (%.1fx), %s deduplicated",
        result.frames, result.run.device_name, result.trace, _size(result.raw_bytes), _size(result.file_bytes), ratio,
        _size(result.dedup_bytes),
    )
    if result.run.interrupted:
        if result.frames:
            log.warning("interrupted: the trace holds the %d frame(s) completed before Ctrl-C", result.frames)
        else:
            log.warning("interrupted before the first frame completed: no trace was written")
        return EXIT_INTERRUPTED
    return 0


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def trace_summary(path: Path) -> dict[str, Any]:
    """Everything ``vkcap info`` shows, as plain data."""
    from capture.trace import Trace

    with Trace.open(path) as trace:
        per_resource: dict[str, dict[str, int]] = {}
        seen: set[str] = set()
        for f in trace.frames:
            for uid, key in f.snapshots.items():
                entry = per_resource.setdefault(uid, {"snapshots": 0, "raw_bytes": 0, "stored_bytes": 0, "unique": 0})
                info = trace.reader.blob_info(key)
                entry["snapshots"] += 1
                entry["raw_bytes"] += info.raw_len
                if key not in seen:
                    seen.add(key)
                    entry["unique"] += 1
                    entry["stored_bytes"] += info.stored_len
        raw = sum(e["raw_bytes"] for e in per_resource.values())
        stored = sum(e["stored_bytes"] for e in per_resource.values())
        unique_raw = sum(trace.reader.blob_info(k).raw_len for k in seen)
        size = path.stat().st_size
        return {
            "trace": str(path),
            "file_bytes": size,
            "scenario": trace.scenario_name,
            "recorded": trace.header.get("created"),
            "vkcap_version": trace.header.get("vkcap_version"),
            "host": trace.header.get("host"),
            "fingerprint": trace.fingerprint,
            "frames": len(trace.frames),
            "passes": len({f.pass_index for f in trace.frames}),
            "checkpoints": sorted(c for c in trace.checkpoints if c >= 0),
            "checkpoint_every": trace.header.get("checkpoint_every"),
            "dispatch_level": bool(trace.header.get("dispatch_level")),
            "files": {name: {"role": role, "size": size_} for name, (role, _, size_) in sorted(trace.files.items())},
            "resources": per_resource,
            "snapshot_raw_bytes": raw,
            "snapshot_stored_bytes": stored,
            "compression_ratio": (unique_raw / stored) if stored else None,
            "dedup_saved_bytes": raw - unique_raw,
            "status": (trace.end or {}).get("status", "unfinished"),
            "error": (trace.end or {}).get("error") or None,
            "recovered": trace.recovered,
            "recovery_note": trace.reader.recovery_note or None,
            "corrupt_records": [{"offset": o, "type": t} for o, t in trace.reader.corrupt_records],
        }


def cmd_info(args: argparse.Namespace) -> int:
    summary = trace_summary(args.trace)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    fp = summary["fingerprint"]
    console.print(f"[bold]{summary['trace']}[/bold]  ({_size(summary['file_bytes'])})")
    console.print(f"scenario   {summary['scenario']}, recorded {summary['recorded']} on {summary['host']} (vkcap {summary['vkcap_version']})")
    console.print(
        f"device     {fp.get('device_name')} [{fp.get('vendor_id', 0):#06x}:{fp.get('device_id', 0):#06x}], "
        f"driver {fp.get('driver_name')} {fp.get('driver_version')} ({fp.get('driver_info')}), Vulkan {fp.get('api_version')}"
    )
    console.print(f"           pipelineCacheUUID {fp.get('pipeline_cache_uuid')}, layers: {', '.join(fp.get('layers') or []) or 'none'}")
    console.print(f"frames     {summary['frames']} in {summary['passes']} pass(es); checkpoints at {_ranges(summary['checkpoints'])}")
    status = summary["status"]
    if summary["recovered"]:
        console.print(f"[yellow]recovered[/yellow]  {summary['recovery_note']}")
    if status != "complete":
        console.print(f"[yellow]status[/yellow]     {status}{': ' + summary['error'] if summary['error'] else ''}")
    for c in summary["corrupt_records"]:
        console.print(f"[red]corrupt record[/red] at offset {c['offset']} (type {c['type']})")
    table = Table(title="snapshots by resource")
    for col in ("resource", "snapshots", "unique", "raw", "stored", "ratio"):
        table.add_column(col, justify="right" if col != "resource" else "left")
    for uid, e in summary["resources"].items():
        ratio = e["raw_bytes"] / e["stored_bytes"] if e["stored_bytes"] else float("inf")
        table.add_row(uid, str(e["snapshots"]), str(e["unique"]), _size(e["raw_bytes"]), _size(e["stored_bytes"]), f"{ratio:.1f}x")
    console.print(table)
    cr = summary["compression_ratio"]
    console.print(
        f"snapshots: {_size(summary['snapshot_raw_bytes'])} captured, {_size(summary['snapshot_stored_bytes'])} stored; "
        f"deduplication saved {_size(summary['dedup_saved_bytes'])}; compression {cr:.1f}x" if cr else "snapshots: none"
    )
    console.print(f"embedded files: {len(summary['files'])} ({', '.join(summary['files'])})")
    return 0


def _ranges(values: list[int]) -> str:
    if not values:
        return "none"
    if len(values) <= 6:
        return ", ".join(map(str, values))
    return f"{values[0]}, {values[1]}, ... {values[-1]} ({len(values)} in all)"


def cmd_export(args: argparse.Namespace) -> int:
    """Buffers as flat int8 .npy (like run); tensors as .npy typed by their format, shaped by dims."""
    from capture.trace import Trace
    from vkcore.npyio import write_flat_int8, write_typed

    with Trace.open(args.trace) as trace:
        data = trace.snapshot(args.frame, args.resource)
        meta = trace.resources.get(args.resource, {})
    kind = meta.get("kind", "buffer")
    suffix = args.output.suffix.lower()
    if kind == "tensor":
        if suffix != ".npy":
            raise UsageError(f"{args.output}: a tensor exports as .npy")
        from vkcore.formats import tensor_dtype

        write_typed(args.output, _npy_descr(tensor_dtype(meta["format"])), meta["dims"], data)
    elif kind == "buffer":
        if suffix != ".npy":
            raise UsageError(f"{args.output}: a buffer exports as .npy")
        write_flat_int8(args.output, data)
    elif kind == "image":
        export_image(args.output, meta, data)
    else:
        raise UsageError(f"exporting a {kind} is not supported yet")
    return 0


def export_image(path: Path, meta: dict[str, Any], data: bytes | memoryview) -> None:
    """Level 0 of an image snapshot as .dds or .png (like ``dst``); .npy as an NHWC array of all of level 0."""
    from vkcore.formats import format_info
    from vkcore.images import write_image_file

    fmt = format_info(meta["format"])
    dims = meta["dims"]
    width, height, texel = int(dims[1]), int(dims[2]), int(meta.get("texel_bytes", fmt.block_bytes))
    level0 = data[: width * height * texel]
    suffix = path.suffix.lower()
    if suffix == ".png" and fmt.name != "VK_FORMAT_R8G8B8A8_UNORM":
        raise UsageError(f"{path}: PNG export supports only VK_FORMAT_R8G8B8A8_UNORM, this image is {fmt.name}")
    if suffix in (".dds", ".png"):
        if suffix == ".dds" and fmt.dxgi_format is None:
            raise UsageError(f"{path}: {fmt.name} has no DDS equivalent; export it as .npy")
        write_image_file(path, fmt, width, height, texel, level0)
    elif suffix == ".npy":
        from vkcore.npyio import write_typed

        import numpy as np

        components = texel // np.dtype(fmt.dtype).itemsize if not fmt.is_packed else 1
        write_typed(path, np.dtype(fmt.dtype).str, (1, height, width, components), level0)
    else:
        raise UsageError(f"{path}: an image exports as .dds, .png or .npy")


def _npy_descr(dtype: str) -> str:
    """The descr the reference writes: '|b1' for bool, else numpy's spelling of ``dtype``."""
    import numpy as np

    return np.dtype(dtype).str


def _pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        uid, sep, rest = v.partition("=")
        if not sep or not uid or not rest:
            raise UsageError(f"{flag} {v!r}: expected UID=VALUE")
        out.append((uid, rest))
    return out


def frame_range(args: argparse.Namespace) -> tuple[int | None, int | None]:
    if getattr(args, "frame", None) is not None:
        if args.frame < 0:
            raise UsageError(f"--frame must be 0 or more, got {args.frame}")
        return args.frame, args.frame
    if getattr(args, "frames", None):
        a, sep, b = args.frames.partition("-")
        if not sep or not a.isdigit() or not b.isdigit() or int(a) > int(b):
            raise UsageError(f"--frames {args.frames!r}: expected A-B with 0 <= A <= B")
        return int(a), int(b)
    return None, None


def tolerance_policy(args: argparse.Namespace):  # -> TolerancePolicy
    from replay.results import DTYPES
    from replay.tolerances import TolerancePolicy, load_tolerance_file

    policy = TolerancePolicy()
    if args.tolerance and args.tolerance != "auto":
        policy = load_tolerance_file(Path(args.tolerance))
    for name, value in (("--atol", args.atol), ("--rtol", args.rtol), ("--ulp", args.ulp)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must be 0 or more, got {value}")
    policy = policy.with_defaults(args.atol, args.rtol, args.ulp)
    dtypes = dict(policy.dtypes)
    for uid, dtype in _pairs(args.dtype, "--dtype"):
        if dtype not in DTYPES:
            raise UsageError(f"--dtype {uid}={dtype}: unknown type (known: {', '.join(DTYPES)})")
        dtypes[uid] = dtype
    from dataclasses import replace

    return replace(policy, dtypes=dtypes)


def replay_options(args: argparse.Namespace, **extra: Any):  # -> ReplayOptions
    from replay.options import ReplayOptions

    first, last = frame_range(args)
    policy = tolerance_policy(args)
    return ReplayOptions(
        trace=args.trace,
        first=first,
        last=last,
        device=getattr(args, "device", None),
        icd=getattr(args, "icd", None),
        emulation="off" if getattr(args, "no_emulation_layers", False) else "auto",
        replace_shaders=tuple((uid, Path(p)) for uid, p in _pairs(getattr(args, "replace_shader", []), "--replace-shader")),
        dtypes=tuple(policy.dtypes.items()),
        tolerances=policy,
        frame_timeout_s=getattr(args, "timeout", None),
        shapes=tuple(shapes(args)),
        heatmap_dir=getattr(args, "heatmap", None),
        progress_file=getattr(args, "progress_file", None),
        stop_at_first_divergence=getattr(args, "stop_at_first_divergence", False),
        **extra,
    )


def shapes(args: argparse.Namespace) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for uid, text in _pairs(getattr(args, "shape", []), "--shape"):
        parts = text.lower().split("x")
        if not all(p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--shape {uid}={text}: expected positive sizes like 64x64 or 1x32x32x4")
        out.append((uid, tuple(int(p) for p in parts)))
    return out


def report_outputs(args: argparse.Namespace, kind: str, document: dict[str, Any], frames: list[Any]) -> None:
    from replay.report import write_json, write_junit

    if args.json:
        write_json(args.json, document)
    if args.junit:
        write_junit(args.junit, f"vkcap.{kind}", frames)


def cmd_replay(args: argparse.Namespace) -> int:
    import logging

    from .cli import start_vulkan_early

    log = logging.getLogger("vkcap")
    if args.isolate and not args.serve_probes:
        return replay_isolated(args, log)
    start_vulkan_early(args.icd, args.device)  # the replay runs in this process (perhaps the probes' child)
    from replay.report import comparison_line, frames_document, print_frames
    from replay.replayer import replay

    options = replay_options(args)
    if args.serve_probes:
        from replay.isolate import serve_probes

        return serve_probes(options, args.probe_fd)
    if args.tolerance == "auto":
        from replay.auto import auto_tolerances

        options = auto_tolerances(options, log)
    report = replay(options)
    print_frames(report.frames)
    document = {
        "trace": str(report.trace),
        "device": report.device,
        "recorded_device": report.recorded_device,
        "started_from_checkpoint": report.started_from_checkpoint,
        "frames_executed": report.executed,
        "diverged": report.diverged,
        "frames": frames_document(report.frames),
    }
    report_outputs(args, "replay", document, report.frames)
    first = report.first_divergence
    compared = len(report.frames)
    if first is None:
        log.info("%d frame(s) replayed on %s: all within tolerance", compared, report.device.get("device_name"))
        return 0
    bad = [c for c in first.comparisons if c.diverged] + [c for _, c in first.dispatches if c.diverged]
    log.warning("first divergence at frame %d (frame_id %d): %s", first.seq, first.frame_id, comparison_line(bad[0]))
    log.warning("%d of %d frame(s) diverged", sum(f.diverged for f in report.frames), compared)
    return 1


def cmd_diff(args: argparse.Namespace) -> int:
    import logging

    from capture.trace import Trace
    from replay.diff import diff_traces
    from replay.report import comparison_line, frames_document, print_frames

    log = logging.getLogger("vkcap")
    if args.tolerance == "auto":
        raise UsageError("--tolerance auto needs a replay; diff compares two recordings as they are")
    policy = tolerance_policy(args)
    with Trace.open(args.trace) as a, Trace.open(args.other) as b:
        report = diff_traces(a, b, policy)
    for key, (va, vb) in report.fingerprint_changes.items():
        log.info("fingerprint %s: %s -> %s", key, va, vb)
    for name in report.file_changes:
        log.info("embedded file differs: %s", name)
    print_frames(report.frames)
    document = {
        "a": str(args.trace), "b": str(args.other), "diverged": report.diverged,
        "fingerprint_changes": {k: list(v) for k, v in report.fingerprint_changes.items()},
        "file_changes": report.file_changes, "only_in_a": report.only_in_a, "only_in_b": report.only_in_b,
        "frames": frames_document(report.frames),
    }
    report_outputs(args, "diff", document, report.frames)
    if report.only_in_a or report.only_in_b:
        log.warning("frames only in A: %s; only in B: %s", report.only_in_a or "none", report.only_in_b or "none")
    first = next((f for f in report.frames if f.diverged), None)
    if first is None and not report.diverged:
        log.info("%d frame(s) compared: all within tolerance", len(report.frames))
        return 0
    if first is not None:
        bad = next(c for c in first.comparisons if c.diverged)
        log.warning("first divergence at frame %d: %s", first.seq, comparison_line(bad))
    return 1


def cmd_bisect(args: argparse.Namespace) -> int:
    if not args.isolate:
        return _bisect(args, None)
    from replay.isolate import ProbeServer

    # The probes' child starts first, so its start-up (Python, Vulkan, pipelines) overlaps this
    # process's own imports and checks; a bad trace or flag ends it with this process.
    with ProbeServer(child_arguments(args, "bisect", {"--exhaustive", "--no-isolate"},
                                     {"--json", "--junit", "--reference-icd"})) as server:
        server.start()
        return _bisect(args, server)


def _bisect(args: argparse.Namespace, server: "ProbeServer | None") -> int:
    import json as _json
    import logging

    from vkcore.driver import use_driver

    use_driver(args.icd)
    if server is None:  # the probes run here: let the driver start while the modules load
        from .cli import start_vulkan_early

        start_vulkan_early(device=args.device)
    from capture.trace import Trace
    from replay.bisect import Span, bisect_trace, dispatch_name
    from replay.report import comparison_line

    log = logging.getLogger("vkcap")
    args.frame = args.frames = None
    options = replay_options(args)
    if args.tolerance == "auto":
        from replay.auto import auto_tolerances

        options = auto_tolerances(options, log)
    with Trace.open(args.trace) as trace:
        def on_probe(span: Span, diverged: bool) -> None:
            what = (f"frames {span.first}-{span.last}" if span.whole
                    else f"frame {span.last} alone, from the state recorded after frame {span.start}")
            log.info("segment %d (%s): %s", span.segment, what, "DIVERGED" if diverged else "ok")

        if args.reference_icd is not None and not args.reference_icd.is_file():
            raise UsageError(f"--reference-icd {args.reference_icd}: no such driver manifest")
        result = bisect_trace(trace, options, on_probe=on_probe, exhaustive=args.exhaustive,
                              reference_icd=args.reference_icd, probe_server=server)
        document: dict[str, Any] = {
            "trace": str(args.trace), "segments": result.segments, "replays": result.replays,
            "probes": [{"segment": p.segment, "frames": [p.first, p.last], "from_state_after": p.start, "diverged": d}
                       for p, d in result.probes],
            "frames_executed_at_most": result.frames_executed, "fallback_scan": result.fallback_scan,
            "exhaustive": result.exhaustive, "child_processes": result.child_processes,
        }
        if result.crash:
            document.update({"diverged": True, "crashed": True, "frame": result.crash_frame, "crash": result.crash})
            report_outputs(args, "bisect", document, [])
            print(f"first divergence: {result.crash}")
            print(f"search: {search_size(result)} in {result.child_processes} child process(es), a new one after a crash")
            return 1
        if result.frame is None:
            log.info("no divergence found in %s", search_size(result))
            document["diverged"] = False
            report_outputs(args, "bisect", document, [])
            return 0
        name = dispatch_name(_json.loads(trace.portable_json), result.command) if result.command is not None else None
    extras = result.dispatch_comparison.extras if result.dispatch_comparison is not None else {}
    document.update({
        "diverged": True, "frame": result.frame.seq, "frame_id": result.frame.frame_id,
        "command": result.command, "dispatch": name, "segment": extras.get("segment"), "module": extras.get("module"),
        "resource": result.resource.as_dict() if result.resource else None,
    })
    report_outputs(args, "bisect", document, [result.frame])
    print(f"first divergent frame: {result.frame.seq} (frame_id {result.frame.frame_id})")
    if result.command is not None:
        via = " (found by running the frame on both drivers)" if result.side_by_side else ""
        segment = f", segment {extras['segment']} (module {extras['module']})" if "segment" in extras else ""
        print(f"first divergent dispatch: commands[{result.command}] ({name}){segment}{via}")
    else:
        print("first divergent dispatch: unknown (record with --dispatch-level, or give --reference-icd, to locate it)")
    if result.resource is not None:
        print(comparison_line(result.resource))
    how = ("binary search found nothing; scanned in order" if result.fallback_scan
           else "every earlier segment checked" if result.exhaustive
           else "binary search, assuming the divergence persists; --exhaustive checks every earlier segment")
    print(f"search: {search_size(result)} ({how})")
    return 1


def search_size(result: "BisectResult") -> str:
    """How much a bisection replayed, e.g. ``4 replay(s), 8 frame(s) at most, over 13 segment(s)``."""
    return (f"{result.replays} replay(s), {result.frames_executed} frame(s) at most, "
            f"over {result.segments} segment(s)")


def child_arguments(args: argparse.Namespace, command: str, drop: set[str], drop_with_value: set[str]) -> list[str]:
    """The user's own arguments to ``command`` (the trace first), without the flags the parent handles."""
    argv = list(getattr(args, "argv", sys.argv))
    tokens = argv[argv.index(command) + 1:] if command in argv else []
    out: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in drop:
            continue
        if name in drop_with_value:
            skip = "=" not in token
            continue
        out.append(token)
    return out


def replay_isolated(args: argparse.Namespace, log: Any) -> int:
    """``replay --isolate``: the same replay in a child; a crash is a finding (exit 1), never a lost run."""
    from replay.isolate import run_child

    outcome = run_child(child_arguments(args, "replay", {"--isolate"}, {"--json"}))
    if outcome.report is not None:
        if args.json:
            from replay.report import write_json

            write_json(args.json, outcome.report)
        return outcome.returncode
    if not outcome.crashed:
        return outcome.returncode  # the child reported its own error (bad input, exit 2)
    log.error("%s", outcome.crash_line())
    if args.json:
        from replay.report import write_json

        write_json(args.json, {"trace": str(args.trace), **outcome.crash_document()})
    return 1
