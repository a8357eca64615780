"""``vkcap suite run``: regression suites of traces (see :mod:`replay.suite`); ``vkcap suite worker`` is
the child each worker runs (not for direct use)."""
from __future__ import annotations

import argparse
import fnmatch
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from vkcore.bounded_numbers import check_number, number_type, parse_number
from vkcore.errors import UsageError, VkcapError
from vkcore.safe_text import rich_text, shown_lines

from .compare_flags import flags_policy, suite_replay_options

# Flags handed on to every worker's replays (their values are checked here first).
FORWARDED = ("atol", "rtol", "ulp", "tolerance")


def add_suite_parser(sub: Any) -> None:
    suite = sub.add_parser("suite", help="replay a regression suite of traces")
    actions = suite.add_subparsers(dest="suite_command", required=True)
    run = actions.add_parser("run", help="replay every trace of folders and suite.toml manifests")
    run.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a folder of .vkt files or a suite.toml")
    run.add_argument("-j", "--jobs", type=number_type("jobs", "-j/--jobs"), default=1,
                     help="worker processes (default 1, at most 256)")
    run.add_argument("--retries", type=number_type("retries", "--retries"), default=0,
                     help="replay a failing trace up to K more times (flaky; at most 10)")
    run.add_argument("--shard", metavar="I/N", help="run shard I of N (balanced by trace size; N at most 10000)")
    run.add_argument("--atol", type=number_type("atol", "--atol"))
    run.add_argument("--rtol", type=number_type("rtol", "--rtol"))
    run.add_argument("--ulp", type=number_type("ulp", "--ulp"))
    run.add_argument("--allow-outside-manifest", action="store_true",
                     help="let a manifest name traces outside its own folder (absolute paths, '..', links out), and "
                          "a suite folder hold links to traces elsewhere")
    run.add_argument("--tolerance", metavar="preset:NAME", help="per-dtype defaults (preset:torch, preset:strict)")
    run.add_argument("--dtype", action="append", default=[], metavar="UID=TYPE",
                     help="read resource UID as TYPE in every trace that has it (repeatable; a manifest's "
                          "resources.UID.dtype wins)")
    run.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    run.add_argument("--junit", type=Path, metavar="FILE", help="write the results as JUnit XML")
    run.add_argument("--results", type=Path, metavar="DIR",
                     help="write one result file per trace into DIR (and, with --html, each replay's own page)")
    run.add_argument("--html", type=Path, metavar="FILE",
                     help="write one page: a matrix of traces x devices, each cell linking to its replay's page "
                          "(in --results DIR, else in FILE's folder under <name>-pages)")
    run.add_argument("--device-pool", action="append", default=[], metavar="SPEC",
                     help="pool devices: each trace replayed once, on whichever pooled device is free (-j workers each); "
                          "SPEC is an index, a deviceUUID prefix or a name pattern (llvmpipe*, case-insensitive) "
                          "matching one or more devices; repeat to pool more")
    run.add_argument("--device", action="append", default=[], metavar="INDEX|UUID|NAME",
                     help="replay on this device; repeat for several (a worker set each; default: the default device). "
                          "With --ray: a pattern of the fleet's device names (NVIDIA*; default: every device)")
    run.add_argument("--ray", metavar="ADDRESS",
                     help="replay on a Ray cluster, one actor per Vulkan device of each node: local (a cluster in this "
                          "process), auto (the one in RAY_ADDRESS) or HOST:PORT; needs pip install 'vkcap[ray]'")
    run.add_argument("--ray-shared", action="store_true",
                     help="with --ray: every node reads the traces at their paths here (a shared file system) instead of "
                          "getting them through Ray's object store")
    run.add_argument("--ray-cache-limit", type=number_type("ray_cache_limit", "--ray-cache-limit"), default=20.0,
                     metavar="GIB",
                     help="with --ray: prune each node's trace cache to this many GiB, least recently used first "
                          "(default 20; traces used in the last 10 minutes stay)")
    run.set_defaults(handler=cmd_suite_run)
    merge = actions.add_parser("merge", help="combine the --results folders of shards and devices into one report")
    merge.add_argument("folders", nargs="+", type=Path, metavar="DIR")
    merge.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    merge.add_argument("--junit", type=Path, metavar="FILE", help="write the results as JUnit XML")
    merge.add_argument("--html", type=Path, metavar="FILE", help="write one page: a matrix of traces x devices")
    merge.set_defaults(handler=cmd_suite_merge)
    bless = actions.add_parser("bless", help="take the latest results as the manifest's expectations, printing the diff")
    bless.add_argument("manifest", type=Path, metavar="MANIFEST")
    bless.add_argument("--results", type=Path, action="append", required=True, metavar="DIR",
                       help="the --results folder(s) of the run to bless")
    bless.add_argument("--allow-outside-manifest", action="store_true",
                       help="let the manifest name traces outside its own folder (as suite run allows)")
    bless.add_argument("--dry-run", action="store_true", help="print the diff only; write nothing")
    bless.set_defaults(handler=cmd_suite_bless)
    worker = actions.add_parser("worker", help=argparse.SUPPRESS)
    worker.add_argument("--device", help=argparse.SUPPRESS)
    worker.set_defaults(handler=cmd_suite_worker)


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.split("/")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise UsageError(f"--shard {text}: expected I/N with 1 <= I <= N")
    count = int(parse_number("shard_count", parts[1], "--shard"))
    index = int(parts[0]) if len(parts[0]) <= 6 else 0  # more digits than any count allowed: out of range
    if not 1 <= index <= count:
        raise UsageError(f"--shard {text}: expected I/N with 1 <= I <= N")
    return index, count


