/* What resize's CPU kernels (ops/cpu/resize.c) and CUDA kernels
 * (ops/cuda/resize.cu) share, written once: the geometry of a resize (ONNX
 * Resize), the X coordinates and weights ("taps") each output coordinate
 * reads along one dim, and the sum of one output element over its taps.
 * Plain C, and __host__ __device__ under nvcc (shape_shared.h's
 * VQ__SHARED_FN).
 *
 * Along dim d, Out's coordinate o maps to a real X coordinate x by the
 * coordinate transformation (s the dim's scale, len the resized length:
 * s * X's dim when scales were given, Out's dim when sizes were):
 *   half_pixel          (o + 0.5) / s - 0.5
 *   pytorch_half_pixel  the same, or -0.5 when len is 1
 *   align_corners       o * (X's dim - 1) / (len - 1), or 0 when len is 1
 *   asymmetric          o / s
 *   tf_half_pixel_for_nn (o + 0.5) / s
 *   tf_crop_and_resize  lo * (dim - 1) + o * (hi - lo) * (dim - 1) / (len - 1)
 *                       (the middle of the box when len is 1), lo and hi
 *                       the roi's start and end for the dim; outside
 *                       [0, dim - 1] the output element is the
 *                       extrapolation value
 * as ONNX's reference implementation computes it (in double). With
 * i = floor(x) and r = x - i, or i = x - 1 and r = 1 when x is whole:
 *   nearest  one tap: i, or i + 1 when r is 1, or by nearest_mode when r is
 *            not (round_prefer_floor: r > 0.5; round_prefer_ceil: r >= 0.5;
 *            floor: never; ceil: always)
 *   linear   i and i + 1, weights 1 - r and r
 *   cubic    i - 1 .. i + 2, Keys' weights of r with coefficient a (ONNX's
 *            cubic_coeffs); with exclude_outside the weights of coordinates
 *            outside X become 0 and the rest are scaled to sum to 1
 * Coordinates outside X are clamped to its edge (the reference pads X by
 * repeating its edge); taps of weight 0 are dropped.
 *
 * An output element is the nested sum over the dims, the last innermost:
 * sum over dim 0's taps of w0 * (sum over dim 1's taps of w1 * (...)), as
 * the reference interpolates one dim after the other; a dim whose one tap
 * has weight 1 only moves the offset (multiplying by 1 changes nothing).
 * The CPU and CUDA kernels evaluate the same sums in the same order, in
 * double, so their outputs agree bit for bit. */
#ifndef VARQ_OPS_RESIZE_SHARED_H
#define VARQ_OPS_RESIZE_SHARED_H

#include "params.h"       /* vq__resize_params, VQ__RESIZE_* */
#include "shape_shared.h" /* VQ__SHARED_FN, VQ_MAX_DIMS */

#include <math.h>
#include <stdint.h>

#define VQ__RESIZE_TAPS 4 /* at most, along one dim (cubic) */

typedef struct vq__resize_geom {
    int ndim, mode, ctm, nearest, exclude;
    double a;
    int64_t xshape[VQ_MAX_DIMS], oshape[VQ_MAX_DIMS];
    double scale[VQ_MAX_DIMS], len[VQ_MAX_DIMS];
    double lo[VQ_MAX_DIMS], hi[VQ_MAX_DIMS]; /* the roi */
} vq__resize_geom;

/* The geometry of X (xshape) resized to Out (oshape) by p. */
VQ__SHARED_FN void vq__resize_geom_make(vq__resize_geom *g, const vq__resize_params *p, int ndim,
                                        const int64_t *xshape, const int64_t *oshape)
{
    g->ndim = ndim;
    g->mode = p->mode;
    g->ctm = p->ctm;
    g->nearest = p->nearest;
    g->exclude = p->exclude;
    g->a = p->a;
    for (int d = 0; d < ndim; d++) {
        double in = (double)xshape[d], out = (double)oshape[d];
        g->xshape[d] = xshape[d];
        g->oshape[d] = oshape[d];
        g->lo[d] = p->roi[d];
        g->hi[d] = p->roi[ndim + d];
        if (p->scale[d] > 0) { /* scales given */
            g->scale[d] = p->scale[d];
            g->len[d] = p->scale[d] * in;
            if (p->ctm == VQ__RESIZE_TF_CROP_AND_RESIZE)
                g->len[d] *= g->hi[d] - g->lo[d];
        } else { /* sizes given: the reference's scale, out / in */
            g->scale[d] = in > 0 ? out / in : 1;
            g->len[d] = out;
        }
    }
}

