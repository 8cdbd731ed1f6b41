/* cross_entropy, softmax_cross_entropy, square_error and mse, and their
 * gradient ops, against plain loops; gradients against finite differences;
 * labels out of range, wrong shapes and dtypes are errors naming the op. */
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
    rng = oc_seed("ops_loss");
}

TestSuite(ops_loss, .init = setup, .fini = leak_check);

static const vq_dtype floats[] = {VQ_F32, VQ_F64};
static const vq_dtype ints[] = {VQ_I32, VQ_I64};

static double tol(vq_dtype dt)
{
    return dt == VQ_F32 ? 2e-6 : 1e-14;
}

/* X [..., C] and its labels, shaped X.shape[:-1] (+ [1] if keep1). */
struct class_case {
    int ndim;
    int64_t x[4];
    bool keep1;
};

static const struct class_case class_cases[] = {
    {2, {4, 5}, true},  {2, {4, 5}, false}, {3, {2, 3, 4}, false}, {3, {2, 3, 4}, true},
    {2, {0, 3}, true},  {2, {0, 3}, false}, {2, {1, 1}, true},     {1, {5}, false},
    {1, {5}, true},     {2, {0, 0}, false}, {4, {1, 2, 1, 3}, true}, {2, {3, 1}, false},
};
#define NCLASS (sizeof class_cases / sizeof class_cases[0])

static int64_t classes(const struct class_case *c)
{
    return c->x[c->ndim - 1];
}

/* The per-row shape X.shape[:-1] + [1]; returns its element count. */
static int64_t rows_shape(const struct class_case *c, int64_t *rows)
{
    int64_t n = 1;
    for (int i = 0; i < c->ndim - 1; i++)
        n *= rows[i] = c->x[i];
    rows[c->ndim - 1] = 1;
    return n;
}

/* Rows but no classes: every label is out of range (tested on its own). */
static bool no_valid_label(const struct class_case *c)
{
    int64_t rows[4];
    return classes(c) == 0 && rows_shape(c, rows) > 0;
}

static vq_tensor *labels_for(const struct class_case *c, vq_dtype dt)
{
    int64_t rows[4];
    rows_shape(c, rows);
    return oc_rand(&rng, dt, c->keep1 ? c->ndim : c->ndim - 1, rows, 0, (double)classes(c));
}

static double *values(vq_tensor *t)
{
    int64_t n = vq_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = oc_get(t, i);
    return v;
}

static void expect_fail(const char *type, vq_tensor *const *in, int nin, int nout,
                        const vq_attr *at, int nat, const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, nout, at, nat), VQ_EINVAL, "%s succeeded", type);
    cr_assert(strstr(vq_errmsg(), msg), "%s: expected \"%s\" in: %s", type, msg, vq_errmsg());
}

/* ---- cross_entropy ---- */

Test(ops_loss, cross_entropy_matches_reference)
{
    for (size_t k = 0; k < NCLASS; k++)
        for (int d = 0; d < 2; d++)
            for (int li = 0; li < 2; li++) {
                const struct class_case *c = &class_cases[k];
                if (no_valid_label(c))
                    continue;
                vq_tensor *x = oc_rand(&rng, floats[d], c->ndim, c->x, 0.01, 1);
                vq_tensor *l = labels_for(c, ints[li]);
                vq_tensor *in[2] = {x, l};
                vq_tensor *o = oc_run1("cross_entropy", in, 2, NULL, 0);
                int64_t rows[4], n = rows_shape(c, rows), C = classes(c);
                double *want = values(o);
                for (int64_t r = 0; r < n; r++)
                    want[r] = -log(oc_get(x, r * C + (int64_t)oc_get(l, r)));
                oc_assert_close(o, c->ndim, rows, want, tol(floats[d]), 0);
                cr_assert_eq(vq_tensor_dtype(o), floats[d]);
                free(want);
                vq_tensor_release(o);
                vq_tensor_release(l);
                vq_tensor_release(x);
            }
}

