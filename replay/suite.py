"""``vkcap suite run``: many traces replayed by a few long-lived worker processes, each outcome judged
against the expectation of the device it ran on.

A suite is folders of ``.vkt`` files (each expected to replay within tolerance) and/or manifests
(``suite.toml``)::

    [[traces]]
    path = "traces/*.vkt"          # a path or a glob, relative to the manifest

    tolerance = { ulp = 4 }        # optional: the trace's own tolerance (or a preset name: "torch")
    resources.out = { dtype = "float32", atol = 2e-6 }   # optional: per resource (or UID.FIELD)

    [[traces.expect]]
    device = "llvmpipe*"           # fnmatch on the device name
    driver = ">=22.3, <23"         # optional: a driver-version range (comparisons joined by commas)
    status = "diverged"            # pass | diverged | flaky | skip | crash
    frame = 12                     # optional: the first divergent frame it must still be
    resources = ["out"]            # optional: the only resources that may diverge
    reason = "lavapipe rounds sin() differently"
    measured = "out (float32): 12 beyond ulp 4, up to 9 ULP"   # what suite bless measured
    link = "https://example.com/issue/1"

(Tolerances and dtypes: :mod:`replay.suite_tolerances`.)

With ``--device-pool`` the devices share one queue: each trace is replayed once, on whichever device is
free, its result naming that device (name, deviceUUID, index).

Workers (``-j N``) are child processes that replay trace after trace through the same replay path as
``vkcap replay`` (:func:`replay.replayer.replay`), one JSON line per trace. A worker that dies (a driver
crash) is replaced, and the trace it was replaying is reported as ``crash``. With ``--retries K`` a trace
that fails is replayed again: passing on a retry makes it ``flaky``.

Outcomes, judged against the expectation (default ``pass``): ``pass``; ``expected`` (it diverged, or
crashed, as expected); ``fixed`` (expected to diverge, it now passes: the label can go); ``flaky``;
``fail`` (it diverged or crashed, unexpectedly); ``skip``. Each result says why
(:func:`replay.verdicts.explain`: the expected and actual first frames and resources, and what each
resource's comparison found).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from vkcore.bounded_numbers import check_number
from vkcore.errors import UsageError, VkcapError
from vkcore.outputs import write_atomic
from vkcore.paths import NotARegularFile, check_regular
from vkcore.safe_text import shown

from .report import marked_junit
from .suite_tolerances import TraceTolerance, entry_tolerance
from .verdicts import diverged_uids, explain, resource_line
from .worker_protocol import Done, Failed, Hello, ProtocolError, ReplayRequest, decode, encode

if TYPE_CHECKING:
    from .options import ReplayOptions
    from .worker_protocol import Done, Failed, ReplayRequest

STATUSES = ("pass", "diverged", "flaky", "skip", "crash")


@dataclass(frozen=True)
class Expectation:
    device: str  # an fnmatch pattern of device names
    status: str
    reason: str = ""
    link: str = ""
    frame: int | None = None  # for diverged/crash: the first divergent frame it must still be
    driver: str = ""  # a driver-version range: ">=580.100, <590" (every comparison must hold)
    resources: tuple[str, ...] = ()  # for diverged: the only resources that may diverge (empty: any)

    def matches(self, device: str, driver: str) -> bool:
        return fnmatch.fnmatch(device, self.device) and in_range(driver, self.driver)


_COMPARE = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}


# a version's numbers: at most 18 digits each (a driver's are a few), so that none is a huge integer
_VERSION = r"(?<!\d)\d{1,18}(?:\.\d{1,18})*(?!\d)"


def version_key(text: str) -> tuple[int, ...]:
    """``"580.159.04"`` -> (580, 159, 4); ``"Mesa 22.3.6"`` -> (22, 3, 6): the numbers, compared as tuples."""
    match = re.search(_VERSION, text)
    return tuple(int(p) for p in match.group().split(".")) if match else ()


def parse_range(text: str, where: str) -> list[tuple[str, tuple[int, ...]]]:
    """``">=580.100, <590"`` as (operator, version) pairs; a :class:`UsageError` at ``where`` otherwise."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        op = next((o for o in _COMPARE if part.startswith(o)), None)  # two-character operators first
        if op is None or not re.fullmatch(rf"\s*{_VERSION}", part[len(op):]):
            shown = repr(text) if len(text) <= 60 else repr(text[:57]) + "..."
            raise UsageError(f"{where}: a driver-version range such as \">=580.100, <590\", got {shown}")
        out.append((op, version_key(part[len(op):])))
    return out


