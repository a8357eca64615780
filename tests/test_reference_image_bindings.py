"""Image bindings, differentially: ``vkcap run --validate`` against ARM's reference ``scenario-runner`` and numpy.

Every case in :data:`CASES` builds one scenario; :func:`test_vkcap_matches_reference_and_numpy` runs the
reference on it first and checks the reference's outputs against an independent numpy expectation, then
runs vkcap and checks that it wrote the same files, byte for byte. Exact where the GPU's answer is exact
(texelFetch / imageLoad / imageStore copies, texture() with NEAREST filtering at texel centres); within a
small tolerance for LINEAR filtering and generated mip levels.

What the reference (ai-ml-sdk-scenario-runner 0.11, lavapipe) needs, so that the cases are valid for both:
it picks an image's descriptor type from the resource's ``shader_access``, not from the shader:
``readonly``/``readwrite`` -> combined image sampler, ``writeonly``/``image_read`` -> storage image, and a
binding's ``descriptor_type: VK_DESCRIPTOR_TYPE_STORAGE_IMAGE`` forces storage. Where that contradicts the
shader its pipeline layout is invalid (the validation layer reports VUID-VkComputePipelineCreateInfo-layout-
00703) and on lavapipe it crashes (SIGSEGV/SIGBUS, exit -11/-7); vkcap reads the type from the shader. Those scenarios are
in :data:`REFERENCE_CRASHES` (the reference's crash asserted, vkcap's results checked against numpy).
The differential cases keep ``min_filter == mag_filter``: the reference swaps the two (it passes
``min_filter`` as ``VkSamplerCreateInfo.magFilter``), vkcap does not;
:func:`test_min_and_mag_filter_are_not_swapped` documents the difference.

Other differences, recorded as assertions of what each runner does: generated mips of an integer format
(:func:`test_generated_mips_of_an_integer_format`: the reference's level 1 is all zeros); formats lavapipe
cannot serve (``R8G8B8_*``, generated ``B10G11R11`` mips: both refuse).

Images are ``[1, W, H, 1]`` (width first) and tiny, so that the module runs in seconds (about 20 s with
``-n 2`` on two cores).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import vulkan as vk
import pytest

from tests.builders import READ_TENSOR, ScenarioBuilder, image_pattern, load_output, vkcap
from tests.reference import requires_reference, run_reference
from vkcore.resources.formats import dds_formats
from vkcore.resources.imageio import encode_png, read_dds, write_dds, write_png

pytestmark = requires_reference

W, H = 8, 4
SEED = 20250607


# ------------------------------------------------------------------------------------------ scenario helpers


def image(b: ScenarioBuilder, uid: str, fmt: str, **fields: Any) -> None:
    """An image resource (``fmt`` without its ``VK_FORMAT_`` prefix), ``dims`` ``[1, w, h, 1]`` (``w``, ``h``
    fields, default W x H), ``shader_access`` readonly unless given."""
    w, h = int(fields.pop("w", W)), int(fields.pop("h", H))
    b.resources.append({"image": {"uid": uid, "dims": [1, w, h, 1], "format": f"VK_FORMAT_{fmt}",
                                  "shader_access": fields.pop("shader_access", "readonly"), **fields}})


def bind(s: int, i: int, resource: str, **extra: Any) -> dict[str, Any]:
    return {"set": s, "id": i, "resource_ref": resource, **extra}


STORAGE = {"descriptor_type": "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE"}


def dispatch(b: ScenarioBuilder, shader: str, bindings: Sequence[dict[str, Any] | tuple[int, int, str]],
             grid: tuple[int, int]) -> None:
    b.commands.append({"dispatch_compute": {
        "shader_ref": shader, "rangeND": [grid[0], grid[1], 1],
        "bindings": [x if isinstance(x, dict) else bind(*x) for x in bindings]}})


def glsl(body: str, *decls: str) -> str:
    """A compute shader, one invocation per work item, ``p`` its 2-D id."""
    return "#version 450\nlayout(local_size_x = 1) in;\n" + "\n".join(decls) + (
        "\nvoid main() {\n    ivec2 p = ivec2(gl_GlobalInvocationID.xy);\n    " + body + "\n}\n")


# ------------------------------------------------------------------------------------------------ expectations


@dataclass
class Expect:
    """What one output file must hold.

    ``dtype`` given: a buffer (flat int8 .npy) or a DDS level 0, viewed as ``dtype`` and shaped as ``want``.
    ``dtype`` None: a tensor ``.npy`` (loaded as is) or, for ``.png``, RGBA8 pixels the file must encode
    exactly as :func:`encode_png` does. ``atol`` 0: exact; else ``assert_allclose(atol=atol)``.
    """

    want: np.ndarray
    dtype: Any = None
    atol: float | np.ndarray = 0.0

    def check(self, path: Path) -> None:
        if path.suffix == ".png":
            h, w = self.want.shape[:2]
            assert path.read_bytes() == encode_png(w, h, self.want), f"{path.name}: PNG differs from numpy's pixels"
            return
        if path.suffix == ".dds":
            dds = read_dds(path)
            assert (dds.height, dds.width) == self.want.shape[:2] and dds.mip_levels == 1
            got = np.frombuffer(dds.levels[0], self.dtype).reshape(self.want.shape)
        elif self.dtype is None:
            got = np.load(path)
            assert (got.dtype, got.shape) == (self.want.dtype, self.want.shape), (got.dtype, got.shape)
        else:
            got = load_output(path, self.dtype).reshape(self.want.shape)
        if np.ndim(self.atol):  # one tolerance per element (or per broadcast row)
            err = np.abs(got.astype(np.float64) - self.want)
            worst = np.unravel_index(np.argmax(err - self.atol), err.shape)
            allowed = np.broadcast_to(self.atol, err.shape)[worst]
            assert np.all(err <= self.atol), f"{path.name}: off by {err[worst]} at {worst}, allowed {allowed}"
        elif self.atol:
            np.testing.assert_allclose(got, self.want, rtol=0, atol=float(self.atol), err_msg=path.name)
        else:
            np.testing.assert_array_equal(got, self.want, err_msg=path.name)


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, *name.encode()])


# ---------------------------------------------------------------------------------- formats as numpy sees them


@dataclass(frozen=True)
class Fmt:
    """One image format: its DDS code, file texel as numpy sees it, and how a shader reads it back."""

    name: str  # without VK_FORMAT_
    dxgi: int
    dtype: str  # one component (or the packed word) in the file
    comps: int
    kind: str  # unorm | snorm | sint | uint | float | b10g11r11 | bgra | depth
    glsl_qualifier: str = ""  # the storage-image layout qualifier, where GLSL has one

    @property
    def prefix(self) -> str:  # sampler / image type prefix
        return {"sint": "i", "uint": "u"}.get(self.kind, "")

    @property
    def vec(self) -> str:
        return self.prefix + "vec4"

    @property
    def atol(self) -> float:
        """Normalized texels convert within a few ulps of x / 255 (lavapipe multiplies by 1 / 255): 1e-6;
        integer and float texels are exact."""
        return 1e-6 if self.kind in ("unorm", "snorm", "bgra") else 0.0

    @property
    def out_dtype(self) -> str:
        return {"sint": "<i4", "uint": "<u4"}.get(self.kind, "<f4")

    def texels(self, rng: np.random.Generator, w: int = W, h: int = H) -> np.ndarray:
        """Random file texels, shape (h, w, comps) of ``dtype``: full range for integers, finite normal floats."""
        dt = np.dtype(self.dtype)
        shape = (h, w, self.comps)
        if self.kind == "b10g11r11":  # exponents 1..30 (no denormals, inf or NaN), random mantissas
            r = rng.integers(1, 31, shape[:2]) << 6 | rng.integers(0, 64, shape[:2])
            g = rng.integers(1, 31, shape[:2]) << 6 | rng.integers(0, 64, shape[:2])
            bb = rng.integers(1, 31, shape[:2]) << 5 | rng.integers(0, 32, shape[:2])
            return (r | g << 11 | bb << 22).astype(np.uint32).reshape(shape)
        if self.kind == "depth":  # float depth, then the stencil byte and 3 padding bytes (8-byte file texel)
            depth = rng.random((h, w, 1), dtype=np.float32)
            return np.concatenate([depth.view(np.uint8), np.zeros((h, w, 4), np.uint8)], axis=-1)
        if dt.kind == "f":
            return (rng.uniform(-1000, 1000, shape) if dt.itemsize == 2 else rng.standard_normal(shape) * 1e4).astype(dt)
        info = np.iinfo(dt)
        out = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)
        out.flat[:2] = info.min, info.max  # the extremes always (SNORM -128 loads as -1.0, like -127)
        return out

    def fetched(self, texels: np.ndarray) -> np.ndarray:
        """What texelFetch returns for ``texels``: (h, w, 4) of ``out_dtype``, missing G, B = 0 and A = 1."""
        h, w = texels.shape[:2]
        if self.kind == "depth":
            rgba = np.zeros((h, w, 4), np.float32)
            rgba[..., 0] = texels[..., :4].copy().view(np.float32)[..., 0]
            rgba[..., 3] = 1
            return rgba
        if self.kind == "b10g11r11":
            word = texels[..., 0].astype(np.uint32)
            rgb = [small_float(word & 0x7FF, 6), small_float(word >> 11 & 0x7FF, 6), small_float(word >> 22, 5)]
            return np.stack([*rgb, np.ones((h, w), np.float32)], axis=-1)
        if self.kind in ("unorm", "bgra"):
            values = texels.astype(np.float32) / np.float32(255)
            if self.kind == "bgra":
                values = values[..., [2, 1, 0, 3]]
        elif self.kind == "snorm":
            values = np.maximum(texels.astype(np.float32) / np.float32(127), np.float32(-1))
        else:
            values = texels.astype(self.out_dtype)
        rgba = np.zeros((h, w, 4), self.out_dtype)
        rgba[..., 3] = 1
        rgba[..., : self.comps] = values
        return rgba

    def stored(self, texels: np.ndarray) -> np.ndarray:
        """The file texels after imageLoad then imageStore of ``texels``: unchanged, but SNORM -128 becomes
        -127 (-128 loads as -1.0, which stores as -127)."""
        return np.maximum(texels, -127).astype(texels.dtype) if self.kind == "snorm" else texels


def small_float(v: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """Unsigned 11- or 10-bit float (5-bit exponent, bias 15) to float32."""
    e, m = (v >> mantissa_bits).astype(np.int64), (v & ((1 << mantissa_bits) - 1)).astype(np.float64)
    scale = 1 << mantissa_bits
    normal = np.ldexp(1 + m / scale, e - 15)
    return np.where(e == 0, np.ldexp(m / scale, -14), normal).astype(np.float32)


FMTS = {f.name: f for f in [
    Fmt("R32G32B32A32_SFLOAT", 2, "<f4", 4, "float", "rgba32f"),
    Fmt("R16G16B16A16_SFLOAT", 10, "<f2", 4, "float", "rgba16f"),
    Fmt("R16G16B16A16_SINT", 14, "<i2", 4, "sint", "rgba16i"),
    Fmt("R16G16_SFLOAT", 34, "<f2", 2, "float", "rg16f"),
    Fmt("B10G11R11_UFLOAT_PACK32", 26, "<u4", 1, "b10g11r11", "r11f_g11f_b10f"),
    Fmt("D32_SFLOAT_S8_UINT", 20, "|u1", 8, "depth"),
    Fmt("R8G8B8A8_UNORM", 28, "|u1", 4, "unorm", "rgba8"),
    Fmt("R8G8B8A8_SNORM", 31, "|i1", 4, "snorm", "rgba8_snorm"),
    Fmt("R8G8B8_SNORM", 133, "|i1", 4, "snorm"),
    Fmt("R8G8B8A8_SINT", 32, "|i1", 4, "sint", "rgba8i"),
    Fmt("R8G8B8_SINT", 134, "|i1", 4, "sint"),
    Fmt("R8G8_UNORM", 49, "|u1", 2, "unorm", "rg8"),
    Fmt("R8G8_UINT", 50, "|u1", 2, "uint", "rg8ui"),
    Fmt("R8G8_SINT", 52, "|i1", 2, "sint", "rg8i"),
    Fmt("R8_UNORM", 61, "|u1", 1, "unorm", "r8"),
    Fmt("R8_SNORM", 63, "|i1", 1, "snorm", "r8_snorm"),
    Fmt("R32_UINT", 42, "<u4", 1, "uint", "r32ui"),
    Fmt("R32_SFLOAT", 41, "<f4", 1, "float", "r32f"),
    Fmt("R16_SFLOAT", 54, "<f2", 1, "float", "r16f"),
    Fmt("R16_UINT", 57, "<u2", 1, "uint", "r16ui"),
    Fmt("B8G8R8A8_UNORM", 87, "|u1", 4, "bgra"),
]}


def dds_source(b: ScenarioBuilder, name: str, fmt: Fmt, levels: list[np.ndarray]) -> str:
    h, w = levels[0].shape[:2]
    write_dds(b.root / name, w, h, fmt.dxgi, [np.ascontiguousarray(lv).tobytes() for lv in levels])
    return name


# ---------------------------------------------------------------------------------------------------- cases
# A case builds its scenario into ``b`` and returns {dst path: Expect}. ``CASES`` holds them by id.

CASES: dict[str, Callable[[ScenarioBuilder], dict[str, Expect]]] = {}


def case(name: str) -> Callable[[Callable[..., dict[str, Expect]]], Callable[..., dict[str, Expect]]]:
    def register(fn: Callable[..., dict[str, Expect]]) -> Callable[..., dict[str, Expect]]:
        CASES[name] = fn
        return fn
    return register


def fetch_shader(fmt: Fmt, width: int = W, lod: str = "0") -> str:
    return glsl(f"o[p.y * {width} + p.x] = texelFetch(src, p, {lod});",
                f"layout(set = 0, binding = 0) uniform {fmt.prefix}sampler2D src;",
                f"layout(set = 0, binding = 1) buffer O {{ {fmt.vec} o[]; }};")


# 1. every DDS format read with texelFetch through a sampler (shader_access readonly)

# The spec's DDS formats this device has no image of at all (lavapipe: no R8G8B8 formats). vkcap must refuse
# them in one line and exit 2; the reference fails with "No supported tiling for this data type" (exit 255).
NO_IMAGE_ON_LAVAPIPE = ("R8G8B8_SNORM", "R8G8B8_SINT")




def texel_fetch_case(fmt: Fmt, b: ScenarioBuilder) -> dict[str, Expect]:
    texels = fmt.texels(rng_for(fmt.name))
    b.shader("read", fetch_shader(fmt))
    # a depth image cannot be written back to DDS (by either runner): no dst for it
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [texels]),
          **({} if fmt.kind == "depth" else {"dst": "src.dds"}))
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    out = {"o.npy": Expect(fmt.fetched(texels), fmt.out_dtype, fmt.atol)}
    if fmt.kind != "depth":
        out["src.dds"] = Expect(texels, fmt.dtype)
    return out


for _f in FMTS.values():
    CASES[f"texelFetch-{_f.name}"] = partial(texel_fetch_case, _f)


# 2. PNG sources (R8G8B8A8_UNORM) read through a sampler; PNG destinations


def png_pixels(name: str) -> np.ndarray:
    return rng_for(name).integers(0, 256, (H, W, 4), dtype=np.uint8)


@case("png-src-texelFetch")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    pixels = png_pixels("png")
    write_png(b.root / "in.png", W, H, pixels)
    fmt = FMTS["R8G8B8A8_UNORM"]
    b.shader("read", fetch_shader(fmt))
    image(b, "src", fmt.name, src="in.png", dst="src.png")
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(fmt.fetched(pixels), "<f4", fmt.atol), "src.png": Expect(pixels)}


@case("png-src-imageLoad-to-png-dst")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """A PNG source loaded as a storage image (image_read), copied by imageLoad/imageStore to a PNG dst."""
    pixels = png_pixels("png-copy")
    write_png(b.root / "in.png", W, H, pixels)
    b.shader("copy", glsl("imageStore(dst, p, imageLoad(src, p));",
                          "layout(set = 0, binding = 0, rgba8) uniform readonly image2D src;",
                          "layout(set = 0, binding = 1, rgba8) uniform writeonly image2D dst;"))
    image(b, "src", "R8G8B8A8_UNORM", src="in.png", shader_access="image_read")
    image(b, "dst", "R8G8B8A8_UNORM", dst="out/dst.png", shader_access="writeonly")
    dispatch(b, "copy", [(0, 0, "src"), (0, 1, "dst")], (W, H))
    return {"out/dst.png": Expect(pixels)}


@case("imageStore-to-png-dst")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """Exact UNORM values k / 255 stored by a shader, written as PNG."""
    b.shader("write", glsl("imageStore(img, p, vec4(p.x * 30, p.y * 60, 255 - p.x * p.y * 7, 200) / 255.0);",
                           "layout(set = 0, binding = 0, rgba8) uniform writeonly image2D img;"))
    image(b, "img", "R8G8B8A8_UNORM", dst="img.png", shader_access="writeonly")
    dispatch(b, "write", [(0, 0, "img")], (W, H))
    y, x = np.mgrid[0:H, 0:W]
    return {"img.png": Expect(np.stack([x * 30, y * 60, 255 - x * y * 7, np.full_like(x, 200)], -1).astype(np.uint8))}


# 3. imageLoad / imageStore copies between storage images, dst DDS byte for byte
# Several formats per scenario (one src/dst pair each, one dispatch), to keep the module fast.

STORAGE_COPY = {
    "float": ["R32G32B32A32_SFLOAT", "R16G16B16A16_SFLOAT", "R16G16_SFLOAT", "B10G11R11_UFLOAT_PACK32", "R32_SFLOAT",
              "R16_SFLOAT"],
    "normalized": ["R8G8B8A8_UNORM", "R8G8B8A8_SNORM", "R8G8_UNORM", "R8_UNORM", "R8_SNORM"],
    "integer": ["R16G16B16A16_SINT", "R8G8B8A8_SINT", "R8G8_SINT", "R32_UINT", "R16_UINT"],
}


def storage_copy_case(names: list[str], b: ScenarioBuilder, *, src_access: str = "image_read",
                      dst_access: str = "writeonly", tiling: tuple[str, str] | None = None) -> dict[str, Expect]:
    """For each format: ``src_<k>`` (a DDS) -> imageLoad -> imageStore -> ``dst_<k>`` (written to
    ``<format>.dds``). ``readwrite`` resources are bound with descriptor_type STORAGE_IMAGE (else the
    reference would bind them as samplers and crash)."""
    decls, body, bindings, out = [], [], [], {}
    tiles = [{"tiling": x} for x in tiling] if tiling else [{}, {}]
    for k, name in enumerate(names):
        fmt = FMTS[name]
        texels = fmt.texels(rng_for("copy-" + name))
        q, t = fmt.glsl_qualifier, fmt.prefix
        decls += [f"layout(set = 0, binding = {2 * k}, {q}) uniform readonly {t}image2D src{k};",
                  f"layout(set = 0, binding = {2 * k + 1}, {q}) uniform writeonly {t}image2D dst{k};"]
        body.append(f"imageStore(dst{k}, p, imageLoad(src{k}, p));")
        image(b, f"src{k}", name, src=dds_source(b, f"{name}.in.dds", fmt, [texels]), shader_access=src_access,
              **tiles[0])
        image(b, f"dst{k}", name, dst=f"{name}.dds", shader_access=dst_access, **tiles[1])
        bindings += [bind(0, 2 * k, f"src{k}", **(STORAGE if src_access == "readwrite" else {})),
                     bind(0, 2 * k + 1, f"dst{k}", **(STORAGE if dst_access == "readwrite" else {}))]
        out[f"{name}.dds"] = Expect(fmt.stored(texels), fmt.dtype)
    b.shader("copy", glsl("\n    ".join(body), *decls))
    dispatch(b, "copy", bindings, (W, H))
    return out


for _group, _names in STORAGE_COPY.items():
    CASES[f"imageLoad-imageStore-{_group}-formats"] = partial(storage_copy_case, _names)
CASES["imageLoad-imageStore-readwrite-as-storage"] = partial(
    storage_copy_case, ["R32G32B32A32_SFLOAT", "R32_UINT"], src_access="readwrite", dst_access="readwrite")


# 4. one readwrite image bound both ways: dispatch 1 stores (STORAGE_IMAGE), dispatch 2 samples it


@case("readwrite-store-then-sample")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    b.shader("write", glsl("imageStore(img, p, vec4(p.x, p.y, p.x * 10 + p.y, -0.5));",
                           "layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;"))
    b.shader("read", fetch_shader(fmt))
    image(b, "img", fmt.name, shader_access="readwrite", dst="img.dds")
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "write", [bind(0, 0, "img", **STORAGE)], (W, H))
    dispatch(b, "read", [(0, 0, "img"), (0, 1, "o")], (W, H))
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    want = np.stack([x, y, x * 10 + y, np.full_like(x, -0.5)], axis=-1)
    return {"o.npy": Expect(want, "<f4"), "img.dds": Expect(want, "<f4")}


@case("readwrite-uint-update-then-sample")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """An R32_UINT DDS source updated in place (imageLoad + imageStore, STORAGE_IMAGE), then usampler2D."""
    fmt = FMTS["R32_UINT"]
    texels = fmt.texels(rng_for("rw-uint"))
    b.shader("update", glsl("imageStore(img, p, imageLoad(img, p) * 3u + uvec4(p.x + 8 * p.y));",
                            "layout(set = 0, binding = 0, r32ui) uniform uimage2D img;"))
    b.shader("read", fetch_shader(fmt))
    image(b, "img", fmt.name, src=dds_source(b, "in.dds", fmt, [texels]), shader_access="readwrite", dst="img.dds")
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "update", [bind(0, 0, "img", **STORAGE)], (W, H))
    dispatch(b, "read", [(0, 0, "img"), (0, 1, "o")], (W, H))
    y, x = np.mgrid[0:H, 0:W].astype(np.uint32)
    updated = (texels[..., 0] * np.uint32(3) + x + 8 * y).astype(np.uint32)[..., None]
    return {"o.npy": Expect(fmt.fetched(updated), "<u4"), "img.dds": Expect(updated, "<u4")}


# 5. mip levels: generated, from a 3-level DDS, one level through the binding's lod, textureLod

MIP_SIZES = [(W >> i, H >> i) for i in range(3)]  # 8x4, 4x2, 2x1


def box(level: np.ndarray) -> np.ndarray:
    """The next mip level: the mean of each 2x2 block (of each pair where a side is already 1)."""
    h, w, c = level.shape
    fy, fx = min(h, 2), min(w, 2)
    return level.reshape(h // fy, fy, w // fx, fx, c).mean(axis=(1, 3), dtype=np.float64)


def all_levels_shader(fmt: Fmt, levels: int = 3) -> str:
    """texelFetch of every texel of each level (full view) into one buffer, level after level."""
    return glsl(f"""int base = 0;
    for (int l = 0; l < {levels}; l++) {{
        ivec2 size = textureSize(src, l);
        if (p.x < size.x && p.y < size.y) o[base + p.y * size.x + p.x] = texelFetch(src, p, l);
        base += size.x * size.y;
    }}""", f"layout(set = 0, binding = 0) uniform {fmt.prefix}sampler2D src;",
        f"layout(set = 0, binding = 1) buffer O {{ {fmt.vec} o[]; }};")


def flat_levels(levels: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([lv.reshape(-1, 4) for lv in levels])


N_MIP_TEXELS = sum(w * h for w, h in MIP_SIZES)


@case("mips-generated-from-1-level-R32G32B32A32_SFLOAT")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """mips=3 from a 1-level DDS: levels 1 and 2 are generated by linear blits, the 2x2 box means (to float
    rounding); the dst DDS holds level 0 only."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    level0 = rng_for("mips-f32").random((H, W, 4), dtype=np.float32)
    b.shader("read", all_levels_shader(fmt))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [level0]), mips=3, dst="src.dds")
    b.buffer("o", N_MIP_TEXELS * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    want = flat_levels([level0, box(level0), box(box(level0))]).astype(np.float32)
    return {"o.npy": Expect(want, "<f4", atol=1e-6), "src.dds": Expect(level0, "<f4")}


@case("mips-generated-from-1-level-R8G8B8A8_UNORM")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """Generated UNORM levels: level 1 within one step (1/255) of the box filter of level 0; level 2, blitted
    from the rounded level 1, within two steps of the box filter of the box filter (lavapipe's blit is not
    exactly round-to-nearest: a box mean of exactly 124 was seen to come out as 125)."""
    fmt = FMTS["R8G8B8A8_UNORM"]
    level0 = fmt.texels(rng_for("mips-u8"))
    b.shader("read", all_levels_shader(fmt))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [level0]), mips=3, dst="src.dds")
    b.buffer("o", N_MIP_TEXELS * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    f0 = level0.astype(np.float64) / 255
    want = flat_levels([f0, box(f0), box(box(f0))]).astype(np.float32)
    atol = np.repeat([0.0 + fmt.atol, 1.01 / 255, 2.01 / 255], [W * H, W * H // 4, W * H // 16])[:, None]
    return {"o.npy": Expect(want, "<f4", atol=atol), "src.dds": Expect(level0, "|u1")}


@case("mips-generated-8x2-4-levels")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """A chain that outlives the short side (8x2, 4x1, 2x1, 1x1): levels 2 and 3 halve the width only."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    level0 = rng_for("mips-8x2").random((2, 8, 4), dtype=np.float32)
    b.shader("read", all_levels_shader(fmt, 4))
    image(b, "src", fmt.name, w=8, h=2, src=dds_source(b, "in.dds", fmt, [level0]), mips=4)
    b.buffer("o", (16 + 4 + 2 + 1) * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (8, 2))
    levels = [level0]
    for _ in range(3):
        levels.append(box(levels[-1]))
    return {"o.npy": Expect(flat_levels(levels).astype(np.float32), "<f4", atol=1e-6)}


@case("binding-lod-0-of-a-1-level-image")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """An explicit ``lod: 0`` on an image without mips: the view of its only level."""
    fmt = FMTS["R16G16_SFLOAT"]
    texels = fmt.texels(rng_for("lod0"))
    b.shader("read", fetch_shader(fmt))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [texels]))
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [bind(0, 0, "src", lod=0), bind(0, 1, "o")], (W, H))
    return {"o.npy": Expect(fmt.fetched(texels), "<f4")}


def three_level_dds(b: ScenarioBuilder, fmt: Fmt, name: str) -> list[np.ndarray]:
    rng = rng_for(name)
    levels = [fmt.texels(rng, w, h) for w, h in MIP_SIZES]
    dds_source(b, "in.dds", fmt, levels)
    return levels


@case("mips-from-3-level-dds-texelFetch-each-level")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    fmt = FMTS["R8G8B8A8_UNORM"]
    levels = three_level_dds(b, fmt, "mips3")
    b.shader("read", all_levels_shader(fmt))
    image(b, "src", fmt.name, src="in.dds", mips=3, dst="src.dds")
    b.buffer("o", N_MIP_TEXELS * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(flat_levels([fmt.fetched(lv) for lv in levels]), "<f4", fmt.atol),
            "src.dds": Expect(levels[0], "|u1")}


@case("mips-binding-lod-views-level-1-and-2")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """The same image bound twice with ``lod`` 1 and 2: each a view of that one level (texelFetch level 0)."""
    fmt = FMTS["R16G16B16A16_SINT"]
    levels = three_level_dds(b, fmt, "lod-views")
    (w1, h1), (w2, h2) = MIP_SIZES[1:]
    b.shader("read", glsl(f"""if (p.x < {w1} && p.y < {h1}) o[p.y * {w1} + p.x] = texelFetch(l1, p, 0);
    if (p.x < {w2} && p.y < {h2}) o[{w1 * h1} + p.y * {w2} + p.x] = texelFetch(l2, p, 0);
    if (p == ivec2(0)) o[{w1 * h1 + w2 * h2}] = ivec4(textureSize(l1, 0), textureSize(l2, 0));""",
                          "layout(set = 0, binding = 0) uniform isampler2D l1;",
                          "layout(set = 0, binding = 2) uniform isampler2D l2;",
                          "layout(set = 0, binding = 1) buffer O { ivec4 o[]; };"))
    image(b, "src", fmt.name, src="in.dds", mips=3)
    b.buffer("o", (w1 * h1 + w2 * h2 + 1) * 16, dst="o.npy")
    dispatch(b, "read", [bind(0, 0, "src", lod=1), bind(0, 2, "src", lod=2), bind(0, 1, "o")], (w1, h1))
    want = np.concatenate([flat_levels([fmt.fetched(levels[1]), fmt.fetched(levels[2])]),
                           np.array([[w1, h1, w2, h2]], np.int32)])
    return {"o.npy": Expect(want, "<i4")}


def level_centres_uv(l: int) -> str:
    return f"(vec2(p) + 0.5) / vec2(textureSize(src, {l}))"


@case("mips-textureLod-nearest-at-level-centres")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """textureLod(uv, L) at the texel centres of level L, NEAREST filters and mip_filter: exactly level L."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    levels = three_level_dds(b, fmt, "textureLod")
    b.shader("read", glsl("""int base = 0;
    for (int l = 0; l < 3; l++) {
        ivec2 size = textureSize(src, l);
        if (p.x < size.x && p.y < size.y) o[base + p.y * size.x + p.x] = textureLod(src, (vec2(p) + 0.5) / vec2(size), float(l));
        base += size.x * size.y;
    }""", "layout(set = 0, binding = 0) uniform sampler2D src;", "layout(set = 0, binding = 1) buffer O { vec4 o[]; };"))
    image(b, "src", fmt.name, src="in.dds", mips=3, min_filter="NEAREST", mag_filter="NEAREST", mip_filter="NEAREST")
    b.buffer("o", N_MIP_TEXELS * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(flat_levels(levels), "<f4")}


@case("mips-textureLod-linear-mip-filter-between-levels")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """textureLod(uv, 0.5) at level-0 texel centres, NEAREST within a level and LINEAR between levels:
    the mean of the level-0 texel and the level-1 texel that covers it."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    levels = [lv.astype(np.float32) for lv in three_level_dds(b, fmt, "mip-linear")]
    b.shader("read", glsl("o[p.y * 8 + p.x] = textureLod(src, (vec2(p) + 0.5) / vec2(8, 4), 0.5);",
                          "layout(set = 0, binding = 0) uniform sampler2D src;",
                          "layout(set = 0, binding = 1) buffer O { vec4 o[]; };"))
    image(b, "src", fmt.name, src="in.dds", mips=3, min_filter="NEAREST", mag_filter="NEAREST", mip_filter="LINEAR")
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    up = levels[1].repeat(2, axis=0).repeat(2, axis=1)
    scale = float(np.abs(levels[0]).max())
    return {"o.npy": Expect((levels[0] + up) / 2, "<f4", atol=scale * 2e-3)}


@case("mips-store-into-level-1-then-sample-it")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """readwrite mipped image: dispatch 1 imageStores level 1 (binding lod 1, STORAGE_IMAGE), dispatch 2
    texelFetches level 1 through the whole view; level 0 (the DDS source, dst) is untouched."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    level0 = rng_for("store-lod").random((H, W, 4), dtype=np.float32)
    w1, h1 = MIP_SIZES[1]
    b.shader("write", glsl("imageStore(img, p, vec4(p, 100 + p.x, 0.25));",
                           "layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;"))
    b.shader("read", fetch_shader(fmt, width=w1, lod="1"))
    image(b, "img", fmt.name, src=dds_source(b, "in.dds", fmt, [level0]), mips=2, shader_access="readwrite",
          dst="img.dds")
    b.buffer("o", w1 * h1 * 16, dst="o.npy")
    dispatch(b, "write", [bind(0, 0, "img", lod=1, **STORAGE)], (w1, h1))
    dispatch(b, "read", [(0, 0, "img"), (0, 1, "o")], (w1, h1))
    y, x = np.mgrid[0:h1, 0:w1].astype(np.float32)
    return {"o.npy": Expect(np.stack([x, y, 100 + x, np.full_like(x, 0.25)], -1), "<f4"),
            "img.dds": Expect(level0, "<f4")}


# 6. tiling LINEAR and OPTIMAL


@case("tiling-LINEAR-sampled-texelFetch")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    fmt = FMTS["R8G8B8A8_UNORM"]
    texels = fmt.texels(rng_for("linear-sampled"))
    b.shader("read", fetch_shader(fmt))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [texels]), tiling="LINEAR", dst="src.dds")
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(fmt.fetched(texels), "<f4", fmt.atol), "src.dds": Expect(texels, "|u1")}


