/* The 16-bit floats (VQ_F16, VQ_BF16) one value at a time, exactly: the
 * reference every faster conversion (ops/math/half.c's F16C and
 * AVX512-BF16 loops, the CUDA kernels) is tested against, and what the
 * layers without a kernel use (.npy and ONNX constants, the CLI's
 * printing), with the element reads and writes by dtype built on them.
 *
 * Rounding is IEEE 754's default, to nearest with ties to even, done once
 * from the exact value: a double holds every f32, f16 and bf16 and every
 * integer up to 2^53 exactly, and the integers above that go through
 * vq__small_float_pack (half_bits.h) with all their bits, so no value is rounded twice.
 * Values past the largest finite one round to infinity as IEEE says (f16's
 * 65520 and up, bf16's 2^128 - 2^119 and up). NaN stays NaN, made quiet
 * (the top fraction bit set) with the top bits of its payload kept, as
 * F16C's and AVX512-BF16's instructions do, so the exact and the vector
 * paths agree bit for bit. */
#include "tensor_services.h"
#include "half_bits.h"

VQ_API uint16_t vq_f64_to_f16(double d)
{
    return vq__small_float_from_double(d, VQ__F16_FMT);
}

VQ_API uint16_t vq_f64_to_bf16(double d)
{
    return vq__small_float_from_double(d, VQ__BF16_FMT);
}

VQ_API uint16_t vq_f32_to_f16(float f)
{
    return vq__small_float_from_double(f, VQ__F16_FMT);
}

VQ_API uint16_t vq_f32_to_bf16(float f)
{
    return vq__small_float_from_double(f, VQ__BF16_FMT);
}

uint16_t vq__int_to_f16(bool neg, uint64_t magnitude)
{
    return vq__small_float_pack(neg, magnitude, 0, VQ__F16_FMT);
}

uint16_t vq__int_to_bf16(bool neg, uint64_t magnitude)
{
    return vq__small_float_pack(neg, magnitude, 0, VQ__BF16_FMT);
}

VQ_API float vq_f16_to_f32(uint16_t h)
{
    return vq__f16_bits_to_f32(h);
}

VQ_API float vq_bf16_to_f32(uint16_t h)
{
    return vq__bf16_bits_to_f32(h);
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
