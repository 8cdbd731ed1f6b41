/* The 16-bit floats (VQ_F16, VQ_BF16) one value at a time, exactly: the
 * reference every faster conversion (ops/math/half.c's F16C and
 * AVX512-BF16 loops, the CUDA kernels) is tested against, and what the
 * layers without a kernel use (.npy and ONNX constants, the CLI's
 * printing), with the element reads and writes by dtype built on them.
 *
 * Rounding is IEEE 754's default, to nearest with ties to even, done once
 * from the exact value: a double holds every f32, f16 and bf16 and every
 * integer up to 2^53 exactly, and the integers above that go through
 * small_float_pack with all their bits, so no value is rounded twice.
 * Values past the largest finite one round to infinity as IEEE says (f16's
 * 65520 and up, bf16's 2^128 - 2^119 and up). NaN stays NaN, made quiet
 * (the top fraction bit set) with the top bits of its payload kept, as
 * F16C's and AVX512-BF16's instructions do, so the exact and the vector
 * paths agree bit for bit. */
#include "tensor_services.h"

#include <string.h>

/* The 16-bit pattern of the finite value (-1)^neg * m * 2^e rounded to a
 * float with mbits fraction bits and ebits exponent bits (IEEE layout: f16
 * 10 and 5, bf16 7 and 8): nearest, ties to even, subnormals rounded at
 * their fixed quantum, past the largest finite value infinity. */
static uint16_t small_float_pack(bool neg, uint64_t m, int e, int mbits, int ebits)
{
    uint16_t sign = neg ? (uint16_t)0x8000u : 0;
    if (m == 0)
        return sign;
    int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
    int top = 63 - __builtin_clzll(m); /* the value is in [2^(top+e), 2^(top+e+1)) */
    int exp = top + e;
    /* the quantum, the value of the last fraction bit: 2^q */
    int q = (exp < emin ? emin : exp) - mbits;
    int shift = q - e; /* bits of m below the quantum */
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

/* A double rounded to the 16-bit format (mbits, ebits). */
static uint16_t from_double(double d, int mbits, int ebits)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    bool neg = b >> 63;
    int ef = (int)(b >> 52 & 0x7ff);
    uint64_t frac = b & ((UINT64_C(1) << 52) - 1);
    uint16_t sign = neg ? (uint16_t)0x8000u : 0;
    uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
    if (ef == 0x7ff) {
        if (!frac)
            return (uint16_t)(sign | inf);
        /* NaN: quiet, the top of the payload kept */
        return (uint16_t)(sign | inf | (1u << (mbits - 1)) | (uint16_t)(frac >> (52 - mbits)));
    }
    if (ef == 0)
        return small_float_pack(neg, frac, -1074, mbits, ebits);
    return small_float_pack(neg, frac | (UINT64_C(1) << 52), ef - 1075, mbits, ebits);
}

VQ_API uint16_t vq_f64_to_f16(double d)
{
    return from_double(d, 10, 5);
}

VQ_API uint16_t vq_f64_to_bf16(double d)
{
    return from_double(d, 7, 8);
}

VQ_API uint16_t vq_f32_to_f16(float f)
{
    return from_double(f, 10, 5);
}

VQ_API uint16_t vq_f32_to_bf16(float f)
{
    return from_double(f, 7, 8);
}

uint16_t vq__int_to_f16(bool neg, uint64_t magnitude)
{
    return small_float_pack(neg, magnitude, 0, 10, 5);
}

uint16_t vq__int_to_bf16(bool neg, uint64_t magnitude)
{
    return small_float_pack(neg, magnitude, 0, 7, 8);
}

VQ_API float vq_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ef = h >> 10 & 0x1f, frac = h & 0x3ffu, b;
    if (ef == 0x1f) {
        b = sign | 0x7f800000u | (frac ? 0x400000u | frac << 13 : 0); /* NaN made quiet */
    } else if (ef) {
        b = sign | (ef + 112) << 23 | frac << 13; /* rebias 15 -> 127 */
    } else if (frac) {
        /* subnormal: frac * 2^-24, normal in f32 */
        int top = 31 - __builtin_clz(frac); /* 0..9 */
        b = sign | (uint32_t)(top + 103) << 23 | (frac << (23 - top) & 0x7fffffu);
    } else {
        b = sign;
    }
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

VQ_API float vq_bf16_to_f32(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu))
        b |= 0x400000u; /* NaN made quiet, as f16's */
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

double vq__elem_get(vq_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case VQ_F32: return ((const float *)data)[i];
    case VQ_F64: return ((const double *)data)[i];
    case VQ_I32: return ((const int32_t *)data)[i];
    case VQ_I64: return (double)((const int64_t *)data)[i];
    case VQ_BOOL: return ((const uint8_t *)data)[i];
    case VQ_F16: return vq_f16_to_f32(((const uint16_t *)data)[i]);
    case VQ_BF16: return vq_bf16_to_f32(((const uint16_t *)data)[i]);
    case VQ_I8: return ((const int8_t *)data)[i];
    case VQ_U8: return ((const uint8_t *)data)[i];
    case VQ_I16: return ((const int16_t *)data)[i];
    case VQ_U16: return ((const uint16_t *)data)[i];
    case VQ_U32: return ((const uint32_t *)data)[i];
    case VQ_U64: return (double)((const uint64_t *)data)[i];
    }
    return 0;
}

/* v truncated toward zero and clamped to [lo, hi]; NaN gives 0. */
static double clamp_trunc(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    v = v < 0 ? -__builtin_floor(-v) : __builtin_floor(v);
    return v < lo ? lo : v > hi ? hi : v;
}

void vq__elem_set(vq_dtype dt, void *data, int64_t i, double v)
{
    switch (dt) {
    case VQ_F32: ((float *)data)[i] = (float)v; break;
    case VQ_F64: ((double *)data)[i] = v; break;
    case VQ_I32: ((int32_t *)data)[i] = (int32_t)clamp_trunc(v, INT32_MIN, INT32_MAX); break;
    case VQ_I64:
        ((int64_t *)data)[i] = v != v        ? 0
                               : v >= 0x1p63 ? INT64_MAX
                               : v < -0x1p63 ? INT64_MIN
                                             : (int64_t)v;
        break;
    case VQ_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    case VQ_F16: ((uint16_t *)data)[i] = vq_f64_to_f16(v); break;
    case VQ_BF16: ((uint16_t *)data)[i] = vq_f64_to_bf16(v); break;
    case VQ_I8: ((int8_t *)data)[i] = (int8_t)clamp_trunc(v, INT8_MIN, INT8_MAX); break;
    case VQ_U8: ((uint8_t *)data)[i] = (uint8_t)clamp_trunc(v, 0, UINT8_MAX); break;
    case VQ_I16: ((int16_t *)data)[i] = (int16_t)clamp_trunc(v, INT16_MIN, INT16_MAX); break;
    case VQ_U16: ((uint16_t *)data)[i] = (uint16_t)clamp_trunc(v, 0, UINT16_MAX); break;
    case VQ_U32: ((uint32_t *)data)[i] = (uint32_t)clamp_trunc(v, 0, UINT32_MAX); break;
    case VQ_U64:
        ((uint64_t *)data)[i] = v != v || v <= 0 ? 0 : v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
        break;
    }
}
