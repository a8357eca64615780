"""Running one recorded frame dispatch by dispatch, twice: a reference side and the candidate.

A trace recorded without ``--dispatch-level`` says which frame diverged but not which dispatch. The
probe replays that frame (from its checkpoint) capturing what every dispatch writes, right after it,
once as the candidate (the options as given: replaced shaders, the driver under test) and once as the
reference, the first side of :func:`reference_side` that exists:

1. ``--reference-icd``: the recorded shaders on that known-good driver, in a child process;
2. ``--replace-shader`` given: the recorded shaders, on the same driver, in this process;
3. the recording device, when this machine has a device whose fingerprint matches the trace's
   (:data:`DEVICE_KEYS`) and it is not the candidate itself: in a child process given the loader's
   variables as they were before ``--icd``.

A child process (:mod:`vkcap.replay_child`, sent a :class:`~replay.worker_protocol.CaptureRequest`) is
needed because the Vulkan loader picks its drivers once per process; it writes its captures into the
small trace file the request names, which the parent reads back once it answers
:class:`~replay.worker_protocol.Captured`. Where no
reference side exists (the candidate is the recording device, or that device is not here) the dispatch
cannot be named without dispatch-level snapshots: :func:`reference_side` says why in words.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, NamedTuple

from capture.reader import TraceReader
from capture.writer import TraceWriter
from capture.trace import DispatchSnapshot, FrameRecord, Trace
from vkcore.device.context import choose_device, list_devices
from vkcore.errors import DeviceError
from vkcore.safe_text import shown
from vkcore.commands import kind_of

from .isolate import CHILD_MODULE
from .options import ReplayOptions
from .reading import reading
from .replayer import LiveSnapshot, ReplaySession
from .results import IDENTICAL, Comparison, Tolerance
from .tolerances import TolerancePolicy
from .typed import compare_as
from .worker_protocol import CaptureRequest, Captured, Failed, ProtocolError, decode, encode


class Shot(NamedTuple):
    """What a probe captured: resource ``uid`` right after command ``command``, or after its segment
    ``segment`` (running ``module``) for a graph dispatch, as ``--dispatch-level`` snapshots them."""

    command: int
    segment: int | None
    module: str
    uid: str

    def order(self) -> tuple[int, int, str]:
        return self.command, -1 if self.segment is None else self.segment, self.uid


Captures = dict[Shot, bytes | memoryview]
PLACEHOLDER = "0" * 32
#: Seconds a reference side's child may take to replay one frame before it is stopped (a hung or
#: endlessly slow driver must not hang bisect): 600, ``$VKCAP_PROBE_TIMEOUT`` changes it.
PROBE_TIMEOUT_S = 600.0


def probe_timeout() -> float:
    try:
        value = float(os.environ.get("VKCAP_PROBE_TIMEOUT", "") or PROBE_TIMEOUT_S)
    except ValueError:
        value = PROBE_TIMEOUT_S
    return value if 0 < value < 1e6 else PROBE_TIMEOUT_S


class _Capturer:
    """The probe's judge (:class:`replay.replayer.Judge`): keeps the live bytes of every dispatch-level
    snapshot, by dispatch (and segment), instead of comparing them."""

    def __init__(self) -> None:
        self.captured: Captures = {}

    def judge(self, shot: LiveSnapshot) -> Comparison:
        if shot.command is not None:
            self.captured[Shot(shot.command, shot.segment, shot.module, shot.uid)] = bytes(shot.live)
        return Comparison(shot.uid, "bytes", IDENTICAL, len(shot.live))


def dispatch_targets(trace: Trace, seq: int, replay_session: ReplaySession) -> dict[int, FrameRecord]:
    """A synthetic frame record asking for what ``--dispatch-level`` snapshots in frame ``seq``: each
    dispatch's written resources after it, and after each segment of a graph dispatch what it writes."""
    plan = replay_session.plan
    assert replay_session.session is not None
    graphs = replay_session.session.graphs
    record = trace.frame(seq)
    frame = plan.frames[record.index]
    size = lambda uid: int(trace.resources.get(uid, {}).get("size", 0))  # noqa: E731 (graph entries carry their own)
    wanted = []
    for cmd in frame.dispatches:
        for uid, _, command, *rest in kind_of(cmd).dispatch_snapshots(plan.scenario, cmd, graphs, size):
            segment = rest[0] if rest else None
            module = "" if segment is None else next(s.module for s in graphs[command].segments if s.index == segment)
            wanted.append(DispatchSnapshot(command, uid, PLACEHOLDER, segment, module))
    return {seq: FrameRecord(seq, record.pass_index, record.index, record.frame_id, {}, tuple(wanted))}


