"""A buffer snapshot as the typed numpy array its view describes (what ``vkcap export`` writes), and the
view's text with the snapshot's element count (what ``vkcap info`` shows).

What a view exports as:

- a view of one type (``float32[]``, ``float32[4][]``, a std140 ``float[]`` with a 16-byte stride) gives
  that type's values, shape ``(elements, *shape)``: ``float32[]`` is ``(n,)``, a ``vec4[]`` ``(n, 4)``;
- a struct (several parts sharing one stride) gives a structured dtype laid out as the shader lays it
  out: each field at its offset, ``itemsize`` the stride, so the array's bytes are the snapshot's bytes
  of its elements (a field whose values are not packed, a std140 ``float[4]`` or ``mat3``, is a padded
  subarray, as :func:`vkcore.shaders.block_layout.dtype_of` makes it);
- a block with fixed members before its runtime array (``uint count; Item items[];``) exports the runtime
  array (its fields named as inside it: ``pos``, not ``items.pos``); the fixed members are returned as
  :class:`HeaderField` values for a line beside it;
- a block with fixed members only exports them: one type, its values (``float data[256]`` is ``(256,)``),
  several, a structured array of one element.

Views come from traces, so they are untrusted: one that no numpy dtype can describe (array parts with
different strides, a field's offsets that are no regular layout, a field name empty or repeated) is a
:class:`ViewExportError` saying why, never a crash. A field name that is not printable ASCII is written
as its Python escapes (a .npy header is Latin-1 text).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vkcore.shaders.block_layout import padded

from .views import Part, View

if TYPE_CHECKING:
    import numpy as np

MAX_HEADER_VALUES_SHOWN = 8  # of one header field, in the line export prints


class ViewExportError(ValueError):
    """The view cannot shape a typed array (the message says why)."""


@dataclass(frozen=True)
class HeaderField:
    """A fixed member of a block exported for its runtime array: its name, type and values."""

    name: str
    dtype: str
    values: list[object]  # at most MAX_HEADER_VALUES_SHOWN, flattened
    total: int  # how many values it has


def elements(view: View, nbytes: int) -> int | None:
    """How many elements of the view's runtime array a snapshot of ``nbytes`` holds (None: no runtime array)."""
    tail = _array_parts(view)
    return tail[0].elements(nbytes) if tail else None


def sized_text(view: View, nbytes: int | None) -> str:
    """The view's text with its runtime array's element count: ``float32[4096]``,
    ``struct{count: uint32, items: struct{pos: float32[2]}[100]}`` (the text as it is when the count is
    unknown or the view has no runtime array)."""
    n = elements(view, nbytes) if nbytes is not None else None
    at = view.text.rfind("[]")
    return view.text if n is None or at < 0 else f"{view.text[:at]}[{n}]{view.text[at + 2:]}"


def typed_array(view: View, data: bytes | memoryview) -> "tuple[np.ndarray, list[HeaderField]]":
    """The snapshot ``data`` as the array the view describes (see the module docstring), with the fixed
    members left out of it; :class:`ViewExportError` when the view cannot shape one."""
    tail = _array_parts(view)
    fixed = [p for p in view.parts if p.count is not None]
    if tail:
        if any(p.base != tail[0].base or p.stride != tail[0].stride for p in tail):
            raise ViewExportError("its runtime array's parts have different bases or strides")
        array = tail[0].extract(data) if len(tail) == 1 else _structured(_unprefixed(tail), data, tail[0].elements(len(data)))
        return array, [_header_field(p, data) for p in fixed]
    if len(fixed) == 1:
        part = fixed[0]
        values = part.extract(data)
        if part.elements(len(data)) != part.count:
            raise ViewExportError(f"the snapshot's {len(data)} bytes hold fewer than the view's {part.count} elements")
        return (values.reshape(part.shape) if part.count == 1 else values), []
    if any(p.count != 1 for p in fixed):
        raise ViewExportError("several fixed parts that are not one element each")
    return _structured([_absolute(p) for p in fixed], data, 1), []


def _array_parts(view: View) -> list[Part]:
    return [p for p in view.parts if p.count is None]


def _unprefixed(parts: list[Part]) -> list[Part]:
    """The runtime array's fields named as inside the array (``pos``, not ``items.pos``), where every
    part's name has the array's name before a dot."""
    prefix = parts[0].name.split(".", 1)[0] + "."
    if not all(p.name.startswith(prefix) and len(p.name) > len(prefix) for p in parts):
        return parts
    return [Part(p.name[len(prefix):], p.dtype, p.shape, p.offsets, p.base, p.stride, p.count) for p in parts]


