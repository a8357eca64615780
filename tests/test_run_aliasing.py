"""Images and tensors sharing memory (``memory_group``; the deprecated ``alias_target`` is refused): a LINEAR tensor
laid over a LINEAR image with strides from the image's row pitch, with and without a shader."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import READ_TENSOR, WRITE_PATTERN, ScenarioBuilder, image_pattern, load_output, vkcap
from tests.reference import reference_runner, run_reference
from vkcore.resources.imageio import write_dds

W, H = 8, 4



def written() -> np.ndarray:
    return image_pattern(W, H)


def pair(b: ScenarioBuilder, *, image_fields: dict | None = None, tensor_fields: dict | None = None) -> None:
    group = {"memory_group": {"id": "g"}}
    b.resources.append({"image": {"uid": "img", "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                  "shader_access": "readwrite", **group, **(image_fields or {})}})
    b.resources.append({"tensor": {"uid": "t", "dims": [1, H, W, 4], "format": "VK_FORMAT_R32_SFLOAT",
                                   "shader_access": "readonly", "dst": "t.npy", **group, **(tensor_fields or {})}})


@pytest.mark.reference
def test_alias_target_is_refused_as_by_the_reference(builder: ScenarioBuilder, tmp_path: Path) -> None:
    pair(builder, tensor_fields={"alias_target": {"resource_ref": "img"}})
    builder.resources[1]["tensor"].pop("memory_group")
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"vkcap: error: {scenario}: resources[1].tensor.alias_target: the alias_target field is deprecated and refused "
        "(as the reference runner refuses it): share memory with a memory_group instead"))
    if reference_runner() is not None:
        ref = run_reference(scenario, tmp_path / "reference")
        assert ref.returncode == 255
        assert "The alias_target field is deprecated, please use the memory_group functionality instead" in ref.stdout + ref.stderr


@pytest.mark.slow
@pytest.mark.device
def test_shader_writes_an_image_a_tensor_reads_it(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("write", WRITE_PATTERN).shader("read", READ_TENSOR, build_options=f"-DWIDTH={W}")
    pair(builder)
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.dispatch("write", [(0, 0, "img")], [W, H])
    builder.dispatch("read", [(0, 0, "t"), (0, 1, "out")], [W, H])
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "out.npy", np.float32).reshape(H, W, 4), written())
    tensor = np.load(tmp_path / "t.npy")
    assert tensor.shape == (1, H, W, 4) and tensor.dtype == np.float32
    np.testing.assert_array_equal(tensor[0], written())


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.reference
def test_image_source_seen_through_a_tensor_without_a_shader(builder: ScenarioBuilder, tmp_path: Path) -> None:
    values = np.random.default_rng(9).random((H, W, 4), dtype=np.float32)
    write_dds(builder.root / "in.dds", W, H, 2, [values.tobytes()])  # DXGI_FORMAT_R32G32B32A32_FLOAT
    pair(builder, image_fields={"src": "in.dds"})
    builder.commands = []
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "t.npy")[0], values)
    if reference_runner() is not None:
        ref = run_reference(scenario, tmp_path / "reference")
        assert ref.returncode == 0, ref.stderr[-2000:]
        assert (tmp_path / "ours" / "t.npy").read_bytes() == (tmp_path / "reference" / "t.npy").read_bytes()


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize(
    "image_fields, tensor_fields, place, message",
    [
        ({"tiling": "OPTIMAL"}, {"tiling": "LINEAR"}, "resources[1].tensor.tiling",
         "Aliased resources must have identical tiling: tensor 't' is LINEAR but the image 'img' it aliases is "
         "OPTIMAL"),
        ({"mips": 2}, {}, "resources[0].image.mips", "A mipped image cannot be aliased"),
        ({}, {"dims": [1, H, W, 2]}, "resources[1].tensor.dims",
         "Aliased tensor innermost dimension: 2, must match number of components of image: 4; "
         f"tensor dims [1, {H}, {W}, 2] do not describe the image 'img' it aliases: expected [1, H, {W}, 4] (N, H, W, C) "
         f"with H at most {H}, for a {W}x{H} VK_FORMAT_R32G32B32A32_SFLOAT image"),
    ],
    ids=["mixed-tiling", "mipped-image", "dims"],
)
def test_aliasing_errors(builder: ScenarioBuilder, image_fields: dict, tensor_fields: dict, place: str, message: str) -> None:
    pair(builder, image_fields=image_fields, tensor_fields=tensor_fields)
    scenario = builder.save()
    proc = vkcap("run", scenario)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"vkcap: error: {scenario}: {place}: {message}"


@pytest.mark.slow
@pytest.mark.device
def test_explicit_image_barrier_and_record_replay_of_aliased_resources(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Without implicit barriers, an image_barrier (GENERAL -> GENERAL, compute write -> read) orders
    the image write before the tensor read; the recording captures image and tensor and replays clean."""
    builder.shader("write", WRITE_PATTERN).shader("read", READ_TENSOR, build_options=f"-DWIDTH={W}")
    pair(builder)
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.resource("image_barrier", uid="ib", image_resource="img", old_layout="IMAGE_LAYOUT_GENERAL",
                     new_layout="IMAGE_LAYOUT_GENERAL", src_access="ACCESS_COMPUTE_SHADER_WRITE",
                     dst_access="ACCESS_COMPUTE_SHADER_READ", src_stage=["COMPUTE"], dst_stage=["COMPUTE"],
                     subresource_range={"base_mip_level": 0, "level_count": 1, "base_array_layer": 0, "layer_count": 1})
    builder.dispatch("write", [(0, 0, "img")], [W, H], implicit_barrier=False)
    builder.barrier(image_barrier_refs=["ib"])
    builder.dispatch("read", [(0, 0, "t"), (0, 1, "out")], [W, H])
    builder.boundary(["img", "t", "out"], 0)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", builder.save(), "-o", trace, "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "out.npy", np.float32).reshape(H, W, 4), written())
    exported = tmp_path / "t0.npy"
    assert vkcap("export", trace, "--frame", "0", "--resource", "t", "-o", exported).returncode == 0
    np.testing.assert_array_equal(np.load(exported)[0], written())
    replay = vkcap("replay", trace)
    assert replay.returncode == 0, replay.stderr


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.reference
@pytest.mark.parametrize("offset, rows", [(256, 2), (0, 2), (128, 1), (64, 1), (64, 3)],
                         ids=["bottom-half", "top-half", "one-row", "mid-row", "mid-row-three"])
