/* relu, sigmoid, tanh and softmax, and their gradient ops, against plain
 * loops; gradients against finite differences; large inputs stay finite. */
#include "opcheck.h"

#include "../ops/ops_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_activation");
}

TestSuite(ops_activation, .init = setup, .fini = leak_check);

struct shape {
    int ndim;
    int64_t d[4];
};

/* Every rank up to 4, empty tensors, size-1 dims, a scalar. */
static const struct shape shapes[] = {
    {2, {3, 4}}, {1, {0}},       {1, {1}},    {3, {2, 0, 3}}, {2, {1, 1}},
    {0, {0}},    {3, {5, 1, 2}}, {1, {7}},    {4, {2, 3, 1, 2}},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static const vq_dtype floats[] = {VQ_F32, VQ_F64};

static double tol(vq_dtype dt)
{
    return dt == VQ_F32 ? 2e-6 : 1e-14;
}

static double ref_unary(const char *op, double x)
{
    if (!strcmp(op, "relu"))
        return x > 0 ? x : 0;
    if (!strcmp(op, "sigmoid"))
        return 1 / (1 + exp(-x));
    return tanh(x);
}

/* Values as doubles, malloc'd (at least one element). */
static double *values(vq_tensor *t)
{
    int64_t n = vq_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = oc_get(t, i);
    return v;
}

Test(ops_activation, relu_sigmoid_tanh_match_reference_in_f32_and_f64)
{
    const char *ops[] = {"relu", "sigmoid", "tanh"};
    for (int o = 0; o < 3; o++)
        for (int d = 0; d < 2; d++)
            for (size_t s = 0; s < NSHAPES; s++) {
                vq_tensor *x = oc_rand(&rng, floats[d], shapes[s].ndim, shapes[s].d, -6, 6);
                vq_tensor *y = oc_run1(ops[o], &x, 1, NULL, 0);
                double *want = values(x);
                for (int64_t i = 0; i < vq_tensor_numel(x); i++)
                    want[i] = ref_unary(ops[o], want[i]);
                oc_assert_close(y, shapes[s].ndim, shapes[s].d, want, tol(floats[d]), 1e-300);
                cr_assert_eq(vq_tensor_dtype(y), floats[d]);
                free(want);
                vq_tensor_release(y);
                vq_tensor_release(x);
            }
}

Test(ops_activation, sigmoid_and_tanh_saturate_without_overflow_for_large_inputs)
{
    const double in[] = {-1000, -100, -89, -30, 0, 30, 89, 100, 1000};
    const int64_t n[1] = {9};
    for (int d = 0; d < 2; d++) {
        vq_tensor *x = oc_from(floats[d], 1, n, in);
        vq_tensor *s = oc_run1("sigmoid", &x, 1, NULL, 0);
        vq_tensor *t = oc_run1("tanh", &x, 1, NULL, 0);
        double ws[9], wt[9];
        for (int i = 0; i < 9; i++) {
            /* The reference, stable form: no exp of a large positive number. */
            ws[i] = in[i] >= 0 ? 1 / (1 + exp(-in[i])) : exp(in[i]) / (1 + exp(in[i]));
            wt[i] = tanh(in[i]);
            cr_assert(isfinite(oc_get(s, i)) && isfinite(oc_get(t, i)), "x = %g", in[i]);
        }
        /* f32 results below 2^-126 are subnormal: absolute precision only. */
        oc_assert_close(s, 1, n, ws, tol(floats[d]), floats[d] == VQ_F32 ? 1e-38 : 1e-300);
        oc_assert_close(t, 1, n, wt, tol(floats[d]), 0);
        cr_assert_eq(oc_get(s, 0), 0.0);
        cr_assert_eq(oc_get(s, 8), 1.0);
        vq_tensor_release(s);
        vq_tensor_release(t);
        vq_tensor_release(x);
    }
}

Test(ops_activation, relu_keeps_nan_and_maps_negatives_to_zero)
{
    const int64_t n[1] = {4};
    vq_tensor *x = oc_from(VQ_F64, 1, n, (double[]){NAN, -2, 0, 3});
    vq_tensor *y = oc_run1("relu", &x, 1, NULL, 0);
    oc_assert_close(y, 1, n, (double[]){NAN, 0, 0, 3}, 0, 0);
    vq_tensor_release(y);
    vq_tensor_release(x);
}

/* softmax the plain way (no max subtracted: inputs here are small). */
static void ref_softmax(const double *x, double *out, const struct shape *s, int axis)
{
    int64_t outer = 1, len = s->d[axis], inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= s->d[i];
    for (int i = axis + 1; i < s->ndim; i++)
        inner *= s->d[i];
    for (int64_t a = 0; a < outer; a++)
        for (int64_t b = 0; b < inner; b++) {
            long double sum = 0;
            for (int64_t j = 0; j < len; j++)
                sum += expl(x[(a * len + j) * inner + b]);
            for (int64_t j = 0; j < len; j++) {
                int64_t i = (a * len + j) * inner + b;
                out[i] = (double)(expl(x[i]) / sum);
            }
        }
}

Test(ops_activation, softmax_matches_reference_on_every_axis)
{
    int checked = 0;
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < NSHAPES; s++)
            for (int axis = -shapes[s].ndim; axis < shapes[s].ndim; axis++) {
                vq_tensor *x = oc_rand(&rng, floats[d], shapes[s].ndim, shapes[s].d, -5, 5);
                vq_attr at = VQ_ATTR_I("axis", axis);
                vq_tensor *y = oc_run1("softmax", &x, 1, &at, 1);
                double *xv = values(x), *want = values(x);
                ref_softmax(xv, want, &shapes[s], axis < 0 ? axis + shapes[s].ndim : axis);
                oc_assert_close(y, shapes[s].ndim, shapes[s].d, want, tol(floats[d]), 1e-300);
                free(xv);
                free(want);
                vq_tensor_release(y);
                vq_tensor_release(x);
                checked++;
            }
    cr_assert_gt(checked, 30);
}

