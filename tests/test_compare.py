"""``replay.compare.compare`` and ``replay.tolerances``: the numeric verdicts replay, diff and bisect rely on.

No Vulkan here: snapshots are numpy arrays turned into bytes. Floats are compared by value with
absolute, relative and ULP tolerances; NaN and Inf mismatches are counted apart and never pass a
tolerance; -0.0 and +0.0 are 0 ULP apart; integers are exact unless an absolute tolerance is given;
raw bytes compare byte by byte. Cases marked ``xfail(strict=True)`` are bugs found while writing these
tests (the reason says what is wrong and where).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from replay.compare import DIVERGED, DTYPES, WITHIN, Comparison, Tolerance, compare
from replay.results import IDENTICAL
from replay.tolerances import TolerancePolicy, load_tolerance_file
from vkcore.errors import UsageError

F32_MIN_SUB = np.array([1], np.uint32).view(np.float32)[0]  # 1.4e-45, the smallest positive subnormal
F16_MIN_SUB = np.array([1], np.uint16).view(np.float16)[0]


def b(values: Any, dtype: Any) -> bytes:
    return np.asarray(values, dtype=dtype).tobytes()


def cmp(recorded: Any, live: Any, dtype: str, np_dtype: Any = None, **tol: Any) -> Comparison:
    """Compare two value lists stored as ``np_dtype`` (default: the storage type of ``dtype``)."""
    storage = np_dtype or DTYPES[dtype][0]
    return compare("r", b(recorded, storage), b(live, storage), dtype=dtype, tolerance=Tolerance(**tol))


def bf16(values: Any) -> np.ndarray:
    """bfloat16 bit patterns of float32 values (exactly representable ones: truncation is exact)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bits32(*patterns: int) -> np.ndarray:
    return np.array(patterns, np.uint32).view(np.float32)


# --------------------------------------------------------------------------------------------------
# float32: exact, atol, rtol, ULP


def test_identical_bytes_are_identical() -> None:
    x = np.linspace(-3, 3, 11, dtype=np.float32)
    c = compare("out", x.tobytes(), x.tobytes(), dtype="float32")
    assert c.status == IDENTICAL and not c.diverged
    assert (c.count, c.differing, c.max_abs, c.max_ulp, c.first_index) == (11, 0, 0.0, 0, None)
    assert c.uid == "out" and c.dtype == "float32"


def test_one_ulp_diverges_without_tolerance() -> None:
    one_up = np.nextafter(np.float32(2), np.float32(3))
    c = cmp([1.0, 2.0, 3.0], [1.0, one_up, 3.0], "float32")
    assert c.status == DIVERGED and c.diverged
    assert c.differing == 1 and c.count == 3 and c.share == pytest.approx(1 / 3)
    assert c.max_ulp == 1 and c.max_abs == float(one_up) - 2.0
    assert c.first_index == (1,) and c.first_recorded == 2.0 and c.first_live == float(one_up)


@pytest.mark.parametrize("ulp, status", [(0, DIVERGED), (2, DIVERGED), (3, WITHIN), (100, WITHIN)])
def test_ulp_tolerance(ulp: int, status: str) -> None:
    x = np.float32(1.5)
    three_up = np.nextafter(np.nextafter(np.nextafter(x, np.float32(9)), np.float32(9)), np.float32(9))
    c = cmp([x, 7.0], [three_up, 7.0], "float32", ulp=ulp)
    assert c.max_ulp == 3 and c.differing == 1
    assert c.status == status


@pytest.mark.parametrize("atol, status", [(0.0, DIVERGED), (0.24, DIVERGED), (0.25, WITHIN), (1.0, WITHIN)])
def test_atol(atol: float, status: str) -> None:
    c = cmp([1.0, 2.0, -4.0], [1.0, 2.25, -4.0], "float32", atol=atol)
    assert c.max_abs == 0.25 and c.status == status


@pytest.mark.parametrize("rtol, status", [(0.01, DIVERGED), (0.0625, WITHIN)])
def test_rtol_is_relative_to_the_recorded_value(rtol: float, status: str) -> None:
    # |live - recorded| = 0.5 ; relative to recorded 8 -> 0.0625 (to live 8.5 it would be less)
    c = cmp([8.0], [8.5], "float32", rtol=rtol)
    assert c.max_rel == 0.0625 and c.status == status


def test_rtol_against_a_recorded_zero_never_passes() -> None:
    c = cmp([0.0, 1.0], [1e-30, 1.0], "float32", rtol=1.0)
    assert c.max_rel == math.inf and c.status == DIVERGED and c.first_index == (0,)
    assert cmp([0.0], [1e-30], "float32", rtol=1.0, atol=1e-29).status == WITHIN


def test_atol_and_ulp_are_either_or() -> None:
    """An element passes when it is within atol + rtol*|recorded| OR within ulp ULPs."""
    big, small = np.float32(1e6), np.float32(1e-6)
    big1 = np.nextafter(big, np.float32(2e6))  # 1 ULP but 0.0625 absolute
    small5 = small + np.float32(5e-7)  # tiny absolute, very many ULPs
    c = cmp([big, small], [big1, small5], "float32", atol=1e-5, ulp=1)
    assert c.differing == 2 and c.status == WITHIN
    assert cmp([big, small], [big1, small5], "float32", atol=1e-5).status == DIVERGED
    assert cmp([big, small], [big1, small5], "float32", ulp=1).status == DIVERGED


def test_first_index_points_at_the_first_failing_element_not_the_first_differing() -> None:
    c = cmp([1.0, 2.0, 3.0, 4.0], [1.0, 2.0001, 3.0, 5.0], "float32", atol=0.01)
    assert c.differing == 2 and c.status == DIVERGED
    assert c.first_index == (3,) and (c.first_recorded, c.first_live) == (4.0, 5.0)
    within = cmp([1.0, 2.0], [1.0, 2.0001], "float32", atol=0.01)
    assert within.status == WITHIN and within.first_index == (1,)  # no failure: the first difference


# --------------------------------------------------------------------------------------------------
# zeros, NaN and Inf