Test(ops_loss, cross_entropy_grad_matches_reference)
{
    for (size_t k = 0; k < NCLASS; k++)
        for (int d = 0; d < 2; d++) {
            const struct class_case *c = &class_cases[k];
            if (no_valid_label(c))
                continue;
            int64_t rows[4], n = rows_shape(c, rows), C = classes(c);
            vq_tensor *x = oc_rand(&rng, floats[d], c->ndim, c->x, 0.1, 1);
            vq_tensor *l = labels_for(c, ints[d]);
            vq_tensor *g = oc_rand(&rng, floats[d], c->ndim, rows, -1, 1);
            vq_tensor *in[3] = {x, l, g};
            vq_tensor *dx = oc_run1("cross_entropy_grad", in, 3, NULL, 0);
            double *want = values(x);
            for (int64_t i = 0; i < n * C; i++)
                want[i] = 0;
            for (int64_t r = 0; r < n; r++) {
                int64_t i = r * C + (int64_t)oc_get(l, r);
                want[i] = -oc_get(g, r) / oc_get(x, i);
            }
            oc_assert_close(dx, c->ndim, c->x, want, tol(floats[d]), 0);
            free(want);
            vq_tensor_release(dx);
            vq_tensor_release(g);
            vq_tensor_release(l);
            vq_tensor_release(x);
        }
}

/* ---- softmax_cross_entropy ---- */

Test(ops_loss, softmax_cross_entropy_matches_reference)
{
    for (size_t k = 0; k < NCLASS; k++)
        for (int d = 0; d < 2; d++)
            for (int li = 0; li < 2; li++) {
                const struct class_case *c = &class_cases[k];
                if (no_valid_label(c))
                    continue;
                vq_tensor *x = oc_rand(&rng, floats[d], c->ndim, c->x, -5, 5);
                vq_tensor *l = labels_for(c, ints[li]);
                vq_tensor *in[2] = {x, l}, *out[2];
                oc_run("softmax_cross_entropy", in, 2, out, 2, NULL, 0);
                int64_t rows[4], n = rows_shape(c, rows), C = classes(c);
                double *sm = values(x), *loss = values(out[1]);
                for (int64_t r = 0; r < n; r++) {
                    long double sum = 0;
                    for (int64_t j = 0; j < C; j++)
                        sum += expl(oc_get(x, r * C + j));
                    for (int64_t j = 0; j < C; j++)
                        sm[r * C + j] = (double)(expl(oc_get(x, r * C + j)) / sum);
                    loss[r] = -log(sm[r * C + (int64_t)oc_get(l, r)]);
                }
                oc_assert_close(out[0], c->ndim, c->x, sm, tol(floats[d]), 0);
                oc_assert_close(out[1], c->ndim, rows, loss, tol(floats[d]), 1e-6);
                free(sm);
                free(loss);
                vq_tensor_release(out[0]);
                vq_tensor_release(out[1]);
                vq_tensor_release(l);
                vq_tensor_release(x);
            }
}

Test(ops_loss, softmax_cross_entropy_stays_finite_for_large_logits)
{
    const int64_t s[2] = {3, 3}, ls[1] = {3};
    const double x[9] = {1000, -1000, 0, /* label 1: loss 2000 */
                         -1000, -1000, -1000, /* uniform */
                         1e30, 88, -1e30};    /* label 0: loss 0 */
    for (int d = 0; d < 2; d++) {
        vq_tensor *lg = oc_from(floats[d], 2, s, x);
        vq_tensor *l = oc_from(VQ_I64, 1, ls, (double[]){1, 2, 0});
        vq_tensor *in[2] = {lg, l}, *out[2];
        oc_run("softmax_cross_entropy", in, 2, out, 2, NULL, 0);
        const double third = 1.0 / 3;
        oc_assert_close(out[0], 2, s, (double[]){1, 0, 0, third, third, third, 1, 0, 0},
                        tol(floats[d]), 0);
        oc_assert_close(out[1], 2, (int64_t[]){3, 1}, (double[]){2000, log(3.0), 0},
                        tol(floats[d]), 0);
        vq_tensor_release(out[0]);
        vq_tensor_release(out[1]);
        vq_tensor_release(l);
        vq_tensor_release(lg);
    }
}

