/* sum and mean over axes, and their gradients, against a plain loop that
 * adds each element of X into the output element its kept indices name. */
#include "opcheck.h"

#include "../ops/ops_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_reduce");
}

TestSuite(ops_reduce, .init = setup, .fini = leak_check);

struct reduce_case {
    int ndim;
    int64_t shape[5];
    int naxes;
    int64_t axes[5];
};

static const struct reduce_case cases[] = {
    {2, {3, 4}, 0, {0}},
    {2, {3, 4}, 1, {0}},
    {2, {3, 4}, 1, {1}},
    {2, {3, 4}, 1, {-1}},
    {2, {3, 4}, 2, {1, 0}},
    {3, {2, 3, 4}, 1, {1}},
    {3, {2, 3, 4}, 2, {0, 2}},
    {3, {2, 3, 4}, 2, {-3, -1}},
    {3, {2, 0, 3}, 1, {1}},
    {3, {2, 0, 3}, 1, {0}},
    {3, {2, 0, 3}, 0, {0}},
    {3, {1, 5, 1}, 2, {0, 2}},
    {3, {1, 5, 1}, 1, {1}},
    {0, {0}, 0, {0}},
    {4, {4, 1, 3, 2}, 2, {1, 3}},
    {5, {2, 3, 1, 2, 3}, 3, {0, 2, 4}},
    {1, {7}, 1, {0}},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* Whether X's dim d is reduced: every dim for an empty axes list. */
static bool is_reduced(const struct reduce_case *rc, int d)
{
    if (rc->naxes == 0)
        return true;
    for (int i = 0; i < rc->naxes; i++)
        if ((rc->axes[i] + rc->ndim) % rc->ndim == d)
            return true;
    return false;
}

/* The output shape; returns its rank. */
static int reduced_shape(const struct reduce_case *rc, bool keepdim, int64_t *out)
{
    int n = 0;
    for (int d = 0; d < rc->ndim; d++) {
        if (!is_reduced(rc, d))
            out[n++] = rc->shape[d];
        else if (keepdim)
            out[n++] = 1;
    }
    return n;
}

/* The output element that X's element i adds into. */
static int64_t out_index(const struct reduce_case *rc, int64_t i)
{
    int64_t idx[5], o = 0;
    for (int d = rc->ndim - 1; d >= 0; d--) {
        idx[d] = i % rc->shape[d];
        i /= rc->shape[d];
    }
    for (int d = 0; d < rc->ndim; d++)
        if (!is_reduced(rc, d))
            o = o * rc->shape[d] + idx[d];
    return o;
}

static int64_t count(int n, const int64_t *shape)
{
    int64_t c = 1;
    for (int i = 0; i < n; i++)
        c *= shape[i];
    return c;
}

/* Runs sum or mean on one case and compares with the reference loop,
 * integers with wrapping sums done in uint64_t and narrowed. */
static void check_case(const char *op, const struct reduce_case *rc, vq_dtype dt, bool keepdim)
{
    bool ints = dt == VQ_I32 || dt == VQ_I64;
    vq_tensor *x = oc_rand(&rng, dt, rc->ndim, rc->shape, ints ? -1000 : -2, ints ? 1000 : 2);
    vq_attr at[2] = {VQ_ATTR_IS("axes", rc->axes, rc->naxes), VQ_ATTR_B("keepdim", keepdim)};
    vq_tensor *o = oc_run1(op, &x, 1, at, 2);
    int64_t oshape[5];
    int ondim = reduced_shape(rc, keepdim, oshape);
    int64_t on = count(ondim, oshape), xn = count(rc->ndim, rc->shape);
    double want[64] = {0};
    for (int64_t i = 0; i < xn; i++)
        want[out_index(rc, i)] += oc_get(x, i);
    for (int64_t j = 0; j < on; j++) {
        if (!strcmp(op, "mean"))
            want[j] = on && xn / on ? want[j] / (double)(xn / on) : NAN;
    }
    oc_assert_close(o, ondim, oshape, want, dt == VQ_F32 ? 1e-6 : 1e-14, 1e-12);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_reduce, sum_matches_reference_in_every_numeric_dtype)
{
    vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int t = 0; t < 4; t++)
        for (size_t c = 0; c < NCASES; c++)
            for (int k = 0; k < 2; k++)
                check_case("sum", &cases[c], dts[t], k);
}

Test(ops_reduce, mean_matches_reference_in_float_dtypes)
{
    vq_dtype dts[] = {VQ_F32, VQ_F64};
    for (int t = 0; t < 2; t++)
        for (size_t c = 0; c < NCASES; c++)
            for (int k = 0; k < 2; k++)
                check_case("mean", &cases[c], dts[t], k);
}

