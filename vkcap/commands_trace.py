"""Trace subcommands: record, info, export (replay, diff and bisect join them as they land)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from vkcore.errors import EXIT_INTERRUPTED, TraceError, UsageError, VkcapError

if TYPE_CHECKING:
    from capture.trace import Trace
    from replay.bisect import BisectResult
    from replay.isolate import ProbeServer
    from replay.tolerances import Resources, TolerancePolicy
    from vkcore.scenario import Scenario

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
        trace=args.trace if args.trace is not None else default_trace_path(run.scenario),
        checkpoint_every=args.checkpoint_every,
        dispatch_level=args.dispatch_level,
        level=args.compression_level,
        threads=args.compression_threads,
    )
    scenario, before = (None, None) if run.dry_run else check_trace_target(options.trace, run)
    from .progress import FrameProgress

    log = logging.getLogger("vkcap")
    try:
        with FrameProgress.for_terminal() as progress:
            result = record(options, getattr(args, "argv", sys.argv), progress.on_event, scenario=scenario)
    except VkcapError as exc:
        if before is not None:
            _say_where_failed_went(exc, options.trace, before)
        raise
    if run.dry_run:
        log.info("dry run: built %d frame(s) on %s; recorded and wrote nothing",
                 len(result.run.plan.frames), result.run.device_name)
        return 0
    log.info("recorded %d frame(s) on %s into %s%s", result.frames, result.run.device_name, result.trace,
             _record_figures(result) if result.frames else "")
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
    exists at ``target`` (see :func:`capture.container.failed_trace_path`), else None."""
    from capture.container import failed_trace_path
    from vkcore.outputs import check_output_target
    from vkcore.scenario import load_scenario

    check_output_target(target, place="-o")
    scenario = load_scenario(run.scenario)
    clash = _scenario_clash(target, scenario, run.output)
    if clash is not None:
        raise UsageError(f"{clash}: refusing to overwrite it with the trace", file=target, place="-o")
    if not os.path.exists(target):
        return scenario, None
    _check_is_trace(target)
    failed = Path(failed_trace_path(target))
    check_output_target(failed, place="-o")
    return scenario, ExistingTrace(failed, _signature(failed))


def _scenario_clash(target: Path, scenario: Any, output: Path | None) -> str | None:
    """What ``target`` is to the scenario, when it is the scenario, a ``src`` or a ``dst``, or None."""
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
    from capture.records import MAGIC

    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError as exc:
        raise UsageError(f"cannot read it to check that it is a trace ({exc.strerror or exc})", file=path,
                         place="-o") from None
    if head != MAGIC:
        raise UsageError("exists and is not a vkcap trace: refusing to replace it (delete it, or choose another "
                         "name)", file=path, place="-o")


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
    """``: X captured, Y stored (Rx), ...`` for the trace just written, read back with :func:`trace_summary`
    so that ``record`` and ``info`` give the same figures; "" when the file at the path is no longer that
    trace (another writer replaced it meanwhile; a trace that could not be published raises instead)."""
    try:
        if result.trace.stat().st_size != result.file_bytes:
            return ""
        summary = trace_summary(result.trace)
    except (OSError, VkcapError):
        return ""
    return f": {_snapshot_figures(summary)}; file {_size(summary['file_bytes'])}"


