"""SPIR-V reflection: what a module declares, so that vkcap builds pipeline layouts the shader agrees with.

A pipeline layout that differs from its shader is undefined behaviour: lavapipe dies with SIGBUS or
SIGSEGV inside ``vkCreateComputePipelines``, other drivers compute garbage. :func:`reflect` reads, from
the module's own words, every descriptor it declares (set, binding, kind, array size; for images the
dimensionality, format and numeric type), which of them the entry point statically uses, which it
cannot write through, its entry points with their execution models, and the effective workgroup size;
also the type each specialization constant is declared with (so that values are packed as that type:
:mod:`vkcore.shaders.specialization`) and the size of its shared (Workgroup) variables. Pure Python over
the binary form (SPIR-V specification, "Binary Form"); nothing here talks to Vulkan. Damaged words
reflect to something or raise :class:`SpirvError`, and every walk over types is bounded (a damaged
module may declare a type of itself); whether a module is valid is ``spirv-val``'s to say
(:mod:`vkcore.shaders.spirv_validate`).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Callable

MAGIC = 0x07230203

# Opcodes used.
OP_NAME = 5
OP_MEMBER_NAME = 6
OP_CAPABILITY = 17
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_TYPE_BOOL = 20
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_VECTOR = 23
OP_TYPE_MATRIX = 24
OP_TYPE_IMAGE = 25
OP_TYPE_SAMPLER = 26
OP_TYPE_SAMPLED_IMAGE = 27
OP_TYPE_ARRAY = 28
OP_TYPE_RUNTIME_ARRAY = 29
OP_TYPE_STRUCT = 30
OP_TYPE_POINTER = 32
OP_CONSTANT = 43
OP_CONSTANT_COMPOSITE = 44
OP_SPEC_CONSTANT_TRUE = 48
OP_SPEC_CONSTANT_FALSE = 49
OP_SPEC_CONSTANT = 50
OP_SPEC_CONSTANT_COMPOSITE = 51
OP_FUNCTION = 54
OP_FUNCTION_CALL = 57
OP_VARIABLE = 59
OP_IMAGE_TEXEL_POINTER = 60
OP_LOAD = 61
OP_STORE = 62
OP_COPY_MEMORY = 63
OP_COPY_MEMORY_SIZED = 64
OP_ACCESS_CHAIN = 65
OP_IN_BOUNDS_ACCESS_CHAIN = 66
OP_PTR_ACCESS_CHAIN = 67
OP_ARRAY_LENGTH = 68
OP_IN_BOUNDS_PTR_ACCESS_CHAIN = 70
OP_DECORATE = 71
OP_MEMBER_DECORATE = 72
OP_EXECUTION_MODE_ID = 331
OP_TYPE_ACCELERATION_STRUCTURE = 5341
OP_TYPE_TENSOR_ARM = 4163
# Atomics (OpAtomicLoad .. OpAtomicXor, OpAtomicFlag*, OpAtomicFAddEXT and friends): the pointer is
# their third operand (result type, result id, pointer).
ATOMICS = frozenset(range(227, 243)) | {318, 319, 5614, 5615, 6035}
# Where an instruction names a pointer it reads or writes through: operand positions (after the opcode word).
POINTER_OPERANDS: dict[int, tuple[int, ...]] = {
    OP_LOAD: (2,), OP_STORE: (0,), OP_COPY_MEMORY: (0, 1), OP_COPY_MEMORY_SIZED: (0, 1),
    OP_ACCESS_CHAIN: (2,), OP_IN_BOUNDS_ACCESS_CHAIN: (2,), OP_PTR_ACCESS_CHAIN: (2,),
    OP_IN_BOUNDS_PTR_ACCESS_CHAIN: (2,), OP_ARRAY_LENGTH: (2,), OP_IMAGE_TEXEL_POINTER: (2,),
    **{op: (2,) for op in ATOMICS},
    228: (0,), 319: (0,),  # OpAtomicStore, OpAtomicFlagClear: the pointer comes first
}

DECORATION_SPEC_ID = 1
DECORATION_BLOCK = 2
DECORATION_BUFFER_BLOCK = 3
DECORATION_ROW_MAJOR = 4
DECORATION_ARRAY_STRIDE = 6
DECORATION_MATRIX_STRIDE = 7
DECORATION_BUILTIN = 11
DECORATION_NON_WRITABLE = 24
DECORATION_NON_READABLE = 25
DECORATION_BINDING = 33
DECORATION_DESCRIPTOR_SET = 34
DECORATION_OFFSET = 35
BUILTIN_WORKGROUP_SIZE = 25
MAX_TYPE_DEPTH = 64  # nesting of arrays, structs and matrices followed when sizing or describing a type
MODE_LOCAL_SIZE = 17
MODE_LOCAL_SIZE_ID = 38

STORAGE_UNIFORM_CONSTANT = 0
STORAGE_WORKGROUP = 4
STORAGE_UNIFORM = 2
STORAGE_PUSH_CONSTANT = 9
STORAGE_STORAGE_BUFFER = 12
DESCRIPTOR_STORAGE_CLASSES = frozenset({STORAGE_UNIFORM_CONSTANT, STORAGE_UNIFORM, STORAGE_STORAGE_BUFFER})

EXECUTION_MODELS = {0: "vertex", 1: "tessellation_control", 2: "tessellation_evaluation", 3: "geometry",
                    4: "fragment", 5: "compute", 6: "kernel"}
IMAGE_DIMS = {0: "1D", 1: "2D", 2: "3D", 3: "Cube", 4: "Rect", 5: "Buffer", 6: "SubpassData"}
DIM_BUFFER = 5
SAMPLED_STORAGE = 2  # OpTypeImage's "Sampled" operand: 1 sampled (read-only), 2 storage, 0 known at run time only
# SPIR-V "Image Format" enumerants, by value (0 is Unknown: the shader leaves the format to the view).
IMAGE_FORMATS = (
    "Unknown", "Rgba32f", "Rgba16f", "R32f", "Rgba8", "Rgba8Snorm", "Rg32f", "Rg16f", "R11fG11fB10f", "R16f",
    "Rgba16", "Rgb10A2", "Rg16", "Rg8", "R16", "R8", "Rgba16Snorm", "Rg16Snorm", "Rg8Snorm", "R16Snorm",
    "R8Snorm", "Rgba32i", "Rgba16i", "Rgba8i", "R32i", "Rg32i", "Rg16i", "Rg8i", "R16i", "R8i", "Rgba32ui",
    "Rgba16ui", "Rgba8ui", "R32ui", "Rgb10a2ui", "Rg32ui", "Rg16ui", "Rg8ui", "R16ui", "R8ui", "R64ui", "R64i",
)

# SPIR-V capabilities a device grants through a core VkPhysicalDeviceFeatures member: (name, feature).
CAPABILITY_FEATURES: dict[int, tuple[str, str]] = {
    10: ("Float64", "shaderFloat64"), 11: ("Int64", "shaderInt64"), 22: ("Int16", "shaderInt16"),
    25: ("ImageGatherExtended", "shaderImageGatherExtended"),
    27: ("StorageImageMultisample", "shaderStorageImageMultisample"),
    32: ("ClipDistance", "shaderClipDistance"), 33: ("CullDistance", "shaderCullDistance"),
    49: ("StorageImageExtendedFormats", "shaderStorageImageExtendedFormats"),
    55: ("StorageImageReadWithoutFormat", "shaderStorageImageReadWithoutFormat"),
    56: ("StorageImageWriteWithoutFormat", "shaderStorageImageWriteWithoutFormat"),
}

# Descriptor kinds as the shader declares them, with their VkDescriptorType values (Vulkan registry).
DESCRIPTOR_TYPES: dict[str, int] = {
    "sampler": 0,
    "combined_image_sampler": 1,
    "sampled_image": 2,
    "storage_image": 3,
    "uniform_texel_buffer": 4,
    "storage_texel_buffer": 5,
    "uniform_buffer": 6,
    "storage_buffer": 7,
    "acceleration_structure": 1000150000,
    "tensor": 1000460000,
}
KIND_OF_DESCRIPTOR_TYPE = {v: k for k, v in DESCRIPTOR_TYPES.items()}
# How messages name a kind: as a GLSL author would recognise it.
KIND_TEXT = {
    "sampler": "a sampler", "combined_image_sampler": "a combined image sampler (sampler2D)",
    "sampled_image": "a sampled image (texture2D)", "storage_image": "a storage image (image2D)",
    "uniform_texel_buffer": "a uniform texel buffer", "storage_texel_buffer": "a storage texel buffer",
    "uniform_buffer": "a uniform buffer", "storage_buffer": "a storage buffer",
    "acceleration_structure": "an acceleration structure", "tensor": "a tensor (tensorARM)",
}


@dataclass(frozen=True)
class DeclaredDescriptor:
    """One descriptor binding a module declares.

    ``count`` is the array size (1 for a single descriptor, 0 for a runtime-sized array). The image
    fields are ``None`` for descriptors that are not images: ``image_dim`` is "1D", "2D", ..., "Buffer";
    ``image_format`` the SPIR-V format name ("Unknown" when the shader leaves it to the view);
    ``numeric`` the texel's component type, "float", "int" or "uint".
    """

    set: int
    binding: int
    kind: str
    count: int = 1
    name: str = ""
    read_only: bool = False  # nothing in the module can write through it
    write_only: bool = False  # NonReadable: a writeonly image or block
    used: bool = True  # statically used by some function of the module
    image_dim: str | None = None
    image_format: str | None = None
    numeric: str | None = None
    arrayed: bool = False
    multisampled: bool = False

    @property
    def descriptor_type(self) -> int:
        return DESCRIPTOR_TYPES[self.kind]

    @property
    def text(self) -> str:
        """How messages describe it: ``a storage image (image2D) 'img' (rgba32f)``."""
        out = KIND_TEXT[self.kind]
        if self.name:
            out += f" '{self.name}'"
        if self.count != 1:
            out += " (a runtime-sized array)" if self.count == 0 else f" (an array of {self.count})"
        if self.image_format not in (None, "Unknown") and self.kind in ("storage_image", "storage_texel_buffer"):
            out += f" of format {self.image_format}"
        return out


@dataclass(frozen=True)
class SpecConstantType:
    """The scalar type a module declares for one specialization constant (``OpSpecConstant*`` with a
    ``SpecId``): ``kind`` is "bool", "int", "uint" or "float", ``width`` its bits (32 for a bool, whose
    VkBool32 is 4 bytes), ``name`` the constant's debug name when the module keeps one."""

    kind: str
    width: int
    name: str = ""

    @property
    def text(self) -> str:
        """How messages name the type: ``bool``, ``int32``, ``uint64``, ``float16``."""
        return "bool" if self.kind == "bool" else f"{self.kind}{self.width}"