def cmd_suite_run(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not replay.suite
    from replay.suite import load_suite, run_suite, shard

    log = logging.getLogger("vkcap")
    check_number("jobs", args.jobs, place="-j/--jobs")
    check_number("retries", args.retries, place="--retries")
    if args.tolerance and not args.tolerance.startswith("preset:"):
        raise UsageError(f"--tolerance {args.tolerance}: a suite takes preset:NAME (per-resource tolerances: in the manifest)")
    if args.tolerance:
        # lazy: per command; vkcap --help imports this module, not replay.tolerances
        from replay.tolerances import preset_policy

        preset_policy(args.tolerance.removeprefix("preset:"), f"--tolerance {args.tolerance}")
    dtypes = _dtypes(args.dtype)
    if args.ray is None and args.ray_shared:
        raise UsageError("--ray-shared: only with --ray")
    check_number("ray_cache_limit", args.ray_cache_limit, place="--ray-cache-limit")
    if args.ray is not None:
        # lazy: per command; vkcap --help imports this module, not replay.fleet (with vulkan)
        from replay.fleet import import_ray

        if args.jobs != 1:
            raise UsageError("-j: --ray replays with one actor per Vulkan device of each node (no worker processes)")
        import_ray()  # says how to install it, before any work
    which = _shard(args.shard)
    traces = load_suite(args.paths, allow_outside=args.allow_outside_manifest)
    # lazy: per command; vkcap --help imports this module, not vkcore.outputs
    from vkcore.outputs import check_outputs_apart

    check_outputs_apart([("--json", args.json), ("--junit", args.junit), ("--html", args.html), ("--results", args.results)],
                        [*((p, "the suite's manifest") for p in args.paths if p.is_file()),
                         *((t.path, "one of the suite's traces") for t in traces)])
    # lazy: per command; vkcap --help imports this module, not replay.report
    from replay.report import check_output

    for flag, path in (("--json", args.json), ("--junit", args.junit), ("--html", args.html)):
        check_output(flag, path, [])  # a report replaces only a report
    if which is not None:
        traces = shard(traces, *which)
    flags: list[str] = []
    for name in FORWARDED:
        value = getattr(args, name, None)
        if value is not None:
            flags += [f"--{name}", str(value)]
    if args.device_pool and (args.device or args.ray is not None):
        raise UsageError("--device-pool: not with --device or --ray (a pool replays each trace once on its devices)",
                         place="--device-pool")
    if args.device and args.ray is None:
        _check_devices(args.device)
    pooled = _pool(args.device_pool) if args.device_pool else None
    traces = _check_traces(traces, flags, dtypes, log)

    # lazy: per command; vkcap --help imports this module, not vkcap.progress
    from .progress import Activity, SuiteProgress

    pages = args.results if args.results else args.html.parent / f"{args.html.stem}-pages" if args.html else None
    if pages is not None:
        pages.mkdir(parents=True, exist_ok=True)
    if args.ray is not None:
        # lazy: per command; vkcap --help imports this module, not replay.fleet (with vulkan)
        from replay.fleet import Fleet, FleetOptions

        with Activity(f"starting Ray ({args.ray})..."):
            fleet = Fleet(FleetOptions(args.ray, tuple(args.device), args.ray_shared, int(args.ray_cache_limit * (1 << 30))))
        try:
            with SuiteProgress(len(traces) * len(fleet.devices), log) as progress:
                results = fleet.run(traces, options_for=suite_replay_options, retries=args.retries, flags=flags,
                                    on_result=progress.on_result, pages=pages)
        finally:
            with Activity("stopping Ray..."):
                fleet.close()
        return _report(args, results)
    if pooled is not None:
        log.info("device pool: %s", ", ".join(f"{d.index}: {d.label}" for d in pooled))
    with SuiteProgress(len(traces) * (1 if pooled else max(1, len(args.device))), log) as progress:
        results = run_suite(traces, options_for=suite_replay_options, jobs=args.jobs, retries=args.retries, flags=flags,
                            devices=[str(d.index) for d in pooled] if pooled else args.device or None,
                            on_result=progress.on_result, pages=pages, pool=pooled is not None)
    return _report(args, results)


def _dtypes(values: list[str]) -> list[tuple[str, str]]:
    """``--dtype UID=TYPE`` values, each a known type (their uids are checked against the traces later)."""
    # lazy: per command; vkcap --help imports this module, not replay.results
    from replay.results import DTYPES

    out = []
    for value in values:
        uid, sep, dtype = value.partition("=")
        if not sep or not uid or not dtype:
            raise UsageError(f"expected UID=TYPE, got {value!r}", place="--dtype")
        if dtype not in DTYPES:
            raise UsageError(f"unknown type {dtype!r} (known: {', '.join(DTYPES)})", place=f"--dtype {uid}={dtype}")
        out.append((uid, dtype))
    return out


def _check_devices(selectors: list[str]) -> None:
    """Every ``--device`` names a device here (:func:`vkcore.device.context.choose_device`: one line,
    exit 2, listing the devices), before any worker starts."""
    # lazy: per command; vkcap --help imports this module, not vkcore.device.context (with vulkan)
    from vkcore.device.context import choose_device, list_devices

    devices = list_devices()
    for selector in selectors:
        choose_device(devices, selector)


def _pool(specs: list[str]) -> list[Any]:
    """The devices ``--device-pool`` SPECs match, each once, in index order: an index or deviceUUID prefix
    picks as ``--device`` does (every device of a shared UUID prefix), anything else is a case-insensitive
    pattern of names (fnmatch; a plain word matches names that hold it). A SPEC matching no device is
    one line, exit 2, listing the devices."""
    # lazy: per command; vkcap --help imports this module, not vkcore.device.context (with vulkan)
    from vkcore.device.context import choose_device, device_index, list_devices, uuid_matches

    devices = list_devices()
    chosen: dict[int, Any] = {}
    for spec in specs:
        index = device_index(spec)
        if index is not None and index < len(devices):
            found = [devices[index]]
        else:
            found = uuid_matches(devices, spec)
        if not found and spec:
            pattern = spec.lower() if any(c in spec for c in "*?[") else f"*{spec.lower()}*"
            found = [d for d in devices if fnmatch.fnmatchcase(d.name.lower(), pattern)]
        if not found:
            try:
                choose_device(devices, spec)  # its message lists the devices
            except UsageError as exc:
                raise UsageError(str(exc).replace("--device ", "--device-pool ", 1)) from None
            raise UsageError(f"no device matches --device-pool {spec!r}")
        chosen.update((d.index, d) for d in found)
    return [chosen[i] for i in sorted(chosen)]


def _check_traces(traces: list[Any], flags: list[str], dtypes: list[tuple[str, str]], log: Any) -> list[Any]:
    """The suite's traces as the workers will get them, checked before any worker starts: ``--dtype``
    goes to each trace that has the resource (before the trace's own flags: its manifest's dtype wins),
    and must divide its size there and name a resource of some trace; each trace's tolerances and
    dtypes are checked against it (:func:`replay.suite_tolerances.check_suite`: the manifest's keys are
    errors, the suite's flags warnings)."""
    # lazy: per command; vkcap --help imports this module, not capture.trace, replay.suite_tolerances, replay.tolerances (with msgpack, xxhash, zstandard)
    from capture.trace import Trace
    from replay.suite_tolerances import check_suite
    from replay.tolerances import check_dtype

    if dtypes:
        given: list[Any] = []
        used: set[str] = set()
        for t in traces:
            own: list[str] = []
            try:
                with Trace.open(t.path) as opened:
                    for uid, dtype in dtypes:
                        if uid in opened.resources:
                            check_dtype(uid, dtype, opened.resources, f"--dtype {uid}={dtype}: {opened.path}")
                            own += ["--dtype", f"{uid}={dtype}"]
                            used.add(uid)
            except UsageError:
                raise
            except (VkcapError, OSError):  # the trace's own fault: its worker reports it
                pass
            given.append(replace(t, flags=(*own, *t.flags)))
        unused = [f"{uid}={dtype}" for uid, dtype in dtypes if uid not in used]
        if unused and traces:
            raise UsageError(f"no trace of the suite has a resource '{unused[0].partition('=')[0]}'",
                             place=f"--dtype {unused[0]}")
        traces = given
    check_suite(traces, flags, lambda t, opened: flags_policy([*flags, *t.flags], opened), log)
    return traces


def cmd_suite_merge(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not replay.suite
    from replay.suite import read_results

    return _report(args, read_results(args.folders))


def cmd_suite_bless(args: argparse.Namespace) -> int:
    """Rewrite the manifest's expectations from the results (:mod:`replay.suite_bless`); print the
    unified diff (nothing when they already agree); with ``--dry-run``, only print it. Exit 0."""
    # lazy: per command; vkcap --help imports this module, not difflib, replay.suite, replay.suite_bless
    import difflib

    from replay.suite import read_results
    from replay.suite_bless import bless, write_manifest

    before, after = bless(args.manifest, read_results(args.results), allow_outside=args.allow_outside_manifest)
    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(args.manifest),
                                        f"{args.manifest} (blessed)"))
    if diff and before != after:
        print(shown_lines(diff), end="")
        if not args.dry_run:
            write_manifest(args.manifest, after)
    return 0


