"""The flags of ``run`` and ``record`` (the reference runner's), checked and turned into
:class:`vkcore.exec.runner.RunOptions`."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from vkcore.bounded_numbers import check_number
from vkcore.errors import UsageError

NEURAL_FLAGS = ("neural_debug_database_dump_dir", "neural_statistics_dump_dir", "neural_statistics_mode")


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
    # lazy: vkcap --help imports this module, not vkcore.outputs
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
    # lazy: vkcap --help imports this module, not vkcore.outputs
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
    # lazy: vkcap --help imports this module, not vkcore.exec.runner (with vulkan)
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
