"""Specialization constants packed as the type the shader declares, never as the JSON value's type.

A scenario's ``"value": 64.0`` for a shader's ``int`` workgroup size, or ``2`` for its ``float``, used
to be packed by its JSON type (the bits of a float read as an int, or the reverse), and ``4294967299``
for a ``uint`` was cut to 3: the shader ran with exit 0 and computed something else.

Guarantees of :func:`encode` and :func:`pack`:

- A constant the module declares (``OpSpecConstant*`` with that ``SpecId``) is packed as its declared
  type: bool as VkBool32, int and uint of 8, 16, 32 or 64 bits, float of 16, 32 or 64 bits.
- A value that does not fit is refused (:class:`ValueError` with the reason): a fraction or a value out
  of range for an int or uint (64.5, -1 or 2**32 for a uint32), NaN, an infinity or a value beyond the
  float's range (1e308 for a float32), a bool given anything but true, false, 0 or 1, and a bool given
  to a number. An integral float (64.0) is an integer.
- A constant the module does not declare is ignored by Vulkan; it is packed as before (integers as 32
  bits, floats as float32), and refused when it does not fit that.
"""
from __future__ import annotations

import math
import struct

from .spirv import SpecConstantType

INT_FORMATS = {8: "b", 16: "h", 32: "i", 64: "q"}
FLOAT_FORMATS = {16: "e", 32: "f", 64: "d"}
UNDECLARED_INT = SpecConstantType("int", 32)  # how a constant the module does not declare is packed


def _integer(value: object, declared: SpecConstantType) -> int:
    if isinstance(value, bool):
        raise ValueError(f"is a bool, but the shader declares {declared.text}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"{value!r} is not an integer, which {declared.text} needs")
        return int(value)
    if not isinstance(value, int):
        raise ValueError(f"{value!r} is not a number")
    return value


def _shown(value: object) -> str:
    """``value`` as messages show it: short (a 400-digit integer is cut)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def encode(value: object, declared: SpecConstantType) -> bytes:
    """The bytes of ``value`` as ``declared`` (little-endian, the type's own size). Raises
    :class:`ValueError` saying why when it does not fit."""
    if declared.kind == "bool":
        if value in (True, False) and not isinstance(value, float):
            return struct.pack("<I", int(value))  # type: ignore[arg-type]
        raise ValueError(f"{value!r} is not a bool (true, false, 0 or 1), which the shader declares")
    if declared.kind == "float":
        fmt = FLOAT_FORMATS.get(declared.width)
        if fmt is None:
            raise ValueError(f"the shader declares {declared.text}, which vkcap cannot pack")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not a number, which {declared.text} needs")
        number = float(value) if not isinstance(value, int) or abs(value) < 1 << 1024 else math.inf
        if not math.isfinite(number):
            raise ValueError(f"{value!r} is not a finite number, which {declared.text} needs")
        try:
            raw = struct.pack(f"<{fmt}", number)
        except OverflowError:
            raw = b""
        if not raw or not math.isfinite(struct.unpack(f"<{fmt}", raw)[0]):
            raise ValueError(f"{value!r} is out of the range of {declared.text}")
        return raw
    fmt = INT_FORMATS.get(declared.width)
    if fmt is None or declared.kind not in ("int", "uint"):
        raise ValueError(f"the shader declares {declared.text}, which vkcap cannot pack")
    number = _integer(value, declared)
    low, high = (-(1 << (declared.width - 1)), (1 << (declared.width - 1)) - 1) if declared.kind == "int" \
        else (0, (1 << declared.width) - 1)
    if not low <= number <= high:
        raise ValueError(f"{_shown(value)} is out of the range of {declared.text} ({low} to {high})")
    return struct.pack(f"<{fmt.upper() if declared.kind == 'uint' else fmt}", number)


def encode_undeclared(value: object) -> bytes:
    """A constant the module does not declare: 32 bits as before (signed or unsigned by value for an
    integer, float32 for a float), refused when it does not fit that."""
    if isinstance(value, float):
        return encode(value, SpecConstantType("float", 32))
    number = _integer(value, UNDECLARED_INT) if not isinstance(value, bool) else int(value)
    if not -(1 << 31) <= number <= (1 << 32) - 1:
        raise ValueError(f"{_shown(value)} does not fit 32 bits")
    return struct.pack("<i" if number < 0 else "<I", number)


def pack(constants: list[tuple[int, object]], declared: dict[int, SpecConstantType]) -> tuple[list[tuple[int, int, int]], bytes]:
    """Map entries ``(constant id, offset, size)`` and the data for ``constants`` ((id, value) in the
    scenario's order) as the module ``declared`` them. Raises ``(index, ValueError)`` packed in an
    :class:`UnfitConstant` naming the first constant that does not fit."""
    entries, data = [], b""
    for index, (constant_id, value) in enumerate(constants):
        try:
            raw = encode(value, declared[constant_id]) if constant_id in declared else encode_undeclared(value)
        except ValueError as exc:
            raise UnfitConstant(index, constant_id, declared.get(constant_id), str(exc)) from None
        entries.append((constant_id, len(data), len(raw)))
        data += raw
    return entries, data


class UnfitConstant(ValueError):
    """Constant number ``index`` of a list (SpecId ``constant_id``) does not fit ``declared``."""

    def __init__(self, index: int, constant_id: int, declared: SpecConstantType | None, reason: str) -> None:
        self.index, self.constant_id, self.declared, self.reason = index, constant_id, declared, reason
        super().__init__(reason)

    def describe(self, shader_uid: str) -> str:
        """``shader 'add': specialization constant 0 ('WG', int32): 64.5 is not an integer, ...``"""
        what = f"specialization constant {self.constant_id}"
        if self.declared is not None:
            name = f"'{self.declared.name}', " if self.declared.name else ""
            what += f" ({name}{self.declared.text})"
        return f"shader '{shader_uid}': {what}: {self.reason}"