Test(ops_activation, softmax_defaults_to_the_last_axis)
{
    const int64_t s[2] = {3, 4};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -3, 3);
    vq_attr last = VQ_ATTR_I("axis", 1);
    vq_tensor *a = oc_run1("softmax", &x, 1, NULL, 0), *b = oc_run1("softmax", &x, 1, &last, 1);
    double *want = values(b);
    oc_assert_close(a, 2, s, want, 0, 0);
    free(want);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(x);
}

Test(ops_activation, softmax_stays_finite_for_large_inputs)
{
    const int64_t s[2] = {3, 4};
    const double in[12] = {1000, -1000, 999, 1000,     /* two maxima, one just below */
                           -1000, -1000, -1000, -1000, /* all equal and very negative */
                           1e30, 0, -1e30, 88};
    double want[12];
    double z = 2 + exp(-1.0);
    want[0] = want[3] = 1 / z;
    want[1] = 0;
    want[2] = exp(-1.0) / z;
    for (int i = 4; i < 8; i++)
        want[i] = 0.25;
    want[8] = 1;
    want[9] = want[10] = want[11] = 0;
    for (int d = 0; d < 2; d++) {
        vq_tensor *x = oc_from(floats[d], 2, s, in);
        vq_tensor *y = oc_run1("softmax", &x, 1, NULL, 0);
        for (int i = 0; i < 12; i++)
            cr_assert(isfinite(oc_get(y, i)), "element %d is %g", i, oc_get(y, i));
        oc_assert_close(y, 2, s, want, tol(floats[d]), 0);
        vq_tensor_release(y);
        vq_tensor_release(x);
    }
}

Test(ops_activation, activations_run_in_place)
{
    const int64_t s[2] = {2, 5};
    const char *ops[] = {"relu", "sigmoid",      "tanh",      "softmax",
                         "silu", "hard_sigmoid", "hard_swish"};
    for (int o = 0; o < 7; o++) {
        vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, -4, 4);
        vq_tensor *fresh = oc_run1(ops[o], &x, 1, NULL, 0);
        vq_tensor *out[1] = {x};
        cr_assert_eq(vq_op_run(NULL, ops[o], &x, 1, out, 1, NULL, 0), 0, "%s", vq_errmsg());
        double *want = values(fresh);
        oc_assert_close(x, 2, s, want, 0, 0);
        free(want);
        vq_tensor_release(fresh);
        vq_tensor_release(x);
    }
}

static int64_t ulps(float a, float b);