Test(ops_reduce, empty_axes_reduce_to_a_scalar_unless_keepdim)
{
    int64_t s[3] = {2, 3, 4}, ones[3] = {1, 1, 1};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 3, s, -1, 1);
    double total = 0;
    for (int i = 0; i < 24; i++)
        total += oc_get(x, i);
    vq_tensor *o = oc_run1("sum", &x, 1, NULL, 0);
    oc_assert_close(o, 0, NULL, &total, 1e-14, 0);
    vq_tensor_release(o);
    vq_attr kd = VQ_ATTR_B("keepdim", true);
    o = oc_run1("sum", &x, 1, &kd, 1);
    oc_assert_close(o, 3, ones, &total, 1e-14, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_reduce, mean_of_zero_elements_is_nan)
{
    int64_t s[2] = {0, 3}, three[1] = {3};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0, 1);
    vq_attr ax = VQ_ATTR_IS("axes", (int64_t[]){0}, 1);
    vq_tensor *o = oc_run1("mean", &x, 1, &ax, 1);
    oc_assert_close(o, 1, three, (double[]){NAN, NAN, NAN}, 0, 0);
    for (int i = 0; i < 3; i++)
        cr_assert(isnan(oc_get(o, i)));
    vq_tensor_release(o);
    o = oc_run1("sum", &x, 1, &ax, 1);
    oc_assert_close(o, 1, three, (double[]){0, 0, 0}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_reduce, integer_sums_wrap)
{
    int64_t s[1] = {3};
    int32_t a[3] = {INT32_MAX, 1, 1};
    int64_t b[3] = {INT64_MAX, 1, 1};
    vq_tensor *x, *y;
    cr_assert_eq(vq_tensor_from(&x, VQ_I32, 1, s, a), 0);
    cr_assert_eq(vq_tensor_from(&y, VQ_I64, 1, s, b), 0);
    vq_tensor *ox = oc_run1("sum", &x, 1, NULL, 0), *oy = oc_run1("sum", &y, 1, NULL, 0);
    cr_assert_eq(*(int32_t *)vq_tensor_data(ox), INT32_MIN + 1);
    cr_assert_eq(*(int64_t *)vq_tensor_data(oy), INT64_MIN + 1);
    vq_tensor_release(ox);
    vq_tensor_release(oy);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_reduce, f32_sums_accumulate_in_double)
{
    /* In float, 2^24 + 1 rounds back to 2^24 at every step. */
    int64_t s[1] = {5};
    vq_tensor *x = oc_from(VQ_F32, 1, s, (double[]){16777216, 1, 1, 1, 1});
    vq_tensor *o = oc_run1("sum", &x, 1, NULL, 0);
    cr_assert_eq(oc_get(o, 0), 16777220.0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_reduce, gradients_match_finite_differences)
{
    const char *ops[] = {"sum", "mean"};
    for (int i = 0; i < 2; i++)
        for (size_t c = 0; c < NCASES; c++)
            for (int k = 0; k < 2; k++) {
                const struct reduce_case *rc = &cases[c];
                vq_tensor *x = oc_rand(&rng, VQ_F64, rc->ndim, rc->shape, -2, 2);
                vq_attr at[2] = {VQ_ATTR_IS("axes", rc->axes, rc->naxes),
                                 VQ_ATTR_B("keepdim", k)};
                oc_grad_check(ops[i], &x, 1, 1, at, 2, 1, &rng);
                vq_tensor_release(x);
            }
    int64_t s[2] = {3, 2};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -2, 2);
    oc_grad_check("mean", &x, 1, 1, NULL, 0, 1, &rng);
    vq_tensor_release(x);
    cr_log_info("largest gradient error: %.3g", oc_worst_grad_error());
}

Test(ops_reduce, gradient_ops_spread_dout_in_f32)
{
    int64_t xs[2] = {2, 3}, gs[1] = {2};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1);
    vq_tensor *g = oc_from(VQ_F32, 1, gs, (double[]){1.5, -3});
    vq_tensor *in[2] = {x, g};
    vq_attr ax = VQ_ATTR_IS("axes", (int64_t[]){1}, 1);
    vq_tensor *d = oc_run1("sum_grad", in, 2, &ax, 1);
    oc_assert_close(d, 2, xs, (double[]){1.5, 1.5, 1.5, -3, -3, -3}, 0, 0);
    vq_tensor_release(d);
    d = oc_run1("mean_grad", in, 2, &ax, 1);
    oc_assert_close(d, 2, xs, (double[]){0.5, 0.5, 0.5, -1, -1, -1}, 1e-7, 0);
    vq_tensor_release(d);
    vq_tensor_release(x);
    vq_tensor_release(g);
}

