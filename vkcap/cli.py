"""The ``vkcap`` command line: parses arguments, wires vkcore/capture/replay, prints results.

Exit codes: 0 success; 1 a failure while running (or, for replay/diff/bisect, a divergence);
2 invalid input (scenario, trace, arguments); 130 interrupted. Errors print as one line on stderr,
``vkcap: error: FILE: PLACE: what is wrong``; ``--log-level debug`` adds the traceback.
Heavy modules are imported inside the command functions so that ``vkcap run`` starts fast.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

# numpy's OpenBLAS starts a thread per core at import and lets them spin after work; vkcap does no
# linear algebra, and on a small machine those threads compete with the driver and the compressors.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from vkcore.bounded_numbers import check_number, number_type
from vkcore.device import validation
from vkcore.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, UsageError, VkcapError
from vkcore.safe_text import rich_text, shown
from vkcore.version import vkcap_version

log = logging.getLogger("vkcap")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as a :class:`UsageError` (one line, exit 2) and takes flags
    only as spelled in full: an abbreviation a script relies on would change meaning, or stop working,
    when a flag sharing its prefix is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="logging verbosity (default: info)")


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", metavar="INDEX|UUID|NAME", help="Vulkan device: index, deviceUUID prefix (vkcap devices) or part of its name (default: best GPU, else CPU)")
    p.add_argument(
        "--no-emulation-layers",
        action="store_true",
        help="never load ARM's emulation layers (tensors/graphs then need native driver support)",
    )
    p.add_argument("--validate", action="store_true",
                   help="run under the Khronos validation layer: any validation error fails the command (exit 1)")


NEURAL_FLAGS = ("neural_debug_database_dump_dir", "neural_statistics_dump_dir", "neural_statistics_mode")
# The optional extensions the reference lets --disable-extension name.
DISABLEABLE = ("VK_EXT_custom_border_color", "VK_EXT_frame_boundary", "VK_ARM_data_graph_neural_accelerator_statistics",
               "VK_KHR_maintenance5", "VK_KHR_deferred_host_operations")


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """The reference runner's flags, so vkcap can replace it."""
    p.add_argument("scenario_pos", nargs="?", metavar="SCENARIO", help="scenario JSON file")
    p.add_argument("--scenario", help="scenario JSON file (same as the positional argument)")
    p.add_argument("--output", type=Path, help="folder for dst files (default: the scenario's folder)")
    p.add_argument("--repeat", type=number_type("repeat", "--repeat"), default=1, metavar="N",
                   help="run the whole scenario N times (N: 1 to 1000000)")
    p.add_argument("--dry-run", action="store_true",
                   help="build everything and fill the pipeline cache; execute nothing and write no outputs (the "
                        "dump paths get the set-up times)")
    p.add_argument("--pipeline-caching", action="store_true", help="keep a VkPipelineCache per scenario on disk")
    p.add_argument("--clear-pipeline-cache", action="store_true", help="delete the scenario's pipeline cache first")
    p.add_argument("--cache-path", type=Path, default=Path("/tmp"), help="folder of pipeline caches (default: /tmp)")
    p.add_argument("--fail-on-pipeline-cache-miss", action="store_true", help="error when a pipeline is not in the cache")
    p.add_argument("--profiling-dump-path", type=Path, help="write per-dispatch GPU timestamps as JSON")
    p.add_argument("--perf-counters-dump-path", type=Path, help="write host timings as JSON")
    p.add_argument("--timeout", type=number_type("timeout", "--timeout"), metavar="SECONDS",
                   help="give up on a frame that runs longer than this (at most 7 days)")
    p.add_argument("--disable-extension", nargs="+", action="extend", default=[], metavar="EXT", choices=DISABLEABLE,
                   help="never enable these optional extensions (may be repeated): " + ", ".join(DISABLEABLE))
    p.add_argument("--enable-robustness-features", action="store_true",
                   help="enable robust buffer and image access where the device has them")
    p.add_argument("--enable-gpu-debug-markers", action="store_true",
                   help="label each frame and command (VK_EXT_debug_utils) and name buffers and images by uid, for "
                        "RenderDoc, GFXReconstruct and other capture tools")
    p.add_argument("--capture-frame", action="store_true",
                   help="RenderDoc: say whether it is loaded (frames are marked with VK_EXT_frame_boundary for it)")
    p.add_argument("--session-memory-dump-dir", type=Path, metavar="DIR",
                   help="after the run, write each graph session's memory as hex text into DIR (created)")
    p.add_argument("--emulation-layer-profiling-dump-dir", type=Path, metavar="DIR",
                   help="after the run, write each graph pipeline's emulation-layer profiling data into DIR "
                        "(created; a warning for each pipeline that has none)")
    p.add_argument("--neural-debug-database-dump-dir", nargs="?", const="", metavar="DIR",
                   help="(neural accelerators only: says so and writes nothing elsewhere)")
    p.add_argument("--neural-statistics-dump-dir", nargs="?", const="", metavar="DIR",
                   help="(neural accelerators only: says so and writes nothing elsewhere)")
    p.add_argument("--neural-statistics-mode", nargs="?", const="1", choices=("0", "1"),
                   help="(neural accelerators only)")
    _add_device(p)


