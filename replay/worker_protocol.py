"""The messages between a parent and a process that replays for it (a suite worker, a fleet actor):
typed, one JSON object per line, each tagged with its ``type``.

A worker first says :class:`Hello` (the device it replays on); then, for each :class:`ReplayRequest`, it
answers :class:`Done` (the replay's result) or :class:`Failed` (its own error: the trace's, not a crash).
A worker killed by a driver crash answers nothing: the parent reads the frame it was running from its
progress file (:mod:`replay.progress_file`) and reports the crash.

Guarantees: :func:`encode` writes exactly one line; :func:`decode` accepts only a JSON object whose
``type`` is one of the message types asked for, that holds no field the type lacks and whose fields have
their declared types (a worker's output is not trusted to be well formed), and raises :class:`ProtocolError`, one line naming what is wrong,
for anything else: never a traceback. Options travel as their own dicts (:meth:`ReplayOptions.to_dict
<replay.options.ReplayOptions.to_dict>`), never as command-line flags.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, Union

from vkcore.errors import VkcapError


class ProtocolError(VkcapError):
    """A line that is not a message of the protocol (or not one expected there)."""


@dataclass(frozen=True)
class Hello:
    """The worker's first line: the device its replays run on (``device`` empty and ``error`` set when it
    could not open one)."""

    type: ClassVar[str] = "hello"
    device: str = ""
    driver: str = ""
    device_uuid: str = ""
    device_index: int | None = None
    pci_bus: str = ""
    error: str = ""


@dataclass(frozen=True)
class ReplayRequest:
    """Replay the trace of ``options`` (a :class:`~replay.options.ReplayOptions` as its dict); with
    ``page``, also write the replay's HTML page there, headed by ``command_line``."""

    type: ClassVar[str] = "replay"
    options: dict[str, Any]
    page: str = ""
    command_line: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Done:
    """A replay's result (:func:`replay.worker.replay_answer`: outcome, device, frames, ...)."""

    type: ClassVar[str] = "done"
    result: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    """The replay failed with its own error (bad input, a lost device): ``error`` in one line, and the
    exit code the same error gives ``vkcap replay``."""

    type: ClassVar[str] = "failed"
    error: str
    exit_code: int = 1


Message = Union[Hello, ReplayRequest, Done, Failed]
MESSAGES: dict[str, type] = {m.type: m for m in (Hello, ReplayRequest, Done, Failed)}
#: The JSON types each annotated field type accepts (bool is not an int here).
_ACCEPTS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "int | None": (int, type(None)),
                                         "dict[str, Any]": (dict,), "list[str]": (list,)}


def encode(message: Message) -> str:
    """``message`` as one JSON line (``type`` first), newline included."""
    return json.dumps({"type": message.type, **asdict(message)}) + "\n"


def decode(line: str, *expected: type) -> Any:
    """The message of ``line``, one of the ``expected`` types; :class:`ProtocolError` otherwise."""
    shown = line.strip()[:80]
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        raise ProtocolError(f"a worker's line is not JSON: {shown!r}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"a worker's line is not a JSON object: {shown!r}")
    tag = data.get("type")
    kind = MESSAGES.get(tag) if isinstance(tag, str) else None
    if kind is None or kind not in expected:
        wanted = " or ".join(m.type for m in expected)
        raise ProtocolError(f"a worker's line is not a {wanted} message: {shown!r}")
    known = {f.name for f in fields(kind)}
    extra = next((key for key in data if key != "type" and key not in known), None)
    if extra is not None:
        raise ProtocolError(f"a worker's {kind.type} message has an unknown field {str(extra)[:40]!r}")
    values = {}
    for f in fields(kind):
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ProtocolError(f"a worker's {kind.type} message lacks '{f.name}'")
            continue
        value = data[f.name]
        accepts = _ACCEPTS[str(f.type)]
        if isinstance(value, bool) or not isinstance(value, accepts):
            raise ProtocolError(f"a worker's {kind.type} message: '{f.name}' is not a {f.type}")
        values[f.name] = value
    return kind(**values)
