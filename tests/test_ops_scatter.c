/* scatter_elements, scatter_nd and gather_nd (ops/cpu/scatter.c): the
 * kernels against plain loops over their definitions in every dtype they
 * take, both index dtypes, every reduction, negative indices and
 * duplicates (the last one winning with reduction none), and against
 * constants numpy computed (np.add.at and its kin); reduce_max's NaN and
 * signed-zero rules for max and min, integers wrapping; the gradients
 * against finite differences, torch's rule for duplicates in a program;
 * errors naming the op, the slot, the attribute or the bad index. */
#include "opcheck.h"

#include <varq/varq.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_scatter");
}

TestSuite(ops_scatter, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const reductions[] = {"none", "add", "mul", "max", "min"};
static const vq_dtype all_dtypes[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};

/* reduction r (an index of reductions) of a and v, on values the tests
 * keep exact in double: small integers and halves, no NaN. */
static double combine(int r, double a, double v)
{
    switch (r) {
    case 1: return a + v;
    case 2: return a * v;
    case 3: return v > a ? v : a;
    case 4: return v < a ? v : a;
    default: return v;
    }
}

static int64_t numel_of(int n, const int64_t *shape)
{
    int64_t k = 1;
    for (int d = 0; d < n; d++)
        k *= shape[d];
    return k;
}

static double *buffer(int64_t n)
{
    double *w = calloc((size_t)(n ? n : 1), sizeof *w);
    cr_assert(w);
    return w;
}

/* Values in [lo, hi): integers (bool: 0 and 1; floats: halves). */
static vq_tensor *values(vq_dtype dt, int n, const int64_t *shape, double lo, double hi)
{
    if (dt == VQ_BOOL)
        return oc_rand(&rng, dt, n, shape, 0, 2);
    vq_tensor *t = oc_rand(&rng, dt, n, shape, lo, hi);
    if (dt == VQ_F32 || dt == VQ_F64)
        for (int64_t i = 0; i < vq_tensor_numel(t); i++)
            oc_set(t, i, floor(oc_get(t, i) * 2) / 2);
    return t;
}

/* ---- scatter_elements ---- */

/* X's shape, Indices' (and Updates') shape, the axis. */
static const struct elements_case {
    int n;
    int64_t x[3], idx[3], axis;
} elements_cases[] = {
    {2, {4, 3}, {7, 3}, 0},
    {2, {4, 3}, {2, 2}, 1},
    {3, {2, 3, 4}, {2, 5, 2}, 1},
    {3, {2, 3, 4}, {1, 2, 6}, -1},
    {1, {5}, {9}, 0},
    {2, {3, 4}, {0, 4}, 0},
    {3, {2, 1, 3}, {2, 1, 3}, -3},
    {3, {2, 3, 4}, {2, 3, 4}, 2},
};

/* The plain loop: Out = X, then Indices' elements in row-major order. */
static double *elements_reference(const struct elements_case *c, vq_tensor *x, vq_tensor *idx,
                                  vq_tensor *upd, int r)
{
    int axis = (int)(c->axis < 0 ? c->axis + c->n : c->axis);
    int64_t nx = numel_of(c->n, c->x), ni = numel_of(c->n, c->idx);
    double *w = buffer(nx);
    for (int64_t i = 0; i < nx; i++)
        w[i] = oc_get(x, i);
    for (int64_t e = 0; e < ni; e++) {
        int64_t rest = e, co[3], off = 0;
        for (int d = c->n - 1; d >= 0; d--) {
            co[d] = rest % c->idx[d];
            rest /= c->idx[d];
        }
        int64_t v = (int64_t)oc_get(idx, e);
        co[axis] = v < 0 ? v + c->x[axis] : v;
        for (int d = 0; d < c->n; d++)
            off = off * c->x[d] + co[d];
        w[off] = combine(r, w[off], oc_get(upd, e));
    }
    return w;
}

Test(ops_scatter, scatter_elements_matches_the_plain_loop_for_every_reduction_and_dtype)
{
    for (int c = 0; c < N_OF(elements_cases); c++)
        for (int r = 0; r < N_OF(reductions); r++)
            for (int d = 0; d < N_OF(all_dtypes); d++)
                for (int t = 0; t < 2; t++) {
                    const struct elements_case *k = &elements_cases[c];
                    vq_dtype dt = all_dtypes[d];
                    if (dt == VQ_BOOL && r > 0)
                        continue;
                    int axis = (int)(k->axis < 0 ? k->axis + k->n : k->axis);
                    double dim = (double)k->x[axis];
                    vq_tensor *in[3] = {values(dt, k->n, k->x, -4, 4),
                                        oc_rand(&rng, t ? VQ_I64 : VQ_I32, k->n, k->idx, -dim, dim),
                                        values(dt, k->n, k->idx, -3, 3)};
                    vq_attr at[2] = {VQ_ATTR_I("axis", k->axis),
                                     VQ_ATTR_S("reduction", reductions[r])};
                    vq_tensor *out = oc_run1("scatter_elements", in, 3, at, 2);
                    double *w = elements_reference(k, in[0], in[1], in[2], r);
                    cr_assert_eq(vq_tensor_dtype(out), dt);
                    oc_assert_close(out, k->n, k->x, w, 0, 0);
                    free(w);
                    vq_tensor_release(out);
                    for (int i = 0; i < 3; i++)
                        vq_tensor_release(in[i]);
                }
}

/* From numpy (scripts: np.add.at, np.multiply.at, np.maximum.at and
 * np.minimum.at on the index tuples of np.indices with the axis' entries
 * replaced; none: the updates assigned one at a time in order):
 *   X = np.arange(12.).reshape(3, 4) * 0.5 - 2
 *   axis 0:  I0 = [[0, -1, 2, 1], [-3, 2, -1, 1]],  U0 = [[1.5, -2, 3, .5], [4, -1, 2.5, -3]]
 *   axis -1: I1 = [[3, -4], [1, 1], [-1, 0]],        U1 = [[2, -.5], [1.5, -4], [3, 6]] */
static const double np_x[12] = {-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5};
static const double np_i0[8] = {0, -1, 2, 1, -3, 2, -1, 1};
static const double np_u0[8] = {1.5, -2, 3, 0.5, 4, -1, 2.5, -3};
static const double np_i1[6] = {3, -4, 1, 1, -1, 0};
static const double np_u1[6] = {2, -0.5, 1.5, -4, 3, 6};
static const double np_elements[5][2][12] = {
    {{4, -1.5, -1, -0.5, 0, 0.5, 1, -3, 2, -1, 2.5, 3.5},
     {-0.5, -1.5, -1, 2, 0, -4, 1, 1.5, 6, 2.5, 3, 3}},
    {{3.5, -1.5, -1, -0.5, 0, 0.5, 1, -1, 2, -0.5, 8.5, 3.5},
     {-2.5, -1.5, -1, 1.5, 0, -2, 1, 1.5, 8, 2.5, 3, 6.5}},
    {{-12, -1.5, -1, -0.5, 0, 0.5, 1, -2.25, 2, 5, 22.5, 3.5},
     {1, -1.5, -1, -1, 0, -3, 1, 1.5, 12, 2.5, 3, 10.5}},
    {{4, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5},
     {-0.5, -1.5, -1, 2, 0, 1.5, 1, 1.5, 6, 2.5, 3, 3.5}},
    {{-2, -1.5, -1, -0.5, 0, 0.5, 1, -3, 2, -2, 2.5, 3.5},
     {-2, -1.5, -1, -0.5, 0, -4, 1, 1.5, 2, 2.5, 3, 3}},
};

Test(ops_scatter, scatter_elements_matches_numpy_for_every_reduction)
{
    const int64_t xs[2] = {3, 4}, s0[2] = {2, 4}, s1[2] = {3, 2};
    for (int r = 0; r < N_OF(reductions); r++)
        for (int a = 0; a < 2; a++) {
            vq_tensor *in[3] = {oc_from(VQ_F64, 2, xs, np_x),
                                oc_from(VQ_I64, 2, a ? s1 : s0, a ? np_i1 : np_i0),
                                oc_from(VQ_F64, 2, a ? s1 : s0, a ? np_u1 : np_u0)};
            vq_attr at[2] = {VQ_ATTR_I("axis", a ? -1 : 0), VQ_ATTR_S("reduction", reductions[r])};
            vq_tensor *out = oc_run1("scatter_elements", in, 3, at, 2);
            oc_assert_close(out, 2, xs, np_elements[r][a], 0, 0);
            vq_tensor_release(out);
            for (int i = 0; i < 3; i++)
                vq_tensor_release(in[i]);
        }
}

Test(ops_scatter, duplicate_indices_with_reduction_none_leave_the_last_update)
{
    /* all five updates land on element 1 (as 1 and -3): the last is 50 */
    const double xv[3] = {1, 2, 3}, iv[5] = {1, -2, 1, 1, -2}, uv[5] = {10, 20, 30, 40, 50};
    const double want[3] = {1, 50, 3};
    vq_tensor *in[3] = {oc_from(VQ_F32, 1, (int64_t[]){3}, xv),
                        oc_from(VQ_I32, 1, (int64_t[]){5}, iv),
                        oc_from(VQ_F32, 1, (int64_t[]){5}, uv)};
    vq_tensor *out = oc_run1("scatter_elements", in, 3, NULL, 0);
    oc_assert_close(out, 1, (int64_t[]){3}, want, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
    /* scatter_nd alike: the tuples (1) and (-2) are one row */
    const double ndi[2] = {-2, 1}, ndu[4] = {5, 6, 7, 8}, ndw[6] = {0, 0, 7, 8, 0, 0};
    vq_tensor *nd[3] = {oc_from(VQ_F64, 2, (int64_t[]){3, 2}, (double[6]){0}),
                        oc_from(VQ_I64, 2, (int64_t[]){2, 1}, ndi),
                        oc_from(VQ_F64, 2, (int64_t[]){2, 2}, ndu)};
    out = oc_run1("scatter_nd", nd, 3, NULL, 0);
    oc_assert_close(out, 2, (int64_t[]){3, 2}, ndw, 0, 0);
    vq_tensor_release(out);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(nd[i]);
    vq_tensor_release(in[2]);
}

Test(ops_scatter, max_and_min_follow_reduce_max_s_nan_and_signed_zero_rules)
{
    /* element 0: NaN arrives and stays; 1: X's NaN stays; 2: +0 over -0
     * (max) and -0 over +0 (min); 3: ordinary */
    const double xv[4] = {1, NAN, -0.0, 2}, iv[5] = {0, 0, 1, 2, 3};
    const double uv[5] = {NAN, 5, 7, 0.0, 3};
    for (int mx = 0; mx < 2; mx++) {
        vq_tensor *in[3] = {oc_from(VQ_F64, 1, (int64_t[]){4}, xv),
                            oc_from(VQ_I64, 1, (int64_t[]){5}, iv),
                            oc_from(VQ_F64, 1, (int64_t[]){5}, uv)};
        vq_attr at = VQ_ATTR_S("reduction", mx ? "max" : "min");
        vq_tensor *out = oc_run1("scatter_elements", in, 3, &at, 1);
        const double *o = vq_tensor_data(out);
        cr_assert(isnan(o[0]) && isnan(o[1]));
        cr_assert(o[2] == 0 && signbit(o[2]) == (mx ? 0 : signbit(-0.0)), "%g", o[2]);
        cr_assert_eq(o[3], mx ? 3 : 2);
        vq_tensor_release(out);
        for (int i = 0; i < 3; i++)
            vq_tensor_release(in[i]);
    }
}

Test(ops_scatter, integer_add_and_mul_wrap)
{
    int32_t xv[2] = {INT32_MAX, 65536};
    int32_t uv[2] = {1, 65536};
    int64_t iv[2] = {0, 1};
    vq_tensor *in[3];
    cr_assert_eq(vq_tensor_from(&in[0], VQ_I32, 1, (int64_t[]){2}, xv), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_I64, 1, (int64_t[]){2}, iv), 0);
    cr_assert_eq(vq_tensor_from(&in[2], VQ_I32, 1, (int64_t[]){2}, uv), 0);
    vq_attr at = VQ_ATTR_S("reduction", "add");
    vq_tensor *out = oc_run1("scatter_elements", in, 3, &at, 1);
    cr_assert_eq(((const int32_t *)vq_tensor_data(out))[0], INT32_MIN);
    vq_tensor_release(out);
    at = VQ_ATTR_S("reduction", "mul");
    out = oc_run1("scatter_elements", in, 3, &at, 1);
    cr_assert_eq(((const int32_t *)vq_tensor_data(out))[1], 0); /* 2^32 wraps to 0 */
    vq_tensor_release(out);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
}

/* ---- scatter_nd and gather_nd ---- */

/* X's shape, Indices' shape, batch_dims. */
static const struct nd_case {
    int nx, ni;
    int64_t x[3], idx[3];
    int batch;
} nd_cases[] = {
    {2, 2, {4, 3}, {5, 1}, 0},       {3, 2, {2, 3, 4}, {3, 2}, 0}, {3, 3, {2, 3, 4}, {2, 2, 1}, 1},
    {2, 2, {3, 4}, {6, 2}, 0},       {2, 2, {3, 4}, {0, 1}, 0},    {3, 3, {2, 3, 4}, {2, 3, 2}, 1},
    {3, 3, {2, 3, 2}, {2, 2, 3}, 0}, {1, 1, {5}, {1}, 0},          {2, 3, {3, 2}, {2, 2, 1}, 0},
};

/* Updates' (gather_nd: Out's) shape into shape: Indices' dims but the
 * last, then X's past the tuples'. */
static int nd_result_shape(const struct nd_case *c, int64_t *shape)
{
    int n = 0;
    int64_t k = c->idx[c->ni - 1];
    for (int d = 0; d < c->ni - 1; d++)
        shape[n++] = c->idx[d];
    for (int d = c->batch + (int)k; d < c->nx; d++)
        shape[n++] = c->x[d];
    return n;
}

/* X's offset of tuple t's slice, each tuple written out in full. */
static int64_t nd_offset(const struct nd_case *c, vq_tensor *idx, int64_t t, int64_t *slice)
{
    int k = (int)c->idx[c->ni - 1];
    int64_t per_batch = 1, co[3] = {0, 0, 0}, off = 0;
    for (int d = c->batch; d < c->ni - 1; d++)
        per_batch *= c->idx[d];
    int64_t b = t / per_batch, rest = b;
    for (int d = c->batch - 1; d >= 0; d--) {
        co[d] = rest % c->x[d];
        rest /= c->x[d];
    }
    for (int j = 0; j < k; j++) {
        int64_t v = (int64_t)oc_get(idx, t * k + j), dim = c->x[c->batch + j];
        co[c->batch + j] = v < 0 ? v + dim : v;
    }
    *slice = 1;
    for (int d = c->batch + k; d < c->nx; d++)
        *slice *= c->x[d];
    for (int d = 0; d < c->nx; d++)
        off = off * c->x[d] + co[d];
    return off;
}

static int64_t nd_tuples(const struct nd_case *c)
{
    return numel_of(c->ni - 1, c->idx);
}

/* Random tuples: entry j from [-dim, dim) of the dim it indexes. */
static vq_tensor *nd_indices(const struct nd_case *c, vq_dtype it)
{
    vq_tensor *t = oc_rand(&rng, it, c->ni, c->idx, 0, 1);
    int k = (int)c->idx[c->ni - 1];
    for (int64_t e = 0; e < vq_tensor_numel(t); e++) {
        double dim = (double)c->x[c->batch + e % k];
        oc_set(t, e, floor(oc_uniform(&rng, -dim, dim)));
    }
    return t;
}

Test(ops_scatter, scatter_nd_matches_the_plain_loop_for_every_reduction_and_dtype)
{
    for (int c = 0; c < N_OF(nd_cases); c++)
        for (int r = 0; r < N_OF(reductions); r++)
            for (int d = 0; d < N_OF(all_dtypes); d++)
                for (int t = 0; t < 2; t++) {
                    const struct nd_case *k = &nd_cases[c];
                    vq_dtype dt = all_dtypes[d];
                    if (dt == VQ_BOOL && r > 0)
                        continue;
                    int64_t us[VQ_MAX_DIMS], nxe = numel_of(k->nx, k->x), slice;
                    int nu = nd_result_shape(k, us);
                    vq_tensor *in[3] = {values(dt, k->nx, k->x, -4, 4),
                                        nd_indices(k, t ? VQ_I64 : VQ_I32),
                                        values(dt, nu, us, -3, 3)};
                    double *w = buffer(nxe);
                    for (int64_t i = 0; i < nxe; i++)
                        w[i] = oc_get(in[0], i);
                    for (int64_t tu = 0; tu < nd_tuples(k); tu++) {
                        int64_t off = nd_offset(k, in[1], tu, &slice);
                        for (int64_t s = 0; s < slice; s++)
                            w[off + s] = combine(r, w[off + s], oc_get(in[2], tu * slice + s));
                    }
                    vq_attr at[2] = {VQ_ATTR_I("batch_dims", k->batch),
                                     VQ_ATTR_S("reduction", reductions[r])};
                    vq_tensor *out = oc_run1("scatter_nd", in, 3, at, 2);
                    cr_assert_eq(vq_tensor_dtype(out), dt);
                    oc_assert_close(out, k->nx, k->x, w, 0, 0);
                    free(w);
                    vq_tensor_release(out);
                    for (int i = 0; i < 3; i++)
                        vq_tensor_release(in[i]);
                }
}

Test(ops_scatter, gather_nd_matches_the_plain_loop_in_every_dtype)
{
    for (int c = 0; c < N_OF(nd_cases); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++)
            for (int t = 0; t < 2; t++) {
                const struct nd_case *k = &nd_cases[c];
                int64_t os[VQ_MAX_DIMS], slice;
                int no = nd_result_shape(k, os);
                vq_tensor *in[2] = {values(all_dtypes[d], k->nx, k->x, -4, 4),
                                    nd_indices(k, t ? VQ_I64 : VQ_I32)};
                double *w = buffer(numel_of(no, os));
                for (int64_t tu = 0; tu < nd_tuples(k); tu++) {
                    int64_t off = nd_offset(k, in[1], tu, &slice);
                    for (int64_t s = 0; s < slice; s++)
                        w[tu * slice + s] = oc_get(in[0], off + s);
                }
                vq_attr at = VQ_ATTR_I("batch_dims", k->batch);
                vq_tensor *out = oc_run1("gather_nd", in, 2, &at, 1);
                cr_assert_eq(vq_tensor_dtype(out), all_dtypes[d]);
                oc_assert_close(out, no, os, w, 0, 0);
                free(w);
                vq_tensor_release(out);
                vq_tensor_release(in[0]);
                vq_tensor_release(in[1]);
            }
}

/* From numpy (each tuple's slice combined in order: out[tuple(t)] =
 * f(out[tuple(t)], u), np.add etc.):
 *   XN = np.arange(12.).reshape(4, 3) - 5, IN = [[1], [-1], [1]],
 *   UN = [[1, 2, 3], [-4, .5, 6], [2, -2, .25]]
 *   X3 = np.arange(24.).reshape(2, 3, 4) * .25, IN3 = [[1, -1], [0, 2]],
 *   UN3 = [[9, 8, 7, 6], [-1, -2, -3, -4]] */
static const double np_xn[12] = {-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6};
static const double np_in[3] = {1, -1, 1};
static const double np_un[9] = {1, 2, 3, -4, 0.5, 6, 2, -2, 0.25};
static const double np_in3[4] = {1, -1, 0, 2};
static const double np_un3[8] = {9, 8, 7, 6, -1, -2, -3, -4};
static const double np_nd_k1[5][12] = {
    {-5, -4, -3, 2, -2, 0.25, 1, 2, 3, -4, 0.5, 6}, {-5, -4, -3, 1, -1, 3.25, 1, 2, 3, 0, 5.5, 12},
    {-5, -4, -3, -4, 4, 0, 1, 2, 3, -16, 2.5, 36},  {-5, -4, -3, 2, 2, 3, 1, 2, 3, 4, 5, 6},
    {-5, -4, -3, -2, -2, 0, 1, 2, 3, -4, 0.5, 6},
};
/* X3's elements but at 8..11 and 20..23, which follow per reduction */
static const double np_nd_k2[5][8] = {
    {-1, -2, -3, -4, 9, 8, 7, 6},
    {1, 0.25, -0.5, -1.25, 14, 13.25, 12.5, 11.75},
    {-2, -4.5, -7.5, -11, 45, 42, 38.5, 34.5},
    {2, 2.25, 2.5, 2.75, 9, 8, 7, 6},
    {-1, -2, -3, -4, 5, 5.25, 5.5, 5.75},
};
/* gather_nd of X3: by IN3 (k = 2), and with batch_dims 1 by IB = [[[2],
 * [-3]], [[0], [1]]] */
static const double np_gather_k2[8] = {5, 5.25, 5.5, 5.75, 2, 2.25, 2.5, 2.75};
static const double np_ib[4] = {2, -3, 0, 1};
static const double np_gather_b1[16] = {2, 2.25, 2.5, 2.75, 0, 0.25, 0.5, 0.75,
                                        3, 3.25, 3.5, 3.75, 4, 4.25, 4.5, 4.75};

Test(ops_scatter, scatter_nd_and_gather_nd_match_numpy)
{
    const int64_t xs[2] = {4, 3}, is[2] = {3, 1}, us[2] = {3, 3};
    const int64_t x3s[3] = {2, 3, 4}, i3s[2] = {2, 2}, u3s[2] = {2, 4};
    double x3[24];
    for (int i = 0; i < 24; i++)
        x3[i] = i * 0.25;
    for (int r = 0; r < N_OF(reductions); r++) {
        vq_attr at = VQ_ATTR_S("reduction", reductions[r]);
        vq_tensor *in[3] = {oc_from(VQ_F64, 2, xs, np_xn), oc_from(VQ_I32, 2, is, np_in),
                            oc_from(VQ_F64, 2, us, np_un)};
        vq_tensor *out = oc_run1("scatter_nd", in, 3, &at, 1);
        oc_assert_close(out, 2, xs, np_nd_k1[r], 0, 0);
        vq_tensor_release(out);
        for (int i = 0; i < 3; i++)
            vq_tensor_release(in[i]);
        vq_tensor *in3[3] = {oc_from(VQ_F64, 3, x3s, x3), oc_from(VQ_I64, 2, i3s, np_in3),
                             oc_from(VQ_F64, 2, u3s, np_un3)};
        out = oc_run1("scatter_nd", in3, 3, &at, 1);
        double w[24];
        memcpy(w, x3, sizeof w);
        memcpy(w + 8, np_nd_k2[r], 4 * sizeof(double));
        memcpy(w + 20, np_nd_k2[r] + 4, 4 * sizeof(double));
        oc_assert_close(out, 3, x3s, w, 0, 0);
        vq_tensor_release(out);
        for (int i = 0; i < 3; i++)
            vq_tensor_release(in3[i]);
    }
    vq_tensor *g[2] = {oc_from(VQ_F64, 3, x3s, x3), oc_from(VQ_I64, 2, i3s, np_in3)};
    vq_tensor *out = oc_run1("gather_nd", g, 2, NULL, 0);
    oc_assert_close(out, 2, u3s, np_gather_k2, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(g[1]);
    g[1] = oc_from(VQ_I32, 3, (int64_t[]){2, 2, 1}, np_ib);
    vq_attr b1 = VQ_ATTR_I("batch_dims", 1);
    out = oc_run1("gather_nd", g, 2, &b1, 1);
    oc_assert_close(out, 3, (int64_t[]){2, 2, 4}, np_gather_b1, 0, 0);
    vq_tensor_release(out);
    vq_tensor_release(g[0]);
    vq_tensor_release(g[1]);
}

/* ---- errors ---- */

static void expect_message(int rc, const char *want)
{
    cr_assert_eq(rc, VQ_EINVAL, "rc %d (%s), wanted VQ_EINVAL with \"%s\"", rc, vq_errmsg(), want);
    cr_assert(strstr(vq_errmsg(), want), "message\n  %s\nlacks\n  %s", vq_errmsg(), want);
}

Test(ops_scatter, an_index_out_of_range_fails_naming_the_op_the_index_and_its_element)
{
    /* Indices element 2 (3 in a dim of 3) is the first bad one; 5 is -4 */
    const double iv[6] = {0, 1, 3, 2, 0, -4};
    vq_tensor *x = oc_from(VQ_F32, 2, (int64_t[]){3, 2}, (double[6]){0});
    vq_tensor *idx = oc_from(VQ_I64, 2, (int64_t[]){3, 2}, iv);
    vq_tensor *upd = oc_from(VQ_F32, 2, (int64_t[]){3, 2}, (double[6]){0});
    vq_tensor *in[3] = {x, idx, upd};
    expect_message(oc_try("scatter_elements", in, 3, 1, NULL, 0),
                   "scatter_elements: index 3 at Indices element 2 is outside [-3, 3) (X's dim 0)");
    /* as tuples of 2 entries into X [3, 2]: element 2 is (3 in dim 0) */
    vq_tensor *upd1 = oc_from(VQ_F32, 1, (int64_t[]){3}, (double[3]){0});
    in[2] = upd1;
    expect_message(oc_try("scatter_nd", in, 3, 1, NULL, 0),
                   "scatter_nd: index 3 at Indices element 2 is outside [-3, 3) (X's dim 0)");
    expect_message(oc_try("gather_nd", in, 2, 1, NULL, 0),
                   "gather_nd: index 3 at Indices element 2 is outside [-3, 3) (X's dim 0)");
    /* an entry for dim 1: element 5 (-4 in a dim of 2), after fixing 2 */
    vq_tensor_release(idx);
    const double iv2[6] = {0, 1, 2, -2, 0, -4};
    in[1] = idx = oc_from(VQ_I32, 2, (int64_t[]){3, 2}, iv2);
    expect_message(oc_try("gather_nd", in, 2, 1, NULL, 0),
                   "gather_nd: index -4 at Indices element 5 is outside [-2, 2) (X's dim 1)");
    vq_tensor_release(x);
    vq_tensor_release(idx);
    vq_tensor_release(upd);
    vq_tensor_release(upd1);
}

Test(ops_scatter, bad_inputs_name_the_slot_or_attribute)
{
    vq_tensor *x = oc_from(VQ_F32, 2, (int64_t[]){3, 4}, (double[12]){0});
    vq_tensor *i1 = oc_from(VQ_I64, 1, (int64_t[]){4}, (double[4]){0});
    vq_tensor *i2 = oc_from(VQ_I64, 2, (int64_t[]){2, 4}, (double[8]){0});
    vq_tensor *i5 = oc_from(VQ_I64, 2, (int64_t[]){2, 5}, (double[10]){0});
    vq_tensor *u2 = oc_from(VQ_F32, 2, (int64_t[]){2, 4}, (double[8]){0});
    vq_tensor *u3 = oc_from(VQ_F32, 2, (int64_t[]){2, 3}, (double[6]){0});
    vq_tensor *ud = oc_from(VQ_F64, 2, (int64_t[]){2, 4}, (double[8]){0});
    vq_tensor *fi = oc_from(VQ_F32, 2, (int64_t[]){2, 4}, (double[8]){0});
    vq_tensor *b = oc_from(VQ_BOOL, 2, (int64_t[]){3, 4}, (double[12]){0});
    vq_tensor *ub = oc_from(VQ_BOOL, 2, (int64_t[]){2, 4}, (double[8]){0});
    vq_tensor *u5 = oc_from(VQ_F32, 2, (int64_t[]){2, 5}, (double[10]){0});
    /* scatter_elements: rank mismatch, shapes, dtypes, reduction, axis */
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, i1, u2}, 3, 1, NULL, 0),
                   "scatter_elements: input Indices (slot 1): has rank 1; X has 2");
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, i2, u3}, 3, 1, NULL, 0),
                   "scatter_elements: input Updates (slot 2)");
    vq_attr a1 = VQ_ATTR_I("axis", 0);
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, i5, u5}, 3, 1, &a1, 1),
                   "input Indices (slot 1): has 5 in dim 1, more than X's 4");
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, i2, ud}, 3, 1, NULL, 0),
                   "scatter_elements: input Updates (slot 2)");
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, fi, u2}, 3, 1, NULL, 0),
                   "scatter_elements: input Indices (slot 1)");
    vq_attr bad = VQ_ATTR_S("reduction", "sum");
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, i2, u2}, 3, 1, &bad, 1),
                   "scatter_elements: attribute reduction: \"sum\" is not none, add, mul, max or "
                   "min");
    vq_attr add = VQ_ATTR_S("reduction", "add");
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){b, i2, ub}, 3, 1, &add, 1),
                   "scatter_elements: input X (slot 0)");
    cr_assert_eq(oc_try("scatter_elements", (vq_tensor *[]){b, i2, ub}, 3, 1, NULL, 0), 0, "%s",
                 vq_errmsg());
    vq_attr a2 = VQ_ATTR_I("axis", 2);
    expect_message(oc_try("scatter_elements", (vq_tensor *[]){x, i2, u2}, 3, 1, &a2, 1),
                   "scatter_elements: attribute axis");
    /* scatter_nd and gather_nd: tuples too long, batch_dims, Updates' shape */
    vq_tensor *t3 = oc_from(VQ_I64, 2, (int64_t[]){2, 3}, (double[6]){0});
    expect_message(oc_try("gather_nd", (vq_tensor *[]){x, t3}, 2, 1, NULL, 0),
                   "gather_nd: input Indices (slot 1): has index tuples of 3 entries; X of rank 2 "
                   "has 2 dims");
    vq_attr bd = VQ_ATTR_I("batch_dims", 2);
    expect_message(oc_try("gather_nd", (vq_tensor *[]){x, i2}, 2, 1, &bd, 1),
                   "gather_nd: attribute batch_dims: is 2");
    vq_attr b1 = VQ_ATTR_I("batch_dims", 1);
    expect_message(oc_try("gather_nd", (vq_tensor *[]){x, i2}, 2, 1, &b1, 1),
                   "gather_nd: input Indices (slot 1): has 2 in batch dim 0; X has 3");
    vq_tensor *s0 = oc_from(VQ_I64, 0, NULL, (double[1]){0});
    expect_message(oc_try("gather_nd", (vq_tensor *[]){x, s0}, 2, 1, NULL, 0),
                   "gather_nd: input Indices (slot 1): is a scalar");
    /* Indices [2, 1] into X [3, 4]: Updates must be [2, 4] */
    vq_tensor *t1 = oc_from(VQ_I64, 2, (int64_t[]){2, 1}, (double[2]){0});
    expect_message(oc_try("scatter_nd", (vq_tensor *[]){x, t1, u3}, 3, 1, NULL, 0),
                   "scatter_nd: input Updates (slot 2): shape [2,3] is not Indices' dims but "
                   "the last, then X's past the index tuples' [2,4]");
    cr_assert_eq(oc_try("scatter_nd", (vq_tensor *[]){x, t1, u2}, 3, 1, NULL, 0), 0, "%s",
                 vq_errmsg());
    vq_tensor *all[] = {x, i1, i2, i5, u2, u3, ud, fi, b, ub, u5, t3, s0, t1};
    for (int i = 0; i < N_OF(all); i++)
        vq_tensor_release(all[i]);
}

