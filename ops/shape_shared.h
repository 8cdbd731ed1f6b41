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

#include "half_bits.h" /* the 16-bit floats' exact conversions (tensor/surface) */

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

/* ---- cast between any two dtypes (tensor.h's rules) ----
 *
 * A value goes through the widest type of its kind: a float source
 * through double (exact for f16, bf16, f32, f64), an integer or bool
 * source through its 64-bit two's-complement pattern and signedness, so
 * that each destination rounds once from the exact value: integers to f32
 * or the 16-bit floats with all their bits (no detour through a double),
 * floats to integers truncated toward zero and saturated (NaN to 0),
 * integers to narrower integers wrapped (the low bits), anything to bool
 * v != 0. dt is an int (a vq_dtype) so CUDA code passes it as is. */

VQ__SHARED_FN bool vq__cast_is_float(int dt)
{
    return dt == VQ_F32 || dt == VQ_F64 || dt == VQ_F16 || dt == VQ_BF16;
}

VQ__SHARED_FN bool vq__cast_is_signed(int dt)
{
    return dt == VQ_I32 || dt == VQ_I64 || dt == VQ_I8 || dt == VQ_I16;
}

VQ__SHARED_FN double vq__cast_load_float(int dt, const void *p, int64_t i)
{
    switch (dt) {
    case VQ_F32: return ((const float *)p)[i];
    case VQ_F64: return ((const double *)p)[i];
    case VQ_F16: return vq__f16_bits_to_f32(((const uint16_t *)p)[i]);
    default: return vq__bf16_bits_to_f32(((const uint16_t *)p)[i]);
    }
}

/* The integer or bool element's value as a 64-bit pattern, sign-extended
 * for the signed types. */
VQ__SHARED_FN uint64_t vq__cast_load_int(int dt, const void *p, int64_t i)
{
    switch (dt) {
    case VQ_I32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
    case VQ_I64: return (uint64_t)((const int64_t *)p)[i];
    case VQ_I8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
    case VQ_I16: return (uint64_t)(int64_t)((const int16_t *)p)[i];
    case VQ_U16: return ((const uint16_t *)p)[i];
    case VQ_U32: return ((const uint32_t *)p)[i];
    case VQ_U64: return ((const uint64_t *)p)[i];
    default: return ((const uint8_t *)p)[i]; /* u8, bool */
    }
}

/* v truncated toward zero, within [lo, hi] (exact doubles), NaN 0. */
VQ__SHARED_FN double vq__cast_sat(double v, double lo, double hi)
{
    if (isnan(v))
        return 0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

VQ__SHARED_FN void vq__cast_store_float(int dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case VQ_F32: ((float *)p)[i] = (float)v; break;
    case VQ_F64: ((double *)p)[i] = v; break;
    case VQ_F16: ((uint16_t *)p)[i] = vq__small_float_from_double(v, VQ__F16_FMT); break;
    case VQ_BF16: ((uint16_t *)p)[i] = vq__small_float_from_double(v, VQ__BF16_FMT); break;
    case VQ_I32: ((int32_t *)p)[i] = vq__to_i32(v); break;
    case VQ_I64: ((int64_t *)p)[i] = vq__to_i64(v); break;
    case VQ_I8: ((int8_t *)p)[i] = (int8_t)vq__cast_sat(v, INT8_MIN, INT8_MAX); break;
    case VQ_U8: ((uint8_t *)p)[i] = (uint8_t)vq__cast_sat(v, 0, UINT8_MAX); break;
    case VQ_I16: ((int16_t *)p)[i] = (int16_t)vq__cast_sat(v, INT16_MIN, INT16_MAX); break;
    case VQ_U16: ((uint16_t *)p)[i] = (uint16_t)vq__cast_sat(v, 0, UINT16_MAX); break;
    case VQ_U32: ((uint32_t *)p)[i] = (uint32_t)vq__cast_sat(v, 0, UINT32_MAX); break;
    case VQ_U64:
        ((uint64_t *)p)[i] = isnan(v) || v <= 0 ? 0 : v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
        break;
    default: ((uint8_t *)p)[i] = v != 0; break; /* bool: NaN is true */
    }
}

/* b: vq__cast_load_int's pattern; sgn: whether the source type is signed. */
VQ__SHARED_FN void vq__cast_store_int(int dt, void *p, int64_t i, uint64_t b, bool sgn)
{
    bool neg = sgn && (int64_t)b < 0;
    uint64_t mag = neg ? 0 - b : b;
    switch (dt) {
    case VQ_F32: ((float *)p)[i] = sgn ? (float)(int64_t)b : (float)b; break;
    case VQ_F64: ((double *)p)[i] = sgn ? (double)(int64_t)b : (double)b; break;
    case VQ_F16: ((uint16_t *)p)[i] = vq__small_float_pack(neg, mag, 0, VQ__F16_FMT); break;
    case VQ_BF16: ((uint16_t *)p)[i] = vq__small_float_pack(neg, mag, 0, VQ__BF16_FMT); break;
    case VQ_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)b; break;
    case VQ_I64: ((int64_t *)p)[i] = (int64_t)b; break;
    case VQ_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)b; break;
    case VQ_U8: ((uint8_t *)p)[i] = (uint8_t)b; break;
    case VQ_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)b; break;
    case VQ_U16: ((uint16_t *)p)[i] = (uint16_t)b; break;
    case VQ_U32: ((uint32_t *)p)[i] = (uint32_t)b; break;
    case VQ_U64: ((uint64_t *)p)[i] = b; break;
    default: ((uint8_t *)p)[i] = b != 0; break;
    }
}

/* Element i of src (dtype sdt) converted into element i of dst (ddt). */
VQ__SHARED_FN void vq__cast_one(int sdt, const void *src, int ddt, void *dst, int64_t i)
{
    if (vq__cast_is_float(sdt))
        vq__cast_store_float(ddt, dst, i, vq__cast_load_float(sdt, src, i));
    else
        vq__cast_store_int(ddt, dst, i, vq__cast_load_int(sdt, src, i), vq__cast_is_signed(sdt));
}

#endif
