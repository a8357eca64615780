"""``replay``: rebuild a recorded scenario from its trace alone and re-dispatch frames through the same
executor as ``run``/``record``, comparing every live snapshot with the recorded one.

A replay of frames A..B restores the state of the nearest checkpoint before A (the initial state when
there is none), executes the frames from there on, and compares only A..B. Nothing outside the
trace is read: the scenario's files are written from the trace into a temporary folder.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, final

from capture.format import kinds, records
from capture.trace import REPLAY_KINDS, FrameRecord, FramesNotJudged, Trace
from vkcore.device.context import VulkanContext
from vkcore.device.driver import use_driver
from vkcore.errors import ScenarioError, TraceError, UnsupportedDeviceFeature, UsageError
from vkcore.exec.executor import Event, FrameFinished, FrameSnapshot, FrameStarted, StopRequest, execute
from vkcore.exec.opening import ContextPool, DeviceRequest, OpenOptions, open_session, optional_extensions
from vkcore.exec.plan import Frame, Plan
from vkcore.paths import read_regular
from vkcore.scenario.confine import check_confined
from vkcore.resources.kinds import KINDS as RESOURCE_KINDS
from vkcore.scenario.model import Scenario, Shader
from vkcore.scenario.load import load_scenario
from vkcore.exec.session import Session
from vkcore.resources.staging import CaptureLayout, build_layout
from vkcore.shaders.compile import is_spirv_binary, load_shader

from .progress_file import ProgressFile
from .materialise import fresh_name, materialise, write_new_file
from .options import ReplayOptions
from .reading import dtype_name, effective_policy, identical_in, reading
from .results import DIVERGED, Comparison, FrameResult, identical
from .tolerances import resource_shape

if TYPE_CHECKING:
    from capture.views import View

NOTHING = CaptureLayout(())


@dataclass
class ReplayReport:
    trace: Path
    device: dict[str, Any]
    recorded_device: dict[str, Any]
    frames: list[FrameResult] = field(default_factory=list)
    executed: int = 0  # frames executed (from the checkpoint on)
    started_from_checkpoint: int = -1

    @property
    def diverged(self) -> bool:
        return any(f.diverged for f in self.frames)

    @property
    def first_divergence(self) -> FrameResult | None:
        return next((f for f in self.frames if f.diverged), None)


def rebuild_scenario(trace: Trace, folder: Path, replace_shaders: tuple[tuple[str, Path], ...] = ()) -> Scenario:
    """Write the trace's files and portable scenario into ``folder`` (:mod:`replay.materialise`) and load
    it from there, confined to it: every path in it relative and inside ``folder``, checked before anything
    is written or any file looked at (:mod:`vkcore.scenario.confine`), and its ``dst`` dropped. Inputs
    that checkpoint -1 supersedes are written as placeholders (:func:`replay.materialise.write_placeholder`): the scenario
    validates, but loading its inputs from ``folder`` would read zeros.

    ``replace_shaders`` swaps shader sources (``.spv`` as SPIR-V, anything else as GLSL) by uid. Each
    is checked here, and compiled: a uid given twice or not in the trace, a missing file, a file that
    is no SPIR-V, GLSL that does not compile, all raise :class:`UsageError` naming the flag and the
    user's file (never the temporary copy).
    """
    try:
        document = json.loads(trace.portable_json)
    except ValueError:
        raise TraceError("the trace's scenario is not valid JSON", file=trace.path) from None
    if not isinstance(document, dict):
        raise TraceError("the trace's scenario is not a JSON object", file=trace.path)
    drop_outputs(document)
    try:  # before anything is written: the trace's own paths, as it stores them (see vkcore.scenario.confine)
        check_confined(document, trace.path)
    except ScenarioError as exc:
        raise TraceError(exc.message, file=trace.path, place=exc.place) from None
    unread = restored_inputs(document, trace.checkpoints.get(-1, {}))
    materialise(trace, folder, unread)
    # vkcap's own files go beside the trace's, under names none of the trace's files has.
    spirv_folder, replaced_folder, scenario_name = (fresh_name(n, trace.files) for n in ("spirv", "replaced", "scenario.json"))
    resources = document.get("resources")
    shaders = {item["shader"]["uid"]: item["shader"] for item in (resources if isinstance(resources, list) else [])
               if isinstance(item, dict) and isinstance(item.get("shader"), dict) and isinstance(item["shader"].get("uid"), str)}
    # The SPIR-V that ran is in the trace: replay it as is (no compiler needed, nothing recompiled);
    # only replaced shaders are compiled again.
    replaced = {uid for uid, _ in replace_shaders}
    for n, (uid, key) in enumerate(sorted(trace.spirv.items())):
        if uid in shaders and uid not in replaced:
            name = f"{spirv_folder}/{n}.spv"
            write_new_file(trace, folder, name, trace.blob(key, what=f"SPIR-V of shader '{uid}'"))
            body = shaders[uid]
            body["src"], body["type"] = name, "SPIR-V"
            body.pop("build_options", None)
            body.pop("include_dirs", None)
    given: dict[str, Path] = {}
    for k, (uid, path) in enumerate(replace_shaders):
        if uid in given:
            raise UsageError(f"--replace-shader {uid}={path}: shader '{uid}' is already replaced (by {given[uid]}): give each uid once")
        given[uid] = path
        if uid not in shaders:
            raise UsageError(f"--replace-shader {uid}={path}: the trace has no shader '{uid}' (it has: {', '.join(sorted(shaders)) or 'none'})")
        code = read_replacement(uid, path)
        spirv = path.suffix == ".spv"
        if spirv:
            check_spirv_code(uid, path, code)
        name = f"{replaced_folder}/{k}/{copy_name(path)}"  # the user's file name: the compiler's messages name it
        write_new_file(trace, folder, name, code)
        shaders[uid]["src"] = name
        shaders[uid]["type"] = "SPIR-V" if spirv else "GLSL"
    scenario_file = write_new_file(trace, folder, scenario_name, json.dumps(document).encode())
    try:
        scenario = load_scenario(scenario_file, confined=True)
    except ScenarioError as exc:
        raise TraceError(f"the trace's scenario does not load: {exc.message}", file=trace.path, place=exc.place) from None
    for uid, path in given.items():
        compile_replacement(scenario, uid, path)
    return scenario


def drop_outputs(document: dict[str, Any]) -> None:
    """Remove every resource's ``dst`` from a trace's portable scenario: a rebuilt scenario writes no
    outputs (``extract`` names its own), and a recording keeps the ``dst`` its user wrote, absolute or
    not, which must neither be refused nor ever reach a path."""
    resources = document.get("resources")
    for item in resources if isinstance(resources, list) else ():
        for body in item.values() if isinstance(item, dict) else ():
            if isinstance(body, dict):
                body.pop("dst", None)


def copy_name(path: Path) -> str:
    """A safe file name for the temporary copy of a replacement shader: ``path``'s own name, characters
    other than letters, digits, ``-``, ``_`` and ``.`` replaced (the compiler's messages then name it)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.name).lstrip(".")
    return safe or f"shader{path.suffix}"


#: The largest ``--replace-shader`` file read (a shader source or SPIR-V module).
REPLACEMENT_LIMIT = 64 << 20


def read_replacement(uid: str, path: Path) -> bytes:
    """The bytes of ``--replace-shader`` file ``path``: a regular file of at most :data:`REPLACEMENT_LIMIT`
    bytes (:func:`vkcore.paths.read_regular`: a FIFO or a device is refused without blocking), else
    :class:`UsageError` naming the flag."""
    try:
        return read_regular(path, REPLACEMENT_LIMIT)
    except FileNotFoundError:
        raise UsageError(f"--replace-shader {uid}={path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--replace-shader {uid}={path}: is a folder, not a file") from None
    except OSError as exc:
        raise UsageError(f"--replace-shader {uid}={path}: cannot read: {exc.strerror or exc}") from None
    except ValueError:
        raise UsageError(f"--replace-shader {uid}={path}: the path holds a NUL character") from None


def check_spirv_code(uid: str, path: Path, code: bytes) -> None:
    """:class:`UsageError` naming the flag and ``path`` unless ``code`` is a SPIR-V binary (magic, length)."""
    if not is_spirv_binary(code):
        raise UsageError(f"--replace-shader {uid}={path}: not a SPIR-V binary (bad magic or length)")


def compile_replacement(scenario: Scenario, uid: str, path: Path) -> None:
    """Load replacement shader ``uid`` (compiling GLSL) now, so that a broken one is reported as
    ``--replace-shader UID=PATH: ...`` and never by the temporary copy's name. The SPIR-V is cached
    by content: the session's own load of it compiles nothing again."""
    spec = scenario.by_uid[uid]
    assert isinstance(spec, Shader)
    copy = str(scenario.src_path(spec.src))
    try:
        load_shader(scenario, spec)
    except ScenarioError as exc:
        raise UsageError(f"--replace-shader {uid}={path}: {exc.message.replace(copy, str(path))}") from None


def rebuilt_scenario_error(exc: ScenarioError | UnsupportedDeviceFeature, trace: Trace,
                           replace_shaders: tuple[tuple[str, Path], ...]) -> ScenarioError | UnsupportedDeviceFeature:
    """``exc``, raised for the scenario rebuilt in a temporary folder, told about the trace instead (the
    temporary file is gone when the user reads it), and naming the ``--replace-shader`` files in use.
    A device's refusal (a binding this device cannot serve) is told the same way."""
    replaced = ", ".join(f"{uid}={path}" for uid, path in replace_shaders)
    message = f"with --replace-shader {replaced}: {exc.message}" if replaced else exc.message
    return type(exc)(message, file=trace.path, place=exc.place)


#: Resource kinds whose initial state a replay restores from checkpoint -1 instead of reading ``src``.
RESTORED_KINDS = frozenset(k.name for k in RESOURCE_KINDS.values() if k.restorable)


def restored_inputs(document: dict[str, Any], initial_state: dict[str, str]) -> set[str]:
    """The ``src`` files of a portable scenario that a replay never reads: every resource naming
    them is a buffer, image or tensor whose initial state checkpoint -1 holds (``raw_data``, shaders
    and graphs are read when the session is built, so their files are never in the result)."""
    restored: set[str] = set()
    read: set[str] = set()
    for item in document.get("resources", []):
        if not (isinstance(item, dict) and len(item) == 1):
            continue
        (kind, body), = item.items()
        src = body.get("src") if isinstance(body, dict) else None
        if isinstance(src, str) and src:
            (restored if kind in RESTORED_KINDS and body.get("uid") in initial_state else read).add(src)
    return restored - read


@dataclass(frozen=True)
class LiveSnapshot:
    """One snapshot a replay took, as a :class:`Judge` sees it."""

    seq: int  # the frame's
    uid: str
    live: memoryview  # the live bytes, valid only during the judgement (the staging slot is reused after)
    recorded_key: str  # the recorded blob's content key ("": nothing was recorded for it)
    what: str  # labels it in messages ("frame 7, command 3, resource 'out'")
    command: int | None = None  # dispatch level: taken right after this command
    segment: int | None = None  # ... or after this segment of its graph
    module: str = ""  # that segment's module


class Judge(Protocol):
    """What a replay does with each snapshot its targets ask for: compare it with the recording
    (:class:`AgainstRecording`, the default), keep its bytes (trim, extract, probe), or measure it against
    an earlier run (auto). Called from the compare threads, several snapshots at once."""

    def judge(self, shot: LiveSnapshot) -> Comparison:
        """The verdict on ``shot``, reported in its frame's result."""


class AgainstRecording:
    """The replay's judge: each snapshot compared with the recorded one, as ``options`` say (dtypes,
    shapes, tolerances, heatmaps)."""

    def __init__(self, trace: Trace, options: ReplayOptions) -> None:
        self.trace = trace
        self.options = options
        self._policy_with_dtypes = effective_policy(options)

    def reading(self, uid: str) -> "str | View":
        """How snapshots of ``uid`` are compared: a dtype, or the shader's view (:func:`replay.typed.reading`)."""
        return reading(self.trace, uid, self._policy_with_dtypes)

    def shape_of(self, uid: str) -> tuple[int, ...] | None:
        return resource_shape(self.trace, uid, self.options.shapes)

    def judge(self, shot: LiveSnapshot) -> Comparison:
        """Compare ``shot.live`` with the recorded blob."""
        uid, live = shot.uid, shot.live
        how = self.reading(uid)
        if records.content_key(live).hex() == shot.recorded_key:
            # The key is the recorded bytes' xxh3-128: equal keys, equal bytes (what deduplication
            # relies on too). Hashing is cheaper than reading and decoding the recorded blob.
            return identical_in(uid, len(live), how)
        # lazy: vkcap replay imports this module, not replay.typed (with numpy)
        from .typed import compare_as  # numpy: loaded by the first snapshot that differs, not at start-up

        recorded = self.trace.blob(shot.recorded_key, what=shot.what)
        shape = self.shape_of(uid)
        policy = self.options.tolerances
        result = compare_as(uid, recorded, live, how, policy, shape=shape, top=policy.top)
        dtype = dtype_name(how)
        if result.diverged and self.options.heatmap_dir is not None and not result.size_mismatch:
            # lazy: vkcap replay imports this module, not replay.heatmap (with numpy)
            from .heatmap import draw_comparison, heatmap_name  # both sides too with value_maps (--html)

            name = heatmap_name(shot.seq, uid if shot.command is None else f"{uid}-{shot.command}")
            result.extras.update(draw_comparison(self.options.heatmap_dir, name, recorded, bytes(live), dtype, shape,
                                                 shot.what, sides=self.options.value_maps))
        return result


@final
class Comparer:
    """Frame consumer of a replay: captures what the targets ask for in each compared frame and hands
    every snapshot to its ``judge`` (default :class:`AgainstRecording`), collecting the verdicts by frame.

    ``sizes``: the snapshot size of each uid the trace does not describe (a graph's intermediates)."""

    def __init__(self, trace: Trace, plan: Plan, targets: dict[int, FrameRecord], options: ReplayOptions,
                 on_frame: Callable[[FrameResult], None] | None = None, *, judge: Judge | None = None,
                 sizes: dict[str, int] | None = None, stop_at_first_divergence: bool = False) -> None:
        self.trace = trace
        self.plan = plan
        self.targets = targets
        self.options = options
        self.on_frame = on_frame
        self.judge = judge or AgainstRecording(trace, options)
        self.sizes = dict(sizes or {})
        self.stop_at_first_divergence = stop_at_first_divergence
        self.first_divergent: int | None = None  # set only when stopping at the first divergence
        self._results: list[FrameResult] = []
        self._reported = threading.Lock()  # on_frame sees one result at a time
        # Frames are compared in parallel (a diverged 48 MiB snapshot takes about a second), each holding
        # its staging slot until done; in frame order when stopping at the first divergence.
        self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="vkcap-compare")
        self._layouts: dict[int, CaptureLayout] = {}

    def _size(self, uid: str) -> int:
        return self.sizes[uid] if uid in self.sizes else self.trace.resources[uid]["size"]

    def _entries(self, record: FrameRecord) -> list[tuple[Any, ...]]:
        entries: list[tuple[Any, ...]] = []
        if self.options.dispatch_level:
            entries += [(d.uid, self._size(d.uid), d.command, d.segment) for d in record.dispatches]
        entries += [(uid, self._size(uid), None) for uid in record.snapshots]
        return entries

    def _layout(self, seq: int) -> CaptureLayout:
        if seq not in self._layouts:
            self._layouts[seq] = build_layout(self._entries(self.targets[seq]))
        return self._layouts[seq]

    def slot_size(self, session: Session) -> int:
        return max((self._layout(s).size for s in self.targets), default=0)

    def layout(self, frame: Frame, seq: int) -> CaptureLayout:
        return self._layout(seq) if seq in self.targets else NOTHING

    def _wanted(self, seq: int) -> bool:
        """Whether frame ``seq`` is compared: a target, and not after a divergence that ends the run."""
        return seq in self.targets and (self.first_divergent is None or seq < self.first_divergent)

    def consume(self, snapshot: FrameSnapshot) -> Future[None] | None:
        """Compare a target frame: in the compare threads, or here, in frame order, when stopping at the
        first divergence, so that frames still in flight behind a divergent one are never compared
        (reading and comparing a diverged snapshot costs milliseconds to seconds)."""
        if not self._wanted(snapshot.seq):
            return None
        if self.stop_at_first_divergence:
            self._compare_and_report(snapshot)
            return None
        return self._pool.submit(self._compare_and_report, snapshot)

    def _compare_and_report(self, snapshot: FrameSnapshot) -> None:
        result = self._compare_frame(snapshot)
        with self._reported:
            if result.diverged and self.stop_at_first_divergence:
                self.first_divergent = snapshot.seq
            self._results.append(result)
            if self.on_frame is not None:
                self.on_frame(result)

    def close(self) -> None:
        """Let the compare threads go (after the run: nothing is being compared then)."""
        self._pool.shutdown(wait=True)

    @property
    def results(self) -> list[FrameResult]:
        """The compared frames in frame order; when stopping at the first divergence, none after it
        (which frames were still in flight then depends on timing, so they are not reported)."""
        last = self.first_divergent
        return sorted((r for r in self._results if last is None or r.seq <= last), key=lambda r: r.seq)

    def _compare_frame(self, snapshot: FrameSnapshot) -> FrameResult:
        record = self.targets[snapshot.seq]
        by_dispatch = {(d.command, d.segment, d.uid): d for d in record.dispatches}
        result = FrameResult(snapshot.seq, record.frame_id, [])
        for item in snapshot.layout.items:
            live = snapshot.slot.view(item)
            if item.after_command is None:
                what = f"frame {snapshot.seq}, resource '{item.uid}'"
                shot = LiveSnapshot(snapshot.seq, item.uid, live, record.snapshots[item.uid], what)
                result.comparisons.append(self.judge.judge(shot))
            else:
                recorded = by_dispatch[(item.after_command, item.segment, item.uid)]
                where = f"command {item.after_command}" + (f", segment {item.segment}" if item.segment is not None else "")
                what = f"frame {snapshot.seq}, {where}, resource '{item.uid}'"
                shot = LiveSnapshot(snapshot.seq, item.uid, live, recorded.blob, what, item.after_command, item.segment,
                                    recorded.module)
                comparison = self.judge.judge(shot)
                if item.segment is not None:
                    comparison.extras.update(segment=item.segment, module=recorded.module)
                result.dispatches.append((item.after_command, comparison))
        return result