Test(ops_loss, softmax_cross_entropy_grad_matches_reference)
{
    for (size_t k = 0; k < NCLASS; k++)
        for (int d = 0; d < 2; d++) {
            const struct class_case *c = &class_cases[k];
            if (no_valid_label(c))
                continue;
            int64_t rows[4], n = rows_shape(c, rows), C = classes(c);
            vq_tensor *s = oc_rand(&rng, floats[d], c->ndim, c->x, 0, 1);
            vq_tensor *l = labels_for(c, ints[1 - d]);
            vq_tensor *g = oc_rand(&rng, floats[d], c->ndim, rows, -1, 1);
            vq_tensor *in[3] = {s, l, g};
            vq_tensor *dx = oc_run1("softmax_cross_entropy_grad", in, 3, NULL, 0);
            double *want = values(s);
            for (int64_t r = 0; r < n; r++)
                for (int64_t j = 0; j < C; j++)
                    want[r * C + j] = (oc_get(s, r * C + j) - (j == (int64_t)oc_get(l, r))) *
                                      oc_get(g, r);
            oc_assert_close(dx, c->ndim, c->x, want, tol(floats[d]), 1e-7);
            /* In place over Softmax gives the same. */
            vq_tensor *out[1] = {s};
            cr_assert_eq(vq_op_run(NULL, "softmax_cross_entropy_grad", in, 3, out, 1, NULL, 0), 0,
                         "%s", vq_errmsg());
            oc_assert_close(s, c->ndim, c->x, want, tol(floats[d]), 1e-7);
            free(want);
            vq_tensor_release(dx);
            vq_tensor_release(g);
            vq_tensor_release(l);
            vq_tensor_release(s);
        }
}

/* ---- labels ---- */

Test(ops_loss, label_out_of_range_is_a_run_time_error_naming_the_op_and_label)
{
    const int64_t s[2] = {3, 4}, ls[1] = {3}, gs[2] = {3, 1};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0.1, 1);
    vq_tensor *g = oc_rand(&rng, VQ_F32, 2, gs, -1, 1);
    const double bad[2][3] = {{0, 4, 1}, {2, 3, -1}};
    const char *msg[2] = {"label 4 at row 1 is outside [0, 4)", "label -1 at row 2 is outside [0, 4)"};
    for (int b = 0; b < 2; b++) {
        vq_tensor *l = oc_from(ints[b], 1, ls, bad[b]);
        vq_tensor *in[3] = {x, l, g};
        char want[128];
        snprintf(want, sizeof want, "cross_entropy: %s", msg[b]);
        expect_fail("cross_entropy", in, 2, 1, NULL, 0, want);
        snprintf(want, sizeof want, "cross_entropy_grad: %s", msg[b]);
        expect_fail("cross_entropy_grad", in, 3, 1, NULL, 0, want);
        snprintf(want, sizeof want, "softmax_cross_entropy: %s", msg[b]);
        expect_fail("softmax_cross_entropy", in, 2, 2, NULL, 0, want);
        snprintf(want, sizeof want, "softmax_cross_entropy_grad: %s", msg[b]);
        expect_fail("softmax_cross_entropy_grad", in, 3, 1, NULL, 0, want);
        vq_tensor_release(l);
    }
    /* No classes at all: every label is out of range. */
    const int64_t s0[2] = {2, 0};
    vq_tensor *x0 = oc_rand(&rng, VQ_F64, 2, s0, 0, 1);
    vq_tensor *l0 = oc_from(VQ_I32, 1, (int64_t[]){2}, (double[]){0, 0});
    vq_tensor *in0[2] = {x0, l0};
    expect_fail("cross_entropy", in0, 2, 1, NULL, 0, "label 0 at row 0 is outside [0, 0)");
    vq_tensor_release(x0);
    vq_tensor_release(l0);
    vq_tensor_release(g);
    vq_tensor_release(x);
}

Test(ops_loss, label_out_of_range_reaches_vq_tensor_wait_on_an_engine)
{
    vq_engine *e = NULL;
    vq_engine_opts o = {.cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    const int64_t s[2] = {2, 3}, ls[2] = {2, 1};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -1, 1);
    vq_tensor *l = oc_from(VQ_I32, 2, ls, (double[]){1, 7});
    vq_tensor *in[2] = {x, l}, *out[2] = {NULL, NULL};
    cr_assert_eq(vq_op_run(e, "softmax_cross_entropy", in, 2, out, 2, NULL, 0), 0, "%s",
                 vq_errmsg());
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(vq_tensor_wait(out[i]), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "softmax_cross_entropy: label 7 at row 1 is outside [0, 3)"),
                  "%s", vq_errmsg());
    }
    vq_tensor_release(out[0]);
    vq_tensor_release(out[1]);
    vq_tensor_release(l);
    vq_tensor_release(x);
    vq_engine_free(e);
}