def _snapshot_figures(summary: dict[str, Any]) -> str:
    """The snapshot totals as ``info`` and ``record`` print them (definitions: :func:`trace_summary`)."""
    ratio = summary["ratio"]
    return (f"{_size(summary['snapshot_raw_bytes'])} captured, {_size(summary['snapshot_stored_bytes'])} stored"
            f"{f' ({ratio:.1f}x)' if ratio else ''}, deduplication saved {_size(summary['dedup_saved_bytes'])}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def trace_summary(path: Path) -> dict[str, Any]:
    """Everything ``vkcap info`` shows (and ``record`` sums up), as plain data.

    Snapshot figures count every snapshot the frames took: at each frame boundary and, with
    ``--dispatch-level``, after each dispatch (or graph segment). Per resource (``resources``):
    ``snapshots`` (of which ``dispatch_snapshots`` after dispatches), ``raw_bytes`` (their size
    uncompressed), ``unique`` (distinct contents among them), ``stored_bytes`` (what the blobs of those
    distinct contents occupy in the file) and ``ratio`` = raw_bytes / stored_bytes. A blob shared by
    several resources (or with the initial state, or an embedded input file) is counted in full for
    each resource that has it, so the rows can add up to more than the totals. Totals:
    ``snapshot_raw_bytes`` ("captured") = the sum of the rows' raw_bytes; ``snapshot_stored_bytes``
    ("stored") = the distinct blobs of all snapshots, each counted once; ``ratio`` = captured / stored
    (the same definition as the rows'); ``dedup_saved_bytes`` = captured - the raw size of those
    distinct blobs. Checkpoint-only state, embedded files and metadata are in ``file_bytes`` only.
    ``checkpoints`` lists the checkpoints after frames; ``initial_state`` says whether checkpoint -1
    (the state before the first frame) is there."""
    from capture.trace import Trace

    with Trace.open(path) as trace:
        per_resource, distinct = _resource_figures(trace)
        raw = sum(e["raw_bytes"] for e in per_resource.values())
        stored = sum(trace.reader.blob_info(k).stored_len for k in distinct)
        unique_raw = sum(trace.reader.blob_info(k).raw_len for k in distinct)
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
            "initial_state": -1 in trace.checkpoints,
            "checkpoint_every": trace.header.get("checkpoint_every"),
            "dispatch_level": bool(trace.header.get("dispatch_level")),
            "files": {name: {"role": role, "size": size_} for name, (role, _, size_) in sorted(trace.files.items())},
            "resources": per_resource,
            "snapshot_raw_bytes": raw,
            "snapshot_stored_bytes": stored,
            "ratio": _ratio(raw, stored),
            "dedup_saved_bytes": raw - unique_raw,
            "status": (trace.end or {}).get("status", "unfinished"),
            "error": (trace.end or {}).get("error") or None,
            "recovered": trace.recovered,
            "recovery_note": trace.reader.recovery_note or None,
            "corrupt_records": [{"offset": o, "type": t} for o, t in trace.reader.corrupt_records],
        }


def _resource_figures(trace: Any) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """(per-resource figures, the distinct blob keys of all snapshots), as :func:`trace_summary` defines them."""
    rows: dict[str, dict[str, Any]] = {}
    keys: dict[str, set[str]] = {}
    for f in trace.frames:
        taken = [(uid, key, False) for uid, key in f.snapshots.items()]
        taken += [(d.uid, d.blob, True) for d in f.dispatches]
        for uid, key, after_dispatch in taken:
            row = rows.setdefault(uid, {"snapshots": 0, "dispatch_snapshots": 0, "raw_bytes": 0, "unique": 0,
                                        "stored_bytes": 0, "ratio": None})
            info = trace.reader.blob_info(key)
            row["snapshots"] += 1
            row["dispatch_snapshots"] += after_dispatch
            row["raw_bytes"] += info.raw_len
            if key not in keys.setdefault(uid, set()):
                keys[uid].add(key)
                row["unique"] += 1
                row["stored_bytes"] += info.stored_len
    for row in rows.values():
        row["ratio"] = _ratio(row["raw_bytes"], row["stored_bytes"])
    return rows, set().union(*keys.values())


