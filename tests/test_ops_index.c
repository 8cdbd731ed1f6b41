/* gather, gather_elements, split, argmax / argmin, reduce_max / reduce_min, expand, tile and
 * pad (ops/cpu/index.c, extremum.c, layout.c) and their gradient ops: each
 * kernel against a plain loop over its definition on several shapes (size-0
 * and size-1 dims, scalars, negative axes and indices, every pad mode,
 * crops) in every dtype it takes; every gradient against finite
 * differences in f64 (oc_grad_check), ties and NaN of the extrema spelled
 * out; errors naming the op, slot or attribute and the values; unknown dims
 * at preparation; split's variadic outputs in a program that is encoded,
 * decoded, run and differentiated with and without a gradient into every
 * output. */
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
    rng = oc_seed("ops_index");
}

TestSuite(ops_index, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const vq_dtype all_dtypes[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
static const vq_dtype numerics[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
static const vq_dtype index_dtypes[] = {VQ_I32, VQ_I64};

static bool is_int(vq_dtype dt)
{
    return dt == VQ_I32 || dt == VQ_I64;
}

/* Random values of dt: integers in [-50, 50), floats in [-3, 3), bools. */
static vq_tensor *values(vq_dtype dt, int ndim, const int64_t *shape)
{
    return oc_rand(&rng, dt, ndim, shape, is_int(dt) ? -50 : -3, is_int(dt) ? 50 : 3);
}

static int64_t count(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* Row-major coordinates of element i of shape, and back. */
static void unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

static int64_t ravel(int ndim, const int64_t *shape, const int64_t *idx)
{
    int64_t i = 0;
    for (int d = 0; d < ndim; d++)
        i = i * shape[d] + idx[d];
    return i;
}

static double *want_buffer(int64_t n)
{
    double *w = calloc((size_t)(n ? n : 1), sizeof *w);
    cr_assert(w);
    return w;
}

/* got has dtype dt, the shape and exactly the values want. */
static void assert_values(vq_tensor *got, vq_dtype dt, int ndim, const int64_t *shape,
                          const double *want)
{
    cr_assert_eq(vq_tensor_dtype(got), dt, "dtype %s, expected %s",
                 vq_dtype_name(vq_tensor_dtype(got)), vq_dtype_name(dt));
    oc_assert_close(got, ndim, shape, want, 0, 0);
}

static void release_all(vq_tensor **t, int n)
{
    for (int i = 0; i < n; i++)
        vq_tensor_release(t[i]);
}

static vq_tensor *zeros(vq_dtype dt, int ndim, const int64_t *shape)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0, "%s", vq_errmsg());
    return t;
}

static void expect_error(const char *type, vq_tensor **in, int nin, int nout, const vq_attr *at,
                         int nat, const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, nout, at, nat), VQ_EINVAL, "%s: expected \"%s\"", type,
                 msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

/* ---- gather ---- */

static const struct gather_case {
    int nx, ni;
    int64_t x[4], ishape[3], axis;
} gather_cases[] = {
    {1, 1, {5}, {3}, 0},
    {2, 2, {4, 3}, {2, 2}, 0},
    {2, 1, {4, 3}, {5}, 1},
    {2, 1, {4, 3}, {5}, -1},
    {3, 0, {2, 3, 4}, {0}, 1},     /* scalar index: the axis goes */
    {3, 1, {2, 3, 4}, {0}, 2},     /* no indices */
    {2, 1, {0, 3}, {2}, 1},        /* empty outer */
    {3, 2, {3, 1, 2}, {4, 1}, 1},  /* every index picks the one row */
    {1, 1, {1}, {6}, 0},
    {3, 1, {2, 0, 3}, {0}, 1},     /* an empty axis takes no index */
    {3, 3, {2, 3, 2}, {2, 1, 2}, -3},
};

/* Indices of dtype it for case g: uniform over [-dim, dim), both signs. */
static vq_tensor *gather_indices(const struct gather_case *g, vq_dtype it)
{
    int axis = (int)(g->axis < 0 ? g->axis + g->nx : g->axis);
    int64_t dim = g->x[axis];
    vq_tensor *t = zeros(it, g->ni, g->ishape);
    for (int64_t j = 0; j < vq_tensor_numel(t); j++)
        oc_set(t, j, floor(oc_uniform(&rng, (double)-dim, (double)dim)));
    return t;
}

/* Out = X.shape[:axis] + Indices.shape + X.shape[axis+1:]; returns its rank. */
static int gather_shape(const struct gather_case *g, int64_t *os)
{
    int axis = (int)(g->axis < 0 ? g->axis + g->nx : g->axis), n = 0;
    for (int d = 0; d < axis; d++)
        os[n++] = g->x[d];
    for (int d = 0; d < g->ni; d++)
        os[n++] = g->ishape[d];
    for (int d = axis + 1; d < g->nx; d++)
        os[n++] = g->x[d];
    return n;
}

/* Out's element at coordinates (before, index coords, after) is X's at
 * (before, Indices[index coords], after). */
static double *ref_gather(const struct gather_case *g, vq_tensor *x, vq_tensor *idx)
{
    int axis = (int)(g->axis < 0 ? g->axis + g->nx : g->axis);
    int64_t os[8];
    int no = gather_shape(g, os);
    int64_t n = count(no, os);
    double *w = want_buffer(n);
    for (int64_t e = 0; e < n; e++) {
        int64_t oc[8], xc[4];
        unravel(e, no, os, oc);
        int64_t v = (int64_t)oc_get(idx, ravel(g->ni, g->ishape, oc + axis));
        for (int d = 0; d < g->nx; d++)
            xc[d] = d < axis ? oc[d] : d == axis ? (v < 0 ? v + g->x[axis] : v)
                                                 : oc[d - 1 + g->ni];
        w[e] = oc_get(x, ravel(g->nx, g->x, xc));
    }
    return w;
}

Test(ops_index, gather_matches_the_plain_loop_in_every_dtype)
{
    for (int c = 0; c < N_OF(gather_cases); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++)
            for (int t = 0; t < N_OF(index_dtypes); t++) {
                const struct gather_case *g = &gather_cases[c];
                vq_tensor *in[2] = {values(all_dtypes[d], g->nx, g->x),
                                    gather_indices(g, index_dtypes[t])};
                vq_attr at = VQ_ATTR_I("axis", g->axis);
                vq_tensor *out = oc_run1("gather", in, 2, &at, 1);
                int64_t os[8];
                int no = gather_shape(g, os);
                double *w = ref_gather(g, in[0], in[1]);
                assert_values(out, all_dtypes[d], no, os, w);
                free(w);
                vq_tensor_release(out);
                release_all(in, 2);
            }
}

Test(ops_index, gather_axis_defaults_to_0)
{
    double xv[6] = {1, 2, 3, 4, 5, 6}, iv[3] = {2, -3, 0};
    vq_tensor *in[2] = {oc_from(VQ_F64, 2, (int64_t[]){3, 2}, xv),
                        oc_from(VQ_I64, 1, (int64_t[]){3}, iv)};
    vq_tensor *out = oc_run1("gather", in, 2, NULL, 0);
    double want[6] = {5, 6, 1, 2, 1, 2};
    assert_values(out, VQ_F64, 2, (int64_t[]){3, 2}, want);
    vq_tensor_release(out);
    release_all(in, 2);
}

Test(ops_index, gather_gradients_match_finite_differences)
{
    for (int c = 0; c < N_OF(gather_cases); c++)
        for (int t = 0; t < N_OF(index_dtypes); t++) {
            const struct gather_case *g = &gather_cases[c];
            vq_tensor *in[2] = {values(VQ_F64, g->nx, g->x), gather_indices(g, index_dtypes[t])};
            vq_attr at = VQ_ATTR_I("axis", g->axis);
            oc_grad_check("gather", in, 2, 1, &at, 1, 1u, &rng);
            release_all(in, 2);
        }
}

Test(ops_index, gather_grad_adds_up_repeated_indices)
{
    double xv[3] = {0, 0, 0}, iv[5] = {0, 2, 0, 0, -1}, gv[5] = {1, 10, 100, 1000, 10000};
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        vq_tensor *in[3] = {oc_from(dt, 1, (int64_t[]){3}, xv),
                            oc_from(VQ_I32, 1, (int64_t[]){5}, iv),
                            oc_from(dt, 1, (int64_t[]){5}, gv)};
        vq_tensor *dx = oc_run1("gather_grad", in, 3, NULL, 0);
        double want[3] = {1101, 0, 10010};
        assert_values(dx, dt, 1, (int64_t[]){3}, want);
        vq_tensor_release(dx);
        release_all(in, 3);
    }
}

Test(ops_index, an_index_out_of_range_fails_naming_the_op_the_index_and_its_element)
{
    double iv[4] = {0, 3, -5, 9};
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){2, 4});
    vq_tensor *idx = oc_from(VQ_I64, 1, (int64_t[]){4}, iv);
    vq_tensor *in[3] = {x, idx, NULL};
    vq_attr at = VQ_ATTR_I("axis", 1);
    cr_assert_eq(oc_try("gather", in, 2, 1, &at, 1), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(),
                     "gather: index -5 at Indices element 2 is outside [-4, 4) (X's dim 1)");
    /* even when there is nothing to copy */
    vq_tensor *x0 = zeros(VQ_F32, 2, (int64_t[]){0, 4});
    in[0] = x0;
    expect_error("gather", in, 2, 1, &at, 1, "gather: index -5 at Indices element 2");
    vq_tensor *g = zeros(VQ_F32, 2, (int64_t[]){2, 4});
    in[0] = x;
    in[2] = g;
    expect_error("gather_grad", in, 3, 1, &at, 1,
                 "gather_grad: index -5 at Indices element 2 is outside [-4, 4) (X's dim 1)");
    release_all((vq_tensor *[]){x, idx, x0, g}, 4);
}