/* Keys' cubic convolution weights of the four taps around r in (0, 1]
 * (ONNX's cubic_coeffs, the same operations). */
VQ__SHARED_FN void vq__resize_cubic(double r, double a, double *w)
{
    double r1 = r + 1, s = 1 - r, s1 = s + 1;
    w[0] = ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a;
    w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
    w[2] = ((a + 2) * s - (a + 3)) * s * s + 1;
    w[3] = ((a * s1 - 5 * a) * s1 + 8 * a) * s1 - 4 * a;
}

/* The taps of Out's coordinate o along dim d: X coordinates idx (clamped
 * into X) and weights w, at most VQ__RESIZE_TAPS; returns their count, or
 * 0 when the coordinate falls outside X in tf_crop_and_resize (the output
 * element is then the extrapolation value). */
VQ__SHARED_FN int vq__resize_taps(const vq__resize_geom *g, int d, int64_t o, int64_t *idx,
                                  double *w)
{
    int64_t in = g->xshape[d];
    double s = g->scale[d], len = g->len[d], od = (double)o, x;
    switch (g->ctm) {
    case VQ__RESIZE_PYTORCH_HALF_PIXEL: x = len == 1 ? -0.5 : (od + 0.5) / s - 0.5; break;
    case VQ__RESIZE_ALIGN_CORNERS: x = len == 1 ? 0 : od * (double)(in - 1) / (len - 1); break;
    case VQ__RESIZE_ASYMMETRIC: x = od / s; break;
    case VQ__RESIZE_TF_HALF_PIXEL_FOR_NN: x = (od + 0.5) / s; break;
    case VQ__RESIZE_TF_CROP_AND_RESIZE: {
        double lo = g->lo[d], span = g->hi[d] - lo, last = (double)(in - 1);
        x = len == 1 ? span * last / 2 : od * span * last / (len - 1);
        x += lo * last;
        if (!(x >= 0 && x <= last))
            return 0;
        break;
    }
    default: x = (od + 0.5) / s - 0.5; break; /* half_pixel */
    }
    double fl = floor(x), r = x - fl;
    int64_t i = (int64_t)fl;
    if (r == 0) { /* whole: the reference's ratio 1 on the coordinate below */
        i -= 1;
        r = 1;
    }
    int n;
    if (g->mode == VQ__RESIZE_NEAREST) {
        bool up = r == 1 || g->nearest == VQ__RESIZE_CEIL ||
                  (g->nearest == VQ__RESIZE_ROUND_PREFER_FLOOR && r > 0.5) ||
                  (g->nearest == VQ__RESIZE_ROUND_PREFER_CEIL && r >= 0.5);
        idx[0] = up ? i + 1 : i;
        w[0] = 1;
        n = 1;
    } else if (g->mode == VQ__RESIZE_LINEAR) {
        idx[0] = i;
        idx[1] = i + 1;
        w[0] = 1 - r;
        w[1] = r;
        n = 2;
    } else {
        for (int k = 0; k < 4; k++)
            idx[k] = i - 1 + k;
        vq__resize_cubic(r, g->a, w);
        n = 4;
    }
    if (g->exclude && n > 1) {
        double sum = 0;
        for (int k = 0; k < n; k++) {
            if (idx[k] < 0 || idx[k] >= in)
                w[k] = 0;
            sum += w[k];
        }
        for (int k = 0; k < n; k++)
            w[k] /= sum;
    }
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (w[k] == 0)
            continue;
        idx[m] = idx[k] < 0 ? 0 : idx[k] >= in ? in - 1 : idx[k];
        w[m++] = w[k];
    }
    return m;
}