def _ratio(raw: int, stored: int) -> float | None:
    """raw / stored, the one ratio ``info`` and ``record`` show; None when nothing is stored."""
    return raw / stored if stored else None


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
    console.print(f"frames     {summary['frames']} in {summary['passes']} pass(es); checkpoints at {_checkpoints(summary)}; "
                  f"dispatch-level snapshots: {'yes' if summary['dispatch_level'] else 'no'}")
    status = summary["status"]
    if summary["recovered"]:
        console.print(f"[yellow]recovered[/yellow]  {summary['recovery_note']}")
    if status != "complete":
        console.print(f"[yellow]status[/yellow]     {status}{': ' + summary['error'] if summary['error'] else ''}")
    for c in summary["corrupt_records"]:
        console.print(f"[red]corrupt record[/red] at offset {c['offset']} (type {c['type']})")
    table = Table(title="snapshots by resource (shared blobs count for each)")
    dispatch_level = summary["dispatch_level"]
    columns = ("resource", "snapshots", *(("after dispatches",) if dispatch_level else ()), "unique", "raw", "stored",
               "ratio")
    for col in columns:
        table.add_column(col, justify="right" if col != "resource" else "left")
    for uid, e in summary["resources"].items():
        after = (str(e["dispatch_snapshots"]),) if dispatch_level else ()
        ratio = f"{e['ratio']:.1f}x" if e["ratio"] else "-"
        table.add_row(uid, str(e["snapshots"]), *after, str(e["unique"]), _size(e["raw_bytes"]),
                      _size(e["stored_bytes"]), ratio)
    console.print(table)
    console.print(f"snapshots: {_snapshot_figures(summary)}" if summary["resources"] else "snapshots: none")
    console.print(f"embedded files: {len(summary['files'])} ({', '.join(summary['files'])})")
    return 0


def _checkpoints(summary: dict[str, Any]) -> str:
    """``initial state, 7, 15``: where a replay can start (checkpoint -1 is the initial state)."""
    after = _ranges(summary["checkpoints"]) if summary["checkpoints"] else ""
    if summary["initial_state"]:
        return f"initial state, {after}" if after else "initial state"
    return after or "none"


def _ranges(values: list[int]) -> str:
    if not values:
        return "none"
    if len(values) <= 6:
        return ", ".join(map(str, values))
    return f"{values[0]}, {values[1]}, ... {values[-1]} ({len(values)} in all)"


def cmd_export(args: argparse.Namespace) -> int:
    """Buffers as flat int8 .npy (like run); tensors as .npy typed by their format, shaped by dims.

    Checked before any snapshot is read, each a one-line error naming the file and the flag: ``-o``
    (see :func:`vkcore.outputs.check_output_target`: not a folder, device node or FIFO, not under a file,
    writable; the suffix the resource's kind exports as), ``--resource`` (a resource of the trace) and
    ``--frame`` (a frame of the trace). The output is written atomically."""
    from capture.trace import Trace
    from vkcore.npyio import write_flat_int8, write_typed
    from vkcore.outputs import check_output_target

    check_output_target(args.output, place="-o")
    with Trace.open(args.trace) as trace:
        _check_export_request(trace, args.frame, args.resource)
        meta = trace.resources.get(args.resource, {})
        _check_export_suffix(args.output, meta.get("kind", "buffer"))
        data = trace.snapshot(args.frame, args.resource)
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


def _check_export_request(trace: Any, seq: int, uid: str) -> None:
    """Refuse a ``--resource`` the trace has no snapshots of, then a ``--frame`` it does not hold
    (``TRACE: FLAG: why``, exit 2)."""
    known = set(trace.resources) | {u for f in trace.frames for u in f.snapshots}
    if uid not in known:
        raise TraceError(f"'{uid}' is not a resource of this trace (its resources: {', '.join(sorted(known)) or 'none'})",
                         file=trace.path, place="--resource")
    try:
        trace.frame(seq)
    except TraceError as exc:
        exc.place = "--frame"
        exc.args = (exc.render(),)
        raise


EXPORT_SUFFIXES = {"buffer": (".npy",), "tensor": (".npy",), "image": (".dds", ".png", ".npy")}


def _check_export_suffix(path: Path, kind: str) -> None:
    """Refuse an ``-o`` whose suffix a snapshot of ``kind`` does not export as."""
    wanted = EXPORT_SUFFIXES.get(kind)
    if wanted is None:
        raise UsageError(f"exporting a {kind} is not supported yet", file=path, place="-o")
    if path.suffix.lower() not in wanted:
        article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
        choices = f"{', '.join(wanted[:-1])} or {wanted[-1]}" if len(wanted) > 1 else wanted[0]
        raise UsageError(f"{article} {kind} exports as {choices}", file=path, place="-o")


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


MAX_TIMEOUT_S = 1e9  # seconds (31 years): a frame timeout is held in nanoseconds, in 64 bits


