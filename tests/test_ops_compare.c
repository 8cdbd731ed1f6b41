/* Comparisons, logic, where, abs, maximum and minimum (ops/cpu/compare.c)
 * against plain loops over numpy's broadcasting rule, their NaN and integer
 * corner cases, the gradients of where, maximum, minimum and abs against
 * finite differences, and the errors of bad calls. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_compare");
}

TestSuite(ops_compare, .init = setup, .fini = leak_check);

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

static double reference(const char *op, double a, double b)
{
    if (!strcmp(op, "less"))
        return a < b;
    if (!strcmp(op, "less_equal"))
        return a <= b;
    if (!strcmp(op, "greater"))
        return a > b;
    if (!strcmp(op, "greater_equal"))
        return a >= b;
    if (!strcmp(op, "equal"))
        return a == b;
    if (!strcmp(op, "not_equal"))
        return a != b;
    if (!strcmp(op, "logical_and"))
        return a != 0 && b != 0;
    if (!strcmp(op, "logical_or"))
        return a != 0 || b != 0;
    if (!strcmp(op, "maximum"))
        return isnan(a) || a > b ? a : b;
    return isnan(a) || a < b ? a : b; /* minimum */
}

/* op on every case of shapes in dtype dt against the reference; values
 * drawn from a few integers so that equal elements occur often. */
static void check_binary(const char *op, vq_dtype dt, vq_dtype out_dt)
{
    for (int c = 0; c < oc_nbcast_cases; c++) {
        const struct oc_bcast_case *s = &oc_bcast_cases[c];
        bool b = dt == VQ_BOOL;
        vq_tensor *x = oc_rand(&rng, dt, s->nx, s->x, b ? 0 : -3, b ? 2 : 3);
        vq_tensor *y = oc_rand(&rng, dt, s->ny, s->y, b ? 0 : -3, b ? 2 : 3);
        if (dt == VQ_F32 || dt == VQ_F64) /* whole numbers: ties */
            for (int64_t i = 0; i < vq_tensor_numel(x); i++)
                oc_set(x, i, floor(oc_get(x, i)));
        vq_tensor *in[2] = {x, y};
        vq_tensor *o = oc_run1(op, in, 2, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(o), out_dt, "%s: dtype %s", op,
                     vq_dtype_name(vq_tensor_dtype(o)));
        int64_t n = numel(s->no, s->o);
        double want[96];
        for (int64_t i = 0; i < n; i++)
            want[i] = reference(op, oc_get(x, oc_bcast_index(i, s->no, s->o, s->nx, s->x)),
                                oc_get(y, oc_bcast_index(i, s->no, s->o, s->ny, s->y)));
        oc_assert_close(o, s->no, s->o, want, 0, 0);
        vq_tensor_release(o);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
}

Test(ops_compare, comparisons_match_numpy_in_every_dtype)
{
    const char *ops[] = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"};
    vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++)
            check_binary(ops[i], dts[j], VQ_BOOL);
    check_binary("equal", VQ_BOOL, VQ_BOOL);
    check_binary("not_equal", VQ_BOOL, VQ_BOOL);
}

Test(ops_compare, logic_ops_on_bools)
{
    check_binary("logical_and", VQ_BOOL, VQ_BOOL);
    check_binary("logical_or", VQ_BOOL, VQ_BOOL);
    int64_t s[1] = {4};
    vq_tensor *x = oc_from(VQ_BOOL, 1, s, (double[]){0, 1, 1, 0});
    vq_tensor *o = oc_run1("logical_not", &x, 1, NULL, 0);
    oc_assert_close(o, 1, s, (double[]){1, 0, 0, 1}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_compare, maximum_and_minimum_match_numpy_in_every_dtype)
{
    vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int j = 0; j < 4; j++) {
        check_binary("maximum", dts[j], dts[j]);
        check_binary("minimum", dts[j], dts[j]);
    }
}