Test(ops_loss, bad_label_shapes_and_dtypes_name_the_op_and_label)
{
    const int64_t s[2] = {4, 5};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0.1, 1);
    vq_tensor *scalar = oc_rand(&rng, VQ_F32, 0, s, 0.1, 1);
    vq_tensor *xi = oc_rand(&rng, VQ_I32, 2, s, 0, 4);
    vq_tensor *lf = oc_rand(&rng, VQ_F32, 1, (int64_t[]){4}, 0, 4);
    vq_tensor *lwide = oc_rand(&rng, VQ_I64, 2, (int64_t[]){4, 2}, 0, 4);
    vq_tensor *lshort = oc_rand(&rng, VQ_I64, 1, (int64_t[]){3}, 0, 4);
    vq_tensor *lrank = oc_rand(&rng, VQ_I64, 3, (int64_t[]){4, 1, 1}, 0, 4);
    vq_tensor *l = oc_rand(&rng, VQ_I64, 1, (int64_t[]){4}, 0, 4);
    const char *ops[2] = {"cross_entropy", "softmax_cross_entropy"};
    const char *first[2] = {"X", "Logits"};
    for (int o = 0; o < 2; o++) {
        char want[160];
        vq_tensor *in[2] = {x, lf};
        snprintf(want, sizeof want, "%s: input Label (slot 1): dtype f32 not supported", ops[o]);
        expect_fail(ops[o], in, 2, o + 1, NULL, 0, want);
        in[1] = lwide;
        snprintf(want, sizeof want,
                 "%s: input Label (slot 1): shape [4,2] does not fit %s's [4,5]: expected [4] or "
                 "[4,1]",
                 ops[o], first[o]);
        expect_fail(ops[o], in, 2, o + 1, NULL, 0, want);
        in[1] = lshort;
        snprintf(want, sizeof want, "%s: input Label (slot 1): shape [3]", ops[o]);
        expect_fail(ops[o], in, 2, o + 1, NULL, 0, want);
        in[1] = lrank;
        expect_fail(ops[o], in, 2, o + 1, NULL, 0, "Label (slot 1): shape [4,1,1]");
        in[0] = xi;
        in[1] = l;
        snprintf(want, sizeof want, "%s: input %s (slot 0): dtype i32", ops[o], first[o]);
        expect_fail(ops[o], in, 2, o + 1, NULL, 0, want);
        in[0] = scalar;
        snprintf(want, sizeof want, "%s: input %s (slot 0): has 0 dims", ops[o], first[o]);
        expect_fail(ops[o], in, 2, o + 1, NULL, 0, want);
    }
    /* The gradient ops check dOut / dLoss against the per-row shape. */
    vq_tensor *gbad = oc_rand(&rng, VQ_F32, 2, (int64_t[]){4, 2}, -1, 1);
    vq_tensor *gd = oc_rand(&rng, VQ_F64, 2, (int64_t[]){4, 1}, -1, 1);
    vq_tensor *in[3] = {x, l, gbad};
    expect_fail("cross_entropy_grad", in, 3, 1, NULL, 0,
                "cross_entropy_grad: input dOut (slot 2): shape [4,2], expected [4,1]");
    expect_fail("softmax_cross_entropy_grad", in, 3, 1, NULL, 0,
                "softmax_cross_entropy_grad: input dLoss (slot 2): shape [4,2], expected [4,1]");
    in[2] = gd;
    expect_fail("cross_entropy_grad", in, 3, 1, NULL, 0,
                "cross_entropy_grad: input dOut (slot 2): dtype f64 differs from X's f32");
    in[1] = lwide;
    expect_fail("softmax_cross_entropy_grad", in, 3, 1, NULL, 0,
                "softmax_cross_entropy_grad: input Label (slot 1): shape [4,2]");
    vq_tensor_release(gbad);
    vq_tensor_release(gd);
    vq_tensor_release(x);
    vq_tensor_release(scalar);
    vq_tensor_release(xi);
    vq_tensor_release(lf);
    vq_tensor_release(lwide);
    vq_tensor_release(lshort);
    vq_tensor_release(lrank);
    vq_tensor_release(l);
}