def resource_dtype(trace: Trace, uid: str, options: ReplayOptions) -> str:
    """The element type snapshots of ``uid`` are read as: ``--dtype`` / the tolerance file, else the
    resource's format, else the shader's view (its scalar type; a struct view's comparisons are typed field
    by field, :func:`replay.typed.compare_in_view`, and read as bytes where one flat type is needed), else
    the default."""
    how = reading(trace, uid, effective_policy(options))
    name = dtype_name(how)
    return "bytes" if name == "struct" else name


def target_frames(trace: Trace, first: int | None, last: int | None) -> dict[int, FrameRecord]:
    if not trace.frames:
        raise TraceError("the trace holds no complete frame", file=trace.path)
    lo = trace.frames[0].seq if first is None else first
    hi = trace.frames[-1].seq if last is None else last
    chosen = {f.seq: f for f in trace.frames if lo <= f.seq <= hi}
    if not chosen:
        raise UsageError(f"no recorded frame in {lo}-{hi} (the trace has frames {trace.frames[0].seq}-{trace.frames[-1].seq})")
    return chosen


def restore_state(session: Session, trace: Trace, after: int) -> None:
    """Set every resource to its recorded state after frame ``after`` (-1: the initial state), which
    :meth:`Trace.state_after` must know."""
    initial = trace.checkpoints.get(-1)
    if initial is None:
        trace.require_intact(frozenset({kinds.CHECKPOINT}), "restore the initial state")
        raise TraceError("the trace holds no initial state (checkpoint -1)", file=trace.path)
    state = dict(initial)
    if after >= 0:
        known = trace.state_after(after)
        if known is None:
            raise TraceError(f"the trace does not hold the complete state after frame {after}", file=trace.path)
        state.update(known)
    what = "checkpoint" if after in trace.checkpoints else "frame"
    resources = session.resources
    assert resources is not None
    for uid, key in state.items():
        if uid in resources:
            session.restore(uid, trace.blob(key, what=f"{what} {after}, resource '{uid}'"))


