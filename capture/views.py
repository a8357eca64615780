"""The shader's view of each buffer: what a snapshot's bytes mean, so every comparison can be typed.

A buffer is bytes to Vulkan, but the shaders that bind it declare what the bytes are: ``buffer Out { float
result[]; }`` makes binding 0.2 an array of float32. :func:`derive_views` reads that from the SPIR-V a
trace holds and the scenario's dispatches: a buffer's view is the view of the last dispatch that can write
it (the shader does not declare it ``readonly``), or of the first that reads it when none writes it. When
shaders disagree, the chosen view keeps the others in ``alternatives`` (reports show the writer's).

A view is a list of :class:`Part`: each part is one scalar type repeated in a pattern, ``count`` elements
``stride`` bytes apart from ``base``, each element holding ``len(offsets)`` values at those byte offsets
(shaped ``shape``). A plain ``float result[]`` is one part; a struct is one part per scalar leaf
(``pos``, ``inner.b``), so each field is judged in its own type. Views are plain JSON (:meth:`View.to_json`)
and :meth:`View.from_json` checks every number of one read from a trace: a view from a stranger's trace
can name no type outside :data:`SCALARS`, no offset or count beyond the limits below, and no two values
that overlap (so what it reads out of a snapshot is at most the snapshot's size plus MAX_FIXED_BYTES).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from vkcore.shaders.block_layout import Array, BlockLayout, Matrix, Scalar, Struct, Type, Vector, describe, reflect_blocks
from vkcore.shaders.spirv import SpirvError, reflect

if TYPE_CHECKING:  # numpy only where bytes are read: deriving views needs none of it
    import numpy as np

# The scalar types a view can hold (names as replay's DTYPES spells them) and their sizes.
SCALARS = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
           "float16": 2, "float32": 4, "float64": 8}
MAX_PARTS = 4096  # leaves of one struct: more is no layout a comparison can report on
MAX_VALUES_PER_ELEMENT = 1 << 16
MAX_STRIDE = 1 << 24
MAX_OFFSET = 1 << 40
MAX_TEXT = 4096  # characters of a view's description kept from a trace
MAX_FIXED_BYTES = 64 << 20  # the values of a block's members before its runtime array


class ViewError(ValueError):
    """A view read from a trace is malformed or out of bounds."""


@dataclass(frozen=True)
class Part:
    """``count`` elements (None: as many as the bytes hold) of ``len(offsets)`` ``dtype`` values each, the
    element ``stride`` bytes long, the first at byte ``base``; value ``k`` of an element at ``offsets[k]``,
    the values shaped ``shape`` (``()`` for one)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, ...]
    base: int
    stride: int
    count: int | None

    @property
    def contiguous(self) -> bool:
        """The values are one packed array (no gaps, no header): the bytes can be read as ``dtype`` as they are."""
        size = SCALARS[self.dtype]
        return (self.base == 0 and self.count is None and self.stride == size * len(self.offsets)
                and self.offsets == tuple(range(0, self.stride, size)))

    def elements(self, nbytes: int) -> int:
        if self.count is not None:
            return self.count if self.base + self.stride * self.count <= nbytes else max(0, (nbytes - self.base) // self.stride)
        return max(0, (nbytes - self.base) // self.stride)

    def extract(self, data: bytes | memoryview) -> "np.ndarray":
        """This part's values in ``data`` as a packed array of shape ``(elements, *shape)``."""
        # lazy: vkcap replay imports this module, not numpy
        import numpy as np

        size = SCALARS[self.dtype]
        storage = np.dtype(self.dtype).newbyteorder("<")
        n = self.elements(len(data))
        raw = np.frombuffer(data, np.uint8)
        if self.contiguous:
            return raw[: n * self.stride].view(storage).reshape((n, *self.shape))
        rows = raw[self.base: self.base + n * self.stride].reshape(n, self.stride) if n else np.zeros((0, self.stride), np.uint8)
        picks = (np.asarray(self.offsets, np.int64)[:, None] + np.arange(size)).reshape(-1)
        return np.ascontiguousarray(rows[:, picks]).view(storage).reshape((n, *self.shape))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "offsets": list(self.offsets),
                "base": self.base, "stride": self.stride, "count": self.count}


@dataclass(frozen=True)
class View:
    """How one resource's bytes are read: its parts, a text for reports (``float32[]``,
    ``struct{pos: float32[2], id: int32}[]``) and where the view comes from."""

    parts: tuple[Part, ...]
    text: str
    shader: str = ""
    binding: str = ""  # "set.binding"
    role: str = ""  # "writer" or "reader"
    alternatives: tuple["View", ...] = ()

    @property
    def scalar(self) -> Part | None:
        """The one part of a view that is a plain array of one type (compared as today's ``--dtype``)."""
        return self.parts[0] if len(self.parts) == 1 and self.parts[0].contiguous else None

    def source(self) -> str:
        return f"shader '{self.shader}', binding {self.binding}" if self.shader else ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "parts": [p.to_json() for p in self.parts],
                               "shader": self.shader, "binding": self.binding, "role": self.role}
        if self.alternatives:
            out["alternatives"] = [a.to_json() for a in self.alternatives]
        return out

    @classmethod
    def from_json(cls, obj: Any, depth: int = 0) -> "View":
        """A view read back from a trace, every field checked (:class:`ViewError` names what is wrong)."""
        if not isinstance(obj, dict):
            raise ViewError("a view is not a table")
        parts = obj.get("parts")
        if not isinstance(parts, list) or not 0 < len(parts) <= MAX_PARTS:
            raise ViewError(f"a view needs 1 to {MAX_PARTS} parts")
        alternatives = obj.get("alternatives", [])
        if not isinstance(alternatives, list) or (alternatives and depth > 0) or len(alternatives) > 16:
            raise ViewError("a view's alternatives are malformed")
        checked = tuple(_part(p, i) for i, p in enumerate(parts))
        _check_disjoint(checked)
        return cls(checked, _text(obj.get("text", ""), "text"),
                   _text(obj.get("shader", ""), "shader"), _text(obj.get("binding", ""), "binding"),
                   _text(obj.get("role", ""), "role"), tuple(cls.from_json(a, depth + 1) for a in alternatives))