def test_negative_zero_equals_positive_zero_but_is_not_identical() -> None:
    c = cmp([0.0, 1.0], [-0.0, 1.0], "float32")
    assert c.status == WITHIN  # the values are equal: not DIVERGED, even without a tolerance ...
    assert c.status != IDENTICAL  # ... but the bytes differ, so not "identical" either
    assert (c.differing, c.max_ulp, c.max_abs) == (0, 0, 0.0)


@pytest.mark.parametrize("dtype, np_dtype", [("float16", np.float16), ("float32", np.float32), ("float64", np.float64)])
def test_negative_zero_in_every_float_width(dtype: str, np_dtype: Any) -> None:
    c = cmp([-0.0, 2.0], [0.0, 2.0], dtype, np_dtype)
    assert c.status == WITHIN and c.max_ulp == 0 and c.differing == 0


def test_ulp_distance_across_zero() -> None:
    """+smallest subnormal and -smallest subnormal are 2 ULP apart (-0 and +0 count once)."""
    pos, neg = bits32(0x00000001), bits32(0x80000001)
    assert float(pos[0]) == float(F32_MIN_SUB) and float(neg[0]) == -float(F32_MIN_SUB)
    c = compare("r", pos.tobytes(), neg.tobytes(), dtype="float32")
    assert c.max_ulp == 2 and c.status == DIVERGED
    assert compare("r", pos.tobytes(), neg.tobytes(), dtype="float32", tolerance=Tolerance(ulp=1)).status == DIVERGED
    assert compare("r", pos.tobytes(), neg.tobytes(), dtype="float32", tolerance=Tolerance(ulp=2)).status == WITHIN
    # each of them is 1 ULP from either zero
    for zero in (0x00000000, 0x80000000):
        for s in (pos, neg):
            assert compare("r", bits32(zero).tobytes(), s.tobytes(), dtype="float32").max_ulp == 1
    # float16 the same
    p16, n16 = np.array([0x0001], np.uint16), np.array([0x8001], np.uint16)
    assert compare("r", p16.tobytes(), n16.tobytes(), dtype="float16").max_ulp == 2


def test_both_nan_are_equal() -> None:
    nan = np.float32("nan")
    assert cmp([nan, 1.0], [nan, 1.0], "float32").status == IDENTICAL
    # a NaN with another payload (or sign) is still NaN == NaN: equal values, different bytes
    other = bits32(0xFFC00001)
    assert np.isnan(other[0])
    c = compare("r", b([nan, 1.0], np.float32), np.array([other[0], 1.0], np.float32).tobytes(), dtype="float32")
    assert c.status == WITHIN and c.nan_mismatches == 0 and c.differing == 0


@pytest.mark.parametrize("tol", [{}, {"atol": 1e30}, {"rtol": 1e30}, {"ulp": 2**31}, {"atol": math.inf, "ulp": 2**40}])
def test_nan_against_a_number_never_passes(tol: dict[str, Any]) -> None:
    nan = float("nan")
    c = cmp([1.0, nan, 3.0], [1.0, 2.0, 3.0], "float32", **tol)
    assert c.status == DIVERGED and c.nan_mismatches == 1 and c.differing == 1
    assert c.first_index == (1,) and math.isnan(c.first_recorded) and c.first_live == 2.0
    # the other way round too
    c = cmp([1.0, 2.0], [1.0, nan], "float32", **tol)
    assert c.status == DIVERGED and c.nan_mismatches == 1
    # NaN is left out of the magnitudes
    assert c.max_abs == 0.0 and c.max_ulp == 0


def test_nan_in_json_is_a_string() -> None:
    d = cmp([float("nan")], [1.0], "float32").as_dict()
    assert d["first_recorded"] == "nan" and d["first_live"] == 1.0 and d["first_index"] == [0]
    d = cmp([float("inf")], [1.0], "float32").as_dict()
    assert d["first_recorded"] == "inf"


def test_same_sign_inf_is_equal() -> None:
    inf = float("inf")
    assert cmp([inf, -inf], [inf, -inf], "float32").status == IDENTICAL
    assert cmp([inf, -inf], [inf, -inf], "float16", np.float16).status == IDENTICAL


@pytest.mark.parametrize("tol", [{}, {"atol": 1e38}, {"rtol": 1e9}, {"ulp": 2**31}])
@pytest.mark.parametrize("recorded, live", [(math.inf, 3.4e38), (-math.inf, 1.0), (1.0, math.inf), (math.inf, -math.inf)])
def test_inf_against_anything_else_is_an_inf_mismatch(recorded: float, live: float, tol: dict[str, Any]) -> None:
    c = cmp([0.5, recorded], [0.5, live], "float32", **tol)
    assert c.status == DIVERGED and c.inf_mismatches == 1 and c.nan_mismatches == 0
    assert c.differing == 1 and c.first_index == (1,)


def test_nan_against_inf_is_a_nan_mismatch() -> None:
    c = cmp([float("nan")], [float("inf")], "float32")
    assert c.status == DIVERGED and c.nan_mismatches == 1 and c.inf_mismatches == 0


def test_counts_of_nan_and_inf_mismatches() -> None:
    nan, inf = float("nan"), float("inf")
    c = cmp([nan, 1.0, inf, 2.0, nan, -inf], [1.0, nan, 5.0, 2.0, nan, -inf], "float32", atol=10)
    assert (c.nan_mismatches, c.inf_mismatches, c.differing) == (2, 1, 3)
    assert c.status == DIVERGED and c.first_index == (0,)


# --------------------------------------------------------------------------------------------------
# float16, bfloat16, float64


def test_float16_ulp_and_atol() -> None:
    one = np.float16(1)
    up2 = np.nextafter(np.nextafter(one, np.float16(2)), np.float16(2))  # 1 + 2 * 2**-10
    c = cmp([one, 4.0], [up2, 4.0], "float16", np.float16)
    assert c.status == DIVERGED and c.max_ulp == 2 and c.max_abs == 2 * 2.0**-10
    assert cmp([one], [up2], "float16", np.float16, ulp=2).status == WITHIN
    assert cmp([one], [up2], "float16", np.float16, ulp=1).status == DIVERGED
    assert cmp([one], [up2], "float16", np.float16, atol=2**-9).status == WITHIN
    assert cmp([one], [up2], "float16", np.float16, atol=2**-10).status == DIVERGED


