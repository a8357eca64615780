"""The Vulkan instance (and on a GPU the logical device) started early, in a background thread, and
handed to the next context."""
from __future__ import annotations

from typing import Any

import pytest

from vkcore.device import context as device
from vkcore.device.context import VulkanContext, start_instance_early

pytestmark = pytest.mark.device


def _early_instance() -> Any:
    early = device._early
    assert early is not None
    early.thread.join()
    assert early.error is None and early.found is not None
    return early.found.instance


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
    assert device._early is not None and device._early.found is not None and device._early.found.instance == instance
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


def _count_device_openings(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[Any]]:
    """Devices opened from now on (by physical index), and early devices destroyed (their handles)."""
    opened: list[int] = []
    destroyed: list[Any] = []
    open_device, destroy = device._open_device, device._OpenDevice.destroy
    monkeypatch.setattr(device, "_open_device", lambda index, *a: opened.append(index) or open_device(index, *a))
    monkeypatch.setattr(device._OpenDevice, "destroy", lambda self: destroyed.append(self.device) or destroy(self))
    return opened, destroyed


def test_the_early_start_opens_the_device_only_when_a_gpu_is_there() -> None:
    """Auto: on a CPU driver (lavapipe) the context makes its device; with a GPU the thread does."""
    import vulkan as vk

    start_instance_early()
    _early_instance()
    assert device._early is not None and device._early.found is not None
    found = device._early.found
    types = {vk.vkGetPhysicalDeviceProperties(pd).deviceType for pd in found.physicals}
    assert (found.opened is not None) == (types != {vk.VK_PHYSICAL_DEVICE_TYPE_CPU})
    device._discard_early()


def test_the_next_plain_context_takes_the_early_device(monkeypatch: pytest.MonkeyPatch) -> None:
    start_instance_early(open_device=True)
    _early_instance()
    assert device._early is not None and device._early.found is not None
    early = device._early.found.opened
    assert early is not None
    opened, destroyed = _count_device_openings(monkeypatch)
    with VulkanContext() as ctx:
        assert ctx.device == early.device and ctx.extensions == early.extensions and opened == [] and destroyed == []
        assert ctx.queue is not None and ctx.features is early.features


def test_an_early_device_chosen_by_another_selector_is_destroyed_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    start_instance_early(open_device=True)  # chosen by default; the context asks for device 0 by index
    _early_instance()
    assert device._early is not None and device._early.found is not None and device._early.found.opened is not None
    early = device._early.found.opened.device
    opened, destroyed = _count_device_openings(monkeypatch)
    with VulkanContext(device="0") as ctx:
        assert ctx.device != early and opened == [0] and destroyed == [early]


def test_an_early_device_is_destroyed_when_the_context_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    start_instance_early(open_device=True)
    _early_instance()
    assert device._early is not None and device._early.found is not None and device._early.found.opened is not None
    early = device._early.found.opened.device
    _, destroyed = _count_device_openings(monkeypatch)

    def refuse(*args: Any) -> Any:
        raise device.DeviceError("refused by the test")

    monkeypatch.setattr(device, "choose_device", refuse)  # fails after the early device was taken
    with pytest.raises(device.DeviceError, match="refused by the test"):
        VulkanContext()
    assert destroyed == [early]


def test_missing_emulation_layers_are_reported_and_the_instance_is_destroyed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The instance without layers is given back before the layers are looked for; when they cannot be
    had, the context reports it and its cleanup must not give that instance back a second time (two
    later contexts would then share it)."""
    destroyed: list[Any] = []
    give_back = device._destroy_instance
    monkeypatch.setattr(device, "_destroy_instance", lambda instance: destroyed.append(instance) or give_back(instance))

    def unavailable() -> Any:
        raise device.EmulationLayersUnavailable("ARM's emulation layers are not installed (test)")

    monkeypatch.setattr(device, "prepare_emulation_layers", unavailable)
    with pytest.raises(device.UnsupportedDeviceFeature,
                       match=r"the device lacks tensor/graph support and ARM's emulation layers are not installed \(test\)"):
        VulkanContext(need_tensors=True, emulation="always")
    assert len(destroyed) == 1


def test_a_process_reuses_its_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    """Contexts give their instance back for the next one: NVIDIA's 580 driver refuses a process's 31st
    vkCreateInstance, even with every earlier instance destroyed (measured on the H100 machine)."""
    import vulkan as vk

    created: list[int] = []
    create = vk.vkCreateInstance
    monkeypatch.setattr(vk, "vkCreateInstance", lambda info, allocator: created.append(1) or create(info, allocator))
    for _ in range(40):
        with VulkanContext() as ctx:
            assert ctx.device is not None
    assert len(created) <= 1


def test_a_process_that_exits_after_its_work_leaves_at_most_its_last_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The console script leaves its last closed device to the process's exit (vkDestroyDevice takes
    23 ms on NVIDIA's driver); the next device created destroys the one left before, so a long-lived
    process never holds more than one; with validation on, close destroys at once."""
    import vulkan as vk

    from vkcore.device import lifetime, validation

    destroyed: list[Any] = []
    real = vk.vkDestroyDevice
    monkeypatch.setattr(vk, "vkDestroyDevice", lambda d, a: (destroyed.append(d), real(d, a)))
    monkeypatch.setattr(lifetime, "exits_after_work", True)
    checker = validation.current()
    assert checker is not None  # every test runs under the validation layer (conftest)
    monkeypatch.setattr(validation, "current", lambda: None)
    with VulkanContext() as first:
        kept = first.device
        destroyed.clear()  # (an early start's device, discarded when this one was made)
    assert destroyed == [] and device._deferred_devices == [kept]
    with VulkanContext() as second:
        assert destroyed == [kept] and device._deferred_devices == []
        left = second.device
    assert device._deferred_devices == [left]
    device._destroy_deferred_devices()
    assert destroyed == [kept, left]
    monkeypatch.setattr(validation, "current", lambda: checker)
    with VulkanContext() as third:
        checked = third.device
    assert destroyed[-1] == checked and device._deferred_devices == []
