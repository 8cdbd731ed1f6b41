/* conv2d's depthwise path on the CPU, to which conv2d_kernel (conv.c)
 * hands a depthwise call a block of output planes at a time
 * (vq__conv_depthwise): groups > 1 with one input channel per group
 * (MobileNet's 3x3 layers). Each output plane is a small stencil over one
 * input plane, which im2col and a one-row product handle poorly (a 9-row
 * copy of the plane, and a gemm call per channel). Here each output row
 * starts at 0 and adds one tap at a time over its valid columns
 * (vq__window_taps), in tap order (i, j): a row of products, which
 * vectorizes along the row at stride 1. Then the same output pass (bias,
 * clip) as the gemm path. A plane's sum order is fixed, so the result
 * does not depend on how the planes are shared. Faster paths for 3x3 and
 * for any k x k at stride 1 or 2 (below) keep that order: the same bits.
 *
 * A kernel family of its own, apart from conv.c's gemm paths: it shares
 * only the call's job and the output pass with them (conv.h). */
#include "conv.h"
#include "../math/isa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The columns of kw 3: tap j reads input column c * stride + off[j] for
 * output columns [lo[j], hi[j]); all three read the input in [a, b). */
struct dw_cols {
    int64_t lo[3], hi[3], off[3], a, b;
};

static void dw_cols_of(const vq__window *v, struct dw_cols *k)
{
    for (int j = 0; j < 3; j++) {
        k->off[j] = j * v->dw - v->pl;
        vq__window_taps(k->off[j], v->sw, v->w, v->ow, &k->lo[j], &k->hi[j]);
    }
    int64_t a = k->lo[0] > k->lo[1] ? k->lo[0] : k->lo[1];
    int64_t b = k->hi[0] < k->hi[1] ? k->hi[0] : k->hi[1];
    a = a > k->lo[2] ? a : k->lo[2];
    b = b < k->hi[2] ? b : k->hi[2];
    if (a > b)
        a = b = 0;
    k->a = a;
    k->b = b;
}

/* One input row's three taps (kw 3) into the output row r, in tap order
 * like the general loop, so the same sums: columns that all three taps
 * read from the input in one pass, the others tap by tap. */
#define DEPTHWISE_ROW3(T)                                                                       \
    VECTORIZE static void dw_row3_##T(const T *restrict xr, const T *restrict w, T *restrict r, \
                                      const struct dw_cols *k, int64_t s)                       \
    {                                                                                           \
        const int64_t *lo = k->lo, *hi = k->hi, *off = k->off, a = k->a, b = k->b;              \
        for (int j = 0; j < 3; j++) { /* the columns before a and from b on */                  \
            for (int64_t c = lo[j]; c < hi[j] && c < a; c++)                                    \
                r[c] += w[j] * xr[c * s + off[j]];                                              \
            for (int64_t c = lo[j] > b ? lo[j] : b; c < hi[j]; c++)                             \
                r[c] += w[j] * xr[c * s + off[j]];                                              \
        }                                                                                       \
        T w0 = w[0], w1 = w[1], w2 = w[2];                                                      \
        if (s == 1) {                                                                           \
            const T *x0 = xr + off[0], *x1 = xr + off[1], *x2 = xr + off[2];                    \
            for (int64_t c = a; c < b; c++)                                                     \
                r[c] = r[c] + w0 * x0[c] + w1 * x1[c] + w2 * x2[c];                             \
        } else {                                                                                \
            for (int64_t c = a; c < b; c++)                                                     \
                r[c] = r[c] + w0 * xr[c * s + off[0]] + w1 * xr[c * s + off[1]] +               \
                       w2 * xr[c * s + off[2]];                                                 \
        }                                                                                       \
    }

DEPTHWISE_ROW3(float)
DEPTHWISE_ROW3(double)