static void expect_error(const char *op, vq_tensor *const *in, int nin, const vq_attr *at,
                         int nat, const char *msg)
{
    cr_assert_eq(oc_try(op, in, nin, 1, at, nat), VQ_EINVAL, "%s did not fail", op);
    cr_assert(strstr(vq_errmsg(), msg), "message \"%s\" lacks \"%s\"", vq_errmsg(), msg);
}

Test(ops_reduce, bad_axes_dtypes_and_shapes_name_the_op_and_slot)
{
    int64_t s[2] = {3, 4}, gs[1] = {4};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0, 1), *xi = oc_rand(&rng, VQ_I32, 2, s, 0, 9);
    vq_tensor *xb = oc_rand(&rng, VQ_BOOL, 2, s, 0, 1), *sc = oc_rand(&rng, VQ_F32, 0, NULL, 0, 1);
    vq_tensor *g = oc_rand(&rng, VQ_F32, 1, gs, 0, 1);
    vq_attr out_of_range = VQ_ATTR_IS("axes", (int64_t[]){2}, 1);
    expect_error("sum", &x, 1, &out_of_range, 1, "sum: attribute axes: axis 2 is outside [-2, 2)");
    vq_attr neg = VQ_ATTR_IS("axes", (int64_t[]){-3}, 1);
    expect_error("mean", &x, 1, &neg, 1, "mean: attribute axes: axis -3 is outside");
    vq_attr dup = VQ_ATTR_IS("axes", ((int64_t[]){1, -1}), 2);
    expect_error("sum", &x, 1, &dup, 1, "sum: attribute axes: axis -1 repeats axis 1");
    vq_attr zero = VQ_ATTR_IS("axes", (int64_t[]){0}, 1);
    expect_error("sum", &sc, 1, &zero, 1, "sum: attribute axes: X is a scalar");
    expect_error("mean", &xi, 1, NULL, 0, "mean: input X (slot 0): dtype i32 not supported");
    expect_error("sum", &xb, 1, NULL, 0, "sum: input X (slot 0): dtype bool not supported");
    vq_attr typed = VQ_ATTR_I("axes", 0);
    expect_error("sum", &x, 1, &typed, 1, "sum: attribute axes: expected ints, got int");
    vq_attr kd = VQ_ATTR_I("keepdim", 2);
    expect_error("sum", &x, 1, &kd, 1, "sum: attribute keepdim: expected bool");
    /* dOut must have X's reduced shape: [3] for axes [1], not [4]. */
    vq_tensor *in[2] = {x, g};
    vq_attr ax1 = VQ_ATTR_IS("axes", (int64_t[]){1}, 1);
    expect_error("sum_grad", in, 2, &ax1, 1,
                 "sum_grad: input dOut (slot 1): shape [4] is not X's reduced shape [3]");
    in[0] = xi;
    expect_error("mean_grad", in, 2, &ax1, 1, "mean_grad: input X (slot 0): dtype i32");
    vq_tensor_release(x);
    vq_tensor_release(xi);
    vq_tensor_release(xb);
    vq_tensor_release(sc);
    vq_tensor_release(g);
}

/* Graph preparation: -1 dims go through, and reduced unknown dims vanish. */
Test(ops_reduce, inference_passes_unknown_dims_through)
{
    const vq__op_def *def = vq__op_find("sum");
    cr_assert(def);
    vq__meta in = {.dtype = VQ_F32, .ndim = 3, .shape = {-1, 3, -1}}, out;
    unsigned char params[VQ__MAX_PARAMS];
    vq_attr at[2] = {VQ_ATTR_IS("axes", (int64_t[]){2}, 1), VQ_ATTR_B("keepdim", false)};
    cr_assert_eq(vq__op_infer(def, at, 2, 1, &in, 1, &out, params), 0, "%s", vq_errmsg());
    cr_assert_eq(out.ndim, 2);
    cr_assert(out.shape[0] == -1 && out.shape[1] == 3);
    at[1] = VQ_ATTR_B("keepdim", true);
    cr_assert_eq(vq__op_infer(def, at, 2, 1, &in, 1, &out, params), 0, "%s", vq_errmsg());
    cr_assert(out.ndim == 3 && out.shape[0] == -1 && out.shape[1] == 3 && out.shape[2] == 1);
    vq__meta gin[2] = {in, {.dtype = VQ_F32, .ndim = 3, .shape = {2, -1, 1}}};
    cr_assert_eq(vq__op_infer(vq__op_find("mean_grad"), at, 2, 2, gin, 1, &out, params), 0, "%s",
                 vq_errmsg());
    cr_assert(out.ndim == 3 && out.shape[0] == -1 && out.shape[2] == -1);
}