def test_float16_subnormals_inf_and_nan() -> None:
    c = compare("r", np.array([F16_MIN_SUB], np.float16).tobytes(), np.array([0], np.float16).tobytes(), dtype="float16")
    assert c.max_ulp == 1 and c.max_abs == float(F16_MIN_SUB)
    assert cmp([65504.0], [np.inf], "float16", np.float16, ulp=1).inf_mismatches == 1  # max finite vs inf: never passes
    assert cmp([np.nan], [0.0], "float16", np.float16, atol=1).nan_mismatches == 1


def test_bfloat16_values_and_ulps() -> None:
    recorded = bf16([1.0, -2.0, 3.0])
    live = recorded.copy()
    live[1] += 3  # three bfloat16 steps away from -2: -2 - 3 * 2**-6
    c = compare("r", recorded.tobytes(), live.tobytes(), dtype="bfloat16")
    assert c.status == DIVERGED and c.count == 3 and c.differing == 1
    assert c.max_ulp == 3 and c.max_abs == pytest.approx(3 * 2.0**-6)
    assert c.first_index == (1,) and c.first_recorded == -2.0 and c.first_live == pytest.approx(-2 - 3 * 2.0**-6)
    assert compare("r", recorded.tobytes(), live.tobytes(), dtype="bfloat16", tolerance=Tolerance(ulp=3)).status == WITHIN
    assert compare("r", recorded.tobytes(), live.tobytes(), dtype="bfloat16", tolerance=Tolerance(atol=0.05)).status == WITHIN
    assert compare("r", recorded.tobytes(), live.tobytes(), dtype="bfloat16", tolerance=Tolerance(atol=0.04)).status == DIVERGED


def test_bfloat16_zero_nan_inf() -> None:
    z = compare("r", bf16([0.0]).tobytes(), bf16([-0.0]).tobytes(), dtype="bfloat16")
    assert z.status == WITHIN and z.max_ulp == 0
    pos, neg = np.array([0x0001], np.uint16), np.array([0x8001], np.uint16)
    assert compare("r", pos.tobytes(), neg.tobytes(), dtype="bfloat16").max_ulp == 2
    n = compare("r", bf16([np.nan]).tobytes(), bf16([1.0]).tobytes(), dtype="bfloat16", tolerance=Tolerance(atol=1e9))
    assert n.status == DIVERGED and n.nan_mismatches == 1
    i = compare("r", bf16([np.inf]).tobytes(), bf16([3e38]).tobytes(), dtype="bfloat16", tolerance=Tolerance(ulp=10**6))
    assert i.status == DIVERGED and i.inf_mismatches == 1
    assert compare("r", bf16([np.nan, np.inf]).tobytes(), bf16([np.nan, np.inf]).tobytes(), dtype="bfloat16").status == IDENTICAL


def test_float64_ulp() -> None:
    x = np.float64(1) / 3
    c = cmp([x], [np.nextafter(x, 1.0)], "float64")
    assert c.max_ulp == 1 and c.status == DIVERGED
    assert cmp([x], [np.nextafter(x, 1.0)], "float64", ulp=1).status == WITHIN


def _true_ulp64(x: float, y: float) -> int:
    def ordinal(v: float) -> int:
        bits = int(np.array([v], np.float64).view(np.uint64)[0])
        return -(bits & (2**63 - 1)) if bits >> 63 else bits

    return abs(ordinal(x) - ordinal(y))


def test_float64_ulp_distance_of_huge_opposite_values() -> None:
    c = cmp([1.7e308], [-1.7e308], "float64")
    assert c.max_ulp == _true_ulp64(1.7e308, -1.7e308)


# --------------------------------------------------------------------------------------------------
# integers, bool and raw bytes


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_integers_are_exact_unless_atol(dtype: str) -> None:
    recorded, live = [1, 5, 100], [1, 7, 100]
    c = cmp(recorded, live, dtype)
    assert c.status == DIVERGED and c.differing == 1 and c.max_abs == 2 and c.first_index == (1,)
    assert (c.first_recorded, c.first_live) == (5, 7)
    # rtol and ulp do not apply to integers: only atol does
    assert cmp(recorded, live, dtype, rtol=10.0).status == DIVERGED
    assert cmp(recorded, live, dtype, ulp=1000).status == DIVERGED
    assert cmp(recorded, live, dtype, atol=1.9).status == DIVERGED
    assert cmp(recorded, live, dtype, atol=2).status == WITHIN
    assert cmp(recorded, recorded, dtype).status == IDENTICAL


def test_signed_integers_compare_by_value() -> None:
    c = cmp([-128, 127], [127, -128], "int8")
    assert c.max_abs == 255 and c.differing == 2
    # the same bytes read as uint8: 128 vs 127
    u = compare("r", b([-128], np.int8), b([127], np.int8), dtype="uint8")
    assert u.max_abs == 1 and u.first_recorded == 128
    big = cmp([2**32 - 1], [0], "uint32")
    assert big.max_abs == 2**32 - 1 and big.first_recorded == 2**32 - 1


@pytest.mark.parametrize("dtype, a, b_", [("int64", 2**60, 2**60 + 1), ("uint64", 2**63, 2**63 + 1), ("int64", -(2**62), -(2**62) + 3)])
def test_large_64_bit_integers_that_differ_diverge(dtype: str, a: int, b_: int) -> None:
    assert cmp([a], [b_], dtype).status == DIVERGED


def test_64_bit_gaps_are_judged_exactly_against_atol() -> None:
    """A gap of 2**53 + 1 rounds to 2**53 as a float: it is beyond an atol of 2**53 all the same; and the
    widest gap, from the smallest int64 to the largest, is 2**64 - 1."""
    near = cmp([2**62, 7], [2**62 + 2**53 + 1, 7 + 2**53], "int64", atol=2.0**53)
    assert (near.status, near.differing, near.beyond_tolerance, near.first_index) == (DIVERGED, 2, 1, (0,))
    assert cmp([2**62], [2**62 + 2**53 + 1], "uint64", atol=2.0**53 + 2).status == WITHIN
    widest = cmp([-(2**63)], [2**63 - 1], "int64")
    assert widest.max_abs == float(2**64 - 1) and widest.max_rel == 2.0  # against |recorded| = 2**63
    assert cmp([-(2**63)], [2**63 - 1], "int64", atol=2.0**64).status == WITHIN


