"""``run``: a scenario from file to outputs, as a drop-in for the reference ``scenario-runner``.

The order guarantees that bad input never costs a half-written output: the scenario is validated
and every device object is built before anything is executed, and ``dst`` files are written to a
temporary name and renamed only once the whole run succeeded.
"""
from __future__ import annotations

import logging
import os

import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from .. import reference_log
from ..device.context import FRAME_BOUNDARY_EXT, EmulationMode
from ..outputs import check_output_folder, check_output_target, output_target_problem
from .executor import DispatchTimed, Event, FrameConsumer, StopRequest, execute
from ..shaders.pipelines import cache_file_for
from .opening import DeviceRequest, OpenOptions, open_session
from .output_clash import check_dst_clashes
from .plan import Plan
from ..errors import ScenarioError
from ..commands import kind_of
from ..scenario.model import Scenario
from ..scenario.load import load_scenario
from .reports import perf_counters_document, profiling_document, write_json
from .session import Session, SessionOptions
from .timing import HostTimer


@dataclass(frozen=True)
class RunOptions:
    scenario: Path
    output: Path | None = None
    repeat: int = 1
    dry_run: bool = False
    pipeline_caching: bool = False
    clear_pipeline_cache: bool = False
    cache_path: Path = Path("/tmp")
    fail_on_pipeline_cache_miss: bool = False
    profiling_dump_path: Path | None = None
    perf_counters_dump_path: Path | None = None
    device: str | None = None
    emulation: EmulationMode = "auto"
    frame_timeout_s: float | None = None
    capture_all: bool = False
    disabled_extensions: tuple[str, ...] = ()  # --disable-extension
    robust: bool = False  # --enable-robustness-features
    neural_flags: tuple[str, ...] = ()  # the --neural-* flags given (statistics of a neural accelerator)
    capture_frame: bool = False  # --capture-frame (RenderDoc)
    debug_markers: bool = False  # --enable-gpu-debug-markers
    session_memory_dump_dir: Path | None = None  # --session-memory-dump-dir
    graph_profiling_dump_dir: Path | None = None  # --emulation-layer-profiling-dump-dir


@dataclass
class RunResult:
    plan: Plan
    outputs: list[Path] = field(default_factory=list)
    frames_run: int = 0
    pipeline_cache_hits: int = 0
    pipeline_cache_misses: int = 0
    seconds: float = 0.0
    device_name: str = ""
    interrupted: bool = False


log = logging.getLogger("vkcap.runner")


def _say_how_renderdoc_captures(session: Session) -> None:
    """--capture-frame: one line saying what RenderDoc will capture."""
    if session.renderdoc is None:
        log.warning("--capture-frame: RenderDoc is not loaded in this process (start vkcap from RenderDoc or with "
                    "'renderdoccmd capture'); nothing is captured")
    else:
        log.info("--capture-frame: RenderDoc is loaded; each frame becomes one capture")


def open_options(options: RunOptions) -> OpenOptions:
    """What a run (or a recording) opens: the device as the flags ask, the session as they configure it."""
    device = DeviceRequest(device=options.device, emulation=options.emulation,
                           disabled_extensions=options.disabled_extensions, robust=options.robust,
                           neural_flags=options.neural_flags)
    return OpenOptions(device=device, session=session_options(options), capture_all=options.capture_all,
                       reference_lines=True)


def check_outputs(scenario: Scenario, options: RunOptions) -> None:
    """Refuse, before any device work, an output the run could not write or must not replace (see
    :func:`vkcore.outputs.output_target_problem`): a ``dst`` resolving to a folder, a device node or a
    FIFO, under a file, or into a read-only folder is a :class:`ScenarioError` at the resource's
    ``dst``; a dump path (``--profiling-dump-path``, ``--perf-counters-dump-path``) an
    :class:`~vkcore.outputs.OutputTargetError` naming the flag, as is a dump folder
    (``--session-memory-dump-dir``, ``--emulation-layer-profiling-dump-dir``) that is a file, lies under one
    or cannot be written. Creates nothing."""
    for resource in () if options.dry_run else scenario.resources:  # a dry run writes no dst
        dst = getattr(resource, "dst", "")
        if dst:
            target = scenario.dst_path(dst, options.output)
            problem = output_target_problem(target)
            if problem is not None:
                raise ScenarioError(f"{target}: {problem}", file=scenario.path, place=f"{resource.place}.dst")
    if not options.dry_run:
        check_dst_clashes(scenario, options.output)  # no dst is an input, or another dst
    for flag, path in (("--profiling-dump-path", options.profiling_dump_path),
                       ("--perf-counters-dump-path", options.perf_counters_dump_path)):
        if path is not None:
            check_output_target(path, place=flag)
    for flag, folder in (("--session-memory-dump-dir", options.session_memory_dump_dir),
                         ("--emulation-layer-profiling-dump-dir", options.graph_profiling_dump_dir)):
        if folder is not None:
            check_output_folder(folder, place=flag)


def session_options(options: RunOptions) -> SessionOptions:
    cache = cache_file_for(options.scenario, options.cache_path) if options.pipeline_caching else None
    return SessionOptions(
        profiling=options.profiling_dump_path is not None,
        pipeline_cache_path=cache,
        clear_pipeline_cache=options.clear_pipeline_cache,
        fail_on_pipeline_cache_miss=options.fail_on_pipeline_cache_miss,
        readable_graph_sessions=options.session_memory_dump_dir is not None,
        debug_labels=options.debug_markers,
        renderdoc_captures=options.capture_frame,
    )


