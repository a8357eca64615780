"""``vkcap suite run``: many traces replayed by a few long-lived worker processes, each outcome judged
against the expectation of the device it ran on.

A suite is folders of ``.vkt`` files (each expected to replay within tolerance) and/or manifests
(``suite.toml``)::

    [[traces]]
    path = "traces/*.vkt"          # a path or a glob, relative to the manifest

    tolerance = { ulp = 4 }        # optional: the trace's own tolerance (or a preset name: "torch")

    [[traces.expect]]
    device = "llvmpipe*"           # fnmatch on the device name
    driver = ">=22.3, <23"         # optional: a driver-version range (comparisons joined by commas)
    status = "diverged"            # pass | diverged | flaky | skip | crash
    frame = 12                     # optional: the first divergent frame it must still be
    reason = "lavapipe rounds sin() differently"
    link = "https://example.com/issue/1"

Workers (``-j N``) are child processes that replay trace after trace through the same replay path as
``vkcap replay`` (:func:`replay.replayer.replay`), one JSON line per trace. A worker that dies (a driver
crash) is replaced, and the trace it was replaying is reported as ``crash``. With ``--retries K`` a trace
that fails is replayed again: passing on a retry makes it ``flaky``.

Outcomes, judged against the expectation (default ``pass``): ``pass``; ``expected`` (it diverged, or
crashed, as expected); ``fixed`` (expected to diverge, it now passes: the label can go); ``flaky``;
``fail`` (it diverged or crashed, unexpectedly); ``skip``.
"""
from __future__ import annotations

import fnmatch
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from vkcore.errors import UsageError

STATUSES = ("pass", "diverged", "flaky", "skip", "crash")


@dataclass(frozen=True)
class Expectation:
    device: str  # an fnmatch pattern of device names
    status: str
    reason: str = ""
    link: str = ""
    frame: int | None = None  # for diverged/crash: the first divergent frame it must still be
    driver: str = ""  # a driver-version range: ">=580.100, <590" (every comparison must hold)

    def matches(self, device: str, driver: str) -> bool:
        return fnmatch.fnmatch(device, self.device) and in_range(driver, self.driver)


_COMPARE = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}


# a version's numbers: at most 18 digits each (a driver's are a few), so that none is a huge integer
_VERSION = r"(?<!\d)\d{1,18}(?:\.\d{1,18})*(?!\d)"


def version_key(text: str) -> tuple[int, ...]:
    """``"580.159.04"`` -> (580, 159, 4); ``"Mesa 22.3.6"`` -> (22, 3, 6): the numbers, compared as tuples."""
    import re

    match = re.search(_VERSION, text)
    return tuple(int(p) for p in match.group().split(".")) if match else ()


def parse_range(text: str, where: str) -> list[tuple[str, tuple[int, ...]]]:
    """``">=580.100, <590"`` as (operator, version) pairs; a :class:`UsageError` at ``where`` otherwise."""
    import re

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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


#: The keys a manifest may hold, at each level. An unknown key is an error, not a warning: a misspelt
#: ``tolerence`` or ``expected`` silently ignored would judge traces by rules nobody wrote.
MANIFEST_KEYS = ("traces",)
ENTRY_KEYS = ("path", "tolerance", "expect")
EXPECT_KEYS = ("device", "status", "driver", "frame", "reason", "link")
TOLERANCE_KEYS = ("atol", "rtol", "ulp")


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
    from vkcore.bounded_numbers import check_number

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
        out.append(Expectation(e["device"], e["status"], _string(e, "reason", manifest, place), link, frame, driver))
    return tuple(out)


def _tolerance_flags(value: Any, manifest: Path, where: str) -> tuple[str, ...]:
    """A manifest entry's ``tolerance``: a table of atol/rtol/ulp (each checked by
    :func:`vkcore.bounded_numbers.check_number`), or a preset name (``"torch"``)."""
    from vkcore.bounded_numbers import check_number

    if value is None:
        return ()
    if isinstance(value, str):
        from .tolerances import preset_policy

        preset_policy(value, f"{manifest}: {where}")
        return ("--tolerance", f"preset:{value}")
    if not isinstance(value, dict) or not value:
        raise UsageError("a preset name or a table of atol, rtol and ulp", file=manifest, place=where)
    _table_keys(value, TOLERANCE_KEYS, manifest, where)
    out: list[str] = []
    for key, number in sorted(value.items()):
        out += [f"--{key}", repr(check_number(key, number, file=str(manifest), place=f"{where}.{key}"))]
    return tuple(out)


