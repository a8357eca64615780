"""The protocol every command kind implements.

A scenario command (``dispatch_compute``, ``dispatch_graph``, ``dispatch_barrier``, ``mark_boundary``,
...) is handled by one :class:`CommandKind`, registered in :data:`vkcore.commands.KINDS`. The session,
the planner, the recorder and the replayer ask the kind; none of them branches on command types. Adding
a command kind is one new module here plus its registry line.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Hashable, Mapping, Protocol

from ..scenario.model import Binding, Scenario
from .context import CommandContext

# A snapshot taken right after a command with --dispatch-level: (uid, size, command index[, segment]).
SnapshotEntry = tuple[Any, ...]
# Called after each segment of a command that has segments (graphs): (command buffer, segment index).
AfterSegment = Callable[[Any, int], None]


class CommandKind(Protocol):
    """What vkcap needs to know of one kind of command; ``cmd`` is always of :attr:`command_type`."""

    command_type: type
    dispatch: bool  # work on the device: counted, timed when profiling, snapshotted after with --dispatch-level
    boundary: bool  # ends a frame
    features: frozenset[str]  # the optional device features its commands need (vkcore.resources.kinds.FEATURES)

    def bindings(self, cmd: Any) -> tuple[Binding, ...]:
        """The scenario bindings the command binds (what checkpoints keep)."""

    def shaders(self, cmd: Any) -> tuple[str, ...]:
        """Uids of the shader resources the command runs, in pipeline order."""

    def may_write(self, cmd: Any, read_only: Mapping[str, set[tuple[int, int]]]) -> set[str]:
        """Uids the command can write; ``read_only`` maps a shader uid to the (set, binding) pairs its
        SPIR-V cannot write through."""

    def declared_writes(self, scenario: Scenario, cmd: Any) -> list[str]:
        """Uids bound with an access other than ``readonly``: what a dispatch-level snapshot takes."""

    def dispatch_snapshots(self, scenario: Scenario, cmd: Any, session_graphs: Mapping[int, Any],
                           size: Callable[[str], int]) -> list[SnapshotEntry]:
        """The snapshots ``--dispatch-level`` takes right after the command."""

    def resolve(self, session: CommandContext, commands: list[Any]) -> None:
        """Before any resource exists: what the commands need of resources (the session's layouts)."""

    def prepare(self, session: CommandContext, commands: list[Any]) -> None:
        """Build pipelines, descriptor sets and whatever recording needs, for all commands of the kind."""

    def record(self, session: CommandContext, cb: Any, cmd: Any, after_segment: AfterSegment | None) -> None:
        """Record the command into ``cb``."""

    def name(self, cmd: Any) -> str:
        """What reports and debug labels call the command besides its JSON path: its shader, graph or pass
        ("" for a command without one)."""

    def timing(self, session: CommandContext, cmd: Any) -> tuple[int, str, str] | None:
        """With profiling: (first of its two timestamp queries, report name, the reference's kind name)."""

    def limit_problems(self, limits: Any, cmd: Any) -> list[tuple[str, str]]:
        """(JSON path, what is wrong) for each device limit (``VkPhysicalDeviceLimits``) the command exceeds."""


class NoDeviceWork:
    """The defaults of a kind that binds nothing and builds nothing."""

    dispatch = False
    boundary = False
    features: frozenset[str] = frozenset()

    def bindings(self, cmd: Any) -> tuple[Binding, ...]:
        return ()

    def shaders(self, cmd: Any) -> tuple[str, ...]:
        return ()

    def may_write(self, cmd: Any, read_only: Mapping[str, set[tuple[int, int]]]) -> set[str]:
        return set()

    def declared_writes(self, scenario: Scenario, cmd: Any) -> list[str]:
        return []

    def dispatch_snapshots(self, scenario: Scenario, cmd: Any, session_graphs: Mapping[int, Any],
                           size: Callable[[str], int]) -> list[SnapshotEntry]:
        return []

    def resolve(self, session: CommandContext, commands: list[Any]) -> None:
        pass

    def prepare(self, session: CommandContext, commands: list[Any]) -> None:
        pass

    def record(self, session: CommandContext, cb: Any, cmd: Any, after_segment: AfterSegment | None) -> None:
        pass

    def name(self, cmd: Any) -> str:
        return ""

    def timing(self, session: CommandContext, cmd: Any) -> tuple[int, str, str] | None:
        return None

    def limit_problems(self, limits: Any, cmd: Any) -> list[tuple[str, str]]:
        return []


def command_key(cmd: Any) -> Hashable:
    """A command without its position in the scenario: equal keys record equal GPU work."""
    return dataclasses.replace(cmd, index=-1)


def declared_writes(scenario: Scenario, bindings: tuple[Binding, ...]) -> list[str]:
    """Uids of ``bindings`` whose resources are declared with an access other than ``readonly``."""
    out: list[str] = []
    for b in bindings:
        r = scenario.by_uid[b.resource_ref]  # validated: a resource that holds data, so it has a shader_access
        if r.shader_access != "readonly" and b.resource_ref not in out:  # type: ignore[union-attr]
            out.append(b.resource_ref)
    return out
