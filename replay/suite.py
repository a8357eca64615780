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
import re
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


def version_key(text: str) -> tuple[int, ...]:
    """``"580.159.04"`` -> (580, 159, 4); ``"Mesa 22.3.6"`` -> (22, 3, 6): the numbers, compared as tuples."""
    import re

    match = re.search(r"\d+(?:\.\d+)*", text)
    return tuple(int(p) for p in match.group().split(".")) if match else ()


def parse_range(text: str, where: str) -> list[tuple[str, tuple[int, ...]]]:
    """``">=580.100, <590"`` as (operator, version) pairs; a :class:`UsageError` at ``where`` otherwise."""
    import re

    out = []
    for part in (p.strip() for p in text.split(",")):
        op = next((o for o in _COMPARE if part.startswith(o)), None)  # two-character operators first
        if op is None or not re.fullmatch(r"\s*\d+(\.\d+)*", part[len(op):]):
            raise UsageError(f"{where}: a driver-version range such as \">=580.100, <590\", got {text!r}")
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


def _expectations(table: Any, where: str) -> tuple[Expectation, ...]:
    out = []
    for i, e in enumerate(table or ()):
        place = f"{where}.expect[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("device"), str) or e.get("status") not in STATUSES:
            raise UsageError(f"{place}: needs device (a pattern) and status (one of: {', '.join(STATUSES)})")
        frame = e.get("frame")
        if frame is not None and (isinstance(frame, bool) or not isinstance(frame, int) or frame < 0):
            raise UsageError(f"{place}.frame: the first divergent frame (an integer >= 0), got {frame!r}")
        driver = e.get("driver", "")
        if not isinstance(driver, str):
            raise UsageError(f"{place}.driver: a driver-version range such as \">=580.100, <590\", got {driver!r}")
        if driver:
            parse_range(driver, f"{place}.driver")
        out.append(Expectation(e["device"], e["status"], str(e.get("reason", "")), str(e.get("link", "")), frame, driver))
    return tuple(out)


def _tolerance_flags(value: Any, where: str) -> tuple[str, ...]:
    """A manifest entry's ``tolerance``: a table of atol/rtol/ulp, or a preset name (``"torch"``)."""
    if value is None:
        return ()
    if isinstance(value, str):
        from .tolerances import preset_policy

        preset_policy(value, where)
        return ("--tolerance", f"preset:{value}")
    if not isinstance(value, dict) or not value or set(value) - {"atol", "rtol", "ulp"}:
        raise UsageError(f"{where}: a preset name or a table of atol, rtol and ulp")
    out: list[str] = []
    for key, number in sorted(value.items()):
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0 or (key == "ulp" and not isinstance(number, int)):
            raise UsageError(f"{where}.{key}: must be a number >= 0{' (whole)' if key == 'ulp' else ''}, got {number!r}")
        out += [f"--{key}", str(number)]
    return tuple(out)


def load_suite(paths: list[Path]) -> list[SuiteTrace]:
    """The traces of folders and manifests, in a stable order (sorted paths), each once."""
    import tomllib

    found: dict[Path, SuiteTrace] = {}
    for path in paths:
        if path.is_dir():
            for trace in sorted(path.glob("*.vkt")):
                found.setdefault(trace.resolve(), SuiteTrace(trace))
            continue
        if not path.is_file():
            raise UsageError(f"{path}: no such suite folder or manifest")
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{path}: not a suite manifest: {exc}") from None
        for i, entry in enumerate(doc.get("traces", ())):
            where = f"{path}: traces[{i}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise UsageError(f"{where}.path: a trace path or glob is required")
            matches = sorted(path.parent.glob(entry["path"])) if any(c in entry["path"] for c in "*?[") \
                else [path.parent / entry["path"]]
            if not matches or not all(m.is_file() for m in matches):
                raise UsageError(f"{where}.path: no trace matches {entry['path']!r}")
            expectations = _expectations(entry.get("expect"), where)
            flags = _tolerance_flags(entry.get("tolerance"), f"{where}.tolerance")
            for trace in matches:
                found[trace.resolve()] = SuiteTrace(trace, expectations, flags)
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

    def _start(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vkcap", "suite", "worker", f"--replay-flags={json.dumps(self.flags)}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, env=self.env)
            assert self.process.stdout is not None
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

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=60)


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

    def work(d: int) -> None:
        selector = selectors[d]
        worker = Worker(list(flags or []) + (["--device", selector] if selector is not None else []), env)
        try:
            while True:
                try:
                    i = todo[d].get_nowait()
                except queue.Empty:
                    return
                result = _replay_one(worker, traces[i], retries, pages)
                with lock:
                    results[(i, d)] = result
                    if on_result is not None:
                        on_result(result)
        finally:
            worker.close()

    threads = [threading.Thread(target=work, args=(d,), name=f"vkcap-suite-{d}-{k}")
               for d in range(len(selectors)) for k in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[(i, d)] for i in range(len(traces)) for d in range(len(selectors))]


