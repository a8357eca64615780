"""A pure-Python reader of VGF files (ARM's container for neural graphs and compute shaders).

``read_vgf(path)`` returns a :class:`VgfFile`: what ``dispatch_graph`` needs to know before any Vulkan call
(modules and their code, segments in execution order with their descriptor sets, the model resource table,
the constants with their SPIR-V graph constant ids, and which resources the scenario's ``bindings`` bind).
Only the ``flatbuffers`` runtime (``flatbuffers.table.Table``) is used; ARM's ``vgfpy`` (Python 3.11 only)
is not needed. The tables below are data (:data:`_SCHEMA`); one generic, bounds-checked walker reads them.

Guarantees, for files from strangers:

* every offset and length is checked against the section and file sizes before it is read; a file never
  makes the reader allocate more than the file's own size (constant payloads are not read at all until
  :meth:`Constant.read`), and the work done is linear in the file's size (shared sub-tables included);
* anything wrong is a :class:`VgfError` (one line, exit code 2) that names it: not a VGF (bad magic),
  truncated, unsupported format version, or an inconsistent table (with the place, e.g.
  ``model sequence table segments[1].module_index``);
* fields this reader does not know are ignored (FlatBuffers tables are extensible), fields a version lacks
  take the schema's defaults.

Layout (learned from ARM's ai-ml-sdk-vgf-library: ``src/header.hpp``, ``src/constant.hpp``,
``schema/vgf.fbs``, ``docs/source/file_format.rst``, and checked field by field against files written by
its encoder and ``model-converter`` 0.11.0; all integers little-endian):

Header, 128 bytes::

    0   char[4]  magic "VGF1" (files from before the FourCC carry the old magic C3 D2 E1 F0)
    4   u16      VK_HEADER_VERSION of the Vulkan headers the encoder used (0 = unknown)
    6   u16      reserved
    8   u8[3]    format version major, minor, patch     (0.3.0 first public; 0.4.0 large models /
    11  u8       reserved                                 raw constants; 0.4.3 8-byte aligned sections;
    12  u32      reserved                                 0.5.0 graph constant bindings, alias groups)
    16  {u64 offset, u64 size} x 4: module table, model sequence table, model resource table, constants
    80  u64[6]   reserved

The first three sections are FlatBuffers (root table offset at byte 0, no file identifier)::

    ModuleTable        { modules: [Module] }
    Module             { type: ModuleType(u8: COMPUTE 0, GRAPH 1); name: string; entry_point: string;
                         code: union ModuleCode { SPIRV 1 {words: [u32]}, GLSL 2 {code: string},
                                                  HLSL 3 {code: string} } }
                         (no code, or an empty one, is a placeholder to substitute at load time)
    ModelSequenceTable { segments: [SegmentInfo]; inputs: [BindingSlot]; outputs: [BindingSlot];
                         input_names: [string]; output_names: [string] }
    SegmentInfo        { type: ModuleType; name: string; module_index: u32; set_infos: [DescriptorSetInfo];
                         inputs: [BindingSlot]; outputs: [BindingSlot]; constants: [u32] (constant
                         indexes); dispatch_shape: [u32] (3 values); push_constant_ranges:
                         [PushConstantRange]; constant_bindings: [GraphConstantBinding] (0.5) }
    DescriptorSetInfo  { bindings: [BindingSlot]; set_index: u32 = 0xFFFFFFFF (unset: its position) }
    BindingSlot        { binding: u32; mrt_index: u32 }
    PushConstantRange  { stage_flags: u32; offset: u32; size: u32 }
    GraphConstantBinding { graph_constant_id: u32; constant_table_index: u32 }
                         (files without it: graph_constant_id == the constant's index)
    ModelResourceTable { mrt_entry: [ModelResourceTableEntry] }
    ModelResourceTableEntry { vk_descriptor_type: u32 (0xFFFFFFFF: none, for constants); vk_format: u32;
                         category: u8 (INPUT 0, OUTPUT 1, INTERMEDIATE 2, CONSTANT 3);
                         description: Description { shape: [i64]; strides: [i64] (empty: packed) };
                         extra_config: union { SamplerConfig 1 { min_filter, mag_filter, address_mode_u,
                         address_mode_v, border_color: u32 } }; alias_group_id: u32 = 0xFFFFFFFF }

(A union takes two vtable slots: its u8 type, then the table offset.)

The constants section is either raw (``CONST00``, written by current encoders)::

    0  char[8] "CONST00\\0";  8  u64 count;  16  count x {u32 mrt_index; i32 sparsity_dimension (-1: dense);
       u64 size; u64 offset (from the payload start)};  16 + 24 * count  payload (entries 8-byte padded)

or, in older files, a FlatBuffer ``ConstantSection { data: [ConstantData { mrt_index: u32;
sparsity_dimension: i64; raw: [u8] }] }``.

In Vulkan terms: a graph segment's constants are given to ``vkCreateDataGraphPipelinesARM`` with ``id`` =
the graph constant id (the SPIR-V ``GraphConstantID``, not the constant's index) and the resource entry's
tensor description; the model sequence's ``inputs``/``outputs`` are what a scenario's ``dispatch_graph``
``bindings`` bind (binding id -> resource), intermediates between segments are the runner's to allocate.
"""
from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from flatbuffers import number_types as _N
from flatbuffers.table import Table as _FbTable

from ..errors import EXIT_BAD_INPUT, VkcapError
from ..resources.formats import FORMATS
from ..shaders.spirv_validate import validate

__all__ = [
    "VgfError", "VgfVersion", "ModuleType", "ResourceCategory", "CodeKind", "Module", "BindingSlot",
    "DescriptorBinding", "DescriptorSet", "PushConstantRange", "ConstantBinding", "Segment", "SamplerConfig",
    "Resource", "Constant", "SequenceBinding", "VgfFile", "read_vgf", "parse_vgf", "format_name",
    "descriptor_type_name", "stage_flags_name", "MIN_VERSION", "MAX_VERSION", "DESCRIPTOR_TYPES",
    "EXTRA_FORMATS", "SAMPLER_FILTERS", "SAMPLER_ADDRESS_MODES", "BORDER_COLORS", "SHADER_STAGES",
]