def device_as_recorded(recorded: dict[str, Any], scenario: Scenario, options: ReplayOptions) -> DeviceRequest:
    """The device ``options`` name, opened as the recording's was, as far as its fingerprint ``recorded`` says:
    robust buffer and image access when the recording had robust buffer access
    (``--enable-robustness-features`` on a device that has it), and the optional extensions the recording
    could have enabled but did not (``--disable-extension``, or a device without them) left disabled, so that
    out-of-bounds accesses and the frames' submission behave as they did when recorded. A trace whose
    fingerprint does not list the enabled extensions disables none."""
    enabled = recorded.get("extensions_enabled")
    disabled = tuple(e for e in optional_extensions(scenario) if e not in enabled) if isinstance(enabled, list) else ()
    return DeviceRequest(device=options.device, emulation=options.emulation,  # type: ignore[arg-type]
                         disabled_extensions=disabled, robust=recorded.get("robust_buffer_access") is True)


class ReplaySession:
    """A trace's scenario rebuilt, with its device and Vulkan session, ready to replay frame ranges.

    One session serves many replays (bisection probes): each restores the state of its checkpoint
    first, so runs are independent; pipelines, command buffers and descriptors are built once.
    Use as a context manager.
    """

    def __init__(self, trace: Trace, options: ReplayOptions, workdir: Path | None = None,
                 contexts: ContextPool | None = None) -> None:
        """``contexts``: Vulkan contexts to take one from, and to leave a new one in, instead of opening and
        closing one (a suite's worker keeps its device across traces); the caller closes them."""
        self.trace = trace
        self.options = options
        self._tmp = tempfile.TemporaryDirectory(prefix="vkcap-replay-")
        self._closing = ExitStack()
        try:
            self._closing.callback(self._tmp.cleanup)
            trace.require_intact(REPLAY_KINDS, "rebuild the scenario to replay it")
            for damaged in trace.damaged:
                logging.getLogger("vkcap").warning("%s: %s; replaying the rest", trace.path, damaged.describe())
            scenario = rebuild_scenario(trace, Path(workdir or self._tmp.name), options.replace_shaders)
            opening = OpenOptions(device=device_as_recorded(trace.fingerprint, scenario, options),
                                  capture_all=bool(trace.header.get("capture_all")))
            try:
                self._opened = self._closing.enter_context(open_session(scenario, opening, contexts=contexts))
            except (ScenarioError, UnsupportedDeviceFeature) as exc:
                if exc.file is None and not exc.place:
                    raise
                raise rebuilt_scenario_error(exc, trace, options.replace_shaders) from None
        except BaseException:
            self._closing.close()
            raise

    @property
    def plan(self) -> Plan:
        assert self._opened.plan is not None
        return self._opened.plan

    @property
    def session(self) -> Session | None:
        """The Vulkan session, until closed."""
        return self._opened.session

    @property
    def ctx(self) -> VulkanContext | None:
        """The Vulkan context, until closed."""
        return self._opened.ctx

    def __enter__(self) -> "ReplaySession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the session, its context (unless pooled), and remove the rebuilt scenario's folder."""
        self._closing.close()

    async def run(self, targets: dict[int, FrameRecord], *, on_frame: Callable[[FrameResult], None] | None = None,
                  judge: Judge | None = None, sizes: dict[str, int] | None = None,
                  stop_at_first_divergence: bool = False, start: int | None = None) -> ReplayReport:
        """Restore the recorded state after frame ``start`` (default: the nearest checkpoint before the
        first target), execute to the last target, hand the targets' snapshots to ``judge`` (default: compare
        them with the recording; ``sizes``: see :class:`Comparer`). With
        ``stop_at_first_divergence`` no frame is submitted after a divergent one is seen, and none after
        the first divergent frame is compared or reported."""
        assert self.session is not None and self.ctx is not None
        checkpoint = self.trace.nearest_checkpoint(min(targets)) if start is None else start
        restore_state(self.session, self.trace, checkpoint)
        stop = StopRequest()

        def seen(result: FrameResult) -> None:
            if stop_at_first_divergence and result.diverged:
                stop.set()
            if on_frame is not None:
                on_frame(result)

        comparer = Comparer(self.trace, self.plan, targets, self.options, seen, judge=judge, sizes=sizes,
                            stop_at_first_divergence=stop_at_first_divergence)
        report = ReplayReport(self.trace.path, self.ctx.fingerprint(), self.trace.fingerprint, started_from_checkpoint=checkpoint)
        progress = ProgressFile(self.options.progress_file) if self.options.progress_file else None

        def on_event(event: Event) -> None:
            if progress is not None and isinstance(event, FrameStarted):
                progress.frame_started(event.seq)
            elif progress is not None and isinstance(event, FrameFinished):
                progress.frame_finished(event.seq)

        try:
            report.executed = await execute(
                self.session, consumer=comparer, seqs=range(checkpoint + 1, max(targets) + 1),
                frame_timeout_s=self.options.frame_timeout_s, stop=stop, on_event=on_event,
            )
        finally:
            comparer.close()
            if progress is not None:
                progress.close()
        report.frames = comparer.results
        return report