@case("tiling-LINEAR-storage-imageStore")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    b.shader("write", glsl("imageStore(img, p, vec4(p.x, p.y, p.x * 10 + p.y, 1.0));",
                           "layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;"))
    image(b, "img", "R32G32B32A32_SFLOAT", dst="img.dds", shader_access="writeonly", tiling="LINEAR")
    dispatch(b, "write", [(0, 0, "img")], (W, H))
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    return {"img.dds": Expect(np.stack([x, y, x * 10 + y, np.ones_like(x)], -1), "<f4")}


CASES["tiling-LINEAR-src-to-OPTIMAL-dst"] = partial(
    storage_copy_case, ["R16G16B16A16_SFLOAT", "R8G8B8A8_UNORM"], tiling=("LINEAR", "OPTIMAL"))
CASES["tiling-OPTIMAL-src-to-LINEAR-dst"] = partial(storage_copy_case, ["R32_UINT", "R32G32B32A32_SFLOAT"],
                                                    tiling=("OPTIMAL", "LINEAR"))


# 7. samplers: texture() with normalized coordinates outside [0, 1], address modes and border colours

# 3W x 3H samples: the image's own texels in the middle, one image's worth of wrapped/border texels around it.
SW, SH = 3 * W, 3 * H


def sample_shader(fmts: list[Fmt], offset: float) -> str:
    """texture() at (i + offset) / W, (j + offset) / H for texel indices i in [-W, 2W), j in [-H, 2H), of
    sampler ``s<k>`` (binding 2k) into buffer ``o<k>`` (binding 2k + 1), for each format in ``fmts``."""
    decls, body = [], [f"vec2 uv = (vec2(p - ivec2({W}, {H})) + {offset}) / vec2({W}, {H});"]
    for k, fmt in enumerate(fmts):
        decls += [f"layout(set = 0, binding = {2 * k}) uniform {fmt.prefix}sampler2D s{k};",
                  f"layout(set = 0, binding = {2 * k + 1}) buffer B{k} {{ {fmt.vec} o{k}[]; }};"]
        body.append(f"o{k}[p.y * {SW} + p.x] = texture(s{k}, uv);")
    return glsl("\n    ".join(body), *decls)


