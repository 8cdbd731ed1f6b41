/* reduce_prod and reduce_prod_grad (ops/cpu/prod.c): the kernel against a
 * plain loop over its definition in every dtype it takes (integers
 * wrapping), over every set of axes, negative axes, keepdim, size-0 dims
 * (the product of none is 1); the gradient against finite differences
 * with no, one and several zeros in a group, and spelled out; errors
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
    rng = oc_seed("ops_prod");
}

TestSuite(ops_prod, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct prod_case {
    int n, naxes;
    int64_t x[3], axes[3];
} cases[] = {
    {1, 0, {5}, {0}},          {2, 1, {3, 4}, {0}},        {2, 1, {3, 4}, {-1}},
    {3, 2, {2, 3, 4}, {0, 2}}, {3, 1, {2, 3, 4}, {1}},     {3, 0, {2, 3, 2}, {0}},
    {3, 1, {2, 0, 3}, {1}},    {3, 2, {4, 1, 2}, {-3, 1}},
};

/* Out's shape (keepdim or not) and, for X's element e, its output. */
static bool reduced(const struct prod_case *c, int d)
{
    if (c->naxes == 0)
        return true;
    for (int i = 0; i < c->naxes; i++)
        if ((c->axes[i] + c->n) % c->n == d)
            return true;
    return false;
}

static int out_shape(const struct prod_case *c, bool keep, int64_t *os)
{
    int n = 0;
    for (int d = 0; d < c->n; d++)
        if (!reduced(c, d))
            os[n++] = c->x[d];
        else if (keep)
            os[n++] = 1;
    return n;
}

static int64_t out_index(const struct prod_case *c, int64_t e)
{
    int64_t coord[3], o = 0;
    for (int d = c->n - 1; d >= 0; d--) {
        coord[d] = e % c->x[d];
        e /= c->x[d];
    }
    for (int d = 0; d < c->n; d++)
        if (!reduced(c, d))
            o = o * c->x[d] + coord[d];
    return o;
}

static int64_t count(int n, const int64_t *s)
{
    int64_t k = 1;
    for (int d = 0; d < n; d++)
        k *= s[d];
    return k;
}

Test(ops_prod, reduce_prod_matches_the_plain_loop_in_every_dtype)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int c = 0; c < N_OF(cases); c++)
        for (int d = 0; d < N_OF(dts); d++)
            for (int keep = 0; keep < 2; keep++) {
                const struct prod_case *pc = &cases[c];
                bool integer = dts[d] == VQ_I32 || dts[d] == VQ_I64;
                vq_tensor *x =
                    oc_rand(&rng, dts[d], pc->n, pc->x, integer ? -200 : -2, integer ? 200 : 2);
                vq_attr at[2] = {VQ_ATTR_IS("axes", pc->axes, pc->naxes),
                                 VQ_ATTR_B("keepdim", keep)};
                vq_tensor *out = oc_run1("reduce_prod", &x, 1, at, 2);
                int64_t os[3];
                int on = out_shape(pc, keep, os), no = (int)count(on, os);
                double want[64];
                uint64_t wrap[64];
                for (int i = 0; i < no; i++) {
                    want[i] = 1;
                    wrap[i] = 1;
                }
                for (int64_t e = 0; e < vq_tensor_numel(x); e++) {
                    int64_t o = out_index(pc, e);
                    want[o] *= oc_get(x, e);
                    wrap[o] *= (uint64_t)(int64_t)oc_get(x, e);
                }
                for (int i = 0; i < no && integer; i++)
                    want[i] = dts[d] == VQ_I32 ? (double)(int32_t)(uint32_t)wrap[i]
                                               : (double)(int64_t)wrap[i];
                cr_assert_eq(vq_tensor_dtype(out), dts[d]);
                double tol = dts[d] == VQ_F32 ? 1e-6 : 0;
                oc_assert_close(out, on, os, want, tol, 0);
                vq_tensor_release(out);
                vq_tensor_release(x);
            }
}

/* X with zeros placed so that groups have none, one and several. */
static vq_tensor *with_zeros(const struct prod_case *c, int every)
{
    vq_tensor *x = oc_rand(&rng, VQ_F64, c->n, c->x, 0.5, 2);
    for (int64_t e = 0; e < vq_tensor_numel(x); e++) {
        if (oc_next(&rng) % 2)
            oc_set(x, e, -oc_get(x, e));
        if (every && e % every == 0)
            oc_set(x, e, 0);
    }
    return x;
}

Test(ops_prod, gradients_match_finite_differences_with_and_without_zeros)
{
    static const int every[] = {0, 7, 3, 2};
    for (int c = 0; c < N_OF(cases); c++)
        for (int z = 0; z < N_OF(every); z++)
            for (int keep = 0; keep < 2; keep++) {
                vq_tensor *x = with_zeros(&cases[c], every[z]);
                vq_attr at[2] = {VQ_ATTR_IS("axes", cases[c].axes, cases[c].naxes),
                                 VQ_ATTR_B("keepdim", keep)};
                oc_grad_check("reduce_prod", &x, 1, 1, at, 2, 1u, &rng);
                vq_tensor_release(x);
            }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_prod, reduce_prod_grad_spelled_out)
{
    /* rows [2, 3, 4] (no zero), [0, 5, 6] (one), [0, 0, 7] (two) */
    double xv[9] = {2, 3, 4, 0, 5, 6, 0, 0, 7}, gv[3] = {1, 10, 100};
    vq_tensor *in[2] = {oc_from(VQ_F32, 2, (int64_t[]){3, 3}, xv),
                        oc_from(VQ_F32, 1, (int64_t[]){3}, gv)};
    vq_attr at = VQ_ATTR_IS("axes", ((int64_t[]){1}), 1);
    vq_tensor *dx = oc_run1("reduce_prod_grad", in, 2, &at, 1);
    double want[9] = {12, 8, 6, 300, 0, 0, 0, 0, 0};
    oc_assert_close(dx, 2, (int64_t[]){3, 3}, want, 0, 0);
    vq_tensor_release(dx);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}

Test(ops_prod, bad_inputs_name_the_slot_or_attribute)
{
    vq_tensor *b, *x, *g;
    cr_assert_eq(vq_tensor_new(&b, VQ_BOOL, 1, (int64_t[]){3}), 0);
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 2, (int64_t[]){2, 3}), 0);
    cr_assert_eq(vq_tensor_new(&g, VQ_F32, 1, (int64_t[]){3}), 0);
    cr_assert_eq(oc_try("reduce_prod", &b, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reduce_prod: input X (slot 0)"), "%s", vq_errmsg());
    vq_attr at = VQ_ATTR_IS("axes", ((int64_t[]){1, -1}), 2);
    cr_assert_eq(oc_try("reduce_prod", &x, 1, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reduce_prod: attribute axes: axis -1 repeats axis 1"), "%s",
              vq_errmsg());
    vq_attr a1 = VQ_ATTR_IS("axes", ((int64_t[]){1}), 1);
    vq_tensor *in[2] = {x, g};
    cr_assert_eq(oc_try("reduce_prod_grad", in, 2, 1, &a1, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reduce_prod's output shape"), "%s", vq_errmsg());
    vq_tensor_release(b);
    vq_tensor_release(x);
    vq_tensor_release(g);
}
