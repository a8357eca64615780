"""Image and tensor formats, as data: one table row per VkFormat the scenario specification names.

Every fact the rest of vkcap needs about a format (its Vulkan enum value, texel size, numpy dtype, DDS
code, how replay compares it) is a column of :data:`FORMATS`; code looks rows up, it never branches
on format names.

What the reference runner (ARM ``scenario-runner`` 0.11.0, the version the tests run) does, measured
with it and read from its source (``src/dds_reader.*``, ``src/utils.cpp``, ``src/image.cpp``):

* Bytes per texel in files (DDS payloads, ``.npy`` image sources, the DDS pitch) are Vulkan's block
  size rounded *up to a power of two* (``elementSizeFromVkFormat``): ``R8G8B8_*`` use 4 bytes per texel
  in files, ``D32_SFLOAT_S8_UINT`` 8 (DXGI ``D32_FLOAT_S8X24_UINT``). That is :attr:`FormatInfo.file_bytes`.
* ``R8G8B8_SNORM`` / ``R8G8B8_SINT`` have no DXGI format; the reference uses the non-standard codes
  133 (``DXGI_FORMAT_R8G8B8_SNORM_CUSTOM``) and 134 (``DXGI_FORMAT_R8G8B8_SINT_CUSTOM``), with 4 bytes per
  texel. vkcap does the same (:data:`DXGI_R8G8B8_SNORM_CUSTOM`, :data:`DXGI_R8G8B8_SINT_CUSTOM`).
* ``B10G11R11_UFLOAT_PACK32`` is DXGI ``R11G11B10_FLOAT`` (26); the packed 32-bit words are stored as is.
* ``D32_SFLOAT_S8_UINT`` is read from DXGI ``D32_FLOAT_S8X24_UINT`` (20, 8 bytes: float depth, then the
  stencil byte and 3 padding bytes) and the image is created as ``D32_SFLOAT``: the stencil is dropped
  (with a warning when any stencil byte is non-zero). The reference cannot *write* such an image to DDS.
* The current specification lists 21 formats with a DDS equivalent: the older one's 16, plus
  ``R16G16B16A16_SINT`` (14), ``R16_UINT`` (57), ``R16_SFLOAT`` (54), ``R8G8_UINT`` (50) and
  ``B8G8R8A8_UNORM`` (87), all of which the reference reads and writes; it refuses the other "no DDS"
  formats (``Unknown VkFormat`` / ``Unknown DXGI format``). :attr:`FormatInfo.dxgi_format` follows the
  reference; :attr:`FormatInfo.spec_dds` says whether the specification lists the format.

DXGI values are Microsoft's ``DXGI_FORMAT`` enumeration (dxgiformat.h); Vulkan values come from the
``vulkan`` package's constants (the table's literal copies are used only where that package cannot be
imported), except ``VK_FORMAT_R8_BOOL_ARM`` (1000460000, VK_ARM_tensors), which it does not declare.
The table is checked against both in ``tests/test_imageio.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

__all__ = [
    "FormatInfo", "FORMATS", "DXGI", "DXGI_FILE_BYTES", "DXGI_NAMES", "PAYLOAD_FORMATS", "format_info", "tensor_dtype",
    "image_formats", "tensor_formats", "dds_formats", "format_for_dxgi", "file_texel_bytes",
    "DXGI_R8G8B8_SNORM_CUSTOM", "DXGI_R8G8B8_SINT_CUSTOM", "VK_FORMAT_R8_BOOL_ARM",
]

VK_FORMAT_R8_BOOL_ARM = 1000460000  # VK_ARM_tensors; absent from the vulkan package
DXGI_R8G8B8_SNORM_CUSTOM = 133  # not in DXGI: the reference runner's own code
DXGI_R8G8B8_SINT_CUSTOM = 134

# Microsoft's DXGI_FORMAT values used here (dxgiformat.h), plus the reference runner's two custom codes.
DXGI: Mapping[str, int] = MappingProxyType({
    "R32G32B32A32_FLOAT": 2,
    "R16G16B16A16_FLOAT": 10,
    "R16G16B16A16_UNORM": 11,
    "R16G16B16A16_SNORM": 13,
    "R16G16B16A16_SINT": 14,
    "D32_FLOAT_S8X24_UINT": 20,
    "R11G11B10_FLOAT": 26,
    "R8G8B8A8_UNORM": 28,
    "R8G8B8A8_SNORM": 31,
    "R8G8B8A8_SINT": 32,
    "R16G16_FLOAT": 34,
    "D32_FLOAT": 40,
    "R32_FLOAT": 41,
    "R32_UINT": 42,
    "R32_SINT": 43,
    "R8G8_UNORM": 49,
    "R8G8_UINT": 50,
    "R8G8_SINT": 52,
    "R16_FLOAT": 54,
    "R16_UINT": 57,
    "R16_SINT": 59,
    "R8_UNORM": 61,
    "R8_UINT": 62,
    "R8_SNORM": 63,
    "R8_SINT": 64,
    "B8G8R8A8_UNORM": 87,
    "R8G8B8_SNORM_CUSTOM": DXGI_R8G8B8_SNORM_CUSTOM,
    "R8G8B8_SINT_CUSTOM": DXGI_R8G8B8_SINT_CUSTOM,
})
DXGI_NAMES: Mapping[int, str] = MappingProxyType({v: k for k, v in DXGI.items()})


@dataclass(frozen=True)
class FormatInfo:
    """Everything vkcap needs to know about one VkFormat.

    ``block_bytes`` is Vulkan's texel block size (what a tightly packed image row holds per texel);
    ``components`` and ``dtype`` describe how a texel splits into numpy elements (packed formats are one
    ``<u4`` element; the depth-stencil format is loaded as its depth, one ``<f4``). ``file_bytes`` is the
    texel size in DDS and ``.npy`` files, as the reference runner computes it (block size rounded up to a
    power of two). ``dxgi_format`` is the DDS code the reference reads and writes, ``None`` where it has
    none. ``compare_dtype`` is the numpy dtype name replay compares the data as.
    """

    name: str
    vk_value: int
    block_bytes: int
    components: int
    dtype: str
    dxgi_format: int | None
    is_depth: bool
    is_stencil: bool
    is_packed: bool
    compare_dtype: str
    file_bytes: int
    spec_dds: bool  # the specification lists it among image formats with a DDS equivalent
    image: bool  # allowed for image resources by the specification
    tensor: bool  # allowed for tensor resources by the specification

    @property
    def short_name(self) -> str:
        """The name without ``VK_FORMAT_``: ``R8G8B8A8_UNORM``."""
        return self.name[len("VK_FORMAT_"):]

    @property
    def npy_texel_bytes(self) -> int:
        """Bytes per texel of a ``.npy`` image source: the file texel, except for the depth-stencil format,
        whose image is created (and loaded from ``.npy``) as ``D32_SFLOAT``."""
        return self.component_bytes if self.is_depth else self.file_bytes

    @property
    def component_bytes(self) -> int:
        """Bytes of one numpy element (one component, or one packed word)."""
        return int(self.dtype[2:])


def _vulkan_value(short: str, fallback: int) -> int:
    """The VkFormat value from the ``vulkan`` package where it declares one, else the table's value.

    The table's literal values are the Vulkan ABI (they never change) and keep this module importable
    where the Vulkan loader is missing (reading and writing files needs no GPU); the test suite checks
    that the two agree. ``VK_FORMAT_R8_BOOL_ARM`` is not in the package.
    """
    if _vulkan is None:
        return fallback
    return int(getattr(_vulkan, "VK_FORMAT_" + short, fallback))


try:  # the values only: formats stay plain data
    import vulkan as _vulkan
except (ImportError, OSError):  # no package, or no Vulkan loader library on this machine
    _vulkan = None


# short name: (vk_value, block_bytes, components, dtype, dxgi, depth, stencil, packed, compare_dtype,
#              file_bytes, spec_dds, image, tensor)
_ROWS: dict[str, tuple] = {
    # images with a DDS equivalent (specification, in its order)
    "R8_SNORM":                 (10, 1, 1, "|i1", DXGI["R8_SNORM"], 0, 0, 0, "int8", 1, 1, 1, 0),
    "R8G8_SINT":                (21, 2, 2, "|i1", DXGI["R8G8_SINT"], 0, 0, 0, "int8", 2, 1, 1, 0),
    "R8G8_UNORM":               (16, 2, 2, "|u1", DXGI["R8G8_UNORM"], 0, 0, 0, "uint8", 2, 1, 1, 0),
    "R8G8B8_SINT":              (28, 3, 3, "|i1", DXGI_R8G8B8_SINT_CUSTOM, 0, 0, 0, "int8", 4, 1, 1, 0),
    "R32_SFLOAT":               (100, 4, 1, "<f4", DXGI["R32_FLOAT"], 0, 0, 0, "float32", 4, 1, 1, 1),
    "R8G8B8A8_UNORM":           (37, 4, 4, "|u1", DXGI["R8G8B8A8_UNORM"], 0, 0, 0, "uint8", 4, 1, 1, 0),
    "R8G8B8A8_SNORM":           (38, 4, 4, "|i1", DXGI["R8G8B8A8_SNORM"], 0, 0, 0, "int8", 4, 1, 1, 0),
    "R8G8B8_SNORM":             (24, 3, 3, "|i1", DXGI_R8G8B8_SNORM_CUSTOM, 0, 0, 0, "int8", 4, 1, 1, 0),
    "R8G8B8A8_SINT":            (42, 4, 4, "|i1", DXGI["R8G8B8A8_SINT"], 0, 0, 0, "int8", 4, 1, 1, 0),
    "R16G16B16A16_SFLOAT":      (97, 8, 4, "<f2", DXGI["R16G16B16A16_FLOAT"], 0, 0, 0, "float16", 8, 1, 1, 0),
    "R32G32B32A32_SFLOAT":      (109, 16, 4, "<f4", DXGI["R32G32B32A32_FLOAT"], 0, 0, 0, "float32", 16, 1, 1, 0),
    "R16G16_SFLOAT":            (83, 4, 2, "<f2", DXGI["R16G16_FLOAT"], 0, 0, 0, "float16", 4, 1, 1, 0),
    "B10G11R11_UFLOAT_PACK32":  (122, 4, 1, "<u4", DXGI["R11G11B10_FLOAT"], 0, 0, 1, "uint32", 4, 1, 1, 0),
    "D32_SFLOAT_S8_UINT":       (130, 5, 1, "<f4", DXGI["D32_FLOAT_S8X24_UINT"], 1, 1, 0, "float32", 8, 1, 1, 0),
    "R8_UNORM":                 (9, 1, 1, "|u1", DXGI["R8_UNORM"], 0, 0, 0, "uint8", 1, 1, 1, 0),
    "R32_UINT":                 (98, 4, 1, "<u4", DXGI["R32_UINT"], 0, 0, 0, "uint32", 4, 1, 1, 1),
    "R8G8_UINT":                (20, 2, 2, "|u1", DXGI["R8G8_UINT"], 0, 0, 0, "uint8", 2, 1, 1, 0),
    "B8G8R8A8_UNORM":           (44, 4, 4, "|u1", DXGI["B8G8R8A8_UNORM"], 0, 0, 0, "uint8", 4, 1, 1, 0),
    # images without a DDS equivalent in the older specification (the current one lists three of them)
    "R16G16B16A16_UNORM":       (91, 8, 4, "<u2", None, 0, 0, 0, "uint16", 8, 0, 1, 0),
    "R16G16B16A16_SNORM":       (92, 8, 4, "<i2", None, 0, 0, 0, "int16", 8, 0, 1, 0),
    "R16G16B16A16_SINT":        (96, 8, 4, "<i2", DXGI["R16G16B16A16_SINT"], 0, 0, 0, "int16", 8, 1, 1, 0),
    "R8_BOOL_ARM":              (1000460000, 1, 1, "|b1", None, 0, 0, 0, "bool", 1, 0, 1, 1),
    "R8_UINT":                  (13, 1, 1, "|u1", None, 0, 0, 0, "uint8", 1, 0, 1, 1),
    "R8_SINT":                  (14, 1, 1, "|i1", None, 0, 0, 0, "int8", 1, 0, 1, 1),
    "R16_UINT":                 (74, 2, 1, "<u2", DXGI["R16_UINT"], 0, 0, 0, "uint16", 2, 1, 1, 1),
    "R16_SINT":                 (75, 2, 1, "<i2", None, 0, 0, 0, "int16", 2, 0, 1, 1),
    "R32_SINT":                 (99, 4, 1, "<i4", None, 0, 0, 0, "int32", 4, 0, 1, 1),
    "R64_SINT":                 (111, 8, 1, "<i8", None, 0, 0, 0, "int64", 8, 0, 1, 1),
    "R16_SFLOAT":               (76, 2, 1, "<f2", DXGI["R16_FLOAT"], 0, 0, 0, "float16", 2, 1, 1, 1),
    # tensors only; numpy has no such floats: .npy files hold the payload bytes, with the dtype the
    # reference runner writes (measured: <V2, <V1 and, for E5M2, |u1); replay compares them as floats
    "R16_SFLOAT_FPENCODING_BFLOAT16_ARM":  (1000460001, 2, 1, "<V2", None, 0, 0, 0, "bfloat16", 2, 0, 0, 1),
    "R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": (1000460002, 1, 1, "<V1", None, 0, 0, 0, "float8e4m3", 1, 0, 0, 1),
    "R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM": (1000460003, 1, 1, "|u1", None, 0, 0, 0, "float8e5m2", 1, 0, 0, 1),
}
# Formats whose .npy files hold raw payload bytes: any dtype of the element's size loads (as the reference).
PAYLOAD_FORMATS = frozenset("VK_FORMAT_" + s for s in ("R16_SFLOAT_FPENCODING_BFLOAT16_ARM",
                                                        "R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM",
                                                        "R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM"))


def _build() -> Mapping[str, FormatInfo]:
    table: dict[str, FormatInfo] = {}
    for short, row in _ROWS.items():
        vk_value, block, comps, dtype, dxgi, depth, stencil, packed, cmp, file_bytes, spec_dds, image, tensor = row
        name = "VK_FORMAT_" + short
        table[name] = FormatInfo(
            name=name, vk_value=_vulkan_value(short, vk_value), block_bytes=block, components=comps, dtype=dtype,
            dxgi_format=dxgi, is_depth=bool(depth), is_stencil=bool(stencil), is_packed=bool(packed),
            compare_dtype=cmp, file_bytes=file_bytes, spec_dds=bool(spec_dds), image=bool(image),
            tensor=bool(tensor),
        )
    return MappingProxyType(table)


FORMATS: Mapping[str, FormatInfo] = _build()
"""Every format the specification names for images or tensors, by full VkFormat name."""

_BY_DXGI: Mapping[int, FormatInfo] = MappingProxyType(
    {f.dxgi_format: f for f in FORMATS.values() if f.dxgi_format is not None}
)
# Bytes per texel of every DXGI code the reference runner reads.
DXGI_FILE_BYTES: Mapping[int, int] = MappingProxyType({code: f.file_bytes for code, f in _BY_DXGI.items()})


def format_info(name: str) -> FormatInfo:
    """The row for ``name`` (``"VK_FORMAT_R32_SFLOAT"`` or ``"R32_SFLOAT"``).

    Raises ``KeyError`` naming the unknown format and listing the known ones.
    """
    key = name if name.startswith("VK_FORMAT_") else "VK_FORMAT_" + name
    try:
        return FORMATS[key]
    except KeyError:
        raise KeyError(f"unknown format {name!r}; known formats: {', '.join(FORMATS)}") from None


def tensor_dtype(name: str) -> str:
    """The numpy dtype string of a tensor format's elements (``"<f4"``, ``"|b1"``...), as the reference
    writes tensor outputs. ``KeyError`` for formats that are not tensor formats."""
    info = format_info(name)
    if not info.tensor:
        raise KeyError(f"{info.name} is not a tensor format; tensor formats: {', '.join(tensor_formats())}")
    return info.dtype


def image_formats() -> tuple[str, ...]:
    """Names of the formats the specification allows for images, in its order."""
    return tuple(n for n, f in FORMATS.items() if f.image)


_TENSOR_ORDER = ("R8_BOOL_ARM", "R8_UINT", "R8_SINT", "R16_UINT", "R16_SINT", "R32_UINT", "R32_SINT",
                 "R64_SINT", "R16_SFLOAT", "R32_SFLOAT", "R16_SFLOAT_FPENCODING_BFLOAT16_ARM",
                 "R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM", "R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM")  # the specification's order


def tensor_formats() -> tuple[str, ...]:
    """Names of the formats the specification allows for tensors, in its order."""
    return tuple("VK_FORMAT_" + s for s in _TENSOR_ORDER)


def dds_formats() -> tuple[str, ...]:
    """Names of the image formats the reference runner reads from DDS files (it writes them all back to DDS
    except ``D32_SFLOAT_S8_UINT``)."""
    return tuple(n for n, f in FORMATS.items() if f.image and f.dxgi_format is not None)


def format_for_dxgi(code: int) -> FormatInfo | None:
    """The table's format for a DDS ``dxgiFormat`` code, or ``None``."""
    return _BY_DXGI.get(code)