@pytest.mark.parametrize("tiling", ["LINEAR", "OPTIMAL"])
def test_a_tensor_over_part_of_an_image(builder: ScenarioBuilder, tmp_path: Path, tiling: str, offset: int,
                                        rows: int) -> None:
    """A tensor of fewer rows than the image, at a memory-group offset into it (a row boundary or inside a
    row), sees the texels from there on (rows of 128 bytes here, for both tilings on both devices tried),
    byte for byte as the reference's on lavapipe. On the NVIDIA H100 the reference's tensor reads other
    memory (different bytes on each run; even a whole OPTIMAL image): compared with numpy only there."""
    values = np.arange(H * W * 4, dtype=np.float32).reshape(H, W, 4)
    write_dds(builder.root / "in.dds", W, H, 2, [values.tobytes()])  # DXGI_FORMAT_R32G32B32A32_FLOAT
    pair(builder, image_fields={"src": "in.dds", "tiling": tiling},
         tensor_fields={"dims": [1, rows, W, 4], "tiling": tiling, "memory_group": {"id": "g", "offset": offset}})
    builder.commands = []
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "ours" / "t.npy")
    assert got.shape == (1, rows, W, 4)
    np.testing.assert_array_equal(got.reshape(-1), values.reshape(-1)[offset // 4: offset // 4 + rows * W * 4])
    if reference_runner() is not None and on_lavapipe():
        ref = run_reference(scenario, tmp_path / "reference")
        assert ref.returncode == 0, ref.stderr[-2000:]
        assert (tmp_path / "ours" / "t.npy").read_bytes() == (tmp_path / "reference" / "t.npy").read_bytes()


def on_lavapipe() -> bool:
    proc = vkcap("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)[0]["driver_name"] == "llvmpipe"


@pytest.mark.device
def test_a_tensor_reaching_past_its_image_is_refused(builder: ScenarioBuilder, tmp_path: Path) -> None:
    pair(builder, image_fields={"tiling": "LINEAR"},
         tensor_fields={"dims": [1, 2, W, 4], "tiling": "LINEAR", "memory_group": {"id": "g", "offset": 384}})
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"vkcap: error: {scenario}: resources[1].tensor.memory_group.offset: tensor 't' starts 384 bytes into the image "
        "'img' it aliases and covers 2 row(s) of 128 bytes: it must lie within the image's 4 rows, or within another "
        "member of memory group 'g'"))
