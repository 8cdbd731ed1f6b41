/* The quantized ops (ops/cpu/quant.c, qproduct.c) and the 8-bit integer product under
 * them (ops/math/qgemm.c): the product at every level the CPU has
 * (portable, AVX2, AVX-512 VNNI) bit-exact against the defining loop over
 * sizes across its tiles' edges, every u8 / i8 pairing and per-row /
 * per-column zero points, B in memory, written row by row or read through
 * row pointers; quantize_linear, dequantize_linear and
 * dynamic_quantize_linear against ONNX's formulas (and the spec's own
 * examples), rounding half to even and saturating; matmul_integer,
 * conv_integer, qlinear_matmul and qlinear_conv bit-exact against plain
 * loops of ONNX's definitions (requantizing with the multiplier
 * a_scale * b_scale / y_scale in f32, as ONNX Runtime does). The suite
 * runs again at VARQ_ISA=avx2 and portable (tests/meson.build), for the
 * ops' own vector paths. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/math/isa.h"
#include "../ops/math/qgemm.h"
#include "opcheck.h"

static vq_tensor *scalar_of(vq_dtype dt, double v)
{
    return oc_from(dt, 0, NULL, &v);
}

static vq_tensor *vec_of(vq_dtype dt, int64_t n, const double *v)
{
    return oc_from(dt, 1, &n, v);
}

static float sat(float v, vq_dtype dt)
{
    float lo = dt == VQ_I8 ? -128 : 0, hi = dt == VQ_I8 ? 127 : 255;
    v = v >= lo ? v : lo;
    return v <= hi ? v : hi;
}

/* ---- the integer product ---- */

static uint64_t rng;

static void fill_bytes(uint8_t *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = (uint8_t)oc_next(&rng);
}

/* B given row by row (qgemm.h's b_rows), as conv gives its im2col rows. */
struct rows_src {
    const uint8_t *b;
    int64_t ldb, n;
};

static void rows_of(const void *ctx, int64_t p0, int64_t np, uint8_t *dst, int64_t ldd)
{
    const struct rows_src *s = ctx;
    for (int64_t r = 0; r < np; r++)
        memcpy(dst + r * ldd, s->b + (p0 + r) * s->ldb, (size_t)s->n);
}

/* B's rows read in place through qgemm.h's b_row. */
static const uint8_t *row_at(const void *ctx, int64_t p)
{
    const struct rows_src *s = ctx;
    return s->b + p * s->ldb;
}

Test(qgemm, every_level_matches_the_defining_loop)
{
    rng = oc_seed("qgemm");
    static const int64_t ms[] = {1, 5, 6, 7, 13}, ns[] = {1, 15, 16, 17, 33, 64},
                         ks[] = {1, 3, 4, 5, 64, 67};
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (int form = 0; form < 8; form++) {
                    int64_t m = ms[mi], n = ns[ni], k = ks[ki], lda = k + 3, ldb = n + 2,
                            ldc = n + 1;
                    bool as = form & 1, bs = form & 2, per = form & 4;
                    uint8_t *a = malloc((size_t)(m * lda)), *b = malloc((size_t)(k * ldb));
                    int32_t *za = malloc((size_t)m * 4), *zb = malloc((size_t)n * 4);
                    int32_t *want = calloc((size_t)(m * ldc), 4),
                            *got = malloc((size_t)(m * ldc) * 4);
                    fill_bytes(a, m * lda);
                    fill_bytes(b, k * ldb);
                    for (int64_t i = 0; i < m; i++)
                        za[i] = as ? (int8_t)oc_next(&rng) : (uint8_t)oc_next(&rng);
                    for (int64_t j = 0; j < n; j++)
                        zb[j] = bs ? (int8_t)oc_next(&rng) : (uint8_t)oc_next(&rng);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            uint32_t s = 0;
                            for (int64_t p = 0; p < k; p++) {
                                int32_t av = as ? (int8_t)a[i * lda + p] : a[i * lda + p];
                                int32_t bv = bs ? (int8_t)b[p * ldb + j] : b[p * ldb + j];
                                s += (uint32_t)((av - za[per ? i : 0]) * (bv - zb[per ? j : 0]));
                            }
                            want[i * ldc + j] = (int32_t)s;
                        }
                    struct rows_src src = {b, ldb, n};
                    for (int l = VQ__ISA_PORTABLE; l <= (int)vq__isa_cpu(); l++)
                        for (int by_rows = 0; by_rows < 3; by_rows++) {
                            for (int64_t i = 0; i < m * ldc; i++)
                                got[i] = 0; /* the column past n stays 0 */
                            vq__qgemm_args g = {m,   n,  k,  a,   lda, as,  za,   per,  b,
                                                ldb, bs, zb, per, got, ldc, NULL, NULL, NULL};
                            if (by_rows) {
                                g.b = NULL;
                                g.b_rows = by_rows == 1 ? rows_of : NULL;
                                g.b_row = by_rows == 2 ? row_at : NULL;
                                g.b_ctx = &src;
                            }
                            cr_assert_eq(vq__qgemm_at((enum vq__isa_level)l, &g), 0);
                            for (int64_t i = 0; i < m * ldc; i++)
                                cr_assert_eq(got[i], want[i],
                                             "%s%s: m %lld n %lld k %lld form %d: C[%lld] is %d, "
                                             "not %d",
                                             vq__qgemm_path((enum vq__isa_level)l),
                                             by_rows ? " (by rows)" : "", (long long)m,
                                             (long long)n, (long long)k, form, (long long)i, got[i],
                                             want[i]);
                        }
                    free(a), free(b), free(za), free(zb), free(want), free(got);
                }
}

