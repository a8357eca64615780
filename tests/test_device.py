"""The Vulkan instance started early, in a background thread, and handed to the next context."""
from __future__ import annotations

from typing import Any

import pytest

from vkcore import device
from vkcore.device import VulkanContext, start_instance_early


def _early_instance() -> Any:
    early = device._early
    assert early is not None
    early.thread.join()
    assert early.error is None and early.found is not None
    return early.found[0]


def _count_creations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The layers of every instance created from now on (the early one is made before)."""
    made: list[tuple[str, ...]] = []
    create = device._create_instance
    monkeypatch.setattr(device, "_create_instance", lambda layers: made.append(layers) or create(layers))
    return made


def test_the_next_context_takes_the_early_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    start_instance_early()
    instance = _early_instance()
    start_instance_early()  # already started: nothing more
    assert device._early is not None and device._early.found is not None and device._early.found[0] == instance
    made = _count_creations(monkeypatch)
    with VulkanContext() as ctx:
        assert ctx.instance == instance and ctx.device is not None and made == []
    assert device._early is None
    with VulkanContext():  # the next one starts its own
        assert made == [()]


def test_an_early_instance_made_for_another_loader_environment_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    start_instance_early()
    _early_instance()
    early = device._early
    made = _count_creations(monkeypatch)
    monkeypatch.setenv("VK_VKCAP_TEST_MARKER", "1")  # as --icd or the emulation layers change the environment
    with VulkanContext() as ctx:
        assert made == [()] and ctx.device is not None
    assert early is not None and early.found is None  # destroyed, not leaked