def file_texel_bytes(code: int) -> int | None:
    """Bytes per texel in a DDS file of DXGI ``code`` (``None`` for codes the reference does not read)."""
    return DXGI_FILE_BYTES.get(code)


# SPIR-V "Image Format" of a storage image -> the VkFormat it names (Vulkan specification, "Compatibility
# Between SPIR-V Image Formats and Vulkan Formats").
SPIRV_IMAGE_FORMATS: dict[str, str] = {
    spirv: f"VK_FORMAT_{vulkan}" for spirv, vulkan in (
        ("Rgba32f", "R32G32B32A32_SFLOAT"), ("Rgba16f", "R16G16B16A16_SFLOAT"), ("R32f", "R32_SFLOAT"),
        ("Rgba8", "R8G8B8A8_UNORM"), ("Rgba8Snorm", "R8G8B8A8_SNORM"), ("Rg32f", "R32G32_SFLOAT"),
        ("Rg16f", "R16G16_SFLOAT"), ("R11fG11fB10f", "B10G11R11_UFLOAT_PACK32"), ("R16f", "R16_SFLOAT"),
        ("Rgba16", "R16G16B16A16_UNORM"), ("Rgb10A2", "A2B10G10R10_UNORM_PACK32"), ("Rg16", "R16G16_UNORM"),
        ("Rg8", "R8G8_UNORM"), ("R16", "R16_UNORM"), ("R8", "R8_UNORM"), ("Rgba16Snorm", "R16G16B16A16_SNORM"),
        ("Rg16Snorm", "R16G16_SNORM"), ("Rg8Snorm", "R8G8_SNORM"), ("R16Snorm", "R16_SNORM"), ("R8Snorm", "R8_SNORM"),
        ("Rgba32i", "R32G32B32A32_SINT"), ("Rgba16i", "R16G16B16A16_SINT"), ("Rgba8i", "R8G8B8A8_SINT"),
        ("R32i", "R32_SINT"), ("Rg32i", "R32G32_SINT"), ("Rg16i", "R16G16_SINT"), ("Rg8i", "R8G8_SINT"),
        ("R16i", "R16_SINT"), ("R8i", "R8_SINT"), ("Rgba32ui", "R32G32B32A32_UINT"), ("Rgba16ui", "R16G16B16A16_UINT"),
        ("Rgba8ui", "R8G8B8A8_UINT"), ("R32ui", "R32_UINT"), ("Rgb10a2ui", "A2B10G10R10_UINT_PACK32"),
        ("Rg32ui", "R32G32_UINT"), ("Rg16ui", "R16G16_UINT"), ("Rg8ui", "R8G8_UINT"), ("R16ui", "R16_UINT"),
        ("R8ui", "R8_UINT"), ("R64ui", "R64_UINT"), ("R64i", "R64_SINT"),
    )
}


def texel_numeric(info: FormatInfo) -> str:
    """How a shader reads this format's texels: "uint", "int" or "float" (normalized, float and depth
    formats; a depth-stencil image is read through its depth aspect)."""
    if info.is_depth:
        return "float"
    if info.name.endswith(("_UINT", "_UINT_PACK32")) or info.name == "VK_FORMAT_R8_BOOL_ARM":
        return "uint"
    if info.name.endswith(("_SINT", "_SINT_PACK32")):
        return "int"
    return "float"
