"""Formats table, DDS / PNG / .npy image files: round trips, hostile files, and byte-for-byte comparison
with ARM's reference runner (its ``dds_utils``, ``png_utils`` and ``scenario-runner`` binaries)."""
from __future__ import annotations

import json
import struct
import subprocess
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.needs import module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference import reference_runner, requires_reference, run_reference
from vkcore.resources import formats as F
from vkcore.resources.formats import FORMATS, format_info, tensor_dtype
from vkcore.resources.imageio import (
    DDS_DATA_OFFSET, ImageFileError, dds_header, encode_png, image_extent, mip_level_sizes, read_dds,
    read_npy_image, read_png, write_dds, write_png,
)

# --------------------------------------------------------------------------------------------------------
# The specification's lists, copied here so the table is checked against them (not against itself).
# --------------------------------------------------------------------------------------------------------
# The image formats in the table's order: the older specification's 16 DDS formats, the two the current
# one added, then those without a DDS equivalent in the older one.
SPEC_IMAGE_ORDER = ("R8_SNORM R8G8_SINT R8G8_UNORM R8G8B8_SINT R32_SFLOAT R8G8B8A8_UNORM R8G8B8A8_SNORM R8G8B8_SNORM "
                    "R8G8B8A8_SINT R16G16B16A16_SFLOAT R32G32B32A32_SFLOAT R16G16_SFLOAT B10G11R11_UFLOAT_PACK32 "
                    "D32_SFLOAT_S8_UINT R8_UNORM R32_UINT R8G8_UINT B8G8R8A8_UNORM R16G16B16A16_UNORM R16G16B16A16_SNORM "
                    "R16G16B16A16_SINT R8_BOOL_ARM R8_UINT R8_SINT R16_UINT R16_SINT R32_SINT R64_SINT R16_SFLOAT").split()
# The current specification's list of image formats with a DDS equivalent (scenario-format-current.rst).
SPEC_DDS = ("R32G32B32A32_SFLOAT R16G16B16A16_SFLOAT R16G16B16A16_SINT R16G16_SFLOAT B10G11R11_UFLOAT_PACK32 "
            "D32_SFLOAT_S8_UINT R8G8B8A8_UNORM R8G8B8A8_SNORM R8G8B8_SNORM R8G8B8A8_SINT R8G8B8_SINT R8G8_UNORM "
            "R8G8_UINT R8G8_SINT R8_UNORM R8_SNORM R32_UINT R32_SFLOAT R16_SFLOAT R16_UINT B8G8R8A8_UNORM").split()
SPEC_TENSOR = {"R8_BOOL_ARM": "bool", "R8_UINT": "uint8", "R8_SINT": "int8", "R16_UINT": "uint16",
               "R16_SINT": "int16", "R32_UINT": "uint32", "R32_SINT": "int32", "R64_SINT": "int64",
               "R16_SFLOAT": "float16", "R32_SFLOAT": "float32", "R16_SFLOAT_FPENCODING_BFLOAT16_ARM": "uint16",
               "R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": "uint8", "R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM": "uint8"}
# VK_ARM_tensors formats the vulkan package does not declare (Khronos vulkan_core.h 1.4.317).
ARM_FORMAT_VALUES = {"VK_FORMAT_R8_BOOL_ARM": 1000460000, "VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM": 1000460001,
                     "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": 1000460002,
                     "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM": 1000460003}
# Microsoft's DXGI_FORMAT values (dxgiformat.h) for the specification's DDS formats; the two 3-channel
# formats use the reference runner's custom codes, D32S8 loads from D32_FLOAT_S8X24_UINT, B10G11R11 from
# R11G11B10_FLOAT (as the specification pairs them).
MS_DXGI = {"R8_SNORM": 63, "R8G8_SINT": 52, "R8G8_UNORM": 49, "R8G8B8_SINT": 134, "R32_SFLOAT": 41,
           "R8G8B8A8_UNORM": 28, "R8G8B8A8_SNORM": 31, "R8G8B8_SNORM": 133, "R8G8B8A8_SINT": 32,
           "R16G16B16A16_SFLOAT": 10, "R32G32B32A32_SFLOAT": 2, "R16G16_SFLOAT": 34,
           "B10G11R11_UFLOAT_PACK32": 26, "D32_SFLOAT_S8_UINT": 20, "R8_UNORM": 61, "R32_UINT": 42,
           "R16G16B16A16_SINT": 14, "R16_UINT": 57, "R16_SFLOAT": 54, "R8G8_UINT": 50, "B8G8R8A8_UNORM": 87}

BIN = reference_runner().parent if reference_runner() else None
DDS_FORMATS = [n for n in F.dds_formats()]
RNG_SEED = 20240611


def _random_texels(info: F.FormatInfo, width: int, height: int, rng: np.random.Generator) -> bytes:
    return rng.integers(0, 256, size=width * height * info.file_bytes, dtype=np.uint8).tobytes()


