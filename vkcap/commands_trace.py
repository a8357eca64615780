"""Trace subcommands: record, info, export (replay, diff and bisect join them as they land)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from vkcore.errors import EXIT_INTERRUPTED, UsageError

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, add_common: AddFlags, add_run_flags: AddFlags, add_device: AddFlags) -> None:
    """Add the trace subcommands to the ``vkcap`` parser."""
    rec = sub.add_parser("record", help="run a scenario and capture every frame boundary into a trace")
    add_run_flags(rec)
    rec.add_argument("-o", "--trace", type=Path, help="trace file (default: traces/<scenario>.vkt)")
    rec.add_argument("--capture", choices=("boundary", "all"), default="boundary",
                     help="boundary: what each mark_boundary names; all: every writable resource at every boundary")
    rec.add_argument("--checkpoint-every", type=int, default=8, metavar="K",
                     help="store the full state every K frames so replay can start near any frame (0: never; default 8)")
    rec.add_argument("--dispatch-level", action="store_true", help="also snapshot what each dispatch writes, after it")
    rec.add_argument("--compression-level", type=int, default=3, metavar="L", help="zstd level (default 3)")
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


def cmd_record(args: argparse.Namespace) -> int:
    import logging

    from capture.recorder import RecordOptions, default_trace_path, record

    from .cli import run_options

    if args.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be 0 or more, got {args.checkpoint_every}")
    run = run_options(args, capture_all=args.capture == "all")
    options = RecordOptions(
        run=run,
        trace=args.trace or default_trace_path(run.scenario),
        checkpoint_every=args.checkpoint_every,
        dispatch_level=args.dispatch_level,
        level=args.compression_level,
    )
    from .progress import FrameProgress

    with FrameProgress.for_terminal() as progress:
        result = record(options, sys.argv)
    log = logging.getLogger("vkcap")
    ratio = result.raw_bytes / result.file_bytes if result.file_bytes else 0.0
    log.info(
        "recorded %d frame(s) on %s into %s: %s captured, %s on disk (%.1fx), %s deduplicated",
        result.frames, result.run.device_name, result.trace, _size(result.raw_bytes), _size(result.file_bytes), ratio,
        _size(result.dedup_bytes),
    )
    if result.run.interrupted:
        log.warning("interrupted: the trace holds the %d frame(s) completed before Ctrl-C", result.frames)
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
    from capture.trace import Trace
    from vkcore.npyio import write_flat_int8

    if args.output.suffix.lower() != ".npy":
        raise UsageError(f"{args.output}: only .npy output is supported for buffers")
    with Trace.open(args.trace) as trace:
        data = trace.snapshot(args.frame, args.resource)
    write_flat_int8(args.output, data)
    return 0