/* silu, hard_sigmoid (its defaults and its own alpha and beta) and
 * hard_swish against plain loops, across the hard ones' kinks. */
static double hard_sigmoid_ref(double x, double a, double b)
{
    double l = a * x + b;
    return l < 0 ? 0 : l > 1 ? 1 : l;
}

Test(ops_activation, silu_and_the_hard_ones_match_reference_in_f32_and_f64)
{
    vq_attr ab[2] = {VQ_ATTR_F("alpha", 0.3), VQ_ATTR_F("beta", 0.4)};
    for (int c = 0; c < 4; c++)
        for (int d = 0; d < 2; d++)
            for (size_t s = 0; s < NSHAPES; s++) {
                const char *op = c == 0 ? "silu" : c == 3 ? "hard_swish" : "hard_sigmoid";
                vq_tensor *x = oc_rand(&rng, floats[d], shapes[s].ndim, shapes[s].d, -6, 6);
                vq_tensor *y = oc_run1(op, &x, 1, c == 2 ? ab : NULL, c == 2 ? 2 : 0);
                double *want = values(x);
                for (int64_t i = 0; i < vq_tensor_numel(x); i++) {
                    double v = want[i];
                    want[i] = c == 0   ? v / (1 + exp(-v))
                              : c == 1 ? hard_sigmoid_ref(v, 0.2, 0.5)
                              : c == 2 ? hard_sigmoid_ref(v, 0.3, 0.4)
                                       : v * hard_sigmoid_ref(v, 1.0 / 6, 0.5);
                }
                oc_assert_close(y, shapes[s].ndim, shapes[s].d, want, tol(floats[d]), 1e-7);
                free(want);
                vq_tensor_release(y);
                vq_tensor_release(x);
            }
}

/* The f32 sigmoid, tanh and silu over a tensor large enough to be split
 * among the workers, and exp, log and erf: each element within 1 ulp of
 * the double function rounded to float, sigmoid within 2 and silu within
 * 3, which vmath computes in float (ops/math/vmath.c at the level VARQ_ISA
 * leaves; scripts/test.sh runs this at each). */
Test(ops_activation, f32_transcendental_ops_are_within_their_ulp_bounds_on_a_large_tensor)
{
    const char *ops[] = {"sigmoid", "tanh", "silu", "exp", "log", "erf"};
    const int64_t n[1] = {300007};
    for (int o = 0; o < 6; o++) {
        vq_tensor *x = oc_rand(&rng, VQ_F32, 1, n, o == 4 ? 0 : -30, 30);
        vq_tensor *y = oc_run1(ops[o], &x, 1, NULL, 0);
        const float *xv = vq_tensor_data(x), *yv = vq_tensor_data(y);
        for (int64_t i = 0; i < n[0]; i++) {
            double v = xv[i];
            double w = o == 0   ? 1 / (1 + exp(-v))
                       : o == 1 ? tanh(v)
                       : o == 2 ? v / (1 + exp(-v))
                       : o == 3 ? exp(v)
                       : o == 4 ? log(v)
                                : erf(v);
            float want = (float)w;
            cr_assert_leq(ulps(yv[i], want),
                          o == 0   ? 2
                          : o == 2 ? 3
                                   : 1,
                          "%s(%a) = %a, want %a", ops[o], xv[i], yv[i], want);
        }
        vq_tensor_release(y);
        vq_tensor_release(x);
    }
}

/* softmax and log_softmax of f32 along a contiguous axis (vmath's
 * exp_sub), long lines and short, against the double formulas. */
Test(ops_activation, f32_softmax_of_contiguous_lines_matches_double_reference)
{
    const int64_t shapes2[3][2] = {{3, 1000}, {50, 7}, {2, 1}};
    for (int s = 0; s < 3; s++)
        for (int lg = 0; lg < 2; lg++) {
            vq_tensor *x = oc_rand(&rng, VQ_F32, 2, shapes2[s], -20, 20);
            vq_tensor *y = oc_run1(lg ? "log_softmax" : "softmax", &x, 1, NULL, 0);
            double *want = values(x);
            int64_t rows = shapes2[s][0], len = shapes2[s][1];
            for (int64_t r = 0; r < rows; r++) {
                double max = -INFINITY, sum = 0, *w = want + r * len;
                for (int64_t j = 0; j < len; j++)
                    max = w[j] > max ? w[j] : max;
                for (int64_t j = 0; j < len; j++)
                    sum += exp(w[j] - max);
                for (int64_t j = 0; j < len; j++)
                    w[j] = lg ? w[j] - max - log(sum) : exp(w[j] - max) / sum;
            }
            oc_assert_close(y, 2, shapes2[s], want, 1e-6, 1e-30);
            free(want);
            vq_tensor_release(y);
            vq_tensor_release(x);
        }
}

