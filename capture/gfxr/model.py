"""The compute state machine: replays a capture's calls on the host, keeping what a scenario needs.

Memory is modelled as bytes (what the host wrote into mapped memory, through fill-memory commands, and
what copies and fills recorded in command buffers moved while their sources were host-known). Buffers and
images are views of memory; a dispatch turns each descriptor it binds into a scenario resource keyed by
the memory range it covers, whose initial contents are the host-known bytes of that range when it is first
dispatched on. A host write into a range after dispatches used it (the next frame's inputs) makes a new
*version* of that resource (a new scenario resource with the new bytes) for the dispatches after it, when
the range's bytes are all host-known then: the device never wrote it (by the shaders' own NonWritable
decorations), or the host wrote all of it. Device work makes a range *device-written*: reading it back (a
copy into memory the host maps, or mapping it) makes the resource an output; anything else that would need
the device's bytes on the host (a host copy of them, an indirect dispatch's arguments, a partial host
write over them) is a :class:`DependsOnUnsupported` naming the call.

Guarantees: handles are the capture's integers and never become names or paths; every size taken from the
capture is checked against :data:`MAX_MEMORY` before bytes are allocated; unsupported calls are noted in
:class:`~.unsupported.Unsupported`, and raise only when a dispatch depends on them.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from vkcore.resources.formats import format_info
from vkcore.shaders.spirv import SpirvError, reflect

from .blocks import FillMemory, pointed_bytes
from .reader import Call, Capture
from .unsupported import DependsOnUnsupported, Unsupported, kind_of

MAX_MEMORY = 4 << 30  # all memory the importer models, together
WHOLE_SIZE = (1 << 64) - 1
SPEC_FORMATS = {("int", 8): "b", ("int", 16): "h", ("int", 32): "i", ("int", 64): "q", ("uint", 8): "B",
                ("uint", 16): "H", ("uint", 32): "I", ("uint", 64): "Q", ("float", 16): "e", ("float", 32): "f",
                ("float", 64): "d", ("bool", 32): "I"}


def _int(value: Any, what: str, index: int, limit: int = 1 << 64) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise DependsOnUnsupported(f"call {index}: {what} is not a usable number ({str(value)[:40]})")
    return value


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class Memory:
    size: int
    data: bytearray | None = None  # allocated on the first host write
    device_written: bool = False

    def write(self, offset: int, raw: bytes) -> None:
        if self.data is None:
            self.data = bytearray(self.size)
        self.data[offset:offset + len(raw)] = raw

    def read(self, offset: int, size: int) -> bytes | None:
        return None if self.data is None else bytes(self.data[offset:offset + size])


@dataclass
class Buffer:
    size: int
    memory: int | None = None
    offset: int = 0


@dataclass
class Image:
    """A 2-D, single-level, single-layer image; its texels (tightly packed rows) as the host knows them.
    ``unsupported`` names the call that made it one vkcap cannot carry (then binding it raises)."""

    format: str
    width: int
    height: int
    tiling: str
    unsupported: str = ""
    content: bytes | None = None
    device_written: bool = False
    resource: "Resource | None" = None

    @property
    def size(self) -> int:
        return self.width * self.height * format_info(self.format).block_bytes


@dataclass
class Resource:
    """One scenario buffer (a memory range a dispatch bound) or image (``image`` set)."""

    uid: str
    memory: int
    offset: int
    size: int
    initial: bytes | None
    first_use: int
    output: bool = False
    written: bool = False
    read: bool = False  # an image some dispatch binds where its shader may read it (not NonReadable)
    image: Image | None = None
    lineage: str = ""  # uid of the first version of this memory range
    stale: int | None = None  # index of the first host write into it since a dispatch bound it
    rewritten: list[tuple[int, int]] = field(default_factory=list)  # those writes' (offset, end) in memory

    def __post_init__(self) -> None:
        self.lineage = self.lineage or self.uid

    def host_knows_all(self) -> bool:
        """Whether the host wrote every byte of the range since it went stale (device results all replaced)."""
        end = self.offset
        for start, stop in sorted(self.rewritten):
            if start > end:
                return False
            end = max(end, stop)
        return end >= self.offset + self.size


@dataclass
class Pipeline:
    module: int
    entry: str
    layout: int
    constants: list[tuple[int, int | float]]


@dataclass
class Dispatch:
    index: int
    shader: str  # uid of the shader (module + entry + constants + push size)
    groups: tuple[int, int, int]
    bindings: list[tuple[int, int, str]]  # set, binding, resource uid
    push: bytes


@dataclass
class Boundary:
    """The end of a frame: the uids of the resources current there (outputs among them are captured)."""

    live: list[str]


@dataclass
class Model:
    capture: Capture
    frames_per_submit: bool = False
    memories: dict[int, Memory] = field(default_factory=dict)
    buffers: dict[int, Buffer] = field(default_factory=dict)
    images: dict[int, Image] = field(default_factory=dict)
    views: dict[int, int] = field(default_factory=dict)  # image view -> image
    modules: dict[int, bytes] = field(default_factory=dict)
    layouts: dict[int, int] = field(default_factory=dict)  # pipeline layout -> push constant size
    pipelines: dict[int, Pipeline] = field(default_factory=dict)
    sets: dict[int, dict[int, tuple[int, int, int]]] = field(default_factory=dict)  # set -> binding -> (buffer, offset, range)
    command_buffers: dict[int, list[Call]] = field(default_factory=dict)
    resources: dict[tuple[int, int, int], Resource] = field(default_factory=dict)  # the current version of each range
    versions: list[Resource] = field(default_factory=list)  # every version, in order of creation
    shaders: dict[tuple[Any, ...], str] = field(default_factory=dict)  # key -> uid
    shader_code: dict[str, tuple[bytes, str, list[tuple[int, int | float]], int]] = field(default_factory=dict)
    commands: list[Dispatch | Boundary] = field(default_factory=list)
    access: dict[int, tuple[set[tuple[int, int]], set[tuple[int, int]]]] = field(default_factory=dict)  # module ->
    # its NonWritable and its NonReadable bindings
    unsupported: Unsupported = field(default_factory=Unsupported)
    modelled: int = 0

    # --- host side -----------------------------------------------------------------------------------

    def run(self) -> "Model":
        handlers = self._handlers()
        for event in self.capture.events:
            if isinstance(event, FillMemory):
                self._fill(event)
                continue
            handler = handlers.get(event.name)
            kind = kind_of(event.name, set(handlers))
            if handler is not None:
                handler(event)
            elif kind not in ("ignored",):
                self.unsupported.note(kind, event.name, event.index)
        return self

    def _handlers(self) -> dict[str, Callable[[Call], None]]:
        return {
            "vkAllocateMemory": self._allocate_memory, "vkMapMemory": self._map_memory,
            "vkCreateBuffer": self._create_buffer, "vkBindBufferMemory": self._bind_buffer_memory,
            "vkBindBufferMemory2": self._bind_buffer_memory2, "vkBindBufferMemory2KHR": self._bind_buffer_memory2,
            "vkCreateShaderModule": self._create_shader_module, "vkCreatePipelineLayout": self._create_pipeline_layout,
            "vkCreateComputePipelines": self._create_compute_pipelines,
            "vkAllocateDescriptorSets": self._allocate_descriptor_sets,
            "vkUpdateDescriptorSets": self._update_descriptor_sets,
            "vkAllocateCommandBuffers": self._allocate_command_buffers,
            "vkBeginCommandBuffer": self._begin_command_buffer, "vkResetCommandBuffer": self._begin_command_buffer,
            "vkQueueSubmit": self._queue_submit, "vkQueueSubmit2": self._queue_submit2,
            "vkQueueSubmit2KHR": self._queue_submit2, "vkQueuePresentKHR": self._frame,
            "vkFrameBoundaryANDROID": self._frame,
            "vkCreateImage": self._create_image, "vkCreateImageView": self._create_image_view,
            "vkBindImageMemory": _nothing, "vkBindImageMemory2": _nothing, "vkBindImageMemory2KHR": _nothing,
            "vkCreateDescriptorSetLayout": _nothing, "vkUnmapMemory": _nothing, "vkCmdPipelineBarrier": self._record,
            "vkCmdPipelineBarrier2": self._record, "vkCmdPipelineBarrier2KHR": self._record,
            **{name: self._record for name in RECORDED},
        }

    def _account(self, size: int, index: int) -> None:
        self.modelled += size
        if self.modelled > MAX_MEMORY:
            raise DependsOnUnsupported(f"call {index}: the capture allocates more than {MAX_MEMORY >> 30} GiB, more "
                                       "than the importer models")

    def _allocate_memory(self, call: Call) -> None:
        info = _dict(call.args.get("pAllocateInfo"))
        size = _int(info.get("allocationSize"), "allocationSize", call.index)
        self._account(size, call.index)
        self.memories[_int(call.args.get("pMemory"), "pMemory", call.index)] = Memory(size)

    def _map_memory(self, call: Call) -> None:
        memory = self.memories.get(call.args.get("memory"))  # type: ignore[arg-type]
        if memory is not None and memory.device_written:
            self._read_back(call.args.get("memory"), 0, memory.size)

    def _fill(self, fill: FillMemory) -> None:
        memory = self.memories.get(fill.memory)
        if memory is None or fill.offset + len(fill.data) > memory.size:
            self.unsupported.note("other", "fill-memory outside any allocation", fill.index)
            return
        self.host_write(fill.memory, fill.offset, fill.data, fill.index)

    def host_write(self, memory: int, offset: int, raw: bytes, index: int) -> None:
        """``raw`` written at ``offset`` of ``memory`` by the host (or by a copy of host-known bytes); the
        resources it changes go stale (see :meth:`resource`)."""
        backing = self.memories[memory]
        for r in self.resources.values():
            if r.memory != memory or not _overlaps(r, offset, len(raw)):
                continue
            lo, hi = max(offset, r.offset), min(offset + len(raw), r.offset + r.size)
            if not r.written and backing.read(lo, hi - lo) == raw[lo - offset:hi - offset]:
                continue  # the same bytes again (the capture layer rewrites whole pages)
            r.stale = index if r.stale is None else r.stale
            r.rewritten.append((lo, hi))
        backing.write(offset, raw)

    def _create_buffer(self, call: Call) -> None:
        info = _dict(call.args.get("pCreateInfo"))
        size = _int(info.get("size"), "buffer size", call.index, MAX_MEMORY + 1)
        self.buffers[_int(call.args.get("pBuffer"), "pBuffer", call.index)] = Buffer(size)

    def _bind(self, buffer: Any, memory: Any, offset: Any, index: int) -> None:
        target, backing = self.buffers.get(buffer), self.memories.get(memory)
        offset = _int(offset, "memoryOffset", index)
        if target is None or backing is None or offset + target.size > backing.size:
            raise DependsOnUnsupported(f"call {index}: binds a buffer to memory the capture does not describe")
        target.memory, target.offset = memory, offset

    def _bind_buffer_memory(self, call: Call) -> None:
        self._bind(call.args.get("buffer"), call.args.get("memory"), call.args.get("memoryOffset"), call.index)

    def _bind_buffer_memory2(self, call: Call) -> None:
        for info in _list(call.args.get("pBindInfos")):
            info = _dict(info)
            self._bind(info.get("buffer"), info.get("memory"), info.get("memoryOffset"), call.index)

    def _create_image(self, call: Call) -> None:
        info = _dict(call.args.get("pCreateInfo"))
        extent = _dict(info.get("extent"))
        name = str(info.get("format"))[:60]
        image = Image(name, _int(extent.get("width"), "width", call.index, 1 << 16),
                      _int(extent.get("height"), "height", call.index, 1 << 16),
                      "LINEAR" if info.get("tiling") == "VK_IMAGE_TILING_LINEAR" else "OPTIMAL")
        try:
            fmt = format_info(name)
        except (KeyError, ValueError):
            fmt = None
        shape = (info.get("imageType"), extent.get("depth"), info.get("mipLevels"), info.get("arrayLayers"),
                 info.get("samples"))
        if shape != ("VK_IMAGE_TYPE_2D", 1, 1, 1, "VK_SAMPLE_COUNT_1_BIT"):
            image.unsupported = f"call {call.index}: vkCreateImage: not a 2-D image of one level, layer and sample"
        elif fmt is None or not fmt.image or fmt.is_depth or fmt.file_bytes != fmt.block_bytes:
            image.unsupported = f"call {call.index}: vkCreateImage: {name} is not an image format vkcap carries"
        self.images[_int(call.args.get("pImage"), "pImage", call.index)] = image

    def _create_image_view(self, call: Call) -> None:
        info = _dict(call.args.get("pCreateInfo"))
        image = self.images.get(info.get("image"))  # type: ignore[arg-type]
        if image is not None and info.get("format") != image.format and not image.unsupported:
            image.unsupported = f"call {call.index}: vkCreateImageView: a view in another format"
        self.views[_int(call.args.get("pView"), "pView", call.index)] = info.get("image")  # type: ignore[assignment]

    def image_resource(self, view: Any, index: int) -> Resource:
        """The scenario image behind ``view``, made when a dispatch first binds it."""
        image = self.images.get(self.views.get(view))  # type: ignore[arg-type]
        if image is None:
            raise DependsOnUnsupported(f"call {index}: binds an image view the capture does not describe")
        if image.unsupported:
            raise DependsOnUnsupported(f"{image.unsupported}, bound by the dispatch at call {index}")
        if image.resource is None:
            image.resource = Resource(f"image{len(self.versions)}", -1, 0, image.size, image.content, index, image=image)
            self.versions.append(image.resource)
        return image.resource

    def _params(self, call: Call) -> bytes:
        return self.capture.blocks.calls.get(call.index, b"")

    def _create_shader_module(self, call: Call) -> None:
        info = _dict(call.args.get("pCreateInfo"))
        size = _int(info.get("codeSize"), "codeSize", call.index, 1 << 28)
        code = pointed_bytes(self._params(call), info.get("pCode"), size, 4)
        if code is None:
            raise DependsOnUnsupported(f"call {call.index}: vkCreateShaderModule: the capture does not hold the code")
        self.modules[_int(call.args.get("pShaderModule"), "pShaderModule", call.index)] = code

    def _create_pipeline_layout(self, call: Call) -> None:
        info = _dict(call.args.get("pCreateInfo"))
        push = max([_int(_dict(r).get("offset", 0), "offset", call.index, 1 << 16)
                    + _int(_dict(r).get("size", 0), "size", call.index, 1 << 16)
                    for r in _list(info.get("pPushConstantRanges"))] or [0])
        self.layouts[_int(call.args.get("pPipelineLayout"), "pPipelineLayout", call.index)] = push

    def _create_compute_pipelines(self, call: Call) -> None:
        params = self._params(call)
        infos, handles = _list(call.args.get("pCreateInfos")), _list(call.args.get("pPipelines"))
        for info, handle in zip(infos, handles):
            info = _dict(info)
            stage = _dict(info.get("stage"))
            module = stage.get("module")
            if module not in self.modules:
                raise DependsOnUnsupported(f"call {call.index}: vkCreateComputePipelines: an unknown shader module")
            entry = stage.get("pName") if isinstance(stage.get("pName"), str) else "main"
            constants = self._constants(call.index, params, self.modules[module], _dict(stage.get("pSpecializationInfo")))
            self.pipelines[_int(handle, "pPipelines", call.index)] = Pipeline(module, entry, info.get("layout"), constants)

    def _constants(self, index: int, params: bytes, code: bytes, spec: dict[str, Any]) -> list[tuple[int, int | float]]:
        if not spec:
            return []
        size = _int(spec.get("dataSize", 0), "dataSize", index, 1 << 16)
        data = pointed_bytes(params, spec.get("pData"), size)
        if data is None:
            raise DependsOnUnsupported(f"call {index}: vkCreateComputePipelines: the capture does not hold the "
                                       "specialization data")
        try:
            declared = reflect(code).spec_constants
        except SpirvError:
            declared = {}
        out: list[tuple[int, int | float]] = []
        for entry in _list(spec.get("pMapEntries")):
            entry = _dict(entry)
            cid = _int(entry.get("constantID"), "constantID", index, 1 << 32)
            offset = _int(entry.get("offset"), "offset", index, size + 1)
            width = _int(entry.get("size"), "size", index, 9)
            if cid not in declared:
                continue  # Vulkan ignores a constant the module does not declare
            kind = declared[cid]
            fmt = SPEC_FORMATS.get((kind.kind, kind.width))
            if fmt is None or struct.calcsize(fmt) != width or offset + width > size:
                raise DependsOnUnsupported(f"call {index}: specialization constant {cid}: {width} bytes for a "
                                           f"{kind.text}, which vkcap cannot carry")
            (value,) = struct.unpack_from("<" + fmt, data, offset)
            if kind.kind == "float" and value != value or value in (float("inf"), float("-inf")):
                raise DependsOnUnsupported(f"call {index}: specialization constant {cid} is not finite")
            out.append((cid, bool(value) if kind.kind == "bool" else value))
        return out

    def _allocate_descriptor_sets(self, call: Call) -> None:
        for handle in _list(call.args.get("pDescriptorSets")):
            self.sets[_int(handle, "pDescriptorSets", call.index)] = {}

    def _update_descriptor_sets(self, call: Call) -> None:
        for write in _list(call.args.get("pDescriptorWrites")):
            write = _dict(write)
            target = self.sets.get(write.get("dstSet"))  # type: ignore[arg-type]
            kind = write.get("descriptorType")
            if target is None:
                continue
            if kind == "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE":
                binding = _int(write.get("dstBinding"), "dstBinding", call.index, 1 << 32)
                infos = _list(write.get("pImageInfo"))
                if _int(write.get("dstArrayElement", 0), "dstArrayElement", call.index, 1 << 32) or len(infos) != 1:
                    self.unsupported.note("other", "descriptor arrays", call.index)
                    continue
                target[binding] = (IMAGE, _dict(infos[0]).get("imageView"), call.index)
                continue
            if kind not in ("VK_DESCRIPTOR_TYPE_STORAGE_BUFFER", "VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER"):
                self.unsupported.note("other", f"vkUpdateDescriptorSets ({kind})", call.index)
                target[_int(write.get("dstBinding"), "dstBinding", call.index, 1 << 32)] = (None, call.index, str(kind)[:60])
                continue
            binding = _int(write.get("dstBinding"), "dstBinding", call.index, 1 << 32)
            element = _int(write.get("dstArrayElement", 0), "dstArrayElement", call.index, 1 << 32)
            for k, info in enumerate(_list(write.get("pBufferInfo"))):
                info = _dict(info)
                if element + k:
                    self.unsupported.note("other", "descriptor arrays", call.index)
                    continue
                target[binding] = (info.get("buffer"), _int(info.get("offset"), "offset", call.index),
                                   _int(info.get("range"), "range", call.index))
        for _copy in _list(call.args.get("pDescriptorCopies")):
            self.unsupported.note("other", "vkUpdateDescriptorSets (descriptor copies)", call.index)

    def _allocate_command_buffers(self, call: Call) -> None:
        for handle in _list(call.args.get("pCommandBuffers")):
            self.command_buffers[_int(handle, "pCommandBuffers", call.index)] = []

    def _begin_command_buffer(self, call: Call) -> None:
        self.command_buffers[call.args.get("commandBuffer")] = []  # type: ignore[index]

    def _record(self, call: Call) -> None:
        recorded = self.command_buffers.get(call.args.get("commandBuffer"))  # type: ignore[arg-type]
        if recorded is not None:
            recorded.append(call)

    def _frame(self, call: Call) -> None:
        if self.commands and not isinstance(self.commands[-1], Boundary):
            self.commands.append(Boundary([r.uid for r in self.resources.values()]))

    def _queue_submit(self, call: Call) -> None:
        for submit in _list(call.args.get("pSubmits")):
            for cb in _list(_dict(submit).get("pCommandBuffers")):
                self._execute(cb)
            self._submit_done(_dict(submit))

    def _queue_submit2(self, call: Call) -> None:
        for submit in _list(call.args.get("pSubmits")):
            for info in _list(_dict(submit).get("pCommandBufferInfos")):
                self._execute(_dict(info).get("commandBuffer"))
            self._submit_done(_dict(submit))

    def _submit_done(self, submit: dict[str, Any]) -> None:
        chained, boundary = submit.get("pNext"), False
        for _ in range(16):
            if not isinstance(chained, dict):
                break
            boundary |= chained.get("sType") == "VK_STRUCTURE_TYPE_FRAME_BOUNDARY_EXT"
            chained = chained.get("pNext")
        if boundary or self.frames_per_submit:
            self._frame(Call(-1, "", {}))

    # --- device side (at submit) --------------------------------------------------------------------

    def _execute(self, cb: Any) -> None:
        state = Execution(self)
        for call in self.command_buffers.get(cb, []):
            state.step(call)

    def range_of(self, buffer: Any, offset: int, size: int, index: int) -> tuple[int, int, int]:
        """(memory, offset in memory, size) of ``size`` bytes at ``offset`` of ``buffer``."""
        target = self.buffers.get(buffer)
        if target is None or target.memory is None:
            raise DependsOnUnsupported(f"call {index}: uses a buffer without memory the capture describes")
        if size == WHOLE_SIZE:
            size = target.size - offset
        if offset + size > target.size or size <= 0:
            raise DependsOnUnsupported(f"call {index}: a range past the end of its buffer")
        return target.memory, target.offset + offset, size

    def resource(self, memory: int, offset: int, size: int, index: int) -> Resource:
        """The current version of the range, a new version when the host rewrote it since (see the module
        notes); raises where the new version's bytes are not all host-known or the range aliases another."""
        key = (memory, offset, size)
        found = self.resources.get(key)
        if found is not None and found.stale is None:
            return found
        others = [r for r in self.versions if r.memory == memory and _overlaps(r, offset, size)
                  and (found is None or r.lineage != found.lineage)]
        if found is not None:
            if found.written and not found.host_knows_all():
                raise DependsOnUnsupported(f"call {found.stale}: a host write into part of memory a dispatch wrote, "
                                           f"read again by the dispatch at call {index} (the device's bytes beside "
                                           "it are not in the capture)")
            if others:
                raise DependsOnUnsupported(f"call {found.stale}: a host write into memory that several bound "
                                           f"ranges share, read again by the dispatch at call {index}")
        elif any(r.lineage != r.uid for r in others) or any(r.stale is not None for r in others):
            raise DependsOnUnsupported(f"call {index}: binds memory that overlaps a range the host rewrote "
                                       "between dispatches")
        made = Resource(f"buffer{len(self.versions)}", memory, offset, size, self.memories[memory].read(offset, size),
                        index, lineage=found.lineage if found is not None else "")
        self.resources[key] = made
        self.versions.append(made)
        return made

    def _read_back(self, memory: Any, offset: int, size: int) -> None:
        for r in self.resources.values():
            if r.memory == memory and r.written and _overlaps(r, offset, size):
                r.output = True

    def binding_access(self, module: int) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
        """The (set, binding) pairs the module declares NonWritable, and those it declares NonReadable
        (none of either when it cannot be reflected: then every binding may be read and written)."""
        if module not in self.access:
            try:
                reflected = reflect(self.modules[module])
                self.access[module] = (reflected.read_only, reflected.write_only)
            except SpirvError:
                self.access[module] = (set(), set())
        return self.access[module]

    def shader_uid(self, pipeline: Pipeline, push: int) -> str:
        key = (pipeline.module, pipeline.entry, tuple(pipeline.constants), push)
        uid = self.shaders.get(key)
        if uid is None:
            uid = self.shaders[key] = f"shader{len(self.shaders)}"
            self.shader_code[uid] = (self.modules[pipeline.module], pipeline.entry, pipeline.constants, push)
        return uid


