"""Command kinds: one module per kind of scenario command, each implementing
:class:`~vkcore.commands.base.CommandKind`, and the registry that maps a command to its kind.

Adding a command kind: a module here and one line in :data:`KINDS`. A kind that brings a layer of its
own (graphics pipelines, data graphs, optical flow) is registered by module and class name: it is
imported the first time a scenario has such a command, so that scenarios without one do not pay for
importing it (a third of ``vkcap replay``'s start-up for the four of them).
"""
from __future__ import annotations

import importlib
import threading
from typing import Any, Iterable, Iterator, Mapping

from ..scenario.model import DispatchFragment, DispatchGraph, DispatchOpticalFlow, DispatchSpirvGraph
from .barrier import BarrierKind
from .base import CommandKind
from .boundary import BoundaryKind
from .compute import ComputeKind, PreparedDispatch

__all__ = ["KINDS", "CommandKind", "KindRegistry", "PreparedDispatch", "kind_of", "by_kind"]


class KindRegistry(Mapping[type, CommandKind]):
    """Command type -> its kind, in the order given (the order a session prepares them). An entry is a
    kind, or ``(command type, module of this package, class)`` of a kind made the first time it is
    looked up. Thread-safe: a kind is made once."""

    def __init__(self, *entries: CommandKind | tuple[type, str, str]) -> None:
        self._entries: dict[type, CommandKind | tuple[str, str]] = {}
        for entry in entries:
            if isinstance(entry, tuple):
                command_type, module, name = entry
                self._entries[command_type] = (module, name)
            else:
                self._entries[entry.command_type] = entry
        self._lock = threading.RLock()  # a kind module that looked up a kind while imported would not deadlock

    def __getitem__(self, command_type: type) -> CommandKind:
        entry = self._entries[command_type]
        if isinstance(entry, tuple):
            with self._lock:
                entry = self._entries[command_type]
                if isinstance(entry, tuple):
                    module, name = entry
                    entry = getattr(importlib.import_module(module, __name__), name)()
                    assert entry.command_type is command_type, (module, name)
                    self._entries[command_type] = entry
        return entry

    def __iter__(self) -> Iterator[type]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


KINDS = KindRegistry(
    ComputeKind(),
    (DispatchFragment, ".fragment", "FragmentKind"),
    (DispatchGraph, ".graph", "GraphKind"),
    (DispatchSpirvGraph, ".spirv_graph", "SpirvGraphKind"),
    (DispatchOpticalFlow, ".optical_flow", "OpticalFlowKind"),
    BarrierKind(),
    BoundaryKind(),
)


def kind_of(cmd: Any) -> CommandKind:
    """The kind of a scenario command."""
    return KINDS[type(cmd)]


def by_kind(commands: Iterable[Any]) -> list[tuple[CommandKind, list[Any]]]:
    """``commands`` grouped by kind (kinds in registry order, commands in scenario order)."""
    groups: dict[type, list[Any]] = {t: [] for t in KINDS}
    for cmd in commands:
        groups[type(cmd)].append(cmd)
    return [(KINDS[t], cmds) for t, cmds in groups.items() if cmds]