/* ---- gradient ops ---- */

Test(ops_activation, gradient_ops_match_reference_in_f32_and_f64)
{
    const char *ops[] = {"relu_grad", "sigmoid_grad", "tanh_grad"};
    for (int o = 0; o < 3; o++)
        for (int d = 0; d < 2; d++)
            for (size_t s = 0; s < NSHAPES; s++) {
                const struct shape *sh = &shapes[s];
                vq_tensor *y = oc_rand(&rng, floats[d], sh->ndim, sh->d, o == 0 ? -1 : 0, 1);
                vq_tensor *g = oc_rand(&rng, floats[d], sh->ndim, sh->d, -2, 2);
                vq_tensor *in[2] = {y, g};
                vq_tensor *dx = oc_run1(ops[o], in, 2, NULL, 0);
                double *want = values(y);
                for (int64_t i = 0; i < vq_tensor_numel(y); i++) {
                    double a = oc_get(y, i), b = oc_get(g, i);
                    want[i] = o == 0 ? (a > 0 ? b : 0) : o == 1 ? b * a * (1 - a) : b * (1 - a * a);
                }
                oc_assert_close(dx, sh->ndim, sh->d, want, tol(floats[d]), 1e-7);
                free(want);
                vq_tensor_release(dx);
                vq_tensor_release(y);
                vq_tensor_release(g);
            }
}

Test(ops_activation, softmax_grad_matches_reference_on_every_axis)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < NSHAPES; s++) {
            const struct shape *sh = &shapes[s];
            for (int axis = 0; axis < sh->ndim; axis++) {
                vq_tensor *x = oc_rand(&rng, floats[d], sh->ndim, sh->d, -3, 3);
                vq_attr at = VQ_ATTR_I("axis", axis);
                vq_tensor *y = oc_run1("softmax", &x, 1, &at, 1);
                vq_tensor *g = oc_rand(&rng, floats[d], sh->ndim, sh->d, -2, 2);
                vq_tensor *in[2] = {y, g};
                vq_tensor *dx = oc_run1("softmax_grad", in, 2, &at, 1);
                int64_t outer = 1, len = sh->d[axis], inner = 1;
                for (int i = 0; i < axis; i++)
                    outer *= sh->d[i];
                for (int i = axis + 1; i < sh->ndim; i++)
                    inner *= sh->d[i];
                double *want = values(y);
                for (int64_t a = 0; a < outer; a++)
                    for (int64_t b = 0; b < inner; b++) {
                        double dot = 0;
                        for (int64_t j = 0; j < len; j++) {
                            int64_t i = (a * len + j) * inner + b;
                            dot += oc_get(y, i) * oc_get(g, i);
                        }
                        for (int64_t j = 0; j < len; j++) {
                            int64_t i = (a * len + j) * inner + b;
                            want[i] = oc_get(y, i) * (oc_get(g, i) - dot);
                        }
                    }
                oc_assert_close(dx, sh->ndim, sh->d, want, tol(floats[d]), 1e-6);
                free(want);
                vq_tensor_release(dx);
                vq_tensor_release(g);
                vq_tensor_release(y);
                vq_tensor_release(x);
            }
        }
}