async def replay_trace(trace: Trace, options: ReplayOptions, *, on_frame: Callable[[FrameResult], None] | None = None,
                       workdir: Path | None = None, judge: Judge | None = None,
                       targets: dict[int, FrameRecord] | None = None,
                       contexts: ContextPool | None = None) -> ReplayReport:
    """Replay ``options.first..last`` of an open trace (or the frames ``targets`` describe: what to
    capture and compare in each) in a session of its own (on a context of ``contexts``, when given: see
    :class:`ReplaySession`); see the module docstring."""
    targets = targets or target_frames(trace, options.first, options.last)
    with ReplaySession(trace, options, workdir, contexts) as replay_session:
        return await replay_session.run(targets, on_frame=on_frame, judge=judge,
                                        stop_at_first_divergence=options.stop_at_first_divergence)


def replay(options: ReplayOptions, on_frame: Callable[[FrameResult], None] | None = None, *,
           opened: Trace | None = None, contexts: ContextPool | None = None) -> ReplayReport:
    """Replay ``options.trace`` (``opened``, when the caller has it open already) on the driver
    ``options.icd`` names (on a context of ``contexts``, when given); see the module docstring.
    Frames of the range lost to damaged records are not judged: the others are replayed, then
    :class:`FramesNotJudged` (exit 1) names them, with what the replay found of the rest."""
    # lazy: vkcap reproduce imports this module, not trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers)
    import trio

    use_driver(options.icd)
    with Trace.reuse_or_open(options.trace, opened) as trace:
        report = trio.run(lambda: replay_trace(trace, options, on_frame=on_frame, contexts=contexts))
        not_judged = trace.not_judged(options.first, options.last)
    if not_judged:
        first = report.first_divergence
        found = f"first divergence at frame {first.seq}" if first is not None else "all within tolerance"
        raise FramesNotJudged(f"{not_judged}; of the {len(report.frames)} frame(s) replayed: {found}", file=options.trace)
    return report


__all__ = ["DIVERGED", "ReplayOptions", "ReplayReport", "FrameResult", "replay", "replay_trace", "rebuild_scenario"]