def driver_of(device: dict[str, Any]) -> str:
    """The version a manifest's ``driver`` range is compared with, from a device fingerprint: the driver's
    own text where it holds a version (NVIDIA: ``580.159.04``; Mesa: ``Mesa 22.3.6``), else the packed
    ``driverVersion`` (lavapipe's is ``0.0.1``, meaningless)."""
    info = str(device.get("driver_info", ""))
    return info if version_key(info) else str(device.get("driver_version", ""))


def in_range(driver: str, text: str) -> bool:
    """Whether the driver version ``driver`` lies in the range ``text`` (empty: any)."""
    if not text:
        return True
    have = version_key(driver)
    return bool(have) and all(_COMPARE[op](have, v) for op, v in parse_range(text, "driver"))


@dataclass(frozen=True)
class SuiteTrace:
    path: Path
    expectations: tuple[Expectation, ...] = ()
    flags: tuple[str, ...] = ()  # the trace's own tolerance flags (--ulp 4, --tolerance preset:torch, ...)
    tolerance: TraceTolerance | None = None  # what its manifest entry set (flags carries it)

    def expected_on(self, device: str, driver: str = "") -> Expectation:
        for e in self.expectations:
            if e.matches(device, driver):
                return e
        return Expectation("*", "pass")


@dataclass
class TraceResult:
    trace: str
    device: str
    status: str  # pass | expected | fixed | flaky | fail | skip
    outcome: str  # what the replay found: identical | within | diverged | crash | error | skipped
    expected: str
    frames: int = 0
    seconds: float = 0.0
    attempts: int = 1
    first_divergence: int | None = None
    detail: str = ""
    reason: str = ""
    spread: list[dict[str, Any]] = field(default_factory=list)  # with retries: what each attempt saw
    page: str = ""  # the replay's own HTML page (suite run --html or --results), when it wrote one
    driver: str = ""  # the driver version of the device it ran on
    host: str = ""  # the fleet node it ran on (its vkcap_node name, else its hostname); "" in this process
    expected_frame: int | None = None  # the expectation's first divergent frame, when it names one
    expected_resources: list[str] = field(default_factory=list)  # the expectation's resources, when it names some
    resources: list[dict[str, Any]] = field(default_factory=list)  # each resource's verdict (replay.verdicts)
    verdict: str = ""  # why the status: replay.verdicts.explain
    device_uuid: str = ""  # the exact device it ran on (deviceUUID, hex); "" in results of older vkcaps
    device_index: int | None = None  # that device's index on its host
    pci_bus: str = ""  # and its PCI address, where the driver gives it

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def device_key(self) -> tuple[str, str, int]:
        """The exact device: two identical GPUs have one name but two keys."""
        return self.device, self.device_uuid, -1 if self.device_index is None else self.device_index

    @property
    def device_label(self) -> str:
        """``NAME [UUID8]``, as reports name the device (the name alone for results without a UUID)."""
        return device_label(self.device, self.device_uuid)


def device_label(name: str, uuid: str) -> str:
    return f"{name} [{uuid[:8]}]" if uuid else name


def device_labels(results: list[TraceResult]) -> dict[tuple[str, str, int], str]:
    """Each exact device of ``results`` (:attr:`TraceResult.device_key`) as reports name it: its label,
    and ``#INDEX`` after it where two devices share name and UUID (one driver listed twice)."""
    keys = sorted({r.device_key for r in results}, key=str)
    labels = {k: device_label(k[0], k[1]) for k in keys}
    shared = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {k: f"{label} #{k[2]}" if label in shared and k[2] >= 0 else label for k, label in labels.items()}