/* The largest sums: 255 * 127 products over a long k, where vpmaddubsw
 * would saturate its i16 pairs (the AVX2 path widens instead). */
Test(qgemm, extreme_values_are_exact)
{
    int64_t m = 7, n = 40, k = 1000;
    uint8_t *a = malloc((size_t)(m * k)), *b = malloc((size_t)(k * n));
    int32_t *c = malloc((size_t)(m * n) * 4), z = 0;
    memset(a, 255, (size_t)(m * k));
    memset(b, 0x80, (size_t)(k * n)); /* i8 -128 */
    for (int l = VQ__ISA_PORTABLE; l <= (int)vq__isa_cpu(); l++) {
        vq__qgemm_args g = {m, n, k, a, k, false, &z, 0, b, n, true, &z, 0, c, n, NULL, NULL, NULL};
        cr_assert_eq(vq__qgemm_at((enum vq__isa_level)l, &g), 0);
        for (int64_t i = 0; i < m * n; i++)
            cr_assert_eq(c[i], -255 * 128 * 1000, "%s", vq__qgemm_path((enum vq__isa_level)l));
    }
    free(a), free(b), free(c);
}

/* ---- quantize_linear, dequantize_linear, dynamic_quantize_linear ---- */

Test(quantize_linear, onnx_example_saturates)
{
    double x[] = {0, 2, 3, 1000, -254, -1000}, want[] = {128, 129, 130, 255, 1, 0};
    vq_tensor *in[3] = {vec_of(VQ_F32, 6, x), scalar_of(VQ_F32, 2), scalar_of(VQ_U8, 128)};
    vq_tensor *y = oc_run1("quantize_linear", in, 3, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(y), VQ_U8);
    oc_assert_close(y, 1, (int64_t[]){6}, want, 0, 0);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
    vq_tensor_release(y);
}

Test(quantize_linear, rounds_half_to_even_and_nan_to_the_least)
{
    double x[] = {1, 3, 5, -1, -3, -5, 0.5, NAN, 1e30, -1e30, 254.5, -255};
    double want[] = {0, 2, 2, 0, -2, -2, 0, -128, 127, -128, 127, -128};
    vq_tensor *in[3] = {vec_of(VQ_F32, 12, x), scalar_of(VQ_F32, 2), scalar_of(VQ_I8, 0)};
    vq_tensor *y = oc_run1("quantize_linear", in, 3, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(y), VQ_I8);
    oc_assert_close(y, 1, (int64_t[]){12}, want, 0, 0);
    /* without a zero point: dtype's, 0 */
    vq_tensor *y2 = oc_run1("quantize_linear", in, 2, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(y2), VQ_U8);
    cr_assert_eq(oc_get(y2, 1), 2);
    cr_assert_eq(oc_get(y2, 3), 0);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
    vq_tensor_release(y);
    vq_tensor_release(y2);
}

