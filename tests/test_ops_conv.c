/* conv2d, max_pool2d, avg_pool2d, global_avg_pool and batch_norm, and
 * their gradient ops: each kernel against a plain loop over the formula
 * (strides 1 and 2, asymmetric pads, dilation 2, groups 1, 2 and
 * depthwise (its direct kernel), with and without bias, conv2d's clip,
 * ceil_mode, count_include_pad, f32 and f64, batches of more than one
 * image); every gradient against finite
 * differences in f64, and in f32 against the f64 result; bad attributes
 * and shapes named in the errors; unknown dims at preparation; a program
 * with a biased conv that is encoded, decoded, run and differentiated. */
#include "opcheck.h"

#include "../ops/math/sgemm.h"
#include "../ops/math/winograd.h"
#include "../ops/ops_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_conv");
}

TestSuite(ops_conv, .init = setup, .fini = leak_check);

static const vq_dtype floats[] = {VQ_F32, VQ_F64};

static double tol(vq_dtype dt)
{
    return dt == VQ_F32 ? 2e-5 : 1e-12;
}

/* The output size along one dim, the plain way: floor or ceil of the
 * span over the stride, plus 1; with ceil, a window starting past the
 * input and the leading pad is dropped. */
static int64_t out_size(int64_t n, int64_t p0, int64_t p1, int64_t k, int64_t s, int64_t d,
                        bool ceil_mode)
{
    double span = (double)(n + p0 + p1 - d * (k - 1) - 1) / (double)s;
    int64_t o = (int64_t)(ceil_mode ? ceil(span) : floor(span)) + 1;
    if (ceil_mode && (o - 1) * s >= n + p0)
        o--;
    return o;
}

static void release_all(vq_tensor **t, int n)
{
    for (int i = 0; i < n; i++)
        vq_tensor_release(t[i]);
}

/* ---- conv2d ---- */

struct conv_case {
    int64_t n, c, h, w, m, kh, kw, groups;
    int64_t stride[2], pad[4], dil[2];
    bool bias;
};

static const struct conv_case conv_cases[] = {
    {1, 3, 5, 5, 4, 3, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false},
    {2, 4, 7, 6, 6, 3, 3, 2, {2, 2}, {1, 1, 1, 1}, {1, 1}, true},    /* groups 2, stride 2 */
    {2, 3, 8, 7, 5, 3, 2, 1, {1, 2}, {0, 2, 1, 0}, {1, 1}, true},    /* asymmetric pads */
    {1, 2, 9, 9, 3, 3, 3, 1, {1, 1}, {2, 2, 2, 2}, {2, 2}, false},   /* dilation 2 */
    {2, 6, 6, 5, 6, 3, 3, 6, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},    /* depthwise */
    {2, 6, 6, 5, 12, 3, 3, 6, {2, 1}, {1, 0, 1, 0}, {1, 1}, false},  /* depthwise, x2 */
    {3, 4, 5, 5, 4, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, true},    /* 1x1: no im2col */
    {2, 4, 6, 6, 8, 1, 1, 2, {2, 2}, {0, 0, 0, 0}, {1, 1}, false},   /* 1x1, stride 2 */
    {1, 1, 4, 4, 1, 5, 5, 1, {3, 3}, {2, 1, 2, 3}, {1, 1}, true},    /* kernel > input */
    {2, 4, 7, 7, 4, 3, 3, 4, {2, 2}, {0, 1, 2, 1}, {2, 1}, true},    /* all at once */
    {1, 3, 11, 10, 2, 7, 7, 1, {2, 2}, {3, 3, 3, 3}, {1, 1}, false}, /* ResNet's stem, small */
    {2, 4, 7, 6, 4, 3, 3, 4, {2, 1}, {2, 1, 0, 2}, {2, 2}, true},    /* depthwise, dilated */
    {1, 3, 4, 4, 3, 5, 5, 3, {1, 1}, {2, 2, 2, 2}, {1, 1}, false},   /* depthwise, k > input */
    {2, 5, 9, 19, 5, 3, 3, 5, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},   /* depthwise, long rows */
    /* depthwise 3x3 at stride 2 (the parity planes of conv_depthwise.c's padded
     * path): odd and even sizes, asymmetric and no pads */
    {2, 4, 7, 9, 4, 3, 3, 4, {2, 2}, {0, 1, 2, 0}, {1, 1}, true},
    {1, 3, 8, 5, 6, 3, 3, 3, {2, 2}, {1, 0, 0, 1}, {1, 1}, false},
    {1, 2, 3, 3, 2, 3, 3, 2, {2, 2}, {0, 0, 0, 0}, {1, 1}, true},
    {1, 2, 5, 4, 2, 3, 3, 2, {1, 2}, {1, 1, 1, 1}, {1, 1}, true}, /* strides differ */
    /* depthwise k x k other than 3x3 at dilation 1 (the s * s padded planes
     * of conv_depthwise.c's kxk path): 5x5 and 7x7 at strides 1 and 2,
     * dilated 3x3, a tap row the path takes tap by tap (kw 4), kh != kw, a
     * kernel past the input, a channel multiplier of 2 */
    {2, 3, 9, 11, 3, 5, 5, 3, {1, 1}, {2, 2, 2, 2}, {1, 1}, true},
    {1, 4, 10, 9, 4, 5, 5, 4, {2, 2}, {2, 1, 1, 2}, {1, 1}, false},
    {1, 2, 8, 8, 2, 7, 7, 2, {1, 1}, {3, 3, 3, 3}, {1, 1}, true},
    {2, 2, 13, 12, 4, 7, 7, 2, {2, 2}, {3, 3, 3, 3}, {1, 1}, true},
    {1, 3, 9, 9, 3, 3, 3, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}, false},
    {1, 3, 11, 10, 3, 3, 3, 3, {2, 2}, {2, 1, 0, 2}, {2, 3}, true},
    {1, 2, 7, 9, 2, 4, 4, 2, {1, 1}, {1, 2, 2, 1}, {1, 1}, true},
    {1, 2, 8, 7, 2, 3, 5, 2, {2, 2}, {1, 2, 1, 2}, {1, 1}, false},
    {1, 2, 3, 4, 2, 5, 5, 2, {1, 1}, {2, 2, 2, 2}, {1, 1}, true},
    {1, 2, 6, 6, 4, 5, 5, 2, {1, 1}, {0, 0, 0, 0}, {1, 1}, true},
};
#define NCONV (sizeof conv_cases / sizeof conv_cases[0])

static int conv_attrs(const struct conv_case *cc, vq_attr *at)
{
    at[0] = VQ_ATTR_IS("strides", cc->stride, 2);
    at[1] = VQ_ATTR_IS("pads", cc->pad, 4);
    at[2] = VQ_ATTR_IS("dilations", cc->dil, 2);
    at[3] = VQ_ATTR_I("groups", cc->groups);
    return 4;
}

static void conv_out_shape(const struct conv_case *cc, int64_t *os)
{
    os[0] = cc->n;
    os[1] = cc->m;
    os[2] = out_size(cc->h, cc->pad[0], cc->pad[2], cc->kh, cc->stride[0], cc->dil[0], false);
    os[3] = out_size(cc->w, cc->pad[1], cc->pad[3], cc->kw, cc->stride[1], cc->dil[1], false);
}

/* Out[n, m, oh, ow] = B[m] + sum over the group's channels and the taps on
 * the input of X * W, in double. */
static double *ref_conv(const struct conv_case *cc, vq_tensor *x, vq_tensor *w, vq_tensor *b)
{
    int64_t os[4];
    conv_out_shape(cc, os);
    int64_t cg = cc->c / cc->groups, mg = cc->m / cc->groups;
    double *out = calloc((size_t)(os[0] * os[1] * os[2] * os[3]), sizeof *out);
    cr_assert(out);
    for (int64_t n = 0; n < os[0]; n++)
        for (int64_t m = 0; m < os[1]; m++)
            for (int64_t oh = 0; oh < os[2]; oh++)
                for (int64_t ow = 0; ow < os[3]; ow++) {
                    int64_t g = m / mg;
                    double s = b ? oc_get(b, m) : 0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < cc->kh; i++)
                            for (int64_t j = 0; j < cc->kw; j++) {
                                int64_t ih = oh * cc->stride[0] - cc->pad[0] + i * cc->dil[0];
                                int64_t iw = ow * cc->stride[1] - cc->pad[1] + j * cc->dil[1];
                                if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w)
                                    continue;
                                int64_t xi = ((n * cc->c + g * cg + c) * cc->h + ih) * cc->w + iw;
                                int64_t wi = ((m * cg + c) * cc->kh + i) * cc->kw + j;
                                s += oc_get(x, xi) * oc_get(w, wi);
                            }
                    out[((n * os[1] + m) * os[2] + oh) * os[3] + ow] = s;
                }
    return out;
}

/* X, W and (if the case has one) B; returns the input count. */
static int conv_inputs(const struct conv_case *cc, vq_dtype dt, vq_tensor **in)
{
    in[0] = oc_rand(&rng, dt, 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w}, -1, 1);
    in[1] = oc_rand(&rng, dt, 4, (int64_t[]){cc->m, cc->c / cc->groups, cc->kh, cc->kw}, -1, 1);
    if (!cc->bias)
        return 2;
    in[2] = oc_rand(&rng, dt, 1, &cc->m, -1, 1);
    return 3;
}

Test(ops_conv, conv2d_matches_the_plain_loop)
{
    for (size_t k = 0; k < NCONV; k++)
        for (int d = 0; d < 2; d++) {
            const struct conv_case *cc = &conv_cases[k];
            vq_tensor *in[3];
            int nin = conv_inputs(cc, floats[d], in);
            vq_attr at[4];
            vq_tensor *o = oc_run1("conv2d", in, nin, at, conv_attrs(cc, at));
            int64_t os[4];
            conv_out_shape(cc, os);
            double *want = ref_conv(cc, in[0], in[1], cc->bias ? in[2] : NULL);
            cr_assert_eq(vq_tensor_dtype(o), floats[d]);
            oc_assert_close(o, 4, os, want, tol(floats[d]), tol(floats[d]));
            free(want);
            vq_tensor_release(o);
            release_all(in, nin);
        }
}

/* Large enough (2^20 multiply-adds) for the workers to share one call (conv.c:
 * whole images or groups, or within one image the im2col by channel and
 * the product by column or by output-channel blocks). */
static const struct conv_case shared_cases[] = {
    {1, 8, 32, 32, 16, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},   /* by columns */
    {1, 64, 6, 6, 128, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},   /* by channels */
    {3, 8, 32, 32, 16, 3, 3, 2, {1, 1}, {1, 1, 1, 1}, {1, 1}, false},  /* by (image, group) */
    {1, 64, 16, 16, 64, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, true},  /* 1x1, by columns */
    {1, 64, 48, 48, 64, 3, 3, 64, {1, 1}, {1, 1, 1, 1}, {1, 1}, true}, /* depthwise */
    {2, 32, 56, 56, 64, 3, 3, 32, {2, 2}, {1, 1, 1, 1}, {1, 1}, true}, /* depthwise x2, s2 */
    {1, 64, 28, 28, 64, 5, 5, 64, {1, 1}, {2, 2, 2, 2}, {1, 1}, true}, /* depthwise 5x5 */
};

Test(ops_conv, conv2d_shared_by_two_workers_equals_the_serial_call_bit_for_bit)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    for (size_t k = 0; k < sizeof shared_cases / sizeof shared_cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            const struct conv_case *cc = &shared_cases[k];
            vq_tensor *in[3], *par = NULL;
            int nin = conv_inputs(cc, floats[d], in);
            vq_attr at[4];
            int na = conv_attrs(cc, at);
            vq_tensor *ser = oc_run1("conv2d", in, nin, at, na);
            cr_assert_eq(vq_op_run(e, "conv2d", in, nin, &par, 1, at, na), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_tensor_wait(par), 0, "%s", vq_errmsg());
            cr_assert_eq(memcmp(vq_tensor_data(par), vq_tensor_data(ser),
                                (size_t)vq_tensor_numel(ser) * vq_dtype_size(floats[d])),
                         0, "case %zu, %s: the shared call differs from the serial one", k,
                         floats[d] == VQ_F32 ? "f32" : "f64");
            int64_t os[4];
            conv_out_shape(cc, os);
            double *want = ref_conv(cc, in[0], in[1], cc->bias ? in[2] : NULL);
            oc_assert_close(par, 4, os, want, tol(floats[d]) * 10, tol(floats[d]) * 10);
            free(want);
            vq_tensor_release(par);
            vq_tensor_release(ser);
            release_all(in, nin);
        }
    vq_engine_free(e);
}

/* Depthwise 3x3 planes go through a zero-padded copy (conv_depthwise.c,
 * dw_padded): a weight that is not finite must not meet a padded zero
 * there (Inf * 0 = NaN), so such a plane takes the path that skips the
 * taps outside X, as the formula does. Here w[0] = +Inf touches X only
 * from outputs with a valid top-left tap: the first row and column of the
 * output (whose tap (0, 0) lies in the padding) stay finite, the others
 * are +Inf; the second channel, finite, gives its plain sums. */
Test(ops_conv, depthwise_with_an_infinite_weight_skips_the_padding_as_the_formula_does)
{
    for (int d = 0; d < 2; d++)
        for (int s = 1; s <= 2; s++) {
            int64_t xs[4] = {1, 2, 7, 7}, ws[4] = {2, 1, 3, 3};
            vq_tensor *x, *w;
            cr_assert_eq(vq_tensor_new(&x, floats[d], 4, xs), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_tensor_new(&w, floats[d], 4, ws), 0, "%s", vq_errmsg());
            for (int i = 0; i < 98; i++)
                oc_set(x, i, 1.0);
            for (int i = 0; i < 18; i++)
                oc_set(w, i, i == 0 ? INFINITY : 0.5);
            int64_t st[2] = {s, s}, pad[4] = {1, 1, 1, 1};
            vq_attr at[3] = {VQ_ATTR_IS("strides", st, 2), VQ_ATTR_IS("pads", pad, 4),
                             VQ_ATTR_I("groups", 2)};
            vq_tensor *in[2] = {x, w}, *out = NULL;
            cr_assert_eq(vq_op_run(NULL, "conv2d", in, 2, &out, 1, at, 3), 0, "%s", vq_errmsg());
            int64_t on = s == 1 ? 7 : 4;
            for (int64_t r = 0; r < on; r++)
                for (int64_t c = 0; c < on; c++) {
                    double v0 = oc_get(out, r * on + c), v1 = oc_get(out, on * on + r * on + c);
                    if (r == 0 || c == 0)
                        cr_assert(isfinite(v0),
                                  "stride %d, f%d: output (%lld, %lld) is %g, "
                                  "its Inf tap lies in the padding",
                                  s, d ? 64 : 32, (long long)r, (long long)c, v0);
                    else
                        cr_assert(isinf(v0) && v0 > 0, "stride %d: output (%lld, %lld) is %g", s,
                                  (long long)r, (long long)c, v0);
                    /* channel 1: 0.5 times the taps inside X */
                    int64_t rows = 0, cols = 0;
                    for (int i = 0; i < 3; i++) {
                        int64_t y = r * s - 1 + i, xx = c * s - 1 + i;
                        rows += y >= 0 && y < 7;
                        cols += xx >= 0 && xx < 7;
                    }
                    cr_assert_eq(v1, 0.5 * (double)(rows * cols), "stride %d: (%lld, %lld)", s,
                                 (long long)r, (long long)c);
                }
            vq_tensor_release(out);
            vq_tensor_release(x);
            vq_tensor_release(w);
        }
}

