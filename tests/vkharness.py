"""Small pieces of Vulkan plumbing shared by the tests that drive vkcore directly (below the session)."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.needs import missing
import vulkan as vk


class Submitter:
    """A :class:`vkcore.resources.base.OneTimeSubmit`: record into one command buffer, submit, wait on a fence."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.pool = vk.vkCreateCommandPool(ctx.device, vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=ctx.queue_family), None)
        self.cb = vk.vkAllocateCommandBuffers(ctx.device, vk.VkCommandBufferAllocateInfo(
            commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(ctx.device, vk.VkFenceCreateInfo(), None)
        self.count = 0

    def __call__(self, record: Callable[[Any], None]) -> None:
        device = self.ctx.device
        vk.vkBeginCommandBuffer(self.cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        try:
            record(self.cb)
        finally:
            vk.vkEndCommandBuffer(self.cb)
        try:
            vk.vkQueueSubmit(self.ctx.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[self.cb])], self.fence)
            vk.vkWaitForFences(device, 1, [self.fence], vk.VK_TRUE, 60 * 10**9)
            vk.vkResetFences(device, 1, [self.fence])
            self.count += 1
        finally:
            vk.vkResetCommandBuffer(self.cb, 0)

    def destroy(self) -> None:
        vk.vkDestroyFence(self.ctx.device, self.fence, None)
        vk.vkDestroyCommandPool(self.ctx.device, self.pool, None)


def model_converter() -> str | None:
    """ARM's ``model-converter``: beside this Python, on PATH, or inside its package; None if absent."""
    beside = Path(sys.executable).parent / "model-converter"
    if beside.is_file():
        return str(beside)
    found = shutil.which("model-converter")
    if found:
        return found
    spec = importlib.util.find_spec("model_converter")
    if spec is not None and spec.submodule_search_locations:
        exe = Path(list(spec.submodule_search_locations)[0]) / "binaries" / "bin" / "model-converter"
        if exe.is_file():
            return str(exe)
    return None


def convert_model(mlir: Path, target: Path) -> Path:
    """``mlir`` (TOSA) converted to the VGF ``target`` by model-converter; skips the test when the
    converter is not installed, fails it (with the converter's stderr) when the conversion fails."""
    exe = model_converter()
    if exe is None:
        missing("model-converter (ai-ml-sdk-model-converter, CPython 3.11) is not installed")
    proc = subprocess.run([exe, "--input", str(mlir), "--output", str(target)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not target.is_file():
        pytest.fail(f"model-converter failed on {mlir.name} ({proc.returncode}):\n{proc.stdout[-1000:]}{proc.stderr[-3000:]}")
    return target


def compile_tensor_glsl(source: str) -> bytes:
    """SPIR-V of a compute shader that uses GL_ARM_tensors, from the tensor-capable glslc; skips the test
    when that compiler is not installed."""
    from vkcore.shaders.compile import tensor_glslc

    glslc = tensor_glslc()
    if glslc is None:
        missing("the tensor-capable glslc of ai-ml-sdk-scenario-runner is not installed")
    with tempfile.TemporaryDirectory(prefix="vkcap-test-") as tmp:
        src, out = Path(tmp) / "shader.comp", Path(tmp) / "shader.spv"
        src.write_text(source)
        # This glslc is ARM's wrapper: --input/--output/--stage, not shaderc's -fshader-stage/-o.
        proc = subprocess.run([str(glslc), "--stage", "compute", "--input", str(src), "--output", str(out)],
                              capture_output=True, text=True)
        assert proc.returncode == 0 and out.is_file(), proc.stdout + proc.stderr
        return out.read_bytes()


def vulkan_context(what: str, **needs: Any) -> Iterator[Any]:
    """For a fixture: a :class:`vkcore.device.context.VulkanContext` opened with ``needs``, closed afterwards;
    where none can be opened (no Vulkan, or no emulation layer package) the tests skip with
    "no <what> Vulkan device: <why>"."""
    from vkcore.device.context import VulkanContext

    try:
        context = VulkanContext(**needs)
    except Exception as exc:
        pytest.skip(f"no {what} Vulkan device: {exc}")
    yield context
    context.close()
