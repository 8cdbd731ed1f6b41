/* What the sliding-window ops' CPU kernels (ops/cpu/conv.c, ops/cpu/pool.c)
 * and CUDA kernels (ops/cuda/conv.cu) share, written once: the geometry of
 * one call (vq__window), the rule for the output size, which input element
 * a window's tap reads, how many elements an average divides by, and where
 * a max pool window has its maximum. Plain C, and __host__ __device__
 * under nvcc, so that both sides clip, count and break ties alike.
 *
 * Layout is NCHW. A window of output (oh, ow) taps input rows
 * oh * sh - pt + i * dh for i < kh and columns ow * sw - pl + j * dw for
 * j < kw; taps outside [0, h) x [0, w) are padding. */
#ifndef VARQ_OPS_WINDOW_SHARED_H
#define VARQ_OPS_WINDOW_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN */

#include <stdbool.h>
#include <stdint.h>

/* The code (vq__op_def.code) of max_pool2d, avg_pool2d and their
 * gradients: which pool, for the CUDA launches the two share
 * (ops/cuda/pool_host.c). */
enum { VQ__POOL_MAX = 1, VQ__POOL_AVG = 2 };

/* One call's geometry. conv2d: c is all of X's channels and kh, kw are
 * W's last two dims; the pools have no groups and avg_pool2d no dilation
 * (dh = dw = 1). */
typedef struct vq__window {
    int64_t n, c, h, w;     /* input [N, C, H, W] */
    int64_t oh, ow;         /* output height and width */
    int64_t kh, kw;         /* window */
    int64_t sh, sw;         /* strides */
    int64_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
    int64_t dh, dw;         /* dilations */
} vq__window;

/* The geometry of a call from X's shape (4 dims), the window, Out's shape
 * (4 dims) and the attributes as params.h's vq__window_params holds them:
 * stride[2], pad[4] (top, left, bottom, right), dilation[2]. */
VQ__SHARED_FN vq__window vq__window_make(const int64_t *x, int64_t kh, int64_t kw,
                                         const int64_t *out, const int64_t *stride,
                                         const int64_t *pad, const int64_t *dilation)
{
    vq__window w;
    w.n = x[0];
    w.c = x[1];
    w.h = x[2];
    w.w = x[3];
    w.oh = out[2];
    w.ow = out[3];
    w.kh = kh;
    w.kw = kw;
    w.sh = stride[0];
    w.sw = stride[1];
    w.pt = pad[0];
    w.pl = pad[1];
    w.pb = pad[2];
    w.pr = pad[3];
    w.dh = dilation[0];
    w.dw = dilation[1];
    return w;
}

/* Output size along one dim: input n, pads p0 and p1, window k, stride s,
 * dilation d: floor((n + p0 + p1 - d (k - 1) - 1) / s) + 1, or ceil with
 * ceil_mode, which then drops a last window that would start past the
 * input and the leading pad (PyTorch's rule: every window starts on the
 * input or its leading pad). 0 when the dilated window is larger than the
 * padded input; -1 when n or k is unknown (< 0). */
VQ__SHARED_FN int64_t vq__window_out(int64_t n, int64_t p0, int64_t p1, int64_t k, int64_t s,
                                     int64_t d, bool ceil_mode)
{
    if (n < 0 || k < 0)
        return -1;
    int64_t span = n + p0 + p1 - d * (k - 1) - 1;
    if (span < 0)
        return 0;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= n + p0)
        o--;
    return o;
}

/* The outputs o in [*lo, *hi) whose tap o * s + off lands in [0, n), for
 * nout outputs: the rows or columns a tap reads from the input rather than
 * from the padding (im2col's copy ranges). */
VQ__SHARED_FN void vq__window_taps(int64_t off, int64_t s, int64_t n, int64_t nout, int64_t *lo,
                                   int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = n - 1 - off < 0 ? 0 : (n - 1 - off) / s + 1;
    if (b > nout)
        b = nout;
    if (a > b)
        a = b;
    *lo = a;
    *hi = b;
}

/* The output along one dim whose window's tap t reads input index i, or
 * -1: i = o * s - p0 + t * d for 0 <= o < nout. */
VQ__SHARED_FN int64_t vq__window_source(int64_t i, int64_t t, int64_t p0, int64_t s, int64_t d,
                                        int64_t nout)
{
    int64_t u = i + p0 - t * d;
    if (u < 0 || u % s != 0 || u / s >= nout)
        return -1;
    return u / s;
}

