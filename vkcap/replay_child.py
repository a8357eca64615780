"""The isolated child: ``python -m vkcap.replay_child ANSWER_FD [LOG_LEVEL]``, started by
:mod:`replay.isolate` (an isolated replay, an isolated bisection's probes) and :mod:`replay.probe` (a
side-by-side probe's reference), not for direct use.

It reads the requests of :mod:`replay.worker_protocol` from stdin and writes one answer line each to
the pipe ``ANSWER_FD`` (never stdout, which a driver may print to):

- :class:`~replay.worker_protocol.ReplayRequest` with ``report``: the replay ``vkcap replay`` runs, telling
  what it did as ``vkcap replay`` does (its frames on stdout, its lines on stderr, logged at
  ``LOG_LEVEL``), answered with :class:`~replay.worker_protocol.Done` holding the whole report document;
- :class:`~replay.worker_protocol.ProbeRequest`: :class:`replay.worker.ProbeReplays`;
- :class:`~replay.worker_protocol.CaptureRequest`: :func:`replay.probe.answer_capture`.

An error is answered with :class:`~replay.worker_protocol.Failed` (the one line and exit code ``vkcap``
gives it) and ends the child with that exit code: its device may be lost. A crash answers nothing."""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace
from typing import IO, Any

from vkcore.device import validation
from vkcore.errors import EXIT_FAILURE, VkcapError
from vkcore.safe_text import shown

from replay.options import ReplayOptions
from replay.worker import ProbeReplays, write_page
from replay.worker_protocol import (CaptureRequest, Done, Failed, ProbeRequest, ProtocolError, ReplayRequest, decode,
                                    encode)

from .error_cause import first_cause
from .log_format import ShownFormatter
from .vulkan_start import TRACE_CODECS, start_vulkan_early


def answer_replay(request: ReplayRequest) -> Done:
    """An isolated replay: the replay ``vkcap replay`` runs in process (:mod:`vkcap.commands_trace`),
    with the page of ``request.page`` written as ``--html`` writes it; its report document."""
    # lazy: a replay's isolated child imports this module, not replay.page_scratch, vkcap.commands_trace; loaded while the Vulkan driver starts in its thread (a replay's isolated child; vkcap/vulkan_start.py)
    from capture.trace import Trace
    from replay.page_scratch import scratch_folder

    from .commands_trace import replay_and_print, replay_document, tell_outcome

    log = logging.getLogger("vkcap")
    options = ReplayOptions.from_dict(request.options)
    with Trace.open(options.trace) as trace:
        if not request.page:
            report = replay_and_print(options, trace, auto_tolerance=request.auto_tolerance, log=log)
        elif options.heatmap_dir is not None:
            options = replace(options, value_maps=True)
            report = replay_and_print(options, trace, auto_tolerance=request.auto_tolerance, log=log)
            write_page(request, options, report, None)
        else:
            with scratch_folder() as scratch:  # the page's pictures: in a folder removed once it is written
                options = replace(options, value_maps=True, heatmap_dir=scratch)
                report = replay_and_print(options, trace, auto_tolerance=request.auto_tolerance, log=log)
                write_page(request, options, report, scratch)
    document = replay_document(report)
    tell_outcome(report, log)
    return Done(document)


def answer(request: Any, probes: ProbeReplays) -> Any:
    """The answer to one request (see the module docstring); an error is :class:`Failed`, as ``vkcap``
    words it and with its exit code."""
    try:
        if isinstance(request, ProbeRequest):
            return probes.answer(request)
        if isinstance(request, CaptureRequest):
            # lazy: a replay's isolated child imports this module, not replay.probe (with numpy)
            from replay.probe import answer_capture

            return answer_capture(request)
        done = answer_replay(request)
        validation.check()  # as vkcap checks after a command: a validation message fails the replay
        return done
    except VkcapError as exc:
        cause = first_cause(exc)
        return Failed(shown(cause.render()), cause.exit_code)
    except Exception as exc:  # noqa: BLE001 - one line, as vkcap words it, never a traceback
        if type(exc).__module__.startswith("vulkan"):
            return Failed(f"a Vulkan call failed: {type(exc).__name__}", EXIT_FAILURE)
        return Failed(f"internal error: {type(exc).__name__}: {shown(exc)}", EXIT_FAILURE)


def serve(requests: IO[str], answers: IO[str]) -> int:
    """Answer each request line of ``requests`` on ``answers`` until ``requests`` ends (exit 0) or an
    answer is :class:`Failed` (its exit code)."""
    probes = ProbeReplays()
    started = False
    try:
        for line in requests:
            try:
                request = decode(line, ReplayRequest, ProbeRequest, CaptureRequest)
            except ProtocolError as exc:
                reply: Any = Failed(str(exc))
            else:
                if not started and not isinstance(request, CaptureRequest):  # the driver starts as the trace opens
                    options = ReplayOptions.from_dict(request.options)
                    start_vulkan_early(options.icd, options.device, also=TRACE_CODECS)
                    started = True
                reply = answer(request, probes)
            answers.write(encode(reply))
            answers.flush()
            if isinstance(reply, Failed):
                return reply.exit_code
        return 0
    finally:
        probes.close()


def main(argv: list[str]) -> int:
    """``ANSWER_FD [LOG_LEVEL]``: :func:`serve` on stdin and that pipe, logging as ``vkcap`` does."""
    level = argv[1] if len(argv) > 1 else "info"
    shown_log = logging.StreamHandler(sys.stderr)
    shown_log.setFormatter(ShownFormatter())
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[shown_log])
    with os.fdopen(int(argv[0]), "w") as answers:
        return serve(sys.stdin, answers)


if __name__ == "__main__":
    from vkcore.device.lifetime import leave_last_device_to_exit

    if not leave_last_device_to_exit():
        sys.exit(main(sys.argv[1:]))
    code = main(sys.argv[1:])
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
