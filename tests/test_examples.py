"""The examples gallery: every example runs, byte for byte as ARM's reference runner runs it, and each
one's result is what numpy says it is."""
from __future__ import annotations

import pytest

import json
from pathlib import Path

import numpy as np

from tests.builders import vkcap
from tests.reference import assert_same_outputs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(name: str, tmp_path: Path) -> Path:
    scenario = EXAMPLES / name / "scenario.json"
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    outputs = [b["dst"] for r in json.loads(scenario.read_text())["resources"] for b in r.values() if b.get("dst")]
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, outputs)
    return tmp_path / "ours"


def test_every_example_has_a_readme() -> None:
    assert sorted(p.parent.name for p in EXAMPLES.glob("*/README.md")) == sorted(
        p.parent.name for p in EXAMPLES.glob("*/scenario.json"))


@pytest.mark.slow
@pytest.mark.device
def test_heat(tmp_path: Path) -> None:
    """200 explicit steps of the heat equation, as numpy takes them (the same float32 operations)."""
    out = run("heat", tmp_path)
    u = np.load(EXAMPLES / "heat" / "u0.npy").reshape(64, 64)
    for _ in range(200):
        v = np.zeros_like(u)
        around = (u[1:-1, :-2] + u[1:-1, 2:]) + (u[:-2, 1:-1] + u[2:, 1:-1])
        v[1:-1, 1:-1] = u[1:-1, 1:-1] + np.float32(0.2) * (around - np.float32(4.0) * u[1:-1, 1:-1])
        u = v
    got = np.load(out / "a.npy").view(np.float32).reshape(64, 64)
    np.testing.assert_allclose(got, u, rtol=1e-5, atol=1e-6)
    assert 0 < got.sum() < 6400  # heat leaves through the cold edges


@pytest.mark.slow
@pytest.mark.device
def test_fragment(tmp_path: Path) -> None:
    out = run("fragment", tmp_path)
    got = np.load(out / "pixels.npy").view(np.float32).reshape(32, 64, 4)
    y, x = np.mgrid[0:32, 0:64].astype(np.float32)
    u, v = (x + 0.5) / 64, (y + 0.5) / 32
    np.testing.assert_array_equal(got[..., 0], u)
    np.testing.assert_array_equal(got[..., 1], v)
    np.testing.assert_allclose(got[..., 2], 0.5 + 0.5 * np.sin(10 * u * v), atol=1e-5)
    assert (got[..., 3] == 1).all()


@pytest.mark.device
def test_add(tmp_path: Path) -> None:
    """Four frames of out += a + b * scale + BIAS over the first ``count`` elements (push constants:
    scale, count; BIAS a specialization constant)."""
    out = run("add", tmp_path)
    a, b = (np.load(EXAMPLES / "add" / f"{n}.npy").view(np.float32) for n in "ab")
    push = np.load(EXAMPLES / "add" / "push.npy").tobytes()
    scale, count = np.frombuffer(push[:4], np.float32)[0], int(np.frombuffer(push[4:8], np.uint32)[0])
    expected = np.zeros_like(a)
    for _ in range(4):
        expected[:count] = expected[:count] + a[:count] + b[:count] * scale + np.float32(0.25)
    # float32 sums in another order (and perhaps fused) differ in the last bits near zero
    np.testing.assert_allclose(np.load(out / "out.npy").view(np.float32), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.device
def test_blur(tmp_path: Path) -> None:
    """Each output pixel is the mean of the 2x2 texels around its corner (UNORM8 to float; the edge
    clamped), within one step of 8 bits (lavapipe rounds filtered UNORM8 results to 8 bits)."""
    from vkcore.resources.imageio import read_dds

    out = run("blur", tmp_path)
    rgba = np.frombuffer(read_dds(EXAMPLES / "blur" / "input.dds").levels[0], np.uint8).reshape(32, 32, 4) / 255.0
    padded = np.concatenate([rgba, rgba[-1:]], axis=0)
    padded = np.concatenate([padded, padded[:, -1:]], axis=1)  # clamp to edge
    expected = (padded[:-1, :-1] + padded[:-1, 1:] + padded[1:, :-1] + padded[1:, 1:]) / 4
    got = np.load(out / "pixels.npy").view(np.float32).reshape(32, 32, 4)
    np.testing.assert_allclose(got, expected, atol=1 / 255 + 1e-6)


@pytest.mark.slow
@pytest.mark.device
def test_conv2d(tmp_path: Path) -> None:
    from tests.test_run_graphs import conv2d_reference

    out = run("conv2d", tmp_path)
    x = np.load(EXAMPLES / "conv2d" / "x.npy")
    np.testing.assert_allclose(np.load(out / "y.npy"), conv2d_reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.device
def test_tensor_op(tmp_path: Path) -> None:
    """int8 requantization through VK_ARM_tensors: y = clamp((x * w[column] + 16) >> 5, -128, 127), exact."""
    out = run("tensor_op", tmp_path)
    x, w = (np.load(EXAMPLES / "tensor_op" / f"{n}.npy") for n in "xw")
    assert x.dtype == w.dtype == np.int8 and x.shape == (8, 16) and w.shape == (16,)
    expected = np.clip((x.astype(np.int32) * w + 16) >> 5, -128, 127).astype(np.int8)
    got = np.load(out / "y.npy")
    assert got.dtype == np.int8 and got.shape == (8, 16)
    np.testing.assert_array_equal(got, expected)
    assert (got == 127).any() and (got == -128).any()  # it saturates at both ends


@pytest.mark.slow
@pytest.mark.device
def test_graph_custom(tmp_path: Path) -> None:
    """GRAPH (1x1 conv2d + bias) -> COMPUTE (hard-swish, the custom shader) -> GRAPH (2x2 max-pool). The
    convolution is exact (inputs k/8, weights k/4, bias k/2); the division by 6 rounds."""
    folder = EXAMPLES / "graph_custom"
    # the model embeds hardswish.comp as it is (JSON-escaped, then as an MLIR string)
    assert json.dumps(json.dumps((folder / "hardswish.comp").read_text()))[1:-1] in (folder / "graph_custom.mlir").read_text()
    out = run("graph_custom", tmp_path)
    x = np.load(folder / "x.npy").astype(np.float64)
    w = np.array([[((5 * o + 3 * i) % 17 - 8) / 4 for i in range(4)] for o in range(8)])
    b = np.arange(8) / 2 - 2
    z = (np.einsum("nhwi,oi->nhwo", x, w) + b).astype(np.float32)
    assert (z < -3).any() and ((-3 < z) & (z < 3)).any() and (z > 3).any()  # hard-swish's three pieces
    act = z * np.clip(z + np.float32(3), 0, 6) / np.float32(6)
    expected = act.reshape(1, 2, 2, 2, 2, 8).max(axis=(2, 4))
    np.testing.assert_allclose(np.load(out / "y.npy"), expected, rtol=1e-6, atol=1e-7)