def check_compare_flags(args: argparse.Namespace, inputs: list[Path]) -> None:
    """The checks of replay, diff and bisect flags that need no trace, made before any replay work
    (and before Vulkan starts): tolerance numbers (finite, >= 0, ``--ulp`` below 2**63), the tolerance
    file's own content, ``--timeout``
    (positive, finite), report paths (:func:`replay.report.check_output`; none may be one of
    ``inputs``, the traces read), driver manifests (:func:`vkcore.driver.check_manifest`). Raises
    :class:`UsageError` (exit 2) naming the flag."""
    import math

    from replay.report import check_output
    from replay.tolerances import MAX_ULP, load_tolerance_file
    from vkcore.driver import check_manifest

    for name, value in (("--atol", args.atol), ("--rtol", args.rtol), ("--ulp", args.ulp)):
        if value is not None and not math.isfinite(value):
            raise UsageError(f"{name} must be a finite number, got {value}")
        if value is not None and value < 0:
            raise UsageError(f"{name} must be 0 or more, got {value}")
    if args.ulp is not None and args.ulp >= MAX_ULP:
        raise UsageError(f"--ulp must be less than 2**63, got {args.ulp}")
    if args.tolerance and args.tolerance != "auto":
        load_tolerance_file(Path(args.tolerance))  # the file itself; its uids are checked against the trace later
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_S:  # NaN fails every comparison
        raise UsageError(f"must be a positive number of seconds (finite, at most {MAX_TIMEOUT_S:g}), got {timeout}",
                         place="--timeout")
    reports = (("--json", args.json, False), ("--junit", args.junit, False), ("--heatmap", getattr(args, "heatmap", None), True))
    for flag, path, folder in reports:
        check_output(flag, path, inputs, folder=folder)
    if args.json is not None and args.junit is not None and os.path.realpath(args.json) == os.path.realpath(args.junit):
        raise UsageError("--json and --junit name the same file", file=args.json)
    for flag in ("--icd", "--reference-icd"):
        manifest = getattr(args, flag[2:].replace("-", "_"), None)
        if manifest is not None:
            check_manifest(manifest, flag)


def check_frames(args: argparse.Namespace, trace: "Trace", first: int | None, last: int | None) -> None:
    """Refuse a trace without a complete frame (:class:`TraceError`), or ``--frame``/``--frames`` naming
    none of its frames (:class:`UsageError` naming the trace and the flag). Warn (log) when some frames
    asked for are not in the trace, and when the trace was recovered after its recording was cut short:
    a replay then compares fewer frames than asked, never silently. An isolated bisection's child
    (``--serve-probes``) leaves the warnings to its parent."""
    import logging

    from capture.trace import seq_ranges

    log = logging.getLogger("vkcap")
    seqs = sorted(f.seq for f in trace.frames)
    if not seqs:
        raise TraceError("the trace holds no complete frame", file=trace.path)
    quiet = getattr(args, "serve_probes", False)
    if trace.recovered and not quiet:
        log.warning("%s: the trace was recovered (its recording was cut short): it holds frames %s only",
                    trace.path, seq_ranges(seqs))
    if first is None or last is None:
        return
    flag = f"--frame {args.frame}" if getattr(args, "frame", None) is not None else f"--frames {args.frames}"
    inside = [s for s in seqs if first <= s <= last]
    if not inside:
        raise UsageError(f"no recorded frame in {first}-{last} (the trace has frames {seq_ranges(seqs)})",
                         file=trace.path, place=flag)
    missing = _gaps(first, last, inside)
    if missing and not quiet:
        log.warning("%s: %s: frame(s) %s are not in the trace (it has frames %s): comparing frame(s) %s only",
                    trace.path, flag, missing, seq_ranges(seqs), seq_ranges(inside))