/* Random values of every input dtype, per tensor and per axis (each axis
 * of a rank-3 X), against the formula in f32. */
Test(quantize_linear, matches_the_formula_per_axis)
{
    uint64_t r = oc_seed("quantize_linear");
    int64_t shape[3] = {3, 4, 37};
    vq_dtype xdts[] = {VQ_F32, VQ_F16, VQ_BF16, VQ_I32};
    for (size_t xi = 0; xi < 4; xi++)
        for (int axis = -1; axis < 3; axis++)
            for (int ydt = 0; ydt < 2; ydt++) {
                vq_dtype yd = ydt ? VQ_I8 : VQ_U8;
                vq_tensor *x = oc_rand(&r, xdts[xi], 3, shape, -300, 300);
                int64_t d = axis < 0 ? 1 : shape[axis];
                vq_tensor *s = oc_rand(&r, VQ_F32, axis < 0 ? 0 : 1, &d, 0.5, 3);
                vq_tensor *z = oc_rand(&r, yd, axis < 0 ? 0 : 1, &d, ydt ? -20 : 0, ydt ? 20 : 40);
                vq_attr at = VQ_ATTR_I("axis", axis < 0 ? 1 : axis);
                vq_tensor *in[3] = {x, s, z};
                vq_tensor *y = oc_run1("quantize_linear", in, 3, &at, 1);
                for (int64_t i = 0; i < vq_tensor_numel(x); i++) {
                    int64_t c = axis < 0    ? 0
                                : axis == 0 ? i / (shape[1] * shape[2])
                                : axis == 1 ? i / shape[2] % shape[1]
                                            : i % shape[2];
                    float v =
                        nearbyintf((float)oc_get(x, i) / (float)oc_get(s, c)) + (float)oc_get(z, c);
                    cr_assert_eq(oc_get(y, i), sat(v, yd), "x %d axis %d: element %lld", (int)xi,
                                 axis, (long long)i);
                }
                vq_tensor_release(x), vq_tensor_release(s), vq_tensor_release(z);
                vq_tensor_release(y);
            }
}

Test(dequantize_linear, onnx_examples_and_half_scales)
{
    double x[] = {0, 3, 128, 255}, want[] = {-256, -250, 0, 254};
    vq_tensor *in[3] = {vec_of(VQ_U8, 4, x), scalar_of(VQ_F32, 2), scalar_of(VQ_U8, 128)};
    vq_tensor *y = oc_run1("dequantize_linear", in, 3, NULL, 0);
    oc_assert_close(y, 1, (int64_t[]){4}, want, 0, 0);
    vq_tensor_release(in[1]);
    in[1] = scalar_of(VQ_F16, 2);
    vq_tensor *h = oc_run1("dequantize_linear", in, 3, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(h), VQ_F16);
    oc_assert_close(h, 1, (int64_t[]){4}, want, 0, 0);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
    vq_tensor_release(y), vq_tensor_release(h);
    /* per axis: ONNX's example */
    double xa[] = {3, 89, 34, 200, 74, 59, 5, 24, 24, 87, 32, 13, 245, 99, 4, 142, 121, 102};
    double sa[] = {2, 4, 5}, za[] = {84, 24, 196};
    int64_t shape[4] = {1, 3, 3, 2};
    vq_tensor *ia[3] = {oc_from(VQ_U8, 4, shape, xa), vec_of(VQ_F32, 3, sa), vec_of(VQ_U8, 3, za)};
    vq_tensor *ya = oc_run1("dequantize_linear", ia, 3, NULL, 0);
    double wa[18];
    for (int i = 0; i < 18; i++)
        wa[i] = (xa[i] - za[i / 6]) * sa[i / 6];
    oc_assert_close(ya, 4, shape, wa, 0, 0);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(ia[i]);
    vq_tensor_release(ya);
}

