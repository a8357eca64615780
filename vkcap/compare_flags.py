"""The flags of ``replay``, ``diff`` and ``bisect``, checked (before any device starts, then against the
trace: frames, uids, dtypes, shapes, tolerances) and turned into :class:`replay.options.ReplayOptions`."""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vkcore.bounded_numbers import check_number
from vkcore.errors import TraceError, UsageError

from .flag_parser import FlagParser

if TYPE_CHECKING:
    from collections.abc import Sequence

    from capture.trace import Trace
    from replay.tolerances import Resources, TolerancePolicy


def _pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        uid, sep, rest = v.partition("=")
        if not sep or not uid or not rest:
            raise UsageError(f"{flag} {v!r}: expected UID=VALUE")
        out.append((uid, rest))
    return out


def add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--atol", type=float, help="absolute tolerance")
    p.add_argument("--rtol", type=float, help="relative tolerance")
    p.add_argument("--ulp", type=int, help="tolerance in units in the last place (floats)")
    p.add_argument("--tolerance", metavar="FILE.toml|auto|preset:NAME",
                   help="per-resource tolerances (TOML), 'auto', or per-dtype defaults: preset:torch, preset:strict")
    p.add_argument("--dtype", action="append", default=[], metavar="UID=TYPE", help="read a buffer as TYPE (e.g. float32)")
    p.add_argument("--resource-tolerances", help=argparse.SUPPRESS)  # a suite worker's (compare_flags.resource_tolerances)
    p.add_argument("--shape", action="append", default=[], metavar="UID=HxW", help="the shape of a raw buffer (for indices and heatmaps)")
    p.add_argument("--top", type=int, default=5, metavar="N",
                   help="list the first N offending elements of each comparison (default 5)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="write one self-contained HTML page of the results (no network, no JavaScript)")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write the results as JUnit XML")


