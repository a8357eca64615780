"""From a scenario to a plan: the commands grouped into frames, each ending at a boundary.

A frame is the run of commands up to and including a ``mark_boundary``; commands after the last
boundary form a final frame without one. A scenario with no boundary is a single frame that
captures every resource a command can write.
"""
from __future__ import annotations

from dataclasses import dataclass

from .scenario import (
    AnyCommand,
    Buffer,
    DispatchBarrier,
    DispatchCompute,
    DispatchGraph,
    Image,
    MarkBoundary,
    Scenario,
    Tensor,
)

DATA_KINDS = (Buffer, Image, Tensor)


@dataclass(frozen=True)
class Frame:
    """One submission: its commands (without the boundary), the boundary, and what it captures."""

    index: int
    commands: tuple[AnyCommand, ...]
    boundary: MarkBoundary | None
    capture: tuple[str, ...]

    @property
    def frame_id(self) -> int:
        return self.boundary.frame_id if self.boundary is not None else self.index

    @property
    def dispatches(self) -> tuple[AnyCommand, ...]:
        return tuple(c for c in self.commands if isinstance(c, (DispatchCompute, DispatchGraph)))


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    frames: tuple[Frame, ...]

    @property
    def dispatch_count(self) -> int:
        return sum(len(f.dispatches) for f in self.frames)


def written_resources(scenario: Scenario) -> tuple[str, ...]:
    """Uids of the data resources some dispatch binds with write access, in resource order."""
    bound: set[str] = set()
    for cmd in scenario.commands:
        if isinstance(cmd, (DispatchCompute, DispatchGraph)):
            bound.update(b.resource_ref for b in cmd.bindings)
    return tuple(
        r.uid
        for r in scenario.resources
        if isinstance(r, DATA_KINDS) and r.uid in bound and getattr(r, "shader_access", "readwrite") != "readonly"
    )


def make_plan(scenario: Scenario, *, capture_all: bool = False) -> Plan:
    """Group commands into frames. ``capture_all`` captures every written resource at every boundary."""
    writable = written_resources(scenario)
    frames: list[Frame] = []
    pending: list[AnyCommand] = []
    for cmd in scenario.commands:
        if isinstance(cmd, MarkBoundary):
            capture = writable if capture_all else cmd.resources
            frames.append(Frame(len(frames), tuple(pending), cmd, tuple(dict.fromkeys(capture))))
            pending = []
        elif isinstance(cmd, (DispatchCompute, DispatchGraph, DispatchBarrier)):
            pending.append(cmd)
    if pending or not frames:
        frames.append(Frame(len(frames), tuple(pending), None, writable))
    return Plan(scenario, tuple(frames))