def wrap(i: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Texel index after the address mode (Vulkan 'Wrapping Operation'); -1 where the border applies."""
    if mode == "REPEAT":
        return np.mod(i, n)
    if mode == "MIRRORED_REPEAT":
        t = np.mod(i, 2 * n)
        return np.where(t < n, t, 2 * n - 1 - t)
    if mode == "CLAMP_EDGE":
        return np.clip(i, 0, n - 1)
    return np.where((i >= 0) & (i < n), i, -1)  # CLAMP_BORDER


def texel_grid(rgba: np.ndarray, ix: np.ndarray, iy: np.ndarray, mode: str, border: np.ndarray) -> np.ndarray:
    h, w = rgba.shape[:2]
    x, y = wrap(ix, w, mode), wrap(iy, h, mode)
    inside = (x >= 0) & (y >= 0)
    out = rgba[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)].astype(np.float64)
    return np.where(inside[..., None], out, np.asarray(border, np.float64))


def sample(rgba: np.ndarray, offset: float, mode: str, border: Any, linear: bool) -> np.ndarray:
    """numpy texture() of the SW x SH grid of :func:`sample_shader` (NEAREST or bilinear)."""
    j, i = np.mgrid[0:SH, 0:SW]
    u, v = (i - W + offset), (j - H + offset)  # coordinates in texels
    if not linear:
        return texel_grid(rgba, np.floor(u).astype(int), np.floor(v).astype(int), mode, border)
    x0, y0 = np.floor(u - 0.5).astype(int), np.floor(v - 0.5).astype(int)
    a, bw = (u - 0.5 - x0)[..., None], (v - 0.5 - y0)[..., None]
    t = partial(texel_grid, rgba, mode=mode, border=border)
    return ((1 - a) * (1 - bw) * t(x0, y0) + a * (1 - bw) * t(x0 + 1, y0)
            + (1 - a) * bw * t(x0, y0 + 1) + a * bw * t(x0 + 1, y0 + 1))


BORDERS = {"FLOAT_TRANSPARENT_BLACK": (0, 0, 0, 0), "FLOAT_OPAQUE_BLACK": (0, 0, 0, 1), "FLOAT_OPAQUE_WHITE": (1, 1, 1, 1),
           "INT_TRANSPARENT_BLACK": (0, 0, 0, 0), "INT_OPAQUE_BLACK": (0, 0, 0, 1), "INT_OPAQUE_WHITE": (1, 1, 1, 1)}


@dataclass(frozen=True)
class Sampled:
    """One sampled image of a sampler case: its format, address mode and border colour."""

    fmt: str
    mode: str
    border: str = "FLOAT_TRANSPARENT_BLACK"
    custom: tuple | None = None

    @property
    def label(self) -> str:
        return self.border if self.mode == "CLAMP_BORDER" else self.mode


def sampler_case(images: list[Sampled], b: ScenarioBuilder, *, linear: bool = False) -> dict[str, Expect]:
    """Each image sampled with texture() over the 3W x 3H grid into ``<label>.npy``, all in one dispatch;
    min_filter == mag_filter (NEAREST at texel centres: exact; LINEAR at quarter-texel offsets: close)."""
    offset = 0.25 if linear else 0.5
    filt = "LINEAR" if linear else "NEAREST"
    b.shader("read", sample_shader([FMTS[x.fmt] for x in images], offset))
    bindings, out = [], {}
    for k, x in enumerate(images):
        fmt = FMTS[x.fmt]
        texels = fmt.texels(rng_for(f"sampler-{x.fmt}-{x.label}"))
        if fmt.kind == "float":  # values in [0, 1) with few mantissa bits: bilinear weights of 1/4 stay exact
            texels = (rng_for(f"sampler-values-{k}").integers(0, 64, texels.shape) / 64).astype(fmt.dtype)
        extra = {"custom_border_color": list(x.custom)} if x.custom else {}
        image(b, f"img{k}", fmt.name, src=dds_source(b, f"in{k}.dds", fmt, [texels]), min_filter=filt,
              mag_filter=filt, mip_filter="NEAREST", border_address_mode=x.mode, border_color=x.border, **extra)
        b.buffer(f"o{k}", SW * SH * 16, dst=f"{x.label}.npy")
        bindings += [bind(0, 2 * k, f"img{k}"), bind(0, 2 * k + 1, f"o{k}")]
        want = sample(fmt.fetched(texels), offset, x.mode, x.custom or BORDERS[x.border], linear)
        out[f"{x.label}.npy"] = Expect(want.astype(fmt.out_dtype), fmt.out_dtype, atol=2e-3 if linear else fmt.atol)
    dispatch(b, "read", bindings, (SW, SH))
    return out


WRAPPING = [Sampled("R32G32B32A32_SFLOAT", m) for m in ("CLAMP_EDGE", "REPEAT", "MIRRORED_REPEAT")]
CASES["sampler-NEAREST-CLAMP_EDGE-REPEAT-MIRRORED_REPEAT"] = partial(sampler_case, WRAPPING)
CASES["sampler-LINEAR-CLAMP_EDGE-REPEAT-MIRRORED_REPEAT-CLAMP_BORDER"] = partial(
    sampler_case, [*WRAPPING, Sampled("R32G32B32A32_SFLOAT", "CLAMP_BORDER", "FLOAT_OPAQUE_WHITE")], linear=True)
CASES["sampler-CLAMP_BORDER-float-colours"] = partial(sampler_case, [
    Sampled("R32G32B32A32_SFLOAT", "CLAMP_BORDER", "FLOAT_TRANSPARENT_BLACK"),
    Sampled("R16G16B16A16_SFLOAT", "CLAMP_BORDER", "FLOAT_OPAQUE_BLACK"),
    Sampled("R8G8B8A8_UNORM", "CLAMP_BORDER", "FLOAT_OPAQUE_WHITE"),
    Sampled("R32G32B32A32_SFLOAT", "CLAMP_BORDER", "FLOAT_CUSTOM_EXT", (0.25, -2.5, 8.0, 0.5)),
])
CASES["sampler-CLAMP_BORDER-int-colours"] = partial(sampler_case, [
    Sampled("R16G16B16A16_SINT", "CLAMP_BORDER", "INT_TRANSPARENT_BLACK"),
    Sampled("R8G8B8A8_SINT", "CLAMP_BORDER", "INT_OPAQUE_BLACK"),
    Sampled("R16G16B16A16_SINT", "CLAMP_BORDER", "INT_OPAQUE_WHITE"),
    Sampled("R8G8B8A8_SINT", "CLAMP_BORDER", "INT_CUSTOM_EXT", (-7, 100, 3, -128)),
])


@case("png-src-texture-REPEAT")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    pixels = png_pixels("png-sampled")
    write_png(b.root / "in.png", W, H, pixels)
    fmt = FMTS["R8G8B8A8_UNORM"]
    b.shader("read", sample_shader([fmt], 0.5))
    image(b, "src", fmt.name, src="in.png", border_address_mode="REPEAT")
    b.buffer("o", SW * SH * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (SW, SH))
    return {"o.npy": Expect(sample(fmt.fetched(pixels), 0.5, "REPEAT", None, False).astype(np.float32), "<f4",
                              fmt.atol)}


# 8. images aliasing tensors and buffers through memory_group

STORE_PATTERN = "imageStore(img, p, vec4(p.x, p.y, p.x * 10 + p.y, 1.0));"


def pattern() -> np.ndarray:
    return image_pattern(W, H)




def image_written_tensor_read(b: ScenarioBuilder, tiling: str | None = None) -> dict[str, Expect]:
    """A writeonly (storage) image written by a shader; a tensor in the same memory_group read by a second
    (and written to .npy). ``tiling`` given: on both (absent, an aliased image is LINEAR in both runners)."""
    tiles = {"tiling": tiling} if tiling else {}
    b.shader("write", glsl(STORE_PATTERN, "layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;"))
    b.shader("read", READ_TENSOR, build_options=f"-DWIDTH={W}")
    image(b, "img", "R32G32B32A32_SFLOAT", shader_access="writeonly", memory_group={"id": "g"}, **tiles)
    b.resource("tensor", uid="t", dims=[1, H, W, 4], format="VK_FORMAT_R32_SFLOAT", shader_access="readonly",
               dst="t.npy", memory_group={"id": "g"}, **tiles)
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "write", [(0, 0, "img")], (W, H))
    dispatch(b, "read", [(0, 0, "t"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(pattern(), "<f4"), "t.npy": Expect(pattern()[None])}


CASES["alias-image-written-tensor-read"] = image_written_tensor_read
CASES["alias-OPTIMAL-image-written-OPTIMAL-tensor-read"] = partial(image_written_tensor_read, tiling="OPTIMAL")


@case("alias-tensor-src-sampled-as-image")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """A tensor's .npy source seen by a sampler2D texelFetch of the image sharing its memory."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    values = fmt.texels(rng_for("alias-tensor-src"))
    b.shader("read", fetch_shader(fmt))
    image(b, "img", fmt.name, shader_access="readonly", memory_group={"id": "g"})
    b.resource("tensor", uid="t", dims=[1, H, W, 4], format="VK_FORMAT_R32_SFLOAT", shader_access="readonly",
               src=b.npy("t.npy", values[None]), memory_group={"id": "g"})
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "img"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(values, "<f4")}


