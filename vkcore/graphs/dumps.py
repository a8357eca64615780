"""What the reference runner dumps about graph pipelines once a run is over, in its file names and formats.

Graph pipelines are numbered as the reference numbers them: one per graph segment of each graph
dispatch, in command order, then segment order. (The reference makes pipelines per dispatch; vkcap
shares one between identical dispatches, so such dispatches each get their number, and their dumps
show the shared pipeline as the last of them left it.)

- ``--session-memory-dump-dir``: ``Graph_Pipeline_<P>_Session_RAM_<M>.txt`` for each memory object ``M``
  of the session of each graph and optical-flow pipeline, ``P`` counting the memory objects of all
  sessions (measured: a conv2d graph dispatched twice gives ``0_..._0`` and ``1_..._0``; an optical flow,
  whose session has two objects, ``0_..._0`` and ``1_..._1``). The text is
  a newline, then one line per 16 bytes: the offset as 8 upper-case hex digits, a colon, three spaces,
  then each byte as two upper-case hex digits and a space; the last line has no newline. The sessions
  must have been created host-readable (``SessionOptions.readable_graph_sessions``).
- ``--emulation-layer-profiling-dump-dir``: ``EmulationLayerPipeline_<P>.json``, the data of the
  emulation layer's private pipeline property :data:`PROFILING_PROPERTY`, for each pipeline ``P``. Where
  a pipeline does not report that property (the emulation layer tested here reports only property 0, its creation log),
  one warning says so, as the reference does, and no file is written.

Every file is replaced whole or left as it was (:func:`vkcore.outputs.write_atomic`). Call with no frame
in flight.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..outputs import write_atomic

if TYPE_CHECKING:
    from .data_graph import DataGraphPipeline, GraphSession
    from .dispatch import PreparedGraph
    from ..exec.session import Session

log = logging.getLogger("vkcap")

BYTES_PER_LINE = 16
PROFILING_PROPERTY = 0x7FFFFFFE  # the emulation layer's graph profiling data (a VkDataGraphPipelinePropertyARM)


def graph_pipelines(session: "Session") -> Iterator["DataGraphPipeline"]:
    """Every graph pipeline of ``session`` in the reference's numbering (see the module docstring)."""
    for _, graph in sorted(session.graphs.items()):
        yield from graph.graph_pipelines()


def session_ram_text(data: bytes) -> str:
    """``data`` in the reference's hex layout (see the module docstring)."""
    lines = []
    for offset in range(0, len(data), BYTES_PER_LINE):
        chunk = data[offset : offset + BYTES_PER_LINE]
        lines.append(f"{offset:08X}:   " + "".join(f"{b:02X} " for b in chunk))
    return "\n" + "\n".join(lines)


def graph_sessions(session: "Session") -> Iterator[tuple[str, "GraphSession"]]:
    """(the reference's command name, session) of every graph and optical-flow pipeline with a session,
    in command order, then segment order."""
    for cmd in session.scenario.commands:
        graph = session.graphs.get(cmd.index)
        if graph is not None:
            for name, pipeline in graph_pipeline_names(cmd, graph):
                if pipeline.session is not None:
                    yield name, pipeline.session
        flow = session.optical_flows.get(cmd.index)
        if flow is not None and flow.pipeline.session is not None:
            yield cmd.KIND, flow.pipeline.session


def graph_pipeline_names(cmd: object, graph: "PreparedGraph") -> Iterator[tuple[str, "DataGraphPipeline"]]:
    """(the reference's command name, pipeline) of each graph segment of ``graph``: ``<graph>/<segment>`` for
    a ``dispatch_vgf`` (as the reference names them in its profiling document), the graph's name otherwise."""
    # lazy: vkcap run imports this module, not vkcore.graphs.dispatch (with flatbuffers, numpy)
    from .dispatch import _GraphStep

    vgf = getattr(cmd, "KIND", "") == "dispatch_graph"  # dispatch_vgf
    for step in graph.steps:
        if isinstance(step, _GraphStep) and step.pipeline is not None:
            yield (f"{graph.command.graph_ref}/{step.segment.name}" if vgf else graph.command.graph_ref), step.pipeline


def session_memory_usage(session: "Session") -> list[tuple[str, int]]:
    """(command name, bytes) for the profiling document's "Memory Usage": the largest memory object of
    each session (the reference reports 8192 for an optical flow whose session has objects of 6016 and
    8192 bytes)."""
    return [(name, max((r.requirements.size for r in s.requirements), default=0))
            for name, s in graph_sessions(session)]  # a session that needs no memory is 0 bytes, as there


def dump_session_memories(session: "Session", folder: Path) -> list[Path]:
    """Write the memory of every graph and optical-flow session of ``session`` into ``folder`` (created
    when a file is written); return the files written. Memory the device cannot map (an optical-flow
    cache on NVIDIA) is skipped with a warning."""
    written: list[Path] = []
    number = 0
    for _, graph_session in graph_sessions(session):
        for index, alloc in enumerate(graph_session.allocations):
            if alloc.view is None:
                log.warning("--session-memory-dump-dir: skipping session memory %d: the device cannot map it", number)
            else:
                path = folder / f"Graph_Pipeline_{number}_Session_RAM_{index}.txt"
                write_atomic(path, [session_ram_text(bytes(alloc.view)).encode("ascii")])
                written.append(path)
            number += 1
    return written


def dump_graph_profiling(session: "Session", folder: Path) -> list[Path]:
    """Write the emulation layer's profiling data of every graph pipeline of ``session`` into ``folder``
    (created when a file is written), one warning for each pipeline without it; return the files written."""
    written: list[Path] = []
    for number, pipeline in enumerate(graph_pipelines(session)):
        if PROFILING_PROPERTY not in pipeline.available_properties():
            log.warning("--emulation-layer-profiling-dump-dir: skipping graph pipeline %d: property %#x is not "
                        "available", number, PROFILING_PROPERTY)
            continue
        data = pipeline.property_data(PROFILING_PROPERTY).rstrip(b"\0")
        if not data:
            log.warning("--emulation-layer-profiling-dump-dir: skipping graph pipeline %d: property %#x has no "
                        "data", number, PROFILING_PROPERTY)
            continue
        path = folder / f"EmulationLayerPipeline_{number}.json"
        write_atomic(path, [data])
        written.append(path)
    return written
