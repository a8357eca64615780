"""What a command kind may use of the session that runs it: the :class:`CommandContext` protocol.

Command kinds (:mod:`vkcore.commands`) resolve, prepare, record and time their commands through this and
nothing else; :class:`vkcore.exec.session.Session` is the one implementation. A kind that needs more of
the session adds it here, so that what kinds depend on stays written down in one place.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..scenario.model import Scenario, Shader

if TYPE_CHECKING:
    from ..device.context import VulkanContext
    from ..exec.resource_set import ResourceSet
    from ..exec.timing import HostTimer
    from ..shaders.bindings import LayoutBinding
    from ..shaders.compile import SpirvModule
    from ..shaders.pipelines import PipelineFactory


class CommandOptions(Protocol):
    """The session options command kinds read."""

    profiling: bool  # time each command: one prepared object per command, with its timestamp queries
    readable_graph_sessions: bool  # graph session memory host-visible (--session-memory-dump-dir)


class CommandContext(Protocol):
    """The session as command kinds see it. The tables keyed by command index are filled by the kinds
    themselves (``resolve`` fills ``layouts``; ``prepare`` the kind's own table) and read back by them
    when recording and timing."""

    ctx: "VulkanContext"
    scenario: Scenario
    options: CommandOptions
    timer: "HostTimer"
    resources: "ResourceSet | None"  # made between resolve and prepare
    factory: "PipelineFactory | None"  # made between resolve and prepare
    read_only_bindings: dict[str, set[tuple[int, int]]]  # shader uid -> (set, binding) its SPIR-V cannot write
    warned_features: set[tuple[str, str]]  # (shader uid, feature) already said once
    layouts: dict[int, tuple["LayoutBinding", ...]]  # command index -> its resolved bindings
    dispatches: dict[int, Any]  # dispatch_compute's prepared dispatches, by command index
    draws: dict[int, Any]  # dispatch_fragment's prepared draws
    graphs: dict[int, Any]  # dispatch_graph and dispatch_spirv_graph's prepared graphs
    graph_queries: dict[int, int]  # command index -> first of its two timestamp queries
    optical_flows: dict[int, Any]  # dispatch_optical_flow's prepared pipelines
    descriptor_pools: list[Any]  # pools the kinds made: destroyed with the session
    owned: list[Any]  # objects with a destroy() the kinds made: destroyed with the session
    query_pool: Any  # the timestamp query pool (profiling), made after prepare

    def module(self, spec: Shader) -> "SpirvModule":
        """The SPIR-V of shader ``spec``, loaded (GLSL compiled) once."""

    def raw(self, uid: str) -> bytes:
        """The payload of raw_data ``uid`` (push constants), read once."""

    def reserve_queries(self, count: int) -> int:
        """The first of ``count`` timestamp queries for a command (profiling)."""

    def one_time_submit(self, record: Callable[[Any], None]) -> None:
        """Record commands with ``record(cb)``, submit them alone and wait."""