/* The depthwise kernels' padded paths (3x3 and k x k) add a plane's taps
 * in tap order (i, j) from 0, skipping none (a tap in the padding adds
 * w * 0), then the bias: with finite weights, the same bits as the sum
 * that visits only the taps on X, in the dtype, which this computes. Run
 * at every VARQ_ISA level by scripts/test.sh, so the portable, AVX2 and
 * AVX-512 variants each meet it. */
#define TAP_ORDER_REF(T)                                                                       \
    static void tap_order_##T(const struct conv_case *cc, const T *x, const T *w, const T *b,  \
                              T *out)                                                          \
    {                                                                                          \
        int64_t os[4];                                                                         \
        conv_out_shape(cc, os);                                                                \
        int64_t mg = cc->m / cc->groups;                                                       \
        for (int64_t n = 0; n < os[0]; n++)                                                    \
            for (int64_t m = 0; m < os[1]; m++)                                                \
                for (int64_t oh = 0; oh < os[2]; oh++)                                         \
                    for (int64_t ow = 0; ow < os[3]; ow++) {                                   \
                        T r = 0;                                                               \
                        for (int64_t i = 0; i < cc->kh; i++)                                   \
                            for (int64_t j = 0; j < cc->kw; j++) {                             \
                                int64_t ih = oh * cc->stride[0] - cc->pad[0] + i * cc->dil[0]; \
                                int64_t iw = ow * cc->stride[1] - cc->pad[1] + j * cc->dil[1]; \
                                if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w)            \
                                    continue;                                                  \
                                T p = w[(m * cc->kh + i) * cc->kw + j] *                       \
                                      x[((n * cc->c + m / mg) * cc->h + ih) * cc->w + iw];     \
                                r = r + p;                                                     \
                            }                                                                  \
                        if (b)                                                                 \
                            r = r + b[m];                                                      \
                        out[((n * os[1] + m) * os[2] + oh) * os[3] + ow] = r;                  \
                    }                                                                          \
    }

TAP_ORDER_REF(float)
TAP_ORDER_REF(double)

Test(ops_conv, depthwise_padded_paths_equal_the_tap_order_sum_bit_for_bit)
{
    for (size_t k = 0; k < NCONV; k++) {
        const struct conv_case *cc = &conv_cases[k];
        if (cc->groups != cc->c || cc->groups == 1)
            continue;
        for (int d = 0; d < 2; d++) {
            vq_tensor *in[3], *out = NULL;
            int nin = conv_inputs(cc, floats[d], in);
            vq_attr at[4];
            int na = conv_attrs(cc, at);
            cr_assert_eq(vq_op_run(NULL, "conv2d", in, nin, &out, 1, at, na), 0, "%s", vq_errmsg());
            size_t n = (size_t)vq_tensor_numel(out), es = vq_dtype_size(floats[d]);
            void *want = malloc(n * es);
            cr_assert(want);
            const void *b = nin == 3 ? vq_tensor_data(in[2]) : NULL;
            if (floats[d] == VQ_F32)
                tap_order_float(cc, vq_tensor_data(in[0]), vq_tensor_data(in[1]), b, want);
            else
                tap_order_double(cc, vq_tensor_data(in[0]), vq_tensor_data(in[1]), b, want);
            cr_assert_eq(memcmp(vq_tensor_data(out), want, n * es), 0,
                         "case %zu (%lldx%lld, stride %lld), %s: not the tap-order sums", k,
                         (long long)cc->kh, (long long)cc->kw, (long long)cc->stride[0],
                         floats[d] == VQ_F32 ? "f32" : "f64");
            free(want);
            vq_tensor_release(out);
            release_all(in, nin);
        }
    }
}

Test(ops_conv, large_pools_shared_by_two_workers_equal_the_serial_call)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    /* planes of 56x56 outputs (several planes a chunk), and one plane of
     * 260x260 (a chunk each) */
    static const int64_t shapes[2][4] = {{2, 16, 112, 112}, {1, 3, 520, 520}};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *x = oc_rand(&rng, floats[d], 4, shapes[s], -1, 1);
            int64_t k[2] = {3, 3}, st[2] = {2, 2}, pad[4] = {1, 1, 1, 1};
            vq_attr at[3] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", st, 2),
                             VQ_ATTR_IS("pads", pad, 4)};
            oc_assert_shared_equals_serial(e, "max_pool2d", &x, 1, at, 3);
            oc_assert_shared_equals_serial(e, "avg_pool2d", &x, 1, at, 3);
            vq_tensor_release(x);
        }
    vq_engine_free(e);
}

Test(ops_conv, conv2d_defaults_are_stride_1_no_pad_no_dilation_one_group)
{
    struct conv_case cc = {2, 2, 4, 5, 3, 2, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false};
    vq_tensor *in[3];
    int nin = conv_inputs(&cc, VQ_F64, in);
    vq_tensor *o = oc_run1("conv2d", in, nin, NULL, 0);
    int64_t os[4];
    conv_out_shape(&cc, os);
    double *want = ref_conv(&cc, in[0], in[1], NULL);
    oc_assert_close(o, 4, os, want, 1e-12, 1e-12);
    free(want);
    vq_tensor_release(o);
    release_all(in, nin);
}

Test(ops_conv, conv2d_gradients_match_finite_differences)
{
    /* small versions of the cases: every path of both gradient kernels */
    static const struct conv_case cases[] = {
        {2, 2, 4, 4, 3, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},
        {2, 4, 5, 4, 4, 3, 2, 2, {2, 1}, {0, 1, 2, 0}, {1, 1}, true},
        {1, 2, 6, 6, 2, 3, 3, 1, {1, 2}, {2, 1, 1, 2}, {2, 2}, false},
        {2, 3, 4, 5, 6, 3, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, true}, /* depthwise, x2 */
        {2, 3, 3, 4, 2, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, true}, /* 1x1 */
        {1, 2, 5, 5, 2, 1, 1, 2, {2, 2}, {1, 0, 0, 1}, {1, 1}, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vq_tensor *in[3];
        int nin = conv_inputs(&cases[k], VQ_F64, in);
        vq_attr at[4];
        double err = oc_grad_check("conv2d", in, nin, 1, at, conv_attrs(&cases[k], at),
                                   (1u << nin) - 1, &rng);
        cr_assert_leq(err, 1e-6, "case %zu", k);
        release_all(in, nin);
    }
}

/* ---- conv2d's fused clip ---- */

static const double clips[][2] = {{0, INFINITY}, {-0.5, 0.75}, {-INFINITY, 0.3}, {0.2, 0.2}};
#define NCLIPS (sizeof clips / sizeof clips[0])

static int clip_attrs(const struct conv_case *cc, const double *clip, vq_attr *at)
{
    int n = conv_attrs(cc, at);
    at[n] = VQ_ATTR_FS("clip", clip, 2);
    return n + 1;
}

Test(ops_conv, conv2d_with_clip_matches_the_plain_loop_clipped)
{
    for (size_t k = 0; k < NCONV; k++)
        for (size_t c = 0; c < NCLIPS; c++)
            for (int d = 0; d < 2; d++) {
                const struct conv_case *cc = &conv_cases[k];
                vq_tensor *in[3];
                int nin = conv_inputs(cc, floats[d], in);
                vq_attr at[5];
                vq_tensor *o = oc_run1("conv2d", in, nin, at, clip_attrs(cc, clips[c], at));
                int64_t os[4];
                conv_out_shape(cc, os);
                double *want = ref_conv(cc, in[0], in[1], cc->bias ? in[2] : NULL);
                for (int64_t i = 0; i < os[0] * os[1] * os[2] * os[3]; i++)
                    want[i] = fmin(fmax(want[i], clips[c][0]), clips[c][1]);
                oc_assert_close(o, 4, os, want, tol(floats[d]), tol(floats[d]));
                free(want);
                vq_tensor_release(o);
                release_all(in, nin);
            }
}

/* Bit for bit what maximum and then minimum give on the unclipped
 * output, NaN and -0 included, on one worker and shared by two. */
Test(ops_conv, conv2d_clip_equals_maximum_then_minimum_bit_for_bit_serial_and_shared)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    const size_t ncases = sizeof shared_cases / sizeof shared_cases[0];
    for (size_t k = 0; k < ncases + NCONV; k++)
        for (size_t c = 0; c < NCLIPS; c++)
            for (int d = 0; d < 2; d++) {
                const struct conv_case *cc =
                    k < ncases ? &shared_cases[k] : &conv_cases[k - ncases];
                vq_dtype dt = floats[d];
                vq_tensor *in[3], *par = NULL;
                int nin = conv_inputs(cc, dt, in);
                /* a NaN in X and a zero weight row: NaN and signed zeros out */
                if (dt == VQ_F32) {
                    ((float *)vq_tensor_data(in[0]))[0] = NAN;
                    memset(vq_tensor_data(in[1]), 0, vq_tensor_nbytes(in[1]) / (size_t)cc->m);
                } else {
                    ((double *)vq_tensor_data(in[0]))[0] = NAN;
                    memset(vq_tensor_data(in[1]), 0, vq_tensor_nbytes(in[1]) / (size_t)cc->m);
                }
                vq_attr at[5];
                int na = conv_attrs(cc, at);
                vq_tensor *raw = oc_run1("conv2d", in, nin, at, na);
                vq_tensor *lo, *hi;
                cr_assert_eq(vq_tensor_new(&lo, dt, 0, NULL), 0);
                cr_assert_eq(vq_tensor_new(&hi, dt, 0, NULL), 0);
                if (dt == VQ_F32) {
                    *(float *)vq_tensor_data(lo) = (float)clips[c][0];
                    *(float *)vq_tensor_data(hi) = (float)clips[c][1];
                } else {
                    *(double *)vq_tensor_data(lo) = clips[c][0];
                    *(double *)vq_tensor_data(hi) = clips[c][1];
                }
                vq_tensor *mx = oc_run1("maximum", (vq_tensor *[]){raw, lo}, 2, NULL, 0);
                vq_tensor *want = oc_run1("minimum", (vq_tensor *[]){mx, hi}, 2, NULL, 0);
                na = clip_attrs(cc, clips[c], at);
                vq_tensor *ser = oc_run1("conv2d", in, nin, at, na);
                cr_assert_eq(vq_op_run(e, "conv2d", in, nin, &par, 1, at, na), 0, "%s",
                             vq_errmsg());
                cr_assert_eq(vq_tensor_wait(par), 0, "%s", vq_errmsg());
                size_t bytes = vq_tensor_nbytes(want);
                cr_assert_eq(memcmp(vq_tensor_data(ser), vq_tensor_data(want), bytes), 0,
                             "case %zu, clip %zu, %s: serial clip differs from maximum, minimum", k,
                             c, dt == VQ_F32 ? "f32" : "f64");
                cr_assert_eq(memcmp(vq_tensor_data(par), vq_tensor_data(want), bytes), 0,
                             "case %zu, clip %zu, %s: shared clip differs from maximum, minimum", k,
                             c, dt == VQ_F32 ? "f32" : "f64");
                vq_tensor *tmp[] = {raw, lo, hi, mx, want, ser, par};
                release_all(tmp, 7);
                release_all(in, nin);
            }
    vq_engine_free(e);
}

/* ---- conv2d's Winograd path (ops/math/winograd.c) ----
 *
 * F(4x4, 3x3) against the plain loop in double on 3x3 stride-1 shapes of
 * every kind, called directly (the kernel runs any such shape; conv2d
 * takes it only for large ones): outputs not a multiple of 4 (partial
 * border tiles), inputs smaller than a tile, pads 0, 1, 2 and asymmetric,
 * batches, 1 to 70 channels, bias and clip, blocks of tile rows.
 *
 * Tolerance: |error| <= 2e-5 * max |Out| + 1e-6 (with bias and clip, the
 * unclipped output's maximum). The transforms scale the data by up to
 * (4 + 5 + 1)^2 = 100 (B^T's largest row sum, both sides) and the output
 * transform sums m's elements with weights up to 8 + 8 + 1 (squared: 289),
 * so F(4,3)'s f32 rounding error is tens of ulps of the output's magnitude
 * against about one for im2col: over these cases and seeds 1 to 3 the
 * largest was 4.3e-6 of max |Out| (2.4e-7 is one ulp at 1), 5x below the
 * tolerance. A wrong transform constant or a misplaced border patch gives
 * errors of the order of the output itself, 1e-1 to 1. */
struct wg_case {
    int64_t n, c, h, w, m, pad[4];
    bool bias;
    int clip; /* -1: none; else an index into clips */
};

static const struct wg_case wg_cases[] = {
    {1, 1, 4, 4, 1, {0, 0, 0, 0}, false, -1},    /* one partial tile: 2x2 outputs */
    {1, 1, 6, 6, 1, {0, 0, 0, 0}, true, -1},     /* exactly one tile */
    {1, 2, 5, 7, 3, {1, 1, 1, 1}, false, 0},     /* 5x7 outputs */
    {2, 3, 9, 10, 4, {2, 2, 2, 2}, true, 1},     /* pad 2 */
    {1, 4, 13, 11, 5, {0, 1, 2, 0}, true, -1},   /* asymmetric */
    {3, 5, 8, 8, 6, {1, 0, 0, 1}, false, 2},     /* asymmetric, batch 3 */
    {1, 8, 3, 3, 8, {2, 2, 2, 2}, true, 0},      /* input smaller than a patch */
    {1, 16, 14, 14, 32, {1, 1, 1, 1}, true, -1}, /* ResNet's layer3, narrow */
    {2, 64, 7, 7, 64, {1, 1, 1, 1}, true, 0},    /* layer4's 7x7: 4 of 16 outputs used */
    {1, 70, 10, 9, 66, {2, 0, 1, 2}, false, 3},  /* 70 channels: a partial lane group */
    {1, 3, 30, 31, 7, {1, 2, 1, 0}, true, 1},    /* many tiles */
    {2, 1, 1, 20, 2, {1, 1, 1, 1}, false, -1},   /* one input row */
    {2, 4, 70, 266, 4, {1, 1, 1, 1}, true, 0},   /* 67 tiles a row: two segments */
    {4, 20, 60, 60, 20, {1, 1, 1, 1}, true, -1}, /* 900 tiles: two blocks */
};