Test(ops_compare, nan_compares_false_and_wins_maximum_and_minimum)
{
    int64_t s[1] = {3};
    vq_tensor *x = oc_from(VQ_F64, 1, s, (double[]){NAN, 1, NAN});
    vq_tensor *y = oc_from(VQ_F64, 1, s, (double[]){1, NAN, NAN});
    vq_tensor *in[2] = {x, y};
    const char *ops[] = {"less", "less_equal", "greater", "greater_equal", "equal"};
    for (int i = 0; i < 5; i++) {
        vq_tensor *o = oc_run1(ops[i], in, 2, NULL, 0);
        oc_assert_close(o, 1, s, (double[]){0, 0, 0}, 0, 0);
        vq_tensor_release(o);
    }
    vq_tensor *ne = oc_run1("not_equal", in, 2, NULL, 0);
    oc_assert_close(ne, 1, s, (double[]){1, 1, 1}, 0, 0);
    vq_tensor_release(ne);
    for (int m = 0; m < 2; m++) {
        vq_tensor *o = oc_run1(m ? "minimum" : "maximum", in, 2, NULL, 0);
        for (int64_t i = 0; i < 3; i++)
            cr_assert(isnan(oc_get(o, i)), "%s[%lld] is %g", m ? "minimum" : "maximum",
                      (long long)i, oc_get(o, i));
        vq_tensor_release(o);
    }
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_compare, abs_of_floats_and_wrapping_integers)
{
    int64_t s[1] = {5};
    vq_tensor *f = oc_from(VQ_F32, 1, s, (double[]){-2.5, -0.0, 0, 3, -1e30});
    vq_tensor *o = oc_run1("abs", &f, 1, NULL, 0);
    oc_assert_close(o, 1, s, (double[]){2.5, 0, 0, 3, 1e30}, 1e-7, 0);
    cr_assert(!signbit(oc_get(o, 1)), "abs(-0) must be +0");
    vq_tensor_release(o);
    vq_tensor_release(f);
    vq_tensor *i = oc_from(VQ_I32, 1, s, (double[]){-7, 0, 7, -2147483648.0, 2147483647.0});
    o = oc_run1("abs", &i, 1, NULL, 0);
    oc_assert_close(o, 1, s, (double[]){7, 0, 7, -2147483648.0, 2147483647.0}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(i);
}

/* where(Cond, X, Y) with Cond, X and Y each broadcast. */
Test(ops_compare, where_picks_x_or_y_with_three_way_broadcasting)
{
    static const struct {
        int nc, nx, ny, no;
        int64_t c[3], x[3], y[3], o[3];
    } w[] = {
        {2, 2, 2, 2, {3, 4}, {3, 4}, {3, 4}, {3, 4}},
        {2, 1, 2, 2, {3, 1}, {4}, {1, 4}, {3, 4}},
        {1, 3, 2, 3, {2}, {2, 1, 1}, {3, 1}, {2, 3, 2}},
        {0, 2, 1, 2, {0}, {2, 3}, {1}, {2, 3}},
        {2, 2, 2, 2, {0, 1}, {1, 3}, {1, 1}, {0, 3}},
    };
    vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
    for (size_t k = 0; k < sizeof w / sizeof *w; k++)
        for (int d = 0; d < 5; d++) {
            vq_tensor *c = oc_rand(&rng, VQ_BOOL, w[k].nc, w[k].c, 0, 2);
            vq_tensor *x = oc_rand(&rng, dts[d], w[k].nx, w[k].x, 0, 50);
            vq_tensor *y = oc_rand(&rng, dts[d], w[k].ny, w[k].y, 0, 50);
            vq_tensor *in[3] = {c, x, y};
            vq_tensor *o = oc_run1("where", in, 3, NULL, 0);
            cr_assert_eq(vq_tensor_dtype(o), dts[d]);
            int64_t n = numel(w[k].no, w[k].o);
            double want[64];
            for (int64_t i = 0; i < n; i++) {
                bool t = oc_get(c, oc_bcast_index(i, w[k].no, w[k].o, w[k].nc, w[k].c)) != 0;
                want[i] = t ? oc_get(x, oc_bcast_index(i, w[k].no, w[k].o, w[k].nx, w[k].x))
                            : oc_get(y, oc_bcast_index(i, w[k].no, w[k].o, w[k].ny, w[k].y));
            }
            oc_assert_close(o, w[k].no, w[k].o, want, 0, 0);
            vq_tensor_release(o);
            vq_tensor_release(c);
            vq_tensor_release(x);
            vq_tensor_release(y);
        }
}

Test(ops_compare, gradients_of_where_against_finite_differences)
{
    int64_t cs[2] = {3, 1}, xs[1] = {4}, ys[2] = {3, 4};
    vq_tensor *c = oc_rand(&rng, VQ_BOOL, 2, cs, 0, 2);
    vq_tensor *x = oc_rand(&rng, VQ_F64, 1, xs, -1, 1);
    vq_tensor *y = oc_rand(&rng, VQ_F64, 2, ys, -1, 1);
    vq_tensor *in[3] = {c, x, y};
    double e = oc_grad_check("where", in, 3, 1, NULL, 0, 6u, &rng);
    cr_assert(e <= 1e-6, "where: %g", e);
    vq_tensor_release(c);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_compare, gradients_of_maximum_minimum_abs_against_finite_differences)
{
    int64_t xs[2] = {3, 4}, ys[1] = {4};
    for (int m = 0; m < 2; m++) {
        /* Values apart by more than the step: no tie within a difference. */
        vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -1, 1);
        vq_tensor *y = oc_rand(&rng, VQ_F64, 1, ys, -1, 1);
        for (int64_t i = 0; i < 12; i++)
            oc_set(x, i, floor(oc_get(x, i) * 8) / 8 + 0.03);
        for (int64_t i = 0; i < 4; i++)
            oc_set(y, i, floor(oc_get(y, i) * 8) / 8 + 0.09);
        vq_tensor *in[2] = {x, y};
        double e = oc_grad_check(m ? "minimum" : "maximum", in, 2, 1, NULL, 0, 3u, &rng);
        cr_assert(e <= 1e-6, "%s: %g", m ? "minimum" : "maximum", e);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
    vq_tensor *x = oc_from(VQ_F64, 1, ys, (double[]){-2, -0.5, 0.25, 3});
    double e = oc_grad_check("abs", &x, 1, 1, NULL, 0, 1u, &rng);
    cr_assert(e <= 1e-6, "abs: %g", e);
    vq_tensor_release(x);
}

/* Ties go to X: maximum's gradient at X == Y flows to X only. */
Test(ops_compare, maximum_gradient_at_a_tie_goes_to_x)
{
    int64_t s[1] = {2};
    vq_tensor *g = oc_from(VQ_F64, 1, s, (double[]){1, 1});
    vq_tensor *x = oc_from(VQ_F64, 1, s, (double[]){2, 1});
    vq_tensor *y = oc_from(VQ_F64, 1, s, (double[]){2, 5});
    vq_tensor *in[3] = {g, x, y};
    for (int wrt = 0; wrt < 2; wrt++) {
        vq_attr a[2] = {VQ_ATTR_S("op", "maximum"), VQ_ATTR_I("wrt", wrt)};
        vq_tensor *d = oc_run1("minmax_grad", in, 3, a, 2);
        oc_assert_close(d, 1, s, wrt ? (double[]){0, 1} : (double[]){1, 0}, 0, 0);
        vq_tensor_release(d);
    }
    vq_tensor_release(g);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_compare, bad_calls_name_the_op_and_slot)
{
    int64_t a[2] = {3, 4}, b[2] = {2, 4};
    vq_tensor *f = oc_rand(&rng, VQ_F32, 2, a, 0, 1), *g = oc_rand(&rng, VQ_F32, 2, b, 0, 1);
    vq_tensor *t = oc_rand(&rng, VQ_BOOL, 2, a, 0, 2), *i = oc_rand(&rng, VQ_I32, 2, a, 0, 9);
    vq_tensor *in[3] = {t, t, NULL};
    cr_assert_eq(oc_try("less", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "less: input X (slot 0)"), "%s", vq_errmsg());
    in[0] = f;
    in[1] = f;
    cr_assert_eq(oc_try("logical_and", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "logical_and: input X (slot 0)"), "%s", vq_errmsg());
    in[1] = i;
    cr_assert_eq(oc_try("greater", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "greater: input Y (slot 1): dtype i32 differs"), "%s",
              vq_errmsg());
    in[1] = g;
    cr_assert_eq(oc_try("equal", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "equal: input Y (slot 1)"), "%s", vq_errmsg());
    /* where: Cond must be bool; the three shapes must broadcast */
    vq_tensor *w[3] = {f, f, f};
    cr_assert_eq(oc_try("where", w, 3, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "where: input Cond (slot 0)"), "%s", vq_errmsg());
    w[0] = t;
    w[2] = g;
    cr_assert_eq(oc_try("where", w, 3, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "where: Cond [3,4], X [3,4] and Y [2,4] do not broadcast"),
              "%s", vq_errmsg());
    w[2] = i;
    cr_assert_eq(oc_try("where", w, 3, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "where: input Y (slot 2): dtype i32 differs"), "%s",
              vq_errmsg());
    cr_assert_eq(oc_try("abs", &t, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "abs: input X (slot 0)"), "%s", vq_errmsg());
    vq_tensor *m[3] = {f, f, f};
    vq_attr bad[2] = {VQ_ATTR_S("op", "max"), VQ_ATTR_I("wrt", 0)};
    cr_assert_eq(oc_try("minmax_grad", m, 3, 1, bad, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "\"max\" is not maximum or minimum"), "%s", vq_errmsg());
    vq_attr wrt = VQ_ATTR_I("wrt", 2);
    vq_tensor *wg[3] = {f, t, f};
    cr_assert_eq(oc_try("where_grad", wg, 3, 1, &wrt, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "where_grad: attribute wrt: is 2"), "%s", vq_errmsg());
    vq_tensor_release(f);
    vq_tensor_release(g);
    vq_tensor_release(t);
    vq_tensor_release(i);
}
