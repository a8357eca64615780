"""A process that replays for another: the one handler (:func:`handle`) that a suite worker's loop
(:func:`serve`, ``vkcap suite worker``) and a fleet's Ray actor (:mod:`replay.fleet_node`) both call,
with the messages of :mod:`replay.worker_protocol`, so that a trace is judged on the same answer wherever
it ran; and :class:`ProbeReplays`, the answers of an isolated bisection's probe child
(:mod:`vkcap.replay_child`) to its :class:`~replay.worker_protocol.ProbeRequest`.

A :class:`~replay.worker_protocol.ReplayRequest` is replayed through :func:`replay.replayer.replay` (the
path of ``vkcap replay``) on the Vulkan devices kept in ``contexts`` (opened by the first replay that
needs each, kept for the next ones). The answer is :class:`~replay.worker_protocol.Done` with a JSON-able
result: ``outcome`` (identical | within | diverged), ``device``, ``frames``, ``first_divergence``,
``beyond_tolerance``, ``max_ulp``, ``resources`` (each resource's verdict,
:func:`replay.verdicts.resource_verdicts`) and, for a divergence, ``detail`` (the first diverged
resource, as ``vkcap replay`` prints it); or :class:`~replay.worker_protocol.Failed` with the replay's
own error. A driver crash is no answer at all: it kills the process, and the parent reports it.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from vkcore.device.context import choose_device, list_devices
from vkcore.device.driver import use_driver
from vkcore.errors import VkcapError

from .options import ReplayOptions
from .results import WITHIN
from .tolerances import describe_tolerance
from .worker_protocol import (Done, Failed, Hello, ProbeRequest, Probed, ProtocolError, ReplayRequest, decode,
                              encode)


def device_hello(selector: str | None) -> Hello:
    """The device replays given ``--device selector`` run on (else the default): its name and the
    driver version expectations are judged by; ``error`` when there is none."""
    # lazy: a replay's isolated child imports this module, not replay.suite
    from .suite import driver_of

    try:
        chosen = choose_device(list_devices(), selector)
        return Hello(device=chosen.name, driver=driver_of(chosen.fingerprint()), device_uuid=chosen.device_uuid,
                     device_index=chosen.index, pci_bus=chosen.pci_bus)
    except VkcapError as exc:
        return Hello(error=str(exc))


def handle(request: ReplayRequest, contexts: dict[Any, Any]) -> Done | Failed:
    """One replay answered (see the module docstring); an error no check foresaw (a RecursionError from
    a hostile trace) is the trace's ``Failed``, with its message, never a crash of the worker; so are
    options that do not read back (:class:`~replay.worker_protocol.ProtocolError`)."""
    try:
        options = ReplayOptions.from_dict(request.options)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return Failed(f"a replay request's options do not read back: {type(exc).__name__}: {exc}")
    try:
        return Done(_replay(options, request, contexts))
    except VkcapError as exc:
        return Failed(str(exc), exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - bad input no check foresaw: the trace's error, not a crash
        return Failed(f"{options.trace}: internal error: {type(exc).__name__}: {exc}")


def _replay(options: ReplayOptions, request: ReplayRequest, contexts: dict[Any, Any]) -> dict[str, Any]:
    # lazy: a replay's isolated child imports this module, not replay.page_scratch
    from .page_scratch import scratch_folder

    if not request.page:
        return replay_answer(options, contexts)
    if options.heatmap_dir is not None:
        return replay_answer(replace(options, value_maps=True), contexts, request)
    with scratch_folder() as scratch:  # the page's pictures: in a folder removed once it is written
        return replay_answer(replace(options, value_maps=True, heatmap_dir=scratch), contexts, request, scratch)


def replay_answer(options: ReplayOptions, contexts: dict[Any, Any], page: ReplayRequest | None = None,
                  scratch: Path | None = None) -> dict[str, Any]:
    """Replay ``options`` and judge it (the result of :class:`Done`); with ``page``, write its page first
    (the comparisons then name no picture of the ``scratch`` folder)."""
    # lazy: loaded while the Vulkan driver starts in its thread (a replay's isolated child; vkcap/vulkan_start.py)
    from .reading import effective_policy
    from .replayer import replay
    from .report import comparison_line
    # lazy: a replay's isolated child imports this module, not replay.verdicts
    from .verdicts import resource_verdicts

    report = replay(options, contexts=contexts)
    if page is not None:
        write_page(page, options, report, scratch)
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


def write_page(request: ReplayRequest, options: ReplayOptions, report: Any, scratch: Path | None) -> None:
    """The replay's HTML page at ``request.page``, as ``vkcap replay --html`` writes it."""
    # lazy: vkcap suite worker imports this module, not replay.html (with jinja2, markupsafe)
    from .html import write_html
    from .page_scratch import forget_scratch

    replaced = [(f"shader {uid}", str(path)) for uid, path in options.replace_shaders]
    replaced += [("driver (ICD)", str(options.icd))] if options.icd is not None else []
    write_html(Path(request.page), title=f"vkcap replay: {options.trace}",
               fingerprints=[("recorded", report.recorded_device), ("live", report.device)],
               tolerance=describe_tolerance(options.tolerances), frames=report.frames, crashed=None, bisect=None,
               command_line=request.command_line, replaced=replaced)
    if scratch is not None:
        forget_scratch(report.frames, {}, scratch)


