"""Numeric comparison of two snapshots of one resource: identical, within tolerance, or diverged.

Floats (float16, bfloat16, float32, float64, float8 E4M3 and E5M2) are compared by value with absolute, relative and ULP
tolerances; NaN and Inf mismatches are counted apart and never pass a tolerance. -0.0 and +0.0 are
0 ULP apart. Integers compare exactly unless an absolute tolerance is given. Raw bytes (buffers
without a declared type) compare byte by byte.
"""
from __future__ import annotations

import math
from typing import cast

import numpy as np

from .results import DIVERGED, DTYPES, IDENTICAL, WITHIN, Comparison, Tolerance

ULP_CEILING = 2**64 - 1  # the largest ULP distance (a uint64): a tolerance is clamped to it
# The ULP histogram's buckets: (label, lowest distance), each up to the next one's lowest.
ULP_BUCKETS = (("0", 0), ("1", 1), ("2-3", 2), ("4-15", 4), ("16-255", 16), ("256+", 256))
TOP = 5  # offending indices listed by default (--top)


def _error_summary(errors: np.ndarray, count: int) -> dict[str, float]:
    """max/mean/median/p99 of ``errors`` padded with zeros to ``count`` elements (the elements equal on
    both sides have no error; they are not materialised)."""
    if count == 0:
        return {"max": 0.0, "mean": 0.0, "median": 0.0, "p99": 0.0}
    values = errors.astype(np.float64)
    zeros = count - values.size
    # the ranks the quantiles need (inverted CDF), among the materialised errors: a partition, not a sort
    ranks = {q: max(min(count - 1, int(math.ceil(q * count)) - 1), 0) - zeros for q in (0.5, 0.99)}
    wanted = sorted({r for r in ranks.values() if r >= 0})
    if wanted:
        values = np.partition(values, wanted)

    def quantile(q: float) -> float:
        return 0.0 if ranks[q] < 0 else float(values[ranks[q]])

    return {"max": float(values.max()) if values.size else 0.0, "mean": float(values.sum() / count),
            "median": quantile(0.5), "p99": quantile(0.99)}


def _ulp_histogram(ulps: np.ndarray, count: int) -> dict[str, int]:
    """Counts per :data:`ULP_BUCKETS` of ``ulps`` padded with zeros to ``count`` elements."""
    edges = [low for _, low in ULP_BUCKETS[1:]]
    counts = np.bincount(np.searchsorted(np.asarray(edges, np.uint64), ulps.astype(np.uint64), side="right"),
                         minlength=len(ULP_BUCKETS))
    counts[0] += count - ulps.size
    return {label: int(n) for (label, _), n in zip(ULP_BUCKETS, counts)}


def _values(x: np.ndarray) -> dict[str, float]:
    """min/max/mean of the finite values of ``x`` (0 for none)."""
    finite = x[np.isfinite(x)] if x.dtype.kind == "f" else x
    if finite.size == 0:
        return {"min": 0.0, "max": 0.0, "mean": 0.0}
    with np.errstate(over="ignore"):  # a mean of huge values may be inf; it is reported as such
        mean = float(finite.astype(np.float64).mean())
    return {"min": float(finite.min()), "max": float(finite.max()), "mean": mean}


def _cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """The cosine similarity of the finite pairs; None where one side is all zeros."""
    ok = np.isfinite(a) & np.isfinite(b)
    fa, fb = a[ok].astype(np.float64), b[ok].astype(np.float64)
    scale = max(float(np.abs(fa).max(initial=0.0)), float(np.abs(fb).max(initial=0.0)))
    if scale == 0.0:
        return None
    fa, fb = fa / scale, fb / scale  # no overflow in the dot products, whatever the magnitudes
    na, nb = float(np.sqrt(np.dot(fa, fa))), float(np.sqrt(np.dot(fb, fb)))
    return float(np.clip(np.dot(fa, fb) / (na * nb), -1.0, 1.0)) if na and nb else None


