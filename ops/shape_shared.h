/* What the shape ops' CPU kernels (ops/cpu/shape.c) and CUDA kernels
 * (ops/cuda/shape.cu) share, written once: the strided box that transpose,
 * concat, slice and their gradients copy, and cast's float-to-integer
 * conversions. Plain C, and __host__ __device__ under nvcc. */
#ifndef VARQ_OPS_SHAPE_SHARED_H
#define VARQ_OPS_SHAPE_SHARED_H

#include <math.h>
#include <stdint.h>

#include <varq/tensor.h> /* VQ_MAX_DIMS */

#ifdef __CUDACC__
#define VQ__SHARED_FN __host__ __device__ inline
#else
#define VQ__SHARED_FN static inline
#endif

/* A box of elements copied from src to dst: its shape, and each side's
 * strides in elements. */
typedef struct vq__box {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    int64_t src[VQ_MAX_DIMS], dst[VQ_MAX_DIMS];
} vq__box;

/* Drops dims of size 1 and merges dim d into the kept dim before it where
 * both sides step over dim d exactly once per step of that dim. */
VQ__SHARED_FN void vq__box_simplify(vq__box *b)
{
    int n = 0;
    for (int d = 0; d < b->ndim; d++) {
        if (b->shape[d] == 1)
            continue;
        if (n > 0 && b->src[n - 1] == b->src[d] * b->shape[d] &&
            b->dst[n - 1] == b->dst[d] * b->shape[d]) {
            b->shape[n - 1] *= b->shape[d];
            b->src[n - 1] = b->src[d];
            b->dst[n - 1] = b->dst[d];
            continue;
        }
        b->shape[n] = b->shape[d];
        b->src[n] = b->src[d];
        b->dst[n] = b->dst[d];
        n++;
    }
    b->ndim = n;
}

/* cast: truncation toward zero that saturates and sends NaN to 0. The
 * bounds are exact doubles: 2^31 and -2^31 - 1 (everything strictly
 * between truncates into range), 2^63 and -2^63. */

VQ__SHARED_FN int32_t vq__to_i32(double v)
{
    if (isnan(v))
        return 0;
    if (v >= 2147483648.0)
        return INT32_MAX;
    if (v <= -2147483649.0)
        return INT32_MIN;
    return (int32_t)v;
}

VQ__SHARED_FN int64_t vq__to_i64(double v)
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
