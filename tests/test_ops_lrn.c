/* lrn (ops/cpu/lrn.c): the kernel against ONNX LRN's definition written as
 * a plain loop (the window [c - floor((size - 1) / 2), c + ceil((size - 1)
 * / 2)] clipped to the channels), in f32 and f64, odd and even sizes, one
 * channel, a window wider than the channels, ranks 2 to 5; the gradient
 * (lrn_grad) against finite differences; errors naming the slot or
 * attribute. */
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
    rng = oc_seed("ops_lrn");
}

TestSuite(ops_lrn, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct lrn_case {
    int n;
    int64_t x[5];
    int64_t size;
    double alpha, beta, bias;
} cases[] = {
    {4, {2, 5, 3, 3}, 3, 2e-4, 0.5, 2.0},   {4, {1, 6, 2, 2}, 4, 1e-1, 0.75, 1.0},
    {3, {2, 4, 5}, 2, 0.3, 0.6, 1.5},       {2, {3, 7}, 5, 1.0, 1.0, 0.5},
    {4, {1, 1, 3, 2}, 3, 0.5, 0.75, 1.0},   {4, {2, 3, 2, 2}, 9, 0.25, 0.4, 1.0},
    {5, {1, 3, 2, 2, 2}, 1, 0.7, 2.0, 1.0}, {4, {0, 3, 2, 2}, 3, 1e-4, 0.75, 1.0},
};

/* ONNX's loop: element by element, in double. */
static double *reference(const struct lrn_case *c, vq_tensor *x)
{
    int64_t n = 1, inner = 1, ch = c->x[1];
    for (int d = 0; d < c->n; d++)
        n *= c->x[d];
    for (int d = 2; d < c->n; d++)
        inner *= c->x[d];
    double *w = calloc((size_t)(n ? n : 1), sizeof *w);
    cr_assert(w);
    for (int64_t e = 0; e < n; e++) {
        int64_t k = e / inner % ch, base = e - k * inner;
        int64_t lo = (int64_t)floor((c->size - 1) / 2.0), hi = (int64_t)ceil((c->size - 1) / 2.0);
        double s = 0;
        for (int64_t j = k - lo > 0 ? k - lo : 0; j <= k + hi && j < ch; j++)
            s += oc_get(x, base + j * inner) * oc_get(x, base + j * inner);
        w[e] = oc_get(x, e) / pow(c->bias + c->alpha / (double)c->size * s, c->beta);
    }
    return w;
}

static int attrs(const struct lrn_case *c, vq_attr *at)
{
    at[0] = VQ_ATTR_I("size", c->size);
    at[1] = VQ_ATTR_F("alpha", c->alpha);
    at[2] = VQ_ATTR_F("beta", c->beta);
    at[3] = VQ_ATTR_F("bias", c->bias);
    return 4;
}

Test(ops_lrn, lrn_matches_onnx_definition_in_f32_and_f64)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64};
    for (int c = 0; c < N_OF(cases); c++)
        for (int d = 0; d < N_OF(dts); d++) {
            vq_tensor *x = oc_rand(&rng, dts[d], cases[c].n, cases[c].x, -3, 3);
            vq_attr at[4];
            vq_tensor *out = oc_run1("lrn", &x, 1, at, attrs(&cases[c], at));
            double *w = reference(&cases[c], x);
            cr_assert_eq(vq_tensor_dtype(out), dts[d]);
            oc_assert_close(out, cases[c].n, cases[c].x, w, dts[d] == VQ_F32 ? 2e-6 : 1e-13,
                            dts[d] == VQ_F32 ? 1e-7 : 1e-15);
            free(w);
            vq_tensor_release(out);
            vq_tensor_release(x);
        }
}

/* The defaults are ONNX's: alpha 1e-4, beta 0.75, bias 1 (numpy's values
 * for one lane of three channels, size 3). */
Test(ops_lrn, defaults_are_onnx_ones)
{
    vq_tensor *x = oc_from(VQ_F64, 3, (int64_t[]){1, 3, 1}, (double[]){10, -20, 30});
    vq_attr at = VQ_ATTR_I("size", 3);
    vq_tensor *out = oc_run1("lrn", &x, 1, &at, 1);
    /* x / (1 + 1e-4 / 3 * s) ** 0.75 with s = 500, 1400, 1300 */
    static const double want[3] = {9.8767954949272916, -19.327411826260906, 29.0605575681499};
    oc_assert_close(out, 3, (int64_t[]){1, 3, 1}, want, 1e-14, 0);
    vq_tensor_release(out);
    vq_tensor_release(x);
}

Test(ops_lrn, gradient_matches_finite_differences)
{
    for (int c = 0; c < N_OF(cases); c++) {
        vq_tensor *x = oc_rand(&rng, VQ_F64, cases[c].n, cases[c].x, -2, 2);
        vq_attr at[4];
        oc_grad_check("lrn", &x, 1, 1, at, attrs(&cases[c], at), 1u, &rng);
        vq_tensor_release(x);
    }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_lrn, bad_inputs_name_the_slot_or_attribute)
{
    vq_tensor *v, *i, *x;
    cr_assert_eq(vq_tensor_new(&v, VQ_F32, 1, (int64_t[]){3}), 0);
    cr_assert_eq(vq_tensor_new(&i, VQ_I32, 2, (int64_t[]){2, 3}), 0);
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 2, (int64_t[]){2, 3}), 0);
    vq_attr at = VQ_ATTR_I("size", 3);
    cr_assert_eq(oc_try("lrn", &v, 1, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "lrn: input X (slot 0): has rank 1"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("lrn", &i, 1, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input X (slot 0)"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("lrn", &x, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "size"), "%s", vq_errmsg());
    at = VQ_ATTR_I("size", 0);
    cr_assert_eq(oc_try("lrn", &x, 1, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "lrn: attribute size: is 0"), "%s", vq_errmsg());
    vq_tensor_release(v);
    vq_tensor_release(i);
    vq_tensor_release(x);
}
