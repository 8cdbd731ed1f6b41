/* The 16-bit floats' exact conversions as inline functions over bit
 * patterns, written once for the host (tensor/half.c, the CPU's cast) and
 * the CUDA kernels (ops/shape_shared.h under nvcc), so both round alike:
 * tensor/half.c's head says how. Plain C; __host__ __device__ under nvcc. */
#ifndef VARQ_TENSOR_HALF_BITS_H
#define VARQ_TENSOR_HALF_BITS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define VQ__HALF_FN __host__ __device__ inline
#else
#define VQ__HALF_FN static inline
#endif

/* Formats: fraction bits and exponent bits. */
#define VQ__F16_FMT 10, 5
#define VQ__BF16_FMT 7, 8

VQ__HALF_FN int vq__clz64(uint64_t m)
{
#ifdef __CUDA_ARCH__
    return __clzll((long long)m);
#else
    return __builtin_clzll(m);
#endif
}

/* The 16-bit pattern of the finite value (-1)^neg * m * 2^e rounded to a
 * float with mbits fraction bits and ebits exponent bits (IEEE layout: f16
 * 10 and 5, bf16 7 and 8): nearest, ties to even, subnormals rounded at
 * their fixed quantum, past the largest finite value infinity. */
VQ__HALF_FN uint16_t vq__small_float_pack(bool neg, uint64_t m, int e, int mbits, int ebits)
{
    uint16_t sign = neg ? (uint16_t)0x8000u : (uint16_t)0;
    if (m == 0)
        return sign;
    int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
    int top = 63 - vq__clz64(m); /* the value is in [2^(top+e), 2^(top+e+1)) */
    int exp = top + e;
    int q = (exp < emin ? emin : exp) - mbits; /* the quantum: the last fraction bit's 2^q */
    int shift = q - e;                         /* bits of m below the quantum */
    uint64_t r;
    if (shift <= 0) {
        r = m << -shift; /* exact: m has at most mbits + 1 bits here */
    } else if (shift > 64) {
        r = 0; /* below half the smallest subnormal */
    } else {
        r = shift == 64 ? 0 : m >> shift;
        uint64_t rem = shift == 64 ? m : m & ((UINT64_C(1) << shift) - 1);
        uint64_t half = UINT64_C(1) << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
    }
    if (r >> (mbits + 1)) { /* rounded up to the next power of two */
        r >>= 1;
        q++;
    }
    if (r < (UINT64_C(1) << mbits)) /* subnormal (or zero): exponent field 0 */
        return (uint16_t)(sign | r);
    int biased = q + mbits + bias;
    if (biased >= (1 << ebits) - 1)
        return (uint16_t)(sign | (((1u << ebits) - 1) << mbits)); /* infinity */
    return (uint16_t)(sign | ((unsigned)biased << mbits) | (r - (UINT64_C(1) << mbits)));
}

/* A double rounded to the 16-bit format (mbits, ebits); NaN quiet with the
 * top of its payload. */
VQ__HALF_FN uint16_t vq__small_float_from_double(double d, int mbits, int ebits)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    bool neg = b >> 63;
    int ef = (int)(b >> 52 & 0x7ff);
    uint64_t frac = b & ((UINT64_C(1) << 52) - 1);
    uint16_t sign = neg ? (uint16_t)0x8000u : (uint16_t)0;
    uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
    if (ef == 0x7ff)
        return (uint16_t)(sign | inf |
                          (frac ? (1u << (mbits - 1)) | (uint16_t)(frac >> (52 - mbits)) : 0u));
    if (ef == 0)
        return vq__small_float_pack(neg, frac, -1074, mbits, ebits);
    return vq__small_float_pack(neg, frac | (UINT64_C(1) << 52), ef - 1075, mbits, ebits);
}

/* An f16 pattern as the f32 it is (exact; NaN made quiet). */
VQ__HALF_FN float vq__f16_bits_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ef = h >> 10 & 0x1f, frac = h & 0x3ffu, b;
    if (ef == 0x1f) {
        b = sign | 0x7f800000u | (frac ? 0x400000u | frac << 13 : 0u);
    } else if (ef) {
        b = sign | (ef + 112) << 23 | frac << 13; /* rebias 15 -> 127 */
    } else if (frac) {
        int top = 63 - vq__clz64(frac); /* subnormal frac * 2^-24: normal in f32 */
        b = sign | (uint32_t)(top + 103) << 23 | (frac << (23 - top) & 0x7fffffu);
    } else {
        b = sign;
    }
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* A bf16 pattern as the f32 it is (exact; NaN made quiet). */
VQ__HALF_FN float vq__bf16_bits_to_f32(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu))
        b |= 0x400000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

#endif