class SessionUser(Protocol):
    """What a caller of :func:`run_async` does at the run's two fixed points, beside consuming frames
    (the recorder: write the trace's preamble, then finish the trace)."""

    async def start(self, session: Session) -> None:
        """Once the session is built and its inputs loaded, before the first frame (never on a dry run)."""

    async def finish(self, result: RunResult | None) -> None:
        """Before the session closes, whatever ended the run once the session was built (a dry run, an
        error, a cancellation: this is shielded from it), with the result, or None when the run failed."""


async def run_async(
    options: RunOptions,
    *,
    on_event: Callable[[Event], None] | None = None,
    consumer: FrameConsumer | None = None,
    stop: StopRequest | None = None,
    user: SessionUser | None = None,
    scenario: Scenario | None = None,
) -> RunResult:
    """Validate, open the session (:func:`vkcore.exec.opening.open_session`), execute and write outputs.
    ``user``'s :meth:`~SessionUser.start` and :meth:`~SessionUser.finish` run at the run's fixed points:
    a recorder stores the initial state at the start, and at the finish holds the session open until
    it no longer reads its memory, then finishes its trace while the session and device close."""
    # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
    import trio

    t_start = time.perf_counter()
    timer = HostTimer()
    with timer.measure("Scenario Setup", "Parse Scenario"):
        scenario = scenario or load_scenario(options.scenario, warn_deprecated=True)
    check_outputs(scenario, options)
    reference_log.say("parsed")
    reference_log.say("resources", len(scenario.resources))
    timings: list[DispatchTimed] = []

    def collect(event: Event) -> None:
        if isinstance(event, DispatchTimed):
            timings.append(event)
        if on_event is not None:
            on_event(event)

    async with AsyncExitStack() as closing:
        try:
            opened = await closing.enter_async_context(open_session(scenario, open_options(options), timer=timer))
        except ScenarioError as exc:
            exc.file = exc.file or str(scenario.path)  # device-dependent checks name the scenario too
            raise
        session, plan = opened.session, opened.plan
        assert session is not None and plan is not None
        result = RunResult(plan, device_name=session.ctx.info.name)
        reference_log.say("commands")
        if not session.ctx.has_extension(FRAME_BOUNDARY_EXT):  # the reference's warning, once per boundary command
            for _ in (c for c in scenario.commands if kind_of(c).boundary):
                reference_log.say("no frame boundary")
        failed = False
        if options.capture_frame:
            _say_how_renderdoc_captures(session)
        try:
            cache = session.cache
            assert cache is not None
            result.pipeline_cache_hits = cache.hits
            result.pipeline_cache_misses = cache.misses
            session.save_pipeline_cache("Save Pipeline Cache (setup)")
            if options.dry_run:  # the pipelines are built and cached: their compilation times are reported
                _write_reports(options, timer, timings, t_start, time.perf_counter())
                return result
            session.load_inputs()
            if user is not None:
                await user.start(session)
            t_run = time.perf_counter()
            result.frames_run = await execute(
                session,
                repeat=options.repeat,
                on_event=collect,
                consumer=consumer,
                frame_timeout_s=options.frame_timeout_s,
                stop=stop,
            )
            timer.add("Run Scenario", "Execute Frames", time.perf_counter() - t_run)
            session.save_pipeline_cache()  # again after the frames, as the reference stores it (and says so) twice
            if stop is not None and stop.requested:
                result.interrupted = True
                return result
            # In a worker thread, as the session's and the context's teardown (open_session): the trio loop
            # stays free for the consumer's tasks (a recorder still writing its last frames).
            result.outputs = await trio.to_thread.run_sync(session.write_outputs, options.output)
            reference_log.say("results stored")
            # the graph layer stays out of the modules a compute scenario's recording and replay load
            # lazy: only a finished run reads its dumps (test_command_kinds)
            from ..graphs.dumps import dump_graph_profiling, dump_session_memories, session_memory_usage

            if options.session_memory_dump_dir is not None:
                dump_session_memories(session, options.session_memory_dump_dir)
            if options.graph_profiling_dump_dir is not None:
                dump_graph_profiling(session, options.graph_profiling_dump_dir)
            result.seconds = time.perf_counter() - t_start

            _write_reports(options, timer, timings, t_start, t_run, session_memory_usage(session))
            return result
        except BaseException:
            failed = True
            raise
        finally:
            if user is not None:
                with trio.CancelScope(shield=True):
                    await user.finish(None if failed else result)


def _write_reports(options: RunOptions, timer: HostTimer, timings: list[DispatchTimed], t_start: float,
                   t_run: float, memory_usage: list[tuple[str, int]] | None = None) -> None:
    """``--profiling-dump-path`` and ``--perf-counters-dump-path``, as the reference writes them (on a
    dry run too: no timestamps, and the set-up phases with the pipelines' compilation times)."""
    if options.profiling_dump_path is not None:
        write_json(options.profiling_dump_path, profiling_document(timings, memory_usage or []))
    if options.perf_counters_dump_path is not None:
        write_json(options.perf_counters_dump_path,
                   perf_counters_document(timer, time.perf_counter() - t_start, t_run - t_start))


def run(options: RunOptions, **kwargs: Any) -> RunResult:
    """Synchronous entry point: one trio run."""
    # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
    import trio

    return trio.run(lambda: run_async(options, **kwargs))
