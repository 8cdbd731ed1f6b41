/* det (ops/cpu/det.c): determinants against numpy's and against the
 * cofactor expansion written out (an independent plain loop) over
 * batches, sizes 0 to 6, pivoting cases and singular matrices; the
 * gradient (the cofactor matrix times dOut) against finite differences,
 * regular and singular; shape errors naming the slot. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_det");
}

TestSuite(ops_det, .init = setup, .fini = leak_check);

/* Laplace expansion along the first row (n <= 6). */
static double expand(const double *a, int n)
{
    if (n == 0)
        return 1;
    if (n == 1)
        return a[0];
    double m[36], s = 0;
    for (int j = 0; j < n; j++) {
        for (int r = 1; r < n; r++)
            for (int c = 0, k = 0; c < n; c++)
                if (c != j)
                    m[(r - 1) * (n - 1) + k++] = a[r * n + c];
        s += (j % 2 ? -1 : 1) * a[j] * expand(m, n - 1);
    }
    return s;
}

Test(ops_det, det_matches_numpy)
{
    int64_t shape[3] = {2, 3, 3}, two = 2;
    double x[18] = {2, -1, 0, 1, 3, 2, 0, 1, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9.5};
    for (int d = 0; d < 2; d++) {
        vq_tensor *in = oc_from(d ? VQ_F64 : VQ_F32, 3, shape, x);
        vq_tensor *o = oc_run1("det", &in, 1, NULL, 0);
        /* np.linalg.det */
        oc_assert_close(o, 1, &two, (double[]){24.0, -1.5}, d ? 1e-13 : 1e-6, 0);
        vq_tensor_release(o);
        vq_tensor_release(in);
    }
}

Test(ops_det, det_matches_the_cofactor_expansion_over_batches_and_sizes)
{
    for (int n = 0; n <= 6; n++)
        for (int d = 0; d < 2; d++) {
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            int64_t shape[4] = {2, 3, n, n}, bs[2] = {2, 3};
            vq_tensor *in = oc_rand(&rng, dt, 4, shape, -2, 2);
            if (n >= 2) { /* matrix 1: a zero leading element (pivoting); matrix 2: singular */
                oc_set(in, (int64_t)n * n, 0);
                for (int j = 0; j < n; j++)
                    oc_set(in, 2 * n * n + n + j, oc_get(in, 2 * n * n + j));
            }
            vq_tensor *o = oc_run1("det", &in, 1, NULL, 0);
            double want[6], a[36];
            for (int b = 0; b < 6; b++) {
                for (int i = 0; i < n * n; i++)
                    a[i] = oc_get(in, (int64_t)b * n * n + i);
                want[b] = expand(a, n);
            }
            oc_assert_close(o, 2, bs, want, d ? 1e-12 : 1e-5, d ? 1e-12 : 1e-5);
            if (n >= 2)
                cr_assert_eq(oc_get(o, 2), 0, "a matrix with two equal rows: %g", oc_get(o, 2));
            vq_tensor_release(o);
            vq_tensor_release(in);
        }
}

/* dX = dOut cofactors(X) against central differences; a singular matrix
 * of rank n - 1 has a nonzero gradient, one of rank n - 2 a zero one. */
Test(ops_det, det_gradient_matches_finite_differences_regular_and_singular)
{
    for (int n = 1; n <= 5; n++) {
        int64_t shape[3] = {3, n, n};
        vq_tensor *in = oc_rand(&rng, VQ_F64, 3, shape, -2, 2);
        if (n >= 2)
            for (int j = 0; j < n; j++) /* matrix 1: rows 0 and 1 equal */
                oc_set(in, n * n + n + j, oc_get(in, n * n + j));
        if (n >= 3)
            for (int j = 0; j < n; j++) /* matrix 2: rows 0, 1 and 2 equal */
                for (int r = 1; r < 3; r++)
                    oc_set(in, 2 * n * n + r * n + j, oc_get(in, 2 * n * n + j));
        double err = oc_grad_check("det", &in, 1, 1, NULL, 0, 1, &rng);
        cr_assert_lt(err, 1e-6, "n %d: %g", n, err);
        vq_tensor_release(in);
    }
    /* the singular gradient is the cofactors: for [[1, 2], [2, 4]], dOut 1:
     * [[4, -2], [-2, 1]] */
    int64_t s2[2] = {2, 2}, none[1] = {0};
    vq_tensor *in[2] = {oc_from(VQ_F64, 2, s2, (double[]){1, 2, 2, 4}),
                        oc_from(VQ_F64, 0, none, (double[]){1})};
    vq_tensor *o = oc_run1("det_grad", in, 2, NULL, 0);
    oc_assert_close(o, 2, s2, (double[]){4, -2, -2, 1}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}

Test(ops_det, non_square_and_integer_inputs_are_errors)
{
    int64_t s[2] = {3, 4}, v[1] = {3};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0, 1), *y = oc_rand(&rng, VQ_F32, 1, v, 0, 1);
    cr_assert_eq(oc_try("det", &x, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(),
                     "det: input X (slot 0): is 3 x 4 in its last two dims, not square"),
              "%s", vq_errmsg());
    cr_assert_eq(oc_try("det", &y, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "has 1 dim(s)"), "%s", vq_errmsg());
    vq_tensor_release(x);
    vq_tensor_release(y);
    int64_t q[2] = {2, 2};
    vq_tensor *i = oc_rand(&rng, VQ_I32, 2, q, 0, 3);
    cr_assert_eq(oc_try("det", &i, 1, 1, NULL, 0), VQ_EINVAL);
    vq_tensor_release(i);
}
