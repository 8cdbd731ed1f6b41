/* What the scatter family's CPU kernels (ops/cpu/scatter.c) and CUDA
 * kernels (ops/cuda/scatter.cu) share, written once, so that both walk the
 * tensors alike and combine elements with the same arithmetic: the
 * reductions, the lanes of scatter_elements and the index tuples of
 * scatter_nd and gather_nd. Plain C, and __host__ __device__ under nvcc
 * (shape_shared.h's VQ__SHARED_FN).
 *
 * Why lanes: every update that can land on a given element of Out lies in
 * one lane (scatter_elements: the Updates elements whose coordinates off
 * the axis are that element's; scatter_nd: one batch and one position in
 * the slice), and within its lane the updates come in Indices' order. So
 * running the lanes in any order, or at once, one thread each, applies
 * every element's updates in Indices' order: duplicates resolve alike on
 * every device (with reduction none the last one wins), and sums and
 * products round alike, without atomics. */
#ifndef VARQ_OPS_SCATTER_SHARED_H
#define VARQ_OPS_SCATTER_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN, VQ_MAX_DIMS */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* scatter_elements' and scatter_nd's reduction (vq__scatter_params): how
 * an update combines with the element it lands on. */
enum { VQ__SCATTER_NONE, VQ__SCATTER_ADD, VQ__SCATTER_MUL, VQ__SCATTER_MAX, VQ__SCATTER_MIN };

/* Element j of an i32 (is64 false) or i64 Indices tensor. */
VQ__SHARED_FN int64_t vq__index_at(const void *idx, bool is64, int64_t j)
{
    return is64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
}

/* a combined with the update v. Floats: add and mul round once each; max
 * and min follow reduce_max's rules (ops/cpu/extremum.c's TAKES_MAX: a
 * NaN wins and stays, +0 beats -0 for max and -0 beats +0 for min).
 * Integers: add and mul wrap (as unsigned). Bool: only reduction none. */
#define VQ__SCATTER_FLOAT_FN(name, T)                                                             \
    VQ__SHARED_FN T name(int red, T a, T v)                                                       \
    {                                                                                             \
        switch (red) {                                                                            \
        case VQ__SCATTER_ADD: return a + v;                                                       \
        case VQ__SCATTER_MUL: return a * v;                                                       \
        case VQ__SCATTER_MAX:                                                                     \
            return !isnan(a) && (isnan(v) || v > a || (v == a && signbit(a) && !signbit(v))) ? v  \
                                                                                             : a; \
        case VQ__SCATTER_MIN:                                                                     \
            return !isnan(a) && (isnan(v) || v < a || (v == a && !signbit(a) && signbit(v))) ? v  \
                                                                                             : a; \
        default: return v;                                                                        \
        }                                                                                         \
    }
#define VQ__SCATTER_INT_FN(name, T, U)                 \
    VQ__SHARED_FN T name(int red, T a, T v)            \
    {                                                  \
        switch (red) {                                 \
        case VQ__SCATTER_ADD: return (T)((U)a + (U)v); \
        case VQ__SCATTER_MUL: return (T)((U)a * (U)v); \
        case VQ__SCATTER_MAX: return v > a ? v : a;    \
        case VQ__SCATTER_MIN: return v < a ? v : a;    \
        default: return v;                             \
        }                                              \
    }
VQ__SCATTER_FLOAT_FN(vq__scatter_f32, float)
VQ__SCATTER_FLOAT_FN(vq__scatter_f64, double)
VQ__SCATTER_INT_FN(vq__scatter_i32, int32_t, uint32_t)
VQ__SCATTER_INT_FN(vq__scatter_i64, int64_t, uint64_t)
#undef VQ__SCATTER_FLOAT_FN
#undef VQ__SCATTER_INT_FN

VQ__SHARED_FN uint8_t vq__scatter_bool(int red, uint8_t a, uint8_t v)
{
    (void)red;
    (void)a;
    return v;
}

/* scatter_elements(X, Indices, Updates; axis): Updates and Indices share a
 * shape of X's rank. A lane is one coordinate of that shape off the axis,
 * walked along it: element k of lane l is Updates' (and Indices') element
 * u0 + k * ustride[axis], and lands in X's (Out's) element x0 + v *
 * xstride[axis], v the index there (negative counting from dim). */