def test_bool_is_exact() -> None:
    assert cmp([0, 1], [0, 1], "bool", np.uint8).status == IDENTICAL
    c = cmp([0, 1], [1, 1], "bool", np.uint8)
    assert c.status == DIVERGED and c.first_index == (0,)


def test_raw_bytes() -> None:
    recorded = bytes(range(16))
    live = bytearray(recorded)
    live[9] ^= 0x80
    live[12] = 0
    c = compare("blob", recorded, bytes(live))  # dtype defaults to bytes
    assert c.dtype == "bytes" and c.status == DIVERGED
    assert c.count == 16 and c.differing == 2 and c.first_index == (9,)
    assert (c.first_recorded, c.first_live) == (9, 9 ^ 0x80)
    assert compare("blob", recorded, recorded).status == IDENTICAL
    assert compare("blob", recorded, memoryview(bytearray(recorded))).status == IDENTICAL
    # the byte-equality fast path for large snapshots (>= 4096 bytes) agrees with the small one
    big = np.random.default_rng(0).integers(0, 256, 10000, dtype=np.uint8)
    assert compare("blob", big.tobytes(), big.tobytes()).status == IDENTICAL
    other = big.copy()
    other[-1] ^= 1
    c = compare("blob", big.tobytes(), other.tobytes())
    assert c.status == DIVERGED and c.first_index == (9999,)


def test_difference_in_trailing_partial_element_diverges() -> None:
    recorded = np.float32(1).tobytes() + b"\x01\x02"
    live = np.float32(1).tobytes() + b"\x01\x03"
    assert compare("r", recorded, live, dtype="float32").status == DIVERGED


def test_unknown_dtype() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        compare("r", b"", b"", dtype="float8")


# --------------------------------------------------------------------------------------------------
# shapes and sizes


def test_first_index_is_n_dimensional_with_a_shape() -> None:
    recorded = np.zeros((2, 3, 4), np.float32)
    live = recorded.copy()
    live[1, 2, 3] = 1.0
    live[1, 0, 1] = 2.0  # earlier in C order: this is the first
    c = compare("img", recorded.tobytes(), live.tobytes(), dtype="float32", shape=(2, 3, 4))
    assert c.first_index == (1, 0, 1) and c.first_live == 2.0 and c.differing == 2
    assert c.as_dict()["first_index"] == [1, 0, 1]
    # without a shape, or with one that does not fit the element count: the flat index
    assert compare("img", recorded.tobytes(), live.tobytes(), dtype="float32").first_index == (13,)
    assert compare("img", recorded.tobytes(), live.tobytes(), dtype="float32", shape=(5, 5)).first_index == (13,)


def test_size_mismatch() -> None:
    c = compare("r", b([1, 2, 3], np.float32), b([1, 2], np.float32), dtype="float32", tolerance=Tolerance(atol=1e9))
    assert c.status == DIVERGED and c.size_mismatch == "recorded 12 bytes, live 8 bytes"
    assert c.count == 3 and c.differing == 3 and c.first_index is None
    c = compare("r", b"", b"x")
    assert c.status == DIVERGED and "recorded 0 bytes, live 1 bytes" in c.size_mismatch


def test_empty_snapshots_are_identical() -> None:
    c = compare("r", b"", b"", dtype="float32")
    assert c.status == IDENTICAL and c.count == 0 and c.share == 0.0


# --------------------------------------------------------------------------------------------------
# properties

FLOAT_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def float_arrays(np_dtype: Any, n: int | None = None) -> st.SearchStrategy[np.ndarray]:
    width = np.dtype(np_dtype).itemsize * 8
    shape = n if n is not None else st.integers(0, 24)
    return hnp.arrays(np_dtype, shape, elements=st.floats(width=width, allow_nan=True, allow_infinity=True))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=st.sampled_from(sorted(DTYPES)))
def test_property_compare_x_with_itself_is_identical(data: st.DataObject, dtype: str) -> None:
    raw = data.draw(st.binary(max_size=64))
    c = compare("r", raw, raw, dtype=dtype)
    assert c.status == IDENTICAL and c.differing == 0 and c.first_index is None


@settings(max_examples=150, deadline=None)
@given(x=float_arrays(np.float32))
def test_property_float_arrays_with_nan_and_inf_are_identical_to_themselves(x: np.ndarray) -> None:
    c = compare("r", x.tobytes(), x.copy().tobytes(), dtype="float32", tolerance=Tolerance())
    assert c.status == IDENTICAL


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(FLOAT_DTYPES)), n=st.integers(1, 16))
def test_property_ulp_distance_is_symmetric(data: st.DataObject, name: str, n: int) -> None:
    np_dtype = FLOAT_DTYPES[name]
    x = data.draw(float_arrays(np_dtype, n))
    y = data.draw(float_arrays(np_dtype, n))
    ulp = data.draw(st.integers(0, 2**20))
    xy = compare("r", x.tobytes(), y.tobytes(), dtype=name, tolerance=Tolerance(ulp=ulp))
    yx = compare("r", y.tobytes(), x.tobytes(), dtype=name, tolerance=Tolerance(ulp=ulp))
    assert xy.max_ulp == yx.max_ulp and xy.max_ulp >= 0
    assert xy.max_abs == yx.max_abs
    assert (xy.nan_mismatches, xy.inf_mismatches, xy.differing) == (yx.nan_mismatches, yx.inf_mismatches, yx.differing)
    # with a ULP-only tolerance the verdict is symmetric too (up to identical <-> identical)
    assert xy.diverged == yx.diverged


