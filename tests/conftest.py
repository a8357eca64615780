"""Shared fixtures: an isolated vkcap cache per test session, and the scenario builder."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.builders import ScenarioBuilder


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep compiled shaders, layer manifests and validation markers out of the user's cache."""
    os.environ["VKCAP_CACHE_DIR"] = str(tmp_path_factory.mktemp("vkcap-cache"))


VALIDATE = os.environ.get("VKCAP_TEST_VALIDATE", "strict")


@pytest.fixture(autouse=True)
def _under_validation(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every scenario the tests execute, in this process or in a ``vkcap`` child, runs under the Khronos
    validation layer (``VKCAP_VALIDATE=strict``: errors and warnings), and any message fails the test
    that caused it. ``VKCAP_TEST_VALIDATE=0`` turns this off (timing a suite without the layer)."""
    from vkcore.device import validation

    if VALIDATE in ("0", "off"):
        yield
        return
    log = tmp_path / "validation.log"
    os.environ[validation.ENV] = VALIDATE
    os.environ[validation.LOG_ENV] = str(log)
    yield
    text = log.read_text() if log.exists() else ""
    if text and request.node.get_closest_marker("invalid_api_use") is None:
        pytest.fail(f"the validation layer reported:\n{text}", pytrace=False)


@pytest.fixture
def builder(tmp_path: Path) -> ScenarioBuilder:
    return ScenarioBuilder(tmp_path / "scenario")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``reference`` needs the reference runner: skipped without it, failed under ``make test``."""
    if item.get_closest_marker("reference") is not None:
        from tests.reference import skip_without_reference

        skip_without_reference()
