"""vkcap's pytest plugin (entry point ``pytest11``): suites and replays in a project's own tests.

- ``pytest --vkcap-suite suite.toml`` (repeatable; a folder of traces works too): each trace of the suite
  is a test item, replayed in the test process through :func:`replay.replayer.replay` and judged
  against its expectation for the device (:func:`replay.suite.judge`): ``fail`` fails the item with the
  first diverged comparison, ``skip`` skips it. Items are collected in a fixed order, so pytest-xdist
  can share them out.
- The fixture ``vkcap_replay(trace, **tolerances)`` replays a trace (``atol``, ``rtol``, ``ulp``,
  ``dtypes={uid: dtype}``, ``device``) and returns the :class:`~replay.replayer.ReplayReport`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("vkcap")
    group.addoption("--vkcap-suite", action="append", default=[], metavar="SUITE",
                    help="replay every trace of a vkcap suite (suite.toml or a folder of .vkt) as test items")
    group.addoption("--vkcap-device", default=None, metavar="INDEX|NAME", help="the Vulkan device to replay on")


def _replay(trace: Path, *, atol: float = 0.0, rtol: float = 0.0, ulp: int = 0, dtypes: dict[str, str] | None = None,
            device: str | None = None, extra_flags: tuple[str, ...] = ()) -> Any:
    from replay.options import ReplayOptions
    from replay.replayer import replay
    from replay.tolerances import TolerancePolicy

    policy = TolerancePolicy(dtypes=dict(dtypes or {})).with_defaults(atol or None, rtol or None, ulp or None)
    for flag, value in zip(extra_flags[::2], extra_flags[1::2]):  # a manifest's own tolerance
        if flag == "--tolerance":
            from replay.tolerances import preset_policy

            policy = preset_policy(value.removeprefix("preset:"), str(trace))
        elif flag == "--ulp":
            policy = policy.with_defaults(None, None, int(value))
        else:
            policy = policy.with_defaults(float(value) if flag == "--atol" else None,
                                          float(value) if flag == "--rtol" else None, None)
    return replay(ReplayOptions(trace=trace, device=device, tolerances=policy, dtypes=tuple(policy.dtypes.items())))


@pytest.fixture
def vkcap_replay(pytestconfig: Any) -> Callable[..., Any]:
    """``vkcap_replay(trace, atol=..., rtol=..., ulp=..., dtypes={...}, device=...)``: the replay's report."""
    def run(trace: str | Path, **tolerances: Any) -> Any:
        tolerances.setdefault("device", pytestconfig.getoption("vkcap_device"))
        return _replay(Path(trace), **tolerances)

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

        report = _replay(self.trace.path, device=self.device, extra_flags=self.trace.flags)
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
