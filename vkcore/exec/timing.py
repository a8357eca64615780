"""Host timings for ``--perf-counters-dump-path``: named spans by phase, and per-pass counters.

A run's frame loop counts a few host times per pass ("Submit Commands. Iteration: 7", as the
reference runner names them). They are kept as numbers in arrays and named only when the dump is
written: a run of 10,000 passes (``--repeat``) held 40,000 named entries otherwise, about 6 MB made at
its very end.
"""
from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Iterator, Union


class PassTimes:
    """Seconds per pass for the counters ``names``, passes numbered from ``first``. Each counter may
    be added to by one thread of its own."""

    def __init__(self, names: tuple[str, ...], first: int = 0) -> None:
        self.names = names
        self.first = first
        self._seconds = {name: array("d") for name in names}

    def add(self, pass_index: int, name: str, seconds: float) -> None:
        values, i = self._seconds[name], pass_index - self.first
        if i >= len(values):
            values.extend([0.0] * (i + 1 - len(values)))
        values[i] += seconds

    def counters(self) -> Iterator[tuple[str, int]]:
        """(``"{name}. Iteration: {pass + 1}"``, microseconds) for every pass any counter reached, pass
        by pass, in the order of ``names``."""
        passes = max((len(v) for v in self._seconds.values()), default=0)
        for i in range(passes):
            for name in self.names:
                values = self._seconds[name]
                yield f"{name}. Iteration: {self.first + i + 1}", int(round((values[i] if i < len(values) else 0.0) * 1e6))


@dataclass
class HostTimer:
    """Named host timings in microseconds, grouped by phase, in the order they were added."""

    phases: dict[str, list[Union[tuple[str, int], PassTimes]]] = field(default_factory=dict)

    def add(self, phase: str, name: str, seconds: float) -> None:
        self.phases.setdefault(phase, []).append((name, int(round(seconds * 1e6))))

    def add_passes(self, phase: str, times: PassTimes) -> None:
        """Per-pass counters, named when read (:meth:`counters`)."""
        self.phases.setdefault(phase, []).append(times)

    def counters(self, phase: str) -> Iterator[tuple[str, int]]:
        """(name, microseconds) of every timing of ``phase``, in order."""
        for entry in self.phases.get(phase, []):
            if isinstance(entry, PassTimes):
                yield from entry.counters()
            else:
                yield entry

    def measure(self, phase: str, name: str) -> "_Span":
        return _Span(self, phase, name)


class _Span:
    def __init__(self, timer: HostTimer, phase: str, name: str) -> None:
        self.timer, self.phase, self.name = timer, phase, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.add(self.phase, self.name, time.perf_counter() - self.t0)