/* ---- gradients ---- */

/* Indices along the axis without repeats in any lane (idx len <= dim:
 * position k of lane (o, i) takes (k + o) % dim, its sign flipped at
 * random): the gradient of reduction none is then that of a function. */
static vq_tensor *distinct_indices(const struct elements_case *c)
{
    int axis = (int)(c->axis < 0 ? c->axis + c->n : c->axis);
    vq_tensor *t = oc_rand(&rng, VQ_I64, c->n, c->idx, 0, 1);
    int64_t n = vq_tensor_numel(t), len = c->idx[axis], dim = c->x[axis], inner = 1;
    for (int d = axis + 1; d < c->n; d++)
        inner *= c->idx[d];
    for (int64_t e = 0; e < n; e++) {
        int64_t k = e / inner % len, v = (k + e / inner / len) % dim;
        oc_set(t, e, oc_uniform(&rng, 0, 1) < 0.5 ? (double)v : (double)(v - dim));
    }
    return t;
}

Test(ops_scatter, gradients_match_finite_differences)
{
    /* scatter_elements: none with distinct indices per lane, add with
     * repeats */
    static const struct elements_case gc[] = {{2, {5, 3}, {3, 3}, 0},
                                              {3, {2, 3, 4}, {2, 2, 4}, 1},
                                              {2, {3, 5}, {2, 4}, -1}};
    for (int c = 0; c < N_OF(gc); c++)
        for (int r = 0; r < 2; r++) {
            int axis = (int)(gc[c].axis < 0 ? gc[c].axis + gc[c].n : gc[c].axis);
            double dim = (double)gc[c].x[axis];
            vq_tensor *in[3] = {oc_rand(&rng, VQ_F64, gc[c].n, gc[c].x, -2, 2),
                                r ? oc_rand(&rng, VQ_I64, gc[c].n, gc[c].idx, -dim, dim)
                                  : distinct_indices(&gc[c]),
                                oc_rand(&rng, VQ_F64, gc[c].n, gc[c].idx, -2, 2)};
            vq_attr at[2] = {VQ_ATTR_I("axis", gc[c].axis), VQ_ATTR_S("reduction", reductions[r])};
            /* X and Updates together, and each alone */
            for (unsigned wrt = 5; wrt > 0; wrt = wrt == 5 ? 4 : wrt == 4 ? 1 : 0)
                oc_grad_check("scatter_elements", in, 3, 1, at, 2, wrt, &rng);
            for (int i = 0; i < 3; i++)
                vq_tensor_release(in[i]);
        }
    /* scatter_nd: none with distinct tuples, add with repeats; gather_nd */
    for (int c = 0; c < N_OF(nd_cases); c++) {
        const struct nd_case *k = &nd_cases[c];
        int64_t us[VQ_MAX_DIMS];
        int nu = nd_result_shape(k, us);
        for (int r = 0; r < 2; r++) {
            vq_tensor *idx = nd_indices(k, VQ_I64);
            if (r == 0) { /* none: keep the first of each repeated tuple's slice apart */
                bool repeat = false;
                int64_t sa, sb;
                for (int64_t a = 0; a < nd_tuples(k); a++)
                    for (int64_t b2 = a + 1; b2 < nd_tuples(k); b2++)
                        repeat |= nd_offset(k, idx, a, &sa) == nd_offset(k, idx, b2, &sb);
                if (repeat) {
                    vq_tensor_release(idx);
                    continue;
                }
            }
            vq_tensor *in[3] = {oc_rand(&rng, VQ_F64, k->nx, k->x, -2, 2), idx,
                                oc_rand(&rng, VQ_F64, nu, us, -2, 2)};
            vq_attr at[2] = {VQ_ATTR_I("batch_dims", k->batch),
                             VQ_ATTR_S("reduction", reductions[r])};
            for (unsigned wrt = 5; wrt > 0; wrt = wrt == 5 ? 4 : wrt == 4 ? 1 : 0)
                oc_grad_check("scatter_nd", in, 3, 1, at, 2, wrt, &rng);
            vq_attr b = VQ_ATTR_I("batch_dims", k->batch);
            oc_grad_check("gather_nd", in, 2, 1, &b, 1, 1u, &rng);
            for (int i = 0; i < 3; i++)
                vq_tensor_release(in[i]);
        }
    }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

/* A program y = mean(scatter_elements(x, idx, u; reduction)) with x [3]
 * and u [2] parameters, idx fed: its backward appended (rc), and when it
 * succeeds x@GRAD and u@GRAD fetched into gx and gu. */
static int scatter_program(const char *reduction, const double *iv, double *gx, double *gu)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    const int64_t xs[1] = {3}, us[1] = {2};
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F64, 1, xs, true), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "u", VQ_F64, 1, us, true), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "idx", VQ_I64, 1, us, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "s", VQ_F64, 1, xs, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "y", VQ_F64, 0, NULL, false), 0);
    const char *in[3] = {"x", "idx", "u"}, *s = "s", *y = "y";
    vq_attr at = VQ_ATTR_S("reduction", reduction);
    cr_assert_geq(vq_program_add_op(p, 0, "scatter_elements", in, 3, &s, 1, &at, 1), 0, "%s",
                  vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "mean", &s, 1, &y, 1, NULL, 0), 0, "%s", vq_errmsg());
    int rc = vq_append_backward(p, "y", NULL, 0);
    if (rc < 0) {
        vq_program_free(p);
        return rc;
    }
    vq_engine *e;
    vq_exec *ex;
    vq_scope *sc;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&sc), 0);
    vq_tensor *xv = oc_from(VQ_F64, 1, xs, (double[3]){1, 2, 3});
    vq_tensor *uv = oc_from(VQ_F64, 1, us, (double[2]){4, 5});
    vq_tensor *iv_t = oc_from(VQ_I64, 1, us, iv);
    cr_assert_eq(vq_scope_set(sc, "x", xv), 0);
    cr_assert_eq(vq_scope_set(sc, "u", uv), 0);
    vq_feed feed = {"idx", iv_t};
    vq_fetch fe[2] = {{"x@GRAD", NULL}, {"u@GRAD", NULL}};
    cr_assert_eq(vq_exec_run(ex, p, sc, &feed, 1, fe, 2), 0, "%s", vq_errmsg());
    for (int i = 0; i < 3; i++)
        gx[i] = oc_get(fe[0].tensor, i);
    for (int i = 0; i < 2; i++)
        gu[i] = oc_get(fe[1].tensor, i);
    vq_tensor *rel[5] = {fe[0].tensor, fe[1].tensor, xv, uv, iv_t};
    for (int i = 0; i < 5; i++)
        vq_tensor_release(rel[i]);
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_engine_free(e);
    vq_program_free(p);
    return rc;
}