#: The keys a manifest may hold, at each level. An unknown key is an error, not a warning: a misspelt
#: ``tolerence`` or ``expected`` silently ignored would judge traces by rules nobody wrote.
MANIFEST_KEYS = ("traces",)
ENTRY_KEYS = ("path", "tolerance", "resources", "expect")
EXPECT_KEYS = ("device", "status", "driver", "frame", "resources", "reason", "measured", "link")
MAX_EXPECTED_RESOURCES = 4096


def _table_keys(table: Any, known: tuple[str, ...], manifest: Path, place: str) -> dict[str, Any]:
    """``table`` (a TOML table at ``place``), checked to hold only ``known`` keys."""
    if not isinstance(table, dict):
        raise UsageError(f"must be a table, got {_shown(table)}", file=manifest, place=place)
    for key in table:
        if key not in known:
            raise UsageError(f"unknown key {key!r} (known: {', '.join(known)})", file=manifest,
                             place=f"{place}.{key}" if place else key)
    return table


def _list_of_tables(value: Any, manifest: Path, place: str, example: str) -> list[Any]:
    if not isinstance(value, list):
        raise UsageError(f"must be an array of tables ({example}), got {_shown(value)}", file=manifest, place=place)
    return value


def _string(table: dict[str, Any], key: str, manifest: Path, place: str, default: str = "") -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise UsageError(f"must be a string, got {_shown(value)}", file=manifest, place=f"{place}.{key}")
    return value


def _shown(value: Any) -> str:
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _expectations(table: Any, manifest: Path, where: str) -> tuple[Expectation, ...]:
    out = []
    for i, e in enumerate(_list_of_tables(table, manifest, f"{where}.expect", "[[traces.expect]]")):
        place = f"{where}.expect[{i}]"
        e = _table_keys(e, EXPECT_KEYS, manifest, place)
        if not isinstance(e.get("device"), str) or e.get("status") not in STATUSES:
            raise UsageError(f"needs device (a pattern) and status (one of: {', '.join(STATUSES)})",
                             file=manifest, place=place)
        frame = e.get("frame")
        if frame is not None:
            frame = int(check_number("frame", frame, file=str(manifest), place=f"{place}.frame"))
        driver = e.get("driver", "")
        if not isinstance(driver, str):
            raise UsageError(f"a driver-version range such as \">=580.100, <590\", got {_shown(driver)}",
                             file=manifest, place=f"{place}.driver")
        if driver:
            parse_range(driver, f"{manifest}: {place}.driver")
        link = _string(e, "link", manifest, place)
        if link and not link.startswith(("https://", "http://")):
            raise UsageError(f"must be an http(s) URL, got {_shown(link)}", file=manifest, place=f"{place}.link")
        _string(e, "measured", manifest, place)
        resources = e.get("resources", [])
        if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources) \
                or len(resources) > MAX_EXPECTED_RESOURCES:
            raise UsageError(f"must be a list of resource uids, got {_shown(resources)}", file=manifest,
                             place=f"{place}.resources")
        out.append(Expectation(e["device"], e["status"], _string(e, "reason", manifest, place), link, frame, driver,
                               tuple(resources)))
    return tuple(out)


def read_manifest(manifest: Path) -> dict[str, Any]:
    """The TOML document of ``manifest``, read as untrusted (:func:`replay.small_files.read_small_text`:
    a regular file of at most a few MiB) and checked to hold only ``traces`` as an array of tables."""
    # lazy: vkcap suite worker imports this module, not replay.small_files, tomllib
    import tomllib

    from .small_files import read_small_text

    text = read_small_text(manifest, "suite manifest")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message holds the line and column
        raise UsageError(f"invalid TOML: {exc}", file=manifest) from None
    except RecursionError:
        raise UsageError("invalid TOML: nested too deeply", file=manifest) from None
    _table_keys(doc, MANIFEST_KEYS, manifest, "")
    _list_of_tables(doc.get("traces", []), manifest, "traces", "[[traces]]")
    return doc


