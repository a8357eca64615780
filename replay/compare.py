"""Numeric comparison of two snapshots of one resource: identical, within tolerance, or diverged.

Floats (float16, bfloat16, float32, float64, float8 E4M3 and E5M2) are compared by value with absolute, relative and ULP
tolerances; NaN and Inf mismatches are counted apart and never pass a tolerance. -0.0 and +0.0 are
0 ULP apart. Integers compare exactly unless an absolute tolerance is given. Raw bytes (buffers
without a declared type) compare byte by byte.
"""
from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from .results import DIVERGED, DTYPES, WITHIN, Comparison, Tolerance, identical

ULP_CEILING = 2**64 - 1  # the largest ULP distance (a uint64): a tolerance is clamped to it
# The ULP histogram's buckets: (label, lowest distance), each up to the next one's lowest.
ULP_BUCKETS = (("0", 0), ("1", 1), ("2-3", 2), ("4-15", 4), ("16-255", 16), ("256+", 256))
TOP = 5  # offending indices listed by default (--top)


def _error_summary(errors: np.ndarray, count: int) -> dict[str, float]:
    """max/mean/median/p99 of ``errors`` (float64, or unsigned integers; reordered in place) padded with
    zeros to ``count`` elements (the elements equal on both sides have no error; they are not
    materialised)."""
    if count == 0:
        return {"max": 0.0, "mean": 0.0, "median": 0.0, "p99": 0.0}
    values = errors
    zeros = count - values.size
    # the ranks the quantiles need (inverted CDF), among the materialised errors: a partition, not a sort
    ranks = {q: max(min(count - 1, int(math.ceil(q * count)) - 1), 0) - zeros for q in (0.5, 0.99)}
    wanted = sorted({r for r in ranks.values() if r >= 0})
    if wanted:
        values.partition(wanted)

    def quantile(q: float) -> float:
        return 0.0 if ranks[q] < 0 else float(values[ranks[q]])

    total = values.sum(dtype=np.float64 if values.dtype.kind == "f" else np.uint64)  # integers: exact
    return {"max": float(values.max()) if values.size else 0.0, "mean": float(total / count),
            "median": quantile(0.5), "p99": quantile(0.99)}


def _ulp_counts(ulps: np.ndarray) -> np.ndarray:
    """How many of ``ulps`` fall in each of :data:`ULP_BUCKETS`."""
    edges = [low for _, low in ULP_BUCKETS[1:]]
    return np.bincount(np.searchsorted(np.asarray(edges, np.uint64), ulps.astype(np.uint64), side="right"),
                       minlength=len(ULP_BUCKETS))


def _histogram(counts: np.ndarray, zeros: int) -> dict[str, int]:
    """Bucket ``counts`` (:func:`_ulp_counts`, summed) with ``zeros`` more elements at 0 ULP, by label."""
    return {label: int(n) + (zeros if i == 0 else 0) for i, ((label, _), n) in enumerate(zip(ULP_BUCKETS, counts))}


def _chunks(x: np.ndarray, dtype: str = "") -> Any:
    """``x`` a chunk of CHUNK_ELEMENTS at a time, widened to float32 for ``dtype`` (bfloat16, float8)."""
    for lo in range(0, x.size, CHUNK_ELEMENTS):
        yield _widen(x[lo: lo + CHUNK_ELEMENTS], dtype) if dtype else x[lo: lo + CHUNK_ELEMENTS]


def _values(x: np.ndarray, dtype: str = "") -> dict[str, float]:
    """min/max/mean of the finite values of ``x`` (0 for none), widened for ``dtype`` as :func:`_widen` does."""
    count, total, low, high = 0, 0.0, math.inf, -math.inf
    with np.errstate(over="ignore"):  # a mean of huge values may be inf; it is reported as such
        for chunk in _chunks(x, dtype):
            finite = chunk[np.isfinite(chunk)] if chunk.dtype.kind == "f" else chunk
            if finite.size:
                count += finite.size
                total += float(finite.astype(np.float64).sum())
                low, high = min(low, float(finite.min())), max(high, float(finite.max()))
    if count == 0:
        return {"min": 0.0, "max": 0.0, "mean": 0.0}
    return {"min": low, "max": high, "mean": total / count}


