"""Where one vkcap command spends its time, inside its own process: a timeline of its stages (module
imports and the recorder's, session's, executor's and context's main functions, each with the thread
it ran in), the CPU time of each thread, and what the functions called once a frame or a blob cost a
call (wall and the calling thread's CPU time), as three tables.

    python bench/timeline.py record S.json -o T.vkt --output OUT
    python bench/timeline.py run S.json --output OUT
    python bench/timeline.py replay T.vkt --frame 1

The command runs as ``python -m vkcap`` would run it, in this process. Each function in STAGES is
wrapped when its module is first imported, so the imports happen in the command's own order and the
import rows are the command's own. A row's time includes the rows nested in it. A thread's CPU time
is read from ``/proc`` once the run is over (the recorder's threads just before its pools shut down,
the writer when it ends). Threads of the same pool are summed. Linux only.

Compare two commands one process each, alternating, several times: a host's speed drifts within
minutes (``bench/ab_trees.py`` does this for whole commands).
"""
from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, NoReturn

T0 = time.perf_counter()

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.import_hook import AroundImport, run_vkcap  # noqa: E402

#: module -> functions (qualified names) timed in it; a module with none has its import timed only
STAGES: dict[str, tuple[str, ...]] = {
    "vkcap.cli": ("main",),
    "vkcap.vulkan_start": ("start_vulkan_early",),
    "vkcap.commands_record": ("cmd_record", "check_trace_target"),
    "vkcap.commands_trace": (),
    "vulkan": (),
    "trio": (),
    "numpy": (),
    "vkcore.device.context": ("VulkanContext.__init__", "_create_instance", "_open_device", "VulkanContext.close"),
    "vkcore.scenario.load": ("load_scenario",),
    "vkcore.exec.opening": ("open_context",),
    "vkcore.exec.runner": ("run_async", "_write_reports"),
    "vkcore.exec.executor": ("execute",),
    "vkcore.exec.session": ("Session.__init__", "Session.load_inputs", "Session.contents", "Session.close"),
    "capture.writer": ("TraceWriter.__init__", "TraceWriter.close"),
    "capture.trace": ("Trace.open",),
    "capture.recorder": ("record_async", "TraceRecorder.gather_preamble", "TraceRecorder.write_preamble",
                         "TraceRecorder.join_writer", "_finish", "TraceRecorder.close"),
    "replay.replayer": ("replay", "replay_trace", "rebuild_scenario", "restore_state", "ReplaySession.run",
                        "ReplaySession.close"),
}

#: module -> functions called once a frame or a blob, timed per call and summed (not as timeline rows)
CALLS: dict[str, tuple[str, ...]] = {
    "capture.format.records": ("content_key", "checksum"),
    "capture.kernels": ("residual_sparse", "residual", "sparse", "plane"),
    "capture.format.codecs.delta": ("compute_sparse", "compute_counted", "choose"),
    "capture.format.codecs.sparse": ("sparse_parts",),
    "capture.writer": ("TraceWriter.residual", "TraceWriter.compress_blob", "TraceWriter._encode",
                       "TraceWriter.write_prepared", "TraceWriter.add_meta"),
    "capture.recorder": ("TraceRecorder.consume", "TraceRecorder.plan_blobs", "TraceRecorder.write_frame"),
    "vkcore.exec.session": ("Session.submit", "Session.wait"),
}

rows: list[tuple[float, float, str, str]] = []  # (start, end, what, thread), seconds since T0
calls: dict[str, list[float]] = {}  # function -> [calls, wall seconds, CPU seconds]
cpu_seen: dict[int, tuple[str, float]] = {}  # native thread id -> (name, CPU seconds)
TICK = os.sysconf("SC_CLK_TCK")


def _thread_name() -> str:
    """This thread's name; "trio worker" for trio's worker threads, which trio names after the
    function they run (a wrapper of this script's, here)."""
    name = threading.current_thread().name
    return "trio worker" if " from " in name else name


def _timed(orig: Callable[..., Any], what: str) -> Callable[..., Any]:
    def row(start: float) -> None:
        rows.append((start - T0, time.perf_counter() - T0, what, _thread_name()))

    if inspect.iscoroutinefunction(orig):
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await orig(*args, **kwargs)
            finally:
                row(start)
        return timed_async

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            row(start)
    return timed


