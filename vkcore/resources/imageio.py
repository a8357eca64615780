"""Image files the way ARM's reference ``scenario-runner`` reads and writes them: DDS, PNG and ``.npy``.

Pure Python + numpy (+ Pillow to *decode* PNG); no Vulkan. Writes are atomic (:func:`vkcore.outputs.write_atomic`).

What the reference runner (0.11.0) does, measured with it and read from its source:

Image ``dims``
    An image's ``dims`` are ``[1, W, H, 1]``: ``dims[1]`` is the **width**, ``dims[2]`` the **height**
    (the reference creates ``VkExtent3D(dims[1], dims[2], dims[3])`` and checks a DDS/PNG source's
    height against ``dims[2]``, its width against ``dims[1]``). The last entry is the extent's *depth*
    and multiplies the image size; the channel count comes from the format, not from ``dims`` (with
    ``[1, W, H, 4]`` an ``R8G8B8A8_UNORM`` image is 4x too large and a file source is refused).
``.npy`` image sources (:func:`read_npy_image`)
    NHWC: shape ``[1, H, W, C]`` with ``C`` the format's component count, and a payload of exactly
    ``H * W * npy_texel_bytes`` bytes (the dtype itself is not checked, only the byte count). So ``dims``
    ``[1, W, H, 1]`` pairs with an array of shape ``(1, H, W, C)``. Formats whose file texel is not
    ``C`` whole components (``R8G8B8_*``: 3 components, 4 bytes; ``B10G11R11``: 3 components, 4 bytes)
    cannot be loaded from ``.npy``. Images cannot be *written* to ``.npy`` (``dst`` must be .dds or .png).
DDS (:func:`read_dds`, :func:`write_dds`)
    Only the DX10 extended header is read and written (legacy files are refused: "Non-DX10 DDS files not
    supported"). The reference writes: magic, 124-byte header with flags ``0x100F`` (caps, height,
    width, pitch, pixel format), pitch ``width * file_bytes``, depth 1, mipMapCount 1, pixel format
    {size 32, flags 4 (FOURCC), fourCC "DX10"}, caps 0x1000 (texture); then DX10 {dxgiFormat,
    resourceDimension 3 (2D), miscFlag 0, arraySize 1, miscFlags2 0}; then level 0 only, rows tightly
    packed; never the other mip levels of a mipped image. It reads: a DX10 2D non-cube texture, any
    mipMapCount (0 counts as 1; the flags, pitch, depth and arraySize fields are not consulted) whose
    levels are packed one after the other and exactly fill the rest of the file; an image with more
    ``mips`` than the file gets the missing levels by linear blits, one with fewer is refused. A DDS
    source also *replaces the image's format* with the file's: the scenario's ``format`` is not compared.
    A ``D32_SFLOAT_S8_UINT`` source (DXGI 20, 8-byte texels) loads its depth only; such an image cannot
    be written back ("Unknown VkFormat: VK_FORMAT_D32_SFLOAT", after creating an empty ``dst`` file).
PNG (:func:`read_png`, :func:`write_png`)
    Only ``R8G8B8A8_UNORM`` images are written to PNG (width ``dims[1]``, height ``dims[2]``), and read
    from PNG, with stb_image_write 1.16 (8-bit RGBA, colour
    type 6, no ancillary chunks, its own filter choice and deflate). :func:`encode_png` reproduces that
    encoder byte for byte. Reading decodes any PNG to 8-bit RGBA as stb_image does (grey replicated
    to RGB, alpha 255 where absent, palettes and tRNS expanded, 16-bit samples reduced to their high
    byte), refusing images wider or taller than 8192 pixels.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from vkcore.resources.formats import DXGI_FILE_BYTES, FormatInfo, format_for_dxgi, format_info
from vkcore.scenario.npyio import NpyFormatError, read_header
from vkcore.outputs import write_atomic

__all__ = [
    "ImageFileError", "DdsImage", "read_dds", "write_dds", "dds_header", "mip_level_sizes",
    "read_png", "write_png", "encode_png", "read_npy_image", "image_extent",
    "PNG_MAX_WIDTH", "PNG_MAX_HEIGHT", "PNG_MAX_DECODED_BYTES",
]


class ImageFileError(ValueError):
    """An image file cannot be read or written; the message says which file and what is wrong."""


# --------------------------------------------------------------------------------------------------------
# dims
# --------------------------------------------------------------------------------------------------------

def image_extent(dims: Sequence[int]) -> tuple[int, int, int]:
    """``(width, height, depth)`` of an image resource's ``dims`` (``[N, W, H, D]``), as the reference reads them."""
    if len(dims) != 4:
        raise ValueError(f"image dims must have 4 entries [N, W, H, D], got {list(dims)}")
    return int(dims[1]), int(dims[2]), int(dims[3])