static struct conv_case wg_conv_case(const struct wg_case *wc)
{
    struct conv_case cc = {wc->n, wc->c, wc->h,  wc->w, wc->m,  3,
                           3,     1,     {1, 1}, {0},   {1, 1}, wc->bias};
    memcpy(cc.pad, wc->pad, sizeof cc.pad);
    return cc;
}

/* The largest |got - want| over the largest |want|; want is the
 * unclipped reference, clipped here when clip >= 0. */
static double wg_rel_error(vq_tensor *got, double *want, int64_t n, int clip, double *scale)
{
    double err = 0, big = 0;
    const float *g = vq_tensor_data(got);
    for (int64_t i = 0; i < n; i++) {
        big = fmax(big, fabs(want[i]));
        if (clip >= 0)
            want[i] = fmin(fmax(want[i], clips[clip][0]), clips[clip][1]);
        err = fmax(err, fabs(g[i] - want[i]));
    }
    *scale = big;
    return err;
}

#define WG_RTOL 2e-5
#define WG_ATOL 1e-6

Test(ops_conv, winograd_matches_the_plain_loop_on_3x3_stride_1_shapes)
{
    const vq__op_def *def = vq__op_find("conv2d");
    cr_assert(def);
    for (size_t k = 0; k < sizeof wg_cases / sizeof wg_cases[0]; k++) {
        const struct wg_case *wc = &wg_cases[k];
        struct conv_case cc = wg_conv_case(wc);
        vq_tensor *in[3], *o;
        int nin = conv_inputs(&cc, VQ_F32, in);
        int64_t os[4], st[2] = {1, 1}, dil[2] = {1, 1};
        conv_out_shape(&cc, os);
        cr_assert_eq(vq_tensor_new(&o, VQ_F32, 4, os), 0);
        vq__conv cv =
            vq__conv_of(vq_tensor_shape(in[0]), vq_tensor_shape(in[1]), 1, os, st, wc->pad, dil);
        vq__window_params p = {.clip = wc->clip >= 0};
        if (p.clip) {
            p.clip_lo = clips[wc->clip][0];
            p.clip_hi = clips[wc->clip][1];
        }
        vq__kcall kc = {.def = def, .in = in, .nin = nin, .out = &o, .nout = 1};
        /* NaN everywhere first: every output must be written */
        float *od = vq_tensor_data(o);
        for (int64_t i = 0; i < vq_tensor_numel(o); i++)
            od[i] = NAN;
        cr_assert_eq(vq__conv_winograd(&kc, &cv, &p, vq_tensor_data(in[0]), vq_tensor_data(in[1]),
                                       wc->bias ? vq_tensor_data(in[2]) : NULL, od),
                     0, "%s", vq_errmsg());
        double *want = ref_conv(&cc, in[0], in[1], wc->bias ? in[2] : NULL), scale;
        double err = wg_rel_error(o, want, vq_tensor_numel(o), wc->clip, &scale);
        cr_assert_leq(err, WG_RTOL * scale + WG_ATOL,
                      "case %zu: max error %g, max |Out| %g (relative %g)", k, err, scale,
                      err / scale);
        free(want);
        vq_tensor_release(o);
        release_all(in, nin);
    }
}

/* Changing one transform constant or shifting the patches by a column
 * breaks the match above: the same check on a hand-made case where the
 * answer is known exactly. A single 1 at input (r, c) with all-ones
 * weights gives 1 at each output whose window covers it, 0 elsewhere,
 * up to the rounding of G's 1/6, 1/12 and 1/24 (about 1e-6 measured),
 * at every position of the 6x6 patch and across border tiles. */
Test(ops_conv, winograd_spreads_each_input_element_over_exactly_its_3x3_outputs)
{
    const vq__op_def *def = vq__op_find("conv2d");
    int64_t xs[4] = {1, 1, 9, 10}, ws[4] = {1, 1, 3, 3}, pad[4] = {1, 2, 0, 1};
    int64_t os[4] = {1, 1, 9 + 1 - 2, 10 + 3 - 2}, st[2] = {1, 1}, dil[2] = {1, 1};
    vq_tensor *x, *w, *o;
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 4, xs), 0);
    cr_assert_eq(vq_tensor_new(&w, VQ_F32, 4, ws), 0);
    cr_assert_eq(vq_tensor_new(&o, VQ_F32, 4, os), 0);
    for (int i = 0; i < 9; i++)
        ((float *)vq_tensor_data(w))[i] = 1;
    vq__conv cv = vq__conv_of(xs, ws, 1, os, st, pad, dil);
    vq__window_params p = {0};
    vq__kcall kc = {.def = def, .in = (vq_tensor *[]){x, w}, .nin = 2, .out = &o, .nout = 1};
    float *xd = vq_tensor_data(x), *od = vq_tensor_data(o);
    for (int64_t r = 0; r < xs[2]; r++)
        for (int64_t c = 0; c < xs[3]; c++) {
            memset(xd, 0, vq_tensor_nbytes(x));
            xd[r * xs[3] + c] = 1;
            cr_assert_eq(vq__conv_winograd(&kc, &cv, &p, xd, vq_tensor_data(w), NULL, od), 0);
            for (int64_t i = 0; i < os[2]; i++)
                for (int64_t j = 0; j < os[3]; j++) {
                    /* output (i, j) reads rows i - 1 .. i + 1, columns j - 2 .. j */
                    bool covers = r >= i - pad[0] && r <= i - pad[0] + 2 && c >= j - pad[1] &&
                                  c <= j - pad[1] + 2;
                    float got = od[i * os[3] + j];
                    cr_assert(fabsf(got - (covers ? 1.0f : 0.0f)) <= 1e-5f,
                              "input (%lld, %lld): output (%lld, %lld) is %g, want %d",
                              (long long)r, (long long)c, (long long)i, (long long)j, got, covers);
                }
        }
    vq_tensor *all[] = {x, w, o};
    release_all(all, 3);
}

/* Which calls conv2d sends to Winograd: f32 3x3, stride 1, dilation 1,
 * one group, large enough; unless VARQ_CONV_WINOGRAD=0 is set. */
Test(ops_conv, winograd_takes_only_large_f32_3x3_stride_1_undilated_ungrouped_calls)
{
    const char *env = getenv("VARQ_CONV_WINOGRAD");
    bool on = !(env && !strcmp(env, "0"));
    int64_t x[4] = {1, 64, 56, 56}, w[4] = {64, 64, 3, 3}, o[4] = {1, 64, 56, 56};
    int64_t s1[2] = {1, 1}, s2[2] = {2, 2}, pad[4] = {1, 1, 1, 1}, d1[2] = {1, 1}, d2[2] = {2, 2};
    vq__conv cv = vq__conv_of(x, w, 1, o, s1, pad, d1);
    cr_assert_eq(vq__winograd_fits(&cv, VQ_F32), on);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F64));
    cv = vq__conv_of(x, w, 1, (int64_t[]){1, 64, 28, 28}, s2, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "stride 2");
    cv = vq__conv_of(x, w, 1, (int64_t[]){1, 64, 54, 54}, s1, pad, d2);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "dilation 2");
    cv = vq__conv_of(x, (int64_t[]){64, 32, 3, 3}, 2, o, s1, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "2 groups");
    cv = vq__conv_of(x, (int64_t[]){64, 64, 1, 1}, 1, o, s1, (int64_t[]){0, 0, 0, 0}, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "1x1");
    cv = vq__conv_of((int64_t[]){1, 3, 56, 56}, (int64_t[]){64, 3, 3, 3}, 1, o, s1, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "3 input channels");
    cv = vq__conv_of((int64_t[]){1, 8, 56, 56}, (int64_t[]){64, 8, 3, 3}, 1, o, s1, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "8 input channels");
    cv = vq__conv_of((int64_t[]){1, 512, 7, 7}, (int64_t[]){512, 512, 3, 3}, 1,
                     (int64_t[]){1, 512, 7, 7}, s1, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "4 tiles");
    cv = vq__conv_of((int64_t[]){1, 256, 14, 14}, (int64_t[]){256, 256, 3, 3}, 1,
                     (int64_t[]){1, 256, 14, 14}, s1, pad, d1);
    /* 16 tiles pay with the AVX-512 transforms only (winograd.c) */
    cr_assert_eq(vq__winograd_fits(&cv, VQ_F32), on && vq__sgemm_level() >= VQ__ISA_AVX512,
                 "16 tiles");
    cv = vq__conv_of((int64_t[]){1, 256, 10, 14}, (int64_t[]){256, 256, 3, 3}, 1,
                     (int64_t[]){1, 256, 10, 14}, s1, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "12 tiles");
    cv = vq__conv_of((int64_t[]){2, 256, 14, 14}, (int64_t[]){256, 256, 3, 3}, 1,
                     (int64_t[]){2, 256, 14, 14}, s1, pad, d1);
    cr_assert_eq(vq__winograd_fits(&cv, VQ_F32), on, "32 tiles");
    cv = vq__conv_of((int64_t[]){1, 64, 56, 56}, (int64_t[]){4, 64, 3, 3}, 1,
                     (int64_t[]){1, 4, 56, 56}, s1, pad, d1);
    cr_assert_not(vq__winograd_fits(&cv, VQ_F32), "4 output channels");
}

/* conv2d on shapes that take Winograd: the plain loop's result within
 * the tolerance above, with bias and clip, and the same bits on one
 * worker and shared by two. */
Test(ops_conv, conv2d_through_winograd_matches_the_plain_loop_serial_and_shared)
{
    static const struct wg_case cases[] = {
        {1, 32, 23, 21, 24, {1, 1, 1, 1}, true, 0},
        {3, 16, 16, 17, 40, {0, 2, 1, 0}, false, 1},
        {2, 48, 9, 30, 16, {2, 1, 2, 1}, true, -1},
    };
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct wg_case *wc = &cases[k];
        struct conv_case cc = wg_conv_case(wc);
        vq_tensor *in[3], *par = NULL;
        int nin = conv_inputs(&cc, VQ_F32, in);
        int64_t os[4];
        conv_out_shape(&cc, os);
        vq__conv cv = vq__conv_of(vq_tensor_shape(in[0]), vq_tensor_shape(in[1]), 1, os, cc.stride,
                                  cc.pad, cc.dil);
        const char *env = getenv("VARQ_CONV_WINOGRAD");
        cr_assert_eq(vq__winograd_fits(&cv, VQ_F32), !(env && !strcmp(env, "0")), "case %zu", k);
        vq_attr at[5];
        int na = wc->clip >= 0 ? clip_attrs(&cc, clips[wc->clip], at) : conv_attrs(&cc, at);
        vq_tensor *ser = oc_run1("conv2d", in, nin, at, na);
        cr_assert_eq(vq_op_run(e, "conv2d", in, nin, &par, 1, at, na), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_wait(par), 0, "%s", vq_errmsg());
        cr_assert_eq(memcmp(vq_tensor_data(par), vq_tensor_data(ser), vq_tensor_nbytes(ser)), 0,
                     "case %zu: the shared call differs from the serial one", k);
        double *want = ref_conv(&cc, in[0], in[1], wc->bias ? in[2] : NULL), scale;
        double err = wg_rel_error(ser, want, vq_tensor_numel(ser), wc->clip, &scale);
        cr_assert_leq(err, WG_RTOL * scale + WG_ATOL, "case %zu: max error %g, max |Out| %g", k,
                      err, scale);
        free(want);
        vq_tensor_release(par);
        vq_tensor_release(ser);
        release_all(in, nin);
    }
    vq_engine_free(e);
}

/* The Winograd path keeps each weights' transform between calls, checked
 * against a copy of the weights (ops/math/winograd.c): the same weights
 * give the same bits again; weights changed in place, as training does,
 * give what a fresh tensor with the new values gives, change after change
 * (past the point where their address is no longer cached), and so after
 * vq_mem_trim emptied the cache. */
static vq_tensor *wg_run_fresh_w(vq_tensor **in, int nin, const vq_attr *at, int na)
{
    vq_tensor *w = NULL, *cp[3] = {in[0], NULL, nin > 2 ? in[2] : NULL};
    cr_assert_eq(vq_tensor_from(&w, VQ_F32, 4, vq_tensor_shape(in[1]), vq_tensor_data(in[1])), 0);
    cp[1] = w;
    vq_tensor *o = oc_run1("conv2d", cp, nin, at, na);
    vq_tensor_release(w);
    return o;
}

Test(ops_conv, winograd_kept_transforms_follow_weights_changed_in_place)
{
    const char *env = getenv("VARQ_CONV_WINOGRAD");
    if (env && !strcmp(env, "0"))
        cr_skip_test("VARQ_CONV_WINOGRAD=0: no Winograd path");
    static const struct wg_case wc = {1, 32, 23, 21, 24, {1, 1, 1, 1}, true, -1};
    struct conv_case cc = wg_conv_case(&wc);
    vq_tensor *in[3];
    int nin = conv_inputs(&cc, VQ_F32, in);
    vq_attr at[5];
    int na = conv_attrs(&cc, at);
    vq_tensor *prev = oc_run1("conv2d", in, nin, at, na);
    vq_tensor *again = oc_run1("conv2d", in, nin, at, na);
    cr_assert_eq(memcmp(vq_tensor_data(prev), vq_tensor_data(again), vq_tensor_nbytes(prev)), 0,
                 "the same weights gave other bits the second time");
    vq_tensor_release(again);
    float *wd = vq_tensor_data(in[1]);
    for (int round = 0; round < 6; round++) {
        if (round == 4)
            cr_assert_eq(vq_mem_trim((vq_ctx){VQ_DEV_CPU, 0}), 0, "%s", vq_errmsg());
        wd[round * 37] += 0.5f;
        vq_tensor *got = oc_run1("conv2d", in, nin, at, na);
        vq_tensor *want = wg_run_fresh_w(in, nin, at, na);
        size_t nb = vq_tensor_nbytes(got);
        cr_assert_eq(memcmp(vq_tensor_data(got), vq_tensor_data(want), nb), 0,
                     "round %d: weights changed in place, but the result is not theirs", round);
        cr_assert_neq(memcmp(vq_tensor_data(got), vq_tensor_data(prev), nb), 0,
                      "round %d: the change made no difference", round);
        vq_tensor_release(want);
        vq_tensor_release(prev);
        prev = got;
    }
    vq_tensor_release(prev);
    release_all(in, nin);
}

/* Single-image f32 calls with more output channels than output columns
 * at stride 1 that Winograd does not take (too few tiles, other kernel
 * sizes, dilation): on CPUs with AVX-512 the first three take their
 * product's columns straight from a padded copy of X (ops/cpu/conv.c,
 * "stride 1 without im2col"), the last two im2col. Against the plain
 * loop, with bias and clip, and the same bits on one worker and shared by
 * two. */