def manifest_traces(manifest: Path, *, allow_outside: bool = False) -> list[SuiteTrace]:
    """The traces of one manifest, each entry checked (its keys, types and numbers) and its ``path``
    confined to the manifest's folder unless ``allow_outside`` (:mod:`replay.manifest_paths`)."""
    # lazy: vkcap suite worker imports this module, not replay.manifest_paths
    from .manifest_paths import is_glob, manifest_matches

    out = []
    for i, entry in enumerate(read_manifest(manifest).get("traces", [])):
        where = f"traces[{i}]"
        entry = _table_keys(entry, ENTRY_KEYS, manifest, where)
        pattern = entry.get("path")
        if not isinstance(pattern, str):
            raise UsageError("a trace path or glob is required", file=manifest, place=f"{where}.path")
        expectations = _expectations(entry.get("expect", []), manifest, where)
        tolerance = entry_tolerance(entry, manifest, where)
        matches = manifest_matches(manifest, pattern, f"{where}.path", allow_outside=allow_outside)
        if not matches or (not is_glob(pattern) and not matches[0].exists()):
            raise UsageError(f"no trace matches {pattern!r}", file=manifest, place=f"{where}.path")
        for trace in matches:
            _check_regular(trace, f"{manifest}: {where}.path")
            out.append(SuiteTrace(trace, expectations, tolerance.flags(), tolerance))
    return out


def _check_regular(trace: Path, where: str) -> None:
    """A trace a suite will replay must be a regular file: a FIFO would block its worker for ever."""
    try:
        check_regular(trace)
        return
    except IsADirectoryError:
        kind = "a folder"
    except NotARegularFile:
        kind = "not a regular file (a FIFO, device or socket)"
    except OSError as exc:
        raise UsageError(f"{where}: {trace}: cannot be read: {exc.strerror or exc}") from None
    raise UsageError(f"{where}: {trace}: is {kind}, not a trace")


def load_suite(paths: list[Path], *, allow_outside: bool = False) -> list[SuiteTrace]:
    """The traces of folders and manifests, in a stable order (sorted paths), each once. A manifest's
    paths, and the links in a suite folder, stay inside their folder unless ``allow_outside``; every
    trace is a regular file."""
    # lazy: vkcap suite worker imports this module, not replay.manifest_paths
    from .manifest_paths import ALLOW_FLAG, resolves_inside

    found: dict[Path, SuiteTrace] = {}
    for path in paths:
        if path.is_dir():
            inside = path.resolve()
            for trace in sorted(path.glob("*.vkt")):
                if not allow_outside and not resolves_inside(trace, inside):  # said before its target is looked at
                    raise UsageError(f"{trace.name!r} is a link leading outside the suite folder; {ALLOW_FLAG} allows it",
                                     file=path)
                _check_regular(trace, str(path))
                found.setdefault(trace.resolve(), SuiteTrace(trace))
            continue
        if not os.path.lexists(path):
            raise UsageError(f"{path}: no such suite folder or manifest")
        for trace in manifest_traces(path, allow_outside=allow_outside):
            found[trace.path.resolve()] = trace
    return sorted(found.values(), key=lambda t: str(t.path))


def shard(traces: list[SuiteTrace], index: int, count: int) -> list[SuiteTrace]:
    """Shard ``index`` (1-based) of ``count``: traces dealt largest first to the lightest shard, so shards
    are balanced by bytes, deterministic, disjoint and together complete."""
    loads = [0] * count
    owner: dict[Path, int] = {}
    for t in sorted(traces, key=lambda t: (-t.path.stat().st_size, str(t.path))):
        k = min(range(count), key=lambda i: (loads[i], i))
        owner[t.path] = k
        loads[k] += t.path.stat().st_size
    return [t for t in traces if owner[t.path] == index - 1]


def judge(outcome: str, expected: Expectation, first_divergence: int | None = None,
          diverged: list[str] | None = None) -> str:
    """The status of an outcome under an expectation; an expected divergence (or crash) that now starts
    at another frame than the expectation's ``frame``, or diverges in a resource its ``resources`` do
    not name (``diverged``: the resources beyond tolerance), diverged differently: ``fail``."""
    if expected.status == "skip":
        return "skip"
    bad = outcome in ("diverged", "crash", "error")
    if expected.status in ("diverged", "crash"):
        if outcome == expected.status:
            same_frame = expected.frame is None or expected.frame == first_divergence
            same_resources = not expected.resources or set(diverged or ()) <= set(expected.resources)
            return "expected" if same_frame and same_resources else "fail"
        return "fixed" if not bad else "fail"
    return "fail" if bad else "pass"


