"""Command kinds: one module per kind of scenario command, each implementing
:class:`~vkcore.commands.base.CommandKind`, and the registry that maps a command to its kind.

Adding a command kind: a module here and one line in :data:`KINDS`.
"""
from __future__ import annotations

from typing import Any, Iterable

from .barrier import BarrierKind
from .base import CommandKind
from .boundary import BoundaryKind
from .compute import ComputeKind, PreparedDispatch
from .fragment import FragmentKind
from .graph import GraphKind
from .optical_flow import OpticalFlowKind
from .spirv_graph import SpirvGraphKind

__all__ = ["KINDS", "CommandKind", "PreparedDispatch", "kind_of", "by_kind"]

KINDS: dict[type, CommandKind] = {kind.command_type: kind for kind in (
    ComputeKind(),
    FragmentKind(),
    GraphKind(),
    SpirvGraphKind(),
    OpticalFlowKind(),
    BarrierKind(),
    BoundaryKind(),
)}


def kind_of(cmd: Any) -> CommandKind:
    """The kind of a scenario command."""
    return KINDS[type(cmd)]


def by_kind(commands: Iterable[Any]) -> list[tuple[CommandKind, list[Any]]]:
    """``commands`` grouped by kind (kinds in registry order, commands in scenario order)."""
    groups: dict[type, list[Any]] = {t: [] for t in KINDS}
    for cmd in commands:
        groups[type(cmd)].append(cmd)
    return [(KINDS[t], cmds) for t, cmds in groups.items() if cmds]