def _levels(info: F.FormatInfo, width: int, height: int, count: int, rng: np.random.Generator) -> list[bytes]:
    return [_random_texels(info, max(width >> i, 1), max(height >> i, 1), rng) for i in range(count)]


# --------------------------------------------------------------------------------------------------------
# The format table
# --------------------------------------------------------------------------------------------------------

def test_table_holds_exactly_the_specification_formats() -> None:
    assert F.image_formats() == tuple("VK_FORMAT_" + s for s in SPEC_IMAGE_ORDER)
    assert F.tensor_formats() == tuple("VK_FORMAT_" + s for s in SPEC_TENSOR)
    assert set(FORMATS) == {"VK_FORMAT_" + s for s in [*SPEC_IMAGE_ORDER, *SPEC_TENSOR]}
    assert {f.short_name for f in FORMATS.values() if f.spec_dds} == set(SPEC_DDS)


def test_vk_values_come_from_the_vulkan_package() -> None:
    vulkan = module("vulkan", "the vulkan package is not installed")
    for name, info in FORMATS.items():
        assert info.vk_value == getattr(vulkan, name, ARM_FORMAT_VALUES.get(name)), name
    assert FORMATS["VK_FORMAT_R8_BOOL_ARM"].vk_value == 1000460000
    assert not hasattr(vulkan, "VK_FORMAT_R8_BOOL_ARM")


def test_table_literals_match_the_vulkan_package() -> None:
    """The literal values (used where the vulkan package cannot be imported) are the package's."""
    vulkan = module("vulkan", "the vulkan package is not installed")
    for short, row in F._ROWS.items():
        assert row[0] == getattr(vulkan, "VK_FORMAT_" + short, ARM_FORMAT_VALUES.get("VK_FORMAT_" + short)), short


def test_dxgi_values_are_microsofts() -> None:
    for name, info in FORMATS.items():
        assert info.dxgi_format == MS_DXGI.get(info.short_name), name
    for short in SPEC_DDS:
        assert format_info(short).dxgi_format is not None
    assert F.DXGI["R11G11B10_FLOAT"] == 26 and F.DXGI["D32_FLOAT_S8X24_UINT"] == 20
    assert F.DXGI_NAMES[28] == "R8G8B8A8_UNORM"


@pytest.mark.parametrize("name", list(FORMATS))
def test_format_row_is_consistent(name: str) -> None:
    info = FORMATS[name]
    item = np.dtype(info.dtype).itemsize
    assert info.component_bytes == item
    if name in F.PAYLOAD_FORMATS:  # the reference's headers: <V2, <V1, |u1; compared as the floats they are
        from replay.results import DTYPES

        assert info.dtype in ("<V2", "<V1", "|u1") and info.compare_dtype in ("bfloat16", "float8e4m3", "float8e5m2")
        assert np.dtype(DTYPES[info.compare_dtype][0]).itemsize == item
        return
    assert info.dtype[0] in "<|" and (info.dtype[0] == "|") == (item == 1)
    if info.is_packed:
        assert info.components == 1 and info.block_bytes == item
    elif info.is_depth:
        assert info.block_bytes == 5 and info.file_bytes == 8 and info.dtype == "<f4" and info.is_stencil
    else:
        assert info.block_bytes == info.components * item
        assert np.dtype(info.dtype).name == info.compare_dtype
    # the reference's element size: the block size rounded up to a power of two
    assert info.file_bytes >= info.block_bytes and info.file_bytes & (info.file_bytes - 1) == 0
    assert info.file_bytes < 2 * info.block_bytes
    if info.dxgi_format is not None:
        assert F.file_texel_bytes(info.dxgi_format) == info.file_bytes
        assert F.format_for_dxgi(info.dxgi_format) is info
    assert format_info(info.short_name) is info and format_info(name) is info


def test_format_lookup_errors_list_known_names() -> None:
    with pytest.raises(KeyError) as exc:
        format_info("VK_FORMAT_R8G8B8A8_SRGB")
    assert "VK_FORMAT_R8G8B8A8_SRGB" in str(exc.value) and "VK_FORMAT_R32_SFLOAT" in str(exc.value)
    with pytest.raises(KeyError, match="not a tensor format"):
        tensor_dtype("VK_FORMAT_R8G8B8A8_UNORM")
    for short, kind in SPEC_TENSOR.items():
        if "VK_FORMAT_" + short not in F.PAYLOAD_FORMATS:  # those are written as the reference does: <V2, <V1, |u1
            assert np.dtype(tensor_dtype(short)).name == kind
    assert tensor_dtype("R8_BOOL_ARM") == "|b1"  # what the reference writes for bool tensors


def test_image_extent_reads_dims_as_n_w_h_d() -> None:
    assert image_extent([1, 640, 480, 1]) == (640, 480, 1)
    with pytest.raises(ValueError):
        image_extent([640, 480])