@settings(max_examples=200, deadline=None)
@given(x=st.floats(width=32, allow_nan=False, allow_infinity=False), steps=st.integers(0, 40), up=st.booleans())
def test_property_ulp_distance_counts_representable_floats(x: float, steps: int, up: bool) -> None:
    """Stepping ``steps`` times with nextafter gives a distance of ``steps`` ULP (across zero too)."""
    start = np.float32(x)
    y = start
    target = np.float32(np.inf if up else -np.inf)
    with np.errstate(over="ignore"):  # stepping past the largest float gives inf: that example is dropped
        for _ in range(steps):
            y = np.nextafter(y, target)
    assume(np.isfinite(y))
    c = compare("r", np.array([start]).tobytes(), np.array([y]).tobytes(), dtype="float32")
    assert c.max_ulp == steps
    assert (c.status == DIVERGED) == (steps > 0 and not (start == 0 and y == 0))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(data=st.data(), name=st.sampled_from(["float16", "float32", "bfloat16"]), n=st.integers(1, 16))
def test_property_within_tolerance_is_monotonic_in_ulp(data: st.DataObject, name: str, n: int) -> None:
    if name == "bfloat16":
        x = data.draw(hnp.arrays(np.uint16, n))
        y = data.draw(hnp.arrays(np.uint16, n))
    else:
        x = data.draw(float_arrays(FLOAT_DTYPES[name], n))
        # mostly nearby values, so that some tolerances pass and some do not
        noise = data.draw(hnp.arrays(np.int16, n, elements=st.integers(-64, 64)))
        bits = x.view(np.uint16 if name == "float16" else np.uint32).astype(np.int64)
        y = np.clip(bits + noise, 0, 2 ** (x.itemsize * 8) - 1).astype(x.view(np.uint16 if name == "float16" else np.uint32).dtype).view(x.dtype)
    low = data.draw(st.integers(0, 200))
    high = data.draw(st.integers(low, 400))
    atol = data.draw(st.sampled_from([0.0, 1e-3, 1.0]))
    c_low = compare("r", x.tobytes(), y.tobytes(), dtype=name, tolerance=Tolerance(atol=atol, ulp=low))
    c_high = compare("r", x.tobytes(), y.tobytes(), dtype=name, tolerance=Tolerance(atol=atol, ulp=high))
    if not c_low.diverged:
        assert not c_high.diverged
    # and a tolerance of max_ulp is always enough when nothing is NaN/Inf-mismatched
    if c_low.nan_mismatches == c_low.inf_mismatches == 0:
        assert not compare("r", x.tobytes(), y.tobytes(), dtype=name, tolerance=Tolerance(ulp=max(1, c_low.max_ulp))).diverged


# --------------------------------------------------------------------------------------------------
# TOML tolerance files


def toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "tol.toml"
    p.write_text(text)
    return p


def test_tolerance_file_valid(tmp_path: Path) -> None:
    policy = load_tolerance_file(toml(tmp_path, """
[default]
ulp = 2
rtol = 1e-6

[resources.output]
atol = 1e-5
dtype = "float32"

[resources.half]
dtype = "float16"
ulp = 8

[resources.counts]
atol = 3
"""))
    assert policy.default == Tolerance(rtol=1e-6, ulp=2)
    # a resource table starts from [default] and overrides what it names
    assert policy.for_resource("output", "float32") == Tolerance(atol=1e-5, rtol=1e-6, ulp=2)
    assert policy.for_resource("half", "float16") == Tolerance(rtol=1e-6, ulp=8)
    assert policy.for_resource("counts", "bytes") == Tolerance(atol=3.0, rtol=1e-6, ulp=2)
    assert isinstance(policy.for_resource("counts", "bytes").atol, float)  # an integer in TOML becomes a float atol
    assert policy.for_resource("other", "bytes") == policy.default
    assert policy.dtypes == {"output": "float32", "half": "float16"}


def test_tolerance_file_empty_and_default_only(tmp_path: Path) -> None:
    assert load_tolerance_file(toml(tmp_path, "")) == TolerancePolicy()
    policy = load_tolerance_file(toml(tmp_path, "[default]\natol = 0.5\n"))
    assert policy.for_resource("anything", "float32") == Tolerance(atol=0.5)


def test_tolerance_file_command_line_defaults(tmp_path: Path) -> None:
    policy = load_tolerance_file(toml(tmp_path, "[default]\nulp = 2\n[resources.out]\natol = 1.0\n"))
    merged = policy.with_defaults(atol=None, rtol=0.5, ulp=None)
    assert merged.default == Tolerance(rtol=0.5, ulp=2)
    assert merged.for_resource("out", "float32").atol == 1.0


def test_command_line_tolerance_reaches_a_resource_whose_table_only_sets_dtype(tmp_path: Path) -> None:
    policy = load_tolerance_file(toml(tmp_path, '[resources.out]\ndtype = "float32"\n'))
    assert policy.with_defaults(atol=None, rtol=None, ulp=4).for_resource("out", "float32").ulp == 4


@pytest.mark.parametrize("text, message", [
    ("[default]\nulps = 2\n", "default.ulps: unknown key (expected atol, rtol, ulp or dtype)"),
    ("[resources.out]\ntol = 1e-3\n", "resources.out.tol: unknown key (expected atol, rtol, ulp or dtype)"),
    ("[default]\natol = -1e-3\n", "default.atol: must be a finite number >= 0, got -0.001"),
    ("[resources.out]\nulp = -1\n", "resources.out.ulp: must be a whole number >= 0 and below 2**63, got -1"),
    ("[resources.out]\nrtol = \"big\"\n", "resources.out.rtol: must be a finite number >= 0, got 'big'"),
    ("[resources.out]\natol = true\n", "resources.out.atol: must be a finite number >= 0, got True"),
    ('[resources.out]\ndtype = "float8"\n', "resources.out.dtype: unknown type 'float8'"),
    ("[tolerances]\natol = 1\n", "unknown table(s): tolerances"),
    ("resources = 3\n", "resources: expected a table of resource uids"),
    ("[resources]\nout = 3\n", "resources.out: expected a table"),
    ("default = 1\n", "default: expected a table"),
    ("[default\natol = 1\n", "invalid TOML"),
])
def test_tolerance_file_errors_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = toml(tmp_path, text)
    with pytest.raises(UsageError) as info:
        load_tolerance_file(path)
    rendered = info.value.render()
    assert rendered.startswith(str(path)) and message in rendered
    assert info.value.exit_code == 2