@case("alias-image-dds-src-to-tensor-dst-R8G8B8A8_UNORM")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """No dispatch: an RGBA8 DDS loaded into an image, written out through an R8_UINT tensor over it."""
    fmt = FMTS["R8G8B8A8_UNORM"]
    texels = fmt.texels(rng_for("alias-dds"))
    image(b, "img", fmt.name, src=dds_source(b, "in.dds", fmt, [texels]), shader_access="readonly",
          memory_group={"id": "g"})
    b.resource("tensor", uid="t", dims=[1, H, W, 4], format="VK_FORMAT_R8_UINT", shader_access="readonly",
               dst="t.npy", memory_group={"id": "g"})
    return {"t.npy": Expect(texels[None])}


@case("alias-buffer-src-sampled-as-LINEAR-image")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """A buffer's .npy source read through a LINEAR image in the same memory_group (rows of 128 bytes)."""
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    values = fmt.texels(rng_for("alias-buffer-src"))
    b.shader("read", fetch_shader(fmt))
    b.buffer("raw", values.nbytes, values.reshape(-1), shader_access="readonly", memory_group={"id": "g"})
    image(b, "img", fmt.name, shader_access="readonly", tiling="LINEAR", memory_group={"id": "g"})
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "img"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(values, "<f4")}