def frame_range(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """``--frame F`` or ``--frames A-B`` as (first, last), each a frame number of the bounds table
    (:func:`vkcore.bounded_numbers.check_number`); (None, None) when neither is given."""
    if getattr(args, "frame", None) is not None:
        if args.frame < 0:
            raise UsageError(f"--frame must be 0 or more, got {args.frame}")
        frame = int(check_number("frame", args.frame, place="--frame"))
        return frame, frame
    if getattr(args, "frames", None):
        a, sep, b = args.frames.partition("-")
        digits = a.isascii() and a.isdigit() and b.isascii() and b.isdigit() and len(a) < 12 and len(b) < 12
        if not sep or not digits or int(a) > int(b):
            raise UsageError(f"--frames {args.frames!r}: expected A-B with 0 <= A <= B")
        return int(check_number("frame", int(a), place="--frames")), int(check_number("frame", int(b), place="--frames"))
    return None, None


def check_compare_flags(args: argparse.Namespace, inputs: list[Path]) -> None:
    """The checks of replay, diff and bisect flags that need no trace, made before any replay work
    (and before Vulkan starts): the numbers ``--atol``, ``--rtol``, ``--ulp``, ``--timeout`` and ``--top``
    (:func:`vkcore.bounded_numbers.check_number`: finite, in range), the tolerance file's own content,
    report paths (:func:`replay.report.check_output`; none may be one of ``inputs``, the traces read), driver manifests (:func:`vkcore.device.driver.check_manifest`). Raises
    :class:`UsageError` (exit 2) naming the flag."""
    # lazy: vkcap --help imports this module, not replay.report, replay.tolerances
    from replay.report import check_output
    from replay.tolerances import load_tolerance_file, preset_policy
    # lazy: vkcap --help imports this module, not vkcore.device.driver
    from vkcore.device.driver import check_manifest

    for key in ("atol", "rtol", "ulp", "timeout", "top"):
        value = getattr(args, key, None)
        if value is not None:
            check_number(key, value, place=f"--{key}")
    if args.tolerance and args.tolerance.startswith("preset:"):
        preset_policy(args.tolerance.removeprefix("preset:"), f"--tolerance {args.tolerance}")
    elif args.tolerance and args.tolerance != "auto":
        load_tolerance_file(Path(args.tolerance))  # the file itself; its uids are checked against the trace later
    resource_tolerances(getattr(args, "resource_tolerances", None))
    reports = (("--json", args.json, False), ("--junit", args.junit, False), ("--html", getattr(args, "html", None), False),
               ("--heatmap", getattr(args, "heatmap", None), True))
    for flag, path, folder in reports:
        check_output(flag, path, inputs, folder=folder)
    if args.json is not None and args.junit is not None and os.path.realpath(args.json) == os.path.realpath(args.junit):
        raise UsageError("--json and --junit name the same file", file=args.json)
    for flag in ("--icd", "--reference-icd"):
        manifest = getattr(args, flag[2:].replace("-", "_"), None)
        if manifest is not None:
            check_manifest(manifest, flag)


def check_frames(args: argparse.Namespace, trace: "Trace", first: int | None, last: int | None, *,
                 warn: bool = True) -> None:
    """Refuse a trace without a complete frame (:class:`TraceError`), or ``--frame``/``--frames`` naming
    none of its frames (:class:`UsageError` naming the trace and the flag). Warn (log) when some frames
    asked for are not in the trace, and when the trace was recovered after its recording was cut short:
    a replay then compares fewer frames than asked, never silently. ``warn=False``: no warning."""
    # lazy: vkcap --help imports this module, not capture.trace (with msgpack, xxhash, zstandard)
    from capture.trace import seq_ranges

    log = logging.getLogger("vkcap")
    seqs = sorted(f.seq for f in trace.frames)
    if not seqs:
        raise TraceError("the trace holds no complete frame", file=trace.path)
    quiet = not warn
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
    # lazy: vkcap --help imports this module, not capture.trace (with msgpack, xxhash, zstandard)
    from capture.trace import spans_text

    spans, at = [], first
    for seq in present:
        if seq > at:
            spans.append((at, seq - 1))
        at = seq + 1
    if at <= last:
        spans.append((at, last))
    return spans_text(spans)


def tolerance_policy(args: argparse.Namespace, resources: "Resources | None" = None):  # -> TolerancePolicy
    """The tolerances and dtypes of ``--tolerance FILE``, ``--atol``/``--rtol``/``--ulp`` and ``--dtype``.
    With ``resources`` (the trace's), every uid named must be one of them and every dtype must divide
    its size: :class:`UsageError` naming the flag or the file's table otherwise."""
    # lazy: vkcap --help imports this module, not replay.results, replay.tolerances
    from replay.results import DTYPES
    from replay.tolerances import TolerancePolicy, check_dtype, load_tolerance_file, preset_policy

    policy = TolerancePolicy()
    if args.tolerance and args.tolerance.startswith("preset:"):
        policy = preset_policy(args.tolerance.removeprefix("preset:"), f"--tolerance {args.tolerance}")
    elif args.tolerance and args.tolerance != "auto":
        policy = load_tolerance_file(Path(args.tolerance), resources)
    policy = policy.with_defaults(args.atol, args.rtol, args.ulp)
    per_resource = resource_tolerances(getattr(args, "resource_tolerances", None), resources)
    if per_resource:
        merged = {uid: {**(own if isinstance(own := policy.per_resource.get(uid), dict) else {}), **keys}
                  for uid, keys in per_resource.items()}
        policy = replace(policy, per_resource={**policy.per_resource, **merged})
    dtypes = dict(policy.dtypes)
    for uid, dtype in _pairs(args.dtype, "--dtype"):
        if dtype not in DTYPES:
            raise UsageError(f"--dtype {uid}={dtype}: unknown type (known: {', '.join(DTYPES)})")
        if resources is not None:
            check_dtype(uid, dtype, resources, f"--dtype {uid}={dtype}")
        dtypes[uid] = dtype

    top = int(check_number("top", getattr(args, "top", 5), place="--top"))
    return replace(policy, dtypes=dtypes, top=top)


@functools.cache
def suite_flags_parser() -> argparse.ArgumentParser:
    """``vkcap replay``'s flags as far as a suite's replays take them (the suite's flags, ``--device``,
    then a trace's own: :attr:`replay.suite.SuiteTrace.flags`): the compare flags (tolerances, dtypes,
    shapes), ``--replace-shader``, ``--timeout``, ``--device``, ``--icd``, ``--no-emulation-layers``;
    no trace (the caller has it). Spelled and refused as ``vkcap replay`` does (one line, exit 2).
    Built once: a suite parses every trace's flags with it, from each worker's thread (parsing reads
    the parser and changes nothing of it)."""
    parser = FlagParser(prog="vkcap replay", add_help=False)
    add_compare_flags(parser)
    parser.add_argument("--replace-shader", action="append", default=[], metavar="UID=FILE")
    parser.add_argument("--timeout", type=float, metavar="SECONDS")
    parser.add_argument("--device")
    parser.add_argument("--icd", type=Path)
    parser.add_argument("--no-emulation-layers", action="store_true")
    return parser


def _suite_args(trace: Path, flags: "Sequence[str]") -> argparse.Namespace:
    args = suite_flags_parser().parse_args(list(flags))
    args.trace = trace
    return args


def flags_policy(flags: "Sequence[str]", trace: "Trace"):  # -> TolerancePolicy
    """The tolerance policy a suite replays ``trace`` (opened) with under ``flags`` (the suite's flags,
    then the trace's own: :attr:`replay.suite.SuiteTrace.flags`), as :func:`tolerance_policy` makes it
    from replay's flags: for the suite's checks and for whatever replays a suite's traces without a
    worker (the pytest plugin)."""
    return tolerance_policy(_suite_args(trace.path, flags), trace.resources)


#: replay flags whose values name what a trace holds (uids, dtypes, shapes, frames, a tolerance file's keys)
TRACE_NAMING_FLAGS = ("dtype", "shape", "resource_tolerances", "tolerance", "frame", "frames")


def suite_replay_options(trace: Path, flags: "Sequence[str]"):  # -> ReplayOptions
    """The options of one suite replay of ``trace`` under ``flags`` (as :func:`flags_policy`), checked
    against the trace as ``vkcap replay`` checks them (:func:`replay_options`), without its warnings:
    the suite warned once, before any worker started (:func:`replay.suite_tolerances.check_suite`).
    What :func:`replay.suite.run_suite` and a fleet hand their workers.

    Flags that name nothing a trace holds (:data:`TRACE_NAMING_FLAGS`) are checked without opening it:
    its worker opens it anyway, and reading every trace's metadata here, under one lock for all the
    workers' threads, held a pooled suite of 64 traces on two GPUs at 0.73x of one GPU's time."""
    args = _suite_args(trace, flags)
    return replay_options(args, warn=False, check=any(getattr(args, k, None) for k in TRACE_NAMING_FLAGS))


def resource_tolerances(text: str | None, resources: "Resources | None" = None) -> dict[str, dict[str, Any]]:
    """The per-resource tolerances of ``--resource-tolerances JSON`` (what a suite manifest's
    ``resources`` tables become on their way to a worker: ``{"out": {"atol": 2e-06}, "out.pos": {"ulp":
    1}}``), each number checked by :func:`vkcore.bounded_numbers.check_number`; with ``resources``, each
    key names a resource or ``UID.FIELD`` (:func:`replay.tolerances.split_key`)."""
    # lazy: vkcap --help imports this module, not replay.suite_tolerances, replay.tolerances
    from replay.suite_tolerances import RESOURCE_TOLERANCES
    from replay.tolerances import KEYS, split_key

    if text is None:
        return {}
    try:
        tables = json.loads(text)
    except (ValueError, RecursionError):
        tables = None
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise UsageError("expected a JSON object of per-resource tables", place=RESOURCE_TOLERANCES)
    out: dict[str, dict[str, Any]] = {}
    for uid, table in tables.items():
        if resources is not None:
            split_key(uid, resources, f"{RESOURCE_TOLERANCES} {uid}")
        unknown = [k for k in table if k not in KEYS]
        if unknown:
            raise UsageError(f"{uid}.{unknown[0]}: unknown key (expected atol, rtol or ulp)", place=RESOURCE_TOLERANCES)
        out[uid] = {k: check_number(k, v, place=f"{RESOURCE_TOLERANCES} {uid}.{k}") for k, v in table.items()}
    return out


def replay_options(args: argparse.Namespace, opened: "Trace | None" = None, *, warn: bool = True,
                   check: bool = True, **extra: Any):  # -> ReplayOptions
    """The options of a replay or bisection, checked against the trace (``opened``, else opened here
    and read for its metadata only): its frames (:func:`check_frames`), and the uids, dtypes and shapes
    the flags name (:func:`tolerance_policy`, :func:`shapes`). ``warn=False``: no warning is logged (a
    recovered trace, frames asked for that it lacks, tolerances compared as bytes). ``check=False``:
    the flags are checked on their own, the trace is not opened (its replay opens it)."""
    # lazy: vkcap --help imports this module, not capture.trace, replay.options (with msgpack, xxhash, zstandard)
    from capture.trace import Trace
    from replay.options import ReplayOptions

    first, last = frame_range(args)
    if check:
        with Trace.reuse_or_open(args.trace, opened) as trace:
            check_frames(args, trace, first, last, warn=warn)
            policy = tolerance_policy(args, trace.resources)
            shape_list = shapes(args, trace.resources, policy)
            if warn:
                # lazy: vkcap --help imports this module, not replay.reading
                from replay.reading import warn_bytes_tolerances

                warn_bytes_tolerances(trace, policy)
    else:
        policy = tolerance_policy(args)
        shape_list = shapes(args)
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
        value_maps=getattr(args, "value_maps", False),
        stop_at_first_divergence=getattr(args, "stop_at_first_divergence", False),
        **extra,
    )


def shapes(args: argparse.Namespace, resources: "Resources | None" = None,
           policy: "TolerancePolicy | None" = None) -> list[tuple[str, tuple[int, ...]]]:
    """The ``--shape UID=AxB...`` values. With ``resources`` (the trace's) and ``policy`` (its dtypes),
    each must name a resource and hold as many elements as it (:func:`replay.tolerances.check_shape`)."""
    # lazy: vkcap --help imports this module, not replay.tolerances
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