class VgfError(VkcapError):
    """The VGF file is not a VGF, is truncated, has an unsupported version or inconsistent tables."""

    exit_code = EXIT_BAD_INPUT


# --- header facts -------------------------------------------------------------------------------------------

MAGIC = b"VGF1"
MAGIC_OLD = bytes((0xC3, 0xD2, 0xE1, 0xF0))  # the u32 0xF0E1D2C3 of files from before the FourCC
HEADER_SIZE = 128
SECTION_NAMES = ("module table", "model sequence table", "model resource table", "constants")
SECTION_TABLE_OFFSET = 16  # four {u64 offset, u64 size} entries from here, in SECTION_NAMES order
MIN_VERSION = (0, 3, 0)
MAX_VERSION = (0, 5)  # major, minor: every patch of it is read
FLATBUFFER_MAX = 2**31 - 1  # FlatBuffers offsets are 32-bit: a larger table section cannot be one
CONST00 = b"CONST00\x00"
CONST_HEADER = 16
CONST_RECORD = struct.Struct("<IiQQ")  # mrt_index, sparsity_dimension, size, offset
UNSET_U32 = 0xFFFFFFFF


class VgfVersion(NamedTuple):
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


class ModuleType(enum.IntEnum):
    COMPUTE = 0
    GRAPH = 1


class ResourceCategory(enum.IntEnum):
    INPUT = 0
    OUTPUT = 1
    INTERMEDIATE = 2
    CONSTANT = 3


class CodeKind(str, enum.Enum):
    SPIRV = "SPIR-V"
    GLSL = "GLSL"
    HLSL = "HLSL"
    PLACEHOLDER = "placeholder"

    def __str__(self) -> str:
        return self.value


# --- Vulkan enum names used for display (values are the Vulkan ABI) ----------------------------------------

DESCRIPTOR_TYPES: Mapping[int, str] = MappingProxyType({
    0: "VK_DESCRIPTOR_TYPE_SAMPLER",
    1: "VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER",
    2: "VK_DESCRIPTOR_TYPE_SAMPLED_IMAGE",
    3: "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE",
    4: "VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER",
    5: "VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER",
    6: "VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER",
    7: "VK_DESCRIPTOR_TYPE_STORAGE_BUFFER",
    8: "VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC",
    9: "VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC",
    10: "VK_DESCRIPTOR_TYPE_INPUT_ATTACHMENT",
    1000460000: "VK_DESCRIPTOR_TYPE_TENSOR_ARM",
})
# VkFormats a VGF may carry that vkcore.resources.formats (the scenario's formats) does not list.
EXTRA_FORMATS: Mapping[int, tuple[str, int]] = MappingProxyType({  # value: (name, bytes per element)
    0: ("VK_FORMAT_UNDEFINED", 0),
    1000460001: ("VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM", 2),
    1000460002: ("VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM", 1),
    1000460003: ("VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM", 1),
})
SHADER_STAGES: Mapping[int, str] = MappingProxyType({
    0x01: "VERTEX", 0x02: "TESSELLATION_CONTROL", 0x04: "TESSELLATION_EVALUATION", 0x08: "GEOMETRY",
    0x10: "FRAGMENT", 0x20: "COMPUTE",
})
SAMPLER_FILTERS: Mapping[int, str] = MappingProxyType({0: "VK_FILTER_NEAREST", 1: "VK_FILTER_LINEAR"})
SAMPLER_ADDRESS_MODES: Mapping[int, str] = MappingProxyType({
    0: "VK_SAMPLER_ADDRESS_MODE_REPEAT", 1: "VK_SAMPLER_ADDRESS_MODE_MIRRORED_REPEAT",
    2: "VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE", 3: "VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_BORDER",
    4: "VK_SAMPLER_ADDRESS_MODE_MIRROR_CLAMP_TO_EDGE",
})
BORDER_COLORS: Mapping[int, str] = MappingProxyType({
    0: "VK_BORDER_COLOR_FLOAT_TRANSPARENT_BLACK", 1: "VK_BORDER_COLOR_INT_TRANSPARENT_BLACK",
    2: "VK_BORDER_COLOR_FLOAT_OPAQUE_BLACK", 3: "VK_BORDER_COLOR_INT_OPAQUE_BLACK",
    4: "VK_BORDER_COLOR_FLOAT_OPAQUE_WHITE", 5: "VK_BORDER_COLOR_INT_OPAQUE_WHITE",
})

_FORMATS_BY_VALUE: dict[int, tuple[str, int]] | None = None


def _format_table() -> dict[int, tuple[str, int]]:
    global _FORMATS_BY_VALUE
    if _FORMATS_BY_VALUE is None:
        table = {v: row for v, row in EXTRA_FORMATS.items()}
        for info in FORMATS.values():
            # bytes per element of a tensor; image formats keep their texel block size
            table[info.vk_value] = (info.name, info.block_bytes)
        _FORMATS_BY_VALUE = table
    return _FORMATS_BY_VALUE


def format_name(value: int) -> str | None:
    """The ``VK_FORMAT_*`` name of a VkFormat value, ``None`` where vkcap does not know it."""
    row = _format_table().get(value)
    return row[0] if row else None


def descriptor_type_name(value: int | None) -> str | None:
    """``VK_DESCRIPTOR_TYPE_*`` for a value; ``None`` for none; the number as text where unknown."""
    if value is None:
        return None
    return DESCRIPTOR_TYPES.get(value, str(value))


def stage_flags_name(flags: int) -> str:
    """``COMPUTE`` or ``VERTEX|FRAGMENT``; unknown bits as hex."""
    names = [name for bit, name in SHADER_STAGES.items() if flags & bit]
    rest = flags & ~sum(SHADER_STAGES)
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


