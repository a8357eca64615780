"""Shared fixtures: an isolated vkcap cache per test session, and the scenario builder."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.builders import ScenarioBuilder


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep compiled shaders, layer manifests and validation markers out of the user's cache."""
    os.environ["VKCAP_CACHE_DIR"] = str(tmp_path_factory.mktemp("vkcap-cache"))


@pytest.fixture
def builder(tmp_path: Path) -> ScenarioBuilder:
    return ScenarioBuilder(tmp_path / "scenario")
