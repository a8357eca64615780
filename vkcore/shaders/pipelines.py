"""Compute pipelines: descriptor set layouts from bindings, push constants, specialization constants,
and a persistent ``VkPipelineCache`` kept per scenario.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vulkan as vk

from ..device.context import VulkanContext
from ..errors import DeviceError, ScenarioError, UnsupportedDeviceFeature
from ..outputs import write_atomic
from ..scenario.model import Shader, SpecializationConstant
from . import specialization
from .compile import SpirvModule
from .spirv import SpirvError, reflect
from .spirv_validate import validate

FEEDBACK_VALID = 0x1  # VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT
FEEDBACK_CACHE_HIT = 0x2  # VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT

# One descriptor layout entry: (binding id, VkDescriptorType).
LayoutSignature = tuple[tuple[int, tuple[tuple[int, int], ...]], ...]


class PipelineCacheMiss(DeviceError):
    """``--fail-on-pipeline-cache-miss`` was given and a pipeline was not in the cache."""


def pack_specialization(constants: tuple[SpecializationConstant, ...], code: bytes = b"", uid: str = "",
                        place: str | None = None) -> tuple[list[Any], bytes]:
    """Map entries and data, each constant packed as the type the module ``code`` declares for it
    (:mod:`vkcore.shaders.specialization`). A value that does not fit is a :class:`ScenarioError`
    naming the constant (``place.specialization_constants[j]``)."""
    try:
        declared = reflect(code).spec_constants if code else {}
    except SpirvError:
        declared = {}
    try:
        packed, data = specialization.pack([(c.id, c.value) for c in constants], declared)
    except specialization.UnfitConstant as exc:
        raise ScenarioError(exc.describe(uid), place=f"{place}.specialization_constants[{exc.index}]" if place else None) from None
    entries = [vk.VkSpecializationMapEntry(constantID=i, offset=offset, size=size) for i, offset, size in packed]
    return entries, data


def check_specialization(spec: Shader, code: bytes) -> None:
    """Refuse, naming the constant, a specialization value of ``spec`` that does not fit the type its
    module ``code`` declares (what :func:`pack_specialization` would refuse), before limits computed
    from the values (the workgroup size) are judged."""
    pack_specialization(spec.specialization_constants, code, spec.uid, spec.place)


def validation_flags(ctx: VulkanContext) -> tuple[str, ...]:
    """The ``spirv-val`` layout flags the device's enabled features imply (vkcap enables every core
    feature the device has; relaxed block layout is part of Vulkan 1.1 and on by default there)."""
    f12 = vk.VkPhysicalDeviceVulkan12Features(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)
    features = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=f12)
    vk.vkGetPhysicalDeviceFeatures2(ctx.physical, features)
    flags = []
    if f12.scalarBlockLayout:
        flags.append("--scalar-block-layout")
    if f12.uniformBufferStandardLayout:
        flags.append("--uniform-buffer-standard-layout")
    return tuple(flags)


def check_module(code: bytes, flags: tuple[str, ...], what: str, place: str | None) -> None:
    """Refuse (:class:`ScenarioError`, exit 2) a module ``spirv-val`` rejects, before any driver sees
    it: ``what`` names it (``shader 'add'``), the message is the validator's first."""
    message = validate(code, flags)
    if message is not None:
        raise ScenarioError(f"{what}: invalid SPIR-V (spirv-val: {message})", place=place)


def check_shared_memory(ctx: VulkanContext, code: bytes, spec: Shader, file: Path | str | None = None) -> None:
    """Refuse a compute shader whose shared (workgroup) variables, with its specialization applied,
    exceed the device's ``maxComputeSharedMemorySize`` (drivers crash on it)."""
    values: dict[int, int | float] = {c.id: c.value for c in spec.specialization_constants}
    try:
        needed = reflect(code, values).workgroup_bytes
    except SpirvError:
        return
    limit = int(ctx.limits.maxComputeSharedMemorySize)
    if needed > limit:
        raise UnsupportedDeviceFeature(
            f"shader '{spec.uid}' declares {needed} bytes of shared memory; this device allows {limit} "
            f"(maxComputeSharedMemorySize)", file=file, place=spec.place)


RECORD_SUFFIX = ".vkcap"  # beside the cache file: vkcap's record of the pipelines it holds