Test(ops_conv, stride_1_products_without_im2col_match_the_plain_loop_serial_and_shared)
{
    static const struct conv_case cases[] = {
        {1, 64, 7, 7, 128, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},
        {1, 32, 4, 9, 128, 5, 3, 1, {1, 1}, {2, 0, 0, 3}, {1, 1}, false},
        {1, 64, 4, 7, 128, 3, 3, 1, {1, 1}, {2, 1, 1, 2}, {2, 2}, true},
        /* the padded rows: 7 vectors of the product for im2col's 6 */
        {1, 32, 9, 11, 128, 5, 3, 1, {1, 1}, {2, 0, 1, 3}, {1, 1}, false},
        {1, 64, 6, 6, 200, 3, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, true},
    };
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int clip = -1; clip < 2; clip++) {
            const struct conv_case *cc = &cases[k];
            vq_tensor *in[3], *par = NULL;
            int nin = conv_inputs(cc, VQ_F32, in);
            int64_t os[4];
            conv_out_shape(cc, os);
            cr_assert_lt(os[2] * os[3], cc->m, "case %zu: not a product split by channels", k);
            vq_attr at[5];
            int na = clip >= 0 ? clip_attrs(cc, clips[clip], at) : conv_attrs(cc, at);
            vq_tensor *ser = oc_run1("conv2d", in, nin, at, na);
            cr_assert_eq(vq_op_run(e, "conv2d", in, nin, &par, 1, at, na), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_tensor_wait(par), 0, "%s", vq_errmsg());
            cr_assert_eq(memcmp(vq_tensor_data(par), vq_tensor_data(ser), vq_tensor_nbytes(ser)), 0,
                         "case %zu clip %d: the shared call differs from the serial one", k, clip);
            double *want = ref_conv(cc, in[0], in[1], cc->bias ? in[2] : NULL), scale;
            double err = wg_rel_error(ser, want, vq_tensor_numel(ser), clip, &scale);
            cr_assert_leq(err, 1e-5 * scale + 1e-6, "case %zu clip %d: max error %g, max |Out| %g",
                          k, clip, err, scale);
            free(want);
            vq_tensor_release(par);
            vq_tensor_release(ser);
            release_all(in, nin);
        }
    vq_engine_free(e);
}

/* Calls from several threads at once through a cache too small for two
 * layers' transforms (1 MB: every call evicts the other layer's entry,
 * often while another thread still reads it): every result keeps the
 * bits of the first call on the same inputs. Each test runs in a process
 * of its own, so the budget read here is this process's first. */
struct wg_thread_arg {
    vq_tensor **in[2];
    int nin[2];
    vq_attr *at[2];
    int na[2];
    vq_tensor *want[2];
    int bad;
};

static void *wg_thread(void *p)
{
    struct wg_thread_arg *t = p;
    for (int it = 0; it < 24; it++) {
        int l = it % 2;
        vq_tensor *o = NULL;
        if (vq_op_run(NULL, "conv2d", t->in[l], t->nin[l], &o, 1, t->at[l], t->na[l]) != 0 ||
            memcmp(vq_tensor_data(o), vq_tensor_data(t->want[l]), vq_tensor_nbytes(o)) != 0)
            t->bad++;
        vq_tensor_release(o);
    }
    return NULL;
}

Test(ops_conv, winograd_kept_transforms_serve_threads_at_once_through_evictions)
{
    const char *env = getenv("VARQ_CONV_WINOGRAD");
    if (env && !strcmp(env, "0"))
        cr_skip_test("VARQ_CONV_WINOGRAD=0: no Winograd path");
    setenv("VARQ_CONV_WINOGRAD_CACHE_MB", "1", 1);
    static const struct wg_case wc[2] = {{1, 64, 24, 24, 64, {1, 1, 1, 1}, true, -1},
                                         {1, 64, 26, 23, 72, {1, 1, 1, 1}, false, -1}};
    vq_tensor *in[2][3];
    vq_attr at[2][5];
    struct conv_case cc[2]; /* the attributes point into these: alive until the end */
    struct wg_thread_arg arg[3] = {{.bad = 0}};
    for (int l = 0; l < 2; l++) {
        cc[l] = wg_conv_case(&wc[l]);
        int64_t os[4];
        conv_out_shape(&cc[l], os);
        vq__conv cv = vq__conv_of((int64_t[]){cc[l].n, cc[l].c, cc[l].h, cc[l].w},
                                  (int64_t[]){cc[l].m, cc[l].c, 3, 3}, 1, os, cc[l].stride,
                                  cc[l].pad, cc[l].dil);
        cr_assert(vq__winograd_fits(&cv, VQ_F32), "layer %d does not take Winograd", l);
        int nin = conv_inputs(&cc[l], VQ_F32, in[l]);
        int na = conv_attrs(&cc[l], at[l]);
        vq_tensor *want = oc_run1("conv2d", in[l], nin, at[l], na);
        for (int t = 0; t < 3; t++) {
            arg[t].in[l] = in[l];
            arg[t].nin[l] = nin;
            arg[t].at[l] = at[l];
            arg[t].na[l] = na;
            arg[t].want[l] = want;
        }
    }
    pthread_t th[3];
    for (int t = 0; t < 3; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, wg_thread, &arg[t]), 0);
    for (int t = 0; t < 3; t++) {
        pthread_join(th[t], NULL);
        cr_assert_eq(arg[t].bad, 0, "thread %d: %d results differ from the first call's", t,
                     arg[t].bad);
    }
    for (int l = 0; l < 2; l++) {
        vq_tensor_release(arg[0].want[l]);
        release_all(in[l], wc[l].bias ? 3 : 2);
    }
}

Test(ops_conv, conv2d_with_clip_gradients_match_finite_differences)
{
    static const struct conv_case cases[] = {
        {2, 2, 4, 4, 3, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, true},
        {2, 3, 4, 5, 6, 3, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, true},  /* depthwise, x2 */
        {2, 3, 3, 4, 2, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false}, /* 1x1 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t c = 0; c < 3; c++) {
            vq_tensor *in[3];
            int nin = conv_inputs(&cases[k], VQ_F64, in);
            vq_attr at[5];
            double err = oc_grad_check("conv2d", in, nin, 1, at,
                                       clip_attrs(&cases[k], clips[c], at), (1u << nin) - 1, &rng);
            cr_assert_leq(err, 1e-6, "case %zu, clip %zu", k, c);
            release_all(in, nin);
        }
}

Test(ops_conv, conv2d_clip_and_conv2d_grads_out_are_checked)
{
    struct conv_case cc = {1, 2, 4, 4, 3, 3, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false};
    vq_tensor *in[4];
    conv_inputs(&cc, VQ_F32, in);
    vq_attr at[6];
    int na = conv_attrs(&cc, at);
    static const double bad[][3] = {{1, 0}, {NAN, 1}, {0, 1, 2}};
    for (int i = 0; i < 3; i++) {
        at[na] = VQ_ATTR_FS("clip", bad[i], i == 2 ? 3 : 2);
        cr_assert_eq(oc_try("conv2d", in, 2, 1, at, na + 1), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "clip"), "%s", vq_errmsg());
    }
    /* conv2d_grad takes Out exactly when clip is given */
    int64_t os[4];
    conv_out_shape(&cc, os);
    in[2] = oc_rand(&rng, VQ_F32, 4, os, -1, 1);
    in[3] = oc_rand(&rng, VQ_F32, 4, os, -1, 1);
    at[na] = VQ_ATTR_I("wrt", 0);
    cr_assert_eq(oc_try("conv2d_grad", in, 4, 1, at, na + 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "Out (slot 3)"), "%s", vq_errmsg());
    static const double relu[2] = {0, INFINITY};
    at[na + 1] = VQ_ATTR_FS("clip", relu, 2);
    cr_assert_eq(oc_try("conv2d_grad", in, 3, 1, at, na + 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "Out (slot 3)"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("conv2d_grad", in, 4, 1, at, na + 2), 0, "%s", vq_errmsg());
    release_all(in, 4);
}

/* ---- conv_transpose2d ---- */

struct convt_case {
    int64_t n, c, h, w, mg, kh, kw, groups; /* X [n, c, h, w], W [c, mg, kh, kw] */
    int64_t stride[2], pad[4], dil[2], outpad[2];
    bool bias;
};

static const struct convt_case convt_cases[] = {
    {1, 2, 3, 3, 3, 3, 3, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, false},
    {2, 4, 4, 3, 2, 3, 3, 2, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 0}, true},  /* groups, stride */
    {1, 3, 5, 4, 2, 2, 3, 1, {2, 3}, {0, 1, 1, 0}, {1, 1}, {1, 2}, true},  /* output_padding */
    {2, 2, 4, 4, 1, 3, 3, 1, {1, 1}, {2, 2, 2, 2}, {2, 2}, {0, 0}, false}, /* dilation */
    {2, 6, 3, 3, 1, 3, 3, 6, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},  /* depthwise */
    {3, 4, 5, 5, 2, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, true},  /* 1x1: direct */
    {1, 1, 2, 2, 1, 4, 4, 1, {2, 2}, {1, 1, 1, 1}, {1, 1}, {0, 0}, false}, /* DCGAN's 2x up */
};
#define NCONVT (sizeof convt_cases / sizeof convt_cases[0])

static int convt_attrs(const struct convt_case *cc, vq_attr *at)
{
    at[0] = VQ_ATTR_IS("strides", cc->stride, 2);
    at[1] = VQ_ATTR_IS("pads", cc->pad, 4);
    at[2] = VQ_ATTR_IS("dilations", cc->dil, 2);
    at[3] = VQ_ATTR_I("groups", cc->groups);
    at[4] = VQ_ATTR_IS("output_padding", cc->outpad, 2);
    return 5;
}

static void convt_out_shape(const struct convt_case *cc, int64_t *os)
{
    os[0] = cc->n;
    os[1] = cc->mg * cc->groups;
    os[2] = cc->stride[0] * (cc->h - 1) + cc->outpad[0] + cc->dil[0] * (cc->kh - 1) + 1 -
            cc->pad[0] - cc->pad[2];
    os[3] = cc->stride[1] * (cc->w - 1) + cc->outpad[1] + cc->dil[1] * (cc->kw - 1) + 1 -
            cc->pad[1] - cc->pad[3];
}

/* ONNX's definition, the scatter way: each X element times each tap of its
 * channel's filters lands on Out at ih * stride - pad + i * dilation. */
static double *ref_convt(const struct convt_case *cc, vq_tensor *x, vq_tensor *w, vq_tensor *b)
{
    int64_t os[4];
    convt_out_shape(cc, os);
    int64_t cg = cc->c / cc->groups, plane = os[2] * os[3];
    double *out = calloc((size_t)(os[0] * os[1] * plane), sizeof *out);
    cr_assert(out);
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t c = 0; c < cc->c; c++)
            for (int64_t ih = 0; ih < cc->h; ih++)
                for (int64_t iw = 0; iw < cc->w; iw++) {
                    double xv = oc_get(x, ((n * cc->c + c) * cc->h + ih) * cc->w + iw);
                    for (int64_t m = 0; m < cc->mg; m++)
                        for (int64_t i = 0; i < cc->kh; i++)
                            for (int64_t j = 0; j < cc->kw; j++) {
                                int64_t oh = ih * cc->stride[0] - cc->pad[0] + i * cc->dil[0];
                                int64_t ow = iw * cc->stride[1] - cc->pad[1] + j * cc->dil[1];
                                if (oh < 0 || oh >= os[2] || ow < 0 || ow >= os[3])
                                    continue;
                                int64_t oc = c / cg * cc->mg + m;
                                out[(n * os[1] + oc) * plane + oh * os[3] + ow] +=
                                    xv * oc_get(w, ((c * cc->mg + m) * cc->kh + i) * cc->kw + j);
                            }
                }
    for (int64_t i = 0; b && i < os[0] * os[1] * plane; i++)
        out[i] += oc_get(b, i / plane % os[1]);
    return out;
}

static int convt_inputs(const struct convt_case *cc, vq_dtype dt, vq_tensor **in)
{
    in[0] = oc_rand(&rng, dt, 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w}, -1, 1);
    in[1] = oc_rand(&rng, dt, 4, (int64_t[]){cc->c, cc->mg, cc->kh, cc->kw}, -1, 1);
    if (!cc->bias)
        return 2;
    int64_t m = cc->mg * cc->groups;
    in[2] = oc_rand(&rng, dt, 1, &m, -1, 1);
    return 3;
}

Test(ops_conv, conv_transpose2d_matches_onnxs_scatter_definition)
{
    for (size_t k = 0; k < NCONVT; k++)
        for (int d = 0; d < 2; d++) {
            const struct convt_case *cc = &convt_cases[k];
            vq_tensor *in[3];
            int nin = convt_inputs(cc, floats[d], in);
            vq_attr at[5];
            vq_tensor *o = oc_run1("conv_transpose2d", in, nin, at, convt_attrs(cc, at));
            int64_t os[4];
            convt_out_shape(cc, os);
            double *want = ref_convt(cc, in[0], in[1], cc->bias ? in[2] : NULL);
            oc_assert_close(o, 4, os, want, tol(floats[d]), tol(floats[d]));
            free(want);
            vq_tensor_release(o);
            release_all(in, nin);
        }
}

Test(ops_conv, conv_transpose2d_gradients_match_finite_differences)
{
    for (size_t k = 0; k < NCONVT; k++) {
        vq_tensor *in[3];
        int nin = convt_inputs(&convt_cases[k], VQ_F64, in);
        vq_attr at[5];
        double err = oc_grad_check("conv_transpose2d", in, nin, 1, at,
                                   convt_attrs(&convt_cases[k], at), (1u << nin) - 1, &rng);
        cr_assert_leq(err, 1e-6, "case %zu: %g", k, err);
        release_all(in, nin);
    }
}