/* ---- gather_elements ---- */

static const struct elements_case {
    int n;
    int64_t x[4], ishape[4], axis;
} elements_cases[] = {
    {1, {5}, {7}, 0},
    {2, {3, 4}, {3, 4}, 1},
    {2, {3, 4}, {2, 6}, 1}, /* fewer rows than X, more than its dim along the axis */
    {2, {3, 4}, {5, 2}, 0},
    {3, {2, 3, 4}, {2, 2, 3}, -1},
    {3, {2, 3, 4}, {1, 5, 2}, 1},
    {4, {2, 1, 3, 2}, {2, 1, 2, 2}, -2},
    {2, {0, 3}, {0, 3}, 1}, /* empty */
    {2, {2, 3}, {2, 0}, 1}, /* no indices */
};

/* Indices of dtype it for case g: uniform over [-dim, dim). */
static vq_tensor *elements_indices(const struct elements_case *g, vq_dtype it)
{
    int axis = (int)(g->axis < 0 ? g->axis + g->n : g->axis);
    int64_t dim = g->x[axis];
    vq_tensor *t = zeros(it, g->n, g->ishape);
    for (int64_t j = 0; j < vq_tensor_numel(t); j++)
        oc_set(t, j, floor(oc_uniform(&rng, (double)-dim, (double)dim)));
    return t;
}

/* Out's element at coordinates c is X's at c with c[axis] = Indices[c]. */
static double *ref_elements(const struct elements_case *g, vq_tensor *x, vq_tensor *idx)
{
    int axis = (int)(g->axis < 0 ? g->axis + g->n : g->axis);
    int64_t n = count(g->n, g->ishape);
    double *w = want_buffer(n);
    for (int64_t e = 0; e < n; e++) {
        int64_t c[4];
        unravel(e, g->n, g->ishape, c);
        int64_t v = (int64_t)oc_get(idx, e);
        c[axis] = v < 0 ? v + g->x[axis] : v;
        w[e] = oc_get(x, ravel(g->n, g->x, c));
    }
    return w;
}

Test(ops_index, gather_elements_matches_the_plain_loop_in_every_dtype)
{
    for (int c = 0; c < N_OF(elements_cases); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++)
            for (int t = 0; t < N_OF(index_dtypes); t++) {
                const struct elements_case *g = &elements_cases[c];
                if (g->x[g->axis < 0 ? g->axis + g->n : g->axis] == 0)
                    continue;
                vq_tensor *in[2] = {values(all_dtypes[d], g->n, g->x),
                                    elements_indices(g, index_dtypes[t])};
                vq_attr at = VQ_ATTR_I("axis", g->axis);
                vq_tensor *out = oc_run1("gather_elements", in, 2, &at, 1);
                double *w = ref_elements(g, in[0], in[1]);
                assert_values(out, all_dtypes[d], g->n, g->ishape, w);
                free(w);
                vq_tensor_release(out);
                release_all(in, 2);
            }
}

Test(ops_index, gather_elements_gradients_match_finite_differences)
{
    for (int c = 0; c < N_OF(elements_cases); c++)
        for (int t = 0; t < N_OF(index_dtypes); t++) {
            const struct elements_case *g = &elements_cases[c];
            vq_tensor *in[2] = {values(VQ_F64, g->n, g->x), elements_indices(g, index_dtypes[t])};
            vq_attr at = VQ_ATTR_I("axis", g->axis);
            oc_grad_check("gather_elements", in, 2, 1, &at, 1, 1u, &rng);
            release_all(in, 2);
        }
}

Test(ops_index, gather_elements_grad_adds_up_repeated_indices)
{
    /* X [2, 3], axis 1: row 0 reads column 0 three times and -1 once */
    double xv[6] = {0}, iv[8] = {0, 0, -1, 0, 1, 2, 1, 1}, gv[8] = {1, 10, 100, 1000, 1, 2, 4, 8};
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        vq_tensor *in[3] = {oc_from(dt, 2, (int64_t[]){2, 3}, xv),
                            oc_from(VQ_I64, 2, (int64_t[]){2, 4}, iv),
                            oc_from(dt, 2, (int64_t[]){2, 4}, gv)};
        vq_attr at = VQ_ATTR_I("axis", 1);
        vq_tensor *dx = oc_run1("gather_elements_grad", in, 3, &at, 1);
        double want[6] = {1011, 0, 100, 0, 13, 2};
        assert_values(dx, dt, 2, (int64_t[]){2, 3}, want);
        vq_tensor_release(dx);
        release_all(in, 3);
    }
}

Test(ops_index, bad_gather_elements_calls_name_the_index_or_the_dim)
{
    double iv[4] = {0, 3, -5, 1};
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){2, 4});
    vq_tensor *idx = oc_from(VQ_I64, 2, (int64_t[]){1, 4}, iv);
    vq_tensor *in[3] = {x, idx, NULL};
    vq_attr at = VQ_ATTR_I("axis", 1);
    cr_assert_eq(oc_try("gather_elements", in, 2, 1, &at, 1), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "gather_elements: index -5 at Indices element 2 is outside "
                                  "[-4, 4) (X's dim 1)");
    vq_tensor *g = zeros(VQ_F32, 2, (int64_t[]){1, 4});
    in[2] = g;
    expect_error("gather_elements_grad", in, 3, 1, &at, 1,
                 "gather_elements_grad: index -5 at Indices element 2");
    vq_tensor *flat = zeros(VQ_I64, 1, (int64_t[]){4});
    in[1] = flat;
    expect_error("gather_elements", in, 2, 1, &at, 1, "has rank 1; X has 2");
    vq_tensor *wide = zeros(VQ_I64, 2, (int64_t[]){3, 4});
    in[1] = wide;
    expect_error("gather_elements", in, 2, 1, &at, 1, "has 3 in dim 0, more than X's 2");
    release_all((vq_tensor *[]){x, idx, g, flat, wide}, 5);
}