async def capture_dispatches(trace: Trace, options: ReplayOptions, seq: int) -> Captures:
    """Replay frame ``seq`` (from its nearest checkpoint) on this process's driver; return what each
    dispatch, and each segment of a graph dispatch, wrote."""
    capturer = _Capturer()
    with ReplaySession(trace, replace(options, first=seq, last=seq, dispatch_level=True)) as replay_session:
        await replay_session.run(dispatch_targets(trace, seq, replay_session), judge=capturer)
    return capturer.captured


def capture_on_driver(trace_path: Path, seq: int, icd: Path, device: str | None) -> Captures:
    """Run the probe in a child process on driver ``icd`` (no shader replacement: the reference)."""
    env = {**os.environ, "VK_DRIVER_FILES": str(icd.resolve()), "VK_ICD_FILENAMES": str(icd.resolve())}
    captured = _capture_in_child(trace_path, seq, env, device, f"the reference driver {icd}")
    assert captured is not None
    return captured


#: The fingerprint keys that name a device and its driver: equal keys, the same device and driver.
DEVICE_KEYS = ("vendor_id", "device_id", "device_name", "driver_name", "driver_version")


def same_device(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in DEVICE_KEYS)


def capture_on_recording_device(trace_path: Path, seq: int, loader_env: dict[str, str | None]) -> Captures | None:
    """Run the probe in a child process on the device the trace was recorded on, found among the devices
    the loader offers under ``loader_env`` (its variables as before ``--icd``); None when there is none."""
    env = {k: v for k, v in os.environ.items() if k not in loader_env}
    env.update({k: v for k, v in loader_env.items() if v is not None})
    return _capture_in_child(trace_path, seq, env, None, "the recording device", recording_device=True)