#: The options of one replay of a trace under flags (the suite's, then the trace's own), checked
#: against the trace: what the command line makes of them (:func:`vkcap.compare_flags.suite_replay_options`).
OptionsFor = Callable[[Path, Sequence[str]], "ReplayOptions"]


class Replayer(Protocol):
    """What :func:`_replay_one` replays through: a :class:`Worker` here, a fleet actor's proxy
    (:mod:`replay.fleet`) there. ``start`` says the device (starting what it needs); ``replay`` answers
    as :func:`replay.worker.handle` does (:func:`answer_of`), or with ``{"outcome": "crash", ...}`` when
    the replay died."""

    device: str
    driver: str
    host: str

    def start(self) -> str: ...

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]: ...


def request_for(options_for: OptionsFor, trace: Path, flags: Sequence[str], **fields: Any) -> "ReplayRequest | dict[str, Any]":
    """The :class:`~replay.worker_protocol.ReplayRequest` of one replay of ``trace`` under ``flags``
    (``fields``: replaced in its options), or the answer that replay would be when its options are
    refused (``{"outcome": "error", "detail": ...}``: the trace's error, not the worker's)."""
    try:
        options = replace(options_for(trace, flags), **fields)
    except VkcapError as exc:
        return {"outcome": "error", "detail": str(exc)}
    except Exception as exc:  # noqa: BLE001 - bad input no check foresaw: the trace's error, not a crash
        return {"outcome": "error", "detail": f"{trace}: internal error: {type(exc).__name__}: {exc}"}
    return ReplayRequest(options.to_dict())


def answer_of(message: "Done | Failed") -> dict[str, Any]:
    """A worker's answer as the suite judges it: a :class:`~replay.worker_protocol.Done`'s result, or
    ``{"outcome": "error", "detail": ...}`` for a :class:`~replay.worker_protocol.Failed`."""
    return dict(message.result) if isinstance(message, Done) else {"outcome": "error", "detail": message.error}


