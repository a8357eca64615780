"""The one table of how large (and how small) every number a user or a file gives vkcap may be, and the
one validator that enforces it: command-line flags (through :func:`number_type`), suite manifests,
tolerance files, suite result files and the pytest plugin's options all call :func:`check_number`.

Guarantee: a number that passes is a real ``int`` (never a bool, never a float for a whole-number key)
or a finite ``float``, inside its key's range. Anything else (NaN, infinity, a huge integer, a negative
count, a string where a number goes) is a :class:`~vkcore.errors.UsageError` (exit 2) naming the file,
when there is one, and the key: ``FILE: KEY: must be WANTED, got VALUE``.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .errors import UsageError


@dataclass(frozen=True)
class Bound:
    """A key's range: ``low``/``high`` inclusive unless ``*_open``; ``whole``: integers only."""

    whole: bool
    low: float
    high: float
    wanted: str  # what the message says the value must be
    reason: str  # why the range is what it is (documentation; not shown)
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: int | float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


WEEK_S = 7 * 24 * 3600
FRAME_LIMIT = 2**31  # frames are numbered by 32-bit signed integers in the scenario format

#: Every bounded number, by key. A key names the same quantity wherever it is given (flag, manifest,
#: file), so one reason holds for all of them.
BOUNDS: dict[str, Bound] = {
    "atol": Bound(False, 0.0, sys.float_info.max, "a finite number >= 0",
                  "an absolute tolerance; NaN or infinity would let every difference pass"),
    "rtol": Bound(False, 0.0, sys.float_info.max, "a finite number >= 0",
                  "a relative tolerance; NaN or infinity would let every difference pass"),
    "ulp": Bound(True, 0, 2**63, "a whole number >= 0 and below 2**63",
                 "ULP distances of float64 reach 2**63 and are held as signed 64-bit integers", high_open=True),
    "timeout": Bound(False, 0.0, WEEK_S, f"a number of seconds > 0 and at most {WEEK_S} (7 days)",
                     "a frame's time limit; NaN never expires, and a frame running for a week is a hang", low_open=True),
    "repeat": Bound(True, 1, 1_000_000, "a whole number from 1 to 1000000",
                    "runs of the whole scenario (the reference runner takes any count; a million is hours of work)"),
    "jobs": Bound(True, 1, 256, "a whole number from 1 to 256",
                  "worker processes, each with its own Vulkan device: more exhausts memory, not the suite"),
    "retries": Bound(True, 0, 10, "a whole number from 0 to 10",
                     "replays of a failing trace; more hides a failure instead of finding a flaky one"),
    "shard_count": Bound(True, 1, 10_000, "a whole number from 1 to 10000",
                         "shards of a suite; the planner holds one load per shard"),
    "ray_cache_limit": Bound(False, 0.0, 1 << 20, "a number of GiB > 0 and at most 1048576 (1 PiB)",
                             "a node's trace cache size", low_open=True),
    "checkpoint_every": Bound(True, 0, FRAME_LIMIT, "a whole number >= 0 and below 2**31",
                              "frames between a recording's checkpoints (0: none); a frame number's range",
                              high_open=True),
    "compression_threads": Bound(True, -1, 256, "-1 (one per core), 0 (none) or a whole number up to 256",
                                 "zstd worker threads of a recording; more exhausts memory, not the compressor"),
    "record_threads": Bound(True, 0, 256, "0 (one per core) or a whole number up to 256",
                            "threads of a recording's snapshot work; more only adds threads that wait"),
    "top": Bound(True, 1, 1_000_000, "a whole number from 1 to 1000000",
                 "offending elements listed per comparison; each is a report row"),
    "frame": Bound(True, 0, FRAME_LIMIT, "a whole number >= 0 and below 2**31",
                   "a frame number (the first divergent frame of an expectation or a result)", high_open=True),
    "frames": Bound(True, 0, FRAME_LIMIT, "a whole number >= 0 and below 2**31", "frames a replay compared",
                    high_open=True),
    "seconds": Bound(False, 0.0, 1e9, "a finite number of seconds >= 0 and at most 1e9",
                     "how long a replay took (a result file's figure)"),
    "device_index": Bound(True, 0, 1 << 16, "a whole number >= 0 and below 65536",
                          "a Vulkan device's index on its host (a result file's device_index)", high_open=True),
    "attempts": Bound(True, 1, 11, "a whole number from 1 to 11", "replays of a trace: 1 plus at most 10 retries"),
    "count": Bound(True, 0, 2**63, "a whole number >= 0 and below 2**63",
                   "a count of elements (a result file's beyond_tolerance, max_ulp)", high_open=True),
    "magnitude": Bound(False, 0.0, sys.float_info.max, "a finite number >= 0",
                       "a difference between two values (a result file's max_abs; an infinite one is reported as 0)"),
}


def check_number(key: str, value: Any, *, file: str | None = None, place: str | None = None) -> int | float:
    """``value`` as the number ``key`` of :data:`BOUNDS` allows (an ``int`` for a whole-number key, a
    finite ``float`` otherwise); a :class:`UsageError` naming ``file`` and ``place`` (default: ``key``)
    when it is not a number, not finite, not whole where it must be, or out of range."""
    bound = BOUNDS[key]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or (bound.whole and not isinstance(value, int)):
        return _refuse(bound, value, file, place or key)
    if isinstance(value, float) and not math.isfinite(value):
        return _refuse(bound, value, file, place or key)
    if not bound.holds(value):  # compared exactly: an int too large for a float is still judged right
        return _refuse(bound, value, file, place or key)
    return int(value) if bound.whole else float(value)


def _refuse(bound: Bound, value: Any, file: str | None, place: str) -> Any:
    shown = repr(value)
    if len(shown) > 40:  # a 4000-digit integer is no help in a one-line message
        shown = shown[:37] + "..."
    raise UsageError(f"must be {bound.wanted}, got {shown}", file=file, place=place)


def parse_number(key: str, text: str, place: str) -> int | float:
    """The number of ``key`` spelled ``text`` on a command line (:func:`check_number` on it)."""
    bound = BOUNDS[key]
    try:
        value: int | float = int(text, 10) if bound.whole else float(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UsageError(f"must be {bound.wanted}, got {shown!r}", place=place) from None
    return check_number(key, value, place=place)


def number_type(key: str, flag: str) -> Callable[[str], int | float]:
    """An argparse ``type=`` for ``flag`` holding the number ``key``: its error is the one-line
    :class:`UsageError` of :func:`check_number` (argparse lets it through: it is no ValueError)."""

    def convert(text: str) -> int | float:
        return parse_number(key, text, flag)

    convert.__name__ = key  # argparse names the type in some of its own messages
    return convert