def _cosine(a: np.ndarray, b: np.ndarray, dtype: str = "") -> float | None:
    """The cosine similarity of the finite pairs; None where one side is all zeros. Two passes over
    the chunks: the largest magnitude first, then the dot products of the values scaled by it."""
    def pairs() -> Any:
        for ca, cb in zip(_chunks(a, dtype), _chunks(b, dtype)):
            ok = np.isfinite(ca) & np.isfinite(cb)
            yield ca[ok].astype(np.float64), cb[ok].astype(np.float64)

    scale = max((max(float(np.abs(fa).max(initial=0.0)), float(np.abs(fb).max(initial=0.0))) for fa, fb in pairs()),
                default=0.0)
    if scale == 0.0:
        return None
    ab = aa = bb = 0.0
    for fa, fb in pairs():
        fa, fb = fa / scale, fb / scale  # no overflow in the dot products, whatever the magnitudes
        ab, aa, bb = ab + float(np.dot(fa, fb)), aa + float(np.dot(fa, fa)), bb + float(np.dot(fb, fb))
    na, nb = math.sqrt(aa), math.sqrt(bb)
    return float(np.clip(ab / (na * nb), -1.0, 1.0)) if na and nb else None


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
    # The statistics are gathered chunk by chunk, so that the working arrays stay a few times a chunk
    # whatever the resource's size; only the errors of differing elements are kept (for the quantiles).
    # (the elements whose bits differ: at least as many as differ in value, so the errors fit)
    unequal = sum(int(np.count_nonzero(_bits(ca, dtype) != _bits(cb, dtype) if is_float else ca != cb))
                  for ca, cb in zip(_chunks(a), _chunks(b)))
    # Integer gaps of up to 32 bits are kept in an unsigned type of the elements' width (|x - y| of two
    # N-bit integers fits N unsigned bits): the default raw-byte comparison keeps one byte per differing
    # element, not eight. Float errors, and 64-bit integer gaps (rounded), stay float64.
    error_type = np.dtype(np.float64) if is_float or a.itemsize == 8 else np.dtype(f"u{a.itemsize}")
    acc = _Accumulator(max(top, 1), unequal, error_type)
    for lo in range(0, a.size, CHUNK_ELEMENTS):
        hi = min(a.size, lo + CHUNK_ELEMENTS)
        (_float_chunk if is_float else _integer_chunk)(acc, a[lo:hi], b[lo:hi], lo, dtype, tolerance)
    acc.finish(result, a, b, dtype, is_float)
    if result.differing:
        offending = acc.first_failing if acc.first_failing else acc.first_differing
        entries = []
        for flat in offending[: max(top, 1)]:
            in_shape = shape is not None and flat < int(np.prod(shape)) <= a.size  # e.g. level 0 of a mipmapped image
            index = tuple(int(i) for i in np.unravel_index(flat, cast(tuple[int, ...], shape))) if in_shape else (flat,)
            entries.append((index, _widen(a[flat: flat + 1], dtype)[0].item(), _widen(b[flat: flat + 1], dtype)[0].item()))
        result.first_index, result.first_recorded, result.first_live = entries[0]
        result.top = [{"index": list(i), "recorded": r, "live": v} for i, r, v in entries[:top]]
    result.status = DIVERGED if result.beyond_tolerance else WITHIN
    return result


#: elements compared at a time (the working arrays are a few times this many float64 values)
CHUNK_ELEMENTS = 1 << 20