Test(ops_index, bad_gather_inputs_name_the_slot_or_attribute)
{
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){2, 4});
    vq_tensor *fi = zeros(VQ_F32, 1, (int64_t[]){3}), *ii = zeros(VQ_I32, 1, (int64_t[]){3});
    vq_tensor *in[3] = {x, fi, NULL};
    expect_error("gather", in, 2, 1, NULL, 0,
                 "gather: input Indices (slot 1): dtype f32 not supported (i32, i64)");
    in[1] = ii;
    vq_attr at = VQ_ATTR_I("axis", 2);
    expect_error("gather", in, 2, 1, &at, 1,
                 "gather: attribute axis: axis 2 is outside [-2, 2) for 2 dims");
    vq_tensor *s = zeros(VQ_F32, 0, NULL);
    in[0] = s;
    expect_error("gather", in, 2, 1, NULL, 0,
                 "gather: input X (slot 0): is a scalar (rank 0); gather needs at least one dim");
    vq_tensor *x5 = zeros(VQ_F32, 5, (int64_t[]){1, 1, 1, 1, 2});
    vq_tensor *i5 = zeros(VQ_I32, 5, (int64_t[]){1, 1, 1, 1, 1});
    in[0] = x5;
    in[1] = i5;
    expect_error("gather", in, 2, 1, NULL, 0,
                 "gather: input Indices (slot 1): has 5 dims: with X's 5, Out would have 9, "
                 "more than 8");
    vq_tensor *g = zeros(VQ_F32, 2, (int64_t[]){3, 3});
    in[0] = x;
    in[1] = ii;
    in[2] = g;
    expect_error("gather_grad", in, 3, 1, NULL, 0,
                 "gather_grad: input dOut (slot 2): shape [3,3] is not gather's output shape "
                 "[3,4]");
    vq_tensor *xi = zeros(VQ_I32, 2, (int64_t[]){2, 4});
    in[0] = xi;
    expect_error("gather_grad", in, 3, 1, NULL, 0,
                 "gather_grad: input X (slot 0): dtype i32 not supported");
    release_all((vq_tensor *[]){x, fi, ii, s, x5, i5, g, xi}, 8);
}

/* ---- split ---- */

static const struct split_case {
    int nx, n;
    int64_t x[3], axis, sizes[4];
} split_cases[] = {
    {1, 3, {6}, 0, {1, 2, 3}},
    {2, 3, {3, 5}, 1, {2, 0, 3}},
    {2, 1, {3, 5}, -2, {3}},
    {3, 4, {2, 4, 3}, 1, {1, 1, 1, 1}},
    {2, 2, {0, 4}, 1, {1, 3}},
    {2, 2, {4, 0}, 0, {2, 2}},
    {3, 2, {2, 3, 1}, 2, {0, 1}},
    {3, 2, {2, 3, 4}, -1, {3, 1}},
};

/* Output j's element at coordinates c is X's at c shifted by the sizes
 * before j along the axis. */
static void check_split_outputs(const struct split_case *s, vq_tensor *x, vq_tensor **out,
                                vq_dtype dt)
{
    int axis = (int)(s->axis < 0 ? s->axis + s->nx : s->axis);
    int64_t at = 0;
    for (int j = 0; j < s->n; j++) {
        int64_t os[3];
        memcpy(os, s->x, sizeof os);
        os[axis] = s->sizes[j];
        int64_t n = count(s->nx, os);
        double *w = want_buffer(n);
        for (int64_t e = 0; e < n; e++) {
            int64_t c[3];
            unravel(e, s->nx, os, c);
            c[axis] += at;
            w[e] = oc_get(x, ravel(s->nx, s->x, c));
        }
        assert_values(out[j], dt, s->nx, os, w);
        free(w);
        at += s->sizes[j];
    }
}

static int split_attrs(const struct split_case *s, vq_attr *at)
{
    at[0] = VQ_ATTR_I("axis", s->axis);
    at[1] = VQ_ATTR_IS("sizes", s->sizes, s->n);
    return 2;
}

Test(ops_index, split_matches_the_plain_loop_in_every_dtype)
{
    for (int c = 0; c < N_OF(split_cases); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++) {
            const struct split_case *s = &split_cases[c];
            vq_tensor *x = values(all_dtypes[d], s->nx, s->x), *out[4];
            vq_attr at[2];
            oc_run("split", &x, 1, out, s->n, at, split_attrs(s, at));
            check_split_outputs(s, x, out, all_dtypes[d]);
            release_all(out, s->n);
            vq_tensor_release(x);
        }
}

Test(ops_index, split_gradients_match_finite_differences)
{
    for (int c = 0; c < N_OF(split_cases); c++) {
        const struct split_case *s = &split_cases[c];
        vq_tensor *x = values(VQ_F64, s->nx, s->x);
        vq_attr at[2];
        oc_grad_check("split", &x, 1, s->n, at, split_attrs(s, at), 1u, &rng);
        vq_tensor_release(x);
    }
}

/* split_grad(X, G...; absent): G_j's values where j is not absent, zeros
 * where it is (its G, the forward output, holds NaN here: never read). */
Test(ops_index, split_grad_gives_zeros_for_absent_outputs)
{
    const struct split_case *s = &split_cases[3]; /* [2, 4, 3] in four along dim 1 */
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        vq_tensor *in[5];
        in[0] = values(dt, 3, s->x);
        for (int j = 0; j < 4; j++) {
            in[1 + j] = values(dt, 3, (int64_t[]){2, 1, 3});
            for (int64_t e = 0; j % 2 && e < 6; e++)
                oc_set(in[1 + j], e, NAN);
        }
        int64_t absent[2] = {3, 1};
        vq_attr at[2] = {VQ_ATTR_I("axis", 1), VQ_ATTR_IS("absent", absent, 2)};
        vq_tensor *dx = oc_run1("split_grad", in, 5, at, 2);
        double w[24];
        for (int64_t e = 0; e < 24; e++) {
            int64_t c[3];
            unravel(e, 3, s->x, c);
            int j = (int)c[1];
            w[e] = j % 2 ? 0 : oc_get(in[1 + j], c[0] * 3 + c[2]);
        }
        assert_values(dx, dt, 3, s->x, w);
        vq_tensor_release(dx);
        release_all(in, 5);
    }
}

Test(ops_index, bad_split_attributes_name_the_values)
{
    vq_tensor *x = zeros(VQ_F32, 1, (int64_t[]){6});
    int64_t s2[2] = {2, 4}, s5[3] = {1, 1, 3}, sn[2] = {7, -1};
    vq_attr at = VQ_ATTR_IS("sizes", s2, 2);
    expect_error("split", &x, 1, 3, &at, 1, "split: attribute sizes: has 2 entries for 3 outputs");
    at = VQ_ATTR_IS("sizes", s5, 3);
    expect_error("split", &x, 1, 3, &at, 1,
                 "split: attribute sizes: sum to 5, but X's dim 0 is 6 (X is [6])");
    at = VQ_ATTR_IS("sizes", sn, 2);
    expect_error("split", &x, 1, 2, &at, 1, "split: attribute sizes: entry 1 is -1");
    expect_error("split", &x, 1, 1, NULL, 0, "split: attribute sizes (ints) is required");
    vq_tensor *sc = zeros(VQ_F32, 0, NULL);
    at = VQ_ATTR_IS("sizes", s2, 1);
    expect_error("split", &sc, 1, 1, &at, 1,
                 "split: input X (slot 0): is a scalar (rank 0); split needs at least one dim");
    vq_attr ax[2] = {VQ_ATTR_IS("sizes", s2, 2), VQ_ATTR_I("axis", -2)};
    expect_error("split", &x, 1, 2, ax, 2,
                 "split: attribute axis: axis -2 is outside [-1, 1) for 1 dims");

    vq_tensor *g2 = zeros(VQ_F32, 1, (int64_t[]){2}), *g3 = zeros(VQ_F32, 1, (int64_t[]){3});
    vq_tensor *m = zeros(VQ_F32, 2, (int64_t[]){2, 1}), *g64 = zeros(VQ_F64, 1, (int64_t[]){4});
    vq_tensor *in[3] = {x, g2, g3};
    expect_error("split_grad", in, 3, 1, NULL, 0,
                 "split_grad: the dOut inputs' dims 0 sum to 5, but X's is 6");
    int64_t bad[1] = {2};
    at = VQ_ATTR_IS("absent", bad, 1);
    expect_error("split_grad", in, 3, 1, &at, 1,
                 "split_grad: attribute absent: entry 0 is 2: not a new position among the 2 "
                 "dOut inputs");
    in[2] = m;
    expect_error("split_grad", in, 3, 1, NULL, 0, "split_grad: input dOut (slot 2): has 2 dims");
    in[2] = g64;
    expect_error("split_grad", in, 3, 1, NULL, 0,
                 "split_grad: input dOut (slot 2): dtype f64 differs from X's f32");
    release_all((vq_tensor *[]){x, sc, g2, g3, m, g64}, 6);
}

/* ---- split in a program: the variadic output slot, autodiff ---- */

