"""``--tolerance auto``: learn per-resource tolerances from the current device's own nondeterminism.

The requested frames are replayed ``runs`` times. A resource whose live results differ between these
identical runs is *nondeterministic*; its tolerance becomes ``SAFETY`` times the largest spread seen
(absolute error and ULP distance). Deterministic resources keep the tolerance given on the command line.
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace

from capture.trace import Trace

from .compare import compare
from .options import ReplayOptions
from .replayer import LiveSnapshot, replay_trace, resource_dtype
from .results import Comparison, Tolerance

RUNS = 3
SAFETY = 2.0


class _Collector:
    """Auto's judge (:class:`replay.replayer.Judge`): keeps the first run's live bytes; later runs are
    compared with them instead of the recording, and the widest spread of each resource is kept."""

    def __init__(self, trace: Trace, options: ReplayOptions) -> None:
        self.trace = trace
        self.options = options
        self.baseline: dict[str, bytes] = {}
        self.spreads: dict[str, Comparison] = {}

    def judge(self, shot: LiveSnapshot) -> Comparison:
        uid, live = shot.uid, shot.live
        key = shot.what  # names the frame, the command (dispatch level) and the resource
        dtype = resource_dtype(self.trace, uid, self.options)
        if key not in self.baseline:
            self.baseline[key] = bytes(live)
            return compare(uid, live, live, dtype=dtype)
        c = compare(uid, self.baseline[key], live, dtype=dtype)
        if c.differing:
            worst = self.spreads.get(uid)
            if worst is None or (c.max_abs, c.max_ulp) > (worst.max_abs, worst.max_ulp):
                self.spreads[uid] = c
        return c


def auto_tolerances(options: ReplayOptions, log: logging.Logger, runs: int = RUNS, *,
                    opened: Trace | None = None) -> ReplayOptions:
    """Replay ``runs`` times (the trace ``opened``, when the caller has it open already) and return
    options whose tolerances cover the observed nondeterminism."""
    # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
    import trio

    with Trace.reuse_or_open(options.trace, opened) as trace:
        collector = _Collector(trace, options)
        for _ in range(runs):
            trio.run(lambda: replay_trace(trace, options, judge=collector))
    policy = options.tolerances
    per = dict(policy.per_resource)
    for uid, c in sorted(collector.spreads.items()):
        base = policy.for_resource(uid, c.dtype)
        # A relative error is infinite where one run had 0: that says nothing about scale, and an
        # infinite rtol would accept anything. atol covers those elements.
        rel = c.max_rel * SAFETY if math.isfinite(c.max_rel) else 0.0
        learned = Tolerance(atol=max(base.atol, c.max_abs * SAFETY), rtol=max(base.rtol, rel), ulp=max(base.ulp, int(c.max_ulp * SAFETY)))
        per[uid] = learned
        log.warning(
            "nondeterministic: %s varies between identical runs (max abs %.6g, max %d ULP); tolerance set to atol %.6g, rtol %.3g, ulp %d",
            uid, c.max_abs, c.max_ulp, learned.atol, learned.rtol, learned.ulp,
        )
    if not collector.spreads:
        log.info("tolerance auto: every resource was deterministic over %d runs", runs)
    return replace(options, tolerances=replace(policy, per_resource=per))