class _Accumulator:
    """What :func:`compare` gathers over the chunks: counts, maxima, sums, ULP bucket counts, the first
    offending indices, and the absolute errors of the differing elements (with which of them are beyond
    the tolerance), from which the quantiles come at the end; kept as ``error_type``, which must hold
    every error exactly (or be float64)."""

    def __init__(self, keep: int, capacity: int, error_type: np.dtype = np.dtype(np.float64)) -> None:
        self.keep = keep
        self.differing = self.failing = self.nan = self.inf = 0
        self.max_abs = self.max_rel = self.beyond_max_abs = self.beyond_max_rel = 0.0
        self.max_ulp = self.beyond_max_ulp = 0
        self.rel_sum = self.beyond_rel_sum = 0.0
        self.ulp_all = np.zeros(len(ULP_BUCKETS), np.int64)
        self.ulp_beyond = np.zeros(len(ULP_BUCKETS), np.int64)
        # the abs errors of the differing elements, in order, and which of them are beyond the
        # tolerance: filled chunk by chunk (at most ``capacity`` elements differ)
        self.errors = np.empty(capacity, error_type)
        self.beyond = np.empty(capacity, bool)
        self.first_differing: list[int] = []
        self.first_failing: list[int] = []

    def add(self, at: np.ndarray, differs: np.ndarray, failing: np.ndarray, abs_err: np.ndarray, rel: np.ndarray,
            ulp: np.ndarray | None = None) -> None:
        """One chunk: ``at`` the flat indices of its candidate elements, and for each of them whether it
        differs and whether it is beyond the tolerance (``failing`` implies ``differs``), its absolute
        and relative errors (inf where the recorded value is 0), and for floats its ULP distance."""
        count = int(differs.sum())
        self.errors[self.differing: self.differing + count] = abs_err[differs]
        self.beyond[self.differing: self.differing + count] = failing[differs]
        self.differing += count
        self.failing += int(failing.sum())
        self.max_abs = max(self.max_abs, float(abs_err.max(initial=0.0)))
        self.max_rel = max(self.max_rel, float(rel.max(initial=0.0)))
        self.beyond_max_abs = max(self.beyond_max_abs, float(abs_err[failing].max(initial=0.0)))
        self.beyond_max_rel = max(self.beyond_max_rel, float(rel[failing].max(initial=0.0)))
        finite_rel = np.where(np.isfinite(rel), rel, 0.0)
        self.rel_sum += float(finite_rel[differs].sum())
        self.beyond_rel_sum += float(finite_rel[failing].sum())
        if ulp is not None:
            self.max_ulp = max(self.max_ulp, int(ulp.max(initial=0)))
            self.beyond_max_ulp = max(self.beyond_max_ulp, int(ulp[failing].max(initial=0)))
            self.ulp_all += _ulp_counts(ulp[differs])
            self.ulp_beyond += _ulp_counts(ulp[failing])
        for found, mask in ((self.first_differing, differs), (self.first_failing, failing)):
            if len(found) < self.keep:
                found += [int(i) for i in at[mask][: self.keep - len(found)]]

    def finish(self, result: Comparison, a: np.ndarray, b: np.ndarray, dtype: str, is_float: bool) -> None:
        """Fill ``result``'s counts and statistics."""
        result.differing, result.beyond_tolerance = self.differing, self.failing
        result.max_abs, result.max_rel = self.max_abs, self.max_rel
        result.beyond_max_abs, result.beyond_max_rel = self.beyond_max_abs, self.beyond_max_rel
        errors, beyond = self.errors[: self.differing], self.beyond[: self.differing]
        with np.errstate(over="ignore", invalid="ignore"):  # sums of huge errors are inf: reported so
            # beyond first: the summaries reorder the arrays they are given (all of the errors, when
            # every differing element is beyond the tolerance: the same values, no copy)
            past = {"abs": _error_summary(errors if self.failing == self.differing else errors[beyond], self.failing),
                    "max_rel": self.beyond_max_rel,
                    "mean_rel": self.beyond_rel_sum / self.failing if self.failing else 0.0}
            everything = {"abs": _error_summary(errors, a.size), "max_rel": self.max_rel,
                          "mean_rel": self.rel_sum / a.size if a.size else 0.0}
            self._sides(result, a, b, dtype, is_float, everything, past)

    def _sides(self, result: Comparison, a: np.ndarray, b: np.ndarray, dtype: str, is_float: bool,
               everything: dict[str, Any], past: dict[str, Any]) -> None:
        if is_float:
            result.nan_mismatches, result.inf_mismatches = self.nan, self.inf
            result.max_ulp, result.beyond_max_ulp = self.max_ulp, self.beyond_max_ulp
            everything.update(max_ulp=self.max_ulp, ulp_histogram=_histogram(self.ulp_all, a.size - self.differing))
            past.update(max_ulp=self.beyond_max_ulp, ulp_histogram=_histogram(self.ulp_beyond, 0))
            result.statistics = {"all": everything, "beyond": past, "recorded": _values(a, dtype),
                                 "live": _values(b, dtype), "cosine_similarity": _cosine(a, b, dtype)}
        else:
            result.statistics = {"all": everything, "beyond": past, "recorded": _values(a), "live": _values(b)}


def _float_chunk(acc: _Accumulator, a: np.ndarray, b: np.ndarray, offset: int, dtype: str, tolerance: Tolerance) -> None:
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
    acc.nan += int(nan_bad.sum())
    acc.inf += int(inf_bad.sum())
    acc.add(offset + where, differs, failing, abs_err, rel_err, ulp)


def _integer_chunk(acc: _Accumulator, a: np.ndarray, b: np.ndarray, offset: int, dtype: str, tolerance: Tolerance) -> None:
    idx = np.flatnonzero(a != b)  # exact, in the native type (no float64 rounding of 64-bit values)
    ra, rb = a[idx], b[idx]
    if a.itemsize < 8:  # exact in int64, and the gaps (< 2**33) exact in float64
        gaps = np.abs(ra.astype(np.int64) - rb.astype(np.int64)).astype(np.float64)
        base = np.abs(ra.astype(np.int64)).astype(np.float64)
        beyond = gaps > tolerance.atol if tolerance.atol else np.ones(idx.size, dtype=bool)
    else:  # 64-bit: the gap |x - y| < 2**64 is exact in uint64 arithmetic (modulo 2**64), for int64 too
        ua, ub = ra.view(np.uint64), rb.view(np.uint64)
        exact = np.where(ra >= rb, ua - ub, ub - ua)
        gaps = exact.astype(np.float64)  # rounded for the statistics, as any float
        base = np.where(ra < 0, np.uint64(0) - ua, ua).astype(np.float64) if ra.dtype.kind == "i" else ua.astype(np.float64)
        # an integer gap g is beyond atol exactly when g > floor(atol); compared as integers, unrounded
        beyond = (exact > np.uint64(math.floor(tolerance.atol)) if tolerance.atol < 2.0**64
                  else np.zeros(idx.size, dtype=bool)) if tolerance.atol else np.ones(idx.size, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        rels = np.where(base > 0, gaps / np.where(base > 0, base, 1.0), np.where(gaps > 0, np.inf, 0.0))
    acc.add(offset + idx, np.ones(idx.size, dtype=bool), beyond, gaps, rels)