/* x [2, 6] (a parameter) split along dim 1 into a [2, 1], b [2, 2] and
 * c [2, 3]; y = mean(a) + mean(c) when use_b is false (no gradient flows
 * into b: split_grad), else mean(a) + mean(b) + mean(c) (concat). Encoded
 * and decoded, run, differentiated; x@GRAD is 1 / numel of its piece where
 * that piece is used, 0 elsewhere. */
static void split_program(bool use_b)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    const int64_t xs[2] = {2, 6}, s[3][2] = {{2, 1}, {2, 2}, {2, 3}};
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F64, 2, xs, true), 0);
    const char *piece[3] = {"a", "b", "c"}, *m[3] = {"ma", "mb", "mc"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(vq_program_add_var(p, 0, piece[i], VQ_F64, 2, s[i], false), 0);
        cr_assert_eq(vq_program_add_var(p, 0, m[i], VQ_F64, 0, NULL, false), 0);
    }
    cr_assert_eq(vq_program_add_var(p, 0, "t", VQ_F64, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "y", VQ_F64, 0, NULL, false), 0);
    int64_t sizes[3] = {1, 2, 3};
    vq_attr at[2] = {VQ_ATTR_I("axis", 1), VQ_ATTR_IS("sizes", sizes, 3)};
    const char *x = "x";
    cr_assert_geq(vq_program_add_op(p, 0, "split", &x, 1, piece, 3, at, 2), 0, "%s",
                  vq_errmsg());
    for (int i = 0; i < 3; i++)
        cr_assert_geq(vq_program_add_op(p, 0, "mean", &piece[i], 1, &m[i], 1, NULL, 0), 0);
    const char *sum1[2] = {"ma", use_b ? "mb" : "mc"}, *sum2[2] = {"t", use_b ? "mc" : "ma"};
    const char *t = "t", *y = "y";
    cr_assert_geq(vq_program_add_op(p, 0, "add", sum1, 2, &t, 1, NULL, 0), 0);
    if (use_b)
        cr_assert_geq(vq_program_add_op(p, 0, "add", sum2, 2, &y, 1, NULL, 0), 0);
    else
        cr_assert_geq(vq_program_add_op(p, 0, "scale", &t, 1, &y, 1, NULL, 0), 0);

    void *buf;
    size_t len;
    cr_assert_eq(vq_program_encode(p, &buf, &len), 0, "%s", vq_errmsg());
    vq_program *q;
    cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
    free(buf);
    vq_program_free(p);
    cr_assert_eq(vq_append_backward(q, "y", NULL, 0), 1, "%s", vq_errmsg());
    char *dump = NULL;
    size_t dlen = 0;
    FILE *f = open_memstream(&dump, &dlen);
    cr_assert(f);
    cr_assert_eq(vq_program_dump(q, f), 0, "%s", vq_errmsg());
    fclose(f);
    cr_assert(strstr(dump, use_b ? "concat" : "split_grad"), "%s", dump);
    free(dump);

    vq_tensor *xv = values(VQ_F64, 2, xs);
    vq_engine *e;
    vq_exec *ex;
    vq_scope *sc;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&sc), 0);
    cr_assert_eq(vq_scope_set(sc, "x", xv), 0);
    vq_fetch fe[3] = {{"y", NULL}, {"x@GRAD", NULL}, {"b", NULL}};
    cr_assert_eq(vq_exec_run(ex, q, sc, NULL, 0, fe, 3), 0, "%s", vq_errmsg());
    double mean[3] = {0, 0, 0}, want_y = 0, g[12];
    for (int64_t e2 = 0; e2 < 12; e2++) {
        int64_t col = e2 % 6;
        int piece_of = col < 1 ? 0 : col < 3 ? 1 : 2;
        mean[piece_of] += oc_get(xv, e2) / (double)(2 * sizes[piece_of]);
        g[e2] = piece_of == 1 && !use_b ? 0 : 1.0 / (double)(2 * sizes[piece_of]);
    }
    want_y = mean[0] + mean[2] + (use_b ? mean[1] : 0);
    cr_assert(fabs(oc_get(fe[0].tensor, 0) - want_y) < 1e-12, "y %.17g, expected %.17g",
              oc_get(fe[0].tensor, 0), want_y);
    oc_assert_close(fe[1].tensor, 2, xs, g, 1e-15, 0);
    for (int64_t e2 = 0; e2 < 4; e2++)
        cr_assert_eq(oc_get(fe[2].tensor, e2), oc_get(xv, (e2 / 2) * 6 + 1 + e2 % 2));
    release_all((vq_tensor *[]){fe[0].tensor, fe[1].tensor, fe[2].tensor, xv}, 4);
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_engine_free(e);
    vq_program_free(q);
}

Test(ops_index, split_in_a_program_differentiates_with_a_gradient_into_every_output)
{
    split_program(true);
}

Test(ops_index, split_in_a_program_differentiates_with_an_output_left_unused)
{
    split_program(false);
}

/* ---- argmax, argmin ---- */

static const struct arg_case {
    int nx;
    int64_t x[3], axis;
} arg_cases[] = {
    {1, {7}, 0},        {2, {3, 4}, 0},    {2, {3, 4}, 1},   {2, {3, 4}, -1},
    {3, {2, 3, 4}, 1},  {2, {1, 4}, 0},    {3, {2, 1, 3}, 1}, {2, {0, 3}, 1},
    {3, {2, 5, 1}, -2},
};

/* The position the op must pick along the axis of lane (before, after):
 * NaN is the extremum; ties go to the first, or the last with last. */
static double *ref_arg(const struct arg_case *a, vq_tensor *x, bool max, bool last)
{
    int axis = (int)(a->axis < 0 ? a->axis + a->nx : a->axis);
    int64_t outer = 1, inner = 1, len = a->x[axis];
    for (int d = 0; d < axis; d++)
        outer *= a->x[d];
    for (int d = axis + 1; d < a->nx; d++)
        inner *= a->x[d];
    double *w = want_buffer(outer * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = -1;
            bool nan_seen = false;
            double bv = 0;
            for (int64_t l = 0; l < len; l++) {
                double v = oc_get(x, (o * len + l) * inner + i);
                if (isnan(v)) {
                    if (!nan_seen || last)
                        best = l;
                    nan_seen = true;
                } else if (!nan_seen && (best < 0 || (max ? v > bv : v < bv) ||
                                         (last && v == bv))) {
                    best = l;
                    bv = v;
                }
            }
            w[o * inner + i] = (double)best;
        }
    return w;
}

Test(ops_index, argmax_and_argmin_match_the_plain_loop_with_ties_and_nan)
{
    static const char *const ops[2] = {"argmax", "argmin"};
    for (int c = 0; c < N_OF(arg_cases); c++)
        for (int d = 0; d < N_OF(numerics); d++)
            for (int flags = 0; flags < 8; flags++) {
                const struct arg_case *a = &arg_cases[c];
                bool max = flags & 1, keep = flags & 2, last = flags & 4;
                vq_dtype dt = numerics[d];
                /* few distinct values: ties; floats get a NaN now and then */
                vq_tensor *x = oc_rand(&rng, dt, a->nx, a->x, -2, 3);
                for (int64_t e = 0; !is_int(dt) && e < vq_tensor_numel(x); e++)
                    if (oc_next(&rng) % 7 == 0)
                        oc_set(x, e, NAN);
                vq_attr at[3] = {VQ_ATTR_I("axis", a->axis), VQ_ATTR_B("keepdim", keep),
                                 VQ_ATTR_B("select_last_index", last)};
                vq_tensor *out = oc_run1(ops[!max], &x, 1, at, 3);
                int axis = (int)(a->axis < 0 ? a->axis + a->nx : a->axis), no = 0;
                int64_t os[3];
                for (int k = 0; k < a->nx; k++)
                    if (k != axis)
                        os[no++] = a->x[k];
                    else if (keep)
                        os[no++] = 1;
                double *w = ref_arg(a, x, max, last);
                assert_values(out, VQ_I64, no, os, w);
                free(w);
                vq_tensor_release(out);
                vq_tensor_release(x);
            }
}