class _VersionAction(argparse.Action):
    """``--version``: argparse's own, but the version is read only when asked (it costs every run ~25 ms)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show program's version number and exit" if help is None else help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser._print_message(f"vkcap {vkcap_version()}\n", sys.stdout)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vkcap", description="Run, record and replay Vulkan compute/ML scenarios.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="execute a scenario (drop-in for ARM's scenario-runner)")
    _add_run_flags(run)
    run.add_argument("--wait-for-key-stroke-before-run", action="store_true", help="wait for Enter before running")
    run.add_argument("--pause-on-exit", action="store_true", help="wait for Enter before exiting")
    _add_common(run)
    run.set_defaults(handler=_cmd_run)

    devices = sub.add_parser("devices", help="list Vulkan devices and their tensor/graph support")
    devices.add_argument("--json", action="store_true", help="print JSON")
    devices.add_argument("--no-emulation-layers", action="store_true", help="report without ARM's emulation layers")
    _add_common(devices)
    devices.set_defaults(handler=_cmd_devices)

    from . import commands_trace

    commands_trace.register(sub, _add_common, _add_run_flags, _add_device)
    from . import commands_trim

    commands_trim.register(sub, _add_common, _add_device)
    from . import commands_extract

    commands_extract.register(sub, _add_common, _add_device)
    from . import commands_vgf

    commands_vgf.register(sub, _add_common)
    from . import commands_suite

    commands_suite.add_suite_parser(sub)
    from . import commands_fleet

    commands_fleet.register(sub, _add_common)
    from . import commands_import

    commands_import.register(sub, _add_common)
    return parser


def scenario_argument(args: argparse.Namespace) -> Path:
    value = args.scenario or args.scenario_pos
    if args.scenario and args.scenario_pos and args.scenario != args.scenario_pos:
        raise UsageError("give the scenario once: either positionally or with --scenario")
    if not value:
        raise UsageError("a scenario file is required (vkcap run SCENARIO.json)")
    return Path(value)


def check_run_flags(args: argparse.Namespace) -> None:
    """The checks of :func:`run_options` that need no module: callers make them before starting Vulkan."""
    scenario_argument(args)
    check_number("repeat", args.repeat, place="--repeat")
    if args.timeout is not None:
        check_number("timeout", args.timeout, place="--timeout")


#: The dump paths, checked before the scenario is read (as the reference does), with the reference's phrase.
DUMP_PATHS = (("profiling_dump_path", "--profiling-dump-path", "Unable to open profiling data file for writing"),
              ("perf_counters_dump_path", "--perf-counters-dump-path", "Unable to open perf counters file for writing"))


def check_dump_paths(args: argparse.Namespace) -> None:
    """Refuse a dump path (:data:`DUMP_PATHS`) that is a folder, a device or FIFO, lies under a file or in a
    folder that cannot be written: one line ``PATH: FLAG: <the reference's phrase>: why``, exit 2, before the
    scenario is read, as the reference refuses it. A missing folder is created when the file is written."""
    from vkcore.outputs import OutputTargetError, output_target_problem

    for name, flag, phrase in DUMP_PATHS:
        path = getattr(args, name, None)
        if path is not None:
            problem = output_target_problem(path)
            if problem is not None:
                raise OutputTargetError(f"{phrase}: {problem}", file=os.fspath(path) or "''", place=flag)


def check_run_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any device work, an ``--output`` that is a file, lies under a file or is not
    writable. One line (``PATH: --output: why``), exit 2; creates nothing. (Each ``dst`` in it is checked
    by :func:`vkcore.exec.runner.check_outputs`, once the scenario is loaded.)"""
    from vkcore.outputs import check_output_folder

    if args.output is not None:
        check_output_folder(args.output, place="--output")