def _capture_in_child(trace_path: Path, seq: int, env: dict[str, str], device: str | None, who: str, *,
                      recording_device: bool = False) -> Captures | None:
    """Run the probe of frame ``seq`` in a child (:mod:`vkcap.replay_child`) under the loader's ``env``:
    a :class:`~replay.worker_protocol.CaptureRequest`, its captures read back from the small trace file
    it names. None when ``recording_device`` is asked for and this machine has none."""
    with tempfile.TemporaryDirectory(prefix="vkcap-probe-") as tmp:
        out = Path(tmp) / "probe.vkt"
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", CHILD_MODULE, str(write_fd), "warning"]
        try:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, errors="replace", pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        request = CaptureRequest(str(trace_path), seq, str(out), device or "", recording_device)
        timeout = probe_timeout()
        with os.fdopen(read_fd, "r") as answers:
            try:
                _, stderr = proc.communicate(encode(request), timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise DeviceError(f"{who} did not finish frame {seq} within {timeout:g} s "
                                  "(VKCAP_PROBE_TIMEOUT sets the limit)") from None
            line = answers.readline()
        try:
            answer = decode(line, Captured, Failed) if line else None
        except ProtocolError as exc:
            answer = Failed(str(exc))
        if isinstance(answer, Captured) and not answer.found:
            return None
        if not isinstance(answer, Captured) or not out.is_file():
            said = answer.error if isinstance(answer, Failed) else (stderr.strip().splitlines() or ["no output"])[-1]
            raise DeviceError(f"{who} could not run frame {seq} (exit {proc.returncode}: {shown(said)})")
        with TraceReader(out) as reader:
            return {Shot(int(m["command"]), None if m.get("segment") is None else int(m["segment"]), str(m.get("module", "")),
                         str(m["uid"])): reader.read_blob(m["blob"]) for _, m in reader.metas("probe")}


@dataclass(frozen=True)
class ReferenceSide:
    """The reference of a side-by-side run: ``words`` say how both sides ran ("with the recorded shaders
    and with the replacement"), ``capture`` runs the reference of frame ``seq``. ``capture`` returns None
    when the side turns out not to exist (the recording device is not on this machine)."""

    words: str
    capture: Callable[[int], Captures | None]
    reference: str = ""  # the reference side alone: "the recorded shaders on this device"


def reference_side(trace: Trace, options: ReplayOptions, reference_icd: Path | None,
                   loader_env: dict[str, str | None] | None, live: dict[str, Any] | None) -> ReferenceSide | str:
    """The reference side for the candidate ``options`` (see the module docstring), or why none exists.
    ``live``: the candidate device's fingerprint (None: not known, the recording device is tried)."""
    if reference_icd is not None:  # the recorded shaders on the known-good driver (the child replaces none)
        replaced = " with the recorded shaders" if options.replace_shaders else ""
        candidate = "with the replacement on the driver under test" if options.replace_shaders else "on the driver under test"
        return ReferenceSide(f"on the reference driver ({shown(str(reference_icd))}){replaced} and {candidate}",
                             lambda seq: capture_on_driver(trace.path, seq, reference_icd, options.device),
                             f"the reference driver {shown(str(reference_icd))}, with the recorded shaders")
    if options.replace_shaders:
        recorded = replace(options, replace_shaders=())
        return ReferenceSide("with the recorded shaders and with the replacement",
                             lambda seq: trio_capture(trace, recorded, seq), "the recorded shaders on this device")
    recorded_name = shown(str(trace.fingerprint.get("device_name", "?")))
    if loader_env is None:
        return "no shader is replaced, no --reference-icd is given, and the recording device is not looked for"
    if live is not None and same_device(live, trace.fingerprint):
        return (f"the candidate is the recording device ({recorded_name}) and no shader is replaced: "
                "no reference side to replay it against")
    return ReferenceSide(f"on the recording device ({recorded_name}) and on "
                         f"{shown(str((live or {}).get('device_name', 'the driver under test')))}",
                         lambda seq: capture_on_recording_device(trace.path, seq, loader_env),
                         f"the recording device ({recorded_name})")


def live_fingerprint(options: ReplayOptions) -> dict[str, Any]:
    """The fingerprint of the device ``options`` choose on this process's driver."""
    return choose_device(list_devices(), options.device).fingerprint()


def trio_capture(trace: Trace, options: ReplayOptions, seq: int) -> Captures:
    # lazy: a replay's isolated child imports this module before its Vulkan driver starts; trio loads after, while the driver starts (vkcap/vulkan_start.py)
    import trio

    return trio.run(capture_dispatches, trace, options, seq)


def first_divergent_dispatch(live: Captures, reference: Captures, trace: Trace,
                             policy: TolerancePolicy) -> tuple[int, Comparison] | None:
    """The first (command, comparison) where the two sides' dispatch outputs differ at all (in command
    order, a graph's segments in order), each output read as the replay reads it
    (:func:`replay.reading.reading`: ``--dtype``, else the shader's view); a segment's comparison names it
    in ``extras`` (``segment``, ``module``), as a dispatch-level replay does."""
    exact = replace(policy, per_resource={}, default=Tolerance(), preset="", default_keys={})
    for shot in sorted(reference, key=Shot.order):
        if shot not in live:
            continue
        c = compare_as(shot.uid, reference[shot], live[shot], reading(trace, shot.uid, policy), exact)
        if c.status != IDENTICAL:
            if shot.segment is not None:
                c.extras.update(segment=shot.segment, module=shot.module)
            return shot.command, c
    return None


def answer_capture(request: CaptureRequest) -> Captured:
    """The child's side of a side-by-side probe: capture frame ``request.seq`` of ``request.trace``
    dispatch by dispatch into the small trace ``request.out``, on the device asked for (with
    ``recording_device``, the one of the trace's fingerprint: not ``found`` when there is none)."""
    # lazy: a replay's isolated child imports this module before its Vulkan driver starts; trio loads after, while the driver starts (vkcap/vulkan_start.py)
    import trio

    trace_path = Path(request.trace)
    with Trace.open(trace_path) as trace:
        device = request.device or None
        if request.recording_device:
            try:
                devices = list_devices()
            except DeviceError:  # no driver at all under this environment: no recording device either
                return Captured(found=False)
            match = next((d for d in devices if same_device(d.fingerprint(), trace.fingerprint)), None)
            if match is None:
                return Captured(found=False)
            device = str(match.index)
        captured = trio.run(capture_dispatches, trace, ReplayOptions(trace=trace_path, device=device), request.seq)
    with TraceWriter(Path(request.out)) as writer:
        for shot, data in captured.items():
            writer.add_meta("probe", {"command": shot.command, "segment": shot.segment, "module": shot.module,
                                      "uid": shot.uid, "blob": writer.put_blob(data)})
    return Captured()