Test(ops_index, argmax_defaults_keep_the_dim_and_pick_the_first_of_ties)
{
    double xv[6] = {1, 5, 2, 2, 0, 2};
    vq_tensor *x = oc_from(VQ_F32, 2, (int64_t[]){2, 3}, xv);
    vq_tensor *out = oc_run1("argmax", &x, 1, NULL, 0);
    double want[3] = {1, 0, 0};
    assert_values(out, VQ_I64, 2, (int64_t[]){1, 3}, want);
    vq_tensor_release(out);
    vq_attr at[2] = {VQ_ATTR_I("axis", 1), VQ_ATTR_B("select_last_index", true)};
    out = oc_run1("argmin", &x, 1, at, 2);
    double want2[2] = {0, 1};
    assert_values(out, VQ_I64, 2, (int64_t[]){2, 1}, want2);
    vq_tensor_release(out);
    vq_tensor_release(x);
}

Test(ops_index, argmax_and_argmin_have_no_gradient_and_refuse_an_empty_axis)
{
    cr_assert_null(vq__op_find("argmax")->grad);
    cr_assert_null(vq__op_find("argmin")->grad);
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){3, 0});
    vq_attr at = VQ_ATTR_I("axis", 1);
    expect_error("argmax", &x, 1, 1, &at, 1,
                 "argmax: input X (slot 0): dim 1 (the axis) of [3,0] is 0: no element to pick");
    vq_tensor *b = zeros(VQ_BOOL, 1, (int64_t[]){3});
    expect_error("argmin", &b, 1, 1, NULL, 0, "argmin: input X (slot 0): dtype bool not supported");
    vq_tensor *s = zeros(VQ_F64, 0, NULL);
    expect_error("argmin", &s, 1, 1, NULL, 0,
                 "argmin: input X (slot 0): is a scalar (rank 0); argmin needs at least one dim");
    release_all((vq_tensor *[]){x, b, s}, 3);
}

/* ---- reduce_max, reduce_min ---- */

static const struct red_case {
    int ndim;
    int64_t shape[5];
    int naxes;
    int64_t axes[5];
} red_cases[] = {
    {2, {3, 4}, 0, {0}},       {2, {3, 4}, 1, {0}},          {2, {3, 4}, 1, {-1}},
    {2, {3, 4}, 2, {1, 0}},    {3, {2, 3, 4}, 2, {0, 2}},    {3, {2, 0, 3}, 1, {1}},
    {3, {2, 0, 3}, 1, {0}},    {3, {1, 5, 1}, 2, {0, 2}},    {0, {0}, 0, {0}},
    {4, {4, 1, 3, 2}, 2, {1, 3}}, {5, {2, 3, 1, 2, 3}, 3, {0, 2, 4}}, {1, {7}, 1, {0}},
};

static bool reduced(const struct red_case *r, int d)
{
    if (r->naxes == 0)
        return true;
    for (int i = 0; i < r->naxes; i++)
        if ((r->axes[i] + r->ndim) % r->ndim == d)
            return true;
    return false;
}

/* Out's shape for keepdim; returns its rank. */
static int red_shape(const struct red_case *r, bool keep, int64_t *os)
{
    int n = 0;
    for (int d = 0; d < r->ndim; d++)
        if (!reduced(r, d))
            os[n++] = r->shape[d];
        else if (keep)
            os[n++] = 1;
    return n;
}

/* The index in Out (keepdim: it changes nothing) of X's element e. */
static int64_t red_out_index(const struct red_case *r, int64_t e)
{
    int64_t c[5], o = 0;
    unravel(e, r->ndim, r->shape, c);
    for (int d = 0; d < r->ndim; d++)
        if (!reduced(r, d))
            o = o * r->shape[d] + c[d];
    return o;
}

/* The extremum of each output's elements, in double: NaN propagates, the
 * empty set gives the identity (lowest / highest of dt). */
static double *ref_extremum(const struct red_case *r, vq_tensor *x, bool max, vq_dtype dt)
{
    int64_t os[5];
    int no = red_shape(r, false, os);
    int64_t n = count(no, os);
    double lo = dt == VQ_I32 ? (double)INT32_MIN : dt == VQ_I64 ? (double)INT64_MIN : -INFINITY;
    double hi = dt == VQ_I32 ? (double)INT32_MAX : dt == VQ_I64 ? (double)INT64_MAX : INFINITY;
    double *w = want_buffer(n);
    for (int64_t i = 0; i < n; i++)
        w[i] = max ? lo : hi;
    for (int64_t e = 0; e < count(r->ndim, r->shape); e++) {
        double v = oc_get(x, e), *a = &w[red_out_index(r, e)];
        if (!isnan(*a) && (isnan(v) || (max ? v > *a : v < *a)))
            *a = v;
    }
    return w;
}

Test(ops_index, reduce_max_and_min_match_the_plain_loop_in_every_numeric_dtype)
{
    for (int c = 0; c < N_OF(red_cases); c++)
        for (int d = 0; d < N_OF(numerics); d++)
            for (int flags = 0; flags < 4; flags++) {
                const struct red_case *r = &red_cases[c];
                bool max = flags & 1, keep = flags & 2;
                vq_dtype dt = numerics[d];
                vq_tensor *x = values(dt, r->ndim, r->shape);
                vq_attr at[2] = {VQ_ATTR_IS("axes", r->axes, r->naxes),
                                 VQ_ATTR_B("keepdim", keep)};
                vq_tensor *out = oc_run1(max ? "reduce_max" : "reduce_min", &x, 1, at, 2);
                int64_t os[5];
                int no = red_shape(r, keep, os);
                double *w = ref_extremum(r, x, max, dt);
                assert_values(out, dt, no, os, w);
                free(w);
                vq_tensor_release(out);
                vq_tensor_release(x);
            }
}

Test(ops_index, reduce_max_propagates_nan_and_orders_signed_zeros)
{
    double xv[6] = {1, NAN, 2, -0.0, 0.0, -0.0};
    vq_tensor *x = oc_from(VQ_F64, 2, (int64_t[]){2, 3}, xv);
    vq_attr at = VQ_ATTR_IS("axes", (int64_t[]){1}, 1);
    vq_tensor *mx = oc_run1("reduce_max", &x, 1, &at, 1);
    vq_tensor *mn = oc_run1("reduce_min", &x, 1, &at, 1);
    const double *a = vq_tensor_data(mx), *b = vq_tensor_data(mn);
    cr_assert(isnan(a[0]) && isnan(b[0]));
    cr_assert(a[1] == 0 && !signbit(a[1]), "max of -0, +0, -0 is %g", a[1]);
    cr_assert(b[1] == 0 && signbit(b[1]), "min of -0, +0, -0 is %g", b[1]);
    release_all((vq_tensor *[]){x, mx, mn}, 3);
}

Test(ops_index, extrema_of_an_empty_set_are_the_dtype_s_identity)
{
    const int64_t shape[2] = {2, 0};
    vq_attr at = VQ_ATTR_IS("axes", (int64_t[]){1}, 1);
    for (int d = 0; d < N_OF(numerics); d++) {
        vq_dtype dt = numerics[d];
        vq_tensor *x = zeros(dt, 2, shape);
        vq_tensor *mx = oc_run1("reduce_max", &x, 1, &at, 1);
        vq_tensor *mn = oc_run1("reduce_min", &x, 1, &at, 1);
        for (int i = 0; i < 2; i++) {
            switch (dt) {
            case VQ_F32:
                cr_assert(((float *)vq_tensor_data(mx))[i] == -INFINITY);
                cr_assert(((float *)vq_tensor_data(mn))[i] == INFINITY);
                break;
            case VQ_F64:
                cr_assert(((double *)vq_tensor_data(mx))[i] == -INFINITY);
                cr_assert(((double *)vq_tensor_data(mn))[i] == INFINITY);
                break;
            case VQ_I32:
                cr_assert_eq(((int32_t *)vq_tensor_data(mx))[i], INT32_MIN);
                cr_assert_eq(((int32_t *)vq_tensor_data(mn))[i], INT32_MAX);
                break;
            default:
                cr_assert_eq(((int64_t *)vq_tensor_data(mx))[i], INT64_MIN);
                cr_assert_eq(((int64_t *)vq_tensor_data(mn))[i], INT64_MAX);
                break;
            }
        }
        release_all((vq_tensor *[]){x, mx, mn}, 3);
    }
}