class PipelineCache:
    """The reference runner's pipeline cache file, and vkcap's record of what it holds.

    The file is ``<cache-path>/<scenario stem>.cache`` (:func:`cache_file_for`) and holds exactly the
    driver's ``VkPipelineCache`` data, as the reference writes it: the two runners read each other's
    caches. Beside it, ``<stem>.cache.vkcap`` (JSON) lists, per device, the keys of the pipelines built
    with it, because a CPU driver's cache stores nothing and its creation feedback never says hit.

    A pipeline *hits* when the driver's creation feedback says the cache provided it, or the record
    lists its key for this device. ``--fail-on-pipeline-cache-miss`` refuses a miss only when the cache
    had something to hit (:attr:`primed`: a non-empty file or a record for this device): a run that
    starts without a cache fills it and is not a failure, as in the reference. Whether the driver
    itself reused compiled code is also counted apart (``driver_hits``). Files are replaced whole.
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
        self._record: dict[str, list[str]] = {}
        initial = b""
        if path is not None:
            if clear:
                for stale in (path, self.record_path):
                    if stale is not None and stale.exists():
                        stale.unlink()
            initial = self._load(path)
        self._initial = initial
        self.primed = bool(initial) or bool(self.known)
        info = vk.VkPipelineCacheCreateInfo(initialDataSize=len(initial), pInitialData=vk.ffi.from_buffer(initial) if initial else vk.ffi.NULL)
        self.handle = vk.vkCreatePipelineCache(ctx.device, info, None)

    @property
    def record_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(self.path.name + RECORD_SUFFIX)

    def _load(self, path: Path) -> bytes:
        """The driver data of ``path`` (the driver checks its header and ignores what is not its own);
        fills ``known`` from the record. A missing or unreadable file is empty, a damaged record none."""
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        record_path = self.record_path
        assert record_path is not None
        try:
            record = json.loads(record_path.read_text())
            devices = record["devices"] if isinstance(record, dict) else {}
            self._record = {str(k): [str(p) for p in v] for k, v in devices.items() if isinstance(v, list)}
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            self._record = {}
        self.known = set(self._record.get(self.device_key, []))
        return data

    def lookup(self, key: str, driver_hit: bool = False) -> bool:
        """Count one pipeline: whether it hit (see the class notes)."""
        self.driver_hits += driver_hit
        hit = driver_hit or key in self.known
        if hit:
            self.hits += 1
        else:
            self.misses += 1
        if key not in self.known:
            self.added.add(key)
        return hit

    def data(self) -> bytes:
        size = vk.ffi.new("size_t *")
        vk.lib.vkGetPipelineCacheData(self.ctx.device, self.handle, size, vk.ffi.NULL)
        buf = vk.ffi.new("char[]", size[0])
        vk.lib.vkGetPipelineCacheData(self.ctx.device, self.handle, size, buf)
        return bytes(vk.ffi.buffer(buf, size[0]))

    def save(self) -> None:
        """Write the cache file and the record (each atomically) when caching is on and they changed."""
        if self.path is None:
            return
        data = self.data()
        if data != self._initial or not self.path.exists():
            write_atomic(self.path, [data])
        if self.added:
            record_path = self.record_path
            assert record_path is not None
            devices = {**self._record, self.device_key: sorted(self.known | self.added)}
            write_atomic(record_path, [json.dumps({"devices": devices}, indent=1, sort_keys=True).encode(), b"\n"])

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
    """The pipeline cache file of a scenario, named as the reference runner names it: its stem and
    ``.cache`` in ``cache_dir`` (scenarios of one name in different folders share it, as there)."""
    return cache_dir / f"{scenario_path.stem}.cache"


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
        self._validation_flags: tuple[str, ...] | None = None

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
        keep: list[Any] = []
        stages = []
        for bit, module, spec in ((vk.VK_SHADER_STAGE_VERTEX_BIT, vertex, vs), (vk.VK_SHADER_STAGE_FRAGMENT_BIT, fragment, fs)):
            entries, data = pack_specialization(spec.specialization_constants, module.code, spec.uid, spec.place)
            keep.append(data)
            spec_info = (vk.VkSpecializationInfo(pMapEntries=entries, dataSize=len(data), pData=vk.ffi.from_buffer(data))
                         if entries else None)
            stages.append(vk.VkPipelineShaderStageCreateInfo(stage=bit, module=self.module(module, spec.place), pName=spec.entry,
                                                             pSpecializationInfo=spec_info))
        layout, set_layouts = self.pipeline_layout(signature, push_constants_size, stages_bits)  # after the checks
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
        """Count a pipeline just created in the cache's statistics; whether it hit."""
        return self.cache.lookup(key, bool(feedback.flags & FEEDBACK_VALID) and bool(feedback.flags & FEEDBACK_CACHE_HIT))

    def _own(self, key: Any, cp: ComputePipeline, what: str) -> ComputePipeline:
        """Keep ``cp`` under ``key`` (the factory destroys it from here, refused or not); then refuse a
        miss as :meth:`refuse_miss` does."""
        self._pipelines[key] = cp
        self.refuse_miss(cp.cache_hit, what)
        return cp

    def refuse_miss(self, hit: bool, what: str) -> None:
        """With ``--fail-on-pipeline-cache-miss`` and a cache that had something to hit: raise
        :class:`PipelineCacheMiss` naming ``what`` when the pipeline missed."""
        if self.cache.fail_on_miss and self.cache.primed and not hit:
            raise PipelineCacheMiss(f"pipeline cache miss for {what} (--fail-on-pipeline-cache-miss)")

    def count_other(self, material: Any, what: str) -> None:
        """Count a pipeline built outside the factory (a data graph or optical-flow pipeline, created with
        :attr:`cache`'s handle) by what makes it (JSON-ready ``material``), and refuse a miss."""
        self.refuse_miss(self.cache.lookup(_digest(["other", material])), what)

    def module(self, spirv: SpirvModule, place: str | None = None) -> Any:
        """The VkShaderModule of ``spirv``, made once, after ``spirv-val`` accepted it (a refusal is a
        :class:`ScenarioError` at ``place``, the shader's JSON place)."""
        if spirv.uid not in self._modules:
            if self._validation_flags is None:
                self._validation_flags = validation_flags(self.ctx)
            check_module(spirv.code, self._validation_flags, f"shader '{spirv.uid}'", place)
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
        module = self.module(spirv, spec.place)  # validated before anything else is made
        check_shared_memory(self.ctx, spirv.code, spec)
        entries, data = pack_specialization(spec.specialization_constants, spirv.code, spec.uid, spec.place)
        layout, set_layouts = self.pipeline_layout(signature, spec.push_constants_size, vk.VK_SHADER_STAGE_COMPUTE_BIT)
        keep: list[Any] = [data]
        spec_info = (
            vk.VkSpecializationInfo(pMapEntries=entries, dataSize=len(data), pData=vk.ffi.from_buffer(data))
            if entries
            else None
        )
        entry_name = vk.ffi.new("char[]", spec.entry.encode())
        keep.append(entry_name)
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName=spec.entry, pSpecializationInfo=spec_info
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