/* ---- square_error and mse ---- */

struct shape {
    int ndim;
    int64_t d[4];
};

static const struct shape shapes[] = {
    {2, {3, 4}}, {1, {0}}, {1, {1}}, {3, {2, 0, 3}}, {0, {0}}, {3, {5, 1, 2}}, {2, {1, 1}},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

Test(ops_loss, square_error_and_mse_match_reference)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < NSHAPES; s++) {
            const struct shape *sh = &shapes[s];
            vq_tensor *x = oc_rand(&rng, floats[d], sh->ndim, sh->d, -3, 3);
            vq_tensor *y = oc_rand(&rng, floats[d], sh->ndim, sh->d, -3, 3);
            vq_tensor *in[2] = {x, y};
            vq_tensor *se = oc_run1("square_error", in, 2, NULL, 0);
            vq_tensor *mse = oc_run1("mse", in, 2, NULL, 0);
            double *want = values(x), sum = 0;
            int64_t n = vq_tensor_numel(x);
            for (int64_t i = 0; i < n; i++) {
                double v = oc_get(x, i) - oc_get(y, i);
                want[i] = v * v;
                sum += v * v;
            }
            oc_assert_close(se, sh->ndim, sh->d, want, tol(floats[d]), 0);
            /* The mean of no elements is defined as 0. */
            double mean = n ? sum / (double)n : 0;
            oc_assert_close(mse, 0, NULL, &mean, tol(floats[d]), 0);
            cr_assert_eq(vq_tensor_dtype(mse), floats[d]);
            free(want);
            vq_tensor_release(se);
            vq_tensor_release(mse);
            vq_tensor_release(x);
            vq_tensor_release(y);
        }
}

Test(ops_loss, square_error_grad_and_mse_grad_match_reference)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < NSHAPES; s++)
            for (int wrt = 0; wrt < 2; wrt++) {
                const struct shape *sh = &shapes[s];
                vq_tensor *x = oc_rand(&rng, floats[d], sh->ndim, sh->d, -3, 3);
                vq_tensor *y = oc_rand(&rng, floats[d], sh->ndim, sh->d, -3, 3);
                vq_tensor *g = oc_rand(&rng, floats[d], sh->ndim, sh->d, -1, 1);
                vq_tensor *g0 = oc_rand(&rng, floats[d], 0, NULL, -1, 1);
                vq_attr at = VQ_ATTR_I("wrt", wrt);
                vq_tensor *in[3] = {x, y, g};
                vq_tensor *dse = oc_run1("square_error_grad", in, 3, &at, 1);
                in[2] = g0;
                vq_tensor *dmse = oc_run1("mse_grad", in, 3, &at, 1);
                int64_t n = vq_tensor_numel(x);
                double *wse = values(x), *wmse = values(x), sign = wrt ? -2 : 2;
                for (int64_t i = 0; i < n; i++) {
                    double v = oc_get(x, i) - oc_get(y, i);
                    wse[i] = sign * v * oc_get(g, i);
                    wmse[i] = sign * v * oc_get(g0, 0) / (double)n;
                }
                oc_assert_close(dse, sh->ndim, sh->d, wse, tol(floats[d]), 1e-6);
                oc_assert_close(dmse, sh->ndim, sh->d, wmse, tol(floats[d]), 1e-7);
                free(wse);
                free(wmse);
                vq_tensor_release(dse);
                vq_tensor_release(dmse);
                vq_tensor_release(x);
                vq_tensor_release(y);
                vq_tensor_release(g);
                vq_tensor_release(g0);
            }
}