Test(ops_index, reduce_max_and_min_gradients_match_finite_differences)
{
    /* continuous random values: no ties, and a step of 1e-6 keeps the
     * extremum where it is */
    for (int c = 0; c < N_OF(red_cases); c++)
        for (int flags = 0; flags < 4; flags++) {
            const struct red_case *r = &red_cases[c];
            vq_tensor *x = values(VQ_F64, r->ndim, r->shape);
            vq_attr at[2] = {VQ_ATTR_IS("axes", r->axes, r->naxes),
                             VQ_ATTR_B("keepdim", flags & 2)};
            oc_grad_check(flags & 1 ? "reduce_max" : "reduce_min", &x, 1, 1, at, 2, 1u, &rng);
            vq_tensor_release(x);
        }
}

Test(ops_index, reduce_minmax_grad_splits_dout_evenly_among_ties)
{
    double xv[9] = {1, 3, 3, 2, 2, 2, 1, NAN, NAN}, gv[3] = {6, 9, 4};
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        vq_tensor *x = oc_from(dt, 2, (int64_t[]){3, 3}, xv);
        vq_tensor *g = oc_from(dt, 1, (int64_t[]){3}, gv);
        vq_attr at = VQ_ATTR_IS("axes", (int64_t[]){-1}, 1);
        for (int max = 0; max < 2; max++) {
            const char *op = max ? "reduce_max" : "reduce_min";
            vq_tensor *m = oc_run1(op, &x, 1, &at, 1);
            vq_attr gat[2] = {at, VQ_ATTR_S("op", op)};
            vq_tensor *dx = oc_run1("reduce_minmax_grad", (vq_tensor *[]){x, m, g}, 3, gat, 2);
            double wmax[9] = {0, 3, 3, 3, 3, 3, 0, 2, 2}, wmin[9] = {6, 0, 0, 3, 3, 3, 0, 2, 2};
            assert_values(dx, dt, 2, (int64_t[]){3, 3}, max ? wmax : wmin);
            release_all((vq_tensor *[]){m, dx}, 2);
        }
        release_all((vq_tensor *[]){x, g}, 2);
    }
}

Test(ops_index, bad_reduce_max_inputs_name_the_attribute_or_slot)
{
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){2, 3});
    vq_attr at = VQ_ATTR_IS("axes", (int64_t[]){2}, 1);
    expect_error("reduce_max", &x, 1, 1, &at, 1,
                 "reduce_max: attribute axes: axis 2 is outside [-2, 2) for 2 dims");
    at = VQ_ATTR_IS("axes", ((int64_t[]){0, -2}), 2);
    expect_error("reduce_min", &x, 1, 1, &at, 1,
                 "reduce_min: attribute axes: axis -2 repeats axis 0");
    vq_tensor *b = zeros(VQ_BOOL, 1, (int64_t[]){3});
    expect_error("reduce_max", &b, 1, 1, NULL, 0,
                 "reduce_max: input X (slot 0): dtype bool not supported");
    vq_tensor *m = zeros(VQ_F32, 1, (int64_t[]){2}), *g = zeros(VQ_F32, 1, (int64_t[]){3});
    vq_attr gat[2] = {VQ_ATTR_S("op", "sum"), VQ_ATTR_IS("axes", (int64_t[]){1}, 1)};
    expect_error("reduce_minmax_grad", (vq_tensor *[]){x, m, m}, 3, 1, gat, 2,
                 "reduce_minmax_grad: attribute op: \"sum\" is not reduce_max or reduce_min");
    gat[0] = VQ_ATTR_S("op", "reduce_max");
    expect_error("reduce_minmax_grad", (vq_tensor *[]){x, m, g}, 3, 1, gat, 2,
                 "reduce_minmax_grad: input dOut (slot 2): shape [3] is not X's reduced shape "
                 "[2]");
    release_all((vq_tensor *[]){x, b, m, g}, 4);
}

/* ---- expand ---- */

static const struct expand_case {
    int nx, ns, no;
    int64_t x[3], shape[3], out[3];
} expand_cases[] = {
    {1, 2, 2, {3}, {2, 3}, {2, 3}},
    {2, 2, 2, {3, 1}, {3, 4}, {3, 4}},
    {2, 2, 2, {3, 1}, {1, 4}, {3, 4}},      /* a 1 in shape keeps X's dim */
    {3, 2, 3, {2, 1, 3}, {4, 1}, {2, 4, 3}},
    {2, 1, 2, {2, 3}, {3}, {2, 3}},         /* shape shorter than X */
    {1, 1, 1, {1}, {0}, {0}},
    {0, 2, 2, {0}, {2, 2}, {2, 2}},         /* a scalar */
    {2, 2, 2, {0, 1}, {1, 5}, {0, 5}},
    {2, 0, 2, {1, 1}, {0}, {1, 1}},
    {1, 3, 3, {4}, {1, 1, 4}, {1, 1, 4}},
};

Test(ops_index, expand_broadcasts_like_numpy_in_every_dtype)
{
    for (int c = 0; c < N_OF(expand_cases); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++) {
            const struct expand_case *k = &expand_cases[c];
            vq_tensor *x = values(all_dtypes[d], k->nx, k->x);
            vq_attr at = VQ_ATTR_IS("shape", k->shape, k->ns);
            vq_tensor *out = oc_run1("expand", &x, 1, &at, 1);
            int64_t n = count(k->no, k->out);
            double *w = want_buffer(n);
            for (int64_t e = 0; e < n; e++)
                w[e] = oc_get(x, oc_bcast_index(e, k->no, k->out, k->nx, k->x));
            assert_values(out, all_dtypes[d], k->no, k->out, w);
            free(w);
            vq_tensor_release(out);
            vq_tensor_release(x);
        }
}

Test(ops_index, expand_gradients_match_finite_differences)
{
    for (int c = 0; c < N_OF(expand_cases); c++) {
        const struct expand_case *k = &expand_cases[c];
        vq_tensor *x = values(VQ_F64, k->nx, k->x);
        vq_attr at = VQ_ATTR_IS("shape", k->shape, k->ns);
        oc_grad_check("expand", &x, 1, 1, &at, 1, 1u, &rng);
        vq_tensor_release(x);
    }
}

Test(ops_index, bad_expand_shapes_name_the_dims)
{
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){2, 3});
    vq_attr at = VQ_ATTR_IS("shape", ((int64_t[]){4, 2}), 2);
    expect_error("expand", &x, 1, 1, &at, 1,
                 "expand: attribute shape: [4,2] does not broadcast with X's [2,3] (dim 0: 2 vs "
                 "4)");
    at = VQ_ATTR_IS("shape", ((int64_t[]){1, -3}), 2);
    expect_error("expand", &x, 1, 1, &at, 1, "expand: attribute shape: entry 1 is -3");
    at = VQ_ATTR_IS("shape", ((int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}), 9);
    expect_error("expand", &x, 1, 1, &at, 1, "expand: attribute shape: has 9 dims, more than 8");
    vq_tensor_release(x);
}

/* ---- tile ---- */

static const struct tile_case {
    int nx;
    int64_t x[3], reps[3];
} tile_cases[] = {
    {1, {3}, {2}},          {2, {2, 3}, {2, 1}}, {2, {2, 3}, {1, 3}}, {3, {2, 1, 2}, {2, 3, 2}},
    {0, {0}, {0}},          {2, {2, 3}, {0, 2}}, {2, {0, 3}, {2, 2}}, {2, {1, 1}, {3, 1}},
    {3, {1, 2, 3}, {1, 1, 1}},
};

Test(ops_index, tile_repeats_x_along_every_dim_in_every_dtype)
{
    for (int c = 0; c < N_OF(tile_cases); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++) {
            const struct tile_case *k = &tile_cases[c];
            vq_tensor *x = values(all_dtypes[d], k->nx, k->x);
            vq_attr at = VQ_ATTR_IS("repeats", k->reps, k->nx);
            vq_tensor *out = oc_run1("tile", &x, 1, &at, 1);
            int64_t os[3], oc[3];
            for (int i = 0; i < k->nx; i++)
                os[i] = k->x[i] * k->reps[i];
            int64_t n = count(k->nx, os);
            double *w = want_buffer(n);
            for (int64_t e = 0; e < n; e++) {
                unravel(e, k->nx, os, oc);
                for (int i = 0; i < k->nx; i++)
                    oc[i] %= k->x[i];
                w[e] = oc_get(x, ravel(k->nx, k->x, oc));
            }
            assert_values(out, all_dtypes[d], k->nx, os, w);
            free(w);
            vq_tensor_release(out);
            vq_tensor_release(x);
        }
}

