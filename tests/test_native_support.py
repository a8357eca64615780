"""The cache of which ARM extensions the installed drivers provide natively."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vkcore.device import native_support
from vkcore.device.context import TENSORS_EXT, VulkanContext


def test_answers_and_invalidation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "cache"))
    manifest = tmp_path / "icd.json"
    manifest.write_text(json.dumps({"ICD": {"library_path": str(tmp_path / "lib.so")}}))
    monkeypatch.setenv("VK_DRIVER_FILES", str(manifest))
    assert native_support.known_native([TENSORS_EXT]) is None  # never learnt
    native_support.remember([[], []])
    assert native_support.known_native([TENSORS_EXT]) is False
    native_support.remember([[], [TENSORS_EXT]])
    assert native_support.known_native([TENSORS_EXT]) is True
    (tmp_path / "lib.so").write_bytes(b"a new driver")  # the driver changed: learnt again
    assert native_support.known_native([TENSORS_EXT]) is None


@pytest.mark.device
def test_a_tensor_context_learns_then_starts_with_the_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "cache"))
    with VulkanContext(need_tensors=True) as first:
        assert TENSORS_EXT in first.extensions
    if native_support.known_native([TENSORS_EXT]) is not False:
        pytest.skip("this device provides VK_ARM_tensors natively: no emulation layers to start with")
    with VulkanContext(need_tensors=True) as second:  # the fast path: one instance, with the layers
        assert TENSORS_EXT in second.extensions and second.layers == first.layers