/* One output element's taps: base is the X offset of the dims whose one
 * tap has weight 1; the other m dims, in order, have n[k] taps each, at X
 * offsets off[k][] (coordinate times the dim's stride) with weights w[k][]. */
typedef struct vq__resize_point {
    int m;
    int64_t base;
    int n[VQ_MAX_DIMS];
    int64_t off[VQ_MAX_DIMS][VQ__RESIZE_TAPS];
    double w[VQ_MAX_DIMS][VQ__RESIZE_TAPS];
} vq__resize_point;

/* Adds one dim's n taps (X coordinates idx, weights w; X's stride along
 * the dim) to p. */
VQ__SHARED_FN void vq__resize_point_add(vq__resize_point *p, int n, const int64_t *idx,
                                        const double *w, int64_t stride)
{
    if (n == 1 && w[0] == 1) {
        p->base += idx[0] * stride;
        return;
    }
    int k = p->m++;
    p->n[k] = n;
    for (int t = 0; t < n; t++) {
        p->off[k][t] = idx[t] * stride;
        p->w[k][t] = w[t];
    }
}

/* X's element at offset e (f32, or f64 when f64), as a double. */
VQ__SHARED_FN double vq__resize_read(const void *x, int64_t e, int f64)
{
    return f64 ? ((const double *)x)[e] : (double)((const float *)x)[e];
}

/* The nested sum of p over X (f32, or f64 when f64), in double. */
VQ__SHARED_FN double vq__resize_point_sum(const vq__resize_point *p, const void *x, int f64)
{
    int m = p->m;
    if (m == 0)
        return vq__resize_read(x, p->base, f64);
    if (m <= 2) { /* the common cases, the same operations in the same order */
        double acc0 = 0;
        for (int t0 = 0; t0 < p->n[0]; t0++) {
            int64_t e0 = p->base + p->off[0][t0];
            if (m == 1) {
                acc0 += p->w[0][t0] * vq__resize_read(x, e0, f64);
                continue;
            }
            double acc1 = 0;
            for (int t1 = 0; t1 < p->n[1]; t1++)
                acc1 += p->w[1][t1] * vq__resize_read(x, e0 + p->off[1][t1], f64);
            acc0 += p->w[0][t0] * acc1;
        }
        return acc0;
    }
    double acc[VQ_MAX_DIMS];
    int t[VQ_MAX_DIMS];
    for (int k = 0; k < m; k++) {
        acc[k] = 0;
        t[k] = 0;
    }
    for (;;) {
        int64_t e = p->base;
        for (int k = 0; k < m; k++)
            e += p->off[k][t[k]];
        acc[m - 1] += p->w[m - 1][t[m - 1]] * vq__resize_read(x, e, f64);
        int k = m - 1;
        while (++t[k] == p->n[k]) {
            t[k] = 0;
            if (k == 0)
                return acc[0];
            acc[k - 1] += p->w[k - 1][t[k - 1]] * acc[k];
            acc[k] = 0;
            k--;
        }
    }
}

/* Calls add(user, offset, weight) for each of p's taps: the X offset and
 * the product of its dims' weights times g (g * w0 * w1 * ..., in that
 * order): the gradient's scatter of one output element's g. */
#define VQ__RESIZE_POINT_SCATTER(p, g, ADD)           \
    do {                                              \
        int m_ = (p)->m, t_[VQ_MAX_DIMS];             \
        for (int k_ = 0; k_ < m_; k_++)               \
            t_[k_] = 0;                               \
        for (;;) {                                    \
            int64_t e_ = (p)->base;                   \
            double v_ = (g);                          \
            for (int k_ = 0; k_ < m_; k_++) {         \
                e_ += (p)->off[k_][t_[k_]];           \
                v_ *= (p)->w[k_][t_[k_]];             \
            }                                         \
            ADD(e_, v_);                              \
            int k_ = m_ - 1;                          \
            while (k_ >= 0 && ++t_[k_] == (p)->n[k_]) \
                t_[k_--] = 0;                         \
            if (k_ < 0)                               \
                break;                                \
        }                                             \
    } while (0)

#endif