/* What avg_pool2d divides the window of output (oh, ow) by: with
 * count_include_pad, the window's taps on the input or the pads (a
 * window that runs past the trailing pad, which ceil_mode allows, counts
 * up to the pad's end), else those on the input alone (PyTorch's rule).
 * 0 only for a window wholly in the padding without count_include_pad;
 * the average is then 0 / 0, NaN. */
VQ__SHARED_FN int64_t vq__window_avg_count(const vq__window *w, int64_t oh, int64_t ow,
                                           bool count_include_pad)
{
    int64_t h0 = oh * w->sh - w->pt, w0 = ow * w->sw - w->pl;
    int64_t h1 = h0 + w->kh, w1 = w0 + w->kw;
    int64_t hmax = count_include_pad ? w->h + w->pb : w->h;
    int64_t wmax = count_include_pad ? w->w + w->pr : w->w;
    if (!count_include_pad) {
        h0 = h0 < 0 ? 0 : h0;
        w0 = w0 < 0 ? 0 : w0;
    }
    h1 = h1 < hmax ? h1 : hmax;
    w1 = w1 < wmax ? w1 : wmax;
    return (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
}

/* The element of plane x ([h, w]) where max_pool2d's window of output
 * (oh, ow) has its maximum, as an offset in the plane: the first in the
 * window's row-major order among equal maxima, a NaN beating any number
 * (the first NaN); taps in the padding (-inf) are skipped. -1 when every
 * tap is padding: the output is then -inf and its gradient goes nowhere. */
#define VQ__WINDOW_ARGMAX(name, T)                                                          \
    VQ__SHARED_FN int64_t name(const T *x, const vq__window *w, int64_t oh, int64_t ow)    \
    {                                                                                       \
        int64_t best = -1;                                                                  \
        T bv = 0;                                                                           \
        for (int64_t i = 0; i < w->kh; i++) {                                               \
            int64_t ih = oh * w->sh - w->pt + i * w->dh;                                    \
            if (ih < 0 || ih >= w->h)                                                       \
                continue;                                                                   \
            for (int64_t j = 0; j < w->kw; j++) {                                           \
                int64_t iw = ow * w->sw - w->pl + j * w->dw;                                \
                if (iw < 0 || iw >= w->w)                                                   \
                    continue;                                                               \
                T v = x[ih * w->w + iw];                                                    \
                if (best < 0 || v > bv || (v != v && bv == bv)) {                           \
                    best = ih * w->w + iw;                                                  \
                    bv = v;                                                                 \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        return best;                                                                        \
    }

VQ__WINDOW_ARGMAX(vq__window_argmax_f32, float)
VQ__WINDOW_ARGMAX(vq__window_argmax_f64, double)

/* One conv2d call's shapes, for the CPU kernels (ops/cpu/conv.c) and the
 * CUDA ones (ops/cuda/conv_host.c) alike: the window over all of X's channels
 * and the matrices of one group's product, Out_g [mg, plane] = W_g [mg,
 * rows] times the group's columns [rows, plane]. */
typedef struct vq__conv {
    vq__window w;
    int64_t groups, m; /* m: output channels */
    int64_t cg, mg;    /* input and output channels per group */
    int64_t rows;      /* cg * kh * kw: the rows of a group's columns */
    int64_t plane;     /* oh * ow: their columns */
    bool direct;       /* 1x1, stride 1, no pads: X's plane is the matrix */
} vq__conv;

/* x: X's shape, w: W's [M, C / groups, kh, kw], out: Out's (conv2d) or
 * dOut's (conv2d_grad); stride, pad, dilation: params.h's
 * vq__window_params. */
VQ__SHARED_FN vq__conv vq__conv_of(const int64_t *x, const int64_t *w, int64_t groups,
                                   const int64_t *out, const int64_t *stride, const int64_t *pad,
                                   const int64_t *dilation)
{
    vq__conv cv;
    cv.w = vq__window_make(x, w[2], w[3], out, stride, pad, dilation);
    cv.groups = groups;
    cv.m = w[0];
    cv.cg = w[1];
    cv.mg = cv.m / cv.groups;
    cv.rows = cv.cg * cv.w.kh * cv.w.kw;
    cv.plane = cv.w.oh * cv.w.ow;
    cv.direct = cv.w.kh == 1 && cv.w.kw == 1 && cv.w.sh == 1 && cv.w.sw == 1 && cv.w.pt == 0 &&
                cv.w.pl == 0 && cv.w.pb == 0 && cv.w.pr == 0;
    return cv;
}

#endif