Test(dequantize_linear, refuses_a_scale_of_the_wrong_length)
{
    int64_t shape[2] = {2, 3};
    double s[] = {1, 2};
    vq_tensor *in[2] = {oc_from(VQ_I8, 2, shape, (double[]){1, 2, 3, 4, 5, 6}),
                        vec_of(VQ_F32, 2, s)};
    cr_assert_eq(oc_try("dequantize_linear", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert_str_not_empty(vq_errmsg());
    vq_tensor_release(in[0]), vq_tensor_release(in[1]);
}

/* ONNX's three examples: the formula run in f32 here. */
Test(dynamic_quantize_linear, onnx_examples)
{
    static const double xs[3][12] = {{0, 2, -3, -2.5, 1.34, 0.5},
                                     {-1.0, -2.1, -1.3, -2.5, -3.34, -4.0},
                                     {1, 2.1, 1.3, 2.5, 3.34, 4.0, 1.5, 2.6, 3.9, 4.0, 3.0, 2.345}};
    static const int ns[3] = {6, 6, 12};
    static const double scales[3] = {0.0196078438, 0.0156862754, 0.0156862754};
    static const int zps[3] = {153, 255, 0};
    for (int c = 0; c < 3; c++) {
        vq_tensor *x = vec_of(VQ_F32, ns[c], xs[c]), *out[3];
        oc_run("dynamic_quantize_linear", &x, 1, out, 3, NULL, 0);
        float lo = 0, hi = 0;
        for (int i = 0; i < ns[c]; i++) {
            lo = fminf(lo, (float)xs[c][i]);
            hi = fmaxf(hi, (float)xs[c][i]);
        }
        float s = (hi - lo) / 255.0f, z = sat(nearbyintf((0 - lo) / s), VQ_U8);
        cr_assert_eq((float)oc_get(out[1], 0), s);
        cr_assert_float_eq(oc_get(out[1], 0), scales[c], 1e-9);
        cr_assert_eq(oc_get(out[2], 0), zps[c]);
        cr_assert_eq(oc_get(out[2], 0), z);
        for (int i = 0; i < ns[c]; i++)
            cr_assert_eq(oc_get(out[0], i), sat(nearbyintf((float)xs[c][i] / s) + z, VQ_U8));
        vq_tensor_release(x);
        for (int i = 0; i < 3; i++)
            vq_tensor_release(out[i]);
    }
}

/* ---- matmul_integer, qlinear_matmul ---- */

/* (A - za)(B - zb) of batch entry e, element (i, j), the plain way. */
static int32_t mm_ref(vq_tensor *a, vq_tensor *b, vq_tensor *za, vq_tensor *zb, int64_t ao,
                      int64_t bo, int64_t i, int64_t j, int64_t k, int64_t n)
{
    uint32_t s = 0;
    int32_t zi = (int32_t)oc_get(za, vq_tensor_numel(za) > 1 ? i : 0);
    int32_t zj = (int32_t)oc_get(zb, vq_tensor_numel(zb) > 1 ? j : 0);
    for (int64_t p = 0; p < k; p++)
        s += (uint32_t)(((int32_t)oc_get(a, ao + i * k + p) - zi) *
                        ((int32_t)oc_get(b, bo + p * n + j) - zj));
    return (int32_t)s;
}

Test(matmul_integer, broadcast_batches_and_zero_points_per_row_and_column)
{
    uint64_t r = oc_seed("matmul_integer");
    for (int form = 0; form < 8; form++) {
        vq_dtype ad = form & 1 ? VQ_I8 : VQ_U8, bd = form & 2 ? VQ_I8 : VQ_U8;
        bool per = form & 4;
        int64_t m = 9, k = 37, n = 21;
        int64_t as[3] = {2, m, k}, bs[4] = {3, 1, k, n};
        vq_tensor *a = oc_rand(&r, ad, 3, as, ad == VQ_I8 ? -128 : 0, ad == VQ_I8 ? 128 : 256);
        vq_tensor *b = oc_rand(&r, bd, 4, bs, bd == VQ_I8 ? -128 : 0, bd == VQ_I8 ? 128 : 256);
        vq_tensor *za = oc_rand(&r, ad, per ? 1 : 0, &m, 0, 100);
        vq_tensor *zb = oc_rand(&r, bd, per ? 1 : 0, &n, 0, 100);
        vq_tensor *in[4] = {a, b, za, zb};
        vq_tensor *y = oc_run1("matmul_integer", in, 4, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(y), VQ_I32);
        cr_assert_eq(vq_tensor_ndim(y), 4);
        cr_assert_eq(vq_tensor_numel(y), 3 * 2 * m * n);
        for (int64_t e = 0; e < 6; e++)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++)
                    cr_assert_eq(oc_get(y, (e * m + i) * n + j),
                                 mm_ref(a, b, za, zb, (e % 2) * m * k, (e / 2) * k * n, i, j, k, n),
                                 "form %d: batch %lld (%lld, %lld)", form, (long long)e,
                                 (long long)i, (long long)j);
        for (int i = 0; i < 4; i++)
            vq_tensor_release(in[i]);
        vq_tensor_release(y);
    }
}

Test(matmul_integer, vector_operands_as_numpy)
{
    double av[] = {1, 2, 3}, bv[] = {4, 5, 6, 7, 8, 9};
    vq_tensor *in[4] = {vec_of(VQ_U8, 3, av), oc_from(VQ_I8, 2, (int64_t[]){3, 2}, bv),
                        scalar_of(VQ_U8, 1), scalar_of(VQ_I8, 4)};
    vq_tensor *y = oc_run1("matmul_integer", in, 4, NULL, 0);
    /* (0, 1, 2) x ((0, 1), (2, 3), (4, 5)) */
    oc_assert_close(y, 1, (int64_t[]){2}, (double[]){10, 13}, 0, 0);
    for (int i = 0; i < 4; i++)
        vq_tensor_release(in[i]);
    vq_tensor_release(y);
}

static float requant(int32_t acc, float sa, float sb, float sy, float z, vq_dtype dt)
{
    float mult = sa * sb / sy;
    return sat(nearbyintf((float)acc * mult) + z, dt);
}

Test(qlinear_matmul, onnx_example)
{
    double a[] = {208, 236, 0, 238, 3, 214, 255, 29};
    double b[] = {152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247};
    vq_tensor *in[8] = {oc_from(VQ_U8, 2, (int64_t[]){2, 4}, a),
                        scalar_of(VQ_F32, 0.0066),
                        scalar_of(VQ_U8, 113),
                        oc_from(VQ_U8, 2, (int64_t[]){4, 3}, b),
                        scalar_of(VQ_F32, 0.00705),
                        scalar_of(VQ_U8, 114),
                        scalar_of(VQ_F32, 0.0107),
                        scalar_of(VQ_U8, 118)};
    vq_tensor *y = oc_run1("qlinear_matmul", in, 8, NULL, 0);
    oc_assert_close(y, 2, (int64_t[]){2, 3}, (double[]){168, 115, 255, 1, 66, 151}, 0, 0);
    for (int i = 0; i < 8; i++)
        vq_tensor_release(in[i]);
    vq_tensor_release(y);
}

Test(qlinear_matmul, per_row_and_column_scales_match_the_formula)
{
    uint64_t r = oc_seed("qlinear_matmul");
    for (int form = 0; form < 4; form++) {
        vq_dtype ad = form & 1 ? VQ_I8 : VQ_U8, yd = form & 2 ? VQ_I8 : VQ_U8;
        int64_t m = 7, k = 70, n = 19;
        vq_tensor *a = oc_rand(&r, ad, 2, (int64_t[]){m, k}, -50, 50);
        vq_tensor *b = oc_rand(&r, VQ_I8, 2, (int64_t[]){k, n}, -128, 128);
        vq_tensor *in[8] = {a,
                            oc_rand(&r, VQ_F32, 1, &m, 0.01, 0.02),
                            oc_rand(&r, ad, 1, &m, -3, 3),
                            b,
                            oc_rand(&r, VQ_F32, 1, &n, 0.01, 0.02),
                            oc_rand(&r, VQ_I8, 1, &n, -3, 3),
                            scalar_of(VQ_F32, 0.3),
                            scalar_of(yd, 7)};
        vq_tensor *y = oc_run1("qlinear_matmul", in, 8, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(y), yd);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int32_t acc = mm_ref(a, b, in[2], in[5], 0, 0, i, j, k, n);
                float want =
                    requant(acc, (float)oc_get(in[1], i), (float)oc_get(in[4], j), 0.3f, 7, yd);
                cr_assert_eq(oc_get(y, i * n + j), want, "form %d (%lld, %lld)", form, (long long)i,
                             (long long)j);
            }
        for (int i = 0; i < 8; i++)
            vq_tensor_release(in[i]);
        vq_tensor_release(y);
    }
}