@dataclass
class Reflection:
    descriptors: dict[tuple[int, int], DeclaredDescriptor] = field(default_factory=dict)
    local_size: tuple[int, int, int] | None = None  # with the given specialization applied
    entry_points: dict[str, str] = field(default_factory=dict)  # name -> execution model ("compute", ...)
    version: tuple[int, int] = (1, 0)
    capabilities: frozenset[int] = frozenset()  # OpCapability operands
    spec_constants: dict[int, SpecConstantType] = field(default_factory=dict)  # SpecId -> declared type
    workgroup_bytes: int = 0  # shared (Workgroup) variables' total size, with the specialization applied

    @property
    def bindings(self) -> set[tuple[int, int]]:
        """(set, binding) of every declared descriptor."""
        return set(self.descriptors)

    @property
    def used_bindings(self) -> set[tuple[int, int]]:
        """(set, binding) of the descriptors some function of the module uses."""
        return {k for k, d in self.descriptors.items() if d.used}

    @property
    def read_only(self) -> set[tuple[int, int]]:
        """(set, binding) of the descriptors no variable of the module can write through."""
        return {k for k, d in self.descriptors.items() if d.read_only}

    @property
    def write_only(self) -> set[tuple[int, int]]:
        """(set, binding) of the descriptors no variable of the module can read through (NonReadable)."""
        return {k for k, d in self.descriptors.items() if d.write_only}