# --------------------------------------------------------------------------------------------------------
# DDS: round trips and header layout
# --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DDS_FORMATS)
@pytest.mark.parametrize("mips", [1, 3])
def test_dds_round_trip(tmp_path: Path, name: str, mips: int) -> None:
    info = FORMATS[name]
    rng = np.random.default_rng(RNG_SEED)
    width, height = 7, 5
    levels = _levels(info, width, height, mips, rng)
    path = tmp_path / "x.dds"
    write_dds(path, width, height, info.dxgi_format, levels)
    assert path.stat().st_size == DDS_DATA_OFFSET + sum(map(len, levels))
    img = read_dds(path, expected_width=width, expected_height=height)
    assert (img.width, img.height, img.mip_levels, img.array_size, img.depth) == (width, height, mips, 1, 1)
    assert img.dxgi_format == info.dxgi_format and img.format is info and img.texel_bytes == info.file_bytes
    assert img.levels == levels
    for i in range(mips):
        arr = img.to_array(i)
        w, h = img.level_extent(i)
        assert arr.shape == (h, w, info.components) and arr.dtype == np.dtype(info.dtype)
    if info.file_bytes == info.components * info.component_bytes:
        assert img.to_array(0).tobytes() == levels[0]


def test_dds_header_fields() -> None:
    head = dds_header(5, 3, 41)
    assert len(head) == DDS_DATA_OFFSET == 148
    magic, size, flags, height, width, pitch, depth, mips = struct.unpack_from("<4s7I", head)
    assert (magic, size, flags, height, width, pitch, depth, mips) == (b"DDS ", 124, 0x100F, 3, 5, 20, 1, 1)
    assert head[32:76] == bytes(44)
    assert struct.unpack_from("<2I4s5I", head, 76) == (32, 4, b"DX10", 0, 0, 0, 0, 0)
    assert struct.unpack_from("<5I", head, 108) == (0x1000, 0, 0, 0, 0)
    assert struct.unpack_from("<5I", head, 128) == (41, 3, 0, 1, 0)
    # R8G8B8 uses the reference's custom code and 4-byte texels (pitch 4 * width)
    assert struct.unpack_from("<I", dds_header(5, 3, 134), 20)[0] == 20
    many = dds_header(8, 8, 41, mip_levels=4)
    assert struct.unpack_from("<I", many, 8)[0] == 0x2100F and struct.unpack_from("<I", many, 28)[0] == 4
    assert struct.unpack_from("<I", many, 108)[0] == 0x401008


def test_write_dds_checks_level_sizes(tmp_path: Path) -> None:
    with pytest.raises(ImageFileError, match="mip level 1 holds"):
        write_dds(tmp_path / "x.dds", 4, 4, 41, [bytes(64), bytes(15)])
    with pytest.raises(ImageFileError, match="unknown DXGI format 999"):
        write_dds(tmp_path / "x.dds", 4, 4, 999, [bytes(64)])
    with pytest.raises(ImageFileError, match="mip levels is out of range"):
        write_dds(tmp_path / "x.dds", 2, 2, 41, [bytes(16), bytes(4), bytes(4)])
    write_dds(tmp_path / "y.dds", 4, 4, 999, [np.zeros((4, 4), np.float32)], texel_bytes=4)
    assert not (tmp_path / "x.dds").exists() and (tmp_path / "y.dds").stat().st_size == 148 + 64
    assert [p.name for p in tmp_path.iterdir()] == ["y.dds"]  # no temporary files left behind


# --------------------------------------------------------------------------------------------------------
# DDS: hostile files
# --------------------------------------------------------------------------------------------------------

def _valid_dds(width: int = 6, height: int = 4, dxgi: int = 41, mips: int = 1) -> bytearray:
    texel = F.file_texel_bytes(dxgi)
    return bytearray(dds_header(width, height, dxgi, texel, mips)
                     + bytes(sum(mip_level_sizes(width, height, texel, mips))))


def _patch(blob: bytearray, offset: int, value: int) -> bytearray:
    out = bytearray(blob)
    struct.pack_into("<I", out, offset, value)
    return out