Test(ops_activation, x_gradient_ops_match_reference_in_f32_and_f64)
{
    const char *ops[] = {"silu_grad", "hard_sigmoid_grad", "hard_swish_grad"};
    vq_attr ab[2] = {VQ_ATTR_F("alpha", 0.3), VQ_ATTR_F("beta", 0.4)};
    for (int o = 0; o < 3; o++)
        for (int d = 0; d < 2; d++)
            for (size_t s = 0; s < NSHAPES; s++) {
                const struct shape *sh = &shapes[s];
                vq_tensor *x = oc_rand(&rng, floats[d], sh->ndim, sh->d, -6, 6);
                vq_tensor *g = oc_rand(&rng, floats[d], sh->ndim, sh->d, -2, 2);
                vq_tensor *in[2] = {x, g};
                vq_tensor *dx = oc_run1(ops[o], in, 2, o == 1 ? ab : NULL, o == 1 ? 2 : 0);
                double *want = values(x);
                for (int64_t i = 0; i < vq_tensor_numel(x); i++) {
                    double v = oc_get(x, i), b = oc_get(g, i), sg = 1 / (1 + exp(-v));
                    double l1 = 0.3 * v + 0.4, l2 = v / 6 + 0.5;
                    want[i] = o == 0   ? b * sg * (1 + v * (1 - sg))
                              : o == 1 ? (l1 > 0 && l1 < 1 ? b * 0.3 : 0)
                                       : b * (hard_sigmoid_ref(v, 1.0 / 6, 0.5) +
                                              (l2 > 0 && l2 < 1 ? v / 6 : 0));
                }
                oc_assert_close(dx, sh->ndim, sh->d, want, tol(floats[d]), 1e-6);
                free(want);
                vq_tensor_release(dx);
                vq_tensor_release(x);
                vq_tensor_release(g);
            }
}

/* Values uniform in +-[0.05, 2]: away from relu's kink at 0. */
static vq_tensor *away_from_zero(int ndim, const int64_t *shape)
{
    vq_tensor *x = oc_rand(&rng, VQ_F64, ndim, shape, 0.05, 2);
    for (int64_t i = 0; i < vq_tensor_numel(x); i++)
        if (oc_next(&rng) & 1)
            oc_set(x, i, -oc_get(x, i));
    return x;
}

Test(ops_activation, gradients_match_finite_differences)
{
    const char *ops[] = {"relu", "sigmoid", "tanh", "silu", "hard_sigmoid", "hard_swish"};
    vq_attr ab[2] = {VQ_ATTR_F("alpha", 0.3), VQ_ATTR_F("beta", 0.4)};
    for (int o = 0; o < 6; o++)
        for (size_t s = 0; s < NSHAPES; s++) {
            vq_tensor *x = away_from_zero(shapes[s].ndim, shapes[s].d);
            oc_grad_check(ops[o], &x, 1, 1, NULL, 0, 1, &rng);
            /* the hard ones' flat parts too: x scaled past their kinks
             * (+-2.5 for the default hard_sigmoid, +-3 for hard_swish, -4/3
             * and 2 for alpha 0.3, beta 0.4) */
            if (o >= 4) {
                for (int64_t i = 0; i < vq_tensor_numel(x); i++)
                    oc_set(x, i, oc_get(x, i) * 2.4);
                oc_grad_check(ops[o], &x, 1, 1, NULL, 0, 1, &rng);
                oc_grad_check(ops[o], &x, 1, 1, ab, o == 4 ? 2 : 0, 1, &rng);
            }
            vq_tensor_release(x);
        }
    for (size_t s = 0; s < NSHAPES; s++)
        for (int axis = -1; axis < shapes[s].ndim; axis++) {
            if (shapes[s].ndim == 0)
                continue;
            vq_tensor *x = oc_rand(&rng, VQ_F64, shapes[s].ndim, shapes[s].d, -3, 3);
            vq_attr at = VQ_ATTR_I("axis", axis);
            /* axis -1 checks the default, given by no attribute at all. */
            oc_grad_check("softmax", &x, 1, 1, &at, axis < 0 ? 0 : 1, 1, &rng);
            vq_tensor_release(x);
        }
    cr_log_info("largest gradient error: %.3g", oc_worst_grad_error());
}

/* ---- errors ---- */

static void expect_fail(const char *type, vq_tensor *const *in, int nin, const vq_attr *at,
                        int nat, const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, 1, at, nat), VQ_EINVAL, "%s succeeded", type);
    cr_assert(strstr(vq_errmsg(), msg), "%s: expected \"%s\" in: %s", type, msg, vq_errmsg());
}

