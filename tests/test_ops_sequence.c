/* reverse_sequence (ops/cpu/sequence.c): the kernel against a plain loop
 * over ONNX ReverseSequence's definition in every dtype, time-major and
 * batch-major, ranks 2 to 4, lengths 0, 1, partial and whole, in i32 and
 * i64; the gradient (reverse_sequence of dOut) against finite
 * differences; errors naming the slot, attribute or the bad length. */
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
    rng = oc_seed("ops_sequence");
}

TestSuite(ops_sequence, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct seq_case {
    int n;
    int64_t x[4];
    int batch_axis;
} cases[] = {
    {2, {4, 4}, 1},       {2, {4, 4}, 0}, {3, {5, 3, 2}, 1}, {3, {3, 5, 2}, 0},
    {4, {2, 6, 2, 3}, 0}, {2, {1, 3}, 1}, {3, {0, 2, 2}, 1},
};

/* Out[t, b, i] = X[t < len ? len - 1 - t : t, b, i], element by element. */
static double *reference(const struct seq_case *c, vq_tensor *x, const int64_t *lens)
{
    int64_t n = 1, inner = 1, d1 = c->x[1];
    for (int d = 0; d < c->n; d++)
        n *= c->x[d];
    for (int d = 2; d < c->n; d++)
        inner *= c->x[d];
    double *w = calloc((size_t)(n ? n : 1), sizeof *w);
    cr_assert(w);
    for (int64_t e = 0; e < n; e++) {
        int64_t i = e % inner, a0 = e / inner / d1, a1 = e / inner % d1;
        int64_t t = c->batch_axis ? a0 : a1, b = c->batch_axis ? a1 : a0;
        int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
        int64_t s0 = c->batch_axis ? from : b, s1 = c->batch_axis ? b : from;
        w[e] = oc_get(x, (s0 * d1 + s1) * inner + i);
    }
    return w;
}

/* Lens for case c: random in [0, T], the first 0 and the last T. */
static vq_tensor *lens_of(const struct seq_case *c, vq_dtype dt, int64_t *lens)
{
    int64_t nb = c->x[c->batch_axis], nt = c->x[1 - c->batch_axis];
    double v[8];
    for (int64_t b = 0; b < nb; b++) {
        lens[b] = b == 0 ? 0 : b == nb - 1 ? nt : (int64_t)oc_uniform(&rng, 0, (double)nt + 1);
        v[b] = (double)lens[b];
    }
    return oc_from(dt, 1, &nb, v);
}

Test(ops_sequence, reverse_sequence_matches_the_plain_loop_in_every_dtype)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
    for (int c = 0; c < N_OF(cases); c++)
        for (int d = 0; d < N_OF(dts); d++)
            for (int li = 0; li < 2; li++) {
                int64_t lens[8];
                vq_tensor *in[2] = {oc_rand(&rng, dts[d], cases[c].n, cases[c].x, -50, 50),
                                    lens_of(&cases[c], li ? VQ_I64 : VQ_I32, lens)};
                vq_attr at[2] = {VQ_ATTR_I("batch_axis", cases[c].batch_axis),
                                 VQ_ATTR_I("time_axis", 1 - cases[c].batch_axis)};
                vq_tensor *out = oc_run1("reverse_sequence", in, 2, at, 2);
                double *w = reference(&cases[c], in[0], lens);
                cr_assert_eq(vq_tensor_dtype(out), dts[d]);
                oc_assert_close(out, cases[c].n, cases[c].x, w, 0, 0);
                free(w);
                vq_tensor_release(out);
                vq_tensor_release(in[0]);
                vq_tensor_release(in[1]);
            }
}

/* ONNX's example (test_reversesequence_time): time-major is the default. */
Test(ops_sequence, the_default_is_time_major)
{
    double xv[16], want[16] = {3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15};
    for (int i = 0; i < 16; i++)
        xv[i] = i % 4 * 4 + i / 4;
    vq_tensor *in[2] = {oc_from(VQ_F32, 2, (int64_t[]){4, 4}, xv),
                        oc_from(VQ_I64, 1, (int64_t[]){4}, (double[]){4, 3, 2, 1})};
    vq_tensor *out = oc_run1("reverse_sequence", in, 2, NULL, 0);
    oc_assert_close(out, 2, (int64_t[]){4, 4}, want, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}

Test(ops_sequence, gradient_matches_finite_differences)
{
    for (int c = 0; c < N_OF(cases); c++) {
        int64_t lens[8];
        vq_tensor *in[2] = {oc_rand(&rng, VQ_F64, cases[c].n, cases[c].x, -2, 2),
                            lens_of(&cases[c], VQ_I64, lens)};
        vq_attr at[2] = {VQ_ATTR_I("batch_axis", cases[c].batch_axis),
                         VQ_ATTR_I("time_axis", 1 - cases[c].batch_axis)};
        oc_grad_check("reverse_sequence", in, 2, 1, at, 2, 1u, &rng);
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
    }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_sequence, bad_lengths_axes_and_shapes_name_what_is_wrong)
{
    vq_tensor *in[2] = {oc_rand(&rng, VQ_F32, 2, (int64_t[]){3, 2}, -1, 1),
                        oc_from(VQ_I64, 1, (int64_t[]){2}, (double[]){3, 4})};
    cr_assert_eq(oc_try("reverse_sequence", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reverse_sequence: length 4 at Lens element 1 is outside [0, 4)"),
              "%s", vq_errmsg());
    oc_set(in[1], 0, -1);
    oc_set(in[1], 1, 2);
    cr_assert_eq(oc_try("reverse_sequence", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "length -1 at Lens element 0"), "%s", vq_errmsg());
    vq_attr at[2] = {VQ_ATTR_I("batch_axis", 1), VQ_ATTR_I("time_axis", 1)};
    cr_assert_eq(oc_try("reverse_sequence", in, 2, 1, at, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reverse_sequence: attribute batch_axis"), "%s", vq_errmsg());
    at[0] = VQ_ATTR_I("batch_axis", 0);
    at[1] = VQ_ATTR_I("time_axis", 1);
    cr_assert_eq(oc_try("reverse_sequence", in, 2, 1, at, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input Lens (slot 1): has 2 lengths for a batch of 3"), "%s",
              vq_errmsg());
    vq_tensor *f = oc_from(VQ_F32, 1, (int64_t[]){2}, (double[]){1, 1});
    vq_tensor *bad[2] = {in[0], f};
    cr_assert_eq(oc_try("reverse_sequence", bad, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input Lens (slot 1)"), "%s", vq_errmsg());
    vq_tensor_release(f);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}
