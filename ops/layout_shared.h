/* What pad's CPU kernels (ops/cpu/layout.c) and CUDA kernels
 * (ops/cuda/index.cu) share, written once: the geometry of one padded dim
 * and the X coordinate each output coordinate reads. Plain C, and
 * __host__ __device__ under nvcc (shape_shared.h's VQ__SHARED_FN).
 *
 * A dim is cropped first, then padded, as onnxruntime does: a negative
 * begin (end) pad removes that many elements at the start (end) of X's dim;
 * what is left, `kept` elements from X's coordinate `lo` on, is padded by
 * `pb` elements before and the rest after, reflect and edge mirroring or
 * repeating the kept elements only. */
#ifndef VARQ_OPS_LAYOUT_SHARED_H
#define VARQ_OPS_LAYOUT_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN, VQ_MAX_DIMS */

#include <stdint.h>

/* Equal to params.h's VQ__PAD_* and kernels.h's VQ__CUDA_PAD_*. */
enum { VQ__PADMODE_CONSTANT, VQ__PADMODE_REFLECT, VQ__PADMODE_EDGE };

typedef struct vq__pad_geom {
    int ndim, mode;
    int64_t xshape[VQ_MAX_DIMS], oshape[VQ_MAX_DIMS];
    int64_t lo[VQ_MAX_DIMS];   /* X's first kept coordinate */
    int64_t kept[VQ_MAX_DIMS]; /* X's dim after the crops */
    int64_t pb[VQ_MAX_DIMS];   /* elements padded before the kept ones */
} vq__pad_geom;

/* The geometry of X (xshape) padded to Out (oshape) with the begin pads
 * begin (the end pads follow: Out's dim - X's - begin). */
VQ__SHARED_FN void vq__pad_geom_make(vq__pad_geom *g, int ndim, const int64_t *xshape,
                                     const int64_t *oshape, const int64_t *begin, int mode)
{
    g->ndim = ndim;
    g->mode = mode;
    for (int d = 0; d < ndim; d++) {
        int64_t b = begin[d], e = oshape[d] - xshape[d] - b;
        g->xshape[d] = xshape[d];
        g->oshape[d] = oshape[d];
        g->lo[d] = b < 0 ? -b : 0;
        g->pb[d] = b > 0 ? b : 0;
        g->kept[d] = xshape[d] + (b < 0 ? b : 0) + (e < 0 ? e : 0);
    }
}

/* The X coordinate that Out's coordinate c along dim d reads, or -1 where
 * it reads the constant (constant mode, outside the kept elements). */
VQ__SHARED_FN int64_t vq__pad_source(const vq__pad_geom *g, int d, int64_t c)
{
    int64_t j = c - g->pb[d], kept = g->kept[d];
    if (j < 0 || j >= kept) {
        if (g->mode == VQ__PADMODE_CONSTANT)
            return -1;
        if (g->mode == VQ__PADMODE_EDGE)
            j = j < 0 ? 0 : kept - 1;
        else
            j = j < 0 ? -j : 2 * (kept - 1) - j;
    }
    return g->lo[d] + j;
}

/* The Out coordinates that read X's coordinate x along dim d, as up to
 * three ranges [r[2k], r[2k + 1]) in increasing order; returns how many
 * (0 for a cropped coordinate). Constant: the coordinate itself; edge: a
 * range at each end; reflect (pads smaller than kept): the coordinate and
 * its mirror images at either end. pad_grad sums dOut over them. */
VQ__SHARED_FN int vq__pad_readers(const vq__pad_geom *g, int d, int64_t x, int64_t r[6])
{
    int64_t j = x - g->lo[d], kept = g->kept[d], pb = g->pb[d], od = g->oshape[d];
    if (j < 0 || j >= kept)
        return 0;
    int n = 0;
    if (g->mode == VQ__PADMODE_EDGE) {
        r[0] = j == 0 ? 0 : pb + j;
        r[1] = j == kept - 1 ? od : pb + j + 1;
        return 1;
    }
    if (g->mode == VQ__PADMODE_REFLECT && j >= 1 && j <= pb) {
        r[2 * n] = pb - j;
        r[2 * n + 1] = pb - j + 1;
        n++;
    }
    r[2 * n] = pb + j;
    r[2 * n + 1] = pb + j + 1;
    n++;
    int64_t mirror = pb + 2 * (kept - 1) - j;
    if (g->mode == VQ__PADMODE_REFLECT && j <= kept - 2 && mirror < od) {
        r[2 * n] = mirror;
        r[2 * n + 1] = mirror + 1;
        n++;
    }
    return n;
}

#endif