class SpirvError(ValueError):
    """The words are not a SPIR-V module (bad magic, truncated instruction)."""


def _instructions(code: bytes) -> tuple[tuple[int, int], list[tuple[int, tuple[int, ...]]]]:
    if len(code) < 20 or len(code) % 4:
        raise SpirvError("not a SPIR-V module (size)")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    if words[0] != MAGIC:
        raise SpirvError("not a SPIR-V module (magic)")
    version = ((words[1] >> 16) & 0xFF, (words[1] >> 8) & 0xFF)
    out, i = [], 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise SpirvError(f"truncated instruction at word {i}")
        out.append((opcode, words[i + 1 : i + count]))
        i += count
    return version, out


def _string(words: tuple[int, ...]) -> str:
    """A literal string operand (nul-terminated UTF-8 packed in words)."""
    raw = b"".join(struct.pack("<I", w) for w in words)
    return raw.split(b"\0", 1)[0].decode("utf8", "replace")


def _integral(value: object) -> int | None:
    """``value`` as an integer when it is one (a bool, an int, a finite float with no fraction)."""
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def reflect(code: bytes, specialization: dict[int, int | float] | None = None) -> Reflection:
    """Everything :class:`Reflection` holds, read from the module ``code``. Raises :class:`SpirvError`
    when ``code`` is not a SPIR-V module; any other words (a damaged or hostile module) reflect to
    something without raising, so that the validator can name what is wrong. A specialization value
    that is not an integer leaves the module's default where an integer is needed (sizes, lengths)."""
    spec = specialization or {}
    version, instructions = _instructions(code)
    decorations: dict[int, dict[int, tuple[int, ...]]] = {}
    names: dict[int, str] = {}
    variables: dict[int, tuple[int, int]] = {}  # id -> (pointer type id, storage class)
    constants: dict[int, int] = {}  # id -> value (first word)
    spec_types: dict[int, int] = {}  # spec constant id -> its result type id
    composites: dict[int, tuple[int, ...]] = {}
    local_size: tuple[int, ...] | None = None
    local_size_ids: tuple[int, ...] | None = None
    entry_points: dict[str, str] = {}
    capabilities: set[int] = set()
    used: set[int] = set()
    types = _Types()
    in_functions = False
    for opcode, ops in instructions:
        if opcode == OP_FUNCTION:
            in_functions = True
        if in_functions:
            for position in POINTER_OPERANDS.get(opcode, ()):
                if position < len(ops):
                    used.add(ops[position])
            if opcode == OP_FUNCTION_CALL:
                used.update(ops[3:])
            continue
        types.note(opcode, ops)
        if opcode == OP_CAPABILITY and ops:
            capabilities.add(ops[0])
        elif opcode == OP_NAME and len(ops) >= 2:
            names[ops[0]] = _string(ops[1:])
        elif opcode == OP_ENTRY_POINT and len(ops) >= 3:
            entry_points[_string(ops[2:])] = EXECUTION_MODELS.get(ops[0], f"model {ops[0]}")
        elif opcode == OP_DECORATE and len(ops) >= 2:
            decorations.setdefault(ops[0], {})[ops[1]] = ops[2:]
        elif opcode == OP_VARIABLE and len(ops) >= 3:
            variables[ops[1]] = (ops[0], ops[2])
        elif opcode in (OP_CONSTANT, OP_SPEC_CONSTANT) and len(ops) >= 3:
            constants[ops[1]] = ops[2]
            if opcode == OP_SPEC_CONSTANT:
                spec_types[ops[1]] = ops[0]
        elif opcode in (OP_SPEC_CONSTANT_TRUE, OP_SPEC_CONSTANT_FALSE) and len(ops) >= 2:
            constants[ops[1]] = int(opcode == OP_SPEC_CONSTANT_TRUE)
            spec_types[ops[1]] = ops[0]
        elif opcode in (OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE) and len(ops) >= 2:
            composites[ops[1]] = ops[2:]
        elif opcode == OP_EXECUTION_MODE and len(ops) >= 5 and ops[1] == MODE_LOCAL_SIZE:
            local_size = ops[2:5]
        elif opcode == OP_EXECUTION_MODE_ID and len(ops) >= 5 and ops[1] == MODE_LOCAL_SIZE_ID:
            local_size_ids = ops[2:5]

    def value(const_id: int) -> int:
        spec_id = decorations.get(const_id, {}).get(DECORATION_SPEC_ID)
        if spec_id and spec_id[0] in spec:
            given = _integral(spec[spec_id[0]])
            if given is not None:
                return given
        return constants.get(const_id, 1)

    result = Reflection(entry_points=entry_points, version=version, capabilities=frozenset(capabilities))
    for const_id, type_id in spec_types.items():
        spec_id = decorations.get(const_id, {}).get(DECORATION_SPEC_ID)
        declared = types.scalar_type(type_id)
        if spec_id and declared is not None:
            result.spec_constants[spec_id[0]] = SpecConstantType(*declared, names.get(const_id, ""))
    result.workgroup_bytes = sum(types.size(pointee, value) for pointer_type, storage in variables.values()
                                 if storage == STORAGE_WORKGROUP and (pointee := types.pointee.get(pointer_type)) is not None)
    for var, (pointer_type, storage) in variables.items():
        deco = decorations.get(var, {})
        if storage not in DESCRIPTOR_STORAGE_CLASSES or DECORATION_BINDING not in deco or DECORATION_DESCRIPTOR_SET not in deco:
            continue
        s, b = deco[DECORATION_DESCRIPTOR_SET][0], deco[DECORATION_BINDING][0]
        pointee = types.pointee.get(pointer_type)
        declared = types.describe(pointee, storage, decorations, value)
        inner = types.innermost(pointee)
        type_name = names.get(inner, "") if inner is not None else ""
        read_only = DECORATION_NON_WRITABLE in deco or declared.read_only
        result.descriptors[(s, b)] = DeclaredDescriptor(
            s, b, declared.kind, declared.count, names.get(var) or type_name, read_only,
            DECORATION_NON_READABLE in deco or declared.write_only, var in used, declared.image_dim,
            declared.image_format, declared.numeric, declared.arrayed, declared.multisampled,
        )

    builtin = next((i for i, d in decorations.items() if d.get(DECORATION_BUILTIN) == (BUILTIN_WORKGROUP_SIZE,) and i in composites), None)
    if builtin is not None and len(composites[builtin]) == 3:
        result.local_size = tuple(value(c) for c in composites[builtin])  # type: ignore[assignment]
    elif local_size_ids is not None:
        result.local_size = tuple(value(c) for c in local_size_ids)  # type: ignore[assignment]
    elif local_size is not None:
        result.local_size = tuple(local_size)  # type: ignore[assignment]
    return result


