/* The float-to-integer conversions of the cast op, written once for the CPU
 * kernel (ops/cpu/shape.c) and the CUDA one (ops/cuda/shape.cu): truncation
 * toward zero that saturates and sends NaN to 0. The bounds are exact
 * doubles: 2^31 and -2^31 - 1 (everything strictly between truncates into
 * range), 2^63 and -2^63. */
#ifndef VARQ_OPS_CAST_H
#define VARQ_OPS_CAST_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define VQ__CAST_FN __host__ __device__ inline
#else
#define VQ__CAST_FN static inline
#endif

VQ__CAST_FN int32_t vq__to_i32(double v)
{
    if (isnan(v))
        return 0;
    if (v >= 2147483648.0)
        return INT32_MAX;
    if (v <= -2147483649.0)
        return INT32_MIN;
    return (int32_t)v;
}

VQ__CAST_FN int64_t vq__to_i64(double v)
{
    if (isnan(v))
        return 0;
    if (v >= 0x1p63)
        return INT64_MAX;
    if (v < -0x1p63)
        return INT64_MIN;
    return (int64_t)v;
}

#endif
