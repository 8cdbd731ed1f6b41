/* max_unpool2d (ops/cpu/unpool.c): max_pool2d's values put back at
 * max_pool2d_argmax's indices against a plain loop over the definition,
 * for several windows, pads, output sizes, both float dtypes and both
 * index dtypes; repeated indices (the last writer wins); the gradient
 * against finite differences, repeats included; errors naming the slot or
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
    rng = oc_seed("ops_unpool");
}

TestSuite(ops_unpool, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct unpool_case {
    int64_t x[4];
    int64_t kernel[2], strides[2], pads[4];
    int64_t size[2]; /* output_size, or 0: the default */
} cases[] = {
    {{1, 1, 4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {0, 0}},
    {{2, 3, 5, 6}, {3, 2}, {2, 2}, {1, 0, 1, 1}, {5, 6}}, /* the default: 5 x 5 */
    {{1, 2, 5, 5}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {0, 0}}, /* overlapping: repeats */
    {{2, 1, 4, 5}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {4, 5}}, /* the default: 4 x 4 */
    {{1, 2, 4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {6, 7}}, /* larger */
};

Test(ops_unpool, a_pools_values_go_back_to_its_argmax_and_zeros_elsewhere)
{
    static const vq_dtype fdt[2] = {VQ_F32, VQ_F64}, idt[2] = {VQ_I64, VQ_I32};
    for (int c = 0; c < N_OF(cases); c++)
        for (int d = 0; d < 2; d++)
            for (int id = 0; id < 2; id++) {
                const struct unpool_case *u = &cases[c];
                vq_tensor *x = oc_rand(&rng, fdt[d], 4, u->x, -3, 3);
                vq_attr pool[3] = {VQ_ATTR_IS("kernel", u->kernel, 2),
                                   VQ_ATTR_IS("strides", u->strides, 2),
                                   VQ_ATTR_IS("pads", u->pads, 4)};
                vq_tensor *pooled = oc_run1("max_pool2d", &x, 1, pool, 3);
                vq_tensor *arg = oc_run1("max_pool2d_argmax", &x, 1, pool, 3);
                vq_tensor *idx = arg;
                if (idt[id] == VQ_I32) {
                    vq_attr cast = VQ_ATTR_S("dtype", "i32");
                    idx = oc_run1("cast", &arg, 1, &cast, 1);
                    vq_tensor_release(arg);
                }
                /* Out's dims: the pool's input, or output_size */
                int64_t os[4] = {u->x[0], u->x[1], u->x[2], u->x[3]};
                const int64_t *ph = vq_tensor_shape(pooled);
                for (int k = 0; k < 2; k++) {
                    int64_t dflt = (ph[2 + k] - 1) * u->strides[k] - u->pads[k] - u->pads[k + 2] +
                                   u->kernel[k];
                    os[2 + k] = u->size[0] ? u->size[k] : dflt;
                }
                vq_attr at[4] = {pool[0], pool[1], pool[2], VQ_ATTR_IS("output_size", u->size, 2)};
                vq_tensor *in[2] = {pooled, idx};
                vq_tensor *out = oc_run1("max_unpool2d", in, 2, at, u->size[0] ? 4 : 3);
                int64_t n = os[0] * os[1] * os[2] * os[3];
                double *want = calloc((size_t)n, sizeof *want);
                for (int64_t i = 0; i < vq_tensor_numel(pooled); i++)
                    want[(int64_t)oc_get(idx, i)] = oc_get(pooled, i);
                cr_assert_eq(vq_tensor_dtype(out), fdt[d]);
                oc_assert_close(out, 4, os, want, 0, 0);
                free(want);
                vq_tensor_release(out);
                vq_tensor_release(idx);
                vq_tensor_release(pooled);
                vq_tensor_release(x);
            }
}

Test(ops_unpool, of_repeated_indices_the_last_element_wins)
{
    int64_t xs[4] = {1, 2, 1, 3}, k[2] = {2, 2};
    double xv[6] = {1, 2, 3, 4, 5, 6}, iv[6] = {3, 3, 0, 9, 15, 9};
    vq_tensor *in[2] = {oc_from(VQ_F32, 4, xs, xv), oc_from(VQ_I64, 4, xs, iv)};
    vq_attr at[2] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", k, 2)};
    vq_tensor *out = oc_run1("max_unpool2d", in, 2, at, 2);
    double want[24] = {0};
    want[3] = 2;
    want[0] = 3;
    want[9] = 6;
    want[15] = 5;
    /* two planes of [2, 6]: the default size (1 - 1) * 2 + 2, (3 - 1) * 2 + 2 */
    oc_assert_close(out, 4, (int64_t[]){1, 2, 2, 6}, want, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}

Test(ops_unpool, gradients_match_finite_differences_and_losers_get_none)
{
    for (int c = 0; c < N_OF(cases); c++) {
        const struct unpool_case *u = &cases[c];
        vq_tensor *x0 = oc_rand(&rng, VQ_F64, 4, u->x, -3, 3);
        vq_attr at[4] = {VQ_ATTR_IS("kernel", u->kernel, 2), VQ_ATTR_IS("strides", u->strides, 2),
                         VQ_ATTR_IS("pads", u->pads, 4), VQ_ATTR_IS("output_size", u->size, 2)};
        int nat = u->size[0] ? 4 : 3;
        vq_tensor *in[2] = {oc_run1("max_pool2d", &x0, 1, at, 3),
                            oc_run1("max_pool2d_argmax", &x0, 1, at, 3)};
        oc_grad_check("max_unpool2d", in, 2, 1, at, nat, 1u, &rng);
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
        vq_tensor_release(x0);
    }
    /* repeats: the gradient reaches the last writer of each place only */
    int64_t xs[4] = {1, 1, 2, 3}, k[2] = {2, 2};
    double iv[6] = {0, 5, 0, 7, 5, 2};
    vq_tensor *in[2] = {oc_rand(&rng, VQ_F64, 4, xs, -1, 1), oc_from(VQ_I64, 4, xs, iv)};
    vq_attr at[2] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", k, 2)};
    oc_grad_check("max_unpool2d", in, 2, 1, at, 2, 1u, &rng);
    vq_tensor *out = oc_run1("max_unpool2d", in, 2, at, 2);
    vq_tensor *gin[3] = {in[0], in[1], out};
    vq_tensor *dx = oc_run1("max_unpool2d_grad", gin, 3, at, 2);
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = i == 0 || i == 1 ? 0 : oc_get(in[0], i);
    oc_assert_close(dx, 4, xs, want, 0, 0);
    vq_tensor_release(dx);
    vq_tensor_release(out);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_unpool, bad_inputs_name_the_slot_or_attribute)
{
    int64_t xs[4] = {1, 1, 2, 2}, k[2] = {2, 2}, size3[3] = {4, 4, 4};
    double iv[4] = {0, 5, 16, 7};
    vq_tensor *in[2] = {oc_rand(&rng, VQ_F32, 4, xs, -1, 1), oc_from(VQ_I64, 4, xs, iv)};
    vq_attr at[3] = {VQ_ATTR_IS("kernel", k, 2), VQ_ATTR_IS("strides", k, 2),
                     VQ_ATTR_IS("output_size", size3, 3)};
    cr_assert_eq(oc_try("max_unpool2d", in, 2, 1, at, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "max_unpool2d: index 16 at Indices element 2 is outside [0, 16)"),
              "%s", vq_errmsg());
    cr_assert_eq(oc_try("max_unpool2d", in, 2, 1, at, 3), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "attribute output_size"), "%s", vq_errmsg());
    vq_tensor *f = oc_rand(&rng, VQ_F32, 4, xs, 0, 4), *bad[2] = {in[0], f};
    cr_assert_eq(oc_try("max_unpool2d", bad, 2, 1, at, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input Indices (slot 1)"), "%s", vq_errmsg());
    vq_tensor *y = oc_rand(&rng, VQ_F32, 3, (int64_t[]){1, 2, 2}, 0, 4), *r3[2] = {y, in[1]};
    cr_assert_eq(oc_try("max_unpool2d", r3, 2, 1, at, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input X (slot 0)"), "%s", vq_errmsg());
    vq_tensor_release(y);
    vq_tensor_release(f);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}
