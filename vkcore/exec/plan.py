"""From a scenario to a plan: the commands grouped into frames, each ending at a boundary.

A frame is the run of commands up to and including a ``mark_boundary``; commands after the last
boundary form a final frame without one. A scenario with no boundary is a single frame that
captures every resource a command can write.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..commands import kind_of
from ..resources.kinds import data_resources
from ..scenario.model import AnyCommand, MarkBoundary, Scenario


@dataclass(frozen=True)
class Frame:
    """One submission: its commands (without the boundary), the boundary, and what it captures."""

    index: int
    commands: tuple[AnyCommand, ...]
    boundary: MarkBoundary | None
    capture: tuple[str, ...]

    @property
    def frame_id(self) -> int:
        """The boundary's ``frame_id`` where the scenario gives one, else the frame's position (as the
        reference runner numbers frames)."""
        if self.boundary is not None and self.boundary.frame_id is not None:
            return self.boundary.frame_id
        return self.index

    @property
    def dispatches(self) -> tuple[AnyCommand, ...]:
        return tuple(c for c in self.commands if kind_of(c).dispatch)


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    frames: tuple[Frame, ...]

    @property
    def dispatch_count(self) -> int:
        return sum(len(f.dispatches) for f in self.frames)


def written_resources(scenario: Scenario) -> tuple[str, ...]:
    """Uids of the data resources some dispatch binds with write access, in resource order."""
    bound = {b.resource_ref for cmd in scenario.commands for b in kind_of(cmd).bindings(cmd)}
    return tuple(r.uid for r in data_resources(scenario.resources) if r.uid in bound and r.shader_access != "readonly")


def unwritable_resources(scenario: Scenario, read_only: Mapping[str, set[tuple[int, int]]]) -> frozenset[str]:
    """Uids of the data resources no command can write, whatever their declared access: every
    compute dispatch binding one does so through a descriptor its shader cannot write (``read_only``
    maps a shader uid to those (set, binding) pairs, from SPIR-V reflection; a shader missing from it
    counts as writing all it binds), no graph binds it, and it shares memory with no other resource
    (an alias may be written under another name). Their content is the initial one at every frame."""
    shared = {r.uid for r in data_resources(scenario.resources) if r.memory_group}
    written: set[str] = set()
    for cmd in scenario.commands:
        written |= kind_of(cmd).may_write(cmd, read_only)
    return frozenset(r.uid for r in data_resources(scenario.resources) if r.uid not in written and r.uid not in shared)


def make_plan(scenario: Scenario, *, capture_all: bool = False) -> Plan:
    """Group commands into frames. A boundary captures the resources it names; ``capture_all`` adds
    every resource a command can write (so it captures a superset of what the boundaries name)."""
    writable = written_resources(scenario)
    frames: list[Frame] = []
    pending: list[AnyCommand] = []
    for cmd in scenario.commands:
        if kind_of(cmd).boundary:
            capture = (*cmd.resources, *writable) if capture_all else cmd.resources  # type: ignore[union-attr]
            frames.append(Frame(len(frames), tuple(pending), cmd, tuple(dict.fromkeys(capture))))  # type: ignore[arg-type]
            pending = []
        else:
            pending.append(cmd)
    if pending or not frames:
        frames.append(Frame(len(frames), tuple(pending), None, writable))
    return Plan(scenario, tuple(frames))