@case("alias-image-written-buffer-dst")
def _(b: ScenarioBuilder) -> dict[str, Expect]:
    """A LINEAR storage image written by a shader, read back through a buffer in the same memory_group."""
    b.shader("write", glsl(STORE_PATTERN, "layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;"))
    image(b, "img", "R32G32B32A32_SFLOAT", shader_access="writeonly", tiling="LINEAR", memory_group={"id": "g"})
    b.buffer("raw", W * H * 16, shader_access="readonly", dst="raw.npy", memory_group={"id": "g"})
    dispatch(b, "write", [(0, 0, "img")], (W, H))
    return {"raw.npy": Expect(pattern(), "<f4")}


# --------------------------------------------------------------------------------------------------- the tests


def run_both(b: ScenarioBuilder, tmp_path: Path, *, validate_reference: bool = False) -> tuple[Any, Any, Path]:
    scenario = b.save()
    ref = run_reference(scenario, tmp_path / "reference", validate=validate_reference)
    ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--validate")
    return ref, ours, scenario


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_error_line(proc: Any) -> str:
    """vkcap's refusal: exit 2 and a single ``vkcap: error:`` line."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("vkcap: error: "), (proc.returncode, proc.stderr)
    return lines[0]


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("name", CASES)
def test_vkcap_matches_reference_and_numpy(name: str, tmp_path: Path) -> None:
    fmt = name.removeprefix("texelFetch-")
    b = ScenarioBuilder(tmp_path / "scenario")
    expect = CASES[name](b)
    scenario = b.save()
    ref = run_reference(scenario, tmp_path / "reference")
    if fmt in NO_IMAGE_ON_LAVAPIPE:
        assert ref.returncode == 255 and "No supported tiling for this data type" in ref.stderr, ref.stderr[-2000:]
        line = one_error_line(vkcap("run", scenario, "--output", tmp_path / "ours", "--validate"))
        assert f"format VK_FORMAT_{fmt} cannot be an image with OPTIMAL tiling on this device" in line, line
        return  # this device has no image of this format, and both runners say so
    assert ref.returncode == 0, (ref.returncode, ref.stderr[-3000:])
    for dst, want in expect.items():  # the reference agrees with numpy...
        want.check(tmp_path / "reference" / dst)
    ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--validate")
    assert ours.returncode == 0, ours.stderr
    theirs, mine = files(tmp_path / "reference"), files(tmp_path / "ours")
    assert sorted(mine) == sorted(theirs) == sorted(expect)
    for dst in expect:  # ... and vkcap with the reference, byte for byte (hence with numpy)
        assert mine[dst] == theirs[dst], f"{dst}: vkcap's bytes differ from the reference's"
        expect[dst].check(tmp_path / "ours" / dst)


# ------------------------------------------------------------------ where the reference crashes and vkcap does not

FETCH_F32 = fetch_shader(FMTS["R32G32B32A32_SFLOAT"])
LOAD_F32 = glsl("o[p.y * 8 + p.x] = imageLoad(src, p);", "layout(set = 0, binding = 0, rgba32f) uniform readonly image2D src;",
                "layout(set = 0, binding = 1) buffer O { vec4 o[]; };")


def crash_store_readwrite(b: ScenarioBuilder) -> dict[str, Expect]:
    """A ``readwrite`` image that the shader imageStores (image2D), no descriptor_type: the reference binds a
    combined image sampler (from readwrite), the pipeline layout contradicts the shader, and it crashes in
    the dispatch. vkcap binds a storage image, as the shader declares."""
    b.shader("write", glsl(STORE_PATTERN, "layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;"))
    image(b, "img", "R32G32B32A32_SFLOAT", shader_access="readwrite", dst="img.dds")
    dispatch(b, "write", [(0, 0, "img")], (W, H))
    return {"img.dds": Expect(pattern(), "<f4")}


def _read_case(b: ScenarioBuilder, shader: str, access: str) -> dict[str, Expect]:
    values = FMTS["R32G32B32A32_SFLOAT"].texels(rng_for("crash-" + access))
    b.shader("read", shader)
    image(b, "src", "R32G32B32A32_SFLOAT", shader_access=access, src=dds_source(b, "in.dds", FMTS["R32G32B32A32_SFLOAT"], [values]))
    b.buffer("o", W * H * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    return {"o.npy": Expect(values, "<f4")}


def crash_load_readonly(b: ScenarioBuilder) -> dict[str, Expect]:
    """A ``readonly`` image that the shader imageLoads (image2D): the reference binds a combined image sampler
    (from readonly) and crashes; vkcap binds a storage image."""
    return _read_case(b, LOAD_F32, "readonly")


def crash_load_readwrite(b: ScenarioBuilder) -> dict[str, Expect]:
    """A ``readwrite`` image that the shader imageLoads, no descriptor_type: the reference binds a sampler and
    crashes; vkcap binds a storage image."""
    return _read_case(b, LOAD_F32, "readwrite")


def crash_fetch_image_read(b: ScenarioBuilder) -> dict[str, Expect]:
    """An ``image_read`` image that the shader samples (sampler2D texelFetch): the reference binds a storage
    image (from image_read) and crashes; vkcap binds a combined image sampler."""
    return _read_case(b, FETCH_F32, "image_read")


def crash_fetch_writeonly(b: ScenarioBuilder) -> dict[str, Expect]:
    """A ``writeonly`` image (with a DDS source) that the shader samples: the reference binds a storage image
    and crashes; vkcap binds a combined image sampler."""
    return _read_case(b, FETCH_F32, "writeonly")


REFERENCE_CRASHES = {f.__name__.removeprefix("crash_"): f for f in
                     (crash_store_readwrite, crash_load_readonly, crash_load_readwrite, crash_fetch_image_read,
                      crash_fetch_writeonly)}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("name", REFERENCE_CRASHES)
def test_reference_crashes_where_vkcap_follows_the_shader(name: str, tmp_path: Path) -> None:
    """The reference's descriptor type comes from shader_access and contradicts the shader: the validation
    layer says so (VUID-VkComputePipelineCreateInfo-layout-00703), and lavapipe then dies by a signal
    (NVIDIA's driver runs the invalid pipeline). vkcap takes the type from the SPIR-V and its outputs
    equal numpy's."""
    b = ScenarioBuilder(tmp_path / "scenario")
    expect = REFERENCE_CRASHES[name](b)
    ref, ours, _ = run_both(b, tmp_path, validate_reference=True)
    assert "VUID-VkComputePipelineCreateInfo-layout-00703" in ref.stdout, (ref.returncode, ref.stdout[-2000:])
    assert ours.returncode == 0, ours.stderr
    for dst, want in expect.items():
        want.check(tmp_path / "ours" / dst)


@pytest.mark.slow
@pytest.mark.device
def test_contradicting_descriptor_type_is_refused_where_the_reference_crashes(tmp_path: Path) -> None:
    """``descriptor_type: STORAGE_IMAGE`` on a binding the shader declares as a sampler2D: the reference
    builds a storage-image layout the shader contradicts (the validation layer says so; lavapipe then
    dies by SIGBUS); vkcap refuses the scenario before any Vulkan call, in one line naming the binding
    and what the shader declares."""
    b = ScenarioBuilder(tmp_path / "scenario")
    _read_case(b, FETCH_F32, "readonly")
    b.commands[0]["dispatch_compute"]["bindings"][0].update(STORAGE)
    ref, ours, scenario = run_both(b, tmp_path, validate_reference=True)
    assert "VUID-VkComputePipelineCreateInfo-layout-00703" in ref.stdout, (ref.returncode, ref.stdout[-2000:])
    assert ours.returncode == 2
    assert ours.stderr.strip() == (
        f"vkcap: error: {scenario}: commands[0].dispatch_compute.bindings[0].descriptor_type: descriptor_type "
        "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE contradicts the shader: shader 'read' declares set 0 binding 0 as a "
        "combined image sampler (sampler2D) 'src'")


@pytest.mark.slow
@pytest.mark.device
def test_min_and_mag_filter_are_not_swapped(tmp_path: Path) -> None:
    """``min_filter: NEAREST``, ``mag_filter: LINEAR``, texture() at level 0 (lod 0: magnification).

    vkcap follows the specification's words (``VkSamplerCreateInfo.magFilter = mag_filter``): bilinear.
    The reference passes ``min_filter`` as magFilter (vk::SamplerCreateInfo's argument order is flags, mag,
    min): NEAREST. The two outputs therefore differ, each equal to its own numpy model."""
    b = ScenarioBuilder(tmp_path / "scenario")
    fmt = FMTS["R32G32B32A32_SFLOAT"]
    texels = (rng_for("min-mag").integers(0, 64, (H, W, 4)) / 64).astype(np.float32)
    b.shader("read", sample_shader([fmt], 0.25))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [texels]), min_filter="NEAREST", mag_filter="LINEAR",
          border_address_mode="REPEAT")
    b.buffer("o", SW * SH * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (SW, SH))
    ref, ours, _ = run_both(b, tmp_path)
    assert ref.returncode == 0 and ours.returncode == 0, (ref.stderr[-2000:], ours.stderr)
    bilinear = sample(texels, 0.25, "REPEAT", None, linear=True).astype(np.float32)
    nearest = sample(texels, 0.25, "REPEAT", None, linear=False).astype(np.float32)
    Expect(bilinear, "<f4", atol=2e-3).check(tmp_path / "ours" / "o.npy")
    Expect(nearest, "<f4").check(tmp_path / "reference" / "o.npy")
    assert (tmp_path / "ours" / "o.npy").read_bytes() != (tmp_path / "reference" / "o.npy").read_bytes()