def _report(args: argparse.Namespace, results: list[Any]) -> int:
    """Print the table and the counts, write the reports asked for; exit 1 when a trace failed."""
    # lazy: per command; vkcap --help imports this module, not replay.report, replay.suite
    from replay.report import report_console, report_table
    from replay.suite import write_junit, write_results

    log = logging.getLogger("vkcap")
    hosts = any(r.host for r in results)  # a fleet's results: the node of each
    # lazy: per command; vkcap --help imports this module, not replay.suite
    from replay.suite import device_labels

    labels = device_labels(results)  # name and short UUID: identical GPUs told apart
    table = report_table("suite", ("trace", "device", *(("host",) if hosts else ()), "status", "outcome", "expected",
                                   "frames", "seconds", "verdict", "reason"))
    for r in results:
        table.add_row(*map(rich_text, (Path(str(r.trace)).name, labels[r.device_key], *((r.host,) if hosts else ()), r.status,
                                       r.outcome, r.expected, r.frames, f"{r.seconds:.2f}", r.verdict or r.detail or "",
                                       r.reason or "")))
    report_console().print(table)
    document = {"results": [r.as_dict() for r in results]}
    if args.json:
        # lazy: per command; vkcap --help imports this module, not replay.report
        from replay.report import write_json

        write_json(args.json, document)
    if args.junit:
        write_junit(args.junit, results)
    if getattr(args, "results", None):
        write_results(args.results, results)
    if args.html:
        # lazy: per command; vkcap --help imports this module, not replay.html (with jinja2, markupsafe)
        from replay.html import write_suite_html

        write_suite_html(args.html, results)
    failed = [r for r in results if r.status == "fail"]
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "expected", "fixed", "flaky", "fail", "skip")}
    log.info("suite: %s", ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no traces")
    return 1 if failed else 0


def cmd_suite_worker(args: argparse.Namespace) -> int:
    """A suite's worker process (:class:`replay.suite.Worker`): :func:`replay.worker.serve` on stdin and
    stdout, on the device ``--device`` picks (the replays' logging goes to stderr). A crash kills this
    process: the parent reports it."""
    # lazy: per command; vkcap --help imports this module, not replay.worker (with vulkan)
    from replay.worker import serve

    return serve(args.device, sys.stdin, sys.stdout)