Test(ops_conv, conv_transpose2d_refuses_what_does_not_fit)
{
    vq_tensor *x = oc_rand(&rng, VQ_F32, 4, (int64_t[]){1, 4, 3, 3}, -1, 1);
    vq_tensor *w = oc_rand(&rng, VQ_F32, 4, (int64_t[]){4, 2, 3, 3}, -1, 1);
    vq_tensor *w3 = oc_rand(&rng, VQ_F32, 4, (int64_t[]){3, 2, 3, 3}, -1, 1);
    vq_tensor *b = oc_rand(&rng, VQ_F32, 1, (int64_t[]){5}, -1, 1);
    vq_tensor *in[3] = {x, w, b};
    int64_t s2[2] = {2, 2}, op2[2] = {2, 0}, op1[2] = {1, 0}, bigpad[4] = {4, 4, 4, 4};
    vq_attr bad_op[2] = {VQ_ATTR_IS("strides", s2, 2), VQ_ATTR_IS("output_padding", op2, 2)};
    cr_assert_eq(oc_try("conv_transpose2d", in, 2, 1, bad_op, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "output_padding"), "%s", vq_errmsg());
    vq_attr op_no_stride = VQ_ATTR_IS("output_padding", op1, 2);
    cr_assert_eq(oc_try("conv_transpose2d", in, 2, 1, &op_no_stride, 1), VQ_EINVAL);
    vq_attr g3 = VQ_ATTR_I("groups", 3);
    cr_assert_eq(oc_try("conv_transpose2d", in, 2, 1, &g3, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "groups"), "%s", vq_errmsg());
    vq_tensor *mism[2] = {x, w3};
    cr_assert_eq(oc_try("conv_transpose2d", mism, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input W"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("conv_transpose2d", in, 3, 1, NULL, 0), VQ_EINVAL); /* B is [5], M 2 */
    cr_assert(strstr(vq_errmsg(), "B"), "%s", vq_errmsg());
    vq_attr pads = VQ_ATTR_IS("pads", bigpad, 4);
    cr_assert_eq(oc_try("conv_transpose2d", in, 2, 1, &pads, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "output height"), "%s", vq_errmsg());
    vq_tensor *all[] = {x, w, w3, b};
    release_all(all, 4);
}

/* conv2d_grad in f32 against the same op in f64 on the same values. */
Test(ops_conv, conv2d_grad_in_f32_matches_f64)
{
    for (size_t k = 0; k < NCONV; k++) {
        const struct conv_case *cc = &conv_cases[k];
        vq_tensor *in64[3], *in32[3];
        int nin = conv_inputs(cc, VQ_F64, in64);
        (void)nin;
        int64_t os[4];
        conv_out_shape(cc, os);
        vq_tensor *g64 = oc_rand(&rng, VQ_F64, 4, os, -1, 1);
        vq_tensor *a64[3] = {in64[0], in64[1], g64};
        vq_attr c32[1] = {VQ_ATTR_S("dtype", "f32")};
        for (int i = 0; i < 3; i++)
            in32[i] = oc_run1("cast", &a64[i], 1, c32, 1);
        for (int wrt = 0; wrt < 3; wrt++) {
            vq_attr at[5];
            int nat = conv_attrs(cc, at);
            at[nat++] = VQ_ATTR_I("wrt", wrt);
            vq_tensor *want = oc_run1("conv2d_grad", a64, 3, at, nat);
            vq_tensor *got = oc_run1("conv2d_grad", in32, 3, at, nat);
            int64_t n = vq_tensor_numel(want);
            double *w = malloc((size_t)n * sizeof *w);
            for (int64_t i = 0; i < n; i++)
                w[i] = oc_get(want, i);
            oc_assert_close(got, vq_tensor_ndim(want), vq_tensor_shape(want), w, 1e-4, 1e-4);
            free(w);
            vq_tensor_release(want);
            vq_tensor_release(got);
        }
        release_all(in32, 3);
        release_all(in64, cc->bias ? 3 : 2);
        vq_tensor_release(g64);
    }
}

Test(ops_conv, conv2d_bias_gradient_is_the_sum_of_dout_over_images_and_plane)
{
    struct conv_case cc = {3, 2, 4, 4, 3, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, true};
    vq_tensor *in[3];
    int nin = conv_inputs(&cc, VQ_F64, in);
    int64_t os[4];
    conv_out_shape(&cc, os);
    vq_tensor *g = oc_rand(&rng, VQ_F64, 4, os, -1, 1);
    vq_attr at[5];
    int nat = conv_attrs(&cc, at);
    at[nat++] = VQ_ATTR_I("wrt", 2);
    vq_tensor *gin[3] = {in[0], in[1], g};
    vq_tensor *db = oc_run1("conv2d_grad", gin, 3, at, nat);
    double want[3] = {0};
    int64_t plane = os[2] * os[3];
    for (int64_t i = 0; i < vq_tensor_numel(g); i++)
        want[(i / plane) % 3] += oc_get(g, i);
    oc_assert_close(db, 1, (int64_t[]){3}, want, 1e-12, 1e-12);
    vq_tensor_release(db);
    vq_tensor_release(g);
    release_all(in, nin);
}

/* ---- pools ---- */

struct pool_case {
    int64_t n, c, h, w, kh, kw;
    int64_t stride[2], pad[4], dil[2];
    bool ceil_mode, include_pad;
};

static const struct pool_case pool_cases[] = {
    {1, 2, 6, 6, 2, 2, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, false},
    {2, 3, 7, 7, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false}, /* ResNet's max pool */
    {2, 2, 7, 6, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, true},
    {1, 2, 6, 7, 3, 2, {2, 2}, {0, 1, 2, 0}, {1, 1}, true, false},  /* asymmetric, ceil */
    {2, 1, 8, 8, 3, 3, {3, 3}, {1, 1, 0, 0}, {1, 1}, true, true},   /* ceil: last clipped */
    {1, 3, 5, 5, 3, 3, {1, 1}, {2, 2, 2, 2}, {1, 1}, false, true},  /* stride 1 */
    {2, 2, 9, 8, 2, 3, {2, 1}, {1, 0, 0, 2}, {1, 1}, true, true},
    {1, 1, 3, 3, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
};
#define NPOOL (sizeof pool_cases / sizeof pool_cases[0])

/* Dilated cases for max_pool2d (avg_pool2d has no dilation). */
static const struct pool_case dilated_cases[] = {
    {2, 2, 9, 9, 3, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}, false, false},
    {1, 2, 8, 9, 2, 3, {2, 2}, {1, 0, 1, 3}, {3, 2}, true, false},
};

static int pool_attrs(const struct pool_case *pc, bool max, vq_attr *at)
{
    static int64_t kernel[2];
    kernel[0] = pc->kh;
    kernel[1] = pc->kw;
    at[0] = VQ_ATTR_IS("kernel", kernel, 2);
    at[1] = VQ_ATTR_IS("strides", pc->stride, 2);
    at[2] = VQ_ATTR_IS("pads", pc->pad, 4);
    at[3] = VQ_ATTR_B("ceil_mode", pc->ceil_mode);
    at[4] = max ? VQ_ATTR_IS("dilations", pc->dil, 2)
                : VQ_ATTR_B("count_include_pad", pc->include_pad);
    return 5;
}

static void pool_out_shape(const struct pool_case *pc, int64_t *os)
{
    os[0] = pc->n;
    os[1] = pc->c;
    os[2] = out_size(pc->h, pc->pad[0], pc->pad[2], pc->kh, pc->stride[0], pc->dil[0],
                     pc->ceil_mode);
    os[3] = out_size(pc->w, pc->pad[1], pc->pad[3], pc->kw, pc->stride[1], pc->dil[1],
                     pc->ceil_mode);
}

/* Max (first maximum; -inf for a window wholly in the padding) or average
 * of each window, in double; the divisor counts the taps on the input, or
 * with include_pad those inside the padded input. */
static double *ref_pool(const struct pool_case *pc, bool max, vq_tensor *x)
{
    int64_t os[4];
    pool_out_shape(pc, os);
    double *out = calloc((size_t)(os[0] * os[1] * os[2] * os[3]), sizeof *out);
    cr_assert(out);
    int64_t dh = max ? pc->dil[0] : 1, dw = max ? pc->dil[1] : 1;
    for (int64_t p = 0; p < os[0] * os[1]; p++)
        for (int64_t oh = 0; oh < os[2]; oh++)
            for (int64_t ow = 0; ow < os[3]; ow++) {
                double best = -INFINITY, sum = 0;
                int64_t count = 0;
                for (int64_t i = 0; i < pc->kh; i++)
                    for (int64_t j = 0; j < pc->kw; j++) {
                        int64_t ih = oh * pc->stride[0] - pc->pad[0] + i * dh;
                        int64_t iw = ow * pc->stride[1] - pc->pad[1] + j * dw;
                        bool on_input = ih >= 0 && ih < pc->h && iw >= 0 && iw < pc->w;
                        bool in_pads = ih >= -pc->pad[0] && ih < pc->h + pc->pad[2] &&
                                       iw >= -pc->pad[1] && iw < pc->w + pc->pad[3];
                        if (on_input) {
                            double v = oc_get(x, (p * pc->h + ih) * pc->w + iw);
                            best = fmax(best, v);
                            sum += v;
                        }
                        count += pc->include_pad ? in_pads : on_input;
                    }
                out[(p * os[2] + oh) * os[3] + ow] = max ? best : sum / (double)count;
            }
    return out;
}

static void check_pool(const struct pool_case *pc, bool max)
{
    for (int d = 0; d < 2; d++) {
        vq_tensor *x = oc_rand(&rng, floats[d], 4, (int64_t[]){pc->n, pc->c, pc->h, pc->w},
                               -1, 1);
        vq_attr at[5];
        vq_tensor *o = oc_run1(max ? "max_pool2d" : "avg_pool2d", &x, 1, at,
                               pool_attrs(pc, max, at));
        int64_t os[4];
        pool_out_shape(pc, os);
        double *want = ref_pool(pc, max, x);
        oc_assert_close(o, 4, os, want, tol(floats[d]), tol(floats[d]));
        free(want);
        vq_tensor_release(o);
        vq_tensor_release(x);
    }
}

Test(ops_conv, max_pool2d_matches_the_plain_loop)
{
    for (size_t k = 0; k < NPOOL; k++)
        check_pool(&pool_cases[k], true);
    for (size_t k = 0; k < sizeof dilated_cases / sizeof dilated_cases[0]; k++)
        check_pool(&dilated_cases[k], true);
}

Test(ops_conv, avg_pool2d_matches_the_plain_loop)
{
    for (size_t k = 0; k < NPOOL; k++)
        check_pool(&pool_cases[k], false);
}

Test(ops_conv, ceil_mode_adds_a_clipped_window_but_none_that_starts_in_the_trailing_pad)
{
    /* 5 wide, kernel 2, stride 2: floor gives 2 windows, ceil 3 (the last
     * holds one input column). With pads 1 and 1, ceil's formula gives 4,
     * but the 4th would start in the trailing pad: 3. */
    vq_tensor *x = oc_from(VQ_F64, 4, (int64_t[]){1, 1, 1, 5}, (double[]){1, 2, 3, 4, 5});
    int64_t k[2] = {1, 2}, s[2] = {1, 2}, p0[4] = {0, 0, 0, 0}, p1[4] = {0, 1, 0, 1};
    vq_attr at[4] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", s, 2),
                     VQ_ATTR_IS("pads", p0, 4), VQ_ATTR_B("ceil_mode", false)};
    vq_tensor *o = oc_run1("avg_pool2d", &x, 1, at, 4);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 1, 2}, (double[]){1.5, 3.5}, 0, 0);
    vq_tensor_release(o);
    at[3] = VQ_ATTR_B("ceil_mode", true);
    o = oc_run1("avg_pool2d", &x, 1, at, 4);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 1, 3}, (double[]){1.5, 3.5, 5}, 0, 0);
    vq_tensor_release(o);
    o = oc_run1("max_pool2d", &x, 1, at, 4);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 1, 3}, (double[]){2, 4, 5}, 0, 0);
    vq_tensor_release(o);
    at[2] = VQ_ATTR_IS("pads", p1, 4);
    o = oc_run1("max_pool2d", &x, 1, at, 4);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 1, 3}, (double[]){1, 3, 5}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_conv, count_include_pad_divides_by_the_whole_padded_window)
{
    vq_tensor *x = oc_from(VQ_F32, 4, (int64_t[]){1, 1, 2, 2}, (double[]){1, 2, 3, 4});
    int64_t k[2] = {2, 2}, s[2] = {1, 1}, p[4] = {1, 1, 0, 0};
    vq_attr at[4] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", s, 2),
                     VQ_ATTR_IS("pads", p, 4), VQ_ATTR_B("count_include_pad", false)};
    vq_tensor *o = oc_run1("avg_pool2d", &x, 1, at, 4);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 2, 2}, (double[]){1, 1.5, 2, 2.5}, 1e-7, 0);
    vq_tensor_release(o);
    at[3] = VQ_ATTR_B("count_include_pad", true);
    o = oc_run1("avg_pool2d", &x, 1, at, 4);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 2, 2}, (double[]){0.25, 0.75, 1, 2.5}, 1e-7, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

/* ONNX MaxPool's Indices: the flat index over the whole input of each
 * window's first maximum, row-major or (storage_order 1) column-major in
 * the plane. */
Test(ops_conv, max_pool2d_argmax_gives_each_maximums_flat_index)
{
    /* two images, one channel, 3x4; windows 2x2, stride 2 (pad to 4x4) */
    static const double xv[2 * 12] = {1, 5, 2, 2, /**/ 0, 3, 9, 1, /**/ 4, 4, 7, 8,
                                      6, 1, 0, 2, /**/ 6, 0, 3, 3, /**/ 1, 2, 9, 5};
    vq_tensor *x = oc_from(VQ_F32, 4, (int64_t[]){2, 1, 3, 4}, xv);
    int64_t k[2] = {2, 2}, st[2] = {2, 2}, pad[4] = {0, 0, 1, 0};
    for (int order = 0; order < 2; order++) {
        vq_attr at[4] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", st, 2),
                         VQ_ATTR_IS("pads", pad, 4), VQ_ATTR_I("storage_order", order)};
        vq_tensor *o = oc_run1("max_pool2d_argmax", &x, 1, at, 4);
        cr_assert_eq(vq_tensor_dtype(o), VQ_I64);
        /* maxima: image 0 at (0,1) (1,2) (2,0), the first of a tie, (2,3);
         * image 1 at (0,0) (1,2) (2,1) (2,2): (h, w) -> h*4+w or w*3+h */
        static const int64_t hw[8][3] = {{0, 0, 1}, {0, 1, 2}, {0, 2, 0}, {0, 2, 3},
                                         {1, 0, 0}, {1, 1, 2}, {1, 2, 1}, {1, 2, 2}};
        const int64_t *got = vq_tensor_data(o);
        for (int i = 0; i < 8; i++) {
            int64_t want =
                hw[i][0] * 12 + (order ? hw[i][2] * 3 + hw[i][1] : hw[i][1] * 4 + hw[i][2]);
            cr_assert_eq(got[i], want, "storage_order %d, output %d: %lld, want %lld", order, i,
                         (long long)got[i], (long long)want);
        }
        vq_tensor_release(o);
    }
    vq_attr bad[2] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_I("storage_order", 2)};
    cr_assert_eq(oc_try("max_pool2d_argmax", &x, 1, 1, bad, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "storage_order"), "%s", vq_errmsg());
    vq_tensor_release(x);
}

