/* What the 3-D convolutions' CPU kernels (ops/cpu/conv3d.c) and CUDA
 * kernels (ops/cuda/conv3d.cu) share, written once: the geometry of one
 * call (vq__vol), which input element a column entry reads (vol2col), and
 * the sum that col2vol gathers into one input element. Plain C, and
 * __host__ __device__ under nvcc, so that both sides pad and add alike.
 *
 * Layout is NCDHW. A window of output (z, y, x) taps input depth
 * z * sd - pd + a * dd for a < kd (rows and columns alike); taps outside
 * the input are padding. A group's columns are a [cg * kd * kh * kw,
 * od * oh * ow] matrix: row ((c * kd + a) * kh + b) * kw + e holds tap
 * (a, b, e) of channel c for every window. */
#ifndef VARQ_OPS_VOL_SHARED_H
#define VARQ_OPS_VOL_SHARED_H

#include "shape_shared.h"  /* VQ__SHARED_FN */
#include "window_shared.h" /* vq__window_source, along each of the three dims */

#include <stdbool.h>
#include <stdint.h>

typedef struct vq__vol {
    int64_t n, c, d, h, w; /* input [N, C, D, H, W] */
    int64_t od, oh, ow;    /* output depth, height, width */
    int64_t kd, kh, kw;    /* window */
    int64_t sd, sh, sw;    /* strides */
    int64_t pd, ph, pw;    /* leading pads (the trailing ones only shape Out) */
    int64_t dd, dh, dw;    /* dilations */
    int64_t groups, m;     /* m: output channels */
    int64_t cg, mg;        /* input and output channels per group */
    int64_t rows;          /* cg * kd * kh * kw: the rows of a group's columns */
    int64_t plane;         /* od * oh * ow: their columns */
    int64_t vol;           /* d * h * w: one input channel's elements */
} vq__vol;

/* x: X's shape (5 dims), w: W's [M, C / groups, kd, kh, kw], out: Out's
 * (conv3d) or dOut's (conv3d_grad) shape; stride[3], pad[6] (front, top,
 * left, back, bottom, right), dilation[3]: params.h's vq__conv3d_params. */
VQ__SHARED_FN vq__vol vq__vol_of(const int64_t *x, const int64_t *w, int64_t groups,
                                 const int64_t *out, const int64_t *stride, const int64_t *pad,
                                 const int64_t *dilation)
{
    vq__vol v;
    v.n = x[0];
    v.c = x[1];
    v.d = x[2];
    v.h = x[3];
    v.w = x[4];
    v.od = out[2];
    v.oh = out[3];
    v.ow = out[4];
    v.kd = w[2];
    v.kh = w[3];
    v.kw = w[4];
    v.sd = stride[0];
    v.sh = stride[1];
    v.sw = stride[2];
    v.pd = pad[0];
    v.ph = pad[1];
    v.pw = pad[2];
    v.dd = dilation[0];
    v.dh = dilation[1];
    v.dw = dilation[2];
    v.groups = groups;
    v.m = w[0];
    v.cg = w[1];
    v.mg = v.m / groups;
    v.rows = v.cg * v.kd * v.kh * v.kw;
    v.plane = v.od * v.oh * v.ow;
    v.vol = v.d * v.h * v.w;
    return v;
}

/* The element of one image's channels [cg, d, h, w] that column entry
 * (row, col) reads, or -1 where it lies in the padding. */
VQ__SHARED_FN int64_t vq__vol_tap(const vq__vol *v, int64_t row, int64_t col)
{
    int64_t e = row % v->kw, t = row / v->kw;
    int64_t b = t % v->kh;
    t /= v->kh;
    int64_t a = t % v->kd, ch = t / v->kd;
    int64_t x = col % v->ow, y = (col / v->ow) % v->oh, z = col / (v->ow * v->oh);
    int64_t iz = z * v->sd - v->pd + a * v->dd, iy = y * v->sh - v->ph + b * v->dh,
            ix = x * v->sw - v->pw + e * v->dw;
    if (iz < 0 || iz >= v->d || iy < 0 || iy >= v->h || ix < 0 || ix >= v->w)
        return -1;
    return ((ch * v->d + iz) * v->h + iy) * v->w + ix;
}

/* col2vol for element i of one image's channels [cg, d, h, w]: the sum,
 * from 0 and in the order of the taps (a, b, e), of the column entries
 * that read it: what conv3d.c's col2vol adds into a zeroed image. */
#define VQ__VOL_GATHER(NAME, T)                                                         \
    VQ__SHARED_FN T NAME(const T *col, const vq__vol *v, int64_t i)                     \
    {                                                                                   \
        int64_t ix = i % v->w, iy = (i / v->w) % v->h, iz = (i / (v->w * v->h)) % v->d; \
        int64_t ch = i / v->vol;                                                        \
        T s = 0;                                                                        \
        for (int64_t a = 0; a < v->kd; a++) {                                           \
            int64_t z = vq__window_source(iz, a, v->pd, v->sd, v->dd, v->od);           \
            if (z < 0)                                                                  \
                continue;                                                               \
            for (int64_t b = 0; b < v->kh; b++) {                                       \
                int64_t y = vq__window_source(iy, b, v->ph, v->sh, v->dh, v->oh);       \
                if (y < 0)                                                              \
                    continue;                                                           \
                for (int64_t e = 0; e < v->kw; e++) {                                   \
                    int64_t x = vq__window_source(ix, e, v->pw, v->sw, v->dw, v->ow);   \
                    if (x < 0)                                                          \
                        continue;                                                       \
                    int64_t row = ((ch * v->kd + a) * v->kh + b) * v->kw + e;           \
                    s += col[row * v->plane + (z * v->oh + y) * v->ow + x];             \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        return s;                                                                       \
    }

VQ__VOL_GATHER(vq__vol_gather_f32, float)
VQ__VOL_GATHER(vq__vol_gather_f64, double)

#endif