# --------------------------------------------------------------------------------------------------------
# DDS
# --------------------------------------------------------------------------------------------------------

DDS_MAGIC = b"DDS "
DX10_FOURCC = b"DX10"
HEADER_SIZE = 124
PIXEL_FORMAT_SIZE = 32
DDS_PREFIX_SIZE = 4 + HEADER_SIZE  # magic + DDS_HEADER
DDS_DX10_SIZE = 20
DDS_DATA_OFFSET = DDS_PREFIX_SIZE + DDS_DX10_SIZE  # 148

DDSD_CAPS, DDSD_HEIGHT, DDSD_WIDTH, DDSD_PITCH = 0x1, 0x2, 0x4, 0x8
DDSD_PIXELFORMAT, DDSD_MIPMAPCOUNT = 0x1000, 0x20000
DDSD_REQUIRED = DDSD_CAPS | DDSD_HEIGHT | DDSD_WIDTH | DDSD_PIXELFORMAT
DDSD_REFERENCE = DDSD_REQUIRED | DDSD_PITCH  # 0x100F, what the reference writes
DDPF_FOURCC = 0x4
DDSCAPS_COMPLEX, DDSCAPS_TEXTURE, DDSCAPS_MIPMAP = 0x8, 0x1000, 0x400000
DDS_DIMENSION_TEXTURE2D = 3
DDS_RESOURCE_MISC_TEXTURECUBE = 0x4

# magic, size, flags, height, width, pitchOrLinearSize, depth, mipMapCount, reserved1[11],
# pixel format {size, flags, fourCC, rgbBitCount, r, g, b, a masks}, caps, caps2, caps3, caps4, reserved2
_HEADER = struct.Struct("<4s7I11I I I4s5I 5I")
_DX10 = struct.Struct("<5I")  # dxgiFormat, resourceDimension, miscFlag, arraySize, miscFlags2
assert _HEADER.size == DDS_PREFIX_SIZE and _DX10.size == DDS_DX10_SIZE
U32_MAX = 0xFFFFFFFF


@dataclass(frozen=True)
class DdsImage:
    """A DDS file's pixel data: ``levels[i]`` is mip level ``i``, rows tightly packed, top row first.

    ``depth`` and ``array_size`` are the header's values as written (the reference ignores them;
    this reader refuses texture arrays). ``texel_bytes`` is the bytes per texel of ``dxgi_format``.
    """

    width: int
    height: int
    depth: int
    mip_levels: int
    array_size: int
    dxgi_format: int
    levels: list[bytes]

    @property
    def texel_bytes(self) -> int:
        return DXGI_FILE_BYTES[self.dxgi_format]

    @property
    def format(self) -> FormatInfo | None:
        """The VkFormat the reference gives an image loaded from this file (``None``: outside the spec)."""
        return format_for_dxgi(self.dxgi_format)

    def level_extent(self, level: int) -> tuple[int, int]:
        """``(width, height)`` of mip ``level``."""
        return max(self.width >> level, 1), max(self.height >> level, 1)

    def to_array(self, level: int = 0) -> np.ndarray:
        """Mip ``level`` as a ``(height, width, components)`` array of the format's dtype (a view where the
        texel has no padding; R8G8B8 and depth-stencil texels are copied without their padding bytes)."""
        fmt = self.format
        if fmt is None:
            raise ImageFileError(f"DXGI format {self.dxgi_format} has no numpy layout in vkcap's format table")
        w, h = self.level_extent(level)
        raw = np.frombuffer(self.levels[level], dtype=np.uint8).reshape(h, w, fmt.file_bytes)
        if fmt.file_bytes == fmt.components * fmt.component_bytes:
            return raw.view(np.dtype(fmt.dtype)).reshape(h, w, fmt.components)
        # a padded texel (R8G8B8 in 4 bytes; depth + stencil in 8): the leading components only
        return raw[:, :, : fmt.components * fmt.component_bytes].copy().view(np.dtype(fmt.dtype))