def _as_array(data: bytes | memoryview, dtype: str) -> np.ndarray:
    storage, _ = DTYPES[dtype]
    itemsize = np.dtype(storage).itemsize
    usable = len(data) - len(data) % itemsize
    return np.frombuffer(data, dtype=storage, count=usable // itemsize)


def _float8_table(exponent_bits: int, mantissa_bits: int, ieee_specials: bool) -> np.ndarray:
    """The float32 value of every 8-bit pattern of an FP8 format (OCP OFP8: E4M3 has no Inf and one NaN
    mantissa, S.1111.111; E5M2 follows IEEE: exponent all ones is Inf with a zero mantissa, else NaN)."""
    bias = (1 << (exponent_bits - 1)) - 1
    top = (1 << exponent_bits) - 1
    values = np.empty(256, np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> mantissa_bits) & top
        m = code & ((1 << mantissa_bits) - 1)
        if ieee_specials and e == top:
            values[code] = sign * np.inf if m == 0 else np.nan
        elif not ieee_specials and e == top and m == (1 << mantissa_bits) - 1:
            values[code] = np.nan
        elif e == 0:
            values[code] = sign * 2.0 ** (1 - bias) * (m / (1 << mantissa_bits))
        else:
            values[code] = sign * 2.0 ** (e - bias) * (1 + m / (1 << mantissa_bits))
    return values


FLOAT8 = {"float8e4m3": _float8_table(4, 3, False), "float8e5m2": _float8_table(5, 2, True)}


def _widen(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    if dtype in FLOAT8:
        return FLOAT8[dtype][a]
    return a


def _ordered(bits: np.ndarray) -> np.ndarray:
    """Map float bit patterns (unsigned) to unsigned integers in the floats' order, -0 and +0 equal.

    Non-negative floats get the sign bit set; negative ones have every bit flipped, plus one (so the
    smallest negative float sits right below +0). Adjacent floats map to adjacent integers and the
    difference of two results is their ULP distance, without overflow.
    """
    u = bits.astype(np.uint64)
    width = bits.dtype.itemsize * 8
    sign = np.uint64(1) << np.uint64(width - 1)
    mask = np.uint64((1 << width) - 1)
    u = np.where(u == sign, np.uint64(0), u)  # -0.0 is +0.0
    return np.where(u & sign, ((~u) & mask) + np.uint64(1), u | sign)


def ulp_distance(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """Elementwise ULP distance of two arrays of float bit patterns (uint64)."""
    oa, ob = _ordered(a_bits), _ordered(b_bits)
    return np.where(oa >= ob, oa - ob, ob - oa)


def _bits(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return a.view(np.uint16)
    if dtype in FLOAT8:
        return a.view(np.uint8)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def identical(uid: str, nbytes: int, dtype: str = "bytes") -> Comparison:
    """The comparison of two equal snapshots of ``nbytes`` bytes read as ``dtype``."""
    storage, _ = DTYPES[dtype]
    return Comparison(uid, dtype, IDENTICAL, nbytes // np.dtype(storage).itemsize)


def compare(uid: str, recorded: bytes | memoryview, live: bytes | memoryview, *, dtype: str = "bytes",
            tolerance: Tolerance = Tolerance(), shape: tuple[int, ...] | None = None, top: int = TOP) -> Comparison:
    """Compare ``live`` against ``recorded`` read as ``dtype`` (optionally shaped ``shape`` for indices).

    Besides the verdict and the counts: ``statistics`` over all elements and over those beyond the
    tolerance (max/mean/median/p99 absolute error, max/mean relative error; for floats the max ULP and
    a ULP histogram), min/max/mean of both sides, the cosine similarity of float data; ``top``, the
    first ``top`` offending indices (beyond the tolerance, else differing) with both values."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    a = _as_array(recorded, dtype)
    b = _as_array(live, dtype)
    tail = len(recorded) - a.nbytes
    if tail and len(recorded) == len(live) and bytes(recorded[-tail:]) != bytes(live[-tail:]):
        return Comparison(uid, dtype, DIVERGED, a.size, 0, 0,
                          size_mismatch=f"the last {tail} byte(s), which do not fill a {dtype} element, differ")
    if len(recorded) != len(live):
        return Comparison(uid, dtype, DIVERGED, max(a.size, b.size), max(a.size, b.size), max(a.size, b.size),
                          size_mismatch=f"recorded {len(recorded)} bytes, live {len(live)} bytes")
    if bytes(recorded) == bytes(live) if len(recorded) < 4096 else np.array_equal(
        np.frombuffer(recorded, np.uint8), np.frombuffer(live, np.uint8)
    ):
        return identical(uid, len(live), dtype)
    is_float = DTYPES[dtype][1]
    result = Comparison(uid, dtype, DIVERGED, a.size)
    if is_float:
        # Bitwise-equal elements have no error of any kind: the statistics are taken over the others
        # only, which keeps a replay with a few diverged elements as cheap as an identical one.
        where = np.flatnonzero(_bits(a, dtype) != _bits(b, dtype))
        sa, sb = a[where], b[where]
        with np.errstate(invalid="ignore"):  # signalling NaNs widen to quiet NaNs, which is what we compare
            fa, fb = _widen(sa, dtype).astype(np.float64), _widen(sb, dtype).astype(np.float64)
        nan_a, nan_b = np.isnan(fa), np.isnan(fb)
        nan_bad = nan_a ^ nan_b
        inf_a, inf_b = np.isinf(fa), np.isinf(fb)
        inf_bad = (inf_a | inf_b) & ~(nan_a | nan_b) & ~((inf_a & inf_b) & (fa == fb))
        finite = ~(nan_a | nan_b | inf_a | inf_b)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            abs_err = np.where(finite, np.abs(fa - fb), 0.0)
            rel_err = np.where(finite & (fa != 0), abs_err / np.abs(fa), np.where(abs_err > 0, np.inf, 0.0))
        ulp = np.where(finite, ulp_distance(_bits(sa, dtype), _bits(sb, dtype)), np.uint64(0))
        differs = (abs_err > 0) | nan_bad | inf_bad
        ok_value = (abs_err <= tolerance.atol + tolerance.rtol * np.abs(np.where(finite, fa, 0.0)))
        if tolerance.ulp:
            ok_value |= ulp <= np.uint64(min(tolerance.ulp, ULP_CEILING))  # any larger tolerance accepts every distance
        failing = (differs & finite & ~ok_value) | nan_bad | inf_bad
        result.nan_mismatches = int(nan_bad.sum())
        result.inf_mismatches = int(inf_bad.sum())
        result.max_abs = float(abs_err.max(initial=0.0))
        result.max_rel = float(rel_err.max(initial=0.0))
        result.max_ulp = int(ulp.max(initial=0))
        result.beyond_max_abs = float(abs_err[failing].max(initial=0.0))
        result.beyond_max_rel = float(rel_err[failing].max(initial=0.0))
        result.beyond_max_ulp = int(ulp[failing].max(initial=0))
        differing_at, failing_at = where[differs], where[failing]
        with np.errstate(over="ignore", invalid="ignore"):  # sums of huge errors are inf: reported so
            wa, wb = _widen(a, dtype), _widen(b, dtype)
            finite_rel = np.where(np.isfinite(rel_err), rel_err, 0.0)
            result.statistics = {
                "all": {"abs": _error_summary(abs_err[differs], a.size), "max_rel": result.max_rel,
                        "mean_rel": float(finite_rel[differs].sum() / a.size) if a.size else 0.0,
                        "max_ulp": result.max_ulp, "ulp_histogram": _ulp_histogram(ulp[differs], a.size)},
                "beyond": {"abs": _error_summary(abs_err[failing], int(failing.sum())), "max_rel": result.beyond_max_rel,
                           "mean_rel": float(finite_rel[failing].mean()) if failing.any() else 0.0,
                           "max_ulp": result.beyond_max_ulp, "ulp_histogram": _ulp_histogram(ulp[failing], int(failing.sum()))},
                "recorded": _values(wa), "live": _values(wb), "cosine_similarity": _cosine(wa, wb),
            }
    else:
        differs = a != b  # exact, in the native type (no float64 rounding of 64-bit values)
        idx = np.flatnonzero(differs)
        ra, rb = a[idx], b[idx]
        if a.itemsize < 8:  # exact in int64, and the gaps (< 2**33) exact in float64: vectorized
            gaps = np.abs(ra.astype(np.int64) - rb.astype(np.int64)).astype(np.float64)
            base = np.abs(ra.astype(np.int64)).astype(np.float64)
            beyond = gaps > tolerance.atol if tolerance.atol else np.ones(idx.size, dtype=bool)
        else:  # 64-bit: exact Python integers for the differing elements only
            gap = [abs(int(x) - int(y)) for x, y in zip(ra.tolist(), rb.tolist())]
            gaps = np.asarray([float(g) for g in gap], np.float64)
            base = np.asarray([float(abs(int(x))) for x in ra.tolist()], np.float64)
            beyond = (np.array([g > tolerance.atol for g in gap], dtype=bool) if tolerance.atol
                      else np.ones(idx.size, dtype=bool))
        with np.errstate(divide="ignore", invalid="ignore"):
            rels = np.where(base > 0, gaps / np.where(base > 0, base, 1.0), np.where(gaps > 0, np.inf, 0.0))
        differing_at, failing_at = idx, idx[beyond]
        result.max_abs = float(gaps.max(initial=0.0))
        result.max_rel = float(rels.max(initial=0.0))
        result.beyond_max_abs = float(gaps[beyond].max(initial=0.0))
        result.beyond_max_rel = float(rels[beyond].max(initial=0.0))
        rel_finite = np.where(np.isfinite(rels), rels, 0.0)
        result.statistics = {
            "all": {"abs": _error_summary(gaps, a.size), "max_rel": result.max_rel,
                    "mean_rel": float(rel_finite.sum() / a.size) if a.size else 0.0},
            "beyond": {"abs": _error_summary(gaps[beyond], int(beyond.sum())), "max_rel": result.beyond_max_rel,
                       "mean_rel": float(rel_finite[beyond].mean()) if beyond.any() else 0.0},
            "recorded": _values(a), "live": _values(b),
        }
    result.differing = int(differing_at.size)
    result.beyond_tolerance = int(failing_at.size)
    if result.differing:
        offending = failing_at if failing_at.size else differing_at
        entries = []
        for flat in (int(i) for i in offending[: max(top, 1)]):
            in_shape = shape is not None and flat < int(np.prod(shape)) <= a.size  # e.g. level 0 of a mipmapped image
            index = tuple(int(i) for i in np.unravel_index(flat, cast(tuple[int, ...], shape))) if in_shape else (flat,)
            entries.append((index, _widen(a[flat: flat + 1], dtype)[0].item(), _widen(b[flat: flat + 1], dtype)[0].item()))
        result.first_index, result.first_recorded, result.first_live = entries[0]
        result.top = [{"index": list(i), "recorded": r, "live": v} for i, r, v in entries[:top]]
    result.status = DIVERGED if failing_at.size else WITHIN
    return result
