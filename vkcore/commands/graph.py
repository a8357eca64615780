"""``dispatch_graph`` (and its newer name ``dispatch_vgf``): a VGF's segments, graph and compute, in
order (see :mod:`vkcore.graphs.dispatch`); identical commands share one prepared graph."""
from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping

import vulkan as vk

from ..device import validation
from ..graphs.dispatch import PreparedGraph
from ..scenario.model import Binding, DispatchGraph, Scenario
from .base import AfterSegment, NoDeviceWork, SnapshotEntry, command_key, declared_writes
from .context import CommandContext


class GraphKind(NoDeviceWork):
    command_type: type = DispatchGraph
    dispatch = True

    def bindings(self, cmd: DispatchGraph) -> tuple[Binding, ...]:
        return cmd.bindings

    def may_write(self, cmd: DispatchGraph, read_only: Mapping[str, set[tuple[int, int]]]) -> set[str]:
        return {b.resource_ref for b in cmd.bindings}

    def declared_writes(self, scenario: Scenario, cmd: DispatchGraph) -> list[str]:
        return declared_writes(scenario, cmd.bindings)

    def dispatch_snapshots(self, scenario: Scenario, cmd: DispatchGraph, session_graphs: Mapping[int, Any],
                           size: Callable[[str], int]) -> list[SnapshotEntry]:
        """What each segment writes, right after that segment (intermediates included)."""
        graph = session_graphs.get(cmd.index)
        if graph is None:
            return []
        return [(name, graph.resource(name).snapshot_size, cmd.index, seg.index)
                for seg in graph.segments for name in seg.writes]

    def prepare(self, session: CommandContext, commands: list[DispatchGraph]) -> None:
        assert session.resources is not None and session.factory is not None
        by_key: dict[Hashable, PreparedGraph] = {}
        for cmd in commands:
            key = command_key(cmd)
            if key not in by_key:
                with validation.at(cmd.place):
                    by_key[key] = PreparedGraph.create(session.ctx, session.scenario, cmd, session.resources,
                                                       session.factory, session.raw, timer=session.timer,
                                                       readable_sessions=session.options.readable_graph_sessions,
                                                       load_module=session.module)
            session.graphs[cmd.index] = by_key[key]
            if session.options.profiling:
                session.graph_queries[cmd.index] = session.reserve_queries(2)

    def record(self, session: CommandContext, cb: Any, cmd: DispatchGraph, after_segment: AfterSegment | None) -> None:
        query = session.graph_queries.get(cmd.index)
        if query is not None:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_TOP_OF_PIPE_BIT, session.query_pool, query)
        session.graphs[cmd.index].record(cb, after_segment=after_segment)
        if query is not None:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_BOTTOM_OF_PIPE_BIT, session.query_pool, query + 1)

    def name(self, cmd: DispatchGraph) -> str:
        return cmd.graph_ref

    def timing(self, session: CommandContext, cmd: DispatchGraph) -> tuple[int, str, str] | None:
        query = session.graph_queries.get(cmd.index)
        return None if query is None else (query, cmd.graph_ref, "DataGraphDispatch")
