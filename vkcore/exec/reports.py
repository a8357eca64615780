"""The JSON dumps of ``--profiling-dump-path`` and ``--perf-counters-dump-path``.

Both follow the reference runner's layout, so scripts that read its files keep working.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .executor import DispatchTimed
from ..outputs import write_atomic
from .timing import HostTimer


def profiling_document(timings: list[DispatchTimed], memory_usage: Sequence[tuple[str, int]] = ()) -> dict[str, Any]:
    """The reference's ``--profiling-dump-path`` document: "Memory Usage" (each graph or optical-flow
    session's memory, by command name, where there are any), "Timestamps" and the total; ``{}`` when
    nothing ran (``--dry-run``), as its."""
    if not timings:
        return {}
    doc: dict[str, Any] = {}
    if memory_usage:
        doc["Memory Usage"] = [{"Command name": name, "Command type": "DataGraphDispatch", "Iteration": 0,
                                "Session memory [bytes]": size} for name, size in memory_usage]
    entries = []
    total_ms = 0.0
    for t in timings:
        ticks = max(0, t.end_tick - t.begin_tick)
        ms = ticks * t.period_ns / 1e6
        total_ms += ms
        entries.append(
            {
                "Command name": t.name,
                "Command type": t.kind,
                "Cycle count after command": t.end_tick,
                "Cycle count before command": t.begin_tick,
                "Cycle count for command": ticks,
                "Iteration": t.pass_index + 1,
                "Time for command [ms]": ms,
                "Timestamp Period": t.period_ns,
            }
        )
    return {**doc, "Timestamps": entries, "Total execution time [ms]": total_ms}


def perf_counters_document(timer: HostTimer, total_s: float, time_to_inference_s: float) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for phase in sorted(timer.phases):
        items = list(timer.counters(phase))
        doc[phase] = {
            "counters": [{"name": n, "unit": "microseconds", "value": v} for n, v in items],
            "total time": sum(v for _, v in items),
            "unit": "microseconds",
        }
    doc["Time to Inference"] = int(round(time_to_inference_s * 1e6))
    doc["Total Scenario Time"] = int(round(total_s * 1e6))
    doc["unit"] = "microseconds"
    return doc


def write_json(path: Path, document: dict[str, Any]) -> None:
    write_atomic(path, [json.dumps(document, indent=4, sort_keys=True).encode()])
