/* resize and resize_grad (ops/cpu/resize.c): the kernel against a plain
 * loop written from ONNX's reference implementation (onnx/backend/test/
 * case/node/resize.py: one dim after the other, the n nearest elements of
 * the edge-padded dim picked by distance, ties to the lower) for every
 * mode, coordinate transformation and nearest mode, with scales and with
 * sizes, up and down, f32 and f64; nearest in every dtype, bit for bit;
 * tf_crop_and_resize's extrapolation; exclude_outside; the call shared
 * with an idle worker against the serial one; the gradient against finite
 * differences; unknown dims at preparation; bad attributes and inputs
 * naming the attribute, slot and values. */
#include "opcheck.h"

#include "../ops/ops_internal.h"
#include "../ops/resize_shared.h" /* the CUDA kernel's evaluation, on the host */

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_resize");
}

TestSuite(ops_resize, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const modes[] = {"nearest", "linear", "cubic"};
static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                   "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
static const char *const nearest_modes[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"};

/* ---- the reference ---- */

struct ref {
    const char *mode, *ctm, *nearest;
    double a, extrapolation;
    bool exclude;
    int ndim;
    int64_t xshape[4], oshape[4];
    double scale[4]; /* 0: sizes gave the dim */
    double roi[8];
};

/* cubic_coeffs, linear_coeffs and nearest_coeffs of resize.py: the
 * weights of the neighbours (their count). */
static int coeffs(const struct ref *r, double ratio, bool whole, double *c)
{
    if (!strcmp(r->mode, "cubic")) {
        double A = r->a;
        c[0] = ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A;
        c[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
        c[2] = ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1;
        c[3] = ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) -
               4 * A;
        return 4;
    }
    if (!strcmp(r->mode, "linear")) {
        c[0] = 1 - ratio;
        c[1] = ratio;
        return 2;
    }
    bool up;
    if (whole)
        up = true;
    else if (!strcmp(r->nearest, "round_prefer_floor"))
        up = ratio > 0.5;
    else if (!strcmp(r->nearest, "round_prefer_ceil"))
        up = ratio >= 0.5;
    else
        up = !strcmp(r->nearest, "ceil");
    c[0] = !up;
    c[1] = up;
    return 2;
}

/* interpolate_1d_with_x: data (n values) at output coordinate x of dim d. */
static double interp_1d(const struct ref *r, int d, const double *data, int64_t n, int64_t x)
{
    double s = r->scale[d] > 0 ? r->scale[d] : (double)r->oshape[d] / (double)n;
    double ow = r->scale[d] > 0 ? s * (double)n : (double)r->oshape[d], xo;
    if (r->scale[d] > 0 && !strcmp(r->ctm, "tf_crop_and_resize"))
        ow *= r->roi[r->ndim + d] - r->roi[d];
    if (!strcmp(r->ctm, "align_corners")) {
        xo = ow == 1 ? 0 : (double)(x * (n - 1)) / (ow - 1);
    } else if (!strcmp(r->ctm, "asymmetric")) {
        xo = (double)x / s;
    } else if (!strcmp(r->ctm, "tf_half_pixel_for_nn")) {
        xo = ((double)x + 0.5) / s;
    } else if (!strcmp(r->ctm, "tf_crop_and_resize")) {
        double lo = r->roi[d], hi = r->roi[r->ndim + d];
        xo = ow == 1 ? (hi - lo) * (double)(n - 1) / 2
                     : (double)x * (hi - lo) * (double)(n - 1) / (ow - 1);
        xo += lo * (double)(n - 1);
        if (xo < 0 || xo > (double)(n - 1))
            return r->extrapolation;
    } else if (!strcmp(r->ctm, "pytorch_half_pixel")) {
        xo = ow == 1 ? -0.5 : ((double)x + 0.5) / s - 0.5;
    } else {
        xo = ((double)x + 0.5) / s - 0.5;
    }
    double fl = floor(xo), c[4];
    bool whole = xo == fl;
    int k = coeffs(r, whole ? 1 : xo - fl, whole, c);
    /* get_neighbor: pad by ceil(k / 2) repeating the edge, then the k
     * indexes of the padded array nearest to xo + pad, ties to the lower,
     * in increasing order */
    int64_t pad = (k + 1) / 2, len = n + 2 * pad, idx[4] = {0};
    double xp = xo + (double)pad;
    bool taken[64] = {false};
    cr_assert(len <= 64);
    for (int t = 0; t < k; t++) {
        int64_t best = -1;
        for (int64_t i = 0; i < len; i++)
            if (!taken[i] && (best < 0 || fabs(xp - (double)i) < fabs(xp - (double)best)))
                best = i;
        taken[best] = true;
    }
    for (int64_t i = 0, t = 0; i < len; i++)
        if (taken[i])
            idx[t++] = i - pad;
    if (r->exclude) {
        double sum = 0;
        for (int t = 0; t < k; t++) {
            if (idx[t] < 0 || idx[t] >= n)
                c[t] = 0;
            sum += c[t];
        }
        for (int t = 0; t < k; t++)
            c[t] /= sum;
    }
    double v = 0;
    for (int t = 0; t < k; t++) {
        int64_t i = idx[t] < 0 ? 0 : idx[t] >= n ? n - 1 : idx[t];
        v += c[t] * data[i];
    }
    return v;
}

/* interpolate_nd_with_x over dims d.. of the block of X at data. */
static double interp_nd(const struct ref *r, int d, const double *data, const int64_t *x)
{
    int64_t n = r->xshape[d];
    if (d == r->ndim - 1)
        return interp_1d(r, d, data, n, x[d]);
    int64_t inner = 1;
    for (int e = d + 1; e < r->ndim; e++)
        inner *= r->xshape[e];
    double *pts = malloc((size_t)n * sizeof *pts);
    cr_assert(pts);
    for (int64_t i = 0; i < n; i++)
        pts[i] = interp_nd(r, d + 1, data + i * inner, x);
    double v = interp_1d(r, d, pts, n, x[d]);
    free(pts);
    return v;
}

static int64_t count(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* Every element of the reference's output of X. */
static double *reference(const struct ref *r, vq_tensor *x)
{
    int64_t nx = count(r->ndim, r->xshape), no = count(r->ndim, r->oshape);
    double *xv = malloc((size_t)(nx ? nx : 1) * sizeof *xv);
    double *want = malloc((size_t)(no ? no : 1) * sizeof *want);
    cr_assert(xv && want);
    for (int64_t i = 0; i < nx; i++)
        xv[i] = oc_get(x, i);
    for (int64_t e = 0; e < no; e++) {
        int64_t c[4], rest = e;
        for (int d = r->ndim - 1; d >= 0; d--) {
            c[d] = rest % r->oshape[d];
            rest /= r->oshape[d];
        }
        want[e] = interp_nd(r, 0, xv, c);
    }
    free(xv);
    return want;
}

/* resize's attributes for r, into at (at most 9); their count. */
static int attrs_of(const struct ref *r, vq_attr *at, int64_t *sizes)
{
    int n = 0;
    if (r->scale[0] > 0) {
        at[n++] = VQ_ATTR_FS("scales", r->scale, r->ndim);
    } else {
        for (int d = 0; d < r->ndim; d++)
            sizes[d] = r->oshape[d];
        at[n++] = VQ_ATTR_IS("sizes", sizes, r->ndim);
    }
    at[n++] = VQ_ATTR_S("mode", r->mode);
    at[n++] = VQ_ATTR_S("coordinate_transformation_mode", r->ctm);
    at[n++] = VQ_ATTR_S("nearest_mode", r->nearest);
    at[n++] = VQ_ATTR_F("cubic_coeff_a", r->a);
    at[n++] = VQ_ATTR_B("exclude_outside", r->exclude);
    at[n++] = VQ_ATTR_F("extrapolation_value", r->extrapolation);
    at[n++] = VQ_ATTR_FS("roi", r->roi, 2 * r->ndim);
    return n;
}

/* X's shape and Out's: scales when scales[0] > 0 (Out's dims follow),
 * else Out's dims as sizes. */
static const struct shape_case {
    int ndim;
    int64_t x[4], o[4];
    double scales[4];
} shape_cases[] = {
    {4, {1, 1, 2, 2}, {0}, {1, 1, 2, 3}},     /* up by scales */
    {4, {1, 1, 2, 4}, {0}, {1, 1, 0.6, 0.6}}, /* down by scales */
    {4, {1, 1, 4, 4}, {0}, {1, 1, 0.8, 0.8}},
    {4, {2, 3, 4, 5}, {2, 3, 9, 3}, {0}}, /* sizes, up and down */
    {3, {2, 3, 4}, {4, 3, 1}, {0}},       /* every dim, and one output */
    {1, {7}, {0}, {1.7}},
    {2, {3, 1}, {3, 4}, {0}}, /* a dim of one */
    {2, {5, 6}, {0}, {0.3, 2.5}},
    {2, {4, 4}, {3, 3}, {0}},
};

static void fill(struct ref *r, const struct shape_case *s)
{
    r->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++) {
        r->xshape[d] = s->x[d];
        r->scale[d] = s->scales[0] > 0 ? s->scales[d] : 0;
        r->roi[d] = 0;
        r->roi[s->ndim + d] = 1;
        if (s->scales[0] > 0) {
            r->oshape[d] = (int64_t)floor((double)s->x[d] * s->scales[d]);
        } else {
            r->oshape[d] = s->o[d];
        }
    }
}

static void check_case(struct ref *r, vq_dtype dt)
{
    vq_tensor *x = oc_rand(&rng, dt, r->ndim, r->xshape, -3, 3);
    vq_attr at[9];
    int64_t sizes[4];
    int na = attrs_of(r, at, sizes);
    vq_tensor *out = oc_run1("resize", &x, 1, at, na);
    double *want = reference(r, x);
    double tol = dt == VQ_F32 ? 1e-6 : 1e-13;
    cr_assert_eq(vq_tensor_dtype(out), dt);
    oc_assert_close(out, r->ndim, r->oshape, want, tol, tol);
    free(want);
    vq_tensor_release(out);
    vq_tensor_release(x);
}

Test(ops_resize, every_mode_and_transformation_matches_the_reference_loop)
{
    for (int s = 0; s < N_OF(shape_cases); s++)
        for (int m = 0; m < N_OF(modes); m++)
            for (int t = 0; t < N_OF(ctms); t++)
                for (int d = 0; d < 2; d++) {
                    struct ref r = {.mode = modes[m],
                                    .ctm = ctms[t],
                                    .nearest = "round_prefer_floor",
                                    .a = -0.75};
                    fill(&r, &shape_cases[s]);
                    check_case(&r, d ? VQ_F64 : VQ_F32);
                }
}

Test(ops_resize, every_nearest_mode_matches_the_reference_loop_in_every_dtype)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
    for (int s = 0; s < N_OF(shape_cases); s++)
        for (int n = 0; n < N_OF(nearest_modes); n++)
            for (int t = 0; t < N_OF(ctms); t++)
                for (int d = 0; d < N_OF(dts); d++) {
                    struct ref r = {.mode = "nearest",
                                    .ctm = ctms[t],
                                    .nearest = nearest_modes[n],
                                    .extrapolation = 1};
                    fill(&r, &shape_cases[s]);
                    vq_tensor *x = oc_rand(&rng, dts[d], r.ndim, r.xshape, -50, 50);
                    vq_attr at[9];
                    int64_t sizes[4];
                    int na = attrs_of(&r, at, sizes);
                    vq_tensor *out = oc_run1("resize", &x, 1, at, na);
                    double *want = reference(&r, x);
                    cr_assert_eq(vq_tensor_dtype(out), dts[d]);
                    oc_assert_close(out, r.ndim, r.oshape, want, 0, 0);
                    free(want);
                    vq_tensor_release(out);
                    vq_tensor_release(x);
                }
}

Test(ops_resize, cubic_with_other_coefficients_and_exclude_outside)
{
    static const double as[] = {-0.5, -0.75, 0.25};
    for (int s = 0; s < N_OF(shape_cases); s++)
        for (int a = 0; a < N_OF(as); a++)
            for (int t = 0; t < N_OF(ctms); t++)
                for (int e = 0; e < 2; e++) {
                    struct ref r = {.mode = e ? "cubic" : "linear",
                                    .ctm = ctms[t],
                                    .nearest = "floor",
                                    .a = as[a],
                                    .exclude = true};
                    if (e)
                        r.mode = "cubic";
                    fill(&r, &shape_cases[s]);
                    check_case(&r, VQ_F64);
                }
}

Test(ops_resize, tf_crop_and_resize_reads_the_roi_and_extrapolates_outside_it)
{
    /* the ONNX cases' rois, and one box wholly outside X */
    static const double rois[][8] = {
        {0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8},
        {0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7},
        {0, 0, -0.5, 1.5, 1, 1, 0.2, 2.5},
    };
    for (int i = 0; i < N_OF(rois); i++)
        for (int m = 0; m < N_OF(modes); m++)
            for (int sc = 0; sc < 2; sc++) {
                struct ref r = {.mode = modes[m],
                                .ctm = "tf_crop_and_resize",
                                .nearest = "round_prefer_ceil",
                                .a = -0.75,
                                .extrapolation = 10,
                                .ndim = 4,
                                .xshape = {1, 2, 4, 4},
                                .oshape = {1, 2, 3, 3}};
                memcpy(r.roi, rois[i], sizeof r.roi);
                if (sc) { /* scales: Out's dim is floor(dim * (end - start) * scale) */
                    double s[4] = {1, 1, 2.5, 3};
                    for (int d = 0; d < 4; d++) {
                        r.scale[d] = s[d];
                        r.oshape[d] =
                            (int64_t)floor((double)r.xshape[d] * (r.roi[4 + d] - r.roi[d]) * s[d]);
                    }
                }
                check_case(&r, VQ_F32);
            }
    /* spelled out: ONNX's test_resize_tf_crop_and_resize_extrapolation_value */
    double xv[16];
    for (int i = 0; i < 16; i++)
        xv[i] = i + 1;
    vq_tensor *x = oc_from(VQ_F32, 4, (int64_t[]){1, 1, 4, 4}, xv);
    vq_attr at[4] = {VQ_ATTR_IS("sizes", ((int64_t[]){1, 1, 3, 3}), 4), VQ_ATTR_S("mode", "linear"),
                     VQ_ATTR_S("coordinate_transformation_mode", "tf_crop_and_resize"),
                     VQ_ATTR_FS("roi", rois[1], 8)};
    vq_tensor *out = oc_run1("resize", &x, 1, at, 4);
    vq_attr ex = VQ_ATTR_F("extrapolation_value", 10);
    vq_attr at5[5] = {at[0], at[1], at[2], at[3], ex};
    vq_tensor *out10 = oc_run1("resize", &x, 1, at5, 5);
    double want0[9] = {7.6, 0, 0, 12.4, 0, 0, 0, 0, 0};
    double want10[9] = {7.6, 10, 10, 12.4, 10, 10, 10, 10, 10};
    oc_assert_close(out, 4, (int64_t[]){1, 1, 3, 3}, want0, 1e-6, 1e-6);
    oc_assert_close(out10, 4, (int64_t[]){1, 1, 3, 3}, want10, 1e-6, 1e-6);
    vq_tensor_release(out);
    vq_tensor_release(out10);
    vq_tensor_release(x);
}

Test(ops_resize, onnx_examples_spelled_out)
{
    /* resize.py's comments: test_resize_upsample_scales_linear and
     * test_resize_downsample_scales_linear_align_corners */
    vq_tensor *x = oc_from(VQ_F32, 4, (int64_t[]){1, 1, 2, 2}, (double[]){1, 2, 3, 4});
    vq_attr at[2] = {VQ_ATTR_FS("scales", ((double[]){1, 1, 2, 2}), 4),
                     VQ_ATTR_S("mode", "linear")};
    vq_tensor *out = oc_run1("resize", &x, 1, at, 2);
    double want[16] = {1,   1.25, 1.75, 2,   1.5, 1.75, 2.25, 2.5,
                       2.5, 2.75, 3.25, 3.5, 3,   3.25, 3.75, 4};
    oc_assert_close(out, 4, (int64_t[]){1, 1, 4, 4}, want, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(x);

    x = oc_from(VQ_F32, 4, (int64_t[]){1, 1, 2, 4}, (double[]){1, 2, 3, 4, 5, 6, 7, 8});
    vq_attr ac[3] = {VQ_ATTR_FS("scales", ((double[]){1, 1, 0.6f, 0.6f}), 4),
                     VQ_ATTR_S("mode", "linear"),
                     VQ_ATTR_S("coordinate_transformation_mode", "align_corners")};
    out = oc_run1("resize", &x, 1, ac, 3);
    oc_assert_close(out, 4, (int64_t[]){1, 1, 1, 2}, (double[]){1, 3.142857}, 1e-6, 0);
    vq_tensor_release(out);
    /* nearest by default: test_resize_downsample_sizes_nearest */
    vq_attr sz = VQ_ATTR_IS("sizes", ((int64_t[]){1, 1, 1, 3}), 4);
    out = oc_run1("resize", &x, 1, &sz, 1);
    oc_assert_close(out, 4, (int64_t[]){1, 1, 1, 3}, (double[]){1, 2, 4}, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(x);
}

Test(ops_resize, a_call_shared_with_an_idle_worker_equals_the_serial_one)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    vq_tensor *x = oc_rand(&rng, VQ_F32, 4, (int64_t[]){2, 8, 40, 40}, -3, 3);
    for (int m = 0; m < N_OF(modes); m++) {
        vq_attr at[2] = {VQ_ATTR_FS("scales", ((double[]){1, 1, 2, 2}), 4),
                         VQ_ATTR_S("mode", modes[m])};
        oc_assert_shared_equals_serial(e, "resize", &x, 1, at, 2);
    }
    vq_tensor_release(x);
    vq_engine_free(e);
}

/* What ops/cuda/resize.cu computes for Out's element e: the taps of
 * every dim from vq__resize_taps and the general nested sum. */
static double device_value(const vq__resize_geom *g, const vq__resize_params *p, int64_t e,
                           const void *x, bool f64)
{
    int64_t c[VQ_MAX_DIMS], xs[VQ_MAX_DIMS], stride = 1;
    for (int d = g->ndim - 1; d >= 0; d--) {
        c[d] = e % g->oshape[d];
        e /= g->oshape[d];
        xs[d] = stride;
        stride *= g->xshape[d];
    }
    vq__resize_point pt = {.m = 0, .base = 0};
    for (int d = 0; d < g->ndim; d++) {
        int64_t idx[VQ__RESIZE_TAPS];
        double w[VQ__RESIZE_TAPS];
        int n = vq__resize_taps(g, d, c[d], idx, w);
        if (n == 0)
            return p->value;
        vq__resize_point_add(&pt, n, idx, w, xs[d]);
    }
    return vq__resize_point_sum(&pt, x, f64);
}

Test(ops_resize, the_cpu_kernel_has_the_bits_of_the_cuda_kernels_evaluation)
{
    /* the CPU kernel's row loops against the shared per-element rules the
     * CUDA kernel runs (the device itself is tested by test_ops_gpu_kernels
     * where there is one) */
    static const struct shape_case more[] = {
        {4, {2, 3, 5, 4}, {2, 5, 7, 3}, {0}}, /* three dims interpolated */
        {3, {3, 4, 5}, {0}, {1.5, 0.7, 2}},
    };
    for (int s = 0; s < N_OF(shape_cases) + N_OF(more); s++)
        for (int m = 1; m < N_OF(modes); m++)
            for (int t = 0; t < N_OF(ctms); t++)
                for (int d = 0; d < 2; d++) {
                    const struct shape_case *sc =
                        s < N_OF(shape_cases) ? &shape_cases[s] : &more[s - N_OF(shape_cases)];
                    struct ref r = {.mode = modes[m],
                                    .ctm = ctms[t],
                                    .nearest = "floor",
                                    .a = -0.5,
                                    .exclude = t == 2,
                                    .extrapolation = 3};
                    fill(&r, sc);
                    for (int k = 0; k < r.ndim && t == 5; k++) {
                        r.roi[k] = -0.1 * k;
                        r.roi[r.ndim + k] = 1 + 0.2 * k;
                        if (r.scale[k] > 0)
                            r.oshape[k] = (int64_t)floor(
                                (double)r.xshape[k] * (r.roi[r.ndim + k] - r.roi[k]) * r.scale[k]);
                    }
                    vq_dtype dt = d ? VQ_F64 : VQ_F32;
                    vq_tensor *x = oc_rand(&rng, dt, r.ndim, r.xshape, -3, 3);
                    vq_attr at[9];
                    int64_t sizes[4];
                    int na = attrs_of(&r, at, sizes);
                    vq_tensor *out = oc_run1("resize", &x, 1, at, na);
                    vq__meta xm = {.dtype = dt, .ndim = r.ndim}, om;
                    memcpy(xm.shape, r.xshape, sizeof r.xshape);
                    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
                    cr_assert_eq(vq__op_infer(vq__op_find("resize"), at, na, 1, &xm, 1, &om,
                                              params),
                                 0, "%s", vq_errmsg());
                    const vq__resize_params *p = (const void *)params;
                    vq__resize_geom g;
                    vq__resize_geom_make(&g, p, r.ndim, r.xshape, om.shape);
                    for (int64_t e = 0; e < vq_tensor_numel(out); e++) {
                        double v = device_value(&g, p, e, vq_tensor_data(x), d);
                        bool same = d ? ((const double *)vq_tensor_data(out))[e] == v
                                      : ((const float *)vq_tensor_data(out))[e] == (float)v;
                        cr_assert(same, "%s %s %s case %d element %lld: %.17g, expected %.17g",
                                  vq_dtype_name(dt), modes[m], ctms[t], s, (long long)e,
                                  oc_get(out, e), v);
                    }
                    vq_tensor_release(out);
                    vq_tensor_release(x);
                }
}

/* ---- the gradient ---- */

Test(ops_resize, gradients_match_finite_differences)
{
    for (int s = 0; s < N_OF(shape_cases); s++)
        for (int m = 0; m < N_OF(modes); m++)
            for (int t = 0; t < N_OF(ctms); t++) {
                struct ref r = {.mode = modes[m],
                                .ctm = ctms[t],
                                .nearest = "round_prefer_ceil",
                                .a = -0.75,
                                .exclude = t == 0,
                                .extrapolation = 2};
                fill(&r, &shape_cases[s]);
                if (t == 5) { /* a box partly outside X */
                    for (int d = 0; d < r.ndim; d++) {
                        r.roi[d] = -0.2;
                        r.roi[r.ndim + d] = 0.9;
                        if (r.scale[d] > 0)
                            r.oshape[d] = (int64_t)floor((double)r.xshape[d] * 1.1 * r.scale[d]);
                    }
                }
                vq_tensor *x = oc_rand(&rng, VQ_F64, r.ndim, r.xshape, -2, 2);
                vq_attr at[9];
                int64_t sizes[4];
                int na = attrs_of(&r, at, sizes);
                oc_grad_check("resize", &x, 1, 1, at, na, 1u, &rng);
                vq_tensor_release(x);
            }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_resize, resize_grad_adds_the_weights_of_every_output_that_reads_an_element)
{
    /* nearest 1 -> 3 along the last dim: each X element gets the sum of
     * its three outputs; linear half_pixel 2 -> 4: weights 1, .75/.25,
     * .25/.75, 1 */
    double gv[6] = {1, 2, 4, 8, 16, 32};
    vq_tensor *x = oc_from(VQ_F32, 2, (int64_t[]){2, 1}, (double[]){0, 0});
    vq_tensor *g = oc_from(VQ_F32, 2, (int64_t[]){2, 3}, gv);
    vq_attr at = VQ_ATTR_IS("sizes", ((int64_t[]){2, 3}), 2);
    vq_tensor *in[2] = {x, g};
    vq_tensor *dx = oc_run1("resize_grad", in, 2, &at, 1);
    oc_assert_close(dx, 2, (int64_t[]){2, 1}, (double[]){7, 56}, 0, 0);
    vq_tensor_release(dx);
    vq_tensor_release(g);
    vq_tensor_release(x);

    x = oc_from(VQ_F64, 1, (int64_t[]){2}, (double[]){0, 0});
    g = oc_from(VQ_F64, 1, (int64_t[]){4}, (double[]){1, 10, 100, 1000});
    vq_attr lin[2] = {VQ_ATTR_IS("sizes", ((int64_t[]){4}), 1), VQ_ATTR_S("mode", "linear")};
    in[0] = x;
    in[1] = g;
    dx = oc_run1("resize_grad", in, 2, lin, 2);
    oc_assert_close(dx, 1, (int64_t[]){2}, (double[]){1 + 7.5 + 25, 2.5 + 75 + 1000}, 1e-15, 0);
    vq_tensor_release(dx);
    vq_tensor_release(g);
    vq_tensor_release(x);
}

/* ---- preparation and errors ---- */

static int infer(const char *type, int nin, vq__meta *in, const vq_attr *at, int nat, vq__meta *out)
{
    const vq__op_def *def = vq__op_find(type);
    cr_assert(def, "no op %s", type);
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    return vq__op_infer(def, at, nat, nin, in, 1, out, params);
}

Test(ops_resize, unknown_dims_give_unknown_output_dims_with_scales_only)
{
    vq__meta x = {.dtype = VQ_F32, .ndim = 4, .shape = {-1, 3, -1, 8}}, out;
    vq_attr sc = VQ_ATTR_FS("scales", ((double[]){1, 1, 2, 0.5}), 4);
    cr_assert_eq(infer("resize", 1, &x, &sc, 1, &out), 0, "%s", vq_errmsg());
    cr_assert_eq(out.shape[0], -1);
    cr_assert_eq(out.shape[1], 3);
    cr_assert_eq(out.shape[2], -1);
    cr_assert_eq(out.shape[3], 4);
    vq_attr sz = VQ_ATTR_IS("sizes", ((int64_t[]){2, 3, 5, 7}), 4);
    cr_assert_eq(infer("resize", 1, &x, &sz, 1, &out), 0, "%s", vq_errmsg());
    for (int d = 0; d < 4; d++)
        cr_assert_eq(out.shape[d], ((int64_t[]){2, 3, 5, 7})[d]);
}

static void expect_error(vq_tensor **in, int nin, const char *type, const vq_attr *at, int nat,
                         const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, 1, at, nat), VQ_EINVAL, "expected \"%s\"", msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

Test(ops_resize, bad_attributes_and_inputs_name_the_attribute_slot_and_values)
{
    vq_tensor *x, *xi, *s, *empty, *g;
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 2, (int64_t[]){2, 3}), 0);
    cr_assert_eq(vq_tensor_new(&xi, VQ_I32, 2, (int64_t[]){2, 3}), 0);
    cr_assert_eq(vq_tensor_new(&s, VQ_F32, 0, NULL), 0);
    cr_assert_eq(vq_tensor_new(&empty, VQ_F32, 2, (int64_t[]){0, 3}), 0);
    cr_assert_eq(vq_tensor_new(&g, VQ_F32, 2, (int64_t[]){2, 5}), 0);
    vq_attr sz = VQ_ATTR_IS("sizes", ((int64_t[]){2, 4}), 2);
    vq_attr sc = VQ_ATTR_FS("scales", ((double[]){1, 2}), 2);
    expect_error(&x, 1, "resize", NULL, 0,
                 "resize: needs exactly one of the attributes sizes and scales, got neither");
    expect_error(&x, 1, "resize", (vq_attr[]){sz, sc}, 2, "got both");
    expect_error(&x, 1, "resize", (vq_attr[]){VQ_ATTR_IS("sizes", ((int64_t[]){4}), 1)}, 1,
                 "resize: attribute sizes: has 1 entries; X has 2 dims");
    expect_error(&x, 1, "resize", (vq_attr[]){VQ_ATTR_IS("sizes", ((int64_t[]){2, -1}), 2)}, 1,
                 "attribute sizes: entry 1 is -1, not in [0, 2^62)");
    expect_error(&x, 1, "resize", (vq_attr[]){VQ_ATTR_FS("scales", ((double[]){1, 0}), 2)}, 1,
                 "attribute scales: entry 1 is 0, not a positive number");
    expect_error(&x, 1, "resize", (vq_attr[]){VQ_ATTR_FS("scales", ((double[]){1, 1e300}), 2)}, 1,
                 "attribute scales: entry 1 (1e+300) makes dim 1 of 3 into");
    expect_error(&x, 1, "resize", (vq_attr[]){sz, VQ_ATTR_S("mode", "bilinear")}, 2,
                 "attribute mode: \"bilinear\" is not nearest, linear or cubic");
    expect_error(&x, 1, "resize",
                 (vq_attr[]){sz, VQ_ATTR_S("coordinate_transformation_mode", "corners")}, 2,
                 "attribute coordinate_transformation_mode: \"corners\" is not half_pixel");
    expect_error(&x, 1, "resize", (vq_attr[]){sz, VQ_ATTR_S("nearest_mode", "round")}, 2,
                 "attribute nearest_mode: \"round\" is not round_prefer_floor");
    expect_error(&x, 1, "resize", (vq_attr[]){sz, VQ_ATTR_FS("roi", ((double[]){0, 1}), 2)}, 2,
                 "attribute roi: has 2 entries; X has 2 dims, so it needs 4");
    expect_error(&xi, 1, "resize", (vq_attr[]){sz, VQ_ATTR_S("mode", "linear")}, 2,
                 "input X (slot 0)");
    expect_error(&xi, 1, "resize",
                 (vq_attr[]){sz, VQ_ATTR_S("coordinate_transformation_mode", "tf_crop_and_resize"),
                             VQ_ATTR_F("extrapolation_value", 0.5)},
                 3, "attribute extrapolation_value: 0.5 is not a value of X's dtype i32");
    expect_error(&s, 1, "resize", (vq_attr[]){VQ_ATTR_IS("sizes", NULL, 0)}, 1,
                 "is a scalar (rank 0)");
    expect_error(&empty, 1, "resize", &sz, 1, "has dim 0 empty: nothing to resize to 2 elements");
    vq_tensor *in[2] = {x, g};
    expect_error(in, 2, "resize_grad", &sz, 1, "resize's output shape");
    vq_tensor *all[5] = {x, xi, s, empty, g};
    for (int i = 0; i < 5; i++)
        vq_tensor_release(all[i]);
}