def _absolute(part: Part) -> Part:
    """A fixed part as one element starting at byte 0 (its offsets made absolute)."""
    return Part(part.name, part.dtype, part.shape, tuple(part.base + o for o in part.offsets), 0, part.base + part.stride, 1)


def _structured(parts: list[Part], data: bytes | memoryview, n: int) -> "np.ndarray":
    """``n`` elements of a structured dtype with one field per part, each at its offsets, ``itemsize`` the
    parts' stride (the largest, for fixed parts), read from ``data`` at the parts' base."""
    # lazy: vkcap info imports this module, not numpy
    import numpy as np

    names = [_field_name(p.name) for p in parts]
    if any(not name for name in names) or len(set(names)) != len(names):
        raise ViewExportError("its fields' names are empty or repeated")
    formats, offsets = [], []
    for p in parts:
        field = _field_dtype(p)
        if field is None:
            raise ViewExportError(f"field '{p.name}': its offsets are no regular layout")
        formats.append(field)
        offsets.append(min(p.offsets))
    itemsize = max(p.stride for p in parts)
    try:
        dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})
    except (ValueError, TypeError) as exc:
        raise ViewExportError(f"no numpy dtype holds its fields ({exc})") from None
    base = parts[0].base
    if base + n * itemsize > len(data):
        raise ViewExportError(f"the snapshot's {len(data)} bytes hold fewer than the view's elements")
    return np.frombuffer(data, dtype, count=n, offset=base) if n else np.zeros(0, dtype)


def _field_name(name: str) -> str:
    """A part's name as a field of the .npy header, which is Latin-1 text: printable ASCII as it is (every
    GLSL identifier), anything else as its Python escapes (``\\u03c0``, ``\\x1b``)."""
    return name if name.isascii() and name.isprintable() else ascii(name)[1:-1]


def _field_dtype(part: Part) -> "np.dtype | None":
    """The dtype of one element's values of ``part``, relative to its first offset: a scalar, or nested
    (padded) subarrays when the offsets form a regular grid of the part's shape; None otherwise."""
    # lazy: vkcap info imports this module, not numpy
    import numpy as np

    scalar = np.dtype(part.dtype).newbyteorder("<")
    grid = np.asarray(part.offsets, np.int64).reshape(part.shape) - min(part.offsets)
    if grid.reshape(-1)[0] != 0:
        return None

    def nested(sub: "np.ndarray") -> "np.dtype | None":
        if sub.ndim == 0:
            return scalar if int(sub) == 0 else None
        inner = nested(sub[0])
        if inner is None:
            return None
        step = int(sub[1].reshape(-1)[0]) if len(sub) > 1 else inner.itemsize
        if step < inner.itemsize or any((sub[i] != sub[0] + i * step).any() for i in range(len(sub))):
            return None
        return np.dtype((padded(inner, step), (len(sub),)))

    return nested(grid)


def _header_field(part: Part, data: bytes | memoryview) -> HeaderField:
    values = part.extract(data).reshape(-1)
    return HeaderField(part.name, part.dtype, values[:MAX_HEADER_VALUES_SHOWN].tolist(), int(values.size))


def header_line(uid: str, view: View, fields: list[HeaderField], n: int) -> str:
    """``out: the file holds its runtime array (100 elements); not in it: count = 17 (uint32), ...``."""
    shown = []
    for f in fields:
        more = ", ..." if f.total > len(f.values) else ""
        value = f"{f.values[0]}" if f.total == 1 else f"[{', '.join(map(str, f.values))}{more}]"
        shown.append(f"{f.name} = {value} ({f.dtype})")
    return f"{uid}: the file holds its runtime array ({n} elements); not in it: {', '.join(shown) or 'nothing'}"


__all__ = ["HeaderField", "ViewExportError", "elements", "header_line", "sized_text", "typed_array"]


def npy_problem(array: "np.ndarray") -> str | None:
    """Why no .npy header can describe ``array``'s dtype (fields that overlap, as the padded elements of a
    struct array flattened into one field per member do), or None when one can."""
    # lazy: vkcap info imports this module, not numpy
    import numpy as np

    try:
        np.lib.format.dtype_to_descr(array.dtype)
    except ValueError:
        return "its fields overlap (a struct array's members), which no .npy header describes"
    return None
