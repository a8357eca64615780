"""vkcap's pytest plugin (entry point ``pytest11``): suites and replays in a project's own tests.

- ``pytest --vkcap-suite suite.toml`` (repeatable; a folder of traces works too): each trace of the suite
  is a test item, collected (and counted: ``-q`` says how many) like any other, in a fixed order so
  pytest-xdist can share them out, and replayed and judged against its expectation for the device
  (:func:`replay.suite.judge`):

  - ``pass`` (the default): a divergence or a crash FAILS the item, with a failure message of a few lines
    (the verdict; each diverged resource with its first differing indices; the replay's page, with
    ``--vkcap-html DIR``), never the plugin's source;
  - ``diverged`` / ``crash``: the item is an expected failure, XFAIL, when it diverges (from the
    expectation's frame, where it names one) or crashes as expected; it FAILS when it fails otherwise;
    when it now passes (the suite calls that ``fixed``) it is XPASS, which fails the run under pytest's
    ``xfail_strict``, as any xfail;
  - ``skip``: SKIPPED, with the expectation's reason.

  A manifest or suite folder that cannot be read (a missing file, bad TOML, a path leading outside the
  manifest's folder) is a usage error: one line, pytest's exit code 4, no traceback. Manifest paths stay
  inside the manifest's folder unless ``--vkcap-allow-outside-manifest`` (or the ini option
  ``vkcap_allow_outside_manifest = true``) says otherwise, as ``vkcap suite run --allow-outside-manifest``.
- The fixture ``vkcap_replay(trace, **tolerances)`` replays a trace (``atol``, ``rtol``, ``ulp``,
  ``dtypes={uid: dtype}``, ``device``) and returns the :class:`~replay.replayer.ReplayReport`.

Every replay runs in a child process (:func:`replay.isolate.run_child`), never in the test process: a trace that crashes the driver (SIGSEGV, an emulation layer's abort) fails its own item or
test with the crash line (the frame it was running, how it died), and the session goes on. A trace
the child refuses (exit 2: damaged, hostile, an unknown device) fails its item with the child's one
line. Tolerances given to the fixture are checked before anything runs, as the command line checks them
(:func:`vkcore.bounded_numbers.check_number`); a manifest's own tolerances are checked against the trace
as ``replay`` checks them, before the child starts. Every text from a trace or manifest that the terminal shows is escaped.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from replay.isolate import run_child
from replay.manifest_paths import ALLOW_FLAG
from replay.replayer import ReplayReport
from replay.report import comparison_line, frames_from_document
from replay.results import WITHIN
from replay.suite import driver_of, judge, load_suite, result_stem
from vkcore.bounded_numbers import check_number
from vkcore.errors import UsageError, VkcapError
from vkcore.safe_text import shown

from .compare_flags import suite_replay_options

MAX_COMPARISONS_SHOWN = 3  # a failure message lists this many diverged resources, then how many more


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("vkcap")
    group.addoption("--vkcap-suite", action="append", default=[], metavar="SUITE",
                    help="replay every trace of a vkcap suite (suite.toml or a folder of .vkt) as test items")
    group.addoption("--vkcap-device", default=None, metavar="INDEX|NAME", help="the Vulkan device to replay on")
    group.addoption("--vkcap-allow-outside-manifest", action="store_true", default=None,
                    help="let a manifest name traces outside its own folder (and a suite folder's links lead out)")
    group.addoption("--vkcap-html", default=None, metavar="DIR",
                    help="write each suite item's replay page into DIR (created); failures name their page")
    parser.addini("vkcap_allow_outside_manifest", type="bool", default=False,
                  help="vkcap: let a manifest name traces outside its own folder")


def check_tolerances(atol: Any, rtol: Any, ulp: Any) -> None:
    """Refuse (``ValueError`` naming the key) a tolerance the command line would refuse
    (:func:`vkcore.bounded_numbers.check_number`): not a finite number >= 0, or an ``ulp`` that is not a
    whole number below 2**63 (``nan`` would pass every comparison)."""
    for key, value in (("atol", atol), ("rtol", rtol), ("ulp", ulp)):
        try:
            check_number(key, value, place=f"vkcap_replay: {key}")
        except UsageError as exc:
            raise ValueError(str(exc)) from None


class ReplayFailed(Exception):
    """The child replay crashed or refused the trace: one line saying which and how."""

    def __init__(self, line: str, *, crashed: bool) -> None:
        super().__init__(line)
        self.crashed = crashed


def _replay_flags(*, atol: float, rtol: float, ulp: int, dtypes: dict[str, str], device: str | None,
                  extra_flags: tuple[str, ...]) -> list[str]:
    """``vkcap replay``'s flags of a replay: the fixture's tolerances (those set), the dtypes, the device,
    then a manifest's own tolerance flags (which win, as they did in process)."""
    flags = []
    for flag, value in (("--atol", atol), ("--rtol", rtol), ("--ulp", ulp)):
        if value:
            flags.append(f"{flag}={value!r}")
    for uid, dtype in (dtypes or {}).items():
        flags.append(f"--dtype={uid}={dtype}")
    if device is not None:
        flags.append(f"--device={device}")
    for flag, value in zip(extra_flags[::2], extra_flags[1::2]):
        flags.append(f"{flag}={value}")
    return flags