def _counted(orig: Callable[..., Any], what: str) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return orig(*args, **kwargs)
        finally:
            total = calls.setdefault(what, [0, 0.0, 0.0])
            total[0] += 1
            total[1] += time.perf_counter() - start
            total[2] += time.thread_time() - cpu
    return counted


def _wrap(module: ModuleType, qualname: str, how: Callable[[Callable[..., Any], str], Callable[..., Any]]) -> None:
    *path, name = qualname.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, name, how(getattr(owner, name), qualname))


def _timed_exec(name: str, module: ModuleType, execute: Callable[[ModuleType], None]) -> None:
    """Execute a module of STAGES or CALLS, timing it (STAGES), then wrap its functions."""
    start = time.perf_counter()
    execute(module)
    if name in STAGES:
        rows.append((start - T0, time.perf_counter() - T0, f"import {name}", _thread_name()))
    for qualname in CALLS.get(name, ()):
        _wrap(module, qualname, _counted)
    for qualname in STAGES.get(name, ()):
        _wrap(module, qualname, _timed)
    if name in AFTER_IMPORT:
        AFTER_IMPORT[name](module)


def _sample_threads() -> None:
    names = {t.native_id: "trio worker" if " from " in t.name else t.name for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        cpu_seen[int(tid)] = (names.get(int(tid), comm), (int(fields[11]) + int(fields[12])) / TICK)


def _pool(name: str) -> str:
    """A thread's pool: the name without the worker's number (ThreadPoolExecutor's ``prefix_N``)."""
    head, _, tail = name.rpartition("_")
    return f"{head}_*" if head and tail.isdigit() else name


def _report() -> None:
    _sample_threads()
    end = time.perf_counter() - T0
    print("\n| start ms | end ms | ms | what | thread |\n| ---: | ---: | ---: | --- | --- |", file=sys.stderr)
    for start, stop, what, thread in sorted(rows):
        print(f"| {start * 1e3:.1f} | {stop * 1e3:.1f} | {(stop - start) * 1e3:.1f} | {what} | {thread} |", file=sys.stderr)
    print(f"| | {end * 1e3:.1f} | | exit | |", file=sys.stderr)
    pools: dict[str, list[float]] = {}
    for name, cpu in cpu_seen.values():
        pools.setdefault(_pool(name), []).append(cpu)
    print("\n| thread | threads | CPU ms |\n| --- | ---: | ---: |", file=sys.stderr)
    for name, cpus in sorted(pools.items(), key=lambda kv: -sum(kv[1])):
        if sum(cpus) > 0:
            print(f"| {name} | {len(cpus)} | {sum(cpus) * 1e3:.0f} |", file=sys.stderr)
    if calls:
        print("\n| function | calls | wall ms a call | CPU ms a call |\n| --- | ---: | ---: | ---: |", file=sys.stderr)
        for what, (n, wall, cpu) in calls.items():
            print(f"| {what} | {n:.0f} | {wall / n * 1e3:.3f} | {cpu / n * 1e3:.3f} |", file=sys.stderr)


def _hook_recorder_threads(module: ModuleType) -> None:
    """Sample the threads before the recorder's pools end, and keep the writer's CPU time."""
    recorder = module.TraceRecorder
    close, write_all = recorder.close, recorder._write_all

    def sampled_close(self: Any) -> None:
        _sample_threads()
        close(self)

    def counted_write_all(self: Any, preamble: Any) -> None:
        try:
            write_all(self, preamble)
        finally:
            cpu_seen[threading.get_native_id()] = (_thread_name(), time.thread_time())

    recorder.close, recorder._write_all = sampled_close, counted_write_all


#: module -> what else to do once it is imported and its stages are wrapped
AFTER_IMPORT: dict[str, Callable[[ModuleType], None]] = {"capture.recorder": _hook_recorder_threads}


def main() -> None:
    sys.meta_path.insert(0, AroundImport(lambda name: name in STAGES or name in CALLS, _timed_exec))
    exit_now = os._exit

    def report_then_exit(status: int) -> NoReturn:  # vkcap's console entry leaves through os._exit
        _report()
        exit_now(status)

    os._exit = report_then_exit
    try:
        run_vkcap(sys.argv[1:])
    except SystemExit:
        _report()
        raise


if __name__ == "__main__":
    main()