def read_manifest(manifest: Path) -> dict[str, Any]:
    """The TOML document of ``manifest``, read as untrusted (:func:`replay.small_files.read_small_text`:
    a regular file of at most a few MiB) and checked to hold only ``traces`` as an array of tables."""
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
    from .manifest_paths import is_glob, manifest_matches

    out = []
    for i, entry in enumerate(read_manifest(manifest).get("traces", [])):
        where = f"traces[{i}]"
        entry = _table_keys(entry, ENTRY_KEYS, manifest, where)
        pattern = entry.get("path")
        if not isinstance(pattern, str):
            raise UsageError("a trace path or glob is required", file=manifest, place=f"{where}.path")
        expectations = _expectations(entry.get("expect", []), manifest, where)
        flags = _tolerance_flags(entry.get("tolerance"), manifest, f"{where}.tolerance")
        matches = manifest_matches(manifest, pattern, f"{where}.path", allow_outside=allow_outside)
        if not matches or (not is_glob(pattern) and not matches[0].exists()):
            raise UsageError(f"no trace matches {pattern!r}", file=manifest, place=f"{where}.path")
        for trace in matches:
            _check_regular(trace, f"{manifest}: {where}.path")
            out.append(SuiteTrace(trace, expectations, flags))
    return out


def _check_regular(trace: Path, where: str) -> None:
    """A trace a suite will replay must be a regular file: a FIFO would block its worker for ever."""
    import stat

    try:
        mode = trace.stat().st_mode
    except OSError as exc:
        raise UsageError(f"{where}: {trace}: cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise UsageError(f"{where}: {trace}: is {kind}, not a trace")


def load_suite(paths: list[Path], *, allow_outside: bool = False) -> list[SuiteTrace]:
    """The traces of folders and manifests, in a stable order (sorted paths), each once. A manifest's
    paths, and the links in a suite folder, stay inside their folder unless ``allow_outside``; every
    trace is a regular file."""
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


def judge(outcome: str, expected: Expectation, first_divergence: int | None = None) -> str:
    """The status of an outcome under an expectation; an expected divergence (or crash) that now starts
    at another frame than the expectation's ``frame`` diverged differently: ``fail``."""
    if expected.status == "skip":
        return "skip"
    bad = outcome in ("diverged", "crash", "error")
    if expected.status in ("diverged", "crash"):
        if outcome == expected.status:
            return "expected" if expected.frame is None or expected.frame == first_divergence else "fail"
        return "fixed" if not bad else "fail"
    return "fail" if bad else "pass"


class Replayer(Protocol):
    """What :func:`_replay_one` replays through: a :class:`Worker` here, a fleet actor's proxy
    (:mod:`replay.fleet`) there. ``start`` says the device (starting what it needs); ``replay`` answers
    as :func:`vkcap.suite_serve.answer` does, or with ``{"outcome": "crash", ...}`` when the replay died."""

    device: str
    driver: str
    host: str

    def start(self) -> str: ...

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]: ...


class Worker:
    """One child process replaying traces sent to it, one JSON line back per trace."""

    def __init__(self, flags: list[str], env: dict[str, str] | None) -> None:
        import tempfile

        self.flags, self.env = flags, env
        self.process: subprocess.Popen[str] | None = None
        self.device = ""  # the device the worker replays on, as it says when it starts
        self.driver = ""  # and its driver version
        self.host = ""  # this machine
        self.progress = Path(tempfile.mkdtemp(prefix="vkcap-suite-")) / "progress"  # frames as the worker runs them
        self.stopped = False  # closed with kill=True: start no new process

    def _start(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vkcap", "suite", "worker", f"--replay-flags={json.dumps(self.flags)}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, env=self.env)
            assert self.process.stdout is not None
            if self.stopped:  # closed while it started
                self.process.send_signal(signal.SIGINT)
            hello = self.process.stdout.readline()
            said = json.loads(hello) if hello else {}
            self.device, self.driver = said.get("device", ""), said.get("driver", "")
        return self.process

    def start(self) -> str:
        """The device this worker replays on (starting its process if it is not running)."""
        self._start()
        return self.device

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]:
        """The worker's report of one replay (with the trace's own ``flags``); ``{"outcome": "crash", ...}``
        when it died doing it. With ``pages``, the replay also writes its HTML page there (``"page"``)."""
        if self.stopped:
            return {"outcome": "crash", "device": self.device, "first_divergence": None, "detail": "interrupted"}
        process = self._start()
        assert process.stdin is not None and process.stdout is not None
        self.progress.unlink(missing_ok=True)
        page = "" if pages is None else str(pages / f"{result_stem(str(trace), self.device)}.html")
        try:
            request = {"trace": str(trace), "progress": str(self.progress), "flags": list(flags), "page": page}
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            answer = {"device": self.device, **json.loads(line)}
            return {**answer, "page": page} if page and answer.get("outcome") != "error" else answer
        from .isolate import describe_exit, frame_running

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