def _gaps(first: int, last: int, present: list[int]) -> str:
    """The numbers of ``first..last`` not in ``present`` (ascending, all inside), as ranges: ``6-99``."""
    spans, at = [], first
    for seq in present:
        if seq > at:
            spans.append((at, seq - 1))
        at = seq + 1
    if at <= last:
        spans.append((at, last))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def tolerance_policy(args: argparse.Namespace, resources: "Resources | None" = None):  # -> TolerancePolicy
    """The tolerances and dtypes of ``--tolerance FILE``, ``--atol``/``--rtol``/``--ulp`` and ``--dtype``.
    With ``resources`` (the trace's), every uid named must be one of them and every dtype must divide
    its size: :class:`UsageError` naming the flag or the file's table otherwise."""
    from replay.results import DTYPES
    from replay.tolerances import TolerancePolicy, check_dtype, load_tolerance_file

    policy = TolerancePolicy()
    if args.tolerance and args.tolerance != "auto":
        policy = load_tolerance_file(Path(args.tolerance), resources)
    policy = policy.with_defaults(args.atol, args.rtol, args.ulp)
    dtypes = dict(policy.dtypes)
    for uid, dtype in _pairs(args.dtype, "--dtype"):
        if dtype not in DTYPES:
            raise UsageError(f"--dtype {uid}={dtype}: unknown type (known: {', '.join(DTYPES)})")
        if resources is not None:
            check_dtype(uid, dtype, resources, f"--dtype {uid}={dtype}")
        dtypes[uid] = dtype
    from dataclasses import replace

    return replace(policy, dtypes=dtypes)


def replay_options(args: argparse.Namespace, opened: "Trace | None" = None, **extra: Any):  # -> ReplayOptions
    """The options of a replay or bisection, checked against the trace (``opened``, else opened here
    and read for its metadata only): its frames (:func:`check_frames`), and the uids, dtypes and shapes
    the flags name (:func:`tolerance_policy`, :func:`shapes`)."""
    from contextlib import nullcontext

    from capture.trace import Trace
    from replay.options import ReplayOptions

    first, last = frame_range(args)
    with nullcontext(opened) if opened is not None else Trace.open(args.trace) as trace:
        check_frames(args, trace, first, last)
        policy = tolerance_policy(args, trace.resources)
        shape_list = shapes(args, trace.resources, policy)
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
        shapes=tuple(shape_list),
        heatmap_dir=getattr(args, "heatmap", None),
        progress_file=getattr(args, "progress_file", None),
        stop_at_first_divergence=getattr(args, "stop_at_first_divergence", False),
        **extra,
    )


