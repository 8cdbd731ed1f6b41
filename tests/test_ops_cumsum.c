/* cumsum (ops/cpu/cumsum.c): the kernel against a plain loop over its
 * definition in every dtype it takes, on every axis (negative ones too),
 * with exclusive and reverse, size-0 and size-1 dims; integers wrapping;
 * the gradient (cumsum the other way) against finite differences; errors
 * naming the slot or attribute. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_cumsum");
}

TestSuite(ops_cumsum, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct cumsum_case {
    int n;
    int64_t x[3];
    int axis;
} cases[] = {
    {1, {7}, 0},       {2, {3, 4}, 0},    {2, {3, 4}, 1},    {2, {3, 4}, -1},
    {3, {2, 5, 3}, 1}, {3, {2, 5, 3}, 2}, {3, {2, 0, 3}, 1}, {3, {4, 1, 2}, -3},
};

/* The plain loop: element by element, the sum of the line's elements in
 * the window, added in order in double (exact for the test's values). */
static double *reference(const struct cumsum_case *c, vq_tensor *x, bool exclusive, bool reverse)
{
    int axis = c->axis < 0 ? c->axis + c->n : c->axis;
    int64_t n = 1, inner = 1, len = c->x[axis];
    for (int d = 0; d < c->n; d++)
        n *= c->x[d];
    for (int d = axis + 1; d < c->n; d++)
        inner *= c->x[d];
    double *w = calloc((size_t)(n ? n : 1), sizeof *w);
    cr_assert(w);
    for (int64_t e = 0; e < n; e++) {
        int64_t k = e / inner % len, base = e - k * inner;
        double s = 0;
        for (int64_t j = 0; j < len; j++) {
            bool in = reverse ? (exclusive ? j > k : j >= k) : (exclusive ? j < k : j <= k);
            if (in)
                s += oc_get(x, base + j * inner);
        }
        w[e] = s;
    }
    return w;
}

Test(ops_cumsum, cumsum_matches_the_plain_loop_in_every_dtype)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int c = 0; c < N_OF(cases); c++)
        for (int d = 0; d < N_OF(dts); d++)
            for (int f = 0; f < 4; f++) {
                bool exclusive = f & 1, reverse = f & 2;
                vq_tensor *x = oc_rand(&rng, dts[d], cases[c].n, cases[c].x, -50, 50);
                /* integers and halves: every float sum is exact */
                if (dts[d] == VQ_F32 || dts[d] == VQ_F64)
                    for (int64_t i = 0; i < vq_tensor_numel(x); i++)
                        oc_set(x, i, floor(oc_get(x, i) * 2) / 2);
                vq_attr at[3] = {VQ_ATTR_I("axis", cases[c].axis),
                                 VQ_ATTR_B("exclusive", exclusive), VQ_ATTR_B("reverse", reverse)};
                vq_tensor *out = oc_run1("cumsum", &x, 1, at, 3);
                double *w = reference(&cases[c], x, exclusive, reverse);
                cr_assert_eq(vq_tensor_dtype(out), dts[d]);
                oc_assert_close(out, cases[c].n, cases[c].x, w, 0, 0);
                free(w);
                vq_tensor_release(out);
                vq_tensor_release(x);
            }
}

Test(ops_cumsum, axis_defaults_to_0_and_integers_wrap)
{
    vq_tensor *x;
    int32_t v[3] = {INT32_MAX, 1, 1};
    cr_assert_eq(vq_tensor_from(&x, VQ_I32, 1, (int64_t[]){3}, v), 0);
    vq_tensor *out = oc_run1("cumsum", &x, 1, NULL, 0);
    const int32_t *o = vq_tensor_data(out);
    cr_assert_eq(o[0], INT32_MAX);
    cr_assert_eq(o[1], INT32_MIN);
    cr_assert_eq(o[2], INT32_MIN + 1);
    vq_tensor_release(out);
    vq_tensor_release(x);
}

Test(ops_cumsum, gradients_match_finite_differences)
{
    for (int c = 0; c < N_OF(cases); c++)
        for (int f = 0; f < 4; f++) {
            vq_tensor *x = oc_rand(&rng, VQ_F64, cases[c].n, cases[c].x, -2, 2);
            vq_attr at[3] = {VQ_ATTR_I("axis", cases[c].axis), VQ_ATTR_B("exclusive", f & 1),
                             VQ_ATTR_B("reverse", f & 2)};
            oc_grad_check("cumsum", &x, 1, 1, at, 3, 1u, &rng);
            vq_tensor_release(x);
        }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_cumsum, bad_inputs_name_the_slot_or_attribute)
{
    vq_tensor *s, *b, *x;
    cr_assert_eq(vq_tensor_new(&s, VQ_F32, 0, NULL), 0);
    cr_assert_eq(vq_tensor_new(&b, VQ_BOOL, 1, (int64_t[]){3}), 0);
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 2, (int64_t[]){2, 3}), 0);
    cr_assert_eq(oc_try("cumsum", &s, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "cumsum: input X (slot 0): is a scalar (rank 0)"), "%s",
              vq_errmsg());
    cr_assert_eq(oc_try("cumsum", &b, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input X (slot 0)"), "%s", vq_errmsg());
    vq_attr at = VQ_ATTR_I("axis", 2);
    cr_assert_eq(oc_try("cumsum", &x, 1, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "cumsum: attribute axis"), "%s", vq_errmsg());
    vq_tensor_release(s);
    vq_tensor_release(b);
    vq_tensor_release(x);
}
