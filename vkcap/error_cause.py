"""Which error ``vkcap`` reports when a command fails: the CLI's and an isolated child's
(:mod:`vkcap.replay_child`) alike, so the child's :class:`~replay.worker_protocol.Failed` says what the
same command says without isolation."""
from __future__ import annotations

from vkcore.device import validation
from vkcore.errors import EXIT_BAD_INPUT, VkcapError


def first_cause(exc: VkcapError) -> VkcapError:
    """The error to report: a validation failure seen before ``exc`` explains it better (the driver was
    given invalid input), except input errors, which vkcap found before the driver saw anything."""
    v = validation.current()
    if v is None or exc.exit_code == EXIT_BAD_INPUT or isinstance(exc, validation.ValidationFailed):
        return exc
    try:
        v.check()
    except validation.ValidationFailed as failed:
        return failed
    return exc