Test(ops_activation, bad_calls_name_the_op_and_the_slot_or_attribute)
{
    const int64_t s[2] = {2, 3}, t[2] = {3, 2};
    vq_tensor *xi = oc_rand(&rng, VQ_I32, 2, s, -3, 3);
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, -3, 3);
    vq_tensor *xd = oc_rand(&rng, VQ_F64, 2, s, -3, 3);
    vq_tensor *xt = oc_rand(&rng, VQ_F32, 2, t, -3, 3);
    vq_tensor *scalar = oc_rand(&rng, VQ_F32, 0, s, -3, 3);
    expect_fail("relu", &xi, 1, NULL, 0, "relu: input X (slot 0): dtype i32 not supported");
    expect_fail("sigmoid", &xi, 1, NULL, 0, "sigmoid: input X (slot 0): dtype i32");
    expect_fail("softmax", &xi, 1, NULL, 0, "softmax: input X (slot 0): dtype i32");
    expect_fail("softmax", &scalar, 1, NULL, 0, "softmax: input X (slot 0): has 0 dims");
    vq_attr axis2 = VQ_ATTR_I("axis", 2), axism3 = VQ_ATTR_I("axis", -3);
    expect_fail("softmax", &x, 1, &axis2, 1, "softmax: attribute axis: axis 2 is outside [-2, 2)");
    expect_fail("softmax", &x, 1, &axism3, 1, "softmax: attribute axis: axis -3 is outside");
    vq_attr axisf = VQ_ATTR_F("axis", 0.5);
    expect_fail("softmax", &x, 1, &axisf, 1, "softmax: attribute axis: expected int");
    vq_tensor *pair[2] = {x, xt};
    expect_fail("relu_grad", pair, 2, NULL, 0, "relu_grad: input dOut (slot 1): shape [3,2]");
    expect_fail("softmax_grad", pair, 2, NULL, 0, "softmax_grad: input dOut (slot 1): shape");
    pair[1] = xd;
    expect_fail("tanh_grad", pair, 2, NULL, 0, "tanh_grad: input dOut (slot 1): dtype f64 differs");
    expect_fail("sigmoid_grad", pair, 1, NULL, 0, "sigmoid_grad: takes 2 inputs, got 1");
    pair[0] = xi;
    pair[1] = xi;
    expect_fail("sigmoid_grad", pair, 2, NULL, 0, "sigmoid_grad: input Out (slot 0): dtype i32");
    vq_tensor_release(xi);
    vq_tensor_release(x);
    vq_tensor_release(xd);
    vq_tensor_release(xt);
    vq_tensor_release(scalar);
}

Test(ops_activation, infer_propagates_unknown_dims)
{
    vq__meta in[2] = {{VQ_F32, 3, {-1, 4, -1}}, {VQ_F32, 3, {2, -1, -1}}}, out[1];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    const vq__op_def *relu = vq__op_find("relu"), *softmax = vq__op_find("softmax");
    cr_assert_eq(vq__op_infer(relu, NULL, 0, 1, in, 1, out, params), 0, "%s", vq_errmsg());
    cr_assert(out[0].ndim == 3 && out[0].shape[0] == -1 && out[0].shape[1] == 4 &&
              out[0].shape[2] == -1);
    vq_attr at = VQ_ATTR_I("axis", 0);
    cr_assert_eq(vq__op_infer(softmax, &at, 1, 1, in, 1, out, params), 0, "%s", vq_errmsg());
    cr_assert(out[0].ndim == 3 && out[0].shape[0] == -1 && out[0].shape[1] == 4);
    /* A gradient op takes each dim from whichever input knows it. */
    cr_assert_eq(vq__op_infer(vq__op_find("relu_grad"), NULL, 0, 2, in, 1, out, params), 0, "%s",
                 vq_errmsg());
    cr_assert(out[0].shape[0] == 2 && out[0].shape[1] == 4 && out[0].shape[2] == -1);
    cr_assert_eq(vq__op_infer(vq__op_find("softmax_grad"), &at, 1, 2, in, 1, out, params), 0,
                 "%s", vq_errmsg());
    cr_assert(out[0].shape[0] == 2 && out[0].shape[1] == 4 && out[0].shape[2] == -1);
}

/* A gradient maker's emitted ops, recorded instead of run. */
struct recorded {
    int n;
    char type[4][32];
    char in[4][3][16];
    int nin[4];
    char out[4][16];
};

