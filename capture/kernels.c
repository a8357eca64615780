/* The encoders' inner loops, compiled: what capture/delta.py and capture/planes.py would otherwise run
 * as several numpy passes over the data (and import numpy for, which a recording need not otherwise load).
 *
 * Every function is pure: it reads and writes only the memory it is given, allocates nothing and keeps
 * no state, so any number of threads may call it at once (the Python side calls it without the GIL).
 * Elements are unsigned integers of `width` bytes (1, 2, 4 or 8) in the host's byte order, which the
 * loader (capture/kernels.py) checks is little-endian, as the trace format's elements are. Pointers need
 * no alignment. Arithmetic is modular in the element's width, as numpy's unsigned arithmetic is.
 *
 * Built by capture/kernels_build.py (`make setup` runs it) into capture/_kernels.so; a plain shared
 * library, no Python headers, so one build serves every Python version on the machine.
 */
#include <stddef.h>
#include <stdint.h>

typedef uint8_t u8x __attribute__((aligned(1), may_alias));
typedef uint16_t u16x __attribute__((aligned(1), may_alias));
typedef uint32_t u32x __attribute__((aligned(1), may_alias));
typedef uint64_t u64x __attribute__((aligned(1), may_alias));

/* zigzag: 0, -1, 1, -2 ... become 0, 1, 2, 3 ... (d read as a signed difference). */
#define ZIGZAG(T, ST, d) ((T)((T)((d) << 1) ^ (T)((ST)(d) >> (8 * sizeof(T) - 1))))

/* out[i] = cur[i] - a[i] (b NULL: DIFF) or cur[i] - (2 a[i] - b[i]) (LINEAR), zigzagged when `zigzag`;
 * keep[i] = cur[i] when keep is not NULL (keep may be a or b: each element is read before it is
 * written). Returns how many out[i] are zero. */
#define LOOP(T, ST, PREDICT, KEEP, ZZ)                                                                   \
    for (size_t i = 0; i < n; i++) {                                                                      \
        T x = cur[i];                                                                                     \
        T d = (T)(x - (PREDICT));                                                                         \
        if (KEEP) keep[i] = x;                                                                            \
        out[i] = (ZZ) ? ZIGZAG(T, ST, d) : d;                                                             \
        zeros += d == 0;                                                                                  \
    }
#define RESIDUAL(T, ST, TX)                                                                              \
    static size_t residual_##T(const void *cur_, const void *a_, const void *b_, void *out_, void *keep_, \
                               size_t n, int zigzag) {                                                    \
        const TX *cur = cur_, *a = a_, *b = b_;                                                           \
        TX *out = out_, *keep = keep_;                                                                    \
        size_t zeros = 0;                                                                                 \
        /* one loop per case, so that each is a straight vectorizable loop */                           \
        switch ((b != 0) * 4 + (keep != 0) * 2 + (zigzag != 0)) {                                         \
            case 0: LOOP(T, ST, a[i], 0, 0); break;                                                       \
            case 1: LOOP(T, ST, a[i], 0, 1); break;                                                       \
            case 2: LOOP(T, ST, a[i], 1, 0); break;                                                       \
            case 3: LOOP(T, ST, a[i], 1, 1); break;                                                       \
            case 4: LOOP(T, ST, (T)((T)(a[i] << 1) - b[i]), 0, 0); break;                                 \
            case 5: LOOP(T, ST, (T)((T)(a[i] << 1) - b[i]), 0, 1); break;                                 \
            case 6: LOOP(T, ST, (T)((T)(a[i] << 1) - b[i]), 1, 0); break;                                 \
            case 7: LOOP(T, ST, (T)((T)(a[i] << 1) - b[i]), 1, 1); break;                                 \
        }                                                                                                 \
        return zeros;                                                                                     \
    }
RESIDUAL(uint8_t, int8_t, u8x)
RESIDUAL(uint16_t, int16_t, u16x)
RESIDUAL(uint32_t, int32_t, u32x)
RESIDUAL(uint64_t, int64_t, u64x)

size_t vkcap_residual(const void *cur, const void *a, const void *b, void *out, void *keep, size_t n, int width,
                      int zigzag) {
    switch (width) {
    case 1: return residual_uint8_t(cur, a, b, out, keep, n, zigzag);
    case 2: return residual_uint16_t(cur, a, b, out, keep, n, zigzag);
    case 4: return residual_uint32_t(cur, a, b, out, keep, n, zigzag);
    case 8: return residual_uint64_t(cur, a, b, out, keep, n, zigzag);
    }
    return (size_t)-1;
}

/* Zigzag n plain differences in place. */
#define ZIGZAG_ALL(T, ST, TX)                                                  \
    static void zigzag_##T(void *d_, size_t n) {                               \
        TX *d = d_;                                                            \
        for (size_t i = 0; i < n; i++) d[i] = ZIGZAG(T, ST, (T)d[i]);          \
    }
