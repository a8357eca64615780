"""The messages between a parent and a process that replays for it (a suite worker, a fleet actor, an
isolated replay's child, an isolated bisection's probe child, a side-by-side probe's child): typed, one
JSON object per line, each tagged with its ``type``.

A suite worker first says :class:`Hello` (the device it replays on); then, for each
:class:`ReplayRequest`, any worker answers :class:`Done` (the replay's result; with ``report``, the whole
report document) or :class:`Failed` (its own error: the trace's, not a crash, with the exit code the same
error gives ``vkcap replay``). A probe child answers each :class:`ProbeRequest` (frames ``first..last``
from the state recorded after ``start``) with :class:`Probed` (the frames' results) or :class:`Failed`;
a side-by-side probe's child answers a :class:`CaptureRequest` with :class:`Captured` or
:class:`Failed`. A worker killed by a driver crash answers nothing: the parent reads the frame it was
running from its progress file (:mod:`replay.progress_file`) and reports the crash.

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
    """Replay the trace of ``options`` (a :class:`~replay.options.ReplayOptions` as its dict: the frames,
    the progress file, ...); with ``page``, also write the replay's HTML page there, headed by
    ``command_line``. With ``report``, the answer's result is the whole report document (what ``vkcap
    replay --json`` writes), and the replay tells what it did as ``vkcap replay`` does (its frames on
    stdout, its lines on stderr); with ``auto_tolerance``, the tolerances are measured first (``vkcap replay
    --tolerance auto``)."""

    type: ClassVar[str] = "replay"
    options: dict[str, Any]
    page: str = ""
    command_line: list[str] = field(default_factory=list)
    report: bool = False
    auto_tolerance: bool = False


@dataclass(frozen=True)
class ProbeRequest:
    """Replay frames ``first..last`` of the trace of ``options`` from the state recorded after frame
    ``start`` (-1: the start of the trace), stopping at the first divergence; a probe child keeps one
    replay session open for the requests of equal ``options``."""

    type: ClassVar[str] = "probe"
    options: dict[str, Any]
    first: int
    last: int
    start: int


@dataclass(frozen=True)
class Probed:
    """A probe's frames, as the report document holds them (:func:`replay.report.frames_document`)."""

    type: ClassVar[str] = "probed"
    frames: list[dict[str, Any]]


@dataclass(frozen=True)
class CaptureRequest:
    """Replay frame ``seq`` of ``trace`` capturing what each dispatch writes (:mod:`replay.probe`), on the
    device ``device`` picks or, with ``recording_device``, on the device the trace was recorded on;
    the captures go into the small trace file ``out``."""

    type: ClassVar[str] = "capture"
    trace: str
    seq: int
    out: str
    device: str = ""
    recording_device: bool = False


@dataclass(frozen=True)
class Captured:
    """The captures are in the request's ``out`` file (``found``), or this machine has no device of
    the trace's fingerprint (not ``found``: only for ``recording_device``)."""

    type: ClassVar[str] = "captured"
    found: bool = True


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


Message = Union[Hello, ReplayRequest, Done, Failed, ProbeRequest, Probed, CaptureRequest, Captured]
MESSAGES: dict[str, type] = {m.type: m for m in (Hello, ReplayRequest, Done, Failed, ProbeRequest, Probed,
                                                 CaptureRequest, Captured)}
#: The JSON types each annotated field type accepts (bool is an int only where bool is named).
_ACCEPTS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "int | None": (int, type(None)),
                                         "bool": (bool,), "dict[str, Any]": (dict,), "list[str]": (list,),
                                         "list[dict[str, Any]]": (list,)}
#: The type of each item of a list field.
_ITEMS: dict[str, type] = {"list[str]": str, "list[dict[str, Any]]": dict}


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
        accepts, items = _ACCEPTS[str(f.type)], _ITEMS.get(str(f.type))
        if ((isinstance(value, bool) and bool not in accepts) or not isinstance(value, accepts)
                or (items is not None and not all(isinstance(item, items) for item in value))):
            raise ProtocolError(f"a worker's {kind.type} message: '{f.name}' is not a {f.type}")
        values[f.name] = value
    return kind(**values)