def test_tolerance_file_missing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such tolerance file"):
        load_tolerance_file(tmp_path / "nope.toml")


def test_tolerance_file_dtype_changes_the_verdict(tmp_path: Path) -> None:
    """The per-resource dtype is what turns a byte difference into a float within its ULP tolerance."""
    policy = load_tolerance_file(toml(tmp_path, '[resources.out]\ndtype = "float32"\nulp = 1\n'))
    x = np.float32(3)
    recorded, live = b([x], np.float32), b([np.nextafter(x, np.float32(4))], np.float32)
    dtype = policy.dtypes["out"]
    assert compare("out", recorded, live, dtype=dtype, tolerance=policy.for_resource("out", dtype)).status == WITHIN
    assert compare("out", recorded, live, tolerance=policy.for_resource("out", "bytes")).status == DIVERGED


def test_statistics_of_a_few_diverged_elements_in_a_large_array_are_exact() -> None:
    """Only bitwise-different elements are examined: the answers must be those of the whole array."""
    rng = np.random.default_rng(7)
    recorded = rng.standard_normal(1 << 20).astype(np.float32)
    recorded[10] = 0.0
    live = recorded.copy()
    live[10] = -0.0  # bitwise different, equal in value: not differing
    live[700_001] += np.float32(0.5)
    live[900_000] = np.nan  # a NaN where a number was recorded
    live[123_456] = np.nextafter(recorded[123_456], np.float32(np.inf))  # one ULP
    c = compare("x", recorded.tobytes(), live.tobytes(), dtype="float32", shape=(1024, 1024))
    assert (c.status, c.count, c.differing, c.nan_mismatches, c.inf_mismatches) == (DIVERGED, 1 << 20, 3, 1, 0)
    assert c.max_abs == pytest.approx(float(np.float64(live[700_001]) - np.float64(recorded[700_001])))
    assert c.max_ulp >= 1 and c.first_index == divmod(123_456, 1024)
    assert (c.first_recorded, c.first_live) == (float(recorded[123_456]), float(live[123_456]))
    within = compare("x", recorded.tobytes(), live.tobytes(), dtype="float32", tolerance=Tolerance(ulp=1))
    assert within.first_index == (700_001,)  # the first *failing* element once one ULP is allowed


# --------------------------------------------------------------------------------------------------
# Tolerance-aware counts: what differs at all, and what is beyond the tolerance in force


def _ulps32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Reference ULP distance of float32 arrays in numpy: ordered integers, -0 equal to +0."""
    def ordered(x: np.ndarray) -> np.ndarray:
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


@pytest.mark.parametrize("dtype, storage", [("float32", np.float32), ("float16", np.float16)])
def test_beyond_tolerance_counts_and_statistics_against_numpy(dtype: str, storage: Any) -> None:
    """1000 elements: 300 moved by 1-3 ULP (within --ulp 4), 5 moved far, one NaN where a number was,
    one Inf, one -0.0 for +0.0 (identical by value): ``differing`` counts every changed value,
    ``beyond_tolerance`` the far ones and the NaN/Inf mismatches, and the statistics of the latter are
    numpy's."""
    rng = np.random.default_rng(3)
    recorded = (rng.random(1000) + 0.5).astype(storage)
    live = recorded.copy()
    bits = live.view(np.uint16 if storage == np.float16 else np.uint32)
    near = rng.choice(np.arange(10, 1000), 300, replace=False)
    bits[near] += rng.integers(1, 4, 300).astype(bits.dtype)
    far = np.array([0, 2, 4, 6, 8])
    live[far] = recorded[far] * 3
    live[1], live[3] = np.nan, np.inf
    recorded[5], live[5] = 0.0, -0.0
    c = compare("r", recorded.tobytes(), live.tobytes(), dtype=dtype, tolerance=Tolerance(ulp=4))
    wide_r, wide_l = recorded.astype(np.float64), live.astype(np.float64)
    changed = ~((wide_r == wide_l) | (np.isnan(wide_r) & np.isnan(wide_l)))
    assert c.differing == int(changed.sum()) == 300 + 5 + 2
    assert c.beyond_tolerance == 5 + 2 and c.beyond_share == pytest.approx(7 / 1000)
    assert (c.nan_mismatches, c.inf_mismatches) == (1, 1)
    assert c.status == DIVERGED and c.first_index == (0,)
    far_err = np.abs(wide_l[far] - wide_r[far])
    assert c.beyond_max_abs == pytest.approx(far_err.max()) and c.beyond_max_rel == pytest.approx((far_err / wide_r[far]).max())
    finite = changed & np.isfinite(wide_l)
    assert c.max_abs == pytest.approx(np.abs(wide_l - wide_r)[finite].max())
    if dtype == "float32":
        assert c.max_ulp == int(_ulps32(recorded[finite], live[finite]).max())
        assert c.beyond_max_ulp == int(_ulps32(recorded[far], live[far]).max())
    within = compare("r", recorded[10:].tobytes(), live[10:].tobytes(), dtype=dtype, tolerance=Tolerance(ulp=4))
    assert (within.status, within.differing, within.beyond_tolerance) == (WITHIN, 300, 0)
    assert within.beyond_max_abs == 0.0 and within.max_ulp == 3


def test_beyond_tolerance_for_bfloat16_and_int8() -> None:
    recorded, live = bf16([1.0, 2.0, -0.0, 4.0]), bf16([1.0, 2.015625, 0.0, 8.0])  # 1 ULP, -0 == +0, far
    c = compare("r", recorded.tobytes(), live.tobytes(), dtype="bfloat16", tolerance=Tolerance(ulp=1))
    assert (c.differing, c.beyond_tolerance, c.first_index, c.beyond_max_abs) == (2, 1, (3,), 4.0)
    a, z = np.array([0, 5, -7, 100], np.int8), np.array([1, 5, -9, 90], np.int8)
    exact = compare("r", a.tobytes(), z.tobytes(), dtype="int8")
    assert (exact.differing, exact.beyond_tolerance, exact.first_index) == (3, 3, (0,))
    loose = compare("r", a.tobytes(), z.tobytes(), dtype="int8", tolerance=Tolerance(atol=2))
    assert (loose.differing, loose.beyond_tolerance, loose.first_index, loose.beyond_max_abs) == (3, 1, (3,), 10.0)
    assert loose.as_dict()["beyond_tolerance"] == 1 and loose.as_dict()["beyond_share"] == 0.25