Test(ops_loss, bad_regression_calls_name_the_op_and_the_slot_or_attribute)
{
    const int64_t s[2] = {2, 3}, t[2] = {3, 2};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, -1, 1);
    vq_tensor *xt = oc_rand(&rng, VQ_F32, 2, t, -1, 1);
    vq_tensor *xd = oc_rand(&rng, VQ_F64, 2, s, -1, 1);
    vq_tensor *xi = oc_rand(&rng, VQ_I64, 2, s, -1, 1);
    vq_tensor *g0 = oc_rand(&rng, VQ_F32, 0, NULL, -1, 1);
    vq_tensor *in[3] = {x, xt, x};
    expect_fail("square_error", in, 2, 1, NULL, 0,
                "square_error: input Y (slot 1): shape [3,2] differs from X's [2,3]");
    expect_fail("mse", in, 2, 1, NULL, 0, "mse: input Y (slot 1): shape [3,2] differs");
    in[1] = xd;
    expect_fail("square_error", in, 2, 1, NULL, 0, "square_error: input Y (slot 1): dtype f64");
    expect_fail("mse", in, 2, 1, NULL, 0, "mse: input Y (slot 1): dtype f64");
    in[0] = xi;
    in[1] = xi;
    expect_fail("square_error", in, 2, 1, NULL, 0, "square_error: input X (slot 0): dtype i64");
    expect_fail("mse", in, 2, 1, NULL, 0, "mse: input X (slot 0): dtype i64");
    in[0] = in[1] = x;
    vq_attr wrt2 = VQ_ATTR_I("wrt", 2), wrt0 = VQ_ATTR_I("wrt", 0);
    expect_fail("square_error_grad", in, 3, 1, &wrt2, 1,
                "square_error_grad: attribute wrt: is 2, not 0 (X) or 1 (Y)");
    expect_fail("mse_grad", in, 3, 1, NULL, 0, "mse_grad: attribute wrt (int) is required");
    expect_fail("mse_grad", in, 3, 1, &wrt0, 1, "mse_grad: input dOut (slot 2): has 2 dims, expected 0");
    in[2] = g0;
    expect_fail("square_error_grad", in, 3, 1, &wrt0, 1,
                "square_error_grad: input dOut (slot 2): shape [], expected [2,3]");
    in[2] = xd;
    expect_fail("square_error_grad", in, 3, 1, &wrt0, 1,
                "square_error_grad: input dOut (slot 2): dtype f64 differs from X's f32");
    vq_tensor_release(x);
    vq_tensor_release(xt);
    vq_tensor_release(xd);
    vq_tensor_release(xi);
    vq_tensor_release(g0);
}

/* ---- gradients against finite differences ---- */

Test(ops_loss, cross_entropy_square_error_and_mse_gradients_match_finite_differences)
{
    for (size_t k = 0; k < NCLASS; k++) {
        const struct class_case *c = &class_cases[k];
        if (no_valid_label(c))
            continue;
        vq_tensor *x = oc_rand(&rng, VQ_F64, c->ndim, c->x, 0.1, 1);
        vq_tensor *l = labels_for(c, ints[k % 2]);
        vq_tensor *in[2] = {x, l};
        oc_grad_check("cross_entropy", in, 2, 1, NULL, 0, 1, &rng);
        vq_tensor_release(l);
        vq_tensor_release(x);
    }
    const char *ops[2] = {"square_error", "mse"};
    for (int o = 0; o < 2; o++)
        for (size_t s = 0; s < NSHAPES; s++)
            for (unsigned wrt = 1; wrt < 4; wrt++) {
                vq_tensor *x = oc_rand(&rng, VQ_F64, shapes[s].ndim, shapes[s].d, -2, 2);
                vq_tensor *y = oc_rand(&rng, VQ_F64, shapes[s].ndim, shapes[s].d, -2, 2);
                vq_tensor *in[2] = {x, y};
                oc_grad_check(ops[o], in, 2, 1, NULL, 0, wrt, &rng);
                vq_tensor_release(x);
                vq_tensor_release(y);
            }
    cr_log_info("largest gradient error: %.3g", oc_worst_grad_error());
}

/* oc_grad_check sends a gradient into every output, and softmax_cross_entropy
 * takes one only into Loss: this check calls its maker with dSoftmax NULL,
 * runs the op it emits, and compares with central differences of
 * L = <dLoss, Loss>. */
struct sce_env {
    vq_tensor *logits, *label, *softmax, *loss, *dloss, *dlogits;
    int emitted;
};

static vq_tensor *sce_lookup(struct sce_env *v, const char *name)
{
    vq_tensor *t = !strcmp(name, "logits")    ? v->logits
                   : !strcmp(name, "label")   ? v->label
                   : !strcmp(name, "softmax") ? v->softmax
                   : !strcmp(name, "loss")    ? v->loss
                   : !strcmp(name, "dloss")   ? v->dloss
                                              : NULL;
    cr_assert(t, "gradient op reads %s, which nothing wrote", name);
    return t;
}