Test(ops_conv, max_pool2d_keeps_nan_and_routes_ties_to_the_first_maximum)
{
    vq_tensor *x = oc_from(VQ_F64, 4, (int64_t[]){1, 1, 2, 4},
                           (double[]){3, 1, NAN, 2, 3, 0, 5, 5});
    int64_t k[2] = {2, 2}, s[2] = {2, 2};
    vq_attr at[2] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", s, 2)};
    vq_tensor *o = oc_run1("max_pool2d", &x, 1, at, 2);
    oc_assert_close(o, 4, (int64_t[]){1, 1, 1, 2}, (double[]){3, NAN}, 0, 0);
    vq_tensor *g = oc_from(VQ_F64, 4, (int64_t[]){1, 1, 1, 2}, (double[]){10, 20});
    vq_tensor *gin[2] = {x, g};
    vq_tensor *dx = oc_run1("max_pool2d_grad", gin, 2, at, 2);
    oc_assert_close(dx, 4, (int64_t[]){1, 1, 2, 4}, (double[]){10, 0, 20, 0, 0, 0, 0, 0}, 0, 0);
    vq_tensor_release(dx);
    vq_tensor_release(g);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

/* Element i of a pool test's input: few levels so that windows tie, +0
 * and -0 (equal, but told apart by their bits), -inf, and NaNs of distinct
 * payloads (so that which NaN an output holds shows). */
static void pool_fill(vq_tensor *x, uint64_t *r)
{
    int64_t n = vq_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = oc_next(r) % 16;
        double v = k < 5     ? (double)k - 2.0
                   : k < 8   ? 0.0
                   : k < 10  ? -0.0
                   : k == 10 ? -INFINITY
                             : 0.5;
        bool nan = k == 15 && oc_next(r) % 4 == 0;
        if (vq_tensor_dtype(x) == VQ_F32) {
            float *d = vq_tensor_data(x);
            uint32_t bits = 0x7fc00000u | (uint32_t)(i & 0xffff);
            if (nan)
                memcpy(&d[i], &bits, sizeof bits);
            else
                d[i] = (float)v;
        } else {
            double *d = vq_tensor_data(x);
            uint64_t bits = 0x7ff8000000000000ull | (uint64_t)i;
            if (nan)
                memcpy(&d[i], &bits, sizeof bits);
            else
                d[i] = v;
        }
    }
}

/* The value of the window of output q (plane p, row oh, column ow) the plain
 * way, as the loop before the row-wise kernel: the first maximum in
 * row-major order, a NaN beating any number and the first NaN staying;
 * -inf when every tap is padding. */
static void plain_max(const struct pool_case *pc, vq_tensor *x, int64_t p, int64_t oh, int64_t ow,
                      void *out)
{
    bool f32 = vq_tensor_dtype(x) == VQ_F32;
    const char *data = vq_tensor_data(x);
    size_t es = f32 ? 4 : 8;
    int64_t best = -1;
    double bv = 0;
    for (int64_t i = 0; i < pc->kh; i++)
        for (int64_t j = 0; j < pc->kw; j++) {
            int64_t ih = oh * pc->stride[0] - pc->pad[0] + i * pc->dil[0];
            int64_t iw = ow * pc->stride[1] - pc->pad[1] + j * pc->dil[1];
            if (ih < 0 || ih >= pc->h || iw < 0 || iw >= pc->w)
                continue;
            int64_t at = (p * pc->h + ih) * pc->w + iw;
            double v = oc_get(x, at);
            if (best < 0 || v > bv || (isnan(v) && !isnan(bv))) {
                best = at;
                bv = v;
            }
        }
    if (best >= 0)
        memcpy(out, data + (size_t)best * es, es);
    else if (f32)
        *(float *)out = -INFINITY;
    else
        *(double *)out = -INFINITY;
}

/* max_pool2d's output for pc, bit for bit against plain_max's, f32 and
 * f64, on an input from pool_fill. */
static void check_rowwise(const struct pool_case *pc)
{
    int64_t os[4];
    pool_out_shape(pc, os);
    for (int dt = 0; dt < 2; dt++) {
        vq_tensor *x = oc_rand(&rng, floats[dt], 4, (int64_t[]){pc->n, pc->c, pc->h, pc->w}, -1, 1);
        pool_fill(x, &rng);
        vq_attr at[5];
        vq_tensor *o = oc_run1("max_pool2d", &x, 1, at, pool_attrs(pc, true, at));
        const char *got = vq_tensor_data(o);
        size_t es = dt ? 8 : 4;
        for (int64_t q = 0; q < vq_tensor_numel(o); q++) {
            char want[8];
            plain_max(pc, x, q / (os[2] * os[3]), q / os[3] % os[2], q % os[3], want);
            cr_assert(!memcmp(got + (size_t)q * es, want, es),
                      "%s %lldx%lld, kernel %lldx%lld, strides %lld,%lld, dilations %lld,%lld, "
                      "pads %lld %lld %lld %lld, ceil %d: output %lld differs",
                      dt ? "f64" : "f32", (long long)pc->h, (long long)pc->w, (long long)pc->kh,
                      (long long)pc->kw, (long long)pc->stride[0], (long long)pc->stride[1],
                      (long long)pc->dil[0], (long long)pc->dil[1], (long long)pc->pad[0],
                      (long long)pc->pad[1], (long long)pc->pad[2], (long long)pc->pad[3],
                      pc->ceil_mode, (long long)q);
        }
        vq_tensor_release(o);
        vq_tensor_release(x);
    }
}

/* The kernel folds each window row by row, the interior columns by SSE
 * (f32, strides 1 and 2) and the border columns with bounds checks: its
 * outputs, bit for bit, against the plain loop's, over widths that leave
 * 0 to 3 columns after the vector steps, kernels 2 and 3 (and 3 by 2, 2 by
 * 3), strides 1 to 3, column dilations 1 and 2, symmetric and asymmetric
 * pads, and ceil_mode; the shapes the op refuses (a pad not smaller than
 * the window, no output) are left out. */
Test(ops_conv, max_pool2d_rowwise_kernel_matches_the_plain_loop_bit_for_bit)
{
    static const int64_t widths[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 19, 24, 31, 112};
    int checked = 0;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (int64_t k = 2; k <= 3; k++)
            for (int64_t s = 1; s <= 3; s++)
                for (int64_t d = 1; d <= 2; d++)
                    for (int64_t pad = 0; pad < k; pad++)
                        for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++) {
                            int64_t h = 2 + (int64_t)(wi % 5), w = widths[wi];
                            int64_t kh = k + 1 - (int64_t)(wi % 2), span = (k - 1) * d + 1;
                            struct pool_case pc = {.n = 2,
                                                   .c = 3,
                                                   .h = h,
                                                   .w = w,
                                                   .kh = kh,
                                                   .kw = k,
                                                   .stride = {1 + (s + 1) % 2, s},
                                                   .pad = {pad, pad, k - 1 - pad, pad / 2},
                                                   .dil = {1, d},
                                                   .ceil_mode = ceil_mode};
                            if (h + k - 1 < kh || w + pad + pad / 2 < span || pad >= span)
                                continue;
                            check_rowwise(&pc);
                            checked++;
                        }
    cr_assert_gt(checked, 400, "only %d shapes checked", checked);
}

Test(ops_conv, pool_gradients_match_finite_differences)
{
    for (int max = 0; max < 2; max++)
        for (size_t k = 0; k < NPOOL + 2; k++) {
            const struct pool_case *pc = k < NPOOL ? &pool_cases[k] : &dilated_cases[k - NPOOL];
            if (k >= NPOOL && !max)
                continue;
            vq_tensor *x = oc_rand(&rng, VQ_F64, 4, (int64_t[]){pc->n, pc->c, pc->h, pc->w},
                                   -1, 1);
            vq_attr at[5];
            double err = oc_grad_check(max ? "max_pool2d" : "avg_pool2d", &x, 1, 1, at,
                                       pool_attrs(pc, max, at), 1, &rng);
            cr_assert_leq(err, 1e-6, "case %zu", k);
            vq_tensor_release(x);
        }
}

Test(ops_conv, pool_gradients_in_f32_match_f64)
{
    vq_attr c32 = VQ_ATTR_S("dtype", "f32");
    for (int max = 0; max < 2; max++)
        for (size_t k = 0; k < NPOOL; k++) {
            const struct pool_case *pc = &pool_cases[k];
            int64_t os[4];
            pool_out_shape(pc, os);
            vq_tensor *in64[2] = {oc_rand(&rng, VQ_F64, 4,
                                          (int64_t[]){pc->n, pc->c, pc->h, pc->w}, -1, 1),
                                  oc_rand(&rng, VQ_F64, 4, os, -1, 1)};
            vq_tensor *in32[2] = {oc_run1("cast", &in64[0], 1, &c32, 1),
                                  oc_run1("cast", &in64[1], 1, &c32, 1)};
            /* f32 rounding must not change which element is the maximum */
            for (int64_t i = 0; i < vq_tensor_numel(in64[0]); i++)
                oc_set(in64[0], i, oc_get(in32[0], i));
            vq_attr at[5];
            int nat = pool_attrs(pc, max, at);
            const char *type = max ? "max_pool2d_grad" : "avg_pool2d_grad";
            vq_tensor *want = oc_run1(type, in64, 2, at, nat);
            vq_tensor *got = oc_run1(type, in32, 2, at, nat);
            double *w = malloc((size_t)vq_tensor_numel(want) * sizeof *w);
            for (int64_t i = 0; i < vq_tensor_numel(want); i++)
                w[i] = oc_get(want, i);
            oc_assert_close(got, 4, vq_tensor_shape(want), w, 1e-5, 1e-6);
            free(w);
            vq_tensor *all[] = {want, got, in64[0], in64[1], in32[0], in32[1]};
            release_all(all, 6);
        }
}

/* ---- global_avg_pool ---- */

Test(ops_conv, global_avg_pool_is_the_mean_over_every_dim_after_the_channels)
{
    static const struct {
        int ndim;
        int64_t d[5];
    } shapes[] = {{3, {2, 3, 5}}, {4, {2, 3, 4, 5}}, {5, {1, 2, 3, 2, 2}}, {4, {1, 2, 1, 1}}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *x = oc_rand(&rng, floats[d], shapes[s].ndim, shapes[s].d, -1, 1);
            vq_tensor *o = oc_run1("global_avg_pool", &x, 1, NULL, 0);
            int64_t os[5], planes = shapes[s].d[0] * shapes[s].d[1];
            int64_t len = vq_tensor_numel(x) / planes;
            for (int i = 0; i < shapes[s].ndim; i++)
                os[i] = i < 2 ? shapes[s].d[i] : 1;
            double want[8];
            for (int64_t p = 0; p < planes; p++) {
                want[p] = 0;
                for (int64_t i = 0; i < len; i++)
                    want[p] += oc_get(x, p * len + i);
                want[p] /= (double)len;
            }
            oc_assert_close(o, shapes[s].ndim, os, want, tol(floats[d]), tol(floats[d]));
            if (floats[d] == VQ_F64) {
                double err = oc_grad_check("global_avg_pool", &x, 1, 1, NULL, 0, 1, &rng);
                cr_assert_leq(err, 1e-6);
            }
            vq_tensor_release(o);
            vq_tensor_release(x);
        }
}