# --- the FlatBuffers schema, as data ------------------------------------------------------------------------
# A table is a tuple of (field name, kind); a field's vtable slot is its position in the tuple (a union takes
# two positions: its u8 type, then its value). Kinds:


@dataclass(frozen=True)
class _Scalar:
    flags: Any  # a flatbuffers.number_types *Flags class
    default: int


@dataclass(frozen=True)
class _Vector:  # a vector of scalars, read into a tuple of ints
    flags: Any


@dataclass(frozen=True)
class _Raw:  # a vector kept as a byte span (SPIR-V words, constant payloads): never iterated
    element_size: int


@dataclass(frozen=True)
class _Sub:  # a sub-table
    table: str


@dataclass(frozen=True)
class _Tables:  # a vector of tables
    table: str


@dataclass(frozen=True)
class _Union:
    type_field: str
    members: Mapping[int, str]


class _Text:  # a string
    pass


class _Texts:  # a vector of strings
    pass


_U8 = _Scalar(_N.Uint8Flags, 0)
_U32 = _Scalar(_N.Uint32Flags, 0)
_U32_UNSET = _Scalar(_N.Uint32Flags, UNSET_U32)
_I64 = _Scalar(_N.Int64Flags, 0)
_STRING = _Text()
_STRINGS = _Texts()

_SCHEMA: Mapping[str, tuple[tuple[str, Any], ...]] = MappingProxyType({
    "ModuleTable": (("modules", _Tables("Module")),),
    "Module": (
        ("type", _U8), ("name", _STRING), ("entry_point", _STRING),
        ("code_type", _U8), ("code", _Union("code_type", {1: "SPIRV", 2: "GLSL", 3: "HLSL"})),
    ),
    "SPIRV": (("words", _Raw(4)),),
    "GLSL": (("code", _STRING),),
    "HLSL": (("code", _STRING),),
    "ModelSequenceTable": (
        ("segments", _Tables("SegmentInfo")), ("inputs", _Tables("BindingSlot")),
        ("outputs", _Tables("BindingSlot")), ("input_names", _STRINGS), ("output_names", _STRINGS),
    ),
    "SegmentInfo": (
        ("type", _U8), ("name", _STRING), ("module_index", _U32), ("set_infos", _Tables("DescriptorSetInfo")),
        ("inputs", _Tables("BindingSlot")), ("outputs", _Tables("BindingSlot")),
        ("constants", _Vector(_N.Uint32Flags)), ("dispatch_shape", _Vector(_N.Uint32Flags)),
        ("push_constant_ranges", _Tables("PushConstantRange")),
        ("constant_bindings", _Tables("GraphConstantBinding")),
    ),
    "DescriptorSetInfo": (("bindings", _Tables("BindingSlot")), ("set_index", _U32_UNSET)),
    "BindingSlot": (("binding", _U32), ("mrt_index", _U32)),
    "PushConstantRange": (("stage_flags", _U32), ("offset", _U32), ("size", _U32)),
    "GraphConstantBinding": (("graph_constant_id", _U32), ("constant_table_index", _U32)),
    "ModelResourceTable": (("mrt_entry", _Tables("ModelResourceTableEntry")),),
    "ModelResourceTableEntry": (
        ("vk_descriptor_type", _U32), ("vk_format", _U32), ("category", _U8), ("description", _Sub("Description")),
        ("extra_config_type", _U8), ("extra_config", _Union("extra_config_type", {1: "SamplerConfig"})),
        ("alias_group_id", _U32_UNSET),
    ),
    "Description": (("shape", _Vector(_N.Int64Flags)), ("strides", _Vector(_N.Int64Flags))),
    "SamplerConfig": (
        ("min_filter", _U32), ("mag_filter", _U32), ("address_mode_u", _U32), ("address_mode_v", _U32),
        ("border_color", _U32),
    ),
    "ConstantSection": (("data", _Tables("ConstantData")),),  # legacy constants section
    "ConstantData": (("mrt_index", _U32), ("sparsity_dimension", _I64), ("raw", _Raw(1))),
})


@dataclass(frozen=True)
class _Span:
    """Bytes ``[start, start + size)`` of a section."""

    start: int
    size: int


@dataclass(frozen=True)
class _UnknownMember:
    type: int


_SOFFSET = struct.Struct("<i")
_UOFFSET = struct.Struct("<I")
_VTABLE_HEAD = struct.Struct("<HH")