@pytest.mark.slow
@pytest.mark.device
def test_generated_mips_of_an_integer_format(tmp_path: Path) -> None:
    """mips=2 generated from one level of R16G16B16A16_SINT. Integer formats have no linear filtering:
    vkcap blits NEAREST (each level-1 texel is the level-0 texel (2x + 1, 2y + 1), where the centre of
    the destination texel lands). The reference blits LINEAR regardless, which the validation layer
    refuses (VUID-VkBlitImageInfo2-filter-02001): its level 1 is undefined (all zeros on lavapipe). On
    NVIDIA's H100 (driver 580.159) that blit faults the GPU and every other process's work on it is lost
    with it (VK_ERROR_DEVICE_LOST in concurrent tests, measured), so there the reference is not run:
    vkcap's levels are checked against numpy alone."""
    b = ScenarioBuilder(tmp_path / "scenario")
    fmt = FMTS["R16G16B16A16_SINT"]
    level0 = fmt.texels(rng_for("int-mips"))
    b.shader("read", all_levels_shader(fmt, 2))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [level0]), mips=2)
    b.buffer("o", (W * H + W * H // 4) * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    scenario = b.save()
    ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--validate")
    assert ours.returncode == 0, ours.stderr
    Expect(flat_levels([fmt.fetched(level0), fmt.fetched(level0[1::2, 1::2])]), "<i4").check(tmp_path / "ours" / "o.npy")
    if not on_a_cpu_device():
        return
    ref = run_reference(scenario, tmp_path / "reference", validate=True)
    assert ref.returncode == 0, ref.stderr[-2000:]
    assert "VUID-VkBlitImageInfo2-filter-02001" in ref.stdout, ref.stdout[-2000:]
    theirs = load_output(tmp_path / "reference" / "o.npy", np.int32).reshape(-1, 4)
    np.testing.assert_array_equal(theirs[: W * H], fmt.fetched(level0).reshape(-1, 4))


@pytest.mark.slow
@pytest.mark.device
def test_generated_mips_of_B10G11R11(tmp_path: Path) -> None:
    """lavapipe cannot blit into B10G11R11_UFLOAT_PACK32, so no mip chain can be generated for it: vkcap
    refuses in one line before running; the reference fails with 'No supported tiling for this data type'.
    Where the device blits it (NVIDIA), both runners generate the same levels."""
    b = ScenarioBuilder(tmp_path / "scenario")
    fmt = FMTS["B10G11R11_UFLOAT_PACK32"]
    b.shader("read", all_levels_shader(fmt, 2))
    image(b, "src", fmt.name, src=dds_source(b, "in.dds", fmt, [fmt.texels(rng_for("b10-mips"))]), mips=2)
    b.buffer("o", (W * H + W * H // 4) * 16, dst="o.npy")
    dispatch(b, "read", [(0, 0, "src"), (0, 1, "o")], (W, H))
    ref, ours, scenario = run_both(b, tmp_path)
    if blits_b10g11r11():
        assert ref.returncode == 0 and ours.returncode == 0, (ref.stderr[-2000:], ours.stderr)
        assert files(tmp_path / "ours") == files(tmp_path / "reference")
        return
    assert ref.returncode == 255 and "No supported tiling for this data type" in ref.stderr, ref.stderr[-2000:]
    assert ours.returncode == 2
    assert ours.stderr.strip() == (
        f"vkcap: error: {scenario}: resources[1].image.mips: format VK_FORMAT_B10G11R11_UFLOAT_PACK32 cannot "
        "generate mip levels on this device (no blit support with OPTIMAL tiling)")


def _default_device() -> tuple[int, int]:
    """The default device's type and B10G11R11_UFLOAT_PACK32 OPTIMAL features (a raw instance: no vkcap)."""
    instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
        pApplicationInfo=vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))), None)
    try:
        physical = vk.vkEnumeratePhysicalDevices(instance)[0]
        features = vk.vkGetPhysicalDeviceFormatProperties(physical, vk.VK_FORMAT_B10G11R11_UFLOAT_PACK32)
        return int(vk.vkGetPhysicalDeviceProperties(physical).deviceType), int(features.optimalTilingFeatures)
    finally:
        vk.vkDestroyInstance(instance, None)


def blits_b10g11r11() -> bool:
    wanted = vk.VK_FORMAT_FEATURE_BLIT_SRC_BIT | vk.VK_FORMAT_FEATURE_BLIT_DST_BIT
    return _default_device()[1] & wanted == wanted


def on_a_cpu_device() -> bool:
    return _default_device()[0] == vk.VK_PHYSICAL_DEVICE_TYPE_CPU


def test_case_table_is_large_enough() -> None:
    """At least 32 differential scenarios (each run by both runners), and every image format the reference
    reads from DDS (vkcore.resources.formats.dds_formats()) has its texelFetch case."""
    differential = [n for n in CASES if n.removeprefix("texelFetch-") not in NO_IMAGE_ON_LAVAPIPE]
    assert len(differential) >= 32, len(differential)
    assert {f"VK_FORMAT_{n}" for n in FMTS} >= set(dds_formats())