Test(ops_conv, global_avg_pool_of_an_empty_plane_is_nan)
{
    vq_tensor *x = oc_rand(&rng, VQ_F32, 4, (int64_t[]){1, 2, 0, 3}, -1, 1);
    vq_tensor *o = oc_run1("global_avg_pool", &x, 1, NULL, 0);
    oc_assert_close(o, 4, (int64_t[]){1, 2, 1, 1}, (double[]){NAN, NAN}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

/* ---- batch_norm ---- */

/* X, Scale, Bias, Mean and Var (positive) for X of the given shape. */
static void bn_inputs(vq_dtype dt, int ndim, const int64_t *shape, vq_tensor **in)
{
    in[0] = oc_rand(&rng, dt, ndim, shape, -2, 2);
    in[1] = oc_rand(&rng, dt, 1, &shape[1], 0.5, 1.5);
    in[2] = oc_rand(&rng, dt, 1, &shape[1], -1, 1);
    in[3] = oc_rand(&rng, dt, 1, &shape[1], -0.5, 0.5);
    in[4] = oc_rand(&rng, dt, 1, &shape[1], 0.5, 2);
}

static const struct {
    int ndim;
    int64_t d[4];
} bn_shapes[] = {{2, {5, 3}}, {3, {2, 4, 3}}, {4, {2, 3, 4, 5}}, {4, {1, 2, 1, 1}}};
#define NBN (sizeof bn_shapes / sizeof bn_shapes[0])

Test(ops_conv, batch_norm_matches_the_formula_per_channel)
{
    for (size_t s = 0; s < NBN; s++)
        for (int d = 0; d < 2; d++)
            for (int e = 0; e < 2; e++) {
                vq_tensor *in[5];
                bn_inputs(floats[d], bn_shapes[s].ndim, bn_shapes[s].d, in);
                double eps = e ? 1e-3 : 1e-5;
                vq_attr at = VQ_ATTR_F("epsilon", eps);
                vq_tensor *o = oc_run1("batch_norm", in, 5, &at, e);
                int64_t n = vq_tensor_numel(in[0]), c = bn_shapes[s].d[1];
                int64_t inner = n / bn_shapes[s].d[0] / c;
                double *want = malloc((size_t)n * sizeof *want);
                for (int64_t i = 0; i < n; i++) {
                    int64_t ch = (i / inner) % c;
                    want[i] = (oc_get(in[0], i) - oc_get(in[3], ch)) /
                                  sqrt(oc_get(in[4], ch) + eps) * oc_get(in[1], ch) +
                              oc_get(in[2], ch);
                }
                oc_assert_close(o, bn_shapes[s].ndim, bn_shapes[s].d, want, tol(floats[d]),
                                tol(floats[d]));
                free(want);
                vq_tensor_release(o);
                release_all(in, 5);
            }
}

Test(ops_conv, batch_norm_runs_in_place)
{
    vq_tensor *in[5];
    bn_inputs(VQ_F32, 4, bn_shapes[2].d, in);
    vq_tensor *want = oc_run1("batch_norm", in, 5, NULL, 0);
    vq_tensor *out = in[0];
    cr_assert_eq(vq_op_run(NULL, "batch_norm", in, 5, &out, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(memcmp(vq_tensor_data(in[0]), vq_tensor_data(want), vq_tensor_nbytes(want)), 0);
    vq_tensor_release(want);
    release_all(in, 5);
}

Test(ops_conv, batch_norm_gradients_match_finite_differences)
{
    for (size_t s = 0; s < NBN; s++) {
        vq_tensor *in[5];
        bn_inputs(VQ_F64, bn_shapes[s].ndim, bn_shapes[s].d, in);
        vq_attr at = VQ_ATTR_F("epsilon", 1e-3);
        /* X, Scale, Bias: the running statistics get no gradient */
        double err = oc_grad_check("batch_norm", in, 5, 1, &at, 1, 0x07, &rng);
        cr_assert_leq(err, 1e-6, "shape %zu", s);
        release_all(in, 5);
    }
}

Test(ops_conv, batch_norm_grad_in_f32_matches_f64)
{
    vq_attr c32 = VQ_ATTR_S("dtype", "f32");
    vq_tensor *in[5], *g, *a64[5], *a32[5];
    bn_inputs(VQ_F64, 4, bn_shapes[2].d, in);
    g = oc_rand(&rng, VQ_F64, 4, bn_shapes[2].d, -1, 1);
    vq_tensor *order[5] = {in[0], in[1], in[3], in[4], g}; /* X, Scale, Mean, Var, dOut */
    for (int i = 0; i < 5; i++) {
        a32[i] = oc_run1("cast", &order[i], 1, &c32, 1);
        a64[i] = order[i];
    }
    for (int wrt = 0; wrt < 5; wrt++) {
        vq_attr at = VQ_ATTR_I("wrt", wrt);
        vq_tensor *want = oc_run1("batch_norm_grad", a64, 5, &at, 1);
        vq_tensor *got = oc_run1("batch_norm_grad", a32, 5, &at, 1);
        double w[128];
        cr_assert_leq(vq_tensor_numel(want), 128);
        for (int64_t i = 0; i < vq_tensor_numel(want); i++)
            w[i] = oc_get(want, i);
        oc_assert_close(got, vq_tensor_ndim(want), vq_tensor_shape(want), w, 1e-5, 1e-5);
        vq_tensor_release(want);
        vq_tensor_release(got);
    }
    release_all(a32, 5);
    release_all(in, 5);
    vq_tensor_release(g);
}

/* ---- batch_norm_train ---- */

Test(ops_conv, batch_norm_train_normalizes_with_batch_statistics_and_moves_the_running_ones)
{
    for (size_t s = 0; s < NBN; s++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *in[5], *out[3] = {NULL};
            bn_inputs(floats[d], bn_shapes[s].ndim, bn_shapes[s].d, in);
            double eps = 1e-3, mom = 0.7;
            vq_attr at[2] = {VQ_ATTR_F("epsilon", eps), VQ_ATTR_F("momentum", mom)};
            oc_run("batch_norm_train", in, 5, out, 3, at, 2);
            int64_t n = vq_tensor_numel(in[0]), c = bn_shapes[s].d[1];
            int64_t inner = n / bn_shapes[s].d[0] / c, m = n / c;
            double *want = malloc((size_t)n * sizeof *want), mu[8] = {0}, var[8] = {0};
            double nm[8], nv[8];
            for (int64_t i = 0; i < n; i++)
                mu[(i / inner) % c] += oc_get(in[0], i) / (double)m;
            for (int64_t i = 0; i < n; i++) {
                double dx = oc_get(in[0], i) - mu[(i / inner) % c];
                var[(i / inner) % c] += dx * dx / (double)m;
            }
            for (int64_t i = 0; i < n; i++) {
                int64_t ch = (i / inner) % c;
                want[i] = (oc_get(in[0], i) - mu[ch]) / sqrt(var[ch] + eps) * oc_get(in[1], ch) +
                          oc_get(in[2], ch);
            }
            for (int64_t ch = 0; ch < c; ch++) {
                nm[ch] = oc_get(in[3], ch) * mom + mu[ch] * (1 - mom);
                nv[ch] = oc_get(in[4], ch) * mom + var[ch] * (1 - mom);
            }
            double t = tol(floats[d]);
            oc_assert_close(out[0], bn_shapes[s].ndim, bn_shapes[s].d, want, t, t);
            oc_assert_close(out[1], 1, &c, nm, t, t);
            oc_assert_close(out[2], 1, &c, nv, t, t);
            free(want);
            release_all(out, 3);
            release_all(in, 5);
        }
}

Test(ops_conv, batch_norm_train_runs_in_place_on_x_and_the_running_statistics)
{
    vq_tensor *in[5], *want[3] = {NULL};
    bn_inputs(VQ_F32, 4, bn_shapes[2].d, in);
    oc_run("batch_norm_train", in, 5, want, 3, NULL, 0);
    vq_tensor *out[3] = {in[0], in[3], in[4]};
    cr_assert_eq(vq_op_run(NULL, "batch_norm_train", in, 5, out, 3, NULL, 0), 0, "%s", vq_errmsg());
    for (int j = 0; j < 3; j++)
        cr_assert_eq(memcmp(vq_tensor_data(out[j]), vq_tensor_data(want[j]),
                            vq_tensor_nbytes(want[j])),
                     0, "output %d", j);
    release_all(want, 3);
    release_all(in, 5);
}

Test(ops_conv, batch_norm_train_default_momentum_is_onnxs_0_9)
{
    vq_tensor *in[5], *out[3] = {NULL};
    bn_inputs(VQ_F64, 2, bn_shapes[0].d, in);
    oc_run("batch_norm_train", in, 5, out, 3, NULL, 0);
    int64_t c = bn_shapes[0].d[1], n = bn_shapes[0].d[0];
    double nm[3];
    for (int64_t ch = 0; ch < c; ch++) {
        double mu = 0;
        for (int64_t i = 0; i < n; i++)
            mu += oc_get(in[0], i * c + ch) / (double)n;
        nm[ch] = oc_get(in[3], ch) * 0.9 + mu * 0.1;
    }
    oc_assert_close(out[1], 1, &c, nm, 1e-12, 1e-12);
    release_all(out, 3);
    release_all(in, 5);
}

/* Random gradients flow into Out, NewMean and NewVar alike: X gets them
 * through the batch statistics. */
Test(ops_conv, batch_norm_train_gradients_match_finite_differences)
{
    for (size_t s = 0; s < NBN; s++) {
        if (bn_shapes[s].d[0] * (bn_shapes[s].ndim > 2 ? bn_shapes[s].d[2] : 1) < 2)
            continue; /* one element per channel: the variance has no slope */
        vq_tensor *in[5];
        bn_inputs(VQ_F64, bn_shapes[s].ndim, bn_shapes[s].d, in);
        vq_attr at[2] = {VQ_ATTR_F("epsilon", 1e-3), VQ_ATTR_F("momentum", 0.6)};
        double err = oc_grad_check("batch_norm_train", in, 5, 3, at, 2, 0x07, &rng);
        cr_assert_leq(err, 1e-6, "shape %zu", s);
        release_all(in, 5);
    }
}

/* dOut alone (a loss on Out), against the plain formula; and the gradient
 * of X sums to zero per channel then (the mean is subtracted out). */
Test(ops_conv, batch_norm_train_grad_of_x_from_dout_alone_sums_to_zero_per_channel)
{
    vq_tensor *in[5];
    bn_inputs(VQ_F64, 4, bn_shapes[2].d, in);
    vq_tensor *g = oc_rand(&rng, VQ_F64, 4, bn_shapes[2].d, -1, 1);
    vq_attr at[3] = {VQ_ATTR_I("wrt", 0), VQ_ATTR_I("grads", 1), VQ_ATTR_F("epsilon", 1e-3)};
    vq_tensor *gin[3] = {in[0], in[1], g};
    vq_tensor *dx = oc_run1("batch_norm_train_grad", gin, 3, at, 3);
    int64_t c = 3, inner = 20, n = vq_tensor_numel(in[0]);
    double sum[3] = {0}, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        sum[(i / inner) % c] += oc_get(dx, i);
        mag += fabs(oc_get(dx, i));
    }
    cr_assert_gt(mag, 1);
    for (int ch = 0; ch < 3; ch++)
        cr_assert_leq(fabs(sum[ch]), 1e-12, "channel %d: %g", ch, sum[ch]);
    vq_tensor_release(dx);
    vq_tensor_release(g);
    release_all(in, 5);
}

Test(ops_conv, batch_norm_train_refuses_bad_momentum_and_gradient_counts)
{
    vq_tensor *in[5];
    bn_inputs(VQ_F32, 4, bn_shapes[2].d, in);
    vq_attr bad = VQ_ATTR_F("momentum", 1.5);
    cr_assert_eq(oc_try("batch_norm_train", in, 5, 3, &bad, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "momentum"), "%s", vq_errmsg());
    vq_attr at[2] = {VQ_ATTR_I("wrt", 0), VQ_ATTR_I("grads", 7)};
    vq_tensor *gin[3] = {in[0], in[1], in[0]};
    cr_assert_eq(oc_try("batch_norm_train_grad", gin, 3, 1, at, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "grads 7 says 3 gradient(s)"), "%s", vq_errmsg());
    release_all(in, 5);
}

/* ---- errors ---- */

static void expect_error(const char *type, vq_tensor **in, int nin, const vq_attr *at, int nat,
                         const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, 1, at, nat), VQ_EINVAL, "%s: expected \"%s\"", type, msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

static vq_tensor *zeros(vq_dtype dt, int ndim, const int64_t *shape)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0, "%s", vq_errmsg());
    return t;
}

Test(ops_conv, bad_conv_attributes_and_shapes_name_the_op_and_values)
{
    vq_tensor *x = zeros(VQ_F32, 4, (int64_t[]){1, 4, 5, 5});
    vq_tensor *w = zeros(VQ_F32, 4, (int64_t[]){6, 2, 3, 3});
    vq_tensor *in[4] = {x, w, NULL, NULL};
    int64_t s0[2] = {0, 1}, p3[3] = {1, 1, 1}, pn[4] = {0, -1, 0, 0}, d0[2] = {1, 0};
    vq_attr a = VQ_ATTR_IS("strides", s0, 2);
    expect_error("conv2d", in, 2, &a, 1,
                 "conv2d: attribute strides: is [0,1]: value 0 (height, width) is 0, outside [1, "
                 "2^31)");
    a = VQ_ATTR_IS("pads", p3, 3);
    expect_error("conv2d", in, 2, &a, 1,
                 "conv2d: attribute pads: has 3 values [1,1,1]; expected 4 (top, left, bottom, "
                 "right)");
    a = VQ_ATTR_IS("pads", pn, 4);
    expect_error("conv2d", in, 2, &a, 1, "conv2d: attribute pads: is [0,-1,0,0]: value 1");
    a = VQ_ATTR_IS("dilations", d0, 2);
    expect_error("conv2d", in, 2, &a, 1, "conv2d: attribute dilations: is [1,0]");
    a = VQ_ATTR_I("groups", 0);
    expect_error("conv2d", in, 2, &a, 1, "conv2d: attribute groups: is 0");
    /* groups 2: 4 channels in 2 groups need W's dim 1 to be 2: fine. 3: no. */
    a = VQ_ATTR_I("groups", 3);
    expect_error("conv2d", in, 2, &a, 1,
                 "conv2d: input X (slot 0): has 4 channels (dim 1), which groups 3 does not "
                 "divide");
    vq_tensor *w8 = zeros(VQ_F32, 4, (int64_t[]){8, 2, 3, 3});
    in[1] = w8;
    a = VQ_ATTR_I("groups", 4);
    expect_error("conv2d", in, 2, &a, 1,
                 "conv2d: input W (slot 1): has 2 input channels per group (dim 1), but X's 4 "
                 "channels in 4 group(s) make 1");
    vq_tensor *w5 = zeros(VQ_F32, 4, (int64_t[]){5, 2, 3, 3});
    in[1] = w5;
    a = VQ_ATTR_I("groups", 2);
    expect_error("conv2d", in, 2, &a, 1,
                 "conv2d: input W (slot 1): has 5 output channels (dim 0), which groups 2 does "
                 "not divide");
    in[1] = w;
    expect_error("conv2d", in, 2, NULL, 0,
                 "conv2d: input W (slot 1): has 2 input channels per group (dim 1), but X's 4 "
                 "channels in 1 group(s) make 4");
    vq_tensor *wbig = zeros(VQ_F32, 4, (int64_t[]){6, 4, 6, 3});
    in[1] = wbig;
    expect_error("conv2d", in, 2, NULL, 0,
                 "conv2d: output height would be <= 0: input height 5 with pads 0 and 0 is "
                 "smaller than the dilated kernel height 6");
    vq_tensor *w0 = zeros(VQ_F32, 4, (int64_t[]){6, 4, 0, 3});
    in[1] = w0;
    expect_error("conv2d", in, 2, NULL, 0, "conv2d: input W (slot 1): kernel 0x3");
    vq_tensor *w4 = zeros(VQ_F32, 4, (int64_t[]){6, 4, 3, 3});
    vq_tensor *b5 = zeros(VQ_F32, 1, (int64_t[]){5}), *b64 = zeros(VQ_F64, 1, (int64_t[]){6});
    in[1] = w4;
    in[2] = b5;
    expect_error("conv2d", in, 3, NULL, 0,
                 "conv2d: input B (slot 2): shape [5] is not [M] for W's M = 6 output channels");
    in[2] = b64;
    expect_error("conv2d", in, 3, NULL, 0, "conv2d: input B (slot 2): dtype f64 differs");
    in[3] = b64;
    expect_error("conv2d", in, 4, NULL, 0, "conv2d: takes X, W and an optional bias B, got 4");
    vq_tensor *x3 = zeros(VQ_F32, 3, (int64_t[]){4, 5, 5});
    in[0] = x3;
    expect_error("conv2d", in, 2, NULL, 0, "conv2d: input X (slot 0): has 3 dims, expected 4");
    vq_tensor *xi = zeros(VQ_I32, 4, (int64_t[]){1, 4, 5, 5});
    in[0] = xi;
    expect_error("conv2d", in, 2, NULL, 0, "conv2d: input X (slot 0): dtype i32 not supported");

    /* conv2d_grad: wrt, and dOut against conv2d's output shape */
    vq_tensor *g = zeros(VQ_F32, 4, (int64_t[]){1, 6, 3, 4});
    vq_tensor *gin[3] = {x, w4, g};
    vq_attr wrt = VQ_ATTR_I("wrt", 3);
    expect_error("conv2d_grad", gin, 3, &wrt, 1, "conv2d_grad: attribute wrt: is 3");
    wrt = VQ_ATTR_I("wrt", 0);
    expect_error("conv2d_grad", gin, 3, &wrt, 1,
                 "conv2d_grad: input dOut (slot 2): shape [1,6,3,4] is not conv2d's output shape "
                 "[1,6,3,3]");
    expect_error("conv2d_grad", gin, 3, NULL, 0, "conv2d_grad: attribute wrt (int) is required");
    vq_tensor *all[] = {x, w, w8, w5, wbig, w0, w4, b5, b64, x3, xi, g};
    release_all(all, sizeof all / sizeof all[0]);
}

Test(ops_conv, bad_pool_and_batch_norm_attributes_name_the_op_and_values)
{
    vq_tensor *x = zeros(VQ_F32, 4, (int64_t[]){1, 2, 5, 5});
    int64_t k0[2] = {0, 2}, k3[2] = {3, 3}, k1[1] = {3}, s[2] = {1, 1};
    int64_t pbig[4] = {0, 0, 3, 0}, d2[2] = {2, 2};
    expect_error("max_pool2d", &x, 1, NULL, 0, "max_pool2d: attribute kernel (ints) is required");
    vq_attr a[3] = {VQ_ATTR_IS("kernel", k0, 2), VQ_ATTR_IS("strides", s, 2)};
    expect_error("max_pool2d", &x, 1, a, 1, "max_pool2d: attribute kernel: is [0,2]: value 0");
    a[0] = VQ_ATTR_IS("kernel", k1, 1);
    expect_error("avg_pool2d", &x, 1, a, 1,
                 "avg_pool2d: attribute kernel: has 1 values [3]; expected 2 (height, width)");
    a[0] = VQ_ATTR_IS("kernel", k3, 2);
    a[1] = VQ_ATTR_IS("pads", pbig, 4);
    expect_error("avg_pool2d", &x, 1, a, 2,
                 "avg_pool2d: attribute pads: pad 3 (bottom) is not smaller than the dilated "
                 "kernel height 3");
    a[2] = VQ_ATTR_IS("dilations", d2, 2);
    /* dilation 2 makes the window 5 tall: pad 3 is fine, and so is the size */
    vq_tensor *o = NULL;
    cr_assert_eq(vq_op_run(NULL, "max_pool2d", &x, 1, &o, 1, a, 3), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_shape(o)[2], 4);
    vq_tensor_release(o);
    expect_error("avg_pool2d", &x, 1, a, 3, "avg_pool2d: unknown attribute 'dilations'");
    vq_tensor *small = zeros(VQ_F32, 4, (int64_t[]){1, 2, 2, 5});
    expect_error("max_pool2d", &small, 1, a, 1,
                 "max_pool2d: output height would be <= 0: input height 2 with pads 0 and 0 is "
                 "smaller than the dilated kernel height 3");
    vq_tensor *g = zeros(VQ_F32, 4, (int64_t[]){1, 2, 3, 4});
    vq_tensor *gin[2] = {x, g};
    expect_error("max_pool2d_grad", gin, 2, a, 1,
                 "max_pool2d_grad: input dOut (slot 1): shape [1,2,3,4] is not the pool's output "
                 "shape [1,2,3,3]");
    vq_tensor *x2 = zeros(VQ_F32, 2, (int64_t[]){3, 4});
    expect_error("global_avg_pool", &x2, 1, NULL, 0,
                 "global_avg_pool: input X (slot 0): has 2 dims; global_avg_pool needs at least 3");

    vq_tensor *c2 = zeros(VQ_F32, 1, (int64_t[]){2}), *c3 = zeros(VQ_F32, 1, (int64_t[]){3});
    vq_tensor *bn[5] = {x, c2, c2, c3, c2};
    expect_error("batch_norm", bn, 5, NULL, 0,
                 "batch_norm: input Mean (slot 3): shape [3] is not [C] for X's 2 channels (X is "
                 "[1,2,5,5])");
    bn[3] = c2;
    vq_attr eps = VQ_ATTR_F("epsilon", -1);
    expect_error("batch_norm", bn, 5, &eps, 1, "batch_norm: attribute epsilon: is -1");
    vq_tensor *c64 = zeros(VQ_F64, 1, (int64_t[]){2});
    bn[1] = c64;
    expect_error("batch_norm", bn, 5, NULL, 0, "batch_norm: input Scale (slot 1): dtype f64");
    vq_tensor *bg[5] = {x, c2, c2, c2, g};
    vq_attr wrt = VQ_ATTR_I("wrt", 0);
    expect_error("batch_norm_grad", bg, 5, &wrt, 1,
                 "batch_norm_grad: input dOut (slot 4): shape [1,2,3,4] differs from X's");
    bg[4] = x;
    wrt = VQ_ATTR_I("wrt", 5);
    expect_error("batch_norm_grad", bg, 5, &wrt, 1, "batch_norm_grad: attribute wrt: is 5");
    vq_tensor *all[] = {x, small, g, x2, c2, c3, c64};
    release_all(all, sizeof all / sizeof all[0]);
}

/* ---- preparation with unknown dims ---- */

static int infer(const char *type, int nin, vq__meta *in, const vq_attr *at, int nat,
                 vq__meta *out)
{
    const vq__op_def *def = vq__op_find(type);
    cr_assert(def, "no op %s", type);
    unsigned char params[VQ__MAX_PARAMS];
    return vq__op_infer(def, at, nat, nin, in, 1, out, params);
}

Test(ops_conv, unknown_dims_give_unknown_output_dims_where_they_matter)
{
    int64_t s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1}, k3[2] = {3, 3};
    vq_attr at[3] = {VQ_ATTR_IS("strides", s2, 2), VQ_ATTR_IS("pads", p1, 4),
                     VQ_ATTR_IS("kernel", k3, 2)};
    vq__meta in[3] = {{.dtype = VQ_F32, .ndim = 4, .shape = {-1, 8, -1, 9}},
                      {.dtype = VQ_F32, .ndim = 4, .shape = {16, -1, 3, 3}},
                      {.dtype = VQ_F32, .ndim = 1, .shape = {-1}}};
    vq__meta out;
    cr_assert_eq(infer("conv2d", 3, in, at, 2, &out), 0, "%s", vq_errmsg());
    cr_assert_eq(out.ndim, 4);
    cr_assert_eq(out.shape[0], -1);
    cr_assert_eq(out.shape[1], 16);
    cr_assert_eq(out.shape[2], -1);
    cr_assert_eq(out.shape[3], 5);
    /* an unknown kernel dim leaves that output dim unknown; M from the bias */
    in[1] = (vq__meta){.dtype = VQ_F32, .ndim = 4, .shape = {-1, 8, 3, -1}};
    in[2].shape[0] = 12;
    cr_assert_eq(infer("conv2d", 3, in, at, 2, &out), 0, "%s", vq_errmsg());
    cr_assert_eq(out.shape[1], 12);
    cr_assert_eq(out.shape[3], -1);
    /* a known misfit is still found */
    in[1].shape[1] = 3;
    cr_assert_eq(infer("conv2d", 3, in, at, 2, &out), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input channels per group"), "%s", vq_errmsg());

    vq__meta px = {.dtype = VQ_F64, .ndim = 4, .shape = {2, -1, 7, -1}};
    cr_assert_eq(infer("max_pool2d", 1, &px, at, 3, &out), 0, "%s", vq_errmsg());
    cr_assert_eq(out.shape[1], -1);
    cr_assert_eq(out.shape[2], 4);
    cr_assert_eq(out.shape[3], -1);
    vq__meta gx = {.dtype = VQ_F32, .ndim = 4, .shape = {-1, 3, -1, -1}};
    cr_assert_eq(infer("global_avg_pool", 1, &gx, NULL, 0, &out), 0, "%s", vq_errmsg());
    cr_assert_eq(out.shape[0], -1);
    cr_assert_eq(out.shape[1], 3);
    cr_assert_eq(out.shape[2], 1);
    cr_assert_eq(out.shape[3], 1);
    vq__meta bn[5] = {{.dtype = VQ_F32, .ndim = 4, .shape = {-1, -1, 5, 5}},
                      {.dtype = VQ_F32, .ndim = 1, .shape = {-1}},
                      {.dtype = VQ_F32, .ndim = 1, .shape = {4}},
                      {.dtype = VQ_F32, .ndim = 1, .shape = {-1}},
                      {.dtype = VQ_F32, .ndim = 1, .shape = {-1}}};
    cr_assert_eq(infer("batch_norm", 5, bn, NULL, 0, &out), 0, "%s", vq_errmsg());
    cr_assert_eq(out.shape[0], -1);
    cr_assert_eq(out.shape[1], 4);
}

Test(ops_conv, signatures_list_slots_and_attributes)
{
    cr_assert_str_eq(vq_op_signature("conv2d"),
                     "conv2d(X, W...) -> Out; strides:ints=[1,1] pads:ints=[0,0,0,0] "
                     "dilations:ints=[1,1] groups:int=1 clip:floats=none act:string=none "
                     "act_alpha:float=0.2 act_beta:float=0.5");
    cr_assert_str_eq(vq_op_signature("conv2d_grad"),
                     "conv2d_grad(X, W, dOut, Out?) -> dZ; strides:ints=[1,1] "
                     "pads:ints=[0,0,0,0] dilations:ints=[1,1] groups:int=1 clip:floats=none "
                     "wrt:int");
    cr_assert_str_eq(vq_op_signature("max_pool2d"),
                     "max_pool2d(X) -> Out; kernel:ints strides:ints=[1,1] pads:ints=[0,0,0,0] "
                     "dilations:ints=[1,1] ceil_mode:bool=false");
    cr_assert_str_eq(vq_op_signature("avg_pool2d_grad"),
                     "avg_pool2d_grad(X, dOut) -> dX; kernel:ints strides:ints=[1,1] "
                     "pads:ints=[0,0,0,0] ceil_mode:bool=false count_include_pad:bool=false");
    cr_assert_str_eq(vq_op_signature("batch_norm_grad"),
                     "batch_norm_grad(X, Scale, Mean, Var, dOut) -> dZ; epsilon:float=1e-05 "
                     "wrt:int");
    cr_assert_str_eq(vq_op_signature("global_avg_pool"), "global_avg_pool(X) -> Out");
}

/* ---- in a program ---- */

static const int64_t net_pads[4] = {1, 1, 1, 1}, net_two[2] = {2, 2};

/* The net, op by op: mean(global_avg_pool(max_pool2d(relu(batch_norm(
 * conv2d(x, w, b), scale, shift, mean, var))))); p: w, b, scale, shift,
 * mean, var. */
static double net_forward(vq_tensor *x, vq_tensor *const *p)
{
    vq_attr cat = VQ_ATTR_IS("pads", net_pads, 4);
    vq_attr pat[2] = {VQ_ATTR_IS("kernel", net_two, 2), VQ_ATTR_IS("strides", net_two, 2)};
    vq_tensor *t[6];
    t[0] = oc_run1("conv2d", (vq_tensor *[]){x, p[0], p[1]}, 3, &cat, 1);
    t[1] = oc_run1("batch_norm", (vq_tensor *[]){t[0], p[2], p[3], p[4], p[5]}, 5, NULL, 0);
    t[2] = oc_run1("relu", &t[1], 1, NULL, 0);
    t[3] = oc_run1("max_pool2d", &t[2], 1, pat, 2);
    t[4] = oc_run1("global_avg_pool", &t[3], 1, NULL, 0);
    t[5] = oc_run1("mean", &t[4], 1, NULL, 0);
    double y = oc_get(t[5], 0);
    release_all(t, 6);
    return y;
}

/* The same net as a program: run by the executor after an encode and a
 * decode (W's variadic slot carries w and b), differentiated by autodiff
 * with the statistics frozen, the gradients of w and b checked against
 * finite differences of the op-by-op net. */
Test(ops_conv, a_conv_net_runs_in_a_program_and_differentiates)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t ws[4] = {4, 3, 3, 3}, cs[1] = {4};
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F64, 4, (int64_t[]){-1, 3, 8, 8}, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "w", VQ_F64, 4, ws, true), 0);
    const char *names[6] = {"w", "b", "scale", "shift", "mean", "var"};
    for (int i = 1; i < 6; i++)
        cr_assert_eq(vq_program_add_var(p, 0, names[i], VQ_F64, 1, cs, true), 0);
    const char *tmp[5] = {"c", "n", "r", "m", "g"};
    const int64_t tshape[5][4] = {{-1, 4, 8, 8}, {-1, 4, 8, 8}, {-1, 4, 8, 8}, {-1, 4, 4, 4},
                                  {-1, 4, 1, 1}};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(vq_program_add_var(p, 0, tmp[i], VQ_F64, 4, tshape[i], false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "y", VQ_F64, 0, NULL, false), 0);
    vq_attr cat = VQ_ATTR_IS("pads", net_pads, 4);
    vq_attr pat[2] = {VQ_ATTR_IS("kernel", net_two, 2), VQ_ATTR_IS("strides", net_two, 2)};
    const char *conv_in[3] = {"x", "w", "b"}, *bn_in[5] = {"c", "scale", "shift", "mean", "var"};
    cr_assert_geq(vq_program_add_op(p, 0, "conv2d", conv_in, 3, &tmp[0], 1, &cat, 1), 0, "%s",
                  vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "batch_norm", bn_in, 5, &tmp[1], 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "relu", &tmp[1], 1, &tmp[2], 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "max_pool2d", &tmp[2], 1, &tmp[3], 1, pat, 2), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "global_avg_pool", &tmp[3], 1, &tmp[4], 1, NULL, 0),
                  0);
    const char *y = "y";
    cr_assert_geq(vq_program_add_op(p, 0, "mean", &tmp[4], 1, &y, 1, NULL, 0), 0);

    void *buf;
    size_t len;
    cr_assert_eq(vq_program_encode(p, &buf, &len), 0, "%s", vq_errmsg());
    vq_program *q;
    cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
    free(buf);
    vq_program_free(p);
    cr_assert_eq(vq_program_nops(q, 0), 6);
    const char *frozen[2] = {"mean", "var"};
    cr_assert_eq(vq_append_backward(q, "y", frozen, 2), 4, "%s", vq_errmsg());

    vq_tensor *x = oc_rand(&rng, VQ_F64, 4, (int64_t[]){2, 3, 8, 8}, -1, 1);
    vq_tensor *par[6] = {oc_rand(&rng, VQ_F64, 4, ws, -0.5, 0.5),
                         oc_rand(&rng, VQ_F64, 1, cs, -0.5, 0.5),
                         oc_rand(&rng, VQ_F64, 1, cs, 0.5, 1.5),
                         oc_rand(&rng, VQ_F64, 1, cs, -0.5, 0.5),
                         oc_rand(&rng, VQ_F64, 1, cs, -0.2, 0.2),
                         oc_rand(&rng, VQ_F64, 1, cs, 0.5, 2)};
    vq_engine *e;
    vq_exec *ex;
    vq_scope *sc;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&sc), 0);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(vq_scope_set(sc, names[i], par[i]), 0);
    vq_feed feed = {"x", x};
    vq_fetch f[3] = {{"y", NULL}, {"w@GRAD", NULL}, {"b@GRAD", NULL}};
    cr_assert_eq(vq_exec_run(ex, q, sc, &feed, 1, f, 3), 0, "%s", vq_errmsg());
    double want = net_forward(x, par);
    cr_assert(fabs(oc_get(f[0].tensor, 0) - want) <= 1e-12 * fmax(1, fabs(want)),
              "program %.17g, ops %.17g", oc_get(f[0].tensor, 0), want);
    const double h = 1e-6;
    for (int k = 1; k <= 2; k++) {
        vq_tensor *v = par[k - 1];
        for (int64_t i = 0; i < vq_tensor_numel(v); i += k == 1 ? 13 : 1) {
            double v0 = oc_get(v, i);
            oc_set(v, i, v0 + h);
            double up = net_forward(x, par);
            oc_set(v, i, v0 - h);
            double down = net_forward(x, par);
            oc_set(v, i, v0);
            double num = (up - down) / (2 * h), ana = oc_get(f[k].tensor, i);
            cr_assert(fabs(ana - num) <= 1e-6 * fmax(fmax(fabs(ana), fabs(num)), 1e-3),
                      "d y / d %s[%lld]: autodiff %.12g, finite differences %.12g", names[k - 1],
                      (long long)i, ana, num);
        }
    }
    for (int i = 0; i < 3; i++)
        vq_tensor_release(f[i].tensor);
    release_all(par, 6);
    vq_tensor_release(x);
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_engine_free(e);
    vq_program_free(q);
}
