"""The ``vkcap`` command line: parses arguments, wires vkcore/capture/replay, prints results.

Exit codes: 0 success; 1 a failure while running (or, for replay/diff/bisect, a divergence);
2 invalid input (scenario, trace, arguments); 130 interrupted. Errors print as one line on stderr,
``vkcap: error: FILE: PLACE: what is wrong``; ``--log-level debug`` adds the traceback.
Heavy modules are imported inside the command functions so that ``vkcap run`` starts fast.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

# numpy's OpenBLAS starts a thread per core at import and lets them spin after work; vkcap does no
# linear algebra, and on a small machine those threads compete with the driver and the compressors.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from vkcore.bounded_numbers import number_type
from vkcore.device import validation
from vkcore.device.lifetime import leave_last_device_to_exit
from vkcore.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, VkcapError
from vkcore.safe_text import rich_text, shown
from vkcore.version import vkcap_version

from . import (commands_extract, commands_fleet, commands_import, commands_suite, commands_trace, commands_trim,
               commands_vgf)
from .error_cause import first_cause
from .flag_parser import FlagParser as _Parser  # noqa: N814 (the name tests and commands know)
from .log_format import ShownFormatter
from .run_flags import check_run_flags, run_options
from .vulkan_start import start_vulkan_early

log = logging.getLogger("vkcap")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


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

    commands_trace.register(sub, _add_common, _add_run_flags, _add_device)
    commands_trim.register(sub, _add_common, _add_device)
    commands_extract.register(sub, _add_common, _add_device)
    commands_vgf.register(sub, _add_common)
    commands_suite.add_suite_parser(sub)
    commands_fleet.register(sub, _add_common)
    commands_import.register(sub, _add_common)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    check_run_flags(args)
    # lazy: vkcap --help imports this module, not vkcore.reference_log
    from vkcore import reference_log

    reference_log.to_stdout(getattr(logging, args.log_level.upper()))  # the reference's lines, for its scripts
    start_vulkan_early(device=args.device)  # before the imports below, which it overlaps
    # lazy: vkcap --help imports this module, not vkcap.progress, vkcore.exec.runner (with vulkan)
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
    # lazy: vkcap --help imports this module, not vkcore.device.context (with vulkan)
    from vkcore.device.context import list_devices

    devices = list_devices("off" if args.no_emulation_layers else "auto")
    if args.json:
        print(json.dumps([{**d.fingerprint(), "index": d.index, "pci_bus": d.pci_bus or None, "tensors": d.tensors,
                           "graphs": d.graphs, "optical_flow": d.optical_flow} for d in devices], indent=2))
        return 0
    # lazy: vkcap --help imports this module, not replay.report
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
        print(f"vkcap: error: {shown(first_cause(exc).render())}", file=sys.stderr)
        return first_cause(exc).exit_code
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