#define DEPTHWISE_PLANE(T)                                                                      \
    VECTORIZE static void dw_plane_##T(const T *restrict x, const T *restrict w, T *restrict o, \
                                       const vq__window *v)                                     \
    {                                                                                           \
        memset(o, 0, (size_t)(v->oh * v->ow) * sizeof(T));                                      \
        struct dw_cols cols;                                                                    \
        if (v->kw == 3)                                                                         \
            dw_cols_of(v, &cols);                                                               \
        for (int64_t oh = 0; oh < v->oh; oh++) {                                                \
            T *restrict r = o + oh * v->ow;                                                     \
            for (int64_t i = 0; i < v->kh; i++) {                                               \
                int64_t ih = oh * v->sh - v->pt + i * v->dh;                                    \
                if (ih < 0 || ih >= v->h)                                                       \
                    continue;                                                                   \
                const T *restrict xr = x + ih * v->w;                                           \
                if (v->kw == 3) {                                                               \
                    dw_row3_##T(xr, w + i * 3, r, &cols, v->sw);                                \
                    continue;                                                                   \
                }                                                                               \
                for (int64_t j = 0; j < v->kw; j++) {                                           \
                    T wv = w[i * v->kw + j];                                                    \
                    int64_t off = j * v->dw - v->pl, lo, hi;                                    \
                    vq__window_taps(off, v->sw, v->w, v->ow, &lo, &hi);                         \
                    if (v->sw == 1) {                                                           \
                        const T *restrict xs = xr + off;                                        \
                        for (int64_t c = lo; c < hi; c++)                                       \
                            r[c] += wv * xs[c];                                                 \
                    } else {                                                                    \
                        for (int64_t c = lo; c < hi; c++)                                       \
                            r[c] += wv * xr[c * v->sw + off];                                   \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

DEPTHWISE_PLANE(float)
DEPTHWISE_PLANE(double)

/* 3x3 taps at dilation 1 (MobileNet's depthwise layers), the plane's
 * general path's per-row and per-tap set-up (the valid columns of each
 * tap, the edges tap by tap) cost more than the nine products on the small
 * planes of the later layers (7x7 and 14x14: 2.4 and 4.6 G multiply-adds/s
 * on one core). So the plane is first copied into pad, zero-filled to
 * cover every tap of every output: then each output is its nine taps in
 * one expression, with no bounds to test, vectorized along the row. The
 * sums are those of the general path: its taps in the same order, with
 * w * 0 added for a tap that falls in the padding, which changes no value
 * (only the sign of a zero result may differ), as long as the weights are
 * finite (the caller checks: Inf * 0 would be NaN). pad holds
 * dw_pad_len(v) elements. */
static int64_t dw_pad_len(const vq__window *v)
{
    int64_t pw = (v->ow - 1) * v->sw + 3, n = ((v->oh - 1) * v->sh + 3) * pw;
    /* the padded plane; at stride 1 the outputs at its row width, at
     * stride 2 its four parity planes and the outputs at their width */
    if (v->sh == 1 && v->sw == 1)
        return n + v->oh * pw;
    if (v->sh == 2 && v->sw == 2)
        return n + 5 * (v->oh + 1) * (v->ow + 1);
    return n;
}

static bool dw_padded_fits(const vq__window *v)
{
    return v->kh == 3 && v->kw == 3 && v->dh == 1 && v->dw == 1;
}

#define DEPTHWISE_PADDED(T, NAME, ATTR)                                                              \
    VECTORIZE ATTR static void NAME(const T *restrict x, const T *restrict w, T *restrict o,         \
                                    const vq__window *v, T *restrict pad)                            \
    {                                                                                                \
        int64_t ph = (v->oh - 1) * v->sh + 3, pw = (v->ow - 1) * v->sw + 3;                          \
        /* pad[y][c] = x[y - pt][c - pl], 0 outside X */                                             \
        int64_t c0 = v->pl < pw ? v->pl : pw, c1 = v->pl + v->w < pw ? v->pl + v->w : pw;            \
        for (int64_t y = 0; y < ph; y++) {                                                           \
            T *restrict row = pad + y * pw;                                                          \
            int64_t iy = y - v->pt;                                                                  \
            if (iy < 0 || iy >= v->h) {                                                              \
                memset(row, 0, (size_t)pw * sizeof(T));                                              \
                continue;                                                                            \
            }                                                                                        \
            for (int64_t c = 0; c < c0; c++)                                                         \
                row[c] = 0;                                                                          \
            if (c1 > c0)                                                                             \
                memcpy(row + c0, x + iy * v->w, (size_t)(c1 - c0) * sizeof(T));                      \
            for (int64_t c = c1 > c0 ? c1 : c0; c < pw; c++)                                         \
                row[c] = 0;                                                                          \
        }                                                                                            \
        T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7],    \
          w8 = w[8];                                                                                 \
        if (v->sh == 1 && v->sw == 1) {                                                              \
            /* Output (r, c) is the stencil at pad[r * pw + c], so the whole                       \
             * plane is one loop over pad's positions (a row's last two are                        \
             * not outputs), long enough to vectorize on a 7x7 plane, into                         \
             * flat, whose rows are then the output's. */ \
            T *restrict flat = pad + ph * pw;                                                        \
            const T *restrict q = pad;                                                               \
            int64_t n = (v->oh - 1) * pw + v->ow, a = pw, b = 2 * pw;                                \
            for (int64_t k = 0; k < n; k++)                                                          \
                flat[k] = (T)0 + w0 * q[k] + w1 * q[k + 1] + w2 * q[k + 2] + w3 * q[k + a] +         \
                          w4 * q[k + a + 1] + w5 * q[k + a + 2] + w6 * q[k + b] +                    \
                          w7 * q[k + b + 1] + w8 * q[k + b + 2];                                     \
            for (int64_t r = 0; r < v->oh; r++)                                                      \
                memcpy(o + r * v->ow, flat + r * pw, (size_t)v->ow * sizeof(T));                     \
            return;                                                                                  \
        }                                                                                            \
        if (v->sh == 2 && v->sw == 2) {                                                              \
            /* pad split by the parity of its rows and columns, ee[rr][cc] =                       \
             * pad[2rr][2cc], eo = [2rr][2cc + 1], oe = [2rr + 1][2cc], oo, each                   \
             * W = ow + 1 wide (0 past pad's edge): output (r, c)'s taps are at                    \
             * fixed offsets from r * W + c in them, and the plane is again one                    \
             * loop, with unit strides. */ \
            int64_t W = v->ow + 1, n2 = (v->oh + 1) * W;                                             \
            T *restrict ee = pad + ph * pw, *restrict eo = ee + n2, *restrict oe = eo + n2,          \
                        *restrict oo = oe + n2, *restrict flat = oo + n2;                            \
            for (int64_t y = 0; y < 2 * (v->oh + 1); y++) {                                          \
                T *restrict se = (y & 1 ? oe : ee) + (y >> 1) * W;                                   \
                T *restrict so = (y & 1 ? oo : eo) + (y >> 1) * W;                                   \
                if (y >= ph) {                                                                       \
                    for (int64_t c = 0; c < W; c++)                                                  \
                        se[c] = so[c] = 0;                                                           \
                    continue;                                                                        \
                }                                                                                    \
                const T *restrict prow = pad + y * pw;                                               \
                for (int64_t c = 0; c < v->ow; c++) {                                                \
                    se[c] = prow[2 * c];                                                             \
                    so[c] = prow[2 * c + 1];                                                         \
                }                                                                                    \
                se[v->ow] = prow[2 * v->ow]; /* pw = 2 ow + 1 */                                     \
                so[v->ow] = 0;                                                                       \
            }                                                                                        \
            int64_t n = (v->oh - 1) * W + v->ow;                                                     \
            for (int64_t k = 0; k < n; k++)                                                          \
                flat[k] = (T)0 + w0 * ee[k] + w1 * eo[k] + w2 * ee[k + 1] + w3 * oe[k] +             \
                          w4 * oo[k] + w5 * oe[k + 1] + w6 * ee[k + W] + w7 * eo[k + W] +            \
                          w8 * ee[k + W + 1];                                                        \
            for (int64_t r = 0; r < v->oh; r++)                                                      \
                memcpy(o + r * v->ow, flat + r * W, (size_t)v->ow * sizeof(T));                      \
            return;                                                                                  \
        }                                                                                            \
        for (int64_t r = 0; r < v->oh; r++) {                                                        \
            const T *restrict p0 = pad + r * v->sh * pw, *restrict p1 = p0 + pw,                     \
                              *restrict p2 = p1 + pw;                                                \
            T *restrict out = o + r * v->ow;                                                         \
            int64_t s = v->sw;                                                                       \
            for (int64_t c = 0; c < v->ow; c++) {                                                    \
                int64_t k = c * s;                                                                   \
                out[c] = (T)0 + w0 * p0[k] + w1 * p0[k + 1] + w2 * p0[k + 2] + w3 * p1[k] +          \
                         w4 * p1[k + 1] + w5 * p1[k + 2] + w6 * p2[k] + w7 * p2[k + 1] +             \
                         w8 * p2[k + 2];                                                             \
            }                                                                                        \
        }                                                                                            \
    }

DEPTHWISE_PADDED(float, dw_padded_float, )
DEPTHWISE_PADDED(double, dw_padded_double, )

/* The same loops for AVX-512 (16 floats a step, 4 with the SSE2 the
 * library is built for): chosen at run time when the CPU has it, for
 * strides 1 and 2 (other strides load with a stride, and gained nothing). The
 * multiplies and adds stay separate (gcc's C11 mode contracts nothing;
 * clang is told so below), so the results are the same bits either way.
 * Measured (one core, one image, f32, the layers of MobileNetV2; general
 * path -> padded -> padded with AVX-512, us): 960 channels 7x7 175 -> 78
 * -> 63, 576 x 14x14 219 -> 130 -> 100, 144 x 56x56 434 -> 300 -> 172,
 * 32 x 112x112 299 -> 255 -> 140; at stride 2, through the parity planes
 * and AVX-512 (before them: strided loads, SSE2), 96 x 112x112 521 -> 470
 * -> 245, 144 x 56x56 185 -> 106, 192 x 28x28 76 -> 58, 576 x 14x14 83 ->
 * 87. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#ifdef __clang__
#pragma clang fp contract(off)
#endif
#define DW_AVX512 1
DEPTHWISE_PADDED(float, dw_padded_float_avx512, __attribute__((target("avx512f"))))
DEPTHWISE_PADDED(float, dw_padded_float_avx2, __attribute__((target("avx2"))))
#endif

static void dw_padded_float_best(const float *x, const float *w, float *o, const vq__window *v,
                                 float *pad)
{
#ifdef DW_AVX512
    if (v->sw == v->sh && v->sw <= 2 && vq__isa() >= VQ__ISA_AVX512) {
        dw_padded_float_avx512(x, w, o, v, pad);
        return;
    }
    if (v->sw == v->sh && v->sw <= 2 && vq__isa() >= VQ__ISA_AVX2) {
        dw_padded_float_avx2(x, w, o, v, pad);
        return;
    }
#endif
    dw_padded_float(x, w, o, v, pad);
}

/* Any other kh x kw at one stride s of 1 or 2 for both dims and any
 * dilation (EfficientNet's and MNASNet's 5x5, ConvNeXt's 7x7, dilated
 * 3x3): the general path's per-row, per-tap set-up and short rows cost it
 * most of its time on the small planes of the later layers. As for 3x3,
 * the plane is first copied into zero-padded planes: s * s of them, by
 * the parity of row and column at stride 2 (plane (py, px) holds
 * X[s rr + py - pt][s cc + px - pl] at [rr][cc]), so that every tap of
 * every output is a fixed offset from the output's position r * W + c in
 * one of them. The plane's outputs are then one flat loop per row of
 * taps, each adding that row's kw products in tap order, vectorized along
 * the flat index; the rows are copied out at the end. The sums are the
 * general path's (its taps in the same order from 0, w * 0 for a tap in
 * the padding), so the bits do not depend on the path; weights must be
 * finite, as for 3x3. */
#define DW_MAXKW 16

static bool dw_taps_fits(const vq__window *v)
{
    return v->sh == v->sw && v->sh <= 2 && v->kw <= DW_MAXKW && !dw_padded_fits(v);
}

/* The padded planes' height and width, and the flat loop's length. */
static void dw_taps_geom(const vq__window *v, int64_t *H, int64_t *W, int64_t *n)
{
    int64_t s = v->sh;
    *H = v->oh + (v->kh - 1) * v->dh / s;
    *W = v->ow + (v->kw - 1) * v->dw / s;
    *n = (v->oh - 1) * *W + v->ow;
}

static int64_t dw_taps_len(const vq__window *v)
{
    int64_t H, W, n;
    dw_taps_geom(v, &H, &W, &n);
    return v->sh * v->sh * H * W + n;
}

/* A row's taps go four at a time into flat: flat + t0 + t1 + t2 + t3 is
 * ((flat + t0) + t1) + ..., the same sums as one tap at a time, in fewer
 * passes; each pass a function of its own so that restrict tells the
 * vectorizer its inputs do not overlap flat. */
#define DEPTHWISE_TAPS(T, NAME, ATTR)                                                              \
    VECTORIZE ATTR static void NAME##_add4(T *restrict f, int64_t n, const T *restrict p0,         \
                                           const T *restrict p1, const T *restrict p2,             \
                                           const T *restrict p3, const T *w)                       \
    {                                                                                              \
        T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];                                              \
        for (int64_t k = 0; k < n; k++)                                                            \
            f[k] = f[k] + w0 * p0[k] + w1 * p1[k] + w2 * p2[k] + w3 * p3[k];                       \
    }                                                                                              \
    VECTORIZE ATTR static void NAME##_add3(T *restrict f, int64_t n, const T *restrict p0,         \
                                           const T *restrict p1, const T *restrict p2, const T *w) \
    {                                                                                              \
        T w0 = w[0], w1 = w[1], w2 = w[2];                                                         \
        for (int64_t k = 0; k < n; k++)                                                            \
            f[k] = f[k] + w0 * p0[k] + w1 * p1[k] + w2 * p2[k];                                    \
    }                                                                                              \
    VECTORIZE ATTR static void NAME##_add2(T *restrict f, int64_t n, const T *restrict p0,         \
                                           const T *restrict p1, const T *w)                       \
    {                                                                                              \
        T w0 = w[0], w1 = w[1];                                                                    \
        for (int64_t k = 0; k < n; k++)                                                            \
            f[k] = f[k] + w0 * p0[k] + w1 * p1[k];                                                 \
    }                                                                                              \
    VECTORIZE ATTR static void NAME##_add1(T *restrict f, int64_t n, const T *restrict p0,         \
                                           const T *w)                                             \
    {                                                                                              \
        T w0 = w[0];                                                                               \
        for (int64_t k = 0; k < n; k++)                                                            \
            f[k] = f[k] + w0 * p0[k];                                                              \
    }                                                                                              \
    VECTORIZE ATTR static void NAME(const T *restrict x, const T *restrict w, T *restrict o,       \
                                    const vq__window *v, T *restrict work)                         \
    {                                                                                              \
        int64_t s = v->sh, H, W, n;                                                                \
        dw_taps_geom(v, &H, &W, &n);                                                               \
        int64_t np = H * W;                                                                        \
        for (int64_t py = 0; py < s; py++)                                                         \
            for (int64_t px = 0; px < s; px++) {                                                   \
                T *restrict pp = work + (py * s + px) * np;                                        \
                for (int64_t rr = 0; rr < H; rr++) {                                               \
                    T *restrict row = pp + rr * W;                                                 \
                    int64_t iy = s * rr + py - v->pt;                                              \
                    if (iy < 0 || iy >= v->h) {                                                    \
                        memset(row, 0, (size_t)W * sizeof(T));                                     \
                        continue;                                                                  \
                    }                                                                              \
                    const T *xr = x + iy * v->w;                                                   \
                    if (s == 1) {                                                                  \
                        int64_t c0 = v->pl < W ? v->pl : W;                                        \
                        int64_t c1 = v->pl + v->w < W ? v->pl + v->w : W;                          \
                        for (int64_t c = 0; c < c0; c++)                                           \
                            row[c] = 0;                                                            \
                        if (c1 > c0)                                                               \
                            memcpy(row + c0, xr, (size_t)(c1 - c0) * sizeof(T));                   \
                        for (int64_t c = c1 > c0 ? c1 : c0; c < W; c++)                            \
                            row[c] = 0;                                                            \
                        continue;                                                                  \
                    }                                                                              \
                    for (int64_t c = 0; c < W; c++) {                                              \
                        int64_t ix = s * c + px - v->pl;                                           \
                        row[c] = ix >= 0 && ix < v->w ? xr[ix] : (T)0;                             \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        T *restrict flat = work + s * s * np;                                                      \
        memset(flat, 0, (size_t)n * sizeof(T));                                                    \
        for (int64_t i = 0; i < v->kh; i++) {                                                      \
            const T *p[DW_MAXKW];                                                                  \
            int64_t ri = i * v->dh;                                                                \
            for (int64_t j = 0; j < v->kw; j++) {                                                  \
                int64_t cj = j * v->dw;                                                            \
                p[j] = work + ((ri % s) * s + cj % s) * np + (ri / s) * W + cj / s;                \
            }                                                                                      \
            const T *wr = w + i * v->kw;                                                           \
            int64_t j = 0;                                                                         \
            for (; j + 4 <= v->kw; j += 4)                                                         \
                NAME##_add4(flat, n, p[j], p[j + 1], p[j + 2], p[j + 3], wr + j);                  \
            if (v->kw - j == 3)                                                                    \
                NAME##_add3(flat, n, p[j], p[j + 1], p[j + 2], wr + j);                            \
            else if (v->kw - j == 2)                                                               \
                NAME##_add2(flat, n, p[j], p[j + 1], wr + j);                                      \
            else if (v->kw - j == 1)                                                               \
                NAME##_add1(flat, n, p[j], wr + j);                                                \
        }                                                                                          \
        for (int64_t r = 0; r < v->oh; r++)                                                        \
            memcpy(o + r * v->ow, flat + r * W, (size_t)v->ow * sizeof(T));                        \
    }

DEPTHWISE_TAPS(float, dw_taps_float, )
DEPTHWISE_TAPS(double, dw_taps_double, )
#ifdef DW_AVX512
DEPTHWISE_TAPS(float, dw_taps_float_avx2, __attribute__((target("avx2"))))
DEPTHWISE_TAPS(float, dw_taps_float_avx512, __attribute__((target("avx512f"))))
#endif

static void dw_taps_float_best(const float *x, const float *w, float *o, const vq__window *v,
                               float *work)
{
#ifdef DW_AVX512
    if (vq__isa() >= VQ__ISA_AVX512) {
        dw_taps_float_avx512(x, w, o, v, work);
        return;
    }
    if (vq__isa() >= VQ__ISA_AVX2) {
        dw_taps_float_avx2(x, w, o, v, work);
        return;
    }
#endif
    dw_taps_float(x, w, o, v, work);
}

static bool finite_taps(vq_dtype dt, const void *w, int64_t taps)
{
    for (int64_t i = 0; i < taps; i++)
        if (dt == VQ_F32 ? !isfinite(((const float *)w)[i]) : !isfinite(((const double *)w)[i]))
            return false;
    return true;
}

/* Output planes [lo, hi) of all images, plane = n * m + channel. */
int vq__conv_depthwise(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    int64_t in_plane = cv->w.h * cv->w.w, taps = cv->w.kh * cv->w.kw;
    /* one padded plane for this share of the planes; without it (out of
     * memory) the general path, which needs none */
    bool nine = dw_padded_fits(&cv->w), kxk = dw_taps_fits(&cv->w);
    int64_t len = nine ? dw_pad_len(&cv->w) : kxk ? dw_taps_len(&cv->w) : 0;
    void *pad = len ? vq__malloc((size_t)len * j->es) : NULL;
    int64_t act_from = lo; /* planes from here on still want the activation */
    for (int64_t p = lo; p < hi; p++) {
        int64_t n = p / cv->m, ch = p % cv->m, g = ch / cv->mg;
        const char *x = vq__elem_at(j->x, (n * cv->w.c + g) * in_plane, j->es);
        const char *w = vq__elem_at(j->w, ch * taps, j->es);
        char *o = vq__elem_at(j->o, p * cv->plane, j->es);
        bool padded = pad && finite_taps(j->dt, w, taps);
        if (kxk && padded && j->dt == VQ_F32)
            dw_taps_float_best((const float *)x, (const float *)w, (float *)o, &cv->w, pad);
        else if (kxk && padded)
            dw_taps_double((const double *)x, (const double *)w, (double *)o, &cv->w, pad);
        else if (j->dt == VQ_F32 && padded)
            dw_padded_float_best((const float *)x, (const float *)w, (float *)o, &cv->w, pad);
        else if (j->dt == VQ_F32)
            dw_plane_float((const float *)x, (const float *)w, (float *)o, &cv->w);
        else if (padded)
            dw_padded_double((const double *)x, (const double *)w, (double *)o, &cv->w, pad);
        else
            dw_plane_double((const double *)x, (const double *)w, (double *)o, &cv->w);
        vq__conv_bias_clip(j, o, ch, 1, 0, cv->plane);
        /* the activation on runs of at least 4096 elements, still in
         * cache: vmath computes whole chunks of 256, so a run's last
         * partial chunk costs at most a sixteenth more (vq__conv_act) */
        if ((p + 1 - act_from) * cv->plane >= 4096 || p + 1 == hi) {
            vq__conv_act(j, vq__elem_at(j->o, act_from * cv->plane, j->es), p + 1 - act_from, 0,
                         cv->plane);
            act_from = p + 1;
        }
    }
    free(pad);
    return 0;
}
