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

/* Instantiates a loop M(T, ST, TX) for each element type: unsigned, signed, unaligned pointee. */
#define EACH_TYPE(M)               \
    M(uint8_t, int8_t, u8x)        \
    M(uint16_t, int16_t, u16x)     \
    M(uint32_t, int32_t, u32x)     \
    M(uint64_t, int64_t, u64x)

/* Calls name_uint8_t ... name_uint64_t by `width`: the one entry point each loop has. */
#define BY_WIDTH(name, args, unknown)                   \
    switch (width) {                                    \
    case 1: return name##_uint8_t args;                 \
    case 2: return name##_uint16_t args;                \
    case 4: return name##_uint32_t args;                \
    case 8: return name##_uint64_t args;                \
    }                                                   \
    return unknown;

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
EACH_TYPE(RESIDUAL)

size_t vkcap_residual(const void *cur, const void *a, const void *b, void *out, void *keep, size_t n, int width,
                      int zigzag) {
    BY_WIDTH(residual, (cur, a, b, out, keep, n, zigzag), (size_t)-1)
}

/* Zigzag n plain differences in place. */
#define ZIGZAG_ALL(T, ST, TX)                                                  \
    static int zigzag_##T(void *d_, size_t n) {                                \
        TX *d = d_;                                                            \
        for (size_t i = 0; i < n; i++) d[i] = ZIGZAG(T, ST, (T)d[i]);          \
        return 0;                                                              \
    }
EACH_TYPE(ZIGZAG_ALL)

int vkcap_zigzag(void *d, size_t n, int width) { BY_WIDTH(zigzag, (d, n), -1) }

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
EACH_TYPE(SPARSE)

size_t vkcap_sparse(const void *e, size_t n, int width, int zigzag, uint8_t *bits, void *values, size_t count) {
    BY_WIDTH(sparse, (e, n, zigzag, bits, values, count), (size_t)-1)
}

/* A steady-state delta stored as SPARSE, in one pass: d[i] = cur[i] - a[i] (b NULL: DIFF) or
 * cur[i] - (2 a[i] - b[i]) (LINEAR); bit i of bits (LSB first, ceil(n / 8) bytes) set when d[i] is not
 * zero, and zigzag(d[i]) of those in order at the start of values, which has room for n elements (a
 * group of 8 with a non-zero element stores all 8 without branching, and keeps those it counts);
 * keep[i] = cur[i] when keep is not NULL (keep may be a or b: each element is read before it is
 * written). Returns how many elements are not zero. What vkcap_residual then vkcap_sparse give,
 * without the n residual elements written and read back, and a group of 8 zero ones costs one test. */
#define GROUP_SPARSE(T, ST, PREDICT, KEEP)                                                               \
    for (size_t at = 0; at < whole; at += 8) {                                                            \
        T d[8];                                                                                           \
        T any = 0;                                                                                        \
        for (size_t j = 0; j < 8; j++) {                                                                  \
            size_t i = at + j;                                                                            \
            T x = cur[i];                                                                                 \
            d[j] = (T)(x - (PREDICT));                                                                    \
            if (KEEP) keep[i] = x;                                                                        \
            any |= d[j];                                                                                  \
        }                                                                                                 \
        unsigned byte = 0;                                                                                \
        if (any) {                                                                                        \
            for (size_t j = 0; j < 8; j++) {                                                              \
                byte |= (unsigned)(d[j] != 0) << j;                                                       \
                values[k] = ZIGZAG(T, ST, d[j]);                                                          \
                k += d[j] != 0;                                                                           \
            }                                                                                             \
        }                                                                                                 \
        bits[at / 8] = (uint8_t)byte;                                                                     \
    }                                                                                                     \
    if (whole < n) {                                                                                      \
        unsigned byte = 0;                                                                                \
        for (size_t i = whole; i < n; i++) {                                                              \
            T x = cur[i];                                                                                 \
            T d = (T)(x - (PREDICT));                                                                     \
            if (KEEP) keep[i] = x;                                                                        \
            if (d) {                                                                                      \
                byte |= 1u << (i - whole);                                                                \
                values[k++] = ZIGZAG(T, ST, d);                                                           \
            }                                                                                             \
        }                                                                                                 \
        bits[whole / 8] = (uint8_t)byte;                                                                  \
    }
#define RESIDUAL_SPARSE(T, ST, TX)                                                                          \
    static size_t residual_sparse_##T(const void *cur_, const void *a_, const void *b_, void *keep_,        \
                                      uint8_t *bits, void *values_, size_t n) {                              \
        const TX *cur = cur_, *a = a_, *b = b_;                                                              \
        TX *keep = keep_, *values = values_;                                                                 \
        size_t k = 0, whole = n / 8 * 8;                                                                     \
        switch ((b != 0) * 2 + (keep != 0)) {                                                                \
            case 0: GROUP_SPARSE(T, ST, a[i], 0); break;                                                     \
            case 1: GROUP_SPARSE(T, ST, a[i], 1); break;                                                     \
            case 2: GROUP_SPARSE(T, ST, (T)((T)(a[i] << 1) - b[i]), 0); break;                               \
            case 3: GROUP_SPARSE(T, ST, (T)((T)(a[i] << 1) - b[i]), 1); break;                               \
        }                                                                                                    \
        return k;                                                                                            \
    }