Test(ops_scatter, duplicates_get_torch_s_gradient_and_mul_max_min_have_none)
{
    /* both updates land on x[1] (1 and -2): as torch's scatter, each gets
     * dOut there (1/3), x[1] gets none; with add x[1] keeps its own */
    double gx[3], gu[2];
    const double iv[2] = {1, -2};
    cr_assert_geq(scatter_program("none", iv, gx, gu), 0, "%s", vq_errmsg());
    cr_assert(gx[0] == 1.0 / 3 && gx[1] == 0 && gx[2] == 1.0 / 3, "%g %g %g", gx[0], gx[1], gx[2]);
    cr_assert(gu[0] == 1.0 / 3 && gu[1] == 1.0 / 3, "%g %g", gu[0], gu[1]);
    cr_assert_geq(scatter_program("add", iv, gx, gu), 0, "%s", vq_errmsg());
    cr_assert(gx[0] == 1.0 / 3 && gx[1] == 1.0 / 3 && gx[2] == 1.0 / 3);
    cr_assert(gu[0] == 1.0 / 3 && gu[1] == 1.0 / 3);
    static const char *const none[] = {"mul", "max", "min"};
    for (int i = 0; i < 3; i++) {
        cr_assert_lt(scatter_program(none[i], iv, gx, gu), 0, "%s has a gradient", none[i]);
        char want[100];
        snprintf(want, sizeof want, "scatter_elements: reduction %s has no gradient", none[i]);
        cr_assert(strstr(vq_errmsg(), want), "%s", vq_errmsg());
    }
}