Test(ops_index, tile_gradients_match_finite_differences)
{
    for (int c = 0; c < N_OF(tile_cases); c++) {
        const struct tile_case *k = &tile_cases[c];
        vq_tensor *x = values(VQ_F64, k->nx, k->x);
        vq_attr at = VQ_ATTR_IS("repeats", k->reps, k->nx);
        oc_grad_check("tile", &x, 1, 1, &at, 1, 1u, &rng);
        vq_tensor_release(x);
    }
}

Test(ops_index, bad_repeats_name_the_entry)
{
    vq_tensor *x = zeros(VQ_F32, 2, (int64_t[]){2, 3});
    vq_attr at = VQ_ATTR_IS("repeats", ((int64_t[]){2}), 1);
    expect_error("tile", &x, 1, 1, &at, 1, "tile: attribute repeats: has 1 entries for X's 2 dims");
    at = VQ_ATTR_IS("repeats", ((int64_t[]){2, -1}), 2);
    expect_error("tile", &x, 1, 1, &at, 1, "tile: attribute repeats: entry 1 is -1, below 0");
    at = VQ_ATTR_IS("repeats", ((int64_t[]){((int64_t)1 << 61) + 1, 1}), 2);
    expect_error("tile", &x, 1, 1, &at, 1, "tile: attribute repeats: entry 0 (2305843009213693953) "
                                           "times X's dim 2 is past 2^62");
    vq_tensor *g = zeros(VQ_F32, 2, (int64_t[]){2, 5});
    at = VQ_ATTR_IS("repeats", ((int64_t[]){1, 2}), 2);
    expect_error("tile_grad", (vq_tensor *[]){x, g}, 2, 1, &at, 1,
                 "tile_grad: input dOut (slot 1): shape [2,5] is not tile's output shape [2,6]");
    release_all((vq_tensor *[]){x, g}, 2);
}

/* ---- pad ---- */

static const char *const modes[3] = {"constant", "reflect", "edge"};

static const struct pad_case {
    int nx;
    int64_t x[3], pads[6];
    unsigned modes; /* bit m: valid for modes[m] */
} pad_cases[] = {
    {1, {5}, {2, 3}, 7},
    {2, {3, 4}, {1, 0, 2, 1}, 7},
    {2, {3, 4}, {-1, 2, 0, -1}, 7},          /* crop and pad */
    {3, {2, 3, 4}, {0, 1, 2, 1, 0, 2}, 7},
    {1, {4}, {0, 0}, 7},
    {2, {0, 3}, {1, 0, 1, 2}, 1},            /* an empty dim padded: constant only */
    {1, {3}, {-3, 0}, 7},                    /* cropped away */
    {2, {1, 3}, {0, 2, 0, 2}, 7},
    {0, {0}, {0}, 7},                        /* a scalar */
    {2, {4, 2}, {3, 1, 0, 1}, 7},            /* reflect at its limits */
    {1, {3}, {-1, 1}, 7},                    /* crop one end, pad the other */
    {2, {2, 3}, {-1, -1, 4, 0}, 5},          /* edge replicates the kept row */
};

/* Out's element e from X, the geometry worked out for each dim: crop, then
 * pad. Returns NAN for the constant. */
static double ref_pad_element(const struct pad_case *k, vq_tensor *x, int mode, int64_t e,
                              const int64_t *os)
{
    int64_t oc[3], xc[3];
    unravel(e, k->nx, os, oc);
    for (int d = 0; d < k->nx; d++) {
        int64_t b = k->pads[d], en = k->pads[k->nx + d];
        int64_t lo = b < 0 ? -b : 0, pb = b > 0 ? b : 0;
        int64_t kept = k->x[d] - lo - (en < 0 ? -en : 0);
        int64_t j = oc[d] - pb;
        if (j < 0 || j >= kept) {
            if (mode == 0)
                return NAN;
            if (mode == 2)
                j = j < 0 ? 0 : kept - 1;
            else
                j = j < 0 ? -j : 2 * (kept - 1) - j;
        }
        xc[d] = lo + j;
    }
    return oc_get(x, ravel(k->nx, k->x, xc));
}

static int pad_attrs(const struct pad_case *k, int mode, double value, vq_attr *at)
{
    at[0] = VQ_ATTR_IS("pads", k->pads, 2 * k->nx);
    at[1] = VQ_ATTR_S("mode", modes[mode]);
    at[2] = VQ_ATTR_F("value", value);
    return 3;
}

Test(ops_index, pad_matches_the_plain_loop_in_every_mode_and_dtype)
{
    for (int c = 0; c < N_OF(pad_cases); c++)
        for (int mode = 0; mode < 3; mode++)
            for (int d = 0; d < N_OF(all_dtypes); d++) {
                const struct pad_case *k = &pad_cases[c];
                if (!(k->modes & (1u << mode)))
                    continue;
                vq_dtype dt = all_dtypes[d];
                double value = dt == VQ_BOOL ? 1 : is_int(dt) ? -7 : 1.5;
                vq_tensor *x = values(dt, k->nx, k->x);
                vq_attr at[3];
                vq_tensor *out = oc_run1("pad", &x, 1, at, pad_attrs(k, mode, value, at));
                int64_t os[3];
                for (int i = 0; i < k->nx; i++)
                    os[i] = k->x[i] + k->pads[i] + k->pads[k->nx + i];
                int64_t n = count(k->nx, os);
                double *w = want_buffer(n);
                for (int64_t e = 0; e < n; e++) {
                    w[e] = ref_pad_element(k, x, mode, e, os);
                    w[e] = isnan(w[e]) ? value : w[e];
                }
                assert_values(out, dt, k->nx, os, w);
                free(w);
                vq_tensor_release(out);
                vq_tensor_release(x);
            }
}

Test(ops_index, pad_modes_agree_with_numpy)
{
    /* numpy.pad([1, 2, 3], 2, mode) and its constant_values 0 */
    double xv[3] = {1, 2, 3};
    double want[3][7] = {{0, 0, 1, 2, 3, 0, 0}, {3, 2, 1, 2, 3, 2, 1}, {1, 1, 1, 2, 3, 3, 3}};
    vq_tensor *x = oc_from(VQ_F32, 1, (int64_t[]){3}, xv);
    for (int mode = 0; mode < 3; mode++) {
        vq_attr at[2] = {VQ_ATTR_IS("pads", ((int64_t[]){2, 2}), 2),
                         VQ_ATTR_S("mode", modes[mode])};
        vq_tensor *out = oc_run1("pad", &x, 1, at, mode ? 2 : 1);
        assert_values(out, VQ_F32, 1, (int64_t[]){7}, want[mode]);
        vq_tensor_release(out);
    }
    vq_tensor_release(x);
}

Test(ops_index, pad_gradients_match_finite_differences_in_every_mode)
{
    for (int c = 0; c < N_OF(pad_cases); c++)
        for (int mode = 0; mode < 3; mode++) {
            const struct pad_case *k = &pad_cases[c];
            if (!(k->modes & (1u << mode)))
                continue;
            vq_tensor *x = values(VQ_F64, k->nx, k->x);
            vq_attr at[3];
            oc_grad_check("pad", &x, 1, 1, at, pad_attrs(k, mode, 0.25, at), 1u, &rng);
            vq_tensor_release(x);
        }
}