class Worker:
    """One child process (``vkcap suite worker``: :func:`replay.worker.serve`) replaying the traces sent
    to it, on the device ``selector`` picks (else the default), one answer line per trace
    (:mod:`replay.worker_protocol`). ``flags``: the suite's, given to every replay before the trace's own;
    ``options_for`` makes each replay's options of them."""

    def __init__(self, selector: str | None, flags: list[str], env: dict[str, str] | None,
                 options_for: OptionsFor) -> None:
        self.selector, self.env, self.options_for = selector, env, options_for
        self.flags = [*flags, *(["--device", selector] if selector is not None else [])]
        self.process: subprocess.Popen[str] | None = None
        self.device = ""  # the device the worker replays on, as it says when it starts
        self.driver = ""  # and its driver version
        self.host = ""  # this machine
        self.device_uuid, self.device_index, self.pci_bus = "", None, ""  # the exact device, as it says
        self.error = ""  # why the worker could not open its device, as it says when it starts
        self.progress = Path(tempfile.mkdtemp(prefix="vkcap-suite-")) / "progress"  # frames as the worker runs them
        self.stopped = False  # closed with kill=True: start no new process

    def _start(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            device = ["--device", self.selector] if self.selector is not None else []
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vkcap", "suite", "worker", *device], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, env=self.env)
            assert self.process.stdout is not None
            if self.stopped:  # closed while it started
                self.process.send_signal(signal.SIGINT)
            line = self.process.stdout.readline()
            try:
                hello = decode(line, Hello) if line else Hello(error="the worker ended as it started")
            except ProtocolError as exc:
                hello = Hello(error=str(exc))
            self.device, self.driver, self.error = hello.device, hello.driver, hello.error
            self.device_uuid, self.device_index, self.pci_bus = hello.device_uuid, hello.device_index, hello.pci_bus
        return self.process

    def start(self) -> str:
        """The device this worker replays on (starting its process if it is not running)."""
        self._start()
        return self.device

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]:
        """The worker's answer for one replay (with the trace's own ``flags``, after the suite's);
        ``{"outcome": "crash", ...}`` when it died doing it. With ``pages``, the replay also writes its
        HTML page there (``"page"``)."""
        if self.stopped:
            return {"outcome": "crash", "device": self.device, "first_divergence": None, "detail": "interrupted"}
        process = self._start()
        if self.error:  # no device: every replay would say so (and a retry again), at once
            return {"outcome": "error", "device": self.device, "first_divergence": None, "detail": self.error}
        assert process.stdin is not None and process.stdout is not None
        request = request_for(self.options_for, trace, [*self.flags, *flags], progress_file=self.progress)
        if isinstance(request, dict):
            return {"device": self.device, **request}
        self.progress.unlink(missing_ok=True)
        stem = result_stem(str(trace), self.device, _identity(self.device_uuid, self.device_index))
        page = "" if pages is None else str(pages / f"{stem}.html")
        request = replace(request, page=page, command_line=["vkcap", "replay", str(trace), *self.flags, *flags])
        try:
            process.stdin.write(encode(request))
            process.stdin.flush()
            line = process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            try:
                answer = {"device": self.device, **answer_of(decode(line, Done, Failed))}
            except ProtocolError as exc:
                return {"outcome": "error", "device": self.device, "detail": str(exc)}
            return {**answer, "page": page} if page and answer.get("outcome") != "error" else answer
        # lazy: vkcap suite run imports this module, not replay.isolate, replay.progress_file
        from .isolate import describe_exit
        from .progress_file import frame_running

        code = process.wait()
        self.process = None
        frame = frame_running(self.progress)
        where = "during set-up" if frame is None else f"in frame {frame}"
        return {"outcome": "crash", "device": self.device, "first_divergence": frame,
                "detail": f"the replay died {where}: {describe_exit(code)}"}

    def close(self, interrupt: bool = False) -> None:
        """Stop the worker process and remove this worker's temporary folder (whatever happens).
        ``interrupt``: stop it now, as Ctrl-C does (SIGINT: it removes its own temporary folders; killed
        if it has not ended 10 s later), and start no other. Idempotent."""
        self.stopped = self.stopped or interrupt
        try:
            process = self.process
            if process is not None and process.poll() is None:
                if interrupt:
                    process.send_signal(signal.SIGINT)
                assert process.stdin is not None
                process.stdin.close()
                try:
                    process.wait(timeout=10 if interrupt else 60)
                except subprocess.TimeoutExpired:
                    if not interrupt:
                        raise
                    process.kill()
                    process.wait()
        finally:
            shutil.rmtree(self.progress.parent, ignore_errors=True)