HOSTILE = {
    "empty": (bytearray(), "bad magic"),
    "magic only": (bytearray(b"DDS "), "truncated DDS header"),
    "not dds": (bytearray(b"\x89PNG\r\n\x1a\n" + bytes(200)), "bad magic"),
    "header cut": (_valid_dds()[:100], "truncated DDS header"),
    "dx10 cut": (_valid_dds()[:140], "truncated DDS DX10 header"),
    "pixels cut": (_valid_dds()[:-1], "truncated"),
    "trailing": (_valid_dds() + b"x", "trailing data"),
    "header size": (_patch(_valid_dds(), 4, 120), "header size 120"),
    "flags": (_patch(_valid_dds(), 8, 0x1), "flags"),
    "pixel format size": (_patch(_valid_dds(), 76, 0), "pixel format size"),
    "caps": (_patch(_valid_dds(), 108, 0), "caps"),
    "legacy DXT1": (_patch(_valid_dds(), 84, int.from_bytes(b"DXT1", "little")), "legacy DDS header"),
    "legacy rgb": (_patch(_patch(_valid_dds(), 84, 0), 80, 0x40), "legacy DDS header"),
    "3d": (_patch(_valid_dds(), 132, 4), "only 2D"),
    "cube": (_patch(_valid_dds(), 136, 4), "cube-map"),
    "array": (_patch(_valid_dds(), 140, 2), "texture arrays"),
    "unknown dxgi": (_patch(_valid_dds(), 128, 11), "unknown or unsupported DXGI format 11"),
    "zero width": (_patch(_valid_dds(), 16, 0), "zero dimension"),
    "huge width": (_patch(_valid_dds(), 16, 0xFFFFFFFF), "truncated"),
    "huge both": (_patch(_patch(_valid_dds(), 16, 0xFFFFFFFF), 12, 0xFFFFFFFF), "truncated"),
    "huge mips": (_patch(_valid_dds(), 28, 0xFFFFFFFF), "mip levels is impossible"),
    "too many mips": (_patch(_valid_dds(), 28, 4), "mip levels is impossible"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_dds_is_refused_quickly_without_allocating(tmp_path: Path, case: str) -> None:
    blob, message = HOSTILE[case]
    path = tmp_path / "bad.dds"
    path.write_bytes(bytes(blob))
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ImageFileError, match=message) as exc:
            read_dds(path)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(path) in str(exc.value)
    assert elapsed < 0.5 and peak < 1 << 20


def test_unreadable_dds_paths(tmp_path: Path) -> None:
    with pytest.raises(ImageFileError, match="cannot open"):
        read_dds(tmp_path / "missing.dds")
    with pytest.raises(ImageFileError, match="cannot open"):
        read_dds(tmp_path)
    path = tmp_path / "ok.dds"
    path.write_bytes(bytes(_valid_dds()))
    with pytest.raises(ImageFileError, match="height does not match"):
        read_dds(path, expected_width=6, expected_height=5)
    with pytest.raises(ImageFileError, match="width does not match"):
        read_dds(path, expected_width=4, expected_height=4)


def test_reader_accepts_what_the_reference_ignores(tmp_path: Path) -> None:
    """mipMapCount 0 is one level; pitch, depth, pixel-format flags and the mip-count flag are not consulted."""
    for offset, value in ((28, 0), (20, 999), (24, 7), (80, 0), (8, 0x1007)):
        path = tmp_path / "x.dds"
        path.write_bytes(bytes(_patch(_valid_dds(), offset, value)))
        img = read_dds(path)
        assert (img.width, img.height, img.mip_levels, len(img.levels[0])) == (6, 4, 1, 96)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, DDS_DATA_OFFSET - 1), st.integers(0, 255)), max_size=6),
       cut=st.integers(0, 400))
def test_fuzzed_dds_headers_either_parse_consistently_or_fail_cleanly(tmp_path: Path, edits, cut) -> None:
    blob = _valid_dds(6, 4, 41, 3)
    for offset, byte in edits:
        blob[offset] = byte
    blob = blob[: max(len(blob) - cut, 0)] if cut < 200 else blob
    path = tmp_path / "fuzz.dds"
    path.write_bytes(bytes(blob))
    try:
        img = read_dds(path)
    except ImageFileError:
        return
    assert DDS_DATA_OFFSET + sum(map(len, img.levels)) == len(blob)
    assert [len(x) for x in img.levels] == mip_level_sizes(img.width, img.height, img.texel_bytes, img.mip_levels)


# --------------------------------------------------------------------------------------------------------
# DDS: byte-identical with the reference's tools
# --------------------------------------------------------------------------------------------------------

def _dds_utils(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "dds_utils"), *args], capture_output=True, text=True, timeout=60)


# the DXGI formats dds_utils 0.11.0 can generate (its own list is shorter than the runner's)
DDS_UTILS_FORMATS = [n for n in DDS_FORMATS if F.DXGI_NAMES[FORMATS[n].dxgi_format] in (
    "R16_FLOAT", "R16G16_FLOAT", "R8G8_SINT", "R32_FLOAT", "R16G16B16A16_FLOAT", "R11G11B10_FLOAT",
    "D32_FLOAT_S8X24_UINT", "R8G8B8A8_SINT", "R32G32B32A32_FLOAT", "R32_UINT", "R8G8B8A8_UNORM", "R16_UINT")]


