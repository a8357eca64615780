"""Just enough SPIR-V reflection to refuse what Vulkan leaves undefined, and to know what a shader
cannot write.

A dispatch whose bindings miss a descriptor its shader declares, or a workgroup size (after
specialization) beyond the device's limits, is undefined behaviour: drivers may crash or compute
garbage, and validation layers report it. :func:`reflect` reads the module's descriptor
declarations and workgroup size so the session can refuse such scenarios with a clear message.
It also names the descriptors the module cannot write through (``readonly`` blocks and images,
uniform blocks, sampled images), so a recorder need not read back what no dispatch can change.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

MAGIC = 0x07230203

# Opcodes and enumerants used (SPIR-V specification, "Binary Form").
OP_EXECUTION_MODE = 16
OP_TYPE_IMAGE = 25
OP_TYPE_SAMPLER = 26
OP_TYPE_SAMPLED_IMAGE = 27
OP_TYPE_ARRAY = 28
OP_TYPE_RUNTIME_ARRAY = 29
OP_TYPE_STRUCT = 30
OP_TYPE_POINTER = 32
OP_CONSTANT = 43
OP_CONSTANT_COMPOSITE = 44
OP_SPEC_CONSTANT = 50
OP_SPEC_CONSTANT_COMPOSITE = 51
OP_VARIABLE = 59
OP_DECORATE = 71
OP_MEMBER_DECORATE = 72
OP_EXECUTION_MODE_ID = 331
DECORATION_SPEC_ID = 1
DECORATION_BLOCK = 2
DECORATION_NON_WRITABLE = 24
DECORATION_BUILTIN = 11
DECORATION_BINDING = 33
DECORATION_DESCRIPTOR_SET = 34
BUILTIN_WORKGROUP_SIZE = 25
MODE_LOCAL_SIZE = 17
MODE_LOCAL_SIZE_ID = 38
DESCRIPTOR_STORAGE_CLASSES = {0: "UniformConstant", 2: "Uniform", 12: "StorageBuffer"}
STORAGE_UNIFORM = 2
IMAGE_SAMPLED_STORAGE = 2  # OpTypeImage's "Sampled" operand: 1 sampled (read-only), 2 storage


@dataclass
class Reflection:
    bindings: set[tuple[int, int]] = field(default_factory=set)  # (set, binding) of declared descriptors
    local_size: tuple[int, int, int] | None = None  # with the given specialization applied
    # (set, binding) of the descriptors no variable of the module can write through
    read_only: set[tuple[int, int]] = field(default_factory=set)


class SpirvError(ValueError):
    """The words are not a SPIR-V module (bad magic, truncated instruction)."""


def _instructions(code: bytes) -> list[tuple[int, list[int]]]:
    if len(code) < 20 or len(code) % 4:
        raise SpirvError("not a SPIR-V module (size)")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    if words[0] != MAGIC:
        raise SpirvError("not a SPIR-V module (magic)")
    out, i = [], 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise SpirvError(f"truncated instruction at word {i}")
        out.append((opcode, list(words[i + 1 : i + count])))
        i += count
    return out


def reflect(code: bytes, specialization: dict[int, int | float] | None = None) -> Reflection:
    """Declared descriptor bindings and the effective workgroup size of a compute module."""
    spec = specialization or {}
    decorations: dict[int, dict[int, list[int]]] = {}
    pointer_class: dict[int, int] = {}
    variables: dict[int, int] = {}  # id -> storage class
    constants: dict[int, int] = {}  # id -> value (first word)
    spec_ids: dict[int, int] = {}
    composites: dict[int, list[int]] = {}
    local_size: list[int] | None = None
    local_size_ids: list[int] | None = None
    types = _Types()
    for opcode, ops in _instructions(code):
        types.note(opcode, ops)
        if opcode == OP_DECORATE and len(ops) >= 2:
            decorations.setdefault(ops[0], {})[ops[1]] = ops[2:]
        elif opcode == OP_TYPE_POINTER and len(ops) >= 2:
            pointer_class[ops[0]] = ops[1]
        elif opcode == OP_VARIABLE and len(ops) >= 3:
            variables[ops[1]] = ops[2]
        elif opcode in (OP_CONSTANT, OP_SPEC_CONSTANT) and len(ops) >= 3:
            constants[ops[1]] = ops[2]
            if opcode == OP_SPEC_CONSTANT:
                spec_ids[ops[1]] = -1
        elif opcode in (OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE) and len(ops) >= 2:
            composites[ops[1]] = ops[2:]
        elif opcode == OP_EXECUTION_MODE and len(ops) >= 5 and ops[1] == MODE_LOCAL_SIZE:
            local_size = ops[2:5]
        elif opcode == OP_EXECUTION_MODE_ID and len(ops) >= 5 and ops[1] == MODE_LOCAL_SIZE_ID:
            local_size_ids = ops[2:5]
    result = Reflection()
    writable: set[tuple[int, int]] = set()
    for var, storage in variables.items():
        deco = decorations.get(var, {})
        if storage in DESCRIPTOR_STORAGE_CLASSES and DECORATION_BINDING in deco and DECORATION_DESCRIPTOR_SET in deco:
            binding = (deco[DECORATION_DESCRIPTOR_SET][0], deco[DECORATION_BINDING][0])
            result.bindings.add(binding)
            if not (DECORATION_NON_WRITABLE in deco or types.read_only(types.pointee.get(var), storage, decorations)):
                writable.add(binding)
    result.read_only = result.bindings - writable

    def value(const_id: int) -> int:
        spec_id = decorations.get(const_id, {}).get(DECORATION_SPEC_ID)
        if spec_id and spec_id[0] in spec:
            return int(spec[spec_id[0]])
        return constants.get(const_id, 1)

    builtin = next((i for i, d in decorations.items() if d.get(DECORATION_BUILTIN) == [BUILTIN_WORKGROUP_SIZE] and i in composites), None)
    if builtin is not None and len(composites[builtin]) == 3:
        result.local_size = tuple(value(c) for c in composites[builtin])  # type: ignore[assignment]
    elif local_size_ids is not None:
        result.local_size = tuple(value(c) for c in local_size_ids)  # type: ignore[assignment]
    elif local_size is not None:
        result.local_size = tuple(local_size)  # type: ignore[assignment]
    return result


class _Types:
    """The type declarations :func:`reflect` needs to tell whether a descriptor is read-only."""

    def __init__(self) -> None:
        self.pointee: dict[int, int] = {}  # variable or pointer type id -> the type it points to
        self.structs: dict[int, int] = {}  # struct id -> member count
        self.nonwritable_members: dict[int, set[int]] = {}
        self.elements: dict[int, int] = {}  # array type id -> element type id
        self.images: dict[int, int] = {}  # image type id -> its "Sampled" operand
        self.sampled: set[int] = set()  # samplers and sampled images

    def note(self, opcode: int, ops: list[int]) -> None:
        if opcode == OP_TYPE_POINTER and len(ops) >= 3:
            self.pointee[ops[0]] = ops[2]
        elif opcode == OP_VARIABLE and len(ops) >= 2 and ops[0] in self.pointee:
            self.pointee[ops[1]] = self.pointee[ops[0]]
        elif opcode == OP_TYPE_STRUCT and ops:
            self.structs[ops[0]] = len(ops) - 1
        elif opcode == OP_MEMBER_DECORATE and len(ops) >= 3 and ops[2] == DECORATION_NON_WRITABLE:
            self.nonwritable_members.setdefault(ops[0], set()).add(ops[1])
        elif opcode in (OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY) and len(ops) >= 2:
            self.elements[ops[0]] = ops[1]
        elif opcode == OP_TYPE_IMAGE and len(ops) >= 7:
            self.images[ops[0]] = ops[6]
        elif opcode in (OP_TYPE_SAMPLER, OP_TYPE_SAMPLED_IMAGE) and ops:
            self.sampled.add(ops[0])

    def read_only(self, type_id: int | None, storage: int, decorations: dict[int, dict[int, list[int]]]) -> bool:
        """Whether a descriptor variable of this pointee type, in this storage class, cannot be
        written through. Anything not known to be read-only (tensors, unknown types) is writable."""
        while type_id in self.elements:  # an array of descriptors: its element type decides
            type_id = self.elements[type_id]
        if type_id is None:
            return False
        if type_id in self.sampled:
            return True
        if type_id in self.images:
            return self.images[type_id] != IMAGE_SAMPLED_STORAGE
        if type_id in self.structs:
            if storage == STORAGE_UNIFORM and DECORATION_BLOCK in decorations.get(type_id, {}):
                return True  # a uniform buffer (a storage buffer in Uniform is a BufferBlock)
            members = self.structs[type_id]
            return members > 0 and len(self.nonwritable_members.get(type_id, ())) == members
        return False