static int sce_emit(void *user, const char *type, const char *const *in, int nin,
                    const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    struct sce_env *v = user;
    cr_assert_eq(nout, 1);
    cr_assert_str_eq(out[0], "dlogits");
    cr_assert_lt(nin, 8);
    vq_tensor *ti[8];
    for (int i = 0; i < nin; i++)
        ti[i] = sce_lookup(v, in[i]);
    v->dlogits = oc_run1(type, ti, nin, attrs, nattrs);
    v->emitted++;
    return 0;
}

static long double sce_objective(vq_tensor *logits, vq_tensor *label, vq_tensor *dloss)
{
    vq_tensor *in[2] = {logits, label}, *out[2];
    oc_run("softmax_cross_entropy", in, 2, out, 2, NULL, 0);
    long double s = 0;
    for (int64_t i = 0; i < vq_tensor_numel(out[1]); i++)
        s += (long double)oc_get(dloss, i) * oc_get(out[1], i);
    vq_tensor_release(out[0]);
    vq_tensor_release(out[1]);
    return s;
}

static double sce_grad_check(vq_tensor *logits, vq_tensor *label)
{
    struct sce_env v = {.logits = logits, .label = label};
    vq_tensor *in[2] = {logits, label}, *out[2];
    oc_run("softmax_cross_entropy", in, 2, out, 2, NULL, 0);
    v.softmax = out[0];
    v.loss = out[1];
    v.dloss = oc_rand(&rng, VQ_F64, vq_tensor_ndim(out[1]), vq_tensor_shape(out[1]), -1, 1);
    const char *in_names[2] = {"logits", "label"}, *out_names[2] = {"softmax", "loss"};
    const char *din[2] = {"dlogits", NULL}, *dout[2] = {NULL, "dloss"};
    const vq__op_def *def = vq__op_find("softmax_cross_entropy");
    vq__grad g = {.def = def, .in = in_names, .nin = 2, .out = out_names, .nout = 2,
                  .din = din, .dout = dout, .emit = sce_emit, .user = &v};
    cr_assert_eq(def->grad(&g), 0, "%s", vq_errmsg());
    cr_assert_eq(v.emitted, 1);
    const double h = 1e-6;
    double err = 0;
    for (int64_t k = 0; k < vq_tensor_numel(logits); k++) {
        double x0 = oc_get(logits, k);
        oc_set(logits, k, x0 + h);
        long double up = sce_objective(logits, label, v.dloss);
        oc_set(logits, k, x0 - h);
        long double down = sce_objective(logits, label, v.dloss);
        oc_set(logits, k, x0);
        double num = (double)((up - down) / (2 * h)), ana = oc_get(v.dlogits, k);
        double e = fabs(ana - num) / fmax(fmax(fabs(ana), fabs(num)), 1e-3);
        cr_assert(e <= 1e-6, "d/d logits [%lld]: analytic %.12g, numeric %.12g", (long long)k,
                  ana, num);
        if (e > err)
            err = e;
    }
    vq_tensor_release(v.softmax);
    vq_tensor_release(v.loss);
    vq_tensor_release(v.dloss);
    vq_tensor_release(v.dlogits);
    return err;
}

Test(ops_loss, softmax_cross_entropy_gradient_matches_finite_differences)
{
    double worst = 0;
    for (size_t k = 0; k < NCLASS; k++) {
        const struct class_case *c = &class_cases[k];
        if (no_valid_label(c))
            continue;
        vq_tensor *x = oc_rand(&rng, VQ_F64, c->ndim, c->x, -3, 3);
        vq_tensor *l = labels_for(c, ints[k % 2]);
        worst = fmax(worst, sce_grad_check(x, l));
        vq_tensor_release(l);
        vq_tensor_release(x);
    }
    cr_log_info("largest gradient error: %.3g", worst);
}

/* ---- gradient makers' refusals ---- */

static int emit_nothing(void *user, const char *type, const char *const *in, int nin,
                        const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    (void)in, (void)nin, (void)out, (void)nout, (void)attrs, (void)nattrs;
    cr_assert_fail("%s emitted %s", (const char *)user, type);
    return 0;
}

