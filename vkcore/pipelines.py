"""Compute pipelines: descriptor set layouts from bindings, push constants, specialization constants,
and a persistent ``VkPipelineCache`` kept per scenario.
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vulkan as vk

from .device import VulkanContext
from .errors import DeviceError
from .outputs import write_atomic
from .scenario import Shader, SpecializationConstant
from .shaders import SpirvModule

FEEDBACK_VALID = 0x1  # VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT
FEEDBACK_CACHE_HIT = 0x2  # VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT

# One descriptor layout entry: (binding id, VkDescriptorType).
LayoutSignature = tuple[tuple[int, tuple[tuple[int, int], ...]], ...]


class PipelineCacheMiss(DeviceError):
    """``--fail-on-pipeline-cache-miss`` was given and a pipeline was not in the cache."""


def pack_specialization(constants: tuple[SpecializationConstant, ...]) -> tuple[list[Any], bytes]:
    """Map entries and data: integers as 32-bit (signed or unsigned by value), floats as float32."""
    entries, data = [], b""
    for c in constants:
        if isinstance(c.value, bool) or isinstance(c.value, int):
            v = int(c.value)
            raw = struct.pack("<i", v) if v < 0 else struct.pack("<I", v & 0xFFFFFFFF)
        else:
            raw = struct.pack("<f", float(c.value))
        entries.append(vk.VkSpecializationMapEntry(constantID=c.id, offset=len(data), size=4))
        data += raw
    return entries, data


CACHE_FILE_MAGIC = b"VKCAPPC1\n"


class PipelineCache:
    """A ``VkPipelineCache`` persisted per scenario, with vkcap's own record of which pipelines it holds.

    The file is ``VKCAPPC1\n`` + one JSON line (the device it belongs to and the keys of the pipelines
    built with it) + the driver's cache data. A pipeline *hits* when the file already lists its key for
    this device: that holds on every driver, including CPU drivers whose own cache stores nothing.
    Whether the driver itself reused compiled code is counted apart (``driver_hits``).
    """

    def __init__(self, ctx: VulkanContext, path: Path | None, *, clear: bool = False, fail_on_miss: bool = False) -> None:
        self.ctx = ctx
        self.path = path
        self.fail_on_miss = fail_on_miss
        self.hits = 0
        self.misses = 0
        self.driver_hits = 0
        self.device_key = f"{ctx.info.pipeline_cache_uuid}:{ctx.info.driver_version}:{ctx.info.device_id}"
        self.known: set[str] = set()
        self.added: set[str] = set()
        initial = b""
        if path is not None:
            if clear and path.exists():
                path.unlink()
            initial = self._load(path)
        self._initial = initial
        info = vk.VkPipelineCacheCreateInfo(initialDataSize=len(initial), pInitialData=vk.ffi.from_buffer(initial) if initial else vk.ffi.NULL)
        self.handle = vk.vkCreatePipelineCache(ctx.device, info, None)

    def _load(self, path: Path) -> bytes:
        """The driver data from ``path``; fills ``known``. A missing, foreign or damaged file is empty."""
        try:
            raw = path.read_bytes()
        except OSError:
            return b""
        if not raw.startswith(CACHE_FILE_MAGIC):
            return b""
        end = raw.find(b"\n", len(CACHE_FILE_MAGIC))
        try:
            manifest = json.loads(raw[len(CACHE_FILE_MAGIC) : end])
        except ValueError:
            return b""
        if end < 0 or manifest.get("device") != self.device_key:
            return b""
        self.known = set(manifest.get("pipelines", []))
        return raw[end + 1 :]

    def lookup(self, key: str) -> bool:
        hit = key in self.known
        if hit:
            self.hits += 1
        else:
            self.misses += 1
            self.added.add(key)
        return hit

    def data(self) -> bytes:
        size = vk.ffi.new("size_t *")
        vk.lib.vkGetPipelineCacheData(self.ctx.device, self.handle, size, vk.ffi.NULL)
        buf = vk.ffi.new("char[]", size[0])
        vk.lib.vkGetPipelineCacheData(self.ctx.device, self.handle, size, buf)
        return bytes(vk.ffi.buffer(buf, size[0]))

    def save(self) -> None:
        """Write the cache atomically when caching is on and it learned something."""
        if self.path is None:
            return
        data = self.data()
        if not self.added and data == self._initial:
            return
        manifest = {"device": self.device_key, "pipelines": sorted(self.known | self.added)}
        write_atomic(self.path, [CACHE_FILE_MAGIC, json.dumps(manifest).encode(), b"\n", data])

    def destroy(self) -> None:
        vk.vkDestroyPipelineCache(self.ctx.device, self.handle, None)


def _stage_material(spirv: SpirvModule, spec: Shader) -> list[Any]:
    return [spirv.digest, spec.entry, [(c.id, c.value) for c in spec.specialization_constants]]


def _digest(material: list[Any]) -> str:
    return hashlib.sha256(json.dumps(material).encode()).hexdigest()[:32]


def pipeline_key(spirv: SpirvModule, spec: Shader, signature: "LayoutSignature") -> str:
    """What makes two compute pipelines the same: code, entry, constants, layout, push constant size."""
    return _digest([*_stage_material(spirv, spec), signature, spec.push_constants_size])


def graphics_pipeline_key(vertex: SpirvModule, fragment: SpirvModule, vs: Shader, fs: Shader,
                          signature: "LayoutSignature", push_constants_size: int, color_formats: list[int],
                          extent: tuple[int, int]) -> str:
    """What makes two full-screen graphics pipelines the same: both stages (as :func:`pipeline_key`), the
    layout, push constant size, attachment formats and viewport. A ``"graphics"`` tag keeps the keys
    apart from compute keys."""
    return _digest(["graphics", _stage_material(vertex, vs), _stage_material(fragment, fs), signature,
                    push_constants_size, color_formats, list(extent)])


def cache_file_for(scenario_path: Path, cache_dir: Path) -> Path:
    """The pipeline cache file of a scenario: one per scenario file, named after it."""
    tag = hashlib.sha256(str(scenario_path.resolve()).encode()).hexdigest()[:12]
    return cache_dir / f"vkcap-{scenario_path.stem}-{tag}.pipeline_cache"


@dataclass
class ComputePipeline:
    shader_uid: str
    pipeline: Any
    layout: Any
    set_layouts: dict[int, Any]
    cache_hit: bool
    push_constants_size: int
    keepalive: list[Any] = field(default_factory=list)


class PipelineFactory:
    """Builds and owns compute pipelines, one per (shader, descriptor layout) pair."""

    def __init__(self, ctx: VulkanContext, cache: PipelineCache) -> None:
        self.ctx = ctx
        self.cache = cache
        self._modules: dict[str, Any] = {}
        self._set_layouts: dict[tuple[tuple[tuple[int, int], ...], int], Any] = {}
        self._pipelines: dict[tuple[str, LayoutSignature], ComputePipeline] = {}

    def set_layout(self, bindings: tuple[tuple[int, int], ...], stages: int = vk.VK_SHADER_STAGE_COMPUTE_BIT) -> Any:
        """The descriptor set layout of (binding, VkDescriptorType) pairs, visible to ``stages``, made once."""
        key = (bindings, stages)
        if key not in self._set_layouts:
            entries = [vk.VkDescriptorSetLayoutBinding(binding=b, descriptorType=t, descriptorCount=1, stageFlags=stages)
                       for b, t in bindings]
            info = vk.VkDescriptorSetLayoutCreateInfo(pBindings=entries or None)
            self._set_layouts[key] = vk.vkCreateDescriptorSetLayout(self.ctx.device, info, None)
        return self._set_layouts[key]

    def pipeline_layout(self, signature: LayoutSignature, push_constants_size: int, stages: int) -> tuple[Any, dict[int, Any]]:
        """A new VkPipelineLayout (the caller owns it) and its set layouts by set number (sets between
        the used ones are empty)."""
        max_set = max((s for s, _ in signature), default=-1)
        by_set = dict(signature)
        set_layouts = {s: self.set_layout(by_set.get(s, ()), stages) for s in range(max_set + 1)}
        ranges = [vk.VkPushConstantRange(stageFlags=stages, offset=0, size=push_constants_size)] if push_constants_size else None
        info = vk.VkPipelineLayoutCreateInfo(pSetLayouts=[set_layouts[s] for s in range(max_set + 1)] or None,
                                             pPushConstantRanges=ranges)
        return vk.vkCreatePipelineLayout(self.ctx.device, info, None), set_layouts

    def graphics(self, vertex: SpirvModule, fragment: SpirvModule, vs: Shader, fs: Shader, signature: LayoutSignature,
                 push_constants_size: int, color_formats: list[int], extent: tuple[int, int]) -> "ComputePipeline":
        """A full-screen graphics pipeline (dynamic rendering into ``color_formats``, a static viewport of
        ``extent``, no vertex input, triangles, no culling or blending), built once per its key."""
        key = ((vs.uid, fs.uid, tuple(color_formats), extent, push_constants_size), signature)
        if key in self._pipelines:  # type: ignore[comparison-overlap]
            return self._pipelines[key]  # type: ignore[index]
        stages_bits = vk.VK_SHADER_STAGE_VERTEX_BIT | vk.VK_SHADER_STAGE_FRAGMENT_BIT
        layout, set_layouts = self.pipeline_layout(signature, push_constants_size, stages_bits)
        keep: list[Any] = []
        stages = []
        for bit, module, spec in ((vk.VK_SHADER_STAGE_VERTEX_BIT, vertex, vs), (vk.VK_SHADER_STAGE_FRAGMENT_BIT, fragment, fs)):
            entries, data = pack_specialization(spec.specialization_constants)
            keep.append(data)
            spec_info = (vk.VkSpecializationInfo(pMapEntries=entries, dataSize=len(data), pData=vk.ffi.from_buffer(data))
                         if entries else None)
            stages.append(vk.VkPipelineShaderStageCreateInfo(stage=bit, module=self.module(module), pName=spec.entry,
                                                             pSpecializationInfo=spec_info))
        width, height = extent
        write_all = (vk.VK_COLOR_COMPONENT_R_BIT | vk.VK_COLOR_COMPONENT_G_BIT | vk.VK_COLOR_COMPONENT_B_BIT
                     | vk.VK_COLOR_COMPONENT_A_BIT)
        rendering = vk.VkPipelineRenderingCreateInfo(pColorAttachmentFormats=color_formats or None)
        feedback = vk.ffi.new("VkPipelineCreationFeedback *")
        feedback_info = vk.VkPipelineCreationFeedbackCreateInfo(pNext=rendering, pPipelineCreationFeedback=feedback,
                                                                pipelineStageCreationFeedbackCount=0)
        info = vk.VkGraphicsPipelineCreateInfo(
            pNext=feedback_info, pStages=stages,
            pVertexInputState=vk.VkPipelineVertexInputStateCreateInfo(),
            pInputAssemblyState=vk.VkPipelineInputAssemblyStateCreateInfo(topology=vk.VK_PRIMITIVE_TOPOLOGY_TRIANGLE_LIST),
            pViewportState=vk.VkPipelineViewportStateCreateInfo(
                pViewports=[vk.VkViewport(0, 0, width, height, 0.0, 1.0)],
                pScissors=[vk.VkRect2D(vk.VkOffset2D(0, 0), vk.VkExtent2D(width, height))]),
            pRasterizationState=vk.VkPipelineRasterizationStateCreateInfo(
                polygonMode=vk.VK_POLYGON_MODE_FILL, cullMode=vk.VK_CULL_MODE_NONE,
                frontFace=vk.VK_FRONT_FACE_COUNTER_CLOCKWISE, lineWidth=1.0),
            pMultisampleState=vk.VkPipelineMultisampleStateCreateInfo(rasterizationSamples=vk.VK_SAMPLE_COUNT_1_BIT),
            pColorBlendState=vk.VkPipelineColorBlendStateCreateInfo(pAttachments=[
                vk.VkPipelineColorBlendAttachmentState(blendEnable=vk.VK_FALSE, colorWriteMask=write_all)
                for _ in color_formats] or None),
            layout=layout, renderPass=vk.VK_NULL_HANDLE, basePipelineIndex=-1,
        )
        try:
            pipeline = vk.vkCreateGraphicsPipelines(self.ctx.device, self.cache.handle, 1, [info], None)[0]
        except vk.VkError as exc:
            vk.vkDestroyPipelineLayout(self.ctx.device, layout, None)
            raise DeviceError(f"shaders '{vs.uid}' and '{fs.uid}': vkCreateGraphicsPipelines failed "
                              f"({type(exc).__name__})") from None
        hit = self._count(feedback, graphics_pipeline_key(vertex, fragment, vs, fs, signature, push_constants_size,
                                                          color_formats, extent))
        cp = ComputePipeline(fs.uid, pipeline, layout, set_layouts, hit, push_constants_size, keep)
        return self._own(key, cp, f"shaders '{vs.uid}' and '{fs.uid}'")

    def _count(self, feedback: Any, key: str) -> bool:
        """Count a pipeline just created in the cache's statistics; whether its key was in the cache file."""
        self.cache.driver_hits += bool(feedback.flags & FEEDBACK_VALID) and bool(feedback.flags & FEEDBACK_CACHE_HIT)
        return self.cache.lookup(key)

    def _own(self, key: Any, cp: ComputePipeline, what: str) -> ComputePipeline:
        """Keep ``cp`` under ``key`` (the factory destroys it from here, refused or not); then, with
        ``--fail-on-pipeline-cache-miss``, refuse it when it missed the cache, naming ``what``."""
        self._pipelines[key] = cp
        if self.cache.fail_on_miss and not cp.cache_hit:
            raise PipelineCacheMiss(f"pipeline cache miss for {what} (--fail-on-pipeline-cache-miss)")
        return cp

    def module(self, spirv: SpirvModule) -> Any:
        if spirv.uid not in self._modules:
            info = vk.VkShaderModuleCreateInfo(codeSize=len(spirv.code), pCode=spirv.code)
            try:
                self._modules[spirv.uid] = vk.vkCreateShaderModule(self.ctx.device, info, None)
            except vk.VkError as exc:
                raise DeviceError(f"shader '{spirv.uid}': vkCreateShaderModule failed ({type(exc).__name__})") from None
        return self._modules[spirv.uid]

    def compute(self, spirv: SpirvModule, spec: Shader, signature: LayoutSignature) -> ComputePipeline:
        """The pipeline for ``spec`` with descriptor sets ``signature`` (set -> bindings), built once."""
        key = (spec.uid, signature)
        if key in self._pipelines:
            return self._pipelines[key]
        layout, set_layouts = self.pipeline_layout(signature, spec.push_constants_size, vk.VK_SHADER_STAGE_COMPUTE_BIT)
        entries, data = pack_specialization(spec.specialization_constants)
        keep: list[Any] = [data]
        spec_info = (
            vk.VkSpecializationInfo(pMapEntries=entries, dataSize=len(data), pData=vk.ffi.from_buffer(data))
            if entries
            else None
        )
        entry_name = vk.ffi.new("char[]", spec.entry.encode())
        keep.append(entry_name)
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=self.module(spirv), pName=spec.entry, pSpecializationInfo=spec_info
        )
        feedback = vk.ffi.new("VkPipelineCreationFeedback *")
        feedback_info = vk.VkPipelineCreationFeedbackCreateInfo(pPipelineCreationFeedback=feedback, pipelineStageCreationFeedbackCount=0)
        info = vk.VkComputePipelineCreateInfo(pNext=feedback_info, stage=stage, layout=layout, basePipelineIndex=-1)
        try:
            pipeline = vk.vkCreateComputePipelines(self.ctx.device, self.cache.handle, 1, [info], None)[0]
        except vk.VkError as exc:
            vk.vkDestroyPipelineLayout(self.ctx.device, layout, None)
            raise DeviceError(
                f"shader '{spec.uid}': vkCreateComputePipelines failed ({type(exc).__name__}); check the entry point "
                f"'{spec.entry}', bindings and push constants against the shader"
            ) from None
        hit = self._count(feedback, pipeline_key(spirv, spec, signature))
        cp = ComputePipeline(spec.uid, pipeline, layout, set_layouts, hit, spec.push_constants_size, keep)
        return self._own(key, cp, f"shader '{spec.uid}'")

    def destroy(self) -> None:
        dev = self.ctx.device
        for cp in self._pipelines.values():
            vk.vkDestroyPipeline(dev, cp.pipeline, None)
            vk.vkDestroyPipelineLayout(dev, cp.layout, None)
        for sl in self._set_layouts.values():
            vk.vkDestroyDescriptorSetLayout(dev, sl, None)
        for m in self._modules.values():
            vk.vkDestroyShaderModule(dev, m, None)
        self._pipelines.clear()
        self._set_layouts.clear()
        self._modules.clear()