def _quoted(value: Any, limit: int = 40) -> str:
    """``value`` as a message quotes it, at most ``limit`` characters of it (a trace's text can be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ViewError(f"a view's {what} is not a string of at most {MAX_TEXT} characters")
    return value


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ViewError(f"a view's {what} is not an integer in {low}..{high}")
    return value


def _part(obj: Any, index: int) -> Part:
    if not isinstance(obj, dict):
        raise ViewError(f"part {index} is not a table")
    dtype = obj.get("dtype")
    if not isinstance(dtype, str) or dtype not in SCALARS:  # a list or table is no name (nor hashable)
        raise ViewError(f"part {index}: dtype {_quoted(dtype)} is not one of {', '.join(SCALARS)}")
    shape, offsets = obj.get("shape"), obj.get("offsets")
    if not isinstance(shape, list) or len(shape) > 8 or not isinstance(offsets, list):
        raise ViewError(f"part {index}: shape and offsets must be lists")
    shape_t = tuple(_int(s, f"part {index} shape", 1, MAX_VALUES_PER_ELEMENT) for s in shape)
    stride = _int(obj.get("stride"), f"part {index} stride", 1, MAX_STRIDE)
    offsets_t = tuple(_int(o, f"part {index} offset", 0, stride - SCALARS[dtype]) for o in offsets)
    if len(offsets_t) != math.prod(shape_t) or not offsets_t:
        raise ViewError(f"part {index}: {len(offsets_t)} offsets for shape {list(shape_t)}")
    count = obj.get("count")
    return Part(_text(obj.get("name", ""), f"part {index} name"), dtype, shape_t, offsets_t,
                _int(obj.get("base"), f"part {index} base", 0, MAX_OFFSET), stride,
                None if count is None else _int(count, f"part {index} count", 0, MAX_OFFSET))


def _check_disjoint(parts: tuple[Part, ...]) -> None:
    """Refuse parts whose values overlap, as no block's fields do: the runtime array's parts share one
    base and stride and no two of their values share a byte of an element, nor do two values of a fixed
    part, and the fixed parts hold at most :data:`MAX_FIXED_BYTES`. So reading every part of a view out of
    a snapshot of N bytes gives at most N + MAX_FIXED_BYTES bytes of values (a forged view of overlapping
    values could otherwise ask for thousands of times the snapshot)."""
    array = [p for p in parts if p.count is None]
    if any((p.base, p.stride) != (array[0].base, array[0].stride) for p in array):
        raise ViewError("the runtime array's parts have different bases or strides")
    groups = [[(o, SCALARS[p.dtype]) for p in array for o in p.offsets]]
    groups += [[(o, SCALARS[p.dtype]) for o in p.offsets] for p in parts if p.count is not None]
    for values in groups:
        values.sort()
        if any(at < before + size for (before, size), (at, _) in zip(values, values[1:])):
            raise ViewError("two of its values overlap")
    if sum(p.count * len(p.offsets) * SCALARS[p.dtype] for p in parts if p.count is not None) > MAX_FIXED_BYTES:
        raise ViewError(f"its fixed parts hold more than {MAX_FIXED_BYTES} bytes")


def _leaves(t: Type, name: str, offset: int) -> Iterable[tuple[str, Scalar, tuple[int, ...], list[int]]]:
    """``(name, scalar, shape, offsets)`` of each scalar leaf of ``t`` placed at byte ``offset``: vectors,
    matrices and fixed arrays of scalars are one leaf with a shape, structs (and arrays of them) recurse
    (an array of structs gives each field the array's axis first)."""
    if isinstance(t, Scalar):
        yield name, t, (), [offset]
    elif isinstance(t, Vector):
        yield name, t.component, (t.count,), [offset + k * t.component.size for k in range(t.count)]
    elif isinstance(t, Matrix):
        lines, per_line = (t.columns, t.column.count) if not t.row_major else (t.column.count, t.columns)
        size = t.column.component.size
        yield name, t.column.component, (lines, per_line), [offset + i * t.stride + k * size for i in range(lines) for k in range(per_line)]
    elif isinstance(t, Array) and t.length:
        for leaf, scalar, shape, offsets in _leaves(t.element, name, 0):
            yield leaf, scalar, (t.length, *shape), [offset + i * t.stride + o for i in range(t.length) for o in offsets]
    elif isinstance(t, Struct):
        for m in t.members:
            if not (isinstance(m.type, Array) and m.type.length is None):
                yield from _leaves(m.type, f"{name}.{m.name}" if name else m.name, offset + m.offset)


def view_of_block(block: BlockLayout) -> View | None:
    """The view of a buffer bound to ``block``, or None when the block is opaque or too large to report
    on field by field. A block of one runtime array of structs names its parts by field (``pos``); a block
    with fixed members before the array gives those members a part each (``count`` 1) and the array's
    fields their own (``data``, ``data.pos``)."""
    if block.struct is None:
        return None
    parts: list[Part] = []
    tail = block.runtime_array
    header = block.header
    if header is not None:
        for leaf, scalar, shape, offsets in _leaves(header, "", 0):
            size = scalar.size
            parts.append(Part(leaf, scalar.dtype, shape, tuple(o - offsets[0] for o in offsets), offsets[0],
                              max(offsets) - offsets[0] + size, 1))
    if tail is not None:
        member, array = tail
        only = len(block.struct.members) == 1
        for leaf, scalar, shape, offsets in _leaves(array.element, "", 0):
            name = leaf if only and leaf else (f"{member.name}.{leaf}" if leaf else member.name)
            parts.append(Part(name, scalar.dtype, shape, tuple(offsets), member.offset, array.stride, None))
    if not parts or len(parts) > MAX_PARTS or any(len(p.offsets) > MAX_VALUES_PER_ELEMENT for p in parts):
        return None
    if any(p.dtype not in SCALARS for p in parts):  # a bool leaf is stored as uint32: SCALARS has it
        return None
    text = describe(tail[1].element) + "[]" if tail is not None and len(block.struct.members) == 1 else describe(block.struct)
    return View(tuple(parts), text)


# The shaders each command kind runs, by the keys that name them: their blocks declare the views.
COMMAND_SHADERS: dict[str, tuple[str, ...]] = {
    "dispatch_compute": ("shader_ref",),
    "dispatch_fragment": ("vertex_shader_ref", "fragment_shader_ref"),
}


@dataclass
class _Use:
    view: View
    writes: bool


def derive_views(document: Mapping[str, Any], spirv: Mapping[str, bytes]) -> dict[str, View]:
    """Each buffer's view, from the scenario ``document`` (a trace's portable scenario: untrusted, so every
    field is type-checked and anything odd is skipped) and the SPIR-V of its shaders by uid. Buffers no
    dispatch binds, or bound only where a shader's block is opaque, have no view (compared as bytes)."""
    buffers = {body.get("uid") for item in _list(document.get("resources")) if isinstance(item, dict)
               for kind, body in item.items() if kind == "buffer" and isinstance(body, dict)}
    reflected: dict[str, tuple[dict[tuple[int, int], BlockLayout], frozenset[tuple[int, int]]] | None] = {}
    uses: dict[str, list[_Use]] = {}
    seen: dict[tuple[str, int, int], View | None] = {}
    for item in _list(document.get("commands")):
        if not isinstance(item, dict) or len(item) != 1:
            continue
        (kind, body), = item.items()
        if kind not in COMMAND_SHADERS or not isinstance(body, dict):
            continue
        stages = []
        for key in COMMAND_SHADERS[kind]:
            shader = body.get(key)
            if isinstance(shader, str) and shader in spirv:
                if shader not in reflected:
                    reflected[shader] = _reflect(spirv[shader])
                if reflected[shader] is not None:
                    stages.append((shader, reflected[shader]))
        for binding in _list(body.get("bindings")):
            if not isinstance(binding, dict):
                continue
            uid, s, b = binding.get("resource_ref"), binding.get("set"), binding.get("id")
            if uid not in buffers or not isinstance(s, int) or not isinstance(b, int):
                continue
            # the stage that writes the binding speaks for it, else the first that declares it
            declaring = [(shader, blocks[(s, b)], (s, b) not in read_only) for shader, (blocks, read_only) in stages  # type: ignore[misc]
                         if (s, b) in blocks]
            declaring.sort(key=lambda d: not d[2])
            if not declaring:
                continue
            shader, block, writes = declaring[0]
            if (shader, s, b) not in seen:  # a scenario repeats its dispatches: each block is viewed once
                view = view_of_block(block)
                seen[(shader, s, b)] = None if view is None else _with_source(view, shader, f"{s}.{b}")
            if seen[(shader, s, b)] is not None:
                uses.setdefault(uid, []).append(_Use(seen[(shader, s, b)], writes))  # type: ignore[arg-type]
    out: dict[str, View] = {}
    for uid, found in uses.items():
        writers = [u for u in found if u.writes]
        chosen = writers[-1] if writers else found[0]
        role = "writer" if chosen.writes else "reader"
        others = tuple(dict.fromkeys(u.view for u in found if u.view.parts != chosen.view.parts))
        out[uid] = View(chosen.view.parts, chosen.view.text, chosen.view.shader, chosen.view.binding, role, others)
    return out


def _reflect(code: bytes) -> tuple[dict[tuple[int, int], BlockLayout], frozenset[tuple[int, int]]] | None:
    try:
        blocks = {(b.set, b.binding): b for b in reflect_blocks(code) if b.set is not None and b.binding is not None}
        return blocks, frozenset(reflect(code).read_only)  # type: ignore[arg-type]
    except (SpirvError, ValueError):
        return None


def _with_source(view: View, shader: str, binding: str) -> View:
    return View(view.parts, view.text, shader, binding)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


__all__ = ["MAX_PARTS", "Part", "SCALARS", "View", "ViewError", "derive_views", "view_of_block"]