def read_results(folders: list[Path]) -> list[TraceResult]:
    """The result files of ``--results`` folders (shards, devices), one per trace x device (a later
    folder's wins), sorted by trace then device."""
    from dataclasses import fields

    names = {f.name for f in fields(TraceResult)}
    merged: dict[tuple[str, str], TraceResult] = {}
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"{folder}: no such results folder")
        for path in sorted(folder.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                result = TraceResult(**{k: v for k, v in data.items() if k in names})
            except (OSError, ValueError, TypeError) as exc:
                raise UsageError(f"{path}: not a suite result file ({exc})") from None
            if result.page and not Path(result.page).is_absolute():
                result.page = str(folder / result.page)
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


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string for the text a manifest holds


def manifest_text(entries: list[dict[str, Any]]) -> str:
    """A manifest document (the ``traces`` list as :func:`bless` keeps it) as TOML."""
    return "\n".join(entry_text(entry) for entry in entries)


def entry_text(entry: dict[str, Any]) -> str:
    """One ``[[traces]]`` entry of a manifest as TOML, its expectations included, ending in a blank line."""
    lines = ["[[traces]]", f"path = {_toml_string(entry['path'])}"]
    tolerance = entry.get("tolerance")
    if isinstance(tolerance, str):
        lines.append(f"tolerance = {_toml_string(tolerance)}")
    elif isinstance(tolerance, dict):
        lines.append("tolerance = { " + ", ".join(f"{k} = {v}" for k, v in sorted(tolerance.items())) + " }")
    for e in entry.get("expect", ()):
        lines += ["", "[[traces.expect]]", f"device = {_toml_string(e['device'])}", f"status = {_toml_string(e['status'])}"]
        for key in ("driver", "reason", "link"):
            if e.get(key):
                lines.append(f"{key} = {_toml_string(e[key])}")
        if e.get("frame") is not None:
            lines.append(f"frame = {int(e['frame'])}")
    lines.append("")
    return "\n".join(lines)


_TRACES_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*traces[ \t]*\]\][ \t]*(#.*)?$")
_OTHER_HEADER = re.compile(r"^[ \t]*\[(?![ \t]*\[?[ \t]*traces[ \t]*[.\]])")


def _entry_spans(text: str, count: int) -> list[tuple[int, int]] | None:
    """The line spans [start, end) of the ``count`` ``[[traces]]`` entries of a manifest's text, each
    from its header to its last line that is neither blank nor a comment (the comments after it
    introduce what follows); None when the text does not hold them as ``count`` such tables."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _TRACES_HEADER.match(line)]
    if len(starts) != count:
        return None
    spans = []
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < count else len(lines)
        other = next((i for i in range(start + 1, stop) if _OTHER_HEADER.match(lines[i])), None)
        end = stop if other is None else other
        while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
            end -= 1
        spans.append((start, end))
    return spans


def _rewrite_entries(text: str, entries: list[dict[str, Any]], changed: set[int]) -> str:
    """``text`` with the entries in ``changed`` (indices into ``entries``) written anew and everything
    else kept as it is, comments included; the whole document written anew when its entries are not
    ``[[traces]]`` tables (an inline array), or when the edited text would not read as ``entries``."""
    import tomllib

    whole = manifest_text(entries)
    spans = _entry_spans(text, len(entries))
    if spans is None:
        return whole
    lines = text.splitlines()
    for index in sorted(changed, reverse=True):
        start, end = spans[index]
        lines[start:end] = entry_text(entries[index]).rstrip("\n").splitlines()
    edited = "\n".join(lines) + "\n"
    # a line that only looks like a table header (inside a multi-line string or array) shifts the spans
    try:
        same = tomllib.loads(edited).get("traces") == tomllib.loads(whole)["traces"]
    except tomllib.TOMLDecodeError:
        same = False
    return edited if same else whole


def bless(manifest: Path, results: list[TraceResult]) -> tuple[str, str]:
    """The manifest before and after taking ``results`` as the new expectations: a trace that failed
    gets an expectation for its device (its outcome and first divergent frame, an exact device name);
    one that was ``fixed`` loses the expectation that said it diverges there. Expectations for this
    device whose driver range excludes the result's driver are kept. Only the entries that change are
    written anew (with the comments inside them); the rest of the text, comments and formatting
    included, is kept as it is."""
    import tomllib

    before = manifest.read_text()
    doc = tomllib.loads(before)
    entries = [dict(e) for e in doc.get("traces", ())]
    root = manifest.parent
    by_trace = {(Path(r.trace).resolve(), r.device): r for r in results}
    changed: set[int] = set()
    for index, entry in enumerate(entries):
        pattern = entry["path"]
        matches = sorted(root.glob(pattern)) if any(c in pattern for c in "*?[") else [root / pattern]
        for trace in matches:
            for (path, device), r in by_trace.items():
                if path != trace.resolve() or r.status not in ("fail", "fixed"):
                    continue
                if len(matches) > 1:  # a glob: the trace gets an entry of its own first
                    continue
                expect = [dict(e) for e in entry.get("expect", ())  # the others stay, those of other drivers too
                          if not (fnmatch.fnmatch(device, e["device"]) and in_range(r.driver, e.get("driver", "")))]
                if r.status == "fail" and r.outcome in ("diverged", "crash"):
                    expect.insert(0, {"device": device, "status": r.outcome, "reason": "blessed: " + (r.detail or r.outcome),
                                      "frame": r.first_divergence})
                entry["expect"] = expect
                changed.add(index)
    return before, _rewrite_entries(before, entries, changed) if changed else before