@dataclass
class _Declared:
    kind: str
    count: int = 1
    read_only: bool = False
    write_only: bool = False
    image_dim: str | None = None
    image_format: str | None = None
    numeric: str | None = None
    arrayed: bool = False
    multisampled: bool = False


class _Types:
    """The type declarations :func:`reflect` needs to describe a descriptor variable."""

    def __init__(self) -> None:
        self.pointee: dict[int, int] = {}  # pointer type id -> the type it points to
        self.structs: dict[int, int] = {}  # struct id -> member count
        self.members: dict[int, tuple[int, ...]] = {}  # struct id -> member type ids
        self.widths: dict[int, int] = {}  # int/float type id -> bits
        self.bools: set[int] = set()
        self.matrices: dict[int, tuple[int, int]] = {}  # matrix type -> (column type, column count)
        self._sizes: dict[int, int] = {}
        self.nonwritable_members: dict[int, set[int]] = {}
        self.nonreadable_members: dict[int, set[int]] = {}
        self.arrays: dict[int, tuple[int, int | None]] = {}  # array type -> (element type, length id or None)
        self.images: dict[int, tuple[int, ...]] = {}  # image type id -> its operands after the id
        self.sampled_images: dict[int, int] = {}  # sampled image type -> its image type
        self.samplers: set[int] = set()
        self.tensors: set[int] = set()
        self.acceleration_structures: set[int] = set()
        self.scalars: dict[int, str] = {}  # int/float type id -> "float", "int", "uint"
        self.vectors: dict[int, int] = {}  # vector type -> component type

    def note(self, opcode: int, ops: tuple[int, ...]) -> None:
        if opcode == OP_TYPE_POINTER and len(ops) >= 3:
            self.pointee[ops[0]] = ops[2]
        elif opcode == OP_TYPE_STRUCT and ops:
            self.structs[ops[0]] = len(ops) - 1
            self.members[ops[0]] = ops[1:]
        elif opcode == OP_MEMBER_DECORATE and len(ops) >= 3 and ops[2] == DECORATION_NON_WRITABLE:
            self.nonwritable_members.setdefault(ops[0], set()).add(ops[1])
        elif opcode == OP_MEMBER_DECORATE and len(ops) >= 3 and ops[2] == DECORATION_NON_READABLE:
            self.nonreadable_members.setdefault(ops[0], set()).add(ops[1])
        elif opcode == OP_TYPE_ARRAY and len(ops) >= 3:
            self.arrays[ops[0]] = (ops[1], ops[2])
        elif opcode == OP_TYPE_RUNTIME_ARRAY and len(ops) >= 2:
            self.arrays[ops[0]] = (ops[1], None)
        elif opcode == OP_TYPE_IMAGE and len(ops) >= 8:
            self.images[ops[0]] = ops[1:]
        elif opcode == OP_TYPE_SAMPLED_IMAGE and len(ops) >= 2:
            self.sampled_images[ops[0]] = ops[1]
        elif opcode == OP_TYPE_SAMPLER and ops:
            self.samplers.add(ops[0])
        elif opcode == OP_TYPE_TENSOR_ARM and ops:
            self.tensors.add(ops[0])
        elif opcode == OP_TYPE_ACCELERATION_STRUCTURE and ops:
            self.acceleration_structures.add(ops[0])
        elif opcode == OP_TYPE_FLOAT and ops:
            self.scalars[ops[0]] = "float"
            self.widths[ops[0]] = ops[1] if len(ops) >= 2 else 32
        elif opcode == OP_TYPE_INT and len(ops) >= 3:
            self.scalars[ops[0]] = "int" if ops[2] else "uint"
            self.widths[ops[0]] = ops[1]
        elif opcode == OP_TYPE_BOOL and ops:
            self.bools.add(ops[0])
        elif opcode == OP_TYPE_VECTOR and len(ops) >= 2:
            self.vectors[ops[0]] = ops[1]
            self.matrices[ops[0]] = (ops[1], ops[2] if len(ops) >= 3 else 1)  # a vector is sized as a column
        elif opcode == OP_TYPE_MATRIX and len(ops) >= 3:
            self.matrices[ops[0]] = (ops[1], ops[2])

    def scalar_type(self, type_id: int) -> tuple[str, int] | None:
        """(kind, bits) of a bool, int or float type; ``None`` for anything else."""
        if type_id in self.bools:
            return "bool", 32
        if type_id in self.scalars and type_id in self.widths:
            return self.scalars[type_id], self.widths[type_id]
        return None

    def size(self, type_id: int, value: Callable[[int], int], depth: int = 0) -> int:
        """Bytes a variable of ``type_id`` needs, tightly packed (a lower bound of any layout; a bool
        as 4 bytes). Types it cannot size (opaque, cyclic in a damaged module) count 0. Each type is
        sized once (``value`` is fixed for one reflection), so shared subtypes cost nothing twice."""
        if type_id in self._sizes:
            return self._sizes[type_id]
        if depth > MAX_TYPE_DEPTH:
            return 0
        if type_id in self.bools:
            out = 4
        elif type_id in self.widths:
            out = max(self.widths[type_id], 8) // 8
        elif type_id in self.matrices:
            column, count = self.matrices[type_id]
            out = count * self.size(column, value, depth + 1)
        elif type_id in self.arrays:
            element, length = self.arrays[type_id]
            out = 0 if length is None else max(value(length), 0) * self.size(element, value, depth + 1)
        else:
            out = sum(self.size(m, value, depth + 1) for m in self.members.get(type_id, ()))
        self._sizes[type_id] = out
        return out

    def innermost(self, type_id: int | None) -> int | None:
        for _ in range(MAX_TYPE_DEPTH):  # bounded: a damaged module may declare an array of itself
            if type_id not in self.arrays:
                break
            type_id = self.arrays[type_id][0]
        return type_id

    def describe(self, type_id: int | None, storage: int, decorations: dict[int, dict[int, tuple[int, ...]]],
                 value: Callable[[int], int]) -> _Declared:
        """What a descriptor variable pointing to ``type_id`` in ``storage`` is. Anything unknown is
        described as writable (the conservative answer for what a recorder must read back)."""
        count = 1
        if type_id in self.arrays:  # an array of descriptors: its element type decides the kind
            element, length = self.arrays[type_id]
            count = 0 if length is None else value(length)
            type_id = self.innermost(element)
        if type_id is None:
            return _Declared("storage_buffer", count)
        if type_id in self.sampled_images:
            return self._image(self.sampled_images[type_id], count, combined=True)
        if type_id in self.samplers:
            return _Declared("sampler", count, read_only=True)
        if type_id in self.images:
            return self._image(type_id, count, combined=False)
        if type_id in self.tensors:
            return _Declared("tensor", count)
        if type_id in self.acceleration_structures:
            return _Declared("acceleration_structure", count, read_only=True)
        members = self.structs.get(type_id, 0)
        block = decorations.get(type_id, {})
        if storage == STORAGE_UNIFORM and DECORATION_BLOCK in block:
            return _Declared("uniform_buffer", count, read_only=True)
        read_only = members > 0 and len(self.nonwritable_members.get(type_id, ())) == members
        write_only = members > 0 and len(self.nonreadable_members.get(type_id, ())) == members
        return _Declared("storage_buffer", count, read_only=read_only, write_only=write_only)

    def _image(self, image_type: int, count: int, *, combined: bool) -> _Declared:
        sampled_type, dim, _depth, arrayed, ms, sampled, fmt = self.images[image_type][:7]
        component = self.vectors.get(sampled_type, sampled_type)
        numeric = self.scalars.get(component)
        format_name = IMAGE_FORMATS[fmt] if fmt < len(IMAGE_FORMATS) else f"format {fmt}"
        dim_name = IMAGE_DIMS.get(dim, f"dim {dim}")
        storage = sampled == SAMPLED_STORAGE
        if combined:
            kind = "combined_image_sampler"
        elif dim == DIM_BUFFER:
            kind = "storage_texel_buffer" if storage else "uniform_texel_buffer"
        else:
            kind = "storage_image" if storage else "sampled_image"
        return _Declared(kind, count, read_only=not storage, image_dim=dim_name, image_format=format_name,
                         numeric=numeric, arrayed=bool(arrayed), multisampled=bool(ms))
