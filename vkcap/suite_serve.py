"""One suite replay answered: the replay path of ``vkcap suite worker`` processes and of fleet actors
(:mod:`replay.fleet`), so a trace is judged on the same answer wherever it ran.

A request is a dict: ``trace`` (a path readable here), ``progress`` (the progress file, see
:class:`replay.progress_file.ProgressFile`), ``flags`` (the trace's own tolerance flags), ``page`` (where to
write the replay's HTML page, or ``""``). The answer is a JSON-able dict: ``outcome`` (identical | within
| diverged | error), ``device``, ``frames``, ``first_divergence``, ``beyond_tolerance``, ``max_ulp``, ``resources`` (each resource's verdict,
:func:`replay.verdicts.resource_verdicts`) and,
for a divergence, ``detail`` (the first diverged resource, as ``vkcap replay`` prints it); for an error,
only ``outcome`` and ``detail``. A driver crash is no answer at all: it kills the process, and the
parent (the suite's :class:`replay.suite.Worker`, the fleet's driver) reports it.
"""
from __future__ import annotations

import argparse
from typing import Any

from vkcore.errors import VkcapError


def device_hello(flags: list[str]) -> dict[str, Any]:
    """The device replays given ``flags`` run on (their ``--device``, else the default): ``device`` and
    ``driver`` (the version expectations are judged by), or ``device: ""`` and ``error``."""
    from replay.suite import driver_of
    from vkcore.device.context import choose_device, list_devices

    selector = flags[flags.index("--device") + 1] if "--device" in flags else None
    try:
        chosen = choose_device(list_devices(), selector)
        return {"device": chosen.name, "driver": driver_of(chosen.fingerprint()), "device_uuid": chosen.device_uuid,
                "device_index": chosen.index, "pci_bus": chosen.pci_bus}
    except VkcapError as exc:
        return {"device": "", "error": str(exc)}


def answer(parser: argparse.ArgumentParser, flags: list[str], request: dict[str, Any],
           contexts: dict[Any, Any]) -> dict[str, Any]:
    """Replay ``request["trace"]`` through :func:`replay.replayer.replay` (the path of ``vkcap replay``)
    with the suite's ``flags`` and the trace's own, on the Vulkan devices in ``contexts`` (opened by
    the first replay that needs each, kept for the next ones); the answer described above."""
    from replay.reading import effective_policy
    from replay.replayer import replay
    from replay.report import comparison_line
    from replay.results import WITHIN
    from replay.verdicts import resource_verdicts

    from .commands_trace import html_scratch, report_outputs
    from .compare_flags import replay_options

    try:
        page = ["--html", request["page"]] if request.get("page") else []
        replay_args = parser.parse_args(["replay", request["trace"], *flags, *request.get("flags", []),
                                         "--progress-file", request["progress"], *page])
        replay_args.argv = ["vkcap", "replay", request["trace"], *flags, *request.get("flags", [])]  # the page's command
        with html_scratch(replay_args):  # the page's pictures: in a folder removed once it is written
            options = replay_options(replay_args)
            report = replay(options, contexts=contexts)
            if page:  # first: the comparisons then name no picture of the scratch folder
                report_outputs(replay_args, "replay", {}, report.frames,
                               fingerprints=[("recorded", report.recorded_device), ("live", report.device)])
            comparisons = [c for f in report.frames for c in [*f.comparisons, *(c for _, c in f.dispatches)]]
            outcome = ("diverged" if report.diverged else
                       "within" if any(c.status == WITHIN for c in comparisons) else "identical")
            first = report.first_divergence
            result: dict[str, Any] = {
                "outcome": outcome, "device": report.device.get("device_name", ""), "frames": len(report.frames),
                "first_divergence": None if first is None else first.seq,
                "beyond_tolerance": sum(c.beyond_tolerance for c in comparisons),
                "max_ulp": max((c.max_ulp for c in comparisons), default=0),
                "resources": resource_verdicts(report.frames, effective_policy(options))}
            if first is not None:  # the first diverged resource, as replay prints it
                bad = next(c for c in [*first.comparisons, *(c for _, c in first.dispatches)] if c.diverged)
                result["detail"] = f"frame {first.seq}: {comparison_line(bad)}"
        return result
    except VkcapError as exc:
        return {"outcome": "error", "detail": str(exc)}
