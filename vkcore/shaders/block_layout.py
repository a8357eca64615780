"""The memory layout of a shader's buffer blocks, as its SPIR-V states it: the shader's view of the bytes.

A storage or uniform buffer, or a push-constant block, is a SPIR-V ``Block`` struct whose members carry
explicit ``Offset`` decorations, arrays an ``ArrayStride`` and matrices a ``MatrixStride`` (and
``RowMajor``/``ColMajor``). Whatever the GLSL said (std140, std430, scalar), these numbers are the layout the
driver uses, so they are the one truth a comparison of the buffer's bytes can rely on. :func:`reflect_blocks`
reads them for every block a module declares; :class:`BlockLayout` turns a block into a numpy dtype:

- a block that is one runtime array of scalars or vectors (``buffer Out { float result[]; }``) is viewed
  as that element type: ``float32`` for ``float[]``, ``float32`` with a trailing axis of 4 for ``vec4[]``;
- a runtime array of structs is a structured dtype with the members' offsets and the array's stride;
- a block of fixed members (a uniform or push-constant block, or members before a runtime array) is a
  structured dtype with the members at their offsets.

Guarantees: offsets, strides and sizes are the module's own decorations, never recomputed from layout
rules; a member type this module does not understand (an opaque type, a pointer) makes the block
*opaque* (``layout is None``) rather than guessed. Pure Python over the binary form; nothing here talks
to Vulkan or trusts the module: counts and sizes are bounded, and a malformed module raises
:class:`~vkcore.shaders.spirv.SpirvError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from .spirv import (  # the opcodes and enumerants layouts are made of, from the one table of them
    DECORATION_ARRAY_STRIDE, DECORATION_BINDING, DECORATION_BUFFER_BLOCK, DECORATION_DESCRIPTOR_SET,
    DECORATION_MATRIX_STRIDE, DECORATION_OFFSET, DECORATION_ROW_MAJOR, OP_CONSTANT, OP_DECORATE,
    OP_MEMBER_DECORATE, OP_MEMBER_NAME, OP_NAME, OP_SPEC_CONSTANT, OP_TYPE_ARRAY, OP_TYPE_BOOL, OP_TYPE_FLOAT,
    OP_TYPE_INT, OP_TYPE_MATRIX, OP_TYPE_POINTER, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_VECTOR,
    OP_VARIABLE, STORAGE_PUSH_CONSTANT, STORAGE_STORAGE_BUFFER, STORAGE_UNIFORM, SpirvError, _instructions,
    _string,
)

if TYPE_CHECKING:  # numpy is imported where dtypes are made: reflecting a module needs none of it
    import numpy as np

BLOCK_STORAGE = {STORAGE_UNIFORM: "uniform", STORAGE_PUSH_CONSTANT: "push_constant", STORAGE_STORAGE_BUFFER: "storage"}

# A fixed array longer than this, or a struct nested deeper, is not a layout but an attack on the reader.
MAX_ARRAY_ELEMENTS = 1 << 28
MAX_DEPTH = 32
# numpy names of the scalar types a block can hold, by (kind, bits).
SCALAR_DTYPES = {
    ("float", 16): "float16", ("float", 32): "float32", ("float", 64): "float64",
    ("int", 8): "int8", ("int", 16): "int16", ("int", 32): "int32", ("int", 64): "int64",
    ("uint", 8): "uint8", ("uint", 16): "uint16", ("uint", 32): "uint32", ("uint", 64): "uint64",
    ("bool", 32): "uint32",  # a bool never reaches memory as such: GLSL stores it as a 32-bit uint
}


@dataclass(frozen=True)
class Scalar:
    kind: str  # "float", "int", "uint", "bool"
    bits: int

    @property
    def dtype(self) -> str:
        return SCALAR_DTYPES[(self.kind, self.bits)]

    @property
    def size(self) -> int:
        return self.bits // 8


@dataclass(frozen=True)
class Vector:
    component: Scalar
    count: int


@dataclass(frozen=True)
class Matrix:
    column: Vector
    columns: int
    stride: int  # bytes between columns (or rows, when row_major)
    row_major: bool


@dataclass(frozen=True)
class Array:
    element: "Type"
    length: int | None  # None: a runtime array
    stride: int


@dataclass(frozen=True)
class Member:
    name: str
    offset: int
    type: "Type"


@dataclass(frozen=True)
class Struct:
    name: str
    members: tuple[Member, ...]


Type = Union[Scalar, Vector, Matrix, Array, Struct]


def size_of(t: Type) -> int:
    """Bytes one value of ``t`` spans, padding included: arrays and matrices count whole strides (the next
    member of a block cannot start inside them), a struct ends with its last member; a runtime array counts
    as empty."""
    if isinstance(t, Scalar):
        return t.size
    if isinstance(t, Vector):
        return t.component.size * t.count
    if isinstance(t, Matrix):
        return t.stride * (t.columns if not t.row_major else t.column.count)
    if isinstance(t, Array):
        return t.stride * (t.length or 0)
    return max((m.offset + size_of(m.type) for m in t.members), default=0)


def dtype_of(t: Type) -> "np.dtype":
    """The numpy dtype of one value of ``t`` laid out as the shader lays it out (little-endian)."""
    # lazy: vkcap replay imports this module, not numpy
    import numpy as np

    if isinstance(t, Scalar):
        return np.dtype("<" + np.dtype(t.dtype).str[1:]) if t.size > 1 else np.dtype(t.dtype)
    if isinstance(t, Vector):
        return np.dtype((dtype_of(t.component), (t.count,)))
    if isinstance(t, Matrix):
        scalar = dtype_of(t.column.component)
        lines, per_line = (t.columns, t.column.count) if not t.row_major else (t.column.count, t.columns)
        return np.dtype((padded(np.dtype((scalar, (per_line,))), t.stride), (lines,)))
    if isinstance(t, Array):
        if t.length is None:
            raise ValueError("a runtime array has no fixed dtype")
        return np.dtype((padded(dtype_of(t.element), t.stride), (t.length,)))
    names = [m.name for m in t.members]
    return np.dtype({"names": names, "formats": [dtype_of(m.type) for m in t.members],
                     "offsets": [m.offset for m in t.members], "itemsize": size_of(t)})


def padded(dtype: "np.dtype", itemsize: int) -> "np.dtype":
    """``dtype`` stretched to ``itemsize`` bytes (an array's stride): itself when it already has that size;
    a struct keeps its fields; anything else becomes a one-field struct ``v`` with the padding after it."""
    # lazy: vkcap replay imports this module, not numpy
    import numpy as np

    if dtype.itemsize == itemsize:
        return dtype
    if dtype.names:
        return np.dtype({"names": list(dtype.names), "formats": [dtype.fields[n][0] for n in dtype.names],
                         "offsets": [dtype.fields[n][1] for n in dtype.names], "itemsize": itemsize})
    return np.dtype({"names": ["v"], "formats": [dtype], "offsets": [0], "itemsize": itemsize})


def describe(t: Type) -> str:
    """A short text of the type for reports: ``float32``, ``float32[4]``, ``struct{pos: float32[2], id: int32}``."""
    if isinstance(t, Scalar):
        return t.dtype
    if isinstance(t, Vector):
        return f"{t.component.dtype}[{t.count}]"
    if isinstance(t, Matrix):
        return f"{t.column.component.dtype}[{t.columns}x{t.column.count}]" + (" row-major" if t.row_major else "")
    if isinstance(t, Array):
        return f"{describe(t.element)}[{'' if t.length is None else t.length}]"
    return "struct{" + ", ".join(f"{m.name}: {describe(m.type)}" for m in t.members) + "}"


@dataclass(frozen=True)
class BlockLayout:
    """One block a module declares: where it is bound, and its members as the shader lays them out.

    ``struct`` is None when the block holds a type this module does not understand (it is then compared as
    bytes). ``element`` is the runtime array's element (with its stride) when the block ends in one."""

    storage: str  # "storage", "uniform" or "push_constant"
    set: int | None
    binding: int | None
    name: str  # the block's type name (``Out``), or its variable's when the type has none
    struct: Struct | None

    @property
    def runtime_array(self) -> tuple[Member, Array] | None:
        if self.struct is None or not self.struct.members:
            return None
        last = self.struct.members[-1]
        if isinstance(last.type, Array) and last.type.length is None:
            return last, last.type
        return None

    @property
    def header(self) -> Struct | None:
        """The fixed members (all but a trailing runtime array)."""
        if self.struct is None:
            return None
        tail = self.runtime_array
        return Struct(self.struct.name, self.struct.members[:-1] if tail else self.struct.members)

    def element_view(self) -> "tuple[np.dtype, int] | None":
        """``(dtype, offset)`` of a block that is nothing but one runtime array (the common case of a
        storage buffer): its elements' dtype, padded to the array's stride, and where the array starts.
        None otherwise."""
        tail = self.runtime_array
        if tail is None or self.struct is None or len(self.struct.members) != 1:
            return None
        member, array = tail
        return padded(dtype_of(array.element), array.stride), member.offset

    def text(self) -> str:
        return describe(self.struct) if self.struct is not None else "opaque"


class _Module:
    """The declarations of one module that layouts are made of."""

    def __init__(self, code: bytes) -> None:
        _, instructions = _instructions(code)
        self.names: dict[int, str] = {}
        self.member_names: dict[tuple[int, int], str] = {}
        self.decorations: dict[int, dict[int, tuple[int, ...]]] = {}
        self.member_decorations: dict[tuple[int, int], dict[int, tuple[int, ...]]] = {}
        self.types: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.constants: dict[int, int] = {}
        self.variables: list[tuple[int, int, int]] = []  # (pointer type, id, storage class)
        for opcode, ops in instructions:
            if opcode == OP_NAME and ops:
                self.names[ops[0]] = _string(ops[1:])
            elif opcode == OP_MEMBER_NAME and len(ops) >= 2:
                self.member_names[(ops[0], ops[1])] = _string(ops[2:])
            elif opcode == OP_DECORATE and len(ops) >= 2:
                self.decorations.setdefault(ops[0], {})[ops[1]] = ops[2:]
            elif opcode == OP_MEMBER_DECORATE and len(ops) >= 3:
                self.member_decorations.setdefault((ops[0], ops[1]), {})[ops[2]] = ops[3:]
            elif opcode in (OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_MATRIX, OP_TYPE_ARRAY,
                            OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER) and ops:
                self.types[ops[0]] = (opcode, ops[1:])
            elif opcode in (OP_CONSTANT, OP_SPEC_CONSTANT) and len(ops) >= 3:
                self.constants[ops[1]] = ops[2]  # the low word: array lengths are 32-bit in practice
            elif opcode == OP_VARIABLE and len(ops) >= 3:
                self.variables.append((ops[0], ops[1], ops[2]))

    def type(self, type_id: int, depth: int = 0) -> Type | None:
        """The layout type of ``type_id``, or None when it is not a plain data type."""
        if depth > MAX_DEPTH:
            raise SpirvError(f"types nested deeper than {MAX_DEPTH}")
        opcode, ops = self.types.get(type_id, (0, ()))
        if opcode == OP_TYPE_BOOL:
            return Scalar("bool", 32)
        if opcode == OP_TYPE_INT and len(ops) >= 2:
            kind = "int" if ops[1] else "uint"
            return Scalar(kind, ops[0]) if (kind, ops[0]) in SCALAR_DTYPES else None
        if opcode == OP_TYPE_FLOAT and ops:
            return Scalar("float", ops[0]) if ("float", ops[0]) in SCALAR_DTYPES else None
        if opcode == OP_TYPE_VECTOR and len(ops) >= 2:
            component = self.type(ops[0], depth + 1)
            return Vector(component, ops[1]) if isinstance(component, Scalar) and 2 <= ops[1] <= 16 else None
        if opcode in (OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY) and ops:
            element = self.type(ops[0], depth + 1)
            stride = self.decorations.get(type_id, {}).get(DECORATION_ARRAY_STRIDE)
            if element is None or not stride:
                return None
            length = None
            if opcode == OP_TYPE_ARRAY:
                length = self.constants.get(ops[1]) if len(ops) >= 2 else None
                if not length or length > MAX_ARRAY_ELEMENTS:
                    return None
            return Array(element, length, stride[0])
        if opcode == OP_TYPE_STRUCT:
            members = []
            for index, member_type in enumerate(ops):
                decorations = self.member_decorations.get((type_id, index), {})
                t = self._member_type(member_type, decorations, depth + 1)
                offset = decorations.get(DECORATION_OFFSET)
                if t is None or not offset:
                    return None
                members.append(Member(self.member_names.get((type_id, index)) or f"m{index}", offset[0], t))
            return Struct(self.names.get(type_id, ""), tuple(members))
        return None

    def _member_type(self, type_id: int, decorations: dict[int, tuple[int, ...]], depth: int) -> Type | None:
        """A struct member's type: matrices (and arrays of them, at any depth) take their stride and
        majorness from the member's decorations, everything else is :meth:`type`."""
        if depth > MAX_DEPTH:
            raise SpirvError(f"types nested deeper than {MAX_DEPTH}")
        opcode, ops = self.types.get(type_id, (0, ()))
        if opcode == OP_TYPE_MATRIX and len(ops) >= 2:
            column, stride = self.type(ops[0], depth + 1), decorations.get(DECORATION_MATRIX_STRIDE)
            if not isinstance(column, Vector) or not stride:
                return None
            return Matrix(column, ops[1], stride[0], DECORATION_ROW_MAJOR in decorations)
        if opcode in (OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY) and ops and DECORATION_MATRIX_STRIDE in decorations:
            element, stride = self._member_type(ops[0], decorations, depth + 1), self.decorations.get(type_id, {}).get(DECORATION_ARRAY_STRIDE)
            length = self.constants.get(ops[1]) if opcode == OP_TYPE_ARRAY and len(ops) >= 2 else None
            if element is None or not stride or (opcode == OP_TYPE_ARRAY and not 0 < (length or 0) <= MAX_ARRAY_ELEMENTS):
                return None
            return Array(element, length, stride[0])
        return self.type(type_id, depth)

    def blocks(self) -> list[BlockLayout]:
        out = []
        for pointer_type, var_id, storage in self.variables:
            if storage not in BLOCK_STORAGE:
                continue
            opcode, ops = self.types.get(pointer_type, (0, ()))
            if opcode != OP_TYPE_POINTER or len(ops) < 2:
                continue
            pointee = ops[1]
            while self.types.get(pointee, (0, ()))[0] in (OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY):
                pointee = self.types[pointee][1][0]  # an array of blocks: each element has the block's layout
            if self.types.get(pointee, (0, ()))[0] != OP_TYPE_STRUCT:
                continue
            t = self.type(pointee)
            decorations = self.decorations.get(var_id, {})
            name = self.names.get(pointee) or self.names.get(var_id, "")
            out.append(BlockLayout(
                BLOCK_STORAGE[storage] if not (storage == STORAGE_UNIFORM and DECORATION_BUFFER_BLOCK in self.decorations.get(pointee, {}))
                else "storage",
                decorations.get(DECORATION_DESCRIPTOR_SET, (None,))[0], decorations.get(DECORATION_BINDING, (None,))[0], name,
                t if isinstance(t, Struct) else None))
        return out


def view_bytes(data: "bytes | np.ndarray", dtype: "np.dtype", offset: int = 0) -> "np.ndarray":
    """The elements of ``dtype`` in ``data`` from ``offset`` on (a trailing partial element is left out),
    as an array over the same memory. A vector or matrix element adds its axes (``vec4[]`` is ``(n, 4)``)."""
    # lazy: vkcap replay imports this module, not numpy
    import numpy as np

    buffer = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    count = max(0, (len(buffer) - offset) // dtype.itemsize)
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=offset if count else 0)


def reflect_blocks(code: bytes) -> list[BlockLayout]:
    """Every storage, uniform and push-constant block ``code`` declares, in declaration order.
    Raises :class:`SpirvError` when ``code`` is not a SPIR-V module or nests types absurdly deep."""
    return _Module(code).blocks()


def block_at(code: bytes, set_: int, binding: int) -> BlockLayout | None:
    """The block bound at ``set_``/``binding``, or None when the module declares none there."""
    return next((b for b in reflect_blocks(code) if (b.set, b.binding) == (set_, binding)), None)


def push_constants(code: bytes) -> BlockLayout | None:
    """The module's push-constant block, or None."""
    return next((b for b in reflect_blocks(code) if b.storage == "push_constant"), None)


__all__ = ["Array", "BlockLayout", "Matrix", "Member", "Scalar", "Struct", "Vector", "block_at", "describe",
           "dtype_of", "padded", "push_constants", "reflect_blocks", "size_of", "view_bytes"]