/* ---- conv_integer, qlinear_conv ---- */

struct geom {
    int64_t n, c, h, w, m, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, g;
};

static int64_t out_dim(int64_t in, int64_t p0, int64_t p1, int64_t k, int64_t s, int64_t d)
{
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

/* The i32 convolution of (X - xz) and (W - wz[m]) at output element o. */
static int32_t conv_ref(const struct geom *g, vq_tensor *x, vq_tensor *w, int32_t xz, vq_tensor *wz,
                        int64_t oh, int64_t ow, int64_t o)
{
    int64_t ox = o % ow, oy = o / ow % oh, m = o / (ow * oh) % g->m, n = o / (ow * oh * g->m);
    int64_t cg = g->c / g->g, mg = g->m / g->g, grp = m / mg;
    int32_t zw = (int32_t)oc_get(wz, vq_tensor_numel(wz) > 1 ? m : 0);
    uint32_t s = 0;
    for (int64_t c = 0; c < cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                int64_t y = oy * g->sh - g->pt + i * g->dh, xx = ox * g->sw - g->pl + j * g->dw;
                if (y < 0 || y >= g->h || xx < 0 || xx >= g->w)
                    continue;
                int32_t xv = (int32_t)oc_get(x, ((n * g->c + grp * cg + c) * g->h + y) * g->w + xx);
                int32_t wv = (int32_t)oc_get(w, ((m * cg + c) * g->kh + i) * g->kw + j);
                s += (uint32_t)((xv - xz) * (wv - zw));
            }
    return (int32_t)s;
}

static const struct geom geoms[] = {
    {2, 3, 7, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* padded 3x3 */
    {1, 4, 9, 6, 6, 2, 3, 2, 1, 0, 2, 1, 0, 2, 1, 2},  /* strides, dilation, groups */
    {1, 16, 5, 5, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1}, /* 1x1: no im2col */
    {2, 5, 8, 9, 6, 3, 2, 1, 1, 2, 0, 1, 3, 2, 1, 1},  /* stride 1: dilated, uneven pads */
    {1, 3, 5, 5, 2, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},  /* 1x1 padded */
    {1, 6, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6},  /* depthwise */
    {2, 3, 9, 21, 3, 3, 3, 1, 1, 0, 2, 1, 0, 2, 1, 3}, /* depthwise: dilated, uneven pads */
    {1, 4, 7, 7, 4, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 4},  /* depthwise, strided */
};

static vq_attr geom_attrs[4];
static int64_t g_strides[2], g_pads[4], g_dil[2];

static const vq_attr *attrs_of(const struct geom *g)
{
    g_strides[0] = g->sh, g_strides[1] = g->sw;
    g_pads[0] = g->pt, g_pads[1] = g->pl, g_pads[2] = g->pb, g_pads[3] = g->pr;
    g_dil[0] = g->dh, g_dil[1] = g->dw;
    geom_attrs[0] = VQ_ATTR_IS("strides", g_strides, 2);
    geom_attrs[1] = VQ_ATTR_IS("pads", g_pads, 4);
    geom_attrs[2] = VQ_ATTR_IS("dilations", g_dil, 2);
    geom_attrs[3] = VQ_ATTR_I("groups", g->g);
    return geom_attrs;
}

Test(conv_integer, matches_the_plain_loop)
{
    uint64_t r = oc_seed("conv_integer");
    for (size_t gi = 0; gi < sizeof geoms / sizeof *geoms; gi++)
        for (int form = 0; form < 4; form++) {
            const struct geom *g = &geoms[gi];
            vq_dtype xd = form & 1 ? VQ_I8 : VQ_U8, wd = form & 2 ? VQ_U8 : VQ_I8;
            vq_tensor *x = oc_rand(&r, xd, 4, (int64_t[]){g->n, g->c, g->h, g->w},
                                   xd == VQ_I8 ? -128 : 0, xd == VQ_I8 ? 128 : 256);
            vq_tensor *w = oc_rand(&r, wd, 4, (int64_t[]){g->m, g->c / g->g, g->kh, g->kw},
                                   wd == VQ_I8 ? -128 : 0, wd == VQ_I8 ? 128 : 256);
            int32_t xz = xd == VQ_I8 ? -5 : 100;
            vq_tensor *zx = scalar_of(xd, xz);
            vq_tensor *zw = oc_rand(&r, wd, 1, (int64_t[]){g->m}, 0, 50);
            vq_tensor *in[4] = {x, w, zx, zw};
            vq_tensor *y = oc_run1("conv_integer", in, 4, attrs_of(g), 4);
            int64_t oh = out_dim(g->h, g->pt, g->pb, g->kh, g->sh, g->dh);
            int64_t ow = out_dim(g->w, g->pl, g->pr, g->kw, g->sw, g->dw);
            cr_assert_eq(vq_tensor_numel(y), g->n * g->m * oh * ow);
            for (int64_t o = 0; o < vq_tensor_numel(y); o++)
                cr_assert_eq(oc_get(y, o), conv_ref(g, x, w, xz, zw, oh, ow, o),
                             "geometry %zu form %d: element %lld", gi, form, (long long)o);
            for (int i = 0; i < 4; i++)
                vq_tensor_release(in[i]);
            vq_tensor_release(y);
        }
}

Test(qlinear_conv, bias_and_per_channel_scales_match_the_formula)
{
    uint64_t r = oc_seed("qlinear_conv");
    for (size_t gi = 0; gi < sizeof geoms / sizeof *geoms; gi++)
        for (int form = 0; form < 2; form++) {
            const struct geom *g = &geoms[gi];
            vq_dtype yd = form ? VQ_I8 : VQ_U8;
            int64_t M = g->m;
            vq_tensor *x = oc_rand(&r, VQ_U8, 4, (int64_t[]){g->n, g->c, g->h, g->w}, 0, 256);
            vq_tensor *w =
                oc_rand(&r, VQ_I8, 4, (int64_t[]){M, g->c / g->g, g->kh, g->kw}, -128, 128);
            vq_tensor *in[9] = {x,
                                scalar_of(VQ_F32, 0.02),
                                scalar_of(VQ_U8, 120),
                                w,
                                oc_rand(&r, VQ_F32, 1, &M, 0.001, 0.003),
                                scalar_of(VQ_I8, 0),
                                scalar_of(VQ_F32, 0.05),
                                scalar_of(yd, form ? -3 : 128),
                                oc_rand(&r, VQ_I32, 1, &M, -2000, 2000)};
            vq_tensor *y = oc_run1("qlinear_conv", in, 9, attrs_of(g), 4);
            vq_tensor *y8 = oc_run1("qlinear_conv", in, 8, attrs_of(g), 4);
            cr_assert_eq(vq_tensor_dtype(y), yd);
            int64_t oh = out_dim(g->h, g->pt, g->pb, g->kh, g->sh, g->dh);
            int64_t ow = out_dim(g->w, g->pl, g->pr, g->kw, g->sw, g->dw);
            for (int64_t o = 0; o < vq_tensor_numel(y); o++) {
                int64_t m = o / (oh * ow) % M;
                int32_t acc = conv_ref(g, x, w, 120, in[5], oh, ow, o);
                float sw = (float)oc_get(in[4], m), z = form ? -3 : 128;
                int32_t b = (int32_t)oc_get(in[8], m);
                cr_assert_eq(oc_get(y, o), requant(acc + b, 0.02f, sw, 0.05f, z, yd),
                             "geometry %zu form %d: element %lld", gi, form, (long long)o);
                cr_assert_eq(oc_get(y8, o), requant(acc, 0.02f, sw, 0.05f, z, yd));
            }
            for (int i = 0; i < 9; i++)
                vq_tensor_release(in[i]);
            vq_tensor_release(y), vq_tensor_release(y8);
        }
}