def run_suite(traces: list[SuiteTrace], *, options_for: OptionsFor, jobs: int = 1, retries: int = 0,
              flags: list[str] | None = None, devices: list[str | None] | None = None, env: dict[str, str] | None = None,
              on_result: Callable[[TraceResult], None] | None = None, pages: Path | None = None,
              pool: bool = False) -> list[TraceResult]:
    """Replay every trace on every device of ``devices`` (``--device`` selectors; default: the default
    device), ``jobs`` workers per device, each given ``flags`` (tolerances), each replay's options made
    by ``options_for`` (from the suite's flags, then the trace's own); the results by trace, then
    device, in the order given. With ``pool`` (``--device-pool``), the devices share one queue instead:
    each trace is replayed once, by whichever worker is free, its result naming the device it ran on.
    With ``pages``, each replay writes its HTML page into that folder."""
    selectors = devices or [None]
    shared: queue.Queue[int] = queue.Queue()
    todo: list[queue.Queue[int]] = [shared if pool else queue.Queue() for _ in selectors]
    for q in ([shared] if pool else todo):
        for i in range(len(traces)):
            q.put(i)
    results: dict[tuple[int, int], TraceResult] = {}
    lock = threading.Lock()
    workers: list[Worker] = []
    stopping = threading.Event()  # Ctrl-C in the main thread: take no new trace, report nothing more

    def work(d: int) -> None:
        selector = selectors[d]
        worker = Worker(selector, list(flags or []), env, options_for)
        with lock:
            workers.append(worker)
        try:
            while not stopping.is_set():
                try:
                    i = todo[d].get_nowait()
                except queue.Empty:
                    return
                result = _replay_one(worker, traces[i], retries, pages)
                if stopping.is_set():
                    return
                with lock:
                    results[(i, d)] = result
                    if on_result is not None:
                        on_result(result)
        finally:
            worker.close()

    threads = [threading.Thread(target=work, args=(d,), name=f"vkcap-suite-{d}-{k}")
               for d in range(len(selectors)) for k in range(max(1, jobs))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: no new trace, the workers stopped, their temporary folders gone
        stopping.set()
        with lock:
            for worker in workers:
                worker.close(interrupt=True)
        raise
    return [results[key] for key in sorted(results)]  # by trace, then device (pooled: one device each)


def read_results(folders: list[Path]) -> list[TraceResult]:
    """The result files of ``--results`` folders (shards, devices), one per trace x device (a later
    folder's wins), sorted by trace then device. Each file is untrusted input, checked by
    :func:`replay.result_files.parse_result_file` (one line naming the file and the key, exit 2)."""
    # lazy: vkcap suite run imports this module, not replay.result_files
    from .result_files import parse_result_file

    merged: dict[tuple[str, str], TraceResult] = {}
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"{folder}: no such results folder")
        for path in sorted(folder.glob("*.json")):
            result = TraceResult(**parse_result_file(path, folder))
            merged[(result.trace, *map(str, result.device_key))] = result
    return [merged[k] for k in sorted(merged)]


def _attempt(report: dict[str, Any]) -> dict[str, Any]:
    """What one attempt saw, for a retried trace's spread."""
    keys = ("outcome", "first_divergence", "beyond_tolerance", "max_ulp", "detail")
    return {k: report[k] for k in keys if report.get(k) not in (None, "")}


def _spread_text(spread: list[dict[str, Any]]) -> str:
    """``attempt 1: diverged from frame 3 (12 beyond tolerance, 40 ULP); attempt 2: identical``."""
    def one(a: dict[str, Any]) -> str:
        text = a.get("outcome", "error")
        if a.get("first_divergence") is not None:
            text += f" {'in' if text == 'crash' else 'from'} frame {a['first_divergence']}"
        if a.get("beyond_tolerance"):
            ulp = f", up to {a['max_ulp']} ULP" if a.get("max_ulp") else ""
            text += f" ({a['beyond_tolerance']} beyond tolerance{ulp})"
        if text.split()[0] in ("crash", "error") and a.get("detail"):  # the cause, not just the word
            text += f" ({a['detail']})"
        return text

    return "; ".join(f"attempt {n}: {one(a)}" for n, a in enumerate(spread, 1))


def _replay_one(worker: Replayer, trace: SuiteTrace, retries: int, pages: Path | None = None) -> TraceResult:
    start = time.perf_counter()
    expected = trace.expected_on(worker.start(), worker.driver)
    if expected.status == "skip":  # not replayed at all
        return TraceResult(str(trace.path), worker.device, "skip", "skipped", "skip", reason=expected.reason,
                           driver=worker.driver, host=worker.host, verdict="skipped here",
                           device_uuid=getattr(worker, "device_uuid", ""),
                           device_index=getattr(worker, "device_index", None), pci_bus=getattr(worker, "pci_bus", ""))
    report = worker.replay(trace.path, trace.flags, pages)
    device = report.get("device", "")
    spread = [_attempt(report)]
    while spread[-1]["outcome"] in ("diverged", "crash", "error") and len(spread) <= retries and expected.status == "pass":
        report = worker.replay(trace.path, trace.flags, pages)
        spread.append(_attempt(report))
    outcome = spread[-1].get("outcome", "error")
    resources = list(report.get("resources") or [])

    status = judge(outcome, expected, report.get("first_divergence"), diverged_uids(resources))
    if len(spread) > 1 and status == "pass":
        status = "flaky"
    if expected.status == "flaky":  # flakiness excuses a divergence or a crash, never a trace it could not judge
        status = "fail" if outcome == "error" else "flaky" if outcome in ("diverged", "crash") else "pass"
    detail = str(report.get("detail", "")) if len(spread) == 1 else _spread_text(spread)
    result = TraceResult(str(trace.path), device or report.get("device", ""), status, outcome, expected.status,
                         int(report.get("frames", 0)), round(time.perf_counter() - start, 3), len(spread),
                         report.get("first_divergence"), detail, expected.reason,
                         spread if len(spread) > 1 else [], str(report.get("page", "")), worker.driver, worker.host,
                         expected.frame, list(expected.resources), resources,
                         device_uuid=getattr(worker, "device_uuid", ""), device_index=getattr(worker, "device_index", None),
                         pci_bus=getattr(worker, "pci_bus", ""))
    result.verdict = explain(result)
    if len(spread) > 1 and outcome not in ("crash", "error"):  # theirs say the spread already (their detail)
        result.verdict += f" ({_spread_text(spread)})"
    return result