def run_suite(traces: list[SuiteTrace], *, jobs: int = 1, retries: int = 0, flags: list[str] | None = None,
              devices: list[str | None] | None = None, env: dict[str, str] | None = None,
              on_result: Callable[[TraceResult], None] | None = None, pages: Path | None = None) -> list[TraceResult]:
    """Replay every trace on every device of ``devices`` (``--device`` selectors; default: the default
    device), ``jobs`` workers per device, each given ``flags`` (tolerances); the results by trace, then
    device, in the order given. With ``pages``, each replay writes its HTML page into that folder."""
    selectors = devices or [None]
    todo: list[queue.Queue[int]] = [queue.Queue() for _ in selectors]
    for q in todo:
        for i in range(len(traces)):
            q.put(i)
    results: dict[tuple[int, int], TraceResult] = {}
    lock = threading.Lock()
    workers: list[Worker] = []
    stopping = threading.Event()  # Ctrl-C in the main thread: take no new trace, report nothing more

    def work(d: int) -> None:
        selector = selectors[d]
        worker = Worker(list(flags or []) + (["--device", selector] if selector is not None else []), env)
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
    return [results[(i, d)] for i in range(len(traces)) for d in range(len(selectors))]


def read_results(folders: list[Path]) -> list[TraceResult]:
    """The result files of ``--results`` folders (shards, devices), one per trace x device (a later
    folder's wins), sorted by trace then device. Each file is untrusted input, checked by
    :func:`replay.result_files.parse_result_file` (one line naming the file and the key, exit 2)."""
    from .result_files import parse_result_file

    merged: dict[tuple[str, str], TraceResult] = {}
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"{folder}: no such results folder")
        for path in sorted(folder.glob("*.json")):
            result = TraceResult(**parse_result_file(path, folder))
            merged[(result.trace, result.device)] = result
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
            text += f" from frame {a['first_divergence']}"
        if a.get("beyond_tolerance"):
            ulp = f", up to {a['max_ulp']} ULP" if a.get("max_ulp") else ""
            text += f" ({a['beyond_tolerance']} beyond tolerance{ulp})"
        return text

    return "; ".join(f"attempt {n}: {one(a)}" for n, a in enumerate(spread, 1))


def _replay_one(worker: Replayer, trace: SuiteTrace, retries: int, pages: Path | None = None) -> TraceResult:
    start = time.perf_counter()
    expected = trace.expected_on(worker.start(), worker.driver)
    if expected.status == "skip":  # not replayed at all
        return TraceResult(str(trace.path), worker.device, "skip", "skipped", "skip", reason=expected.reason,
                           driver=worker.driver, host=worker.host)
    report = worker.replay(trace.path, trace.flags, pages)
    device = report.get("device", "")
    spread = [_attempt(report)]
    while spread[-1]["outcome"] in ("diverged", "crash", "error") and len(spread) <= retries and expected.status == "pass":
        report = worker.replay(trace.path, trace.flags, pages)
        spread.append(_attempt(report))
    outcome = spread[-1].get("outcome", "error")
    status = judge(outcome, expected, report.get("first_divergence"))
    if len(spread) > 1 and status == "pass":
        status = "flaky"
    if expected.status == "flaky":  # flakiness excuses a divergence or a crash, never a trace it could not judge
        status = "fail" if outcome == "error" else "flaky" if outcome in ("diverged", "crash") else "pass"
    detail = str(report.get("detail", "")) if len(spread) == 1 else _spread_text(spread)
    return TraceResult(str(trace.path), device or report.get("device", ""), status, outcome, expected.status,
                       int(report.get("frames", 0)), round(time.perf_counter() - start, 3), len(spread),
                       report.get("first_divergence"), detail, expected.reason,
                       spread if len(spread) > 1 else [], str(report.get("page", "")), worker.driver, worker.host)


def write_results(folder: Path, results: list[TraceResult]) -> None:
    """One JSON file per trace (what ``suite merge`` will combine)."""
    from vkcore.outputs import write_atomic

    for r in results:
        data = r.as_dict()
        if r.page and Path(r.page).parent.resolve() == folder.resolve():
            data["page"] = Path(r.page).name  # the results folder travels (a CI artifact) with its pages
        write_atomic(folder / f"{result_stem(r.trace, r.device)}.json", [json.dumps(data, indent=1).encode()])


def result_stem(trace: str, device: str) -> str:
    """The file name (without suffix) of a trace x device's result and page: the trace's name and a tag."""
    import hashlib

    tag = hashlib.sha256(f"{trace}\0{device}".encode()).hexdigest()[:8]  # one file per trace x device
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(trace).name) + f".{tag}"


def write_junit(path: Path, results: list[TraceResult]) -> None:
    """One test case per trace x device; a ``fail`` is a failure, a ``skip`` skipped."""
    import xml.etree.ElementTree as ET

    from vkcore.outputs import write_atomic

    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="vkcap.suite", tests=str(len(results)),
                          failures=str(sum(r.status == "fail" for r in results)),
                          skipped=str(sum(r.status == "skip" for r in results)))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"vkcap.suite.{r.device or 'unknown'}", name=Path(r.trace).name,
                             time=str(r.seconds))
        if r.status == "fail":
            ET.SubElement(case, "failure", message=f"{r.outcome} (expected {r.expected}) {r.detail}".strip())
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=r.reason)
    write_atomic(path, [ET.tostring(root, encoding="utf-8", xml_declaration=True)])


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}