def shapes(args: argparse.Namespace, resources: "Resources | None" = None,
           policy: "TolerancePolicy | None" = None) -> list[tuple[str, tuple[int, ...]]]:
    """The ``--shape UID=AxB...`` values. With ``resources`` (the trace's) and ``policy`` (its dtypes),
    each must name a resource and hold as many elements as it (:func:`replay.tolerances.check_shape`)."""
    from replay.tolerances import check_shape

    out = []
    for uid, text in _pairs(getattr(args, "shape", []), "--shape"):
        parts = text.lower().split("x")
        if not all(p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--shape {uid}={text}: expected positive sizes like 64x64 or 1x32x32x4")
        shape = tuple(int(p) for p in parts)
        if resources is not None and policy is not None:
            check_shape(uid, shape, policy, resources, f"--shape {uid}={text}")
        out.append((uid, shape))
    return out


def report_outputs(args: argparse.Namespace, kind: str, document: dict[str, Any], frames: list[Any],
                   crash: tuple[int | None, str] | None = None, sides: tuple[str, str] | None = None) -> None:
    """Write every report asked for (``--json``, ``--junit``); a ``crash`` (frame, line) is a JUnit failure;
    ``sides`` names what was compared in JUnit messages (default: recorded and live)."""
    from replay.report import REPLAY_SIDES, write_json, write_junit

    if args.json:
        write_json(args.json, document)
    if args.junit:
        write_junit(args.junit, f"vkcap.{kind}", frames, crash=crash, sides=sides or REPLAY_SIDES)


def cmd_replay(args: argparse.Namespace) -> int:
    import logging

    from .cli import start_vulkan_early

    log = logging.getLogger("vkcap")
    check_compare_flags(args, [args.trace])  # before Vulkan starts, and before an isolated child does
    from replay.isolate import in_isolated_child

    if args.isolate and not args.serve_probes and not in_isolated_child():  # a child never isolates again
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
    from replay.report import DIFF_SIDES, comparison_line, frames_document, print_frames

    log = logging.getLogger("vkcap")
    if args.tolerance == "auto":
        raise UsageError("--tolerance auto needs a replay; diff compares two recordings as they are")
    check_compare_flags(args, [args.trace, args.other])
    with Trace.open(args.trace) as a, Trace.open(args.other) as b:
        policy = tolerance_policy(args, a.resources)
        shapes(args, a.resources, policy)  # checked only: diff reports flat indices
        report = diff_traces(a, b, policy)
    for key, (va, vb) in report.fingerprint_changes.items():
        log.info("fingerprint %s: %s -> %s", key, va, vb)
    for name in report.file_changes:
        log.info("embedded file differs: %s", name)
    print_frames(report.frames, title=f"diff: A = {args.trace}, B = {args.other}")
    document = {
        "a": str(args.trace), "b": str(args.other), "diverged": report.diverged,
        "fingerprint_changes": {k: list(v) for k, v in report.fingerprint_changes.items()},
        "file_changes": report.file_changes, "only_in_a": report.only_in_a, "only_in_b": report.only_in_b,
        "frames": frames_document(report.frames),
    }
    report_outputs(args, "diff", document, report.frames, sides=DIFF_SIDES)
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
    if not args.isolate:
        return _bisect(args, None)
    from replay.isolate import ProbeServer

    # The probes' child starts first, so its start-up (Python, Vulkan, pipelines) overlaps this
    # process's own imports and checks; a bad trace or flag ends it with this process.
    with ProbeServer(child_arguments(args)) as server:
        server.start()
        return _bisect(args, server)


def _bisect(args: argparse.Namespace, server: "ProbeServer | None") -> int:
    import json as _json
    import logging

    from vkcore.driver import use_driver

    check_compare_flags(args, [args.trace])  # --reference-icd's manifest too
    use_driver(args.icd)
    if server is None:  # the probes run here: let the driver start while the modules load
        from .cli import start_vulkan_early

        start_vulkan_early(device=args.device)
    from capture.trace import Trace
    from replay.bisect import Span, bisect_trace, dispatch_name
    from replay.report import comparison_line

    log = logging.getLogger("vkcap")
    args.frame = args.frames = None
    with Trace.open(args.trace) as trace:
        options = replay_options(args, trace)
        if args.tolerance == "auto":
            from replay.auto import auto_tolerances

            options = auto_tolerances(options, log)

        def on_probe(span: Span, diverged: bool) -> None:
            what = (f"frames {span.first}-{span.last}" if span.whole
                    else f"frame {span.last} alone, from the state recorded after frame {span.start}")
            log.info("segment %d (%s): %s", span.segment, what, "DIVERGED" if diverged else "ok")

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
            report_outputs(args, "bisect", document, [], crash=(result.crash_frame, result.crash))
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


def child_arguments(args: argparse.Namespace) -> list[str]:
    """The arguments of the isolated child ``vkcap replay`` of the command parsed into ``args``: made
    from the parsed values by :func:`replay.isolate.child_arguments`, so the child accepts whatever this
    process accepted, and is never asked to isolate again."""
    from replay.isolate import child_arguments as from_parsed

    from .cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return from_parsed(args, commands.choices["replay"])


def replay_isolated(args: argparse.Namespace, log: Any) -> int:
    """``replay --isolate``: the same replay in a child; a crash is a finding (exit 1), never a lost run.

    Every report asked for is written here, from the child's report or of the crash (JUnit: a failing
    ``driver crash`` case); bad input (the child exits 2) raises the child's error line and writes none."""
    from replay.isolate import run_child
    from replay.report import frames_from_document

    outcome = run_child(child_arguments(args))
    if outcome.report is not None:
        report_outputs(args, "replay", outcome.report, frames_from_document(outcome.report["frames"]))
        return outcome.returncode
    line = outcome.crash_line()
    log.error("%s", line)
    report_outputs(args, "replay", {"trace": str(args.trace), **outcome.crash_document()}, [],
                   crash=(outcome.crashed_frame, line))
    return 1