def write_results(folder: Path, results: list[TraceResult]) -> None:
    """One JSON file per trace (what ``suite merge`` will combine)."""
    for r in results:
        data = r.as_dict()
        if r.page and Path(r.page).parent.resolve() == folder.resolve():
            data["page"] = Path(r.page).name  # the results folder travels (a CI artifact) with its pages
        stem = result_stem(r.trace, r.device, _identity(r.device_uuid, r.device_index))
        write_atomic(folder / f"{stem}.json", [json.dumps(data, indent=1).encode()])


def _identity(uuid: str, index: int | None) -> str:
    """What tells two devices of one name apart in a result's file name ("" without a UUID: as before)."""
    return f"{uuid}#{index}" if uuid else ""


def result_stem(trace: str, device: str, identity: str = "") -> str:
    """The file name (without suffix) of a trace x device's result and page: the trace's name and a tag
    (of the trace, the device's name and its ``identity``, so identical GPUs write two files)."""
    # lazy: vkcap suite worker imports this module, not vkcore.output_folders
    from vkcore.output_folders import unique_stem

    # one file per trace x device; a trace's name is any bytes (os.fsencode), a device's any text
    exact = device + (f"\0{identity}" if identity else "")
    tag = hashlib.sha256(os.fsencode(trace) + b"\0" + exact.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{unique_stem(Path(trace).name)}.{tag}"


def write_junit(path: Path, results: list[TraceResult]) -> None:
    """One test case per trace x device; a ``fail`` is a failure (its message the verdict, its text one
    line per resource and the replay's detail), a ``skip`` skipped; every other case says its verdict in
    ``system-out``. Every string from a result (a result file's, when merged) goes through
    :func:`vkcore.safe_text.shown`: no control character or lone surrogate reaches the XML."""
    # lazy: vkcap suite run imports this module, not xml.etree.ElementTree
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="vkcap.suite", tests=str(len(results)),
                          failures=str(sum(r.status == "fail" for r in results)),
                          skipped=str(sum(r.status == "skip" for r in results)))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=shown(f"vkcap.suite.{r.device_label or 'unknown'}"),
                             name=shown(Path(r.trace).name), time=str(r.seconds))
        verdict = r.verdict or f"{r.outcome} (expected {r.expected})"
        lines = [resource_line(v) for v in r.resources if v.get("status") != "identical"]
        lines += [f"detail: {r.detail}"] if r.detail else []
        lines += [f"reason: {r.reason}"] if r.reason else []
        if r.status == "fail":
            failure = ET.SubElement(case, "failure", message=shown(f"{r.status}: {verdict}"))
            failure.text = "\n".join(shown(line) for line in lines)
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=shown(r.reason or verdict))
        else:
            ET.SubElement(case, "system-out").text = "\n".join(shown(line) for line in [f"{r.status}: {verdict}", *lines])
    write_atomic(path, [marked_junit(ET.tostring(root, encoding="utf-8", xml_declaration=True))])


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}