@requires_reference
@pytest.mark.parametrize("name", DDS_UTILS_FORMATS)
def test_dds_bytes_match_dds_utils(tmp_path: Path, name: str) -> None:
    """``dds_utils --action generate`` writes the reference's header (and zeros, or random fp16)."""
    info = FORMATS[name]
    dxgi_name = "DXGI_FORMAT_" + F.DXGI_NAMES[info.dxgi_format]
    width, height = 7, 3
    ref = tmp_path / "ref.dds"
    dtype = "fp16" if info.dtype == "<f2" else "int"
    proc = _dds_utils("--action", "generate", "--width", str(width), "--height", str(height), "--element-size",
                      str(info.file_bytes), "--element-dtype", dtype, "--format", dxgi_name, "--output", str(ref))
    if proc.returncode != 0:
        assert "Unsupported format" in proc.stderr
        pytest.skip(f"dds_utils cannot generate {dxgi_name}")
    blob = ref.read_bytes()
    ours = tmp_path / "ours.dds"
    write_dds(ours, width, height, info.dxgi_format, [blob[DDS_DATA_OFFSET:]])
    assert ours.read_bytes() == blob
    img = read_dds(ref)
    assert img.levels == [blob[DDS_DATA_OFFSET:]] and img.format is info
    # and the reference's own comparison tool agrees that ours is the same file
    proc = _dds_utils("--action", "compare", "--input", str(ref), "--output", str(ours), "--element-dtype", dtype)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _image_scenario(root: Path, images: list[dict]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    doc = {"resources": [{"image": {"shader_access": "readonly", **body}} for body in images], "commands": []}
    path = root / "scenario.json"
    path.write_text(json.dumps(doc))
    return path


def _run_images(root: Path, images: list[dict]) -> Path:
    scenario = _image_scenario(root, images)
    proc = run_reference(scenario, root / "out")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return root / "out"


# Formats the reference can both load and store as DDS on the CPU driver (lavapipe has no R8G8B8
# images; a D32_SFLOAT_S8_UINT image cannot be written back: "Unknown VkFormat: VK_FORMAT_D32_SFLOAT").
WRITABLE = [n for n in DDS_FORMATS if not FORMATS[n].is_depth and FORMATS[n].block_bytes == FORMATS[n].file_bytes]


@pytest.mark.device
@requires_reference
def test_reference_rewrites_our_dds_files_byte_for_byte(tmp_path: Path) -> None:
    """Each format: our DDS file is the reference's ``src``; the file it writes back is ours, byte for byte."""
    rng = np.random.default_rng(RNG_SEED)
    width, height = 7, 5
    images, expected = [], {}
    for name in WRITABLE:
        info = FORMATS[name]
        data = _random_texels(info, width, height, rng)
        short = info.short_name
        write_dds(tmp_path / "in" / f"{short}.dds", width, height, info.dxgi_format, [data])
        expected[short] = (tmp_path / "in" / f"{short}.dds").read_bytes()
        images.append({"uid": short, "dims": [1, width, height, 1], "format": name,
                       "src": f"in/{short}.dds", "dst": f"{short}.dds"})
    out = _run_images(tmp_path, images)
    for short, blob in expected.items():
        assert (out / f"{short}.dds").read_bytes() == blob, short


@pytest.mark.device
@requires_reference
def test_reference_writes_our_bytes_from_npy_sources(tmp_path: Path) -> None:
    """NHWC ``.npy`` sources (shape (1, H, W, C)) through the reference give the DDS files write_dds gives."""
    rng = np.random.default_rng(RNG_SEED + 1)
    width, height = 6, 3
    images, arrays = [], {}
    for name in WRITABLE:
        info = FORMATS[name]
        if info.is_packed:
            continue  # a packed texel is not C whole components: no .npy source is possible
        arr = np.frombuffer(_random_texels(info, width, height, rng), dtype=info.dtype).reshape(
            1, height, width, info.components)
        (tmp_path / "in").mkdir(exist_ok=True)
        src = tmp_path / "in" / f"{info.short_name}.npy"
        np.save(src, arr)
        shape, _, _ = read_npy_image(src, width=width, height=height, format=info)
        assert shape == (1, height, width, info.components)
        arrays[info.short_name] = arr
        images.append({"uid": info.short_name, "dims": [1, width, height, 1], "format": name,
                       "src": f"in/{info.short_name}.npy", "dst": f"{info.short_name}.dds"})
    out = _run_images(tmp_path, images)
    for short, arr in arrays.items():
        ours = tmp_path / f"ours_{short}.dds"
        write_dds(ours, width, height, format_info(short).dxgi_format, [arr.tobytes()])
        assert (out / f"{short}.dds").read_bytes() == ours.read_bytes(), short
        np.testing.assert_array_equal(read_dds(ours).to_array(0), arr[0])


@pytest.mark.device
@pytest.mark.reference
@requires_reference
def test_reference_dims_are_width_then_height(tmp_path: Path) -> None:
    """A 5-wide, 3-high DDS loads into dims [1, 5, 3, 1]; [1, 3, 5, 1] is refused on its height."""
    data = np.arange(15, dtype=np.float32).tobytes()
    write_dds(tmp_path / "a" / "in.dds", 5, 3, 41, [data])
    out = _run_images(tmp_path / "a", [{"uid": "i", "dims": [1, 5, 3, 1], "format": "VK_FORMAT_R32_SFLOAT",
                                        "src": "in.dds", "dst": "out.dds"}])
    assert (out / "out.dds").read_bytes() == (tmp_path / "a" / "in.dds").read_bytes()
    write_dds(tmp_path / "b" / "in.dds", 5, 3, 41, [data])
    proc = run_reference(_image_scenario(tmp_path / "b", [{"uid": "i", "dims": [1, 3, 5, 1],
                                                          "format": "VK_FORMAT_R32_SFLOAT", "src": "in.dds"}]),
                         tmp_path / "b" / "out")
    assert proc.returncode != 0
    assert "height does not match that in the scenario file: 3 vs 5" in proc.stdout + proc.stderr


@pytest.mark.device
@requires_reference
def test_reference_loads_mips_and_writes_level_zero_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(RNG_SEED + 2)
    info = format_info("R32_SFLOAT")
    levels = _levels(info, 6, 4, 3, rng)
    write_dds(tmp_path / "in.dds", 6, 4, 41, levels)
    out = _run_images(tmp_path, [{"uid": "i", "dims": [1, 6, 4, 1], "format": info.name, "mips": 3,
                                  "src": "in.dds", "dst": "out.dds"}])
    img = read_dds(out / "out.dds")
    assert img.mip_levels == 1 and img.levels == levels[:1]
    expected = tmp_path / "expected.dds"
    write_dds(expected, 6, 4, 41, levels[:1])
    assert (out / "out.dds").read_bytes() == expected.read_bytes()


@pytest.mark.device
@pytest.mark.reference
@requires_reference
def test_reference_loads_our_depth_stencil_files(tmp_path: Path) -> None:
    """D32_FLOAT_S8X24_UINT: 8-byte texels, depth first; the reference keeps the depth, warns about stencil."""
    texels = np.zeros((4, 6, 2), np.uint32)
    texels[..., 0] = np.float32(0.5).view(np.uint32)
    texels[0, 0, 1] = 7  # a stencil byte
    write_dds(tmp_path / "in.dds", 6, 4, 20, [texels.tobytes()])
    img = read_dds(tmp_path / "in.dds")
    assert img.format is format_info("D32_SFLOAT_S8_UINT") and (img.to_array() == 0.5).all()
    proc = run_reference(_image_scenario(tmp_path, [{"uid": "d", "dims": [1, 6, 4, 1],
                                                     "format": "VK_FORMAT_D32_SFLOAT_S8_UINT", "src": "in.dds"}]),
                         tmp_path / "out")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Ignoring stencil data" in proc.stdout + proc.stderr


@pytest.mark.reference
@requires_reference
@pytest.mark.parametrize("case", ["pixels cut", "trailing", "legacy DXT1", "cube"])
def test_reference_refuses_what_we_refuse(tmp_path: Path, case: str) -> None:
    blob, _ = HOSTILE[case]
    (tmp_path / "in.dds").write_bytes(bytes(blob))
    with pytest.raises(ImageFileError):
        read_dds(tmp_path / "in.dds")
    image = {"uid": "i", "dims": [1, 6, 4, 1], "format": "VK_FORMAT_R32_SFLOAT", "src": "in.dds"}
    proc = run_reference(_image_scenario(tmp_path, [image]), tmp_path / "out")
    assert proc.returncode != 0


# --------------------------------------------------------------------------------------------------------
# PNG
# --------------------------------------------------------------------------------------------------------

def _test_images() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(RNG_SEED + 3)
    y, x = np.mgrid[0:40, 0:56]
    smooth = np.sin(x / 7.0) * 60 + np.cos(y / 5.0) * 60 + 128
    return {
        "noise": rng.integers(0, 256, (5, 7, 4), dtype=np.uint8),  # stored deflate blocks
        "gradient": np.stack([x * 4, y * 5, (x + y) * 2, np.full_like(x, 255)], -1).astype(np.uint8),
        "smooth": np.stack([smooth, smooth / 2, 255 - smooth, 200 + rng.integers(0, 3, x.shape)], -1)
        .clip(0, 255).astype(np.uint8),
        "tiled": np.tile(rng.integers(0, 256, (8, 8, 4), dtype=np.uint8), (9, 30, 1)),  # long matches, full chains
        "large": np.stack([np.kron(smooth, np.ones((4, 3))), np.kron(255 - smooth, np.ones((4, 3))),
                           rng.integers(0, 2, (160, 168)) * 40, np.full((160, 168), 255)], -1)
        .clip(0, 255).astype(np.uint8),  # 107 KB: distances beyond the 32 KiB window
        "one pixel": np.array([[[1, 2, 3, 4]]], dtype=np.uint8),
        "one row": rng.integers(0, 3, (1, 300, 4), dtype=np.uint8),
    }


@pytest.mark.parametrize("name", list(_test_images()))
@pytest.mark.parametrize("exact", [True, False])
def test_png_round_trip(tmp_path: Path, name: str, exact: bool) -> None:
    img = _test_images()[name]
    h, w, _ = img.shape
    write_png(tmp_path / "x.png", w, h, img.tobytes(), exact=exact)
    assert read_png(tmp_path / "x.png") == (w, h, img.tobytes())
    zlib.decompress((tmp_path / "x.png").read_bytes()[41:-16])  # the IDAT data: a complete zlib stream
    assert [p.name for p in tmp_path.iterdir()] == ["x.png"]


@pytest.mark.device
@requires_reference
def test_png_bytes_match_the_reference_runner(tmp_path: Path) -> None:
    """R8G8B8A8_UNORM images written to PNG by the reference (stb_image_write) are encode_png's bytes."""
    images, arrays = [], {}
    for i, (name, img) in enumerate(_test_images().items()):
        h, w, _ = img.shape
        np.save(tmp_path / f"in{i}.npy", img[None])
        images.append({"uid": f"i{i}", "dims": [1, w, h, 1], "format": "VK_FORMAT_R8G8B8A8_UNORM",
                       "src": f"in{i}.npy", "dst": f"out{i}.png"})
        arrays[i] = img
    out = _run_images(tmp_path, images)
    for i, img in arrays.items():
        h, w, _ = img.shape
        assert encode_png(w, h, img) == (out / f"out{i}.png").read_bytes(), list(_test_images())[i]


@requires_reference
def test_png_bytes_match_png_utils(tmp_path: Path) -> None:
    ref = tmp_path / "ref.png"
    proc = subprocess.run([str(BIN / "png_utils"), "--action", "generate", "--width", "9", "--height", "4",
                           "--output", str(ref)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    blob = ref.read_bytes()
    # png_utils 0.11.0 passes the sizes swapped: take them from the file's IHDR
    w, h = struct.unpack_from(">II", blob, 16)
    assert {w, h} == {9, 4}
    assert encode_png(w, h, bytes(w * h * 4)) == blob


def _raw_png(width: int, height: int, bit_depth: int, color_type: int, rows: list[bytes]) -> bytes:
    """A minimal PNG (filter 0 rows, zlib) of any bit depth and colour type Pillow cannot write."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    idat = zlib.compress(b"".join(b"\x00" + r for r in rows))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _png_variants(root: Path) -> dict[str, Path]:
    from PIL import Image

    rng = np.random.default_rng(RNG_SEED + 4)
    rgba = rng.integers(0, 256, (6, 5, 4), dtype=np.uint8)
    out: dict[str, Path] = {}

    def save(name: str, img: "Image.Image", **kw) -> None:
        out[name] = root / f"{name}.png"
        img.save(out[name], **kw)

    save("rgba", Image.fromarray(rgba, "RGBA"))
    save("rgb", Image.fromarray(rgba[..., :3].copy(), "RGB"))
    save("rgb_trns", Image.fromarray(rgba[..., :3].copy(), "RGB"), transparency=tuple(int(v) for v in rgba[0, 0, :3]))
    save("grey", Image.fromarray(rgba[..., 0].copy(), "L"))
    save("grey_trns", Image.fromarray(rgba[..., 0].copy(), "L"), transparency=int(rgba[0, 0, 0]))
    save("grey_alpha", Image.fromarray(rgba[..., :2].copy(), "LA"))
    pal = Image.fromarray(rgba[..., :3].copy(), "RGB").quantize(7)
    save("palette", pal)
    save("palette_trns", pal, transparency=2)
    save("bilevel", Image.fromarray(rgba[..., 0] > 128).convert("1"))
    save("grey16", Image.fromarray((rng.integers(0, 65536, (6, 5))).astype(np.uint16)))
    raw = {
        "rgb16": (16, 2, rng.integers(0, 256, (4, 3 * 6 * 2), dtype=np.uint8)),
        "rgba16": (16, 6, rng.integers(0, 256, (4, 4 * 6 * 2), dtype=np.uint8)),
        "grey_alpha16": (16, 4, rng.integers(0, 256, (4, 2 * 6 * 2), dtype=np.uint8)),
        "grey2": (2, 0, rng.integers(0, 256, (4, 2), dtype=np.uint8)),  # 8 pixels a row in 2 bytes
        "grey4": (4, 0, rng.integers(0, 256, (4, 4), dtype=np.uint8)),
    }
    for name, (depth, ctype, rows) in raw.items():
        width = 8 if depth < 8 else 6
        out[name] = root / f"{name}.png"
        out[name].write_bytes(_raw_png(width, 4, depth, ctype, [r.tobytes() for r in rows]))
    return out


@requires_reference
def test_png_decoding_matches_png_utils(tmp_path: Path) -> None:
    """Every PNG kind decodes to the RGBA bytes the reference (stb_image, 4 channels) gets."""
    for name, path in _png_variants(tmp_path).items():
        npy = tmp_path / f"{name}.npy"
        command = [str(BIN / "png_utils"), "--action", "to_npy", "--input", str(path), "--output", str(npy)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (name, proc.stderr)
        ref = np.load(npy)
        width, height, rgba = read_png(path)
        assert ref.shape == (1, height, width, 4), name
        assert rgba == ref.tobytes(), name


def test_png_decoding_without_the_reference(tmp_path: Path) -> None:
    paths = _png_variants(tmp_path)
    w, h, rgba = read_png(paths["grey_alpha"])
    px = np.frombuffer(rgba, np.uint8).reshape(h, w, 4)
    assert (px[..., 0] == px[..., 1]).all() and (px[..., 1] == px[..., 2]).all()
    w, h, rgba = read_png(paths["rgb"])
    assert (np.frombuffer(rgba, np.uint8).reshape(h, w, 4)[..., 3] == 255).all()
    w, h, rgba = read_png(paths["grey16"])
    from PIL import Image

    with Image.open(paths["grey16"]) as im:
        high = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
    assert (np.frombuffer(rgba, np.uint8).reshape(h, w, 4)[..., 0] == high).all()


def test_hostile_png_is_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.png"
    huge.write_bytes(_raw_png(100000, 100000, 8, 6, [b"\x00" * 4]))  # the IDAT is far too short anyway
    tracemalloc.start()
    try:
        with pytest.raises(ImageFileError, match="exceed the limit"):
            read_png(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    wide = tmp_path / "wide.png"
    wide.write_bytes(_raw_png(9000, 1, 8, 6, [bytes(9000 * 4)]))
    with pytest.raises(ImageFileError, match="exceed the limit"):
        read_png(wide)
    good = tmp_path / "good.png"
    write_png(good, 3, 2, bytes(24))
    blob = good.read_bytes()
    (tmp_path / "cut.png").write_bytes(blob[:-30])
    with pytest.raises(ImageFileError):
        read_png(tmp_path / "cut.png")
    (tmp_path / "junk.png").write_bytes(b"not a png at all")
    with pytest.raises(ImageFileError, match="not a PNG"):
        read_png(tmp_path / "junk.png")
    with pytest.raises(ImageFileError, match="cannot open"):
        read_png(tmp_path / "missing.png")
    with pytest.raises(ImageFileError, match="expects 2x3"):
        read_png(good, expected_width=2, expected_height=3)
    with pytest.raises(ImageFileError, match="needs 24"):
        write_png(tmp_path / "x.png", 3, 2, bytes(23))
    with pytest.raises(ImageFileError, match="out of range"):
        encode_png(0, 2, b"")


# --------------------------------------------------------------------------------------------------------
# .npy image sources
# --------------------------------------------------------------------------------------------------------

def test_npy_image_header(tmp_path: Path) -> None:
    arr = np.zeros((1, 3, 5, 4), np.uint8)
    np.save(tmp_path / "a.npy", arr)
    shape, descr, offset = read_npy_image(tmp_path / "a.npy")
    assert (shape, descr, offset) == ((1, 3, 5, 4), "|u1", 128)
    assert read_npy_image(tmp_path / "a.npy", width=5, height=3, format="VK_FORMAT_R8G8B8A8_UNORM")[0] == (1, 3, 5, 4)
    # the reference compares bytes, not dtypes: 4 bytes a texel as (1, H, W, 1) float32 is an R32_UINT image
    np.save(tmp_path / "f.npy", np.zeros((1, 3, 5, 1), np.float32))
    read_npy_image(tmp_path / "f.npy", width=5, height=3, format="R32_UINT")
    with pytest.raises(ImageFileError, match=r"expected \(1, 5, 3, 4\)"):
        read_npy_image(tmp_path / "a.npy", width=3, height=5, format="R8G8B8A8_UNORM")
    with pytest.raises(ImageFileError, match="needs 60"):
        np.save(tmp_path / "b.npy", np.zeros((1, 3, 5, 4), np.uint16))
        read_npy_image(tmp_path / "b.npy", width=5, height=3, format="R8G8B8A8_UNORM")
    with pytest.raises(ImageFileError, match="4-dimensional"):
        np.save(tmp_path / "c.npy", np.zeros((3, 5, 4), np.uint8))
        read_npy_image(tmp_path / "c.npy", width=5, height=3, format="R8G8B8A8_UNORM")
    with pytest.raises(ImageFileError, match="batch dimension"):
        np.save(tmp_path / "d.npy", np.zeros((2, 3, 5, 4), np.uint8))
        read_npy_image(tmp_path / "d.npy", width=5, height=3, format="R8G8B8A8_UNORM")
    # R8G8B8: 3 components but 4 bytes a texel in files: no .npy can satisfy the reference
    np.save(tmp_path / "e.npy", np.zeros((1, 3, 5, 3), np.int8))
    with pytest.raises(ImageFileError, match="needs 60"):
        read_npy_image(tmp_path / "e.npy", width=5, height=3, format="R8G8B8_SINT")
    # the depth-stencil format is created as D32_SFLOAT: a (1, H, W, 1) float32 source
    np.save(tmp_path / "z.npy", np.zeros((1, 3, 5, 1), np.float32))
    read_npy_image(tmp_path / "z.npy", width=5, height=3, format="D32_SFLOAT_S8_UINT")
    (tmp_path / "g.npy").write_bytes(b"junk")
    with pytest.raises(ImageFileError, match="g.npy"):
        read_npy_image(tmp_path / "g.npy")
    with pytest.raises(TypeError):
        read_npy_image(tmp_path / "a.npy", width=5)