def _replay(trace: Path, *, atol: float = 0.0, rtol: float = 0.0, ulp: int = 0, dtypes: dict[str, str] | None = None,
            device: str | None = None, extra_flags: tuple[str, ...] = (), page: Path | None = None) -> Any:
    """The report of replaying ``trace`` in a child process (see the module notes); raises
    :class:`ReplayFailed` when the child crashed or refused the trace."""
    check_tolerances(atol, rtol, ulp)
    flags = _replay_flags(atol=atol, rtol=rtol, ulp=ulp, dtypes=dict(dtypes or {}), device=device,
                          extra_flags=extra_flags)
    try:
        options = suite_replay_options(trace, flags)  # checked against the trace as replay checks them
        outcome = run_child(options, echo=False, page=page, command_line=["vkcap", "replay", str(trace), *flags])
    except VkcapError as exc:  # the trace or its flags refused (here or by the child): its own line
        raise ReplayFailed(exc.render(), crashed=False) from None
    if outcome.report is None:
        raise ReplayFailed(f"{trace.name}: {outcome.crash_line()}", crashed=True)
    doc = outcome.report
    return ReplayReport(trace, doc.get("device", {}), doc.get("recorded_device", {}), frames_from_document(doc["frames"]),
                        doc.get("frames_executed", 0), doc.get("started_from_checkpoint", -1))


def _replay_or_fail(trace: Path, **options: Any) -> Any:
    """:func:`_replay`, or the current test failed with its one line (no traceback: the line says it all)."""
    try:
        return _replay(trace, **options)
    except (ReplayFailed, ValueError) as exc:
        failure = shown(exc)
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def vkcap_replay(pytestconfig: Any) -> Callable[..., Any]:
    """``vkcap_replay(trace, atol=..., rtol=..., ulp=..., dtypes={...}, device=...)``: the replay's report."""
    def run(trace: str | Path, **tolerances: Any) -> Any:
        tolerances.setdefault("device", pytestconfig.getoption("vkcap_device"))
        return _replay_or_fail(Path(trace), **tolerances)

    return run


# ---------------------------------------------------------------------------------------------------------
# Suite items


class SuiteFailure(Exception):
    """A suite item's verdict, as the few lines its failure message shows."""


class ExpectedOutcome(SuiteFailure):
    """The trace diverged or crashed as its expectation says: the item's XFAIL."""


def _verdict_lines(item_name: str, report: Any, outcome: str, expected: Any, page: Path | None) -> list[str]:
    """The verdict, each diverged resource (frame, how much, the first indices), and the page."""
    device = report.device.get("device_name", "") or "the device"
    wanted = expected.status if expected.frame is None else f"{expected.status} from frame {expected.frame}"
    first = report.first_divergence
    found = outcome if first is None else f"{outcome} from frame {first.seq}"
    lines = [f"{item_name} on {device}: {found} (expected {wanted})"]
    diverged = [(f.seq, c) for f in report.frames for c in f.comparisons if c.diverged]
    diverged += [(f.seq, c) for f in report.frames for _, c in f.dispatches if c.diverged and not f.comparisons]
    for seq, c in diverged[:MAX_COMPARISONS_SHOWN]:
        lines.append(f"  frame {seq}: {comparison_line(c)}")
    if len(diverged) > MAX_COMPARISONS_SHOWN:
        lines.append(f"  ... and {len(diverged) - MAX_COMPARISONS_SHOWN} more diverged comparison(s)")
    if expected.reason:
        lines.append(f"  expectation: {expected.reason}")
    if page is not None and page.is_file():
        lines.append(f"  page: {page}")
    return lines