def run_options(args: argparse.Namespace, **extra: object):  # -> RunOptions
    """The run's options from the flags, checked (:func:`check_run_flags`, then, unless ``--dry-run``,
    :func:`check_run_outputs`: after Vulkan started, as they import modules)."""
    check_run_flags(args)
    check_dump_paths(args)
    if not args.dry_run:
        check_run_outputs(args)
    from vkcore.exec.runner import RunOptions

    return RunOptions(
        scenario=scenario_argument(args),
        output=args.output,
        repeat=args.repeat,
        dry_run=args.dry_run,
        pipeline_caching=args.pipeline_caching or args.clear_pipeline_cache or args.fail_on_pipeline_cache_miss,
        clear_pipeline_cache=args.clear_pipeline_cache,
        cache_path=args.cache_path,
        fail_on_pipeline_cache_miss=args.fail_on_pipeline_cache_miss,
        profiling_dump_path=args.profiling_dump_path,
        perf_counters_dump_path=args.perf_counters_dump_path,
        device=args.device,
        emulation="off" if args.no_emulation_layers else "auto",
        frame_timeout_s=args.timeout,
        disabled_extensions=tuple(args.disable_extension),
        robust=args.enable_robustness_features,
        capture_frame=args.capture_frame,
        debug_markers=args.enable_gpu_debug_markers,
        session_memory_dump_dir=args.session_memory_dump_dir,
        graph_profiling_dump_dir=args.emulation_layer_profiling_dump_dir,
        neural_flags=tuple(f"--{name.replace('_', '-')}" for name in NEURAL_FLAGS if getattr(args, name) is not None),
        **extra,  # type: ignore[arg-type]
    )


# C extension modules that commands import while the driver starts in its thread. A process loads
# shared libraries one at a time (glibc's loader lock) and the driver's load is long (LLVM for lavapipe,
# NVIDIA's libraries): imported in that window, ``_queue`` waited 17 ms on lavapipe and 12 ms on NVIDIA's
# driver; imported before the thread starts, each takes under 2 ms.
BEFORE_THE_DRIVER = ("queue",)
TRACE_CODECS = ("xxhash", "zstandard", "msgpack")  # what reading or writing a trace loads


def start_vulkan_early(icd: Path | None = None, device: str | None = None, *, also: tuple[str, ...] = ()) -> None:
    """Choose the driver (``--icd``) and let it start, on the ``--device`` given, while the command
    imports and reads its files (see :func:`vkcore.device.context.start_instance_early`); call once the
    arguments are checked. ``BEFORE_THE_DRIVER`` and ``also`` (module names) are imported first."""
    import importlib

    from vkcore.device.context import start_instance_early
    from vkcore.device.driver import use_driver

    for name in (*BEFORE_THE_DRIVER, *also):
        importlib.import_module(name)
    use_driver(icd)
    start_instance_early(device)


def _cmd_run(args: argparse.Namespace) -> int:
    check_run_flags(args)
    from vkcore import reference_log

    reference_log.to_stdout(getattr(logging, args.log_level.upper()))  # the reference's lines, for its scripts
    start_vulkan_early(device=args.device)  # before the imports below, which it overlaps
    from vkcore.exec.runner import run

    from .progress import FrameProgress

    options = run_options(args)
    if args.wait_for_key_stroke_before_run:
        _wait_for_enter("press Enter to run")
    with FrameProgress.for_terminal() as progress:
        result = run(options, on_event=progress.on_event)
    if options.dry_run:
        log.info("dry run: built %d frame(s) on %s; executed nothing and wrote no outputs", len(result.plan.frames),
                 result.device_name)
    else:
        log.info(
            "ran %d frame(s) on %s in %.3f s; wrote %d output(s)",
            result.frames_run, result.device_name, result.seconds, len(result.outputs),
        )
        if options.pipeline_caching:
            log.info("pipeline cache: %d hit(s), %d miss(es)", result.pipeline_cache_hits, result.pipeline_cache_misses)
    if args.pause_on_exit:
        _wait_for_enter("press Enter to exit")
    return 0