static int run_maker(const char *type, const char *const *din, const char *const *dout)
{
    const vq__op_def *def = vq__op_find(type);
    const char *in[2] = {"x", "label"}, *out[2] = {"y", "loss"};
    vq__grad g = {.def = def, .in = in, .nin = 2, .out = out, .nout = def->nout_slots,
                  .din = din, .dout = dout, .emit = emit_nothing, .user = (void *)type};
    return def->grad(&g);
}

Test(ops_loss, labels_have_no_gradient)
{
    const char *din[2] = {"dx", "dlabel"}, *dout[2] = {NULL, "dloss"};
    cr_assert_eq(run_maker("cross_entropy", din, dout + 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "cross_entropy: input Label (slot 1): labels have no gradient"),
              "%s", vq_errmsg());
    cr_assert_eq(run_maker("softmax_cross_entropy", din, dout), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "softmax_cross_entropy: input Label (slot 1): labels have no "
                                  "gradient"),
              "%s", vq_errmsg());
}

Test(ops_loss, softmax_output_of_softmax_cross_entropy_takes_no_gradient)
{
    const char *din[2] = {"dx", NULL}, *dout[2] = {"dsoftmax", "dloss"};
    cr_assert_eq(run_maker("softmax_cross_entropy", din, dout), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "softmax_cross_entropy: output Softmax (slot 0) is not "
                                  "differentiable here; use softmax and cross_entropy"),
              "%s", vq_errmsg());
}

/* ---- graph preparation ---- */

Test(ops_loss, infer_propagates_unknown_dims)
{
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    vq__meta out[2];
    /* X [-1, 5], Label [8, 1]: the row count comes from Label. */
    vq__meta ce[3] = {{VQ_F32, 2, {-1, 5}}, {VQ_I64, 2, {8, 1}}, {VQ_F32, 2, {-1, -1}}};
    cr_assert_eq(vq__op_infer(vq__op_find("cross_entropy"), NULL, 0, 2, ce, 1, out, params), 0,
                 "%s", vq_errmsg());
    cr_assert(out[0].ndim == 2 && out[0].shape[0] == 8 && out[0].shape[1] == 1);
    cr_assert_eq(vq__op_infer(vq__op_find("softmax_cross_entropy"), NULL, 0, 2, ce, 2, out, params),
                 0, "%s", vq_errmsg());
    cr_assert(out[0].shape[0] == 8 && out[0].shape[1] == 5 && out[1].shape[0] == 8 &&
              out[1].shape[1] == 1);
    /* X [-1, -1], Label [-1]: all unknown but the trailing 1. */
    vq__meta unk[3] = {{VQ_F64, 2, {-1, -1}}, {VQ_I32, 1, {-1}}, {VQ_F64, 2, {-1, -1}}};
    cr_assert_eq(vq__op_infer(vq__op_find("cross_entropy"), NULL, 0, 2, unk, 1, out, params), 0,
                 "%s", vq_errmsg());
    cr_assert(out[0].shape[0] == -1 && out[0].shape[1] == 1);
    cr_assert_eq(vq__op_infer(vq__op_find("cross_entropy_grad"), NULL, 0, 3, unk, 1, out, params),
                 0, "%s", vq_errmsg());
    cr_assert(out[0].shape[0] == -1 && out[0].shape[1] == -1);
    /* square_error and mse: dims from whichever input knows them. */
    vq__meta xy[3] = {{VQ_F32, 2, {-1, 3}}, {VQ_F32, 2, {4, -1}}, {VQ_F32, 0, {0}}};
    cr_assert_eq(vq__op_infer(vq__op_find("square_error"), NULL, 0, 2, xy, 1, out, params), 0,
                 "%s", vq_errmsg());
    cr_assert(out[0].shape[0] == 4 && out[0].shape[1] == 3);
    cr_assert_eq(vq__op_infer(vq__op_find("mse"), NULL, 0, 2, xy, 1, out, params), 0, "%s",
                 vq_errmsg());
    cr_assert(out[0].ndim == 0 && out[0].dtype == VQ_F32);
    vq_attr wrt = VQ_ATTR_I("wrt", 1);
    cr_assert_eq(vq__op_infer(vq__op_find("mse_grad"), &wrt, 1, 3, xy, 1, out, params), 0, "%s",
                 vq_errmsg());
    cr_assert(out[0].shape[0] == 4 && out[0].shape[1] == 3);
}