class SuiteItem(pytest.Item):
    def __init__(self, *, trace: Any, device: str | None, pages: Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trace, self.device, self.pages = trace, device, pages

    def _page(self) -> Path | None:
        if self.pages is None:
            return None

        return self.pages / f"{result_stem(str(self.trace.path), self.device or 'device')}.html"

    def runtest(self) -> None:
        expectations = {e.status for e in self.trace.expectations}
        page = self._page()
        try:
            report = _replay(self.trace.path, device=self.device, extra_flags=self.trace.flags, page=page)
        except ReplayFailed as exc:
            # the device is unknown when the child died before its report: an expectation of a crash that
            # is the suite's only kind of expectation for this trace applies, any other crash fails
            crash = next((e for e in self.trace.expectations if e.status == "crash"), None)
            if exc.crashed and crash is not None and expectations == {"crash"}:
                self.add_marker(pytest.mark.xfail(reason=shown(crash.reason or "expected to crash"), raises=ExpectedOutcome))
                raise ExpectedOutcome(shown(exc)) from None
            raise SuiteFailure(shown(exc)) from None
        name = report.device.get("device_name", "")
        expected = self.trace.expected_on(name, driver_of(report.device))
        if expected.status == "skip":
            pytest.skip(shown(f"{name}: {expected.reason or 'skipped by the suite'}"))
        statuses = {c.status for f in report.frames for c in [*f.comparisons, *(c for _, c in f.dispatches)]}
        outcome = "diverged" if report.diverged else "within" if WITHIN in statuses else "identical"
        first = report.first_divergence
        diverged = list(dict.fromkeys(c.uid for f in report.frames for c in f.comparisons if c.diverged))
        status = judge(outcome, expected, None if first is None else first.seq, diverged)  # an expectation's resources too
        message = "\n".join(shown(line) for line in _verdict_lines(self.trace.path.name, report, outcome, expected, page))
        if expected.status in ("diverged", "crash"):
            reason = f"expected {expected.status}" + (f": {expected.reason}" if expected.reason else "")
            self.add_marker(pytest.mark.xfail(reason=shown(reason), raises=ExpectedOutcome))
        if status == "expected":
            raise ExpectedOutcome(message)
        if status == "fail":
            raise SuiteFailure(message)
        # "fixed" returns: XPASS (a failure under xfail_strict), as pytest reports an xfail that passes

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, SuiteFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.trace.path, None, self.name


class SuiteCollector(pytest.Collector):
    """The traces of the ``--vkcap-suite`` arguments, one :class:`SuiteItem` each (loaded, and checked,
    at configure time)."""

    def collect(self) -> list[SuiteItem]:
        traces = self.config.stash[_SUITE_KEY]
        device = self.config.getoption("vkcap_device")
        pages = self.config.getoption("vkcap_html")
        taken: dict[str, int] = {}
        items = []
        for trace in traces:
            stem = shown(trace.path.name).replace("::", ":\\x3a")
            n = taken[stem] = taken.get(stem, 0) + 1
            name = f"vkcap[{stem}]" if n == 1 else f"vkcap[{stem}#{n}]"  # two folders' a.vkt: distinct ids
            items.append(SuiteItem.from_parent(self, name=name, trace=trace, device=device,
                                               pages=None if pages is None else Path(pages)))
        return items


_SUITE_KEY = pytest.StashKey[list]()


def pytest_configure(config: Any) -> None:
    """Load the suites: what cannot be read is a usage error (exit 4, one line), before any collection."""
    suites = config.getoption("vkcap_suite", default=None)
    if not suites:
        return

    allow = config.getoption("vkcap_allow_outside_manifest")
    if allow is None:
        allow = bool(config.getini("vkcap_allow_outside_manifest"))
    try:
        config.stash[_SUITE_KEY] = load_suite([Path(s) for s in suites], allow_outside=allow)
    except VkcapError as exc:  # the line names the command line's flag: name this plugin's options instead
        line = shown(exc).replace(ALLOW_FLAG, "--vkcap-allow-outside-manifest or the ini option vkcap_allow_outside_manifest")
        raise pytest.UsageError(f"--vkcap-suite: {line}") from None
    except OSError as exc:  # a suite that vanished, or a folder that cannot be listed
        raise pytest.UsageError(f"--vkcap-suite: {shown(exc.filename or '')}: {exc.strerror or exc}") from None
    pages = config.getoption("vkcap_html")
    if pages is not None:
        try:
            Path(pages).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"--vkcap-html: {shown(pages)}: {exc.strerror or exc}") from None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: Any) -> Any:
    """The session's collection gains the suite's collector, so its items are collected, counted and
    selected (``-k``, ``--deselect``) like every other."""
    report = yield
    if isinstance(collector, pytest.Session) and _SUITE_KEY in collector.config.stash and report.passed:
        report.result.append(SuiteCollector.from_parent(collector, name="vkcap-suite", nodeid="vkcap-suite"))
    return report