EACH_TYPE(RESIDUAL_SPARSE)

size_t vkcap_residual_sparse(const void *cur, const void *a, const void *b, void *keep, uint8_t *bits, void *values,
                             size_t n, int width) {
    BY_WIDTH(residual_sparse, (cur, a, b, keep, bits, values, n), (size_t)-1)
}

/* How many of n elements are zero. */
#define ZEROS(T, ST, TX)                                                           \
    static size_t zeros_##T(const void *e_, size_t n) {                        \
        const TX *e = e_;                                                      \
        size_t zeros = 0;                                                      \
        for (size_t i = 0; i < n; i++) zeros += e[i] == 0;                     \
        return zeros;                                                          \
    }
EACH_TYPE(ZEROS)

size_t vkcap_zeros(const void *e, size_t n, int width) { BY_WIDTH(zeros, (e, n), (size_t)-1) }

/* Byte plane k of n elements: plane[i] = byte k of element i (bits 8k..8k+7). */
#define PLANE(T, ST, TX)                                                                   \
    static int plane_##T(const void *e_, size_t n, int k, uint8_t *plane) {            \
        const TX *e = e_;                                                              \
        for (size_t i = 0; i < n; i++) plane[i] = (uint8_t)(e[i] >> (8 * k));           \
        return 0;                                                                      \
    }
EACH_TYPE(PLANE)

int vkcap_plane(const void *src, size_t n, int width, int k, uint8_t *plane) {
    if (k < 0 || k >= width) return -1;
    BY_WIDTH(plane, (src, n, k, plane), -1)
}

/* ---- decoding: the inverses, for replay and diff ---------------------------------------------------- */

/* unzigzag: 0, 1, 2, 3 ... become 0, -1, 1, -2 ... (as the element's unsigned bits). */
#define UNZIGZAG(T, z) ((T)(((z) >> 1) ^ (T)(0 - ((z) & 1))))

/* out[i] = unzigzag(z[i]) + a[i] (b NULL: DIFF) or + 2 a[i] - b[i] (LINEAR): the inverse of a zigzagged
 * residual. out may not overlap z, a or b. */
#define RESTORE(T, ST, TX)                                                                              \
    static int restore_##T(const void *z_, const void *a_, const void *b_, void *out_, size_t n) {     \
        const TX *z = z_, *a = a_, *b = b_;                                                             \
        TX *out = out_;                                                                                 \
        if (b == 0)                                                                                     \
            for (size_t i = 0; i < n; i++) out[i] = (T)(UNZIGZAG(T, (T)z[i]) + a[i]);                   \
        else                                                                                            \
            for (size_t i = 0; i < n; i++) out[i] = (T)(UNZIGZAG(T, (T)z[i]) + (T)((T)(a[i] << 1) - b[i])); \
        return 0;                                                                                       \
    }
EACH_TYPE(RESTORE)

int vkcap_restore(const void *z, const void *a, const void *b, void *out, size_t n, int width) {
    BY_WIDTH(restore, (z, a, b, out, n), -1)
}

/* Byte k of each of n elements of `width` bytes at dst from plane[i]: the inverse of vkcap_plane. */
int vkcap_unplane(const uint8_t *plane, size_t n, int width, int k, uint8_t *dst) {
    if (k < 0 || k >= width || (width != 1 && width != 2 && width != 4 && width != 8)) return -1;
    dst += k;
    for (size_t i = 0; i < n; i++) dst[i * (size_t)width] = plane[i];
    return 0;
}

/* How many bits are set in the first n bits of bits (LSB first). */
size_t vkcap_count_bits(const uint8_t *bits, size_t n) {
    size_t count = 0, whole = n / 8;
    for (size_t i = 0; i < whole; i++) count += (size_t)__builtin_popcount(bits[i]);
    if (n % 8) count += (size_t)__builtin_popcount(bits[whole] & ((1u << (n % 8)) - 1));
    return count;
}

/* The n elements SPARSE's parts describe into out: values in order where bit i is set, zero elsewhere
 * (values are stored as they are, zigzagged or not). values holds `count` elements; returns how many
 * set bits there were, and stores at most count of them. */
#define UNSPARSE(T, ST, TX)                                                                                 \
    static size_t unsparse_##T(const uint8_t *bits, const void *values_, size_t count, size_t n, void *out_) { \
        const TX *values = values_;                                                                         \
        TX *out = out_;                                                                                     \
        size_t k = 0;                                                                                       \
        for (size_t at = 0; at < n; at += 8) {                                                              \
            size_t m = n - at < 8 ? n - at : 8;                                                             \
            unsigned byte = bits[at / 8];                                                                   \
            for (size_t j = 0; j < m; j++) {                                                                \
                T v = 0;                                                                                    \
                if (byte >> j & 1) {                                                                        \
                    if (k < count) v = values[k];                                                           \
                    k++;                                                                                    \
                }                                                                                           \
                out[at + j] = v;                                                                            \
            }                                                                                               \
        }                                                                                                   \
        return k;                                                                                           \
    }
EACH_TYPE(UNSPARSE)

size_t vkcap_unsparse(const uint8_t *bits, const void *values, size_t count, size_t n, int width, void *out) {
    BY_WIDTH(unsparse, (bits, values, count, n, out), (size_t)-1)
}