Test(ops_index, bad_pads_modes_and_values_name_the_attribute_and_values)
{
    vq_tensor *x = zeros(VQ_F32, 1, (int64_t[]){3});
    vq_attr at[3] = {VQ_ATTR_IS("pads", ((int64_t[]){1, 1, 1, 1}), 4)};
    expect_error("pad", &x, 1, 1, at, 1,
                 "pad: attribute pads: has 4 entries; X has 1 dims, so it needs 2 (every dim's "
                 "begin, then every dim's end)");
    at[0] = VQ_ATTR_IS("pads", ((int64_t[]){-2, -2}), 2);
    expect_error("pad", &x, 1, 1, at, 1,
                 "pad: attribute pads: begin -2 and end -2 crop 4 elements from dim 0, which "
                 "has 3");
    at[0] = VQ_ATTR_IS("pads", ((int64_t[]){3, 0}), 2);
    at[1] = VQ_ATTR_S("mode", "reflect");
    expect_error("pad", &x, 1, 1, at, 2,
                 "pad: attribute pads: reflect pads dim 0 by 3 and 0, but needs pads smaller "
                 "than the dim (3 after crops)");
    at[0] = VQ_ATTR_IS("pads", ((int64_t[]){-1, 2}), 2);
    expect_error("pad", &x, 1, 1, at, 2,
                 "pad: attribute pads: reflect pads dim 0 by -1 and 2, but needs pads smaller "
                 "than the dim (2 after crops)");
    at[0] = VQ_ATTR_IS("pads", ((int64_t[]){-3, 1}), 2);
    at[1] = VQ_ATTR_S("mode", "edge");
    expect_error("pad", &x, 1, 1, at, 2,
                 "pad: attribute pads: edge pads dim 0 by -3 and 1, but the dim is empty (after "
                 "crops): no edge to repeat");
    at[1] = VQ_ATTR_S("mode", "wrap");
    expect_error("pad", &x, 1, 1, at, 2,
                 "pad: attribute mode: \"wrap\" is not constant, reflect or edge");
    vq_tensor *xi = zeros(VQ_I32, 1, (int64_t[]){3}), *xb = zeros(VQ_BOOL, 1, (int64_t[]){3});
    at[0] = VQ_ATTR_IS("pads", ((int64_t[]){1, 1}), 2);
    at[1] = VQ_ATTR_F("value", 0.5);
    expect_error("pad", &xi, 1, 1, at, 2,
                 "pad: attribute value: 0.5 is not a value of X's dtype i32");
    at[1] = VQ_ATTR_F("value", 3e9);
    expect_error("pad", &xi, 1, 1, at, 2,
                 "pad: attribute value: 3000000000 is not a value of X's dtype i32");
    at[1] = VQ_ATTR_F("value", 2);
    expect_error("pad", &xb, 1, 1, at, 2,
                 "pad: attribute value: 2 is not a value of X's dtype bool");
    vq_tensor *g = zeros(VQ_F32, 1, (int64_t[]){4});
    expect_error("pad_grad", (vq_tensor *[]){x, g}, 2, 1, at, 1,
                 "pad_grad: input dOut (slot 1): shape [4] is not pad's output shape [5]");
    release_all((vq_tensor *[]){x, xi, xb, g}, 4);
}

/* ---- preparation with unknown dims ---- */

static int infer(const char *type, int nin, vq__meta *in, const vq_attr *at, int nat, int nout,
                 vq__meta *out)
{
    const vq__op_def *def = vq__op_find(type);
    cr_assert(def, "no op %s", type);
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    return vq__op_infer(def, at, nat, nin, in, nout, out, params);
}

static void assert_meta(const vq__meta *m, int ndim, const int64_t *shape)
{
    cr_assert_eq(m->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(m->shape[d], shape[d], "dim %d is %lld, expected %lld", d,
                     (long long)m->shape[d], (long long)shape[d]);
}

Test(ops_index, unknown_dims_give_unknown_output_dims_where_they_matter)
{
    vq__meta out[2];
    vq__meta gin[2] = {{.dtype = VQ_F32, .ndim = 2, .shape = {-1, 4}},
                       {.dtype = VQ_I64, .ndim = 2, .shape = {-1, 2}}};
    cr_assert_eq(infer("gather", 2, gin, NULL, 0, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 3, (int64_t[]){-1, 2, 4});

    vq__meta x = {.dtype = VQ_F32, .ndim = 2, .shape = {-1, 1}};
    vq_attr at = VQ_ATTR_IS("shape", ((int64_t[]){3, 5}), 2);
    cr_assert_eq(infer("expand", 1, &x, &at, 1, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){3, 5});
    at = VQ_ATTR_IS("shape", ((int64_t[]){1, 1}), 2);
    cr_assert_eq(infer("expand", 1, &x, &at, 1, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){-1, 1});

    x.shape[1] = 2;
    at = VQ_ATTR_IS("repeats", ((int64_t[]){2, 3}), 2);
    cr_assert_eq(infer("tile", 1, &x, &at, 1, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){-1, 6});
    at = VQ_ATTR_IS("repeats", ((int64_t[]){0, 1}), 2);
    cr_assert_eq(infer("tile", 1, &x, &at, 1, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){0, 2});

    vq_attr pat[2] = {VQ_ATTR_IS("pads", ((int64_t[]){5, 1, 5, 1}), 4),
                      VQ_ATTR_S("mode", "reflect")};
    cr_assert_eq(infer("pad", 1, &x, pat, 2, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){-1, 4});
    /* a known dim too small for reflect is still found */
    pat[0] = VQ_ATTR_IS("pads", ((int64_t[]){5, 2, 5, 0}), 4);
    cr_assert_eq(infer("pad", 1, &x, pat, 2, 1, out), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reflect pads dim 1 by 2 and 0"), "%s", vq_errmsg());

    vq__meta s = {.dtype = VQ_F64, .ndim = 2, .shape = {2, -1}};
    vq_attr sat[2] = {VQ_ATTR_I("axis", 1), VQ_ATTR_IS("sizes", ((int64_t[]){3, 4}), 2)};
    cr_assert_eq(infer("split", 1, &s, sat, 2, 2, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){2, 3});
    assert_meta(&out[1], 2, (int64_t[]){2, 4});

    vq__meta a = {.dtype = VQ_I32, .ndim = 3, .shape = {-1, 5, -1}};
    vq_attr aat[2] = {VQ_ATTR_I("axis", 1), VQ_ATTR_B("keepdim", false)};
    cr_assert_eq(infer("argmax", 1, &a, aat, 2, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){-1, -1});
    cr_assert_eq(out[0].dtype, VQ_I64);
    /* an unknown axis dim may turn out empty: the kernel's infer finds it */
    a.shape[1] = -1;
    cr_assert_eq(infer("argmin", 1, &a, aat, 2, 1, out), 0, "%s", vq_errmsg());

    vq__meta r = {.dtype = VQ_F32, .ndim = 3, .shape = {-1, 3, -1}};
    vq_attr rat = VQ_ATTR_IS("axes", ((int64_t[]){1}), 1);
    cr_assert_eq(infer("reduce_max", 1, &r, &rat, 1, 1, out), 0, "%s", vq_errmsg());
    assert_meta(&out[0], 2, (int64_t[]){-1, -1});
}

Test(ops_index, signatures_list_slots_and_attributes)
{
    static const char *const want[][2] = {
        {"gather", "gather(X, Indices) -> Out; axis:int=0"},
        {"gather_grad", "gather_grad(X, Indices, dOut) -> dX; axis:int=0"},
        {"split", "split(X) -> Out...; axis:int=0 sizes:ints"},
        {"split_grad", "split_grad(X, dOut...) -> dX; axis:int=0 absent:ints=[]"},
        {"argmax", "argmax(X) -> Out; axis:int=0 keepdim:bool=true select_last_index:bool=false"},
        {"argmin", "argmin(X) -> Out; axis:int=0 keepdim:bool=true select_last_index:bool=false"},
        {"reduce_max", "reduce_max(X) -> Out; axes:ints=[] keepdim:bool=false"},
        {"reduce_min", "reduce_min(X) -> Out; axes:ints=[] keepdim:bool=false"},
        {"reduce_minmax_grad",
         "reduce_minmax_grad(X, Out, dOut) -> dX; op:string axes:ints=[] keepdim:bool=false"},
        {"expand", "expand(X, Shape?) -> Out; shape:ints=none"},
        {"tile", "tile(X, Repeats?) -> Out; repeats:ints=none"},
        {"tile_grad", "tile_grad(X, dOut) -> dX; repeats:ints=none"},
        {"pad", "pad(X) -> Out; pads:ints mode:string=constant value:float=0"},
        {"pad_grad", "pad_grad(X, dOut) -> dX; pads:ints mode:string=constant value:float=0"},
    };
    for (int i = 0; i < N_OF(want); i++)
        cr_assert_str_eq(vq_op_signature(want[i][0]), want[i][1]);
}