def serve(selector: str | None, requests: IO[str], answers: IO[str]) -> int:
    """The worker's loop: say :class:`Hello` (the device, first: expectations are judged by it, crashes
    included), then answer each request line of ``requests`` with one line on ``answers`` (a line that is
    no request: :class:`Failed`, saying why in one line). The Vulkan devices the replays open are kept
    for the next requests."""
    answers.write(encode(device_hello(selector)))
    answers.flush()
    contexts: dict[Any, Any] = {}  # the worker's devices, kept across requests
    try:
        for line in requests:
            try:
                request = decode(line, ReplayRequest)
            except ProtocolError as exc:
                answers.write(encode(Failed(str(exc))))
            else:
                answers.write(encode(handle(request, contexts)))
            answers.flush()
        return 0
    finally:
        for ctx in contexts.values():
            ctx.close()


class ProbeReplays:
    """A probe child's replays: each :class:`~replay.worker_protocol.ProbeRequest` replayed in one
    session kept open for the requests of equal options (the trace opened and its pipelines made once),
    stopping at the first divergence. Errors are raised (the caller answers them); :meth:`close` ends
    the session."""

    def __init__(self) -> None:
        self._options: dict[str, Any] | None = None
        self._open = contextlib.ExitStack()

    def answer(self, request: ProbeRequest) -> Probed:
        # lazy: loaded while the Vulkan driver starts in its thread (a replay's isolated child; vkcap/vulkan_start.py)
        import trio

        from .replayer import target_frames
        from .report import frames_document

        if request.options != self._options:
            self._session = self._start(ReplayOptions.from_dict(request.options))
            self._options = request.options
        trace, session = self._session
        targets = target_frames(trace, request.first, request.last)
        report = trio.run(lambda: session.run(targets, stop_at_first_divergence=True, start=request.start))
        return Probed(frames_document(report.frames))

    def _start(self, options: ReplayOptions) -> tuple[Any, Any]:
        # lazy: loaded while the Vulkan driver starts in its thread (a replay's isolated child; vkcap/vulkan_start.py)
        from capture.trace import Trace

        # lazy: loaded while the Vulkan driver starts in its thread (a replay's isolated child; vkcap/vulkan_start.py)
        from .replayer import ReplaySession

        self.close()
        use_driver(options.icd)
        trace = self._open.enter_context(Trace.open(options.trace))
        return trace, self._open.enter_context(ReplaySession(trace, options))

    def close(self) -> None:
        self._options = None
        self._open.close()
