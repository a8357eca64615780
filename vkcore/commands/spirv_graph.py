"""``dispatch_spirv_graph``: a data graph from a SPIR-V module, run by the graph machinery as the
one-segment model :mod:`vkcore.graphs.spirv_graph` describes; otherwise as ``dispatch_graph``."""
from __future__ import annotations

from typing import Any

from ..device import validation
from ..errors import ScenarioError
from ..graphs.dispatch import PreparedGraph
from ..graphs.spirv_graph import as_graph_command, model_of
from ..graphs.vgf import VgfError
from ..resources.kinds import DATA_GRAPH
from ..scenario.model import DispatchSpirvGraph, Shader
from .graph import GraphKind
from .context import CommandContext


class SpirvGraphKind(GraphKind):
    command_type: type = DispatchSpirvGraph
    features = frozenset({DATA_GRAPH})

    def prepare(self, session: CommandContext, commands: list[Any]) -> None:
        assert session.resources is not None and session.factory is not None
        for cmd in commands:
            shader = session.scenario.by_uid[cmd.graph_ref]
            assert isinstance(shader, Shader)
            model = model_of(session.scenario, cmd, session.module(shader))
            try:
                with validation.at(cmd.place):
                    session.graphs[cmd.index] = PreparedGraph.create(
                        session.ctx, session.scenario, as_graph_command(cmd), session.resources, session.factory,
                        session.raw, timer=session.timer, model=model,
                        readable_sessions=session.options.readable_graph_sessions, load_module=session.module)
            except VgfError as exc:  # told about the command, not about a VGF file it never had
                problem = exc.message.split(": ", 1)[-1] if "does not match its module" in exc.message else exc.message
                raise ScenarioError(f"the SPIR-V graph '{shader.uid}' does not match this command: {problem}",
                                    file=session.scenario.path, place=cmd.place) from None
            if session.options.profiling:
                session.graph_queries[cmd.index] = session.reserve_queries(2)

    def timing(self, session: CommandContext, cmd: Any) -> tuple[int, str, str] | None:
        query = session.graph_queries.get(cmd.index)
        return None if query is None else (query, cmd.graph_ref, "DataGraphDispatch")
