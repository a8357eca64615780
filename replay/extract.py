"""``extract``: one command of one frame of a trace as a standalone scenario: a bug report's reproducer.

Guarantees of :func:`extract`:

- **Standalone.** The folder holds ``scenario.json`` with exactly one command (the one extracted, its JSON
  as the trace's scenario has it: push and specialization data included) and exactly the resources it
  references (``resource_ref``, ``shader_ref``, ``graph_ref``, ``push_data_ref``, attachments: every
  ``*_ref`` key, followed through the resources they name), with every file they read: each shader as
  the SPIR-V that ran when the trace was recorded (its source beside it, for reading), graphs and raw
  data as embedded in the trace. Both ``vkcap run`` and ARM's ``scenario-runner --scenario`` run it.
- **The inputs are the state just before the command.** Every buffer, image and tensor the command
  binds starts (``src``) from its content right before the command ran in that frame: the trace is
  replayed on this device through the replay path (:class:`replay.replayer.ReplaySession`), from the
  nearest checkpoint up to the command before it in the frame (or to the end of the previous frame),
  and the resources are read there. Where the trace holds that state itself (the command is its frame's
  first dispatch and the state after the previous frame is recorded whole) it is taken from the trace
  with no replay. Each input read from a replay is checked against the recording where the recording
  holds it too: ``vkcap.json`` says, per input, ``recorded``, ``matches``, ``differs`` or ``unrecorded``.
- **The outputs.** Every resource the command writes gets a ``dst`` (its uid, with the suffix of its kind),
  and ``expected/`` holds its value right after the command, from the first source that has it: the
  recording (the command's own dispatch-level snapshot, or the frame's boundary snapshot when no later
  command of the frame writes that resource); the reference side of the bisect that named the command
  (:class:`Divergence`); a replay on this device with the recorded shaders. ``vkcap.json`` says which.
- **The candidate.** With replaced shaders (``options.replace_shaders``: extract's and bisect's
  ``--replace-shader``, checked and compiled as the replay does), each one the command uses is written
  beside the recorded SPIR-V (``shaders/UID.candidate.spv``, its source in ``shaders/source/``);
  ``scenario.json`` runs the candidate and ``scenario.recorded.json`` the recorded shaders. Without
  replaced shaders there is one ``scenario.json``, the recorded shaders (the candidate is the driver).
- **A check in one command.** ``check.sh`` runs ``vkcap reproduce`` on the folder (:mod:`replay.reproduce`),
  which compares as this extract's options compare (``vkcap.json``: ``compare``, from ``options``'s
  tolerances and dtypes, else the shader's view). The README says what diverged and by how much, on which
  devices and drivers; every text in it taken from the trace is escaped (:func:`vkcore.safe_text.shown`).
- **The user's files are sacred.** ``out`` must be new or an empty folder; ``force`` replaces only a
  folder an earlier extract wrote (its ``.vkcap-extract`` marker lists every entry in it), and a folder
  holding the trace is never used (:func:`vkcore.output_folders.check_folder_target`, checked before
  any work and again before publishing). Every file name derived from the trace (uids, shader sources,
  embedded files, VGF modules) is made safe and unique by one :class:`vkcore.output_folders.SafeNames`
  and checked to stay inside the folder; the scenario's ``src`` and ``dst`` use those names.
- **Nothing half-written.** The folder is built beside its target and put in place once complete
  (:func:`vkcore.output_folders.publish_folder`); the staging folder is removed on every exit path but
  ``kill -9``, after which the next extract to that folder names it in a warning.
- **Refusals** (one line, exit 2, nothing written): a folder ``out`` that must not be written (above), a
  frame the trace does not hold, a command index outside the scenario, a command of another frame (the
  frame's own are listed), a command that is not a dispatch, a trace without the checkpoint the replay
  needs (named), an image whose format has no DDS form.

Images are extracted at mip level 0 (the level a ``src`` file holds); graph dispatches are extracted whole,
or one segment alone (see :mod:`replay.extract_segment`).
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from capture.format.records import content_key
from capture.trace import DispatchSnapshot, FrameRecord, Trace
from vkcore.commands import kind_of
from vkcore.device.context import choose_device, list_devices
from vkcore.errors import TraceError, UsageError
from vkcore.exec.plan import make_plan
from vkcore.output_folders import (SafeNames, check_folder_target, confined, name_abandoned_staging, publish_folder,
                                   staging_folder)
from vkcore.resources.files import SUFFIXES, write_resource_file
from vkcore.safe_text import shown
from vkcore.shaders.compile import load_shader
from vkcore.version import vkcap_version

from .options import ReplayOptions
from .reading import dtype_name, effective_policy, reading
from .replayer import RESTORED_KINDS, LiveSnapshot, ReplaySession, rebuild_scenario
from .results import IDENTICAL, Comparison

if TYPE_CHECKING:
    from vkcore.output_folders import SafeNames

PLACEHOLDER = "0" * 32
SCENARIO = "scenario.json"


@dataclass(frozen=True)
class Divergence:
    """What bisect found at the extracted command, for the README: its line and the two sides."""

    line: str
    recorded: dict[str, Any]
    live: dict[str, Any]
    replaced_shaders: tuple[tuple[str, Path], ...] = ()
    segment: str = ""
    found_by: str = ""  # how bisect named the dispatch ("replaying frame 50 with the recorded shaders and ...")
    reference: dict[str, bytes] = field(default_factory=dict)  # uid -> the reference side's output after it
    reference_words: str = ""  # what the reference side was, for expected/'s provenance


@dataclass
class Extracted:
    """What :func:`extract` wrote."""

    folder: Path
    frame: int
    command: int
    kind: str  # the command's JSON key: dispatch_compute, dispatch_graph, ...
    name: str  # its shader, graph or pass
    resources: list[str] = field(default_factory=list)  # the uids in the scenario, in scenario order
    inputs: dict[str, str] = field(default_factory=dict)  # uid -> matches | differs | unrecorded
    expected: dict[str, str] = field(default_factory=dict)  # uid -> where the recorded output comes from ("" none)
    bytes: int = 0
    segment: int | None = None  # the segment of a graph dispatch extracted alone (see replay.extract_segment)


class _Reader:
    """Extract's judge (:class:`replay.replayer.Judge`): keeps the live bytes of every snapshot the targets
    ask for, by (frame, command or -1 for the boundary, uid), instead of comparing them."""

    def __init__(self) -> None:
        self.captured: dict[tuple[int, int, str], bytes] = {}

    def judge(self, shot: LiveSnapshot) -> Comparison:
        self.captured[(shot.seq, -1 if shot.command is None else shot.command, shot.uid)] = bytes(shot.live)
        return Comparison(shot.uid, "bytes", IDENTICAL, len(shot.live))


def referenced_uids(command: dict[str, Any], resources: dict[str, dict[str, Any]]) -> list[str]:
    """The resource uids ``command`` names through ``*_ref`` / ``*_refs`` keys at any depth, and those the
    named resources name in turn (a graph's shader substitutions, ...), in scenario order."""
    found: set[str] = set()
    todo: list[Any] = [command]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
                if key.endswith(("_ref", "_refs")):
                    for name in names:
                        if isinstance(name, str) and name in resources and name not in found:
                            found.add(name)
                            todo.append(resources[name])
                todo.append(value)
        elif isinstance(node, list):
            todo.extend(node)
    return [uid for uid in resources if uid in found]


@dataclass
class Located:
    """Command ``index`` of frame ``seq``, checked to be a dispatch of that frame: what an extract (of the
    whole command, or of one segment of a graph dispatch) starts from. Valid while the folder the
    scenario was rebuilt in exists."""

    trace: Trace
    record: FrameRecord
    index: int
    kind_name: str  # the command's JSON key
    command: dict[str, Any]  # the command's JSON
    document: dict[str, Any]  # the trace's portable scenario
    resources: dict[str, dict[str, Any]]  # uid -> the resource's JSON
    scenario: Any  # the rebuilt :class:`vkcore.scenario.model.Scenario`
    cmd: Any  # the plan's command
    kind: Any  # its :class:`vkcore.commands.base.CommandKind`
    uids: list[str]  # every resource the command references, in scenario order
    data: list[str]  # those with content (buffers, images, tensors)
    writes: list[str]  # those the command writes
    earlier: list[int]  # the frame's dispatches before it
    later_writes: set[str]  # what the frame's dispatches after it write
    name: str  # its shader, graph or pass

    @property
    def before(self) -> int | None:
        """The frame's dispatch right before the command, ``None`` when it is the frame's first."""
        return self.earlier[-1] if self.earlier else None

    def provenance(self, trace_path: Path) -> dict[str, Any]:
        return {"trace": str(trace_path), "frame": self.record.seq, "frame_id": self.record.frame_id,
                "command": self.index, "kind": self.kind_name, "name": self.name,
                "recorded_device": dict(self.trace.fingerprint)}


def locate(trace: Trace, seq: int, index: int, folder: Path) -> Located:
    """Command ``index`` of frame ``seq`` (the scenario rebuilt into ``folder``); the refusals of the
    module docstring as :class:`UsageError` / :class:`TraceError`."""
    try:
        record = trace.frame(seq)
    except TraceError as exc:
        raise TraceError(exc.message, file=trace.path, place="--frame") from None
    document = json.loads(trace.portable_json)
    commands = document.get("commands", [])
    if not 0 <= index < len(commands):
        raise UsageError(f"--command {index}: the scenario's commands are commands[0] to commands[{len(commands) - 1}]",
                         file=trace.path)

    scenario = rebuild_scenario(trace, folder)
    plan = make_plan(scenario, capture_all=bool(trace.header.get("capture_all")))
    frame = plan.frames[record.index]
    boundary = (frame.boundary,) if frame.boundary is not None else ()
    cmd = next((c for c in (*frame.commands, *boundary) if c.index == index), None)
    (kind_name, _), = commands[index].items()
    if cmd is None:
        own = [c.index for c in frame.dispatches]
        listed = ", ".join(f"commands[{i}]" for i in own) or "none"
        raise UsageError(f"--command {index}: commands[{index}] is not a command of frame {seq} "
                         f"(its dispatches: {listed})", file=trace.path)
    kind = kind_of(cmd)
    if not kind.dispatch:
        raise UsageError(f"--command {index}: commands[{index}] is a {kind_name}, not a dispatch: "
                         "there is nothing to extract", file=trace.path)
    resources = {next(iter(r.values()))["uid"]: r for r in document.get("resources", [])}
    uids = referenced_uids(commands[index], resources)
    data = [u for u in uids if next(iter(resources[u])) in RESTORED_KINDS]
    writes = [u for u in kind.declared_writes(scenario, cmd) if u in data]
    earlier = [c.index for c in frame.dispatches if c.index < index]
    later_writes = {u for c in frame.dispatches if c.index > index for u in kind_of(c).declared_writes(scenario, c)}
    return Located(trace, record, index, kind_name, commands[index], document, resources, scenario, cmd, kind, uids,
                   data, writes, earlier, later_writes, kind.name(cmd))


def folder_target(trace_path: Path, out: Path, *, place: str, force: bool) -> Target:
    """The extract folder ``out`` checked (:func:`vkcore.output_folders.check_folder_target`) and an
    abandoned staging folder of an earlier extract there named, before any work."""
    check_folder_target(out, place=place, force=force, inputs=[trace_path])
    name_abandoned_staging(out)
    return Target(Path(out), place, force, Path(trace_path), SafeNames())


def extract(trace_path: Path, seq: int, index: int, out: Path, options: ReplayOptions,
            divergence: Divergence | None = None, argv: list[str] | None = None,
            *, force: bool = False, place: str = "-o") -> Extracted:
    """Write command ``index`` of frame ``seq`` of the trace as a standalone scenario into ``out`` (see
    the module docstring); ``options`` choose the device (no replaced shaders: the inputs are what the
    trace's own shaders computed). One segment of a graph dispatch alone:
    :func:`replay.extract_segment.extract_segment`. ``force``: replace an earlier extract at ``out``;
    ``place``: the flag that named ``out``, for refusals."""
    target = folder_target(trace_path, out, place=place, force=force)
    with Trace.open(trace_path) as trace:
        with tempfile.TemporaryDirectory(prefix="vkcap-extract-") as tmp:
            at = locate(trace, seq, index, Path(tmp))
        record, uids, data, writes = at.record, at.uids, at.data, at.writes
        resources = at.resources
        candidate = candidate_shaders(trace, options.replace_shaders, uids, target.names)  # checked before any replay
        inputs, verdicts = _state_before(trace, options, record, at.before, data, index)
        expected = _recorded_outputs(trace, record, index, writes, at.later_writes)
        expected = _complete_expected(trace, options, record, index, expected, divergence)
        files = _files(trace, at.document, resources, uids, target.names)
        for shader in candidate.values():
            files.update(shader.files)
        meta = {u: {"kind": next(iter(resources[u])), **trace.resources.get(u, {})} for u in data}
        result = Extracted(out, seq, index, at.kind_name, at.name, uids, verdicts,
                           {u: where for u, (where, _) in expected.items()})
        provenance = at.provenance(trace_path)
        provenance["compare"] = compare_spec(trace, options, writes)
    scenario_doc = _scenario(at.command, resources, uids, data, writes, meta, target.names)
    scenarios = {SCENARIO: scenario_doc}
    if candidate:  # scenario.json runs the candidate, scenario.recorded.json what the trace recorded
        scenarios = {SCENARIO: with_shaders(scenario_doc, {u: c.spirv_file for u, c in candidate.items()}),
                     RECORDED_SCENARIO: scenario_doc}
    provenance["candidate_shaders"] = {u: {"spirv": c.spirv_file, "source": c.source_file, "from": str(c.given)}
                                       for u, c in candidate.items()}
    _write_folder(target, scenarios, files, inputs, expected, meta, result, provenance, options, divergence, argv)
    return result


RECORDED_SCENARIO = "scenario.recorded.json"
CHECK_SCRIPT = "check.sh"


@dataclass(frozen=True)
class CandidateShader:
    """A replaced shader as the extract holds it: its SPIR-V beside the recorded one, its source."""

    given: Path  # the user's file (--replace-shader UID=FILE)
    spirv_file: str  # folder-relative: shaders/UID.candidate.spv
    source_file: str  # folder-relative: shaders/source/NAME
    files: dict[str, bytes]


def candidate_shaders(trace: Trace, replace_shaders: tuple[tuple[str, Path], ...], uids: list[str],
                      names: "SafeNames") -> dict[str, CandidateShader]:
    """Each replaced shader among ``uids``, compiled as the replay compiles it: uid -> its files in the
    folder. Every replacement is checked as the replay checks it (a uid the trace lacks, a missing file,
    GLSL that does not compile: one line, exit 2); one the command does not use is named in a warning."""
    if not replace_shaders:
        return {}

    wanted = tuple((u, p) for u, p in replace_shaders if u in uids)
    out: dict[str, CandidateShader] = {}
    with tempfile.TemporaryDirectory(prefix="vkcap-extract-") as tmp:
        scenario = rebuild_scenario(trace, Path(tmp), replace_shaders)
        for uid, given in replace_shaders:
            if uid not in uids:
                logging.getLogger("vkcap").warning("--replace-shader %s=%s: the extracted command does not use shader "
                                                   "'%s': the extract runs without it", shown(uid), shown(given), shown(uid))
        for uid, given in wanted:
            code = load_shader(scenario, scenario.by_uid[uid]).code
            spirv_file = f"shaders/{names.name('shaders', uid, '.candidate.spv')}"
            source = source_file(names, f"candidate:{given}", name=given.name)
            files = {spirv_file: bytes(code)}
            if given.suffix != ".spv":
                files[source] = given.read_bytes()
            out[uid] = CandidateShader(given, spirv_file, source if given.suffix != ".spv" else spirv_file, files)
    return out


def with_shaders(scenario: dict[str, Any], spirv: dict[str, str]) -> dict[str, Any]:
    """``scenario`` with the shaders ``spirv`` names (uid -> folder-relative SPIR-V) read from there."""
    doc = json.loads(json.dumps(scenario))
    for item in doc["resources"]:
        (kind, body), = item.items()
        if kind == "shader" and body.get("uid") in spirv:
            body["src"] = spirv[body["uid"]]
    return doc


def compare_spec(trace: Trace, options: ReplayOptions, writes: list[str]) -> dict[str, dict[str, Any]]:
    """How ``vkcap reproduce`` compares each output with ``expected/``, as the replay that found the
    divergence did: uid -> ``dtype`` (given or the format's; None: the shader's view, else bytes) and the
    tolerance for it."""
    policy = effective_policy(options)
    spec: dict[str, dict[str, Any]] = {}
    for uid in writes:
        how = reading(trace, uid, policy)
        tolerance = policy.for_resource(uid, dtype_name(how))
        spec[uid] = {"dtype": how if isinstance(how, str) else None,
                     "tolerance": {"atol": tolerance.atol, "rtol": tolerance.rtol, "ulp": tolerance.ulp}}
    return spec


def _complete_expected(trace: Trace, options: ReplayOptions, record: FrameRecord, index: int,
                       expected: dict[str, tuple[str, bytes | None]],
                       divergence: Divergence | None) -> dict[str, tuple[str, bytes | None]]:
    """``expected`` with a value for every output the recording holds none of: the reference side's
    output where bisect ran one, else a replay on this device with the recorded shaders."""
    missing = [u for u, (_, value) in expected.items() if value is None]
    out = dict(expected)
    if divergence is not None and divergence.reference:
        for u in [u for u in missing if u in divergence.reference]:
            out[u] = (f"bisect's reference side ({divergence.reference_words}), right after commands[{index}]",
                      divergence.reference[u])
        missing = [u for u in missing if u not in divergence.reference]
    if missing:
        targets = {record.seq: FrameRecord(record.seq, record.pass_index, record.index, record.frame_id, {},
                                           tuple(DispatchSnapshot(index, u, PLACEHOLDER) for u in missing))}
        captured = _read_live(trace, options, targets)
        device = _device_words(_live_fingerprint(options))
        for u in missing:
            out[u] = (f"a replay on {device} with the recorded shaders, right after commands[{index}] "
                      "(the recording holds no value there)", captured[(record.seq, index, u)])
    return out


@dataclass(frozen=True)
class Target:
    """Where an extract goes: the folder as the user named it, the flag that named it, whether an
    earlier extract there may be replaced, the trace (never written over), and the folder's names."""

    out: Path
    place: str
    force: bool
    trace: Path
    names: "SafeNames"


def _state_before(trace: Trace, options: ReplayOptions, record: FrameRecord, before: int | None, data: list[str],
                  index: int) -> tuple[dict[str, bytes], dict[str, str]]:
    """The bytes of each of ``data`` right before command ``index`` of ``record``'s frame, and per uid where
    they come from: ``recorded`` (the trace holds that state: the command is its frame's first dispatch
    and the state after the previous frame is a checkpoint's or a complete boundary's), else read from a
    replay on this device after command ``before`` of the frame (or at the end of the previous frame) and
    ``matches`` / ``differs`` from what the recording holds there, or ``unrecorded``."""
    seq = record.seq
    if before is None:
        state = dict(trace.checkpoints.get(-1, {}))
        state.update(trace.state_after(seq - 1) or {} if seq > 0 else {})
        if seq == 0 or trace.state_after(seq - 1) is not None:
            missing = [u for u in data if u not in state]
            if missing:
                raise TraceError(f"the state of {', '.join(missing)} before frame {seq} is not in the trace "
                                 f"(checkpoint {seq - 1 if seq - 1 in trace.checkpoints else -1})", file=trace.path)
            return ({u: bytes(trace.blob(state[u], what=f"the state of '{u}' before frame {seq}")) for u in data},
                    {u: "recorded" for u in data})
    targets: dict[int, FrameRecord] = {}
    recorded: dict[str, str | None] = {u: None for u in data}
    if before is not None:
        targets[seq] = FrameRecord(seq, record.pass_index, record.index, record.frame_id, {},
                                   tuple(DispatchSnapshot(before, u, PLACEHOLDER) for u in data))
        recorded.update({d.uid: d.blob for d in record.dispatches
                         if d.command == before and d.segment is None and d.uid in recorded})
        at = (seq, before)
    else:
        previous = trace.by_seq.get(seq - 1)
        if previous is None:
            raise TraceError(f"frame {seq - 1}, whose end is the state before commands[{index}], is not in the trace",
                             file=trace.path)
        targets[seq - 1] = FrameRecord(seq - 1, previous.pass_index, previous.index, previous.frame_id,
                                       {u: PLACEHOLDER for u in data})
        recorded.update({u: previous.snapshots.get(u) for u in data})
        at = (seq - 1, -1)
    captured = _read_live(trace, options, targets)

    inputs = {u: captured[(*at, u)] for u in data}
    verdicts = {u: ("unrecorded" if recorded[u] is None else
                    "matches" if content_key(inputs[u]).hex() == recorded[u] else "differs") for u in data}
    return inputs, verdicts


def _read_live(trace: Trace, options: ReplayOptions, targets: dict[int, FrameRecord],
               sizes: dict[str, int] | None = None) -> dict[tuple[int, int, str], bytes]:
    """Replay on this device (the trace's own shaders) up to the last target; (frame, command or -1 for
    the boundary, uid) -> the bytes each target asks for (a command's snapshots are taken after it, or
    after the segment they name). ``sizes``: the snapshot size of each uid the trace does not describe."""
    # lazy: vkcap reproduce imports this module, not trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers)
    import trio

    reader = _Reader()
    live = replace(options, dispatch_level=True, replace_shaders=(), first=None, last=None)

    async def run() -> None:
        with ReplaySession(trace, live) as session:
            await session.run(targets, judge=reader, sizes=sizes)

    trio.run(run)
    return reader.captured


def _recorded_outputs(trace: Trace, record: FrameRecord, index: int, writes: list[str],
                      later_writes: set[str]) -> dict[str, tuple[str, bytes | None]]:
    """uid -> (where the trace recorded it right after command ``index``, its bytes); ("", None) when it
    did not (no dispatch-level snapshot, and a later command of the frame writes it too)."""
    out: dict[str, tuple[str, bytes | None]] = {}
    for u in writes:
        shot = next((d for d in record.dispatches if d.command == index and d.segment is None and d.uid == u), None)
        if shot is not None:
            out[u] = (f"the dispatch-level snapshot after commands[{index}]", bytes(trace.blob(shot.blob, what=u)))
        elif u in record.snapshots and u not in later_writes:
            out[u] = (f"the boundary snapshot of frame {record.seq} (no later command of the frame writes it)",
                      bytes(trace.blob(record.snapshots[u], what=u)))
        else:
            out[u] = ("", None)
    return out


def _files(trace: Trace, document: dict[str, Any], resources: dict[str, dict[str, Any]],
           uids: list[str], names: "SafeNames") -> dict[str, bytes]:
    """Folder-relative name -> bytes of every file the extracted scenario reads, besides the inputs:
    shaders as the SPIR-V that ran (``shaders/UID.spv``, their source beside it), and the embedded files
    of graphs and raw data."""
    files: dict[str, bytes] = {}
    for uid in uids:
        (kind, body), = resources[uid].items()
        src = body.get("src")
        if kind == "shader" and uid in trace.spirv:
            files[shader_file(names, uid)] = bytes(trace.blob(trace.spirv[uid], what=f"SPIR-V of shader '{uid}'"))
            if isinstance(src, str) and src in trace.files and not src.endswith(".spv"):
                files[source_file(names, src)] = trace.file_bytes(src)
        elif kind not in RESTORED_KINDS and isinstance(src, str) and src in trace.files:
            files[embedded_file(names, src)] = trace.file_bytes(src)
    return files


def data_file(names: "SafeNames", uid: str, meta: dict[str, Any]) -> str:
    """The file name of resource ``uid``'s content: in ``inputs/``, ``expected/`` and as its ``dst``."""
    return names.name("data", uid, _suffix(meta))


def shader_file(names: "SafeNames", uid: str) -> str:
    """``shaders/NAME.spv``: where shader ``uid``'s SPIR-V goes."""
    return f"shaders/{names.name('shaders', uid, '.spv')}"


def source_file(names: "SafeNames", src: str, name: str | None = None) -> str:
    """``shaders/source/NAME``: where the source ``src`` goes, named after its last part (or ``name``)."""
    return f"shaders/source/{names.name('sources', src, like=Path(src).name if name is None else name)}"


def embedded_file(names: "SafeNames", src: str) -> str:
    """``files/NAME``: where the embedded file ``src`` (a graph, raw data) goes, named after its last part."""
    return f"files/{names.name('files', src, like=Path(src).name)}"


def _suffix(meta: dict[str, Any]) -> str:
    return SUFFIXES[meta["kind"]][0]


def _scenario(command: dict[str, Any], resources: dict[str, dict[str, Any]], uids: list[str], data: list[str],
              writes: list[str], meta: dict[str, dict[str, Any]], names: "SafeNames") -> dict[str, Any]:
    """The extracted scenario: the resources ``uids`` (files renamed into the folder), the one command."""
    groups: dict[Any, int] = {}
    for uid in uids:
        group = next(iter(resources[uid].values())).get("memory_group")
        if group is not None:
            key = json.dumps(group.get("id") if isinstance(group, dict) else group, sort_keys=True)
            groups[key] = groups.get(key, 0) + 1
    out = []
    for uid in uids:
        (kind, original), = resources[uid].items()
        body = json.loads(json.dumps(original))
        group = body.get("memory_group")
        if group is not None:
            key = json.dumps(group.get("id") if isinstance(group, dict) else group, sort_keys=True)
            if groups[key] < 2:  # aliasing nothing here: the resource stands alone
                del body["memory_group"]
        if uid in data:
            name = data_file(names, uid, meta[uid])
            body["src"] = f"inputs/{name}"
            body.pop("dst", None)
            if uid in writes:
                body["dst"] = name
        elif kind == "shader":
            body["src"], body["type"] = shader_file(names, uid), "SPIR-V"
            body.pop("build_options", None)
            body.pop("include_dirs", None)
        elif isinstance(body.get("src"), str):
            body["src"] = embedded_file(names, body["src"])
        out.append({kind: body})
    return {"resources": out, "commands": [json.loads(json.dumps(command))]}


def _write_folder(target: Target, scenarios: dict[str, dict[str, Any]], files: dict[str, bytes], inputs: dict[str, bytes],
                  expected: dict[str, tuple[str, bytes | None]], meta: dict[str, dict[str, Any]], result: Extracted,
                  provenance: dict[str, Any], options: ReplayOptions, divergence: Divergence | None,
                  argv: list[str] | None, readme_of: Callable[[dict[str, Any], Path], str] | None = None) -> None:
    """Build the folder beside ``target.out``, then publish it (see the module docstring); every file
    name is confined to the folder."""
    out = check_folder_target(target.out, place=target.place, force=target.force, inputs=[target.trace])
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(out)
    try:
        def put(relative: str, content: bytes) -> None:
            path = confined(staging, relative)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

        for name, content in files.items():
            put(name, content)
        (staging / "inputs").mkdir(exist_ok=True)
        for uid, content in inputs.items():
            name = data_file(target.names, uid, meta[uid])
            write_resource_file(confined(staging, f"inputs/{name}"), meta[uid], content)
        for uid, (_, recorded) in expected.items():
            if recorded is not None:
                (staging / "expected").mkdir(exist_ok=True)
                name = data_file(target.names, uid, meta[uid])
                write_resource_file(confined(staging, f"expected/{name}"), meta[uid], recorded)
        for name, scenario in scenarios.items():
            (staging / name).write_text(json.dumps(scenario, indent=1) + "\n")
        check = staging / CHECK_SCRIPT
        check.write_text(CHECK_SH)
        check.chmod(0o755)
        live = _live_fingerprint(options)
        if divergence is not None and not divergence.live:
            divergence = replace(divergence, live=live)  # bisect's live side is this device
        document = {**provenance, "extract_device": live, "resources": result.resources, "inputs": result.inputs,
                    "expected": {u: where or None for u, where in result.expected.items()},
                    "divergence": None if divergence is None else {
                        "line": divergence.line, "live": divergence.live, "segment": divergence.segment or None,
                        "replaced_shaders": {u: str(p) for u, p in divergence.replaced_shaders},
                        "found_by": divergence.found_by or None},
                    "vkcap": vkcap_version(), "command_line": argv or []}
        (staging / "vkcap.json").write_text(json.dumps(document, indent=1) + "\n")
        (staging / "README.md").write_text((readme_of or readme)(document, target.out))
        result.bytes = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
    except BaseException:
        shutil.rmtree(staging.parent, ignore_errors=True)
        raise
    publish_folder(staging, out, what="extract", version=vkcap_version(), place=target.place, force=target.force,
                   inputs=[target.trace])


def _live_fingerprint(options: ReplayOptions) -> dict[str, Any]:
    return choose_device(list_devices(), options.device).fingerprint()


def _device_words(fp: dict[str, Any]) -> str:
    """``NAME (driver DRIVER INFO)`` of a fingerprint, its trace-given text escaped (:func:`shown`)."""
    return shown(f"{fp.get('device_name', '?')} (driver {fp.get('driver_name', '?')} "
                 f"{fp.get('driver_info') or fp.get('driver_version', '')})")


def readme(doc: dict[str, Any], out: Path) -> str:
    """The extract's README: what it is, where it came from, what diverged and by how much, how to check
    it. Every text taken from the trace goes through :func:`shown` (one printable, encodable line). (A
    segment's extract has its own: :func:`replay.extract_segment.readme`.)"""
    name = shown(doc["name"])
    lines = [f"# commands[{doc['command']}] of frame {doc['frame']} of {shown(Path(doc['trace']).name)}", "",
             f"A standalone scenario of one {shown(doc['kind'])}" + (f" ({name})" if name else "") +
             f", extracted by vkcap {shown(doc['vkcap'])} from `{shown(doc['trace'])}`: frame {doc['frame']} "
             f"(frame_id {doc['frame_id']}), `commands[{doc['command']}]`.", "",
             f"- recorded on: {_device_words(doc['recorded_device'])}",
             f"- inputs read on: {_device_words(doc['extract_device'])}, by replaying the trace up to the command", ""]
    lines += readme_divergence(doc)
    differ = [shown(u) for u, v in doc["inputs"].items() if v == "differs"]
    candidate = doc.get("candidate_shaders") or {}
    lines += readme_run(out, bool(candidate)) + ["## Files", ""]
    if candidate:
        shaders = ", ".join(f"`{shown(u)}`: `{shown(c['spirv'])}` (from `{shown(c['from'])}`)" for u, c in candidate.items())
        lines += [f"- `scenario.json`: the one command and the resources it binds, with the replaced shader(s) "
                  f"(the candidate): {shaders}",
                  "- `scenario.recorded.json`: the same with the shaders as the SPIR-V that ran when the trace was "
                  "recorded (`shaders/`, sources in `shaders/source/`)"]
    else:
        lines.append("- `scenario.json`: the one command and the resources it binds; shaders as the SPIR-V that ran "
                     "(`shaders/`, sources in `shaders/source/`)")
    lines += [
        "- `inputs/`: each bound resource as it was right before the command" +
        (f" (these differ from the recording: {', '.join(differ)})" if differ else ""),
        "- `expected/`: each output right after the command: " + (", ".join(
            f"`{shown(u)}` ({shown(where)})" for u, where in doc["expected"].items() if where) or "none"),
        "- `check.sh`: runs the scenario and compares its outputs with `expected/` (above)",
        "- `vkcap.json`: the same, as data"]
    return "\n".join(lines) + "\n"


def readme_divergence(doc: dict[str, Any]) -> list[str]:
    """The README's lines on the divergence ``bisect --extract`` found (none without one): what diverged,
    by how much, between which devices and drivers, with which shaders."""
    div = doc.get("divergence")
    if not div:
        return []
    live = _device_words(div["live"])
    replaced = ", ".join(f"`{shown(u)}` replaced by `{shown(p)}`" for u, p in div["replaced_shaders"].items())
    found = f" It was found by {shown(div['found_by'])}." if div.get("found_by") else ""
    return ["## The divergence", "",
            f"`vkcap bisect` found this the first divergent dispatch between the recording "
            f"({_device_words(doc['recorded_device'])}) and {live}" + (f", with {replaced}" if replaced else "") +
            (f", in {shown(div['segment'])}" if div.get("segment") else "") + f".{found} What differs, and by how much:",
            "", f"    {shown(div['line'])}", ""]


def readme_run(out: Path, candidate: bool = False) -> list[str]:
    """The README's lines on checking the extract, with vkcap or ARM's runner."""
    folder = shown(out)
    lines = ["## Check it", "",
             f"    bash {folder}/check.sh" + ("                     # scenario.json: the candidate's shaders" if candidate else ""),
             ]
    if candidate:
        lines.append(f"    bash {folder}/check.sh --recorded          # scenario.recorded.json: the recorded shaders")
    lines += [f"    bash {folder}/check.sh --runner reference  # the same with ARM's scenario-runner", "",
              "`check.sh` runs `vkcap reproduce` (vkcap installed: `pip install vkcap`; `VKCAP=\"python -m vkcap\"` "
              "names another command): it runs the scenario into a temporary folder with `vkcap run`, or with ARM's "
              "runner (`--runner reference` or `VKCAP_RUNNER=reference`, its emulation layers set up), then compares "
              "each output with `expected/` with the tolerance and element types of the replay that found the "
              "divergence (`vkcap.json`: `compare`). Exit 0: every output matches; 1: an output diverges (the "
              "file is named); 2: bad input. `--device`, `--icd FILE.json` and `--output DIR` pass through "
              "(run it on the device and driver where the divergence was found).", "",
              "By hand: `vkcap run scenario.json --output OUT` (or `scenario_runner --scenario scenario.json "
              "--output OUT`) and compare `OUT/<uid>` with `expected/<uid>`.", ""]
    return lines


CHECK_SH = """#!/bin/sh
# Check this reproducer: run its scenario and compare the outputs with expected/.
#   check.sh                      vkcap runs scenario.json
#   check.sh --recorded           ... scenario.recorded.json (the shaders as recorded), where there is one
#   check.sh --runner reference   ARM's scenario-runner runs it (or VKCAP_RUNNER=reference)
#   also: --device INDEX|NAME, --icd FILE.json, --output DIR (keep the outputs)
# Exit 0: every output matches expected/; 1: one diverges (named); 2: bad input. See README.md.
# VKCAP names the vkcap command (default: vkcap; e.g. VKCAP="python -m vkcap").
exec ${VKCAP:-vkcap} reproduce "$(dirname "$0")" "$@"
"""
