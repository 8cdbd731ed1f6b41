/* What the CPU kernels (ops/cpu) and the CUDA side (ops/cuda) share about
 * shapes, written once, so that both walk and split tensors alike: the
 * strided box that transpose, concat, slice and their gradients copy
 * (ops/cpu/shape.c, ops/cuda/shape.cu), cast's float-to-integer
 * conversions, a tensor's lines around an axis (softmax, gather, argmax),
 * and matmul's products (ops/cpu/matmul.c, ops/cuda/matmul_host.c). Plain C,
 * and __host__ __device__ under nvcc (VQ__SHARED_FN, which the other
 * *_shared.h headers take from here). */
#ifndef VARQ_OPS_SHAPE_SHARED_H
#define VARQ_OPS_SHAPE_SHARED_H

#include <limits.h>
#include <math.h>
#include <stdbool.h>
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

/* A tensor of ndim dims seen as [outer, len, inner] around axis: the lines
 * along the axis that softmax, log_softmax, gather and argmax walk
 * (ops/cpu/activation.c, index.c, extremum.c; ops/cuda/<family>_host.c). */
VQ__SHARED_FN void vq__lines_of(int ndim, const int64_t *shape, int axis, int64_t *outer,
                                int64_t *len, int64_t *inner)
{
    *outer = *inner = 1;
    *len = shape[axis];
    for (int i = 0; i < axis; i++)
        *outer *= shape[i];
    for (int i = axis + 1; i < ndim; i++)
        *inner *= shape[i];
}

/* One matmul call's matrices (ops/cpu/matmul.c, ops/cuda/matmul_host.c):
 * batch products of op(X_b) [m, k] by op(Y_b) [k, n]. */
typedef struct vq__matmul_dims {
    int64_t batch, m, n, k;
    bool shared; /* one Y (2-D) for every batch */
} vq__matmul_dims;

/* X [..., xm0, xm1] by Y [..., ym0, ym1], transposed as tx and ty say. */
VQ__SHARED_FN vq__matmul_dims vq__matmul_dims_of(int xndim, const int64_t *xshape, int yndim,
                                                 const int64_t *yshape, bool tx, bool ty)
{
    vq__matmul_dims d;
    d.batch = 1;
    d.shared = yndim == 2;
    for (int i = 0; i < xndim - 2; i++)
        d.batch *= xshape[i];
    const int64_t *xm = xshape + xndim - 2, *ym = yshape + yndim - 2;
    d.m = tx ? xm[1] : xm[0];
    d.k = tx ? xm[0] : xm[1];
    d.n = ty ? ym[0] : ym[1];
    /* With a shared Y and X not transposed, X's batches stacked are one
     * [batch*m, k] matrix: one gemm instead of batch small ones. Both
     * devices stack alike: it decides in which order a shared Y's gradient
     * sums over the batches. */
    if (d.shared && !tx && d.batch > 1 && d.batch * d.m <= INT_MAX) {
        d.m *= d.batch;
        d.batch = 1;
    }
    return d;
}

#endif