def _wait_for_enter(prompt: str) -> None:
    """The reference's key-stroke pauses: one line read from standard input (none when it is closed)."""
    print(f"vkcap: {prompt}", file=sys.stderr, flush=True)
    sys.stdin.readline()


def _cmd_devices(args: argparse.Namespace) -> int:
    from vkcore.device.context import list_devices

    devices = list_devices("off" if args.no_emulation_layers else "auto")
    if args.json:
        import json

        print(json.dumps([{**d.fingerprint(), "index": d.index, "pci_bus": d.pci_bus or None, "tensors": d.tensors,
                           "graphs": d.graphs, "optical_flow": d.optical_flow} for d in devices], indent=2))
        return 0
    from replay.report import report_console, report_table

    table = report_table("Vulkan devices", ("#", "name", "UUID", "PCI", "type", "driver", "driver version", "API",
                                            "tensors", "graphs", "optical flow"))
    for d in devices:
        table.add_row(*map(rich_text, (d.index, d.name, d.short_uuid or "-", d.pci_bus or "-", d.type, d.driver_name,
                                       d.driver_version, d.api_version, d.tensors, d.graphs, d.optical_flow)))
    report_console().print(table)
    return 0


def _enable_validation() -> None:
    """``--validate``: for this process and the children it starts (isolated replays)."""
    os.environ.setdefault(validation.ENV, "1")
    validation.enable()


def _first_cause(exc: VkcapError) -> VkcapError:
    """The error to report: a validation failure seen before ``exc`` explains it better (the driver was
    given invalid input), except input errors, which vkcap found before the driver saw anything."""
    v = validation.current()
    if v is None or exc.exit_code == EXIT_BAD_INPUT or isinstance(exc, validation.ValidationFailed):
        return exc
    try:
        v.check()
    except validation.ValidationFailed as failed:
        return failed
    return exc


def _normalise_argv(argv: list[str]) -> list[str]:
    """``vkcap --scenario x.json ...`` (the reference runner's spelling) means ``vkcap run ...``."""
    if argv and argv[0].startswith("--") and argv[0] not in ("--help", "-h", "--version"):
        return ["run", *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code. Errors are one line on stderr, Ctrl-C is 130."""
    argv = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
    level = "info"
    for i, arg in enumerate(argv):  # both spellings, as argparse and the reference take them
        if arg == "--log-level" and i + 1 < len(argv):
            level = argv[i + 1]
        elif arg.startswith("--log-level="):
            level = arg.split("=", 1)[1]
    try:
        from .log_format import ShownFormatter

        shown_log = logging.StreamHandler(sys.stderr)
        shown_log.setFormatter(ShownFormatter())
        logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[shown_log])
        args = build_parser().parse_args(argv)
        args.argv = ["vkcap", *argv]  # what a trace stores as its command line
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            build_parser().print_help(sys.stderr)
            return EXIT_BAD_INPUT
        if getattr(args, "validate", False):
            _enable_validation()
        code = handler(args)
        validation.check()
        return code
    except VkcapError as exc:
        if level == "debug":
            log.exception("details")
        print(f"vkcap: error: {shown(_first_cause(exc).render())}", file=sys.stderr)
        return _first_cause(exc).exit_code
    except KeyboardInterrupt:
        print("vkcap: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:  # an unexpected failure: one line, traceback only in debug
        if type(exc).__module__.startswith("vulkan"):  # a Vulkan call failed in a way no check foresaw
            if level == "debug":
                log.exception("details")
            print(f"vkcap: error: a Vulkan call failed: {type(exc).__name__} (rerun with --log-level debug for details)",
                  file=sys.stderr)
            return EXIT_FAILURE
        if level == "debug":
            log.exception("internal error")
        print(f"vkcap: internal error: {type(exc).__name__}: {shown(exc)} (rerun with --log-level debug for details)", file=sys.stderr)
        return EXIT_FAILURE


def entry() -> None:
    """The console script: ``main``, then exit without interpreter teardown.

    Everything is finished when ``main`` returns: outputs renamed into place, traces closed, the Vulkan
    device destroyed. Skipping the teardown of modules and driver threads saves tens of milliseconds
    on every run, which matters for small scenarios. For the same reason the last Vulkan device is
    left to the exit (:func:`vkcore.device.lifetime.leave_last_device_to_exit`).
    """
    from vkcore.device.lifetime import leave_last_device_to_exit

    if not leave_last_device_to_exit():
        sys.exit(main())
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    entry()