def mip_level_sizes(width: int, height: int, texel_bytes: int, levels: int) -> list[int]:
    """Bytes of each of ``levels`` mip levels of a ``width`` x ``height`` image (each halved, at least 1)."""
    return [max(width >> i, 1) * max(height >> i, 1) * texel_bytes for i in range(levels)]


def max_mip_levels(width: int, height: int) -> int:
    """floor(log2(max(width, height))) + 1: the longest mip chain of an image."""
    return max(int(width), int(height), 1).bit_length()


def dds_header(
    width: int, height: int, dxgi_format: int, texel_bytes: int | None = None, mip_levels: int = 1
) -> bytes:
    """The 148 header bytes the reference runner writes before the pixel data (DX10 form).

    With ``mip_levels`` 1 (the only case the reference writes) the bytes are the reference's exactly.
    More levels add ``DDSD_MIPMAPCOUNT`` and the complex/mipmap caps, as Microsoft's DDS guide asks.
    """
    if texel_bytes is None:
        texel_bytes = _texel_bytes(dxgi_format)
    for label, value in (("width", width), ("height", height)):
        if not 1 <= value <= U32_MAX:
            raise ImageFileError(f"DDS {label} {value} is out of range (1 to {U32_MAX})")
    if not 1 <= mip_levels <= max_mip_levels(width, height):
        raise ImageFileError(
            f"{mip_levels} mip levels is out of range for a {width}x{height} image "
            f"(1 to {max_mip_levels(width, height)})"
        )
    flags = DDSD_REFERENCE | (DDSD_MIPMAPCOUNT if mip_levels > 1 else 0)
    caps = DDSCAPS_TEXTURE | (DDSCAPS_COMPLEX | DDSCAPS_MIPMAP if mip_levels > 1 else 0)
    pitch = ((width * texel_bytes * 8 + 7) // 8) & U32_MAX  # the reference's uint32 arithmetic
    return _HEADER.pack(
        DDS_MAGIC, HEADER_SIZE, flags, height, width, pitch, 1, mip_levels, *([0] * 11),
        PIXEL_FORMAT_SIZE, DDPF_FOURCC, DX10_FOURCC, 0, 0, 0, 0, 0,
        caps, 0, 0, 0, 0,
    ) + _DX10.pack(dxgi_format, DDS_DIMENSION_TEXTURE2D, 0, 1, 0)


def write_dds(
    path: str | Path,
    width: int,
    height: int,
    dxgi_format: int,
    levels: Sequence[bytes | bytearray | memoryview | np.ndarray],
    *,
    texel_bytes: int | None = None,
) -> None:
    """Write ``levels`` (mip 0 first, each tightly packed) as a DX10 DDS file, atomically.

    Byte-identical to the reference runner for one level. ``texel_bytes`` defaults to the DXGI format's
    (the reference's element size); every level's length is checked against it before anything is written.
    """
    if not levels:
        raise ImageFileError(f"{path}: no pixel data to write")
    if texel_bytes is None:
        texel_bytes = _texel_bytes(dxgi_format)
    header = dds_header(width, height, dxgi_format, texel_bytes, len(levels))
    # The ignore: numpy's stubs give ndarray a __buffer__ only on Python >= 3.12.
    views = [memoryview(np.ascontiguousarray(level) if isinstance(level, np.ndarray) else level).cast("B")  # type: ignore[arg-type]
             for level in levels]
    for i, (view, size) in enumerate(zip(views, mip_level_sizes(width, height, texel_bytes, len(levels)))):
        if view.nbytes != size:
            w, h = max(width >> i, 1), max(height >> i, 1)
            raise ImageFileError(
                f"{path}: mip level {i} holds {view.nbytes} bytes, "
                f"a {w}x{h} level of {texel_bytes}-byte texels needs {size}"
            )
    write_atomic(path, (header, *views))


def read_dds(path: str | Path, *, expected_width: int | None = None, expected_height: int | None = None) -> DdsImage:
    """Read a DX10 DDS file, checking every size against the file's length before reading pixel data.

    Accepts what the reference runner accepts (see the module notes) and raises :class:`ImageFileError`
    naming the problem otherwise: bad magic or header sizes, legacy (non-DX10) headers, non-2D, cube
    or array textures, unknown DXGI formats, impossible mip counts, and pixel data that does not
    exactly fill the file. ``expected_width``/``expected_height`` (the scenario's) are checked too.
    """
    name = str(path)
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise ImageFileError(f"{name}: cannot open DDS file ({exc.strerror or exc})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(DDS_PREFIX_SIZE)
        if len(head) < 4 or head[:4] != DDS_MAGIC:
            raise ImageFileError(f"{name}: not a DDS file (bad magic)")
        if len(head) < DDS_PREFIX_SIZE:
            raise ImageFileError(f"{name}: truncated DDS header ({size} bytes, at least {DDS_DATA_OFFSET} needed)")
        fields = _HEADER.unpack(head)
        (_, hsize, flags, height, width, _pitch, depth, mip_count), rest = fields[:8], fields[8:]
        pf_size, _pf_flags, fourcc = rest[11], rest[12], rest[13]
        caps = rest[19]
        if hsize != HEADER_SIZE:
            raise ImageFileError(f"{name}: invalid DDS header size {hsize} (must be {HEADER_SIZE})")
        if flags & DDSD_REQUIRED != DDSD_REQUIRED:
            raise ImageFileError(f"{name}: required DDS header flags (caps, height, width, pixel format) not set")
        if pf_size != PIXEL_FORMAT_SIZE:
            raise ImageFileError(f"{name}: invalid DDS pixel format size {pf_size} (must be {PIXEL_FORMAT_SIZE})")
        if not caps & DDSCAPS_TEXTURE:
            raise ImageFileError(f"{name}: required DDS caps flag (texture) not set")
        if fourcc != DX10_FOURCC:
            raise ImageFileError(
                f"{name}: legacy DDS header (pixel format fourCC {fourcc!r}); only DX10 DDS files are supported, "
                "as in the reference runner"
            )
        ext = f.read(DDS_DX10_SIZE)
        if len(ext) < DDS_DX10_SIZE:
            raise ImageFileError(
                f"{name}: truncated DDS DX10 header ({size} bytes, at least {DDS_DATA_OFFSET} needed)"
            )
        dxgi, dimension, misc, array_size, _misc2 = _DX10.unpack(ext)
        if dimension != DDS_DIMENSION_TEXTURE2D:
            raise ImageFileError(f"{name}: only 2D DDS textures are supported (resource dimension {dimension})")
        if misc & DDS_RESOURCE_MISC_TEXTURECUBE:
            raise ImageFileError(f"{name}: cube-map DDS textures are not supported")
        if array_size > 1:
            raise ImageFileError(f"{name}: DDS texture arrays are not supported (array size {array_size})")
        texel = DXGI_FILE_BYTES.get(dxgi)
        if texel is None:
            raise ImageFileError(f"{name}: unknown or unsupported DXGI format {dxgi}")
        if width == 0 or height == 0:
            raise ImageFileError(f"{name}: DDS image has a zero dimension ({width}x{height})")
        if expected_height and height != expected_height:
            raise ImageFileError(
                f"{name}: DDS image height does not match that in the scenario file: {height} vs {expected_height}"
            )
        if expected_width and width != expected_width:
            raise ImageFileError(
                f"{name}: DDS image width does not match that in the scenario file: {width} vs {expected_width}"
            )
        mips = max(mip_count, 1)
        if mips > max_mip_levels(width, height):
            raise ImageFileError(
                f"{name}: {mips} mip levels is impossible for a {width}x{height} image "
                f"(at most {max_mip_levels(width, height)})"
            )
        sizes = mip_level_sizes(width, height, texel, mips)
        need, have = sum(sizes), size - DDS_DATA_OFFSET
        if have != need:
            what = "truncated" if have < need else "trailing data after the pixel data"
            raise ImageFileError(
                f"{name}: {what}: {width}x{height}, {mips} mip level(s) of {texel}-byte texels need "
                f"{need} bytes of pixel data, the file holds {have}"
            )
        levels = []
        for i, n in enumerate(sizes):
            chunk = f.read(n)
            if len(chunk) != n:  # the file shrank while being read
                raise ImageFileError(f"{name}: truncated while reading mip level {i}")
            levels.append(chunk)
    return DdsImage(width, height, depth, mips, array_size, dxgi, levels)


def _texel_bytes(dxgi_format: int) -> int:
    texel = DXGI_FILE_BYTES.get(dxgi_format)
    if texel is None:
        raise ImageFileError(f"unknown DXGI format {dxgi_format}: pass texel_bytes")
    return texel


# --------------------------------------------------------------------------------------------------------
# PNG
# --------------------------------------------------------------------------------------------------------

PNG_MAX_WIDTH = 8192  # the reference's ImageLoadOptions defaults
PNG_MAX_HEIGHT = 8192
PNG_MAX_DECODED_BYTES = 8192 * 8192 * 4
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(
    path: str | Path,
    *,
    expected_width: int | None = None,
    expected_height: int | None = None,
    max_width: int = PNG_MAX_WIDTH,
    max_height: int = PNG_MAX_HEIGHT,
    max_bytes: int = PNG_MAX_DECODED_BYTES,
) -> tuple[int, int, bytes]:
    """Decode a PNG file to ``(width, height, rgba)``: 8-bit RGBA, rows top to bottom (``R8G8B8A8_UNORM``).

    Converts like stb_image (what the reference uses): grey is replicated to RGB, missing alpha is 255,
    palettes and tRNS transparency are expanded, 16-bit samples keep their high byte. The dimensions are
    checked (against the limits and the expected size) from the header, before any pixel is decoded.
    """
    # lazy: vkcap suite worker imports this module, not PIL
    from PIL import Image, UnidentifiedImageError

    name = str(path)
    try:
        with open(path, "rb") as fh:
            lead = fh.read(24)  # signature, then the IHDR chunk's length, tag, width and height
    except OSError as exc:
        raise ImageFileError(f"{name}: cannot open PNG file ({exc.strerror or exc})") from None
    if lead[:8] != PNG_SIGNATURE:
        raise ImageFileError(f"{name}: not a PNG file (bad signature)")
    if len(lead) < 24 or lead[12:16] != b"IHDR":
        raise ImageFileError(f"{name}: truncated PNG or missing IHDR chunk")
    width, height = struct.unpack_from(">II", lead, 16)
    # sizes first, from the header alone: nothing is decoded or allocated for an oversized image
    if width <= 0 or height <= 0:
        raise ImageFileError(f"{name}: PNG has a zero dimension ({width}x{height})")
    if (expected_height and height != expected_height) or (expected_width and width != expected_width):
        raise ImageFileError(
            f"{name}: PNG is {width}x{height}, the scenario expects {expected_width}x{expected_height}"
        )
    if (max_width and width > max_width) or (max_height and height > max_height):
        raise ImageFileError(f"{name}: PNG dimensions {width}x{height} exceed the limit {max_width}x{max_height}")
    if max_bytes and width * height * 4 > max_bytes:
        raise ImageFileError(f"{name}: PNG decoded size {width * height * 4} bytes exceeds the limit {max_bytes}")
    try:
        img = Image.open(path, formats=["PNG"])
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageFileError(f"{name}: unreadable PNG header ({exc})") from None
    with img:
        if img.size != (width, height):
            raise ImageFileError(f"{name}: inconsistent PNG header")
        try:
            rgba = _to_rgba(img)
        except (OSError, SyntaxError, ValueError, zlib.error) as exc:
            raise ImageFileError(f"{name}: cannot decode PNG ({exc})") from None
    return width, height, rgba


def _to_rgba(img) -> bytes:
    """RGBA bytes of a Pillow image, converted the way stb_image converts to 4 channels."""
    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit grey: stb keeps the high byte, Pillow would clip
        grey = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
        alpha = np.full_like(grey, 255)
        trns = img.info.get("transparency")
        if isinstance(trns, int):
            alpha[np.asarray(img) == trns] = 0
        return np.stack([grey, grey, grey, alpha], axis=-1).tobytes()
    if mode != "RGBA":
        img = img.convert("RGBA")  # applies palettes and tRNS ("transparency"), replicates grey
    return img.tobytes()


def write_png(
    path: str | Path,
    width: int,
    height: int,
    rgba: bytes | bytearray | memoryview | np.ndarray,
    *,
    exact: bool = True,
) -> None:
    """Write 8-bit RGBA pixels as a PNG file, atomically.

    ``exact`` (the default): byte-identical to the reference runner's file (:func:`encode_png`, about
    1.5 s per megabyte of pixels). ``exact=False``: the same filtered rows compressed by zlib, many
    times faster; the pixels are identical, the bytes are not.
    """
    write_atomic(path, (encode_png(width, height, rgba) if exact else _encode_png_fast(width, height, rgba),))


def encode_png(width: int, height: int, rgba: bytes | bytearray | memoryview | np.ndarray) -> bytes:
    """PNG bytes of ``width`` x ``height`` RGBA pixels, exactly as stb_image_write 1.16 ``stbi_write_png`` makes them.

    Per row, the filter (none, sub, up, average, Paeth; row 0 with a zero row above) whose output has the
    smallest sum of absolute signed bytes wins (the first on ties); the filtered rows are compressed with
    stb's own deflate: one fixed-Huffman block, 3-byte hash chains of at most 16 entries, lazy matching,
    or stored blocks when that is smaller. Pure Python: about 1.5 s per megabyte of pixels.
    """
    return _png_file(width, height, _stb_zlib_compress(_png_filter(_rgba_rows(width, height, rgba), 4)))


def _encode_png_fast(width: int, height: int, rgba) -> bytes:
    return _png_file(width, height, zlib.compress(_png_filter(_rgba_rows(width, height, rgba), 4), 6))


def _rgba_rows(width: int, height: int, rgba) -> np.ndarray:
    if not (0 < width <= 0x7FFFFFFF // 4 and 0 < height <= 0x7FFFFFFF):
        raise ImageFileError(f"PNG dimensions {width}x{height} are out of range")
    if isinstance(rgba, np.ndarray):
        pixels = np.ascontiguousarray(rgba).reshape(-1).view(np.uint8)
    else:
        pixels = np.frombuffer(memoryview(rgba).cast("B"), dtype=np.uint8)
    if pixels.size != width * height * 4:
        raise ImageFileError(
            f"PNG pixel data holds {pixels.size} bytes, {width}x{height} RGBA needs {width * height * 4}"
        )
    return pixels.reshape(height, width * 4)


def _png_file(width: int, height: int, idat: bytes) -> bytes:
    # 8-bit RGBA, deflate, adaptive filters, no interlacing
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return PNG_SIGNATURE + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & U32_MAX)


def _png_filter(rows: np.ndarray, n: int, chunk: int = 512) -> bytes:
    """stb's per-row filter choice, vectorised: returns the filtered scanlines, each led by its filter byte."""
    height, stride = rows.shape
    out = np.empty((height, stride + 1), dtype=np.uint8)
    for top in range(0, height, chunk):
        x = rows[top: top + chunk].astype(np.int16)
        up = np.zeros_like(x)
        up[1:] = x[:-1]
        if top:
            up[0] = rows[top - 1]
        left = np.zeros_like(x)
        left[:, n:] = x[:, :-n]
        upleft = np.zeros_like(x)
        upleft[:, n:] = up[:, :-n]
        p = left + up - upleft
        pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - upleft)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
        cands = np.stack([x, x - left, x - up, x - ((left + up) >> 1), x - paeth]).astype(np.uint8)  # wraps mod 256
        est = np.abs(cands.view(np.int8).astype(np.int32)).sum(axis=2)  # (5, rows)
        best = np.argmin(est, axis=0)  # the first minimum, as stb's strict '<'
        out[top: top + chunk, 0] = best
        out[top: top + chunk, 1:] = cands[best, np.arange(x.shape[0])]
    return out.tobytes()


def _bitrev(code: int, bits: int) -> int:
    res = 0
    for _ in range(bits):
        res = (res << 1) | (code & 1)
        code >>= 1
    return res


def _fixed_huffman(sym: int) -> tuple[int, int]:
    """(bit-reversed code, length) of ``sym`` in deflate's fixed literal/length code."""
    if sym <= 143:
        return _bitrev(0x30 + sym, 8), 8
    if sym <= 255:
        return _bitrev(0x190 + sym - 144, 9), 9
    if sym <= 279:
        return _bitrev(sym - 256, 7), 7
    return _bitrev(0xC0 + sym - 280, 8), 8


_LENGTH_BASE = (3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
                163, 195, 227, 258, 259)
_LENGTH_EXTRA = (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0)
_DIST_BASE = (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049,
              3073, 4097, 6145, 8193, 12289, 16385, 24577, 32768)
_DIST_EXTRA = (0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13)
_TABLES: dict[str, list] = {}


def _deflate_tables() -> tuple[list, list, list]:
    """Literal codes, length codes (by match length) and distance codes (by distance), each (bits, count)."""
    if not _TABLES:
        _TABLES["lit"] = [_fixed_huffman(b) for b in range(256)]
        lengths: list = [None] * 259
        for length in range(3, 259):
            j = 0
            while length > _LENGTH_BASE[j + 1] - 1:
                j += 1
            code, nbits = _fixed_huffman(j + 257)
            extra = _LENGTH_EXTRA[j]
            if extra:
                code |= (length - _LENGTH_BASE[j]) << nbits
            lengths[length] = (code, nbits + extra)
        dists: list = [None] * 32768  # distances 1 to 32767 (stb never goes further)
        j = 0
        for d in range(1, 32768):
            while d > _DIST_BASE[j + 1] - 1:
                j += 1
            code, nbits = _bitrev(j, 5), 5
            if _DIST_EXTRA[j]:
                code |= (d - _DIST_BASE[j]) << 5
                nbits += _DIST_EXTRA[j]
            dists[d] = (code, nbits)
        _TABLES["len"], _TABLES["dist"] = lengths, dists
    return _TABLES["lit"], _TABLES["len"], _TABLES["dist"]


def _stb_hashes(data: bytes) -> tuple[list[int], list[int]]:
    """stbiw__zhash of every 3-byte window (masked to the 16384-entry table), and the windows themselves."""
    a = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    if a.size < 3:
        return [], []
    key = a[:-2] | (a[1:-1] << 8) | (a[2:] << 16)
    h = key.copy()
    h ^= h << 3
    h += h >> 5
    h ^= h << 4
    h += h >> 17
    h ^= h << 25
    h += h >> 6
    return (h & 16383).tolist(), key.tolist()


def _match_length(data: bytes, p: int, i: int, k: int, limit: int) -> int:
    """Length of the common prefix of data[p:] and data[i:], known to be at least ``k``, at most ``limit``."""
    step = 8
    while k < limit:
        m = min(k + step, limit)
        if data[p + k: p + m] == data[i + k: i + m]:
            k = m
            step *= 2
            continue
        lo, hi = k, m - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if data[p + k: p + mid] == data[i + k: i + mid]:
                lo = mid
            else:
                hi = mid - 1
        return lo
    return k


def _stb_zlib_compress(data: bytes, quality: int = 8) -> bytes:
    """stbi_zlib_compress (stb_image_write 1.16) in Python: the same matches, hence the same bytes."""
    lit, lens, dists = _deflate_tables()
    quality = max(quality, 5)
    n = len(data)
    out = bytearray(b"\x78\x5e")
    bitbuf, bitcount = 3, 3  # BFINAL=1, BTYPE=01 (fixed Huffman)
    hashes, keys = _stb_hashes(data)  # keys[i]: the 3 bytes at i, a cheap first test of a match
    # per hash bucket: positions (oldest first) and their 3-byte keys, which let a C-level ``in`` rule a
    # bucket out before any Python-level loop
    chains: list[list[int] | None] = [None] * 16384
    chain_keys: list[list[int]] = [[]] * 16384
    i = 0
    while i < n - 3:
        h = hashes[i]
        best, bestloc = 3, -1
        chain = chains[h]
        key = keys[i]
        if chain is None:
            chains[h] = [i]
            chain_keys[h] = [key]
        else:
            ckeys = chain_keys[h]
            if key in ckeys:
                limit, oldest = min(n - i, 258), i - 32768
                for p in chain:
                    if p > oldest and keys[p] == key and (best == 3 or data[p: p + best] == data[i: i + best]):
                        d, short = best, min(best + 8, limit)  # most matches are short: byte by byte first
                        while d < short and data[p + d] == data[i + d]:
                            d += 1
                        best = _match_length(data, p, i, d, limit) if d == short else d
                        bestloc = p
            if len(chain) == 2 * quality:  # stb halves a full chain, dropping the oldest entries
                del chain[:quality]
                del ckeys[:quality]
            chain.append(i)
            ckeys.append(key)
        if bestloc >= 0:  # lazy matching: a longer match at the next byte makes this one a literal
            h = hashes[i + 1]
            chain = chains[h]
            key = keys[i + 1]
            if chain is not None and key in chain_keys[h] and best + 1 <= min(n - i - 1, 258):
                oldest = i - 32767
                for p in chain:
                    if p > oldest and keys[p] == key and data[p: p + best + 1] == data[i + 1: i + best + 2]:
                        bestloc = -1
                        break
        if bestloc >= 0:
            code, nbits = lens[best]
            bitbuf |= code << bitcount
            bitcount += nbits
            code, nbits = dists[i - bestloc]
            bitbuf |= code << bitcount
            bitcount += nbits
            i += best
        else:
            code, nbits = lit[data[i]]
            bitbuf |= code << bitcount
            bitcount += nbits
            i += 1
        if bitcount >= 64:
            nb = bitcount >> 3
            out += (bitbuf & ((1 << (nb * 8)) - 1)).to_bytes(nb, "little")
            bitbuf >>= nb * 8
            bitcount -= nb * 8
    for b in data[i:]:
        code, nbits = lit[b]
        bitbuf |= code << bitcount
        bitcount += nbits
    bitcount += 7  # end of block: symbol 256 is seven 0 bits
    nb = (bitcount + 7) >> 3  # pad to a byte boundary with 0 bits
    out += bitbuf.to_bytes(nb, "little")
    if len(out) > n + 2 + ((n + 32766) // 32767) * 5:  # stored blocks are smaller
        del out[2:]
        j = 0
        while j < n:
            blocklen = min(n - j, 32767)
            out += struct.pack("<BHH", 1 if n - j == blocklen else 0, blocklen, blocklen ^ 0xFFFF)
            out += data[j: j + blocklen]
            j += blocklen
    out += struct.pack(">I", zlib.adler32(data) & U32_MAX)
    return bytes(out)


# --------------------------------------------------------------------------------------------------------
# .npy image sources
# --------------------------------------------------------------------------------------------------------

def read_npy_image(
    path: str | Path,
    *,
    width: int | None = None,
    height: int | None = None,
    format: str | FormatInfo | None = None,  # noqa: A002 - the scenario's word
) -> tuple[tuple[int, ...], str, int]:
    """``(shape, dtype, payload offset)`` of a ``.npy`` image source, without reading the payload.

    The reference expects NHWC ``(1, height, width, components)`` (see the module notes). Given
    ``width``, ``height`` and ``format``, the shape and byte count are checked as the reference checks
    them (the dtype is not: only the number of bytes must match), with :class:`ImageFileError` otherwise.
    """
    name = str(path)
    try:
        header = read_header(path)
    except NpyFormatError as exc:
        raise ImageFileError(f"{name}: {exc}") from None
    except OSError as exc:
        raise ImageFileError(f"{name}: cannot open .npy file ({exc.strerror or exc})") from None
    shape = header.shape
    if width is not None or height is not None or format is not None:
        if width is None or height is None or format is None:
            raise TypeError("pass width, height and format together")
        fmt = format if isinstance(format, FormatInfo) else format_info(format)
        if len(shape) != 4:
            raise ImageFileError(
                f"{name}: image data must be 4-dimensional (1, H, W, C) for .npy sources, got {shape}"
            )
        if shape[0] != 1:
            raise ImageFileError(f"{name}: image batch dimension must be 1 for .npy sources, got {shape}")
        if header.fortran_order:
            raise ImageFileError(f"{name}: Fortran-ordered arrays are not supported for image sources")
        want = (1, height, width, fmt.components)
        if tuple(shape) != want:
            raise ImageFileError(f"{name}: shape {shape} does not match the image: expected {want} (1, H, W, C)")
        texel = fmt.npy_texel_bytes
        need = height * width * texel
        if header.nbytes != need:
            raise ImageFileError(
                f"{name}: {header.nbytes} bytes of {header.descr} data, a {width}x{height} {fmt.short_name} image "
                f"needs {need} ({texel} per texel)"
            )
    return shape, header.descr, header.data_offset