def test_statistics_against_numpy() -> None:
    """Over all elements (equal ones have no error) and over those beyond the tolerance: max, mean,
    median and p99 of the absolute error, the mean relative error, the ULP histogram, both sides' value
    ranges, the cosine similarity, and the first offending elements (``top``)."""
    rng = np.random.default_rng(11)
    recorded = (rng.random(2000) * 4 - 2).astype(np.float32)
    recorded[recorded == 0] = 1
    live = recorded.copy()
    bits = live.view(np.uint32)
    moved = rng.choice(2000, 700, replace=False)
    steps = rng.integers(1, 300, 700).astype(np.uint32)
    bits[moved] += steps
    c = compare("r", recorded.tobytes(), live.tobytes(), dtype="float32", tolerance=Tolerance(ulp=15), top=3)
    wr, wl = recorded.astype(np.float64), live.astype(np.float64)
    err = np.abs(wl - wr)
    ulps = _ulps32(recorded, live)
    beyond = ulps > 15
    s = c.statistics
    assert s["all"]["abs"]["max"] == pytest.approx(err.max())
    assert s["all"]["abs"]["mean"] == pytest.approx(err.mean())
    assert s["all"]["abs"]["median"] == pytest.approx(np.quantile(err, 0.5, method="inverted_cdf"))
    assert s["all"]["abs"]["p99"] == pytest.approx(np.quantile(err, 0.99, method="inverted_cdf"))
    assert s["all"]["mean_rel"] == pytest.approx((err / np.abs(wr)).mean())
    assert s["beyond"]["abs"]["mean"] == pytest.approx(err[beyond].mean())
    assert s["beyond"]["abs"]["p99"] == pytest.approx(np.quantile(err[beyond], 0.99, method="inverted_cdf"))
    assert s["beyond"]["mean_rel"] == pytest.approx((err / np.abs(wr))[beyond].mean())
    edges = [0, 1, 2, 4, 16, 256, np.inf]
    expected = {label: int(((ulps >= lo) & (ulps < hi)).sum())
                for label, lo, hi in zip(("0", "1", "2-3", "4-15", "16-255", "256+"), edges, edges[1:])}
    assert s["all"]["ulp_histogram"] == expected and sum(expected.values()) == 2000
    assert s["beyond"]["ulp_histogram"] == {**{k: 0 for k in ("0", "1", "2-3", "4-15")},
                                            "16-255": expected["16-255"], "256+": expected["256+"]}
    assert s["recorded"] == pytest.approx({"min": wr.min(), "max": wr.max(), "mean": wr.mean()})
    assert s["live"] == pytest.approx({"min": wl.min(), "max": wl.max(), "mean": wl.mean()})
    assert s["cosine_similarity"] == pytest.approx(wr @ wl / np.linalg.norm(wr) / np.linalg.norm(wl))
    first = np.flatnonzero(beyond)[:3]
    assert c.top == [{"index": [int(i)], "recorded": float(recorded[i]), "live": float(live[i])} for i in first]
    assert c.beyond_tolerance == int(beyond.sum()) and c.first_index == (int(first[0]),)


def test_integer_statistics_stay_exact() -> None:
    a = np.array([0, 5, -7, 100, 3], np.int8)
    z = np.array([1, 5, -9, 90, 3], np.int8)
    c = compare("r", a.tobytes(), z.tobytes(), dtype="int8", tolerance=Tolerance(atol=2), top=5)
    assert c.statistics["all"]["abs"] == {"max": 10.0, "mean": 13 / 5, "median": 1.0, "p99": 10.0}
    assert c.statistics["beyond"]["abs"] == {"max": 10.0, "mean": 10.0, "median": 10.0, "p99": 10.0}
    assert c.statistics["recorded"] == {"min": -7.0, "max": 100.0, "mean": 101 / 5}
    assert "ulp_histogram" not in c.statistics["all"] and "cosine_similarity" not in c.statistics
    assert c.top == [{"index": [3], "recorded": 100, "live": 90}]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "uint32", "int64", "uint64"])
