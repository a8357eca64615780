"""The compiled codec loops (capture/kernels.c) against numpy references written here, element by
element: every width, sizes around the 8-element groups, unaligned buffers, and ``keep`` aliasing a
reference; each decoding loop against the numpy expression of its inverse. The declarations module is
what capture/kernels_build.py emits."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.builders import with_repo_path

from capture import kernels as K
from capture import kernels_build

SIZES = [0, 1, 7, 8, 9, 63, 64, 65, 4099]


def as_uint(data: np.ndarray, width: int) -> np.ndarray:
    return np.frombuffer(data.tobytes(), f"<u{width}")


def zigzag(d: np.ndarray) -> np.ndarray:
    bits = d.dtype.itemsize * 8
    return (d << d.dtype.type(1)) ^ (d.view(d.dtype.str.replace("u", "i")) >> (bits - 1)).view(d.dtype)


def unaligned(data: bytes) -> memoryview:
    """``data`` at an odd address."""
    room = bytearray(len(data) + 1)
    room[1:] = data
    return memoryview(room)[1:]


def mostly_repeating(rng: np.random.Generator, n: int, width: int) -> tuple[bytes, bytes, bytes]:
    b = rng.integers(0, 256, n * width, dtype=np.uint8)
    a = b.copy()
    a[rng.random(n * width) < 0.2] += np.uint8(3)
    cur = a.copy()
    cur[rng.random(n * width) < 0.1] -= np.uint8(5)
    return cur.tobytes(), a.tobytes(), b.tobytes()


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("zz", [False, True])
def test_residual_is_numpys_modular_difference(width: int, n: int, linear: bool, zz: bool) -> None:
    rng = np.random.default_rng(n * 16 + width)
    cur, a, b = mostly_repeating(rng, n, width)
    t = np.dtype(f"<u{width}")
    x, pa, pb = (np.frombuffer(v, t) for v in (cur, a, b))
    with np.errstate(over="ignore"):
        expected = x - (pa + pa - pb if linear else pa)
    if zz:
        expected = zigzag(expected)
    out = unaligned(bytes(n * width))
    keep = unaligned(bytes(n * width))
    zeros = K.residual(unaligned(cur), unaligned(a), unaligned(b) if linear else None, out, keep, n, width, zz)
    assert np.frombuffer(out, t).tolist() == expected.tolist()
    assert zeros == int(np.count_nonzero(expected == 0))
    assert keep.tobytes() == cur


@pytest.mark.parametrize("width", K.WIDTHS)
def test_keep_may_be_the_reference_it_replaces(width: int) -> None:
    rng = np.random.default_rng(width)
    cur, a, b = mostly_repeating(rng, 1000, width)
    separate = bytearray(len(cur))
    K.residual(cur, a, b, separate, None, 1000, width, True)
    older = bytearray(b)  # LINEAR's second reference, which receives the snapshot
    aliased = bytearray(len(cur))
    K.residual(cur, a, older, aliased, older, 1000, width, True)
    assert aliased == separate and bytes(older) == cur


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("density", [0.0, 0.05, 0.6, 1.0])
def test_sparse_is_a_bitmap_and_the_nonzero_elements(width: int, n: int, density: float) -> None:
    rng = np.random.default_rng(n + width)
    t = np.dtype(f"<u{width}")
    values = rng.integers(1, 2 ** (8 * width) - 1, n, dtype=t, endpoint=True) * (rng.random(n) < density).astype(t)
    mask = values != 0
    for zz in (False, True):
        bits, kept = K.sparse(unaligned(values.tobytes()), n, width, zz)
        assert bytes(bits) == np.packbits(mask, bitorder="little").tobytes()
        assert np.frombuffer(kept, t).tolist() == (zigzag(values[mask]) if zz else values[mask]).tolist()
    assert K.zeros(values.tobytes(), n, width) == n - int(mask.sum())


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("linear", [False, True])
def test_residual_sparse_is_the_sparse_parts_of_the_zigzagged_residual(width: int, n: int, linear: bool) -> None:
    rng = np.random.default_rng(n * 16 + width + 1)
    t = np.dtype(f"<u{width}")
    for density in (0.0, 0.03, 0.5, 1.0):
        pa, pb = (rng.integers(0, 2 ** (8 * width) - 1, n, dtype=t, endpoint=True) for _ in range(2))
        differences = rng.integers(1, 2 ** (8 * width) - 1, n, dtype=t, endpoint=True) * (rng.random(n) < density).astype(t)
        with np.errstate(over="ignore"):
            x = (pa + pa - pb if linear else pa) + differences
        cur, a, b = (v.tobytes() for v in (x, pa, pb))
        residual = zigzag(differences)
        mask = residual != 0
        for keep in ("none", "separate", "the oldest reference"):
            older, first = unaligned(b), unaligned(a)
            kept = {"none": None, "separate": unaligned(bytes(n * width)), "the oldest reference": older if linear else first}[keep]
            bits = unaligned(b"\xff" * -(-n // 8))
            values = unaligned(b"\xee" * (n * width))
            count = K.residual_sparse(unaligned(cur), first, older if linear else None, kept, bits, values, n, width)
            assert count == int(mask.sum()), (density, keep)
            assert bytes(bits) == np.packbits(mask, bitorder="little").tobytes(), (density, keep)
            assert np.frombuffer(values[: count * width], t).tolist() == residual[mask].tolist(), (density, keep)
            if kept is not None:
                assert kept.tobytes() == cur, (density, keep)


def test_sparse_refuses_a_count_that_is_not_the_datas() -> None:
    data = np.array([0, 5, 0, 7], np.uint32).tobytes()
    with pytest.raises(ValueError, match="2 non-zero elements, 1 expected"):
        K.sparse(data, 4, 4, False, nonzero=1)


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_planes_are_the_bytes_of_each_element(width: int, n: int) -> None:
    raw = np.random.default_rng(n).integers(0, 256, n * width, dtype=np.uint8)
    by_element = raw.reshape(n, width)
    for k in range(width):
        plane = unaligned(bytes(n))
        K.plane(unaligned(raw.tobytes()), n, width, k, plane)
        assert plane.tobytes() == by_element[:, k].tobytes()


@pytest.mark.parametrize("width", K.WIDTHS)
def test_zigzag_in_place(width: int) -> None:
    t = np.dtype(f"<u{width}")
    d = np.random.default_rng(width).integers(0, 2 ** (8 * width) - 1, 77, dtype=t, endpoint=True)
    buf = unaligned(d.tobytes())
    K.zigzag(buf, 77, width)
    assert np.frombuffer(buf, t).tolist() == zigzag(d).tolist()


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("linear", [False, True])
def test_restore_adds_the_unzigzagged_residual_to_the_prediction(width: int, n: int, linear: bool) -> None:
    rng = np.random.default_rng(n * 8 + width)
    t = np.dtype(f"<u{width}")
    z, a, b = (rng.integers(0, 2 ** (8 * width) - 1, n, dtype=t, endpoint=True) for _ in range(3))
    difference = (z >> t.type(1)) ^ (t.type(0) - (z & t.type(1)))
    with np.errstate(over="ignore"):
        expected = difference + (a + a - b if linear else a)
    out = unaligned(bytes(n * width))
    K.restore(unaligned(z.tobytes()), unaligned(a.tobytes()), unaligned(b.tobytes()) if linear else None, out, n, width)
    assert np.frombuffer(out, t).tolist() == expected.tolist()
    cur, ra, rb = mostly_repeating(rng, n, width)  # and it is the residual's inverse
    residual = bytearray(n * width)
    K.residual(cur, ra, rb if linear else None, residual, None, n, width, True)
    back = bytearray(n * width)
    K.restore(residual, ra, rb if linear else None, back, n, width)
    assert bytes(back) == cur


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_unplane_writes_byte_k_of_each_element(width: int, n: int) -> None:
    rng = np.random.default_rng(n + 3)
    planes = rng.integers(0, 256, (width, n), dtype=np.uint8)
    out = unaligned(bytes(n * width))
    for k in range(width):
        K.unplane(unaligned(planes[k].tobytes()), n, width, k, out)
    assert out.tobytes() == planes.T.tobytes()


@pytest.mark.parametrize("width", K.WIDTHS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("density", [0.0, 0.05, 0.6, 1.0])
def test_unsparse_puts_the_values_where_the_bits_are_set(width: int, n: int, density: float) -> None:
    rng = np.random.default_rng(n * 3 + width)
    t = np.dtype(f"<u{width}")
    mask = rng.random(n) < density
    bits = np.packbits(mask, bitorder="little").tobytes()
    values = rng.integers(1, 2 ** (8 * width) - 1, int(mask.sum()), dtype=t, endpoint=True)
    assert K.count_bits(unaligned(bits), n) == int(mask.sum())
    out = unaligned(b"\xff" * (n * width))  # every element is written, zeros included
    K.unsparse(unaligned(bits), unaligned(values.tobytes()), n, width, out)
    expected = np.zeros(n, t)
    expected[mask] = values
    assert np.frombuffer(out, t).tolist() == expected.tolist()


def test_count_bits_ignores_the_bits_past_n_and_unsparse_refuses_a_wrong_count() -> None:
    assert K.count_bits(bytes([0xFF, 0xFF]), 11) == 11
    with pytest.raises(ValueError, match="3 bits set for 2 values"):
        K.unsparse(bytes([0b1011]), bytes(8), 4, 4, bytearray(16))
    with pytest.raises(ValueError, match="do not fit"):
        K.unsparse(bytes([1]), bytes(6), 4, 4, bytearray(16))


def test_buffers_too_small_or_widths_unknown_are_refused() -> None:
    with pytest.raises(ValueError, match="needs 40 bytes in every buffer"):
        K.residual(bytes(40), bytes(40), None, bytearray(39), None, 10, 4, True)
    with pytest.raises(ValueError, match="element width 3"):
        K.zeros(bytes(9), 3, 3)
    with pytest.raises(ValueError, match="no plane 4 of 4-byte elements"):
        K.plane(bytes(8), 2, 4, 4, bytearray(2))
    with pytest.raises((TypeError, BufferError)):
        K.zigzag(bytes(8), 2, 4)  # read-only: nothing is written into it


def test_the_compiled_declarations_are_current(tmp_path: Path) -> None:
    fresh = tmp_path / "_kernels_cdefs.py"
    kernels_build.emit_cdefs(fresh)
    assert fresh.read_text() == (kernels_build.HERE / "_kernels_cdefs.py").read_text(), (
        "capture/kernels_build.py DECLARATIONS changed: run python -m capture.kernels_build --cdefs")


@pytest.mark.slow
@pytest.mark.device
def test_an_installed_vkcap_builds_its_loops_on_first_use(tmp_path: Path) -> None:
    """A vkcap installed from a wheel has ``capture/kernels.c`` (package data) but no ``_kernels.so``: the
    first command that needs the loops compiles them into the cache folder, once, and records a trace
    identical to one recorded with the built library."""
    import shutil
    import subprocess
    import sys
    import tomllib

    repo = Path(__file__).resolve().parent.parent
    data = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "kernels.c" in data["capture"]  # what a wheel ships beside capture/*.py
    installed = tmp_path / "site"
    for package in ("vkcore", "capture", "replay", "vkcap"):
        shutil.copytree(repo / package, installed / package, ignore=shutil.ignore_patterns("__pycache__", "_kernels.so"))
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": with_repo_path(installed), "VKCAP_CACHE_DIR": str(cache)}
    traces = []
    for k, python_path in enumerate((installed, installed, repo)):
        out = tmp_path / f"t{k}.vkt"
        done = subprocess.run([sys.executable, "-m", "vkcap", "record", str(repo / "examples/add/scenario.json"), "-o", str(out),
                               "--output", str(tmp_path / f"o{k}")], cwd=tmp_path, env={**env, "PYTHONPATH": with_repo_path(python_path)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        traces.append(out)
    built = sorted((cache / "kernels").glob("_kernels-*.so"))
    assert len(built) == 1 and not (installed / "capture" / "_kernels.so").exists()
    from capture.trace import Trace

    with Trace.open(traces[0]) as a, Trace.open(traces[2]) as b:
        assert [f.snapshots for f in a.frames] == [f.snapshots for f in b.frames]  # the same stored contents