ZIGZAG_ALL(uint8_t, int8_t, u8x)
ZIGZAG_ALL(uint16_t, int16_t, u16x)
ZIGZAG_ALL(uint32_t, int32_t, u32x)
ZIGZAG_ALL(uint64_t, int64_t, u64x)

int vkcap_zigzag(void *d, size_t n, int width) {
    switch (width) {
    case 1: zigzag_uint8_t(d, n); return 0;
    case 2: zigzag_uint16_t(d, n); return 0;
    case 4: zigzag_uint32_t(d, n); return 0;
    case 8: zigzag_uint64_t(d, n); return 0;
    }
    return -1;
}

/* SPARSE's two parts of n elements: bits (ceil(n / 8) bytes; bit i, LSB first, set when element i is
 * not zero) and values (the non-zero elements in order, zigzagged when `zigzag`: the elements are then
 * plain differences, whose zeros are the residual's). `values` has room for `count` elements, the
 * number of non-zero ones, which the caller counted. Returns the number of non-zero elements seen,
 * which is count unless the elements changed meanwhile (at most count are stored). A mostly zero
 * residual is the case to be fast for: a group of 8 zero elements costs a comparison and a store. */
#define SPARSE(T, ST, TX)                                                                                  \
    static size_t sparse_##T(const void *e_, size_t n, int zigzag, uint8_t *bits, void *values_,           \
                             size_t count) {                                                               \
        const TX *e = e_;                                                                                  \
        TX *values = values_;                                                                              \
        size_t k = 0, seen = 0;                                                                            \
        for (size_t at = 0; at < n; at += 8) {                                                             \
            size_t m = n - at < 8 ? n - at : 8;                                                            \
            unsigned byte = 0;                                                                             \
            for (size_t j = 0; j < m; j++) byte |= (unsigned)(e[at + j] != 0) << j;                        \
            bits[at / 8] = (uint8_t)byte;                                                                  \
            while (byte) {                                                                                 \
                T v = e[at + (size_t)__builtin_ctz(byte)];                                                 \
                byte &= byte - 1;                                                                          \
                seen++;                                                                                    \
                if (k < count) values[k++] = zigzag ? ZIGZAG(T, ST, v) : v;                                \
            }                                                                                              \
        }                                                                                                  \
        return seen;                                                                                       \
    }
SPARSE(uint8_t, int8_t, u8x)
SPARSE(uint16_t, int16_t, u16x)
SPARSE(uint32_t, int32_t, u32x)
SPARSE(uint64_t, int64_t, u64x)

size_t vkcap_sparse(const void *e, size_t n, int width, int zigzag, uint8_t *bits, void *values, size_t count) {
    switch (width) {
    case 1: return sparse_uint8_t(e, n, zigzag, bits, values, count);
    case 2: return sparse_uint16_t(e, n, zigzag, bits, values, count);
    case 4: return sparse_uint32_t(e, n, zigzag, bits, values, count);
    case 8: return sparse_uint64_t(e, n, zigzag, bits, values, count);
    }
    return (size_t)-1;
}

/* How many of n elements are zero. */
size_t vkcap_zeros(const void *e_, size_t n, int width) {
    size_t zeros = 0;
    switch (width) {
    case 1: { const u8x *e = e_; for (size_t i = 0; i < n; i++) zeros += e[i] == 0; break; }
    case 2: { const u16x *e = e_; for (size_t i = 0; i < n; i++) zeros += e[i] == 0; break; }
    case 4: { const u32x *e = e_; for (size_t i = 0; i < n; i++) zeros += e[i] == 0; break; }
    case 8: { const u64x *e = e_; for (size_t i = 0; i < n; i++) zeros += e[i] == 0; break; }
    default: return (size_t)-1;
    }
    return zeros;
}

/* Byte plane k of n elements: plane[i] = byte k of element i (bits 8k..8k+7). */
int vkcap_plane(const void *src_, size_t n, int width, int k, uint8_t *plane) {
    const uint8_t *src = src_;
    if (k < 0 || k >= width) return -1;
    switch (width) {
    case 2: { const u16x *e = src_; for (size_t i = 0; i < n; i++) plane[i] = (uint8_t)(e[i] >> (8 * k)); return 0; }
    case 4: { const u32x *e = src_; for (size_t i = 0; i < n; i++) plane[i] = (uint8_t)(e[i] >> (8 * k)); return 0; }
    case 8: { const u64x *e = src_; for (size_t i = 0; i < n; i++) plane[i] = (uint8_t)(e[i] >> (8 * k)); return 0; }
    }
    for (size_t i = 0; i < n; i++) plane[i] = src[i * (size_t)width + (size_t)k];
    return 0;
}