def _overlaps(r: Resource, offset: int, size: int) -> bool:
    return r.offset < offset + size and offset < r.offset + r.size


def _nothing(call: Call) -> None:
    return None


IMAGE = "image"  # the first item of a descriptor set entry that holds a storage image: (IMAGE, view, index)


RECORDED = ("vkCmdBindPipeline", "vkCmdBindDescriptorSets", "vkCmdPushConstants", "vkCmdDispatch",
            "vkCmdDispatchBase", "vkCmdDispatchIndirect", "vkCmdCopyBuffer", "vkCmdFillBuffer", "vkCmdUpdateBuffer",
            "vkCmdCopyBufferToImage", "vkCmdCopyImageToBuffer")


@dataclass
class Execution:
    """One command buffer's state while its commands execute, in submission order."""

    model: Model
    pipeline: Pipeline | None = None
    sets: dict[int, int] = field(default_factory=dict)
    push: bytearray = field(default_factory=lambda: bytearray(256))

    def step(self, call: Call) -> None:
        getattr(self, "_" + call.name[len("vkCmd"):].lower())(call)

    def _pipelinebarrier(self, call: Call) -> None:
        return None  # every imported dispatch ends with vkcap's implicit barrier, at least as strong

    _pipelinebarrier2 = _pipelinebarrier2khr = _pipelinebarrier

    def _bindpipeline(self, call: Call) -> None:
        if call.args.get("pipelineBindPoint") != "VK_PIPELINE_BIND_POINT_COMPUTE":
            self.model.unsupported.note("graphics", "vkCmdBindPipeline (graphics)", call.index)
            return
        self.pipeline = self.model.pipelines.get(call.args.get("pipeline"))  # type: ignore[arg-type]

    def _binddescriptorsets(self, call: Call) -> None:
        if call.args.get("pipelineBindPoint") != "VK_PIPELINE_BIND_POINT_COMPUTE":
            return
        if _list(call.args.get("pDynamicOffsets")):
            self.model.unsupported.note("other", "dynamic descriptor offsets", call.index)
        first = _int(call.args.get("firstSet", 0), "firstSet", call.index, 64)
        for k, handle in enumerate(_list(call.args.get("pDescriptorSets"))):
            self.sets[first + k] = handle

    def _pushconstants(self, call: Call) -> None:
        offset = _int(call.args.get("offset"), "offset", call.index, 256)
        size = _int(call.args.get("size"), "size", call.index, 257 - offset)
        data = pointed_bytes(self.model._params(call), call.args.get("pValues"), size)
        if data is None:
            raise DependsOnUnsupported(f"call {call.index}: vkCmdPushConstants: the capture does not hold the values")
        self.push[offset:offset + size] = data

    def _dispatch(self, call: Call, groups: tuple[int, int, int] | None = None) -> None:
        if groups is None:
            groups = tuple(_int(call.args.get(k), k, call.index, 1 << 32) for k in ("groupCountX", "groupCountY", "groupCountZ"))  # type: ignore[assignment]
        if self.pipeline is None:
            raise DependsOnUnsupported(f"call {call.index}: {call.name} without a compute pipeline the importer knows")
        model = self.model
        read_only, write_only = model.binding_access(self.pipeline.module)
        bindings, written = [], []
        for set_index, handle in sorted(self.sets.items()):
            for binding, (buffer, offset, size) in sorted(model.sets.get(handle, {}).items()):
                if buffer == IMAGE:
                    resource = model.image_resource(offset, call.index)
                    bindings.append((set_index, binding, resource.uid))
                    if (set_index, binding) not in read_only:
                        written.append(resource)
                    if (set_index, binding) not in write_only:
                        resource.read = True
                    continue
                if buffer is None:
                    raise DependsOnUnsupported(f"call {offset}: vkUpdateDescriptorSets writes a {size} descriptor "
                                               f"(not imported) that the dispatch at call {call.index} binds")
                memory, moffset, msize = model.range_of(buffer, offset, size, call.index)
                resource = model.resource(memory, moffset, msize, call.index)
                bindings.append((set_index, binding, resource.uid))
                if (set_index, binding) not in read_only:
                    written.append(resource)
        for resource in written:  # a dispatch may write whatever it binds without NonWritable
            resource.written = True
            if resource.image is not None:
                resource.image.device_written = True
            else:
                model.memories[resource.memory].device_written = True
        push = model.layouts.get(self.pipeline.layout, 0)
        model.commands.append(Dispatch(call.index, model.shader_uid(self.pipeline, push), groups, bindings,
                                       bytes(self.push[:push])))

    def _dispatchbase(self, call: Call) -> None:
        if any(call.args.get(k) for k in ("baseGroupX", "baseGroupY", "baseGroupZ")):
            raise DependsOnUnsupported(f"call {call.index}: vkCmdDispatchBase with a non-zero base group")
        self._dispatch(call)

    def _dispatchindirect(self, call: Call) -> None:
        memory, offset, _ = self.model.range_of(call.args.get("buffer"), _int(call.args.get("offset"), "offset", call.index), 12, call.index)
        backing = self.model.memories[memory]
        raw = backing.read(offset, 12)
        if backing.device_written or raw is None:
            raise DependsOnUnsupported(f"call {call.index}: vkCmdDispatchIndirect reads arguments the device wrote")
        self._dispatch(call, struct.unpack("<III", raw))

    def _copybuffer(self, call: Call) -> None:
        model = self.model
        for region in _list(call.args.get("pRegions")):
            region = _dict(region)
            size = _int(region.get("size"), "size", call.index)
            smem, soff, _ = model.range_of(call.args.get("srcBuffer"), _int(region.get("srcOffset"), "srcOffset", call.index), size, call.index)
            dmem, doff, _ = model.range_of(call.args.get("dstBuffer"), _int(region.get("dstOffset"), "dstOffset", call.index), size, call.index)
            source, target = model.memories[smem], model.memories[dmem]
            if any(r.memory == smem and r.written and _overlaps(r, soff, size) for r in model.resources.values()):
                model._read_back(smem, soff, size)  # device results copied out: what the application reads
                target.device_written = True
                continue
            raw = source.read(soff, size)
            model.host_write(dmem, doff, raw if raw is not None else bytes(size), call.index)

    def _whole_image(self, call: Call, image: Image | None) -> tuple[Image, int] | None:
        """(image, buffer offset) when the copy is one region of the whole image, tightly packed."""
        regions = _list(call.args.get("pRegions"))
        if image is None or image.unsupported or len(regions) != 1:
            return None
        region = _dict(regions[0])
        extent, offset = _dict(region.get("imageExtent")), _dict(region.get("imageOffset"))
        sub = _dict(region.get("imageSubresource"))
        if ((extent.get("width"), extent.get("height"), extent.get("depth")) != (image.width, image.height, 1)
                or any(offset.get(k) for k in "xyz") or sub.get("mipLevel") or sub.get("baseArrayLayer")
                or region.get("bufferRowLength") not in (0, image.width)
                or region.get("bufferImageHeight") not in (0, image.height)):
            return None
        return image, _int(region.get("bufferOffset"), "bufferOffset", call.index)

    def _copybuffertoimage(self, call: Call) -> None:
        model = self.model
        image = model.images.get(call.args.get("dstImage"))  # type: ignore[arg-type]
        whole = self._whole_image(call, image)
        if whole is None:
            if image is not None and not image.unsupported:
                image.unsupported = f"call {call.index}: vkCmdCopyBufferToImage: not one tightly packed copy of the whole image"
            return
        image, offset = whole
        memory, moffset, _ = model.range_of(call.args.get("srcBuffer"), offset, image.size, call.index)
        if image.resource is not None:
            raise DependsOnUnsupported(f"call {call.index}: vkCmdCopyBufferToImage into an image dispatches already "
                                       "used (the scenario format uploads images once)")
        if any(r.memory == memory and r.written and _overlaps(r, moffset, image.size) for r in model.resources.values()):
            raise DependsOnUnsupported(f"call {call.index}: vkCmdCopyBufferToImage of bytes the device wrote")
        image.content = model.memories[memory].read(moffset, image.size)

    def _copyimagetobuffer(self, call: Call) -> None:
        model = self.model
        image = model.images.get(call.args.get("srcImage"))  # type: ignore[arg-type]
        whole = self._whole_image(call, image)
        if whole is None:
            if image is not None and image.device_written:
                raise DependsOnUnsupported(f"call {call.index}: vkCmdCopyImageToBuffer: not one tightly packed copy "
                                           "of the whole image")
            return
        image, offset = whole
        memory, moffset, _ = model.range_of(call.args.get("dstBuffer"), offset, image.size, call.index)
        if image.device_written and image.resource is not None:
            image.resource.output = True
            model.memories[memory].device_written = True
        elif image.content is not None:
            model.host_write(memory, moffset, image.content, call.index)

    def _fillbuffer(self, call: Call) -> None:
        size = _int(call.args.get("size"), "size", call.index)
        memory, offset, size = self.model.range_of(call.args.get("dstBuffer"), _int(call.args.get("dstOffset"), "dstOffset", call.index), size, call.index)
        word = struct.pack("<I", _int(call.args.get("data"), "data", call.index, 1 << 32))
        self.model.host_write(memory, offset, (word * (size // 4 + 1))[:size], call.index)

    def _updatebuffer(self, call: Call) -> None:
        size = _int(call.args.get("dataSize"), "dataSize", call.index, 65537)
        data = pointed_bytes(self.model._params(call), call.args.get("pData"), size)
        if data is None:
            raise DependsOnUnsupported(f"call {call.index}: vkCmdUpdateBuffer: the capture does not hold the data")
        memory, offset, _ = self.model.range_of(call.args.get("dstBuffer"), _int(call.args.get("dstOffset"), "dstOffset", call.index), size, call.index)
        self.model.host_write(memory, offset, data, call.index)