def test_integer_statistics_of_many_differing_elements_match_numpy(dtype: str) -> None:
    """Half a million elements, a third differing, against numpy (as exact Python integers for 64 bits):
    counts, maxima, means and the inverted-CDF median and p99, over all elements and beyond the tolerance."""
    rng = np.random.default_rng(len(dtype))
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), -(2**40)), min(int(info.max), 2**40)
    a = rng.integers(lo, hi, 500_000, dtype=dtype, endpoint=True)
    b = a.copy()
    changed = rng.random(a.size) < 1 / 3
    b[changed] = rng.integers(lo, hi, int(changed.sum()), dtype=dtype, endpoint=True)
    atol = float(min(1000, hi // 4))
    c = compare("r", a.tobytes(), b.tobytes(), dtype=dtype, tolerance=Tolerance(atol=atol))
    gap = np.array([abs(int(x) - int(y)) for x, y in zip(a.tolist(), b.tolist())], dtype=object)
    err = gap.astype(np.float64)
    base = np.abs(a.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(base > 0, err / np.where(base > 0, base, 1), np.where(err > 0, np.inf, 0.0))
    beyond = np.array([g > atol for g in gap.tolist()])
    assert (c.differing, c.beyond_tolerance) == (int((err > 0).sum()), int(beyond.sum()))
    assert (c.max_abs, c.max_rel, c.beyond_max_abs) == (err.max(), rel.max(), err[beyond].max())
    s = c.statistics
    assert s["all"]["abs"] == pytest.approx({"max": err.max(), "mean": err.mean(),
                                             "median": np.quantile(err, 0.5, method="inverted_cdf"),
                                             "p99": np.quantile(err, 0.99, method="inverted_cdf")})
    assert s["beyond"]["abs"]["p99"] == pytest.approx(np.quantile(err[beyond], 0.99, method="inverted_cdf"))
    finite = np.where(np.isfinite(rel), rel, 0.0)
    assert s["all"]["mean_rel"] == pytest.approx(finite.mean()) and s["beyond"]["mean_rel"] == pytest.approx(finite[beyond].mean())


def test_float8_values_and_ulps() -> None:
    """E4M3: 448 is the largest value, S.1111.111 NaN, no Inf; E5M2: 57344 the largest, exponent 31 Inf
    or NaN. Adjacent codes are 1 ULP apart, across zero too (-0 equals +0)."""
    e4 = np.array([0x38, 0x7E, 0x01, 0x80, 0x7F], np.uint8)  # 1.0, 448, smallest subnormal, -0.0, NaN
    c = compare("r", e4.tobytes(), np.array([0x39, 0x7E, 0x02, 0x00, 0x7F], np.uint8).tobytes(), dtype="float8e4m3",
                tolerance=Tolerance(ulp=1))
    assert (c.status, c.differing, c.max_ulp, c.nan_mismatches) == (WITHIN, 2, 1, 0)
    assert c.statistics["recorded"] == {"min": 0.0, "max": 448.0, "mean": pytest.approx((1 + 448 + 2**-9) / 4)}
    assert c.max_abs == pytest.approx(0.125)  # 1.0 -> 1.125
    e5 = np.array([0x3C, 0x7B, 0x7C], np.uint8)  # 1.0, 57344, +Inf
    d = compare("r", e5.tobytes(), np.array([0x3C, 0x7B, 0x7D], np.uint8).tobytes(), dtype="float8e5m2")
    assert (d.status, d.nan_mismatches, d.inf_mismatches, d.first_index) == (DIVERGED, 1, 0, (2,))
    assert compare("r", e5.tobytes(), np.array([0x3C, 0x7A, 0x7C], np.uint8).tobytes(), dtype="float8e5m2").max_ulp == 1


def test_tolerance_presets(tmp_path: Path) -> None:
    from replay.tolerances import preset_policy

    torch = preset_policy("torch", "--tolerance preset:torch")
    assert torch.for_resource("x", "float16") == Tolerance(atol=1e-5, rtol=1e-3)
    assert torch.for_resource("x", "bfloat16") == Tolerance(atol=1e-5, rtol=1.6e-2)
    assert torch.for_resource("x", "float32") == Tolerance(atol=1e-5, rtol=1.3e-6)
    assert torch.for_resource("x", "int8") == Tolerance() and torch.for_resource("x", "float8e4m3") == Tolerance()
    assert preset_policy("strict", "x").for_resource("x", "float32") == Tolerance()
    assert torch.with_defaults(None, None, 3).for_resource("x", "float32") == Tolerance(atol=1e-5, rtol=1.3e-6, ulp=3)
    with pytest.raises(UsageError, match=r"--tolerance preset:numpy: unknown tolerance preset 'numpy' \(known: torch, strict\)"):
        preset_policy("numpy", "--tolerance preset:numpy")
    f = tmp_path / "t.toml"
    f.write_text('preset = "torch"\n[default]\nulp = 2\n[resources.out]\natol = 0.5\n')
    policy = load_tolerance_file(f)
    assert policy.for_resource("out", "float32") == Tolerance(atol=0.5, rtol=1.3e-6, ulp=2)
    assert policy.for_resource("other", "float16") == Tolerance(atol=1e-5, rtol=1e-3, ulp=2)
    assert policy.for_resource("other", "uint8") == Tolerance(ulp=2)
    f.write_text('preset = "loose"\n')
    with pytest.raises(UsageError, match="preset: unknown tolerance preset 'loose'"):
        load_tolerance_file(f)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float8e4m3", "int8", "uint64"])
def test_statistics_gathered_in_chunks_equal_those_of_one_pass(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare() works through large data a chunk at a time: with chunks of 1,000 elements the counts,
    maxima, quantiles, histograms and first offending elements are exactly those of one chunk (the sums
    within rounding)."""
    import replay.compare as C

    rng = np.random.default_rng(7)
    storage = np.dtype(DTYPES[dtype][0])
    raw = rng.integers(0, 256, 25_000 * storage.itemsize, dtype=np.uint8)
    a = raw.tobytes()
    changed = raw.copy()
    flip = rng.random(changed.size) < 0.2
    changed[flip] = rng.integers(0, 256, int(flip.sum()), dtype=np.uint8)
    b = changed.tobytes()
    tolerance = Tolerance(ulp=3, atol=1e-3) if DTYPES[dtype][1] else Tolerance(atol=20)
    whole = compare("r", a, b, dtype=dtype, tolerance=tolerance, top=7)
    monkeypatch.setattr(C, "CHUNK_ELEMENTS", 1000)
    chunked = compare("r", a, b, dtype=dtype, tolerance=tolerance, top=7)
    assert whole.differing > 1000 and whole.beyond_tolerance > 0
    for name in ("status", "differing", "beyond_tolerance", "max_abs", "max_rel", "beyond_max_abs", "beyond_max_rel",
                 "max_ulp", "beyond_max_ulp", "nan_mismatches", "inf_mismatches", "first_index"):
        assert getattr(chunked, name) == getattr(whole, name), name
    assert repr(chunked.top) == repr(whole.top)  # (NaN values: equal as text, not as floats)
    for part in ("all", "beyond"):
        w, c = whole.statistics[part], chunked.statistics[part]
        assert (c["abs"]["max"], c["abs"]["median"], c["abs"]["p99"]) == (w["abs"]["max"], w["abs"]["median"], w["abs"]["p99"])
        assert c["abs"]["mean"] == pytest.approx(w["abs"]["mean"]) and c["mean_rel"] == pytest.approx(w["mean_rel"])
        assert c.get("ulp_histogram") == w.get("ulp_histogram")
    for side in ("recorded", "live"):
        assert chunked.statistics[side] == pytest.approx(whole.statistics[side])
    assert chunked.statistics.get("cosine_similarity") == pytest.approx(whole.statistics.get("cosine_similarity"))