static int record(void *user, const char *type, const char *const *in, int nin,
                  const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    (void)attrs;
    (void)nattrs;
    struct recorded *r = user;
    cr_assert_lt(r->n, 4);
    cr_assert_eq(nout, 1);
    snprintf(r->type[r->n], 32, "%s", type);
    for (int i = 0; i < nin && i < 3; i++)
        snprintf(r->in[r->n][i], 16, "%s", in[i]);
    r->nin[r->n] = nin;
    snprintf(r->out[r->n], 16, "%s", out[0]);
    r->n++;
    return 0;
}

Test(ops_activation, gradient_makers_read_the_forward_output_not_the_input)
{
    const char *ops[] = {"relu", "sigmoid", "tanh", "softmax"};
    const char *in[1] = {"x"}, *out[1] = {"y"}, *din[1] = {"dx"}, *dout[1] = {"dy"};
    for (int o = 0; o < 4; o++) {
        struct recorded r = {0};
        const vq__op_def *def = vq__op_find(ops[o]);
        vq__grad g = {.def = def, .in = in, .nin = 1, .out = out, .nout = 1, .din = din,
                      .dout = dout, .emit = record, .user = &r};
        cr_assert_eq(def->grad(&g), 0, "%s", vq_errmsg());
        cr_assert_eq(r.n, 1);
        cr_assert(!strncmp(r.type[0], ops[o], strlen(ops[o])) && strstr(r.type[0], "_grad"));
        cr_assert_str_eq(r.in[0][0], "y");
        cr_assert_str_eq(r.in[0][1], "dy");
        cr_assert_str_eq(r.out[0], "dx");
        /* Nothing asked for, nothing emitted. */
        const char *none[1] = {NULL};
        g.din = none;
        r.n = 0;
        cr_assert_eq(def->grad(&g), 0);
        cr_assert_eq(r.n, 0);
    }
}

/* The distance in ulps between two finite floats of the same sign. */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof a);
    memcpy(&ib, &b, sizeof b);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

Test(ops_activation, f32_tanh_is_within_one_ulp_of_the_double_tanh)
{
    /* every 61st float of [0, 10] with both signs (36 million values), in
     * chunks, then the edges: zeros, tiny, subnormal, large, infinities,
     * NaN */
    const int64_t chunk = 1 << 20;
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, &chunk), 0);
    float *xv = vq_tensor_data(x);
    int64_t worst = 0, n = 0;
    uint32_t bits = 0; /* walks 0 .. bits(10.0f), each value used with both signs */
    for (bool last = false; !last;) {
        int64_t k = 0;
        for (; k < chunk && bits <= 0x41200000u; k += 2, bits += 61) {
            memcpy(&xv[k], &bits, sizeof bits);
            xv[k + 1] = -xv[k];
        }
        last = bits > 0x41200000u;
        for (int64_t i = k; i < chunk; i++)
            xv[i] = 0;
        vq_tensor *y = oc_run1("tanh", &x, 1, NULL, 0);
        const float *yv = vq_tensor_data(y);
        for (int64_t i = 0; i < k; i++, n++) {
            float want = (float)tanh((double)xv[i]);
            int64_t u = ulps(yv[i], want);
            worst = u > worst ? u : worst;
            cr_assert_leq(u, 1, "tanh(%a) = %a, want %a", xv[i], yv[i], want);
        }
        vq_tensor_release(y);
    }
    vq_tensor_release(x);
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 9.1f, 1e30f, -1e30f,
                          INFINITY, -INFINITY, NAN, -NAN};
    const int64_t ne = (int64_t)(sizeof edge / sizeof edge[0]);
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, &ne), 0);
    memcpy(vq_tensor_data(x), edge, sizeof edge);
    vq_tensor *y = oc_run1("tanh", &x, 1, NULL, 0);
    const float *yv = vq_tensor_data(y);
    for (int64_t i = 0; i < ne; i++) {
        float want = tanhf(edge[i]);
        if (isnan(edge[i])) {
            cr_assert(isnan(yv[i]));
            continue;
        }
        cr_assert_eq(signbit(yv[i]), signbit(want), "tanh(%a) = %a", edge[i], yv[i]);
        cr_assert_leq(ulps(yv[i], want), 1, "tanh(%a) = %a, want %a", edge[i], yv[i], want);
    }
    vq_tensor_release(y);
    vq_tensor_release(x);
    fprintf(stderr, "f32 tanh: %lld values, largest difference %lld ulp\n", (long long)n,
            (long long)worst);
}