typedef struct vq__elements_geom {
    int ndim, axis;
    int64_t ushape[VQ_MAX_DIMS];
    int64_t ustride[VQ_MAX_DIMS], xstride[VQ_MAX_DIMS]; /* contiguous, in elements */
    int64_t dim;                                        /* X's dim along the axis */
    int64_t len;   /* Updates' dim along the axis: a lane's elements */
    int64_t lanes; /* Updates' elements / len (0 when Updates is empty) */
} vq__elements_geom;

VQ__SHARED_FN void vq__elements_geom_make(vq__elements_geom *g, int ndim, const int64_t *xshape,
                                          const int64_t *ushape, int axis)
{
    int64_t us = 1, xs = 1;
    g->ndim = ndim;
    g->axis = axis;
    g->lanes = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        g->ushape[d] = ushape[d];
        g->ustride[d] = us;
        g->xstride[d] = xs;
        us *= ushape[d];
        xs *= xshape[d];
        if (d != axis)
            g->lanes *= ushape[d];
    }
    g->dim = xshape[axis];
    g->len = ushape[axis];
    if (g->len == 0)
        g->lanes = 0;
}

/* Lane l's first element in Updates (*u0) and the offset in X of its
 * coordinates with the axis' at 0 (*x0). */
VQ__SHARED_FN void vq__elements_lane(const vq__elements_geom *g, int64_t l, int64_t *u0,
                                     int64_t *x0)
{
    int64_t rest = l, u = 0, x = 0;
    for (int d = g->ndim - 1; d >= 0; d--) {
        if (d == g->axis)
            continue;
        int64_t c = rest % g->ushape[d];
        rest /= g->ushape[d];
        u += c * g->ustride[d];
        x += c * g->xstride[d];
    }
    *u0 = u;
    *x0 = x;
}

/* scatter_nd and gather_nd: X's dims are [batch..., tuple..., slice...]:
 * batch_dims batch dims, which Indices shares, then the k dims an index
 * tuple (Indices' last dim) addresses, then the slice each tuple moves.
 * Indices is [batch..., n..., k]; tuple t (0 .. batches * n - 1, in
 * Indices' order) is Indices' elements t * k .. t * k + k - 1 and moves
 * the slice at X's offset nd_source(t) to or from Updates' (gather_nd:
 * Out's) elements t * slice .. t * slice + slice - 1. */
typedef struct vq__nd_geom {
    int k, batch_dims;
    int64_t batches;                               /* the batch dims' product */
    int64_t n;                                     /* tuples per batch */
    int64_t slice;                                 /* elements per slice */
    int64_t block;                                 /* X's elements per batch */
    int64_t dim[VQ_MAX_DIMS], stride[VQ_MAX_DIMS]; /* tuple entry j: X's dim and stride */
} vq__nd_geom;

/* X's shape (xndim dims) and Indices' (indices_ndim >= batch_dims + 1,
 * its last dim k <= xndim - batch_dims). */
VQ__SHARED_FN void vq__nd_geom_make(vq__nd_geom *g, int xndim, const int64_t *xshape,
                                    int indices_ndim, const int64_t *ishape, int batch_dims)
{
    int k = (int)ishape[indices_ndim - 1];
    g->k = k;
    g->batch_dims = batch_dims;
    g->batches = 1;
    for (int d = 0; d < batch_dims; d++)
        g->batches *= xshape[d];
    g->n = 1;
    for (int d = batch_dims; d < indices_ndim - 1; d++)
        g->n *= ishape[d];
    g->slice = 1;
    for (int d = batch_dims + k; d < xndim; d++)
        g->slice *= xshape[d];
    int64_t s = g->slice;
    for (int j = k - 1; j >= 0; j--) {
        g->dim[j] = xshape[batch_dims + j];
        g->stride[j] = s;
        s *= xshape[batch_dims + j];
    }
    g->block = s;
}

/* X's offset of the slice tuple t addresses (g->n > 0), or -1 when one of
 * its entries is outside [-dim, dim) (the kernels that do not check
 * skip it). */
VQ__SHARED_FN int64_t vq__nd_source(const vq__nd_geom *g, const void *idx, bool is64, int64_t t)
{
    int64_t off = t / g->n * g->block;
    for (int j = 0; j < g->k; j++) {
        int64_t v = vq__index_at(idx, is64, t * g->k + j);
        v += v < 0 ? g->dim[j] : 0;
        if (v < 0 || v >= g->dim[j])
            return -1;
        off += v * g->stride[j];
    }
    return off;
}

#endif
