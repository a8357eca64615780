"""vkcap's pytest plugin (entry point ``pytest11``): suites and replays in a project's own tests.

- ``pytest --vkcap-suite suite.toml`` (repeatable; a folder of traces works too): each trace of the suite
  is a test item, replayed and judged against its expectation for the device
  (:func:`replay.suite.judge`): ``fail`` fails the item with the first diverged comparison, ``skip``
  skips it. Items are collected in a fixed order, so pytest-xdist can share them out.
- The fixture ``vkcap_replay(trace, **tolerances)`` replays a trace (``atol``, ``rtol``, ``ulp``,
  ``dtypes={uid: dtype}``, ``device``) and returns the :class:`~replay.replayer.ReplayReport`.

Every replay runs in a child ``vkcap replay`` (:func:`replay.isolate.run_child`), never in the test
process: a trace that crashes the driver (SIGSEGV, an emulation layer's abort) fails its own item or
test with the crash line (the frame it was running, how it died), and the session goes on. A trace
the child refuses (exit 2: damaged, hostile, an unknown device) fails its item with the child's one
line. Tolerances given to the fixture are finite numbers >= 0 (``ulp`` a whole number), checked
before anything runs; a manifest's own tolerances are checked by the child as ``replay`` checks them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("vkcap")
    group.addoption("--vkcap-suite", action="append", default=[], metavar="SUITE",
                    help="replay every trace of a vkcap suite (suite.toml or a folder of .vkt) as test items")
    group.addoption("--vkcap-device", default=None, metavar="INDEX|NAME", help="the Vulkan device to replay on")


MAX_ULP = 1 << 63  # as replay.tolerances: ULP counts are 64-bit


def check_tolerances(atol: Any, rtol: Any, ulp: Any) -> None:
    """Refuse (``ValueError`` naming the key) a tolerance that is not a finite number >= 0, or an
    ``ulp`` that is not a whole number below 2**63: ``nan`` would pass every comparison."""
    for key, value in (("atol", atol), ("rtol", rtol), ("ulp", ulp)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"vkcap_replay: {key}: must be a finite number >= 0, got {value!r}")
    if not isinstance(ulp, int) or ulp >= MAX_ULP:
        raise ValueError(f"vkcap_replay: ulp: must be a whole number below 2**63, got {ulp!r}")


class ReplayFailed(Exception):
    """The child replay crashed or refused the trace: one line saying which and how."""


def _child_arguments(trace: Path, *, atol: float, rtol: float, ulp: int, dtypes: dict[str, str],
                     device: str | None, extra_flags: tuple[str, ...]) -> list[str]:
    """The ``vkcap replay`` arguments: the trace, the fixture's tolerances (those set), the dtypes, the
    device, then a manifest's own tolerance flags (which win, as they did in process)."""
    text = str(trace)
    args = [f"./{text}" if text.startswith("-") else text]
    for flag, value in (("--atol", atol), ("--rtol", rtol), ("--ulp", ulp)):
        if value:
            args.append(f"{flag}={value!r}")
    for uid, dtype in (dtypes or {}).items():
        args.append(f"--dtype={uid}={dtype}")
    if device is not None:
        args.append(f"--device={device}")
    for flag, value in zip(extra_flags[::2], extra_flags[1::2]):
        args.append(f"{flag}={value}")
    return args


def _replay(trace: Path, *, atol: float = 0.0, rtol: float = 0.0, ulp: int = 0, dtypes: dict[str, str] | None = None,
            device: str | None = None, extra_flags: tuple[str, ...] = ()) -> Any:
    """The report of replaying ``trace`` in a child process (see the module notes); raises
    :class:`ReplayFailed` when the child crashed or refused the trace."""
    from replay.isolate import run_child
    from replay.replayer import ReplayReport
    from replay.report import frames_from_document
    from vkcore.errors import VkcapError

    check_tolerances(atol, rtol, ulp)
    args = _child_arguments(trace, atol=atol, rtol=rtol, ulp=ulp, dtypes=dict(dtypes or {}), device=device,
                            extra_flags=extra_flags)
    try:
        outcome = run_child(args, echo=False)
    except VkcapError as exc:  # the child refused its input (exit 2): its own line
        raise ReplayFailed(str(exc)) from None
    if outcome.report is None:
        raise ReplayFailed(f"{trace.name}: {outcome.crash_line()}")
    doc = outcome.report
    return ReplayReport(trace, doc.get("device", {}), doc.get("recorded_device", {}), frames_from_document(doc["frames"]),
                        doc.get("frames_executed", 0), doc.get("started_from_checkpoint", -1))


def _replay_or_fail(trace: Path, **options: Any) -> Any:
    """:func:`_replay`, or the current test failed with its one line (no traceback: the line says it all)."""
    try:
        return _replay(trace, **options)
    except (ReplayFailed, ValueError) as exc:
        failure = str(exc)
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def vkcap_replay(pytestconfig: Any) -> Callable[..., Any]:
    """``vkcap_replay(trace, atol=..., rtol=..., ulp=..., dtypes={...}, device=...)``: the replay's report."""
    def run(trace: str | Path, **tolerances: Any) -> Any:
        tolerances.setdefault("device", pytestconfig.getoption("vkcap_device"))
        return _replay_or_fail(Path(trace), **tolerances)

    return run


class SuiteItem(pytest.Item):
    def __init__(self, *, trace: Any, device: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trace, self.device = trace, device

    def runtest(self) -> None:
        from replay.report import comparison_line
        from replay.results import WITHIN
        from replay.suite import driver_of, judge
        from vkcore.safe_text import shown  # pytest prints the message to the terminal: the uid in it escaped

        report = _replay_or_fail(self.trace.path, device=self.device, extra_flags=self.trace.flags)
        name = report.device.get("device_name", "")
        expected = self.trace.expected_on(name, driver_of(report.device))
        if expected.status == "skip":
            pytest.skip(shown(f"{name}: {expected.reason or 'skipped by the suite'}"))
        statuses = {c.status for f in report.frames for c in [*f.comparisons, *(c for _, c in f.dispatches)]}
        outcome = "diverged" if report.diverged else "within" if WITHIN in statuses else "identical"
        first = report.first_divergence
        status = judge(outcome, expected, None if first is None else first.seq)
        if status == "fail":
            bad = [c for f in report.frames for c in f.comparisons if c.diverged]
            detail = comparison_line(bad[0]) if bad else outcome
            raise AssertionError(shown(f"{self.trace.path.name} on {name}: {outcome} (expected {expected.status}): {detail}"))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.trace.path, 0, f"vkcap suite: {self.trace.path.name}"


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    suites = config.getoption("vkcap_suite")
    if not suites:
        return
    from replay.suite import load_suite

    device = config.getoption("vkcap_device")
    for trace in load_suite([Path(s) for s in suites]):
        items.append(SuiteItem.from_parent(session, name=f"vkcap[{trace.path.name}]", trace=trace, device=device))