class _FlatReader:
    """Reads one FlatBuffer section by :data:`_SCHEMA`, checking every offset and length first.

    Work is bounded: each table visited and each vector element iterated costs one unit of a budget
    proportional to the section's size, so sub-tables shared many times over cannot make a small file
    expensive.
    """

    def __init__(self, data: bytes, section: str, file: str | None) -> None:
        self.data = data
        self.size = len(data)
        self.section = section
        self.file = file
        self.budget = 4 * self.size + 4096

    def error(self, place: str, message: str) -> VgfError:
        return VgfError(message, file=self.file, place=f"{self.section} {place}".strip())

    def _need(self, start: int, length: int, place: str, what: str) -> None:
        if start < 0 or length < 0 or start + length > self.size:
            raise self.error(place, f"{what} at bytes {start}..{start + length} lies outside the section ({self.size} bytes)")

    def _spend(self, units: int, place: str) -> None:
        self.budget -= units
        if self.budget < 0:
            raise self.error(place, "tables reference each other more often than a file of this size can hold")

    def root(self, table: str) -> dict[str, Any]:
        self._need(0, 4, "root", "the root table offset")
        return self.table(_UOFFSET.unpack_from(self.data, 0)[0], table, "")

    def _indirect(self, at: int, place: str, what: str) -> int:
        target = at + _UOFFSET.unpack_from(self.data, at)[0]
        self._need(target, 4, place, what)
        return target

    def table(self, pos: int, name: str, place: str) -> dict[str, Any]:
        self._spend(1, place)
        self._need(pos, 4, place, "the table")
        vtable = pos - _SOFFSET.unpack_from(self.data, pos)[0]
        self._need(vtable, 4, place, "the table's vtable")
        vsize, tsize = _VTABLE_HEAD.unpack_from(self.data, vtable)
        if vsize < 4 or vsize % 2:
            raise self.error(place, f"the table's vtable has an invalid size {vsize}")
        self._need(vtable, vsize, place, "the table's vtable")
        if tsize < 4:
            raise self.error(place, f"the table has an invalid size {tsize}")
        self._need(pos, tsize, place, "the table")
        tab = _FbTable(self.data, pos)
        out: dict[str, Any] = {}
        for slot, (fname, kind) in enumerate(_SCHEMA[name]):
            fplace = f"{place}.{fname}" if place else fname
            off = tab.Offset(4 + 2 * slot)  # 0 when absent (or beyond an older, shorter vtable)
            if isinstance(kind, _Scalar):
                if off == 0:
                    out[fname] = kind.default
                    continue
                width = kind.flags.bytewidth
                if off + width > tsize:
                    raise self.error(fplace, f"field at offset {off} lies outside its table ({tsize} bytes)")
                out[fname] = tab.Get(kind.flags, pos + off)
                continue
            if off == 0:
                out[fname] = None
                continue
            if off + 4 > tsize:
                raise self.error(fplace, f"field at offset {off} lies outside its table ({tsize} bytes)")
            at = pos + off
            if isinstance(kind, _Union):
                type_value = out.get(kind.type_field, 0)
                member = kind.members.get(type_value)
                if type_value == 0:
                    out[fname] = None
                elif member is None:
                    out[fname] = _UnknownMember(type_value)
                else:
                    out[fname] = (member, self.table(self._indirect(at, fplace, "the union's table"), member, fplace))
            elif isinstance(kind, _Sub):
                out[fname] = self.table(self._indirect(at, fplace, "the sub-table"), kind.table, fplace)
            elif isinstance(kind, _Text):
                out[fname] = self._string(self._indirect(at, fplace, "the string"), fplace)
            else:
                start, count = self._vector(at, fplace)
                if isinstance(kind, _Raw):
                    self._need(start, count * kind.element_size, fplace, f"the vector of {count} elements")
                    out[fname] = _Span(start, count * kind.element_size)
                elif isinstance(kind, _Vector):
                    width = kind.flags.bytewidth
                    self._need(start, count * width, fplace, f"the vector of {count} elements")
                    self._spend(count, fplace)
                    fmt = f"<{count}{kind.flags.packer_type.format[-1]}"
                    out[fname] = struct.unpack_from(fmt, self.data, start)
                elif isinstance(kind, _Tables):
                    self._need(start, 4 * count, fplace, f"the vector of {count} tables")
                    self._spend(count, fplace)
                    out[fname] = tuple(
                        self.table(self._indirect(start + 4 * i, f"{fplace}[{i}]", "the table"), kind.table, f"{fplace}[{i}]")
                        for i in range(count)
                    )
                elif isinstance(kind, _Texts):
                    self._need(start, 4 * count, fplace, f"the vector of {count} strings")
                    self._spend(count, fplace)
                    out[fname] = tuple(
                        self._string(self._indirect(start + 4 * i, f"{fplace}[{i}]", "the string"), f"{fplace}[{i}]")
                        for i in range(count)
                    )
                else:  # pragma: no cover - the schema above uses only the kinds handled here
                    raise AssertionError(kind)
        return out

    def _vector(self, at: int, place: str) -> tuple[int, int]:
        target = self._indirect(at, place, "the vector")
        return target + 4, _UOFFSET.unpack_from(self.data, target)[0]

    def _string(self, target: int, place: str) -> str:
        length = _UOFFSET.unpack_from(self.data, target)[0]
        self._need(target + 4, length, place, f"the string of {length} bytes")
        try:
            return bytes(self.data[target + 4:target + 4 + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(place, "the string is not UTF-8") from None


# --- the decoded file ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """A module: a graph (SPIR-V with ``SPV_ARM_graph``) or a compute shader (SPIR-V, GLSL or HLSL source),
    or a placeholder whose code the scenario supplies through ``shader_substitutions``."""

    index: int
    type: ModuleType
    name: str
    entry_point: str
    code_kind: CodeKind
    code: bytes | str | None  # SPIR-V words as bytes (file order, little-endian), source text, None: placeholder

    @property
    def is_placeholder(self) -> bool:
        return self.code is None

    @property
    def code_size(self) -> int | None:
        """Bytes of SPIR-V, or of UTF-8 source; ``None`` for a placeholder."""
        if self.code is None:
            return None
        return len(self.code) if isinstance(self.code, bytes) else len(self.code.encode("utf-8"))


@dataclass(frozen=True)
class BindingSlot:
    binding: int
    resource_index: int


@dataclass(frozen=True)
class DescriptorBinding:
    binding: int
    resource_index: int
    descriptor_type: int | None  # the resource's VkDescriptorType


@dataclass(frozen=True)
class DescriptorSet:
    set_index: int
    explicit: bool  # False: the file does not say, the index is the set's position (files before 0.5)
    bindings: tuple[DescriptorBinding, ...]


@dataclass(frozen=True)
class PushConstantRange:
    stage_flags: int
    offset: int
    size: int


@dataclass(frozen=True)
class ConstantBinding:
    graph_constant_id: int  # the SPIR-V GraphConstantID: VkDataGraphPipelineConstantARM::id
    constant_index: int  # index into VgfFile.constants


@dataclass(frozen=True)
class Segment:
    """One pipeline of the sequence: a data graph or a compute dispatch, in execution order."""

    index: int
    type: ModuleType
    name: str
    module_index: int
    dispatch_shape: tuple[int, int, int] | None
    descriptor_sets: tuple[DescriptorSet, ...]
    push_constant_ranges: tuple[PushConstantRange, ...]
    inputs: tuple[BindingSlot, ...]
    outputs: tuple[BindingSlot, ...]
    constants: tuple[int, ...]  # constant indexes used by this segment
    constant_bindings: tuple[ConstantBinding, ...]
    explicit_constant_ids: bool  # False: files without constant bindings, where id == constant index


@dataclass(frozen=True)
class SamplerConfig:
    min_filter: int
    mag_filter: int
    address_mode_u: int
    address_mode_v: int
    border_color: int


@dataclass(frozen=True)
class Resource:
    """An entry of the model resource table."""

    index: int
    category: ResourceCategory
    descriptor_type: int | None  # VkDescriptorType; None for constants
    format: int  # VkFormat value
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in bytes; None: packed
    alias_group: int | None
    sampler: SamplerConfig | None

    @property
    def format_name(self) -> str | None:
        return format_name(self.format)

    @property
    def element_bytes(self) -> int | None:
        row = _format_table().get(self.format)
        return row[1] if row and row[1] else None

    @property
    def packed_nbytes(self) -> int | None:
        """Bytes of a packed tensor of this shape and format; ``None`` where the format is unknown or a
        dimension is not static."""
        size = self.element_bytes
        if size is None or any(d < 0 for d in self.shape):
            return None
        for d in self.shape:
            size *= d
        return size


class _Source:
    """Where a VGF's bytes are: a file (read in ranges, re-opened for lazy constant reads) or memory."""

    def __init__(self, size: int, label: str | None) -> None:
        self.size = size
        self.label = label

    def read(self, offset: int, length: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError


class _MemorySource(_Source):
    def __init__(self, data: bytes | bytearray | memoryview, label: str | None) -> None:
        self.data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        super().__init__(len(self.data), label)

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise VgfError(f"truncated: bytes {offset}..{offset + length} are past the end ({self.size} bytes)", file=self.label)
        return bytes(self.data[offset:offset + length])


class _FileSource(_Source):
    def __init__(self, path: Path, handle: Any, size: int) -> None:
        super().__init__(size, str(path))
        self.path = path
        self.handle = handle

    def read(self, offset: int, length: int) -> bytes:
        if self.handle is None:  # a lazy read after read_vgf returned: the file may have changed since
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if offset + length > size:
                        raise VgfError(f"truncated: bytes {offset}..{offset + length} are past the end of the file "
                                       f"({size} bytes; it changed since it was read)", file=self.label)
                    f.seek(offset)
                    data = f.read(length)
            except OSError as exc:
                raise VgfError(f"cannot read: {exc.strerror or exc}", file=self.label) from None
        else:
            self.handle.seek(offset)
            data = self.handle.read(length)
        if len(data) != length:
            raise VgfError(f"truncated: expected {length} bytes at offset {offset}, got {len(data)}", file=self.label)
        return data


@dataclass(frozen=True, eq=False)
class Constant:
    """A constant tensor: its resource entry describes it; its bytes are read on demand."""

    index: int
    resource_index: int
    sparsity_dimension: int | None  # the dimension of 2:4 sparsity; None: dense
    size: int  # bytes
    offset: int  # where the bytes are, from the start of the file
    graph_constant_ids: tuple[int, ...]  # ids the segments bind it as (normally one)
    _source: _Source = field(repr=False, compare=False)

    @property
    def graph_constant_id(self) -> int | None:
        """The SPIR-V GraphConstantID the segments bind this constant as (the first where they differ);
        ``None`` where no segment uses it."""
        return self.graph_constant_ids[0] if self.graph_constant_ids else None

    def read(self) -> bytes:
        """The constant's bytes (bounds-checked again against the file as it is now)."""
        return self._source.read(self.offset, self.size)


@dataclass(frozen=True)
class SequenceBinding:
    """A model input or output: the binding id a scenario's ``dispatch_graph`` binds, and its resource."""

    binding: int
    resource_index: int
    name: str | None


@dataclass(frozen=True)
class VgfFile:
    path: Path | None
    file_size: int
    version: VgfVersion
    vk_header_version: int
    modules: tuple[Module, ...]
    segments: tuple[Segment, ...]
    resources: tuple[Resource, ...]
    constants: tuple[Constant, ...]
    inputs: tuple[SequenceBinding, ...]
    outputs: tuple[SequenceBinding, ...]

    @property
    def bindings(self) -> dict[int, Resource]:
        """Binding id -> resource, for the model's inputs and outputs (what ``dispatch_graph`` binds)."""
        return {b.binding: self.resources[b.resource_index] for b in (*self.inputs, *self.outputs)}

    def module_of(self, segment: Segment) -> Module:
        return self.modules[segment.module_index]

    def resource_of(self, constant: Constant) -> Resource:
        return self.resources[constant.resource_index]

    def to_dict(self) -> dict[str, Any]:
        """Everything, as JSON-ready data (what ``vkcap vgf --json`` prints)."""

        def slots(items: Sequence[BindingSlot | SequenceBinding]) -> list[dict[str, Any]]:
            out = []
            for s in items:
                row: dict[str, Any] = {"binding": s.binding, "resource": s.resource_index}
                if isinstance(s, SequenceBinding):
                    row["name"] = s.name
                out.append(row)
            return out

        return {
            "file": str(self.path) if self.path is not None else None,
            "file_size": self.file_size,
            "version": str(self.version),
            "vk_header_version": self.vk_header_version,
            "modules": [
                {
                    "index": m.index, "type": m.type.name, "name": m.name, "entry_point": m.entry_point,
                    "code": m.code_kind.value, "code_size": m.code_size,
                }
                for m in self.modules
            ],
            "segments": [
                {
                    "index": s.index, "type": s.type.name, "name": s.name, "module": s.module_index,
                    "dispatch_shape": list(s.dispatch_shape) if s.dispatch_shape is not None else None,
                    "descriptor_sets": [
                        {
                            "set": d.set_index, "explicit": d.explicit,
                            "bindings": [
                                {"binding": b.binding, "resource": b.resource_index,
                                 "descriptor_type": descriptor_type_name(b.descriptor_type)}
                                for b in d.bindings
                            ],
                        }
                        for d in s.descriptor_sets
                    ],
                    "push_constant_ranges": [
                        {"stage_flags": p.stage_flags, "stages": stage_flags_name(p.stage_flags), "offset": p.offset, "size": p.size}
                        for p in s.push_constant_ranges
                    ],
                    "inputs": slots(s.inputs),
                    "outputs": slots(s.outputs),
                    "constants": [
                        {"constant": c.constant_index, "graph_constant_id": c.graph_constant_id}
                        for c in s.constant_bindings
                    ],
                }
                for s in self.segments
            ],
            "resources": [
                {
                    "index": r.index, "category": r.category.name,
                    "descriptor_type": descriptor_type_name(r.descriptor_type),
                    "format": r.format_name or r.format, "format_value": r.format,
                    "shape": list(r.shape), "strides": list(r.strides) if r.strides is not None else None,
                    "alias_group": r.alias_group,
                    "sampler": None if r.sampler is None else {
                        "min_filter": SAMPLER_FILTERS.get(r.sampler.min_filter, r.sampler.min_filter),
                        "mag_filter": SAMPLER_FILTERS.get(r.sampler.mag_filter, r.sampler.mag_filter),
                        "address_mode_u": SAMPLER_ADDRESS_MODES.get(r.sampler.address_mode_u, r.sampler.address_mode_u),
                        "address_mode_v": SAMPLER_ADDRESS_MODES.get(r.sampler.address_mode_v, r.sampler.address_mode_v),
                        "border_color": BORDER_COLORS.get(r.sampler.border_color, r.sampler.border_color),
                    },
                }
                for r in self.resources
            ],
            "constants": [
                {
                    "index": c.index, "resource": c.resource_index, "graph_constant_ids": list(c.graph_constant_ids),
                    "size": c.size, "offset": c.offset, "sparsity_dimension": c.sparsity_dimension,
                }
                for c in self.constants
            ],
            "inputs": slots(self.inputs),
            "outputs": slots(self.outputs),
        }


# --- parsing ------------------------------------------------------------------------------------------------


def check_graph_module(module: Module, label: str | None) -> None:
    """Refuse (:class:`VgfError`, exit 2) a module of the VGF that ``spirv-val`` rejects, naming the
    file and the module; run before any driver sees it (a damaged module aborts the emulation layer)."""
    if not isinstance(module.code, bytes):
        return
    message = validate(module.code)
    if message is not None:
        raise VgfError(f"module '{module.name}': invalid SPIR-V (spirv-val: {message})", file=label,
                       place=f"module table modules[{module.index}]")


def read_vgf(path: str | os.PathLike[str]) -> VgfFile:
    """Read and check a VGF file. Constant payloads stay on disk until :meth:`Constant.read`.

    Raises :class:`VgfError` (one line, exit 2) for anything wrong with the file.
    """
    path = Path(path)
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise VgfError("no such file", file=path) from None
    except IsADirectoryError:
        raise VgfError("is a directory, not a VGF file", file=path) from None
    except OSError as exc:
        raise VgfError(f"cannot read: {exc.strerror or exc}", file=path) from None
    with handle:
        source = _FileSource(path, handle, os.fstat(handle.fileno()).st_size)
        try:
            result = _parse(source, path)
        finally:
            source.handle = None  # later constant reads re-open the file
    return result


def parse_vgf(data: bytes | bytearray | memoryview, name: str | None = None) -> VgfFile:
    """Like :func:`read_vgf`, for a VGF already in memory (``name`` labels errors)."""
    return _parse(_MemorySource(data, name), None)


def _parse(src: _Source, path: Path | None) -> VgfFile:
    label = src.label
    size = src.size
    if size < 4:
        raise VgfError(f"not a VGF file: {size} bytes, too short to hold the magic {MAGIC.decode()!r}", file=label)
    head = src.read(0, min(HEADER_SIZE, size))
    if head[:4] not in (MAGIC, MAGIC_OLD):
        raise VgfError(f"not a VGF file: it starts with {head[:4]!r}, not the magic {MAGIC!r}", file=label)
    if size < HEADER_SIZE:
        raise VgfError(f"truncated: {size} bytes, shorter than the {HEADER_SIZE}-byte VGF header", file=label)
    version = VgfVersion(head[8], head[9], head[10])
    if version < MIN_VERSION or (version.major, version.minor) > MAX_VERSION:
        raise VgfError(
            f"unsupported VGF format version {version}: vkcap reads versions "
            f"{'.'.join(map(str, MIN_VERSION))} to {MAX_VERSION[0]}.{MAX_VERSION[1]}.x",
            file=label,
        )
    vk_header_version = struct.unpack_from("<H", head, 4)[0]
    sections = []
    for i, name in enumerate(SECTION_NAMES):
        offset, length = struct.unpack_from("<QQ", head, SECTION_TABLE_OFFSET + 16 * i)
        if offset > size:
            raise VgfError(f"truncated or corrupt: the {name} section starts at byte {offset}, past the end of the file "
                           f"({size} bytes)", file=label)
        if length > size - offset:
            raise VgfError(f"truncated: the {name} section (bytes {offset}..{offset + length}) runs past the end of "
                           f"the file ({size} bytes)", file=label)
        if length and offset < HEADER_SIZE:
            raise VgfError(f"corrupt header: the {name} section starts at byte {offset}, inside the {HEADER_SIZE}-byte "
                           "header", file=label)
        sections.append((offset, length))

    tables = []
    for (offset, length), name, root in zip(sections[:3], SECTION_NAMES, ("ModuleTable", "ModelSequenceTable", "ModelResourceTable")):
        if length < 8:
            raise VgfError(f"the {name} section is {length} bytes long, too short for a table", file=label)
        if length > FLATBUFFER_MAX:
            raise VgfError(f"the {name} section is {length} bytes long, too large for a FlatBuffer", file=label)
        data = src.read(offset, length)
        tables.append((_FlatReader(data, name, label).root(root), data))
    (module_table, module_bytes), (sequence_table, _), (resource_table, _) = tables

    resources = _resources(resource_table, label)
    modules = _modules(module_table, module_bytes, label)
    constant_records = _constant_records(src, sections[3], label)
    segments, inputs, outputs = _sequence(sequence_table, modules, resources, len(constant_records), label)

    ids: dict[int, list[int]] = {}
    for seg in segments:
        for cb in seg.constant_bindings:
            got = ids.setdefault(cb.constant_index, [])
            if cb.graph_constant_id not in got:
                got.append(cb.graph_constant_id)
    constants = []
    for i, (mrt, sparsity, length, offset) in enumerate(constant_records):
        place = f"constants[{i}]"
        if mrt >= len(resources):
            raise VgfError(f"its resource index {mrt} is out of range ({len(resources)} resources)", file=label, place=place)
        res = resources[mrt]
        if res.category is not ResourceCategory.CONSTANT:
            raise VgfError(f"its resource {mrt} is {res.category.name}, not CONSTANT", file=label, place=place)
        expected = res.packed_nbytes
        if sparsity is None and res.strides is None and expected is not None and expected != length:
            raise VgfError(
                f"holds {length} bytes but its resource {mrt} ({res.format_name} {list(res.shape)}) needs {expected}",
                file=label, place=place,
            )
        constants.append(Constant(i, mrt, sparsity, length, offset, tuple(ids.get(i, ())), src))

    return VgfFile(
        path=path, file_size=size, version=version, vk_header_version=vk_header_version,
        modules=modules, segments=segments, resources=resources, constants=tuple(constants),
        inputs=inputs, outputs=outputs,
    )


def _enum(cls: Callable[[int], Any], value: int, what: str, label: str | None, place: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(f"{m.name} {m.value}" for m in cls)  # type: ignore[attr-defined]
        raise VgfError(f"unknown {what} {value} (known: {known})", file=label, place=place) from None


def _modules(table: dict[str, Any], data: bytes, label: str | None) -> tuple[Module, ...]:
    out = []
    for i, m in enumerate(table["modules"] or ()):
        place = f"module table modules[{i}]"
        mtype = _enum(ModuleType, m["type"], "module type", label, place + ".type")
        code = m["code"]
        if isinstance(code, _UnknownMember):
            raise VgfError(f"unknown module code kind {code.type} (known: SPIR-V 1, GLSL 2, HLSL 3)",
                           file=label, place=place + ".code_type")
        kind: CodeKind = CodeKind.PLACEHOLDER  # no code, or empty code: the scenario substitutes a shader
        payload: bytes | str | None = None
        if code is not None:
            member, body = code
            if member == "SPIRV":
                span = body["words"]
                if span is not None and span.size:
                    kind, payload = CodeKind.SPIRV, bytes(data[span.start:span.start + span.size])
            elif body["code"]:
                kind, payload = CodeKind(member), body["code"]
        out.append(Module(i, mtype, m["name"] or "", m["entry_point"] or "", kind, payload))
    return tuple(out)


def _resources(table: dict[str, Any], label: str | None) -> tuple[Resource, ...]:
    out = []
    for i, e in enumerate(table["mrt_entry"] or ()):
        place = f"model resource table mrt_entry[{i}]"
        category = _enum(ResourceCategory, e["category"], "resource category", label, place + ".category")
        desc = e["description"] or {}
        shape = desc.get("shape") or ()
        strides = desc.get("strides") or None
        if strides is not None and len(strides) != len(shape):
            raise VgfError(f"{len(strides)} strides for a shape of {len(shape)} dimensions", file=label, place=place)
        extra = e["extra_config"]
        sampler = SamplerConfig(**extra[1]) if isinstance(extra, tuple) and extra[0] == "SamplerConfig" else None
        dtype = e["vk_descriptor_type"]
        alias = e["alias_group_id"]
        out.append(Resource(
            index=i, category=category, descriptor_type=None if dtype == UNSET_U32 else dtype, format=e["vk_format"],
            shape=tuple(shape), strides=tuple(strides) if strides else None,
            alias_group=None if alias == UNSET_U32 else alias, sampler=sampler,
        ))
    return tuple(out)


def _sequence(
    table: dict[str, Any], modules: tuple[Module, ...], resources: tuple[Resource, ...], n_constants: int,
    label: str | None,
) -> tuple[tuple[Segment, ...], tuple[SequenceBinding, ...], tuple[SequenceBinding, ...]]:
    def slot(raw: dict[str, Any], place: str) -> BindingSlot:
        if raw["mrt_index"] >= len(resources):
            raise VgfError(f"resource index {raw['mrt_index']} is out of range ({len(resources)} resources)",
                           file=label, place=place + ".mrt_index")
        return BindingSlot(raw["binding"], raw["mrt_index"])

    def constant_index(value: int, place: str) -> int:
        if value >= n_constants:
            raise VgfError(f"constant index {value} is out of range ({n_constants} constants)", file=label, place=place)
        return value

    segments = []
    for i, s in enumerate(table["segments"] or ()):
        place = f"model sequence table segments[{i}]"
        stype = _enum(ModuleType, s["type"], "segment type", label, place + ".type")
        mi = s["module_index"]
        if mi >= len(modules):
            raise VgfError(f"module index {mi} is out of range ({len(modules)} modules)", file=label, place=place + ".module_index")
        if modules[mi].type is not stype:
            raise VgfError(f"a {stype.name} segment runs module {mi}, which is a {modules[mi].type.name} module",
                           file=label, place=place + ".module_index")
        shape = s["dispatch_shape"]
        if shape is not None and len(shape) != 3:
            raise VgfError(f"dispatch_shape has {len(shape)} values, not 3", file=label, place=place + ".dispatch_shape")
        sets = []
        seen_sets: set[int] = set()
        for j, d in enumerate(s["set_infos"] or ()):
            dplace = f"{place}.set_infos[{j}]"
            explicit = d["set_index"] != UNSET_U32
            set_index = d["set_index"] if explicit else j
            if set_index in seen_sets:
                raise VgfError(f"descriptor set {set_index} is described twice", file=label, place=dplace)
            seen_sets.add(set_index)
            bindings = []
            seen: set[int] = set()
            for k, b in enumerate(d["bindings"] or ()):
                bs = slot(b, f"{dplace}.bindings[{k}]")
                if bs.binding in seen:
                    raise VgfError(f"binding {bs.binding} appears twice in descriptor set {set_index}", file=label,
                                   place=f"{dplace}.bindings[{k}]")
                seen.add(bs.binding)
                bindings.append(DescriptorBinding(bs.binding, bs.resource_index, resources[bs.resource_index].descriptor_type))
            sets.append(DescriptorSet(set_index, explicit, tuple(bindings)))
        constants = tuple(constant_index(c, f"{place}.constants[{k}]") for k, c in enumerate(s["constants"] or ()))
        raw_bindings = s["constant_bindings"]
        if raw_bindings:
            cbs = tuple(
                ConstantBinding(b["graph_constant_id"], constant_index(b["constant_table_index"], f"{place}.constant_bindings[{k}]"))
                for k, b in enumerate(raw_bindings)
            )
            explicit_ids = True
        else:  # files without constant bindings: the constant's index is its graph constant id
            cbs = tuple(ConstantBinding(c, c) for c in constants)
            explicit_ids = False
        segments.append(Segment(
            index=i, type=stype, name=s["name"] or "", module_index=mi,
            dispatch_shape=tuple(shape) if shape is not None else None,  # type: ignore[arg-type]
            descriptor_sets=tuple(sets),
            push_constant_ranges=tuple(PushConstantRange(p["stage_flags"], p["offset"], p["size"]) for p in s["push_constant_ranges"] or ()),
            inputs=tuple(slot(b, f"{place}.inputs[{k}]") for k, b in enumerate(s["inputs"] or ())),
            outputs=tuple(slot(b, f"{place}.outputs[{k}]") for k, b in enumerate(s["outputs"] or ())),
            constants=constants, constant_bindings=cbs, explicit_constant_ids=explicit_ids,
        ))

    def model_bindings(key: str, names_key: str) -> tuple[SequenceBinding, ...]:
        raw = table[key] or ()
        names = table[names_key] or ()
        if names and len(names) != len(raw):
            raise VgfError(f"{len(names)} names for {len(raw)} {key}", file=label, place=f"model sequence table {names_key}")
        out = []
        for k, b in enumerate(raw):
            bs = slot(b, f"model sequence table {key}[{k}]")
            out.append(SequenceBinding(bs.binding, bs.resource_index, names[k] if names else None))
        return tuple(out)

    return tuple(segments), model_bindings("inputs", "input_names"), model_bindings("outputs", "output_names")


def _constant_records(src: _Source, section: tuple[int, int], label: str | None) -> list[tuple[int, int | None, int, int]]:
    """(resource index, sparsity dimension or None, size, absolute offset) of each constant."""
    offset, length = section
    if length == 0:
        return []
    if length < 8:
        raise VgfError(f"the constants section is {length} bytes long, too short for its version tag", file=label)
    tag = src.read(offset, 8)
    if tag == CONST00:
        if length < CONST_HEADER:
            raise VgfError(f"truncated: the constants section is {length} bytes, too short for its count", file=label)
        count = struct.unpack("<Q", src.read(offset + 8, 8))[0]
        capacity = (length - CONST_HEADER) // CONST_RECORD.size
        if count > capacity:
            raise VgfError(f"the constants section declares {count} constants, more than its {length} bytes can describe "
                           f"(at most {capacity})", file=label)
        meta = src.read(offset + CONST_HEADER, count * CONST_RECORD.size)
        payload = offset + CONST_HEADER + count * CONST_RECORD.size
        payload_size = length - CONST_HEADER - count * CONST_RECORD.size
        out = []
        for i, (mrt, sparsity, size, start) in enumerate(CONST_RECORD.iter_unpack(meta)):
            if start > payload_size or size > payload_size - start:
                raise VgfError(f"bytes {start}..{start + size} of the payload lie outside the constants section "
                               f"(payload {payload_size} bytes)", file=label, place=f"constants[{i}]")
            if sparsity < -1:
                raise VgfError(f"invalid sparsity dimension {sparsity}", file=label, place=f"constants[{i}]")
            out.append((mrt, None if sparsity == -1 else sparsity, size, payload + start))
        return out
    if tag.startswith(b"CONST"):
        raise VgfError(f"unsupported constants section layout {tag.rstrip(bytes(1))!r} (vkcap reads CONST00)", file=label)
    if length > FLATBUFFER_MAX:
        raise VgfError(f"the constants section is {length} bytes long, too large for a FlatBuffer", file=label)
    section_bytes = src.read(offset, length)
    reader = _FlatReader(section_bytes, "constants section", label)
    out = []
    for i, d in enumerate(reader.root("ConstantSection")["data"] or ()):
        sparsity = d["sparsity_dimension"]
        if sparsity < -1:
            raise VgfError(f"invalid sparsity dimension {sparsity}", file=label, place=f"constants[{i}]")
        span = d["raw"] or _Span(0, 0)
        out.append((d["mrt_index"], None if sparsity == -1 else sparsity, span.size, offset + span.start))
    return out

